//! `nnc inspect`: what a model holds and what nnc makes of it, as text for people or as
//! one JSON object (`--format json`) for scripts.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use nnc::error::{NncError, Result};
use nnc::ir::Graph;
use nnc::onnx::{self, ImportOptions};
use nnc::ops::Op;

/// `nnc inspect --format` values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    #[default]
    Text,
    Json,
}

/// Everything `nnc inspect` reports (the JSON object of `--format json`).
#[derive(Debug, Serialize)]
pub struct Report {
    pub model: String,
    pub opset: i64,
    pub inputs: Vec<TensorInfo>,
    pub outputs: Vec<TensorInfo>,
    pub dims: Vec<DimInfo>,
    /// The ONNX op histogram, in first-seen order.
    pub operators: Vec<OpCount>,
    pub parameters: usize,
    /// Weight bytes the compiled library stores (constants read as they are, packed and
    /// transformed forms, each distinct form once); absent (null) while any op is
    /// unsupported.
    pub weights_bytes: Option<usize>,
    /// What the weights would take with a copy per node that reads them.
    pub unshared_weights_bytes: Option<usize>,
    /// Bytes of machine code.
    pub code_bytes: Option<usize>,
    /// The size of the shared library `nnc compile -o lib.so` writes.
    pub library_bytes: Option<usize>,
    /// Packed or transformed weights stored once for several nodes, largest first.
    pub shared_weights: Vec<SharedWeightInfo>,
    /// The workspace (`infer_with_workspace`) / static arena size.
    pub arena_bytes: Option<usize>,
    pub arena_lower_bound_bytes: Option<usize>,
    pub unsupported: Vec<Unsupported>,
    /// What `--quantize int8` would do; absent while any op is unsupported.
    pub int8: Option<Int8Plan>,
    /// Each node's kernel (`--kernels`); absent otherwise and while any op is unsupported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernels: Option<KernelsReport>,
}

/// One weight form several nodes read.
#[derive(Debug, Serialize)]
pub struct SharedWeightInfo {
    /// The constant it was derived from.
    pub constant: String,
    pub bytes: usize,
    pub nodes: Vec<String>,
}

/// The kernel plan for one target (`nnc inspect --kernels`).
#[derive(Debug, Serialize)]
pub struct KernelsReport {
    pub target: String,
    pub cpu: String,
    pub features: String,
    pub nodes: Vec<NodeKernelInfo>,
    /// With `--threads N`: the estimate of what `run` with N threads gains.
    pub threads: Option<ThreadsEstimate>,
}

/// `nnc inspect --threads N`: from each node's task count and work (multiply-adds,
/// or output elements for the other ops), on N threads: per node, the largest task's
/// share of its work and the threads' idle fraction; for the model, the share of the
/// work in split nodes and the speedup over one thread were every task equally fast.
#[derive(Debug, Serialize)]
pub struct ThreadsEstimate {
    pub threads: usize,
    pub parallel_fraction: f64,
    pub speedup: f64,
}

/// One node of the compiled graph and what runs it.
#[derive(Debug, Serialize)]
pub struct NodeKernelInfo {
    pub node: String,
    /// The ONNX op it came from and the IR op it was lowered as.
    pub op: String,
    pub lowered_as: String,
    /// `winograd-f4x4`, `implicit-gemm-s2`, `im2col+gemm`, `gemm`, `view`, `clif`, ...
    pub strategy: String,
    /// Kernel-library names of the micro-kernels it calls.
    pub kernels: Vec<String>,
    /// The GEMM register tile, `MRxNR`.
    pub tile: Option<String>,
    pub scratch_bytes: usize,
    /// Tasks `run` splits it into with a thread pool (1: not split).
    pub tasks: usize,
    /// Its work (multiply-adds, or output elements), for `--threads`.
    pub work: usize,
    pub reason: String,
}

/// What `nnc inspect` plans for: the target and kernel options of `nnc compile`, and
/// whether to report every node's kernel.
#[derive(Clone, Debug)]
pub struct InspectOptions {
    pub target: nnc::codegen::Target,
    pub kernels: nnc::codegen::KernelOptions,
    pub show_kernels: bool,
    /// `--threads N`: estimate the parallel efficiency on N threads.
    pub threads: Option<usize>,
}

