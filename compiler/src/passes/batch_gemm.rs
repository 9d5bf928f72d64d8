//! GEMM batching: float32 MatMul / Gemm nodes that multiply different inputs by the
//! same constant weight, none depending on another's output, become one GEMM over
//! their stacked rows.
//!
//! ```text
//! y_i = A_i · W (+ bias)     for i in a batch (A_i: [..., K], W: [K, N] constant)
//!   ⇒  Y = Concat(Reshape(A_i, [rows_i, K]) ...) · W (+ bias)
//!      y_i = Reshape(Slice(Y, rows of i), shape of y_i)
//! ```
//!
//! The input projections of a recurrent network unrolled over time steps, or a head
//! applied to several feature maps, read a weight of megabytes once per node; batched,
//! the packed weight panels stream through the cache once. The copies this adds (the
//! stacked rows in, the slices out) are `rows·(K + N)` floats against `rows·K·N`
//! multiply-adds.
//!
//! Members must agree on everything but A: the op and its attributes (no residual, no
//! transposed A), the weight and the bias value, and a Gemm's C must broadcast over
//! rows. A node that reaches another through the graph cannot share its GEMM (the
//! recurrent weights of an RNN: step t+1 reads step t's state), so each batch is an
//! antichain of the dependency order. The graph is then re-sorted: no consumer of a
//! member's output is an ancestor of another member's A (else one would reach the
//! other), so the batched node has a place.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use crate::ir::{DType, Graph, Node, Tensor, TensorType, ValueId};
use crate::ops::{Activation, Op};

use super::util::{consumers, fresh_name, producers};

/// Only weights of at least this many bytes are worth the copies: below it the weight
/// stays in L1 across the members anyway.
const MIN_WEIGHT_BYTES: usize = 16 * 1024;

/// What members of one batch share: the op with its attributes (as text, for a total
/// order), the weight and the bias.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
struct BatchKey {
    op: String,
    weight: ValueId,
    bias: Option<Bias>,
}

/// A bias operand: a constant by its content (affine folding gives each node its own
/// copy of a shared bias), anything else by identity.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Bias {
    Constant { shape: Vec<usize>, bytes: Vec<u8> },
    Value(ValueId),
}

fn bias_key(g: &Graph, v: ValueId) -> Bias {
    match g.constant(v) {
        Some(t) => Bias::Constant {
            shape: g.ty(v).shape.clone(),
            bytes: t.to_le_bytes(),
        },
        None => Bias::Value(v),
    }
}

/// A node that may join a batch, with its A's rows.
struct Candidate {
    node: usize,
    rows: usize,
}

pub fn run(g: &mut Graph) -> Result<(), String> {
    let mut groups: BTreeMap<BatchKey, Vec<Candidate>> = BTreeMap::new();
    for (i, n) in g.nodes.iter().enumerate() {
        if let Some((key, rows)) = batchable(g, n) {
            groups
                .entry(key)
                .or_default()
                .push(Candidate { node: i, rows });
        }
    }
    groups.retain(|_, members| members.len() > 1);
    if groups.is_empty() {
        return Ok(());
    }
    let batches: Vec<Vec<Candidate>> = groups
        .into_values()
        .flat_map(|members| antichains(g, members))
        .filter(|b| b.len() > 1)
        .collect();
    if batches.is_empty() {
        return Ok(());
    }
    let mut removed = vec![false; g.nodes.len()];
    let mut added = vec![];
    for batch in &batches {
        for c in batch {
            removed[c.node] = true;
        }
        added.extend(batched_nodes(g, batch)?);
    }
    let kept: Vec<Node> = std::mem::take(&mut g.nodes)
        .into_iter()
        .zip(&removed)
        .filter(|(_, r)| !**r)
        .map(|(n, _)| n)
        .collect();
    g.nodes = kept;
    g.nodes.extend(added);
    topological_sort(g)
}

