//! The integer GEMM behind MatMulInteger and ConvInteger: `C[m][n] (int32) =
//! Σ_k A[m][k] · B[k][n]` over operands already widened to int16 with their zero
//! points subtracted (a u8 or i8 value minus a zero point of the same type fits int16,
//! and every product fits int32), so the result is exact for any zero points.
//!
//! Layouts (built by the callers, at compile time for constant weights; constant
//! weights that fit int8 are stored as int8 and sign-extended as they are loaded):
//! * A: rows of `k2` int16 (`k2` = K rounded up to even, zero-padded);
//! * B: "pair-packed" in groups of 4 columns: for group g and K pair q, the 8 int16
//!   `B[2q][4g], B[2q+1][4g], B[2q][4g+1], B[2q+1][4g+1], …, B[2q+1][4g+3]`, columns
//!   past N zero.
//!
//! One step multiplies a broadcast pair `(A[m][2q], A[m][2q+1])` with a group's 8
//! values and adds adjacent products: `iadd_pairwise(imul(swiden_low a, swiden_low b),
//! imul(swiden_high a, swiden_high b))`, which x86-64 lowers to one `pmaddwd` (8
//! multiply-adds into 4 int32 lanes) and aarch64 to `smull`/`smull2`/`addp`. A tile of
//! [`MR`] rows × [`NG`] groups keeps 8 int32x4 accumulators in registers.
//!
//! Not yet here: the 8-bit dot products (`vpdpbusd` with AVX-VNNI, `sdot`/`usdot` on
//! aarch64) and machine-code micro-kernels, which need u8 × i8 operands and zero-point
//! corrections instead of the int16 widening.

