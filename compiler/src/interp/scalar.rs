//! Element-level arithmetic with ONNX / numpy semantics, correctly rounded conversions to
//! the narrow float types, and the special functions Rust's std lacks (erf, erfc).
//!
//! The interpreter computes f16 and bf16 in f32 (and transcendental functions in f64), so
//! [`Num`] is implemented for the eight integer and the two wide float types only.

use half::{bf16, f16};

use crate::ir::Element;

/// Arithmetic every numeric element type supports. Integers wrap on overflow (numpy
/// semantics, so `MIN / -1` is `MIN`); integer division and remainder by zero give 0
/// (numpy's values; ONNX leaves them undefined), as the generated code does.
pub(crate) trait Num: Element {
    const ZERO: Self;
    const ONE: Self;
    /// The identity of `max` (−∞, or the type's minimum).
    fn lowest() -> Self;
    /// The identity of `min` (+∞, or the type's maximum).
    fn highest() -> Self;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    /// Float: IEEE division. Integer: truncates toward zero (`MIN / -1` wraps).
    fn div(self, o: Self) -> Self;
    /// C `fmod` / `%`: the result has the sign of the dividend.
    fn rem_trunc(self, o: Self) -> Self;
    /// numpy `mod`: the result has the sign of the divisor.
    fn rem_floor(self, o: Self) -> Self;
    fn neg(self) -> Self;
    fn abs(self) -> Self;
    /// −1, 0 or 1 (NaN stays NaN).
    fn sign(self) -> Self;
    fn is_zero(self) -> bool;
    fn is_nan(self) -> bool;
    /// numpy `maximum`: NaN in either operand propagates.
    fn max_nan(self, o: Self) -> Self {
        if self.is_nan() || self >= o {
            self
        } else {
            o
        }
    }
    /// numpy `minimum`: NaN in either operand propagates.
    fn min_nan(self, o: Self) -> Self {
        if self.is_nan() || self <= o {
            self
        } else {
            o
        }
    }
    /// `self ^ e` for a non-negative integer exponent, wrapping for integers.
    fn pow_u64(self, mut e: u64) -> Self {
        let (mut base, mut acc) = (self, Self::ONE);
        while e > 0 {
            if e & 1 == 1 {
                acc = acc.mul(base);
            }
            base = base.mul(base);
            e >>= 1;
        }
        acc
    }
}

/// Bit operations of the integer types.
pub(crate) trait Int: Num + Ord {
    const SIGNED: bool;
    fn bit_and(self, o: Self) -> Self;
    fn bit_or(self, o: Self) -> Self;
    fn bit_xor(self, o: Self) -> Self;
    fn bit_not(self) -> Self;
    /// numpy: shifting by the width or more (or a negative amount) gives 0.
    fn shift_left(self, n: i64) -> Self;
    /// Past the width only the sign is left (0 or −1).
    fn shift_right(self, n: i64) -> Self;
    fn to_i128(self) -> i128;
    /// Keeps the low bits, as numpy's integer `astype` does.
    fn from_i128_wrapping(v: i128) -> Self;
}

macro_rules! int_num {
    ($t:ty, signed: $signed:expr) => {
        impl Num for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            fn lowest() -> Self {
                <$t>::MIN
            }
            fn highest() -> Self {
                <$t>::MAX
            }
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            fn sub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            fn div(self, o: Self) -> Self {
                if o == 0 {
                    0
                } else {
                    self.wrapping_div(o)
                }
            }
            fn rem_trunc(self, o: Self) -> Self {
                if o == 0 {
                    0
                } else {
                    self.wrapping_rem(o)
                }
            }
            #[allow(unused_comparisons)]
            fn rem_floor(self, o: Self) -> Self {
                let r = self.rem_trunc(o);
                // Differs from the C remainder only when the signs of r and o differ.
                if r != 0 && ((r < 0) != (o < 0)) {
                    r.wrapping_add(o)
                } else {
                    r
                }
            }
            fn neg(self) -> Self {
                self.wrapping_neg()
            }
            #[allow(unused_comparisons)]
            fn abs(self) -> Self {
                if self < 0 {
                    self.wrapping_neg()
                } else {
                    self
                }
            }
            #[allow(unused_comparisons)]
            fn sign(self) -> Self {
                if self > 0 {
                    1
                } else if self < 0 {
                    (0 as $t).wrapping_sub(1)
                } else {
                    0
                }
            }
            fn is_zero(self) -> bool {
                self == 0
            }
            fn is_nan(self) -> bool {
                false
            }
        }
        impl Int for $t {
            const SIGNED: bool = $signed;
            fn bit_and(self, o: Self) -> Self {
                self & o
            }
            fn bit_or(self, o: Self) -> Self {
                self | o
            }
            fn bit_xor(self, o: Self) -> Self {
                self ^ o
            }
            fn bit_not(self) -> Self {
                !self
            }
            fn shift_left(self, n: i64) -> Self {
                u32::try_from(n)
                    .ok()
                    .and_then(|n| self.checked_shl(n))
                    .unwrap_or(0)
            }
            #[allow(unused_comparisons)]
            fn shift_right(self, n: i64) -> Self {
                match u32::try_from(n).ok().and_then(|n| self.checked_shr(n)) {
                    Some(v) => v,
                    None if self < 0 => (0 as $t).wrapping_sub(1),
                    None => 0,
                }
            }
            fn to_i128(self) -> i128 {
                self as i128
            }
            fn from_i128_wrapping(v: i128) -> Self {
                v as $t
            }
        }
    };
}

