//! Constant folding: a node whose inputs are all constant is evaluated with the
//! reference interpreter and its outputs become constants. Walking the nodes in order
//! folds whole chains (shape arithmetic: Shape → Gather → Concat → Reshape...) in one
//! pass. Outputs much larger than the inputs (an Expand of a scalar, say) are not
//! materialized: they would only grow the weights.

use super::dce;
use crate::interp::eval_op;
use crate::ir::Graph;

/// Elements a folded node may produce beyond 4× what it reads.
const MAX_GROWTH_ELEMS: usize = 1 << 16;

pub fn run(g: &mut Graph) -> Result<(), String> {
    let mut folded = vec![false; g.nodes.len()];
    for i in 0..g.nodes.len() {
        let n = &g.nodes[i];
        if n.inputs.iter().flatten().any(|v| g.constant(*v).is_none()) {
            continue;
        }
        if n.inputs.iter().flatten().next().is_none() {
            continue;
        }
        let read: usize = n.inputs.iter().flatten().map(|v| g.ty(*v).numel()).sum();
        let written: usize = n.outputs.iter().map(|v| g.ty(*v).numel()).sum();
        if written > 4 * read + MAX_GROWTH_ELEMS {
            continue;
        }
        let inputs: Vec<_> = n
            .inputs
            .iter()
            .map(|v| v.and_then(|v| g.constant(v)))
            .collect();
        let Ok(outs) = eval_op(&n.op, &inputs) else {
            // Left for run time, where the generated code reports it the same way.
            continue;
        };
        let outputs = n.outputs.clone();
        for (o, t) in outputs.into_iter().zip(outs) {
            g.values[o.0].constant = Some(t);
        }
        folded[i] = true;
    }
    let mut f = folded.into_iter();
    g.nodes.retain(|_| !f.next().unwrap_or(false));
    dce::run(g)
}
