//! aarch64: random models compiled for aarch64-unknown-linux-gnu, loaded by the C
//! harness (tests/harness/nnc_run.c, built with aarch64-linux-gnu-gcc) under qemu, and
//! compared with the reference interpreter.

#[path = "common/graphs.rs"]
mod graphs;
#[path = "common/models.rs"]
mod models;
#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use std::path::Path;

use graphs::{rel_err, Rng};
use nnc::ir::Tensor;
use nnc::onnx::proto::ModelProto;
use nnc::onnx::{import_model, ImportOptions};
use prost::Message;

fn check_on_aarch64(harness: &Path, name: &str, bytes: Vec<u8>, cpu: Option<&str>, seed: u64) {
    let model = ModelProto::decode(bytes.as_slice()).unwrap();
    let g = import_model(&model, None, &ImportOptions::default())
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .graph;
    let mut rng = Rng::new(seed);
    let inputs: Vec<Tensor> = g
        .inputs
        .iter()
        .map(|v| Tensor::from_vec(&g.ty(*v).shape, rng.f32s(g.ty(*v).numel(), 1.0)))
        .collect();
    let expected = nnc::interp::run_graph(&g, &inputs).unwrap();
    let actual =
        runner::run_on_aarch64(harness, &g, &inputs, cpu).unwrap_or_else(|e| panic!("{name}: {e}"));
    for (k, (a, e)) in actual.iter().zip(&expected).enumerate() {
        let err = rel_err(a, e);
        println!(
            "{name} (aarch64 {}) output {k}: rel err {err:.2e}",
            cpu.unwrap_or("armv8")
        );
        assert!(
            err <= 1e-4,
            "{name} output {k} on aarch64: relative error {err:.3e}"
        );
    }
}

#[test]
fn random_models_match_the_interpreter_on_aarch64_under_qemu() {
    let Some(harness) = runner::aarch64_harness() else {
        return;
    };
    for seed in 1..3 {
        check_on_aarch64(
            harness,
            &format!("elementwise{seed}"),
            models::elementwise(seed).0,
            None,
            seed,
        );
        check_on_aarch64(
            harness,
            &format!("transformer{seed}"),
            models::transformer(seed).0,
            None,
            seed,
        );
        check_on_aarch64(
            harness,
            &format!("cnn{seed}"),
            models::cnn(seed).0,
            Some("+dotprod"),
            seed,
        );
    }
}

/// A stride-2 depthwise conv (the even-lane shuffle) feeding a squeezenet-style fire
/// module whose Concat is planned in place, in-place elementwise chains, and stride-2
/// max and average pooling.
fn fire(seed: u64) -> Vec<u8> {
    use models::{Attr, ModelBuilder};
    let mut m = ModelBuilder::new(seed);
    let c = 4 + m.rng.below(4);
    let hw = 23 + m.rng.below(9);
    let x = m.input("image", &[1, c, hw, hw]);
    let wd = m.weight(&[c, 1, 3, 3], 0.5);
    let bd = m.weight(&[c], 0.1);
    let d = m.node(
        "Conv",
        &[&x, &wd, &bd],
        vec![
            ("pads", Attr::Ints(vec![1, 1, 1, 1])),
            ("strides", Attr::Ints(vec![2, 2])),
            ("group", Attr::I(c as i64)),
        ],
    );
    let d = m.node("Relu", &[&d], vec![]);
    let w1 = m.weight(&[c, c, 1, 1], 0.5);
    let e1 = m.node("Conv", &[&d, &w1], vec![]);
    let e1 = m.node("Relu", &[&e1], vec![]);
    let w3 = m.weight(&[c, c, 3, 3], 0.3);
    let e3 = m.node(
        "Conv",
        &[&d, &w3],
        vec![("pads", Attr::Ints(vec![1, 1, 1, 1]))],
    );
    let e3 = m.node("Sigmoid", &[&e3], vec![]);
    let cat = m.node("Concat", &[&e1, &e3], vec![("axis", Attr::I(1))]);
    let y = m.node("Tanh", &[&cat], vec![]);
    // Stride-2 pooling on a plane wide enough for the vector (even-lane) path.
    let y = m.node(
        "MaxPool",
        &[&y],
        vec![
            ("kernel_shape", Attr::Ints(vec![3, 3])),
            ("strides", Attr::Ints(vec![2, 2])),
            ("pads", Attr::Ints(vec![1, 1, 1, 1])),
        ],
    );
    let y = m.node(
        "AveragePool",
        &[&y],
        vec![
            ("kernel_shape", Attr::Ints(vec![2, 2])),
            ("strides", Attr::Ints(vec![2, 2])),
        ],
    );
    m.output(&y);
    m.encode()
}

#[test]
fn depthwise_stride_2_and_in_place_concat_on_aarch64_under_qemu() {
    let Some(harness) = runner::aarch64_harness() else {
        return;
    };
    for seed in 1..3 {
        check_on_aarch64(harness, &format!("fire{seed}"), fire(seed), None, seed);
    }
}
