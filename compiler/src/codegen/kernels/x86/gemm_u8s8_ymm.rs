//! The 8-bit dot-product GEMM behind MatMulInteger (uint8 A, constant int8 B, no B zero
//! point) as x86 machine code on 256-bit registers: `u8s8-gemm-4x24-vnni` (`vpdpbusd`,
//! VEX with AVX-VNNI, EVEX with AVX-512 VNNI) and `u8s8-gemm-4x8-avx2` (exact 16-bit
//! products, as [`super::conv_u8s8_ymm`] explains). `C[m][n] = Σ_k A[m][k] · B[k][n]
//! + corr[n]` in int32, exact; `corr` takes A's zero point out (see
//! [`crate::codegen::kernels::clif::gemm_dot`]).
//!
//! Register tile: 4 rows × 3 vectors of 8 columns (VNNI) or 4 rows × 8 columns (AVX2).
//! Each 32-bit lane of B's vectors holds one column's 4 consecutive K bytes
//! ([`pack_b`]); one K step broadcasts a row's 4 A bytes (AVX2: the row's 4 int16,
//! widened into scratch first) against them. Column panels are the outer loop, so a
//! panel of B stays in L1 while the row tiles sweep it.

use iced_x86::code_asm::*;

use super::asm::{imm, AsmResult, TailMasks, YMM};
use super::conv_u8s8_ymm::SAVED;
use crate::codegen::isa::X86Dot;

/// The kernel library's name of the GEMM on `dot`'s products: 7-bit weights' pairs
/// (`vpmaddubsw`) run on the exact int16 products too.
pub fn kernel_name(dot: X86Dot) -> &'static str {
    match dot {
        X86Dot::Pmaddwd | X86Dot::Pmaddubsw => "u8s8-gemm-4x8-avx2",
        X86Dot::Vpdpbusd { evex: false } => "u8s8-gemm-4x24-avxvnni",
        X86Dot::Vpdpbusd { evex: true } => "u8s8-gemm-4x24-avx512vnni",
    }
}

/// Whether the kernel widens A and B to int16 for `vpmaddwd` (else `vpdpbusd`).
fn widens(dot: X86Dot) -> bool {
    match dot {
        X86Dot::Pmaddwd | X86Dot::Pmaddubsw => true,
        X86Dot::Vpdpbusd { .. } => false,
    }
}

/// Vectors of 8 columns per panel.
fn vectors(dot: X86Dot) -> usize {
    match widens(dot) {
        true => 1,
        false => 3,
    }
}

const MR: usize = 4;
const LANES: usize = 8;

/// The GEMM's sizes.
#[derive(Clone, Copy, Debug)]
pub struct GemmSpec {
    pub isa: X86Dot,
    pub m: usize,
    pub n: usize,
    /// K rounded up to a multiple of 4 (A's rows are this long, zero padded).
    pub k4: usize,
}

impl GemmSpec {
    /// Vectors of 8 columns covering N.
    fn vectors(&self) -> usize {
        self.n.div_ceil(LANES)
    }

    /// Columns the packed B and `corr` are padded to.
    pub fn padded_n(&self) -> usize {
        self.vectors() * LANES
    }

    /// Panels of whole (all-valid-column) vectors in the loop, and the vectors of the
    /// last panel, emitted apart (it holds the partial vector, if any).
    fn panels(&self) -> (usize, usize) {
        let per = vectors(self.isa);
        let whole = (self.n / LANES) / per;
        (whole, self.vectors() - whole * per)
    }

    /// Scratch: AVX2's A widened to int16.
    pub fn scratch_bytes(&self) -> usize {
        match widens(self.isa) {
            true => self.m * self.k4 * 2,
            false => 0,
        }
    }
}

/// B (`k × n`, element `(kk, j)` from `at`) as the kernel reads it: per panel of `v`
/// vectors, per K quad, `v` × 8 columns × 4 K bytes (columns and K past the ends zero).
pub fn pack_b(s: &GemmSpec, k: usize, at: impl Fn(usize, usize) -> i8) -> Vec<u8> {
    let quads = s.k4 / 4;
    let per = vectors(s.isa);
    let mut out = vec![0u8; quads * s.padded_n() * 4];
    for kk in 0..k {
        for j in 0..s.n {
            let vector = j / LANES;
            let first = vector / per * per;
            let width = per.min(s.vectors() - first);
            let base = first * LANES * 4 * quads;
            let idx = base + (kk / 4) * width * LANES * 4 + (j - first * LANES) * 4 + kk % 4;
            out[idx] = at(kk, j) as u8;
        }
    }
    out
}

