//! Dims set at run time (`--dim NAME=MIN..MAX`): one library runs every value in
//! range, exactly. Each model is compiled once with a range and run at several values;
//! the outputs are compared with the interpreter on the model imported statically at
//! that value (the ONNX semantics at that shape), with the same library at one
//! sample called once per sample (bit-identical: the same code), and with a pooled
//! run. Out-of-range values must return NNC_ERR_DIM_OUT_OF_RANGE and write nothing;
//! models whose dim cannot vary are refused naming the node.

#[path = "common/dynamic.rs"]
mod dynamic;
#[path = "common/models.rs"]
mod models;
#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use dynamic::*;

use std::ffi::CStr;

use models::{Attr, ModelBuilder};
use nnc::codegen::options::{KernelOptions, WinogradChoice};
use nnc::codegen::plan::{plan_kernels, Strategy};
use nnc::codegen::Target;
use nnc::ir::{Graph, Tensor};
use nnc::onnx::proto::{type_proto, ModelProto};
use nnc::onnx::ranges::{DimRange, DimSite};
use nnc::onnx::{import_model, ImportOptions};
use nnc_runtime_abi::{NncThreadPool, ThreadPool, NNC_ERR_DIM_OUT_OF_RANGE};

/// A BERT-style encoder over `batch` sentences of `t` tokens: embeddings, one attention
/// layer with a padding mask (heads split by `Reshape [0, 0, H, dh]`), a residual and
/// LayerNorm, and a classifier over the flattened hidden states whose target shape
/// comes from `Shape` (a chain import folds for each value of the dim).
fn encoder(seed: u64, t: usize, d: usize, heads: usize) -> Vec<u8> {
    let mut m = ModelBuilder::new(seed);
    let vocab = 50;
    let ids = m.typed_input("ids", 7, &[1, t]);
    let mask = m.input("mask", &[1, t]);
    symbolic(&mut m, &ids, 0, "batch");
    symbolic(&mut m, &mask, 0, "batch");
    let table = m.weight(&[vocab, d], 1.0);
    let x = m.node("Gather", &[&table, &ids], vec![("axis", Attr::I(0))]);
    let pos = m.weight(&[t, d], 0.5);
    let x = m.node("Add", &[&x, &pos], vec![]);
    let dh = d / heads;
    let split = m.int_init(&[0, 0, heads as i64, dh as i64]);
    let proj = |m: &mut ModelBuilder, perm: Vec<i64>| {
        let w = m.weight(&[d, d], 0.3);
        let y = m.node("MatMul", &[&x, &w], vec![]);
        let y = m.node("Reshape", &[&y, &split], vec![]);
        m.node("Transpose", &[&y], vec![("perm", Attr::Ints(perm))])
    };
    let q = proj(&mut m, vec![0, 2, 1, 3]);
    let k = proj(&mut m, vec![0, 2, 3, 1]);
    let v = proj(&mut m, vec![0, 2, 1, 3]);
    let s = m.node("MatMul", &[&q, &k], vec![]);
    let scale = m.float_init(&[], vec![1.0 / (dh as f32).sqrt()]);
    let s = m.node("Mul", &[&s, &scale], vec![]);
    let one = m.float_init(&[], vec![1.0]);
    let neg = m.float_init(&[], vec![-1e4]);
    let pad = m.node("Sub", &[&one, &mask], vec![]);
    let pad = m.node("Mul", &[&pad, &neg], vec![]);
    let axes = m.int_init(&[1, 2]);
    let pad = m.node("Unsqueeze", &[&pad, &axes], vec![]);
    let s = m.node("Add", &[&s, &pad], vec![]);
    let p = m.node("Softmax", &[&s], vec![("axis", Attr::I(-1))]);
    let o = m.node("MatMul", &[&p, &v], vec![]);
    let o = m.node(
        "Transpose",
        &[&o],
        vec![("perm", Attr::Ints(vec![0, 2, 1, 3]))],
    );
    let merge = m.int_init(&[0, 0, d as i64]);
    let o = m.node("Reshape", &[&o, &merge], vec![]);
    let wo = m.weight(&[d, d], 0.3);
    let o = m.node("MatMul", &[&o, &wo], vec![]);
    let r = m.node("Add", &[&o, &x], vec![]);
    let g = m.weight(&[d], 1.0);
    let b = m.weight(&[d], 0.1);
    let h = m.node(
        "LayerNormalization",
        &[&r, &g, &b],
        vec![("axis", Attr::I(-1))],
    );
    let shape = m.node("Shape", &[&h], vec![]);
    let zero = m.int_init(&[0]);
    let batch = m.node("Gather", &[&shape, &zero], vec![("axis", Attr::I(0))]);
    let rest = m.int_init(&[-1]);
    let flat = m.node("Concat", &[&batch, &rest], vec![("axis", Attr::I(0))]);
    let flat = m.node("Reshape", &[&h, &flat], vec![]);
    let wc = m.weight(&[t * d, 5], 0.1);
    let bc = m.weight(&[5], 0.1);
    let logits = m.node("Gemm", &[&flat, &wc, &bc], vec![]);
    m.output(&h);
    m.output(&logits);
    m.encode()
}

/// A small CNN over a batch of images: conv, batch norm, ReLU, max pool, a
/// depthwise conv with a residual, global pooling, Flatten and a classifier.
fn cnn(seed: u64) -> Vec<u8> {
    let mut m = ModelBuilder::new(seed);
    let x = m.input("image", &[1, 3, 12, 12]);
    symbolic(&mut m, &x, 0, "N");
    let w = m.weight(&[8, 3, 3, 3], 0.5);
    let b = m.weight(&[8], 0.1);
    let y = m.node(
        "Conv",
        &[&x, &w, &b],
        vec![("pads", Attr::Ints(vec![1; 4]))],
    );
    let (sc, bi, mean) = (
        m.weight(&[8], 1.0),
        m.weight(&[8], 0.1),
        m.weight(&[8], 0.1),
    );
    let var = m.float_init(&[8], vec![0.5; 8]);
    let y = m.node("BatchNormalization", &[&y, &sc, &bi, &mean, &var], vec![]);
    let y = m.node("Relu", &[&y], vec![]);
    let y = m.node(
        "MaxPool",
        &[&y],
        vec![
            ("kernel_shape", Attr::Ints(vec![2, 2])),
            ("strides", Attr::Ints(vec![2, 2])),
        ],
    );
    let wd = m.weight(&[8, 1, 3, 3], 0.5);
    let z = m.node(
        "Conv",
        &[&y, &wd],
        vec![("pads", Attr::Ints(vec![1; 4])), ("group", Attr::I(8))],
    );
    let y = m.node("Add", &[&y, &z], vec![]);
    let y = m.node("GlobalAveragePool", &[&y], vec![]);
    let y = m.node("Flatten", &[&y], vec![("axis", Attr::I(1))]);
    let wc = m.weight(&[10, 8], 0.5);
    let bc = m.weight(&[10], 0.1);
    let y = m.node("Gemm", &[&y, &wc, &bc], vec![("transB", Attr::I(1))]);
    m.output(&y);
    m.encode()
}

/// The model with dim `param` in `1..=8`: at 1, 2, 3, 7 and 8 samples, outputs equal the
/// interpreter's on the model imported at that value, bit-equal to per-sample runs of
/// the same library, and to pooled runs.
fn check_model(bytes: &[u8], param: &str) {
    let model = decode(bytes);
    let g = import(&model, &with_range(param, 1, 8)).unwrap();
    assert_eq!(g.dims.len(), 1);
    assert_eq!(g.dims[0].name, param);
    let lib = Dynamic::new(g);
    let pool = ThreadPool::new(2).unwrap();
    let raw = pool.as_raw();
    for (k, seed) in [(1usize, 1u64), (2, 2), (3, 3), (7, 4), (8, 5)] {
        let reference = static_at(&model, param, k);
        let inputs = inputs_for(&reference, seed);
        let expected = nnc::interp::run_graph(&reference, &inputs).unwrap();
        let shapes = lib.output_shapes(k as i64);
        let (status, got) = lib.run(Some(&[k as i64]), &inputs, None, &shapes);
        assert_eq!(status, 0, "{k} samples");
        assert_close(&expected, &got, &format!("{param}={k} vs the interpreter"));
        let (status, pooled) = lib.run(Some(&[k as i64]), &inputs, Some(&raw), &shapes);
        assert_eq!(status, 0);
        assert_eq!(pooled, got, "{param}={k}: pooled run");
        // One sample at a time through the same library: the same bits.
        let per_sample = nnc::ir::run_dims::run_samples(&lib.graph, &inputs, |one| {
            let (status, out) = lib.run(Some(&[1]), one, None, &lib.output_shapes(1));
            (status == 0).then_some(out).ok_or("status".to_string())
        })
        .unwrap();
        assert_eq!(per_sample, got, "{param}={k}: per-sample runs");
    }
}

#[test]
fn encoder_runs_every_batch_size_from_one_library() {
    check_model(&encoder(11, 7, 16, 2), "batch");
}

#[test]
fn cnn_runs_every_batch_size_from_one_library() {
    check_model(&cnn(12), "N");
}

#[test]
fn out_of_range_values_write_nothing() {
    let model = decode(&cnn(13));
    let lib = Dynamic::new(import(&model, &with_range("N", 2, 5)).unwrap());
    let reference = static_at(&model, "N", 5);
    let inputs = inputs_for(&reference, 9);
    let shapes = lib.output_shapes(5);
    for bad in [0i64, 1, 6, -1, i64::MIN, i64::MAX] {
        let (status, outputs) = lib.run(Some(&[bad]), &inputs, None, &shapes);
        assert_eq!(status, NNC_ERR_DIM_OUT_OF_RANGE, "N={bad}");
        for o in outputs {
            assert!(
                o.to_le_bytes().iter().all(|&b| b == SENTINEL),
                "N={bad} wrote"
            );
        }
        assert_eq!(lib.shapes(Some(&[bad])).0, NNC_ERR_DIM_OUT_OF_RANGE);
    }
    // NULL dims: every dim at its maximum, as `infer` runs.
    let (status, at_max) = lib.run(None, &inputs, None, &shapes);
    assert_eq!(status, 0);
    let expected = nnc::interp::run_graph(&reference, &inputs).unwrap();
    assert_close(&expected, &at_max, "NULL dims");
    let infer = lib.compiled.run(&reference, &inputs).unwrap();
    assert_eq!(infer, at_max, "infer runs at the maximum");
}

#[test]
fn model_info_lists_dims_and_the_axes_that_depend_on_them() {
    let model = decode(&encoder(14, 5, 8, 2));
    let lib = Dynamic::new(import(&model, &with_range("batch", 1, 6)).unwrap());
    let so = lib.lib();
    let info = lib.info(&so);
    assert_eq!(info.abi_version, nnc_runtime_abi::NNC_ABI_VERSION);
    assert_eq!(info.num_dims, 1);
    let d = unsafe { &*info.dims };
    assert_eq!(unsafe { CStr::from_ptr(d.name) }.to_str().unwrap(), "batch");
    assert_eq!((d.min, d.max), (1, 6));
    // ids, mask, hidden and logits all hold the samples on axis 0.
    let deps: Vec<(u32, u32, u32, i64)> = (0..info.num_axis_dims as usize)
        .map(|j| {
            let a = unsafe { &*info.axis_dims.add(j) };
            (a.tensor, a.axis, a.dim, a.scale)
        })
        .collect();
    assert_eq!(
        deps,
        vec![(0, 0, 0, 1), (1, 0, 0, 1), (2, 0, 0, 1), (3, 0, 0, 1)]
    );
    let inputs = unsafe { info.inputs_slice() };
    assert_eq!(
        unsafe { inputs[0].dims_slice() },
        &[6, 5],
        "sizes at the maximum"
    );
    let (status, shapes) = lib.shapes(Some(&[4]));
    assert_eq!(status, 0);
    assert_eq!(
        shapes,
        vec![vec![4, 5], vec![4, 5], vec![4, 5, 8], vec![4, 5]]
    );
    assert_eq!(lib.shapes(None).1[2], vec![6, 5, 8]);
}

#[test]
fn a_static_model_exports_shapes_and_no_dims() {
    let g = static_at(&decode(&cnn(15)), "N", 2);
    let lib = Dynamic::new(g);
    let so = lib.lib();
    let info = lib.info(&so);
    assert_eq!((info.num_dims, info.num_axis_dims), (0, 0));
    assert_eq!(lib.shapes(None), (0, vec![vec![2, 3, 12, 12], vec![2, 10]]));
    // A static model ignores dim values.
    assert_eq!(lib.shapes(Some(&[99])).0, 0);
}

/// `bytes` with `param` in 1..4, whose samples are not independent: refused naming
/// `what`, or compiled over symbolic shapes (never as a loop over samples) and matching
/// the interpreter at every value (or failing where the static import fails).
fn not_per_sample(bytes: Vec<u8>, param: &str, what: &str) {
    let model = decode(&bytes);
    let g = match import(&model, &with_range(param, 1, 4)) {
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains(what), "{what}: {e}");
            return;
        }
        Ok(g) => g,
    };
    assert!(
        g.sample_loop.is_none(),
        "{what}: compiled as a loop over samples"
    );
    let lib = match Dynamic::try_new(g) {
        Err(e) => {
            assert!(e.contains(what), "{what}: {e}");
            return;
        }
        Ok(lib) => lib,
    };
    for k in 1..=4i64 {
        let mut fixed = ImportOptions::default();
        fixed.dims.insert(param.into(), k as usize);
        let (status, shapes) = lib.shapes(Some(&[k]));
        let Ok(reference) = import(&model, &fixed) else {
            assert_ne!(
                status, 0,
                "{what}: {param}={k} has no static form, yet shapes answers"
            );
            continue;
        };
        assert_eq!(status, 0, "{what}: {param}={k}");
        let inputs = inputs_for(&reference, 30 + k as u64);
        let outputs = &shapes[reference.inputs.len()..];
        let (status, got) = lib.run(Some(&[k]), &inputs, None, outputs);
        let Ok(expected) = nnc::interp::run_graph(&reference, &inputs) else {
            assert_ne!(
                status, 0,
                "{what}: {param}={k}: the interpreter fails, the library not"
            );
            continue;
        };
        assert_eq!(status, 0, "{what}: {param}={k}");
        assert_close(&expected, &got, &format!("{what}: {param}={k}"));
    }
}

