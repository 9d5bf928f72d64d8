//! DFT, STFT and MelWeightMatrix. Signal lengths are static, so a DFT of length n is
//! a product with constant n×m cosine and sine matrices, on the GEMM kernels: O(n²)
//! per signal, which for the frame lengths models use (hundreds) is fast and keeps the
//! exact rounding behaviour of one dot product per output.
//!
//! Complex tensors are ONNX's: a trailing axis of 2 (real, imaginary), or of 1 for a
//! real signal.

use super::build::{binary, reshape};
use std::f64::consts::PI;

use crate::ir::{DType, Tensor, ValueId};
use crate::onnx::attributes::normalize_axis;
use crate::onnx::import::{ImportError, ImportResult, NodeCtx};
use crate::ops::{BinaryOp, Op, PadAttrs, PadMode};

/// What a DFT computes.
#[derive(Clone, Copy, PartialEq)]
enum Transform {
    /// `X_k = Σ x_j e^{-2πi jk/n}`, all n outputs or the first n/2 + 1.
    Forward { onesided: bool },
    /// `x_t = (1/n) Σ X_k e^{2πi kt/n}`, complex in and out.
    Inverse,
    /// numpy's `irfft`: a one-sided spectrum (n/2 + 1 values) in, n real values out.
    InverseOneSided,
}

pub fn dft(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.required(0)?;
    let rank = ctx.ty(x).rank();
    let run_time_axis = (ctx.input(2)).filter(|v| ctx.opset() >= 20 && ctx.constant(*v).is_none());
    if let Some(axis) = run_time_axis {
        return dft_along_run_time_axis(ctx, x, axis);
    }
    let axis = if ctx.opset() >= 20 {
        match ctx.const_input(2, "axis")? {
            Some(t) => *t.to_i64_vec().first().ok_or("axis must hold one value")?,
            None => -2,
        }
    } else {
        ctx.attrs.int("axis", 1)?
    };
    let axis = normalize_axis(axis, rank)?;
    if rank < 2 || axis == rank - 1 {
        return Err(format!("axis {axis} must be a signal axis of the rank-{rank} input, not its last (complex) axis").into());
    }
    let transform = dft_transform(ctx)?;
    let n = dft_length(ctx, transform, ctx.ty(x).shape[axis])?;
    if n == 0 {
        return Err("the DFT length is 0".into());
    }
    let y = transform_axis(ctx, x, axis, n, transform)?;
    ctx.bind_output(0, y);
    Ok(())
}

fn dft_transform(ctx: &NodeCtx) -> ImportResult<Transform> {
    let inverse = ctx.attrs.flag("inverse", false)?;
    let onesided = ctx.attrs.flag("onesided", false)?;
    Ok(match (inverse, onesided) {
        (false, onesided) => Transform::Forward { onesided },
        (true, false) => Transform::Inverse,
        (true, true) => Transform::InverseOneSided,
    })
}

/// The transform's length: dft_length (a positive constant) or what the signal axis
/// of `length` elements gives.
fn dft_length(ctx: &NodeCtx, transform: Transform, length: usize) -> ImportResult<usize> {
    Ok(match ctx.const_input(1, "dft_length")? {
        Some(t) => {
            let v = *t
                .to_i64_vec()
                .first()
                .ok_or("dft_length must hold one value")?;
            usize::try_from(v)
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("dft_length {v} must be positive"))?
        }
        None if transform == Transform::InverseOneSided => 2 * length.saturating_sub(1),
        None => length,
    })
}

/// DFT along an axis read at run time: the transform along every signal axis, the one
/// the value names chosen (its shape reported when the axes' results differ in
/// shape). The complex axis, and an axis whose transform would be empty, are invalid
/// choices and fail like an index out of range.
fn dft_along_run_time_axis(ctx: &mut NodeCtx, x: ValueId, axis: ValueId) -> ImportResult {
    let at = ctx.ty(axis).clone();
    if !at.dtype.is_int() || at.numel() != 1 {
        return Err(format!("axis must hold one integer, not {at}").into());
    }
    let rank = ctx.ty(x).rank();
    if rank < 2 {
        return Err(format!("the rank-{rank} input has no signal axis").into());
    }
    let transform = dft_transform(ctx)?;
    let mut inputs = vec![Some(axis)];
    let mut shapes = Vec::with_capacity(rank);
    for a in 0..rank {
        let n = dft_length(ctx, transform, ctx.ty(x).shape[a])?;
        if a == rank - 1 || n == 0 {
            inputs.push(None);
            shapes.push(None);
            continue;
        }
        let y = transform_axis(ctx, x, a, n, transform)?;
        shapes.push(Some(ctx.ty(y).shape.clone()));
        inputs.push(Some(y));
    }
    let outs = ctx.emit(Op::Choose { shapes }, inputs, 2)?;
    ctx.bind_output(0, outs[0]);
    Ok(())
}

