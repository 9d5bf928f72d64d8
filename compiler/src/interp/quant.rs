//! QuantizeLinear, DequantizeLinear, MatMulInteger and ConvInteger, the reference for
//! nnc's integer code: the integer products are computed exactly in float64 (every sum
//! of 8-bit products nnc can be given stays far below 2⁵³) and cast back to int32.

use crate::ir::{DType, Tensor};
use crate::ops::{ConvAttrs, Op, PlaneLayout};

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

/// One float32 value quantized as [`Op::QuantizeToPlanes`] defines it.
pub fn quantize_to_plane_value(x: f32, inv_scale: f32, zp: u8) -> u8 {
    let t = x * inv_scale + zp as f32;
    // `t > 0` is false for NaN, which becomes 0 like the kernels' max.
    let t = if t > 0.0 { t } else { 0.0 };
    t.min(255.0).round_ties_even() as u8
}

pub(super) fn quantize_to_planes(
    layout: &PlaneLayout,
    x: &Tensor,
    inv_scale: &Tensor,
    zp: &Tensor,
) -> Result<Tensor, String> {
    let (inv, zp) = match (&inv_scale.to_f64_vec()[..], &zp.to_i64_vec()[..]) {
        (&[s], &[z]) => (s as f32, z as u8),
        _ => return Err("QuantizeToPlanes takes one scale and one zero point".into()),
    };
    let [n, c, h, w] = x.shape().try_into().map_err(|_| "x must be 4-D")?;
    let xs = x.to_f64_vec();
    let image = layout.image_bytes();
    let mut out = vec![zp; n * image];
    for (i, &v) in xs.iter().enumerate() {
        let (img, ch, row, col) = (i / (c * h * w), i / (h * w) % c, i / w % h, i % w);
        let at = layout.byte_offset(ch, row + layout.pad_top, col + layout.pad_left);
        out[img * image + at] = quantize_to_plane_value(v as f32, inv, zp);
    }
    Ok(Tensor::from_vec(&layout.shape(n), out))
}

pub(super) fn pack_planes(layout: &PlaneLayout, x: &Tensor, zp: &Tensor) -> Result<Tensor, String> {
    let zp = match &zp.to_i64_vec()[..] {
        &[z] => z as u8,
        _ => return Err("PackPlanes takes one zero point".into()),
    };
    let [n, c, h, w] = x.shape().try_into().map_err(|_| "x must be 4-D")?;
    let image = layout.image_bytes();
    let mut out = vec![zp; n * image];
    for (i, v) in x.to_i64_vec().into_iter().enumerate() {
        let (img, ch, row, col) = (i / (c * h * w), i / (h * w) % c, i / w % h, i % w);
        let at = layout.byte_offset(ch, row + layout.pad_top, col + layout.pad_left);
        out[img * image + at] = v as u8;
    }
    Ok(Tensor::from_vec(&layout.shape(n), out))
}

/// [`Op::ConvU8S8`] without its residual and activation (the interpreter's shared
/// epilogue adds those).
pub(super) fn conv_u8s8(
    conv: &ConvAttrs,
    layout: &PlaneLayout,
    planes: &Tensor,
    w: &Tensor,
    bias: &Tensor,
    scale: &Tensor,
    zp: &Tensor,
) -> Result<Tensor, String> {
    let zp = zp.to_i64_vec()[0];
    let (q, w, bias, scale) = (
        planes.to_i64_vec(),
        w.to_i64_vec(),
        bias.to_i64_vec(),
        scale.to_f64_vec(),
    );
    let n = planes.shape()[0];
    let [kh, kw] = [conv.kernel[0], conv.kernel[1]];
    let [sh, sw] = layout.stride;
    let maps = bias.len();
    let out_h = (layout.height + conv.pads[0] + conv.pads[2] - kh) / sh + 1;
    let out_w = (layout.width + conv.pads[1] + conv.pads[3] - kw) / sw + 1;
    let image = layout.image_bytes();
    let mut y = Vec::with_capacity(n * maps * out_h * out_w);
    for img in 0..n {
        for m in 0..maps {
            for oh in 0..out_h {
                for ow in 0..out_w {
                    let mut acc = 0i64;
                    // Depthwise (group = channels): map m reads channel m alone.
                    let (first, w_channels) = if conv.group > 1 {
                        (m, 1)
                    } else {
                        (0, layout.channels)
                    };
                    for (wc, ch) in (first..first + w_channels).enumerate() {
                        for i in 0..kh {
                            for j in 0..kw {
                                let at = layout.byte_offset(ch, oh * sh + i, ow * sw + j);
                                let wv = w[((m * w_channels + wc) * kh + i) * kw + j];
                                acc += (q[img * image + at] - zp) * wv;
                            }
                        }
                    }
                    let acc = (acc + bias[m]) as i32;
                    y.push(acc as f32 * scale[m] as f32);
                }
            }
        }
    }
    Ok(Tensor::from_vec(&[n, maps, out_h, out_w], y))
}
