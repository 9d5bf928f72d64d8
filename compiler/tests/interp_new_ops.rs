//! Interpreter cases for GatherElements, ScatterElements, ScatterND, GatherND, CumSum and
//! TopK, mostly the examples of the ONNX operator specification. Every evaluation also
//! asserts that the output types equal `ops::infer_types`.

use nnc::interp::eval_op;
use nnc::ir::{DType, Element, Tensor, TensorType};
use nnc::ops::*;

fn run(op: &Op, inputs: &[&Tensor]) -> Vec<Tensor> {
    let args: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
    let out = eval_op(op, &args).unwrap_or_else(|e| panic!("{e}"));
    let types: Vec<Option<TensorType>> = inputs.iter().map(|t| Some(t.ty())).collect();
    let want = infer_types(op, &types).expect("shape inference");
    let got: Vec<TensorType> = out.iter().map(Tensor::ty).collect();
    assert_eq!(got, want, "output types of {op:?}");
    out
}

fn run1(op: &Op, inputs: &[&Tensor]) -> Tensor {
    run(op, inputs).remove(0)
}

fn t<T: Element>(shape: &[usize], data: &[T]) -> Tensor {
    Tensor::from_vec(shape, data.to_vec())
}

fn assert_values(got: &Tensor, shape: &[usize], want: &[f64]) {
    assert_eq!(got.shape(), shape, "shape");
    let values = got.to_f64_vec();
    assert_eq!(values.len(), want.len(), "element count");
    for (i, (g, w)) in values.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || (g - w).abs() <= 1e-6 * (1.0 + w.abs());
        assert!(ok, "element {i}: got {g}, want {w} (all: {values:?})");
    }
}

#[test]
fn gather_elements_spec_examples_and_negative_indices() {
    let data = t(&[2, 2], &[1f32, 2., 3., 4.]);
    let idx = t(&[2, 2], &[0i64, 0, 1, 0]);
    assert_values(
        &run1(&Op::GatherElements { axis: 1 }, &[&data, &idx]),
        &[2, 2],
        &[1., 1., 4., 3.],
    );

    let data = t(&[3, 3], &[1i32, 2, 3, 4, 5, 6, 7, 8, 9]);
    let idx = t(&[2, 3], &[-1i64, -2, 0, -2, 0, 0]);
    let y = run1(&Op::GatherElements { axis: 0 }, &[&data, &idx]);
    assert_eq!(y.dtype(), DType::I32);
    assert_values(&y, &[2, 3], &[7., 5., 3., 4., 2., 3.]);

    // Indices may be smaller than the data off the axis; out of range is an error.
    let idx = t(&[1, 2], &[2i32, 0]);
    assert_values(
        &run1(&Op::GatherElements { axis: 1 }, &[&data, &idx]),
        &[1, 2],
        &[3., 1.],
    );
    let bad = t(&[1, 1], &[3i64]);
    assert!(eval_op(&Op::GatherElements { axis: 1 }, &[Some(&data), Some(&bad)]).is_err());
}

#[test]
fn scatter_elements_reductions_and_duplicates() {
    let op = |axis, reduction| Op::ScatterElements { axis, reduction };
    let data = t(&[3, 3], &[0f32; 9]);
    let idx = t(&[2, 3], &[1i64, 0, 2, 0, 2, 1]);
    let upd = t(&[2, 3], &[1.0f32, 1.1, 1.2, 2.0, 2.1, 2.2]);
    assert_values(
        &run1(&op(0, ScatterReduction::None), &[&data, &idx, &upd]),
        &[3, 3],
        &[2.0, 1.1, 0.0, 1.0, 0.0, 2.2, 0.0, 2.1, 1.2].map(|v: f64| v as f32 as f64),
    );

    let data = t(&[1, 5], &[1f32, 2., 3., 4., 5.]);
    let idx = t(&[1, 2], &[1i64, -4]); // both address element 1
    let upd = t(&[1, 2], &[1.5f32, 3.0]);
    let cases = [
        (ScatterReduction::None, 3.0),
        (ScatterReduction::Add, 6.5),
        (ScatterReduction::Mul, 9.0),
        (ScatterReduction::Max, 3.0),
        (ScatterReduction::Min, 1.5),
    ];
    for (r, v) in cases {
        assert_values(
            &run1(&op(1, r), &[&data, &idx, &upd]),
            &[1, 5],
            &[1., v, 3., 4., 5.],
        );
    }

    // Integers wrap like numpy.
    let data = t(&[2], &[127i8, 0]);
    let idx = t(&[1], &[0i64]);
    let upd = t(&[1], &[1i8]);
    assert_values(
        &run1(&op(0, ScatterReduction::Add), &[&data, &idx, &upd]),
        &[2],
        &[-128., 0.],
    );
}

#[test]
fn scatter_nd_spec_examples() {
    let data = t(&[8], &[1f32, 2., 3., 4., 5., 6., 7., 8.]);
    let idx = t(&[4, 1], &[4i64, 3, 1, 7]);
    let upd = t(&[4], &[9f32, 10., 11., 12.]);
    let y = run1(
        &Op::ScatterND {
            reduction: ScatterReduction::None,
        },
        &[&data, &idx, &upd],
    );
    assert_values(&y, &[8], &[1., 11., 3., 10., 9., 6., 7., 12.]);

    // Whole slices, with a duplicate index accumulated by mul.
    let data = t(&[3, 2], &[1i64, 2, 3, 4, 5, 6]);
    let idx = t(&[2, 1], &[-1i64, 2]);
    let upd = t(&[2, 2], &[2i64, 3, 10, 10]);
    let y = run1(
        &Op::ScatterND {
            reduction: ScatterReduction::Mul,
        },
        &[&data, &idx, &upd],
    );
    assert_values(&y, &[3, 2], &[1., 2., 3., 4., 100., 180.]);
}

