//! Transcendental functions emitted inline as CLIF.
//!
//! Compiled models must not call libc/libm, so every elementwise math function an ONNX
//! operator needs is expanded here into plain Cranelift instructions. Each public emitter
//! takes a value of type `F32`, `F32X4`, `F64` or `F64X2` and returns a value of the same
//! type; the lane type picks the algorithm (single precision polynomials for `F32`/`F32X4`,
//! longer double precision ones for `F64`/`F64X2`). Vector code is lane-wise and branch
//! free: every candidate result is computed and the right one is picked per lane with
//! `bitselect` on an `fcmp`/`icmp` mask.
//!
//! # Algorithms and where the coefficients come from
//!
//! Most kernels follow Cephes (Stephen L. Moshier's Cephes Math Library, the source of
//! `sse_mathfun`, Eigen, XLA and friends): reduce the argument to a small interval with an
//! exactly representable split of the reduction constant (Cody–Waite), then evaluate a
//! minimax polynomial or rational function fitted on that interval. The coefficients below
//! are copied verbatim from the Cephes sources named at each use (`expf.c`, `logf.c`,
//! `tanhf.c`, ... for single precision, `exp.c`, `tanh.c`, `ndtr.c`, ... for double); the
//! double precision logarithm uses fdlibm's `e_log.c` instead and the single precision erf
//! uses Eigen's rational approximation (Cephes' `erff` needs an extra `exp`).
//!
//! Measured accuracy (see `tests/codegen_math.rs`): relative error below 1e-6 for single
//! precision and below 1e-12 for double precision over the whole domain, with absolute
//! error (1e-7 / 1e-13) used instead where the result is below 0.1 for functions whose
//! zeros are not at the origin or that underflow towards -inf (sin, cos and tan at
//! multiples of π/2, GELU's negative tail), and for tan next to its poles on 1/tan.
//! sin, cos and tan reduce the argument exactly for |x| <= 2^16·π/2 (single) and 2^30
//! (double) and return 0 beyond, like Cephes.
//!
//! # Instruction choices
//!
//! * No `fma`: x86-64 without FMA lowers a scalar `fma` to a libm call and cannot lower a
//!   vector one, so polynomials use a separate multiply and add.
//! * Rounding to an integer inside range reductions uses the "magic number" trick
//!   (`(x + 1.5·2^m) - 1.5·2^m`, where m is the mantissa width) instead of `nearest` and
//!   `fcvt_to_sint`: it needs no SSE4.1, yields the integer for free in the low mantissa
//!   bits, and works for `F64X2`, whose float/int conversions x86-64 cannot lower without
//!   AVX-512. Small integers are turned back into floats the same way.
//! * Sign manipulation is bitwise (`band`/`bxor` with `-0.0`) because x86-64 has no vector
//!   `fcopysign` lowering.
//! * [`round_half_even`] uses `nearest`, which on x86-64 needs SSE4.1 (enabled by nnc).
//!
//! IEEE special values follow C99 Annex F / numpy: NaN in gives NaN out, exp overflows to
//! +inf and underflows (through the denormals) to 0, log(0) = -inf, log(x<0) = NaN,
//! tanh(±big) = ±1 and so on; [`pow`] implements the full C `pow` special-case table.

