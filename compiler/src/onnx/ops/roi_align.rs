//! RoiAlign: each region of interest (a run-time box on one image of the batch) is
//! divided into `output_height × output_width` bins, each bin sampled on a regular
//! grid of bilinearly interpolated points, and the samples averaged (or the largest
//! weighted corner kept, as onnx's reference does in max mode).
//!
//! The number of rois comes from the shapes and the sampling grid from
//! `sampling_ratio`, so every sample is a fixed slot: the importer computes the
//! sample coordinates as `[R, S]` arithmetic on the box corners and reads the four
//! corners with GatherElements from the roi's image (a Gather by batch index). An
//! adaptive grid (`sampling_ratio` 0) depends on each box's size, which is known only
//! when the rois are constant: then the grid is sized for the largest box and the
//! slots a smaller box does not use are masked out.

use super::build::{add_f32, binary, f32_const, gather_pixels, mul_f32, reshape, slice, unary};
use super::low_precision::to_f32;
use crate::ir::{DType, Tensor, ValueId};
use crate::onnx::import::{ImportError, ImportResult, NodeCtx};
use crate::ops::{BinaryOp, Op, ReduceAttrs, ReduceKind, UnaryOp};

/// The sampling grid of every roi: `(rows, columns)` per roi.
struct Grid {
    per_roi: Vec<(usize, usize)>,
}

impl Grid {
    fn max(&self) -> (usize, usize) {
        let rows = self.per_roi.iter().map(|g| g.0).max().unwrap_or(1);
        let cols = self.per_roi.iter().map(|g| g.1).max().unwrap_or(1);
        (rows.max(1), cols.max(1))
    }
    fn uniform(&self) -> bool {
        self.per_roi.iter().all(|&g| g == self.max())
    }
}

