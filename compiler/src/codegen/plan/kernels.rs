//! The kernel plan: for every node, the strategy and micro-kernels that will run it,
//! with the register tile, the scratch bytes and the reason for the choice.
//!
//! It is decided once, after the graph passes and before the memory plan, from the
//! node's types and constants, the target's CPU features and the caller's
//! [`KernelOptions`]. The memory plan reserves [`NodeKernel::scratch_bytes`] and
//! lowering follows [`NodeKernel::strategy`], so no later stage chooses again, and
//! `nnc inspect --kernels` shows exactly what the artifact runs.

use std::fmt;

use super::attention::AttentionPlan;
use super::conv::ConvStrategy;
use super::pool::PoolStrategy;
use crate::codegen::isa::Vector;
use crate::codegen::isa::{Dot, Isa, X86Dot};
use crate::codegen::kernels::gemm::{Geometry, KernelKind};
use crate::codegen::options::{KernelOptions, WeightFormat};
use crate::codegen::target::Target;
use crate::ir::{Graph, Node, Tensor, TensorType};
use crate::ops::Op;

/// What one node runs.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeKernel {
    pub strategy: Strategy,
    /// Arena bytes the node uses besides its inputs and outputs.
    pub scratch_bytes: usize,
    /// Why this strategy: the rule that chose it, or the option that forced it.
    pub reason: String,
    /// Tasks the node's work is split into for `run` with a thread pool (1: not
    /// split). Fixed here, whatever the number of threads, so outputs never depend on
    /// it (see [`crate::codegen::tasks`]).
    pub tasks: usize,
    /// A GEMM with packed weights as B, split by groups of B's column panels rather
    /// than by row tiles (see `super::gemm::weights_split`): the weights are then packed
    /// as whole-K panels, so that each group is contiguous.
    pub weights_by_columns: bool,
    /// A conv GEMM with packed weights as A, split by groups of A's row tiles (the
    /// maps) rather than by output positions: the weights are packed group by group
    /// (see `lower::gemm::pack_a_by_task`).
    pub weights_by_rows: bool,
    /// A node split into slices of its output rows, each lowered as the node on that
    /// slice (see [`crate::codegen::tasks::row_slicing`]).
    pub rows: Option<crate::codegen::tasks::RowSlicing>,
    /// A split node whose tasks read what a prologue prepared once (a padded input,
    /// an im2col matrix): with a pool, the prologue runs on the calling thread before
    /// the tasks are handed out (see `codegen::run`).
    pub prologue: bool,
    /// Parts the prologue is split into (by input channels, or with FP16 weights by
    /// their size), run by the pool as a first `parallel_for` before the tasks; 1: the
    /// launching thread runs it alone.
    pub prologue_parts: usize,
    /// A node over rows only the run counts, computing all of them in one call (one
    /// GEMM of that many rows) instead of one call per row: its operands are planned
    /// for this many rows, and its function takes the count's address last.
    pub rows_at_run_time: Option<usize>,
}

/// How a node is computed. Families with one code shape are [`Strategy::Clif`]; the
/// others name the choice their lowering follows.
#[derive(Clone, Debug, PartialEq)]
pub enum Strategy {
    /// The op family's Cranelift code (elementwise, movement, reductions...).
    Clif,
    /// No code: the node's output is a view of its input (decided by the memory plan,
    /// reported here for `inspect`).
    View,
    /// An f32 GEMM (MatMul, Gemm, ConvTranspose's per-tap products) on one kernel family.
    Gemm(Geometry),
    Conv(ConvStrategy),
    Pool(PoolStrategy),
    /// Softmax rows: AVX2/AVX-512 machine code, or Cranelift's.
    Softmax(Option<Vector>),
    /// Attention a block of query rows at a time: two GEMMs and softmax rows.
    Attention(AttentionPlan),
    /// A node on image planes whose size only the run knows (see
    /// [`super::planes::PlanesPlan`]).
    Planes(super::planes::PlanesPlan),
    /// The INT8 convolution.
    ConvU8S8(Int8Conv),
    /// Quantization into INT8 planes: AVX-512 or AVX2 machine code, or Cranelift's.
    QuantizeToPlanes(Option<Vector>),
    /// MatMulInteger / ConvInteger: the 8-bit dot-product GEMM on the target's products
    /// (`dot`), in x86 machine code on `x86`'s or in Cranelift's; `dot: None`: the exact
    /// int16 GEMM.
    IntGemm {
        dot: Option<Dot>,
        x86: Option<X86Dot>,
    },
    /// A Gather of rows of a constant table that a GEMM of this geometry reads packed,
    /// transposed (tied embeddings), as whole-K panels when the flag is set (see
    /// [`NodeKernel::weights_by_columns`]): the rows are read from the GEMM's packed
    /// panels, so the table is stored once (see `plan::shared_tables`).
    GatherPackedColumns(Geometry, bool),
}

