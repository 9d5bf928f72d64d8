//! The activations fused into GEMM and depthwise-convolution epilogues, element by
//! element against float64 references, over dense grids, both tails (where the
//! exponentials saturate), tiny values, signed zeros, infinities and NaN.
//!
//! Each case is a one-node graph whose pre-activation values are exactly the chosen
//! inputs: a GEMM `x[m, 1] · ones[1, n]` and a 1×1 depthwise convolution with unit
//! weights (products by one, no sums). It runs on every `--cpu` preset the host
//! executes (baseline: the Cranelift epilogue; x86-64-v3 and x86-64-v4: the machine-code
//! kernels, whose plan the test checks names them), so both code generators are held to
//! the same references.

#[path = "common/graphs.rs"]
mod graphs;
#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use graphs::{error_values, one_node, In, Scale};
use nnc::codegen::plan::plan_kernels;
use nnc::codegen::{Arch, KernelOptions, Target};
use nnc::ir::Tensor;
use nnc::ops::{Activation, ConvAttrs, GemmAttrs, Op};
use runner::Compiled;

/// The inputs: a dense grid over [−12, 12], the region where the exponentials
/// saturate and beyond, tiny magnitudes, the tanh polynomial's boundary, specials.
fn inputs() -> Vec<f32> {
    let mut x: Vec<f32> = (-1200..=1200).map(|i| i as f32 / 100.0).collect();
    for m in [
        15.0,
        20.0,
        30.0,
        43.9,
        44.1,
        60.0,
        86.5,
        87.0,
        87.5,
        88.0,
        88.5,
        89.0,
        100.0,
        1e4,
        1e30,
        3e38,
        1e-3,
        1e-6,
        1e-20,
        1e-38,
        1e-44,
        0.625,
        0.624_999_9,
        0.625_000_1,
    ] {
        x.push(m);
        x.push(-m);
    }
    x.extend([
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MAX,
        f32::MIN,
    ]);
    x
}

fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        x.exp() / (1.0 + x.exp())
    }
}

/// The activation's float64 value, and the element-wise error it is held to (relative,
/// below an absolute floor).
fn reference(act: Activation) -> (fn(f64) -> f64, f64, f64) {
    match act {
        Activation::Sigmoid => (sigmoid, 2e-6, 1e-30),
        // x·σ(x) as the graph computes it: NaN at −inf (−inf·0).
        Activation::Silu => (|x| x * sigmoid(x), 2e-6, 1e-30),
        Activation::Tanh => (f64::tanh, 2e-6, 1e-30),
        Activation::Gelu { tanh: true } => (
            |x| {
                let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
                x * sigmoid(2.0 * u)
            },
            // e^−2u in the far tail carries 2u's rounding times |2u| (~66 at x = −9).
            1e-5,
            1e-30,
        ),
        Activation::HardSwish => (|x| x * (x / 6.0 + 0.5).clamp(0.0, 1.0), 1e-6, 1e-30),
        other => panic!("no reference for {other:?}"),
    }
}

const ACTIVATIONS: [Activation; 5] = [
    Activation::Sigmoid,
    Activation::Silu,
    Activation::Tanh,
    Activation::Gelu { tanh: true },
    Activation::HardSwish,
];

/// `x[m, 1] · ones[1, n]`: row i is x[i] n times (n leaves a partial vector on both
/// families).
fn gemm_graph(x: &[f32], act: Activation) -> (nnc::ir::Graph, Vec<Tensor>) {
    let n = 19;
    let op = Op::Gemm(GemmAttrs {
        alpha: 1.0,
        beta: 1.0,
        trans_a: false,
        trans_b: false,
        activation: act,
    });
    let a = Tensor::from_vec(&[x.len(), 1], x.to_vec());
    let b = Tensor::from_vec(&[1, n], vec![1f32; n]);
    one_node(op, vec![In::Given(a), In::GivenConst(b)], 1)
}

