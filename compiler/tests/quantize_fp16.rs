//! `--quantize fp16` (`WeightFormat::F16`): one-node graphs compiled with half-stored
//! weights, run, and compared with the reference interpreter run on the same graph with
//! the stored constants rounded to half the way nnc rounds them (to nearest even,
//! saturating at ±65504). Every path that repacks float32 weights is covered (packed
//! GEMM B for MatMul, batched MatMul and Gemm; packed conv A for pointwise and implicit-
//! GEMM convs; the transposed GEMM; Winograd F(4×4) and the whole-plane F(2×2)), and
//! constant Gather tables (halved at 64 KB and up) including row tails, subnormal
//! halves, saturation and negative zero; on the host, on every x86-64 kernel family the
//! host runs (the baseline one expands with Cranelift, the others with vcvtph2ps), and
//! on aarch64 under qemu.
//!
//! Repacking permutes weights, so rounding before or after it is the same and those
//! cases match to float32 accuracy. Winograd transforms the weights first and rounds the
//! transformed ones: those cases get a tolerance of 5e-3 (one half-ulp, 2⁻¹¹, on each
//! of up to 36 transformed weights per output).

#[path = "common/graphs.rs"]
mod graphs;
#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use graphs::{compare, one_node, try_one_node, Rng, Scale};
use half::f16;
use nnc::codegen::{compile_graph, Arch, CompileOptions, Target, WeightFormat};
use nnc::ir::{Graph, Tensor};
use nnc::ops::{Activation, ConvAttrs, GemmAttrs, MatMulAttrs, Op};
use runner::{aarch64_harness, run_on_aarch64_with, Compiled};

/// An operand: a runtime float32 input, a constant, or omitted.
enum In {
    Runtime(Vec<usize>),
    Const(Tensor),
    Omitted,
}

/// Random float32 constant of `shape`.
fn cst(rng: &mut Rng, shape: &[usize]) -> In {
    let n = shape.iter().product();
    In::Const(Tensor::from_vec(shape, rng.f32s(n, 1.0)))
}

struct Case {
    name: &'static str,
    op: Op,
    ins: Vec<In>,
    /// Which constant inputs nnc stores as half (the reference rounds these).
    halved: Vec<usize>,
    tolerance: f64,
}

/// The graph, its runtime inputs, and the graph with the halved constants rounded.
fn build(case: &Case, rng: &mut Rng) -> (Graph, Vec<Tensor>, Graph) {
    let (mut plain, mut rounded) = (vec![], vec![]);
    for (i, input) in case.ins.iter().enumerate() {
        let (p, r) = match input {
            In::Runtime(shape) => {
                let n = shape.iter().product();
                let t = Tensor::from_vec(shape, rng.f32s(n, 1.0));
                (graphs::In::Given(t.clone()), graphs::In::Given(t))
            }
            In::Const(t) => {
                let r = if case.halved.contains(&i) {
                    round_to_half(t)
                } else {
                    t.clone()
                };
                (graphs::In::GivenConst(t.clone()), graphs::In::GivenConst(r))
            }
            In::Omitted => (graphs::In::Omitted, graphs::In::Omitted),
        };
        plain.push(p);
        rounded.push(r);
    }
    let (g, inputs) =
        try_one_node(case.op.clone(), plain, 0).unwrap_or_else(|e| panic!("{}: {e}", case.name));
    let (rounded, _) = one_node(case.op.clone(), rounded, 0);
    (g, inputs, rounded)
}

/// nnc's storage rounding: nearest even, finite values saturating at ±65504.
fn round_to_half(t: &Tensor) -> Tensor {
    let Tensor::F32(a) = t else {
        panic!("only float32 constants are halved")
    };
    let max = f16::MAX.to_f32();
    let v: Vec<f32> = a
        .iter()
        .map(|&x| {
            let x = if x.is_finite() { x.clamp(-max, max) } else { x };
            f16::from_f32(x).to_f32()
        })
        .collect();
    Tensor::from_vec(t.shape(), v)
}

