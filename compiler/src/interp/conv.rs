//! N-d Conv (groups, dilations, pads, strides) as im2col + GEMM, and ConvTranspose as
//! GEMM + col2im.
//!
//! Both build a *tap table* first: for every kernel offset and every position of the
//! "driving" grid, the flat index it touches in the other grid (or [`NO_TAP`] where that
//! falls into padding). The table is shared by all batches and channels, so the inner
//! loops are plain gathers and scatters.

use ndarray::linalg::general_mat_mul;
use ndarray::{s, Array2, Array3, ArrayD, Axis, IxDyn};

use super::scalar::Float;
use super::{array_ref, narrow_half, unsupported, widen_half};
use crate::ir::{Element, Tensor};
use crate::ops::{ConvAttrs, ConvTransposeAttrs};

/// Marks a tap that falls into padding (or outside the target grid).
pub(super) const NO_TAP: usize = usize::MAX;

/// For each kernel offset `k` (row-major over `kernel`) and each position `s` of the
/// source grid (row-major over `source`), the flat index in `target` of
/// `coordinate(axis, s[axis], k[axis])` along every axis, or [`NO_TAP`] when some axis
/// lands outside `target`. Layout: `table[k * source_size + s]`.
pub(super) fn tap_table(
    source: &[usize],
    target: &[usize],
    kernel: &[usize],
    coordinate: impl Fn(usize, usize, usize) -> isize,
) -> Vec<usize> {
    let source_size: usize = source.iter().product();
    let kernel_size: usize = kernel.iter().product();
    // Per axis and kernel offset, the target coordinate of every source coordinate.
    let per_axis: Vec<Vec<Vec<Option<usize>>>> = (0..source.len())
        .map(|axis| {
            (0..kernel[axis])
                .map(|k| {
                    (0..source[axis])
                        .map(|s| {
                            let t = coordinate(axis, s, k);
                            usize::try_from(t).ok().filter(|&t| t < target[axis])
                        })
                        .collect()
                })
                .collect()
        })
        .collect();
    let mut table = Vec::with_capacity(kernel_size * source_size);
    for k in 0..kernel_size {
        let k_index = unravel(k, kernel);
        for s in 0..source_size {
            let s_index = unravel(s, source);
            let flat = (0..source.len()).try_fold(0usize, |flat, axis| {
                per_axis[axis][k_index[axis]][s_index[axis]].map(|t| flat * target[axis] + t)
            });
            table.push(flat.unwrap_or(NO_TAP));
        }
    }
    table
}

/// Row-major multi-index of `flat` in `shape`.
pub(super) fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut index = vec![0; shape.len()];
    for axis in (0..shape.len()).rev() {
        index[axis] = flat % shape[axis];
        flat /= shape[axis];
    }
    index
}

/// Checks the per-axis attribute vectors shared by Conv, ConvTranspose and pooling.
pub(super) fn check_window_attrs(
    spatial: usize,
    kernel: &[usize],
    strides: &[usize],
    dilations: &[usize],
    pads: &[usize],
) -> Result<(), String> {
    if kernel.len() != spatial
        || strides.len() != spatial
        || dilations.len() != spatial
        || pads.len() != 2 * spatial
    {
        return Err(format!(
            "attributes do not match {spatial} spatial axes: kernel {kernel:?}, strides {strides:?}, dilations {dilations:?}, pads {pads:?}"
        ));
    }
    if strides.contains(&0) || dilations.contains(&0) || kernel.contains(&0) {
        return Err("kernel, strides and dilations must be positive".into());
    }
    Ok(())
}

/// Checks that the inputs are floats of one type.
fn same_float_type(x: &Tensor, others: &[Option<&Tensor>]) -> Result<(), String> {
    if !x.dtype().is_float() {
        return Err(unsupported(x.dtype()));
    }
    for t in others.iter().flatten() {
        if t.dtype() != x.dtype() {
            return Err(format!(
                "input types differ: {} and {}",
                x.dtype(),
                t.dtype()
            ));
        }
    }
    Ok(())
}

/// The number of spatial axes of an `[N, C, spatial...]` input.
pub(super) fn spatial_rank(shape: &[usize]) -> Result<usize, String> {
    shape
        .len()
        .checked_sub(2)
        .filter(|s| *s > 0)
        .ok_or_else(|| "input must have rank ≥ 3 (N, C, spatial...)".to_string())
}

pub(super) fn conv(
    c: &ConvAttrs,
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
) -> Result<Tensor, String> {
    same_float_type(x, &[Some(w), bias])?;
    let (wx, ww, wb) = (widen_half(x), widen_half(w), bias.map(widen_half));
    let wb = wb.as_deref();
    let out = with_pair!(&*wx, &*ww, xa, wa => conv_float(c, xa, wa, wb.and_then(array_ref)).map(Element::wrap),
        [F32, F64], _ => Err(unsupported(x.dtype())))?;
    Ok(narrow_half(out, x.dtype()))
}

