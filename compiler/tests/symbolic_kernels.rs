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

#[test]
fn run_time_lengths_on_every_kernel_family() {
    let model = decode(&attention_like());
    let opts = with_range("size", 1, 80);
    let graph = import_symbolic(&model, None, &opts).unwrap().graph;
    assert!(!graph.symbols.is_empty());
    for (family, target) in host_and_lower_families() {
        let lib = Dynamic::for_target(graph.clone(), target, KernelOptions::default());
        for (i, &n) in [1usize, 3, 7, 8, 15, 16, 17, 31, 33, 64, 80]
            .iter()
            .enumerate()
        {
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
