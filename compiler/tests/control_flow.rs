//! ONNX control flow (If, Loop, Scan) imported with static shapes: small models built
//! from the protobuf types, imported, optimized, compiled for the host, run, and
//! compared with outputs computed by hand from the ONNX semantics.

#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use nnc::codegen::Target;
use nnc::ir::{Graph, Tensor};
use nnc::onnx::proto::{
    attribute_type, tensor_shape_proto, type_proto, AttributeProto, GraphProto, ModelProto,
    NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use nnc::onnx::{import_model, ImportOptions, Imported};
use nnc::ops::Op;

const FLOAT: i32 = 1;
const INT64: i32 = 7;
const BOOL: i32 = 9;

fn value_info(name: &str, elem_type: i32, shape: &[usize]) -> ValueInfoProto {
    let dim = shape
        .iter()
        .map(|&d| tensor_shape_proto::Dimension {
            value: Some(tensor_shape_proto::dimension::Value::DimValue(d as i64)),
        })
        .collect();
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type,
                shape: Some(TensorShapeProto { dim }),
            })),
        }),
    }
}

/// A subgraph input or output: name only (types come from what is bound).
fn name_only(name: &str) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: None,
    }
}

fn floats(name: &str, shape: &[usize], data: &[f32]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: shape.iter().map(|&d| d as i64).collect(),
        data_type: FLOAT,
        float_data: data.to_vec(),
        ..Default::default()
    }
}

fn int64s(name: &str, shape: &[usize], data: &[i64]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: shape.iter().map(|&d| d as i64).collect(),
        data_type: INT64,
        int64_data: data.to_vec(),
        ..Default::default()
    }
}

fn bools(name: &str, data: bool) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: vec![],
        data_type: BOOL,
        int32_data: vec![i32::from(data)],
        ..Default::default()
    }
}

enum A {
    I(i64),
    Ints(Vec<i64>),
    G(GraphProto),
}

fn node(op: &str, inputs: &[&str], outputs: &[&str], attrs: Vec<(&str, A)>) -> NodeProto {
    let attribute = attrs
        .into_iter()
        .map(|(n, a)| {
            let mut p = AttributeProto {
                name: n.into(),
                ..Default::default()
            };
            match a {
                A::I(i) => {
                    p.r#type = attribute_type::INT;
                    p.i = i;
                }
                A::Ints(v) => {
                    p.r#type = attribute_type::INTS;
                    p.ints = v;
                }
                A::G(g) => {
                    p.r#type = attribute_type::GRAPH;
                    p.g = Some(Box::new(g));
                }
            }
            p
        })
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

fn subgraph(
    name: &str,
    inputs: &[&str],
    nodes: Vec<NodeProto>,
    outputs: &[&str],
    initializer: Vec<TensorProto>,
) -> GraphProto {
    GraphProto {
        name: name.into(),
        node: nodes,
        input: inputs.iter().map(|n| name_only(n)).collect(),
        output: outputs.iter().map(|n| name_only(n)).collect(),
        initializer,
        ..Default::default()
    }
}

fn import(graph: GraphProto) -> Imported {
    let model = ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(graph),
        ..Default::default()
    };
    import_model(&model, None, &ImportOptions::default()).expect("imports")
}

fn import_ok(graph: GraphProto) -> Graph {
    let imported = import(graph);
    assert!(
        imported.unsupported.is_empty(),
        "unsupported: {:?}",
        imported.unsupported
    );
    imported.graph
}

/// Optimizes and compiles `g` for the host and runs it on `inputs`.
fn run(g: &Graph, inputs: &[Tensor]) -> Vec<Tensor> {
    let mut g = g.clone();
    nnc::passes::optimize(&mut g).expect("passes run");
    runner::run_compiled(&g, inputs, Target::host()).unwrap_or_else(|e| panic!("{e}\n{g}"))
}

