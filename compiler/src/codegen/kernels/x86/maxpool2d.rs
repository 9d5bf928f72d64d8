//! x86-64 separable 2-D max pooling as machine code: `f32-maxpool2d-avx512f` and
//! `f32-maxpool2d-avx2`, the row passes of `pool/maxpool2d.rs` (same row buffer in padded
//! coordinates, −∞ outside the input columns, same NaN rule) at 16 or 8 lanes instead
//! of Cranelift's 4, with the loops over planes and rows in the kernel: one call for
//! all planes of the batch.
//!
//! Why: the Cranelift passes are bound by instruction count, not memory: SqueezeNet's
//! 3×3/2 pool ran at the same 5.7–5.9 Gop/s on 64×111×111 (3.2 MB, from L3) as on
//! 64×55×55 (0.8 MB, in L2) (`benches/bench_conv.py maxpool`), against onnxruntime's
//! NCHWc kernel at ~0.2 ms in the model for the former.

use iced_x86::code_asm::*;

use super::asm::{imm, AsmError, AsmResult, TailMasks, VOp, Vecs, Vector, AVX2_MASK, YMM, ZMM};

const F32: usize = 4;

/// One output row that is not interior: its first input row and how many rows its
/// window covers.
#[derive(Clone, Debug)]
pub(crate) struct BorderRow {
    pub out_row: usize,
    pub first: usize,
    pub taps: usize,
}

/// Everything the kernel bakes in.
#[derive(Clone, Debug)]
pub(crate) struct MaxPoolSpec {
    pub isa: Vector,
    pub planes: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub out_h: usize,
    pub out_w: usize,
    pub kernel_h: usize,
    pub kernel_w: usize,
    pub stride_h: usize,
    /// 1 or 2.
    pub stride_w: usize,
    pub pad_top: usize,
    pub pad_left: usize,
    /// Floats of the row buffer (sized for 16 lanes).
    pub row_floats: usize,
    pub interior: std::ops::Range<usize>,
    pub border: Vec<BorderRow>,
}

/// Registers (both max-pool kernels, `super::maxpool_plane` too): accumulator, loaded
/// vector, the stride-2 pair, the even/odd picks, the permutation indices (AVX-512),
/// −∞.
pub(super) const ACC: usize = 0;
pub(super) const X: usize = 1;
const LO: usize = 2;
const HI: usize = 3;
const PICK: usize = 4;
const EVEN_IDX: usize = 5;
const ODD_IDX: usize = 6;
pub(super) const NEG_INF: usize = 14;

/// The constants the kernels keep in registers, placed after the code.
pub(super) struct PoolConstants {
    neg_inf: CodeLabel,
    evens: CodeLabel,
    odds: CodeLabel,
}

impl PoolConstants {
    /// Creates the labels and loads −∞ (and, AVX-512, the even and odd lane indices of
    /// a 32-float pair) into their registers.
    pub(super) fn load(a: &mut CodeAssembler, v: &Vecs) -> AsmResult<PoolConstants> {
        let c = PoolConstants {
            neg_inf: a.create_label(),
            evens: a.create_label(),
            odds: a.create_label(),
        };
        v.broadcast(a, NEG_INF, ptr(c.neg_inf))?;
        if v.isa == Vector::Zmm {
            a.vmovups(ZMM[EVEN_IDX], zmmword_ptr(c.evens))?;
            a.vmovups(ZMM[ODD_IDX], zmmword_ptr(c.odds))?;
        }
        Ok(c)
    }

    /// The constants' data, after the code.
    pub(super) fn emit(mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        a.set_label(&mut self.neg_inf)?;
        a.dd(&[f32::NEG_INFINITY.to_bits()])?;
        a.set_label(&mut self.evens)?;
        a.dd(&std::array::from_fn::<u32, 16, _>(|i| 2 * i as u32))?;
        a.set_label(&mut self.odds)?;
        a.dd(&std::array::from_fn::<u32, 16, _>(|i| 2 * i as u32 + 1))?;
        Ok(())
    }
}

