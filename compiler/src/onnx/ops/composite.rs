//! ONNX ops that decompose exactly into a few core ops: Trilu (constant mask + Where),
//! Hardmax (ArgMax + compare with a constant range), OneHot (compare with a constant
//! range + Where), LpNormalization (ReduceL1/L2 + Div, 0 where the norm is 0), Swish
//! (x · sigmoid(αx)), SwiGLU (Swish(A) · B), Shrink (two compares + Where), EyeLike (a
//! constant) and CenterCropPad (one Pad whose negative pads crop).

use super::elementwise::scalar_of;
use crate::ir::{DType, Tensor, ValueId};
use crate::onnx::attributes::normalize_axis;
use crate::onnx::import::{ImportError, ImportResult, NodeCtx};
use crate::ops::{
    ArgReduceAttrs, BinaryOp, Op, PadAttrs, PadMode, ReduceAttrs, ReduceKind, UnaryOp,
};

/// The single element of a constant input (k, depth...), if given.
fn const_scalar(ctx: &NodeCtx, i: usize, what: &str) -> ImportResult<Option<f64>> {
    match ctx.const_input(i, what)? {
        None => Ok(None),
        Some(t) if t.len() == 1 => Ok(Some(t.to_f64_vec()[0])),
        Some(t) => Err(format!("{what} must hold one element, got shape {:?}", t.shape()).into()),
    }
}

/// `[0, 1, ..., n-1]` of `dtype`, shaped `[n, 1, ..., 1]` with `trailing` ones so it
/// runs along the axis that many places from the end.
fn range_along(dtype: DType, n: usize, trailing: usize) -> Tensor {
    let mut shape = vec![n];
    shape.resize(trailing + 1, 1);
    Tensor::from_vec(&shape, (0..n).map(|v| v as f64).collect::<Vec<f64>>()).cast(dtype)
}

pub fn trilu(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    if x.rank() < 2 {
        return Err("input must have rank ≥ 2".into());
    }
    let upper = ctx.attrs.flag("upper", true)?;
    let (n, m) = (x.shape[x.rank() - 2], x.shape[x.rank() - 1]);
    let k_input = ctx.input(1);
    let mask = match k_input.filter(|v| ctx.constant(*v).is_none()) {
        // A k given at run time: the mask compares each diagonal index `j - i` with it.
        Some(k) => {
            let kt = ctx.ty(k).clone();
            if kt.dtype != DType::I64 || kt.numel() != 1 {
                return Err(format!("k must be one int64, not {kt}").into());
            }
            ctx.check_computed_constant(&crate::ir::TensorType::new(DType::I64, vec![n, m]))?;
            let diagonal: Vec<i64> = (0..n as i64)
                .flat_map(|i| (0..m as i64).map(move |j| j - i))
                .collect();
            let diagonal =
                ctx.constant_value("trilu_diagonal", Tensor::from_vec(&[n, m], diagonal));
            let k = if kt.rank() == 0 {
                k
            } else {
                ctx.emit1(Op::Reshape { shape: vec![] }, vec![Some(k)])?
            };
            let cmp = if upper {
                BinaryOp::GreaterOrEqual
            } else {
                BinaryOp::LessOrEqual
            };
            ctx.emit1(Op::Binary(cmp), vec![Some(diagonal), Some(k)])?
        }
        None => {
            let k = const_scalar(ctx, 1, "k")?.unwrap_or(0.0) as i64;
            let mask: Vec<bool> = (0..n as i64)
                .flat_map(|i| {
                    (0..m as i64).map(move |j| if upper { j - i >= k } else { j - i <= k })
                })
                .collect();
            ctx.constant_value("trilu_mask", Tensor::from_vec(&[n, m], mask))
        }
    };
    // Extents set at run time: the mask at the largest ones, its leading block used
    // (each entry depends only on its row, column and k).
    let mask = match (x.dim(x.rank() - 2), x.dim(x.rank() - 1)) {
        (r, c) if r.is_const() && c.is_const() => mask,
        (r, c) => super::build::slice_dims(ctx, mask, vec![0, 0], vec![r, c])?,
    };
    let zero = ctx.constant_value("zero", scalar_of(x.dtype, 0.0));
    let y = ctx.emit1(
        Op::Where,
        vec![Some(mask), Some(ctx.required(0)?), Some(zero)],
    )?;
    ctx.bind_output(0, y);
    Ok(())
}

