//! Attention recognition: `MatMul(Softmax(MatMul(Q, Kᵀ) [+ mask], last axis), V)` as
//! exporters write scaled-dot-product attention becomes one [`Op::Attention`], which
//! code generation computes a block of query rows at a time: the block's scores, their
//! softmax and their product with V, while the block is in cache. Unfused, the scores
//! go to memory three times (written by the first MatMul, read and written by the
//! Softmax, read by the second MatMul): 9 MB a head for whisper's 1500 frames.
//!
//! The scaling of the scores is already on Q (see [`super::scale_operand`]); a mask is
//! an `Add` of any float32 tensor that broadcasts to the scores without growing them
//! (BERT's `[batch, 1, 1, T]`, a causal `[1, 1, M, T]`). Every intermediate must be
//! read only by the next node and not be a graph output; the MatMuls must have no
//! fused bias, residual or activation; every operand float32 with rank ≥ 2 and no
//! empty axis. The result is bit-identical to the unfused nodes': the products and
//! the softmax are the same computations, in the same order per element.

use super::{dce, util};
use crate::ir::{DType, Graph, ValueId};
use crate::ops::{infer, Activation, BinaryOp, Op};

pub fn run(g: &mut Graph) -> Result<(), String> {
    while fuse_one(g) {}
    dce::run(g)
}

/// The operands of the scaled-dot-product attention ending at node `i`, if it is one:
/// `[Q, Kᵀ, V]` and the mask.
fn match_attention(
    g: &Graph,
    i: usize,
    producers: &[Option<usize>],
    uses: &[usize],
) -> Option<([ValueId; 3], Option<ValueId>)> {
    let plain_matmul = |n: usize| {
        let node = &g.nodes[n];
        matches!(&node.op, Op::MatMul(m) if m.activation == Activation::None)
            && node.inputs.len() == 2
    };
    // Read by one node only, and not a graph output.
    let private = |v: ValueId| uses[v.0] == 1 && !util::is_output(g, v);
    let producer = |v: ValueId| producers[v.0];

    if !plain_matmul(i) {
        return None;
    }
    let (p, v) = (g.nodes[i].inputs[0]?, g.nodes[i].inputs[1]?);
    let softmax = producer(p)?;
    let last_axis = g.ty(p).rank().checked_sub(1)?;
    if !private(p)
        || g.nodes[softmax].op
            != (Op::Softmax {
                axis: last_axis,
                log: false,
            })
    {
        return None;
    }
    let s = g.nodes[softmax].inputs.first().copied()??;
    if !private(s) {
        return None;
    }
    let s_node = producer(s)?;
    let (scores, mask) = if plain_matmul(s_node) {
        (s_node, None)
    } else if g.nodes[s_node].op == Op::Binary(BinaryOp::Add) {
        let (a, b) = (
            g.nodes[s_node].inputs.first().copied()??,
            g.nodes[s_node].inputs.get(1).copied()??,
        );
        // The product is the operand whose producer is a plain MatMul read only here.
        let product_of = |x: ValueId| producer(x).filter(|&n| plain_matmul(n) && private(x));
        match (product_of(a), product_of(b)) {
            (Some(n), _) => (n, Some(b)),
            (None, Some(n)) => (n, Some(a)),
            _ => return None,
        }
    } else {
        return None;
    };
    let (q, kt) = (g.nodes[scores].inputs[0]?, g.nodes[scores].inputs[1]?);
    let operands = [q, kt, v];
    let all_f32 = operands
        .iter()
        .chain(&mask)
        .all(|&x| g.ty(x).dtype == DType::F32);
    let shaped = operands
        .iter()
        .all(|&x| g.ty(x).rank() >= 2 && !g.ty(x).shape.contains(&0));
    if !all_f32 || !shaped {
        return None;
    }
    // The fused node must produce exactly the second MatMul's output (V broadcasting
    // the batch further, or a mask growing the scores, would not).
    let inputs = [Some(q), Some(kt), Some(v), mask].map(|x| x.map(|x| g.ty(x).clone()));
    let out = infer::infer_types(&Op::Attention, &inputs).ok()?;
    if out.first() != Some(g.ty(g.nodes[i].outputs[0])) {
        return None;
    }
    Some((operands, mask))
}

fn fuse_one(g: &mut Graph) -> bool {
    let producers = util::producers(g);
    let uses = util::use_counts(g);
    for i in 0..g.nodes.len() {
        if let Some(([q, kt, v], mask)) = match_attention(g, i, &producers, &uses) {
            let node = &mut g.nodes[i];
            node.op = Op::Attention;
            node.inputs = vec![Some(q), Some(kt), Some(v)];
            if let Some(m) = mask {
                node.inputs.push(Some(m));
            }
            return true;
        }
    }
    false
}