/// The kernel of an INT8 convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Int8Conv {
    /// AVX-512 VNNI machine code, weight tiles outermost or input panels outermost.
    Vnni { tiles_outer: bool },
    /// 256-bit machine code (AVX-VNNI or AVX2), in either loop order.
    Ymm { isa: X86Dot, tiles_outer: bool },
    /// A depthwise conv requantized into stride-1 planes, on 256-bit registers of one
    /// quad's channels (`u8s8-dwconv-8px-avx2`).
    DepthwiseYmm,
    /// Cranelift's dot-product tree, written for the target's products.
    Clif(Dot),
}

/// The plan of a whole graph, indexed like `graph.nodes`.
#[derive(Clone, Debug, Default)]
pub struct KernelPlan {
    pub nodes: Vec<NodeKernel>,
}

impl KernelPlan {
    pub fn scratch_bytes(&self) -> Vec<usize> {
        self.nodes.iter().map(|n| n.scratch_bytes).collect()
    }

    /// Node `k` runs whole, never split into tasks: `infer` calls it once per row of an
    /// extent only the run knows (see `codegen::row_loops`), each call one row, or with
    /// `rows_at_run_time` (the rows its operands are planned for) once for all of them.
    pub fn run_whole(&mut self, k: usize, rows_at_run_time: Option<usize>) {
        let node = &mut self.nodes[k];
        node.tasks = 1;
        node.rows = None;
        node.rows_at_run_time = rows_at_run_time;
        if rows_at_run_time.is_some() {
            node.reason += "; one call for the rows the run counts";
        }
    }
}

/// A node's operand types and constant values, as planners see them.
pub struct NodeOperands<'g> {
    pub inputs: Vec<Option<&'g TensorType>>,
    pub constants: Vec<Option<&'g Tensor>>,
    pub outputs: Vec<&'g TensorType>,
}

impl<'g> NodeOperands<'g> {
    pub fn of(graph: &'g Graph, node: &Node) -> NodeOperands<'g> {
        NodeOperands {
            inputs: node.inputs.iter().map(|i| i.map(|v| graph.ty(v))).collect(),
            constants: node
                .inputs
                .iter()
                .map(|i| i.and_then(|v| graph.constant(v)))
                .collect(),
            outputs: node.outputs.iter().map(|o| graph.ty(*o)).collect(),
        }
    }

    pub fn input(&self, i: usize) -> Option<&'g TensorType> {
        self.inputs.get(i).copied().flatten()
    }

    pub fn constant(&self, i: usize) -> Option<&'g Tensor> {
        self.constants.get(i).copied().flatten()
    }

    pub fn has_input(&self, i: usize) -> bool {
        self.input(i).is_some()
    }
}

impl NodeKernel {
    pub fn new(strategy: Strategy, scratch_bytes: usize, reason: impl Into<String>) -> Self {
        NodeKernel {
            strategy,
            scratch_bytes,
            reason: reason.into(),
            tasks: 1,
            weights_by_columns: false,
            weights_by_rows: false,
            rows: None,
            prologue: false,
            prologue_parts: 1,
            rows_at_run_time: None,
        }
    }