#[test]
fn samples_that_are_not_independent_never_run_as_a_loop() {
    // Softmax across the samples.
    let mut m = ModelBuilder::new(1);
    let x = m.input("x", &[1, 6]);
    symbolic(&mut m, &x, 0, "b");
    let y = m.node("Softmax", &[&x], vec![("axis", Attr::I(0))]);
    m.output(&y);
    not_per_sample(m.encode(), "b", "Softmax");

    // A Transpose moving an image's plane onto the batch axis of a Conv.
    let mut m = ModelBuilder::new(11);
    let x = m.input("x", &[1, 3, 4, 4]);
    symbolic(&mut m, &x, 2, "s");
    symbolic(&mut m, &x, 3, "s");
    let t = m.node(
        "Transpose",
        &[&x],
        vec![("perm", Attr::Ints(vec![2, 1, 0, 3]))],
    );
    let w = m.weight(&[4, 3, 1, 3], 0.5);
    let y = m.node(
        "Conv",
        &[&t, &w],
        vec![("pads", Attr::Ints(vec![0, 1, 0, 1]))],
    );
    m.output(&y);
    not_per_sample(m.encode(), "s", "Conv");

    // A mean over the samples.
    let mut m = ModelBuilder::new(2);
    let x = m.input("x", &[1, 6]);
    symbolic(&mut m, &x, 0, "b");
    let axes = m.int_init(&[0]);
    let y = m.node("ReduceMean", &[&x, &axes], vec![]);
    m.output(&y);
    not_per_sample(m.encode(), "b", "ReduceMean");

    // A target shape that fixes the batch at 1.
    let mut m = ModelBuilder::new(3);
    let x = m.input("x", &[1, 2, 3]);
    symbolic(&mut m, &x, 0, "b");
    let s = m.int_init(&[1, 6]);
    let y = m.node("Reshape", &[&x, &s], vec![]);
    m.output(&y);
    not_per_sample(m.encode(), "b", "Reshape");

    // A sequence axis (not axis 0) is not the sample loop's: it runs by rows.
    let mut m = ModelBuilder::new(4);
    let x = m.input("x", &[1, 5, 4]);
    symbolic(&mut m, &x, 1, "seq");
    let y = m.node("Relu", &[&x], vec![]);
    m.output(&y);
    let g = import(&decode(&m.encode()), &with_range("seq", 1, 4)).unwrap();
    assert!(g.sample_loop.is_none() && g.symbols.len() == 1);

    // The batch size used as a value.
    let mut m = ModelBuilder::new(5);
    let x = m.input("x", &[1, 4]);
    symbolic(&mut m, &x, 0, "b");
    let s = m.node("Shape", &[&x], vec![]);
    let s = m.node("Cast", &[&s], vec![("to", Attr::I(1))]);
    let zero = m.int_init(&[0]);
    let n = m.node("Gather", &[&s, &zero], vec![("axis", Attr::I(0))]);
    let y = m.node("Mul", &[&x, &n], vec![]);
    m.output(&y);
    not_per_sample(m.encode(), "b", "Mul");

    // A name no input has.
    let e = import(&decode(&cnn(6)), &with_range("batch", 1, 4))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no input of the model has an axis with this name") || e.contains("symbolic"),
        "{e}"
    );

    // Holes a review found in the first rules, each now refused:
    // ScatterElements whose indices and updates cover only the first sample's rows.
    let mut m = ModelBuilder::new(21);
    let x = m.input("x", &[1, 4]);
    symbolic(&mut m, &x, 0, "b");
    let idx = m.int_init(&[1]);
    let shape = m.int_init(&[1, 1]);
    let idx = m.node("Reshape", &[&idx, &shape], vec![]);
    let upd = m.float_init(&[1, 1], vec![10.0]);
    let y = m.node(
        "ScatterElements",
        &[&x, &idx, &upd],
        vec![("axis", Attr::I(1))],
    );
    m.output(&y);
    not_per_sample(m.encode(), "b", "ScatterElements");

    // GatherElements reading shared data row by row.
    let mut m = ModelBuilder::new(22);
    let i = m.typed_input("i", 7, &[1, 2]);
    symbolic(&mut m, &i, 0, "b");
    let data = m.weight(&[3, 4], 1.0);
    let y = m.node("GatherElements", &[&data, &i], vec![("axis", Attr::I(1))]);
    m.output(&y);
    not_per_sample(m.encode(), "b", "GatherElements");

    // A linear Resize with a scale of 1.2 on axis 0 (the same length for 1 to 3 samples,
    // but it blends neighbouring samples).
    let mut m = ModelBuilder::new(23);
    let x = m.input("x", &[1, 4]);
    symbolic(&mut m, &x, 0, "b");
    let scales = m.float_init(&[2], vec![1.2, 1.0]);
    let y = m.node(
        "Resize",
        &[&x, "", &scales],
        vec![("mode", Attr::S("linear"))],
    );
    m.output(&y);
    not_per_sample(m.encode(), "b", "Resize");

    // A Slice whose start on another axis is the batch size (folded into the attribute).
    let mut m = ModelBuilder::new(24);
    let x = m.input("x", &[1, 10]);
    symbolic(&mut m, &x, 0, "b");
    let s = m.node("Shape", &[&x], vec![]);
    let (zero, one) = (m.int_init(&[0]), m.int_init(&[1]));
    let n = m.node("Slice", &[&s, &zero, &one], vec![]);
    let three = m.int_init(&[3]);
    let end = m.node("Add", &[&n, &three], vec![]);
    let y = m.node("Slice", &[&x, &n, &end, &one], vec![]);
    m.output(&y);
    not_per_sample(m.encode(), "b", "Slice");

    // The first three samples: all of them up to 3, not beyond (the range's end shows it).
    let mut m = ModelBuilder::new(25);
    let x = m.input("x", &[1, 4]);
    symbolic(&mut m, &x, 0, "b");
    let (zero, three, axis) = (m.int_init(&[0]), m.int_init(&[3]), m.int_init(&[0]));
    let y = m.node("Slice", &[&x, &zero, &three, &axis], vec![]);
    m.output(&y);
    not_per_sample(m.encode(), "b", "Slice");

    // Ranges the command line would refuse, given through the library.
    for (min, max) in [(0, 4), (5, 4), (1, (1 << 31) + 1)] {
        let e = import(&decode(&cnn(7)), &with_range("N", min, max))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("must have 1 <= MIN <= MAX"), "{e}");
    }

    // A second range the model has no axis for.
    let mut opts = with_range("N", 1, 4);
    opts.ranges.push(DimRange {
        name: "other".into(),
        min: 1,
        max: 2,
        site: DimSite::Param,
    });
    let e = import(&decode(&cnn(7)), &opts).err().unwrap().to_string();
    assert!(
        e.contains("dimension 'other': no input of the model has an axis"),
        "{e}"
    );
}

/// Rows of a MatMul through a library of one row: `--input-shape x=1..9,4`.
fn matmul_rows() -> Vec<u8> {
    let mut m = ModelBuilder::new(8);
    let x = m.input("x", &[3, 4]);
    // An axis the model leaves unnamed and unsized.
    let vi = m.graph.input.iter_mut().find(|i| i.name == x).unwrap();
    let Some(type_proto::Value::TensorType(t)) = vi.r#type.as_mut().unwrap().value.as_mut() else {
        unreachable!()
    };
    t.shape.as_mut().unwrap().dim[0].value = None;
    let w = m.weight(&[4, 2], 1.0);
    let y = m.node("MatMul", &[&x, &w], vec![]);
    let y = m.node("Tanh", &[&y], vec![]);
    m.output(&y);
    m.encode()
}

#[test]
fn an_input_shape_range_names_the_dim_input_dot_axis() {
    let model = decode(&matmul_rows());
    let mut opts = ImportOptions::default();
    opts.input_shapes.insert("x".into(), vec![9, 4]);
    opts.ranges.push(DimRange {
        name: "x.0".into(),
        min: 1,
        max: 9,
        site: DimSite::InputAxis {
            input: "x".into(),
            axis: 0,
        },
    });
    let g = import(&model, &opts).unwrap();
    assert_eq!(g.dims[0].name, "x.0");
    assert_eq!(g.ty(g.inputs[0]).shape, vec![1, 4], "compiled for one row");
    let lib = Dynamic::new(g);
    let mut fixed = ImportOptions::default();
    fixed.input_shapes.insert("x".into(), vec![5, 4]);
    let reference = import(&model, &fixed).unwrap();
    let inputs = inputs_for(&reference, 4);
    let expected = nnc::interp::run_graph(&reference, &inputs).unwrap();
    let (status, got) = lib.run(Some(&[5]), &inputs, None, &lib.output_shapes(5));
    assert_eq!(status, 0);
    assert_close(&expected, &got, "5 rows");
}

#[test]
fn aarch64_runs_the_sample_loop_under_qemu() {
    let model = decode(&cnn(16));
    let g = import(&model, &with_range("N", 1, 4)).unwrap();
    let reference = static_at(&model, "N", 4);
    let inputs = inputs_for(&reference, 3);
    let expected = nnc::interp::run_graph(&reference, &inputs).unwrap();
    // The harness calls `infer`, which runs every dim at its maximum: four samples.
    let Some(harness) = runner::aarch64_harness() else {
        return;
    };
    let opts = runner::options(Target::new(nnc::codegen::Arch::Aarch64, None).unwrap());
    let got =
        runner::run_on_aarch64_shaped(harness, (&g, &reference), &inputs, &opts, &[]).unwrap();
    assert_close(&expected, &got, "aarch64, N=4");
    // And through `run` with a pool of 3 threads.
    let pooled = runner::run_on_aarch64_shaped(
        harness,
        (&g, &reference),
        &inputs,
        &opts,
        &[("NNC_RUN_THREADS", "3")],
    )
    .unwrap();
    assert_eq!(pooled, got, "aarch64 pooled");
}

/// The planes' kernels on aarch64 (the harness calls `infer`, which runs the dim at its
/// maximum): Winograd F(4×4) and F(2×2) over chunks crossing tile rows, and the image
/// classifier's strided, padded, depthwise and pooled planes.
#[test]
fn aarch64_runs_planes_under_qemu() {
    let Some(harness) = runner::aarch64_harness() else {
        return;
    };
    let mut opts = runner::options(Target::new(nnc::codegen::Arch::Aarch64, None).unwrap());
    let cases = [
        (winograd_convs(45, 64), "size", 40, WinogradChoice::Auto),
        (winograd_convs(46, 64), "size", 40, WinogradChoice::F2),
        (
            image_classifier(47, false),
            "size",
            40,
            WinogradChoice::Auto,
        ),
        (text_recognizer(49), "width", 40, WinogradChoice::Auto),
    ];
    for (bytes, dim, max, choice) in cases {
        let model = decode(&bytes);
        let g = import(&model, &with_range(dim, 13, max)).unwrap();
        let reference = static_at(&model, dim, max);
        let inputs = inputs_for(&reference, 5);
        let expected = nnc::interp::run_graph(&reference, &inputs).unwrap();
        opts.kernels.winograd = choice;
        let got =
            runner::run_on_aarch64_shaped(harness, (&g, &reference), &inputs, &opts, &[]).unwrap();
        assert_close(&expected, &got, &format!("aarch64, size={max}, {choice:?}"));
    }
}

#[test]
fn concurrent_runs_with_different_dims_share_one_pool() {
    let model = decode(&cnn(17));
    let lib = Dynamic::new(import(&model, &with_range("N", 1, 8)).unwrap());
    let pool = ThreadPool::new(2).unwrap();
    let raw = pool.as_raw();
    // Each value's inputs and its single-threaded outputs, computed first.
    let cases: Vec<(i64, Vec<Tensor>, Vec<Tensor>)> = (1..=8)
        .map(|k| {
            let inputs = inputs_for(&static_at(&model, "N", k), k as u64);
            let (status, out) = lib.run(
                Some(&[k as i64]),
                &inputs,
                None,
                &lib.output_shapes(k as i64),
            );
            assert_eq!(status, 0);
            (k as i64, inputs, out)
        })
        .collect();
    // The pool is shared by address (its raw form holds C pointers).
    let raw_at = &raw as *const NncThreadPool as usize;
    std::thread::scope(|s| {
        for t in 0..4usize {
            let (lib, cases) = (&lib, &cases);
            s.spawn(move || {
                let raw = unsafe { &*(raw_at as *const NncThreadPool) };
                for round in 0..12 {
                    let (k, inputs, expected) = &cases[(t * 3 + round * 5) % cases.len()];
                    let pool = (round % 2 == 0).then_some(raw);
                    let (status, out) = lib.run(Some(&[*k]), inputs, pool, &lib.output_shapes(*k));
                    assert_eq!(status, 0);
                    assert_eq!(&out, expected, "thread {t} round {round}: N={k}");
                }
            });
        }
    });
}

