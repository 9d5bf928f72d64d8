//! Index-driven data movement and scans: GatherElements, GatherND, ScatterElements,
//! ScatterND, CumSum and TopK.
//!
//! Indices may be negative (they count from the end of their axis); an index outside
//! `[-dim, dim)` is an error here, as in the generated code with `--index-checks error`
//! (which returns NNC_ERR_INDEX_OUT_OF_RANGE; `clamp` clamps instead). Scatter updates are applied in
//! row-major order of the indices, so with duplicate indices and no reduction the last
//! update wins, as in the reference.

use ndarray::{ArrayD, IxDyn};

use super::{array_ref, f64_to_float, float_to_f64, unsupported};
use crate::ir::{DType, Element, Tensor};
use crate::ops::ScatterReduction;
use crate::with_tensor;

/// Row-major strides (in elements).
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Resolves a possibly negative index along an axis of `dim` elements.
fn resolve(i: i64, dim: usize) -> Result<usize, String> {
    let d = dim as i64;
    let j = if i < 0 { i + d } else { i };
    if (0..d).contains(&j) {
        Ok(j as usize)
    } else {
        Err(format!("index {i} is out of range for an axis of {dim}"))
    }
}

/// The indices as i64; a u64 index above `i64::MAX` is out of range (not a negative
/// index that wraps), as in the generated code.
pub(super) fn index_values(indices: &Tensor) -> Result<Vec<i64>, String> {
    if !indices.dtype().is_int() {
        return Err(format!("indices must be integers, got {}", indices.dtype()));
    }
    if let Tensor::U64(a) = indices {
        if let Some(big) = a.iter().find(|&&v| i64::try_from(v).is_err()) {
            return Err(format!("index {big} is out of range"));
        }
    }
    Ok(indices.to_i64_vec())
}

pub(super) fn elements<T: Element>(a: &ArrayD<T>) -> Vec<T> {
    a.iter().copied().collect()
}

fn shaped<T: Element>(shape: &[usize], v: Vec<T>) -> Result<Tensor, String> {
    Ok(T::wrap(
        ArrayD::from_shape_vec(IxDyn(shape), v).map_err(|e| e.to_string())?,
    ))
}

/// Offsets into `data` of every element `GatherElements`/`ScatterElements` addresses,
/// in row-major order of `indices`.
fn element_offsets(
    data_shape: &[usize],
    index_shape: &[usize],
    idx: &[i64],
    axis: usize,
) -> Result<Vec<usize>, String> {
    let rank = data_shape.len();
    if index_shape.len() != rank || axis >= rank {
        return Err(format!(
            "indices {index_shape:?} must have the rank of data {data_shape:?} (axis {axis})"
        ));
    }
    if (0..rank).any(|d| d != axis && index_shape[d] > data_shape[d]) {
        return Err(format!(
            "indices {index_shape:?} exceed data {data_shape:?} off the axis {axis}"
        ));
    }
    let ds = strides(data_shape);
    let is = strides(index_shape);
    idx.iter()
        .enumerate()
        .map(|(flat, &i)| {
            let mut off = 0;
            for d in 0..rank {
                let c = if d == axis {
                    resolve(i, data_shape[axis])?
                } else {
                    flat / is[d] % index_shape[d]
                };
                off += c * ds[d];
            }
            Ok(off)
        })
        .collect()
}

pub(super) fn gather_elements(
    data: &Tensor,
    indices: &Tensor,
    axis: usize,
) -> Result<Tensor, String> {
    let idx = index_values(indices)?;
    let offsets = element_offsets(data.shape(), indices.shape(), &idx, axis)?;
    fn go<T: Element>(a: &ArrayD<T>, offsets: &[usize], shape: &[usize]) -> Result<Tensor, String> {
        let src = elements(a);
        shaped(shape, offsets.iter().map(|&o| src[o]).collect())
    }
    with_tensor!(data, a => go(a, &offsets, indices.shape()))
}

/// `reduction(current, update)` in the element type: floats through f64 (exact for
/// add and mul of two values, then rounded once), integers wrapping, NaN propagating
/// through max and min.
fn combine<T: Element>(reduction: ScatterReduction, cur: T, upd: T) -> T {
    let float = T::DTYPE.is_float();
    let is_nan = |v: T| float && v.to_f64().is_nan();
    match reduction {
        ScatterReduction::None => upd,
        ScatterReduction::Add if float => T::from_f64(cur.to_f64() + upd.to_f64()),
        ScatterReduction::Add => T::from_i64(cur.to_i64().wrapping_add(upd.to_i64())),
        ScatterReduction::Mul if float => T::from_f64(cur.to_f64() * upd.to_f64()),
        ScatterReduction::Mul => T::from_i64(cur.to_i64().wrapping_mul(upd.to_i64())),
        ScatterReduction::Max if is_nan(upd) || upd > cur => upd,
        ScatterReduction::Min if is_nan(upd) || upd < cur => upd,
        ScatterReduction::Max | ScatterReduction::Min => cur,
    }
}

