//! Nodes that read values whose leading extent only the run knows (NonMaxSuppression's
//! selected boxes, a Gather by NonZero's indices, a Slice with run-time ends) and
//! compute each row of their output from the same row of those values alone. Code
//! generation compiles such a node for one row and `infer` calls it once per actual
//! row, so every downstream kernel runs on the actual extent, whatever it is.
//!
//! The values are stored densely for their actual extents; with the varying axis
//! leading (every axis before it a unit axis, as in a one-sample `[1, seq, d]`), row
//! `i` sits where it would in the planned (bound) layout, so each call only advances
//! the row-carrying operands by one row.

use super::{infer_types, Op};
use crate::ir::{Graph, Node, RunExtent, Tensor, TensorType, ValueId};

/// How a node runs row by row (see the module doc).
#[derive(Clone, Debug, PartialEq)]
pub struct RowForm {
    /// The op computing one row.
    pub op: Op,
    /// Which inputs carry rows (the others are read whole by every row).
    pub inputs: Vec<bool>,
    /// The extent every row-carrying input and every output shares.
    pub extent: RunExtent,
    /// The axis the rows run along in each row-carrying input (see [`row_axis`]).
    pub input_axes: Vec<Option<usize>>,
    /// The axis the rows run along in the outputs.
    pub axis: usize,
}

impl RowForm {
    /// `ty` with axis `axis` cut to one row.
    pub fn row_type(ty: &TensorType, axis: usize) -> TensorType {
        let mut shape = ty.shape.clone();
        if let Some(d) = shape.get_mut(axis) {
            *d = 1;
        }
        TensorType::new(ty.dtype, shape)
    }
}

/// The axis rows of a value of type `ty` and extent `e` run along: its one varying
/// axis, when every axis before it is a unit axis.
pub fn row_axis(ty: &TensorType, e: &RunExtent) -> Option<usize> {
    match e.axes.as_slice() {
        &[a] if a < ty.rank() && ty.shape[..a].iter().all(|&d| d == 1) => Some(a),
        _ => None,
    }
}

