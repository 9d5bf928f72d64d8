//! Hand-computed cases for every op family of the reference interpreter, plus naive
//! nested-loop references for Conv, ConvTranspose, pooling and MatMul. Every evaluation
//! also asserts that the output types equal `ops::infer_types`.

#[path = "common/graphs.rs"]
mod graphs;

use graphs::Rng;
use half::f16;
use nnc::interp::{cast, eval_op, run_graph, run_graph_all};
use nnc::ir::{DType, Element, Graph, Node, Tensor, TensorType, ValueId};
use nnc::ops::*;

// ---------------------------------------------------------------------------------------
// Helpers

/// Evaluates `op`, checks the result types against shape inference, returns the outputs.
fn run(op: &Op, inputs: &[Option<&Tensor>]) -> Vec<Tensor> {
    let out = eval_op(op, inputs).unwrap_or_else(|e| panic!("{e}"));
    let types: Vec<Option<TensorType>> = inputs.iter().map(|t| t.map(Tensor::ty)).collect();
    let want = infer_types(op, &types).expect("shape inference");
    let got: Vec<TensorType> = out.iter().map(Tensor::ty).collect();
    assert_eq!(got, want, "output types of {op:?}");
    out
}

fn run1(op: &Op, inputs: &[&Tensor]) -> Tensor {
    let inputs: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
    run(op, &inputs).remove(0)
}

fn t<T: Element>(shape: &[usize], data: &[T]) -> Tensor {
    Tensor::from_vec(shape, data.to_vec())
}

fn scalar<T: Element>(v: T) -> Tensor {
    Tensor::scalar(v)
}

/// Asserts shape, dtype and values within `tol` (absolute + relative); NaN matches NaN.
fn assert_close(got: &Tensor, shape: &[usize], want: &[f64], tol: f64) {
    assert_eq!(got.shape(), shape, "shape");
    let values = got.to_f64_vec();
    assert_eq!(values.len(), want.len(), "element count");
    for (i, (g, w)) in values.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(ok, "element {i}: got {g}, want {w} (all: {values:?})");
    }
}

/// Deterministic pseudo-random values in [-1, 1) on a 1/64 grid (exact in f32 sums of
/// modest length).
fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| rng.on_grid(64) as f32).collect()
}

/// Calls `f` with every multi-index of `shape` in row-major order.
fn for_each_index(shape: &[usize], mut f: impl FnMut(&[usize])) {
    if shape.contains(&0) {
        return;
    }
    let mut index = vec![0; shape.len()];
    loop {
        f(&index);
        let mut axis = shape.len();
        loop {
            if axis == 0 {
                return;
            }
            axis -= 1;
            index[axis] += 1;
            if index[axis] < shape[axis] {
                break;
            }
            index[axis] = 0;
        }
    }
}

fn flat(index: &[usize], shape: &[usize]) -> usize {
    index.iter().zip(shape).fold(0, |acc, (i, d)| acc * d + i)
}

fn unary(u: UnaryOp) -> Op {
    Op::Unary(u)
}

fn binary(b: BinaryOp) -> Op {
    Op::Binary(b)
}

// ---------------------------------------------------------------------------------------
// Elementwise

#[test]
fn add_broadcasts_like_numpy() {
    let a = t(&[2, 3], &[1f32, 2., 3., 4., 5., 6.]);
    let b = t(&[3], &[10f32, 20., 30.]);
    assert_close(
        &run1(&binary(BinaryOp::Add), &[&a, &b]),
        &[2, 3],
        &[11., 22., 33., 14., 25., 36.],
        0.0,
    );
    let col = t(&[2, 1], &[1f32, 2.]);
    let row = t(&[1, 3], &[10f32, 20., 30.]);
    assert_close(
        &run1(&binary(BinaryOp::Add), &[&col, &row]),
        &[2, 3],
        &[11., 21., 31., 12., 22., 32.],
        0.0,
    );
    let s = scalar(100f32);
    assert_close(
        &run1(&binary(BinaryOp::Sub), &[&s, &col]),
        &[2, 1],
        &[99., 98.],
        0.0,
    );
    let bad = t(&[2], &[1f32, 2.]);
    assert!(eval_op(&binary(BinaryOp::Add), &[Some(&a), Some(&bad)]).is_err());
}

#[test]
fn integer_arithmetic_wraps_and_division_truncates() {
    let a = t(&[5], &[7i32, -7, 7, -7, i32::MIN]);
    let b = t(&[5], &[2i32, 2, -2, -2, -1]);
    assert_eq!(
        run1(&binary(BinaryOp::Div), &[&a, &b]),
        t(&[5], &[3i32, -3, -3, 3, i32::MIN])
    );
    let max = t(&[1], &[i64::MAX]);
    let one = t(&[1], &[1i64]);
    assert_eq!(
        run1(&binary(BinaryOp::Add), &[&max, &one]),
        t(&[1], &[i64::MIN])
    );
    let x = t(&[2], &[200u8, 3]);
    assert_eq!(run1(&binary(BinaryOp::Mul), &[&x, &x]), t(&[2], &[64u8, 9]));
    assert_eq!(
        run1(
            &binary(BinaryOp::Sub),
            &[&t(&[1], &[0u16]), &t(&[1], &[1u16])]
        ),
        t(&[1], &[u16::MAX])
    );
}

/// Integer division and remainder by zero are undefined in ONNX; nnc defines them as 0
/// (numpy's values) in the interpreter and the generated code alike, and
/// `MIN / -1` wraps.
#[test]
fn integer_division_by_zero_gives_zero_and_min_over_minus_one_wraps() {
    let a = t(&[3], &[7i64, -7, i64::MIN]);
    let z = t(&[3], &[0i64, 0, -1]);
    assert_eq!(
        run1(&binary(BinaryOp::Div), &[&a, &z]),
        t(&[3], &[0i64, 0, i64::MIN])
    );
    for fmod in [false, true] {
        assert_eq!(
            run1(&binary(BinaryOp::Mod { fmod }), &[&a, &z]),
            t(&[3], &[0i64, 0, 0])
        );
    }
    let a8 = t(&[2], &[i8::MIN, 5]);
    let z8 = t(&[2], &[-1i8, 0]);
    assert_eq!(
        run1(&binary(BinaryOp::Div), &[&a8, &z8]),
        t(&[2], &[i8::MIN, 0])
    );
    let u = t(&[1], &[9u32]);
    let zu = t(&[1], &[0u32]);
    assert_eq!(run1(&binary(BinaryOp::Div), &[&u, &zu]), t(&[1], &[0u32]));
    // Float division by zero is IEEE.
    let f = run1(
        &binary(BinaryOp::Div),
        &[&t(&[2], &[1f32, -1.]), &t(&[2], &[0f32, 0.])],
    );
    assert_close(&f, &[2], &[f64::INFINITY, f64::NEG_INFINITY], 0.0);
}

#[test]
fn mod_follows_python_or_c_signs() {
    let a = t(&[5], &[-7i32, 7, -7, 7, 0]);
    let b = t(&[5], &[2i32, 2, -2, -2, 3]);
    assert_eq!(
        run1(&binary(BinaryOp::Mod { fmod: false }), &[&a, &b]),
        t(&[5], &[1i32, 1, -1, -1, 0])
    );
    assert_eq!(
        run1(&binary(BinaryOp::Mod { fmod: true }), &[&a, &b]),
        t(&[5], &[-1i32, 1, -1, 1, 0])
    );
    let x = t(&[4], &[-7.5f64, 7.5, -7.5, 7.5]);
    let y = t(&[4], &[2f64, 2., -2., -2.]);
    assert_close(
        &run1(&binary(BinaryOp::Mod { fmod: false }), &[&x, &y]),
        &[4],
        &[0.5, 1.5, -1.5, -0.5],
        0.0,
    );
    assert_close(
        &run1(&binary(BinaryOp::Mod { fmod: true }), &[&x, &y]),
        &[4],
        &[-1.5, 1.5, -1.5, 1.5],
        0.0,
    );
    // numpy gives a zero remainder the divisor's sign.
    let r = run1(
        &binary(BinaryOp::Mod { fmod: false }),
        &[&t(&[1], &[4f32]), &t(&[1], &[-2f32])],
    );
    assert!(r.to_f64_vec()[0] == 0.0 && r.to_f64_vec()[0].is_sign_negative());
}