/// A 3×3 depthwise convolution (padding 1) over 3 channels of rows of 37 whose weights
/// are 1 at the centre and 0 elsewhere: each output is its input plus zeros, exactly.
/// Non-finite inputs would make the zero taps NaN (0·inf), and −0 + 0 is +0, so this
/// graph takes the finite inputs other than −0.
fn depthwise_graph(x: &[f32], act: Activation) -> (nnc::ir::Graph, Vec<Tensor>) {
    let (c, w) = (3, 37);
    let x: Vec<f32> = x
        .iter()
        .copied()
        .filter(|v| v.is_finite() && !(*v == 0.0 && v.is_sign_negative()))
        .collect();
    let h = x.len().div_ceil(c * w);
    let values: Vec<f32> = x.iter().copied().cycle().take(c * h * w).collect();
    let op = Op::Conv(ConvAttrs {
        kernel: vec![3, 3],
        strides: vec![1, 1],
        pads: vec![1; 4],
        dilations: vec![1, 1],
        group: c,
        activation: act,
    });
    let xs = Tensor::from_vec(&[1, c, h, w], values);
    let centre: Vec<f32> = (0..c * 9)
        .map(|i| if i % 9 == 4 { 1.0 } else { 0.0 })
        .collect();
    let ws = Tensor::from_vec(&[c, 1, 3, 3], centre);
    one_node(op, vec![In::Given(xs), In::GivenConst(ws)], 1)
}

/// The x86-64 presets this host runs.
fn cpus() -> Vec<&'static str> {
    if !cfg!(target_arch = "x86_64") {
        return vec![];
    }
    ["baseline", "x86-64-v3", "x86-64-v4"]
        .into_iter()
        .filter(|c| tools::host_runs(c))
        .collect()
}

fn check(
    what: &str,
    build: fn(&[f32], Activation) -> (nnc::ir::Graph, Vec<Tensor>),
    machine_kernel: &str,
) {
    let x = inputs();
    let mut failures = vec![];
    for cpu in cpus() {
        let target = Target::new(Arch::X86_64, Some(cpu)).expect("a preset");
        for act in ACTIVATIONS {
            let (g, ins) = build(&x, act);
            let names = plan_kernels(&g, &target, &KernelOptions::default()).nodes[0].kernels();
            if cpu != "baseline" && !names.iter().any(|n| n.contains(machine_kernel)) {
                failures.push(format!(
                    "{what} {act:?} --cpu {cpu}: plans [{}], not the machine-code {machine_kernel} kernel",
                    names.join(", ")
                ));
                continue;
            }
            let lib = Compiled::for_target(&g, target.clone()).expect("compiles");
            let got = lib.run(&g, &ins).expect("runs")[0].to_f64_vec();
            let (f, tol, floor) = reference(act);
            let pre = ins[0].to_f64_vec();
            let want: Vec<f64> = match what {
                "gemm" => pre
                    .iter()
                    .flat_map(|&v| std::iter::repeat_n(f(v), got.len() / pre.len()))
                    .collect(),
                _ => pre.iter().map(|&v| f(v)).collect(),
            };
            let scale = Scale::Elementwise {
                fraction: 0.0,
                at_least: floor,
            };
            let err = error_values(&got, &want, scale);
            let worst = (0..got.len())
                .map(|i| (error_values(&got[i..=i], &want[i..=i], scale), i))
                .fold((0.0, 0), |m, e| if e.0 > m.0 { e } else { m });
            let x_worst = pre[match what {
                "gemm" => worst.1 / (got.len() / pre.len()),
                _ => worst.1,
            }];
            println!(
                "{what} {act:?} --cpu {cpu}: max error {err:.2e} at x = {x_worst:e} \
                 (got {:e}, want {:e})",
                got[worst.1], want[worst.1]
            );
            if err.is_nan() || err > tol {
                failures.push(format!(
                    "{what} {act:?} --cpu {cpu}: error {err:.2e} > {tol:.0e} at x = {x_worst:e}: \
                     got {:e}, want {:e}",
                    got[worst.1], want[worst.1]
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn gemm_epilogue_activations() {
    check("gemm", gemm_graph, "f32-gemm");
}

#[test]
fn depthwise_epilogue_activations() {
    check("depthwise", depthwise_graph, "f32-dwconv");
}
