//! Compiled code vs the interpreter on the structure-aware target's models.

use arbitrary::Unstructured;
use nnc::interp;
use nnc::passes::PassManager;
use nnc_host::LoadedModel;

use crate::compare::{is_exact_op, mismatch};
use crate::pipeline::{fuzz_target, imported_graph};
use crate::random_model::{random_model, tensor};
use nnc::codegen::CompileOptions;

/// A random model ([`random_model`]) and random inputs (the rest of `data`): the
/// interpreter runs the imported graph, and the library compiled for this machine from
/// the optimized graph runs in this process. Panics when an output differs (see
/// [`mismatch`]); a model either side refuses ends the case.
pub fn differential_case(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let model = random_model(&mut u);
    let Some(imported) = imported_graph(&model) else {
        return;
    };
    let mut optimized = imported.clone();
    if PassManager::default().run(&mut optimized).is_err() {
        return;
    }
    let inputs: Vec<_> = imported
        .inputs
        .iter()
        .map(|v| {
            let ty = imported.ty(*v);
            tensor(&mut u, ty.dtype, &ty.shape)
        })
        .collect();
    let Ok(expected) = interp::run_graph(&imported, &inputs) else {
        return;
    };
    let options = CompileOptions::new(fuzz_target());
    let Ok(library) = LoadedModel::compile_with_options(&optimized, &options) else {
        return;
    };
    let Ok(got) = library.run(&inputs) else {
        return;
    };
    let exact = model
        .graph
        .iter()
        .flat_map(|g| &g.node)
        .all(|n| is_exact_op(&n.op_type));
    assert_eq!(got.len(), expected.len(), "number of outputs");
    for (k, (g, e)) in got.iter().zip(&expected).enumerate() {
        if let Some(m) = mismatch(g, e, exact) {
            panic!(
                "output {k} ('{}'): compiled and interpreted differ: {m}\nmodel: {model:?}\ninputs: {inputs:?}",
                imported.values[imported.outputs[k].0].name
            );
        }
    }
}
