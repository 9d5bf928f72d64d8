//! MaxRoiPool (opset 1), Caffe's ROIPooling: each roi `(batch, x1, y1, x2, y2)` is
//! rounded to whole pixels of the scaled input, split into `PH × PW` bins with
//! integer bounds `floor(p · bin) .. ceil((p + 1) · bin)` (clipped to the image), and
//! each bin keeps its largest value, or 0 when it is empty.
//!
//! The rois may be a run-time input, so the bin bounds are computed as `[R, P]`
//! tensors from the roi values; they become a row mask `[R, PH, H]` and a column
//! mask `[R, PW, W]` over the roi's image (gathered by batch index). The maximum is
//! taken in two separable steps, columns then rows, with masked-out pixels at −∞;
//! empty bins are then set to 0.

use super::build::{binary, f32_const, mul_f32, reshape, slice, unary};
use super::low_precision::to_f32;
use crate::ir::{DType, Tensor, ValueId};
use crate::onnx::import::{ImportError, ImportResult, NodeCtx};
use crate::ops::{BinaryOp, Op, ReduceAttrs, ReduceKind, UnaryOp};

pub fn max_roi_pool(ctx: &mut NodeCtx) -> ImportResult {
    let (x, rois) = (ctx.required(0)?, ctx.required(1)?);
    let (xt, rt) = (ctx.ty(x).clone(), ctx.ty(rois).clone());
    if xt.rank() != 4 || rt.rank() != 2 || rt.shape[1] != 5 {
        return Err(format!("X {xt} and rois {rt} must be [N, C, H, W] and [R, 5]").into());
    }
    if !xt.dtype.is_float() || !rt.dtype.is_float() {
        return Err(ImportError::Unsupported(format!(
            "MaxRoiPool of {} with {} rois",
            xt.dtype, rt.dtype
        )));
    }
    let pooled = ctx
        .attrs
        .ints_opt("pooled_shape")?
        .ok_or("MaxRoiPool needs the pooled_shape attribute")?;
    if pooled.len() != 2 || pooled.iter().any(|&p| p <= 0) {
        return Err(format!("pooled_shape {pooled:?}: expected two positive sizes").into());
    }
    let (ph, pw) = (pooled[0] as usize, pooled[1] as usize);
    let scale = ctx.attrs.float("spatial_scale", 1.0)? as f64;
    let (c, h, w) = (xt.shape[1], xt.shape[2], xt.shape[3]);
    let r = rt.shape[0];
    if h.max(w) >= 1 << 24 {
        return Err(ImportError::Unsupported(
            "MaxRoiPool inputs of 2^24 rows or columns".into(),
        ));
    }

    let rf = to_f32(ctx, rois)?;
    // The roi's image: the batch index truncated, as the reference's int conversion.
    let batch = slice(ctx, rf, vec![0, 0], vec![r, 1])?;
    let batch = ctx.emit1(Op::Cast { to: DType::I64 }, vec![Some(batch)])?;
    let batch = reshape(ctx, batch, vec![r])?;
    let xf = to_f32(ctx, x)?;
    let data = ctx.emit1(Op::Gather { axis: 0 }, vec![Some(xf), Some(batch)])?;

    // Per axis: the bin mask [R, P, len] and which bins are empty [R, P].
    let mut masks = vec![];
    for (lo_col, hi_col, bins, len) in [(2, 4, ph, h), (1, 3, pw, w)] {
        let start = corner(ctx, rf, r, lo_col, scale)?;
        let end = corner(ctx, rf, r, hi_col, scale)?;
        let size = binary(ctx, BinaryOp::Sub, end, start)?;
        let one = f32_const(ctx, 1.0);
        let size = binary(ctx, BinaryOp::Add, size, one)?;
        let size = binary(ctx, BinaryOp::Max, size, one)?;
        let count = f32_const(ctx, bins as f64);
        let bin = binary(ctx, BinaryOp::Div, size, count)?;
        let mut bounds = vec![];
        for (offset, round) in [(0, UnaryOp::Floor), (1, UnaryOp::Ceil)] {
            let steps: Vec<f32> = (0..bins).map(|p| (p + offset) as f32).collect();
            let steps =
                ctx.constant_value("max_roi_pool_steps", Tensor::from_vec(&[1, bins], steps));
            let v = binary(ctx, BinaryOp::Mul, bin, steps)?;
            let v = unary(ctx, round, v)?;
            let v = binary(ctx, BinaryOp::Add, v, start)?;
            let v = unary(
                ctx,
                UnaryOp::Clip {
                    min: 0.0,
                    max: len as f64,
                },
                v,
            )?;
            bounds.push(v);
        }
        let (lo, hi) = (bounds[0], bounds[1]);
        let empty = binary(ctx, BinaryOp::LessOrEqual, hi, lo)?;
        let lo = reshape(ctx, lo, vec![r, bins, 1])?;
        let hi = reshape(ctx, hi, vec![r, bins, 1])?;
        let index: Vec<f32> = (0..len).map(|i| i as f32).collect();
        let index = ctx.constant_value("max_roi_pool_index", Tensor::from_vec(&[1, 1, len], index));
        let ge = binary(ctx, BinaryOp::GreaterOrEqual, index, lo)?;
        let lt = binary(ctx, BinaryOp::Less, index, hi)?;
        let mask = binary(ctx, BinaryOp::And, ge, lt)?;
        masks.push((mask, empty));
    }
    let [(row_mask, row_empty), (col_mask, col_empty)] = [masks[0], masks[1]];
    let low = f32_const(ctx, f64::NEG_INFINITY);

    // Columns: [R, C, H, 1, W] over [R, 1, 1, PW, W] → max over W → [R, C, H, PW].
    let v = reshape(ctx, data, vec![r, c, h, 1, w])?;
    let m = reshape(ctx, col_mask, vec![r, 1, 1, pw, w])?;
    let v = ctx.emit1(Op::Where, vec![Some(m), Some(v), Some(low)])?;
    let v = reduce_max(ctx, v, 4)?;
    // Rows: [R, C, 1, H, PW] over [R, 1, PH, H, 1] → max over H → [R, C, PH, PW].
    let v = reshape(ctx, v, vec![r, c, 1, h, pw])?;
    let m = reshape(ctx, row_mask, vec![r, 1, ph, h, 1])?;
    let v = ctx.emit1(Op::Where, vec![Some(m), Some(v), Some(low)])?;
    let v = reduce_max(ctx, v, 3)?;

    let row_empty = reshape(ctx, row_empty, vec![r, 1, ph, 1])?;
    let col_empty = reshape(ctx, col_empty, vec![r, 1, 1, pw])?;
    let empty = binary(ctx, BinaryOp::Or, row_empty, col_empty)?;
    let zero = f32_const(ctx, 0.0);
    let mut y = ctx.emit1(Op::Where, vec![Some(empty), Some(zero), Some(v)])?;
    if xt.dtype != DType::F32 {
        y = ctx.emit1(Op::Cast { to: xt.dtype }, vec![Some(y)])?;
    }
    ctx.bind_output(0, y);
    Ok(())
}

/// Column `col` of the rois (`[R, 5]`, float32) scaled and rounded half away from
/// zero, as C's `round`: `[R, 1]`.
fn corner(
    ctx: &mut NodeCtx,
    rois: ValueId,
    r: usize,
    col: usize,
    scale: f64,
) -> ImportResult<ValueId> {
    let v = slice(ctx, rois, vec![0, col], vec![r, 1])?;
    let v = mul_f32(ctx, v, scale)?;
    let sign = unary(ctx, UnaryOp::Sign, v)?;
    let mag = unary(ctx, UnaryOp::Abs, v)?;
    let half = f32_const(ctx, 0.5);
    let mag = binary(ctx, BinaryOp::Add, mag, half)?;
    let mag = unary(ctx, UnaryOp::Floor, mag)?;
    binary(ctx, BinaryOp::Mul, sign, mag)
}

fn reduce_max(ctx: &mut NodeCtx, v: ValueId, axis: usize) -> ImportResult<ValueId> {
    ctx.emit1(
        Op::Reduce(ReduceAttrs {
            kind: ReduceKind::Max,
            axes: vec![axis],
            keepdims: false,
        }),
        vec![Some(v)],
    )
}
