//! Weights several nodes read (issue 19): each packed form of a constant is stored once
//! however many nodes read it, independent GEMMs over one weight run as one batched
//! GEMM, and a table read both by a Gather and, transposed, by a GEMM (tied
//! embeddings) is stored once, as the GEMM's panels. Outputs are checked against the
//! reference interpreter, and batched GEMMs also against the unbatched compile.

#[path = "common/graphs.rs"]
mod graphs;
#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use graphs::{compare, Rng, Scale};
use nnc::codegen::plan::{plan_kernels, Strategy};
use nnc::codegen::{compile_graph, IndexChecks, Target};
use nnc::interp;
use nnc::ir::{DType, Graph, Node, Tensor, TensorType, ValueId};
use nnc::ops::{infer_types, Activation, GemmAttrs, Op, UnaryOp};
use nnc::passes::PassManager;
use nnc_runtime_abi::abi::NNC_ERR_INDEX_OUT_OF_RANGE;
use runner::Compiled;

const D: usize = 64;

fn gemm(trans_b: bool) -> Op {
    Op::Gemm(GemmAttrs {
        alpha: 1.0,
        beta: 1.0,
        trans_a: false,
        trans_b,
        activation: Activation::None,
    })
}

/// Appends a node, inferring its output's type.
fn push(g: &mut Graph, name: &str, op: Op, inputs: &[ValueId]) -> ValueId {
    let types: Vec<Option<TensorType>> = inputs.iter().map(|v| Some(g.ty(*v).clone())).collect();
    let ty = infer_types(&op, &types).expect("valid node").remove(0);
    let out = g.add_value(name.into(), ty, None);
    g.nodes.push(Node {
        name: name.into(),
        onnx_op: op.name(),
        op,
        inputs: inputs.iter().map(|v| Some(*v)).collect(),
        outputs: vec![out],
    });
    out
}

fn input(g: &mut Graph, name: &str, shape: &[usize]) -> ValueId {
    let v = g.add_value(
        name.into(),
        TensorType::new(DType::F32, shape.to_vec()),
        None,
    );
    g.inputs.push(v);
    v
}

fn weight(g: &mut Graph, name: &str, shape: &[usize], rng: &mut Rng) -> ValueId {
    let n = shape.iter().product();
    let t = Tensor::from_vec(shape, rng.f32s(n, 0.2));
    g.add_value(name.into(), t.ty(), Some(t))
}

fn random_inputs(g: &Graph, seed: u64) -> Vec<Tensor> {
    let mut rng = Rng::new(seed);
    g.inputs.iter().map(|v| rng.tensor(g.ty(*v))).collect()
}

fn optimized(g: &Graph, passes: &str) -> Graph {
    let mut g = g.clone();
    PassManager::from_list(passes)
        .expect("known passes")
        .run(&mut g)
        .expect("passes run");
    g
}

fn default_passes(g: &Graph) -> Graph {
    let mut g = g.clone();
    PassManager::default().run(&mut g).expect("passes run");
    g
}

/// Compiled `g` (already optimized) against the interpreter on the unoptimized graph.
fn check_against_interpreter(original: &Graph, compiled: &Graph, seed: u64) -> Vec<Tensor> {
    let inputs = random_inputs(original, seed);
    let expected = interp::run_graph(original, &inputs).expect("interpreter runs");
    let got = Compiled::new(compiled)
        .expect("compiles")
        .run(compiled, &inputs)
        .expect("runs");
    for (k, (a, e)) in got.iter().zip(&expected).enumerate() {
        compare(a, e, 1e-4, Scale::Whole).unwrap_or_else(|m| panic!("output {k}: {m}"));
    }
    got
}

