//! The uint8 activation layout of nnc's INT8 convolutions ("planes"), shared by the op
//! that writes it ([`super::Op::QuantizeToPlanes`]), the op that reads it
//! ([`super::Op::ConvU8S8`]), the interpreter and the kernels.
//!
//! Per image, channels go in quads and each quad is stored pixel by pixel with its
//! four channel bytes together: `[C/4][phase][rows][cols][4]`. Four consecutive bytes
//! are one 4-deep slice of the convolution's K (same tap, four channels), which is
//! what one 32-bit lane of `vpdpbusd` / `sdot` / `usdot` multiplies, so the kernels
//! read their B operand straight from here without packing.
//!
//! The image is stored padded (pad positions hold the zero point, the value of 0.0)
//! and, for a stride `s > 1`, split into `s × s` phases (padded row `h` goes to phase
//! row `h % s`, plane row `h / s`; columns likewise). Then every tap `(kh, kw)` of the
//! convolution reads one phase at a constant offset, `(kh / s) · cols + kw / s` pixels,
//! from output pixel `oh · cols + ow`: the whole convolution is a GEMM over
//! "wide" output pixels `n' = oh · cols + ow` (`ow < cols`, the columns `ow ≥ Wo` being
//! computed and discarded) whose K rows are contiguous runs of the planes.

use super::{Activation, ConvAttrs};

/// Pixels past the last wide output pixel that a kernel may read (its column tile is
/// rounded up to this many pixels); the planes have rows to spare for them.
pub const READ_AHEAD_PIXELS: usize = 64;

/// A convolution's output quantized into the planes of the next one: the layout and
/// `QuantizeToPlanes`' parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct Requantize {
    pub layout: PlaneLayout,
    pub inv_scale: f32,
    pub zero_point: u8,
}

impl Requantize {
    /// The byte a value `y` becomes, as every kernel computes it: `y · inv_scale`, then
    /// `+ zero_point` (two rounded float32 operations), NaN to 0, clamped to 0..=255,
    /// rounded half to even.
    pub fn quantize(&self, y: f32) -> u8 {
        let v = y * self.inv_scale + f32::from(self.zero_point);
        let v = if v.is_nan() { 0.0 } else { v.clamp(0.0, 255.0) };
        v.round_ties_even() as u8
    }