pub fn stft(ctx: &mut NodeCtx) -> ImportResult {
    let mut x = ctx.required(0)?;
    // The spec's signal is [batch, length, 1 or 2]; PyTorch's exporter (torch.stft with
    // return_complex=False) emits a real [batch, length] signal, which onnxruntime
    // accepts as [batch, length, 1].
    if let [batch, length] = ctx.ty(x).shape[..] {
        x = reshape(ctx, x, vec![batch, length, 1])?;
    }
    let ty = ctx.ty(x).clone();
    let [batch, length, c] = ty.shape[..] else {
        return Err(format!(
            "signal must be [batch, length] (real) or [batch, length, 1 or 2], got {:?}",
            ty.shape
        )
        .into());
    };
    let scalar = |t: Option<Tensor>, what: &str| -> ImportResult<Option<usize>> {
        t.map(|t| {
            let v = *t
                .to_i64_vec()
                .first()
                .ok_or(format!("{what} must hold one value"))?;
            usize::try_from(v)
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| ImportError::from(format!("{what} {v} must be positive")))
        })
        .transpose()
    };
    let step = scalar(ctx.const_input(1, "frame_step")?, "frame_step")?
        .ok_or("input 'frame_step' is required")?;
    let window = ctx.input(2);
    let frame_length = match scalar(ctx.const_input(3, "frame_length")?, "frame_length")? {
        Some(f) => f,
        None => match window {
            Some(w) => ctx.ty(w).numel(),
            None => length,
        },
    };
    if frame_length > length {
        return Err(
            format!("frame_length {frame_length} exceeds the signal length {length}").into(),
        );
    }
    if let Some(w) = window {
        if ctx.ty(w).shape != [frame_length] {
            return Err(format!(
                "window has shape {:?}, frame_length is {frame_length}",
                ctx.ty(w).shape
            )
            .into());
        }
    }
    let frames = 1 + (length - frame_length) / step;
    // [batch, frames, frame_length, c]: the frames gathered by constant indices.
    let indices: Vec<i64> = (0..frames)
        .flat_map(|f| (0..frame_length).map(move |j| (f * step + j) as i64))
        .collect();
    let indices = ctx.constant_value(
        "frame_indices",
        Tensor::from_vec(&[frames, frame_length], indices),
    );
    let mut framed = ctx.emit1(Op::Gather { axis: 1 }, vec![Some(x), Some(indices)])?;
    debug_assert_eq!(ctx.ty(framed).shape, [batch, frames, frame_length, c]);
    if let Some(w) = window {
        let w = ctx.emit1(
            Op::Reshape {
                shape: vec![frame_length, 1],
            },
            vec![Some(w)],
        )?;
        framed = ctx.emit1(Op::Binary(BinaryOp::Mul), vec![Some(framed), Some(w)])?;
    }
    let onesided = ctx.attrs.flag("onesided", true)?;
    let y = transform_axis(
        ctx,
        framed,
        2,
        frame_length,
        Transform::Forward { onesided },
    )?;
    ctx.bind_output(0, y);
    Ok(())
}

