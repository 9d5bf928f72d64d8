//! Col2Im (PyTorch's `fold`): every column block adds into the image positions its
//! sliding window covers. The positions are static, so this is one ScatterElements
//! with add reduction over constant indices; contributions that land in the padding
//! go to a spare position that is sliced off.

use super::build::reshape;
use crate::ir::Tensor;
use crate::onnx::import::{ImportResult, NodeCtx};
use crate::ops::{Op, ScatterReduction};

pub fn col2im(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.required(0)?;
    let xt = ctx.ty(x).clone();
    let shape_of = |ctx: &NodeCtx, i: usize, what: &str| -> ImportResult<Vec<usize>> {
        let t = ctx
            .const_input(i, what)?
            .ok_or_else(|| format!("input '{what}' must be a constant"))?;
        t.to_i64_vec()
            .into_iter()
            .map(|v| usize::try_from(v).ok().filter(|&v| v > 0))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| format!("{what} must hold positive values").into())
    };
    let image = shape_of(ctx, 1, "image_shape")?;
    let block = shape_of(ctx, 2, "block_shape")?;
    let d = image.len();
    if block.len() != d || d == 0 {
        return Err(
            format!("image_shape {image:?} and block_shape {block:?} differ in rank").into(),
        );
    }
    let ints = |ctx: &NodeCtx, name: &str, len: usize, default: i64| -> ImportResult<Vec<i64>> {
        let v = ctx
            .attrs
            .ints_opt(name)?
            .unwrap_or_else(|| vec![default; len]);
        if v.len() != len {
            return Err(format!("{name} must hold {len} values, got {v:?}").into());
        }
        Ok(v)
    };
    let dilations = ints(ctx, "dilations", d, 1)?;
    let strides = ints(ctx, "strides", d, 1)?;
    let pads = ints(ctx, "pads", 2 * d, 0)?;
    if dilations.iter().chain(&strides).any(|&v| v < 1) || pads.iter().any(|&p| p < 0) {
        return Err("dilations and strides must be positive, pads non-negative".into());
    }
    let block_size: usize = block.iter().product();
    let [n, cb, l] = xt.shape[..] else {
        return Err(format!(
            "input must be [N, C·prod(block_shape), L], got {:?}",
            xt.shape
        )
        .into());
    };
    if cb % block_size != 0 {
        return Err(format!("{cb} channels do not split into blocks of {block_size}").into());
    }
    let c = cb / block_size;
    // Sliding positions per axis.
    let mut slides = vec![];
    for a in 0..d {
        let padded = image[a] as i64 + pads[a] + pads[d + a];
        let span = dilations[a] * (block[a] as i64 - 1) + 1;
        if padded < span {
            return Err(
                format!("block {block:?} does not fit the padded image on axis {a}").into(),
            );
        }
        slides.push(((padded - span) / strides[a] + 1) as usize);
    }
    if slides.iter().product::<usize>() != l {
        return Err(format!("L = {l}, but the blocks slide over {slides:?} positions").into());
    }
    let pixels: usize = image.iter().product();
    // Index of every (block offset, column) pair: the image position it adds to.
    let unravel = |mut i: usize, dims: &[usize]| -> Vec<usize> {
        let mut out = vec![0; dims.len()];
        for a in (0..dims.len()).rev() {
            out[a] = i % dims[a];
            i /= dims[a];
        }
        out
    };
    let mut positions = Vec::with_capacity(block_size * l);
    for b in 0..block_size {
        let bo = unravel(b, &block);
        for col in 0..l {
            let lo = unravel(col, &slides);
            let mut flat = 0i64;
            let mut inside = true;
            for a in 0..d {
                let q = lo[a] as i64 * strides[a] + bo[a] as i64 * dilations[a] - pads[a];
                inside &= (0..image[a] as i64).contains(&q);
                flat = flat * image[a] as i64 + q;
            }
            positions.push(if inside { flat } else { pixels as i64 });
        }
    }
    let indices = ctx.constant_value(
        "col2im_positions",
        Tensor::from_vec(&[1, 1, block_size * l], positions),
    );
    let indices = ctx.emit1(
        Op::Expand {
            shape: vec![n, c, block_size * l],
        },
        vec![Some(indices)],
    )?;
    let updates = reshape(ctx, x, vec![n, c, block_size * l])?;
    let zeros = ctx.constant_value(
        "col2im_zeros",
        Tensor::from_vec(&[n, c, pixels + 1], vec![0f64; n * c * (pixels + 1)]).cast(xt.dtype),
    );
    let sums = ctx.emit1(
        Op::ScatterElements {
            axis: 2,
            reduction: ScatterReduction::Add,
        },
        vec![Some(zeros), Some(indices), Some(updates)],
    )?;
    let sums = ctx.emit1(
        Op::Slice {
            starts: vec![0, 0, 0],
            steps: vec![1, 1, 1],
            shape: vec![n, c, pixels],
        },
        vec![Some(sums)],
    )?;
    let mut shape = vec![n, c];
    shape.extend(&image);
    let y = reshape(ctx, sums, shape)?;
    ctx.bind_output(0, y);
    Ok(())
}
