//! Whether a declared dim can be covered by the sample loop, proved from the model.
//!
//! The model is imported with the dim at 1, 2, 3 and the ends of its range. The graphs
//! must have the same nodes and attributes (but the axis-0 extents of the shapes ops
//! carry); every value must either keep its shape (and, if constant, its contents)
//! or have axis 0 scale with the dim (`[k·u, ...]` at k, other axes fixed, a constant
//! repeating its one-sample block): such a value is *marked*. Then each node that reads
//! a marked value must compute each sample's rows from that sample's rows only, which
//! is a property of its op and attributes (a Softmax not along axis 0, a Transpose
//! keeping axis 0 first, a MatMul whose axis 0 is a row or batch axis of the marked
//! operand...), and must mark all its outputs. Then the graph at 1 computes one sample
//! of the graph at any k, and `run` loops over samples.

use std::path::Path;

use super::{SampleLoop, SymbolicDim};
use crate::error::{NncError, Result};
use crate::ir::{Graph, ValueId};
use crate::onnx::proto::ModelProto;
use crate::onnx::ranges::{named_ranges, DimSite};
use crate::onnx::{import_model, ImportOptions, Imported};
use crate::ops::Op;

/// Imports `model` with its declared ranges: the graph for one sample, carrying its
/// [`SymbolicDim`]s and [`SampleLoop`], or an error naming what keeps a dim from
/// varying. A model with unsupported ops comes back as imported at 1, for the caller
/// to report them.
pub fn import_with_ranges(
    model: &ModelProto,
    base_dir: Option<&Path>,
    opts: &ImportOptions,
) -> Result<Imported> {
    let named = named_ranges(model, opts);
    let opts = &named;
    let range = match opts.ranges.as_slice() {
        [] => return import_model(model, base_dir, opts),
        [r] => r,
        [_, _] => return import_samples_of_rows(model, base_dir, opts),
        [first, second, third, ..] => {
            return Err(NncError::Model(format!(
                "dimension '{}': at most two dimensions can vary per library so far (a batch \
                 and a sequence; '{}' and '{}' are declared as ranges too); give the others a \
                 value",
                third.name, first.name, second.name
            )))
        }
    };
    check_range(range, opts)?;
    let sample_loop = import_sample_loop(model, base_dir, opts, range);
    let Err(NncError::Model(by_samples)) = sample_loop else {
        return sample_loop;
    };
    import_by_rows_or_planes(model, base_dir, opts, range).map_err(|e| {
        let message = e.to_string();
        let prefix = format!("dimension '{}': ", range.name);
        let by_rows = message.strip_prefix(&prefix).unwrap_or(&message);
        NncError::Model(format!("{by_samples}; nor can it vary by rows: {by_rows}"))
    })
}

/// `range` varying by rows or, failing that, as the planes of images; the error says
/// why neither works.
fn import_by_rows_or_planes(
    model: &ModelProto,
    base_dir: Option<&Path>,
    opts: &ImportOptions,
    range: &super::DimRange,
) -> Result<Imported> {
    let by_rows = match super::row_extent::import_with_row_extent(model, base_dir, opts, range) {
        Ok(i) => return Ok(i),
        Err(e) => e.to_string(),
    };
    super::planes::import_with_planes(model, base_dir, opts, range).map_err(|e| {
        let prefix = format!("dimension '{}': ", range.name);
        let planes = e.to_string();
        let planes = planes.strip_prefix(&prefix).unwrap_or(&planes).to_string();
        NncError::Model(format!("{by_rows}; nor as an image's planes: {planes}"))
    })
}

