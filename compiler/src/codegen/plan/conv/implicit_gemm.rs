//! When a conv runs as the implicit GEMM (the input, or its stride-2 phase planes,
//! read in place), its wide output rows and its split by row chunks.

use super::{position_split, ConvGeometry, F32, IMPLICIT_C_BYTES};
use crate::codegen::kernels::gemm::{Geometry, KernelKind};
use crate::codegen::options::{ConvRows, KernelOptions, Toggle};
use crate::codegen::tasks::Split;

/// A stride-2 conv's padded input split into its 2×2 phases, `Q[c][ph][pw][i][j] =
/// P[c][2i + ph][2j + pw]`: output (oh, ow) at tap (kh, kw) reads phase
/// (kh mod 2, kw mod 2) at (oh + kh div 2, ow + kw div 2), so in phase coordinates the
/// conv has stride 1 and runs as the implicit GEMM (no im2col copy of the 7×7 stem's
/// 147 × 12544 matrix; measured on ResNet-18's stem, im2col was ~40% of its time).
#[derive(Clone, Copy)]
pub(crate) struct PhasePlanes {
    /// Rows and columns of one phase plane.
    pub(crate) h: usize,
    pub(crate) w: usize,
}

impl PhasePlanes {
    pub(crate) fn of(g: &ConvGeometry) -> Option<PhasePlanes> {
        if g.output.len() != 2 || g.strides != [2, 2] || g.dilations != [1, 1] {
            return None;
        }
        let padded = g.padded();
        // Whole vectors of 8 padded floats per row (the split reads them in pairs).
        Some(PhasePlanes {
            h: padded[0].div_ceil(2),
            w: padded[1].div_ceil(8) * 4,
        })
    }

    pub(crate) fn floats(&self, g: &ConvGeometry) -> usize {
        g.cg * 4 * self.h * self.w
    }

    /// Byte offset of each K row `(channel, kh, kw)` in the phase planes.
    pub(crate) fn taps(&self, g: &ConvGeometry) -> Result<Vec<i32>, String> {
        if self.floats(g) * F32 > i32::MAX as usize {
            return Err("Conv input too large for 32-bit offsets".to_string());
        }
        let mut tap = Vec::with_capacity(g.gemm_k());
        for c in 0..g.cg {
            for kh in 0..g.kernel[0] {
                for kw in 0..g.kernel[1] {
                    let plane = c * 4 + (kh % 2) * 2 + kw % 2;
                    let off = (plane * self.h + kh / 2) * self.w + kw / 2;
                    tap.push((off * F32) as i32);
                }
            }
        }
        Ok(tap)
    }
}

/// Columns of the "wide" output of [`conv_implicit_gemm`] for a 2-D conv of stride 1
/// (or 2, over [`PhasePlanes`]): every input row yields `row` columns (the padded width,
/// or a phase plane's), the last `row − out` of each being garbage, except in the last
/// row.
pub(crate) fn wide_columns(g: &ConvGeometry) -> Option<usize> {
    let row = wide_row(g)?;
    Some((g.output[0] - 1) * row + g.output[1])
}

/// Row length of the implicit GEMM's input and wide output.
pub(crate) fn wide_row(g: &ConvGeometry) -> Option<usize> {
    if g.output.len() != 2 {
        return None;
    }
    if g.strides.iter().all(|&s| s == 1) {
        return Some(g.padded()[1]);
    }
    PhasePlanes::of(g).map(|p| p.w)
}

