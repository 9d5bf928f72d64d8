//! Elementwise ops: one strided loop nest for every unary, binary, Where and Cast, with
//! broadcast inputs as stride-0 axes. The innermost loop runs on f32x4 vectors when every
//! operand is float32 and contiguous or broadcast along it.

use crate::codegen::unary::activation;
use crate::codegen::unary::{bool_to_i64, fconst, fselect, unary_float};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, InstBuilder, Type, Value};
use cranelift_frontend::FunctionBuilder;

use super::gemm::LANES;
use super::{LowerCtx, LowerResult, Operand};
use crate::codegen::kernel::{self, domain, domain_type, flags, Domain};
use crate::codegen::math;
use crate::ir::DType;
use crate::ops::{BinaryOp, UnaryOp};

pub(super) type ScalarFn<'a> = dyn Fn(&mut FunctionBuilder, &[Value]) -> Result<Value, String> + 'a;

/// Per-input strides after merging output axes that every operand traverses the same
/// way; the last axis is the one the inner loop runs along.
struct LoopNest {
    shape: Vec<usize>,
    strides: Vec<Vec<usize>>,
}

fn collapse(out_shape: &[usize], in_strides: &[Vec<usize>]) -> LoopNest {
    let mut shape: Vec<usize> = vec![];
    let mut strides: Vec<Vec<usize>> = vec![vec![]; in_strides.len()];
    let out_strides = kernel::strides_of(out_shape);
    let mut out_acc: Vec<usize> = vec![];
    for d in 0..out_shape.len() {
        if out_shape[d] == 1 {
            continue;
        }
        if let Some(&last) = shape.last() {
            let mergeable = in_strides.iter().enumerate().all(|(k, s)| {
                strides[k].last() == Some(&(s[d] * out_shape[d]))
                    || (strides[k].last() == Some(&0) && s[d] == 0)
            });
            let _ = last;
            if mergeable && out_acc.last() == Some(&(out_strides[d] * out_shape[d])) {
                *shape.last_mut().expect("nonempty") *= out_shape[d];
                for (k, s) in in_strides.iter().enumerate() {
                    *strides[k].last_mut().expect("nonempty") = s[d];
                }
                *out_acc.last_mut().expect("nonempty") = out_strides[d];
                continue;
            }
        }
        shape.push(out_shape[d]);
        out_acc.push(out_strides[d]);
        for (k, s) in in_strides.iter().enumerate() {
            strides[k].push(s[d]);
        }
    }
    if shape.is_empty() {
        shape.push(1);
        for s in strides.iter_mut() {
            s.push(0);
        }
    }
    LoopNest { shape, strides }
}

