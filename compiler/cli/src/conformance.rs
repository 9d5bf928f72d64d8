//! Runs ONNX backend-test cases (`model.onnx` + `test_data_set_*/{input,output}_K.pb`)
//! end to end: import, compile, link a .so, load it, run every data set, compare.
//!
//! Each case runs in its own process (`nnc conformance-case`), so a crash or hang in
//! generated code fails that case only.

use std::path::{Path, PathBuf};

use prost::Message;

use nnc::codegen::{compile_graph, Arch, CompileOptions, Target};
use nnc::driver::{artifact_bytes, ArtifactKind};
use nnc::ir::Tensor;
use nnc::onnx::proto::{type_proto, OptionalProto, SequenceProto, TensorProto};
use nnc::onnx::tensor_proto::tensor_from_proto;
use nnc::onnx::{load_model, ImportOptions};
use nnc_host::LoadedModel;

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

/// A value in a test data set as the graph declares it: a tensor, a sequence of
/// tensors, or an empty optional (a full optional is its element).
enum DataValue {
    Tensor(Tensor),
    Sequence(Vec<Tensor>),
    Absent,
}

impl DataValue {
    /// The tensors it passes through the C ABI, in order.
    fn flatten(self) -> Vec<Tensor> {
        match self {
            DataValue::Tensor(t) => vec![t],
            DataValue::Sequence(ts) => ts,
            DataValue::Absent => vec![],
        }
    }
}

fn tensor(t: &TensorProto, path: &Path) -> Result<Tensor, String> {
    tensor_from_proto(t, None).map_err(|e| format!("{}: {e}", path.display()))
}

fn sequence(s: &SequenceProto, path: &Path) -> Result<Vec<Tensor>, String> {
    if !s.sequence_values.is_empty() || !s.optional_values.is_empty() {
        return Err(format!(
            "{}: sequences of sequences or optionals are not supported",
            path.display()
        ));
    }
    s.tensor_values.iter().map(|t| tensor(t, path)).collect()
}

