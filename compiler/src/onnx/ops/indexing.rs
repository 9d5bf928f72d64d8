//! Index-driven ONNX ops: GatherElements, GatherND, ScatterElements (and the legacy
//! Scatter), ScatterND, CumSum and TopK, each one core op.

use crate::onnx::attributes::normalize_axis;
use crate::onnx::import::{ImportError, ImportResult, NodeCtx};
use crate::ops::{Op, ScatterReduction};

fn reduction(ctx: &NodeCtx) -> ImportResult<ScatterReduction> {
    Ok(match ctx.attrs.string("reduction", "none")?.as_str() {
        "none" => ScatterReduction::None,
        "add" => ScatterReduction::Add,
        "mul" => ScatterReduction::Mul,
        "max" => ScatterReduction::Max,
        "min" => ScatterReduction::Min,
        other => return Err(format!("unknown reduction '{other}'").into()),
    })
}

pub fn gather_elements(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let axis = normalize_axis(ctx.attrs.int("axis", 0)?, x.rank())?;
    let ins = vec![Some(ctx.required(0)?), Some(ctx.required(1)?)];
    let y = ctx.emit1(Op::GatherElements { axis }, ins)?;
    ctx.bind_output(0, y);
    Ok(())
}

/// ScatterElements, and Scatter (opsets 9–10, the same op without reductions).
pub fn scatter_elements(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let axis = normalize_axis(ctx.attrs.int("axis", 0)?, x.rank())?;
    let op = Op::ScatterElements {
        axis,
        reduction: reduction(ctx)?,
    };
    let ins = vec![
        Some(ctx.required(0)?),
        Some(ctx.required(1)?),
        Some(ctx.required(2)?),
    ];
    let y = ctx.emit1(op, ins)?;
    ctx.bind_output(0, y);
    Ok(())
}

pub fn scatter_nd(ctx: &mut NodeCtx) -> ImportResult {
    let op = Op::ScatterND {
        reduction: reduction(ctx)?,
    };
    let ins = vec![
        Some(ctx.required(0)?),
        Some(ctx.required(1)?),
        Some(ctx.required(2)?),
    ];
    let y = ctx.emit1(op, ins)?;
    ctx.bind_output(0, y);
    Ok(())
}

pub fn gather_nd(ctx: &mut NodeCtx) -> ImportResult {
    let batch_dims = usize::try_from(ctx.attrs.int("batch_dims", 0)?)
        .map_err(|_| "batch_dims must be non-negative")?;
    let ins = vec![Some(ctx.required(0)?), Some(ctx.required(1)?)];
    let y = ctx.emit1(Op::GatherND { batch_dims }, ins)?;
    ctx.bind_output(0, y);
    Ok(())
}

pub fn cumsum(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let axis = ctx
        .const_input(1, "axis")?
        .ok_or("input 'axis' is required")?
        .to_i64_vec();
    let [axis] = axis[..] else {
        return Err("axis must hold one element".into());
    };
    let op = Op::CumSum {
        axis: normalize_axis(axis, x.rank())?,
        exclusive: ctx.attrs.int("exclusive", 0)? != 0,
        reverse: ctx.attrs.int("reverse", 0)? != 0,
    };
    let y = ctx.emit1(op, vec![Some(ctx.required(0)?)])?;
    ctx.bind_output(0, y);
    Ok(())
}

/// TopK: `k` from the attribute before opset 10, a constant input after. The outputs
/// are always sorted (`sorted = 0` leaves the order unspecified).
pub fn top_k(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let k = if ctx.opset() < 10 {
        ctx.attrs.int_opt("k")?.ok_or("attribute 'k' is required")?
    } else {
        match ctx
            .const_input(1, "K")?
            .ok_or("input 'K' is required")?
            .to_i64_vec()[..]
        {
            [k] => k,
            _ => return Err("K must hold one element".into()),
        }
    };
    let axis = normalize_axis(ctx.attrs.int("axis", -1)?, x.rank())?;
    let k = usize::try_from(k)
        .ok()
        .filter(|&k| k <= x.shape[axis])
        .ok_or_else(|| {
            ImportError::Invalid(format!("k = {k} must be in [0, {}]", x.shape[axis]))
        })?;
    let largest = ctx.attrs.int("largest", 1)? != 0;
    let outs = ctx.emit(
        Op::TopK { axis, k, largest },
        vec![Some(ctx.required(0)?)],
        2,
    )?;
    ctx.bind_outputs(&outs);
    Ok(())
}
