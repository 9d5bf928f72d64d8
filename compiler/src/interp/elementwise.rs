//! Unary and binary elementwise ops (numpy broadcasting), Where and Cast.

use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn, Zip};

use super::scalar::{self, Exact, Int, Num, ToExact};
use super::{f64_to_float, float_to_f64, narrow_half, unsupported, widen_half};
use crate::ir::low_precision::E8m0Rounding;
use crate::ir::{DType, Element, Tensor, TensorType};
use crate::ops::{BinaryOp, UnaryOp};
use crate::with_tensor;

/// numpy broadcasting of two shapes.
pub(super) fn broadcast_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
    let rank = a.len().max(b.len());
    let dim = |s: &[usize], i: usize| {
        if i + s.len() < rank {
            1
        } else {
            s[i + s.len() - rank]
        }
    };
    (0..rank)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y || y == 1 => Ok(x),
            (1, y) => Ok(y),
            _ => Err(format!(
                "shapes {a:?} and {b:?} cannot be broadcast together"
            )),
        })
        .collect()
}

/// `f` applied to `a` and `b` broadcast to `shape`.
pub(super) fn zip_map<A: Copy, B: Copy, R>(
    a: &ArrayD<A>,
    b: &ArrayD<B>,
    shape: &[usize],
    f: impl Fn(A, B) -> R,
) -> Result<ArrayD<R>, String> {
    let cannot = |s: &[usize]| format!("shape {s:?} does not broadcast to {shape:?}");
    let av = a.broadcast(IxDyn(shape)).ok_or_else(|| cannot(a.shape()))?;
    let bv = b.broadcast(IxDyn(shape)).ok_or_else(|| cannot(b.shape()))?;
    Ok(Zip::from(&av).and(&bv).map_collect(|&x, &y| f(x, y)))
}

// ---------------------------------------------------------------------------------------
// Unary

pub(super) fn unary(op: UnaryOp, x: &Tensor) -> Result<Tensor, String> {
    if op == UnaryOp::Identity {
        return Ok(x.clone());
    }
    match x {
        Tensor::Bool(a) if op == UnaryOp::Not => Ok(Tensor::Bool(a.mapv(|v| !v))),
        t if t.dtype().is_float() => float_unary(op, t),
        t => with_int!(t, a => int_unary(op, a), _ => Err(unsupported(t.dtype()))),
    }
}

fn int_unary<T: Int>(op: UnaryOp, a: &ArrayD<T>) -> Result<Tensor, String> {
    let y = match op {
        UnaryOp::Relu => a.mapv(|v| v.max(T::ZERO)),
        UnaryOp::Neg => a.mapv(T::neg),
        UnaryOp::Abs => a.mapv(T::abs),
        UnaryOp::Sign => a.mapv(T::sign),
        UnaryOp::BitwiseNot => a.mapv(T::bit_not),
        UnaryOp::Clip { min, max } => {
            // Integer bounds are integral; ceil/floor keep the clamp exact otherwise.
            // min > max gives max, as min(max(x, lo), hi) does.
            let (lo, hi) = (T::from_f64(min.ceil()), T::from_f64(max.floor()));
            a.mapv(|v| v.max(lo).min(hi))
        }
        _ => return Err(format!("{op:?} is not defined for {}", T::DTYPE)),
    };
    Ok(T::wrap(y))
}

fn float_unary(op: UnaryOp, x: &Tensor) -> Result<Tensor, String> {
    if let Tensor::F32(a) = x {
        if let Some(y) = exact_in_f32(op, a) {
            return Ok(Tensor::F32(y));
        }
    }
    let a = float_to_f64(x).ok_or_else(|| unsupported(x.dtype()))?;
    match op {
        UnaryOp::IsNaN => return Ok(Tensor::Bool(a.mapv(f64::is_nan))),
        UnaryOp::IsInf { positive, negative } => {
            let inf = move |v: f64| {
                (positive && v == f64::INFINITY) || (negative && v == f64::NEG_INFINITY)
            };
            return Ok(Tensor::Bool(a.mapv(inf)));
        }
        _ => {}
    }
    let f = float_fn(op).ok_or_else(|| format!("{op:?} is not defined for {}", x.dtype()))?;
    f64_to_float(a.mapv(f), x.dtype())
}

