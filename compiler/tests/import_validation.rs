//! Graph validation in the importer: a broken graph (two producers of one name, a node
//! overwriting an input or initializer, a value used before it is produced, an opset
//! nnc does not know) and out-of-range attributes are each one error naming the node
//! and op, never a panic and never a silently imported model.

use nnc::onnx::proto::{
    attribute_type, tensor_shape_proto, type_proto, AttributeProto, GraphProto, ModelProto,
    NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use nnc::onnx::{import_model, ImportOptions};

#[derive(Clone)]
enum A {
    I(i64),
    S(&'static str),
    Ints(Vec<i64>),
}

fn attr(name: &str, a: &A) -> AttributeProto {
    let mut p = AttributeProto {
        name: name.into(),
        ..Default::default()
    };
    match a {
        A::I(i) => (p.r#type, p.i) = (attribute_type::INT, *i),
        A::S(s) => (p.r#type, p.s) = (attribute_type::STRING, s.as_bytes().to_vec()),
        A::Ints(v) => (p.r#type, p.ints) = (attribute_type::INTS, v.clone()),
    }
    p
}

fn tensor_input(name: &str, shape: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: 1,
                shape: Some(TensorShapeProto {
                    dim: shape
                        .iter()
                        .map(|&d| tensor_shape_proto::Dimension {
                            value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
                        })
                        .collect(),
                }),
            })),
        }),
    }
}

fn output(name: &str) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: None,
    }
}

fn floats(name: &str, dims: &[i64], v: &[f32]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: 1,
        float_data: v.to_vec(),
        ..Default::default()
    }
}

fn ints(name: &str, v: &[i64]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: vec![v.len() as i64],
        data_type: 7,
        int64_data: v.to_vec(),
        ..Default::default()
    }
}

fn node(name: &str, op: &str, inputs: &[&str], outputs: &[&str], attrs: &[(&str, A)]) -> NodeProto {
    NodeProto {
        name: name.into(),
        op_type: op.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        attribute: attrs.iter().map(|(n, a)| attr(n, a)).collect(),
        ..Default::default()
    }
}

fn model(graph: GraphProto, opset: Option<i64>) -> ModelProto {
    ModelProto {
        ir_version: 8,
        opset_import: opset
            .map(|version| OperatorSetIdProto {
                domain: String::new(),
                version,
            })
            .into_iter()
            .collect(),
        graph: Some(graph),
        ..Default::default()
    }
}

/// Imports `m`, expecting one error that holds every needle.
fn expect_refused(what: &str, m: &ModelProto, needles: &[&str]) {
    match import_model(m, None, &ImportOptions::default()) {
        Ok(_) => panic!("{what}: imported without an error"),
        Err(e) => {
            let msg = e.to_string();
            for n in needles {
                assert!(msg.contains(n), "{what}: '{n}' missing from: {msg}");
            }
        }
    }
}

/// x: float32[1,4,8,8] → one node `N` → y, plus `extra` initializers.
fn one_node_model(
    op: &str,
    inputs: &[&str],
    attrs: &[(&str, A)],
    extra: Vec<TensorProto>,
) -> ModelProto {
    let mut all_inputs = vec!["x"];
    all_inputs.extend_from_slice(inputs);
    model(
        GraphProto {
            node: vec![node("N", op, &all_inputs, &["y"], attrs)],
            input: vec![tensor_input("x", &[1, 4, 8, 8])],
            output: vec![output("y")],
            initializer: extra,
            ..Default::default()
        },
        Some(17),
    )
}

#[test]
fn two_producers_of_one_name_are_refused() {
    let g = GraphProto {
        node: vec![
            node("a", "Relu", &["x"], &["t"], &[]),
            node("b", "Neg", &["x"], &["t"], &[]),
            node("c", "Abs", &["t"], &["y"], &[]),
        ],
        input: vec![tensor_input("x", &[4])],
        output: vec![output("y")],
        ..Default::default()
    };
    expect_refused(
        "two producers",
        &model(g, Some(17)),
        &["node 'b' (Neg)", "'t'", "node 'a' (Relu)"],
    );
}

#[test]
fn a_node_overwriting_a_graph_input_or_initializer_is_refused() {
    let g = GraphProto {
        node: vec![
            node("a", "Relu", &["w"], &["x"], &[]),
            node("b", "Add", &["x", "w"], &["y"], &[]),
        ],
        input: vec![tensor_input("x", &[4])],
        output: vec![output("y")],
        initializer: vec![floats("w", &[4], &[1.0; 4])],
        ..Default::default()
    };
    expect_refused(
        "overwrites input",
        &model(g.clone(), Some(17)),
        &["node 'a' (Relu)", "graph input 'x'"],
    );
    let mut g2 = g;
    g2.node[0] = node("a", "Relu", &["x"], &["w"], &[]);
    expect_refused(
        "overwrites initializer",
        &model(g2, Some(17)),
        &["node 'a' (Relu)", "initializer 'w'"],
    );
}

