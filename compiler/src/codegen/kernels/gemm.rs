//! The float32 GEMM's interface, shared by every GEMM micro-kernel (machine code in
//! `x86/gemm.rs`, Cranelift in `clif/gemm.rs`) and the lowering that calls them:
//! `C[M,N] = alpha · A[M,K] · B[K,N] + Σ scale · T`, where each addend `T` is broadcast
//! to `[M,N]` through its strides (Gemm's C, a per-row conv bias, a per-column bias).
//!
//! Constant B (weights) is packed at compile time by [`pack_b`] into column panels, each
//! `[k][NR]` contiguous, so the K loop walks memory linearly; im2col writes the same
//! layout at run time. Constant A (conv weights) is packed by [`pack_a`] into row tiles
//! `[k][MR]`, so the MR broadcasts of a K step come from one cache line.

use crate::codegen::isa::Isa;
use cranelift_codegen::ir::{InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;

use crate::codegen::isa::Vector;
use crate::codegen::options::{GemmOrder, KernelOptions, KernelSource, Toggle};
use crate::codegen::target::{Arch, CpuFeature, Target};
use crate::ops::Activation;

/// f32 lanes in a vector register (Cranelift lowers 128-bit vectors only).
pub const LANES: usize = 4;
/// Rows of a register tile. 5 rows × 2 vectors = 10 accumulators, plus 2 B vectors and
/// one broadcast, fit the 16 vector registers of x86-64 without EVEX; per K step that
/// is 10 FMAs for 12 loads, within the load ports' budget. Measured on the 256³ GEMM
/// (Xeon, interleaved runs): 4×8 and 6×8 tiles were 5–10% slower, 6×8 spilled.
pub const MR: usize = 5;
/// Columns of a register tile: two f32x4.
pub const NR: usize = 2 * LANES;

/// How A is laid out in memory.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ALayout {
    /// `A[i, k]` at `(i·row_stride + k·col_stride)·4` bytes: (K, 1) for row-major A,
    /// (1, M) for a transposed one.
    Strided {
        row_stride: usize,
        col_stride: usize,
    },
    /// Laid out by [`pack_a`].
    Packed,
}

/// How B is laid out in memory.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BLayout {
    /// Laid out by [`pack_b`] (or written in that layout at run time).
    Packed,
    /// Laid out by [`pack_b_blocks`] (x86 kernels only): K blocks of `geometry.kc`
    /// steps, each holding the block of every panel in turn.
    PackedBlocks,
    /// `B[k, j]` at `(k·row_stride + j)·4` bytes: rows contiguous along N.
    Rows { row_stride: usize },
    /// `B[k, j]` at `(k·k_stride + j·n_stride)·4` bytes with `n_stride ≠ 1` (a
    /// transposed B only known at run time): each vector is gathered lane by lane.
    Gather { k_stride: usize, n_stride: usize },
    /// Implicit GEMM over a (padded) NCHW conv input, stride 1, x86 kernels only:
    /// `B[k, q]` for output position `q = oh·out_w + ow` is at byte
    /// `GemmSpec::b_taps[k] + (oh·row_step + ow)·4`, so each K row of a panel inside one
    /// output row is a contiguous run of the input and no im2col copy is made.
    Taps {
        out_w: usize,
        out_h: usize,
        /// Elements from one output row's inputs to the next (the padded row width).
        row_step: usize,
    },
}

/// `scale · T[i·row_stride + j·col_stride]` is added to `C[i, j]`. A `col_stride` of 0
/// (broadcast) or 1 keeps the epilogue on vectors; others go lane by lane.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Addend {
    pub row_stride: usize,
    pub col_stride: usize,
    pub scale: f32,
}

