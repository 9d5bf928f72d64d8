//! `nnc run` and `nnc verify`, and the localization behind `nnc verify`: with one
//! weight corrupted on the compiled side only, [`verify_graphs`] must name exactly the
//! node that reads that weight (and another node when another weight is corrupted).

#[path = "../../tests/common/models.rs"]
mod models;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use models::{Attr, ModelBuilder};
use nnc::ir::{Graph, Tensor, ValueId};
use nnc_cli::verify::{self, Tolerance};

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

fn example_model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/c/model.onnx")
}

/// The examples' 1x1x8x8 ramp image, i/64.
fn ramp() -> Tensor {
    Tensor::from_vec(&[1, 1, 8, 8], (0..64).map(|i| i as f32 / 64.0).collect())
}

/// Three convolutions with ReLUs between them; returns the model file and the names of
/// the three conv weights.
fn three_convs(dir: &Path) -> (PathBuf, [String; 3]) {
    let mut m = ModelBuilder::new(7);
    let x = m.input("x", &[1, 3, 8, 8]);
    let pads = || vec![("pads", Attr::Ints(vec![1, 1, 1, 1]))];
    let w1 = m.weight(&[4, 3, 3, 3], 0.5);
    let y = m.node("Conv", &[&x, &w1], pads());
    let y = m.node("Relu", &[&y], vec![]);
    let w2 = m.weight(&[5, 4, 3, 3], 0.5);
    let y = m.node("Conv", &[&y, &w2], pads());
    let y = m.node("Relu", &[&y], vec![]);
    let w3 = m.weight(&[2, 5, 3, 3], 0.5);
    let y = m.node("Conv", &[&y, &w3], pads());
    m.output(&y);
    let path = dir.join("three_convs.onnx");
    std::fs::write(&path, m.encode()).unwrap();
    (path, [w1, w2, w3])
}

fn value_named(g: &Graph, name: &str) -> ValueId {
    ValueId(
        g.values
            .iter()
            .position(|v| v.name == name && v.constant.is_some())
            .unwrap_or_else(|| panic!("no constant {name} after the passes")),
    )
}

/// The node reading `v` (exactly one).
fn consumer(g: &Graph, v: ValueId) -> String {
    let readers: Vec<&str> = g
        .nodes
        .iter()
        .filter(|n| n.inputs.contains(&Some(v)))
        .map(|n| n.name.as_str())
        .collect();
    assert_eq!(readers.len(), 1, "{readers:?}");
    readers[0].to_string()
}

#[test]
fn run_writes_outputs_as_npy() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("image.npy");
    std::fs::write(&image, nnc_host::npy::to_bytes(&ramp()).unwrap()).unwrap();
    let out = dir.path().join("out");
    let o = nnc(&[
        "run",
        example_model().to_str().unwrap(),
        "--input",
        &format!("image={}", image.display()),
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("probs: float32[1,4] min 0.133500 max 0.358158"),
        "{}",
        text(&o)
    );
    let probs = nnc_host::npy::read(&out.join("probs.npy")).unwrap();
    assert_eq!(probs.shape(), &[1, 4]);
    let expected = [0.133500, 0.260438, 0.358158, 0.247903];
    for (a, e) in probs.to_f64_vec().iter().zip(expected) {
        assert!((a - e).abs() < 1e-5, "{a} vs {e}");
    }
}