/// How `node` runs row by row, `None` when it reads no value with a run-time extent,
/// or why it cannot (the message names what it would need).
pub fn row_form(graph: &Graph, node: &Node) -> Result<Option<RowForm>, String> {
    let ty = |v| graph.ty(v);
    let extent_of = |v: ValueId| graph.value(v).run_extent.as_ref();
    let carrying: Vec<bool> = (node.inputs.iter().enumerate())
        .map(|(i, v)| v.is_some_and(|v| extent_of(v).is_some()) && !reads_whole(node, i))
        .collect();
    let carried: Vec<ValueId> = (node.inputs.iter().zip(&carrying))
        .filter_map(|(v, &c)| v.filter(|_| c))
        .collect();
    let Some(&first) = carried.first() else {
        return Ok(None);
    };
    let extent = extent_of(first).expect("a carried value has an extent");
    let reading = format!(
        "it reads '{}', whose extent is known only at run time",
        graph.value(first).name
    );
    // Each carried value's rows run along its one varying axis, only unit axes before.
    let mut row_axes = vec![None; node.inputs.len()];
    for (i, v) in node.inputs.iter().enumerate() {
        let Some(v) = v.filter(|_| carrying[i]) else {
            continue;
        };
        let e = extent_of(v).expect("a carried value has an extent");
        let Some(a) = row_axis(ty(v), e) else {
            let axes: Vec<String> = e.axes.iter().map(|a| a.to_string()).collect();
            return Err(format!(
                "it reads '{}', whose extent is known only at run time (axis {}); nnc runs the nodes after such a value row by row, which needs its leading axis to be the one that varies",
                graph.value(v).name,
                axes.join(", ")
            ));
        };
        if e.count != extent.count || e.offset_of(a) != extent.offset_of(row_axes_first(extent)) {
            return Err(format!("{reading}, with values of other run-time extents"));
        }
        row_axes[i] = Some(a);
    }
    // The output's axis the rows run along: the inputs' own, or for a broadcasting
    // elementwise op, where their axes land once aligned from the right.
    let out_rank = node.outputs.first().map_or(0, |o| ty(*o).rank());
    let broadcasting = matches!(
        node.op,
        Op::Unary(_) | Op::Binary(_) | Op::Where | Op::Cast { .. } | Op::CastCodes { .. }
    );
    let landing = |i: usize, a: usize| match broadcasting {
        true => (a + out_rank).checked_sub(node.inputs[i].map_or(0, |v| ty(v).rank())),
        false => Some(a),
    };
    let landed: Vec<Option<usize>> = (row_axes.iter().enumerate())
        .filter_map(|(i, a)| a.map(|a| landing(i, a)))
        .collect();
    let axis = landed[0];
    let Some(axis) = axis.filter(|_| landed.iter().all(|&l| l == axis)) else {
        return Err(format!(
            "{reading}, and values whose varying axis is elsewhere ({})",
            carried
                .iter()
                .map(|v| format!("'{}' {}", graph.value(*v).name, ty(*v)))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    };
    let bound = ty(first).shape[row_axes.iter().flatten().next().copied().unwrap_or(0)];
    let op = op_for_rows(&node.op, axis, bound, 1).ok_or_else(|| {
        format!(
            "{reading}; nnc runs the nodes after such a value row by row, and {} does not run row by row",
            node.op.name()
        )
    })?;
    let mut marked = vec![false; graph.values.len()];
    for v in &carried {
        marked[v.0] = true;
    }
    for o in &node.outputs {
        marked[o.0] = true;
    }
    crate::ops::along_axis::check_node(graph, node, &marked, axis)
        .map_err(|e| format!("{reading}; run row by row, it {e}"))?;
    let row_inputs: Vec<Option<TensorType>> = (node.inputs.iter().zip(&row_axes))
        .map(|(v, a)| {
            v.map(|v| match a {
                Some(a) => RowForm::row_type(ty(v), *a),
                None => ty(v).clone(),
            })
        })
        .collect();
    let row_outputs = infer_types(&op, &row_inputs)?;
    let rows_match = node.outputs.iter().zip(&row_outputs).all(|(o, r)| {
        ty(*o).shape.get(axis) == Some(&bound)
            && ty(*o).shape[..axis].iter().all(|&d| d == 1)
            && RowForm::row_type(ty(*o), axis) == *r
    });
    if !rows_match {
        return Err(format!(
            "{reading}; run row by row, {} would not keep its leading axis",
            node.op.name()
        ));
    }
    Ok(Some(RowForm {
        op,
        inputs: carrying,
        extent: RunExtent {
            axes: vec![axis],
            count: extent.count,
            whole_shape: false,
        },
        input_axes: row_axes,
        axis,
    }))
}

/// Whether `node` reads its input `input` whole, whatever extent the run has: a
/// Gather's data whose rows the run counts, that count its input 2 (every index checked
/// against it), so the node runs row by row over its indices' rows alone.
pub fn reads_whole(node: &Node, input: usize) -> bool {
    match node.op {
        Op::Gather { .. } => input == 0 && node.inputs.len() == 3,
        // The count of the rows reduced is input 1.
        Op::Reduce(_) => input == 0 && node.inputs.len() == 2,
        Op::ConcatRows { .. } | Op::FirstRows { .. } => true,
        Op::NonMaxSuppression { .. } => node.inputs.len() == 6,
        _ => false,
    }
}

/// Whether `node` reads a value whose extent the run counts row by row (not whole,
/// see [`reads_whole`]).
pub fn reads_run_rows(graph: &Graph, node: &Node) -> bool {
    (node.inputs.iter().enumerate()).any(|(i, v)| {
        v.is_some_and(|v| graph.value(v).run_extent.is_some()) && !reads_whole(node, i)
    })
}

/// The first varying axis of `e`.
fn row_axes_first(e: &RunExtent) -> usize {
    e.axes.first().copied().unwrap_or(0)
}

/// The run-time extent of `node`'s outputs, `None` when it reads no value with one: an
/// elementwise op of one input passes its input's on, a Reshape moving the varying
/// axis past unit axes moves it ([`reshaped_extent`]), a node that runs row by row
/// gives its outputs the rows' extent. Errors say why the node can do none of these.
pub fn output_extent(graph: &Graph, node: &Node) -> Result<Option<RunExtent>, String> {
    if let Some(e) = passed_extent(graph, node) {
        return Ok(Some(e));
    }
    if reads_all_rows(graph, node).is_some() {
        // Its outputs' extents are its own counts.
        return Ok(None);
    }
    Ok(row_form(graph, node)?.map(|f| f.extent))
}

/// A node reading every row the run has of its first input at once, along the axis it
/// reduces, its outputs counted by itself (TopK of the kept scores, `k` at run time,
/// after NonZero): the input's count and its rows' bound.
pub fn reads_all_rows(graph: &Graph, node: &Node) -> Option<(ValueId, usize)> {
    let Op::TopKRunTime { axis, .. } = node.op else {
        return None;
    };
    let x = (*node.inputs.first()?)?;
    let e = graph.value(x).run_extent.as_ref()?;
    let single = e.axes.len() == 1 && !e.whole_shape;
    let others_fixed =
        (node.inputs[1..].iter().flatten()).all(|v| graph.value(*v).run_extent.is_none());
    (single && others_fixed && row_axis(graph.ty(x), e) == Some(axis))
        .then(|| (e.count, graph.ty(x).shape[axis]))
}

/// The run-time extent of each of `node`'s outputs (see [`output_extent`]): all the
/// same, but an LSTM's, whose steps are `Y`'s rows while its last states keep their
/// shape.
pub fn outputs_extents(graph: &Graph, node: &Node) -> Result<Vec<Option<RunExtent>>, String> {
    if let Op::RnnSequence { .. } = node.op {
        let mut extents = vec![None; node.outputs.len()];
        extents[0] = Some(rnn_steps_extent(graph, node)?);
        return Ok(extents);
    }
    let e = output_extent(graph, node)?.ok_or("it cannot run on rows known only at run time")?;
    Ok(vec![Some(e); node.outputs.len()])
}

/// The extent of an [`Op::RnnSequence`]'s `Y` when its projected inputs' steps (axis
/// 0) are counted at run time and nothing else is: the steps'. The node runs its
/// recurrence over the count (see `codegen::lower::recurrence`).
pub fn rnn_steps_extent(graph: &Graph, node: &Node) -> Result<RunExtent, String> {
    let extent_of = |v: &Option<ValueId>| v.and_then(|v| graph.value(v).run_extent.clone());
    let xw = node.inputs[0].ok_or("RnnSequence has no inputs")?;
    let e = extent_of(&node.inputs[0])
        .filter(|e| row_axis(graph.ty(xw), e) == Some(0))
        .ok_or("its steps are not the rows counted at run time")?;
    if node.inputs[1..].iter().any(|v| extent_of(v).is_some()) {
        return Err("its weights or initial states vary at run time".into());
    }
    Ok(RunExtent {
        axes: vec![0],
        count: e.count,
        whole_shape: false,
    })
}

/// Whether `node` reads only rows every run has of a value whose extent the run
/// counts, at least `min_rows` of them (a pooler's `Gather` of token 0, a `Slice` of
/// the first rows): its output is the same whatever the count.
pub fn reads_first_rows(graph: &Graph, node: &Node, min_rows: usize) -> bool {
    let Some(Some(x)) = node.inputs.first() else {
        return false;
    };
    let Some(e) = graph.value(*x).run_extent.as_ref() else {
        return false;
    };
    let Some(a) = row_axis(graph.ty(*x), e) else {
        return false;
    };
    let others_fixed = (node.inputs[1..].iter().flatten())
        .all(|v| graph.value(*v).run_extent.is_none() && graph.constant(*v).is_some());
    if !others_fixed {
        return false;
    }
    match &node.op {
        Op::Gather { axis } if *axis == a => node
            .inputs
            .get(1)
            .copied()
            .flatten()
            .and_then(|i| graph.constant(i))
            .is_some_and(|idx| {
                idx.to_i64_vec()
                    .iter()
                    .all(|&i| (0..min_rows as i64).contains(&i))
            }),
        Op::Slice {
            starts,
            steps,
            shape,
        } => {
            let (start, step, len) = (starts[a], steps[a], shape[a]);
            len > 0 && step > 0 && start + (len - 1) * (step as usize) < min_rows
        }
        _ => false,
    }
}

/// The run-time extent `node` passes on without running row by row: an elementwise op
/// of one input over the whole planned buffer, or a Reshape moving the varying axis
/// past unit axes ([`reshaped_extent`]).
pub fn passed_extent(graph: &Graph, node: &Node) -> Option<RunExtent> {
    if let [Some(v)] = node.inputs.as_slice() {
        let info = graph.value(*v);
        if let Some(e) =
            (info.run_extent.as_ref()).filter(|_| node.op.passes_run_extent(info.ty.dtype))
        {
            return Some(e.clone());
        }
    }
    if let (Op::Expand { .. }, [Some(fill), Some(like)]) = (&node.op, node.inputs.as_slice()) {
        // A fill shaped like `like` (see [`Op::Expand`]).
        let e = graph.value(*like).run_extent.as_ref()?;
        return (graph.ty(*fill).numel() == 1).then(|| e.clone());
    }
    reshaped_extent(graph, &node.op, &node.inputs)
        .or_else(|| transposed_extent(graph, &node.op, &node.inputs))
}

/// The extent of a Transpose's output that only moves unit axes (a sequence's
/// `[1, seq, d]` as the `[seq, 1, d]` an RNN reads): with the axes longer than 1 in
/// their order it is the Reshape to its output shape ([`reshaped_extent`]). `None` for
/// any other node.
fn transposed_extent(graph: &Graph, op: &Op, inputs: &[Option<ValueId>]) -> Option<RunExtent> {
    let (Op::Transpose { perm }, [Some(x)]) = (op, inputs) else {
        return None;
    };
    let shape = &graph.ty(*x).shape;
    let long: Vec<usize> = perm.iter().copied().filter(|&p| shape[p] != 1).collect();
    if !long.windows(2).all(|w| w[0] < w[1]) {
        return None;
    }
    let to: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    reshaped_extent(graph, &Op::Reshape { shape: to }, inputs)
}

/// The extent of a Reshape's output that only adds, removes or moves unit axes around
/// the one axis of its input whose extent only the run knows, leading in both
/// (NonZero's `[1, n]` squeezed to `[n]`, a sequence's `[1, seq, d]` as `[seq, 1, d]`):
/// the same elements in the same places, the axis moved. `None` for any other node.
pub fn reshaped_extent(graph: &Graph, op: &Op, inputs: &[Option<ValueId>]) -> Option<RunExtent> {
    let (Op::Reshape { shape }, [Some(x)]) = (op, inputs) else {
        return None;
    };
    let extent = graph.value(*x).run_extent.as_ref()?;
    let (&[a], false) = (extent.axes.as_slice(), extent.whole_shape) else {
        return None;
    };
    let input = &graph.ty(*x).shape;
    let b = moved_long_axis(input, shape, a)?;
    let units = |s: &[usize]| s.iter().all(|&d| d == 1);
    (units(&input[..a]) && units(&shape[..b])).then(|| RunExtent {
        axes: vec![b],
        count: extent.count,
        whole_shape: false,
    })
}

/// Where axis `axis` of shape `from` lands in shape `to`, when `to` only adds, removes or
/// moves axes of 1 (the axes longer than 1 the same, in the same order, so the
/// elements keep their places) and `axis` is longer than 1; `None` otherwise.
pub fn moved_long_axis(from: &[usize], to: &[usize], axis: usize) -> Option<usize> {
    let long = |s: &[usize]| (0..s.len()).filter(|&a| s[a] != 1).collect::<Vec<_>>();
    let (a, b) = (long(from), long(to));
    let same = a.len() == b.len() && a.iter().zip(&b).all(|(&i, &j)| from[i] == to[j]);
    let k = a.iter().position(|&i| i == axis)?;
    same.then(|| b[k])
}

/// `op` computing `rows` rows of its output, for row-carrying operands whose axis
/// `axis` is `bound` long (the shapes in its attributes are cut to `rows` there);
/// `None` for ops that cannot compute row by row.
pub fn op_for_rows(op: &Op, axis: usize, bound: usize, rows: usize) -> Option<Op> {
    let one_row = |shape: &[usize]| -> Option<Vec<usize>> {
        (shape.get(axis) == Some(&bound)).then(|| {
            let mut s = shape.to_vec();
            s[axis] = rows;
            s
        })
    };
    Some(match op {
        Op::Reshape { shape } => Op::Reshape {
            shape: one_row(shape)?,
        },
        Op::Expand { shape } => Op::Expand {
            shape: one_row(shape)?,
        },
        Op::Slice {
            starts,
            steps,
            shape,
        } => {
            if starts.get(axis) != Some(&0) || steps.get(axis) != Some(&1) {
                return None;
            }
            Op::Slice {
                starts: starts.clone(),
                steps: steps.clone(),
                shape: one_row(shape)?,
            }
        }
        Op::Unary(_)
        | Op::Binary(_)
        | Op::Where
        | Op::Cast { .. }
        | Op::BitCast { .. }
        | Op::CastCodes { .. }
        | Op::MatMul(_)
        | Op::Gemm(_)
        | Op::Transpose { .. }
        | Op::Concat { .. }
        | Op::Gather { .. }
        | Op::GatherElements { .. }
        | Op::GatherND { .. }
        | Op::Softmax { .. }
        | Op::LayerNorm { .. }
        | Op::Reduce(_)
        | Op::ArgReduce(_)
        | Op::CumSum { .. }
        | Op::TopK { .. }
        | Op::QuantizeLinear { .. }
        | Op::DequantizeLinear { .. } => op.clone(),
        _ => return None,
    })
}

/// The first `rows` rows of `t` along `axis` (every axis before it a unit axis, so they
/// are its first bytes).
pub fn first_rows(t: &Tensor, axis: usize, rows: usize) -> Tensor {
    let mut shape = t.shape().to_vec();
    shape[axis] = rows;
    let ty = TensorType::new(t.dtype(), shape);
    let bytes = t.to_le_bytes();
    let n = ty.byte_size().min(bytes.len());
    Tensor::from_le_bytes(&ty, &bytes[..n]).unwrap_or_else(|| t.clone())
}
