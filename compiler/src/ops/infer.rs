//! Shape and type inference for every core op. Inputs are `None` where an optional
//! input was omitted. Errors are plain messages; the importer attaches node and op.

use super::*;
use crate::ir::TensorType;

type InferResult = Result<Vec<TensorType>, String>;

/// numpy broadcasting of any number of shapes.
pub fn broadcast_shapes(shapes: &[&[usize]]) -> Result<Vec<usize>, String> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1usize; rank];
    for s in shapes {
        let off = rank - s.len();
        for (i, &d) in s.iter().enumerate() {
            let o = &mut out[off + i];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return Err(format!("shapes {shapes:?} cannot be broadcast together"));
            }
        }
    }
    Ok(out)
}

fn input(inputs: &[Option<TensorType>], i: usize) -> Result<&TensorType, String> {
    inputs
        .get(i)
        .and_then(|t| t.as_ref())
        .ok_or_else(|| format!("missing required input {i}"))
}

/// Output size of a sliding window along one axis.
pub fn window_output(
    size: usize,
    kernel: usize,
    stride: usize,
    pad_total: usize,
    dilation: usize,
    ceil: bool,
) -> Result<usize, String> {
    if kernel == 0 || stride == 0 || dilation == 0 {
        return Err(format!(
            "kernel {kernel}, stride {stride} and dilation {dilation} must be positive"
        ));
    }
    let eff = dilation
        .checked_mul(kernel - 1)
        .and_then(|e| e.checked_add(1))
        .ok_or_else(|| format!("kernel {kernel} with dilation {dilation} is too large"))?;
    let padded = size
        .checked_add(pad_total)
        .ok_or_else(|| format!("padding {pad_total} is too large"))?;
    if padded < eff {
        return Err(format!(
            "kernel extent {eff} exceeds padded input size {padded}"
        ));
    }
    let span = padded - eff;
    Ok(if ceil {
        span.div_ceil(stride)
    } else {
        span / stride
    } + 1)
}

pub fn infer_types(op: &Op, inputs: &[Option<TensorType>]) -> InferResult {
    check_operand_types(op, inputs)?;
    let out = infer_core(op, inputs)?;
    check_epilogue(op, inputs, &out)?;
    check_low_precision(op, inputs, &out)?;
    Ok(out)
}

/// The operands whose element type the lowering of `op` fixes: indices are int32 or
/// int64 and Where's condition is bool (the ONNX importer checks the same of ONNX ops,
/// this covers the IR ops importers and passes build).
fn check_operand_types(op: &Op, inputs: &[Option<TensorType>]) -> Result<(), String> {
    if let (Op::Where, Some(Some(x)), Some(Some(y))) = (op, inputs.get(1), inputs.get(2)) {
        if x.dtype != y.dtype {
            return Err(format!(
                "Where's two branches must have one type, not {} and {}",
                x.dtype, y.dtype
            ));
        }
    }
    let (i, ok, what): (usize, fn(DType) -> bool, &str) = match op {
        Op::Gather { .. }
        | Op::GatherElements { .. }
        | Op::GatherND { .. }
        | Op::ScatterElements { .. }
        // ONNX's own ops take int32/int64 (checked at import); the ops the importer
        // composes may index with any integer type the lowering reads.
        | Op::ScatterND { .. } => (1, |d| d.is_int(), "indices"),
        Op::Where => (0, |d| d == DType::Bool, "condition"),
        _ => return Ok(()),
    };
    match inputs.get(i).and_then(Option::as_ref) {
        Some(t) if !ok(t.dtype) => Err(format!("{} {what} cannot be {}", op.name(), t.dtype)),
        _ => Ok(()),
    }
}

/// The fused epilogue's operands of Conv, Gemm and MatMul: MatMul's bias has N
/// elements; a residual (input 3) has the output's type.
/// Low-precision tensors (float8, 4- and 2-bit) are only converted, by CastCodes:
/// the importer decomposes QuantizeLinear, DequantizeLinear and Cast around them into
/// float32 arithmetic, and no other kernel reads or writes their packed codes.
fn check_low_precision(
    op: &Op,
    inputs: &[Option<TensorType>],
    outputs: &[TensorType],
) -> Result<(), String> {
    let narrow = inputs
        .iter()
        .flatten()
        .chain(outputs)
        .map(|t| t.dtype)
        .find(|d| d.low_precision().is_some());
    match (op, narrow) {
        (_, None) => Ok(()),
        (Op::CastCodes { to, .. }, Some(_)) => {
            let from = input(inputs, 0)?.dtype;
            let pair_ok = (from == DType::F32 && to.low_precision().is_some())
                || (from.low_precision().is_some() && *to == DType::F32);
            if pair_ok {
                Ok(())
            } else {
                Err(format!(
                    "CastCodes converts between float32 and a low-precision type, not {from} to {to}"
                ))
            }
        }
        (_, Some(d)) => Err(format!(
            "{d} tensors are only supported by Cast, CastLike, QuantizeLinear and DequantizeLinear"
        )),
    }
}

