//! Importing a node one of whose operands has an extent set at run time (see
//! [`crate::ir::dim`]): shape subgraphs fold to expressions (`Shape → Gather → Mul →
//! Concat → Reshape` becomes a Reshape to `[batch, seq, 12, 64]`), ops whose ONNX
//! attributes or operands are extents (Reshape, Expand, ConstantOfShape, Slice,
//! Squeeze, Unsqueeze, Flatten, the global pools) get their output axes here, and the
//! ops whose importers read no extent go through those importers, the symbolic shape
//! inference ([`crate::ops::infer_dims`]) typing what they emit. Any other op over a
//! symbolic operand is refused, naming the operand, the axis and the expression.

use super::attributes::normalize_axis;
use super::import::{ImportError, ImportResult, NodeCtx};
use super::ops::Importer;
use crate::ir::dim::DimCheck;
use crate::ir::{DType, Dim, Tensor, TensorType, ValueId};
use crate::ops::{Op, ReduceAttrs, ReduceKind};

/// ONNX ops whose importers read no extent of their operands beyond the rank (they
/// emit ops the symbolic inference types from the operands).
#[rustfmt::skip]
const EXTENT_FREE: &[&str] = &[
    "Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Exp", "Log",
    "Sqrt", "Erf", "Neg", "Abs", "Reciprocal", "Softplus", "Softsign", "Elu", "Selu",
    "Gelu", "Mish", "Sin", "Cos", "Floor", "Ceil", "Round", "Sign", "Clip", "Not", "Add",
    "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mean", "Sum", "Where", "Cast", "CastLike",
    "Identity", "Dropout", "MatMul", "Gemm", "BatchNormalization", "Transpose", "Concat",
    "LayerNormalization", "Softmax", "LogSoftmax", "ReduceMean", "ReduceSum", "ReduceMax",
    "ReduceMin", "ReduceProd", "ReduceL2", "ReduceSumSquare", "Conv", "MaxPool",
    "AveragePool", "Gather", "Equal", "Less", "Greater", "And", "Or", "LSTM", "GRU",
    "RNN", "GatherElements", "GatherND", "CumSum", "GreaterOrEqual", "LessOrEqual", "Xor",
    "IsNaN", "IsInf", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "Trilu", "Pad", "Resize", "Upsample",
];

pub fn import(ctx: &mut NodeCtx, importer: Importer) -> ImportResult {
    let op = ctx.node.op_type.clone();
    let holds_extents = (0..ctx.inputs.len())
        .filter_map(|i| ctx.input(i))
        .any(|v| ctx.graph().value(v).dim_elements.is_some());
    match op.as_str() {
        "Shape" => shape(ctx),
        "Size" => size(ctx),
        "Reshape" => reshape(ctx),
        "Flatten" => flatten(ctx),
        "Expand" => expand(ctx),
        "ConstantOfShape" => constant_of_shape(ctx),
        "Squeeze" | "Unsqueeze" => squeeze_or_unsqueeze(ctx, op == "Unsqueeze"),
        "GlobalAveragePool" | "GlobalMaxPool" => global_pool(ctx, op == "GlobalMaxPool"),
        "Slice" => slice(ctx),
        "Range" => range(ctx),
        "Split" => split(ctx),
        "Resize" if holds_extents || resizes_to_sizes(ctx) => resize_to_sizes(ctx),
        "Upsample" if holds_extents => Err(refusal(ctx, "its scales must be constant")),
        _ if holds_extents => arithmetic(ctx, &op, importer),
        "Conv" | "MaxPool" | "AveragePool" => {
            same_padding_fixed(ctx)?;
            importer(ctx)
        }
        "ConvTranspose" => {
            if ctx.attrs.ints_opt("output_shape")?.is_some()
                || ctx.attrs.string("auto_pad", "NOTSET")?.starts_with("SAME")
            {
                return Err(refusal(
                    ctx,
                    "an output_shape or SAME padding fixes its extents",
                ));
            }
            importer(ctx)
        }
        "Gather" => {
            gather_forward(ctx)?;
            importer(ctx)
        }
        _ if EXTENT_FREE.contains(&op.as_str()) => importer(ctx),
        _ => Err(refusal(ctx, &format!("{op} cannot take it yet"))),
    }
}

fn text(ctx: &NodeCtx, d: &Dim) -> String {
    d.written(&|s| ctx.symbols().name(s).to_string())
}