#[test]
fn an_input_shape_range_on_a_named_axis_takes_its_name() {
    // `ids` and `mask` both call axis 0 `batch`: a range on `ids`'s axis 0 is the dim
    // `batch`, which binds `mask` too.
    let model = decode(&encoder(18, 5, 8, 2));
    let mut opts = ImportOptions::default();
    opts.input_shapes.insert("ids".into(), vec![6, 5]);
    opts.ranges.push(DimRange {
        name: "ids.0".into(),
        min: 1,
        max: 6,
        site: DimSite::InputAxis {
            input: "ids".into(),
            axis: 0,
        },
    });
    let g = import(&model, &opts).unwrap();
    assert_eq!(g.dims[0].name, "batch");
    assert_eq!(g.sample_loop.as_ref().unwrap().inputs, vec![true, true]);
    let lib = Dynamic::new(g);
    let reference = static_at(&model, "batch", 4);
    let inputs = inputs_for(&reference, 6);
    let expected = nnc::interp::run_graph(&reference, &inputs).unwrap();
    let (status, got) = lib.run(Some(&[4]), &inputs, None, &lib.output_shapes(4));
    assert_eq!(status, 0);
    assert_close(&expected, &got, "batch=4 from --input-shape ids=1..6,5");
}

/// A token-wise model over `[1, seq]` ids: word embeddings plus position embeddings
/// gathered by `Range(0, Shape(ids)[1])` (a constant growing with the dim once
/// imported), LayerNorm, an erf-GELU MLP with biases and a residual. Every node
/// computes each token's row from that token's rows alone.
fn tokens(seed: u64, d: usize, f: usize, max_len: usize) -> Vec<u8> {
    let mut m = ModelBuilder::new(seed);
    let ids = m.typed_input("ids", 7, &[1, 1]);
    symbolic(&mut m, &ids, 1, "seq");
    let table = m.weight(&[50, d], 1.0);
    let x = m.node("Gather", &[&table, &ids], vec![("axis", Attr::I(0))]);
    let shape = m.node("Shape", &[&ids], vec![]);
    let one = m.int_init(&[1]);
    let len = m.node("Gather", &[&shape, &one], vec![("axis", Attr::I(0))]);
    let len = m.node("Squeeze", &[&len], vec![]);
    let (zero, step) = (m.int_init(&[0]), m.int_init(&[1]));
    let zero = m.node("Squeeze", &[&zero], vec![]);
    let step = m.node("Squeeze", &[&step], vec![]);
    let positions = m.node("Range", &[&zero, &len, &step], vec![]);
    let pos_table = m.weight(&[max_len, d], 0.5);
    let pos = m.node(
        "Gather",
        &[&pos_table, &positions],
        vec![("axis", Attr::I(0))],
    );
    let x = m.node("Add", &[&x, &pos], vec![]);
    let (g, b) = (m.weight(&[d], 1.0), m.weight(&[d], 0.1));
    let h = m.node(
        "LayerNormalization",
        &[&x, &g, &b],
        vec![("axis", Attr::I(-1))],
    );
    let (w1, b1) = (m.weight(&[d, f], 0.3), m.weight(&[f], 0.1));
    let h = m.node("MatMul", &[&h, &w1], vec![]);
    let h = m.node("Add", &[&h, &b1], vec![]);
    let r2 = m.float_init(&[], vec![std::f32::consts::FRAC_1_SQRT_2]);
    let e = m.node("Mul", &[&h, &r2], vec![]);
    let e = m.node("Erf", &[&e], vec![]);
    let onef = m.float_init(&[], vec![1.0]);
    let e = m.node("Add", &[&e, &onef], vec![]);
    let half = m.float_init(&[], vec![0.5]);
    let h = m.node("Mul", &[&h, &e], vec![]);
    let h = m.node("Mul", &[&h, &half], vec![]);
    let (w2, b2) = (m.weight(&[f, d], 0.3), m.weight(&[d], 0.1));
    let h = m.node("MatMul", &[&h, &w2], vec![]);
    let h = m.node("Add", &[&h, &b2], vec![]);
    let y = m.node("Add", &[&h, &x], vec![]);
    m.output(&y);
    m.encode()
}

/// The row strategy: a dim on axis 1 of `[1, seq]` runs every length in range from one
/// library compiled at the maximum (including the GEMM tile tails MR−1 and MR+1),
/// matching the interpreter on the model imported at that length; the shapes are
/// reported, out-of-range lengths write nothing, and NULL dims run the maximum.
#[test]
fn a_sequence_dim_runs_by_rows_from_one_library() {
    let model = decode(&tokens(21, 16, 40, 40));
    let g = import(&model, &with_range("seq", 1, 40)).unwrap();
    assert!(g.sample_loop.is_none());
    assert_eq!((g.sample_loop.is_none(), g.symbols.len()), (true, 1));
    let deps = nnc::ir::run_dims::axis_dims(&g);
    assert_eq!(
        deps.iter()
            .map(|d| (d.tensor, d.axis, d.dim, d.scale))
            .collect::<Vec<_>>(),
        vec![(0, 1, 0, 1), (1, 1, 0, 1)],
        "ids and the output depend on seq along axis 1"
    );
    let lib = Dynamic::new(g);
    let pool = ThreadPool::new(2).unwrap();
    let raw = pool.as_raw();
    let mr = nnc::codegen::kernels::gemm::MR;
    // 3, 7 and 15 leave every combination of the x86 kernels' 4-, 2- and 1-row tail tiles.
    for (s, seed) in [
        (1usize, 1u64),
        (mr - 1, 2),
        (mr + 1, 3),
        (3, 7),
        (7, 8),
        (15, 9),
        (17, 4),
        (40, 5),
    ] {
        let reference = static_at(&model, "seq", s);
        let inputs = inputs_for(&reference, seed);
        let expected = nnc::interp::run_graph(&reference, &inputs).unwrap();
        let shapes = lib.output_shapes(s as i64);
        assert_eq!(shapes, vec![vec![1, s, 16]]);
        let (status, got) = lib.run(Some(&[s as i64]), &inputs, None, &shapes);
        assert_eq!(status, 0, "seq={s}");
        assert_close(&expected, &got, &format!("seq={s} vs the interpreter"));
        let (status, pooled) = lib.run(Some(&[s as i64]), &inputs, Some(&raw), &shapes);
        assert_eq!(status, 0);
        assert_eq!(pooled, got, "seq={s}: pooled run");
        // The graph at that length, interpreted.
        let instance = nnc::ops::instantiate::instantiate(&lib.graph, &[s as i64]).unwrap();
        let interp = nnc::interp::run_graph(&instance, &inputs).unwrap();
        assert_close(
            &expected,
            &interp,
            &format!("seq={s}: interpreter, by rows"),
        );
    }
    let reference = static_at(&model, "seq", 40);
    let inputs = inputs_for(&reference, 6);
    let shapes = lib.output_shapes(40);
    for bad in [0i64, 41, -1, i64::MAX] {
        let (status, outputs) = lib.run(Some(&[bad]), &inputs, None, &shapes);
        assert_eq!(status, NNC_ERR_DIM_OUT_OF_RANGE, "seq={bad}");
        assert!(
            outputs[0].to_le_bytes().iter().all(|&b| b == SENTINEL),
            "seq={bad} wrote"
        );
    }
    let (status, at_max) = lib.run(None, &inputs, None, &shapes);
    assert_eq!(status, 0);
    let infer = lib.compiled.run(&reference, &inputs).unwrap();
    assert_eq!(infer, at_max, "infer runs at the maximum");
}

/// Positions counted from the end of a sequence the run sets (a Range from `seq - 1`
/// down) are refused naming the node and the extent.
#[test]
fn positions_counted_from_a_run_time_end_are_refused_naming_the_node() {
    let mut m = ModelBuilder::new(23);
    let x = m.input("x", &[1, 1, 4]);
    symbolic(&mut m, &x, 1, "seq");
    let shape = m.node("Shape", &[&x], vec![]);
    let one = m.int_init(&[1]);
    let len = m.node("Gather", &[&shape, &one], vec![("axis", Attr::I(0))]);
    let len = m.node("Squeeze", &[&len], vec![]);
    let (zero, minus) = (m.int_init(&[0]), m.int_init(&[-1]));
    let zero = m.node("Squeeze", &[&zero], vec![]);
    let minus = m.node("Squeeze", &[&minus], vec![]);
    let last = m.node("Sub", &[&len, &one], vec![]);
    let last = m.node("Squeeze", &[&last], vec![]);
    let minus_one = m.node("Sub", &[&zero, &one], vec![]);
    let minus_one = m.node("Squeeze", &[&minus_one], vec![]);
    let backwards = m.node("Range", &[&last, &minus_one, &minus], vec![]);
    let table = m.weight(&[16, 4], 1.0);
    let pos = m.node("Gather", &[&table, &backwards], vec![("axis", Attr::I(0))]);
    let y = m.node("Add", &[&x, &pos], vec![]);
    m.output(&y);
    let model = decode(&m.encode());
    let err = import(&model, &with_range("seq", 1, 16))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("'Range_13' (Range)") && err.contains("a start or delta set at run time"),
        "{err}"
    );
}

/// The harness runs `infer` (the maximum): ranges ending at 7, 4 and 3 take the
/// Cranelift GEMM's row count through a whole tile and 2-row tail, a 4-row tail, and
/// 2- and 1-row tails.
#[test]
fn aarch64_runs_a_sequence_dim_under_qemu() {
    let model = decode(&tokens(25, 16, 24, 12));
    let Some(harness) = runner::aarch64_harness() else {
        return;
    };
    let opts = runner::options(Target::new(nnc::codegen::Arch::Aarch64, None).unwrap());
    for max in [7, 4, 3] {
        let g = import(&model, &with_range("seq", 1, max)).unwrap();
        assert_eq!((g.sample_loop.is_none(), g.symbols.len()), (true, 1));
        let reference = static_at(&model, "seq", max);
        let inputs = inputs_for(&reference, max as u64);
        let expected = nnc::interp::run_graph(&reference, &inputs).unwrap();
        let got =
            runner::run_on_aarch64_shaped(harness, (&g, &reference), &inputs, &opts, &[]).unwrap();
        assert_close(&expected, &got, &format!("aarch64, seq={max}"));
    }
    // Attention across the sequence: Cranelift's GEMMs and softmax rows, in the bound's
    // key bucket (7: the only one; 20: after the 16-key bucket).
    let model = decode(&sentence_encoder(27, 16, 2, 1, 20));
    for max in [7, 20] {
        let mut opts_at = with_range("seq", 1, max);
        opts_at.dims.insert("batch".into(), 1);
        let g = import(&model, &opts_at).unwrap();
        let reference = static_at_values(&model, &[("batch", 1), ("seq", max)]);
        let inputs = inputs_for(&reference, max as u64);
        let expected = nnc::interp::run_graph(&reference, &inputs).unwrap();
        let got =
            runner::run_on_aarch64_shaped(harness, (&g, &reference), &inputs, &opts, &[]).unwrap();
        assert_close(&expected, &got, &format!("aarch64 attention, seq={max}"));
    }
    let model = decode(&decoder(28, 16, 2, 2, 20));
    let g = import(&model, &with_range("seq", 1, 20)).unwrap();
    let reference = static_at(&model, "seq", 20);
    let inputs = inputs_for(&reference, 20);
    let expected = nnc::interp::run_graph(&reference, &inputs).unwrap();
    let got =
        runner::run_on_aarch64_shaped(harness, (&g, &reference), &inputs, &opts, &[]).unwrap();
    assert_close(&expected, &got, "aarch64 causal attention, seq=20");
    // Planes: convs on Cranelift's GEMM, depthwise convs and pools, at the bound.
    let model = decode(&image_classifier(29, false));
    let g = import(&model, &with_range("size", 13, 21)).unwrap();
    let reference = static_at(&model, "size", 21);
    let inputs = inputs_for(&reference, 21);
    let expected = nnc::interp::run_graph(&reference, &inputs).unwrap();
    let got =
        runner::run_on_aarch64_shaped(harness, (&g, &reference), &inputs, &opts, &[]).unwrap();
    assert_close(&expected, &got, "aarch64 image planes, size=21");
}

/// The Cranelift GEMM (every target but x86-64's machine code) takes its row count at
/// run time too: `--kernel gemm=clif` on this host, at every tail of its 5-row tiles.
#[test]
fn the_cranelift_gemm_runs_a_sequence_dim() {
    let model = decode(&tokens(26, 16, 24, 16));
    let g = import(&model, &with_range("seq", 1, 16)).unwrap();
    let mut opts = runner::options(Target::host());
    opts.kernels = nnc::codegen::options::KernelOptions::parse(["gemm=clif"]).unwrap();
    let lib = Dynamic {
        compiled: runner::Compiled::with_options(&g, &opts).unwrap(),
        graph: g,
    };
    for s in [1usize, 2, 3, 4, 5, 6, 7, 8, 9, 11, 16] {
        let reference = static_at(&model, "seq", s);
        let inputs = inputs_for(&reference, s as u64);
        let expected = nnc::interp::run_graph(&reference, &inputs).unwrap();
        let shapes = lib.output_shapes(s as i64);
        let (status, got) = lib.run(Some(&[s as i64]), &inputs, None, &shapes);
        assert_eq!(status, 0, "seq={s}");
        assert_close(&expected, &got, &format!("gemm=clif, seq={s}"));
    }
}

