//! Conv and ConvTranspose.
//!
//! Conv picks one of four code shapes per node (see [`ConvPath`]):
//! * pointwise (1×…×1 kernel, stride 1, no padding, float32): per batch and group,
//!   `Y_g[Mg, P] = W_g[Mg, Cg] · X_g[Cg, P]` — one GEMM reading X in place;
//! * depthwise (one input channel per group, float32, 1-D or 2-D): machine-code
//!   kernels on x86 (`depthwise_x86`), else a direct loop vectorized along the output
//!   width over a zero-padded copy of one input plane;
//! * im2col (every other float32 conv, any rank), which specializes further: Winograd
//!   F(4×4)/F(2×2) for 3×3 stride-1 convs with constant weights (`winograd`); the
//!   transposed GEMM `Yᵀ = Xᵀ·Wᵀ` for few positions and many maps (`narrow`); on x86
//!   kernels, the implicit GEMM reading the padded input (stride 1) or its phase
//!   planes (stride 2) in place (`conv_implicit_gemm`, rows ≥ 96 written straight into
//!   Y); otherwise the im2col matrix written a chunk at a time in the GEMM's panel
//!   layout. Weights are packed at compile time when constant; bias, residual and
//!   activation are fused into the GEMM epilogue;
//! * scalar (float64, float16, bfloat16): a direct loop nest with bounds checks.
//!
//! ConvTranspose scatters: every kernel tap adds `W_tap^T · X` into a strided window of
//! the output, whose bounds are static per tap, so no loop checks them. float32 does it
//! as one GEMM per (tap, input row) accumulating into the output; other dtypes with a
//! scalar loop per (input channel, output channel, tap).
//!
//! # Activation layout: NCHW
//!
//! Every tensor stays in the model's NCHW layout; no pass reorders activations. Why,
//! and what was measured (one thread, this project's Xeon, session 4):
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
//!   still trails onnxruntime (BENCHMARKS.md).
//! * So NCHW stays the layout until a channel-blocked path for conv chains is built and
//!   measured against it. A fused Conv+ReLU+MaxPool that pools the stem's output band
//!   by band from L2 was built and measured (branch `conv-maxpool`): no gain beyond
//!   noise, as the stem is bound by its conv, not by the 3.2 MB round trip.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::FunctionBuilder;

use super::gemm::{
    self, ALayout, Addend, BLayout, GemmKernel, GemmSpec, Geometry, LANES, PANEL_QUANTUM,
};
use super::linalg::{domain_add, domain_mul, domain_zero};
use super::{LowerCtx, LowerResult, Operand};
use crate::codegen::kernel::{self, domain, flags};
use crate::codegen::kernel_plan::{NodeKernel, NodeOperands, Strategy};
use crate::codegen::kernels::x86::X86Isa;
use crate::codegen::options::{ConvRows, KernelOptions, KernelSource, Toggle, WinogradChoice};
use crate::codegen::Target;
use crate::ir::{DType, Tensor, TensorType};
use crate::ops::{Activation, ConvAttrs, ConvTransposeAttrs};

/// The depthwise path, in its own file (a child module: it shares this file's private
/// geometry and copy helpers).
#[path = "depthwise.rs"]
mod depthwise;
/// Few output positions, many maps: the transposed GEMM, likewise a child module.
#[path = "narrow.rs"]
mod narrow;
/// The Winograd path of 3×3 stride-1 convs, likewise a child module.
#[path = "winograd.rs"]
mod winograd;

const F32: usize = 4;
/// Bytes of C per call of the implicit-GEMM conv kernel (see `conv_implicit_gemm`).
const IMPLICIT_C_BYTES: usize = 512 * 1024;
/// Bytes of im2col panels produced and consumed at a time: about L2, so they mostly
/// stay there between being written and being read by the GEMM. Every chunk's GEMM
/// streams all of A (the weights) once, so chunks must not be small: at 256 KB a
/// 3×3×512 conv (K = 4608, 49 outputs) ran as chunks of 48 and 1 columns, reading its
/// 9.4 MB of weights from L3 twice.
const IM2COL_CHUNK_BYTES: usize = 2 * 1024 * 1024;
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
    let unit = |v: &[usize]| v.iter().all(|&x| x == 1);
    if unit(&g.kernel) && unit(&g.strides) && !g.has_padding() {
        ConvPath::Pointwise
    } else if g.cg == 1 && g.input.len() <= 2 {
        ConvPath::Depthwise
    } else {
        ConvPath::Im2col
    }
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
        use crate::codegen::kernel_plan::{gemm_kernel_name, isa_suffix};
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
    let scratch = scratch_bytes(&g, x.dtype, options);
    let constant_w = matches!(node.constant(1), Some(Tensor::F32(_)));
    let gemm = Geometry::for_target(target, options);
    let path = choose_path(&g, x.dtype);
    let plan =
        |s: ConvStrategy, reason: &str| Some(NodeKernel::new(Strategy::Conv(s), scratch, reason));
    if matches!(path, ConvPath::Pointwise | ConvPath::Im2col)
        && narrow::applies(&g, constant_w, &gemm, options)
    {
        return plan(
            ConvStrategy::Narrow(gemm),
            "few output positions and many maps, constant weights, x86 GEMM kernels",
        );
    }
    match path {
        ConvPath::Pointwise => plan(
            ConvStrategy::Pointwise(gemm),
            "1x1 kernel, stride 1, no padding",
        ),
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
            plan(ConvStrategy::Depthwise(isa), reason)
        }
        ConvPath::Im2col if winograd::applies(&g, constant_w, options) => {
            let (m, transforms) = winograd::choose(&g, c.activation, target, options)?;
            let reason = match options.winograd {
                WinogradChoice::Auto => {
                    "3x3 stride 1, constant weights; F(m) chosen by maps and tiles"
                }
                _ => "3x3 stride 1, constant weights; --kernel winograd",
            };
            plan(
                ConvStrategy::Winograd {
                    m,
                    transforms,
                    gemm,
                },
                reason,
            )
        }
        ConvPath::Im2col if implicit_gemm_fits(&g, &gemm, options) => plan(
            ConvStrategy::ImplicitGemm {
                gemm,
                phases: PhasePlanes::of(&g).is_some(),
                rows_in_place: writes_rows_in_place(&g, options),
            },
            "x86 GEMM kernels and output rows wide enough to read the input in place",
        ),
        ConvPath::Im2col => plan(ConvStrategy::Im2col(gemm), "the general path"),
        ConvPath::Scalar => plan(ConvStrategy::Scalar, "no vector kernel for this dtype"),
    }
}