#[test]
fn gather_nd_spec_examples() {
    let data = t(&[2, 2], &[0i32, 1, 2, 3]);
    let idx = t(&[2, 2], &[0i64, 0, 1, 1]);
    assert_values(
        &run1(&Op::GatherND { batch_dims: 0 }, &[&data, &idx]),
        &[2],
        &[0., 3.],
    );

    let idx = t(&[2, 1], &[1i64, 0]);
    assert_values(
        &run1(&Op::GatherND { batch_dims: 0 }, &[&data, &idx]),
        &[2, 2],
        &[2., 3., 0., 1.],
    );

    let data = t(&[2, 2, 2], &[0f32, 1., 2., 3., 4., 5., 6., 7.]);
    let idx = t(&[2, 1, 2], &[0i64, 1, 1, 0]);
    assert_values(
        &run1(&Op::GatherND { batch_dims: 0 }, &[&data, &idx]),
        &[2, 1, 2],
        &[2., 3., 4., 5.],
    );

    let idx = t(&[2, 1], &[1i64, 0]);
    assert_values(
        &run1(&Op::GatherND { batch_dims: 1 }, &[&data, &idx]),
        &[2, 2],
        &[2., 3., 4., 5.],
    );
}

#[test]
fn cumsum_directions_and_types() {
    let x = t(&[5], &[1f64, 2., 3., 4., 5.]);
    let op = |exclusive, reverse| Op::CumSum {
        axis: 0,
        exclusive,
        reverse,
        product: false,
    };
    assert_values(
        &run1(&op(false, false), &[&x]),
        &[5],
        &[1., 3., 6., 10., 15.],
    );
    assert_values(&run1(&op(true, false), &[&x]), &[5], &[0., 1., 3., 6., 10.]);
    assert_values(
        &run1(&op(false, true), &[&x]),
        &[5],
        &[15., 14., 12., 9., 5.],
    );
    assert_values(&run1(&op(true, true), &[&x]), &[5], &[14., 12., 9., 5., 0.]);

    let x = t(&[2, 3], &[1i32, 2, 3, 4, 5, 6]);
    let y = run1(
        &Op::CumSum {
            axis: 0,
            exclusive: false,
            reverse: false,
            product: false,
        },
        &[&x],
    );
    assert_eq!(y.dtype(), DType::I32);
    assert_values(&y, &[2, 3], &[1., 2., 3., 5., 7., 9.]);
    let y = run1(
        &Op::CumSum {
            axis: 1,
            exclusive: false,
            reverse: false,
            product: false,
        },
        &[&x],
    );
    assert_values(&y, &[2, 3], &[1., 3., 6., 4., 9., 15.]);
    // CumProd, exclusive and reversed.
    let y = run1(
        &Op::CumSum {
            axis: 1,
            exclusive: true,
            reverse: true,
            product: true,
        },
        &[&x],
    );
    assert_values(&y, &[2, 3], &[6., 3., 1., 30., 6., 1.]);

    let x = t(&[2], &[200u8, 100]);
    assert_values(&run1(&op(false, false), &[&x]), &[2], &[200., 44.]);
}

#[test]
fn top_k_order_ties_and_nan() {
    let x = t(
        &[3, 4],
        &[0f32, 1., 2., 3., 4., 5., 6., 7., 11., 10., 9., 8.],
    );
    let out = run(
        &Op::TopK {
            axis: 1,
            k: 3,
            largest: true,
        },
        &[&x],
    );
    assert_values(&out[0], &[3, 3], &[3., 2., 1., 7., 6., 5., 11., 10., 9.]);
    assert_values(&out[1], &[3, 3], &[3., 2., 1., 3., 2., 1., 0., 1., 2.]);

    let out = run(
        &Op::TopK {
            axis: 0,
            k: 2,
            largest: false,
        },
        &[&x],
    );
    assert_values(&out[0], &[2, 4], &[0., 1., 2., 3., 4., 5., 6., 7.]);
    assert_values(&out[1], &[2, 4], &[0., 0., 0., 0., 1., 1., 1., 1.]);

    // Ties go to the lower index whichever way the sort runs.
    let x = t(&[5], &[0i64, 0, 1, 1, 0]);
    let out = run(
        &Op::TopK {
            axis: 0,
            k: 3,
            largest: true,
        },
        &[&x],
    );
    assert_values(&out[0], &[3], &[1., 1., 0.]);
    assert_values(&out[1], &[3], &[2., 3., 0.]);
    let out = run(
        &Op::TopK {
            axis: 0,
            k: 4,
            largest: false,
        },
        &[&x],
    );
    assert_values(&out[0], &[4], &[0., 0., 0., 1.]);
    assert_values(&out[1], &[4], &[0., 1., 4., 2.]);

    // NaN sorts above every number; -0 ties with +0.
    let x = t(&[4], &[1f32, f32::NAN, -0.0, 0.0]);
    let out = run(
        &Op::TopK {
            axis: 0,
            k: 4,
            largest: true,
        },
        &[&x],
    );
    assert_values(&out[1], &[4], &[1., 0., 2., 3.]);
    let out = run(
        &Op::TopK {
            axis: 0,
            k: 2,
            largest: false,
        },
        &[&x],
    );
    assert_values(&out[1], &[2], &[2., 3.]);
}
