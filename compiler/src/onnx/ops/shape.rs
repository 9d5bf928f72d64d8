//! Shape and data-movement ONNX ops. Everything that only describes shapes (Shape, Size,
//! ConstantOfShape, Range, Constant) becomes a constant: nnc's shapes are static.

use crate::ir::{RunExtent, Tensor, ValueId};
use crate::onnx::attributes::{axis_and_dim, normalize_axis};
use crate::onnx::import::{ImportError, ImportResult, NodeCtx};
use crate::onnx::tensor_proto::tensor_from_proto;
use crate::ops::infer::{broadcast_shapes, slice_run};
use crate::ops::{Op, PadAttrs, PadMode};

fn emit_reshape(ctx: &mut NodeCtx, x: ValueId, shape: Vec<usize>) -> ImportResult<ValueId> {
    ctx.emit1(Op::Reshape { shape }, vec![Some(x)])
}

/// Axes from the attribute (old opsets) or a constant input (newer ones).
fn axes_list(
    ctx: &NodeCtx,
    input: usize,
    attr_before_opset: i64,
) -> ImportResult<Option<Vec<i64>>> {
    if ctx.opset() < attr_before_opset {
        Ok(ctx.attrs.ints_opt("axes")?)
    } else {
        Ok(ctx.const_input(input, "axes")?.map(|t| t.to_i64_vec()))
    }
}

pub fn reshape(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let target = if ctx.opset() < 5 {
        ctx.attrs
            .ints_opt("shape")?
            .ok_or("attribute 'shape' is required")?
    } else {
        ctx.const_input(1, "shape")?
            .ok_or("input 'shape' is required")?
            .to_i64_vec()
    };
    let allow_zero = ctx.attrs.flag("allowzero", false)?;
    let mut shape = Vec::with_capacity(target.len());
    let mut infer_at = None;
    for (i, &d) in target.iter().enumerate() {
        match d {
            -1 if infer_at.is_none() => {
                infer_at = Some(i);
                shape.push(1);
            }
            0 if !allow_zero => shape.push(
                *x.shape
                    .get(i)
                    .ok_or("shape copies a dimension the input lacks")?,
            ),
            d if d >= 0 => shape.push(d as usize),
            d => return Err(format!("invalid target dimension {d} in {target:?}").into()),
        }
    }
    if let Some(i) = infer_at {
        let known = shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .unwrap_or(0);
        if known == 0 || x.numel() % known != 0 {
            return Err(format!("cannot reshape {:?} to {target:?}", x.shape).into());
        }
        shape[i] = x.numel() / known;
    }
    let y = emit_reshape(ctx, ctx.required(0)?, shape)?;
    ctx.bind_output(0, y);
    Ok(())
}

pub fn flatten(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let axis = ctx.attrs.int("axis", 1)?;
    let axis = if axis == x.rank() as i64 {
        x.rank()
    } else {
        normalize_axis(axis, x.rank())?
    };
    let shape = vec![
        x.shape[..axis].iter().product(),
        x.shape[axis..].iter().product(),
    ];
    let y = emit_reshape(ctx, ctx.required(0)?, shape)?;
    ctx.bind_output(0, y);
    Ok(())
}

/// Squeeze / Unsqueeze whose axes are read at run time: every set of axes that fits,
/// with the shape it gives (`shape_for`: `None` where the set does not fit).
fn reshape_by_run_time_axes(
    ctx: &mut NodeCtx,
    axes: ValueId,
    axes_rank: usize,
    shape_for: &dyn Fn(&[usize]) -> Option<Vec<usize>>,
) -> ImportResult {
    let at = ctx.ty(axes).clone();
    if at.rank() != 1 || !at.dtype.is_int() {
        return Err(format!("axes must be a 1-D integer tensor, not {at}").into());
    }
    let count = at.numel();
    let sets = crate::ops::infer::axis_sets(axes_rank, count);
    if sets.len() > 64 {
        return Err(ImportError::Unsupported(format!(
            "its {count} axes of {axes_rank} given at run time make {} possible shapes; nnc compiles at most 64",
            sets.len()
        )));
    }
    let shapes: Vec<(u64, Vec<usize>)> = sets
        .iter()
        .filter_map(|set| shape_for(set).map(|s| (crate::ops::infer::axes_mask(set), s)))
        .collect();
    if shapes.is_empty() {
        return Err(format!("no {count} axes fit the input {}", ctx.input_ty(0)?).into());
    }
    let op = Op::ReshapeByAxes {
        count,
        axes_rank,
        shapes,
    };
    let outs = ctx.emit(op, vec![Some(ctx.required(0)?), Some(axes)], 2)?;
    ctx.bind_output(0, outs[0]);
    Ok(())
}