fn assert_close(got: &Tensor, shape: &[usize], want: &[f32]) {
    assert_eq!(got.shape(), shape);
    let got = got.to_f64_vec();
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - *w as f64).abs() <= 1e-5 * (1.0 + w.abs() as f64),
            "element {i}: got {g}, want {w} (all: {got:?})"
        );
    }
}

fn count(g: &Graph, pred: impl Fn(&Op) -> bool) -> usize {
    g.nodes.iter().filter(|n| pred(&n.op)).count()
}

#[test]
fn if_with_constant_condition_imports_only_the_taken_branch() {
    // cond = 3 > 2, folded at import. The then branch adds a subgraph-local initializer
    // to an outer value; the else branch holds an op nnc does not have, which must
    // never be looked at.
    let then_branch = subgraph(
        "then",
        &[],
        vec![node("Add", &["x", "local"], &["then_out"], vec![])],
        &["then_out"],
        vec![floats("local", &[3], &[10.0, 20.0, 30.0])],
    );
    let else_branch = subgraph(
        "else",
        &[],
        vec![node("SequenceConstruct", &["x"], &["else_out"], vec![])],
        &["else_out"],
        vec![],
    );
    let graph = GraphProto {
        name: "if_const".into(),
        initializer: vec![int64s("three", &[], &[3]), int64s("two", &[], &[2])],
        node: vec![
            node("Greater", &["three", "two"], &["cond"], vec![]),
            node(
                "If",
                &["cond"],
                &["y"],
                vec![
                    ("then_branch", A::G(then_branch)),
                    ("else_branch", A::G(else_branch)),
                ],
            ),
        ],
        input: vec![value_info("x", FLOAT, &[3])],
        output: vec![name_only("y")],
        ..Default::default()
    };
    let g = import_ok(graph);
    assert_eq!(count(&g, |op| matches!(op, Op::Where)), 0, "{g}");
    let x = Tensor::from_vec(&[3], vec![1.0f32, 2.0, 3.0]);
    assert_close(&run(&g, &[x])[0], &[3], &[11.0, 22.0, 33.0]);
}

fn runtime_if(else_shape: &[usize]) -> GraphProto {
    // then: x * 2; else: (x - 1) reshaped to `else_shape`.
    let then_branch = subgraph(
        "then",
        &[],
        vec![node("Mul", &["x", "two"], &["then_out"], vec![])],
        &["then_out"],
        vec![],
    );
    let dims: Vec<i64> = else_shape.iter().map(|&d| d as i64).collect();
    let else_branch = subgraph(
        "else",
        &[],
        vec![
            node("Sub", &["x", "one"], &["diff"], vec![]),
            node("Reshape", &["diff", "else_shape"], &["else_out"], vec![]),
        ],
        &["else_out"],
        vec![int64s("else_shape", &[dims.len()], &dims)],
    );
    GraphProto {
        name: "if_runtime".into(),
        initializer: vec![floats("two", &[], &[2.0]), floats("one", &[], &[1.0])],
        node: vec![node(
            "If",
            &["cond"],
            &["y"],
            vec![
                ("then_branch", A::G(then_branch)),
                ("else_branch", A::G(else_branch)),
            ],
        )],
        input: vec![
            value_info("cond", BOOL, &[]),
            value_info("x", FLOAT, &[2, 3]),
        ],
        output: vec![name_only("y")],
        ..Default::default()
    }
}

#[test]
fn if_with_runtime_condition_selects_with_where() {
    let g = import_ok(runtime_if(&[2, 3]));
    assert_eq!(count(&g, |op| matches!(op, Op::Where)), 1, "{g}");
    let xs = vec![0.5f32, -1.0, 2.0, 3.5, 0.0, -4.0];
    let x = Tensor::from_vec(&[2, 3], xs.clone());
    let doubled: Vec<f32> = xs.iter().map(|v| v * 2.0).collect();
    let less: Vec<f32> = xs.iter().map(|v| v - 1.0).collect();
    let out = run(&g, &[Tensor::scalar(true), x.clone()]);
    assert_close(&out[0], &[2, 3], &doubled);
    let out = run(&g, &[Tensor::scalar(false), x]);
    assert_close(&out[0], &[2, 3], &less);
}