/// A range's bounds, and the axis it names.
fn check_range(range: &super::DimRange, opts: &ImportOptions) -> Result<()> {
    if range.min == 0 || range.min > range.max || range.max > super::range::MAX_DIM_VALUE {
        return Err(NncError::Model(format!(
            "dimension '{}': the range {}..{} must have 1 <= MIN <= MAX <= {}",
            range.name,
            range.min,
            range.max,
            super::range::MAX_DIM_VALUE
        )));
    }
    if let DimSite::InputAxis { input, axis } = &range.site {
        let rank = opts.input_shapes.get(input).map_or(0, Vec::len);
        if *axis >= rank {
            return Err(NncError::Model(format!(
                "dimension '{}': input '{input}' has no axis {axis} in --input-shape",
                range.name
            )));
        }
    }
    Ok(())
}

/// Two ranges: one a batch of samples (proved with the other at its maximum), the other
/// the rows of each sample (proved with one sample). The graph is one sample's, by rows;
/// `run` sets the rows' count, then calls it once per sample, each sample's inputs and
/// outputs as many rows long as the run has.
fn import_samples_of_rows(
    model: &ModelProto,
    base_dir: Option<&Path>,
    opts: &ImportOptions,
) -> Result<Imported> {
    let ranges = &opts.ranges;
    for r in ranges {
        check_range(r, opts)?;
    }
    let mut why_not = vec![];
    for (s, r) in [(0, 1), (1, 0)] {
        let at_max = opts.with_range_fixed(r, ranges[r].max);
        let samples = match import_sample_loop(model, base_dir, &at_max, &ranges[s]) {
            Ok(i) if i.unsupported.is_empty() => i,
            Ok(i) => return Ok(i),
            Err(e) => {
                why_not.push(e.to_string());
                continue;
            }
        };
        let one_sample = opts.with_range_fixed(s, 1);
        let mut rows = match import_by_rows_or_planes(model, base_dir, &one_sample, &ranges[r]) {
            Ok(i) => i,
            Err(e) => {
                why_not.push(e.to_string());
                continue;
            }
        };
        let sl = samples
            .graph
            .sample_loop
            .expect("the sample loop's import sets it");
        let g = &mut rows.graph;
        if sl.inputs.len() != g.inputs.len() || sl.outputs.len() != g.outputs.len() {
            why_not.push("the graphs for one sample and for all differ in their inputs".into());
            continue;
        }
        // The ABI numbers dims by first appearance over the inputs' axes.
        let order = appearance_order(model, ranges);
        let index = |i: usize| order.iter().position(|&o| o == i).unwrap_or(i);
        g.dims = (order.iter())
            .map(|&i| SymbolicDim {
                name: ranges[i].name.clone(),
                min: ranges[i].min,
                max: ranges[i].max,
            })
            .collect();
        for d in &mut g.row_dims {
            d.dim = index(r);
        }
        g.sample_loop = Some(SampleLoop {
            dim: index(s),
            ..sl
        });
        return Ok(rows);
    }
    Err(NncError::Model(format!(
        "dimensions '{}' and '{}' can vary together only as a batch of samples each a \
         sequence of rows: {}",
        ranges[0].name,
        ranges[1].name,
        why_not.join("; ")
    )))
}

/// The ranges' indices in order of first appearance over the model's inputs (in the
/// model's order) and their axes.
fn appearance_order(model: &ModelProto, ranges: &[super::DimRange]) -> Vec<usize> {
    use crate::onnx::proto::{tensor_shape_proto::dimension, type_proto};
    let inputs = model.graph.as_ref().map_or(&[][..], |g| g.input.as_slice());
    let position = |r: &super::DimRange| -> (usize, usize) {
        for (i, input) in inputs.iter().enumerate() {
            if let DimSite::InputAxis { input: name, axis } = &r.site {
                if &input.name == name {
                    return (i, *axis);
                }
            }
            let Some(type_proto::Value::TensorType(t)) =
                input.r#type.as_ref().and_then(|t| t.value.as_ref())
            else {
                continue;
            };
            let dims = t.shape.as_ref().map_or(&[][..], |s| s.dim.as_slice());
            for (axis, d) in dims.iter().enumerate() {
                if matches!(&d.value, Some(dimension::Value::DimParam(p)) if *p == r.name) {
                    return (i, axis);
                }
            }
        }
        (usize::MAX, usize::MAX)
    };
    let mut order: Vec<usize> = (0..ranges.len()).collect();
    order.sort_by_key(|&i| position(&ranges[i]));
    order
}

