//! The degenerate-input sweep: every op nnc imports, as a single-node model over
//! degenerate operands (rank 0 to 5, zero-size axes, every element type, runtime and
//! constant inputs, negative and out-of-range axes, empty and odd attributes), is
//! imported, run through the default passes and compiled in memory. Each case must
//! either compile or return an error: a panic anywhere fails the test and names the
//! case (`catch_unwind` only detects it; the fixes are in the compiler).
//!
//! The cases are drawn from a seeded generator, so a failure reproduces by its seed.
//!
//! Run with `cargo test -p nnc --test degenerate_ops --release`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use nnc::codegen::{compile_graph, CompileOptions, Target};
use nnc::ir::DType;
use nnc::onnx::proto::{
    attribute_type, tensor_shape_proto, type_proto, AttributeProto, GraphProto, ModelProto,
    NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use nnc::onnx::{import_model, ImportOptions};
use nnc::passes::PassManager;

/// Cases drawn per op (and per input count).
const CASES_PER_OP: u64 = 160;

struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())].clone()
    }
}

/// Every op type nnc imports in the default domain: the string literals of the
/// importer registry that the registry accepts.
fn imported_ops() -> Vec<String> {
    let source = include_str!("../src/onnx/ops/mod.rs");
    let registry = &source[source
        .find("pub fn importer(")
        .expect("the registry function")..];
    let mut ops: Vec<String> = registry
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| s.chars().next().is_some_and(|c| c.is_ascii_uppercase()))
        .filter(|s| nnc::onnx::ops::importer(s).is_some())
        .map(str::to_string)
        .collect();
    ops.sort();
    ops.dedup();
    ops
}

const DTYPES: &[DType] = &[
    DType::F32,
    DType::F32,
    DType::F32,
    DType::I64,
    DType::I64,
    DType::I32,
    DType::Bool,
    DType::U8,
    DType::I8,
    DType::F16,
    DType::F64,
    DType::BF16,
    DType::U16,
    DType::I16,
    DType::U32,
    DType::U64,
    DType::F8E4M3FN,
    DType::U4,
];

const SHAPES: &[&[usize]] = &[
    &[],
    &[1],
    &[3],
    &[0],
    &[2, 3],
    &[1, 1],
    &[0, 3],
    &[2, 3, 4],
    &[1, 2, 3, 3],
    &[2, 0, 3, 3],
    &[1, 1, 1, 1, 1],
    &[1, 2, 3, 3, 2],
    &[4],
    &[2],
];

/// Values of constant operands: small counts, axes, negative and out-of-range ones.
const INTS: &[i64] = &[-2, -1, 0, 1, 2, 3, 7, i64::MAX, i64::MIN];
const FLOATS: &[f32] = &[0.0, 1.0, -1.0, 0.5, 2.0, f32::NAN, f32::INFINITY];

/// One operand: a graph input, an initializer, or omitted.
#[derive(Clone, Debug)]
enum Operand {
    Runtime(DType, Vec<usize>),
    Constant(DType, Vec<usize>, Vec<i64>),
    Omitted,
}