    /// The same plan split into `tasks` tasks.
    pub fn with_tasks(mut self, tasks: usize) -> NodeKernel {
        self.tasks = tasks.max(1);
        self
    }

    fn clif(reason: &str) -> NodeKernel {
        NodeKernel::new(Strategy::Clif, 0, reason)
    }

    /// The strategy's short name (`winograd-f4x4`, `implicit-gemm-s2`, `im2col+gemm`).
    pub fn strategy_name(&self) -> String {
        match &self.strategy {
            Strategy::Clif => "clif".into(),
            Strategy::View => "view".into(),
            Strategy::Gemm(_) => "gemm".into(),
            Strategy::Conv(c) => c.name(),
            Strategy::Pool(p) => p.name().into(),
            Strategy::Softmax(_) => "softmax-rows".into(),
            Strategy::Attention(_) => "attention-rows".into(),
            Strategy::Planes(_) => "run-time-planes".into(),
            Strategy::ConvU8S8(
                Int8Conv::Vnni { tiles_outer: true }
                | Int8Conv::Ymm {
                    tiles_outer: true, ..
                },
            ) => "u8s8-conv-tiles-outer".into(),
            Strategy::ConvU8S8(
                Int8Conv::Vnni { tiles_outer: false }
                | Int8Conv::Ymm {
                    tiles_outer: false, ..
                },
            ) => "u8s8-conv-panels-outer".into(),
            Strategy::ConvU8S8(Int8Conv::DepthwiseYmm) => "u8s8-dwconv-rows".into(),
            Strategy::ConvU8S8(Int8Conv::Clif(_)) => "u8s8-conv".into(),
            Strategy::QuantizeToPlanes { .. } => "quantize-to-planes".into(),
            Strategy::IntGemm { dot: Some(_), .. } => "dot-gemm".into(),
            Strategy::IntGemm { dot: None, .. } => "int16-gemm".into(),
            Strategy::GatherPackedColumns(..) => "gather-packed-columns".into(),
        }
    }

    /// The micro-kernels it calls, by their kernel-library names.
    pub fn kernels(&self) -> Vec<String> {
        match &self.strategy {
            Strategy::Clif | Strategy::View => vec![],
            Strategy::Gemm(g) => vec![gemm_kernel_name(g)],
            Strategy::Conv(c) => c.kernels(),
            Strategy::Pool(p) => p.kernels(),
            Strategy::Planes(p) => p.kernels(),
            Strategy::Softmax(Some(isa)) => vec![format!("f32-softmax-{}", isa.suffix())],
            Strategy::Softmax(None) => vec!["f32-softmax-clif".into()],
            Strategy::Attention(AttentionPlan { gemm, softmax, .. }) => vec![
                gemm_kernel_name(gemm),
                match softmax {
                    Some(isa) => format!("f32-softmax-{}", isa.suffix()),
                    None => "f32-softmax-clif".into(),
                },
            ],
            Strategy::ConvU8S8(Int8Conv::Vnni { .. }) => {
                vec![super::int8::U8S8_CONV_X86_KERNEL.to_string()]
            }
            Strategy::ConvU8S8(Int8Conv::Ymm { isa, .. }) => {
                vec![crate::codegen::kernels::x86::conv_u8s8_ymm::kernel_name(*isa).into()]
            }
            Strategy::ConvU8S8(Int8Conv::DepthwiseYmm) => {
                vec![crate::codegen::kernels::x86::dwconv_u8s8_ymm::KERNEL_NAME.into()]
            }
            Strategy::ConvU8S8(Int8Conv::Clif(_)) => vec!["u8s8-conv-4x8-clif".into()],
            Strategy::QuantizeToPlanes(Some(Vector::Zmm)) => {
                vec!["f32-qu8-planes-avx512f".into()]
            }
            Strategy::QuantizeToPlanes(Some(Vector::Ymm)) => vec!["f32-qu8-planes-avx2".into()],
            Strategy::QuantizeToPlanes(None) => vec!["f32-qu8-planes-clif".into()],
            Strategy::IntGemm {
                dot: Some(_),
                x86: Some(isa),
            } => vec![crate::codegen::kernels::x86::gemm_u8s8_ymm::kernel_name(*isa).into()],
            Strategy::IntGemm { dot: Some(_), .. } => vec!["u8s8-gemm-dot-clif".into()],
            Strategy::IntGemm { dot: None, .. } => vec!["i16-gemm-clif".into()],
            Strategy::GatherPackedColumns(..) => vec![],
        }
    }

