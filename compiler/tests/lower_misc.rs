//! Pooling, Softmax/LogSoftmax, LayerNormalization, reductions, ArgMax/ArgMin and
//! Resize code generation: one-node graphs compiled for the host, linked into a shared
//! object, run, and compared with the reference interpreter; every graph is also
//! compiled for aarch64 to prove it lowers there.
//!
//! Floats are compared element by element with a relative tolerance (1e-5 for f32)
//! whose denominator is floored at 1% of the output's largest magnitude: results that
//! cancel to almost zero (a sum of ±1 data, a normalized value near the mean) carry the
//! rounding error of their terms, not of themselves, and the interpreter computes in f64
//! where the kernels accumulate float32 in float32. NaN must
//! match NaN; integers must match exactly.
//!
//! Run with `cargo test -p nnc --test lower_misc --release`.

use std::time::Instant;

#[path = "common/graphs.rs"]
mod graphs;
#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use graphs::{elementwise_tolerance, f32s, rt, try_one_node, In, Rng, Scale};
use nnc::codegen::{compile_graph, Arch, CompileOptions, Target};
use nnc::ir::{DType, Tensor, TensorType};
use nnc::ops::infer::window_output;
use nnc::ops::{
    ArgReduceAttrs, CoordinateTransform, NearestMode, Op, PoolAttrs, PoolKind, ReduceAttrs,
    ReduceKind, ResizeAttrs, ResizeMode,
};
use runner::{aarch64_harness, run_on_aarch64, Compiled};

// ---------------------------------------------------------------------------------------
// Harness.

/// A float32 input of `shape` whose values come from `f(flat index)`.
fn given(shape: &[usize], f: impl Fn(usize) -> f32) -> In {
    let n = shape.iter().product();
    In::Given(Tensor::from_vec(shape, (0..n).map(f).collect::<Vec<f32>>()))
}

/// Floats element by element (see the top of the file), integers exactly.
fn compare(actual: &Tensor, expected: &Tensor) -> Result<(), String> {
    let scale = Scale::Elementwise {
        // Inputs are of magnitude ~1, so sums that cancel (an average of 90 such
        // values) carry absolute rounding errors of ~1e-2·tol whatever the result.
        fraction: 1e-2,
        at_least: 1e-2,
    };
    graphs::compare(
        actual,
        expected,
        elementwise_tolerance(expected.dtype()),
        scale,
    )
}

/// Compiles and runs one node, compares with the interpreter and compiles it for
/// aarch64; returns a failure description so a test can report every failing case.
fn check(name: &str, op: Op, ins: Vec<In>, seed: u64) -> Result<(), String> {
    let (g, inputs) = try_one_node(op, ins, seed).map_err(|e| format!("{name}: {e}"))?;
    let expected =
        nnc::interp::run_graph(&g, &inputs).map_err(|e| format!("{name}: interpreter: {e}"))?;
    let lib = Compiled::new(&g).map_err(|e| format!("{name}: compile: {e}"))?;
    let actual = lib
        .run(&g, &inputs)
        .map_err(|e| format!("{name}: run: {e}"))?;
    compare(&actual[0], &expected[0]).map_err(|e| format!("{name}: {e}"))?;
    // Every case must also lower for aarch64 and for the x86-64 baseline (SSE4.1 only).
    for (arch, cpu) in [(Arch::Aarch64, None), (Arch::X86_64, Some("baseline"))] {
        let target = Target::new(arch, cpu).map_err(|e| e.to_string())?;
        let opts = CompileOptions {
            target,
            prefix: String::new(),
            weights: Default::default(),
            kernels: Default::default(),
            index_checks: Default::default(),
        };
        compile_graph(&g, &opts).map_err(|e| format!("{name}: {arch:?} {cpu:?}: {e}"))?;
    }
    Ok(())
}

type Case = (String, Op, Vec<In>);

/// Runs every case, then reports all failures together.
fn check_all(cases: Vec<Case>) {
    let total = cases.len();
    let failures: Vec<String> = cases
        .into_iter()
        .enumerate()
        .filter_map(|(i, (name, op, ins))| check(&name, op, ins, i as u64).err())
        .collect();
    for f in &failures {
        eprintln!("FAIL {f}");
    }
    assert!(
        failures.is_empty(),
        "{} of {total} cases failed",
        failures.len()
    );
}

/// Checks that lowering `op` on `ins` fails with an error (and does not panic).
fn expect_lowering_error(op: Op, ins: Vec<In>) {
    let (g, _) = try_one_node(op, ins, 0).expect("shape inference");
    let opts = CompileOptions {
        target: Target::host(),
        prefix: String::new(),
        weights: Default::default(),
        kernels: Default::default(),
        index_checks: Default::default(),
    };
    assert!(compile_graph(&g, &opts).is_err());
}

// ---------------------------------------------------------------------------------------
// Pooling.

/// Pool attributes with the output size derived as ONNX does (ceil_mode optional).
fn pool(
    kind: PoolKind,
    input: &[usize],
    kernel: &[usize],
    strides: &[usize],
    pads: &[usize],
    dilations: &[usize],
    ceil: bool,
) -> Op {
    let s = kernel.len();
    let output_spatial = (0..s)
        .map(|a| {
            let o = window_output(
                input[2 + a],
                kernel[a],
                strides[a],
                pads[a] + pads[s + a],
                dilations[a],
                ceil,
            )
            .expect("valid window");
            // ONNX drops a last ceil_mode window that would start inside the end padding.
            if ceil && (o - 1) * strides[a] >= input[2 + a] + pads[a] {
                o - 1
            } else {
                o
            }
        })
        .collect();
    Op::Pool(PoolAttrs {
        kind,
        kernel: kernel.to_vec(),
        strides: strides.to_vec(),
        pads: pads.to_vec(),
        dilations: dilations.to_vec(),
        output_spatial,
        ceil_mode: false,
    })
}

/// (input, kernel, strides, pads, dilations, ceil) covering 1-D to 3-D windows.
type Window = (
    &'static [usize],
    &'static [usize],
    &'static [usize],
    &'static [usize],
    &'static [usize],
    bool,
);