/// 1 at the first maximum along `axis`, 0 elsewhere.
fn hardmax_along(ctx: &mut NodeCtx, v: ValueId, axis: usize) -> ImportResult<ValueId> {
    let t = ctx.ty(v).clone();
    let arg = ArgReduceAttrs {
        max: true,
        axis,
        keepdims: true,
        select_last_index: false,
    };
    let am = ctx.emit1(Op::ArgReduce(arg), vec![Some(v)])?;
    ctx.check_computed_constant(&crate::ir::TensorType::new(DType::F64, vec![t.shape[axis]]))?;
    let range = ctx.constant_value(
        "hardmax_range",
        range_along(DType::I64, t.shape[axis], t.rank() - axis - 1),
    );
    let hit = ctx.emit1(Op::Binary(BinaryOp::Equal), vec![Some(am), Some(range)])?;
    ctx.emit1(Op::Cast { to: t.dtype }, vec![Some(hit)])
}

/// Hardmax; before opset 13 the input is flattened to 2-D at `axis` (as Softmax).
pub fn hardmax(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let xv = ctx.required(0)?;
    if x.numel() == 0 {
        return Err(ImportError::Unsupported(
            "Hardmax of an empty tensor".into(),
        ));
    }
    let y = if ctx.opset() >= 13 {
        let axis = normalize_axis(ctx.attrs.int("axis", -1)?, x.rank())?;
        hardmax_along(ctx, xv, axis)?
    } else {
        let axis = normalize_axis(ctx.attrs.int("axis", 1)?, x.rank())?;
        let rows: usize = x.shape[..axis].iter().product();
        let cols: usize = x.shape[axis..].iter().product();
        let flat = ctx.emit1(
            Op::Reshape {
                shape: vec![rows, cols],
            },
            vec![Some(xv)],
        )?;
        let h = hardmax_along(ctx, flat, 1)?;
        ctx.emit1(
            Op::Reshape {
                shape: x.shape.clone(),
            },
            vec![Some(h)],
        )?
    };
    ctx.bind_output(0, y);
    Ok(())
}

/// OneHot with a constant depth: indices in `[-depth, depth)` (negative ones wrap,
/// floats are truncated to int64 first) select `values[1]`, everything else is
/// `values[0]`.
pub fn one_hot(ctx: &mut NodeCtx) -> ImportResult {
    let ind = ctx.input_ty(0)?;
    let depth = const_scalar(ctx, 1, "depth")?.ok_or("input 'depth' is required")?;
    if depth.is_nan() || depth < 1.0 {
        return Err(format!("depth must be positive, got {depth}").into());
    }
    let depth = depth as usize;
    // The index range compared against is a constant of `depth` elements.
    ctx.check_computed_constant(&crate::ir::TensorType::new(DType::F64, vec![depth]))?;
    let values = ctx.input_ty(2)?;
    if values.numel() != 2 {
        return Err("values must hold [off_value, on_value]".into());
    }
    let r = ind.rank();
    let axis = normalize_axis(ctx.attrs.int("axis", -1)?, r + 1)?;
    let mut iv = ctx.required(0)?;
    // The spec casts non-integer indices to int64 first.
    let work = if ind.dtype.is_int() {
        ind.dtype
    } else {
        DType::I64
    };
    if work != ind.dtype {
        iv = ctx.emit1(Op::Cast { to: work }, vec![Some(iv)])?;
    }
    if work.is_signed_int() {
        let zero = ctx.constant_value("zero", scalar_of(work, 0.0));
        let d = ctx.constant_value("depth", scalar_of(work, depth as f64));
        let neg = ctx.emit1(Op::Binary(BinaryOp::Less), vec![Some(iv), Some(zero)])?;
        let wrapped = ctx.emit1(Op::Binary(BinaryOp::Add), vec![Some(iv), Some(d)])?;
        iv = ctx.emit1(Op::Where, vec![Some(neg), Some(wrapped), Some(iv)])?;
    }
    let mut shape = ind.shape.clone();
    shape.insert(axis, 1);
    let iv = ctx.emit1(Op::Reshape { shape }, vec![Some(iv)])?;
    let range = ctx.constant_value("onehot_range", range_along(work, depth, r - axis));
    let hit = ctx.emit1(Op::Binary(BinaryOp::Equal), vec![Some(iv), Some(range)])?;
    let vv = ctx.required(2)?;
    let flat = ctx.emit1(Op::Reshape { shape: vec![2] }, vec![Some(vv)])?;
    let pick = |i: usize| Op::Slice {
        starts: vec![i],
        steps: vec![1],
        shape: vec![1],
    };
    let off = ctx.emit1(pick(0), vec![Some(flat)])?;
    let on = ctx.emit1(pick(1), vec![Some(flat)])?;
    let y = ctx.emit1(Op::Where, vec![Some(hit), Some(on), Some(off)])?;
    ctx.bind_output(0, y);
    Ok(())
}

