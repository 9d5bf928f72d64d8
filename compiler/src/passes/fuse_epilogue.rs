//! Epilogue fusion: what follows a float32 Conv, Gemm or MatMul elementwise is computed
//! in its epilogue, while the output tile is still in registers:
//! * a residual `Add(y, r)` (either order) with `r` of y's exact type becomes the
//!   op's residual input (3), a full-matrix GEMM addend;
//! * an activation (Relu, Clip, LeakyRelu, HardSigmoid, HardSwish, Sigmoid, Tanh,
//!   Gelu, and SiLU written `y·Sigmoid(y)`) becomes the op's `activation`, applied
//!   after the bias and the residual.
//!
//! The intermediate value must have no other reader (nor be a graph output). The fused
//! node takes the place and the output value of the last node it absorbs, so a
//! residual computed between the two is ready when it runs.

use super::{dce, util};
use crate::ir::{DType, Graph, ValueId};
use crate::ops::{Activation, BinaryOp, Op, UnaryOp};

pub fn run(g: &mut Graph) -> Result<(), String> {
    while fuse_one(g) {}
    dce::run(g)
}

/// A float32 Conv / Gemm / MatMul that has no fused activation yet.
fn fusable(g: &Graph, i: usize) -> bool {
    let n = &g.nodes[i];
    matches!(n.op, Op::Conv(_) | Op::Gemm(_) | Op::MatMul(_))
        && n.op.activation() == Activation::None
        && g.ty(n.outputs[0]).dtype == DType::F32
}

fn set_activation(op: &mut Op, act: Activation) {
    match op {
        Op::Conv(c) => c.activation = act,
        Op::Gemm(ga) => ga.activation = act,
        Op::MatMul(m) => m.activation = act,
        _ => unreachable!("only Conv, Gemm and MatMul fuse"),
    }
}

/// Replaces node `j` (reading the output of node `i`) by node `i` modified by `edit`,
/// writing `j`'s output.
fn absorb(g: &mut Graph, i: usize, j: usize, edit: impl FnOnce(&mut crate::ir::Node)) {
    let mut fused = g.nodes[i].clone();
    fused.outputs[0] = g.nodes[j].outputs[0];
    edit(&mut fused);
    g.nodes[j] = fused;
    g.nodes.remove(i);
}

fn fuse_one(g: &mut Graph) -> bool {
    let uses = util::use_counts(g);
    let cons = util::consumers(g);
    let prod = util::producers(g);
    // The fusable producer of `v` whose only reader `v` is.
    let source = |v: ValueId, reads: usize| -> Option<usize> {
        let i = prod[v.0]?;
        (fusable(g, i)
            && uses[v.0] == reads
            && cons[v.0].len() == reads
            && g.nodes[i].outputs[0] == v)
            .then_some(i)
    };
    for j in 0..g.nodes.len() {
        let n = &g.nodes[j];
        match &n.op {
            Op::Unary(u) => {
                let Some(act) = Activation::from_unary(*u) else {
                    continue;
                };
                let Some(x) = n.inputs[0] else { continue };
                let Some(i) = source(x, 1) else { continue };
                absorb(g, i, j, |f| set_activation(&mut f.op, act));
                return true;
            }
            Op::Binary(BinaryOp::Mul) => {
                // SiLU: Mul(y, Sigmoid(y)), y read by exactly these two.
                let (Some(a), Some(b)) = (n.inputs[0], n.inputs[1]) else {
                    continue;
                };
                let silu = |y: ValueId, s: ValueId| -> Option<usize> {
                    let sn = prod[s.0]?;
                    let sig = &g.nodes[sn];
                    (sig.op == Op::Unary(UnaryOp::Sigmoid)
                        && sig.inputs[0] == Some(y)
                        && uses[s.0] == 1)
                        .then_some(())?;
                    source(y, 2)
                };
                let Some(i) = silu(a, b).or_else(|| silu(b, a)) else {
                    continue;
                };
                absorb(g, i, j, |f| set_activation(&mut f.op, Activation::Silu));
                return true;
            }
            Op::Binary(BinaryOp::Add) => {
                let (Some(a), Some(b)) = (n.inputs[0], n.inputs[1]) else {
                    continue;
                };
                let out_ty = g.ty(n.outputs[0]);
                let residual = |y: ValueId, r: ValueId| -> Option<usize> {
                    let i = source(y, 1)?;
                    let node = &g.nodes[i];
                    (r != y
                        && g.ty(r) == out_ty
                        && g.ty(y) == out_ty
                        && node.inputs.get(3).copied().flatten().is_none())
                    .then_some(i)
                };
                let (i, r) = match (residual(a, b), residual(b, a)) {
                    (Some(i), _) => (i, b),
                    (_, Some(i)) => (i, a),
                    _ => continue,
                };
                absorb(g, i, j, |f| {
                    f.inputs.resize(4, None);
                    f.inputs[3] = Some(r);
                });
                return true;
            }
            _ => {}
        }
    }
    false
}
