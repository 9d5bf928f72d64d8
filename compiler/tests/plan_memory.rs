//! The memory plan: no two buffers live at the same time overlap, in-place elementwise
//! outputs and in-place Concat slices are planned where (and only where) they are safe,
//! and graphs planned that way compute what the reference interpreter computes. On
//! generated CNN, transformer and elementwise models, and on the models in `$NNC_MODELS`
//! when it is set (e.g. the reference models), the arena must be within 1.10× of the
//! lower bound.
//!
//! Run with `cargo test -p nnc --test plan_memory --release`.

#[path = "common/graphs.rs"]
mod graphs;
#[path = "common/models.rs"]
mod models;
#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use graphs::{compare, Rng, Scale};
use nnc::codegen::{plan_graph_memory, MemoryPlan, Storage};
use nnc::ir::{DType, Graph, Node, Tensor, TensorType, ValueId};
use nnc::onnx::proto::ModelProto;
use nnc::ops::{infer_types, BinaryOp, Op, UnaryOp};
use prost::Message;
use runner::Compiled;

/// Builds graphs node by node with inferred types.
struct G {
    g: Graph,
    inputs: Vec<Tensor>,
    rng: Rng,
}

impl G {
    fn new() -> G {
        G {
            g: Graph::default(),
            inputs: vec![],
            rng: Rng::new(1),
        }
    }

    fn input(&mut self, shape: &[usize]) -> ValueId {
        let ty = TensorType::new(DType::F32, shape.to_vec());
        let id = self
            .g
            .add_value(format!("in{}", self.inputs.len()), ty.clone(), None);
        self.g.inputs.push(id);
        let n = ty.numel();
        let data = self.rng.f32s(n, 1.0);
        self.inputs.push(Tensor::from_vec(shape, data));
        id
    }

    fn constant(&mut self, shape: &[usize], v: f32) -> ValueId {
        let n: usize = shape.iter().product();
        let t = Tensor::from_vec(shape, vec![v; n]);
        self.g
            .add_value(format!("c{}", self.g.values.len()), t.ty(), Some(t))
    }

    fn node(&mut self, op: Op, ins: &[ValueId]) -> ValueId {
        let types: Vec<Option<TensorType>> =
            ins.iter().map(|v| Some(self.g.ty(*v).clone())).collect();
        let ty = infer_types(&op, &types).expect("types").remove(0);
        let out = self
            .g
            .add_value(format!("v{}", self.g.values.len()), ty, None);
        self.g.nodes.push(Node {
            name: format!("n{}", self.g.nodes.len()),
            onnx_op: op.name(),
            op,
            inputs: ins.iter().map(|v| Some(*v)).collect(),
            outputs: vec![out],
        });
        out
    }

    fn unary(&mut self, u: UnaryOp, x: ValueId) -> ValueId {
        self.node(Op::Unary(u), &[x])
    }

    fn binary(&mut self, b: BinaryOp, x: ValueId, y: ValueId) -> ValueId {
        self.node(Op::Binary(b), &[x, y])
    }

    fn concat(&mut self, axis: usize, ins: &[ValueId]) -> ValueId {
        self.node(Op::Concat { axis }, ins)
    }

    fn output(&mut self, v: ValueId) {
        self.g.outputs.push(v);
    }
}