#[derive(Clone, Debug)]
enum AttrValue {
    I(i64),
    F(f32),
    S(&'static str),
    Ints(Vec<i64>),
    Floats(Vec<f32>),
}

const ATTR_NAMES: &[&str] = &[
    "axis",
    "axes",
    "keepdims",
    "perm",
    "to",
    "mode",
    "kernel_shape",
    "strides",
    "pads",
    "dilations",
    "group",
    "transA",
    "transB",
    "alpha",
    "beta",
    "epsilon",
    "k",
    "largest",
    "sorted",
    "blocksize",
    "batch_dims",
    "reduction",
    "num_outputs",
    "split",
    "starts",
    "ends",
    "exclusive",
    "reverse",
    "select_last_index",
    "value",
    "shape",
    "upper",
    "count_include_pad",
    "ceil_mode",
    "auto_pad",
    "output_shape",
    "output_padding",
    "noop_with_empty_axes",
    "direction",
    "hidden_size",
    "scales",
    "coordinate_transformation_mode",
    "allowzero",
    "detect_negative",
    "p",
    "lambd",
    "bias",
    "size",
];

fn random_attr(rng: &mut Rng) -> (String, AttrValue) {
    let name = rng.pick(ATTR_NAMES).to_string();
    let value = match rng.below(6) {
        0 | 1 => AttrValue::I(rng.pick(INTS)),
        2 => AttrValue::F(rng.pick(FLOATS)),
        3 => AttrValue::Ints((0..rng.below(5)).map(|_| rng.pick(INTS)).collect()),
        4 => AttrValue::Floats((0..rng.below(4)).map(|_| rng.pick(FLOATS)).collect()),
        _ => AttrValue::S(rng.pick(&[
            "",
            "NOTSET",
            "SAME_UPPER",
            "VALID",
            "constant",
            "reflect",
            "nearest",
            "linear",
            "cubic",
            "bidirectional",
            "add",
            "max",
            "DCR",
            "CRD",
            "half_pixel",
        ])),
    };
    (name, value)
}

fn random_operand(rng: &mut Rng) -> Operand {
    let dtype = rng.pick(DTYPES);
    let shape = rng.pick(SHAPES).to_vec();
    match rng.below(8) {
        0 => Operand::Omitted,
        1..=3 => {
            // Constants mostly int64 1-D (shapes, axes, pads...) or scalars.
            let dtype = if rng.below(3) == 0 { dtype } else { DType::I64 };
            let shape = match rng.below(3) {
                0 => shape,
                1 => vec![],
                _ => vec![rng.below(5)],
            };
            let n: usize = shape.iter().product();
            let values = (0..n).map(|_| rng.pick(INTS)).collect();
            Operand::Constant(dtype, shape, values)
        }
        _ => Operand::Runtime(dtype, shape),
    }
}

fn value_info(name: &str, dtype: DType, shape: &[usize]) -> ValueInfoProto {
    let dim = shape
        .iter()
        .map(|&d| tensor_shape_proto::Dimension {
            value: Some(tensor_shape_proto::dimension::Value::DimValue(d as i64)),
        })
        .collect();
    ValueInfoProto {
        name: name.to_string(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: dtype.onnx_code(),
                shape: Some(TensorShapeProto { dim }),
            })),
        }),
    }
}

/// A constant operand's initializer, its values converted to its element type.
fn initializer(name: &str, dtype: DType, shape: &[usize], values: &[i64]) -> TensorProto {
    let mut t = TensorProto {
        name: name.to_string(),
        dims: shape.iter().map(|&d| d as i64).collect(),
        data_type: dtype.onnx_code(),
        ..Default::default()
    };
    let tensor = nnc::ir::Tensor::from_vec(shape, values.to_vec()).cast(dtype);
    t.raw_data = tensor.to_le_bytes();
    t
}

struct Case {
    op: String,
    operands: Vec<Operand>,
    attrs: Vec<(String, AttrValue)>,
    outputs: usize,
    opset: i64,
}

fn model(case: &Case) -> ModelProto {
    let mut g = GraphProto {
        name: "degenerate".into(),
        ..Default::default()
    };
    let mut inputs = vec![];
    for (i, operand) in case.operands.iter().enumerate() {
        let name = format!("in{i}");
        match operand {
            Operand::Omitted => {
                inputs.push(String::new());
                continue;
            }
            Operand::Runtime(d, s) => g.input.push(value_info(&name, *d, s)),
            Operand::Constant(d, s, v) => g.initializer.push(initializer(&name, *d, s, v)),
        }
        inputs.push(name);
    }
    let attribute = case
        .attrs
        .iter()
        .map(|(name, value)| {
            let mut p = AttributeProto {
                name: name.clone(),
                ..Default::default()
            };
            match value {
                AttrValue::I(i) => {
                    p.r#type = attribute_type::INT;
                    p.i = *i;
                }
                AttrValue::F(f) => {
                    p.r#type = attribute_type::FLOAT;
                    p.f = *f;
                }
                AttrValue::S(s) => {
                    p.r#type = attribute_type::STRING;
                    p.s = s.as_bytes().to_vec();
                }
                AttrValue::Ints(v) => {
                    p.r#type = attribute_type::INTS;
                    p.ints = v.clone();
                }
                AttrValue::Floats(v) => {
                    p.r#type = attribute_type::FLOATS;
                    p.floats = v.clone();
                }
            }
            p
        })
        .collect();
    let outputs: Vec<String> = (0..case.outputs).map(|k| format!("out{k}")).collect();
    g.node.push(NodeProto {
        input: inputs,
        output: outputs.clone(),
        name: "node".into(),
        op_type: case.op.clone(),
        attribute,
        ..Default::default()
    });
    for o in outputs {
        g.output.push(ValueInfoProto {
            name: o,
            r#type: None,
        });
    }
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: case.opset,
        }],
        graph: Some(g),
        ..Default::default()
    }
}

