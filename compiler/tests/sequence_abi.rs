//! Sequence and optional values at the C ABI: a sequence input bound with
//! `--sequence-input` becomes one tensor input per element (`NAME[k]`), a sequence
//! output one output per element, an optional input is its element or (with
//! `--absent-input`) nothing. Small models built from the protobuf types, imported,
//! compiled for the host, run, and compared with values worked out by hand.

#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use std::collections::HashMap;

use nnc::codegen::Target;
use nnc::ir::{Graph, Tensor};
use nnc::onnx::proto::{
    attribute_type, tensor_shape_proto, type_proto, AttributeProto, GraphProto, ModelProto,
    NodeProto, OperatorSetIdProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use nnc::onnx::{import_model, ImportOptions};

const FLOAT: i32 = 1;
const BOOL: i32 = 9;

fn tensor_type(elem_type: i32, shape: Option<&[usize]>) -> TypeProto {
    let shape = shape.map(|s| TensorShapeProto {
        dim: s
            .iter()
            .map(|&d| tensor_shape_proto::Dimension {
                value: Some(tensor_shape_proto::dimension::Value::DimValue(d as i64)),
            })
            .collect(),
    });
    TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type,
            shape,
        })),
    }
}

fn sequence_type(elem: TypeProto) -> TypeProto {
    TypeProto {
        value: Some(type_proto::Value::SequenceType(Box::new(
            type_proto::Sequence {
                elem_type: Some(Box::new(elem)),
            },
        ))),
    }
}

fn optional_type(elem: TypeProto) -> TypeProto {
    TypeProto {
        value: Some(type_proto::Value::OptionalType(Box::new(
            type_proto::Optional {
                elem_type: Some(Box::new(elem)),
            },
        ))),
    }
}

fn vi(name: &str, ty: Option<TypeProto>) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: ty,
    }
}

fn node(op: &str, inputs: &[&str], outputs: &[&str], body: Option<GraphProto>) -> NodeProto {
    let attribute = body
        .map(|g| AttributeProto {
            name: "body".into(),
            r#type: attribute_type::GRAPH,
            g: Some(Box::new(g)),
            ..Default::default()
        })
        .into_iter()
        .collect();
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        name: format!("{op}_{}", outputs[0]),
        op_type: op.into(),
        attribute,
        ..Default::default()
    }
}

fn graph(inputs: Vec<ValueInfoProto>, nodes: Vec<NodeProto>, outputs: &[&str]) -> GraphProto {
    GraphProto {
        name: "g".into(),
        node: nodes,
        input: inputs,
        output: outputs.iter().map(|n| vi(n, None)).collect(),
        ..Default::default()
    }
}

fn import(g: GraphProto, opts: &ImportOptions) -> Result<Graph, String> {
    let model = ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 18,
        }],
        graph: Some(g),
        ..Default::default()
    };
    let imported = import_model(&model, None, opts).map_err(|e| e.to_string())?;
    if !imported.unsupported.is_empty() {
        return Err(format!("unsupported: {:?}", imported.unsupported));
    }
    Ok(imported.graph)
}

fn with_sequence(name: &str, shapes: &[&[usize]]) -> ImportOptions {
    ImportOptions {
        sequence_inputs: HashMap::from([(
            name.to_string(),
            shapes.iter().map(|s| s.to_vec()).collect(),
        )]),
        ..Default::default()
    }
}

fn names(g: &Graph, ids: &[nnc::ir::ValueId]) -> Vec<String> {
    ids.iter().map(|v| g.value(*v).name.clone()).collect()
}

fn run(g: &Graph, inputs: &[Tensor]) -> Vec<Tensor> {
    let mut g = g.clone();
    nnc::passes::optimize(&mut g).expect("passes run");
    runner::run_compiled(&g, inputs, Target::host()).unwrap_or_else(|e| panic!("{e}\n{g}"))
}

fn floats(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::from_vec(shape, v.to_vec())
}

fn seq_float() -> TypeProto {
    sequence_type(tensor_type(FLOAT, None))
}

#[test]
fn a_sequence_input_and_output_cross_the_abi_one_tensor_per_element() {
    // out = SequenceInsert(xs, y): the elements of xs pass straight through (so the
    // outputs must be copies, not renamed inputs) and y lands at the back.
    let g = graph(
        vec![
            vi("xs", Some(seq_float())),
            vi("y", Some(tensor_type(FLOAT, Some(&[3])))),
        ],
        vec![node("SequenceInsert", &["xs", "y"], &["out"], None)],
        &["out"],
    );
    let ir = import(g, &with_sequence("xs", &[&[3], &[3]])).expect("imports");
    assert_eq!(names(&ir, &ir.inputs), ["xs[0]", "xs[1]", "y"]);
    assert_eq!(names(&ir, &ir.outputs), ["out[0]", "out[1]", "out[2]"]);
    let inputs = [
        floats(&[3], &[1.0, 2.0, 3.0]),
        floats(&[3], &[4.0, 5.0, 6.0]),
        floats(&[3], &[7.0, 8.0, 9.0]),
    ];
    let out = run(&ir, &inputs);
    assert_eq!(out.len(), 3);
    for (o, i) in out.iter().zip(&inputs) {
        assert_eq!(o.to_f64_vec(), i.to_f64_vec());
    }
}