#[test]
fn pow_handles_integer_and_mixed_types() {
    let base = t(&[7], &[2i32, -3, 2, 1, -1, -1, 5]);
    let exp = t(&[7], &[10i32, 3, -1, -5, -3, -4, 0]);
    assert_eq!(
        run1(&binary(BinaryOp::Pow), &[&base, &exp]),
        t(&[7], &[1024i32, -27, 0, 1, -1, 1, 1])
    );
    assert_eq!(
        run1(
            &binary(BinaryOp::Pow),
            &[&t(&[1], &[2u8]), &t(&[1], &[9u8])]
        ),
        t(&[1], &[0u8])
    );
    assert!(eval_op(
        &binary(BinaryOp::Pow),
        &[Some(&t(&[1], &[0i32])), Some(&t(&[1], &[-1i32]))]
    )
    .is_err());
    let f = run1(
        &binary(BinaryOp::Pow),
        &[&t(&[2], &[2f32, 9.]), &t(&[2], &[3i64, -1])],
    );
    assert_close(&f, &[2], &[8.0, 1.0 / 9.0], 1e-7);
    let i = run1(
        &binary(BinaryOp::Pow),
        &[&t(&[2], &[4i32, 10]), &t(&[2], &[0.5f32, -1.])],
    );
    assert_eq!(i, t(&[2], &[2i32, 0]));
}

#[test]
fn max_min_propagate_nan() {
    let a = t(&[3], &[1f32, f32::NAN, 3.]);
    let b = t(&[3], &[2f32, 2., f32::NAN]);
    assert_close(
        &run1(&binary(BinaryOp::Max), &[&a, &b]),
        &[3],
        &[2., f64::NAN, f64::NAN],
        0.0,
    );
    assert_close(
        &run1(&binary(BinaryOp::Min), &[&a, &b]),
        &[3],
        &[1., f64::NAN, f64::NAN],
        0.0,
    );
    let i = run1(
        &binary(BinaryOp::Max),
        &[&t(&[2], &[-5i64, 9]), &t(&[1], &[0i64])],
    );
    assert_eq!(i, t(&[2], &[0i64, 9]));
}

#[test]
fn comparisons_and_logic() {
    let a = t(&[3], &[1i64, 5, 3]);
    let b = t(&[3], &[2i64, 2, 3]);
    assert_eq!(
        run1(&binary(BinaryOp::Less), &[&a, &b]),
        t(&[3], &[true, false, false])
    );
    assert_eq!(
        run1(&binary(BinaryOp::LessOrEqual), &[&a, &b]),
        t(&[3], &[true, false, true])
    );
    assert_eq!(
        run1(&binary(BinaryOp::Greater), &[&a, &b]),
        t(&[3], &[false, true, false])
    );
    assert_eq!(
        run1(&binary(BinaryOp::GreaterOrEqual), &[&a, &b]),
        t(&[3], &[false, true, true])
    );
    assert_eq!(
        run1(&binary(BinaryOp::Equal), &[&a, &b]),
        t(&[3], &[false, false, true])
    );
    let nan = t(&[1], &[f32::NAN]);
    assert_eq!(
        run1(&binary(BinaryOp::Equal), &[&nan, &nan]),
        t(&[1], &[false])
    );
    let p = t(&[2, 1], &[true, false]);
    let q = t(&[2], &[true, false]);
    assert_eq!(
        run1(&binary(BinaryOp::And), &[&p, &q]),
        t(&[2, 2], &[true, false, false, false])
    );
    assert_eq!(
        run1(&binary(BinaryOp::Or), &[&p, &q]),
        t(&[2, 2], &[true, true, true, false])
    );
    assert_eq!(
        run1(&binary(BinaryOp::Xor), &[&p, &q]),
        t(&[2, 2], &[false, true, true, false])
    );
    assert_eq!(
        run1(&binary(BinaryOp::Equal), &[&p, &q]),
        t(&[2, 2], &[true, false, false, true])
    );
    assert_eq!(run1(&unary(UnaryOp::Not), &[&q]), t(&[2], &[false, true]));
    assert!(eval_op(&binary(BinaryOp::And), &[Some(&a), Some(&b)]).is_err());
}

#[test]
fn bitwise_and_shifts() {
    let x = t(&[3], &[1u8, 1, 255]);
    assert_eq!(
        run1(
            &binary(BinaryOp::BitShiftLeft),
            &[&x, &t(&[3], &[1u8, 8, 4])]
        ),
        t(&[3], &[2u8, 0, 240])
    );
    let y = t(&[3], &[255u8, 255, 16]);
    assert_eq!(
        run1(
            &binary(BinaryOp::BitShiftRight),
            &[&y, &t(&[3], &[1u8, 9, 4])]
        ),
        t(&[3], &[127u8, 0, 1])
    );
    let a = t(&[2], &[12i32, -1]);
    let b = t(&[2], &[10i32, 7]);
    assert_eq!(
        run1(&binary(BinaryOp::BitwiseAnd), &[&a, &b]),
        t(&[2], &[8i32, 7])
    );
    assert_eq!(
        run1(&binary(BinaryOp::BitwiseOr), &[&a, &b]),
        t(&[2], &[14i32, -1])
    );
    assert_eq!(
        run1(&binary(BinaryOp::BitwiseXor), &[&a, &b]),
        t(&[2], &[6i32, -8])
    );
    assert_eq!(
        run1(&unary(UnaryOp::BitwiseNot), &[&t(&[3], &[0i32, -1, 5])]),
        t(&[3], &[-1i32, 0, -6])
    );
}

#[test]
fn where_broadcasts_three_ways() {
    let c = t(&[2, 1], &[true, false]);
    let x = scalar(1f32);
    let y = t(&[3], &[7f32, 8., 9.]);
    assert_close(
        &run1(&Op::Where, &[&c, &x, &y]),
        &[2, 3],
        &[1., 1., 1., 7., 8., 9.],
        0.0,
    );
    let xi = t(&[1], &[-1i64]);
    let yi = t(&[2, 1], &[5i64, 6]);
    assert_eq!(run1(&Op::Where, &[&c, &xi, &yi]), t(&[2, 1], &[-1i64, 6]));
}

#[test]
fn prelu_broadcasts_slope_to_x() {
    let x = t(&[1, 2, 2], &[-1f32, 2., -3., 4.]);
    let slope = t(&[2, 1, 1], &[0.5f32, 0.25]);
    assert!(
        eval_op(&binary(BinaryOp::PRelu), &[Some(&x), Some(&slope)]).is_err(),
        "slope must broadcast to X"
    );
    let slope = t(&[2, 1], &[0.5f32, 0.25]);
    assert_close(
        &run1(&binary(BinaryOp::PRelu), &[&x, &slope]),
        &[1, 2, 2],
        &[-0.5, 2., -0.75, 4.],
        0.0,
    );
    let xi = t(&[2], &[-4i32, 4]);
    assert_eq!(
        run1(&binary(BinaryOp::PRelu), &[&xi, &t(&[1], &[2i32])]),
        t(&[2], &[-8i32, 4])
    );
}

#[test]
fn clip_with_min_above_max_gives_max() {
    let x = t(&[4], &[-2f32, 0.5, 3., f32::NAN]);
    let clip = |min, max| unary(UnaryOp::Clip { min, max });
    assert_close(
        &run1(&clip(0.0, 1.0), &[&x]),
        &[4],
        &[0., 0.5, 1., f64::NAN],
        0.0,
    );
    assert_close(
        &run1(&clip(2.0, 1.0), &[&x]),
        &[4],
        &[1., 1., 1., f64::NAN],
        0.0,
    );
    assert_close(
        &run1(&clip(f64::NEG_INFINITY, 0.0), &[&x]),
        &[4],
        &[-2., 0., 0., f64::NAN],
        0.0,
    );
    let xi = t(&[3], &[-5i32, 5, 50]);
    assert_eq!(run1(&clip(0.0, 10.0), &[&xi]), t(&[3], &[0i32, 5, 10]));
}

#[test]
fn round_is_half_to_even_and_sign_abs_neg() {
    let x = t(&[7], &[0.5f32, 1.5, 2.5, -0.5, -1.5, 2.4, -2.6]);
    assert_close(
        &run1(&unary(UnaryOp::Round), &[&x]),
        &[7],
        &[0., 2., 2., -0., -2., 2., -3.],
        0.0,
    );
    assert_close(
        &run1(&unary(UnaryOp::Floor), &[&x]),
        &[7],
        &[0., 1., 2., -1., -2., 2., -3.],
        0.0,
    );
    assert_close(
        &run1(&unary(UnaryOp::Ceil), &[&x]),
        &[7],
        &[1., 2., 3., -0., -1., 3., -2.],
        0.0,
    );
    let s = t(&[4], &[-2f32, 0., 3., f32::NAN]);
    assert_close(
        &run1(&unary(UnaryOp::Sign), &[&s]),
        &[4],
        &[-1., 0., 1., f64::NAN],
        0.0,
    );
    let i = t(&[4], &[-5i32, 0, 7, i32::MIN]);
    assert_eq!(
        run1(&unary(UnaryOp::Sign), &[&i]),
        t(&[4], &[-1i32, 0, 1, -1])
    );
    assert_eq!(
        run1(&unary(UnaryOp::Abs), &[&i]),
        t(&[4], &[5i32, 0, 7, i32::MIN])
    );
    assert_eq!(
        run1(&unary(UnaryOp::Neg), &[&i]),
        t(&[4], &[5i32, 0, -7, i32::MIN])
    );
    assert_eq!(
        run1(&unary(UnaryOp::Relu), &[&i]),
        t(&[4], &[0i32, 0, 7, 0])
    );
}

