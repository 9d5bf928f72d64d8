//! The *planes* strategy: a dim on spatial axes of an image (`[1, 3, size, size]`, a
//! text line's `[1, 1, 32, width]`) whose every value in range the library runs
//! exactly, each value stored densely at its actual extents.
//!
//! The graph is the one imported with the dim at its maximum, its memory planned
//! there. A value the dim reaches carries a [`RunExtent`] whose `sizes` give each
//! varying axis's extent as an [`ExtentExpr`] of the dim: the inputs' axes are the dim
//! itself, a Conv or a windowed pool maps them through its output-size formula, an
//! elementwise op keeps them, a global pool ends them. Nodes reading such values run
//! once per call with the dim's count and compute every extent from it
//! (`codegen::lower::planes`). The model is also imported at other values in range:
//! the graphs must have the same nodes, and every value's shape there must be the one
//! its extents predict (the others keeping shape and contents), which checks each
//! formula against the importer's own shape inference.

use std::path::Path;

use super::range::DimRange;
use super::sample_loop::same_structure;
use super::{RowDim, SymbolicDim};
use crate::error::{NncError, Result};
use crate::ir::{DType, ExtentExpr, Graph, Node, RunExtent, TensorType, ValueId};
use crate::onnx::proto::ModelProto;
use crate::onnx::{import_model, ImportOptions, Imported};
use crate::ops::{rows, BinaryOp, Op, PoolAttrs, PoolKind};

/// Imports `model` with `range` varying the planes of its images (see the module doc).
pub fn import_with_planes(
    model: &ModelProto,
    base_dir: Option<&Path>,
    opts: &ImportOptions,
    range: &DimRange,
) -> Result<Imported> {
    let why = |m: String| NncError::Model(format!("dimension '{}': {m}", range.name));
    // The graph passes first: batch norms and activations fused into the convs leave
    // only ops with planes for the analysis.
    let at = |k: usize| {
        let mut imported = import_model(model, base_dir, &opts.bound(&[k]))
            .map_err(|e| why(format!("importing the model with it at {k} fails: {e}")))?;
        if imported.unsupported.is_empty() {
            crate::passes::PassManager::for_any_plane_size()
                .run(&mut imported.graph)
                .map_err(|e| why(format!("the graph passes with it at {k}: {e}")))?;
        }
        Ok::<_, NncError>(imported)
    };
    let mut top = at(range.max)?;
    if !top.unsupported.is_empty() {
        return Ok(top);
    }
    let mut values = vec![
        range.min,
        range.min + 1,
        range.min + 2,
        (range.min + range.max) / 2,
        range.max.saturating_sub(1),
    ];
    values.retain(|&k| k >= range.min && k < range.max);
    values.sort_unstable();
    values.dedup();
    let mut others = vec![];
    for k in values {
        others.push((k, at(k)?.graph));
    }
    let g = &mut top.graph;
    for (_, other) in &others {
        same_structure(g, other, without_window_sizes).map_err(why)?;
    }
    let count = g.add_value(
        format!("{} (dim)", range.name),
        TensorType::new(DType::I64, vec![1]),
        None,
    );
    let mut any_input = false;
    for v in g.inputs.clone() {
        let axes = input_axes(g, v, range.max, &others).map_err(why)?;
        if !axes.is_empty() {
            g.values[v.0].run_extent = Some(RunExtent {
                sizes: vec![ExtentExpr::dim(); axes.len()],
                axes,
                count,
                whole_shape: false,
            });
            any_input = true;
        }
    }
    if !any_input {
        return Err(why("no input of the model has an axis it sets".into()));
    }
    g.row_dims = vec![RowDim::of(0, count)];
    for k in 0..g.nodes.len() {
        let node = &g.nodes[k].clone();
        let extent_of = |v: &ValueId| g.value(*v).run_extent.as_ref();
        if !node.inputs.iter().flatten().any(|v| extent_of(v).is_some()) {
            continue;
        }
        let refuse = |m: String| why(format!("node '{}' ({}): {m}", node.name, node.onnx_op));
        let on_planes =
            (node.inputs.iter().flatten()).any(|v| extent_of(v).is_some_and(RunExtent::is_planes));
        let extents = if on_planes {
            let extent = output_planes(g, node).map_err(refuse)?;
            let extent = match extent.as_ref().and_then(|e| as_rows(g, node, e)) {
                Some((axis, size)) => Some(rows_of(g, count, axis, size)),
                None => extent,
            };
            vec![extent; node.outputs.len()]
        } else if super::reads_fewest_rows(g, node) {
            continue;
        } else {
            rows::outputs_extents(g, node).map_err(refuse)?
        };
        for (o, e) in node.outputs.clone().into_iter().zip(extents) {
            g.values[o.0].run_extent = e;
        }
    }
    check_predictions(g, &others).map_err(why)?;
    check_sizes(g, range).map_err(why)?;
    g.dims = vec![SymbolicDim {
        name: range.name.clone(),
        min: range.min,
        max: range.max,
    }];
    Ok(top)
}