/// Why the node cannot be imported, naming its first operand that holds extents
/// (the sizes or shape it is given), else its first operand of a symbolic extent.
fn refusal(ctx: &NodeCtx, why: &str) -> ImportError {
    for i in 0..ctx.inputs.len() {
        let Some(v) = ctx.input(i) else { continue };
        let info = ctx.graph().value(v);
        if let Some(e) = &info.dim_elements {
            let e: Vec<String> = e.iter().map(|d| text(ctx, d)).collect();
            return ImportError::Unsupported(format!(
                "input '{}' holds extents set at run time ({{{}}}); {why}",
                info.name,
                e.join(", ")
            ));
        }
    }
    for i in 0..ctx.inputs.len() {
        let Some(v) = ctx.input(i) else { continue };
        let info = ctx.graph().value(v);
        if let Some((axis, d)) = info.ty.first_symbolic_axis() {
            return ImportError::Unsupported(format!(
                "axis {axis} of input '{}' is {} (set at run time); {why}",
                info.name,
                text(ctx, d)
            ));
        }
    }
    ImportError::Unsupported(why.to_string())
}

fn overflow() -> ImportError {
    ImportError::Invalid("the extent arithmetic overflows".into())
}

fn product(dims: &[Dim]) -> ImportResult<Dim> {
    dims.iter()
        .try_fold(Dim::constant(1), |p, d| p.checked_mul(d))
        .ok_or_else(overflow)
}

/// Constant integers of input `i` (ints attribute `attr` before `attr_before`).
fn const_ints(
    ctx: &NodeCtx,
    i: usize,
    attr: &str,
    attr_before: i64,
) -> ImportResult<Option<Vec<i64>>> {
    if ctx.opset() < attr_before {
        return Ok(ctx.attrs.ints_opt(attr)?);
    }
    match ctx.input(i) {
        None => Ok(None),
        Some(v) => match ctx.constant(v) {
            Some(t) => Ok(Some(t.to_i64_vec())),
            None => Err(refusal(ctx, &format!("its {attr} must be constant"))),
        },
    }
}

fn emit_dims(ctx: &mut NodeCtx, op: Op, x: ValueId, dims: Vec<Dim>) -> ImportResult {
    let y = ctx.emit_with_dims(op, vec![Some(x)], vec![dims])?;
    ctx.bind_output(0, y[0]);
    Ok(())
}

/// The largest value of each of `dims` over the ranges: what an op's attributes hold.
fn maxima(ctx: &NodeCtx, dims: &[Dim]) -> ImportResult<Vec<usize>> {
    let ty = TensorType::from_dims(DType::F32, dims.to_vec(), ctx.symbols())?;
    Ok(ty.shape)
}

fn shape(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let rank = x.rank() as i64;
    let clamp = |a: i64| (if a < 0 { a + rank } else { a }).clamp(0, rank) as usize;
    let (start, end) = if ctx.opset() >= 15 {
        (
            clamp(ctx.attrs.int("start", 0)?),
            clamp(ctx.attrs.int("end", rank)?),
        )
    } else {
        (0, rank as usize)
    };
    let e = x.dims()[start..end.max(start)].to_vec();
    ctx.bind_elements(0, DType::I64, vec![e.len()], e);
    Ok(())
}

fn size(ctx: &mut NodeCtx) -> ImportResult {
    let n = product(&ctx.input_ty(0)?.dims())?;
    ctx.bind_elements(0, DType::I64, vec![], vec![n]);
    Ok(())
}

fn reshape(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.required(0)?;
    let xd = ctx.ty(x).dims();
    if let (Some(e), Some(target)) = (ctx.graph().value(x).dim_elements.clone(), ctx.input(1)) {
        // A list of extents as a scalar or a list again (`[n]` ↔ `[]`, exporters'
        // `view(-1)`): its elements are unchanged.
        let t = ctx
            .elements(target)
            .and_then(|t| t.iter().map(Dim::as_const).collect::<Option<Vec<_>>>());
        let shape = match t.as_deref() {
            Some([]) if e.len() == 1 => vec![],
            Some([n]) if *n == -1 || *n == e.len() as i64 => vec![e.len()],
            _ => {
                return Err(refusal(
                    ctx,
                    "a list of extents reshaped to more than one axis",
                ))
            }
        };
        let dtype = ctx.ty(x).dtype;
        ctx.bind_elements(0, dtype, shape, e);
        return Ok(());
    }
    let target = match ctx.input(1) {
        _ if ctx.opset() < 5 => ctx
            .attrs
            .ints_opt("shape")?
            .ok_or("attribute 'shape' is required")?
            .into_iter()
            .map(Dim::constant)
            .collect(),
        Some(v) => ctx.elements(v).ok_or_else(|| {
            refusal(
                ctx,
                "its target shape must be constant or computed from extents",
            )
        })?,
        None => return Err("input 'shape' is required".into()),
    };
    let allow_zero = ctx.attrs.flag("allowzero", false)?;
    let mut out = Vec::with_capacity(target.len());
    let mut infer_at = None;
    for (i, t) in target.iter().enumerate() {
        match t.as_const() {
            Some(-1) if infer_at.is_none() => {
                infer_at = Some(i);
                out.push(Dim::constant(1));
            }
            Some(0) if !allow_zero => out.push(
                xd.get(i)
                    .cloned()
                    .ok_or("shape copies a dimension the input lacks")?,
            ),
            Some(c) if c < 0 => return Err(format!("invalid target dimension {c}").into()),
            _ => out.push(t.clone()),
        }
    }
    let numel = product(&xd)?;
    let mut checks = vec![];
    if let Some(i) = infer_at {
        let known = product(&out)?;
        out[i] = match numel.exact_div(&known) {
            Some(q) => q,
            None => {
                let q = numel.floor_div(&known).ok_or_else(overflow)?;
                let back = q.checked_mul(&known).ok_or_else(overflow)?;
                checks.push(DimCheck::equal(
                    &back,
                    &numel,
                    "Reshape's -1 dividing the elements",
                )?);
                q
            }
        };
    } else {
        let n = product(&out)?;
        if !ctx.symbols().prove_eq(&n, &numel) {
            checks.push(DimCheck::equal(
                &n,
                &numel,
                "Reshape keeping the element count",
            )?);
        }
    }
    let shape = maxima(ctx, &out)?;
    emit_dims(ctx, Op::Reshape { shape }, x, out)?;
    ctx.add_checks(checks);
    Ok(())
}

