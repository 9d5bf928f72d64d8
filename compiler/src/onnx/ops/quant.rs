//! Quantized ONNX ops. QuantizeLinear, DequantizeLinear, MatMulInteger and ConvInteger
//! map onto the core ops of the same names; QLinearMatMul and QLinearConv decompose
//! exactly into them: the integer product (plus QLinearConv's int32 bias), cast to
//! float32, times `a_scale · b_scale / y_scale`, then QuantizeLinear with scale 1 and
//! the output zero point, which rounds half to even and saturates as ONNX specifies.
//! The integer products therefore run on nnc's integer GEMM, never in float.
//! DynamicQuantizeLinear decomposes into its ONNX function body. onnxruntime's
//! `com.microsoft` QLinearAdd, QLinearMul and QLinearGlobalAveragePool run in float32
//! between a dequantize and a quantize step, as their definitions read.

use super::elementwise::scalar_of;
use super::nn::conv_attrs;
use crate::ir::{DType, ValueId};
use crate::onnx::attributes::{axis_and_dim, normalize_axis};
use crate::onnx::import::{ImportError, ImportResult, NodeCtx};
use crate::ops::{BinaryOp, Op, ReduceAttrs, ReduceKind, UnaryOp};

/// The `axis` attribute (default 1) against input 0, when the scale (input `scale_at`)
/// has more than one element; 0 otherwise (per-tensor parameters ignore it).
fn param_axis(ctx: &NodeCtx, scale_at: usize) -> ImportResult<usize> {
    let scale = ctx.input_ty(scale_at)?;
    if scale.numel() <= 1 {
        return Ok(0);
    }
    let rank = ctx.input_ty(0)?.rank();
    Ok(normalize_axis(ctx.attrs.int("axis", 1)?, rank)?)
}

pub fn quantize_linear(ctx: &mut NodeCtx) -> ImportResult {
    if ctx.attrs.int("block_size", 0)? != 0 {
        let y = blocked(ctx, true)?;
        ctx.bind_output(0, y);
        return Ok(());
    }
    let axis = param_axis(ctx, 1)?;
    let to = match ctx.input(2) {
        Some(zp) => ctx.ty(zp).dtype,
        None => match ctx.attrs.int_opt("output_dtype")? {
            Some(code) if code != 0 => DType::from_onnx(code as i32)
                .ok_or_else(|| ImportError::Unsupported(format!("output_dtype {code}")))?,
            _ => DType::U8,
        },
    };
    if to.low_precision().is_some() {
        let y = super::low_precision::quantize(ctx, axis, to)?;
        ctx.bind_output(0, y);
        return Ok(());
    }
    if to.quantized_range().is_none() {
        return Err(ImportError::Unsupported(format!("QuantizeLinear to {to}")));
    }
    let ins = vec![Some(ctx.required(0)?), Some(ctx.required(1)?), ctx.input(2)];
    let y = ctx.emit1(Op::QuantizeLinear { axis, to }, ins)?;
    ctx.bind_output(0, y);
    Ok(())
}

pub fn dequantize_linear(ctx: &mut NodeCtx) -> ImportResult {
    if ctx.attrs.int("block_size", 0)? != 0 {
        let y = blocked(ctx, false)?;
        ctx.bind_output(0, y);
        return Ok(());
    }
    let axis = param_axis(ctx, 1)?;
    if ctx.input_ty(0)?.dtype.low_precision().is_some() {
        let y = super::low_precision::dequantize(ctx, axis)?;
        ctx.bind_output(0, y);
        return Ok(());
    }
    let ins = vec![Some(ctx.required(0)?), Some(ctx.required(1)?), ctx.input(2)];
    let y = ctx.emit1(Op::DequantizeLinear { axis }, ins)?;
    ctx.bind_output(0, y);
    Ok(())
}

pub fn matmul_integer(ctx: &mut NodeCtx) -> ImportResult {
    let ins = vec![
        Some(ctx.required(0)?),
        Some(ctx.required(1)?),
        ctx.input(2),
        ctx.input(3),
    ];
    let y = ctx.emit1(Op::MatMulInteger, ins)?;
    ctx.bind_output(0, y);
    Ok(())
}

pub fn conv_integer(ctx: &mut NodeCtx) -> ImportResult {
    let op = Op::ConvInteger(conv_attrs(ctx, 0, 1)?);
    let ins = vec![
        Some(ctx.required(0)?),
        Some(ctx.required(1)?),
        ctx.input(2),
        ctx.input(3),
    ];
    let y = ctx.emit1(op, ins)?;
    ctx.bind_output(0, y);
    Ok(())
}