/// Reads `path` as the serialized form `ty` implies (TensorProto, SequenceProto or
/// OptionalProto).
fn read_value(path: &Path, ty: Option<&type_proto::Value>) -> Result<DataValue, String> {
    let bytes = nnc::files::read_regular(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let decode_err = |e: prost::DecodeError| format!("{}: {e}", path.display());
    match ty {
        Some(type_proto::Value::SequenceType(_)) => {
            let s = SequenceProto::decode(bytes.as_slice()).map_err(decode_err)?;
            Ok(DataValue::Sequence(sequence(&s, path)?))
        }
        Some(type_proto::Value::OptionalType(_)) => {
            let o = OptionalProto::decode(bytes.as_slice()).map_err(decode_err)?;
            match (&o.tensor_value, &o.sequence_value) {
                (Some(t), _) => Ok(DataValue::Tensor(tensor(t, path)?)),
                (None, Some(s)) => Ok(DataValue::Sequence(sequence(s, path)?)),
                (None, None) => Ok(DataValue::Absent),
            }
        }
        _ => {
            let t = TensorProto::decode(bytes.as_slice()).map_err(decode_err)?;
            Ok(DataValue::Tensor(tensor(&t, path)?))
        }
    }
}

/// The graph's runtime inputs and its outputs, with their declared types.
struct ModelIo {
    inputs: Vec<(String, Option<type_proto::Value>)>,
    outputs: Vec<Option<type_proto::Value>>,
}

impl ModelIo {
    fn read(model: &Path) -> Result<ModelIo, String> {
        let bytes = nnc::files::read_regular(model).map_err(|e| e.to_string())?;
        let m =
            nnc::onnx::proto::ModelProto::decode(bytes.as_slice()).map_err(|e| e.to_string())?;
        let g = m.graph.unwrap_or_default();
        let inits: std::collections::HashSet<&str> =
            g.initializer.iter().map(|t| t.name.as_str()).collect();
        let ty = |vi: &nnc::onnx::proto::ValueInfoProto| {
            vi.r#type.as_ref().and_then(|t| t.value.clone())
        };
        Ok(ModelIo {
            inputs: g
                .input
                .iter()
                .filter(|i| !inits.contains(i.name.as_str()))
                .map(|i| (i.name.clone(), ty(i)))
                .collect(),
            outputs: g.output.iter().map(ty).collect(),
        })
    }

    /// Whether some input is a sequence or an optional: its ABI depends on the data.
    fn data_dependent_abi(&self) -> bool {
        self.inputs
            .iter()
            .any(|(_, t)| !matches!(t, Some(type_proto::Value::TensorType(_))))
    }

    /// A data set's inputs, one value per graph input.
    fn read_inputs(&self, set: &Path) -> Result<Vec<DataValue>, String> {
        let n = count_numbered(set, "input");
        if n != self.inputs.len() {
            return Err(format!(
                "{n} inputs in {}, the model has {}",
                set.display(),
                self.inputs.len()
            ));
        }
        self.inputs
            .iter()
            .enumerate()
            .map(|(k, (_, ty))| read_value(&set.join(format!("input_{k}.pb")), ty.as_ref()))
            .collect()
    }

    /// A data set's expected outputs, flattened as infer() writes them.
    fn read_outputs(&self, set: &Path) -> Result<Vec<Tensor>, String> {
        let n = count_numbered(set, "output");
        if n != self.outputs.len() {
            return Err(format!(
                "{n} expected outputs in {}, the model has {}",
                set.display(),
                self.outputs.len()
            ));
        }
        let mut out = vec![];
        for (k, ty) in self.outputs.iter().enumerate() {
            out.extend(read_value(&set.join(format!("output_{k}.pb")), ty.as_ref())?.flatten());
        }
        Ok(out)
    }
}

/// How many `prefix_K.pb` files a data set numbers from 0.
fn count_numbered(dir: &Path, prefix: &str) -> usize {
    (0..)
        .take_while(|k| dir.join(format!("{prefix}_{k}.pb")).exists())
        .count()
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

/// Where a case's compiled code runs.
#[derive(Clone, Debug)]
pub enum CaseTarget {
    /// Compiled for this machine, loaded into this process.
    Host,
    /// Compiled for aarch64, run by `harness` (tests/harness/nnc_run.c built for
    /// aarch64) under `qemu-aarch64 -L sysroot`.
    Aarch64Qemu { harness: PathBuf, sysroot: PathBuf },
}

/// Compiles one case into `work_dir` for the host and checks every data set. `Err`
/// carries the first reason the case fails.
pub fn run_case(case: &Path, work_dir: &Path) -> Result<usize, String> {
    run_case_on(case, work_dir, &CaseTarget::Host, true)
}

/// [`run_case`] for any [`CaseTarget`]; `freeze`: inputs the import needs constant
/// may be frozen to their data set's values.
pub fn run_case_on(
    case: &Path,
    work_dir: &Path,
    target: &CaseTarget,
    freeze: bool,
) -> Result<usize, String> {
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
    let io = ModelIo::read(&model)?;
    // One compile serves every data set, unless the model needs bindings a data set
    // decides: sequence lengths, empty optionals, symbolic dims, frozen inputs.
    if !io.data_dependent_abi() {
        match load_model(&model, &ImportOptions::default()) {
            Ok(graph) => {
                let lib = CompiledCase::new(graph, work_dir, "libcase.so", target)?;
                for set in &sets {
                    let inputs = io.read_inputs(set)?;
                    let inputs: Vec<Tensor> =
                        inputs.into_iter().flat_map(DataValue::flatten).collect();
                    lib.check(set, &inputs, &io.read_outputs(set)?)?;
                }
                return Ok(sets.len());
            }
            Err(e) if needs_bindings(&e.to_string()) => {}
            Err(e) => return Err(format!("import: {e}")),
        }
    }
    for (k, set) in sets.iter().enumerate() {
        let inputs = io.read_inputs(set)?;
        let (graph, frozen) = import_bound_to(&model, &io, &inputs, freeze)?;
        let lib = CompiledCase::new(graph, work_dir, &format!("libcase{k}.so"), target)?;
        let unfrozen: Vec<Tensor> = io
            .inputs
            .iter()
            .zip(inputs)
            .filter(|((n, _), _)| !frozen.contains(n))
            .flat_map(|(_, v)| v.flatten())
            .collect();
        lib.check(set, &unfrozen, &io.read_outputs(set)?)?;
    }
    Ok(sets.len())
}

/// Import errors that bindings from a data set can cure.
fn needs_bindings(message: &str) -> bool {
    message.contains("computed at run time")
        || message.contains("is symbolic")
        || message.contains("--sequence-input")
}

/// Imports the model bound to one data set's inputs, as a user would with the CLI:
/// sequence lengths and empty optionals always (`--sequence-input`, `--absent-input`);
/// then, as the import asks for them, tensor shapes for symbolic dims
/// (`--input-shape`), and integer inputs (axes, pads, shapes), then also small float
/// vectors (Resize scales, Range bounds), frozen into constants (`--freeze-input`).
/// Returns the graph and the names of the frozen inputs.
fn import_bound_to(
    model: &Path,
    io: &ModelIo,
    inputs: &[DataValue],
    freeze: bool,
) -> Result<(nnc::ir::Graph, Vec<String>), String> {
    let mut opts = ImportOptions::default();
    for ((name, _), v) in io.inputs.iter().zip(inputs) {
        match v {
            DataValue::Sequence(ts) => {
                let shapes = ts.iter().map(|t| t.shape().to_vec()).collect();
                opts.sequence_inputs.insert(name.clone(), shapes);
            }
            DataValue::Absent => {
                opts.absent_inputs.insert(name.clone());
            }
            DataValue::Tensor(_) => {}
        }
    }
    let tensors = || {
        io.inputs
            .iter()
            .zip(inputs)
            .filter_map(|((n, _), v)| match v {
                DataValue::Tensor(t) => Some((n.clone(), t)),
                _ => None,
            })
    };
    let mut freeze_stage = 0;
    loop {
        let message = match load_model(model, &opts) {
            Ok(graph) => return Ok((graph, opts.frozen_inputs.into_keys().collect())),
            Err(e) => e.to_string(),
        };
        if message.contains("is symbolic") && opts.input_shapes.is_empty() {
            opts.input_shapes = tensors().map(|(n, t)| (n, t.shape().to_vec())).collect();
        } else if freeze && message.contains("computed at run time") && freeze_stage < 2 {
            freeze_stage += 1;
            let small_floats = freeze_stage == 2;
            opts.frozen_inputs = tensors()
                .filter(|(_, t)| {
                    !t.dtype().is_float() || (small_floats && t.shape().len() <= 1 && t.len() <= 8)
                })
                .map(|(n, t)| (n, t.clone()))
                .collect();
        } else {
            return Err(format!("import: {message}"));
        }
    }
}

/// A case's model compiled, linked, and ready to run where its target says.
struct CompiledCase {
    graph: nnc::ir::Graph,
    runner: Runner,
}

enum Runner {
    Host(Box<LoadedModel>),
    Qemu {
        harness: PathBuf,
        sysroot: PathBuf,
        library: PathBuf,
        work_dir: PathBuf,
    },
}

impl CompiledCase {
    fn new(
        mut graph: nnc::ir::Graph,
        work_dir: &Path,
        file: &str,
        target: &CaseTarget,
    ) -> Result<CompiledCase, String> {
        // The graph passes as `nnc compile` runs them by default.
        nnc::passes::PassManager::default()
            .run(&mut graph)
            .map_err(|e| format!("passes: {e}"))?;
        let runner = match target {
            CaseTarget::Host => Runner::Host(Box::new(
                LoadedModel::compile(&graph).map_err(|e| format!("compile: {e}"))?,
            )),
            CaseTarget::Aarch64Qemu { harness, sysroot } => {
                let opts = CompileOptions::new(
                    Target::new(Arch::Aarch64, None).map_err(|e| e.to_string())?,
                );
                let compiled = compile_graph(&graph, &opts).map_err(|e| format!("compile: {e}"))?;
                let so = artifact_bytes(ArtifactKind::SharedObject, &compiled.object, file)
                    .map_err(|e| format!("link: {e}"))?;
                let library = work_dir.join(file);
                std::fs::write(&library, so).map_err(|e| e.to_string())?;
                Runner::Qemu {
                    harness: harness.clone(),
                    sysroot: sysroot.clone(),
                    library,
                    work_dir: work_dir.to_path_buf(),
                }
            }
        };
        Ok(CompiledCase { graph, runner })
    }

    /// Runs the model on `inputs` and returns its outputs.
    fn execute(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, String> {
        match &self.runner {
            Runner::Host(model) => model.run(inputs).map_err(|e| e.to_string()),
            Runner::Qemu {
                harness,
                sysroot,
                library,
                work_dir,
            } => {
                let (in_dir, out_dir) = (work_dir.join("in"), work_dir.join("out"));
                for d in [&in_dir, &out_dir] {
                    let _ = std::fs::remove_dir_all(d);
                    std::fs::create_dir_all(d).map_err(|e| e.to_string())?;
                }
                for (i, t) in inputs.iter().enumerate() {
                    std::fs::write(in_dir.join(format!("input_{i}.bin")), t.to_le_bytes())
                        .map_err(|e| e.to_string())?;
                }
                let out = std::process::Command::new("qemu-aarch64")
                    .arg("-L")
                    .arg(sysroot)
                    .arg(harness)
                    .arg(library)
                    .arg("")
                    .arg(&in_dir)
                    .arg(&out_dir)
                    .output()
                    .map_err(|e| format!("qemu-aarch64: {e}"))?;
                if !out.status.success() {
                    return Err(format!(
                        "under qemu: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    ));
                }
                let graph = &self.graph;
                graph
                    .outputs
                    .iter()
                    .enumerate()
                    .map(|(k, o)| {
                        let bytes = std::fs::read(out_dir.join(format!("output_{k}.bin")))
                            .map_err(|e| format!("output {k}: {e}"))?;
                        // An output whose extent the values decide comes with its shape.
                        let shape_file = out_dir.join(format!("output_{k}.shape"));
                        let ty = match std::fs::read_to_string(shape_file) {
                            Ok(text) => nnc::ir::TensorType::new(
                                graph.ty(*o).dtype,
                                (text.lines().map(str::parse))
                                    .collect::<Result<_, _>>()
                                    .map_err(|e| format!("output {k} shape: {e}"))?,
                            ),
                            Err(_) => graph.ty(*o).clone(),
                        };
                        Tensor::from_le_bytes(&ty, &bytes)
                            .ok_or_else(|| format!("output {k}: wrong size"))
                    })
                    .collect()
            }
        }
    }

    fn check(&self, set: &Path, inputs: &[Tensor], expected: &[Tensor]) -> Result<(), String> {
        let graph = &self.graph;
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
        let outputs = self.execute(inputs)?;
        if expected.len() != graph.outputs.len() {
            return Err(format!(
                "{} expected outputs, the model has {}",
                expected.len(),
                graph.outputs.len()
            ));
        }
        for (k, (e, actual)) in expected.iter().zip(&outputs).enumerate() {
            compare(e, actual).map_err(|m| {
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
    if let Ok(m) = nnc::onnx::proto::ModelProto::decode(bytes.as_slice()) {
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
