//! The hostile corpus (`tests/hostile/check.py`): every hand-made hostile model and
//! command line, and byte-level mutants of the examples' models, either compile or are
//! refused with one error naming the file (and the node, where the case has one);
//! never a panic, signal, hang (20 s) or allocation failure (8 GiB address space), and
//! never a file left behind.
//!
//! Needs python3 with onnx and numpy: skipped otherwise, an error under
//! NNC_TEST_REQUIRE_TOOLS=1.

#[path = "../../tests/common/tools.rs"]
mod tools;

use std::path::Path;
use std::process::Command;

fn python_with_onnx() -> bool {
    Command::new("python3")
        .args(["-c", "import onnx, numpy"])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn run_check(extra: &[&str]) {
    if !python_with_onnx() {
        tools::skip("python3 with onnx and numpy is needed to build the hostile corpus");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("python3")
        .arg(root.join("tests/hostile/check.py"))
        .args(["--nnc", env!("CARGO_BIN_EXE_nnc")])
        .args(extra)
        .current_dir(&root)
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}");
    assert!(
        out.status.success(),
        "hostile inputs found findings:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(" 0 findings"), "{stdout}");
}

#[test]
fn hostile_models_and_command_lines_compile_or_are_refused_cleanly() {
    run_check(&[]);
}

#[test]
fn byte_level_mutants_of_real_models_compile_or_are_refused_cleanly() {
    run_check(&[
        "--no-corpus",
        "--seeds",
        "examples/c/model.onnx",
        "examples/c/second.onnx",
        "--mutants",
        "400",
        "--seed",
        "18",
    ]);
}
