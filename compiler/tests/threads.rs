//! `run` with a thread pool (ABI 3): models whose nodes the kernel plan splits into
//! tasks, run through pools of 1, 2, 3 and 8 threads, through pools that run the tasks
//! in reverse or shuffled order, and from 8 threads at once sharing one pool; every
//! output must be bit-identical to `infer`'s (which runs each split node's tasks in
//! order on one thread) and no run may write past its workspace.

#[path = "common/graphs.rs"]
mod graphs;
#[path = "common/models.rs"]
mod models;
#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use std::ffi::c_void;
use std::sync::Mutex;

use graphs::Rng;
use models::{Attr, ModelBuilder};
use nnc::codegen::options::{KernelOptions, KernelSource};
use nnc::codegen::plan::plan_kernels;
use nnc::codegen::{Arch, Target};
use nnc::ir::{DType, Graph, Tensor};
use nnc::onnx::proto::ModelProto;
use nnc::onnx::{import_model, ImportOptions};
use nnc_runtime_abi::{NncTaskFn, NncThreadPool, ThreadPool};
use prost::Message;
use runner::{aarch64_harness, run_on_aarch64_env, Compiled};

/// The host and, on x86-64, the other kernel families it can run.
fn targets() -> Vec<Target> {
    let mut t = vec![Target::host()];
    if Arch::host() == Arch::X86_64 {
        for cpu in ["baseline", "x86-64-v3"] {
            if tools::host_runs(cpu) {
                t.push(Target::new(Arch::X86_64, Some(cpu)).expect("x86-64 target"));
            }
        }
    }
    t
}

fn optimized(bytes: &[u8]) -> Graph {
    let model = ModelProto::decode(bytes).expect("a model");
    let mut g = import_model(&model, None, &ImportOptions::default())
        .expect("imports")
        .graph;
    nnc::passes::optimize(&mut g).expect("passes run");
    g
}

/// A transformer encoder layer of ViT-tiny's size: projections, 4-head attention,
/// LayerNorm, a GELU MLP.
fn encoder_layer() -> Vec<u8> {
    let (t, d, heads) = (197, 256, 4);
    let mut m = ModelBuilder::new(21);
    let x = m.input("tokens", &[1, t, d]);
    let proj = |m: &mut ModelBuilder, x: &str| {
        let w = m.weight(&[d, d], 0.06);
        let b = m.weight(&[d], 0.1);
        let y = m.node("MatMul", &[x, &w], vec![]);
        let y = m.node("Add", &[&y, &b], vec![]);
        let shape = m.int_init(&[1, t as i64, heads as i64, (d / heads) as i64]);
        m.node("Reshape", &[&y, &shape], vec![])
    };
    let q = proj(&mut m, &x);
    let k = proj(&mut m, &x);
    let v = proj(&mut m, &x);
    let q = m.node(
        "Transpose",
        &[&q],
        vec![("perm", Attr::Ints(vec![0, 2, 1, 3]))],
    );
    let kt = m.node(
        "Transpose",
        &[&k],
        vec![("perm", Attr::Ints(vec![0, 2, 3, 1]))],
    );
    let v = m.node(
        "Transpose",
        &[&v],
        vec![("perm", Attr::Ints(vec![0, 2, 1, 3]))],
    );
    let scale = m.float_init(&[], vec![0.125]);
    let s = m.node("MatMul", &[&q, &kt], vec![]);
    let s = m.node("Mul", &[&s, &scale], vec![]);
    let p = m.node("Softmax", &[&s], vec![("axis", Attr::I(-1))]);
    let o = m.node("MatMul", &[&p, &v], vec![]);
    let o = m.node(
        "Transpose",
        &[&o],
        vec![("perm", Attr::Ints(vec![0, 2, 1, 3]))],
    );
    let shape = m.int_init(&[1, t as i64, d as i64]);
    let o = m.node("Reshape", &[&o, &shape], vec![]);
    let wo = m.weight(&[d, d], 0.06);
    let o = m.node("MatMul", &[&o, &wo], vec![]);
    let r = m.node("Add", &[&o, &x], vec![]);
    let g = m.weight(&[d], 1.0);
    let bt = m.weight(&[d], 0.1);
    let n = m.node(
        "LayerNormalization",
        &[&r, &g, &bt],
        vec![("axis", Attr::I(-1))],
    );
    let w1 = m.weight(&[d, 4 * d], 0.06);
    let b1 = m.weight(&[4 * d], 0.1);
    let h = m.node("MatMul", &[&n, &w1], vec![]);
    let h = m.node("Add", &[&h, &b1], vec![]);
    let h = m.node("Relu", &[&h], vec![]);
    let w2 = m.weight(&[4 * d, d], 0.03);
    let h = m.node("MatMul", &[&h, &w2], vec![]);
    let y = m.node("Add", &[&h, &r], vec![]);
    m.output(&y);
    m.encode()
}

