//! What tests of generated code share: one seeded random generator ([`Rng`]), the
//! builder of one-node graphs ([`one_node`] over [`In`] operands) and one error measure
//! ([`error`], [`rel_err`], [`compare`], with the per-dtype [`tolerance`]).
//!
//! Include with `#[path = "common/graphs.rs"] mod graphs;`.

#![allow(dead_code)] // each test crate uses a different subset

use nnc::ir::{DType, Graph, Node, Tensor, TensorType};
use nnc::ops::{infer_types, Op};

/// Marsaglia's xorshift64 (13, 7, 17): small, seeded and the same on every machine, so
/// a failing case reproduces from its seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// Seeds are mixed (neighbouring seeds give unrelated streams); the one seed that
    /// would give the all-zero state, a fixed point, is moved off it.
    pub fn new(seed: u64) -> Rng {
        const MIX: u64 = 0x9e37_79b9_7f4a_7c15;
        match MIX ^ seed.wrapping_mul(0x2545_f491_4f6c_dd1d) {
            0 => Rng(MIX),
            state => Rng(state),
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// 32 random bits (the high half, the better mixed one).
    pub fn bits32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// Uniform in [-1, 1), with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }

    /// Uniform in [-1, 1) with 24 random bits: every value exact in float32.
    pub fn uniform_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// Uniform in [-1, 1) on a grid of `1 / steps` (exact in float32 sums of modest
    /// length for small power-of-two `steps`).
    pub fn on_grid(&mut self, steps: u32) -> f64 {
        self.below(2 * steps as usize) as f64 / steps as f64 - 1.0
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in `lo..hi` (`lo < hi`).
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % (hi - lo) as u64) as i64
    }

    /// `n` float32 values uniform in [-scale, scale] ([`Rng::uniform`] rounded).
    pub fn f32s(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n)
            .map(|_| (self.uniform() * scale as f64) as f32)
            .collect()
    }

    /// Random data of `ty`: floats uniform in [-1, 1), integers in [-10, 10]
    /// (unsigned types: [0, 20], so products stay small and exact), bools at random.
    pub fn tensor(&mut self, ty: &TensorType) -> Tensor {
        self.scaled_tensor(ty, 1.0)
    }

    /// [`Rng::tensor`] with floats times `scale`.
    pub fn scaled_tensor(&mut self, ty: &TensorType, scale: f64) -> Tensor {
        let v: Vec<f64> = (0..ty.numel()).map(|_| self.uniform()).collect();
        match ty.dtype {
            DType::Bool => Tensor::from_vec(&ty.shape, v.iter().map(|x| *x > 0.0).collect()),
            d if d.is_int() => {
                let offset = if d.is_signed_int() { 0.0 } else { 10.0 };
                let ints = v.iter().map(|x| (x * 10.0 + offset).round() as i64);
                Tensor::from_vec(&ty.shape, ints.collect()).cast(d)
            }
            d => Tensor::from_vec(&ty.shape, v.iter().map(|x| x * scale).collect()).cast(d),
        }
    }
}

/// One operand of the node under test.
#[derive(Clone, Debug)]
pub enum In {
    /// A graph input, random at run time.
    Runtime(TensorType),
    /// A graph input, random with floats times this scale.
    Scaled(TensorType, f64),
    /// A constant (weights), random at compile time.
    Const(TensorType),
    /// A graph input with these values.
    Given(Tensor),
    /// A constant with these values.
    GivenConst(Tensor),
    /// An omitted optional input.
    Omitted,
}

/// A random graph input of `dtype` and `shape`.
pub fn rt(dtype: DType, shape: &[usize]) -> In {
    In::Runtime(TensorType::new(dtype, shape.to_vec()))
}

/// A random constant of `dtype` and `shape`.
pub fn cst(dtype: DType, shape: &[usize]) -> In {
    In::Const(TensorType::new(dtype, shape.to_vec()))
}

