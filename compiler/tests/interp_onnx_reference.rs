//! Cross-checks the interpreter against ONNX's own reference implementation
//! (`onnx.reference.ReferenceEvaluator`, numpy based): every case is written out as raw
//! little-endian tensors plus a manifest, a small Python script builds a one-node model
//! per case with `onnx.helper`, runs it, and writes the outputs back.
//!
//! Without python3 + onnx the test prints `SKIP` — unless `NNC_TEST_REQUIRE_TOOLS=1`,
//! where a missing tool is a failure.

#[path = "common/graphs.rs"]
mod graphs;

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use graphs::Rng;
use nnc::interp::{cast, eval_op};
use nnc::ir::{DType, Element, Tensor, TensorType};
use nnc::ops::*;

/// Reads the manifest (a Python literal), evaluates every case, writes `<out>.bin` and
/// `<out>.txt` (dtype, shape) or `<out>.err`.
const RUNNER: &str = r#"
import ast, sys
import numpy as np
from onnx import helper, TensorProto
from onnx.reference import ReferenceEvaluator

for case in ast.literal_eval(open(sys.argv[1]).read()):
    try:
        names, feeds, infos = [], {}, []
        for j, spec in enumerate(case["inputs"]):
            if spec is None:
                names.append("")
                continue
            dtype, shape, path = spec
            array = np.fromfile(path, dtype=np.dtype(dtype)).reshape(shape)
            name = "in%d" % j
            names.append(name)
            feeds[name] = array
            infos.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape))
        node = helper.make_node(case["op"], names, ["out"], **case["attrs"])
        out_info = helper.make_tensor_value_info("out", TensorProto.UNDEFINED, None)
        graph = helper.make_graph([node], "case", infos, [out_info])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case["opset"])])
        out = np.ascontiguousarray(np.asarray(ReferenceEvaluator(model).run(None, feeds)[0]))
        out.tofile(case["out"] + ".bin")
        with open(case["out"] + ".txt", "w") as f:
            f.write(out.dtype.name + "\n" + " ".join(str(d) for d in out.shape))
    except Exception as e:
        with open(case["out"] + ".err", "w") as f:
            f.write(repr(e))
"#;

/// One op evaluated both ways. The ONNX node may take more inputs than the IR op (axes,
/// pads, sizes ... are attributes in the IR).
struct Case {
    name: String,
    onnx_op: &'static str,
    /// Python dict literal of the node's attributes.
    attrs: String,
    opset: i64,
    onnx_inputs: Vec<Option<Tensor>>,
    op: Op,
    inputs: Vec<Option<Tensor>>,
    /// Allowed |got − want| / (1 + |want|).
    tol: f64,
}

fn case(
    name: &str,
    onnx_op: &'static str,
    attrs: &str,
    op: Op,
    inputs: Vec<Option<Tensor>>,
) -> Case {
    Case {
        name: name.to_string(),
        onnx_op,
        attrs: attrs.to_string(),
        opset: 19,
        onnx_inputs: inputs.clone(),
        op,
        inputs,
        tol: 2e-6,
    }
}

impl Case {
    fn opset(mut self, opset: i64) -> Case {
        self.opset = opset;
        self
    }
    fn tol(mut self, tol: f64) -> Case {
        self.tol = tol;
        self
    }
    /// The ONNX node's inputs when they differ from the IR op's.
    fn onnx(mut self, inputs: Vec<Option<Tensor>>) -> Case {
        self.onnx_inputs = inputs;
        self
    }
}

fn t<T: Element>(shape: &[usize], data: &[T]) -> Tensor {
    Tensor::from_vec(shape, data.to_vec())
}

fn i64s(v: &[i64]) -> Option<Tensor> {
    Some(t(&[v.len()], v))
}

/// Deterministic values in [-scale, scale) on a 1/64 grid.
fn data(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| rng.on_grid(64) as f32 * scale).collect()
}

fn f32s(shape: &[usize], seed: u64, scale: f32) -> Tensor {
    t(shape, &data(shape.iter().product(), seed, scale))
}

