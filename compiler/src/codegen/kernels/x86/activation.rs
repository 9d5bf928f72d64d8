//! The fused activation of every x86 machine-code epilogue (GEMM, depthwise and
//! Winograd convolutions, the INT8 kernels): an activation applied to accumulator
//! registers in place before they are stored, so that no pass over memory follows.
//!
//! The exponential behind sigmoid, SiLU, tanh and tanh-GELU is the one of the softmax
//! kernel and the Cranelift path (`math::EXPF_*`: Cephes `expf`, Cody–Waite reduction,
//! degree-5 polynomial, `2^n` built in the exponent field), so machine code and
//! Cranelift agree to a few ulps.

use iced_x86::code_asm::*;

use super::asm::{AsmError, AsmResult, Consts, FmaOp, VOp, Vecs, Vector, YMM, ZMM};
use crate::codegen::math::{
    ERF_F32_P, ERF_F32_Q, ERF_F32_SATURATION, EXPF_LN2_PARTS, EXPF_POLY, TANHF_POLY,
    TANHF_POLY_BELOW,
};
use crate::ops::Activation;

/// Free vector registers [`activate`] needs besides the ones it transforms.
pub fn activation_temps(act: Activation) -> usize {
    match act {
        Activation::None => 0,
        Activation::Relu
        | Activation::Clip { .. }
        | Activation::LeakyRelu { .. }
        | Activation::HardSigmoid { .. }
        | Activation::HardSwish => 1,
        Activation::Sigmoid | Activation::Silu | Activation::Tanh | Activation::Gelu { .. } => 3,
    }
}

/// Whether an epilogue with `temps` free vector registers applies `act` in registers.
pub fn supports_activation_with(act: Activation, temps: usize) -> bool {
    activation_temps(act) <= temps
}

/// Activations every machine-code epilogue applies in registers, even one with a
/// single free register.
pub fn supports_activation(act: Activation) -> bool {
    supports_activation_with(act, 1)
}

/// Opmask the AVX-512 tanh uses for its small-|x| select; no kernel keeps a mask there
/// across its epilogue.
const SELECT_MASK: AsmRegisterK = k7;

