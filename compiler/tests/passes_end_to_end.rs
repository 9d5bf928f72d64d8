//! The graph passes end to end: small ONNX models exercising each fusion are imported,
//! optimized by the default pipeline, compiled, run, and compared with the reference
//! interpreter run on the *unoptimized* graph; each test also checks that the fusion
//! it is about happened (the optimized graph's node count and activations).
//! Compiled for the host and for baseline x86-64 (no FMA), where that is the host.

#[path = "common/graphs.rs"]
mod graphs;
#[path = "common/models.rs"]
mod models;
#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use graphs::{Rng, Scale};
use models::{Attr, ModelBuilder};
use nnc::codegen::{Arch, Target};
use nnc::interp::run_graph;
use nnc::ir::{Graph, Tensor};
use nnc::onnx::proto::ModelProto;
use nnc::onnx::{import_model, ImportOptions};
use nnc::ops::{Activation, Op};
use prost::Message;

fn targets() -> Vec<Target> {
    let mut t = vec![Target::host()];
    if Arch::host() == Arch::X86_64 {
        t.push(Target::new(Arch::X86_64, Some("baseline")).expect("baseline target"));
        // The AVX2 machine-code kernels (the host, when it has AVX-512, runs those).
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            t.push(Target::new(Arch::X86_64, Some("x86-64-v3")).expect("x86-64-v3 target"));
        }
    }
    t
}

fn import(bytes: &[u8]) -> Graph {
    let model = ModelProto::decode(bytes).expect("a model");
    import_model(&model, None, &ImportOptions::default())
        .expect("imports")
        .graph
}

/// Optimizes, compiles and runs `m`, compares with the interpreter on the original
/// graph, and returns the optimized graph.
fn check(m: ModelBuilder, seed: u64) -> Graph {
    check_bytes(&m.encode(), seed)
}

/// [`check`] of an encoded model.
fn check_bytes(bytes: &[u8], seed: u64) -> Graph {
    let plain = import(bytes);
    let mut fused = plain.clone();
    nnc::passes::optimize(&mut fused).expect("passes run");
    let mut rng = Rng::new(seed);
    let inputs: Vec<Tensor> = plain
        .inputs
        .iter()
        .map(|v| {
            let shape = plain.ty(*v).shape.clone();
            let n = shape.iter().product();
            Tensor::from_vec(&shape, rng.f32s(n, 2.0))
        })
        .collect();
    let want = run_graph(&plain, &inputs).expect("interpreter runs");
    let interp_fused = run_graph(&fused, &inputs).expect("interpreter runs the fused graph");
    compare(&want, &interp_fused, "interpreter on the fused graph");
    for target in targets() {
        let got = runner::run_compiled(&fused, &inputs, target.clone())
            .unwrap_or_else(|e| panic!("{}: {e}\n{fused}", target.cpu));
        compare(&want, &got, &target.cpu);
    }
    fused
}

fn compare(want: &[Tensor], got: &[Tensor], what: &str) {
    assert_eq!(want.len(), got.len());
    for (i, (a, b)) in want.iter().zip(got).enumerate() {
        if let Err(e) = graphs::compare(b, a, 1e-4, Scale::Whole) {
            panic!("{what}: output {i}: {e}");
        }
    }
}

fn activations(g: &Graph) -> Vec<Activation> {
    g.nodes
        .iter()
        .filter(|n| matches!(n.op, Op::Conv(_) | Op::Gemm(_) | Op::MatMul(_)))
        .map(|n| n.op.activation())
        .collect()
}

fn residuals(g: &Graph) -> usize {
    g.nodes
        .iter()
        .filter(|n| n.inputs.get(3).copied().flatten().is_some())
        .count()
}

/// `BatchNormalization` after `x` with `c` channels (variance kept positive).
fn batch_norm(m: &mut ModelBuilder, x: &str, c: usize) -> String {
    let scale = m.weight(&[c], 1.0);
    let bias = m.weight(&[c], 1.0);
    let mean = m.weight(&[c], 0.5);
    let var: Vec<f32> = (0..c).map(|i| 0.5 + 0.1 * i as f32).collect();
    let var = m.float_init(&[c], var);
    m.node(
        "BatchNormalization",
        &[x, &scale, &bias, &mean, &var],
        vec![],
    )
}

