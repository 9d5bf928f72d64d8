//! The machine-code kernels symbolic nodes call with extents the run gives, on every
//! x86-64 family the host runs (AVX-512, AVX2, Cranelift's baseline): attention-like
//! scores `X·Xᵀ` (a fixed K, rows and columns the run's), their softmax over rows of a
//! run-time length, and the weighted sum `P·X` (a run-time K), at lengths around the
//! vector widths and their tails. Each is compared with the interpreter on the model
//! imported statically at that length.

#[path = "common/dynamic.rs"]
mod dynamic;
#[path = "common/models.rs"]
mod models;
#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use dynamic::*;
use models::{Attr, ModelBuilder};
use nnc::codegen::options::KernelOptions;
use nnc::onnx::import_symbolic;

/// `softmax(X·Xᵀ) · X` over `X [seq, 12]`, and a LayerNorm of the result.
fn attention_like() -> Vec<u8> {
    let mut m = ModelBuilder::new(7);
    let x = m.input("x", &[1, 12]);
    symbolic(&mut m, &x, 0, "size");
    let xt = m.node("Transpose", &[&x], vec![("perm", Attr::Ints(vec![1, 0]))]);
    let s = m.node("MatMul", &[&x, &xt], vec![]);
    let p = m.node("Softmax", &[&s], vec![("axis", Attr::I(-1))]);
    let o = m.node("MatMul", &[&p, &x], vec![]);
    let g = m.weight(&[12], 1.0);
    let b = m.weight(&[12], 0.5);
    let y = m.node(
        "LayerNormalization",
        &[&o, &g, &b],
        vec![("axis", Attr::I(-1))],
    );
    m.output(&y);
    m.encode()
}

/// `model` compiled once over `size` in `1..=max` for every kernel family, run at each
/// of `values` against the interpreter on the model imported at that size.
fn check_every_family(model: &[u8], (min, max): (usize, usize), values: &[usize]) {
    let model = decode(model);
    let graph = import_symbolic(&model, None, &with_range("size", min, max))
        .unwrap()
        .graph;
    assert!(!graph.symbols.is_empty());
    for (family, target) in host_and_lower_families() {
        let lib = Dynamic::for_target(graph.clone(), target, KernelOptions::default());
        for (i, &n) in values.iter().enumerate() {
            let reference = static_at(&model, "size", n);
            let inputs = inputs_for(&reference, 11 + i as u64);
            let expected = nnc::interp::run_graph(&reference, &inputs).unwrap();
            let (status, shapes) = lib.shapes(Some(&[n as i64]));
            assert_eq!(status, 0);
            let (status, got) = lib.run(Some(&[n as i64]), &inputs, None, &shapes[1..]);
            assert_eq!(status, 0, "{family} at {n}");
            assert_close(&expected, &got, &format!("{family} at {n}"));
        }
    }
}

#[test]
fn run_time_lengths_on_every_kernel_family() {
    let lengths = [1, 3, 7, 8, 15, 16, 17, 31, 33, 64, 80];
    check_every_family(&attention_like(), (1, 80), &lengths);
}

/// A small CNN over `[1, 3, size, size]`: 3×3 conv (Winograd or patches), max pool, a
/// pointwise conv, a strided conv and a global average pool.
fn small_cnn() -> Vec<u8> {
    let mut m = ModelBuilder::new(3);
    let x = m.input("x", &[1, 3, 8, 8]);
    symbolic(&mut m, &x, 2, "size");
    symbolic(&mut m, &x, 3, "size");
    let w1 = m.weight(&[8, 3, 3, 3], 0.5);
    let b1 = m.weight(&[8], 0.1);
    let c = m.node(
        "Conv",
        &[&x, &w1, &b1],
        vec![("pads", Attr::Ints(vec![1, 1, 1, 1]))],
    );
    let r = m.node("Relu", &[&c], vec![]);
    let p = m.node(
        "MaxPool",
        &[&r],
        vec![
            ("kernel_shape", Attr::Ints(vec![2, 2])),
            ("strides", Attr::Ints(vec![2, 2])),
        ],
    );
    let w2 = m.weight(&[16, 8, 1, 1], 0.5);
    let c2 = m.node("Conv", &[&p, &w2], vec![]);
    let w3 = m.weight(&[16, 16, 3, 3], 0.3);
    let c3 = m.node(
        "Conv",
        &[&c2, &w3],
        vec![
            ("pads", Attr::Ints(vec![1, 1, 1, 1])),
            ("strides", Attr::Ints(vec![2, 2])),
        ],
    );
    let g = m.node("GlobalAveragePool", &[&c3], vec![]);
    m.output(&g);
    m.encode()
}

#[test]
fn convs_and_pools_over_run_time_planes_on_every_kernel_family() {
    check_every_family(&small_cnn(), (2, 40), &[2, 3, 9, 16, 23, 40]);
}

