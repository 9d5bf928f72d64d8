//! aarch64: random models compiled for aarch64-unknown-linux-gnu, loaded by the C
//! harness (tests/harness/nnc_run.c, built with aarch64-linux-gnu-gcc) under qemu, and
//! compared with the reference interpreter.

#[path = "common/models.rs"]
mod models;
#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use std::path::Path;

use nnc::ir::Tensor;
use nnc::onnx::proto::ModelProto;
use nnc::onnx::{import_model, ImportOptions};
use prost::Message;

fn check_on_aarch64(harness: &Path, name: &str, bytes: Vec<u8>, cpu: Option<&str>, seed: u64) {
    let model = ModelProto::decode(bytes.as_slice()).unwrap();
    let g = import_model(&model, None, &ImportOptions::default())
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .graph;
    let mut rng = models::Rng::new(seed);
    let inputs: Vec<Tensor> = g
        .inputs
        .iter()
        .map(|v| Tensor::from_vec(&g.ty(*v).shape, rng.vec(g.ty(*v).numel(), 1.0)))
        .collect();
    let expected = nnc::interp::run_graph(&g, &inputs).unwrap();
    let actual =
        runner::run_on_aarch64(harness, &g, &inputs, cpu).unwrap_or_else(|e| panic!("{name}: {e}"));
    for (k, (a, e)) in actual.iter().zip(&expected).enumerate() {
        let (a, e) = (a.to_f64_vec(), e.to_f64_vec());
        let scale = e.iter().fold(0f64, |m, v| m.max(v.abs())).max(1e-30);
        let err = a
            .iter()
            .zip(&e)
            .fold(0f64, |m, (x, y)| m.max((x - y).abs()))
            / scale;
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
