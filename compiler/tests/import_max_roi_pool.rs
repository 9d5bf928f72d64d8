//! MaxRoiPool imported with run-time rois: a small model built from the protobuf
//! types, imported, compiled for the host, run, and compared with Caffe's ROIPooling
//! loop written out directly below.
//!
//! `ONNXRUNTIME` is onnxruntime 1.32.0's output for the same model (built with
//! `onnx.helper`, run on the CPU provider), recorded once; the test checks that both
//! the direct loop and the compiled model agree with it.

#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use nnc::codegen::Target;
use nnc::ir::Tensor;
use nnc::onnx::proto::{
    attribute_type, tensor_shape_proto, type_proto, AttributeProto, GraphProto, ModelProto,
    NodeProto, OperatorSetIdProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use nnc::onnx::{import_model, ImportOptions};

const FLOAT: i32 = 1;

fn value_info(name: &str, shape: &[usize]) -> ValueInfoProto {
    let dim = shape
        .iter()
        .map(|&d| tensor_shape_proto::Dimension {
            value: Some(tensor_shape_proto::dimension::Value::DimValue(d as i64)),
        })
        .collect();
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: FLOAT,
                shape: Some(TensorShapeProto { dim }),
            })),
        }),
    }
}

const N: usize = 2;
const C: usize = 2;
const H: usize = 6;
const W: usize = 7;
const PH: usize = 3;
const PW: usize = 2;
const SCALE: f32 = 0.5;

/// Rois (batch, x1, y1, x2, y2) in unscaled coordinates.
const ROIS: [[f32; 5]; 6] = [
    // The whole image; y2 · 0.5 = 2.5 rounds away from zero to 3.
    [0.0, 0.0, 0.0, 6.0, 5.0],
    // Batch 1.
    [1.0, 2.0, 1.0, 9.0, 4.0],
    // Past the right and bottom edges.
    [0.0, 8.0, 6.0, 20.0, 16.0],
    // One pixel: every bin is that pixel.
    [1.0, 3.0, 3.0, 3.0, 3.0],
    // Before the left and top edges (−2.5 rounds to −3): leading bins are empty.
    [1.0, -5.0, -3.0, 1.0, 2.0],
    // Entirely outside: every bin is empty.
    [0.0, 30.0, 30.0, 40.0, 40.0],
];

/// onnxruntime 1.32.0's output for this model, `[6, 2, 3, 2]`.
const ONNXRUNTIME: [f32; 72] = [
    3.75, 2.75, 3.75, 0.25, 1.25, 0.25, 3.0, 2.0, 3.0, 5.0, 6.0, 5.0, -2.25, 2.0, 3.0, 2.0, 3.0,
    -0.25, 1.25, 1.25, 2.25, 1.25, 2.25, -1.0, 2.25, 0.0, 5.25, 0.0, 0.0, 0.0, 1.5, 0.0, 4.5, 0.0,
    0.0, 0.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, -6.5, -6.5, -6.5, -6.5, -6.5, -6.5, 0.0, 0.0, 0.0, 0.0,
    0.0, 0.0, 0.0, 0.0, 0.0, -0.75, 0.0, 5.75, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
    0.0, 0.0,
];

fn input() -> Vec<f32> {
    // Mostly negative, so an empty bin's 0 differs from any maximum.
    (0..N * C * H * W)
        .map(|i| ((i * 37) % 23) as f32 - 17.0 + (i % 5) as f32 * 0.25)
        .collect()
}

/// Caffe's ROIPooling forward loop; also counts empty and one-pixel bins.
fn reference(x: &[f32]) -> (Vec<f32>, usize, usize) {
    let (mut out, mut empty, mut single) = (vec![], 0, 0);
    for roi in ROIS {
        let b = roi[0] as usize;
        let sw = (roi[1] * SCALE).round() as i64;
        let sh = (roi[2] * SCALE).round() as i64;
        let ew = (roi[3] * SCALE).round() as i64;
        let eh = (roi[4] * SCALE).round() as i64;
        let rh = (eh - sh + 1).max(1);
        let rw = (ew - sw + 1).max(1);
        let bh = rh as f32 / PH as f32;
        let bw = rw as f32 / PW as f32;
        for c in 0..C {
            for ph in 0..PH {
                for pw in 0..PW {
                    let clip = |v: i64, len: usize| v.clamp(0, len as i64);
                    let hs = clip((ph as f32 * bh).floor() as i64 + sh, H);
                    let he = clip(((ph + 1) as f32 * bh).ceil() as i64 + sh, H);
                    let ws = clip((pw as f32 * bw).floor() as i64 + sw, W);
                    let we = clip(((pw + 1) as f32 * bw).ceil() as i64 + sw, W);
                    let is_empty = he <= hs || we <= ws;
                    let mut m = if is_empty { 0.0 } else { f32::MIN };
                    for hh in hs..he {
                        for ww in ws..we {
                            let v = x[((b * C + c) * H + hh as usize) * W + ww as usize];
                            m = m.max(v);
                        }
                    }
                    if c == 0 {
                        empty += is_empty as usize;
                        single += ((he - hs) * (we - ws) == 1) as usize;
                    }
                    out.push(m);
                }
            }
        }
    }
    (out, empty, single)
}

fn model() -> ModelProto {
    let attrs = vec![
        AttributeProto {
            name: "pooled_shape".into(),
            r#type: attribute_type::INTS,
            ints: vec![PH as i64, PW as i64],
            ..Default::default()
        },
        AttributeProto {
            name: "spatial_scale".into(),
            r#type: attribute_type::FLOAT,
            f: SCALE,
            ..Default::default()
        },
    ];
    let node = NodeProto {
        input: vec!["x".into(), "rois".into()],
        output: vec!["y".into()],
        name: "pool".into(),
        op_type: "MaxRoiPool".into(),
        attribute: attrs,
        ..Default::default()
    };
    let graph = GraphProto {
        name: "max_roi_pool".into(),
        node: vec![node],
        input: vec![
            value_info("x", &[N, C, H, W]),
            value_info("rois", &[ROIS.len(), 5]),
        ],
        output: vec![value_info("y", &[ROIS.len(), C, PH, PW])],
        ..Default::default()
    };
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(graph),
        ..Default::default()
    }
}

#[test]
fn max_roi_pool_with_runtime_rois_matches_caffe() {
    let imported = import_model(&model(), None, &ImportOptions::default()).expect("imports");
    assert!(
        imported.unsupported.is_empty(),
        "unsupported: {:?}",
        imported.unsupported
    );
    let mut g = imported.graph;
    nnc::passes::optimize(&mut g).expect("passes run");
    let x = input();
    let rois: Vec<f32> = ROIS.iter().flatten().copied().collect();
    let inputs = [
        Tensor::from_vec(&[N, C, H, W], x.clone()),
        Tensor::from_vec(&[ROIS.len(), 5], rois),
    ];
    let out = runner::run_compiled(&g, &inputs, Target::host()).unwrap_or_else(|e| panic!("{e}"));
    let (want, empty, single) = reference(&x);
    // The rois exercise what they claim to.
    assert!(empty > PH * PW, "empty bins: {empty}");
    assert!(single >= PH * PW, "one-pixel bins: {single}");
    assert_eq!(
        want, ONNXRUNTIME,
        "the direct loop disagrees with onnxruntime"
    );
    assert_eq!(out[0].shape(), &[ROIS.len(), C, PH, PW]);
    let got = out[0].to_f64_vec();
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(
            *g as f32, *w,
            "element {i}: got {g}, want {w}\n{got:?}\n{want:?}"
        );
    }
}