fn check_epilogue(
    op: &Op,
    inputs: &[Option<TensorType>],
    out: &[TensorType],
) -> Result<(), String> {
    if !matches!(op, Op::Conv(_) | Op::Gemm(_) | Op::MatMul(_)) {
        return Ok(());
    }
    if inputs.len() > 4 {
        return Err(format!("{} takes at most 4 inputs", op.name()));
    }
    if let (Op::MatMul(_), Some(Some(bias))) = (op, inputs.get(2)) {
        let n = out[0].shape.last().copied().unwrap_or(1);
        let ok = bias.numel() == n
            && bias.shape.iter().rev().skip(1).all(|&d| d == 1)
            && bias.rank() <= out[0].rank()
            && bias.dtype == out[0].dtype;
        if !ok {
            return Err(format!(
                "MatMul bias {bias} does not match output {}",
                out[0]
            ));
        }
    }
    if let Some(Some(r)) = inputs.get(3) {
        if *r != out[0] {
            return Err(format!("residual {r} does not match output {}", out[0]));
        }
    }
    Ok(())
}

fn infer_core(op: &Op, inputs: &[Option<TensorType>]) -> InferResult {
    let x = || input(inputs, 0);
    match op {
        Op::Unary(u) => {
            let x = x()?;
            Ok(vec![TensorType::new(
                u.output_dtype(x.dtype),
                x.shape.clone(),
            )])
        }
        Op::Binary(b) => {
            let (a, c) = (x()?, input(inputs, 1)?);
            let shape = if *b == BinaryOp::PRelu {
                // PRelu broadcasts the slope to X (unidirectional).
                let s = broadcast_shapes(&[&a.shape, &c.shape])?;
                if s != a.shape {
                    return Err(format!(
                        "slope {:?} does not broadcast to {:?}",
                        c.shape, a.shape
                    ));
                }
                s
            } else {
                broadcast_shapes(&[&a.shape, &c.shape])?
            };
            if a.dtype != c.dtype
                && !matches!(
                    b,
                    BinaryOp::Pow | BinaryOp::BitShiftLeft | BinaryOp::BitShiftRight
                )
            {
                return Err(format!("input types differ: {} and {}", a.dtype, c.dtype));
            }
            Ok(vec![TensorType::new(b.output_dtype(a.dtype), shape)])
        }
        Op::Where => {
            let (c, a, b) = (x()?, input(inputs, 1)?, input(inputs, 2)?);
            let shape = broadcast_shapes(&[&c.shape, &a.shape, &b.shape])?;
            Ok(vec![TensorType::new(a.dtype, shape)])
        }
        Op::Cast { to } | Op::CastCodes { to, .. } => {
            Ok(vec![TensorType::new(*to, x()?.shape.clone())])
        }
        Op::BitCast { to } => {
            let xt = x()?;
            if xt.dtype.bits() != to.bits() {
                return Err(format!(
                    "BitCast from {} ({} bits) to {to} ({} bits): the widths differ",
                    xt.dtype,
                    xt.dtype.bits(),
                    to.bits()
                ));
            }
            Ok(vec![TensorType::new(*to, xt.shape.clone())])
        }
        Op::QuantizeLinear { axis, to } => {
            let xt = x()?;
            check_quant_params(xt, inputs, *axis, "scale")?;
            if to.quantized_range().is_none() {
                return Err(format!("QuantizeLinear to {to} is not supported"));
            }
            Ok(vec![TensorType::new(*to, xt.shape.clone())])
        }
        Op::DequantizeLinear { axis } => {
            let xt = x()?;
            let scale = check_quant_params(xt, inputs, *axis, "scale")?;
            if !xt.dtype.is_int() {
                return Err(format!("DequantizeLinear of {} is not supported", xt.dtype));
            }
            if let Some(Some(zp)) = inputs.get(2) {
                if zp.dtype != xt.dtype {
                    return Err(format!("zero point {} does not match input {}", zp, xt));
                }
            }
            Ok(vec![TensorType::new(scale.dtype, xt.shape.clone())])
        }
        Op::MatMulInteger => {
            let (a, b) = (x()?, input(inputs, 1)?);
            integer_operands(&[a, b])?;
            let mut out = infer_matmul(a, b)?;
            out[0].dtype = DType::I32;
            Ok(out)
        }
        Op::ConvInteger(c) => {
            let (xt, w) = (x()?, input(inputs, 1)?);
            integer_operands(&[xt, w])?;
            let as_float = |t: &TensorType| TensorType::new(DType::F32, t.shape.clone());
            let mut out = infer_core(
                &Op::Conv(c.clone()),
                &[Some(as_float(xt)), Some(as_float(w))],
            )?;
            out[0].dtype = DType::I32;
            Ok(out)
        }
        Op::QuantizeToPlanes(layout) => {
            let xt = x()?;
            let n = xt.shape.first().copied().unwrap_or(0);
            let expected = [n, layout.channels, layout.height, layout.width];
            if xt.dtype != DType::F32 || xt.shape != expected {
                return Err(format!(
                    "QuantizeToPlanes expects float32 {expected:?}, not {xt}"
                ));
            }
            Ok(vec![TensorType::new(DType::U8, layout.shape(n))])
        }
        Op::PackPlanes(layout) => {
            let xt = x()?;
            let n = xt.shape.first().copied().unwrap_or(0);
            let expected = [n, layout.channels, layout.height, layout.width];
            if xt.dtype != DType::U8 || xt.shape != expected {
                return Err(format!("PackPlanes expects uint8 {expected:?}, not {xt}"));
            }
            Ok(vec![TensorType::new(DType::U8, layout.shape(n))])
        }
        Op::ConvU8S8 {
            conv,
            planes,
            requantize,
        } => {
            let (p, w) = (x()?, input(inputs, 1)?);
            let n = p.shape.first().copied().unwrap_or(0);
            if p.dtype != DType::U8 || p.shape != planes.shape(n) {
                return Err(format!("ConvU8S8 planes {p} do not match {planes:?}"));
            }
            let depthwise = conv.group > 1
                && conv.group == planes.channels
                && w.shape.first() == Some(&conv.group)
                && w.shape.get(1) == Some(&1);
            if w.dtype != DType::I8
                || w.rank() != 4
                || !(depthwise || conv.group == 1 && w.shape[1] == planes.channels)
                || w.shape[2..] != conv.kernel[..]
            {
                return Err(format!("ConvU8S8 weights {w} do not match {conv:?}"));
            }
            let image = TensorType::new(
                DType::F32,
                vec![n, planes.channels, planes.height, planes.width],
            );
            let out = infer_core(
                &Op::Conv(conv.clone()),
                &[
                    Some(image),
                    Some(TensorType::new(DType::F32, w.shape.clone())),
                ],
            )?;
            match requantize {
                None => Ok(out),
                Some(r) => {
                    let [_, m, h, w] = out[0].shape[..] else {
                        return Err("ConvU8S8 output is not 4-D".into());
                    };
                    let l = &r.layout;
                    if (l.channels, l.height, l.width) != (m, h, w) {
                        return Err(format!(
                            "ConvU8S8 output {} does not fit the planes {l:?}",
                            out[0]
                        ));
                    }
                    Ok(vec![TensorType::new(DType::U8, l.shape(n))])
                }
            }
        }
        Op::MatMul(_) => infer_matmul(x()?, input(inputs, 1)?),
        Op::Attention => infer_attention(
            x()?,
            input(inputs, 1)?,
            input(inputs, 2)?,
            inputs.get(3).and_then(Option::as_ref),
        ),
        Op::Gemm(g) => {
            let (a, b) = (x()?, input(inputs, 1)?);
            if a.rank() != 2 || b.rank() != 2 {
                return Err("Gemm operands must be 2-D".into());
            }
            let (m, k) = if g.trans_a {
                (a.shape[1], a.shape[0])
            } else {
                (a.shape[0], a.shape[1])
            };
            let (k2, n) = if g.trans_b {
                (b.shape[1], b.shape[0])
            } else {
                (b.shape[0], b.shape[1])
            };
            if k != k2 {
                return Err(format!("inner dimensions differ: {k} vs {k2}"));
            }
            if let Some(Some(c)) = inputs.get(2) {
                let s = broadcast_shapes(&[&c.shape, &[m, n]])?;
                if s != [m, n] {
                    return Err(format!("C {:?} does not broadcast to [{m}, {n}]", c.shape));
                }
            }
            Ok(vec![TensorType::new(a.dtype, vec![m, n])])
        }
        Op::Conv(c) => {
            let (xt, w) = (x()?, input(inputs, 1)?);
            let sp = xt
                .rank()
                .checked_sub(2)
                .filter(|s| *s > 0)
                .ok_or("input must have rank ≥ 3 (N, C, spatial...)")?;
            if w.rank() != sp + 2 {
                return Err(format!(
                    "weight rank {} does not match input rank {}",
                    w.rank(),
                    xt.rank()
                ));
            }
            if c.group == 0
                || Some(xt.shape[1]) != w.shape[1].checked_mul(c.group)
                || w.shape[0] % c.group != 0
            {
                return Err(format!(
                    "channels do not match: input has {}, weight expects {} × group {}",
                    xt.shape[1], w.shape[1], c.group
                ));
            }
            if c.kernel.len() != sp
                || c.strides.len() != sp
                || c.dilations.len() != sp
                || c.pads.len() != 2 * sp
            {
                return Err(format!(
                    "kernel, strides, dilations and pads must match the {sp} spatial axes"
                ));
            }
            let mut shape = vec![xt.shape[0], w.shape[0]];
            for i in 0..sp {
                let pads = c.pads[i]
                    .checked_add(c.pads[sp + i])
                    .ok_or("pads are too large")?;
                shape.push(window_output(
                    xt.shape[2 + i],
                    c.kernel[i],
                    c.strides[i],
                    pads,
                    c.dilations[i],
                    false,
                )?);
            }
            Ok(vec![TensorType::new(xt.dtype, shape)])
        }
        Op::ConvTranspose(c) => {
            let (xt, w) = (x()?, input(inputs, 1)?);
            if xt.rank() < 3 || w.rank() != xt.rank() || xt.shape[1] != w.shape[0] {
                return Err("input and weight shapes do not match".into());
            }
            let channels = w.shape[1]
                .checked_mul(c.group)
                .ok_or("output channels overflow")?;
            let mut shape = vec![xt.shape[0], channels];
            shape.extend(&c.output_spatial);
            Ok(vec![TensorType::new(xt.dtype, shape)])
        }
        Op::Pool(p) => {
            let xt = x()?;
            if xt.rank() < 2 {
                return Err(format!("pooling needs an input of rank ≥ 2, not {xt}"));
            }
            let mut shape = xt.shape[..2].to_vec();
            shape.extend(&p.output_spatial);
            Ok(vec![TensorType::new(xt.dtype, shape)])
        }
        Op::Softmax { .. } => Ok(vec![x()?.clone()]),
        Op::LayerNorm { .. } => Ok(vec![x()?.clone()]),
        Op::Reduce(r) => {
            let xt = x()?;
            let shape = reduced_shape(&xt.shape, &r.axes, r.keepdims);
            Ok(vec![TensorType::new(xt.dtype, shape)])
        }
        Op::ArgReduce(a) => {
            let xt = x()?;
            let shape = reduced_shape(&xt.shape, &[a.axis], a.keepdims);
            Ok(vec![TensorType::new(DType::I64, shape)])
        }
        Op::Reshape { shape } => {
            let xt = x()?;
            let numel = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
            if numel != Some(xt.numel()) {
                return Err(format!("cannot reshape {:?} to {:?}", xt.shape, shape));
            }
            Ok(vec![TensorType::new(xt.dtype, shape.clone())])
        }
        Op::Transpose { perm } => {
            let xt = x()?;
            let mut seen = perm.clone();
            seen.sort_unstable();
            if !seen.iter().copied().eq(0..xt.rank()) {
                return Err(format!(
                    "perm {perm:?} is not a permutation of the axes of {xt}"
                ));
            }
            Ok(vec![TensorType::new(
                xt.dtype,
                perm.iter().map(|&p| xt.shape[p]).collect(),
            )])
        }
        Op::Concat { axis } => {
            let first = x()?;
            if *axis >= first.rank() {
                return Err(format!("axis {axis} is out of range for {first}"));
            }
            let mut shape = first.shape.clone();
            shape[*axis] = 0;
            for t in inputs.iter().flatten() {
                if t.rank() != first.rank()
                    || (0..t.rank()).any(|i| i != *axis && t.shape[i] != first.shape[i])
                {
                    return Err(format!(
                        "cannot concatenate {:?} with {:?}",
                        first.shape, t.shape
                    ));
                }
                shape[*axis] = shape[*axis]
                    .checked_add(t.shape[*axis])
                    .ok_or("the concatenated axis is too long")?;
            }
            Ok(vec![TensorType::new(first.dtype, shape)])
        }
        Op::Slice { shape, .. } => Ok(vec![TensorType::new(x()?.dtype, shape.clone())]),
        Op::Gather { axis } => {
            let (d, i) = (x()?, input(inputs, 1)?);
            if *axis >= d.rank() {
                return Err(format!("cannot gather axis {axis} of {d}"));
            }
            let mut shape = d.shape[..*axis].to_vec();
            shape.extend(&i.shape);
            shape.extend(&d.shape[axis + 1..]);
            Ok(vec![TensorType::new(d.dtype, shape)])
        }
        Op::Expand { shape } => Ok(vec![TensorType::new(x()?.dtype, shape.clone())]),
        Op::Pad(p) => {
            let xt = x()?;
            let r = xt.rank();
            if p.pads.len() != 2 * r {
                return Err(format!(
                    "pads has {} entries, {} expected",
                    p.pads.len(),
                    2 * r
                ));
            }
            let mut shape = Vec::with_capacity(r);
            for i in 0..r {
                let d = i64::try_from(xt.shape[i])
                    .ok()
                    .and_then(|d| d.checked_add(p.pads[i])?.checked_add(p.pads[r + i]))
                    .ok_or_else(|| format!("pads {:?} overflow axis {i}", p.pads))?;
                let d = usize::try_from(d).map_err(|_| format!("pads make axis {i} negative"))?;
                shape.push(d);
            }
            Ok(vec![TensorType::new(xt.dtype, shape)])
        }
        Op::Resize(r) => Ok(vec![TensorType::new(x()?.dtype, r.output_shape.clone())]),
        Op::GatherElements { axis } => {
            let (d, i) = (x()?, input(inputs, 1)?);
            if d.rank() != i.rank() || *axis >= d.rank() {
                return Err(format!("indices {i} must have the rank of data {d}"));
            }
            Ok(vec![TensorType::new(d.dtype, i.shape.clone())])
        }
        Op::ScatterElements { .. } | Op::ScatterND { .. } => Ok(vec![x()?.clone()]),
        Op::CumSum { axis, .. } => {
            let x = x()?;
            if *axis >= x.rank() {
                return Err(format!(
                    "axis {axis} is out of range for {x} (a scalar has no axis to sum along)"
                ));
            }
            Ok(vec![x.clone()])
        }
        Op::RnnSequence { cell, reverse } => rnn_sequence_types(*cell, reverse.len(), inputs),
        Op::GatherND { batch_dims } => {
            let (d, i) = (x()?, input(inputs, 1)?);
            let k = *i.shape.last().ok_or("indices must have rank ≥ 1")?;
            if *batch_dims >= i.rank() || batch_dims + k > d.rank() {
                return Err(format!(
                    "cannot gather {d} by {i} with {batch_dims} batch axes"
                ));
            }
            let mut shape = i.shape[..i.rank() - 1].to_vec();
            shape.extend(&d.shape[batch_dims + k..]);
            Ok(vec![TensorType::new(d.dtype, shape)])
        }
        Op::TopK { axis, k, .. } => {
            let xt = x()?;
            let mut shape = xt.shape.clone();
            *shape.get_mut(*axis).ok_or("axis is out of range")? = *k;
            Ok(vec![
                TensorType::new(xt.dtype, shape.clone()),
                TensorType::new(DType::I64, shape),
            ])
        }
        Op::SliceRunTime { count, varying } => {
            let xt = x()?;
            for (i, t) in inputs.iter().enumerate().take(5).skip(1) {
                let Some(t) = t else { continue };
                if !t.dtype.is_int() || t.rank() != 1 || t.numel() != *count {
                    return Err(format!(
                        "Slice's input {i} must be {count} integers, not {t}"
                    ));
                }
            }
            if inputs.get(1).is_none_or(Option::is_none)
                || inputs.get(2).is_none_or(Option::is_none)
            {
                return Err("Slice needs starts and ends".into());
            }
            if varying.iter().any(|&a| a >= xt.rank()) {
                return Err("a sliced axis is out of range".into());
            }
            Ok(vec![
                xt.clone(),
                TensorType::new(DType::I64, vec![xt.rank()]),
            ])
        }
        Op::Choose { shapes } => {
            let index = input(inputs, 0)?;
            if !index.dtype.is_int() || index.numel() != 1 {
                return Err(format!("the index must be one integer, not {index}"));
            }
            let mut candidates = (shapes.iter().enumerate())
                .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
                .map(|(i, s)| match inputs.get(1 + i) {
                    Some(Some(t)) if t.shape == *s => Ok(t),
                    _ => Err(format!("candidate {i} must be shaped {s:?}")),
                });
            let first = candidates.next().ok_or("no candidate")??;
            for c in candidates {
                let c = c?;
                if c.dtype != first.dtype || c.rank() != first.rank() {
                    return Err(format!(
                        "candidates {first} and {c} differ in dtype or rank"
                    ));
                }
            }
            let bound: Vec<usize> = (0..first.rank())
                .map(|d| shapes.iter().flatten().map(|s| s[d]).max().unwrap_or(0))
                .collect();
            Ok(vec![
                TensorType::new(first.dtype, bound.clone()),
                TensorType::new(DType::I64, vec![bound.len()]),
            ])
        }
        Op::SplitRunTime { axis, parts } => {
            let (xt, sizes) = (x()?, input(inputs, 1)?);
            if !sizes.dtype.is_int() || sizes.numel() != *parts || sizes.rank() != 1 {
                return Err(format!(
                    "Split's sizes must be {parts} integers, not {sizes}"
                ));
            }
            if *axis >= xt.rank() {
                return Err("axis is out of range".into());
            }
            let mut out = vec![xt.clone(); *parts];
            out.extend(vec![TensorType::new(DType::I64, vec![]); *parts]);
            Ok(out)
        }
        Op::ConcatRows { axis, parts } => {
            let mut types = inputs[..(*parts).min(inputs.len())].to_vec();
            types.resize(*parts, None);
            let out = (infer_types(&Op::Concat { axis: *axis }, &types)?
                .into_iter()
                .next())
            .ok_or("Concat gives one output")?;
            let counts_ok = (inputs.get(*parts..).unwrap_or_default().iter().flatten())
                .all(|c| c.dtype == DType::I64 && c.numel() == 1);
            if !counts_ok {
                return Err("the counts of the rows concatenated must be int64 scalars".into());
            }
            Ok(vec![out, TensorType::new(DType::I64, vec![])])
        }
        Op::FirstRows { axis, bound } => {
            let xt = x()?;
            let n = input(inputs, 2)?;
            if *axis >= xt.rank() || !n.dtype.is_int() || n.numel() != 1 {
                return Err(format!("cannot take rows of axis {axis} of {xt} by {n}"));
            }
            let mut shape = xt.shape.clone();
            shape[*axis] = (*bound).min(shape[*axis]);
            Ok(vec![
                TensorType::new(xt.dtype, shape),
                TensorType::new(DType::I64, vec![]),
            ])
        }
        Op::TopKRunTime { axis, max_k, .. } => {
            let (xt, k) = (x()?, input(inputs, 1)?);
            if !k.dtype.is_int() || k.numel() != 1 {
                return Err(format!("TopK's k must be one integer, not {k}"));
            }
            if *axis >= xt.rank() {
                return Err("axis is out of range".into());
            }
            let mut shape = xt.shape.clone();
            shape[*axis] = (*max_k).min(xt.shape[*axis]);
            Ok(vec![
                TensorType::new(xt.dtype, shape.clone()),
                TensorType::new(DType::I64, shape),
                TensorType::new(DType::I64, vec![]),
            ])
        }
        Op::ReduceRunTimeAxes {
            keepdims, count, ..
        } => {
            let xt = x()?;
            let shapes: Vec<Vec<usize>> = axis_sets(xt.rank(), *count)
                .iter()
                .map(|set| reduced_shape(&xt.shape, set, *keepdims))
                .collect();
            shaped_by_run_time_axes(xt, input(inputs, 1)?, *count, &shapes)
        }
        Op::DimValues { values, scalar } => {
            if *scalar && values.len() != 1 {
                return Err("a scalar DimValues holds one extent".into());
            }
            let shape = if *scalar { vec![] } else { vec![values.len()] };
            Ok(vec![TensorType::new(DType::I64, shape)])
        }
        Op::ReshapeByAxes { count, shapes, .. } => {
            let xt = x()?;
            if shapes
                .iter()
                .any(|(_, s)| s.iter().product::<usize>() != xt.numel())
            {
                return Err(format!("the shapes do not all hold {xt}'s elements"));
            }
            let shapes: Vec<Vec<usize>> = shapes.iter().map(|(_, s)| s.clone()).collect();
            shaped_by_run_time_axes(xt, input(inputs, 1)?, *count, &shapes)
        }
        Op::NonZero { transposed } => {
            let xt = x()?;
            let shape = match transposed {
                false => vec![xt.rank(), xt.numel()],
                true => vec![xt.numel(), xt.rank()],
            };
            Ok(vec![
                TensorType::new(DType::I64, shape),
                TensorType::new(DType::I64, vec![]),
            ])
        }
        Op::Compress { axis } => {
            let (xt, cond) = (x()?, input(inputs, 1)?);
            if cond.rank() != 1 || cond.dtype != DType::Bool {
                return Err(format!("Compress's condition must be 1-D bool, not {cond}"));
            }
            let shape = match axis {
                None => vec![xt.numel().min(cond.shape[0])],
                Some(a) => {
                    let mut s = xt.shape.clone();
                    let d = s.get_mut(*a).ok_or("axis is out of range")?;
                    *d = (*d).min(cond.shape[0]);
                    s
                }
            };
            Ok(vec![
                TensorType::new(xt.dtype, shape),
                TensorType::new(DType::I64, vec![]),
            ])
        }
        Op::Unique { axis, .. } => {
            let xt = x()?;
            let (y, n) = match axis {
                None => (vec![xt.numel()], xt.numel()),
                Some(a) => (
                    xt.shape.clone(),
                    *xt.shape.get(*a).ok_or("axis is out of range")?,
                ),
            };
            let index = TensorType::new(DType::I64, vec![n]);
            Ok(vec![
                TensorType::new(xt.dtype, y),
                index.clone(),
                index.clone(),
                index,
                TensorType::new(DType::I64, vec![]),
            ])
        }
        Op::NonMaxSuppression { per_class, .. } => {
            let (boxes, scores) = (x()?, input(inputs, 1)?);
            let ok = boxes.rank() == 3
                && boxes.shape[2] == 4
                && scores.rank() == 3
                && scores.shape[0] == boxes.shape[0]
                && scores.shape[2] == boxes.shape[1];
            if !ok {
                return Err(format!(
                    "NonMaxSuppression needs boxes [B, N, 4] and scores [B, C, N], not {boxes} and {scores}"
                ));
            }
            // Boxes the run counts may be fewer than the bound planned for.
            let per_class = (*per_class).min(boxes.shape[1]);
            let rows = (boxes.shape[0].checked_mul(scores.shape[1]))
                .and_then(|r| r.checked_mul(per_class))
                .ok_or("NonMaxSuppression's output size overflows")?;
            Ok(vec![
                TensorType::new(DType::I64, vec![rows, 3]),
                TensorType::new(DType::I64, vec![]),
            ])
        }
    }
}