int_num!(i8, signed: true);
int_num!(i16, signed: true);
int_num!(i32, signed: true);
int_num!(i64, signed: true);
int_num!(u8, signed: false);
int_num!(u16, signed: false);
int_num!(u32, signed: false);
int_num!(u64, signed: false);

/// The float types computed natively (f16 and bf16 are widened to f32).
pub(crate) trait Float: Num + ndarray::LinalgScalar + std::ops::AddAssign {
    /// Rounds an f64 to this type (to nearest even).
    fn of(v: f64) -> Self;
}

macro_rules! float_num {
    ($t:ty) => {
        impl Num for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            fn lowest() -> Self {
                <$t>::NEG_INFINITY
            }
            fn highest() -> Self {
                <$t>::INFINITY
            }
            fn add(self, o: Self) -> Self {
                self + o
            }
            fn sub(self, o: Self) -> Self {
                self - o
            }
            fn mul(self, o: Self) -> Self {
                self * o
            }
            fn div(self, o: Self) -> Self {
                self / o
            }
            fn rem_trunc(self, o: Self) -> Self {
                self % o
            }
            fn rem_floor(self, o: Self) -> Self {
                // numpy's npy_divmod: move the C remainder to the divisor's sign, and give
                // a zero result the divisor's sign too.
                let r = self % o;
                if o == 0.0 || r.is_nan() {
                    r
                } else if r == 0.0 {
                    (0.0 as $t).copysign(o)
                } else if (r < 0.0) != (o < 0.0) {
                    r + o
                } else {
                    r
                }
            }
            fn neg(self) -> Self {
                -self
            }
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            fn sign(self) -> Self {
                if self > 0.0 {
                    1.0
                } else if self < 0.0 {
                    -1.0
                } else if self.is_nan() {
                    self
                } else {
                    0.0
                }
            }
            fn is_zero(self) -> bool {
                self == 0.0
            }
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
        }
        impl Float for $t {
            fn of(v: f64) -> Self {
                v as $t
            }
        }
    };
}

float_num!(f32);
float_num!(f64);

/// An element's exact value, the common ground of Cast.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Exact {
    Float(f64),
    Int(i128),
}

/// Every element type converts exactly into [`Exact`].
pub(crate) trait ToExact: Copy {
    fn exact(self) -> Exact;
}

macro_rules! exact_via {
    ($variant:ident, $conv:expr, $($t:ty),*) => {
        $(impl ToExact for $t {
            fn exact(self) -> Exact {
                Exact::$variant($conv(self))
            }
        })*
    };
}
exact_via!(Int, i128::from, i8, i16, i32, i64, u8, u16, u32, u64, bool);
exact_via!(Float, f64::from, f32, f64, f16, bf16);

macro_rules! exact_code {
    ($($t:ident),*) => {
        $(impl ToExact for crate::ir::code_elements::$t {
            fn exact(self) -> Exact {
                use crate::ir::Element;
                let v = self.to_f64();
                if crate::ir::DType::$t.is_float() {
                    Exact::Float(v)
                } else {
                    Exact::Int(v as i128)
                }
            }
        })*
    };
}
exact_code!(F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, U4, I4, F4E2M1, F8E8M0, U2, I2);

/// f64 → f32 rounding to odd: a result that was inexact gets an odd last bit, so a
/// second rounding to a type with at least two fewer significand bits (f16, bf16) is
/// correctly rounded. Rounding f64 → f32 → f16 to nearest twice is not.
fn f64_to_f32_odd(v: f64) -> f32 {
    let f = v as f32;
    if !f.is_finite() || f as f64 == v || f.to_bits() & 1 == 1 {
        return f;
    }
    // `f` is the nearest f32; its neighbour on v's side has an odd last bit. The bit
    // pattern is sign-magnitude, so ±1 moves the magnitude.
    let toward_larger_magnitude = (f as f64).abs() < v.abs();
    let bits = if toward_larger_magnitude {
        f.to_bits() + 1
    } else {
        f.to_bits() - 1
    };
    f32::from_bits(bits)
}