pub fn roi_align(ctx: &mut NodeCtx) -> ImportResult {
    let (x, rois, batch) = (ctx.required(0)?, ctx.required(1)?, ctx.required(2)?);
    let (xt, rt, bt) = (
        ctx.ty(x).clone(),
        ctx.ty(rois).clone(),
        ctx.ty(batch).clone(),
    );
    if xt.rank() != 4 || rt.rank() != 2 || rt.shape[1] != 4 || bt.numel() != rt.shape[0] {
        return Err(format!(
            "X {xt}, rois {rt} and batch_indices {bt} must be [N, C, H, W], [R, 4] and [R]"
        )
        .into());
    }
    if !xt.dtype.is_float() || !rt.dtype.is_float() || !bt.dtype.is_int() {
        return Err(ImportError::Unsupported(format!(
            "RoiAlign of {} with {} rois and {} batch indices",
            xt.dtype, rt.dtype, bt.dtype
        )));
    }
    let a = &ctx.attrs;
    // Opset 10 had no coordinate mode; it behaved as output_half_pixel.
    let default_ct = if ctx.opset() >= 16 {
        "half_pixel"
    } else {
        "output_half_pixel"
    };
    let half_pixel = match a
        .string("coordinate_transformation_mode", default_ct)?
        .as_str()
    {
        "half_pixel" => true,
        "output_half_pixel" => false,
        m => {
            return Err(format!(
                "coordinate_transformation_mode '{m}': expected half_pixel or output_half_pixel"
            )
            .into())
        }
    };
    let max_mode = match a.string("mode", "avg")?.as_str() {
        "avg" => false,
        "max" => true,
        m => return Err(format!("mode '{m}': expected avg or max").into()),
    };
    let oh = usize::try_from(a.int("output_height", 1)?).unwrap_or(0);
    let ow = usize::try_from(a.int("output_width", 1)?).unwrap_or(0);
    let ratio = a.int("sampling_ratio", 0)?;
    let scale = a.float("spatial_scale", 1.0)? as f64;
    if oh == 0 || ow == 0 || ratio < 0 {
        return Err("output_height and output_width must be positive, sampling_ratio ≥ 0".into());
    }
    let (n, c, h, w) = (xt.shape[0], xt.shape[1], xt.shape[2], xt.shape[3]);
    let output = crate::ir::TensorType::new(xt.dtype, vec![rt.shape[0], c, oh, ow]);
    ctx.limits().check_tensor(&output)?;
    if h * w >= 1 << 24 {
        return Err(ImportError::Unsupported(
            "RoiAlign inputs of 2^24 pixels or more".into(),
        ));
    }
    let r = rt.shape[0];
    let grid = if ratio > 0 {
        Grid {
            per_roi: vec![(ratio as usize, ratio as usize); r],
        }
    } else {
        adaptive_grid(ctx, rois, (oh, ow), scale, half_pixel)?
    };
    let (gh, gw) = grid.max();
    // The sample grid is built as constants of (rois ×) oh·ow·gh·gw steps: sizes from
    // attributes and roi values, checked before anything is allocated.
    let too_many = || {
        format!("output_height × output_width × the sampling grid ({oh}×{ow}×{gh}×{gw}) overflows")
    };
    let s = [ow, gh, gw]
        .iter()
        .try_fold(oh, |p, &d| p.checked_mul(d))
        .ok_or_else(too_many)?;
    let step_rows = if grid.uniform() { 1 } else { r.max(1) };
    ctx.check_computed_constant(&crate::ir::TensorType::new(DType::F32, vec![step_rows, s]))?;

    // The box corners in input pixels, [R, 1] each: x1, y1, x2, y2.
    let rf = to_f32(ctx, rois)?;
    let offset = if half_pixel { 0.5 } else { 0.0 };
    let mut corner = vec![];
    for k in 0..4 {
        let v = slice(ctx, rf, vec![0, k], vec![r, 1])?;
        let v = mul_f32(ctx, v, scale)?;
        corner.push(add_f32(ctx, v, -offset)?);
    }
    let mut samples = vec![];
    for (axis, start, end, bins, len) in [
        (0, corner[1], corner[3], oh, h),
        (1, corner[0], corner[2], ow, w),
    ] {
        let mut extent = binary(ctx, BinaryOp::Sub, end, start)?;
        if !half_pixel {
            // Malformed rois are forced to 1×1.
            let one = f32_const(ctx, 1.0);
            extent = binary(ctx, BinaryOp::Max, extent, one)?;
        }
        let bin = mul_f32(ctx, extent, 1.0 / bins as f64)?;
        let steps = ctx.constant_value("roi_align_steps", bin_steps(&grid, axis, (oh, ow)));
        let along = binary(ctx, BinaryOp::Mul, bin, steps)?;
        let pos = binary(ctx, BinaryOp::Add, start, along)?;
        samples.push(axis_taps(ctx, pos, len)?);
    }
    let [(y, (y_lo, y_hi), (ly, hy)), (x_, (x_lo, x_hi), (lx, hx))] = [samples[0], samples[1]];
    // Samples beyond a pixel outside the input read nothing.
    let mut inside = None;
    for (v, len) in [(y, h), (x_, w)] {
        let lo = f32_const(ctx, -1.0);
        let hi = f32_const(ctx, len as f64);
        let ge = binary(ctx, BinaryOp::GreaterOrEqual, v, lo)?;
        let le = binary(ctx, BinaryOp::LessOrEqual, v, hi)?;
        let ok = binary(ctx, BinaryOp::And, ge, le)?;
        inside = Some(match inside {
            Some(i) => binary(ctx, BinaryOp::And, i, ok)?,
            None => ok,
        });
    }
    let inside = inside.expect("two axes");
    let xf = to_f32(ctx, x)?;
    let images = reshape(ctx, xf, vec![n, c, h * w])?;
    let batch = reshape(ctx, batch, vec![r])?;
    let data = ctx.emit1(Op::Gather { axis: 0 }, vec![Some(images), Some(batch)])?;
    let zero = f32_const(ctx, 0.0);
    let mut acc: Option<ValueId> = None;
    for (yi, wy, xi, wx) in [
        (y_lo, hy, x_lo, hx),
        (y_lo, hy, x_hi, lx),
        (y_hi, ly, x_lo, hx),
        (y_hi, ly, x_hi, lx),
    ] {
        let row = mul_f32(ctx, yi, w as f64)?;
        let index = binary(ctx, BinaryOp::Add, row, xi)?;
        let index = reshape(ctx, index, vec![r, 1, s])?;
        let weight = binary(ctx, BinaryOp::Mul, wy, wx)?;
        let weight = ctx.emit1(Op::Where, vec![Some(inside), Some(weight), Some(zero)])?;
        let weight = reshape(ctx, weight, vec![r, 1, s])?;
        let value = gather_pixels(ctx, data, index)?;
        let value = binary(ctx, BinaryOp::Mul, value, weight)?;
        let op = if max_mode {
            BinaryOp::Max
        } else {
            BinaryOp::Add
        };
        acc = Some(match acc {
            Some(a) => binary(ctx, op, a, value)?,
            None => value,
        });
    }
    let mut v = acc.expect("four corners");
    if !grid.uniform() {
        // Slots beyond a smaller box's own grid: nothing to add, nothing to keep.
        let used = ctx.constant_value("roi_align_used", used_slots(&grid, (oh, ow)));
        let fill = if max_mode {
            f32_const(ctx, f64::NEG_INFINITY)
        } else {
            zero
        };
        v = ctx.emit1(Op::Where, vec![Some(used), Some(v), Some(fill)])?;
    }
    let v = reshape(ctx, v, vec![r, c, oh, ow, gh * gw])?;
    let kind = if max_mode {
        ReduceKind::Max
    } else {
        ReduceKind::Sum
    };
    let mut y = ctx.emit1(
        Op::Reduce(ReduceAttrs {
            kind,
            axes: vec![4],
            keepdims: false,
        }),
        vec![Some(v)],
    )?;
    if !max_mode {
        let counts: Vec<f32> = grid
            .per_roi
            .iter()
            .map(|&(a, b)| 1.0 / (a * b).max(1) as f32)
            .collect();
        let counts =
            ctx.constant_value("roi_align_counts", Tensor::from_vec(&[r, 1, 1, 1], counts));
        y = binary(ctx, BinaryOp::Mul, y, counts)?;
    } else if grid.per_roi.iter().any(|&(a, b)| a * b == 0) {
        // A box with no samples gives 0, as the reference's untouched accumulator.
        let empty: Vec<bool> = grid.per_roi.iter().map(|&(a, b)| a * b == 0).collect();
        let empty = ctx.constant_value("roi_align_empty", Tensor::from_vec(&[r, 1, 1, 1], empty));
        y = ctx.emit1(Op::Where, vec![Some(empty), Some(zero), Some(y)])?;
    }
    if xt.dtype != DType::F32 {
        y = ctx.emit1(Op::Cast { to: xt.dtype }, vec![Some(y)])?;
    }
    ctx.bind_output(0, y);
    Ok(())
}

