//! The ONNX backend suites, end to end: the node suite (generated from the pinned
//! `onnx` pip package's own definitions) and the `simple`, `pytorch-converted` and
//! `pytorch-operator` model suites, each case compiled, run and compared (rtol 1e-3,
//! atol 1e-4). Any case listed in `tests/onnx_<suite>_passing.txt` that fails is a
//! regression.

#[path = "../../tests/common/node_suite.rs"]
mod node_suite;
#[path = "../../tests/common/tools.rs"]
mod tools;

use std::path::PathBuf;
use std::process::Command;

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn suite_dir() -> Option<PathBuf> {
    node_suite::suite_dir()
}

fn run_suite(suite: &str, passing_list: &str) {
    run_suite_with(suite, passing_list, &[], "");
}

/// Runs `nnc conformance` on one suite with `extra` arguments, failing on any case of
/// `passing_list` that does not pass; returns its stdout.
fn run_suite_with(suite: &str, passing_list: &str, extra: &[&str], tag: &str) -> String {
    let Some(dir) = suite_dir() else {
        return String::new();
    };
    let root = workspace_root();
    let results = root
        .join("target")
        .join(format!("onnx-{suite}{tag}-results.tsv"));
    let output = Command::new(env!("CARGO_BIN_EXE_nnc"))
        .arg("conformance")
        .arg(dir.join(suite))
        .arg("--expect-passing")
        .arg(root.join("tests").join(passing_list))
        .arg("--results")
        .arg(&results)
        .args(extra)
        .output()
        .expect("nnc runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "regressions in the {suite} suite:\n{}\n{}",
        stdout
            .lines()
            .filter(|l| l.starts_with("REGRESSION"))
            .collect::<Vec<_>>()
            .join("\n"),
        String::from_utf8_lossy(&output.stderr)
    );
    stdout.into_owned()
}

#[test]
fn onnx_node_suite_has_no_regressions() {
    run_suite("node", "onnx_node_passing.txt");
}

/// The node suite compiled as a user would without `--freeze-input`: shape-like inputs
/// (axes, k, counts) stay inputs read at run time.
#[test]
fn onnx_node_suite_without_frozen_inputs_has_no_regressions() {
    let stdout = run_suite_with(
        "node",
        "onnx_node_no_freeze_passing.txt",
        &["--no-freeze"],
        "-no-freeze",
    );
    if let Some(summary) = stdout.lines().find(|l| l.starts_with("node: ")) {
        println!("without --freeze-input: {summary}");
    }
}

#[test]
fn onnx_simple_suite_has_no_regressions() {
    run_suite("simple", "onnx_simple_passing.txt");
}

#[test]
fn onnx_pytorch_converted_suite_has_no_regressions() {
    run_suite("pytorch-converted", "onnx_pytorch-converted_passing.txt");
}

#[test]
fn onnx_pytorch_operator_suite_has_no_regressions() {
    run_suite("pytorch-operator", "onnx_pytorch-operator_passing.txt");
}

/// 300 node cases spread over the suite, compiled for aarch64 and run under qemu: every
/// one that passes on x86-64 (the committed list) must pass on aarch64 too.
#[test]
fn onnx_node_suite_sample_passes_on_aarch64_as_on_x86_64() {
    if !tools::require_aarch64_toolchain() {
        return;
    }
    let stdout = run_suite_with(
        "node",
        "onnx_node_passing.txt",
        &["--target", "aarch64", "--sample", "300"],
        "-aarch64-sample",
    );
    if stdout.is_empty() {
        return; // the suite could not be generated (skipped above)
    }
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("node: "))
        .expect("a summary line");
    let counts: Vec<usize> = summary
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(counts.iter().sum::<usize>(), 300, "{summary}");
}