/// Whether [`conv_implicit_gemm`] computes this conv: 2-D, stride 1, on an x86 kernel
/// (only those read B through a K-row table), when the garbage columns of the wide
/// output cost less than im2col would. im2col copies K·P floats for 2·M·K·P flops, so
/// its share shrinks with M; measured on this Xeon (3×3 convs): ~30% of the time at
/// 56×56 and M = 64, ~10% at 14×14 and M = 256 (where the 2 garbage columns of 16 cost
/// 14%), and ~45% for digits_cnn's 8×8, M = 32 conv (25% garbage).
pub(crate) fn implicit_gemm_fits(
    g: &ConvGeometry,
    geom: &Geometry,
    options: &KernelOptions,
) -> bool {
    const MIN_OUT_W: usize = 24;
    const SMALL_M: usize = 64;
    // Stride 2 over phase planes pays for copying all four phases and for a K loop
    // that reads B through the tap table with unaligned loads: measured (one conv,
    // A/B against im2col) 7×7 stem K = 147: 2.0 vs 2.5 ms; 3×3, K = 576: even;
    // 3×3, K = 27: 1.08 vs 0.85 ms; 1×1, K = 64: 0.33 vs 0.17 ms. So only for long K,
    // or when the rows are written in place (no compaction copy): SqueezeNet's K = 27
    // stem, 0.57–1.05 vs 0.71–1.09 ms against im2col (see IN_PLACE_MIN_OUT_W).
    // `--kernel phase-planes=off` keeps every stride-2 conv on im2col, for measurements.
    const MIN_PHASE_K: usize = 64;
    let phases_ok = options.phase_planes == Toggle::Auto
        && (g.gemm_k() >= MIN_PHASE_K || writes_rows_in_place(g, options))
        && g.taps() > 1;
    matches!(geom.kernel, KernelKind::X86(_))
        && wide_columns(g).is_some()
        && (phases_ok || PhasePlanes::of(g).is_none())
        && (g.output[1] >= MIN_OUT_W || (g.output[1] >= 8 && g.mg <= SMALL_M))
}

/// Whether a split implicit-GEMM conv has a prologue: when it pads or splits its input
/// into phase planes.
pub(crate) fn implicit_has_prologue(g: &ConvGeometry) -> bool {
    g.has_padding() || PhasePlanes::of(g).is_some()
}

/// The row chunks a batch-1 implicit-GEMM conv is split into tasks by.
pub(crate) fn implicit_split(g: &ConvGeometry, options: &KernelOptions) -> Split {
    let row_bytes = match writes_rows_in_place(g, options) {
        true => g.mg * g.output[1] * F32,
        false => g.mg * wide_row(g).unwrap_or(1) * F32,
    };
    let (_, loop_chunks, _) = row_chunks(g, row_bytes);
    position_split(g, loop_chunks + 1)
}

/// Splits the output rows, `row_bytes` of C each, into calls of `chunk_rows` rows, C of
/// one call within IMPLICIT_C_BYTES and at least a call per task when the conv is
/// split: `(chunk_rows, full chunks, rows of the last)`.
pub(crate) fn row_chunks(g: &ConvGeometry, row_bytes: usize) -> (usize, usize, usize) {
    let out_h = g.output[0];
    // A conv split into tasks has at least a chunk per task.
    let per_task = out_h.div_ceil(position_split(g, out_h).tasks);
    let chunk_rows = (IMPLICIT_C_BYTES / row_bytes.max(1)).clamp(1, per_task);
    let last_rows = match out_h % chunk_rows {
        0 => chunk_rows,
        r => r,
    };
    (chunk_rows, (out_h - last_rows) / chunk_rows, last_rows)
}

/// Output rows at least this wide are written by the implicit GEMM in place, row by row
/// (panels within each row), instead of as a wide output that a copy compacts: the
/// copy is a second pass over the whole output (the 7×7 stem: 3.2 MB), and at this
/// width the row's last, partial panel wastes little. Measured (`benches/bench_conv.py`,
/// `--kernel conv-rows=wide` for the old path): ResNet's 7×7 stem 2.0–2.1 vs 2.4–2.6 ms,
/// SqueezeNet's K = 27 stem (now over phase planes) 0.57–1.05 vs 0.71–1.09 ms against
/// im2col. Narrower rows (56, 28, 14) keep the wide output, whose panels run across
/// rows.
pub(crate) const IN_PLACE_MIN_OUT_W: usize = 96;

pub(crate) fn writes_rows_in_place(g: &ConvGeometry, options: &KernelOptions) -> bool {
    options.conv_rows == ConvRows::Auto && g.output.len() == 2 && g.output[1] >= IN_PLACE_MIN_OUT_W
}
