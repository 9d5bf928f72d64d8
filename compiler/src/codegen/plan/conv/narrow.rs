//! When a conv takes the transposed GEMM `Yᵀ = Xᵀ·Wᵀ` (few positions, many maps),
//! its scratch layout and task split.

use super::{align_up, choose_path, ConvGeometry, ConvPath, F32};
use crate::codegen::kernels::gemm::{Geometry, KernelKind, LANES};
use crate::codegen::options::{KernelOptions, Toggle};
use crate::codegen::tasks::Split;
use crate::ir::DType;

/// At most this many output positions (a 7×7 or 8×8 map) ...
pub(crate) const MAX_POSITIONS: usize = 64;

/// ... and at least this many maps.
pub(crate) const MIN_MAPS: usize = 128;

/// Whether the shape suits the transposed GEMM (independent of the target, so the
/// memory plan's scratch is too).
pub(crate) fn shape_fits(g: &ConvGeometry) -> bool {
    g.group == 1 && g.out_size() <= MAX_POSITIONS && g.mg >= MIN_MAPS
}

/// Whether this conv takes the transposed path: the shape, constant weights, and an
/// x86 machine-code GEMM. `--kernel narrow-conv=off` disables it, for measurements.
pub(crate) fn applies(
    g: &ConvGeometry,
    constant_weights: bool,
    gemm: &Geometry,
    options: &KernelOptions,
) -> bool {
    options.narrow_conv == Toggle::Auto
        && shape_fits(g)
        && constant_weights
        && matches!(gemm.kernel, KernelKind::X86(_))
}

pub(crate) fn pointwise(g: &ConvGeometry) -> bool {
    choose_path(g, DType::F32) == ConvPath::Pointwise
}

/// Scratch layout: the padded input and the im2col matrix (not for pointwise convs),
/// then `Yᵀ`.
pub(crate) struct Layout {
    pub(crate) padded_bytes: usize,
    /// Row length of the im2col matrix: P rounded up to whole f32x4 vectors.
    pub(crate) cols_width: usize,
    pub(crate) cols_bytes: usize,
    pub(crate) out_bytes: usize,
    /// Xᵀ copied into the GEMM's packed-A layout (see [`pack_a_rows`]).
    pub(crate) packed_a_bytes: usize,
}

impl Layout {
    pub(crate) fn new(g: &ConvGeometry) -> Layout {
        let p = g.out_size();
        let cols_width = p.next_multiple_of(LANES);
        let (padded_bytes, cols_bytes) = if pointwise(g) {
            (0, 0)
        } else {
            (
                g.padded_copy_bytes(),
                align_up(g.gemm_k() * cols_width * F32),
            )
        };
        Layout {
            padded_bytes,
            cols_width,
            cols_bytes,
            out_bytes: align_up(p * g.mg * F32),
            packed_a_bytes: align_up(p * g.gemm_k() * F32),
        }
    }

    pub(crate) fn packed_a_offset(&self) -> usize {
        self.padded_bytes + self.cols_bytes + self.out_bytes
    }

    pub(crate) fn bytes(&self) -> usize {
        self.padded_bytes + self.cols_bytes + self.out_bytes + self.packed_a_bytes
    }
}

/// Scratch the transposed path needs, or None when the shape does not suit it.
pub(crate) fn scratch_bytes(g: &ConvGeometry) -> Option<usize> {
    shape_fits(g).then(|| Layout::new(g).bytes())
}

/// How a batch-1 transposed conv GEMM is split into tasks: by groups of column panels
/// (the maps), each task streaming its share of the weights; the im2col matrix, made
/// once in a prologue, is read by all.
pub(crate) fn split(g: &ConvGeometry, gemm: &Geometry) -> Split {
    if g.batch != 1 {
        return Split::of(1, 0);
    }
    let work = g.out_size() * g.mg * g.gemm_k();
    Split::of(g.mg.div_ceil(gemm.nr), work)
}

/// How the prologue of a split transposed conv (padded copy, im2col matrix, packed
/// Xᵀ) is split into parts by input channels: each part pads its channels, writes
/// their K rows of the matrix and packs those rows.
pub(crate) fn prologue_split(g: &ConvGeometry) -> Split {
    let plane: usize = g.padded().iter().product();
    let rows = g.taps() * Layout::new(g).cols_width;
    Split::of(g.cg, g.cg * (plane + 2 * rows) * super::PROLOGUE_COPY_COST)
}