/// A random float32 graph input.
pub fn f32s(shape: &[usize]) -> In {
    rt(DType::F32, shape)
}

/// A graph holding one node (its outputs all graph outputs), and the values of its
/// runtime inputs; random operands come from `Rng::new(seed)` in operand order. `Err`
/// when shape inference refuses the operands.
pub fn try_one_node(op: Op, ins: Vec<In>, seed: u64) -> Result<(Graph, Vec<Tensor>), String> {
    let mut rng = Rng::new(seed);
    let mut g = Graph::default();
    let mut values = vec![];
    let mut node_inputs = vec![];
    let mut types = vec![];
    for (i, input) in ins.into_iter().enumerate() {
        let (value, constant) = match input {
            In::Runtime(ty) => (Some(rng.tensor(&ty)), false),
            In::Scaled(ty, scale) => (Some(rng.scaled_tensor(&ty, scale)), false),
            In::Const(ty) => (Some(rng.tensor(&ty)), true),
            In::Given(t) => (Some(t), false),
            In::GivenConst(t) => (Some(t), true),
            In::Omitted => (None, false),
        };
        let Some(t) = value else {
            node_inputs.push(None);
            types.push(None);
            continue;
        };
        let ty = t.ty();
        let id = if constant {
            g.add_value(format!("w{i}"), ty.clone(), Some(t))
        } else {
            let id = g.add_value(format!("in{i}"), ty.clone(), None);
            g.inputs.push(id);
            values.push(t);
            id
        };
        node_inputs.push(Some(id));
        types.push(Some(ty));
    }
    let outputs: Vec<_> = infer_types(&op, &types)
        .map_err(|e| format!("shape inference of {op:?}: {e}"))?
        .into_iter()
        .enumerate()
        .map(|(k, ty)| {
            let name = if k == 0 {
                "out".into()
            } else {
                format!("out{k}")
            };
            g.add_value(name, ty, None)
        })
        .collect();
    g.outputs.extend(&outputs);
    g.nodes.push(Node {
        name: "node".into(),
        onnx_op: op.name(),
        op,
        inputs: node_inputs,
        outputs,
    });
    Ok((g, values))
}

/// [`try_one_node`] for operands that must be valid.
pub fn one_node(op: Op, ins: Vec<In>, seed: u64) -> (Graph, Vec<Tensor>) {
    try_one_node(op, ins, seed).unwrap_or_else(|e| panic!("{e}"))
}

/// The denominator each element's difference is divided by.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scale {
    /// The largest finite |expected|: the whole-tensor relative error, what kernels
    /// that reorder sums (GEMMs, Winograd) are held to.
    Whole,
    /// |expected| itself, floored at `fraction` of the largest finite |expected| and
    /// at `at_least`: element-wise relative error, for results that may cancel to
    /// almost zero and then carry the rounding error of their terms, not their own.
    Elementwise { fraction: f64, at_least: f64 },
}

/// Each element's error under `scale`: |a − e| over its denominator. Infinite where
/// only one of them is NaN, where infinities differ, or where a nonzero difference
/// meets a zero denominator.
fn element_errors(actual: &[f64], expected: &[f64], scale: Scale) -> Vec<f64> {
    assert_eq!(actual.len(), expected.len(), "element counts differ");
    let largest = expected
        .iter()
        .filter(|v| v.is_finite())
        .fold(0f64, |m, v| m.max(v.abs()));
    let one = |a: f64, e: f64| {
        if a.is_nan() || e.is_nan() {
            return if a.is_nan() && e.is_nan() {
                0.0
            } else {
                f64::INFINITY
            };
        }
        if a.is_infinite() || e.is_infinite() {
            return if a == e { 0.0 } else { f64::INFINITY };
        }
        let denominator = match scale {
            Scale::Whole => largest.max(1e-30),
            Scale::Elementwise { fraction, at_least } => {
                e.abs().max(fraction * largest).max(at_least)
            }
        };
        match (a - e).abs() {
            0.0 => 0.0,
            d if denominator == 0.0 => d * f64::INFINITY,
            d => d / denominator,
        }
    };
    actual
        .iter()
        .zip(expected)
        .map(|(&a, &e)| one(a, e))
        .collect()
}

