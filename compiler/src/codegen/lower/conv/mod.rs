//! Conv: the kernel plan's [`ConvStrategy`] per node, each strategy in its own file.
//!
//! * pointwise (1×…×1 kernel, stride 1, no padding, float32): per batch and group,
//!   `Y_g[Mg, P] = W_g[Mg, Cg] · X_g[Cg, P]` — one GEMM reading X in place (here);
//! * depthwise (one input channel per group, float32, 1-D or 2-D): the machine-code
//!   kernels on x86, else a direct loop vectorized along the output width over a
//!   zero-padded copy of one input plane ([`depthwise`]);
//! * Winograd F(4×4)/F(2×2) for 3×3 stride-1 convs with constant weights ([`winograd`]);
//! * the transposed GEMM `Yᵀ = Xᵀ·Wᵀ` for few positions and many maps ([`narrow`]);
//! * on x86 kernels, the implicit GEMM reading the padded input (stride 1) or its phase
//!   planes (stride 2) in place, rows ≥ 96 written straight into Y ([`implicit_gemm`]);
//! * otherwise the im2col matrix written a chunk at a time in the GEMM's panel layout
//!   ([`im2col`]). Weights are packed at compile time when constant; bias, residual and
//!   activation are fused into the GEMM epilogue;
//! * scalar (float64, float16, bfloat16): a direct loop nest with bounds checks
//!   ([`scalar`]).
//!
//! # Activation layout: NCHW
//!
//! Every tensor stays in the model's NCHW layout; no pass reorders activations. Why,
//! and what was measured (one thread, on an AVX-512 Xeon):
//! * NCHW needs no reorder at the graph's edges or around the ops without a blocked
//!   kernel, makes Reshape/Flatten views and Concat along channels in-place slices
//!   (onnxruntime, which converts conv chains to NCHWc, spends ~0.45 ms of
//!   squeezenet1_1's ~7 ms in Concat and ReorderOutput), and lets one GEMM serve Conv,
//!   Gemm and MatMul.
//! * Its cost is in the layers where the vector runs along output positions that are
//!   few or oddly sized, or where outputs are large: onnxruntime's NCHWc kernels beat
//!   its own NCHW ones by 1.5× on a 3×3 conv on 55×55, 2.2× on SqueezeNet's stride-2
//!   stem, 3.5× on 3×3/2 max pooling (its profile against `benches/bench_conv.py`'s
//!   one-node models). nnc's NCHW paths (Winograd, implicit GEMM over phase planes,
//!   the transposed GEMM for 7×7 maps, the separable max pool) beat onnxruntime's
//!   NCHW kernels on each of those layers, and are even with its NCHWc ones on ResNet's
//!   3×3 convs (the Winograd F(4×4) layers 1.55 vs 1.95 ms, the 512-map 7×7 ones
//!   2.8 vs 2.7), but not on SqueezeNet's stem and first pool, where squeezenet1_1
//!   still trails onnxruntime (BENCHMARKS.md's history in git).
//! * So NCHW stays the layout until a channel-blocked path for conv chains is built and
//!   measured against it. A fused Conv+ReLU+MaxPool that pools the stem's output band
//!   by band from L2 was measured: no gain beyond noise, as the stem is bound by its
//!   conv, not by the 3.2 MB round trip.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::FunctionBuilder;

use super::gemm::{
    self, ALayout, Addend, BLayout, GemmKernel, GemmSpec, Geometry, RunTimeStrides, LANES,
    PANEL_QUANTUM,
};
use super::linalg::{domain_add, domain_mul, domain_zero};
use super::{LowerCtx, LowerResult, Operand};
use crate::codegen::kernel::{self, domain, flags};
use crate::codegen::kernels::x86::X86Isa;
use crate::codegen::options::{ConvRows, KernelOptions, KernelSource, Toggle, WinogradChoice};
use crate::codegen::plan::{NodeKernel, NodeOperands, Strategy};
use crate::codegen::tasks::Split;
use crate::codegen::Target;
use crate::ir::{DType, Tensor, TensorType};
use crate::ops::{Activation, ConvAttrs};

// The strategies, each in its own file; they share this module's geometry, operands
// and copy helpers.
mod depthwise;
mod im2col;
mod implicit_gemm;
mod narrow;
mod scalar;
pub(super) mod winograd;

pub(super) use im2col::unravel;
use im2col::*;
use implicit_gemm::*;
use scalar::*;