fn options(target: Target) -> CompileOptions {
    CompileOptions {
        target,
        prefix: String::new(),
        weights: WeightFormat::F16,
        kernels: Default::default(),
        index_checks: Default::default(),
    }
}

fn conv(kernel: usize, stride: usize, pad: usize) -> Op {
    Op::Conv(ConvAttrs {
        kernel: vec![kernel; 2],
        strides: vec![stride; 2],
        pads: vec![pad; 4],
        dilations: vec![1, 1],
        group: 1,
        activation: Activation::Relu,
    })
}

fn cases(rng: &mut Rng) -> Vec<Case> {
    let exact = 1e-5;
    let winograd = 5e-3;
    // A Gather table above the 64 KB threshold with rows of 37 floats (a 32-float
    // expansion plus a 4-float and a 1-float tail) and values half stores specially.
    let mut table = rng.f32s(500 * 37, 1.0);
    table[..6].copy_from_slice(&[1e-6, -3e-7, 7e4, -1e5, -0.0, 65519.0]);
    let table = Tensor::from_vec(&[500, 37], table);
    let indices = Tensor::from_vec(&[6], vec![0i64, -1, 250, 499, 0, -500]);
    let small_table = Tensor::from_vec(&[10, 8], rng.f32s(80, 1.0));
    let small_indices = Tensor::from_vec(&[3], vec![9i64, 0, -2]);
    vec![
        Case {
            name: "MatMul, packed B with a partial panel",
            op: Op::MatMul(MatMulAttrs::default()),
            ins: vec![In::Runtime(vec![5, 37]), cst(rng, &[37, 70])],
            halved: vec![1],
            tolerance: exact,
        },
        Case {
            name: "batched MatMul, one packed B per batch",
            op: Op::MatMul(MatMulAttrs::default()),
            ins: vec![In::Runtime(vec![3, 4, 16]), cst(rng, &[3, 16, 20])],
            halved: vec![1],
            tolerance: exact,
        },
        Case {
            name: "Gemm transB with bias (bias stays float32)",
            op: Op::Gemm(GemmAttrs {
                alpha: 1.0,
                beta: 1.0,
                trans_a: false,
                trans_b: true,
                activation: Activation::None,
            }),
            ins: vec![
                In::Runtime(vec![4, 33]),
                cst(rng, &[50, 33]),
                cst(rng, &[50]),
            ],
            halved: vec![1],
            tolerance: exact,
        },
        Case {
            name: "pointwise conv",
            op: conv(1, 1, 0),
            ins: vec![
                In::Runtime(vec![1, 16, 9, 9]),
                cst(rng, &[24, 16, 1, 1]),
                cst(rng, &[24]),
            ],
            halved: vec![1],
            tolerance: exact,
        },
        Case {
            name: "3x3 stride 2 conv (implicit GEMM)",
            op: conv(3, 2, 1),
            ins: vec![
                In::Runtime(vec![1, 8, 15, 15]),
                cst(rng, &[16, 8, 3, 3]),
                In::Omitted,
            ],
            halved: vec![1],
            tolerance: exact,
        },
        Case {
            name: "3x3 conv on 7x7, 128 maps (transposed GEMM)",
            op: conv(3, 1, 1),
            ins: vec![
                In::Runtime(vec![1, 64, 7, 7]),
                cst(rng, &[128, 64, 3, 3]),
                cst(rng, &[128]),
            ],
            halved: vec![1],
            tolerance: exact,
        },
        Case {
            name: "Winograd F(4x4) conv",
            op: conv(3, 1, 1),
            ins: vec![
                In::Runtime(vec![1, 8, 20, 20]),
                cst(rng, &[16, 8, 3, 3]),
                cst(rng, &[16]),
            ],
            halved: vec![1],
            tolerance: winograd,
        },
        Case {
            name: "Winograd F(2x2) conv on 8x8 (whole-plane kernels on AVX-512)",
            op: conv(3, 1, 1),
            ins: vec![
                In::Runtime(vec![1, 8, 8, 8]),
                cst(rng, &[20, 8, 3, 3]),
                cst(rng, &[20]),
            ],
            halved: vec![1],
            tolerance: winograd,
        },
        Case {
            name: "Gather from a halved 74 KB table",
            op: Op::Gather { axis: 0 },
            ins: vec![In::Const(table), In::Const(indices)],
            halved: vec![0],
            tolerance: 0.0,
        },
        Case {
            name: "Gather from a small table (kept float32)",
            op: Op::Gather { axis: 0 },
            ins: vec![In::Const(small_table), In::Const(small_indices)],
            halved: vec![],
            tolerance: 0.0,
        },
    ]
}