/// Whether the node is a Resize to sizes (opset 11 on) of an operand with an axis the
/// run sets: its scales are then output over input extents, known only at run time.
fn resizes_to_sizes(ctx: &NodeCtx) -> bool {
    let symbolic_data = ctx.input(0).is_some_and(|v| ctx.ty(v).is_symbolic());
    symbolic_data && ctx.opset() >= 11 && ctx.input(3).is_some()
}

/// Resize to sizes computed from the dims (or fixed sizes of an operand whose extents
/// the run sets): each resized axis scales by its output over its input extent as the
/// run has them.
fn resize_to_sizes(ctx: &mut NodeCtx) -> ImportResult {
    use crate::ops::{CoordinateTransform, ResizeAttrs, ResizeMode};
    let x = ctx.required(0)?;
    let xd = ctx.ty(x).dims();
    let rank = xd.len();
    let sampling = super::ops::resize::sampling(ctx)?;
    if sampling.mode == ResizeMode::Cubic || sampling.antialias {
        return Err(refusal(
            ctx,
            "cubic or antialiased sampling to sizes set at run time has no form yet",
        ));
    }
    if sampling.coordinate_transform == CoordinateTransform::TfCropAndResize {
        return Err(refusal(
            ctx,
            "tf_crop_and_resize to sizes set at run time has no form yet",
        ));
    }
    if ctx.attrs.string("keep_aspect_ratio_policy", "stretch")? != "stretch" {
        return Err(refusal(
            ctx,
            "a keep_aspect_ratio_policy computes its scales from sizes at compile time",
        ));
    }
    let scales_given = match ctx.input(2) {
        None => false,
        Some(v) => ctx.constant(v).is_none_or(|t| t.ty().numel() > 0),
    };
    if scales_given {
        return Err("only one of scales and sizes may be given".into());
    }
    let sizes = ctx
        .elements(ctx.required(3)?)
        .ok_or_else(|| refusal(ctx, "its sizes must be constant or computed from extents"))?;
    let axes: Vec<usize> = match ctx.attrs.ints_opt("axes")? {
        Some(v) => v
            .iter()
            .map(|&a| normalize_axis(a, rank))
            .collect::<Result<_, _>>()?,
        None => (0..rank).collect(),
    };
    if sizes.len() != axes.len() {
        return Err(format!("sizes has {} entries, {} expected", sizes.len(), axes.len()).into());
    }
    let mut out = xd.clone();
    let mut checks = vec![];
    for (k, &ax) in axes.iter().enumerate() {
        if !ctx.symbols().prove_ge(&sizes[k], &Dim::constant(0)) {
            checks.push(DimCheck::at_least(
                &sizes[k],
                &Dim::constant(0),
                "Resize's sizes being non-negative",
            )?);
        }
        out[ax] = sizes[k].clone();
    }
    let shape = maxima(ctx, &out)?;
    let planned = ctx.ty(x).shape.clone();
    let attrs = ResizeAttrs {
        mode: sampling.mode,
        coordinate_transform: sampling.coordinate_transform,
        nearest_mode: sampling.nearest_mode,
        cubic_coeff_a: sampling.cubic_coeff_a,
        exclude_outside: sampling.exclude_outside,
        extrapolation_value: sampling.extrapolation_value,
        scales: (shape.iter().zip(&planned))
            .map(|(&o, &i)| o as f32 / i.max(1) as f32)
            .collect(),
        roi: [vec![0f32; rank], vec![1f32; rank]].concat(),
        output_shape: shape,
        scales_from_extents: true,
    };
    emit_dims(ctx, Op::Resize(attrs), x, out)?;
    ctx.add_checks(checks);
    Ok(())
}