fn conv(m: &mut ModelBuilder, x: &str, cin: usize, cout: usize, k: usize, group: usize) -> String {
    let w = m.weight(&[cout, cin / group, k, k], 0.3);
    let p = (k / 2) as i64;
    m.node(
        "Conv",
        &[x, &w],
        vec![
            ("pads", Attr::Ints(vec![p, p, p, p])),
            ("group", Attr::I(group as i64)),
        ],
    )
}

#[test]
fn conv_bn_relu() {
    // im2col, pointwise and depthwise paths, each Conv → BN → activation.
    let mut m = ModelBuilder::new(1);
    let x = m.input("x", &[1, 3, 9, 9]);
    let c = conv(&mut m, &x, 3, 8, 3, 1);
    let b = batch_norm(&mut m, &c, 8);
    let r = m.node("Relu", &[&b], vec![]);
    let c = conv(&mut m, &r, 8, 8, 3, 8);
    let b = batch_norm(&mut m, &c, 8);
    let (lo, hi) = (m.float_init(&[], vec![0.0]), m.float_init(&[], vec![6.0]));
    let r = m.node("Clip", &[&b, &lo, &hi], vec![]);
    let c = conv(&mut m, &r, 8, 12, 1, 1);
    let b = batch_norm(&mut m, &c, 12);
    let y = m.node("HardSwish", &[&b], vec![]);
    m.output(&y);
    let g = check(m, 11);
    assert_eq!(g.nodes.len(), 3, "{g}");
    assert_eq!(
        activations(&g),
        [
            Activation::Relu,
            Activation::Clip { min: 0.0, max: 6.0 },
            Activation::HardSwish
        ]
    );
}

#[test]
fn conv_add_relu_residual() {
    // A ResNet basic block; K = 48·9 = 432 splits the GEMM into K blocks, so the
    // activation must wait for the last one. The depthwise block applies its fused
    // residual and activation after the convolution.
    let mut m = ModelBuilder::new(2);
    let x = m.input("x", &[1, 48, 7, 7]);
    let c = conv(&mut m, &x, 48, 48, 3, 1);
    let b = batch_norm(&mut m, &c, 48);
    let r = m.node("Relu", &[&b], vec![]);
    let c = conv(&mut m, &r, 48, 48, 3, 1);
    let b = batch_norm(&mut m, &c, 48);
    let s = m.node("Add", &[&x, &b], vec![]);
    let y = m.node("Relu", &[&s], vec![]);
    let d = conv(&mut m, &y, 48, 48, 3, 48);
    let s = m.node("Add", &[&d, &y], vec![]);
    let z = m.node("Sigmoid", &[&s], vec![]);
    let p = conv(&mut m, &z, 48, 16, 1, 1);
    let s = m.node("Add", &[&p, &p], vec![]);
    m.output(&s);
    let g = check(m, 12);
    assert_eq!(residuals(&g), 2, "{g}");
    assert_eq!(
        activations(&g),
        [
            Activation::Relu,
            Activation::Relu,
            Activation::Sigmoid,
            Activation::None
        ],
        "{g}"
    );
}

#[test]
fn conv_residual_on_wide_rows() {
    // Output rows of 26 take the x86 implicit-GEMM conv path, whose copy out of the
    // wide output adds the residual and then applies the activation (Relu, then one
    // the machine-code epilogue lacks).
    let mut m = ModelBuilder::new(5);
    let x = m.input("x", &[1, 16, 6, 26]);
    let c = conv(&mut m, &x, 16, 16, 3, 1);
    let b = batch_norm(&mut m, &c, 16);
    let s = m.node("Add", &[&b, &x], vec![]);
    let y = m.node("Relu", &[&s], vec![]);
    let c = conv(&mut m, &y, 16, 16, 3, 1);
    let s = m.node("Add", &[&y, &c], vec![]);
    let z = m.node("Sigmoid", &[&s], vec![]);
    m.output(&z);
    let g = check(m, 13);
    assert_eq!(residuals(&g), 2, "{g}");
    assert_eq!(
        activations(&g),
        [Activation::Relu, Activation::Sigmoid],
        "{g}"
    );
}