pub(super) const F32: usize = 4;
/// Bytes of C per call of the implicit-GEMM conv kernel (see `conv_implicit_gemm`).
const IMPLICIT_C_BYTES: usize = 512 * 1024;
/// Bytes of im2col panels produced and consumed at a time: about L2, so they mostly
/// stay there between being written and being read by the GEMM. Every chunk's GEMM
/// streams all of A (the weights) once, so chunks must not be small: at 256 KB a
/// 3×3×512 conv (K = 4608, 49 outputs) ran as chunks of 48 and 1 columns, reading its
/// 9.4 MB of weights from L3 twice.
const IM2COL_CHUNK_BYTES: usize = 2 * 1024 * 1024;
/// How a batch-1, one-group conv's output positions are split into tasks, `units`
/// pieces of them (im2col column chunks, implicit-GEMM row chunks); other convs are
/// not split here.
fn position_split(g: &ConvGeometry, units: usize) -> Split {
    if g.batch * g.group != 1 {
        return Split::of(1, 0);
    }
    Split::of(units, g.out_size() * g.mg * g.gemm_k())
}

/// Scratch sub-buffers start on this many bytes (a cache line).
const SCRATCH_ALIGN: usize = 64;

/// Everything about a convolution's shapes, spatial vectors having one entry per axis.
#[derive(Clone, Debug)]
struct ConvGeometry {
    batch: usize,
    channels: usize,
    maps: usize,
    group: usize,
    /// Input channels and output maps per group.
    cg: usize,
    mg: usize,
    input: Vec<usize>,
    output: Vec<usize>,
    kernel: Vec<usize>,
    strides: Vec<usize>,
    dilations: Vec<usize>,
    pad_begin: Vec<usize>,
    pad_end: Vec<usize>,
}

impl ConvGeometry {
    fn new(
        c: &ConvAttrs,
        x: &TensorType,
        w: &TensorType,
        y: &TensorType,
    ) -> Result<ConvGeometry, String> {
        let sp = x
            .rank()
            .checked_sub(2)
            .filter(|&s| s > 0)
            .ok_or("Conv input must have rank ≥ 3")?;
        let attrs_ok = c.kernel.len() == sp
            && c.strides.len() == sp
            && c.dilations.len() == sp
            && c.pads.len() == 2 * sp;
        if !attrs_ok || w.rank() != sp + 2 || y.rank() != sp + 2 || c.group == 0 {
            return Err(format!(
                "Conv attributes do not match input {x} and weight {w}"
            ));
        }
        if c.kernel.contains(&0) || c.strides.contains(&0) || c.dilations.contains(&0) {
            return Err("Conv kernel, strides and dilations must be positive".into());
        }
        let (channels, maps) = (x.shape[1], w.shape[0]);
        if channels != w.shape[1] * c.group
            || !maps.is_multiple_of(c.group)
            || w.shape[2..] != c.kernel[..]
            || y.shape[1] != maps
        {
            return Err(format!(
                "Conv channels do not match: input {x}, weight {w}, group {}",
                c.group
            ));
        }
        for d in 0..sp {
            let expected = crate::ops::infer::window_output(
                x.shape[2 + d],
                c.kernel[d],
                c.strides[d],
                c.pads[d] + c.pads[sp + d],
                c.dilations[d],
                false,
            )?;
            if y.shape[2 + d] != expected {
                return Err(format!(
                    "Conv output {y} does not match its input {x} and attributes"
                ));
            }
        }
        Ok(ConvGeometry {
            batch: x.shape[0],
            channels,
            maps,
            group: c.group,
            cg: channels / c.group,
            mg: maps / c.group,
            input: x.shape[2..].to_vec(),
            output: y.shape[2..].to_vec(),
            kernel: c.kernel.clone(),
            strides: c.strides.clone(),
            dilations: c.dilations.clone(),
            pad_begin: c.pads[..sp].to_vec(),
            pad_end: c.pads[sp..].to_vec(),
        })
    }

    fn in_size(&self) -> usize {
        self.input.iter().product()
    }

    fn out_size(&self) -> usize {
        self.output.iter().product()
    }

    fn taps(&self) -> usize {
        self.kernel.iter().product()
    }

    /// The GEMM's K: one row per (input channel, kernel tap).
    fn gemm_k(&self) -> usize {
        self.cg * self.taps()
    }

    fn padded(&self) -> Vec<usize> {
        (0..self.input.len())
            .map(|d| self.input[d] + self.pad_begin[d] + self.pad_end[d])
            .collect()
    }

    /// Scratch for the zero-padded copy of one group's input (0 without padding).
    fn padded_copy_bytes(&self) -> usize {
        if self.has_padding() {
            align_up(self.cg * self.padded().iter().product::<usize>() * F32)
        } else {
            0
        }
    }

    fn has_padding(&self) -> bool {
        self.pad_begin.iter().chain(&self.pad_end).any(|&p| p > 0)
    }
}