pub fn lp_normalization(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let axis = normalize_axis(ctx.attrs.int("axis", -1)?, x.rank())?;
    let kind = match ctx.attrs.int("p", 2)? {
        1 => ReduceKind::L1,
        2 => ReduceKind::L2,
        p => return Err(format!("p must be 1 or 2, got {p}").into()),
    };
    let xv = ctx.required(0)?;
    let norm = ctx.emit1(
        Op::Reduce(ReduceAttrs {
            kind,
            axes: vec![axis],
            keepdims: true,
        }),
        vec![Some(xv)],
    )?;
    let q = ctx.emit1(Op::Binary(BinaryOp::Div), vec![Some(xv), Some(norm)])?;
    // A zero norm gives 0, not 0/0 (the reference's `where(norm == 0, 0, x / norm)`).
    let zero = ctx.constant_value("zero", scalar_of(x.dtype, 0.0));
    let is_zero = ctx.emit1(Op::Binary(BinaryOp::Equal), vec![Some(norm), Some(zero)])?;
    let y = ctx.emit1(Op::Where, vec![Some(is_zero), Some(zero), Some(q)])?;
    ctx.bind_output(0, y);
    Ok(())
}

/// `x · sigmoid(alpha · x)`.
fn swish_of(ctx: &mut NodeCtx, xv: ValueId, alpha: f32) -> ImportResult<ValueId> {
    let dtype = ctx.ty(xv).dtype;
    let scaled = if alpha == 1.0 {
        xv
    } else {
        let a = ctx.constant_value("alpha", scalar_of(dtype, alpha as f64));
        ctx.emit1(Op::Binary(BinaryOp::Mul), vec![Some(xv), Some(a)])?
    };
    let s = ctx.emit1(Op::Unary(UnaryOp::Sigmoid), vec![Some(scaled)])?;
    ctx.emit1(Op::Binary(BinaryOp::Mul), vec![Some(xv), Some(s)])
}

/// Swish (opset 24): `x · sigmoid(alpha · x)`.
pub fn swish(ctx: &mut NodeCtx) -> ImportResult {
    let alpha = ctx.attrs.float("alpha", 1.0)?;
    let y = swish_of(ctx, ctx.required(0)?, alpha)?;
    ctx.bind_output(0, y);
    Ok(())
}

/// SwiGLU (opset 28): `Swish_alpha(A) · B`, A and B of one shape (no broadcasting).
pub fn swiglu(ctx: &mut NodeCtx) -> ImportResult {
    let (a, b) = (ctx.input_ty(0)?, ctx.input_ty(1)?);
    if a.shape != b.shape {
        return Err(format!("A {a} and B {b} must have the same shape").into());
    }
    let alpha = ctx.attrs.float("alpha", 1.0)?;
    let gate = swish_of(ctx, ctx.required(0)?, alpha)?;
    let y = ctx.emit1(
        Op::Binary(BinaryOp::Mul),
        vec![Some(gate), Some(ctx.required(1)?)],
    )?;
    ctx.bind_output(0, y);
    Ok(())
}

