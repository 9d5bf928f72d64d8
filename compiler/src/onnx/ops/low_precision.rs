//! Cast, CastLike, QuantizeLinear and DequantizeLinear where a low-precision type
//! (float8, float4, 4- and 2-bit integers) is involved. nnc computes nothing in those
//! types: each becomes float32 arithmetic around `CastCodes`, the one op that turns
//! float32 values into codes and back (see `crate::ir::low_precision`).

use crate::ir::low_precision::E8m0Rounding;
use crate::ir::{DType, ValueId};
use crate::onnx::import::{ImportError, ImportResult, NodeCtx};
use crate::ops::{BinaryOp, Op, UnaryOp};

/// Cast's `saturate` (default 1) and `round_mode` (default "up") attributes.
fn cast_attrs(ctx: &NodeCtx) -> ImportResult<(bool, E8m0Rounding)> {
    let saturate = ctx.attrs.flag("saturate", true)?;
    let rounding = match ctx.attrs.string("round_mode", "up")?.as_str() {
        "up" => E8m0Rounding::Up,
        "down" => E8m0Rounding::Down,
        "nearest" => E8m0Rounding::Nearest,
        other => {
            return Err(ImportError::Invalid(format!(
                "round_mode '{other}': expected up, down or nearest"
            )))
        }
    };
    Ok((saturate, rounding))
}

/// `x` as float32: decoded when low-precision, cast otherwise.
pub fn to_f32(ctx: &mut NodeCtx, x: ValueId) -> ImportResult<ValueId> {
    let from = ctx.ty(x).dtype;
    if from == DType::F32 {
        return Ok(x);
    }
    let op = if from.low_precision().is_some() {
        Op::CastCodes {
            to: DType::F32,
            saturate: true,
            rounding: E8m0Rounding::default(),
        }
    } else {
        Op::Cast { to: DType::F32 }
    };
    ctx.emit1(op, vec![Some(x)])
}

/// float32 `v` as `to`: encoded when low-precision, cast otherwise.
fn from_f32(
    ctx: &mut NodeCtx,
    v: ValueId,
    to: DType,
    saturate: bool,
    rounding: E8m0Rounding,
) -> ImportResult<ValueId> {
    if to == DType::F32 {
        return Ok(v);
    }
    let op = if to.low_precision().is_some() {
        Op::CastCodes {
            to,
            saturate,
            rounding,
        }
    } else {
        Op::Cast { to }
    };
    ctx.emit1(op, vec![Some(v)])
}

/// Cast / CastLike of `x` to `to` when either type is low-precision.
pub fn cast(ctx: &mut NodeCtx, x: ValueId, to: DType) -> ImportResult<ValueId> {
    let (saturate, rounding) = cast_attrs(ctx)?;
    let f = to_f32(ctx, x)?;
    from_f32(ctx, f, to, saturate, rounding)
}

/// A per-axis parameter `[C]` reshaped to broadcast along `axis` of a rank-`rank`
/// tensor (scalars and per-tensor parameters stay as they are).
fn along_axis(ctx: &mut NodeCtx, v: ValueId, axis: usize, rank: usize) -> ImportResult<ValueId> {
    let n = ctx.ty(v).numel();
    if n <= 1 || rank == 0 {
        return Ok(v);
    }
    let mut shape = vec![1; rank];
    shape[axis] = n;
    ctx.emit1(Op::Reshape { shape }, vec![Some(v)])
}

/// QuantizeLinear into a low-precision type: `x / scale + zero_point`, rounded half to
/// even and clamped for the integer types, then encoded (float8 and float4 round and
/// saturate, per the `saturate` attribute, in the encoding).
pub fn quantize(ctx: &mut NodeCtx, axis: usize, to: DType) -> ImportResult<ValueId> {
    let format = to.low_precision().expect("a low-precision target");
    let saturate = ctx.attrs.flag("saturate", true)?;
    let x = ctx.required(0)?;
    let rank = ctx.ty(x).rank();
    let x = to_f32(ctx, x)?;
    let scale = to_f32(ctx, ctx.required(1)?)?;
    let scale = along_axis(ctx, scale, axis, rank)?;
    let mut y = ctx.emit1(Op::Binary(BinaryOp::Div), vec![Some(x), Some(scale)])?;
    if !format.is_float() {
        y = ctx.emit1(Op::Unary(UnaryOp::Round), vec![Some(y)])?;
    }
    if let Some(zp) = ctx.input(2) {
        let zp = to_f32(ctx, zp)?;
        let zp = along_axis(ctx, zp, axis, rank)?;
        y = ctx.emit1(Op::Binary(BinaryOp::Add), vec![Some(y), Some(zp)])?;
    }
    if !format.is_float() {
        let codes = 1u32 << format.bits();
        let (min, max) = if to.is_signed_int() {
            (-(codes as f64) / 2.0, codes as f64 / 2.0 - 1.0)
        } else {
            (0.0, codes as f64 - 1.0)
        };
        y = ctx.emit1(Op::Unary(UnaryOp::Clip { min, max }), vec![Some(y)])?;
    }
    from_f32(ctx, y, to, saturate, E8m0Rounding::default())
}

/// DequantizeLinear from a low-precision type: `(x − zero_point) · scale` in float32,
/// in the scale's type at the end.
pub fn dequantize(ctx: &mut NodeCtx, axis: usize) -> ImportResult<ValueId> {
    let x = ctx.required(0)?;
    let rank = ctx.ty(x).rank();
    let scale_id = ctx.required(1)?;
    let out = ctx.ty(scale_id).dtype;
    let mut y = to_f32(ctx, x)?;
    if let Some(zp) = ctx.input(2) {
        let zp = to_f32(ctx, zp)?;
        let zp = along_axis(ctx, zp, axis, rank)?;
        y = ctx.emit1(Op::Binary(BinaryOp::Sub), vec![Some(y), Some(zp)])?;
    }
    let scale = to_f32(ctx, scale_id)?;
    let scale = along_axis(ctx, scale, axis, rank)?;
    y = ctx.emit1(Op::Binary(BinaryOp::Mul), vec![Some(y), Some(scale)])?;
    from_f32(ctx, y, out, true, E8m0Rounding::default())
}

/// Whether any of `dtypes` is low-precision.
pub fn involves(dtypes: &[DType]) -> bool {
    dtypes.iter().any(|d| d.low_precision().is_some())
}