/// The batch key and A's row count of a node that may join a batch.
fn batchable(g: &Graph, n: &Node) -> Option<(BatchKey, usize)> {
    let input = |i: usize| n.inputs.get(i).copied().flatten();
    let (a, w) = (input(0)?, input(1)?);
    if input(3).is_some() || n.outputs.len() != 1 {
        return None;
    }
    let (at, wt) = (g.ty(a), g.ty(w));
    if at.dtype != DType::F32 || wt.rank() != 2 || at.rank() < 1 {
        return None;
    }
    if !matches!(g.constant(w), Some(Tensor::F32(_))) || wt.numel() * 4 < MIN_WEIGHT_BYTES {
        return None;
    }
    let bias = input(2);
    let op = match &n.op {
        Op::MatMul(m) => {
            if at.rank() < 2 || m.activation != Activation::None {
                return None;
            }
            format!("{:?}", n.op)
        }
        Op::Gemm(gm) => {
            if gm.trans_a || gm.activation != Activation::None {
                return None;
            }
            // C must be the same for every row: [N], [1, N] or a scalar.
            if let Some(c) = bias {
                let cs = &g.ty(c).shape;
                if cs.len() == 2 && cs[0] != 1 {
                    return None;
                }
            }
            format!("{:?}", n.op)
        }
        _ => return None,
    };
    let k = at.shape[at.rank() - 1];
    let rows = at.numel().checked_div(k)?;
    if rows == 0 {
        return None;
    }
    Some((
        BatchKey {
            op,
            weight: w,
            bias: bias.map(|b| bias_key(g, b)),
        },
        rows,
    ))
}

/// Splits `members` (in graph order) into batches none of whose nodes reaches another:
/// greedily, each batch takes every remaining member that no earlier batch member
/// reaches.
fn antichains(g: &Graph, members: Vec<Candidate>) -> Vec<Vec<Candidate>> {
    let readers = consumers(g);
    let mut rest = members;
    let mut batches = vec![];
    while !rest.is_empty() {
        let mut reached = vec![false; g.nodes.len()];
        let mut batch = vec![];
        let mut later = vec![];
        for c in rest {
            if reached[c.node] {
                later.push(c);
                continue;
            }
            mark_descendants(g, &readers, c.node, &mut reached);
            batch.push(c);
        }
        batches.push(batch);
        rest = later;
    }
    batches
}

/// Marks every node that reads, directly or not, an output of `node`.
fn mark_descendants(g: &Graph, readers: &[Vec<usize>], node: usize, reached: &mut [bool]) {
    let mut stack = vec![node];
    while let Some(n) = stack.pop() {
        for o in &g.nodes[n].outputs {
            for &r in &readers[o.0] {
                if !reached[r] {
                    reached[r] = true;
                    stack.push(r);
                }
            }
        }
    }
}