/// A BERT-style encoder over one sentence of `seq` tokens (`max_len` positions): token
/// and position embeddings, `layers` attention layers with a padding mask (heads split
/// by `Reshape [0, 0, H, dh]` and `Transpose`, the scores divided in even layers and
/// multiplied in odd ones, as exporters write either), residuals, LayerNorms and a GELU
/// MLP; outputs the hidden states (through an Identity) and a pooler over the first
/// token. The mask is int64, cast to float.
fn sentence_encoder(seed: u64, d: usize, heads: usize, layers: usize, max_len: usize) -> Vec<u8> {
    let mut m = ModelBuilder::new(seed);
    let ids = m.typed_input("ids", 7, &[1, 1]);
    let mask = m.typed_input("mask", 7, &[1, 1]);
    for input in [&ids, &mask] {
        symbolic(&mut m, input, 0, "batch");
        symbolic(&mut m, input, 1, "seq");
    }
    let table = m.weight(&[50, d], 1.0);
    let x = m.node("Gather", &[&table, &ids], vec![("axis", Attr::I(0))]);
    let shape = m.node("Shape", &[&ids], vec![]);
    let one = m.int_init(&[1]);
    let len = m.node("Gather", &[&shape, &one], vec![("axis", Attr::I(0))]);
    let (zero, axis0) = (m.int_init(&[0]), m.int_init(&[0]));
    let pos_table = m.weight(&[max_len, d], 0.5);
    let pos = m.node("Slice", &[&pos_table, &zero, &len, &axis0], vec![]);
    let x = m.node("Add", &[&x, &pos], vec![]);
    let layer_norm = |m: &mut ModelBuilder, x: &str| {
        let (g, b) = (m.weight(&[d], 1.0), m.weight(&[d], 0.1));
        m.node(
            "LayerNormalization",
            &[x, &g, &b],
            vec![("axis", Attr::I(-1))],
        )
    };
    let mut x = layer_norm(&mut m, &x);
    let onef = m.float_init(&[], vec![1.0]);
    let neg = m.float_init(&[], vec![-1e4]);
    // An int64 mask cast where the caller's buffer holds only the run's rows.
    let mask = m.node("Cast", &[&mask], vec![("to", Attr::I(1))]);
    let pad = m.node("Sub", &[&onef, &mask], vec![]);
    let pad = m.node("Mul", &[&pad, &neg], vec![]);
    let axes = m.int_init(&[1, 2]);
    let pad = m.node("Unsqueeze", &[&pad, &axes], vec![]);
    let dh = d / heads;
    let split = m.int_init(&[0, 0, heads as i64, dh as i64]);
    let merge = m.int_init(&[0, 0, d as i64]);
    for layer in 0..layers {
        let proj = |m: &mut ModelBuilder, x: &str, perm: Vec<i64>| {
            let (w, b) = (m.weight(&[d, d], 0.3), m.weight(&[d], 0.1));
            let y = m.node("MatMul", &[x, &w], vec![]);
            let y = m.node("Add", &[&b, &y], vec![]);
            let y = m.node("Reshape", &[&y, &split], vec![]);
            m.node("Transpose", &[&y], vec![("perm", Attr::Ints(perm))])
        };
        let q = proj(&mut m, &x, vec![0, 2, 1, 3]);
        let k = proj(&mut m, &x, vec![0, 2, 3, 1]);
        let v = proj(&mut m, &x, vec![0, 2, 1, 3]);
        let s = m.node("MatMul", &[&q, &k], vec![]);
        let s = if layer % 2 == 0 {
            let c = m.float_init(&[], vec![(dh as f32).sqrt()]);
            m.node("Div", &[&s, &c], vec![])
        } else {
            let c = m.float_init(&[], vec![1.0 / (dh as f32).sqrt()]);
            m.node("Mul", &[&s, &c], vec![])
        };
        let s = m.node("Add", &[&s, &pad], vec![]);
        let p = m.node("Softmax", &[&s], vec![("axis", Attr::I(-1))]);
        let o = m.node("MatMul", &[&p, &v], vec![]);
        let o = m.node(
            "Transpose",
            &[&o],
            vec![("perm", Attr::Ints(vec![0, 2, 1, 3]))],
        );
        let o = m.node("Reshape", &[&o, &merge], vec![]);
        let (wo, bo) = (m.weight(&[d, d], 0.3), m.weight(&[d], 0.1));
        let o = m.node("MatMul", &[&o, &wo], vec![]);
        let o = m.node("Add", &[&o, &bo], vec![]);
        let r = m.node("Add", &[&x, &o], vec![]);
        let h = layer_norm(&mut m, &r);
        let (w1, b1) = (m.weight(&[d, 2 * d], 0.3), m.weight(&[2 * d], 0.1));
        let f = m.node("MatMul", &[&h, &w1], vec![]);
        let f = m.node("Add", &[&f, &b1], vec![]);
        let f = m.node("Relu", &[&f], vec![]);
        let (w2, b2) = (m.weight(&[2 * d, d], 0.3), m.weight(&[d], 0.1));
        let f = m.node("MatMul", &[&f, &w2], vec![]);
        let f = m.node("Add", &[&f, &b2], vec![]);
        let r = m.node("Add", &[&h, &f], vec![]);
        x = layer_norm(&mut m, &r);
    }
    let first = m.int_init(&[0]);
    let first = m.node("Squeeze", &[&first], vec![]);
    let cls = m.node("Gather", &[&x, &first], vec![("axis", Attr::I(1))]);
    let (wp, bp) = (m.weight(&[d, d], 0.3), m.weight(&[d], 0.1));
    let pooled = m.node("Gemm", &[&cls, &wp, &bp], vec![]);
    let pooled = m.node("Tanh", &[&pooled], vec![]);
    // Copied out as the caller's buffer holds it.
    let x = m.node("Identity", &[&x], vec![]);
    m.output(&x);
    m.output(&pooled);
    m.encode()
}

/// Attention across a sequence dim: the heads are fused and read in place, the
/// queries and keys counted at run time, each length running its key bucket's code
/// (16, 32, 64): lengths at, below and just above each bucket, and at the block tails,
/// match the interpreter on the model imported at that length; the pooler over the
/// first token has a fixed shape.
#[test]
fn attention_across_a_sequence_dim_runs_from_one_library() {
    let model = decode(&sentence_encoder(31, 32, 4, 2, 64));
    let mut opts = with_range("seq", 1, 64);
    opts.dims.insert("batch".into(), 1);
    let g = import(&model, &opts).unwrap();
    assert_eq!((g.sample_loop.is_none(), g.symbols.len()), (true, 1));
    let lib = Dynamic::new(g);
    for (s, seed) in [
        (1usize, 1u64),
        (2, 2),
        (7, 3),
        (16, 4),
        (17, 5),
        (32, 6),
        (33, 7),
        (63, 8),
        (64, 9),
    ] {
        let reference = static_at_values(&model, &[("batch", 1), ("seq", s)]);
        let inputs = inputs_for(&reference, seed);
        let expected = nnc::interp::run_graph(&reference, &inputs).unwrap();
        let shapes = lib.output_shapes(s as i64);
        assert_eq!(shapes, vec![vec![1, s, 32], vec![1, 32]]);
        let (status, got) = lib.run(Some(&[s as i64]), &inputs, None, &shapes);
        assert_eq!(status, 0, "seq={s}");
        assert_close(&expected, &got, &format!("seq={s} vs the interpreter"));
        let instance = nnc::ops::instantiate::instantiate(&lib.graph, &[s as i64]).unwrap();
        let interp = nnc::interp::run_graph(&instance, &inputs).unwrap();
        assert_close(
            &expected,
            &interp,
            &format!("seq={s}: the graph there, interpreted"),
        );
    }
    // Compiled statically too (the bound's bucket only), with a batch of two.
    let mut opts = ImportOptions::default();
    opts.dims
        .extend([("seq".to_string(), 20), ("batch".to_string(), 2)]);
    let mut g = import_model(&model, None, &opts).unwrap().graph;
    nnc::passes::PassManager::default().run(&mut g).unwrap();
    let reference = static_at_values(&model, &[("batch", 2), ("seq", 20)]);
    let inputs = inputs_for(&reference, 11);
    let expected = nnc::interp::run_graph(&reference, &inputs).unwrap();
    let got = runner::run_compiled(&g, &inputs, Target::host()).unwrap();
    assert_close(&expected, &got, "static, batch=2 seq=20");
}

/// A CNN classifier over images of any size (`size` on both plane axes, `N` images
/// when `batch`): a padded conv with batch norm and ReLU, a padded max pool, a
/// strided conv, a pointwise conv with a residual, depthwise convs of stride 1 and 2, a ceil-mode
/// average pool, global pooling and a classifier.
fn image_classifier(seed: u64, batch: bool) -> Vec<u8> {
    let mut m = ModelBuilder::new(seed);
    let x = m.input("image", &[1, 3, 16, 16]);
    symbolic(&mut m, &x, 2, "size");
    symbolic(&mut m, &x, 3, "size");
    if batch {
        symbolic(&mut m, &x, 0, "N");
    }
    let conv = |m: &mut ModelBuilder, x: &str, shape: [usize; 4], attrs: Vec<(&str, Attr)>| {
        let w = m.weight(&shape, 0.4);
        let b = m.weight(&[shape[0]], 0.1);
        m.node("Conv", &[x, &w, &b], attrs)
    };
    let y = conv(
        &mut m,
        &x,
        [8, 3, 3, 3],
        vec![("pads", Attr::Ints(vec![1; 4]))],
    );
    let (sc, bi, mean) = (
        m.weight(&[8], 1.0),
        m.weight(&[8], 0.1),
        m.weight(&[8], 0.1),
    );
    let var = m.float_init(&[8], vec![0.5; 8]);
    let y = m.node("BatchNormalization", &[&y, &sc, &bi, &mean, &var], vec![]);
    let y = m.node("Relu", &[&y], vec![]);
    let y = m.node(
        "MaxPool",
        &[&y],
        vec![
            ("kernel_shape", Attr::Ints(vec![3, 3])),
            ("strides", Attr::Ints(vec![2, 2])),
            ("pads", Attr::Ints(vec![1; 4])),
        ],
    );
    let y = conv(
        &mut m,
        &y,
        [16, 8, 3, 3],
        vec![("strides", Attr::Ints(vec![2, 2]))],
    );
    let y = m.node("Relu", &[&y], vec![]);
    let z = conv(&mut m, &y, [16, 16, 1, 1], vec![]);
    let y = m.node("Add", &[&z, &y], vec![]);
    let y = m.node("Relu", &[&y], vec![]);
    let y = conv(
        &mut m,
        &y,
        [16, 1, 3, 3],
        vec![("pads", Attr::Ints(vec![1; 4])), ("group", Attr::I(16))],
    );
    let y = conv(
        &mut m,
        &y,
        [16, 1, 3, 3],
        vec![
            ("pads", Attr::Ints(vec![1; 4])),
            ("group", Attr::I(16)),
            ("strides", Attr::Ints(vec![2, 2])),
        ],
    );
    let y = m.node(
        "AveragePool",
        &[&y],
        vec![
            ("kernel_shape", Attr::Ints(vec![2, 2])),
            ("strides", Attr::Ints(vec![2, 2])),
            ("ceil_mode", Attr::I(1)),
        ],
    );
    let y = m.node("GlobalAveragePool", &[&y], vec![]);
    let y = m.node("Flatten", &[&y], vec![("axis", Attr::I(1))]);
    let wc = m.weight(&[10, 16], 0.5);
    let bc = m.weight(&[10], 0.1);
    let y = m.node("Gemm", &[&y, &wc, &bc], vec![("transB", Attr::I(1))]);
    m.output(&y);
    m.encode()
}

/// A bidirectional LSTM of `hidden` (with a bias) over the sequence `x` `[T, 1, input]`,
/// its directions merged as exporters write it (Transpose, Reshape `[0, 0, -1]`):
/// `[T, 1, 2·hidden]`.
fn bidirectional_lstm(m: &mut ModelBuilder, x: &str, input: usize, hidden: usize) -> String {
    let (w, r, b) = (
        m.weight(&[2, 4 * hidden, input], 0.3),
        m.weight(&[2, 4 * hidden, hidden], 0.3),
        m.weight(&[2, 8 * hidden], 0.1),
    );
    let y = m.node(
        "LSTM",
        &[x, &w, &r, &b],
        vec![
            ("hidden_size", Attr::I(hidden as i64)),
            ("direction", Attr::S("bidirectional")),
        ],
    );
    let y = m.node(
        "Transpose",
        &[&y],
        vec![("perm", Attr::Ints(vec![0, 2, 1, 3]))],
    );
    let shape = m.int_init(&[0, 0, -1]);
    m.node("Reshape", &[&y, &shape], vec![])
}

/// A CRNN-style text recognizer over a grey line `[1, 1, 8, width]`: two conv + max
/// pool stages and a 2×2 conv down to a height of 1, the columns squeezed and transposed
/// into a sequence `[(width/2)/2 - 1, 1, 16]`, a bidirectional LSTM (hidden 10: gates
/// padded to whole vectors) with a bias, its directions merged by Transpose and
/// Reshape, a per-step classifier and LogSoftmax.
fn text_recognizer(seed: u64) -> Vec<u8> {
    let mut m = ModelBuilder::new(seed);
    let x = m.input("line", &[1, 1, 8, 40]);
    symbolic(&mut m, &x, 3, "width");
    let conv = |m: &mut ModelBuilder, x: &str, shape: [usize; 4], pads: i64| {
        let w = m.weight(&shape, 0.5);
        let b = m.weight(&[shape[0]], 0.1);
        let y = m.node(
            "Conv",
            &[x, &w, &b],
            vec![("pads", Attr::Ints(vec![pads; 4]))],
        );
        m.node("Relu", &[&y], vec![])
    };
    let pool = |m: &mut ModelBuilder, x: &str| {
        let k = vec![
            ("kernel_shape", Attr::Ints(vec![2, 2])),
            ("strides", Attr::Ints(vec![2, 2])),
        ];
        m.node("MaxPool", &[x], k)
    };
    let y = conv(&mut m, &x, [8, 1, 3, 3], 1);
    let y = pool(&mut m, &y);
    let y = conv(&mut m, &y, [16, 8, 3, 3], 1);
    let y = pool(&mut m, &y);
    let y = conv(&mut m, &y, [16, 16, 2, 2], 0);
    let axes = m.int_init(&[2]);
    let y = m.node("Squeeze", &[&y, &axes], vec![]);
    let y = m.node(
        "Transpose",
        &[&y],
        vec![("perm", Attr::Ints(vec![2, 0, 1]))],
    );
    let y = bidirectional_lstm(&mut m, &y, 16, 10);
    let (wc, bc) = (m.weight(&[20, 7], 0.5), m.weight(&[7], 0.1));
    let y = m.node("MatMul", &[&y, &wc], vec![]);
    let y = m.node("Add", &[&y, &bc], vec![]);
    let y = m.node("LogSoftmax", &[&y], vec![("axis", Attr::I(2))]);
    m.output(&y);
    m.encode()
}

