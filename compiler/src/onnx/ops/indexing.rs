//! Index-driven ONNX ops: GatherElements, GatherND, ScatterElements (and the legacy
//! Scatter), ScatterND, CumSum and TopK, each one core op; TensorScatter as
//! ScatterElements; ReverseSequence as GatherElements and MaxUnpool as ScatterElements.

use crate::ir::{DType, Tensor, ValueId};
use crate::onnx::attributes::{axis_and_dim, normalize_axis};
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
    let axis_input = ctx.required(1)?;
    let exclusive = ctx.attrs.flag("exclusive", false)?;
    let reverse = ctx.attrs.flag("reverse", false)?;
    let product = ctx.node.op_type == "CumProd";
    let op_along = move |axis: usize| -> ImportResult<Op> {
        Ok(Op::CumSum {
            axis,
            exclusive,
            reverse,
            product,
        })
    };
    if ctx.constant(axis_input).is_none() && x.rank() > 0 {
        let y = cumsum_along_run_time_axis(ctx, axis_input, &op_along)?;
        ctx.bind_output(0, y);
        return Ok(());
    }
    let axis = ctx
        .const_input(1, "axis")?
        .ok_or("input 'axis' is required")?
        .to_i64_vec();
    let [axis] = axis[..] else {
        return Err("axis must hold one element".into());
    };
    let op = op_along(normalize_axis(axis, x.rank())?)?;
    let y = ctx.emit1(op, vec![Some(ctx.required(0)?)])?;
    ctx.bind_output(0, y);
    Ok(())
}

/// CumSum over an axis given at run time: the sum along every axis, the one the value
/// names selected. The value is normalized by a Gather from `[0, rank)`, so one outside
/// `[-rank, rank)` is reported as NNC_ERR_INDEX_OUT_OF_RANGE.
fn cumsum_along_run_time_axis(
    ctx: &mut NodeCtx,
    axis: ValueId,
    op_along: &dyn Fn(usize) -> ImportResult<Op>,
) -> ImportResult<ValueId> {
    let x = ctx.input_ty(0)?;
    let at = ctx.ty(axis).clone();
    if !at.dtype.is_int() || at.numel() != 1 {
        return Err(format!("axis must hold one integer, not {at}").into());
    }
    let r = x.rank();
    let axes = ctx.constant_value(
        "cumsum_axes",
        Tensor::from_vec(&[r], (0..r as i64).collect::<Vec<i64>>()),
    );
    let index = if at.rank() == 0 {
        axis
    } else {
        ctx.emit1(Op::Reshape { shape: vec![] }, vec![Some(axis)])?
    };
    let axis = ctx.emit1(Op::Gather { axis: 0 }, vec![Some(axes), Some(index)])?;
    let xv = ctx.required(0)?;
    let sums: Vec<ValueId> = (0..r)
        .map(|a| ctx.emit1(op_along(a)?, vec![Some(xv)]))
        .collect::<ImportResult<_>>()?;
    // Selected from the last axis back; with one axis the selection still reads the
    // normalized value, so that its range is checked.
    let mut y = sums[r - 1];
    let picks: Vec<usize> = if r == 1 {
        vec![0]
    } else {
        (0..r - 1).rev().collect()
    };
    for a in picks {
        let a_const = ctx.constant_value("cumsum_axis", Tensor::scalar(a as i64));
        let is_a = ctx.emit1(Op::Binary(BinaryOp::Equal), vec![Some(axis), Some(a_const)])?;
        y = ctx.emit1(Op::Where, vec![Some(is_a), Some(sums[a]), Some(y)])?;
    }
    Ok(y)
}