/// `out[i] = f(in_0[..], in_1[..], ...)` with broadcasting. `vector` (when given) is the
/// same function on f32x4 lanes.
fn map(
    ctx: &mut LowerCtx,
    ins: &[Operand],
    out: &Operand,
    scalar: &ScalarFn,
    vector: Option<&ScalarFn>,
) -> LowerResult {
    if ctx.run_dims.is_some() && ins.iter().chain([out]).any(|o| o.ty.dims.is_some()) {
        return super::symbolic::elementwise::map(ctx, ins, out, scalar, vector);
    }
    let in_strides: Vec<Vec<usize>> = ins
        .iter()
        .map(|o| kernel::broadcast_strides(&o.ty.shape, &out.ty.shape))
        .collect();
    let nest = collapse(&out.ty.shape, &in_strides);
    if out.ty.numel() == 0 {
        return Ok(());
    }
    let rank = nest.shape.len();
    let inner = nest.shape[rank - 1];
    let outer = &nest.shape[..rank - 1];
    let out_outer_strides: Vec<usize> = kernel::strides_of(&nest.shape)[..rank - 1].to_vec();
    let vectorizable = vector.is_some()
        && out.ty.dtype == DType::F32
        && ins.iter().all(|o| o.ty.dtype == DType::F32)
        && nest.strides.iter().all(|s| s[rank - 1] <= 1)
        && inner >= 4;
    let b = &mut *ctx.b;
    let mut result: LowerResult = Ok(());
    kernel::nested_loop(b, outer, &mut |b, idx| {
        if result.is_err() {
            return;
        }
        let out_base = {
            let off = kernel::linear_offset(b, idx, &out_outer_strides);
            kernel::elem_addr(b, out.ptr, off, out.ty.dtype.size())
        };
        let in_bases: Vec<Value> = ins
            .iter()
            .zip(&nest.strides)
            .map(|(o, s)| {
                let off = kernel::linear_offset(b, idx, &s[..rank - 1]);
                kernel::elem_addr(b, o.ptr, off, o.ty.dtype.size())
            })
            .collect();
        let mut done = 0usize;
        if vectorizable {
            let vf = vector.expect("checked");
            // Broadcast operands are loaded and splatted once, outside the loop.
            let splats: Vec<Option<Value>> = ins
                .iter()
                .zip(&nest.strides)
                .zip(&in_bases)
                .map(|((_, s), &base)| {
                    (s[rank - 1] == 0).then(|| {
                        let v = b.ins().load(types::F32, flags(), base, 0);
                        b.ins().splat(types::F32X4, v)
                    })
                })
                .collect();
            let n4 = inner / 4 * 4;
            kernel::counted_loop(b, 0, n4 as i64, 4, |b, i| {
                if result.is_err() {
                    return;
                }
                let byte = b.ins().imul_imm_s(i, 4);
                let args: Vec<Value> = splats
                    .iter()
                    .zip(&in_bases)
                    .map(|(sp, &base)| {
                        sp.unwrap_or_else(|| {
                            let a = b.ins().iadd(base, byte);
                            b.ins().load(types::F32X4, flags(), a, 0)
                        })
                    })
                    .collect();
                match vf(b, &args) {
                    Ok(v) => {
                        let a = b.ins().iadd(out_base, byte);
                        b.ins().store(flags(), v, a, 0);
                    }
                    Err(e) => result = Err(e),
                }
            });
            done = n4;
        }
        kernel::counted_loop(b, done as i64, inner as i64, 1, |b, i| {
            if result.is_err() {
                return;
            }
            let args: Vec<Value> = ins
                .iter()
                .zip(&nest.strides)
                .zip(&in_bases)
                .map(|((o, s), &base)| {
                    let a = if s[rank - 1] == 0 {
                        base
                    } else {
                        kernel::elem_addr(b, base, i, s[rank - 1] * o.ty.dtype.size())
                    };
                    kernel::load_elem(b, o.ty.dtype, a, 0)
                })
                .collect();
            match scalar(b, &args) {
                Ok(v) => {
                    let a = kernel::elem_addr(b, out_base, i, out.ty.dtype.size());
                    kernel::store_elem(b, out.ty.dtype, v, a, 0);
                }
                Err(e) => result = Err(e),
            }
        });
    });
    result
}

/// Converts a value between computation domains (Cast semantics: floats truncate
/// toward zero into integers, saturating).
pub fn convert(b: &mut FunctionBuilder, from: Domain, to: Domain, v: Value) -> Value {
    match (from, to) {
        (a, c) if a == c => v,
        (Domain::F32, Domain::F64) => b.ins().fpromote(types::F64, v),
        (Domain::F64, Domain::F32) => b.ins().fdemote(types::F32, v),
        (Domain::F32 | Domain::F64, Domain::Int { signed: true }) => {
            b.ins().fcvt_to_sint_sat(types::I64, v)
        }
        (Domain::F32 | Domain::F64, Domain::Int { signed: false }) => {
            b.ins().fcvt_to_uint_sat(types::I64, v)
        }
        (Domain::Int { signed }, f) => {
            let t = domain_type(f);
            if t == types::I64 {
                v
            } else if signed {
                b.ins().fcvt_from_sint(t, v)
            } else {
                b.ins().fcvt_from_uint(t, v)
            }
        }
        _ => unreachable!("all domain pairs covered"),
    }
}

