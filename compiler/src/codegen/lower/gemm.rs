//! The float32 GEMM emitter behind MatMul, Gemm and Conv:
//! `C[M,N] = alpha · A[M,K] · B[K,N] + Σ scale · T`, where each addend `T` is broadcast
//! to `[M,N]` through its strides (Gemm's C, a per-row conv bias, a per-column bias).
//!
//! Register tiling: an `MR × NR` block of C stays in `MR · NR/4` f32x4 accumulators for
//! the whole K loop. Each K step loads one row segment of B as `NR/4` vectors (B is read
//! along N, so its rows must be contiguous, or packed) and broadcasts one element of A per
//! tile row (so A may have any strides: transposed A costs nothing). The epilogue scales
//! by alpha, adds the addends and stores, lane by lane where a tile sticks out of C.
//!
//! Constant B (weights) is packed at compile time by [`pack_b`] into column panels, each
//! `[k][NR]` contiguous, so the K loop walks memory linearly; im2col writes the same
//! layout at run time. Constant A (conv weights) is packed by [`pack_a`] into row tiles
//! `[k][MR]`, so the MR broadcasts of a K step come from one cache line.

use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::{FunctionBuilder, Variable};

use crate::codegen::kernel::{self, flags};
use crate::codegen::{Arch, Target};

/// f32 lanes in a vector register (Cranelift lowers 128-bit vectors only).
pub const LANES: usize = 4;
/// Rows of a register tile. 4 rows × 2 vectors = 8 accumulators, plus 2 B vectors and a
/// broadcast, stay well inside the 16 vector registers of x86-64 (no EVEX) at
/// opt_level "speed", where the scheduler lengthens live ranges; wider tiles spilled.
pub const MR: usize = 4;
/// Columns of a register tile: two f32x4.
pub const NR: usize = 2 * LANES;

const F32: usize = 4;

/// Where A lives.
#[derive(Clone, Copy, Debug)]
pub enum AOperand {
    /// `A[i, k]` at `ptr + (i·row_stride + k·col_stride)·4` bytes: (K, 1) for row-major
    /// A, (1, M) for a transposed one.
    Strided { ptr: Value, row_stride: usize, col_stride: usize },
    /// Laid out by [`pack_a`].
    Packed { ptr: Value },
}

/// Where B lives.
#[derive(Clone, Copy, Debug)]
pub enum BOperand {
    /// Laid out by [`pack_b`] (or written in that layout at run time).
    Packed { ptr: Value },
    /// `B[k, j]` at `ptr + (k·row_stride + j)·4` bytes: rows contiguous along N.
    Rows { ptr: Value, row_stride: usize },
    /// `B[k, j]` at `ptr + (k·k_stride + j·n_stride)·4` bytes with `n_stride ≠ 1` (a
    /// transposed B only known at run time): each vector is gathered lane by lane.
    Gather { ptr: Value, k_stride: usize, n_stride: usize },
}

/// `scale · T[i·row_stride + j·col_stride]` added to `C[i, j]`; `col_stride` is 0 or 1.
#[derive(Clone, Copy, Debug)]
pub struct Addend {
    pub ptr: Value,
    pub row_stride: usize,
    pub col_stride: usize,
    pub scale: f32,
}

/// One GEMM call: static sizes, run-time base addresses.
#[derive(Clone, Debug)]
pub struct Gemm {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: AOperand,
    pub b: BOperand,
    /// `C[i, j]` at `c + (i·ldc + j)·4` bytes.
    pub c: Value,
    pub ldc: usize,
    pub alpha: f32,
    pub addends: Vec<Addend>,
    /// B is not written while the node runs (an input or a weight, not scratch filled
    /// by this function): its loads may then be scheduled freely, like A's.
    pub b_is_stable: bool,
}

/// Float elements in B packed by [`pack_b`].
pub fn packed_b_len(k: usize, n: usize) -> usize {
    let rem = n % NR;
    n / NR * NR * k + if rem == 0 { 0 } else { tail_panel_width(rem) * k }
}

