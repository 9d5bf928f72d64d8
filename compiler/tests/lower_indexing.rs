//! GatherElements, ScatterElements, ScatterND, GatherND, CumSum and TopK code
//! generation: one-node graphs compiled for the host, linked into a shared object, run,
//! and compared with the reference interpreter over several dtypes, axes, reductions
//! and duplicate / negative indices; every graph is also compiled for aarch64.
//!
//! Out-of-range indices must never make the generated code touch memory outside a
//! buffer: with `--index-checks clamp` they are clamped into their axis, which these
//! tests compare with the interpreter run on indices clamped beforehand (the default,
//! an error status, is tested in runtime_checks.rs).

#[path = "common/graphs.rs"]
mod graphs;
#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use graphs::{elementwise_tolerance, one_node, In, Rng, Scale};
use nnc::codegen::{compile_graph, Arch, CompileOptions, IndexChecks, Target};
use nnc::ir::{DType, Tensor};
use nnc::ops::{Op, ScatterReduction};

/// Small values of `dtype` (many ties): integers in [-4, 4] (unsigned [0, 8]),
/// floats on a 1/4 grid in [-2, 2].
fn small_values(rng: &mut Rng, dtype: DType, shape: &[usize]) -> Tensor {
    let n = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|_| rng.range(-8, 9) as f64).collect();
    match dtype {
        DType::Bool => Tensor::from_vec(shape, v.iter().map(|x| *x > 0.0).collect()),
        d if d.is_signed_int() => {
            Tensor::from_vec(shape, v.iter().map(|x| (x / 2.0).round() as i64).collect()).cast(d)
        }
        d if d.is_int() => Tensor::from_vec(
            shape,
            v.iter().map(|x| (x / 2.0).round() as i64 + 4).collect(),
        )
        .cast(d),
        d => Tensor::from_vec(shape, v.iter().map(|x| x / 4.0).collect::<Vec<f64>>()).cast(d),
    }
}

/// Indices into an axis of `dim`, in `[-dim, dim)`.
fn indices(rng: &mut Rng, dtype: DType, shape: &[usize], dim: usize) -> Tensor {
    let n = shape.iter().product();
    let v: Vec<i64> = (0..n)
        .map(|_| rng.range(-(dim as i64), dim as i64))
        .collect();
    Tensor::from_vec(shape, v).cast(dtype)
}

/// Integers exactly; floats within a relative tolerance floored at 1% of the largest
/// magnitude (running sums accumulate float32 in float32, the interpreter in f64).
fn compare(actual: &Tensor, expected: &Tensor) -> Result<(), String> {
    let scale = Scale::Elementwise {
        fraction: 1e-2,
        at_least: 0.0,
    };
    graphs::compare(
        actual,
        expected,
        elementwise_tolerance(expected.dtype()),
        scale,
    )
}

/// Compiles and runs `op` on `inputs`, compares every output with the interpreter run
/// on `reference_inputs` (the same unless indices were clamped), and compiles for
/// aarch64.
fn check_with(
    name: &str,
    op: Op,
    inputs: &[Tensor],
    reference_inputs: &[Tensor],
) -> Result<(), String> {
    let (g, _) = one_node(op, inputs.iter().cloned().map(In::Given).collect(), 0);
    let expected = nnc::interp::run_graph(&g, reference_inputs)
        .map_err(|e| format!("{name}: interpreter: {e}"))?;
    let mut host = runner::options(Target::host());
    if inputs != reference_inputs {
        host.index_checks = IndexChecks::Clamp;
    }
    let actual = runner::Compiled::with_options(&g, &host)
        .and_then(|c| c.run(&g, inputs))
        .map_err(|e| format!("{name}: {e}"))?;
    for (k, (a, e)) in actual.iter().zip(&expected).enumerate() {
        compare(a, e).map_err(|m| format!("{name}: output {k}: {m}"))?;
    }
    let arm = CompileOptions {
        target: Target::new(Arch::Aarch64, None).map_err(|e| e.to_string())?,
        prefix: String::new(),
        weights: Default::default(),
        kernels: Default::default(),
        index_checks: Default::default(),
    };
    compile_graph(&g, &arm).map_err(|e| format!("{name}: aarch64: {e}"))?;
    Ok(())
}

fn check(name: &str, op: Op, inputs: &[Tensor]) -> Result<(), String> {
    check_with(name, op, inputs, inputs)
}

fn report(failures: Vec<String>, total: usize) {
    for f in &failures {
        eprintln!("FAIL {f}");
    }
    assert!(
        failures.is_empty(),
        "{} of {total} cases failed",
        failures.len()
    );
}