    /// The GEMM register tile (rows × columns), where the node runs a GEMM.
    pub fn tile(&self) -> Option<(usize, usize)> {
        let g = match &self.strategy {
            Strategy::Gemm(g) => g,
            Strategy::Conv(c) => c.gemm()?,
            Strategy::Attention(p) => &p.gemm,
            _ => return None,
        };
        Some((g.mr, g.nr))
    }
}

/// `f32-gemm-8x48-avx512f`, `f32-gemm-6x16-avx2-fma`, `f32-gemm-5x8-clif`.
pub fn gemm_kernel_name(g: &Geometry) -> String {
    let isa = match g.kernel {
        KernelKind::X86(isa) => isa.suffix(),
        KernelKind::Clif => "clif",
    };
    format!("f32-gemm-{}x{}-{isa}", g.mr, g.nr)
}

/// Decides every node's kernel, for float32 weights.
pub fn plan_kernels(graph: &Graph, target: &Target, options: &KernelOptions) -> KernelPlan {
    plan_kernels_for(graph, target, options, WeightFormat::F32)
}

/// Decides every node's kernel for weights stored as `weights`.
pub fn plan_kernels_for(
    graph: &Graph,
    target: &Target,
    options: &KernelOptions,
    weights: WeightFormat,
) -> KernelPlan {
    let isa = Isa::of(target);
    let mut plan = KernelPlan {
        nodes: graph
            .nodes
            .iter()
            .map(|node| plan_node(&node.op, &NodeOperands::of(graph, node), &isa, options))
            .collect(),
    };
    for (k, node) in plan.nodes.iter_mut().zip(&graph.nodes) {
        if k.tasks == 1 {
            if let Some(rows) = crate::codegen::tasks::row_slicing(graph, node) {
                k.tasks = rows.tasks;
                k.rows = Some(rows);
            }
        }
    }
    // Nodes on run-time planes (but elementwise ones, which run over the whole buffer):
    // one call each, never split.
    for (k, node) in plan.nodes.iter_mut().zip(&graph.nodes) {
        if crate::ops::rows::passed_extent(graph, node).is_none() {
            if let Some(planes) = super::planes::plan_planes(graph, node, &isa, options) {
                *k = planes;
            }
        }
    }
    // With FP16 weights the GEMM's panels are half and a table is stored as half rows.
    if weights == WeightFormat::F32 {
        super::shared_tables::read_tables_from_gemm_panels(graph, &mut plan);
    } else {
        // A split node expands its half weights in its prologue, shared out between
        // the prologue's parts: its own, or as many as the weights' size is worth.
        for (k, node) in plan.nodes.iter_mut().zip(&graph.nodes) {
            if k.tasks > 1 && !k.prologue {
                let weights: usize = node
                    .inputs
                    .iter()
                    .flatten()
                    .filter(|v| graph.constant(**v).is_some())
                    .map(|v| graph.ty(*v).numel())
                    .sum();
                k.prologue_parts =
                    crate::codegen::tasks::Split::of(HALF_PARTS_MAX, weights * HALF_EXPAND_COST)
                        .tasks;
            }
        }
    }
    plan
}