/// Applies `act` to the vector registers `regs` in place, `tmps` being free registers
/// (at least [`activation_temps`] of them); constants go to `consts`.
pub(crate) fn activate(
    a: &mut CodeAssembler,
    v: &Vecs,
    consts: &mut Consts,
    act: Activation,
    regs: &[usize],
    tmps: &[usize],
) -> AsmResult<()> {
    if tmps.len() < activation_temps(act) {
        return Err(AsmError(format!(
            "the {act:?} epilogue needs {} free registers, the kernel has {}",
            activation_temps(act),
            tmps.len()
        )));
    }
    let each = |a: &mut CodeAssembler,
                f: &mut dyn FnMut(&mut CodeAssembler, usize) -> AsmResult<()>|
     -> AsmResult<()> {
        for &r in regs {
            f(a, r)?;
        }
        Ok(())
    };
    match act {
        Activation::None => Ok(()),
        Activation::Relu => bound(a, v, consts, regs, tmps[0], VOp::Max, 0.0),
        Activation::Clip { min, max } => {
            bound(a, v, consts, regs, tmps[0], VOp::Max, min)?;
            bound(a, v, consts, regs, tmps[0], VOp::Min, max)
        }
        Activation::LeakyRelu { alpha } => {
            // x ≥ 0: x; else alpha·x. For alpha ≤ 1 that is max(x, alpha·x), else min.
            let tmp = tmps[0];
            let c = consts.get(a, alpha);
            let pick = if alpha <= 1.0 { VOp::Max } else { VOp::Min };
            each(a, &mut |a, r| {
                v.op_mem(a, VOp::Mul, tmp, r, c)?;
                Ok(v.op(a, pick, r, r, tmp)?)
            })
        }
        Activation::HardSigmoid { alpha, beta } => {
            let (ca, cb) = (consts.get(a, alpha), consts.get(a, beta));
            each(a, &mut |a, r| {
                v.op_mem(a, VOp::Mul, r, r, ca)?;
                Ok(v.op_mem(a, VOp::Add, r, r, cb)?)
            })?;
            bound(a, v, consts, regs, tmps[0], VOp::Max, 0.0)?;
            bound(a, v, consts, regs, tmps[0], VOp::Min, 1.0)
        }
        Activation::HardSwish => {
            let tmp = tmps[0];
            let (ca, cb) = (consts.get(a, 1.0 / 6.0), consts.get(a, 0.5));
            let (zero, one) = (consts.get(a, 0.0), consts.get(a, 1.0));
            each(a, &mut |a, r| {
                v.op_mem(a, VOp::Mul, tmp, r, ca)?;
                v.op_mem(a, VOp::Add, tmp, tmp, cb)?;
                v.op_mem(a, VOp::Max, tmp, tmp, zero)?;
                v.op_mem(a, VOp::Min, tmp, tmp, one)?;
                Ok(v.op(a, VOp::Mul, r, r, tmp)?)
            })
        }
        Activation::Sigmoid => {
            let [t, n, p] = [tmps[0], tmps[1], tmps[2]];
            let one = consts.get(a, 1.0);
            each(a, &mut |a, r| {
                one_plus_exp_neg(a, v, consts, r, [t, n, p])?;
                v.load(a, n, one, false)?;
                Ok(v.op(a, VOp::Div, r, n, p)?)
            })
        }
        Activation::Silu => {
            let [t, n, p] = [tmps[0], tmps[1], tmps[2]];
            each(a, &mut |a, r| {
                one_plus_exp_neg(a, v, consts, r, [t, n, p])?;
                Ok(v.op(a, VOp::Div, r, r, p)?)
            })
        }
        Activation::Gelu { tanh: true } => {
            // x·0.5·(1 + tanh(u)) = x·σ(2u) = x / (1 + e^−2u), 2u = x·(C1 + C3·x²): no
            // cancellation in the negative tail (as `math::gelu_tanh`).
            const C1: f32 = 1.595_769_2; // 2·√(2/π)
            const C3: f32 = C1 * 0.044715;
            let [t, n, p] = [tmps[0], tmps[1], tmps[2]];
            let (c1, c3) = (consts.get(a, C1), consts.get(a, C3));
            each(a, &mut |a, r| {
                v.op(a, VOp::Mul, t, r, r)?;
                v.load(a, n, c3, false)?;
                v.fma_op_mem(a, FmaOp::MulAdd213, t, n, c1)?;
                v.op(a, VOp::Mul, t, t, r)?;
                one_plus_exp_neg(a, v, consts, t, [t, n, p])?;
                Ok(v.op(a, VOp::Div, r, r, p)?)
            })
        }
        Activation::Tanh => {
            let [t, n, p] = [tmps[0], tmps[1], tmps[2]];
            let abs_mask = consts.get(a, f32::from_bits(0x7fff_ffff));
            let sign_mask = consts.get(a, f32::from_bits(0x8000_0000));
            let (one, two) = (consts.get(a, 1.0), consts.get(a, 2.0));
            let below = consts.get(a, TANHF_POLY_BELOW as f32);
            let poly: Vec<_> = TANHF_POLY
                .iter()
                .map(|&c| consts.get(a, c as f32))
                .collect();
            each(a, &mut |a, r| {
                // |x| ≥ 0.625: 2/(1 + e^−2|x|) − 1 with x's sign (≥ 0.55, so the
                // subtraction loses nothing).
                and_mem(a, v, t, r, abs_mask)?;
                v.op(a, VOp::Add, t, t, t)?;
                one_plus_exp_neg(a, v, consts, t, [t, n, p])?;
                v.load(a, n, two, false)?;
                v.op(a, VOp::Div, p, n, p)?;
                v.op_mem(a, VOp::Sub, p, p, one)?;
                and_mem(a, v, n, r, sign_mask)?;
                or(a, v, p, p, n)?;
                // |x| < 0.625: x + x·x²·P(x²) (Cephes `tanhf`), which keeps tanh(−0) = −0.
                v.op(a, VOp::Mul, t, r, r)?;
                v.load(a, n, poly[0], false)?;
                for &c in &poly[1..] {
                    v.fma_op_mem(a, FmaOp::MulAdd213, n, t, c)?;
                }
                v.op(a, VOp::Mul, n, n, t)?;
                v.fma_op(a, FmaOp::MulAdd213, n, r, r)?;
                // NaN compares false and takes the large-|x| value, which is NaN.
                and_mem(a, v, t, r, abs_mask)?;
                select_below(a, v, r, t, below, n, p)
            })
        }
        Activation::Gelu { tanh: false } => {
            // x·0.5·(1 + erf(x/√2)), erf(z) = z·P(z²)/Q(z²) on z clamped to the
            // rational's range (|z| ≤ 3.8325, where erf is 1 to 6e-8): the same
            // polynomials as the Cranelift `math::erf`, with a clamp instead of its
            // select.
            let (z, z2, p) = (tmps[0], tmps[1], tmps[2]);
            let k = consts.get(a, std::f32::consts::FRAC_1_SQRT_2);
            let bound = ERF_F32_SATURATION as f32;
            let (lo, hi) = (consts.get(a, -bound), consts.get(a, bound));
            let (one, half) = (consts.get(a, 1.0), consts.get(a, 0.5));
            let p_k: Vec<_> = ERF_F32_P.iter().map(|&c| consts.get(a, c as f32)).collect();
            let q_k: Vec<_> = ERF_F32_Q.iter().map(|&c| consts.get(a, c as f32)).collect();
            each(a, &mut |a, r| {
                v.op_mem(a, VOp::Mul, z, r, k)?;
                v.op_mem(a, VOp::Max, z, z, lo)?;
                v.op_mem(a, VOp::Min, z, z, hi)?;
                v.op(a, VOp::Mul, z2, z, z)?;
                horner(a, v, p, z2, &p_k)?;
                v.op(a, VOp::Mul, p, p, z)?;
                // z is free again: Q(z²) goes there.
                horner(a, v, z, z2, &q_k)?;
                v.op(a, VOp::Div, p, p, z)?;
                v.op_mem(a, VOp::Add, p, p, one)?;
                v.op(a, VOp::Mul, r, r, p)?;
                Ok(v.op_mem(a, VOp::Mul, r, r, half)?)
            })
        }
    }
}

