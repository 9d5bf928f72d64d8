//! DeformConv (1-, 2- and 3-D): a convolution whose kernel taps read the input at
//! run-time offsets from their regular positions, bilinearly interpolated, zero
//! outside the input, each tap optionally scaled by a mask. Imported as coordinate
//! arithmetic on `[N, offset_group, K, P]` tensors (K kernel taps, P output points),
//! one GatherElements per interpolation corner (`2^r` of them) that builds the
//! sampled columns `[N, C·K, P]`, and a grouped MatMul of those with the weights.
//! The sampling is onnx's reference (GridSample, bilinear, zeros padding, aligned
//! corners, on pixel coordinates).

use super::build::{add_f32, binary, f32_const, gather_pixels, mul_f32, reshape, slice, unary};
use super::low_precision::to_f32;
use crate::ir::{DType, Tensor, ValueId};
use crate::onnx::import::{ImportError, ImportResult, NodeCtx};
use crate::ops::{BinaryOp, Op, UnaryOp};

/// The static geometry of one DeformConv.
struct Geometry {
    n: usize,
    c: usize,
    dims: Vec<usize>,
    kernel: Vec<usize>,
    out: Vec<usize>,
    strides: Vec<usize>,
    dilations: Vec<usize>,
    pads: Vec<usize>,
    group: usize,
    offset_group: usize,
}

impl Geometry {
    fn taps(&self) -> usize {
        self.kernel.iter().product()
    }
    fn points(&self) -> usize {
        self.out.iter().product()
    }
}