/// The code shape used for one Conv node (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ConvPath {
    Pointwise,
    Depthwise,
    Im2col,
    Scalar,
}

fn choose_path(g: &ConvGeometry, dtype: DType) -> ConvPath {
    if dtype != DType::F32 {
        return ConvPath::Scalar;
    }
    if is_pointwise(g) && !aliased_planes(g) {
        ConvPath::Pointwise
    } else if g.cg == 1 && g.input.len() <= 2 {
        ConvPath::Depthwise
    } else {
        ConvPath::Im2col
    }
}

/// 1×…×1 kernel, stride 1, no padding.
fn is_pointwise(g: &ConvGeometry) -> bool {
    let unit = |v: &[usize]| v.iter().all(|&x| x == 1);
    unit(&g.kernel) && unit(&g.strides) && !g.has_padding()
}

/// Whether a pointwise conv's input planes are a multiple of 4 KB apart, and at least
/// 8 of them: the K rows of a GEMM panel read in place then all fall in one L1 set
/// (its index is address bits 6–11), more rows than the set has ways, and every row
/// tile reloads the panel. Such convs (power-of-two maps of 32×32 and up, 160×160)
/// take the im2col path, whose panels are copied once into contiguous scratch:
/// measured on a Zen 3 (`bench_conv.py`, 1 thread), 16→64 maps on 160×160 2.3 ms in
/// place against onnxruntime's 1.3, 64→64 on 64×64 0.86 against 0.52.
fn aliased_planes(g: &ConvGeometry) -> bool {
    is_pointwise(g) && (g.in_size() * F32).is_multiple_of(4096) && g.cg >= 8
}

/// Flags for loads of memory nothing writes while the node runs (inputs, weights,
/// tables): `readonly` + `can_move` let the optimizer hoist and schedule them freely.
fn stable_flags() -> MemFlagsData {
    flags().with_readonly().with_can_move()
}

fn align_up(bytes: usize) -> usize {
    bytes.div_ceil(SCRATCH_ALIGN) * SCRATCH_ALIGN
}

/// How one Conv node is computed (see the module docs), as the kernel plan decides it.
#[derive(Clone, Debug, PartialEq)]
pub enum ConvStrategy {
    /// 1×…×1, stride 1, unpadded: per batch and group one GEMM reading X in place.
    Pointwise(Geometry),
    /// Few positions and many maps: the transposed GEMM `Yᵀ = Xᵀ·Wᵀ` ([`narrow`]).
    Narrow(Geometry),
    /// One input channel per group: the machine-code kernel of this family, or
    /// Cranelift's loop.
    Depthwise(Option<X86Isa>),
    /// Winograd F(m×m, 3×3): transforms and the GEMM of the transformed products.
    Winograd {
        m: usize,
        transforms: WinogradTransforms,
        gemm: Geometry,
        split: WinogradSplit,
    },
    /// The GEMM reading the padded input (stride 1) or its stride-2 phase planes in
    /// place; `rows_in_place`: wide output rows are written straight into Y.
    ImplicitGemm {
        gemm: Geometry,
        phases: bool,
        rows_in_place: bool,
    },
    /// im2col panels a chunk at a time, then the GEMM.
    Im2col(Geometry),
    /// float64, float16 and bfloat16: a direct loop nest.
    Scalar,
}

/// How a Winograd conv runs as tasks with a thread pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WinogradSplit {
    /// By chunks of tile rows (not split: one task): a prologue pads and phase-splits
    /// the input once into the node's shared scratch, and each task runs its
    /// contiguous range of chunks, the last task the last (maybe shorter) chunk.
    Chunks(Split),
    /// By groups of maps over the whole image (see `winograd::by_maps`).
    Maps(Split),
}

impl WinogradSplit {
    pub fn tasks(&self) -> usize {
        match self {
            WinogradSplit::Chunks(s) | WinogradSplit::Maps(s) => s.tasks,
        }
    }
}

/// The Winograd input and output transforms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WinogradTransforms {
    Clif,
    /// Machine code for tile rows, on this family's vectors.
    X86(X86Isa),
    /// AVX-512 machine code for whole 8×8 planes, products included (F(2×2) only).
    Plane16,
}

impl ConvStrategy {
    pub fn name(&self) -> String {
        match self {
            ConvStrategy::Pointwise(_) => "pointwise-gemm".into(),
            ConvStrategy::Narrow(_) => "transposed-gemm".into(),
            ConvStrategy::Depthwise(_) => "depthwise".into(),
            ConvStrategy::Winograd { m, .. } => format!("winograd-f{m}x{m}"),
            ConvStrategy::ImplicitGemm { phases: true, .. } => "implicit-gemm-s2".into(),
            ConvStrategy::ImplicitGemm { .. } => "implicit-gemm".into(),
            ConvStrategy::Im2col(_) => "im2col+gemm".into(),
            ConvStrategy::Scalar => "direct-scalar".into(),
        }
    }