/// Where a Transpose or Reshape of planes leaves one varying axis with only unit axes
/// before it (a CRNN's `[1, C, 1, w]` columns made a sequence `[w, 1, C]`): that axis
/// and its extent. Its output is then rows, which the nodes after it run on as the row
/// strategy's do, counted by a count holding that extent.
fn as_rows(g: &Graph, node: &Node, e: &RunExtent) -> Option<(usize, ExtentExpr)> {
    if !matches!(node.op, Op::Transpose { .. } | Op::Reshape { .. }) {
        return None;
    }
    let (&[axis], [size]) = (e.axes.as_slice(), e.sizes.as_slice()) else {
        return None;
    };
    let shape = &g.ty(*node.outputs.first()?).shape;
    shape[..axis]
        .iter()
        .all(|&d| d == 1)
        .then(|| (axis, size.clone()))
}

/// Rows along `axis` counted by the count of the dim's extent `size`: the dim's own
/// count, or one computed from it (added to the graph's row dims once per extent).
fn rows_of(g: &mut Graph, dim_count: ValueId, axis: usize, size: ExtentExpr) -> RunExtent {
    let count = match g.row_dims.iter().find(|d| d.size == size) {
        Some(d) => d.count,
        None => {
            let name = format!("{} → {size} (dim)", g.value(dim_count).name);
            let c = g.add_value(name, TensorType::new(DType::I64, vec![1]), None);
            g.row_dims.push(RowDim {
                dim: 0,
                count: c,
                size,
            });
            c
        }
    };
    RunExtent {
        axes: vec![axis],
        count,
        whole_shape: false,
        sizes: vec![],
    }
}

/// The extent of each axis of `e` (the planes' own, or for rows their count's).
fn axis_sizes<'a>(g: &'a Graph, e: &'a RunExtent) -> Vec<(usize, &'a ExtentExpr)> {
    let counted = g.row_dims.iter().find(|d| d.count == e.count);
    (e.axes.iter().enumerate())
        .filter_map(|(i, &a)| Some((a, e.sizes.get(i).or(counted.map(|d| &d.size))?)))
        .collect()
}

/// `op` with the sizes that follow the planes blanked (a global pool's kernel, a pool's
/// output size, a Reshape's target): the predictions check them.
fn without_window_sizes(op: &Op) -> String {
    let mut op = op.clone();
    if let Op::Pool(p) = &mut op {
        // A global pool's window is the plane: stride 1, no pads, one output.
        let global = (p.strides.iter().all(|&s| s == 1) && p.pads.iter().all(|&d| d == 0))
            && p.output_spatial.iter().all(|&d| d == 1);
        if global {
            p.kernel.iter_mut().for_each(|d| *d = 0);
        }
        p.output_spatial.iter_mut().for_each(|d| *d = 0);
    }
    if let Op::Reshape { shape } = &mut op {
        shape.iter_mut().for_each(|d| *d = 0);
    }
    format!("{op:?}")
}

