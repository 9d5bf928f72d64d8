//! Runs ONNX backend-test cases (`model.onnx` + `test_data_set_*/{input,output}_K.pb`)
//! end to end: import, compile, link a .so, load it, run every data set, compare.
//!
//! Each case runs in its own process (`nnc conformance-case`), so a crash or hang in
//! generated code fails that case only.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use prost::Message;

use crate::codegen::{compile_graph, CompileOptions, Target};
use crate::driver::{artifact_bytes, ArtifactKind};
use crate::ir::Tensor;
use crate::onnx::proto::TensorProto;
use crate::onnx::tensor_proto::tensor_from_proto;
use crate::onnx::{load_model, ImportOptions};

pub const RTOL: f64 = 1e-3;
pub const ATOL: f64 = 1e-4;

/// Every directory below `root` that holds a `model.onnx`, sorted by name.
pub fn find_cases(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        if dir.join("model.onnx").is_file() {
            out.push(dir);
            continue;
        }
        if let Ok(rd) = std::fs::read_dir(&dir) {
            stack.extend(rd.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
        }
    }
    out.sort();
    out
}

fn read_pb(path: &Path) -> Result<Tensor, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let t =
        TensorProto::decode(bytes.as_slice()).map_err(|e| format!("{}: {e}", path.display()))?;
    tensor_from_proto(&t, None).map_err(|e| format!("{}: {e}", path.display()))
}

/// The numbered `prefix_K.pb` files of a data set, in order.
fn numbered(dir: &Path, prefix: &str) -> Result<Vec<Tensor>, String> {
    let mut out = vec![];
    loop {
        let p = dir.join(format!("{prefix}_{}.pb", out.len()));
        if !p.exists() {
            return Ok(out);
        }
        out.push(read_pb(&p)?);
    }
}