#[test]
fn activations_match_closed_forms() {
    let check = |u: UnaryOp, x: &[f64], want: &[f64]| {
        let got = run1(&unary(u), &[&t(&[x.len()], x)]);
        assert_close(&got, &[x.len()], want, 1e-15);
    };
    check(
        UnaryOp::HardSwish,
        &[-4., -1., 0., 1., 4.],
        &[-0., -1. / 3., 0., 2. / 3., 4.],
    );
    check(
        UnaryOp::Gelu { tanh: false },
        &[1., -1., -10., 0.],
        &[
            0.8413447460685429,
            -0.15865525393145705,
            -7.619853024160526e-23,
            0.,
        ],
    );
    check(UnaryOp::Gelu { tanh: true }, &[1.], &[0.8411919906082768]);
    check(
        UnaryOp::Softplus,
        &[100., -100., 0.],
        &[100., 3.720075976020836e-44, std::f64::consts::LN_2],
    );
    check(UnaryOp::Mish, &[1.], &[0.8650983882673103]);
    check(
        UnaryOp::Sigmoid,
        &[-800., 0., 2.],
        &[0., 0.5, 0.8807970779778824],
    );
    check(
        UnaryOp::Elu { alpha: 1.0 },
        &[-1., 2.],
        &[-0.6321205588285577, 2.],
    );
    check(
        UnaryOp::Celu { alpha: 1.0 },
        &[-1., 2.],
        &[-0.6321205588285577, 2.],
    );
    check(
        UnaryOp::Selu {
            alpha: 1.673_263_2,
            gamma: 1.050_701,
        },
        &[-1., 2.],
        &[-1.1113307412864784, 2.1014020442962646],
    );
    check(
        UnaryOp::ThresholdedRelu { alpha: 1.0 },
        &[0.5, 1., 2.],
        &[0., 0., 2.],
    );
    check(UnaryOp::LeakyRelu { alpha: 0.5 }, &[-2., 3.], &[-1., 3.]);
    check(
        UnaryOp::HardSigmoid {
            alpha: 0.5,
            beta: 0.5,
        },
        &[-3., 0., 3.],
        &[0., 0.5, 1.],
    );
    check(
        UnaryOp::Erf,
        &[0., 0.5, -1.],
        &[0., 0.5204998778130465, -0.8427007929497149],
    );
    check(UnaryOp::Softsign, &[-3., 1.], &[-0.75, 0.5]);
    check(UnaryOp::Reciprocal, &[4., -0.5], &[0.25, -2.]);
    let special = t(&[4], &[f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1.]);
    assert_eq!(
        run1(&unary(UnaryOp::IsNaN), &[&special]),
        t(&[4], &[false, false, true, false])
    );
    let pos_inf = unary(UnaryOp::IsInf {
        positive: true,
        negative: false,
    });
    assert_eq!(
        run1(&pos_inf, &[&special]),
        t(&[4], &[true, false, false, false])
    );
    let any_inf = unary(UnaryOp::IsInf {
        positive: true,
        negative: true,
    });
    assert_eq!(
        run1(&any_inf, &[&special]),
        t(&[4], &[true, true, false, false])
    );
}

#[test]
fn half_types_compute_in_f32_and_round_once() {
    let one = f16::ONE;
    // 1 + 2^-11 is a tie between 1 and 1 + 2^-10: to even.
    let a = t(&[2], &[one, one]);
    let b = t(
        &[2],
        &[
            f16::from_f32(2f32.powi(-11)),
            f16::from_f32(3.0 * 2f32.powi(-12)),
        ],
    );
    let sum = run1(&binary(BinaryOp::Add), &[&a, &b]);
    assert_eq!(sum, t(&[2], &[one, f16::from_f32(1.0 + 2f32.powi(-10))]));
    let e = run1(&unary(UnaryOp::Exp), &[&t(&[1], &[f16::ONE])]);
    assert_eq!(e, t(&[1], &[f16::from_f32(std::f32::consts::E)]));
    let bf = Tensor::from_vec(&[1], vec![half::bf16::from_f32(1.5)]);
    assert_close(&run1(&unary(UnaryOp::Neg), &[&bf]), &[1], &[-1.5], 0.0);
}

#[test]
fn cast_truncates_saturates_and_rounds_once() {
    let f = t(&[5], &[-1.7f32, 1.7, 3e10, -3e10, f32::NAN]);
    let to_i32 = run1(&Op::Cast { to: DType::I32 }, &[&f]);
    assert_eq!(to_i32, t(&[5], &[-1i32, 1, i32::MAX, i32::MIN, 0]));
    let i = t(&[3], &[300i32, -1, 255]);
    assert_eq!(
        run1(&Op::Cast { to: DType::U8 }, &[&i]),
        t(&[3], &[44u8, 255, 255])
    );
    let z = t(&[4], &[0f32, -0.0, f32::NAN, 2.]);
    assert_eq!(
        run1(&Op::Cast { to: DType::Bool }, &[&z]),
        t(&[4], &[false, false, true, true])
    );
    // Just above a tie of f16: must round up (rounding through f32 would not).
    let v = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
    assert_eq!(
        cast(&t(&[1], &[v]), DType::F16),
        t(&[1], &[f16::from_f32(1.0 + 2f32.powi(-10))])
    );
    // 2^60 + 2^36 + 1 → f32 rounds up to 2^60 + 2^37 (through f64 it would tie down).
    let big = t(&[1], &[(1i64 << 60) + (1 << 36) + 1]);
    assert_eq!(
        cast(&big, DType::F32).to_f64_vec()[0],
        ((1u64 << 60) + (1 << 37)) as f64
    );
    assert_eq!(
        cast(&t(&[1], &[u64::MAX]), DType::F64).to_f64_vec()[0],
        18446744073709551615.0
    );
    assert_eq!(
        cast(&t(&[2], &[true, false]), DType::I64),
        t(&[2], &[1i64, 0])
    );
    assert_eq!(cast(&t(&[1], &[-1i8]), DType::U64), t(&[1], &[u64::MAX]));
}

// ---------------------------------------------------------------------------------------
// MatMul / Gemm

/// Naive batched matmul on already-promoted 3-D operands [b, m, k] @ [b, k, n].
fn naive_matmul(a: &[f64], b: &[f64], batch: usize, m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; batch * m * n];
    for bi in 0..batch {
        for i in 0..m {
            for j in 0..n {
                out[(bi * m + i) * n + j] = (0..k)
                    .map(|p| a[(bi * m + i) * k + p] * b[(bi * k + p) * n + j])
                    .sum();
            }
        }
    }
    out
}

#[test]
fn matmul_two_d_and_vector_promotion() {
    let a = t(&[2, 3], &[1f32, 2., 3., 4., 5., 6.]);
    let b = t(&[3, 2], &[7f32, 8., 9., 10., 11., 12.]);
    assert_close(
        &run1(&Op::matmul(), &[&a, &b]),
        &[2, 2],
        &[58., 64., 139., 154.],
        0.0,
    );
    let v = t(&[3], &[1f32, 0., -1.]);
    assert_close(&run1(&Op::matmul(), &[&v, &b]), &[2], &[-4., -4.], 0.0);
    assert_close(&run1(&Op::matmul(), &[&a, &v]), &[2], &[-2., -2.], 0.0);
    assert_close(&run1(&Op::matmul(), &[&v, &v]), &[], &[2.], 0.0);
    let ai = t(&[2, 2], &[1i64, 2, 3, 4]);
    assert_eq!(
        run1(&Op::matmul(), &[&ai, &ai]),
        t(&[2, 2], &[7i64, 10, 15, 22])
    );
    assert!(eval_op(&Op::matmul(), &[Some(&a), Some(&a)]).is_err());
}

#[test]
fn matmul_broadcasts_batches() {
    // [2, 1, 2, 3] @ [3, 3, 4] → [2, 3, 2, 4]
    let (a_data, b_data) = (data(12, 1), data(36, 2));
    let a = t(&[2, 1, 2, 3], &a_data);
    let b = t(&[3, 3, 4], &b_data);
    let got = run1(&Op::matmul(), &[&a, &b]);
    let mut a3 = Vec::new();
    let mut b3 = Vec::new();
    for i in 0..2 {
        for j in 0..3 {
            a3.extend(a_data[i * 6..(i + 1) * 6].iter().map(|&v| f64::from(v)));
            b3.extend(b_data[j * 12..(j + 1) * 12].iter().map(|&v| f64::from(v)));
        }
    }
    assert_close(
        &got,
        &[2, 3, 2, 4],
        &naive_matmul(&a3, &b3, 6, 2, 3, 4),
        1e-6,
    );
    let f64s = run1(
        &Op::matmul(),
        &[&cast(&a, DType::F64), &cast(&b, DType::F64)],
    );
    assert_close(
        &f64s,
        &[2, 3, 2, 4],
        &naive_matmul(&a3, &b3, 6, 2, 3, 4),
        1e-12,
    );
}

