//! Ops whose output extent the input values decide (NonZero, Compress, Unique,
//! NonMaxSuppression): one library, planned for the largest extent, runs inputs that
//! give every extent from 0 to that bound; `run` reports each output's shape through
//! `options->output_shapes` and fills its buffer densely for it. Each case is compared
//! with the interpreter (exact: these ops only select and copy), natively and on
//! aarch64 under qemu; a node reading such a value is refused by name.

#[path = "common/models.rs"]
mod models;
#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use models::{Attr, ModelBuilder};
use nnc::codegen::{Arch, Target};
use nnc::ir::{Graph, Tensor};
use nnc::onnx::proto::ModelProto;
use nnc::onnx::{import_model, ImportOptions};
use nnc_runtime_abi::loader::{Library, Tensor as In, TensorMut};
use prost::Message;

fn import(bytes: &[u8]) -> nnc::error::Result<Graph> {
    let model = ModelProto::decode(bytes).expect("model decodes");
    let imported = import_model(&model, None, &ImportOptions::default())?;
    if !imported.unsupported.is_empty() {
        return Err(nnc::error::NncError::Unsupported(imported.unsupported));
    }
    let mut g = imported.graph;
    nnc::passes::PassManager::default().run(&mut g).unwrap();
    Ok(g)
}

/// The library for `g`, loaded with nnc-runtime-abi's loader.
struct Loaded {
    _dir: tempfile::TempDir,
    lib: Library,
}

fn load(g: &Graph) -> Loaded {
    let dir = tempfile::tempdir().unwrap();
    let path = runner::write_library(g, &runner::options(Target::host()), dir.path()).unwrap();
    let lib = Library::open(&path, None).unwrap();
    Loaded { _dir: dir, lib }
}

/// Runs `g`'s library through `run` with output shapes; each output cut to its shape.
fn run_compiled(loaded: &Loaded, g: &Graph, inputs: &[Tensor]) -> Vec<Tensor> {
    let lib = &loaded.lib;
    let in_bytes: Vec<Vec<u8>> = inputs.iter().map(Tensor::to_le_bytes).collect();
    // Buffers at the bound, filled with a pattern the run must not leave in place
    // past the actual extent... nor write past the bound (the loader checks sizes).
    let mut out_bytes: Vec<Vec<u8>> = g
        .outputs
        .iter()
        .map(|o| vec![0xa5u8; g.ty(*o).byte_size()])
        .collect();
    let ins: Vec<In> = in_bytes.iter().map(|b| In::bytes(b)).collect();
    let mut outs: Vec<TensorMut> = out_bytes.iter_mut().map(|b| TensorMut::bytes(b)).collect();
    let mut ws = lib.workspace();
    let shapes = lib.run_shaped(None, &mut ws, &[], &ins, &mut outs).unwrap();
    drop(outs);
    g.outputs
        .iter()
        .zip(shapes.iter().zip(&out_bytes))
        .map(|(o, (shape, bytes))| {
            let ty = nnc::ir::TensorType::new(g.ty(*o).dtype, shape.clone());
            Tensor::from_le_bytes(&ty, &bytes[..ty.byte_size()]).unwrap()
        })
        .collect()
}

/// Shapes equal and the elements bit for bit (`tol` None: these ops only select and
/// copy), or within `tol` relative and absolute (ops that compute).
fn assert_same(e: &Tensor, a: &Tensor, tol: Option<f64>, what: &str) {
    assert_eq!(e.shape(), a.shape(), "{what}: shape");
    match tol {
        None => assert_eq!(e.to_le_bytes(), a.to_le_bytes(), "{what}: {a:?} vs {e:?}"),
        Some(t) => {
            for (x, y) in e.to_f64_vec().iter().zip(a.to_f64_vec()) {
                assert!((x - y).abs() <= t * (1.0 + x.abs()), "{what}: {y} vs {x}");
            }
        }
    }
}

/// Compares the compiled library with the interpreter on every input set: shapes and
/// bits must match.
fn check(g: &Graph, sets: &[Vec<Tensor>]) {
    check_within(g, sets, None)
}

/// [`check`], the elements compared by [`assert_same`] with `tol`.
fn check_within(g: &Graph, sets: &[Vec<Tensor>], tol: Option<f64>) {
    let loaded = load(g);
    assert_eq!(
        loaded.lib.bounded_axes().len(),
        g.bounded_axes().len(),
        "model_info lists the bounded axes"
    );
    for (k, inputs) in sets.iter().enumerate() {
        let expected = nnc::interp::run_graph(g, inputs).unwrap();
        let actual = run_compiled(&loaded, g, inputs);
        for (i, (e, a)) in expected.iter().zip(&actual).enumerate() {
            assert_same(e, a, tol, &format!("set {k}, output {i}"));
        }
    }
    if let Some(harness) = runner::aarch64_harness() {
        let opts = runner::options(Target::new(Arch::Aarch64, None).unwrap());
        for (k, inputs) in sets.iter().enumerate() {
            let expected = nnc::interp::run_graph(g, inputs).unwrap();
            let actual = runner::run_on_aarch64_with(harness, g, inputs, &opts).unwrap();
            for (i, (e, a)) in expected.iter().zip(&actual).enumerate() {
                assert_same(e, a, tol, &format!("aarch64 set {k}, output {i}"));
            }
        }
    }
}

/// A node with several named outputs (ModelBuilder's nodes have one), each a graph
/// output; `attr` an optional int attribute.
fn multi_output_node(
    m: &mut ModelBuilder,
    op: &str,
    inputs: Vec<String>,
    outputs: &[String],
    attr: Option<(&str, i64)>,
) {
    m.graph.node.push(nnc::onnx::proto::NodeProto {
        input: inputs,
        output: outputs.to_vec(),
        name: op.to_lowercase(),
        op_type: op.into(),
        attribute: attr
            .map(|(name, i)| nnc::onnx::proto::AttributeProto {
                name: name.into(),
                r#type: 2,
                i,
                ..Default::default()
            })
            .into_iter()
            .collect(),
        ..Default::default()
    });
    for o in outputs {
        m.output(o);
    }
}

fn f32s(shape: &[usize], v: Vec<f32>) -> Tensor {
    Tensor::from_vec(shape, v)
}

fn bools(v: &[u8]) -> Tensor {
    Tensor::from_vec(&[v.len()], v.iter().map(|&b| b != 0).collect::<Vec<bool>>())
}

#[test]
fn non_zero_counts_every_extent() {
    let mut m = ModelBuilder::new(1);
    let x = m.input("x", &[3, 4]);
    let y = m.node("NonZero", &[&x], vec![]);
    m.output(&y);
    let g = import(&m.encode()).unwrap();
    assert_eq!(g.ty(g.outputs[0]).shape, vec![2, 12], "typed at the bound");
    let mut rng = models::Rng::new(7);
    let mut sets = vec![
        vec![f32s(&[3, 4], vec![0.0; 12])],
        vec![f32s(&[3, 4], vec![1.5; 12])],
        vec![f32s(
            &[3, 4],
            vec![
                0.0,
                -0.0,
                f32::NAN,
                1.0,
                0.0,
                0.0,
                -2.0,
                0.0,
                f32::INFINITY,
                0.0,
                0.0,
                1e-45,
            ],
        )],
    ];
    for _ in 0..4 {
        let v = (0..12)
            .map(|_| {
                if rng.below(2) == 0 {
                    0.0
                } else {
                    rng.uniform()
                }
            })
            .collect();
        sets.push(vec![f32s(&[3, 4], v)]);
    }
    check(&g, &sets);

    // Integers and bool, rank 1 and 3.
    let mut m = ModelBuilder::new(2);
    let x = m.typed_input("x", 6, &[7]);
    let y = m.node("NonZero", &[&x], vec![]);
    m.output(&y);
    let g = import(&m.encode()).unwrap();
    check(
        &g,
        &[vec![Tensor::from_vec(&[7], vec![0i32, 5, 0, -1, 0, 0, 9])]],
    );
    let mut m = ModelBuilder::new(3);
    let x = m.typed_input("x", 9, &[2, 3, 2]);
    let y = m.node("NonZero", &[&x], vec![]);
    m.output(&y);
    let g = import(&m.encode()).unwrap();
    let v: Vec<bool> = (0..12).map(|i| i % 3 != 1).collect();
    check(&g, &[vec![Tensor::from_vec(&[2, 3, 2], v)]]);
}