fn flatten(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.required(0)?;
    let xd = ctx.ty(x).dims();
    let axis = ctx.attrs.int("axis", 1)?;
    let axis = if axis == xd.len() as i64 {
        xd.len()
    } else {
        normalize_axis(axis, xd.len())?
    };
    let out = vec![product(&xd[..axis])?, product(&xd[axis..])?];
    let shape = maxima(ctx, &out)?;
    emit_dims(ctx, Op::Reshape { shape }, x, out)
}

fn expand(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.required(0)?;
    let xd = ctx.ty(x).dims();
    let target = ctx
        .elements(ctx.required(1)?)
        .ok_or_else(|| refusal(ctx, "its shape must be constant or computed from extents"))?;
    let mut cx = crate::ops::infer_dims::DimContext {
        symbols: ctx.symbols(),
        checks: vec![],
    };
    let out = (cx.broadcast_all(&[xd, target])).map_err(|m| refusal(ctx, &m))?;
    let checks = cx.checks;
    let shape = maxima(ctx, &out)?;
    emit_dims(ctx, Op::Expand { shape }, x, out)?;
    ctx.add_checks(checks);
    Ok(())
}

fn constant_of_shape(ctx: &mut NodeCtx) -> ImportResult {
    let dims = ctx
        .elements(ctx.required(0)?)
        .ok_or_else(|| refusal(ctx, "its shape must be computed from extents"))?;
    let value = match ctx.attrs.tensor_opt("value")? {
        Some(t) => {
            let t = ctx.weight_attribute(t)?;
            if t.ty().numel() != 1 {
                return Err("attribute 'value' must hold one element".into());
            }
            t
        }
        None => Tensor::from_vec(&[1], vec![0f32]),
    };
    let v = ctx.constant_value("value", value);
    let shape = maxima(ctx, &dims)?;
    emit_dims(ctx, Op::Expand { shape }, v, dims)
}

fn squeeze_or_unsqueeze(ctx: &mut NodeCtx, unsqueeze: bool) -> ImportResult {
    let x = ctx.required(0)?;
    let xt = ctx.ty(x).clone();
    let axes = const_ints(ctx, 1, "axes", 13)?;
    let xd = xt.dims();
    let out = if unsqueeze {
        let axes = axes.ok_or("axes are required")?;
        let rank = xd.len() + axes.len();
        let mut axes = (axes.iter())
            .map(|&a| normalize_axis(a, rank))
            .collect::<Result<Vec<_>, _>>()?;
        axes.sort_unstable();
        let mut out = Vec::with_capacity(rank);
        let mut rest = xd.iter();
        for i in 0..rank {
            if axes.contains(&i) {
                out.push(Dim::constant(1));
            } else {
                out.push(rest.next().ok_or("repeated axes")?.clone());
            }
        }
        out
    } else {
        let axes = match axes {
            Some(a) => (a.iter())
                .map(|&a| normalize_axis(a, xd.len()))
                .collect::<Result<Vec<_>, _>>()?,
            None => (0..xd.len())
                .filter(|&i| xd[i].as_const() == Some(1))
                .collect(),
        };
        for &a in &axes {
            if xd[a].as_const() != Some(1) {
                return Err(refusal(
                    ctx,
                    &format!("it squeezes axis {a}, which is not always 1"),
                ));
            }
        }
        (xd.iter().enumerate())
            .filter(|(i, _)| !axes.contains(i))
            .map(|(_, d)| d.clone())
            .collect()
    };
    if let Some(e) = ctx.elements(x) {
        ctx.bind_elements(0, xt.dtype, maxima(ctx, &out)?, e);
        return Ok(());
    }
    let shape = maxima(ctx, &out)?;
    emit_dims(ctx, Op::Reshape { shape }, x, out)
}

fn global_pool(ctx: &mut NodeCtx, max: bool) -> ImportResult {
    let x = ctx.required(0)?;
    let rank = ctx.ty(x).rank();
    if rank < 3 {
        return Err("a global pool needs spatial axes".into());
    }
    let op = Op::Reduce(ReduceAttrs {
        kind: if max {
            ReduceKind::Max
        } else {
            ReduceKind::Mean
        },
        axes: (2..rank).collect(),
        keepdims: true,
    });
    let y = ctx.emit1(op, vec![Some(x)])?;
    ctx.bind_output(0, y);
    Ok(())
}