#[test]
fn if_with_runtime_condition_and_branches_of_different_shapes_is_unsupported() {
    let imported = import(runtime_if(&[3, 2]));
    let [u] = imported.unsupported.as_slice() else {
        panic!("one unsupported node expected: {:?}", imported.unsupported);
    };
    assert_eq!(u.op, "If");
    assert_eq!(u.node, "If_y");
    assert!(
        u.reason.contains("computed at run time")
            && u.reason.contains("differs between the branches"),
        "{}",
        u.reason
    );
    assert!(
        u.reason.contains("float32[2,3]") && u.reason.contains("float32[3,2]"),
        "{}",
        u.reason
    );
}

/// Loop body: `acc_out = acc_in + x[i]` (x an outer value, i the iteration number),
/// scan output `acc_out * w` where `w` is 1 in the first two iterations and 10 after
/// (a nested If on `i < 2`, folded per iteration), condition out `cond_expr`.
fn loop_graph(trip_count: Option<i64>, cond_nodes: Vec<NodeProto>) -> GraphProto {
    let small = subgraph(
        "small",
        &[],
        vec![node("Identity", &["one_f"], &["w_small"], vec![])],
        &["w_small"],
        vec![],
    );
    let large = subgraph(
        "large",
        &[],
        vec![node("Identity", &["ten"], &["w_large"], vec![])],
        &["w_large"],
        vec![floats("ten", &[], &[10.0])],
    );
    let mut body_nodes = vec![
        node("Gather", &["x", "i"], &["row"], vec![("axis", A::I(0))]),
        node("Add", &["acc_in", "row"], &["acc_out"], vec![]),
        node("Less", &["i", "two_i"], &["early"], vec![]),
        node(
            "If",
            &["early"],
            &["w"],
            vec![("then_branch", A::G(small)), ("else_branch", A::G(large))],
        ),
        node("Mul", &["acc_out", "w"], &["scan_out"], vec![]),
    ];
    body_nodes.extend(cond_nodes);
    let body = subgraph(
        "body",
        &["i", "cond_in", "acc_in"],
        body_nodes,
        &["cond_out", "acc_out", "scan_out"],
        vec![int64s("two_i", &[], &[2])],
    );
    let mut initializer = vec![
        floats("one_f", &[], &[1.0]),
        floats("acc0", &[2], &[0.0, 0.0]),
    ];
    let trip_name = match trip_count {
        Some(n) => {
            initializer.push(int64s("trip", &[], &[n]));
            "trip"
        }
        None => "",
    };
    initializer.push(bools("cond0", true));
    GraphProto {
        name: "loop".into(),
        initializer,
        node: vec![node(
            "Loop",
            &[trip_name, "cond0", "acc0"],
            &["acc", "scanned"],
            vec![("body", A::G(body))],
        )],
        input: vec![value_info("x", FLOAT, &[5, 2])],
        output: vec![name_only("acc"), name_only("scanned")],
        ..Default::default()
    }
}

fn loop_input() -> (Tensor, Vec<[f32; 2]>) {
    let rows = vec![
        [1.0, -1.0],
        [2.0, 0.5],
        [-3.0, 4.0],
        [0.25, 0.25],
        [5.0, 6.0],
    ];
    let flat: Vec<f32> = rows.iter().flatten().copied().collect();
    (Tensor::from_vec(&[5, 2], flat), rows)
}

/// The running sums of the first `n` rows, and the scan outputs (times 1, then 10).
fn loop_expected(rows: &[[f32; 2]], n: usize) -> ([f32; 2], Vec<f32>) {
    let mut acc = [0.0f32; 2];
    let mut scanned = vec![];
    for (i, r) in rows.iter().take(n).enumerate() {
        acc = [acc[0] + r[0], acc[1] + r[1]];
        let w = if i < 2 { 1.0 } else { 10.0 };
        scanned.extend([acc[0] * w, acc[1] * w]);
    }
    (acc, scanned)
}