/// Text lines of every width in range from one library (`--dim width=12..40`): the
/// convs' planes follow the width, the columns become a sequence whose length is
/// `(width/2)/2 - 1`, which the LSTM's recurrence and the classifier run over; the
/// outputs match the interpreter on the model imported at that width, `shapes` and
/// `model_info` give the output's steps from the width, and widths out of range write
/// nothing.
#[test]
fn a_text_line_width_runs_every_width_from_one_library() {
    let model = decode(&text_recognizer(48));
    let g = import(&model, &with_range("width", 12, 40)).unwrap();
    let lib = Dynamic::new(g);
    for (w, seed) in [
        (12usize, 1u64),
        (13, 2),
        (15, 3),
        (16, 4),
        (17, 5),
        (31, 6),
        (40, 7),
    ] {
        let reference = static_at(&model, "width", w);
        let inputs = inputs_for(&reference, seed);
        let expected = nnc::interp::run_graph(&reference, &inputs).unwrap();
        let steps = w / 2 / 2 - 1;
        let (status, shapes) = lib.shapes(Some(&[w as i64]));
        assert_eq!(status, 0);
        assert_eq!(shapes, vec![vec![1, 1, 8, w], vec![steps, 1, 7]]);
        let (status, got) = lib.run(Some(&[w as i64]), &inputs, None, &shapes[1..]);
        assert_eq!(status, 0, "width={w}");
        assert_close(&expected, &got, &format!("width={w} vs the interpreter"));
    }
    let handle = lib.lib();
    let info = lib.info(&handle);
    assert_eq!(info.abi_version, nnc_runtime_abi::NNC_ABI_VERSION);
    assert_eq!((info.num_axis_dims, info.num_bounded_axes), (2, 0));
    assert!(!info.axis_extents.is_null());
    let steps = |j: usize| -> Vec<(i64, i64)> {
        let e = unsafe { &*info.axis_extents.add(j) };
        (0..e.num_steps as usize)
            .map(|k| unsafe { *e.steps.add(k) })
            .map(|s| (s.add, s.div))
            .collect()
    };
    let at = |j: usize| unsafe { *info.axis_dims.add(j) };
    assert_eq!((at(0).tensor, at(0).axis), (0, 3));
    assert_eq!(steps(0), vec![]);
    assert_eq!((at(1).tensor, at(1).axis, at(1).scale), (1, 0, 1));
    let size = |w: i64| steps(1).iter().fold(w, |x, &(add, div)| (x + add) / div);
    assert!((12..=40).all(|w| size(w) == w / 2 / 2 - 1));
    let reference = static_at(&model, "width", 12);
    let inputs = inputs_for(&reference, 8);
    let (status, got) = lib.run(Some(&[11]), &inputs, None, &[vec![1, 1, 7]]);
    assert_eq!(status, NNC_ERR_DIM_OUT_OF_RANGE);
    assert!(got[0].to_le_bytes().iter().all(|&x| x == SENTINEL));
}

/// A sequence tagger over `ids` `[1, seq]`: embeddings `[1, seq, 16]` transposed to the
/// `[seq, 1, 16]` an LSTM reads (moving only a unit axis), a bidirectional LSTM of 12,
/// its directions merged, a per-token classifier.
fn sequence_tagger(seed: u64) -> Vec<u8> {
    let mut m = ModelBuilder::new(seed);
    let ids = m.typed_input("ids", 7, &[1, 64]);
    symbolic(&mut m, &ids, 1, "seq");
    let table = m.weight(&[50, 16], 0.5);
    let e = m.node("Gather", &[&table, &ids], vec![]);
    let e = m.node(
        "Transpose",
        &[&e],
        vec![("perm", Attr::Ints(vec![1, 0, 2]))],
    );
    let y = bidirectional_lstm(&mut m, &e, 16, 12);
    let wc = m.weight(&[24, 5], 0.5);
    let y = m.node("MatMul", &[&y, &wc], vec![]);
    m.output(&y);
    m.encode()
}

/// An LSTM over a sequence dim (`--dim seq=1..64`) runs by rows: the recurrence over the
/// run's count of steps, matching the interpreter at every length, with a pool too.
#[test]
fn an_lstm_over_a_sequence_dim_runs_every_length() {
    let model = decode(&sequence_tagger(50));
    let g = import(&model, &with_range("seq", 1, 64)).unwrap();
    assert!(g.sample_loop.is_none());
    let lib = Dynamic::new(g);
    let pool = ThreadPool::new(2).unwrap();
    let raw = pool.as_raw();
    for (s, seed) in [(1usize, 1u64), (2, 2), (7, 3), (9, 4), (33, 5), (64, 6)] {
        let reference = static_at(&model, "seq", s);
        let inputs = inputs_for(&reference, seed);
        let expected = nnc::interp::run_graph(&reference, &inputs).unwrap();
        let shapes = lib.output_shapes(s as i64);
        assert_eq!(shapes, vec![vec![s, 1, 5]]);
        let (status, got) = lib.run(Some(&[s as i64]), &inputs, None, &shapes);
        assert_eq!(status, 0, "seq={s}");
        assert_close(&expected, &got, &format!("seq={s} vs the interpreter"));
        let (status, pooled) = lib.run(Some(&[s as i64]), &inputs, Some(&raw), &shapes);
        assert_eq!(status, 0);
        assert_eq!(pooled, got, "seq={s}: pooled run");
    }
}

/// Images of every size in range from one library (`--dim size=13..40`): the planes'
/// extents follow each conv and pool at run time, the outputs match the interpreter on
/// the model imported at that size, sizes out of range write nothing.
#[test]
fn an_image_size_dim_runs_every_size_from_one_library() {
    let model = decode(&image_classifier(41, false));
    let g = import(&model, &with_range("size", 13, 40)).unwrap();
    assert_eq!((g.sample_loop.is_none(), g.symbols.len()), (true, 1));
    let lib = Dynamic::new(g);
    for (s, seed) in [
        (13usize, 1u64),
        (14, 2),
        (16, 3),
        (17, 4),
        (23, 5),
        (39, 6),
        (40, 7),
    ] {
        let reference = static_at(&model, "size", s);
        let inputs = inputs_for(&reference, seed);
        let expected = nnc::interp::run_graph(&reference, &inputs).unwrap();
        let (status, shapes) = lib.shapes(Some(&[s as i64]));
        assert_eq!(status, 0);
        assert_eq!(shapes, vec![vec![1, 3, s, s], vec![1, 10]]);
        let (status, got) = lib.run(Some(&[s as i64]), &inputs, None, &shapes[1..]);
        assert_eq!(status, 0, "size={s}");
        assert_close(&expected, &got, &format!("size={s} vs the interpreter"));
    }
    let reference = static_at(&model, "size", 13);
    let inputs = inputs_for(&reference, 8);
    let (status, got) = lib.run(Some(&[12]), &inputs, None, &[vec![1, 10]]);
    assert_eq!(status, NNC_ERR_DIM_OUT_OF_RANGE);
    assert!(got[0].to_le_bytes().iter().all(|&x| x == SENTINEL));
}

/// A batch of images of any size (`--dim N=1..3 --dim size=13..24`): one image's
/// graph on planes, called per image with each image's planes as large as the run's;
/// every (N, size) matches the interpreter at that shape, both maxima run with NULL
/// dims, and out-of-range values of either dim write nothing.
#[test]
fn a_batch_of_images_of_any_size_runs_from_one_library() {
    let model = decode(&image_classifier(42, true));
    let mut opts = with_range("size", 13, 24);
    opts.ranges.insert(
        0,
        DimRange {
            name: "N".into(),
            min: 1,
            max: 3,
            site: DimSite::Param,
        },
    );
    let g = import(&model, &opts).unwrap();
    let names: Vec<&str> = g.dims.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["N", "size"]);
    assert!(g.sample_loop.is_none() && g.symbols.len() == 2);
    let lib = Dynamic::new(g);
    for (k, s, seed) in [(1usize, 13usize, 1u64), (2, 15, 2), (3, 24, 3), (3, 14, 4)] {
        let reference = static_at_values(&model, &[("N", k), ("size", s)]);
        let inputs = inputs_for(&reference, seed);
        let expected = nnc::interp::run_graph(&reference, &inputs).unwrap();
        let dims = [k as i64, s as i64];
        let (status, shapes) = lib.shapes(Some(&dims));
        assert_eq!(status, 0);
        assert_eq!(shapes, vec![vec![k, 3, s, s], vec![k, 10]]);
        let (status, got) = lib.run(Some(&dims), &inputs, None, &shapes[1..]);
        assert_eq!(status, 0, "N={k} size={s}");
        assert_close(
            &expected,
            &got,
            &format!("N={k} size={s} vs the interpreter"),
        );
    }
    let reference = static_at_values(&model, &[("N", 3), ("size", 24)]);
    let inputs = inputs_for(&reference, 12);
    let expected = nnc::interp::run_graph(&reference, &inputs).unwrap();
    let (status, at_max) = lib.run(None, &inputs, None, &[vec![3, 10]]);
    assert_eq!(status, 0);
    assert_close(&expected, &at_max, "NULL dims: N=3 size=24");
    let reference = static_at_values(&model, &[("N", 2), ("size", 16)]);
    let inputs = inputs_for(&reference, 9);
    for bad in [[0i64, 16], [4, 16], [2, 12], [2, 25]] {
        let (status, outputs) = lib.run(Some(&bad), &inputs, None, &[vec![2, 10]]);
        assert_eq!(status, NNC_ERR_DIM_OUT_OF_RANGE, "dims {bad:?}");
        assert!(
            outputs[0].to_le_bytes().iter().all(|&b| b == SENTINEL),
            "dims {bad:?} wrote"
        );
    }
}

/// Three 3×3 stride-1 convs of `channels` maps over planes of any size: bias and ReLU,
/// bias and a residual (the image) then ReLU, and one with asymmetric pads (two rows on
/// top, two columns on the right) and no bias; the planes are the output.
fn winograd_convs(seed: u64, channels: usize) -> Vec<u8> {
    let mut m = ModelBuilder::new(seed);
    let x = m.input("image", &[1, channels, 24, 24]);
    symbolic(&mut m, &x, 2, "size");
    symbolic(&mut m, &x, 3, "size");
    let scale = 1.0 / (3.0 * channels as f32).sqrt();
    let conv = |m: &mut ModelBuilder, x: &str, bias: bool, pads: [i64; 4]| {
        let w = m.weight(&[channels, channels, 3, 3], scale);
        let mut inputs = vec![x.to_string(), w];
        if bias {
            inputs.push(m.weight(&[channels], 0.1));
        }
        let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        m.node("Conv", &inputs, vec![("pads", Attr::Ints(pads.to_vec()))])
    };
    let y = conv(&mut m, &x, true, [1; 4]);
    let y = m.node("Relu", &[&y], vec![]);
    let y = conv(&mut m, &y, true, [1; 4]);
    let y = m.node("Add", &[&y, &x], vec![]);
    let y = m.node("Relu", &[&y], vec![]);
    let y = conv(&mut m, &y, false, [2, 0, 0, 2]);
    m.output(&y);
    m.encode()
}

/// 3×3 convs on planes run by Winograd, F(4×4) and F(2×2), at sizes whose tiles end
/// at every column and row of a tile and whose chunks of tiles start and end inside
/// tile rows (64 channels: chunks of at most about 56 tiles; 100 tiles at size 40),
/// with the transforms of each CPU family the host runs (tile rows of up to 8 tiles
/// and of more, each group's columns ending at every lane): every size matches the
/// interpreter on the model imported at that size.
#[test]
fn winograd_convs_on_planes_run_every_size() {
    let model = decode(&winograd_convs(44, 64));
    let g = import(&model, &with_range("size", 9, 40)).unwrap();
    for ((choice, m), (cpu, target)) in [(WinogradChoice::Auto, 4), (WinogradChoice::F2, 2)]
        .into_iter()
        .flat_map(|c| host_and_lower_families().into_iter().map(move |t| (c, t)))
    {
        let kernels = KernelOptions {
            winograd: choice,
            ..Default::default()
        };
        let plan = plan_kernels(&g, &target, &kernels);
        let tiles: Vec<usize> = plan
            .nodes
            .iter()
            .filter_map(|k| match &k.strategy {
                Strategy::Planes(p) => p.winograd.as_ref().map(|w| w.m),
                _ => None,
            })
            .collect();
        assert_eq!(tiles, [m; 3], "every conv by F({m}×{m}, 3×3)");
        let lib = Dynamic::for_target(g.clone(), target, kernels);
        let label = format!("F({m}×{m}) {cpu}");
        check_sizes(
            &lib,
            &model,
            &[
                (9usize, 1u64),
                (10, 2),
                (11, 3),
                (12, 4),
                (17, 5),
                (26, 6),
                (33, 8),
                (40, 7),
            ],
            &label,
        );
    }
}