/// Arena scratch a convolution needs: the padded input and im2col panels, or the
/// padded plane of a depthwise conv. The most any strategy of its path needs, so the
/// memory plan does not depend on the CPU.
fn scratch_bytes(g: &ConvGeometry, dtype: DType, options: &KernelOptions) -> usize {
    match choose_path(g, dtype) {
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
        } => winograd::conv_winograd(ctx, &g, &ops, m, transforms, gemm),
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

struct ConvOperands {
    x: Operand,
    w: Operand,
    bias: Option<Operand>,
    y: Operand,
    /// Fused epilogue: `Y = activation(conv + bias + R)`.
    residual: Option<Operand>,
    activation: Activation,
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
) -> Result<WeightsA, String> {
    let k = g.gemm_k();
    if let Some(Tensor::F32(values)) = &w.constant {
        let values: Vec<f32> = values.iter().copied().collect();
        let mut packed = Vec::with_capacity(values.len());
        for grp in 0..g.group {
            let rows = &values[grp * g.mg * k..(grp + 1) * g.mg * k];
            packed.extend(gemm::pack_a(&geom, g.mg, k, |i, kk| rows[i * k + kk]));
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
    let weights = weights_operand(ctx, g, &ops.w, geom)?;
    let p = g.out_size();
    let spec = group_gemm(g, &weights, BLayout::Rows { row_stride: p }, p, g.cg, ops);
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

// ---- im2col ----

/// Scratch layout and tables of the im2col path. Output positions are grouped into
/// chunks of `chunk_cols` (whole panels of any kernel family, see [`PANEL_QUANTUM`]).
struct Im2colLayout {
    /// Bytes of the zero-padded copy of one group's input (0 without padding).
    padded_bytes: usize,
    /// Bytes of the stride-2 implicit GEMM's phase planes, after the columns (0 for
    /// other convs).
    phase_bytes: usize,
    chunk_cols: usize,
    /// Bytes of one chunk of packed panels (for the widest panels of any family).
    col_bytes: usize,
}

impl Im2colLayout {
    fn new(g: &ConvGeometry) -> Im2colLayout {
        let k = g.gemm_k();
        let p = g.out_size();
        let padded_bytes = g.padded_copy_bytes();
        let quantum_bytes = k * PANEL_QUANTUM * F32;
        // As many chunks as the byte budget needs, then equal chunk widths, so the
        // last chunk is not a sliver.
        let quanta = p.div_ceil(PANEL_QUANTUM).max(1);
        let per_chunk = (IM2COL_CHUNK_BYTES / quantum_bytes.max(1)).clamp(1, quanta);
        let chunk_cols = PANEL_QUANTUM * quanta.div_ceil(quanta.div_ceil(per_chunk));
        let mut col_bytes = k * p.min(chunk_cols).div_ceil(PANEL_QUANTUM) * PANEL_QUANTUM * F32;
        if let Some(cols) = wide_columns(g) {
            // The implicit GEMM's wide output shares the region (see conv_implicit_gemm).
            col_bytes = col_bytes.max(g.mg * cols * F32);
        }
        Im2colLayout {
            padded_bytes,
            phase_bytes: PhasePlanes::of(g).map_or(0, |p| align_up(p.floats(g) * F32)),
            chunk_cols,
            col_bytes,
        }
    }

    fn bytes(&self) -> usize {
        self.padded_bytes + align_up(self.col_bytes) + self.phase_bytes
    }

    /// Where the phase planes start in the scratch.
    fn phase_planes(&self, b: &mut FunctionBuilder, scratch: Value) -> Value {
        let at = self.padded_bytes + align_up(self.col_bytes);
        b.ins().iadd_imm_s(scratch, at as i64)
    }
}

/// Compile-time im2col tables, in bytes relative to the (padded) group input:
/// `lane[q]` is where output position q's window starts, `tap[k]` how far K row
/// `k = (channel, tap)` moves it; `contiguous[q / 4]` says output positions `q..q+4` are
/// consecutive in memory (1: one output row, stride 1) or every other float (2: stride
/// 2), so rows can be copied as vectors, or as the even lanes of two.
struct Im2colTables {
    lane: Vec<i32>,
    tap: Vec<i32>,
    contiguous: Vec<i32>,
}

/// Byte offset of each K row `k = (channel, tap)` from a window start in the (padded)
/// group input: the im2col `tap` table, and the implicit GEMM's K-row table.
fn tap_offsets(g: &ConvGeometry) -> Result<Vec<i32>, String> {
    let padded = g.padded();
    let pstrides = kernel::strides_of(&padded);
    let plane: usize = padded.iter().product();
    if g.cg * plane * F32 > i32::MAX as usize {
        return Err("Conv input too large for 32-bit im2col offsets".to_string());
    }
    let mut tap = Vec::with_capacity(g.gemm_k());
    for c in 0..g.cg {
        for t in 0..g.taps() {
            let kidx = unravel(t, &g.kernel);
            let off: usize = c * plane
                + (0..kidx.len())
                    .map(|d| kidx[d] * g.dilations[d] * pstrides[d])
                    .sum::<usize>();
            tap.push((off * F32) as i32);
        }
    }
    Ok(tap)
}

fn im2col_tables(g: &ConvGeometry, nr: usize, tap: Vec<i32>) -> Im2colTables {
    let padded = g.padded();
    let pstrides = kernel::strides_of(&padded);
    let plane: usize = padded.iter().product();
    let p = g.out_size();
    let lane_of = |q: usize| -> i32 {
        let o = unravel(q, &g.output);
        let off: usize = (0..o.len())
            .map(|d| o[d] * g.strides[d] * pstrides[d])
            .sum();
        (off * F32) as i32
    };
    let panels = p.div_ceil(nr);
    // Positions past the end repeat the last valid one: always in bounds, results unused.
    let lane: Vec<i32> = (0..panels * nr).map(|q| lane_of(q.min(p - 1))).collect();
    // 1: four consecutive floats; 2: every other float of eight (stride 2), when the
    // eighth, loaded but unused, is still inside the input for every tap.
    let max_tap = tap.iter().copied().max().unwrap_or(0) as i64;
    let input_bytes = (g.cg * plane * F32) as i64;
    let contiguous = (0..panels * nr / LANES)
        .map(|v| {
            let q = v * LANES;
            if q + LANES > p {
                return 0;
            }
            let spaced =
                |step: usize| (1..LANES).all(|l| lane[q + l] == lane[q] + (l * step * F32) as i32);
            if spaced(1) {
                1
            } else if spaced(2)
                && lane[q] as i64 + max_tap + (2 * LANES * F32) as i64 <= input_bytes
            {
                2
            } else {
                0
            }
        })
        .collect();
    Im2colTables {
        lane,
        tap,
        contiguous,
    }
}

/// Row-major multi-index of `flat` in `shape`.
fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = flat % shape[d];
        flat /= shape[d];
    }
    idx
}

fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Run-time addresses of the im2col tables.
#[derive(Clone, Copy)]
struct TablePtrs {
    lane: Value,
    tap: Value,
    contiguous: Value,
}

/// The im2col path, or with `implicit = Some(rows_in_place)` the implicit GEMM.
fn conv_im2col(
    ctx: &mut LowerCtx,
    g: &ConvGeometry,
    ops: &ConvOperands,
    geom: Geometry,
    implicit: Option<bool>,
) -> LowerResult {
    let layout = Im2colLayout::new(g);
    let scratch = scratch(ctx)?;
    let weights = weights_operand(ctx, g, &ops.w, geom)?;
    let tap = tap_offsets(g)?;
    if let Some(rows_in_place) = implicit {
        let whole = group_gemm(g, &weights, BLayout::Packed, g.out_size(), g.gemm_k(), ops);
        let tap = match PhasePlanes::of(g) {
            Some(p) => p.taps(g)?,
            None => tap,
        };
        let im = ImplicitConv {
            weights: &weights,
            spec: whole,
            taps: tap,
            scratch,
            layout: &layout,
        };
        return conv_implicit_gemm(ctx, g, ops, im, rows_in_place);
    }
    let tables = im2col_tables(g, geom.nr, tap);
    let ptrs = TablePtrs {
        lane: ctx.rodata(i32_bytes(&tables.lane))?,
        tap: ctx.rodata(i32_bytes(&tables.tap))?,
        contiguous: ctx.rodata(i32_bytes(&tables.contiguous))?,
    };
    let p = g.out_size();
    let chunk_cols = layout.chunk_cols;
    let full_chunks = p / chunk_cols;
    let tail_cols = p - full_chunks * chunk_cols;
    let full_kernel = if full_chunks > 0 {
        Some(GemmKernel::define(
            ctx,
            &group_gemm(g, &weights, BLayout::Packed, chunk_cols, g.gemm_k(), ops),
        )?)
    } else {
        None
    };
    let tail_kernel = if tail_cols > 0 {
        Some(GemmKernel::define(
            ctx,
            &group_gemm(g, &weights, BLayout::Packed, tail_cols, g.gemm_k(), ops),
        )?)
    } else {
        None
    };
    let b = &mut *ctx.b;
    let col = b.ins().iadd_imm_s(scratch, layout.padded_bytes as i64);
    kernel::nested_loop(b, &[g.batch, g.group], &mut |b, idx| {
        let (n, grp) = (idx[0], idx[1]);
        let x_g = input_group(b, g, ops.x.ptr, n, grp, F32);
        let src = if g.has_padding() {
            copy_padded(b, x_g, &g.input, g.cg, scratch, &g.padded(), &g.pad_begin);
            scratch
        } else {
            x_g
        };
        let (c, bias) = output_and_bias(b, g, ops, n, grp);
        let a = weights.group(b, grp, g);
        let chunk = |b: &mut FunctionBuilder, col0: Value, cols: usize, kernel: &GemmKernel| {
            im2col_panels(b, g, &geom, ptrs, src, col, col0, cols);
            let c0 = kernel::elem_addr(b, c, col0, F32);
            let mut addends = bias.clone();
            if ops.residual.is_some() {
                let r = addends.pop().expect("the residual addend");
                addends.push(kernel::elem_addr(b, r, col0, F32));
            }
            kernel.call(b, a, col, c0, &addends);
        };
        if let Some(k) = &full_kernel {
            kernel::counted_loop(
                b,
                0,
                (full_chunks * chunk_cols) as i64,
                chunk_cols as i64,
                |b, col0| chunk(b, col0, chunk_cols, k),
            );
        }
        if let Some(k) = &tail_kernel {
            let col0 = kernel::iconst(b, (full_chunks * chunk_cols) as i64);
            chunk(b, col0, tail_cols, k);
        }
    });
    Ok(())
}

/// A stride-2 conv's padded input split into its 2×2 phases, `Q[c][ph][pw][i][j] =
/// P[c][2i + ph][2j + pw]`: output (oh, ow) at tap (kh, kw) reads phase
/// (kh mod 2, kw mod 2) at (oh + kh div 2, ow + kw div 2), so in phase coordinates the
/// conv has stride 1 and runs as the implicit GEMM (no im2col copy of the 7×7 stem's
/// 147 × 12544 matrix; measured on ResNet-18's stem, im2col was ~40% of its time).
#[derive(Clone, Copy)]
struct PhasePlanes {
    /// Rows and columns of one phase plane.
    h: usize,
    w: usize,
}

impl PhasePlanes {
    fn of(g: &ConvGeometry) -> Option<PhasePlanes> {
        if g.output.len() != 2 || g.strides != [2, 2] || g.dilations != [1, 1] {
            return None;
        }
        let padded = g.padded();
        // Whole vectors of 8 padded floats per row (the split reads them in pairs).
        Some(PhasePlanes {
            h: padded[0].div_ceil(2),
            w: padded[1].div_ceil(8) * 4,
        })
    }

    fn floats(&self, g: &ConvGeometry) -> usize {
        g.cg * 4 * self.h * self.w
    }

    /// Byte offset of each K row `(channel, kh, kw)` in the phase planes.
    fn taps(&self, g: &ConvGeometry) -> Result<Vec<i32>, String> {
        if self.floats(g) * F32 > i32::MAX as usize {
            return Err("Conv input too large for 32-bit offsets".to_string());
        }
        let mut tap = Vec::with_capacity(g.gemm_k());
        for c in 0..g.cg {
            for kh in 0..g.kernel[0] {
                for kw in 0..g.kernel[1] {
                    let plane = c * 4 + (kh % 2) * 2 + kw % 2;
                    let off = (plane * self.h + kh / 2) * self.w + kw / 2;
                    tap.push((off * F32) as i32);
                }
            }
        }
        Ok(tap)
    }

    /// Splits the padded planes at `src` (rows of `padded[1]` floats) into the phases
    /// at `dst`, eight floats (four per column phase) at a time.
    fn split(&self, b: &mut FunctionBuilder, g: &ConvGeometry, src: Value, dst: Value) {
        let padded = g.padded();
        let (hp, wp) = (padded[0], padded[1]);
        let plane = self.h * self.w * F32;
        let vectors = self.w / LANES;
        // Every phase row is written below but, for an odd padded height, the last row
        // of the odd-row phases: it stays zero.
        if hp % 2 == 1 {
            kernel::counted_loop(b, 0, g.cg as i64, 1, |b, c| {
                for pw in 0..2 {
                    let pl = b.ins().imul_imm_s(c, 4);
                    let pl = b.ins().iadd_imm_s(pl, 2 + pw);
                    let d = kernel::elem_addr(b, dst, pl, plane);
                    let d = b.ins().iadd_imm_s(d, ((self.h - 1) * self.w * F32) as i64);
                    zero_f32(b, d, self.w);
                }
            });
        }
        kernel::nested_loop(b, &[g.cg, hp], &mut |b, idx| {
            let (c, i) = (idx[0], idx[1]);
            let row = b.ins().imul_imm_s(c, hp as i64);
            let row = b.ins().iadd(row, i);
            let s = kernel::elem_addr(b, src, row, wp * F32);
            // Phase (i mod 2, ·) of channel c, row i div 2.
            let ph = b.ins().band_imm_u(i, 1);
            let half = b.ins().ushr_imm_u(i, 1);
            let pl = b.ins().imul_imm_s(c, 4);
            let pl = b.ins().iadd(pl, ph);
            let pl = b.ins().iadd(pl, ph);
            let d = kernel::elem_addr(b, dst, pl, plane);
            let d = kernel::elem_addr(b, d, half, self.w * F32);
            for v in 0..vectors {
                // Columns 8v .. 8v + 8 of the padded row; past its end, zeros.
                let at = |k: usize| 8 * v + 4 * k;
                let load = |b: &mut FunctionBuilder, k: usize| {
                    if at(k) + LANES <= wp {
                        b.ins().load(types::F32X4, flags(), s, (at(k) * F32) as i32)
                    } else {
                        let z = b.ins().f32const(0.0);
                        let mut x = b.ins().splat(types::F32X4, z);
                        for l in 0..LANES.min(wp.saturating_sub(at(k))) {
                            let e =
                                b.ins()
                                    .load(types::F32, flags(), s, ((at(k) + l) * F32) as i32);
                            x = b.ins().insertlane(x, e, l as u8);
                        }
                        x
                    }
                };
                let (lo, hi) = (load(b, 0), load(b, 1));
                let even = crate::codegen::math::pick_lanes(b, lo, hi, [0, 2, 4, 6]);
                let odd = crate::codegen::math::pick_lanes(b, lo, hi, [1, 3, 5, 7]);
                b.ins().store(flags(), even, d, (v * LANES * F32) as i32);
                b.ins()
                    .store(flags(), odd, d, (plane + v * LANES * F32) as i32);
            }
        });
    }
}

/// Columns of the "wide" output of [`conv_implicit_gemm`] for a 2-D conv of stride 1
/// (or 2, over [`PhasePlanes`]): every input row yields `row` columns (the padded width,
/// or a phase plane's), the last `row − out` of each being garbage, except in the last
/// row.
fn wide_columns(g: &ConvGeometry) -> Option<usize> {
    let row = wide_row(g)?;
    Some((g.output[0] - 1) * row + g.output[1])
}

/// Row length of the implicit GEMM's input and wide output.
fn wide_row(g: &ConvGeometry) -> Option<usize> {
    if g.output.len() != 2 {
        return None;
    }
    if g.strides.iter().all(|&s| s == 1) {
        return Some(g.padded()[1]);
    }
    PhasePlanes::of(g).map(|p| p.w)
}

/// Whether [`conv_implicit_gemm`] computes this conv: 2-D, stride 1, on an x86 kernel
/// (only those read B through a K-row table), when the garbage columns of the wide
/// output cost less than im2col would. im2col copies K·P floats for 2·M·K·P flops, so
/// its share shrinks with M; measured on this Xeon (3×3 convs): ~30% of the time at
/// 56×56 and M = 64, ~10% at 14×14 and M = 256 (where the 2 garbage columns of 16 cost
/// 14%), and ~45% for digits_cnn's 8×8, M = 32 conv (25% garbage).
fn implicit_gemm_fits(g: &ConvGeometry, geom: &Geometry, options: &KernelOptions) -> bool {
    const MIN_OUT_W: usize = 24;
    const SMALL_M: usize = 64;
    // Stride 2 over phase planes pays for copying all four phases and for a K loop
    // that reads B through the tap table with unaligned loads: measured (one conv,
    // A/B against im2col) 7×7 stem K = 147: 2.0 vs 2.5 ms; 3×3, K = 576: even;
    // 3×3, K = 27: 1.08 vs 0.85 ms; 1×1, K = 64: 0.33 vs 0.17 ms. So only for long K,
    // or when the rows are written in place (no compaction copy): SqueezeNet's K = 27
    // stem, 0.57–1.05 vs 0.71–1.09 ms against im2col (see IN_PLACE_MIN_OUT_W).
    // `--kernel phase-planes=off` keeps every stride-2 conv on im2col, for measurements.
    const MIN_PHASE_K: usize = 64;
    let phases_ok = options.phase_planes == Toggle::Auto
        && (g.gemm_k() >= MIN_PHASE_K || writes_rows_in_place(g, options))
        && g.taps() > 1;
    matches!(geom.kernel, gemm::KernelKind::X86(_))
        && wide_columns(g).is_some()
        && (phases_ok || PhasePlanes::of(g).is_none())
        && (g.output[1] >= MIN_OUT_W || (g.output[1] >= 8 && g.mg <= SMALL_M))
}

/// Stride-1 2-D conv as one implicit GEMM per batch and group: B is the zero-padded
/// input read in place through [`BLayout::Taps`] (no im2col matrix): output column
/// `q` of the GEMM reads padded-input offset `q + tap[k]`, so the GEMM's columns run
/// over whole padded rows ("wide" output, written to scratch), and a copy keeps the
/// `out` valid columns of each row. A residual (compact layout) is added by that copy,
/// followed by the activation; otherwise the GEMM's epilogue applies the activation.
fn conv_implicit_gemm(
    ctx: &mut LowerCtx,
    g: &ConvGeometry,
    ops: &ConvOperands,
    im: ImplicitConv,
    rows_in_place: bool,
) -> LowerResult {
    if rows_in_place {
        return conv_implicit_rows(ctx, g, ops, im);
    }
    let ImplicitConv {
        weights,
        spec,
        taps,
        scratch,
        layout,
    } = im;
    let wide = wide_columns(g).ok_or("implicit GEMM needs a 2-D stride-1 or 2 conv")?;
    let row = wide_row(g).ok_or("implicit GEMM needs a 2-D stride-1 or 2 conv")?;
    let (out_h, out_w) = (g.output[0], g.output[1]);
    let residual = ops.residual.is_some();
    let mut spec = spec;
    if residual {
        // The residual's addend is the last (see group_gemm); the copy applies it.
        spec.addends.pop();
        spec.activation = Activation::None;
    }
    // Output rows per GEMM call: C of one call within IMPLICIT_C_BYTES, so the kernel's
    // passes over C (one per K block) and the compaction stay in L2. As one call, the
    // 7×7 stem's 3 MB wide output was swept from L3.
    let (chunk_rows, loop_chunks, last_rows) = row_chunks(out_h, g.mg * row * F32);
    // One call computes `n` wide columns from its first row.
    let spec_of = |n: usize| GemmSpec {
        n,
        b: BLayout::Taps {
            out_w: n,
            out_h: 1,
            row_step: n,
        },
        ldc: wide,
        b_taps: taps.clone(),
        ..spec.clone()
    };
    let full_kernel = match loop_chunks {
        0 => None,
        // A full chunk's columns run on to the next row's start: real positions.
        _ => Some(GemmKernel::define(ctx, &spec_of(chunk_rows * row))?),
    };
    let last_kernel = GemmKernel::define(ctx, &spec_of((last_rows - 1) * row + out_w))?;
    let b = &mut *ctx.b;
    let c_wide = b.ins().iadd_imm_s(scratch, layout.padded_bytes as i64);
    let phase_planes = layout.phase_planes(b, scratch);
    let mut failure = None;
    kernel::nested_loop(b, &[g.batch, g.group], &mut |b, idx| {
        let (n, grp) = (idx[0], idx[1]);
        let src = implicit_input(b, g, ops, n, grp, scratch, phase_planes);
        let (y_g, mut addends) = output_and_bias(b, g, ops, n, grp);
        let r_g = if residual { addends.pop() } else { None };
        let a = weights.group(b, grp, g);
        // Output row `oh` of map `m` (`r = m·out_h + oh`) from the wide output.
        let mut compact = |b: &mut FunctionBuilder, m: Value, oh: Value, r: Value| {
            let src_row = kernel::elem_addr(b, c_wide, m, wide * F32);
            let src_row = kernel::elem_addr(b, src_row, oh, row * F32);
            let dst_row = kernel::elem_addr(b, y_g, r, out_w * F32);
            match r_g {
                None => copy_f32(b, dst_row, src_row, out_w),
                Some(r_g) => {
                    let res_row = kernel::elem_addr(b, r_g, r, out_w * F32);
                    if let Err(e) = super::elementwise::activate_run(
                        b,
                        dst_row,
                        src_row,
                        Some(res_row),
                        out_w,
                        ops.activation,
                    ) {
                        failure = Some(e);
                    }
                }
            }
        };
        // Rows row0 .. row0 + rows: the GEMM, then keep the valid columns (row `oh`
        // of channel `m` is `out_w` floats at column `oh·row` of the wide output).
        let mut chunk = |b: &mut FunctionBuilder, row0: Value, rows: usize, k: &GemmKernel| {
            let at = b.ins().imul_imm_s(row0, (row * F32) as i64);
            let (src_c, c_c) = (b.ins().iadd(src, at), b.ins().iadd(c_wide, at));
            k.call(b, a, src_c, c_c, &addends);
            kernel::nested_loop(b, &[g.mg, rows], &mut |b, idx| {
                let (m, oh) = (idx[0], b.ins().iadd(row0, idx[1]));
                let r = b.ins().imul_imm_s(m, out_h as i64);
                let r = b.ins().iadd(r, oh);
                compact(b, m, oh, r);
            });
        };
        if let Some(k) = &full_kernel {
            let end = (loop_chunks * chunk_rows) as i64;
            kernel::counted_loop(b, 0, end, chunk_rows as i64, |b, row0| {
                chunk(b, row0, chunk_rows, k)
            });
        }
        let row0 = kernel::iconst(b, (out_h - last_rows) as i64);
        chunk(b, row0, last_rows, &last_kernel);
    });
    failure.map_or(Ok(()), Err)
}

/// What the implicit-GEMM paths share: the weights (A), the whole-conv GEMM spec they
/// specialize per call, B's K-row offsets and the scratch with its layout.
struct ImplicitConv<'a> {
    weights: &'a WeightsA,
    spec: GemmSpec,
    taps: Vec<i32>,
    scratch: Value,
    layout: &'a Im2colLayout,
}

/// Splits `out_h` output rows of `row_bytes` of C each into calls of `chunk_rows` rows,
/// C of one call within IMPLICIT_C_BYTES: `(chunk_rows, full chunks, rows of the last)`.
fn row_chunks(out_h: usize, row_bytes: usize) -> (usize, usize, usize) {
    let chunk_rows = (IMPLICIT_C_BYTES / row_bytes.max(1)).clamp(1, out_h);
    let last_rows = match out_h % chunk_rows {
        0 => chunk_rows,
        r => r,
    };
    (chunk_rows, (out_h - last_rows) / chunk_rows, last_rows)
}

/// The implicit GEMM's B for image `n`, group `grp`: the group's input, zero-padded
/// into scratch when the conv pads, then split into phase planes when it has stride 2.
fn implicit_input(
    b: &mut FunctionBuilder,
    g: &ConvGeometry,
    ops: &ConvOperands,
    n: Value,
    grp: Value,
    scratch: Value,
    phase_planes: Value,
) -> Value {
    let x_g = input_group(b, g, ops.x.ptr, n, grp, F32);
    let mut src = if g.has_padding() {
        copy_padded(b, x_g, &g.input, g.cg, scratch, &g.padded(), &g.pad_begin);
        scratch
    } else {
        x_g
    };
    if let Some(p) = PhasePlanes::of(g) {
        p.split(b, g, src, phase_planes);
        src = phase_planes;
    }
    src
}

/// Output rows at least this wide are written by the implicit GEMM in place, row by row
/// (panels within each row), instead of as a wide output that a copy compacts: the
/// copy is a second pass over the whole output (the 7×7 stem: 3.2 MB), and at this
/// width the row's last, partial panel wastes little. Measured (`benches/bench_conv.py`,
/// `--kernel conv-rows=wide` for the old path): ResNet's 7×7 stem 2.0–2.1 vs 2.4–2.6 ms,
/// SqueezeNet's K = 27 stem (now over phase planes) 0.57–1.05 vs 0.71–1.09 ms against
/// im2col. Narrower rows (56, 28, 14) keep the wide output, whose panels run across
/// rows.
const IN_PLACE_MIN_OUT_W: usize = 96;

fn writes_rows_in_place(g: &ConvGeometry, options: &KernelOptions) -> bool {
    options.conv_rows == ConvRows::Auto && g.output.len() == 2 && g.output[1] >= IN_PLACE_MIN_OUT_W
}

/// [`conv_implicit_gemm`] for wide output rows: the kernel walks output rows itself
/// (`BLayout::Taps` with `out_h` rows of `out_w` columns, B advancing by the padded or
/// phase-plane row) and writes C, bias, residual and activation straight into Y.
fn conv_implicit_rows(
    ctx: &mut LowerCtx,
    g: &ConvGeometry,
    ops: &ConvOperands,
    im: ImplicitConv,
) -> LowerResult {
    let (weights, scratch, layout) = (im.weights, im.scratch, im.layout);
    let (spec, taps) = (&im.spec, &im.taps);
    let row = wide_row(g).ok_or("implicit GEMM needs a 2-D stride-1 or 2 conv")?;
    let (out_h, out_w) = (g.output[0], g.output[1]);
    // Output rows per call: C of one call within IMPLICIT_C_BYTES (L2).
    let (chunk_rows, loop_chunks, last_rows) = row_chunks(out_h, g.mg * out_w * F32);
    let spec_of = |rows: usize| GemmSpec {
        n: rows * out_w,
        b: BLayout::Taps {
            out_w,
            out_h: rows,
            row_step: row,
        },
        ldc: g.out_size(),
        b_taps: taps.clone(),
        ..spec.clone()
    };
    let full_kernel = match loop_chunks {
        0 => None,
        _ => Some(GemmKernel::define(ctx, &spec_of(chunk_rows))?),
    };
    let last_kernel = GemmKernel::define(ctx, &spec_of(last_rows))?;
    let b = &mut *ctx.b;
    let phase_planes = layout.phase_planes(b, scratch);
    kernel::nested_loop(b, &[g.batch, g.group], &mut |b, idx| {
        let (n, grp) = (idx[0], idx[1]);
        let src = implicit_input(b, g, ops, n, grp, scratch, phase_planes);
        let (y_g, addends) = output_and_bias(b, g, ops, n, grp);
        let a = weights.group(b, grp, g);
        let chunk = |b: &mut FunctionBuilder, row0: Value, k: &GemmKernel| {
            let at_in = b.ins().imul_imm_s(row0, (row * F32) as i64);
            let src_c = b.ins().iadd(src, at_in);
            let at_out = b.ins().imul_imm_s(row0, (out_w * F32) as i64);
            let y_c = b.ins().iadd(y_g, at_out);
            let mut addends = addends.clone();
            if ops.residual.is_some() {
                // The residual, last, moves with C.
                let r = addends.pop().expect("the residual addend");
                addends.push(b.ins().iadd(r, at_out));
            }
            k.call(b, a, src_c, y_c, &addends);
        };
        if let Some(k) = &full_kernel {
            let end = (loop_chunks * chunk_rows) as i64;
            kernel::counted_loop(b, 0, end, chunk_rows as i64, |b, row0| chunk(b, row0, k));
        }
        let row0 = kernel::iconst(b, (out_h - last_rows) as i64);
        chunk(b, row0, &last_kernel);
    });
    Ok(())
}

/// Writes the im2col columns `col0 .. col0+cols` (col0 a multiple of the panel width)
/// into `col` in [`gemm::pack_b`]'s panel layout, reading the (padded) group input at
/// `src`.
#[allow(clippy::too_many_arguments)]
fn im2col_panels(
    b: &mut FunctionBuilder,
    g: &ConvGeometry,
    geom: &Geometry,
    t: TablePtrs,
    src: Value,
    col: Value,
    col0: Value,
    cols: usize,
) {
    let k = g.gemm_k();
    let nr = geom.nr;
    let full = cols / nr;
    kernel::counted_loop(b, 0, full as i64, 1, |b, i| {
        let panel = b.ins().udiv_imm_u(col0, nr as i64);
        let panel = b.ins().iadd(panel, i);
        let dst = kernel::elem_addr(b, col, i, k * nr * F32);
        im2col_panel(b, k, t, src, dst, panel, nr, nr);
    });
    let rem = cols - full * nr;
    if rem > 0 {
        let panel = b.ins().udiv_imm_u(col0, nr as i64);
        let panel = b.ins().iadd_imm_s(panel, full as i64);
        let dst = b.ins().iadd_imm_s(col, (full * k * nr * F32) as i64);
        im2col_panel(b, k, t, src, dst, panel, nr, geom.tail_panel_width(rem));
    }
}

/// One panel of `width` lanes: K rows of `width` floats at `dst`. Each group of four
/// lanes the table marks contiguous (stride 1 within one output row) is copied as one
/// vector per K row, the others lane by lane: the flags are loaded once per panel, and
/// the branch on each repeats the same pattern every row, so it predicts well. Per
/// panel rather than per vector, a 48-wide panel crossing an output row (most of them
/// at 56 columns) fell back to scalar copies: 30% of a 3×3 conv's time went to im2col.
#[allow(clippy::too_many_arguments)]
fn im2col_panel(
    b: &mut FunctionBuilder,
    k: usize,
    t: TablePtrs,
    src: Value,
    dst: Value,
    panel: Value,
    nr: usize,
    width: usize,
) {
    let lanes = kernel::elem_addr(b, t.lane, panel, nr * 4);
    let lane_ptrs: Vec<Value> = (0..width)
        .map(|l| {
            let off = b.ins().sload32(flags(), lanes, (l * 4) as i32);
            b.ins().iadd(src, off)
        })
        .collect();
    let flag_base = kernel::elem_addr(b, t.contiguous, panel, nr / LANES * 4);
    let vec_flags: Vec<(Value, Value)> = (0..width / LANES)
        .map(|v| {
            let f = b.ins().load(types::I32, flags(), flag_base, (v * 4) as i32);
            let unit = b.ins().icmp_imm_s(IntCC::Equal, f, 1);
            let every_other = b.ins().icmp_imm_s(IntCC::Equal, f, 2);
            (unit, every_other)
        })
        .collect();
    kernel::counted_loop(b, 0, k as i64, 1, |b, kk| {
        let tap = tap_offset(b, t, kk);
        let row = kernel::elem_addr(b, dst, kk, width * F32);
        for (v, &(unit, every_other)) in vec_flags.iter().enumerate() {
            let (vector, not_vector, evens, lanewise, next) = (
                b.create_block(),
                b.create_block(),
                b.create_block(),
                b.create_block(),
                b.create_block(),
            );
            b.ins().brif(unit, vector, &[], not_vector, &[]);
            b.seal_block(vector);
            b.seal_block(not_vector);
            b.switch_to_block(vector);
            let a = b.ins().iadd(lane_ptrs[v * LANES], tap);
            let x = b.ins().load(types::F32X4, flags(), a, 0);
            b.ins().store(flags(), x, row, (v * LANES * F32) as i32);
            b.ins().jump(next, &[]);
            b.switch_to_block(not_vector);
            b.ins().brif(every_other, evens, &[], lanewise, &[]);
            b.seal_block(evens);
            b.seal_block(lanewise);
            b.switch_to_block(evens);
            // The even lanes of eight consecutive floats: two loads and one shuffle.
            let a = b.ins().iadd(lane_ptrs[v * LANES], tap);
            let lo = b.ins().load(types::F32X4, flags(), a, 0);
            let hi = b.ins().load(types::F32X4, flags(), a, (LANES * F32) as i32);
            let pick = core::array::from_fn(|i| ((i / 4) * 8 + i % 4) as u8);
            let x = crate::codegen::math::shuffle_f32x4(b, lo, hi, pick);
            b.ins().store(flags(), x, row, (v * LANES * F32) as i32);
            b.ins().jump(next, &[]);
            b.switch_to_block(lanewise);
            for (l, &lane) in lane_ptrs.iter().enumerate().skip(v * LANES).take(LANES) {
                let a = b.ins().iadd(lane, tap);
                let x = b.ins().load(types::F32, flags(), a, 0);
                b.ins().store(flags(), x, row, (l * F32) as i32);
            }
            b.ins().jump(next, &[]);
            b.switch_to_block(next);
            b.seal_block(next);
        }
    });
}

fn tap_offset(b: &mut FunctionBuilder, t: TablePtrs, kk: Value) -> Value {
    let a = kernel::elem_addr(b, t.tap, kk, 4);
    b.ins().sload32(stable_flags(), a, 0)
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

// ---- scalar fallback ----

/// Direct convolution in the dtype's computation domain, with a bounds check per tap:
/// correct for every float dtype and shape, used where speed matters less (float64,
/// float16, bfloat16).
fn conv_scalar(b: &mut FunctionBuilder, g: &ConvGeometry, ops: &ConvOperands) {
    let dtype = ops.x.ty.dtype;
    let d = domain(dtype);
    let size = dtype.size();
    let sp = g.input.len();
    let in_strides = kernel::strides_of(&g.input);
    let mut loop_shape = vec![g.batch, g.group, g.mg];
    loop_shape.extend(&g.output);
    let taps = g.taps();
    kernel::nested_loop(b, &loop_shape, &mut |b, idx| {
        let (n, grp, j) = (idx[0], idx[1], idx[2]);
        let out_pos = &idx[3..];
        let m = b.ins().imul_imm_s(grp, g.mg as i64);
        let m = b.ins().iadd(m, j);
        let acc = b.declare_var(kernel::domain_type(d));
        let init = match &ops.bias {
            Some(bias) => {
                let a = kernel::elem_addr(b, bias.ptr, m, size);
                kernel::load_elem(b, dtype, a, 0)
            }
            None => domain_zero(b, d),
        };
        b.def_var(acc, init);
        let x_g = input_group(b, g, ops.x.ptr, n, grp, size);
        let w_m = kernel::elem_addr(b, ops.w.ptr, m, g.cg * taps * size);
        let mut shape = vec![g.cg];
        shape.extend(&g.kernel);
        kernel::nested_loop(b, &shape, &mut |b, kidx| {
            let (c, k) = (kidx[0], &kidx[1..]);
            let zero = kernel::iconst(b, 0);
            let mut valid: Option<Value> = None;
            let mut offset = zero;
            for dim in 0..sp {
                // i = o·s + k·d − pad, valid when 0 ≤ i < size (one unsigned compare).
                let i = b.ins().imul_imm_s(out_pos[dim], g.strides[dim] as i64);
                let kd = b.ins().imul_imm_s(k[dim], g.dilations[dim] as i64);
                let i = b.ins().iadd(i, kd);
                let i = b.ins().iadd_imm_s(i, -(g.pad_begin[dim] as i64));
                let ok = b
                    .ins()
                    .icmp_imm_s(IntCC::UnsignedLessThan, i, g.input[dim] as i64);
                valid = Some(match valid {
                    None => ok,
                    Some(v) => b.ins().band(v, ok),
                });
                let t = b.ins().imul_imm_s(i, in_strides[dim] as i64);
                offset = b.ins().iadd(offset, t);
            }
            let valid = valid.expect("at least one spatial axis");
            let offset = b.ins().select(valid, offset, zero);
            let x_c = kernel::elem_addr(b, x_g, c, g.in_size() * size);
            let xa = kernel::elem_addr(b, x_c, offset, size);
            let xv = kernel::load_elem(b, dtype, xa, 0);
            let z = domain_zero(b, d);
            let xv = b.ins().select(valid, xv, z);
            let tap = kernel::linear_offset(b, kidx, &kernel::strides_of(&shape));
            let wa = kernel::elem_addr(b, w_m, tap, size);
            let wv = kernel::load_elem(b, dtype, wa, 0);
            let prod = domain_mul(b, d, xv, wv);
            let sum = b.use_var(acc);
            let sum = domain_add(b, d, sum, prod);
            b.def_var(acc, sum);
        });
        let mut y_idx = vec![n, m];
        y_idx.extend(out_pos);
        let mut y_shape = vec![g.batch, g.maps];
        y_shape.extend(&g.output);
        let off = kernel::linear_offset(b, &y_idx, &kernel::strides_of(&y_shape));
        let ya = kernel::elem_addr(b, ops.y.ptr, off, size);
        let v = b.use_var(acc);
        kernel::store_elem(b, dtype, v, ya, 0);
    });
}

// ---- ConvTranspose ----

/// ConvTranspose shapes: X `[N, C, in...]`, W `[C, Mg, k...]`, Y `[N, Mg·group, out...]`.
struct TransposeGeometry {
    batch: usize,
    group: usize,
    cg: usize,
    mg: usize,
    input: Vec<usize>,
    output: Vec<usize>,
    kernel: Vec<usize>,
    strides: Vec<usize>,
    dilations: Vec<usize>,
    pad_begin: Vec<usize>,
}

impl TransposeGeometry {
    fn new(
        c: &ConvTransposeAttrs,
        x: &TensorType,
        w: &TensorType,
        y: &TensorType,
    ) -> Result<TransposeGeometry, String> {
        let sp = x
            .rank()
            .checked_sub(2)
            .filter(|&s| s > 0)
            .ok_or("ConvTranspose input must have rank ≥ 3")?;
        let attrs_ok = c.kernel.len() == sp
            && c.strides.len() == sp
            && c.dilations.len() == sp
            && c.pads.len() == 2 * sp;
        if !attrs_ok
            || w.rank() != sp + 2
            || y.rank() != sp + 2
            || c.group == 0
            || !x.shape[1].is_multiple_of(c.group)
        {
            return Err(format!(
                "ConvTranspose attributes do not match input {x} and weight {w}"
            ));
        }
        if c.kernel.contains(&0) || c.strides.contains(&0) || c.dilations.contains(&0) {
            return Err("ConvTranspose kernel, strides and dilations must be positive".into());
        }
        if w.shape[0] != x.shape[1]
            || w.shape[2..] != c.kernel[..]
            || y.shape[1] != w.shape[1] * c.group
            || y.shape[2..] != c.output_spatial[..]
        {
            return Err(format!(
                "ConvTranspose shapes do not match: input {x}, weight {w}, output {y}"
            ));
        }
        Ok(TransposeGeometry {
            batch: x.shape[0],
            group: c.group,
            cg: x.shape[1] / c.group,
            mg: w.shape[1],
            input: x.shape[2..].to_vec(),
            output: y.shape[2..].to_vec(),
            kernel: c.kernel.clone(),
            strides: c.strides.clone(),
            dilations: c.dilations.clone(),
            pad_begin: c.pads[..sp].to_vec(),
        })
    }

    /// For kernel offset `k` along `axis`, the input range whose outputs
    /// `i·s − pad + k·d` land inside the output: empty when none do.
    fn valid_inputs(&self, axis: usize, k: usize) -> std::ops::Range<usize> {
        let (s, shift) = (
            self.strides[axis] as i64,
            (k * self.dilations[axis]) as i64 - self.pad_begin[axis] as i64,
        );
        // i·s + shift ∈ [0, out)  ⇔  i ∈ [ceil(−shift / s), floor((out − 1 − shift) / s)].
        let lo = ((-shift).max(0) as usize).div_ceil(s as usize) as i64;
        let hi_incl = (self.output[axis] as i64 - 1 - shift).div_euclid(s);
        let hi = (hi_incl + 1).clamp(0, self.input[axis] as i64);
        (lo.min(hi)) as usize..hi as usize
    }
}

/// The kernel plan of a ConvTranspose node: float32 runs one GEMM per (tap, input row)
/// on the portable kernel, whose A (the tap's weights, packed or strided) and C (a
/// strided window of the output) layouts the machine-code kernels do not take.
pub fn plan_conv_transpose(node: &NodeOperands) -> Option<NodeKernel> {
    (node.input(0)?.dtype == DType::F32).then(|| {
        NodeKernel::new(
            Strategy::Gemm(Geometry::CLIF),
            0,
            "per-tap GEMMs into strided output windows: the portable kernel",
        )
    })
}

pub fn conv_transpose(ctx: &mut LowerCtx, c: &ConvTransposeAttrs) -> LowerResult {
    let (x, w, y) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0));
    let bias = ctx.inputs.get(2).cloned().flatten();
    if !x.ty.dtype.is_float()
        || w.ty.dtype != x.ty.dtype
        || bias
            .as_ref()
            .is_some_and(|b| b.ty.dtype != x.ty.dtype || b.ty.numel() != y.ty.shape[1])
    {
        return Err(format!(
            "ConvTranspose operand types do not match input {}",
            x.ty
        ));
    }
    let g = TransposeGeometry::new(c, &x.ty, &w.ty, &y.ty)?;
    if y.ty.numel() == 0 {
        return Ok(());
    }
    let fma = gemm::has_fma(ctx.target);
    let ops = ConvOperands {
        x,
        w,
        bias,
        y,
        residual: None,
        activation: Activation::None,
    };
    init_output(ctx.b, &g, &ops);
    if ops.x.ty.dtype == DType::F32 {
        return transpose_gemm_taps(ctx, &g, &ops);
    }
    scatter_taps(ctx.b, &g, &ops, fma);
    Ok(())
}

