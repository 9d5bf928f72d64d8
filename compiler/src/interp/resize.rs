//! Resize (opset 19 semantics, without antialias), following
//! `onnx/reference/ops/op_resize.py`: the interpolation is separable, so the input is
//! resized one axis at a time; along an axis every output index maps to a source
//! coordinate (the coordinate transform), picks `n` neighbours (edge-clamped) and
//! weights them (nearest: one-hot; linear: 2 taps; cubic: 4 taps with
//! `cubic_coeff_a`, optionally renormalized without outside taps). tf_crop_and_resize
//! replaces outside coordinates by `extrapolation_value`.
//!
//! Linear and cubic are computed in f64 and rounded back (integers: half to even,
//! saturating, as the reference's `saturate_cast`); nearest copies elements exactly.

use ndarray::{ArrayD, Axis};

use super::{f64_to_float, float_to_f64, unsupported};
use crate::ir::{Element, Tensor};
use crate::ops::resize_sampling::{
    axis_scale, first_neighbour, is_close, source_coordinate, tap_weights,
};
use crate::ops::{CoordinateTransform, ResizeAttrs, ResizeMode};
use crate::{map_tensor, with_dtype, with_tensor};

pub(super) fn resize(r: &ResizeAttrs, x: &Tensor) -> Result<Tensor, String> {
    let rank = x.shape().len();
    if r.scales.len() != rank || r.output_shape.len() != rank {
        return Err(format!(
            "scales {:?} and output shape {:?} must have {rank} entries",
            r.scales, r.output_shape
        ));
    }
    if !r.roi.is_empty() && r.roi.len() != 2 * rank {
        return Err(format!("roi {:?} must have {} entries", r.roi, 2 * rank));
    }
    if r.coordinate_transform == CoordinateTransform::TfCropAndResize && r.roi.is_empty() {
        return Err("tf_crop_and_resize needs a roi".into());
    }
    let plans = (0..rank)
        .map(|axis| AxisPlan::new(r, axis, x.shape()[axis], r.output_shape[axis]))
        .collect::<Result<Vec<_>, _>>()?;
    if r.mode == ResizeMode::Nearest {
        return Ok(map_tensor!(x, a => nearest(a, &plans, r.extrapolation_value)));
    }
    let data = match x {
        Tensor::Bool(_) => return Err(unsupported(x.dtype())),
        t if t.dtype().is_float() => float_to_f64(t).ok_or_else(|| unsupported(t.dtype()))?,
        t => with_tensor!(t, a => a.mapv(|v| v.to_f64())),
    };
    let y = interpolate(data, &plans, f64::from(r.extrapolation_value));
    if x.dtype().is_float() {
        return f64_to_float(y, x.dtype());
    }
    // The reference's saturate_cast: round half to even, then clip to the type's range.
    Ok(with_dtype!(x.dtype(), T => T::wrap(y.mapv(|v| T::from_f64(v.round_ties_even())))))
}

/// How one axis is resized: for every output index, `n` source indices (clamped into
/// the input) and their weights, or a constant replacing the value.
struct AxisPlan {
    /// `None`: the axis is unchanged (the reference skips it too).
    taps: Option<Taps>,
}

struct Taps {
    n: usize,
    /// `indices[o * n + j]`, already clamped to `[0, input)`.
    indices: Vec<usize>,
    weights: Vec<f64>,
    /// Output indices whose value is replaced: tf_crop_and_resize extrapolation
    /// (`Some(None)` = extrapolation_value) or all weights excluded (`Some(Some(0.0))`).
    replaced: Vec<Option<Option<f64>>>,
}

