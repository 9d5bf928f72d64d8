//! Bad input gets one clear error naming the file, node and op, a nonzero exit, no
//! panic, and no output file.

#[path = "../../tests/common/models.rs"]
mod models;

use std::path::Path;
use std::process::{Command, Output};

use models::{Attr, ModelBuilder};

fn nnc(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nnc"))
        .args(args)
        .output()
        .unwrap()
}

/// Compiles `model` and expects failure with every `needles` in stderr and no output.
fn expect_compile_error(model: &Path, needles: &[&str]) {
    let out_path = model.with_file_name("libout.so");
    let out = nnc(&[
        "compile".as_ref(),
        model.as_os_str(),
        "-o".as_ref(),
        out_path.as_os_str(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "compile unexpectedly succeeded");
    assert_eq!(out.status.code(), Some(1), "exit code; stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    assert!(
        stderr.starts_with("error: "),
        "one error line expected: {stderr}"
    );
    for n in needles {
        assert!(stderr.contains(n), "'{n}' missing from: {stderr}");
    }
    assert!(!out_path.exists(), "a partial artifact was left behind");
    assert!(
        !out_path.with_extension("h").exists(),
        "a partial header was left behind"
    );
    let leftovers: Vec<_> = std::fs::read_dir(model.parent().unwrap())
        .unwrap()
        .flatten()
        .filter(|e| e.path() != model)
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

fn write_model(dir: &Path, name: &str, bytes: Vec<u8>) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn truncated_protobuf_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = models::cnn(1).0;
    bytes.truncate(bytes.len() / 2);
    let m = write_model(dir.path(), "truncated.onnx", bytes);
    expect_compile_error(&m, &["truncated.onnx", "not a valid ONNX model"]);
}

#[test]
fn garbage_bytes_are_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let m = write_model(
        dir.path(),
        "garbage.onnx",
        (0..4096u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect(),
    );
    let out_path = dir.path().join("libout.so");
    let out = nnc(&[
        "compile".as_ref(),
        m.as_os_str(),
        "-o".as_ref(),
        out_path.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    assert!(!out_path.exists());
}

#[test]
fn every_unknown_op_is_listed_with_its_node() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = ModelBuilder::new(1);
    let x = b.input("x", &[2, 3]);
    let y = b.node("FancyOp", &[&x], vec![]);
    let z = b.node("Relu", &[&y], vec![]);
    let w = b.node("OtherFancyOp", &[&x], vec![]);
    let s = b.node("Add", &[&z, &w], vec![]);
    b.output(&s);
    let m = write_model(dir.path(), "unknown.onnx", b.encode());
    expect_compile_error(
        &m,
        &[
            "unknown.onnx",
            "FancyOp_1",
            "(FancyOp)",
            "OtherFancyOp_3",
            "(OtherFancyOp)",
        ],
    );
}

#[test]
fn a_bad_attribute_names_node_and_op() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = ModelBuilder::new(1);
    let x = b.input("x", &[1, 2, 5, 5]);
    let w = b.weight(&[3, 2, 3, 3], 1.0);
    let y = b.node("Conv", &[&x, &w], vec![("auto_pad", Attr::S("SIDEWAYS"))]);
    b.output(&y);
    let m = write_model(dir.path(), "badattr.onnx", b.encode());
    expect_compile_error(&m, &["badattr.onnx", "Conv_", "(Conv)", "auto_pad"]);
}

#[test]
fn an_impossible_shape_names_node_and_op() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = ModelBuilder::new(1);
    let x = b.input("x", &[2, 3]);
    let w = b.weight(&[4, 5], 1.0);
    let y = b.node("MatMul", &[&x, &w], vec![]);
    b.output(&y);
    let m = write_model(dir.path(), "shape.onnx", b.encode());
    expect_compile_error(
        &m,
        &["shape.onnx", "MatMul_", "(MatMul)", "inner dimensions"],
    );
}

/// NonZero's output length is the number of nonzero inputs: a node reading it (every
/// kernel has fixed extents) is refused by name, with the reason.
#[test]
fn a_value_dependent_shape_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = ModelBuilder::new(1);
    let x = b.input("x", &[2, 3]);
    let n = b.node("NonZero", &[&x], vec![]);
    let y = b.node("Neg", &[&n], vec![]);
    b.output(&y);
    let m = write_model(dir.path(), "nonzero.onnx", b.encode());
    expect_compile_error(&m, &["nonzero.onnx", "Neg", "known only at run time"]);
}

