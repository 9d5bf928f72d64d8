//! Structure-aware fuzz input: the fuzzer's bytes, read through [`Unstructured`], choose
//! a small ONNX model of ops nnc supports — graph inputs of random dtype and shape
//! (dims 0..5, ranks 0..4), a few nodes whose operands are earlier values or fresh
//! constants, and attributes drawn from each op's plausible range (plus a few that are
//! not). Most choices are biased towards models the importer accepts, so the passes
//! and code generation see many of them; the rest exercise the refusals.
//!
//! Exhausted input reads as zeros, so every byte string is a model.

use arbitrary::Unstructured;
use nnc::ir::{DType, Tensor};
use nnc::onnx::proto::{
    attribute_type, tensor_shape_proto, type_proto, AttributeProto, GraphProto, ModelProto,
    NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};

/// The element types graphs are built from (the sub-byte formats are left to the node
/// suite: few ops take them).
pub const DTYPES: [DType; 12] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::F64,
    DType::I8,
    DType::U8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::U32,
    DType::U64,
    DType::Bool,
];

const OPSETS: [i64; 6] = [11, 13, 17, 18, 21, 22];

/// One attribute an op may carry and the values it is drawn from.
#[derive(Clone, Copy)]
enum Attr {
    Int(&'static str, i64, i64),
    /// `name`, length range, value range.
    Ints(&'static str, usize, usize, i64, i64),
    Float(&'static str, &'static [f32]),
    Str(&'static str, &'static [&'static str]),
    /// An ONNX element type code (`Cast.to`).
    ElemType(&'static str),
    /// A tensor (`ConstantOfShape.value`): one element of a random dtype.
    ScalarTensor(&'static str),
}

/// An operand slot that is usually a constant in real models.
#[derive(Clone, Copy)]
enum Operand {
    /// Any earlier value.
    Value,
    /// An int64 constant: length range, value range.
    I64s(usize, usize, i64, i64),
    /// A constant scalar of the first operand's kind (Clip's bounds, Pad's value).
    Scalar,
    /// Left empty ("" in ONNX) or a value.
    Optional,
}

use Attr::*;
use Operand::*;

struct OpSpec {
    op: &'static str,
    /// Operands; those past `required` are dropped at random.
    operands: &'static [Operand],
    required: usize,
    outputs: usize,
    attrs: &'static [Attr],
}

const fn op(
    op: &'static str,
    operands: &'static [Operand],
    required: usize,
    outputs: usize,
    attrs: &'static [Attr],
) -> OpSpec {
    OpSpec {
        op,
        operands,
        required,
        outputs,
        attrs,
    }
}

const UNARY: &[Operand] = &[Value];
const BINARY: &[Operand] = &[Value, Value];
const AXIS: Attr = Int("axis", -4, 4);
const KEEPDIMS: Attr = Int("keepdims", 0, 1);
const AXES: Attr = Ints("axes", 0, 3, -4, 4);
const NO_ATTRS: &[Attr] = &[];
const POOL: &[Attr] = &[
    Ints("kernel_shape", 1, 2, 1, 3),
    Ints("strides", 1, 2, 1, 3),
    Ints("pads", 2, 4, 0, 2),
    Ints("dilations", 1, 2, 1, 2),
    Int("ceil_mode", 0, 1),
    Str("auto_pad", &["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]),
];

static OPS: &[OpSpec] = &[
    // Elementwise.
    op("Relu", UNARY, 1, 1, NO_ATTRS),
    op("Sigmoid", UNARY, 1, 1, NO_ATTRS),
    op("Tanh", UNARY, 1, 1, NO_ATTRS),
    op("Exp", UNARY, 1, 1, NO_ATTRS),
    op("Log", UNARY, 1, 1, NO_ATTRS),
    op("Sqrt", UNARY, 1, 1, NO_ATTRS),
    op("Abs", UNARY, 1, 1, NO_ATTRS),
    op("Neg", UNARY, 1, 1, NO_ATTRS),
    op("Floor", UNARY, 1, 1, NO_ATTRS),
    op("Ceil", UNARY, 1, 1, NO_ATTRS),
    op("Round", UNARY, 1, 1, NO_ATTRS),
    op("Sign", UNARY, 1, 1, NO_ATTRS),
    op("Reciprocal", UNARY, 1, 1, NO_ATTRS),
    op("Erf", UNARY, 1, 1, NO_ATTRS),
    op("Sin", UNARY, 1, 1, NO_ATTRS),
    op("Not", UNARY, 1, 1, NO_ATTRS),
    op("IsNaN", UNARY, 1, 1, NO_ATTRS),
    op("IsInf", UNARY, 1, 1, NO_ATTRS),
    op("Softplus", UNARY, 1, 1, NO_ATTRS),
    op(
        "LeakyRelu",
        UNARY,
        1,
        1,
        &[Float("alpha", &[0.01, 0.5, -1.0])],
    ),
    op("Elu", UNARY, 1, 1, &[Float("alpha", &[1.0, 0.5])]),
    op("HardSigmoid", UNARY, 1, 1, &[Float("alpha", &[0.2, 1.0])]),
    op(
        "Gelu",
        UNARY,
        1,
        1,
        &[Str("approximate", &["none", "tanh"])],
    ),
    op("Clip", &[Value, Scalar, Scalar], 1, 1, NO_ATTRS),
    op("Add", BINARY, 2, 1, NO_ATTRS),
    op("Sub", BINARY, 2, 1, NO_ATTRS),
    op("Mul", BINARY, 2, 1, NO_ATTRS),
    op("Div", BINARY, 2, 1, NO_ATTRS),
    op("Pow", BINARY, 2, 1, NO_ATTRS),
    op("Mod", BINARY, 2, 1, &[Int("fmod", 0, 1)]),
    op("Max", &[Value, Value, Value], 1, 1, NO_ATTRS),
    op("Min", BINARY, 1, 1, NO_ATTRS),
    op("Sum", &[Value, Value, Value], 1, 1, NO_ATTRS),
    op("Mean", BINARY, 1, 1, NO_ATTRS),
    op("Equal", BINARY, 2, 1, NO_ATTRS),
    op("Less", BINARY, 2, 1, NO_ATTRS),
    op("Greater", BINARY, 2, 1, NO_ATTRS),
    op("And", BINARY, 2, 1, NO_ATTRS),
    op("Or", BINARY, 2, 1, NO_ATTRS),
    op("Xor", BINARY, 2, 1, NO_ATTRS),
    op(
        "BitShift",
        BINARY,
        2,
        1,
        &[Str("direction", &["LEFT", "RIGHT"])],
    ),
    op("PRelu", BINARY, 2, 1, NO_ATTRS),
    op("Where", &[Value, Value, Value], 3, 1, NO_ATTRS),
    op(
        "Cast",
        UNARY,
        1,
        1,
        &[ElemType("to"), Int("saturate", 0, 1)],
    ),
    op("CastLike", BINARY, 2, 1, NO_ATTRS),
    // Linear algebra and convolutions.
    op("MatMul", BINARY, 2, 1, NO_ATTRS),
    op(
        "Gemm",
        &[Value, Value, Optional],
        2,
        1,
        &[
            Float("alpha", &[1.0, 0.5]),
            Float("beta", &[1.0, 2.0]),
            Int("transA", 0, 1),
            Int("transB", 0, 1),
        ],
    ),
    op(
        "Conv",
        &[Value, Value, Optional],
        2,
        1,
        &[
            Ints("kernel_shape", 1, 2, 1, 3),
            Ints("strides", 1, 2, 1, 3),
            Ints("pads", 2, 4, 0, 2),
            Ints("dilations", 1, 2, 1, 2),
            Int("group", 1, 3),
            Str("auto_pad", &["NOTSET", "SAME_UPPER", "VALID"]),
        ],
    ),
    op(
        "ConvTranspose",
        &[Value, Value, Optional],
        2,
        1,
        &[
            Ints("strides", 1, 2, 1, 3),
            Ints("pads", 2, 4, 0, 2),
            Ints("output_padding", 1, 2, 0, 1),
            Int("group", 1, 2),
        ],
    ),
    op("MaxPool", UNARY, 1, 1, POOL),
    op("AveragePool", UNARY, 1, 1, POOL),
    op("GlobalAveragePool", UNARY, 1, 1, NO_ATTRS),
    op("GlobalMaxPool", UNARY, 1, 1, NO_ATTRS),
    op(
        "BatchNormalization",
        &[Value, Value, Value, Value, Value],
        5,
        1,
        &[Float("epsilon", &[1e-5, 0.0])],
    ),
    op(
        "LayerNormalization",
        &[Value, Value, Optional],
        2,
        1,
        &[AXIS, Float("epsilon", &[1e-5])],
    ),
    op(
        "InstanceNormalization",
        &[Value, Value, Value],
        3,
        1,
        &[Float("epsilon", &[1e-5])],
    ),
    op("Softmax", UNARY, 1, 1, &[AXIS]),
    op("LogSoftmax", UNARY, 1, 1, &[AXIS]),
    // Data movement.
    op(
        "Reshape",
        &[Value, I64s(0, 4, -1, 5)],
        2,
        1,
        &[Int("allowzero", 0, 1)],
    ),
    op("Transpose", UNARY, 1, 1, &[Ints("perm", 0, 4, -1, 4)]),
    op("Concat", &[Value, Value, Value], 1, 1, &[AXIS]),
    op(
        "Slice",
        &[
            Value,
            I64s(1, 3, -6, 6),
            I64s(1, 3, -6, 6),
            I64s(1, 3, -4, 4),
            I64s(1, 3, -2, 3),
        ],
        3,
        1,
        NO_ATTRS,
    ),
    op("Gather", &[Value, Value], 2, 1, &[AXIS]),
    op("Gather", &[Value, I64s(0, 3, -5, 5)], 2, 1, &[AXIS]),
    op("GatherElements", &[Value, Value], 2, 1, &[AXIS]),
    op("Squeeze", &[Value, I64s(0, 2, -4, 4)], 1, 1, &[AXES]),
    op("Unsqueeze", &[Value, I64s(1, 2, -5, 5)], 1, 1, &[AXES]),
    op("Flatten", UNARY, 1, 1, &[AXIS]),
    op("Expand", &[Value, I64s(0, 4, 0, 4)], 2, 1, NO_ATTRS),
    op("Tile", &[Value, I64s(0, 4, 0, 3)], 2, 1, NO_ATTRS),
    op(
        "Pad",
        &[Value, I64s(0, 8, -1, 2), Scalar],
        2,
        1,
        &[Str("mode", &["constant", "reflect", "edge", "wrap"])],
    ),
    op(
        "Split",
        &[Value, I64s(1, 3, 0, 3)],
        1,
        2,
        &[AXIS, Int("num_outputs", 1, 3)],
    ),
    op("Shape", UNARY, 1, 1, &[Int("start", -3, 3)]),
    op("Size", UNARY, 1, 1, NO_ATTRS),
    op("Identity", UNARY, 1, 1, NO_ATTRS),
    op("DepthToSpace", UNARY, 1, 1, &[Int("blocksize", 1, 2)]),
    op("SpaceToDepth", UNARY, 1, 1, &[Int("blocksize", 1, 2)]),
    op(
        "ConstantOfShape",
        &[I64s(0, 3, 0, 4)],
        1,
        1,
        &[ScalarTensor("value")],
    ),
    op("Range", &[Scalar, Scalar, Scalar], 3, 1, NO_ATTRS),
    op(
        "CumSum",
        &[Value, I64s(0, 0, -3, 3)],
        2,
        1,
        &[Int("exclusive", 0, 1), Int("reverse", 0, 1)],
    ),
    op("Trilu", &[Value, Optional], 1, 1, &[Int("upper", 0, 1)]),
    op("ScatterElements", &[Value, Value, Value], 3, 1, &[AXIS]),
    op("OneHot", &[Value, I64s(0, 0, 0, 4), Value], 3, 1, &[AXIS]),
    // Reductions.
    op(
        "ReduceSum",
        &[Value, I64s(0, 2, -4, 4)],
        1,
        1,
        &[KEEPDIMS, Int("noop_with_empty_axes", 0, 1)],
    ),
    op(
        "ReduceMean",
        &[Value, I64s(0, 2, -4, 4)],
        1,
        1,
        &[AXES, KEEPDIMS],
    ),
    op(
        "ReduceMax",
        &[Value, I64s(0, 2, -4, 4)],
        1,
        1,
        &[AXES, KEEPDIMS],
    ),
    op("ReduceMin", UNARY, 1, 1, &[AXES, KEEPDIMS]),
    op("ReduceProd", UNARY, 1, 1, &[AXES, KEEPDIMS]),
    op("ReduceL2", UNARY, 1, 1, &[AXES, KEEPDIMS]),
    op("ReduceLogSumExp", UNARY, 1, 1, &[AXES, KEEPDIMS]),
    op(
        "ArgMax",
        UNARY,
        1,
        1,
        &[AXIS, KEEPDIMS, Int("select_last_index", 0, 1)],
    ),
    op("ArgMin", UNARY, 1, 1, &[AXIS, KEEPDIMS]),
    op(
        "TopK",
        &[Value, I64s(1, 1, 0, 3)],
        2,
        2,
        &[AXIS, Int("largest", 0, 1), Int("sorted", 0, 1)],
    ),
];

/// Draws from `u`, reading exhausted input as the range's start.
fn int(u: &mut Unstructured, lo: i64, hi: i64) -> i64 {
    u.int_in_range(lo..=hi).unwrap_or(lo)
}

fn index(u: &mut Unstructured, n: usize) -> usize {
    u.choose_index(n).unwrap_or(0)
}

fn chance(u: &mut Unstructured, one_in: u32) -> bool {
    u.ratio(1, one_in).unwrap_or(false)
}

/// Dims 0..5, mostly 1..4: 0 and 5 are the edge cases, not the rule.
fn dim(u: &mut Unstructured) -> usize {
    match int(u, 0, 9) {
        0 => 0,
        1 => 5,
        k => (k as usize - 2) % 4 + 1,
    }
}

fn shape(u: &mut Unstructured) -> Vec<usize> {
    let rank = int(u, 0, 4) as usize;
    (0..rank).map(|_| dim(u)).collect()
}

fn dtype(u: &mut Unstructured) -> DType {
    // float32 half the time: most kernels are written for it.
    if chance(u, 2) {
        DType::F32
    } else {
        DTYPES[index(u, DTYPES.len())]
    }
}

/// A value every dtype holds exactly: small integers and quarters (integer dtypes
/// truncate them; unsigned ones take their magnitude).
pub fn element(u: &mut Unstructured, dtype: DType) -> f64 {
    let v = int(u, -16, 16) as f64 / 4.0;
    match dtype {
        DType::Bool => (v > 0.0) as u8 as f64,
        d if d.is_int() && d.is_signed_int() => v.trunc(),
        d if d.is_int() => v.abs().trunc(),
        _ => v,
    }
}

/// A tensor of `dtype` and `shape` with [`element`] values.
pub fn tensor(u: &mut Unstructured, dtype: DType, shape: &[usize]) -> Tensor {
    let n = shape.iter().product::<usize>();
    let values = (0..n).map(|_| element(u, dtype)).collect();
    Tensor::from_vec(shape, values).cast(dtype)
}

fn tensor_proto(name: &str, t: &Tensor) -> TensorProto {
    TensorProto {
        name: name.to_string(),
        dims: t.shape().iter().map(|&d| d as i64).collect(),
        data_type: t.dtype().onnx_code(),
        raw_data: t.to_le_bytes(),
        ..Default::default()
    }
}

fn value_info(name: &str, dtype: DType, shape: &[usize]) -> ValueInfoProto {
    let dims = shape.iter().map(|&d| tensor_shape_proto::Dimension {
        value: Some(tensor_shape_proto::dimension::Value::DimValue(d as i64)),
    });
    ValueInfoProto {
        name: name.to_string(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: dtype.onnx_code(),
                shape: Some(TensorShapeProto {
                    dim: dims.collect(),
                }),
            })),
        }),
    }
}

fn attribute(u: &mut Unstructured, attr: Attr) -> AttributeProto {
    let mut a = AttributeProto::default();
    match attr {
        Int(name, lo, hi) => {
            a.name = name.into();
            a.r#type = attribute_type::INT;
            a.i = int(u, lo, hi);
        }
        Ints(name, min_len, max_len, lo, hi) => {
            a.name = name.into();
            a.r#type = attribute_type::INTS;
            let len = int(u, min_len as i64, max_len as i64);
            a.ints = (0..len).map(|_| int(u, lo, hi)).collect();
        }
        Float(name, choices) => {
            a.name = name.into();
            a.r#type = attribute_type::FLOAT;
            a.f = choices[index(u, choices.len())];
        }
        Str(name, choices) => {
            a.name = name.into();
            a.r#type = attribute_type::STRING;
            a.s = choices[index(u, choices.len())].as_bytes().to_vec();
        }
        ElemType(name) => {
            a.name = name.into();
            a.r#type = attribute_type::INT;
            a.i = dtype(u).onnx_code() as i64;
        }
        ScalarTensor(name) => {
            a.name = name.into();
            a.r#type = attribute_type::TENSOR;
            let d = dtype(u);
            a.t = Some(tensor_proto("", &tensor(u, d, &[1])));
        }
    }
    a
}

/// What the generator knows of a value: enough to make constants of its kind.
struct Known {
    name: String,
    dtype: Option<DType>,
}

/// A random model; see the module documentation.
pub fn random_model(u: &mut Unstructured) -> ModelProto {
    let opset = OPSETS[index(u, OPSETS.len())];
    let mut graph = GraphProto {
        name: "fuzz".into(),
        ..Default::default()
    };
    let mut values: Vec<Known> = vec![];
    let base = shape(u);
    for i in 0..int(u, 1, 3) {
        let d = dtype(u);
        // Often the shared shape (or a suffix of it, which broadcasts), so that binary
        // ops accept their operands.
        let s = match int(u, 0, 3) {
            0 => shape(u),
            1 => base[index(u, base.len() + 1).min(base.len())..].to_vec(),
            _ => base.clone(),
        };
        let name = format!("in{i}");
        graph.input.push(value_info(&name, d, &s));
        values.push(Known {
            name,
            dtype: Some(d),
        });
    }
    for i in 0..int(u, 0, 2) {
        let d = dtype(u);
        let s = if chance(u, 2) { base.clone() } else { shape(u) };
        let name = format!("w{i}");
        graph
            .initializer
            .push(tensor_proto(&name, &tensor(u, d, &s)));
        values.push(Known {
            name,
            dtype: Some(d),
        });
    }
    let nodes = int(u, 1, 5);
    for n in 0..nodes {
        let spec = &OPS[index(u, OPS.len())];
        let mut node = NodeProto {
            op_type: spec.op.into(),
            name: format!("n{n}"),
            ..Default::default()
        };
        let used = int(u, spec.required as i64, spec.operands.len() as i64) as usize;
        let mut first_dtype = None;
        for (k, operand) in spec.operands.iter().take(used).enumerate() {
            let name = match *operand {
                Value => {
                    // Mostly the latest value, so that the nodes form a chain.
                    let v = if chance(u, 2) {
                        values.len() - 1
                    } else {
                        index(u, values.len())
                    };
                    first_dtype = first_dtype.or(values[v].dtype);
                    values[v].name.clone()
                }
                Optional if chance(u, 2) => String::new(),
                Optional => values[index(u, values.len())].name.clone(),
                I64s(min_len, max_len, lo, hi) => {
                    let len = int(u, min_len as i64, max_len as i64) as usize;
                    let data: Vec<i64> = (0..len).map(|_| int(u, lo, hi)).collect();
                    // A 0-length range is a scalar (CumSum's axis, OneHot's depth).
                    let t = if max_len == 0 {
                        Tensor::from_vec(&[], vec![int(u, lo, hi)])
                    } else {
                        Tensor::from_vec(&[len], data)
                    };
                    let name = format!("n{n}_c{k}");
                    graph.initializer.push(tensor_proto(&name, &t));
                    name
                }
                Scalar => {
                    let d = first_dtype.unwrap_or(DType::F32);
                    let name = format!("n{n}_c{k}");
                    graph
                        .initializer
                        .push(tensor_proto(&name, &tensor(u, d, &[])));
                    name
                }
            };
            node.input.push(name);
        }
        for attr in spec.attrs {
            if chance(u, 2) {
                node.attribute.push(attribute(u, *attr));
            }
        }
        for k in 0..spec.outputs {
            let name = format!("n{n}_o{k}");
            node.output.push(name.clone());
            values.push(Known { name, dtype: None });
        }
        graph.node.push(node);
    }
    // The last node's outputs, and now and then an earlier value.
    let last = values.len() - graph.node.last().map_or(0, |n| n.output.len());
    for v in &values[last..] {
        graph.output.push(ValueInfoProto {
            name: v.name.clone(),
            r#type: None,
        });
    }
    if chance(u, 4) {
        let v = &values[index(u, last.max(1))];
        if !graph.output.iter().any(|o| o.name == v.name) {
            graph.output.push(ValueInfoProto {
                name: v.name.clone(),
                r#type: None,
            });
        }
    }
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: opset,
        }],
        producer_name: "nnc-fuzz".into(),
        graph: Some(graph),
        ..Default::default()
    }
}