fn python_with_onnx() -> Option<&'static str> {
    let ok = Command::new("python3")
        .args(["-c", "import onnx.reference, numpy"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    ok.then_some("python3")
}

// ---------------------------------------------------------------------------------------
// The cases

fn unary_cases(cases: &mut Vec<Case>) {
    let mut values = data(40, 1, 4.0);
    values.extend([0.0, -0.0, 1e-8, -1e-8, 20.0, -20.0, 80.0, -80.0]);
    let x = t(&[values.len()], &values);
    let positive = t(
        &[values.len()],
        &values.iter().map(|v| v.abs() + 0.01).collect::<Vec<_>>(),
    );
    let unit = t(&[40], &data(40, 2, 0.99));
    let list: Vec<(&str, &str, UnaryOp, &Tensor, i64)> = vec![
        ("Sigmoid", "{}", UnaryOp::Sigmoid, &x, 19),
        ("Tanh", "{}", UnaryOp::Tanh, &x, 19),
        ("Erf", "{}", UnaryOp::Erf, &x, 19),
        ("Gelu", "{}", UnaryOp::Gelu { tanh: false }, &x, 20),
        (
            "Gelu",
            "{'approximate': 'tanh'}",
            UnaryOp::Gelu { tanh: true },
            &x,
            20,
        ),
        ("Softplus", "{}", UnaryOp::Softplus, &x, 19),
        ("Softsign", "{}", UnaryOp::Softsign, &x, 19),
        ("Mish", "{}", UnaryOp::Mish, &x, 19),
        ("HardSwish", "{}", UnaryOp::HardSwish, &x, 19),
        (
            "HardSigmoid",
            "{'alpha': 0.3, 'beta': 0.4}",
            UnaryOp::HardSigmoid {
                alpha: 0.3,
                beta: 0.4,
            },
            &x,
            19,
        ),
        ("Elu", "{'alpha': 0.7}", UnaryOp::Elu { alpha: 0.7 }, &x, 19),
        (
            "Selu",
            "{}",
            UnaryOp::Selu {
                alpha: 1.673_263_2,
                gamma: 1.050_701,
            },
            &x,
            19,
        ),
        (
            "Celu",
            "{'alpha': 1.3}",
            UnaryOp::Celu { alpha: 1.3 },
            &x,
            19,
        ),
        (
            "LeakyRelu",
            "{'alpha': 0.1}",
            UnaryOp::LeakyRelu { alpha: 0.1 },
            &x,
            19,
        ),
        (
            "ThresholdedRelu",
            "{'alpha': 0.5}",
            UnaryOp::ThresholdedRelu { alpha: 0.5 },
            &x,
            19,
        ),
        ("Relu", "{}", UnaryOp::Relu, &x, 19),
        ("Round", "{}", UnaryOp::Round, &x, 19),
        ("Sign", "{}", UnaryOp::Sign, &x, 19),
        ("Exp", "{}", UnaryOp::Exp, &x, 19),
        ("Log", "{}", UnaryOp::Log, &positive, 19),
        ("Sqrt", "{}", UnaryOp::Sqrt, &positive, 19),
        ("Reciprocal", "{}", UnaryOp::Reciprocal, &positive, 19),
        ("Sin", "{}", UnaryOp::Sin, &x, 19),
        ("Atan", "{}", UnaryOp::Atan, &x, 19),
        ("Asin", "{}", UnaryOp::Asin, &unit, 19),
        ("Atanh", "{}", UnaryOp::Atanh, &unit, 19),
        ("Asinh", "{}", UnaryOp::Asinh, &x, 19),
    ];
    for (name, attrs, op, input, opset) in list {
        cases.push(
            case(
                &format!("{name} {attrs}"),
                name,
                attrs,
                Op::Unary(op),
                vec![Some(input.clone())],
            )
            .opset(opset),
        );
    }
    let x64 = cast(&x, DType::F64);
    // The reference evaluates erf with math.erf but returns float32 (np.vectorize with
    // otypes="f"), so f64 results can only be compared to f32 precision.
    cases.push(
        case(
            "Gelu f64",
            "Gelu",
            "{}",
            Op::Unary(UnaryOp::Gelu { tanh: false }),
            vec![Some(x64.clone())],
        )
        .opset(20)
        .tol(1e-7),
    );
    cases.push(
        case(
            "Erf f64",
            "Erf",
            "{}",
            Op::Unary(UnaryOp::Erf),
            vec![Some(x64)],
        )
        .tol(1e-7),
    );
    let clip = Op::Unary(UnaryOp::Clip {
        min: -0.5,
        max: 1.5,
    });
    cases.push(
        case("Clip", "Clip", "{}", clip, vec![Some(x.clone())]).onnx(vec![
            Some(x.clone()),
            Some(Tensor::scalar(-0.5f32)),
            Some(Tensor::scalar(1.5f32)),
        ]),
    );
}

fn binary_cases(cases: &mut Vec<Case>) {
    let a = f32s(&[3, 4], 3, 8.0);
    let b = t(&[4], &[1.5f32, -2.5, 3.0, -0.75]);
    for (fmod, attrs) in [(false, "{'fmod': 0}"), (true, "{'fmod': 1}")] {
        cases.push(case(
            "Mod float",
            "Mod",
            attrs,
            Op::Binary(BinaryOp::Mod { fmod }),
            vec![Some(a.clone()), Some(b.clone())],
        ));
        let ai = t(&[6], &[-7i32, 7, -7, 7, 13, -13]);
        let bi = t(&[6], &[3i32, 3, -3, -3, 5, 4]);
        cases.push(case(
            "Mod int",
            "Mod",
            attrs,
            Op::Binary(BinaryOp::Mod { fmod }),
            vec![Some(ai), Some(bi)],
        ));
    }
    let ai = t(&[2, 3], &[-7i64, 7, 100, -100, 5, i64::MIN + 1]);
    let bi = t(&[3], &[2i64, -3, 7]);
    cases.push(case(
        "Div int64",
        "Div",
        "{}",
        Op::Binary(BinaryOp::Div),
        vec![Some(ai), Some(bi)],
    ));
    let pos = t(&[6], &[0.5f32, 1.0, 2.0, 3.5, 10.0, 0.1]);
    let expo = t(&[6], &[2.0f32, -1.5, 0.5, 3.0, -2.0, 1.25]);
    cases.push(case(
        "Pow float",
        "Pow",
        "{}",
        Op::Binary(BinaryOp::Pow),
        vec![Some(pos.clone()), Some(expo)],
    ));
    let int_base = t(&[5], &[2i32, -3, 7, 0, 1]);
    let int_exp = t(&[5], &[10i32, 3, 2, 5, 0]);
    cases.push(case(
        "Pow int",
        "Pow",
        "{}",
        Op::Binary(BinaryOp::Pow),
        vec![Some(int_base), Some(int_exp)],
    ));
    cases.push(case(
        "Pow float^int",
        "Pow",
        "{}",
        Op::Binary(BinaryOp::Pow),
        vec![Some(pos), Some(t(&[1], &[3i64]))],
    ));
    let nan_a = t(&[4], &[1f32, f32::NAN, 3., -0.5]);
    let nan_b = t(&[4], &[2f32, 2., f32::NAN, -1.5]);
    cases.push(case(
        "Max NaN",
        "Max",
        "{}",
        Op::Binary(BinaryOp::Max),
        vec![Some(nan_a.clone()), Some(nan_b.clone())],
    ));
    cases.push(case(
        "Min NaN",
        "Min",
        "{}",
        Op::Binary(BinaryOp::Min),
        vec![Some(nan_a), Some(nan_b)],
    ));
    let x = f32s(&[2, 3, 2], 4, 2.0);
    let slope = t(&[3, 1], &[0.1f32, 0.2, 0.3]);
    cases.push(case(
        "PRelu",
        "PRelu",
        "{}",
        Op::Binary(BinaryOp::PRelu),
        vec![Some(x), Some(slope)],
    ));
    let bits = t(&[4], &[1u8, 3, 128, 255]);
    let shifts = t(&[4], &[1u8, 4, 1, 7]);
    cases.push(case(
        "BitShift left",
        "BitShift",
        "{'direction': 'LEFT'}",
        Op::Binary(BinaryOp::BitShiftLeft),
        vec![Some(bits.clone()), Some(shifts.clone())],
    ));
    cases.push(case(
        "BitShift right",
        "BitShift",
        "{'direction': 'RIGHT'}",
        Op::Binary(BinaryOp::BitShiftRight),
        vec![Some(bits), Some(shifts)],
    ));
    let cond = t(&[2, 1], &[true, false]);
    cases.push(case(
        "Where",
        "Where",
        "{}",
        Op::Where,
        vec![
            Some(cond),
            Some(f32s(&[3], 5, 1.0)),
            Some(f32s(&[2, 3], 6, 1.0)),
        ],
    ));
    let f = t(&[5], &[-1.7f32, 1.7, 255.9, -0.2, 1000.0]);
    cases.push(case(
        "Cast f32→i32",
        "Cast",
        "{'to': 6}",
        Op::Cast { to: DType::I32 },
        vec![Some(f.clone())],
    ));
    cases.push(
        case(
            "Cast f32→f16",
            "Cast",
            "{'to': 10}",
            Op::Cast { to: DType::F16 },
            vec![Some(f32s(&[16], 7, 100.0))],
        )
        .tol(0.0),
    );
    cases.push(case(
        "Cast i32→u8",
        "Cast",
        "{'to': 2}",
        Op::Cast { to: DType::U8 },
        vec![Some(t(&[4], &[300i32, -1, 255, -300]))],
    ));
}

fn linalg_cases(cases: &mut Vec<Case>) {
    let a = f32s(&[2, 1, 3, 5], 8, 1.0);
    let b = f32s(&[4, 5, 2], 9, 1.0);
    cases.push(
        case(
            "MatMul batch",
            "MatMul",
            "{}",
            Op::matmul(),
            vec![Some(a), Some(b)],
        )
        .tol(1e-5),
    );
    let v = f32s(&[5], 10, 1.0);
    cases.push(
        case(
            "MatMul vector",
            "MatMul",
            "{}",
            Op::matmul(),
            vec![Some(v), Some(f32s(&[3, 5, 2], 11, 1.0))],
        )
        .tol(1e-5),
    );
    let ai = t(&[2, 3], &[1i32, -2, 3, 4, 5, -6]);
    let bi = t(&[3, 2], &[7i32, 8, -9, 10, 11, 12]);
    cases.push(case(
        "MatMul int32",
        "MatMul",
        "{}",
        Op::matmul(),
        vec![Some(ai), Some(bi)],
    ));
    let g = GemmAttrs {
        alpha: 0.5,
        beta: 2.0,
        trans_a: true,
        trans_b: true,
        activation: nnc::ops::Activation::None,
    };
    let inputs = vec![
        Some(f32s(&[4, 3], 12, 1.0)),
        Some(f32s(&[2, 4], 13, 1.0)),
        Some(f32s(&[2], 14, 1.0)),
    ];
    cases.push(
        case(
            "Gemm",
            "Gemm",
            "{'alpha': 0.5, 'beta': 2.0, 'transA': 1, 'transB': 1}",
            Op::Gemm(g),
            inputs,
        )
        .tol(1e-5),
    );
}

fn conv_cases(cases: &mut Vec<Case>) {
    let x = f32s(&[2, 4, 9, 8], 20, 1.0);
    let w = f32s(&[6, 2, 3, 2], 21, 1.0);
    let b = f32s(&[6], 22, 1.0);
    let c = ConvAttrs {
        kernel: vec![3, 2],
        strides: vec![2, 1],
        pads: vec![1, 0, 2, 1],
        dilations: vec![2, 3],
        group: 2,
        activation: nnc::ops::Activation::None,
    };
    let attrs = "{'kernel_shape': [3, 2], 'strides': [2, 1], 'pads': [1, 0, 2, 1], 'dilations': [2, 3], 'group': 2}";
    cases.push(
        case(
            "Conv grouped dilated",
            "Conv",
            attrs,
            Op::Conv(c),
            vec![Some(x), Some(w), Some(b)],
        )
        .tol(1e-5),
    );
    let x = f32s(&[1, 3, 12], 23, 1.0);
    let w = f32s(&[2, 3, 4], 24, 1.0);
    let c = ConvAttrs {
        kernel: vec![4],
        strides: vec![3],
        pads: vec![2, 1],
        dilations: vec![1],
        group: 1,
        activation: nnc::ops::Activation::None,
    };
    let attrs = "{'kernel_shape': [4], 'strides': [3], 'pads': [2, 1]}";
    cases.push(
        case(
            "Conv 1-D",
            "Conv",
            attrs,
            Op::Conv(c),
            vec![Some(x), Some(w)],
        )
        .tol(1e-5),
    );

    // ConvTranspose, group 1 (the reference's grouped path is not reliable).
    let x = f32s(&[1, 3, 4, 5], 25, 1.0);
    let w = f32s(&[3, 2, 3, 3], 26, 1.0);
    let b = f32s(&[2], 27, 1.0);
    // out = s·(in − 1) + output_padding + d·(k − 1) + 1 − pads
    let out = [2 * 3 + 1 + (2 * 2 + 1) - 2, 3 * 4 + (3 * 2 + 1)];
    let c = ConvTransposeAttrs {
        kernel: vec![3, 3],
        strides: vec![2, 3],
        pads: vec![1, 0, 1, 0],
        dilations: vec![2, 3],
        group: 1,
        output_spatial: out.to_vec(),
    };
    let attrs = "{'kernel_shape': [3, 3], 'strides': [2, 3], 'pads': [1, 0, 1, 0], 'dilations': [2, 3], 'output_padding': [1, 0]}";
    cases.push(
        case(
            "ConvTranspose",
            "ConvTranspose",
            attrs,
            Op::ConvTranspose(c),
            vec![Some(x), Some(w), Some(b)],
        )
        .tol(1e-5),
    );
}

fn pool_cases(cases: &mut Vec<Case>) {
    let x = f32s(&[2, 3, 9, 8], 30, 1.0);
    let pool = |kind,
                kernel: &[usize],
                strides: &[usize],
                pads: &[usize],
                dilations: &[usize],
                out: &[usize]| {
        Op::Pool(PoolAttrs {
            kind,
            kernel: kernel.to_vec(),
            strides: strides.to_vec(),
            pads: pads.to_vec(),
            dilations: dilations.to_vec(),
            output_spatial: out.to_vec(),
            ceil_mode: false,
        })
    };
    // (9 + 1 + 1 − 5) / 2 + 1 = 4, (8 + 0 + 2 − 3) / 1 + 1 = 8
    let op = pool(
        PoolKind::Max,
        &[3, 3],
        &[2, 1],
        &[1, 0, 1, 2],
        &[2, 1],
        &[4, 8],
    );
    let attrs =
        "{'kernel_shape': [3, 3], 'strides': [2, 1], 'pads': [1, 0, 1, 2], 'dilations': [2, 1]}";
    cases.push(case(
        "MaxPool dilated",
        "MaxPool",
        attrs,
        op,
        vec![Some(x.clone())],
    ));
    for count_include_pad in [0, 1] {
        let kind = PoolKind::Average {
            count_include_pad: count_include_pad == 1,
        };
        let op = pool(kind, &[3, 2], &[2, 2], &[1, 1, 2, 0], &[1, 1], &[5, 4]);
        let attrs = format!("{{'kernel_shape': [3, 2], 'strides': [2, 2], 'pads': [1, 1, 2, 0], 'count_include_pad': {count_include_pad}}}");
        cases.push(case(
            "AveragePool",
            "AveragePool",
            &attrs,
            op,
            vec![Some(x.clone())],
        ));
    }
    // ceil_mode: (9 − 2) / 2 → ceil 3.5 = 4 (+1) = 5 windows; the last starts inside.
    let op = pool(
        PoolKind::Average {
            count_include_pad: false,
        },
        &[2, 2],
        &[2, 2],
        &[0; 4],
        &[1, 1],
        &[5, 4],
    );
    cases.push(case(
        "AveragePool ceil",
        "AveragePool",
        "{'kernel_shape': [2, 2], 'strides': [2, 2], 'ceil_mode': 1}",
        op,
        vec![Some(x.clone())],
    ));
    let op = pool(
        PoolKind::Lp { p: 3.0 },
        &[2, 3],
        &[1, 2],
        &[0; 4],
        &[1, 1],
        &[8, 3],
    );
    cases.push(
        case(
            "LpPool",
            "LpPool",
            "{'kernel_shape': [2, 3], 'strides': [1, 2], 'p': 3}",
            op,
            vec![Some(x.clone())],
        )
        .tol(1e-5),
    );
    let op = pool(
        PoolKind::Average {
            count_include_pad: false,
        },
        &[9, 8],
        &[1, 1],
        &[0; 4],
        &[1, 1],
        &[1, 1],
    );
    cases.push(case(
        "GlobalAveragePool",
        "GlobalAveragePool",
        "{}",
        op,
        vec![Some(x)],
    ));
}

fn norm_and_reduce_cases(cases: &mut Vec<Case>) {
    let x = f32s(&[2, 3, 4], 40, 3.0);
    cases.push(case(
        "Softmax",
        "Softmax",
        "{'axis': 1}",
        Op::Softmax {
            axis: 1,
            log: false,
        },
        vec![Some(x.clone())],
    ));
    cases.push(
        case(
            "LogSoftmax",
            "LogSoftmax",
            "{'axis': -1}",
            Op::Softmax { axis: 2, log: true },
            vec![Some(x.clone())],
        )
        .tol(1e-5),
    );
    let ln = Op::LayerNorm {
        axis: 1,
        epsilon: 1e-3,
    };
    let ln_inputs = vec![
        Some(x.clone()),
        Some(f32s(&[3, 4], 41, 1.0)),
        Some(f32s(&[4], 42, 1.0)),
    ];
    cases.push(
        case(
            "LayerNormalization",
            "LayerNormalization",
            "{'axis': 1, 'epsilon': 0.001}",
            ln,
            ln_inputs,
        )
        .tol(1e-5),
    );

    let positive = t(
        &[2, 3, 4],
        &data(24, 43, 1.0)
            .iter()
            .map(|v| v.abs() + 0.25)
            .collect::<Vec<_>>(),
    );
    let kinds = [
        ("ReduceSum", ReduceKind::Sum, &x),
        ("ReduceMean", ReduceKind::Mean, &x),
        ("ReduceMax", ReduceKind::Max, &x),
        ("ReduceMin", ReduceKind::Min, &x),
        ("ReduceProd", ReduceKind::Prod, &x),
        ("ReduceL1", ReduceKind::L1, &x),
        ("ReduceL2", ReduceKind::L2, &x),
        ("ReduceLogSum", ReduceKind::LogSum, &positive),
        ("ReduceLogSumExp", ReduceKind::LogSumExp, &x),
        ("ReduceSumSquare", ReduceKind::SumSquare, &x),
    ];
    for (name, kind, input) in kinds {
        for (axes, keepdims) in [(vec![0usize, 2], false), (vec![1], true)] {
            let onnx_axes: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
            let op = Op::Reduce(ReduceAttrs {
                kind,
                axes,
                keepdims,
            });
            let attrs = format!("{{'keepdims': {}}}", keepdims as i32);
            cases.push(
                case(name, name, &attrs, op, vec![Some(input.clone())])
                    .onnx(vec![Some(input.clone()), i64s(&onnx_axes)])
                    .opset(18)
                    .tol(1e-5),
            );
        }
    }
    let xi = t(&[2, 3], &[1i32, -2, 3, 4, 5, -7]);
    let op = Op::Reduce(ReduceAttrs {
        kind: ReduceKind::Sum,
        axes: vec![1],
        keepdims: false,
    });
    cases.push(
        case(
            "ReduceSum int",
            "ReduceSum",
            "{'keepdims': 0}",
            op,
            vec![Some(xi.clone())],
        )
        .onnx(vec![Some(xi), i64s(&[1])])
        .opset(18),
    );

    let ties = t(&[3, 4], &[1f32, 3., 3., 0., 2., 0., 0., 2., 5., 5., 5., 5.]);
    for (onnx, max) in [("ArgMax", true), ("ArgMin", false)] {
        for last in [0, 1] {
            let op = Op::ArgReduce(ArgReduceAttrs {
                max,
                axis: 1,
                keepdims: last == 1,
                select_last_index: last == 1,
            });
            let attrs = format!("{{'axis': 1, 'keepdims': {last}, 'select_last_index': {last}}}");
            cases.push(case(onnx, onnx, &attrs, op, vec![Some(ties.clone())]));
        }
    }
}

fn shape_cases(cases: &mut Vec<Case>) {
    let x = t(&[4, 6], &(0..24).collect::<Vec<i64>>());
    // x[3:0:-2, -1:-7:-2] → rows 3, 1; columns 5, 3, 1
    let op = Op::Slice {
        starts: vec![3, 5],
        steps: vec![-2, -2],
        shape: vec![2, 3],
    };
    let onnx = vec![
        Some(x.clone()),
        i64s(&[3, -1]),
        i64s(&[0, -7]),
        i64s(&[0, 1]),
        i64s(&[-2, -2]),
    ];
    cases.push(
        case(
            "Slice negative steps",
            "Slice",
            "{}",
            op,
            vec![Some(x.clone())],
        )
        .onnx(onnx),
    );
    // x[:, 1:100:2] → columns 1, 3, 5
    let op = Op::Slice {
        starts: vec![0, 1],
        steps: vec![1, 2],
        shape: vec![4, 3],
    };
    let onnx = vec![
        Some(x.clone()),
        i64s(&[1]),
        i64s(&[100]),
        i64s(&[1]),
        i64s(&[2]),
    ];
    cases.push(
        case(
            "Slice clamped end",
            "Slice",
            "{}",
            op,
            vec![Some(x.clone())],
        )
        .onnx(onnx),
    );
    let idx = t(&[2, 2], &[-1i64, 0, 2, -3]);
    cases.push(case(
        "Gather",
        "Gather",
        "{'axis': 1}",
        Op::Gather { axis: 1 },
        vec![Some(x.clone()), Some(idx)],
    ));
    cases.push(case(
        "Transpose",
        "Transpose",
        "{'perm': [1, 0]}",
        Op::Transpose { perm: vec![1, 0] },
        vec![Some(x.clone())],
    ));
    let e = t(&[3, 1], &[1f32, 2., 3.]);
    let op = Op::Expand {
        shape: vec![2, 3, 4],
    };
    cases.push(
        case("Expand", "Expand", "{}", op, vec![Some(e.clone())])
            .onnx(vec![Some(e), i64s(&[2, 1, 4])]),
    );
    let y = t(&[2, 3], &[1f32, 2., 3., 4., 5., 6.]);
    // Non-negative pads only: the reference's np.pad rejects negative (cropping) pads.
    let pads = [2i64, 0, 1, 3];
    for (mode, name) in [
        (PadMode::Constant, "constant"),
        (PadMode::Edge, "edge"),
        (PadMode::Reflect, "reflect"),
        (PadMode::Wrap, "wrap"),
    ] {
        let op = Op::Pad(PadAttrs {
            mode,
            pads: pads.to_vec(),
            value: 7.5,
        });
        let onnx = vec![Some(y.clone()), i64s(&pads), Some(Tensor::scalar(7.5f32))];
        cases.push(
            case(
                &format!("Pad {name}"),
                "Pad",
                &format!("{{'mode': '{name}'}}"),
                op,
                vec![Some(y.clone())],
            )
            .onnx(onnx),
        );
    }
    let reflect_far = [4i64, 0, 5, 2];
    let op = Op::Pad(PadAttrs {
        mode: PadMode::Reflect,
        pads: reflect_far.to_vec(),
        value: 0.0,
    });
    let onnx = vec![Some(y.clone()), i64s(&reflect_far)];
    cases.push(
        case(
            "Pad reflect far",
            "Pad",
            "{'mode': 'reflect'}",
            op,
            vec![Some(y)],
        )
        .onnx(onnx),
    );
}

/// Resize given either `sizes` or `scales`, with the IR attributes derived the way the
/// importer does (scales = output/input for sizes; output = ⌊scale·input⌋ for scales).
#[allow(clippy::too_many_arguments)]
fn resize_case(
    cases: &mut Vec<Case>,
    x: &Tensor,
    mode: (ResizeMode, &str),
    transform: (CoordinateTransform, &str),
    nearest: (NearestMode, &str),
    sizes: Option<&[usize]>,
    scales: Option<&[f32]>,
    extra: (&str, f32, bool, f32, &[f32]),
) {
    let (extra_attrs, cubic_coeff_a, exclude_outside, extrapolation_value, roi) = extra;
    let input = x.shape();
    let (scale_attr, output_shape): (Vec<f32>, Vec<usize>) = match (sizes, scales) {
        (Some(s), _) => (
            s.iter()
                .zip(input)
                .map(|(&o, &i)| (o as f64 / i as f64) as f32)
                .collect(),
            s.to_vec(),
        ),
        (None, Some(s)) => (
            s.to_vec(),
            s.iter()
                .zip(input)
                .map(|(&f, &i)| (f as f64 * i as f64) as usize)
                .collect(),
        ),
        (None, None) => unreachable!("sizes or scales"),
    };
    let r = ResizeAttrs {
        mode: mode.0,
        coordinate_transform: transform.0,
        nearest_mode: nearest.0,
        cubic_coeff_a,
        exclude_outside,
        extrapolation_value,
        scales: scale_attr,
        roi: roi.to_vec(),
        output_shape,
        scales_from_extents: false,
    };
    let roi_input = Some(t(&[roi.len()], roi));
    let onnx = match (sizes, scales) {
        (Some(s), _) => vec![
            Some(x.clone()),
            roi_input,
            None,
            i64s(&s.iter().map(|&d| d as i64).collect::<Vec<_>>()),
        ],
        (None, Some(s)) => vec![Some(x.clone()), roi_input, Some(t(&[s.len()], s))],
        (None, None) => unreachable!(),
    };
    let attrs = format!(
        "{{'mode': '{}', 'coordinate_transformation_mode': '{}', 'nearest_mode': '{}'{extra_attrs}}}",
        mode.1, transform.1, nearest.1
    );
    let name = format!("Resize {attrs} sizes={sizes:?} scales={scales:?}");
    cases.push(
        case(
            &name,
            "Resize",
            &attrs,
            Op::Resize(r),
            vec![Some(x.clone())],
        )
        .onnx(onnx)
        .tol(1e-5),
    );
}

fn resize_cases(cases: &mut Vec<Case>) {
    let x = f32s(&[1, 2, 5, 7], 50, 2.0);
    let transforms = [
        (CoordinateTransform::HalfPixel, "half_pixel"),
        (
            CoordinateTransform::HalfPixelSymmetric,
            "half_pixel_symmetric",
        ),
        (CoordinateTransform::PytorchHalfPixel, "pytorch_half_pixel"),
        (CoordinateTransform::AlignCorners, "align_corners"),
        (CoordinateTransform::Asymmetric, "asymmetric"),
    ];
    let nearest_modes = [
        (NearestMode::RoundPreferFloor, "round_prefer_floor"),
        (NearestMode::RoundPreferCeil, "round_prefer_ceil"),
        (NearestMode::Floor, "floor"),
        (NearestMode::Ceil, "ceil"),
    ];
    let modes = [
        (ResizeMode::Nearest, "nearest"),
        (ResizeMode::Linear, "linear"),
        (ResizeMode::Cubic, "cubic"),
    ];
    let plain = ("", -0.75, false, 0.0, &[][..]);
    let floor = (NearestMode::RoundPreferFloor, "round_prefer_floor");
    for mode in modes {
        for transform in transforms {
            let nearest_list: &[(NearestMode, &str)] = if mode.0 == ResizeMode::Nearest {
                &nearest_modes
            } else {
                &[floor]
            };
            for &nearest in nearest_list {
                resize_case(
                    cases,
                    &x,
                    mode,
                    transform,
                    nearest,
                    Some(&[1, 2, 8, 3]),
                    None,
                    plain,
                );
                resize_case(
                    cases,
                    &x,
                    mode,
                    transform,
                    nearest,
                    None,
                    Some(&[1.0, 1.0, 1.5, 0.6]),
                    plain,
                );
            }
        }
    }
    let half = (CoordinateTransform::HalfPixel, "half_pixel");
    let cubic = (ResizeMode::Cubic, "cubic");
    resize_case(
        cases,
        &x,
        cubic,
        half,
        floor,
        Some(&[1, 2, 9, 4]),
        None,
        (
            ", 'cubic_coeff_a': -0.5, 'exclude_outside': 1",
            -0.5,
            true,
            0.0,
            &[],
        ),
    );
    resize_case(
        cases,
        &x,
        cubic,
        half,
        floor,
        None,
        Some(&[1.0, 1.0, 0.5, 0.75]),
        (", 'exclude_outside': 1", -0.75, true, 0.0, &[]),
    );
    let tf = (CoordinateTransform::TfCropAndResize, "tf_crop_and_resize");
    let roi = [0.0, 0.0, 0.2, -0.3, 1.0, 1.0, 1.1, 0.9];
    for mode in modes {
        resize_case(
            cases,
            &x,
            mode,
            tf,
            floor,
            Some(&[1, 2, 4, 6]),
            None,
            (", 'extrapolation_value': -3.5", -0.75, false, -3.5, &roi),
        );
        resize_case(
            cases,
            &x,
            mode,
            tf,
            floor,
            Some(&[1, 2, 1, 1]),
            None,
            (", 'extrapolation_value': -3.5", -0.75, false, -3.5, &roi),
        );
    }
    // Integer data: linear rounds half to even and saturates.
    let xi = t(&[1, 1, 2, 3], &[0u8, 255, 10, 200, 3, 250]);
    resize_case(
        cases,
        &xi,
        (ResizeMode::Linear, "linear"),
        half,
        floor,
        Some(&[1, 1, 3, 5]),
        None,
        plain,
    );
    resize_case(
        cases,
        &xi,
        cubic,
        half,
        floor,
        Some(&[1, 1, 3, 5]),
        None,
        plain,
    );
    resize_case(
        cases,
        &xi,
        (ResizeMode::Nearest, "nearest"),
        half,
        floor,
        Some(&[1, 1, 5, 4]),
        None,
        plain,
    );
}

// ---------------------------------------------------------------------------------------
// Running and comparing

fn write_manifest(cases: &[Case], dir: &Path) -> String {
    let mut manifest = String::from("[\n");
    for (i, c) in cases.iter().enumerate() {
        let mut inputs = Vec::new();
        for (j, input) in c.onnx_inputs.iter().enumerate() {
            match input {
                None => inputs.push("None".to_string()),
                Some(tensor) => {
                    let path = dir.join(format!("c{i}_in{j}.bin"));
                    std::fs::write(&path, tensor.to_le_bytes()).expect("write input");
                    let shape: Vec<String> = tensor.shape().iter().map(|d| d.to_string()).collect();
                    inputs.push(format!(
                        "('{}', [{}], r'{}')",
                        tensor.dtype().name(),
                        shape.join(", "),
                        path.display()
                    ));
                }
            }
        }
        let out = dir.join(format!("c{i}_out"));
        let _ = writeln!(
            manifest,
            "  {{'op': '{}', 'attrs': {}, 'opset': {}, 'inputs': [{}], 'out': r'{}'}},",
            c.onnx_op,
            c.attrs,
            c.opset,
            inputs.join(", "),
            out.display()
        );
    }
    manifest.push(']');
    manifest
}

fn read_output(dir: &Path, i: usize) -> Result<Tensor, String> {
    let base = dir.join(format!("c{i}_out"));
    if let Ok(err) = std::fs::read_to_string(base.with_extension("err")) {
        return Err(format!("reference failed: {err}"));
    }
    let meta = std::fs::read_to_string(base.with_extension("txt"))
        .map_err(|e| format!("no output: {e}"))?;
    let mut lines = meta.lines();
    let dtype_name = lines.next().unwrap_or_default();
    let dtype = DType::ALL
        .into_iter()
        .find(|d| d.name() == dtype_name)
        .ok_or(format!("dtype {dtype_name}"))?;
    let shape: Vec<usize> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .map(|d| d.parse().unwrap())
        .collect();
    let bytes = std::fs::read(base.with_extension("bin")).map_err(|e| e.to_string())?;
    Tensor::from_le_bytes(&TensorType::new(dtype, shape), &bytes)
        .ok_or_else(|| "bad output size".to_string())
}

fn compare(got: &Tensor, want: &Tensor, tol: f64) -> Result<(), String> {
    if got.ty() != want.ty() {
        return Err(format!(
            "type {} but the reference gives {}",
            got.ty(),
            want.ty()
        ));
    }
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    let tol = if got.dtype().is_float() { tol } else { 0.0 };
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let ok = a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= tol * (1.0 + b.abs());
        if !ok {
            return Err(format!("element {i}: {a} vs reference {b}"));
        }
    }
    Ok(())
}