#[derive(Debug, Serialize)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: String,
    /// With every dim set at run time at its maximum.
    pub shape: Vec<usize>,
    /// Per axis: the dim set at run time it follows (`scale · dim`, through a conv's
    /// formula for some outputs), if any.
    pub axis_dims: Vec<Option<AxisDimInfo>>,
    /// The axes whose extents the input values decide (at most their `shape`).
    pub bounded_axes: Vec<usize>,
}

#[derive(Debug, Serialize)]
pub struct AxisDimInfo {
    pub dim: String,
    pub scale: usize,
    /// The axis's size as a formula of the dim (`batch`, `(width - 4)/4`).
    pub size: String,
}

/// A dim set at run time (`--dim NAME=MIN..MAX`).
#[derive(Debug, Serialize)]
pub struct DimInfo {
    pub name: String,
    pub min: usize,
    pub max: usize,
    /// How the code covers it: `symbolic` or `sample loop` (see `nnc::passes::per_sample`).
    pub strategy: String,
}

#[derive(Debug, Serialize)]
pub struct OpCount {
    pub op: String,
    pub count: usize,
}

#[derive(Debug, Serialize)]
pub struct Unsupported {
    pub node: String,
    pub op: String,
    pub reason: String,
    /// The node as a diagnostic quotes it: `y = NonZero(x: float32[3,4])`.
    pub excerpt: String,
    /// What the ONNX node suite says about the op, as the text output shows it.
    pub suite_status: String,
    pub suite_cases: usize,
    pub suite_passing: usize,
}

/// Which nodes run on integer kernels and which in float32.
#[derive(Debug, Serialize)]
pub struct Int8Plan {
    /// Integer ops the model already has (pre-quantized QDQ / QLinear models, after the
    /// qdq pass), by op.
    pub integer_ops_in_model: BTreeMap<String, usize>,
    /// The layers `--quantize int8` would quantize, by `op -> kernel`.
    pub quantized_layers: BTreeMap<String, usize>,
    pub quantized_layer_count: usize,
    /// Every other computing node, run in float32 between dequantize and quantize steps.
    pub float32_nodes: Vec<NodeRef>,
}

#[derive(Debug, Serialize)]
pub struct NodeRef {
    pub node: String,
    pub op: String,
}

/// How the code covers dim `j` of `g`.
fn dim_strategy(g: &nnc::ir::Graph, j: usize) -> &'static str {
    if is_symbolic(g) {
        return "symbolic: every extent an expression of the dims, computed at run time";
    }
    match g.sample_loop.as_ref().is_some_and(|s| s.dim == j) {
        true => "sample loop: compiled for one sample",
        false => "static",
    }
}

/// Whether `g` was imported over symbolic shapes.
fn is_symbolic(g: &nnc::ir::Graph) -> bool {
    g.values.iter().any(|v| v.ty.dims.is_some())
}