/// `auto_pad` SAME over a symbolic spatial axis pads by an amount that varies with
/// the extent unless the stride is 1.
fn same_padding_fixed(ctx: &NodeCtx) -> ImportResult {
    let auto_pad = ctx.attrs.string("auto_pad", "NOTSET")?;
    if !auto_pad.starts_with("SAME") {
        return Ok(());
    }
    let x = ctx.input_ty(0)?;
    let strides = ctx.attrs.ints_opt("strides")?.unwrap_or_default();
    for (i, d) in x.dims().iter().enumerate().skip(2) {
        if !d.is_const() && strides.get(i - 2).is_some_and(|&s| s != 1) {
            return Err(refusal(
                ctx,
                &format!(
                    "auto_pad {auto_pad} with stride {} pads it by a varying amount",
                    strides[i - 2]
                ),
            ));
        }
    }
    Ok(())
}

/// A Gather along a symbolic axis counts negative indices from a varying end: constant
/// ones are refused (the importer would resolve them against the largest extent); ones
/// read at run time are resolved by the run against the run's extent.
fn gather_forward(ctx: &NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let axis = normalize_axis(ctx.attrs.int("axis", 0)?, x.rank())?;
    if x.dim(axis).is_const() {
        return Ok(());
    }
    let negative = (ctx.input(1))
        .and_then(|v| ctx.constant(v))
        .is_some_and(|t| t.to_i64_vec().iter().any(|&i| i < 0));
    match negative {
        true => Err(refusal(ctx, "it gathers from the end of a symbolic axis")),
        false => Ok(()),
    }
}

/// Input `i` as expressions (its constant integers, or the extents it holds), or the
/// ints attribute `attr` before opset 10.
fn dim_list(ctx: &NodeCtx, i: usize, attr: &str) -> ImportResult<Option<Vec<Dim>>> {
    if ctx.opset() < 10 {
        let v = ctx.attrs.ints_opt(attr)?;
        return Ok(v.map(|v| v.into_iter().map(Dim::constant).collect()));
    }
    match ctx.input(i) {
        None => Ok(None),
        Some(v) => ctx
            .elements(v)
            .map(Some)
            .ok_or_else(|| refusal(ctx, &format!("its {attr} must be constant or extents"))),
    }
}

fn slice(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.required(0)?;
    let xt = ctx.ty(x).clone();
    let xd = xt.dims();
    let rank = xd.len();
    let starts = dim_list(ctx, 1, "starts")?.ok_or("starts are required")?;
    let ends = dim_list(ctx, 2, "ends")?.ok_or("ends are required")?;
    let consts = |v: Option<Vec<Dim>>, what: &str| -> ImportResult<Option<Vec<i64>>> {
        v.map(|v| v.iter().map(Dim::as_const).collect::<Option<Vec<i64>>>())
            .map(|v| v.ok_or_else(|| refusal(ctx, &format!("its {what} must be constant"))))
            .transpose()
    };
    let axes = match consts(dim_list(ctx, 3, "axes")?, "axes")? {
        Some(a) => (a.iter())
            .map(|&a| normalize_axis(a, rank))
            .collect::<Result<Vec<_>, _>>()?,
        None => (0..starts.len()).collect(),
    };
    let steps = consts(dim_list(ctx, 4, "steps")?, "steps")?.unwrap_or_else(|| vec![1; axes.len()]);
    if starts.len() != axes.len() || ends.len() != axes.len() || steps.len() != axes.len() {
        return Err("starts, ends, axes and steps differ in length".into());
    }
    let starts = consts(Some(starts), "starts")?.unwrap_or_default();
    if let Some(e) = ctx.elements(x) {
        // Slicing a list of extents: its length is static.
        let end = ends[0]
            .as_const()
            .ok_or_else(|| refusal(ctx, "a list of extents sliced to a varying length"))?;
        let (first, count) = crate::ops::infer::slice_run(starts[0], end, steps[0], e.len());
        let picked: Vec<Dim> = (0..count)
            .map(|k| e[(first as i64 + k as i64 * steps[0]) as usize].clone())
            .collect();
        ctx.bind_elements(0, xt.dtype, vec![picked.len()], picked);
        return Ok(());
    }
    let mut begin = vec![0usize; rank];
    let mut step_all = vec![1i64; rank];
    let mut out = xd.clone();
    // Axes sliced from their varying end (`x[:, -1:]`): a Gather of the positions
    // counted from the run's extent, after the Slice of the others.
    let mut from_end: Vec<(usize, Vec<Dim>)> = vec![];
    for (k, &a) in axes.iter().enumerate() {
        let n = &xd[a];
        if let (Some(len), Some(end)) = (n.as_const(), ends[k].as_const()) {
            let (first, count) =
                crate::ops::infer::slice_run(starts[k], end, steps[k], len as usize);
            begin[a] = first;
            step_all[a] = steps[k];
            out[a] = Dim::constant(count as i64);
            continue;
        }
        let why = |m: &str| refusal(ctx, &format!("slicing axis {a}: {m}"));
        if steps[k] != 1 {
            return Err(why("a step other than 1 with an extent set at run time"));
        }
        let s = starts[k];
        if s < 0 && ctx.symbols().prove_ge(n, &Dim::constant(-s)) {
            let count = match ends[k].as_const() {
                Some(e) if e >= i32::MAX as i64 => -s,
                Some(e) if e < 0 && e > s => e - s,
                _ => return Err(why("a start and end counted from a varying end")),
            };
            let positions = (0..count)
                .map(|i| n.add_const(s + i).ok_or_else(overflow))
                .collect::<ImportResult<Vec<_>>>()?;
            from_end.push((a, positions));
            continue;
        }
        if s < 0 || !ctx.symbols().prove_ge(n, &Dim::constant(s)) {
            return Err(why("a start that may lie past the axis's end"));
        }
        let end = match ends[k].as_const() {
            Some(e) if e >= i32::MAX as i64 => n.clone(),
            Some(e) if e < 0 => n.add_const(e).ok_or_else(overflow)?,
            _ if !ctx.symbols().prove_ge(&ends[k], &Dim::zero()) => {
                return Err(why("an end that may be negative"));
            }
            _ => Dim::min_of(&[n.clone(), ends[k].clone()]).ok_or_else(overflow)?,
        };
        let count = ctx
            .symbols()
            .simplify(&end.add_const(-s).ok_or_else(overflow)?);
        let count = clamped_at_zero(ctx, count)?;
        begin[a] = s as usize;
        out[a] = count;
    }
    let mut y = x;
    if out != xd {
        let shape = maxima(ctx, &out)?;
        let op = Op::Slice {
            starts: begin,
            steps: step_all,
            shape,
        };
        y = ctx.emit_with_dims(op, vec![Some(x)], vec![out])?[0];
    }
    for (axis, positions) in from_end {
        let op = Op::DimValues {
            values: positions,
            scalar: false,
        };
        let index = ctx.emit1(op, vec![])?;
        y = ctx.emit1(Op::Gather { axis }, vec![Some(y), Some(index)])?;
    }
    ctx.bind_output(0, y);
    Ok(())
}