#[test]
fn gemm_transposes_scales_and_broadcasts_c() {
    let a = t(&[3, 2], &[1f32, 4., 2., 5., 3., 6.]); // Aᵀ = [[1,2,3],[4,5,6]]
    let b = t(&[2, 3], &[7f32, 9., 11., 8., 10., 12.]); // Bᵀ = [[7,8],[9,10],[11,12]]
    let c = t(&[2], &[1f32, -1.]);
    let g = GemmAttrs {
        alpha: 2.0,
        beta: 0.5,
        trans_a: true,
        trans_b: true,
        activation: nnc::ops::Activation::None,
    };
    let y = run(&Op::Gemm(g.clone()), &[Some(&a), Some(&b), Some(&c)]).remove(0);
    assert_close(&y, &[2, 2], &[116.5, 127.5, 278.5, 307.5], 0.0);
    let y = run(&Op::Gemm(g), &[Some(&a), Some(&b), None]).remove(0);
    assert_close(&y, &[2, 2], &[116., 128., 278., 308.], 0.0);
    let ai = t(&[1, 2], &[2i32, 3]);
    let bi = t(&[2, 1], &[4i32, 5]);
    let ci = scalar(-1i32);
    let plain = GemmAttrs {
        alpha: 1.0,
        beta: 1.0,
        trans_a: false,
        trans_b: false,
        activation: nnc::ops::Activation::None,
    };
    assert_eq!(
        run(&Op::Gemm(plain), &[Some(&ai), Some(&bi), Some(&ci)]).remove(0),
        t(&[1, 1], &[22i32])
    );
}

// ---------------------------------------------------------------------------------------
// Conv / ConvTranspose

/// Naive N-d convolution straight from the definition.
fn naive_conv(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    c: &ConvAttrs,
) -> (Vec<usize>, Vec<f64>) {
    let (xs, ws) = (x.shape().to_vec(), w.shape().to_vec());
    let (xv, wv) = (x.to_f64_vec(), w.to_f64_vec());
    let bv = bias.map(Tensor::to_f64_vec);
    let sp = xs.len() - 2;
    let (group_in, out_channels) = (ws[1], ws[0]);
    let group_out = out_channels / c.group;
    let out_sp: Vec<usize> = (0..sp)
        .map(|d| {
            (xs[2 + d] + c.pads[d] + c.pads[sp + d] - c.dilations[d] * (c.kernel[d] - 1) - 1)
                / c.strides[d]
                + 1
        })
        .collect();
    let mut out_shape = vec![xs[0], out_channels];
    out_shape.extend(&out_sp);
    let mut out = vec![0.0; out_shape.iter().product()];
    for_each_index(&out_shape, |o| {
        let (n, m) = (o[0], o[1]);
        let g = m / group_out;
        let mut acc = bv.as_ref().map_or(0.0, |b| b[m]);
        for ci in 0..group_in {
            for_each_index(&c.kernel, |k| {
                let mut xi = vec![n, g * group_in + ci];
                for d in 0..sp {
                    let pos = (o[2 + d] * c.strides[d] + k[d] * c.dilations[d]) as isize
                        - c.pads[d] as isize;
                    if pos < 0 || pos >= xs[2 + d] as isize {
                        return;
                    }
                    xi.push(pos as usize);
                }
                let mut wi = vec![m, ci];
                wi.extend(k);
                acc += xv[flat(&xi, &xs)] * wv[flat(&wi, &ws)];
            });
        }
        out[flat(o, &out_shape)] = acc;
    });
    (out_shape, out)
}

#[test]
fn conv_hand_computed() {
    // 3×3 input, 2×2 kernel of ones, no padding: window sums.
    let x = t(&[1, 1, 3, 3], &[1f32, 2., 3., 4., 5., 6., 7., 8., 9.]);
    let w = t(&[1, 1, 2, 2], &[1f32; 4]);
    let c = ConvAttrs {
        kernel: vec![2, 2],
        strides: vec![1, 1],
        pads: vec![0; 4],
        dilations: vec![1, 1],
        group: 1,
        activation: nnc::ops::Activation::None,
    };
    assert_close(
        &run1(&Op::Conv(c.clone()), &[&x, &w]),
        &[1, 1, 2, 2],
        &[12., 16., 24., 28.],
        0.0,
    );
    // With bias and one pixel of padding on every side, stride 2.
    let c = ConvAttrs {
        strides: vec![2, 2],
        pads: vec![1; 4],
        ..c
    };
    let b = t(&[1], &[0.5f32]);
    let y = run1(&Op::Conv(c), &[&x, &w, &b]);
    assert_close(&y, &[1, 1, 2, 2], &[1.5, 5.5, 11.5, 28.5], 0.0);
}

#[test]
fn conv_grouped_dilated_strided_matches_naive_loops() {
    let cases = [
        // (input shape, weight shape, kernel, strides, pads, dilations, group)
        (
            vec![2, 4, 9, 8],
            vec![6, 2, 3, 2],
            vec![3, 2],
            vec![2, 1],
            vec![1, 0, 2, 1],
            vec![2, 3],
            2,
        ),
        (
            vec![1, 3, 7, 7],
            vec![3, 1, 3, 3],
            vec![3, 3],
            vec![1, 2],
            vec![1, 1, 1, 1],
            vec![1, 1],
            3,
        ),
        (
            vec![1, 2, 11],
            vec![4, 2, 3],
            vec![3],
            vec![3],
            vec![2, 1],
            vec![2],
            1,
        ),
        (
            vec![1, 2, 4, 5, 3],
            vec![2, 1, 2, 3, 2],
            vec![2, 3, 2],
            vec![1, 2, 1],
            vec![0, 1, 1, 1, 0, 0],
            vec![2, 1, 1],
            2,
        ),
    ];
    for (i, (xs, ws, kernel, strides, pads, dilations, group)) in cases.into_iter().enumerate() {
        let x = t(&xs, &data(xs.iter().product(), 10 + i as u64));
        let w = t(&ws, &data(ws.iter().product(), 20 + i as u64));
        let b = t(&[ws[0]], &data(ws[0], 30 + i as u64));
        let c = ConvAttrs {
            kernel,
            strides,
            pads,
            dilations,
            group,
            activation: nnc::ops::Activation::None,
        };
        let (shape, want) = naive_conv(&x, &w, Some(&b), &c);
        assert_close(
            &run1(&Op::Conv(c.clone()), &[&x, &w, &b]),
            &shape,
            &want,
            1e-5,
        );
        let (x64, w64, b64) = (
            cast(&x, DType::F64),
            cast(&w, DType::F64),
            cast(&b, DType::F64),
        );
        assert_close(
            &run1(&Op::Conv(c), &[&x64, &w64, &b64]),
            &shape,
            &want,
            1e-12,
        );
    }
}

/// Naive transposed convolution: every input element scatters a scaled kernel.
fn naive_conv_transpose(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    c: &ConvTransposeAttrs,
) -> Vec<f64> {
    let (xs, ws) = (x.shape().to_vec(), w.shape().to_vec());
    let (xv, wv) = (x.to_f64_vec(), w.to_f64_vec());
    let sp = xs.len() - 2;
    let (group_in, group_out) = (xs[1] / c.group, ws[1]);
    let mut out_shape = vec![xs[0], group_out * c.group];
    out_shape.extend(&c.output_spatial);
    let mut out = vec![0.0; out_shape.iter().product()];
    for_each_index(&xs, |i| {
        let (n, ci) = (i[0], i[1]);
        let g = ci / group_in;
        for m in 0..group_out {
            for_each_index(&c.kernel, |k| {
                let mut oi = vec![n, g * group_out + m];
                for d in 0..sp {
                    let pos = (i[2 + d] * c.strides[d] + k[d] * c.dilations[d]) as isize
                        - c.pads[d] as isize;
                    if pos < 0 || pos >= c.output_spatial[d] as isize {
                        return;
                    }
                    oi.push(pos as usize);
                }
                let mut wi = vec![ci, m];
                wi.extend(k);
                out[flat(&oi, &out_shape)] += xv[flat(i, &xs)] * wv[flat(&wi, &ws)];
            });
        }
    });
    if let Some(b) = bias.map(Tensor::to_f64_vec) {
        for_each_index(&out_shape.clone(), |o| out[flat(o, &out_shape)] += b[o[1]]);
    }
    out
}