/// onnx's backend comparison: same dtype and shape; floats within rtol/atol with NaN
/// equal to NaN; everything else exactly.
pub fn compare(expected: &Tensor, actual: &Tensor) -> Result<(), String> {
    if expected.dtype() != actual.dtype() {
        return Err(format!(
            "dtype {} but expected {}",
            actual.dtype(),
            expected.dtype()
        ));
    }
    if expected.shape() != actual.shape() {
        return Err(format!(
            "shape {:?} but expected {:?}",
            actual.shape(),
            expected.shape()
        ));
    }
    if expected.dtype().is_float() {
        let (e, a) = (expected.to_f64_vec(), actual.to_f64_vec());
        for (i, (&x, &y)) in e.iter().zip(&a).enumerate() {
            let ok = (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= ATOL + RTOL * x.abs();
            if !ok {
                return Err(format!("element {i}: {y} but expected {x}"));
            }
        }
    } else if expected.to_le_bytes() != actual.to_le_bytes() {
        let (e, a) = (expected.to_i64_vec(), actual.to_i64_vec());
        let i = e.iter().zip(&a).position(|(x, y)| x != y).unwrap_or(0);
        return Err(format!(
            "element {i}: {} but expected {}",
            a.get(i).copied().unwrap_or(0),
            e.get(i).copied().unwrap_or(0)
        ));
    }
    Ok(())
}

type InferFn =
    unsafe extern "C" fn(*const *const std::ffi::c_void, *const *mut std::ffi::c_void) -> i32;

/// Compiles one case into `work_dir` and checks every data set. `Err` carries the
/// first reason the case fails.
pub fn run_case(case: &Path, work_dir: &Path) -> Result<usize, String> {
    let model = case.join("model.onnx");
    let mut sets: Vec<PathBuf> = std::fs::read_dir(case)
        .map_err(|e| e.to_string())?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("test_data_set_"))
        })
        .collect();
    sets.sort();
    match load_model(&model, &ImportOptions::default()) {
        Ok(graph) => {
            let lib = CompiledCase::new(graph, work_dir, "libcase.so")?;
            for set in &sets {
                lib.check(set, &numbered(set, "input")?)?;
            }
        }
        // A model that takes its axes, pads or target shape as inputs: freeze those
        // inputs to each data set's values (`--freeze-input`), compile, run.
        Err(e) if e.to_string().contains("computed at run time") => {
            let names = input_names(&model)?;
            for (k, set) in sets.iter().enumerate() {
                let inputs = numbered(set, "input")?;
                // Integer inputs first (axes, pads, shapes); then also small float
                // vectors (Resize scales, Range bounds) if that is not enough.
                let freeze = |small_floats: bool| -> HashMap<String, Tensor> {
                    names
                        .iter()
                        .zip(&inputs)
                        .filter(|(_, t)| {
                            !t.dtype().is_float()
                                || (small_floats && t.shape().len() <= 1 && t.len() <= 8)
                        })
                        .map(|(n, t)| (n.clone(), t.clone()))
                        .collect()
                };
                let import = |frozen: &HashMap<String, Tensor>| {
                    load_model(
                        &model,
                        &ImportOptions {
                            frozen_inputs: frozen.clone(),
                            ..Default::default()
                        },
                    )
                };
                let mut frozen = freeze(false);
                let graph = match import(&frozen) {
                    Err(e) if e.to_string().contains("computed at run time") => {
                        frozen = freeze(true);
                        import(&frozen)
                    }
                    other => other,
                }
                .map_err(|e| format!("import: {e}"))?;
                let lib = CompiledCase::new(graph, work_dir, &format!("libcase{k}.so"))?;
                lib.check(set, &unfrozen(&names, inputs, &frozen))?;
            }
        }
        // Symbolic dimensions: bound to each data set's input shapes, as a user does
        // with `--input-shape`.
        Err(e) if e.to_string().contains("is symbolic") => {
            let names = input_names(&model)?;
            for (k, set) in sets.iter().enumerate() {
                let inputs = numbered(set, "input")?;
                let input_shapes: HashMap<String, Vec<usize>> = names
                    .iter()
                    .zip(&inputs)
                    .map(|(n, t)| (n.clone(), t.shape().to_vec()))
                    .collect();
                let import = |frozen: &HashMap<String, Tensor>| {
                    load_model(
                        &model,
                        &ImportOptions {
                            input_shapes: input_shapes.clone(),
                            frozen_inputs: frozen.clone(),
                            ..Default::default()
                        },
                    )
                };
                // And integer inputs that set shapes (split sizes, axes) frozen too,
                // when the model needs them constant.
                let mut frozen = HashMap::new();
                let graph = match import(&frozen) {
                    Err(e) if e.to_string().contains("computed at run time") => {
                        frozen = names
                            .iter()
                            .zip(&inputs)
                            .filter(|(_, t)| !t.dtype().is_float())
                            .map(|(n, t)| (n.clone(), t.clone()))
                            .collect();
                        import(&frozen)
                    }
                    other => other,
                }
                .map_err(|e| format!("import: {e}"))?;
                let lib = CompiledCase::new(graph, work_dir, &format!("libcase{k}.so"))?;
                lib.check(set, &unfrozen(&names, inputs, &frozen))?;
            }
        }
        Err(e) => return Err(format!("import: {e}")),
    }
    Ok(sets.len())
}

/// The data set's inputs that stay graph inputs (those not frozen into constants).
fn unfrozen(
    names: &[String],
    inputs: Vec<Tensor>,
    frozen: &HashMap<String, Tensor>,
) -> Vec<Tensor> {
    names
        .iter()
        .zip(inputs)
        .filter(|(n, _)| !frozen.contains_key(*n))
        .map(|(_, t)| t)
        .collect()
}

/// Names of the graph inputs that are not initializers, in order.
fn input_names(model: &Path) -> Result<Vec<String>, String> {
    let bytes = std::fs::read(model).map_err(|e| e.to_string())?;
    let m = crate::onnx::proto::ModelProto::decode(bytes.as_slice()).map_err(|e| e.to_string())?;
    let g = m.graph.unwrap_or_default();
    let inits: std::collections::HashSet<&str> =
        g.initializer.iter().map(|t| t.name.as_str()).collect();
    Ok(g.input
        .iter()
        .filter(|i| !inits.contains(i.name.as_str()))
        .map(|i| i.name.clone())
        .collect())
}

/// A case's model compiled, linked and loaded.
struct CompiledCase {
    graph: crate::ir::Graph,
    // Field order matters: the symbol must drop before the library.
    infer: InferFn,
    _lib: libloading::Library,
}