/// The hot CNN activations whose f32 result needs no rounding, or exactly one (the
/// product of two f32s), so native f32 gives the same bits as the f64 path, faster.
fn exact_in_f32(op: UnaryOp, a: &ArrayD<f32>) -> Option<ArrayD<f32>> {
    Some(match op {
        UnaryOp::Relu => a.mapv(|x| if x < 0.0 { 0.0 } else { x }),
        UnaryOp::LeakyRelu { alpha } => a.mapv(|x| if x < 0.0 { alpha * x } else { x }),
        UnaryOp::Neg => a.mapv(|x| -x),
        UnaryOp::Abs => a.mapv(f32::abs),
        _ => return None,
    })
}

/// The real function of a float unary op, evaluated in f64 so that rounding the result
/// to f32 (or f16/bf16) is nearly always the correctly rounded value.
fn float_fn(op: UnaryOp) -> Option<Box<dyn Fn(f64) -> f64>> {
    use std::f64::consts::{FRAC_1_SQRT_2, PI};
    use UnaryOp as U;
    Some(match op {
        U::Identity => Box::new(|x| x),
        // `x < 0` keeps NaN (np.maximum(x, 0) propagates it).
        U::Relu => Box::new(|x| if x < 0.0 { 0.0 } else { x }),
        U::LeakyRelu { alpha } => {
            let alpha = f64::from(alpha);
            Box::new(move |x| if x < 0.0 { alpha * x } else { x })
        }
        U::Clip { min, max } => Box::new(move |x| x.max_nan(min).min_nan(max)),
        U::Sigmoid => Box::new(sigmoid),
        U::HardSigmoid { alpha, beta } => {
            let (alpha, beta) = (f64::from(alpha), f64::from(beta));
            Box::new(move |x| (alpha * x + beta).min_nan(1.0).max_nan(0.0))
        }
        U::HardSwish => Box::new(|x| x * (x / 6.0 + 0.5).min_nan(1.0).max_nan(0.0)),
        U::Tanh => Box::new(f64::tanh),
        U::Exp => Box::new(f64::exp),
        U::Log => Box::new(f64::ln),
        U::Sqrt => Box::new(f64::sqrt),
        U::Reciprocal => Box::new(|x| 1.0 / x),
        U::Neg => Box::new(|x| -x),
        U::Abs => Box::new(f64::abs),
        U::Erf => Box::new(scalar::erf),
        // 0.5·x·(1 + erf(x/√2)) = 0.5·x·erfc(−x/√2), which keeps its relative accuracy
        // for large negative x where 1 + erf cancels.
        U::Gelu { tanh: false } => Box::new(|x| 0.5 * x * scalar::erfc(-x * FRAC_1_SQRT_2)),
        U::Gelu { tanh: true } => Box::new(|x| {
            let inner = (2.0 / PI).sqrt() * (x + 0.044_715 * x * x * x);
            0.5 * x * (1.0 + inner.tanh())
        }),
        U::Softplus => Box::new(softplus),
        U::Softsign => Box::new(|x| x / (1.0 + x.abs())),
        U::Elu { alpha } => {
            let alpha = f64::from(alpha);
            Box::new(move |x| if x < 0.0 { alpha * x.exp_m1() } else { x })
        }
        U::Selu { alpha, gamma } => {
            let (alpha, gamma) = (f64::from(alpha), f64::from(gamma));
            Box::new(move |x| {
                if x > 0.0 {
                    gamma * x
                } else {
                    gamma * alpha * x.exp_m1()
                }
            })
        }
        U::Celu { alpha } => {
            let alpha = f64::from(alpha);
            Box::new(move |x| {
                if x > 0.0 {
                    x
                } else {
                    alpha * (x / alpha).exp_m1()
                }
            })
        }
        U::ThresholdedRelu { alpha } => {
            let alpha = f64::from(alpha);
            Box::new(move |x| if x > alpha || x.is_nan() { x } else { 0.0 })
        }
        U::Mish => Box::new(|x| x * softplus(x).tanh()),
        U::Floor => Box::new(f64::floor),
        U::Ceil => Box::new(f64::ceil),
        U::Round => Box::new(f64::round_ties_even),
        U::Sign => Box::new(<f64 as Num>::sign),
        U::Sin => Box::new(f64::sin),
        U::Cos => Box::new(f64::cos),
        U::Tan => Box::new(f64::tan),
        U::Asin => Box::new(f64::asin),
        U::Acos => Box::new(f64::acos),
        U::Atan => Box::new(f64::atan),
        U::Sinh => Box::new(f64::sinh),
        U::Cosh => Box::new(f64::cosh),
        U::Asinh => Box::new(f64::asinh),
        U::Acosh => Box::new(f64::acosh),
        U::Atanh => Box::new(f64::atanh),
        U::Not | U::BitwiseNot | U::IsNaN | U::IsInf { .. } => return None,
    })
}

