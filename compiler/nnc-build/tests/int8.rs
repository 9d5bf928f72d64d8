//! `quantize_int8` from a build script. With the `int8` feature (scripts/test.sh runs
//! `cargo test -p nnc-build --features int8`) it calibrates on a .npy file, writes the
//! archive and the accuracy report; without it the build fails with one message saying
//! which feature to enable.

use std::path::{Path, PathBuf};

fn model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/c/model.onnx")
}

#[cfg(feature = "int8")]
#[test]
fn quantize_int8_calibrates_and_reports() {
    use nnc::ir::Tensor;
    let dir = tempfile::tempdir().unwrap();
    // 16 samples of the model's [1, 1, 8, 8] input, stacked along the batch axis.
    let values: Vec<f32> = (0..16 * 64)
        .map(|i| ((i * 37 % 101) as f32 / 50.0) - 1.0)
        .collect();
    let calibration = dir.path().join("calibration.npy");
    let bytes = nnc_host::npy::to_bytes(&Tensor::from_vec(&[16, 1, 8, 8], values)).unwrap();
    std::fs::write(&calibration, bytes).unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let artifacts = nnc_build::Model::new(model())
        .name("tiny")
        .quantize_int8(&calibration)
        .target("x86_64-unknown-linux-gnu")
        .cpu("baseline")
        .out_dir(&out)
        .cargo_metadata(false)
        .try_compile()
        .expect("compiles");
    assert!(artifacts.archive.exists() && artifacts.header.exists());
    let report = std::fs::read_to_string(out.join("tiny.int8-report.txt")).unwrap();
    assert!(
        report.starts_with("int8: ") && report.contains("calibrated on 16 samples"),
        "{report}"
    );
    assert!(report.contains("output probs: SQNR"), "{report}");
}

#[cfg(not(feature = "int8"))]
#[test]
fn quantize_int8_without_the_feature_says_which_to_enable() {
    let dir = tempfile::tempdir().unwrap();
    let err = nnc_build::Model::new(model())
        .name("tiny")
        .quantize_int8(dir.path())
        .target("x86_64-unknown-linux-gnu")
        .out_dir(dir.path())
        .cargo_metadata(false)
        .try_compile()
        .expect_err("int8 needs the feature");
    let message = err.to_string();
    assert!(
        message.contains("`int8` feature") && message.contains(r#"features = ["int8"]"#),
        "{message}"
    );
}
