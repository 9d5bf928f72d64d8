//! QuantizeLinear, DequantizeLinear, MatMulInteger and ConvInteger, the reference for
//! nnc's integer code: the integer products are computed exactly in float64 (every sum
//! of 8-bit products nnc can be given stays far below 2⁵³) and cast back to int32.

use crate::ir::{DType, Tensor};
use crate::ops::{ConvAttrs, Op};

/// Index along `axis` of each flat element of `shape`, or 0 everywhere for per-tensor
/// parameters (`per_axis` false).
fn axis_index(shape: &[usize], axis: usize, per_axis: bool) -> impl Fn(usize) -> usize {
    let inner: usize = shape.get(axis + 1..).map_or(1, |s| s.iter().product());
    let dim = shape.get(axis).copied().unwrap_or(1).max(1);
    move |i| if per_axis { i / inner % dim } else { 0 }
}

pub(super) fn quantize_linear(
    x: &Tensor,
    scale: &Tensor,
    zero_point: Option<&Tensor>,
    axis: usize,
    to: DType,
) -> Result<Tensor, String> {
    let (xs, s) = (x.to_f64_vec(), scale.to_f64_vec());
    let zp = zero_point.map_or_else(|| vec![0.0], Tensor::to_f64_vec);
    let at = axis_index(x.shape(), axis, s.len() > 1);
    let (lo, hi) = to
        .quantized_range()
        .ok_or_else(|| format!("QuantizeLinear to {to}"))?;
    let (lo, hi) = (lo as f64, hi as f64);
    let q: Vec<i64> = xs
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let k = at(i);
            // x / scale in float32, as ONNX defines it, then round half to even.
            let r = (v as f32 / s[k] as f32).round_ties_even() as f64;
            let z = zp[if zp.len() > 1 { k } else { 0 }];
            if r.is_nan() {
                z as i64
            } else {
                (r + z).clamp(lo, hi) as i64
            }
        })
        .collect();
    Ok(Tensor::from_vec(x.shape(), q).cast(to))
}

pub(super) fn dequantize_linear(
    x: &Tensor,
    scale: &Tensor,
    zero_point: Option<&Tensor>,
    axis: usize,
) -> Result<Tensor, String> {
    let (xs, s) = (x.to_f64_vec(), scale.to_f64_vec());
    let zp = zero_point.map_or_else(|| vec![0.0], Tensor::to_f64_vec);
    let at = axis_index(x.shape(), axis, s.len() > 1);
    let y: Vec<f64> = xs
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let k = at(i);
            let z = zp[if zp.len() > 1 { k } else { 0 }];
            // (x − zp) is exact; the product of two floats is rounded once by the cast.
            (v - z) * s[k] as f32 as f64
        })
        .collect();
    Ok(Tensor::from_vec(x.shape(), y).cast(scale.dtype()))
}

/// `t − zp` as float64, `zp` one value or one per index of `axis`.
fn minus_zero_point(t: &Tensor, zp: Option<&Tensor>, axis: usize) -> Tensor {
    let v = t.to_f64_vec();
    let z = zp.map_or_else(|| vec![0.0], Tensor::to_f64_vec);
    let at = axis_index(t.shape(), axis, z.len() > 1);
    let out: Vec<f64> = v.iter().enumerate().map(|(i, &x)| x - z[at(i)]).collect();
    Tensor::from_vec(t.shape(), out)
}

pub(super) fn matmul_integer(
    a: &Tensor,
    b: &Tensor,
    a_zp: Option<&Tensor>,
    b_zp: Option<&Tensor>,
) -> Result<Tensor, String> {
    // a_zp per row: rows are A's second-to-last axis (its only axis for a vector).
    let a_axis = a.shape().len().saturating_sub(2);
    let b_axis = b.shape().len().saturating_sub(1);
    let a = minus_zero_point(a, a_zp, a_axis);
    let b = minus_zero_point(b, b_zp, b_axis);
    Ok(super::linalg::matmul(&a, &b)?.cast(DType::I32))
}

pub(super) fn conv_integer(
    c: &ConvAttrs,
    x: &Tensor,
    w: &Tensor,
    x_zp: Option<&Tensor>,
    w_zp: Option<&Tensor>,
) -> Result<Tensor, String> {
    if x_zp.is_some_and(|z| z.len() != 1) {
        return Err("ConvInteger's x_zero_point must hold one value".into());
    }
    let x = minus_zero_point(x, x_zp, 1);
    let w = minus_zero_point(w, w_zp, 0);
    let conv = Op::Conv(c.clone());
    let y = super::eval_op(&conv, &[Some(&x), Some(&w)])?.remove(0);
    Ok(y.cast(DType::I32))
}
