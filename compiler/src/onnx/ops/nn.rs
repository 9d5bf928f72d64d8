//! Neural-network ONNX ops: Conv, ConvTranspose, pooling, Gemm/MatMul, normalizations
//! and Softmax.

use crate::ir::{DType, Tensor, ValueId};
use crate::onnx::attributes::normalize_axis;
use crate::onnx::import::{ImportError, ImportResult, NodeCtx};
use crate::ops::infer::window_output;
use crate::ops::{
    BinaryOp, ConvAttrs, ConvTransposeAttrs, GemmAttrs, Op, PoolAttrs, PoolKind, ReduceAttrs,
    ReduceKind, UnaryOp,
};

use super::elementwise::scalar_of;

/// Spatial attributes shared by Conv and the pools, with auto_pad resolved into pads.
struct Window {
    kernel: Vec<usize>,
    strides: Vec<usize>,
    pads: Vec<usize>,
    dilations: Vec<usize>,
    output: Vec<usize>,
}

fn window(
    ctx: &NodeCtx,
    spatial_in: &[usize],
    kernel: Vec<usize>,
    ceil_mode: bool,
) -> ImportResult<Window> {
    let n = spatial_in.len();
    let a = &ctx.attrs;
    let ones = vec![1usize; n];
    let strides = a.usizes_opt("strides")?.unwrap_or_else(|| ones.clone());
    let dilations = a.usizes_opt("dilations")?.unwrap_or_else(|| ones.clone());
    if kernel.len() != n || strides.len() != n || dilations.len() != n {
        return Err(format!(
            "kernel_shape, strides and dilations need {n} entries, one per spatial axis"
        )
        .into());
    }
    if strides.contains(&0) || dilations.contains(&0) || kernel.contains(&0) {
        return Err("strides, dilations and kernel sizes must be positive".into());
    }
    let auto_pad = a.string("auto_pad", "NOTSET")?;
    let mut pads = match a.usizes_opt("pads")? {
        Some(p) if p.len() == 2 * n => p,
        Some(p) => return Err(format!("pads has {} entries, {} expected", p.len(), 2 * n).into()),
        None => vec![0; 2 * n],
    };
    // Bounded so that every window coordinate the kernels compute fits in 32 bits
    // plus the input's extent, whatever the input size.
    const MAX_WINDOW_ATTR: usize = 1 << 31;
    if [&kernel, &strides, &dilations, &pads]
        .iter()
        .any(|v| v.iter().any(|&x| x > MAX_WINDOW_ATTR))
    {
        return Err(format!(
            "kernel_shape, strides, dilations and pads must be at most {MAX_WINDOW_ATTR}"
        )
        .into());
    }
    let mut output = Vec::with_capacity(n);
    for i in 0..n {
        let eff = dilations[i]
            .checked_mul(kernel[i] - 1)
            .and_then(|e| e.checked_add(1))
            .ok_or_else(|| {
                format!(
                    "kernel {} with dilation {} is too large",
                    kernel[i], dilations[i]
                )
            })?;
        match auto_pad.as_str() {
            "NOTSET" => {
                let mut o = window_output(
                    spatial_in[i],
                    kernel[i],
                    strides[i],
                    pads[i].saturating_add(pads[n + i]),
                    dilations[i],
                    ceil_mode,
                )?;
                // With ceil_mode the last window must start inside the input or left pad.
                // `window_output` checked that the padded size fits, so o >= 1 and
                // (o - 1) * stride <= in + pads.
                if ceil_mode && (o - 1) * strides[i] >= spatial_in[i] + pads[i] {
                    o -= 1;
                }
                output.push(o);
            }
            "VALID" => {
                pads[i] = 0;
                pads[n + i] = 0;
                output.push(window_output(
                    spatial_in[i],
                    kernel[i],
                    strides[i],
                    0,
                    dilations[i],
                    ceil_mode,
                )?);
            }
            "SAME_UPPER" | "SAME_LOWER" => {
                let o = spatial_in[i].div_ceil(strides[i]);
                // An empty axis gives an empty output, whatever the padding.
                let total = match o.checked_sub(1) {
                    None => 0,
                    Some(last) => last
                        .checked_mul(strides[i])
                        .and_then(|start| start.checked_add(eff))
                        .ok_or_else(|| format!("kernel extent {eff} is too large"))?
                        .saturating_sub(spatial_in[i]),
                };
                let small = total / 2;
                let (b, e) = if auto_pad == "SAME_UPPER" {
                    (small, total - small)
                } else {
                    (total - small, small)
                };
                pads[i] = b;
                pads[n + i] = e;
                output.push(o);
            }
            other => return Err(format!("unknown auto_pad '{other}'").into()),
        }
    }
    Ok(Window {
        kernel,
        strides,
        pads,
        dilations,
        output,
    })
}