fn updates_of<T: Element>(updates: &Tensor) -> Result<&ArrayD<T>, String> {
    array_ref::<T>(updates)
        .ok_or_else(|| format!("updates are {} but data is {}", updates.dtype(), T::DTYPE))
}

pub(super) fn scatter_elements(
    data: &Tensor,
    indices: &Tensor,
    updates: &Tensor,
    axis: usize,
    reduction: ScatterReduction,
) -> Result<Tensor, String> {
    if updates.shape() != indices.shape() {
        return Err(format!(
            "updates {:?} must be shaped like indices {:?}",
            updates.shape(),
            indices.shape()
        ));
    }
    let idx = index_values(indices)?;
    let offsets = element_offsets(data.shape(), indices.shape(), &idx, axis)?;
    fn go<T: Element>(
        a: &ArrayD<T>,
        updates: &Tensor,
        offsets: &[usize],
        r: ScatterReduction,
    ) -> Result<Tensor, String> {
        let mut out = elements(a);
        let upd = updates_of::<T>(updates)?;
        for (&o, &u) in offsets.iter().zip(upd.iter()) {
            out[o] = combine(r, out[o], u);
        }
        shaped(a.shape(), out)
    }
    with_tensor!(data, a => go(a, updates, &offsets, reduction))
}

/// The `[tuples, k]` layout of ND indices: how many index tuples, and their length.
fn nd_tuples(index_shape: &[usize]) -> Result<(usize, usize), String> {
    let (&k, lead) = index_shape
        .split_last()
        .ok_or("indices must have rank ≥ 1")?;
    Ok((lead.iter().product(), k))
}

