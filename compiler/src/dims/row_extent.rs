//! The *row* strategy: a dim on an axis that only unit axes precede (a sequence's
//! `[1, seq, d]` in a one-sample graph, a token list `[seq]`), where every node the
//! dim reaches computes each row of its output from the same row of its inputs
//! (embeddings, MatMul by weights, LayerNorm, elementwise ops...).
//!
//! The graph is the one imported with the dim at its maximum. Its inputs' varying
//! axis gets the run-time extent held by a count value that `run` writes from
//! `options->dims` (`infer` writes the maximum), so every node reading them runs on the
//! actual rows ([`crate::ops::rows`]); the memory plan is the maximum's. The model is
//! also imported at 1, 2, 3, the range's minimum and a value inside it: the graphs must
//! have the same nodes, every value must keep its shape (and contents) or grow along
//! axes whose extent is the dim, a constant the dim reaches (position ids, their
//! embeddings) must hold at each value the first rows of the maximum's, and the values
//! that grow must be exactly those the run-time extents reach, along the same axis.
//! Multi-head attention is fused first ([`crate::passes::heads_attention`]): its
//! queries and keys are the same rows, counted by the same value.

use std::path::Path;

use super::range::DimRange;
use super::sample_loop::same_structure;
use super::{RowDim, SymbolicDim};
use crate::error::{NncError, Result};
use crate::ir::{DType, Graph, RunExtent, TensorType, ValueId};
use crate::onnx::proto::ModelProto;
use crate::onnx::{import_model, ImportOptions, Imported};
use crate::ops::rows;

/// Imports `model` with `range` varying by rows (see the module doc): the graph at the
/// range's maximum with the count and the extents set, or why the dim cannot vary so.
pub fn import_with_row_extent(
    model: &ModelProto,
    base_dir: Option<&Path>,
    opts: &ImportOptions,
    range: &DimRange,
) -> Result<Imported> {
    let why = |m: String| NncError::Model(format!("dimension '{}': {m}", range.name));
    // Attention heads split off a sequence would put its rows behind the head axis:
    // fused, the heads are read in place.
    let at = |k: usize| {
        let mut imported = import_model(model, base_dir, &opts.bound(&[k]))
            .map_err(|e| why(format!("importing the model with it at {k} fails: {e}")))?;
        crate::passes::heads_attention::run(&mut imported.graph)
            .map_err(|e| why(format!("fusing attention heads with it at {k}: {e}")))?;
        Ok::<_, NncError>(imported)
    };
    let mut top = at(range.max)?;
    if !top.unsupported.is_empty() {
        return Ok(top);
    }
    let mut values = vec![1, 2, 3, range.min, (range.min + range.max) / 2];
    values.retain(|&k| k < range.max);
    values.sort_unstable();
    values.dedup();
    let mut others = vec![];
    for k in values {
        others.push((k, at(k)?.graph));
    }
    let g = &mut top.graph;
    for (_, other) in &others {
        same_structure(g, other, without_shapes).map_err(why)?;
    }
    let growth = growth(g, range.max, &others).map_err(why)?;
    let count = g.add_value(
        format!("{} (dim)", range.name),
        TensorType::new(DType::I64, vec![1]),
        None,
    );
    let extent = |axis: usize| RunExtent {
        axes: vec![axis],
        count,
        sizes: vec![],
        whole_shape: false,
    };
    let mut any_input = false;
    for v in g.inputs.clone() {
        if let Some(axis) = growth[v.0] {
            g.values[v.0].run_extent = Some(extent(axis));
            any_input = true;
        }
    }
    if !any_input {
        return Err(why("no input of the model has an axis it sets".into()));
    }
    for (i, grows) in growth.iter().enumerate() {
        if let (Some(axis), true) = (grows, g.values[i].constant.is_some()) {
            g.values[i].run_extent = Some(extent(*axis));
        }
    }
    g.dims = vec![SymbolicDim {
        name: range.name.clone(),
        min: range.min,
        max: range.max,
    }];
    g.row_dims = vec![RowDim::of(0, count)];
    propagate(g).map_err(why)?;
    let read = super::read_values(g);
    for (i, grows) in growth.iter().enumerate() {
        let reached = g.values[i].run_extent.as_ref().map(|e| e.axes.clone());
        if read[i] && reached != grows.map(|a| vec![a]) {
            return Err(why(format!(
                "the value '{}' {} with it, but the rows computed at run time {}",
                g.values[i].name,
                match grows {
                    Some(a) => format!("grows along axis {a}"),
                    None => "stays the same".into(),
                },
                match reached {
                    Some(axes) => format!("reach it along axes {axes:?}"),
                    None => "do not reach it".into(),
                }
            )));
        }
    }
    Ok(top)
}