#[test]
fn matmul_bias_gelu_residual() {
    // A transformer MLP: MatMul + Add(bias first) + erf-GELU (Div form, 0.5 last),
    // MatMul + bias + residual; then Mul-by-0.7071 GELU (0.5 first) after a Gemm.
    let mut m = ModelBuilder::new(3);
    let x = m.input("x", &[1, 13, 24]);
    let w1 = m.weight(&[24, 40], 0.3);
    let b1 = m.weight(&[40], 0.5);
    let mm = m.node("MatMul", &[&x, &w1], vec![]);
    let h = m.node("Add", &[&b1, &mm], vec![]);
    let sqrt2 = m.float_init(&[], vec![std::f32::consts::SQRT_2]);
    let one = m.float_init(&[], vec![1.0]);
    let half = m.float_init(&[], vec![0.5]);
    let d = m.node("Div", &[&h, &sqrt2], vec![]);
    let e = m.node("Erf", &[&d], vec![]);
    let p = m.node("Add", &[&e, &one], vec![]);
    let q = m.node("Mul", &[&h, &p], vec![]);
    let gl = m.node("Mul", &[&q, &half], vec![]);
    let w2 = m.weight(&[40, 24], 0.3);
    let b2 = m.weight(&[24], 0.5);
    let mm = m.node("MatMul", &[&gl, &w2], vec![]);
    let o = m.node("Add", &[&mm, &b2], vec![]);
    let y = m.node("Add", &[&o, &x], vec![]);
    m.output(&y);
    let v = m.input("v", &[6, 20]);
    let wg = m.weight(&[20, 9], 0.3);
    let cg = m.weight(&[9], 0.5);
    let gm = m.node("Gemm", &[&v, &wg, &cg], vec![]);
    let rs = m.float_init(&[], vec![std::f32::consts::FRAC_1_SQRT_2]);
    let d = m.node("Mul", &[&gm, &rs], vec![]);
    let e = m.node("Erf", &[&d], vec![]);
    let p = m.node("Add", &[&one, &e], vec![]);
    let hh = m.node("Mul", &[&gm, &half], vec![]);
    let z = m.node("Mul", &[&hh, &p], vec![]);
    m.output(&z);
    let g = check(m, 13);
    assert_eq!(g.nodes.len(), 3, "{g}");
    assert_eq!(residuals(&g), 1);
    assert_eq!(
        activations(&g),
        [
            Activation::Gelu { tanh: false },
            Activation::None,
            Activation::Gelu { tanh: false }
        ]
    );
}

#[test]
fn gemm_sigmoid_and_more() {
    // Gemm + Sigmoid with K = 800 (K blocks) and odd N; Gemm + residual + Tanh;
    // MatMul + SiLU; batched MatMul (B per batch) + bias + LeakyRelu; HardSigmoid.
    let mut m = ModelBuilder::new(4);
    let a = m.input("a", &[5, 800]);
    let w = m.weight(&[11, 800], 0.05);
    let c = m.weight(&[11], 0.5);
    let g1 = m.node("Gemm", &[&a, &w, &c], vec![("transB", Attr::I(1))]);
    let s = m.node("Sigmoid", &[&g1], vec![]);
    m.output(&s);
    let r = m.input("r", &[5, 11]);
    let w2 = m.weight(&[11, 11], 0.3);
    let g2 = m.node("Gemm", &[&s, &w2], vec![("alpha", Attr::F(0.5))]);
    let sum = m.node("Add", &[&r, &g2], vec![]);
    let t = m.node("Tanh", &[&sum], vec![]);
    m.output(&t);
    let w3 = m.weight(&[11, 6], 0.3);
    let mm = m.node("MatMul", &[&t, &w3], vec![]);
    let sg = m.node("Sigmoid", &[&mm], vec![]);
    let silu = m.node("Mul", &[&sg, &mm], vec![]);
    m.output(&silu);
    let q = m.input("q", &[2, 3, 4, 5]);
    let k = m.input("k", &[2, 3, 5, 7]);
    let bias = m.weight(&[7], 1.0);
    let qk = m.node("MatMul", &[&q, &k], vec![]);
    let qb = m.node("Add", &[&qk, &bias], vec![]);
    let lr = m.node("LeakyRelu", &[&qb], vec![("alpha", Attr::F(0.2))]);
    m.output(&lr);
    let w4 = m.weight(&[5, 3], 0.3);
    let m4 = m.node("MatMul", &[&q, &w4], vec![]);
    let hs = m.node(
        "HardSigmoid",
        &[&m4],
        vec![("alpha", Attr::F(0.3)), ("beta", Attr::F(0.4))],
    );
    m.output(&hs);
    let g = check(m, 14);
    assert_eq!(g.nodes.len(), 5, "{g}");
    assert_eq!(residuals(&g), 1);
    assert_eq!(
        activations(&g),
        [
            Activation::Sigmoid,
            Activation::Tanh,
            Activation::Silu,
            Activation::LeakyRelu { alpha: 0.2 },
            Activation::HardSigmoid {
                alpha: 0.3,
                beta: 0.4
            }
        ]
    );
}

