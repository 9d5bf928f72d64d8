//! Reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare, ArgMax/ArgMin.

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
    let axes = if axes_from_input {
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