/// The output length of a sliding window along one axis.
fn window_output(
    size: usize,
    kernel: usize,
    stride: usize,
    pad_total: usize,
    dilation: usize,
) -> Result<usize, String> {
    let extent = dilation * (kernel - 1) + 1;
    let padded = size + pad_total;
    if padded < extent {
        return Err(format!(
            "kernel extent {extent} exceeds padded input size {padded}"
        ));
    }
    Ok((padded - extent) / stride + 1)
}

fn check_bias<T>(bias: Option<&ArrayD<T>>, channels: usize) -> Result<(), String> {
    match bias {
        Some(b) if b.shape() != [channels] => {
            Err(format!("bias shape {:?} is not [{channels}]", b.shape()))
        }
        _ => Ok(()),
    }
}

/// Adds `bias[c]` to every element of output channel `c` of `[N, C, positions]`.
fn add_bias<T: Float>(out: &mut Array3<T>, bias: Option<&ArrayD<T>>) {
    if let Some(b) = bias {
        for mut image in out.outer_iter_mut() {
            for (mut plane, &bv) in image.outer_iter_mut().zip(b.iter()) {
                plane.mapv_inplace(|v| v + bv);
            }
        }
    }
}

fn conv_float<T: Float>(
    c: &ConvAttrs,
    x: &ArrayD<T>,
    w: &ArrayD<T>,
    bias: Option<&ArrayD<T>>,
) -> Result<ArrayD<T>, String> {
    let spatial = spatial_rank(x.shape())?;
    check_window_attrs(spatial, &c.kernel, &c.strides, &c.dilations, &c.pads)?;
    if w.ndim() != x.ndim() || w.shape()[2..] != c.kernel[..] {
        return Err(format!(
            "weight shape {:?} does not match kernel {:?}",
            w.shape(),
            c.kernel
        ));
    }
    let (batch, channels, in_spatial) = (x.shape()[0], x.shape()[1], &x.shape()[2..]);
    let (out_channels, group_channels) = (w.shape()[0], w.shape()[1]);
    let group = c.group;
    if group == 0 || channels != group_channels * group || out_channels % group != 0 {
        return Err(format!(
            "channels do not match: input has {channels}, weight expects {group_channels} × group {group}"
        ));
    }
    check_bias(bias, out_channels)?;
    let out_spatial = (0..spatial)
        .map(|i| {
            window_output(
                in_spatial[i],
                c.kernel[i],
                c.strides[i],
                c.pads[i] + c.pads[spatial + i],
                c.dilations[i],
            )
        })
        .collect::<Result<Vec<_>, _>>()?;

    let taps = tap_table(&out_spatial, in_spatial, &c.kernel, |axis, o, k| {
        (o * c.strides[axis] + k * c.dilations[axis]) as isize - c.pads[axis] as isize
    });
    let in_size: usize = in_spatial.iter().product();
    let out_size: usize = out_spatial.iter().product();
    let kernel_size: usize = c.kernel.iter().product();
    let group_out = out_channels / group;
    let x = x.as_standard_layout();
    let x_flat = x.as_slice().ok_or("input is not contiguous")?;
    // Weights as [group, out per group, in per group · kernel].
    let w_groups = w
        .as_standard_layout()
        .into_owned()
        .into_shape_with_order((group, group_out, group_channels * kernel_size))
        .map_err(|e| e.to_string())?;
    let mut out = Array3::<T>::from_elem((batch, out_channels, out_size), T::ZERO);
    let mut columns = Array2::<T>::from_elem((group_channels * kernel_size, out_size), T::ZERO);
    for n in 0..batch {
        for g in 0..group {
            // im2col: row (c, k) holds input channel c read through kernel tap k.
            for (row, mut column) in columns.outer_iter_mut().enumerate() {
                let (ci, k) = (row / kernel_size, row % kernel_size);
                let plane_start = (n * channels + g * group_channels + ci) * in_size;
                let plane = &x_flat[plane_start..plane_start + in_size];
                let row_taps = &taps[k * out_size..(k + 1) * out_size];
                for (dst, &tap) in column.iter_mut().zip(row_taps) {
                    *dst = if tap == NO_TAP { T::ZERO } else { plane[tap] };
                }
            }
            let mut y = out.slice_mut(s![n, g * group_out..(g + 1) * group_out, ..]);
            general_mat_mul(
                T::ONE,
                &w_groups.index_axis(Axis(0), g),
                &columns,
                T::ZERO,
                &mut y,
            );
        }
    }
    add_bias(&mut out, bias);
    let mut shape = vec![batch, out_channels];
    shape.extend(&out_spatial);
    out.into_shape_with_order(IxDyn(&shape))
        .map_err(|e| e.to_string())
}