/// MobileNet-style blocks on 56×56: pointwise expansion, 3×3 depthwise (stride 1 and
/// 2), pointwise projection with a residual, ReLU6 between.
fn inverted_residual() -> Vec<u8> {
    let mut m = ModelBuilder::new(22);
    let x = m.input("image", &[1, 24, 56, 56]);
    let pointwise = |m: &mut ModelBuilder, x: &str, cin: usize, cout: usize| {
        let w = m.weight(&[cout, cin, 1, 1], 0.3);
        let b = m.weight(&[cout], 0.1);
        m.node("Conv", &[x, &w, &b], vec![])
    };
    let depthwise = |m: &mut ModelBuilder, x: &str, c: usize, stride: i64| {
        let w = m.weight(&[c, 1, 3, 3], 0.3);
        let b = m.weight(&[c], 0.1);
        m.node(
            "Conv",
            &[x, &w, &b],
            vec![
                ("group", Attr::I(c as i64)),
                ("pads", Attr::Ints(vec![1, 1, 1, 1])),
                ("strides", Attr::Ints(vec![stride, stride])),
            ],
        )
    };
    let relu6 = |m: &mut ModelBuilder, x: &str| {
        let lo = m.float_init(&[], vec![0.0]);
        let hi = m.float_init(&[], vec![6.0]);
        m.node("Clip", &[x, &lo, &hi], vec![])
    };
    let h = pointwise(&mut m, &x, 24, 144);
    let h = relu6(&mut m, &h);
    let h = depthwise(&mut m, &h, 144, 1);
    let h = relu6(&mut m, &h);
    let h = pointwise(&mut m, &h, 144, 24);
    let r = m.node("Add", &[&h, &x], vec![]);
    let h = pointwise(&mut m, &r, 24, 144);
    let h = relu6(&mut m, &h);
    let h = depthwise(&mut m, &h, 144, 2);
    let h = relu6(&mut m, &h);
    let y = pointwise(&mut m, &h, 144, 32);
    m.output(&y);
    m.encode()
}

/// A ResNet basic block on 56×56 (Winograd F(4×4) 3×3 convs, residual) and one of
/// its 3×3 convs again on 14×14 (F(2×2)).
fn basic_block() -> Vec<u8> {
    let mut m = ModelBuilder::new(23);
    let x = m.input("image", &[1, 32, 56, 56]);
    let h = conv3x3(&mut m, &x, 32, 32);
    let h = m.node("Relu", &[&h], vec![]);
    let h = conv3x3(&mut m, &h, 32, 32);
    let r = m.node("Add", &[&h, &x], vec![]);
    let r = m.node("Relu", &[&r], vec![]);
    let p = max_pool(&mut m, &r, 4);
    let y = conv3x3(&mut m, &p, 32, 32);
    m.output(&y);
    m.encode()
}

/// A padded 3×3 stride-1 conv from `cin` to `cout` maps, with bias.
fn conv3x3(m: &mut ModelBuilder, x: &str, cin: usize, cout: usize) -> String {
    let w = m.weight(&[cout, cin, 3, 3], 0.1);
    let b = m.weight(&[cout], 0.1);
    m.node(
        "Conv",
        &[x, &w, &b],
        vec![("pads", Attr::Ints(vec![1, 1, 1, 1]))],
    )
}

/// A `k`×`k` max pool of stride `k`.
fn max_pool(m: &mut ModelBuilder, x: &str, k: i64) -> String {
    m.node(
        "MaxPool",
        &[x],
        vec![
            ("kernel_shape", Attr::Ints(vec![k, k])),
            ("strides", Attr::Ints(vec![k, k])),
        ],
    )
}