pub fn deform_conv(ctx: &mut NodeCtx) -> ImportResult {
    let (x, w, offset) = (ctx.required(0)?, ctx.required(1)?, ctx.required(2)?);
    let g = geometry(ctx, x, w, offset)?;
    let xt = ctx.ty(x).clone();
    if !xt.dtype.is_float() {
        return Err(ImportError::Unsupported(format!(
            "DeformConv of {}",
            xt.dtype
        )));
    }
    let (k, p, r) = (g.taps(), g.points(), g.dims.len());
    let og = g.offset_group;
    let pixels: usize = g.dims.iter().product();
    if pixels >= 1 << 24 {
        return Err(ImportError::Unsupported(
            "DeformConv inputs of 2^24 pixels or more".into(),
        ));
    }
    let xf = to_f32(ctx, x)?;
    let offset = to_f32(ctx, offset)?;
    let offset = reshape(ctx, offset, vec![g.n, og, k, r, p])?;
    // Per axis: the sampled coordinate, regular position plus offset, [N, og, K, P].
    let mut coords = vec![];
    for axis in 0..r {
        let o = slice(ctx, offset, vec![0, 0, 0, axis, 0], vec![g.n, og, k, 1, p])?;
        let o = reshape(ctx, o, vec![g.n, og, k, p])?;
        let base = ctx.constant_value("deform_conv_base", base_positions(&g, axis));
        coords.push(binary(ctx, BinaryOp::Add, o, base)?);
    }
    // Per axis: the two corners' integer coordinates, in-range flags and weights.
    let mut corners = vec![];
    for (axis, &c) in coords.iter().enumerate() {
        let lo = unary(ctx, UnaryOp::Floor, c)?;
        let t = binary(ctx, BinaryOp::Sub, c, lo)?;
        let one_minus_t = mul_f32(ctx, t, -1.0)?;
        let one_minus_t = add_f32(ctx, one_minus_t, 1.0)?;
        let hi = add_f32(ctx, lo, 1.0)?;
        let len = g.dims[axis] as f64;
        let mut axis_corners = vec![];
        for (i, weight) in [(lo, one_minus_t), (hi, t)] {
            let zero = f32_const(ctx, 0.0);
            let top = f32_const(ctx, len - 1.0);
            let ge = binary(ctx, BinaryOp::GreaterOrEqual, i, zero)?;
            let le = binary(ctx, BinaryOp::LessOrEqual, i, top)?;
            let inside = binary(ctx, BinaryOp::And, ge, le)?;
            let weight = ctx.emit1(Op::Where, vec![Some(inside), Some(weight), Some(zero)])?;
            let i = unary(
                ctx,
                UnaryOp::Clip {
                    min: 0.0,
                    max: len - 1.0,
                },
                i,
            )?;
            axis_corners.push((i, weight));
        }
        corners.push(axis_corners);
    }
    let strides: Vec<usize> = (0..r).map(|a| g.dims[a + 1..].iter().product()).collect();
    let per_group = g.c / og;
    let data = reshape(ctx, xf, vec![g.n, og, per_group, pixels])?;
    let mut sum: Option<ValueId> = None;
    for combo in 0..1usize << r {
        let mut index: Option<ValueId> = None;
        let mut weight: Option<ValueId> = None;
        for axis in 0..r {
            let (i, w) = corners[axis][(combo >> axis) & 1];
            let scaled = mul_f32(ctx, i, strides[axis] as f64)?;
            index = Some(match index {
                Some(s) => binary(ctx, BinaryOp::Add, s, scaled)?,
                None => scaled,
            });
            weight = Some(match weight {
                Some(v) => binary(ctx, BinaryOp::Mul, v, w)?,
                None => w,
            });
        }
        let (index, weight) = (index.expect("r ≥ 1"), weight.expect("r ≥ 1"));
        let index = reshape(ctx, index, vec![g.n, og, 1, k * p])?;
        let weight = reshape(ctx, weight, vec![g.n, og, 1, k * p])?;
        let value = gather_pixels(ctx, data, index)?;
        let value = binary(ctx, BinaryOp::Mul, value, weight)?;
        sum = Some(match sum {
            Some(s) => binary(ctx, BinaryOp::Add, s, value)?,
            None => value,
        });
    }
    let mut cols = sum.expect("at least one corner");
    if let Some(mask) = ctx.input(4) {
        let want = g.n * og * k * p;
        if ctx.ty(mask).numel() != want {
            return Err(format!(
                "mask {} must be [N, offset_group·K, output...] ({want} elements)",
                ctx.ty(mask)
            )
            .into());
        }
        let mask = to_f32(ctx, mask)?;
        let mask = reshape(ctx, mask, vec![g.n, og, 1, k * p])?;
        cols = binary(ctx, BinaryOp::Mul, cols, mask)?;
    }
    // The grouped product: [group, OC/group, C/group·K] @ [N, group, C/group·K, P].
    let oc = ctx.ty(w).shape[0];
    let cg = g.c / g.group;
    let cols = reshape(ctx, cols, vec![g.n, g.group, cg * k, p])?;
    let wf = to_f32(ctx, w)?;
    let wf = reshape(ctx, wf, vec![g.group, oc / g.group, cg * k])?;
    let y = ctx.emit1(Op::matmul(), vec![Some(wf), Some(cols)])?;
    let mut shape = vec![g.n, oc];
    shape.extend(&g.out);
    let mut y = reshape(ctx, y, shape)?;
    if let Some(b) = ctx.input(3) {
        if ctx.ty(b).numel() != oc {
            return Err(format!("bias {} must hold {oc} values", ctx.ty(b)).into());
        }
        let b = to_f32(ctx, b)?;
        let mut shape = vec![1, oc];
        shape.resize(r + 2, 1);
        let b = reshape(ctx, b, shape)?;
        y = binary(ctx, BinaryOp::Add, y, b)?;
    }
    if xt.dtype != DType::F32 {
        y = ctx.emit1(Op::Cast { to: xt.dtype }, vec![Some(y)])?;
    }
    ctx.bind_output(0, y);
    Ok(())
}

