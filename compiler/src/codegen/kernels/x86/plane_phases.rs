//! x86-64 copy of a plane into the interior of a bordered copy split by column phase,
//! for planes whose size only the run knows (`lower::planes`):
//! `f32-plane-phases-avx512f` and `f32-plane-phases-avx2-fma`.
//!
//! The layout is `lower::planes::pad_plane`'s: padded rows `row_bytes` apart, each
//! stored as `phases` runs `phase_bytes` apart, run `p` holding the padded columns
//! `p, p + phases, …`, so a strided window's taps read consecutive floats. Input column
//! `j` is padded column `j + left`; the border (pads, and the last phase's rounding
//! column) is never written here: the caller fills it once per node, every channel
//! copied into the same place leaving it as it was.
//!
//! Stride 2 splits each pair of vectors into evens and odds with one permute each
//! (AVX-512 `vpermi2ps`; AVX2 `vshufps` + `vpermpd`), then one vector, then scalar
//! pairs. Why: Cranelift's copy (a 4-float shuffle per step and a zero fill of every
//! row) took MobileNetV3's stride-2 depthwise convs 2–4× their static time.
//!
//! Standalone, the kernel is `(X_c, P, counts)`, System V, `counts` the depthwise row
//! kernel's (`super::dwconv_rows`): input height and width at 0 and 8, `row_bytes` at
//! 32, `phase_bytes` at 40 (bytes).

use iced_x86::code_asm::*;

use super::asm::{imm, AsmError, AsmResult, TailMasks, Vecs, Vector, AVX2_MASK, YMM, ZMM};

const F32: usize = 4;
/// Vector registers holding the AVX-512 evens and odds indices while copying.
const EVENS: usize = 30;
const ODDS: usize = 31;

/// Where a plane is copied to: its stride's phases and the leading pads.
#[derive(Clone, Debug, PartialEq)]
pub struct PhasesSpec {
    pub isa: Vector,
    /// Column phases of each padded row: the conv's (or pool's) column stride, 1 or 2.
    pub phases: usize,
    /// Leading pads (top, left).
    pub pad: [usize; 2],
}

pub(crate) fn supports(s: &PhasesSpec) -> bool {
    matches!(s.phases, 1 | 2)
}

/// The standalone kernel (see the module's comment).
pub(crate) fn emit(s: &PhasesSpec) -> Result<Vec<u8>, String> {
    if !supports(s) {
        return Err(format!("no plane copy for {s:?}"));
    }
    let mut a = CodeAssembler::new(64).map_err(|e| e.to_string())?;
    let mut masks = TailMasks::default();
    let mut copy = PhaseCopy::new(s);
    let mut code = |a: &mut CodeAssembler, masks: &mut TailMasks| -> AsmResult<()> {
        for r in SAVED {
            a.push(r)?;
        }
        a.mov(r9, rdx)?;
        a.mov(r10, qword_ptr(r9 + 32))?;
        a.mov(r11, qword_ptr(r9 + 40))?;
        copy.emit(a, masks)?;
        for r in SAVED.iter().rev() {
            a.pop(*r)?;
        }
        a.vzeroupper()?;
        a.ret()?;
        copy.emit_tables(a)?;
        masks.emit_table(a)
    };
    code(&mut a, &mut masks).map_err(|AsmError(e)| e)?;
    a.assemble(0).map_err(|e| format!("plane copy kernel: {e}"))
}

const SAVED: [AsmRegister64; 5] = [rbx, r12, r13, r14, r15];

/// The copy's code, to be emitted inside a kernel: reads the plane at rdi, writes the
/// padded plane at rsi; r9 points at the counts, r10 holds `row_bytes`, r11
/// `phase_bytes`. Clobbers rax, rbx, r12–r15, vector registers 0–3 (and, AVX-512, 30
/// and 31) and the tail mask.
pub(crate) struct PhaseCopy<'s> {
    s: &'s PhasesSpec,
    v: Vecs,
    /// The AVX-512 permute indices, placed after the code.
    indices: Option<(CodeLabel, CodeLabel)>,
}

