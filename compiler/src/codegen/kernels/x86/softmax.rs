//! x86-64 Softmax over contiguous float32 rows as machine code: `f32-softmax-avx512f`
//! and `f32-softmax-avx2-fma`, encoded with iced-x86 like the GEMM kernels of
//! [`super::gemm_x86`].
//!
//! One call computes `rows` rows of `n` floats, `(X, Y)` (System V): per row a pass
//! for the maximum, a pass that stores `e = exp(x − max)` and sums it, and a pass that
//! scales the stored row by `1 / Σ`. The exponential is the Cranelift path's
//! (`math::exp_nonpositive`: Cephes `expf`, x clamped to −88, Cody–Waite reduction,
//! degree-5 polynomial) with fused multiply-adds, and `2^n` built in the exponent
//! field, as there.
//!
//! Why: attention's softmax rows (vit_tiny: 4 × 197 rows of 197 per layer) ran at
//! 4 lanes in the Cranelift code, ~10% of vit_tiny's time; 16 lanes with the
//! polynomial on FMAs is ~4× less (BENCHMARKS.md's history in git).
//!
//! NaN: the maximum ignores nothing on purpose: if a row holds a NaN, `x − max` or the
//! sum is NaN, so the whole row becomes NaN as in the reference; the −88 clamp is
//! `vmaxps(−88, t)`, which returns its second operand `t` when that is NaN.

use iced_x86::code_asm::*;

use crate::codegen::math::{EXPF_LN2_PARTS, EXPF_POLY};

use super::asm::{
    emit_consts, imm, AsmError, AsmResult, Consts, FmaOp, TailMasks, VOp, Vecs, Vector, AVX2_MASK,
    YMM, ZMM,
};

const F32: usize = 4;

/// Sum (and first max) accumulators, the broadcast maximum, the −88 clamp and the
/// broadcast `1 / Σ`.
const SUMS: [usize; 2] = [0, 1];
const MAX: usize = 2;
const CLAMP: usize = 3;
const FACTOR: usize = 12;
/// Registers of the two exponentials in flight: t (then r), n, p, r².
const LANE_REGS: [[usize; 4]; 2] = [[4, 5, 6, 7], [8, 9, 10, 11]];
/// AVX2: a −∞ vector for masked maxima (the tail mask is in `AVX2_MASK`, 15).
const NEG_INF: usize = 14;

/// The kernel for `rows` rows of `n` floats.
pub(crate) fn emit(rows: usize, n: usize, isa: Vector) -> Result<Vec<u8>, String> {
    if rows == 0 || n == 0 {
        return Err("empty softmax".into());
    }
    assemble(isa, Some(n), |e, a| e.function(a, rows))
}

/// The kernel for rows whose count and length the run gives: `(X, Y, rows, n)`
/// (System V), rows of `n` floats one after another; nothing for 0 rows or `n = 0`.
pub(crate) fn emit_counted(isa: Vector) -> Result<Vec<u8>, String> {
    assemble(isa, None, |e, a| e.counted_function(a))
}

fn assemble(
    isa: Vector,
    n: Option<usize>,
    body: impl FnOnce(&mut Emitter, &mut CodeAssembler) -> AsmResult<()>,
) -> Result<Vec<u8>, String> {
    let mut e = Emitter {
        v: Vecs { isa },
        n: n.unwrap_or(0),
        counted: n.is_none(),
        consts: Consts { values: vec![] },
        masks: TailMasks::default(),
    };
    let mut a = CodeAssembler::new(64).map_err(|e| e.to_string())?;
    body(&mut e, &mut a).map_err(|e| format!("x86 softmax kernel: {}", e.0))?;
    a.assemble(0)
        .map_err(|e| format!("x86 softmax kernel: {e}"))
}

/// Registers of the run-time length (see [`Emitter::counted_function`]): the row's
/// bytes, its full vectors' bytes, and where the loops unrolled by 4 and by 2 end.
const ROW_BYTES: AsmRegister64 = r8;
const FULL_BYTES: AsmRegister64 = r9;
const END_BY_4: AsmRegister64 = r10;
const END_BY_2: AsmRegister64 = r11;

/// A vector's address relative to a row base: `base (+ index) + disp`.
#[derive(Clone, Copy)]
struct At {
    index: Option<AsmRegister64>,
    disp: usize,
}

impl At {
    fn of(self, base: AsmRegister64) -> AsmResult<AsmMemoryOperand> {
        let disp = imm(self.disp)?;
        Ok(match self.index {
            Some(index) => base + index + disp,
            None => base + disp,
        })
    }
}

struct Emitter {
    v: Vecs,
    /// The row length, when fixed (`counted`: the run's, in [`ROW_BYTES`]).
    n: usize,
    counted: bool,
    consts: Consts,
    masks: TailMasks,
}

