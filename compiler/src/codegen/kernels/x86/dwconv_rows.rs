//! x86-64 depthwise convolution of one channel on planes whose size only the run knows
//! (`lower::planes`): `f32-dwconv-rows-avx512f` and `f32-dwconv-rows-avx2-fma`.
//!
//! One call computes one output map from its channel's zero-bordered copy (the layout of
//! `lower::planes::pad_plane`: padded rows `row_bytes` apart, each split into the
//! stride's column phases `phase_bytes` apart, so every tap of a vector of outputs is one
//! contiguous load): `(X_c, P, W_c, Y_c, R_c, counts)`, System V, with `W_c` the
//! channel's taps and `counts` seven i64: input height and width, output height and
//! width, `row_bytes`, `phase_bytes`, and the address of the channel's bias. The kernel
//! first copies the channel's rows into the interior of `P` (`super::plane_phases`),
//! whose border the caller zeroed once for all channels.
//!
//! Per output row, the window's rows are `kh` pointers advanced a group of vectors at a
//! time; a group is `U` output vectors, each tap broadcast once (AVX2) or held in a
//! register (AVX-512) and multiplied into the `U` accumulators straight from memory.
//! The row's last vector is stored under a mask of its valid lanes (the taps read on
//! into the plane's slack, whose lanes the mask drops); then bias, residual and the
//! activation, as in the static kernel (`super::dwconv`), which compiles a plane's
//! whole shape in and is used when the plane is fixed.
//!
//! Why: the Cranelift loop this replaces (four outputs per iteration) ran MobileNetV2's
//! depthwise convs at 3–4× the static kernel's time.

use iced_x86::code_asm::*;

use super::activation::{activate, activation_temps};
use super::asm::{
    emit_consts, imm, AsmError, AsmResult, Consts, TailMasks, VOp, Vecs, Vector, AVX2_MASK,
};
use super::plane_phases::{PhaseCopy, PhasesSpec};
use crate::ops::Activation;

const F32: usize = 4;
/// Window rows the kernel keeps pointers for.
const MAX_ROWS: usize = 5;
/// Window columns of a tap row it unrolls.
const MAX_COLS: usize = 7;
/// Floats the taps of a row's last vector read past the row's valid outputs, which the
/// caller's plane must have after its last row: a vector and the window's reach.
pub(crate) fn slack_bytes(k: [usize; 2], dilations: [usize; 2]) -> usize {
    (16 + (k[1] - 1) * dilations[1] + 1) * F32
}

/// One depthwise conv's row kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct DwRowsSpec {
    pub isa: Vector,
    pub k: [usize; 2],
    pub stride: [usize; 2],
    pub dil: [usize; 2],
    /// Leading pads (top, left): where the copy puts the input in the plane.
    pub pad: [usize; 2],
    pub bias: bool,
    pub residual: bool,
    pub activation: Activation,
}

/// Whether the kernel computes this conv: a window of at most 5 rows and 7 columns,
/// column stride 1 or 2, an activation its epilogue has.
pub(crate) fn supports(s: &DwRowsSpec) -> bool {
    s.k[0] <= MAX_ROWS
        && s.k[1] <= MAX_COLS
        && s.k[0] >= 1
        && s.k[1] >= 1
        && matches!(s.stride[1], 1 | 2)
        && activation_temps(s.act()) <= ACT_TEMPS.len()
}

impl DwRowsSpec {
    fn act(&self) -> Activation {
        self.activation
    }

    fn taps(&self) -> usize {
        self.k[0] * self.k[1]
    }

    /// Taps held in registers (AVX-512, up to 25 of them: a 5×5), else broadcast per
    /// group.
    fn taps_in_registers(&self) -> bool {
        self.isa == Vector::Zmm && self.taps() <= 32 - FIRST_TAP_REG
    }

    /// Output vectors per group: four independent accumulators.
    fn group(&self) -> usize {
        4
    }
}

/// Vector registers: accumulators 0..4, the activation's temporaries (the first also
/// loads the residual), the broadcast tap (AVX2) or the taps from 7 (AVX-512), and
/// AVX2's mask in 15. The bias is broadcast into the accumulators from the frame.
const ACT_TEMPS: [usize; 3] = [4, 5, 6];
const RESIDUAL: usize = 4;
const TAP: usize = 7;
const FIRST_TAP_REG: usize = 7;
/// Partial sums of a lone vector's taps (in the group's accumulators).
const SPLITS: usize = 4;