pub fn cast(ctx: &mut LowerCtx, to: DType) -> LowerResult {
    let x = ctx.input(0)?;
    let out = ctx.output(0);
    let (from_d, to_d) = (domain(x.ty.dtype), domain(to));
    let to_bool = to == DType::Bool;
    let f = move |b: &mut FunctionBuilder, a: &[Value]| -> Result<Value, String> {
        if to_bool {
            let nz = match from_d {
                Domain::Int { .. } => b.ins().icmp_imm_s(IntCC::NotEqual, a[0], 0),
                _ => {
                    let z = fconst(b, domain_type(from_d), 0.0);
                    b.ins().fcmp(FloatCC::NotEqual, a[0], z)
                }
            };
            return Ok(bool_to_i64(b, nz));
        }
        Ok(convert(b, from_d, to_d, a[0]))
    };
    map(ctx, &[x], &out, &f, None)
}

pub fn unary(ctx: &mut LowerCtx, op: UnaryOp) -> LowerResult {
    let x = ctx.input(0)?;
    let out = ctx.output(0);
    let d = domain(x.ty.dtype);
    let scalar = move |b: &mut FunctionBuilder, a: &[Value]| -> Result<Value, String> {
        match d {
            Domain::Int { signed } => unary_int(b, op, signed, a[0]),
            _ => unary_float(b, op, a[0]),
        }
    };
    let vector = move |b: &mut FunctionBuilder, a: &[Value]| unary_float(b, op, a[0]);
    let vec_ok = !matches!(
        op,
        UnaryOp::IsNaN | UnaryOp::IsInf { .. } | UnaryOp::Not | UnaryOp::BitwiseNot | UnaryOp::Sign
    );
    map(
        ctx,
        &[x],
        &out,
        &scalar,
        vec_ok.then_some(&vector as &ScalarFn),
    )
}

/// `dst[i] = act(src[i] + res[i])` (without `res`: `act(src[i])`) for `count` float32s
/// at the given addresses, f32x4 vectors then the last ones one by one: the epilogue
/// pass of a GEMM or convolution whose activation (or residual) was not applied in
/// registers. `dst` may be `src`.
pub(super) fn activate_run(
    b: &mut FunctionBuilder,
    dst: Value,
    src: Value,
    res: Option<Value>,
    count: usize,
    act: crate::ops::Activation,
) -> LowerResult {
    let vec_end = count / LANES * LANES;
    let mut failure = None;
    let mut step = |b: &mut FunctionBuilder, i: Value, ty: Type| {
        let off = b.ins().imul_imm_s(i, 4);
        let s = b.ins().iadd(src, off);
        let mut v = b.ins().load(ty, flags(), s, 0);
        if let Some(res) = res {
            let r = b.ins().iadd(res, off);
            let rv = b.ins().load(ty, flags(), r, 0);
            v = b.ins().fadd(v, rv);
        }
        match activation(b, act, v) {
            Ok(v) => {
                let d = b.ins().iadd(dst, off);
                b.ins().store(flags(), v, d, 0);
            }
            Err(e) => failure = Some(e),
        }
    };
    kernel::counted_loop(b, 0, vec_end as i64, LANES as i64, |b, i| {
        step(b, i, types::F32X4)
    });
    kernel::counted_loop(b, vec_end as i64, count as i64, 1, |b, i| {
        step(b, i, types::F32)
    });
    failure.map_or(Ok(()), Err)
}