const DTYPES: [DType; 8] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I64,
    DType::I32,
    DType::U8,
    DType::Bool,
];
const REDUCTIONS: [ScatterReduction; 5] = [
    ScatterReduction::None,
    ScatterReduction::Add,
    ScatterReduction::Mul,
    ScatterReduction::Max,
    ScatterReduction::Min,
];

/// `shape` with `axis` resized to `n` and every other axis shrunk by `shrink` (≥ 1).
fn index_shape(shape: &[usize], axis: usize, n: usize, shrink: usize) -> Vec<usize> {
    shape
        .iter()
        .enumerate()
        .map(|(d, &s)| if d == axis { n } else { (s - shrink).max(1) })
        .collect()
}

#[test]
fn gather_elements_dtypes_and_axes() {
    let mut rng = Rng::new(1);
    let mut failures = vec![];
    let mut total = 0;
    let shape = [3, 4, 5];
    for dtype in DTYPES {
        for axis in 0..3 {
            for (shrink, idx_dtype) in [(0, DType::I64), (1, DType::I32)] {
                let data = small_values(&mut rng, dtype, &shape);
                let is = index_shape(&shape, axis, 6, shrink);
                let idx = indices(&mut rng, idx_dtype, &is, shape[axis]);
                total += 1;
                let name = format!("GatherElements {dtype} axis {axis} indices {is:?}");
                failures.extend(check(&name, Op::GatherElements { axis }, &[data, idx]).err());
            }
        }
    }
    report(failures, total);
}

#[test]
fn scatter_elements_every_reduction() {
    let mut rng = Rng::new(2);
    let mut failures = vec![];
    let mut total = 0;
    let shape = [3, 4, 5];
    for dtype in DTYPES {
        for reduction in REDUCTIONS {
            if dtype == DType::Bool && reduction != ScatterReduction::None {
                continue;
            }
            for axis in 0..3 {
                let data = small_values(&mut rng, dtype, &shape);
                // More updates than the axis holds: duplicates are certain.
                let is = index_shape(&shape, axis, 7, 1);
                let idx = indices(&mut rng, DType::I64, &is, shape[axis]);
                let upd = small_values(&mut rng, dtype, &is);
                total += 1;
                let name = format!("ScatterElements {dtype} {reduction:?} axis {axis}");
                failures.extend(
                    check(
                        &name,
                        Op::ScatterElements { axis, reduction },
                        &[data, idx, upd],
                    )
                    .err(),
                );
            }
        }
    }
    report(failures, total);
}

#[test]
fn scatter_nd_and_gather_nd() {
    let mut rng = Rng::new(3);
    let mut failures = vec![];
    let mut total = 0;
    let shape = [4, 3, 5];
    for dtype in [DType::F32, DType::F16, DType::I64, DType::U8] {
        for k in 1..=3 {
            // Index tuples [6, 2, k]: axis d of the tuple indexes data axis d.
            let tuples = 12;
            let comps: Vec<i64> = (0..tuples * k)
                .map(|j| {
                    let dim = shape[j % k] as i64;
                    rng.range(-dim, dim)
                })
                .collect();
            let idx = Tensor::from_vec(&[6, 2, k], comps);
            let mut us = vec![6, 2];
            us.extend(&shape[k..]);
            for reduction in REDUCTIONS {
                let data = small_values(&mut rng, dtype, &shape);
                let upd = small_values(&mut rng, dtype, &us);
                total += 1;
                let name = format!("ScatterND {dtype} {reduction:?} k {k}");
                failures.extend(
                    check(
                        &name,
                        Op::ScatterND { reduction },
                        &[data, idx.clone(), upd],
                    )
                    .err(),
                );
            }
            total += 1;
            let data = small_values(&mut rng, dtype, &shape);
            failures.extend(
                check(
                    &format!("GatherND {dtype} k {k}"),
                    Op::GatherND { batch_dims: 0 },
                    &[data, idx],
                )
                .err(),
            );
        }
        // Batch axes: data [4, 3, 5], indices [4, 2, k] over the axes after the first.
        for (batch_dims, k) in [(1, 1), (1, 2), (2, 1)] {
            let mut is = shape[..batch_dims].to_vec();
            is.extend([2, k]);
            let n: usize = is.iter().product();
            let comps: Vec<i64> = (0..n)
                .map(|j| {
                    let dim = shape[batch_dims + j % k] as i64;
                    rng.range(-dim, dim)
                })
                .collect();
            let idx = Tensor::from_vec(&is, comps);
            let data = small_values(&mut rng, dtype, &shape);
            total += 1;
            let name = format!("GatherND {dtype} batch_dims {batch_dims} k {k}");
            failures.extend(check(&name, Op::GatherND { batch_dims }, &[data, idx]).err());
        }
    }
    report(failures, total);
}