/// ACC = the maximum over `kw` taps `dilation` floats apart of the row buffer read through
/// `at` (floats from the vector's first window's first tap), for a vector of outputs
/// `stride` (1 or 2) floats apart: the input the first operand of `vmaxps`, so NaN
/// never wins.
pub(super) fn window_maximum(
    a: &mut CodeAssembler,
    v: &Vecs,
    (kw, dilation, stride): (usize, usize, usize),
    at: &dyn Fn(usize) -> AsmResult<AsmMemoryOperand>,
) -> AsmResult<()> {
    let lanes = v.isa.lanes();
    v.op(a, VOp::Max, ACC, NEG_INF, NEG_INF)?;
    if stride == 1 {
        for t in 0..kw {
            v.load(a, X, at(t * dilation)?, false)?;
            v.op(a, VOp::Max, ACC, X, ACC)?;
        }
        return Ok(());
    }
    for u in 0..kw.div_ceil(2) {
        v.load(a, LO, at(2 * u)?, false)?;
        v.load(a, HI, at(2 * u + lanes)?, false)?;
        pick(a, v.isa, false)?;
        v.op(a, VOp::Max, ACC, PICK, ACC)?;
        if 2 * u + 1 < kw {
            pick(a, v.isa, true)?;
            v.op(a, VOp::Max, ACC, PICK, ACC)?;
        }
    }
    Ok(())
}

/// PICK = the even (or odd) floats of LO ++ HI, in order.
fn pick(a: &mut CodeAssembler, isa: Vector, odd: bool) -> AsmResult<()> {
    match isa {
        Vector::Zmm => {
            let idx = if odd { ODD_IDX } else { EVEN_IDX };
            a.vmovaps(ZMM[PICK], ZMM[idx])?;
            a.vpermi2ps(ZMM[PICK], ZMM[LO], ZMM[HI])?;
        }
        Vector::Ymm => {
            // Per 128-bit half: [lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6]; then the 64-bit
            // pairs in order 0, 2, 1, 3.
            a.vshufps(YMM[PICK], YMM[LO], YMM[HI], if odd { 0xDD } else { 0x88 })?;
            a.vpermpd(YMM[PICK], YMM[PICK], 0xD8)?;
        }
    }
    Ok(())
}

/// Encodes the kernel `(X, Y, row buffer)` (System V) for all planes.
pub(crate) fn emit(s: &MaxPoolSpec) -> Result<Vec<u8>, String> {
    let mut a = CodeAssembler::new(64).map_err(|e| e.to_string())?;
    let mut e = Emitter {
        s,
        v: Vecs { isa: s.isa },
        masks: TailMasks::default(),
    };
    e.code(&mut a).map_err(|AsmError(e)| e)?;
    a.assemble(0).map_err(|e| format!("max pool kernel: {e}"))
}

struct Emitter<'s> {
    s: &'s MaxPoolSpec,
    v: Vecs,
    masks: TailMasks,
}

/// Callee-saved registers the kernel uses.
const SAVED: [AsmRegister64; 3] = [r12, r13, r14];