#[test]
fn conv_transpose_spec_example_and_naive_loops() {
    // ONNX spec example convtranspose_1d.
    let x = t(&[1, 1, 3], &[0f32, 1., 2.]);
    let w = t(&[1, 2, 3], &[1f32; 6]);
    let c = ConvTransposeAttrs {
        kernel: vec![3],
        strides: vec![1],
        pads: vec![0, 0],
        dilations: vec![1],
        group: 1,
        output_spatial: vec![5],
    };
    assert_close(
        &run1(&Op::ConvTranspose(c), &[&x, &w]),
        &[1, 2, 5],
        &[0., 1., 3., 3., 2., 0., 1., 3., 3., 2.],
        0.0,
    );

    let cases = [
        // (input, weight, kernel, strides, pads, dilations, group, output spatial)
        (
            vec![2, 4, 3, 4],
            vec![4, 3, 3, 2],
            vec![3, 2],
            vec![2, 3],
            vec![1, 0, 1, 1],
            vec![1, 2],
            2,
            vec![6, 12],
        ),
        (
            vec![1, 3, 5],
            vec![3, 2, 4],
            vec![4],
            vec![2],
            vec![1, 2],
            vec![1],
            1,
            vec![10],
        ),
        // output_padding-style extra row/column that only receives the bias
        (
            vec![1, 2, 3, 3],
            vec![2, 1, 2, 2],
            vec![2, 2],
            vec![2, 2],
            vec![0, 0, 0, 0],
            vec![1, 1],
            2,
            vec![7, 7],
        ),
    ];
    for (i, (xs, ws, kernel, strides, pads, dilations, group, output_spatial)) in
        cases.into_iter().enumerate()
    {
        let x = t(&xs, &data(xs.iter().product(), 40 + i as u64));
        let w = t(&ws, &data(ws.iter().product(), 50 + i as u64));
        let b = t(&[ws[1] * group], &data(ws[1] * group, 60 + i as u64));
        let c = ConvTransposeAttrs {
            kernel,
            strides,
            pads,
            dilations,
            group,
            output_spatial,
        };
        let want = naive_conv_transpose(&x, &w, Some(&b), &c);
        let got = run1(&Op::ConvTranspose(c.clone()), &[&x, &w, &b]);
        let mut shape = vec![xs[0], ws[1] * group];
        shape.extend(&c.output_spatial);
        assert_close(&got, &shape, &want, 1e-5);
    }
}

// ---------------------------------------------------------------------------------------
// Pooling

fn pool_attrs(
    kind: PoolKind,
    kernel: &[usize],
    strides: &[usize],
    pads: &[usize],
    dilations: &[usize],
    out: &[usize],
) -> Op {
    Op::Pool(PoolAttrs {
        kind,
        kernel: kernel.to_vec(),
        strides: strides.to_vec(),
        pads: pads.to_vec(),
        dilations: dilations.to_vec(),
        output_spatial: out.to_vec(),
        ceil_mode: false,
    })
}

fn five_by_five() -> Tensor {
    t(
        &[1, 1, 5, 5],
        &(1..=25).map(|v| v as f32).collect::<Vec<_>>(),
    )
}

#[test]
fn average_pool_counts_padding_only_when_asked() {
    // ONNX spec examples averagepool_2d_pads(_count_include_pad): 5×5, kernel 3, pads 2.
    let x = five_by_five();
    let with = pool_attrs(
        PoolKind::Average {
            count_include_pad: true,
        },
        &[3, 3],
        &[1, 1],
        &[2; 4],
        &[1, 1],
        &[7, 7],
    );
    let y = run1(&with, &[&x]);
    let first_rows = [
        0.11111111, 0.33333334, 0.6666667, 1.0, 1.3333334, 1.0, 0.5555556,
    ];
    assert_close(&y.reshape(&[49]).slice_first(7), &[7], &first_rows, 1e-6);
    let without = pool_attrs(
        PoolKind::Average {
            count_include_pad: false,
        },
        &[3, 3],
        &[1, 1],
        &[2; 4],
        &[1, 1],
        &[7, 7],
    );
    let y = run1(&without, &[&x]);
    assert_close(
        &y.reshape(&[49]).slice_first(7),
        &[7],
        &[1., 1.5, 2., 3., 4., 4.5, 5.],
        1e-6,
    );
}

#[test]
fn ceil_mode_windows_do_not_count_past_the_end() {
    // 5×5, kernel 2, stride 2, ceil_mode: the last window hangs over the edge.
    let x = five_by_five();
    let max = pool_attrs(PoolKind::Max, &[2, 2], &[2, 2], &[0; 4], &[1, 1], &[3, 3]);
    assert_close(
        &run1(&max, &[&x]),
        &[1, 1, 3, 3],
        &[7., 9., 10., 17., 19., 20., 22., 24., 25.],
        0.0,
    );
    for count_include_pad in [false, true] {
        let avg = pool_attrs(
            PoolKind::Average { count_include_pad },
            &[2, 2],
            &[2, 2],
            &[0; 4],
            &[1, 1],
            &[3, 3],
        );
        assert_close(
            &run1(&avg, &[&x]),
            &[1, 1, 3, 3],
            &[4., 6., 7.5, 14., 16., 17.5, 21.5, 23.5, 25.],
            1e-7,
        );
    }
}

#[test]
fn max_pool_padding_never_wins_and_dilations_apply() {
    let x = five_by_five();
    let dilated = pool_attrs(PoolKind::Max, &[2, 2], &[1, 1], &[1; 4], &[2, 2], &[5, 5]);
    let want = [
        7., 8., 9., 10., 9., 12., 13., 14., 15., 14., 17., 18., 19., 20., 19., 22., 23., 24., 25.,
        24., 17., 18., 19., 20., 19.,
    ];
    assert_close(&run1(&dilated, &[&x]), &[1, 1, 5, 5], &want, 0.0);
    // All-negative input with padding: the zero padding must not appear.
    let neg = t(&[1, 1, 2, 2], &[-4f32, -3., -2., -1.]);
    let padded = pool_attrs(PoolKind::Max, &[2, 2], &[1, 1], &[1; 4], &[1, 1], &[3, 3]);
    assert_close(
        &run1(&padded, &[&neg]),
        &[1, 1, 3, 3],
        &[-4., -3., -3., -2., -1., -1., -2., -1., -1.],
        0.0,
    );
    // Integer max pooling.
    let xi = t(&[1, 1, 1, 4], &[3i8, -7, 5, 1]);
    let p = pool_attrs(PoolKind::Max, &[1, 2], &[1, 2], &[0; 4], &[1, 1], &[1, 2]);
    assert_eq!(run1(&p, &[&xi]), t(&[1, 1, 1, 2], &[3i8, 5]));
}

#[test]
fn pools_match_naive_loops() {
    let xs = [2usize, 3, 7, 6];
    let x = t(&xs, &data(xs.iter().product(), 70));
    let (kernel, strides, pads, dilations) =
        ([3usize, 2], [2usize, 1], [1usize, 0, 1, 1], [1usize, 2]);
    let out = [(7 + 2 - 3) / 2 + 1, (6 + 1 - 3) + 1];
    let xv = x.to_f64_vec();
    let kinds = [
        PoolKind::Max,
        PoolKind::Average {
            count_include_pad: false,
        },
        PoolKind::Average {
            count_include_pad: true,
        },
        PoolKind::Lp { p: 3.0 },
    ];
    for kind in kinds {
        let mut want = Vec::new();
        for_each_index(&[2, 3, out[0], out[1]], |o| {
            let (mut values, mut padded) = (Vec::new(), 0usize);
            for_each_index(&kernel, |k| {
                let h = (o[2] * strides[0] + k[0] * dilations[0]) as isize - pads[0] as isize;
                let w = (o[3] * strides[1] + k[1] * dilations[1]) as isize - pads[1] as isize;
                let in_padded = h < (7 + pads[2]) as isize && w < (6 + pads[3]) as isize;
                padded += in_padded as usize;
                if (0..7).contains(&h) && (0..6).contains(&w) {
                    values.push(xv[flat(&[o[0], o[1], h as usize, w as usize], &xs)]);
                }
            });
            want.push(match kind {
                PoolKind::Max => values.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
                PoolKind::Average { count_include_pad } => {
                    values.iter().sum::<f64>()
                        / if count_include_pad {
                            padded
                        } else {
                            values.len()
                        } as f64
                }
                PoolKind::Lp { p } => values
                    .iter()
                    .map(|v| v.abs().powf(p.into()))
                    .sum::<f64>()
                    .powf(1.0 / f64::from(p)),
            });
        });
        let op = pool_attrs(kind, &kernel, &strides, &pads, &dilations, &out);
        assert_close(&run1(&op, &[&x]), &[2, 3, out[0], out[1]], &want, 1e-6);
    }
}

/// Test-only helpers on tensors.
trait TensorExt {
    fn slice_first(&self, n: usize) -> Tensor;
}

impl TensorExt for Tensor {
    fn slice_first(&self, n: usize) -> Tensor {
        Tensor::from_vec(&[n], self.to_f64_vec()[..n].to_vec())
    }
}

// ---------------------------------------------------------------------------------------
// Softmax / LayerNorm