/// Split along a fixed axis of a value whose other axes vary: one Slice per part.
fn split(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.required(0)?;
    let xt = ctx.ty(x).clone();
    let axis = normalize_axis(ctx.attrs.int("axis", 0)?, xt.rank())?;
    let Some(len) = xt.dim(axis).as_const() else {
        return Err(refusal(
            ctx,
            &format!("it splits axis {axis}, whose extent varies"),
        ));
    };
    let n_out = ctx.node.output.len();
    let sizes: Vec<i64> = match const_ints(ctx, 1, "split", 13)? {
        Some(s) => s,
        None => {
            let chunk = (len as usize).div_ceil(n_out.max(1)) as i64;
            (0..n_out as i64)
                .map(|i| chunk.min((len - i * chunk).max(0)))
                .collect()
        }
    };
    if sizes.len() != n_out || sizes.iter().any(|&s| s < 0) || sizes.iter().sum::<i64>() != len {
        return Err(format!("split sizes {sizes:?} do not cover axis {axis} of size {len}").into());
    }
    let mut start = 0usize;
    for (k, &part) in sizes.iter().enumerate() {
        let mut dims = xt.dims();
        dims[axis] = Dim::constant(part);
        let mut starts = vec![0; xt.rank()];
        starts[axis] = start;
        let op = Op::Slice {
            starts,
            steps: vec![1; xt.rank()],
            shape: maxima(ctx, &dims)?,
        };
        let y = ctx.emit_with_dims(op, vec![Some(x)], vec![dims])?;
        if let Some(name) = ctx.node.output.get(k).filter(|n| !n.is_empty()) {
            ctx.name_value(y[0], name.clone());
        }
        ctx.bind_output(k, y[0]);
        start += part as usize;
    }
    Ok(())
}

/// `max(d, 0)` as ONNX clamps a slice's or a range's count, the max gone where the
/// ranges keep `d` non-negative.
fn clamped_at_zero(ctx: &NodeCtx, d: Dim) -> ImportResult<Dim> {
    let m = Dim::max_of(&[d, Dim::zero()]).ok_or_else(overflow)?;
    Ok(ctx.symbols().simplify(&m))
}