/// The weights of one (group, tap) as the GEMM's A `[Mg, Cg]`: `W[grp·Cg + c, m, t]`.
/// Constant weights are packed per (group, tap) at compile time; otherwise A is read in
/// place with strides.
struct TapWeights {
    ptr: Value,
    layout: ALayout,
    /// Bytes from one group to the next, and from one tap to the next.
    group_bytes: usize,
    tap_bytes: usize,
}

fn tap_weights(
    ctx: &mut LowerCtx,
    g: &TransposeGeometry,
    w: &Operand,
    geometry: &Geometry,
) -> Result<TapWeights, String> {
    let taps: usize = g.kernel.iter().product();
    let (cg, mg) = (g.cg, g.mg);
    if let Some(Tensor::F32(values)) = &w.constant {
        let values: Vec<f32> = values.iter().copied().collect();
        let mut packed = Vec::with_capacity(values.len());
        for grp in 0..g.group {
            for t in 0..taps {
                packed.extend(gemm::pack_a(geometry, mg, cg, |m, c| {
                    values[((grp * cg + c) * mg + m) * taps + t]
                }));
            }
        }
        let ptr = ctx.weights_f32(&packed)?;
        return Ok(TapWeights {
            ptr,
            layout: ALayout::Packed,
            group_bytes: taps * mg * cg * F32,
            tap_bytes: mg * cg * F32,
        });
    }
    Ok(TapWeights {
        ptr: w.ptr,
        layout: ALayout::Strided {
            row_stride: taps,
            col_stride: mg * taps,
        },
        group_bytes: cg * mg * taps * F32,
        tap_bytes: F32,
    })
}