#[test]
fn values_used_before_they_are_produced_are_refused() {
    // Out of order, and a cycle.
    for (what, nodes) in [
        (
            "out of order",
            vec![
                node("b", "Neg", &["t"], &["y"], &[]),
                node("a", "Relu", &["x"], &["t"], &[]),
            ],
        ),
        (
            "cycle",
            vec![
                node("a", "Add", &["x", "u"], &["t"], &[]),
                node("b", "Neg", &["t"], &["u"], &[]),
                node("c", "Abs", &["u"], &["y"], &[]),
            ],
        ),
    ] {
        let g = GraphProto {
            node: nodes,
            input: vec![tensor_input("x", &[4])],
            output: vec![output("y")],
            ..Default::default()
        };
        expect_refused(
            what,
            &model(g, Some(17)),
            &["not produced by any earlier node"],
        );
    }
}

#[test]
fn unknown_or_missing_opsets_are_refused() {
    let g = GraphProto {
        node: vec![node("a", "Relu", &["x"], &["y"], &[])],
        input: vec![tensor_input("x", &[4])],
        output: vec![output("y")],
        ..Default::default()
    };
    expect_refused(
        "opset 99",
        &model(g.clone(), Some(99)),
        &["opset 99", "newest"],
    );
    expect_refused("opset 0", &model(g.clone(), Some(0)), &["opset 0"]);
    expect_refused("opset -3", &model(g.clone(), Some(-3)), &["opset -3"]);
    expect_refused(
        "no opset",
        &model(g.clone(), None),
        &["node 'a' (Relu)", "opset"],
    );
    // The newest known one is fine.
    let newest = nnc::onnx::import::MAX_OPSET;
    assert!(import_model(&model(g, Some(newest)), None, &ImportOptions::default()).is_ok());
}

