//! Gradient (`ai.onnx.preview.training`): the derivatives of one value of the graph
//! with respect to others, by reverse-mode differentiation of the IR nodes imported so
//! far. The seed is ones (the gradient of the sum of `y`); broadcast operands get their
//! gradients summed back to their shapes. Covers the arithmetic ops; any other op on
//! a path from the inputs to `y` makes the node unsupported, naming it.

use super::build::binary;
use std::collections::HashMap;

use crate::ir::{Tensor, ValueId};
use crate::onnx::import::{ImportError, ImportResult, NodeCtx};
use crate::ops::{BinaryOp, Op, ReduceAttrs, ReduceKind, UnaryOp};

pub fn gradient(ctx: &mut NodeCtx) -> ImportResult {
    let xs = ctx
        .attrs
        .strings_opt("xs")?
        .ok_or("attribute 'xs' is required")?;
    let y_name = ctx.attrs.string("y", "")?;
    let named = |ctx: &NodeCtx, n: &str| {
        ctx.value_named(n)
            .ok_or_else(|| ImportError::Invalid(format!("'{n}' is not a value of the graph")))
    };
    let y = named(ctx, &y_name)?;
    let xs: Vec<ValueId> = xs
        .iter()
        .map(|n| named(ctx, n))
        .collect::<ImportResult<_>>()?;
    let yt = ctx.ty(y).clone();
    if !yt.dtype.is_float() {
        return Err(format!("Gradient of a {} value", yt.dtype).into());
    }
    let nodes = ctx.graph().nodes.clone();
    let mut grads: HashMap<ValueId, ValueId> = HashMap::new();
    let ones = ctx.constant_value(
        "gradient_seed",
        Tensor::from_vec(&yt.shape, vec![1f64; yt.numel()]).cast(yt.dtype),
    );
    grads.insert(y, ones);
    for node in nodes.iter().rev() {
        let Some(&g) = node.outputs.first().and_then(|o| grads.get(o)) else {
            continue;
        };
        let ins: Vec<ValueId> = node.inputs.iter().flatten().copied().collect();
        let neg = |ctx: &mut NodeCtx, a: ValueId| ctx.emit1(Op::Unary(UnaryOp::Neg), vec![Some(a)]);
        let parts: Vec<(ValueId, ValueId)> = match (&node.op, &ins[..]) {
            (Op::Binary(BinaryOp::Add), &[a, b]) => vec![(a, g), (b, g)],
            (Op::Binary(BinaryOp::Sub), &[a, b]) => vec![(a, g), (b, neg(ctx, g)?)],
            (Op::Binary(BinaryOp::Mul), &[a, b]) => {
                vec![
                    (a, binary(ctx, BinaryOp::Mul, g, b)?),
                    (b, binary(ctx, BinaryOp::Mul, g, a)?),
                ]
            }
            (Op::Binary(BinaryOp::Div), &[a, b]) => {
                let ga = binary(ctx, BinaryOp::Div, g, b)?;
                let q = binary(ctx, BinaryOp::Div, ga, b)?;
                let q = binary(ctx, BinaryOp::Mul, q, a)?;
                vec![(a, ga), (b, neg(ctx, q)?)]
            }
            (Op::Unary(UnaryOp::Neg), &[a]) => vec![(a, neg(ctx, g)?)],
            (Op::Unary(UnaryOp::Identity), &[a]) => vec![(a, g)],
            _ if ins.iter().all(|v| ctx.constant(*v).is_some()) => vec![],
            _ => {
                return Err(ImportError::Unsupported(format!(
                    "the gradient through node '{}' ({})",
                    node.name, node.onnx_op
                )))
            }
        };
        for (v, gv) in parts {
            if ctx.constant(v).is_some() {
                continue;
            }
            let gv = reduce_to(ctx, gv, &ctx.ty(v).shape.clone())?;
            let total = match grads.get(&v) {
                Some(&prev) => ctx.emit1(Op::Binary(BinaryOp::Add), vec![Some(prev), Some(gv)])?,
                None => gv,
            };
            grads.insert(v, total);
        }
    }
    let mut outs = vec![];
    for x in xs {
        outs.push(match grads.get(&x) {
            Some(&g) => g,
            None => {
                let t = ctx.ty(x).clone();
                ctx.constant_value(
                    "zero_gradient",
                    Tensor::from_vec(&t.shape, vec![0f64; t.numel()]).cast(t.dtype),
                )
            }
        });
    }
    ctx.bind_outputs(&outs);
    Ok(())
}

/// `g` summed over the axes broadcasting added, down to `shape`.
fn reduce_to(ctx: &mut NodeCtx, g: ValueId, shape: &[usize]) -> ImportResult<ValueId> {
    let gs = ctx.ty(g).shape.clone();
    if gs == shape {
        return Ok(g);
    }
    let extra = gs
        .len()
        .checked_sub(shape.len())
        .ok_or_else(|| format!("a gradient of shape {gs:?} cannot reduce to {shape:?}"))?;
    let axes: Vec<usize> = (0..gs.len())
        .filter(|&a| a < extra || (shape[a - extra] == 1 && gs[a] != 1))
        .collect();
    let summed = if axes.is_empty() {
        g
    } else {
        ctx.emit1(
            Op::Reduce(ReduceAttrs {
                kind: ReduceKind::Sum,
                axes,
                keepdims: true,
            }),
            vec![Some(g)],
        )?
    };
    ctx.emit1(
        Op::Reshape {
            shape: shape.to_vec(),
        },
        vec![Some(summed)],
    )
}