/// `QuantizeLinear(float(acc) · a_scale · b_scale / y_scale, 1, y_zp)`; `b_scale`
/// already shaped to broadcast against `acc`.
fn requantize(
    ctx: &mut NodeCtx,
    acc: ValueId,
    a_scale: ValueId,
    b_scale: ValueId,
    y_scale: ValueId,
    y_zp: ValueId,
) -> ImportResult<ValueId> {
    let f = ctx.emit1(Op::Cast { to: DType::F32 }, vec![Some(acc)])?;
    let mul = |ctx: &mut NodeCtx, op, a, b| ctx.emit1(Op::Binary(op), vec![Some(a), Some(b)]);
    let s = mul(ctx, BinaryOp::Mul, a_scale, b_scale)?;
    let s = mul(ctx, BinaryOp::Div, s, y_scale)?;
    let scaled = mul(ctx, BinaryOp::Mul, f, s)?;
    let one = ctx.constant_value("one", scalar_of(DType::F32, 1.0));
    let to = ctx.ty(y_zp).dtype;
    ctx.emit1(
        Op::QuantizeLinear { axis: 0, to },
        vec![Some(scaled), Some(one), Some(y_zp)],
    )
}

/// The float32 scales QLinear ops take (float16 ones are cast).
fn f32_scale(ctx: &mut NodeCtx, i: usize) -> ImportResult<ValueId> {
    let v = ctx.required(i)?;
    if ctx.ty(v).dtype == DType::F32 {
        return Ok(v);
    }
    ctx.emit1(Op::Cast { to: DType::F32 }, vec![Some(v)])
}

/// QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp).
pub fn qlinear_matmul(ctx: &mut NodeCtx) -> ImportResult {
    let (a, a_zp, b, b_zp) = (
        ctx.required(0)?,
        ctx.required(2)?,
        ctx.required(3)?,
        ctx.required(5)?,
    );
    let acc = ctx.emit1(
        Op::MatMulInteger,
        vec![Some(a), Some(b), Some(a_zp), Some(b_zp)],
    )?;
    let (a_s, b_s, y_s) = (f32_scale(ctx, 1)?, f32_scale(ctx, 4)?, f32_scale(ctx, 6)?);
    let y_zp = ctx.required(7)?;
    let y = requantize(ctx, acc, a_s, b_s, y_s, y_zp)?;
    ctx.bind_output(0, y);
    Ok(())
}

/// QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B): the int32 bias
/// is added to the accumulator, the per-map weight scale reshaped to `[1, M, 1, ...]`.
pub fn qlinear_conv(ctx: &mut NodeCtx) -> ImportResult {
    let attrs = conv_attrs(ctx, 0, 3)?;
    let (x, x_zp, w, w_zp) = (
        ctx.required(0)?,
        ctx.required(2)?,
        ctx.required(3)?,
        ctx.required(5)?,
    );
    let rank = ctx.input_ty(0)?.rank();
    let maps = ctx.input_ty(3)?.shape[0];
    let mut acc = ctx.emit1(
        Op::ConvInteger(attrs),
        vec![Some(x), Some(w), Some(x_zp), Some(w_zp)],
    )?;
    let per_map = |ctx: &mut NodeCtx, v: ValueId| -> ImportResult<ValueId> {
        if ctx.ty(v).numel() <= 1 {
            return Ok(v);
        }
        let mut shape = vec![1, maps];
        shape.resize(rank, 1);
        ctx.emit1(Op::Reshape { shape }, vec![Some(v)])
    };
    if let Some(bias) = ctx.input(8) {
        let bias = per_map(ctx, bias)?;
        acc = ctx.emit1(Op::Binary(BinaryOp::Add), vec![Some(acc), Some(bias)])?;
    }
    let (x_s, w_s, y_s) = (f32_scale(ctx, 1)?, f32_scale(ctx, 4)?, f32_scale(ctx, 6)?);
    let w_s = per_map(ctx, w_s)?;
    let y_zp = ctx.required(7)?;
    let y = requantize(ctx, acc, x_s, w_s, y_s, y_zp)?;
    ctx.bind_output(0, y);
    Ok(())
}