#[test]
fn compress_keeps_the_true_slices() {
    for (axis, cond_len) in [
        (None, 5),
        (Some(0), 3),
        (Some(1), 4),
        (Some(1), 2),
        (Some(-1), 6),
    ] {
        let mut m = ModelBuilder::new(4);
        let x = m.input("x", &[3, 4]);
        let c = m.typed_input("c", 9, &[cond_len]);
        let attrs = axis.map_or(vec![], |a| vec![("axis", Attr::I(a))]);
        let y = m.node("Compress", &[&x, &c], attrs);
        m.output(&y);
        let g = import(&m.encode()).unwrap();
        let x: Vec<f32> = (0..12).map(|i| i as f32 - 5.5).collect();
        let sets: Vec<Vec<Tensor>> = [vec![0u8; cond_len], vec![1u8; cond_len]]
            .into_iter()
            .chain([(0..cond_len).map(|i| (i % 2) as u8).collect()])
            .map(|c| vec![f32s(&[3, 4], x.clone()), bools(&c)])
            .collect();
        check(&g, &sets);
    }
}

#[test]
fn compress_with_a_constant_condition_has_a_static_shape() {
    let mut m = ModelBuilder::new(5);
    let x = m.input("x", &[3, 4]);
    let c = m.weight(&[1], 1.0); // replaced below by a bool initializer
    m.graph.initializer.retain(|t| t.name != c);
    m.graph.initializer.push(nnc::onnx::proto::TensorProto {
        name: c.clone(),
        dims: vec![4],
        data_type: 9,
        int32_data: vec![1, 0, 0, 1],
        ..Default::default()
    });
    let y = m.node("Compress", &[&x, &c], vec![("axis", Attr::I(1))]);
    m.output(&y);
    let g = import(&m.encode()).unwrap();
    assert!(g.bounded_axes().is_empty());
    assert_eq!(g.ty(g.outputs[0]).shape, vec![3, 2]);
    let x: Vec<f32> = (0..12).map(|i| i as f32).collect();
    check(&g, &[vec![f32s(&[3, 4], x)]]);
}

#[test]
fn unique_sorted_and_in_order_of_appearance() {
    let data = vec![
        2.0f32,
        -1.0,
        2.0,
        0.0,
        -0.0,
        f32::NAN,
        3.5,
        -1.0,
        f32::NAN,
        7.0,
        2.0,
        0.0,
    ];
    for sorted in [1, 0] {
        let mut m = ModelBuilder::new(6);
        let x = m.input("x", &[12]);
        let outs: Vec<String> = ["y", "indices", "inverse", "counts"]
            .iter()
            .map(|n| n.to_string())
            .collect();
        multi_output_node(&mut m, "Unique", vec![x], &outs, Some(("sorted", sorted)));
        let g = import(&m.encode()).unwrap();
        let distinct: Vec<f32> = (0..12).map(|i| i as f32).collect();
        check(
            &g,
            &[
                vec![f32s(&[12], data.clone())],
                vec![f32s(&[12], vec![4.0; 12])],
                vec![f32s(&[12], distinct)],
            ],
        );
    }
}

#[test]
fn unique_slices_along_an_axis() {
    for (shape, axis) in [
        (vec![5usize, 3], 0i64),
        (vec![2, 4, 3], 1),
        (vec![2, 3, 4], -1),
    ] {
        let mut m = ModelBuilder::new(8);
        let x = m.typed_input("x", 7, &shape);
        let outs: Vec<String> = (0..4).map(|i| format!("o{i}")).collect();
        multi_output_node(&mut m, "Unique", vec![x], &outs, Some(("axis", axis)));
        let g = import(&m.encode()).unwrap();
        let n: usize = shape.iter().product();
        let mut rng = models::Rng::new(9);
        let sets: Vec<Vec<Tensor>> = [2usize, 3, 100]
            .iter()
            .map(|&range| {
                let v: Vec<i64> = (0..n).map(|_| rng.below(range) as i64 - 1).collect();
                vec![Tensor::from_vec(&shape, v)]
            })
            .collect();
        check(&g, &sets);
    }
}

/// `boxes` [B, N, 4] corners around a few clusters, so that IoU suppresses some.
fn clustered_boxes(rng: &mut models::Rng, b: usize, n: usize, center: bool) -> Vec<f32> {
    let mut v = Vec::with_capacity(b * n * 4);
    for _ in 0..b * n {
        let (cx, cy) = (rng.below(3) as f32 * 0.4, rng.below(3) as f32 * 0.4);
        let (x, y) = (cx + rng.uniform() * 0.05, cy + rng.uniform() * 0.05);
        let (w, h) = (
            0.2 + rng.uniform().abs() * 0.1,
            0.2 + rng.uniform().abs() * 0.1,
        );
        if center {
            v.extend([x, y, w, h]);
        } else if rng.below(2) == 0 {
            v.extend([y, x, y + h, x + w]);
        } else {
            v.extend([y + h, x + w, y, x]); // flipped corners
        }
    }
    v
}

fn nms_model(center: bool, max_out: Option<i64>, thresholds: bool) -> Graph {
    let mut m = ModelBuilder::new(10);
    let boxes = m.input("boxes", &[2, 20, 4]);
    let scores = m.input("scores", &[2, 3, 20]);
    let mut inputs = vec![boxes, scores];
    match max_out {
        Some(k) => inputs.push(m.int_init(&[k])),
        None => inputs.push(m.typed_input("max_out", 7, &[1])),
    }
    if thresholds {
        inputs.push(m.input("iou", &[1]));
        inputs.push(m.input("score_threshold", &[1]));
    }
    let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let y = m.node(
        "NonMaxSuppression",
        &refs,
        vec![("center_point_box", Attr::I(center as i64))],
    );
    m.output(&y);
    import(&m.encode()).unwrap()
}

#[test]
fn non_max_suppression_matches_the_reference() {
    let mut rng = models::Rng::new(11);
    for center in [false, true] {
        let g = nms_model(center, None, true);
        assert_eq!(g.ty(g.outputs[0]).shape, vec![2 * 3 * 20, 3]);
        let mut sets = vec![];
        for (max_out, iou, score) in [
            (3i64, 0.5f32, 0.3f32),
            (20, 0.3, -1.0),
            (0, 0.5, 0.0),
            (-4, 0.5, 0.0),
            (100, 0.0, 0.5),
        ] {
            let boxes = clustered_boxes(&mut rng, 2, 20, center);
            // Ties between scores too: quantized to tenths.
            let scores: Vec<f32> = (0..120).map(|_| rng.below(10) as f32 / 10.0).collect();
            sets.push(vec![
                f32s(&[2, 20, 4], boxes),
                f32s(&[2, 3, 20], scores),
                Tensor::from_vec(&[1], vec![max_out]),
                f32s(&[1], vec![iou]),
                f32s(&[1], vec![score]),
            ]);
        }
        check(&g, &sets);
    }
    // A constant max_output bounds the output: 2 batches × 3 classes × 4.
    let g = nms_model(false, Some(4), false);
    assert_eq!(g.ty(g.outputs[0]).shape, vec![24, 3]);
    let boxes = clustered_boxes(&mut rng, 2, 20, false);
    let scores: Vec<f32> = (0..120).map(|_| rng.uniform()).collect();
    check(
        &g,
        &[vec![f32s(&[2, 20, 4], boxes), f32s(&[2, 3, 20], scores)]],
    );
}

