//! The stateful sequence ops of linear-attention and state-space models (opset 27):
//! CausalConvWithState and LinearAttention. Both carry a state across calls (an input
//! `past_state`, an output `present_state`); within a call the sequence length is
//! static, so they decompose into core ops, LinearAttention's recurrence unrolled
//! step by step.

use super::build::binary;
use super::low_precision::to_f32;
use crate::ir::{DType, Tensor, ValueId};
use crate::onnx::import::{ImportError, ImportResult, NodeCtx};
use crate::ops::{Activation, BinaryOp, ConvAttrs, Op, PadAttrs, PadMode, UnaryOp};

/// CausalConvWithState: a depthwise 1-D convolution over `[past_state, input]` (or
/// the input left-padded with k − 1 zeros), optionally followed by SiLU; the new state
/// is the last k − 1 positions of that padded input.
pub fn causal_conv_with_state(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.required(0)?;
    let w = ctx.required(1)?;
    let xt = ctx.ty(x).clone();
    let wt = ctx.ty(w).clone();
    let [batch, channels, length] = xt.shape[..] else {
        return Err(format!(
            "input must be (batch, channels, length), got {:?}",
            xt.shape
        )
        .into());
    };
    let k = match wt.shape[..] {
        [c, 1, k] if c == channels && k > 0 => k,
        _ => {
            return Err(format!(
                "weight must be ({channels}, 1, k) with k > 0, got {:?}",
                wt.shape
            )
            .into())
        }
    };
    let silu = match ctx.attrs.string("activation", "none")?.as_str() {
        "none" => false,
        "silu" | "swish" => true,
        other => return Err(format!("activation '{other}': expected none, silu or swish").into()),
    };
    let padded = match ctx.input(3) {
        Some(past) => {
            if ctx.ty(past).shape != [batch, channels, k - 1] {
                return Err(format!(
                    "past_state must be ({batch}, {channels}, {}), got {:?}",
                    k - 1,
                    ctx.ty(past).shape
                )
                .into());
            }
            ctx.emit1(Op::Concat { axis: 2 }, vec![Some(past), Some(x)])?
        }
        None => ctx.emit1(
            Op::Pad(PadAttrs {
                mode: PadMode::Constant,
                pads: vec![0, 0, k as i64 - 1, 0, 0, 0],
                value: 0.0,
            }),
            vec![Some(x)],
        )?,
    };
    let conv = ConvAttrs {
        kernel: vec![k],
        strides: vec![1],
        pads: vec![0, 0],
        dilations: vec![1],
        group: channels,
        activation: Activation::None,
    };
    let mut y = ctx.emit1(Op::Conv(conv), vec![Some(padded), Some(w), ctx.input(2)])?;
    if silu {
        // Rounded to the input type before the activation, as the definition does.
        let s = ctx.emit1(Op::Unary(UnaryOp::Sigmoid), vec![Some(y)])?;
        y = ctx.emit1(Op::Binary(BinaryOp::Mul), vec![Some(y), Some(s)])?;
    }
    let state = ctx.emit1(
        Op::Slice {
            starts: vec![0, 0, length],
            steps: vec![1, 1, 1],
            shape: vec![batch, channels, k - 1],
        },
        vec![Some(padded)],
    )?;
    ctx.bind_outputs(&[y, state]);
    Ok(())
}