/// The types of an op whose output shape is one of `shapes`, chosen by `count` axes
/// read at run time from `axes`: the output at the largest of them on every axis, and
/// an int64 holding the actual shape.
fn shaped_by_run_time_axes(
    xt: &TensorType,
    axes: &TensorType,
    count: usize,
    shapes: &[Vec<usize>],
) -> InferResult {
    if !axes.dtype.is_int() || axes.numel() != count || axes.rank() != 1 {
        return Err(format!("the axes must be {count} integers, not {axes}"));
    }
    let first = shapes.first().ok_or("no set of axes fits the input")?;
    let bound: Vec<usize> = (0..first.len())
        .map(|d| shapes.iter().map(|s| s[d]).max().unwrap_or(0))
        .collect();
    Ok(vec![
        TensorType::new(xt.dtype, bound.clone()),
        TensorType::new(DType::I64, vec![bound.len()]),
    ])
}

/// `(start, len)` of ONNX Slice's `start..end` by `step` (non-zero) on an axis of `dim`
/// elements: negative positions count from the end, then positive steps clamp into
/// `[0, dim]` and negative ones into `[-1, dim - 1]`; an empty slice starts at 0.
pub fn slice_run(start: i64, end: i64, step: i64, dim: usize) -> (usize, usize) {
    let dim = dim as i64;
    let clamp = |v: i64| {
        let v = if v < 0 { v + dim } else { v };
        if step > 0 {
            v.clamp(0, dim)
        } else {
            v.clamp(-1, dim - 1)
        }
    };
    let (s, e) = (clamp(start), clamp(end));
    let span = if step > 0 { e - s } else { s - e }.max(0);
    // step may be i64::MIN: its magnitude as u64 cannot overflow.
    let len = (span as u64).div_ceil(step.unsigned_abs()) as usize;
    (if len > 0 { s as usize } else { 0 }, len)
}