impl Emitter {
    fn lanes(&self) -> usize {
        self.v.isa.lanes()
    }

    /// Whether the row may end inside a vector.
    fn has_tail(&self) -> bool {
        self.counted || !self.n.is_multiple_of(self.lanes())
    }

    /// Emits `body` for the row's partial last vector: always where the length is
    /// fixed (and has one), else when the run's length leaves one.
    fn in_tail(
        &mut self,
        a: &mut CodeAssembler,
        body: impl FnOnce(&mut Self, &mut CodeAssembler) -> AsmResult<()>,
    ) -> AsmResult<()> {
        if !self.counted {
            return body(self, a);
        }
        let mut skip = a.create_label();
        a.cmp(FULL_BYTES, ROW_BYTES)?;
        a.je(skip)?;
        body(self, a)?;
        a.set_label(&mut skip)?;
        Ok(())
    }

    /// `(X, Y, rows, n)`: rdi = X row, rsi = Y row, rax = rows left, rcx = byte offset
    /// in the row; the length's registers set from `n` (see [`ROW_BYTES`]).
    fn counted_function(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        let vb = self.lanes() * F32;
        let mut end = a.create_label();
        a.mov(rax, rdx)?;
        a.test(rax, rax)?;
        a.jle(end)?;
        a.test(rcx, rcx)?;
        a.jle(end)?;
        a.lea(ROW_BYTES, rcx * 4)?;
        a.mov(FULL_BYTES, rcx)?;
        a.and(FULL_BYTES, -(self.lanes() as i32))?;
        a.shl(FULL_BYTES, 2)?;
        a.mov(END_BY_4, FULL_BYTES)?;
        a.and(END_BY_4, -(4 * vb as i32))?;
        a.mov(END_BY_2, FULL_BYTES)?;
        a.and(END_BY_2, -(2 * vb as i32))?;
        a.mov(rdx, rcx)?;
        a.and(rdx, (self.lanes() - 1) as i32)?;
        self.masks
            .set_counted(a, self.v.isa, k1, AVX2_MASK, rdx, rcx)?;
        let clamp = self.consts.get(a, -88.0);
        self.v.load(a, CLAMP, clamp, false)?;
        if !self.avx512() {
            let neg_inf = self.consts.get(a, f32::NEG_INFINITY);
            self.v.load(a, NEG_INF, neg_inf, false)?;
        }
        let mut row = a.create_label();
        a.set_label(&mut row)?;
        self.max_pass(a)?;
        self.exp_pass(a)?;
        self.scale_pass(a)?;
        a.add(rdi, ROW_BYTES)?;
        a.add(rsi, ROW_BYTES)?;
        a.dec(rax)?;
        a.jnz(row)?;
        a.set_label(&mut end)?;
        a.vzeroupper()?;
        a.ret()?;
        let lanes = self.lanes();
        emit_consts(a, &mut self.consts, lanes)?;
        self.masks.emit_table(a)
    }

    fn avx512(&self) -> bool {
        self.v.isa == Vector::Zmm
    }

    /// rdi = X row, rsi = Y row, rax = rows left, rcx = byte offset in the row.
    fn function(&mut self, a: &mut CodeAssembler, rows: usize) -> AsmResult<()> {
        let tail = self.n % self.lanes();
        if tail > 0 {
            self.masks.set(a, self.v.isa, k1, AVX2_MASK, tail)?;
        }
        let clamp = self.consts.get(a, -88.0);
        self.v.load(a, CLAMP, clamp, false)?;
        if !self.avx512() {
            let neg_inf = self.consts.get(a, f32::NEG_INFINITY);
            self.v.load(a, NEG_INF, neg_inf, false)?;
        }
        a.mov(rax, rows as u64)?;
        let mut row = a.create_label();
        a.set_label(&mut row)?;
        self.max_pass(a)?;
        self.exp_pass(a)?;
        self.scale_pass(a)?;
        let row_bytes = imm(self.n * F32)?;
        a.add(rdi, row_bytes)?;
        a.add(rsi, row_bytes)?;
        a.dec(rax)?;
        a.jnz(row)?;
        a.vzeroupper()?;
        a.ret()?;
        let lanes = self.lanes();
        emit_consts(a, &mut self.consts, lanes)?;
        self.masks.emit_table(a)
    }