/// float32 ConvTranspose as one GEMM per kernel tap and input row:
/// `Y[n, grp·Mg + m, out(i, t)] += Σ_c W[grp·Cg + c, m, t] · X[n, grp·Cg + c, i]` over the
/// static range of i whose outputs land inside Y. Along the last axis consecutive
/// inputs i land `stride` apart, which the GEMM's C column stride expresses; C is also
/// its own addend, so the products accumulate onto the bias and the other taps.
fn transpose_gemm_taps(
    ctx: &mut LowerCtx,
    g: &TransposeGeometry,
    ops: &ConvOperands,
) -> LowerResult {
    let sp = g.input.len();
    let last = sp - 1;
    let taps: usize = g.kernel.iter().product();
    let in_plane: usize = g.input.iter().product();
    let out_plane: usize = g.output.iter().product();
    let (in_strides, out_strides) = (kernel::strides_of(&g.input), kernel::strides_of(&g.output));
    let (channels, maps) = (g.cg * g.group, g.mg * g.group);
    let geometry = ctx.planned_gemm()?;
    let weights = tap_weights(ctx, g, &ops.w, &geometry)?;
    let mut kernels: Vec<(GemmSpec, GemmKernel)> = vec![];
    for t in 0..taps {
        let k = unravel(t, &g.kernel);
        let ranges: Vec<std::ops::Range<usize>> =
            (0..sp).map(|d| g.valid_inputs(d, k[d])).collect();
        if ranges.iter().any(|r| r.is_empty()) {
            continue;
        }
        let spec = GemmSpec {
            m: g.mg,
            n: ranges[last].len(),
            k: g.cg,
            a: weights.layout,
            b: BLayout::Rows {
                row_stride: in_plane,
            },
            ldc: out_plane,
            c_col_stride: g.strides[last],
            alpha: 1.0,
            addends: vec![Addend {
                row_stride: out_plane,
                col_stride: g.strides[last],
                scale: 1.0,
            }],
            activation: Activation::None,
            // Columns scatter with the stride: only the Cranelift kernel stores that way.
            geometry,
            b_taps: vec![],
        };
        let index = match kernels.iter().position(|(s, _)| *s == spec) {
            Some(i) => i,
            None => {
                let kernel = GemmKernel::define(ctx, &spec)?;
                kernels.push((spec, kernel));
                kernels.len() - 1
            }
        };
        let gemm = &kernels[index].1;
        // Window start in X and Y (elements within a plane), and steps per outer axis.
        let x_start: usize = (0..sp).map(|d| ranges[d].start * in_strides[d]).sum();
        let y_start: usize = (0..sp)
            .map(|d| ranges[d].start * g.strides[d] + k[d] * g.dilations[d] - g.pad_begin[d])
            .zip(&out_strides)
            .map(|(o, s)| o * s)
            .sum();
        let x_steps: Vec<usize> = std::iter::once(channels * in_plane)
            .chain([g.cg * in_plane])
            .chain(in_strides[..last].iter().copied())
            .collect();
        let y_steps: Vec<usize> = std::iter::once(maps * out_plane)
            .chain([g.mg * out_plane])
            .chain((0..last).map(|d| g.strides[d] * out_strides[d]))
            .collect();
        let mut shape = vec![g.batch, g.group];
        shape.extend(ranges[..last].iter().map(|r| r.len()));
        let b = &mut *ctx.b;
        let (x0, y0) = (
            b.ins().iadd_imm_s(ops.x.ptr, (x_start * F32) as i64),
            b.ins().iadd_imm_s(ops.y.ptr, (y_start * F32) as i64),
        );
        let a0 = b
            .ins()
            .iadd_imm_s(weights.ptr, (t * weights.tap_bytes) as i64);
        kernel::nested_loop(b, &shape, &mut |b, idx| {
            let xo = kernel::linear_offset(b, idx, &x_steps);
            let x_row = kernel::elem_addr(b, x0, xo, F32);
            let yo = kernel::linear_offset(b, idx, &y_steps);
            let y_row = kernel::elem_addr(b, y0, yo, F32);
            let a = kernel::elem_addr(b, a0, idx[1], weights.group_bytes);
            gemm.call(b, a, x_row, y_row, &[y_row]);
        });
    }
    Ok(())
}