#[test]
fn an_unbound_or_misshapen_sequence_input_is_a_clear_error() {
    let g = || {
        graph(
            vec![vi(
                "xs",
                Some(sequence_type(tensor_type(FLOAT, Some(&[2, 2])))),
            )],
            vec![node("SequenceLength", &["xs"], &["n"], None)],
            &["n"],
        )
    };
    let e = import(g(), &ImportOptions::default()).unwrap_err();
    assert!(e.contains("--sequence-input xs="), "{e}");
    let e = import(g(), &with_sequence("xs", &[&[2, 2], &[2, 3]])).unwrap_err();
    assert!(e.contains("xs[1]") && e.contains("axis 1"), "{e}");
    let e = import(g(), &with_sequence("nope", &[&[2, 2]])).unwrap_err();
    assert!(e.contains("'nope' is not an input"), "{e}");
}

#[test]
fn sequence_map_runs_the_body_on_every_element() {
    // ys[k] = xs[k] + t for a sequence of differently shaped elements.
    let body = GraphProto {
        name: "body".into(),
        node: vec![node("Add", &["e", "b"], &["r"], None)],
        input: vec![vi("e", None), vi("b", None)],
        output: vec![vi("r", None)],
        ..Default::default()
    };
    let g = graph(
        vec![
            vi("xs", Some(seq_float())),
            vi("t", Some(tensor_type(FLOAT, Some(&[1])))),
        ],
        vec![node("SequenceMap", &["xs", "t"], &["ys"], Some(body))],
        &["ys"],
    );
    let ir = import(g, &with_sequence("xs", &[&[2], &[3]])).expect("imports");
    let out = run(
        &ir,
        &[
            floats(&[2], &[1.0, 2.0]),
            floats(&[3], &[3.0, 4.0, 5.0]),
            floats(&[1], &[10.0]),
        ],
    );
    assert_eq!(out[0].to_f64_vec(), [11.0, 12.0]);
    assert_eq!(out[1].to_f64_vec(), [13.0, 14.0, 15.0]);
}

#[test]
fn an_optional_input_is_its_element_or_nothing() {
    let g = || {
        graph(
            vec![vi("o", Some(optional_type(tensor_type(FLOAT, Some(&[2])))))],
            vec![
                node("OptionalHasElement", &["o"], &["has"], None),
                node("Identity", &["has"], &["has_out"], None),
            ],
            &["has_out"],
        )
    };
    let present = import(g(), &ImportOptions::default()).expect("imports");
    assert_eq!(names(&present, &present.inputs), ["o"]);
    let out = run(&present, &[floats(&[2], &[1.0, 2.0])]);
    assert_eq!(out[0].to_i64_vec(), [1]);

    let opts = ImportOptions {
        absent_inputs: ["o".to_string()].into(),
        ..Default::default()
    };
    let absent = import(g(), &opts).expect("imports");
    assert!(absent.inputs.is_empty());
    let out = run(&absent, &[]);
    assert_eq!(out[0].to_i64_vec(), [0]);
}

#[test]
fn if_with_a_runtime_condition_selects_sequences_element_by_element() {
    let branch = |name: &str, a: &str, b: &str| GraphProto {
        name: name.into(),
        node: vec![node("SequenceConstruct", &[a, b], &["s"], None)],
        output: vec![vi("s", None)],
        ..Default::default()
    };
    let mut if_node = node("If", &["c"], &["out"], None);
    for (attr, g) in [
        ("then_branch", branch("then", "a", "b")),
        ("else_branch", branch("else", "b", "a")),
    ] {
        if_node.attribute.push(AttributeProto {
            name: attr.into(),
            r#type: attribute_type::GRAPH,
            g: Some(Box::new(g)),
            ..Default::default()
        });
    }
    let g = graph(
        vec![
            vi("c", Some(tensor_type(BOOL, Some(&[])))),
            vi("a", Some(tensor_type(FLOAT, Some(&[2])))),
            vi("b", Some(tensor_type(FLOAT, Some(&[2])))),
        ],
        vec![if_node],
        &["out"],
    );
    let ir = import(g, &ImportOptions::default()).expect("imports");
    assert_eq!(names(&ir, &ir.outputs), ["out[0]", "out[1]"]);
    let (a, b) = (floats(&[2], &[1.0, 2.0]), floats(&[2], &[3.0, 4.0]));
    for (c, first) in [(true, [1.0, 2.0]), (false, [3.0, 4.0])] {
        let out = run(&ir, &[Tensor::scalar(c), a.clone(), b.clone()]);
        assert_eq!(out[0].to_f64_vec(), first, "cond {c}");
    }
}
