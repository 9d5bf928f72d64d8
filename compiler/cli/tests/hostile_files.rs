//! Hostile input files: FIFOs and devices where a model, external data or a tensor file
//! is expected, external data that declares more than its file holds or reaches
//! outside the model's folder through a symlink, and weights past --max-weight-bytes.
//! Each is one error naming the file, never a hang, an abort or another file's bytes.

#![cfg(unix)]

#[path = "../../tests/common/models.rs"]
mod models;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use models::ModelBuilder;
use nnc::onnx::proto::{StringStringEntryProto, TensorProto, DATA_LOCATION_EXTERNAL};

/// Runs `nnc args` (through `sh -c` when `shell_prefix` is given, e.g. a `ulimit`), and
/// fails the test if it has not finished within 60 s: a hang is a finding.
fn nnc_within_deadline(args: &[&str], shell_prefix: Option<&str>) -> Output {
    let exe = env!("CARGO_BIN_EXE_nnc");
    let mut cmd = match shell_prefix {
        Some(prefix) => {
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg(format!("{prefix}; exec \"$0\" \"$@\""))
                .arg(exe)
                .args(args);
            c
        }
        None => {
            let mut c = Command::new(exe);
            c.args(args);
            c
        }
    };
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("nnc {args:?} hung (killed after 60 s)");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Expects exit code 1 and one error line holding every needle, and no artifact.
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

fn compile(model: &Path, extra: &[&str]) -> (Output, PathBuf) {
    compile_with(model, extra, None)
}

fn compile_with(model: &Path, extra: &[&str], shell_prefix: Option<&str>) -> (Output, PathBuf) {
    let out_path = model.with_file_name("libout.so");
    let mut args = vec![
        "compile",
        model.to_str().unwrap(),
        "-o",
        out_path.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    (nnc_within_deadline(&args, shell_prefix), out_path)
}

fn mkfifo(path: &Path) {
    let ok = Command::new("mkfifo").arg(path).status().unwrap().success();
    assert!(ok, "mkfifo {}", path.display());
}

/// `y = x + w` with `w` (f32, `dims`) stored in the external file `location`.
fn external_weight_model(dir: &Path, dims: &[i64], location: &str) -> PathBuf {
    let mut b = ModelBuilder::new(1);
    let n = dims.iter().product::<i64>() as usize;
    let x = b.input("x", &[n.min(4)]);
    b.graph.initializer.push(TensorProto {
        name: "w".into(),
        dims: dims.to_vec(),
        data_type: 1,
        data_location: DATA_LOCATION_EXTERNAL,
        external_data: vec![StringStringEntryProto {
            key: "location".into(),
            value: location.into(),
        }],
        ..Default::default()
    });
    let y = b.node("Add", &[&x, "w"], vec![]);
    b.output(&y);
    let path = dir.join("model.onnx");
    std::fs::write(&path, b.encode()).unwrap();
    path
}

fn weights_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
fn a_fifo_as_the_model_is_refused_without_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("model.onnx");
    mkfifo(&fifo);
    let (out, artifact) = compile(&fifo, &[]);
    expect_error(
        &out,
        &["model.onnx", "cannot read", "not a regular file (a FIFO)"],
    );
    assert!(!artifact.exists());
    let out = nnc_within_deadline(&["inspect", fifo.to_str().unwrap()], None);
    expect_error(&out, &["model.onnx", "not a regular file"]);
}

#[test]
fn a_fifo_as_external_data_is_refused_without_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let model = external_weight_model(dir.path(), &[4], "w.bin");
    mkfifo(&dir.path().join("w.bin"));
    let (out, _) = compile(&model, &[]);
    expect_error(
        &out,
        &["model.onnx", "tensor 'w'", "not a regular file (a FIFO)"],
    );
}

