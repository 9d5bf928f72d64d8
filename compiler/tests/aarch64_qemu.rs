//! aarch64: random models compiled for aarch64-unknown-linux-gnu, loaded by the C
//! harness (tests/harness/nnc_run.c, built with aarch64-linux-gnu-gcc) under qemu, and
//! compared with the reference interpreter.

#[path = "common/models.rs"]
mod models;
#[path = "common/tools.rs"]
mod tools;

use std::path::{Path, PathBuf};
use std::process::Command;

use nnc::codegen::{Arch, CompileOptions, Target};
use nnc::driver;
use nnc::ir::Tensor;
use nnc::onnx::ImportOptions;

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn build_harness(dir: &Path) -> PathBuf {
    let exe = dir.join("nnc_run");
    let root = workspace_root();
    let out = Command::new("aarch64-linux-gnu-gcc")
        .args(["-O1", "-std=c11", "-Wall", "-I"])
        .arg(root.join("runtime-abi/include"))
        .arg(root.join("tests/harness/nnc_run.c"))
        .arg("-o")
        .arg(&exe)
        .arg("-ldl")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "harness build failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

fn check_on_aarch64(harness: &Path, name: &str, bytes: Vec<u8>, cpu: Option<&str>, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join(format!("{name}.onnx"));
    std::fs::write(&model, bytes).unwrap();
    let opts = CompileOptions {
        target: Target::new(Arch::Aarch64, cpu).unwrap(),
        prefix: String::new(),
    };
    let compiled = driver::compile_model(&model, &ImportOptions::default(), &opts)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let so = dir.path().join(format!("lib{name}.so"));
    driver::write_artifacts(&compiled, &so, "").unwrap();

    let g = &compiled.graph;
    let mut rng = models::Rng::new(seed);
    let inputs: Vec<Tensor> = g
        .inputs
        .iter()
        .map(|v| Tensor::from_vec(&g.ty(*v).shape, rng.vec(g.ty(*v).numel(), 1.0)))
        .collect();
    let expected = nnc::interp::run_graph(g, &inputs).unwrap();
    let (in_dir, out_dir) = (dir.path().join("in"), dir.path().join("out"));
    std::fs::create_dir_all(&in_dir).unwrap();
    std::fs::create_dir_all(&out_dir).unwrap();
    for (i, t) in inputs.iter().enumerate() {
        std::fs::write(in_dir.join(format!("input_{i}.bin")), t.to_le_bytes()).unwrap();
    }
    let out = tools::qemu_aarch64(harness)
        .arg(&so)
        .arg("")
        .arg(&in_dir)
        .arg(&out_dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name}: qemu run failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for (k, o) in g.outputs.iter().enumerate() {
        let bytes = std::fs::read(out_dir.join(format!("output_{k}.bin"))).unwrap();
        let actual = Tensor::from_le_bytes(g.ty(*o), &bytes).unwrap();
        let (a, e) = (actual.to_f64_vec(), expected[k].to_f64_vec());
        let scale = e.iter().fold(0f64, |m, v| m.max(v.abs())).max(1e-30);
        let err = a
            .iter()
            .zip(&e)
            .fold(0f64, |m, (x, y)| m.max((x - y).abs()))
            / scale;
        println!(
            "{name} (aarch64 {}) output {k}: rel err {err:.2e}",
            opts.target.cpu
        );
        assert!(
            err <= 1e-4,
            "{name} output {k} on aarch64: relative error {err:.3e}"
        );
    }
}

#[test]
fn random_models_match_the_interpreter_on_aarch64_under_qemu() {
    if !tools::require_aarch64_toolchain() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let harness = build_harness(dir.path());
    for seed in 1..3 {
        check_on_aarch64(
            &harness,
            &format!("elementwise{seed}"),
            models::elementwise(seed).0,
            None,
            seed,
        );
        check_on_aarch64(
            &harness,
            &format!("transformer{seed}"),
            models::transformer(seed).0,
            None,
            seed,
        );
        check_on_aarch64(
            &harness,
            &format!("cnn{seed}"),
            models::cnn(seed).0,
            Some("+dotprod"),
            seed,
        );
    }
}