#[test]
fn softmax_and_log_softmax() {
    let x = t(&[2, 3], &[1f64, 2., 3., 1001., 1002., 1003.]);
    let soft = [0.09003057317038046, 0.24472847105479764, 0.6652409557748219];
    let want: Vec<f64> = soft.iter().chain(soft.iter()).copied().collect();
    assert_close(
        &run1(
            &Op::Softmax {
                axis: 1,
                log: false,
            },
            &[&x],
        ),
        &[2, 3],
        &want,
        1e-15,
    );
    let logs = [-2.40760596444438, -1.4076059644443804, -0.4076059644443803];
    let want: Vec<f64> = logs.iter().chain(logs.iter()).copied().collect();
    assert_close(
        &run1(&Op::Softmax { axis: 1, log: true }, &[&x]),
        &[2, 3],
        &want,
        1e-15,
    );
    // Along axis 0: columns of two values 1000 apart.
    let y = run1(
        &Op::Softmax {
            axis: 0,
            log: false,
        },
        &[&x],
    );
    assert_close(&y, &[2, 3], &[0., 0., 0., 1., 1., 1.], 1e-15);
    // LogSoftmax stays finite where ln(softmax) underflows.
    let y = run1(&Op::Softmax { axis: 0, log: true }, &[&x]);
    assert_close(&y, &[2, 3], &[-1000., -1000., -1000., 0., 0., 0.], 1e-15);
}

#[test]
fn layer_norm_normalizes_trailing_axes() {
    let x = t(&[2, 2], &[1f32, 3., -2., 2.]);
    let scale = t(&[2], &[1f32, 2.]);
    let bias = t(&[2], &[0f32, 1.]);
    let eps = 0.0;
    let op = Op::LayerNorm {
        axis: 1,
        epsilon: eps,
    };
    let y = run(&op, &[Some(&x), Some(&scale), Some(&bias)]).remove(0);
    assert_close(&y, &[2, 2], &[-1., 3., -1., 3.], 1e-6);
    let y = run(&op, &[Some(&x), Some(&scale), None]).remove(0);
    assert_close(&y, &[2, 2], &[-1., 2., -1., 2.], 1e-6);
    // axis 0: all four elements; mean 1, variance (0 + 4 + 9 + 1)/4 = 3.5.
    let op = Op::LayerNorm {
        axis: 0,
        epsilon: 0.5,
    };
    let s = t(&[2, 2], &[1f32; 4]);
    let y = run(&op, &[Some(&x), Some(&s), None]).remove(0);
    assert_close(&y, &[2, 2], &[0., 1., -1.5, 0.5], 1e-6);
}

// ---------------------------------------------------------------------------------------
// Reductions

fn reduce(kind: ReduceKind, axes: &[usize], keepdims: bool) -> Op {
    Op::Reduce(ReduceAttrs {
        kind,
        axes: axes.to_vec(),
        keepdims,
    })
}

#[test]
fn reductions_over_one_axis() {
    let x = t(&[2, 3], &[1f64, 2., 3., 4., 5., 6.]);
    let cases: [(ReduceKind, [f64; 2]); 10] = [
        (ReduceKind::Sum, [6., 15.]),
        (ReduceKind::Mean, [2., 5.]),
        (ReduceKind::Max, [3., 6.]),
        (ReduceKind::Min, [1., 4.]),
        (ReduceKind::Prod, [6., 120.]),
        (ReduceKind::L1, [6., 15.]),
        (ReduceKind::L2, [3.7416573867739413, 8.774964387392123]),
        (ReduceKind::SumSquare, [14., 77.]),
        (ReduceKind::LogSum, [6f64.ln(), 15f64.ln()]),
        (ReduceKind::LogSumExp, [3.40760596444438, 6.407605964444381]),
    ];
    for (kind, want) in cases {
        assert_close(
            &run1(&reduce(kind, &[1], true), &[&x]),
            &[2, 1],
            &want,
            1e-15,
        );
        assert_close(&run1(&reduce(kind, &[1], false), &[&x]), &[2], &want, 1e-15);
    }
    let all = run1(&reduce(ReduceKind::Sum, &[0, 1], false), &[&x]);
    assert_close(&all, &[], &[21.], 0.0);
    let cols = run1(&reduce(ReduceKind::Max, &[0], true), &[&x]);
    assert_close(&cols, &[1, 3], &[4., 5., 6.], 0.0);
}

#[test]
fn integer_and_bool_reductions() {
    let x = t(&[2, 3], &[1i32, -2, 3, 4, 5, -7]);
    assert_eq!(
        run1(&reduce(ReduceKind::Sum, &[1], false), &[&x]),
        t(&[2], &[2i32, 2])
    );
    assert_eq!(
        run1(&reduce(ReduceKind::Mean, &[1], false), &[&x]),
        t(&[2], &[0i32, 0])
    );
    assert_eq!(
        run1(&reduce(ReduceKind::Mean, &[0], false), &[&x]),
        t(&[3], &[2i32, 1, -2])
    );
    assert_eq!(
        run1(&reduce(ReduceKind::Prod, &[1], false), &[&x]),
        t(&[2], &[-6i32, -140])
    );
    assert_eq!(
        run1(&reduce(ReduceKind::Max, &[1], false), &[&x]),
        t(&[2], &[3i32, 5])
    );
    assert_eq!(
        run1(&reduce(ReduceKind::L1, &[1], false), &[&x]),
        t(&[2], &[6i32, 16])
    );
    assert_eq!(
        run1(&reduce(ReduceKind::SumSquare, &[1], false), &[&x]),
        t(&[2], &[14i32, 90])
    );
    assert_eq!(
        run1(&reduce(ReduceKind::L2, &[1], false), &[&x]),
        t(&[2], &[3i32, 9])
    );
    assert!(eval_op(&reduce(ReduceKind::LogSum, &[1], false), &[Some(&x)]).is_err());
    let b = t(&[2, 2], &[true, false, true, true]);
    assert_eq!(
        run1(&reduce(ReduceKind::Max, &[1], false), &[&b]),
        t(&[2], &[true, true])
    );
    assert_eq!(
        run1(&reduce(ReduceKind::Min, &[1], false), &[&b]),
        t(&[2], &[false, true])
    );
}

#[test]
fn empty_reductions_give_the_identity() {
    let x = Tensor::zeros(&TensorType::new(DType::F32, vec![2, 0]));
    let check = |kind, want: f64| {
        assert_close(
            &run1(&reduce(kind, &[1], false), &[&x]),
            &[2],
            &[want, want],
            0.0,
        )
    };
    check(ReduceKind::Max, f64::NEG_INFINITY);
    check(ReduceKind::Min, f64::INFINITY);
    check(ReduceKind::Sum, 0.0);
    check(ReduceKind::Prod, 1.0);
    check(ReduceKind::LogSum, f64::NEG_INFINITY);
    check(ReduceKind::LogSumExp, f64::NEG_INFINITY);
    check(ReduceKind::Mean, f64::NAN);
    let xi = Tensor::zeros(&TensorType::new(DType::I32, vec![0, 3]));
    assert_eq!(
        run1(&reduce(ReduceKind::Max, &[0], false), &[&xi]),
        t(&[3], &[i32::MIN; 3])
    );
    assert_eq!(
        run1(&reduce(ReduceKind::Min, &[0], true), &[&xi]),
        t(&[1, 3], &[i32::MAX; 3])
    );
}

#[test]
fn argmax_argmin_ties_and_nan() {
    let arg = |max, axis, keepdims, last| {
        Op::ArgReduce(ArgReduceAttrs {
            max,
            axis,
            keepdims,
            select_last_index: last,
        })
    };
    let x = t(&[2, 4], &[1f32, 3., 3., 0., 2., 0., 0., 2.]);
    assert_eq!(
        run1(&arg(true, 1, false, false), &[&x]),
        t(&[2], &[1i64, 0])
    );
    assert_eq!(
        run1(&arg(true, 1, true, true), &[&x]),
        t(&[2, 1], &[2i64, 3])
    );
    assert_eq!(
        run1(&arg(false, 1, false, false), &[&x]),
        t(&[2], &[3i64, 1])
    );
    assert_eq!(
        run1(&arg(false, 1, false, true), &[&x]),
        t(&[2], &[3i64, 2])
    );
    assert_eq!(
        run1(&arg(true, 0, false, false), &[&x]),
        t(&[4], &[1i64, 0, 0, 1])
    );
    let nan = t(&[4], &[1f32, f32::NAN, 3., f32::NAN]);
    assert_eq!(run1(&arg(true, 0, false, false), &[&nan]), t(&[], &[1i64]));
    assert_eq!(run1(&arg(false, 0, false, true), &[&nan]), t(&[], &[3i64]));
    let xi = t(&[3], &[-1i64, 7, 7]);
    assert_eq!(run1(&arg(true, 0, true, true), &[&xi]), t(&[1], &[2i64]));
}

// ---------------------------------------------------------------------------------------
// Data movement

