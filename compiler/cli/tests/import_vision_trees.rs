//! DeformConv, RoiAlign, MaxPool's Indices output, antialiased Resize and
//! TreeEnsemble, imported as compositions of core ops, end to end:
//! `tests/scripts/vision_tree_cases.py` writes small one-node models in the ONNX
//! backend-test layout with expected outputs from onnx's ReferenceEvaluator, on
//! configurations the node suite leaves out (strides, dilations, groups and offset
//! groups; several rois over several images, both modes and alignments; 1-D and 3-D
//! pooling, both storage orders, ceil mode; antialiasing along chosen axes, with
//! exclude_outside and another cubic coefficient; several trees, every aggregate
//! function, every comparison). Each case is imported, compiled, run and compared as
//! the node suite does (`nnc_cli::conformance::run_case`). Cases named `error_*` must
//! fail to import with the message in their `expect_error`.
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
fn check_family(family: &str, at_least: usize) {
    if !python_with_onnx() {
        tools::skip("python3 with onnx and numpy is needed to generate the cases");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cases = dir.path().join("cases");
    std::fs::create_dir(&cases).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/vision_tree_cases.py");
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
    assert!(
        found.len() >= at_least,
        "only {} cases generated",
        found.len()
    );
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
fn deform_conv_matches_the_reference() {
    check_family("deform_conv", 6);
}

#[test]
fn roi_align_matches_the_reference() {
    check_family("roi_align", 11);
}

#[test]
fn max_pool_indices_match_the_reference() {
    check_family("max_pool", 9);
}

#[test]
fn antialiased_resize_matches_the_reference() {
    check_family("resize", 10);
}

#[test]
fn tree_ensemble_matches_the_reference() {
    check_family("tree_ensemble", 8);
}
