//! A library compiled for CPU features the machine lacks returns
//! `NNC_ERR_UNSUPPORTED_CPU` and writes nothing, instead of dying on an illegal
//! instruction: run through the C harness under `qemu-x86_64 -cpu Nehalem` and
//! `-cpu Haswell`, CPUs that really lack AVX2 and AVX-512 (qemu-user stops an
//! instruction the model lacks with SIGILL).

#[path = "common/models.rs"]
mod models;
#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use std::path::{Path, PathBuf};
use std::process::Command;

use models::{Attr, ModelBuilder};
use nnc::codegen::target::{Arch, Target};
use nnc::ir::Tensor;
use nnc::onnx::{import_model, ImportOptions};
use prost::Message;

/// A conv, a pointwise conv and a global pool over `[1, 3, 12, 12]`.
fn small_cnn() -> nnc::ir::Graph {
    let mut m = ModelBuilder::new(5);
    let x = m.input("x", &[1, 3, 12, 12]);
    let w = m.weight(&[16, 3, 3, 3], 0.5);
    let c = m.node(
        "Conv",
        &[&x, &w],
        vec![("pads", Attr::Ints(vec![1, 1, 1, 1]))],
    );
    let r = m.node("Relu", &[&c], vec![]);
    let w2 = m.weight(&[8, 16, 1, 1], 0.5);
    let c2 = m.node("Conv", &[&r, &w2], vec![]);
    let y = m.node("GlobalAveragePool", &[&c2], vec![]);
    m.output(&y);
    let model = nnc::onnx::proto::ModelProto::decode(m.encode().as_slice()).unwrap();
    let mut g = import_model(&model, None, &ImportOptions::default())
        .unwrap()
        .graph;
    nnc::passes::PassManager::default().run(&mut g).unwrap();
    g
}

/// The host harness, built with gcc into `dir`.
fn harness(dir: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let exe = dir.join("nnc_run");
    tools::run(
        Command::new("gcc")
            .args(["-O1", "-std=c11", "-Wall", "-I"])
            .arg(root.join("runtime-abi/include"))
            .arg(root.join("tests/harness/nnc_run.c"))
            .arg("-o")
            .arg(&exe)
            .arg("-ldl"),
    );
    exe
}

#[test]
fn a_library_for_missing_features_returns_unsupported_cpu_and_writes_nothing() {
    if !tools::require_tool("gcc") || !tools::require_tool("qemu-x86_64") {
        return;
    }
    let g = small_cnn();
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path());
    let input = Tensor::from_vec(
        &[1, 3, 12, 12],
        (0..432)
            .map(|i| ((i * 37) % 19) as f32 / 7.0 - 1.0)
            .collect(),
    );
    let expected = nnc::interp::run_graph(&g, std::slice::from_ref(&input)).unwrap();
    let in_dir = dir.path().join("in");
    std::fs::create_dir(&in_dir).unwrap();
    std::fs::write(in_dir.join("input_0.bin"), input.to_le_bytes()).unwrap();
    for (cpu, qemu_cpu, runs) in [
        ("baseline", "Nehalem", true),
        ("x86-64-v3", "Nehalem", false),
        ("x86-64-v3", "Haswell", true),
        ("x86-64-v4", "Haswell", false),
    ] {
        let lib_dir = dir.path().join(format!("{cpu}-{qemu_cpu}"));
        std::fs::create_dir(&lib_dir).unwrap();
        let target = Target::new(Arch::X86_64, Some(cpu)).unwrap();
        let lib = runner::write_library(&g, &runner::options(target), &lib_dir).unwrap();
        let out_dir = lib_dir.join("out");
        std::fs::create_dir(&out_dir).unwrap();
        let output = Command::new("qemu-x86_64")
            .args(["-cpu", qemu_cpu])
            .arg(&exe)
            .arg(&lib)
            .arg("")
            .arg(&in_dir)
            .arg(&out_dir)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        let what = format!("--cpu {cpu} on {qemu_cpu}");
        if runs {
            assert_eq!(output.status.code(), Some(0), "{what}: {stderr}");
            let bytes = std::fs::read(out_dir.join("output_0.bin")).unwrap();
            let got: Vec<f32> = (bytes.chunks_exact(4))
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            let want = expected[0].to_f64_vec();
            assert_eq!(got.len(), want.len(), "{what}");
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (f64::from(*g) - w).abs() <= 1e-4 + 1e-3 * w.abs(),
                    "{what}: {g} vs {w}"
                );
            }
        } else {
            // Exit 3: infer returned a code (a signal has no exit code).
            assert_eq!(output.status.code(), Some(3), "{what}: {stderr}");
            assert!(
                stderr.contains("NNC_ERR_UNSUPPORTED_CPU"),
                "{what}: {stderr}"
            );
            assert!(
                !out_dir.join("output_0.bin").exists(),
                "{what} wrote an output"
            );
        }
    }
}
