//! Normalizations that decompose into core ops: InstanceNormalization and
//! GroupNormalization (the core LayerNorm over a view of X), MeanVarianceNormalization
//! (reductions and elementwise ops) and LRN (a sum of squares across channels as an
//! average pool over a `[N, 1, C, spatial]` view).

use super::elementwise::scalar_of;
use crate::ir::{DType, Tensor, ValueId};
use crate::onnx::attributes::normalize_axis;
use crate::onnx::import::{ImportError, ImportResult, NodeCtx};
use crate::ops::{BinaryOp, Op, PoolAttrs, PoolKind, ReduceAttrs, ReduceKind, UnaryOp};

fn emit_bin(ctx: &mut NodeCtx, op: BinaryOp, a: ValueId, b: ValueId) -> ImportResult<ValueId> {
    ctx.emit1(Op::Binary(op), vec![Some(a), Some(b)])
}

fn reshape(ctx: &mut NodeCtx, v: ValueId, shape: Vec<usize>) -> ImportResult<ValueId> {
    ctx.emit1(Op::Reshape { shape }, vec![Some(v)])
}

fn cast(ctx: &mut NodeCtx, v: ValueId, to: DType) -> ImportResult<ValueId> {
    if ctx.ty(v).dtype == to {
        return Ok(v);
    }
    ctx.emit1(Op::Cast { to }, vec![Some(v)])
}

/// X's per-channel vector input `i` (shape `[C]`) as `[C, 1, ..., 1]`, broadcasting over
/// `[N, C, spatial...]` of rank `rank`.
fn per_channel(ctx: &mut NodeCtx, i: usize, channels: usize, rank: usize) -> ImportResult<ValueId> {
    let t = ctx.input_ty(i)?;
    if t.numel() != channels {
        return Err(format!("input {i} {t} must hold one value per channel ({channels})").into());
    }
    let mut shape = vec![channels];
    shape.resize(rank - 1, 1);
    reshape(ctx, ctx.required(i)?, shape)
}

/// The core LayerNorm over the trailing axes `axis..` of `v` with `scale` and optional
/// `bias` (broadcast to `v`), computed in float32 (other float types are cast there and
/// back, as the LayerNormalization importer only gives the core op float32).
fn layer_norm_f32(
    ctx: &mut NodeCtx,
    v: ValueId,
    scale: ValueId,
    bias: Option<ValueId>,
    axis: usize,
    epsilon: f32,
) -> ImportResult<ValueId> {
    let dtype = ctx.ty(v).dtype;
    let v = cast(ctx, v, DType::F32)?;
    let scale = cast(ctx, scale, DType::F32)?;
    let bias = bias.map(|b| cast(ctx, b, DType::F32)).transpose()?;
    let y = ctx.emit1(
        Op::LayerNorm { axis, epsilon },
        vec![Some(v), Some(scale), bias],
    )?;
    cast(ctx, y, dtype)
}

/// `(v − mean) / sqrt(var + epsilon)` over the trailing axes `axis..`: the core LayerNorm
/// with a unit scale.
fn standardize_trailing(
    ctx: &mut NodeCtx,
    v: ValueId,
    axis: usize,
    epsilon: f32,
) -> ImportResult<ValueId> {
    let one = ctx.constant_value("one", Tensor::from_vec(&[1], vec![1.0f32]));
    layer_norm_f32(ctx, v, one, None, axis, epsilon)
}

fn check_image(ctx: &NodeCtx) -> ImportResult<crate::ir::TensorType> {
    let x = ctx.input_ty(0)?;
    if x.rank() < 3 || !x.dtype.is_float() {
        return Err(format!("input must be a float tensor [N, C, D1, ...], got {x}").into());
    }
    Ok(x)
}

/// InstanceNormalization: LayerNorm over the spatial axes with `[C, 1, ...]` scale and
/// bias.
pub fn instance_norm(ctx: &mut NodeCtx) -> ImportResult {
    let x = check_image(ctx)?;
    let epsilon = ctx.attrs.float("epsilon", 1e-5)?;
    let scale = per_channel(ctx, 1, x.shape[1], x.rank())?;
    let bias = per_channel(ctx, 2, x.shape[1], x.rank())?;
    let y = layer_norm_f32(ctx, ctx.required(0)?, scale, Some(bias), 2, epsilon)?;
    ctx.bind_output(0, y);
    Ok(())
}

/// GroupNormalization: X viewed as `[N, G, C/G · spatial]` is standardized along its last
/// axis, then scaled and shifted per channel (opset 21)
/// or per group (opset 18, whose scale and bias have one value per group).
pub fn group_norm(ctx: &mut NodeCtx) -> ImportResult {
    let x = check_image(ctx)?;
    let epsilon = ctx.attrs.float("epsilon", 1e-5)?;
    let groups = ctx.attrs.int("num_groups", 0)?;
    let (n, c) = (x.shape[0], x.shape[1]);
    let groups = usize::try_from(groups)
        .ok()
        .filter(|g| *g > 0 && c % g == 0)
        .ok_or_else(|| format!("num_groups {groups} must divide the {c} channels"))?;
    // The first stage runs in float32, stash_type's default (a float64 stash_type is
    // computed in float32 too).
    let grouped = vec![n, groups, x.numel() / (n * groups).max(1)];
    let v = reshape(ctx, ctx.required(0)?, grouped)?;
    let v = standardize_trailing(ctx, v, 2, epsilon)?;
    let per_group = ctx.opset() < 21;
    let y = if per_group {
        let mut y = v;
        for i in [1, 2] {
            let p = per_channel(ctx, i, groups, 3)?;
            let op = if i == 1 { BinaryOp::Mul } else { BinaryOp::Add };
            y = emit_bin(ctx, op, y, p)?;
        }
        reshape(ctx, y, x.shape.clone())?
    } else {
        let mut y = reshape(ctx, v, x.shape.clone())?;
        for i in [1, 2] {
            let p = per_channel(ctx, i, c, x.rank())?;
            let op = if i == 1 { BinaryOp::Mul } else { BinaryOp::Add };
            y = emit_bin(ctx, op, y, p)?;
        }
        y
    };
    ctx.bind_output(0, y);
    Ok(())
}