/// Convs of many maps (128) that run transposed on their plain weights at the range's
/// smallest planes (size 8: 64 positions, as a library for size 8 runs them) keep
/// those weights where Winograd would be F(2×2) (sizes up to 15), the library no
/// larger than the one for size 8; from size 12
/// (144 positions) they take F(2×2), and F(4×4) (sizes up to 24) whatever the smallest.
/// Every case matches the interpreter.
#[test]
fn many_maps_over_small_planes_keep_their_plain_weights() {
    let model = decode(&winograd_convs(47, 128));
    let target = Target::host();
    let kernels = KernelOptions::default();
    let static_8 = runner::Compiled::with_options(
        &static_at(&model, "size", 8),
        &runner::options(target.clone()),
    )
    .unwrap();
    let static_8 = file_size(&static_8);
    for (least, most, winograd) in [(8usize, 15, None), (12, 15, Some(2)), (8, 24, Some(4))] {
        let g = import(&model, &with_range("size", least, most)).unwrap();
        let plan = plan_kernels(&g, &target, &kernels);
        let planes: Vec<Option<usize>> = (plan.nodes.iter())
            .filter_map(|k| match &k.strategy {
                Strategy::Planes(p) if p.gemm.is_some() || p.winograd.is_some() => {
                    Some(p.winograd.as_ref().map(|w| w.m))
                }
                _ => None,
            })
            .collect();
        assert_eq!(planes, [winograd; 3], "sizes {least}..{most}");
        let lib = Dynamic::for_target(g.clone(), target.clone(), kernels.clone());
        let label = format!("sizes {least}..{most}");
        check_sizes(&lib, &model, &[(least, 1u64), (most, 2)], &label);
        let size = file_size(&lib.compiled) as f64;
        match winograd {
            None => assert!(
                size <= 1.05 * static_8 as f64,
                "{label}: {size} vs {static_8}"
            ),
            Some(_) => assert!(
                size > 1.3 * static_8 as f64,
                "{label}: {size} vs {static_8}"
            ),
        }
    }
}

fn file_size(compiled: &runner::Compiled) -> u64 {
    std::fs::metadata(compiled.library_path()).unwrap().len()
}

/// Pointwise convs over planes of any size: 16 → 40 maps with bias and ReLU, 40 → 16
/// with bias plus a residual (the image) then ReLU (the residual fused into the conv),
/// a grouped one (two groups of 8 → 12) without bias, and a strided 1×1 (blocks).
fn pointwise_convs(seed: u64) -> Vec<u8> {
    let mut m = ModelBuilder::new(seed);
    let x = m.input("image", &[1, 16, 20, 20]);
    symbolic(&mut m, &x, 2, "size");
    symbolic(&mut m, &x, 3, "size");
    let conv =
        |m: &mut ModelBuilder, x: &str, (c, maps, group): (usize, usize, i64), bias: bool| {
            let w = m.weight(&[maps, c / group as usize, 1, 1], 0.3);
            let mut inputs = vec![x.to_string(), w];
            if bias {
                inputs.push(m.weight(&[maps], 0.1));
            }
            let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
            m.node("Conv", &inputs, vec![("group", Attr::I(group))])
        };
    let y = conv(&mut m, &x, (16, 40, 1), true);
    let y = m.node("Relu", &[&y], vec![]);
    let y = conv(&mut m, &y, (40, 16, 1), true);
    let y = m.node("Add", &[&y, &x], vec![]);
    let y = m.node("Relu", &[&y], vec![]);
    let y = conv(&mut m, &y, (16, 24, 2), false);
    let w = m.weight(&[8, 24, 1, 1], 0.3);
    let y = m.node("Conv", &[&y, &w], vec![("strides", Attr::Ints(vec![2, 2]))]);
    m.output(&y);
    m.encode()
}

/// Pointwise convs on planes run as one GEMM reading and writing the planes in place
/// (x86; blocks elsewhere), the plane size its column count: sizes whose planes end at
/// every part of a column panel and vector (1 to 400 positions), on every CPU family
/// the host runs, match the interpreter on the model imported at that size.
#[test]
fn pointwise_convs_on_planes_run_every_size() {
    let model = decode(&pointwise_convs(45));
    let g = import(&model, &with_range("size", 1, 20)).unwrap();
    for (cpu, target) in host_and_lower_families() {
        let plan = plan_kernels(&g, &target, &KernelOptions::default());
        let in_place = plan
            .nodes
            .iter()
            .filter(|k| matches!(&k.strategy, Strategy::Planes(p) if p.gemm.as_ref().is_some_and(|b| b.in_place)))
            .count();
        let x86 = target.arch == nnc::codegen::Arch::X86_64 && cpu != "baseline";
        assert_eq!(
            in_place,
            if x86 { 3 } else { 0 },
            "{cpu}: the stride-1 convs in place"
        );
        let lib = Dynamic::for_target(g.clone(), target, KernelOptions::default());
        check_sizes(
            &lib,
            &model,
            &[
                (1usize, 1u64),
                (4, 2),
                (7, 3),
                (8, 4),
                (11, 5),
                (16, 6),
                (20, 7),
            ],
            &cpu,
        );
    }
}

/// Depthwise convs over planes of any size (MobileNet's): 3×3 pad 1 with bias and
/// Clip(0, 6), 3×3 stride 2, 5×5 pad 2 plus a residual (its input) then ReLU, 5×5
/// stride 2 without bias, and a dilated 3×3.
fn depthwise_convs(seed: u64) -> Vec<u8> {
    let mut m = ModelBuilder::new(seed);
    let c = 8;
    let x = m.input("image", &[1, c, 30, 30]);
    symbolic(&mut m, &x, 2, "size");
    symbolic(&mut m, &x, 3, "size");
    let dw = |m: &mut ModelBuilder, x: &str, k: usize, stride: i64, dil: i64, bias: bool| {
        let w = m.weight(&[c, 1, k, k], 0.4);
        let mut inputs = vec![x.to_string(), w];
        if bias {
            inputs.push(m.weight(&[c], 0.1));
        }
        let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        let pad = (k as i64 - 1) / 2 * dil;
        m.node(
            "Conv",
            &inputs,
            vec![
                ("group", Attr::I(c as i64)),
                ("pads", Attr::Ints(vec![pad; 4])),
                ("strides", Attr::Ints(vec![stride; 2])),
                ("dilations", Attr::Ints(vec![dil; 2])),
            ],
        )
    };
    let y = dw(&mut m, &x, 3, 1, 1, true);
    let lo = m.float_init(&[], vec![0.0]);
    let hi = m.float_init(&[], vec![6.0]);
    let y = m.node("Clip", &[&y, &lo, &hi], vec![]);
    let y = dw(&mut m, &y, 3, 2, 1, true);
    let z = dw(&mut m, &y, 5, 1, 1, true);
    let y = m.node("Add", &[&z, &y], vec![]);
    let y = m.node("Relu", &[&y], vec![]);
    let y = dw(&mut m, &y, 5, 2, 1, false);
    let y = dw(&mut m, &y, 3, 1, 2, true);
    m.output(&y);
    m.encode()
}

/// Depthwise convs on planes (x86: the machine-code row kernel, copying stride-1
/// planes itself; elsewhere Cranelift's loops) at sizes whose rows end at every part of
/// a vector, on every CPU family the host runs, match the interpreter.
#[test]
fn depthwise_convs_on_planes_run_every_size() {
    let model = decode(&depthwise_convs(46));
    let g = import(&model, &with_range("size", 9, 70)).unwrap();
    for (cpu, target) in host_and_lower_families() {
        let lib = Dynamic::for_target(g.clone(), target, KernelOptions::default());
        check_sizes(
            &lib,
            &model,
            &[
                (9usize, 1u64),
                (12, 2),
                (17, 3),
                (33, 4),
                (40, 5),
                (63, 6),
                (70, 7),
            ],
            &cpu,
        );
    }
}

/// A `k`×`k` conv of `c` channels to `maps` at `stride`, "same" pads, weights scaled
/// by the fan-in, with a bias when `bias`.
fn conv(
    m: &mut ModelBuilder,
    x: &str,
    (c, maps, k, stride): (usize, usize, usize, i64),
    bias: bool,
) -> String {
    let w = m.weight(&[maps, c, k, k], 1.0 / ((k * k * c) as f32).sqrt());
    let mut inputs = vec![x.to_string(), w];
    if bias {
        inputs.push(m.weight(&[maps], 0.1));
    }
    let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let attrs = vec![
        ("pads", Attr::Ints(vec![(k as i64 - 1) / 2; 4])),
        ("strides", Attr::Ints(vec![stride; 2])),
    ];
    m.node("Conv", &inputs, attrs)
}

/// The convs of `model` with a range of `size` and Winograd off, on every CPU family
/// the host runs: `on_x86` of its nodes' plans have `property` on x86 machine code
/// (none elsewhere), and every size matches the interpreter.
fn check_conv_plans(
    model: &[u8],
    range: (usize, usize),
    (what, property): (&str, fn(&Strategy) -> bool),
    on_x86: usize,
    sizes: &[(usize, u64)],
) {
    let model = decode(model);
    let g = import(&model, &with_range("size", range.0, range.1)).unwrap();
    let no_winograd = KernelOptions {
        winograd: WinogradChoice::Off,
        ..Default::default()
    };
    for (cpu, target) in host_and_lower_families() {
        let plan = plan_kernels(&g, &target, &no_winograd.clone());
        let with = plan.nodes.iter().filter(|k| property(&k.strategy)).count();
        let x86 = target.arch == nnc::codegen::Arch::X86_64 && cpu != "baseline";
        assert_eq!(with, if x86 { on_x86 } else { 0 }, "{cpu}: {what}");
        let lib = Dynamic::for_target(g.clone(), target, no_winograd.clone());
        check_sizes(&lib, &model, sizes, &cpu);
    }
}

/// Convs of many maps over small planes (ResNet's last stage): 3×3 16 → 128 with bias
/// and ReLU, 3×3 128 → 128 with bias plus a residual then ReLU, and a strided 3×3.
fn many_maps_convs(seed: u64) -> Vec<u8> {
    let mut m = ModelBuilder::new(seed);
    let x = m.input("image", &[1, 16, 11, 11]);
    symbolic(&mut m, &x, 2, "size");
    symbolic(&mut m, &x, 3, "size");
    let y = conv(&mut m, &x, (16, 128, 3, 1), true);
    let y = m.node("Relu", &[&y], vec![]);
    let z = conv(&mut m, &y, (128, 128, 3, 1), true);
    let y = m.node("Add", &[&z, &y], vec![]);
    let y = m.node("Relu", &[&y], vec![]);
    let y = conv(&mut m, &y, (128, 128, 3, 2), false);
    m.output(&y);
    m.encode()
}

/// Convs of many maps on planes of at most 121 positions (Winograd off, which the
/// stride-1 ones would take) run their blocks transposed on x86 (the positions the
/// GEMM's rows, counted at run time: every row-tile tail), and match the interpreter at
/// every size on every CPU family the host runs.
#[test]
fn many_maps_on_small_planes_run_every_size() {
    let transposed = |s: &Strategy| matches!(s, Strategy::Planes(p) if p.gemm.as_ref().is_some_and(|b| b.transposed));
    check_conv_plans(
        &many_maps_convs(47),
        (1, 11),
        ("every conv transposed", transposed),
        3,
        &[
            (1usize, 1u64),
            (2, 2),
            (3, 3),
            (5, 4),
            (7, 5),
            (9, 6),
            (11, 7),
        ],
    );
}

/// Convs of few maps by blocks of output positions (Winograd off): a 3×3 3 → 16 stem of
/// stride 2 with bias and ReLU, a 3×3 16 → 16 plus a residual then ReLU, a 5×5 of
/// stride 2 with Clip, and a 3×3 with a residual and no bias.
fn block_convs(seed: u64) -> Vec<u8> {
    let mut m = ModelBuilder::new(seed);
    let x = m.input("image", &[1, 3, 40, 40]);
    symbolic(&mut m, &x, 2, "size");
    symbolic(&mut m, &x, 3, "size");
    let y = conv(&mut m, &x, (3, 16, 3, 2), true);
    let y = m.node("Relu", &[&y], vec![]);
    let z = conv(&mut m, &y, (16, 16, 3, 1), true);
    let y = m.node("Add", &[&z, &y], vec![]);
    let y = m.node("Relu", &[&y], vec![]);
    let y = conv(&mut m, &y, (16, 24, 5, 2), true);
    let lo = m.float_init(&[], vec![0.0]);
    let hi = m.float_init(&[], vec![6.0]);
    let y = m.node("Clip", &[&y, &lo, &hi], vec![]);
    let z = conv(&mut m, &y, (24, 24, 3, 1), false);
    let y = m.node("Add", &[&y, &z], vec![]);
    m.output(&y);
    m.encode()
}

/// Convs by blocks of output positions whose GEMM writes the planes itself on x86 (the
/// plane size its row stride, the residual and activation in its epilogue), over
/// several blocks and a counted last one, match the interpreter at every size on every
/// CPU family the host runs.
#[test]
fn block_convs_on_planes_run_every_size() {
    let writing = |s: &Strategy| matches!(s, Strategy::Planes(p) if p.gemm.as_ref().is_some_and(|b| b.writes_planes));
    check_conv_plans(
        &block_convs(48),
        (5, 90),
        ("every conv's GEMM writes the planes", writing),
        4,
        &[(5usize, 1u64), (8, 2), (17, 3), (40, 4), (63, 5), (90, 6)],
    );
}

