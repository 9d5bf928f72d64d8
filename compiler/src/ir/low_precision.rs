//! ONNX's element formats narrower than 16 bits (the float8 family, FLOAT4E2M1,
//! FLOAT8E8M0 and the 4- and 2-bit integers), held as *codes*: each element's bit
//! pattern in the low bits of a `u8`.
//!
//! The semantics are those of onnx 1.23.2's reference implementation (Cast opset 25,
//! QuantizeLinear opset 25, which use `ml_dtypes` for the conversions), checked value
//! by value against it in `tests/low_precision_formats.rs`:
//!
//! * **float8 formats** (Cast float32 → float8): round to nearest, ties to even, on the
//!   exact value (no double rounding), subnormals included. With `saturate`, every
//!   value beyond the largest finite magnitude, ±inf included, becomes ±max (the
//!   reference clips to `[-max, max]` before converting). Without it, overflow gives
//!   the format's "overflow code": ±inf for E5M2, NaN (sign kept) for E4M3FN, and the
//!   single NaN 0x80 for the FNUZ formats. Overflow means "rounds past max": for
//!   E4M3FN 464 (the midpoint of 448 and the would-be 480) still ties to 448 (even),
//!   for E5M2 61440 ties to the would-be 65536 and overflows. NaN gives the quiet NaN
//!   with the input's sign (E4M3FN 0x7F/0xFF, E5M2 0x7E/0xFE), or 0x80 for FNUZ,
//!   whatever the payload. FNUZ formats have no negative zero: -0 and negative values
//!   rounding to zero give 0x00.
//! * **FLOAT4E2M1**: same rounding; no inf or NaN, so overflow and ±inf always
//!   saturate to ±6 (the `saturate` flag has no effect). NaN becomes 0x8 (-0) when its
//!   sign bit is clear and 0x0 (+0) when set: what `ml_dtypes` produces (it negates
//!   its "NaN", which for this format is -0), and so what the reference produces.
//! * **INT4/UINT4/INT2/UINT2 through Cast**: the reference is numpy's `astype`, i.e. a C
//!   float → integer conversion: truncation toward zero, then the low `bits()` bits
//!   (wrap-around, two's complement), with NaN and ±inf giving 0 (x86-64's "integer
//!   indefinite" 0x80000000 has zero low bits). `saturate` has no effect.
//!   So Cast(7.9) = 7, Cast(8.0) to INT4 = -8, Cast(-9.0) = 7, Cast(100.0) = 4.
//! * **INT4/UINT4/INT2/UINT2 through QuantizeLinear** (see [`Format::encode_quantized`]):
//!   round half to even, add the zero point in int32, clamp to the type's range. The
//!   reference converts the rounded value with numpy's float32 → int32 cast, which on
//!   x86-64 gives `i32::MIN` for NaN, ±inf and |x| ≥ 2^31; that value (plus the zero
//!   point, wrapping) is then clamped, usually to the range minimum. This module
//!   reproduces that exactly.
//! * **FLOAT8E8M0** (exponent only, unsigned, code c = 2^(c-127), 0xFF = NaN): the
//!   reference works on the float32 bit pattern, ignoring the sign: NaN and ±inf give
//!   0xFF; otherwise the exponent field e is the code, plus one when the mantissa
//!   field m calls for rounding up: `up` when m != 0, `nearest` when m ≥ 0x400000
//!   (for e = 0: m > 0x400000), `down` never. Rounding 0xFE up gives 0xFE with
//!   `saturate`, 0xFF (NaN) without. A consequence: with `up`, 2^-127 (code 0's value,
//!   a float32 subnormal whose mantissa field is nonzero) encodes to code 1.
//!
//! Where the Cast operator's documentation and the reference disagree, this module
//! follows the reference: the documentation's FLOAT8E8M0 table has ±inf → E8M0_MAX
//! under "saturate + up" and 0 → NaN under "non-saturate + nearest", where the
//! reference gives 0xFF and 0x00; it calls float → integer conversion out of range
//! and negative → FLOAT8E8M0 undefined, where the reference wraps and ignores the sign.
//!
//! [`Format::encode`] is implemented through [`Format::encode_table`], the table form
//! that code generators mirror with a few float compares, integer ops and table loads.

use std::sync::OnceLock;

/// An ONNX element format narrower than 16 bits that nnc stores as codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    F8E4M3FN,
    F8E4M3FNUZ,
    F8E5M2,
    F8E5M2FNUZ,
    U4,
    I4,
    F4E2M1,
    F8E8M0,
    U2,
    I2,
}

/// How Cast rounds to FLOAT8E8M0 (ONNX Cast's `round_mode` attribute: "up" (the default), "down", "nearest").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum E8m0Rounding {
    #[default]
    Up,
    Down,
    Nearest,
}

/// The rule by which a float32 becomes a code, in a form a code generator can emit
/// without calls: float compares, integer ops and loads from a constant table.
/// [`EncodeTable::encode`] is the reference implementation of the rule and the one
/// [`Format::encode`] uses.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EncodeTable {
    /// The sign-magnitude float formats: the four float8 formats and FLOAT4E2M1.
    Float(FloatTable),
    /// The integer formats (UINT4, INT4, UINT2, INT2).
    Int(IntTable),
    /// FLOAT8E8M0.
    E8m0(E8m0Table),
}