/// The input holding axes read at run time (opset 13 on), if any.
fn run_time_axes(ctx: &NodeCtx) -> Option<ValueId> {
    ctx.input(1)
        .filter(|v| ctx.opset() >= 13 && ctx.constant(*v).is_none() && ctx.ty(*v).numel() > 0)
}

pub fn squeeze(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    if let Some(axes) = run_time_axes(ctx) {
        let shape_for = |set: &[usize]| {
            set.iter().all(|&a| x.shape[a] == 1).then(|| {
                (0..x.rank())
                    .filter(|i| !set.contains(i))
                    .map(|i| x.shape[i])
                    .collect()
            })
        };
        return reshape_by_run_time_axes(ctx, axes, x.rank(), &shape_for);
    }
    let axes = match axes_list(ctx, 1, 13)? {
        Some(a) => a
            .iter()
            .map(|&a| axis_and_dim(a, &x.shape).map(|(a, _)| a))
            .collect::<Result<Vec<_>, _>>()?,
        None => (0..x.rank()).filter(|&i| x.shape[i] == 1).collect(),
    };
    if let Some(&a) = axes.iter().find(|&&a| x.shape[a] != 1) {
        return Err(format!("cannot squeeze axis {a} of size {}", x.shape[a]).into());
    }
    let shape = (0..x.rank())
        .filter(|i| !axes.contains(i))
        .map(|i| x.shape[i])
        .collect();
    let y = emit_reshape(ctx, ctx.required(0)?, shape)?;
    ctx.bind_output(0, y);
    Ok(())
}

pub fn unsqueeze(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    if let Some(axes) = run_time_axes(ctx) {
        let out_rank = x.rank() + ctx.ty(axes).numel();
        let shape_for = |set: &[usize]| {
            let mut dims = x.shape.iter();
            Some(
                (0..out_rank)
                    .map(|i| {
                        if set.contains(&i) {
                            1
                        } else {
                            *dims.next().unwrap_or(&1)
                        }
                    })
                    .collect(),
            )
        };
        return reshape_by_run_time_axes(ctx, axes, out_rank, &shape_for);
    }
    let axes = axes_list(ctx, 1, 13)?.ok_or("axes are required")?;
    let out_rank = x.rank() + axes.len();
    let mut axes = axes
        .iter()
        .map(|&a| normalize_axis(a, out_rank))
        .collect::<Result<Vec<_>, _>>()?;
    axes.sort_unstable();
    if axes.windows(2).any(|w| w[0] == w[1]) {
        return Err("axes contain duplicates".into());
    }
    let mut dims = x.shape.iter();
    let shape = (0..out_rank)
        .map(|i| {
            if axes.contains(&i) {
                1
            } else {
                *dims.next().unwrap_or(&1)
            }
        })
        .collect();
    let y = emit_reshape(ctx, ctx.required(0)?, shape)?;
    ctx.bind_output(0, y);
    Ok(())
}

pub fn transpose(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let perm = match ctx.attrs.ints_opt("perm")? {
        // Unlike axes elsewhere, perm entries may not count from the end.
        Some(p) => p
            .iter()
            .map(|&a| {
                usize::try_from(a).map_err(|_| format!("perm {p:?} has a negative entry {a}"))
            })
            .collect::<Result<Vec<_>, _>>()?,
        None => (0..x.rank()).rev().collect(),
    };
    let mut seen = perm.clone();
    seen.sort_unstable();
    if seen != (0..x.rank()).collect::<Vec<_>>() {
        return Err(format!(
            "perm {perm:?} is not a permutation of the {} axes",
            x.rank()
        )
        .into());
    }
    let xv = ctx.required(0)?;
    // NonZero's indices one row per element (as `torch.nonzero` exports): the NonZero
    // writes them so, its varying extent leading, and what follows runs row by row.
    if let (Some(Op::NonZero { transposed: false }), [1, 0]) = (ctx.producer_op(xv), &perm[..]) {
        let data = ctx.producer_inputs(xv);
        let outs = ctx.emit(Op::NonZero { transposed: true }, data, 2)?;
        ctx.bind_output(0, outs[0]);
        return Ok(());
    }
    let y = ctx.emit1(Op::Transpose { perm }, vec![Some(xv)])?;
    ctx.bind_output(0, y);
    Ok(())
}