/// Shrink: `x + bias` below `-lambd`, `x - bias` above `lambd`, 0 between. Integer
/// inputs are computed in float64 and truncated back, as the float attributes demand.
pub fn shrink(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let lambd = ctx.attrs.float("lambd", 0.5)? as f64;
    let bias = ctx.attrs.float("bias", 0.0)? as f64;
    let work = if x.dtype.is_float() {
        x.dtype
    } else {
        DType::F64
    };
    let mut xv = ctx.required(0)?;
    if work != x.dtype {
        xv = ctx.emit1(Op::Cast { to: work }, vec![Some(xv)])?;
    }
    let mut c = |name: &str, v: f64| ctx.constant_value(name, scalar_of(work, v));
    let (neg_l, pos_l, b, zero) = (
        c("-lambd", -lambd),
        c("lambd", lambd),
        c("bias", bias),
        c("zero", 0.0),
    );
    let bin = |op| Op::Binary(op);
    let below = ctx.emit1(bin(BinaryOp::Less), vec![Some(xv), Some(neg_l)])?;
    let above = ctx.emit1(bin(BinaryOp::Greater), vec![Some(xv), Some(pos_l)])?;
    let plus = ctx.emit1(bin(BinaryOp::Add), vec![Some(xv), Some(b)])?;
    let minus = ctx.emit1(bin(BinaryOp::Sub), vec![Some(xv), Some(b)])?;
    let hi = ctx.emit1(Op::Where, vec![Some(above), Some(minus), Some(zero)])?;
    let mut y = ctx.emit1(Op::Where, vec![Some(below), Some(plus), Some(hi)])?;
    if work != x.dtype {
        y = ctx.emit1(Op::Cast { to: x.dtype }, vec![Some(y)])?;
    }
    ctx.bind_output(0, y);
    Ok(())
}

/// EyeLike: ones on diagonal `k` of a 2-D shape, a constant.
pub fn eye_like(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let [n, m] = x.shape[..] else {
        return Err("input must be 2-D".into());
    };
    let dtype = match ctx.attrs.int_opt("dtype")? {
        Some(code) => DType::from_onnx(code as i32)
            .ok_or_else(|| ImportError::Unsupported(format!("data type {code}")))?,
        None => x.dtype,
    };
    let k = ctx.attrs.int("k", 0)?;
    let eye: Vec<f64> = (0..n as i64)
        .flat_map(|i| (0..m as i64).map(move |j| if j - i == k { 1.0 } else { 0.0 }))
        .collect();
    let v = ctx.constant_value(ctx.name, Tensor::from_vec(&[n, m], eye).cast(dtype));
    ctx.bind_output(0, v);
    Ok(())
}

/// CenterCropPad: per listed axis, crop `(dim - target) / 2` elements from the start
/// (the rest from the end) or pad `(target - dim) / 2` zeros before (the rest after).
pub fn center_crop_pad(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let r = x.rank();
    let target = ctx
        .const_input(1, "shape")?
        .ok_or("input 'shape' is required")?
        .to_i64_vec();
    let axes = match ctx.attrs.ints_opt("axes")? {
        Some(a) => a
            .iter()
            .map(|&a| normalize_axis(a, r))
            .collect::<Result<Vec<_>, _>>()?,
        None => (0..r).collect(),
    };
    if axes.len() != target.len() {
        return Err(format!("shape has {} entries for {} axes", target.len(), axes.len()).into());
    }
    let mut pads = vec![0i64; 2 * r];
    for (&a, &t) in axes.iter().zip(&target) {
        if t < 0 {
            return Err(format!("negative target size {t}").into());
        }
        let diff = t - x.shape[a] as i64;
        // Crops (diff < 0) are negative pads; the smaller half goes first either way.
        let first = if diff >= 0 { diff / 2 } else { -((-diff) / 2) };
        pads[a] = first;
        pads[r + a] = diff - first;
    }
    let op = Op::Pad(PadAttrs {
        mode: PadMode::Constant,
        pads,
        value: 0.0,
    });
    let y = ctx.emit1(op, vec![Some(ctx.required(0)?)])?;
    ctx.bind_output(0, y);
    Ok(())
}