const WINDOWS: &[Window] = &[
    // 3×3 stride 1 "same": the vector path along the width, one-output borders.
    (
        &[2, 3, 9, 11],
        &[3, 3],
        &[1, 1],
        &[1, 1, 1, 1],
        &[1, 1],
        false,
    ),
    // ResNet stem-like 3×3 stride 2 with ceil_mode.
    (
        &[1, 4, 12, 13],
        &[3, 3],
        &[2, 2],
        &[1, 1, 1, 1],
        &[1, 1],
        true,
    ),
    (
        &[1, 2, 7, 8],
        &[2, 2],
        &[2, 2],
        &[0, 0, 0, 0],
        &[1, 1],
        true,
    ),
    // SqueezeNet-like 3×3 stride 2 without padding, ceil_mode, with odd widths (the
    // separable path's scalar column and lane tails), and a vertical stride of 3 with
    // horizontal stride 1 and asymmetric pads.
    (
        &[1, 3, 15, 23],
        &[3, 3],
        &[2, 2],
        &[0, 0, 0, 0],
        &[1, 1],
        true,
    ),
    (
        &[1, 2, 11, 19],
        &[2, 4],
        &[3, 1],
        &[1, 0, 0, 3],
        &[1, 1],
        false,
    ),
    // Rows of 35 and 50 outputs: the machine-code max pool's 16-lane vectors (full ones
    // and a tail) on AVX-512 hosts, with padding and both horizontal strides.
    (
        &[1, 3, 7, 70],
        &[3, 3],
        &[2, 2],
        &[1, 1, 1, 1],
        &[1, 1],
        false,
    ),
    (
        &[2, 2, 6, 50],
        &[2, 3],
        &[1, 1],
        &[0, 1, 1, 1],
        &[1, 1],
        true,
    ),
    // Dilations and asymmetric pads.
    (
        &[2, 2, 10, 12],
        &[3, 2],
        &[1, 2],
        &[2, 1, 0, 2],
        &[2, 3],
        false,
    ),
    (
        &[1, 3, 9, 14],
        &[2, 3],
        &[1, 1],
        &[1, 0, 1, 2],
        &[2, 2],
        true,
    ),
    // Windows larger than the input (only border windows), big pads.
    (
        &[1, 2, 3, 4],
        &[5, 5],
        &[1, 2],
        &[2, 3, 2, 3],
        &[1, 1],
        false,
    ),
    // 1-D and 3-D.
    (&[2, 3, 20], &[4], &[1], &[2, 1], &[1], false),
    (&[1, 2, 17], &[3], &[3], &[1, 1], &[2], true),
    (
        &[1, 2, 5, 6, 7],
        &[2, 3, 3],
        &[1, 2, 1],
        &[1, 1, 0, 0, 1, 1],
        &[1, 1, 2],
        false,
    ),
    // A long kernel (loops instead of unrolling).
    (
        &[1, 1, 3, 40],
        &[3, 30],
        &[1, 1],
        &[1, 2, 1, 2],
        &[1, 1],
        false,
    ),
];

fn pool_cases(kind: PoolKind, dtype: DType) -> Vec<Case> {
    WINDOWS
        .iter()
        .map(|&(input, k, s, p, d, ceil)| {
            let name = format!(
                "{kind:?} {dtype} in={input:?} k={k:?} s={s:?} p={p:?} d={d:?} ceil={ceil}"
            );
            (
                name,
                pool(kind, input, k, s, p, d, ceil),
                vec![rt(dtype, input)],
            )
        })
        .collect()
}

#[test]
fn max_pool_float32_windows() {
    check_all(pool_cases(PoolKind::Max, DType::F32));
}

#[test]
fn average_pool_both_pad_counts() {
    let mut cases = pool_cases(
        PoolKind::Average {
            count_include_pad: false,
        },
        DType::F32,
    );
    cases.extend(pool_cases(
        PoolKind::Average {
            count_include_pad: true,
        },
        DType::F32,
    ));
    check_all(cases);
}

#[test]
fn lp_pool_exponents() {
    let mut cases = vec![];
    for p in [1.0, 2.0, 3.0] {
        cases.extend(
            pool_cases(PoolKind::Lp { p }, DType::F32)
                .into_iter()
                .take(5),
        );
    }
    check_all(cases);
}

#[test]
fn pooling_other_dtypes() {
    let mut cases = vec![];
    for dtype in [DType::I8, DType::U8, DType::F64, DType::F16, DType::I32] {
        cases.extend(pool_cases(PoolKind::Max, dtype).into_iter().take(5));
    }
    for dtype in [DType::F64, DType::F16] {
        cases.extend(
            pool_cases(
                PoolKind::Average {
                    count_include_pad: true,
                },
                dtype,
            )
            .into_iter()
            .take(4),
        );
        cases.extend(
            pool_cases(PoolKind::Lp { p: 2.0 }, dtype)
                .into_iter()
                .take(2),
        );
    }
    check_all(cases);
}

#[test]
fn global_pooling() {
    let mut cases = vec![];
    let kinds = [
        PoolKind::Max,
        PoolKind::Average {
            count_include_pad: false,
        },
        PoolKind::Lp { p: 2.0 },
        PoolKind::Lp { p: 3.0 },
    ];
    for shape in [
        &[2usize, 5, 7, 7][..],
        &[1, 3, 2, 2],
        &[3, 2, 31],
        &[1, 2, 3, 4, 5],
    ] {
        for kind in kinds {
            for dtype in [DType::F32, DType::F64] {
                let k = &shape[2..];
                let ones = vec![1; k.len()];
                let zeros = vec![0; 2 * k.len()];
                let op = Op::Pool(PoolAttrs {
                    kind,
                    kernel: k.to_vec(),
                    strides: ones.clone(),
                    pads: zeros,
                    dilations: ones.clone(),
                    output_spatial: ones,
                    ceil_mode: false,
                });
                cases.push((
                    format!("global {kind:?} {dtype} {shape:?}"),
                    op,
                    vec![rt(dtype, shape)],
                ));
            }
        }
    }
    let k = [4usize, 4];
    let op = Op::Pool(PoolAttrs {
        kind: PoolKind::Max,
        kernel: k.to_vec(),
        strides: vec![1, 1],
        pads: vec![0; 4],
        dilations: vec![1, 1],
        output_spatial: vec![1, 1],
        ceil_mode: false,
    });
    cases.push((
        "global max uint8".into(),
        op,
        vec![rt(DType::U8, &[2, 3, 4, 4])],
    ));
    check_all(cases);
}