/// One GEMM shape: sizes and layouts are static, base addresses are the kernel's
/// arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct GemmSpec {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: ALayout,
    pub b: BLayout,
    /// `C[i, j]` at `(i·ldc + j·c_col_stride)·4` bytes.
    pub ldc: usize,
    /// 1 but for ConvTranspose, whose stride scatters output columns.
    pub c_col_stride: usize,
    pub alpha: f32,
    pub addends: Vec<Addend>,
    /// Applied last, after alpha and the addends (epilogue fusion).
    pub activation: Activation,
    /// The kernel family, which also fixes the layout of packed A and B.
    pub geometry: Geometry,
    /// Byte offset of each K row for [`BLayout::Taps`]; empty otherwise.
    pub b_taps: Vec<i32>,
    /// The kernel takes the number of rows to compute (at most `m`, which the plan is
    /// for) as its last argument: rows whose count only the run knows.
    pub rows_at_run_time: bool,
    /// The kernel takes the number of columns to compute (at most `n`) as its last
    /// argument (after the rows' count, if any): a block whose width only the run
    /// knows, computed without rounding it up to a planned width. B must be
    /// [`BLayout::Rows`] (read with masks where the columns end); x86 machine code only.
    pub cols_at_run_time: bool,
    /// Row strides the kernel takes at run time.
    pub run_time_strides: RunTimeStrides,
}

/// Which row strides of a GEMM the kernel takes at run time, as its last argument (in
/// floats): planes whose size only the run knows. x86 machine code only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunTimeStrides {
    /// Every stride is the spec's.
    None,
    /// One stride for B (its `row_stride` unused), C (`ldc` unused) and every addend
    /// read per column (their `row_stride` unused): planes read and written in place.
    /// B must be [`BLayout::Rows`].
    BAndC,
    /// One stride for C and every addend read per column, B's the spec's: a block of
    /// gathered patches whose GEMM writes the planes.
    C,
    /// K is the run's (at most the spec's `k`), and A's rows are K floats apart: a
    /// product of rows whose length only the run knows (attention's probabilities
    /// times its values). A must be strided with unit columns and B
    /// [`BLayout::Rows`]; C's stride is the spec's.
    AK,
}

impl RunTimeStrides {
    /// Whether the kernel takes a stride argument.
    pub fn any(self) -> bool {
        self != RunTimeStrides::None
    }

    /// Whether B's rows are the run's stride apart.
    pub fn b(self) -> bool {
        self == RunTimeStrides::BAndC
    }

    /// Whether C's rows (and the addends read per column) are the run's stride apart.
    pub fn c(self) -> bool {
        matches!(self, RunTimeStrides::BAndC | RunTimeStrides::C)
    }
}

/// Which kernel family computes a GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelKind {
    /// Cranelift code on f32x4 ([`super::gemm_tile`]); every target.
    Clif,
    /// Machine code for AVX2 or AVX-512 ([`super::gemm_x86`]).
    X86(Vector),
}

/// A kernel family's register tile, which is also the layout of packed operands:
/// packed A comes in tiles of `mr` rows, packed B in panels of `nr` columns, the last
/// one `lanes`-rounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub kernel: KernelKind,
    pub mr: usize,
    pub nr: usize,
    pub lanes: usize,
    /// K steps per block of packed A: packed A is stored block after block, each block
    /// tile after tile, so a pass over one K block reads A as one sequential stream
    /// (tile by tile with whole-K tiles, every tile's block was a separate 4 KB run,
    /// and the 3×3×512 convs streaming 9.4 MB of weights from L3 ran at ~80 GFLOP/s).
    pub kc: usize,
    /// Forced loop order of the machine-code kernel (`--kernel gemm-order=...`).
    pub order: GemmOrder,
    /// Whether the machine-code kernel prefetches the next packed-B panel.
    pub prefetch: bool,
}

impl Geometry {
    pub const CLIF: Geometry = Geometry {
        kernel: KernelKind::Clif,
        mr: MR,
        nr: NR,
        lanes: LANES,
        kc: usize::MAX,
        order: GemmOrder::Auto,
        prefetch: false,
    };

    fn x86(isa: Vector) -> Geometry {
        let (mr, vecs) = isa.tile();
        Geometry {
            kernel: KernelKind::X86(isa),
            mr,
            nr: vecs * isa.lanes(),
            lanes: isa.lanes(),
            kc: super::x86::gemm::k_block(vecs * isa.lanes()),
            order: GemmOrder::Auto,
            prefetch: true,
        }
    }