impl<'s> PhaseCopy<'s> {
    pub(crate) fn new(s: &'s PhasesSpec) -> PhaseCopy<'s> {
        PhaseCopy {
            s,
            v: Vecs { isa: s.isa },
            indices: None,
        }
    }

    pub(crate) fn emit(&mut self, a: &mut CodeAssembler, masks: &mut TailMasks) -> AsmResult<()> {
        // r12 = source, r13 = destination row, r14 = rows left.
        a.mov(r12, rdi)?;
        a.imul_3(r13, r10, imm(self.s.pad[0])?)?;
        a.add(r13, rsi)?;
        a.mov(r14, qword_ptr(r9))?;
        let mut done = a.create_label();
        a.test(r14, r14)?;
        a.jle(done)?;
        if self.s.phases == 2 && self.s.isa == Vector::Zmm {
            let (evens, odds) = *self
                .indices
                .get_or_insert_with(|| (a.create_label(), a.create_label()));
            a.vmovups(ZMM[EVENS], zmmword_ptr(evens))?;
            a.vmovups(ZMM[ODDS], zmmword_ptr(odds))?;
        }
        let mut row_top = a.create_label();
        a.set_label(&mut row_top)?;
        match self.s.phases {
            1 => self.row(a, masks)?,
            _ => self.row_in_pairs(a)?,
        }
        a.add(r13, r10)?;
        a.dec(r14)?;
        a.jnz(row_top)?;
        a.set_label(&mut done)?;
        a.nop()?;
        Ok(())
    }

    /// One row at stride 1: vectors, then the last under a mask. Advances r12 by the
    /// row.
    fn row(&mut self, a: &mut CodeAssembler, masks: &mut TailMasks) -> AsmResult<()> {
        let isa = self.s.isa;
        let lanes = isa.lanes();
        let vb = lanes * F32;
        // rbx = destination, rax = floats left, r15 = the mask table's address.
        a.lea(rbx, r13 + imm(self.s.pad[1] * F32)?)?;
        a.mov(rax, qword_ptr(r9 + 8))?;
        let (mut tail, mut end) = (a.create_label(), a.create_label());
        let mut top = a.create_label();
        a.set_label(&mut top)?;
        a.cmp(rax, imm(lanes)?)?;
        a.jl(tail)?;
        self.v.load(a, 0, r12 + 0, false)?;
        self.v.store(a, rbx + 0, 0, false)?;
        a.add(r12, imm(vb)?)?;
        a.add(rbx, imm(vb)?)?;
        a.sub(rax, imm(lanes)?)?;
        a.jmp(top)?;
        a.set_label(&mut tail)?;
        a.test(rax, rax)?;
        a.jz(end)?;
        masks.set_counted(a, isa, k1, AVX2_MASK, rax, r15)?;
        self.v.load(a, 0, r12 + 0, true)?;
        self.v.store(a, rbx + 0, 0, true)?;
        // The source's next row starts right after the tail, w mod lanes floats.
        a.mov(rax, qword_ptr(r9 + 8))?;
        a.and(rax, imm(lanes - 1)?)?;
        a.lea(r12, r12 + rax * 4)?;
        a.set_label(&mut end)?;
        a.nop()?;
        Ok(())
    }

    /// One row at stride 2: even input columns to one phase, odd ones to the other.
    /// Advances r12 by the row.
    fn row_in_pairs(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        let s = self.s;
        let lanes = s.isa.lanes();
        let vb = lanes * F32;
        let left = s.pad[1];
        // Column j lands at padded column j + left: evens in phase left mod 2 from float
        // left div 2, odds in the other from (left + 1) div 2. rbx = evens, r15 = odds.
        let at_phase = |a: &mut CodeAssembler, r: AsmRegister64, phase: usize, first: usize| {
            match phase {
                0 => a.lea(r, r13 + imm(first * F32)?)?,
                _ => a.lea(r, r13 + r11 + imm(first * F32)?)?,
            }
            AsmResult::Ok(())
        };
        at_phase(a, rbx, left % 2, left / 2)?;
        at_phase(a, r15, (left + 1) % 2, left.div_ceil(2))?;
        a.mov(rax, qword_ptr(r9 + 8))?;
        let (mut single, mut pairs, mut last, mut end) = (
            a.create_label(),
            a.create_label(),
            a.create_label(),
            a.create_label(),
        );
        let mut top = a.create_label();
        a.set_label(&mut top)?;
        a.cmp(rax, imm(2 * lanes)?)?;
        a.jl(single)?;
        self.v.load(a, 0, r12 + 0, false)?;
        self.v.load(a, 1, r12 + imm(vb)?, false)?;
        self.split(a, 2)?;
        self.v.store(a, rbx + 0, 2, false)?;
        self.v.store(a, r15 + 0, 3, false)?;
        a.add(r12, imm(2 * vb)?)?;
        a.add(rbx, imm(vb)?)?;
        a.add(r15, imm(vb)?)?;
        a.sub(rax, imm(2 * lanes)?)?;
        a.jmp(top)?;
        // One vector: its evens and odds, half a vector each.
        a.set_label(&mut single)?;
        a.cmp(rax, imm(lanes)?)?;
        a.jl(pairs)?;
        self.v.load(a, 0, r12 + 0, false)?;
        self.split(a, 1)?;
        match s.isa {
            Vector::Zmm => {
                a.vmovups(ymmword_ptr(rbx), YMM[2])?;
                a.vmovups(ymmword_ptr(r15), YMM[3])?;
            }
            Vector::Ymm => {
                a.vmovups(xmmword_ptr(rbx), xmm2)?;
                a.vmovups(xmmword_ptr(r15), xmm3)?;
            }
        }
        a.add(r12, imm(vb)?)?;
        a.add(rbx, imm(vb / 2)?)?;
        a.add(r15, imm(vb / 2)?)?;
        a.sub(rax, imm(lanes)?)?;
        // Scalar pairs, then a lone even column.
        a.set_label(&mut pairs)?;
        a.cmp(rax, 2)?;
        a.jl(last)?;
        a.vmovss(xmm0, dword_ptr(r12))?;
        a.vmovss(dword_ptr(rbx), xmm0)?;
        a.vmovss(xmm0, dword_ptr(r12 + F32 as i32))?;
        a.vmovss(dword_ptr(r15), xmm0)?;
        a.add(r12, imm(2 * F32)?)?;
        a.add(rbx, imm(F32)?)?;
        a.add(r15, imm(F32)?)?;
        a.sub(rax, 2)?;
        a.jmp(pairs)?;
        a.set_label(&mut last)?;
        a.test(rax, rax)?;
        a.jz(end)?;
        a.vmovss(xmm0, dword_ptr(r12))?;
        a.vmovss(dword_ptr(rbx), xmm0)?;
        a.add(r12, imm(F32)?)?;
        a.set_label(&mut end)?;
        a.nop()?;
        Ok(())
    }

    /// Evens into register 2 and odds into 3, of the `n` (1 or 2) vectors from 0: of
    /// one vector, its evens and odds fill the low half.
    fn split(&mut self, a: &mut CodeAssembler, n: usize) -> AsmResult<()> {
        let hi = if n == 2 { 1 } else { 0 };
        match self.s.isa {
            Vector::Zmm => {
                a.vmovaps(ZMM[2], ZMM[EVENS])?;
                a.vpermi2ps(ZMM[2], ZMM[0], ZMM[hi])?;
                a.vmovaps(ZMM[3], ZMM[ODDS])?;
                a.vpermi2ps(ZMM[3], ZMM[0], ZMM[hi])?;
            }
            Vector::Ymm => {
                // Per 128-bit lane (x0 x2 y0 y2 | x4 x6 y4 y6), then the 64-bit pairs
                // in order 0, 2, 1, 3.
                a.vshufps(YMM[2], YMM[0], YMM[hi], 0x88)?;
                a.vpermpd(YMM[2], YMM[2], 0xD8)?;
                a.vshufps(YMM[3], YMM[0], YMM[hi], 0xDD)?;
                a.vpermpd(YMM[3], YMM[3], 0xD8)?;
            }
        }
        Ok(())
    }

    /// The permute indices, when the code used them; after the code.
    pub(crate) fn emit_tables(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        if let Some((mut evens, mut odds)) = self.indices.take() {
            a.set_label(&mut evens)?;
            a.dd(&(0..16).map(|i| 2 * i).collect::<Vec<u32>>())?;
            a.set_label(&mut odds)?;
            a.dd(&(0..16).map(|i| 2 * i + 1).collect::<Vec<u32>>())?;
        }
        Ok(())
    }
}