#[test]
fn max_pool_nan_never_wins() {
    let shape = [1, 2, 6, 9];
    let x = given(&shape, |i| {
        if i % 5 == 0 {
            f32::NAN
        } else {
            (i as f32 * 0.37).sin()
        }
    });
    let mut cases = vec![];
    for &(_, k, s, p, d, ceil) in &WINDOWS[..2] {
        cases.push((
            format!("max pool with NaN k={k:?} s={s:?}"),
            pool(PoolKind::Max, &shape, k, s, p, d, ceil),
            vec![x.clone()],
        ));
    }
    let global = Op::Pool(PoolAttrs {
        kind: PoolKind::Max,
        kernel: vec![6, 9],
        strides: vec![1, 1],
        pads: vec![0; 4],
        dilations: vec![1, 1],
        output_spatial: vec![1, 1],
        ceil_mode: false,
    });
    cases.push(("global max pool with NaN".into(), global, vec![x]));
    check_all(cases);
}

#[test]
fn average_pool_window_past_the_padded_end() {
    // ceil_mode creates windows that hang past the end padding: the divisor counts only
    // positions inside the padded input, and a window of padding only averages to NaN.
    let op = Op::Pool(PoolAttrs {
        kind: PoolKind::Average {
            count_include_pad: true,
        },
        kernel: vec![3],
        strides: vec![2],
        pads: vec![1, 1],
        dilations: vec![1],
        output_spatial: vec![4],
        ceil_mode: false,
    });
    let x = given(&[1, 1, 6], |i| i as f32 + 1.0);
    let (g, inputs) = try_one_node(op, vec![x], 0).unwrap();
    let y = Compiled::new(&g).unwrap().run(&g, &inputs).unwrap();
    // Windows over padded [0, 1..6, 0]: [0,1,2], [2,3,4], [4,5,6], [6,0] (2 positions).
    assert_eq!(y[0].to_f64_vec(), vec![1.0, 3.0, 5.0, 3.0]);
}

// ---------------------------------------------------------------------------------------
// Softmax and LayerNorm.

#[test]
fn softmax_every_axis() {
    let mut cases = vec![];
    for log in [false, true] {
        for shape in [&[3usize, 5, 7][..], &[2, 9, 16], &[4, 1, 3], &[1, 33]] {
            for axis in 0..shape.len() {
                for dtype in [DType::F32, DType::F64] {
                    cases.push((
                        format!("softmax log={log} {dtype} {shape:?} axis {axis}"),
                        Op::Softmax { axis, log },
                        vec![rt(dtype, shape)],
                    ));
                }
            }
        }
        // Large logits: only stable with the maximum subtracted.
        let big = In::Scaled(TensorType::new(DType::F32, vec![2, 6, 10]), 200.0);
        for axis in [1, 2] {
            cases.push((
                format!("softmax log={log} large logits axis {axis}"),
                Op::Softmax { axis, log },
                vec![big.clone()],
            ));
        }
        cases.push((
            format!("softmax log={log} f16"),
            Op::Softmax { axis: 1, log },
            vec![rt(DType::F16, &[3, 6, 2])],
        ));
        let nan_row = given(&[3, 5], |i| if i == 7 { f32::NAN } else { i as f32 * 0.1 });
        cases.push((
            format!("softmax log={log} NaN row"),
            Op::Softmax { axis: 1, log },
            vec![nan_row],
        ));
    }
    check_all(cases);
}

/// The machine-code softmax (x86-64-v3: AVX2, x86-64-v4: AVX-512) on rows that are
/// all tail, whole vectors, vectors plus a tail and long (attention's 197), with large
/// logits, -inf and NaN; each CPU the host runs (the host target itself goes through
/// `softmax_every_axis`).
#[test]
fn softmax_machine_code_rows() {
    if Arch::host() != Arch::X86_64 {
        eprintln!("skipped: the machine-code softmax is x86-64 only");
        return;
    }
    let mut cases: Vec<Case> = vec![];
    for n in [1usize, 3, 8, 16, 17, 31, 33, 64, 197] {
        for scale in [1.0, 60.0] {
            cases.push((
                format!("softmax rows of {n}, scale {scale}"),
                Op::Softmax {
                    axis: 1,
                    log: false,
                },
                vec![In::Scaled(TensorType::new(DType::F32, vec![5, n]), scale)],
            ));
        }
    }
    let special = given(&[4, 21], |i| match i {
        5 => f32::NAN,
        30 | 31 => f32::NEG_INFINITY,
        _ => (i as f32 * 0.7).sin() * 3.0,
    });
    cases.push((
        "softmax NaN and -inf rows".into(),
        Op::Softmax {
            axis: 1,
            log: false,
        },
        vec![special],
    ));
    let mut failures = vec![];
    for cpu in ["x86-64-v3", "x86-64-v4"] {
        // A CPU without the ISA still compiles every case, and only skips running it.
        let runs = tools::host_runs(cpu);
        if !runs {
            eprintln!("compiled only on {cpu}: this CPU cannot run it");
        }
        let target = Target::new(Arch::X86_64, Some(cpu)).expect("x86-64 target");
        for (i, (name, op, ins)) in cases.iter().enumerate() {
            let result = (|| {
                let (g, inputs) = try_one_node(op.clone(), ins.clone(), i as u64)?;
                if !runs {
                    let options = CompileOptions {
                        target: target.clone(),
                        prefix: String::new(),
                        weights: Default::default(),
                        kernels: Default::default(),
                        index_checks: Default::default(),
                    };
                    return compile_graph(&g, &options)
                        .map(|_| ())
                        .map_err(|e| e.to_string());
                }
                let expected = nnc::interp::run_graph(&g, &inputs)?;
                let lib = Compiled::for_target(&g, target.clone())?;
                compare(&lib.run(&g, &inputs)?[0], &expected[0])
            })();
            if let Err(e) = result {
                failures.push(format!("{name} ({cpu}): {e}"));
            }
        }
    }
    for f in &failures {
        eprintln!("FAIL {f}");
    }
    assert!(failures.is_empty(), "{} cases failed", failures.len());
}

