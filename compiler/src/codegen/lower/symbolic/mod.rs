//! Lowering of nodes whose operands have axes the run sets (symbolic shapes, see
//! [`crate::ir::dim`]): each op family loops over extents computed from the dims at
//! the node's start ([`super::run_shape`]). A family without a symbolic form is
//! refused naming the axis and its expression.

pub(super) mod elementwise;
mod indexing;
mod linalg;
mod movement;
mod resize;

use cranelift_codegen::ir::InstBuilder;

use super::run_shape::Ext;
use super::{LowerCtx, LowerResult};
use crate::codegen::kernel::flags;
use crate::ops::Op;

/// Whether any operand of the node being lowered has a symbolic axis.
pub fn is_symbolic(ctx: &LowerCtx) -> bool {
    ctx.inputs
        .iter()
        .flatten()
        .chain(&ctx.outputs)
        .any(|o| o.ty.dims.is_some())
}

pub fn lower(ctx: &mut LowerCtx, op: &Op) -> LowerResult {
    if let crate::codegen::plan::Strategy::Planes(_) = ctx.kernel.strategy {
        return super::planes::lower_planes(ctx, op);
    }
    match op {
        // Their loop nests (`elementwise::map`) go symbolic by themselves.
        Op::Unary(_) | Op::Binary(_) | Op::Where | Op::Cast { .. } => super::lower_node(ctx, op),
        Op::Reshape { .. } | Op::BitCast { .. } => movement::copy(ctx),
        Op::Transpose { perm } => movement::transpose(ctx, perm),
        Op::Slice { starts, steps, .. } => movement::slice(ctx, starts, steps),
        Op::Expand { .. } => movement::expand(ctx),
        Op::Concat { axis } => movement::concat(ctx, *axis),
        Op::Gather { axis } => movement::gather(ctx, *axis),
        Op::GatherElements { axis } => indexing::gather_elements(ctx, *axis),
        Op::GatherND { batch_dims } => indexing::gather_nd(ctx, *batch_dims),
        Op::CumSum {
            axis,
            exclusive,
            reverse,
            product,
        } => indexing::cumsum(ctx, *axis, *exclusive, *reverse, *product),
        Op::Reduce(r) if ctx.inputs.len() == 1 => super::reduce::reduce_run(ctx, r),
        Op::RnnSequence { cell, reverse } => {
            // The steps (axis 0 of the input projections) are the run's; the rest of
            // every operand must be fixed.
            let xw = ctx.input(0)?;
            let fixed_after_steps = |ty: &crate::ir::TensorType| {
                ty.dims
                    .as_ref()
                    .is_none_or(|d| d.iter().skip(1).all(|d| d.is_const()))
            };
            let others_fixed = (ctx.inputs.iter().flatten().skip(1))
                .chain(ctx.outputs.iter().skip(1))
                .all(|o| o.ty.dims.is_none());
            if !fixed_after_steps(&xw.ty) || !fixed_after_steps(&ctx.outputs[0].ty) || !others_fixed
            {
                return Err(refusal(ctx));
            }
            let dims = ctx.run_dims.as_ref().expect("symbolic");
            let steps = dims.extent(ctx.b, &xw.ty.dim(0)).value(ctx.b);
            ctx.run_rows = Some(super::RunRows {
                count: steps,
                bound: xw.ty.shape[0],
            });
            super::recurrence::rnn_sequence(ctx, *cell, reverse)
        }
        Op::Resize(r) => resize::resize(ctx, r),
        Op::MatMul(m) => linalg::matmul(ctx, m),
        Op::Gemm(g) => linalg::gemm_op(ctx, g),
        Op::Softmax { axis, log } => {
            let (rows, n) = rows_around(ctx, *axis, 1)?;
            super::norm::softmax_rows(ctx, *log, rows, n)
        }
        Op::LayerNorm { axis, epsilon } => {
            let (rows, _) = rows_around(ctx, *axis, 0)?;
            super::norm::layer_norm_rows(ctx, *axis, *epsilon, rows)
        }
        Op::DimValues { values, .. } => {
            let y = ctx.output(0);
            let dims = ctx.run_dims.as_ref().expect("symbolic");
            for (i, d) in values.iter().enumerate() {
                let v = dims.extent(ctx.b, d).value(ctx.b);
                ctx.b.ins().store(flags(), v, y.ptr, (8 * i) as i32);
            }
            Ok(())
        }
        _ => Err(refusal(ctx)),
    }
}

/// Input 0 as `[rows, n, …]` around `axis`: the rows before it and the axis' extent,
/// refused unless the axes after `axis + keep` have fixed extents (a row is then
/// contiguous and of a size the row code takes).
fn rows_around(ctx: &mut LowerCtx, axis: usize, keep: usize) -> Result<(Ext, Ext), String> {
    let x = ctx.input(0)?;
    let dims = ctx.run_dims.as_ref().expect("symbolic");
    let shape = dims.shape(ctx.b, &x.ty);
    if axis >= shape.len() {
        return Err(format!(
            "axis {axis} is out of range for rank {}",
            shape.len()
        ));
    }
    let tail_fixed = shape[axis + keep..].iter().all(|e| e.fixed().is_some());
    let tail_unit = shape[axis + 1..].iter().all(|e| e.is_fixed(1));
    if !tail_fixed || (keep == 1 && !tail_unit) {
        return Err(format!(
            "the rows from axis {axis} on must have fixed extents ({} has {})",
            x.ty,
            axes_text(ctx, &x.ty)
        ));
    }
    let rows = Ext::product(ctx.b, &shape[..axis]);
    Ok((rows, shape[axis]))
}

fn axes_text(ctx: &LowerCtx, ty: &crate::ir::TensorType) -> String {
    let dims = ctx.run_dims.as_ref().expect("symbolic");
    match &ty.dims {
        Some(d) => format!(
            "[{}]",
            d.iter()
                .map(|d| dims.written(d))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => format!("{:?}", ty.shape),
    }
}

/// The refusal of a node whose family has no symbolic form: its first symbolic axis.
fn refusal(ctx: &LowerCtx) -> String {
    let dims = ctx.run_dims.as_ref().expect("symbolic");
    let operands = ctx
        .inputs
        .iter()
        .enumerate()
        .filter_map(|(i, o)| o.as_ref().map(|o| (format!("input {i}"), o)))
        .chain(
            ctx.outputs
                .iter()
                .enumerate()
                .map(|(i, o)| (format!("output {i}"), o)),
        );
    for (what, o) in operands {
        if let Some((axis, d)) = o.ty.first_symbolic_axis() {
            return format!(
                "this op cannot run yet with extents only the run knows: axis {axis} of {what} is {}",
                dims.written(d)
            );
        }
    }
    "this op has no symbolic form yet".into()
}
