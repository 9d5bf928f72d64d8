//! Nodes that run row by row over an extent only the run knows (see [`crate::ops::rows`]):
//! the graph their code is generated from (each such node's op and row-carrying
//! operands at one row) and the loop `infer` calls them in.

use crate::error::{NncError, Result};
use crate::ir::{Graph, ValueId};
use crate::ops::rows::{row_form, RowForm};

/// How `infer` calls one node's function: once per row of the extent `count` holds
/// (`within` bytes into it), each operand (inputs, then outputs) with `Some(bytes)`
/// advanced by that many bytes per row.
#[derive(Clone, Debug)]
pub struct RowLoop {
    pub count: ValueId,
    pub within: usize,
    pub row_bytes: Vec<Option<usize>>,
    /// Called once for all the rows instead, the count's address its last argument
    /// (a MatMul by constant weights: one GEMM of that many rows), its operands
    /// planned for `bound` rows.
    pub whole: Option<usize>,
}

/// The row loops of a graph, and the graph code is generated from.
pub struct RowLoops {
    /// The graph with each looped node at one row (`None`: no node loops); node `k` is
    /// the graph's node `k`, its row-carrying operands new values at one row.
    pub lowered: Option<Graph>,
    pub loops: Vec<Option<RowLoop>>,
}

/// Finds how every node reading a value whose extent only the run knows handles it:
/// elementwise ops of one input pass the extent on over the whole planned buffer, a
/// MatMul by constant weights runs one GEMM of the actual rows (every GEMM kernel takes
/// its row count at run time), the others run row by row; any other node is refused by
/// name.
pub fn plan(graph: &Graph) -> Result<RowLoops> {
    let mut lowered: Option<Graph> = None;
    let mut loops = vec![None; graph.nodes.len()];
    for (k, node) in graph.nodes.iter().enumerate() {
        let refuse = |m: String| NncError::node(&node.name, &node.onnx_op, m);
        if !crate::ops::rows::reads_run_rows(graph, node) {
            continue;
        }
        if let crate::ops::Op::RnnSequence { .. } = node.op {
            // One call: the recurrence runs over the steps the run counts.
            let e = crate::ops::rows::rnn_steps_extent(graph, node).map_err(refuse)?;
            let xw = node.inputs[0].expect("an LSTM has inputs");
            loops[k] = Some(RowLoop {
                count: e.count,
                within: 0,
                row_bytes: vec![],
                whole: Some(graph.ty(xw).shape[0]),
            });
            continue;
        }
        if let Some((count, bound)) = crate::ops::rows::reads_all_rows(graph, node) {
            // One call over all the rows (its outputs counted by itself).
            loops[k] = Some(RowLoop {
                count,
                within: 0,
                row_bytes: vec![],
                whole: Some(bound),
            });
            continue;
        }
        let lost = (node.outputs.iter()).any(|o| graph.value(*o).run_extent.is_none());
        if lost {
            return Err(refuse(
                "its output lost the run-time extents of its input (a graph pass rewrote it)"
                    .into(),
            ));
        }
        // Over the whole planned buffer.
        if crate::ops::rows::passed_extent(graph, node).is_some() {
            continue;
        }
        let form = match reshaped_rows(graph, node) {
            Some(form) => form,
            None => row_form(graph, node)
                .map_err(refuse)?
                .ok_or_else(|| refuse("no row form".into()))?,
        };
        let mut looped = row_loop(graph, k, &form);
        if one_gemm(graph, node, &form) {
            let a = node.inputs[0].expect("a MatMul has A");
            looped.whole = Some(graph.ty(a).shape[form.input_axes[0].unwrap_or(0)]);
            loops[k] = Some(looped);
            continue;
        }
        let g = lowered.get_or_insert_with(|| graph.clone());
        loops[k] = Some(looped);
        at_one_row(g, k, &form);
    }
    Ok(RowLoops { lowered, loops })
}

/// Whether `node` is a float32 MatMul of row-carrying A (and residual) by constant
/// 2-D weights: its rows are one GEMM's, A's of all rows contiguous.
fn one_gemm(graph: &Graph, node: &crate::ir::Node, form: &RowForm) -> bool {
    let carried = |i: usize| form.input_axes.get(i).copied().flatten().is_some();
    let weights = node.inputs.get(1).copied().flatten();
    matches!(node.op, crate::ops::Op::MatMul(_))
        && node.outputs.len() == 1
        && graph.ty(node.outputs[0]).dtype == crate::ir::DType::F32
        && carried(0)
        && !carried(1)
        && !carried(2)
        && weights.is_some_and(|w| graph.constant(w).is_some() && graph.ty(w).rank() == 2)
        && node.inputs[0].is_some_and(|a| {
            let rank = graph.ty(a).rank();
            form.input_axes[0].is_some_and(|axis| axis + 2 <= rank)
        })
}

fn row_loop(graph: &Graph, k: usize, form: &RowForm) -> RowLoop {
    let node = &graph.nodes[k];
    let row_bytes = |v: ValueId, a| RowForm::row_type(graph.ty(v), a).byte_size();
    let inputs = (node.inputs.iter().zip(&form.input_axes))
        .filter_map(|(v, a)| v.map(|v| a.map(|a| row_bytes(v, a))));
    let outputs = node.outputs.iter().map(|o| Some(row_bytes(*o, form.axis)));
    RowLoop {
        count: form.extent.count,
        within: form.extent.offset_of(form.axis).unwrap_or(0),
        row_bytes: inputs.chain(outputs).collect(),
        whole: None,
    }
}

/// Rewrites node `k` of `g` to compute one row: its op, and new values at one row for
/// its row-carrying inputs and its outputs.
fn at_one_row(g: &mut Graph, k: usize, form: &RowForm) {
    let row_value = |g: &mut Graph, v: ValueId, axis: usize| {
        let info = g.value(v);
        let (name, ty) = (info.name.clone(), RowForm::row_type(&info.ty, axis));
        g.add_value(name, ty, None)
    };
    let inputs = g.nodes[k].inputs.clone();
    for (i, v) in inputs.iter().enumerate() {
        if let (Some(a), Some(v)) = (form.input_axes[i], v) {
            let r = row_value(g, *v, a);
            g.nodes[k].inputs[i] = Some(r);
        }
    }
    let outputs = g.nodes[k].outputs.clone();
    for (j, o) in outputs.iter().enumerate() {
        let r = row_value(g, *o, form.axis);
        g.nodes[k].outputs[j] = r;
    }
    g.nodes[k].op = form.op.clone();
}

/// A Reshape adding or removing unit axes before the rows (see
/// [`crate::ops::rows::reshaped_extent`]) run row by row: one row of its input becomes
/// one row of its output, along the output's axis.
fn reshaped_rows(graph: &Graph, node: &crate::ir::Node) -> Option<RowForm> {
    let extent = crate::ops::rows::reshaped_extent(graph, &node.op, &node.inputs)?;
    let x = node.inputs.first().copied().flatten()?;
    let input_axis = *graph.value(x).run_extent.as_ref()?.axes.first()?;
    let axis = *extent.axes.first()?;
    let mut shape = graph.ty(*node.outputs.first()?).shape.clone();
    shape[axis] = 1;
    Some(RowForm {
        op: crate::ops::Op::Reshape { shape },
        inputs: vec![true],
        extent,
        input_axes: vec![Some(input_axis)],
        axis,
    })
}
