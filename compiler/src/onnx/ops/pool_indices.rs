//! MaxPool's second output, Indices: for every window, the flat NC[D]HW position of
//! its largest element (the first one among equals), row-major (`storage_order` 0)
//! or with the spatial axes column-major (1), as onnx's reference numbers them.
//!
//! The windows are static, so the importer tabulates them: a Gather of the flattened
//! input with a constant `[P, K]` table of the pixels each window's K taps read, an
//! ArgMax over the taps, and a second table that turns (window, tap) into the flat
//! index. A tap in the padding reads the window's first real pixel instead: it can
//! never beat that pixel, and where it ties it names the same pixel.

use super::build::reshape;
use crate::ir::{Tensor, ValueId};
use crate::onnx::import::{ImportResult, NodeCtx};
use crate::ops::{ArgReduceAttrs, BinaryOp, Op, PoolAttrs};

pub fn max_pool_indices(
    ctx: &mut NodeCtx,
    x: ValueId,
    attrs: &PoolAttrs,
    column_major: bool,
) -> ImportResult<ValueId> {
    let shape = ctx.ty(x).shape.clone();
    let (n, c) = (shape[0], shape[1]);
    let dims = &shape[2..];
    let pixels: usize = dims.iter().product();
    let (reads, flat) = window_tables(dims, attrs, column_major);
    let p: usize = attrs.output_spatial.iter().product();
    let k: usize = attrs.kernel.iter().product();
    let flat_x = reshape(ctx, x, vec![n, c, pixels])?;
    let reads = ctx.constant_value("max_pool_taps", Tensor::from_vec(&[p, k], reads));
    let windows = ctx.emit1(Op::Gather { axis: 2 }, vec![Some(flat_x), Some(reads)])?;
    let tap = ctx.emit1(
        Op::ArgReduce(ArgReduceAttrs {
            max: true,
            axis: 3,
            keepdims: false,
            select_last_index: false,
        }),
        vec![Some(windows)],
    )?;
    // (window, tap) → window·K + tap → the flat spatial index of the pixel read.
    let first: Vec<i64> = (0..p as i64).map(|w| w * k as i64).collect();
    let first = ctx.constant_value("max_pool_window_start", Tensor::from_vec(&[p], first));
    let at = ctx.emit1(Op::Binary(BinaryOp::Add), vec![Some(tap), Some(first)])?;
    let flat = ctx.constant_value("max_pool_tap_index", Tensor::from_vec(&[p * k], flat));
    let spatial = ctx.emit1(Op::Gather { axis: 0 }, vec![Some(flat), Some(at)])?;
    let planes: Vec<i64> = (0..(n * c) as i64).map(|i| i * pixels as i64).collect();
    let planes = ctx.constant_value("max_pool_plane_start", Tensor::from_vec(&[n, c, 1], planes));
    let index = ctx.emit1(Op::Binary(BinaryOp::Add), vec![Some(spatial), Some(planes)])?;
    let mut out = vec![n, c];
    out.extend(&attrs.output_spatial);
    reshape(ctx, index, out)
}

/// Per window (row-major over the output) and tap (row-major over the kernel): the
/// row-major pixel the tap reads, and that pixel's index in the storage order.
fn window_tables(dims: &[usize], a: &PoolAttrs, column_major: bool) -> (Vec<i64>, Vec<i64>) {
    let r = dims.len();
    let windows: usize = a.output_spatial.iter().product();
    let taps: usize = a.kernel.iter().product();
    let unravel = |mut i: usize, extents: &[usize]| -> Vec<usize> {
        let mut v = vec![0; extents.len()];
        for axis in (0..extents.len()).rev() {
            v[axis] = i % extents[axis];
            i /= extents[axis];
        }
        v
    };
    let (mut reads, mut flat) = (vec![], vec![]);
    for w in 0..windows {
        let o = unravel(w, &a.output_spatial);
        let mut pixels = vec![];
        for t in 0..taps {
            let kk = unravel(t, &a.kernel);
            let at: Option<Vec<usize>> = (0..r)
                .map(|i| {
                    let pos =
                        (o[i] * a.strides[i] + kk[i] * a.dilations[i]) as i64 - a.pads[i] as i64;
                    usize::try_from(pos).ok().filter(|&q| q < dims[i])
                })
                .collect();
            pixels.push(at);
        }
        let fallback = pixels
            .iter()
            .flatten()
            .next()
            .cloned()
            .unwrap_or(vec![0; r]);
        for at in pixels {
            let at = at.unwrap_or_else(|| fallback.clone());
            let (mut row, mut col, mut row_stride, mut col_stride) = (0, 0, 1, 1);
            for i in (0..r).rev() {
                row += at[i] * row_stride;
                row_stride *= dims[i];
            }
            for i in 0..r {
                col += at[i] * col_stride;
                col_stride *= dims[i];
            }
            reads.push(row as i64);
            flat.push(if column_major { col } else { row } as i64);
        }
    }
    (reads, flat)
}