#[test]
fn a_node_reading_a_bounded_value_is_refused_by_name() {
    let mut m = ModelBuilder::new(12);
    let x = m.input("x", &[3, 4]);
    let y = m.node("NonZero", &[&x], vec![]);
    let z = m.node("Neg", &[&y], vec![]);
    m.output(&z);
    let err = import(&m.encode()).unwrap_err().to_string();
    assert!(
        err.contains("Neg") && err.contains("known only at run time"),
        "{err}"
    );
}

#[test]
fn header_and_model_info_describe_the_bounded_axis() {
    let mut m = ModelBuilder::new(13);
    let x = m.input("x", &[3, 4]);
    let y = m.node("NonZero", &[&x], vec![]);
    m.output(&y);
    let g = import(&m.encode()).unwrap();
    let loaded = load(&g);
    let b = loaded.lib.bounded_axes();
    assert_eq!((b.len(), b[0].output, b[0].axis), (1, 0, 1));
    assert_eq!(loaded.lib.outputs()[0].shape, vec![2, 12]);
    let h = nnc::header::generate(&g, "m", "m", 0, ("baseline", "sse3,ssse3,sse41"));
    assert!(
        h.contains("#define NNC_M_OUTPUT_0_BOUNDED_AXES_MASK 0x2"),
        "{h}"
    );
}

/// Imports with `input` frozen to `value`: the static model a user would compile with
/// `--freeze-input`, the reference for the run-time parameter.
fn import_frozen(bytes: &[u8], input: &str, value: Tensor) -> Graph {
    import_frozen_all(bytes, &[(input, value)])
}

fn import_frozen_all(bytes: &[u8], frozen: &[(&str, Tensor)]) -> Graph {
    let model = ModelProto::decode(bytes).unwrap();
    let mut opts = ImportOptions::default();
    for (input, value) in frozen {
        opts.frozen_inputs.insert(input.to_string(), value.clone());
    }
    let mut g = import_model(&model, None, &opts).unwrap().graph;
    nnc::passes::PassManager::default().run(&mut g).unwrap();
    g
}

/// Runs the library with `inputs`, expecting `run` to fail with `status`.
fn run_fails_with(g: &Graph, inputs: &[Tensor], status: i32) {
    let loaded = load(g);
    let in_bytes: Vec<Vec<u8>> = inputs.iter().map(Tensor::to_le_bytes).collect();
    let mut out_bytes: Vec<Vec<u8>> = (g.outputs.iter())
        .map(|o| vec![0u8; g.ty(*o).byte_size()])
        .collect();
    let ins: Vec<In> = in_bytes.iter().map(|b| In::bytes(b)).collect();
    let mut outs: Vec<TensorMut> = out_bytes.iter_mut().map(|b| TensorMut::bytes(b)).collect();
    let mut ws = loaded.lib.workspace();
    match loaded.lib.run_shaped(None, &mut ws, &[], &ins, &mut outs) {
        Err(nnc_runtime_abi::loader::Error::Status(s)) => assert_eq!(s, status),
        other => panic!("expected status {status}, got {other:?}"),
    }
}

/// Every value of the run-time parameter gives the frozen model's outputs, bit for bit.
fn check_against_frozen(bytes: &[u8], x: &Tensor, param: &str, values: &[Tensor]) {
    let g = import(bytes).unwrap();
    let loaded = load(&g);
    for v in values {
        let frozen = import_frozen(bytes, param, v.clone());
        let expected = nnc::interp::run_graph(&frozen, std::slice::from_ref(x)).unwrap();
        let actual = run_compiled(&loaded, &g, &[x.clone(), v.clone()]);
        for (e, a) in expected.iter().zip(&actual) {
            assert_eq!(e.shape(), a.shape(), "{param} = {v:?}");
            assert_eq!(e.to_le_bytes(), a.to_le_bytes(), "{param} = {v:?}");
        }
    }
}

#[test]
fn top_k_with_k_at_run_time() {
    let mut m = ModelBuilder::new(14);
    let x = m.input("x", &[3, 5]);
    let k = m.typed_input("k", 7, &[1]);
    let outs = vec!["values".to_string(), "indices".to_string()];
    multi_output_node(&mut m, "TopK", vec![x, k], &outs, None);
    let bytes = m.encode();
    let x = f32s(&[3, 5], (0..15).map(|i| ((i * 7) % 11) as f32).collect());
    let ks: Vec<Tensor> = (0..=5)
        .map(|k| Tensor::from_vec(&[1], vec![k as i64]))
        .collect();
    check_against_frozen(&bytes, &x, "k", &ks);
    let g = import(&bytes).unwrap();
    for bad in [-1i64, 6] {
        run_fails_with(&g, &[x.clone(), Tensor::from_vec(&[1], vec![bad])], 3);
    }
}

#[test]
fn cumsum_along_an_axis_given_at_run_time() {
    for op in ["CumSum", "CumProd"] {
        let mut m = ModelBuilder::new(15);
        let x = m.input("x", &[2, 3, 4]);
        let axis = m.typed_input("axis", 6, &[]);
        let y = m.node(op, &[&x, &axis], vec![("reverse", Attr::I(1))]);
        m.output(&y);
        let bytes = m.encode();
        let x = f32s(
            &[2, 3, 4],
            (0..24).map(|i| 1.0 + (i % 5) as f32 * 0.25).collect(),
        );
        let axes: Vec<Tensor> = (-3..3)
            .map(|a: i32| Tensor::from_vec(&[], vec![a]))
            .collect();
        check_against_frozen(&bytes, &x, "axis", &axes);
        let g = import(&bytes).unwrap();
        for bad in [-4i32, 3] {
            run_fails_with(&g, &[x.clone(), Tensor::from_vec(&[], vec![bad])], 3);
        }
    }
}

#[test]
fn trilu_with_k_at_run_time() {
    for upper in [0, 1] {
        let mut m = ModelBuilder::new(16);
        let x = m.input("x", &[2, 3, 5]);
        let k = m.typed_input("k", 7, &[]);
        let y = m.node("Trilu", &[&x, &k], vec![("upper", Attr::I(upper))]);
        m.output(&y);
        let bytes = m.encode();
        let x = f32s(&[2, 3, 5], (0..30).map(|i| i as f32 - 7.0).collect());
        let ks: Vec<Tensor> = [-9i64, -3, -1, 0, 2, 4, 5, 100]
            .iter()
            .map(|&k| Tensor::from_vec(&[], vec![k]))
            .collect();
        check_against_frozen(&bytes, &x, "k", &ks);
    }
}