pub fn concat(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let axis = normalize_axis(
        ctx.attrs
            .int_opt("axis")?
            .ok_or("attribute 'axis' is required")?,
        x.rank(),
    )?;
    let ins: Vec<_> = ctx.inputs.iter().flatten().map(|v| Some(*v)).collect();
    if ins.iter().flatten().any(|v| counted_on(ctx, *v, axis)) {
        return concat_rows(ctx, axis, ins);
    }
    let y = ctx.emit1(Op::Concat { axis }, ins)?;
    ctx.bind_output(0, y);
    Ok(())
}

/// Whether the run counts `v`'s extent along `axis`.
fn counted_on(ctx: &NodeCtx, v: ValueId, axis: usize) -> bool {
    ctx.run_extent(v).is_some_and(|e| e.axes.contains(&axis))
}

/// Concat along an axis whose extent the run counts in some of the values (the kept
/// boxes of each class): their rows one after another, the count summed at run time.
fn concat_rows(ctx: &mut NodeCtx, axis: usize, ins: Vec<Option<ValueId>>) -> ImportResult {
    let mut counts = Vec::with_capacity(ins.len());
    let mut key = Vec::with_capacity(ins.len());
    for v in ins.iter().flatten() {
        let count = counted_rows_on(ctx, *v, axis)?;
        if count.is_none() && ctx.ty(*v).shape[..axis].iter().any(|&d| d != 1) {
            return Err(format!(
                "it concatenates rows the run counts with '{}', whose axes before {axis} are not all 1",
                ctx.value_name(*v)
            )
            .into());
        }
        key.push((count, ctx.ty(*v).shape[axis]));
        counts.push(count);
    }
    let parts = ins.len();
    let mut inputs = ins;
    inputs.extend(counts);
    let outs = ctx.emit(Op::ConcatRows { axis, parts }, inputs, 2)?;
    let (y, count) = (outs[0], outs[1]);
    let count = ctx.shared_row_sum(key, count);
    ctx.set_run_extent(
        y,
        RunExtent {
            axes: vec![axis],
            count,
            whole_shape: false,
        },
    );
    ctx.bind_output(0, y);
    Ok(())
}

/// A slice of whole axes except `axis`, which takes `len` elements from `start`.
fn axis_slice(shape: &[usize], axis: usize, start: usize, len: usize) -> Op {
    let mut starts = vec![0; shape.len()];
    starts[axis] = start;
    let mut out = shape.to_vec();
    out[axis] = len;
    Op::Slice {
        starts,
        steps: vec![1; shape.len()],
        shape: out,
    }
}

pub fn split(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    if x.rank() == 0 {
        return Err("cannot split a scalar".into());
    }
    let axis = normalize_axis(ctx.attrs.int("axis", 0)?, x.rank())?;
    let n_out = ctx.node.output.len();
    if let Some(sizes) = (ctx.input(1)).filter(|v| ctx.opset() >= 13 && ctx.constant(*v).is_none())
    {
        let st = ctx.ty(sizes);
        if !st.dtype.is_int() || st.rank() != 1 || st.numel() != n_out {
            return Err(
                format!("split must hold {n_out} integers (one per output), not {st}").into(),
            );
        }
        let op = Op::SplitRunTime { axis, parts: n_out };
        let outs = ctx.emit(op, vec![Some(ctx.required(0)?), Some(sizes)], 2 * n_out)?;
        ctx.bind_outputs(&outs[..n_out]);
        return Ok(());
    }
    let explicit = if ctx.opset() < 13 {
        ctx.attrs.ints_opt("split")?
    } else {
        ctx.const_input(1, "split")?.map(|t| t.to_i64_vec())
    };
    let dim = x.shape[axis];
    let sizes: Vec<usize> = match explicit {
        Some(s) => s
            .iter()
            .map(|&v| usize::try_from(v).map_err(|_| format!("negative split size {v}")))
            .collect::<Result<_, _>>()?,
        None => {
            let n = ctx.attrs.int("num_outputs", n_out as i64)?;
            if n != n_out as i64 || n == 0 {
                return Err(format!(
                    "attribute 'num_outputs' is {n}: it must be the node's {n_out} outputs, at least one"
                )
                .into());
            }
            let n = n_out;
            // opset 18: the last chunk is smaller when the axis does not divide evenly.
            let chunk = dim.div_ceil(n);
            (0..n)
                .map(|i| chunk.min(dim.saturating_sub(i.saturating_mul(chunk))))
                .collect()
        }
    };
    let total = sizes.iter().try_fold(0usize, |t, &s| t.checked_add(s));
    if total != Some(dim) || sizes.len() != n_out {
        return Err(format!(
            "split sizes {sizes:?} do not cover axis {axis} of size {dim} with {n_out} outputs"
        )
        .into());
    }
    let xv = ctx.required(0)?;
    let mut start = 0;
    for (k, &len) in sizes.iter().enumerate() {
        let y = ctx.emit1(axis_slice(&x.shape, axis, start, len), vec![Some(xv)])?;
        ctx.bind_output(k, y);
        start += len;
    }
    Ok(())
}

