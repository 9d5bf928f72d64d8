//! Float unary functions and the fused activations on one Cranelift value (a scalar or
//! an f32x4): what elementwise lowering computes and what every Cranelift kernel's
//! epilogue applies, written once for both.

use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::FunctionBuilder;

use super::math;
use crate::ops::UnaryOp;

pub(crate) fn fconst(b: &mut FunctionBuilder, ty: Type, v: f64) -> Value {
    match ty {
        types::F32 => b.ins().f32const(v as f32),
        types::F64 => b.ins().f64const(v),
        types::F32X4 => {
            let s = b.ins().f32const(v as f32);
            b.ins().splat(types::F32X4, s)
        }
        _ => b.ins().iconst(types::I64, v as i64),
    }
}

/// `cond(x, y) ? a : c` for floats: `select` on scalars, a lane mask on vectors.
pub(crate) fn fselect(
    b: &mut FunctionBuilder,
    cc: FloatCC,
    x: Value,
    y: Value,
    a: Value,
    c: Value,
) -> Value {
    let ty = b.func.dfg.value_type(a);
    let m = b.ins().fcmp(cc, x, y);
    if ty.is_vector() {
        let m = b.ins().bitcast(ty, MemFlagsData::new(), m);
        b.ins().bitselect(m, a, c)
    } else {
        b.ins().select(m, a, c)
    }
}

pub(crate) fn bool_to_i64(b: &mut FunctionBuilder, c: Value) -> Value {
    b.ins().uextend(types::I64, c)
}

/// A fused activation (see [`crate::ops::Activation`]) of a float scalar or vector.
pub(crate) fn activation(
    b: &mut FunctionBuilder,
    act: crate::ops::Activation,
    x: Value,
) -> Result<Value, String> {
    use crate::ops::Activation;
    match act {
        Activation::None => Ok(x),
        Activation::Silu => {
            let s = math::sigmoid(b, x);
            Ok(b.ins().fmul(x, s))
        }
        // The formula exporters write, `x·0.5·(1 + erf(x/√2))`, which the fused pattern
        // computed: half the work of `math::gelu_erf`, whose accurate negative tail
        // also evaluates erfc.
        Activation::Gelu { tanh: false } => {
            let ty = b.func.dfg.value_type(x);
            let r = fconst(b, ty, std::f64::consts::FRAC_1_SQRT_2);
            let z = b.ins().fmul(x, r);
            let e = math::erf(b, z);
            let one = fconst(b, ty, 1.0);
            let p = b.ins().fadd(e, one);
            let half = fconst(b, ty, 0.5);
            let h = b.ins().fmul(x, half);
            Ok(b.ins().fmul(h, p))
        }
        a => unary_float(b, a.as_unary().expect("a unary activation"), x),
    }
}

