//! Ops whose output extent depends on the input values: NonZero, Compress, Unique and
//! NonMaxSuppression. Each returns its outputs at their actual extent, then that extent
//! (an int64 scalar), as [`crate::ops::Op::counted_outputs`] lays them out.

use ndarray::{ArrayD, IxDyn};

use super::indexing::{elements, split_at_axis, total_cmp};
use crate::ir::{Element, Tensor};
use crate::with_tensor;

fn shaped<T: Element>(shape: &[usize], v: Vec<T>) -> Result<Tensor, String> {
    Ok(T::wrap(
        ArrayD::from_shape_vec(IxDyn(shape), v).map_err(|e| e.to_string())?,
    ))
}

fn count(n: usize) -> Tensor {
    Tensor::scalar(n as i64)
}

pub(super) fn non_zero(x: &Tensor) -> Result<Vec<Tensor>, String> {
    let values = x.to_f64_vec();
    let shape = x.shape();
    let found: Vec<usize> = (0..values.len()).filter(|&i| values[i] != 0.0).collect();
    let n = found.len();
    let mut out = vec![0i64; shape.len() * n];
    for (j, &flat) in found.iter().enumerate() {
        let mut rest = flat;
        for a in (0..shape.len()).rev() {
            out[a * n + j] = (rest % shape[a]) as i64;
            rest /= shape[a];
        }
    }
    Ok(vec![shaped(&[shape.len(), n], out)?, count(n)])
}

pub(super) fn compress(
    x: &Tensor,
    condition: &Tensor,
    axis: Option<usize>,
) -> Result<Vec<Tensor>, String> {
    let cond = condition.to_i64_vec();
    let (shape, axis) = match axis {
        None => (vec![x.len()], 0),
        Some(a) => (x.shape().to_vec(), a),
    };
    let (outer, dim, inner) = split_at_axis(&shape, axis);
    let kept: Vec<usize> = (0..dim.min(cond.len())).filter(|&i| cond[i] != 0).collect();
    let mut out_shape = shape.clone();
    out_shape[axis] = kept.len();
    fn go<T: Element>(
        a: &ArrayD<T>,
        (outer, dim, inner): (usize, usize, usize),
        kept: &[usize],
        out_shape: &[usize],
    ) -> Result<Tensor, String> {
        let v = elements(a);
        let mut out = Vec::with_capacity(outer * kept.len() * inner);
        for o in 0..outer {
            for &k in kept {
                out.extend_from_slice(&v[(o * dim + k) * inner..][..inner]);
            }
        }
        shaped(out_shape, out)
    }
    let y = with_tensor!(x, a => go(a, (outer, dim, inner), &kept, &out_shape))?;
    Ok(vec![y, count(kept.len())])
}