/// Slice whose starts, ends, axes or steps are computed at run time: planned at the
/// input's shape, the axes a slice may shorten those the constant axes name (every axis
/// when the axes are read at run time too).
fn slice_run_time(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let starts = ctx.required(1)?;
    let count = ctx.ty(starts).numel();
    let varying = match ctx.input(3) {
        None => {
            if count > x.rank() {
                return Err(format!("{count} starts for the rank-{} input", x.rank()).into());
            }
            (0..count).collect()
        }
        Some(a) => match ctx.constant(a) {
            Some(t) => (t.to_i64_vec().iter())
                .map(|&a| axis_and_dim(a, &x.shape).map(|(a, _)| a))
                .collect::<Result<Vec<usize>, _>>()?,
            None => (0..x.rank()).collect(),
        },
    };
    let inputs: Vec<Option<ValueId>> = (0..5).map(|i| ctx.input(i)).collect();
    let outs = ctx.emit(Op::SliceRunTime { count, varying }, inputs, 2)?;
    ctx.bind_output(0, outs[0]);
    Ok(())
}

pub fn slice(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let run_time = |v: ValueId| ctx.constant(v).is_none();
    if ctx.opset() >= 10 && (1..5).filter_map(|i| ctx.input(i)).any(run_time) {
        return slice_run_time(ctx);
    }
    let (starts, ends, axes, steps) = if ctx.opset() < 10 {
        let a = &ctx.attrs;
        (
            a.ints_opt("starts")?.ok_or("starts required")?,
            a.ints_opt("ends")?.ok_or("ends required")?,
            a.ints_opt("axes")?,
            None,
        )
    } else {
        let get = |i, what| -> ImportResult<Option<Vec<i64>>> {
            Ok(ctx.const_input(i, what)?.map(|t| t.to_i64_vec()))
        };
        (
            get(1, "starts")?.ok_or("starts required")?,
            get(2, "ends")?.ok_or("ends required")?,
            get(3, "axes")?,
            get(4, "steps")?,
        )
    };
    let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err("starts, ends, axes and steps must have the same length".into());
    }
    let r = x.rank();
    let mut out_starts = vec![0usize; r];
    let mut out_steps = vec![1i64; r];
    let mut shape = x.shape.clone();
    let xv = ctx.required(0)?;
    // Along rows the run counts, only the first ones: start 0, step 1, a non-negative
    // end, taken after the other axes are sliced.
    let mut first_rows = None;
    let mut slices_counted = false;
    for i in 0..starts.len() {
        let (axis, dim) = axis_and_dim(axes[i], &x.shape)?;
        if counted_on(ctx, xv, axis) {
            if (starts[i], steps[i]) != (0, 1) || ends[i] < 0 {
                return Err(format!(
                    "it slices axis {axis} of '{}', whose extent only the run knows, from {} to {} by {}; nnc slices such rows from 0 by 1 to a non-negative end",
                    ctx.value_name(xv), starts[i], ends[i], steps[i]
                )
                .into());
            }
            slices_counted = true;
            // An end past the bound keeps every row the run has.
            first_rows = (ends[i] < dim as i64).then_some((axis, ends[i]));
            continue;
        }
        let step = steps[i];
        if step == 0 {
            return Err("slice step cannot be 0".into());
        }
        let (start, len) = slice_run(starts[i], ends[i], step, dim);
        out_starts[axis] = start;
        out_steps[axis] = step;
        shape[axis] = len;
    }
    let mut y = xv;
    if shape != x.shape || !slices_counted {
        let op = Op::Slice {
            starts: out_starts,
            steps: out_steps,
            shape,
        };
        y = ctx.emit1(op, vec![Some(xv)])?;
    }
    if let Some((axis, n)) = first_rows {
        let count = counted_rows_on(ctx, y, axis)?.expect("the rows stay counted");
        let bound = usize::try_from(n).unwrap_or(0);
        let n = ctx.constant_value("rows", Tensor::scalar(n));
        let op = Op::FirstRows { axis, bound };
        y = ctx.emit(op, vec![Some(y), Some(count), Some(n)], 2)?[0];
    }
    ctx.bind_output(0, y);
    Ok(())
}

