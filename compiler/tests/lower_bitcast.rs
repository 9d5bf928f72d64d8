//! BitCast code generation: the output holds the input's bytes unchanged, whether the
//! node is a copy (its output is a graph output) or a view inside the arena (between two
//! computing nodes). Compiled for the host and run, compared bit for bit with the
//! reference interpreter; also compiled for aarch64.
//!
//! Run with `cargo test -p nnc --test lower_bitcast --release`.

#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use nnc::codegen::{compile_graph, Arch, CompileOptions, Target};
use nnc::ir::{DType, Graph, Node, Tensor, TensorType, ValueId};
use nnc::ops::{infer_types, BinaryOp, Op, UnaryOp};
use runner::run_compiled;

/// Appends `op` on `inputs` to `g` and returns its single output.
fn push(g: &mut Graph, op: Op, inputs: &[ValueId]) -> ValueId {
    let types: Vec<Option<TensorType>> = inputs.iter().map(|v| Some(g.ty(*v).clone())).collect();
    let ty = infer_types(&op, &types).expect("shape inference").remove(0);
    let out = g.add_value(format!("v{}", g.values.len()), ty, None);
    g.nodes.push(Node {
        name: format!("n{}", g.nodes.len()),
        onnx_op: op.name(),
        op,
        inputs: inputs.iter().map(|v| Some(*v)).collect(),
        outputs: vec![out],
    });
    out
}

fn check(name: &str, g: &Graph, inputs: &[Tensor]) {
    let expected = nnc::interp::run_graph(g, inputs).expect("interpreter");
    let actual = run_compiled(g, inputs, Target::host()).unwrap_or_else(|e| panic!("{name}: {e}"));
    for (a, e) in actual.iter().zip(&expected) {
        assert_eq!(a.ty(), e.ty(), "{name}");
        assert_eq!(a.to_le_bytes(), e.to_le_bytes(), "{name}");
    }
    let arm = CompileOptions {
        target: Target::new(Arch::Aarch64, None).expect("aarch64 target"),
        prefix: String::new(),
        weights: Default::default(),
        kernels: Default::default(),
        index_checks: Default::default(),
    };
    compile_graph(g, &arm).unwrap_or_else(|e| panic!("{name}: aarch64: {e}"));
}

fn values(dtype: DType, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|i| (i as f64 - 3.5) * 1.25).collect();
    Tensor::from_vec(shape, v).cast(dtype)
}

#[test]
fn bitcast_to_a_graph_output_copies_the_bytes() {
    let cases = [
        (DType::F32, DType::I32),
        (DType::I64, DType::F64),
        (DType::U16, DType::I16),
        (DType::F16, DType::U16),
        (DType::I8, DType::U8),
    ];
    for (from, to) in cases {
        for shape in [vec![], vec![7], vec![3, 5]] {
            let x = values(from, &shape);
            let mut g = Graph::default();
            let xv = g.add_value("x".into(), x.ty(), None);
            g.inputs.push(xv);
            let y = push(&mut g, Op::BitCast { to }, &[xv]);
            g.outputs.push(y);
            check(&format!("{from}->{to} {shape:?}"), &g, &[x]);
        }
    }
}

#[test]
fn bitcast_between_nodes_is_a_view() {
    // Neg (float32) → BitCast (int32) → BitwiseXor with the sign bit: the bits of |x|
    // for negative x, read back as int32.
    let x = values(DType::F32, &[4, 9]);
    let mut g = Graph::default();
    let xv = g.add_value("x".into(), x.ty(), None);
    g.inputs.push(xv);
    let sign = g.add_value(
        "sign".into(),
        TensorType::new(DType::I32, vec![]),
        Some(Tensor::scalar(i32::MIN)),
    );
    let n = push(&mut g, Op::Unary(UnaryOp::Neg), &[xv]);
    let bits = push(&mut g, Op::BitCast { to: DType::I32 }, &[n]);
    let y = push(&mut g, Op::Binary(BinaryOp::BitwiseXor), &[bits, sign]);
    g.outputs.push(y);
    check("neg/bitcast/xor", &g, &[x]);
    let plan = nnc::codegen::plan::plan_memory(&g, &[0, 0, 0]);
    assert!(plan.is_view[1], "the BitCast aliases its input");
}

#[test]
fn bitcast_rejects_a_different_width() {
    let types = [Some(TensorType::new(DType::F32, vec![2]))];
    let err = infer_types(&Op::BitCast { to: DType::I64 }, &types).unwrap_err();
    assert!(err.contains("widths differ"), "{err}");
}