#[test]
fn reductions_over_axes_given_at_run_time() {
    for (op, keepdims, then) in [
        ("ReduceSum", 1, None),
        ("ReduceMax", 0, None),
        ("ReduceMean", 0, Some("Sqrt")),
        ("ReduceL2", 1, Some("Neg")),
    ] {
        let mut m = ModelBuilder::new(17);
        let x = m.input("x", &[2, 3, 4]);
        let axes = m.typed_input("axes", 7, &[2]);
        let mut y = m.node(op, &[&x, &axes], vec![("keepdims", Attr::I(keepdims))]);
        if let Some(unary) = then {
            y = m.node(unary, &[&y], vec![]);
        }
        m.output(&y);
        // Reductions other than ReduceSum take their axes as an input from opset 18.
        let mut model = ModelProto::decode(m.encode().as_slice()).unwrap();
        model.opset_import[0].version = 18;
        let bytes = model.encode_to_vec();
        let x = f32s(&[2, 3, 4], (0..24).map(|i| 0.5 + (i % 7) as f32).collect());
        let sets: Vec<Tensor> = [[0i64, 1], [1, 0], [0, 2], [-1, 1], [2, -3]]
            .iter()
            .map(|s| Tensor::from_vec(&[2], s.to_vec()))
            .collect();
        check_against_frozen(&bytes, &x, "axes", &sets);
        let g = import(&bytes).unwrap();
        assert!(
            !g.bounded_axes().is_empty(),
            "{op}: the shape depends on the axes"
        );
        for bad in [[0i64, 0], [3, 1], [-4, 0]] {
            run_fails_with(&g, &[x.clone(), Tensor::from_vec(&[2], bad.to_vec())], 3);
        }
    }
}

#[test]
fn squeeze_and_unsqueeze_with_axes_given_at_run_time() {
    for (op, shape, count, sets) in [
        (
            "Unsqueeze",
            vec![3usize, 4],
            2usize,
            vec![[0i64, 1], [0, 3], [-1, 1], [2, -4]],
        ),
        (
            "Squeeze",
            vec![1, 3, 1, 1],
            2,
            vec![[0, 2], [3, -4], [-1, -2], [2, 3]],
        ),
    ] {
        let mut m = ModelBuilder::new(18);
        let x = m.input("x", &shape);
        let axes = m.typed_input("axes", 7, &[count]);
        let y = m.node(op, &[&x, &axes], vec![]);
        m.output(&y);
        let bytes = m.encode();
        let n: usize = shape.iter().product();
        let x = f32s(&shape, (0..n).map(|i| i as f32).collect());
        let sets: Vec<Tensor> = sets
            .iter()
            .map(|s| Tensor::from_vec(&[2], s.to_vec()))
            .collect();
        check_against_frozen(&bytes, &x, "axes", &sets);
        let g = import(&bytes).unwrap();
        // A repeated axis, one out of range, and (Squeeze) an axis of size 3.
        let mut bad_sets = vec![[0i64, 0], [0, 9]];
        if op == "Squeeze" {
            bad_sets.push([0, 1]);
        }
        for bad in bad_sets {
            run_fails_with(&g, &[x.clone(), Tensor::from_vec(&[2], bad.to_vec())], 3);
        }
    }
}

/// Every set of run-time parameters (named `params`, after input `x`) gives the frozen
/// model's outputs bit for bit, and the interpreter's on aarch64 too.
fn check_params_against_frozen(bytes: &[u8], x: &Tensor, params: &[&str], sets: &[Vec<Tensor>]) {
    check_params_within(bytes, x, params, sets, None)
}

/// [`check_params_against_frozen`], the elements compared by [`assert_same`] with `tol`.
fn check_params_within(
    bytes: &[u8],
    x: &Tensor,
    params: &[&str],
    sets: &[Vec<Tensor>],
    tol: Option<f64>,
) {
    let g = import(bytes).unwrap();
    let loaded = load(&g);
    for set in sets {
        let frozen: Vec<(&str, Tensor)> = params.iter().copied().zip(set.iter().cloned()).collect();
        let expected =
            nnc::interp::run_graph(&import_frozen_all(bytes, &frozen), std::slice::from_ref(x))
                .unwrap();
        let mut inputs = vec![x.clone()];
        inputs.extend(set.iter().cloned());
        let actual = run_compiled(&loaded, &g, &inputs);
        assert_eq!(expected.len(), actual.len());
        for (e, a) in expected.iter().zip(&actual) {
            assert_same(e, a, tol, &format!("{params:?} = {set:?}"));
        }
    }
    let with_x: Vec<Vec<Tensor>> = (sets.iter())
        .map(|set| {
            std::iter::once(x.clone())
                .chain(set.iter().cloned())
                .collect()
        })
        .collect();
    check_within(&g, &with_x, tol);
}

fn i64s(v: &[i64]) -> Tensor {
    Tensor::from_vec(&[v.len()], v.to_vec())
}

#[test]
fn slice_with_positions_given_at_run_time() {
    let mut m = ModelBuilder::new(13);
    let x = m.input("x", &[3, 4, 5]);
    let params = ["starts", "ends", "axes", "steps"];
    let ins: Vec<String> = (params.iter()).map(|p| m.typed_input(p, 7, &[2])).collect();
    let y = m.node("Slice", &[&x, &ins[0], &ins[1], &ins[2], &ins[3]], vec![]);
    m.output(&y);
    let bytes = m.encode();
    let x = f32s(&[3, 4, 5], (0..60).map(|i| i as f32).collect());
    let big = i64::MAX;
    let sets: Vec<Vec<Tensor>> = [
        ([0, 1], [3, 4], [0, 1], [1, 1]),
        ([1, 0], [2, 5], [1, 2], [1, 2]),
        ([-1, -2], [-big, 0], [2, 1], [-1, -1]),
        ([4, 3], [0, 0], [-1, -3], [-2, i64::MIN]),
        ([2, 2], [2, 1], [0, 1], [1, 1]),
        ([-big, -100], [big, 100], [0, 2], [3, 1]),
    ]
    .iter()
    .map(|(s, e, a, st)| vec![i64s(s), i64s(e), i64s(a), i64s(st)])
    .collect();
    check_params_against_frozen(&bytes, &x, &params, &sets);
    let g = import(&bytes).unwrap();
    // A repeated axis, one out of range, a step of 0.
    for (axes, steps) in [([0, 0], [1, 1]), ([3, 0], [1, 1]), ([0, 1], [1, 0])] {
        let inputs = [
            x.clone(),
            i64s(&[0, 0]),
            i64s(&[2, 2]),
            i64s(&axes),
            i64s(&steps),
        ];
        run_fails_with(&g, &inputs, 3);
    }
}

#[test]
fn slice_with_only_starts_at_run_time_keeps_other_axes_static() {
    let mut m = ModelBuilder::new(13);
    let x = m.input("x", &[4, 6]);
    let starts = m.typed_input("starts", 7, &[1]);
    let ends = m.int_init(&[5]);
    let axes = m.int_init(&[1]);
    let y = m.node("Slice", &[&x, &starts, &ends, &axes], vec![]);
    m.output(&y);
    let bytes = m.encode();
    let x = f32s(&[4, 6], (0..24).map(|i| i as f32 * 0.5).collect());
    let sets: Vec<Vec<Tensor>> = [-7i64, -1, 0, 3, 5, 9]
        .iter()
        .map(|&s| vec![i64s(&[s])])
        .collect();
    check_params_against_frozen(&bytes, &x, &["starts"], &sets);
    let g = import(&bytes).unwrap();
    assert_eq!(g.bounded_axes(), vec![(0, 1)], "only axis 1 is sliced");
}

