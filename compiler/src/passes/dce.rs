//! Dead-node elimination: nodes none of whose outputs is read (by a node or as a graph
//! output) are removed, from the last node back so whole dead chains go at once.

use crate::ir::Graph;

pub fn run(g: &mut Graph) -> Result<(), String> {
    let mut live = vec![false; g.values.len()];
    for o in &g.outputs {
        live[o.0] = true;
    }
    let mut keep = vec![false; g.nodes.len()];
    for (i, n) in g.nodes.iter().enumerate().rev() {
        if n.outputs.iter().any(|o| live[o.0]) {
            keep[i] = true;
            for v in n.inputs.iter().flatten() {
                live[v.0] = true;
            }
        }
    }
    let mut k = keep.into_iter();
    g.nodes.retain(|_| k.next().unwrap_or(true));
    Ok(())
}