/// A conv net with squeeze-and-excitation blocks (MobileNetV3's, EfficientNet's): each
/// image's channel scales, computed from its globally pooled planes, multiply its planes
/// (planes first, then scales first), and per-channel constants are added, subtracted
/// and divided by over the planes.
fn squeeze_excite_classifier(seed: u64) -> Vec<u8> {
    let mut m = ModelBuilder::new(seed);
    let x = m.input("image", &[2, 3, 16, 16]);
    symbolic(&mut m, &x, 0, "N");
    symbolic(&mut m, &x, 2, "size");
    symbolic(&mut m, &x, 3, "size");
    let conv = |m: &mut ModelBuilder, x: &str, shape: [usize; 4], attrs: Vec<(&str, Attr)>| {
        let w = m.weight(&shape, 0.4);
        let b = m.weight(&[shape[0]], 0.1);
        m.node("Conv", &[x, &w, &b], attrs)
    };
    let pad1 = || vec![("pads", Attr::Ints(vec![1; 4]))];
    let y = conv(&mut m, &x, [8, 3, 3, 3], pad1());
    let y = m.node("Relu", &[&y], vec![]);
    let excite = |m: &mut ModelBuilder, y: &str, scales_first: bool| {
        let s = m.node("GlobalAveragePool", &[y], vec![]);
        let s = conv(m, &s, [4, 8, 1, 1], vec![]);
        let s = m.node("Relu", &[&s], vec![]);
        let s = conv(m, &s, [8, 4, 1, 1], vec![]);
        let s = m.node("HardSigmoid", &[&s], vec![]);
        if scales_first {
            m.node("Mul", &[&s, y], vec![])
        } else {
            m.node("Mul", &[y, &s], vec![])
        }
    };
    let y = excite(&mut m, &y, false);
    let shift = m.weight(&[8, 1, 1], 0.5);
    let y = m.node("Add", &[&shift, &y], vec![]);
    let y = conv(
        &mut m,
        &y,
        [8, 8, 3, 3],
        vec![
            ("pads", Attr::Ints(vec![1; 4])),
            ("strides", Attr::Ints(vec![2, 2])),
        ],
    );
    let y = m.node("Relu", &[&y], vec![]);
    let y = excite(&mut m, &y, true);
    let mean = m.weight(&[1, 8, 1, 1], 0.5);
    let y = m.node("Sub", &[&y, &mean], vec![]);
    let spread = m.float_init(&[8, 1, 1], (0..8).map(|i| 0.5 + 0.25 * i as f32).collect());
    let y = m.node("Div", &[&y, &spread], vec![]);
    let y = conv(&mut m, &y, [8, 8, 3, 3], pad1());
    let y = m.node("GlobalAveragePool", &[&y], vec![]);
    let y = m.node("Flatten", &[&y], vec![("axis", Attr::I(1))]);
    let wc = m.weight(&[5, 8], 0.5);
    let y = m.node("Gemm", &[&y, &wc], vec![("transB", Attr::I(1))]);
    m.output(&y);
    m.encode()
}

/// Squeeze-and-excitation over planes of any size in a batch (`--dim N=1..3 --dim
/// size=9..30`): every per-plane broadcast runs at the run's size and matches the
/// interpreter on the model imported at that shape.
#[test]
fn squeeze_and_excitation_runs_on_images_of_any_size() {
    let model = decode(&squeeze_excite_classifier(43));
    let mut opts = with_range("size", 9, 30);
    opts.ranges.insert(
        0,
        DimRange {
            name: "N".into(),
            min: 1,
            max: 3,
            site: DimSite::Param,
        },
    );
    let g = import(&model, &opts).unwrap();
    assert!(g.sample_loop.is_none() && g.symbols.len() == 2);
    let lib = Dynamic::new(g);
    for (k, s, seed) in [
        (1usize, 9usize, 1u64),
        (2, 10, 2),
        (3, 17, 3),
        (1, 30, 4),
        (2, 23, 5),
    ] {
        let reference = static_at_values(&model, &[("N", k), ("size", s)]);
        let inputs = inputs_for(&reference, seed);
        let expected = nnc::interp::run_graph(&reference, &inputs).unwrap();
        let dims = [k as i64, s as i64];
        let (status, got) = lib.run(Some(&dims), &inputs, None, &[vec![k, 5]]);
        assert_eq!(status, 0, "N={k} size={s}");
        assert_close(
            &expected,
            &got,
            &format!("N={k} size={s} vs the interpreter"),
        );
    }
}

/// A 1-D conv net over a signal of any length (`[1, 4, width]`): padded and strided
/// convs, a max pool and an average pool with pads counted, global max pooling.
fn signal_classifier(seed: u64) -> Vec<u8> {
    let mut m = ModelBuilder::new(seed);
    let x = m.input("signal", &[1, 4, 32]);
    symbolic(&mut m, &x, 2, "width");
    let w1 = m.weight(&[8, 4, 5], 0.4);
    let y = m.node("Conv", &[&x, &w1], vec![("pads", Attr::Ints(vec![2, 2]))]);
    let y = m.node("Relu", &[&y], vec![]);
    let y = m.node(
        "MaxPool",
        &[&y],
        vec![
            ("kernel_shape", Attr::Ints(vec![3])),
            ("strides", Attr::Ints(vec![2])),
            ("pads", Attr::Ints(vec![1, 1])),
        ],
    );
    let w2 = m.weight(&[8, 8, 3], 0.4);
    let b2 = m.weight(&[8], 0.1);
    let y = m.node(
        "Conv",
        &[&y, &w2, &b2],
        vec![
            ("strides", Attr::Ints(vec![2])),
            ("dilations", Attr::Ints(vec![2])),
        ],
    );
    let y = m.node(
        "AveragePool",
        &[&y],
        vec![
            ("kernel_shape", Attr::Ints(vec![3])),
            ("pads", Attr::Ints(vec![1, 1])),
            ("count_include_pad", Attr::I(1)),
        ],
    );
    let y = m.node("GlobalMaxPool", &[&y], vec![]);
    let y = m.node("Flatten", &[&y], vec![("axis", Attr::I(1))]);
    m.output(&y);
    m.encode()
}

/// A signal length dim on the one plane axis of 1-D convs and pools (the generic
/// patch gather and pool loops), every length matching the interpreter.
#[test]
fn a_signal_length_dim_runs_every_length_from_one_library() {
    let model = decode(&signal_classifier(43));
    let g = import(&model, &with_range("width", 9, 48)).unwrap();
    let lib = Dynamic::new(g);
    for (w, seed) in [(9usize, 1u64), (10, 2), (11, 3), (30, 4), (47, 5), (48, 6)] {
        let reference = static_at(&model, "width", w);
        let inputs = inputs_for(&reference, seed);
        let expected = nnc::interp::run_graph(&reference, &inputs).unwrap();
        let (status, got) = lib.run(Some(&[w as i64]), &inputs, None, &[vec![1, 8]]);
        assert_eq!(status, 0, "width={w}");
        assert_close(&expected, &got, &format!("width={w} vs the interpreter"));
    }
}

/// Cross-attention: `s` queries from `x` attend `t` keys and values from `memory`, with
/// an additive mask row per key.
fn cross_attention(seed: u64, d: usize, heads: usize, s: usize, t: usize) -> Vec<u8> {
    let mut m = ModelBuilder::new(seed);
    let x = m.input("x", &[1, s, d]);
    let memory = m.input("memory", &[1, t, d]);
    let pad = m.input("pad", &[1, t]);
    let axes = m.int_init(&[1, 2]);
    let pad = m.node("Unsqueeze", &[&pad, &axes], vec![]);
    let dh = d / heads;
    let split = m.int_init(&[0, 0, heads as i64, dh as i64]);
    let merge = m.int_init(&[0, 0, d as i64]);
    let proj = |m: &mut ModelBuilder, x: &str, perm: Vec<i64>| {
        let w = m.weight(&[d, d], 0.3);
        let y = m.node("MatMul", &[x, &w], vec![]);
        let y = m.node("Reshape", &[&y, &split], vec![]);
        m.node("Transpose", &[&y], vec![("perm", Attr::Ints(perm))])
    };
    let q = proj(&mut m, &x, vec![0, 2, 1, 3]);
    let k = proj(&mut m, &memory, vec![0, 2, 3, 1]);
    let v = proj(&mut m, &memory, vec![0, 2, 1, 3]);
    let scores = m.node("MatMul", &[&q, &k], vec![]);
    let c = m.float_init(&[], vec![1.0 / (dh as f32).sqrt()]);
    let scores = m.node("Mul", &[&scores, &c], vec![]);
    let scores = m.node("Add", &[&scores, &pad], vec![]);
    let p = m.node("Softmax", &[&scores], vec![("axis", Attr::I(-1))]);
    let o = m.node("MatMul", &[&p, &v], vec![]);
    let o = m.node(
        "Transpose",
        &[&o],
        vec![("perm", Attr::Ints(vec![0, 2, 1, 3]))],
    );
    let o = m.node("Reshape", &[&o, &merge], vec![]);
    m.output(&o);
    m.encode()
}

/// Fused statically, cross-attention with fewer or more queries than keys weighs every
/// key.
#[test]
fn static_cross_attention_with_unequal_lengths_matches_the_interpreter() {
    for (s, t, seed) in [(5usize, 37usize, 1u64), (40, 9, 2), (3, 64, 3)] {
        let model = decode(&cross_attention(seed, 32, 4, s, t));
        let reference = import(&model, &ImportOptions::default()).unwrap();
        let mut g = import_model(&model, None, &ImportOptions::default())
            .unwrap()
            .graph;
        nnc::passes::PassManager::default().run(&mut g).unwrap();
        assert!(
            (g.nodes.iter()).any(|n| matches!(n.op, nnc::ops::Op::Attention)),
            "s={s} t={t}: fused"
        );
        let inputs = inputs_for(&reference, seed);
        let expected = nnc::interp::run_graph(&reference, &inputs).unwrap();
        let got = runner::run_compiled(&g, &inputs, Target::host()).unwrap();
        assert_close(
            &expected,
            &got,
            &format!("static cross-attention s={s} t={t}"),
        );
    }
}

/// The model imported with each dim fixed at its value.
fn static_at_values(model: &ModelProto, values: &[(&str, usize)]) -> Graph {
    let mut opts = ImportOptions::default();
    for (param, value) in values {
        opts.dims.insert((*param).into(), *value);
    }
    import(model, &opts).unwrap()
}

/// A batch of sentences whose length varies too (`--dim batch=1..3 --dim seq=1..40`):
/// one sample's graph by rows, called per sample with each sample's rows as long as the
/// run's; dims numbered by first appearance (batch, then seq), every (batch, seq)
/// matching the interpreter at that shape, shapes reported and out-of-range values of
/// either dim writing nothing.
#[test]
fn a_batch_of_sequences_runs_from_one_library() {
    let model = decode(&sentence_encoder(32, 32, 4, 2, 40));
    let mut opts = with_range("seq", 1, 40);
    opts.ranges.insert(
        0,
        DimRange {
            name: "batch".into(),
            min: 1,
            max: 3,
            site: DimSite::Param,
        },
    );
    let g = import(&model, &opts).unwrap();
    let names: Vec<&str> = g.dims.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["batch", "seq"]);
    assert!(g.sample_loop.is_none() && g.symbols.len() == 2);
    let lib = Dynamic::new(g);
    for (k, s, seed) in [
        (1usize, 1usize, 1u64),
        (2, 7, 2),
        (3, 17, 3),
        (2, 40, 4),
        (3, 33, 5),
    ] {
        let reference = static_at_values(&model, &[("batch", k), ("seq", s)]);
        let inputs = inputs_for(&reference, seed);
        let expected = nnc::interp::run_graph(&reference, &inputs).unwrap();
        let dims = [k as i64, s as i64];
        let (status, shapes) = lib.shapes(Some(&dims));
        assert_eq!(status, 0);
        assert_eq!(
            shapes,
            vec![vec![k, s], vec![k, s], vec![k, s, 32], vec![k, 32]]
        );
        let shapes = shapes[2..].to_vec();
        let (status, got) = lib.run(Some(&dims), &inputs, None, &shapes);
        assert_eq!(status, 0, "batch={k} seq={s}");
        assert_close(
            &expected,
            &got,
            &format!("batch={k} seq={s} vs the interpreter"),
        );
        let instance = nnc::ops::instantiate::instantiate(&lib.graph, &dims).unwrap();
        let interp = nnc::interp::run_graph(&instance, &inputs).unwrap();
        assert_close(
            &expected,
            &interp,
            &format!("batch={k} seq={s}: interpreter"),
        );
    }
    // NULL dims and `infer` run both maxima.
    let reference = static_at_values(&model, &[("batch", 3), ("seq", 40)]);
    let inputs = inputs_for(&reference, 12);
    let expected = nnc::interp::run_graph(&reference, &inputs).unwrap();
    let (status, at_max) = lib.run(None, &inputs, None, &[vec![3, 40, 32], vec![3, 32]]);
    assert_eq!(status, 0);
    assert_close(&expected, &at_max, "NULL dims: batch=3 seq=40");
    let infer = lib.compiled.run(&reference, &inputs).unwrap();
    assert_eq!(infer, at_max, "infer runs both maxima");
    let reference = static_at_values(&model, &[("batch", 2), ("seq", 5)]);
    let inputs = inputs_for(&reference, 9);
    let shapes = vec![vec![2, 5, 32], vec![2, 32]];
    for bad in [[0i64, 5], [4, 5], [2, 0], [2, 41]] {
        let (status, outputs) = lib.run(Some(&bad), &inputs, None, &shapes);
        assert_eq!(status, NNC_ERR_DIM_OUT_OF_RANGE, "dims {bad:?}");
        assert!(
            outputs
                .iter()
                .all(|o| o.to_le_bytes().iter().all(|&b| b == SENTINEL)),
            "dims {bad:?} wrote"
        );
    }
}