#[test]
fn split_with_sizes_given_at_run_time() {
    let mut m = ModelBuilder::new(13);
    let x = m.input("x", &[2, 7, 3]);
    let sizes = m.typed_input("split", 7, &[3]);
    let outs: Vec<String> = (0..3).map(|k| format!("y{k}")).collect();
    multi_output_node(&mut m, "Split", vec![x, sizes], &outs, Some(("axis", 1)));
    let bytes = m.encode();
    let x = f32s(&[2, 7, 3], (0..42).map(|i| i as f32).collect());
    let sets: Vec<Vec<Tensor>> = [[2i64, 4, 1], [0, 7, 0], [7, 0, 0], [3, 3, 1]]
        .iter()
        .map(|s| vec![i64s(s)])
        .collect();
    check_params_against_frozen(&bytes, &x, &["split"], &sets);
    let g = import(&bytes).unwrap();
    // Sizes that do not sum to the axis, a negative one, one past the axis.
    for bad in [[3i64, 3, 3], [-1, 4, 4], [8, -1, 0], [1, 1, 1]] {
        run_fails_with(&g, &[x.clone(), i64s(&bad)], 3);
    }
}

#[test]
fn dft_along_an_axis_given_at_run_time() {
    // A full transform keeps the shape whatever the axis; a one-sided one shortens the
    // axis it runs along, so its output's shape depends on the value.
    for (onesided, bounded) in [(0, false), (1, true)] {
        let mut m = ModelBuilder::new(20);
        let x = m.input("x", &[2, 6, 5, 1]);
        let axis = m.typed_input("axis", 7, &[]);
        let y = m.node(
            "DFT",
            &[&x, "", &axis],
            vec![("onesided", Attr::I(onesided))],
        );
        m.output(&y);
        let mut model = ModelProto::decode(m.encode().as_slice()).unwrap();
        model.opset_import[0].version = 20;
        let bytes = model.encode_to_vec();
        let x = f32s(
            &[2, 6, 5, 1],
            (0..60).map(|i| ((i * 5) % 13) as f32 - 6.0).collect(),
        );
        let axes: Vec<Vec<Tensor>> = [0i64, 1, 2, -4, -3, -2]
            .iter()
            .map(|&a| vec![Tensor::from_vec(&[], vec![a])])
            .collect();
        // The transform is a matrix product, summed in another order than the frozen
        // model's: hence a tolerance.
        check_params_within(&bytes, &x, &["axis"], &axes, Some(1e-5));
        let g = import(&bytes).unwrap();
        assert_eq!(
            !g.bounded_axes().is_empty(),
            bounded,
            "onesided = {onesided}"
        );
        // The complex axis, and axes out of range.
        for bad in [3i64, -1, 4, -5] {
            run_fails_with(&g, &[x.clone(), Tensor::from_vec(&[], vec![bad])], 3);
        }
    }
}

#[test]
fn shape_and_size_of_a_bounded_value_are_read_at_run_time() {
    let mut m = ModelBuilder::new(21);
    let x = m.input("x", &[2, 3]);
    let nz = m.node("NonZero", &[&x], vec![]);
    let shape = m.node("Shape", &[&nz], vec![]);
    let tail = m.node("Shape", &[&nz], vec![("start", Attr::I(-1))]);
    let size = m.node("Size", &[&nz], vec![]);
    for o in [&shape, &tail, &size] {
        m.output(o);
    }
    let g = import(&m.encode()).unwrap();
    let loaded = load(&g);
    for nonzero in [0usize, 1, 4, 6] {
        let x = f32s(
            &[2, 3],
            (0..6).map(|i| f32::from(u8::from(i < nonzero))).collect(),
        );
        let out = run_compiled(&loaded, &g, std::slice::from_ref(&x));
        let n = nonzero as i64;
        assert_eq!(out[0].to_i64_vec(), vec![2, n], "Shape, {nonzero} nonzero");
        assert_eq!(out[1].to_i64_vec(), vec![n], "Shape from -1");
        assert_eq!(out[2].to_i64_vec(), vec![2 * n], "Size");
    }
}

/// A detector's post-processing: NonMaxSuppression's selected rows feed a Gather of the
/// box index, a Gather of the boxes, scaling, a Cast and a Concat: every node after it
/// runs on the selected rows only.
fn detections_model() -> Vec<u8> {
    let mut m = ModelBuilder::new(22);
    let boxes = m.input("boxes", &[1, 12, 4]);
    let scores = m.input("scores", &[1, 2, 12]);
    let max_out = m.int_init(&[5]);
    let iou = m.float_init(&[1], vec![0.4]);
    let threshold = m.float_init(&[1], vec![0.2]);
    let selected = m.node(
        "NonMaxSuppression",
        &[&boxes, &scores, &max_out, &iou, &threshold],
        vec![],
    );
    let column = m.int_init(&[2]);
    let which = m.node("Gather", &[&selected, &column], vec![("axis", Attr::I(1))]);
    let flat_shape = m.int_init(&[-1]);
    let which = m.node("Reshape", &[&which, &flat_shape], vec![]);
    let box_shape = m.int_init(&[12, 4]);
    let all_boxes = m.node("Reshape", &[&boxes, &box_shape], vec![]);
    let picked = m.node("Gather", &[&all_boxes, &which], vec![("axis", Attr::I(0))]);
    let scale = m.float_init(&[4], vec![320.0, 240.0, 320.0, 240.0]);
    let scaled = m.node("Mul", &[&picked, &scale], vec![]);
    let class = m.int_init(&[1]);
    let class = m.node("Gather", &[&selected, &class], vec![("axis", Attr::I(1))]);
    let class = m.node("Cast", &[&class], vec![("to", Attr::I(1))]);
    let rows = m.node("Concat", &[&scaled, &class], vec![("axis", Attr::I(1))]);
    m.output(&rows);
    m.encode()
}

#[test]
fn nodes_after_a_bounded_value_run_on_its_actual_rows() {
    let g = import(&detections_model()).unwrap();
    assert_eq!(
        g.ty(g.outputs[0]).shape,
        vec![10, 5],
        "2 classes × 5 at most"
    );
    assert_eq!(g.bounded_axes(), vec![(0, 0)]);
    let mut rng = models::Rng::new(23);
    let mut sets = vec![];
    for threshold_hits in [0usize, 1, 3, 12] {
        let boxes = clustered_boxes(&mut rng, 1, 12, false);
        // The first `threshold_hits` boxes of each class score above the threshold.
        let scores: Vec<f32> = (0..24)
            .map(|i| {
                if i % 12 < threshold_hits {
                    0.3 + rng.uniform() * 0.6
                } else {
                    0.1
                }
            })
            .collect();
        sets.push(vec![f32s(&[1, 12, 4], boxes), f32s(&[1, 2, 12], scores)]);
    }
    check(&g, &sets);
    // Independently of the interpreter's handling of the rows: each output row is the
    // selected box scaled, then its class.
    let loaded = load(&g);
    for set in &sets {
        let out = run_compiled(&loaded, &g, set);
        let boxes = set[0].to_f64_vec();
        let rows = out[0].to_f64_vec();
        let n = out[0].shape()[0];
        let mut nms = ModelBuilder::new(24);
        let b = nms.input("boxes", &[1, 12, 4]);
        let s = nms.input("scores", &[1, 2, 12]);
        let (k, iou, thr) = (
            nms.int_init(&[5]),
            nms.float_init(&[1], vec![0.4]),
            nms.float_init(&[1], vec![0.2]),
        );
        let sel = nms.node("NonMaxSuppression", &[&b, &s, &k, &iou, &thr], vec![]);
        nms.output(&sel);
        let sel_graph = import(&nms.encode()).unwrap();
        let selected = nnc::interp::run_graph(&sel_graph, set).unwrap()[0].to_i64_vec();
        assert_eq!(selected.len(), 3 * n);
        for r in 0..n {
            let (class, index) = (selected[3 * r + 1] as usize, selected[3 * r + 2] as usize);
            for (c, scale) in [320.0f32, 240.0, 320.0, 240.0].iter().enumerate() {
                let want = (boxes[4 * index + c] as f32) * scale;
                assert_eq!(rows[5 * r + c], f64::from(want), "row {r}");
            }
            assert_eq!(rows[5 * r + 4], class as f64, "row {r}");
        }
    }
}

