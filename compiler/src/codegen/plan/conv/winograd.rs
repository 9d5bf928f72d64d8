//! Winograd F(m×m, 3×3): which algorithm a conv takes, its buffers' layout (the
//! chunks of tile rows and their sizes), its transforms' machine code, and how it is
//! split into tasks, by chunks or by groups of maps.

use super::{align_up, ConvGeometry, WinogradSplit, WinogradTransforms, F32};
use crate::codegen::isa::Isa;
use crate::codegen::isa::Vector;
use crate::codegen::kernels::gemm::Geometry;
use crate::codegen::kernels::x86;
use crate::codegen::options::{KernelOptions, KernelSource, WinogradChoice};
use crate::codegen::tasks::{self, Split, MAX_TASKS, MIN_TASK_WORK};
use crate::ir::TensorType;
use crate::ops::{Activation, ConvAttrs};

pub(crate) const LANES: usize = 4;

/// The transforms go through memory between their two 1-D passes: a 6×6 tile of f32x4
/// is 36 vectors, and kept in registers (16 on x86-64) it spilled badly. Staged, each
/// pass keeps ~12 vectors live. Two stages of 36 vectors.
pub(crate) const STAGE_BYTES: usize = 2 * 36 * LANES * F32;

/// Bytes of V and M for one chunk of tile rows. Whole, they were 3.6 MB for ResNet's
/// 64-channel 56×56 convs: written and read back through L3, the transforms ran at
/// ~0.7 instructions per cycle and the conv was no faster than the implicit GEMM. A
/// chunk stays in L2 (2 MB here) from its input transform through its GEMMs to its
/// output transform.
pub(crate) const CHUNK_BYTES: usize = 1 << 20;

/// One F(m×m, 3×3) algorithm: the weight transform `G` (rows); the input and output
/// transforms `Bᵀ` and `Aᵀ` are [`input_1d`] and [`output_1d`].
pub(crate) struct Algorithm {
    pub(crate) m: usize,
    pub(crate) g: &'static [[f64; 3]],
}

/// F(2×2, 3×3): points 0, 1, −1.
pub(crate) const F2: Algorithm = Algorithm {
    m: 2,
    g: &[
        [1.0, 0.0, 0.0],
        [0.5, 0.5, 0.5],
        [0.5, -0.5, 0.5],
        [0.0, 0.0, 1.0],
    ],
};