/// The sample coordinate `pos` (`[R, S]`) moved inside `[0, len − 1]`, its two
/// neighbouring pixel indices and their weights `(ly, hy)` (reference's `y_low`,
/// `y_high`, `ly`, `hy`); `pos` itself is returned for the outside test.
#[allow(clippy::type_complexity)]
fn axis_taps(
    ctx: &mut NodeCtx,
    pos: ValueId,
    len: usize,
) -> ImportResult<(ValueId, (ValueId, ValueId), (ValueId, ValueId))> {
    let top = len as f64 - 1.0;
    let clamped = unary(ctx, UnaryOp::Clip { min: 0.0, max: top }, pos)?;
    let lo = unary(ctx, UnaryOp::Floor, clamped)?;
    let hi = add_f32(ctx, lo, 1.0)?;
    let hi = unary(ctx, UnaryOp::Clip { min: 0.0, max: top }, hi)?;
    let l = binary(ctx, BinaryOp::Sub, clamped, lo)?;
    let hw = mul_f32(ctx, l, -1.0)?;
    let hw = add_f32(ctx, hw, 1.0)?;
    Ok((pos, (lo, hi), (l, hw)))
}

/// Per roi and sample slot `(ph, pw, iy, ix)`, the sample's distance from the box's
/// start along `axis` (0: rows, 1: columns) in bins: `p + (i + 0.5) / grid`. `[R, S]`,
/// or `[1, S]` when every roi has the same grid.
fn bin_steps(grid: &Grid, axis: usize, (oh, ow): (usize, usize)) -> Tensor {
    let (gh, gw) = grid.max();
    let rois: &[(usize, usize)] = if grid.uniform() {
        &grid.per_roi[..1.min(grid.per_roi.len())]
    } else {
        &grid.per_roi
    };
    let mut v = vec![];
    for &(rh, rw) in rois {
        for ph in 0..oh {
            for pw in 0..ow {
                for iy in 0..gh {
                    for ix in 0..gw {
                        let step = if axis == 0 {
                            ph as f64 + (iy as f64 + 0.5) / rh.max(1) as f64
                        } else {
                            pw as f64 + (ix as f64 + 0.5) / rw.max(1) as f64
                        };
                        v.push(step as f32);
                    }
                }
            }
        }
    }
    let rows = rois.len().max(1);
    if v.is_empty() {
        v = vec![0.0; oh * ow * gh * gw];
    }
    Tensor::from_vec(&[rows, oh * ow * gh * gw], v)
}

/// Which sample slots each roi uses, `[R, 1, S]`: those inside its own grid.
fn used_slots(grid: &Grid, (oh, ow): (usize, usize)) -> Tensor {
    let (gh, gw) = grid.max();
    let mut v = vec![];
    for &(rh, rw) in &grid.per_roi {
        for _ in 0..oh * ow {
            for iy in 0..gh {
                for ix in 0..gw {
                    v.push(iy < rh && ix < rw);
                }
            }
        }
    }
    Tensor::from_vec(&[grid.per_roi.len(), 1, oh * ow * gh * gw], v)
}

/// `sampling_ratio` 0: each roi's grid is `ceil(extent / bins)` per axis, which needs
/// the rois at compile time.
fn adaptive_grid(
    ctx: &NodeCtx,
    rois: ValueId,
    (oh, ow): (usize, usize),
    scale: f64,
    half_pixel: bool,
) -> ImportResult<Grid> {
    let t = ctx.constant(rois).ok_or_else(|| {
        ImportError::Unsupported(
            "RoiAlign with sampling_ratio 0 (an adaptive grid) needs constant rois".into(),
        )
    })?;
    let v: Vec<f32> = t.to_f64_vec().iter().map(|&x| x as f32).collect();
    let offset = if half_pixel { 0.5 } else { 0.0 };
    let per_roi = v
        .chunks(4)
        .map(|b| {
            let at = |i: usize| b[i] * scale as f32 - offset;
            let (mut width, mut height) = (at(2) - at(0), at(3) - at(1));
            if !half_pixel {
                width = width.max(1.0);
                height = height.max(1.0);
            }
            let cells = |extent: f32, bins: usize| (extent / bins as f32).ceil().max(0.0) as usize;
            (cells(height, oh), cells(width, ow))
        })
        .collect();
    Ok(Grid { per_roi })
}