/// The `group` attribute of a (transposed) convolution, checked against the input's
/// `channels` and the weight's leading axis: each group takes an equal share of both.
pub(super) fn group_attr(group: i64, channels: usize, weight_rows: usize) -> ImportResult<usize> {
    let g = usize::try_from(group)
        .ok()
        .filter(|g| *g > 0)
        .ok_or_else(|| format!("attribute 'group' is {group}: it must be positive"))?;
    if !channels.is_multiple_of(g) || !weight_rows.is_multiple_of(g) {
        return Err(format!(
            "attribute 'group' is {group}: it must divide the input's {channels} channels \
             and the weight's {weight_rows} rows"
        )
        .into());
    }
    Ok(g)
}

/// Conv's attributes, checked against the input (input `xi`) and weight (input `wi`):
/// shared by Conv, ConvInteger and QLinearConv.
pub(super) fn conv_attrs(ctx: &NodeCtx, xi: usize, wi: usize) -> ImportResult<ConvAttrs> {
    let x = ctx.input_ty(xi)?;
    let w = ctx.input_ty(wi)?;
    if x.rank() < 3 || w.rank() != x.rank() {
        return Err(format!(
            "input {} and weight {} must both be N-d images of the same rank",
            x, w
        )
        .into());
    }
    let kernel = ctx
        .attrs
        .usizes_opt("kernel_shape")?
        .unwrap_or_else(|| w.shape[2..].to_vec());
    if kernel != w.shape[2..] {
        return Err(format!(
            "kernel_shape {:?} does not match the weight {:?}",
            kernel, w.shape
        )
        .into());
    }
    let win = window(ctx, &x.shape[2..], kernel, false)?;
    let group = group_attr(ctx.attrs.int("group", 1)?, x.shape[1], w.shape[0])?;
    Ok(ConvAttrs {
        kernel: win.kernel,
        strides: win.strides,
        pads: win.pads,
        dilations: win.dilations,
        group,
        activation: crate::ops::Activation::None,
    })
}

pub fn conv(ctx: &mut NodeCtx) -> ImportResult {
    let op = Op::Conv(conv_attrs(ctx, 0, 1)?);
    let ins = vec![Some(ctx.required(0)?), Some(ctx.required(1)?), ctx.input(2)];
    let y = ctx.emit1(op, ins)?;
    ctx.bind_output(0, y);
    Ok(())
}