/// The axes of input `v` that are the dim: `max` long in `top`, `k` long in the graph
/// imported at `k`.
fn input_axes(
    top: &Graph,
    v: ValueId,
    max: usize,
    others: &[(usize, Graph)],
) -> std::result::Result<Vec<usize>, String> {
    let s = &top.ty(v).shape;
    let mut axes = vec![];
    for a in 0..s.len() {
        if others
            .iter()
            .all(|(_, o)| o.ty(v).shape.get(a) == Some(&s[a]))
        {
            continue;
        }
        let follows = s[a] == max
            && (others.iter()).all(|(k, o)| o.ty(v).rank() == s.len() && o.ty(v).shape[a] == *k);
        if !follows {
            return Err(format!(
                "input '{}' ({}) changes along axis {a} other than as the dim itself",
                top.value(v).name,
                top.ty(v)
            ));
        }
        axes.push(a);
    }
    if !axes.is_empty() && axes[0] < 2 {
        return Err(format!(
            "input '{}' ({}) varies along axis {}: an image's planes are its axes after the \
             batch and the channels",
            top.value(v).name,
            top.ty(v),
            axes[0]
        ));
    }
    Ok(axes)
}

/// The planes of `node`'s outputs (`None`: fixed again, after a global pool), or why
/// the node cannot run on planes whose size only the run knows.
fn output_planes(g: &Graph, node: &Node) -> std::result::Result<Option<RunExtent>, String> {
    let extent_of = |v: ValueId| g.value(v).run_extent.as_ref();
    // A binary op may carry the planes in either operand (`Mul(scale, x)`).
    let x = match node.op {
        Op::Binary(_) => (node.inputs.iter().flatten().copied()).find(|v| extent_of(*v).is_some()),
        _ => node.inputs.first().copied().flatten(),
    };
    let first = x.and_then(extent_of);
    let cannot = || {
        Err(format!(
            "{} cannot run on planes whose size is known only at run time (only Conv, pools, \
             elementwise ops of planes of one size, global pools, Reshapes adding or removing \
             unit axes and Transposes can so far)",
            node.op.name()
        ))
    };
    let Some(e) = first else {
        return cannot();
    };
    let (x, dtype) = (x.expect("an input"), g.ty(x.expect("an input")).dtype);
    if dtype != DType::F32 || !e.is_planes() || e.whole_shape {
        return cannot();
    }
    let others_fixed =
        |from: usize| (node.inputs.iter().skip(from).flatten()).all(|v| extent_of(*v).is_none());
    // A Transpose may have moved the planes to the batch or channel axis.
    if matches!(node.op, Op::Conv(_) | Op::Pool(_)) && e.axes.iter().any(|&a| a < 2) {
        return Err(format!(
            "its input '{}' ({}) varies along its batch or channel axis, not only its planes",
            g.value(x).name,
            g.ty(x)
        ));
    }
    match &node.op {
        Op::Conv(c) => {
            let sp = c.kernel.len();
            let mut out = e.clone();
            for (i, &a) in e.axes.iter().enumerate() {
                let s = a - 2;
                let span = (c.dilations[s] * (c.kernel[s] - 1) + 1) as i64;
                let pads = (c.pads[s] + c.pads[s + sp]) as i64;
                out.sizes[i] = e.sizes[i].window(pads, span, c.strides[s] as u64, false);
            }
            // A fused residual is shaped like the output.
            let residual_ok = node.inputs.get(3).copied().flatten().is_none_or(|r| {
                extent_of(r) == Some(&out) && g.ty(r).shape == g.ty(node.outputs[0]).shape
            });
            let params = &node.inputs[1..node.inputs.len().min(3)];
            if params.iter().flatten().any(|v| extent_of(*v).is_some()) {
                return Err("its weights or bias vary with the planes".into());
            }
            if !residual_ok {
                return Err("its residual's planes differ from its output's".into());
            }
            Ok(Some(out))
        }
        Op::Pool(p) => {
            if !others_fixed(1) || matches!(p.kind, PoolKind::Lp { .. }) {
                return cannot();
            }
            pool_planes(g.ty(x), e, p)
        }
        // Dense at the actual extents before and after: the same bytes.
        Op::Reshape { shape } => squeezed_planes(&g.ty(x).shape, shape, e).map(Some),
        Op::Transpose { perm } => {
            let mut moved: Vec<(usize, ExtentExpr)> = (e.axes.iter().zip(&e.sizes))
                .map(|(&a, size)| (perm.iter().position(|&p| p == a).unwrap_or(a), size.clone()))
                .collect();
            moved.sort_by_key(|(a, _)| *a);
            Ok(Some(RunExtent {
                axes: moved.iter().map(|(a, _)| *a).collect(),
                sizes: moved.into_iter().map(|(_, s)| s).collect(),
                ..e.clone()
            }))
        }
        op if op.passes_run_extent(dtype) && node.inputs.len() == 1 => Ok(Some(e.clone())),
        Op::Binary(_) | Op::Where => {
            // Over the whole planned buffer: every operand with planes has these, and
            // the others are scalars.
            let out = &g.ty(node.outputs[0]).shape;
            let same = node.inputs.iter().flatten().all(|v| match extent_of(*v) {
                Some(ev) => ev == e && g.ty(*v).shape == *out,
                None => g.ty(*v).numel() == 1,
            });
            let per_plane = match node.op {
                Op::Binary(op) => broadcasts_per_plane(g, node, op),
                _ => false,
            };
            if !same && !per_plane {
                return Err(format!(
                    "{} reads planes of different sizes, or broadcasts a tensor over them \
                     other than one value per plane (`[N, C, 1, 1]`) or a scalar",
                    node.op.name()
                ));
            }
            Ok(Some(e.clone()))
        }
        _ => cannot(),
    }
}