fn unary_int(
    b: &mut FunctionBuilder,
    op: UnaryOp,
    signed: bool,
    x: Value,
) -> Result<Value, String> {
    Ok(match op {
        UnaryOp::Identity | UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round => x,
        UnaryOp::Relu => {
            let z = kernel::iconst(b, 0);
            if signed {
                b.ins().smax(x, z)
            } else {
                x
            }
        }
        UnaryOp::Neg => b.ins().ineg(x),
        UnaryOp::Abs => {
            if signed {
                b.ins().iabs(x)
            } else {
                x
            }
        }
        UnaryOp::Sign => {
            let z = kernel::iconst(b, 0);
            let gt = if signed {
                b.ins().icmp(IntCC::SignedGreaterThan, x, z)
            } else {
                b.ins().icmp(IntCC::UnsignedGreaterThan, x, z)
            };
            let lt = b.ins().icmp(IntCC::SignedLessThan, x, z);
            let gt = b.ins().uextend(types::I64, gt);
            let lt = b.ins().uextend(types::I64, lt);
            if signed {
                b.ins().isub(gt, lt)
            } else {
                gt
            }
        }
        UnaryOp::Clip { min, max } => {
            let mut v = x;
            if min > f64::NEG_INFINITY {
                let lo = kernel::iconst(b, min as i64);
                v = if signed {
                    b.ins().smax(v, lo)
                } else {
                    b.ins().umax(v, lo)
                };
            }
            if max < f64::INFINITY {
                let hi = kernel::iconst(b, max as i64);
                v = if signed {
                    b.ins().smin(v, hi)
                } else {
                    b.ins().umin(v, hi)
                };
            }
            v
        }
        UnaryOp::Not => b.ins().bxor_imm_u(x, 1),
        UnaryOp::BitwiseNot => b.ins().bnot(x),
        UnaryOp::IsNaN | UnaryOp::IsInf { .. } => kernel::iconst(b, 0),
        other => return Err(format!("{other:?} is not defined on integers")),
    })
}

pub fn binary(ctx: &mut LowerCtx, op: BinaryOp) -> LowerResult {
    let (x, y) = (ctx.input(0)?, ctx.input(1)?);
    let out = ctx.output(0);
    let (dx, dy) = (domain(x.ty.dtype), domain(y.ty.dtype));
    let width = 8 * x.ty.dtype.size() as i64;
    let scalar = move |b: &mut FunctionBuilder, a: &[Value]| -> Result<Value, String> {
        let rhs = if dy != dx {
            convert(b, dy, dx, a[1])
        } else {
            a[1]
        };
        if let (BinaryOp::BitShiftLeft | BinaryOp::BitShiftRight, Domain::Int { signed }) = (op, dx)
        {
            return Ok(bit_shift(
                b,
                op == BinaryOp::BitShiftLeft,
                signed,
                width,
                a[0],
                rhs,
            ));
        }
        match dx {
            Domain::Int { signed } => binary_int(b, op, signed, a[0], rhs),
            _ => binary_float(b, op, a[0], rhs),
        }
    };
    let vector = move |b: &mut FunctionBuilder, a: &[Value]| binary_float(b, op, a[0], a[1]);
    let vec_ok = matches!(
        op,
        BinaryOp::Add
            | BinaryOp::Sub
            | BinaryOp::Mul
            | BinaryOp::Div
            | BinaryOp::Max
            | BinaryOp::Min
            | BinaryOp::PRelu
            | BinaryOp::Pow
    );
    map(
        ctx,
        &[x, y],
        &out,
        &scalar,
        vec_ok.then_some(&vector as &ScalarFn),
    )
}