/// Checks the plan's invariants; returns it for further checks.
fn verify(g: &Graph, plan: &MemoryPlan) -> Result<(), String> {
    let nv = g.values.len();
    let nn = g.nodes.len();
    let mut producer = vec![usize::MAX; nv];
    for (k, n) in g.nodes.iter().enumerate() {
        for o in &n.outputs {
            producer[o.0] = k;
        }
    }
    let mut last = vec![0usize; nv];
    for v in 0..nv {
        if producer[v] != usize::MAX {
            last[v] = producer[v];
        }
    }
    for (k, n) in g.nodes.iter().enumerate() {
        for i in n.inputs.iter().flatten() {
            last[i.0] = last[i.0].max(k);
        }
    }
    for o in &g.outputs {
        last[o.0] = nn;
    }
    // Every value lies inside its root.
    for v in 0..nv {
        let r = plan.root[v];
        let end = plan.offset[v] + g.values[v].ty.byte_size();
        if end > g.values[r].ty.byte_size() {
            return Err(format!("value {v} ends at {end}, past its root {r}"));
        }
    }
    // Group liveness.
    let mut start = vec![usize::MAX; nv];
    let mut stop = vec![0usize; nv];
    for v in 0..nv {
        let r = plan.root[v];
        if producer[v] != usize::MAX {
            start[r] = start[r].min(producer[v]);
            stop[r] = stop[r].max(last[v]);
        }
    }
    // Arena roots: live at the same time means disjoint.
    let arena: Vec<(usize, usize, usize)> = (0..nv)
        .filter(|&v| plan.root[v] == v && start[v] != usize::MAX)
        .filter_map(|v| match plan.storage[v] {
            Some(Storage::Arena(off)) => Some((v, off, off + g.values[v].ty.byte_size())),
            _ => None,
        })
        .collect();
    for (i, &(a, a0, a1)) in arena.iter().enumerate() {
        if a1 > plan.arena_size {
            return Err(format!("buffer {a} ends past the arena"));
        }
        for &(b, b0, b1) in &arena[i + 1..] {
            let live_together = start[a] <= stop[b] && start[b] <= stop[a];
            if live_together && a0 < b1 && b0 < a1 {
                return Err(format!("buffers {a} and {b} overlap while both live"));
            }
        }
    }
    // Two values of one group never both need their contents at once: whenever a node
    // writes a value, every other value of its group overlapping it is dead (read last
    // at that node at the latest) or is the same node's input read elementwise.
    for (k, n) in g.nodes.iter().enumerate() {
        if plan.is_view[k] {
            continue;
        }
        for o in &n.outputs {
            let (o0, o1) = (plan.offset[o.0], plan.offset[o.0] + g.ty(*o).byte_size());
            for v in 0..nv {
                if v == o.0 || plan.root[v] != plan.root[o.0] || producer[v] == usize::MAX {
                    continue;
                }
                let (v0, v1) = (plan.offset[v], plan.offset[v] + g.values[v].ty.byte_size());
                let overlaps = v0 < o1 && o0 < v1;
                // Values of the group produced later are not written yet.
                if !overlaps || producer[v] > k {
                    continue;
                }
                // Views of the output or of what the output is a view of are the same bytes.
                if producer[v] == k {
                    continue;
                }
                if last[v] > k {
                    return Err(format!(
                        "node {k} overwrites value {v}, which is read later (node {})",
                        last[v]
                    ));
                }
            }
        }
    }
    if plan.lower_bound > plan.arena_size {
        return Err("lower bound above the arena".into());
    }
    Ok(())
}

/// Plans, verifies, compiles, runs and compares with the interpreter.
fn check_run(t: &G) -> MemoryPlan {
    let plan = plan_graph_memory(&t.g);
    verify(&t.g, &plan).expect("plan invariants");
    let expected = nnc::interp::run_graph(&t.g, &t.inputs).expect("interpreter");
    let lib = Compiled::new(&t.g).expect("compile");
    let actual = lib.run(&t.g, &t.inputs).expect("run");
    // Relative to each value, absolute below 1.
    let scale = Scale::Elementwise {
        fraction: 0.0,
        at_least: 1.0,
    };
    for (k, (a, e)) in actual.iter().zip(&expected).enumerate() {
        if let Err(err) = compare(a, e, 1e-5, scale) {
            panic!("output {k}: {err}");
        }
    }
    plan
}

