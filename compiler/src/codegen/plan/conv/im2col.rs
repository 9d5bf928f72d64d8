//! The im2col path's scratch layout and its split by column chunks.

use super::{align_up, position_split, wide_columns, ConvGeometry, PhasePlanes};
use super::{F32, IM2COL_CHUNK_BYTES};
use crate::codegen::kernels::gemm::PANEL_QUANTUM;
use crate::codegen::tasks::Split;

/// Scratch layout and tables of the im2col path. Output positions are grouped into
/// chunks of `chunk_cols` (whole panels of any kernel family, see [`PANEL_QUANTUM`]).
pub(crate) struct Im2colLayout {
    /// Bytes of the zero-padded copy of one group's input (0 without padding).
    pub(crate) padded_bytes: usize,
    /// Bytes of the stride-2 implicit GEMM's phase planes, after the columns (0 for
    /// other convs).
    pub(crate) phase_bytes: usize,
    pub(crate) chunk_cols: usize,
    /// Bytes of one chunk of packed panels (for the widest panels of any family).
    pub(crate) col_bytes: usize,
}

impl Im2colLayout {
    pub(crate) fn new(g: &ConvGeometry) -> Im2colLayout {
        let k = g.gemm_k();
        let p = g.out_size();
        let padded_bytes = g.padded_copy_bytes();
        let quantum_bytes = k * PANEL_QUANTUM * F32;
        // As many chunks as the byte budget needs, then equal chunk widths, so the
        // last chunk is not a sliver.
        let quanta = p.div_ceil(PANEL_QUANTUM).max(1);
        // A conv split into tasks has at least a chunk per task.
        let per_task = quanta.div_ceil(position_split(g, quanta).tasks);
        let per_chunk = (IM2COL_CHUNK_BYTES / quantum_bytes.max(1)).clamp(1, per_task);
        let chunk_cols = PANEL_QUANTUM * quanta.div_ceil(quanta.div_ceil(per_chunk));
        let mut col_bytes = k * p.min(chunk_cols).div_ceil(PANEL_QUANTUM) * PANEL_QUANTUM * F32;
        if let Some(cols) = wide_columns(g) {
            // The implicit GEMM's wide output shares the region (see conv_implicit_gemm).
            col_bytes = col_bytes.max(g.mg * cols * F32);
        }
        Im2colLayout {
            padded_bytes,
            phase_bytes: PhasePlanes::of(g).map_or(0, |p| align_up(p.floats(g) * F32)),
            chunk_cols,
            col_bytes,
        }
    }

    pub(crate) fn bytes(&self) -> usize {
        self.padded_bytes + align_up(self.col_bytes) + self.phase_bytes
    }
}

/// The column chunks a batch-1, one-group im2col conv is split into tasks by.
pub(crate) fn im2col_split(g: &ConvGeometry) -> Split {
    let layout = Im2colLayout::new(g);
    position_split(g, g.out_size().div_ceil(layout.chunk_cols))
}
