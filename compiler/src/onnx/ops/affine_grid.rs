//! AffineGrid: the sampling grid of a batch of affine matrices. The grid of positions
//! in the original space, homogeneous (`[x, y, (z,) 1]` per pixel), depends only on
//! the constant `size` and is built at import; the output is one MatMul with θᵀ.

use crate::ir::{Tensor, ValueId};
use crate::onnx::import::{ImportResult, NodeCtx};
use crate::ops::Op;

/// The `n` positions along one axis in [-1, 1]: pixel centers spaced `2/n` apart, or with
/// `align_corners` the corner pixels' centers at ±1.
fn axis_positions(n: usize, align_corners: bool) -> Vec<f64> {
    (0..n)
        .map(|i| {
            if align_corners {
                if n == 1 {
                    -1.0
                } else {
                    -1.0 + 2.0 * i as f64 / (n - 1) as f64
                }
            } else {
                -1.0 + (2 * i + 1) as f64 / n as f64
            }
        })
        .collect()
}

/// `[∏ dims, k + 1]`: for each position (row-major over `dims`, D/H/W order) its
/// coordinates fastest axis first (x = W, y = H, z = D), then 1.
fn homogeneous_grid(dims: &[usize], align_corners: bool) -> Vec<f64> {
    let axes: Vec<Vec<f64>> = dims
        .iter()
        .map(|&d| axis_positions(d, align_corners))
        .collect();
    let total: usize = dims.iter().product();
    let mut out = Vec::with_capacity(total * (dims.len() + 1));
    for flat in 0..total {
        let mut rem = flat;
        let mut coords = vec![0.0; dims.len()];
        for (a, &d) in dims.iter().enumerate().rev() {
            coords[a] = axes[a][rem % d];
            rem /= d;
        }
        out.extend(coords.iter().rev());
        out.push(1.0);
    }
    out
}

pub fn affine_grid(ctx: &mut NodeCtx) -> ImportResult {
    let theta = ctx.input_ty(0)?;
    let size = ctx
        .const_input(1, "size")?
        .ok_or("input 'size' is required")?
        .to_i64_vec();
    let align_corners = ctx.attrs.flag("align_corners", false)?;
    let k = size.len().checked_sub(2).filter(|k| *k == 2 || *k == 3);
    let Some(k) = k else {
        return Err(format!("size {size:?} must be [N, C, H, W] or [N, C, D, H, W]").into());
    };
    let n = theta.shape.first().copied().unwrap_or(0);
    if theta.shape != [n, k, k + 1] || !theta.dtype.is_float() || size[0] != n as i64 {
        return Err(format!(
            "theta {theta} must be float [N, {k}, {}] with N = size[0] ({})",
            k + 1,
            size[0]
        )
        .into());
    }
    let dims = size[2..]
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("negative size {size:?}")))
        .collect::<Result<Vec<_>, _>>()?;
    let positions: usize = dims.iter().product();
    let grid = Tensor::from_vec(&[positions, k + 1], homogeneous_grid(&dims, align_corners))
        .cast(theta.dtype);
    let grid = ctx.constant_value("affine_grid_base", grid);
    let tv: ValueId = ctx.required(0)?;
    let theta_t = ctx.emit1(
        Op::Transpose {
            perm: vec![0, 2, 1],
        },
        vec![Some(tv)],
    )?;
    // [P, k+1] @ [N, k+1, k] → [N, P, k]
    let y = ctx.emit1(Op::matmul(), vec![Some(grid), Some(theta_t)])?;
    let mut shape = vec![n];
    shape.extend(&dims);
    shape.push(k);
    let y = ctx.emit1(Op::Reshape { shape }, vec![Some(y)])?;
    ctx.bind_output(0, y);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_span_the_pixel_centers() {
        assert_eq!(axis_positions(2, false), vec![-0.5, 0.5]);
        assert_eq!(axis_positions(3, true), vec![-1.0, 0.0, 1.0]);
        // H = 2, W = 3: rows are (x, y, 1), x running fastest.
        let g = homogeneous_grid(&[2, 3], true);
        assert_eq!(&g[..6], &[-1.0, -1.0, 1.0, 0.0, -1.0, 1.0]);
        assert_eq!(&g[15..], &[1.0, 1.0, 1.0]);
    }
}
