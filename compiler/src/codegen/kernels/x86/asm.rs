//! The x86-64 machine-code toolkit every kernel of `kernels/x86` is written with:
//! register names, vector instructions on register numbers (one
//! source for AVX2 and AVX-512), tail masks and constant pools, all encoded with iced-x86
//! (the fused activation epilogue is `activation.rs`).

use iced_x86::code_asm::*;

pub use crate::codegen::isa::Vector;

const F32: usize = 4;

/// An encoding failure or a spec the kernel cannot express.
#[derive(Debug)]
pub(crate) struct AsmError(pub(crate) String);

impl From<IcedError> for AsmError {
    fn from(e: IcedError) -> Self {
        AsmError(e.to_string())
    }
}

pub(crate) type AsmResult<T> = Result<T, AsmError>;

pub(crate) const ZMM: [AsmRegisterZmm; 32] = [
    zmm0, zmm1, zmm2, zmm3, zmm4, zmm5, zmm6, zmm7, zmm8, zmm9, zmm10, zmm11, zmm12, zmm13, zmm14,
    zmm15, zmm16, zmm17, zmm18, zmm19, zmm20, zmm21, zmm22, zmm23, zmm24, zmm25, zmm26, zmm27,
    zmm28, zmm29, zmm30, zmm31,
];
pub(crate) const YMM: [AsmRegisterYmm; 16] = [
    ymm0, ymm1, ymm2, ymm3, ymm4, ymm5, ymm6, ymm7, ymm8, ymm9, ymm10, ymm11, ymm12, ymm13, ymm14,
    ymm15,
];

/// Vector instructions of one ISA on register numbers, so the tile code is written once.
pub(crate) struct Vecs {
    pub(crate) isa: Vector,
}

/// AVX2 register holding the tail mask (all-ones lanes are valid).
pub(crate) const AVX2_MASK: usize = 15;

/// `d = x op y` with the instruction of `op`, for any operand kinds iced takes.
macro_rules! vop {
    ($a:expr, $op:expr, $d:expr, $x:expr, $y:expr) => {
        match $op {
            VOp::Add => $a.vaddps($d, $x, $y),
            VOp::Sub => $a.vsubps($d, $x, $y),
            VOp::Mul => $a.vmulps($d, $x, $y),
            VOp::Max => $a.vmaxps($d, $x, $y),
            VOp::Min => $a.vminps($d, $x, $y),
            VOp::Div => $a.vdivps($d, $x, $y),
        }
    };
}

/// `d = fma-form(d, x, y)` with the instruction of `op`, for any operand kinds iced takes.
macro_rules! vfma {
    ($a:expr, $op:expr, $d:expr, $x:expr, $y:expr) => {
        match $op {
            FmaOp::MulAdd213 => $a.vfmadd213ps($d, $x, $y),
            FmaOp::NegMulAdd231 => $a.vfnmadd231ps($d, $x, $y),
        }
    };
}

/// Fused multiply-add forms besides the accumulating `acc += x·y` of [`Vecs::fma`].
#[derive(Clone, Copy)]
pub(crate) enum FmaOp {
    /// `d = d·x + y` (Horner steps).
    MulAdd213,
    /// `d = d − x·y` (Cody–Waite reductions).
    NegMulAdd231,
}

impl Vecs {
    pub(crate) fn bytes(&self) -> i32 {
        (self.isa.lanes() * F32) as i32
    }

    pub(crate) fn vmem(&self, m: AsmMemoryOperand) -> AsmMemoryOperand {
        match self.isa {
            Vector::Ymm => ymmword_ptr(m),
            Vector::Zmm => zmmword_ptr(m),
        }
    }

    pub(crate) fn zero(&self, a: &mut CodeAssembler, r: usize) -> Result<(), IcedError> {
        match self.isa {
            Vector::Ymm => a.vxorps(YMM[r], YMM[r], YMM[r]),
            // vxorps on zmm needs AVX512DQ; vpxord is AVX512F.
            Vector::Zmm => a.vpxord(ZMM[r], ZMM[r], ZMM[r]),
        }
    }

    /// `r = [m]`; `masked` loads only the tail lanes (the others become zero), for
    /// memory that may end inside the vector.
    pub(crate) fn load(
        &self,
        a: &mut CodeAssembler,
        r: usize,
        m: AsmMemoryOperand,
        masked: bool,
    ) -> Result<(), IcedError> {
        match (self.isa, masked) {
            (Vector::Ymm, false) => a.vmovups(YMM[r], ymmword_ptr(m)),
            (Vector::Ymm, true) => a.vmaskmovps(YMM[r], YMM[AVX2_MASK], ymmword_ptr(m)),
            (Vector::Zmm, false) => a.vmovups(ZMM[r], zmmword_ptr(m)),
            (Vector::Zmm, true) => a.vmovups(ZMM[r].k1().z(), zmmword_ptr(m)),
        }
    }