impl AxisPlan {
    fn new(r: &ResizeAttrs, axis: usize, input: usize, output: usize) -> Result<AxisPlan, String> {
        let rank = r.scales.len();
        let roi = (!r.roi.is_empty()).then(|| (r.roi[axis], r.roi[rank + axis]));
        let scale = axis_scale(r.scales[axis], input, output);
        let trivial_roi =
            roi.is_none_or(|(start, end)| is_close(start.into(), 0.0) && is_close(end.into(), 1.0));
        if is_close(scale, 1.0) && output == input && trivial_roi {
            return Ok(AxisPlan { taps: None });
        }
        if output > 0 && input == 0 {
            return Err(format!("cannot resize an empty axis {axis} to {output}"));
        }
        let n = match r.mode {
            ResizeMode::Nearest | ResizeMode::Linear => 2,
            ResizeMode::Cubic => 4,
        };
        let mut taps = Taps {
            n,
            indices: Vec::with_capacity(output * n),
            weights: Vec::with_capacity(output * n),
            replaced: Vec::with_capacity(output),
        };
        for y in 0..output {
            let (x, extrapolated) =
                source_coordinate(r.coordinate_transform, y, scale, input, output, roi);
            let weights = tap_weights(r, x);
            let first = first_neighbour(x, n);
            let mut excluded_all = false;
            let mut w = weights;
            if r.exclude_outside {
                let inside = |j: usize| (0..input as i64).contains(&first.saturating_add(j as i64));
                for (j, wj) in w.iter_mut().enumerate() {
                    if !inside(j) {
                        *wj = 0.0;
                    }
                }
                let total: f64 = w.iter().sum();
                // The reference guards an all-zero row by dividing by 1: the result is 0.
                excluded_all = total == 0.0;
                let total = if excluded_all { 1.0 } else { total };
                w.iter_mut().for_each(|wj| *wj /= total);
            }
            for (j, &wj) in w.iter().enumerate() {
                taps.indices
                    .push(first.saturating_add(j as i64).clamp(0, input as i64 - 1) as usize);
                taps.weights.push(wj);
            }
            taps.replaced.push(if extrapolated {
                Some(None)
            } else if excluded_all {
                Some(Some(0.0))
            } else {
                None
            });
        }
        Ok(AxisPlan { taps: Some(taps) })
    }
}

/// Nearest: pure selection (exact for every type), axis by axis.
fn nearest<T: Element>(a: &ArrayD<T>, plans: &[AxisPlan], extrapolation: f32) -> ArrayD<T> {
    let mut out = a.clone();
    for (axis, plan) in plans.iter().enumerate() {
        let Some(taps) = &plan.taps else { continue };
        let chosen: Vec<usize> = (0..taps.replaced.len())
            .map(|o| {
                let row = o * taps.n;
                // The one-hot weight picks the neighbour.
                let j = (0..taps.n)
                    .find(|&j| taps.weights[row + j] == 1.0)
                    .unwrap_or(0);
                taps.indices[row + j]
            })
            .collect();
        out = out.select(Axis(axis), &chosen);
        fill_replaced(
            &mut out,
            axis,
            taps,
            f64::from(extrapolation),
            element_of::<T>,
        );
    }
    out
}

/// An f64 constant as an element, as the reference's saturate_cast converts it.
fn element_of<T: Element>(v: f64) -> T {
    if T::DTYPE.is_float() {
        T::from_f64(v)
    } else {
        T::from_f64(v.round_ties_even())
    }
}

/// Sets the replaced output indices along `axis` to their constant.
fn fill_replaced<T: Clone>(
    out: &mut ArrayD<T>,
    axis: usize,
    taps: &Taps,
    extrapolation: f64,
    convert: impl Fn(f64) -> T,
) {
    for (o, replaced) in taps.replaced.iter().enumerate() {
        if let Some(value) = replaced {
            out.index_axis_mut(Axis(axis), o)
                .fill(convert(value.unwrap_or(extrapolation)));
        }
    }
}

/// Linear / cubic: weighted sums of whole hyperplanes, axis by axis, in f64.
fn interpolate(mut data: ArrayD<f64>, plans: &[AxisPlan], extrapolation: f64) -> ArrayD<f64> {
    for (axis, plan) in plans.iter().enumerate() {
        let Some(taps) = &plan.taps else { continue };
        let mut shape = data.shape().to_vec();
        shape[axis] = taps.replaced.len();
        let mut out = ArrayD::<f64>::zeros(shape);
        for (o, mut plane) in out.axis_iter_mut(Axis(axis)).enumerate() {
            for j in 0..taps.n {
                let (index, weight) = (taps.indices[o * taps.n + j], taps.weights[o * taps.n + j]);
                let source = data.index_axis(Axis(axis), index);
                if j == 0 {
                    plane.zip_mut_with(&source, |p, &s| *p = s * weight);
                } else {
                    plane.zip_mut_with(&source, |p, &s| *p += s * weight);
                }
            }
        }
        fill_replaced(&mut out, axis, taps, extrapolation, |v| v);
        data = out;
    }
    data
}
