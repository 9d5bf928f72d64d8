//! Code generation is linear in the number of inputs, outputs and operands of a node
//! (issue 18: a 4,000-output graph took 36 s and 1.8 GB, a Concat of 4,000 inputs 45 s
//! and 3.1 GB). Each wide graph is compiled through the whole pipeline (import, passes,
//! code generation, .so and header) at n and 4n: the best of three times must grow
//! well below the 16× a quadratic step gives, and stay under an absolute cap. Wide
//! nodes (operand tables) compute what the interpreter computes.
//!
//! Run with `cargo test -p nnc --test codegen_scaling --release`.

#[path = "common/graphs.rs"]
mod graphs;
#[path = "common/models.rs"]
mod models;
#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use models::{Attr, ModelBuilder};
use nnc::codegen::{CompileOptions, Target};
use nnc::ir::Tensor;
use nnc::onnx::proto::{attribute_type, AttributeProto, NodeProto};
use nnc::onnx::ImportOptions;
use std::path::Path;
use std::time::Instant;

#[derive(Clone, Copy, Debug)]
enum Wide {
    /// `n` Relu nodes of one input, each a graph output.
    Outputs,
    /// One Concat of `n` graph inputs.
    ConcatOfInputs,
    /// One Split of a graph input into `n` graph outputs.
    SplitIntoOutputs,
}

fn wide_model(kind: Wide, n: usize) -> Vec<u8> {
    let mut m = ModelBuilder::new(1);
    match kind {
        Wide::Outputs => {
            let x = m.input("x", &[1, 4]);
            for _ in 0..n {
                let y = m.node("Relu", &[&x], vec![]);
                m.output(&y);
            }
        }
        Wide::ConcatOfInputs => {
            let xs: Vec<String> = (0..n).map(|i| m.input(&format!("x{i}"), &[1, 4])).collect();
            let xs: Vec<&str> = xs.iter().map(String::as_str).collect();
            let y = m.node("Concat", &xs, vec![("axis", Attr::I(1))]);
            m.output(&y);
        }
        Wide::SplitIntoOutputs => {
            let x = m.input("x", &[1, 4 * n]);
            let split = m.int_init(&vec![4; n]);
            let outs: Vec<String> = (0..n).map(|i| format!("y{i}")).collect();
            m.graph.node.push(NodeProto {
                input: vec![x, split],
                output: outs.clone(),
                name: "split".into(),
                op_type: "Split".into(),
                attribute: vec![AttributeProto {
                    name: "axis".into(),
                    r#type: attribute_type::INT,
                    i: 1,
                    ..Default::default()
                }],
                ..Default::default()
            });
            for o in &outs {
                m.output(o);
            }
        }
    }
    m.encode()
}

/// Seconds to compile `model` and write its .so and header, as `nnc compile` does.
fn compile_seconds(model: &[u8], dir: &Path) -> f64 {
    let path = dir.join("wide.onnx");
    std::fs::write(&path, model).expect("write the model");
    let start = Instant::now();
    let compiled = nnc::driver::compile_model(
        &path,
        &ImportOptions::default(),
        &CompileOptions::new(Target::host()),
    )
    .expect("the wide model compiles");
    nnc::driver::write_artifacts(&compiled, &dir.join("wide.so"), "wide").expect("written");
    start.elapsed().as_secs_f64()
}

fn best_of_three(model: &[u8], dir: &Path) -> f64 {
    (0..3)
        .map(|_| compile_seconds(model, dir))
        .fold(f64::INFINITY, f64::min)
}

#[test]
fn compile_time_grows_linearly_with_width() {
    let dir = tempfile::tempdir().expect("temp dir");
    const N: usize = 300;
    let mut failures = vec![];
    for kind in [Wide::Outputs, Wide::ConcatOfInputs, Wide::SplitIntoOutputs] {
        let small = best_of_three(&wide_model(kind, N), dir.path());
        let large = best_of_three(&wide_model(kind, 4 * N), dir.path());
        // 4× the width: about 4× the time when linear (less, with the fixed costs), 16×
        // when quadratic. The floor keeps a tiny `small` from inflating the ratio.
        let ratio = large / small.max(0.02);
        println!(
            "{kind:?}: n={N} {small:.3} s, n={} {large:.3} s, ratio {ratio:.1}",
            4 * N
        );
        if ratio > 8.0 || large > 10.0 {
            failures.push(format!(
                "{kind:?}: {small:.3} s → {large:.3} s (×{ratio:.1})"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "superlinear code generation: {failures:?}"
    );
}

/// Imports `model`, runs it compiled and in the interpreter on `inputs`, and requires
/// identical outputs (the wide nodes only move data).
fn compiled_matches_interpreter(model: &[u8], inputs: &[Tensor]) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("wide.onnx");
    std::fs::write(&path, model).expect("write the model");
    let compiled = nnc::driver::compile_model(
        &path,
        &ImportOptions::default(),
        &CompileOptions::new(Target::host()),
    )
    .expect("the wide model compiles");
    let g = &compiled.graph;
    let expected = nnc::interp::run_graph(g, inputs).expect("interpreter");
    let actual = runner::Compiled::new(g)
        .and_then(|c| c.run(g, inputs))
        .expect("compiled run");
    assert_eq!(actual.len(), expected.len());
    for (i, (a, e)) in actual.iter().zip(&expected).enumerate() {
        assert_eq!(a, e, "output {i}");
    }
}

fn numbered(shape: &[usize], from: usize) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec(shape, (from..from + n).map(|v| v as f32).collect())
}

/// More operands than `MAX_DIRECT_OPERANDS`: the node reads its addresses from an
/// operand table in the workspace.
#[test]
fn concat_of_many_inputs_matches_interpreter() {
    let n = 3 * nnc::codegen::plan::MAX_DIRECT_OPERANDS;
    let inputs: Vec<Tensor> = (0..n).map(|i| numbered(&[1, 4], 4 * i)).collect();
    compiled_matches_interpreter(&wide_model(Wide::ConcatOfInputs, n), &inputs);
}

#[test]
fn split_into_many_outputs_matches_interpreter() {
    let n = 3 * nnc::codegen::plan::MAX_DIRECT_OPERANDS;
    compiled_matches_interpreter(
        &wide_model(Wide::SplitIntoOutputs, n),
        &[numbered(&[1, 4 * n], 0)],
    );
}

#[test]
fn many_outputs_match_interpreter() {
    let n = 3 * nnc::codegen::plan::MAX_DIRECT_OPERANDS;
    let x = Tensor::from_vec(&[1, 4], vec![-1.0f32, 2.0, -3.0, 4.0]);
    compiled_matches_interpreter(&wide_model(Wide::Outputs, n), &[x]);
}
