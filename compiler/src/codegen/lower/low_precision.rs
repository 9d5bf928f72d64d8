//! CastCodes: float32 ↔ the low-precision types (float8, float4, 4- and 2-bit
//! integers), whose elements are codes of 8, 4 or 2 bits, packed below a byte.
//!
//! Decoding is a table lookup: every code's exact float32 value.
//!
//! Encoding to the float formats is a table search, derived from [`Format::encode`]
//! itself so the compiled
//! code cannot disagree with it: over the bit patterns of float32 read as unsigned
//! integers, `encode` is a step function (within each sign half, larger patterns are
//! larger magnitudes, and each code covers one contiguous run of them; the NaN patterns
//! sit at the top of each half). [`EncodeSteps`] lists where the code changes; the
//! kernel counts the breakpoints at or below the input's pattern with a branch-free
//! binary search and loads the code at that count. Cast to the integer formats
//! truncates and keeps the low bits, as numpy's `astype` does.

use cranelift_codegen::ir::{
    condcodes::{FloatCC, IntCC},
    types, InstBuilder, Value,
};
use cranelift_frontend::FunctionBuilder;

use super::{LowerCtx, LowerResult};
use crate::codegen::kernel::{counted_loop, flags};
use crate::ir::low_precision::{E8m0Rounding, Format};
use crate::ir::DType;

pub fn cast_codes(
    ctx: &mut LowerCtx,
    to: DType,
    saturate: bool,
    rounding: E8m0Rounding,
) -> LowerResult {
    let x = ctx.input(0)?;
    let out = ctx.output(0);
    let n = x.ty.numel() as i64;
    match (x.ty.dtype.low_precision(), to.low_precision()) {
        (Some(format), None) if to == DType::F32 => {
            let table: Vec<u8> = (0..1u32 << format.bits())
                .flat_map(|c| format.decode(c as u8).to_le_bytes())
                .collect();
            let table = ctx.rodata(table)?;
            let b = &mut *ctx.b;
            counted_loop(b, 0, n, 1, |b, i| {
                let code = load_code(b, format, x.ptr, i);
                let at = b.ins().ishl_imm_s(code, 2);
                let at = b.ins().iadd(table, at);
                let v = b.ins().load(types::F32, flags(), at, 0);
                let dst = b.ins().ishl_imm_s(i, 2);
                let dst = b.ins().iadd(out.ptr, dst);
                b.ins().store(flags(), v, dst, 0);
            });
            Ok(())
        }
        (None, Some(format)) if x.ty.dtype == DType::F32 => {
            let rule = if format.is_float() {
                let steps = EncodeSteps::new(format, saturate, rounding);
                let bounds = steps.padded_bounds();
                let levels = bounds.len().trailing_zeros();
                let bounds = ctx.rodata(bounds.iter().flat_map(|v| v.to_le_bytes()).collect())?;
                let codes = ctx.rodata(steps.codes)?;
                Rule::Steps {
                    bounds,
                    codes,
                    levels,
                }
            } else {
                Rule::TruncateAndWrap {
                    mask: (1 << format.bits()) - 1,
                }
            };
            let b = &mut *ctx.b;
            let per_byte = (8 / format.bits()) as i64;
            let bytes = (n + per_byte - 1) / per_byte;
            counted_loop(b, 0, bytes, 1, |b, byte| {
                let mut packed = b.ins().iconst(types::I64, 0);
                for lane in 0..per_byte {
                    // The last byte may hold fewer elements; its spare bits stay zero.
                    let first = b.ins().imul_imm_s(byte, per_byte);
                    let i = b.ins().iadd_imm_s(first, lane);
                    let code = encode_one(b, x.ptr, i, n, &rule);
                    let code = b.ins().ishl_imm_s(code, lane * format.bits() as i64);
                    packed = b.ins().bor(packed, code);
                }
                let packed = b.ins().ireduce(types::I8, packed);
                let dst = b.ins().iadd(out.ptr, byte);
                b.ins().store(flags(), packed, dst, 0);
            });
            Ok(())
        }
        _ => Err(format!(
            "CastCodes from {} to {to}: one side must be float32",
            x.ty.dtype
        )),
    }
}

/// Code `i` (an i64 index) of the packed buffer at `base`, zero-extended to i64.
fn load_code(b: &mut FunctionBuilder, format: Format, base: Value, i: Value) -> Value {
    let bits = format.bits() as i64;
    let per_byte_log2 = (8 / bits).trailing_zeros() as i64;
    let byte_at = b.ins().ushr_imm_s(i, per_byte_log2);
    let addr = b.ins().iadd(base, byte_at);
    let byte = b.ins().uload8(types::I64, flags(), addr, 0);
    if bits == 8 {
        return byte;
    }
    let lane = b.ins().band_imm_s(i, (1 << per_byte_log2) - 1);
    let shift = b.ins().imul_imm_s(lane, bits);
    let shifted = b.ins().ushr(byte, shift);
    b.ins().band_imm_s(shifted, (1 << bits) - 1)
}

/// How a float32 becomes a code.
enum Rule {
    /// The float formats: a search of [`EncodeSteps`] (tables in read-only data).
    Steps {
        bounds: Value,
        codes: Value,
        levels: u32,
    },
    /// Cast to the 4- and 2-bit integers, numpy's `astype`: truncate toward zero, keep
    /// the low bits; NaN, ±inf and |x| ≥ 2³¹ give 0 (those float32 values are
    /// multiples of 256, so their low bits are 0 too).
    TruncateAndWrap { mask: i64 },
}