/// The planes of a Reshape of planes `e` from `from` to `to` that only adds or removes
/// unit axes (a CRNN's height of 1 squeezed away): each varying axis keeps its place
/// among the axes longer than 1.
fn squeezed_planes(
    from: &[usize],
    to: &[usize],
    e: &RunExtent,
) -> std::result::Result<RunExtent, String> {
    let axes: Option<Vec<usize>> = (e.axes.iter())
        .map(|&x| rows::moved_long_axis(from, to, x))
        .collect();
    match axes {
        Some(axes) => Ok(RunExtent { axes, ..e.clone() }),
        _ => Err(format!(
            "a Reshape of planes whose size only the run knows, from {from:?} to {to:?}, must \
             only add or remove axes of 1"
        )),
    }
}

/// Whether `node` is a float32 binary op of planes by a fixed operand holding one value
/// per plane (`[N, C, 1, 1]`, `[C, 1, 1]`: a squeeze-and-excitation scale, a
/// per-channel bias): exactly one operand carries planes, shaped like the output.
fn broadcasts_per_plane(graph: &Graph, node: &Node, op: BinaryOp) -> bool {
    let vectorizable = matches!(
        op,
        BinaryOp::Add
            | BinaryOp::Sub
            | BinaryOp::Mul
            | BinaryOp::Div
            | BinaryOp::Max
            | BinaryOp::Min
    );
    let ([Some(a), Some(b)], Some(&y)) = (node.inputs.as_slice(), node.outputs.first()) else {
        return false;
    };
    let out = graph.ty(y);
    let planes = |v: ValueId| {
        graph
            .value(v)
            .run_extent
            .as_ref()
            .is_some_and(|e| e.is_planes())
    };
    let (x, s) = match (planes(*a), planes(*b)) {
        (true, false) => (*a, *b),
        (false, true) => (*b, *a),
        _ => return false,
    };
    let (xt, st) = (graph.ty(x), graph.ty(s));
    let rank = out.rank();
    let per_plane = st.rank() <= rank
        && st.shape.iter().rev().enumerate().all(|(from_end, &d)| {
            let axis = rank - 1 - from_end;
            d == 1 || (axis < 2 && d == out.shape[axis])
        });
    vectorizable
        && rank >= 3
        && out.dtype == DType::F32
        && st.dtype == DType::F32
        && xt.shape == out.shape
        && per_plane
}