pub fn conv_transpose(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let w = ctx.input_ty(1)?;
    if x.rank() < 3 || w.rank() != x.rank() {
        return Err("input and weight must be N-d images of the same rank".into());
    }
    let n = x.rank() - 2;
    let a = &ctx.attrs;
    let kernel = a
        .usizes_opt("kernel_shape")?
        .unwrap_or_else(|| w.shape[2..].to_vec());
    let strides = a.usizes_opt("strides")?.unwrap_or_else(|| vec![1; n]);
    let dilations = a.usizes_opt("dilations")?.unwrap_or_else(|| vec![1; n]);
    let out_pad = a
        .usizes_opt("output_padding")?
        .unwrap_or_else(|| vec![0; n]);
    let group = group_attr(a.int("group", 1)?, x.shape[1], w.shape[0])?;
    if kernel.len() != n || strides.len() != n || dilations.len() != n || out_pad.len() != n {
        return Err(format!("spatial attributes need {n} entries").into());
    }
    for (what, v) in [
        ("kernel_shape", &kernel),
        ("strides", &strides),
        ("dilations", &dilations),
    ] {
        if v.contains(&0) {
            return Err(format!("{what} {v:?} must be positive").into());
        }
    }
    if x.shape[2..].contains(&0) {
        return Err(format!("an empty image {:?} has no transposed convolution", x.shape).into());
    }
    let auto_pad = a.string("auto_pad", "NOTSET")?;
    let mut pads = a.usizes_opt("pads")?.unwrap_or_else(|| vec![0; 2 * n]);
    if pads.len() != 2 * n {
        return Err(format!("pads needs {} entries", 2 * n).into());
    }
    // Every attribute and extent is below 2^63, so sums of their pairwise products
    // cannot overflow i128; results are checked on the way back to usize.
    let wide = |v: usize| v as i128;
    let full = |i: usize| {
        wide(strides[i]) * (wide(x.shape[2 + i]) - 1)
            + wide(out_pad[i])
            + (wide(kernel[i]) - 1) * wide(dilations[i])
            + 1
    };
    let too_large =
        |what: &str| format!("the output's spatial axes overflow: {what} are too large");
    let output_shape = a.usizes_opt("output_shape")?;
    let mut output_spatial = Vec::with_capacity(n);
    for i in 0..n {
        let target = match (&output_shape, auto_pad.as_str()) {
            (Some(s), _) => Some(
                *s.len()
                    .checked_sub(n)
                    .and_then(|lead| s.get(lead + i))
                    .ok_or("output_shape has too few entries")?,
            ),
            (None, "SAME_UPPER" | "SAME_LOWER") => Some(
                x.shape[2 + i]
                    .checked_mul(strides[i])
                    .ok_or_else(|| too_large("strides"))?,
            ),
            _ => None,
        };
        match target {
            Some(t) => {
                // The spec's rule (and onnx.reference's): a negative total pads the
                // end, i.e. the output extends past the full convolution with bias only.
                let total = full(i) - wide(t);
                let (b, e) = if auto_pad == "SAME_UPPER" {
                    (total.div_euclid(2), total - total.div_euclid(2))
                } else {
                    (total - total.div_euclid(2), total.div_euclid(2))
                };
                pads[i] =
                    usize::try_from(b).map_err(|_| "output_shape needs a negative leading pad")?;
                pads[n + i] = usize::try_from(e.max(0))
                    .map_err(|_| too_large("kernel_shape, strides and dilations"))?;
                output_spatial.push(t);
            }
            None => {
                let o = full(i) - wide(pads[i]) - wide(pads[n + i]);
                if o <= 0 {
                    return Err("pads remove the whole output".into());
                }
                output_spatial.push(
                    usize::try_from(o)
                        .map_err(|_| too_large("kernel_shape, strides and dilations"))?,
                );
            }
        }
    }
    let op = Op::ConvTranspose(ConvTransposeAttrs {
        kernel,
        strides,
        pads,
        dilations,
        group,
        output_spatial,
    });
    let ins = vec![Some(ctx.required(0)?), Some(ctx.required(1)?), ctx.input(2)];
    let y = ctx.emit1(op, ins)?;
    ctx.bind_output(0, y);
    Ok(())
}

pub fn pool(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    if x.rank() < 3 {
        return Err("input must have rank ≥ 3 (N, C, spatial...)".into());
    }
    let op_type = ctx.node.op_type.clone();
    let global = op_type.starts_with("Global");
    let kind = match op_type.trim_start_matches("Global") {
        "MaxPool" => PoolKind::Max,
        "AveragePool" => PoolKind::Average {
            count_include_pad: ctx.attrs.flag("count_include_pad", false)?,
        },
        "LpPool" => PoolKind::Lp {
            p: ctx.attrs.int("p", 2)? as f32,
        },
        other => return Err(ImportError::Unsupported(format!("pool kind {other}"))),
    };
    let wants_indices =
        op_type == "MaxPool" && ctx.node.output.get(1).is_some_and(|o| !o.is_empty());
    let column_major = match ctx.attrs.int("storage_order", 0)? {
        0 => false,
        1 => true,
        s => return Err(format!("storage_order {s}: expected 0 or 1").into()),
    };
    let spatial = &x.shape[2..];
    let attrs = if global {
        let n = spatial.len();
        PoolAttrs {
            kind,
            kernel: spatial.to_vec(),
            strides: vec![1; n],
            pads: vec![0; 2 * n],
            dilations: vec![1; n],
            output_spatial: vec![1; n],
            ceil_mode: false,
        }
    } else {
        let kernel = ctx
            .attrs
            .usizes_opt("kernel_shape")?
            .ok_or("attribute 'kernel_shape' is required")?;
        let ceil_mode = ctx.attrs.flag("ceil_mode", false)?;
        let win = window(ctx, spatial, kernel, ceil_mode)?;
        PoolAttrs {
            kind,
            kernel: win.kernel,
            strides: win.strides,
            pads: win.pads,
            dilations: win.dilations,
            output_spatial: win.output,
            ceil_mode,
        }
    };
    let xv = ctx.required(0)?;
    if wants_indices {
        let indices = super::pool_indices::max_pool_indices(ctx, xv, &attrs, column_major)?;
        ctx.bind_output(1, indices);
    }
    let y = ctx.emit1(Op::Pool(attrs), vec![Some(xv)])?;
    ctx.bind_output(0, y);
    Ok(())
}