/// MeanVarianceNormalization: `(X − E[X]) / (sqrt(E[(X − E[X])²]) + 1e-9)` over `axes`
/// (the ONNX function body's epsilon, added to the deviation).
pub fn mean_variance_norm(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    if !x.dtype.is_float() {
        return Err(format!("input must be a float tensor, got {x}").into());
    }
    let axes = ctx.attrs.ints_opt("axes")?.unwrap_or_else(|| vec![0, 2, 3]);
    let mut axes = axes
        .iter()
        .map(|&a| normalize_axis(a, x.rank()))
        .collect::<Result<Vec<_>, _>>()?;
    axes.sort_unstable();
    axes.dedup();
    let xv = ctx.required(0)?;
    if axes.is_empty() {
        // Nothing to average over: every element is its own mean.
        let zero = ctx.constant_value("zero", scalar_of(x.dtype, 0.0));
        let y = emit_bin(ctx, BinaryOp::Mul, xv, zero)?;
        ctx.bind_output(0, y);
        return Ok(());
    }
    let mean = |ctx: &mut NodeCtx, v: ValueId| {
        let op = Op::Reduce(ReduceAttrs {
            kind: ReduceKind::Mean,
            axes: axes.clone(),
            keepdims: true,
        });
        ctx.emit1(op, vec![Some(v)])
    };
    let m = mean(ctx, xv)?;
    let d = emit_bin(ctx, BinaryOp::Sub, xv, m)?;
    let sq = emit_bin(ctx, BinaryOp::Mul, d, d)?;
    let var = mean(ctx, sq)?;
    let sd = ctx.emit1(Op::Unary(UnaryOp::Sqrt), vec![Some(var)])?;
    let eps = ctx.constant_value("epsilon", scalar_of(x.dtype, 1e-9));
    let sd = emit_bin(ctx, BinaryOp::Add, sd, eps)?;
    let y = emit_bin(ctx, BinaryOp::Div, d, sd)?;
    ctx.bind_output(0, y);
    Ok(())
}

/// LRN: `x / (bias + alpha/size · Σ x²)^beta`, the sum over the `size` channels around
/// each one (`⌊(size−1)/2⌋` before, `⌈(size−1)/2⌉` after, clipped to the tensor). The
/// sum divided by size is an average pool of `x²` viewed as `[N, 1, C, spatial]` with
/// zero padding counted.
pub fn lrn(ctx: &mut NodeCtx) -> ImportResult {
    let x = check_image(ctx)?;
    let a = &ctx.attrs;
    let (alpha, beta, bias) = (
        a.float("alpha", 1e-4)? as f64,
        a.float("beta", 0.75)? as f64,
        a.float("bias", 1.0)? as f64,
    );
    let size = a.int_opt("size")?.ok_or("attribute 'size' is required")?;
    let size = usize::try_from(size)
        .ok()
        .filter(|s| *s > 0)
        .ok_or_else(|| format!("attribute 'size' is {size}: it must be positive"))?;
    if size > 1 << 16 {
        return Err(ImportError::Unsupported(format!(
            "LRN over a window of {size} channels (at most 65536)"
        )));
    }
    let (n, c) = (x.shape[0], x.shape[1]);
    let spatial = x.numel() / (n * c).max(1);
    // Computed in float32 whatever the input's float type.
    let xv = ctx.required(0)?;
    let xv = cast(ctx, xv, DType::F32)?;
    let sq = emit_bin(ctx, BinaryOp::Mul, xv, xv)?;
    let sq = reshape(ctx, sq, vec![n, 1, c, spatial])?;
    let pool = Op::Pool(PoolAttrs {
        kind: PoolKind::Average {
            count_include_pad: true,
        },
        kernel: vec![size, 1],
        strides: vec![1, 1],
        pads: vec![(size - 1) / 2, 0, size / 2, 0],
        dilations: vec![1, 1],
        output_spatial: vec![c, spatial],
        ceil_mode: false,
    });
    let avg = ctx.emit1(pool, vec![Some(sq)])?;
    let avg = reshape(ctx, avg, x.shape.clone())?;
    let k =
        |ctx: &mut NodeCtx, name: &str, v: f64| ctx.constant_value(name, scalar_of(DType::F32, v));
    let (alpha, bias, beta) = (
        k(ctx, "alpha", alpha),
        k(ctx, "bias", bias),
        k(ctx, "beta", beta),
    );
    let scaled = emit_bin(ctx, BinaryOp::Mul, avg, alpha)?;
    let base = emit_bin(ctx, BinaryOp::Add, scaled, bias)?;
    let denom = emit_bin(ctx, BinaryOp::Pow, base, beta)?;
    let y = emit_bin(ctx, BinaryOp::Div, xv, denom)?;
    let y = cast(ctx, y, x.dtype)?;
    ctx.bind_output(0, y);
    Ok(())
}
