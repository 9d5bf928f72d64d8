//! Builds and runs examples/c against this build's nnc, in a copy of the example
//! so the checkout stays clean: the Makefile's one-model programs (shared and
//! static), its two-model programs (two --name prefixes in one executable, shared
//! and static), and the same four programs through CMake and ctest. Each test
//! also runs the programs itself and checks the numbers they print.

#[path = "common/examples.rs"]
mod examples;
#[path = "../../tests/common/tools.rs"]
mod tools;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use examples::{assert_prints, copy_examples, make, run_program};

/// Every file of examples/c that a build reads.
const C_FILES: &[&str] = &[
    "Makefile",
    "CMakeLists.txt",
    "check_output.cmake",
    "main.c",
    "two_models.c",
    "threads.c",
    "model.onnx",
    "second.onnx",
    "expected.txt",
    "expected_second.txt",
];

fn copy_c_example() -> (tempfile::TempDir, PathBuf) {
    let (tmp, root) = copy_examples(&[("c", C_FILES)]);
    (tmp, root.join("c"))
}

#[test]
fn c_example_makefile_shared_and_static() {
    if !tools::require_tools(&["make", "cc", "python3"]) {
        return;
    }
    let (_tmp, example) = copy_c_example();
    let log = make(&example, &["run", "run-static"]);
    assert!(log.contains("output.txt matches expected.txt"), "{log}");
    assert!(
        log.contains("output-static.txt matches expected.txt"),
        "{log}"
    );
    for program in ["main-shared", "main-static"] {
        assert_prints(&run_program(&example.join(program)), &["c/expected.txt"]);
    }
}

/// The exported (defined, global) function names in `nm` output.
fn defined_text_symbols(nm_output: &str) -> BTreeSet<String> {
    nm_output
        .lines()
        .filter_map(
            |line| match line.split_whitespace().collect::<Vec<_>>()[..] {
                [_, "T", name] => Some(name.to_string()),
                _ => None,
            },
        )
        .collect()
}

#[test]
fn c_example_run_with_a_thread_pool() {
    if !tools::require_tools(&["make", "cc", "python3"]) {
        return;
    }
    let (_tmp, example) = copy_c_example();
    let include = format!(
        "NNC_INCLUDE={}/../../runtime-abi/include",
        env!("CARGO_MANIFEST_DIR")
    );
    let log = make(&example, &["run-threads", &include]);
    assert!(
        log.contains("output-threads.txt matches expected.txt"),
        "{log}"
    );
}

#[test]
fn c_example_two_models_in_one_program() {
    if !tools::require_tools(&["make", "cc", "python3", "nm"]) {
        return;
    }
    let (_tmp, example) = copy_c_example();
    let log = make(&example, &["run-two", "run-two-static"]);
    assert!(
        log.contains("output-two.txt matches expected.txt + expected_second.txt"),
        "{log}"
    );
    assert!(
        log.contains("output-two-static.txt matches expected.txt + expected_second.txt"),
        "{log}"
    );
    // One line per model: a mix-up of the two models' symbols would print wrong numbers.
    for program in ["two-shared", "two-static"] {
        assert_prints(
            &run_program(&example.join(program)),
            &["c/expected.txt", "c/expected_second.txt"],
        );
    }

    let entry_points = |prefix: &str| -> BTreeSet<String> {
        [
            "infer",
            "infer_with_workspace",
            "model_info",
            "workspace_size",
            "run",
            "shapes",
        ]
        .iter()
        .map(|f| format!("{prefix}_{f}"))
        .collect()
    };
    let nm = |args: &[&str]| tools::run_stdout(Command::new("nm").current_dir(&example).args(args));
    // Each library exports exactly its own six prefixed functions, so nothing
    // in one can clash with (or interpose on) the other.
    for (lib, prefix) in [("libdigits_a.so", "digits_a"), ("libsecond.so", "second")] {
        assert_eq!(
            defined_text_symbols(&nm(&["-D", "--defined-only", lib])),
            entry_points(prefix),
            "{lib}"
        );
    }
    // The static program contains both models' entry points.
    let linked = defined_text_symbols(&nm(&["two-static"]));
    for symbol in entry_points("digits_a").union(&entry_points("second")) {
        assert!(linked.contains(symbol), "two-static lacks {symbol}");
    }
}

#[test]
fn c_example_cmake() {
    if !tools::require_tools(&["cmake", "ctest", "make", "cc", "python3"]) {
        return;
    }
    let (_tmp, example) = copy_c_example();
    let build = example.join("build");
    tools::run(
        Command::new("cmake")
            .arg("-S")
            .arg(&example)
            .arg("-B")
            .arg(&build)
            .arg(format!("-DNNC={}", env!("CARGO_BIN_EXE_nnc"))),
    );
    tools::run(Command::new("cmake").arg("--build").arg(&build));
    let log = tools::run_stdout(
        Command::new("ctest")
            .arg("--test-dir")
            .arg(&build)
            .arg("--output-on-failure"),
    );
    assert!(
        log.contains("100% tests passed, 0 tests failed out of 4"),
        "{log}"
    );
    assert_prints(
        &run_program(&build.join("main-shared")),
        &["c/expected.txt"],
    );
    assert_prints(
        &run_program(&build.join("main-static")),
        &["c/expected.txt"],
    );
    for program in ["two-shared", "two-static"] {
        assert_prints(
            &run_program(&build.join(program)),
            &["c/expected.txt", "c/expected_second.txt"],
        );
    }
}