pub(super) fn binary_float(
    b: &mut FunctionBuilder,
    op: BinaryOp,
    x: Value,
    y: Value,
) -> Result<Value, String> {
    let cmp = |b: &mut FunctionBuilder, cc: FloatCC| {
        let c = b.ins().fcmp(cc, x, y);
        bool_to_i64(b, c)
    };
    Ok(match op {
        BinaryOp::Add => b.ins().fadd(x, y),
        BinaryOp::Sub => b.ins().fsub(x, y),
        BinaryOp::Mul => b.ins().fmul(x, y),
        BinaryOp::Div => b.ins().fdiv(x, y),
        BinaryOp::Pow => math::pow(b, x, y),
        BinaryOp::Max => b.ins().fmax(x, y),
        BinaryOp::Min => b.ins().fmin(x, y),
        BinaryOp::Mod { fmod } => {
            let q = b.ins().fdiv(x, y);
            let q = b.ins().trunc(q);
            let p = b.ins().fmul(q, y);
            let r = b.ins().fsub(x, p);
            // C fmod: a finite x over an infinite y is x (the quotient truncates to 0,
            // and 0·∞ would make it NaN).
            let ty = b.func.dfg.value_type(x);
            let inf = fconst(b, ty, f64::INFINITY);
            let ay = b.ins().fabs(y);
            let ax = b.ins().fabs(x);
            let y_inf = b.ins().fcmp(FloatCC::Equal, ay, inf);
            let x_finite = b.ins().fcmp(FloatCC::LessThan, ax, inf);
            let keep_x = b.ins().band(y_inf, x_finite);
            let r = b.ins().select(keep_x, x, r);
            if fmod {
                r
            } else {
                // Python semantics: the result takes the divisor's sign, a zero too.
                let zero = fconst(b, ty, 0.0);
                let ry = b.ins().fmul(r, y);
                let adj = b.ins().fadd(r, y);
                let r = fselect(b, FloatCC::LessThan, ry, zero, adj, r);
                let signed_zero = b.ins().fcopysign(zero, y);
                fselect(b, FloatCC::Equal, r, zero, signed_zero, r)
            }
        }
        BinaryOp::PRelu => {
            let ty = b.func.dfg.value_type(x);
            let zero = fconst(b, ty, 0.0);
            let xs = b.ins().fmul(x, y);
            fselect(b, FloatCC::LessThan, x, zero, xs, x)
        }
        BinaryOp::Equal => cmp(b, FloatCC::Equal),
        BinaryOp::Less => cmp(b, FloatCC::LessThan),
        BinaryOp::LessOrEqual => cmp(b, FloatCC::LessThanOrEqual),
        BinaryOp::Greater => cmp(b, FloatCC::GreaterThan),
        BinaryOp::GreaterOrEqual => cmp(b, FloatCC::GreaterThanOrEqual),
        other => return Err(format!("{other:?} is not defined on floats")),
    })
}

/// BitShift of an element of `width` bits (held sign- or zero-extended in an i64) by
/// `n`: amounts outside `0..width` shift everything out, leaving 0, or the sign for
/// an arithmetic right shift (onnx's reference; Cranelift would take them mod 64).
fn bit_shift(
    b: &mut FunctionBuilder,
    left: bool,
    signed: bool,
    width: i64,
    x: Value,
    n: Value,
) -> Value {
    let in_range = b.ins().icmp_imm_u(IntCC::UnsignedLessThan, n, width);
    let (shifted, out_of_range) = if left {
        (b.ins().ishl(x, n), kernel::iconst(b, 0))
    } else if signed {
        (b.ins().sshr(x, n), b.ins().sshr_imm_u(x, 63))
    } else {
        (b.ins().ushr(x, n), kernel::iconst(b, 0))
    };
    b.ins().select(in_range, shifted, out_of_range)
}