/// 1/(1+e^−x) without overflow for large |x|.
fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// ln(1 + e^x) = max(x, 0) + ln(1 + e^−|x|), numpy's `logaddexp(0, x)`.
fn softplus(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    x.max(0.0) + (-x.abs()).exp().ln_1p()
}

// ---------------------------------------------------------------------------------------
// Binary

pub(super) fn binary(op: BinaryOp, a: &Tensor, b: &Tensor) -> Result<Tensor, String> {
    let shape = broadcast_shape(a.shape(), b.shape())?;
    if op == BinaryOp::PRelu && shape != a.shape() {
        return Err(format!(
            "slope {:?} does not broadcast to {:?}",
            b.shape(),
            a.shape()
        ));
    }
    match op {
        BinaryOp::Pow => return pow(a, b, &shape),
        BinaryOp::BitShiftLeft | BinaryOp::BitShiftRight => return shift(op, a, b, &shape),
        _ => {}
    }
    if a.dtype() != b.dtype() {
        return Err(format!(
            "input types differ: {} and {}",
            a.dtype(),
            b.dtype()
        ));
    }
    match op {
        BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => logical(op, a, b, &shape),
        BinaryOp::BitwiseAnd | BinaryOp::BitwiseOr | BinaryOp::BitwiseXor => {
            bitwise(op, a, b, &shape)
        }
        _ => arithmetic(op, a, b, &shape),
    }
}

/// Arithmetic, comparisons, Max/Min, Mod and PRelu on two tensors of one type.
fn arithmetic(op: BinaryOp, a: &Tensor, b: &Tensor, shape: &[usize]) -> Result<Tensor, String> {
    match (a, b) {
        (Tensor::Bool(x), Tensor::Bool(y)) if op.is_comparison() => compare(op, x, y, shape),
        (Tensor::F16(_), _) | (Tensor::BF16(_), _) => {
            // f32 results of + − × ÷ round to f16/bf16 as if computed there directly.
            let r = arithmetic(op, &widen_half(a), &widen_half(b), shape)?;
            Ok(narrow_half(r, a.dtype()))
        }
        _ => with_pair!(a, b, x, y => num_binary(op, x, y, shape),
            [F32, F64, I8, I16, I32, I64, U8, U16, U32, U64],
            _ => Err(format!("{op:?} is not defined for {}", a.dtype()))),
    }
}