#[test]
fn nonzero_indices_as_rows_feed_gathers() {
    // `torch.nonzero(x)`: NonZero then Transpose, one row per element; and the 1-D
    // case squeezed to a vector of indices.
    let mut m = ModelBuilder::new(25);
    let x = m.input("x", &[3, 4]);
    let nz = m.node("NonZero", &[&x], vec![]);
    let rows = m.node("Transpose", &[&nz], vec![("perm", Attr::Ints(vec![1, 0]))]);
    let col = m.int_init(&[1]);
    let cols = m.node("Gather", &[&rows, &col], vec![("axis", Attr::I(1))]);
    let cols = m.node("Cast", &[&cols], vec![("to", Attr::I(1))]);
    let two = m.float_init(&[1], vec![2.0]);
    let doubled = m.node("Mul", &[&cols, &two], vec![]);
    m.output(&rows);
    m.output(&doubled);
    let v = m.input("v", &[6]);
    let nz1 = m.node("NonZero", &[&v], vec![]);
    let zero = m.int_init(&[0]);
    let idx = m.node("Squeeze", &[&nz1, &zero], vec![]);
    let picked = m.node("Gather", &[&v, &idx], vec![("axis", Attr::I(0))]);
    m.output(&picked);
    let g = import(&m.encode()).unwrap();
    assert_eq!(g.bounded_axes(), vec![(0, 0), (1, 0), (2, 0)]);
    let sets: Vec<Vec<Tensor>> = [0usize, 1, 5, 12]
        .iter()
        .map(|&n| {
            vec![
                f32s(
                    &[3, 4],
                    (0..12)
                        .map(|i| f32::from(u8::from((i * 7) % 12 < n)))
                        .collect(),
                ),
                f32s(
                    &[6],
                    (0..6)
                        .map(|i| {
                            if i % 3 < n.min(3) {
                                i as f32 + 0.5
                            } else {
                                0.0
                            }
                        })
                        .collect(),
                ),
            ]
        })
        .collect();
    check(&g, &sets);
    // Independently: the rows are the nonzero elements' coordinates in row-major order.
    let loaded = load(&g);
    for set in &sets {
        let out = run_compiled(&loaded, &g, set);
        let x = set[0].to_f64_vec();
        let want: Vec<i64> = (0..12)
            .filter(|&i| x[i] != 0.0)
            .flat_map(|i| [(i / 4) as i64, (i % 4) as i64])
            .collect();
        assert_eq!(out[0].to_i64_vec(), want);
        let cols: Vec<f64> = want.chunks(2).map(|c| 2.0 * c[1] as f64).collect();
        assert_eq!(out[1].to_f64_vec(), cols);
        let v: Vec<f64> = set[1]
            .to_f64_vec()
            .into_iter()
            .filter(|&e| e != 0.0)
            .collect();
        assert_eq!(out[2].to_f64_vec(), v);
    }
}

#[test]
fn gather_nd_by_nonzero_rows_picks_scores_and_boxes() {
    // torchvision's detection post-processing: `scores[keep]` and `boxes[keep]` for a
    // boolean mask export as NonZero, Transpose and GatherND over the index rows.
    let mut m = ModelBuilder::new(26);
    let scores = m.input("scores", &[7]);
    let boxes = m.input("boxes", &[7, 4]);
    let half = m.float_init(&[], vec![0.5]);
    let keep = m.node("Greater", &[&scores, &half], vec![]);
    let nz = m.node("NonZero", &[&keep], vec![]);
    let rows = m.node("Transpose", &[&nz], vec![("perm", Attr::Ints(vec![1, 0]))]);
    let kept_scores = m.node("GatherND", &[&scores, &rows], vec![]);
    let kept_boxes = m.node("GatherND", &[&boxes, &rows], vec![]);
    let two = m.float_init(&[], vec![2.0]);
    let scaled = m.node("Mul", &[&kept_boxes, &two], vec![]);
    m.output(&kept_scores);
    m.output(&scaled);
    let g = import(&m.encode()).unwrap();
    assert_eq!(g.bounded_axes(), vec![(0, 0), (1, 0)]);
    let sets: Vec<Vec<Tensor>> = [0usize, 1, 4, 7]
        .iter()
        .map(|&n| {
            let s: Vec<f32> = (0..7)
                .map(|i| {
                    if (i * 3) % 7 < n {
                        0.6 + i as f32 / 20.0
                    } else {
                        0.1
                    }
                })
                .collect();
            let b: Vec<f32> = (0..28).map(|i| i as f32 * 0.25 - 3.0).collect();
            vec![f32s(&[7], s), f32s(&[7, 4], b)]
        })
        .collect();
    check(&g, &sets);
    // Independently: the kept scores and boxes, in order.
    let loaded = load(&g);
    for set in &sets {
        let out = run_compiled(&loaded, &g, set);
        let (s, b) = (set[0].to_f64_vec(), set[1].to_f64_vec());
        let kept: Vec<usize> = (0..7).filter(|&i| s[i] > 0.5).collect();
        let want_s: Vec<f64> = kept.iter().map(|&i| s[i]).collect();
        let want_b: Vec<f64> = (kept.iter())
            .flat_map(|&i| b[4 * i..4 * i + 4].iter().map(|v| 2.0 * v))
            .collect();
        assert_eq!(out[0].to_f64_vec(), want_s);
        assert_eq!(out[1].to_f64_vec(), want_b);
    }
}

#[test]
fn top_k_of_the_kept_scores_reads_every_kept_row() {
    // torchvision's per-class step: `score.topk(min(k, score.size(0)))` over the scores
    // a threshold kept: TopK along the rows NonZero left, k from their count.
    let mut m = ModelBuilder::new(27);
    let scores = m.input("scores", &[9]);
    let half = m.float_init(&[], vec![0.5]);
    let keep = m.node("Greater", &[&scores, &half], vec![]);
    let nz = m.node("NonZero", &[&keep], vec![]);
    let rows = m.node("Transpose", &[&nz], vec![("perm", Attr::Ints(vec![1, 0]))]);
    let kept = m.node("GatherND", &[&scores, &rows], vec![]);
    let n = m.node("Shape", &[&kept], vec![]);
    let three = m.int_init(&[3]);
    let k = m.node("Min", &[&n, &three], vec![]);
    let top = m.node_n("TopK", &[&kept, &k], vec![], 2);
    m.output(&top[0]);
    m.output(&top[1]);
    let g = import(&m.encode()).unwrap();
    // Fewer kept scores after more: rows past the count hold the earlier run's.
    let sets: Vec<Vec<Tensor>> = [9usize, 5, 2, 1, 0]
        .iter()
        .map(|&n| {
            let s: Vec<f32> = (0..9)
                .map(|i| match (i * 4) % 9 < n {
                    true => 0.55 + ((i * 7) % 9) as f32 / 20.0,
                    false => 0.2,
                })
                .collect();
            vec![f32s(&[9], s)]
        })
        .collect();
    check(&g, &sets);
    // Independently: the min(3, n) largest kept scores, and where they are among the kept.
    let loaded = load(&g);
    for set in &sets {
        let out = run_compiled(&loaded, &g, set);
        let kept: Vec<f64> = (set[0].to_f64_vec().into_iter())
            .filter(|&v| v > 0.5)
            .collect();
        let mut order: Vec<usize> = (0..kept.len()).collect();
        order.sort_by(|&a, &b| kept[b].total_cmp(&kept[a]).then(a.cmp(&b)));
        order.truncate(3);
        let want: Vec<f64> = order.iter().map(|&i| kept[i]).collect();
        assert_eq!(out[0].to_f64_vec(), want);
        let idx: Vec<i64> = order.iter().map(|&i| i as i64).collect();
        assert_eq!(out[1].to_i64_vec(), idx);
    }
}

