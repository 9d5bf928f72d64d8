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
    let keepdims = ctx.attrs.flag("keepdims", true)?;
    let noop = ctx.attrs.flag("noop_with_empty_axes", false)?;
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
    if let Some(rows) = counted_axis(ctx, xv).filter(|a| axes.contains(a)) {
        return reduce_counted_rows(ctx, kind, xv, &axes, keepdims, rows);
    }
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

/// The axis of `v` whose rows the run counts (only unit axes before it), if any.
fn counted_axis(ctx: &NodeCtx, v: ValueId) -> Option<usize> {
    let e = ctx.run_extent(v)?;
    crate::ops::rows::row_axis(ctx.ty(v), e).filter(|_| !e.whole_shape)
}

/// A reduction over rows the run counts (along `rows`) and maybe other axes: the other
/// axes first, row by row, then the actual rows alone (their count input 1 of the
/// reduction), then the shape the node gives.
fn reduce_counted_rows(
    ctx: &mut NodeCtx,
    kind: ReduceKind,
    x: ValueId,
    axes: &[usize],
    keepdims: bool,
    rows: usize,
) -> ImportResult {
    let count = ctx.run_extent(x).expect("counted rows").count;
    let others: Vec<usize> = axes.iter().copied().filter(|&a| a != rows).collect();
    // How the reduction splits into one over the other axes and one over the rows.
    let (inner, outer) = match kind {
        ReduceKind::Max | ReduceKind::Min | ReduceKind::Sum | ReduceKind::Prod => (kind, kind),
        ReduceKind::L1 | ReduceKind::SumSquare => (kind, ReduceKind::Sum),
        ReduceKind::Mean | ReduceKind::L2 if others.is_empty() => (kind, kind),
        _ => {
            return Err(format!(
                "it reduces rows whose count only the run knows with {}, which nnc does only over those rows alone or for Max, Min, Sum, Prod, L1 and SumSquare",
                ctx.node.op_type
            )
            .into())
        }
    };
    let mut v = x;
    if !others.is_empty() {
        let op = Op::Reduce(ReduceAttrs {
            kind: inner,
            axes: others,
            keepdims: true,
        });
        v = ctx.emit1(op, vec![Some(v)])?;
    }
    let op = Op::Reduce(ReduceAttrs {
        kind: outer,
        axes: vec![rows],
        keepdims: true,
    });
    v = ctx.emit1(op, vec![Some(v), Some(count)])?;
    let shape = crate::ops::infer::reduced_shape(&ctx.ty(x).shape, axes, keepdims);
    let y = ctx.emit1(Op::Reshape { shape }, vec![Some(v)])?;
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
    let keepdims = ctx.attrs.flag("keepdims", true)?;
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
        keepdims: ctx.attrs.flag("keepdims", true)?,
        select_last_index: ctx.attrs.flag("select_last_index", false)?,
    };
    let y = ctx.emit1(Op::ArgReduce(attrs), vec![Some(ctx.required(0)?)])?;
    ctx.bind_output(0, y);
    Ok(())
}
