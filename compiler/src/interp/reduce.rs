//! Reductions (Sum, Mean, Max, Min, Prod, L1, L2, LogSum, LogSumExp, SumSquare) and
//! ArgMax / ArgMin.
//!
//! The input is transposed so that the reduced axes are innermost; every output element
//! then reduces one contiguous chunk. Floats are reduced in f64 (compensated sums) and
//! rounded once; integers wrap like numpy. An empty reduction gives what the ONNX
//! reference gives: 0 for sums, 1 for Prod, −∞ (or the type's minimum, or false) for
//! Max, +∞ (or the maximum, or true) for Min, −∞ for LogSum and LogSumExp, NaN for a
//! float Mean.

use ndarray::{ArrayD, IxDyn};

use super::scalar::{Int, Num};
use super::{f64_to_float, float_to_f64, unsupported};
use crate::ir::{Element, Tensor};
use crate::ops::{ArgReduceAttrs, ReduceAttrs, ReduceKind};
use crate::with_tensor;

pub(super) fn reduce(r: &ReduceAttrs, x: &Tensor) -> Result<Tensor, String> {
    let rank = x.shape().len();
    if r.axes.iter().any(|&a| a >= rank) || r.axes.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!(
            "axes {:?} must be sorted, unique and below rank {rank}",
            r.axes
        ));
    }
    let out_shape = reduced_shape(x.shape(), &r.axes, r.keepdims);
    match x {
        Tensor::Bool(a) => {
            let y = chunks(a, &r.axes, |c| match r.kind {
                ReduceKind::Max => Ok(c.iter().any(|&v| v)),
                ReduceKind::Min => Ok(c.iter().all(|&v| v)),
                kind => Err(format!("{kind:?} is not defined for bool")),
            })?;
            shaped(y, &out_shape).map(Tensor::Bool)
        }
        t if t.dtype().is_float() => {
            let a = float_to_f64(t).ok_or_else(|| unsupported(t.dtype()))?;
            let y = chunks(&a, &r.axes, |c| Ok(float_reduce(r.kind, c)))?;
            f64_to_float(shaped(y, &out_shape)?, t.dtype())
        }
        t => with_int!(t, a => {
            let y = chunks(a, &r.axes, |c| int_reduce(r.kind, c))?;
            shaped(y, &out_shape).map(Element::wrap)
        }, _ => Err(unsupported(t.dtype()))),
    }
}