fn binary_int(
    b: &mut FunctionBuilder,
    op: BinaryOp,
    signed: bool,
    x: Value,
    y: Value,
) -> Result<Value, String> {
    let cmp = |b: &mut FunctionBuilder, s: IntCC, u: IntCC| {
        let c = b.ins().icmp(if signed { s } else { u }, x, y);
        bool_to_i64(b, c)
    };
    // Cranelift's division traps on a zero divisor and on i64::MIN / -1, which would
    // kill the caller. Division by zero is undefined in ONNX: x / 0 and x % 0 give 0
    // (numpy's values); i64::MIN / -1 wraps to i64::MIN and its remainder is 0. The
    // divisors that trap (0, and -1 when signed) are replaced by 1, then the quotient
    // is fixed up. Narrower types never overflow here: they are sign- or zero-extended
    // to i64 and the result is truncated back, which wraps as the type does.
    let zero_divisor = |b: &mut FunctionBuilder| b.ins().icmp_imm_s(IntCC::Equal, y, 0);
    let minus_one_divisor = |b: &mut FunctionBuilder| b.ins().icmp_imm_s(IntCC::Equal, y, -1);
    let safe_divisor = |b: &mut FunctionBuilder| {
        let one = kernel::iconst(b, 1);
        let z = zero_divisor(b);
        let d = b.ins().select(z, one, y);
        if signed {
            let m = minus_one_divisor(b);
            b.ins().select(m, one, d)
        } else {
            d
        }
    };
    Ok(match op {
        BinaryOp::Add => b.ins().iadd(x, y),
        BinaryOp::Sub => b.ins().isub(x, y),
        BinaryOp::Mul => b.ins().imul(x, y),
        BinaryOp::Div => {
            let d = safe_divisor(b);
            let q = if signed {
                let q = b.ins().sdiv(x, d);
                let m = minus_one_divisor(b);
                let negated = b.ins().ineg(x);
                b.ins().select(m, negated, q)
            } else {
                b.ins().udiv(x, d)
            };
            let z = zero_divisor(b);
            let zero = kernel::iconst(b, 0);
            b.ins().select(z, zero, q)
        }
        BinaryOp::Mod { fmod } => {
            // Divisors 1 (for 0 and -1) leave remainder 0, the value for both.
            let d = safe_divisor(b);
            let r = if signed {
                b.ins().srem(x, d)
            } else {
                b.ins().urem(x, d)
            };
            if fmod || !signed {
                r
            } else {
                let rd = b.ins().bxor(r, d);
                let signs_differ = b.ins().icmp_imm_s(IntCC::SignedLessThan, rd, 0);
                let nz = b.ins().icmp_imm_s(IntCC::NotEqual, r, 0);
                let fix = b.ins().band(signs_differ, nz);
                let adj = b.ins().iadd(r, d);
                b.ins().select(fix, adj, r)
            }
        }
        BinaryOp::Pow => {
            // Integer power by repeated squaring over the 64 exponent bits; negative
            // exponents give 0 (as numpy's integer pow would reject; ONNX leaves it open).
            let one = kernel::iconst(b, 1);
            let mut result = one;
            let mut base = x;
            for bit in 0..63 {
                let set = b.ins().ushr_imm_u(y, bit);
                let set = b.ins().band_imm_u(set, 1);
                let is = b.ins().icmp_imm_s(IntCC::NotEqual, set, 0);
                let m = b.ins().imul(result, base);
                result = b.ins().select(is, m, result);
                base = b.ins().imul(base, base);
            }
            result
        }
        BinaryOp::Max => {
            if signed {
                b.ins().smax(x, y)
            } else {
                b.ins().umax(x, y)
            }
        }
        BinaryOp::Min => {
            if signed {
                b.ins().smin(x, y)
            } else {
                b.ins().umin(x, y)
            }
        }
        BinaryOp::PRelu => {
            let xs = b.ins().imul(x, y);
            let neg = b.ins().icmp_imm_s(IntCC::SignedLessThan, x, 0);
            b.ins().select(neg, xs, x)
        }
        BinaryOp::Equal => cmp(b, IntCC::Equal, IntCC::Equal),
        BinaryOp::Less => cmp(b, IntCC::SignedLessThan, IntCC::UnsignedLessThan),
        BinaryOp::LessOrEqual => cmp(
            b,
            IntCC::SignedLessThanOrEqual,
            IntCC::UnsignedLessThanOrEqual,
        ),
        BinaryOp::Greater => cmp(b, IntCC::SignedGreaterThan, IntCC::UnsignedGreaterThan),
        BinaryOp::GreaterOrEqual => cmp(
            b,
            IntCC::SignedGreaterThanOrEqual,
            IntCC::UnsignedGreaterThanOrEqual,
        ),
        BinaryOp::And | BinaryOp::BitwiseAnd => b.ins().band(x, y),
        BinaryOp::Or | BinaryOp::BitwiseOr => b.ins().bor(x, y),
        BinaryOp::Xor | BinaryOp::BitwiseXor => b.ins().bxor(x, y),
        BinaryOp::BitShiftLeft => b.ins().ishl(x, y),
        BinaryOp::BitShiftRight => b.ins().ushr(x, y),
    })
}

pub fn where_op(ctx: &mut LowerCtx) -> LowerResult {
    let (c, x, y) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
    let out = ctx.output(0);
    let f = |b: &mut FunctionBuilder, a: &[Value]| -> Result<Value, String> {
        let t = b.ins().icmp_imm_s(IntCC::NotEqual, a[0], 0);
        Ok(b.ins().select(t, a[1], a[2]))
    };
    map(ctx, &[c, x, y], &out, &f, None)
}