    /// The GEMM kernel family, for the strategies that run one.
    pub fn gemm(&self) -> Option<&Geometry> {
        match self {
            ConvStrategy::Pointwise(g)
            | ConvStrategy::Narrow(g)
            | ConvStrategy::Im2col(g)
            | ConvStrategy::Winograd { gemm: g, .. }
            | ConvStrategy::ImplicitGemm { gemm: g, .. } => Some(g),
            ConvStrategy::Depthwise(_) | ConvStrategy::Scalar => None,
        }
    }

    /// Kernel-library names of the micro-kernels it calls.
    pub fn kernels(&self) -> Vec<String> {
        use crate::codegen::plan::{gemm_kernel_name, isa_suffix};
        match self {
            ConvStrategy::Depthwise(Some(isa)) => vec![format!("f32-dwconv-{}", isa_suffix(*isa))],
            ConvStrategy::Depthwise(None) => vec!["f32-dwconv-clif".into()],
            ConvStrategy::Scalar => vec![],
            ConvStrategy::Winograd {
                m,
                transforms: WinogradTransforms::Plane16,
                ..
            } => ["input", "products", "output"]
                .iter()
                .map(|k| format!("f32-winograd-f{m}-plane16-{k}-avx512f"))
                .collect(),
            ConvStrategy::Winograd {
                m,
                transforms,
                gemm,
                ..
            } => {
                let isa = match transforms {
                    WinogradTransforms::X86(isa) => isa_suffix(*isa),
                    _ => "clif",
                };
                vec![
                    format!("f32-winograd-f{m}-input-{isa}"),
                    gemm_kernel_name(gemm),
                    format!("f32-winograd-f{m}-output-{isa}"),
                ]
            }
            _ => self.gemm().map(gemm_kernel_name).into_iter().collect(),
        }
    }
}

/// The kernel plan of one Conv node; `None` when its operands are not a valid conv
/// (lowering then reports why).
pub fn plan_conv(
    c: &ConvAttrs,
    node: &NodeOperands,
    target: &Target,
    options: &KernelOptions,
) -> Option<NodeKernel> {
    let (x, w, y) = (node.input(0)?, node.input(1)?, *node.outputs.first()?);
    let g = ConvGeometry::new(c, x, w, y).ok()?;
    let constant_w = matches!(node.constant(1), Some(Tensor::F32(_)));
    let gemm = Geometry::for_target(target, options);
    let path = choose_path(&g, x.dtype);
    let scratch = scratch_bytes(&g, path, options);
    let plan =
        |s: ConvStrategy, reason: &str| Some(NodeKernel::new(Strategy::Conv(s), scratch, reason));
    if matches!(path, ConvPath::Pointwise | ConvPath::Im2col)
        && narrow::applies(&g, constant_w, &gemm, options)
    {
        let tasks = narrow::split(&g, &gemm).tasks;
        return plan(
            ConvStrategy::Narrow(gemm),
            "few output positions and many maps, constant weights, x86 GEMM kernels",
        )
        .map(|k| {
            let mut k = with_prologue(k.with_tasks(tasks), true);
            if k.prologue {
                k.prologue_parts = narrow::prologue_split(&g).tasks;
            }
            k.weights_by_columns = tasks > 1;
            k
        });
    }
    match path {
        ConvPath::Pointwise => {
            let p = g.out_size();
            let rows = BLayout::Rows { row_stride: p };
            let (axis, split) = match (g.batch * g.group, constant_w) {
                (1, true) => gemm::weights_split(g.mg, p, g.cg, &gemm, gemm::SplitAxis::Rows),
                (1, false) => (
                    gemm::SplitAxis::Cols,
                    gemm::col_split(g.mg, p, g.cg, &rows, &gemm),
                ),
                _ => (gemm::SplitAxis::Cols, Split::of(1, 0)),
            };
            plan(
                ConvStrategy::Pointwise(gemm),
                "1x1 kernel, stride 1, no padding",
            )
            .map(|k| {
                let mut k = k.with_tasks(split.tasks);
                k.weights_by_rows = axis == gemm::SplitAxis::Rows && split.tasks > 1;
                k
            })
        }
        ConvPath::Depthwise => {
            let bias = node.has_input(2);
            let residual = node.has_input(3);
            let isa = depthwise::x86_kernel(&g, bias, residual, c.activation, target, options);
            let reason = match (isa, options.dwconv) {
                (Some(_), _) => "one channel per group; the machine-code kernel covers its shape",
                (None, KernelSource::Clif) => "one channel per group; --kernel dwconv=clif",
                (None, _) => {
                    "one channel per group; no machine-code kernel for this target or shape"
                }
            };
            let tasks = match isa {
                Some(_) => depthwise::channel_split(&g).tasks,
                None => 1,
            };
            plan(ConvStrategy::Depthwise(isa), reason).map(|k| k.with_tasks(tasks))
        }
        ConvPath::Im2col if winograd::applies(&g, constant_w, options) => {
            let (m, transforms) = winograd::choose(&g, c.activation, target, options)?;
            let reason = match options.winograd {
                WinogradChoice::Auto => {
                    "3x3 stride 1, constant weights; F(m) chosen by maps and tiles"
                }
                _ => "3x3 stride 1, constant weights; --kernel winograd",
            };
            let split = winograd::task_split(&g, m, transforms, &gemm);
            plan(
                ConvStrategy::Winograd {
                    m,
                    transforms,
                    gemm,
                    split,
                },
                reason,
            )
            .map(|k| with_parted_prologue(k.with_tasks(split.tasks()), true, &g))
        }
        ConvPath::Im2col if implicit_gemm_fits(&g, &gemm, options) && !aliased_planes(&g) => {
            let tasks = implicit_split(&g, options).tasks;
            plan(
                ConvStrategy::ImplicitGemm {
                    gemm,
                    phases: PhasePlanes::of(&g).is_some(),
                    rows_in_place: writes_rows_in_place(&g, options),
                },
                "x86 GEMM kernels and output rows wide enough to read the input in place",
            )
            .map(|k| with_parted_prologue(k.with_tasks(tasks), implicit_has_prologue(&g), &g))
        }
        ConvPath::Im2col => {
            let tasks = im2col_split(&g).tasks;
            let reason = match aliased_planes(&g) {
                true => "1x1 on planes a multiple of 4 KB apart: read in place, a panel's K rows share one L1 set",
                false => "the general path",
            };
            plan(ConvStrategy::Im2col(gemm), reason)
                .map(|k| with_parted_prologue(k.with_tasks(tasks), g.has_padding(), &g))
        }
        ConvPath::Scalar => plan(ConvStrategy::Scalar, "no vector kernel for this dtype"),
    }
}

