//! RNN / GRU / LSTM and Einsum, imported as decompositions into core ops, end to end:
//! `tests/scripts/recurrent_einsum_cases.py` writes small one-node models in the ONNX
//! backend-test layout with expected outputs from a numpy model of the specs (every
//! recurrent attribute: directions, layouts, activations and their parameters, clip,
//! linear_before_reset, input_forget, peepholes, constant and run-time sequence_lens,
//! initial states, each output alone) and from numpy.einsum (implicit outputs,
//! ellipsis broadcasting, diagonals, traces, several operands). Each case is imported,
//! compiled, run and compared as the node suite does (`nnc_cli::conformance::run_case`).
//! Cases named `error_*` must fail to import with the message in their `expect_error`.
//!
//! Needs python3 with onnx and numpy: skipped otherwise, an error under
//! NNC_TEST_REQUIRE_TOOLS=1.

#[path = "../../tests/common/tools.rs"]
mod tools;

use std::path::Path;
use std::process::Command;

use nnc::onnx::{load_model, ImportOptions};
use nnc_cli::conformance::{find_cases, run_case};

fn python_with_onnx() -> bool {
    Command::new("python3")
        .args(["-c", "import onnx, numpy"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Generates the `family` cases and checks every one; panics listing the failures.
fn check_family(family: &str) {
    if !python_with_onnx() {
        tools::skip("python3 with onnx and numpy is needed to generate the cases");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cases = dir.path().join("cases");
    std::fs::create_dir(&cases).unwrap();
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/recurrent_einsum_cases.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(&cases)
        .arg(family)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{} failed:\n{}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let found = find_cases(&cases);
    assert!(found.len() > 10, "only {} cases generated", found.len());
    let mut failures = vec![];
    for case in &found {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let expected_error = std::fs::read_to_string(case.join("expect_error")).ok();
        let outcome = match expected_error {
            Some(want) => match load_model(&case.join("model.onnx"), &ImportOptions::default()) {
                Ok(_) => Err(format!("imported, but should fail with '{want}'")),
                Err(e) if e.to_string().contains(&want) => Ok(()),
                Err(e) => Err(format!("failed with '{e}', not '{want}'")),
            },
            None => {
                // A directory per case: each library gets a path of its own to dlopen.
                let work = work.join(&name);
                std::fs::create_dir(&work).unwrap();
                run_case(case, &work).map(|_| ())
            }
        };
        if let Err(e) = outcome {
            failures.push(format!("{name}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn recurrent_cells_match_the_spec() {
    check_family("recurrent");
}

#[test]
fn einsum_matches_numpy() {
    check_family("einsum");
}
