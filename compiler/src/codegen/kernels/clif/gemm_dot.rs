//! The 8-bit dot-product GEMM behind MatMulInteger when A is uint8 and B is constant
//! int8 with no zero point (what `--quantize int8` and onnxruntime's QDQ models give
//! Gemm/MatMul layers): `C[m][n] = Σ_k (A[m][k] − a_zp) · B[k][n]` in int32, exact.
//!
//! Each 32-bit lane multiplies four consecutive K bytes of A (uint8, a broadcast
//! row quad) with the same four K of one column of B (int8) and adds them, the tree
//! of [`dot_accumulate`] written for the target's [`Dot`]: one `vpdpbusd` with
//! AVX-VNNI / AVX-512 VNNI, one `usdot` on aarch64 +i8mm, one `sdot` on aarch64
//! +dotprod, widening multiplies elsewhere. The zero point of A is taken out
//! afterwards, `− a_zp · Σ_k B[k][n]` per column, a constant.
//!
//! Layouts: A is copied into scratch rows of `k4` bytes (K rounded up to 4, zero
//! padded); B is packed at compile time in groups of 4 columns, for group g and K
//! quad q the 16 bytes `B[4q..4q+4][4g]`, `B[4q..4q+4][4g+1]`, … (columns past N
//! and K past the end zero).