#[test]
fn layer_norm_axes_and_broadcasts() {
    let x = [2usize, 3, 8];
    let mut cases = vec![];
    let ln = |axis| Op::LayerNorm {
        axis,
        epsilon: 1e-5,
    };
    cases.push((
        "layernorm axis -1".into(),
        ln(2),
        vec![f32s(&x), f32s(&[8]), f32s(&[8])],
    ));
    cases.push((
        "layernorm axis -1 no bias".into(),
        ln(2),
        vec![f32s(&x), f32s(&[8]), In::Omitted],
    ));
    cases.push((
        "layernorm axis -2".into(),
        ln(1),
        vec![f32s(&x), f32s(&[3, 8]), f32s(&[3, 8])],
    ));
    cases.push((
        "layernorm axis -2 scale [8]".into(),
        ln(1),
        vec![f32s(&x), f32s(&[8]), f32s(&[1, 8])],
    ));
    cases.push((
        "layernorm axis -2 scale [3,1]".into(),
        ln(1),
        vec![f32s(&x), f32s(&[3, 1]), f32s(&[1])],
    ));
    cases.push((
        "layernorm scalar scale".into(),
        ln(2),
        vec![f32s(&x), f32s(&[1]), f32s(&[1])],
    ));
    cases.push((
        "layernorm per-row scale".into(),
        ln(2),
        vec![f32s(&x), f32s(&[2, 3, 8]), In::Omitted],
    ));
    cases.push((
        "layernorm axis 0".into(),
        ln(0),
        vec![f32s(&x), f32s(&x), f32s(&x)],
    ));
    cases.push((
        "layernorm const params".into(),
        ln(1),
        vec![
            f32s(&[4, 37]),
            In::Const(TensorType::new(DType::F32, vec![37])),
            In::Const(TensorType::new(DType::F32, vec![37])),
        ],
    ));
    cases.push((
        "layernorm row of 3".into(),
        ln(1),
        vec![f32s(&[5, 3]), f32s(&[3]), f32s(&[3])],
    ));
    cases.push((
        "layernorm f64".into(),
        ln(1),
        vec![
            rt(DType::F64, &x),
            rt(DType::F64, &[3, 8]),
            rt(DType::F64, &[8]),
        ],
    ));
    cases.push((
        "layernorm f16".into(),
        ln(2),
        vec![
            rt(DType::F16, &x),
            rt(DType::F16, &[8]),
            rt(DType::F16, &[8]),
        ],
    ));
    let offset = In::Scaled(TensorType::new(DType::F32, vec![4, 64]), 1.0);
    cases.push((
        "layernorm epsilon 0.1".into(),
        Op::LayerNorm {
            axis: 1,
            epsilon: 0.1,
        },
        vec![offset, f32s(&[64]), f32s(&[64])],
    ));
    check_all(cases);
}

// ---------------------------------------------------------------------------------------
// Reductions.

const KINDS: [ReduceKind; 10] = [
    ReduceKind::Sum,
    ReduceKind::Mean,
    ReduceKind::Max,
    ReduceKind::Min,
    ReduceKind::Prod,
    ReduceKind::L1,
    ReduceKind::L2,
    ReduceKind::LogSum,
    ReduceKind::LogSumExp,
    ReduceKind::SumSquare,
];

fn reduce_op(kind: ReduceKind, axes: &[usize], keepdims: bool) -> Op {
    Op::Reduce(ReduceAttrs {
        kind,
        axes: axes.to_vec(),
        keepdims,
    })
}

/// Positive data for LogSum (the log of a negative sum is NaN on both sides anyway,
/// but that would test little).
fn reduce_input(kind: ReduceKind, dtype: DType, shape: &[usize]) -> In {
    if kind == ReduceKind::LogSum && dtype.is_float() {
        let n: usize = shape.iter().product();
        let t = Tensor::from_vec(
            shape,
            (0..n)
                .map(|i| 0.5 + ((i * 7919) % 101) as f64 / 100.0)
                .collect::<Vec<f64>>(),
        )
        .cast(dtype);
        return In::Given(t);
    }
    rt(dtype, shape)
}

#[test]
fn reduce_float32_every_kind_and_axes() {
    let mut cases = vec![];
    let shapes: &[(&[usize], &[&[usize]])] = &[
        (
            &[3, 4, 5],
            &[&[0], &[1], &[2], &[0, 2], &[1, 2], &[0, 1], &[0, 1, 2]],
        ),
        // Long contiguous runs (vector accumulators) and wide column blocks.
        (&[2, 3, 37, 19], &[&[3], &[2], &[2, 3], &[0, 2], &[1, 3]]),
        (&[1, 1, 5, 1], &[&[1], &[2], &[0, 3]]),
    ];
    for &(shape, axes_sets) in shapes {
        for kind in KINDS {
            for axes in axes_sets {
                for keepdims in [true, false] {
                    let name =
                        format!("Reduce{kind:?} {shape:?} axes {axes:?} keepdims={keepdims}");
                    cases.push((
                        name,
                        reduce_op(kind, axes, keepdims),
                        vec![reduce_input(kind, DType::F32, shape)],
                    ));
                }
            }
        }
    }
    check_all(cases);
}

#[test]
fn reduce_other_dtypes() {
    let mut cases = vec![];
    let shape = [3usize, 4, 6];
    for dtype in [
        DType::F64,
        DType::F16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::I8,
        DType::U32,
        DType::U64,
    ] {
        for kind in KINDS {
            if !dtype.is_float() && matches!(kind, ReduceKind::LogSum | ReduceKind::LogSumExp) {
                continue;
            }
            for axes in [&[0usize][..], &[2], &[0, 2]] {
                let name = format!("Reduce{kind:?} {dtype} axes {axes:?}");
                cases.push((
                    name,
                    reduce_op(kind, axes, true),
                    vec![reduce_input(kind, dtype, &shape)],
                ));
            }
        }
    }
    for kind in [ReduceKind::Max, ReduceKind::Min] {
        for axes in [&[1usize][..], &[0, 2]] {
            cases.push((
                format!("Reduce{kind:?} bool axes {axes:?}"),
                reduce_op(kind, axes, false),
                vec![rt(DType::Bool, &shape)],
            ));
        }
    }
    check_all(cases);
}

#[test]
fn reduce_over_an_empty_axis() {
    let mut cases = vec![];
    for kind in KINDS {
        for dtype in [DType::F32, DType::I32, DType::U8] {
            if !dtype.is_float()
                && matches!(
                    kind,
                    ReduceKind::LogSum | ReduceKind::LogSumExp | ReduceKind::Mean
                )
            {
                continue;
            }
            cases.push((
                format!("Reduce{kind:?} {dtype} empty axis"),
                reduce_op(kind, &[1], true),
                vec![rt(dtype, &[3, 0, 4])],
            ));
        }
    }
    check_all(cases);
}