/// The plan split into tasks, with a prologue when `prologue` and the node is split.
fn with_prologue(mut k: NodeKernel, prologue: bool) -> NodeKernel {
    k.prologue = prologue && k.tasks > 1;
    k
}

/// The plan with a prologue split by input channels (see [`prologue_split`]).
fn with_parted_prologue(k: NodeKernel, prologue: bool, g: &ConvGeometry) -> NodeKernel {
    let mut k = with_prologue(k, prologue);
    if k.prologue {
        k.prologue_parts = prologue_split(g).tasks;
    }
    k
}

/// Float copies of a prologue worth one unit of [`Split`] work: a copy moves a float
/// in and out of memory, several multiply-adds' time.
const PROLOGUE_COPY_COST: usize = 8;

/// How a split conv's prologue (the padded copy, phase planes) is split into parts by
/// input channels, which the pool runs before the tasks (see
/// [`NodeKernel::prologue_parts`]): run by the launching thread alone, ResNet-18's
/// 56×56 Winograd convs left the other idle for a third of each conv.
fn prologue_split(g: &ConvGeometry) -> Split {
    let plane: usize = g.padded().iter().product();
    Split::of(g.cg, g.cg * plane * PROLOGUE_COPY_COST)
}

/// `base + first` input channels (planes of `plane` floats) on.
fn channel_at(b: &mut FunctionBuilder, base: Value, first: Value, plane: usize) -> Value {
    kernel::elem_addr(b, base, first, plane * F32)
}

/// Arena scratch a convolution needs: the padded input and im2col panels, or the
/// padded plane of a depthwise conv. The most any strategy of its path needs, so the
/// memory plan does not depend on the CPU.
fn scratch_bytes(g: &ConvGeometry, path: ConvPath, options: &KernelOptions) -> usize {
    match path {
        // Weights that are not constant fall back from Winograd to im2col.
        ConvPath::Im2col => Im2colLayout::new(g)
            .bytes()
            .max(winograd::scratch_bytes(g, options).unwrap_or(0))
            .max(narrow::scratch_bytes(g).unwrap_or(0)),
        ConvPath::Depthwise => depthwise::scratch_bytes(g),
        ConvPath::Pointwise => narrow::scratch_bytes(g).unwrap_or(0),
        ConvPath::Scalar => 0,
    }
}