pub(crate) fn unary_float(b: &mut FunctionBuilder, op: UnaryOp, x: Value) -> Result<Value, String> {
    let ty = b.func.dfg.value_type(x);
    let zero = fconst(b, ty, 0.0);
    let one = fconst(b, ty, 1.0);
    Ok(match op {
        UnaryOp::Identity => x,
        UnaryOp::Relu => fselect(b, FloatCC::LessThan, x, zero, zero, x),
        UnaryOp::LeakyRelu { alpha } => {
            let s = fconst(b, ty, alpha as f64);
            let xs = b.ins().fmul(x, s);
            fselect(b, FloatCC::LessThan, x, zero, xs, x)
        }
        UnaryOp::Clip { min, max } => {
            let mut v = x;
            if min > f64::NEG_INFINITY {
                let lo = fconst(b, ty, min);
                v = fselect(b, FloatCC::LessThan, v, lo, lo, v);
            }
            if max < f64::INFINITY {
                let hi = fconst(b, ty, max);
                v = fselect(b, FloatCC::GreaterThan, v, hi, hi, v);
            }
            v
        }
        UnaryOp::Sigmoid => math::sigmoid(b, x),
        UnaryOp::HardSigmoid { alpha, beta } => {
            let (a, c) = (fconst(b, ty, alpha as f64), fconst(b, ty, beta as f64));
            let v = b.ins().fmul(x, a);
            let v = b.ins().fadd(v, c);
            clamp01(b, v, zero, one)
        }
        UnaryOp::HardSwish => {
            let (a, c) = (fconst(b, ty, 1.0 / 6.0), fconst(b, ty, 0.5));
            let v = b.ins().fmul(x, a);
            let v = b.ins().fadd(v, c);
            let v = clamp01(b, v, zero, one);
            b.ins().fmul(x, v)
        }
        UnaryOp::Tanh => math::tanh(b, x),
        UnaryOp::Exp => math::exp(b, x),
        UnaryOp::Log => math::log(b, x),
        UnaryOp::Sqrt => b.ins().sqrt(x),
        UnaryOp::Reciprocal => b.ins().fdiv(one, x),
        UnaryOp::Neg => b.ins().fneg(x),
        UnaryOp::Abs => b.ins().fabs(x),
        UnaryOp::Erf => math::erf(b, x),
        UnaryOp::Gelu { tanh: false } => math::gelu_erf(b, x),
        UnaryOp::Gelu { tanh: true } => math::gelu_tanh(b, x),
        UnaryOp::Softplus => math::softplus(b, x),
        UnaryOp::Softsign => {
            let a = b.ins().fabs(x);
            let d = b.ins().fadd(a, one);
            b.ins().fdiv(x, d)
        }
        UnaryOp::Elu { alpha } => {
            let e = expm1ish(b, x, one);
            let a = fconst(b, ty, alpha as f64);
            let neg = b.ins().fmul(e, a);
            fselect(b, FloatCC::LessThan, x, zero, neg, x)
        }
        UnaryOp::Selu { alpha, gamma } => {
            let e = expm1ish(b, x, one);
            let a = fconst(b, ty, alpha as f64);
            let g = fconst(b, ty, gamma as f64);
            let neg = b.ins().fmul(e, a);
            let v = fselect(b, FloatCC::GreaterThan, x, zero, x, neg);
            b.ins().fmul(v, g)
        }
        UnaryOp::Celu { alpha } => {
            let a = fconst(b, ty, alpha as f64);
            let xa = b.ins().fdiv(x, a);
            let e = expm1ish(b, xa, one);
            let neg = b.ins().fmul(e, a);
            fselect(b, FloatCC::GreaterThan, x, zero, x, neg)
        }
        UnaryOp::ThresholdedRelu { alpha } => {
            let a = fconst(b, ty, alpha as f64);
            fselect(b, FloatCC::GreaterThan, x, a, x, zero)
        }
        UnaryOp::Mish => {
            let sp = math::softplus(b, x);
            let t = math::tanh(b, sp);
            b.ins().fmul(x, t)
        }
        UnaryOp::Floor => b.ins().floor(x),
        UnaryOp::Ceil => b.ins().ceil(x),
        UnaryOp::Round => b.ins().nearest(x),
        UnaryOp::Sign => {
            let m1 = fconst(b, ty, -1.0);
            let v = fselect(b, FloatCC::LessThan, x, zero, m1, zero);
            let v = fselect(b, FloatCC::GreaterThan, x, zero, one, v);
            // NaN stays NaN.
            fselect(b, FloatCC::Unordered, x, x, x, v)
        }
        UnaryOp::Sin => math::sin(b, x),
        UnaryOp::Cos => math::cos(b, x),
        UnaryOp::Tan => math::tan(b, x),
        UnaryOp::Asin => math::asin(b, x),
        UnaryOp::Acos => math::acos(b, x),
        UnaryOp::Atan => math::atan(b, x),
        UnaryOp::Sinh => math::sinh(b, x),
        UnaryOp::Cosh => math::cosh(b, x),
        UnaryOp::Asinh => math::asinh(b, x),
        UnaryOp::Acosh => math::acosh(b, x),
        UnaryOp::Atanh => math::atanh(b, x),
        UnaryOp::IsNaN => {
            let c = b.ins().fcmp(FloatCC::Unordered, x, x);
            bool_to_i64(b, c)
        }
        UnaryOp::IsInf { positive, negative } => {
            let inf = fconst(b, ty, f64::INFINITY);
            let ninf = fconst(b, ty, f64::NEG_INFINITY);
            let p = b.ins().fcmp(FloatCC::Equal, x, inf);
            let n = b.ins().fcmp(FloatCC::Equal, x, ninf);
            let f = b.ins().iconst(types::I8, 0);
            let p = if positive { p } else { f };
            let n = if negative { n } else { f };
            let c = b.ins().bor(p, n);
            bool_to_i64(b, c)
        }
        UnaryOp::Not | UnaryOp::BitwiseNot => {
            return Err(format!("{op:?} is not defined on floats"))
        }
    })
}

/// `exp(x) - 1` (adequate away from 0 where ONNX's tolerance is absolute).
fn expm1ish(b: &mut FunctionBuilder, x: Value, one: Value) -> Value {
    let e = math::exp(b, x);
    b.ins().fsub(e, one)
}

fn clamp01(b: &mut FunctionBuilder, v: Value, zero: Value, one: Value) -> Value {
    let v = fselect(b, FloatCC::LessThan, v, zero, zero, v);
    fselect(b, FloatCC::GreaterThan, v, one, one, v)
}