pub(super) fn scatter_nd(
    data: &Tensor,
    indices: &Tensor,
    updates: &Tensor,
    reduction: ScatterReduction,
) -> Result<Tensor, String> {
    let ds = data.shape().to_vec();
    let (tuples, k) = nd_tuples(indices.shape())?;
    if k > ds.len() {
        return Err(format!(
            "index tuples of {k} exceed the rank of data {ds:?}"
        ));
    }
    let mut want = indices.shape()[..indices.shape().len() - 1].to_vec();
    want.extend(&ds[k..]);
    if updates.shape() != want.as_slice() {
        return Err(format!(
            "updates {:?} must have shape {want:?}",
            updates.shape()
        ));
    }
    let idx = index_values(indices)?;
    let st = strides(&ds);
    let slice: usize = ds[k..].iter().product();
    let bases = (0..tuples)
        .map(|j| {
            (0..k).try_fold(0, |acc, d| {
                Ok::<_, String>(acc + resolve(idx[j * k + d], ds[d])? * st[d])
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    fn go<T: Element>(
        a: &ArrayD<T>,
        updates: &Tensor,
        bases: &[usize],
        slice: usize,
        r: ScatterReduction,
    ) -> Result<Tensor, String> {
        let mut out = elements(a);
        let upd = elements(updates_of::<T>(updates)?);
        for (j, &base) in bases.iter().enumerate() {
            for e in 0..slice {
                out[base + e] = combine(r, out[base + e], upd[j * slice + e]);
            }
        }
        shaped(a.shape(), out)
    }
    with_tensor!(data, a => go(a, updates, &bases, slice, reduction))
}

pub(super) fn gather_nd(
    data: &Tensor,
    indices: &Tensor,
    batch_dims: usize,
) -> Result<Tensor, String> {
    let ds = data.shape().to_vec();
    let is = indices.shape().to_vec();
    let (tuples, k) = nd_tuples(&is)?;
    if batch_dims >= is.len() || batch_dims + k > ds.len() || ds[..batch_dims] != is[..batch_dims] {
        return Err(format!(
            "GatherND of {ds:?} by {is:?} with {batch_dims} batch axes is invalid"
        ));
    }
    let idx = index_values(indices)?;
    let st = strides(&ds);
    let batch_size: usize = ds[batch_dims..].iter().product();
    let per_batch: usize = is[batch_dims..is.len() - 1].iter().product();
    let slice: usize = ds[batch_dims + k..].iter().product();
    let bases = (0..tuples)
        .map(|j| {
            let batch = j.checked_div(per_batch).unwrap_or(0);
            (0..k).try_fold(batch * batch_size, |acc, d| {
                Ok::<_, String>(
                    acc + resolve(idx[j * k + d], ds[batch_dims + d])? * st[batch_dims + d],
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut shape = is[..is.len() - 1].to_vec();
    shape.extend(&ds[batch_dims + k..]);
    fn go<T: Element>(
        a: &ArrayD<T>,
        bases: &[usize],
        slice: usize,
        shape: &[usize],
    ) -> Result<Tensor, String> {
        let src = elements(a);
        shaped(
            shape,
            bases
                .iter()
                .flat_map(|&b| src[b..b + slice].iter().copied())
                .collect(),
        )
    }
    with_tensor!(data, a => go(a, &bases, slice, &shape))
}

/// `(outer, dim, inner)` of a row-major shape around `axis`.
pub(super) fn split_at_axis(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (
        shape[..axis].iter().product(),
        shape[axis],
        shape[axis + 1..].iter().product(),
    )
}

/// Cumulative sum along `axis`: floats accumulate in f64 and each output is rounded
/// once; integers wrap.
pub(super) fn cumsum(
    x: &Tensor,
    axis: usize,
    exclusive: bool,
    reverse: bool,
    product: bool,
) -> Result<Tensor, String> {
    let shape = x.shape().to_vec();
    if axis >= shape.len() {
        return Err(format!(
            "axis {axis} is out of range for rank {}",
            shape.len()
        ));
    }
    let (outer, dim, inner) = split_at_axis(&shape, axis);
    fn scan<A: Copy>(
        v: &[A],
        out: &mut [A],
        zero: A,
        add: impl Fn(A, A) -> A,
        (outer, dim, inner): (usize, usize, usize),
        exclusive: bool,
        reverse: bool,
    ) {
        for o in 0..outer {
            for i in 0..inner {
                let mut acc = zero;
                for t in 0..dim {
                    let p = if reverse { dim - 1 - t } else { t };
                    let at = (o * dim + p) * inner + i;
                    if exclusive {
                        out[at] = acc;
                        acc = add(acc, v[at]);
                    } else {
                        acc = add(acc, v[at]);
                        out[at] = acc;
                    }
                }
            }
        }
    }
    let dims = (outer, dim, inner);
    match x {
        t if t.dtype().is_float() => {
            let a = float_to_f64(t).ok_or_else(|| unsupported(t.dtype()))?;
            let v: Vec<f64> = a.iter().copied().collect();
            let mut out = vec![0.0; v.len()];
            if product {
                // Multiplied in the element type's precision when it is float32 or
                // narrower, as the compiled kernel and onnx's reference do.
                let narrow = t.dtype() != DType::F64;
                let mul = move |p: f64, q: f64| {
                    if narrow {
                        (p as f32 * q as f32) as f64
                    } else {
                        p * q
                    }
                };
                scan(&v, &mut out, 1.0, mul, dims, exclusive, reverse);
            } else {
                scan(&v, &mut out, 0.0, |p, q| p + q, dims, exclusive, reverse);
            }
            f64_to_float(
                ArrayD::from_shape_vec(IxDyn(&shape), out).map_err(|e| e.to_string())?,
                t.dtype(),
            )
        }
        t if t.dtype().is_int() => {
            let v = t.to_i64_vec();
            let mut out = vec![0i64; v.len()];
            if product {
                scan(&v, &mut out, 1, i64::wrapping_mul, dims, exclusive, reverse);
            } else {
                scan(&v, &mut out, 0, i64::wrapping_add, dims, exclusive, reverse);
            }
            Ok(Tensor::from_vec(&shape, out).cast(t.dtype()))
        }
        t => Err(unsupported(t.dtype())),
    }
}

/// NaN sorts above every number (numpy's order); -0 equals +0.
pub(super) fn total_cmp<T: Element>(a: T, b: T) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let nan = |v: T| T::DTYPE.is_float() && v.to_f64().is_nan();
    match (nan(a), nan(b)) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// The `k` largest (or smallest) elements along `axis`, sorted, ties broken by the
/// lower index (the order of the ONNX reference's lexsort); values and int64 indices.
pub(super) fn top_k(
    x: &Tensor,
    axis: usize,
    k: usize,
    largest: bool,
) -> Result<Vec<Tensor>, String> {
    let shape = x.shape().to_vec();
    if axis >= shape.len() {
        return Err(format!(
            "axis {axis} is out of range for rank {}",
            shape.len()
        ));
    }
    if k > shape[axis] {
        return Err(format!("k = {k} exceeds the axis of {}", shape[axis]));
    }
    let (outer, dim, inner) = split_at_axis(&shape, axis);
    let mut out_shape = shape.clone();
    out_shape[axis] = k;
    fn go<T: Element>(
        a: &ArrayD<T>,
        (outer, dim, inner): (usize, usize, usize),
        k: usize,
        largest: bool,
        out_shape: &[usize],
    ) -> Result<Vec<Tensor>, String> {
        let v = elements(a);
        let n_out = outer * k * inner;
        let mut values = vec![T::default(); n_out];
        let mut indices = vec![0i64; n_out];
        let mut order: Vec<usize> = Vec::with_capacity(dim);
        for o in 0..outer {
            for i in 0..inner {
                let at = |p: usize| v[(o * dim + p) * inner + i];
                order.clear();
                order.extend(0..dim);
                // Stable: equal values keep ascending indices.
                if largest {
                    order.sort_by(|&p, &q| total_cmp(at(q), at(p)));
                } else {
                    order.sort_by(|&p, &q| total_cmp(at(p), at(q)));
                }
                for (j, &p) in order[..k].iter().enumerate() {
                    let dst = (o * k + j) * inner + i;
                    values[dst] = at(p);
                    indices[dst] = p as i64;
                }
            }
        }
        Ok(vec![
            shaped(out_shape, values)?,
            Tensor::from_vec(out_shape, indices),
        ])
    }
    if x.dtype() == DType::Bool {
        return Err(unsupported(DType::Bool));
    }
    with_tensor!(x, a => go(a, (outer, dim, inner), k, largest, &out_shape))
}
