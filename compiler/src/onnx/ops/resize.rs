//! Resize (opset 10+) and the older Upsample, with scales or sizes known at compile time.

use crate::onnx::attributes::normalize_axis;
use crate::onnx::import::{ImportResult, NodeCtx};
use crate::ops::{CoordinateTransform, NearestMode, Op, ResizeAttrs, ResizeMode};

/// How a Resize samples, from its attributes.
pub struct Sampling {
    pub mode: ResizeMode,
    pub coordinate_transform: CoordinateTransform,
    pub nearest_mode: NearestMode,
    /// Antialiasing of linear and cubic kernels (nearest ignores it).
    pub antialias: bool,
    pub cubic_coeff_a: f32,
    pub exclude_outside: bool,
    pub extrapolation_value: f32,
}

pub fn sampling(ctx: &NodeCtx) -> ImportResult<Sampling> {
    let a = &ctx.attrs;
    let upsample = ctx.node.op_type == "Upsample";
    let mode = match a.string("mode", "nearest")?.as_str() {
        "nearest" => ResizeMode::Nearest,
        "linear" | "bilinear" => ResizeMode::Linear,
        "cubic" => ResizeMode::Cubic,
        m => return Err(format!("unknown mode '{m}'").into()),
    };
    // Upsample and opset-10 Resize have no coordinate mode; they behave as asymmetric.
    let default_ct = if upsample || ctx.opset() < 11 {
        "asymmetric"
    } else {
        "half_pixel"
    };
    let coordinate_transform = match a
        .string("coordinate_transformation_mode", default_ct)?
        .as_str()
    {
        "half_pixel" => CoordinateTransform::HalfPixel,
        "half_pixel_symmetric" => CoordinateTransform::HalfPixelSymmetric,
        "pytorch_half_pixel" => CoordinateTransform::PytorchHalfPixel,
        "align_corners" => CoordinateTransform::AlignCorners,
        "asymmetric" => CoordinateTransform::Asymmetric,
        "tf_crop_and_resize" => CoordinateTransform::TfCropAndResize,
        m => return Err(format!("unknown coordinate_transformation_mode '{m}'").into()),
    };
    let default_nearest = if upsample || ctx.opset() < 11 {
        "floor"
    } else {
        "round_prefer_floor"
    };
    let nearest_mode = match a.string("nearest_mode", default_nearest)?.as_str() {
        "round_prefer_floor" => NearestMode::RoundPreferFloor,
        "round_prefer_ceil" => NearestMode::RoundPreferCeil,
        "floor" => NearestMode::Floor,
        "ceil" => NearestMode::Ceil,
        m => return Err(format!("unknown nearest_mode '{m}'").into()),
    };
    // Antialiasing widens linear and cubic kernels only; nearest ignores it.
    let antialias = a.flag("antialias", false)? && mode != ResizeMode::Nearest;
    Ok(Sampling {
        mode,
        coordinate_transform,
        nearest_mode,
        antialias,
        cubic_coeff_a: a.float("cubic_coeff_a", -0.75)?,
        exclude_outside: a.flag("exclude_outside", false)?,
        extrapolation_value: a.float("extrapolation_value", 0.0)?,
    })
}