/// torchvision's detection post-processing, as `torch.onnx.export` writes it for
/// SSD/RetinaNet (`postprocess_detections` and `batched_nms`), over `n` anchors and
/// `classes` classes (class 0 the background): per class, the scores above 0.3 and
/// their boxes (NonZero, GatherND), the `min(k, kept)` best (TopK, Gather), a label
/// column (ConstantOfShape of their shape); all classes concatenated; an `If` giving
/// nothing when no box is left, else NMS of the boxes offset per label; the first
/// `detections` kept (Slice) and their boxes, scores and labels (Gather).
fn detector_postprocess_model(n: usize, classes: usize, k: i64, detections: i64) -> Vec<u8> {
    let mut m = ModelBuilder::new(28);
    let scores = m.input("scores", &[n, classes]);
    let boxes = m.input("boxes", &[n, 4]);
    let threshold = m.float_init(&[], vec![0.3]);
    let (zero, k_max) = (m.int_init(&[0]), m.int_init(&[k]));
    let one_d = m.int_init(&[1]);
    let (mut all_boxes, mut all_scores, mut all_labels) = (vec![], vec![], vec![]);
    for c in 1..classes {
        let class = m.int_init(&[c as i64]);
        let class = m.node("Squeeze", &[&class, &zero], vec![]);
        let column = m.node("Gather", &[&scores, &class], vec![("axis", Attr::I(1))]);
        let keep = m.node("Greater", &[&column, &threshold], vec![]);
        let nz = m.node("NonZero", &[&keep], vec![]);
        let rows = m.node("Transpose", &[&nz], vec![("perm", Attr::Ints(vec![1, 0]))]);
        let kept = m.node("GatherND", &[&column, &rows], vec![]);
        let kept_boxes = m.node("GatherND", &[&boxes, &rows], vec![]);
        let shape = m.node("Shape", &[&kept], vec![]);
        let first = m.node("Gather", &[&shape, &zero], vec![("axis", Attr::I(0))]);
        let both = m.node("Concat", &[&k_max, &first], vec![("axis", Attr::I(0))]);
        let top_k = m.node("ReduceMin", &[&both], vec![("keepdims", Attr::I(0))]);
        let top_k = m.node("Reshape", &[&top_k, &one_d], vec![]);
        let top = m.node_n("TopK", &[&kept, &top_k], vec![], 2);
        let picked = m.node(
            "Gather",
            &[&kept_boxes, &top[1]],
            vec![("axis", Attr::I(0))],
        );
        let top_shape = m.node("Shape", &[&top[0]], vec![]);
        let label = Attr::I64Tensor(c as i64);
        let labels = m.node("ConstantOfShape", &[&top_shape], vec![("value", label)]);
        all_boxes.push(picked);
        all_scores.push(top[0].clone());
        all_labels.push(labels);
    }
    let cat = |m: &mut ModelBuilder, parts: &[String]| {
        let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
        m.node("Concat", &refs, vec![("axis", Attr::I(0))])
    };
    let boxes_all = cat(&mut m, &all_boxes);
    let scores_all = cat(&mut m, &all_scores);
    let labels_all = cat(&mut m, &all_labels);
    let shape = m.node("Shape", &[&boxes_all], vec![]);
    let size = m.node("ReduceProd", &[&shape], vec![("keepdims", Attr::I(0))]);
    let zero_scalar = m.node("Squeeze", &[&zero, &zero], vec![]);
    let empty = m.node("Equal", &[&size, &zero_scalar], vec![]);
    let none = m.int_init(&[]);
    let then_branch = m.branch(|m| vec![m.node("Identity", &[&none], vec![])]);
    let else_branch = m.branch(|m| {
        let largest = m.node("ReduceMax", &[&boxes_all], vec![("keepdims", Attr::I(0))]);
        let labels = m.node("Cast", &[&labels_all], vec![("to", Attr::I(1))]);
        let one = m.float_init(&[], vec![1.0]);
        let step = m.node("Add", &[&largest, &one], vec![]);
        let offsets = m.node("Mul", &[&labels, &step], vec![]);
        let offsets = m.node("Unsqueeze", &[&offsets, &one_d], vec![]);
        let moved = m.node("Add", &[&boxes_all, &offsets], vec![]);
        let b3 = m.node("Unsqueeze", &[&moved, &zero], vec![]);
        let s3 = m.node("Unsqueeze", &[&scores_all, &zero], vec![]);
        let s3 = m.node("Unsqueeze", &[&s3, &zero], vec![]);
        let iou = m.float_init(&[1], vec![0.45]);
        let max_out = m.int_init(&[i64::MAX]);
        let sel = m.node("NonMaxSuppression", &[&b3, &s3, &max_out, &iou], vec![]);
        let two = m.int_init(&[2]);
        let column = m.node("Gather", &[&sel, &two], vec![("axis", Attr::I(1))]);
        vec![m.node("Squeeze", &[&column, &one_d], vec![])]
    });
    let keep = m.node(
        "If",
        &[&empty],
        vec![
            ("then_branch", Attr::G(then_branch)),
            ("else_branch", Attr::G(else_branch)),
        ],
    );
    let (start, end) = (m.int_init(&[0]), m.int_init(&[detections]));
    let keep = m.node("Slice", &[&keep, &start, &end, &zero], vec![]);
    for all in [&boxes_all, &scores_all, &labels_all] {
        let picked = m.node("Gather", &[all, &keep], vec![("axis", Attr::I(0))]);
        m.output(&picked);
    }
    m.encode()
}

/// The detections [`detector_postprocess_model`] gives, computed directly: (box,
/// score, label) in order.
fn detector_postprocess_reference(
    scores: &[f32],
    boxes: &[f32],
    classes: usize,
    k: usize,
    detections: usize,
) -> Vec<([f32; 4], f32, i64)> {
    let n = boxes.len() / 4;
    let box_at = |i: usize| {
        [
            boxes[4 * i],
            boxes[4 * i + 1],
            boxes[4 * i + 2],
            boxes[4 * i + 3],
        ]
    };
    let mut candidates = vec![];
    for c in 1..classes {
        let mut kept: Vec<usize> = (0..n).filter(|&i| scores[i * classes + c] > 0.3).collect();
        // Stable: ties keep the lower index first, as TopK does.
        kept.sort_by(|&a, &b| scores[b * classes + c].total_cmp(&scores[a * classes + c]));
        kept.truncate(k);
        candidates.extend(
            kept.iter()
                .map(|&i| (box_at(i), scores[i * classes + c], c as i64)),
        );
    }
    if candidates.is_empty() {
        return vec![];
    }
    let largest = (candidates.iter().flat_map(|c| c.0)).fold(f32::NEG_INFINITY, f32::max);
    let moved: Vec<[f32; 4]> = (candidates.iter())
        .map(|(b, _, l)| b.map(|v| v + *l as f32 * (largest + 1.0)))
        .collect();
    let area = |b: &[f32; 4]| (b[2] - b[0]).abs() * (b[3] - b[1]).abs();
    let iou = |a: &[f32; 4], b: &[f32; 4]| {
        let (ay, ax) = (
            (a[0].min(a[2]), a[0].max(a[2])),
            (a[1].min(a[3]), a[1].max(a[3])),
        );
        let (by, bx) = (
            (b[0].min(b[2]), b[0].max(b[2])),
            (b[1].min(b[3]), b[1].max(b[3])),
        );
        let h = ay.1.min(by.1) - ay.0.max(by.0);
        let w = ax.1.min(bx.1) - ax.0.max(bx.0);
        if h <= 0.0 || w <= 0.0 {
            return 0.0;
        }
        let inter = h * w;
        inter / (area(a) + area(b) - inter)
    };
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by(|&a, &b| candidates[b].1.total_cmp(&candidates[a].1));
    let mut kept: Vec<usize> = vec![];
    for i in order {
        if kept.iter().all(|&j| iou(&moved[i], &moved[j]) <= 0.45) {
            kept.push(i);
        }
    }
    kept.truncate(detections);
    kept.iter().map(|&i| candidates[i]).collect()
}