/// Range with a limit set at run time: the first elements of the range at the
/// limit's largest value (a constant), as many as the limit leaves.
fn range(ctx: &mut NodeCtx) -> ImportResult {
    let scalar = |i: usize| -> ImportResult<Dim> {
        let v = ctx.required(i)?;
        match ctx.elements(v).as_deref() {
            Some([d]) => Ok(d.clone()),
            _ => Err(refusal(
                ctx,
                "its start, limit and delta must be integer scalars",
            )),
        }
    };
    let (start, limit, delta) = (scalar(0)?, scalar(1)?, scalar(2)?);
    let (Some(first), Some(step)) = (start.as_const(), delta.as_const()) else {
        return Err(refusal(ctx, "a start or delta set at run time"));
    };
    if step == 0 {
        return Err("delta is 0".into());
    }
    let span = limit.add_const(-first).ok_or_else(overflow)?;
    let count = ctx
        .symbols()
        .simplify(&span.ceil_div(&Dim::constant(step)).ok_or_else(overflow)?);
    let count = clamped_at_zero(ctx, count)?;
    let most = ctx.symbols().max_value(&count).ok_or_else(overflow)?.max(0) as usize;
    let dtype = ctx.input_ty(0)?.dtype;
    let all = TensorType::new(dtype, vec![most]);
    ctx.check_computed_constant(&all)?;
    let values: Vec<i64> = (0..most as i64).map(|k| first + k * step).collect();
    let t = Tensor::from_vec(&[most], values).cast(dtype);
    let c = ctx.constant_value("range", t);
    emit_dims(
        ctx,
        Op::Slice {
            starts: vec![0],
            steps: vec![1],
            shape: vec![most],
        },
        c,
        vec![count],
    )
}

/// Replaces each of the node's operands that holds extents by a `DimValues` node
/// computing them at run time.
fn materialize_extents(ctx: &mut NodeCtx) -> ImportResult {
    for i in 0..ctx.inputs.len() {
        let Some(v) = ctx.input(i) else { continue };
        let Some(values) = ctx.graph().value(v).dim_elements.clone() else {
            continue;
        };
        let ty = ctx.ty(v).clone();
        let op = Op::DimValues {
            values,
            scalar: ty.rank() == 0,
        };
        let mut m = ctx.emit1(op, vec![])?;
        if ty.dtype != DType::I64 {
            m = ctx.emit1(Op::Cast { to: ty.dtype }, vec![Some(m)])?;
        }
        ctx.inputs[i] = Some(m);
    }
    Ok(())
}