pub fn conv(ctx: &mut LowerCtx, c: &ConvAttrs) -> LowerResult {
    let (x, w, y) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0));
    let bias = ctx.inputs.get(2).cloned().flatten();
    if w.ty.dtype != x.ty.dtype
        || bias
            .as_ref()
            .is_some_and(|b| b.ty.dtype != x.ty.dtype || b.ty.numel() != w.ty.shape[0])
    {
        return Err(format!("Conv operand types do not match input {}", x.ty));
    }
    if !x.ty.dtype.is_float() {
        return Err(format!("Conv does not support {}", x.ty.dtype));
    }
    let g = ConvGeometry::new(c, &x.ty, &w.ty, &y.ty)?;
    if y.ty.numel() == 0 {
        return Ok(());
    }
    let residual = ctx.inputs.get(3).cloned().flatten();
    let fused = residual.is_some() || c.activation != Activation::None;
    if fused && x.ty.dtype != DType::F32 {
        return Err(format!(
            "a fused Conv epilogue needs float32, not {}",
            x.ty.dtype
        ));
    }
    let ops = ConvOperands {
        x,
        w,
        bias,
        y,
        residual,
        activation: c.activation,
    };
    let Strategy::Conv(strategy) = ctx.kernel.strategy.clone() else {
        return Err("no Conv kernel was planned for this node".into());
    };
    match strategy {
        ConvStrategy::Narrow(gemm) => narrow::conv_transposed_gemm(ctx, &g, &ops, gemm),
        ConvStrategy::Pointwise(gemm) => conv_pointwise(ctx, &g, &ops, gemm),
        ConvStrategy::Depthwise(isa) => depthwise::conv_depthwise(ctx, &g, &ops, isa),
        ConvStrategy::Winograd {
            m,
            transforms,
            gemm,
            split,
        } => winograd::conv_winograd(ctx, &g, &ops, (m, transforms, split), gemm),
        ConvStrategy::ImplicitGemm {
            gemm,
            rows_in_place,
            ..
        } => conv_im2col(ctx, &g, &ops, gemm, Some(rows_in_place)),
        ConvStrategy::Im2col(gemm) => conv_im2col(ctx, &g, &ops, gemm, None),
        ConvStrategy::Scalar => {
            conv_scalar(ctx.b, &g, &ops);
            apply_epilogue(ctx.b, &ops)
        }
    }
}

/// The fused epilogue as a pass over the finished float32 output, for the paths that
/// do not go through the GEMM: `Y = activation(Y + R)`, four lanes at a time.
fn apply_epilogue(b: &mut FunctionBuilder, ops: &ConvOperands) -> LowerResult {
    if ops.residual.is_none() && ops.activation == Activation::None {
        return Ok(());
    }
    let res = ops.residual.as_ref().map(|r| r.ptr);
    let y = ops.y.ptr;
    super::elementwise::activate_run(b, y, y, res, ops.y.ty.numel(), ops.activation)
}

pub(super) struct ConvOperands {
    pub(super) x: Operand,
    pub(super) w: Operand,
    pub(super) bias: Option<Operand>,
    pub(super) y: Operand,
    /// Fused epilogue: `Y = activation(conv + bias + R)`.
    pub(super) residual: Option<Operand>,
    pub(super) activation: Activation,
}

fn scratch(ctx: &LowerCtx) -> Result<Value, String> {
    ctx.scratch
        .ok_or_else(|| "Conv needs a scratch buffer but none was planned".to_string())
}

/// The weights as the GEMM's A, all groups stacked: packed at compile time when
/// constant, read in place (`[M, K]` row-major) otherwise.
fn weights_operand(
    ctx: &mut LowerCtx,
    g: &ConvGeometry,
    w: &Operand,
    geom: Geometry,
    by_task: Option<&Split>,
) -> Result<WeightsA, String> {
    let k = g.gemm_k();
    if let Some(Tensor::F32(values)) = &w.constant {
        let values: Vec<f32> = values.iter().copied().collect();
        let mut packed = Vec::with_capacity(values.len());
        for grp in 0..g.group {
            let rows = &values[grp * g.mg * k..(grp + 1) * g.mg * k];
            let get = |i: usize, kk: usize| rows[i * k + kk];
            packed.extend(match by_task {
                Some(split) => gemm::pack_a_by_task(&geom, g.mg, k, split, get),
                None => gemm::pack_a(&geom, g.mg, k, get),
            });
        }
        return Ok(WeightsA {
            ptr: ctx.weights_f32(&packed)?,
            packed: true,
            geom,
        });
    }
    Ok(WeightsA {
        ptr: w.ptr,
        packed: false,
        geom,
    })
}

