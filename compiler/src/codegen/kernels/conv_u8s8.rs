//! The interface every INT8 convolution kernel shares (x86 machine code and
//! Cranelift's tiles): the GEMM a `ConvU8S8` computes over its input planes, and its
//! weights and bias as the kernels read them.

use crate::codegen::options::Int8Order;
use crate::ir::TensorType;
use crate::ops::{ConvAttrs, PlaneLayout, Requantize};

/// The GEMM a `ConvU8S8` computes.
#[derive(Clone, Debug)]
pub struct ConvU8Geometry {
    pub batch: usize,
    pub maps: usize,
    pub out_h: usize,
    pub out_w: usize,
    /// Each tap's phase and pixel offset, in K order.
    pub taps: Vec<(usize, usize)>,
    pub quads: usize,
    /// Group = channels = maps: map m reads only channel m (its quad, one byte of it).
    pub depthwise: bool,
    pub layout: PlaneLayout,
}

impl ConvU8Geometry {
    /// `out` is the node's output; with `requantize` it is the next planes, and the
    /// convolution's own output dims come from their layout.
    pub fn new(
        conv: &ConvAttrs,
        layout: &PlaneLayout,
        out: &TensorType,
        requantize: Option<&Requantize>,
    ) -> ConvU8Geometry {
        let shape = match requantize {
            Some(r) => vec![
                out.shape[0],
                r.layout.channels,
                r.layout.height,
                r.layout.width,
            ],
            None => out.shape.clone(),
        };
        let taps = (0..conv.kernel[0])
            .flat_map(|i| (0..conv.kernel[1]).map(move |j| (i, j)))
            .map(|(i, j)| layout.tap(i, j))
            .collect();
        ConvU8Geometry {
            batch: shape[0],
            maps: shape[1],
            out_h: shape[2],
            out_w: shape[3],
            taps,
            quads: layout.quads(),
            depthwise: conv.group > 1,
            layout: layout.clone(),
        }
    }

    /// Quads one K step sweeps per tap: all of them, or a depthwise map's own one.
    pub fn k_quads(&self) -> usize {
        if self.depthwise {
            1
        } else {
            self.quads
        }
    }

    /// Wide output pixels: `out_h` rows of `cols`.
    pub fn wide(&self) -> usize {
        self.out_h * self.layout.cols
    }

    /// Whether the wide pixels are the output pixels (no column to drop).
    pub fn compact(&self) -> bool {
        self.layout.cols == self.out_w
    }

    pub fn plane_bytes(&self) -> usize {
        self.layout.plane_pixels() * 4
    }

    /// Byte offset of tap `t`'s run for quad 0 within an image's planes.
    pub fn tap_offset(&self, t: usize) -> usize {
        let (phase, pixels) = self.taps[t];
        phase * self.plane_bytes() + pixels * 4
    }

    /// Bytes from one quad's planes to the next's.
    pub fn quad_stride(&self) -> usize {
        self.layout.phases() * self.plane_bytes()
    }

    /// The output pixel (`oh · Wo + ow`) of wide pixel `n`, or None for a dropped
    /// column or a pixel past the last row.
    pub fn output_pixel(&self, n: usize) -> Option<usize> {
        let cols = self.layout.cols;
        (n < self.wide() && n % cols < self.out_w).then(|| n / cols * self.out_w + n % cols)
    }

    /// The dword of a quad's planes in `next` where wide pixel `n` goes when the output
    /// is requantized into them, or None for a pixel [`Self::output_pixel`] drops.
    pub fn requantized_dword(&self, next: &PlaneLayout, n: usize) -> Option<u32> {
        self.output_pixel(n)?;
        let (oh, ow) = (n / self.layout.cols, n % self.layout.cols);
        Some((next.byte_offset(0, oh + next.pad_top, ow + next.pad_left) / 4) as u32)
    }

    /// The kernels' loop order: map tiles outermost when streaming the weights (tiles
    /// of `mr` maps, `weight_bytes` per weight as the K loop reads them) once per column
    /// panel of `panel_pixels` would move more bytes than reading the planes once per
    /// tile; `order` forces one, for measurements.
    pub fn tiles_outer(
        &self,
        order: Int8Order,
        mr: usize,
        panel_pixels: usize,
        weight_bytes: usize,
    ) -> bool {
        let weights =
            self.maps.next_multiple_of(mr) * self.taps.len() * self.k_quads() * 4 * weight_bytes;
        let panels = self.wide().div_ceil(panel_pixels);
        let tiles = self.maps.div_ceil(mr);
        match order {
            Int8Order::Tiles => true,
            Int8Order::Panels => false,
            Int8Order::Auto => weights * panels > self.layout.image_bytes() * tiles,
        }
    }
}

/// The weights `[M][C][kh][kw]` (int8 values) as the kernels read them, for tiles of
/// `mr` maps: `[M/mr][tap][quad][mr][4]`, maps and channels past the ends zero. A
/// depthwise map has one quad per tap, its own, with its weight in its channel's byte
/// and zeros in the other three.
pub fn pack_weights(g: &ConvU8Geometry, w: &[i64], mr: usize) -> Vec<u8> {
    let channels = if g.depthwise { 1 } else { g.layout.channels };
    let taps = g.taps.len();
    let quads = g.k_quads();
    let tiles = g.maps.div_ceil(mr);
    let mut out = vec![0u8; tiles * taps * quads * mr * 4];
    for m in 0..g.maps {
        for c in 0..channels {
            for t in 0..taps {
                let v = w[(m * channels + c) * taps + t] as i8 as u8;
                let (quad, byte) = if g.depthwise {
                    (0, m % 4)
                } else {
                    (c / 4, c % 4)
                };
                let at = (((m / mr * taps + t) * quads + quad) * mr + m % mr) * 4 + byte;
                out[at] = v;
            }
        }
    }
    out
}

/// The int32 bias with the zero point folded in, `bias − zp · Σ w`, padded with zeros
/// to `len` maps.
pub fn folded_bias(g: &ConvU8Geometry, w: &[i64], bias: &[i64], zp: i64, len: usize) -> Vec<i32> {
    let k = w.len() / g.maps.max(1);
    (0..len)
        .map(|m| {
            if m >= g.maps {
                return 0;
            }
            let sum: i64 = w[m * k..(m + 1) * k].iter().sum();
            (bias[m] - zp * sum) as i32
        })
        .collect()
}