/// Fills `Y[n, m]` with `bias[m]` (or zero).
fn init_output(b: &mut FunctionBuilder, g: &TransposeGeometry, ops: &ConvOperands) {
    let dtype = ops.y.ty.dtype;
    let d = domain(dtype);
    let size = dtype.size();
    let maps = g.mg * g.group;
    let plane: usize = g.output.iter().product();
    kernel::nested_loop(b, &[g.batch, maps], &mut |b, idx| {
        let m = idx[1];
        let v = match &ops.bias {
            Some(bias) => {
                let a = kernel::elem_addr(b, bias.ptr, m, size);
                kernel::load_elem(b, dtype, a, 0)
            }
            None => domain_zero(b, d),
        };
        let off = kernel::linear_offset(b, idx, &[maps * plane, plane]);
        let dst = kernel::elem_addr(b, ops.y.ptr, off, size);
        let vecs = if dtype == DType::F32 {
            plane / LANES
        } else {
            0
        };
        if vecs > 0 {
            let vv = b.ins().splat(types::F32X4, v);
            kernel::counted_loop(b, 0, vecs as i64, 1, |b, i| {
                let a = kernel::elem_addr(b, dst, i, LANES * F32);
                b.ins().store(flags(), vv, a, 0);
            });
        }
        kernel::counted_loop(b, (vecs * LANES) as i64, plane as i64, 1, |b, i| {
            let a = kernel::elem_addr(b, dst, i, size);
            kernel::store_elem(b, dtype, v, a, 0);
        });
    });
}

