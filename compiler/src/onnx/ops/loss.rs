//! NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, decomposed into core ops as
//! the ONNX reference computes them:
//!
//! ```text
//! t'     = target == ignore_index ? 0 : target          (a safe class to gather)
//! l      = -GatherElements(input, unsqueeze(t', 1), axis 1), squeezed
//! l      = target == ignore_index ? 0 : l
//! w      = weight[t'] (or 1), 0 where target == ignore_index
//! loss   = none: l · w;  sum: Σ l · w;  mean: Σ l · w / Σ w  (plain mean without w)
//! ```
//!
//! SoftmaxCrossEntropyLoss is the same on `LogSoftmax(scores, axis 1)`, which is also
//! its optional second output.

use super::elementwise::scalar_of;
use crate::ir::ValueId;
use crate::onnx::import::{ImportError, ImportResult, NodeCtx};
use crate::ops::{BinaryOp, Op, ReduceAttrs, ReduceKind, UnaryOp};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Reduction {
    None,
    Sum,
    Mean,
}

fn reduction(ctx: &NodeCtx) -> ImportResult<Reduction> {
    Ok(match ctx.attrs.string("reduction", "mean")?.as_str() {
        "none" => Reduction::None,
        "sum" => Reduction::Sum,
        "mean" => Reduction::Mean,
        other => return Err(format!("unknown reduction '{other}'").into()),
    })
}

fn binary(ctx: &mut NodeCtx, op: BinaryOp, a: ValueId, b: ValueId) -> ImportResult<ValueId> {
    ctx.emit1(Op::Binary(op), vec![Some(a), Some(b)])
}

fn select(ctx: &mut NodeCtx, cond: ValueId, a: ValueId, b: ValueId) -> ImportResult<ValueId> {
    ctx.emit1(Op::Where, vec![Some(cond), Some(a), Some(b)])
}

fn sum_all(ctx: &mut NodeCtx, v: ValueId) -> ImportResult<ValueId> {
    let rank = ctx.ty(v).rank();
    if rank == 0 {
        return Ok(v);
    }
    let attrs = ReduceAttrs {
        kind: ReduceKind::Sum,
        axes: (0..rank).collect(),
        keepdims: false,
    };
    ctx.emit1(Op::Reduce(attrs), vec![Some(v)])
}

/// The loss of log-probabilities `input` `[N, C, d...]` against class indices
/// `target` `[N, d...]`.
fn nll(
    ctx: &mut NodeCtx,
    input: ValueId,
    target: ValueId,
    weight: Option<ValueId>,
    red: Reduction,
) -> ImportResult<ValueId> {
    let x = ctx.ty(input).clone();
    let t = ctx.ty(target).clone();
    let mut expected = x.shape.clone();
    if x.rank() >= 2 {
        expected.remove(1);
    }
    if x.rank() < 2 || t.shape != expected {
        return Err(
            format!("target {t} does not match input {x} (expected shape {expected:?})").into(),
        );
    }
    if !t.dtype.is_int() {
        return Err(ImportError::Invalid(format!(
            "target must hold integers, got {}",
            t.dtype
        )));
    }
    let ignore_index = ctx.attrs.int_opt("ignore_index")?;
    let zero = ctx.constant_value("zero", scalar_of(x.dtype, 0.0));
    let (safe, ignored) = match ignore_index {
        Some(ii) => {
            let iiv = ctx.constant_value("ignore_index", scalar_of(t.dtype, ii as f64));
            let ignored = binary(ctx, BinaryOp::Equal, target, iiv)?;
            let class0 = ctx.constant_value("class0", scalar_of(t.dtype, 0.0));
            (select(ctx, ignored, class0, target)?, Some(ignored))
        }
        None => (target, None),
    };
    let mut unsqueezed = t.shape.clone();
    unsqueezed.insert(1, 1);
    let idx = ctx.emit1(Op::Reshape { shape: unsqueezed }, vec![Some(safe)])?;
    let picked = ctx.emit1(Op::GatherElements { axis: 1 }, vec![Some(input), Some(idx)])?;
    let picked = ctx.emit1(
        Op::Reshape {
            shape: t.shape.clone(),
        },
        vec![Some(picked)],
    )?;
    let mut loss = ctx.emit1(Op::Unary(UnaryOp::Neg), vec![Some(picked)])?;
    if let Some(ignored) = ignored {
        loss = select(ctx, ignored, zero, loss)?;
    }
    let w = match (weight, ignored) {
        (Some(w), _) => {
            let w = ctx.emit1(Op::Gather { axis: 0 }, vec![Some(w), Some(safe)])?;
            Some(match ignored {
                Some(ignored) => select(ctx, ignored, zero, w)?,
                None => w,
            })
        }
        (None, Some(ignored)) => {
            let one = ctx.constant_value("one", scalar_of(x.dtype, 1.0));
            Some(select(ctx, ignored, zero, one)?)
        }
        (None, None) => None,
    };
    if let (Some(w), true) = (w, weight.is_some()) {
        loss = binary(ctx, BinaryOp::Mul, loss, w)?;
    }
    Ok(match (red, w) {
        (Reduction::None, _) => loss,
        (Reduction::Sum, _) => sum_all(ctx, loss)?,
        (Reduction::Mean, Some(w)) => {
            let total = sum_all(ctx, loss)?;
            let weights = sum_all(ctx, w)?;
            binary(ctx, BinaryOp::Div, total, weights)?
        }
        (Reduction::Mean, None) => {
            let rank = ctx.ty(loss).rank();
            let attrs = ReduceAttrs {
                kind: ReduceKind::Mean,
                axes: (0..rank).collect(),
                keepdims: false,
            };
            ctx.emit1(Op::Reduce(attrs), vec![Some(loss)])?
        }
    })
}

pub fn nll_loss(ctx: &mut NodeCtx) -> ImportResult {
    let red = reduction(ctx)?;
    let (input, target, weight) = (ctx.required(0)?, ctx.required(1)?, ctx.input(2));
    let y = nll(ctx, input, target, weight, red)?;
    ctx.bind_output(0, y);
    Ok(())
}

pub fn softmax_cross_entropy(ctx: &mut NodeCtx) -> ImportResult {
    let red = reduction(ctx)?;
    let (scores, labels, weights) = (ctx.required(0)?, ctx.required(1)?, ctx.input(2));
    if ctx.ty(scores).rank() < 2 {
        return Err("scores must have rank ≥ 2 (N, C, ...)".into());
    }
    let log_prob = ctx.emit1(Op::Softmax { axis: 1, log: true }, vec![Some(scores)])?;
    let y = nll(ctx, log_prob, labels, weights, red)?;
    ctx.bind_output(0, y);
    ctx.bind_output(1, log_prob);
    Ok(())
}
