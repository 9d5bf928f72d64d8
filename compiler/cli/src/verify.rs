//! `nnc run` and `nnc verify`: a model compiled for the host and run in this process
//! ([`LoadedModel`]), checked against the reference interpreter ([`nnc::interp`]) and,
//! when Python has it, onnxruntime.
//!
//! When the compiled outputs differ from the interpreter's, [`first_divergence`] finds
//! the first node (in the graph's topological order) whose output differs: it compiles
//! a debug variant of the graph in which every node output is also a graph output and
//! compares each of them with the interpreter's value of the same [`ValueId`].
//!
//! Random inputs ([`random_inputs`]) are deterministic in the seed: floating-point
//! inputs are standard normal (N(0, 1)); an integer input read as indices (by Gather,
//! GatherElements, GatherND, ScatterElements or ScatterND) takes values in
//! `[0, n)` where `n` is the smallest extent it may index, so every index is valid;
//! other integer inputs take values in `[1, 8)` (small, non-zero so integer division
//! is defined); booleans are true or false with equal odds.

use std::path::{Path, PathBuf};

use nnc::codegen::WeightFormat;
use nnc::ir::{DType, Graph, Tensor, TensorType, ValueId};
use nnc::ops::Op;
use nnc_host::LoadedModel;

/// Elements match when `|actual - expected| <= atol + rtol * |expected|` (numpy's
/// `allclose`); NaN matches NaN.
#[derive(Clone, Copy, Debug)]
pub struct Tolerance {
    pub rtol: f64,
    pub atol: f64,
}

impl Default for Tolerance {
    fn default() -> Tolerance {
        Tolerance {
            rtol: 1e-3,
            atol: 1e-4,
        }
    }
}

/// One tensor against its reference.
#[derive(Clone, Debug)]
pub struct Comparison {
    /// Largest `|actual - expected|`.
    pub max_abs: f64,
    /// Largest `|actual - expected| / |expected|` over the elements with
    /// `|expected| > atol` (near-zero references would make it meaningless).
    pub max_rel: f64,
    /// Elements outside the tolerance.
    pub mismatches: usize,
    pub total: usize,
    /// Set when the dtypes or shapes differ (nothing else was compared).
    pub error: Option<String>,
}

impl Comparison {
    pub fn passed(&self) -> bool {
        self.error.is_none() && self.mismatches == 0
    }
}

impl std::fmt::Display for Comparison {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.error {
            Some(e) => f.write_str(e),
            None => write!(
                f,
                "max abs err {:.3e}, max rel err {:.3e}, {} of {} elements outside tolerance",
                self.max_abs, self.max_rel, self.mismatches, self.total
            ),
        }
    }
}

pub fn compare(expected: &Tensor, actual: &Tensor, tol: Tolerance) -> Comparison {
    let mut c = Comparison {
        max_abs: 0.0,
        max_rel: 0.0,
        mismatches: 0,
        total: expected.len(),
        error: None,
    };
    if expected.dtype() != actual.dtype() || expected.shape() != actual.shape() {
        c.error = Some(format!("{} but expected {}", actual.ty(), expected.ty()));
        return c;
    }
    for (e, a) in expected.f64_values().zip(actual.f64_values()) {
        if (e.is_nan() && a.is_nan()) || e == a {
            continue;
        }
        let diff = (a - e).abs();
        let diff = if diff.is_nan() { f64::INFINITY } else { diff };
        c.max_abs = c.max_abs.max(diff);
        if e.abs() > tol.atol {
            c.max_rel = c.max_rel.max(diff / e.abs());
        }
        // An infinite or NaN reference only matches itself (handled above).
        if !e.is_finite() || diff > tol.atol + tol.rtol * e.abs() {
            c.mismatches += 1;
        }
    }
    c
}