#[test]
fn loop_with_constant_trip_count_is_unrolled() {
    let cond = vec![node("Identity", &["cond_in"], &["cond_out"], vec![])];
    let g = import_ok(loop_graph(Some(4), cond));
    let (x, rows) = loop_input();
    let out = run(&g, &[x]);
    let (acc, scanned) = loop_expected(&rows, 4);
    assert_close(&out[0], &[2], &acc);
    assert_close(&out[1], &[4, 2], &scanned);
}

#[test]
fn loop_stops_where_its_constant_condition_turns_false() {
    // No trip count; cond_out = i < 2 is known per iteration: iterations 0, 1 and 2
    // run (the condition computed by iteration 2 is false).
    let cond = vec![node("Less", &["i", "two_i"], &["cond_out"], vec![])];
    let g = import_ok(loop_graph(None, cond));
    let (x, rows) = loop_input();
    let out = run(&g, &[x]);
    let (acc, scanned) = loop_expected(&rows, 3);
    assert_close(&out[0], &[2], &acc);
    assert_close(&out[1], &[3, 2], &scanned);
}

#[test]
fn loop_with_data_dependent_condition_is_unsupported() {
    // cond_out = sum(acc) < 3 depends on the input x.
    let cond = vec![
        node(
            "ReduceSum",
            &["acc_out"],
            &["total"],
            vec![("keepdims", A::I(0))],
        ),
        node("Less", &["total", "three_f"], &["cond_out"], vec![]),
    ];
    let mut graph = loop_graph(Some(4), cond);
    graph.initializer.push(floats("three_f", &[], &[3.0]));
    let imported = import(graph);
    let [u] = imported.unsupported.as_slice() else {
        panic!("one unsupported node expected: {:?}", imported.unsupported);
    };
    assert_eq!(u.op, "Loop");
    assert!(
        u.reason.contains("condition") && u.reason.contains("computed at run time in iteration 0"),
        "{}",
        u.reason
    );
}

#[test]
fn loop_without_condition_input_ignores_the_body_condition() {
    // The same data-dependent condition, but no condition input: ONNX ignores the
    // body's condition output then, and the loop runs its trip count.
    let cond = vec![
        node(
            "ReduceSum",
            &["acc_out"],
            &["total"],
            vec![("keepdims", A::I(0))],
        ),
        node("Less", &["total", "three_f"], &["cond_out"], vec![]),
    ];
    let mut graph = loop_graph(Some(4), cond);
    graph.initializer.push(floats("three_f", &[], &[3.0]));
    graph.node[0].input[1] = String::new();
    let g = import_ok(graph);
    let (x, rows) = loop_input();
    let out = run(&g, &[x]);
    let (acc, scanned) = loop_expected(&rows, 4);
    assert_close(&out[0], &[2], &acc);
    assert_close(&out[1], &[4, 2], &scanned);
}