/// Arithmetic over values holding extents (the exporters' shape subgraphs): each
/// element an expression, the result bound as extents or, decided, as constants.
fn arithmetic(ctx: &mut NodeCtx, op: &str, importer: Importer) -> ImportResult {
    let n_in = ctx.inputs.len();
    let mut operands = Vec::with_capacity(n_in);
    // Where's condition is a constant, read below; its operands are 1 and 2.
    let first = usize::from(op == "Where");
    operands.extend((0..first).map(|_| (TensorType::new(DType::Bool, vec![]), vec![])));
    for i in first..n_in {
        let v = ctx.required(i)?;
        let Some(e) = ctx.elements(v) else {
            // Extents used as data (`arange(batch) * seq`): each operand holding
            // extents becomes a tensor of their values at run time.
            materialize_extents(ctx)?;
            return match EXTENT_FREE.contains(&op) {
                true => importer(ctx),
                false => Err(refusal(ctx, &format!("{op} cannot take it yet"))),
            };
        };
        operands.push((ctx.ty(v).clone(), e));
    }
    let len = operands.iter().map(|(_, e)| e.len()).max().unwrap_or(0);
    let scalar = operands[first..].iter().all(|(t, _)| t.rank() == 0);
    let shape = if scalar { vec![] } else { vec![len] };
    let at = |e: &Vec<Dim>, k: usize| -> ImportResult<Dim> {
        match e.len() {
            1 => Ok(e[0].clone()),
            n if n == len => Ok(e[k].clone()),
            _ => Err("extent lists of different lengths".into()),
        }
    };
    let dtype = operands[first].0.dtype;
    let symbols = ctx.symbols().clone();
    let nonneg = |d: &Dim| symbols.prove_ge(d, &Dim::zero());
    match op {
        "Identity" | "Cast" if n_in == 1 => {
            let to = match op {
                "Cast" => DType::from_onnx(ctx.attrs.int("to", 0)? as i32)
                    .ok_or("unsupported element type for Cast")?,
                _ => dtype,
            };
            if !to.is_int() {
                // An extent as a float (a position scale, a mean's count): data.
                materialize_extents(ctx)?;
                return importer(ctx);
            }
            let e = operands.remove(0).1;
            ctx.bind_elements(0, to, shape, e);
            Ok(())
        }
        "Neg" => {
            let e = (operands[0].1.iter())
                .map(|d| d.checked_neg())
                .collect::<Option<Vec<_>>>()
                .ok_or_else(overflow)?;
            ctx.bind_elements(0, dtype, shape, e);
            Ok(())
        }
        "Concat" => {
            let e: Vec<Dim> = operands.into_iter().flat_map(|(_, e)| e).collect();
            ctx.bind_elements(0, dtype, vec![e.len()], e);
            Ok(())
        }
        "Gather" => {
            let (data, idx) = (&operands[0].1, &operands[1]);
            let picked = (idx.1.iter())
                .map(|i| {
                    let i = i
                        .as_const()
                        .ok_or_else(|| refusal(ctx, "its indices must be constant"))?;
                    let j = if i < 0 { i + data.len() as i64 } else { i };
                    (data.get(j as usize).cloned())
                        .filter(|_| j >= 0)
                        .ok_or_else(|| ImportError::Invalid(format!("index {i} is out of range")))
                })
                .collect::<ImportResult<Vec<_>>>()?;
            let shape = if idx.0.rank() == 0 {
                vec![]
            } else {
                vec![picked.len()]
            };
            ctx.bind_elements(0, dtype, shape, picked);
            Ok(())
        }
        "Add" | "Sub" | "Mul" | "Div" | "Mod" | "Min" | "Max" => {
            let mut e = Vec::with_capacity(len);
            for k in 0..len {
                let (a, b) = (at(&operands[0].1, k)?, at(&operands[1].1, k)?);
                let r = match op {
                    "Add" => a.checked_add(&b),
                    "Sub" => a.checked_sub(&b),
                    "Mul" => a.checked_mul(&b),
                    // Integer Div truncates: floor division where both are
                    // non-negative and the divisor positive.
                    "Div" if nonneg(&a) && symbols.prove_ge(&b, &Dim::constant(1)) => {
                        a.floor_div(&b)
                    }
                    "Mod" if symbols.prove_ge(&b, &Dim::constant(1)) => a
                        .floor_div(&b)
                        .and_then(|q| q.checked_mul(&b))
                        .and_then(|m| a.checked_sub(&m)),
                    "Min" => Dim::min_of(&[a, b]).map(|d| symbols.simplify(&d)),
                    "Max" => Dim::max_of(&[a, b]).map(|d| symbols.simplify(&d)),
                    _ => {
                        return Err(refusal(
                            ctx,
                            &format!("{op} of extents that may be negative or zero"),
                        ))
                    }
                };
                e.push(r.ok_or_else(overflow)?);
            }
            ctx.bind_elements(0, dtype, shape, e);
            Ok(())
        }
        "Equal" | "Less" | "Greater" => {
            let mut out = Vec::with_capacity(len);
            for k in 0..len {
                let (a, b) = (at(&operands[0].1, k)?, at(&operands[1].1, k)?);
                let diff = a.checked_sub(&b).ok_or_else(overflow)?;
                let lo = symbols.min_value(&diff);
                let hi = symbols.max_value(&diff);
                let decided = match (op, lo, hi) {
                    ("Equal", Some(0), Some(0)) => Some(true),
                    ("Equal", Some(l), Some(h)) if l > 0 || h < 0 => Some(false),
                    ("Less", _, Some(h)) if h < 0 => Some(true),
                    ("Less", Some(l), _) if l >= 0 => Some(false),
                    ("Greater", Some(l), _) if l > 0 => Some(true),
                    ("Greater", _, Some(h)) if h <= 0 => Some(false),
                    _ => None,
                };
                out.push(decided.ok_or_else(|| {
                    refusal(ctx, &format!("{op} of extents the ranges do not decide"))
                })?);
            }
            let c = ctx.constant_value(ctx.name, Tensor::from_vec(&shape, out));
            ctx.bind_output(0, c);
            Ok(())
        }
        "Where" => {
            let cond = ctx
                .constant(ctx.required(0)?)
                .map(|t| t.to_i64_vec())
                .ok_or_else(|| refusal(ctx, "its condition must be constant"))?;
            let pick = |k: usize| cond[if cond.len() == 1 { 0 } else { k }] != 0;
            let mut e = Vec::with_capacity(len);
            for k in 0..len {
                e.push(if pick(k) {
                    at(&operands[1].1, k)?
                } else {
                    at(&operands[2].1, k)?
                });
            }
            let dtype = operands[1].0.dtype;
            ctx.bind_elements(0, dtype, shape, e);
            Ok(())
        }
        _ if EXTENT_FREE.contains(&op) => {
            materialize_extents(ctx)?;
            importer(ctx)
        }
        _ => Err(refusal(ctx, &format!("{op} cannot use them yet"))),
    }
}
