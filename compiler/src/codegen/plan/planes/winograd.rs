//! The plan of a 3×3 conv on run-time planes by Winograd: its chunk of tiles, the
//! padded channels' and V's and M's layout at the largest extents, and its transforms'
//! machine code.

use crate::codegen::isa::Isa;
use crate::codegen::isa::Vector;
use crate::codegen::kernels::gemm::Geometry;
use crate::codegen::kernels::x86;
use crate::codegen::options::{KernelOptions, KernelSource};
use crate::codegen::plan::conv::winograd::{
    algorithm_of, on_planes, skewed, Algorithm, CHUNK_BYTES, LANES, OUTPUT_TILE_AT,
};
use crate::ir::TensorType;
use crate::ops::ConvAttrs;

const F32: usize = 4;

/// Vectors of staging for one four-tile group: the transforms' (`OUTPUT_TILE_AT`, then
/// the output tile's m²), and the m rows of 4·m output floats a partial group stores
/// from.
pub(crate) const STAGE_VECTORS: usize = OUTPUT_TILE_AT / (LANES * F32) + 16 + 16;

/// How a conv on planes runs by Winograd: sizes fixed by the largest extents.
#[derive(Clone, Debug, PartialEq)]
pub struct WinogradPlan {
    /// Output tile side (2 or 4).
    pub m: usize,
    pub channels: usize,
    pub maps: usize,
    /// Tiles per chunk: whole panels of the GEMM.
    pub chunk_tiles: usize,
    /// Rows of a padded channel, and floats of each of its rows' m phases.
    pub padded_rows: usize,
    pub phase_floats: usize,
    pub geometry: Geometry,
    /// The widest machine-code transforms (x86), where they apply: each call
    /// transforms one tile row by groups of 16 (zmm) or 8 (ymm) tiles, the narrower
    /// for rows of at most 8 tiles. `None`: the Cranelift transforms, 4 tiles a group.
    pub transforms: Option<Vector>,
}

/// Floats of slack after each phase row and each row of V and M: a group of tiles
/// reads and writes past the tiles it has, up to a zmm's 16 lanes.
pub(crate) const GROUP_SLACK: usize = 16;

impl WinogradPlan {
    /// The plan for conv `c` from `x` to `y` (at their largest extents), or `None` when
    /// Winograd does not apply (see `conv::winograd`'s choice).
    pub fn new(
        c: &ConvAttrs,
        (x, w, y): (&TensorType, &TensorType, &TensorType),
        (geometry, isa): (Geometry, &Isa),
        options: &KernelOptions,
    ) -> Option<WinogradPlan> {
        if x.rank() != 4 || c.pads.len() != 4 {
            return None;
        }
        let alg = on_planes(c, (x, w, y), options)?;
        let (m, a) = (alg.m(), alg.a());
        let (channels, maps) = (x.shape[1], y.shape[1]);
        let tiles = y.shape[2].div_ceil(m) * y.shape[3].div_ceil(m);
        let nr = geometry.nr;
        let fit = CHUNK_BYTES / (a * a * (channels + maps) * F32);
        let chunk_tiles = (fit / nr).max(1) * nr;
        let chunk_tiles = chunk_tiles.min(tiles.next_multiple_of(nr));
        // Rows and columns read past the pads by the last tile row and column, and
        // four phase floats of slack for a group's spill.
        let padded_rows = x.shape[2] + c.pads[0] + c.pads[2] + m - 1;
        let padded_cols = x.shape[3] + c.pads[1] + c.pads[3] + m - 1;
        let transforms = isa.vector.filter(|_| {
            options.winograd_transform != KernelSource::Clif
                && x86::winograd::supports(c.activation)
        });
        Some(WinogradPlan {
            m,
            channels,
            maps,
            chunk_tiles,
            padded_rows,
            phase_floats: (padded_cols.div_ceil(m) + GROUP_SLACK).next_multiple_of(LANES),
            geometry,
            transforms,
        })
    }

    pub(crate) fn alg(&self) -> &'static Algorithm {
        algorithm_of(self.m)
    }

    pub(crate) fn a(&self) -> usize {
        self.m + 2
    }

    /// Floats per row of V and M: a chunk's tiles and a group's spill.
    pub(crate) fn row_floats(&self) -> usize {
        self.chunk_tiles + GROUP_SLACK
    }

    pub(crate) fn v_plane(&self) -> usize {
        skewed(self.channels * self.row_floats() * F32)
    }

    pub(crate) fn m_plane(&self) -> usize {
        skewed(self.maps * self.row_floats() * F32)
    }

    pub(crate) fn padded_row_bytes(&self) -> usize {
        self.m * self.phase_floats * F32
    }

    pub(crate) fn channel_bytes(&self) -> usize {
        skewed(self.padded_rows * self.padded_row_bytes())
    }

    /// Scratch offsets: padded channels (and a vector of slack for the last group's
    /// spill), V, M, staging.
    pub(crate) fn v_at(&self) -> usize {
        self.channels * self.channel_bytes() + 64
    }

    pub(crate) fn m_at(&self) -> usize {
        self.v_at() + self.a() * self.a() * self.v_plane()
    }

    pub(crate) fn stage_at(&self) -> usize {
        self.m_at() + self.a() * self.a() * self.m_plane()
    }

    pub fn scratch_bytes(&self) -> usize {
        self.stage_at() + STAGE_VECTORS * LANES * F32
    }

    /// Widths of the GEMM's calls, widest first: the chunk, then whole panels halving
    /// down to one.
    pub(crate) fn widths(&self) -> Vec<usize> {
        let nr = self.geometry.nr;
        let widest = self.chunk_tiles;
        let mut widths = vec![widest];
        let mut w = (widest / nr).next_power_of_two() * nr;
        while w > nr {
            w /= 2;
            if w < widest {
                widths.push(w);
            }
        }
        widths
    }
}
