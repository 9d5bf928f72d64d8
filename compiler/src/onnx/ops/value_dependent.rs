//! Ops whose output extent depends on the values of their inputs: NonZero, Compress,
//! Unique and NonMaxSuppression. Each becomes one core op typed at the largest extent
//! its input shapes allow (see [`crate::ops::Op::counted_outputs`]); a Compress whose
//! condition is constant is a Gather of the kept indices, of static shape.

use crate::ir::{DType, Tensor, ValueId};
use crate::onnx::attributes::normalize_axis;
use crate::onnx::import::{ImportError, ImportResult, NodeCtx};
use crate::ops::Op;

/// Emits `op` and binds its ONNX outputs (the extent output is the IR's own).
fn emit_counted(ctx: &mut NodeCtx, op: Op, onnx_outputs: usize) -> ImportResult {
    let count = op.counted_outputs().map_or(0, |c| c.outputs());
    let inputs = ctx.inputs.clone();
    let outs = ctx.emit(op, inputs, count)?;
    ctx.bind_outputs(&outs[..onnx_outputs]);
    Ok(())
}

pub fn non_zero(ctx: &mut NodeCtx) -> ImportResult {
    ctx.required(0)?;
    emit_counted(ctx, Op::NonZero { transposed: false }, 1)
}

pub fn compress(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let cond = ctx.required(1)?;
    let axis = match ctx.attrs.int_opt("axis")? {
        Some(a) => Some(normalize_axis(a, x.rank())?),
        None => None,
    };
    if let Some(c) = ctx.constant(cond) {
        let kept: Vec<i64> = (c.to_i64_vec().iter().enumerate())
            .filter(|(_, &v)| v != 0)
            .map(|(i, _)| i as i64)
            .filter(|&i| (i as usize) < axis.map_or(x.numel(), |a| x.shape[a]))
            .collect();
        let indices = ctx.constant_value(
            &format!("{}:kept", ctx.name),
            Tensor::from_vec(&[kept.len()], kept),
        );
        let mut source = ctx.required(0)?;
        if axis.is_none() {
            source = ctx.emit1(
                Op::Reshape {
                    shape: vec![x.numel()],
                },
                vec![Some(source)],
            )?;
        }
        let out = ctx.emit1(
            Op::Gather {
                axis: axis.unwrap_or(0),
            },
            vec![Some(source), Some(indices)],
        )?;
        ctx.bind_output(0, out);
        return Ok(());
    }
    emit_counted(ctx, Op::Compress { axis }, 1)
}

pub fn unique(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    if x.dtype == DType::Bool || !(x.dtype.is_float() || x.dtype.is_int()) {
        return Err(ImportError::Unsupported(format!(
            "Unique of {} is not supported",
            x.dtype
        )));
    }
    let axis = match ctx.attrs.int_opt("axis")? {
        Some(a) => Some(normalize_axis(a, x.rank())?),
        None => None,
    };
    let sorted = ctx.attrs.flag("sorted", true)?;
    emit_counted(ctx, Op::Unique { axis, sorted }, 4)
}

pub fn non_max_suppression(ctx: &mut NodeCtx) -> ImportResult {
    let boxes = ctx.input_ty(0)?;
    let scores = ctx.input_ty(1)?;
    if !boxes.dtype.is_float() || scores.dtype != boxes.dtype || boxes.dtype != DType::F32 {
        return Err(ImportError::Unsupported(format!(
            "NonMaxSuppression of {} boxes and {} scores: nnc supports float32",
            boxes.dtype, scores.dtype
        )));
    }
    for (i, what, dtype) in [
        (2, "max_output_boxes_per_class", DType::I64),
        (3, "iou_threshold", DType::F32),
        (4, "score_threshold", DType::F32),
    ] {
        if let Some(v) = ctx.input(i) {
            let t = ctx.ty(v);
            if t.dtype != dtype || t.numel() != 1 || t.rank() > 1 {
                return Err(format!("{what} must be one {dtype}, not {t}").into());
            }
        }
    }
    let center_point_box = match ctx.attrs.int("center_point_box", 0)? {
        0 => false,
        1 => true,
        c => return Err(format!("center_point_box must be 0 or 1, not {c}").into()),
    };
    let boxes_per_batch = boxes.shape.get(1).copied().unwrap_or(0);
    // A constant max_output bounds the output tighter than the box count.
    let per_class = match ctx.input(2).and_then(|v| ctx.constant(v)) {
        Some(t) => {
            let m = t.to_i64_vec().first().copied().unwrap_or(0).max(0);
            boxes_per_batch.min(usize::try_from(m).unwrap_or(usize::MAX))
        }
        None if ctx.input(2).is_none() => 0,
        None => boxes_per_batch,
    };
    let op = Op::NonMaxSuppression {
        center_point_box,
        per_class,
    };
    match counted_boxes(ctx)? {
        None => emit_counted(ctx, op, 1),
        Some(count) => {
            // The boxes the run has: their count input 5.
            let mut inputs = ctx.inputs.clone();
            inputs.resize(5, None);
            inputs.push(Some(count));
            let outs = ctx.emit(op, inputs, 2)?;
            ctx.bind_outputs(&outs[..1]);
            Ok(())
        }
    }
}

/// The run's count of NonMaxSuppression's boxes, when only the run knows it (kept
/// candidates of one batch): the boxes' axis 1 and the scores' axis 2, of one count.
fn counted_boxes(ctx: &NodeCtx) -> ImportResult<Option<ValueId>> {
    let (boxes, scores) = (ctx.required(0)?, ctx.required(1)?);
    let (eb, es) = (ctx.run_extent(boxes), ctx.run_extent(scores));
    if eb.is_none() && es.is_none() {
        return Ok(None);
    }
    let rows = |v: ValueId, e: Option<&crate::ir::RunExtent>| {
        e.filter(|e| !e.whole_shape)
            .and_then(|e| crate::ops::rows::row_axis(ctx.ty(v), e).map(|a| (a, e.count)))
    };
    match (rows(boxes, eb), rows(scores, es)) {
        (Some((1, b)), Some((2, s))) if b == s => Ok(Some(b)),
        _ => Err(ImportError::Unsupported(format!(
            "its boxes ('{}' {}) and scores ('{}' {}) vary at run time; nnc needs one batch and one class, the boxes counted on axis 1 and the scores on axis 2 by one count",
            ctx.value_name(boxes),
            ctx.ty(boxes),
            ctx.value_name(scores),
            ctx.ty(scores)
        ))),
    }
}