/// Encodes the kernel: arguments `(a, b, corr, c, scratch)` (System V); `a` rows of
/// `k4` uint8, `b` from [`pack_b`], `corr` `padded_n` int32, `c` rows of `n` int32.
pub fn emit(s: &GemmSpec) -> Result<Vec<u8>, String> {
    let mut a = CodeAssembler::new(64).map_err(|e| e.to_string())?;
    if let X86Dot::Vpdpbusd { evex: true } = s.isa {
        a.set_prefer_vex(false);
    }
    let mut tails = TailMasks::default();
    function(&mut a, s, &mut tails)
        .and_then(|()| tails.emit_table(&mut a))
        .map_err(|e| format!("INT8 GEMM kernel: {}", e.0))?;
    a.assemble(0).map_err(|e| format!("INT8 GEMM kernel: {e}"))
}

fn row_bytes(s: &GemmSpec) -> usize {
    s.k4 * match widens(s.isa) {
        true => 2,
        false => 1,
    }
}

fn function(a: &mut CodeAssembler, s: &GemmSpec, tails: &mut TailMasks) -> AsmResult<()> {
    for r in SAVED {
        a.push(r)?;
    }
    if widens(s.isa) {
        widen_rows(a, s.m * s.k4)?;
        a.mov(rdi, r8)?;
    }
    let (whole, rest) = s.panels();
    let per = vectors(s.isa);
    let panel_b = s.k4 / 4 * per * LANES * 4;
    // r10: the panel's first column in bytes of int32; r13: its packed B.
    a.xor(r10d, r10d)?;
    a.mov(r13, rsi)?;
    if whole > 0 {
        let mut top = a.create_label();
        a.set_label(&mut top)?;
        rows(a, s, per, None, tails)?;
        a.add(r10, imm(per * LANES * 4)?)?;
        a.add(r13, imm(panel_b)?)?;
        a.cmp(r10, imm(whole * per * LANES * 4)?)?;
        a.jb(top)?;
    }
    if rest > 0 {
        let partial = s.n % LANES;
        rows(a, s, rest, (partial > 0).then_some(partial), tails)?;
    }
    for r in SAVED.iter().rev() {
        a.pop(*r)?;
    }
    a.vzeroupper()?;
    a.ret()?;
    Ok(())
}

/// Widens `bytes` (a multiple of 4) uint8 at rdi to int16 at r8: 16 at a time, then 4.
fn widen_rows(a: &mut CodeAssembler, bytes: usize) -> AsmResult<()> {
    let whole = bytes / 16 * 16;
    a.xor(eax, eax)?;
    if whole > 0 {
        let mut top = a.create_label();
        a.set_label(&mut top)?;
        a.vpmovzxbw(ymm0, xmmword_ptr(rdi + rax))?;
        a.vmovdqu(ymmword_ptr(r8 + rax * 2), ymm0)?;
        a.add(rax, 16)?;
        a.cmp(rax, imm(whole)?)?;
        a.jb(top)?;
    }
    for d in 0..(bytes - whole) / 4 {
        a.vmovd(xmm0, dword_ptr(rdi + imm(whole + 4 * d)?))?;
        a.vpmovzxbw(xmm0, xmm0)?;
        a.vmovq(qword_ptr(r8 + imm(2 * (whole + 4 * d))?), xmm0)?;
    }
    Ok(())
}