/// TopK: `k` from the attribute before opset 10, a constant input after. The outputs
/// are always sorted (`sorted = 0` leaves the order unspecified).
pub fn top_k(ctx: &mut NodeCtx) -> ImportResult {
    // Sorted or not, the outputs come sorted; the flag is still checked like any other.
    ctx.attrs.flag("sorted", true)?;
    let x = ctx.input_ty(0)?;
    let k_input = ctx.input(1).filter(|v| ctx.constant(*v).is_none());
    if let (true, Some(k)) = (ctx.opset() >= 10, k_input) {
        let (axis, _) = axis_and_dim(ctx.attrs.int("axis", -1)?, &x.shape)?;
        let largest = ctx.attrs.flag("largest", true)?;
        // A bound the model puts on k (`min(300, n)`) plans the outputs for it.
        let max_k = (ctx.upper_bound(k)).map_or(x.shape[axis], |m| {
            usize::try_from(m.max(0)).unwrap_or(0).min(x.shape[axis])
        });
        let outs = ctx.emit(
            Op::TopKRunTime {
                axis,
                largest,
                max_k,
            },
            vec![Some(ctx.required(0)?), Some(k)],
            3,
        )?;
        ctx.bind_outputs(&outs[..2]);
        return Ok(());
    }
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
    let (axis, dim) = axis_and_dim(ctx.attrs.int("axis", -1)?, &x.shape)?;
    let k = usize::try_from(k)
        .ok()
        .filter(|&k| k <= dim)
        .ok_or_else(|| ImportError::Invalid(format!("k = {k} must be in [0, {dim}]")))?;
    let largest = ctx.attrs.flag("largest", true)?;
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

/// ReverseSequence: along `time_axis`, row `b` of `batch_axis` has its first
/// `sequence_lens[b]` elements reversed, the rest kept. A GatherElements along the time
/// axis whose index is `t < len ? len − 1 − t : t`, computed at run time from the
/// lengths (clamped to the time axis's size, as onnxruntime does).
pub fn reverse_sequence(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let lens = ctx.input_ty(1)?;
    if x.rank() < 2 {
        return Err(format!("input must have rank ≥ 2, got {x}").into());
    }
    let batch_axis = normalize_axis(ctx.attrs.int("batch_axis", 1)?, x.rank())?;
    let time_axis = normalize_axis(ctx.attrs.int("time_axis", 0)?, x.rank())?;
    if batch_axis > 1 || time_axis > 1 || batch_axis == time_axis {
        return Err("batch_axis and time_axis must be 0 and 1, one each".into());
    }
    let (batch, time) = (x.shape[batch_axis], x.shape[time_axis]);
    if lens.shape != [batch] || !lens.dtype.is_int() {
        return Err(format!("sequence_lens {lens} must be an integer [{batch}]").into());
    }
    // Both operands laid out [time or batch on its axis, 1 elsewhere] so they meet in a
    // [.., batch, .., time, ..] index that Expand widens to X.
    let along = |axis: usize, n: usize| {
        let mut shape = vec![1; x.rank()];
        shape[axis] = n;
        shape
    };
    let mut len = ctx.required(1)?;
    if lens.dtype != DType::I64 {
        len = ctx.emit1(Op::Cast { to: DType::I64 }, vec![Some(len)])?;
    }
    let len = ctx.emit1(
        Op::Reshape {
            shape: along(batch_axis, batch),
        },
        vec![Some(len)],
    )?;
    let bounds = Op::Unary(crate::ops::UnaryOp::Clip {
        min: 0.0,
        max: time as f64,
    });
    let len = ctx.emit1(bounds, vec![Some(len)])?;
    let t: Vec<i64> = (0..time as i64).collect();
    let t = ctx.constant_value("time_index", Tensor::from_vec(&along(time_axis, time), t));
    let one = ctx.constant_value("one", Tensor::scalar(1i64));
    let bin = |op| Op::Binary(op);
    let inside = ctx.emit1(bin(BinaryOp::Less), vec![Some(t), Some(len)])?;
    let last = ctx.emit1(bin(BinaryOp::Sub), vec![Some(len), Some(one)])?;
    let mirrored = ctx.emit1(bin(BinaryOp::Sub), vec![Some(last), Some(t)])?;
    let index = ctx.emit1(Op::Where, vec![Some(inside), Some(mirrored), Some(t)])?;
    let index = ctx.emit1(
        Op::Expand {
            shape: x.shape.clone(),
        },
        vec![Some(index)],
    )?;
    let y = ctx.emit1(
        Op::GatherElements { axis: time_axis },
        vec![Some(ctx.required(0)?), Some(index)],
    )?;
    ctx.bind_output(0, y);
    Ok(())
}

/// MaxUnpool: zeros of the shape MaxPool's attributes infer, `X[i]` written at the flat
/// position `I[i]` (one ScatterElements over the flattened tensor), then padded (or
/// cropped) at the end of each spatial axis to `output_shape` if given, as the
/// reference implementation does.
pub fn max_unpool(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let ind = ctx.input_ty(1)?;
    if x.rank() < 3 || ind.shape != x.shape || !ind.dtype.is_int() {
        return Err(format!(
            "X {x} must be [N, C, D...] with integer indices of its shape, got {ind}"
        )
        .into());
    }
    let n = x.rank() - 2;
    let a = &ctx.attrs;
    let kernel = a
        .usizes_opt("kernel_shape")?
        .ok_or("attribute 'kernel_shape' is required")?;
    let strides = a.usizes_opt("strides")?.unwrap_or_else(|| vec![1; n]);
    let pads = a.usizes_opt("pads")?.unwrap_or_else(|| vec![0; 2 * n]);
    if kernel.len() != n || strides.len() != n || pads.len() != 2 * n {
        return Err(format!(
            "kernel_shape, strides and pads need {n}, {n} and {} entries",
            2 * n
        )
        .into());
    }
    let mut inferred = x.shape[..2].to_vec();
    let too_large = || "the output's size overflows: kernel_shape or strides are too large";
    for i in 0..n {
        let full = ((x.shape[2 + i].max(1) - 1).checked_mul(strides[i]))
            .and_then(|f| f.checked_add(kernel[i]))
            .ok_or_else(too_large)?;
        let d = pads[i]
            .checked_add(pads[n + i])
            .and_then(|p| full.checked_sub(p))
            .ok_or("pads remove the whole output")?;
        inferred.push(d);
    }
    let total = (inferred.iter())
        .try_fold(1usize, |t, &d| t.checked_mul(d))
        .ok_or_else(too_large)?;
    let zeros_ty = crate::ir::TensorType::new(x.dtype, vec![total]);
    ctx.limits().check_tensor(&zeros_ty)?;
    let zeros = if ctx.limits().may_fold([&zeros_ty]) {
        ctx.constant_value("zeros", Tensor::zeros(&zeros_ty))
    } else {
        // Too big to carry as a weight: filled by infer().
        let zero = ctx.constant_value(
            "zero",
            Tensor::zeros(&crate::ir::TensorType::new(x.dtype, vec![])),
        );
        ctx.emit1(Op::Expand { shape: vec![total] }, vec![Some(zero)])?
    };
    let flat = |ctx: &mut NodeCtx, i: usize| -> ImportResult<crate::ir::ValueId> {
        let v = ctx.required(i)?;
        ctx.emit1(
            Op::Reshape {
                shape: vec![x.numel()],
            },
            vec![Some(v)],
        )
    };
    let (xf, mut indf) = (flat(ctx, 0)?, flat(ctx, 1)?);
    if ind.dtype != DType::I64 {
        indf = ctx.emit1(Op::Cast { to: DType::I64 }, vec![Some(indf)])?;
    }
    let scatter = Op::ScatterElements {
        axis: 0,
        reduction: ScatterReduction::None,
    };
    let y = ctx.emit1(scatter, vec![Some(zeros), Some(indf), Some(xf)])?;
    let mut y = ctx.emit1(
        Op::Reshape {
            shape: inferred.clone(),
        },
        vec![Some(y)],
    )?;
    if let Some(shape) = ctx.const_input(2, "output_shape")? {
        let shape = shape.to_i64_vec();
        if shape.len() != x.rank() || shape[..2] != [x.shape[0] as i64, x.shape[1] as i64] {
            return Err(format!("output_shape {shape:?} must be [N, C, D...] of X {x}").into());
        }
        let mut pads = vec![0i64; 2 * x.rank()];
        for (k, (&want, &have)) in shape.iter().zip(&inferred).enumerate() {
            pads[x.rank() + k] = want - have as i64;
        }
        if pads.iter().any(|&p| p != 0) {
            let op = Op::Pad(crate::ops::PadAttrs {
                mode: crate::ops::PadMode::Constant,
                pads,
                value: 0.0,
            });
            y = ctx.emit1(op, vec![Some(y)])?;
        }
    }
    ctx.bind_output(0, y);
    Ok(())
}
