//! A graph over symbolic shapes whose one dim is a batch, as one sample's static
//! graph that `run` calls once per sample ([`crate::ir::run_dims::SampleLoop`]): the
//! kernels of a library compiled for one sample, with no extent computed at run time.
//!
//! It applies where every value that varies holds its samples on axis 0 (`k · batch`
//! rows, each sample's `k` contiguous, every other axis fixed) and every node computes
//! each sample from that sample alone ([`crate::ops::along_axis`]); the graph at
//! `batch = 1` ([`crate::ops::instantiate::at_values`]) is then one sample's.

use crate::ir::dim::SymbolKind;
use crate::ir::run_dims::SampleLoop;
use crate::ir::Graph;
use crate::ops::Op;

/// One sample's graph and the loop over the samples, or why the graph's dim is not a
/// batch of independent samples.
pub fn per_sample_graph(graph: &Graph) -> Result<Graph, String> {
    let [(batch, symbol)] = graph.symbols.iter().collect::<Vec<_>>()[..] else {
        return Err("not one dim".into());
    };
    if symbol.kind != SymbolKind::Dim || graph.dims.len() != 1 {
        return Err("not one dim".into());
    }
    if !graph.dim_checks.is_empty() {
        return Err("the run checks facts about the dim".into());
    }
    let mut marked = vec![false; graph.values.len()];
    for (i, v) in graph.values.iter().enumerate() {
        if v.dim_elements.is_some() {
            // Extents used as data: the sample's graph would hold them at one sample.
            continue;
        }
        let Some(dims) = &v.ty.dims else { continue };
        let leading = dims.first().and_then(|d| d.as_scaled_symbol());
        let rest_fixed = dims.iter().skip(1).all(|d| d.is_const());
        match leading {
            Some((_, s)) if s == batch && rest_fixed => marked[i] = true,
            _ => return Err(format!("'{}' varies other than along axis 0", v.name)),
        }
    }
    for node in &graph.nodes {
        let reads_extents =
            (node.inputs.iter().flatten()).any(|v| graph.value(*v).dim_elements.is_some());
        if reads_extents || matches!(node.op, Op::DimValues { .. }) {
            return Err(format!("node '{}' reads extents as data", node.name));
        }
        crate::ops::along_axis::check_node(graph, node, &marked, 0)
            .map_err(|m| format!("node '{}' ({}) {m}", node.name, node.onnx_op))?;
    }
    let whole_bytes = |v: &crate::ir::ValueId| graph.ty(*v).dtype.bits().is_multiple_of(8);
    if (graph.inputs.iter().chain(&graph.outputs)).any(|v| marked[v.0] && !whole_bytes(v)) {
        return Err("a value packed across samples".into());
    }
    if !graph.inputs.iter().any(|v| marked[v.0]) {
        return Err("no input holds samples".into());
    }
    // One sample, though the caller may pass at least `min` of them.
    let mut one = crate::ops::instantiate::at_values(graph, &[1])?;
    let mark = |vs: &[crate::ir::ValueId]| vs.iter().map(|v| marked[v.0]).collect();
    one.sample_loop = Some(SampleLoop {
        dim: 0,
        inputs: mark(&graph.inputs),
        outputs: mark(&graph.outputs),
    });
    Ok(one)
}