/// `op` with every entry of the shapes its attributes carry blanked: the attributes
/// that differ between imports at different values (the values' growth checks them).
fn without_shapes(op: &crate::ops::Op) -> String {
    use crate::ops::Op;
    let mut op = op.clone();
    let blank = |s: &mut Vec<usize>| s.iter_mut().for_each(|d| *d = 0);
    match &mut op {
        Op::Reshape { shape } | Op::Expand { shape } | Op::Slice { shape, .. } => blank(shape),
        Op::Resize(r) => blank(&mut r.output_shape),
        _ => {}
    }
    format!("{op:?}")
}

/// Per value of `top` (the graph at `max`): the axis it grows along with the dim (its
/// extent there is the dim's value), `None` when it keeps its shape and contents.
/// Errors on a value the dim reaches any other way.
fn growth(
    top: &Graph,
    max: usize,
    others: &[(usize, Graph)],
) -> std::result::Result<Vec<Option<usize>>, String> {
    let read = super::read_values(top);
    let mut grows = vec![None; top.values.len()];
    for (i, g) in grows.iter_mut().enumerate() {
        let v = ValueId(i);
        // Values no node reads (shape chains folded into attributes, the nodes a fusion
        // replaced) may differ freely.
        if !read[i] && !top.inputs.contains(&v) {
            continue;
        }
        let name = &top.value(v).name;
        let s_max = top.ty(v).shape.as_slice();
        let c_max = top.constant(v);
        let differing: Vec<usize> = (0..s_max.len())
            .filter(|&a| {
                others
                    .iter()
                    .any(|(_, o)| o.ty(v).shape.get(a) != Some(&s_max[a]))
            })
            .collect();
        if differing.is_empty() && others.iter().all(|(_, o)| o.ty(v).rank() == s_max.len()) {
            let same = others.iter().all(|(_, o)| match (c_max, o.constant(v)) {
                (Some(a), Some(b)) => a == b,
                (None, None) => true,
                _ => false,
            });
            if !same {
                return Err(format!("the value '{name}' is computed from it"));
            }
            continue;
        }
        let &[axis] = differing.as_slice() else {
            return Err(format!(
                "the value '{name}' ({}) changes along axes {differing:?} with it; only one axis \
                 of a value can grow with a dim so far",
                top.ty(v)
            ));
        };
        for (k, o) in others {
            let sk = o.ty(v).shape.as_slice();
            let grows_by_rows = s_max[axis] == max
                && sk.len() == s_max.len()
                && sk[axis] == *k
                && (0..s_max.len()).all(|a| a == axis || sk[a] == s_max[a]);
            if !grows_by_rows {
                return Err(format!(
                    "the value '{name}' has shape {s_max:?} with it at {max} and {sk:?} at {k}: \
                     its extent along an axis must be the dim itself"
                ));
            }
            if let Some(c) = c_max {
                let prefix = o
                    .constant(v)
                    .is_some_and(|ck| rows::first_rows(c, axis, *k) == *ck);
                if !prefix {
                    return Err(format!(
                        "the constant '{name}' is computed from it, and at {k} it is not the \
                         first {k} rows of its value at {max}"
                    ));
                }
            }
        }
        if !s_max[..axis].iter().all(|&d| d == 1) {
            return Err(format!(
                "the value '{name}' ({}) grows along axis {axis}, after axes longer than 1: its \
                 rows are not contiguous",
                top.ty(v)
            ));
        }
        *g = Some(axis);
    }
    Ok(grows)
}

/// Sets the run-time extents of every value computed from the graph's inputs and
/// constants that have one, in node order: an elementwise op of one input passes its
/// input's on, a Reshape moving the varying axis past unit axes moves it, a node that
/// runs row by row gives its outputs the rows' extent. Errors name a node that can do
/// none of these.
pub fn propagate(g: &mut Graph) -> std::result::Result<(), String> {
    for k in 0..g.nodes.len() {
        let node = &g.nodes[k];
        let reads = |v: &ValueId| g.value(*v).run_extent.is_some();
        if !node.inputs.iter().flatten().any(reads) {
            continue;
        }
        if super::reads_fewest_rows(g, node) {
            continue;
        }
        let refuse = |m: String| format!("node '{}' ({}): {m}", node.name, node.onnx_op);
        let extents = rows::outputs_extents(g, node).map_err(refuse)?;
        for (o, e) in node.outputs.clone().into_iter().zip(extents) {
            g.values[o.0].run_extent = e;
        }
    }
    Ok(())
}