/// The axes on which `shapes` (of one rank) differ: the extents a run decides.
pub fn varying_axes<'a>(shapes: impl Iterator<Item = &'a [usize]> + Clone) -> Vec<usize> {
    let Some(first) = shapes.clone().next() else {
        return vec![];
    };
    (0..first.len())
        .filter(|&d| shapes.clone().any(|s| s[d] != first[d]))
        .collect()
}

/// The bit mask of a set of axes, as code built for axes read at run time compares it.
pub fn axes_mask(set: &[usize]) -> u64 {
    set.iter().map(|a| 1u64 << a).sum()
}

/// Every set of `count` distinct axes of a tensor of rank `rank`, each sorted, in
/// lexicographic order.
pub fn axis_sets(rank: usize, count: usize) -> Vec<Vec<usize>> {
    fn extend(
        from: usize,
        rank: usize,
        left: usize,
        set: &mut Vec<usize>,
        out: &mut Vec<Vec<usize>>,
    ) {
        if left == 0 {
            out.push(set.clone());
            return;
        }
        for a in from..rank {
            set.push(a);
            extend(a + 1, rank, left - 1, set, out);
            set.pop();
        }
    }
    let mut out = vec![];
    extend(0, rank, count, &mut vec![], &mut out);
    out
}

pub fn reduced_shape(shape: &[usize], axes: &[usize], keepdims: bool) -> Vec<usize> {
    let mut out = Vec::with_capacity(shape.len());
    for (i, &d) in shape.iter().enumerate() {
        if axes.contains(&i) {
            if keepdims {
                out.push(1);
            }
        } else {
            out.push(d);
        }
    }
    out
}