pub(super) fn conv_transpose(
    c: &ConvTransposeAttrs,
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
) -> Result<Tensor, String> {
    same_float_type(x, &[Some(w), bias])?;
    let (wx, ww, wb) = (widen_half(x), widen_half(w), bias.map(widen_half));
    let wb = wb.as_deref();
    let out = with_pair!(&*wx, &*ww, xa, wa => conv_transpose_float(c, xa, wa, wb.and_then(array_ref)).map(Element::wrap),
        [F32, F64], _ => Err(unsupported(x.dtype())))?;
    Ok(narrow_half(out, x.dtype()))
}

/// out[n, g·Mg + m, i·s + k·d − pad] += x[n, g·Cg + c, i] · w[g·Cg + c, m, k]: each input
/// pixel scatters a weighted copy of the kernel into the output.
fn conv_transpose_float<T: Float>(
    c: &ConvTransposeAttrs,
    x: &ArrayD<T>,
    w: &ArrayD<T>,
    bias: Option<&ArrayD<T>>,
) -> Result<ArrayD<T>, String> {
    let spatial = spatial_rank(x.shape())?;
    check_window_attrs(spatial, &c.kernel, &c.strides, &c.dilations, &c.pads)?;
    if c.output_spatial.len() != spatial {
        return Err(format!(
            "output_spatial {:?} does not have {spatial} axes",
            c.output_spatial
        ));
    }
    if w.ndim() != x.ndim() || w.shape()[2..] != c.kernel[..] {
        return Err(format!(
            "weight shape {:?} does not match kernel {:?}",
            w.shape(),
            c.kernel
        ));
    }
    let (batch, channels, in_spatial) = (x.shape()[0], x.shape()[1], &x.shape()[2..]);
    let group = c.group;
    if group == 0 || w.shape()[0] != channels || channels % group != 0 {
        return Err(format!(
            "channels do not match: input has {channels}, weight {:?}, group {group}",
            w.shape()
        ));
    }
    let (group_in, group_out) = (channels / group, w.shape()[1]);
    let out_channels = group_out * group;
    check_bias(bias, out_channels)?;
    let out_spatial = &c.output_spatial;
    let targets = tap_table(in_spatial, out_spatial, &c.kernel, |axis, i, k| {
        (i * c.strides[axis] + k * c.dilations[axis]) as isize - c.pads[axis] as isize
    });
    let in_size: usize = in_spatial.iter().product();
    let out_size: usize = out_spatial.iter().product();
    let kernel_size: usize = c.kernel.iter().product();
    let x3 = x
        .as_standard_layout()
        .into_owned()
        .into_shape_with_order((batch, channels, in_size))
        .map_err(|e| e.to_string())?;
    // Weights as [group, in per group, out per group · kernel].
    let w_groups = w
        .as_standard_layout()
        .into_owned()
        .into_shape_with_order((group, group_in, group_out * kernel_size))
        .map_err(|e| e.to_string())?;
    let mut out = Array3::<T>::from_elem((batch, out_channels, out_size), T::ZERO);
    let mut columns = Array2::<T>::from_elem((group_out * kernel_size, in_size), T::ZERO);
    for n in 0..batch {
        for g in 0..group {
            let x_g = x3.slice(s![n, g * group_in..(g + 1) * group_in, ..]);
            // columns[(m, k), i] = Σ_c w[c, m, k] · x[c, i]
            general_mat_mul(
                T::ONE,
                &w_groups.index_axis(Axis(0), g).t(),
                &x_g,
                T::ZERO,
                &mut columns,
            );
            // col2im: scatter-add every column entry to its output position.
            for (row, column) in columns.outer_iter().enumerate() {
                let (m, k) = (row / kernel_size, row % kernel_size);
                let mut plane = out.slice_mut(s![n, g * group_out + m, ..]);
                let plane = plane.as_slice_mut().ok_or("output is not contiguous")?;
                let row_targets = &targets[k * in_size..(k + 1) * in_size];
                for (&v, &t) in column.iter().zip(row_targets) {
                    if t != NO_TAP {
                        plane[t] += v;
                    }
                }
            }
        }
    }
    add_bias(&mut out, bias);
    let mut shape = vec![batch, out_channels];
    shape.extend(out_spatial);
    out.into_shape_with_order(IxDyn(&shape))
        .map_err(|e| e.to_string())
}