/// MelWeightMatrix: every input is a constant, so the matrix is one (onnx's definition:
/// triangular filters between mel-spaced bin edges).
pub fn mel_weight_matrix(ctx: &mut NodeCtx) -> ImportResult {
    let value = |ctx: &NodeCtx, i: usize, what: &str| -> ImportResult<f64> {
        let t = ctx
            .const_input(i, what)?
            .ok_or_else(|| format!("input '{what}' must be a constant"))?;
        Ok(*t
            .to_f64_vec()
            .first()
            .ok_or(format!("{what} must hold one value"))?)
    };
    let mel_bins = value(ctx, 0, "num_mel_bins")?;
    let dft_length = value(ctx, 1, "dft_length")?;
    let sample_rate = value(ctx, 2, "sample_rate")?;
    let lower = value(ctx, 3, "lower_edge_hertz")?;
    let upper = value(ctx, 4, "upper_edge_hertz")?;
    if !(mel_bins >= 1.0 && dft_length >= 1.0 && sample_rate > 0.0)
        || mel_bins > 1e6
        || dft_length > 1e8
    {
        return Err(format!(
            "num_mel_bins {mel_bins}, dft_length {dft_length} and sample_rate {sample_rate} must be positive"
        )
        .into());
    }
    let (mel_bins, dft_length) = (mel_bins as usize, dft_length as i64);
    let spectrogram_bins = (dft_length / 2 + 1) as usize;
    let to_mel = |hz: f64| 2595.0 * (hz / 700.0).ln_1p() / 10f64.ln();
    let (low_mel, high_mel) = (to_mel(lower), to_mel(upper));
    let step = (high_mel - low_mel) / (mel_bins + 2) as f64;
    let edges: Vec<i64> = (0..mel_bins + 2)
        .map(|i| {
            let hz = 700.0 * ((i as f64 * step + low_mel) / 2595.0 * 10f64.ln()).exp_m1();
            (((dft_length + 1) as f64 * hz) / sample_rate).floor() as i64
        })
        .collect();
    let mut w = vec![0f64; spectrogram_bins * mel_bins];
    let mut set = |j: i64, i: usize, v: f64| -> ImportResult<()> {
        let j = usize::try_from(j)
            .ok()
            .filter(|&j| j < spectrogram_bins)
            .ok_or_else(|| {
                format!("mel bin edge {j} lies outside the {spectrogram_bins} spectrogram bins")
            })?;
        w[j * mel_bins + i] = v;
        Ok(())
    };
    for i in 0..mel_bins {
        let (lo, center, hi) = (edges[i], edges[i + 1], edges[i + 2]);
        if center == lo {
            set(center, i, 1.0)?;
        } else {
            for j in lo..=center {
                set(j, i, (j - lo) as f64 / (center - lo) as f64)?;
            }
        }
        for j in center..hi {
            set(j, i, (hi - j) as f64 / (hi - center) as f64)?;
        }
    }
    let dtype = match ctx.attrs.int_opt("output_datatype")? {
        Some(code) => DType::from_onnx(code as i32)
            .ok_or_else(|| ImportError::Unsupported(format!("output_datatype {code}")))?,
        None => DType::F32,
    };
    let t = Tensor::from_vec(&[spectrogram_bins, mel_bins], w).cast(dtype);
    let y = ctx.constant_value("mel_weight_matrix", t);
    ctx.bind_output(0, y);
    Ok(())
}