use cranelift_codegen::ir::{types, Endianness, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::FunctionBuilder;

use crate::codegen::isa::{Dot, X86Dot};
use crate::codegen::kernel::{self, flags};

/// A loaded vector of activation bytes as [`dot_accumulate`] takes them for `dot`: with
/// their top bit flipped for `sdot`.
pub fn prepare(dot: Dot, b: &mut FunctionBuilder, x: Value) -> Value {
    match dot {
        Dot::Sdot => {
            let top = b.ins().iconst(types::I8, 0x80);
            let top = b.ins().splat(types::I8X16, top);
            b.ins().bxor(x, top)
        }
        Dot::X86(_) | Dot::Usdot => x,
    }
}

/// Rows and 4-column groups per register tile.
const MR: usize = 4;
const NG: usize = 2;

#[derive(Clone, Copy, Debug)]
pub struct DotGemm {
    pub m: usize,
    pub n: usize,
    /// K rounded up to a multiple of 4.
    pub k4: usize,
    pub form: Dot,
}

impl DotGemm {
    pub fn groups(&self) -> usize {
        self.n.div_ceil(4)
    }

    /// Bytes of one packed B matrix.
    pub fn packed_b_bytes(&self) -> usize {
        self.groups() * self.k4 * 4
    }
}

/// One `k × n` int8 matrix (element `(k, j)` from `at`) packed as the module docs say.
pub fn pack_b(g: &DotGemm, k: usize, at: impl Fn(usize, usize) -> i8) -> Vec<u8> {
    let mut out = vec![0u8; g.packed_b_bytes()];
    for kk in 0..k {
        for j in 0..g.n {
            let idx = ((j / 4) * (g.k4 / 4) + kk / 4) * 16 + (j % 4) * 4 + kk % 4;
            out[idx] = at(kk, j) as u8;
        }
    }
    out
}

/// Emits `C = A · B + corr` (`corr`: one int32 per column, padded to whole groups);
/// `a` (rows of `k4` bytes), `bp`, `corr` and `c` (rows of N int32) are addresses.
pub fn emit(b: &mut FunctionBuilder, g: &DotGemm, a: Value, bp: Value, corr: Value, c: Value) {
    let full_rows = g.m / MR * MR;
    if full_rows > 0 {
        kernel::counted_loop(b, 0, full_rows as i64, MR as i64, |b, m0| {
            row_block(b, g, a, bp, corr, c, m0, MR);
        });
    }
    if !g.m.is_multiple_of(MR) {
        let m0 = kernel::iconst(b, full_rows as i64);
        row_block(b, g, a, bp, corr, c, m0, g.m % MR);
    }
}

#[allow(clippy::too_many_arguments)]
fn row_block(
    b: &mut FunctionBuilder,
    g: &DotGemm,
    a: Value,
    bp: Value,
    corr: Value,
    c: Value,
    m0: Value,
    rows: usize,
) {
    let looped = g.n / 4 / NG * NG;
    let rest = g.groups() - looped;
    let a_rows = kernel::elem_addr(b, a, m0, g.k4);
    let c_rows = kernel::elem_addr(b, c, m0, g.n * 4);
    if looped > 0 {
        kernel::counted_loop(b, 0, looped as i64, NG as i64, |b, g0| {
            tile(b, g, a_rows, bp, corr, c_rows, g0, rows, NG, None);
        });
    }
    if rest > 0 {
        let g0 = kernel::iconst(b, looped as i64);
        tile(b, g, a_rows, bp, corr, c_rows, g0, rows, rest, Some(looped));
    }
}

/// One `rows × ngroups` tile at column group `g0` (`static_g0` when known: the tail).
#[allow(clippy::too_many_arguments)]
fn tile(
    b: &mut FunctionBuilder,
    g: &DotGemm,
    a_rows: Value,
    bp: Value,
    corr: Value,
    c_rows: Value,
    g0: Value,
    rows: usize,
    ngroups: usize,
    static_g0: Option<usize>,
) {
    let little = MemFlagsData::new().with_endianness(Endianness::Little);
    let accs = kernel::zeroed_vector_vars(b, types::I32X4, rows * ngroups);
    let group_bytes = g.k4 * 4;
    let b_tile = kernel::elem_addr(b, bp, g0, group_bytes);
    kernel::counted_loop(b, 0, (g.k4 / 4) as i64, 1, |b, q| {
        let b_at = kernel::elem_addr(b, b_tile, q, 16);
        let bv: Vec<Value> = (0..ngroups)
            .map(|j| {
                b.ins()
                    .load(types::I8X16, flags(), b_at, (j * group_bytes) as i32)
            })
            .collect();
        let a_at = kernel::elem_addr(b, a_rows, q, 4);
        for r in 0..rows {
            let av = b.ins().load(types::I32, flags(), a_at, (r * g.k4) as i32);
            let av = b.ins().splat(types::I32X4, av);
            let av = b.ins().bitcast(types::I8X16, little, av);
            let av = prepare(g.form, b, av);
            for (j, &w) in bv.iter().enumerate() {
                let acc = accs[r * ngroups + j];
                let sum = b.use_var(acc);
                let sum = dot_accumulate(b, sum, w, av, g.form);
                b.def_var(acc, sum);
            }
        }
    });
    let c_tile = kernel::elem_addr(b, c_rows, g0, 16);
    let corr_tile = kernel::elem_addr(b, corr, g0, 16);
    let corrs: Vec<Value> = (0..ngroups)
        .map(|j| {
            b.ins()
                .load(types::I32X4, flags(), corr_tile, (16 * j) as i32)
        })
        .collect();
    for r in 0..rows {
        for (j, &cv) in corrs.iter().enumerate() {
            let v = b.use_var(accs[r * ngroups + j]);
            let v = b.ins().iadd(v, cv);
            let off = ((r * g.n + 4 * j) * 4) as i32;
            let lanes = static_g0.map_or(4, |s| g.n.saturating_sub(4 * (s + j)).min(4));
            kernel::store_lanes(b, v, c_tile, off, lanes);
        }
    }
}

/// `acc + Σ_4 w·x` per 32-bit lane (int8 `w`, uint8 `x` as [`prepare`] made it),
/// in the tree Cranelift folds to one 8-bit dot-product instruction where the
/// target has one.
pub(crate) fn dot_accumulate(
    b: &mut FunctionBuilder,
    acc: Value,
    w: Value,
    x: Value,
    form: Dot,
) -> Value {
    // Without VNNI, x86 multiplies bytes widened to int16 in pairs (`pmaddwd`: each
    // product fits in int16 and a pair's sum in int32), then `phaddd` for the quad.
    if let Dot::X86(X86Dot::Pmaddwd | X86Dot::Pmaddubsw) = form {
        let pairs = |b: &mut FunctionBuilder, x16: Value, w16: Value| {
            let (xl, wl) = (b.ins().swiden_low(x16), b.ins().swiden_low(w16));
            let (xh, wh) = (b.ins().swiden_high(x16), b.ins().swiden_high(w16));
            let lo = b.ins().imul(xl, wl);
            let hi = b.ins().imul(xh, wh);
            b.ins().iadd_pairwise(lo, hi)
        };
        let (xl, wl) = (b.ins().uwiden_low(x), b.ins().swiden_low(w));
        let (xh, wh) = (b.ins().uwiden_high(x), b.ins().swiden_high(w));
        let lo = pairs(b, xl, wl);
        let hi = pairs(b, xh, wh);
        let d = b.ins().iadd_pairwise(lo, hi);
        return b.ins().iadd(d, acc);
    }
    let half = |b: &mut FunctionBuilder, high: bool| {
        let signed = form == Dot::Sdot;
        let (sw, wx) = match (high, signed) {
            (false, false) => (b.ins().swiden_low(w), b.ins().uwiden_low(x)),
            (true, false) => (b.ins().swiden_high(w), b.ins().uwiden_high(x)),
            (false, true) => (b.ins().swiden_low(w), b.ins().swiden_low(x)),
            (true, true) => (b.ins().swiden_high(w), b.ins().swiden_high(x)),
        };
        // `imul(swiden w, uwiden x)` folds to x86's `vpdpbusd`, `imul(uwiden x, swiden
        // w)` to aarch64's `usdot`, `imul(swiden x', swiden w)` to its `sdot`.
        let p = match form {
            Dot::X86(_) => b.ins().imul(sw, wx),
            Dot::Usdot | Dot::Sdot => b.ins().imul(wx, sw),
        };
        let (lo, hi) = (b.ins().swiden_low(p), b.ins().swiden_high(p));
        b.ins().iadd_pairwise(lo, hi)
    };
    let lo = half(b, false);
    let hi = half(b, true);
    let d = b.ins().iadd_pairwise(lo, hi);
    b.ins().iadd(d, acc)
}