/// Encoding to a sign-magnitude float format. A code generator computes, for `x`:
///
/// ```text
/// if x is NaN:              return sign(x) ? nan_negative : nan_positive
/// a = |x|                   (clear the float32 sign bit)
/// c = number of entries of `mids` that are < a      (ordered compare)
/// if c <= max_finite and a == mids[c] and c is odd:  c = c + 1   (tie to even)
/// if c > max_finite:        c = overflow_code
/// if sign(x) and (c != 0 or negative_zero):          c = c | sign_bit
/// return c
/// ```
///
/// `sign(x)` is the float32 sign bit (so -0.0 and negative NaNs count as negative).
/// Because `mids` is sorted, `c` can be found by a branch-free binary search
/// (`log2(mids.len())` rounds of compare and conditional add, loading `mids[c + step - 1]`)
/// or by summing compare masks over the whole table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FloatTable {
    /// Rounding thresholds on the magnitude, strictly ascending, finite, each exactly
    /// representable: `mids[i]` is the midpoint of the values of magnitude codes `i`
    /// and `i + 1`, for `i` in `0..max_finite`; the last entry, `mids[max_finite]`,
    /// is the midpoint of the largest finite value and the value the next code would
    /// have with an unbounded exponent (E4M3FN: 464, E5M2: 61440), so values above it
    /// (or tying to an odd `max_finite`) overflow. `mids.len() == max_finite + 1`.
    pub mids: &'static [f32],
    /// The largest finite magnitude code (E4M3FN 0x7E, E4M3FNUZ 0x7F, E5M2 0x7B,
    /// E5M2FNUZ 0x7F, FLOAT4E2M1 0x7). Magnitude codes `0..=max_finite` are in
    /// increasing order of value.
    pub max_finite: u8,
    /// The magnitude code for values that round past `max_finite` (±inf included):
    /// `max_finite` when saturating (and always for FLOAT4E2M1); otherwise the inf code
    /// 0x7C for E5M2, the NaN code 0x7F for E4M3FN, and 0x80 (NaN, already carrying
    /// the sign bit, so the final OR leaves it unchanged) for the FNUZ formats.
    pub overflow_code: u8,
    /// The sign bit of a code: 0x80 for the float8 formats, 0x08 for FLOAT4E2M1.
    pub sign_bit: u8,
    /// Whether the format has a negative zero. False for the FNUZ formats, where
    /// -0.0 and negative values rounding to zero give code 0 (0x80 is their NaN).
    pub negative_zero: bool,
    /// The code for a NaN whose float32 sign bit is clear (any payload).
    pub nan_positive: u8,
    /// The code for a NaN whose float32 sign bit is set (any payload).
    pub nan_negative: u8,
}

/// Encoding to an integer format. A code generator computes, for `x`:
///
/// ```text
/// r = rounding == TowardZero ? trunc(x) : round_half_even(x)        (in float32)
/// i = -2^31 <= r < 2^31 ? (int32) r : i32::MIN       (NaN and ±inf give i32::MIN)
/// i = i + zero_point                                 (int32, wrapping; 0 for Cast)
/// if overflow == Saturate: i = clamp(i, min, max)
/// return i & ((1 << bits) - 1)
/// ```
///
/// On x86-64 the second line is exactly `cvttss2si`/`cvtss2si` (whose out-of-range
/// result is 0x80000000). Elsewhere (AArch64's `fcvtzs` saturates and maps NaN to 0)
/// handle NaN and |r| ≥ 2^31 explicitly. For Cast (`Wrap`, zero point 0), any
/// out-of-range result with its low 8 bits zero works, since trunc(x) for
/// |x| ≥ 2^31 is a multiple of 256.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntTable {
    /// Bits per code: 4 or 2.
    pub bits: u32,
    /// The smallest value of the type (-8, 0, -2, 0).
    pub min: i32,
    /// The largest value of the type (7, 15, 1, 3).
    pub max: i32,
    /// How the float becomes an integer.
    pub rounding: IntRounding,
    /// What happens to integers outside `min..=max`.
    pub overflow: IntOverflow,
}

/// How [`IntTable`] rounds a float to an integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntRounding {
    /// Truncation toward zero (Cast, a C float → integer conversion).
    TowardZero,
    /// Round half to even (QuantizeLinear, numpy's `rint`).
    HalfEven,
}

/// What [`IntTable`] does with an integer outside the type's range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntOverflow {
    /// Keep the low `bits` bits (Cast).
    Wrap,
    /// Clamp to `min..=max` (QuantizeLinear).
    Saturate,
}

/// Encoding to FLOAT8E8M0, on the float32 bit pattern `b` of `x` (the sign is ignored).
/// A code generator computes:
///
/// ```text
/// e = (b >> 23) & 0xFF;  m = b & 0x7FFFFF
/// if e == 0xFF: return 0xFF                             (NaN and ±inf)
/// up = m >= (e == 0 ? round_up_from_subnormal : round_up_from)
/// if up and e == 0xFE and saturate: return 0xFE
/// return e + up                                         (0xFE + 1 = 0xFF, NaN)
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct E8m0Table {
    /// The smallest mantissa field that rounds the exponent field up, for exponent
    /// fields 1..=0xFE: 1 for `up`, 0x400000 for `nearest`, 0x800000 (never) for `down`.
    pub round_up_from: u32,
    /// The same for exponent field 0 (zero and float32 subnormals): 1 for `up`,
    /// 0x400001 for `nearest`, 0x800000 for `down`.
    pub round_up_from_subnormal: u32,
    /// Whether rounding up from exponent field 0xFE stays at 0xFE (else it gives 0xFF).
    pub saturate: bool,
}

impl EncodeTable {
    /// The code of `x` under this rule (for integer tables with zero point 0).
    pub fn encode(&self, x: f32) -> u8 {
        match self {
            EncodeTable::Float(t) => t.encode(x),
            EncodeTable::Int(t) => t.encode(x, 0),
            EncodeTable::E8m0(t) => t.encode(x),
        }
    }
}