// Coefficients are quoted digit for digit from their sources so that they can be checked
// against them; the digits beyond f64 precision are harmless.
#![allow(clippy::excessive_precision)]

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::types::{F32, F32X4, F64, F64X2, I32, I32X4, I64, I64X2, I8X16};
use cranelift_codegen::ir::{ConstantData, Endianness, InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::FunctionBuilder;
use std::f64::consts::{FRAC_1_SQRT_2, FRAC_2_PI, FRAC_PI_2, FRAC_PI_4, LN_2, LOG2_E};

/// Cephes `expf.c`: ln 2 split for the Cody–Waite reduction `r = x − n·ln 2` (`n` times
/// the first part is exact in single precision).
pub(crate) const EXPF_LN2_PARTS: [f64; 2] = [0.693_359_375, -2.121_944_40E-4];
/// Cephes `expf.c`: `e^r = 1 + r + r²·P(r)`, P's coefficients highest degree first.
pub(crate) const EXPF_POLY: [f64; 6] = [
    1.987_569_150_0E-4,
    1.398_199_950_7E-3,
    8.333_451_907_3E-3,
    4.166_579_589_4E-2,
    1.666_666_545_9E-1,
    5.000_000_120_1E-1,
];
/// Cephes `tanhf.c`: `tanh(x) = x + x·x²·P(x²)` for |x| below [`TANHF_POLY_BELOW`];
/// coefficients highest degree first.
pub(crate) const TANHF_POLY: [f64; 5] = [
    -5.704_988_727_45E-3,
    2.063_908_879_54E-2,
    -5.373_971_555_31E-2,
    1.333_144_220_36E-1,
    -3.333_328_194_22E-1,
];
pub(crate) const TANHF_POLY_BELOW: f64 = 0.625;
/// Eigen's `generic_fast_erf_float`: `erf(x) = x·P(x²)/Q(x²)` for |x| below
/// [`ERF_F32_SATURATION`], ±1 beyond; coefficients highest degree first.
pub(crate) const ERF_F32_P: [f64; 5] = [
    2.290_506_586_135_064_6e-4,
    3.408_291_010_710_950_6e-3,
    5.095_569_506_238_086_1e-2,
    1.852_083_223_997_614_5e-1,
    1.128_379_143_519_084,
];
pub(crate) const ERF_F32_Q: [f64; 7] = [
    -1.179_160_295_436_169_7e-7,
    2.354_796_647_131_318_5e-5,
    1.017_962_527_891_488_5e-3,
    1.407_047_017_116_766_7e-2,
    1.109_850_517_828_536_2e-1,
    4.974_692_511_006_753_8e-1,
    1.0,
];
/// erfinv(1 − 2⁻²³): where single-precision erf rounds to ±1.
pub(crate) const ERF_F32_SATURATION: f64 = 3.832_506_856_900_711;

/// e^x.
pub fn exp(b: &mut FunctionBuilder, x: Value) -> Value {
    Emitter::of(b, x).exp(x)
}

/// e^x for x <= 0 or NaN (Softmax's x − max), cheaper than [`exp`]: no upper clamp,
/// and one power-of-two scaling instead of two. Results below 2^-126 (x < -87.3) are
/// flushed toward zero (exactly 0 from x <= -88, so -inf gives 0); the error there is
/// below 1.2e-38, nothing next to a softmax denominator of at least 1. Double-precision
/// lanes use [`exp`].
pub fn exp_nonpositive(b: &mut FunctionBuilder, x: Value) -> Value {
    let mut e = Emitter::of(b, x);
    if e.double {
        return e.exp(x);
    }
    e.exp_nonpositive_f32(x)
}

/// Natural logarithm.
pub fn log(b: &mut FunctionBuilder, x: Value) -> Value {
    Emitter::of(b, x).log(x)
}

/// Hyperbolic tangent.
pub fn tanh(b: &mut FunctionBuilder, x: Value) -> Value {
    Emitter::of(b, x).tanh(x)
}

/// Logistic function 1 / (1 + e^-x).
pub fn sigmoid(b: &mut FunctionBuilder, x: Value) -> Value {
    Emitter::of(b, x).sigmoid(x)
}

/// Error function.
pub fn erf(b: &mut FunctionBuilder, x: Value) -> Value {
    Emitter::of(b, x).erf(x)
}

/// GELU with the exact normal CDF: x · Φ(x) = x · 0.5 · (1 + erf(x / √2)).
///
/// For x < -√2 the factor 1 + erf(x/√2) cancels (erf is close to -1), so it is computed
/// there as erfc(-x/√2) directly; this keeps the negative tail accurate instead of
/// flushing it to a few ulps of noise.
pub fn gelu_erf(b: &mut FunctionBuilder, x: Value) -> Value {
    let mut e = Emitter::of(b, x);
    let z = e.mul_const(x, -FRAC_1_SQRT_2);
    let erf = e.erf(z);
    let one = e.f(1.0);
    let near = e.sub(one, erf);
    let tail = e.erfc_tail(z);
    let in_tail = e.fcmp_const(FloatCC::GreaterThan, z, 1.0);
    let two_phi = e.select(in_tail, tail, near);
    let half_x = e.mul_const(x, 0.5);
    e.mul(half_x, two_phi)
}

/// GELU with the tanh approximation: x · 0.5 · (1 + tanh(√(2/π) · (x + 0.044715 x³))).
///
/// Evaluated as x · sigmoid(2u), which equals the formula above (1 + tanh(u) = 2·sigmoid(2u))
/// but has no cancellation in the negative tail, where 1 + tanh(u) would lose all digits.
pub fn gelu_tanh(b: &mut FunctionBuilder, x: Value) -> Value {
    // 2·√(2/π) and 2·√(2/π)·0.044715.
    const C1: f64 = 1.595_769_121_605_730_7;
    const C3: f64 = C1 * 0.044715;
    let mut e = Emitter::of(b, x);
    let x2 = e.mul(x, x);
    let poly = e.mul_add_const(x2, C3, C1);
    let two_u = e.mul(x, poly);
    let s = e.sigmoid(two_u);
    e.mul(x, s)
}

/// softplus(x) = log(1 + e^x), computed as max(x, 0) + log1p(e^-|x|) so that it neither
/// overflows for large x nor loses the tiny result for very negative x.
pub fn softplus(b: &mut FunctionBuilder, x: Value) -> Value {
    let mut e = Emitter::of(b, x);
    let a = e.abs(x);
    let neg_a = e.neg(a);
    let t = e.exp(neg_a);
    let l = e.log1p(t);
    let zero = e.f(0.0);
    let pos = e.b.ins().fmax(x, zero);
    e.add(pos, l)
}

/// Sine.
pub fn sin(b: &mut FunctionBuilder, x: Value) -> Value {
    Emitter::of(b, x).sin_or_cos(x, false)
}

/// Cosine.
pub fn cos(b: &mut FunctionBuilder, x: Value) -> Value {
    Emitter::of(b, x).sin_or_cos(x, true)
}

/// Tangent.
pub fn tan(b: &mut FunctionBuilder, x: Value) -> Value {
    Emitter::of(b, x).tan(x)
}

/// Arc tangent.
pub fn atan(b: &mut FunctionBuilder, x: Value) -> Value {
    Emitter::of(b, x).atan(x)
}

/// Arc sine, as atan(x / √((1 - x)(1 + x))). The product form keeps full relative accuracy
/// of 1 - x² next to ±1, and x = ±1 gives atan(±inf) = ±π/2.
pub fn asin(b: &mut FunctionBuilder, x: Value) -> Value {
    let mut e = Emitter::of(b, x);
    let one = e.f(1.0);
    let one_minus = e.sub(one, x);
    let one_plus = e.add(one, x);
    let prod = e.mul(one_minus, one_plus);
    let root = e.b.ins().sqrt(prod);
    let ratio = e.div(x, root);
    e.atan(ratio)
}

/// Arc cosine, as 2·atan(√((1 - x) / (1 + x))): exact at 1 (0) and -1 (2·atan(inf) = π),
/// and relatively accurate next to 1 where the result goes to 0.
pub fn acos(b: &mut FunctionBuilder, x: Value) -> Value {
    let mut e = Emitter::of(b, x);
    let one = e.f(1.0);
    let one_minus = e.sub(one, x);
    let one_plus = e.add(one, x);
    let ratio = e.div(one_minus, one_plus);
    let root = e.b.ins().sqrt(ratio);
    let half = e.atan(root);
    e.add(half, half)
}

/// Hyperbolic sine.
pub fn sinh(b: &mut FunctionBuilder, x: Value) -> Value {
    let mut e = Emitter::of(b, x);
    let a = e.abs(x);
    let (half_exp, quarter_over) = e.half_exp_pair(a);
    let big = e.sub(half_exp, quarter_over);
    let sign = e.sign_bit(x);
    let big = e.bxor(big, sign);
    // Near 0, e^a/2 - e^-a/2 cancels; use the odd expansion x + x³·R(x²) on |x| < 1
    // (Cephes sinhf.c polynomial / sinh.c rational).
    let z = e.mul(x, x);
    let r = if e.double {
        e.rational(
            z,
            &[
                -7.894_744_439_635_370_156_05E-1,
                -1.637_258_575_259_838_287_27E2,
                -1.156_144_357_650_052_160_44E4,
                -3.517_549_648_081_513_948_00E5,
            ],
            &[
                1.0,
                -2.777_110_814_206_027_944_33E2,
                3.615_782_798_344_319_893_73E4,
                -2.110_529_788_848_908_403_99E6,
            ],
        )
    } else {
        e.horner(
            z,
            &[
                2.037_219_129_45E-4,
                8.330_283_762_39E-3,
                1.666_671_602_11E-1,
            ],
        )
    };
    let small = e.odd_tail(x, z, r);
    let is_small = e.fcmp_const(FloatCC::LessThan, a, 1.0);
    e.select(is_small, small, big)
}

/// Hyperbolic cosine.
pub fn cosh(b: &mut FunctionBuilder, x: Value) -> Value {
    let mut e = Emitter::of(b, x);
    let a = e.abs(x);
    let (half_exp, quarter_over) = e.half_exp_pair(a);
    e.add(half_exp, quarter_over)
}

/// Inverse hyperbolic sine: sign(x) · log1p(|x| + x² / (1 + √(1 + x²))), which is the usual
/// log(|x| + √(x² + 1)) rearranged to stay accurate near 0; beyond 2^12 (single) or 2^28
/// (double) the 1/x² terms vanish and it is log(|x|) + ln 2, avoiding overflow of x².
pub fn asinh(b: &mut FunctionBuilder, x: Value) -> Value {
    let mut e = Emitter::of(b, x);
    let a = e.abs(x);
    let a2 = e.mul(a, a);
    let one = e.f(1.0);
    let a2p1 = e.add(a2, one);
    let root = e.b.ins().sqrt(a2p1);
    let den = e.add(root, one);
    let frac = e.div(a2, den);
    let arg = e.add(a, frac);
    let small = e.log1p(arg);
    let big = e.log_large(a);
    let limit = e.large_arg_limit();
    let is_big = e.fcmp_const(FloatCC::GreaterThan, a, limit);
    let r = e.select(is_big, big, small);
    let sign = e.sign_bit(x);
    e.bxor(r, sign)
}

/// Inverse hyperbolic cosine: log1p(t + √(t(t + 2))) with t = x - 1 (exact near 1, where
/// the result goes to 0); log(x) + ln 2 for large x; NaN below 1.
pub fn acosh(b: &mut FunctionBuilder, x: Value) -> Value {
    let mut e = Emitter::of(b, x);
    let t = e.add_const(x, -1.0);
    let tp2 = e.add_const(t, 2.0);
    let prod = e.mul(t, tp2);
    let root = e.b.ins().sqrt(prod);
    let arg = e.add(t, root);
    let small = e.log1p(arg);
    let big = e.log_large(x);
    let limit = e.large_arg_limit();
    let is_big = e.fcmp_const(FloatCC::GreaterThan, x, limit);
    let r = e.select(is_big, big, small);
    let below_one = e.fcmp_const(FloatCC::LessThan, x, 1.0);
    let nan = e.f(f64::NAN);
    e.select(below_one, nan, r)
}

/// Inverse hyperbolic tangent: sign(x) · ½·log1p(2|x| / (1 - |x|)); ±1 gives ±inf and
/// |x| > 1 gives NaN (log of a number below zero).
pub fn atanh(b: &mut FunctionBuilder, x: Value) -> Value {
    let mut e = Emitter::of(b, x);
    let a = e.abs(x);
    let one = e.f(1.0);
    let den = e.sub(one, a);
    let two_a = e.add(a, a);
    let arg = e.div(two_a, den);
    let l = e.log1p(arg);
    let r = e.mul_const(l, 0.5);
    let sign = e.sign_bit(x);
    e.bxor(r, sign)
}

/// x^y with the C99/numpy special cases: x^0 = 1 and 1^y = 1 even for NaN, (-1)^±inf = 1,
/// a negative finite x with a non-integer y gives NaN, a negative x (including -0 and -inf)
/// with an odd integer y gives a negative result, and zeros and infinities give the
/// signed zeros and infinities of the table in C99 F.9.4.4.
///
/// The result is e^(y·log|x|). The rounding error of y·log|x| is multiplied by up to ~89
/// (single) when it is exponentiated, so single precision lanes are evaluated in double
/// precision and rounded at the end; double precision keeps ~1e-13.
pub fn pow(b: &mut FunctionBuilder, x: Value, y: Value) -> Value {
    let ty = b.func.dfg.value_type(x);
    assert_eq!(
        ty,
        b.func.dfg.value_type(y),
        "pow operands must have the same type"
    );
    match ty {
        F32 => {
            let xd = b.ins().fpromote(F64, x);
            let yd = b.ins().fpromote(F64, y);
            let r = Emitter::new(b, F64).pow(xd, yd);
            b.ins().fdemote(F32, r)
        }
        F32X4 => {
            // Widen each half of the vector to F64X2, compute, narrow and re-join.
            let x_hi = swap_halves(b, x);
            let y_hi = swap_halves(b, y);
            let lo = pow_low_lanes_f32x4(b, x, y);
            let hi = pow_low_lanes_f32x4(b, x_hi, y_hi);
            // Lanes 0-1 of `lo` followed by lanes 0-1 of `hi`.
            shuffle_f32x4(
                b,
                lo,
                hi,
                core::array::from_fn(|i| (i % 8 + i / 8 * 16) as u8),
            )
        }
        _ => Emitter::new(b, ty).pow(x, y),
    }
}

/// Round to the nearest integer, ties to even (ONNX `Round`).
pub fn round_half_even(b: &mut FunctionBuilder, x: Value) -> Value {
    lane_info(b.func.dfg.value_type(x));
    b.ins().nearest(x)
}

/// pow of lanes 0 and 1 of two `F32X4` values, computed as `F64X2`; lanes 2 and 3 of the
/// result are zero.
fn pow_low_lanes_f32x4(b: &mut FunctionBuilder, x: Value, y: Value) -> Value {
    let xd = b.ins().fvpromote_low(x);
    let yd = b.ins().fvpromote_low(y);
    let r = Emitter::new(b, F64X2).pow(xd, yd);
    b.ins().fvdemote(r)
}

/// The two 64-bit halves of a 128-bit vector swapped.
fn swap_halves(b: &mut FunctionBuilder, v: Value) -> Value {
    shuffle_f32x4(b, v, v, core::array::from_fn(|i| ((i + 8) % 16) as u8))
}

/// Lanes `idx` of two `F32X4` values side by side (0–3 from `x`, 4–7 from `y`).
pub fn pick_lanes(b: &mut FunctionBuilder, x: Value, y: Value, idx: [u8; 4]) -> Value {
    shuffle_f32x4(
        b,
        x,
        y,
        core::array::from_fn(|i| idx[i / 4] * 4 + (i % 4) as u8),
    )
}

/// Byte shuffle of two `F32X4` values (Cranelift's `shuffle` works on `I8X16`).
pub fn shuffle_f32x4(b: &mut FunctionBuilder, x: Value, y: Value, bytes: [u8; 16]) -> Value {
    let le = MemFlagsData::new().with_endianness(Endianness::Little);
    let xb = b.ins().bitcast(I8X16, le, x);
    let yb = b.ins().bitcast(I8X16, le, y);
    let mask = b.func.dfg.immediates.push(ConstantData::from(&bytes[..]));
    let shuffled = b.ins().shuffle(xb, yb, mask);
    b.ins().bitcast(F32X4, le, shuffled)
}

/// The integer type with the same lanes as the float type `ty`, and whether its lanes are
/// `f64`. Panics for types the emitters do not support.
fn lane_info(ty: Type) -> (Type, bool) {
    match ty {
        F32 => (I32, false),
        F32X4 => (I32X4, false),
        F64 => (I64, true),
        F64X2 => (I64X2, true),
        _ => panic!("math emitters take F32, F32X4, F64 or F64X2 values, not {ty}"),
    }
}

/// A lane mask from `fcmp`/`icmp`: `I8` 0/1 for scalars, all-ones/all-zeros integer lanes
/// for vectors. Never negated with `bnot` (that would break the scalar 0/1 form); the
/// complementary comparison is emitted instead.
#[derive(Clone, Copy)]
struct Mask(Value);

/// Emits lane-type-generic arithmetic for one float type.
struct Emitter<'a, 'f> {
    b: &'a mut FunctionBuilder<'f>,
    /// The float type (`F32`, `F32X4`, `F64` or `F64X2`).
    ty: Type,
    /// The integer type of the same lane width and count.
    int_ty: Type,
    /// Whether the lanes are `f64`.
    double: bool,
}

impl<'a, 'f> Emitter<'a, 'f> {
    fn new(b: &'a mut FunctionBuilder<'f>, ty: Type) -> Self {
        let (int_ty, double) = lane_info(ty);
        Emitter {
            b,
            ty,
            int_ty,
            double,
        }
    }

    fn of(b: &'a mut FunctionBuilder<'f>, x: Value) -> Self {
        let ty = b.func.dfg.value_type(x);
        Self::new(b, ty)
    }

    /// Explicit mantissa bits of the lane type.
    fn mantissa_bits(&self) -> i64 {
        if self.double {
            52
        } else {
            23
        }
    }

    /// Exponent bias of the lane type.
    fn exponent_bias(&self) -> i64 {
        if self.double {
            1023
        } else {
            127
        }
    }

    // ---- constants -------------------------------------------------------------------

    /// A 128-bit vector constant repeating `lane`.
    fn splat_const(&mut self, ty: Type, lane: &[u8]) -> Value {
        let bytes: Vec<u8> = lane.iter().copied().cycle().take(16).collect();
        let c = self.b.func.dfg.constants.insert(ConstantData::from(bytes));
        self.b.ins().vconst(ty, c)
    }

    /// Float constant `v` (rounded to f32 for single precision lanes) in every lane.
    fn f(&mut self, v: f64) -> Value {
        match self.ty {
            F32 => self.b.ins().f32const(v as f32),
            F64 => self.b.ins().f64const(v),
            F32X4 => self.splat_const(F32X4, &(v as f32).to_le_bytes()),
            _ => self.splat_const(F64X2, &v.to_le_bytes()),
        }
    }

    /// Integer constant `v` (truncated to the lane width) in every lane.
    fn i(&mut self, v: i64) -> Value {
        match self.int_ty {
            I32 => self.b.ins().iconst(I32, i64::from(v as u32)),
            I64 => self.b.ins().iconst(I64, v),
            I32X4 => self.splat_const(I32X4, &(v as i32).to_le_bytes()),
            _ => self.splat_const(I64X2, &v.to_le_bytes()),
        }
    }

    // ---- float arithmetic ------------------------------------------------------------

    fn add(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fadd(a, b)
    }

    fn sub(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fsub(a, b)
    }

    fn mul(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fmul(a, b)
    }

    fn div(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fdiv(a, b)
    }

    fn neg(&mut self, a: Value) -> Value {
        self.b.ins().fneg(a)
    }

    fn abs(&mut self, a: Value) -> Value {
        self.b.ins().fabs(a)
    }

    fn add_const(&mut self, a: Value, c: f64) -> Value {
        let c = self.f(c);
        self.add(a, c)
    }

    fn mul_const(&mut self, a: Value, c: f64) -> Value {
        let c = self.f(c);
        self.mul(a, c)
    }

    /// a·m + c with two roundings (see the module docs on `fma`).
    fn mul_add_const(&mut self, a: Value, m: f64, c: f64) -> Value {
        let p = self.mul_const(a, m);
        self.add_const(p, c)
    }

    /// Horner evaluation of the polynomial with `coeffs` (highest degree first, as in
    /// Cephes' `polevl`) at `x`.
    fn horner(&mut self, x: Value, coeffs: &[f64]) -> Value {
        let mut acc = self.f(coeffs[0]);
        for &c in &coeffs[1..] {
            let p = self.mul(acc, x);
            acc = self.add_const(p, c);
        }
        acc
    }

    /// P(x) / Q(x), coefficients highest degree first.
    fn rational(&mut self, x: Value, p: &[f64], q: &[f64]) -> Value {
        let p = self.horner(x, p);
        let q = self.horner(x, q);
        self.div(p, q)
    }

    /// x + x·z·r: the usual form of an odd function's expansion, r = R(z) with z = x².
    fn odd_tail(&mut self, x: Value, z: Value, r: Value) -> Value {
        let xz = self.mul(x, z);
        let t = self.mul(xz, r);
        self.add(x, t)
    }

    // ---- bits, masks and selection ---------------------------------------------------

    fn bits_of(&mut self, x: Value) -> Value {
        self.b.ins().bitcast(self.int_ty, MemFlagsData::new(), x)
    }

    fn float_from_bits(&mut self, i: Value) -> Value {
        self.b.ins().bitcast(self.ty, MemFlagsData::new(), i)
    }

    /// Only the sign bit of `x` (+0.0 or -0.0 for numbers), for `bxor`/`bor` sign transfer.
    fn sign_bit(&mut self, x: Value) -> Value {
        let m = self.f(-0.0);
        self.b.ins().band(x, m)
    }

    fn bxor(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().bxor(a, b)
    }

    fn fcmp(&mut self, cc: FloatCC, a: Value, b: Value) -> Mask {
        Mask(self.b.ins().fcmp(cc, a, b))
    }

    fn fcmp_const(&mut self, cc: FloatCC, a: Value, c: f64) -> Mask {
        let c = self.f(c);
        self.fcmp(cc, a, c)
    }

    /// `(i & bit) != 0` on integer lanes.
    fn int_bit_set(&mut self, i: Value, bit: i64) -> Mask {
        let m = self.i(bit);
        let masked = self.b.ins().band(i, m);
        let zero = self.i(0);
        Mask(self.b.ins().icmp(IntCC::NotEqual, masked, zero))
    }

    fn and(&mut self, a: Mask, b: Mask) -> Mask {
        Mask(self.b.ins().band(a.0, b.0))
    }

    fn or(&mut self, a: Mask, b: Mask) -> Mask {
        Mask(self.b.ins().bor(a.0, b.0))
    }

    /// Lane-wise `mask ? yes : no`. Vectors need `bitselect` (Cranelift's `select` takes one
    /// scalar condition for the whole vector); its mask must have the float type.
    fn select(&mut self, mask: Mask, yes: Value, no: Value) -> Value {
        if self.ty.is_vector() {
            let m = self.float_from_bits(mask.0);
            self.b.ins().bitselect(m, yes, no)
        } else {
            self.b.ins().select(mask.0, yes, no)
        }
    }

    fn select_const(&mut self, mask: Mask, yes: f64, no: Value) -> Value {
        let yes = self.f(yes);
        self.select(mask, yes, no)
    }

    // ---- integer helpers for range reduction -----------------------------------------

    /// Rounds x to the nearest integer (ties to even) for |x| < 2^(m-1), returning it both
    /// as a float and as a lane integer. Adding 1.5·2^m pushes the fraction bits out of the
    /// mantissa, so the float sum holds round(x) in its low mantissa bits (biased by 2^(m-1)).
    fn round_to_int(&mut self, x: Value) -> (Value, Value) {
        let m = self.mantissa_bits();
        let magic_value = 1.5 * 2f64.powi(m as i32);
        let magic = self.f(magic_value);
        let shifted = self.add(x, magic);
        let rounded = self.sub(shifted, magic);
        let magic_bits = if self.double {
            magic_value.to_bits() as i64
        } else {
            i64::from((magic_value as f32).to_bits())
        };
        let bits = self.bits_of(shifted);
        let c = self.i(magic_bits);
        let int = self.b.ins().isub(bits, c);
        (rounded, int)
    }

    /// The float value of integer lanes holding 0 <= i < 2^m: OR-ing i into the mantissa of
    /// 2^m gives 2^m + i exactly.
    fn small_uint_to_float(&mut self, i: Value) -> Value {
        let m = self.mantissa_bits();
        let two_m = 2f64.powi(m as i32);
        let two_m_bits = self.i((self.exponent_bias() + m) << m);
        let merged = self.b.ins().bor(i, two_m_bits);
        let f = self.float_from_bits(merged);
        self.add_const(f, -two_m)
    }

    /// 2^n for integer lanes with a normal result (-bias < n <= bias).
    fn pow2(&mut self, n: Value) -> Value {
        let bias = self.i(self.exponent_bias());
        let biased = self.b.ins().iadd(n, bias);
        let m = self.mantissa_bits();
        let bits = self.b.ins().ishl_imm_u(biased, m);
        self.float_from_bits(bits)
    }

    /// v · 2^n for |n| up to twice the exponent bias. Scaling in two steps by 2^⌊n/2⌋ and
    /// 2^⌈n/2⌉ keeps both factors normal, so results in the denormal range are rounded once
    /// and correctly, and overflow produces +inf.
    fn scale_by_pow2(&mut self, v: Value, n: Value) -> Value {
        // ⌊n/2⌋ via a logical shift of n + offset (offset even and > |n|): no arithmetic
        // 64x2 shift needed, which x86-64 lacks before AVX-512.
        let offset = 4 * self.exponent_bias() + 4;
        let off = self.i(offset);
        let shifted = self.b.ins().iadd(n, off);
        let halved = self.b.ins().ushr_imm_u(shifted, 1);
        let half_off = self.i(offset / 2);
        let n1 = self.b.ins().isub(halved, half_off);
        let n2 = self.b.ins().isub(n, n1);
        let s1 = self.pow2(n1);
        let s2 = self.pow2(n2);
        let v = self.mul(v, s1);
        self.mul(v, s2)
    }

    // ---- exponential and logarithm ---------------------------------------------------

    /// e^x = 2^n · e^r with n = round(x·log2 e) and |r| <= ln2/2, r computed as
    /// x - n·C1 - n·C2 where C1 has few enough bits that n·C1 is exact (Cody–Waite).
    fn exp(&mut self, x: Value) -> Value {
        // Clamp to where the result is 0 or inf anyway, so that n stays in the range
        // `scale_by_pow2` handles; fmax/fmin propagate NaN.
        let (lo, hi) = if self.double {
            (-746.0, 710.0)
        } else {
            (-104.0, 89.0)
        };
        let lo = self.f(lo);
        let hi = self.f(hi);
        let x = self.b.ins().fmax(x, lo);
        let x = self.b.ins().fmin(x, hi);
        let t = self.mul_const(x, LOG2_E);
        let (n, n_int) = self.round_to_int(t);
        let e_r = if self.double {
            // Cephes exp.c: C1 + C2 = ln 2, then the Padé form
            // e^r = 1 + 2r·P(r²) / (Q(r²) - r·P(r²)).
            let r = self.cody_waite(
                x,
                n,
                &[6.931_457_519_531_25E-1, 1.428_606_820_309_417_232_12E-6],
            );
            let r2 = self.mul(r, r);
            let p = self.horner(
                r2,
                &[
                    1.261_771_930_748_105_908_78E-4,
                    3.029_944_077_074_419_613_00E-2,
                    9.999_999_999_999_999_999_10E-1,
                ],
            );
            let rp = self.mul(r, p);
            let q = self.horner(
                r2,
                &[
                    3.001_985_051_386_644_550_42E-6,
                    2.524_483_403_496_841_041_92E-3,
                    2.272_655_482_081_550_287_66E-1,
                    2.000_000_000_000_000_000_09E0,
                ],
            );
            let den = self.sub(q, rp);
            let frac = self.div(rp, den);
            self.mul_add_const(frac, 2.0, 1.0)
        } else {
            self.exp_reduced_f32(x, n)
        };
        self.scale_by_pow2(e_r, n_int)
    }

    /// `e^r` for `r = x − n·ln 2` (Cephes expf.c: `1 + r + r²·P(r)`), single precision.
    fn exp_reduced_f32(&mut self, x: Value, n: Value) -> Value {
        let r = self.cody_waite(x, n, &EXPF_LN2_PARTS);
        let r2 = self.mul(r, r);
        let p = self.horner(r, &EXPF_POLY);
        let t = self.mul(p, r2);
        let t = self.add(t, r);
        self.add_const(t, 1.0)
    }

    /// See [`exp_nonpositive`]: the single-precision `exp` with x clamped to [-88, ∞)
    /// only, so n = round(x·log2 e) is in [-127, 0] and 2^n one exponent field (zero,
    /// i.e. the float 0, for n = -127).
    fn exp_nonpositive_f32(&mut self, x: Value) -> Value {
        let lo = self.f(-88.0);
        let x = self.b.ins().fmax(x, lo);
        let t = self.mul_const(x, LOG2_E);
        let (n, n_int) = self.round_to_int(t);
        let e_r = self.exp_reduced_f32(x, n);
        let scale = self.pow2(n_int);
        self.mul(e_r, scale)
    }

    /// x - n·(c[0] + c[1] + ...) with the constant split so that the leading products are
    /// exact.
    fn cody_waite(&mut self, x: Value, n: Value, parts: &[f64]) -> Value {
        let mut r = x;
        for &c in parts {
            let p = self.mul_const(n, c);
            r = self.sub(r, p);
        }
        r
    }

    /// Natural logarithm: x = 2^k · m with m in [√½, √2), then log(x) = k·ln2 + log1p(f)
    /// with f = m - 1.
    fn log(&mut self, x: Value) -> Value {
        let m = self.mantissa_bits();
        // Denormals are scaled into the normal range first (and k corrected).
        let min_normal = 2f64.powi(1 - self.exponent_bias() as i32);
        let is_denormal = self.fcmp_const(FloatCC::LessThan, x, min_normal);
        let scaled = self.mul_const(x, 2f64.powi(m as i32));
        let xs = self.select(is_denormal, scaled, x);
        let zero = self.f(0.0);
        let k_fix = self.select_const(is_denormal, m as f64, zero);

        // Adding (1.0 - √½) in the bit domain moves the exponent boundary from 1.0 to √½, so
        // the exponent field gives k and the mantissa, re-biased by √½, gives m directly
        // (the branch-free reduction of musl/fdlibm).
        let (one_bits, sqrt_half_bits) = if self.double {
            (1f64.to_bits() as i64, 0x3FE6_A09E_667F_3BCD_i64)
        } else {
            (i64::from(1f32.to_bits()), 0x3F35_04F3_i64)
        };
        let bits = self.bits_of(xs);
        let off = self.i(one_bits - sqrt_half_bits);
        let ix = self.b.ins().iadd(bits, off);
        let exp_field = self.b.ins().ushr_imm_u(ix, m);
        let k_biased = self.small_uint_to_float(exp_field);
        let k = self.add_const(k_biased, -(self.exponent_bias() as f64));
        let k = self.sub(k, k_fix);
        let mant_mask = self.i((1 << m) - 1);
        let mant = self.b.ins().band(ix, mant_mask);
        let sqrt_half = self.i(sqrt_half_bits);
        let mant = self.b.ins().iadd(mant, sqrt_half);
        let mant = self.float_from_bits(mant);
        let f = self.add_const(mant, -1.0);

        let r = if self.double {
            // fdlibm e_log.c: with s = f/(2+f), log1p(f) = 2s + 2s³/3 + ... = f - f²/2 +
            // s·(f²/2 + R(s²)); ln2 split in hi (exact k·hi) and lo parts.
            let two_f = self.add_const(f, 2.0);
            let s = self.div(f, two_f);
            let z = self.mul(s, s);
            let w = self.mul(z, z);
            let t1 = self.horner(
                w,
                &[
                    1.531_383_769_920_937_332e-01,
                    2.222_219_843_214_978_396e-01,
                    3.999_999_999_940_941_908e-01,
                ],
            );
            let t1 = self.mul(t1, w);
            let t2 = self.horner(
                w,
                &[
                    1.479_819_860_511_658_591e-01,
                    1.818_357_216_161_805_012e-01,
                    2.857_142_874_366_239_149e-01,
                    6.666_666_666_666_735_130e-01,
                ],
            );
            let t2 = self.mul(t2, z);
            let big_r = self.add(t1, t2);
            let f2 = self.mul(f, f);
            let hfsq = self.mul_const(f2, 0.5);
            // k·ln2_hi - ((hfsq - (s·(hfsq + R) + k·ln2_lo)) - f)
            let sum = self.add(hfsq, big_r);
            let s_sum = self.mul(s, sum);
            let k_lo = self.mul_const(k, 1.908_214_929_270_587_700_02e-10);
            let inner = self.add(s_sum, k_lo);
            let inner = self.sub(hfsq, inner);
            let inner = self.sub(inner, f);
            let k_hi = self.mul_const(k, 6.931_471_803_691_238_164_90e-01);
            self.sub(k_hi, inner)
        } else {
            // Cephes logf.c: log1p(f) = f - f²/2 + f³·P(f), ln2 = 0.693359375 - 2.12194440e-4.
            let z = self.mul(f, f);
            let p = self.horner(
                f,
                &[
                    7.037_683_629_2E-2,
                    -1.151_461_031_0E-1,
                    1.167_699_874_0E-1,
                    -1.242_014_084_6E-1,
                    1.424_932_278_7E-1,
                    -1.666_805_766_5E-1,
                    2.000_071_476_5E-1,
                    -2.499_999_399_3E-1,
                    3.333_333_117_4E-1,
                ],
            );
            let fz = self.mul(f, z);
            let y = self.mul(fz, p);
            let k_lo = self.mul_const(k, -2.121_944_40E-4);
            let y = self.add(y, k_lo);
            let half_z = self.mul_const(z, 0.5);
            let y = self.sub(y, half_z);
            let r = self.add(f, y);
            let k_hi = self.mul_const(k, 0.693_359_375);
            self.add(r, k_hi)
        };

        let is_inf = self.fcmp_const(FloatCC::Equal, x, f64::INFINITY);
        let r = self.select(is_inf, x, r);
        let is_zero = self.fcmp_const(FloatCC::Equal, x, 0.0);
        let r = self.select_const(is_zero, f64::NEG_INFINITY, r);
        // Negative numbers and NaN (aarch64 has no vector "unordered or less than").
        let is_negative = self.fcmp_const(FloatCC::LessThan, x, 0.0);
        let is_nan = self.fcmp(FloatCC::Unordered, x, x);
        let is_invalid = self.or(is_negative, is_nan);
        self.select_const(is_invalid, f64::NAN, r)
    }

    /// log(1 + t) for t >= 0 (and +inf). u = 1 + t is rounded; the rounding error
    /// t - (u - 1) is recovered exactly and added back to first order, (t - (u - 1)) / u,
    /// which keeps full relative accuracy for tiny t (where log(u) alone would be 0).
    fn log1p(&mut self, t: Value) -> Value {
        let u = self.add_const(t, 1.0);
        let u_minus_1 = self.add_const(u, -1.0);
        let err = self.sub(t, u_minus_1);
        let correction = self.div(err, u);
        let l = self.log(u);
        let r = self.add(l, correction);
        // inf - inf in the correction would turn log1p(inf) into NaN.
        let is_inf = self.fcmp_const(FloatCC::Equal, u, f64::INFINITY);
        self.select(is_inf, u, r)
    }

    /// log(x) + ln 2 = log(2x) without overflowing 2x; the large-argument form of
    /// asinh and acosh.
    fn log_large(&mut self, x: Value) -> Value {
        let l = self.log(x);
        self.add_const(l, LN_2)
    }

    /// Argument size beyond which 1/x² is below the rounding error, so asinh(x) and
    /// acosh(x) equal log(2x).
    fn large_arg_limit(&self) -> f64 {
        if self.double {
            2f64.powi(28)
        } else {
            2f64.powi(12)
        }
    }

    /// (e^a / 2, e^-a / 2) for a >= 0, as (w/2)·w and (1/4) / that with w = e^(a/2), so that
    /// e^a/2 does not overflow before sinh/cosh do (for a in (88.7, 89.4] in single precision).
    fn half_exp_pair(&mut self, a: Value) -> (Value, Value) {
        let half_a = self.mul_const(a, 0.5);
        let w = self.exp(half_a);
        let half_w = self.mul_const(w, 0.5);
        let h = self.mul(half_w, w);
        let quarter = self.f(0.25);
        let inv = self.div(quarter, h);
        (h, inv)
    }

    // ---- tanh, sigmoid, erf ----------------------------------------------------------

    /// tanh(x): x + x³·R(x²) for |x| < 0.625 (Cephes tanhf.c polynomial / tanh.c rational),
    /// otherwise sign(x)·(1 - 2 / (e^(2|x|) + 1)), which tends to exactly ±1 when e^(2|x|)
    /// overflows.
    fn tanh(&mut self, x: Value) -> Value {
        // Evaluated on |x| with the sign applied last, so that tanh(-0) = -0.
        let a = self.abs(x);
        let two_a = self.add(a, a);
        let e = self.exp(two_a);
        let ep1 = self.add_const(e, 1.0);
        let two = self.f(2.0);
        let frac = self.div(two, ep1);
        let one = self.f(1.0);
        let big = self.sub(one, frac);

        let z = self.mul(a, a);
        let r = if self.double {
            self.rational(
                z,
                &[
                    -9.643_991_794_250_522_386_28E-1,
                    -9.928_772_310_019_185_865_64E1,
                    -1.614_687_684_417_084_479_52E3,
                ],
                &[
                    1.0,
                    1.128_116_784_916_329_314_02E2,
                    2.235_488_390_601_004_485_83E3,
                    4.844_063_053_251_254_860_48E3,
                ],
            )
        } else {
            self.horner(z, &TANHF_POLY)
        };
        let small = self.odd_tail(a, z, r);
        let is_small = self.fcmp_const(FloatCC::LessThan, a, TANHF_POLY_BELOW);
        let v = self.select(is_small, small, big);
        let sign = self.sign_bit(x);
        self.bxor(v, sign)
    }

    /// sigmoid(x) with e = e^-|x| (never overflows): 1/(1+e) for x >= 0 and e/(1+e) for
    /// x < 0, which keeps relative accuracy deep into the negative tail.
    fn sigmoid(&mut self, x: Value) -> Value {
        let a = self.abs(x);
        let neg_a = self.neg(a);
        let e = self.exp(neg_a);
        let one = self.f(1.0);
        let den = self.add(one, e);
        let s = self.div(one, den);
        let es = self.mul(e, s);
        let non_negative = self.fcmp_const(FloatCC::GreaterThanOrEqual, x, 0.0);
        self.select(non_negative, s, es)
    }

    fn erf(&mut self, x: Value) -> Value {
        if self.double {
            self.erf_double(x)
        } else {
            self.erf_single(x)
        }
    }

    /// Eigen's `generic_fast_erf_float` (also XLA's ErfImpl32): erf(x) = x·P(x²)/Q(x²), a
    /// 9/12-degree rational fitted on [-c, c] with c = erfinv(1 - 2^-23) ≈ 3.8325; outside it
    /// erf rounds to ±1.
    fn erf_single(&mut self, x: Value) -> Value {
        let x2 = self.mul(x, x);
        let p = self.horner(x2, &ERF_F32_P);
        let p = self.mul(x, p);
        let q = self.horner(x2, &ERF_F32_Q);
        let r = self.div(p, q);
        let a = self.abs(x);
        let saturated = self.fcmp_const(FloatCC::GreaterThanOrEqual, a, ERF_F32_SATURATION);
        let one = self.f(1.0);
        let sign = self.sign_bit(x);
        let unit = self.b.ins().bor(one, sign);
        self.select(saturated, unit, r)
    }

    /// Cephes ndtr.c: erf(x) = x·T(x²)/U(x²) for |x| < 1, otherwise 1 - erfc(|x|).
    fn erf_double(&mut self, x: Value) -> Value {
        let z = self.mul(x, x);
        let r = self.rational(
            z,
            &[
                9.604_973_739_870_516_387_49E0,
                9.002_601_972_038_426_892_17E1,
                2.232_005_345_946_843_192_26E3,
                7.003_325_141_128_050_754_73E3,
                5.559_230_130_103_949_627_68E4,
            ],
            &[
                1.0,
                3.356_171_416_475_030_996_47E1,
                5.213_579_497_801_526_797_95E2,
                4.594_323_829_709_801_279_87E3,
                2.262_900_006_138_909_342_46E4,
                4.926_739_426_086_359_210_86E4,
            ],
        );
        let small = self.mul(x, r);
        let a = self.abs(x);
        let erfc = self.erfc_tail(a);
        let one = self.f(1.0);
        let big = self.sub(one, erfc);
        let sign = self.sign_bit(x);
        let big = self.bxor(big, sign);
        let is_small = self.fcmp_const(FloatCC::LessThan, a, 1.0);
        self.select(is_small, small, big)
    }

    /// erfc(z) for z >= 1 (including +inf), as e^(-z²)·R(z): Cephes ndtr.c's P/Q in z for
    /// double precision (its R/S branch for z >= 8 is not needed: what matters that far out
    /// is the absolute error, and z is clamped to 28, where e^(-z²) is exactly 0 and the
    /// rational cannot become inf/inf), erfcf's polynomials in 1/z² for single precision
    /// (P for z < 2, R above).
    fn erfc_tail(&mut self, z: Value) -> Value {
        if self.double {
            let limit = self.f(28.0);
            let z = self.b.ins().fmin(z, limit);
            let z2 = self.mul(z, z);
            let neg_z2 = self.neg(z2);
            let gauss = self.exp(neg_z2);
            let r = self.rational(
                z,
                &[
                    2.461_969_814_735_305_125_24E-10,
                    5.641_895_648_310_688_219_77E-1,
                    7.463_210_564_422_699_126_87E0,
                    4.863_719_709_856_813_666_14E1,
                    1.965_208_329_560_770_982_42E2,
                    5.264_451_949_954_773_586_31E2,
                    9.345_285_271_719_576_075_40E2,
                    1.027_551_886_895_157_102_72E3,
                    5.575_353_353_693_993_275_26E2,
                ],
                &[
                    1.0,
                    1.322_819_511_547_449_925_08E1,
                    8.670_721_408_859_897_423_29E1,
                    3.549_377_788_878_198_910_62E2,
                    9.757_085_017_432_054_897_53E2,
                    1.823_909_166_879_097_362_89E3,
                    2.246_337_608_187_109_817_92E3,
                    1.656_663_091_941_613_501_82E3,
                    5.575_353_408_177_276_755_46E2,
                ],
            );
            self.mul(gauss, r)
        } else {
            // e^(-z²)·(1/z)·P(1/z²); at z = inf both factors are 0.
            let z2 = self.mul(z, z);
            let neg_z2 = self.neg(z2);
            let gauss = self.exp(neg_z2);
            let one = self.f(1.0);
            let q = self.div(one, z);
            let y = self.mul(q, q);
            let p = self.horner(
                y,
                &[
                    2.326_819_970_068_386E-2,
                    -1.387_039_388_740_657E-1,
                    3.687_424_674_597_105E-1,
                    -5.824_733_027_278_666E-1,
                    6.210_004_621_745_983E-1,
                    -4.944_515_323_274_145E-1,
                    3.404_879_937_665_872E-1,
                    -2.741_127_028_184_656E-1,
                    5.638_259_427_386_472E-1,
                ],
            );
            let r = self.horner(
                y,
                &[
                    -1.047_766_399_936_249E1,
                    1.297_719_955_372_516E1,
                    -7.495_518_717_768_503E0,
                    2.921_019_019_210_786E0,
                    -1.015_265_279_202_700E0,
                    4.218_463_358_204_948E-1,
                    -2.820_767_439_740_514E-1,
                    5.641_895_067_754_075E-1,
                ],
            );
            let below_2 = self.fcmp_const(FloatCC::LessThan, z, 2.0);
            let poly = self.select(below_2, p, r);
            let gq = self.mul(gauss, q);
            self.mul(gq, poly)
        }
    }

    // ---- trigonometry ----------------------------------------------------------------

    /// Largest |x| for which sin/cos/tan are evaluated; beyond it the Cody–Waite reduction
    /// has lost all accuracy (as in Cephes, which returns 0 past its `lossth`), so the
    /// result is 0 there (NaN for ±inf).
    fn trig_limit(&self) -> f64 {
        if self.double {
            // Cephes sin.c lossth.
            1.073_741_824e9
        } else {
            // The reduction's products stay exact for q < 2^16.
            65536.0 * FRAC_PI_2
        }
    }

    /// For a >= 0: (sin r, cos r, q) with a = q·π/2 + r, |r| <= π/4, q an integer lane.
    /// π/2 is split in three parts so that q·part1 and q·part2 are exact and the
    /// subtractions cancel exactly; the polynomials are Cephes sinf.c (single) and sin.c
    /// (double).
    fn sin_cos_reduced(&mut self, a: Value) -> (Value, Value, Value) {
        let t = self.mul_const(a, FRAC_2_PI);
        let (q, q_int) = self.round_to_int(t);
        let (r, z, sin_poly, cos_poly) = if self.double {
            let r = self.cody_waite(
                a,
                q,
                &[
                    2.0 * 7.853_981_256_484_985_351_56E-1,
                    2.0 * 3.774_894_707_930_798_176_68E-8,
                    2.0 * 2.695_151_429_079_059_526_45E-15,
                ],
            );
            let z = self.mul(r, r);
            let s = self.horner(
                z,
                &[
                    1.589_623_015_765_465_680_60E-10,
                    -2.505_074_776_285_780_728_66E-8,
                    2.755_731_362_138_572_452_13E-6,
                    -1.984_126_982_958_954_359_96E-4,
                    8.333_333_333_322_118_588_78E-3,
                    -1.666_666_666_666_663_072_95E-1,
                ],
            );
            let c = self.horner(
                z,
                &[
                    -1.135_853_652_138_768_173_00E-11,
                    2.087_570_084_197_473_167_78E-9,
                    -2.755_731_417_929_673_881_12E-7,
                    2.480_158_728_885_170_453_48E-5,
                    -1.388_888_888_887_305_641_16E-3,
                    4.166_666_666_666_659_292_18E-2,
                ],
            );
            (r, z, s, c)
        } else {
            // π/2 = 201·2^-7 + 254·2^-19 + C3: two 8-bit leading parts keep q·part exact
            // for q < 2^16 (Cephes' split is exact only to q < 2^12).
            let r = self.cody_waite(
                a,
                q,
                &[
                    1.570_312_5,
                    4.844_665_527_343_75e-4,
                    -6.397_578_431_460_715e-7,
                ],
            );
            let z = self.mul(r, r);
            let s = self.horner(
                z,
                &[-1.951_529_589_1E-4, 8.332_160_873_6E-3, -1.666_665_461_1E-1],
            );
            let c = self.horner(
                z,
                &[
                    2.443_315_711_809_948E-5,
                    -1.388_731_625_493_765E-3,
                    4.166_664_568_298_827E-2,
                ],
            );
            (r, z, s, c)
        };
        // sin r = r + r·z·S(z); cos r = 1 - z/2 + z²·C(z).
        let sin_r = self.odd_tail(r, z, sin_poly);
        let z2 = self.mul(z, z);
        let c = self.mul(z2, cos_poly);
        let half_z = self.mul_const(z, 0.5);
        let c = self.sub(c, half_z);
        let cos_r = self.add_const(c, 1.0);
        (sin_r, cos_r, q_int)
    }

    /// Keeps `v` where |x| <= the trig limit; 0·x (±0, or NaN for ±inf and NaN) elsewhere.
    fn trig_range_guard(&mut self, a: Value, x: Value, v: Value) -> Value {
        let limit = self.trig_limit();
        let in_range = self.fcmp_const(FloatCC::LessThanOrEqual, a, limit);
        let zero_or_nan = self.mul_const(x, 0.0);
        self.select(in_range, v, zero_or_nan)
    }

    /// sin(x) = ±sin r or ±cos r depending on the quadrant q of |x| (odd q: cos; q & 2:
    /// negate), times sign(x). cos(x) = sin(|x| + π/2), i.e. the same with q + 1 and no sign.
    fn sin_or_cos(&mut self, x: Value, cosine: bool) -> Value {
        let a = self.abs(x);
        let (s, c, q) = self.sin_cos_reduced(a);
        let q = if cosine {
            let one = self.i(1);
            self.b.ins().iadd(q, one)
        } else {
            q
        };
        let odd = self.int_bit_set(q, 1);
        let v = self.select(odd, c, s);
        // Move bit 1 of q into the sign bit.
        let two = self.i(2);
        let q2 = self.b.ins().band(q, two);
        let lane_bits = if self.double { 64 } else { 32 };
        let flip = self.b.ins().ishl_imm_u(q2, lane_bits - 2);
        let flip = self.float_from_bits(flip);
        let v = self.bxor(v, flip);
        let v = if cosine {
            v
        } else {
            let sign = self.sign_bit(x);
            self.bxor(v, sign)
        };
        self.trig_range_guard(a, x, v)
    }

    /// tan(x) = sin r / cos r in even quadrants and -cos r / sin r in odd ones (period π),
    /// times sign(x).
    fn tan(&mut self, x: Value) -> Value {
        let a = self.abs(x);
        let (s, c, q) = self.sin_cos_reduced(a);
        let odd = self.int_bit_set(q, 1);
        let neg_c = self.neg(c);
        let num = self.select(odd, neg_c, s);
        let den = self.select(odd, s, c);
        let v = self.div(num, den);
        let sign = self.sign_bit(x);
        let v = self.bxor(v, sign);
        self.trig_range_guard(a, x, v)
    }

    /// atan(|x|) is reduced to |t| <= tan(π/8) (single) or 0.66 (double) with
    /// atan(a) = π/4 + atan((a-1)/(a+1)) and atan(a) = π/2 + atan(-1/a), both folded into
    /// one division; then t + t³·R(t²) with Cephes atanf.c's polynomial or atan.c's
    /// rational (which also adds the bits of π/2 beyond double precision, MOREBITS).
    fn atan(&mut self, x: Value) -> Value {
        let a = self.abs(x);
        let (mid_limit, big_limit) = if self.double {
            (0.66, 2.414_213_562_373_095_048_80)
        } else {
            (0.414_213_562_373_095_0, 2.414_213_562_373_095)
        };
        let is_big = self.fcmp_const(FloatCC::GreaterThan, a, big_limit);
        let is_mid = self.fcmp_const(FloatCC::GreaterThan, a, mid_limit);
        let one = self.f(1.0);
        let minus_one = self.f(-1.0);
        let a_minus_1 = self.sub(a, one);
        let a_plus_1 = self.add(a, one);
        let num = self.select(is_mid, a_minus_1, a);
        let num = self.select(is_big, minus_one, num);
        let den = self.select(is_mid, a_plus_1, one);
        let den = self.select(is_big, a, den);
        let t = self.div(num, den);

        let zero = self.f(0.0);
        let base = self.select_const(is_mid, FRAC_PI_4, zero);
        let base = self.select_const(is_big, FRAC_PI_2, base);

        let z = self.mul(t, t);
        let atan_t = if self.double {
            let r = self.rational(
                z,
                &[
                    -8.750_608_600_031_904_122_785E-1,
                    -1.615_753_718_733_365_076_637E1,
                    -7.500_855_792_314_704_667_340E1,
                    -1.228_866_684_490_136_173_410E2,
                    -6.485_021_904_942_025_371_773E1,
                ],
                &[
                    1.0,
                    2.485_846_490_142_306_297_962E1,
                    1.650_270_098_316_988_542_046E2,
                    4.328_810_604_912_902_668_951E2,
                    4.853_903_996_359_136_964_868E2,
                    1.945_506_571_482_613_964_425E2,
                ],
            );
            let v = self.odd_tail(t, z, r);
            // MOREBITS = π/2 - fl(π/2); half of it for π/4.
            const MOREBITS: f64 = 6.123_233_995_736_765_886_130E-17;
            let extra = self.select_const(is_mid, 0.5 * MOREBITS, zero);
            let extra = self.select_const(is_big, MOREBITS, extra);
            self.add(v, extra)
        } else {
            let r = self.horner(
                z,
                &[
                    8.053_744_495_38e-2,
                    -1.387_768_560_32E-1,
                    1.997_771_064_78E-1,
                    -3.333_294_915_39E-1,
                ],
            );
            self.odd_tail(t, z, r)
        };
        let v = self.add(base, atan_t);
        let sign = self.sign_bit(x);
        self.bxor(v, sign)
    }

    // ---- pow -------------------------------------------------------------------------

    /// pow for double precision lanes; see [`pow`].
    fn pow(&mut self, x: Value, y: Value) -> Value {
        debug_assert!(self.double);
        let ax = self.abs(x);
        let l = self.log(ax);
        let yl = self.mul(y, l);
        let r = self.exp(yl);

        // Classify y. For |y| < 2^52, |y| + 2^52 rounds |y| to an integer held in the low
        // mantissa bits, so comparing gives "is an integer" and the last bit its parity.
        // Every |y| >= 2^52 is an integer, odd only below 2^53 when its own last bit is set.
        let two52 = 2f64.powi(52);
        let ay = self.abs(y);
        let below_2_52 = self.fcmp_const(FloatCC::LessThan, ay, two52);
        let shifted = self.add_const(ay, two52);
        let rounded = self.add_const(shifted, -two52);
        let rounded = self.select(below_2_52, rounded, ay);
        let is_int = self.fcmp(FloatCC::Equal, rounded, ay);
        let not_int = self.fcmp(FloatCC::NotEqual, rounded, ay);
        let parity_source = self.select(below_2_52, shifted, ay);
        let parity_bits = self.bits_of(parity_source);
        let last_bit = self.int_bit_set(parity_bits, 1);
        let below_2_53 = self.fcmp_const(FloatCC::LessThan, ay, 2.0 * two52);
        let is_odd = self.and(is_int, last_bit);
        let is_odd = self.and(is_odd, below_2_53);

        // Negative x (including -0 and -inf) with odd y: negate.
        let one = self.f(1.0);
        let sign = self.sign_bit(x);
        let signed_one = self.b.ins().bor(one, sign);
        let x_negative = self.fcmp_const(FloatCC::LessThan, signed_one, 0.0);
        let negate = self.and(x_negative, is_odd);
        let neg_r = self.neg(r);
        let r = self.select(negate, neg_r, r);

        // Finite negative x with non-integer y: NaN.
        let below_zero = self.fcmp_const(FloatCC::LessThan, x, 0.0);
        let finite = self.fcmp_const(FloatCC::GreaterThan, x, f64::NEG_INFINITY);
        let invalid = self.and(below_zero, finite);
        let invalid = self.and(invalid, not_int);
        let r = self.select_const(invalid, f64::NAN, r);

        // y = 0, x = 1, and x = -1 with y = ±inf give exactly 1.
        let y_zero = self.fcmp_const(FloatCC::Equal, y, 0.0);
        let x_one = self.fcmp_const(FloatCC::Equal, x, 1.0);
        let x_minus_one = self.fcmp_const(FloatCC::Equal, x, -1.0);
        let y_inf = self.fcmp_const(FloatCC::Equal, ay, f64::INFINITY);
        let minus_one_inf = self.and(x_minus_one, y_inf);
        let ones = self.or(y_zero, x_one);
        let ones = self.or(ones, minus_one_inf);
        self.select_const(ones, 1.0, r)
    }
}
