//! Bad run-time input through `nnc run` and `nnc verify`: an out-of-range Gather index
//! is one clear error (NNC_ERR_INDEX_OUT_OF_RANGE), never a crash; OneHot follows the
//! spec (an index outside [-depth, depth) gives a row of off values, as onnxruntime);
//! integer `MIN / -1` and division by zero return normally with the documented values.

#[path = "../../tests/common/models.rs"]
mod models;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use models::{Attr, ModelBuilder};
use nnc::ir::Tensor;

const INT64: i32 = 7;

fn nnc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nnc"))
        .args(args)
        .output()
        .expect("nnc runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn write_npy(dir: &Path, name: &str, t: &Tensor) -> String {
    let path = dir.join(format!("{name}.npy"));
    std::fs::write(&path, nnc_host::npy::to_bytes(t).expect("npy")).expect("write");
    format!("{name}={}", path.display())
}

/// `y = Gather(x [4, 3] float, i [2] int64, axis 0)`: the file and y's name.
fn gather_model(dir: &Path) -> (PathBuf, String) {
    let mut m = ModelBuilder::new(1);
    let x = m.input("x", &[4, 3]);
    let i = m.typed_input("i", INT64, &[2]);
    let y = m.node("Gather", &[&x, &i], vec![("axis", Attr::I(0))]);
    m.output(&y);
    let path = dir.join("gather.onnx");
    std::fs::write(&path, m.encode()).expect("write");
    (path, y)
}

fn run(model: &Path, inputs: &[String], out: &Path) -> Output {
    let mut args = vec!["run".to_string(), model.display().to_string()];
    for i in inputs {
        args.extend(["--input".to_string(), i.clone()]);
    }
    args.extend(["--output".to_string(), out.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    nnc(&args)
}

#[test]
fn an_out_of_range_gather_index_is_one_clear_error_in_run_and_verify() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (model, y) = gather_model(dir.path());
    let x = Tensor::from_vec(&[4, 3], (0..12).map(|v| v as f32).collect::<Vec<f32>>());
    let xs = write_npy(dir.path(), "x", &x);
    for bad in [4i64, -5, i64::MAX, i64::MIN] {
        let i = write_npy(dir.path(), "i", &Tensor::from_vec(&[2], vec![1i64, bad]));
        for cmd in ["run", "verify"] {
            let o = if cmd == "run" {
                run(&model, &[xs.clone(), i.clone()], &dir.path().join("out"))
            } else {
                let m = model.display().to_string();
                nnc(&["verify", &m, "--input", &xs, "--input", &i])
            };
            let t = text(&o);
            assert_eq!(o.status.code(), Some(1), "{cmd} {bad}: {t}");
            // `run` reports the compiled code's status; `verify` meets the bad index
            // first in its reference interpreter, which names the node.
            let says = if cmd == "run" {
                "NNC_ERR_INDEX_OUT_OF_RANGE"
            } else {
                "node Gather_1 (Gather): Gather: index"
            };
            assert!(t.contains(says), "{cmd} {bad}: {t}");
            assert_eq!(t.trim().lines().count(), 1, "{cmd} {bad}: {t}");
            assert!(!t.contains("panicked"), "{cmd} {bad}: {t}");
        }
    }
    // In range, negative included, it runs.
    let i = write_npy(dir.path(), "i", &Tensor::from_vec(&[2], vec![-1i64, 0]));
    let out = dir.path().join("ok");
    let o = run(&model, &[xs, i], &out);
    assert!(o.status.success(), "{}", text(&o));
    let y = nnc_host::npy::read(&out.join(format!("{y}.npy"))).expect("output");
    let want = vec![9f32, 10., 11., 0., 1., 2.];
    assert_eq!(y, Tensor::from_vec(&[2, 3], want));
}

#[test]
fn one_hot_out_of_range_indices_give_off_rows_as_onnxruntime() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut m = ModelBuilder::new(1);
    let i = m.typed_input("i", INT64, &[4]);
    let depth = m.int_init(&[3]);
    let values = m.float_init(&[2], vec![0.0, 1.0]);
    let y = m.node("OneHot", &[&i, &depth, &values], vec![]);
    m.output(&y);
    let model = dir.path().join("one_hot.onnx");
    std::fs::write(&model, m.encode()).expect("write");
    let i = write_npy(
        dir.path(),
        "i",
        &Tensor::from_vec(&[4], vec![1i64, 5, -1, -9]),
    );
    let out = dir.path().join("out");
    let o = run(&model, &[i], &out);
    assert!(o.status.success(), "{}", text(&o));
    let y = nnc_host::npy::read(&out.join(format!("{y}.npy"))).expect("output");
    #[rustfmt::skip]
    let want = vec![
        0f32, 1., 0.,
        0., 0., 0.,
        0., 0., 1.,
        0., 0., 0.,
    ];
    assert_eq!(y, Tensor::from_vec(&[4, 3], want));
}

#[test]
fn integer_min_over_minus_one_and_division_by_zero_run_normally() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (op, want) in [("Div", vec![i64::MIN, 0, -3]), ("Mod", vec![0, 0, 1])] {
        let mut m = ModelBuilder::new(1);
        let a = m.typed_input("a", INT64, &[3]);
        let b = m.typed_input("b", INT64, &[3]);
        let y = m.node(op, &[&a, &b], vec![]);
        m.output(&y);
        let model = dir.path().join(format!("{op}.onnx"));
        std::fs::write(&model, m.encode()).expect("write");
        let a = write_npy(
            dir.path(),
            "a",
            &Tensor::from_vec(&[3], vec![i64::MIN, 7, -7]),
        );
        let b = write_npy(dir.path(), "b", &Tensor::from_vec(&[3], vec![-1i64, 0, 2]));
        let out = dir.path().join(op);
        let o = run(&model, &[a, b], &out);
        assert!(o.status.success(), "{op}: {}", text(&o));
        let y = nnc_host::npy::read(&out.join(format!("{y}.npy"))).expect("output");
        // Div truncates (-7 / 2 = -3); Mod with fmod 0 takes the divisor's sign.
        assert_eq!(y, Tensor::from_vec(&[3], want), "{op}");
    }
}