/// Width of the last, partial column panel: one vector when the leftover columns fit in
/// one, so narrow outputs don't compute a second, empty vector.
pub fn tail_panel_width(rem: usize) -> usize {
    if rem <= LANES {
        LANES
    } else {
        NR
    }
}

/// Packs `B[k, j] = get(k, j)` into column panels: panel `p` holds columns
/// `p·NR .. p·NR+NR` as `[k][NR]`, starting at element `p·NR·K`; the last partial panel
/// is [`tail_panel_width`] wide and zero-padded.
pub fn pack_b(k: usize, n: usize, get: impl Fn(usize, usize) -> f32) -> Vec<f32> {
    let mut out = Vec::with_capacity(packed_b_len(k, n));
    let mut j0 = 0;
    while j0 < n {
        let width = if n - j0 >= NR { NR } else { tail_panel_width(n - j0) };
        for kk in 0..k {
            out.extend((j0..j0 + width).map(|j| if j < n { get(kk, j) } else { 0.0 }));
        }
        j0 += width;
    }
    out
}

/// Float elements in A packed by [`pack_a`].
pub fn packed_a_len(m: usize, k: usize) -> usize {
    m * k
}

/// Packs `A[i, k] = get(i, k)` into row tiles: tile `t` holds rows `t·MR ..` (fewer in
/// the last tile) as `[k][rows]`, starting at element `t·MR·K`.
pub fn pack_a(m: usize, k: usize, get: impl Fn(usize, usize) -> f32) -> Vec<f32> {
    let mut out = Vec::with_capacity(packed_a_len(m, k));
    for i0 in (0..m).step_by(MR) {
        let rows = MR.min(m - i0);
        for kk in 0..k {
            out.extend((i0..i0 + rows).map(|i| get(i, kk)));
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
    target.arch == Arch::Aarch64 || (target.has("has_fma") && target.has("has_avx"))
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

/// Flags for loads of memory nothing writes while the node runs: `readonly` + `can_move`
/// make them pure for Cranelift's e-graph, which then places each load next to its first
/// use instead of hoisting all loads of a K step to the top (that kept every broadcast
/// alive at once and spilled accumulators).
pub fn stable_flags() -> MemFlagsData {
    flags().with_readonly().with_can_move()
}

/// Columns a run of identical tiles covers.
#[derive(Clone, Copy, Debug)]
enum ColTile {
    /// `vecs` f32x4 per row; `valid` of its columns exist in C.
    Vector { vecs: usize, valid: usize },
    /// One column, scalar (the last < 4 columns of a B we cannot over-read).
    Scalar,
}

/// `count` tiles side by side starting at column `start`, each `width` columns apart.
#[derive(Clone, Copy, Debug)]
struct ColRun {
    start: usize,
    count: usize,
    width: usize,
    tile: ColTile,
}

/// How N is covered: full NR panels, then a partial panel (packed B is zero-padded, so
/// it may be over-read) or a one-vector panel and scalar columns (unpacked B may not).
fn column_runs(n: usize, b: &BOperand) -> Vec<ColRun> {
    let mut runs = vec![];
    let full = n / NR;
    if full > 0 {
        runs.push(ColRun { start: 0, count: full, width: NR, tile: ColTile::Vector { vecs: NR / LANES, valid: NR } });
    }
    let mut start = full * NR;
    let rem = n - start;
    if rem == 0 {
        return runs;
    }
    if let BOperand::Packed { .. } = b {
        let width = tail_panel_width(rem);
        runs.push(ColRun { start, count: 1, width, tile: ColTile::Vector { vecs: width / LANES, valid: rem } });
        return runs;
    }
    if rem >= LANES {
        runs.push(ColRun { start, count: 1, width: LANES, tile: ColTile::Vector { vecs: 1, valid: LANES } });
        start += LANES;
    }
    if n > start {
        runs.push(ColRun { start, count: n - start, width: 1, tile: ColTile::Scalar });
    }
    runs
}

/// `for t in 0..count { body(start + t·step) }` with the index as a value; one
/// iteration needs no loop.
fn strided_loop(b: &mut FunctionBuilder, start: usize, count: usize, step: usize, mut body: impl FnMut(&mut FunctionBuilder, Value)) {
    kernel::counted_loop(b, start as i64, (start + count * step) as i64, step as i64, |b, i| body(b, i));
}

/// `base + index·scale` bytes.
fn offset_ptr(b: &mut FunctionBuilder, base: Value, index: Value, scale: usize) -> Value {
    if scale == 0 {
        return base;
    }
    kernel::elem_addr(b, base, index, scale)
}

struct Emitter<'g> {
    g: &'g Gemm,
    fma: bool,
}

/// A row tile's view of A: row `r` of K step `k` is at `base + k·k_bytes + r·row_bytes`.
struct ATile {
    base: Value,
    row_bytes: usize,
    k_bytes: usize,
}

/// A column tile's view of B: row `k` starts at `base + k·k_bytes`; column `c` of it is
/// `c·col_bytes` further.
struct BTile {
    base: Value,
    k_bytes: usize,
    col_bytes: usize,
}

/// Emits the GEMM described by `g`.
pub fn emit(b: &mut FunctionBuilder, target: &Target, g: &Gemm) {
    if g.m == 0 || g.n == 0 {
        return;
    }
    let e = Emitter { g, fma: has_fma(target) };
    for run in column_runs(g.n, &g.b) {
        strided_loop(b, run.start, run.count, run.width, |b, j0| {
            // Full row tiles in a loop, the leftover rows as one smaller tile.
            let full_rows = g.m / MR * MR;
            strided_loop(b, 0, g.m / MR, MR, |b, i0| e.tile(b, i0, MR, j0, run));
            if full_rows < g.m {
                let i0 = kernel::iconst(b, full_rows as i64);
                e.tile(b, i0, g.m - full_rows, j0, run);
            }
        });
    }
}

impl Emitter<'_> {
    fn tile(&self, b: &mut FunctionBuilder, i0: Value, rows: usize, j0: Value, run: ColRun) {
        match run.tile {
            ColTile::Vector { vecs, valid } => self.vector_tile(b, i0, rows, j0, vecs, valid),
            ColTile::Scalar => self.scalar_tile(b, i0, rows, j0),
        }
    }

    fn a_tile(&self, b: &mut FunctionBuilder, i0: Value, rows: usize) -> ATile {
        match self.g.a {
            AOperand::Strided { ptr, row_stride, col_stride } => {
                ATile { base: offset_ptr(b, ptr, i0, row_stride * F32), row_bytes: row_stride * F32, k_bytes: col_stride * F32 }
            }
            // Tile t starts at element t·MR·K = i0·K and holds `rows` floats per K step.
            AOperand::Packed { ptr } => ATile { base: offset_ptr(b, ptr, i0, self.g.k * F32), row_bytes: F32, k_bytes: rows * F32 },
        }
    }

    fn b_tile(&self, b: &mut FunctionBuilder, j0: Value, vecs: usize) -> BTile {
        match self.g.b {
            BOperand::Packed { ptr } => {
                BTile { base: offset_ptr(b, ptr, j0, self.g.k * F32), k_bytes: vecs * LANES * F32, col_bytes: F32 }
            }
            BOperand::Rows { ptr, row_stride } => BTile { base: offset_ptr(b, ptr, j0, F32), k_bytes: row_stride * F32, col_bytes: F32 },
            BOperand::Gather { ptr, k_stride, n_stride } => {
                BTile { base: offset_ptr(b, ptr, j0, n_stride * F32), k_bytes: k_stride * F32, col_bytes: n_stride * F32 }
            }
        }
    }

    fn b_flags(&self) -> MemFlagsData {
        if self.g.b_is_stable {
            stable_flags()
        } else {
            flags()
        }
    }

    /// Loads vector `v` of B's row at `row`: one load, or four gathered lanes.
    fn load_b_vector(&self, b: &mut FunctionBuilder, bt: &BTile, row: Value, v: usize) -> Value {
        let fl = self.b_flags();
        if bt.col_bytes == F32 {
            return b.ins().load(types::F32X4, fl, row, (v * LANES * F32) as i32);
        }
        let lane = |b: &mut FunctionBuilder, l: usize| b.ins().load(types::F32, fl, row, ((v * LANES + l) * bt.col_bytes) as i32);
        let first = lane(b, 0);
        let mut vec = b.ins().scalar_to_vector(types::F32X4, first);
        for l in 1..LANES {
            let x = lane(b, l);
            vec = b.ins().insertlane(vec, x, l as u8);
        }
        vec
    }

    /// An `rows × vecs·4` tile of C at `(i0, j0)`, of which `valid` columns exist.
    fn vector_tile(&self, b: &mut FunctionBuilder, i0: Value, rows: usize, j0: Value, vecs: usize, valid: usize) {
        let at = self.a_tile(b, i0, rows);
        let bt = self.b_tile(b, j0, vecs);
        let zero = b.ins().f32const(0.0);
        let zero = b.ins().splat(types::F32X4, zero);
        let accs = k_loop(b, self.g.k, rows * vecs, types::F32X4, zero, |b, k, acc| {
            let a_row = offset_ptr(b, at.base, k, at.k_bytes);
            let b_row = offset_ptr(b, bt.base, k, bt.k_bytes);
            let bv: Vec<Value> = (0..vecs).map(|v| self.load_b_vector(b, &bt, b_row, v)).collect();
            for r in 0..rows {
                let a = b.ins().load(types::F32, stable_flags(), a_row, (r * at.row_bytes) as i32);
                let a = b.ins().splat(types::F32X4, a);
                for (v, &bv) in bv.iter().enumerate() {
                    acc[r * vecs + v] = mul_add(b, self.fma, a, bv, acc[r * vecs + v]);
                }
            }
        });
        let out = Epilogue::new(b, self.g, i0, j0);
        for r in 0..rows {
            for v in 0..vecs {
                let lanes = valid.saturating_sub(v * LANES).min(LANES);
                out.store_vector(b, self.g, accs[r * vecs + v], r, v * LANES, lanes);
            }
        }
    }

    /// A `rows × 1` tile of C at `(i0, j0)`, in scalar registers.
    fn scalar_tile(&self, b: &mut FunctionBuilder, i0: Value, rows: usize, j0: Value) {
        let at = self.a_tile(b, i0, rows);
        let bt = self.b_tile(b, j0, 1);
        let zero = b.ins().f32const(0.0);
        let fl = self.b_flags();
        let accs = k_loop(b, self.g.k, rows, types::F32, zero, |b, k, acc| {
            let a_row = offset_ptr(b, at.base, k, at.k_bytes);
            let b_row = offset_ptr(b, bt.base, k, bt.k_bytes);
            let bv = b.ins().load(types::F32, fl, b_row, 0);
            for (r, acc) in acc.iter_mut().enumerate() {
                let a = b.ins().load(types::F32, stable_flags(), a_row, (r * at.row_bytes) as i32);
                *acc = mul_add(b, self.fma, a, bv, *acc);
            }
        });
        let out = Epilogue::new(b, self.g, i0, j0);
        for (r, &acc) in accs.iter().enumerate() {
            out.store_scalar(b, self.g, acc, r, 0);
        }
    }
}

/// Runs `step(k, accumulators)` for k in 0..K with `count` accumulators of type `ty`
/// (starting at `init`) carried through the loop, and returns their final values.
fn k_loop(
    b: &mut FunctionBuilder,
    k: usize,
    count: usize,
    ty: cranelift_codegen::ir::Type,
    init: Value,
    mut step: impl FnMut(&mut FunctionBuilder, Value, &mut [Value]),
) -> Vec<Value> {
    let vars: Vec<Variable> = (0..count).map(|_| b.declare_var(ty)).collect();
    for &v in &vars {
        b.def_var(v, init);
    }
    kernel::counted_loop(b, 0, k as i64, 1, |b, kv| {
        let mut acc: Vec<Value> = vars.iter().map(|&v| b.use_var(v)).collect();
        step(b, kv, &mut acc);
        for (&v, &a) in vars.iter().zip(&acc) {
            b.def_var(v, a);
        }
    });
    vars.iter().map(|&v| b.use_var(v)).collect()
}

/// Addresses of one tile's outputs and addends: C row `r`, column `c` of the tile is at
/// `c_base + (r·ldc + c)·4`; addend `t`'s at `bases[t] + (r·rs + c·cs)·4`.
struct Epilogue {
    c_base: Value,
    addend_bases: Vec<Value>,
}

impl Epilogue {
    fn new(b: &mut FunctionBuilder, g: &Gemm, i0: Value, j0: Value) -> Epilogue {
        let row = offset_ptr(b, g.c, i0, g.ldc * F32);
        let c_base = offset_ptr(b, row, j0, F32);
        let addend_bases = g
            .addends
            .iter()
            .map(|t| {
                let row = offset_ptr(b, t.ptr, i0, t.row_stride * F32);
                offset_ptr(b, row, j0, t.col_stride * F32)
            })
            .collect();
        Epilogue { c_base, addend_bases }
    }

    /// Finishes and stores `lanes` (≤ 4) columns `col..` of tile row `r` held in `acc`.
    fn store_vector(&self, b: &mut FunctionBuilder, g: &Gemm, acc: Value, r: usize, col: usize, lanes: usize) {
        if lanes < LANES {
            for l in 0..lanes {
                let x = b.ins().extractlane(acc, l as u8);
                self.store_scalar(b, g, x, r, col + l);
            }
            return;
        }
        let mut y = acc;
        if g.alpha != 1.0 {
            let s = b.ins().f32const(g.alpha);
            let s = b.ins().splat(types::F32X4, s);
            y = b.ins().fmul(y, s);
        }
        for (t, &base) in g.addends.iter().zip(&self.addend_bases) {
            let off = ((r * t.row_stride + col * t.col_stride) * F32) as i32;
            let v = if t.col_stride == 1 {
                b.ins().load(types::F32X4, stable_flags(), base, off)
            } else {
                let s = b.ins().load(types::F32, stable_flags(), base, off);
                b.ins().splat(types::F32X4, s)
            };
            y = if t.scale == 1.0 {
                b.ins().fadd(y, v)
            } else {
                let s = b.ins().f32const(t.scale);
                let s = b.ins().splat(types::F32X4, s);
                let v = b.ins().fmul(v, s);
                b.ins().fadd(y, v)
            };
        }
        b.ins().store(flags(), y, self.c_base, ((r * g.ldc + col) * F32) as i32);
    }

    /// Finishes and stores the scalar `acc` as tile element `(r, col)`.
    fn store_scalar(&self, b: &mut FunctionBuilder, g: &Gemm, acc: Value, r: usize, col: usize) {
        let mut y = acc;
        if g.alpha != 1.0 {
            let s = b.ins().f32const(g.alpha);
            y = b.ins().fmul(y, s);
        }
        for (t, &base) in g.addends.iter().zip(&self.addend_bases) {
            let off = ((r * t.row_stride + col * t.col_stride) * F32) as i32;
            let mut v = b.ins().load(types::F32, stable_flags(), base, off);
            if t.scale != 1.0 {
                let s = b.ins().f32const(t.scale);
                v = b.ins().fmul(v, s);
            }
            y = b.ins().fadd(y, v);
        }
        b.ins().store(flags(), y, self.c_base, ((r * g.ldc + col) * F32) as i32);
    }
}