/// 3×3 convs whose 7 tile rows two threads cannot share evenly, split by groups of
/// maps instead: 28×28 (Winograd F(4×4)) with bias and ReLU, then with a residual,
/// and 14×14 (F(2×2)) with 96 maps.
fn winograd_map_groups() -> Vec<u8> {
    let mut m = ModelBuilder::new(27);
    let x = m.input("image", &[1, 64, 28, 28]);
    let h = conv3x3(&mut m, &x, 64, 128);
    let h = m.node("Relu", &[&h], vec![]);
    let r = conv3x3(&mut m, &h, 128, 128);
    let r = m.node("Add", &[&r, &h], vec![]);
    let r = m.node("Relu", &[&r], vec![]);
    let p = max_pool(&mut m, &r, 2);
    let y = conv3x3(&mut m, &p, 128, 96);
    m.output(&y);
    m.encode()
}

/// ResNet-style stages, one conv per strategy the plan splits by output positions or
/// maps: a 7×7 stride-2 stem (implicit GEMM writing rows in place), a 5×5 and a 3×3
/// stride-2 conv (implicit GEMM, the second on phase planes), a 1×1 stride-2 and a padded 3×3 stride-2 conv
/// (im2col), and on 7×7 a padded 3×3 conv with a residual and a pointwise conv
/// of 1000 maps (transposed GEMMs).
fn resnet_stages() -> Vec<u8> {
    let mut m = ModelBuilder::new(25);
    let x = m.input("image", &[1, 3, 200, 200]);
    let conv = |m: &mut ModelBuilder, x: &str, cin: usize, cout: usize, k: usize, stride: i64| {
        let w = m.weight(&[cout, cin, k, k], 0.2);
        let b = m.weight(&[cout], 0.1);
        let pad = (k / 2) as i64;
        m.node(
            "Conv",
            &[x, &w, &b],
            vec![
                ("pads", Attr::Ints(vec![pad, pad, pad, pad])),
                ("strides", Attr::Ints(vec![stride, stride])),
            ],
        )
    };
    let h = conv(&mut m, &x, 3, 32, 7, 2);
    let h = m.node("Relu", &[&h], vec![]);
    let h = m.node(
        "MaxPool",
        &[&h],
        vec![
            ("kernel_shape", Attr::Ints(vec![2, 2])),
            ("strides", Attr::Ints(vec![2, 2])),
        ],
    );
    let h = conv(&mut m, &h, 32, 32, 5, 1);
    let h = conv(&mut m, &h, 32, 64, 3, 2);
    let h = m.node("Relu", &[&h], vec![]);
    let d = conv(&mut m, &h, 64, 128, 1, 2);
    let h = conv(&mut m, &h, 64, 128, 3, 2);
    let h = m.node("Add", &[&h, &d], vec![]);
    let h = conv(&mut m, &h, 128, 128, 3, 2);
    let r = conv(&mut m, &h, 128, 128, 3, 1);
    let r = m.node("Add", &[&r, &h], vec![]);
    let r = m.node("Relu", &[&r], vec![]);
    let y = conv(&mut m, &r, 128, 1000, 1, 1);
    m.output(&y);
    m.encode()
}

