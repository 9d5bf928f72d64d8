//! QuantizeLinear, DequantizeLinear, MatMulInteger and ConvInteger code generation:
//! one-node graphs over values spanning the whole 8-bit ranges (so the int16 widening
//! and the zero-point arithmetic see their extremes), compiled for the host, every x86-64
//! kernel family it runs, and aarch64 under qemu, compared with the interpreter exactly
//! (integers) or to the last float32 bit (dequantized values).

#[path = "common/graphs.rs"]
mod graphs;
#[path = "common/quant_cases.rs"]
mod quant_cases;
#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use graphs::{compare, one_node, In, Scale};
use nnc::codegen::{compile_graph, Arch, CompileOptions, Target};
use nnc::ir::{DType, Tensor};
use nnc::ops::{Activation, ConvAttrs, Op};
use quant_cases::{
    conv_u8s8_attrs, conv_u8s8_case, conv_u8s8_pair_extremes_case, conv_u8s8_requantize_case,
    floats, full_range, ints, narrow_weights, quantize_planes_case,
};
use runner::{aarch64_harness, run_on_aarch64_env, run_on_aarch64_with, Compiled};

fn options(target: Target) -> CompileOptions {
    CompileOptions {
        target,
        prefix: String::new(),
        weights: Default::default(),
        kernels: Default::default(),
        index_checks: Default::default(),
    }
}

fn conv(kernel: usize, stride: usize, pad: usize, dilation: usize, group: usize) -> Op {
    Op::ConvInteger(ConvAttrs {
        kernel: vec![kernel; 2],
        strides: vec![stride; 2],
        pads: vec![pad; 4],
        dilations: vec![dilation; 2],
        group,
        activation: Activation::None,
    })
}