/// Scale (input 1) and zero point (input 2, optional) of QuantizeLinear and
/// DequantizeLinear: one value, or 1-D with one per index of `axis`. Returns the scale.
fn check_quant_params<'a>(
    x: &TensorType,
    inputs: &'a [Option<TensorType>],
    axis: usize,
    what: &str,
) -> Result<&'a TensorType, String> {
    let scale = input(inputs, 1)?;
    if !scale.dtype.is_float() {
        return Err(format!("{what} must be float, not {}", scale.dtype));
    }
    let per_axis = x.shape.get(axis).copied();
    let fits = |t: &TensorType| {
        t.numel() == 1 && t.rank() <= 1 || t.rank() == 1 && Some(t.shape[0]) == per_axis
    };
    for (name, t) in [
        ("scale", Some(scale)),
        ("zero point", inputs.get(2).and_then(|z| z.as_ref())),
    ] {
        if let Some(t) = t {
            if !fits(t) {
                return Err(format!(
                    "{name} {t} must hold one value or one per index of axis {axis} of {x}"
                ));
            }
        }
    }
    Ok(scale)
}

/// MatMulInteger's and ConvInteger's data operands are 8-bit integers.
fn integer_operands(ts: &[&TensorType]) -> Result<(), String> {
    match ts
        .iter()
        .find(|t| !matches!(t.dtype, DType::U8 | DType::I8))
    {
        Some(t) => Err(format!(
            "integer GEMM operands must be uint8 or int8, not {t}"
        )),
        None => Ok(()),
    }
}