use cranelift_codegen::ir::{types, Endianness, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::FunctionBuilder;

use crate::codegen::kernel::{self, flags};

/// Rows and 4-column groups per register tile.
pub const MR: usize = 4;
pub const NG: usize = 2;

/// Sizes of one integer GEMM.
#[derive(Clone, Copy, Debug)]
pub struct IntGemm {
    pub m: usize,
    pub n: usize,
    /// K rounded up to even.
    pub k2: usize,
    /// Row stride of C, in elements.
    pub ldc: usize,
    /// Bytes per element of A and of B: 2 (int16), or 1 for constant weights that fit
    /// int8 once their zero point is subtracted (stored at half the size, widened as
    /// they are loaded).
    pub a_bytes: usize,
    pub b_bytes: usize,
}

impl IntGemm {
    pub fn new(m: usize, n: usize, k: usize, ldc: usize) -> IntGemm {
        IntGemm {
            m,
            n,
            k2: k.next_multiple_of(2),
            ldc,
            a_bytes: 2,
            b_bytes: 2,
        }
    }

    pub fn groups(&self) -> usize {
        self.n.div_ceil(4)
    }

    /// Bytes of the pair-packed B.
    pub fn packed_b_bytes(&self) -> usize {
        self.groups() * self.k2 * 4 * self.b_bytes
    }

    /// Element index of `B[k][n]` in the pair-packed layout.
    pub fn packed_b_index(&self, k: usize, n: usize) -> usize {
        ((n / 4) * (self.k2 / 2) + k / 2) * 8 + (n % 4) * 2 + k % 2
    }
}

/// `B` (`k × n`, element `(k, j)` from `at`) pair-packed, zero-padded.
pub fn pack_b(g: &IntGemm, k: usize, at: impl Fn(usize, usize) -> i16) -> Vec<i16> {
    let mut out = vec![0i16; g.groups() * g.k2 * 4];
    for kk in 0..k {
        for j in 0..g.n {
            out[g.packed_b_index(kk, j)] = at(kk, j);
        }
    }
    out
}

/// Little-endian bytes of int16 values at `bytes` (2, or 1 when every value fits
/// int8) per element.
pub fn element_bytes(values: &[i16], bytes: usize) -> Vec<u8> {
    match bytes {
        1 => values.iter().map(|&v| v as i8 as u8).collect(),
        _ => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

/// 1 when every value fits int8, else 2.
pub fn narrowest(values: &[i16]) -> usize {
    if values.iter().all(|&v| i8::try_from(v).is_ok()) {
        1
    } else {
        2
    }
}

/// Emits `C = A · B` for the layouts above; `a`, `bp`, `c` are addresses.
pub fn emit(b: &mut FunctionBuilder, g: &IntGemm, a: Value, bp: Value, c: Value) {
    let full_rows = g.m / MR * MR;
    if full_rows > 0 {
        kernel::counted_loop(b, 0, full_rows as i64, MR as i64, |b, m0| {
            row_block(b, g, a, bp, c, m0, MR);
        });
    }
    if !g.m.is_multiple_of(MR) {
        let m0 = kernel::iconst(b, full_rows as i64);
        row_block(b, g, a, bp, c, m0, g.m % MR);
    }
}

/// Rows `m0 .. m0 + rows` across all column groups.
fn row_block(
    b: &mut FunctionBuilder,
    g: &IntGemm,
    a: Value,
    bp: Value,
    c: Value,
    m0: Value,
    rows: usize,
) {
    // The loop covers whole tiles of complete groups; the rest (fewer than NG complete
    // groups and a partial last one, at most NG groups) is one tile with known columns.
    let looped = g.n / 4 / NG * NG;
    let rest = g.groups() - looped;
    let a_rows = kernel::elem_addr(b, a, m0, g.k2 * g.a_bytes);
    let c_rows = kernel::elem_addr(b, c, m0, g.ldc * 4);
    if looped > 0 {
        kernel::counted_loop(b, 0, looped as i64, NG as i64, |b, g0| {
            tile(b, g, a_rows, bp, c_rows, g0, rows, NG, None);
        });
    }
    if rest > 0 {
        let g0 = kernel::iconst(b, looped as i64);
        tile(b, g, a_rows, bp, c_rows, g0, rows, rest, Some(looped));
    }
}

/// One `rows × ngroups` tile at group `g0` (run time; `static_g0` when known, for the
/// column tail).
#[allow(clippy::too_many_arguments)]
fn tile(
    b: &mut FunctionBuilder,
    g: &IntGemm,
    a_rows: Value,
    bp: Value,
    c_rows: Value,
    g0: Value,
    rows: usize,
    ngroups: usize,
    static_g0: Option<usize>,
) {
    let lanes = MemFlagsData::new().with_endianness(Endianness::Little);
    let accs = kernel::zeroed_vector_vars(b, types::I32X4, rows * ngroups);
    let group_bytes = g.k2 * 4 * g.b_bytes;
    let b_tile = kernel::elem_addr(b, bp, g0, group_bytes);
    kernel::counted_loop(b, 0, (g.k2 / 2) as i64, 1, |b, q| {
        let b_at = kernel::elem_addr(b, b_tile, q, 8 * g.b_bytes);
        let bv: Vec<Value> = (0..ngroups)
            .map(|j| {
                let off = (j * group_bytes) as i32;
                match g.b_bytes {
                    1 => b.ins().sload8x8(flags(), b_at, off),
                    _ => b.ins().load(types::I16X8, flags(), b_at, off),
                }
            })
            .collect();
        let a_at = kernel::elem_addr(b, a_rows, q, 2 * g.a_bytes);
        for r in 0..rows {
            let off = (r * g.k2 * g.a_bytes) as i32;
            // The pair (A[m][2q], A[m][2q+1]) in every pair of int16 lanes.
            let pair = match g.a_bytes {
                1 => {
                    let p = b.ins().load(types::I16, flags(), a_at, off);
                    let p = b.ins().splat(types::I16X8, p);
                    let p = b.ins().bitcast(types::I8X16, lanes, p);
                    b.ins().swiden_low(p)
                }
                _ => {
                    let p = b.ins().load(types::I32, flags(), a_at, off);
                    let p = b.ins().splat(types::I32X4, p);
                    b.ins().bitcast(types::I16X8, lanes, p)
                }
            };
            let (alo, ahi) = (b.ins().swiden_low(pair), b.ins().swiden_high(pair));
            for (j, &w) in bv.iter().enumerate() {
                let (wlo, whi) = (b.ins().swiden_low(w), b.ins().swiden_high(w));
                let lo = b.ins().imul(alo, wlo);
                let hi = b.ins().imul(ahi, whi);
                let dot = b.ins().iadd_pairwise(lo, hi);
                let acc = accs[r * ngroups + j];
                let sum = b.use_var(acc);
                let sum = b.ins().iadd(sum, dot);
                b.def_var(acc, sum);
            }
        }
    });
    // Store: full groups as vectors, the last group of a tail lane by lane.
    let c_tile = kernel::elem_addr(b, c_rows, g0, 16);
    for r in 0..rows {
        for j in 0..ngroups {
            let v = b.use_var(accs[r * ngroups + j]);
            let off = ((r * g.ldc + 4 * j) * 4) as i32;
            // The last group of a tail is stored lane by lane.
            let lanes = static_g0.map_or(4, |s| g.n.saturating_sub(4 * (s + j)).min(4));
            kernel::store_lanes(b, v, c_tile, off, lanes);
        }
    }
}