pub fn gemm(ctx: &mut NodeCtx) -> ImportResult {
    let a = &ctx.attrs;
    let attrs = GemmAttrs {
        alpha: a.float("alpha", 1.0)?,
        beta: a.float("beta", 1.0)?,
        trans_a: a.flag("transA", false)?,
        trans_b: a.flag("transB", false)?,
        activation: crate::ops::Activation::None,
    };
    let ins = vec![Some(ctx.required(0)?), Some(ctx.required(1)?), ctx.input(2)];
    let y = ctx.emit1(Op::Gemm(attrs), ins)?;
    ctx.bind_output(0, y);
    Ok(())
}

pub fn matmul(ctx: &mut NodeCtx) -> ImportResult {
    let ins = vec![Some(ctx.required(0)?), Some(ctx.required(1)?)];
    let y = ctx.emit1(Op::matmul(), ins)?;
    ctx.bind_output(0, y);
    Ok(())
}

/// Reshapes a per-channel vector `[C]` to `[C, 1, ...]` so it broadcasts over NC[D]HW.
fn per_channel(
    ctx: &mut NodeCtx,
    v: crate::ir::ValueId,
    rank: usize,
) -> ImportResult<crate::ir::ValueId> {
    let c = ctx.ty(v).numel();
    let mut shape = vec![c];
    shape.resize(rank.saturating_sub(1).max(1), 1);
    ctx.emit1(Op::Reshape { shape }, vec![Some(v)])
}

/// Inference BatchNormalization as `x * s + t`, `s = scale / sqrt(var + eps)`,
/// `t = bias - mean * s`; with constant statistics s and t fold at import.
pub fn batch_norm(ctx: &mut NodeCtx) -> ImportResult {
    let wants_running = ctx.node.output.iter().skip(1).any(|o| !o.is_empty());
    if ctx.attrs.flag("training_mode", false)? || (wants_running && ctx.opset() >= 14) {
        return batch_norm_training(ctx);
    }
    if wants_running {
        return Err(ImportError::Unsupported(
            "the saved statistics outputs of BatchNormalization before opset 14".into(),
        ));
    }
    let eps = ctx.attrs.float("epsilon", 1e-5)?;
    let x = ctx.input_ty(0)?;
    let [scale, bias, mean, var] = [1, 2, 3, 4].map(|i| ctx.required(i));
    let (scale, bias, mean, var) = (scale?, bias?, mean?, var?);
    let dtype = ctx.ty(var).dtype;
    let eps = ctx.constant_value("epsilon", scalar_of(dtype, eps as f64));
    let v = ctx.emit1(Op::Binary(BinaryOp::Add), vec![Some(var), Some(eps)])?;
    let sd = ctx.emit1(Op::Unary(UnaryOp::Sqrt), vec![Some(v)])?;
    let s = ctx.emit1(Op::Binary(BinaryOp::Div), vec![Some(scale), Some(sd)])?;
    let ms = ctx.emit1(Op::Binary(BinaryOp::Mul), vec![Some(mean), Some(s)])?;
    let t = ctx.emit1(Op::Binary(BinaryOp::Sub), vec![Some(bias), Some(ms)])?;
    let (s, t) = (
        per_channel(ctx, s, x.rank())?,
        per_channel(ctx, t, x.rank())?,
    );
    let (s, t) = if dtype != x.dtype {
        (
            ctx.emit1(Op::Cast { to: x.dtype }, vec![Some(s)])?,
            ctx.emit1(Op::Cast { to: x.dtype }, vec![Some(t)])?,
        )
    } else {
        (s, t)
    };
    let xs = ctx.emit1(
        Op::Binary(BinaryOp::Mul),
        vec![Some(ctx.required(0)?), Some(s)],
    )?;
    let y = ctx.emit1(Op::Binary(BinaryOp::Add), vec![Some(xs), Some(t)])?;
    ctx.bind_output(0, y);
    Ok(())
}