pub fn gather(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    if x.rank() == 0 {
        return Err("cannot gather from a scalar".into());
    }
    let axis = normalize_axis(ctx.attrs.int("axis", 0)?, x.rank())?;
    let data = ctx.required(0)?;
    let mut ins = vec![Some(data), Some(ctx.required(1)?)];
    // Rows of data the run counts (kept boxes after a NonZero) are read whole, an index
    // checked against their count: input 2.
    if let Some(count) = counted_rows_on(ctx, data, axis)? {
        ins.push(Some(count));
    }
    let y = ctx.emit1(Op::Gather { axis }, ins)?;
    ctx.bind_output(0, y);
    Ok(())
}

/// The run's count of `v`'s rows along `axis` as an int64 scalar, when the run counts
/// them and only unit axes precede (`None` when the run does not count that axis).
fn counted_rows_on(ctx: &mut NodeCtx, v: ValueId, axis: usize) -> ImportResult<Option<ValueId>> {
    let Some(e) = ctx.run_extent(v).cloned() else {
        return Ok(None);
    };
    if !e.axes.contains(&axis) {
        return Ok(None);
    }
    if crate::ops::rows::row_axis(ctx.ty(v), &e) != Some(axis) {
        return Err(format!(
            "it reads '{}' by indices along axis {axis}, whose extent only the run knows; nnc needs that axis to lead (only axes of 1 before it)",
            ctx.value_name(v)
        )
        .into());
    }
    if !e.whole_shape {
        return Ok(Some(e.count));
    }
    let count = shape_value(ctx, v, axis..axis + 1)?;
    emit_reshape(ctx, count, vec![]).map(Some)
}

pub fn expand(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let target = ctx
        .const_input(1, "shape")?
        .ok_or("input 'shape' is required")?
        .to_i64_vec();
    let target: Vec<usize> = target
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("negative dimension {d}")))
        .collect::<Result<_, _>>()?;
    let shape = broadcast_shapes(&[&x.shape, &target])?;
    let y = ctx.emit1(Op::Expand { shape }, vec![Some(ctx.required(0)?)])?;
    ctx.bind_output(0, y);
    Ok(())
}

/// Tile as reshape → expand → reshape: `[d0, d1]` → `[1, d0, 1, d1]` → `[r0, d0, r1, d1]`.
pub fn tile(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let reps = ctx
        .const_input(1, "repeats")?
        .ok_or("input 'repeats' is required")?
        .to_i64_vec();
    if reps.len() != x.rank() || reps.iter().any(|&r| r < 0) {
        return Err(format!("repeats {reps:?} must have one non-negative entry per axis").into());
    }
    let spread: Vec<usize> = x.shape.iter().flat_map(|&d| [1, d]).collect();
    let expanded: Vec<usize> = x
        .shape
        .iter()
        .zip(&reps)
        .flat_map(|(&d, &r)| [r as usize, d])
        .collect();
    let out: Vec<usize> = x
        .shape
        .iter()
        .zip(&reps)
        .map(|(&d, &r)| (r as usize).checked_mul(d))
        .collect::<Option<_>>()
        .ok_or_else(|| format!("repeats {reps:?} overflow the shape {:?}", x.shape))?;
    let v = emit_reshape(ctx, ctx.required(0)?, spread)?;
    let v = ctx.emit1(Op::Expand { shape: expanded }, vec![Some(v)])?;
    let y = emit_reshape(ctx, v, out)?;
    ctx.bind_output(0, y);
    Ok(())
}