/// A pool's output planes: none after a global pool (its window the whole plane), else
/// each axis through the window formula, rounded down or, `ceil_mode`, up.
fn pool_planes(
    x: &TensorType,
    e: &RunExtent,
    p: &PoolAttrs,
) -> std::result::Result<Option<RunExtent>, String> {
    let sp = p.kernel.len();
    let global = (e.axes.iter()).all(|&a| {
        let s = a - 2;
        p.kernel[s] == x.shape[a] && p.strides[s] == 1 && p.pads[s] + p.pads[s + sp] == 0
    }) && p.output_spatial.iter().all(|&d| d == 1);
    if global {
        return Ok(None);
    }
    let mut out = e.clone();
    for (i, &a) in e.axes.iter().enumerate() {
        let s = a - 2;
        let span = (p.dilations[s] * (p.kernel[s] - 1) + 1) as i64;
        let (pb, pe) = (p.pads[s] as i64, p.pads[s + sp] as i64);
        let stride = p.strides[s] as i64;
        let at_max = |ceil: bool| {
            ExtentExpr::dim()
                .window(pb + pe, span, stride as u64, ceil)
                .eval(x.shape[a] as i64)
        };
        let want = Some(p.output_spatial[s] as i64);
        // Rounded up, the last window starts inside the plane or its leading pad (and
        // ONNX drops none) at every size when the stride plus the trailing pad is at
        // most the window; else the output size follows no one formula.
        let ceil = p.ceil_mode;
        if at_max(ceil) != want || (ceil && stride + pe > span) {
            return Err(format!(
                "its output size {} along axis {a} follows no formula nnc runs at run time \
                 (ceil_mode with a stride and trailing pad past the window)",
                p.output_spatial[s]
            ));
        }
        out.sizes[i] = e.sizes[i].window(pb + pe, span, stride as u64, ceil);
    }
    Ok(Some(out))
}

/// Every value read or output: at each other value `k` of the dim, its shape is its
/// planes' prediction (the others' shapes and constants unchanged).
fn check_predictions(g: &Graph, others: &[(usize, Graph)]) -> std::result::Result<(), String> {
    let read = super::read_values(g);
    for (i, &r) in read.iter().enumerate() {
        let v = ValueId(i);
        if !r && !g.outputs.contains(&v) || g.values[i].name.ends_with(" (dim)") {
            continue;
        }
        let info = g.value(v);
        for (k, o) in others {
            let mut want = info.ty.shape.clone();
            if let Some(e) = &info.run_extent {
                for (a, size) in axis_sizes(g, e) {
                    want[a] = size.size_at(*k);
                }
            }
            let got = &o.ty(v).shape;
            if *got != want {
                return Err(format!(
                    "the value '{}' has shape {got:?} with it at {k}, but {want:?} follows from \
                     the planes nnc computes",
                    info.name
                ));
            }
            if info.run_extent.is_none() && info.constant.as_ref() != o.constant(v) {
                return Err(format!("the constant '{}' is computed from it", info.name));
            }
        }
    }
    Ok(())
}

/// Every plane (and every row count) at least one element long over the whole range.
fn check_sizes(g: &Graph, range: &DimRange) -> std::result::Result<(), String> {
    for info in &g.values {
        let Some(e) = &info.run_extent else { continue };
        for (a, size) in axis_sizes(g, e) {
            let bad = (range.min..=range.max).find(|&n| size.eval(n as i64).unwrap_or(0) < 1);
            if let Some(n) = bad {
                return Err(format!(
                    "the value '{}' would have no elements along axis {a} with it at {n} \
                     (extent {size}); narrow the range",
                    info.name
                ));
            }
        }
    }
    Ok(())
}
