//! Data movement: Reshape, Transpose, Concat, Slice, Gather, Expand, Pad. Every element
//! type is supported; values are copied, never converted.

use ndarray::{ArrayD, ArrayViewD, Axis, IxDyn, Slice};

use super::array_ref;
use crate::ir::{Element, Tensor};
use crate::ops::{PadAttrs, PadMode};
use crate::{map_tensor, with_tensor};

pub(super) fn reshape(x: &Tensor, shape: &[usize]) -> Result<Tensor, String> {
    if shape.iter().product::<usize>() != x.len() {
        return Err(format!("cannot reshape {:?} to {shape:?}", x.shape()));
    }
    Ok(map_tensor!(x, a => a
        .as_standard_layout()
        .into_owned()
        .into_shape_with_order(IxDyn(shape))
        .map_err(|e| e.to_string())?))
}

pub(super) fn transpose(x: &Tensor, perm: &[usize]) -> Result<Tensor, String> {
    let rank = x.shape().len();
    let mut seen = vec![false; rank];
    let is_permutation = perm.len() == rank
        && perm
            .iter()
            .all(|&p| p < rank && !std::mem::replace(&mut seen[p], true));
    if !is_permutation {
        return Err(format!("{perm:?} is not a permutation of {rank} axes"));
    }
    Ok(map_tensor!(x, a => a.view().permuted_axes(IxDyn(perm)).as_standard_layout().into_owned()))
}

pub(super) fn concat(parts: &[&Tensor], axis: usize) -> Result<Tensor, String> {
    let first = *parts.first().ok_or("Concat needs at least one input")?;
    let rank = first.shape().len();
    if axis >= rank {
        return Err(format!("axis {axis} is out of range for rank {rank}"));
    }
    for p in parts {
        let same_other_dims = p.shape().len() == rank
            && (0..rank).all(|i| i == axis || p.shape()[i] == first.shape()[i]);
        if p.dtype() != first.dtype() || !same_other_dims {
            return Err(format!("cannot concatenate {} with {}", first.ty(), p.ty()));
        }
    }
    /// `_first` only fixes the element type.
    fn join<T: Element>(
        _first: &ArrayD<T>,
        parts: &[&Tensor],
        axis: usize,
    ) -> Result<Tensor, String> {
        let views: Vec<ArrayViewD<T>> = parts
            .iter()
            .map(|p| {
                array_ref::<T>(p)
                    .map(|a| a.view())
                    .ok_or("mixed input types")
            })
            .collect::<Result<_, _>>()?;
        let joined = ndarray::concatenate(Axis(axis), &views).map_err(|e| e.to_string())?;
        Ok(T::wrap(joined))
    }
    with_tensor!(first, a => join(a, parts, axis))
}

/// Output element `j` along axis `i` reads input index `starts[i] + j · steps[i]`.
pub(super) fn slice(
    x: &Tensor,
    starts: &[usize],
    steps: &[i64],
    shape: &[usize],
) -> Result<Tensor, String> {
    let dims = x.shape();
    let rank = dims.len();
    if starts.len() != rank || steps.len() != rank || shape.len() != rank {
        return Err(format!("Slice attributes must have {rank} entries"));
    }
    let slices = (0..rank)
        .map(|i| axis_slice(dims[i], starts[i], steps[i], shape[i]))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(map_tensor!(x, a => a
        .slice_each_axis(|ax| slices[ax.axis.index()])
        .as_standard_layout()
        .into_owned()))
}

/// The ndarray slice reading `len` elements from `start` in steps of `step`.
fn axis_slice(dim: usize, start: usize, step: i64, len: usize) -> Result<Slice, String> {
    if step == 0 {
        return Err("slice step must not be zero".into());
    }
    if len == 0 {
        return Ok(Slice::new(0, Some(0), 1));
    }
    let out_of_range =
        || format!("slice start {start}, step {step}, length {len} leaves an axis of {dim}");
    let start_i = i64::try_from(start).map_err(|_| out_of_range())?;
    let last = i64::try_from(len - 1)
        .ok()
        .and_then(|n| n.checked_mul(step))
        .and_then(|span| span.checked_add(start_i))
        .ok_or_else(out_of_range)?;
    if start >= dim || last < 0 || last >= dim as i64 {
        return Err(out_of_range());
    }
    let step = isize::try_from(step).map_err(|_| out_of_range())?;
    Ok(if step > 0 {
        Slice::new(start as isize, Some(last as isize + 1), step)
    } else {
        // ndarray walks a negative-step range from its end: start, start + step, ...
        Slice::new(last as isize, Some(start as isize + 1), step)
    })
}

