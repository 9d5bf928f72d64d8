//! Models whose shapes overflow or exceed `--max-tensor-bytes` get one error naming the
//! file, the node (where there is one) and the flag that raises the limit; never a
//! header with a wrapped size or a library with a too-small workspace.

#[path = "../../tests/common/models.rs"]
mod models;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use models::{Attr, ModelBuilder};

fn nnc(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nnc"))
        .args(args)
        .output()
        .unwrap()
}

fn compile(model: &Path, extra: &[&str]) -> (Output, PathBuf) {
    let out_path = model.with_file_name("libout.so");
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "compile".as_ref(),
        model.as_os_str(),
        "-o".as_ref(),
        out_path.as_os_str(),
    ];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    (nnc(&args), out_path)
}

/// Compiling `model` fails with exit code 1 and one error (its line, then the node it
/// quotes) holding every needle.
fn expect_one_error(model: &Path, extra: &[&str], needles: &[&str]) {
    let (out, out_path) = compile(model, extra);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "exit code; stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    assert!(
        stderr.starts_with("error: ") && stderr.matches("error").count() == 1,
        "one error expected: {stderr}"
    );
    for n in needles {
        assert!(stderr.contains(n), "'{n}' missing from: {stderr}");
    }
    assert!(!out_path.exists(), "an artifact was written");
}

fn write(dir: &Path, name: &str, m: ModelBuilder) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, m.encode()).unwrap();
    p
}

#[test]
fn an_input_whose_size_overflows_is_refused() {
    // 2^62 × 4 float32 elements: the byte count wraps to 0 in 64 bits.
    let dir = tempfile::tempdir().unwrap();
    let mut m = ModelBuilder::new(1);
    let x = m.input("x", &[1 << 62, 4]);
    let y = m.node("Relu", &[&x], vec![]);
    m.output(&y);
    let p = write(dir.path(), "huge_input.onnx", m);
    expect_one_error(
        &p,
        &[],
        &["huge_input.onnx", "input 'x'", "--max-tensor-bytes"],
    );
}

/// `x: float32[1]` → Expand to `[n]` → ReduceMax.
fn expand_then_reduce(n: usize) -> ModelBuilder {
    let mut m = ModelBuilder::new(2);
    let x = m.input("x", &[1]);
    let shape = m.int_init(&[n as i64]);
    let e = m.node("Expand", &[&x, &shape], vec![]);
    let y = m.node("ReduceMax", &[&e], vec![("keepdims", Attr::I(0))]);
    m.output(&y);
    m
}

#[test]
fn an_expand_past_the_size_limit_is_refused_at_its_node() {
    // 2^62 + 1 float32 elements: wrapped, the workspace was 64 bytes.
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "expand.onnx", expand_then_reduce((1 << 62) + 1));
    expect_one_error(
        &p,
        &[],
        &[
            "expand.onnx",
            "node 'Expand_2' (Expand)",
            "--max-tensor-bytes",
        ],
    );
}

#[test]
fn max_tensor_bytes_sets_the_limit() {
    // 2^20 float32 elements: 4 MiB, refused under 1M, compiled by default.
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "expand4m.onnx", expand_then_reduce(1 << 20));
    expect_one_error(
        &p,
        &["--max-tensor-bytes", "1M"],
        &[
            "node 'Expand_2' (Expand)",
            "4194304 bytes",
            "1M limit",
            "--max-tensor-bytes",
        ],
    );
    let (out, out_path) = compile(&p, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out_path.exists());
}

/// `nnc verify` and `nnc run` hold whole tensors in this process: one that does not fit
/// in the address space is an error naming what did not fit (exit 1), never an
/// allocation abort (exit 134).
#[test]
fn verify_and_run_of_tensors_past_memory_fail_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    // 512 MiB in and out under a 1 GiB address space: compiling needs little, a run
    // holds the input at least twice (file and tensor, or tensor and call bytes).
    let shape = [1usize, 1, 128, 1 << 20];
    let mut m = ModelBuilder::new(3);
    let x = m.input("x", &shape);
    let y = m.node("Relu", &[&x], vec![]);
    m.output(&y);
    let p = write(dir.path(), "relu_512m.onnx", m);
    let npy = dir.path().join("x.npy");
    let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 128, 1048576), }";
    let header = format!("{header:<117}\n");
    let mut file = b"\x93NUMPY\x01\x00".to_vec();
    file.extend((header.len() as u16).to_le_bytes());
    file.extend(header.as_bytes());
    file.resize(file.len() + shape.iter().product::<usize>() * 4, 0);
    std::fs::write(&npy, file).unwrap();
    let out_dir = dir.path().join("out");
    let verify = vec!["verify".to_string(), p.display().to_string()];
    let run = vec![
        "run".to_string(),
        p.display().to_string(),
        "--input".to_string(),
        format!("x={}", npy.display()),
        "--output".to_string(),
        out_dir.display().to_string(),
    ];
    for args in [verify, run] {
        let out = Command::new("sh")
            .arg("-c")
            .arg("ulimit -v 1048576; exec \"$0\" \"$@\"")
            .arg(env!("CARGO_BIN_EXE_nnc"))
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "nnc {}: {stderr}", args[0]);
        assert!(
            stderr.contains("does not fit in memory") && !stderr.contains("panicked"),
            "nnc {}: {stderr}",
            args[0]
        );
    }
    assert!(!out_dir.join("y.npy").exists(), "no partial output");
}