/// The transform of the complex tensor `x` (`[..., c]`, c = 1 or 2) along `axis` with
/// length `n` (the signal is zero-padded or truncated to the length the transform
/// reads); returns `[..., m, 2]`, or `[..., n, 1]` for the real inverse.
fn transform_axis(
    ctx: &mut NodeCtx,
    x: ValueId,
    axis: usize,
    n: usize,
    transform: Transform,
) -> ImportResult<ValueId> {
    let ty = ctx.ty(x).clone();
    let rank = ty.rank();
    let c = ty.shape[rank - 1];
    if c != 1 && c != 2 {
        return Err(format!("the last axis must be 1 (real) or 2 (complex), got {c}").into());
    }
    let work = match ty.dtype {
        DType::F64 => DType::F64,
        d if d.is_float() => DType::F32,
        d => return Err(format!("DFT of {d} is not defined").into()),
    };
    let x = if ty.dtype == work {
        x
    } else {
        ctx.emit1(Op::Cast { to: work }, vec![Some(x)])?
    };
    // The signal axis last, the complex axis split off: [..., length] each.
    let mut perm: Vec<usize> = (0..rank - 1).filter(|&a| a != axis).collect();
    perm.push(axis);
    let mut moved: Vec<usize> = perm.iter().map(|&a| ty.shape[a]).collect();
    let part = |ctx: &mut NodeCtx, k: usize, moved: &[usize]| -> ImportResult<ValueId> {
        let mut shape = ty.shape.clone();
        shape[rank - 1] = 1;
        let mut starts = vec![0; rank];
        starts[rank - 1] = k;
        let v = ctx.emit1(
            Op::Slice {
                starts,
                steps: vec![1; rank],
                shape,
            },
            vec![Some(x)],
        )?;
        let v = ctx.emit1(
            Op::Transpose {
                perm: perm.iter().copied().chain([rank - 1]).collect(),
            },
            vec![Some(v)],
        )?;
        ctx.emit1(
            Op::Reshape {
                shape: moved.to_vec(),
            },
            vec![Some(v)],
        )
    };
    let re = part(ctx, 0, &moved)?;
    let im = if c == 2 {
        Some(part(ctx, 1, &moved)?)
    } else {
        None
    };
    // Pad or truncate the signal axis to what the transform reads.
    let reads = if transform == Transform::InverseOneSided {
        n / 2 + 1
    } else {
        n
    };
    let last = moved.len() - 1;
    let fit = |ctx: &mut NodeCtx, v: ValueId| -> ImportResult<ValueId> {
        let have = ctx.ty(v).shape[last];
        if have == reads {
            return Ok(v);
        }
        let mut pads = vec![0i64; 2 * moved.len()];
        pads[moved.len() + last] = reads as i64 - have as i64;
        ctx.emit1(
            Op::Pad(PadAttrs {
                mode: PadMode::Constant,
                pads,
                value: 0.0,
            }),
            vec![Some(v)],
        )
    };
    let re = fit(ctx, re)?;
    let im = im.map(|v| fit(ctx, v)).transpose()?;
    moved[last] = reads;
    let (cos, sin) = matrices(n, transform);
    let m = cos.len() / reads;
    let constant = |ctx: &mut NodeCtx, name: &str, v: Vec<f64>| {
        ctx.constant_value(name, Tensor::from_vec(&[reads, m], v).cast(work))
    };
    let (wr, wi) = (constant(ctx, "dft_cos", cos), constant(ctx, "dft_sin", sin));
    let mm =
        |ctx: &mut NodeCtx, a: ValueId, w: ValueId| ctx.emit1(Op::matmul(), vec![Some(a), Some(w)]);
    // (re + i·im)(wr + i·wi); the real inverse keeps re·wr + im·wi (wi holds −sin).
    let parts = match transform {
        Transform::InverseOneSided => {
            let mut y = mm(ctx, re, wr)?;
            if let Some(im) = im {
                let t = mm(ctx, im, wi)?;
                y = binary(ctx, BinaryOp::Add, y, t)?;
            }
            vec![y]
        }
        _ => {
            let mut yr = mm(ctx, re, wr)?;
            let mut yi = mm(ctx, re, wi)?;
            if let Some(im) = im {
                let a = mm(ctx, im, wi)?;
                yr = binary(ctx, BinaryOp::Sub, yr, a)?;
                let b = mm(ctx, im, wr)?;
                yi = binary(ctx, BinaryOp::Add, yi, b)?;
            }
            vec![yr, yi]
        }
    };
    // Back to the input's axis order, the complex axis last again.
    moved[last] = m;
    let mut with_one = moved.clone();
    with_one.push(1);
    let mut inverse_perm = vec![0; rank];
    for (i, &p) in perm.iter().chain([rank - 1].iter()).enumerate() {
        inverse_perm[p] = i;
    }
    let mut outs = vec![];
    for p in parts {
        let p = ctx.emit1(
            Op::Reshape {
                shape: with_one.clone(),
            },
            vec![Some(p)],
        )?;
        outs.push(ctx.emit1(
            Op::Transpose {
                perm: inverse_perm.clone(),
            },
            vec![Some(p)],
        )?);
    }
    let mut y = if outs.len() == 1 {
        outs[0]
    } else {
        ctx.emit1(
            Op::Concat { axis: rank - 1 },
            outs.into_iter().map(Some).collect(),
        )?
    };
    if ty.dtype != work {
        y = ctx.emit1(Op::Cast { to: ty.dtype }, vec![Some(y)])?;
    }
    Ok(y)
}

/// The `[reads, m]` matrices whose products with the signal's real and imaginary parts
/// give the transform (see [`transform_axis`]).
fn matrices(n: usize, transform: Transform) -> (Vec<f64>, Vec<f64>) {
    let angle = |j: usize, k: usize| 2.0 * PI * ((j * k) % n) as f64 / n as f64;
    let (reads, m) = match transform {
        Transform::Forward { onesided: true } => (n, n / 2 + 1),
        Transform::Forward { onesided: false } | Transform::Inverse => (n, n),
        Transform::InverseOneSided => (n / 2 + 1, n),
    };
    let mut cos = Vec::with_capacity(reads * m);
    let mut sin = Vec::with_capacity(reads * m);
    for j in 0..reads {
        for k in 0..m {
            let a = angle(j, k);
            let (c, s) = match transform {
                Transform::Forward { .. } => (a.cos(), -a.sin()),
                Transform::Inverse => (a.cos() / n as f64, a.sin() / n as f64),
                Transform::InverseOneSided => {
                    // Bins 1.. stand for themselves and their mirror images, except the
                    // Nyquist bin of an even length.
                    let twice = if j == 0 || 2 * j == n { 1.0 } else { 2.0 };
                    (twice * a.cos() / n as f64, -twice * a.sin() / n as f64)
                }
            };
            cos.push(c);
            sin.push(s);
        }
    }
    (cos, sin)
}