/// Every row tile over the panel at r10 / r13, `vecs` vectors wide, the last one
/// `partial` columns when Some.
fn rows(
    a: &mut CodeAssembler,
    s: &GemmSpec,
    vecs: usize,
    partial: Option<usize>,
    tails: &mut TailMasks,
) -> AsmResult<()> {
    // r14: the tile's first A row; r15: its first C row at this panel.
    a.mov(r14, rdi)?;
    a.lea(r15, qword_ptr(rcx + r10))?;
    let full = s.m / MR;
    if full > 0 {
        a.xor(r12d, r12d)?;
        let mut top = a.create_label();
        a.set_label(&mut top)?;
        tile(a, s, MR, vecs, partial, tails)?;
        a.add(r14, imm(MR * row_bytes(s))?)?;
        a.add(r15, imm(MR * s.n * 4)?)?;
        a.inc(r12d)?;
        a.cmp(r12d, imm(full)?)?;
        a.jb(top)?;
    }
    if !s.m.is_multiple_of(MR) {
        tile(a, s, s.m % MR, vecs, partial, tails)?;
    }
    Ok(())
}

fn acc(s: &GemmSpec, r: usize, j: usize) -> usize {
    r * match widens(s.isa) {
        true => 2,
        false => 3,
    } + j
}

fn tile(
    a: &mut CodeAssembler,
    s: &GemmSpec,
    rows: usize,
    vecs: usize,
    partial: Option<usize>,
    tails: &mut TailMasks,
) -> AsmResult<()> {
    let slots = match widens(s.isa) {
        true => 2,
        false => vecs,
    };
    for r in 0..rows {
        for j in 0..slots {
            let y = YMM[acc(s, r, j)];
            a.vpxor(y, y, y)?;
        }
    }
    if s.k4 > 0 {
        k_loop(a, s, rows, vecs)?;
    }
    if widens(s.isa) {
        for r in 0..rows {
            let (lo, hi) = (YMM[acc(s, r, 0)], YMM[acc(s, r, 1)]);
            a.vphaddd(lo, lo, hi)?;
            a.vpermq(lo, lo, 0xD8)?;
        }
    }
    // C = sums + corr; the partial vector's store is masked.
    if let Some(cols) = partial {
        tails.ymm(a, 14, cols, rbx)?;
    }
    for r in 0..rows {
        for j in 0..vecs {
            let y = YMM[acc(s, r, j)];
            a.vpaddd(y, y, ymmword_ptr(rdx + r10 + imm(32 * j)?))?;
            let at = ymmword_ptr(r15 + imm(r * s.n * 4 + 32 * j)?);
            if partial.is_some() && j + 1 == vecs {
                a.vpmaskmovd(at, YMM[14], y)?;
            } else {
                a.vmovdqu(at, y)?;
            }
        }
    }
    Ok(())
}

/// The K loop (`k4 / 4` > 0 quads) of a tile: A rows from r14, packed B from r13.
fn k_loop(a: &mut CodeAssembler, s: &GemmSpec, rows: usize, vecs: usize) -> AsmResult<()> {
    let rb = row_bytes(s);
    a.mov(rax, r14)?;
    a.mov(rbp, r13)?;
    a.mov(r11d, imm(s.k4 / 4)?)?;
    let mut top = a.create_label();
    a.set_label(&mut top)?;
    match widens(s.isa) {
        true => {
            // B's 8 columns × 4 K as two halves of 4 columns, int16.
            for h in 0..2 {
                a.vpmovsxbw(YMM[8 + h], xmmword_ptr(rbp + imm(16 * h)?))?;
            }
            for r in 0..rows {
                a.vpbroadcastq(YMM[10], qword_ptr(rax + imm(r * rb)?))?;
                for h in 0..2 {
                    let y = YMM[acc(s, r, h)];
                    a.vpmaddwd(YMM[11], YMM[8 + h], YMM[10])?;
                    a.vpaddd(y, y, YMM[11])?;
                }
            }
            a.add(rax, 8)?;
        }
        false => {
            for j in 0..vecs {
                a.vmovdqu(YMM[12 + j], ymmword_ptr(rbp + imm(32 * j)?))?;
            }
            for r in 0..rows {
                a.vpbroadcastd(YMM[15], dword_ptr(rax + imm(r * rb)?))?;
                for j in 0..vecs {
                    a.vpdpbusd(YMM[acc(s, r, j)], YMM[15], YMM[12 + j])?;
                }
            }
            a.add(rax, 4)?;
        }
    }
    a.add(rbp, imm(vecs * 32)?)?;
    a.dec(r11d)?;
    a.jnz(top)?;
    Ok(())
}