#[test]
fn run_names_missing_and_mismatched_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let model = example_model();
    let out = dir.path().join("out");
    let o = nnc(&[
        "run",
        model.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("missing input 'image' (float32[1,1,8,8])"),
        "{}",
        text(&o)
    );
    let bad = dir.path().join("bad.npy");
    let t = Tensor::from_vec(&[1, 8, 8], vec![0i64; 64]);
    std::fs::write(&bad, nnc_host::npy::to_bytes(&t).unwrap()).unwrap();
    let o = nnc(&[
        "run",
        model.to_str().unwrap(),
        "--input",
        &format!("image={}", bad.display()),
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("input 'image' must be float32[1,1,8,8], the file holds int64[1,8,8]"),
        "{}",
        text(&o)
    );
}

#[test]
fn verify_passes_on_a_correct_model() {
    let o = nnc(&["verify", example_model().to_str().unwrap(), "--seed", "5"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("PASS probs"), "{t}");
    assert!(t.contains("onnxruntime"), "{t}");
    assert!(t.trim_end().ends_with("PASS"), "{t}");

    let dir = tempfile::tempdir().unwrap();
    let (model, _) = three_convs(dir.path());
    let o = nnc(&["verify", model.to_str().unwrap(), "--rtol", "1e-4"]);
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn verify_fails_with_exit_code_1_at_zero_tolerance_on_rounding_differences() {
    // Not a corruption: an impossible tolerance shows the FAIL path of the CLI (the
    // compiled convolutions sum in another order than the interpreter).
    let dir = tempfile::tempdir().unwrap();
    let (model, _) = three_convs(dir.path());
    let o = nnc(&[
        "verify",
        model.to_str().unwrap(),
        "--rtol",
        "0",
        "--atol",
        "0",
    ]);
    let t = text(&o);
    if o.status.success() {
        // Bit-identical results are possible; then there is nothing to check.
        assert!(t.contains("PASS"), "{t}");
    } else {
        assert_eq!(o.status.code(), Some(1), "{t}");
        assert!(t.contains("FAIL"), "{t}");
    }
}

#[test]
fn same_graph_verifies_and_has_no_divergence() {
    let dir = tempfile::tempdir().unwrap();
    let (model, _) = three_convs(dir.path());
    let g = verify::load(&model, &Default::default()).unwrap();
    let inputs = verify::random_inputs(&g, 1).unwrap();
    let report = verify::verify_graphs(&g, &g, &inputs, Tolerance::default()).unwrap();
    assert!(report.passed());
    assert!(report.divergence.is_none());
    let none = verify::first_divergence(&g, &g, &inputs, Tolerance::default()).unwrap();
    assert!(none.is_none(), "{none:?}");
}

/// THE localization test: corrupt each conv weight in turn on the compiled side; the
/// first diverging node must be exactly that weight's consumer.
#[test]
fn verify_points_at_the_node_whose_weights_were_corrupted() {
    let dir = tempfile::tempdir().unwrap();
    let (model, weights) = three_convs(dir.path());
    let g = verify::load(&model, &Default::default()).unwrap();
    let inputs = verify::random_inputs(&g, 3).unwrap();
    let mut named = Vec::new();
    for w in &weights {
        let v = value_named(&g, w);
        let expected_node = consumer(&g, v);
        let mut corrupted = g.clone();
        let Some(Tensor::F32(a)) = &mut corrupted.values[v.0].constant else {
            panic!("float32 weight")
        };
        // One output channel's weights change: a real but local corruption.
        a.index_axis_mut(ndarray::Axis(0), 1)
            .mapv_inplace(|x| x * 1.5 + 0.25);
        let report = verify::verify_graphs(&g, &corrupted, &inputs, Tolerance::default()).unwrap();
        assert!(!report.passed(), "corrupting {w} must change the output");
        let d = report
            .divergence
            .unwrap_or_else(|| panic!("no divergence found for {w}: {:?}", report.note));
        assert_eq!(d.node, expected_node, "corrupted {w}: {d}");
        assert_eq!(d.onnx_op, "Conv", "{d}");
        assert!(d.comparison.mismatches > 0);
        named.push(d.node);
    }
    // Each corruption was localized to a different node: the answer follows the weight.
    named.sort();
    named.dedup();
    assert_eq!(named.len(), 3, "{named:?}");
}

/// Random integer inputs read as Gather indices stay in range.
#[test]
fn random_index_inputs_are_valid() {
    use nnc::onnx::proto::ValueInfoProto;
    use nnc::onnx::proto::{tensor_shape_proto, type_proto, TensorShapeProto, TypeProto};
    let mut m = ModelBuilder::new(2);
    m.graph.input.push(ValueInfoProto {
        name: "ids".into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: 7,
                shape: Some(TensorShapeProto {
                    dim: vec![tensor_shape_proto::Dimension {
                        value: Some(tensor_shape_proto::dimension::Value::DimValue(64)),
                    }],
                }),
            })),
        }),
    });
    let table = m.weight(&[5, 3], 1.0);
    let y = m.node("Gather", &[&table, "ids"], vec![("axis", Attr::I(0))]);
    m.output(&y);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gather.onnx");
    std::fs::write(&path, m.encode()).unwrap();
    let g = verify::load(&path, &Default::default()).unwrap();
    let ids = verify::random_inputs(&g, 9).unwrap().remove(0).to_i64_vec();
    assert!(ids.iter().all(|&i| (0..5).contains(&i)), "{ids:?}");
    assert!(ids.contains(&0) && ids.contains(&4), "{ids:?}");
    let o = nnc(&["verify", path.to_str().unwrap(), "--seed", "9"]);
    assert!(o.status.success(), "{}", text(&o));
}
