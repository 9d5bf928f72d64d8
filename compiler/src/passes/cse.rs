//! Common-subexpression elimination. Constants with the same type and bytes are
//! deduplicated first (every read goes to the first of them); then a node with the same
//! op, attributes and inputs as an earlier one is dropped and its readers read the
//! earlier node's outputs. Nodes producing a graph output are kept (the output keeps
//! its name), but later duplicates of them still merge into them.

use std::collections::HashMap;

use super::{dce, util};
use crate::ir::{Graph, ValueId};

pub fn run(g: &mut Graph) -> Result<(), String> {
    dedup_constants(g);
    let mut seen: HashMap<(String, Vec<Option<ValueId>>), Vec<ValueId>> = HashMap::new();
    let mut dropped = Vec::with_capacity(g.nodes.len());
    for i in 0..g.nodes.len() {
        let n = &g.nodes[i];
        dropped.push(false);
        // Op's Debug form spells out its attributes; f32 attributes print exactly.
        let key = (format!("{:?}", n.op), n.inputs.clone());
        match seen.get(&key) {
            Some(first) if !n.outputs.iter().any(|o| util::is_output(g, *o)) => {
                let pairs: Vec<(ValueId, ValueId)> = n
                    .outputs
                    .iter()
                    .copied()
                    .zip(first.iter().copied())
                    .collect();
                for (from, to) in pairs {
                    util::replace_uses(g, from, to);
                }
                *dropped.last_mut().expect("pushed above") = true;
            }
            Some(_) => {}
            None => {
                seen.insert(key, n.outputs.clone());
            }
        }
    }
    let mut d = dropped.into_iter();
    g.nodes.retain(|_| !d.next().unwrap_or(false));
    dce::run(g)
}

/// Points every read of a constant at the first constant with the same type and bytes.
fn dedup_constants(g: &mut Graph) {
    let mut by_content: HashMap<(String, Vec<u8>), ValueId> = HashMap::new();
    let mut canon: Vec<Option<ValueId>> = vec![None; g.values.len()];
    let used = util::use_counts(g);
    for (i, v) in g.values.iter().enumerate() {
        let Some(t) = &v.constant else { continue };
        if used[i] == 0 {
            continue;
        }
        let key = (v.ty.to_string(), t.to_le_bytes());
        let first = *by_content.entry(key).or_insert(ValueId(i));
        if first.0 != i {
            canon[i] = Some(first);
        }
    }
    for n in &mut g.nodes {
        for v in n.inputs.iter_mut().flatten() {
            if let Some(c) = canon[v.0] {
                *v = c;
            }
        }
    }
}