/// DepthToSpace / SpaceToDepth as reshape → transpose → reshape (the spec's definition).
pub fn depth_space(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let [n, c, h, w] = x.shape[..] else {
        return Err("input must be 4-D".into());
    };
    let b = usize::try_from(
        ctx.attrs
            .int_opt("blocksize")?
            .ok_or("attribute 'blocksize' is required")?,
    )
    .map_err(|_| "negative blocksize")?;
    // Bounded by the input's extent, so every product of it with a dimension fits.
    if b == 0 || b.checked_mul(b).is_none_or(|bb| bb > x.numel().max(1)) {
        return Err(format!("blocksize {b} must be positive and fit the input").into());
    }
    let (tmp, perm, out) = if ctx.node.op_type == "DepthToSpace" {
        if c % (b * b) != 0 {
            return Err("channels must be divisible by blocksize²".into());
        }
        let c2 = c / (b * b);
        if ctx.attrs.string("mode", "DCR")? == "CRD" {
            (
                vec![n, c2, b, b, h, w],
                vec![0, 1, 4, 2, 5, 3],
                vec![n, c2, h * b, w * b],
            )
        } else {
            (
                vec![n, b, b, c2, h, w],
                vec![0, 3, 4, 1, 5, 2],
                vec![n, c2, h * b, w * b],
            )
        }
    } else {
        if h % b != 0 || w % b != 0 {
            return Err("height and width must be divisible by blocksize".into());
        }
        let perm = match ctx.attrs.string("mode", "DCR")?.as_str() {
            "DCR" => vec![0, 3, 5, 1, 2, 4],
            "CRD" => vec![0, 1, 3, 5, 2, 4],
            m => return Err(format!("unknown mode '{m}': expected DCR or CRD").into()),
        };
        (
            vec![n, c, h / b, b, w / b, b],
            perm,
            vec![n, c * b * b, h / b, w / b],
        )
    };
    let v = emit_reshape(ctx, ctx.required(0)?, tmp)?;
    let v = ctx.emit1(Op::Transpose { perm }, vec![Some(v)])?;
    let y = emit_reshape(ctx, v, out)?;
    ctx.bind_output(0, y);
    Ok(())
}

pub fn pad(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let r = x.rank();
    let mode = match ctx.attrs.string("mode", "constant")?.as_str() {
        "constant" => PadMode::Constant,
        "reflect" => PadMode::Reflect,
        "edge" => PadMode::Edge,
        "wrap" => PadMode::Wrap,
        m => return Err(format!("unknown pad mode '{m}'").into()),
    };
    let (pads, value) = if ctx.opset() < 11 {
        let p = ctx
            .attrs
            .ints_opt("pads")?
            .or(ctx.attrs.ints_opt("paddings")?)
            .ok_or("attribute 'pads' is required")?;
        (p, ctx.attrs.float("value", 0.0)? as f64)
    } else {
        let p = ctx
            .const_input(1, "pads")?
            .ok_or("input 'pads' is required")?
            .to_i64_vec();
        let v = ctx
            .const_input(2, "constant_value")?
            .map(|t| t.to_f64_vec().first().copied().unwrap_or(0.0))
            .unwrap_or(0.0);
        (p, v)
    };
    // opset 18: `axes` selects which axes the pads apply to.
    let axes = ctx.const_input(3, "axes")?.map(|t| t.to_i64_vec());
    let full = match axes {
        None if pads.len() == 2 * r => pads,
        None => return Err(format!("pads has {} entries, {} expected", pads.len(), 2 * r).into()),
        Some(axes) => {
            if pads.len() != 2 * axes.len() {
                return Err("pads must have two entries per listed axis".into());
            }
            let mut full = vec![0i64; 2 * r];
            for (k, &a) in axes.iter().enumerate() {
                let a = normalize_axis(a, r)?;
                full[a] = pads[k];
                full[r + a] = pads[axes.len() + k];
            }
            full
        }
    };
    let y = ctx.emit1(
        Op::Pad(PadAttrs {
            mode,
            pads: full,
            value,
        }),
        vec![Some(ctx.required(0)?)],
    )?;
    ctx.bind_output(0, y);
    Ok(())
}

