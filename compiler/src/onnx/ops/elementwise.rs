//! Elementwise ONNX ops: activations and math (unary), arithmetic, comparison and logic
//! (binary), the variadic Sum/Mean/Max/Min, Where and Cast.

use crate::ir::{DType, Tensor, ValueId};
use crate::onnx::attributes::normalize_axis;
use crate::onnx::import::{ImportError, ImportResult, NodeCtx};
use crate::ops::{BinaryOp, Op, UnaryOp};

pub fn unary(ctx: &mut NodeCtx) -> ImportResult {
    if ctx.node.op_type == "Clip" && ctx.opset() >= 11 && runtime_clip_bounds(ctx) {
        return clip_with_runtime_bounds(ctx);
    }
    let a = &ctx.attrs;
    let op = match ctx.node.op_type.as_str() {
        "Identity" => UnaryOp::Identity,
        "Relu" => UnaryOp::Relu,
        "LeakyRelu" => UnaryOp::LeakyRelu {
            alpha: a.float("alpha", 0.01)?,
        },
        "Sigmoid" => UnaryOp::Sigmoid,
        "HardSigmoid" => UnaryOp::HardSigmoid {
            alpha: a.float("alpha", 0.2)?,
            beta: a.float("beta", 0.5)?,
        },
        "HardSwish" => UnaryOp::HardSwish,
        "Tanh" => UnaryOp::Tanh,
        "Exp" => UnaryOp::Exp,
        "Log" => UnaryOp::Log,
        "Sqrt" => UnaryOp::Sqrt,
        "Reciprocal" => UnaryOp::Reciprocal,
        "Neg" => UnaryOp::Neg,
        "Abs" => UnaryOp::Abs,
        "Erf" => UnaryOp::Erf,
        "Gelu" => UnaryOp::Gelu {
            tanh: match a.string("approximate", "none")?.as_str() {
                "none" => false,
                "tanh" => true,
                other => {
                    return Err(format!(
                        "attribute 'approximate' must be 'none' or 'tanh', not '{other}'"
                    )
                    .into())
                }
            },
        },
        "Softplus" => UnaryOp::Softplus,
        "Softsign" => UnaryOp::Softsign,
        "Elu" => UnaryOp::Elu {
            alpha: a.float("alpha", 1.0)?,
        },
        "Selu" => UnaryOp::Selu {
            alpha: a.float("alpha", 1.673_263_2)?,
            gamma: a.float("gamma", 1.050_701)?,
        },
        "Celu" => UnaryOp::Celu {
            alpha: a.float("alpha", 1.0)?,
        },
        "ThresholdedRelu" => UnaryOp::ThresholdedRelu {
            alpha: a.float("alpha", 1.0)?,
        },
        "Mish" => UnaryOp::Mish,
        "Floor" => UnaryOp::Floor,
        "Ceil" => UnaryOp::Ceil,
        "Round" => UnaryOp::Round,
        "Sign" => UnaryOp::Sign,
        "Sin" => UnaryOp::Sin,
        "Cos" => UnaryOp::Cos,
        "Tan" => UnaryOp::Tan,
        "Asin" => UnaryOp::Asin,
        "Acos" => UnaryOp::Acos,
        "Atan" => UnaryOp::Atan,
        "Sinh" => UnaryOp::Sinh,
        "Cosh" => UnaryOp::Cosh,
        "Asinh" => UnaryOp::Asinh,
        "Acosh" => UnaryOp::Acosh,
        "Atanh" => UnaryOp::Atanh,
        "Not" => UnaryOp::Not,
        "BitwiseNot" => UnaryOp::BitwiseNot,
        "IsNaN" => UnaryOp::IsNaN,
        "IsInf" => UnaryOp::IsInf {
            positive: a.flag("detect_positive", true)?,
            negative: a.flag("detect_negative", true)?,
        },
        "Clip" => clip_bounds(ctx)?,
        other => {
            return Err(ImportError::Unsupported(format!(
                "no unary mapping for {other}"
            )))
        }
    };
    let x = ctx.required(0)?;
    let y = ctx.emit1(Op::Unary(op), vec![Some(x)])?;
    ctx.bind_output(0, y);
    Ok(())
}

