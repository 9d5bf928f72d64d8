//! RotaryEmbedding (opset 23): each head's first `rotary_embedding_dim` features are
//! rotated in pairs — the two halves, or even/odd features when interleaved — by the
//! angle whose cosine and sine the caches hold for the token's position. Decomposed into
//! Gather (caches by position_ids), strided Slices, elementwise ops and Concat, on a
//! rank-4 view of the input in which the caches broadcast over the heads.

use super::build::binary;
use crate::ir::ValueId;
use crate::onnx::import::{ImportResult, NodeCtx};
use crate::ops::{BinaryOp, Op};

/// `count` elements of the last axis from `start`, `step` apart.
fn slice_last(
    ctx: &mut NodeCtx,
    v: ValueId,
    start: usize,
    step: i64,
    count: usize,
) -> ImportResult<ValueId> {
    let mut shape = ctx.ty(v).shape.clone();
    let r = shape.len();
    let mut starts = vec![0; r];
    starts[r - 1] = start;
    let mut steps = vec![1; r];
    steps[r - 1] = step;
    shape[r - 1] = count;
    ctx.emit1(
        Op::Slice {
            starts,
            steps,
            shape,
        },
        vec![Some(v)],
    )
}

pub fn rotary_embedding(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let interleaved = ctx.attrs.flag("interleaved", false)?;
    let num_heads = ctx.attrs.int("num_heads", 0)?;
    // A rank-4 view of X and the shape the caches take to broadcast against it:
    // [B, H, S, D] with caches [B, 1, S, d/2], or [B, S, H, D] with [B, S, 1, d/2].
    let (view, heads_axis) = match x.shape[..] {
        [_, _, _, _] => (x.shape.clone(), 1),
        [b, s, hidden] => {
            let h = usize::try_from(num_heads)
                .ok()
                .filter(|h| *h > 0 && hidden % h == 0)
                .ok_or_else(|| {
                    format!("a 3-D input needs num_heads dividing its {hidden} features")
                })?;
            (vec![b, s, h, hidden / h], 2)
        }
        _ => return Err(format!("input must be 3-D or 4-D, got {x}").into()),
    };
    let head = view[3];
    let rot = match ctx.attrs.int("rotary_embedding_dim", 0)? {
        0 => head,
        d => usize::try_from(d)
            .ok()
            .filter(|d| *d <= head && d % 2 == 0)
            .ok_or_else(|| format!("rotary_embedding_dim {d} must be even and ≤ {head}"))?,
    };
    let half = rot / 2;
    let (batch, seq) = (view[0], view[if heads_axis == 1 { 2 } else { 1 }]);
    // The caches as [B, S, d/2], gathered by position when position_ids is given.
    let mut caches = [ctx.required(1)?, ctx.required(2)?];
    if let Some(pos) = ctx.input(3) {
        for c in &mut caches {
            *c = ctx.emit1(Op::Gather { axis: 0 }, vec![Some(*c), Some(pos)])?;
        }
    }
    let mut cache_shape = vec![batch, seq, half];
    cache_shape.insert(heads_axis, 1);
    for c in &mut caches {
        let t = ctx.ty(*c);
        if t.numel() != batch * seq * half || t.shape.last() != Some(&half) {
            return Err(format!(
                "cos/sin cache {t} must give [batch {batch}, sequence {seq}, {half}]"
            )
            .into());
        }
        *c = ctx.emit1(
            Op::Reshape {
                shape: cache_shape.clone(),
            },
            vec![Some(*c)],
        )?;
    }
    let [cos, sin] = caches;
    let xv = ctx.emit1(
        Op::Reshape {
            shape: view.clone(),
        },
        vec![Some(ctx.required(0)?)],
    )?;
    let (x1, x2) = if interleaved {
        (
            slice_last(ctx, xv, 0, 2, half)?,
            slice_last(ctx, xv, 1, 2, half)?,
        )
    } else {
        (
            slice_last(ctx, xv, 0, 1, half)?,
            slice_last(ctx, xv, half, 1, half)?,
        )
    };
    let (c1, s2) = (
        binary(ctx, BinaryOp::Mul, cos, x1)?,
        binary(ctx, BinaryOp::Mul, sin, x2)?,
    );
    let real = binary(ctx, BinaryOp::Sub, c1, s2)?;
    let (s1, c2) = (
        binary(ctx, BinaryOp::Mul, sin, x1)?,
        binary(ctx, BinaryOp::Mul, cos, x2)?,
    );
    let imag = binary(ctx, BinaryOp::Add, s1, c2)?;
    let mut rotated = if interleaved {
        // [.., d/2, 2] pairs (real, imag) flattened back into even/odd features.
        let mut pair = ctx.ty(real).shape.clone();
        pair.push(1);
        let re = ctx.emit1(
            Op::Reshape {
                shape: pair.clone(),
            },
            vec![Some(real)],
        )?;
        let im = ctx.emit1(Op::Reshape { shape: pair }, vec![Some(imag)])?;
        let both = ctx.emit1(Op::Concat { axis: 4 }, vec![Some(re), Some(im)])?;
        let mut shape = view.clone();
        shape[3] = rot;
        ctx.emit1(Op::Reshape { shape }, vec![Some(both)])?
    } else {
        ctx.emit1(Op::Concat { axis: 3 }, vec![Some(real), Some(imag)])?
    };
    if rot < head {
        let pass = slice_last(ctx, xv, rot, 1, head - rot)?;
        rotated = ctx.emit1(Op::Concat { axis: 3 }, vec![Some(rotated), Some(pass)])?;
    }
    let y = ctx.emit1(
        Op::Reshape {
            shape: x.shape.clone(),
        },
        vec![Some(rotated)],
    )?;
    ctx.bind_output(0, y);
    Ok(())
}
