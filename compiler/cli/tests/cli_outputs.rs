//! What `nnc compile` writes and reports: the model name must make a header that
//! compiles, the artifact and its header never replace the model or a header of the
//! user's, a failed write says it was writing, and the success line counts every
//! weight byte the artifact stores.

#[path = "../../tests/common/models.rs"]
mod models;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use models::ModelBuilder;

fn nnc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nnc"))
        .args(args)
        .output()
        .unwrap()
}

fn expect_error(out: &Output, needles: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "exit status; stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    assert!(
        stderr.starts_with("error: "),
        "one error expected: {stderr}"
    );
    for n in needles {
        assert!(stderr.contains(n), "'{n}' missing from: {stderr}");
    }
}

/// `y = x @ W` with W a 64x64 float32 constant (16 KiB), which the GEMM kernel repacks.
fn matmul_model(dir: &Path) -> PathBuf {
    let mut b = ModelBuilder::new(3);
    let x = b.input("x", &[4, 64]);
    let w = b.weight(&[64, 64], 0.1);
    let y = b.node("MatMul", &[&x, &w], vec![]);
    b.output(&y);
    let path = dir.join("m.onnx");
    std::fs::write(&path, b.encode()).unwrap();
    path
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn a_name_that_is_no_c_identifier_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let model = matmul_model(dir.path());
    let so = dir.path().join("libm.so");
    for (name, why) in [
        ("9x", "starts with a digit"),
        ("a-b", "other than a letter"),
        ("int", "keyword"),
        ("class", "keyword"),
    ] {
        let out = nnc(&[
            "compile",
            path_str(&model),
            "-o",
            path_str(&so),
            "--name",
            name,
        ]);
        expect_error(&out, &["--name", name, why]);
        assert!(!so.exists());
    }
    let out = nnc(&[
        "compile",
        path_str(&model),
        "-o",
        path_str(&so),
        "--name",
        "m_2",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_model_is_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let model = matmul_model(dir.path());
    let original = std::fs::read(&model).unwrap();
    // The model named like the artifact...
    let as_so = dir.path().join("m.so");
    std::fs::rename(&model, &as_so).unwrap();
    let out = nnc(&["compile", path_str(&as_so), "-o", path_str(&as_so)]);
    expect_error(&out, &["m.so", "input model"]);
    assert_eq!(std::fs::read(&as_so).unwrap(), original);
    // ...or like its header (`-o m.so` writes m.h).
    let as_h = dir.path().join("m.h");
    std::fs::rename(&as_so, &as_h).unwrap();
    let out = nnc(&["compile", path_str(&as_h), "-o", path_str(&as_so)]);
    expect_error(&out, &["m.h", "input model"]);
    assert_eq!(std::fs::read(&as_h).unwrap(), original);
    assert!(!as_so.exists());
}

#[test]
fn a_header_nnc_did_not_write_is_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let model = matmul_model(dir.path());
    let so = dir.path().join("libm.so");
    let header = dir.path().join("libm.h");
    std::fs::write(&header, "int users_own_code;\n").unwrap();
    let out = nnc(&["compile", path_str(&model), "-o", path_str(&so)]);
    expect_error(&out, &["libm.h", "not written by nnc"]);
    assert_eq!(
        std::fs::read_to_string(&header).unwrap(),
        "int users_own_code;\n"
    );
    assert!(!so.exists());
    // nnc's own header is replaced on a rebuild, as before.
    std::fs::remove_file(&header).unwrap();
    for _ in 0..2 {
        let out = nnc(&["compile", path_str(&model), "-o", path_str(&so)]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn an_unwritable_output_says_it_was_writing() {
    let dir = tempfile::tempdir().unwrap();
    let model = matmul_model(dir.path());
    let so = dir.path().join("no_such_folder").join("libm.so");
    let out = nnc(&["compile", path_str(&model), "-o", path_str(&so)]);
    expect_error(&out, &["libm.so", "cannot write"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("cannot read"), "{stderr}");
}

#[test]
fn the_success_line_counts_repacked_weights() {
    let dir = tempfile::tempdir().unwrap();
    let model = matmul_model(dir.path());
    let so = dir.path().join("libm.so");
    // One variant: a multi-versioned library stores each variant's packing.
    let args = [
        "compile",
        path_str(&model),
        "--cpu",
        "native",
        "-o",
        path_str(&so),
    ];
    let out = nnc(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let weights: usize = stderr
        .split("weights ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no weight count in: {stderr}"));
    // 64x64 float32: at least 16 KiB however the kernel packs it (panels may pad).
    assert!(
        (16384..2 * 16384).contains(&weights),
        "weights {weights} bytes for a 16384-byte matrix: {stderr}"
    );
}
