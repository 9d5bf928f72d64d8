//! x86-64 gather of a conv's patches for a run of output positions in one output row,
//! from its channels' bordered copies (`lower::planes`, planes whose size only the run
//! knows): `f32-patch-rows-avx512f` and `f32-patch-rows-avx2-fma`.
//!
//! The copies are `super::plane_phases`' layout (padded rows `row_bytes` apart, split
//! into column phases `phase_bytes` apart), so each tap's run of a row is one
//! contiguous stretch: per channel and tap, `len` floats copied to the patches' row
//! `channel · taps + tap` (`P[K][block]`), whole vectors then the rest under a mask.
//!
//! `(X, P, len, row_bytes, phase_bytes)`, System V: `X` the first channel's copy at the
//! window's top padded row and the run's first output column (phase 0), `P` the
//! patches at the run's first column.
//!
//! Why: Cranelift's copy, four floats a step per tap and channel, took MobileNetV3's
//! 3 → 16 stem 0.16 ms at 224×224, most of the conv's time on planes.

use iced_x86::code_asm::*;

use super::asm::{imm, AsmError, AsmResult, TailMasks, Vecs, Vector, AVX2_MASK};

const F32: usize = 4;

/// One conv's patch gather.
#[derive(Clone, Debug, PartialEq)]
pub struct PatchRowsSpec {
    pub isa: Vector,
    /// Input channels per group.
    pub channels: usize,
    pub k: [usize; 2],
    /// The column stride: the copies' phases (1 or 2).
    pub stride: usize,
    pub dil: [usize; 2],
    /// Bytes from one channel's copy to the next.
    pub chan_bytes: usize,
    /// Floats per row of the patches.
    pub block: usize,
}

/// Whether the kernel gathers this conv's patches: column stride 1 or 2 (the copies'
/// phases), offsets that fit in 32 bits.
pub(crate) fn supports(s: &PatchRowsSpec) -> bool {
    matches!(s.stride, 1 | 2)
        && s.channels >= 1
        && s.k.iter().all(|&k| k >= 1)
        && i32::try_from(s.k[0] * s.k[1] * s.block * F32).is_ok()
        && i32::try_from(s.chan_bytes).is_ok()
        && i32::try_from(s.k[1] * s.dil[1] * F32).is_ok()
}

const SAVED: [AsmRegister64; 5] = [rbx, r12, r13, r14, r15];

pub(crate) fn emit(s: &PatchRowsSpec) -> Result<Vec<u8>, String> {
    if !supports(s) {
        return Err(format!("no patch gather for {s:?}"));
    }
    let mut a = CodeAssembler::new(64).map_err(|e| e.to_string())?;
    let mut masks = TailMasks::default();
    code(&mut a, s, &mut masks).map_err(|AsmError(e)| e)?;
    a.assemble(0)
        .map_err(|e| format!("patch gather kernel: {e}"))
}

fn code(a: &mut CodeAssembler, s: &PatchRowsSpec, masks: &mut TailMasks) -> AsmResult<()> {
    let v = Vecs { isa: s.isa };
    let lanes = s.isa.lanes();
    let vb = lanes * F32;
    for r in SAVED {
        a.push(r)?;
    }
    // rbx = whole vectors per run, r9 = the rest (and its mask), r11 = bytes from one
    // window row to the next.
    a.mov(rbx, rdx)?;
    a.shr(rbx, lanes.trailing_zeros() as i32)?;
    a.mov(r9, rdx)?;
    a.and(r9, imm(lanes - 1)?)?;
    a.mov(rax, r9)?;
    masks.set_counted(a, s.isa, k1, AVX2_MASK, rax, r11)?;
    a.imul_3(r11, rcx, imm(s.dil[0])?)?;
    // r10 = channels left, r12 = the channel's copy, r13 = its first patch row.
    a.mov(r10, s.channels as u64)?;
    a.mov(r12, rdi)?;
    a.mov(r13, rsi)?;
    let mut channel = a.create_label();
    a.set_label(&mut channel)?;
    // r14 = the window row.
    a.mov(r14, r12)?;
    for ky in 0..s.k[0] {
        for kx in 0..s.k[1] {
            let t = ky * s.k[1] + kx;
            let col = kx * s.dil[1];
            let (phase, index) = (col % s.stride, col / s.stride);
            // rax = source, rdx = destination, r15 = vectors left.
            match phase {
                0 => a.lea(rax, r14 + imm(index * F32)?)?,
                _ => a.lea(rax, r14 + r8 + imm(index * F32)?)?,
            }
            a.lea(rdx, r13 + imm(t * s.block * F32)?)?;
            let (mut tail, mut done) = (a.create_label(), a.create_label());
            a.mov(r15, rbx)?;
            a.test(r15, r15)?;
            a.jz(tail)?;
            let mut top = a.create_label();
            a.set_label(&mut top)?;
            v.load(a, 0, rax + 0, false)?;
            v.store(a, rdx + 0, 0, false)?;
            a.add(rax, imm(vb)?)?;
            a.add(rdx, imm(vb)?)?;
            a.dec(r15)?;
            a.jnz(top)?;
            a.set_label(&mut tail)?;
            a.test(r9, r9)?;
            a.jz(done)?;
            v.load(a, 0, rax + 0, true)?;
            v.store(a, rdx + 0, 0, true)?;
            a.set_label(&mut done)?;
        }
        if ky + 1 < s.k[0] {
            a.add(r14, r11)?;
        }
    }
    a.add(r12, imm(s.chan_bytes)?)?;
    a.add(r13, imm(s.k[0] * s.k[1] * s.block * F32)?)?;
    a.dec(r10)?;
    a.jnz(channel)?;
    for r in SAVED.iter().rev() {
        a.pop(*r)?;
    }
    a.vzeroupper()?;
    a.ret()?;
    masks.emit_table(a)
}