#[test]
fn interpreter_matches_onnx_reference_evaluator() {
    let Some(python) = python_with_onnx() else {
        if std::env::var("NNC_TEST_REQUIRE_TOOLS").as_deref() == Ok("1") {
            panic!("python3 with the onnx package is required (NNC_TEST_REQUIRE_TOOLS=1)");
        }
        println!("SKIP: python3 with the onnx package is not available; the interpreter was not cross-checked against onnx.reference");
        return;
    };
    let mut cases = Vec::new();
    unary_cases(&mut cases);
    binary_cases(&mut cases);
    linalg_cases(&mut cases);
    conv_cases(&mut cases);
    pool_cases(&mut cases);
    norm_and_reduce_cases(&mut cases);
    shape_cases(&mut cases);
    resize_cases(&mut cases);

    let dir = tempfile::tempdir().expect("temporary directory");
    let manifest = dir.path().join("cases.py");
    std::fs::write(&manifest, write_manifest(&cases, dir.path())).expect("write manifest");
    let script = dir.path().join("runner.py");
    std::fs::write(&script, RUNNER).expect("write runner");
    let status = Command::new(python)
        .arg(&script)
        .arg(&manifest)
        .status()
        .expect("run python3");
    assert!(status.success(), "the reference runner failed");

    let mut failures = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let inputs: Vec<Option<&Tensor>> = c.inputs.iter().map(Option::as_ref).collect();
        let outcome = read_output(dir.path(), i).and_then(|want| {
            let got = eval_op(&c.op, &inputs)?.remove(0);
            compare(&got, &want, c.tol)
        });
        if let Err(e) = outcome {
            failures.push(format!("{} (case {i}): {e}", c.name));
        }
    }
    println!("{} cases compared with onnx.reference", cases.len());
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