/// Elementwise, normalization and pooling nodes large enough to split into row slices:
/// transcendental activations on odd row lengths (slices start on whole vectors), a
/// broadcast per-channel scale, Softmax and LayerNorm over the last axis, max and
/// average pooling by channel planes; and a pointwise conv split by maps.
fn row_ops() -> Vec<u8> {
    let mut m = ModelBuilder::new(26);
    let x = m.input("x", &[1, 2000, 37]);
    let h = m.node("Sigmoid", &[&x], vec![]);
    let t = m.node("Tanh", &[&x], vec![]);
    let h = m.node("Mul", &[&h, &t], vec![]);
    let e = m.node("Erf", &[&h], vec![]);
    let h = m.node("Add", &[&h, &e], vec![]);
    let h = m.node("Softmax", &[&h], vec![("axis", Attr::I(-1))]);
    let g = m.weight(&[37], 1.0);
    let bt = m.weight(&[37], 0.1);
    let h = m.node(
        "LayerNormalization",
        &[&h, &g, &bt],
        vec![("axis", Attr::I(-1))],
    );
    m.output(&h);
    let img = m.input("image", &[1, 48, 50, 50]);
    let s = m.weight(&[48, 1, 1], 1.0);
    let p = m.node("Mul", &[&img, &s], vec![]);
    let p = m.node("Exp", &[&p], vec![]);
    let mp = m.node(
        "MaxPool",
        &[&p],
        vec![
            ("kernel_shape", Attr::Ints(vec![3, 3])),
            ("strides", Attr::Ints(vec![1, 1])),
        ],
    );
    let ap = m.node(
        "AveragePool",
        &[&p],
        vec![
            ("kernel_shape", Attr::Ints(vec![3, 3])),
            ("strides", Attr::Ints(vec![1, 1])),
        ],
    );
    let y = m.node("Sub", &[&mp, &ap], vec![]);
    m.output(&y);
    // SqueezeNet's classifier: a pointwise conv to 1000 maps on 13×13, split by maps.
    let f = m.input("features", &[1, 256, 13, 13]);
    let w = m.weight(&[1000, 256, 1, 1], 0.1);
    let b = m.weight(&[1000], 0.1);
    let c = m.node("Conv", &[&f, &w, &b], vec![]);
    let c = m.node("Relu", &[&c], vec![]);
    m.output(&c);
    m.encode()
}

/// A language model's decoder step on 8 tokens: embedding rows gathered from a table
/// the output projection reads transposed (tied: stored once), an MLP, and logits
/// over a 2048-token vocabulary. Few rows and megabytes of weights: the GEMMs split by
/// column panels.
fn decoder_head() -> Vec<u8> {
    let (tokens, d, vocab) = (8, 256, 2048);
    let mut m = ModelBuilder::new(24);
    let ids = m.typed_input("ids", 7, &[tokens]);
    let table = m.weight(&[vocab, d], 0.5);
    let x = m.node("Gather", &[&table, &ids], vec![("axis", Attr::I(0))]);
    let w1 = m.weight(&[d, 4 * d], 0.06);
    let b1 = m.weight(&[4 * d], 0.1);
    let h = m.node("MatMul", &[&x, &w1], vec![]);
    let h = m.node("Add", &[&h, &b1], vec![]);
    let h = m.node("Relu", &[&h], vec![]);
    let w2 = m.weight(&[4 * d, d], 0.03);
    let h = m.node("MatMul", &[&h, &w2], vec![]);
    let h = m.node("Add", &[&h, &x], vec![]);
    let logits = m.node("Gemm", &[&h, &table], vec![("transB", Attr::I(1))]);
    m.output(&logits);
    m.encode()
}

fn random_inputs(g: &Graph, seed: u64) -> Vec<Tensor> {
    let mut rng = Rng::new(seed);
    g.inputs
        .iter()
        .map(|v| {
            let ty = g.ty(*v);
            let (shape, n) = (ty.shape.clone(), ty.numel());
            match ty.dtype {
                // Token ids: the first dimension of the Gather's table.
                DType::I64 => {
                    Tensor::from_vec(&shape, (0..n).map(|_| rng.below(2048) as i64).collect())
                }
                _ => Tensor::from_vec(&shape, rng.f32s(n, 2.0)),
            }
        })
        .collect()
}

/// A pool that runs every task on the calling thread, in the order `order` gives,
/// naming workers round-robin (as if `threads` threads had taken turns).
struct OrderedPool {
    threads: u32,
    order: fn(u32, u64) -> Vec<u32>,
    seed: Mutex<u64>,
}

unsafe extern "C" fn ordered_parallel_for(
    ctx: *mut c_void,
    n: u32,
    task: NncTaskFn,
    task_ctx: *mut c_void,
) {
    let pool = unsafe { &*(ctx as *const OrderedPool) };
    let seed = {
        let mut s = pool.seed.lock().unwrap();
        *s += 1;
        *s
    };
    for (k, i) in (pool.order)(n, seed).into_iter().enumerate() {
        unsafe { task(task_ctx, i, k as u32 % pool.threads) };
    }
}

fn reversed(n: u32, _: u64) -> Vec<u32> {
    (0..n).rev().collect()
}