/// `Y[n, g·Mg+m, i·s − p + k·d] += X[n, g·Cg+c, i] · W[g·Cg+c, m, k]` for every tap k,
/// over the static range of inputs i whose output lands inside Y.
fn scatter_taps(b: &mut FunctionBuilder, g: &TransposeGeometry, ops: &ConvOperands, fma: bool) {
    let dtype = ops.x.ty.dtype;
    let size = dtype.size();
    let sp = g.input.len();
    let in_plane: usize = g.input.iter().product();
    let out_plane: usize = g.output.iter().product();
    let (in_strides, out_strides) = (kernel::strides_of(&g.input), kernel::strides_of(&g.output));
    let taps: usize = g.kernel.iter().product();
    let channels = g.cg * g.group;
    let maps = g.mg * g.group;
    kernel::nested_loop(b, &[g.batch, g.group, g.cg, g.mg], &mut |b, idx| {
        let (n, grp, c, m) = (idx[0], idx[1], idx[2], idx[3]);
        let ci = b.ins().imul_imm_s(grp, g.cg as i64);
        let ci = b.ins().iadd(ci, c);
        let mo = b.ins().imul_imm_s(grp, g.mg as i64);
        let mo = b.ins().iadd(mo, m);
        let x_nc = kernel::linear_offset(b, &[n, ci], &[channels * in_plane, in_plane]);
        let x_nc = kernel::elem_addr(b, ops.x.ptr, x_nc, size);
        let y_nm = kernel::linear_offset(b, &[n, mo], &[maps * out_plane, out_plane]);
        let y_nm = kernel::elem_addr(b, ops.y.ptr, y_nm, size);
        let w_cm = kernel::linear_offset(b, &[ci, m], &[g.mg * taps, taps]);
        let w_cm = kernel::elem_addr(b, ops.w.ptr, w_cm, size);
        for t in 0..taps {
            let k = unravel(t, &g.kernel);
            let ranges: Vec<std::ops::Range<usize>> =
                (0..sp).map(|d| g.valid_inputs(d, k[d])).collect();
            if ranges.iter().any(|r| r.is_empty()) {
                continue;
            }
            let wv = kernel::load_elem(b, dtype, w_cm, (t * size) as i32);
            // First input and output element of the window, and their steps per axis.
            let x_start: usize = (0..sp).map(|d| ranges[d].start * in_strides[d]).sum();
            let y_start: i64 = (0..sp)
                .map(|d| {
                    ((ranges[d].start * g.strides[d] + k[d] * g.dilations[d]) as i64
                        - g.pad_begin[d] as i64)
                        * out_strides[d] as i64
                })
                .sum();
            let y_steps: Vec<usize> = (0..sp).map(|d| g.strides[d] * out_strides[d]).collect();
            let x0 = b.ins().iadd_imm_s(x_nc, (x_start * size) as i64);
            let y0 = b.ins().iadd_imm_s(y_nm, y_start * size as i64);
            let lens: Vec<usize> = ranges.iter().map(|r| r.len()).collect();
            let axpy = Axpy {
                dtype,
                fma,
                x_steps: &in_strides,
                y_steps: &y_steps,
                lens: &lens,
            };
            axpy.emit(b, wv, x0, y0);
        }
    });
}