pub(super) fn unique(x: &Tensor, axis: Option<usize>, sorted: bool) -> Result<Vec<Tensor>, String> {
    let (shape, axis) = match axis {
        None => (vec![x.len()], 0),
        Some(a) => (x.shape().to_vec(), a),
    };
    let (outer, dim, inner) = split_at_axis(&shape, axis);
    fn go<T: Element>(
        a: &ArrayD<T>,
        shape: &[usize],
        axis: usize,
        (outer, dim, inner): (usize, usize, usize),
        sorted: bool,
    ) -> Result<Vec<Tensor>, String> {
        let v = elements(a);
        // Slice `i` in numpy's order: axis moved to the front, the rest row-major.
        let at = |i: usize, e: usize| v[((e / inner) * dim + i) * inner + e % inner];
        let cmp = |i: usize, j: usize| {
            (0..outer * inner)
                .map(|e| total_cmp(at(i, e), at(j, e)))
                .find(|o| o.is_ne())
                .unwrap_or(std::cmp::Ordering::Equal)
        };
        let mut firsts: Vec<usize> = Vec::new();
        let mut first_of = Vec::with_capacity(dim);
        for i in 0..dim {
            match firsts.iter().find(|&&f| cmp(f, i).is_eq()) {
                Some(&f) => first_of.push(f),
                None => {
                    first_of.push(i);
                    firsts.push(i);
                }
            }
        }
        if sorted {
            firsts.sort_by(|&i, &j| cmp(i, j));
        }
        let n = firsts.len();
        let mut position = vec![0usize; dim];
        for (p, &f) in firsts.iter().enumerate() {
            position[f] = p;
        }
        let inverse: Vec<i64> = (0..dim).map(|i| position[first_of[i]] as i64).collect();
        let mut counts = vec![0i64; n];
        for &p in &inverse {
            counts[p as usize] += 1;
        }
        let mut y = Vec::with_capacity(outer * n * inner);
        for o in 0..outer {
            for &f in &firsts {
                y.extend_from_slice(&v[(o * dim + f) * inner..][..inner]);
            }
        }
        let mut y_shape = shape.to_vec();
        y_shape[axis] = n;
        let indices: Vec<i64> = firsts.iter().map(|&f| f as i64).collect();
        Ok(vec![
            shaped(&y_shape, y)?,
            shaped(&[n], indices)?,
            shaped(&[dim], inverse)?,
            shaped(&[n], counts)?,
            count(n),
        ])
    }
    with_tensor!(x, a => go(a, &shape, axis, (outer, dim, inner), sorted))
}

/// The corners `(min, max)` of one box along x and along y.
fn corners(b: &[f32], center_point_box: bool) -> [(f32, f32); 2] {
    let ordered = |a: f32, b: f32| if a >= b { (b, a) } else { (a, b) };
    if center_point_box {
        let (hw, hh) = (b[2] / 2.0, b[3] / 2.0);
        [(b[0] - hw, b[0] + hw), (b[1] - hh, b[1] + hh)]
    } else {
        [ordered(b[1], b[3]), ordered(b[0], b[2])]
    }
}

/// Whether two boxes overlap by more than `threshold` (IoU), as the reference decides.
fn suppresses(a: &[f32], b: &[f32], center_point_box: bool, threshold: f32) -> bool {
    let ([ax, ay], [bx, by]) = (corners(a, center_point_box), corners(b, center_point_box));
    let (ix0, ix1) = (ax.0.max(bx.0), ax.1.min(bx.1));
    if ix1 <= ix0 {
        return false;
    }
    let (iy0, iy1) = (ay.0.max(by.0), ay.1.min(by.1));
    if iy1 <= iy0 {
        return false;
    }
    let inter = (ix1 - ix0) * (iy1 - iy0);
    if inter <= 0.0 {
        return false;
    }
    let area_a = (ax.1 - ax.0) * (ay.1 - ay.0);
    let area_b = (bx.1 - bx.0) * (by.1 - by.0);
    let union = area_a + area_b - inter;
    if area_a <= 0.0 || area_b <= 0.0 || union <= 0.0 {
        return false;
    }
    inter / union > threshold
}