/// `n` Gemm nodes in a chain, each reading the previous one's output (through a Relu)
/// and the one weight `W` [D, D]: they cannot be batched, and without sharing each
/// would pack its own copy of `W`.
fn chain(n: usize) -> Graph {
    let mut rng = Rng::new(7);
    let mut g = Graph::default();
    let mut h = input(&mut g, "x", &[4, D]);
    let w = weight(&mut g, "W", &[D, D], &mut rng);
    let bias = weight(&mut g, "bias", &[D], &mut rng);
    for i in 0..n {
        let y = push(&mut g, &format!("gemm{i}"), gemm(false), &[h, w, bias]);
        h = push(&mut g, &format!("relu{i}"), Op::Unary(UnaryOp::Relu), &[y]);
    }
    g.outputs.push(h);
    g
}

#[test]
fn a_weight_read_by_twenty_gemms_is_stored_once() {
    let opts = runner::options(Target::host());
    let one = compile_graph(&default_passes(&chain(1)), &opts).expect("compiles");
    let g20 = default_passes(&chain(20));
    let twenty = compile_graph(&g20, &opts).expect("compiles");
    let w_bytes = D * D * 4;
    assert!(
        twenty.weights_size < one.weights_size + w_bytes,
        "1 Gemm: {} weight bytes, 20 Gemms: {} (one copy of W is {w_bytes})",
        one.weights_size,
        twenty.weights_size
    );
    assert!(twenty.unshared_weights_size >= one.weights_size + 19 * w_bytes);
    let shared: Vec<_> = twenty
        .shared_weights
        .iter()
        .filter(|s| s.constant == "W")
        .collect();
    assert_eq!(shared.len(), 1, "{:?}", twenty.shared_weights);
    assert_eq!(shared[0].nodes.len(), 20, "{:?}", shared[0]);
    check_against_interpreter(&chain(20), &g20, 1);
}

/// `n` Gemm (or MatMul) nodes over independent inputs and one weight [K, N] with a
/// bias, plus one Gemm over the same weight that reads another's output: it must stay
/// out of the batch.
fn fan(n: usize, matmul: bool, dependent: bool) -> Graph {
    const K: usize = 96;
    const N: usize = 80;
    let mut rng = Rng::new(11);
    let mut g = Graph::default();
    let w = weight(&mut g, "W", &[K, N], &mut rng);
    let bias = weight(&mut g, "bias", &[N], &mut rng);
    let mut last = None;
    for i in 0..n {
        // Rows differ per member (and MatMul members are 3-D) so slices are uneven.
        let rows = 1 + i % 3;
        let y = if matmul {
            let x = input(&mut g, &format!("x{i}"), &[1, rows, K]);
            let y = push(
                &mut g,
                &format!("mm{i}"),
                Op::MatMul(Default::default()),
                &[x, w],
            );
            let b = push(
                &mut g,
                &format!("bias{i}"),
                Op::Binary(nnc::ops::BinaryOp::Add),
                &[y, bias],
            );
            b
        } else {
            let x = input(&mut g, &format!("x{i}"), &[rows, K]);
            push(&mut g, &format!("gemm{i}"), gemm(false), &[x, w, bias])
        };
        g.outputs.push(y);
        last = Some(y);
    }
    if dependent {
        // Back to K columns through a Gemm over another weight, then W again.
        let last = last.expect("at least one member");
        let shape = g.ty(last).shape.clone();
        let rows: usize = shape[..shape.len() - 1].iter().product();
        let flat = push(
            &mut g,
            "flat",
            Op::Reshape {
                shape: vec![rows, N],
            },
            &[last],
        );
        let up = weight(&mut g, "up", &[N, K], &mut rng);
        let up_bias = weight(&mut g, "up_bias", &[K], &mut rng);
        let back = push(&mut g, "back", gemm(false), &[flat, up, up_bias]);
        let again = push(&mut g, "again", gemm(false), &[back, w, bias]);
        g.outputs.push(again);
    }
    g
}

fn count(g: &Graph, pred: impl Fn(&Op) -> bool) -> usize {
    g.nodes.iter().filter(|n| pred(&n.op)).count()
}