/// The sample loop's import (see the module doc).
fn import_sample_loop(
    model: &ModelProto,
    base_dir: Option<&Path>,
    opts: &ImportOptions,
    range: &super::DimRange,
) -> Result<Imported> {
    let at = |k: usize| {
        import_model(model, base_dir, &opts.bound(&[k])).map_err(|e| {
            NncError::Model(format!(
                "dimension '{}': importing the model with it at {k} fails: {e}",
                range.name
            ))
        })
    };
    let mut one = at(1)?;
    if !one.unsupported.is_empty() {
        return Ok(one);
    }
    // 2 and 3 show how values scale; the range's ends catch what changes further out
    // (a slice of the first 3 samples, a branch on the batch size).
    let mut values = vec![2, 3, range.min, range.max];
    values.retain(|&k| k > 1);
    values.sort_unstable();
    values.dedup();
    let mut others = vec![];
    for k in values {
        others.push((k, at(k)?.graph));
    }
    let two = &others[0].1;
    let why = |m: String| NncError::Model(format!("dimension '{}': {m}", range.name));
    let g = &one.graph;
    for (_, other) in &others {
        same_structure(g, other, without_sample_extent).map_err(why)?;
    }
    let marked = mark_values(g, &others).map_err(why)?;
    if !g.inputs.iter().any(|i| marked[i.0]) {
        return Err(why(match &range.site {
            DimSite::Param => "no input of the model has an axis with this name".into(),
            DimSite::InputAxis { input, axis } => {
                format!("axis {axis} of input '{input}' is not a leading (sample) axis")
            }
        }));
    }
    for node in &two.nodes {
        crate::ops::along_axis::check_node(two, node, &marked, 0).map_err(|m| {
            why(format!(
                "node '{}' ({}) {m}; only a batch-like dimension (axis 0, samples computed \
                 independently) can vary so far",
                node.name, node.onnx_op
            ))
        })?;
    }
    let per_sample_limit = opts.limits.max_tensor_bytes / range.max as u64;
    for &v in g.inputs.iter().chain(&g.outputs) {
        if marked[v.0] && g.ty(v).dtype.bits() % 8 != 0 {
            return Err(why(format!(
                "'{}' is {}, packed across samples: only whole-byte element types can hold samples",
                g.value(v).name,
                g.ty(v).dtype
            )));
        }
        let bytes = g.ty(v).checked_extent_bytes().unwrap_or(u64::MAX);
        if marked[v.0] && bytes > per_sample_limit {
            return Err(why(format!(
                "'{}' would take {} × {bytes} bytes at {}, above --max-tensor-bytes",
                g.value(v).name,
                range.max,
                range.max
            )));
        }
    }
    let mark = |vs: &[ValueId]| vs.iter().map(|v| marked[v.0]).collect();
    let sample_loop = SampleLoop {
        dim: 0,
        inputs: mark(&g.inputs),
        outputs: mark(&g.outputs),
    };
    one.graph.dims = vec![SymbolicDim {
        name: range.name.clone(),
        min: range.min,
        max: range.max,
    }];
    one.graph.sample_loop = Some(sample_loop);
    Ok(one)
}

