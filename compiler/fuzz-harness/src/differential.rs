//! Compiled code vs the interpreter on the structure-aware target's models.

use arbitrary::Unstructured;
use nnc::interp;
use nnc::passes::PassManager;
use nnc_host::LoadedModel;

use crate::compare::{comparable_outputs, mismatch, Comparable};
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
    let comparable = comparable_outputs(&model);
    assert_eq!(got.len(), expected.len(), "number of outputs");
    for (k, (g, e)) in got.iter().zip(&expected).enumerate() {
        if let Some(m) = mismatch(
            g,
            e,
            comparable
                .get(k)
                .copied()
                .unwrap_or(Comparable::WithinTolerance),
        ) {
            panic!(
                "output {k} ('{}'): compiled and interpreted differ: {m}\nmodel: {model:?}\ninputs: {inputs:?}",
                imported.values[imported.outputs[k].0].name
            );
        }
    }
}

/// A random model whose inputs' axis 0 is named `N` and compiled once for `N` in 1..=3
/// (over symbolic shapes, or as one sample's graph in a loop where the samples are
/// independent, see [`nnc::passes::per_sample`]): the one
/// library runs 2 and 3 samples and must match the interpreter on the model imported
/// with `N` fixed at that value. A separability rule that accepts a node mixing samples
/// shows up here as a mismatch. Returns whether the case got that far.
pub fn dims_case(data: &[u8]) -> bool {
    use nnc::onnx::proto::{tensor_shape_proto::dimension, type_proto};
    use nnc::onnx::ranges::{DimRange, DimSite};
    use nnc::onnx::{import_model, ImportOptions};
    let mut u = Unstructured::new(data);
    let mut model = random_model(&mut u);
    let Some(graph) = model.graph.as_mut() else {
        return false;
    };
    for input in &mut graph.input {
        if let Some(type_proto::Value::TensorType(t)) =
            input.r#type.as_mut().and_then(|t| t.value.as_mut())
        {
            if let Some(d) = t.shape.as_mut().and_then(|s| s.dim.first_mut()) {
                d.value = Some(dimension::Value::DimParam("N".into()));
            }
        }
    }
    let ranged = ImportOptions {
        ranges: vec![DimRange {
            name: "N".into(),
            min: 1,
            max: 3,
            site: DimSite::Param,
        }],
        ..Default::default()
    };
    let Ok(imported) = import_model(&model, None, &ranged) else {
        return false;
    };
    if !imported.unsupported.is_empty() {
        return false;
    }
    let Ok(one_sample) = nnc::driver::prepare_graph(imported.graph, &PassManager::default()) else {
        return false;
    };
    // The separability rule under test is the sample loop's.
    if one_sample.sample_loop.is_none() {
        return false;
    }
    let options = CompileOptions::new(fuzz_target());
    let Ok(library) = LoadedModel::compile_with_options(&one_sample, &options) else {
        return false;
    };
    let comparable = comparable_outputs(&model);
    for k in [2usize, 3] {
        let mut fixed = ImportOptions::default();
        fixed.dims.insert("N".into(), k);
        let Ok(reference) = import_model(&model, None, &fixed) else {
            panic!("N={k}: the ranged import accepted a model the static one refuses\nmodel: {model:?}");
        };
        let reference = reference.graph;
        let inputs: Vec<_> = (reference.inputs.iter())
            .map(|v| {
                let ty = reference.ty(*v);
                tensor(&mut u, ty.dtype, &ty.shape)
            })
            .collect();
        let Ok(expected) = interp::run_graph(&reference, &inputs) else {
            return false;
        };
        let got = library
            .run(&inputs)
            .unwrap_or_else(|e| panic!("N={k}: the library refused: {e}\nmodel: {model:?}"));
        assert_eq!(got.len(), expected.len(), "number of outputs");
        for (j, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert_eq!(
                g.shape(),
                e.shape(),
                "N={k}: output {j}'s shape\nmodel: {model:?}"
            );
            if let Some(m) = mismatch(
                g,
                e,
                comparable
                    .get(j)
                    .copied()
                    .unwrap_or(Comparable::WithinTolerance),
            ) {
                panic!("N={k}: output {j}: one-sample library and interpreter differ: {m}\nmodel: {model:?}\ninputs: {inputs:?}");
            }
        }
    }
    true
}
