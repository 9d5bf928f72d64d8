//! Softmax / LogSoftmax along one axis and LayerNormalization, computed in f64.

use ndarray::{ArrayD, ArrayViewD, Axis, IxDyn};

use super::scalar::Num;
use super::{f64_to_float, float_to_f64, unsupported};
use crate::ir::Tensor;

/// Softmax (or LogSoftmax) along `axis`, opset ≥ 13 semantics. The maximum is
/// subtracted first, so large inputs do not overflow; LogSoftmax is computed as
/// `x − max − ln Σ exp(x − max)`, which stays finite where ln(softmax) would underflow.
pub(super) fn softmax(x: &Tensor, axis: usize, log: bool) -> Result<Tensor, String> {
    if axis >= x.shape().len() {
        return Err(format!(
            "axis {axis} is out of range for rank {}",
            x.shape().len()
        ));
    }
    let mut a = float_to_f64(x).ok_or_else(|| unsupported(x.dtype()))?;
    for mut lane in a.lanes_mut(Axis(axis)) {
        let max = lane.iter().fold(f64::NEG_INFINITY, |m, &v| m.max_nan(v));
        let sum: f64 = lane.iter().map(|&v| (v - max).exp()).sum();
        if log {
            let log_sum = sum.ln();
            lane.mapv_inplace(|v| v - max - log_sum);
        } else {
            lane.mapv_inplace(|v| (v - max).exp() / sum);
        }
    }
    f64_to_float(a, x.dtype())
}

/// LayerNormalization over the axes `axis..rank`:
/// `(x − mean) / sqrt(var + epsilon) · scale + bias`, with the population variance and
/// scale/bias broadcast (numpy rules) to X.
pub(super) fn layer_norm(
    x: &Tensor,
    scale: &Tensor,
    bias: Option<&Tensor>,
    axis: usize,
    epsilon: f32,
) -> Result<Tensor, String> {
    let shape = x.shape().to_vec();
    if axis >= shape.len() {
        return Err(format!(
            "axis {axis} is out of range for rank {}",
            shape.len()
        ));
    }
    let as_f64 = |t: &Tensor| float_to_f64(t).ok_or_else(|| unsupported(t.dtype()));
    let (a, s) = (as_f64(x)?, as_f64(scale)?);
    let b = bias.map(as_f64).transpose()?;
    let inner: usize = shape[axis..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    let mut rows = a
        .as_standard_layout()
        .into_owned()
        .into_shape_with_order((outer, inner))
        .map_err(|e| e.to_string())?;
    let epsilon = f64::from(epsilon);
    let n = inner as f64;
    for mut row in rows.outer_iter_mut() {
        let mean = row.sum() / n;
        let variance = row.iter().map(|&v| (v - mean) * (v - mean)).sum::<f64>() / n;
        let inv_std = 1.0 / (variance + epsilon).sqrt();
        row.mapv_inplace(|v| (v - mean) * inv_std);
    }
    let normalized = rows
        .into_shape_with_order(IxDyn(&shape))
        .map_err(|e| e.to_string())?;
    let mut y = normalized * &broadcast_to(&s, &shape, "scale")?;
    if let Some(b) = b {
        y += &broadcast_to(&b, &shape, "bias")?;
    }
    f64_to_float(y, x.dtype())
}

fn broadcast_to<'a>(
    a: &'a ArrayD<f64>,
    shape: &[usize],
    what: &str,
) -> Result<ArrayViewD<'a, f64>, String> {
    a.broadcast(IxDyn(shape))
        .ok_or_else(|| format!("{what} {:?} does not broadcast to {shape:?}", a.shape()))
}
