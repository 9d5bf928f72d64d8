//! Helpers for the tests that build and run `examples/*` against this build's
//! nnc. Each test works in a temporary copy of the example, so builds leave the
//! checkout clean and tests running in parallel do not share outputs.
//!
//! Include with `#[path = "../../tests/common/tools.rs"] mod tools;` and
//! `#[path = "common/examples.rs"] mod examples;` (this file uses `crate::tools`).
#![allow(dead_code)] // each test crate uses a different subset

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::tools;

/// The repository's `examples/` directory.
pub fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join("examples")
}

/// A temporary `examples/` tree holding `examples/check_close.py` (which the
/// examples call as `../check_close.py`) and, for each `(dir, files)`, those
/// files of `examples/<dir>`. Dropping the returned guard deletes the tree.
pub fn copy_examples(dirs: &[(&str, &[&str])]) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("examples");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::copy(
        examples_dir().join("check_close.py"),
        root.join("check_close.py"),
    )
    .unwrap();
    for (dir, files) in dirs {
        std::fs::create_dir_all(root.join(dir)).unwrap();
        for f in *files {
            let from = examples_dir().join(dir).join(f);
            std::fs::copy(&from, root.join(dir).join(f))
                .unwrap_or_else(|e| panic!("copying {}: {e}", from.display()));
        }
    }
    (tmp, root)
}

/// `make -C dir NNC=<this build's nnc> targets...`, panicking on failure;
/// returns make's stdout.
pub fn make(dir: &Path, targets: &[&str]) -> String {
    tools::run_stdout(
        Command::new("make")
            .arg("-C")
            .arg(dir)
            .arg(format!("NNC={}", env!("CARGO_BIN_EXE_nnc")))
            .args(targets),
    )
}

/// Runs `program` (no arguments) and returns its stdout, panicking on failure.
pub fn run_program(program: &Path) -> String {
    tools::run_stdout(&mut Command::new(program))
}

/// Asserts that `printed` (a program's stdout) holds exactly the numbers of
/// the files `examples/<expected...>`, read one after another, each within
/// 1e-4: the same check as `check_close.py`, done here so that a test fails
/// on a wrong number even if the example's own check were broken.
pub fn assert_prints(printed: &str, expected: &[&str]) {
    let got = numbers(printed);
    let want: Vec<f64> = expected
        .iter()
        .flat_map(|f| numbers(&std::fs::read_to_string(examples_dir().join(f)).unwrap()))
        .collect();
    assert!(!want.is_empty(), "no expected numbers in {expected:?}");
    assert!(
        got.len() == want.len() && got.iter().zip(&want).all(|(g, w)| (g - w).abs() <= 1e-4),
        "printed {got:?}, expected {want:?} (from {expected:?})\n--- stdout\n{printed}"
    );
}

/// The whitespace-separated numbers of `text`; panics on anything else.
fn numbers(text: &str) -> Vec<f64> {
    text.split_whitespace()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("`{v}` is not a number in:\n{text}"))
        })
        .collect()
}
