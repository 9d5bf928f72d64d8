//! ONNX RNNs, GRUs (`linear_before_reset`, as PyTorch exports them) and LSTMs imported
//! as one `RnnSequence` (float32, default activations, no clip or
//! peepholes, whole sequences) against the same LSTMs unrolled step by step into core
//! ops, which the importer does for any `clip`: with a clip no pre-activation reaches,
//! both compute the same function. Each model is run by the interpreter both ways and
//! compiled (host, and aarch64 under qemu when available), over forward, reverse and
//! bidirectional LSTMs, with and without bias and initial states, in both layouts,
//! hidden sizes on and off the kernel's vector padding.

#[path = "common/models.rs"]
mod models;
#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use models::{Attr, ModelBuilder};
use nnc::codegen::{Arch, Target};
use nnc::ir::{Graph, Tensor};
use nnc::onnx::{import_model, ImportOptions};
use nnc::ops::{Op, RnnCell};
use prost::Message;

/// One case of each op: sequence length, batch, input size, hidden size, direction, whether
/// B and the initial states are given, the layout, whether R is an input (packed at
/// run time) rather than a weight.
struct Case {
    t: usize,
    batch: usize,
    input: usize,
    hidden: usize,
    direction: &'static str,
    bias: bool,
    states: bool,
    layout: i64,
    r_input: bool,
}

const CASES: [Case; 5] = [
    Case {
        t: 7,
        batch: 1,
        input: 6,
        hidden: 10,
        direction: "bidirectional",
        bias: true,
        states: false,
        layout: 0,
        r_input: false,
    },
    Case {
        t: 5,
        batch: 3,
        input: 4,
        hidden: 3,
        direction: "forward",
        bias: false,
        states: true,
        layout: 0,
        r_input: true,
    },
    Case {
        t: 4,
        batch: 2,
        input: 5,
        hidden: 16,
        direction: "reverse",
        bias: true,
        states: true,
        layout: 0,
        r_input: false,
    },
    Case {
        t: 6,
        batch: 2,
        input: 3,
        hidden: 9,
        direction: "bidirectional",
        bias: true,
        states: true,
        layout: 1,
        r_input: true,
    },
    Case {
        t: 1,
        batch: 1,
        input: 2,
        hidden: 33,
        direction: "forward",
        bias: true,
        states: false,
        layout: 0,
        r_input: false,
    },
];

/// The case as a model of `op` (`RNN`, `GRU` or `LSTM`) with outputs Y, Y_h (and an
/// LSTM's Y_c); `clip` forces the unrolled import.
fn recurrent_model(op: &str, c: &Case, clip: Option<f32>, seed: u64) -> Vec<u8> {
    let g = match op {
        "RNN" => 1,
        "GRU" => 3,
        _ => 4,
    };
    let mut m = ModelBuilder::new(seed);
    let dirs = if c.direction == "bidirectional" { 2 } else { 1 };
    let x_shape = match c.layout {
        0 => [c.t, c.batch, c.input],
        _ => [c.batch, c.t, c.input],
    };
    let state_shape = match c.layout {
        0 => [dirs, c.batch, c.hidden],
        _ => [c.batch, dirs, c.hidden],
    };
    let x = m.input("x", &x_shape);
    let w = m.weight(&[dirs, g * c.hidden, c.input], 0.5);
    let r = match c.r_input {
        true => m.input("r", &[dirs, g * c.hidden, c.hidden]),
        false => m.weight(&[dirs, g * c.hidden, c.hidden], 0.5),
    };
    let b = if c.bias {
        m.weight(&[dirs, 2 * g * c.hidden], 0.3)
    } else {
        String::new()
    };
    let h0 = match c.states {
        true => m.input("h0", &state_shape),
        false => String::new(),
    };
    let c0 = match c.states && op == "LSTM" {
        true => m.input("c0", &state_shape),
        false => String::new(),
    };
    let mut attrs = vec![
        ("hidden_size", Attr::I(c.hidden as i64)),
        ("direction", Attr::S(c.direction)),
        ("layout", Attr::I(c.layout)),
    ];
    if let Some(clip) = clip {
        attrs.push(("clip", Attr::F(clip)));
    }
    if op == "GRU" {
        attrs.push(("linear_before_reset", Attr::I(1)));
    }
    let empty = String::new();
    let (inputs, outputs) = match op {
        "LSTM" => (vec![x.as_str(), &w, &r, &b, &empty, &h0, &c0], 3),
        _ => (vec![x.as_str(), &w, &r, &b, &empty, &h0], 2),
    };
    let outs = m.node_n(op, &inputs, attrs, outputs);
    for o in &outs {
        m.output(o);
    }
    m.encode()
}

fn import(bytes: &[u8]) -> Graph {
    let model = nnc::onnx::proto::ModelProto::decode(bytes).unwrap();
    let mut g = import_model(&model, None, &ImportOptions::default())
        .unwrap()
        .graph;
    nnc::passes::PassManager::default().run(&mut g).unwrap();
    g
}

fn inputs_for(g: &Graph, seed: u64) -> Vec<Tensor> {
    let mut rng = models::Rng::new(seed);
    (g.inputs.iter())
        .map(|v| {
            let ty = g.ty(*v);
            let scale = if g.value(*v).name == "r" { 0.5 } else { 1.0 };
            Tensor::from_vec(&ty.shape, rng.vec(ty.numel(), scale))
        })
        .collect()
}

fn assert_close(expected: &[Tensor], actual: &[Tensor], what: &str) {
    assert_eq!(expected.len(), actual.len(), "{what}: outputs");
    for (e, a) in expected.iter().zip(actual) {
        assert_eq!(e.shape(), a.shape(), "{what}: shapes");
        for (x, y) in e.to_f64_vec().iter().zip(a.to_f64_vec()) {
            assert!(
                (x - y).abs() <= 1e-5 + 1e-4 * x.abs(),
                "{what}: expected {x}, got {y}"
            );
        }
    }
}

#[test]
fn rnn_sequence_matches_the_unrolled_ops() {
    let harness = runner::aarch64_harness();
    for (op, cell) in [
        ("LSTM", RnnCell::Lstm),
        ("GRU", RnnCell::Gru),
        ("RNN", RnnCell::Simple),
    ] {
        for (k, c) in CASES.iter().enumerate() {
            let seed = 60 + k as u64;
            let looped = import(&recurrent_model(op, c, None, seed));
            let unrolled = import(&recurrent_model(op, c, Some(1e30), seed));
            let what = format!(
                "{op} case {k} ({} hidden {}, layout {})",
                c.direction, c.hidden, c.layout
            );
            let runs = |g: &Graph| {
                (g.nodes.iter())
                    .any(|n| matches!(&n.op, Op::RnnSequence { cell: c, .. } if *c == cell))
            };
            assert!(runs(&looped) && !runs(&unrolled), "{what}: the two imports");
            let inputs = inputs_for(&looped, seed);
            let expected = nnc::interp::run_graph(&unrolled, &inputs).unwrap();
            let interpreted = nnc::interp::run_graph(&looped, &inputs).unwrap();
            assert_close(&expected, &interpreted, &format!("{what}: interpreter"));
            let compiled = runner::run_compiled(&looped, &inputs, Target::host()).unwrap();
            assert_close(&expected, &compiled, &format!("{what}: compiled"));
            if let Some(h) = harness {
                let target = Target::new(Arch::Aarch64, None).unwrap();
                let opts = runner::options(target);
                let got = runner::run_on_aarch64_with(h, &looped, &inputs, &opts).unwrap();
                assert_close(&expected, &got, &format!("{what}: aarch64"));
            }
        }
    }
}