fn shuffled(n: u32, seed: u64) -> Vec<u32> {
    let mut v: Vec<u32> = (0..n).collect();
    let mut rng = Rng::new(seed);
    for i in (1..v.len()).rev() {
        v.swap(i, rng.below(i + 1));
    }
    v
}

impl OrderedPool {
    fn raw(&self) -> NncThreadPool {
        NncThreadPool {
            ctx: self as *const OrderedPool as *mut c_void,
            num_threads: self.threads,
            parallel_for: ordered_parallel_for,
        }
    }
}

#[test]
fn outputs_are_bit_identical_for_every_pool() {
    for model in [
        encoder_layer(),
        inverted_residual(),
        basic_block(),
        winograd_map_groups(),
        decoder_head(),
        resnet_stages(),
        row_ops(),
    ] {
        every_pool_matches_infer(&optimized(&model));
    }
    // The 7-tile-row Winograd convs split by maps where the GEMM's vectors (8 or 4
    // lanes) make their chunks of tile rows uneven; so do their Cranelift transforms.
    let g = optimized(&winograd_map_groups());
    let winograd_tasks = |target: &Target, options: &KernelOptions| -> Vec<usize> {
        let plan = plan_kernels(&g, target, options);
        plan.nodes
            .iter()
            .filter(|n| n.strategy_name().starts_with("winograd"))
            .map(|n| n.tasks)
            .collect()
    };
    let clif = KernelOptions {
        winograd_transform: KernelSource::Clif,
        ..Default::default()
    };
    let avx2 = Target::new(Arch::X86_64, Some("x86-64-v3")).expect("x86-64 target");
    let aarch64 = Target::new(Arch::Aarch64, None).expect("aarch64 target");
    for (target, options) in [
        (&avx2, KernelOptions::default()),
        (&avx2, clif.clone()),
        (&aarch64, KernelOptions::default()),
    ] {
        let tasks = winograd_tasks(target, &options);
        assert!(
            tasks.len() == 3 && tasks.iter().all(|&t| t >= 2),
            "{}: {tasks:?}",
            target.cpu
        );
    }
    if Arch::host() == Arch::X86_64 && tools::host_runs("x86-64-v3") {
        let mut opts = runner::options(avx2);
        opts.kernels = clif;
        let lib = Compiled::with_options(&g, &opts).expect("compiles");
        let inputs = random_inputs(&g, 8);
        let want = lib.run(&g, &inputs).expect("infer runs");
        let reference = nnc::interp::run_graph(&g, &inputs).expect("the interpreter runs");
        for (got, expected) in want.iter().zip(&reference) {
            graphs::compare(
                got,
                expected,
                graphs::tolerance(DType::F32),
                graphs::Scale::Whole,
            )
            .unwrap_or_else(|e| panic!("Cranelift transforms vs the interpreter: {e}"));
        }
        for threads in [2, 3] {
            let pool = ThreadPool::new(threads).expect("threads start");
            let got = lib
                .run_pooled(&g, &inputs, Some(&pool.as_raw()))
                .expect("run");
            assert!(
                got == want,
                "Cranelift transforms, {threads} threads: outputs differ"
            );
        }
    }
    // The encoder's head transposes split by output rows.
    let g = optimized(&encoder_layer());
    let plan = plan_kernels(&g, &Target::host(), &Default::default());
    assert!(
        plan.nodes
            .iter()
            .any(|n| n.rows.is_some_and(|r| r.transposed_input.is_some())),
        "{g}"
    );
    // The decoder's GEMMs split by column panels of their packed weights.
    let g = optimized(&decoder_head());
    let plan = plan_kernels(&g, &Target::host(), &Default::default());
    assert!(plan.nodes.iter().any(|n| n.weights_by_columns), "{g}");
    // The elementwise, normalization and pooling nodes split into row slices.
    let g = optimized(&row_ops());
    let plan = plan_kernels(&g, &Target::host(), &Default::default());
    let sliced = plan.nodes.iter().filter(|n| n.rows.is_some()).count();
    assert!(sliced >= 5, "{sliced} nodes split into rows:\n{g}");
    assert!(plan.nodes.iter().any(|n| n.weights_by_rows), "{g}");
    // Every conv strategy of the stages splits, those that pad with a prologue.
    if Arch::host() == Arch::X86_64 {
        let g = optimized(&resnet_stages());
        let plan = plan_kernels(&g, &Target::host(), &Default::default());
        for name in [
            "implicit-gemm",
            "implicit-gemm-s2",
            "im2col+gemm",
            "transposed-gemm",
        ] {
            let split: Vec<_> = plan
                .nodes
                .iter()
                .filter(|n| n.strategy_name() == name)
                .map(|n| (n.tasks, n.prologue))
                .collect();
            assert!(
                !split.is_empty() && split.iter().all(|&(t, _)| t > 1),
                "{name}: {split:?}"
            );
            assert!(
                split.iter().any(|&(_, p)| p),
                "{name}: no prologue: {split:?}"
            );
        }
        // The stem's padded copy and phase planes run as several parts.
        assert!(plan.nodes.iter().any(|n| n.prologue_parts > 1));
    }
}

