//! Index-driven ONNX ops: GatherElements, GatherND, ScatterElements (and the legacy
//! Scatter), ScatterND, CumSum and TopK, each one core op; TensorScatter as
//! ScatterElements.

use crate::ir::{DType, Tensor};
use crate::onnx::attributes::normalize_axis;
use crate::onnx::import::{ImportError, ImportResult, NodeCtx};
use crate::ops::{BinaryOp, Op, ScatterReduction};

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
        product: ctx.node.op_type == "CumProd",
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

/// TensorScatter (opset 24, KV-cache updates): `update` is written into `past_cache`
/// along `axis` starting at `write_indices[b]` for batch `b` (modulo the axis length in
/// circular mode). That is ScatterElements with indices `write_indices[b] + s`.
pub fn tensor_scatter(ctx: &mut NodeCtx) -> ImportResult {
    let cache = ctx.input_ty(0)?;
    let update = ctx.input_ty(1)?;
    let r = cache.rank();
    let axis = normalize_axis(ctx.attrs.int("axis", -2)?, r)?;
    let circular = match ctx.attrs.string("mode", "linear")?.as_str() {
        "linear" => false,
        "circular" => true,
        m => return Err(format!("unknown mode '{m}'").into()),
    };
    let compatible = update.rank() == r
        && (0..r).all(|d| {
            if d == axis {
                update.shape[d] <= cache.shape[d]
            } else {
                update.shape[d] == cache.shape[d]
            }
        });
    if axis == 0 || !compatible {
        return Err(format!("cannot scatter {update} into {cache} along axis {axis}").into());
    }
    let batch = cache.shape[0];
    let starts = match ctx.input(2) {
        Some(w) => w,
        None => ctx.constant_value(
            "write_indices",
            Tensor::from_vec(&[batch], vec![0i64; batch]),
        ),
    };
    let starts = ctx.emit1(Op::Cast { to: DType::I64 }, vec![Some(starts)])?;
    let mut per_batch = vec![1; r];
    per_batch[0] = batch;
    let starts = ctx.emit1(Op::Reshape { shape: per_batch }, vec![Some(starts)])?;
    let len = update.shape[axis];
    let mut along = vec![len];
    along.resize(r - axis, 1);
    let offsets = Tensor::from_vec(&along, (0..len as i64).collect::<Vec<i64>>());
    let offsets = ctx.constant_value("offsets", offsets);
    let mut pos = ctx.emit1(Op::Binary(BinaryOp::Add), vec![Some(starts), Some(offsets)])?;
    if circular {
        let max = ctx.constant_value(
            "max_sequence_length",
            Tensor::scalar(cache.shape[axis] as i64),
        );
        pos = ctx.emit1(
            Op::Binary(BinaryOp::Mod { fmod: false }),
            vec![Some(pos), Some(max)],
        )?;
    }
    let idx = ctx.emit1(
        Op::Expand {
            shape: update.shape.clone(),
        },
        vec![Some(pos)],
    )?;
    let op = Op::ScatterElements {
        axis,
        reduction: ScatterReduction::None,
    };
    let y = ctx.emit1(
        op,
        vec![Some(ctx.required(0)?), Some(idx), Some(ctx.required(1)?)],
    )?;
    ctx.bind_output(0, y);
    Ok(())
}