fn is_gemm(op: &Op) -> bool {
    matches!(op, Op::Gemm(_) | Op::MatMul(_))
}

#[test]
fn independent_gemms_over_one_weight_run_as_one_gemm() {
    for matmul in [false, true] {
        let g = fan(12, matmul, false);
        let batched = default_passes(&g);
        assert_eq!(count(&batched, is_gemm), 1, "matmul {matmul}:\n{batched}");
        let got = check_against_interpreter(&g, &batched, 3);
        // And as the separate GEMMs do (the kernels may block K differently for a
        // different row count, so to rounding, not bit for bit).
        let unbatched = optimized(
            &g,
            "qdq,const_fold,cse,views,fold_affine,gelu,fuse_epilogue,dce",
        );
        assert_eq!(count(&unbatched, is_gemm), 12);
        let inputs = random_inputs(&g, 3);
        let separate = Compiled::new(&unbatched)
            .expect("compiles")
            .run(&unbatched, &inputs)
            .expect("runs");
        for (k, (a, e)) in got.iter().zip(&separate).enumerate() {
            compare(a, e, 1e-5, Scale::Whole).unwrap_or_else(|m| {
                panic!("matmul {matmul}, output {k}: batched vs separate: {m}")
            });
        }
    }
}

#[test]
fn a_gemm_that_reads_another_members_output_is_not_batched_with_it() {
    let g = fan(6, false, true);
    let batched = default_passes(&g);
    // The six independent members become one; `again` depends on the last of them.
    let gemms = count(&batched, is_gemm);
    assert_eq!(gemms, 3, "batched, `back` and `again` expected:\n{batched}");
    check_against_interpreter(&g, &batched, 5);
}

/// A tiny language model with tied embeddings: `Gather(E, ids)` → Relu →
/// `Gemm(h, E, transB = 1)` (logits over the vocabulary).
fn tied(vocab: usize, dim: usize, seq: usize) -> Graph {
    let mut rng = Rng::new(13);
    let mut g = Graph::default();
    let e = weight(&mut g, "E", &[vocab, dim], &mut rng);
    let ids = g.add_value("ids".into(), TensorType::new(DType::I64, vec![seq]), None);
    g.inputs.push(ids);
    let h = push(&mut g, "embed", Op::Gather { axis: 0 }, &[e, ids]);
    let h = push(&mut g, "act", Op::Unary(UnaryOp::Relu), &[h]);
    let zero = g.add_value(
        "zero".into(),
        TensorType::new(DType::F32, vec![vocab]),
        Some(Tensor::from_vec(&[vocab], vec![0f32; vocab])),
    );
    let logits = push(&mut g, "logits", gemm(true), &[h, e, zero]);
    g.outputs.push(logits);
    g
}

