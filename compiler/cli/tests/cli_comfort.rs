//! Command-line comfort: `nnc inspect --format json`, diagnostics that quote the
//! failing node (coloured only on a terminal or when forced), and no progress-bar or
//! escape-code noise when stderr is not a terminal.

#[path = "../../tests/common/models.rs"]
mod models;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use models::{Attr, ModelBuilder};

/// Runs nnc with stdout and stderr piped (so not terminals) and no colour variables
/// inherited, plus `env`.
fn nnc(args: &[&std::ffi::OsStr], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nnc"));
    cmd.args(args)
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR")
        .env_remove("CLICOLOR_FORCE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn example_model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/c/model.onnx")
}

fn inspect_json(model: &Path) -> serde_json::Value {
    let out = nnc(
        &[
            "inspect".as_ref(),
            model.as_os_str(),
            "--format".as_ref(),
            "json".as_ref(),
        ],
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn write_model(dir: &Path, name: &str, bytes: Vec<u8>) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn inspect_json_describes_the_c_example() {
    let model = example_model();
    let j = inspect_json(&model);
    assert_eq!(j["model"], model.display().to_string());
    assert!(j["opset"].as_i64().unwrap() >= 1, "{j}");
    let inputs = j["inputs"].as_array().unwrap();
    assert_eq!(inputs.len(), 1, "{j}");
    assert_eq!(inputs[0]["name"], "image");
    assert_eq!(inputs[0]["dtype"], "float32");
    assert_eq!(inputs[0]["shape"], serde_json::json!([1, 1, 8, 8]));
    let outputs = j["outputs"].as_array().unwrap();
    assert_eq!(outputs.len(), 1, "{j}");
    assert_eq!(outputs[0]["name"], "probs");
    assert_eq!(outputs[0]["dtype"], "float32");
    assert_eq!(outputs[0]["shape"], serde_json::json!([1, 4]));
    let ops = j["operators"].as_array().unwrap();
    assert!(!ops.is_empty(), "{j}");
    for op in ops {
        assert!(
            op["op"].is_string() && op["count"].as_u64().unwrap() >= 1,
            "{op}"
        );
    }
    assert!(j["parameters"].as_u64().unwrap() > 0, "{j}");
    // Every float32 parameter is in the weights, repacked or not.
    assert!(j["weights_bytes"].as_u64().unwrap() >= 4 * j["parameters"].as_u64().unwrap());
    let arena = j["arena_bytes"].as_u64().unwrap();
    assert!(arena > 0 && arena >= j["arena_lower_bound_bytes"].as_u64().unwrap());
    assert_eq!(j["unsupported"], serde_json::json!([]));
    assert!(j["int8"]["quantized_layer_count"].is_u64(), "{j}");
}

/// The default text output is unchanged by --format: `--format text` is the default.
#[test]
fn inspect_text_is_the_default() {
    let model = example_model();
    let plain = nnc(&["inspect".as_ref(), model.as_os_str()], &[]);
    let text = nnc(
        &[
            "inspect".as_ref(),
            model.as_os_str(),
            "--format".as_ref(),
            "text".as_ref(),
        ],
        &[],
    );
    assert!(plain.status.success() && text.status.success());
    assert_eq!(plain.stdout, text.stdout);
    let stdout = String::from_utf8_lossy(&plain.stdout);
    assert!(stdout.contains("input: image float32[1,1,8,8]"), "{stdout}");
    assert!(stdout.contains("output: probs float32[1,4]"), "{stdout}");
    assert!(stdout.contains("unsupported: none"), "{stdout}");
}

#[test]
fn inspect_json_lists_unsupported_ops_with_their_suite_status() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = ModelBuilder::new(1);
    let x = b.input("x", &[3, 4]);
    let n = b.node("NonZero", &[&x], vec![]);
    let y = b.node("Neg", &[&n], vec![]);
    let z = b.node("FancyOp", &[&x], vec![("alpha", Attr::F(0.5))]);
    b.output(&y);
    b.output(&z);
    let m = write_model(dir.path(), "unsupported.onnx", b.encode());
    let j = inspect_json(&m);
    assert_eq!(j["inputs"][0]["shape"], serde_json::json!([3, 4]));
    assert!(
        j["weights_bytes"].is_null() && j["arena_bytes"].is_null(),
        "{j}"
    );
    let ops: Vec<(&str, u64)> = j["operators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["op"].as_str().unwrap(), o["count"].as_u64().unwrap()))
        .collect();
    assert_eq!(ops, [("NonZero", 1), ("Neg", 1), ("FancyOp", 1)]);
    let u = j["unsupported"].as_array().unwrap();
    assert_eq!(u.len(), 2, "{j}");
    assert_eq!(u[0]["node"], "Neg_2");
    assert_eq!(u[0]["op"], "Neg");
    assert!(
        u[0]["reason"]
            .as_str()
            .unwrap()
            .contains("extent is known only at run time"),
        "{j}"
    );
    assert_eq!(u[0]["excerpt"], "t2 = Neg(t1: int64[2,12])");
    let status = nnc_cli::suite_status::op_status("Neg");
    assert!(status.cases > 0);
    assert_eq!(u[0]["suite_cases"], status.cases);
    assert_eq!(u[0]["suite_passing"], status.passing);
    assert_eq!(u[0]["suite_status"], nnc_cli::suite_status::describe("Neg"));
    assert_eq!(u[1]["node"], "FancyOp_3");
    assert_eq!(u[1]["reason"], "no such operator in nnc");
    assert_eq!(u[1]["excerpt"], "t3 = FancyOp<alpha=0.5>(x: float32[3,4])");
    assert_eq!(u[1]["suite_status"], "not in the ONNX node suite");
    assert_eq!(u[1]["suite_cases"], 0);
}

fn compile_stderr(model: &Path, env: &[(&str, &str)]) -> String {
    let out = nnc(
        &[
            "compile".as_ref(),
            model.as_os_str(),
            "-o".as_ref(),
            model.with_file_name("libout.so").as_os_str(),
        ],
        env,
    );
    assert_eq!(out.status.code(), Some(1));
    String::from_utf8(out.stderr).unwrap()
}

/// NonZero's output, whose extent only the run knows, read by another node.
fn nonzero_model(dir: &Path) -> PathBuf {
    let mut b = ModelBuilder::new(1);
    let x = b.input("x", &[3, 4]);
    let n = b.node("NonZero", &[&x], vec![]);
    let y = b.node("Neg", &[&n], vec![]);
    b.output(&y);
    write_model(dir, "nonzero.onnx", b.encode())
}

#[test]
fn a_failing_compile_quotes_the_node_in_plain_text() {
    let dir = tempfile::tempdir().unwrap();
    let m = nonzero_model(dir.path());
    let stderr = compile_stderr(&m, &[]);
    let want = format!(
        "error: unsupported operators (1)\n  --> {}, node 'Neg_2' (Neg)\n   |  \
         t2 = Neg(t1: int64[2,12])\n   = note: it reads 't1', whose extent is known only at \
         run time (axis 1); nnc runs the nodes after such a value row by row, which needs its \
         leading axis to be the one that varies\n",
        m.display()
    );
    assert_eq!(stderr, want);
    assert!(!stderr.contains('\x1b'), "escape codes in piped stderr");
}

#[test]
fn colour_is_forced_by_clicolor_force_and_vetoed_by_no_color() {
    let dir = tempfile::tempdir().unwrap();
    let m = nonzero_model(dir.path());
    let forced = compile_stderr(&m, &[("CLICOLOR_FORCE", "1")]);
    assert!(
        forced.starts_with("\x1b[1m\x1b[31merror\x1b[0m"),
        "bold red error: {forced:?}"
    );
    assert!(forced.contains("t2 = Neg(t1: int64[2,12])"), "{forced:?}");
    let vetoed = compile_stderr(&m, &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")]);
    assert!(!vetoed.contains('\x1b'), "{vetoed:?}");
    assert!(vetoed.starts_with("error: unsupported operators (1)"));
}

/// An invalid node (not just an unsupported one) is quoted with its typed inputs and
/// its attributes.
#[test]
fn a_bad_attribute_is_quoted_with_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = ModelBuilder::new(1);
    let x = b.input("x", &[1, 2, 5, 5]);
    let w = b.weight(&[3, 2, 3, 3], 1.0);
    let y = b.node(
        "Conv",
        &[&x, &w],
        vec![
            ("auto_pad", Attr::S("SIDEWAYS")),
            ("strides", Attr::Ints(vec![1, 1])),
        ],
    );
    b.output(&y);
    let m = write_model(dir.path(), "badattr.onnx", b.encode());
    let stderr = compile_stderr(&m, &[]);
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(stderr.contains("auto_pad"), "{stderr}");
    assert!(
        stderr.contains(&format!("  --> {}, node 'Conv_2' (Conv)\n", m.display())),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "   |  t2 = Conv<auto_pad=\"SIDEWAYS\", strides=[1, 1]>(x: float32[1,2,5,5], \
             w1: float32[3,2,3,3])\n"
        ),
        "{stderr}"
    );
}

/// A successful compile prints only its summary line: no progress bar or escape codes
/// when stderr is not a terminal.
#[test]
fn a_piped_compile_shows_no_progress_bar() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("libmodel.so");
    let out = nnc(
        &[
            "compile".as_ref(),
            example_model().as_os_str(),
            "-o".as_ref(),
            out_path.as_os_str(),
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("nnc: wrote "), "{stderr}");
    assert!(
        !stderr.contains('\x1b') && !stderr.contains('\r'),
        "{stderr:?}"
    );
}
