//! Reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare, ArgMax/ArgMin.

use crate::ir::ValueId;
use crate::onnx::attributes::normalize_axis;
use crate::onnx::import::{ImportResult, NodeCtx};
use crate::ops::{ArgReduceAttrs, Op, ReduceAttrs, ReduceKind, UnaryOp};

pub fn reduce(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let kind = match ctx.node.op_type.as_str() {
        "ReduceSum" => ReduceKind::Sum,
        "ReduceMean" => ReduceKind::Mean,
        "ReduceMax" => ReduceKind::Max,
        "ReduceMin" => ReduceKind::Min,
        "ReduceProd" => ReduceKind::Prod,
        "ReduceL1" => ReduceKind::L1,
        "ReduceL2" => ReduceKind::L2,
        "ReduceLogSum" => ReduceKind::LogSum,
        "ReduceLogSumExp" => ReduceKind::LogSumExp,
        "ReduceSumSquare" => ReduceKind::SumSquare,
        other => unreachable!("registered for reductions only, got {other}"),
    };
    // ReduceSum took axes as an input from opset 13, the others from opset 18.
    let axes_from_input = if kind == ReduceKind::Sum {
        ctx.opset() >= 13
    } else {
        ctx.opset() >= 18
    };
    let run_time_axes = ctx
        .input(1)
        .filter(|v| axes_from_input && ctx.constant(*v).is_none());
    if let Some(axes) = run_time_axes.filter(|v| ctx.ty(*v).numel() > 0) {
        return reduce_over_run_time_axes(ctx, kind, axes);
    }
    let axes = if axes_from_input && run_time_axes.is_some() {
        Some(vec![]) // no axes: the values do not matter
    } else if axes_from_input {
        ctx.const_input(1, "axes")?.map(|t| t.to_i64_vec())
    } else {
        ctx.attrs.ints_opt("axes")?
    };
    let keepdims = ctx.attrs.int("keepdims", 1)? != 0;
    let noop = ctx.attrs.int("noop_with_empty_axes", 0)? != 0;
    let xv = ctx.required(0)?;
    let mut axes: Vec<usize> = match axes {
        Some(a) if !a.is_empty() => a
            .iter()
            .map(|&a| normalize_axis(a, x.rank()))
            .collect::<Result<_, _>>()?,
        _ if noop => {
            let y = ctx.emit1(Op::Unary(UnaryOp::Identity), vec![Some(xv)])?;
            ctx.bind_output(0, y);
            return Ok(());
        }
        _ => (0..x.rank()).collect(),
    };
    axes.sort_unstable();
    axes.dedup();
    let y = ctx.emit1(
        Op::Reduce(ReduceAttrs {
            kind,
            axes,
            keepdims,
        }),
        vec![Some(xv)],
    )?;
    ctx.bind_output(0, y);
    Ok(())
}

/// A reduction whose axes are read at run time: its output shape depends on them, so it
/// is planned at the largest and reported with the run (see `Op::ReduceRunTimeAxes`).
fn reduce_over_run_time_axes(ctx: &mut NodeCtx, kind: ReduceKind, axes: ValueId) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let at = ctx.ty(axes).clone();
    if at.rank() != 1 || !at.dtype.is_int() {
        return Err(format!("axes must be a 1-D integer tensor, not {at}").into());
    }
    let keepdims = ctx.attrs.int("keepdims", 1)? != 0;
    let count = at.numel();
    let shapes: Vec<Vec<usize>> = crate::ops::infer::axis_sets(x.rank(), count)
        .iter()
        .map(|set| crate::ops::infer::reduced_shape(&x.shape, set, keepdims))
        .collect();
    if shapes.is_empty() {
        return Err(format!("{count} distinct axes do not fit rank {}", x.rank()).into());
    }
    let varying = crate::ops::infer::varying_axes(shapes.iter().map(Vec::as_slice));
    let op = Op::ReduceRunTimeAxes {
        kind,
        keepdims,
        count,
        varying,
    };
    let outs = ctx.emit(op, vec![Some(ctx.required(0)?), Some(axes)], 2)?;
    ctx.bind_output(0, outs[0]);
    Ok(())
}

pub fn arg_reduce(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let attrs = ArgReduceAttrs {
        max: ctx.node.op_type == "ArgMax",
        axis: normalize_axis(ctx.attrs.int("axis", 0)?, x.rank())?,
        keepdims: ctx.attrs.int("keepdims", 1)? != 0,
        select_last_index: ctx.attrs.int("select_last_index", 0)? != 0,
    };
    let y = ctx.emit1(Op::ArgReduce(attrs), vec![Some(ctx.required(0)?)])?;
    ctx.bind_output(0, y);
    Ok(())
}