/// xorshift64*: small and seeded.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
    /// Standard normal (Box–Muller).
    fn normal(&mut self) -> f32 {
        let (u, v) = (self.unit(), self.unit());
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// The smallest extent an integer value indexes, when some node reads it as indices.
fn index_bound(graph: &Graph, v: ValueId) -> Option<usize> {
    let mut bound: Option<usize> = None;
    for n in &graph.nodes {
        let Some(data) = n.inputs.first().copied().flatten() else {
            continue;
        };
        let shape = &graph.ty(data).shape;
        let extent = match &n.op {
            Op::Gather { axis }
            | Op::GatherElements { axis }
            | Op::ScatterElements { axis, .. }
                if n.inputs.get(1) == Some(&Some(v)) =>
            {
                shape.get(*axis).copied()
            }
            Op::GatherND { .. } | Op::ScatterND { .. } if n.inputs.get(1) == Some(&Some(v)) => {
                shape.iter().copied().min()
            }
            _ => None,
        };
        if let Some(e) = extent {
            bound = Some(bound.map_or(e, |b| b.min(e)));
        }
    }
    bound
}

/// Deterministic random values for every input of `graph` (see the module docs); an
/// input that does not fit in memory is an error naming it.
pub fn random_inputs(graph: &Graph, seed: u64) -> Result<Vec<Tensor>, String> {
    graph
        .inputs
        .iter()
        .enumerate()
        .map(|(i, _)| random_input(graph, i, seed))
        .collect()
}

/// The random values of input `i` that [`random_inputs`] gives.
fn random_input(graph: &Graph, i: usize, seed: u64) -> Result<Tensor, String> {
    let v = graph.inputs[i];
    let mut rng = Rng::new(seed.wrapping_add(1_000_003 * i as u64));
    let ty = graph.ty(v);
    let what = || format!("input '{}' ({ty})", graph.value(v).name);
    random_tensor(ty, index_bound(graph, v), &mut rng, &what)
}

fn random_tensor(
    ty: &TensorType,
    index_bound: Option<usize>,
    rng: &mut Rng,
    what: &dyn Fn() -> String,
) -> Result<Tensor, String> {
    let n = ty.numel();
    let d = ty.dtype;
    // The values are drawn as bools, float32 or int64, then cast: room for both.
    let (drawn, native) = match d {
        DType::Bool => (n, true),
        _ if d.is_float() => (n.saturating_mul(4), d == DType::F32),
        _ => (n.saturating_mul(8), d == DType::I64),
    };
    let cast = if native { 0 } else { ty.byte_size() };
    nnc::memory::check_fits(drawn.saturating_add(cast), what)?;
    if d == DType::Bool {
        return Ok(Tensor::from_vec(
            &ty.shape,
            (0..n).map(|_| rng.below(2) == 1).collect(),
        ));
    }
    if d.is_float() {
        let v: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
        let t = Tensor::from_vec(&ty.shape, v);
        return Ok(if d == DType::F32 { t } else { t.cast(d) });
    }
    let (lo, hi) = match index_bound {
        Some(b) => (0, b.max(1) as u64),
        None => (1, 8),
    };
    let v: Vec<i64> = (0..n).map(|_| (lo + rng.below(hi - lo)) as i64).collect();
    let t = Tensor::from_vec(&ty.shape, v);
    Ok(if d == DType::I64 { t } else { t.cast(d) })
}

/// The graph's inputs in order, from `given` (name, tensor) pairs; with `fill`, inputs
/// not given are random (seeded), otherwise they are an error.
pub fn bind_inputs(
    graph: &Graph,
    given: &[(String, Tensor)],
    fill: Option<u64>,
) -> Result<Vec<Tensor>, String> {
    for (name, _) in given {
        if !graph.inputs.iter().any(|v| &graph.value(*v).name == name) {
            let names: Vec<String> = graph
                .inputs
                .iter()
                .map(|v| format!("{} {}", graph.value(*v).name, graph.ty(*v)))
                .collect();
            return Err(format!(
                "--input {name}: the model has no input '{name}' (its inputs: {})",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ));
        }
    }
    let mut out = Vec::new();
    for (i, &v) in graph.inputs.iter().enumerate() {
        let (name, ty) = (&graph.value(v).name, graph.ty(v));
        match given.iter().find(|(n, _)| n == name) {
            Some((_, t)) => {
                if t.dtype() != ty.dtype || !fits_input(graph, i, t.shape()) {
                    return Err(format!(
                        "input '{name}' must be {}, the file holds {}",
                        expected_input(graph, i),
                        t.ty()
                    ));
                }
                out.push(t.clone());
            }
            None => match fill {
                Some(seed) => out.push(random_input(graph, i, seed)?),
                None => {
                    return Err(format!(
                        "missing input '{name}' ({ty}): pass --input {name}=FILE.npy"
                    ))
                }
            },
        }
    }
    Ok(out)
}

/// Whether `shape` suits graph input `i`: its shape, or, for an input whose axes
/// depend on dims set at run time, those axes at values within the dims' ranges.
fn fits_input(graph: &Graph, i: usize, shape: &[usize]) -> bool {
    let declared = &graph.ty(graph.inputs[i]).shape;
    if shape == declared.as_slice() {
        return true;
    }
    let deps = nnc::ir::run_dims::axis_dims(graph);
    shape.len() == declared.len()
        && (0..shape.len()).all(
            |a| match deps.iter().find(|d| d.tensor == i && d.axis == a) {
                Some(d) => {
                    let range = &graph.dims[d.dim];
                    d.scale > 0
                        && shape[a].is_multiple_of(d.scale)
                        && (range.min..=range.max).contains(&(shape[a] / d.scale))
                }
                None => shape[a] == declared[a],
            },
        )
}

/// What graph input `i` takes, for messages: its type, or, for an input whose axes
/// depend on dims set at run time, `float32[N*u,...] with N in MIN..MAX`.
fn expected_input(graph: &Graph, i: usize) -> String {
    let ty = graph.ty(graph.inputs[i]);
    let deps: Vec<_> = (nnc::ir::run_dims::axis_dims(graph).into_iter())
        .filter(|d| d.tensor == i)
        .collect();
    if deps.is_empty() {
        return ty.to_string();
    }
    let mut axes: Vec<String> = ty.shape.iter().map(usize::to_string).collect();
    let mut ranges = vec![];
    for d in &deps {
        let dim = &graph.dims[d.dim];
        axes[d.axis] = match d.scale {
            1 => dim.name.clone(),
            u => format!("{u}*{}", dim.name),
        };
        ranges.push(format!("{} in {}..{}", dim.name, dim.min, dim.max));
    }
    ranges.dedup();
    format!(
        "{}[{}] with {}",
        ty.dtype,
        axes.join(","),
        ranges.join(", ")
    )
}

/// `dtype[shape]`, and min/max/mean for floating-point tensors.
pub fn summary(t: &Tensor) -> String {
    let mut s = t.ty().to_string();
    if t.dtype().is_float() && !t.is_empty() {
        let v = t.to_f64_vec();
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        s += &format!(" min {min:.6} max {max:.6} mean {mean:.6}");
    }
    s
}

/// A file name for a tensor name: characters other than letters, digits, `.`, `-` and
/// `_` become `_` (never empty, never a hidden file or `..`).
pub fn file_stem(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with('.') {
        format!("_{s}")
    } else {
        s
    }
}

/// Imports `path` and runs the graph passes `nnc compile` runs by default.
/// With ranges, the graph `nnc compile` would compile (over symbolic shapes where it
/// can, see [`nnc::driver::load_graph`]).
pub fn load(path: &Path, import: &nnc::onnx::ImportOptions) -> nnc::error::Result<Graph> {
    nnc::driver::load_graph(path, import, &nnc::passes::PassManager::default())
}

/// Compiles `graph` for the host and runs it once on `inputs`.
pub fn run_compiled(
    graph: &Graph,
    inputs: &[Tensor],
    weights: WeightFormat,
) -> Result<Vec<Tensor>, String> {
    LoadedModel::compile_with(graph, weights)
        .and_then(|m| m.run(inputs))
        .map_err(|e| e.to_string())
}

/// Writes each output to `dir/<name>.npy`; returns the paths.
pub fn write_outputs(
    graph: &Graph,
    outputs: &[Tensor],
    dir: &Path,
) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut paths = Vec::new();
    for (v, t) in graph.outputs.iter().zip(outputs) {
        let name = &graph.value(*v).name;
        let path = dir.join(format!("{}.npy", file_stem(name)));
        let bytes = nnc_host::npy::to_bytes(t).map_err(|e| format!("output '{name}': {e}"))?;
        std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        paths.push(path);
    }
    Ok(paths)
}

