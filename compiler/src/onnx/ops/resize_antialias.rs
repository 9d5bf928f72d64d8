//! Antialiased Resize (linear and cubic). Downsampling widens the interpolation
//! kernel by 1/scale so every input pixel contributes; the taps and weights of each
//! output index depend only on the static shapes, so each resized axis is a product
//! with a constant `[out, in]` matrix (plus a constant row offset where
//! tf_crop_and_resize extrapolates). The weights follow onnx's reference
//! (`_linear_coeffs_antialias`, `_cubic_coeffs_antialias`, the edge-clamped neighbour
//! search and exclude_outside), evaluated in f64, and the axes are resized one after
//! another in the reference's order.

use super::build::{binary, reshape};
use super::low_precision::to_f32;
use crate::ir::{DType, Tensor, ValueId};
use crate::onnx::import::{ImportError, ImportResult, NodeCtx};
use crate::ops::resize_sampling::{axis_scale, first_neighbour, is_close, source_coordinate};
use crate::ops::{BinaryOp, Op, ResizeAttrs, ResizeMode};

pub fn resize_antialias(
    ctx: &mut NodeCtx,
    x: ValueId,
    r: &ResizeAttrs,
    axes: &[usize],
) -> ImportResult<ValueId> {
    let dtype = ctx.ty(x).dtype;
    if !dtype.is_float() {
        return Err(ImportError::Unsupported(format!(
            "antialiased Resize of {dtype}"
        )));
    }
    let rank = r.scales.len();
    let mut y = to_f32(ctx, x)?;
    for &axis in axes {
        let mut shape = ctx.ty(y).shape.clone();
        let (input, output) = (shape[axis], r.output_shape[axis]);
        let scale = axis_scale(r.scales[axis], input, output);
        let roi = (r.roi[axis], r.roi[rank + axis]);
        if is_close(scale, 1.0)
            && input == output
            && is_close(roi.0.into(), 0.0)
            && is_close(roi.1.into(), 1.0)
        {
            // The reference skips identity axes.
            continue;
        }
        let (weights, fill) = axis_weights(r, scale, input, output, roi);
        let pre: usize = shape[..axis].iter().product();
        let post: usize = shape[axis + 1..].iter().product();
        let m = ctx.constant_value(
            "resize_weights",
            Tensor::from_vec(&[output, input], weights),
        );
        let v = reshape(ctx, y, vec![pre, input, post])?;
        let mut v = ctx.emit1(Op::matmul(), vec![Some(m), Some(v)])?;
        if let Some(fill) = fill {
            let fill = ctx.constant_value("resize_fill", Tensor::from_vec(&[output, 1], fill));
            v = binary(ctx, BinaryOp::Add, v, fill)?;
        }
        shape[axis] = output;
        y = reshape(ctx, v, shape)?;
    }
    if dtype != DType::F32 {
        y = ctx.emit1(Op::Cast { to: dtype }, vec![Some(y)])?;
    }
    Ok(y)
}

/// The `[output, input]` resampling matrix of one axis (row-major), and the values
/// added to rows tf_crop_and_resize extrapolates (those rows are zero).
fn axis_weights(
    r: &ResizeAttrs,
    scale: f64,
    input: usize,
    output: usize,
    roi: (f32, f32),
) -> (Vec<f32>, Option<Vec<f32>>) {
    let mut m = vec![0f64; output * input];
    let mut fill = vec![0f32; output];
    let mut extrapolates = false;
    for y in 0..output {
        let (x, outside) =
            source_coordinate(r.coordinate_transform, y, scale, input, output, Some(roi));
        if outside {
            fill[y] = r.extrapolation_value;
            extrapolates = true;
            continue;
        }
        let floor = x.floor();
        let ratio = if x == floor { 1.0 } else { x - floor };
        let mut coeffs = match r.mode {
            ResizeMode::Cubic => cubic_coeffs(ratio, scale, f64::from(r.cubic_coeff_a)),
            _ => linear_coeffs(ratio, scale),
        };
        let first = first_neighbour(x, coeffs.len());
        let last = input as i64 - 1;
        if r.exclude_outside {
            for (j, c) in coeffs.iter_mut().enumerate() {
                let i = first + j as i64;
                if i < 0 || i > last {
                    *c = 0.0;
                }
            }
            let sum: f64 = coeffs.iter().sum();
            let sum = if sum == 0.0 { 1.0 } else { sum };
            coeffs.iter_mut().for_each(|c| *c /= sum);
        }
        for (j, c) in coeffs.into_iter().enumerate() {
            // Edge padding: a tap beyond the border reads the border pixel.
            let i = (first + j as i64).clamp(0, last) as usize;
            m[y * input + i] += c;
        }
    }
    let m = m.into_iter().map(|v| v as f32).collect();
    (m, extrapolates.then_some(fill))
}

/// `_linear_coeffs_antialias`: a triangle filter stretched by 1/scale when
/// downsampling, normalized.
fn linear_coeffs(ratio: f64, scale: f64) -> Vec<f64> {
    let scale = scale.min(1.0);
    let start = (-1.0 / scale).floor() as i64 + 1;
    let footprint = 2 - 2 * start;
    let c: Vec<f64> = (start..start + footprint)
        .map(|i| (1.0 - ((i as f64 - ratio) * scale).abs()).clamp(0.0, 1.0))
        .collect();
    normalized(c)
}

/// `_cubic_coeffs_antialias`: Keys' cubic kernel (coefficient `a`) stretched by
/// 1/scale when downsampling, normalized.
fn cubic_coeffs(ratio: f64, scale: f64, a: f64) -> Vec<f64> {
    let scale = scale.min(1.0);
    let weight = |x: f64| {
        let x = x.abs();
        let (x2, x3) = (x * x, x * x * x);
        if x <= 1.0 {
            (a + 2.0) * x3 - (a + 3.0) * x2 + 1.0
        } else if x < 2.0 {
            a * x3 - 5.0 * a * x2 + 8.0 * a * x - 4.0 * a
        } else {
            0.0
        }
    };
    let start = (-2.0 / scale).floor() as i64 + 1;
    let end = 2 - start;
    normalized(
        (start..end)
            .map(|i| weight(scale * (i as f64 - ratio)))
            .collect(),
    )
}

fn normalized(c: Vec<f64>) -> Vec<f64> {
    let sum: f64 = c.iter().sum();
    c.into_iter().map(|v| v / sum).collect()
}