#[test]
fn reshape_and_transpose() {
    let x = t(&[2, 3], &[1i64, 2, 3, 4, 5, 6]);
    assert_eq!(
        run1(
            &Op::Reshape {
                shape: vec![3, 1, 2]
            },
            &[&x]
        ),
        t(&[3, 1, 2], &[1i64, 2, 3, 4, 5, 6])
    );
    assert_eq!(
        run1(&Op::Transpose { perm: vec![1, 0] }, &[&x]),
        t(&[3, 2], &[1i64, 4, 2, 5, 3, 6])
    );
    let y = t(&[2, 1, 3], &[1u8, 2, 3, 4, 5, 6]);
    assert_eq!(
        run1(
            &Op::Transpose {
                perm: vec![2, 0, 1]
            },
            &[&y]
        ),
        t(&[3, 2, 1], &[1u8, 4, 2, 5, 3, 6])
    );
    assert!(eval_op(&Op::Transpose { perm: vec![0, 0] }, &[Some(&x)]).is_err());
    assert!(eval_op(&Op::Reshape { shape: vec![4] }, &[Some(&x)]).is_err());
}

#[test]
fn concat_along_an_axis() {
    let a = t(&[2, 1], &[1i64, 2]);
    let b = t(&[2, 2], &[3i64, 4, 5, 6]);
    assert_eq!(
        run1(&Op::Concat { axis: 1 }, &[&a, &b]),
        t(&[2, 3], &[1i64, 3, 4, 2, 5, 6])
    );
    let c = t(&[1, 2], &[true, false]);
    let d = t(&[2, 2], &[false, false, true, true]);
    assert_eq!(
        run1(&Op::Concat { axis: 0 }, &[&c, &d]),
        t(&[3, 2], &[true, false, false, false, true, true])
    );
    let wrong = t(&[2, 1], &[1i32, 2]);
    assert!(eval_op(&Op::Concat { axis: 1 }, &[Some(&a), Some(&wrong)]).is_err());
}

#[test]
fn slice_with_negative_and_positive_steps() {
    let x = t(&[10], &(0..10).collect::<Vec<i32>>());
    // x[8::-3] → 8, 5, 2
    let op = Op::Slice {
        starts: vec![8],
        steps: vec![-3],
        shape: vec![3],
    };
    assert_eq!(run1(&op, &[&x]), t(&[3], &[8i32, 5, 2]));
    // x[::-1]
    let op = Op::Slice {
        starts: vec![9],
        steps: vec![-1],
        shape: vec![10],
    };
    assert_eq!(
        run1(&op, &[&x]),
        t(&[10], &[9i32, 8, 7, 6, 5, 4, 3, 2, 1, 0])
    );
    let m = t(&[3, 4], &(0..12).map(|v| v as f32).collect::<Vec<_>>());
    // m[2:0:-1, 1::2]
    let op = Op::Slice {
        starts: vec![2, 1],
        steps: vec![-1, 2],
        shape: vec![2, 2],
    };
    assert_close(&run1(&op, &[&m]), &[2, 2], &[9., 11., 5., 7.], 0.0);
    let empty = Op::Slice {
        starts: vec![0, 0],
        steps: vec![1, 1],
        shape: vec![0, 4],
    };
    assert_eq!(run1(&empty, &[&m]).shape(), &[0, 4]);
    let out_of_range = Op::Slice {
        starts: vec![1],
        steps: vec![-1],
        shape: vec![3],
    };
    assert!(eval_op(&out_of_range, &[Some(&x)]).is_err());
}

#[test]
fn gather_with_negative_and_multidimensional_indices() {
    let x = t(&[3, 2], &[1f32, 2., 3., 4., 5., 6.]);
    let idx = t(&[2, 2], &[0i64, -1, 1, 2]);
    let y = run1(&Op::Gather { axis: 0 }, &[&x, &idx]);
    assert_close(&y, &[2, 2, 2], &[1., 2., 5., 6., 3., 4., 5., 6.], 0.0);
    let idx = t(&[1], &[-2i32]);
    assert_close(
        &run1(&Op::Gather { axis: 1 }, &[&x, &idx]),
        &[3, 1],
        &[1., 3., 5.],
        0.0,
    );
    let grid = t(&[2, 3], &[1i32, 2, 3, 4, 5, 6]);
    let idx = t(&[2, 2], &[-1i64, 0, 1, 1]);
    let y = run1(&Op::Gather { axis: 1 }, &[&grid, &idx]);
    assert_eq!(y, t(&[2, 2, 2], &[3i32, 1, 2, 2, 6, 4, 5, 5]));
    let scalar_idx = scalar(1i64);
    assert_close(
        &run1(&Op::Gather { axis: 0 }, &[&x, &scalar_idx]),
        &[2],
        &[3., 4.],
        0.0,
    );
    assert!(eval_op(
        &Op::Gather { axis: 0 },
        &[Some(&x), Some(&t(&[1], &[3i64]))]
    )
    .is_err());
}

#[test]
fn expand_broadcasts() {
    let x = t(&[3, 1], &[1i32, 2, 3]);
    let y = run1(
        &Op::Expand {
            shape: vec![2, 3, 2],
        },
        &[&x],
    );
    assert_eq!(y, t(&[2, 3, 2], &[1i32, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3]));
}

#[test]
fn pad_modes() {
    let x = t(&[3], &[1i32, 2, 3]);
    let pad = |mode, pads: &[i64], value| {
        Op::Pad(PadAttrs {
            mode,
            pads: pads.to_vec(),
            value,
        })
    };
    assert_eq!(
        run1(&pad(PadMode::Constant, &[2, 2], 9.0), &[&x]),
        t(&[7], &[9i32, 9, 1, 2, 3, 9, 9])
    );
    assert_eq!(
        run1(&pad(PadMode::Edge, &[2, 2], 0.0), &[&x]),
        t(&[7], &[1i32, 1, 1, 2, 3, 3, 3])
    );
    assert_eq!(
        run1(&pad(PadMode::Reflect, &[2, 2], 0.0), &[&x]),
        t(&[7], &[3i32, 2, 1, 2, 3, 2, 1])
    );
    assert_eq!(
        run1(&pad(PadMode::Wrap, &[2, 2], 0.0), &[&x]),
        t(&[7], &[2i32, 3, 1, 2, 3, 1, 2])
    );
    // numpy keeps reflecting past the edge: np.pad([1,2,3], (5,4), 'reflect').
    let want = [2i32, 1, 2, 3, 2, 1, 2, 3, 2, 1, 2, 3];
    assert_eq!(
        run1(&pad(PadMode::Reflect, &[5, 4], 0.0), &[&x]),
        t(&[12], &want)
    );
    let want = [2i32, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1];
    assert_eq!(
        run1(&pad(PadMode::Wrap, &[5, 4], 0.0), &[&x]),
        t(&[12], &want)
    );
    // Negative pads crop.
    assert_eq!(
        run1(&pad(PadMode::Constant, &[-1, 1], 0.0), &[&x]),
        t(&[3], &[2i32, 3, 0])
    );
    let m = t(&[2, 2], &[1f32, 2., 3., 4.]);
    let y = run1(&pad(PadMode::Edge, &[1, 0, 0, 1], 0.0), &[&m]);
    assert_close(&y, &[3, 3], &[1., 2., 2., 1., 2., 2., 3., 4., 4.], 0.0);
}

// ---------------------------------------------------------------------------------------
// Resize (values from the ONNX operator documentation's examples)

fn resize(
    mode: ResizeMode,
    transform: CoordinateTransform,
    scales: &[f32],
    roi: &[f32],
    out: &[usize],
) -> ResizeAttrs {
    ResizeAttrs {
        mode,
        coordinate_transform: transform,
        nearest_mode: NearestMode::RoundPreferFloor,
        cubic_coeff_a: -0.75,
        exclude_outside: false,
        extrapolation_value: 0.0,
        scales: scales.to_vec(),
        roi: roi.to_vec(),
        output_shape: out.to_vec(),
        scales_from_extents: false,
    }
}

#[test]
fn resize_nearest_and_linear_spec_examples() {
    let x = t(&[1, 1, 2, 2], &[1f32, 2., 3., 4.]);
    let r = resize(
        ResizeMode::Nearest,
        CoordinateTransform::HalfPixel,
        &[1., 1., 2., 3.],
        &[],
        &[1, 1, 4, 6],
    );
    let want = [
        1., 1., 1., 2., 2., 2., 1., 1., 1., 2., 2., 2., 3., 3., 3., 4., 4., 4., 3., 3., 3., 4., 4.,
        4.,
    ];
    assert_close(&run1(&Op::Resize(r), &[&x]), &[1, 1, 4, 6], &want, 0.0);

    let x8 = t(&[1, 1, 2, 4], &[1f32, 2., 3., 4., 5., 6., 7., 8.]);
    let r = resize(
        ResizeMode::Linear,
        CoordinateTransform::HalfPixel,
        &[1., 1., 0.6, 0.6],
        &[],
        &[1, 1, 1, 2],
    );
    assert_close(
        &run1(&Op::Resize(r), &[&x8]),
        &[1, 1, 1, 2],
        &[2.6666665, 4.333333],
        1e-6,
    );

    let r = resize(
        ResizeMode::Linear,
        CoordinateTransform::AlignCorners,
        &[1., 1., 2., 2.],
        &[],
        &[1, 1, 4, 4],
    );
    let third = 1.0 / 3.0;
    let want = [
        1.,
        1. + third,
        2. - third,
        2.,
        2. - third,
        2.,
        2. + third,
        3. - third,
        2. + third,
        3. - third,
        3.,
        3. + third,
        3.,
        3. + third,
        4. - third,
        4.,
    ];
    assert_close(&run1(&Op::Resize(r), &[&x]), &[1, 1, 4, 4], &want, 1e-6);
}