/// Every op × bad attribute value: an error naming the node, never a panic or a model.
#[test]
fn out_of_range_attributes_are_refused_with_the_node() {
    let w = || floats("w", &[4, 4, 3, 3], &[0.5; 144]);
    let w_dw = || floats("w", &[4, 1, 3, 3], &[0.5; 36]);
    let scales = |v: [f32; 4]| floats("s", &[4], &v);
    let conv = |attrs: Vec<(&'static str, A)>| one_node_model("Conv", &["w"], &attrs, vec![w()]);
    let mut cases: Vec<(String, ModelProto)> = vec![];
    let mut add = |what: &str, m: ModelProto| cases.push((what.to_string(), m));
    for perm in [
        vec![0, 1, 2, -1],
        vec![0, 1, 2, 2],
        vec![0, 1, 2],
        vec![0, 1, 2, 4],
        vec![0, 1, 2, 3, 4],
    ] {
        add(
            &format!("Transpose perm {perm:?}"),
            one_node_model("Transpose", &[], &[("perm", A::Ints(perm))], vec![]),
        );
    }
    for s in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -2.0] {
        add(
            &format!("Resize scale {s}"),
            one_node_model("Resize", &["", "s"], &[], vec![scales([1.0, 1.0, s, 2.0])]),
        );
    }
    for policy in ["stretch", "not_larger"] {
        add(
            &format!("Resize negative size ({policy})"),
            one_node_model(
                "Resize",
                &["", "", "sz"],
                &[("keep_aspect_ratio_policy", A::S(policy))],
                vec![ints("sz", &[1, 4, -8, 8])],
            ),
        );
    }
    for (name, v) in [
        ("kernel_shape", vec![0, 3]),
        ("kernel_shape", vec![-1, 3]),
        ("strides", vec![0, 1]),
        ("strides", vec![-1, 1]),
        ("dilations", vec![0, 1]),
        ("dilations", vec![1, -2]),
        ("pads", vec![-1, 0, 0, 0]),
        ("pads", vec![0, 0]),
    ] {
        add(
            &format!("Conv {name} {v:?}"),
            conv(vec![(name, A::Ints(v))]),
        );
    }
    for g in [0, -1, 3] {
        add(
            &format!("Conv group {g}"),
            one_node_model("Conv", &["w"], &[("group", A::I(g))], vec![w_dw()]),
        );
    }
    for op in ["MaxPool", "AveragePool", "LpPool"] {
        for (name, v) in [
            ("kernel_shape", vec![0, 2]),
            ("kernel_shape", vec![2, -2]),
            ("strides", vec![0, 1]),
            ("pads", vec![-1, 0, 0, 0]),
        ] {
            let mut attrs = vec![("kernel_shape", A::Ints(vec![2, 2]))];
            attrs.retain(|(n, _)| *n != name);
            attrs.push((name, A::Ints(v.clone())));
            add(
                &format!("{op} {name} {v:?}"),
                one_node_model(op, &[], &attrs, vec![]),
            );
        }
    }
    add(
        "MaxPool dilations 0",
        one_node_model(
            "MaxPool",
            &[],
            &[
                ("kernel_shape", A::Ints(vec![2, 2])),
                ("dilations", A::Ints(vec![0, 1])),
            ],
            vec![],
        ),
    );
    for (op, attrs) in [
        ("ConvTranspose", vec![("strides", A::Ints(vec![0, 1]))]),
        ("ConvTranspose", vec![("group", A::I(0))]),
        (
            "ConvTranspose",
            vec![("output_padding", A::Ints(vec![-1, 0]))],
        ),
        ("ConvTranspose", vec![("dilations", A::Ints(vec![0, 1]))]),
    ] {
        let what = format!("{op} {}", attrs[0].0);
        add(&what, one_node_model(op, &["w"], &attrs, vec![w()]));
    }
    for (op, name, v) in [
        ("Concat", "axis", 4),
        ("Concat", "axis", -5),
        ("Softmax", "axis", 4),
        ("LogSoftmax", "axis", -5),
        ("Hardmax", "axis", 7),
        ("Flatten", "axis", 5),
        ("Flatten", "axis", -5),
        ("ArgMax", "axis", 4),
        ("ArgMin", "axis", -5),
        ("Split", "axis", 4),
        ("LayerNormalization", "axis", 4),
        ("DepthToSpace", "blocksize", 0),
        ("DepthToSpace", "blocksize", -2),
        ("DepthToSpace", "blocksize", 3),
        ("SpaceToDepth", "blocksize", 0),
        ("SpaceToDepth", "blocksize", 3),
        ("LRN", "size", 0),
        ("LRN", "size", -1),
    ] {
        add(
            &format!("{op} {name} {v}"),
            one_node_model(op, &[], &[(name, A::I(v))], vec![]),
        );
    }
    add(
        "Gather axis 4",
        one_node_model(
            "Gather",
            &["i"],
            &[("axis", A::I(4))],
            vec![ints("i", &[0])],
        ),
    );
    add(
        "GatherElements axis -5",
        one_node_model(
            "GatherElements",
            &["i"],
            &[("axis", A::I(-5))],
            vec![ints("i", &[0])],
        ),
    );
    add(
        "ReduceMean axes [4]",
        one_node_model("ReduceMean", &[], &[("axes", A::Ints(vec![4]))], vec![]),
    );
    add(
        "ReduceSum axes [4]",
        one_node_model("ReduceSum", &["a"], &[], vec![ints("a", &[4])]),
    );
    add(
        "Unsqueeze axes [9]",
        one_node_model("Unsqueeze", &["a"], &[], vec![ints("a", &[9])]),
    );
    add(
        "Squeeze axes [1]",
        one_node_model("Squeeze", &["a"], &[], vec![ints("a", &[1])]),
    );
    add(
        "Slice step 0",
        one_node_model(
            "Slice",
            &["st", "en", "ax", "sp"],
            &[],
            vec![
                ints("st", &[0]),
                ints("en", &[2]),
                ints("ax", &[1]),
                ints("sp", &[0]),
            ],
        ),
    );
    add(
        "Slice axis 4",
        one_node_model(
            "Slice",
            &["st", "en", "ax"],
            &[],
            vec![ints("st", &[0]), ints("en", &[2]), ints("ax", &[4])],
        ),
    );
    add(
        "Split sizes that do not add up",
        one_node_model(
            "Split",
            &["sp"],
            &[("axis", A::I(1))],
            vec![ints("sp", &[1, 1])],
        ),
    );
    add(
        "Split negative size",
        one_node_model(
            "Split",
            &["sp"],
            &[("axis", A::I(1))],
            vec![ints("sp", &[5, -1])],
        ),
    );
    add(
        "Tile negative repeat",
        one_node_model("Tile", &["r"], &[], vec![ints("r", &[1, 1, -1, 1])]),
    );
    add(
        "Reshape -2",
        one_node_model("Reshape", &["sh"], &[], vec![ints("sh", &[1, -2, 8, 8])]),
    );
    add(
        "Reshape two -1",
        one_node_model("Reshape", &["sh"], &[], vec![ints("sh", &[-1, -1, 8, 8])]),
    );
    add(
        "GroupNormalization 3 groups of 4 channels",
        one_node_model(
            "GroupNormalization",
            &["sc", "b"],
            &[("num_groups", A::I(3))],
            vec![floats("sc", &[4], &[1.0; 4]), floats("b", &[4], &[0.0; 4])],
        ),
    );
    add(
        "GroupNormalization 0 groups",
        one_node_model(
            "GroupNormalization",
            &["sc", "b"],
            &[("num_groups", A::I(0))],
            vec![floats("sc", &[4], &[1.0; 4]), floats("b", &[4], &[0.0; 4])],
        ),
    );
    add(
        "CumSum axis 4",
        one_node_model("CumSum", &["a"], &[], vec![ints("a", &[4])]),
    );
    add(
        "TopK axis 4",
        one_node_model("TopK", &["k"], &[("axis", A::I(4))], vec![ints("k", &[1])]),
    );
    add(
        "TopK negative k",
        one_node_model("TopK", &["k"], &[], vec![ints("k", &[-1])]),
    );
    add(
        "EyeLike dtype 99",
        one_node_model(
            "EyeLike",
            &[],
            &[("k", A::I(0)), ("dtype", A::I(99))],
            vec![],
        ),
    );
    add(
        "Resize bad mode",
        one_node_model(
            "Resize",
            &["", "s"],
            &[("mode", A::S("bogus"))],
            vec![scales([1.0, 1.0, 2.0, 2.0])],
        ),
    );

    let mut failures = vec![];
    for (what, m) in &cases {
        let result = std::panic::catch_unwind(|| import_model(m, None, &ImportOptions::default()));
        match result {
            Err(_) => failures.push(format!("{what}: PANIC")),
            Ok(Ok(_)) => failures.push(format!("{what}: imported without an error")),
            Ok(Err(e)) => {
                let msg = e.to_string();
                if !msg.contains("node 'N'") {
                    failures.push(format!("{what}: error does not name the node: {msg}"));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// A group that cannot divide the channels (2^63 - 1 once overflowed `w.shape[1] ×
/// group` in shape inference) is one error naming the attribute, for Conv and
/// ConvTranspose alike.
#[test]
fn impossible_groups_are_refused_naming_the_attribute() {
    let w = || floats("w", &[4, 4, 3, 3], &[0.5; 144]);
    for op in ["Conv", "ConvTranspose"] {
        for g in [i64::MAX, 1 << 62, 3, 8] {
            let m = one_node_model(op, &["w"], &[("group", A::I(g))], vec![w()]);
            expect_refused(
                &format!("{op} group {g}"),
                &m,
                &[
                    "'N'",
                    op,
                    &format!("attribute 'group' is {g}"),
                    "must divide",
                ],
            );
        }
    }
}

/// Flags (0/1 attributes) outside {0, 1} are refused naming the attribute: runtimes
/// read them differently (onnxruntime: `largest == 1`, `sorted` 1000 as unsorted; the
/// reference evaluator: nonzero), so nnc takes none of the readings.
#[test]
fn flags_outside_zero_and_one_are_refused_naming_the_attribute() {
    let k = || ints("k", &[2]);
    let cases: Vec<(&str, Vec<&str>, &str, Vec<TensorProto>)> = vec![
        ("TopK", vec!["k"], "largest", vec![k()]),
        ("TopK", vec!["k"], "sorted", vec![k()]),
        ("Unique", vec![], "sorted", vec![]),
        ("ReduceSum", vec![], "keepdims", vec![]),
        ("ArgMax", vec![], "select_last_index", vec![]),
        ("CumSum", vec!["k"], "exclusive", vec![ints("k", &[1])]),
        ("Mod", vec!["x"], "fmod", vec![]),
    ];
    for (op, inputs, flag, extra) in cases {
        for v in [3, 1 << 40, -1, 1000] {
            let m = one_node_model(op, &inputs, &[(flag, A::I(v))], extra.clone());
            expect_refused(
                &format!("{op} {flag}={v}"),
                &m,
                &["'N'", op, &format!("attribute '{flag}' is {v}"), "0 or 1"],
            );
        }
        // 0 and 1 still import.
        for v in [0, 1] {
            let m = one_node_model(op, &inputs, &[(flag, A::I(v))], extra.clone());
            if let Err(e) = import_model(&m, None, &ImportOptions::default()) {
                panic!("{op} {flag}={v}: {e}");
            }
        }
    }
}