/// `p = 1 + e^−x` for the register `x` (which may be `t`), with `t` and `n` clobbered.
/// −x is clamped to [−87, 89] first: `2^n` is then a normal float or, for n = 128
/// (−x above ~88.03), +inf, so 1/(1 + e^−x) is within 1e−38 of its value and
/// x/(1 + e^−x) is NaN at x = −inf, as the graph's x·σ(x) = −inf·0 is. A NaN passes
/// the clamps (vmaxps/vminps return their second operand when either is NaN).
fn one_plus_exp_neg(
    a: &mut CodeAssembler,
    v: &Vecs,
    consts: &mut Consts,
    x: usize,
    [t, n, p]: [usize; 3],
) -> AsmResult<()> {
    let minus_one = consts.get(a, -1.0);
    let (lo, hi) = (consts.get(a, -87.0), consts.get(a, 89.0));
    v.op_mem(a, VOp::Mul, t, x, minus_one)?;
    v.load(a, p, lo, false)?;
    v.op(a, VOp::Max, t, p, t)?;
    v.load(a, p, hi, false)?;
    v.op(a, VOp::Min, t, p, t)?;
    let log2e = consts.get(a, std::f32::consts::LOG2_E);
    v.op_mem(a, VOp::Mul, n, t, log2e)?;
    match v.isa {
        Vector::Zmm => a.vrndscaleps(ZMM[n], ZMM[n], 0)?,
        Vector::Ymm => a.vroundps(YMM[n], YMM[n], 0)?,
    }
    for c in EXPF_LN2_PARTS {
        let c = consts.get(a, c as f32);
        v.fma_op_mem(a, FmaOp::NegMulAdd231, t, n, c)?;
    }
    // e^r = 1 + r + r²·P(r), as ((P·r + 1)·r + 1).
    let first = consts.get(a, EXPF_POLY[0] as f32);
    v.load(a, p, first, false)?;
    for &c in &EXPF_POLY[1..] {
        let c = consts.get(a, c as f32);
        v.fma_op_mem(a, FmaOp::MulAdd213, p, t, c)?;
    }
    let one = consts.get(a, 1.0);
    v.fma_op_mem(a, FmaOp::MulAdd213, p, t, one)?;
    v.fma_op_mem(a, FmaOp::MulAdd213, p, t, one)?;
    // 2^n in the exponent field (n ∈ [−126, 128]; 128 gives the bits of +inf).
    let bias = consts.get(a, f32::from_bits(127));
    match v.isa {
        Vector::Zmm => {
            a.vcvtps2dq(ZMM[n], ZMM[n])?;
            a.vpaddd(ZMM[n], ZMM[n], zmmword_ptr(bias))?;
            a.vpslld(ZMM[n], ZMM[n], 23)?;
        }
        Vector::Ymm => {
            a.vcvtps2dq(YMM[n], YMM[n])?;
            a.vpaddd(YMM[n], YMM[n], ymmword_ptr(bias))?;
            a.vpslld(YMM[n], YMM[n], 23)?;
        }
    }
    v.op(a, VOp::Mul, p, p, n)?;
    Ok(v.op_mem(a, VOp::Add, p, p, one)?)
}