    /// The fastest family `isa` has (its float32 machine code, else Cranelift's 128-bit
    /// code, always on aarch64 where NEON is 128-bit anyway); `--kernel gemm=clif`
    /// forces the Cranelift kernels, for comparisons.
    pub fn for_isa(isa: &Isa, options: &KernelOptions) -> Geometry {
        match isa.vector {
            Some(isa) if options.gemm == KernelSource::Auto => Geometry {
                order: options.gemm_order,
                prefetch: options.gemm_prefetch == Toggle::Auto,
                ..Geometry::x86(isa)
            },
            _ => Geometry::CLIF,
        }
    }

    /// K steps per block for a GEMM of depth `k`: `kc`, or all of K when it is at most
    /// 1.5·kc. Every block after the first reloads C and adds to it, a pass over all of
    /// C: for ResNet's 7×7 stem (K = 147 = 128 + 19) that was a second sweep over a
    /// 3 MB output for 19 steps. A block of 1.5·kc keeps B's block within 36 KB of L1.
    pub fn k_block_len(&self, k: usize) -> usize {
        if k <= self.kc.saturating_add(self.kc / 2) {
            k.max(1)
        } else {
            self.kc
        }
    }

    /// Width of the last, partial column panel of packed B: the leftover columns
    /// rounded up to whole vectors, so narrow outputs don't compute empty vectors.
    pub fn tail_panel_width(&self, rem: usize) -> usize {
        rem.div_ceil(self.lanes) * self.lanes
    }
}

/// Columns every family's panel width divides (8, 16, 48): im2col chunks of a multiple
/// of this are whole panels for any kernel, so scratch sizes do not depend on the CPU.
pub const PANEL_QUANTUM: usize = 48;

impl GemmSpec {
    /// `C = A·B` of static sizes: C's rows `n` floats apart, no addend, no activation,
    /// nothing counted at run time (struct-update the rest).
    pub fn product(
        (m, n, k): (usize, usize, usize),
        a: ALayout,
        b: BLayout,
        geometry: Geometry,
    ) -> GemmSpec {
        GemmSpec {
            m,
            n,
            k,
            a,
            b,
            ldc: n,
            c_col_stride: 1,
            alpha: 1.0,
            addends: vec![],
            activation: Activation::None,
            geometry,
            b_taps: vec![],
            rows_at_run_time: false,
            cols_at_run_time: false,
            run_time_strides: RunTimeStrides::None,
        }
    }

    /// Byte offset of `C[r, col]` from `C[0, 0]`.
    pub(super) fn c_offset(&self, r: usize, col: usize) -> i32 {
        ((r * self.ldc + col * self.c_col_stride) * 4) as i32
    }
}

/// Float elements in B packed by [`pack_b`].
pub fn packed_b_len(g: &Geometry, k: usize, n: usize) -> usize {
    let rem = n % g.nr;
    n / g.nr * g.nr * k
        + if rem == 0 {
            0
        } else {
            g.tail_panel_width(rem) * k
        }
}

/// Packs `B[k, j] = get(k, j)` into column panels: panel `p` holds columns
/// `p·nr .. p·nr+nr` as `[k][nr]`, starting at element `p·nr·K`; the last partial panel
/// is [`Geometry::tail_panel_width`] wide and zero-padded.
pub fn pack_b(g: &Geometry, k: usize, n: usize, get: impl Fn(usize, usize) -> f32) -> Vec<f32> {
    let mut out = Vec::with_capacity(packed_b_len(g, k, n));
    push_panels(g, 0..k, n, &get, &mut out);
    out
}

/// Appends the K rows `ks` of every column panel of B, panel after panel.
fn push_panels(
    g: &Geometry,
    ks: std::ops::Range<usize>,
    n: usize,
    get: &impl Fn(usize, usize) -> f32,
    out: &mut Vec<f32>,
) {
    let mut j0 = 0;
    while j0 < n {
        let width = if n - j0 >= g.nr {
            g.nr
        } else {
            g.tail_panel_width(n - j0)
        };
        for kk in ks.clone() {
            out.extend((j0..j0 + width).map(|j| if j < n { get(kk, j) } else { 0.0 }));
        }
        j0 += width;
    }
}