    pub(crate) fn store(
        &self,
        a: &mut CodeAssembler,
        m: AsmMemoryOperand,
        r: usize,
        masked: bool,
    ) -> Result<(), IcedError> {
        match (self.isa, masked) {
            (Vector::Ymm, false) => a.vmovups(ymmword_ptr(m), YMM[r]),
            (Vector::Ymm, true) => a.vmaskmovps(ymmword_ptr(m), YMM[AVX2_MASK], YMM[r]),
            (Vector::Zmm, false) => a.vmovups(zmmword_ptr(m), ZMM[r]),
            (Vector::Zmm, true) => a.vmovups(zmmword_ptr(m).k1(), ZMM[r]),
        }
    }

    pub(crate) fn broadcast(
        &self,
        a: &mut CodeAssembler,
        r: usize,
        m: AsmMemoryOperand,
    ) -> Result<(), IcedError> {
        match self.isa {
            Vector::Ymm => a.vbroadcastss(YMM[r], dword_ptr(m)),
            Vector::Zmm => a.vbroadcastss(ZMM[r], dword_ptr(m)),
        }
    }

    /// `acc += x · y`.
    pub(crate) fn fma(
        &self,
        a: &mut CodeAssembler,
        acc: usize,
        x: usize,
        y: usize,
    ) -> Result<(), IcedError> {
        match self.isa {
            Vector::Ymm => a.vfmadd231ps(YMM[acc], YMM[x], YMM[y]),
            Vector::Zmm => a.vfmadd231ps(ZMM[acc], ZMM[x], ZMM[y]),
        }
    }

    /// `acc += w · [m]`, the load folded into the FMA.
    pub(crate) fn fma_mem(
        &self,
        a: &mut CodeAssembler,
        acc: usize,
        w: usize,
        m: AsmMemoryOperand,
    ) -> Result<(), IcedError> {
        match self.isa {
            Vector::Ymm => a.vfmadd231ps(YMM[acc], YMM[w], ymmword_ptr(m)),
            Vector::Zmm => a.vfmadd231ps(ZMM[acc], ZMM[w], zmmword_ptr(m)),
        }
    }

    /// `d = x op [m]` for a full vector in memory.
    pub(crate) fn op_mem(
        &self,
        a: &mut CodeAssembler,
        op: VOp,
        d: usize,
        x: usize,
        m: AsmMemoryOperand,
    ) -> Result<(), IcedError> {
        let m = self.vmem(m);
        match self.isa {
            Vector::Ymm => vop!(a, op, YMM[d], YMM[x], m),
            Vector::Zmm => vop!(a, op, ZMM[d], ZMM[x], m),
        }
    }

    pub(crate) fn op(
        &self,
        a: &mut CodeAssembler,
        op: VOp,
        d: usize,
        x: usize,
        y: usize,
    ) -> Result<(), IcedError> {
        match self.isa {
            Vector::Ymm => vop!(a, op, YMM[d], YMM[x], YMM[y]),
            Vector::Zmm => vop!(a, op, ZMM[d], ZMM[x], ZMM[y]),
        }
    }

    pub(crate) fn fma_op(
        &self,
        a: &mut CodeAssembler,
        op: FmaOp,
        d: usize,
        x: usize,
        y: usize,
    ) -> Result<(), IcedError> {
        match self.isa {
            Vector::Ymm => vfma!(a, op, YMM[d], YMM[x], YMM[y]),
            Vector::Zmm => vfma!(a, op, ZMM[d], ZMM[x], ZMM[y]),
        }
    }

    /// [`Vecs::fma_op`] with `y` a full vector in memory.
    pub(crate) fn fma_op_mem(
        &self,
        a: &mut CodeAssembler,
        op: FmaOp,
        d: usize,
        x: usize,
        m: AsmMemoryOperand,
    ) -> Result<(), IcedError> {
        let m = self.vmem(m);
        match self.isa {
            Vector::Ymm => vfma!(a, op, YMM[d], YMM[x], m),
            Vector::Zmm => vfma!(a, op, ZMM[d], ZMM[x], m),
        }
    }
}

