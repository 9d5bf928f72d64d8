//! Regression tests of issue 18's shape findings: shape and size arithmetic that
//! overflowed, compiler panics on operands of the wrong type or rank, and constant
//! folding that allocated without a cap. Each model must import to one error naming
//! the node (and the flag that raises a limit), or compile with the big result left to
//! `infer`.
//!
//! Run with `cargo test -p nnc --test hostile_shapes --release`.

use nnc::codegen::{compile_graph, CompileOptions, Target};
use nnc::ir::{DType, Graph, Tensor, TensorType};
use nnc::limits::Limits;
use nnc::onnx::proto::{
    attribute_type, tensor_shape_proto, type_proto, AttributeProto, GraphProto, ModelProto,
    NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use nnc::onnx::{import_model, ImportOptions};
use nnc::passes::PassManager;

/// A model under construction: graph inputs, constant initializers, nodes.
struct Model(GraphProto);

impl Model {
    fn new() -> Model {
        Model(GraphProto {
            name: "hostile".into(),
            ..Default::default()
        })
    }

    fn input(mut self, name: &str, dtype: DType, shape: &[u64]) -> Model {
        let dim = shape
            .iter()
            .map(|&d| tensor_shape_proto::Dimension {
                value: Some(tensor_shape_proto::dimension::Value::DimValue(d as i64)),
            })
            .collect();
        self.0.input.push(ValueInfoProto {
            name: name.into(),
            r#type: Some(TypeProto {
                value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                    elem_type: dtype.onnx_code(),
                    shape: Some(TensorShapeProto { dim }),
                })),
            }),
        });
        self
    }

    fn constant(mut self, name: &str, t: Tensor) -> Model {
        self.0.initializer.push(TensorProto {
            name: name.into(),
            dims: t.shape().iter().map(|&d| d as i64).collect(),
            data_type: t.dtype().onnx_code(),
            raw_data: t.to_le_bytes(),
            ..Default::default()
        });
        self
    }

    fn ints(self, name: &str, v: &[i64]) -> Model {
        self.constant(name, Tensor::from_vec(&[v.len()], v.to_vec()))
    }

    fn node(
        mut self,
        op: &str,
        name: &str,
        ins: &[&str],
        outs: &[&str],
        attrs: &[(&str, i64)],
    ) -> Model {
        self.0.node.push(NodeProto {
            input: ins.iter().map(|s| s.to_string()).collect(),
            output: outs.iter().map(|s| s.to_string()).collect(),
            name: name.into(),
            op_type: op.into(),
            attribute: attrs
                .iter()
                .map(|(n, i)| AttributeProto {
                    name: n.to_string(),
                    r#type: attribute_type::INT,
                    i: *i,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        });
        self
    }

    fn output(mut self, name: &str) -> Model {
        self.0.output.push(ValueInfoProto {
            name: name.into(),
            r#type: None,
        });
        self
    }

    fn import_with(self, limits: Limits) -> Result<Graph, String> {
        let model = ModelProto {
            ir_version: 8,
            opset_import: vec![OperatorSetIdProto {
                domain: String::new(),
                version: 18,
            }],
            graph: Some(self.0),
            ..Default::default()
        };
        let opts = ImportOptions {
            limits,
            ..Default::default()
        };
        let imported = import_model(&model, None, &opts).map_err(|e| e.to_string())?;
        if !imported.unsupported.is_empty() {
            return Err(format!("unsupported: {:?}", imported.unsupported));
        }
        Ok(imported.graph)
    }

    fn import(self) -> Result<Graph, String> {
        self.import_with(Limits::default())
    }
}

/// The import error, which must hold every needle.
fn expect_error(result: Result<Graph, String>, needles: &[&str]) {
    let message = match result {
        Ok(g) => panic!("imported:\n{g}"),
        Err(m) => m,
    };
    for n in needles {
        assert!(message.contains(n), "'{n}' missing from: {message}");
    }
}

/// Passes and code generation succeed.
fn compiles(mut g: Graph, limits: Limits) -> Graph {
    let passes = PassManager {
        limits,
        ..Default::default()
    };
    passes.run(&mut g).expect("passes");
    compile_graph(&g, &CompileOptions::new(Target::host())).expect("compiles");
    g
}

#[test]
fn tensor_type_sizes_are_checked() {
    let huge = TensorType::new(DType::F32, vec![1 << 62, 4]);
    assert_eq!(huge.checked_numel(), None);
    assert_eq!(huge.checked_byte_size(), None);
    let empty = TensorType::new(DType::F32, vec![0, 1 << 40]);
    assert_eq!(empty.checked_byte_size(), Some(0));
    // Its extent counts the empty axis as 1: the size of any row of it.
    assert_eq!(empty.checked_extent_bytes(), Some(4 << 40));
    assert!(Limits::default().check_tensor(&empty).is_err());
    assert!(Limits::default().check_tensor(&huge).is_err());
}

#[test]
fn an_empty_input_with_a_huge_axis_is_refused() {
    // numel 0, but [0, 2^62] rows of 2^62 elements would overflow any stride.
    let m = Model::new()
        .input("x", DType::F32, &[0, 1 << 62])
        .node("Relu", "relu", &["x"], &["y"], &[])
        .output("y");
    expect_error(
        m.import(),
        &["input 'x'", "zero-size axes", "--max-tensor-bytes"],
    );
}

#[test]
fn concat_lengths_are_summed_checked() {
    // Each input fits the (raised) limit; their concatenation does not fit a usize.
    let limits = Limits {
        max_tensor_bytes: u64::MAX,
        ..Limits::default()
    };
    let m = Model::new()
        .input("a", DType::U8, &[1 << 62])
        .node(
            "Concat",
            "cat",
            &["a", "a", "a", "a"],
            &["y"],
            &[("axis", 0)],
        )
        .output("y");
    expect_error(m.import_with(limits), &["node 'cat' (Concat)", "too long"]);
}

#[test]
fn reshape_infers_minus_one_with_checked_products() {
    let m = Model::new()
        .input("x", DType::F32, &[4])
        .ints("s", &[1 << 62, 1 << 62, -1])
        .node("Reshape", "reshape", &["x", "s"], &["y"], &[])
        .output("y");
    expect_error(m.import(), &["node 'reshape' (Reshape)", "cannot reshape"]);
}

#[test]
fn pads_that_overflow_are_refused() {
    let m = Model::new()
        .input("x", DType::F32, &[4])
        .ints("p", &[i64::MAX, 1])
        .node("Pad", "pad", &["x", "p"], &["y"], &[])
        .output("y");
    expect_error(m.import(), &["node 'pad' (Pad)", "overflow"]);
}

#[test]
fn tile_repeats_that_overflow_are_refused() {
    let m = Model::new()
        .input("x", DType::F32, &[4])
        .ints("r", &[1 << 62])
        .node("Tile", "tile", &["x", "r"], &["y"], &[])
        .output("y");
    expect_error(m.import(), &["node 'tile' (Tile)", "overflow"]);
}

#[test]
fn a_slice_step_of_i64_min_takes_one_element() {
    let m = Model::new()
        .input("x", DType::F32, &[4])
        .ints("s", &[3])
        .ints("e", &[-5])
        .ints("a", &[0])
        .ints("st", &[i64::MIN])
        .node("Slice", "slice", &["x", "s", "e", "a", "st"], &["y"], &[])
        .output("y");
    let g = m.import().expect("imports");
    assert_eq!(g.ty(g.outputs[0]).shape, vec![1]);
}

#[test]
fn range_past_the_fold_limit_is_refused() {
    let m = Model::new()
        .constant("s", Tensor::scalar(0i64))
        .constant("l", Tensor::scalar(1i64 << 40))
        .constant("d", Tensor::scalar(1i64))
        .node("Range", "range", &["s", "l", "d"], &["y"], &[])
        .output("y");
    expect_error(m.import(), &["node 'range' (Range)", "--max-fold-bytes"]);
}

#[test]
fn range_with_a_zero_or_non_finite_delta_is_refused() {
    for (delta, limit) in [(0.0f32, 4.0f32), (f32::NAN, 4.0), (1.0, f32::INFINITY)] {
        let m = Model::new()
            .constant("s", Tensor::scalar(0f32))
            .constant("l", Tensor::scalar(limit))
            .constant("d", Tensor::scalar(delta))
            .node("Range", "range", &["s", "l", "d"], &["y"], &[])
            .output("y");
        expect_error(m.import(), &["node 'range' (Range)", "finite"]);
    }
}

#[test]
fn one_hot_with_a_huge_depth_is_refused() {
    let m = Model::new()
        .input("i", DType::I64, &[3])
        .constant("depth", Tensor::scalar((1i64 << 40) as f32))
        .constant("v", Tensor::from_vec(&[2], vec![0f32, 1.0]))
        .node("OneHot", "onehot", &["i", "depth", "v"], &["y"], &[])
        .output("y");
    expect_error(m.import(), &["node 'onehot' (OneHot)", "--max-"]);
}

#[test]
fn constant_of_shape_past_the_tensor_limit_is_refused() {
    let m = Model::new()
        .ints("s", &[1 << 37])
        .node("ConstantOfShape", "cos", &["s"], &["y"], &[])
        .output("y");
    expect_error(
        m.import(),
        &["node 'cos' (ConstantOfShape)", "--max-tensor-bytes"],
    );
}

#[test]
fn constant_of_shape_past_the_fold_limit_is_filled_by_infer() {
    let limits = Limits {
        max_fold_bytes: 1024,
        ..Limits::default()
    };
    let m = Model::new()
        .ints("s", &[1000])
        .node("ConstantOfShape", "cos", &["s"], &["y"], &[])
        .output("y");
    let g = compiles(m.import_with(limits).expect("imports"), limits);
    assert_eq!(g.ty(g.outputs[0]), &TensorType::new(DType::F32, vec![1000]));
    assert!(g.constant(g.outputs[0]).is_none(), "folded past the limit");
    assert_eq!(g.nodes.len(), 1, "{g}");
}

#[test]
fn a_constant_pad_past_the_fold_limit_is_left_to_infer() {
    // Pad of a constant by 2^31: 8 GiB, under the tensor limit but not folded.
    let m = Model::new()
        .constant("x", Tensor::from_vec(&[2], vec![1f32, 2.0]))
        .ints("p", &[0, 1 << 31])
        .node("Pad", "pad", &["x", "p"], &["y"], &[])
        .output("y");
    let g = m.import().expect("imports");
    assert!(g.constant(g.outputs[0]).is_none(), "folded past the limit");
    assert_eq!(g.ty(g.outputs[0]).shape, vec![2 + (1 << 31)]);
}

#[test]
fn the_const_fold_pass_keeps_to_the_fold_limit() {
    // A Pad of a runtime-free graph built with folding off at import: the pass folds
    // it under the limit and leaves it over the limit.
    let build = || {
        Model::new()
            .constant("x", Tensor::from_vec(&[2], vec![1f32, 2.0]))
            .ints("p", &[0, 300])
            .node("Pad", "pad", &["x", "p"], &["y"], &[])
            .output("y")
    };
    let no_import_folding = Limits {
        max_fold_bytes: 0,
        ..Limits::default()
    };
    for (fold_limit, folded) in [(4096, true), (1024, false)] {
        let mut g = build().import_with(no_import_folding).expect("imports");
        assert_eq!(g.nodes.len(), 1);
        let limits = Limits {
            max_fold_bytes: fold_limit,
            ..Limits::default()
        };
        let passes = PassManager {
            limits,
            ..Default::default()
        };
        passes.run(&mut g).expect("passes");
        assert_eq!(g.nodes.is_empty(), folded, "limit {fold_limit}:\n{g}");
    }
}

#[test]
fn gather_from_a_scalar_is_refused() {
    let m = Model::new()
        .input("x", DType::F32, &[])
        .input("i", DType::I64, &[1])
        .node("Gather", "gather", &["x", "i"], &["y"], &[])
        .output("y");
    expect_error(m.import(), &["node 'gather' (Gather)", "rank"]);
}

#[test]
fn gather_by_float_or_bool_indices_is_refused() {
    for d in [DType::F32, DType::Bool, DType::F16, DType::U8] {
        let m = Model::new()
            .input("x", DType::F32, &[4])
            .input("i", d, &[2])
            .node("Gather", "gather", &["x", "i"], &["y"], &[])
            .output("y");
        expect_error(m.import(), &["node 'gather' (Gather)", "int32 or int64"]);
    }
}

#[test]
fn split_of_a_scalar_is_refused() {
    for op in ["Split", "SplitToSequence"] {
        let m = Model::new()
            .input("x", DType::F32, &[])
            .node(op, "split", &["x"], &["y"], &[])
            .output("y");
        expect_error(m.import(), &["node 'split'", op, "rank"]);
    }
}

#[test]
fn where_with_a_float_condition_is_refused() {
    let m = Model::new()
        .input("c", DType::F32, &[4])
        .input("a", DType::F32, &[4])
        .input("b", DType::F32, &[4])
        .node("Where", "where", &["c", "a", "b"], &["y"], &[])
        .output("y");
    expect_error(m.import(), &["node 'where' (Where)", "bool"]);
}

#[test]
fn an_empty_initializer_with_a_huge_axis_is_refused() {
    let m = Model::new()
        .input("x", DType::F32, &[1])
        .constant("w", Tensor::from_vec(&[0, 1 << 62], Vec::<f32>::new()))
        .node("Concat", "cat", &["x", "w"], &["y"], &[("axis", 0)])
        .output("y");
    expect_error(m.import(), &["initializer 'w'", "--max-tensor-bytes"]);
}

/// Inputs that share one type variable in the spec must share the element type: a
/// float bound of a uint32 Clip once compiled as 4294967292 (found by the differential
/// fuzzer), and Concat / Sum of mixed types reached lowerings that convert nothing.
#[test]
fn inputs_sharing_a_type_variable_must_have_one_element_type() {
    let clip = Model::new()
        .input("x", DType::U32, &[4])
        .constant("lo", Tensor::from_vec(&[], vec![-4.0f32]))
        .node("Clip", "clip", &["x", "lo"], &["y"], &[])
        .output("y");
    expect_error(
        clip.import(),
        &["clip", "Clip", "same element type", "uint32", "float32"],
    );
    let concat = Model::new()
        .input("a", DType::F32, &[2])
        .input("b", DType::I64, &[2])
        .node("Concat", "cat", &["a", "b"], &["y"], &[("axis", 0)])
        .output("y");
    expect_error(concat.import(), &["cat", "Concat", "same element type"]);
}

/// SAME padding over an empty spatial axis gives an empty output (was a subtract
/// overflow found by the import fuzzer); window attributes past 2^31 are refused.
#[test]
fn same_padding_of_an_empty_axis_and_huge_windows() {
    let empty = Model::new()
        .input("x", DType::F32, &[1, 3, 0, 32])
        .node("MaxPool", "pool", &["x"], &["y"], &[])
        .output("y");
    let mut m = empty;
    m.0.node[0].attribute = vec![
        AttributeProto {
            name: "auto_pad".into(),
            r#type: attribute_type::STRING,
            s: b"SAME_UPPER".to_vec(),
            ..Default::default()
        },
        AttributeProto {
            name: "kernel_shape".into(),
            r#type: attribute_type::INTS,
            ints: vec![2, 2],
            ..Default::default()
        },
    ];
    let g = m.import().expect("an empty axis imports");
    let out = g.outputs[0];
    assert_eq!(g.ty(out).shape, [1, 3, 0, 32]);
    let huge = Model::new()
        .input("x", DType::F32, &[1, 3, 8, 8])
        .node("MaxPool", "pool", &["x"], &["y"], &[])
        .output("y");
    let mut m = huge;
    m.0.node[0].attribute = vec![AttributeProto {
        name: "kernel_shape".into(),
        r#type: attribute_type::INTS,
        ints: vec![1 << 40, 1],
        ..Default::default()
    }];
    expect_error(m.import(), &["pool", "MaxPool", "at most"]);
}