#[test]
fn reduce_special_values() {
    let mut cases = vec![];
    let shape = [3usize, 8];
    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY];
    for (s, &special) in specials.iter().enumerate() {
        let x = given(&shape, move |i| {
            if i % 8 == 3 + s {
                special
            } else {
                (i as f32 * 0.7).cos()
            }
        });
        for kind in KINDS {
            for axes in [&[0usize][..], &[1]] {
                cases.push((
                    format!("Reduce{kind:?} with {special} axes {axes:?}"),
                    reduce_op(kind, axes, false),
                    vec![x.clone()],
                ));
            }
        }
    }
    let all_inf = given(&[2, 5], |i| {
        if i < 5 {
            f32::NEG_INFINITY
        } else {
            f32::INFINITY
        }
    });
    cases.push((
        "ReduceLogSumExp all infinite".into(),
        reduce_op(ReduceKind::LogSumExp, &[1], false),
        vec![all_inf],
    ));
    let large = In::Scaled(TensorType::new(DType::F32, vec![4, 9]), 500.0);
    cases.push((
        "ReduceLogSumExp large".into(),
        reduce_op(ReduceKind::LogSumExp, &[1], false),
        vec![large],
    ));
    check_all(cases);
}

#[test]
fn reduce_errors_instead_of_panics() {
    expect_lowering_error(
        reduce_op(ReduceKind::LogSum, &[0], true),
        vec![rt(DType::I32, &[3, 2])],
    );
    expect_lowering_error(
        reduce_op(ReduceKind::Sum, &[0], true),
        vec![rt(DType::Bool, &[3, 2])],
    );
    expect_lowering_error(
        reduce_op(ReduceKind::Mean, &[0], true),
        vec![rt(DType::I32, &[0, 2])],
    );
    expect_lowering_error(
        Op::Softmax {
            axis: 0,
            log: false,
        },
        vec![rt(DType::I32, &[3, 2])],
    );
}

// ---------------------------------------------------------------------------------------
// ArgMax / ArgMin.

#[test]
fn arg_reduce_ties_nan_and_dtypes() {
    let mut cases = vec![];
    // Few distinct values: many ties.
    let ties = given(&[3, 4, 5], |i| ((i * 7) % 3) as f32);
    let with_nan = given(&[3, 4, 5], |i| {
        if i % 11 == 4 || i % 13 == 0 {
            f32::NAN
        } else {
            ((i * 7) % 3) as f32
        }
    });
    for max in [true, false] {
        for select_last_index in [false, true] {
            for axis in 0..3 {
                for keepdims in [true, false] {
                    let op = Op::ArgReduce(ArgReduceAttrs {
                        max,
                        axis,
                        keepdims,
                        select_last_index,
                    });
                    let tag = format!(
                        "Arg{} last={select_last_index} axis {axis} keepdims={keepdims}",
                        if max { "Max" } else { "Min" }
                    );
                    cases.push((format!("{tag} ties"), op.clone(), vec![ties.clone()]));
                    cases.push((format!("{tag} NaN"), op.clone(), vec![with_nan.clone()]));
                    cases.push((format!("{tag} random"), op.clone(), vec![f32s(&[3, 4, 5])]));
                }
            }
            let op = Op::ArgReduce(ArgReduceAttrs {
                max,
                axis: 1,
                keepdims: true,
                select_last_index,
            });
            for dtype in [DType::I32, DType::U8, DType::I64, DType::F64, DType::F16] {
                cases.push((
                    format!("Arg max={max} last={select_last_index} {dtype}"),
                    op.clone(),
                    vec![rt(dtype, &[2, 9, 3])],
                ));
            }
        }
    }
    check_all(cases);
}

// ---------------------------------------------------------------------------------------
// Resize.

const TRANSFORMS: [CoordinateTransform; 6] = [
    CoordinateTransform::HalfPixel,
    CoordinateTransform::HalfPixelSymmetric,
    CoordinateTransform::PytorchHalfPixel,
    CoordinateTransform::AlignCorners,
    CoordinateTransform::Asymmetric,
    CoordinateTransform::TfCropAndResize,
];

fn resize_op(
    mode: ResizeMode,
    transform: CoordinateTransform,
    input: &[usize],
    output: &[usize],
) -> Op {
    let rank = input.len();
    // A roi that crops some axes and reaches outside the input on others (extrapolation).
    let roi = if transform == CoordinateTransform::TfCropAndResize {
        let mut r = vec![0.0; rank];
        r.extend(vec![1.0; rank]);
        r[rank - 1] = 0.2;
        r[2 * rank - 1] = 0.9;
        if rank >= 2 {
            r[rank - 2] = -0.3;
            r[2 * rank - 2] = 1.2;
        }
        r
    } else {
        vec![]
    };
    Op::Resize(ResizeAttrs {
        mode,
        coordinate_transform: transform,
        nearest_mode: NearestMode::RoundPreferFloor,
        cubic_coeff_a: -0.75,
        exclude_outside: false,
        extrapolation_value: 7.5,
        scales: input
            .iter()
            .zip(output)
            .map(|(&i, &o)| o as f32 / i as f32)
            .collect(),
        roi,
        output_shape: output.to_vec(),
        scales_from_extents: false,
    })
}

fn with(op: Op, f: impl FnOnce(&mut ResizeAttrs)) -> Op {
    match op {
        Op::Resize(mut r) => {
            f(&mut r);
            Op::Resize(r)
        }
        other => other,
    }
}

const RESIZES: [(&[usize], &[usize]); 4] = [
    (&[1, 2, 4, 5], &[1, 2, 7, 9]),  // upsample
    (&[1, 2, 8, 9], &[1, 2, 3, 4]),  // downsample
    (&[2, 3, 5, 6], &[2, 3, 10, 3]), // mixed
    (&[1, 1, 3, 1], &[1, 1, 1, 1]),  // to a single pixel
];

#[test]
fn resize_every_mode_and_transform() {
    let mut cases = vec![];
    for mode in [ResizeMode::Nearest, ResizeMode::Linear, ResizeMode::Cubic] {
        for transform in TRANSFORMS {
            for (input, output) in RESIZES {
                let name = format!("resize {mode:?} {transform:?} {input:?}->{output:?}");
                cases.push((
                    name,
                    resize_op(mode, transform, input, output),
                    vec![f32s(input)],
                ));
            }
        }
    }
    check_all(cases);
}