/// `graph` with every node output also a graph output (after the original outputs, in
/// node order, each once).
pub fn debug_graph(graph: &Graph) -> Graph {
    let mut g = graph.clone();
    // Its outputs are no longer those the sample loop knows: a plain one-sample graph.
    g.sample_loop = None;
    // Symbols stay: the extents of the values are expressions of them.
    if g.symbols.is_empty() {
        g.dims.clear();
    }
    for n in &graph.nodes {
        for o in &n.outputs {
            if !g.outputs.contains(o) {
                g.outputs.push(*o);
            }
        }
    }
    g
}

/// The first node whose output diverges.
#[derive(Clone, Debug)]
pub struct Divergence {
    /// The node's name (the ONNX node name, or the name import generated).
    pub node: String,
    /// The ONNX op the node came from.
    pub onnx_op: String,
    /// nnc's op after the graph passes (e.g. a fused Conv).
    pub op: String,
    /// The diverging output value.
    pub value: String,
    pub comparison: Comparison,
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "node '{}' (ONNX {}, nnc {}), output '{}': {}",
            self.node, self.onnx_op, self.op, self.value, self.comparison
        )
    }
}

/// Runs `compiled` with every node output exposed and compares each, in topological
/// order, with the interpreter's value of the same value in `reference` (the two
/// graphs must share their value numbering: `compiled` is `reference` or a copy with
/// different constants). `None` when every intermediate matches.
pub fn first_divergence(
    reference: &Graph,
    compiled: &Graph,
    inputs: &[Tensor],
    tol: Tolerance,
) -> Result<Option<Divergence>, String> {
    // A graph compiled for one sample is localized on the first sample.
    let inputs = &nnc::ir::run_dims::first_sample(reference, inputs);
    let expected =
        nnc::interp::run_graph_all(reference, inputs).map_err(|e| format!("interpreter: {e}"))?;
    let debug = debug_graph(compiled);
    let actual =
        run_compiled(&debug, inputs, WeightFormat::F32).map_err(|e| format!("debug build: {e}"))?;
    let position = |v: ValueId| debug.outputs.iter().position(|o| *o == v);
    for n in &compiled.nodes {
        for &o in &n.outputs {
            let (Some(e), Some(p)) = (expected.get(o.0).and_then(Option::as_ref), position(o))
            else {
                continue;
            };
            let c = compare(e, &actual[p], tol);
            if !c.passed() {
                return Ok(Some(Divergence {
                    node: n.name.clone(),
                    onnx_op: n.onnx_op.clone(),
                    op: n.op.name(),
                    value: compiled.value(o).name.clone(),
                    comparison: c,
                }));
            }
        }
    }
    Ok(None)
}