fn cases() -> Vec<(&'static str, Op, Vec<In>)> {
    let relu = Activation::Relu;
    let clip = Activation::Clip {
        min: -0.5,
        max: 2.0,
    };
    let none = Activation::None;
    let u8s8 = [
        (
            "ConvU8S8 3x3 s1 p1, 10 channels (3 quads), 11 maps, residual, relu",
            conv_u8s8_case([1, 10, 5, 19], 11, 3, 1, 1, false, relu, true, 20),
        ),
        (
            "ConvU8S8 1x1 compact, 8 channels, 9 maps, clip, batch 2",
            conv_u8s8_case([2, 8, 3, 20], 9, 1, 1, 0, false, clip, false, 21),
        ),
        (
            "ConvU8S8 7x7 s2 p3 on 3 channels",
            conv_u8s8_case([1, 3, 13, 13], 8, 7, 2, 3, false, none, false, 22),
        ),
        (
            "ConvU8S8 depthwise 3x3 s2 p1, 12 maps",
            conv_u8s8_case([1, 12, 9, 10], 12, 3, 2, 1, true, relu, false, 23),
        ),
        (
            "ConvU8S8 depthwise 3x3 s1 p1, 5 maps, residual",
            conv_u8s8_case([1, 5, 6, 17], 5, 3, 1, 1, true, none, true, 24),
        ),
        (
            "ConvU8S8 3x3 requantized for a 3x3 pad 1, 6 maps, residual, relu",
            conv_u8s8_requantize_case([1, 5, 7, 19], 6, 3, false, relu, true, 25, (3, 1, 1)),
        ),
        (
            "ConvU8S8 1x1 requantized for a 3x3 stride 2 pad 1 (scattered), 11 maps, batch 2",
            conv_u8s8_requantize_case([2, 8, 9, 10], 11, 1, false, clip, false, 26, (3, 2, 1)),
        ),
        (
            "ConvU8S8 depthwise requantized for a 1x1, 12 maps, residual",
            conv_u8s8_requantize_case([1, 12, 6, 21], 12, 3, true, none, true, 27, (1, 1, 0)),
        ),
        (
            "ConvU8S8 3x3 s1 p1 weights within ±64, 10 channels, 11 maps, residual, relu",
            narrow_weights(conv_u8s8_case(
                [1, 10, 5, 19],
                11,
                3,
                1,
                1,
                false,
                relu,
                true,
                31,
            )),
        ),
        (
            "ConvU8S8 1x1 compact weights within ±64, 8 channels, 9 maps, batch 2",
            narrow_weights(conv_u8s8_case(
                [2, 8, 3, 37],
                9,
                1,
                1,
                0,
                false,
                clip,
                false,
                32,
            )),
        ),
        (
            "ConvU8S8 depthwise 3x3 s2 p1 weights within ±64, 12 maps",
            narrow_weights(conv_u8s8_case(
                [1, 12, 9, 10],
                12,
                3,
                2,
                1,
                true,
                relu,
                false,
                33,
            )),
        ),
        (
            "ConvU8S8 3x3 weights within ±64 requantized for a 3x3 pad 1, residual",
            narrow_weights(conv_u8s8_requantize_case(
                [1, 5, 7, 19],
                6,
                3,
                false,
                relu,
                true,
                34,
                (3, 1, 1),
            )),
        ),
        (
            "ConvU8S8 1x1 pair sums at their largest (planes 255, weights ±64)",
            conv_u8s8_pair_extremes_case(),
        ),
        (
            "QuantizeToPlanes stride 1 pad 1, 6 channels, 19 columns, batch 2",
            quantize_planes_case([2, 6, 5, 19], 3, 1, 1),
        ),
        (
            "QuantizeToPlanes stride 2 pad 3, 3 channels, odd rows and columns",
            quantize_planes_case([1, 3, 7, 21], 7, 2, 3),
        ),
        (
            "PackPlanes stride 2 pad 3, 6 channels (a QDQ model's uint8 input)",
            {
                let (_, planes) = conv_u8s8_attrs([1, 6, 7, 9], 7, 2, 3, 1, Activation::None);
                (
                    Op::PackPlanes(planes),
                    vec![
                        In::Given(full_range(DType::U8, &[1, 6, 7, 9], 28)),
                        In::GivenConst(ints(DType::U8, &[], vec![201])),
                    ],
                )
            },
        ),
        (
            "QuantizeToPlanes stride 2 pad 1 (even), 4 channels",
            quantize_planes_case([1, 4, 6, 34], 3, 2, 1),
        ),
    ];
    let mut out: Vec<(&'static str, Op, Vec<In>)> = u8s8
        .into_iter()
        .map(|(name, (op, ins))| (name, op, ins))
        .collect();
    out.extend(legacy_cases());
    out
}

fn legacy_cases() -> Vec<(&'static str, Op, Vec<In>)> {
    use DType::{I8, U8};
    vec![
        (
            "MatMulInteger u8 x const i8, odd K, N = 4·3 + 1, per-column b_zp",
            Op::MatMulInteger,
            vec![
                In::Given(full_range(U8, &[5, 37], 0)),
                In::GivenConst(full_range(I8, &[37, 13], 1)),
                In::GivenConst(ints(U8, &[], vec![200])),
                In::GivenConst(full_range(I8, &[13], 2)),
            ],
        ),
        (
            "MatMulInteger dot-product GEMM: u8 x const i8, K = 19 (A copied), const a_zp",
            Op::MatMulInteger,
            vec![
                In::Given(full_range(U8, &[6, 19], 30)),
                In::GivenConst(full_range(I8, &[19, 13], 31)),
                In::GivenConst(ints(U8, &[], vec![173])),
                In::GivenConst(ints(I8, &[], vec![0])),
            ],
        ),
        (
            "MatMulInteger dot-product GEMM: batched A, K = 16 (read in place), N = 9",
            Op::MatMulInteger,
            vec![
                In::Given(full_range(U8, &[2, 3, 5, 16], 32)),
                In::GivenConst(full_range(I8, &[16, 9], 33)),
                In::Omitted,
                In::Omitted,
            ],
        ),
        (
            "MatMulInteger i8 x runtime u8, batched A, per-row a_zp",
            Op::MatMulInteger,
            vec![
                In::Given(full_range(I8, &[2, 3, 9, 16], 3)),
                In::Given(full_range(U8, &[16, 8], 4)),
                In::Given(full_range(I8, &[9], 5)),
                In::Given(ints(U8, &[], vec![255])),
            ],
        ),
        (
            "MatMulInteger batched B broadcast over A, no zero points",
            Op::MatMulInteger,
            vec![
                In::Given(full_range(U8, &[4, 6], 6)),
                In::Given(full_range(U8, &[3, 6, 10], 7)),
                In::Omitted,
                In::Omitted,
            ],
        ),
        (
            "ConvInteger u8 x const i8 3x3 stride 2 pad 1, per-map w_zp",
            conv(3, 2, 1, 1, 1),
            vec![
                In::Given(full_range(U8, &[1, 3, 9, 11], 8)),
                In::GivenConst(full_range(I8, &[8, 3, 3, 3], 9)),
                In::GivenConst(ints(U8, &[], vec![128])),
                In::GivenConst(full_range(I8, &[8], 10)),
            ],
        ),
        (
            "ConvInteger grouped, dilated, runtime i8 weights, batch 2",
            conv(3, 1, 0, 2, 2),
            vec![
                In::Given(full_range(I8, &[2, 4, 7, 7], 11)),
                In::Given(full_range(I8, &[6, 2, 3, 3], 12)),
                In::Given(ints(I8, &[], vec![-128])),
                In::Given(ints(I8, &[], vec![127])),
            ],
        ),
        // Constant weights that fit int8 after their zero point (none, or u8 − 128) are
        // stored as int8 and widened as they are loaded.
        (
            "MatMulInteger const i8 B stored as int8, K = 2·9 + 1",
            Op::MatMulInteger,
            vec![
                In::Given(full_range(U8, &[6, 19], 15)),
                In::GivenConst(full_range(I8, &[19, 11], 16)),
                In::Given(ints(U8, &[], vec![3])),
                In::Omitted,
            ],
        ),
        (
            "ConvInteger const u8 weights minus 128 stored as int8",
            conv(3, 1, 1, 1, 1),
            vec![
                In::Given(full_range(I8, &[1, 5, 6, 7], 17)),
                In::GivenConst(full_range(U8, &[9, 5, 3, 3], 18)),
                In::Omitted,
                In::GivenConst(ints(U8, &[], vec![128])),
            ],
        ),
        (
            "QuantizeLinear per axis to u8: ties to even, saturation",
            Op::QuantizeLinear { axis: 1, to: U8 },
            vec![
                In::Given(floats(
                    &[2, 3, 4],
                    vec![
                        0.5, 1.5, 2.5, -0.5, 300.0, -300.0, 3.49, 7.0, 1e9, -1e9, 0.0, 2.0, -2.5,
                        254.5, 255.5, 100.25, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0, 0.0, -1.0,
                    ],
                )),
                In::GivenConst(floats(&[3], vec![1.0, 0.5, 2.0])),
                In::GivenConst(ints(U8, &[3], vec![0, 128, 255])),
            ],
        ),
        (
            "QuantizeLinear per tensor to i8",
            Op::QuantizeLinear { axis: 0, to: I8 },
            vec![
                In::Given(floats(
                    &[7],
                    vec![-1000.0, -0.75, -0.25, 0.25, 0.75, 12.5, 1000.0],
                )),
                In::Given(floats(&[], vec![0.5])),
                In::Given(ints(I8, &[], vec![-3])),
            ],
        ),
        (
            "DequantizeLinear per axis 0, i8",
            Op::DequantizeLinear { axis: 0 },
            vec![
                In::Given(full_range(I8, &[4, 3], 13)),
                In::GivenConst(floats(&[4], vec![0.1, 0.02, 3.0, 1e-3])),
                In::GivenConst(ints(I8, &[4], vec![-128, 0, 5, 127])),
            ],
        ),
        (
            "DequantizeLinear u8 without zero point",
            Op::DequantizeLinear { axis: 0 },
            vec![
                In::Given(full_range(U8, &[3, 5], 14)),
                In::Given(floats(&[], vec![0.037])),
                In::Omitted,
            ],
        ),
    ]
}

#[test]
fn quantized_ops_match_the_interpreter_exactly() {
    let mut failures = vec![];
    let mut runs = 0;
    for (name, op, ins) in cases() {
        let (g, inputs) = one_node(op, ins, 0);
        let expected = nnc::interp::run_graph(&g, &inputs).expect("interpreter");
        let mut targets = vec![("host", Target::host())];
        if Arch::host() == Arch::X86_64 {
            for cpu in [
                "baseline",
                "x86-64-v3",
                "x86-64-v3+avxvnni",
                "x86-64-v4",
                "x86-64-v4+vnni",
            ] {
                let target = Target::new(Arch::X86_64, Some(cpu)).expect("x86-64 target");
                if tools::host_runs(cpu) {
                    targets.push((cpu, target));
                } else if let Err(e) = compile_graph(&g, &options(target)) {
                    failures.push(format!("{name} ({cpu}): compile: {e}"));
                }
            }
        }
        let mut results: Vec<(&str, Result<Vec<Tensor>, String>)> = targets
            .into_iter()
            .map(|(t, target)| {
                let r =
                    Compiled::with_options(&g, &options(target)).and_then(|c| c.run(&g, &inputs));
                (t, r)
            })
            .collect();
        // Baseline (widening multiplies), +dotprod (sdot on flipped activation bytes)
        // and +i8mm (usdot).
        for (label, cpu) in [
            ("aarch64", None),
            ("aarch64 +dotprod", Some("+dotprod")),
            ("aarch64 +i8mm", Some("+i8mm")),
        ] {
            let arm = Target::new(Arch::Aarch64, cpu).expect("aarch64 target");
            match aarch64_harness() {
                Some(h) => {
                    results.push((label, run_on_aarch64_with(h, &g, &inputs, &options(arm))))
                }
                None => {
                    if let Err(e) = compile_graph(&g, &options(arm)) {
                        failures.push(format!("{name} ({label}): compile: {e}"));
                    }
                }
            }
        }
        for (target, got) in results {
            runs += 1;
            match got {
                Err(e) => failures.push(format!("{name} ({target}): {e}")),
                Ok(got) => {
                    if let Err(e) = compare(&got[0], &expected[0], 0.0, Scale::Whole) {
                        failures.push(format!(
                            "{name} ({target}): {e}\n  got {:?}\n  expected {:?}",
                            got[0].to_f64_vec(),
                            expected[0].to_f64_vec()
                        ));
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
        "{} of {runs} runs failed",
        failures.len()
    );
}

/// The default aarch64 library carries `+i8mm`, `+dotprod` and `armv8` variants and
/// runs the first the CPU has: under qemu as a Cortex-A53 (neither), a Cortex-A76
/// (`sdot`) and `max` (`usdot`), the integers are the interpreter's on each. A `+i8mm`
/// library on the Cortex-A53 returns `NNC_ERR_UNSUPPORTED_CPU` instead of stopping on
/// an illegal instruction.
#[test]
fn the_default_aarch64_library_runs_its_variants_with_identical_integers() {
    let Some(h) = aarch64_harness() else { return };
    let relu = Activation::Relu;
    let cases = [
        conv_u8s8_requantize_case([1, 5, 7, 19], 6, 3, false, relu, true, 50, (3, 1, 1)),
        conv_u8s8_case([1, 10, 5, 19], 11, 3, 1, 1, false, relu, true, 51),
    ];
    let default = Target::new(Arch::Aarch64, None).expect("aarch64 target");
    assert_eq!(default.cpu, "+i8mm,+dotprod,armv8");
    for (i, (op, ins)) in cases.into_iter().enumerate() {
        let (g, inputs) = one_node(op, ins, 0);
        let expected = nnc::interp::run_graph(&g, &inputs).expect("interpreter");
        for cpu in ["cortex-a53", "cortex-a76", "max"] {
            let env = [("QEMU_CPU", cpu)];
            let got = run_on_aarch64_env(h, &g, &inputs, &options(default.clone()), &env)
                .unwrap_or_else(|e| panic!("case {i} on {cpu}: {e}"));
            compare(&got[0], &expected[0], 0.0, Scale::Whole)
                .unwrap_or_else(|e| panic!("case {i} on {cpu}: {e}"));
        }
        let i8mm = Target::new(Arch::Aarch64, Some("+i8mm")).expect("aarch64 target");
        let env = [("QEMU_CPU", "cortex-a53")];
        match run_on_aarch64_env(h, &g, &inputs, &options(i8mm), &env) {
            Ok(_) => panic!("case {i}: a +i8mm library ran on a Cortex-A53"),
            Err(e) => assert!(e.contains("NNC_ERR_UNSUPPORTED_CPU"), "case {i}: {e}"),
        }
    }
}