/// Packs constant `B[k, j] = get(k, j)` for the kernel family of `g`: by K blocks
/// ([`pack_b_blocks`]) for the x86 kernels, whole panels ([`pack_b`]) for Cranelift's.
pub fn pack_constant_b(
    g: &Geometry,
    k: usize,
    n: usize,
    get: impl Fn(usize, usize) -> f32,
) -> (Vec<f32>, BLayout) {
    match g.kernel {
        KernelKind::X86(_) => (pack_b_blocks(g, k, n, get), BLayout::PackedBlocks),
        KernelKind::Clif => (pack_b(g, k, n, get), BLayout::Packed),
    }
}

/// Packs constant `B[k, j] = get(k, j)` (weights) as whole-K panels ([`pack_b`]) for a
/// GEMM split by groups of column panels (`NodeKernel::weights_by_columns`), where a
/// group must be contiguous; else in the family's own layout ([`pack_constant_b`]).
pub fn pack_weights_b(
    g: &Geometry,
    k: usize,
    n: usize,
    whole_k: bool,
    get: impl Fn(usize, usize) -> f32,
) -> (Vec<f32>, BLayout) {
    if whole_k {
        (pack_b(g, k, n, get), BLayout::Packed)
    } else {
        pack_constant_b(g, k, n, get)
    }
}

/// [`pack_b`]'s panels cut into K blocks of `g.kc` steps, stored block by block: block
/// `kb..kb+len` starts at element `kb·W` (W = the panels' total width) and holds panel
/// `p` (columns `p·nr ..`) as `[len][width]` at `kb·W + p·nr·len`. A pass over one K
/// block then reads B as one sequential stream: as whole-K panels, the 3×3×512 convs on
/// 7×7 (9.4 MB of weights) read a 24 KB block of each of 11 panels from L3 per K block,
/// 11 streams the prefetchers did not keep ahead of.
pub fn pack_b_blocks(
    g: &Geometry,
    k: usize,
    n: usize,
    get: impl Fn(usize, usize) -> f32,
) -> Vec<f32> {
    let mut out = Vec::with_capacity(packed_b_len(g, k, n));
    let kc = g.k_block_len(k);
    for kb in (0..k).step_by(kc) {
        push_panels(g, kb..kb + kc.min(k - kb), n, &get, &mut out);
    }
    out
}

/// Packs `A[i, k] = get(i, k)` by K blocks of `kc` steps (one block when K ≤ kc):
/// block `kb..kb+len` starts at element `kb·M` and holds the row tiles in order, tile
/// `t` (rows `t·mr ..`, fewer in the last tile) as `[k][rows]` at `kb·M + t·mr·len`.
/// Same size as A.
pub fn pack_a(g: &Geometry, m: usize, k: usize, get: impl Fn(usize, usize) -> f32) -> Vec<f32> {
    let mut out = Vec::with_capacity(m * k);
    let kc = g.k_block_len(k);
    for kb in (0..k).step_by(kc) {
        let len = kc.min(k - kb);
        for i0 in (0..m).step_by(g.mr) {
            let rows = g.mr.min(m - i0);
            for kk in kb..kb + len {
                out.extend((i0..i0 + rows).map(|i| get(i, kk)));
            }
        }
    }
    out
}

/// Little-endian bytes of f32s, for `LowerCtx::rodata`.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// True when `fma` lowers to one instruction: always on aarch64; on x86-64 it needs FMA
/// (and AVX, without which Cranelift calls libm, which a model object cannot link).
pub fn has_fma(target: &Target) -> bool {
    target.arch == Arch::Aarch64 || (target.has(CpuFeature::Fma) && target.has(CpuFeature::Avx))
}

/// `x·y + acc`, fused when the target can.
pub fn mul_add(b: &mut FunctionBuilder, fma: bool, x: Value, y: Value, acc: Value) -> Value {
    if fma {
        b.ins().fma(x, y, acc)
    } else {
        let p = b.ins().fmul(x, y);
        b.ins().fadd(p, acc)
    }
}