/// Frame slots (i64) below the saved registers.
const OUT_H: i32 = 0;
const OUT_W: i32 = 8;
const OUT_ROW_BYTES: i32 = 16;
const ROW_STEP: i32 = 24;
const PHASE_BYTES: i32 = 32;
const BIAS_SLOT: i32 = 40;
const FRAME: i32 = 48;
const SAVED: [AsmRegister64; 6] = [rbx, rbp, r12, r13, r14, r15];
/// Window row pointers.
const ROW_PTRS: [AsmRegister64; MAX_ROWS] = [r12, r13, r14, r15, rbx];

pub(crate) fn emit(s: &DwRowsSpec) -> Result<Vec<u8>, String> {
    if !supports(s) {
        return Err(format!("no depthwise row kernel for {s:?}"));
    }
    let mut a = CodeAssembler::new(64).map_err(|e| e.to_string())?;
    let mut e = Emitter {
        s,
        v: Vecs { isa: s.isa },
        consts: Consts { values: vec![] },
        masks: TailMasks::default(),
    };
    e.code(&mut a).map_err(|AsmError(e)| e)?;
    a.assemble(0)
        .map_err(|e| format!("depthwise row kernel: {e}"))
}

struct Emitter<'s> {
    s: &'s DwRowsSpec,
    v: Vecs,
    consts: Consts,
    masks: TailMasks,
}