#[test]
fn resize_nearest_modes_and_cubic_options() {
    let mut cases = vec![];
    for nearest_mode in [
        NearestMode::RoundPreferFloor,
        NearestMode::RoundPreferCeil,
        NearestMode::Floor,
        NearestMode::Ceil,
    ] {
        for transform in [
            CoordinateTransform::HalfPixel,
            CoordinateTransform::Asymmetric,
            CoordinateTransform::AlignCorners,
        ] {
            for (input, output) in [
                (&[1usize, 2, 4, 6][..], &[1usize, 2, 8, 9][..]),
                (&[1, 1, 9, 10], &[1, 1, 6, 4]),
            ] {
                let op = with(
                    resize_op(ResizeMode::Nearest, transform, input, output),
                    |r| r.nearest_mode = nearest_mode,
                );
                cases.push((
                    format!("resize nearest {nearest_mode:?} {transform:?} {input:?}->{output:?}"),
                    op,
                    vec![f32s(input)],
                ));
            }
        }
    }
    for exclude_outside in [false, true] {
        for a in [-0.5, -0.75] {
            for transform in [
                CoordinateTransform::HalfPixel,
                CoordinateTransform::AlignCorners,
                CoordinateTransform::TfCropAndResize,
            ] {
                for (input, output) in [
                    (&[1usize, 1, 4, 4][..], &[1usize, 1, 9, 7][..]),
                    (&[1, 2, 9, 8], &[1, 2, 4, 3]),
                ] {
                    let op = with(
                        resize_op(ResizeMode::Cubic, transform, input, output),
                        |r| {
                            r.exclude_outside = exclude_outside;
                            r.cubic_coeff_a = a;
                        },
                    );
                    cases.push((format!("resize cubic a={a} exclude={exclude_outside} {transform:?} {input:?}->{output:?}"), op, vec![f32s(input)]));
                }
            }
        }
    }
    check_all(cases);
}

#[test]
fn resize_shapes_scales_and_dtypes() {
    let mut cases = vec![];
    // Every axis resized (3-D linear and cubic over the trailing three axes).
    for mode in [ResizeMode::Linear, ResizeMode::Cubic, ResizeMode::Nearest] {
        let (input, output) = (&[1usize, 3, 4, 5][..], &[1usize, 5, 7, 3][..]);
        cases.push((
            format!("resize {mode:?} three axes"),
            resize_op(mode, CoordinateTransform::HalfPixel, input, output),
            vec![f32s(input)],
        ));
    }
    // Only a leading axis resized: nearest copies whole trailing blocks.
    let (input, output) = (&[2usize, 3, 4, 5][..], &[2usize, 7, 4, 5][..]);
    for mode in [ResizeMode::Nearest, ResizeMode::Linear] {
        cases.push((
            format!("resize {mode:?} channels only"),
            resize_op(mode, CoordinateTransform::Asymmetric, input, output),
            vec![f32s(input)],
        ));
    }
    // Explicit scales whose product is not the output size (floor), 1-D input.
    let op = with(
        resize_op(
            ResizeMode::Linear,
            CoordinateTransform::AlignCorners,
            &[7],
            &[4],
        ),
        |r| r.scales = vec![0.6],
    );
    cases.push(("resize explicit scale 0.6".into(), op, vec![f32s(&[7])]));
    let op = with(
        resize_op(
            ResizeMode::Nearest,
            CoordinateTransform::HalfPixelSymmetric,
            &[1, 1, 5, 5],
            &[1, 1, 12, 12],
        ),
        |r| r.scales = vec![1.0, 1.0, 2.5, 2.5],
    );
    cases.push((
        "resize explicit scale 2.5 symmetric".into(),
        op,
        vec![f32s(&[1, 1, 5, 5])],
    ));
    // Other dtypes: integers round half to even and saturate.
    for dtype in [
        DType::U8,
        DType::I8,
        DType::I32,
        DType::F64,
        DType::F16,
        DType::I64,
    ] {
        for mode in [ResizeMode::Nearest, ResizeMode::Linear, ResizeMode::Cubic] {
            for transform in [
                CoordinateTransform::HalfPixel,
                CoordinateTransform::TfCropAndResize,
            ] {
                let (input, output) = (&[1usize, 2, 5, 4][..], &[1usize, 2, 8, 7][..]);
                cases.push((
                    format!("resize {mode:?} {transform:?} {dtype}"),
                    resize_op(mode, transform, input, output),
                    vec![rt(dtype, input)],
                ));
            }
        }
    }
    check_all(cases);
}

// ---------------------------------------------------------------------------------------
// Throughput (informational: `-- --nocapture` prints it).

#[test]
fn throughput_report() {
    let cases: Vec<Case> = vec![
        (
            "softmax [256, 1000] axis 1".into(),
            Op::Softmax {
                axis: 1,
                log: false,
            },
            vec![f32s(&[256, 1000])],
        ),
        (
            "softmax [64, 128, 32] axis 1".into(),
            Op::Softmax {
                axis: 1,
                log: false,
            },
            vec![f32s(&[64, 128, 32])],
        ),
        (
            "layernorm [512, 768]".into(),
            Op::LayerNorm {
                axis: 1,
                epsilon: 1e-5,
            },
            vec![f32s(&[512, 768]), f32s(&[768]), f32s(&[768])],
        ),
        (
            "reduce mean [512, 1024] axis 1".into(),
            reduce_op(ReduceKind::Mean, &[1], false),
            vec![f32s(&[512, 1024])],
        ),
        (
            "reduce sum [1024, 512] axis 0".into(),
            reduce_op(ReduceKind::Sum, &[0], false),
            vec![f32s(&[1024, 512])],
        ),
        (
            "global avg pool [1, 512, 14, 14]".into(),
            pool(
                PoolKind::Average {
                    count_include_pad: false,
                },
                &[1, 512, 14, 14],
                &[14, 14],
                &[1, 1],
                &[0; 4],
                &[1, 1],
                false,
            ),
            vec![f32s(&[1, 512, 14, 14])],
        ),
        (
            "max pool 3x3 s1 [1, 64, 56, 56]".into(),
            pool(
                PoolKind::Max,
                &[1, 64, 56, 56],
                &[3, 3],
                &[1, 1],
                &[1; 4],
                &[1, 1],
                false,
            ),
            vec![f32s(&[1, 64, 56, 56])],
        ),
        (
            "max pool 3x3 s2 [1, 64, 112, 112]".into(),
            pool(
                PoolKind::Max,
                &[1, 64, 112, 112],
                &[3, 3],
                &[2, 2],
                &[1; 4],
                &[1, 1],
                false,
            ),
            vec![f32s(&[1, 64, 112, 112])],
        ),
        (
            "resize linear [1, 3, 224, 224] x2".into(),
            resize_op(
                ResizeMode::Linear,
                CoordinateTransform::HalfPixel,
                &[1, 3, 224, 224],
                &[1, 3, 448, 448],
            ),
            vec![f32s(&[1, 3, 224, 224])],
        ),
        (
            "resize nearest [1, 64, 56, 56] x2".into(),
            resize_op(
                ResizeMode::Nearest,
                CoordinateTransform::Asymmetric,
                &[1, 64, 56, 56],
                &[1, 64, 112, 112],
            ),
            vec![f32s(&[1, 64, 56, 56])],
        ),
    ];
    for (name, op, ins) in cases {
        let (g, inputs) = try_one_node(op, ins, 1).expect("graph");
        let lib = Compiled::new(&g).expect("compiles");
        let t = lib.best_time(&g, &inputs, 20);
        let bytes: usize = inputs.iter().map(|t| t.to_le_bytes().len()).sum::<usize>()
            + g.ty(g.outputs[0]).byte_size();
        let start = Instant::now();
        nnc::interp::run_graph(&g, &inputs).expect("interpreter");
        let interp = start.elapsed().as_secs_f64();
        println!(
            "{name:40} {:8.1} us  {:6.2} GB/s  ({:.0}x the interpreter)",
            t * 1e6,
            bytes as f64 / t / 1e9,
            interp / t
        );
    }
}

