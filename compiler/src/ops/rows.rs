//! Nodes that read values whose leading extent only the run knows (NonMaxSuppression's
//! selected boxes, a Gather by NonZero's indices, a Slice with run-time ends) and
//! compute each row of their output from the same row of those values alone. Code
//! generation compiles such a node for one row and `infer` calls it once per actual
//! row, so every downstream kernel runs on the actual extent, whatever it is.
//!
//! The values are stored densely for their actual extents; with the varying axis
//! leading, row `i` sits where it would in the planned (bound) layout, so each call
//! only advances the row-carrying operands by one row.

use super::{infer_types, Op};
use crate::ir::{Graph, Node, RunExtent, TensorType, ValueId};

/// How a node runs row by row (see the module doc).
#[derive(Clone, Debug, PartialEq)]
pub struct RowForm {
    /// The op computing one row.
    pub op: Op,
    /// Which inputs carry rows (the others are read whole by every row).
    pub inputs: Vec<bool>,
    /// The extent every row-carrying input and every output shares.
    pub extent: RunExtent,
}

impl RowForm {
    /// `ty` with its leading axis cut to one row.
    pub fn row_type(ty: &TensorType) -> TensorType {
        let mut shape = ty.shape.clone();
        if let Some(d) = shape.first_mut() {
            *d = 1;
        }
        TensorType::new(ty.dtype, shape)
    }
}

/// How `node` runs row by row, `None` when it reads no value with a run-time extent,
/// or why it cannot (the message names what it would need).
pub fn row_form(graph: &Graph, node: &Node) -> Result<Option<RowForm>, String> {
    let extent_of = |i: usize| {
        (node.inputs.get(i).copied().flatten()).and_then(|v| graph.value(v).run_extent.as_ref())
    };
    let carrying: Vec<bool> = (0..node.inputs.len())
        .map(|i| extent_of(i).is_some())
        .collect();
    let Some(first) = (node.inputs.iter().zip(&carrying)).find_map(|(v, &c)| v.filter(|_| c))
    else {
        return Ok(None);
    };
    let Some(extent) = graph.value(first).run_extent.as_ref() else {
        return Ok(None);
    };
    let reading = format!(
        "it reads '{}', whose extent is known only at run time",
        graph.value(first).name
    );
    if (0..node.inputs.len()).any(|i| extent_of(i).is_some_and(|e| e != extent)) {
        return Err(format!("{reading}, with values of other run-time extents"));
    }
    if extent.axes != [0] {
        let axes: Vec<String> = extent.axes.iter().map(|a| a.to_string()).collect();
        return Err(format!(
            "{reading} (axis {}); nnc runs the nodes after such a value row by row, which needs its leading axis to be the one that varies",
            axes.join(", ")
        ));
    }
    let ty = |v| graph.ty(v);
    let bound = ty(first).shape[0];
    let op = op_for_rows(&node.op, bound, 1).ok_or_else(|| {
        format!(
            "{reading}; nnc runs the nodes after such a value row by row, and {} does not run row by row",
            node.op.name()
        )
    })?;
    let mut marked = vec![false; graph.values.len()];
    for (i, v) in node.inputs.iter().enumerate() {
        if let (true, Some(v)) = (carrying[i], v) {
            marked[v.0] = true;
        }
    }
    for o in &node.outputs {
        marked[o.0] = true;
    }
    crate::dims::sample_loop::check_node(graph, node, &marked)
        .map_err(|e| format!("{reading}; run row by row, it {e}"))?;
    let row_inputs: Vec<Option<TensorType>> = (node.inputs.iter().enumerate())
        .map(|(i, v)| {
            v.map(|v| match carrying[i] {
                true => RowForm::row_type(ty(v)),
                false => ty(v).clone(),
            })
        })
        .collect();
    let row_outputs = infer_types(&op, &row_inputs)?;
    let rows_match = node
        .outputs
        .iter()
        .zip(&row_outputs)
        .all(|(o, r)| ty(*o).shape.first() == Some(&bound) && RowForm::row_type(ty(*o)) == *r);
    if !rows_match {
        return Err(format!(
            "{reading}; run row by row, {} would not keep its leading axis",
            node.op.name()
        ));
    }
    Ok(Some(RowForm {
        op,
        inputs: carrying,
        extent: extent.clone(),
    }))
}

/// The extent of a Reshape's output that only adds or removes unit axes before the one
/// axis of its input whose extent only the run knows (NonZero's `[1, n]` squeezed to
/// `[n]`): the same elements in the same places, the axis moved. `None` for any other
/// node.
pub fn reshaped_extent(graph: &Graph, op: &Op, inputs: &[Option<ValueId>]) -> Option<RunExtent> {
    let (Op::Reshape { shape }, [Some(x)]) = (op, inputs) else {
        return None;
    };
    let extent = graph.value(*x).run_extent.as_ref()?;
    let (&[a], false) = (extent.axes.as_slice(), extent.whole_shape) else {
        return None;
    };
    let input = &graph.ty(*x).shape;
    let b = shape.len().checked_sub(input.len() - a)?;
    let units = |s: &[usize]| s.iter().all(|&d| d == 1);
    (units(&input[..a]) && units(&shape[..b]) && shape[b..] == input[a..]).then(|| RunExtent {
        axes: vec![b],
        count: extent.count,
        whole_shape: false,
    })
}

/// `op` computing `rows` rows of its output, for row-carrying operands whose leading
/// axis is `bound` long (the shapes in its attributes are cut to `rows`); `None` for
/// ops that cannot compute row by row.
pub fn op_for_rows(op: &Op, bound: usize, rows: usize) -> Option<Op> {
    let one_row = |shape: &[usize]| -> Option<Vec<usize>> {
        (shape.first() == Some(&bound)).then(|| {
            let mut s = shape.to_vec();
            s[0] = rows;
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
            if starts.first() != Some(&0) || steps.first() != Some(&1) {
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