#[test]
fn a_fifo_or_device_as_a_tensor_file_is_refused_without_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let model = external_weight_model(dir.path(), &[4], "w.bin");
    std::fs::write(dir.path().join("w.bin"), weights_bytes(&[1.0; 4])).unwrap();
    let fifo = dir.path().join("x.npy");
    mkfifo(&fifo);
    let freeze = format!("x={}", fifo.display());
    let (out, _) = compile(&model, &["--freeze-input", &freeze]);
    expect_error(&out, &["x.npy", "not a regular file (a FIFO)"]);
    let fifo_pb = dir.path().join("x.pb");
    mkfifo(&fifo_pb);
    let freeze = format!("x={}", fifo_pb.display());
    let (out, _) = compile(&model, &["--freeze-input", &freeze]);
    expect_error(&out, &["x.pb", "not a regular file (a FIFO)"]);
    let (out, _) = compile(&model, &["--freeze-input", "x=/dev/zero"]);
    expect_error(
        &out,
        &["/dev/zero", "not a regular file (a character device)"],
    );

    // `nnc run --input` and `--calibration` read through the same helper.
    let input = format!("x={}", fifo.display());
    let outdir = dir.path().join("out");
    let out = nnc_within_deadline(
        &[
            "run",
            model.to_str().unwrap(),
            "--input",
            &input,
            "--output",
            outdir.to_str().unwrap(),
        ],
        None,
    );
    expect_error(&out, &["x.npy", "not a regular file (a FIFO)"]);
    let (out, _) = compile(
        &model,
        &[
            "--quantize",
            "int8",
            "--calibration",
            fifo.to_str().unwrap(),
        ],
    );
    expect_error(&out, &["x.npy", "not a regular file"]);
}

#[test]
fn external_data_shorter_than_declared_is_refused_before_allocating() {
    // 4 GiB declared, 16 bytes on disk, 2 GiB of address space: allocating first
    // would abort ("memory allocation failed").
    let dir = tempfile::tempdir().unwrap();
    let model = external_weight_model(dir.path(), &[1 << 30], "w.bin");
    std::fs::write(dir.path().join("w.bin"), weights_bytes(&[1.0; 4])).unwrap();
    let (out, _) = compile_with(&model, &[], Some("ulimit -v 2097152"));
    expect_error(&out, &["model.onnx", "tensor 'w'", "holds 16 bytes"]);

    // A sparse file that does hold the bytes is checked against the weight limit
    // before it is read.
    let sparse = std::fs::File::create(dir.path().join("w.bin")).unwrap();
    sparse.set_len(4 << 30).unwrap();
    let (out, _) = compile_with(
        &model,
        &["--max-weight-bytes", "1G"],
        Some("ulimit -v 2097152"),
    );
    expect_error(
        &out,
        &["model.onnx", "tensor 'w'", "--max-weight-bytes", "1G"],
    );
}

#[test]
fn dev_zero_through_a_symlink_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let model = external_weight_model(dir.path(), &[1 << 30], "w.bin");
    symlink("/dev/zero", dir.path().join("w.bin")).unwrap();
    let (out, _) = compile_with(&model, &[], Some("ulimit -v 2097152"));
    expect_error(
        &out,
        &["model.onnx", "tensor 'w'", "outside the model's folder"],
    );
}

#[test]
fn symlinks_out_of_the_model_folder_are_refused() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.bin"), weights_bytes(&[7.0; 4])).unwrap();

    // A symlinked file.
    let dir = tempfile::tempdir().unwrap();
    let model = external_weight_model(dir.path(), &[4], "w.bin");
    symlink(outside.path().join("secret.bin"), dir.path().join("w.bin")).unwrap();
    let (out, artifact) = compile(&model, &[]);
    expect_error(
        &out,
        &["model.onnx", "tensor 'w'", "outside the model's folder"],
    );
    assert!(!artifact.exists());

    // A symlinked sub-folder.
    let dir = tempfile::tempdir().unwrap();
    let model = external_weight_model(dir.path(), &[4], "data/secret.bin");
    symlink(outside.path(), dir.path().join("data")).unwrap();
    let (out, _) = compile(&model, &[]);
    expect_error(
        &out,
        &["model.onnx", "tensor 'w'", "outside the model's folder"],
    );
}

#[test]
fn symlinks_inside_the_model_folder_still_work() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    std::fs::write(dir.path().join("data/real.bin"), weights_bytes(&[1.0; 4])).unwrap();
    symlink("data/real.bin", dir.path().join("w.bin")).unwrap();
    let model = external_weight_model(dir.path(), &[4], "w.bin");
    let (out, artifact) = compile(&model, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(artifact.exists());
}

#[test]
fn weights_past_the_limit_name_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = ModelBuilder::new(1);
    let x = b.input("x", &[256]);
    let w = b.weight(&[256], 1.0); // 1 KiB inline
    let c = b.weight(&[256], 1.0); // and another
    let y = b.node("Add", &[&x, &w], vec![]);
    let z = b.node("Add", &[&y, &c], vec![]);
    b.output(&z);
    let model = dir.path().join("model.onnx");
    std::fs::write(&model, b.encode()).unwrap();
    let (out, _) = compile(&model, &["--max-weight-bytes", "1536"]);
    expect_error(&out, &["model.onnx", "--max-weight-bytes", "2048 bytes"]);
    let (out, _) = compile(&model, &["--max-weight-bytes", "2K"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