pub fn resize(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let r = x.rank();
    let sampling = sampling(ctx)?;
    let mode = sampling.mode;
    let a = &ctx.attrs;
    let upsample = ctx.node.op_type == "Upsample";
    let axes: Vec<usize> = match a.ints_opt("axes")? {
        Some(v) => v
            .iter()
            .map(|&ax| normalize_axis(ax, r))
            .collect::<Result<_, _>>()?,
        None => (0..r).collect(),
    };
    let policy = a.string("keep_aspect_ratio_policy", "stretch")?;

    let (roi_in, scales_in, sizes_in) = if upsample {
        let s = if ctx.opset() < 9 {
            a.floats_opt("scales")?
        } else {
            ctx.const_input(1, "scales")?
                .map(|t| t.to_f64_vec().iter().map(|&v| v as f32).collect())
        };
        (None, s, None)
    } else if ctx.opset() < 11 {
        (None, ctx.const_input(1, "scales")?.map(|t| f32s(&t)), None)
    } else {
        let roi = ctx.const_input(1, "roi")?.map(|t| f32s(&t));
        let scales = ctx
            .const_input(2, "scales")?
            .map(|t| f32s(&t))
            .filter(|s| !s.is_empty());
        let sizes = ctx
            .const_input(3, "sizes")?
            .map(|t| t.to_i64_vec())
            .filter(|s| !s.is_empty());
        (roi, scales, sizes)
    };
    let mut scales = vec![1f32; r];
    let mut output_shape = x.shape.clone();
    match (scales_in, sizes_in) {
        (Some(s), None) => {
            if s.len() != axes.len() {
                return Err(
                    format!("scales has {} entries, {} expected", s.len(), axes.len()).into(),
                );
            }
            for (k, &ax) in axes.iter().enumerate() {
                // Also refuses NaN, which every comparison lets through.
                if !(s[k] > 0.0 && s[k].is_finite()) {
                    return Err(format!("scales must be positive and finite, not {}", s[k]).into());
                }
                scales[ax] = s[k];
                output_shape[ax] = (x.shape[ax] as f64 * s[k] as f64).floor() as usize;
            }
        }
        (None, Some(sz)) => {
            if sz.len() != axes.len() {
                return Err(
                    format!("sizes has {} entries, {} expected", sz.len(), axes.len()).into(),
                );
            }
            if let Some(bad) = sz.iter().find(|&&d| d < 0) {
                return Err(format!("sizes has a negative entry {bad}").into());
            }
            let ratio = |k: usize, ax: usize| sz[k] as f32 / x.shape[ax] as f32;
            let pick = match policy.as_str() {
                "stretch" => None,
                "not_larger" => Some(
                    axes.iter()
                        .enumerate()
                        .map(|(k, &ax)| ratio(k, ax))
                        .fold(f32::INFINITY, f32::min),
                ),
                "not_smaller" => Some(
                    axes.iter()
                        .enumerate()
                        .map(|(k, &ax)| ratio(k, ax))
                        .fold(0.0, f32::max),
                ),
                p => return Err(format!("unknown keep_aspect_ratio_policy '{p}'").into()),
            };
            for (k, &ax) in axes.iter().enumerate() {
                match pick {
                    None => {
                        output_shape[ax] = usize::try_from(sz[k]).map_err(|_| "negative size")?;
                        scales[ax] = ratio(k, ax);
                    }
                    Some(s) => {
                        scales[ax] = s;
                        output_shape[ax] = (s * x.shape[ax] as f32 + 0.5).floor() as usize;
                    }
                }
            }
        }
        (Some(_), Some(_)) => return Err("only one of scales and sizes may be given".into()),
        (None, None) => return Err("one of scales and sizes is required".into()),
    }
    let mut roi = vec![0f32; r]
        .into_iter()
        .chain(vec![1f32; r])
        .collect::<Vec<_>>();
    if let Some(given) = roi_in.filter(|v| !v.is_empty()) {
        if given.len() != 2 * axes.len() {
            return Err("roi must have two entries per axis".into());
        }
        for (k, &ax) in axes.iter().enumerate() {
            roi[ax] = given[k];
            roi[r + ax] = given[axes.len() + k];
        }
    }
    let attrs = ResizeAttrs {
        mode,
        coordinate_transform: sampling.coordinate_transform,
        nearest_mode: sampling.nearest_mode,
        cubic_coeff_a: sampling.cubic_coeff_a,
        exclude_outside: sampling.exclude_outside,
        extrapolation_value: sampling.extrapolation_value,
        scales,
        roi,
        output_shape,
        scales_from_extents: false,
    };
    let x = ctx.required(0)?;
    let y = if sampling.antialias {
        super::resize_antialias::resize_antialias(ctx, x, &attrs, &axes)?
    } else {
        ctx.emit1(Op::Resize(attrs), vec![Some(x)])?
    };
    ctx.bind_output(0, y);
    Ok(())
}

fn f32s(t: &crate::ir::Tensor) -> Vec<f32> {
    t.to_f64_vec().iter().map(|&v| v as f32).collect()
}
