//! Constant folding: a node whose inputs are all constant is evaluated with the
//! reference interpreter and its outputs become constants. Walking the nodes in order
//! folds whole chains (shape arithmetic: Shape → Gather → Concat → Reshape...) in one
//! pass. Outputs much larger than the inputs (an Expand of a scalar, say) are not
//! materialized: they would only grow the weights, and neither is anything past
//! `--max-fold-bytes`: it runs in `infer`.

use super::dce;
use crate::interp::eval_op;
use crate::ir::Graph;
use crate::limits::Limits;

/// Elements a folded node may produce beyond 4× what it reads.
const MAX_GROWTH_ELEMS: usize = 1 << 16;

pub fn run(g: &mut Graph, limits: &Limits) -> Result<(), String> {
    let folded: Vec<bool> = (0..g.nodes.len()).map(|i| fold(g, i, limits)).collect();
    let mut f = folded.into_iter();
    g.nodes.retain(|_| !f.next().unwrap_or(false));
    dce::run(g)
}

/// Evaluates node `i` when its inputs are all constant, making its outputs constants;
/// true when it did (the node is then to be removed).
fn fold(g: &mut Graph, i: usize, limits: &Limits) -> bool {
    let n = &g.nodes[i];
    // A symbolic output's extents are the run's: folding at the maxima would lay it
    // out at theirs.
    if n.inputs.iter().flatten().any(|v| g.constant(*v).is_none())
        || n.inputs.iter().flatten().next().is_none()
        || n.outputs.iter().any(|v| g.ty(*v).dims.is_some())
    {
        return false;
    }
    let read: usize = n.inputs.iter().flatten().map(|v| g.ty(*v).numel()).sum();
    let written: usize = n.outputs.iter().map(|v| g.ty(*v).numel()).sum();
    if written > 4 * read + MAX_GROWTH_ELEMS || !limits.may_fold(n.outputs.iter().map(|v| g.ty(*v)))
    {
        return false;
    }
    let inputs: Vec<_> = n
        .inputs
        .iter()
        .map(|v| v.and_then(|v| g.constant(v)))
        .collect();
    let Ok(outs) = eval_op(&n.op, &inputs) else {
        // Left for run time, where the generated code reports it the same way.
        return false;
    };
    let outputs = n.outputs.clone();
    for (o, t) in outputs.into_iter().zip(outs) {
        g.values[o.0].constant = Some(t);
    }
    true
}