/// What happened to a case that did not panic.
enum Outcome {
    Compiled,
    Refused,
}

fn run_case(case: &Case) -> Result<Outcome, String> {
    let m = model(case);
    let mut graph = match import_model(&m, None, &ImportOptions::default()) {
        Ok(imported) if imported.unsupported.is_empty() => imported.graph,
        _ => return Ok(Outcome::Refused),
    };
    if PassManager::default().run(&mut graph).is_err() {
        return Ok(Outcome::Refused);
    }
    match compile_graph(&graph, &CompileOptions::new(Target::host())) {
        Ok(_) => Ok(Outcome::Compiled),
        Err(_) => Ok(Outcome::Refused),
    }
}

fn draw_case(op: &str, rng: &mut Rng) -> Case {
    let n_inputs = rng.below(5);
    Case {
        op: op.to_string(),
        operands: (0..n_inputs).map(|_| random_operand(rng)).collect(),
        attrs: (0..rng.below(4)).map(|_| random_attr(rng)).collect(),
        outputs: 1 + rng.below(3),
        opset: rng.pick(&[7, 11, 13, 17, 18, 21]),
    }
}

/// A case that exercises the op's common shape: its first input a runtime float32 or
/// int64 tensor, the others small constants, no attributes — most of these compile,
/// so code generation sees degenerate shapes too, not only the importer.
fn plain_case(op: &str, rng: &mut Rng) -> Case {
    let first = Operand::Runtime(
        rng.pick(&[DType::F32, DType::F32, DType::I64, DType::Bool, DType::I32]),
        rng.pick(SHAPES).to_vec(),
    );
    let mut operands = vec![first];
    for _ in 0..rng.below(3) {
        operands.push(match rng.below(3) {
            0 => Operand::Runtime(rng.pick(DTYPES), rng.pick(SHAPES).to_vec()),
            _ => {
                let n = rng.below(4);
                Operand::Constant(
                    DType::I64,
                    vec![n],
                    (0..n).map(|_| rng.pick(INTS)).collect(),
                )
            }
        });
    }
    let attrs = if rng.below(2) == 0 {
        vec![]
    } else {
        vec![random_attr(rng)]
    };
    Case {
        op: op.to_string(),
        operands,
        attrs,
        outputs: 1,
        opset: 18,
    }
}

#[test]
fn degenerate_inputs_never_panic() {
    let ops = imported_ops();
    assert!(
        ops.len() > 100,
        "found only {} ops in the registry",
        ops.len()
    );
    std::panic::set_hook(Box::new(|_| {}));
    let start = Instant::now();
    let (mut total, mut compiled) = (0usize, 0usize);
    let mut panics: Vec<String> = vec![];
    for (k, op) in ops.iter().enumerate() {
        for seed in 0..CASES_PER_OP {
            let mut rng = Rng::new(k as u64 * 1000 + seed);
            let case = if seed % 2 == 0 {
                draw_case(op, &mut rng)
            } else {
                plain_case(op, &mut rng)
            };
            total += 1;
            match catch_unwind(AssertUnwindSafe(|| run_case(&case))) {
                Ok(Ok(Outcome::Compiled)) => compiled += 1,
                Ok(Ok(Outcome::Refused)) | Ok(Err(_)) => {}
                Err(payload) => {
                    let message = payload
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    panics.push(format!(
                        "{op} (seed {}): {message}\n    operands {:?}\n    attributes {:?}, opset {}",
                        k as u64 * 1000 + seed,
                        case.operands,
                        case.attrs,
                        case.opset
                    ));
                }
            }
        }
    }
    let _ = std::panic::take_hook();
    eprintln!(
        "{total} cases over {} ops in {:.1} s: {compiled} compiled, {} refused, {} panicked",
        ops.len(),
        start.elapsed().as_secs_f64(),
        total - compiled - panics.len(),
        panics.len()
    );
    assert!(
        panics.is_empty(),
        "{} of {total} cases panicked:\n{}",
        panics.len(),
        panics.join("\n")
    );
}