/// numpy matmul's promotion of 1-D operands: A `[K]` → `[1, K]`, B `[K]` → `[K, 1]`.
pub fn as_matrices(a: &[usize], b: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let a2 = if a.len() == 1 {
        vec![1, a[0]]
    } else {
        a.to_vec()
    };
    let b2 = if b.len() == 1 {
        vec![b[0], 1]
    } else {
        b.to_vec()
    };
    (a2, b2)
}

/// `MatMul(Softmax(MatMul(q, kt) + mask), v)`: every operand a matrix or a batch of
/// them, float32, and the mask broadcasting to the scores without changing their shape.
fn infer_attention(
    q: &TensorType,
    kt: &TensorType,
    v: &TensorType,
    mask: Option<&TensorType>,
) -> InferResult {
    let operands = [Some(q), Some(kt), Some(v), mask];
    if let Some(t) = operands.iter().flatten().find(|t| t.dtype != DType::F32) {
        return Err(format!("Attention computes float32, not {}", t.dtype));
    }
    if [q, kt, v].iter().any(|t| t.rank() < 2) {
        return Err("Attention operands must have rank ≥ 2".into());
    }
    let scores = infer_matmul(q, kt)?.remove(0);
    if let Some(m) = mask {
        if broadcast_shapes(&[&scores.shape, &m.shape])? != scores.shape {
            return Err(format!(
                "the mask {:?} does not broadcast to the scores {:?}",
                m.shape, scores.shape
            ));
        }
    }
    infer_matmul(&scores, v)
}