pub fn shape_of(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let r = x.rank() as i64;
    let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
    let start = clamp(ctx.attrs.int("start", 0)?);
    let end = clamp(ctx.attrs.int("end", r)?);
    let x = ctx.required(0)?;
    let v = shape_value(ctx, x, start..end.max(start))?;
    if (start, end) == (0, r as usize) && ctx.run_extent(x).is_some() {
        ctx.note_run_shape(v, x);
    }
    ctx.bind_output(0, v);
    Ok(())
}

/// Axes `axes` of `v`'s shape as an int64 `[len]`: a constant, or, when `v` has extents
/// only the run knows among them, computed from its count value at run time.
fn shape_value(
    ctx: &mut NodeCtx,
    v: ValueId,
    axes: std::ops::Range<usize>,
) -> ImportResult<ValueId> {
    let dims: Vec<i64> = ctx.ty(v).shape[axes.clone()]
        .iter()
        .map(|&d| d as i64)
        .collect();
    let extent = ctx.run_extent(v).cloned();
    let Some(extent) = extent.filter(|e| axes.clone().any(|a| e.axes.contains(&a))) else {
        return Ok(ctx.constant_value(ctx.name, Tensor::from_vec(&[dims.len()], dims)));
    };
    let mut pieces = Vec::with_capacity(dims.len());
    for (a, &d) in axes.zip(&dims) {
        let piece = if !extent.axes.contains(&a) {
            ctx.constant_value(ctx.name, Tensor::from_vec(&[1], vec![d]))
        } else if extent.whole_shape {
            let op = Op::Slice {
                starts: vec![a],
                steps: vec![1],
                shape: vec![1],
            };
            ctx.emit1(op, vec![Some(extent.count)])?
        } else {
            emit_reshape(ctx, extent.count, vec![1])?
        };
        pieces.push(Some(piece));
    }
    if pieces.len() == 1 {
        return Ok(pieces[0].expect("one piece"));
    }
    ctx.emit1(Op::Concat { axis: 0 }, pieces)
}

pub fn size_of(ctx: &mut NodeCtx) -> ImportResult {
    let xv = ctx.required(0)?;
    let x = ctx.input_ty(0)?;
    if ctx.run_extent(xv).is_none() {
        let v = ctx.constant_value(ctx.name, Tensor::scalar(x.numel() as i64));
        ctx.bind_output(0, v);
        return Ok(());
    }
    let shape = shape_value(ctx, xv, 0..x.rank())?;
    let op = Op::Reduce(crate::ops::ReduceAttrs {
        kind: crate::ops::ReduceKind::Prod,
        axes: vec![0],
        keepdims: false,
    });
    let n = ctx.emit1(op, vec![Some(shape)])?;
    ctx.bind_output(0, n);
    Ok(())
}

pub fn constant_of_shape(ctx: &mut NodeCtx) -> ImportResult {
    if let Some(like) = ctx.input(0).and_then(|s| ctx.run_shape_of(s)) {
        return fill_like(ctx, like);
    }
    let dims = ctx
        .const_input(0, "shape")?
        .ok_or("input 'shape' is required")?
        .to_i64_vec();
    let shape: Vec<usize> = dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("negative dimension {d}")))
        .collect::<Result<_, _>>()?;
    let fill = match ctx.attrs.tensor_opt("value")? {
        Some(t) => tensor_from_proto(t, None)?,
        None => Tensor::scalar(0f32),
    };
    if fill.len() != 1 {
        return Err("attribute 'value' must hold one element".into());
    }
    let one = fill.reshape(&[]);
    let ty = crate::ir::TensorType::new(one.dtype(), shape.clone());
    ctx.limits().check_tensor(&ty)?;
    if !ctx.limits().may_fold([&ty]) {
        // Too big to carry as a weight: filled by infer().
        let scalar = ctx.constant_value("value", one);
        let y = ctx.emit1(Op::Expand { shape }, vec![Some(scalar)])?;
        ctx.bind_output(0, y);
        return Ok(());
    }
    let filled = crate::map_tensor!(&one, a => a.broadcast(ndarray::IxDyn(&shape)).ok_or("bad shape")?.to_owned());
    let v = ctx.constant_value(ctx.name, filled);
    ctx.bind_output(0, v);
    Ok(())
}