/// Imports `path` (keeping unsupported ops) and plans it as `nnc compile` would.
pub fn report(path: &Path, import: &ImportOptions, options: &InspectOptions) -> Result<Report> {
    let imported = onnx::load_model_partial(path, import)?;
    let g = &imported.graph;
    let deps = nnc::ir::run_dims::axis_dims(g);
    let maxima: Vec<usize> = g.dims.iter().map(|d| d.max).collect();
    let n_in = g.inputs.len();
    let tensor = |(k, v): (usize, &nnc::ir::ValueId)| TensorInfo {
        name: g.value(*v).name.clone(),
        dtype: g.ty(*v).dtype.to_string(),
        shape: nnc::ir::run_dims::concrete_shape(&g.ty(*v).shape, k, &deps, &maxima),
        axis_dims: (0..g.ty(*v).rank())
            .map(|axis| {
                deps.iter()
                    .find(|a| a.tensor == k && a.axis == axis)
                    .map(|a| AxisDimInfo {
                        dim: g.dims[a.dim].name.clone(),
                        scale: a.scale,
                        size: a.written(&g.dims[a.dim].name),
                    })
            })
            .collect(),
        bounded_axes: (g.bounded_axes().into_iter())
            .filter(|&(o, _)| n_in + o == k)
            .map(|(_, a)| a)
            .collect(),
    };
    let mut report = Report {
        model: path.display().to_string(),
        opset: imported.opset,
        inputs: g.inputs.iter().enumerate().map(tensor).collect(),
        outputs: (g.outputs.iter().enumerate())
            .map(|(k, v)| tensor((n_in + k, v)))
            .collect(),
        dims: (g.dims.iter().enumerate())
            .map(|(j, d)| DimInfo {
                name: d.name.clone(),
                min: d.min,
                max: d.max,
                strategy: dim_strategy(g, j).into(),
            })
            .collect(),
        operators: imported
            .onnx_ops
            .iter()
            .map(|(op, count)| OpCount {
                op: op.clone(),
                count: *count,
            })
            .collect(),
        parameters: g.parameter_count(),
        weights_bytes: None,
        unshared_weights_bytes: None,
        code_bytes: None,
        library_bytes: None,
        shared_weights: vec![],
        arena_bytes: None,
        arena_lower_bound_bytes: None,
        unsupported: imported
            .unsupported
            .iter()
            .map(|u| {
                let status = crate::suite_status::op_status(&u.op);
                Unsupported {
                    node: u.node.clone(),
                    op: u.op.clone(),
                    reason: u.reason.clone(),
                    excerpt: u.excerpt.render(&u.op),
                    suite_status: crate::suite_status::describe(&u.op),
                    suite_cases: status.cases,
                    suite_passing: status.passing,
                }
            })
            .collect(),
        int8: None,
        kernels: None,
    };
    if imported.unsupported.is_empty() {
        // The memory plan of the graph `nnc compile` lowers: after the same passes
        // (fusion and views change which tensors exist and how long they live).
        let optimized = nnc::driver::prepare_graph(g.clone(), &nnc::passes::PassManager::default())
            .map_err(|e| NncError::Model(format!("{}: {e}", path.display())))?;
        // How the compiled graph covers each dim (a batch may become one sample's graph).
        for (j, d) in report.dims.iter_mut().enumerate() {
            d.strategy = dim_strategy(&optimized, j).into();
        }
        // Sizes as stored: what the code generator packs and shares is only known by
        // running it.
        let mut compile_options = nnc::codegen::CompileOptions::new(options.target.clone());
        compile_options.kernels = options.kernels.clone();
        let compiled = nnc::codegen::compile_graph(&optimized, &compile_options)
            .map_err(|e| NncError::Model(format!("{}: {e}", path.display())))?;
        let library = nnc::driver::artifact_bytes(
            nnc::driver::ArtifactKind::SharedObject,
            &compiled.object,
            "libmodel.so",
        )?;
        report.weights_bytes = Some(compiled.weights_size);
        report.unshared_weights_bytes = Some(compiled.unshared_weights_size);
        report.code_bytes = Some(compiled.code_size);
        report.library_bytes = Some(library.len());
        report.shared_weights = compiled
            .shared_weights
            .into_iter()
            .map(|w| SharedWeightInfo {
                constant: w.constant,
                bytes: w.bytes,
                nodes: w.nodes,
            })
            .collect();
        report.arena_bytes = Some(compiled.arena_size);
        report.arena_lower_bound_bytes = Some(compiled.arena_lower_bound);
        report.int8 = Some(int8_plan(&optimized));
        if options.show_kernels {
            // The plans code generation made, again, for their per-node detail.
            let kernels =
                nnc::codegen::plan::plan_kernels(&optimized, &options.target, &options.kernels);
            let plan = nnc::codegen::plan::plan_memory(&optimized, &kernels.scratch_bytes());
            let mut k = kernels_report(&optimized, &kernels, &plan, &options.target);
            k.threads = options.threads.map(|n| {
                let nodes: Vec<(usize, usize)> =
                    k.nodes.iter().map(|e| (e.work, e.tasks)).collect();
                let e = nnc::codegen::tasks::estimate(&nodes, n);
                ThreadsEstimate {
                    threads: n,
                    parallel_fraction: e.parallel_fraction,
                    speedup: e.speedup,
                }
            });
            report.kernels = Some(k);
        }
    }
    Ok(report)
}