#[test]
fn scan_stacks_outputs_along_the_requested_axes_and_directions() {
    // States: a running sum s [2]. Scan inputs: x [3, 2] forward along axis 0, and
    // r [2, 3] backward along axis 1. Body: s' = s + x_t * k + r_t (k a subgraph-local
    // initializer), outputs s' stacked forward on axis 0, and s' stacked in reverse
    // on axis 1 (-1).
    let body = subgraph(
        "scan_body",
        &["s_in", "x_t", "r_t"],
        vec![
            node("Mul", &["x_t", "k"], &["scaled"], vec![]),
            node("Add", &["s_in", "scaled"], &["partial"], vec![]),
            node("Add", &["partial", "r_t"], &["s_out"], vec![]),
            node("Identity", &["s_out"], &["fwd"], vec![]),
            node("Identity", &["s_out"], &["bwd"], vec![]),
        ],
        &["s_out", "fwd", "bwd"],
        vec![floats("k", &[], &[2.0])],
    );
    let graph = GraphProto {
        name: "scan".into(),
        initializer: vec![floats("s0", &[2], &[0.5, -0.5])],
        node: vec![node(
            "Scan",
            &["s0", "x", "r"],
            &["s", "fwd_all", "bwd_all"],
            vec![
                ("body", A::G(body)),
                ("num_scan_inputs", A::I(2)),
                ("scan_input_axes", A::Ints(vec![0, 1])),
                ("scan_input_directions", A::Ints(vec![0, 1])),
                ("scan_output_axes", A::Ints(vec![0, -1])),
                ("scan_output_directions", A::Ints(vec![0, 1])),
            ],
        )],
        input: vec![
            value_info("x", FLOAT, &[3, 2]),
            value_info("r", FLOAT, &[2, 3]),
        ],
        output: vec![name_only("s"), name_only("fwd_all"), name_only("bwd_all")],
        ..Default::default()
    };
    let g = import_ok(graph);
    let x = [[1.0f32, 2.0], [3.0, -1.0], [0.5, 0.25]];
    let r = [[10.0f32, 20.0, 30.0], [-1.0, -2.0, -3.0]];
    let inputs = [
        Tensor::from_vec(&[3, 2], x.iter().flatten().copied().collect::<Vec<_>>()),
        Tensor::from_vec(&[2, 3], r.iter().flatten().copied().collect::<Vec<_>>()),
    ];
    let out = run(&g, &inputs);

    let mut s = [0.5f32, -0.5];
    let mut states = vec![];
    for (t, xt) in x.iter().enumerate() {
        let col = 2 - t; // r is read backwards along axis 1
        s = [
            s[0] + xt[0] * 2.0 + r[0][col],
            s[1] + xt[1] * 2.0 + r[1][col],
        ];
        states.push(s);
    }
    let fwd: Vec<f32> = states.iter().flatten().copied().collect();
    // Axis 1 of [2, 3], iteration t at position 2 - t: bwd[j][p] = states[2 - p][j].
    let bwd: Vec<f32> = (0..2)
        .flat_map(|j| (0..3).map(move |p| (j, p)))
        .map(|(j, p)| states[2 - p][j])
        .collect();
    assert_close(&out[0], &[2], &s);
    assert_close(&out[1], &[3, 2], &fwd);
    assert_close(&out[2], &[2, 3], &bwd);
}

#[test]
fn scan_nested_in_scan_sees_every_enclosing_scope() {
    // Outer scan over the rows of m [2, 3]; its body scans the row's elements,
    // accumulating e * bias (bias an outer graph input two levels up) into the
    // running total carried by the outer scan.
    let inner = subgraph(
        "inner",
        &["acc_in", "e"],
        vec![
            node("Mul", &["e", "bias"], &["term"], vec![]),
            node("Add", &["acc_in", "term"], &["acc_out"], vec![]),
        ],
        &["acc_out"],
        vec![],
    );
    let outer = subgraph(
        "outer",
        &["total_in", "row"],
        vec![node(
            "Scan",
            &["total_in", "row"],
            &["total_out"],
            vec![("body", A::G(inner)), ("num_scan_inputs", A::I(1))],
        )],
        &["total_out"],
        vec![],
    );
    let graph = GraphProto {
        name: "nested".into(),
        initializer: vec![floats("zero", &[], &[0.0])],
        node: vec![node(
            "Scan",
            &["zero", "m"],
            &["total"],
            vec![("body", A::G(outer)), ("num_scan_inputs", A::I(1))],
        )],
        input: vec![
            value_info("m", FLOAT, &[2, 3]),
            value_info("bias", FLOAT, &[]),
        ],
        output: vec![name_only("total")],
        ..Default::default()
    };
    let g = import_ok(graph);
    let m = vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
    let out = run(&g, &[Tensor::from_vec(&[2, 3], m), Tensor::scalar(0.5f32)]);
    assert_close(&out[0], &[], &[10.5]);
}
