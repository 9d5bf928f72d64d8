//! A scalar scaling of a MatMul's result moved onto its smaller operand: attention
//! scores written `(Q·Kᵀ)·s` (or `/ √d`) become `(Q·s)·Kᵀ`, which scales the
//! `[heads, seq, d]` queries instead of the `[heads, seq, seq]` scores (whisper's
//! encoder: 9 M multiplies a layer become 0.4 M). A constant operand is scaled at
//! compile time; otherwise a Mul is inserted before the MatMul, which
//! [`super::fold_affine`] may fold further into the operand's producer.
//!
//! Float32 only, for a MatMul without bias, residual or activation whose result only
//! the scaling reads, and only when the operand is smaller than the result. The
//! products round differently (`(a·s)·b` against `(a·b)·s`, and `x·(1/c)` for `x/c`),
//! as in any reassociating compiler: within an ulp or two per product.

use super::{dce, util};
use crate::ir::{DType, Graph, Node, ValueId};
use crate::ops::{Activation, BinaryOp, Op};

pub fn run(g: &mut Graph) -> Result<(), String> {
    while move_one(g) {}
    dce::run(g)
}

/// Node `j` scales `y` by a one-element constant (`y·c`, `c·y` or `y/c`): returns the
/// factor.
fn scalar_factor(g: &Graph, j: usize, y: ValueId) -> Option<f32> {
    let n = &g.nodes[j];
    let (a, b) = (n.inputs.first().copied()??, n.inputs.get(1).copied()??);
    match n.op {
        Op::Binary(BinaryOp::Mul) if a == y && b != y => util::scalar_f32(g, b),
        Op::Binary(BinaryOp::Mul) if b == y && a != y => util::scalar_f32(g, a),
        Op::Binary(BinaryOp::Div) if a == y && b != y => util::scalar_f32(g, b).map(|c| 1.0 / c),
        _ => None,
    }
}

fn move_one(g: &mut Graph) -> bool {
    let uses = util::use_counts(g);
    let consumers = util::consumers(g);
    for i in 0..g.nodes.len() {
        let n = &g.nodes[i];
        if !matches!(&n.op, Op::MatMul(m) if m.activation == Activation::None)
            || n.inputs.len() != 2
        {
            continue;
        }
        let y = n.outputs[0];
        if g.ty(y).dtype != DType::F32
            || uses[y.0] != 1
            || util::is_output(g, y)
            || consumers[y.0].len() != 1
        {
            continue;
        }
        let j = consumers[y.0][0];
        let Some(factor) = scalar_factor(g, j, y) else {
            continue;
        };
        if g.ty(g.nodes[j].outputs[0]) != g.ty(y) || !factor.is_finite() {
            continue;
        }
        let (Some(a), Some(b)) = (n.inputs[0], n.inputs[1]) else {
            continue;
        };
        let numel = |v: ValueId| g.ty(v).numel();
        let (slot, x) = if numel(a) <= numel(b) { (0, a) } else { (1, b) };
        if numel(x) >= numel(y) {
            continue;
        }
        let (scaled, inserted) = match util::const_f32(g, x) {
            Some(values) => {
                let name = util::fresh_name(g, &format!("{}_scaled", g.values[x.0].name));
                let shape = g.ty(x).shape.clone();
                let data = values.iter().map(|v| v * factor).collect();
                (util::add_const_f32(g, name, shape, data), false)
            }
            None => {
                let name = util::fresh_name(g, &format!("{}_scaled", g.values[x.0].name));
                let c_name = util::fresh_name(g, "scale");
                let c = util::add_const_f32(g, c_name, vec![], vec![factor]);
                let out = g.add_value(name, g.ty(x).clone(), None);
                let scale_node = Node {
                    name: g.nodes[j].name.clone(),
                    onnx_op: g.nodes[j].onnx_op.clone(),
                    op: Op::Binary(BinaryOp::Mul),
                    inputs: vec![Some(x), Some(c)],
                    outputs: vec![out],
                };
                g.nodes.insert(i, scale_node);
                (out, true)
            }
        };
        // The MatMul (one further on when a node went before it) now computes the
        // scaled product under the scaling's output name; the scaling goes.
        let (i, j) = if inserted { (i + 1, j + 1) } else { (i, j) };
        let out = g.nodes[j].outputs[0];
        g.nodes[i].inputs[slot] = Some(scaled);
        g.nodes[i].outputs[0] = out;
        g.nodes.remove(j);
        return true;
    }
    false
}