fn kernels_report(
    g: &Graph,
    kernels: &nnc::codegen::plan::KernelPlan,
    plan: &nnc::codegen::MemoryPlan,
    target: &nnc::codegen::Target,
) -> KernelsReport {
    let nodes = g
        .nodes
        .iter()
        .zip(&kernels.nodes)
        .enumerate()
        .map(|(k, (n, kernel))| {
            let view = plan.is_view[k];
            NodeKernelInfo {
                node: n.name.clone(),
                op: n.onnx_op.clone(),
                lowered_as: n.op.name().to_string(),
                strategy: if view {
                    "view".into()
                } else {
                    kernel.strategy_name()
                },
                kernels: if view { vec![] } else { kernel.kernels() },
                tile: kernel
                    .tile()
                    .filter(|_| !view)
                    .map(|(mr, nr)| format!("{mr}x{nr}")),
                scratch_bytes: kernel.scratch_bytes,
                tasks: if view { 1 } else { kernel.tasks },
                work: if view {
                    0
                } else {
                    nnc::codegen::tasks::node_work(g, n)
                },
                reason: if view {
                    "the output is its input's storage: no code".into()
                } else {
                    kernel.reason.clone()
                },
            }
        })
        .collect();
    KernelsReport {
        target: target.arch.triple().to_string(),
        cpu: target.cpu.clone(),
        features: target.features.to_string(),
        nodes,
        threads: None,
    }
}

/// Prints `report` in `format` to stdout.
pub fn print(report: &Report, format: Format) -> Result<()> {
    match format {
        Format::Text => print!("{}", text(report)),
        Format::Json => {
            let json = serde_json::to_string_pretty(report)
                .map_err(|e| NncError::Model(format!("inspect: {e}")))?;
            println!("{json}");
        }
    }
    Ok(())
}

/// The text report.
pub fn text(r: &Report) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "model: {}", r.model);
    let _ = writeln!(s, "opset: {}", r.opset);
    for (kind, list) in [("input", &r.inputs), ("output", &r.outputs)] {
        for t in list {
            let dims: Vec<String> = (t.shape.iter().zip(&t.axis_dims).enumerate())
                .map(|(axis, (d, a))| match a {
                    Some(a) => a.size.clone(),
                    None if t.bounded_axes.contains(&axis) => format!("<={d}"),
                    None => d.to_string(),
                })
                .collect();
            let _ = writeln!(s, "{kind}: {} {}[{}]", t.name, t.dtype, dims.join(","));
        }
    }
    for d in &r.dims {
        let _ = writeln!(
            s,
            "dim: {} {}..{} (set at run time; {})",
            d.name, d.min, d.max, d.strategy
        );
    }
    let _ = writeln!(s, "parameters: {}", r.parameters);
    let _ = writeln!(s, "operators:");
    for OpCount { op, count } in &r.operators {
        let _ = writeln!(s, "  {op:<24} {count}");
    }
    if r.unsupported.is_empty() {
        if let (Some(w), Some(a), Some(lb)) =
            (r.weights_bytes, r.arena_bytes, r.arena_lower_bound_bytes)
        {
            let _ = writeln!(s, "weights: {w} bytes as stored");
            if let (Some(u), Some(c), Some(l)) =
                (r.unshared_weights_bytes, r.code_bytes, r.library_bytes)
            {
                if u != w {
                    let _ = writeln!(s, "  ({u} bytes with a copy per node)");
                }
                for sw in &r.shared_weights {
                    let _ = writeln!(
                        s,
                        "  {} ({} bytes) stored once for {} nodes: {}",
                        sw.constant,
                        sw.bytes,
                        sw.nodes.len(),
                        abbreviated(&sw.nodes)
                    );
                }
                let _ = writeln!(s, "code: {c} bytes");
                let _ = writeln!(s, "library: {l} bytes (.so)");
            }
            let _ = writeln!(s, "arena: {a} bytes (lower bound {lb} bytes)");
        }
        let _ = writeln!(s, "unsupported: none");
        if let Some(p) = &r.int8 {
            let list = |m: &BTreeMap<String, usize>| {
                m.iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let _ = writeln!(s, "int8:");
            if !p.integer_ops_in_model.is_empty() {
                let _ = writeln!(
                    s,
                    "  integer ops in the model: {}",
                    list(&p.integer_ops_in_model)
                );
            }
            let _ = writeln!(
                s,
                "  --quantize int8 puts {} layers on integer kernels{}{}",
                p.quantized_layer_count,
                if p.quantized_layers.is_empty() {
                    ""
                } else {
                    ": "
                },
                list(&p.quantized_layers)
            );
            let _ = writeln!(
                s,
                "  float32 (no integer kernel; between dequantize and quantize steps): {} nodes",
                p.float32_nodes.len()
            );
            for n in &p.float32_nodes {
                let _ = writeln!(s, "    node '{}' ({})", n.node, n.op);
            }
        }
        if let Some(k) = &r.kernels {
            let _ = writeln!(
                s,
                "kernels ({} {}, features {}):",
                k.target, k.cpu, k.features
            );
            for n in &k.nodes {
                let mut line = format!("  {:<32} {:<14} {}", n.node, n.op, n.strategy);
                if !n.kernels.is_empty() {
                    let _ = write!(line, " [{}]", n.kernels.join(", "));
                }
                if let Some(t) = &n.tile {
                    let _ = write!(line, " tile {t}");
                }
                if n.scratch_bytes > 0 {
                    let _ = write!(line, " scratch {} B", n.scratch_bytes);
                }
                if n.tasks > 1 {
                    let _ = write!(line, " tasks {}", n.tasks);
                }
                if let Some(t) = &k.threads {
                    // The tasks are near-equal slices of the node.
                    let _ = write!(
                        line,
                        " [{} threads: largest task {:.0}% of the node, idle {:.0}%]",
                        t.threads,
                        100.0 / n.tasks as f64,
                        100.0 * nnc::codegen::tasks::idle_fraction(n.tasks, t.threads)
                    );
                }
                let _ = writeln!(s, "{line}  ({})", n.reason);
            }
            if let Some(t) = &k.threads {
                let _ = writeln!(
                    s,
                    "threads: {} threads: {:.0}% of the work in split nodes; estimated speedup {:.2}x over 1 thread (every task equally fast, no memory limits)",
                    t.threads,
                    100.0 * t.parallel_fraction,
                    t.speedup
                );
            }
        }
    } else {
        let _ = writeln!(s, "unsupported ({}):", r.unsupported.len());
        for u in &r.unsupported {
            let _ = writeln!(
                s,
                "  node '{}' ({}): {} [{}]",
                u.node, u.op, u.reason, u.suite_status
            );
        }
    }
    s
}

