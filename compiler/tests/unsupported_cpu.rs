//! A library compiled for CPU features the machine lacks returns
//! `NNC_ERR_UNSUPPORTED_CPU` and writes nothing, instead of dying on an illegal
//! instruction: run through the C harness under `qemu-x86_64 -cpu Nehalem` and
//! `-cpu Haswell`, CPUs that really lack AVX2 and AVX-512 (qemu-user stops an
//! instruction the model lacks with SIGILL). A multi-versioned library (the default)
//! runs on each of them, and on the host.

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

/// A conv, a pointwise conv and a global pool over `[1, 64, 8, 8]`; the first conv's
/// weights (72 KB) are large enough for later variants to derive their packing of them.
fn small_cnn() -> nnc::ir::Graph {
    let mut m = ModelBuilder::new(5);
    let x = m.input("x", &[1, 64, 8, 8]);
    let w = m.weight(&[32, 64, 3, 3], 0.5);
    let c = m.node(
        "Conv",
        &[&x, &w],
        vec![("pads", Attr::Ints(vec![1, 1, 1, 1]))],
    );
    let r = m.node("Relu", &[&c], vec![]);
    let w2 = m.weight(&[8, 32, 1, 1], 0.5);
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

/// An input of [`small_cnn`]: element `i` is `(i·step mod modulus) / scale - 1`.
fn small_cnn_input(step: usize, modulus: usize, scale: f32) -> Tensor {
    Tensor::from_vec(
        &[1, 64, 8, 8],
        (0..4096)
            .map(|i| ((i * step) % modulus) as f32 / scale - 1.0)
            .collect(),
    )
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
    let input = small_cnn_input(37, 19, 7.0);
    let expected = nnc::interp::run_graph(&g, std::slice::from_ref(&input)).unwrap();
    let in_dir = dir.path().join("in");
    std::fs::create_dir(&in_dir).unwrap();
    std::fs::write(in_dir.join("input_0.bin"), input.to_le_bytes()).unwrap();
    // `None`: the default (multi-versioned) library; on `None` qemu, the host runs it.
    let cases: [(Option<&str>, Option<&str>, bool); 9] = [
        (Some("baseline"), Some("Nehalem"), true),
        (Some("x86-64-v3"), Some("Nehalem"), false),
        (Some("x86-64-v3"), Some("Haswell"), true),
        (Some("x86-64-v4"), Some("Haswell"), false),
        (None, Some("Nehalem"), true),
        (None, Some("Haswell"), true),
        (None, None, true),
        // Without the baseline: the v3 variant runs on Haswell (the v4 one would stop
        // with SIGILL), and nothing on Nehalem.
        (Some("x86-64-v4,x86-64-v3"), Some("Haswell"), true),
        (Some("x86-64-v4,x86-64-v3"), Some("Nehalem"), false),
    ];
    for (i, (cpu, qemu_cpu, runs)) in cases.into_iter().enumerate() {
        let lib_dir = dir.path().join(format!("case{i}"));
        std::fs::create_dir(&lib_dir).unwrap();
        let target = Target::new(Arch::X86_64, cpu).unwrap();
        assert_eq!(
            target.is_multi_versioned(),
            cpu.is_none_or(|c| c.contains(','))
        );
        let lib = runner::write_library(&g, &runner::options(target), &lib_dir).unwrap();
        let out_dir = lib_dir.join("out");
        std::fs::create_dir(&out_dir).unwrap();
        let mut command = match qemu_cpu {
            Some(qemu_cpu) => {
                let mut c = Command::new("qemu-x86_64");
                c.args(["-cpu", qemu_cpu]).arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        let output = command
            .arg(&lib)
            .arg("")
            .arg(&in_dir)
            .arg(&out_dir)
            .output()
            .unwrap();
        let what = format!(
            "--cpu {} on {}",
            cpu.unwrap_or("(default)"),
            qemu_cpu.unwrap_or("the host")
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
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

/// Every entry point of a multi-versioned library runs the variant its CPU picks
/// (here the host's best), with and without a pool; `workspace_size` covers every
/// variant; `model_info` names the variants and what a CPU needs.
#[test]
fn a_multi_versioned_library_reports_its_variants_and_runs_through_every_entry_point() {
    let g = small_cnn();
    let input = small_cnn_input(11, 23, 9.0);
    let expected = nnc::interp::run_graph(&g, std::slice::from_ref(&input)).unwrap();
    let target = Target::new(Arch::X86_64, None).unwrap();
    assert_eq!(
        target.cpu,
        "x86-64-v4+vnni,x86-64-v3+avxvnni,x86-64-v3,baseline"
    );
    let lib = runner::Compiled::for_target(&g, target.clone()).unwrap();
    let pool = nnc_runtime_abi::ThreadPool::new(2).expect("threads start");
    let raw = pool.as_raw();
    let runs = [
        ("infer", lib.run(&g, std::slice::from_ref(&input)).unwrap()),
        (
            "run",
            lib.run_pooled(&g, std::slice::from_ref(&input), None)
                .unwrap(),
        ),
        (
            "run with a pool",
            lib.run_pooled(&g, std::slice::from_ref(&input), Some(&raw))
                .unwrap(),
        ),
    ];
    for (what, got) in runs {
        let (got, want) = (got[0].to_f64_vec(), expected[0].to_f64_vec());
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-4 + 1e-3 * w.abs(), "{what}: {g} vs {w}");
        }
    }
    for variant in target.variants() {
        let single = runner::Compiled::for_target(&g, variant.clone()).unwrap();
        for pool in [None, Some(&raw)] {
            assert!(
                lib.workspace_size(pool).unwrap() >= single.workspace_size(pool).unwrap(),
                "{}",
                variant.cpu
            );
        }
        if variant.cpu == "baseline" {
            // The variant every x86-64 CPU nnc supports runs, alone, here too.
            let got = single.run(&g, std::slice::from_ref(&input)).unwrap();
            let (got, want) = (got[0].to_f64_vec(), expected[0].to_f64_vec());
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 1e-4 + 1e-3 * w.abs(),
                    "baseline: {g} vs {w}"
                );
            }
        }
    }
    let loaded = nnc_runtime_abi::loader::Library::open(lib.library_path(), None).unwrap();
    assert_eq!(
        loaded.cpu_variants().unwrap(),
        [
            "x86-64-v4+vnni",
            "x86-64-v3+avxvnni",
            "x86-64-v3",
            "baseline"
        ]
    );
    assert_eq!(
        loaded.required_cpu_features().unwrap(),
        ["sse3", "ssse3", "sse41"]
    );
}

/// A later variant's weights are copied out of those the library stores, before its
/// first inference: the file stores about one variant's weights, and calls that race
/// to be first (one copies, the others wait) all get the right outputs. On this host
/// the `baseline` variant runs where it lacks AVX-VNNI (on one with it, the first
/// variant runs and the qemu cases above cover the copies).
#[test]
fn later_variants_copy_their_weights_from_the_stored_ones_once_however_many_threads_race() {
    let g = small_cnn();
    let single = |cpu: &str| {
        let target = Target::new(Arch::X86_64, Some(cpu)).unwrap();
        nnc::codegen::compile_graph(&g, &runner::options(target)).unwrap()
    };
    let default = nnc::codegen::compile_graph(
        &g,
        &runner::options(Target::new(Arch::X86_64, None).unwrap()),
    )
    .unwrap();
    let v4 = single("x86-64-v4+vnni");
    assert_eq!(v4.derived_weights_size, 0);
    assert!(
        default.derived_weights_size >= 2 * 32 * 64 * 9 * 4,
        "derived {} stored {} single {}",
        default.derived_weights_size,
        default.weights_size,
        v4.weights_size
    );
    assert!(
        default.weights_size * 10 <= v4.weights_size * 11,
        "{} stored vs {}",
        default.weights_size,
        v4.weights_size
    );

    let input = small_cnn_input(7, 29, 11.0);
    let expected = nnc::interp::run_graph(&g, std::slice::from_ref(&input)).unwrap();
    let want = expected[0].to_f64_vec();
    let target = Target::new(Arch::X86_64, Some("x86-64-v3+avxvnni,baseline")).unwrap();
    let lib = runner::Compiled::for_target(&g, target).unwrap();
    let start = std::sync::Barrier::new(8);
    std::thread::scope(|s| {
        for t in 0..8 {
            let (lib, g, input, want, start) = (&lib, &g, &input, &want, &start);
            s.spawn(move || {
                start.wait();
                let got = lib
                    .run_pooled(g, std::slice::from_ref(input), None)
                    .unwrap();
                for (g, w) in got[0].to_f64_vec().iter().zip(want) {
                    assert!(
                        (g - w).abs() <= 1e-4 + 1e-3 * w.abs(),
                        "thread {t}: {g} vs {w}"
                    );
                }
            });
        }
    });
}