/// `Gather(data, indices)` along `axis`; negative indices count from the end.
pub(super) fn gather(data: &Tensor, indices: &Tensor, axis: usize) -> Result<Tensor, String> {
    let dims = data.shape();
    if axis >= dims.len() {
        return Err(format!(
            "axis {axis} is out of range for rank {}",
            dims.len()
        ));
    }
    let size = dims[axis] as i64;
    let positions = super::indexing::index_values(indices)?
        .into_iter()
        .map(|i| {
            let j = if i < 0 { i + size } else { i };
            usize::try_from(j)
                .ok()
                .filter(|&j| (j as i64) < size)
                .ok_or_else(|| format!("index {i} is out of range for an axis of {size}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut shape = dims[..axis].to_vec();
    shape.extend(indices.shape());
    shape.extend(&dims[axis + 1..]);
    // `select` may return a non-standard layout (axis > 0); reshape needs row-major.
    Ok(map_tensor!(data, a => a
        .select(Axis(axis), &positions)
        .as_standard_layout()
        .into_owned()
        .into_shape_with_order(IxDyn(&shape))
        .map_err(|e| e.to_string())?))
}

pub(super) fn expand(x: &Tensor, shape: &[usize]) -> Result<Tensor, String> {
    Ok(map_tensor!(x, a => a
        .broadcast(IxDyn(shape))
        .ok_or_else(|| format!("cannot expand {:?} to {shape:?}", a.shape()))?
        .to_owned()))
}

/// Pad: negative pads crop first, then the positive pads are filled by `mode` from the
/// cropped data (constant value, edge replication, numpy-style reflection without
/// repeating the edge, or wrap-around).
pub(super) fn pad(p: &PadAttrs, x: &Tensor) -> Result<Tensor, String> {
    let rank = x.shape().len();
    if p.pads.len() != 2 * rank {
        return Err(format!("pads {:?} must have {} entries", p.pads, 2 * rank));
    }
    Ok(map_tensor!(x, a => pad_array(p, a)?))
}

fn pad_array<T: Element>(p: &PadAttrs, a: &ArrayD<T>) -> Result<ArrayD<T>, String> {
    let rank = a.ndim();
    let (begin, end) = p.pads.split_at(rank);
    let mut cropped = a.view();
    for axis in 0..rank {
        let dim = cropped.shape()[axis] as i64;
        let (cut_begin, cut_end) = (
            begin[axis].saturating_neg().max(0),
            end[axis].saturating_neg().max(0),
        );
        if cut_begin.saturating_add(cut_end) > dim {
            return Err(format!("pads crop axis {axis} below zero"));
        }
        cropped.slice_axis_inplace(
            Axis(axis),
            Slice::from(cut_begin as isize..(dim - cut_end) as isize),
        );
    }
    let grow = |axis: usize| (begin[axis].max(0) as usize, end[axis].max(0) as usize);
    if p.mode == PadMode::Constant {
        let shape: Vec<usize> = (0..rank)
            .map(|i| grow(i).0 + cropped.shape()[i] + grow(i).1)
            .collect();
        let mut out = ArrayD::from_elem(IxDyn(&shape), T::from_f64(p.value));
        out.slice_each_axis_mut(|ax| {
            let i = ax.axis.index();
            Slice::from(grow(i).0..grow(i).0 + cropped.shape()[i])
        })
        .assign(&cropped);
        return Ok(out);
    }
    // Edge, reflect and wrap are separable: pad one axis at a time by gathering.
    let mut out = cropped.to_owned();
    for axis in 0..rank {
        let (b, e) = grow(axis);
        if b == 0 && e == 0 {
            continue;
        }
        let n = out.shape()[axis];
        if n == 0 {
            return Err(format!(
                "cannot pad an empty axis {axis} in {:?} mode",
                p.mode
            ));
        }
        let sources: Vec<usize> = (0..b + n + e)
            .map(|j| source_index(p.mode, j as i64 - b as i64, n))
            .collect();
        out = out.select(Axis(axis), &sources);
    }
    Ok(out)
}

/// The data index that output coordinate `i` (relative to the data's start) copies.
fn source_index(mode: PadMode, i: i64, n: usize) -> usize {
    let n = n as i64;
    let j = match mode {
        PadMode::Edge | PadMode::Constant => i.clamp(0, n - 1),
        PadMode::Wrap => i.rem_euclid(n),
        PadMode::Reflect if n == 1 => 0,
        PadMode::Reflect => {
            // Reflection without repeating the edge has period 2(n − 1).
            let period = 2 * (n - 1);
            let m = i.rem_euclid(period);
            if m >= n {
                period - m
            } else {
                m
            }
        }
    };
    j as usize
}