impl Emitter<'_> {
    fn lanes(&self) -> usize {
        self.s.isa.lanes()
    }

    fn code(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        let s = self.s;
        let lanes = self.lanes();
        for r in SAVED {
            a.push(r)?;
        }
        let constants = PoolConstants::load(a, &self.v)?;
        // The row buffer starts all −∞; the vertical passes overwrite only the input
        // columns, so the padding stays −∞.
        for v in 0..s.row_floats.div_ceil(lanes) {
            self.v
                .store(a, rdx + imm(v * lanes * F32)?, NEG_INF, false)?;
        }
        let (in_plane, out_plane) = (s.in_h * s.in_w * F32, s.out_h * s.out_w * F32);
        a.mov(r8, s.planes as u64)?;
        let mut plane_top = a.create_label();
        a.set_label(&mut plane_top)?;
        for r in &s.border {
            a.lea(r9, rdi + imm(r.first * s.in_w * F32)?)?;
            a.lea(r10, rsi + imm(r.out_row * s.out_w * F32)?)?;
            self.row(a, r.taps)?;
        }
        let rows = s.interior.len();
        if rows > 0 {
            let first = s.interior.start * s.stride_h - s.pad_top;
            a.lea(r9, rdi + imm(first * s.in_w * F32)?)?;
            a.lea(r10, rsi + imm(s.interior.start * s.out_w * F32)?)?;
            a.mov(r11, rows as u64)?;
            let mut top = a.create_label();
            a.set_label(&mut top)?;
            self.row(a, s.kernel_h)?;
            a.add(r9, imm(s.stride_h * s.in_w * F32)?)?;
            a.add(r10, imm(s.out_w * F32)?)?;
            a.dec(r11)?;
            a.jnz(top)?;
        }
        a.add(rdi, imm(in_plane)?)?;
        a.add(rsi, imm(out_plane)?)?;
        a.dec(r8)?;
        a.jnz(plane_top)?;
        for r in SAVED.iter().rev() {
            a.pop(*r)?;
        }
        a.vzeroupper()?;
        a.ret()?;
        constants.emit(a)?;
        self.masks.emit_table(a)
    }

    /// One output row: input rows from r9 (`taps` of them), output at r10.
    fn row(&mut self, a: &mut CodeAssembler, taps: usize) -> AsmResult<()> {
        self.vertical(a, taps)?;
        self.horizontal(a)
    }

    /// `row[pad_left + c] = max over the rows of X[r][c]`, from −∞ with the input as
    /// the first operand of vmaxps, which returns the second (the accumulator) when
    /// either is NaN: a NaN input never wins.
    fn vertical(&mut self, a: &mut CodeAssembler, taps: usize) -> AsmResult<()> {
        let s = self.s;
        let lanes = self.lanes();
        let row_bytes = s.in_w * F32;
        let column = |e: &mut Self, a: &mut CodeAssembler, masked: bool| -> AsmResult<()> {
            e.v.op(a, VOp::Max, ACC, NEG_INF, NEG_INF)?;
            for r in 0..taps {
                e.v.load(a, X, r14 + imm(r * row_bytes)?, masked)?;
                e.v.op(a, VOp::Max, ACC, X, ACC)?;
            }
            Ok(e.v.store(a, rcx + 0, ACC, masked)?)
        };
        // r14 walks the input columns (rax is the tail mask's scratch).
        a.mov(r14, r9)?;
        a.lea(rcx, rdx + imm(s.pad_left * F32)?)?;
        let step = lanes * F32;
        self.vectors(a, s.in_w, [(r14, step), (rcx, step)], &column)
    }

    /// `body` once per full vector of a row of `n` elements (r12 counts), advancing each
    /// pointer by its step, then once with the tail mask set when `n` ends inside a
    /// vector.
    fn vectors(
        &mut self,
        a: &mut CodeAssembler,
        n: usize,
        advance: [(AsmRegister64, usize); 2],
        body: &dyn Fn(&mut Self, &mut CodeAssembler, bool) -> AsmResult<()>,
    ) -> AsmResult<()> {
        let lanes = self.lanes();
        if n >= lanes {
            a.mov(r12, (n / lanes) as u64)?;
            let mut top = a.create_label();
            a.set_label(&mut top)?;
            body(self, a, false)?;
            for (reg, bytes) in advance {
                a.add(reg, imm(bytes)?)?;
            }
            a.dec(r12)?;
            a.jnz(top)?;
        }
        if !n.is_multiple_of(lanes) {
            self.set_mask(a, n % lanes)?;
            body(self, a, true)?;
        }
        Ok(())
    }

    /// `Y[j] = max over t < kw of row[j·sw + t]`, a vector of outputs at a time.
    fn horizontal(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        let s = self.s;
        let lanes = self.lanes();
        let outputs = |e: &mut Self, a: &mut CodeAssembler, masked: bool| -> AsmResult<()> {
            let at = |floats: usize| Ok(rcx + imm(floats * F32)?);
            window_maximum(a, &e.v, (s.kernel_w, 1, s.stride_w), &at)?;
            Ok(e.v.store(a, r13 + 0, ACC, masked)?)
        };
        a.mov(rcx, rdx)?;
        a.mov(r13, r10)?;
        let steps = [(rcx, s.stride_w * lanes * F32), (r13, lanes * F32)];
        self.vectors(a, s.out_w, steps, &outputs)
    }

    /// The first `lanes` lanes; rax is clobbered (so the passes keep pointers elsewhere).
    fn set_mask(&mut self, a: &mut CodeAssembler, lanes: usize) -> AsmResult<()> {
        self.masks.set(a, self.s.isa, k1, AVX2_MASK, lanes)
    }
}