    /// Whether applying `act` before this requantization changes no byte, so a kernel
    /// may skip it. [`Self::quantize`] is non-decreasing in `y`, so a clamp of `y` to
    /// `[lo, hi]` changes nothing when `lo` already quantizes to 0 and `hi` to 255: the
    /// values it would raise to `lo` quantize to 0 either way, those it would lower to
    /// `hi` to 255. (Relu6 outputs calibrated to `[0, 6]` are such: `inv_scale` 42.5,
    /// zero point 0.)
    pub fn subsumes(&self, act: Activation) -> bool {
        let (lo, hi) = match act {
            Activation::Relu => (0.0, f32::INFINITY),
            Activation::Clip { min, max } => (min, max),
            _ => return false,
        };
        self.inv_scale > 0.0
            && !lo.is_nan()
            && !hi.is_nan()
            && self.quantize(lo) == 0
            && self.quantize(hi) == 255
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct PlaneLayout {
    pub channels: usize,
    /// The float32 input image's height and width.
    pub height: usize,
    pub width: usize,
    pub pad_top: usize,
    pub pad_left: usize,
    /// Vertical and horizontal stride: the phases.
    pub stride: [usize; 2],
    /// Rows and columns of one phase plane (rows include the read-ahead).
    pub rows: usize,
    pub cols: usize,
    /// The convolution's kernel (rows depend on it).
    pub kernel: [usize; 2],
    pub pad_bottom: usize,
}

impl PlaneLayout {
    /// The layout a 2-D convolution (dilation 1) of a `[N, C, H, W]` input reads, or
    /// `None` for a convolution the INT8 kernels do not compute.
    pub fn for_conv(c: &ConvAttrs, x_shape: &[usize]) -> Option<PlaneLayout> {
        if x_shape.len() != 4 || c.kernel.len() != 2 || c.dilations.iter().any(|&d| d != 1) {
            return None;
        }
        let [_, channels, height, width] = x_shape.try_into().ok()?;
        let (kh, kw) = (c.kernel[0], c.kernel[1]);
        let [sh, sw] = [c.strides[0], c.strides[1]];
        let padded_h = height + c.pads[0] + c.pads[2];
        let padded_w = width + c.pads[1] + c.pads[3];
        if padded_h < kh || padded_w < kw || sh == 0 || sw == 0 {
            return None;
        }
        let layout = PlaneLayout {
            channels,
            height,
            width,
            pad_top: c.pads[0],
            pad_left: c.pads[1],
            stride: [sh, sw],
            rows: 0,
            cols: 0,
            kernel: [kh, kw],
            pad_bottom: c.pads[2],
        };
        Some(layout.with_cols(padded_w.div_ceil(sw)))
    }

    /// The same layout with `cols` columns per phase plane (at least the padded width's
    /// share: the extra columns are more right padding), rows to match.
    pub fn with_cols(&self, cols: usize) -> PlaneLayout {
        let [kh, kw] = self.kernel;
        let [sh, sw] = self.stride;
        let padded_h = self.height + self.pad_top + self.pad_bottom;
        let out_h = (padded_h - kh) / sh + 1;
        let max_offset = (kh - 1) / sh * cols + (kw - 1) / sw;
        let needed = out_h * cols + max_offset + READ_AHEAD_PIXELS;
        PlaneLayout {
            rows: padded_h.div_ceil(sh).max(needed.div_ceil(cols)),
            cols,
            ..self.clone()
        }
    }

    pub fn quads(&self) -> usize {
        self.channels.div_ceil(4)
    }

    pub fn phases(&self) -> usize {
        self.stride[0] * self.stride[1]
    }

    /// Pixels of one phase plane.
    pub fn plane_pixels(&self) -> usize {
        self.rows * self.cols
    }

    /// Bytes of one image.
    pub fn image_bytes(&self) -> usize {
        self.quads() * self.phases() * self.plane_pixels() * 4
    }

    /// The tensor shape of a batch of `batch` images.
    pub fn shape(&self, batch: usize) -> Vec<usize> {
        vec![batch, self.quads(), self.phases(), self.rows, self.cols, 4]
    }

    /// Byte offset, within an image, of channel `c` at padded position `(hp, wp)`.
    pub fn byte_offset(&self, c: usize, hp: usize, wp: usize) -> usize {
        let [sh, sw] = self.stride;
        let phase = hp % sh * sw + wp % sw;
        let pixel = hp / sh * self.cols + wp / sw;
        ((c / 4 * self.phases() + phase) * self.plane_pixels() + pixel) * 4 + c % 4
    }

    /// Tap `(kh, kw)`'s phase and pixel offset (see the module docs).
    pub fn tap(&self, kh: usize, kw: usize) -> (usize, usize) {
        let [sh, sw] = self.stride;
        (kh % sh * sw + kw % sw, kh / sh * self.cols + kw / sw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requantize(inv_scale: f32, zero_point: u8) -> Requantize {
        let conv = ConvAttrs {
            kernel: vec![1, 1],
            strides: vec![1, 1],
            pads: vec![0; 4],
            dilations: vec![1, 1],
            group: 1,
            activation: Activation::None,
        };
        let layout = PlaneLayout::for_conv(&conv, &[1, 4, 2, 2]).expect("a 1x1 layout");
        Requantize {
            layout,
            inv_scale,
            zero_point,
        }
    }

    #[test]
    fn an_activation_is_subsumed_only_when_its_bounds_quantize_to_0_and_255() {
        let relu6 = Activation::Clip { min: 0.0, max: 6.0 };
        // Relu6 calibrated to [0, 6]: 6 · 42.5 = 255 exactly.
        assert!(requantize(42.5, 0).subsumes(relu6));
        assert!(requantize(42.5, 0).subsumes(Activation::Relu));
        // A zero point above 0: Relu raises negatives to zp, which the clamp does not.
        assert!(!requantize(42.5, 3).subsumes(Activation::Relu));
        // 6 · 42.4 = 254.4 rounds to 254: values past 6 would reach 255.
        assert!(!requantize(42.4, 0).subsumes(relu6));
        // -0.2 · 37 + 9 = 1.6 rounds to 2; -0.3 · 37 + 9 = -2.1 clamps to 0.
        let clip = |min| Activation::Clip { min, max: 7.0 };
        assert!(!requantize(37.0, 9).subsumes(clip(-0.2)));
        assert!(requantize(37.0, 9).subsumes(clip(-0.3)));
        // 0.5 rounds half to even: 0.
        assert_eq!(requantize(1.0, 0).quantize(0.5), 0);
        assert_eq!(requantize(1.0, 0).quantize(f32::NAN), 0);
        assert!(!requantize(42.5, 0).subsumes(Activation::Sigmoid));
        assert!(!requantize(42.5, 0).subsumes(Activation::Clip {
            min: f32::NAN,
            max: 6.0
        }));
    }
}