/// One graph output checked.
#[derive(Clone, Debug)]
pub struct OutputCheck {
    pub name: String,
    pub comparison: Comparison,
}

/// What [`verify_graphs`] found.
#[derive(Clone, Debug)]
pub struct Report {
    /// The compiled outputs against the interpreter's.
    pub outputs: Vec<OutputCheck>,
    /// The compiled outputs themselves.
    pub compiled: Vec<Tensor>,
    /// Set when some output failed and an intermediate diverges.
    pub divergence: Option<Divergence>,
    /// Set when some output failed but every node output of the debug build matched
    /// (the difference then depends on how the normal build plans memory).
    pub note: Option<String>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.outputs.iter().all(|o| o.comparison.passed())
    }
}

/// For a graph over symbolic shapes, which the interpreter does not run: the import
/// options with every dim fixed at the value `inputs` give it (the model imported so
/// is the reference). `None` for any other graph.
pub fn reference_at_input_dims(
    graph: &Graph,
    inputs: &[Tensor],
    import: &nnc::onnx::ImportOptions,
) -> Option<nnc::onnx::ImportOptions> {
    if graph.symbols.is_empty() {
        return None;
    }
    let deps = nnc::ir::run_dims::axis_dims(graph);
    let value_of = |name: &str| -> Option<usize> {
        let d = graph.dims.iter().position(|d| d.name == name)?;
        let at = deps
            .iter()
            .find(|a| a.dim == d && a.tensor < inputs.len())?;
        Some(inputs[at.tensor].shape().get(at.axis)? / at.scale.max(1))
    };
    let values: Option<Vec<usize>> = import.ranges.iter().map(|r| value_of(&r.name)).collect();
    Some(import.bound(&values?))
}

/// Compiles `compiled` for the host, runs it on `inputs`, and compares its outputs with
/// the interpreter's on `reference`; on a mismatch, localizes the first diverging node
/// ([`first_divergence`]). Normally both are the same graph; tests give `compiled` a
/// corrupted weight to check the localization.
pub fn verify_graphs(
    reference: &Graph,
    compiled: &Graph,
    inputs: &[Tensor],
    tol: Tolerance,
) -> Result<Report, String> {
    let expected =
        nnc::interp::run_graph(reference, inputs).map_err(|e| format!("interpreter: {e}"))?;
    let actual = run_compiled(compiled, inputs, WeightFormat::F32)?;
    let outputs: Vec<OutputCheck> = compiled
        .outputs
        .iter()
        .zip(expected.iter().zip(&actual))
        .map(|(v, (e, a))| OutputCheck {
            name: compiled.value(*v).name.clone(),
            comparison: compare(e, a, tol),
        })
        .collect();
    let mut report = Report {
        outputs,
        compiled: actual,
        divergence: None,
        note: None,
    };
    if !report.passed() {
        report.divergence = first_divergence(reference, compiled, inputs, tol)?;
        if report.divergence.is_none() {
            report.note = Some(
                "every node output matches in the debug build (all node outputs exposed): \
                 the difference depends on the memory plan of the normal build"
                    .into(),
            );
        }
    }
    Ok(report)
}