/// The host, every x86-64 kernel family it runs (the others are compiled only), and
/// aarch64 under qemu when the cross toolchain is there.
#[test]
fn fp16_weights_match_the_interpreter_on_rounded_weights() {
    let mut rng = Rng::new(0x05ee_df16);
    let mut failures = vec![];
    let mut total = 0;
    for case in cases(&mut rng) {
        let (g, inputs, rounded) = build(&case, &mut rng);
        let expected = nnc::interp::run_graph(&rounded, &inputs).expect("interpreter");
        let mut targets = vec![("host", Target::host())];
        if Arch::host() == Arch::X86_64 {
            for cpu in ["baseline", "x86-64-v3", "x86-64-v4"] {
                let target = Target::new(Arch::X86_64, Some(cpu)).expect("x86-64 target");
                if tools::host_runs(cpu) {
                    targets.push((cpu, target));
                } else if let Err(e) = compile_graph(&g, &options(target)) {
                    failures.push(format!("{} ({cpu}): compile: {e}", case.name));
                }
            }
        }
        let mut results = vec![];
        for (name, target) in targets {
            let got = Compiled::with_options(&g, &options(target)).and_then(|c| c.run(&g, &inputs));
            results.push((name, got));
        }
        match aarch64_harness() {
            Some(h) => {
                let target = Target::new(Arch::Aarch64, None).expect("aarch64 target");
                results.push((
                    "aarch64",
                    run_on_aarch64_with(h, &g, &inputs, &options(target)),
                ));
            }
            None => {
                let target = Target::new(Arch::Aarch64, None).expect("aarch64 target");
                if let Err(e) = compile_graph(&g, &options(target)) {
                    failures.push(format!("{} (aarch64): compile: {e}", case.name));
                }
            }
        }
        for (target, got) in results {
            total += 1;
            match got {
                Err(e) => failures.push(format!("{} ({target}): {e}", case.name)),
                Ok(got) => {
                    if let Err(e) = compare(&got[0], &expected[0], case.tolerance, Scale::Whole) {
                        failures.push(format!("{} ({target}): {e}", case.name));
                    }
                }
            }
        }
    }
    for f in &failures {
        eprintln!("FAIL {f}");
    }
    assert!(
        failures.is_empty(),
        "{} of {total} runs failed",
        failures.len()
    );
}

/// The artifact of a weight-heavy graph is about half its float32 size, and its
/// workspace grows by the expanded weights of the largest node.
#[test]
fn fp16_halves_the_weights_in_the_object() {
    let mut rng = Rng::new(7);
    let case = Case {
        name: "MatMul 256x512",
        op: Op::MatMul(MatMulAttrs::default()),
        ins: vec![In::Runtime(vec![1, 256]), cst(&mut rng, &[256, 512])],
        halved: vec![1],
        tolerance: 0.0,
    };
    let (g, _, _) = build(&case, &mut rng);
    let f32_opts = CompileOptions {
        weights: WeightFormat::F32,
        ..options(Target::host())
    };
    let full = compile_graph(&g, &f32_opts).expect("float32 compile");
    let half = compile_graph(&g, &options(Target::host())).expect("fp16 compile");
    let weights = 256 * 512 * 4;
    assert!(
        full.object.len() > weights,
        "float32 object holds the weights"
    );
    assert!(
        half.object.len() < full.object.len() - weights / 2 + weights / 8,
        "fp16 object {} bytes vs float32 {} bytes",
        half.object.len(),
        full.object.len()
    );
    assert!(half.arena_size >= full.arena_size + weights);
}