impl FloatTable {
    /// The code of `x`: see the type's documentation.
    pub fn encode(&self, x: f32) -> u8 {
        let negative = x.is_sign_negative();
        if x.is_nan() {
            return if negative {
                self.nan_negative
            } else {
                self.nan_positive
            };
        }
        let a = x.abs();
        let mut c = self.mids.partition_point(|&m| m < a);
        if c < self.mids.len() && a == self.mids[c] && c % 2 == 1 {
            c += 1;
        }
        let magnitude = if c > usize::from(self.max_finite) {
            self.overflow_code
        } else {
            c as u8
        };
        if negative && (magnitude != 0 || self.negative_zero) {
            magnitude | self.sign_bit
        } else {
            magnitude
        }
    }
}

impl IntTable {
    /// The code of `x` with `zero_point` added after rounding (0 for Cast): see the
    /// type's documentation.
    pub fn encode(&self, x: f32, zero_point: i32) -> u8 {
        let r = match self.rounding {
            IntRounding::TowardZero => x.trunc(),
            IntRounding::HalfEven => x.round_ties_even(),
        };
        // 2^31 as f32; NaN fails the range test.
        let i = if (-2_147_483_648.0f32..2_147_483_648.0f32).contains(&r) {
            r as i32
        } else {
            i32::MIN
        };
        let i = i.wrapping_add(zero_point);
        let i = match self.overflow {
            IntOverflow::Wrap => i,
            IntOverflow::Saturate => i.clamp(self.min, self.max),
        };
        (i as u32 & ((1u32 << self.bits) - 1)) as u8
    }
}

impl E8m0Table {
    /// The code of `x`: see the type's documentation.
    pub fn encode(&self, x: f32) -> u8 {
        let b = x.to_bits();
        let e = (b >> 23) & 0xFF;
        let m = b & 0x7F_FFFF;
        if e == 0xFF {
            return 0xFF;
        }
        let threshold = if e == 0 {
            self.round_up_from_subnormal
        } else {
            self.round_up_from
        };
        let up = m >= threshold;
        if up && e == 0xFE && self.saturate {
            return 0xFE;
        }
        (e + u32::from(up)) as u8
    }
}

/// What a sign-magnitude float format reserves besides finite values.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Specials {
    /// E4M3FN: the all-ones magnitude (0x7F, 0xFF) is NaN; no inf.
    FiniteNan,
    /// E5M2: IEEE-style, the all-ones exponent is inf (mantissa 0) or NaN.
    Ieee,
    /// FNUZ: 0x80 (negative zero's pattern) is the only NaN; no inf, no -0.
    Fnuz,
    /// FLOAT4E2M1: every code is finite.
    None,
}

/// Layout of a sign-magnitude float format.
#[derive(Clone, Copy)]
struct MiniFloat {
    exponent_bits: u32,
    mantissa_bits: u32,
    bias: i32,
    specials: Specials,
}

impl MiniFloat {
    fn sign_bit(self) -> u8 {
        1 << (self.exponent_bits + self.mantissa_bits)
    }

    fn max_finite(self) -> u8 {
        let all = self.sign_bit() - 1;
        match self.specials {
            Specials::FiniteNan => all - 1,
            Specials::Ieee => (((1u8 << self.exponent_bits) - 1) << self.mantissa_bits) - 1,
            Specials::Fnuz | Specials::None => all,
        }
    }

    /// The magnitude code that non-saturating overflow gives.
    fn overflow_code(self) -> u8 {
        match self.specials {
            Specials::FiniteNan => self.sign_bit() - 1,
            Specials::Ieee => self.max_finite() + 1,
            Specials::Fnuz => self.sign_bit(),
            Specials::None => self.max_finite(),
        }
    }

    /// The codes of NaNs with the sign bit clear and set.
    fn nan_codes(self) -> (u8, u8) {
        let s = self.sign_bit();
        match self.specials {
            Specials::FiniteNan => (s - 1, s | (s - 1)),
            Specials::Ieee => {
                let quiet = self.max_finite() + 1 + (1 << (self.mantissa_bits - 1));
                (quiet, quiet | s)
            }
            Specials::Fnuz => (s, s),
            // ml_dtypes converts NaN to this format's "NaN", -0, negated for a negative NaN.
            Specials::None => (s, 0),
        }
    }

    fn decode(self, code: u8) -> f32 {
        let s = self.sign_bit();
        let code = code & (s | (s - 1));
        let magnitude = code & (s - 1);
        let negative = code & s != 0;
        let exponent = i32::from(magnitude >> self.mantissa_bits);
        let mantissa = u32::from(magnitude) & ((1 << self.mantissa_bits) - 1);
        let all_ones_exponent = (1 << self.exponent_bits) - 1;
        match self.specials {
            Specials::FiniteNan if magnitude == s - 1 => return f32::NAN,
            Specials::Ieee if exponent == all_ones_exponent => {
                return match (mantissa, negative) {
                    (0, false) => f32::INFINITY,
                    (0, true) => f32::NEG_INFINITY,
                    _ => f32::NAN,
                };
            }
            Specials::Fnuz if code == s => return f32::NAN,
            _ => {}
        }
        let m = self.mantissa_bits as i32;
        let value = if exponent == 0 {
            mantissa as f32 * pow2(1 - self.bias - m)
        } else {
            ((1 << m) | mantissa) as f32 * pow2(exponent - self.bias - m)
        };
        if negative {
            -value
        } else {
            value
        }
    }

    /// The rounding thresholds of [`FloatTable::mids`].
    fn mids(self) -> Vec<f32> {
        let max = self.max_finite();
        let top = self.decode(max);
        // One code past the largest finite value with an unbounded exponent: the top
        // binade's spacing above it.
        let beyond = top + (top - self.decode(max - 1));
        (0..=max)
            .map(|c| {
                let next = if c == max { beyond } else { self.decode(c + 1) };
                // Exact: both values have few significant bits and adjacent exponents.
                (self.decode(c) + next) * 0.5
            })
            .collect()
    }
}

