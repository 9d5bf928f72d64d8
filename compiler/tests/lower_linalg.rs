//! MatMul, Gemm, Conv and ConvTranspose code generation: one-node graphs compiled for the
//! host, linked into a shared object, run, and compared with the reference interpreter;
//! the same graphs compiled for aarch64 to prove they lower there. Also prints GFLOP/s
//! of a 256³ GEMM and a ResNet-like 3×3 conv (informational).
//!
//! Run with `cargo test -p nnc --test lower_linalg --release -- --nocapture` to see the
//! measurements.

#[path = "common/graphs.rs"]
mod graphs;
#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use graphs::{cst, f32s, one_node, rel_err, rt, tolerance, In};
use nnc::codegen::{compile_graph, Arch, CompileOptions, Target};
use nnc::ir::{DType, Tensor, TensorType};
use nnc::ops::{infer_types, ConvAttrs, ConvTransposeAttrs, GemmAttrs, Op};
use runner::{aarch64_harness, run_compiled, run_on_aarch64, Compiled};

/// Tests take turns (the harness runs them on parallel threads), so the timings of
/// `performance_report` are not shared with other tests' compilations.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Compiles and runs one node and compares with the interpreter; returns a failure
/// description instead of panicking so a test can report every failing case at once.
fn check(name: &str, op: Op, ins: Vec<In>, seed: u64) -> Result<(), String> {
    let (g, inputs) = one_node(op, ins, seed);
    let expected =
        nnc::interp::run_graph(&g, &inputs).map_err(|e| format!("{name}: interpreter: {e}"))?;
    // The host's own features, and on x86-64 every kernel family: the baseline CPU
    // (Cranelift's 128-bit kernels without FMA), x86-64-v3 (AVX2 machine-code kernels)
    // and x86-64-v4 (AVX-512). A family the host cannot run is still compiled.
    let mut targets = vec![("host", Target::host())];
    if Arch::host() == Arch::X86_64 {
        for cpu in ["baseline", "x86-64-v3", "x86-64-v4"] {
            let target = Target::new(Arch::X86_64, Some(cpu)).expect("x86-64 target");
            if tools::host_runs(cpu) {
                targets.push((cpu, target));
            } else {
                let options = CompileOptions {
                    target,
                    prefix: String::new(),
                    weights: Default::default(),
                    kernels: Default::default(),
                    index_checks: Default::default(),
                };
                compile_graph(&g, &options).map_err(|e| format!("{name} ({cpu}): compile: {e}"))?;
            }
        }
    }
    for (target_name, target) in targets {
        let actual = run_compiled(&g, &inputs, target)
            .map_err(|e| format!("{name} ({target_name}): compile: {e}"))?;
        let err = rel_err(&actual[0], &expected[0]);
        let tol = tolerance(expected[0].dtype());
        if actual[0].shape() != expected[0].shape() || err > tol {
            return Err(format!(
                "{name} ({target_name}): shape {:?} vs {:?}, rel err {err:.3e} > {tol:e}",
                actual[0].shape(),
                expected[0].shape()
            ));
        }
    }
    // Every case must lower for aarch64 too, and runs there under qemu when the cross
    // toolchain is installed.
    match aarch64_harness() {
        Some(harness) => {
            let actual = run_on_aarch64(harness, &g, &inputs, None)
                .map_err(|e| format!("{name} (aarch64): {e}"))?;
            let err = rel_err(&actual[0], &expected[0]);
            let tol = tolerance(expected[0].dtype());
            if err > tol {
                return Err(format!("{name} (aarch64): rel err {err:.3e} > {tol:e}"));
            }
        }
        None => {
            compile_graph(&g, &aarch64_options()).map_err(|e| format!("{name}: aarch64: {e}"))?;
        }
    }
    Ok(())
}