/// The nodes replacing one batch: a Reshape of each A to rows, their Concat, the
/// batched node, and per member a Slice of its rows reshaped to its output's shape
/// (producing the member's own output value).
fn batched_nodes(g: &mut Graph, batch: &[Candidate]) -> Result<Vec<Node>, String> {
    let first = g.nodes[batch[0].node].clone();
    let first_a = first.inputs[0].ok_or("batched node without an input")?;
    let k = g.ty(first_a).shape.last().copied().unwrap_or(1);
    let n_cols = g.ty(first.outputs[0]).shape.last().copied().unwrap_or(1);
    let total_rows: usize = batch.iter().map(|c| c.rows).sum();
    let mut nodes = vec![];
    let mut parts = vec![];
    for c in batch {
        let member = &g.nodes[c.node];
        let a = member.inputs[0].ok_or("batched node without an input")?;
        let (name, onnx_op) = (member.name.clone(), member.onnx_op.clone());
        if g.ty(a).shape == [c.rows, k] {
            parts.push(Some(a));
            continue;
        }
        let rows = g.add_value(
            fresh_name(g, &format!("{name}_rows")),
            TensorType::new(DType::F32, vec![c.rows, k]),
            None,
        );
        nodes.push(Node {
            name: format!("{name}_rows"),
            onnx_op,
            op: Op::Reshape {
                shape: vec![c.rows, k],
            },
            inputs: vec![Some(a)],
            outputs: vec![rows],
        });
        parts.push(Some(rows));
    }
    let stacked = g.add_value(
        fresh_name(g, &format!("{}_batched_rows", first.name)),
        TensorType::new(DType::F32, vec![total_rows, k]),
        None,
    );
    nodes.push(Node {
        name: format!("{}_batched_rows", first.name),
        onnx_op: first.onnx_op.clone(),
        op: Op::Concat { axis: 0 },
        inputs: parts,
        outputs: vec![stacked],
    });
    let product = g.add_value(
        fresh_name(g, &format!("{}_batched", first.name)),
        TensorType::new(DType::F32, vec![total_rows, n_cols]),
        None,
    );
    let mut inputs = first.inputs.clone();
    inputs[0] = Some(stacked);
    nodes.push(Node {
        name: format!("{}_batched", first.name),
        onnx_op: first.onnx_op.clone(),
        op: first.op.clone(),
        inputs,
        outputs: vec![product],
    });
    let mut row = 0;
    for c in batch {
        let member = &g.nodes[c.node];
        let (name, out) = (member.name.clone(), member.outputs[0]);
        let onnx_op = member.onnx_op.clone();
        let slice_shape = vec![c.rows, n_cols];
        let flat = g.ty(out).shape == slice_shape;
        let rows = if flat {
            out
        } else {
            g.add_value(
                fresh_name(g, &format!("{name}_batched_out")),
                TensorType::new(DType::F32, slice_shape.clone()),
                None,
            )
        };
        nodes.push(Node {
            name: format!("{name}_batched_out"),
            onnx_op: onnx_op.clone(),
            op: Op::Slice {
                starts: vec![row, 0],
                steps: vec![1, 1],
                shape: slice_shape,
            },
            inputs: vec![Some(product)],
            outputs: vec![rows],
        });
        if !flat {
            nodes.push(Node {
                name: name.clone(),
                onnx_op,
                op: Op::Reshape {
                    shape: g.ty(out).shape.clone(),
                },
                inputs: vec![Some(rows)],
                outputs: vec![out],
            });
        }
        row += c.rows;
    }
    Ok(nodes)
}

/// Re-sorts `g.nodes` topologically, keeping the present order wherever it is one
/// (Kahn's algorithm, taking the earliest ready node first).
fn topological_sort(g: &mut Graph) -> Result<(), String> {
    let producer = producers(g);
    let readers = consumers(g);
    let mut waiting: Vec<usize> = g
        .nodes
        .iter()
        .map(|n| {
            n.inputs
                .iter()
                .flatten()
                .filter(|v| producer[v.0].is_some())
                .count()
        })
        .collect();
    let mut ready: BinaryHeap<Reverse<usize>> = waiting
        .iter()
        .enumerate()
        .filter(|(_, w)| **w == 0)
        .map(|(i, _)| Reverse(i))
        .collect();
    let mut order = Vec::with_capacity(g.nodes.len());
    while let Some(Reverse(i)) = ready.pop() {
        order.push(i);
        for o in &g.nodes[i].outputs {
            for &r in &readers[o.0] {
                waiting[r] -= 1;
                if waiting[r] == 0 {
                    ready.push(Reverse(r));
                }
            }
        }
    }
    if order.len() != g.nodes.len() {
        return Err("batching GEMMs left a cycle in the graph".into());
    }
    let mut slots: Vec<Option<Node>> = std::mem::take(&mut g.nodes).into_iter().map(Some).collect();
    g.nodes = order
        .into_iter()
        .map(|i| slots[i].take().expect("each node once"))
        .collect();
    Ok(())
}