fn num_binary<T: Num>(
    op: BinaryOp,
    x: &ArrayD<T>,
    y: &ArrayD<T>,
    shape: &[usize],
) -> Result<Tensor, String> {
    let apply = |f: fn(T, T) -> T| zip_map(x, y, shape, f).map(T::wrap);
    match op {
        BinaryOp::Add => apply(T::add),
        BinaryOp::Sub => apply(T::sub),
        BinaryOp::Mul => apply(T::mul),
        // Integer x / 0 and x % 0 are 0 (see `Num::div`), as in the generated code.
        BinaryOp::Div => apply(T::div),
        BinaryOp::Mod { fmod } => apply(if fmod { T::rem_trunc } else { T::rem_floor }),
        BinaryOp::Max => apply(T::max_nan),
        BinaryOp::Min => apply(T::min_nan),
        BinaryOp::PRelu => apply(|v, slope| if v < T::ZERO { v.mul(slope) } else { v }),
        _ if op.is_comparison() => compare(op, x, y, shape),
        _ => Err(format!("{op:?} is not defined for {}", T::DTYPE)),
    }
}

fn compare<T: Element>(
    op: BinaryOp,
    x: &ArrayD<T>,
    y: &ArrayD<T>,
    shape: &[usize],
) -> Result<Tensor, String> {
    let f: fn(T, T) -> bool = match op {
        BinaryOp::Equal => |a, b| a == b,
        BinaryOp::Less => |a, b| a < b,
        BinaryOp::LessOrEqual => |a, b| a <= b,
        BinaryOp::Greater => |a, b| a > b,
        BinaryOp::GreaterOrEqual => |a, b| a >= b,
        _ => return Err(format!("{op:?} is not a comparison")),
    };
    zip_map(x, y, shape, f).map(Tensor::Bool)
}

fn logical(op: BinaryOp, a: &Tensor, b: &Tensor, shape: &[usize]) -> Result<Tensor, String> {
    let (Tensor::Bool(x), Tensor::Bool(y)) = (a, b) else {
        return Err(format!("{op:?} needs bool inputs, got {}", a.dtype()));
    };
    let f: fn(bool, bool) -> bool = match op {
        BinaryOp::And => |p, q| p & q,
        BinaryOp::Or => |p, q| p | q,
        _ => |p, q| p ^ q,
    };
    zip_map(x, y, shape, f).map(Tensor::Bool)
}

fn bitwise(op: BinaryOp, a: &Tensor, b: &Tensor, shape: &[usize]) -> Result<Tensor, String> {
    fn go<T: Int>(
        op: BinaryOp,
        x: &ArrayD<T>,
        y: &ArrayD<T>,
        shape: &[usize],
    ) -> Result<Tensor, String> {
        let f: fn(T, T) -> T = match op {
            BinaryOp::BitwiseAnd => T::bit_and,
            BinaryOp::BitwiseOr => T::bit_or,
            _ => T::bit_xor,
        };
        zip_map(x, y, shape, f).map(T::wrap)
    }
    with_pair!(a, b, x, y => go(op, x, y, shape),
        [I8, I16, I32, I64, U8, U16, U32, U64],
        _ => Err(format!("{op:?} needs integer inputs, got {}", a.dtype())))
}

/// BitShift. The amounts may be of any integer type; amounts at or past the width give
/// numpy's results (0, or the sign for arithmetic right shifts).
fn shift(op: BinaryOp, a: &Tensor, b: &Tensor, shape: &[usize]) -> Result<Tensor, String> {
    if !b.dtype().is_int() {
        return Err(format!("shift amounts must be integers, got {}", b.dtype()));
    }
    let amounts: ArrayD<i64> = with_tensor!(b, v => v.mapv(|n| n.to_i64()));
    let left = op == BinaryOp::BitShiftLeft;
    with_int!(a, x => {
        let y = zip_map(x, &amounts, shape, |v, n| if left { v.shift_left(n) } else { v.shift_right(n) })?;
        Ok(Element::wrap(y))
    }, _ => Err(format!("{op:?} needs integer inputs, got {}", a.dtype())))
}