/// The same values, nodes, ops and wiring: only shapes and contents may differ, and
/// the attributes `blank` blanks.
pub(super) fn same_structure(
    a: &Graph,
    b: &Graph,
    blank: fn(&Op) -> String,
) -> std::result::Result<(), String> {
    let differs = || "the model's graph changes with it (different nodes)".to_string();
    if a.nodes.len() != b.nodes.len() {
        // The first ONNX node imported as more or fewer nodes: an op unrolled over the
        // dim (an RNN, GRU or LSTM that nnc does not run as one loop).
        let at = (a.nodes.iter().zip(&b.nodes)).position(|(x, y)| x.name != y.name);
        let node = at.map_or(a.nodes.last(), |i| a.nodes.get(i));
        return Err(match node {
            Some(n) => format!(
                "node '{}' ({}) is imported as a different number of nodes at different \
                 values (unrolled over the dim)",
                n.name, n.onnx_op
            ),
            None => differs(),
        });
    }
    if a.values.len() != b.values.len() || a.inputs != b.inputs || a.outputs != b.outputs {
        return Err(differs());
    }
    for (x, y) in a.nodes.iter().zip(&b.nodes) {
        if x.inputs != y.inputs
            || x.outputs != y.outputs
            || x.onnx_op != y.onnx_op
            || blank(&x.op) != blank(&y.op)
        {
            return Err(format!(
                "node '{}' ({}) is imported differently at different values",
                x.name, x.onnx_op
            ));
        }
    }
    Ok(())
}

/// `op` with the axis-0 extent of the shapes its attributes carry (Reshape, Expand and
/// Slice targets, Resize sizes) blanked, as text: the attributes that may differ between
/// imports at different values (the values' marks check those extents). Any other
/// attribute folded from the dim (a Slice start, a pad) must not differ.
fn without_sample_extent(op: &Op) -> String {
    let mut op = op.clone();
    match &mut op {
        Op::Reshape { shape } | Op::Expand { shape } | Op::Slice { shape, .. } => {
            if let Some(d) = shape.first_mut() {
                *d = 0;
            }
        }
        Op::Resize(r) => {
            if let Some(d) = r.output_shape.first_mut() {
                *d = 0;
            }
        }
        _ => {}
    }
    format!("{op:?}")
}

/// Per value: does axis 0 hold the samples (`[k·u, ...]` in the graph at `k`)? Errors
/// on a value the dim reaches any other way.
fn mark_values(one: &Graph, others: &[(usize, Graph)]) -> std::result::Result<Vec<bool>, String> {
    // Constants no node reads (shape chains folded into attributes) may differ freely.
    let read = super::read_values(one);
    let mut marked = vec![false; one.values.len()];
    for (i, m) in marked.iter_mut().enumerate() {
        let v = ValueId(i);
        if one.constant(v).is_some() && !read[i] {
            continue;
        }
        let s1 = one.ty(v).shape.as_slice();
        let name = &one.value(v).name;
        let c1 = one.constant(v);
        if others.iter().all(|(_, g)| g.ty(v).shape == s1) {
            let same = others.iter().all(|(_, g)| match (c1, g.constant(v)) {
                (Some(a), Some(b)) => a == b,
                (None, None) => true,
                _ => false,
            });
            if !same {
                return Err(format!("the value '{name}' is computed from it"));
            }
            continue;
        }
        for (k, g) in others {
            let sk = g.ty(v).shape.as_slice();
            let scales = !s1.is_empty()
                && s1[0] > 0
                && sk.len() == s1.len()
                && sk[0] == k * s1[0]
                && s1[1..] == sk[1..];
            if !scales {
                return Err(format!(
                    "the value '{name}' has shape {s1:?} with it at 1 and {sk:?} at {k}: the \
                     dimension reaches an axis other than a leading factor of axis 0"
                ));
            }
            let repeats = match (c1, g.constant(v)) {
                (Some(a), Some(b)) => b.to_le_bytes() == a.to_le_bytes().repeat(*k),
                (None, None) => true,
                _ => false,
            };
            if !repeats {
                return Err(format!(
                    "the constant '{name}' differs between samples (it is computed from the dimension)"
                ));
            }
        }
        *m = true;
    }
    Ok(marked)
}