/// 2^k as f32, for k in -149..=127.
fn pow2(k: i32) -> f32 {
    debug_assert!((-149..=127).contains(&k));
    if k >= -126 {
        f32::from_bits(((k + 127) as u32) << 23)
    } else {
        f32::from_bits(1 << (k + 149))
    }
}

impl Format {
    /// Every format, in ONNX code order.
    pub const ALL: [Format; 10] = [
        Format::F8E4M3FN,
        Format::F8E4M3FNUZ,
        Format::F8E5M2,
        Format::F8E5M2FNUZ,
        Format::U4,
        Format::I4,
        Format::F4E2M1,
        Format::F8E8M0,
        Format::U2,
        Format::I2,
    ];

    /// From the ONNX TensorProto.DataType code (17..=26), None otherwise.
    pub fn from_onnx(code: i32) -> Option<Format> {
        Format::ALL.into_iter().find(|f| f.onnx_code() == code)
    }

    pub fn onnx_code(self) -> i32 {
        match self {
            Format::F8E4M3FN => 17,
            Format::F8E4M3FNUZ => 18,
            Format::F8E5M2 => 19,
            Format::F8E5M2FNUZ => 20,
            Format::U4 => 21,
            Format::I4 => 22,
            Format::F4E2M1 => 23,
            Format::F8E8M0 => 24,
            Format::U2 => 25,
            Format::I2 => 26,
        }
    }

    /// Bits per element: 8, 4 or 2.
    pub fn bits(self) -> u32 {
        match self {
            Format::F8E4M3FN
            | Format::F8E4M3FNUZ
            | Format::F8E5M2
            | Format::F8E5M2FNUZ
            | Format::F8E8M0 => 8,
            Format::U4 | Format::I4 | Format::F4E2M1 => 4,
            Format::U2 | Format::I2 => 2,
        }
    }

    /// The F8*, F4E2M1 and F8E8M0 formats.
    pub fn is_float(self) -> bool {
        !matches!(self, Format::U4 | Format::I4 | Format::U2 | Format::I2)
    }