#[test]
fn out_of_range_indices_are_clamped_with_index_checks_clamp() {
    let mut failures = vec![];
    let data = Tensor::from_vec(&[2, 3], (0..6).map(|v| v as f32).collect::<Vec<f32>>());
    let wild = Tensor::from_vec(&[2, 3], vec![100i64, -100, 3, -4, i64::MAX, i64::MIN]);
    let clamped = Tensor::from_vec(&[2, 3], vec![2i64, 0, 2, 0, 2, 0]);
    let upd = Tensor::from_vec(&[2, 3], vec![10f32, 11., 12., 13., 14., 15.]);
    failures.extend(
        check_with(
            "GatherElements",
            Op::GatherElements { axis: 1 },
            &[data.clone(), wild.clone()],
            &[data.clone(), clamped.clone()],
        )
        .err(),
    );
    for reduction in REDUCTIONS {
        let op = Op::ScatterElements { axis: 1, reduction };
        let name = format!("ScatterElements {reduction:?}");
        failures.extend(
            check_with(
                &name,
                op,
                &[data.clone(), wild.clone(), upd.clone()],
                &[data.clone(), clamped.clone(), upd.clone()],
            )
            .err(),
        );
    }
    let wild = Tensor::from_vec(&[3, 2], vec![7i64, -9, 2, 3, -1, 100]);
    let clamped = Tensor::from_vec(&[3, 2], vec![1i64, 0, 1, 2, 1, 2]);
    let upd = Tensor::from_vec(&[3], vec![20f32, 21., 22.]);
    let op = Op::ScatterND {
        reduction: ScatterReduction::Add,
    };
    failures.extend(
        check_with(
            "ScatterND",
            op,
            &[data.clone(), wild.clone(), upd.clone()],
            &[data.clone(), clamped.clone(), upd],
        )
        .err(),
    );
    failures.extend(
        check_with(
            "GatherND",
            Op::GatherND { batch_dims: 0 },
            &[data.clone(), wild],
            &[data, clamped],
        )
        .err(),
    );
    report(failures, 8);
}

#[test]
fn cumsum_directions_axes_and_dtypes() {
    let mut rng = Rng::new(4);
    let mut failures = vec![];
    let mut total = 0;
    let shape = [3, 4, 5];
    for dtype in [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::I64,
        DType::I32,
        DType::U8,
        DType::I8,
    ] {
        for axis in 0..3 {
            for (exclusive, reverse) in [(false, false), (true, false), (false, true), (true, true)]
            {
                let x = small_values(&mut rng, dtype, &shape);
                total += 1;
                // Half the cases are CumProd (the product of at most 5 values stays
                // within every type's range... or wraps identically in both).
                let product = exclusive != reverse;
                let name = format!(
                    "CumSum {dtype} axis {axis} exclusive {exclusive} reverse {reverse} product {product}"
                );
                failures.extend(
                    check(
                        &name,
                        Op::CumSum {
                            axis,
                            exclusive,
                            reverse,
                            product,
                        },
                        &[x],
                    )
                    .err(),
                );
            }
        }
    }
    report(failures, total);
}

#[test]
fn top_k_ties_special_values_and_dtypes() {
    let mut rng = Rng::new(5);
    let mut failures = vec![];
    let mut total = 0;
    let shape = [3, 6, 4];
    for dtype in [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I64,
        DType::U64,
        DType::I8,
        DType::U8,
    ] {
        for axis in 0..3 {
            for largest in [true, false] {
                for k in [1, shape[axis] / 2, shape[axis]] {
                    let x = small_values(&mut rng, dtype, &shape);
                    total += 1;
                    let name = format!("TopK {dtype} axis {axis} k {k} largest {largest}");
                    failures.extend(check(&name, Op::TopK { axis, k, largest }, &[x]).err());
                }
            }
        }
    }
    let special = [
        f32::NAN,
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        1.0,
        -f32::NAN,
        1.0,
        -0.0,
    ];
    for dtype in [DType::F32, DType::F64, DType::F16] {
        let x = Tensor::from_vec(&[special.len()], special.to_vec()).cast(dtype);
        for largest in [true, false] {
            total += 1;
            let name = format!("TopK {dtype} special values largest {largest}");
            failures.extend(
                check(
                    &name,
                    Op::TopK {
                        axis: 0,
                        k: special.len(),
                        largest,
                    },
                    std::slice::from_ref(&x),
                )
                .err(),
            );
        }
    }
    report(failures, total);
}