#[test]
fn inspect_lists_every_unsupported_op_in_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = ModelBuilder::new(1);
    let x = b.input("x", &[2, 3]);
    let y = b.node("FancyOp", &[&x], vec![]);
    let z = b.node("Relu", &[&x], vec![]);
    let w = b.node("OtherFancyOp", &[&z], vec![]);
    b.output(&y);
    b.output(&w);
    let m = write_model(dir.path(), "inspect.onnx", b.encode());
    let out = nnc(&["inspect".as_ref(), m.as_os_str()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("unsupported (2)"), "{stdout}");
    assert!(
        stdout.contains("FancyOp") && stdout.contains("OtherFancyOp"),
        "{stdout}"
    );
    assert!(stdout.contains("input: x float32[2,3]"), "{stdout}");
    assert!(stdout.contains("not in the ONNX node suite"), "{stdout}");
}

/// `FrobnicateA -> Relu -> FrobnicateB` over an unknown domain: both unknown nodes are
/// reported in one run, by compile and by inspect (text and JSON), while Relu, which
/// only lacks a typed operand, is skipped without a report of its own.
#[test]
fn a_chain_of_unknown_ops_reports_every_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = ModelBuilder::new(1);
    let x = b.input("x", &[2, 3]);
    let a = b.node("FrobnicateA", &[&x], vec![]);
    b.graph.node.last_mut().unwrap().domain = "com.example".into();
    let r = b.node("Relu", &[&a], vec![]);
    let c = b.node("FrobnicateB", &[&r], vec![]);
    b.graph.node.last_mut().unwrap().domain = "com.example".into();
    b.output(&c);
    let m = write_model(dir.path(), "chain.onnx", b.encode());
    expect_compile_error(
        &m,
        &[
            "chain.onnx",
            "unsupported operators (2)",
            "(FrobnicateA)",
            "(FrobnicateB)",
            "domain 'com.example'",
        ],
    );
    let out_path = dir.path().join("libout.so");
    let compile = nnc(&[
        "compile".as_ref(),
        m.as_os_str(),
        "-o".as_ref(),
        out_path.as_os_str(),
    ]);
    let stderr = String::from_utf8_lossy(&compile.stderr);
    assert!(!stderr.contains("(Relu)"), "Relu reported: {stderr}");

    let text = nnc(&["inspect".as_ref(), m.as_os_str()]);
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(stdout.contains("unsupported (2)"), "{stdout}");
    assert!(
        stdout.contains("FrobnicateA") && stdout.contains("FrobnicateB"),
        "{stdout}"
    );

    let json = nnc(&[
        "inspect".as_ref(),
        m.as_os_str(),
        "--format".as_ref(),
        "json".as_ref(),
    ]);
    let j: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let ops: Vec<&str> = j["unsupported"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["op"].as_str().unwrap())
        .collect();
    assert_eq!(ops, ["FrobnicateA", "FrobnicateB"], "{j}");
}

/// An op the suite has cases for: inspect says how many of them nnc passes.
#[test]
fn inspect_gives_the_suite_status_of_an_unsupported_op() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = ModelBuilder::new(1);
    let x = b.input("x", &[2, 3]);
    let y = b.node("Bernoulli", &[&x], vec![]);
    b.output(&y);
    let m = write_model(dir.path(), "bernoulli.onnx", b.encode());
    let out = nnc(&["inspect".as_ref(), m.as_os_str()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let status = nnc_cli::suite_status::op_status("Bernoulli");
    assert!(status.cases > 0);
    let want = format!(
        "ONNX node suite: {} of {} cases using Bernoulli pass",
        status.passing, status.cases
    );
    assert!(stdout.contains(&want), "{want} missing: {stdout}");
}

#[test]
fn unbound_symbolic_dimension_names_the_flag() {
    use nnc::onnx::proto::{tensor_shape_proto::dimension::Value, type_proto};
    let dir = tempfile::tempdir().unwrap();
    let mut b = ModelBuilder::new(1);
    let x = b.input("x", &[1, 3]);
    let y = b.node("Relu", &[&x], vec![]);
    b.output(&y);
    if let Some(type_proto::Value::TensorType(t)) = b.graph.input[0]
        .r#type
        .as_mut()
        .and_then(|t| t.value.as_mut())
    {
        t.shape.as_mut().unwrap().dim[0].value = Some(Value::DimParam("batch".into()));
    }
    let m = write_model(dir.path(), "sym.onnx", b.encode());
    expect_compile_error(&m, &["sym.onnx", "'x'", "--dim batch=VALUE"]);
    let out_path = dir.path().join("libok.so");
    let ok = nnc(&[
        "compile".as_ref(),
        m.as_os_str(),
        "--dim".as_ref(),
        "batch=4".as_ref(),
        "-o".as_ref(),
        out_path.as_os_str(),
    ]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(out_path.exists() && out_path.with_extension("h").exists());
}
