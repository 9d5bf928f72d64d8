//! Shape inputs computed at run time (a Reshape's target, a Tile's repeats given as
//! graph inputs): compiled as the values the declared output shape implies, and the
//! run returns NNC_ERR_SHAPE_INPUT_MISMATCH, writing nothing, for any other values;
//! the interpreter refuses them too.

#[path = "common/dynamic.rs"]
mod dynamic;
#[path = "common/graphs.rs"]
mod graphs;
#[path = "common/models.rs"]
mod models;
#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use models::ModelBuilder;
use nnc::ir::{Graph, Tensor};
use nnc::onnx::proto::{tensor_shape_proto, type_proto, TensorShapeProto, TypeProto};
use nnc::onnx::{import_model, ImportOptions};
use nnc_runtime_abi::abi::NNC_ERR_SHAPE_INPUT_MISMATCH;
use runner::Compiled;

/// Declares graph output `k` a float32 tensor of `shape`.
fn declare_output(m: &mut ModelBuilder, k: usize, shape: &[usize]) {
    let dim = (shape.iter())
        .map(|&d| tensor_shape_proto::Dimension {
            value: Some(tensor_shape_proto::dimension::Value::DimValue(d as i64)),
        })
        .collect();
    m.graph.output[k].r#type = Some(TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: 1,
            shape: Some(TensorShapeProto { dim }),
        })),
    });
}

fn import(bytes: &[u8]) -> Result<Graph, String> {
    let model = dynamic::decode(bytes);
    let imported =
        import_model(&model, None, &ImportOptions::default()).map_err(|e| e.to_string())?;
    match imported.unsupported.as_slice() {
        [] => Ok(imported.graph),
        u => Err(format!("{u:?}")),
    }
}

fn x(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec(
        shape,
        (0..n).map(|v| v as f32 * 0.5 - 3.0).collect::<Vec<f32>>(),
    )
}

/// A Reshape of x [2, 3, 4] to the run-time `shape`, declared [4, 6].
fn reshape_model(declared: bool) -> Vec<u8> {
    let mut m = ModelBuilder::new(1);
    m.input("x", &[2, 3, 4]);
    m.typed_input("shape", 7, &[2]);
    let y = m.node("Reshape", &["x", "shape"], vec![]);
    m.output(&y);
    if declared {
        declare_output(&mut m, 0, &[4, 6]);
    }
    m.encode()
}

#[test]
fn reshape_to_a_run_time_shape_runs_for_the_values_its_output_implies() {
    let g = import(&reshape_model(true)).unwrap();
    assert_eq!(g.input_guards.len(), 1);
    let lib = Compiled::new(&g).unwrap();
    let data = x(&[2, 3, 4]);
    let expected = data.reshape(&[4, 6]);
    for shape in [[4i64, 6], [-1, 6], [4, -1]] {
        let inputs = [data.clone(), Tensor::from_vec(&[2], shape.to_vec())];
        let got = lib.run(&g, &inputs).unwrap();
        assert_eq!(
            got[0].to_f64_vec(),
            expected.to_f64_vec(),
            "shape {shape:?}"
        );
        let reference = nnc::interp::run_graph(&g, &inputs).unwrap();
        assert_eq!(reference[0].to_f64_vec(), expected.to_f64_vec());
    }
    // Other shapes of the same count, two inferred axes, a 0 copying x's extent 2.
    for shape in [[6i64, 4], [3, 8], [-1, -1], [0, 12], [24, 1]] {
        let inputs = [data.clone(), Tensor::from_vec(&[2], shape.to_vec())];
        let (status, outs) = lib.run_status(&g, &inputs).unwrap();
        assert_eq!(status, NNC_ERR_SHAPE_INPUT_MISMATCH, "shape {shape:?}");
        assert!(
            outs[0].to_f64_vec().iter().all(|&v| v == 0.0),
            "shape {shape:?}: nothing may be written"
        );
        let refused = nnc::interp::run_graph(&g, &inputs).unwrap_err();
        assert!(refused.contains("input 'shape'"), "{refused}");
    }
}

#[test]
fn a_run_time_shape_without_a_declared_output_shape_is_refused() {
    let err = import(&reshape_model(false)).unwrap_err();
    assert!(err.contains("computed at run time"), "{err}");
}

#[test]
fn tile_repeats_and_a_float_one_hot_depth_given_at_run_time() {
    let mut m = ModelBuilder::new(2);
    m.input("x", &[2, 3]);
    m.typed_input("repeats", 7, &[2]);
    m.typed_input("indices", 1, &[4]);
    m.typed_input("depth", 1, &[1]);
    let values = m.float_init(&[2], vec![-1.0, 2.0]);
    let y = m.node("Tile", &["x", "repeats"], vec![]);
    let h = m.node("OneHot", &["indices", "depth", &values], vec![]);
    m.output(&y);
    m.output(&h);
    declare_output(&mut m, 0, &[4, 3]);
    declare_output(&mut m, 1, &[4, 5]);
    let g = import(&m.encode()).unwrap();
    assert_eq!(g.input_guards.len(), 2);
    let lib = Compiled::new(&g).unwrap();
    let data = x(&[2, 3]);
    let indices = Tensor::from_vec(&[4], vec![0f32, 4.0, -1.0, 2.0]);
    let good = [
        data.clone(),
        Tensor::from_vec(&[2], vec![2i64, 1]),
        indices.clone(),
        Tensor::from_vec(&[1], vec![5.0f32]),
    ];
    let got = lib.run(&g, &good).unwrap();
    let reference = nnc::interp::run_graph(&g, &good).unwrap();
    for (a, b) in got.iter().zip(&reference) {
        assert_eq!(a.to_f64_vec(), b.to_f64_vec());
    }
    let mut tiled = data.to_f64_vec();
    tiled.extend(data.to_f64_vec());
    assert_eq!(got[0].to_f64_vec(), tiled);
    for (k, bad) in [
        (1, Tensor::from_vec(&[2], vec![1i64, 2])),
        (3, Tensor::from_vec(&[1], vec![4.0f32])),
    ] {
        let mut inputs = good.clone();
        inputs[k] = bad;
        let (status, _) = lib.run_status(&g, &inputs).unwrap();
        assert_eq!(status, NNC_ERR_SHAPE_INPUT_MISMATCH, "input {k}");
    }
}
