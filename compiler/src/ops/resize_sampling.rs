//! Resize's sampling geometry, shared by the reference interpreter and the code
//! generator so both follow `onnx/reference/ops/op_resize.py` from one definition:
//! which input coordinate each output index samples, and the taps and weights there.

use super::{CoordinateTransform, NearestMode, ResizeAttrs, ResizeMode};

/// The scale the reference uses. The IR stores f32 scales, computed as output/input when
/// the model gave sizes; the reference then uses that ratio in f64, which we recover when
/// it rounds to the stored f32. (Explicit f32 scales equal to such a ratio are then also
/// used in f64 — a difference of an f32 rounding error.)
pub fn axis_scale(scale: f32, input: usize, output: usize) -> f64 {
    let ratio = output as f64 / input as f64;
    if input > 0 && ratio as f32 == scale {
        ratio
    } else {
        f64::from(scale)
    }
}

/// `math.isclose` with its default relative tolerance.
pub fn is_close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

/// The input coordinate output index `y` samples, and whether tf_crop_and_resize
/// extrapolates there.
pub fn source_coordinate(
    transform: CoordinateTransform,
    y: usize,
    scale: f64,
    input: usize,
    output: usize,
    roi: Option<(f32, f32)>,
) -> (f64, bool) {
    let y = y as f64;
    let width = scale * input as f64; // the un-rounded output length
    let last = input as f64 - 1.0;
    let x = match transform {
        CoordinateTransform::AlignCorners if width == 1.0 => 0.0,
        CoordinateTransform::AlignCorners => y * last / (width - 1.0),
        CoordinateTransform::Asymmetric => y / scale,
        CoordinateTransform::PytorchHalfPixel if width == 1.0 => -0.5,
        CoordinateTransform::PytorchHalfPixel | CoordinateTransform::HalfPixel => {
            (y + 0.5) / scale - 0.5
        }
        CoordinateTransform::HalfPixelSymmetric => {
            let adjustment = output as f64 / width;
            let offset = input as f64 / 2.0 * (1.0 - adjustment);
            offset + (y + 0.5) / scale - 0.5
        }
        CoordinateTransform::TfCropAndResize => {
            let (start, end) = roi.unwrap_or((0.0, 1.0));
            // numpy evaluates these roi products in float32 (roi's type); mirror that.
            let span = end - start;
            let inner = if width == 1.0 {
                f64::from(span * (input as f32 - 1.0) / 2.0)
            } else {
                y * f64::from(span) * last / (width - 1.0)
            };
            let x = inner + f64::from(start * (input as f32 - 1.0));
            return (x, x < 0.0 || x > last);
        }
    };
    (x, false)
}

/// The weights of the `n` neighbours of coordinate `x`.
pub fn tap_weights(r: &ResizeAttrs, x: f64) -> Vec<f64> {
    let floor = x.floor();
    // ratio ∈ (0, 1]: an integral coordinate counts as the far end of the left interval.
    let ratio = if x == floor { 1.0 } else { x - floor };
    match r.mode {
        ResizeMode::Nearest => {
            let right = if ratio == 1.0 {
                true
            } else {
                match r.nearest_mode {
                    NearestMode::RoundPreferFloor => ratio > 0.5,
                    NearestMode::RoundPreferCeil => ratio >= 0.5,
                    NearestMode::Floor => false,
                    NearestMode::Ceil => true,
                }
            };
            if right {
                vec![0.0, 1.0]
            } else {
                vec![1.0, 0.0]
            }
        }
        ResizeMode::Linear => vec![1.0 - ratio, ratio],
        ResizeMode::Cubic => cubic_weights(ratio, f64::from(r.cubic_coeff_a)),
    }
}

/// Keys' cubic convolution weights for the taps at distances 1 + t, t, 1 − t, 2 − t.
pub fn cubic_weights(t: f64, a: f64) -> Vec<f64> {
    let far = |d: f64| ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a; // 1 < d < 2
    let near = |d: f64| ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0; // d ≤ 1
    vec![far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]
}

/// The first of the `n` (even) input indices nearest to `x`, ties to the smaller index
/// — the reference's edge-padded neighbour search.
pub fn first_neighbour(x: f64, n: usize) -> i64 {
    let pad = n.div_ceil(2) as f64;
    let padded = x + pad;
    let p = padded.floor();
    let half = (n / 2) as i64;
    let offset = if padded - p == 0.0 { -half } else { -half + 1 };
    (p as i64).saturating_add(offset).saturating_sub(pad as i64)
}