/// Clip's bounds: attributes before opset 11, optional constant inputs after.
/// True when a Clip bound is an input computed at run time.
fn runtime_clip_bounds(ctx: &NodeCtx) -> bool {
    [1, 2]
        .iter()
        .any(|&i| ctx.input(i).is_some_and(|v| ctx.constant(v).is_none()))
}

/// Clip with bounds known only at run time: `min(max(x, lo), hi)`, as the spec
/// defines it (so min > max yields max).
fn clip_with_runtime_bounds(ctx: &mut NodeCtx) -> ImportResult {
    let mut y = ctx.required(0)?;
    if let Some(lo) = ctx.input(1) {
        y = ctx.emit1(Op::Binary(BinaryOp::Max), vec![Some(y), Some(lo)])?;
    }
    if let Some(hi) = ctx.input(2) {
        y = ctx.emit1(Op::Binary(BinaryOp::Min), vec![Some(y), Some(hi)])?;
    }
    ctx.bind_output(0, y);
    Ok(())
}

fn clip_bounds(ctx: &NodeCtx) -> ImportResult<UnaryOp> {
    if ctx.opset() < 11 {
        let min = ctx.attrs.float("min", f32::NEG_INFINITY)? as f64;
        let max = ctx.attrs.float("max", f32::INFINITY)? as f64;
        return Ok(UnaryOp::Clip { min, max });
    }
    let bound = |i: usize, default: f64| -> ImportResult<f64> {
        Ok(match ctx.const_input(i, "clip bound")? {
            Some(t) if t.len() == 1 => t.to_f64_vec()[0],
            Some(_) => return Err("clip bounds must be scalars".into()),
            None => default,
        })
    };
    Ok(UnaryOp::Clip {
        min: bound(1, f64::NEG_INFINITY)?,
        max: bound(2, f64::INFINITY)?,
    })
}

pub fn binary_op(op_type: &str, ctx: &NodeCtx) -> ImportResult<BinaryOp> {
    Ok(match op_type {
        "Add" => BinaryOp::Add,
        "Sub" => BinaryOp::Sub,
        "Mul" => BinaryOp::Mul,
        "Div" => BinaryOp::Div,
        "Pow" => BinaryOp::Pow,
        "Max" => BinaryOp::Max,
        "Min" => BinaryOp::Min,
        "Mod" => BinaryOp::Mod {
            fmod: ctx.attrs.flag("fmod", false)?,
        },
        "PRelu" => BinaryOp::PRelu,
        "Equal" => BinaryOp::Equal,
        "Less" => BinaryOp::Less,
        "LessOrEqual" => BinaryOp::LessOrEqual,
        "Greater" => BinaryOp::Greater,
        "GreaterOrEqual" => BinaryOp::GreaterOrEqual,
        "And" => BinaryOp::And,
        "Or" => BinaryOp::Or,
        "Xor" => BinaryOp::Xor,
        "BitShift" => match ctx.attrs.string("direction", "")?.as_str() {
            "LEFT" => BinaryOp::BitShiftLeft,
            "RIGHT" => BinaryOp::BitShiftRight,
            d => {
                return Err(
                    format!("attribute 'direction' must be LEFT or RIGHT, not '{d}'").into(),
                )
            }
        },
        "BitwiseAnd" => BinaryOp::BitwiseAnd,
        "BitwiseOr" => BinaryOp::BitwiseOr,
        "BitwiseXor" => BinaryOp::BitwiseXor,
        other => {
            return Err(ImportError::Unsupported(format!(
                "no binary mapping for {other}"
            )))
        }
    })
}

pub fn binary(ctx: &mut NodeCtx) -> ImportResult {
    let op = binary_op(&ctx.node.op_type.clone(), ctx)?;
    let (a, mut b) = (ctx.required(0)?, ctx.required(1)?);
    if ctx.opset() < 7 {
        b = legacy_broadcast(ctx, op, a, b)?;
    }
    let y = ctx.emit1(Op::Binary(op), vec![Some(a), Some(b)])?;
    ctx.bind_output(0, y);
    Ok(())
}