/// The code of float32 element `i` of `src` (0 when `i ≥ n`, a packed tail's padding).
fn encode_one(b: &mut FunctionBuilder, src: Value, i: Value, n: i64, rule: &Rule) -> Value {
    // A tail index reads element 0 instead (always in bounds) and is zeroed below.
    let inside = b.ins().icmp_imm_s(IntCC::SignedLessThan, i, n);
    let zero = b.ins().iconst(types::I64, 0);
    let safe = b.ins().select(inside, i, zero);
    let at = b.ins().ishl_imm_s(safe, 2);
    let at = b.ins().iadd(src, at);
    let code = match *rule {
        Rule::Steps {
            bounds,
            codes,
            levels,
        } => {
            let key = b.ins().uload32(flags(), at, 0);
            // pos = the number of breakpoints ≤ key (the bounds are padded with
            // u64::MAX).
            let mut pos = b.ins().iconst(types::I64, 0);
            for level in (0..levels).rev() {
                let step = 1i64 << level;
                let probe = b.ins().iadd_imm_s(pos, step - 1);
                let probe = b.ins().ishl_imm_s(probe, 3);
                let probe = b.ins().iadd(bounds, probe);
                let bound = b.ins().load(types::I64, flags(), probe, 0);
                let below = b.ins().icmp(IntCC::UnsignedLessThanOrEqual, bound, key);
                let moved = b.ins().iadd_imm_s(pos, step);
                pos = b.ins().select(below, moved, pos);
            }
            let at = b.ins().iadd(codes, pos);
            b.ins().uload8(types::I64, flags(), at, 0)
        }
        Rule::TruncateAndWrap { mask } => {
            let x = b.ins().load(types::F32, flags(), at, 0);
            let ax = b.ins().fabs(x);
            let limit = b.ins().f32const(2147483648.0);
            let small = b.ins().fcmp(FloatCC::LessThan, ax, limit);
            let v = b.ins().fcvt_to_sint_sat(types::I64, x);
            let v = b.ins().band_imm_s(v, mask);
            b.ins().select(small, v, zero)
        }
    };
    b.ins().select(inside, code, zero)
}

/// [`Format::encode`] as a step function of the float32 bit pattern: `codes[k]` for
/// patterns in `[bounds[k-1], bounds[k])` (`bounds[-1]` = 0, the last run reaching
/// `u32::MAX`).
#[derive(Clone, Debug, PartialEq)]
pub struct EncodeSteps {
    pub bounds: Vec<u32>,
    pub codes: Vec<u8>,
}

impl EncodeSteps {
    /// The steps of a float format's encoding (the integer formats wrap around, so
    /// their codes do not form one run each).
    pub fn new(format: Format, saturate: bool, rounding: E8m0Rounding) -> EncodeSteps {
        assert!(format.is_float(), "{format:?} is not a float format");
        let enc = |key: u32| format.encode(f32::from_bits(key), saturate, rounding);
        let (mut bounds, mut codes) = (vec![], vec![enc(0)]);
        // Within each half, a code's run is contiguous: bisect for where it ends.
        for (start, end) in [(0u32, 0x7fff_ffffu32), (0x8000_0000, u32::MAX)] {
            let mut at = start;
            if start != 0 && enc(start) != *codes.last().expect("one code") {
                bounds.push(start);
                codes.push(enc(start));
            }
            loop {
                let code = enc(at);
                if enc(end) == code {
                    break;
                }
                // The first pattern in (at, end] whose code differs.
                let (mut lo, mut hi) = (at, end);
                while hi - lo > 1 {
                    let mid = lo + (hi - lo) / 2;
                    if enc(mid) == code {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
                bounds.push(hi);
                codes.push(enc(hi));
                at = hi;
            }
        }
        EncodeSteps { bounds, codes }
    }

    /// The code these steps give the pattern `key`.
    #[cfg(test)]
    pub fn code(&self, key: u32) -> u8 {
        self.codes[self.bounds.partition_point(|&b| b <= key)]
    }

    /// The bounds widened to u64 and padded with `u64::MAX` to a power of two, the
    /// kernel's binary-search table.
    fn padded_bounds(&self) -> Vec<u64> {
        let len = (self.bounds.len() + 1).next_power_of_two();
        let mut v: Vec<u64> = self.bounds.iter().map(|&b| b as u64).collect();
        v.resize(len, u64::MAX);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FORMATS: [Format; 6] = [
        Format::F8E4M3FN,
        Format::F8E4M3FNUZ,
        Format::F8E5M2,
        Format::F8E5M2FNUZ,
        Format::F4E2M1,
        Format::F8E8M0,
    ];

    /// The steps agree with `encode` on a dense sample of patterns (every 2¹³-th one,
    /// with its neighbours) and on both sides of every breakpoint.
    #[test]
    fn steps_match_encode() {
        for f in FORMATS {
            for saturate in [true, false] {
                for rounding in [E8m0Rounding::Up, E8m0Rounding::Down, E8m0Rounding::Nearest] {
                    let steps = EncodeSteps::new(f, saturate, rounding);
                    let mut keys: Vec<u32> = (0..1u32 << 19)
                        .flat_map(|k| {
                            let k = k << 13;
                            [k, k.wrapping_add(1), k.wrapping_sub(1), k | 0xfff]
                        })
                        .collect();
                    for &b in &steps.bounds {
                        keys.extend([b.wrapping_sub(1), b, b.wrapping_add(1)]);
                    }
                    for key in keys {
                        let want = f.encode(f32::from_bits(key), saturate, rounding);
                        assert_eq!(
                            steps.code(key),
                            want,
                            "{f:?} saturate {saturate} {rounding:?}: pattern {key:#010x} ({})",
                            f32::from_bits(key)
                        );
                    }
                }
            }
        }
    }
}