#[test]
fn elementwise_chains_run_in_place() {
    let mut t = G::new();
    let x = t.input(&[2, 3, 8]);
    let y = t.input(&[8]);
    let a = t.unary(UnaryOp::Relu, x); // x is the caller's: not overwritten
    let b = t.unary(UnaryOp::Sigmoid, a); // over a
    let c = t.binary(BinaryOp::Add, b, y); // over b (y is broadcast)
    let d = t.unary(UnaryOp::Exp, c); // over c
    let e = t.binary(BinaryOp::Mul, d, x); // over d
    t.output(e); // the caller's buffer: computed out of place
    let plan = check_run(&t);
    assert_ne!(plan.root[a.0], plan.root[x.0]);
    for v in [b, c, d] {
        assert_eq!(plan.root[v.0], plan.root[a.0], "value {v:?} in place");
    }
    assert!(matches!(plan.storage[e.0], Some(Storage::Output(0))));
    // One buffer for the whole chain.
    assert_eq!(plan.arena_size, 192);
    assert_eq!(plan.lower_bound, plan.arena_size);
}

#[test]
fn inputs_read_later_are_not_overwritten() {
    let mut t = G::new();
    let x = t.input(&[4, 16]);
    let a = t.unary(UnaryOp::Tanh, x);
    let b = t.unary(UnaryOp::Exp, a); // a is read again below: not in place
    let c = t.binary(BinaryOp::Sub, b, a); // in place over a or b
    let w = t.constant(&[4, 16], 0.5);
    let d = t.binary(BinaryOp::Mul, w, c); // the constant is never overwritten
    let cast = t.node(Op::Cast { to: DType::F64 }, &[d]); // wider: not in place
    let back = t.node(Op::Cast { to: DType::F32 }, &[cast]); // narrower: not in place
    let s = t.unary(UnaryOp::Neg, back);
    t.output(s);
    let plan = check_run(&t);
    assert_ne!(plan.root[b.0], plan.root[a.0]);
    assert!(plan.root[c.0] == plan.root[a.0] || plan.root[c.0] == plan.root[b.0]);
    assert_eq!(plan.root[d.0], plan.root[c.0]);
    assert_ne!(plan.root[cast.0], plan.root[d.0]);
    assert_ne!(plan.root[back.0], plan.root[cast.0]);
    // Broadcast inputs (smaller than the output) never host it.
    let mut t = G::new();
    let x = t.input(&[8]);
    let a = t.unary(UnaryOp::Relu, x);
    let y = t.input(&[3, 8]);
    let b = t.binary(BinaryOp::Add, a, y);
    let c = t.unary(UnaryOp::Relu, b);
    t.output(c);
    let plan = check_run(&t);
    assert_ne!(plan.root[b.0], plan.root[a.0]);
}

#[test]
fn concat_inputs_are_written_into_their_slices() {
    // The squeezenet fire module: two branches concatenated along channels at batch 1.
    let mut t = G::new();
    let x = t.input(&[1, 4, 5, 5]);
    let a = t.unary(UnaryOp::Tanh, x);
    let a = t.unary(UnaryOp::Relu, a); // in place, and the group moves into the concat
    let b = t.unary(UnaryOp::Sigmoid, x);
    let c = t.concat(1, &[a, b]);
    let d = t.unary(UnaryOp::Exp, c); // in place over the concat
    let e = t.binary(BinaryOp::Mul, d, d);
    t.output(e);
    let plan = check_run(&t);
    let k =
        t.g.nodes
            .iter()
            .position(|n| matches!(n.op, Op::Concat { .. }))
            .unwrap();
    assert!(plan.is_view[k], "every input in place: no code");
    assert_eq!(plan.root[a.0], plan.root[c.0]);
    assert_eq!(plan.root[b.0], plan.root[c.0]);
    assert_eq!(plan.offset[a.0], 0);
    assert_eq!(plan.offset[b.0], 4 * 25 * 4);
    assert_eq!(plan.root[d.0], plan.root[c.0]);

    // Nested: a concat output concatenated again, inner slices composing offsets.
    let mut t = G::new();
    let x = t.input(&[1, 2, 3]);
    let a = t.unary(UnaryOp::Neg, x);
    let b = t.unary(UnaryOp::Abs, x);
    let ab = t.concat(1, &[a, b]);
    let c = t.unary(UnaryOp::Exp, x);
    let abc = t.concat(1, &[c, ab]);
    let out = t.unary(UnaryOp::Sqrt, abc);
    t.output(out);
    let plan = check_run(&t);
    assert_eq!(plan.root[a.0], plan.root[abc.0]);
    assert_eq!(plan.offset[a.0], 2 * 3 * 4);
    assert_eq!(plan.offset[b.0], 4 * 3 * 4);
}

