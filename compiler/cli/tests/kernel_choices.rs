//! The kernel plan from the command line: `nnc inspect --kernels` names a kernel for
//! every node (only kernels of the library, only ones the chosen CPU has), `--kernel`
//! overrides change it, and the artifact depends on the model and flags alone: not on
//! the environment (the former `NNC_*` switches) nor on the working directory.

#[path = "../../tests/common/models.rs"]
mod models;

use std::path::Path;
use std::process::Command;

use nnc::codegen::kernels;
use nnc::codegen::{Arch, Target};

fn nnc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nnc"))
}

fn run_ok(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A small CNN with a depthwise conv, a max pool and a Gemm head: several strategies.
fn model(dir: &Path) -> std::path::PathBuf {
    let mut m = models::ModelBuilder::new(7);
    let x = m.input("x", &[1, 8, 16, 16]);
    let w = m.weight(&[16, 8, 3, 3], 0.2);
    let y = m.node(
        "Conv",
        &[&x, &w],
        vec![("pads", models::Attr::Ints(vec![1; 4]))],
    );
    let y = m.node("Relu", &[&y], vec![]);
    let dw = m.weight(&[16, 1, 3, 3], 0.2);
    let y = m.node(
        "Conv",
        &[&y, &dw],
        vec![
            ("pads", models::Attr::Ints(vec![1; 4])),
            ("group", models::Attr::I(16)),
        ],
    );
    let y = m.node(
        "MaxPool",
        &[&y],
        vec![
            ("kernel_shape", models::Attr::Ints(vec![2, 2])),
            ("strides", models::Attr::Ints(vec![2, 2])),
        ],
    );
    let y = m.node("Flatten", &[&y], vec![]);
    let fc = m.weight(&[10, 16 * 8 * 8], 0.05);
    let y = m.node("Gemm", &[&y, &fc], vec![("transB", models::Attr::I(1))]);
    m.output(&y);
    let path = dir.join("cnn.onnx");
    std::fs::write(&path, m.encode()).unwrap();
    path
}

fn kernels_json(model: &Path, args: &[&str]) -> serde_json::Value {
    let out = run_ok(
        nnc()
            .args(["inspect", "--kernels", "--format", "json"])
            .arg(model)
            .args(args),
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    report["kernels"].clone()
}

#[test]
fn inspect_names_a_library_kernel_for_every_node_on_every_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let model = model(dir.path());
    let cpus = [
        ("x86_64", "baseline"),
        ("x86_64", "x86-64-v3"),
        ("x86_64", "x86-64-v4"),
        ("x86_64", "x86-64-v4+vnni"),
        ("aarch64", "armv8"),
        ("aarch64", "+i8mm"),
    ];
    for (arch, cpu) in cpus {
        let report = kernels_json(&model, &["--target", arch, "--cpu", cpu]);
        let target = Target::new(arch.parse::<Arch>().unwrap(), Some(cpu)).unwrap();
        let nodes = report["nodes"].as_array().expect("a node list");
        // Conv+Relu fused: Conv, depthwise Conv, MaxPool, Flatten, Gemm.
        assert_eq!(nodes.len(), 5, "{cpu}: {report}");
        for n in nodes {
            let strategy = n["strategy"].as_str().unwrap();
            assert!(!strategy.is_empty(), "{cpu}: {n}");
            assert!(!n["reason"].as_str().unwrap().is_empty(), "{cpu}: {n}");
            for k in n["kernels"].as_array().unwrap() {
                let name = k.as_str().unwrap();
                let info = kernels::find(name)
                    .unwrap_or_else(|| panic!("{cpu}: {name} is not in the kernel library"));
                assert!(info.runs_on(&target), "{cpu}: {name} does not run there");
            }
        }
        let strategy_of = |op: &str| -> Vec<String> {
            nodes
                .iter()
                .filter(|n| n["op"] == op)
                .map(|n| n["strategy"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(strategy_of("Conv"), ["winograd-f4x4", "depthwise"], "{cpu}");
        assert_eq!(strategy_of("MaxPool"), ["separable-maxpool2d"], "{cpu}");
        assert_eq!(strategy_of("Flatten"), ["view"], "{cpu}");
        let gemm = nodes.iter().find(|n| n["op"] == "Gemm").unwrap();
        let expected = match cpu {
            "x86-64-v3" => "f32-gemm-6x16-avx2-fma",
            "x86-64-v4" | "x86-64-v4+vnni" => "f32-gemm-8x48-avx512f",
            _ => "f32-gemm-5x8-clif",
        };
        assert_eq!(gemm["kernels"][0], expected, "{cpu}: {gemm}");
    }
}

#[test]
fn kernel_overrides_change_the_plan_and_bad_ones_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let model = model(dir.path());
    let v4 = ["--cpu", "x86-64-v4"];
    let auto = kernels_json(&model, &v4);
    let forced = kernels_json(
        &model,
        &[
            "--cpu",
            "x86-64-v4",
            "--kernel",
            "gemm=clif",
            "--kernel",
            "winograd=off",
            "--kernel",
            "dwconv=clif",
        ],
    );
    let kernels_of = |r: &serde_json::Value, op: &str| -> Vec<String> {
        r["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["op"] == op)
            .flat_map(|n| n["kernels"].as_array().unwrap().clone())
            .map(|k| k.as_str().unwrap().to_string())
            .collect()
    };
    assert!(kernels_of(&auto, "Gemm").contains(&"f32-gemm-8x48-avx512f".into()));
    assert_eq!(kernels_of(&forced, "Gemm"), ["f32-gemm-5x8-clif"]);
    assert!(kernels_of(&auto, "Conv").contains(&"f32-dwconv-avx512f".into()));
    assert!(kernels_of(&forced, "Conv").contains(&"f32-dwconv-clif".into()));
    let conv_strategies: Vec<_> = forced["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["op"] == "Conv")
        .map(|n| n["strategy"].as_str().unwrap())
        .collect();
    assert!(!conv_strategies[0].starts_with("winograd"), "{forced}");

    for bad in ["gemm", "gem=clif", "gemm=avx"] {
        let out = nnc()
            .arg("compile")
            .arg(&model)
            .args(["--kernel", bad, "-o"])
            .arg(dir.path().join("bad.so"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "--kernel {bad}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--kernel"), "--kernel {bad}: {stderr}");
        assert!(!dir.path().join("bad.so").exists());
    }
}

/// The same model and flags give the same bytes from any working directory, whatever
/// `NNC_*` variables are set (they were once switches of the code generator).
#[test]
fn artifacts_do_not_depend_on_the_environment_or_the_working_directory() {
    let dir = tempfile::tempdir().unwrap();
    let model = model(dir.path());
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let switches = [
        ("NNC_GEMM_KERNEL", "clif"),
        ("NNC_WINOGRAD", "off"),
        ("NNC_DWCONV_KERNEL", "clif"),
        ("NNC_POOL_KERNEL", "clif"),
        ("NNC_SEPARABLE_POOL", "off"),
        ("NNC_NARROW_CONV", "off"),
        ("NNC_PHASE_PLANES", "off"),
        ("NNC_GEMM_PREFETCH", "off"),
        ("NNC_GEMM_ORDER", "blocks"),
        ("NNC_SOFTMAX_KERNEL", "clif"),
        ("NNC_PASSES", "none"),
    ];
    for cpu in ["x86-64-v4", "baseline"] {
        let plain = a.join(format!("libplain-{cpu}.so"));
        let mut cmd = nnc();
        cmd.current_dir(&a)
            .arg("compile")
            .arg(&model)
            .args(["--cpu", cpu, "-o"])
            .arg(&plain);
        for (k, _) in switches {
            cmd.env_remove(k);
        }
        run_ok(&mut cmd);
        // The same file name in another folder: the name is part of the artifact.
        let elsewhere = b.join(format!("libplain-{cpu}.so"));
        let mut cmd = nnc();
        cmd.current_dir(&b)
            .arg("compile")
            .arg(&model)
            .args(["--cpu", cpu, "-o"])
            .arg(&elsewhere)
            .envs(switches);
        run_ok(&mut cmd);
        assert_eq!(
            std::fs::read(&plain).unwrap(),
            std::fs::read(&elsewhere).unwrap(),
            "{cpu}: the environment or the working directory changed the artifact"
        );
        // A --kernel flag does change it: the comparison can fail.
        let forced = a.join(format!("libforced-{cpu}.so"));
        run_ok(
            nnc()
                .arg("compile")
                .arg(&model)
                .args(["--cpu", cpu, "--kernel", "winograd=off", "-o"])
                .arg(&forced),
        );
        if cpu == "x86-64-v4" {
            assert_ne!(
                std::fs::read(&plain).unwrap(),
                std::fs::read(&forced).unwrap(),
                "{cpu}: --kernel winograd=off made no difference"
            );
        }
    }
}
