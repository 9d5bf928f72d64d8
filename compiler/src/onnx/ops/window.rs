//! The signal windows HannWindow, HammingWindow and BlackmanWindow: the window size is
//! a constant input, so the whole window is a constant built at import.

use std::f64::consts::PI;

use crate::ir::{DType, Tensor, TensorType};
use crate::onnx::import::{ImportError, ImportResult, NodeCtx};

/// `w[n]` as a sum of cosines `Σ_k c_k · cos(2πkn / N)`, `N` the size (periodic) or the
/// size minus one (symmetric).
fn cosine_sum(coefficients: &[f64], size: usize, periodic: bool) -> Vec<f64> {
    let denom = if periodic {
        size
    } else {
        size.saturating_sub(1)
    } as f64;
    (0..size)
        .map(|n| {
            coefficients
                .iter()
                .enumerate()
                .map(|(k, c)| c * (2.0 * PI * (k * n) as f64 / denom).cos())
                .sum()
        })
        .collect()
}

pub fn window(ctx: &mut NodeCtx) -> ImportResult {
    let size = ctx
        .const_input(0, "size")?
        .ok_or("input 'size' is required")?;
    if size.len() != 1 {
        return Err(format!("size must hold one element, got shape {:?}", size.shape()).into());
    }
    let size = usize::try_from(size.to_i64_vec()[0]).map_err(|_| "size must not be negative")?;
    let periodic = ctx.attrs.flag("periodic", true)?;
    let code = ctx.attrs.int("output_datatype", 1)?;
    let dtype = DType::from_onnx(code as i32)
        .filter(|d| d.low_precision().is_none())
        .ok_or_else(|| ImportError::Unsupported(format!("output_datatype {code}")))?;
    // The coefficients of the ONNX function bodies (Hamming's α = 25/46, not 0.54).
    let coefficients: &[f64] = match ctx.node.op_type.as_str() {
        "HannWindow" => &[0.5, -0.5],
        "HammingWindow" => &[25.0 / 46.0, -21.0 / 46.0],
        "BlackmanWindow" => &[0.42, -0.5, 0.08],
        other => return Err(ImportError::Unsupported(format!("window {other}"))),
    };
    // Computed in float64 first.
    ctx.check_computed_constant(&TensorType::new(DType::F64, vec![size]))?;
    let w = Tensor::from_vec(&[size], cosine_sum(coefficients, size, periodic)).cast(dtype);
    let v = ctx.constant_value(ctx.name, w);
    ctx.bind_output(0, v);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hann_is_sine_squared() {
        let w = cosine_sum(&[0.5, -0.5], 8, true);
        for (n, v) in w.iter().enumerate() {
            let want = (PI * n as f64 / 8.0).sin().powi(2);
            assert!((v - want).abs() < 1e-12, "{n}: {v} vs {want}");
        }
        // Symmetric: both ends are 0.
        let s = cosine_sum(&[0.5, -0.5], 5, false);
        assert!(s[0].abs() < 1e-12 && s[4].abs() < 1e-12 && (s[2] - 1.0).abs() < 1e-12);
    }
}
