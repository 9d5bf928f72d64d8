//! Max / average / Lp pooling over the spatial axes, N-d, with strides, dilations, pads
//! and the output size already resolved by the IR (ceil_mode, auto_pad).
//!
//! Semantics: padding never contributes to a maximum (it is −∞); AveragePool divides by
//! the number of real input elements in the window, or with `count_include_pad` by the
//! number of window positions inside the padded input (positions past the end padding,
//! which ceil_mode can create, never count); LpPool is (Σ |x|^p)^(1/p) over real inputs.

use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};

use super::conv::{check_window_attrs, spatial_rank, tap_table, unravel, NO_TAP};
use super::scalar::Num;
use super::{f64_to_float, float_to_f64, unsupported};
use crate::ir::{Element, Tensor};
use crate::ops::{PoolAttrs, PoolKind};

pub(super) fn pool(p: &PoolAttrs, x: &Tensor) -> Result<Tensor, String> {
    let spatial = spatial_rank(x.shape())?;
    check_window_attrs(spatial, &p.kernel, &p.strides, &p.dilations, &p.pads)?;
    if p.output_spatial.len() != spatial {
        return Err(format!(
            "output_spatial {:?} does not have {spatial} axes",
            p.output_spatial
        ));
    }
    let in_spatial = &x.shape()[2..];
    let windows = Windows::new(p, in_spatial);
    match p.kind {
        PoolKind::Max => match x {
            Tensor::F16(a) => Ok(Tensor::F16(max_pool(a, &windows, f16::NEG_INFINITY)?)),
            Tensor::BF16(a) => Ok(Tensor::BF16(max_pool(a, &windows, bf16::NEG_INFINITY)?)),
            _ => with_num!(x, a => Ok(Element::wrap(max_pool(a, &windows, Num::lowest())?)),
                _ => Err(unsupported(x.dtype()))),
        },
        PoolKind::Average { count_include_pad } => {
            let a = float_to_f64(x).ok_or_else(|| unsupported(x.dtype()))?;
            let counts = count_include_pad.then(|| windows.padded_counts(p, in_spatial));
            let y = reduce_windows(&a, &windows, |values, o| {
                let divisor = counts.as_ref().map_or(values.len(), |c| c[o]);
                values.iter().sum::<f64>() / divisor as f64
            })?;
            f64_to_float(y, x.dtype())
        }
        PoolKind::Lp { p: power } => {
            let a = float_to_f64(x).ok_or_else(|| unsupported(x.dtype()))?;
            let power = f64::from(power);
            let y = reduce_windows(&a, &windows, |values, _| {
                values
                    .iter()
                    .map(|v| v.abs().powf(power))
                    .sum::<f64>()
                    .powf(1.0 / power)
            })?;
            f64_to_float(y, x.dtype())
        }
    }
}

/// The input taps of every output window (shared by all planes).
struct Windows {
    /// `taps[k * out_size + o]`: flat input index of kernel tap `k` of window `o`.
    taps: Vec<usize>,
    kernel_size: usize,
    in_size: usize,
    out_spatial: Vec<usize>,
    out_size: usize,
}

impl Windows {
    fn new(p: &PoolAttrs, in_spatial: &[usize]) -> Windows {
        let taps = tap_table(&p.output_spatial, in_spatial, &p.kernel, |axis, o, k| {
            (o * p.strides[axis] + k * p.dilations[axis]) as isize - p.pads[axis] as isize
        });
        Windows {
            taps,
            kernel_size: p.kernel.iter().product(),
            in_size: in_spatial.iter().product(),
            out_spatial: p.output_spatial.clone(),
            out_size: p.output_spatial.iter().product(),
        }
    }

    fn taps_of(&self, o: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.kernel_size)
            .map(move |k| self.taps[k * self.out_size + o])
            .filter(|&t| t != NO_TAP)
    }

    /// For count_include_pad: per window, the taps inside the padded input
    /// `[−pad_begin, size + pad_end)`. Separable, so a product of per-axis counts.
    fn padded_counts(&self, p: &PoolAttrs, in_spatial: &[usize]) -> Vec<usize> {
        let spatial = in_spatial.len();
        let per_axis: Vec<Vec<usize>> = (0..spatial)
            .map(|axis| {
                let limit = in_spatial[axis] + p.pads[axis] + p.pads[spatial + axis];
                (0..p.output_spatial[axis])
                    .map(|o| {
                        // In padded coordinates a tap sits at o·s + k·d ≥ 0.
                        (0..p.kernel[axis])
                            .filter(|k| o * p.strides[axis] + k * p.dilations[axis] < limit)
                            .count()
                    })
                    .collect()
            })
            .collect();
        (0..self.out_size)
            .map(|o| {
                let index = unravel(o, &self.out_spatial);
                (0..spatial)
                    .map(|axis| per_axis[axis][index[axis]])
                    .product()
            })
            .collect()
    }
}

/// Maximum over each window. NaN inputs never win (as in onnxruntime, and the ONNX
/// reference drops them); a window entirely in padding gives `lowest`.
fn max_pool<T: Copy + PartialOrd>(
    a: &ArrayD<T>,
    w: &Windows,
    lowest: T,
) -> Result<ArrayD<T>, String> {
    map_planes(a, w, |plane, o| {
        w.taps_of(o)
            .map(|t| plane[t])
            .fold(lowest, |acc, v| if v > acc { v } else { acc })
    })
}

/// Applies `f(values, window)` to the real input values of every window.
fn reduce_windows(
    a: &ArrayD<f64>,
    w: &Windows,
    f: impl Fn(&[f64], usize) -> f64,
) -> Result<ArrayD<f64>, String> {
    let mut values = Vec::with_capacity(w.kernel_size);
    map_planes(a, w, move |plane, o| {
        values.clear();
        values.extend(w.taps_of(o).map(|t| plane[t]));
        f(&values, o)
    })
}

/// Builds the output by evaluating `f(plane, window)` for every (N, C) plane and window.
fn map_planes<T: Copy, R>(
    a: &ArrayD<T>,
    w: &Windows,
    mut f: impl FnMut(&[T], usize) -> R,
) -> Result<ArrayD<R>, String> {
    let shape = a.shape();
    let mut out_shape = shape[..2].to_vec();
    out_shape.extend(&w.out_spatial);
    let plane_count = shape[0] * shape[1];
    let mut out = Vec::with_capacity(plane_count * w.out_size);
    if w.in_size == 0 {
        if w.out_size > 0 && plane_count > 0 {
            return Err("cannot pool an empty spatial input".into());
        }
    } else {
        let x = a.as_standard_layout();
        let flat = x.as_slice().ok_or("input is not contiguous")?;
        for plane in flat.chunks_exact(w.in_size) {
            out.extend((0..w.out_size).map(|o| f(plane, o)));
        }
    }
    ArrayD::from_shape_vec(IxDyn(&out_shape), out).map_err(|e| e.to_string())
}