/// Stacked per-group A matrices; group `grp` starts `grp·Mg·K` floats in, either way.
#[derive(Clone, Copy)]
struct WeightsA {
    ptr: Value,
    packed: bool,
    /// The GEMM kernel family, which fixes the packed layouts.
    geom: Geometry,
}

impl WeightsA {
    fn layout(&self, g: &ConvGeometry) -> ALayout {
        if self.packed {
            ALayout::Packed
        } else {
            ALayout::Strided {
                row_stride: g.gemm_k(),
                col_stride: 1,
            }
        }
    }

    fn group(&self, b: &mut FunctionBuilder, grp: Value, g: &ConvGeometry) -> Value {
        kernel::elem_addr(b, self.ptr, grp, g.mg * g.gemm_k() * F32)
    }
}

/// The GEMM of one group: `Y_g[Mg, cols] = act(W_g[Mg, K] · B[K, cols] + bias + R)`,
/// C (and R) rows `ldc = P` apart.
fn group_gemm(
    g: &ConvGeometry,
    weights: &WeightsA,
    b: BLayout,
    cols: usize,
    k: usize,
    ops: &ConvOperands,
) -> GemmSpec {
    let mut addends = vec![];
    if ops.bias.is_some() {
        addends.push(Addend {
            row_stride: 1,
            col_stride: 0,
            scale: 1.0,
        });
    }
    if ops.residual.is_some() {
        addends.push(Addend {
            row_stride: g.out_size(),
            col_stride: 1,
            scale: 1.0,
        });
    }
    GemmSpec {
        m: g.mg,
        n: cols,
        k,
        a: weights.layout(g),
        b,
        ldc: g.out_size(),
        c_col_stride: 1,
        alpha: 1.0,
        addends,
        activation: ops.activation,
        geometry: weights.geom,
        b_taps: vec![],
        rows_at_run_time: false,
        cols_at_run_time: false,
        run_time_strides: RunTimeStrides::None,
    }
}

/// `Y[n, grp·Mg]`, the bias of group `grp` and `R[n, grp·Mg]` (as GEMM addend
/// addresses; the residual's, last, must move with C's columns).
fn output_and_bias(
    b: &mut FunctionBuilder,
    g: &ConvGeometry,
    ops: &ConvOperands,
    n: Value,
    grp: Value,
) -> (Value, Vec<Value>) {
    let p = g.out_size();
    let plane = |b: &mut FunctionBuilder, base: Value| {
        let at_n = kernel::elem_addr(b, base, n, g.maps * p * F32);
        kernel::elem_addr(b, at_n, grp, g.mg * p * F32)
    };
    let y_g = plane(b, ops.y.ptr);
    let mut addends: Vec<Value> = ops
        .bias
        .as_ref()
        .map(|bias| kernel::elem_addr(b, bias.ptr, grp, g.mg * F32))
        .into_iter()
        .collect();
    if let Some(r) = &ops.residual {
        addends.push(plane(b, r.ptr));
    }
    (y_g, addends)
}

/// Address of `X[n, grp·Cg]` for elements of `size` bytes.
fn input_group(
    b: &mut FunctionBuilder,
    g: &ConvGeometry,
    x: Value,
    n: Value,
    grp: Value,
    size: usize,
) -> Value {
    let x_n = kernel::elem_addr(b, x, n, g.channels * g.in_size() * size);
    kernel::elem_addr(b, x_n, grp, g.cg * g.in_size() * size)
}

fn conv_pointwise(
    ctx: &mut LowerCtx,
    g: &ConvGeometry,
    ops: &ConvOperands,
    geom: Geometry,
) -> LowerResult {
    let p = g.out_size();
    let by_rows = ctx.kernel.weights_by_rows;
    let row_split = gemm::row_split(g.mg, p, g.cg, &geom);
    let weights = weights_operand(ctx, g, &ops.w, geom, by_rows.then_some(&row_split))?;
    let spec = group_gemm(g, &weights, BLayout::Rows { row_stride: p }, p, g.cg, ops);
    if g.batch * g.group == 1 {
        // One GEMM: split by map tiles or column panels when the plan split the node.
        let zero = ctx.b.ins().iconst(kernel::PTR, 0);
        let x_g = input_group(ctx.b, g, ops.x.ptr, zero, zero, F32);
        let (c, bias) = output_and_bias(ctx.b, g, ops, zero, zero);
        let a = weights.group(ctx.b, zero, g);
        let axis = match by_rows {
            true => gemm::SplitAxis::Rows,
            false => gemm::SplitAxis::Cols,
        };
        return gemm::call_split(ctx, axis, &spec, a, x_g, c, &bias);
    }
    let kernel = GemmKernel::define(ctx, &spec)?;
    kernel::nested_loop(ctx.b, &[g.batch, g.group], &mut |b, idx| {
        let (n, grp) = (idx[0], idx[1]);
        let x_g = input_group(b, g, ops.x.ptr, n, grp, F32);
        let (c, bias) = output_and_bias(b, g, ops, n, grp);
        let a = weights.group(b, grp, g);
        kernel.call(b, a, x_g, c, &bias);
    });
    Ok(())
}