/// Max pools over `[1, 4, size, size]` side by side, their outputs concatenated:
/// ResNet's 3×3/2 with pads, 2×2/2 with ceil mode, 3×3/1 with pads, a dilated 2×3/1
/// and a 5-row window: widths around the vector widths and windows reaching past the
/// plane on every side.
fn max_pools() -> Vec<u8> {
    let mut m = ModelBuilder::new(5);
    let x = m.input("x", &[1, 4, 8, 8]);
    symbolic(&mut m, &x, 2, "size");
    symbolic(&mut m, &x, 3, "size");
    // Kernel, strides, pads, dilations, ceil mode.
    type Pool<'a> = (&'a [i64], &'a [i64], &'a [i64], &'a [i64], i64);
    let pools: [Pool; 5] = [
        (&[3, 3], &[2, 2], &[1, 1, 1, 1], &[1, 1], 0),
        (&[2, 2], &[2, 2], &[0, 0, 0, 0], &[1, 1], 1),
        (&[3, 3], &[1, 1], &[1, 1, 1, 1], &[1, 1], 0),
        (&[2, 3], &[1, 1], &[1, 2, 0, 1], &[2, 2], 0),
        (&[5, 2], &[3, 1], &[2, 0, 2, 1], &[1, 1], 0),
    ];
    for (k, s, p, d, ceil) in pools {
        let y = m.node(
            "MaxPool",
            &[&x],
            vec![
                ("kernel_shape", Attr::Ints(k.to_vec())),
                ("strides", Attr::Ints(s.to_vec())),
                ("pads", Attr::Ints(p.to_vec())),
                ("dilations", Attr::Ints(d.to_vec())),
                ("ceil_mode", Attr::I(ceil)),
            ],
        );
        m.output(&y);
    }
    m.encode()
}

#[test]
fn max_pools_over_run_time_planes_on_every_kernel_family() {
    check_every_family(&max_pools(), (2, 70), &[2, 5, 16, 17, 33, 70]);
}

/// Global average pools and a mean over the last axis of `[1, 6, size, size]`: runs of
/// 1 to 4900 floats, through the vector blocks, quads and last floats of each.
fn plane_means() -> Vec<u8> {
    let mut m = ModelBuilder::new(9);
    let x = m.input("x", &[1, 6, 8, 8]);
    symbolic(&mut m, &x, 2, "size");
    symbolic(&mut m, &x, 3, "size");
    let g = m.node("GlobalAveragePool", &[&x], vec![]);
    m.output(&g);
    let r = m.node(
        "ReduceMean",
        &[&x],
        vec![("axes", Attr::Ints(vec![3])), ("keepdims", Attr::I(0))],
    );
    m.output(&r);
    m.encode()
}

#[test]
fn means_over_run_time_planes_on_every_kernel_family() {
    check_every_family(&plane_means(), (1, 70), &[1, 2, 3, 5, 17, 33, 70]);
}

/// Resizes of `[1, 3, size, size]` to sizes the run computes from its extents (and to
/// fixed sizes): linear up by 2 and 3 (half_pixel), nearest down by 2
/// (round_prefer_floor, asymmetric), linear to 5×7 (align_corners), nearest to 3 more
/// rows and 1 more column (floor, pytorch_half_pixel), linear half_pixel_symmetric up
/// by 3 and 2 with round_prefer_ceil.
fn resizes_to_run_time_sizes() -> Vec<u8> {
    let mut m = ModelBuilder::new(13);
    let x = m.input("x", &[1, 3, 8, 8]);
    symbolic(&mut m, &x, 2, "size");
    symbolic(&mut m, &x, 3, "size");
    let shape = m.node("Shape", &[&x], vec![]);
    let empty = m.float_init(&[0], vec![]);
    let resize = |m: &mut ModelBuilder,
                  sizes: &str,
                  mode: &'static str,
                  transform: &'static str,
                  nearest: &'static str| {
        let y = m.node(
            "Resize",
            &[&x, "", &empty, sizes],
            vec![
                ("mode", Attr::S(mode)),
                ("coordinate_transformation_mode", Attr::S(transform)),
                ("nearest_mode", Attr::S(nearest)),
            ],
        );
        m.output(&y);
    };
    let factors = m.int_init(&[1, 1, 2, 3]);
    let up = m.node("Mul", &[&shape, &factors], vec![]);
    resize(&mut m, &up, "linear", "half_pixel", "round_prefer_floor");
    let halves = m.int_init(&[1, 1, 2, 2]);
    let down = m.node("Div", &[&shape, &halves], vec![]);
    resize(&mut m, &down, "nearest", "asymmetric", "round_prefer_floor");
    let fixed = m.int_init(&[1, 3, 5, 7]);
    resize(&mut m, &fixed, "linear", "align_corners", "floor");
    let more = m.int_init(&[0, 0, 3, 1]);
    let grown = m.node("Add", &[&shape, &more], vec![]);
    resize(&mut m, &grown, "nearest", "pytorch_half_pixel", "floor");
    let factors = m.int_init(&[1, 1, 3, 2]);
    let up = m.node("Mul", &[&shape, &factors], vec![]);
    resize(
        &mut m,
        &up,
        "linear",
        "half_pixel_symmetric",
        "round_prefer_ceil",
    );
    m.encode()
}

#[test]
fn resizes_to_run_time_sizes_on_every_kernel_family() {
    check_every_family(&resizes_to_run_time_sizes(), (2, 40), &[2, 3, 5, 8, 17, 40]);
}

/// The models compiled over symbolic shapes for aarch64 and run under qemu (through
/// `infer`, every dim at its maximum), against the interpreter at the maximum.
#[test]
fn symbolic_libraries_on_aarch64_under_qemu() {
    let Some(harness) = runner::aarch64_harness() else {
        return;
    };
    for (name, bytes, max) in [
        ("attention", attention_like(), 80),
        ("cnn", small_cnn(), 40),
        ("resize", resizes_to_run_time_sizes(), 40),
    ] {
        let model = decode(&bytes);
        let graph = import_symbolic(&model, None, &with_range("size", 2, max))
            .unwrap()
            .graph;
        let reference = static_at(&model, "size", max);
        let inputs = inputs_for(&reference, 9);
        let expected = nnc::interp::run_graph(&reference, &inputs).unwrap();
        let got = runner::run_on_aarch64(harness, &graph, &inputs, None)
            .unwrap_or_else(|e| panic!("{name} on aarch64: {e}"));
        assert_close(&expected, &got, &format!("{name} on aarch64"));
    }
}