/// F(4×4, 3×3): points 0, ±1, ±2.
pub(crate) const F4: Algorithm = Algorithm {
    m: 4,
    g: &[
        [1.0 / 4.0, 0.0, 0.0],
        [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
        [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
        [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
        [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
        [0.0, 0.0, 1.0],
    ],
};

impl Algorithm {
    /// Output tile side.
    pub(crate) fn m(&self) -> usize {
        self.m
    }

    /// Input tile side, m + 2.
    pub(crate) fn a(&self) -> usize {
        self.m + 2
    }
}

/// Which F(m×m, 3×3) a conv uses, if any. The choice depends on shapes only (not on the
/// target), so the scratch size the memory plan reserves does too.
///
/// `--kernel winograd=off|f2|f4` overrides it, for measurements.
pub(crate) fn algorithm(g: &ConvGeometry, options: &KernelOptions) -> Option<&'static Algorithm> {
    let eligible = g.output.len() == 2
        && g.kernel == [3, 3]
        && g.strides == [1, 1]
        && g.dilations == [1, 1]
        && g.group == 1;
    if !eligible {
        return None;
    }
    match options.winograd {
        WinogradChoice::Off => return None,
        WinogradChoice::F2 => return Some(&F2),
        WinogradChoice::F4 => return Some(&F4),
        WinogradChoice::Auto => {}
    }
    // U holds (m+2)²/9 times the weights' bytes (4× for F4, 1.8× for F2), streamed
    // once per chunk from L2, L3 or memory: with big weights and few tiles that
    // outweighs the saved multiplications. Measured on ResNet-18 (Xeon, AVX-512, ms per
    // conv, direct / F2 / F4): 64 ch 56×56 2.4 / 2.0 / 1.4, 128 ch 28×28 2.4 / 2.0 / 1.5,
    // 256 ch 14×14 2.4 / 2.2 / 3.3, 512 ch 7×7 3.1 / 3.1 / 6.4. Alone and repeated
    // (`benches/bench_conv.py`), F4 also wins on squeezenet's 13×13 convs (48→192 and
    // 64→256: 0.23 / 0.19 / 0.15 and 0.47 / 0.42 / 0.34 ms), whose weights then stay in
    // L2; inside the model they come from L3, and F4's 2.4 MB of transformed weights
    // made the 64→256 convs ~15% slower than F2 (`scripts/profile_model.py`).
    let (h, w) = (g.output[0], g.output[1]);
    let weights = g.mg * g.cg * 9 * F32;
    if h >= 16 && w >= 16 && weights <= 1 << 20 {
        Some(&F4)
    } else if h >= 8 && w >= 8 && weights <= 4 << 20 {
        Some(&F2)
    } else {
        None
    }
}

/// Tiles per chunk below which the chunk's GEMMs (one per transform point, the
/// chunk's tiles as columns) would run mostly partial column panels.
pub(crate) const MIN_CHUNK_TILES: usize = 24;

/// First tile row of chunk `c` of `chunks` over `th` rows: the rows are dealt as evenly
/// as they divide, so chunks differ by at most one row.
pub(crate) fn chunk_start(th: usize, chunks: usize, c: usize) -> usize {
    c * th / chunks
}

/// How many chunks of at most `most` tile rows (what fits the cache) `th` rows of
/// `tw` tiles are cut into when the conv is split into tasks by chunks: the count
/// whose tasks 2, then 4 threads finish soonest (as the pools deal them,
/// [`tasks::makespan`]), then the fewest.
pub(crate) fn balanced_chunks(th: usize, most: usize, tw: usize, work: usize) -> usize {
    let fewest = th.div_ceil(most);
    let least_rows = MIN_CHUNK_TILES.div_ceil(tw.max(1));
    (fewest..=th)
        .filter(|&n| n == fewest || th.div_ceil(n) >= least_rows)
        .min_by_key(|&n| {
            let task_rows = chunk_task_rows(th, n, work);
            (
                tasks::makespan(&task_rows, 2),
                tasks::makespan(&task_rows, 4),
                n,
            )
        })
        .unwrap_or(fewest)
}

/// Tile rows of each task when `th` rows in `chunks` chunks are split into tasks by
/// chunks.
pub(crate) fn chunk_task_rows(th: usize, chunks: usize, work: usize) -> Vec<usize> {
    let split = Split::of(chunks, work);
    (0..split.tasks)
        .map(|t| {
            let end = ((t + 1) * split.per).min(chunks);
            chunk_start(th, chunks, end) - chunk_start(th, chunks, t * split.per)
        })
        .collect()
}

/// The direct conv's multiply-adds: the work a Winograd conv's task split weighs.
pub(crate) fn direct_work(g: &ConvGeometry) -> usize {
    g.out_size() * g.mg * g.cg * 9
}

/// How many chunks of tile rows a conv's V and M are cut into (see [`CHUNK_BYTES`]). A
/// one-image conv is split into tasks by its chunks (see [`task_split`]), so the chunks
/// are cut for threads to share them evenly, not only to fit the cache: SqueezeNet's
/// 55×55 maps (14 tile rows) made chunks of 5, 5 and 4 rows, two of which one thread
/// of two ran (now 4 chunks of 3, 4, 3, 4).
pub(crate) fn chunk_count(g: &ConvGeometry, alg: &Algorithm) -> usize {
    let m = alg.m;
    let (th, tw) = (g.output[0].div_ceil(m), g.output[1].div_ceil(m));
    let a = alg.a();
    let row_bytes = a * a * (g.cg + g.mg) * tw * F32;
    let most = (CHUNK_BYTES / row_bytes).clamp(1, th);
    let work = direct_work(g);
    match g.batch == 1 && th > 1 && Split::of(2, work).tasks == 2 {
        true => balanced_chunks(th, most, tw, work),
        false => th.div_ceil(most),
    }
}

/// Sizes of one batch item's buffers (in floats unless noted).
#[derive(Clone, Copy)]
pub(crate) struct Plan {
    pub(crate) alg: &'static Algorithm,
    pub(crate) channels: usize,
    pub(crate) maps: usize,
    /// Tile rows and columns, and four-tile groups per tile row.
    pub(crate) th: usize,
    pub(crate) tw: usize,
    pub(crate) groups: usize,
    /// Padded input height; phase row length (the padded width is `m·lp`).
    pub(crate) hp: usize,
    pub(crate) lp: usize,
    /// Chunks of tile rows, and the most rows one has: V and M hold one chunk at a
    /// time (see [`CHUNK_BYTES`]). Chunk `c` starts at [`chunk_start`].
    pub(crate) chunks: usize,
    pub(crate) chunk_rows: usize,
    /// Row length of V and M: a chunk's tiles plus slack for the last group's spill.
    pub(crate) ts: usize,
    /// Bytes from one V_ξν to the next, and from one M_ξν to the next (see [`skewed`]):
    /// fixed by the whole conv's channels and maps, also where a transform covers
    /// some of them.
    pub(crate) v_plane: usize,
    pub(crate) m_plane: usize,
}

impl Plan {
    /// The plan for transforms of `lanes` tiles per vector: 4 (Cranelift), 8 or 16.
    pub(crate) fn new(g: &ConvGeometry, alg: &'static Algorithm, lanes: usize) -> Plan {
        Plan::with_chunks(g, alg, lanes, chunk_count(g, alg))
    }

    /// The plan whose V and M hold the whole image: for a conv split by maps (see
    /// `lower::conv::winograd::by_maps`).
    pub(crate) fn whole(g: &ConvGeometry, alg: &'static Algorithm, lanes: usize) -> Plan {
        Plan::with_chunks(g, alg, lanes, 1)
    }

    pub(crate) fn with_chunks(
        g: &ConvGeometry,
        alg: &'static Algorithm,
        lanes: usize,
        chunks: usize,
    ) -> Plan {
        let m = alg.m;
        let (th, tw) = (g.output[0].div_ceil(m), g.output[1].div_ceil(m));
        let groups = tw.div_ceil(lanes);
        let chunk_rows = th.div_ceil(chunks);
        let ts = (chunk_rows * tw + lanes - 1).next_multiple_of(lanes);
        Plan {
            alg,
            channels: g.cg,
            maps: g.mg,
            th,
            tw,
            groups,
            // Rows read: tile row ti reads rows ti·m .. ti·m + m + 2; columns: group gi
            // reads phase columns L·gi .. L·gi + L + (m+1) div m. The phase split
            // works 4 columns at a time.
            hp: th * m + 2,
            lp: lanes * groups + LANES,
            chunks,
            chunk_rows,
            ts,
            v_plane: skewed(g.cg * ts * F32),
            m_plane: skewed(g.mg * ts * F32),
        }
    }

    /// The same plan for `channels` of the conv's input channels and `maps` of its maps.
    pub(crate) fn part(&self, channels: usize, maps: usize) -> Plan {
        Plan {
            channels,
            maps,
            ..*self
        }
    }

    pub(crate) fn wp(&self) -> usize {
        self.alg.m * self.lp
    }

    pub(crate) fn plane_bytes(&self) -> usize {
        align_up(self.channels * self.hp * self.wp() * F32)
    }

    pub(crate) fn v_plane(&self) -> usize {
        self.v_plane
    }

    pub(crate) fn m_plane(&self) -> usize {
        self.m_plane
    }

    pub(crate) fn v_bytes(&self) -> usize {
        let a = self.alg.a();
        a * a * self.v_plane()
    }

    pub(crate) fn m_bytes(&self) -> usize {
        let a = self.alg.a();
        a * a * self.m_plane()
    }

    /// Scratch: padded plane, phase planes, V, M, then [`STAGE_BYTES`] for the
    /// transforms' intermediate vectors.
    pub(crate) fn bytes(&self) -> usize {
        2 * self.plane_bytes() + self.v_bytes() + self.m_bytes() + STAGE_BYTES
    }
}

/// `bytes` rounded up to an odd number of cache lines. The transforms touch the same
/// tiles of all (m+2)² planes of V or M at once; with a plane stride of a multiple of
/// 4 KB (ResNet's 64 channels × 80 floats) those 36 lines fall into one L1 set (12 ways)
/// and alias each other's loads: the input transform ran ~5× slower than its
/// instruction count. An odd line count spreads them over 36 sets.
pub(crate) fn skewed(bytes: usize) -> usize {
    let lines = bytes.div_ceil(64);
    (lines | 1) * 64
}

/// Scratch the Winograd path needs for this conv, or None when it does not apply: the
/// most any transform width needs, so it does not depend on the CPU.
pub(crate) fn scratch_bytes(g: &ConvGeometry, options: &KernelOptions) -> Option<usize> {
    algorithm(g, options).map(|alg| {
        let by_maps = by_maps_fits(g, alg);
        [LANES, 8, 16]
            .iter()
            .map(|&lanes| {
                let whole = match by_maps {
                    true => Plan::whole(g, alg, lanes).bytes(),
                    false => 0,
                };
                Plan::new(g, alg, lanes).bytes().max(whole)
            })
            .max()
            .unwrap_or(0)
    })
}

/// The machine-code transforms' vector width for this conv on `target`, if they apply:
/// 16 tiles per vector on AVX-512 for tile rows of more than 8 tiles, else 8 (ymm, also
/// on AVX-512); rows of up to 4 tiles keep the Cranelift transforms, whose 4 lanes they
/// fill. `--kernel winograd-transform=clif` keeps them always, for measurements.
pub(crate) fn x86_transforms(
    g: &ConvGeometry,
    alg: &'static Algorithm,
    act: Activation,
    isa: &Isa,
    options: &KernelOptions,
) -> Option<Vector> {
    let isa = isa.vector?;
    let tw = g.output[1].div_ceil(alg.m);
    if options.winograd_transform == KernelSource::Clif
        || tw <= LANES
        || !x86::winograd::supports(act)
    {
        return None;
    }
    let isa = if isa == Vector::Zmm && tw > 8 {
        Vector::Zmm
    } else {
        Vector::Ymm
    };
    // The kernels address V, M, the phase planes and an output plane by 32-bit
    // displacements from their bases.
    let plan = Plan::new(g, alg, isa.lanes());
    let a2 = alg.a() * alg.a();
    let reach = [
        a2 * plan.v_plane().max(plan.m_plane()),
        plan.hp * plan.wp() * F32,
        g.output[0] * g.output[1] * F32,
    ];
    (reach.iter().max().copied().unwrap_or(0) < i32::MAX as usize / 2).then_some(isa)
}

/// Whether this conv takes the Winograd path (it also needs constant weights).
pub(crate) fn applies(g: &ConvGeometry, constant_weights: bool, options: &KernelOptions) -> bool {
    algorithm(g, options).is_some() && constant_weights
}

/// The algorithm's output tile `m` and the transforms that run it on `target`.
pub(crate) fn choose(
    g: &ConvGeometry,
    act: Activation,
    isa: &Isa,
    options: &KernelOptions,
) -> Option<(usize, WinogradTransforms)> {
    let alg = algorithm(g, options)?;
    let transforms = if plane_applies(g, alg, act, isa, options) {
        WinogradTransforms::Plane16
    } else {
        match x86_transforms(g, alg, act, isa, options) {
            Some(isa) => WinogradTransforms::X86(isa),
            None => WinogradTransforms::Clif,
        }
    };
    Some((alg.m, transforms))
}

/// How a one-image conv on the tile-row transforms is split into tasks: by chunks of
/// tile rows, or by groups of maps where the rows do not divide evenly between two
/// threads (see `lower::conv::winograd::by_maps`). `gemm` is the planned GEMM family,
/// whose row tiles a group of maps is made of.
pub(crate) fn task_split(
    g: &ConvGeometry,
    m: usize,
    transforms: WinogradTransforms,
    gemm: &Geometry,
) -> WinogradSplit {
    let unsplit = WinogradSplit::Chunks(Split::of(1, 0));
    let lanes = match transforms {
        WinogradTransforms::Plane16 => return unsplit,
        WinogradTransforms::X86(isa) => isa.lanes(),
        WinogradTransforms::Clif => LANES,
    };
    let Some(alg) = [&F2, &F4].into_iter().find(|a| a.m == m) else {
        return unsplit;
    };
    if g.batch != 1 {
        return unsplit;
    }
    if by_maps_fits(g, alg) && by_maps_chunks_uneven(g, alg, gemm) {
        let split = by_maps_split(g.mg, gemm.mr, direct_work(g));
        if split.tasks > 1 {
            return WinogradSplit::Maps(split);
        }
    }
    let plan = Plan::new(g, alg, lanes);
    WinogradSplit::Chunks(Split::of(plan.chunks, direct_work(g)))
}

/// For a conv on run-time planes (`lower::planes::winograd`): the F(m×m, 3×3) this
/// conv takes at its largest extents, if any.
pub(crate) fn on_planes(
    c: &ConvAttrs,
    (x, w, y): (&TensorType, &TensorType, &TensorType),
    options: &KernelOptions,
) -> Option<&'static Algorithm> {
    let g = ConvGeometry::new(c, x, w, y).ok()?;
    algorithm(&g, options)
}

/// F(m×m, 3×3) by its m (2 or 4; F4 otherwise).
pub(crate) fn algorithm_of(m: usize) -> &'static Algorithm {
    match m {
        2 => &F2,
        _ => &F4,
    }
}

/// The whole-plane transforms (`lower/winograd_plane_x86.rs`) for F(2×2) convs of at
/// most 16 tiles on AVX-512 targets, if they apply. `--kernel winograd-transform=clif` keeps
/// the Cranelift transforms, for measurements.
pub(crate) fn plane_applies(
    g: &ConvGeometry,
    alg: &'static Algorithm,
    act: Activation,
    isa: &Isa,
    options: &KernelOptions,
) -> bool {
    let (in_h, in_w, out_h, out_w) = (g.input[0], g.input[1], g.output[0], g.output[1]);
    isa.vector == Some(Vector::Zmm)
        && alg.m == 2
        && options.winograd_transform == KernelSource::Auto
        && x86::winograd_plane::applies(in_h, in_w, out_h, out_w, act)
}

/// Maps per task at least: fewer make the GEMMs short and every task reads all of V.
pub(crate) const MIN_GROUP_MAPS: usize = 48;

/// Whether a conv may be split by maps (from its shape alone, so the scratch the
/// memory plan reserves does not depend on the CPU): one image whose chunks of tile
/// rows two threads would share unevenly (by more than 5%), with a whole-image V that
/// stays near a core's L2.
pub(crate) fn by_maps_fits(g: &ConvGeometry, alg: &'static Algorithm) -> bool {
    let work = direct_work(g);
    if g.batch != 1 || Split::of(2, work).tasks < 2 || g.mg < 2 * MIN_GROUP_MAPS {
        return false;
    }
    let th = g.output[0].div_ceil(alg.m);
    let rows = chunk_task_rows(th, chunk_count(g, alg), work);
    let uneven = 20 * 2 * tasks::makespan(&rows, 2) > 21 * th;
    uneven && whole_v_bytes(g, alg) <= 2 * CHUNK_BYTES
}

/// Whether two threads would share the chunk tasks' GEMMs unevenly (by more than 5%)
/// on kernels of `gemm`'s vector width: a GEMM's cost follows its tiles rounded up to
/// whole vectors, so with 16 lanes ResNet's 7-row convs cut 4 + 3 rows of 7 tiles
/// (28 and 21 columns) take two vectors each and balance; with 8 or 4 lanes they do not.
pub(crate) fn by_maps_chunks_uneven(
    g: &ConvGeometry,
    alg: &'static Algorithm,
    gemm: &Geometry,
) -> bool {
    let work = direct_work(g);
    let tw = g.output[1].div_ceil(alg.m);
    let vectors: Vec<usize> =
        chunk_task_rows(g.output[0].div_ceil(alg.m), chunk_count(g, alg), work)
            .iter()
            .map(|&rows| (rows * tw).div_ceil(gemm.lanes.max(1)))
            .collect();
    let total: usize = vectors.iter().sum();
    20 * 2 * tasks::makespan(&vectors, 2) > 21 * total
}

/// V of the whole image, for the widest transforms.
pub(crate) fn whole_v_bytes(g: &ConvGeometry, alg: &'static Algorithm) -> usize {
    [LANES, 8, 16]
        .iter()
        .map(|&lanes| Plan::whole(g, alg, lanes).v_bytes())
        .max()
        .unwrap_or(usize::MAX)
}

/// Groups of `mr`-row tiles of `maps` maps: a power-of-two count (for 2, 4 … threads
/// to share equally), of at least [`MIN_GROUP_MAPS`] maps and [`MIN_TASK_WORK`] each.
pub(crate) fn by_maps_split(maps: usize, mr: usize, work: usize) -> Split {
    let most = (maps / MIN_GROUP_MAPS)
        .min(work / MIN_TASK_WORK)
        .clamp(1, MAX_TASKS);
    let wanted = 1 << most.ilog2();
    let units = maps.div_ceil(mr.max(1));
    let per = units.div_ceil(wanted);
    Split {
        units,
        per,
        tasks: units.div_ceil(per),
    }
}

#[cfg(test)]
mod by_maps_tests {
    use super::*;

    #[test]
    fn groups_are_powers_of_two_of_whole_tiles() {
        let work = 1 << 30;
        // 128 maps in 8-row tiles: 2 groups of 8 tiles.
        assert_eq!(
            by_maps_split(128, 8, work),
            Split {
                units: 16,
                per: 8,
                tasks: 2
            }
        );
        // 192 maps: 4 groups of 48; 256 maps in 6-row tiles: 4 groups of 11 tiles, the
        // last of 9.
        assert_eq!(by_maps_split(192, 8, work).tasks, 4);
        let s = by_maps_split(256, 6, work);
        assert_eq!((s.per, s.tasks, s.last()), (11, 4, 10));
        // Too little work for more than one task.
        assert_eq!(by_maps_split(512, 8, MIN_TASK_WORK).tasks, 1);
    }
}

#[cfg(test)]
mod chunk_tests {
    use super::*;
    use crate::codegen::tasks::MIN_TASK_WORK;

    fn sizes(th: usize, chunks: usize) -> Vec<usize> {
        (0..chunks)
            .map(|c| chunk_start(th, chunks, c + 1) - chunk_start(th, chunks, c))
            .collect()
    }

    #[test]
    fn chunks_are_cut_for_two_threads_to_finish_together() {
        let work = 1000 * MIN_TASK_WORK;
        // SqueezeNet's 55×55 maps with F(4): 14 tile rows of 14 tiles, at most 5 per
        // chunk in cache: 3 + 4 rows per thread, not 5 + 5 against 4.
        let n = balanced_chunks(14, 5, 14, work);
        assert_eq!(sizes(14, n), [3, 4, 3, 4]);
        // Its 13×13 maps with F(2): 7 rows of 7 tiles fit one chunk; cut in two.
        assert_eq!(sizes(7, balanced_chunks(7, 7, 7, work)), [3, 4]);
        // Every row in exactly one chunk, sizes at most one apart.
        for th in 1..40 {
            for n in 1..=th {
                let s = sizes(th, n);
                assert_eq!(s.iter().sum::<usize>(), th);
                assert!(s.iter().max().unwrap() - s.iter().min().unwrap() <= 1);
            }
        }
    }
}

/// Where [`output_tile`] stages `o[i][j]`, in bytes from the stage (after `z`).
pub(crate) const OUTPUT_TILE_AT: usize = 36 * LANES * F32;