    /// Emits `body(u, at)` for the row's full vectors, `unroll` per loop iteration
    /// (rcx = byte offset of the iteration's first vector; `u` = index within it).
    fn full_vectors(
        &mut self,
        a: &mut CodeAssembler,
        unroll: usize,
        body: &mut dyn FnMut(&mut Self, &mut CodeAssembler, usize, At) -> AsmResult<()>,
    ) -> AsmResult<()> {
        let vb = self.lanes() * F32;
        let full = self.n / self.lanes();
        let groups = full / unroll;
        let at = |u: usize| At {
            index: Some(rcx),
            disp: u * vb,
        };
        a.xor(ecx, ecx)?;
        if self.counted {
            // Groups of `unroll` vectors to their end, then one vector at a time.
            let group_end = if unroll == 4 { END_BY_4 } else { END_BY_2 };
            let (mut rest, mut top, mut one, mut done) = (
                a.create_label(),
                a.create_label(),
                a.create_label(),
                a.create_label(),
            );
            a.cmp(rcx, group_end)?;
            a.jae(rest)?;
            a.set_label(&mut top)?;
            for u in 0..unroll {
                body(self, a, u, at(u))?;
            }
            a.add(rcx, imm(unroll * vb)?)?;
            a.cmp(rcx, group_end)?;
            a.jb(top)?;
            a.set_label(&mut rest)?;
            a.cmp(rcx, FULL_BYTES)?;
            a.jae(done)?;
            a.set_label(&mut one)?;
            body(self, a, 0, at(0))?;
            a.add(rcx, imm(vb)?)?;
            a.cmp(rcx, FULL_BYTES)?;
            a.jb(one)?;
            a.set_label(&mut done)?;
            return Ok(());
        }
        if groups > 0 {
            let mut top = a.create_label();
            a.set_label(&mut top)?;
            for u in 0..unroll {
                body(self, a, u, at(u))?;
            }
            a.add(rcx, imm(unroll * vb)?)?;
            a.cmp(rcx, imm(groups * unroll * vb)?)?;
            a.jb(top)?;
        }
        for u in 0..full % unroll {
            body(self, a, u, at(u))?;
        }
        Ok(())
    }

    /// The tail vector's place: right after the full vectors.
    fn tail(&self) -> At {
        match self.counted {
            true => At {
                index: Some(FULL_BYTES),
                disp: 0,
            },
            false => At {
                index: None,
                disp: self.n / self.lanes() * self.lanes() * F32,
            },
        }
    }

    /// MAX = the row's maximum, in every lane.
    fn max_pass(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        const ACCS: [usize; 4] = [0, 1, 4, 5];
        let neg_inf = self.consts.get(a, f32::NEG_INFINITY);
        for r in ACCS {
            self.v.load(a, r, neg_inf, false)?;
        }
        self.full_vectors(a, 4, &mut |e, a, u, at| {
            e.v.op_mem(a, VOp::Max, ACCS[u], ACCS[u], at.of(rdi)?)
                .map_err(AsmError::from)
        })?;
        if self.has_tail() {
            self.in_tail(a, |e, a| {
                let m = e.tail().of(rdi)?;
                if e.avx512() {
                    a.vmaxps(ZMM[0].k1(), ZMM[0], zmmword_ptr(m))?;
                } else {
                    a.vmaskmovps(YMM[6], YMM[AVX2_MASK], ymmword_ptr(m))?;
                    a.vblendvps(YMM[6], YMM[NEG_INF], YMM[6], YMM[AVX2_MASK])?;
                    a.vmaxps(YMM[0], YMM[0], YMM[6])?;
                }
                Ok(())
            })?;
        }
        self.v.op(a, VOp::Max, 0, 0, 1)?;
        self.v.op(a, VOp::Max, 4, 4, 5)?;
        self.v.op(a, VOp::Max, 0, 0, 4)?;
        self.horizontal(a, VOp::Max)?;
        if self.avx512() {
            a.vbroadcastss(ZMM[MAX], xmm0)
        } else {
            a.vbroadcastss(YMM[MAX], xmm0)
        }
        .map_err(AsmError::from)
    }

    /// Reduces register 0's lanes with `op` into its lane 0 (register 4 is clobbered).
    fn horizontal(&mut self, a: &mut CodeAssembler, op: VOp) -> AsmResult<()> {
        let apply = |a: &mut CodeAssembler, d: AsmRegisterXmm, s: AsmRegisterXmm| match op {
            VOp::Max => a.vmaxps(d, d, s),
            _ => a.vaddps(d, d, s),
        };
        if self.avx512() {
            a.vextractf64x4(ymm4, zmm0, 1)?;
            match op {
                VOp::Max => a.vmaxps(ymm0, ymm0, ymm4)?,
                _ => a.vaddps(ymm0, ymm0, ymm4)?,
            }
        }
        a.vextractf128(xmm4, ymm0, 1)?;
        apply(a, xmm0, xmm4)?;
        a.vpermilps(xmm4, xmm0, 0x4E)?;
        apply(a, xmm0, xmm4)?;
        a.vpermilps(xmm4, xmm0, 0xB1)?;
        apply(a, xmm0, xmm4)?;
        Ok(())
    }