/// Correctly rounded f64 → f16. (`half::f16::from_f64` either rounds through f32 or
/// ignores the low 32 significand bits, so values just past a tie can round wrongly.)
pub(crate) fn f16_of(v: f64) -> f16 {
    f16::from_f32(f64_to_f32_odd(v))
}

/// Correctly rounded f64 → bf16 (see [`f16_of`]).
pub(crate) fn bf16_of(v: f64) -> bf16 {
    bf16::from_f32(f64_to_f32_odd(v))
}

/// Integer → f32 with round-to-odd, for a correct second rounding to f16/bf16.
pub(crate) fn i128_to_f32_odd(v: i128) -> f32 {
    let f = v as f32;
    if !f.is_finite() || f as i128 == v || f.to_bits() & 1 == 1 {
        return f;
    }
    let toward_larger_magnitude = (f as i128).unsigned_abs() < v.unsigned_abs();
    let bits = if toward_larger_magnitude {
        f.to_bits() + 1
    } else {
        f.to_bits() - 1
    };
    f32::from_bits(bits)
}

// ---------------------------------------------------------------------------------------
// erf / erfc: W. J. Cody's rational Chebyshev approximations ("Rational Chebyshev
// approximations for the error function", Math. Comp. 1969), as in his CALERF routine;
// relative error below 1e-16 in exact arithmetic, so a few ulp in f64. The coefficients
// keep Cody's published digits (more than f64 holds) so they can be checked against it.

/// erf on |x| ≤ 0.46875: x · P(x²)/Q(x²).
#[allow(clippy::excessive_precision)]
const ERF_A: [f64; 5] = [
    3.161_123_743_870_565_6,
    1.138_641_541_510_501_56e2,
    3.774_852_376_853_020_21e2,
    3.209_377_589_138_469_47e3,
    1.857_777_061_846_031_53e-1,
];
#[allow(clippy::excessive_precision)]
const ERF_B: [f64; 4] = [
    2.360_129_095_234_412_09e1,
    2.440_246_379_344_441_73e2,
    1.282_616_526_077_372_28e3,
    2.844_236_833_439_170_62e3,
];
/// erfc on 0.46875 < |x| ≤ 4: exp(−x²) · P(x)/Q(x).
#[allow(clippy::excessive_precision)]
const ERFC_C: [f64; 9] = [
    5.641_884_969_886_700_89e-1,
    8.883_149_794_388_375_94,
    6.611_919_063_714_162_95e1,
    2.986_351_381_974_001_31e2,
    8.819_522_212_417_690_90e2,
    1.712_047_612_634_070_58e3,
    2.051_078_377_826_071_47e3,
    1.230_339_354_797_997_25e3,
    2.153_115_354_744_038_46e-8,
];
#[allow(clippy::excessive_precision)]
const ERFC_D: [f64; 8] = [
    1.574_492_611_070_983_47e1,
    1.176_939_508_913_124_99e2,
    5.371_811_018_620_098_58e2,
    1.621_389_574_566_690_19e3,
    3.290_799_235_733_459_63e3,
    4.362_619_090_143_247_16e3,
    3.439_367_674_143_721_64e3,
    1.230_339_354_803_749_42e3,
];
/// erfc on |x| > 4: exp(−x²)/x · (1/√π − P(1/x²)/Q(1/x²) / x²).
#[allow(clippy::excessive_precision)]
const ERFC_P: [f64; 6] = [
    3.053_266_349_612_323_44e-1,
    3.603_448_999_498_044_39e-1,
    1.257_817_261_112_292_46e-1,
    1.608_378_514_874_227_66e-2,
    6.587_491_615_298_378_03e-4,
    1.631_538_713_730_209_78e-2,
];
#[allow(clippy::excessive_precision)]
const ERFC_Q: [f64; 5] = [
    2.568_520_192_289_822_42,
    1.872_952_849_923_460_47,
    5.279_051_029_514_284_12e-1,
    6.051_834_131_244_131_91e-2,
    2.335_204_976_268_691_85e-3,
];
#[allow(clippy::excessive_precision)]
const FRAC_1_SQRT_PI: f64 = 0.564_189_583_547_756_286_95;

/// erf(x) for |x| = y ≤ 0.46875.
fn erf_small(x: f64, y: f64) -> f64 {
    let ysq = if y > 1.11e-16 { y * y } else { 0.0 };
    let mut num = ERF_A[4] * ysq;
    let mut den = ysq;
    for i in 0..3 {
        num = (num + ERF_A[i]) * ysq;
        den = (den + ERF_B[i]) * ysq;
    }
    x * (num + ERF_A[3]) / (den + ERF_B[3])
}