/// `y[Σ t·y_steps] += w · x[Σ t·x_steps]` over the box `lens`; f32x4 along the last axis
/// when both sides are contiguous there.
struct Axpy<'a> {
    dtype: DType,
    fma: bool,
    x_steps: &'a [usize],
    y_steps: &'a [usize],
    lens: &'a [usize],
}

impl Axpy<'_> {
    fn emit(&self, b: &mut FunctionBuilder, w: Value, x0: Value, y0: Value) {
        let sp = self.lens.len();
        let size = self.dtype.size();
        let inner = self.lens[sp - 1];
        let vector = self.dtype == DType::F32
            && self.y_steps[sp - 1] == 1
            && self.x_steps[sp - 1] == 1
            && inner >= LANES;
        let wv = if vector {
            Some(b.ins().splat(types::F32X4, w))
        } else {
            None
        };
        let d = domain(self.dtype);
        kernel::nested_loop(b, &self.lens[..sp - 1], &mut |b, idx| {
            let xo = kernel::linear_offset(b, idx, &self.x_steps[..sp - 1]);
            let xr = kernel::elem_addr(b, x0, xo, size);
            let yo = kernel::linear_offset(b, idx, &self.y_steps[..sp - 1]);
            let yr = kernel::elem_addr(b, y0, yo, size);
            let mut done = 0;
            if let Some(wv) = wv {
                let vecs = inner / LANES;
                kernel::counted_loop(b, 0, vecs as i64, 1, |b, i| {
                    let xa = kernel::elem_addr(b, xr, i, LANES * F32);
                    let ya = kernel::elem_addr(b, yr, i, LANES * F32);
                    let xv = b.ins().load(types::F32X4, flags(), xa, 0);
                    let yv = b.ins().load(types::F32X4, flags(), ya, 0);
                    let r = gemm::mul_add(b, self.fma, wv, xv, yv);
                    b.ins().store(flags(), r, ya, 0);
                });
                done = vecs * LANES;
            }
            kernel::counted_loop(b, done as i64, inner as i64, 1, |b, i| {
                let xa = kernel::elem_addr(b, xr, i, self.x_steps[sp - 1] * size);
                let ya = kernel::elem_addr(b, yr, i, self.y_steps[sp - 1] * size);
                let xv = kernel::load_elem(b, self.dtype, xa, 0);
                let yv = kernel::load_elem(b, self.dtype, ya, 0);
                let p = domain_mul(b, d, w, xv);
                let r = domain_add(b, d, yv, p);
                kernel::store_elem(b, self.dtype, r, ya, 0);
            });
        });
    }
}
