//! QuantizeLinear, DequantizeLinear, MatMulInteger and ConvInteger code generation:
//! one-node graphs over values spanning the whole 8-bit ranges (so the int16 widening
//! and the zero-point arithmetic see their extremes), compiled for the host, every x86-64
//! kernel family it runs, and aarch64 under qemu, compared with the interpreter exactly
//! (integers) or to the last float32 bit (dequantized values).

#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use nnc::codegen::{compile_graph, Arch, CompileOptions, Target};
use nnc::ir::{DType, Graph, Node, Tensor};
use nnc::ops::{infer_types, Activation, ConvAttrs, Op, PlaneLayout, Requantize};
use runner::{aarch64_harness, run_on_aarch64_with, Compiled};

/// An operand: a runtime input or a constant, with its values; or omitted.
enum In {
    Runtime(Tensor),
    Const(Tensor),
    Omitted,
}

/// `n` values cycling through the whole range of `dtype` (8-bit), scrambled.
fn full_range(dtype: DType, shape: &[usize], seed: usize) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<i64> = (0..n)
        .map(|i| ((i * 97 + seed * 31 + 13) % 256) as i64)
        .map(|u| if dtype == DType::I8 { u - 128 } else { u })
        .collect();
    Tensor::from_vec(shape, v).cast(dtype)
}

fn ints(dtype: DType, shape: &[usize], v: Vec<i64>) -> Tensor {
    Tensor::from_vec(shape, v).cast(dtype)
}

fn floats(shape: &[usize], v: Vec<f32>) -> Tensor {
    Tensor::from_vec(shape, v)
}

fn build(op: &Op, ins: &[In]) -> (Graph, Vec<Tensor>) {
    let mut g = Graph::default();
    let mut inputs = vec![];
    let mut node_inputs = vec![];
    let mut types = vec![];
    for (i, input) in ins.iter().enumerate() {
        match input {
            In::Runtime(t) => {
                let id = g.add_value(format!("in{i}"), t.ty(), None);
                g.inputs.push(id);
                inputs.push(t.clone());
                node_inputs.push(Some(id));
                types.push(Some(t.ty()));
            }
            In::Const(t) => {
                node_inputs.push(Some(g.add_value(format!("w{i}"), t.ty(), Some(t.clone()))));
                types.push(Some(t.ty()));
            }
            In::Omitted => {
                node_inputs.push(None);
                types.push(None);
            }
        }
    }
    let out_ty = infer_types(op, &types).expect("shape inference").remove(0);
    let out = g.add_value("out".into(), out_ty, None);
    g.outputs.push(out);
    g.nodes.push(Node {
        name: "node".into(),
        onnx_op: op.name(),
        op: op.clone(),
        inputs: node_inputs,
        outputs: vec![out],
    });
    (g, inputs)
}