/// DynamicQuantizeLinear(x) → (y: u8, y_scale, y_zero_point), as ONNX's function body
/// defines it: the range of x widened to hold 0, scale = range / 255, zero point =
/// round(clip(−min / scale, 0, 255)), then QuantizeLinear.
pub fn dynamic_quantize_linear(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.required(0)?;
    let xt = ctx.input_ty(0)?;
    if xt.dtype != DType::F32 {
        return Err(format!("DynamicQuantizeLinear takes float32, not {}", xt.dtype).into());
    }
    let all_axes: Vec<usize> = (0..xt.rank()).collect();
    let zero = ctx.constant_value("q_min", scalar_of(DType::F32, 0.0));
    let top = ctx.constant_value("q_max", scalar_of(DType::F32, 255.0));
    let reduce = |ctx: &mut NodeCtx, kind| -> ImportResult<ValueId> {
        if all_axes.is_empty() {
            return Ok(x);
        }
        ctx.emit1(
            Op::Reduce(ReduceAttrs {
                kind,
                axes: all_axes.clone(),
                keepdims: false,
            }),
            vec![Some(x)],
        )
    };
    let bin = |ctx: &mut NodeCtx, op, a, b| ctx.emit1(Op::Binary(op), vec![Some(a), Some(b)]);
    let lo = reduce(ctx, ReduceKind::Min)?;
    let lo = bin(ctx, BinaryOp::Min, lo, zero)?;
    let hi = reduce(ctx, ReduceKind::Max)?;
    let hi = bin(ctx, BinaryOp::Max, hi, zero)?;
    let range = bin(ctx, BinaryOp::Sub, hi, lo)?;
    let scale = bin(ctx, BinaryOp::Div, range, top)?;
    let lo_scaled = bin(ctx, BinaryOp::Div, lo, scale)?;
    let zp = bin(ctx, BinaryOp::Sub, zero, lo_scaled)?;
    let zp = ctx.emit1(
        Op::Unary(UnaryOp::Clip {
            min: 0.0,
            max: 255.0,
        }),
        vec![Some(zp)],
    )?;
    let zp = ctx.emit1(Op::Unary(UnaryOp::Round), vec![Some(zp)])?;
    let zp = ctx.emit1(Op::Cast { to: DType::U8 }, vec![Some(zp)])?;
    let y = ctx.emit1(
        Op::QuantizeLinear {
            axis: 0,
            to: DType::U8,
        },
        vec![Some(x), Some(scale), Some(zp)],
    )?;
    ctx.bind_outputs(&[y, scale, zp]);
    Ok(())
}

/// `DequantizeLinear(x, scale, zp)` of inputs `x_at`, `x_at + 1`, `x_at + 2` (the zero
/// point optional), per tensor.
fn dequantized(ctx: &mut NodeCtx, x_at: usize) -> ImportResult<ValueId> {
    let ins = vec![
        Some(ctx.required(x_at)?),
        Some(f32_scale(ctx, x_at + 1)?),
        ctx.input(x_at + 2),
    ];
    ctx.emit1(Op::DequantizeLinear { axis: 0 }, ins)
}

/// `QuantizeLinear(y, scale, zp)` of inputs `scale_at`, `scale_at + 1`, to the type of
/// input `like` (uint8 or int8).
fn quantized(ctx: &mut NodeCtx, y: ValueId, scale_at: usize, like: usize) -> ImportResult<ValueId> {
    let to = ctx.input_ty(like)?.dtype;
    let scale = f32_scale(ctx, scale_at)?;
    let zp = match ctx.input(scale_at + 1) {
        Some(zp) => zp,
        None => ctx.constant_value("zero_point", scalar_of(to, 0.0)),
    };
    ctx.emit1(
        Op::QuantizeLinear { axis: 0, to },
        vec![Some(y), Some(scale), Some(zp)],
    )
}

/// com.microsoft QLinearAdd / QLinearMul(A, A_scale, A_zp, B, B_scale, B_zp, C_scale,
/// C_zp): `C = quantize((dequantize(A) op dequantize(B)), C_scale, C_zp)`, with
/// broadcasting, computed in float32 between the dequantize and quantize steps.
pub fn qlinear_binary(ctx: &mut NodeCtx) -> ImportResult {
    let op = match ctx.node.op_type.as_str() {
        "QLinearAdd" => BinaryOp::Add,
        _ => BinaryOp::Mul,
    };
    let a = dequantized(ctx, 0)?;
    let b = dequantized(ctx, 3)?;
    let c = ctx.emit1(Op::Binary(op), vec![Some(a), Some(b)])?;
    let y = quantized(ctx, c, 6, 0)?;
    ctx.bind_output(0, y);
    Ok(())
}

/// com.microsoft QLinearGlobalAveragePool(X, x_scale, x_zp, y_scale, y_zp), NCHW
/// (`channels_last` 0): the mean over the spatial axes, kept, between dequantize and
/// quantize.
pub fn qlinear_global_average_pool(ctx: &mut NodeCtx) -> ImportResult {
    if ctx.attrs.flag("channels_last", false)? {
        return Err(ImportError::Unsupported(
            "QLinearGlobalAveragePool with channels_last".into(),
        ));
    }
    let rank = ctx.input_ty(0)?.rank();
    if rank < 3 {
        return Err(format!("QLinearGlobalAveragePool of a rank-{rank} tensor").into());
    }
    let x = dequantized(ctx, 0)?;
    let mean = ctx.emit1(
        Op::Reduce(ReduceAttrs {
            kind: ReduceKind::Mean,
            axes: (2..rank).collect(),
            keepdims: true,
        }),
        vec![Some(x)],
    )?;
    let y = quantized(ctx, mean, 3, 0)?;
    ctx.bind_output(0, y);
    Ok(())
}