/// LinearAttention: per step t (in float32), the state `S` (per key/value head, d_k × d_v)
/// decays by `exp(decay_t)` (gated rules), the value is corrected by what the state
/// already returns for the key (`β_t·(v_t − Sᵀk_t)`, delta rules), `k_t ⊗ v_t` is added,
/// and the output is `scale · q_tᵀ S` (query heads sharing a key/value head read its
/// state).
pub fn linear_attention(ctx: &mut NodeCtx) -> ImportResult {
    let (q, k, v) = (ctx.required(0)?, ctx.required(1)?, ctx.required(2)?);
    let rule = ctx.attrs.string("update_rule", "gated_delta")?;
    let (gated, delta) = match rule.as_str() {
        "linear" => (false, false),
        "gated" => (true, false),
        "delta" => (false, true),
        "gated_delta" => (true, true),
        other => {
            return Err(format!(
                "update_rule '{other}': expected linear, gated, delta or gated_delta"
            )
            .into())
        }
    };
    let heads = |name: &str| -> ImportResult<usize> {
        let h = ctx
            .attrs
            .int_opt(name)?
            .ok_or_else(|| format!("attribute '{name}' is required"))?;
        usize::try_from(h)
            .ok()
            .filter(|&h| h > 0)
            .ok_or_else(|| format!("{name} {h} must be positive").into())
    };
    let (hq, hkv) = (heads("q_num_heads")?, heads("kv_num_heads")?);
    if hq % hkv != 0 {
        return Err(format!("q_num_heads {hq} must be a multiple of kv_num_heads {hkv}").into());
    }
    let (decay, beta) = (ctx.input(4), ctx.input(5));
    if gated != decay.is_some() {
        return Err(format!(
            "update_rule '{rule}' {} the decay input",
            if gated { "requires" } else { "forbids" }
        )
        .into());
    }
    if delta != beta.is_some() {
        return Err(format!(
            "update_rule '{rule}' {} the beta input",
            if delta { "requires" } else { "forbids" }
        )
        .into());
    }
    let (qt, kt, vt) = (ctx.ty(q).clone(), ctx.ty(k).clone(), ctx.ty(v).clone());
    let [b, t, qd] = qt.shape[..] else {
        return Err(format!("query must be (batch, time, heads·d), got {:?}", qt.shape).into());
    };
    let (&[kb, ktime, kd], &[vb, vtime, vd]) = (&kt.shape[..], &vt.shape[..]) else {
        return Err("key and value must be rank 3".into());
    };
    if qd % hq != 0 || kd % hkv != 0 || vd % hkv != 0 || (kb, ktime, vb, vtime) != (b, t, b, t) {
        return Err(format!(
            "query {:?}, key {:?} and value {:?} do not split into {hq} / {hkv} heads over one batch and time",
            qt.shape, kt.shape, vt.shape
        )
        .into());
    }
    if t == 0 {
        return Err(ImportError::Unsupported(
            "an empty sequence (time 0)".into(),
        ));
    }
    let (dk, dv) = (qd / hq, vd / hkv);
    if kd / hkv != dk {
        return Err(format!("query heads have {dk} dims, key heads {}", kd / hkv).into());
    }
    let scale = match ctx.attrs.float_opt("scale")? {
        Some(s) if s != 0.0 => s as f64,
        _ => 1.0 / (dk as f64).sqrt(),
    };
    // (B, T, H·D) → (B, H, T, D), in float32.
    let heads_first =
        |ctx: &mut NodeCtx, x: ValueId, h: usize, d: usize| -> ImportResult<ValueId> {
            let x = to_f32(ctx, x)?;
            let x = ctx.emit1(
                Op::Reshape {
                    shape: vec![b, t, h, d],
                },
                vec![Some(x)],
            )?;
            ctx.emit1(
                Op::Transpose {
                    perm: vec![0, 2, 1, 3],
                },
                vec![Some(x)],
            )
        };
    let (q4, k4, v4) = (
        heads_first(ctx, q, hq, dk)?,
        heads_first(ctx, k, hkv, dk)?,
        heads_first(ctx, v, hkv, dv)?,
    );
    // exp(decay) as (B, H_kv, T, 1 or d_k); β as (B, H_kv or 1, T, 1).
    let decay_factor = match decay {
        Some(g) => {
            let last = match ctx.ty(g).shape[..] {
                [gb, gt, last] if (gb, gt) == (b, t) && (last == hkv || last == hkv * dk) => last,
                ref s => {
                    return Err(format!(
                        "decay must be ({b}, {t}, {hkv} or {}), got {s:?}",
                        hkv * dk
                    )
                    .into())
                }
            };
            let per = last / hkv;
            let g = heads_first(ctx, g, hkv, per)?;
            Some(ctx.emit1(Op::Unary(UnaryOp::Exp), vec![Some(g)])?)
        }
        None => None,
    };
    let beta4 = match beta {
        Some(be) => {
            let last = match ctx.ty(be).shape[..] {
                [bb, bt, last] if (bb, bt) == (b, t) && (last == hkv || last == 1) => last,
                ref s => {
                    return Err(format!("beta must be ({b}, {t}, {hkv} or 1), got {s:?}").into())
                }
            };
            Some(heads_first(ctx, be, last, 1)?)
        }
        None => None,
    };
    let state_dtype = match ctx.input(3) {
        Some(p) => ctx.ty(p).dtype,
        None => qt.dtype,
    };
    let mut state = match ctx.input(3) {
        Some(p) => {
            if ctx.ty(p).shape != [b, hkv, dk, dv] {
                return Err(format!(
                    "past_state must be ({b}, {hkv}, {dk}, {dv}), got {:?}",
                    ctx.ty(p).shape
                )
                .into());
            }
            to_f32(ctx, p)?
        }
        None => ctx.constant_value(
            "zero_state",
            Tensor::from_vec(&[b, hkv, dk, dv], vec![0f32; b * hkv * dk * dv]),
        ),
    };
    // Step t of a (B, H, T, D) tensor as (B, H, rows, cols).
    let step = |ctx: &mut NodeCtx,
                x: ValueId,
                i: usize,
                rows: usize,
                cols: usize|
     -> ImportResult<ValueId> {
        let s = ctx.ty(x).shape.clone();
        let x = ctx.emit1(
            Op::Slice {
                starts: vec![0, 0, i, 0],
                steps: vec![1; 4],
                shape: vec![s[0], s[1], 1, s[3]],
            },
            vec![Some(x)],
        )?;
        ctx.emit1(
            Op::Reshape {
                shape: vec![s[0], s[1], rows, cols],
            },
            vec![Some(x)],
        )
    };
    let scale_v = ctx.constant_value("scale", Tensor::from_vec(&[], vec![scale as f32]));
    let group = hq / hkv;
    let mut outputs = vec![];
    for i in 0..t {
        if let Some(e) = decay_factor {
            let per = ctx.ty(e).shape[3];
            let e_t = step(ctx, e, i, per, 1)?;
            state = binary(ctx, BinaryOp::Mul, state, e_t)?;
        }
        let k_row = step(ctx, k4, i, 1, dk)?;
        let mut v_row = step(ctx, v4, i, 1, dv)?;
        if let Some(be) = beta4 {
            let retrieved = ctx.emit1(Op::matmul(), vec![Some(k_row), Some(state)])?;
            let diff = binary(ctx, BinaryOp::Sub, v_row, retrieved)?;
            let beta_t = step(ctx, be, i, 1, 1)?;
            v_row = binary(ctx, BinaryOp::Mul, beta_t, diff)?;
        }
        let k_col = ctx.emit1(
            Op::Reshape {
                shape: vec![b, hkv, dk, 1],
            },
            vec![Some(k_row)],
        )?;
        let outer = ctx.emit1(Op::matmul(), vec![Some(k_col), Some(v_row)])?;
        state = binary(ctx, BinaryOp::Add, state, outer)?;
        let read = if group == 1 {
            state
        } else {
            let s = ctx.emit1(
                Op::Reshape {
                    shape: vec![b, hkv, 1, dk, dv],
                },
                vec![Some(state)],
            )?;
            let s = ctx.emit1(
                Op::Expand {
                    shape: vec![b, hkv, group, dk, dv],
                },
                vec![Some(s)],
            )?;
            ctx.emit1(
                Op::Reshape {
                    shape: vec![b, hq, dk, dv],
                },
                vec![Some(s)],
            )?
        };
        let q_row = step(ctx, q4, i, 1, dk)?;
        let o = ctx.emit1(Op::matmul(), vec![Some(q_row), Some(read)])?;
        outputs.push(binary(ctx, BinaryOp::Mul, o, scale_v)?);
    }
    // (B, H_q, T, d_v) → (B, T, H_q·d_v).
    let o = if outputs.len() == 1 {
        outputs[0]
    } else {
        ctx.emit1(
            Op::Concat { axis: 2 },
            outputs.into_iter().map(Some).collect(),
        )?
    };
    let o = ctx.emit1(
        Op::Transpose {
            perm: vec![0, 2, 1, 3],
        },
        vec![Some(o)],
    )?;
    let mut o = ctx.emit1(
        Op::Reshape {
            shape: vec![b, t, hq * dv],
        },
        vec![Some(o)],
    )?;
    if qt.dtype != DType::F32 {
        o = ctx.emit1(Op::Cast { to: qt.dtype }, vec![Some(o)])?;
    }
    if state_dtype != DType::F32 {
        state = ctx.emit1(Op::Cast { to: state_dtype }, vec![Some(state)])?;
    }
    ctx.bind_outputs(&[o, state]);
    Ok(())
}