fn every_pool_matches_infer(g: &Graph) {
    let inputs = random_inputs(g, 5);
    let reference = nnc::interp::run_graph(g, &inputs).expect("the interpreter runs");
    for target in targets() {
        let plan = plan_kernels(g, &target, &Default::default());
        let split = plan.nodes.iter().filter(|n| n.tasks > 1).count();
        assert!(split >= 2, "{}: only {split} nodes split\n{g}", target.cpu);
        let lib = Compiled::for_target(g, target.clone()).expect("compiles");
        let want = lib.run(g, &inputs).expect("infer runs");
        for (got, expected) in want.iter().zip(&reference) {
            graphs::compare(
                got,
                expected,
                graphs::tolerance(DType::F32),
                graphs::Scale::Whole,
            )
            .unwrap_or_else(|e| panic!("{}: infer vs the interpreter: {e}", target.cpu));
        }
        let check = |what: &str, got: Result<Vec<Tensor>, String>| {
            let got = got.unwrap_or_else(|e| panic!("{}: {what}: {e}", target.cpu));
            assert!(
                got == want,
                "{}: {what}: outputs differ from infer's",
                target.cpu
            );
        };
        check("no pool", lib.run_pooled(g, &inputs, None));
        // FP16 weights: expanded once per node by its prologue, before the tasks.
        let mut opts = runner::options(target.clone());
        opts.weights = nnc::codegen::WeightFormat::F16;
        let half = Compiled::with_options(g, &opts).expect("compiles with fp16 weights");
        let half_want = half.run(g, &inputs).expect("infer runs");
        for (got, expected) in half_want.iter().zip(&reference) {
            graphs::compare(got, expected, 2e-2, graphs::Scale::Whole)
                .unwrap_or_else(|e| panic!("{}: fp16 infer vs the interpreter: {e}", target.cpu));
        }
        for threads in [2, 3] {
            let pool = ThreadPool::new(threads).expect("threads start");
            let got = half
                .run_pooled(g, &inputs, Some(&pool.as_raw()))
                .unwrap_or_else(|e| panic!("{}: fp16: {e}", target.cpu));
            assert!(
                got == half_want,
                "{}: fp16, {threads} threads: outputs differ",
                target.cpu
            );
        }
        for threads in [1, 2, 3, 8] {
            let pool = ThreadPool::new(threads).expect("threads start");
            check(
                &format!("{threads} threads"),
                lib.run_pooled(g, &inputs, Some(&pool.as_raw())),
            );
        }
        for (name, order) in [
            ("reversed", reversed as fn(u32, u64) -> Vec<u32>),
            ("shuffled", shuffled),
        ] {
            let pool = OrderedPool {
                threads: 3,
                order,
                seed: Mutex::new(0),
            };
            check(name, lib.run_pooled(g, &inputs, Some(&pool.raw())));
        }
    }
}

#[test]
fn concurrent_runs_share_one_pool() {
    let g = optimized(&encoder_layer());
    let inputs = random_inputs(&g, 6);
    let lib = Compiled::new(&g).expect("compiles");
    let want = lib.run(&g, &inputs).expect("infer runs");
    let pool = ThreadPool::new(2).expect("threads start");
    let raw = pool.as_raw();
    let raw = &raw as *const NncThreadPool as usize;
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                // SAFETY: the pool outlives the scope.
                let raw = unsafe { &*(raw as *const NncThreadPool) };
                for _ in 0..200 {
                    let got = lib.run_pooled(&g, &inputs, Some(raw)).expect("run");
                    assert!(got == want, "a concurrent run differs from infer's");
                }
            });
        }
    });
}

