//! Whether a node computes each index of one axis of its outputs from the same index
//! of its inputs alone: the per-op fact that lets a dim on that axis run as a loop over
//! samples (axis 0) or over rows (an axis only unit axes precede).

use crate::ir::{Graph, Node, ValueId};
use crate::ops::Op;

/// A node reading marked values computes each sample from that sample alone, and marks
/// every output; a node reading none marks none (but an Expand of a shared value to
/// the samples, which repeats it).
/// `axis` is the one holding the samples (or rows) in every marked operand, every axis
/// before it a unit axis: 0 for the sample loop.
pub fn check_node(
    g: &Graph,
    node: &Node,
    marked: &[bool],
    axis: usize,
) -> std::result::Result<(), String> {
    let is_marked = |i: usize| {
        node.inputs
            .get(i)
            .copied()
            .flatten()
            .is_some_and(|v| marked[v.0])
    };
    let rank = |i: usize| {
        node.inputs
            .get(i)
            .copied()
            .flatten()
            .map_or(0, |v| g.ty(v).rank())
    };
    let extent = |v: ValueId| g.ty(v).shape.get(axis).copied();
    let out_rank = g.ty(node.outputs[0]).rank();
    let any_input = (0..node.inputs.len()).any(is_marked);
    let all_outputs = node.outputs.iter().all(|o| marked[o.0]);
    if !any_input {
        let none = node.outputs.iter().all(|o| !marked[o.0]);
        return match (&node.op, none) {
            (_, true) => Ok(()),
            (Op::Expand { .. }, false) if all_outputs => Ok(()),
            _ => Err("makes per-sample values from shared ones".into()),
        };
    }
    if !all_outputs {
        return Err("combines the samples into a shared value".into());
    }
    let only = |allowed: &[usize]| {
        (0..node.inputs.len())
            .filter(|&i| is_marked(i))
            .all(|i| allowed.contains(&i) && rank(i) == out_rank)
    };
    // A lower-rank operand broadcasts from the right: its varying axis can only land on
    // `axis` if fewer axes than `axis` are missing (none for the sample loop); the row
    // form checks where it lands.
    let elementwise = || {
        (0..node.inputs.len())
            .filter(|&i| is_marked(i))
            .all(|i| rank(i) <= out_rank && out_rank - rank(i) <= axis)
    };
    let ok = match &node.op {
        Op::Unary(_)
        | Op::Binary(_)
        | Op::Where
        | Op::Cast { .. }
        | Op::BitCast { .. }
        | Op::CastCodes { .. } => elementwise(),
        Op::QuantizeLinear { .. } | Op::DequantizeLinear { .. } => only(&[0]),
        Op::MatMul(_) | Op::MatMulInteger => {
            let extra: &[usize] = if matches!(node.op, Op::MatMul(_)) {
                &[3]
            } else {
                &[]
            };
            // The varying axis is a row or batch axis of A, a batch axis of B.
            let a_ok = !is_marked(0) || (rank(0) >= axis + 2 && rank(0) == out_rank);
            let b_ok = !is_marked(1) || (rank(1) >= axis + 3 && rank(1) == out_rank);
            let rows_only = !(is_marked(1) && rank(0) == 2);
            let rest = (2..node.inputs.len())
                .filter(|&i| is_marked(i))
                .all(|i| extra.contains(&i) && rank(i) == out_rank);
            a_ok && b_ok && rows_only && rest
        }
        Op::Gemm(a) => axis == 0 && !a.trans_a && !is_marked(1) && only(&[0, 2, 3]),
        Op::Conv(_) | Op::ConvU8S8 { .. } => axis == 0 && only(&[0, 3]),
        Op::ConvTranspose(_)
        | Op::Pool(_)
        | Op::ConvInteger(_)
        | Op::QuantizeToPlanes(_)
        | Op::PackPlanes(_) => axis == 0 && only(&[0]),
        Op::LayerNorm {
            axis: normalized, ..
        } => *normalized > axis && only(&[0]),
        Op::Attention => (0..node.inputs.len())
            .filter(|&i| is_marked(i))
            .all(|i| rank(i) >= axis + 3 && rank(i) == out_rank),
        // Their outputs' extents vary with the values, so samples cannot be stacked.
        Op::NonZero { .. }
        | Op::Compress { .. }
        | Op::Unique { .. }
        | Op::NonMaxSuppression { .. }
        | Op::TopKRunTime { .. }
        | Op::ConcatRows { .. }
        | Op::FirstRows { .. }
        | Op::ReduceRunTimeAxes { .. }
        | Op::ReshapeByAxes { .. }
        | Op::DimValues { .. }
        | Op::SliceRunTime { .. }
        | Op::SplitRunTime { .. }
        | Op::Choose { .. } => false,
        // Its batch is axis 1 of its operands; one sample's steps are no rows of others.
        Op::RnnSequence { .. } => false,
        Op::Softmax { axis: along, .. }
        | Op::CumSum { axis: along, .. }
        | Op::TopK { axis: along, .. } => *along != axis && elementwise(),
        // Element i reads (or writes) data at i's own position on the other axes: every
        // operand must hold the same samples, row for row.
        Op::GatherElements { axis: along } | Op::ScatterElements { axis: along, .. } => {
            let out = extent(node.outputs[0]);
            *along != axis
                && (0..node.inputs.len()).all(|i| {
                    is_marked(i) && rank(i) == out_rank && node.inputs[i].and_then(extent) == out
                })
        }
        Op::ArgReduce(a) => a.axis != axis && only(&[0]),
        Op::Reduce(r) => !r.axes.is_empty() && !r.axes.contains(&axis) && only(&[0]),
        Op::Reshape { .. } => true,
        Op::Expand { .. } => rank(0) == out_rank,
        Op::Transpose { perm } => perm.iter().take(axis + 1).enumerate().all(|(i, &p)| p == i),
        Op::Concat { axis: along } => *along != axis && (0..node.inputs.len()).all(is_marked),
        Op::Slice { starts, steps, .. } => {
            let input = node.inputs[0].expect("Slice has its data input");
            starts.get(axis) == Some(&0)
                && steps.get(axis) == Some(&1)
                && extent(input) == extent(node.outputs[0])
        }
        // Gathering by marked indices along axis 0 puts their varying axis where it was.
        Op::Gather { axis: along } => {
            (is_marked(0) && !is_marked(1) && *along > axis)
                || (!is_marked(0) && is_marked(1) && *along == 0 && rank(1) > axis)
        }
        // Shared batch axes holding the samples; or rows of index tuples into shared
        // data (a detector's scores at NonZero's positions), each output row its tuple's.
        Op::GatherND { batch_dims } => {
            (*batch_dims > axis && is_marked(0) && is_marked(1))
                || (*batch_dims == 0 && !is_marked(0) && is_marked(1) && rank(1) > axis + 1)
        }
        Op::Pad(p) => {
            p.pads.get(axis) == Some(&0) && p.pads.get(out_rank + axis) == Some(&0) && only(&[0])
        }
        // Axis 0 kept as it is: scale 1 (not only the same length, which a scale of 1.2
        // gives too while blending neighbouring rows) and no crop on it.
        Op::Resize(r) => {
            let input = node.inputs[0].expect("Resize has its data input");
            let rank = g.ty(input).rank();
            only(&[0])
                && extent(input) == extent(node.outputs[0])
                && r.scales.get(axis).is_none_or(|&s| s == 1.0)
                && (r.coordinate_transform != crate::ops::CoordinateTransform::TfCropAndResize
                    || (r.roi.get(axis) == Some(&0.0) && r.roi.get(rank + axis) == Some(&1.0)))
        }
        Op::ScatterND { .. } => false,
    };
    if ok {
        Ok(())
    } else {
        Err("mixes samples (or reads them along an axis other than the one holding them)".into())
    }
}