#[test]
fn concat_falls_back_to_copying_when_unsafe() {
    let mut t = G::new();
    let x = t.input(&[1, 2, 4]);
    let w = t.constant(&[1, 3, 4], 2.0);
    let a = t.unary(UnaryOp::Exp, x);
    let b = t.unary(UnaryOp::Neg, x);
    let r = t.node(
        Op::Reshape {
            shape: vec![1, 2, 4],
        },
        &[b],
    );
    // x: the caller's; w: a constant; a: used twice; r: read again after the concat.
    let c = t.concat(1, &[x, w, a, a, r]);
    let s = t.binary(BinaryOp::Add, r, r);
    let c2 = t.unary(UnaryOp::Relu, c);
    t.output(c2);
    t.output(s);
    let plan = check_run(&t);
    let k =
        t.g.nodes
            .iter()
            .position(|n| matches!(n.op, Op::Concat { .. }))
            .unwrap();
    assert!(!plan.is_view[k]);
    for v in [x, w, a, r, b] {
        assert_ne!(plan.root[v.0], plan.root[c.0], "value {v:?}");
    }
    // Batch 2: the inputs are not contiguous runs of the output.
    let mut t = G::new();
    let x = t.input(&[2, 2, 4]);
    let a = t.unary(UnaryOp::Exp, x);
    let b = t.unary(UnaryOp::Neg, x);
    let c = t.concat(1, &[a, b]);
    let d = t.unary(UnaryOp::Relu, c);
    t.output(d);
    let plan = check_run(&t);
    assert_ne!(plan.root[a.0], plan.root[c.0]);
    // Partly in place: the slice that can be is, the other is copied.
    let mut t = G::new();
    let x = t.input(&[1, 2, 4]);
    let a = t.unary(UnaryOp::Exp, x);
    let c = t.concat(1, &[a, x]);
    let d = t.unary(UnaryOp::Relu, c);
    t.output(d);
    let plan = check_run(&t);
    assert_eq!(plan.root[a.0], plan.root[c.0]);
}