// ---------------------------------------------------------------------------------------
// Random sweeps: shapes and attributes nobody would pick by hand.

/// Uniform integer in `lo..=hi`.
fn pick(rng: &mut Rng, lo: usize, hi: usize) -> usize {
    lo + (((rng.uniform() + 1.0) / 2.0) * (hi - lo + 1) as f64) as usize % (hi - lo + 1)
}

fn random_shape(rng: &mut Rng, rank: usize, max: usize) -> Vec<usize> {
    (0..rank).map(|_| pick(rng, 1, max)).collect()
}

#[test]
fn random_reductions_and_softmax() {
    let mut rng = Rng::new(42);
    let dtypes = [
        DType::F32,
        DType::F32,
        DType::F64,
        DType::I32,
        DType::U8,
        DType::F16,
    ];
    let mut cases = vec![];
    for i in 0..300 {
        let rank = pick(&mut rng, 1, 5);
        let shape = random_shape(&mut rng, rank, 9);
        let mut axes: Vec<usize> = (0..rank).filter(|_| rng.uniform() > 0.0).collect();
        if axes.is_empty() {
            axes.push(pick(&mut rng, 0, rank - 1));
        }
        let dtype = dtypes[i % dtypes.len()];
        let kind = KINDS[pick(&mut rng, 0, KINDS.len() - 1)];
        let kind =
            if dtype.is_float() || !matches!(kind, ReduceKind::LogSum | ReduceKind::LogSumExp) {
                kind
            } else {
                ReduceKind::Sum
            };
        let keepdims = rng.uniform() > 0.0;
        let name =
            format!("random Reduce{kind:?} {dtype} {shape:?} axes {axes:?} keepdims={keepdims}");
        cases.push((
            name,
            reduce_op(kind, &axes, keepdims),
            vec![reduce_input(kind, dtype, &shape)],
        ));
        let axis = pick(&mut rng, 0, rank - 1);
        let max = rng.uniform() > 0.0;
        let op = Op::ArgReduce(ArgReduceAttrs {
            max,
            axis,
            keepdims,
            select_last_index: rng.uniform() > 0.0,
        });
        cases.push((
            format!("random {op:?} {shape:?}"),
            op,
            vec![rt(DType::F32, &shape)],
        ));
        if dtype.is_float() {
            let op = Op::Softmax {
                axis,
                log: rng.uniform() > 0.0,
            };
            cases.push((
                format!("random {op:?} {dtype} {shape:?}"),
                op,
                vec![rt(dtype, &shape)],
            ));
            let op = Op::LayerNorm {
                axis,
                epsilon: 1e-5,
            };
            let scale = shape[axis..].to_vec();
            cases.push((
                format!("random {op:?} {dtype} {shape:?}"),
                op,
                vec![rt(dtype, &shape), rt(dtype, &scale), rt(dtype, &scale)],
            ));
        }
    }
    check_all(cases);
}

#[test]
fn random_pools() {
    let mut rng = Rng::new(7);
    let kinds = [
        PoolKind::Max,
        PoolKind::Average {
            count_include_pad: false,
        },
        PoolKind::Average {
            count_include_pad: true,
        },
        PoolKind::Lp { p: 2.0 },
    ];
    let mut cases = vec![];
    for i in 0..250 {
        let spatial = pick(&mut rng, 1, 3);
        let mut input = vec![pick(&mut rng, 1, 2), pick(&mut rng, 1, 3)];
        input.extend(random_shape(
            &mut rng,
            spatial,
            if spatial == 3 { 6 } else { 13 },
        ));
        let kernel: Vec<usize> = input[2..]
            .iter()
            .map(|&n| pick(&mut rng, 1, n.min(4)))
            .collect();
        let strides: Vec<usize> = (0..spatial).map(|_| pick(&mut rng, 1, 3)).collect();
        let dilations: Vec<usize> = (0..spatial)
            .map(|a| {
                if kernel[a] > 1 && input[2 + a] > 2 * kernel[a] {
                    pick(&mut rng, 1, 2)
                } else {
                    1
                }
            })
            .collect();
        // Pads stay below the kernel extent, as ONNX requires.
        let pads: Vec<usize> = (0..2 * spatial)
            .map(|j| pick(&mut rng, 0, kernel[j % spatial] - 1))
            .collect();
        let ceil = rng.uniform() > 0.0;
        let kind = kinds[i % kinds.len()];
        let dtype = if i % 5 == 0 && kind == PoolKind::Max {
            DType::I8
        } else {
            DType::F32
        };
        let name = format!("random {kind:?} {dtype} in={input:?} k={kernel:?} s={strides:?} p={pads:?} d={dilations:?} ceil={ceil}");
        cases.push((
            name,
            pool(kind, &input, &kernel, &strides, &pads, &dilations, ceil),
            vec![rt(dtype, &input)],
        ));
    }
    check_all(cases);
}