impl Emitter<'_> {
    fn code(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        let s = self.s;
        for r in SAVED {
            a.push(r)?;
        }
        a.sub(rsp, FRAME)?;
        // r9 = counts: in_h, in_w, out_h, out_w, row_bytes, phase_bytes.
        a.mov(r10, qword_ptr(r9 + 32))?;
        a.mov(r11, qword_ptr(r9 + 40))?;
        a.mov(qword_ptr(rsp + PHASE_BYTES), r11)?;
        if s.bias {
            a.mov(rax, qword_ptr(r9 + 48))?;
            a.mov(eax, dword_ptr(rax))?;
            a.mov(dword_ptr(rsp + BIAS_SLOT), eax)?;
        }
        a.mov(rax, qword_ptr(r9 + 16))?;
        a.mov(qword_ptr(rsp + OUT_H), rax)?;
        a.mov(rax, qword_ptr(r9 + 24))?;
        a.mov(qword_ptr(rsp + OUT_W), rax)?;
        a.shl(rax, 2)?;
        a.mov(qword_ptr(rsp + OUT_ROW_BYTES), rax)?;
        a.imul_3(rax, r10, imm(s.stride[0])?)?;
        a.mov(qword_ptr(rsp + ROW_STEP), rax)?;
        let mut exit = a.create_label();
        let phases = PhasesSpec {
            isa: s.isa,
            phases: s.stride[1],
            pad: s.pad,
        };
        let mut copy = PhaseCopy::new(&phases);
        copy.emit(a, &mut self.masks)?;
        // The taps in registers (AVX-512); r9 = W_c from here on.
        a.mov(r9, rdx)?;
        if s.taps_in_registers() {
            for t in 0..s.taps() {
                self.v.broadcast(a, FIRST_TAP_REG + t, r9 + imm(t * F32)?)?;
            }
        }
        // rbp = the window's first padded row, rsi = the output row, rdx = the
        // residual row.
        a.mov(rbp, rsi)?;
        a.mov(rsi, rcx)?;
        a.mov(rdx, r8)?;
        a.cmp(qword_ptr(rsp + OUT_H), 0)?;
        a.jle(exit)?;
        let mut row_top = a.create_label();
        a.set_label(&mut row_top)?;
        self.row(a)?;
        a.add(rbp, qword_ptr(rsp + ROW_STEP))?;
        a.add(rsi, qword_ptr(rsp + OUT_ROW_BYTES))?;
        a.add(rdx, qword_ptr(rsp + OUT_ROW_BYTES))?;
        a.dec(qword_ptr(rsp + OUT_H))?;
        a.jnz(row_top)?;
        a.set_label(&mut exit)?;
        a.add(rsp, FRAME)?;
        for r in SAVED.iter().rev() {
            a.pop(*r)?;
        }
        a.vzeroupper()?;
        a.ret()?;
        emit_consts(a, &mut self.consts, s.isa.lanes())?;
        copy.emit_tables(a)?;
        self.masks.emit_table(a)
    }

    /// One output row: the window's row pointers from rbp, then groups of `U` vectors,
    /// single vectors, and the masked last one.
    fn row(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        let s = self.s;
        let lanes = s.isa.lanes();
        let vb = lanes * F32;
        for (ky, &p) in ROW_PTRS.iter().enumerate().take(s.k[0]) {
            a.imul_3(rax, r10, imm(ky * s.dil[0])?)?;
            a.lea(p, rbp + rax)?;
        }
        // rdi = output, r8 = residual, rcx = columns left.
        a.mov(rdi, rsi)?;
        a.mov(r8, rdx)?;
        a.mov(rcx, qword_ptr(rsp + OUT_W))?;
        let u = s.group();
        let (mut singles, mut tail, mut end) =
            (a.create_label(), a.create_label(), a.create_label());
        if u > 1 {
            let mut top = a.create_label();
            a.set_label(&mut top)?;
            a.cmp(rcx, imm(u * lanes)?)?;
            a.jl(singles)?;
            self.vectors(a, u, false)?;
            self.advance(a, u * vb)?;
            a.sub(rcx, imm(u * lanes)?)?;
            a.jmp(top)?;
        }
        a.set_label(&mut singles)?;
        a.cmp(rcx, imm(lanes)?)?;
        a.jl(tail)?;
        self.vectors(a, 1, false)?;
        self.advance(a, vb)?;
        a.sub(rcx, imm(lanes)?)?;
        a.jmp(singles)?;
        a.set_label(&mut tail)?;
        a.test(rcx, rcx)?;
        a.jle(end)?;
        a.mov(rax, rcx)?;
        // r11 (phase_bytes) lends itself for the mask table's address.
        self.masks.set_counted(a, s.isa, k1, AVX2_MASK, rax, r11)?;
        a.mov(r11, qword_ptr(rsp + PHASE_BYTES))?;
        self.vectors(a, 1, true)?;
        a.set_label(&mut end)?;
        a.nop()?;
        Ok(())
    }

    /// Advances the window's row pointers, the output and the residual by `bytes`.
    fn advance(&mut self, a: &mut CodeAssembler, bytes: usize) -> AsmResult<()> {
        for &p in ROW_PTRS.iter().take(self.s.k[0]) {
            a.add(p, imm(bytes)?)?;
        }
        a.add(rdi, imm(bytes)?)?;
        a.add(r8, imm(bytes)?)?;
        Ok(())
    }

    /// `u` output vectors at the pointers: taps, bias, residual, activation, store
    /// (the last under the mask when `masked`).
    fn vectors(&mut self, a: &mut CodeAssembler, u: usize, masked: bool) -> AsmResult<()> {
        let s = self.s;
        let vb = s.isa.lanes() * F32;
        // One vector's taps go round-robin into `splits` partial sums, added up after:
        // a single chain of 25 multiply-adds waited on each one's latency (a plane
        // one vector wide, 14×14 on AVX-512, is all single vectors).
        let splits = if u == 1 { SPLITS } else { 1 };
        for acc in 0..u.max(splits) {
            match s.bias && acc < u {
                true => self.v.broadcast(a, acc, rsp + BIAS_SLOT)?,
                false => self.v.zero(a, acc)?,
            }
        }
        for (ky, &row) in ROW_PTRS.iter().enumerate().take(s.k[0]) {
            for kx in 0..s.k[1] {
                let t = ky * s.k[1] + kx;
                let w = match s.taps_in_registers() {
                    true => FIRST_TAP_REG + t,
                    false => {
                        self.v.broadcast(a, TAP, r9 + imm(t * F32)?)?;
                        TAP
                    }
                };
                let col = kx * s.dil[1];
                let (phase, index) = (col % s.stride[1], col / s.stride[1]);
                for acc in 0..u {
                    let off = imm(index * F32 + acc * vb)?;
                    let m = match phase {
                        0 => row + off,
                        _ => row + r11 + off,
                    };
                    self.v.fma_mem(a, acc + t % splits, w, m)?;
                }
            }
        }
        // Pairwise: 0 + 1 and 2 + 3, then their sum.
        let mut width = splits;
        while width > 1 {
            width /= 2;
            for part in 0..width {
                self.v.op(a, VOp::Add, part, part, part + width)?;
            }
        }
        for acc in 0..u {
            let last = masked && acc + 1 == u;
            if s.residual {
                self.v.load(a, RESIDUAL, r8 + imm(acc * vb)?, last)?;
                self.v.op(a, VOp::Add, acc, acc, RESIDUAL)?;
            }
        }
        let regs: Vec<usize> = (0..u).collect();
        activate(
            a,
            &self.v,
            &mut self.consts,
            s.activation,
            &regs,
            &ACT_TEMPS,
        )?;
        for acc in 0..u {
            let last = masked && acc + 1 == u;
            self.v.store(a, rdi + imm(acc * vb)?, acc, last)?;
        }
        Ok(())
    }
}
