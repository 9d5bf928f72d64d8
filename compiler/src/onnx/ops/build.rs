//! Small emitters shared by the importers that decompose one ONNX node into many core
//! ops (recurrent cells, Einsum): each adds one op, skipping it when it would be a no-op.

use super::elementwise::scalar_of;
use crate::ir::{DType, Dim, TensorType, ValueId};
use crate::onnx::import::{ImportResult, NodeCtx};
use crate::ops::{BinaryOp, Op, UnaryOp};

pub fn reshape(ctx: &mut NodeCtx, v: ValueId, shape: Vec<usize>) -> ImportResult<ValueId> {
    if ctx.ty(v).shape == shape {
        return Ok(v);
    }
    ctx.emit1(Op::Reshape { shape }, vec![Some(v)])
}

/// `v` reshaped to axes `dims` (expressions where `v`'s extents vary at run time; a
/// plain [`reshape`] where nothing does).
pub fn reshape_dims(ctx: &mut NodeCtx, v: ValueId, dims: Vec<Dim>) -> ImportResult<ValueId> {
    let fixed: Option<Vec<usize>> = dims
        .iter()
        .map(|d| d.as_const().map(|c| c as usize))
        .collect();
    let from = ctx.ty(v).clone();
    match fixed {
        Some(shape) if !from.is_symbolic() => reshape(ctx, v, shape),
        _ => {
            let numel = |d: &[Dim]| d.iter().try_fold(Dim::constant(1), |p, x| p.checked_mul(x));
            let (a, b) = (numel(&from.dims()), numel(&dims));
            match (a, b) {
                (Some(a), Some(b)) if ctx.symbols().prove_eq(&a, &b) => {}
                _ => return Err(format!("cannot reshape {from} to the axes given").into()),
            }
            let shape = TensorType::from_dims(from.dtype, dims.clone(), ctx.symbols())?.shape;
            Ok(ctx.emit_with_dims(Op::Reshape { shape }, vec![Some(v)], vec![dims])?[0])
        }
    }
}

/// The block of `v` starting at `starts` whose axes are `dims` (step 1), for extents
/// set at run time.
pub fn slice_dims(
    ctx: &mut NodeCtx,
    v: ValueId,
    starts: Vec<usize>,
    dims: Vec<Dim>,
) -> ImportResult<ValueId> {
    let dtype = ctx.ty(v).dtype;
    let shape = TensorType::from_dims(dtype, dims.clone(), ctx.symbols())?.shape;
    let steps = vec![1; shape.len()];
    let op = Op::Slice {
        starts,
        steps,
        shape,
    };
    Ok(ctx.emit_with_dims(op, vec![Some(v)], vec![dims])?[0])
}

pub fn transpose(ctx: &mut NodeCtx, v: ValueId, perm: Vec<usize>) -> ImportResult<ValueId> {
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return Ok(v);
    }
    ctx.emit1(Op::Transpose { perm }, vec![Some(v)])
}

/// The block of `v` starting at `starts` with extent `shape` (step 1 on every axis).
pub fn slice(
    ctx: &mut NodeCtx,
    v: ValueId,
    starts: Vec<usize>,
    shape: Vec<usize>,
) -> ImportResult<ValueId> {
    if ctx.ty(v).shape == shape {
        return Ok(v);
    }
    let steps = vec![1; shape.len()];
    ctx.emit1(
        Op::Slice {
            starts,
            steps,
            shape,
        },
        vec![Some(v)],
    )
}

pub fn binary(ctx: &mut NodeCtx, op: BinaryOp, a: ValueId, b: ValueId) -> ImportResult<ValueId> {
    ctx.emit1(Op::Binary(op), vec![Some(a), Some(b)])
}

pub fn unary(ctx: &mut NodeCtx, op: UnaryOp, a: ValueId) -> ImportResult<ValueId> {
    ctx.emit1(Op::Unary(op), vec![Some(a)])
}

pub fn scalar(ctx: &mut NodeCtx, name: &str, dtype: DType, v: f64) -> ValueId {
    ctx.constant_value(name, scalar_of(dtype, v))
}

pub fn concat(ctx: &mut NodeCtx, parts: Vec<ValueId>, axis: usize) -> ImportResult<ValueId> {
    if parts.len() == 1 {
        return Ok(parts[0]);
    }
    ctx.emit1(Op::Concat { axis }, parts.into_iter().map(Some).collect())
}

/// A float32 scalar constant.
pub fn f32_const(ctx: &mut NodeCtx, v: f64) -> ValueId {
    scalar(ctx, "constant", DType::F32, v)
}

/// `a + v` for a float32 `a`.
pub fn add_f32(ctx: &mut NodeCtx, a: ValueId, v: f64) -> ImportResult<ValueId> {
    let k = f32_const(ctx, v);
    binary(ctx, BinaryOp::Add, a, k)
}

/// `a · v` for a float32 `a`.
pub fn mul_f32(ctx: &mut NodeCtx, a: ValueId, v: f64) -> ImportResult<ValueId> {
    let k = f32_const(ctx, v);
    binary(ctx, BinaryOp::Mul, a, k)
}

/// Reads `data` (`[..., C, pixels]`) at the flat pixel positions `index` (float32,
/// integral, `[..., 1, S]`, every position inside): `[..., C, S]`, the same positions
/// for every channel. The sampling importers compute positions in float32, exact for
/// fewer than 2^24 pixels.
pub fn gather_pixels(ctx: &mut NodeCtx, data: ValueId, index: ValueId) -> ImportResult<ValueId> {
    let mut shape = ctx.ty(index).shape.clone();
    let data_shape = ctx.ty(data).shape.clone();
    let rank = shape.len();
    shape[rank - 2] = data_shape[rank - 2];
    let index = ctx.emit1(Op::Cast { to: DType::I64 }, vec![Some(index)])?;
    let index = ctx.emit1(Op::Expand { shape }, vec![Some(index)])?;
    ctx.emit1(
        Op::GatherElements { axis: rank - 1 },
        vec![Some(data), Some(index)],
    )
}