/// B reshaped so numpy broadcasting gives what opset < 7 meant. Arithmetic with
/// `broadcast = 1` aligns B with A's axes from `axis` on (by default, A's trailing
/// axes: numpy's rule already); PRelu's slope applies per channel (axis 1) unless it
/// has one element.
fn legacy_broadcast(
    ctx: &mut NodeCtx,
    op: BinaryOp,
    a: ValueId,
    b: ValueId,
) -> ImportResult<ValueId> {
    let (ra, bt) = (ctx.ty(a).rank(), ctx.ty(b).clone());
    let start = if op == BinaryOp::PRelu {
        (bt.numel() > 1 && bt.rank() == 1 && ra >= 2 && bt.shape != ctx.ty(a).shape[ra - 1..])
            .then_some(1)
    } else if ctx.attrs.flag("broadcast", false)? {
        match ctx.attrs.int_opt("axis")? {
            Some(axis) => Some(normalize_axis(axis, ra)?),
            None => None,
        }
    } else {
        None
    };
    let Some(start) = start else {
        return Ok(b);
    };
    if start + bt.rank() > ra {
        return Err(format!(
            "B {:?} does not fit A's rank {ra} from axis {start}",
            bt.shape
        )
        .into());
    }
    let mut shape = vec![1; start];
    shape.extend(&bt.shape);
    shape.resize(ra, 1);
    ctx.emit1(Op::Reshape { shape }, vec![Some(b)])
}

/// Sum, Mean, Max, Min over any number of inputs: a left fold of binary ops.
pub fn variadic(ctx: &mut NodeCtx) -> ImportResult {
    let op_type = ctx.node.op_type.clone();
    let op = match op_type.as_str() {
        "Sum" | "Mean" => BinaryOp::Add,
        "Max" => BinaryOp::Max,
        "Min" => BinaryOp::Min,
        _ => unreachable!("registered for Sum/Mean/Max/Min only"),
    };
    let inputs: Vec<_> = ctx.inputs.iter().flatten().copied().collect();
    let Some((&first, rest)) = inputs.split_first() else {
        return Err("needs at least one input".into());
    };
    let mut acc = first;
    if rest.is_empty() {
        acc = ctx.emit1(Op::Unary(UnaryOp::Identity), vec![Some(first)])?;
    }
    for &v in rest {
        acc = ctx.emit1(Op::Binary(op), vec![Some(acc), Some(v)])?;
    }
    if op_type == "Mean" {
        let dtype = ctx.ty(acc).dtype;
        let n = scalar_of(dtype, inputs.len() as f64);
        let n = ctx.constant_value("mean_count", n);
        acc = ctx.emit1(Op::Binary(BinaryOp::Div), vec![Some(acc), Some(n)])?;
    }
    ctx.bind_output(0, acc);
    Ok(())
}

/// A rank-0 constant of `dtype` holding `v`.
/// BitCast (opset 26): the bits of each element read as `to`, a type of the same width.
pub fn bit_cast(ctx: &mut NodeCtx) -> ImportResult {
    let code = ctx
        .attrs
        .int_opt("to")?
        .ok_or("attribute 'to' is required")?;
    let to = DType::from_onnx(code as i32)
        .ok_or_else(|| ImportError::Unsupported(format!("BitCast to data type {code}")))?;
    let y = ctx.emit1(Op::BitCast { to }, vec![Some(ctx.required(0)?)])?;
    ctx.bind_output(0, y);
    Ok(())
}

pub fn scalar_of(dtype: DType, v: f64) -> Tensor {
    Tensor::scalar(v).cast(dtype)
}

pub fn where_op(ctx: &mut NodeCtx) -> ImportResult {
    let ins = vec![
        Some(ctx.required(0)?),
        Some(ctx.required(1)?),
        Some(ctx.required(2)?),
    ];
    let y = ctx.emit1(Op::Where, ins)?;
    ctx.bind_output(0, y);
    Ok(())
}

pub fn cast(ctx: &mut NodeCtx) -> ImportResult {
    let to = if ctx.node.op_type == "CastLike" {
        ctx.input_ty(1)?.dtype
    } else {
        let code = ctx
            .attrs
            .int_opt("to")?
            .ok_or("attribute 'to' is required")?;
        DType::from_onnx(code as i32)
            .ok_or_else(|| ImportError::Unsupported(format!("cast to data type {code}")))?
    };
    let x = ctx.required(0)?;
    let y = if super::low_precision::involves(&[ctx.ty(x).dtype, to]) {
        super::low_precision::cast(ctx, x, to)?
    } else {
        ctx.emit1(Op::Cast { to }, vec![Some(x)])?
    };
    ctx.bind_output(0, y);
    Ok(())
}