/// `d = x & [m]` bitwise (vpandd: vandps on zmm needs AVX512DQ).
fn and_mem(
    a: &mut CodeAssembler,
    v: &Vecs,
    d: usize,
    x: usize,
    m: AsmMemoryOperand,
) -> AsmResult<()> {
    match v.isa {
        Vector::Zmm => a.vpandd(ZMM[d], ZMM[x], zmmword_ptr(m))?,
        Vector::Ymm => a.vandps(YMM[d], YMM[x], ymmword_ptr(m))?,
    }
    Ok(())
}

/// `d = x | y` bitwise.
fn or(a: &mut CodeAssembler, v: &Vecs, d: usize, x: usize, y: usize) -> AsmResult<()> {
    match v.isa {
        Vector::Zmm => a.vpord(ZMM[d], ZMM[x], ZMM[y])?,
        Vector::Ymm => a.vorps(YMM[d], YMM[x], YMM[y])?,
    }
    Ok(())
}

/// `r = key < [limit] ? if_below : otherwise`, lane by lane (`key` is clobbered).
fn select_below(
    a: &mut CodeAssembler,
    v: &Vecs,
    r: usize,
    key: usize,
    limit: AsmMemoryOperand,
    if_below: usize,
    otherwise: usize,
) -> AsmResult<()> {
    // Predicate 1: less-than, ordered (a NaN key is not below).
    match v.isa {
        Vector::Zmm => {
            a.vcmpps(SELECT_MASK, ZMM[key], zmmword_ptr(limit), 1)?;
            a.vmovaps(ZMM[r], ZMM[otherwise])?;
            a.vmovaps(ZMM[r].k7(), ZMM[if_below])?;
        }
        Vector::Ymm => {
            a.vcmpps(YMM[key], YMM[key], ymmword_ptr(limit), 1)?;
            a.vblendvps(YMM[r], YMM[otherwise], YMM[if_below], YMM[key])?;
        }
    }
    Ok(())
}

/// `r = op(value, r)` (Max or Min) for every register, with the splat `value` in `tmp`
/// as the first operand: vmaxps/vminps return their second operand when either is
/// NaN, so a NaN stays NaN as ONNX (and the Cranelift epilogues) have it; with the
/// bound second, Relu(NaN) was 0.
fn bound(
    a: &mut CodeAssembler,
    v: &Vecs,
    consts: &mut Consts,
    regs: &[usize],
    tmp: usize,
    op: VOp,
    value: f32,
) -> AsmResult<()> {
    let c = consts.get(a, value);
    v.load(a, tmp, c, false)?;
    for &r in regs {
        v.op(a, op, r, tmp, r)?;
    }
    Ok(())
}

/// `d = c[0]·xⁿ⁻¹ + … + c[n-1]` by Horner's rule (`d` ≠ `x`), constants in memory.
fn horner(
    a: &mut CodeAssembler,
    v: &Vecs,
    d: usize,
    x: usize,
    c: &[AsmMemoryOperand],
) -> AsmResult<()> {
    v.op_mem(a, VOp::Mul, d, x, c[0])?;
    for (i, &k) in c.iter().enumerate().skip(1) {
        v.op_mem(a, VOp::Add, d, d, k)?;
        if i + 1 < c.len() {
            v.op(a, VOp::Mul, d, d, x)?;
        }
    }
    Ok(())
}