#[test]
fn random_resizes() {
    let mut rng = Rng::new(99);
    let modes = [ResizeMode::Nearest, ResizeMode::Linear, ResizeMode::Cubic];
    let mut cases = vec![];
    for i in 0..250 {
        let rank = pick(&mut rng, 1, 4);
        let input = random_shape(&mut rng, rank, 7);
        let output: Vec<usize> = input
            .iter()
            .map(|&n| {
                if rng.uniform() > 0.0 {
                    n
                } else {
                    pick(&mut rng, 1, 12)
                }
            })
            .collect();
        let mode = modes[i % modes.len()];
        let transform = TRANSFORMS[pick(&mut rng, 0, TRANSFORMS.len() - 1)];
        let nearest_mode = [
            NearestMode::RoundPreferFloor,
            NearestMode::RoundPreferCeil,
            NearestMode::Floor,
            NearestMode::Ceil,
        ][pick(&mut rng, 0, 3)];
        let exclude_outside = rng.uniform() > 0.5;
        let op = with(resize_op(mode, transform, &input, &output), |r| {
            r.nearest_mode = nearest_mode;
            r.exclude_outside = exclude_outside;
        });
        let dtype = if i % 4 == 0 { DType::U8 } else { DType::F32 };
        cases.push((
            format!("random resize {op:?} {input:?}"),
            op,
            vec![rt(dtype, &input)],
        ));
    }
    check_all(cases);
}

// ---------------------------------------------------------------------------------------
// Execution on aarch64 (qemu user mode with the C harness tests/harness/nnc_run.c).

#[test]
fn runs_on_aarch64_under_qemu() {
    let Some(harness) = aarch64_harness() else {
        return;
    };
    // One case per code path: vector and scalar windows, borders, global pools, row and
    // column softmax, every layer-norm parameter layout, Run and Columns reductions,
    // ArgMax with NaN, every Resize mode.
    let mut cases: Vec<Case> = vec![];
    cases.extend(pool_cases(PoolKind::Max, DType::F32).into_iter().take(4));
    cases.extend(
        pool_cases(
            PoolKind::Average {
                count_include_pad: true,
            },
            DType::F32,
        )
        .into_iter()
        .skip(3)
        .take(3),
    );
    cases.extend(
        pool_cases(PoolKind::Lp { p: 3.0 }, DType::F32)
            .into_iter()
            .take(1),
    );
    cases.extend(pool_cases(PoolKind::Max, DType::I8).into_iter().take(2));
    let global = Op::Pool(PoolAttrs {
        kind: PoolKind::Average {
            count_include_pad: false,
        },
        kernel: vec![7, 7],
        strides: vec![1, 1],
        pads: vec![0; 4],
        dilations: vec![1, 1],
        output_spatial: vec![1, 1],
        ceil_mode: false,
    });
    cases.push(("global average".into(), global, vec![f32s(&[2, 5, 7, 7])]));
    for (axis, log) in [(0, false), (1, true), (2, false), (2, true)] {
        cases.push((
            format!("softmax axis {axis} log={log}"),
            Op::Softmax { axis, log },
            vec![f32s(&[3, 9, 17])],
        ));
    }
    cases.push((
        "softmax f64".into(),
        Op::Softmax {
            axis: 1,
            log: false,
        },
        vec![rt(DType::F64, &[3, 6])],
    ));
    let ln = |axis| Op::LayerNorm {
        axis,
        epsilon: 1e-5,
    };
    cases.push((
        "layernorm row".into(),
        ln(1),
        vec![f32s(&[4, 37]), f32s(&[37]), f32s(&[37])],
    ));
    cases.push((
        "layernorm general".into(),
        ln(1),
        vec![f32s(&[2, 3, 8]), f32s(&[8]), In::Omitted],
    ));
    cases.push((
        "layernorm f16".into(),
        ln(1),
        vec![
            rt(DType::F16, &[3, 8]),
            rt(DType::F16, &[8]),
            rt(DType::F16, &[8]),
        ],
    ));
    for kind in KINDS {
        for axes in [&[1usize][..], &[0, 2], &[2]] {
            cases.push((
                format!("Reduce{kind:?} axes {axes:?}"),
                reduce_op(kind, axes, false),
                vec![reduce_input(kind, DType::F32, &[5, 19, 6])],
            ));
        }
    }
    for dtype in [DType::I32, DType::U8, DType::F64] {
        cases.push((
            format!("ReduceMean {dtype}"),
            reduce_op(ReduceKind::Mean, &[1], true),
            vec![rt(dtype, &[3, 7, 2])],
        ));
    }
    let with_nan = given(&[3, 4, 5], |i| {
        if i % 11 == 4 {
            f32::NAN
        } else {
            ((i * 7) % 3) as f32
        }
    });
    for select_last_index in [false, true] {
        let op = Op::ArgReduce(ArgReduceAttrs {
            max: true,
            axis: 1,
            keepdims: false,
            select_last_index,
        });
        cases.push((
            format!("ArgMax NaN last={select_last_index}"),
            op,
            vec![with_nan.clone()],
        ));
    }
    for mode in [ResizeMode::Nearest, ResizeMode::Linear, ResizeMode::Cubic] {
        for transform in [
            CoordinateTransform::HalfPixel,
            CoordinateTransform::TfCropAndResize,
        ] {
            let (input, output) = RESIZES[0];
            cases.push((
                format!("resize {mode:?} {transform:?}"),
                resize_op(mode, transform, input, output),
                vec![f32s(input)],
            ));
        }
        cases.push((
            format!("resize {mode:?} uint8"),
            resize_op(
                mode,
                CoordinateTransform::AlignCorners,
                &[1, 1, 5, 4],
                &[1, 1, 3, 9],
            ),
            vec![rt(DType::U8, &[1, 1, 5, 4])],
        ));
    }
    let total = cases.len();
    let failures: Vec<String> = cases
        .into_iter()
        .enumerate()
        .filter_map(|(i, (name, op, ins))| {
            let check = || -> Result<(), String> {
                let (g, inputs) = try_one_node(op, ins, i as u64)?;
                let expected = nnc::interp::run_graph(&g, &inputs)?;
                let actual = run_on_aarch64(harness, &g, &inputs, None)?;
                compare(&actual[0], &expected[0])
            };
            check().err().map(|e| format!("{name}: {e}"))
        })
        .collect();
    for f in &failures {
        eprintln!("FAIL (aarch64) {f}");
    }
    println!(
        "{} of {total} cases match on aarch64",
        total - failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {total} cases failed on aarch64",
        failures.len()
    );
}