fn aarch64_options() -> CompileOptions {
    CompileOptions {
        target: Target::new(Arch::Aarch64, None).expect("aarch64 target"),
        prefix: String::new(),
        weights: Default::default(),
        kernels: Default::default(),
        index_checks: Default::default(),
    }
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

/// Runs every case, then reports all failures together.
/// A named op with its inputs.
type Case = (String, Op, Vec<In>);

fn check_all(cases: Vec<Case>) {
    let _turn = one_at_a_time();
    let total = cases.len();
    let failures = cases
        .into_iter()
        .enumerate()
        .filter_map(|(i, (name, op, ins))| check(&name, op, ins, i as u64).err())
        .collect();
    report(failures, total);
}

// ---- Attention ----

#[test]
fn attention_blocks_masks_and_batches() {
    // (Q, Kᵀ, V, mask): one query row (a decoder step); fewer rows than a register
    // tile; rows in several blocks of the scores plus a tail (1100 keys); enough rows
    // that Kᵀ and V are packed; masks broadcast along every axis; batch axes
    // broadcast (keys shared by a batch, V of lower rank).
    type Shapes<'a> = (&'a [usize], &'a [usize], &'a [usize], Option<&'a [usize]>);
    let cases: &[Shapes] = &[
        (&[1, 4], &[4, 7], &[7, 3], None),
        (&[2, 5, 6], &[2, 6, 9], &[2, 9, 4], None),
        (&[1, 2, 70, 16], &[1, 2, 16, 1100], &[1, 2, 1100, 12], None),
        (&[2, 100, 32], &[2, 32, 50], &[2, 50, 64], None),
        (
            &[3, 2, 9, 8],
            &[3, 2, 8, 50],
            &[3, 2, 50, 5],
            Some(&[3, 1, 1, 50]),
        ),
        (
            &[3, 2, 9, 8],
            &[3, 2, 8, 50],
            &[3, 2, 50, 5],
            Some(&[9, 50]),
        ),
        (
            &[3, 2, 9, 8],
            &[3, 2, 8, 50],
            &[3, 2, 50, 5],
            Some(&[3, 2, 9, 1]),
        ),
        (&[3, 2, 9, 8], &[3, 2, 8, 50], &[3, 2, 50, 5], Some(&[])),
        (
            &[2, 3, 70, 8],
            &[1, 3, 8, 600],
            &[3, 600, 20],
            Some(&[2, 1, 70, 600]),
        ),
    ];
    let cases = cases
        .iter()
        .map(|&(q, kt, v, mask)| {
            let mut ins = vec![f32s(q), f32s(kt), f32s(v)];
            ins.extend(mask.map(f32s));
            (
                format!("attention {q:?} {kt:?} {v:?} mask {mask:?}"),
                Op::Attention,
                ins,
            )
        })
        .collect();
    check_all(cases);
}

// ---- MatMul ----

#[test]
fn matmul_float32_shapes() {
    let shapes: &[(&[usize], &[usize])] = &[
        (&[1, 1], &[1, 1]),
        (&[5], &[5, 7]),
        (&[3, 5], &[5]),
        (&[6], &[6]),
        (&[3, 5], &[5, 7]),
        (&[17, 33], &[33, 65]),
        (&[64, 64], &[64, 64]),
        (&[9, 3], &[3, 4]),
        (&[2, 1, 3, 4], &[3, 4, 6]),
        (&[2, 3, 4, 5], &[5, 6]),
        (&[4, 5], &[2, 5, 3]),
        (&[3, 1, 2, 7], &[1, 4, 7, 9]),
        (&[7], &[2, 7, 5]),
        (&[2, 3, 8], &[8]),
        (&[1, 13, 0], &[0, 6]),
        (&[6, 777], &[777, 10]),
        (&[2, 1, 3, 4], &[4, 5]),
        // Register-tile edges of every kernel family: rows 8k+r and 6k+r, columns past
        // whole 48/16/8-wide panels ending inside a vector, K not a multiple of 4.
        (&[13, 37], &[37, 50]),
        (&[19, 100], &[100, 113]),
        (&[1, 97, 45], &[45, 200]),
        (&[49, 64], &[64, 96]),
    ];
    let mut cases = vec![];
    for (a, b) in shapes {
        cases.push((
            format!("matmul {a:?}x{b:?}"),
            Op::matmul(),
            vec![f32s(a), f32s(b)],
        ));
        cases.push((
            format!("matmul {a:?}x const {b:?}"),
            Op::matmul(),
            vec![f32s(a), cst(DType::F32, b)],
        ));
    }
    check_all(cases);
}

#[test]
fn matmul_other_dtypes() {
    let mut cases = vec![];
    for dtype in [
        DType::F64,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U32,
        DType::F16,
    ] {
        for (a, b) in [
            (&[3usize, 5][..], &[5usize, 7][..]),
            (&[2, 1, 4, 3], &[3, 3, 2]),
            (&[4], &[4, 2]),
        ] {
            cases.push((
                format!("matmul {dtype} {a:?}x{b:?}"),
                Op::matmul(),
                vec![rt(dtype, a), rt(dtype, b)],
            ));
        }
    }
    cases.push((
        "matmul f64 const".into(),
        Op::matmul(),
        vec![rt(DType::F64, &[4, 6]), cst(DType::F64, &[6, 3])],
    ));
    check_all(cases);
}

// ---- Gemm ----

#[test]
fn gemm_every_transpose_alpha_beta_and_c_shape() {
    let (m, k, n) = (7, 9, 13);
    let c_shapes: &[Option<&[usize]>] = &[
        None,
        Some(&[]),
        Some(&[1]),
        Some(&[n]),
        Some(&[1, n]),
        Some(&[m, 1]),
        Some(&[m, n]),
    ];
    let mut cases = vec![];
    for trans_a in [false, true] {
        for trans_b in [false, true] {
            for (alpha, beta) in [(1.0, 1.0), (0.5, 0.0), (-1.5, 2.5)] {
                for c in c_shapes {
                    for const_b in [false, true] {
                        let a = if trans_a { [k, m] } else { [m, k] };
                        let b = if trans_b { [n, k] } else { [k, n] };
                        let op = Op::Gemm(GemmAttrs {
                            alpha,
                            beta,
                            trans_a,
                            trans_b,
                            activation: nnc::ops::Activation::None,
                        });
                        let b_in = if const_b {
                            cst(DType::F32, &b)
                        } else {
                            f32s(&b)
                        };
                        let c_in = c.map_or(In::Omitted, |s| {
                            if const_b {
                                cst(DType::F32, s)
                            } else {
                                f32s(s)
                            }
                        });
                        let name = format!("gemm tA={trans_a} tB={trans_b} alpha={alpha} beta={beta} C={c:?} constB={const_b}");
                        cases.push((name, op, vec![f32s(&a), b_in, c_in]));
                    }
                }
            }
        }
    }
    // Sizes around the register tile (exact tiles, one-vector and scalar tails) and K
    // long enough to be split into blocks (alpha and C must then apply once).
    for (m, k, n) in [
        (1, 1, 1),
        (4, 8, 8),
        (5, 3, 4),
        (8, 16, 12),
        (33, 17, 21),
        (1, 100, 1),
        (7, 1003, 13),
        (11, 700, 6),
        // GEMV-like tiles that spread K over several accumulator sets.
        (1, 517, 70),
        (2, 37, 50),
        // A of 1.2 MB: K blocks outermost (smaller A runs panel by panel).
        (300, 1000, 20),
    ] {
        for const_b in [false, true] {
            let op = Op::Gemm(GemmAttrs {
                alpha: 0.75,
                beta: 1.5,
                trans_a: false,
                trans_b: true,
                activation: nnc::ops::Activation::None,
            });
            let b_in = if const_b {
                cst(DType::F32, &[n, k])
            } else {
                f32s(&[n, k])
            };
            cases.push((
                format!("gemm {m}x{k}x{n} constB={const_b}"),
                op,
                vec![f32s(&[m, k]), b_in, f32s(&[n])],
            ));
        }
    }
    check_all(cases);
}

#[test]
fn gemm_other_dtypes() {
    let mut cases = vec![];
    for dtype in [DType::F64, DType::I32, DType::I64, DType::U32] {
        for (alpha, beta) in [(1.0, 1.0), (2.0, 0.5)] {
            for trans_b in [false, true] {
                let op = Op::Gemm(GemmAttrs {
                    alpha,
                    beta,
                    trans_a: true,
                    trans_b,
                    activation: nnc::ops::Activation::None,
                });
                let b = if trans_b { [5, 4] } else { [4, 5] };
                cases.push((
                    format!("gemm {dtype} alpha={alpha} beta={beta} tB={trans_b}"),
                    op,
                    vec![rt(dtype, &[4, 3]), rt(dtype, &b), rt(dtype, &[3, 1])],
                ));
            }
        }
    }
    check_all(cases);
}

// ---- Conv ----

fn conv_op(
    kernel: &[usize],
    strides: &[usize],
    pads: &[usize],
    dilations: &[usize],
    group: usize,
) -> Op {
    Op::Conv(ConvAttrs {
        kernel: kernel.to_vec(),
        strides: strides.to_vec(),
        pads: pads.to_vec(),
        dilations: dilations.to_vec(),
        group,
        activation: nnc::ops::Activation::None,
    })
}

/// A conv case: input shape, weight shape, strides, pads, dilations, group, bias.
struct ConvCase {
    name: &'static str,
    x: Vec<usize>,
    w: Vec<usize>,
    strides: Vec<usize>,
    pads: Vec<usize>,
    dilations: Vec<usize>,
    group: usize,
    bias: bool,
}

/// A case with a bias; see [`ConvCase::without_bias`].
fn conv_case(
    name: &'static str,
    x: &[usize],
    w: &[usize],
    strides: &[usize],
    pads: &[usize],
    dilations: &[usize],
    group: usize,
) -> ConvCase {
    ConvCase {
        name,
        x: x.to_vec(),
        w: w.to_vec(),
        strides: strides.to_vec(),
        pads: pads.to_vec(),
        dilations: dilations.to_vec(),
        group,
        bias: true,
    }
}

impl ConvCase {
    fn without_bias(self) -> ConvCase {
        ConvCase {
            bias: false,
            ..self
        }
    }
}

fn conv_cases() -> Vec<ConvCase> {
    vec![
        // Wide enough for several 48-column panels that cross output rows, and
        // output channels that leave partial row tiles in every kernel family.
        // Stride 1 with output rows of ≥ 24: the implicit-GEMM path on x86 kernels.
        conv_case(
            "3x3 implicit GEMM",
            &[1, 8, 10, 30],
            &[12, 8, 3, 3],
            &[1, 1],
            &[1, 1, 1, 1],
            &[1, 1],
            1,
        ),
        conv_case(
            "3x3 dilated implicit GEMM, no padding, grouped",
            &[2, 8, 12, 32],
            &[6, 4, 3, 3],
            &[1, 1],
            &[0, 0, 0, 0],
            &[2, 2],
            2,
        ),
        conv_case(
            "3x3 panels across rows",
            &[1, 16, 20, 21],
            &[20, 16, 3, 3],
            &[1, 1],
            &[1, 1, 1, 1],
            &[1, 1],
            1,
        ),
        conv_case(
            "1x1",
            &[2, 8, 5, 6],
            &[12, 8, 1, 1],
            &[1, 1],
            &[0, 0, 0, 0],
            &[1, 1],
            1,
        ),
        conv_case(
            "1x1 grouped",
            &[1, 8, 3, 7],
            &[6, 4, 1, 1],
            &[1, 1],
            &[0, 0, 0, 0],
            &[1, 1],
            2,
        )
        .without_bias(),
        conv_case(
            "1x1 stride 2",
            &[1, 4, 7, 9],
            &[5, 4, 1, 1],
            &[2, 2],
            &[0, 0, 0, 0],
            &[1, 1],
            1,
        ),
        conv_case(
            "1x1 padded",
            &[1, 3, 4, 4],
            &[2, 3, 1, 1],
            &[1, 1],
            &[1, 1, 1, 1],
            &[1, 1],
            1,
        ),
        conv_case(
            "3x3 pad 1",
            &[1, 3, 10, 11],
            &[8, 3, 3, 3],
            &[1, 1],
            &[1, 1, 1, 1],
            &[1, 1],
            1,
        ),
        conv_case(
            "3x3 pad 1 stride 2",
            &[2, 5, 11, 10],
            &[7, 5, 3, 3],
            &[2, 2],
            &[1, 1, 1, 1],
            &[1, 1],
            1,
        ),
        conv_case(
            "3x3 no pad",
            &[1, 4, 9, 12],
            &[9, 4, 3, 3],
            &[1, 1],
            &[0, 0, 0, 0],
            &[1, 1],
            1,
        )
        .without_bias(),
        conv_case(
            "3x3 dilated",
            &[1, 3, 12, 13],
            &[4, 3, 3, 3],
            &[1, 1],
            &[2, 2, 2, 2],
            &[2, 2],
            1,
        ),
        conv_case(
            "5x3 asymmetric pads",
            &[1, 2, 9, 8],
            &[3, 2, 5, 3],
            &[1, 2],
            &[0, 1, 2, 0],
            &[1, 1],
            1,
        ),
        conv_case(
            "grouped 3x3",
            &[1, 8, 9, 9],
            &[6, 4, 3, 3],
            &[1, 1],
            &[1, 1, 1, 1],
            &[1, 1],
            2,
        ),
        conv_case(
            "depthwise 3x3",
            &[2, 6, 9, 13],
            &[6, 1, 3, 3],
            &[1, 1],
            &[1, 1, 1, 1],
            &[1, 1],
            6,
        ),
        conv_case(
            "depthwise 3x3 stride 2",
            &[1, 5, 14, 17],
            &[5, 1, 3, 3],
            &[2, 2],
            &[1, 1, 1, 1],
            &[1, 1],
            5,
        ),
        conv_case(
            "depthwise multiplier 2",
            &[1, 3, 8, 21],
            &[6, 1, 3, 3],
            &[1, 1],
            &[0, 1, 2, 1],
            &[1, 1],
            3,
        )
        .without_bias(),
        conv_case(
            "depthwise 5x5 dilated",
            &[1, 4, 16, 16],
            &[4, 1, 5, 5],
            &[1, 1],
            &[4, 4, 4, 4],
            &[2, 2],
            4,
        ),
        // The machine-code depthwise kernels (x86-64-v3/v4): widths that end inside a
        // vector of 8 and of 16, several row blocks, stride 2 with both parities of
        // the left padding, 5×5, asymmetric pads.
        conv_case(
            "depthwise 3x3 width 7",
            &[1, 3, 7, 7],
            &[3, 1, 3, 3],
            &[1, 1],
            &[1, 1, 1, 1],
            &[1, 1],
            3,
        ),
        conv_case(
            "depthwise 3x3 width 33 no pad",
            &[2, 2, 9, 35],
            &[2, 1, 3, 3],
            &[1, 1],
            &[0, 0, 0, 0],
            &[1, 1],
            2,
        )
        .without_bias(),
        conv_case(
            "depthwise 3x3 width 17 tall",
            &[1, 2, 40, 17],
            &[2, 1, 3, 3],
            &[1, 1],
            &[1, 1, 1, 1],
            &[1, 1],
            2,
        ),
        conv_case(
            "depthwise 3x3 width 130",
            &[1, 2, 5, 130],
            &[2, 1, 3, 3],
            &[1, 1],
            &[1, 1, 1, 1],
            &[1, 1],
            2,
        ),
        conv_case(
            "depthwise 3x3 stride 2 width 13",
            &[1, 3, 13, 26],
            &[3, 1, 3, 3],
            &[2, 2],
            &[1, 1, 1, 1],
            &[1, 1],
            3,
        ),
        conv_case(
            "depthwise 3x3 stride 2 width 33 no pad",
            &[1, 2, 11, 67],
            &[2, 1, 3, 3],
            &[2, 2],
            &[0, 0, 0, 0],
            &[1, 1],
            2,
        )
        .without_bias(),
        conv_case(
            "depthwise 3x3 stride 2 asymmetric pads",
            &[1, 3, 12, 34],
            &[3, 1, 3, 3],
            &[2, 2],
            &[0, 0, 1, 1],
            &[1, 1],
            3,
        ),
        conv_case(
            "depthwise 5x5 width 17",
            &[1, 3, 17, 17],
            &[3, 1, 5, 5],
            &[1, 1],
            &[2, 2, 2, 2],
            &[1, 1],
            3,
        ),
        conv_case(
            "depthwise 5x5 stride 2 odd left pad",
            &[1, 2, 15, 37],
            &[2, 1, 5, 5],
            &[2, 2],
            &[2, 1, 1, 3],
            &[1, 1],
            2,
        ),
        conv_case(
            "depthwise 3x2 stride 2x1 asymmetric",
            &[1, 2, 9, 16],
            &[2, 1, 3, 2],
            &[2, 1],
            &[1, 0, 0, 1],
            &[1, 1],
            2,
        ),
        // Every row the output reads is top padding: the kernel copies nothing.
        conv_case(
            "depthwise output only over padding",
            &[1, 2, 1, 9],
            &[2, 1, 1, 3],
            &[10, 1],
            &[5, 1, 0, 1],
            &[1, 1],
            2,
        ),
        conv_case(
            "depthwise 1-D",
            &[2, 4, 30],
            &[4, 1, 5],
            &[1],
            &[2, 2],
            &[1],
            4,
        ),
        conv_case("1-D", &[2, 4, 20], &[5, 4, 3], &[2], &[1, 2], &[1], 1),
        conv_case(
            "1-D pointwise",
            &[1, 6, 19],
            &[4, 6, 1],
            &[1],
            &[0, 0],
            &[1],
            1,
        ),
        conv_case(
            "3-D",
            &[1, 3, 5, 6, 7],
            &[4, 3, 3, 3, 3],
            &[1, 1, 1],
            &[1, 1, 1, 1, 1, 1],
            &[1, 1, 1],
            1,
        ),
        conv_case(
            "3-D strided grouped",
            &[1, 4, 6, 7, 5],
            &[4, 2, 2, 3, 1],
            &[2, 1, 1],
            &[0, 1, 0, 1, 0, 0],
            &[1, 1, 1],
            2,
        )
        .without_bias(),
        conv_case(
            "3-D depthwise",
            &[1, 3, 4, 5, 6],
            &[3, 1, 3, 3, 3],
            &[1, 1, 1],
            &[1, 1, 1, 1, 1, 1],
            &[1, 1, 1],
            3,
        ),
        // K = 576 makes the im2col chunk smaller than the 400 output positions.
        conv_case(
            "3x3 many chunks",
            &[1, 64, 20, 20],
            &[20, 64, 3, 3],
            &[1, 1],
            &[1, 1, 1, 1],
            &[1, 1],
            1,
        ),
        // Stride 2 with outputs of ≥ 24 columns (or ≥ 8 and few maps) and K ≥ 64: the
        // implicit GEMM over the input's 2×2 phase planes on x86 kernels.
        conv_case(
            "3x3 stride 2 phase planes, odd input",
            &[2, 8, 19, 51],
            &[10, 8, 3, 3],
            &[2, 2],
            &[1, 1, 1, 1],
            &[1, 1],
            1,
        ),
        conv_case(
            "3x3 stride 2 phase planes, asymmetric pads",
            &[1, 8, 20, 50],
            &[9, 8, 3, 3],
            &[2, 2],
            &[0, 1, 1, 2],
            &[1, 1],
            1,
        )
        .without_bias(),
        conv_case(
            "1x1 stride 2 (im2col: phase planes only for K ≥ 64, taps > 1)",
            &[1, 16, 16, 16],
            &[24, 16, 1, 1],
            &[2, 2],
            &[0, 0, 0, 0],
            &[1, 1],
            1,
        ),
        // Wide outputs of more than 512 KB: the implicit GEMM in chunks of rows
        // (stride 1 with runtime weights; constant ones take Winograd).
        conv_case(
            "3x3 implicit GEMM in row chunks",
            &[1, 4, 40, 128],
            &[64, 4, 3, 3],
            &[1, 1],
            &[1, 1, 1, 1],
            &[1, 1],
            1,
        ),
        conv_case(
            "7x7 stride 2 phase planes in row chunks",
            &[1, 3, 64, 160],
            &[64, 3, 7, 7],
            &[2, 2],
            &[3, 3, 3, 3],
            &[1, 1],
            1,
        ),
        conv_case(
            "7x7 stride 2",
            &[1, 3, 23, 23],
            &[8, 3, 7, 7],
            &[2, 2],
            &[3, 3, 3, 3],
            &[1, 1],
            1,
        ),
    ]
}

fn conv_inputs(c: &ConvCase, dtype: DType, const_w: bool) -> Vec<In> {
    let w = if const_w {
        cst(dtype, &c.w)
    } else {
        rt(dtype, &c.w)
    };
    let b = if !c.bias {
        In::Omitted
    } else if const_w {
        cst(dtype, &[c.w[0]])
    } else {
        rt(dtype, &[c.w[0]])
    };
    vec![rt(dtype, &c.x), w, b]
}

#[test]
fn conv_float32() {
    let mut cases = vec![];
    for c in conv_cases() {
        let op = conv_op(&c.w[2..], &c.strides, &c.pads, &c.dilations, c.group);
        for const_w in [true, false] {
            cases.push((
                format!("conv {} const_w={const_w}", c.name),
                op.clone(),
                conv_inputs(&c, DType::F32, const_w),
            ));
        }
    }
    check_all(cases);
}

/// 3×3 stride-1 convs with constant weights take the Winograd path: F(4×4) from 16×16
/// outputs, F(2×2) from 8×8 (see `lower/winograd.rs`). Partial tiles on both axes,
/// batches, asymmetric padding, chunks of tile rows, and the fused epilogue (bias,
/// residual, activation) applied by the output transform; on x86-64-v3/v4 the
/// machine-code transforms (`lower/winograd_x86.rs`) for rows of more than 4 tiles, and
/// on x86-64-v4 the whole-plane kernels for 8×8 outputs.
#[test]
fn conv_winograd() {
    use nnc::ops::Activation;
    let conv = |pads: &[usize], activation| {
        Op::Conv(ConvAttrs {
            kernel: vec![3, 3],
            strides: vec![1, 1],
            pads: pads.to_vec(),
            dilations: vec![1, 1],
            group: 1,
            activation,
        })
    };
    let relu6 = Activation::Clip { min: 0.0, max: 6.0 };
    // (name, input, maps, pads, activation, bias, residual)
    #[allow(clippy::type_complexity)]
    let shapes: Vec<(&str, [usize; 4], usize, [usize; 4], Activation, bool, bool)> = vec![
        (
            "F4 partial tiles, batch 2",
            [2, 5, 17, 19],
            7,
            [1, 1, 1, 1],
            Activation::None,
            true,
            false,
        ),
        (
            "F4 asymmetric pads",
            [1, 4, 18, 33],
            9,
            [0, 1, 2, 0],
            Activation::Relu,
            false,
            false,
        ),
        (
            "F4 no padding, residual",
            [1, 3, 18, 20],
            4,
            [0, 0, 0, 0],
            Activation::Relu,
            true,
            true,
        ),
        // 64 × 64 channels on 60 × 60: several chunks of tile rows and a partial
        // last chunk.
        (
            "F4 chunks",
            [1, 64, 60, 60],
            64,
            [1, 1, 1, 1],
            relu6,
            true,
            true,
        ),
        // Tile rows of 18 (F4) and 20 (F2) tiles: the machine-code transforms' 16-lane
        // groups on AVX-512, a full and a partial one (8-lane groups on AVX2); the
        // shapes above have rows of 5–15 tiles.
        (
            "F4 two vector groups",
            [1, 3, 20, 70],
            5,
            [1, 1, 1, 1],
            Activation::Relu,
            true,
            true,
        ),
        (
            "F2 wide rows",
            [1, 8, 10, 40],
            12,
            [1, 1, 1, 1],
            Activation::LeakyRelu { alpha: 0.1 },
            true,
            true,
        ),
        (
            "F2 partial tiles",
            [1, 6, 9, 11],
            5,
            [1, 1, 1, 1],
            Activation::None,
            true,
            false,
        ),
        (
            "F2 residual, clip",
            [2, 8, 12, 8],
            16,
            [1, 1, 1, 1],
            relu6,
            false,
            true,
        ),
        // 8×8 outputs (16 tiles) on AVX-512: the whole-plane kernels
        // (`lower/winograd_plane_x86.rs`), with map blocks of 16 plus a remainder,
        // channel chunks of 12 plus a remainder, planes of 4 to 7 zmm (a lone last
        // register) and padding on any side.
        (
            "F2 whole plane, batch 2",
            [2, 30, 8, 8],
            20,
            [1, 1, 1, 1],
            relu6,
            true,
            true,
        ),
        (
            "F2 whole plane unpadded",
            [1, 5, 10, 10],
            16,
            [0, 0, 0, 0],
            Activation::Relu,
            true,
            false,
        ),
        (
            "F2 whole plane asymmetric pads",
            [1, 3, 9, 7],
            7,
            [0, 1, 1, 2],
            Activation::LeakyRelu { alpha: 0.1 },
            false,
            true,
        ),
    ];
    let mut cases = vec![];
    for (name, x, maps, pads, act, bias, residual) in shapes {
        let out = [
            x[0],
            maps,
            x[2] + pads[0] + pads[2] - 2,
            x[3] + pads[1] + pads[3] - 2,
        ];
        let mut ins = vec![f32s(&x), cst(DType::F32, &[maps, x[1], 3, 3])];
        ins.push(if bias {
            cst(DType::F32, &[maps])
        } else {
            In::Omitted
        });
        if residual {
            ins.push(f32s(&out));
        }
        cases.push((format!("winograd {name}"), conv(&pads, act), ins));
    }
    check_all(cases);
}

/// Few output positions (≤ 64) and many maps (≥ 128), constant weights: the transposed
/// GEMM `Yᵀ = Xᵀ · Wᵀ` on x86 kernels (see `lower/narrow.rs`), pointwise (input read
/// in place) and im2col, with bias, residual and activation around the transpose.
#[test]
fn conv_transposed_gemm() {
    use nnc::ops::Activation;
    let convs = [
        FusedConv {
            name: "3x3 on 7x7",
            x: [1, 64, 7, 7],
            maps: 128,
            k: 3,
            stride: 1,
            pads: [1; 4],
            activation: Activation::Relu,
            const_w: true,
            bias: true,
            residual: true,
        },
        FusedConv {
            name: "pointwise 7x7, batch 2",
            x: [2, 40, 7, 7],
            maps: 136,
            k: 1,
            stride: 1,
            pads: [0; 4],
            activation: Activation::None,
            const_w: true,
            bias: true,
            residual: false,
        },
        FusedConv {
            name: "3x3 stride 2 to 6x5",
            x: [1, 24, 12, 10],
            maps: 130,
            k: 3,
            stride: 2,
            pads: [1; 4],
            activation: Activation::Relu,
            const_w: true,
            bias: false,
            residual: true,
        },
        FusedConv {
            name: "pointwise 8x8",
            x: [1, 17, 8, 8],
            maps: 200,
            k: 1,
            stride: 1,
            pads: [0; 4],
            activation: Activation::Clip { min: 0.0, max: 6.0 },
            const_w: true,
            bias: true,
            residual: false,
        },
    ];
    check_all(convs.iter().map(|c| c.case("transposed GEMM")).collect());
}

/// Implicit-GEMM convs whose output rows are ≥ 96 wide: the x86 kernel writes C, bias,
/// residual and activation into the output row by row (`conv_implicit_rows`), stride 2
/// over phase planes also for short K (a K = 27 stem), odd widths whose last panel ends
/// inside a vector, asymmetric pads, batches; runtime weights keep stride 1 off Winograd.
#[test]
fn conv_rows_in_place() {
    use nnc::ops::Activation;
    let convs = [
        FusedConv {
            name: "3x3 stride 2 K = 27 stem, batch 2",
            x: [2, 3, 15, 223],
            maps: 16,
            k: 3,
            stride: 2,
            pads: [0; 4],
            activation: Activation::Relu,
            const_w: true,
            bias: true,
            residual: true,
        },
        // 64 maps × 111 columns: 18 rows per call, so three calls (residual offsets).
        FusedConv {
            name: "3x3 stride 2 in row chunks",
            x: [1, 3, 43, 223],
            maps: 64,
            k: 3,
            stride: 2,
            pads: [0; 4],
            activation: Activation::Relu,
            const_w: true,
            bias: true,
            residual: true,
        },
        FusedConv {
            name: "7x7 stride 2",
            x: [1, 3, 9, 200],
            maps: 10,
            k: 7,
            stride: 2,
            pads: [3; 4],
            activation: Activation::Clip { min: 0.0, max: 6.0 },
            const_w: true,
            bias: false,
            residual: false,
        },
        FusedConv {
            name: "3x3 stride 1 asymmetric pads",
            x: [1, 5, 6, 97],
            maps: 12,
            k: 3,
            stride: 1,
            pads: [0, 1, 1, 2],
            activation: Activation::LeakyRelu { alpha: 0.1 },
            const_w: false,
            bias: true,
            residual: true,
        },
    ];
    for c in &convs {
        let rows = c.output()[3];
        assert!(
            rows >= 96,
            "{}: rows of {rows} do not take the in-place path",
            c.name
        );
    }
    check_all(convs.iter().map(|c| c.case("rows in place")).collect());
}

/// A 2-D conv with a square kernel and a fused epilogue (bias, residual, activation),
/// as a test case.
struct FusedConv {
    name: &'static str,
    x: [usize; 4],
    maps: usize,
    k: usize,
    stride: usize,
    /// `[top, left, bottom, right]`.
    pads: [usize; 4],
    activation: nnc::ops::Activation,
    const_w: bool,
    bias: bool,
    residual: bool,
}

impl FusedConv {
    fn output(&self) -> [usize; 4] {
        let out =
            |i: usize, a: usize| (i + self.pads[a] + self.pads[a + 2] - self.k) / self.stride + 1;
        [self.x[0], self.maps, out(self.x[2], 0), out(self.x[3], 1)]
    }

    fn case(&self, prefix: &str) -> Case {
        let op = Op::Conv(ConvAttrs {
            kernel: vec![self.k, self.k],
            strides: vec![self.stride, self.stride],
            pads: self.pads.to_vec(),
            dilations: vec![1, 1],
            group: 1,
            activation: self.activation,
        });
        let w = [self.maps, self.x[1], self.k, self.k];
        let mut ins = vec![
            f32s(&self.x),
            if self.const_w {
                cst(DType::F32, &w)
            } else {
                f32s(&w)
            },
            if self.bias {
                cst(DType::F32, &[self.maps])
            } else {
                In::Omitted
            },
        ];
        if self.residual {
            ins.push(f32s(&self.output()));
        }
        (format!("{prefix} {}", self.name), op, ins)
    }
}

/// Depthwise convs with every activation the machine-code epilogue fuses, one it does
/// not (Sigmoid: a pass after the kernel), with and without a residual, stride 1 and 2,
/// widths ending inside a vector.
#[test]
fn conv_depthwise_fused_epilogue() {
    use nnc::ops::Activation;
    let activations = [
        Activation::None,
        Activation::Relu,
        Activation::Clip { min: 0.0, max: 0.5 },
        Activation::LeakyRelu { alpha: 0.1 },
        Activation::HardSigmoid {
            alpha: 0.3,
            beta: 0.4,
        },
        Activation::HardSwish,
        Activation::Sigmoid,
    ];
    /// x, w, strides, pads, group.
    type Shape = (
        &'static [usize],
        &'static [usize],
        &'static [usize],
        &'static [usize],
        usize,
    );
    let shapes: [Shape; 3] = [
        (&[1, 4, 11, 17], &[4, 1, 3, 3], &[1, 1], &[1, 1, 1, 1], 4),
        (&[2, 3, 14, 33], &[3, 1, 3, 3], &[2, 2], &[1, 1, 1, 1], 3),
        (&[1, 2, 6, 20], &[4, 1, 3, 3], &[1, 1], &[0, 1, 2, 1], 2),
    ];
    let mut cases = vec![];
    for (si, (x, w, strides, pads, group)) in shapes.iter().enumerate() {
        for act in activations {
            for residual in [false, true] {
                let op = Op::Conv(ConvAttrs {
                    kernel: w[2..].to_vec(),
                    strides: strides.to_vec(),
                    pads: pads.to_vec(),
                    dilations: vec![1, 1],
                    group: *group,
                    activation: act,
                });
                let out_shape = match infer_types(
                    &op,
                    &[
                        Some(TensorType::new(DType::F32, x.to_vec())),
                        Some(TensorType::new(DType::F32, w.to_vec())),
                    ],
                ) {
                    Ok(mut t) => t.remove(0).shape,
                    Err(e) => panic!("shape {si}: {e}"),
                };
                let bias = if si == 1 {
                    In::Omitted
                } else {
                    cst(DType::F32, &[w[0]])
                };
                let mut ins = vec![f32s(x), cst(DType::F32, w), bias];
                if residual {
                    ins.push(f32s(&out_shape));
                }
                cases.push((
                    format!("depthwise shape {si} {act:?} residual={residual}"),
                    op,
                    ins,
                ));
            }
        }
    }
    check_all(cases);
}

#[test]
fn conv_float64_and_float16() {
    let mut cases = vec![];
    for c in conv_cases()
        .into_iter()
        .filter(|c| c.x.iter().product::<usize>() < 2000)
    {
        let op = conv_op(&c.w[2..], &c.strides, &c.pads, &c.dilations, c.group);
        cases.push((
            format!("conv f64 {}", c.name),
            op.clone(),
            conv_inputs(&c, DType::F64, true),
        ));
        cases.push((
            format!("conv f16 {}", c.name),
            op,
            conv_inputs(&c, DType::F16, false),
        ));
    }
    check_all(cases);
}

// ---- ConvTranspose ----

/// ONNX's output size: `s·(in − 1) + output_padding + (k − 1)·d + 1 − pads`.
fn conv_transpose_op(
    x: &[usize],
    kernel: &[usize],
    strides: &[usize],
    pads: &[usize],
    dilations: &[usize],
    output_padding: &[usize],
    group: usize,
) -> Op {
    let sp = kernel.len();
    let output_spatial = (0..sp)
        .map(|d| {
            strides[d] * (x[2 + d] - 1) + output_padding[d] + (kernel[d] - 1) * dilations[d] + 1
                - pads[d]
                - pads[sp + d]
        })
        .collect();
    Op::ConvTranspose(ConvTransposeAttrs {
        kernel: kernel.to_vec(),
        strides: strides.to_vec(),
        pads: pads.to_vec(),
        dilations: dilations.to_vec(),
        group,
        output_spatial,
    })
}

#[test]
fn conv_transpose_all_attributes() {
    #[allow(clippy::type_complexity)]
    let cases: &[(
        &str,
        &[usize],
        &[usize],
        &[usize],
        &[usize],
        &[usize],
        &[usize],
        usize,
    )] = &[
        // name, x, w, strides, pads, dilations, output_padding, group
        (
            "plain",
            &[1, 3, 4, 5],
            &[3, 2, 3, 3],
            &[1, 1],
            &[0, 0, 0, 0],
            &[1, 1],
            &[0, 0],
            1,
        ),
        (
            "stride 2 pad 1",
            &[2, 3, 4, 5],
            &[3, 4, 3, 3],
            &[2, 2],
            &[1, 1, 1, 1],
            &[1, 1],
            &[0, 0],
            1,
        ),
        (
            "stride 2 output_padding",
            &[1, 2, 5, 3],
            &[2, 3, 3, 3],
            &[2, 2],
            &[1, 1, 1, 1],
            &[1, 1],
            &[1, 1],
            1,
        ),
        (
            "stride 3 asymmetric",
            &[1, 2, 4, 4],
            &[2, 2, 4, 2],
            &[3, 2],
            &[0, 1, 2, 0],
            &[1, 1],
            &[2, 1],
            1,
        ),
        (
            "grouped",
            &[1, 4, 3, 3],
            &[4, 2, 3, 3],
            &[1, 1],
            &[1, 1, 1, 1],
            &[1, 1],
            &[0, 0],
            2,
        ),
        (
            "dilated",
            &[1, 2, 5, 6],
            &[2, 3, 3, 2],
            &[1, 2],
            &[1, 0, 1, 0],
            &[2, 2],
            &[0, 0],
            1,
        ),
        (
            "wide rows",
            &[1, 2, 3, 17],
            &[2, 2, 3, 3],
            &[1, 1],
            &[1, 1, 1, 1],
            &[1, 1],
            &[0, 0],
            1,
        ),
        ("1-D", &[2, 3, 7], &[3, 2, 4], &[2], &[1, 2], &[1], &[1], 1),
        // 400 input channels: the per-tap GEMMs split K, and C is also their addend.
        (
            "deep",
            &[1, 400, 3, 4],
            &[400, 3, 3, 3],
            &[2, 2],
            &[1, 1, 1, 1],
            &[1, 1],
            &[1, 0],
            1,
        ),
        (
            "3-D",
            &[1, 2, 3, 4, 3],
            &[2, 2, 2, 3, 2],
            &[2, 1, 2],
            &[0, 1, 1, 1, 0, 0],
            &[1, 1, 1],
            &[1, 0, 0],
            1,
        ),
    ];
    let mut all = vec![];
    for &(name, x, w, s, p, d, op_pad, group) in cases {
        let op = conv_transpose_op(x, &w[2..], s, p, d, op_pad, group);
        let maps = w[1] * group;
        for (dtype, const_w) in [(DType::F32, true), (DType::F32, false), (DType::F64, true)] {
            let w_in = if const_w { cst(dtype, w) } else { rt(dtype, w) };
            all.push((
                format!("conv_transpose {name} {dtype} const_w={const_w}"),
                op.clone(),
                vec![rt(dtype, x), w_in, rt(dtype, &[maps])],
            ));
        }
        all.push((
            format!("conv_transpose {name} no bias"),
            op,
            vec![f32s(x), cst(DType::F32, w), In::Omitted],
        ));
    }
    check_all(all);
}

// ---- measurements ----

/// GFLOP/s of a one-node graph, after checking it against the interpreter.
fn measure(name: &str, op: Op, ins: Vec<In>, flops: f64) {
    let (g, inputs) = one_node(op, ins, 1);
    let lib = Compiled::new(&g).unwrap_or_else(|e| panic!("{name}: {e}"));
    // For looking at the generated code: NNC_TEST_KEEP_SO=dir keeps each library.
    if let Ok(dir) = std::env::var("NNC_TEST_KEEP_SO") {
        let file: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        std::fs::copy(
            lib.library_path(),
            std::path::Path::new(&dir).join(format!("{file}.so")),
        )
        .expect("copy the library");
    }
    let expected = nnc::interp::run_graph(&g, &inputs).expect("interpreter");
    let actual = lib
        .run(&g, &inputs)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let err = rel_err(&actual[0], &expected[0]);
    assert!(err <= 1e-4, "{name}: rel err {err:.3e}");
    // About half a second of runs, between 5 and 100.
    let reps = ((2e10 / flops) as usize).clamp(5, 100);
    let secs = lib.best_time(&g, &inputs, reps);
    println!(
        "{name}: {:.3} ms, {:.1} GFLOP/s",
        secs * 1e3,
        flops / secs / 1e9
    );
}

#[test]
fn performance_report() {
    let _turn = one_at_a_time();
    let n = 256;
    let flops = 2.0 * (n * n * n) as f64;
    measure(
        "matmul 256x256x256 (both runtime)",
        Op::matmul(),
        vec![f32s(&[n, n]), f32s(&[n, n])],
        flops,
    );
    measure(
        "matmul 256x256x256 (constant B)",
        Op::matmul(),
        vec![f32s(&[n, n]), cst(DType::F32, &[n, n])],
        flops,
    );
    let big = 1024;
    measure(
        "matmul 1024x1024x1024 (constant B)",
        Op::matmul(),
        vec![f32s(&[big, big]), cst(DType::F32, &[big, big])],
        2.0 * (big * big * big) as f64,
    );
    let conv = conv_op(&[3, 3], &[1, 1], &[1, 1, 1, 1], &[1, 1], 1);
    let flops = 2.0 * (64 * 64 * 9 * 56 * 56) as f64;
    measure(
        "conv 3x3 64->64 56x56",
        conv,
        vec![
            f32s(&[1, 64, 56, 56]),
            cst(DType::F32, &[64, 64, 3, 3]),
            cst(DType::F32, &[64]),
        ],
        flops,
    );
    let pw = conv_op(&[1, 1], &[1, 1], &[0, 0, 0, 0], &[1, 1], 1);
    let flops = 2.0 * (256 * 64 * 56 * 56) as f64;
    measure(
        "conv 1x1 64->256 56x56",
        pw,
        vec![
            f32s(&[1, 64, 56, 56]),
            cst(DType::F32, &[256, 64, 1, 1]),
            cst(DType::F32, &[256]),
        ],
        flops,
    );
    let dw = conv_op(&[3, 3], &[1, 1], &[1, 1, 1, 1], &[1, 1], 128);
    let flops = 2.0 * (128 * 9 * 56 * 56) as f64;
    measure(
        "depthwise 3x3 128ch 56x56",
        dw,
        vec![
            f32s(&[1, 128, 56, 56]),
            cst(DType::F32, &[128, 1, 3, 3]),
            cst(DType::F32, &[128]),
        ],
        flops,
    );
    let deep = conv_op(&[3, 3], &[1, 1], &[1, 1, 1, 1], &[1, 1], 1);
    let flops = 2.0 * (512 * 512 * 9 * 7 * 7) as f64;
    measure(
        "conv 3x3 512->512 7x7",
        deep,
        vec![
            f32s(&[1, 512, 7, 7]),
            cst(DType::F32, &[512, 512, 3, 3]),
            cst(DType::F32, &[512]),
        ],
        flops,
    );
    let stem = conv_op(&[7, 7], &[2, 2], &[3, 3, 3, 3], &[1, 1], 1);
    let flops = 2.0 * (64 * 3 * 49 * 112 * 112) as f64;
    measure(
        "conv 7x7/2 3->64 224x224",
        stem,
        vec![
            f32s(&[1, 3, 224, 224]),
            cst(DType::F32, &[64, 3, 7, 7]),
            cst(DType::F32, &[64]),
        ],
        flops,
    );
    let down = conv_op(&[3, 3], &[2, 2], &[1, 1, 1, 1], &[1, 1], 1);
    let flops = 2.0 * (128 * 64 * 9 * 28 * 28) as f64;
    measure(
        "conv 3x3/2 64->128 56x56",
        down,
        vec![
            f32s(&[1, 64, 56, 56]),
            cst(DType::F32, &[128, 64, 3, 3]),
            cst(DType::F32, &[128]),
        ],
        flops,
    );
    let up = conv_transpose_op(
        &[1, 64, 28, 28],
        &[4, 4],
        &[2, 2],
        &[1, 1, 1, 1],
        &[1, 1],
        &[0, 0],
        1,
    );
    let flops = 2.0 * (64 * 32 * 16 * 28 * 28) as f64;
    measure(
        "conv_transpose 4x4/2 64->32 28x28",
        up,
        vec![
            f32s(&[1, 64, 28, 28]),
            cst(DType::F32, &[64, 32, 4, 4]),
            cst(DType::F32, &[32]),
        ],
        flops,
    );
    let attn = 2.0 * (8 * 128 * 64 * 128) as f64;
    measure(
        "matmul batched 8x128x64 @ 8x64x128",
        Op::matmul(),
        vec![f32s(&[8, 128, 64]), f32s(&[8, 64, 128])],
        attn,
    );
    let fc = Op::Gemm(GemmAttrs {
        alpha: 1.0,
        beta: 1.0,
        trans_a: false,
        trans_b: true,
        activation: nnc::ops::Activation::None,
    });
    let flops = 2.0 * (2048 * 1000) as f64;
    measure(
        "gemm fc 1x2048 @ (1000x2048)^T",
        fc,
        vec![
            f32s(&[1, 2048]),
            cst(DType::F32, &[1000, 2048]),
            cst(DType::F32, &[1000]),
        ],
        flops,
    );
}

/// NaN inputs stay NaN through the activations the machine-code epilogues apply (GEMM
/// and depthwise): ONNX's Relu, Clip and HardSigmoid propagate NaN, and the epilogues
/// once turned it into the bound (Relu(NaN) = 0), as x86's vmaxps/vminps return their
/// second operand when either is NaN. Stride-1 3×3 convs are left out: Winograd spreads
/// a NaN input over every output of its tiles, not just the windows holding it (see
/// `lower/winograd.rs`), so they differ from the direct convolution by design.
#[test]
fn activations_keep_nan() {
    use nnc::ops::Activation;
    let shape = [1, 8, 24, 24];
    let n: usize = shape.iter().product();
    let values: Vec<f32> = (0..n)
        .map(|i| {
            if i % 97 == 0 {
                f32::NAN
            } else {
                (i as f32 * 0.37).sin()
            }
        })
        .collect();
    let x = Tensor::from_vec(&shape, values);
    let mut cases = vec![];
    let acts = [
        Activation::Relu,
        Activation::Clip {
            min: -0.5,
            max: 0.5,
        },
        Activation::HardSigmoid {
            alpha: 0.2,
            beta: 0.5,
        },
    ];
    // (name, kernel, stride, pads, group): 1x1 as one GEMM, 3x3 stride 2 as the
    // implicit GEMM over phase planes, 3x3 depthwise.
    let convs: [(&str, usize, usize, usize, usize); 3] = [
        ("1x1", 1, 1, 0, 1),
        ("3x3 stride 2", 3, 2, 1, 1),
        ("depthwise 3x3", 3, 1, 1, 8),
    ];
    for (name, k, stride, p, group) in convs {
        for act in acts {
            let op = Op::Conv(ConvAttrs {
                kernel: vec![k, k],
                strides: vec![stride, stride],
                pads: vec![p; 4],
                dilations: vec![1, 1],
                group,
                activation: act,
            });
            let ins = vec![
                In::Given(x.clone()),
                cst(DType::F32, &[8, 8 / group, k, k]),
                cst(DType::F32, &[8]),
            ];
            cases.push((format!("{name} conv {act:?} with NaN"), op, ins));
        }
    }
    check_all(cases);
}