/// What runs on integer kernels and what in float32: integer ops the model already has
/// (pre-quantized QDQ / QLinear models, after the qdq pass), the layers
/// `--quantize int8` would quantize and on which kernel, and every other computing node,
/// which runs in float32 between dequantize and quantize steps.
fn int8_plan(g: &Graph) -> Int8Plan {
    let layers = nnc::quant::int8::candidates(g, &[]);
    let is_integer = |op: &Op| {
        matches!(
            op,
            Op::ConvInteger(_)
                | Op::MatMulInteger
                | Op::ConvU8S8 { .. }
                | Op::QuantizeToPlanes(_)
                | Op::QuantizeLinear { .. }
                | Op::DequantizeLinear { .. }
        )
    };
    let mut present: BTreeMap<String, usize> = BTreeMap::new();
    for n in g.nodes.iter().filter(|n| is_integer(&n.op)) {
        *present.entry(n.op.name()).or_default() += 1;
    }
    let mut planned: BTreeMap<String, usize> = BTreeMap::new();
    for l in &layers {
        let n = g
            .nodes
            .iter()
            .find(|n| n.name == l.node && n.outputs[0] == l.output);
        if let Some(n) = n {
            let kernel = nnc::quant::int8::integer_op_of(g, n);
            *planned.entry(format!("{} -> {kernel}", l.op)).or_default() += 1;
        }
    }
    let quantized: Vec<&str> = layers.iter().map(|l| l.node.as_str()).collect();
    let float32_nodes = g
        .nodes
        .iter()
        .filter(|n| !is_integer(&n.op) && !matches!(n.op, Op::Reshape { .. }))
        .filter(|n| !quantized.contains(&n.name.as_str()))
        .map(|n| NodeRef {
            node: n.name.clone(),
            op: n.op.name(),
        })
        .collect();
    Int8Plan {
        integer_ops_in_model: present,
        quantized_layers: planned,
        quantized_layer_count: layers.len(),
        float32_nodes,
    }
}

/// Up to four names, then how many more.
fn abbreviated(names: &[String]) -> String {
    let shown: Vec<&str> = names.iter().take(4).map(String::as_str).collect();
    match names.len() {
        n if n > 4 => format!("{}, … ({} more)", shown.join(", "), n - 4),
        _ => shown.join(", "),
    }
}