/// The shape after reducing `axes` (kept as 1s with `keepdims`).
fn reduced_shape(shape: &[usize], axes: &[usize], keepdims: bool) -> Vec<usize> {
    shape
        .iter()
        .enumerate()
        .filter_map(|(i, &d)| match (axes.contains(&i), keepdims) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

/// Applies `f` to each group of elements that reduces to one output, in row-major order
/// of the kept axes.
fn chunks<T: Copy, R>(
    a: &ArrayD<T>,
    axes: &[usize],
    f: impl FnMut(&[T]) -> Result<R, String>,
) -> Result<Vec<R>, String> {
    let rank = a.ndim();
    let kept_axes: Vec<usize> = (0..rank).filter(|i| !axes.contains(i)).collect();
    let chunk: usize = axes.iter().map(|&i| a.shape()[i]).product();
    let kept: usize = kept_axes.iter().map(|&i| a.shape()[i]).product();
    if chunk == 0 {
        return std::iter::repeat_n(&[] as &[T], kept).map(f).collect();
    }
    let mut order = kept_axes;
    order.extend(axes);
    let permuted = a.view().permuted_axes(IxDyn(&order));
    let standard = permuted.as_standard_layout();
    let flat = standard
        .as_slice()
        .ok_or("reduction input is not contiguous")?;
    flat.chunks_exact(chunk).map(f).collect()
}

fn shaped<T>(values: Vec<T>, shape: &[usize]) -> Result<ArrayD<T>, String> {
    ArrayD::from_shape_vec(IxDyn(shape), values).map_err(|e| e.to_string())
}

/// Neumaier-compensated sum, accurate for f64 inputs too.
fn sum(values: impl Iterator<Item = f64>) -> f64 {
    let (mut total, mut compensation) = (0.0f64, 0.0f64);
    for v in values {
        let t = total + v;
        if total.abs() >= v.abs() {
            compensation += (total - t) + v;
        } else {
            compensation += (v - t) + total;
        }
        total = t;
    }
    // With infinities the compensation is NaN; the plain sum is the answer then.
    if compensation.is_finite() {
        total + compensation
    } else {
        total
    }
}

/// IEEE 754-2019 `maximum`: NaN propagates and +0 is above −0, so the result does not
/// depend on the order of the elements (the compiled reductions' vector lanes fold them
/// in another order than this loop).
fn ieee_max(m: f64, v: f64) -> f64 {
    if m == v {
        if m.is_sign_negative() {
            v
        } else {
            m
        }
    } else {
        m.max_nan(v)
    }
}

/// IEEE 754-2019 `minimum`: NaN propagates and −0 is below +0 (see [`ieee_max`]).
fn ieee_min(m: f64, v: f64) -> f64 {
    if m == v {
        if m.is_sign_negative() {
            m
        } else {
            v
        }
    } else {
        m.min_nan(v)
    }
}

fn float_reduce(kind: ReduceKind, c: &[f64]) -> f64 {
    match kind {
        ReduceKind::Sum => sum(c.iter().copied()),
        ReduceKind::Mean => sum(c.iter().copied()) / c.len() as f64,
        ReduceKind::Max => c.iter().fold(f64::NEG_INFINITY, |m, &v| ieee_max(m, v)),
        ReduceKind::Min => c.iter().fold(f64::INFINITY, |m, &v| ieee_min(m, v)),
        ReduceKind::Prod => c.iter().product(),
        ReduceKind::L1 => sum(c.iter().map(|v| v.abs())),
        ReduceKind::L2 => sum(c.iter().map(|v| v * v)).sqrt(),
        ReduceKind::SumSquare => sum(c.iter().map(|v| v * v)),
        ReduceKind::LogSum => sum(c.iter().copied()).ln(),
        ReduceKind::LogSumExp => log_sum_exp(c),
    }
}

/// ln Σ exp(x), shifted by the largest finite element as the ONNX reference does (so an
/// all-infinite input gives what the reference gives: ±∞ or NaN).
fn log_sum_exp(c: &[f64]) -> f64 {
    if c.is_empty() {
        return f64::NEG_INFINITY;
    }
    let shift = c
        .iter()
        .filter(|v| !v.is_infinite())
        .fold(f64::NEG_INFINITY, |m, &v| m.max_nan(v));
    sum(c.iter().map(|&v| (v - shift).exp())).ln() + shift
}

fn int_reduce<T: Int>(kind: ReduceKind, c: &[T]) -> Result<T, String> {
    let wrapping_sum = |f: fn(T) -> T| c.iter().fold(T::ZERO, |s, &v| s.add(f(v)));
    Ok(match kind {
        ReduceKind::Sum => wrapping_sum(|v| v),
        ReduceKind::Mean => {
            if c.is_empty() {
                return Err("integer mean of an empty set".into());
            }
            // numpy: the (wrapping) sum divided by the count, truncated toward zero.
            T::from_i128_wrapping(wrapping_sum(|v| v).to_i128() / c.len() as i128)
        }
        ReduceKind::Max => c.iter().fold(T::lowest(), |m, &v| m.max(v)),
        ReduceKind::Min => c.iter().fold(T::highest(), |m, &v| m.min(v)),
        ReduceKind::Prod => c.iter().fold(T::ONE, |p, &v| p.mul(v)),
        ReduceKind::L1 => wrapping_sum(T::abs),
        ReduceKind::SumSquare => wrapping_sum(|v| v.mul(v)),
        // numpy: the square root of the sum of squares in float64, truncated back.
        ReduceKind::L2 => T::from_f64(
            c.iter()
                .map(|v| v.to_f64() * v.to_f64())
                .sum::<f64>()
                .sqrt(),
        ),
        ReduceKind::LogSum | ReduceKind::LogSumExp => {
            return Err(format!("{kind:?} is not defined for integer types"));
        }
    })
}

pub(super) fn arg_reduce(a: &ArgReduceAttrs, x: &Tensor) -> Result<Tensor, String> {
    let rank = x.shape().len();
    if a.axis >= rank {
        return Err(format!("axis {} is out of range for rank {rank}", a.axis));
    }
    if x.shape()[a.axis] == 0 {
        return Err("ArgMax/ArgMin of an empty axis".into());
    }
    let out_shape = reduced_shape(x.shape(), &[a.axis], a.keepdims);
    let indices = with_tensor!(x, v => chunks(v, &[a.axis], |c| Ok(arg_best(c, a.max, a.select_last_index))))?;
    shaped(indices, &out_shape).map(Tensor::I64)
}

/// Index of the largest (or smallest) element; ties go to the first (or, with
/// `last`, the last) occurrence. NaN counts as the extreme, as in numpy's argmax/argmin.
fn arg_best<T: Copy + PartialOrd>(c: &[T], max: bool, last: bool) -> i64 {
    let is_nan = |v: T| v.partial_cmp(&v).is_none();
    let mut best = 0;
    for (i, &v) in c.iter().enumerate().skip(1) {
        let b = c[best];
        let better = !is_nan(b) && (is_nan(v) || if max { v > b } else { v < b });
        let equal = (is_nan(v) && is_nan(b)) || v == b;
        if better || (last && equal) {
            best = i;
        }
    }
    best as i64
}