/// Training-mode BatchNormalization (opset 14+): normalized with the batch's own
/// statistics over every axis but the channels (population variance), and the running
/// statistics updated as `running · momentum + batch · (1 − momentum)`.
fn batch_norm_training(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.required(0)?;
    let xt = ctx.ty(x).clone();
    if xt.rank() < 2 {
        return Err("input must have a channel axis".into());
    }
    let eps = ctx.attrs.float("epsilon", 1e-5)? as f64;
    let momentum = ctx.attrs.float("momentum", 0.9)? as f64;
    let [scale, bias, mean, var] = [1, 2, 3, 4].map(|i| ctx.required(i));
    let (scale, bias, mean, var) = (scale?, bias?, mean?, var?);
    let axes: Vec<usize> = (0..xt.rank()).filter(|&a| a != 1).collect();
    let reduce_mean = |ctx: &mut NodeCtx, v: ValueId| {
        ctx.emit1(
            Op::Reduce(ReduceAttrs {
                kind: ReduceKind::Mean,
                axes: axes.clone(),
                keepdims: true,
            }),
            vec![Some(v)],
        )
    };
    let bin = |ctx: &mut NodeCtx, op: BinaryOp, a: ValueId, b: ValueId| {
        ctx.emit1(Op::Binary(op), vec![Some(a), Some(b)])
    };
    let batch_mean = reduce_mean(ctx, x)?;
    let centered = bin(ctx, BinaryOp::Sub, x, batch_mean)?;
    let sq = bin(ctx, BinaryOp::Mul, centered, centered)?;
    let batch_var = reduce_mean(ctx, sq)?;
    let eps_v = ctx.constant_value("epsilon", scalar_of(xt.dtype, eps));
    let v = bin(ctx, BinaryOp::Add, batch_var, eps_v)?;
    let sd = ctx.emit1(Op::Unary(UnaryOp::Sqrt), vec![Some(v)])?;
    let normalized = bin(ctx, BinaryOp::Div, centered, sd)?;
    let (s, b) = (
        per_channel(ctx, scale, xt.rank())?,
        per_channel(ctx, bias, xt.rank())?,
    );
    let y = bin(ctx, BinaryOp::Mul, normalized, s)?;
    let y = bin(ctx, BinaryOp::Add, y, b)?;
    let channels = xt.shape[1];
    let running = |ctx: &mut NodeCtx, old: ValueId, batch: ValueId| -> ImportResult<ValueId> {
        let dtype = ctx.ty(old).dtype;
        let batch = ctx.emit1(
            Op::Reshape {
                shape: vec![channels],
            },
            vec![Some(batch)],
        )?;
        let batch = if dtype == xt.dtype {
            batch
        } else {
            ctx.emit1(Op::Cast { to: dtype }, vec![Some(batch)])?
        };
        let m = ctx.constant_value("momentum", scalar_of(dtype, momentum));
        let rest = ctx.constant_value("one_minus_momentum", scalar_of(dtype, 1.0 - momentum));
        let kept = bin(ctx, BinaryOp::Mul, old, m)?;
        let added = bin(ctx, BinaryOp::Mul, batch, rest)?;
        bin(ctx, BinaryOp::Add, kept, added)
    };
    let running_mean = running(ctx, mean, batch_mean)?;
    let running_var = running(ctx, var, batch_var)?;
    ctx.bind_outputs(&[y, running_mean, running_var]);
    Ok(())
}

pub fn layer_norm(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let axis = normalize_axis(ctx.attrs.int("axis", -1)?, x.rank())?;
    let epsilon = ctx.attrs.float("epsilon", 1e-5)?;
    let wants_stats = ctx.node.output.iter().skip(1).any(|o| !o.is_empty());
    if !wants_stats && x.dtype == DType::F32 {
        let ins = vec![Some(ctx.required(0)?), Some(ctx.required(1)?), ctx.input(2)];
        let y = ctx.emit1(Op::LayerNorm { axis, epsilon }, ins)?;
        ctx.bind_output(0, y);
        return Ok(());
    }
    normalize_decomposed(ctx, axis, epsilon, true)
}

/// RMSNormalization (opset 23): `x / sqrt(mean(x²) + eps) * scale`.
pub fn rms_norm(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let axis = normalize_axis(ctx.attrs.int("axis", -1)?, x.rank())?;
    let epsilon = ctx.attrs.float("epsilon", 1e-5)?;
    normalize_decomposed(ctx, axis, epsilon, false)
}