/// Pow: the result has the base's type (`np.power(a, b).astype(a.dtype)`). Float bases
/// are computed in f64; integer bases with integer exponents exactly (wrapping).
fn pow(a: &Tensor, b: &Tensor, shape: &[usize]) -> Result<Tensor, String> {
    let dtype = a.dtype();
    if dtype.is_float() {
        let base = float_to_f64(a).ok_or_else(|| unsupported(dtype))?;
        let exponent = numeric_to_f64(b)?;
        return f64_to_float(zip_map(&base, &exponent, shape, f64::powf)?, dtype);
    }
    if b.dtype().is_float() {
        // numpy computes int ** float in float64; astype truncates (here: saturating).
        let exponent = numeric_to_f64(b)?;
        return with_int!(a, x => int_pow_float(x, &exponent, shape), _ => Err(unsupported(dtype)));
    }
    if !b.dtype().is_int() {
        return Err(format!(
            "Pow exponent of type {} is not supported",
            b.dtype()
        ));
    }
    let exponent: ArrayD<i64> = with_tensor!(b, v => v.mapv(|n| n.to_i64()));
    with_int!(a, x => int_pow(x, &exponent, shape), _ => Err(unsupported(dtype)))
}

fn int_pow_float<T: Int>(
    x: &ArrayD<T>,
    e: &ArrayD<f64>,
    shape: &[usize],
) -> Result<Tensor, String> {
    zip_map(x, e, shape, |v, e| T::from_f64(v.to_f64().powf(e))).map(T::wrap)
}

fn int_pow<T: Int>(x: &ArrayD<T>, e: &ArrayD<i64>, shape: &[usize]) -> Result<Tensor, String> {
    let zero_to_negative = zip_map(x, e, shape, |v, n| v.is_zero() && n < 0)?;
    if zero_to_negative.iter().any(|&z| z) {
        return Err("integer zero raised to a negative power".into());
    }
    let y = zip_map(x, e, shape, |v, n| {
        if n >= 0 {
            v.pow_u64(n as u64)
        } else if v == T::ONE {
            v
        } else if T::SIGNED && v == T::ONE.neg() {
            // (−1)^n is −1 for odd n, 1 for even n.
            if n % 2 == 0 {
                T::ONE
            } else {
                v
            }
        } else {
            // |v| ≥ 2: v^n for n < 0 truncates to zero.
            T::ZERO
        }
    })?;
    Ok(T::wrap(y))
}

/// Any numeric tensor's elements as f64 (Pow exponents).
fn numeric_to_f64(t: &Tensor) -> Result<ArrayD<f64>, String> {
    if t.dtype() == DType::Bool {
        return Err(unsupported(DType::Bool));
    }
    Ok(with_tensor!(t, a => a.mapv(|v| v.to_f64())))
}

// ---------------------------------------------------------------------------------------
// Where and Cast

pub(super) fn where_(cond: &Tensor, x: &Tensor, y: &Tensor) -> Result<Tensor, String> {
    let Tensor::Bool(c) = cond else {
        return Err(format!("condition must be bool, got {}", cond.dtype()));
    };
    let shape = broadcast_shape(&broadcast_shape(c.shape(), x.shape())?, y.shape())?;
    fn select<T: Element>(
        c: &ArrayD<bool>,
        x: &ArrayD<T>,
        y: &ArrayD<T>,
        shape: &[usize],
    ) -> Result<Tensor, String> {
        let dim = IxDyn(shape);
        let cannot = || format!("cannot broadcast to {shape:?}");
        let (cv, xv, yv) = (
            c.broadcast(dim.clone()).ok_or_else(cannot)?,
            x.broadcast(dim.clone()).ok_or_else(cannot)?,
            y.broadcast(dim).ok_or_else(cannot)?,
        );
        let out = Zip::from(&cv)
            .and(&xv)
            .and(&yv)
            .map_collect(|&c, &a, &b| if c { a } else { b });
        Ok(T::wrap(out))
    }
    with_pair!(x, y, a, b => select(c, a, b, &shape),
        [F32, F64, F16, BF16, I8, I16, I32, I64, U8, U16, U32, U64, Bool],
        _ => Err(format!("input types differ: {} and {}", x.dtype(), y.dtype())))
}