/// ConstantOfShape of the shape of `like`, a value whose extents only the run knows:
/// the fill expanded to its planned shape, taking its extents (input 1 of the Expand).
fn fill_like(ctx: &mut NodeCtx, like: ValueId) -> ImportResult {
    let fill = match ctx.attrs.tensor_opt("value")? {
        Some(t) => tensor_from_proto(t, None)?,
        None => Tensor::scalar(0f32),
    };
    if fill.len() != 1 {
        return Err("attribute 'value' must hold one element".into());
    }
    let scalar = ctx.constant_value("value", fill.reshape(&[]));
    let shape = ctx.ty(like).shape.clone();
    let y = ctx.emit1(Op::Expand { shape }, vec![Some(scalar), Some(like)])?;
    ctx.bind_output(0, y);
    Ok(())
}

pub fn range(ctx: &mut NodeCtx) -> ImportResult {
    let get = |i, what| -> ImportResult<Tensor> {
        ctx.const_input(i, what)?
            .ok_or_else(|| ImportError::Invalid(format!("input '{what}' is required")))
    };
    let (start, limit, delta) = (get(0, "start")?, get(1, "limit")?, get(2, "delta")?);
    if [&start, &limit, &delta].iter().any(|t| t.len() != 1) {
        return Err("start, limit and delta must each hold one value".into());
    }
    let dtype = start.dtype();
    let (s, l, d) = (
        start.to_f64_vec()[0],
        limit.to_f64_vec()[0],
        delta.to_f64_vec()[0],
    );
    if d == 0.0 || !(s.is_finite() && l.is_finite() && d.is_finite()) {
        return Err(format!(
            "start {s}, limit {l} and delta {d} must be finite and delta non-zero"
        )
        .into());
    }
    // Range is computed here, never in infer(): its size must fit --max-fold-bytes.
    let count = ((l - s) / d).ceil().max(0.0);
    let too_long = || {
        let limit = crate::limits::ByteSize(ctx.limits().max_fold_bytes);
        format!(
            "Range({s}, {l}, {d}) has {count} elements, more than the {limit} limit of constants computed at compile time; raise it with --max-fold-bytes"
        )
    };
    if count >= (1u64 << 53) as f64 {
        return Err(too_long().into());
    }
    let n = count as usize;
    let ty = crate::ir::TensorType::new(dtype, vec![n]);
    if !ctx.limits().may_fold([&ty]) {
        return Err(too_long().into());
    }
    let t = if dtype.is_float() {
        Tensor::from_vec(&[n], (0..n).map(|i| s + i as f64 * d).collect::<Vec<f64>>()).cast(dtype)
    } else {
        let (s, d) = (start.to_i64_vec()[0], delta.to_i64_vec()[0]);
        Tensor::from_vec(
            &[n],
            (0..n as i64)
                .map(|i| s.wrapping_add(i.wrapping_mul(d)))
                .collect::<Vec<i64>>(),
        )
        .cast(dtype)
    };
    let v = ctx.constant_value(ctx.name, t);
    ctx.bind_output(0, v);
    Ok(())
}

pub fn constant(ctx: &mut NodeCtx) -> ImportResult {
    let a = &ctx.attrs;
    let t = if let Some(t) = a.tensor_opt("value")? {
        ctx.weight_attribute(t)?
    } else if let Some(f) = a.float_opt("value_float")? {
        Tensor::scalar(f)
    } else if let Some(v) = a.floats_opt("value_floats")? {
        Tensor::from_vec(&[v.len()], v)
    } else if let Some(i) = a.int_opt("value_int")? {
        Tensor::scalar(i)
    } else if let Some(v) = a.ints_opt("value_ints")? {
        Tensor::from_vec(&[v.len()], v)
    } else if a.has("sparse_value") {
        return Err(ImportError::Unsupported("sparse constants".into()));
    } else if a.has("value_string") || a.has("value_strings") {
        return Err(ImportError::Unsupported("string tensors".into()));
    } else {
        return Err("Constant needs a value attribute".into());
    };
    ctx.limits().check_tensor(&t.ty())?;
    let v = ctx.constant_value(ctx.name, t);
    ctx.bind_output(0, v);
    Ok(())
}