/// Blocked QuantizeLinear / DequantizeLinear: the scale (and zero point) hold one value
/// per `block_size` consecutive elements along `axis`. Each is repeated to the input's
/// shape, then the arithmetic runs elementwise in float32: `saturate(round(x / s) +
/// zp)` to quantize, `(x − zp) · s` to dequantize.
fn blocked(ctx: &mut NodeCtx, quantize: bool) -> ImportResult<ValueId> {
    let x = ctx.required(0)?;
    let xt = ctx.ty(x).clone();
    let rank = xt.rank();
    let (axis, len) = axis_and_dim(ctx.attrs.int("axis", 1)?, &xt.shape)?;
    let block = usize::try_from(ctx.attrs.int("block_size", 0)?)
        .ok()
        .filter(|&b| b > 0)
        .ok_or("block_size must be positive")?;
    let blocks = len.div_ceil(block);
    let repeat = |ctx: &mut NodeCtx, p: ValueId, what: &str| -> ImportResult<ValueId> {
        let pt = ctx.ty(p).clone();
        let mut want = xt.shape.clone();
        want[axis] = blocks;
        if pt.shape != want {
            return Err(format!(
                "{what} has shape {:?}; blocks of {block} along axis {axis} of {:?} need {want:?}",
                pt.shape, xt.shape
            )
            .into());
        }
        let p = super::low_precision::to_f32(ctx, p)?;
        let mut split = want.clone();
        split.insert(axis + 1, 1);
        let p = ctx.emit1(
            Op::Reshape {
                shape: split.clone(),
            },
            vec![Some(p)],
        )?;
        split[axis + 1] = block;
        let p = ctx.emit1(Op::Expand { shape: split }, vec![Some(p)])?;
        let mut whole = want.clone();
        whole[axis] = blocks * block;
        let p = ctx.emit1(
            Op::Reshape {
                shape: whole.clone(),
            },
            vec![Some(p)],
        )?;
        if blocks * block == len {
            return Ok(p);
        }
        ctx.emit1(
            Op::Slice {
                starts: vec![0; rank],
                steps: vec![1; rank],
                shape: xt.shape.clone(),
            },
            vec![Some(p)],
        )
    };
    let scale_id = ctx.required(1)?;
    let scale_type = ctx.ty(scale_id).dtype;
    let scale = repeat(ctx, scale_id, "scale")?;
    let zp = match ctx.input(2) {
        Some(z) => Some(repeat(ctx, z, "zero point")?),
        None => None,
    };
    let xf = super::low_precision::to_f32(ctx, x)?;
    let bin = |ctx: &mut NodeCtx, op: BinaryOp, a: ValueId, b: ValueId| {
        ctx.emit1(Op::Binary(op), vec![Some(a), Some(b)])
    };
    if !quantize {
        let mut y = xf;
        if let Some(z) = zp {
            y = bin(ctx, BinaryOp::Sub, y, z)?;
        }
        y = bin(ctx, BinaryOp::Mul, y, scale)?;
        return if scale_type == DType::F32 {
            Ok(y)
        } else {
            ctx.emit1(Op::Cast { to: scale_type }, vec![Some(y)])
        };
    }
    let to = match ctx.input(2) {
        Some(z) => ctx.ty(z).dtype,
        None => match ctx.attrs.int_opt("output_dtype")? {
            Some(code) if code != 0 => DType::from_onnx(code as i32)
                .ok_or_else(|| ImportError::Unsupported(format!("output_dtype {code}")))?,
            _ => DType::U8,
        },
    };
    let Some((lo, hi)) = to.quantized_range() else {
        return Err(ImportError::Unsupported(format!(
            "blocked QuantizeLinear to {to}"
        )));
    };
    let mut y = bin(ctx, BinaryOp::Div, xf, scale)?;
    y = ctx.emit1(Op::Unary(UnaryOp::Round), vec![Some(y)])?;
    if let Some(z) = zp {
        y = bin(ctx, BinaryOp::Add, y, z)?;
    }
    y = ctx.emit1(
        Op::Unary(UnaryOp::Clip {
            min: lo as f64,
            max: hi as f64,
        }),
        vec![Some(y)],
    )?;
    ctx.emit1(Op::Cast { to }, vec![Some(y)])
}