/// ONNX Cast. Float → integer truncates toward zero and saturates (NaN → 0);
/// integer → integer keeps the low bits (numpy `astype`); anything → bool is `!= 0`
/// (NaN → true). Every conversion to a float type rounds once, to nearest even.
pub fn cast(t: &Tensor, to: DType) -> Tensor {
    if t.dtype() == to {
        return t.clone();
    }
    fn map<R>(t: &Tensor, f: impl Fn(Exact) -> R) -> ArrayD<R> {
        with_tensor!(t, a => a.map(|v| f(v.exact())))
    }
    fn int<D: Int>(t: &Tensor) -> ArrayD<D> {
        map(t, |v| match v {
            Exact::Float(f) => D::from_f64(f),
            Exact::Int(i) => D::from_i128_wrapping(i),
        })
    }
    match to {
        DType::F64 => Tensor::F64(map(t, |v| match v {
            Exact::Float(f) => f,
            Exact::Int(i) => i as f64,
        })),
        DType::F32 => Tensor::F32(map(t, |v| match v {
            Exact::Float(f) => f as f32,
            Exact::Int(i) => i as f32,
        })),
        DType::F16 => Tensor::F16(map(t, |v| match v {
            Exact::Float(f) => scalar::f16_of(f),
            Exact::Int(i) => f16::from_f32(scalar::i128_to_f32_odd(i)),
        })),
        DType::BF16 => Tensor::BF16(map(t, |v| match v {
            Exact::Float(f) => scalar::bf16_of(f),
            Exact::Int(i) => bf16::from_f32(scalar::i128_to_f32_odd(i)),
        })),
        DType::Bool => Tensor::Bool(map(t, |v| match v {
            Exact::Float(f) => f != 0.0,
            Exact::Int(i) => i != 0,
        })),
        DType::I8 => Tensor::I8(int(t)),
        DType::I16 => Tensor::I16(int(t)),
        DType::I32 => Tensor::I32(int(t)),
        DType::I64 => Tensor::I64(int(t)),
        DType::U8 => Tensor::U8(int(t)),
        DType::U16 => Tensor::U16(int(t)),
        DType::U32 => Tensor::U32(int(t)),
        DType::U64 => Tensor::U64(int(t)),
        d => cast_codes(t, d, true, E8m0Rounding::default()),
    }
}

/// ONNX Cast to or from a low-precision type, with Cast's `saturate` and `round_mode`
/// (see [`crate::ir::low_precision`]): through float32, which holds every value of
/// every low-precision type exactly.
/// BitCast: the input's little-endian bytes read as `to` (a type of the same width).
pub fn bit_cast(t: &Tensor, to: DType) -> Result<Tensor, String> {
    let ty = TensorType::new(to, t.shape().to_vec());
    Tensor::from_le_bytes(&ty, &t.to_le_bytes())
        .ok_or_else(|| format!("BitCast from {} to {to}: the widths differ", t.dtype()))
}

pub fn cast_codes(t: &Tensor, to: DType, saturate: bool, rounding: E8m0Rounding) -> Tensor {
    let Some(format) = to.low_precision() else {
        return cast(t, to);
    };
    let values = match t.dtype() {
        DType::F32 => t.clone(),
        _ => cast(t, DType::F32),
    };
    let Tensor::F32(a) = values else {
        unreachable!("cast to float32")
    };
    let codes = Tensor::U8(a.mapv(|x| format.encode(x, saturate, rounding)));
    codes.with_codes_as(to)
}