/// Reads and checks the attributes against the shapes of X, W and offset.
fn geometry(ctx: &NodeCtx, x: ValueId, w: ValueId, offset: ValueId) -> ImportResult<Geometry> {
    let (xt, wt, ot) = (ctx.ty(x), ctx.ty(w), ctx.ty(offset));
    let r = xt.rank().saturating_sub(2);
    if !(1..=3).contains(&r) || wt.rank() != r + 2 || ot.rank() != r + 2 {
        return Err(format!(
            "X {xt}, W {wt} and offset {ot} must be [N, C, D1..Dr], [OC, C/group, k1..kr] \
             and [N, offset_group·K·r, O1..Or] with r = 1, 2 or 3"
        )
        .into());
    }
    let a = &ctx.attrs;
    let kernel = a
        .usizes_opt("kernel_shape")?
        .unwrap_or_else(|| wt.shape[2..].to_vec());
    let strides = a.usizes_opt("strides")?.unwrap_or_else(|| vec![1; r]);
    let dilations = a.usizes_opt("dilations")?.unwrap_or_else(|| vec![1; r]);
    let pads = a.usizes_opt("pads")?.unwrap_or_else(|| vec![0; 2 * r]);
    let group = usize::try_from(a.int("group", 1)?).unwrap_or(0);
    let offset_group = usize::try_from(a.int("offset_group", 1)?).unwrap_or(0);
    if kernel.len() != r || strides.len() != r || dilations.len() != r || pads.len() != 2 * r {
        return Err(format!(
            "kernel_shape, strides and dilations need {r} entries and pads {}",
            2 * r
        )
        .into());
    }
    if kernel[..] != wt.shape[2..]
        || strides.contains(&0)
        || dilations.contains(&0)
        || group == 0
        || offset_group == 0
    {
        return Err(format!(
            "kernel_shape {kernel:?} must match W {wt}, and strides, dilations, group and \
             offset_group must be positive"
        )
        .into());
    }
    let (n, c) = (xt.shape[0], xt.shape[1]);
    let oc = wt.shape[0];
    if wt.shape[1].checked_mul(group) != Some(c) || oc % group != 0 || c % offset_group != 0 {
        return Err(format!(
            "X {xt} and W {wt} do not fit group {group} and offset_group {offset_group}"
        )
        .into());
    }
    let dims = xt.shape[2..].to_vec();
    let out = ot.shape[2..].to_vec();
    for i in 0..r {
        let expected = crate::ops::infer::window_output(
            dims[i],
            kernel[i],
            strides[i],
            pads[i].saturating_add(pads[r + i]),
            dilations[i],
            false,
        )?;
        if out[i] != expected {
            return Err(format!(
                "offset {ot} has output extent {} on spatial axis {i}, the convolution {expected}",
                out[i]
            )
            .into());
        }
    }
    // The kernel is W's spatial shape, so its product is at most W's element count.
    let taps: usize = kernel.iter().product();
    let channels = offset_group
        .checked_mul(taps)
        .and_then(|t| t.checked_mul(r));
    if ot.shape[0] != n || Some(ot.shape[1]) != channels {
        let count = channels.map_or_else(|| "too many".to_string(), |c| c.to_string());
        return Err(format!(
            "offset {ot} must be [{n}, {count}, ...] (offset_group · kernel taps · {r})"
        )
        .into());
    }
    Ok(Geometry {
        n,
        c,
        dims,
        kernel,
        out,
        strides,
        dilations,
        pads,
        group,
        offset_group,
    })
}

/// The undeformed coordinate along `axis` of every kernel tap at every output point,
/// `[K, P]`: `−pad + stride·o + dilation·k`.
fn base_positions(g: &Geometry, axis: usize) -> Tensor {
    let (k, p) = (g.taps(), g.points());
    let coord = |index: usize, extents: &[usize]| -> usize {
        let inner: usize = extents[axis + 1..].iter().product();
        (index / inner) % extents[axis]
    };
    let mut v = Vec::with_capacity(k * p);
    for tap in 0..k {
        let kk = coord(tap, &g.kernel) as f64;
        for point in 0..p {
            let o = coord(point, &g.out) as f64;
            let pos =
                o * g.strides[axis] as f64 + kk * g.dilations[axis] as f64 - g.pads[axis] as f64;
            v.push(pos as f32);
        }
    }
    Tensor::from_vec(&[k, p], v)
}