    /// The lowercase ONNX name: "float8e4m3fn", "int4", ...
    pub fn name(self) -> &'static str {
        match self {
            Format::F8E4M3FN => "float8e4m3fn",
            Format::F8E4M3FNUZ => "float8e4m3fnuz",
            Format::F8E5M2 => "float8e5m2",
            Format::F8E5M2FNUZ => "float8e5m2fnuz",
            Format::U4 => "uint4",
            Format::I4 => "int4",
            Format::F4E2M1 => "float4e2m1",
            Format::F8E8M0 => "float8e8m0",
            Format::U2 => "uint2",
            Format::I2 => "int2",
        }
    }

    /// The layout of a sign-magnitude float format.
    fn mini_float(self) -> Option<MiniFloat> {
        let (exponent_bits, mantissa_bits, bias, specials) = match self {
            Format::F8E4M3FN => (4, 3, 7, Specials::FiniteNan),
            Format::F8E4M3FNUZ => (4, 3, 8, Specials::Fnuz),
            Format::F8E5M2 => (5, 2, 15, Specials::Ieee),
            Format::F8E5M2FNUZ => (5, 2, 16, Specials::Fnuz),
            Format::F4E2M1 => (2, 1, 1, Specials::None),
            _ => return None,
        };
        Some(MiniFloat {
            exponent_bits,
            mantissa_bits,
            bias,
            specials,
        })
    }

    /// `(min, max)` of an integer format.
    fn int_range(self) -> Option<(i32, i32)> {
        match self {
            Format::U4 => Some((0, 15)),
            Format::I4 => Some((-8, 7)),
            Format::U2 => Some((0, 3)),
            Format::I2 => Some((-2, 1)),
            _ => None,
        }
    }

    /// The value thresholds of a sign-magnitude float format, computed once.
    fn mids(self, layout: MiniFloat) -> &'static [f32] {
        static MIDS: [OnceLock<Vec<f32>>; 5] = [const { OnceLock::new() }; 5];
        let slot = match self {
            Format::F8E4M3FN => 0,
            Format::F8E4M3FNUZ => 1,
            Format::F8E5M2 => 2,
            Format::F8E5M2FNUZ => 3,
            _ => 4,
        };
        MIDS[slot].get_or_init(|| layout.mids())
    }

    /// The exact value of `code` (only the low `bits()` bits are used): NaN for NaN codes, ±inf where the format has them; ints as their value.
    pub fn decode(self, code: u8) -> f32 {
        let code = code & low_mask(self.bits());
        if let Some(layout) = self.mini_float() {
            return layout.decode(code);
        }
        match self {
            Format::F8E8M0 if code == 0xFF => f32::NAN,
            Format::F8E8M0 => pow2(i32::from(code) - 127),
            Format::U4 | Format::U2 => f32::from(code),
            // Sign-extend from bits() bits.
            _ => {
                let shift = 8 - self.bits();
                f32::from(((code << shift) as i8) >> shift)
            }
        }
    }

    /// The value → code conversion of ONNX Cast from float32 to this format (and of QuantizeLinear's final step), with Cast's `saturate` attribute (only meaningful for the float8 formats and FLOAT4E2M1; ignored otherwise) and `round_mode` (FLOAT8E8M0 only).
    ///
    /// For the integer formats this is Cast's truncate-and-wrap conversion, which is
    /// *not* QuantizeLinear's: use [`Format::encode_quantized`] for that. (In fact
    /// `saturate` has no effect on FLOAT4E2M1 either: it has no inf or NaN, so
    /// overflow always saturates.) See the module documentation for the rules.
    pub fn encode(self, x: f32, saturate: bool, rounding: E8m0Rounding) -> u8 {
        self.encode_table(saturate, rounding).encode(x)
    }

    /// The encode rule in table form, for code generators that implement `encode` with a few compares: see [`EncodeTable`].
    pub fn encode_table(self, saturate: bool, rounding: E8m0Rounding) -> EncodeTable {
        if let Some(layout) = self.mini_float() {
            let max_finite = layout.max_finite();
            let (nan_positive, nan_negative) = layout.nan_codes();
            return EncodeTable::Float(FloatTable {
                mids: self.mids(layout),
                max_finite,
                overflow_code: if saturate {
                    max_finite
                } else {
                    layout.overflow_code()
                },
                sign_bit: layout.sign_bit(),
                negative_zero: layout.specials != Specials::Fnuz,
                nan_positive,
                nan_negative,
            });
        }
        if let Some((min, max)) = self.int_range() {
            return EncodeTable::Int(IntTable {
                bits: self.bits(),
                min,
                max,
                rounding: IntRounding::TowardZero,
                overflow: IntOverflow::Wrap,
            });
        }
        let (round_up_from, round_up_from_subnormal) = match rounding {
            E8m0Rounding::Up => (1, 1),
            E8m0Rounding::Down => (0x80_0000, 0x80_0000),
            E8m0Rounding::Nearest => (0x40_0000, 0x40_0001),
        };
        EncodeTable::E8m0(E8m0Table {
            round_up_from,
            round_up_from_subnormal,
            saturate,
        })
    }

    /// QuantizeLinear's final step: the code of `x` (already divided by the scale)
    /// with `zero_point` (the zero point's value, for the integer formats) applied.
    ///
    /// For the integer formats this differs from [`Format::encode`] (Cast): the value
    /// is rounded half to even (not truncated), the zero point is added in int32, and
    /// the result is clamped to the range (not wrapped); `saturate` is ignored, as in
    /// ONNX. NaN, ±inf and values whose rounding is outside the int32 range become
    /// `i32::MIN` before the zero point is added, as in the reference (numpy's
    /// float32 → int32 cast on x86-64), so they usually give the range minimum.
    ///
    /// For the float formats it is [`Format::encode`] with `saturate` (FLOAT8E8M0,
    /// not a QuantizeLinear output type, with round mode `up`), and `zero_point`
    /// must be 0: ONNX's reference ignores a float8 zero point and adds a FLOAT4E2M1
    /// one in float32 before the cast, which a caller must do itself.
    ///
    /// # Panics
    /// If `zero_point` is nonzero for a float format.
    pub fn encode_quantized(self, x: f32, zero_point: i32, saturate: bool) -> u8 {
        match self.encode_quantized_table(saturate) {
            EncodeTable::Int(table) => table.encode(x, zero_point),
            table => {
                assert_eq!(
                    zero_point,
                    0,
                    "a {} zero point must be applied before encode_quantized",
                    self.name()
                );
                table.encode(x)
            }
        }
    }

    /// [`Format::encode_quantized`]'s rule in table form: for the integer formats an
    /// [`IntTable`] with [`IntRounding::HalfEven`] and [`IntOverflow::Saturate`] (the
    /// zero point is then added where [`IntTable`] says); otherwise
    /// `encode_table(saturate, E8m0Rounding::Up)`.
    pub fn encode_quantized_table(self, saturate: bool) -> EncodeTable {
        match self.encode_table(saturate, E8m0Rounding::Up) {
            EncodeTable::Int(table) => EncodeTable::Int(IntTable {
                rounding: IntRounding::HalfEven,
                overflow: IntOverflow::Saturate,
                ..table
            }),
            table => table,
        }
    }
}

fn low_mask(bits: u32) -> u8 {
    (((1u32) << bits) - 1) as u8
}

/// Packs codes (one per u8, low bits) into ONNX's packed layout: 4-bit types two per byte, low nibble first; 2-bit types four per byte, lowest bits first; 8-bit formats unchanged. Unused high bits of the last byte are zero.
pub fn pack(format: Format, codes: &[u8]) -> Vec<u8> {
    let bits = format.bits() as usize;
    if bits == 8 {
        return codes.to_vec();
    }
    let per_byte = 8 / bits;
    let mask = low_mask(format.bits());
    codes
        .chunks(per_byte)
        .map(|chunk| {
            chunk
                .iter()
                .enumerate()
                .fold(0u8, |byte, (i, &code)| byte | (code & mask) << (i * bits))
        })
        .collect()
}

/// The inverse: the first `count` codes of `bytes`.
///
/// # Panics
/// If `bytes` is shorter than `packed_len(format, count)`.
pub fn unpack(format: Format, bytes: &[u8], count: usize) -> Vec<u8> {
    let needed = packed_len(format, count);
    assert!(
        bytes.len() >= needed,
        "{count} {} elements need {needed} bytes, got {}",
        format.name(),
        bytes.len()
    );
    let bits = format.bits() as usize;
    let per_byte = 8 / bits;
    let mask = low_mask(format.bits());
    (0..count)
        .map(|i| (bytes[i / per_byte] >> ((i % per_byte) * bits)) & mask)
        .collect()
}