/// Parts of a split node's FP16 expansions at most, and a weight's expansion cost in
/// `tasks::Split` work units.
const HALF_PARTS_MAX: usize = 16;
const HALF_EXPAND_COST: usize = 4;

/// One node's kernel. A node whose shapes its family's planner cannot read (lowering
/// then reports the problem) gets the Cranelift strategy.
pub fn plan_node(op: &Op, node: &NodeOperands, isa: &Isa, options: &KernelOptions) -> NodeKernel {
    let planned = match op {
        Op::Conv(c) => super::conv::plan_conv(c, node, isa, options),
        Op::ConvTranspose(_) => super::conv_transpose::plan_conv_transpose(node),
        Op::MatMul(_) => super::gemm::plan_gemm(None, node, isa, options),
        Op::Gemm(g) => super::gemm::plan_gemm(Some(g), node, isa, options),
        Op::Pool(p) => super::pool::plan_pool(p, node, isa, options),
        Op::Softmax { axis, log } => super::softmax::plan_softmax(*axis, *log, node, isa, options),
        Op::Attention => super::attention::plan_attention(node, isa, options),
        Op::MatMulInteger | Op::ConvInteger(_) => super::int8::plan_integer(op, node, isa, options),
        Op::ConvU8S8 {
            conv,
            planes,
            requantize,
        } => super::int8::plan_conv_u8s8(conv, planes, requantize.as_ref(), node, isa, options),
        Op::QuantizeToPlanes(layout) => {
            let batch = node
                .input(0)
                .map_or(1, |x| x.shape.first().copied().unwrap_or(1));
            super::int8::plan_quantize_to_planes(layout, batch, isa, options)
        }
        Op::TopKRunTime { axis, .. } => node.input(0).map(|x| {
            let dim = x.shape.get(*axis).copied().unwrap_or(0);
            let bytes = super::scratch::top_k_sorted_scratch(x.dtype, dim);
            NodeKernel::new(
                Strategy::Clif,
                bytes,
                "the axis sorted once as (key, position) pairs",
            )
        }),
        Op::Unique { axis, .. } => node.input(0).map(|x| {
            let slices = axis.map_or(x.numel(), |a| x.shape[a]);
            let bytes = super::scratch::unique_scratch(slices);
            NodeKernel::new(Strategy::Clif, bytes, "each slice's first equal slice")
        }),
        Op::NonMaxSuppression { per_class, .. } => node.input(0).map(|b| {
            let bytes =
                super::scratch::nms_scratch(b.shape.get(1).copied().unwrap_or(0), *per_class);
            NodeKernel::new(Strategy::Clif, bytes, "candidate flags and kept boxes")
        }),
        Op::Resize(_) => (node.outputs.first().copied())
            .filter(|y| y.dims.is_some() || node.input(0).is_some_and(|x| x.dims.is_some()))
            .map(|y| {
                let width = y.shape.last().copied().unwrap_or(1);
                NodeKernel::new(
                    Strategy::Clif,
                    super::scratch::resize_scratch(width),
                    "each output column's taps, from the run's extents",
                )
            }),
        Op::RnnSequence { cell, reverse } => node.input(0).zip(node.input(1)).map(|(xw, r)| {
            super::recurrence::plan_rnn_sequence(*cell, reverse.len(), xw, r, node, isa, options)
        }),
        _ => None,
    };
    planned.unwrap_or_else(|| NodeKernel::clif("the op family's Cranelift code"))
}

impl fmt::Display for NodeKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.strategy_name())?;
        let kernels = self.kernels();
        if !kernels.is_empty() {
            write!(f, " [{}]", kernels.join(", "))?;
        }
        if let Some((mr, nr)) = self.tile() {
            write!(f, " tile {mr}x{nr}")?;
        }
        if self.scratch_bytes > 0 {
            write!(f, " scratch {} B", self.scratch_bytes)?;
        }
        if self.tasks > 1 {
            write!(f, " tasks {}", self.tasks)?;
        }
        write!(f, " ({})", self.reason)
    }
}
