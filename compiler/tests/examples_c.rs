//! Builds and runs examples/c (shared and static linking) against this build's nnc,
//! in a copy of the example so the checkout stays clean.

#[path = "common/tools.rs"]
mod tools;

use std::path::PathBuf;
use std::process::Command;

#[test]
fn c_example_builds_and_prints_the_expected_output() {
    if !tools::require_tools(&["make", "cc", "python3"]) {
        return;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let dir = tempfile::tempdir().unwrap();
    let example = dir.path().join("examples").join("c");
    std::fs::create_dir_all(&example).unwrap();
    for f in ["Makefile", "main.c", "model.onnx", "expected.txt"] {
        std::fs::copy(root.join("examples/c").join(f), example.join(f)).unwrap();
    }
    std::fs::copy(
        root.join("examples/check_close.py"),
        dir.path().join("examples/check_close.py"),
    )
    .unwrap();
    let out = Command::new("make")
        .arg("-C")
        .arg(&example)
        .arg(format!("NNC={}", env!("CARGO_BIN_EXE_nnc")))
        .args(["run", "run-static"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.matches("output matches expected.txt").count(),
        2,
        "{stdout}"
    );
}