// ---- padded copies ----

/// Stores `count` zero floats at `dst`.
fn zero_f32(b: &mut FunctionBuilder, dst: Value, count: usize) {
    let z = b.ins().f32const(0.0);
    let zv = b.ins().splat(types::F32X4, z);
    let vecs = count / LANES;
    kernel::counted_loop(b, 0, vecs as i64, 1, |b, i| {
        let a = kernel::elem_addr(b, dst, i, LANES * F32);
        b.ins().store(flags(), zv, a, 0);
    });
    for e in vecs * LANES..count {
        b.ins().store(flags(), z, dst, (e * F32) as i32);
    }
}

/// Copies `count` floats from `src` to `dst` with vector moves, four per loop
/// iteration (the loop's own instructions would otherwise double the work).
fn copy_f32(b: &mut FunctionBuilder, dst: Value, src: Value, count: usize) {
    const UNROLL: usize = 4;
    let chunk = UNROLL * LANES;
    let chunks = count / chunk;
    let mv = |b: &mut FunctionBuilder, d: Value, s: Value, off: usize, ty: types::Type| {
        let v = b.ins().load(ty, flags(), s, off as i32);
        b.ins().store(flags(), v, d, off as i32);
    };
    kernel::counted_loop(b, 0, chunks as i64, 1, |b, i| {
        let s = kernel::elem_addr(b, src, i, chunk * F32);
        let d = kernel::elem_addr(b, dst, i, chunk * F32);
        for u in 0..UNROLL {
            mv(b, d, s, u * LANES * F32, types::F32X4);
        }
    });
    let mut at = chunks * chunk;
    while at + LANES <= count {
        mv(b, dst, src, at * F32, types::F32X4);
        at += LANES;
    }
    for e in at..count {
        mv(b, dst, src, e * F32, types::F32);
    }
}

/// Copies `channels` planes of shape `src_shape` at `src` into planes of shape
/// `dst_shape` at `dst`, each element moved by `offset` along every axis, and zeroes the
/// rest of the destination. Only the border is zeroed: below the interior along an
/// axis, and past it, the destination is one contiguous run per axis level.
fn copy_padded(
    b: &mut FunctionBuilder,
    src: Value,
    src_shape: &[usize],
    channels: usize,
    dst: Value,
    dst_shape: &[usize],
    offset: &[usize],
) {
    let mut src_full = vec![channels];
    src_full.extend(src_shape);
    let mut dst_full = vec![channels];
    dst_full.extend(dst_shape);
    let mut offset_full = vec![0];
    offset_full.extend(offset);
    let boxes = PaddedBoxes {
        src_strides: kernel::strides_of(&src_full),
        dst_strides: kernel::strides_of(&dst_full),
        src: src_full,
        dst: dst_full,
        offset: offset_full,
    };
    boxes.copy(b, src, dst, 0);
}

/// Shapes, strides and offsets of [`copy_padded`], channels first.
struct PaddedBoxes {
    src: Vec<usize>,
    dst: Vec<usize>,
    src_strides: Vec<usize>,
    dst_strides: Vec<usize>,
    offset: Vec<usize>,
}

impl PaddedBoxes {
    /// Fills the destination block of `axis` at `dst` from the source block at `src`.
    fn copy(&self, b: &mut FunctionBuilder, src: Value, dst: Value, axis: usize) {
        let (ds, off, inner) = (self.dst_strides[axis], self.offset[axis], self.src[axis]);
        zero_f32(b, dst, off * ds);
        let after = (off + inner) * ds;
        if axis + 1 == self.src.len() {
            let d = b.ins().iadd_imm_s(dst, (off * F32) as i64);
            copy_f32(b, d, src, inner);
        } else {
            kernel::counted_loop(b, 0, inner as i64, 1, |b, i| {
                let s = kernel::elem_addr(b, src, i, self.src_strides[axis] * F32);
                let d = kernel::elem_addr(b, dst, i, ds * F32);
                let d = b.ins().iadd_imm_s(d, (off * ds * F32) as i64);
                self.copy(b, s, d, axis + 1);
            });
        }
        let tail = b.ins().iadd_imm_s(dst, (after * F32) as i64);
        zero_f32(b, tail, self.dst[axis] * ds - after);
    }
}