/// exp(−y²) computed as exp(−ys²)·exp(−(y−ys)(y+ys)) with ys = y truncated to 1/16,
/// which keeps the rounding error of y² out of the exponent.
fn exp_neg_square(y: f64) -> f64 {
    let ys = (y * 16.0).trunc() / 16.0;
    let del = (y - ys) * (y + ys);
    (-ys * ys).exp() * (-del).exp()
}

/// erfc(y) for y = |x| > 0.46875 (y may be NaN: it propagates).
fn erfc_large(y: f64) -> f64 {
    if y <= 4.0 {
        let mut num = ERFC_C[8] * y;
        let mut den = y;
        for i in 0..7 {
            num = (num + ERFC_C[i]) * y;
            den = (den + ERFC_D[i]) * y;
        }
        exp_neg_square(y) * (num + ERFC_C[7]) / (den + ERFC_D[7])
    } else if y >= 26.543 {
        // exp(−y²) underflows.
        0.0
    } else {
        let ysq = 1.0 / (y * y);
        let mut num = ERFC_P[5] * ysq;
        let mut den = ysq;
        for i in 0..4 {
            num = (num + ERFC_P[i]) * ysq;
            den = (den + ERFC_Q[i]) * ysq;
        }
        let r = ysq * (num + ERFC_P[4]) / (den + ERFC_Q[4]);
        exp_neg_square(y) * (FRAC_1_SQRT_PI - r) / y
    }
}

pub(crate) fn erf(x: f64) -> f64 {
    let y = x.abs();
    if y <= 0.468_75 {
        return erf_small(x, y);
    }
    if x.is_nan() {
        return x;
    }
    let r = (0.5 - erfc_large(y)) + 0.5;
    if x < 0.0 {
        -r
    } else {
        r
    }
}

pub(crate) fn erfc(x: f64) -> f64 {
    let y = x.abs();
    if y <= 0.468_75 {
        return 1.0 - erf_small(x, y);
    }
    if x.is_nan() {
        return x;
    }
    let r = erfc_large(y);
    if x < 0.0 {
        2.0 - r
    } else {
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_known_values() {
        // Reference values: mpmath at 40 digits, rounded to f64.
        let cases = [
            (0.0, 0.0),
            (1e-20, 1.128_379_167_095_512_5e-20),
            (0.1, 0.112_462_916_018_284_9),
            (0.4, 0.428_392_355_046_668_45),
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (3.5, 0.999_999_256_901_627_6),
            (5.0, 0.999_999_999_998_462_6),
            (-1.0, -0.842_700_792_949_714_9),
        ];
        for (x, want) in cases {
            let got = erf(x);
            assert!(
                (got - want).abs() <= 2e-16 * want.abs(),
                "erf({x}) = {got}, want {want}"
            );
        }
        let erfc_cases = [
            (1.0, 0.157_299_207_050_285_13),
            (5.0, 1.537_459_794_428_035e-12),
            (10.0, 2.088_487_583_762_545e-45),
            (-1.0, 1.842_700_792_949_714_8),
        ];
        for (x, want) in erfc_cases {
            let got = erfc(x);
            assert!(
                (got - want).abs() <= 4e-16 * want.abs(),
                "erfc({x}) = {got}, want {want}"
            );
        }
        assert_eq!(erf(f64::INFINITY), 1.0);
        assert_eq!(erf(f64::NEG_INFINITY), -1.0);
        assert!(erf(f64::NAN).is_nan());
    }

    #[test]
    fn narrow_floats_round_once() {
        // 1 + 2^-11 + 2^-40 lies just above the midpoint of f16's 1 and 1 + 2^-10.
        let v = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        assert_eq!(f16_of(v), f16::from_f64(1.0 + 2f64.powi(-10)));
        assert_eq!(f16_of(1.0 + 2f64.powi(-11)), f16::ONE); // an exact tie goes to even
        let w = 1.0 + 2f64.powi(-8) + 2f64.powi(-40);
        assert_eq!(bf16_of(w), bf16::from_f64(1.0 + 2f64.powi(-7)));
        // 2^60 + 2^52 + 1 → bf16 rounds up; through f32 to nearest it would tie and
        // round down to 2^60.
        let big = (1i128 << 60) + (1 << 52) + 1;
        let want = (1u64 << 60) as f64 + (1u64 << 53) as f64;
        assert_eq!(bf16::from_f32(i128_to_f32_odd(big)).to_f64(), want);
    }
}