pub(super) fn non_max_suppression(
    boxes: &Tensor,
    scores: &Tensor,
    limits: [Option<&Tensor>; 3],
    center_point_box: bool,
) -> Result<Vec<Tensor>, String> {
    let (bs, ss) = (boxes.shape(), scores.shape());
    let (batches, n, classes) = (bs[0], bs[1], ss[1]);
    let boxes: Vec<f32> = boxes.to_f64_vec().iter().map(|&v| v as f32).collect();
    let scores: Vec<f32> = scores.to_f64_vec().iter().map(|&v| v as f32).collect();
    let first = |t: Option<&Tensor>| t.and_then(|t| t.to_f64_vec().first().copied());
    let max_out = limits[0]
        .and_then(|t| t.to_i64_vec().first().copied())
        .unwrap_or(0)
        .max(0) as usize;
    let iou = first(limits[1]).unwrap_or(0.0) as f32;
    let score_threshold = first(limits[2]).map(|s| s as f32);
    let mut out: Vec<i64> = Vec::new();
    for b in 0..batches {
        let batch_boxes = &boxes[b * n * 4..][..n * 4];
        for c in 0..classes {
            let s = &scores[(b * classes + c) * n..][..n];
            let mut order: Vec<usize> = (0..n)
                .filter(|&i| score_threshold.is_none_or(|t| s[i] > t))
                .collect();
            // Descending score, ties to the lower index (a stable sort); -0 and 0 tie
            // (adding 0 makes -0 positive), a NaN ranks above every number.
            order.sort_by(|&i, &j| (s[j] + 0.0).total_cmp(&(s[i] + 0.0)));
            let mut kept: Vec<usize> = Vec::new();
            for i in order {
                if kept.len() >= max_out {
                    break;
                }
                let bx = |k: usize| &batch_boxes[k * 4..][..4];
                if !kept
                    .iter()
                    .any(|&k| suppresses(bx(i), bx(k), center_point_box, iou))
                {
                    kept.push(i);
                    out.extend([b as i64, c as i64, i as i64]);
                }
            }
        }
    }
    let rows = out.len() / 3;
    Ok(vec![shaped(&[rows, 3], out)?, count(rows)])
}

/// Slice with its positions given as values (`[starts, ends, axes, steps]`, the last
/// two optional): the slice, then its shape.
pub(super) fn slice_run_time(
    x: &Tensor,
    [starts, ends, axes, steps]: &[Option<Vec<i64>>; 4],
) -> Result<Vec<Tensor>, String> {
    let dims = x.shape().to_vec();
    let rank = dims.len();
    let (starts, ends) = (starts.as_ref(), ends.as_ref());
    let (starts, ends) = starts.zip(ends).ok_or("Slice needs starts and ends")?;
    let n = starts.len();
    let axes = axes.clone().unwrap_or_else(|| (0..n as i64).collect());
    let steps = steps.clone().unwrap_or_else(|| vec![1; n]);
    let mut begin = vec![0usize; rank];
    let mut step = vec![1i64; rank];
    let mut shape = dims.clone();
    let mut seen = vec![false; rank];
    for i in 0..n {
        let a = axes[i];
        let axis = if a < 0 { a + rank as i64 } else { a };
        let axis = usize::try_from(axis)
            .ok()
            .filter(|&v| v < rank && !seen[v])
            .ok_or_else(|| format!("axis {a} is out of range or repeated"))?;
        seen[axis] = true;
        if steps[i] == 0 {
            return Err("slice step must not be zero".into());
        }
        (begin[axis], shape[axis]) =
            crate::ops::infer::slice_run(starts[i], ends[i], steps[i], dims[axis]);
        step[axis] = steps[i];
    }
    let y = super::shape::slice(x, &begin, &step, &shape)?;
    let s: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    Ok(vec![y, Tensor::from_vec(&[rank], s)])
}

/// Split by sizes given as values: the pieces, then each one's extent along `axis`.
pub(super) fn split_run_time(
    x: &Tensor,
    axis: usize,
    sizes: &[i64],
) -> Result<Vec<Tensor>, String> {
    let dims = x.shape().to_vec();
    let lens = (sizes.iter())
        .map(|&s| usize::try_from(s).map_err(|_| format!("split size {s} is negative")))
        .collect::<Result<Vec<usize>, String>>()?;
    if lens.iter().try_fold(0usize, |t, &l| t.checked_add(l)) != Some(dims[axis]) {
        return Err(format!(
            "split sizes {sizes:?} do not sum to the axis's {}",
            dims[axis]
        ));
    }
    let mut pieces = Vec::with_capacity(2 * lens.len());
    let mut start = 0;
    for &len in &lens {
        let mut begin = vec![0; dims.len()];
        begin[axis] = start;
        let mut shape = dims.clone();
        shape[axis] = len;
        pieces.push(super::shape::slice(
            x,
            &begin,
            &vec![1; dims.len()],
            &shape,
        )?);
        start += len;
    }
    pieces.extend(lens.iter().map(|&l| count(l)));
    Ok(pieces)
}