#[test]
fn resize_cubic_and_tf_crop_and_resize_spec_examples() {
    let x = t(
        &[1, 1, 4, 4],
        &(1..=16).map(|v| v as f32).collect::<Vec<_>>(),
    );
    let r = resize(
        ResizeMode::Cubic,
        CoordinateTransform::HalfPixel,
        &[1., 1., 2., 2.],
        &[],
        &[1, 1, 8, 8],
    );
    let y = run1(&Op::Resize(r), &[&x]).to_f64_vec();
    let first_row = [
        0.47265625, 0.76953125, 1.24609375, 1.875, 2.28125, 2.91015625, 3.38671875, 3.68359375,
    ];
    let last_row = [
        13.31640625,
        13.61328125,
        14.08984375,
        14.71875,
        15.125,
        15.75390625,
        16.23046875,
        16.52734375,
    ];
    assert_close(
        &Tensor::from_vec(&[8], y[..8].to_vec()),
        &[8],
        &first_row,
        1e-6,
    );
    assert_close(
        &Tensor::from_vec(&[8], y[56..].to_vec()),
        &[8],
        &last_row,
        1e-6,
    );

    let roi = [0., 0., 0.4, 0.6, 1., 1., 0.6, 0.8];
    let r = resize(
        ResizeMode::Linear,
        CoordinateTransform::TfCropAndResize,
        &[1., 1., 0.75, 0.75],
        &roi,
        &[1, 1, 3, 3],
    );
    let want = [7.6000004, 7.9, 8.2, 8.8, 9.1, 9.400001, 10., 10.3, 10.6];
    assert_close(&run1(&Op::Resize(r), &[&x]), &[1, 1, 3, 3], &want, 1e-6);

    let roi = [0., 0., 0.4, 0.6, 1., 1., 1.2, 1.7];
    let mut r = resize(
        ResizeMode::Linear,
        CoordinateTransform::TfCropAndResize,
        &[1., 1., 0.75, 0.75],
        &roi,
        &[1, 1, 3, 3],
    );
    r.extrapolation_value = 10.0;
    let want = [7.6000004, 10., 10., 12.400001, 10., 10., 10., 10., 10.];
    assert_close(&run1(&Op::Resize(r), &[&x]), &[1, 1, 3, 3], &want, 1e-6);
}

#[test]
fn resize_nearest_modes_and_integer_data() {
    // 1-D, 3 → 8 with asymmetric coordinates: x = y · 3/8.
    let x = t(&[3], &[10u8, 20, 30]);
    let mut r = resize(
        ResizeMode::Nearest,
        CoordinateTransform::Asymmetric,
        &[8.0 / 3.0],
        &[],
        &[8],
    );
    // coordinates: 0, .375, .75, 1.125, 1.5, 1.875, 2.25, 2.625
    let cases = [
        (NearestMode::Floor, [10u8, 10, 10, 20, 20, 20, 30, 30]),
        (NearestMode::Ceil, [10u8, 20, 20, 30, 30, 30, 30, 30]),
        (
            NearestMode::RoundPreferFloor,
            [10u8, 10, 20, 20, 20, 30, 30, 30],
        ),
        (
            NearestMode::RoundPreferCeil,
            [10u8, 10, 20, 20, 30, 30, 30, 30],
        ),
    ];
    for (mode, want) in cases {
        r.nearest_mode = mode;
        assert_eq!(
            run1(&Op::Resize(r.clone()), &[&x]),
            t(&[8], &want),
            "{mode:?}"
        );
    }
    // Linear on integers rounds half to even: 10, 15, 20 → between 10 and 20 at .5 = 15.
    let r = resize(
        ResizeMode::Linear,
        CoordinateTransform::AlignCorners,
        &[5.0 / 3.0],
        &[],
        &[5],
    );
    assert_eq!(
        run1(&Op::Resize(r), &[&x]),
        t(&[5], &[10u8, 15, 20, 25, 30])
    );
}

// ---------------------------------------------------------------------------------------
// Graphs

/// x → Add(x, const) → Relu → out; also Mul(x, x) as a second output.
fn small_graph() -> Graph {
    let mut g = Graph::default();
    let f32_2 = TensorType::new(DType::F32, vec![2]);
    let x = g.add_value("x".into(), f32_2.clone(), None);
    let c = g.add_value("c".into(), f32_2.clone(), Some(t(&[2], &[1f32, -5.])));
    let sum = g.add_value("sum".into(), f32_2.clone(), None);
    let relu = g.add_value("relu".into(), f32_2.clone(), None);
    let square = g.add_value("square".into(), f32_2, None);
    let node = |name: &str, op: Op, inputs: &[ValueId], output: ValueId| Node {
        name: name.into(),
        onnx_op: op.name(),
        op,
        inputs: inputs.iter().map(|&v| Some(v)).collect(),
        outputs: vec![output],
    };
    g.nodes
        .push(node("add", binary(BinaryOp::Add), &[x, c], sum));
    g.nodes
        .push(node("relu", unary(UnaryOp::Relu), &[sum], relu));
    g.nodes
        .push(node("square", binary(BinaryOp::Mul), &[x, x], square));
    g.inputs = vec![x];
    g.outputs = vec![relu, square];
    g
}

#[test]
fn run_graph_evaluates_in_order() {
    let g = small_graph();
    let x = t(&[2], &[2f32, 3.]);
    let out = run_graph(&g, std::slice::from_ref(&x)).unwrap();
    assert_eq!(out, vec![t(&[2], &[3f32, 0.]), t(&[2], &[4f32, 9.])]);
    let all = run_graph_all(&g, &[x]).unwrap();
    assert_eq!(all.len(), 5);
    assert_eq!(all[2], Some(t(&[2], &[3f32, -2.])));
    assert!(all.iter().all(Option::is_some));
}

#[test]
fn run_graph_rejects_bad_inputs() {
    let g = small_graph();
    assert!(run_graph(&g, &[]).unwrap_err().contains("inputs"));
    let wrong = t(&[3], &[1f32, 2., 3.]);
    assert!(run_graph(&g, &[wrong]).is_err());
    let wrong_type = t(&[2], &[1i32, 2]);
    assert!(run_graph(&g, &[wrong_type]).is_err());
}

#[test]
fn eval_op_reports_errors_instead_of_panicking() {
    let x = t(&[2], &[1f32, 2.]);
    assert!(
        eval_op(&Op::matmul(), &[Some(&x)]).is_err(),
        "missing input"
    );
    assert!(eval_op(&Op::Concat { axis: 3 }, &[Some(&x)]).is_err());
    assert!(eval_op(&Op::Gather { axis: 2 }, &[Some(&x), Some(&x)]).is_err());
    assert!(eval_op(
        &Op::Softmax {
            axis: 1,
            log: false
        },
        &[Some(&x)]
    )
    .is_err());
    let pool = pool_attrs(PoolKind::Max, &[2], &[1], &[0, 0], &[1], &[1]);
    assert!(
        eval_op(&pool, &[Some(&x)]).is_err(),
        "rank-1 input to a pool"
    );
    let conv = ConvAttrs {
        kernel: vec![3],
        strides: vec![1],
        pads: vec![0, 0],
        dilations: vec![1],
        group: 1,
        activation: nnc::ops::Activation::None,
    };
    let xi = t(&[1, 1, 2], &[1f32, 2.]);
    let w = t(&[1, 1, 3], &[1f32, 1., 1.]);
    assert!(
        eval_op(&Op::Conv(conv), &[Some(&xi), Some(&w)]).is_err(),
        "kernel larger than input"
    );
    assert!(eval_op(&unary(UnaryOp::Exp), &[Some(&t(&[1], &[1i32]))]).is_err());
}

#[test]
fn reduce_max_and_min_order_signed_zeros() {
    // IEEE maximum/minimum: +0 above -0 whatever their order, as the compiled vector
    // folds give (numpy's first-wins fold would not).
    for data in [[0.0f32, -0.0], [-0.0, 0.0]] {
        let x = t(&[2], &data);
        for (kind, negative) in [(ReduceKind::Max, false), (ReduceKind::Min, true)] {
            let op = Op::Reduce(ReduceAttrs {
                kind,
                axes: vec![0],
                keepdims: false,
            });
            let y = run1(&op, &[&x]).to_f64_vec()[0];
            assert_eq!(
                (y, y.is_sign_negative()),
                (0.0, negative),
                "{kind:?} of {data:?}"
            );
        }
    }
}