#[test]
fn detector_postprocessing_runs_on_the_kept_boxes_of_every_class() {
    let (n, classes, k, detections) = (12, 4, 3, 5);
    let g = import(&detector_postprocess_model(
        n,
        classes,
        k as i64,
        detections as i64,
    ))
    .unwrap();
    // Planned for k per class, at most all of them kept.
    assert_eq!(g.ty(g.outputs[0]).shape, vec![detections, 4]);
    assert_eq!(g.bounded_axes(), vec![(0, 0), (1, 0), (2, 0)]);
    let mut rng = models::Rng::new(29);
    let mut sets = vec![];
    // From every class scoring above the threshold somewhere to none at all.
    for above in [0.9f32, 0.5, 0.2, 0.0] {
        let boxes = clustered_boxes(&mut rng, 1, n, false);
        let scores: Vec<f32> = (0..n * classes)
            .map(|_| rng.uniform().abs() * above + 0.05)
            .collect();
        sets.push(vec![f32s(&[n, classes], scores), f32s(&[n, 4], boxes)]);
    }
    check(&g, &sets);
    let loaded = load(&g);
    let mut counts = vec![];
    for set in &sets {
        let out = run_compiled(&loaded, &g, set);
        let (scores, boxes) = (set[0].to_f64_vec(), set[1].to_f64_vec());
        let f = |v: Vec<f64>| v.into_iter().map(|x| x as f32).collect::<Vec<f32>>();
        let want = detector_postprocess_reference(&f(scores), &f(boxes), classes, k, detections);
        counts.push(want.len());
        let got_boxes = f(out[0].to_f64_vec());
        let got_scores = f(out[1].to_f64_vec());
        let got_labels = out[2].to_i64_vec();
        assert_eq!(got_labels.len(), want.len(), "detections");
        for (r, (b, s, l)) in want.iter().enumerate() {
            assert_eq!(&got_boxes[4 * r..4 * r + 4], b, "row {r}");
            assert_eq!((got_scores[r], got_labels[r]), (*s, *l), "row {r}");
        }
    }
    assert!(
        counts.contains(&0) && counts.contains(&detections),
        "{counts:?}"
    );
}

#[test]
fn gather_from_counted_rows_checks_indices_against_their_count() {
    // Indices from one mask's NonZero into the rows another mask kept: an index past
    // the kept rows (inside the planned buffer) is an error, not a stale row.
    let mut m = ModelBuilder::new(30);
    let x = m.input("x", &[6]);
    let pick = m.input("pick", &[6]);
    let zero = m.float_init(&[], vec![0.0]);
    let kept = m.node("Greater", &[&x, &zero], vec![]);
    let nz = m.node("NonZero", &[&kept], vec![]);
    let rows = m.node("Transpose", &[&nz], vec![("perm", Attr::Ints(vec![1, 0]))]);
    let values = m.node("GatherND", &[&x, &rows], vec![]);
    let chosen = m.node("Greater", &[&pick, &zero], vec![]);
    let idx = m.node("NonZero", &[&chosen], vec![]);
    let axis0 = m.int_init(&[0]);
    let idx = m.node("Squeeze", &[&idx, &axis0], vec![]);
    let got = m.node("Gather", &[&values, &idx], vec![("axis", Attr::I(0))]);
    m.output(&got);
    let g = import(&m.encode()).unwrap();
    let x = f32s(&[6], vec![1.0, -1.0, 2.0, 3.0, -1.0, 4.0]);
    // Positions 0, 2 and 3 of the 4 kept values.
    let pick = f32s(&[6], vec![1.0, 0.0, 1.0, 1.0, 0.0, 0.0]);
    check(&g, &[vec![x.clone(), pick]]);
    // Position 4 is past the 4 kept.
    let past = f32s(&[6], vec![0.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
    run_fails_with(&g, &[x, past], 3);
}

#[test]
fn reductions_over_kept_rows_read_only_those_rows() {
    // `boxes[keep].max()` and the like: a reduction over rows NonZero kept (and over
    // their other axis too), in float32 and int32.
    let mut m = ModelBuilder::new(31);
    let scores = m.input("scores", &[7]);
    let boxes = m.input("boxes", &[7, 3]);
    let half = m.float_init(&[], vec![0.5]);
    let keep = m.node("Greater", &[&scores, &half], vec![]);
    let nz = m.node("NonZero", &[&keep], vec![]);
    let rows = m.node("Transpose", &[&nz], vec![("perm", Attr::Ints(vec![1, 0]))]);
    let kept = m.node("GatherND", &[&boxes, &rows], vec![]);
    for op in [
        "ReduceMax",
        "ReduceMin",
        "ReduceSum",
        "ReduceProd",
        "ReduceSumSquare",
    ] {
        let r = m.node(op, &[&kept], vec![("keepdims", Attr::I(0))]);
        m.output(&r);
    }
    let axes = m.int_init(&[0]);
    let mean = m.node("ReduceSum", &[&kept, &axes], vec![("keepdims", Attr::I(1))]);
    m.output(&mean);
    let kept_mean = m.node("ReduceMean", &[&kept], vec![("axes", Attr::Ints(vec![0]))]);
    m.output(&kept_mean);
    let ints = m.node("Cast", &[&kept], vec![("to", Attr::I(6))]);
    for op in ["ReduceMax", "ReduceMin", "ReduceSum"] {
        let r = m.node(op, &[&ints], vec![("keepdims", Attr::I(0))]);
        m.output(&r);
    }
    let g = import(&m.encode()).unwrap();
    let mut rng = models::Rng::new(32);
    let sets: Vec<Vec<Tensor>> = [1usize, 3, 7]
        .iter()
        .map(|&n| {
            let s: Vec<f32> = (0..7).map(|i| if i < n { 0.9 } else { 0.1 }).collect();
            let b: Vec<f32> = (0..21).map(|_| (rng.uniform() * 8.0).round()).collect();
            vec![f32s(&[7], s), f32s(&[7, 3], b)]
        })
        .collect();
    check_within(&g, &sets, Some(1e-6));
    // Independently: the sum over the first set's one kept row is that row.
    let loaded = load(&g);
    let out = run_compiled(&loaded, &g, &sets[0]);
    let row: Vec<f64> = sets[0][1].to_f64_vec()[..3].to_vec();
    assert_eq!(out[5].to_f64_vec(), row);
    let max = row.iter().copied().fold(f64::MIN, f64::max);
    assert_eq!(out[0].to_f64_vec(), vec![max]);
    assert_eq!(out[7].to_f64_vec(), vec![max]);
}