#[test]
fn graph_outputs_keep_their_values() {
    // The Conv's output is also a graph output: nothing fuses into it.
    let mut m = ModelBuilder::new(5);
    let x = m.input("x", &[1, 2, 5, 5]);
    let c = conv(&mut m, &x, 2, 4, 3, 1);
    let r = m.node("Relu", &[&c], vec![]);
    m.output(&c);
    m.output(&r);
    let g = check(m, 15);
    assert_eq!(g.nodes.len(), 2);
    assert_eq!(activations(&g), [Activation::None]);
}

#[test]
fn attention_blocks_are_bit_identical_to_the_unfused_nodes() {
    // Whisper-like attention (scaled queries, no mask) over enough keys that the query
    // rows run in several blocks and a tail; BERT-like attention with a padding mask
    // `[batch, 1, 1, T]` added to the scores; a causal `[M, T]` mask on the other side.
    let mut m = ModelBuilder::new(9);
    let q = m.input("q", &[1, 2, 70, 16]);
    let k = m.input("k", &[1, 2, 1100, 16]);
    let v = m.input("v", &[1, 2, 1100, 12]);
    let kt = m.node(
        "Transpose",
        &[&k],
        vec![("perm", Attr::Ints(vec![0, 1, 3, 2]))],
    );
    let scale = m.float_init(&[], vec![0.25]);
    let s = m.node("MatMul", &[&q, &kt], vec![]);
    let s = m.node("Mul", &[&s, &scale], vec![]);
    let p = m.node("Softmax", &[&s], vec![("axis", Attr::I(-1))]);
    let y = m.node("MatMul", &[&p, &v], vec![]);
    m.output(&y);
    let q2 = m.input("q2", &[3, 4, 9, 8]);
    let kt2 = m.input("kt2", &[3, 4, 8, 50]);
    let v2 = m.input("v2", &[3, 4, 50, 5]);
    let pad = m.input("pad", &[3, 1, 1, 50]);
    let s2 = m.node("MatMul", &[&q2, &kt2], vec![]);
    let s2 = m.node("Add", &[&pad, &s2], vec![]);
    let p2 = m.node("Softmax", &[&s2], vec![("axis", Attr::I(3))]);
    let y2 = m.node("MatMul", &[&p2, &v2], vec![]);
    m.output(&y2);
    let causal: Vec<f32> = (0..9 * 50)
        .map(|i| if i % 50 > i / 50 + 40 { -1e9 } else { 0.0 })
        .collect();
    let causal = m.float_init(&[9, 50], causal);
    let q3 = m.input("q3", &[3, 4, 9, 8]);
    let s3 = m.node("MatMul", &[&q3, &kt2], vec![]);
    let s3 = m.node("Add", &[&s3, &causal], vec![]);
    let p3 = m.node("Softmax", &[&s3], vec![("axis", Attr::I(-1))]);
    let y3 = m.node("MatMul", &[&p3, &v2], vec![]);
    m.output(&y3);
    let bytes = m.encode();
    let fused = check_bytes(&bytes, 16);
    let attentions = fused.nodes.iter().filter(|n| n.op == Op::Attention).count();
    assert_eq!(attentions, 3, "{fused}");

    let mut unfused = import(&bytes);
    let without: Vec<&str> = nnc::passes::PASSES
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| *name != "attention")
        .collect();
    nnc::passes::PassManager::from_list(&without.join(","))
        .expect("a pipeline")
        .run(&mut unfused)
        .expect("passes run");
    assert!(unfused.nodes.iter().all(|n| n.op != Op::Attention));
    let mut rng = Rng::new(17);
    let inputs: Vec<Tensor> = fused
        .inputs
        .iter()
        .map(|v| {
            let shape = fused.ty(*v).shape.clone();
            Tensor::from_vec(&shape, rng.f32s(shape.iter().product(), 2.0))
        })
        .collect();
    for target in targets() {
        let a = runner::run_compiled(&fused, &inputs, target.clone()).expect("fused runs");
        let b = runner::run_compiled(&unfused, &inputs, target.clone()).expect("unfused runs");
        assert_eq!(a, b, "{}: fused and unfused outputs differ", target.cpu);
    }
}