    /// Y = exp(X − MAX), summed into SUMS.
    fn exp_pass(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        for s in SUMS {
            self.v.zero(a, s)?;
        }
        self.full_vectors(a, 2, &mut |e, a, u, at| e.exp_vector(a, u, at, false))?;
        if self.has_tail() {
            self.in_tail(a, |e, a| {
                let at = e.tail();
                e.exp_vector(a, 0, at, true)
            })?;
        }
        self.v.op(a, VOp::Add, SUMS[0], SUMS[0], SUMS[1])?;
        Ok(())
    }

    /// One vector of exponentials from X at `at`, stored at the same place in Y.
    fn exp_vector(
        &mut self,
        a: &mut CodeAssembler,
        u: usize,
        at: At,
        masked: bool,
    ) -> AsmResult<()> {
        let [t, n, p, r2] = LANE_REGS[u % 2];
        let sum = SUMS[u % 2];
        self.v.load(a, t, at.of(rdi)?, masked)?;
        self.v.op(a, VOp::Sub, t, t, MAX)?;
        // Second operand t: a NaN passes through the clamp.
        self.v.op(a, VOp::Max, t, CLAMP, t)?;
        let log2e = self.consts.get(a, std::f32::consts::LOG2_E);
        self.v.op_mem(a, VOp::Mul, n, t, log2e)?;
        if self.avx512() {
            a.vrndscaleps(ZMM[n], ZMM[n], 0)?;
        } else {
            a.vroundps(YMM[n], YMM[n], 0)?;
        }
        for c in EXPF_LN2_PARTS {
            let c = self.consts.get(a, c as f32);
            self.v.fma_op_mem(a, FmaOp::NegMulAdd231, t, n, c)?;
        }
        // p(r) by Horner, then e = p·r² + r + 1.
        let first = self.consts.get(a, EXPF_POLY[0] as f32);
        self.v.load(a, p, first, false)?;
        for &c in &EXPF_POLY[1..] {
            let c = self.consts.get(a, c as f32);
            self.v.fma_op_mem(a, FmaOp::MulAdd213, p, t, c)?;
        }
        self.v.op(a, VOp::Mul, r2, t, t)?;
        self.v.fma_op(a, FmaOp::MulAdd213, p, r2, t)?;
        let one = self.consts.get(a, 1.0);
        self.v.op_mem(a, VOp::Add, p, p, one)?;
        // 2^n from the exponent field: n ∈ [−127, 0], and n = −127 gives 0, so masked
        // logits (−1e4, −inf) give exactly 0. `vscalefps` would give 2^−127·p there, a
        // denormal: minibert's masked rows then ran 2.5× slower (microcode assists).
        let bias = self.consts.get(a, f32::from_bits(127));
        if self.avx512() {
            a.vcvtps2dq(ZMM[n], ZMM[n])?;
            a.vpaddd(ZMM[n], ZMM[n], zmmword_ptr(bias))?;
            a.vpslld(ZMM[n], ZMM[n], 23)?;
        } else {
            a.vcvtps2dq(YMM[n], YMM[n])?;
            a.vpaddd(YMM[n], YMM[n], ymmword_ptr(bias))?;
            a.vpslld(YMM[n], YMM[n], 23)?;
        }
        self.v.op(a, VOp::Mul, p, p, n)?;
        self.v.store(a, at.of(rsi)?, p, masked)?;
        match (self.avx512(), masked) {
            (true, true) => a.vaddps(ZMM[sum].k1(), ZMM[sum], ZMM[p])?,
            (false, true) => {
                a.vandps(YMM[p], YMM[p], YMM[AVX2_MASK])?;
                a.vaddps(YMM[sum], YMM[sum], YMM[p])?;
            }
            _ => self.v.op(a, VOp::Add, sum, sum, p)?,
        }
        Ok(())
    }

    /// Y *= 1 / Σ.
    fn scale_pass(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        self.horizontal(a, VOp::Add)?;
        let one = self.consts.get(a, 1.0);
        a.vmovss(xmm4, dword_ptr(one))?;
        a.vdivss(xmm0, xmm4, xmm0)?;
        if self.avx512() {
            a.vbroadcastss(ZMM[FACTOR], xmm0)?;
        } else {
            a.vbroadcastss(YMM[FACTOR], xmm0)?;
        }
        self.full_vectors(a, 4, &mut |e, a, u, at| {
            let r = LANE_REGS[u / 2][u % 2];
            let m = at.of(rsi)?;
            e.v.op_mem(a, VOp::Mul, r, FACTOR, m)?;
            e.v.store(a, m, r, false).map_err(AsmError::from)
        })?;
        if self.has_tail() {
            self.in_tail(a, |e, a| {
                let m = e.tail().of(rsi)?;
                e.v.load(a, 4, m, true)?;
                e.v.op(a, VOp::Mul, 4, 4, FACTOR)?;
                e.v.store(a, m, 4, true).map_err(AsmError::from)
            })?;
        }
        Ok(())
    }
}