#[test]
fn contiguous_slices_read_their_input_in_place() {
    // A transformer's fused QKV split: Gathers of one constant index along the leading
    // axis are views at offsets, and later ops read (or overwrite) them there.
    let mut t = G::new();
    let x = t.input(&[3, 4, 8]);
    let qkv = t.unary(UnaryOp::Tanh, x);
    let index = |t: &mut G, i: i64| {
        let c = Tensor::from_vec(&[], vec![i]);
        t.g.add_value(format!("i{}", t.g.values.len()), c.ty(), Some(c))
    };
    let (i0, i1, ilast) = (index(&mut t, 0), index(&mut t, 1), index(&mut t, -1));
    let q = t.node(Op::Gather { axis: 0 }, &[qkv, i0]);
    let k = t.node(Op::Gather { axis: 0 }, &[qkv, i1]);
    let v = t.node(Op::Gather { axis: 0 }, &[qkv, ilast]);
    let qk = t.binary(BinaryOp::Mul, q, k);
    let e = t.unary(UnaryOp::Exp, v); // v's group dies here: may be overwritten
    let out = t.binary(BinaryOp::Add, qk, e);
    t.output(out);
    let plan = check_run(&t);
    for (g, at) in [(q, 0), (k, 32), (v, 64)] {
        assert_eq!(plan.root[g.0], plan.root[qkv.0], "{g:?} is a view");
        assert_eq!(plan.offset[g.0], at * 4);
    }
    let views = |t: &G, plan: &MemoryPlan| -> Vec<bool> {
        t.g.nodes
            .iter()
            .zip(&plan.is_view)
            .filter(|(n, _)| matches!(n.op, Op::Gather { .. } | Op::Slice { .. }))
            .map(|(_, &v)| v)
            .collect()
    };
    assert_eq!(views(&t, &plan), [true, true, true]);

    // Slices: a row range, one element of a leading axis then a range, a view of a
    // view; and the ones that are not contiguous (a later axis cut, a step, batch 2).
    let mut t = G::new();
    let x = t.input(&[1, 6, 4]);
    let a = t.unary(UnaryOp::Neg, x);
    let slice = |t: &mut G, x: ValueId, starts: &[usize], steps: &[i64], shape: &[usize]| {
        let op = Op::Slice {
            starts: starts.to_vec(),
            steps: steps.to_vec(),
            shape: shape.to_vec(),
        };
        t.node(op, &[x])
    };
    let rows = slice(&mut t, a, &[0, 2, 0], &[1, 1, 1], &[1, 3, 4]);
    let one = slice(&mut t, rows, &[0, 1, 1], &[1, 1, 1], &[1, 1, 2]);
    let cols = slice(&mut t, a, &[0, 0, 1], &[1, 1, 1], &[1, 6, 2]);
    let strided = slice(&mut t, a, &[0, 0, 0], &[1, 2, 1], &[1, 3, 4]);
    let y = t.input(&[2, 3, 4]);
    let b = t.unary(UnaryOp::Abs, y);
    let batch = slice(&mut t, b, &[0, 1, 0], &[1, 1, 1], &[2, 1, 4]);
    for v in [rows, one, cols, strided, batch] {
        let r = t.unary(UnaryOp::Relu, v);
        t.output(r);
    }
    let plan = check_run(&t);
    assert_eq!(views(&t, &plan), [true, true, false, false, false]);
    assert_eq!(plan.offset[rows.0], 2 * 4 * 4);
    assert_eq!(plan.offset[one.0], (3 * 4 + 1) * 4);
    assert_eq!(plan.root[one.0], plan.root[a.0]);
}

/// Plan invariants and arena ≤ 1.10 × lower bound on generated models, and on every
/// `.onnx` in `$NNC_MODELS` when set (an absolute path, e.g. to the reference
/// models; the tests make their own data otherwise).
#[test]
fn models_stay_near_the_lower_bound() {
    let mut graphs: Vec<(String, Graph)> = vec![];
    for seed in 0..4 {
        let built = [
            ("cnn", models::cnn(seed).0),
            ("transformer", models::transformer(seed).0),
            ("elementwise", models::elementwise(seed).0),
        ];
        for (kind, bytes) in built {
            let model = ModelProto::decode(bytes.as_slice()).expect("decode");
            let imported = nnc::onnx::import_model(&model, None, &Default::default());
            graphs.push((
                format!("{kind} (seed {seed})"),
                imported.expect("import").graph,
            ));
        }
    }
    if let Ok(dir) = std::env::var("NNC_MODELS") {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("NNC_MODELS={dir}: {e}"));
        let mut paths: Vec<_> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "onnx"))
            .collect();
        paths.sort();
        for p in paths {
            let g = nnc::onnx::load_model(&p, &Default::default()).expect("import");
            graphs.push((p.display().to_string(), g));
        }
    }
    for (name, g) in graphs {
        let plan = plan_graph_memory(&g);
        verify(&g, &plan).unwrap_or_else(|e| panic!("{name}: {e}"));
        let ratio = plan.arena_size as f64 / plan.lower_bound.max(1) as f64;
        let concats: Vec<usize> = (0..g.nodes.len())
            .filter(|&k| matches!(g.nodes[k].op, Op::Concat { .. }))
            .collect();
        let in_place = concats.iter().filter(|&&k| plan.is_view[k]).count();
        println!(
            "{name}: arena {} lower bound {} ratio {ratio:.3}; concats in place {in_place}/{}",
            plan.arena_size,
            plan.lower_bound,
            concats.len()
        );
        assert!(ratio <= 1.10, "{name}: ratio {ratio}");
    }
}