fn infer_matmul(a: &TensorType, b: &TensorType) -> InferResult {
    if a.rank() == 0 || b.rank() == 0 {
        return Err("MatMul operands must have rank ≥ 1".into());
    }
    let (a2, b2) = as_matrices(&a.shape, &b.shape);
    let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let (k2, n) = (b2[b2.len() - 2], b2[b2.len() - 1]);
    if k != k2 {
        return Err(format!(
            "inner dimensions differ: {:?} @ {:?}",
            a.shape, b.shape
        ));
    }
    let mut shape = broadcast_shapes(&[&a2[..a2.len() - 2], &b2[..b2.len() - 2]])?;
    if a.rank() > 1 {
        shape.push(m);
    }
    if b.rank() > 1 {
        shape.push(n);
    }
    Ok(vec![TensorType::new(a.dtype, shape)])
}

/// `Op::RnnSequence`'s outputs, from `xw` `[T, B, D·G·H]` and `R` `[D, G·H, H]`.
fn rnn_sequence_types(cell: RnnCell, dirs: usize, inputs: &[Option<TensorType>]) -> InferResult {
    let (xw, r) = (input(inputs, 0)?, input(inputs, 1)?);
    let (&[t, b, cols], &[d, gh, h]) = (xw.shape.as_slice(), r.shape.as_slice()) else {
        return Err(format!(
            "RnnSequence needs xw [T, B, D·G·H] and R [D, G·H, H], not {xw} and {r}"
        ));
    };
    let state = TensorType::new(DType::F32, vec![dirs, b, h]);
    let third = match cell {
        RnnCell::Lstm => state.clone(),
        _ => TensorType::new(DType::F32, vec![dirs, h]),
    };
    let given =
        |i: usize, want: &TensorType| inputs.get(i).cloned().flatten().is_none_or(|s| s == *want);
    let g = cell.gates();
    let consistent = d == dirs && gh == g * h && cols == dirs * gh && h > 0;
    let extra_ok = cell != RnnCell::Simple || inputs.get(3).cloned().flatten().is_none();
    if !consistent
        || xw.dtype != DType::F32
        || r.dtype != DType::F32
        || !given(2, &state)
        || !given(3, &third)
        || !extra_ok
    {
        return Err(format!(
            "RnnSequence ({cell:?}) of {dirs} direction(s) needs float32 xw [T, B, D·{g}·H], \
             R [D, {g}·H, H] and states {state}, not {xw} and {r}"
        ));
    }
    let mut out = vec![
        TensorType::new(DType::F32, vec![t, dirs, b, h]),
        state.clone(),
    ];
    if cell == RnnCell::Lstm {
        out.push(state);
    }
    Ok(out)
}
