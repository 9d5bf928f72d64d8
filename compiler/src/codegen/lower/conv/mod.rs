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
};
use super::linalg::{domain_add, domain_mul, domain_zero};
use super::{LowerCtx, LowerResult, Operand};
use crate::codegen::kernel::{self, domain, flags};
use crate::codegen::plan::conv::*;
use crate::codegen::plan::Strategy;
use crate::codegen::tasks::Split;
use crate::ir::{DType, Tensor};
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

/// Flags for loads of memory nothing writes while the node runs (inputs, weights,
/// tables): `readonly` + `can_move` let the optimizer hoist and schedule them freely.
fn stable_flags() -> MemFlagsData {
    flags().with_readonly().with_can_move()
}

/// `base + first` input channels (planes of `plane` floats) on.
fn channel_at(b: &mut FunctionBuilder, base: Value, first: Value, plane: usize) -> Value {
    kernel::elem_addr(b, base, first, plane * F32)
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