#[test]
fn a_table_tied_to_a_gemm_weight_is_stored_once() {
    // 1000 rows: not a multiple of any panel width, so the last panel is a tail.
    for (vocab, dim) in [(1000, 72), (64, 16), (777, 700)] {
        let seq = 9;
        let g = default_passes(&tied(vocab, dim, seq));
        let plan = plan_kernels(&g, &Target::host(), &Default::default());
        let embed = g
            .nodes
            .iter()
            .position(|n| n.name == "embed")
            .expect("embed");
        assert!(
            matches!(
                plan.nodes[embed].strategy,
                Strategy::GatherPackedColumns(..)
            ),
            "{}",
            plan.nodes[embed]
        );
        // A 2.2 MB table is split by column panels on threads, packed as whole-K
        // panels, which the Gather then reads.
        let logits = g.nodes.iter().position(|n| n.name == "logits");
        if vocab * dim * 4 > 2 << 20 {
            let logits = logits.expect("logits");
            assert!(
                plan.nodes[logits].weights_by_columns,
                "{}",
                plan.nodes[logits]
            );
        }
        let compiled = compile_graph(&g, &runner::options(Target::host())).expect("compiles");
        let table = vocab * dim * 4;
        assert!(
            compiled.weights_size < table + table / 4,
            "{vocab}x{dim}: {} weight bytes for a {table}-byte table",
            compiled.weights_size
        );
        // Every row, including the first and last of the tail panel, and negatives.
        let ids: Vec<i64> = vec![
            0,
            1,
            vocab as i64 - 1,
            -1,
            17 % vocab as i64,
            -(vocab as i64),
            5,
            63 % vocab as i64,
            vocab as i64 / 2,
        ];
        let inputs = vec![Tensor::from_vec(&[seq], ids)];
        let expected = interp::run_graph(&tied(vocab, dim, seq), &inputs).expect("runs");
        let lib = Compiled::new(&g).expect("compiles");
        let got = lib.run(&g, &inputs).expect("runs");
        compare(&got[0], &expected[0], 1e-4, Scale::Whole)
            .unwrap_or_else(|m| panic!("{vocab}x{dim}: {m}"));
        // Out of range: an error by default, clamped with IndexChecks::Clamp.
        let bad = vec![Tensor::from_vec(&[seq], vec![vocab as i64; seq])];
        let (status, _) = lib.run_status(&g, &bad).expect("runs");
        assert_eq!(status, NNC_ERR_INDEX_OUT_OF_RANGE);
        let mut opts = runner::options(Target::host());
        opts.index_checks = IndexChecks::Clamp;
        let clamped = Compiled::with_options(&g, &opts).expect("compiles");
        let got = clamped.run(&g, &bad).expect("runs");
        let last = vec![Tensor::from_vec(&[seq], vec![vocab as i64 - 1; seq])];
        let expected = interp::run_graph(&tied(vocab, dim, seq), &last).expect("runs");
        compare(&got[0], &expected[0], 1e-4, Scale::Whole)
            .unwrap_or_else(|m| panic!("{vocab}x{dim} clamped: {m}"));
    }
}

/// A convolution head applied to two feature maps of one size: both nodes transform
/// the filter the same way (Winograd here, on x86-64), and the transformed filter is
/// stored once.
#[test]
fn a_convolution_head_on_two_maps_stores_its_filter_once() {
    let mut rng = Rng::new(17);
    let mut g = Graph::default();
    let w = weight(&mut g, "head_w", &[32, 32, 3, 3], &mut rng);
    let bias = weight(&mut g, "head_b", &[32], &mut rng);
    let conv = Op::Conv(nnc::ops::ConvAttrs {
        kernel: vec![3, 3],
        strides: vec![1, 1],
        pads: vec![1, 1, 1, 1],
        dilations: vec![1, 1],
        group: 1,
        activation: Activation::None,
    });
    for i in 0..2 {
        let x = input(&mut g, &format!("p{i}"), &[1, 32, 12, 12]);
        let y = push(&mut g, &format!("head{i}"), conv.clone(), &[x, w, bias]);
        g.outputs.push(y);
    }
    let optimized = default_passes(&g);
    let compiled = compile_graph(&optimized, &runner::options(Target::host())).expect("compiles");
    let heads: Vec<_> = compiled
        .shared_weights
        .iter()
        .filter(|s| s.constant == "head_w")
        .collect();
    assert_eq!(heads.len(), 1, "{:?}", compiled.shared_weights);
    assert_eq!(heads[0].nodes, ["head0", "head1"]);
    assert!(compiled.weights_size < compiled.unshared_weights_size);
    check_against_interpreter(&g, &optimized, 9);
}

/// Without a shared weight nothing changes: the sizes reported add up.
#[test]
fn a_model_without_shared_weights_reports_no_sharing() {
    let g = default_passes(&chain(1));
    let compiled = compile_graph(&g, &runner::options(Target::host())).expect("compiles");
    assert!(compiled.shared_weights.is_empty());
    assert_eq!(compiled.weights_size, compiled.unshared_weights_size);
    assert!(compiled.code_size > 0);
}