/// A GPT-style decoder over `seq` tokens (`max_len` positions): token and position
/// embeddings, `layers` pre-LayerNorm blocks of causal multi-head self-attention and a
/// ReLU MLP with residuals, a final LayerNorm and logits over the vocabulary. The
/// causal mask is a constant `[1, 1, max_len, max_len]` sliced to the sequence by
/// `Shape`, as exports write it: a boolean `Where(mask, scores, -1e9)` in even layers,
/// an additive `0 / -1e9` mask in odd ones.
fn decoder(seed: u64, d: usize, heads: usize, layers: usize, max_len: usize) -> Vec<u8> {
    let mut m = ModelBuilder::new(seed);
    let vocab = 50;
    let ids = m.typed_input("ids", 7, &[1, 1]);
    symbolic(&mut m, &ids, 1, "seq");
    let table = m.weight(&[vocab, d], 1.0);
    let x = m.node("Gather", &[&table, &ids], vec![("axis", Attr::I(0))]);
    let shape = m.node("Shape", &[&ids], vec![]);
    let one = m.int_init(&[1]);
    let len = m.node("Gather", &[&shape, &one], vec![("axis", Attr::I(0))]);
    let (zero, axis0) = (m.int_init(&[0]), m.int_init(&[0]));
    let pos_table = m.weight(&[max_len, d], 0.5);
    let pos = m.node("Slice", &[&pos_table, &zero, &len, &axis0], vec![]);
    let mut x = m.node("Add", &[&x, &pos], vec![]);
    let below = |i: usize, j: usize| j <= i;
    let tril: Vec<f32> = (0..max_len * max_len)
        .map(|k| f32::from(u8::from(below(k / max_len, k % max_len))))
        .collect();
    let tril = m.float_init(&[1, 1, max_len, max_len], tril);
    let tril = m.node("Cast", &[&tril], vec![("to", Attr::I(9))]);
    let additive: Vec<f32> = (0..max_len * max_len)
        .map(|k| {
            if below(k / max_len, k % max_len) {
                0.0
            } else {
                -1e9
            }
        })
        .collect();
    let additive = m.float_init(&[1, 1, max_len, max_len], additive);
    let (starts, axes) = (m.int_init(&[0, 0]), m.int_init(&[2, 3]));
    let ends = m.node("Concat", &[&len, &len], vec![("axis", Attr::I(0))]);
    let tril = m.node("Slice", &[&tril, &starts, &ends, &axes], vec![]);
    let additive = m.node("Slice", &[&additive, &starts, &ends, &axes], vec![]);
    let fill = m.float_init(&[], vec![-1e9]);
    let dh = d / heads;
    let split = m.int_init(&[0, 0, heads as i64, dh as i64]);
    let merge = m.int_init(&[0, 0, d as i64]);
    let layer_norm = |m: &mut ModelBuilder, x: &str| {
        let (g, b) = (m.weight(&[d], 1.0), m.weight(&[d], 0.1));
        m.node(
            "LayerNormalization",
            &[x, &g, &b],
            vec![("axis", Attr::I(-1))],
        )
    };
    for layer in 0..layers {
        let h = layer_norm(&mut m, &x);
        let proj = |m: &mut ModelBuilder, perm: Vec<i64>| {
            let (w, b) = (m.weight(&[d, d], 0.3), m.weight(&[d], 0.1));
            let y = m.node("MatMul", &[&h, &w], vec![]);
            let y = m.node("Add", &[&y, &b], vec![]);
            let y = m.node("Reshape", &[&y, &split], vec![]);
            m.node("Transpose", &[&y], vec![("perm", Attr::Ints(perm))])
        };
        let q = proj(&mut m, vec![0, 2, 1, 3]);
        let k = proj(&mut m, vec![0, 2, 3, 1]);
        let v = proj(&mut m, vec![0, 2, 1, 3]);
        let s = m.node("MatMul", &[&q, &k], vec![]);
        let c = m.float_init(&[], vec![(dh as f32).sqrt()]);
        let s = m.node("Div", &[&s, &c], vec![]);
        let s = if layer % 2 == 0 {
            m.node("Where", &[&tril, &s, &fill], vec![])
        } else {
            m.node("Add", &[&s, &additive], vec![])
        };
        let p = m.node("Softmax", &[&s], vec![("axis", Attr::I(-1))]);
        let o = m.node("MatMul", &[&p, &v], vec![]);
        let o = m.node(
            "Transpose",
            &[&o],
            vec![("perm", Attr::Ints(vec![0, 2, 1, 3]))],
        );
        let o = m.node("Reshape", &[&o, &merge], vec![]);
        let (wo, bo) = (m.weight(&[d, d], 0.3), m.weight(&[d], 0.1));
        let o = m.node("MatMul", &[&o, &wo], vec![]);
        let o = m.node("Add", &[&o, &bo], vec![]);
        x = m.node("Add", &[&x, &o], vec![]);
        let h = layer_norm(&mut m, &x);
        let (w1, b1) = (m.weight(&[d, 2 * d], 0.3), m.weight(&[2 * d], 0.1));
        let f = m.node("MatMul", &[&h, &w1], vec![]);
        let f = m.node("Add", &[&f, &b1], vec![]);
        let f = m.node("Relu", &[&f], vec![]);
        let (w2, b2) = (m.weight(&[2 * d, d], 0.3), m.weight(&[d], 0.1));
        let f = m.node("MatMul", &[&f, &w2], vec![]);
        let f = m.node("Add", &[&f, &b2], vec![]);
        x = m.node("Add", &[&x, &f], vec![]);
    }
    let h = layer_norm(&mut m, &x);
    let head = m.weight(&[d, vocab], 0.3);
    let logits = m.node("MatMul", &[&h, &head], vec![]);
    m.output(&logits);
    m.encode()
}

/// A decoder's causal attention across a sequence dim: the constant mask sliced to
/// the sequence is recognized (boolean and additive forms), each query attends to the
/// keys up to it in every key bucket, at lengths at, below and above the buckets.
#[test]
fn causal_attention_across_a_sequence_dim_runs_from_one_library() {
    let model = decode(&decoder(33, 32, 4, 2, 40));
    let g = import(&model, &with_range("seq", 1, 40)).unwrap();
    assert_eq!((g.sample_loop.is_none(), g.symbols.len()), (true, 1));
    let lib = Dynamic::new(g);
    for (s, seed) in [
        (1usize, 1u64),
        (2, 2),
        (7, 3),
        (16, 4),
        (17, 5),
        (32, 6),
        (33, 7),
        (40, 8),
    ] {
        let reference = static_at(&model, "seq", s);
        let inputs = inputs_for(&reference, seed);
        let expected = nnc::interp::run_graph(&reference, &inputs).unwrap();
        let shapes = lib.output_shapes(s as i64);
        assert_eq!(shapes, vec![vec![1, s, 50]]);
        let (status, got) = lib.run(Some(&[s as i64]), &inputs, None, &shapes);
        assert_eq!(status, 0, "seq={s}");
        assert_close(&expected, &got, &format!("seq={s} vs the interpreter"));
        let instance = nnc::ops::instantiate::instantiate(&lib.graph, &[s as i64]).unwrap();
        let interp = nnc::interp::run_graph(&instance, &inputs).unwrap();
        assert_close(
            &expected,
            &interp,
            &format!("seq={s}: the graph there, interpreted"),
        );
    }
}

/// Runs `model` on `inputs` (raw little-endian files written here) with onnxruntime:
/// every output, or `None` when python3 with onnx and onnxruntime is missing (reported
/// by [`tools::skip`]).
fn onnxruntime_outputs(
    dir: &std::path::Path,
    model: &std::path::Path,
    inputs: &[(&str, &Tensor)],
) -> Option<Vec<Tensor>> {
    let mut args = vec![model.to_string_lossy().to_string()];
    for (k, (name, t)) in inputs.iter().enumerate() {
        let path = dir.join(format!("in{k}.bin"));
        std::fs::write(&path, t.to_le_bytes()).unwrap();
        let shape: Vec<String> = t.shape().iter().map(|d| d.to_string()).collect();
        args.push(format!("{name}={}:{}", path.display(), shape.join(",")));
    }
    const SCRIPT: &str = r#"
import sys, numpy as np, onnxruntime as ort
so = ort.SessionOptions(); so.intra_op_num_threads = 1
sess = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
types = {i.name: i.type for i in sess.get_inputs()}
feeds = {}
for arg in sys.argv[2:]:
    name, rest = arg.split("=", 1)
    path, shape = rest.rsplit(":", 1)
    dt = np.int64 if types[name] == "tensor(int64)" else np.float32
    feeds[name] = np.fromfile(path, dt).reshape([int(d) for d in shape.split(",")])
for k, y in enumerate(sess.run(None, feeds)):
    y = np.ascontiguousarray(y, np.float32)
    y.tofile(sys.argv[1] + f".out{k}")
    print(",".join(str(d) for d in y.shape))
"#;
    let probe = std::process::Command::new("python3")
        .args(["-c", "import onnx, onnxruntime, numpy"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        tools::skip("python3 with onnx, onnxruntime and numpy is needed to compare with onnxruntime (pip install onnx onnxruntime numpy)");
        return None;
    }
    let out = tools::run(
        std::process::Command::new("python3")
            .arg("-c")
            .arg(SCRIPT)
            .args(&args),
    );
    let shapes = String::from_utf8(out.stdout).unwrap();
    Some(
        shapes
            .lines()
            .enumerate()
            .map(|(k, line)| {
                let shape: Vec<usize> = line
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|d| d.parse().unwrap())
                    .collect();
                let bytes = std::fs::read(format!("{}.out{k}", model.display())).unwrap();
                let ty = nnc::ir::TensorType::new(nnc::ir::DType::F32, shape);
                Tensor::from_le_bytes(&ty, &bytes).unwrap()
            })
            .collect(),
    )
}

/// Writes `benches/{script}` `args` to `dir/name.onnx`, or `None` (skipped) without
/// python3 and onnx.
fn exported(
    dir: &std::path::Path,
    script: &str,
    name: &str,
    args: &[&str],
) -> Option<std::path::PathBuf> {
    let probe = std::process::Command::new("python3")
        .args(["-c", "import onnx, numpy"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        tools::skip("python3 with onnx and numpy is needed to write the exported models (pip install onnx numpy)");
        return None;
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap();
    let path = dir.join(format!("{name}.onnx"));
    tools::run(
        std::process::Command::new("python3")
            .arg(root.join("benches").join(script))
            .arg(&path)
            .args(args),
    );
    Some(path)
}

/// Token inputs for an exported model at `shape`: ids below the vocabulary, a padding
/// mask of mostly 1 with the last token of odd samples masked.
fn token_inputs(names: &[&str], shape: [usize; 2], seed: u64) -> Vec<Tensor> {
    let mut rng = models::Rng::new(seed);
    let n = shape[0] * shape[1];
    names
        .iter()
        .map(|name| match *name {
            "attention_mask" => Tensor::from_vec(
                &shape,
                (0..n)
                    .map(|i| {
                        i64::from(
                            !(i % shape[1] == shape[1] - 1
                                && (i / shape[1]) % 2 == 1
                                && shape[1] > 1),
                        )
                    })
                    .collect(),
            ),
            _ => Tensor::from_vec(&shape, (0..n).map(|_| rng.below(1000) as i64).collect()),
        })
        .collect()
}

/// A model file, the ranges it is compiled with and the `[batch, seq]` shapes it runs.
type ExportCase<'a> = (&'a std::path::Path, Vec<DimRange>, Vec<[usize; 2]>);

/// Issue 22's measured models, small: a BERT-style encoder exported with dynamic batch
/// and sequence axes compiled once with `batch=1..8, seq=1..512`, and a GPT-style
/// decoder with a dynamic sequence compiled with `seq=1..512`, each matching
/// onnxruntime (rtol 1e-3, atol 1e-4) at the measured shapes.
#[test]
fn exported_encoder_and_decoder_with_dynamic_axes_match_onnxruntime() {
    let dir = tempfile::tempdir().unwrap();
    let small = ["--layers", "2", "--d", "64", "--heads", "4", "--ffn", "128"];
    let Some(bert) = exported(dir.path(), "bert_model.py", "bert", &small) else {
        return;
    };
    let Some(gpt) = exported(dir.path(), "gpt_model.py", "gpt", &small) else {
        return;
    };
    let range = |name: &str, max: usize| DimRange {
        name: name.into(),
        min: 1,
        max,
        site: DimSite::Param,
    };
    let cases: [ExportCase; 2] = [
        (
            &bert,
            vec![range("batch", 8), range("seq", 512)],
            vec![[1, 1], [1, 7], [2, 64], [8, 129], [1, 512]],
        ),
        (
            &gpt,
            vec![range("seq", 512)],
            vec![[1, 1], [1, 7], [1, 64], [1, 129], [1, 512]],
        ),
    ];
    for (path, ranges, shapes) in cases {
        let model = decode(&std::fs::read(path).unwrap());
        let opts = ImportOptions {
            ranges,
            ..Default::default()
        };
        let g = import(&model, &opts).unwrap();
        let names: Vec<String> = g.inputs.iter().map(|v| g.value(*v).name.clone()).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let lib = Dynamic::new(g);
        for (k, shape) in shapes.into_iter().enumerate() {
            let inputs = token_inputs(&names, shape, k as u64);
            let feeds: Vec<(&str, &Tensor)> = names.iter().copied().zip(&inputs).collect();
            let Some(expected) = onnxruntime_outputs(dir.path(), path, &feeds) else {
                return;
            };
            let dims: Vec<i64> = match opts.ranges.len() {
                2 => vec![shape[0] as i64, shape[1] as i64],
                _ => vec![shape[1] as i64],
            };
            let (status, all) = lib.shapes(Some(&dims));
            assert_eq!(status, 0);
            let out_shapes = all[names.len()..].to_vec();
            let (status, got) = lib.run(Some(&dims), &inputs, None, &out_shapes);
            assert_eq!(status, 0, "{}: {shape:?}", path.display());
            for (e, g) in expected.iter().zip(&got) {
                assert_eq!(e.shape(), g.shape(), "{}: {shape:?}", path.display());
                let (e, g) = (e.to_f64_vec(), g.to_f64_vec());
                for (a, b) in e.iter().zip(&g) {
                    assert!(
                        (a - b).abs() <= 1e-4 + 1e-3 * a.abs(),
                        "{} at {shape:?}: onnxruntime {a}, nnc {b}",
                        path.display()
                    );
                }
            }
        }
    }
}