/// The error of `actual` against `expected` under `scale`: the largest element error
/// (|a − e| over its denominator; infinite where only one side is NaN or infinities
/// differ).
pub fn error_values(actual: &[f64], expected: &[f64], scale: Scale) -> f64 {
    element_errors(actual, expected, scale)
        .into_iter()
        .fold(0f64, f64::max)
}

/// [`error_values`] of two tensors.
pub fn error(actual: &Tensor, expected: &Tensor, scale: Scale) -> f64 {
    error_values(&actual.to_f64_vec(), &expected.to_f64_vec(), scale)
}

/// Max |actual − expected| relative to max |expected| ([`Scale::Whole`]).
pub fn rel_err(actual: &Tensor, expected: &Tensor) -> f64 {
    error(actual, expected, Scale::Whole)
}

/// What the whole-tensor error of generated float code may be against the
/// interpreter (which computes in f64): float32 kernels reorder and fuse their sums.
/// Integers are exact.
pub fn tolerance(d: DType) -> f64 {
    match d {
        DType::F32 => 1e-4,
        DType::F64 => 1e-10,
        DType::F16 | DType::BF16 => 2e-2,
        _ => 0.0,
    }
}

/// The tolerance under [`Scale::Elementwise`], for ops that compute each output from
/// few inputs (indexing, pooling, reductions, normalization): tighter than
/// [`tolerance`]. Integers are exact.
pub fn elementwise_tolerance(d: DType) -> f64 {
    match d {
        DType::F32 => 1e-5,
        DType::F64 => 1e-12,
        DType::F16 | DType::BF16 => 1e-2,
        _ => 0.0,
    }
}

/// Checks that `actual` has `expected`'s dtype and shape and is within `tol` of it
/// under `scale`; `tol == 0` asks for equal values, floats' signs of zero included
/// (NaN matches NaN).
pub fn compare(actual: &Tensor, expected: &Tensor, tol: f64, scale: Scale) -> Result<(), String> {
    if actual.ty() != expected.ty() {
        return Err(format!(
            "type {} vs expected {}",
            actual.ty(),
            expected.ty()
        ));
    }
    let (a, e) = (actual.to_f64_vec(), expected.to_f64_vec());
    if tol == 0.0 {
        if !expected.dtype().is_float() {
            return match actual == expected {
                true => Ok(()),
                false => Err(first_difference(&a, &e, |x, y| x == y)),
            };
        }
        let same = |x: f64, y: f64| {
            (x.is_nan() && y.is_nan()) || (x == y && x.is_sign_negative() == y.is_sign_negative())
        };
        return match a.iter().zip(&e).all(|(&x, &y)| same(x, y)) {
            true => Ok(()),
            false => Err(first_difference(&a, &e, same)),
        };
    }
    let errors = element_errors(&a, &e, scale);
    let (worst, err) =
        errors.iter().copied().enumerate().fold(
            (0, 0f64),
            |(wi, w), (i, x)| if x > w { (i, x) } else { (wi, w) },
        );
    if err <= tol {
        return Ok(());
    }
    Err(format!(
        "error {err:.3e} > {tol:e} (worst: element {worst}, {} vs expected {})",
        a[worst], e[worst]
    ))
}

fn first_difference(a: &[f64], e: &[f64], same: impl Fn(f64, f64) -> bool) -> String {
    match (0..a.len()).find(|&i| !same(a[i], e[i])) {
        Some(i) => format!("element {i}: {} vs expected {}", a[i], e[i]),
        None => "values differ".into(),
    }
}
