//! Ops of the `ai.onnx.ml` domain that are plain tensor arithmetic: Binarizer and
//! ArrayFeatureExtractor.

use crate::onnx::import::{ImportResult, NodeCtx};
use crate::ops::{BinaryOp, Op};

use super::elementwise::scalar_of;

/// Binarizer: 1 where x > threshold, else 0, in x's type.
pub fn binarizer(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.required(0)?;
    let dtype = ctx.ty(x).dtype;
    if !dtype.is_float() && !dtype.is_int() {
        return Err(format!("Binarizer of {dtype}").into());
    }
    let threshold = ctx.attrs.float("threshold", 0.0)? as f64;
    let t = ctx.constant_value("threshold", scalar_of(dtype, threshold));
    let above = ctx.emit1(Op::Binary(BinaryOp::Greater), vec![Some(x), Some(t)])?;
    let y = ctx.emit1(Op::Cast { to: dtype }, vec![Some(above)])?;
    ctx.bind_output(0, y);
    Ok(())
}

/// ArrayFeatureExtractor: the elements of the last axis at the given indices (all of
/// them, flattened), `[..., k]`; a 1-D input gives `[1, k]`.
pub fn array_feature_extractor(ctx: &mut NodeCtx) -> ImportResult {
    let (x, i) = (ctx.required(0)?, ctx.required(1)?);
    let (xt, it) = (ctx.ty(x).clone(), ctx.ty(i).clone());
    if !it.dtype.is_int() || xt.rank() == 0 {
        return Err(
            format!("expected data of rank ≥ 1 and integer indices, got {xt} and {it}").into(),
        );
    }
    let k = it.numel();
    let flat = ctx.emit1(Op::Reshape { shape: vec![k] }, vec![Some(i)])?;
    let y = ctx.emit1(
        Op::Gather {
            axis: xt.rank() - 1,
        },
        vec![Some(x), Some(flat)],
    )?;
    let y = if xt.rank() == 1 {
        ctx.emit1(Op::Reshape { shape: vec![1, k] }, vec![Some(y)])?
    } else {
        y
    };
    ctx.bind_output(0, y);
    Ok(())
}
