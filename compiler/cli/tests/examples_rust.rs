//! The Rust ways in: nnc-runtime-abi's loader on a freshly compiled `.so`, and the
//! two Rust examples (built by `cargo build --workspace`, as scripts/test.sh does
//! first), each checked against examples/c/expected.txt.

use std::path::{Path, PathBuf};
use std::process::Command;

use nnc_runtime_abi::loader::{Error, Library, Tensor, TensorMut};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn expected() -> Vec<f32> {
    std::fs::read_to_string(root().join("examples/c/expected.txt"))
        .unwrap()
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect()
}

/// examples/c/model.onnx compiled with `--name digits` into `dir`.
fn compile_example_model(dir: &Path) -> PathBuf {
    let so = dir.join("libdigits.so");
    let out = Command::new(env!("CARGO_BIN_EXE_nnc"))
        .arg("compile")
        .arg(root().join("examples/c/model.onnx"))
        .args(["--name", "digits", "-o"])
        .arg(&so)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    so
}

fn ramp() -> Vec<f32> {
    (0..64).map(|i| i as f32 / 64.0).collect()
}

#[test]
fn the_loader_reports_model_info_and_runs_checked_buffers() {
    let dir = tempfile::tempdir().unwrap();
    let so = compile_example_model(dir.path());
    let model = Library::open(&so, Some("digits")).unwrap();
    let (i, o) = (&model.inputs()[0], &model.outputs()[0]);
    assert_eq!(
        (i.name.as_str(), i.dtype_name(), &i.shape[..]),
        ("image", "float", &[1, 1, 8, 8][..])
    );
    assert_eq!(
        (o.name.as_str(), o.shape.as_slice(), o.byte_size),
        ("probs", &[1, 4][..], 16)
    );

    let image = ramp();
    let mut probs = vec![0f32; 4];
    let mut ws = model.workspace();
    model
        .run(
            &mut ws,
            &[Tensor::from(&image[..])],
            &mut [TensorMut::from(&mut probs[..])],
        )
        .unwrap();
    for (p, e) in probs.iter().zip(expected()) {
        assert!((p - e).abs() < 1e-4, "{probs:?}");
    }

    // Wrong dtype, wrong size, wrong count: refused before the call.
    let as_f64 = vec![0f64; 64];
    let e = model
        .run(
            &mut ws,
            &[Tensor::from(&as_f64[..])],
            &mut [TensorMut::from(&mut probs[..])],
        )
        .unwrap_err();
    assert!(
        matches!(&e, Error::Mismatch(m) if m.contains("'image' is float")),
        "{e}"
    );
    let e = model
        .run(
            &mut ws,
            &[Tensor::from(&image[..63])],
            &mut [TensorMut::from(&mut probs[..])],
        )
        .unwrap_err();
    assert!(
        matches!(&e, Error::Mismatch(m) if m.contains("needs 256 bytes")),
        "{e}"
    );
    let e = model
        .run(&mut ws, &[], &mut [TensorMut::from(&mut probs[..])])
        .unwrap_err();
    assert!(matches!(e, Error::Mismatch(_)), "{e}");

    // The symbols carry the --name prefix: without it there is nothing to bind.
    let e = Library::open(&so, None)
        .err()
        .expect("no unprefixed symbols");
    assert!(matches!(e, Error::Load { .. }), "{e}");
}

/// A binary of this workspace, built by `cargo build --release --workspace`.
fn workspace_binary(name: &str) -> Option<PathBuf> {
    let exe = Path::new(env!("CARGO_BIN_EXE_nnc")).with_file_name(name);
    if exe.exists() {
        Some(exe)
    } else {
        let msg = format!("{name} is not built; run `cargo build --release --workspace` first");
        assert!(std::env::var("NNC_TEST_REQUIRE_TOOLS").is_err(), "{msg}");
        println!("SKIP: {msg}");
        None
    }
}

#[test]
fn the_dlopen_example_prints_the_expected_probabilities() {
    let Some(exe) = workspace_binary("nnc-example-dlopen") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let so = compile_example_model(dir.path());
    let out = Command::new(exe)
        .arg(&so)
        .arg("digits")
        .arg("--expect")
        .arg(root().join("examples/c/expected.txt"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("input  image: float[1, 1, 8, 8]"),
        "{stdout}"
    );
    assert!(stdout.contains("output matches"), "{stdout}");
}

#[test]
fn the_build_script_example_runs_its_model() {
    let Some(exe) = workspace_binary("nnc-example-build-script") else {
        return;
    };
    let out = Command::new(exe).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first: Vec<f32> = stdout
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(first.len(), 4);
    for (p, e) in first.iter().zip(expected()) {
        assert!((p - e).abs() < 1e-4, "{stdout}");
    }
    // The batch model: three images in one call, checked by the example itself.
    assert!(
        stdout.contains("batch output matches expected_batch.txt"),
        "{stdout}"
    );
}