/// Bytes that `count` elements occupy packed.
pub fn packed_len(format: Format, count: usize) -> usize {
    count.div_ceil(8 / format.bits() as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SATURATE: [bool; 2] = [false, true];
    const ROUNDINGS: [E8m0Rounding; 3] =
        [E8m0Rounding::Up, E8m0Rounding::Down, E8m0Rounding::Nearest];

    fn codes(format: Format) -> impl Iterator<Item = u8> {
        (0..1u32 << format.bits()).map(|c| c as u8)
    }

    fn is_nan_code(format: Format, code: u8) -> bool {
        format.decode(code).is_nan()
    }

    #[test]
    fn onnx_codes_names_and_widths() {
        for (i, format) in Format::ALL.into_iter().enumerate() {
            assert_eq!(format.onnx_code(), 17 + i as i32);
            assert_eq!(Format::from_onnx(format.onnx_code()), Some(format));
        }
        assert_eq!(Format::from_onnx(16), None);
        assert_eq!(Format::from_onnx(27), None);
        assert_eq!(Format::F8E4M3FNUZ.name(), "float8e4m3fnuz");
        assert_eq!(Format::I2.name(), "int2");
        assert_eq!(Format::F4E2M1.bits(), 4);
        assert_eq!(Format::F8E8M0.bits(), 8);
        assert_eq!(Format::U2.bits(), 2);
        assert!(Format::F8E8M0.is_float() && Format::F4E2M1.is_float());
        assert!(!Format::I4.is_float() && !Format::U2.is_float());
    }

    #[test]
    fn decode_known_codes() {
        use Format::*;
        assert_eq!(F8E4M3FN.decode(0x7E), 448.0);
        assert_eq!(F8E4M3FN.decode(0xFE), -448.0);
        assert!(F8E4M3FN.decode(0x7F).is_nan() && F8E4M3FN.decode(0xFF).is_nan());
        assert_eq!(F8E4M3FN.decode(0x01), 2f32.powi(-9));
        assert_eq!(F8E4M3FN.decode(0x38), 1.0);
        assert_eq!(F8E4M3FN.decode(0x80).to_bits(), (-0.0f32).to_bits());
        assert_eq!(F8E4M3FNUZ.decode(0x7F), 240.0);
        assert_eq!(F8E4M3FNUZ.decode(0x40), 1.0);
        assert_eq!(F8E4M3FNUZ.decode(0x01), 2f32.powi(-10));
        assert!(F8E4M3FNUZ.decode(0x80).is_nan());
        assert_eq!(F8E5M2.decode(0x7B), 57344.0);
        assert_eq!(F8E5M2.decode(0x7C), f32::INFINITY);
        assert_eq!(F8E5M2.decode(0xFC), f32::NEG_INFINITY);
        assert!(F8E5M2.decode(0x7D).is_nan() && F8E5M2.decode(0xFF).is_nan());
        assert_eq!(F8E5M2.decode(0x01), 2f32.powi(-16));
        assert_eq!(F8E5M2.decode(0x3C), 1.0);
        assert_eq!(F8E5M2FNUZ.decode(0x7F), 57344.0);
        assert_eq!(F8E5M2FNUZ.decode(0x01), 2f32.powi(-17));
        assert!(F8E5M2FNUZ.decode(0x80).is_nan());
        let f4: Vec<f32> = (0..16).map(|c| F4E2M1.decode(c)).collect();
        assert_eq!(
            f4,
            [
                0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0,
                -6.0
            ]
        );
        assert_eq!(F4E2M1.decode(0xF7), 6.0, "only the low 4 bits count");
        assert_eq!(F8E8M0.decode(127), 1.0);
        assert_eq!(F8E8M0.decode(0), 2f32.powi(-126) / 2.0);
        assert_eq!(F8E8M0.decode(0xFE), 2f32.powi(127));
        assert!(F8E8M0.decode(0xFF).is_nan());
        assert_eq!(I4.decode(0x7), 7.0);
        assert_eq!(I4.decode(0x8), -8.0);
        assert_eq!(I4.decode(0xF), -1.0);
        assert_eq!(U4.decode(0xF), 15.0);
        assert_eq!(I2.decode(0x2), -2.0);
        assert_eq!(I2.decode(0x1), 1.0);
        assert_eq!(U2.decode(0x3), 3.0);
        assert_eq!(U2.decode(0xFF), 3.0);
    }

    #[test]
    fn encode_decode_round_trips() {
        for format in Format::ALL {
            for c in codes(format).filter(|&c| !is_nan_code(format, c)) {
                let value = format.decode(c);
                for saturate in SATURATE {
                    for rounding in ROUNDINGS {
                        // Saturation turns ±inf into ±max.
                        if saturate && value.is_infinite() {
                            assert_eq!(format.encode(value, saturate, rounding), c - 1);
                            continue;
                        }
                        // The reference's `up` reads 2^-127 (a float32 subnormal with
                        // a nonzero mantissa field) as needing rounding up.
                        if format == Format::F8E8M0 && c == 0 && rounding == E8m0Rounding::Up {
                            assert_eq!(format.encode(value, saturate, rounding), 1);
                            continue;
                        }
                        assert_eq!(
                            format.encode(value, saturate, rounding),
                            c,
                            "{} code {c:#x} = {value} (saturate {saturate}, {rounding:?})",
                            format.name()
                        );
                    }
                }
                if !format.is_float() {
                    assert_eq!(format.encode_quantized(value, 0, true), c);
                }
            }
        }
    }

    #[test]
    fn mids_are_exact_midpoints() {
        for format in Format::ALL {
            let EncodeTable::Float(t) = format.encode_table(false, E8m0Rounding::Up) else {
                continue;
            };
            assert_eq!(t.mids.len(), usize::from(t.max_finite) + 1);
            for (i, &m) in t.mids.iter().enumerate() {
                let lo = f64::from(format.decode(i as u8));
                let hi = if i == usize::from(t.max_finite) {
                    2.0 * lo - f64::from(format.decode(i as u8 - 1))
                } else {
                    f64::from(format.decode(i as u8 + 1))
                };
                assert!(lo < hi, "{} codes not increasing at {i}", format.name());
                assert_eq!(f64::from(m), (lo + hi) / 2.0, "{} mid {i}", format.name());
            }
        }
        let EncodeTable::Float(t) = Format::F8E4M3FN.encode_table(true, E8m0Rounding::Up) else {
            unreachable!()
        };
        assert_eq!(t.mids[0x7E], 464.0);
    }

    #[test]
    fn float8_rounding_overflow_and_specials() {
        use Format::*;
        let up = E8m0Rounding::Up;
        // Ties to even, at the overflow threshold too.
        assert_eq!(F8E4M3FN.encode(464.0, false, up), 0x7E);
        assert_eq!(F8E4M3FN.encode(464.0f32.next_up(), false, up), 0x7F);
        assert_eq!(F8E4M3FN.encode(-464.0f32.next_up(), false, up), 0xFF);
        assert_eq!(F8E4M3FN.encode(1e9, true, up), 0x7E);
        assert_eq!(F8E4M3FN.encode(f32::NEG_INFINITY, true, up), 0xFE);
        assert_eq!(F8E4M3FN.encode(f32::INFINITY, false, up), 0x7F);
        assert_eq!(F8E5M2.encode(61440.0, false, up), 0x7C);
        assert_eq!(F8E5M2.encode(61440.0f32.next_down(), false, up), 0x7B);
        assert_eq!(F8E5M2.encode(61440.0, true, up), 0x7B);
        assert_eq!(F8E5M2.encode(f32::NEG_INFINITY, false, up), 0xFC);
        assert_eq!(F8E5M2.encode(f32::INFINITY, true, up), 0x7B);
        assert_eq!(F8E4M3FNUZ.encode(248.0, false, up), 0x80);
        assert_eq!(F8E4M3FNUZ.encode(-248.0, false, up), 0x80);
        assert_eq!(F8E4M3FNUZ.encode(-248.0, true, up), 0xFF);
        assert_eq!(F8E5M2FNUZ.encode(f32::INFINITY, true, up), 0x7F);
        assert_eq!(F8E5M2FNUZ.encode(f32::NEG_INFINITY, false, up), 0x80);
        // Subnormal ties: 2^-10 is halfway between 0 and E4M3FN's smallest subnormal.
        assert_eq!(F8E4M3FN.encode(2f32.powi(-10), false, up), 0x00);
        assert_eq!(F8E4M3FN.encode(2f32.powi(-10).next_up(), false, up), 0x01);
        assert_eq!(F8E4M3FN.encode(3.0 * 2f32.powi(-10), false, up), 0x02);
        // Negative zero, and values rounding to zero.
        assert_eq!(F8E4M3FN.encode(-0.0, false, up), 0x80);
        assert_eq!(F8E5M2.encode(-1e-30, false, up), 0x80);
        assert_eq!(F8E4M3FNUZ.encode(-0.0, false, up), 0x00);
        assert_eq!(F8E5M2FNUZ.encode(-1e-30, true, up), 0x00);
        // NaN, whatever its payload.
        let negative_nan = f32::from_bits(0xFFC0_0000);
        let payload_nan = f32::from_bits(0x7F80_0001);
        assert_eq!(F8E4M3FN.encode(f32::NAN, true, up), 0x7F);
        assert_eq!(F8E4M3FN.encode(negative_nan, true, up), 0xFF);
        assert_eq!(F8E5M2.encode(payload_nan, false, up), 0x7E);
        assert_eq!(F8E5M2.encode(negative_nan, false, up), 0xFE);
        assert_eq!(F8E4M3FNUZ.encode(negative_nan, false, up), 0x80);
        assert_eq!(F8E5M2FNUZ.encode(f32::NAN, true, up), 0x80);
    }

    #[test]
    fn float4_saturates_always() {
        let up = E8m0Rounding::Up;
        for saturate in SATURATE {
            let f4 = |x: f32| Format::F4E2M1.encode(x, saturate, up);
            assert_eq!(f4(5.0), 0x6, "tie 4|6 to even 4");
            assert_eq!(f4(5.0f32.next_up()), 0x7);
            assert_eq!(f4(7.0), 0x7, "the overflow tie saturates");
            assert_eq!(f4(1e30), 0x7);
            assert_eq!(f4(f32::NEG_INFINITY), 0xF);
            assert_eq!(f4(0.25), 0x0);
            assert_eq!(f4(-0.25), 0x8);
            assert_eq!(f4(2.5), 0x4);
            assert_eq!(f4(f32::NAN), 0x8);
            assert_eq!(f4(-f32::NAN), 0x0);
        }
    }

    #[test]
    fn int_cast_truncates_and_wraps_quantize_rounds_and_clamps() {
        let cast = |f: Format, x: f32| f.encode(x, true, E8m0Rounding::Up);
        use Format::*;
        assert_eq!(cast(I4, 7.9), 7);
        assert_eq!(cast(I4, -7.9), 0x9);
        assert_eq!(cast(I4, 2.5), 2);
        assert_eq!(cast(I4, 8.0), 0x8);
        assert_eq!(cast(I4, -9.0), 0x7);
        assert_eq!(cast(I4, 100.0), 4);
        assert_eq!(cast(U4, -1.0), 0xF);
        assert_eq!(cast(U2, 5.0), 1);
        assert_eq!(cast(I2, f32::NAN), 0);
        assert_eq!(cast(I4, f32::INFINITY), 0);
        assert_eq!(cast(U4, 3e9), 0);
        let q = |f: Format, x: f32, zp: i32| f.encode_quantized(x, zp, true);
        assert_eq!(q(I4, 2.5, 0), 2);
        assert_eq!(q(I4, 3.5, 0), 4);
        assert_eq!(q(I4, -2.5, 0), 0xE);
        assert_eq!(q(I4, 7.6, 0), 7);
        assert_eq!(q(I4, 100.0, 0), 7);
        assert_eq!(q(I4, -100.0, 0), 0x8);
        assert_eq!(q(I4, 3.0, 3), 6);
        assert_eq!(q(U4, -0.5, 0), 0);
        assert_eq!(q(U4, 20.0, -3), 15);
        assert_eq!(q(U2, 1.5, 1), 3);
        assert_eq!(q(I2, -1.5, 0), 0x2);
        // The reference's float32 → int32 conversion on x86-64.
        assert_eq!(q(I4, f32::NAN, 0), 0x8);
        assert_eq!(q(I4, f32::INFINITY, 0), 0x8);
        assert_eq!(q(I4, 3e9, 0), 0x8);
        assert_eq!(q(I4, f32::NAN, -1), 0x7, "i32::MIN - 1 wraps to i32::MAX");
        assert_eq!(q(U4, f32::INFINITY, 2), 0);
        assert_eq!(Format::F8E4M3FN.encode_quantized(500.0, 0, true), 0x7E);
        assert_eq!(Format::F8E4M3FN.encode_quantized(500.0, 0, false), 0x7F);
    }

    #[test]
    #[should_panic(expected = "zero point")]
    fn float_quantize_rejects_a_zero_point() {
        Format::F8E4M3FN.encode_quantized(1.0, 1, true);
    }

    #[test]
    fn e8m0_rounding_modes() {
        use E8m0Rounding::*;
        let e = |x: f32, saturate: bool, r: E8m0Rounding| Format::F8E8M0.encode(x, saturate, r);
        for saturate in SATURATE {
            assert_eq!(e(1.0, saturate, Up), 127);
            assert_eq!(e(1.0f32.next_up(), saturate, Up), 128);
            assert_eq!(e(1.0f32.next_up(), saturate, Down), 127);
            assert_eq!(e(1.5f32.next_down(), saturate, Nearest), 127);
            assert_eq!(e(1.5, saturate, Nearest), 128);
            assert_eq!(e(1.9, saturate, Down), 127);
            assert_eq!(e(-4.0, saturate, Down), 129, "the sign is ignored");
            assert_eq!(e(0.0, saturate, Up), 0);
            assert_eq!(e(-0.0, saturate, Nearest), 0);
            assert_eq!(e(f32::from_bits(1), saturate, Up), 1);
            assert_eq!(e(f32::from_bits(0x40_0000), saturate, Nearest), 0);
            assert_eq!(e(f32::from_bits(0x40_0001), saturate, Nearest), 1);
            assert_eq!(e(f32::NAN, saturate, Up), 0xFF);
            assert_eq!(e(f32::INFINITY, saturate, Down), 0xFF);
            assert_eq!(e(f32::MAX, saturate, Down), 0xFE);
        }
        assert_eq!(e(f32::MAX, true, Up), 0xFE);
        assert_eq!(e(f32::MAX, false, Up), 0xFF);
        assert_eq!(e(1.5 * 2f32.powi(127), true, Nearest), 0xFE);
        assert_eq!(e(1.5 * 2f32.powi(127), false, Nearest), 0xFF);
        assert_eq!(e(2f32.powi(127), false, Up), 0xFE);
    }

    #[test]
    fn tables_describe_encode() {
        for format in Format::ALL {
            for saturate in SATURATE {
                for rounding in ROUNDINGS {
                    let table = format.encode_table(saturate, rounding);
                    for bits in (0..=u32::MAX).step_by(65_521) {
                        let x = f32::from_bits(bits);
                        assert_eq!(table.encode(x), format.encode(x, saturate, rounding));
                    }
                }
            }
        }
        assert_eq!(
            Format::U4.encode_table(true, E8m0Rounding::Up),
            EncodeTable::Int(IntTable {
                bits: 4,
                min: 0,
                max: 15,
                rounding: IntRounding::TowardZero,
                overflow: IntOverflow::Wrap,
            })
        );
        assert_eq!(
            Format::I2.encode_quantized_table(false),
            EncodeTable::Int(IntTable {
                bits: 2,
                min: -2,
                max: 1,
                rounding: IntRounding::HalfEven,
                overflow: IntOverflow::Saturate,
            })
        );
    }

    #[test]
    fn pack_unpack_round_trip() {
        for format in Format::ALL {
            for count in [0, 1, 2, 3, 4, 5, 7, 9, 13, 256, 257] {
                let codes: Vec<u8> = (0..count)
                    .map(|i| ((i * 7 + 3) as u8) & low_mask(format.bits()))
                    .collect();
                let packed = pack(format, &codes);
                assert_eq!(packed.len(), packed_len(format, count));
                assert_eq!(unpack(format, &packed, count), codes);
            }
        }
        assert_eq!(pack(Format::I4, &[0x1, 0x2, 0xF]), [0x21, 0x0F]);
        assert_eq!(pack(Format::U2, &[1, 2, 3, 0, 3]), [0b00_11_10_01, 0b11]);
        assert_eq!(
            pack(Format::U4, &[0xF3]),
            [0x03],
            "high bits of a code are ignored"
        );
        assert_eq!(
            unpack(Format::U2, &[0b00_11_10_01, 0b11], 5),
            [1, 2, 3, 0, 3]
        );
        assert_eq!(unpack(Format::F4E2M1, &[0x21, 0xF0], 3), [1, 2, 0]);
        assert_eq!(pack(Format::F8E5M2, &[0xAB, 0x7C]), [0xAB, 0x7C]);
        assert_eq!(packed_len(Format::I2, 9), 3);
        assert_eq!(packed_len(Format::F4E2M1, 9), 5);
        assert_eq!(packed_len(Format::F8E8M0, 9), 9);
    }
}