/// `Ok` when `python3 -c "import onnxruntime"` works, else why not.
pub fn onnxruntime_available() -> Result<(), String> {
    match std::process::Command::new("python3")
        .args(["-c", "import onnxruntime, numpy"])
        .output()
    {
        Err(e) => Err(format!("python3 could not be run ({e})")),
        Ok(o) if o.status.success() => Ok(()),
        Ok(_) => Err("python3 cannot import onnxruntime (pip install onnxruntime)".into()),
    }
}

const ORT_SNIPPET: &str = r#"
import sys, numpy as np, onnxruntime as ort
model, d, names = sys.argv[1], sys.argv[2], sys.argv[3:]
so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
feeds = {n: np.load(f"{d}/in_{i}.npy") for i, n in enumerate(names)}
outs = s.run(None, feeds)
for i, v in enumerate(outs):
    np.save(f"{d}/out_{i}.npy", np.ascontiguousarray(v))
for o in s.get_outputs():
    print(o.name)
"#;

/// Runs `model` with onnxruntime (through python3) on `feeds`; returns its outputs by
/// name.
pub fn run_onnxruntime(
    model: &Path,
    feeds: &[(String, Tensor)],
) -> Result<Vec<(String, Tensor)>, String> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static COUNT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "nnc-verify-{}-{}",
        std::process::id(),
        COUNT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let result = (|| {
        for (i, (name, t)) in feeds.iter().enumerate() {
            let bytes = nnc_host::npy::to_bytes(t).map_err(|e| format!("input '{name}': {e}"))?;
            let p = dir.join(format!("in_{i}.npy"));
            std::fs::write(&p, bytes).map_err(|e| format!("{}: {e}", p.display()))?;
        }
        let out = std::process::Command::new("python3")
            .arg("-c")
            .arg(ORT_SNIPPET)
            .arg(model)
            .arg(&dir)
            .args(feeds.iter().map(|(n, _)| n))
            .output()
            .map_err(|e| format!("python3: {e}"))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let last = err.lines().last().unwrap_or("").to_string();
            return Err(format!("onnxruntime failed: {last}"));
        }
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .enumerate()
            .map(|(i, name)| {
                let t = nnc_host::npy::read(&dir.join(format!("out_{i}.npy")))?;
                Ok((name.to_string(), t))
            })
            .collect()
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// onnxruntime's version, or an empty string.
pub fn onnxruntime_version() -> String {
    std::process::Command::new("python3")
        .args(["-c", "import onnxruntime; print(onnxruntime.__version__)"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// Runs the original model file with onnxruntime on the runtime `inputs` of `graph`
/// plus the `frozen` ones, and compares the `compiled` outputs with its outputs.
pub fn onnxruntime_checks(
    model: &Path,
    graph: &Graph,
    inputs: &[Tensor],
    frozen: &std::collections::HashMap<String, Tensor>,
    compiled: &[Tensor],
    tol: Tolerance,
) -> Result<Vec<OutputCheck>, String> {
    let mut feeds: Vec<(String, Tensor)> = graph
        .inputs
        .iter()
        .zip(inputs)
        .map(|(v, t)| (graph.value(*v).name.clone(), t.clone()))
        .collect();
    feeds.extend(frozen.iter().map(|(n, t)| (n.clone(), t.clone())));
    let reference = run_onnxruntime(model, &feeds)?;
    Ok(graph
        .outputs
        .iter()
        .zip(compiled)
        .map(|(v, a)| {
            let name = graph.value(*v).name.clone();
            let comparison = match reference.iter().find(|(n, _)| *n == name) {
                Some((_, e)) => compare(e, a, tol),
                None => Comparison {
                    max_abs: 0.0,
                    max_rel: 0.0,
                    mismatches: 0,
                    total: 0,
                    error: Some("onnxruntime has no such output".into()),
                },
            };
            OutputCheck { name, comparison }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_stems_are_safe() {
        assert_eq!(file_stem("probs"), "probs");
        assert_eq!(file_stem("a/b:0"), "a_b_0");
        assert_eq!(file_stem(".."), "_..");
        assert_eq!(file_stem(""), "_");
    }

    #[test]
    fn compare_uses_allclose() {
        let tol = Tolerance::default();
        let e = Tensor::from_vec(&[3], vec![1.0f32, 0.0, f32::NAN]);
        let a = Tensor::from_vec(&[3], vec![1.0005f32, 0.00005, f32::NAN]);
        assert!(compare(&e, &a, tol).passed());
        let b = Tensor::from_vec(&[3], vec![1.01f32, 0.0, 0.0]);
        let c = compare(&e, &b, tol);
        assert_eq!(c.mismatches, 2);
    }
}