impl CompiledCase {
    fn new(
        mut graph: crate::ir::Graph,
        work_dir: &Path,
        file: &str,
    ) -> Result<CompiledCase, String> {
        // The graph passes as `nnc compile` runs them (NNC_PASSES selects them).
        crate::passes::PassManager::from_env()
            .and_then(|pm| pm.run(&mut graph))
            .map_err(|e| format!("passes: {e}"))?;
        let opts = CompileOptions {
            target: Target::host(),
            prefix: String::new(),
            weights: Default::default(),
        };
        let compiled = compile_graph(&graph, &opts).map_err(|e| format!("compile: {e}"))?;
        let so = artifact_bytes(ArtifactKind::SharedObject, &compiled.object, file)
            .map_err(|e| format!("link: {e}"))?;
        let so_path = work_dir.join(file);
        std::fs::write(&so_path, so).map_err(|e| e.to_string())?;
        // SAFETY: the library is one nnc just produced; it has no initializers.
        let lib =
            unsafe { libloading::Library::new(&so_path) }.map_err(|e| format!("dlopen: {e}"))?;
        let infer: InferFn =
            *unsafe { lib.get::<InferFn>(b"infer\0") }.map_err(|e| format!("dlsym: {e}"))?;
        Ok(CompiledCase {
            graph,
            infer,
            _lib: lib,
        })
    }

    fn check(&self, set: &Path, inputs: &[Tensor]) -> Result<(), String> {
        let graph = &self.graph;
        let expected = numbered(set, "output")?;
        if inputs.len() != graph.inputs.len() {
            return Err(format!(
                "{} inputs in {}, the model has {}",
                inputs.len(),
                set.display(),
                graph.inputs.len()
            ));
        }
        for (k, (t, v)) in inputs.iter().zip(&graph.inputs).enumerate() {
            if t.ty() != *graph.ty(*v) {
                return Err(format!(
                    "input {k} is {} but the model takes {}",
                    t.ty(),
                    graph.ty(*v)
                ));
            }
        }
        let in_bytes: Vec<Vec<u8>> = inputs.iter().map(|t| t.to_le_bytes()).collect();
        let mut out_bytes: Vec<Vec<u8>> = graph
            .outputs
            .iter()
            .map(|o| vec![0u8; graph.ty(*o).byte_size().max(1) + 64])
            .collect();
        let in_ptrs: Vec<*const std::ffi::c_void> =
            in_bytes.iter().map(|b| b.as_ptr().cast()).collect();
        let out_ptrs: Vec<*mut std::ffi::c_void> = out_bytes
            .iter_mut()
            .map(|b| b.as_mut_ptr().cast())
            .collect();
        // SAFETY: buffers match the model's input/output sizes checked above.
        let rc = unsafe { (self.infer)(in_ptrs.as_ptr(), out_ptrs.as_ptr()) };
        if rc != 0 {
            return Err(format!("infer returned {rc}"));
        }
        if expected.len() != graph.outputs.len() {
            return Err(format!(
                "{} expected outputs, the model has {}",
                expected.len(),
                graph.outputs.len()
            ));
        }
        for (k, (e, o)) in expected.iter().zip(&graph.outputs).enumerate() {
            let ty = graph.ty(*o);
            let actual = Tensor::from_le_bytes(ty, &out_bytes[k][..ty.byte_size()])
                .ok_or("output size mismatch")?;
            compare(e, &actual).map_err(|m| {
                format!(
                    "{}: output {k}: {m}",
                    set.file_name().unwrap_or_default().to_string_lossy()
                )
            })?;
        }
        Ok(())
    }
}

/// The family a case counts under in the summary table: the op of a one-node model,
/// else the case name's first word.
pub fn family(case: &Path) -> String {
    let name = case
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .trim_start_matches("test_")
        .to_string();
    let bytes = std::fs::read(case.join("model.onnx")).unwrap_or_default();
    if let Ok(m) = crate::onnx::proto::ModelProto::decode(bytes.as_slice()) {
        if let Some(g) = m.graph {
            if g.node.len() == 1 && !name.ends_with("_expanded") {
                return g.node[0].op_type.clone();
            }
        }
    }
    let first = name.split('_').next().unwrap_or("other").to_string();
    if name.ends_with("_expanded") {
        format!("{first} (expanded)")
    } else {
        first
    }
}