#[test]
fn aarch64_pools_under_qemu_match_infer() {
    let Some(harness) = aarch64_harness() else {
        return;
    };
    for model in [
        encoder_layer(),
        inverted_residual(),
        winograd_map_groups(),
        decoder_head(),
        resnet_stages(),
        row_ops(),
    ] {
        let g = optimized(&model);
        let inputs = random_inputs(&g, 7);
        let options = runner::options(Target::new(Arch::Aarch64, None).expect("aarch64"));
        let want = run_on_aarch64_env(harness, &g, &inputs, &options, &[]).expect("infer");
        let reference = nnc::interp::run_graph(&g, &inputs).expect("the interpreter runs");
        for (got, expected) in want.iter().zip(&reference) {
            graphs::compare(
                got,
                expected,
                graphs::tolerance(DType::F32),
                graphs::Scale::Whole,
            )
            .unwrap_or_else(|e| panic!("aarch64 infer vs the interpreter: {e}"));
        }
        for threads in ["1", "3"] {
            let got = run_on_aarch64_env(
                harness,
                &g,
                &inputs,
                &options,
                &[("NNC_RUN_THREADS", threads)],
            )
            .expect("run with a pool");
            assert!(got == want, "aarch64, {threads} threads: outputs differ");
        }
    }
}

/// A pool that says it has 2^31 threads and runs each `parallel_for` on real threads,
/// one per call, handing out worker numbers from the top of that range (a job system's
/// thread ids need not start at 0).
unsafe extern "C" fn scattered_parallel_for(
    _ctx: *mut c_void,
    n: u32,
    task: NncTaskFn,
    task_ctx: *mut c_void,
) {
    let task_ctx = task_ctx as usize;
    std::thread::scope(|s| {
        for i in 0..n {
            let worker = (1u32 << 31) - 1 - i.wrapping_mul(7919) % (1 << 30);
            s.spawn(move || unsafe { task(task_ctx as *mut c_void, i, worker) });
        }
    });
}

/// The workspace with a pool of `threads` threads.
fn workspace_bytes(lib: &Compiled, threads: u32) -> usize {
    let pool = NncThreadPool {
        ctx: std::ptr::null_mut(),
        num_threads: threads,
        parallel_for: scattered_parallel_for,
    };
    lib.workspace_size(Some(&pool))
        .expect("workspace_size is exported")
}

/// The per-worker scratch is sized by the most calls any split node's `parallel_for`
/// makes, not by the pool: 2^31 threads need what that many need (it was about 10 PB
/// for resnet18), and such a pool, running every call at once under worker numbers
/// near 2^31, still gives `infer`'s outputs within its workspace.
#[test]
fn huge_pools_need_only_the_scratch_of_the_most_tasks() {
    for model in [basic_block(), encoder_layer(), winograd_map_groups()] {
        let g = optimized(&model);
        let target = Target::host();
        let plan = plan_kernels(&g, &target, &Default::default());
        let most = (plan.nodes.iter())
            .filter(|n| n.tasks > 1)
            .map(|n| match n.prologue {
                true => n.tasks.max(n.prologue_parts),
                false => n.tasks,
            })
            .max()
            .expect("some node splits") as u32;
        let lib = Compiled::for_target(&g, target).expect("compiles");
        let at_most = workspace_bytes(&lib, most);
        assert!(
            workspace_bytes(&lib, 2) < at_most,
            "scratch grows up to {most} threads"
        );
        for threads in [most + 1, 1000, 1 << 31, u32::MAX] {
            assert_eq!(workspace_bytes(&lib, threads), at_most, "{threads} threads");
        }
        let inputs = random_inputs(&g, 9);
        let want = lib.run(&g, &inputs).expect("infer runs");
        let pool = NncThreadPool {
            ctx: std::ptr::null_mut(),
            num_threads: 1 << 31,
            parallel_for: scattered_parallel_for,
        };
        let got = lib.run_pooled(&g, &inputs, Some(&pool)).expect("runs");
        assert!(got == want, "2^31 threads: outputs differ from infer's");
    }
}