/// Tail masks for vectors that end inside the data: an AVX-512 opmask, or on AVX2 a ymm
/// register loaded from a table of 8 × −1 then 8 × 0 placed after the code (the mask
/// for `n` lanes starts `8 − n` elements in).
#[derive(Default)]
pub(crate) struct TailMasks {
    table: Option<CodeLabel>,
    /// Opmasks of 0 to 16 lanes, one word each, for counts known at run time.
    opmasks: Option<CodeLabel>,
}

impl TailMasks {
    /// Sets opmask `k` (AVX-512) or ymm `y` (AVX2) to the first `lanes` lanes; rax is
    /// clobbered.
    pub(crate) fn set(
        &mut self,
        a: &mut CodeAssembler,
        isa: Vector,
        k: AsmRegisterK,
        y: usize,
        lanes: usize,
    ) -> AsmResult<()> {
        match isa {
            Vector::Zmm => {
                a.mov(eax, ((1u32 << lanes) - 1) as i32)?;
                a.kmovw(k, eax)?;
            }
            Vector::Ymm => self.ymm(a, y, lanes, rax)?,
        }
        Ok(())
    }

    /// [`Self::set`] for a lane count (1 to the ISA's lanes) in register `lanes`,
    /// with `via` clobbered for a table's address and `lanes` for its offset.
    pub(crate) fn set_counted(
        &mut self,
        a: &mut CodeAssembler,
        isa: Vector,
        k: AsmRegisterK,
        y: usize,
        lanes: AsmRegister64,
        via: AsmRegister64,
    ) -> AsmResult<()> {
        match isa {
            Vector::Zmm => {
                let table = *self.opmasks.get_or_insert_with(|| a.create_label());
                a.lea(via, ptr(table))?;
                a.kmovw(k, word_ptr(via + lanes * 2))?;
            }
            Vector::Ymm => {
                // The mask of n lanes starts 8 − n elements into the table.
                let table = *self.table.get_or_insert_with(|| a.create_label());
                a.lea(via, ptr(table))?;
                a.neg(lanes)?;
                a.vmovups(YMM[y], ymmword_ptr(via + lanes * 4 + imm(8 * F32)?))?;
            }
        }
        Ok(())
    }

    /// Sets ymm `y` to the AVX2 mask of the first `lanes` (≤ 8) dword lanes (its xmm
    /// half: of the first `lanes` ≤ 4), with `via` clobbered for the table's address.
    pub(crate) fn ymm(
        &mut self,
        a: &mut CodeAssembler,
        y: usize,
        lanes: usize,
        via: AsmRegister64,
    ) -> AsmResult<()> {
        let table = *self.table.get_or_insert_with(|| a.create_label());
        a.lea(via, ptr(table))?;
        a.vmovups(YMM[y], ymmword_ptr(via + imm((8 - lanes) * F32)?))?;
        Ok(())
    }

    /// The AVX2 table, when a mask used it; after the code.
    pub(crate) fn emit_table(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        if let Some(mut l) = self.table.take() {
            a.set_label(&mut l)?;
            let mut t = vec![u32::MAX; 8];
            t.extend([0u32; 8]);
            a.dd(&t)?;
        }
        if let Some(mut l) = self.opmasks.take() {
            a.set_label(&mut l)?;
            let t: Vec<u16> = (0..=16u32).map(|n| ((1u32 << n) - 1) as u16).collect();
            a.dw(&t)?;
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
pub(crate) enum VOp {
    Add,
    Sub,
    Mul,
    Max,
    Min,
    Div,
}

/// Constant vectors placed after the code, addressed RIP-relative.
pub(crate) struct Consts {
    pub(crate) values: Vec<(u32, CodeLabel)>,
}

impl Consts {
    pub(crate) fn get(&mut self, a: &mut CodeAssembler, v: f32) -> AsmMemoryOperand {
        let bits = v.to_bits();
        if let Some((_, l)) = self.values.iter().find(|(b, _)| *b == bits) {
            return ptr(*l);
        }
        let l = a.create_label();
        self.values.push((bits, l));
        ptr(l)
    }
}

pub(crate) fn imm(v: usize) -> AsmResult<i32> {
    i32::try_from(v).map_err(|_| AsmError("GEMM operand offset does not fit in 32 bits".into()))
}

/// Emits the constant vectors of `consts` (each splat to `lanes` floats), after the code.
pub(crate) fn emit_consts(
    a: &mut CodeAssembler,
    consts: &mut Consts,
    lanes: usize,
) -> AsmResult<()> {
    for (bits, mut l) in std::mem::take(&mut consts.values) {
        a.set_label(&mut l)?;
        a.dd(&vec![bits; lanes])?;
    }
    Ok(())
}
