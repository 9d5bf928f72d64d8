//! Builds and runs examples/cpp (the nnc.hpp C++ wrapper over examples/c's model,
//! shared and static) against this build's nnc, in a copy of the examples, and
//! checks the numbers the program prints.

#[path = "common/examples.rs"]
mod examples;
#[path = "../../tests/common/tools.rs"]
mod tools;

use examples::{assert_prints, copy_examples, make, run_program};

#[test]
fn cpp_example_wrapper_shared_and_static() {
    if !tools::require_tools(&["make", "c++", "python3"]) {
        return;
    }
    // examples/cpp compiles ../c/model.onnx (and ../c/batch_model.onnx, for batches of
    // 1 to 4) and checks against ../c/expected.txt.
    let (_tmp, root) = copy_examples(&[
        ("c", &["model.onnx", "batch_model.onnx", "expected.txt"]),
        ("cpp", &["Makefile", "nnc.hpp", "main.cpp"]),
    ]);
    let example = root.join("cpp");
    let include = format!(
        "NNC_INCLUDE={}/../../runtime-abi/include",
        env!("CARGO_MANIFEST_DIR")
    );
    let log = make(&example, &["run", "run-static", &include]);
    assert!(
        log.contains("output.txt matches ../c/expected.txt"),
        "{log}"
    );
    assert!(
        log.contains("output-static.txt matches ../c/expected.txt"),
        "{log}"
    );
    for program in ["main-shared", "main-static"] {
        assert_prints(&run_program(&example.join(program)), &["c/expected.txt"]);
    }
}