fn options(target: Target) -> CompileOptions {
    CompileOptions {
        target,
        prefix: String::new(),
        weights: Default::default(),
        kernels: Default::default(),
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

/// nnc's INT8 conv attributes and the plane layout it reads from `[N, C, H, W]`.
fn conv_u8s8_attrs(
    x_shape: [usize; 4],
    kernel: usize,
    stride: usize,
    pad: usize,
    group: usize,
    activation: Activation,
) -> (ConvAttrs, PlaneLayout) {
    let conv = ConvAttrs {
        kernel: vec![kernel; 2],
        strides: vec![stride; 2],
        pads: vec![pad; 4],
        dilations: vec![1; 2],
        group,
        activation,
    };
    let planes = PlaneLayout::for_conv(&conv, &x_shape).expect("a plane layout");
    (conv, planes)
}

/// A `ConvU8S8` case over full-range planes and weights: maps, float32 output scale
/// and bias per map, and an optional residual.
#[allow(clippy::too_many_arguments)]
fn conv_u8s8_case(
    x_shape: [usize; 4],
    maps: usize,
    kernel: usize,
    stride: usize,
    pad: usize,
    depthwise: bool,
    activation: Activation,
    residual: bool,
    seed: usize,
) -> (Op, Vec<In>) {
    let group = if depthwise { x_shape[1] } else { 1 };
    let (conv, planes) = conv_u8s8_attrs(x_shape, kernel, stride, pad, group, activation);
    let w_channels = if depthwise { 1 } else { x_shape[1] };
    let op = Op::ConvU8S8 {
        conv: conv.clone(),
        planes: planes.clone(),
        requantize: None,
    };
    let out_h = (x_shape[2] + 2 * pad - kernel) / stride + 1;
    let out_w = (x_shape[3] + 2 * pad - kernel) / stride + 1;
    let out = [x_shape[0], maps, out_h, out_w];
    let bias: Vec<i64> = (0..maps as i64).map(|m| (m * 7919 - 20000) * 3).collect();
    let scale: Vec<f32> = (0..maps).map(|m| 1e-4 * (m as f32 + 1.5)).collect();
    let res: Vec<f32> = (0..out.iter().product::<usize>())
        .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.01)
        .collect();
    let ins = vec![
        In::Runtime(full_range(DType::U8, &planes.shape(x_shape[0]), seed)),
        In::Const(full_range(
            DType::I8,
            &[maps, w_channels, kernel, kernel],
            seed + 1,
        )),
        In::Const(ints(DType::I32, &[maps], bias)),
        if residual {
            In::Runtime(floats(&out, res))
        } else {
            In::Omitted
        },
        In::Const(floats(&[maps], scale)),
        In::Const(ints(DType::U8, &[], vec![(seed * 41 % 256) as i64])),
    ];
    (op, ins)
}

/// [`conv_u8s8_case`] requantizing into the planes of a next convolution (`kernel`,
/// `stride`, `pad`); for stride 1 both plane layouts get the same columns, as the
/// requantize pass gives them.
#[allow(clippy::too_many_arguments)]
fn conv_u8s8_requantize_case(
    x_shape: [usize; 4],
    maps: usize,
    kernel: usize,
    depthwise: bool,
    activation: Activation,
    residual: bool,
    seed: usize,
    next: (usize, usize, usize),
) -> (Op, Vec<In>) {
    let (op, mut ins) = conv_u8s8_case(
        x_shape,
        maps,
        kernel,
        1,
        kernel / 2,
        depthwise,
        activation,
        residual,
        seed,
    );
    let Op::ConvU8S8 { conv, planes, .. } = op else {
        unreachable!()
    };
    let out_h = x_shape[2] + 2 * (kernel / 2) - kernel + 1;
    let out_w = x_shape[3] + 2 * (kernel / 2) - kernel + 1;
    let (nk, ns, np) = next;
    let (_, mut next_planes) = conv_u8s8_attrs(
        [x_shape[0], maps, out_h, out_w],
        nk,
        ns,
        np,
        1,
        Activation::None,
    );
    let mut planes = planes;
    if ns == 1 {
        let cols = planes.cols.max(next_planes.cols);
        planes = planes.with_cols(cols);
        next_planes = next_planes.with_cols(cols);
    }
    ins[0] = In::Runtime(full_range(DType::U8, &planes.shape(x_shape[0]), seed));
    let op = Op::ConvU8S8 {
        conv,
        planes,
        requantize: Some(Requantize {
            layout: next_planes,
            inv_scale: 37.0,
            zero_point: 9,
        }),
    };
    (op, ins)
}

/// A `QuantizeToPlanes` case: values around the 8-bit range with ties, saturation and
/// a NaN.
fn quantize_planes_case(
    x_shape: [usize; 4],
    kernel: usize,
    stride: usize,
    pad: usize,
) -> (Op, Vec<In>) {
    let (_, planes) = conv_u8s8_attrs(x_shape, kernel, stride, pad, 1, Activation::None);
    let n: usize = x_shape.iter().product();
    let x: Vec<f32> = (0..n)
        .map(|i| match i % 23 {
            0 => f32::NAN,
            1 => 1e9,
            2 => -1e9,
            k => (i * 31 % 613) as f32 * 0.25 - 80.0 + k as f32 * 0.5,
        })
        .collect();
    let ins = vec![
        In::Runtime(floats(&x_shape, x)),
        In::Const(floats(&[], vec![2.0])),
        In::Const(ints(DType::U8, &[], vec![77])),
    ];
    (Op::QuantizeToPlanes(planes), ins)
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
                        In::Runtime(full_range(DType::U8, &[1, 6, 7, 9], 28)),
                        In::Const(ints(DType::U8, &[], vec![201])),
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
                In::Runtime(full_range(U8, &[5, 37], 0)),
                In::Const(full_range(I8, &[37, 13], 1)),
                In::Const(ints(U8, &[], vec![200])),
                In::Const(full_range(I8, &[13], 2)),
            ],
        ),
        (
            "MatMulInteger dot-product GEMM: u8 x const i8, K = 19 (A copied), const a_zp",
            Op::MatMulInteger,
            vec![
                In::Runtime(full_range(U8, &[6, 19], 30)),
                In::Const(full_range(I8, &[19, 13], 31)),
                In::Const(ints(U8, &[], vec![173])),
                In::Const(ints(I8, &[], vec![0])),
            ],
        ),
        (
            "MatMulInteger dot-product GEMM: batched A, K = 16 (read in place), N = 9",
            Op::MatMulInteger,
            vec![
                In::Runtime(full_range(U8, &[2, 3, 5, 16], 32)),
                In::Const(full_range(I8, &[16, 9], 33)),
                In::Omitted,
                In::Omitted,
            ],
        ),
        (
            "MatMulInteger i8 x runtime u8, batched A, per-row a_zp",
            Op::MatMulInteger,
            vec![
                In::Runtime(full_range(I8, &[2, 3, 9, 16], 3)),
                In::Runtime(full_range(U8, &[16, 8], 4)),
                In::Runtime(full_range(I8, &[9], 5)),
                In::Runtime(ints(U8, &[], vec![255])),
            ],
        ),
        (
            "MatMulInteger batched B broadcast over A, no zero points",
            Op::MatMulInteger,
            vec![
                In::Runtime(full_range(U8, &[4, 6], 6)),
                In::Runtime(full_range(U8, &[3, 6, 10], 7)),
                In::Omitted,
                In::Omitted,
            ],
        ),
        (
            "ConvInteger u8 x const i8 3x3 stride 2 pad 1, per-map w_zp",
            conv(3, 2, 1, 1, 1),
            vec![
                In::Runtime(full_range(U8, &[1, 3, 9, 11], 8)),
                In::Const(full_range(I8, &[8, 3, 3, 3], 9)),
                In::Const(ints(U8, &[], vec![128])),
                In::Const(full_range(I8, &[8], 10)),
            ],
        ),
        (
            "ConvInteger grouped, dilated, runtime i8 weights, batch 2",
            conv(3, 1, 0, 2, 2),
            vec![
                In::Runtime(full_range(I8, &[2, 4, 7, 7], 11)),
                In::Runtime(full_range(I8, &[6, 2, 3, 3], 12)),
                In::Runtime(ints(I8, &[], vec![-128])),
                In::Runtime(ints(I8, &[], vec![127])),
            ],
        ),
        // Constant weights that fit int8 after their zero point (none, or u8 − 128) are
        // stored as int8 and widened as they are loaded.
        (
            "MatMulInteger const i8 B stored as int8, K = 2·9 + 1",
            Op::MatMulInteger,
            vec![
                In::Runtime(full_range(U8, &[6, 19], 15)),
                In::Const(full_range(I8, &[19, 11], 16)),
                In::Runtime(ints(U8, &[], vec![3])),
                In::Omitted,
            ],
        ),
        (
            "ConvInteger const u8 weights minus 128 stored as int8",
            conv(3, 1, 1, 1, 1),
            vec![
                In::Runtime(full_range(I8, &[1, 5, 6, 7], 17)),
                In::Const(full_range(U8, &[9, 5, 3, 3], 18)),
                In::Omitted,
                In::Const(ints(U8, &[], vec![128])),
            ],
        ),
        (
            "QuantizeLinear per axis to u8: ties to even, saturation",
            Op::QuantizeLinear { axis: 1, to: U8 },
            vec![
                In::Runtime(floats(
                    &[2, 3, 4],
                    vec![
                        0.5, 1.5, 2.5, -0.5, 300.0, -300.0, 3.49, 7.0, 1e9, -1e9, 0.0, 2.0, -2.5,
                        254.5, 255.5, 100.25, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0, 0.0, -1.0,
                    ],
                )),
                In::Const(floats(&[3], vec![1.0, 0.5, 2.0])),
                In::Const(ints(U8, &[3], vec![0, 128, 255])),
            ],
        ),
        (
            "QuantizeLinear per tensor to i8",
            Op::QuantizeLinear { axis: 0, to: I8 },
            vec![
                In::Runtime(floats(
                    &[7],
                    vec![-1000.0, -0.75, -0.25, 0.25, 0.75, 12.5, 1000.0],
                )),
                In::Runtime(floats(&[], vec![0.5])),
                In::Runtime(ints(I8, &[], vec![-3])),
            ],
        ),
        (
            "DequantizeLinear per axis 0, i8",
            Op::DequantizeLinear { axis: 0 },
            vec![
                In::Runtime(full_range(I8, &[4, 3], 13)),
                In::Const(floats(&[4], vec![0.1, 0.02, 3.0, 1e-3])),
                In::Const(ints(I8, &[4], vec![-128, 0, 5, 127])),
            ],
        ),
        (
            "DequantizeLinear u8 without zero point",
            Op::DequantizeLinear { axis: 0 },
            vec![
                In::Runtime(full_range(U8, &[3, 5], 14)),
                In::Runtime(floats(&[], vec![0.037])),
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
        let (g, inputs) = build(&op, &ins);
        let expected = nnc::interp::run_graph(&g, &inputs).expect("interpreter");
        let mut targets = vec![("host", Target::host())];
        if Arch::host() == Arch::X86_64 {
            for cpu in ["baseline", "x86-64-v3", "x86-64-v4", "x86-64-v4+vnni"] {
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
        // Baseline (widening multiplies) and +i8mm (the dot-product tree folds to usdot).
        for (label, cpu) in [("aarch64", None), ("aarch64 +i8mm", Some("+i8mm"))] {
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
                Ok(got) if got[0] != expected[0] => failures.push(format!(
                    "{name} ({target}): {:?}\n  expected {:?}",
                    got[0].to_f64_vec(),
                    expected[0].to_f64_vec()
                )),
                Ok(_) => {}
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