/// Layer/RMS normalization from elementwise ops and reductions, computed in the
/// `stash_type` precision (float32 by default) as the ONNX function bodies do. Also
/// yields LayerNormalization's optional Mean and InvStdDev outputs.
fn normalize_decomposed(
    ctx: &mut NodeCtx,
    axis: usize,
    epsilon: f32,
    center: bool,
) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let stash = DType::from_onnx(ctx.attrs.int("stash_type", 1)? as i32).ok_or("bad stash_type")?;
    let axes: Vec<usize> = (axis..x.rank()).collect();
    let mut v = ctx.required(0)?;
    if x.dtype != stash {
        v = ctx.emit1(Op::Cast { to: stash }, vec![Some(v)])?;
    }
    let mean_of = |ctx: &mut NodeCtx, t| {
        ctx.emit1(
            Op::Reduce(ReduceAttrs {
                kind: ReduceKind::Mean,
                axes: axes.clone(),
                keepdims: true,
            }),
            vec![Some(t)],
        )
    };
    let (d, mean) = if center {
        let mean = mean_of(ctx, v)?;
        (
            ctx.emit1(Op::Binary(BinaryOp::Sub), vec![Some(v), Some(mean)])?,
            Some(mean),
        )
    } else {
        (v, None)
    };
    let sq = ctx.emit1(Op::Binary(BinaryOp::Mul), vec![Some(d), Some(d)])?;
    let var = mean_of(ctx, sq)?;
    let eps = ctx.constant_value("epsilon", scalar_of(stash, epsilon as f64));
    let var = ctx.emit1(Op::Binary(BinaryOp::Add), vec![Some(var), Some(eps)])?;
    let sd = ctx.emit1(Op::Unary(UnaryOp::Sqrt), vec![Some(var)])?;
    let inv = ctx.emit1(Op::Unary(UnaryOp::Reciprocal), vec![Some(sd)])?;
    let mut y = ctx.emit1(Op::Binary(BinaryOp::Mul), vec![Some(d), Some(inv)])?;
    if x.dtype != stash {
        y = ctx.emit1(Op::Cast { to: x.dtype }, vec![Some(y)])?;
    }
    y = ctx.emit1(
        Op::Binary(BinaryOp::Mul),
        vec![Some(y), Some(ctx.required(1)?)],
    )?;
    if let Some(bias) = ctx.input(2) {
        y = ctx.emit1(Op::Binary(BinaryOp::Add), vec![Some(y), Some(bias)])?;
    }
    ctx.bind_output(0, y);
    if let Some(mean) = mean {
        ctx.bind_output(1, mean);
        ctx.bind_output(2, inv);
    }
    Ok(())
}

/// Softmax and LogSoftmax. Before opset 13 the op flattens the input to 2-D at `axis`
/// and normalizes each row; that is a Reshape around the opset-13 op.
pub fn softmax(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let log = ctx.node.op_type == "LogSoftmax";
    let xv = ctx.required(0)?;
    if ctx.opset() >= 13 {
        let axis = normalize_axis(ctx.attrs.int("axis", -1)?, x.rank())?;
        let y = ctx.emit1(Op::Softmax { axis, log }, vec![Some(xv)])?;
        ctx.bind_output(0, y);
        return Ok(());
    }
    let axis = normalize_axis(ctx.attrs.int("axis", 1)?, x.rank())?;
    let rows: usize = x.shape[..axis].iter().product();
    let cols: usize = x.shape[axis..].iter().product();
    let flat = ctx.emit1(
        Op::Reshape {
            shape: vec![rows, cols],
        },
        vec![Some(xv)],
    )?;
    let sm = ctx.emit1(Op::Softmax { axis: 1, log }, vec![Some(flat)])?;
    let y = ctx.emit1(
        Op::Reshape {
            shape: x.shape.clone(),
        },
        vec![Some(sm)],
    )?;
    ctx.bind_output(0, y);
    Ok(())
}

/// Dropout in inference is the identity; its optional mask output is all true.
pub fn dropout(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.required(0)?;
    let y = ctx.emit1(Op::Unary(UnaryOp::Identity), vec![Some(x)])?;
    ctx.bind_output(0, y);
    if ctx.node.output.get(1).is_some_and(|o| !o.is_empty()) {
        let shape = ctx.ty(x).shape.clone();
        let mask = Tensor::from_vec(&shape, vec![true; shape.iter().product()]);
        let m = ctx.constant_value("dropout_mask", mask);
        ctx.bind_output(1, m);
    }
    Ok(())
}
