//! ONNX `Attention` (opset 23, 24's `nonpad_kv_seqlen`, 25's sliding window) as core
//! ops, step for step as onnx's reference (`onnx/reference/ops/op_attention.py`):
//!
//! ```text
//! Q, K, V (3-D: [B, S, H·D] → [B, H, S, D])      K = concat(past_key, K), V likewise
//! s = cast(sqrt(scale or 1/√D))                  qk = (Q·s) @ (K·s)ᵀ
//! qk = softcap · tanh(qk / softcap)              (softcap > 0)
//! x = where(allowed, qk + float mask, −inf)      allowed = bool mask ∧ causal ∧ window ∧ padding
//! p = softmax(cast(x, softmax_precision)), 0 in rows where nothing is allowed
//! Y = cast(p) @ V                                (3-D: back to [B, S, H·Dv])
//! ```
//!
//! Causal and window masks with a scalar offset (no cache, or `past_key`'s length) are
//! constants built here; with `nonpad_kv_seqlen` (a per-batch offset) they compare
//! constant index tables against that input at run time. Grouped-query attention
//! reshapes Q to `[B, Hkv, r·Sq, D]` so each KV head serves its `r` query heads without
//! materializing `repeat(K, r)`: the same dot products as the reference.

use crate::ir::{DType, Tensor, ValueId};
use crate::onnx::import::{ImportError, ImportResult, NodeCtx};
use crate::ops::{BinaryOp, Op, ReduceAttrs, ReduceKind, UnaryOp};

use super::elementwise::scalar_of;

const QK_MATMUL_OUTPUT_WITH_BIAS: i64 = 2;
const QK_MATMUL_OUTPUT_AFTER_SOFTMAX: i64 = 3;

fn reshape(ctx: &mut NodeCtx, v: ValueId, shape: Vec<usize>) -> ImportResult<ValueId> {
    if ctx.ty(v).shape == shape {
        return Ok(v);
    }
    ctx.emit1(Op::Reshape { shape }, vec![Some(v)])
}

fn binary(ctx: &mut NodeCtx, op: BinaryOp, a: ValueId, b: ValueId) -> ImportResult<ValueId> {
    ctx.emit1(Op::Binary(op), vec![Some(a), Some(b)])
}

fn scalar(ctx: &mut NodeCtx, name: &str, dtype: DType, v: f64) -> ValueId {
    ctx.constant_value(name, scalar_of(dtype, v))
}

/// `[B, S, H·D]` → `[B, H, S, D]`.
fn split_heads(ctx: &mut NodeCtx, v: ValueId, heads: usize, what: &str) -> ImportResult<ValueId> {
    let [b, s, hidden] = ctx.ty(v).shape[..] else {
        unreachable!("checked 3-D")
    };
    if heads == 0 || hidden % heads != 0 {
        return Err(format!(
            "{what}'s hidden size {hidden} is not a multiple of its {heads} heads"
        )
        .into());
    }
    let v = reshape(ctx, v, vec![b, s, heads, hidden / heads])?;
    ctx.emit1(
        Op::Transpose {
            perm: vec![0, 2, 1, 3],
        },
        vec![Some(v)],
    )
}

/// A `[q, kv]` constant from `f(i, j)`.
fn table<T: crate::ir::Element>(q: usize, kv: usize, f: impl Fn(i64, i64) -> T) -> Tensor {
    let data = (0..q as i64)
        .flat_map(|i| (0..kv as i64).map(move |j| (i, j)))
        .map(|(i, j)| f(i, j))
        .collect();
    Tensor::from_vec(&[q, kv], data)
}

/// Where a query block starts among the keys: a compile-time count, or per batch
/// `nonpad_kv_seqlen[b] − q` (the input reshaped to `[B, 1, 1, 1]`, int64).
enum Offset {
    Scalar(i64),
    PerBatch(ValueId),
}

/// The keys `j` query `i` may attend, `p − left ≤ j ≤ p + right` where `p = i + offset`
/// is its position (`None`: unbounded), as a bool `[q, kv]` constant or, per batch,
/// `[B, 1, q, kv]`.
fn band(
    ctx: &mut NodeCtx,
    offset: &Offset,
    q: usize,
    kv: usize,
    left: Option<i64>,
    right: Option<i64>,
) -> ImportResult<Option<ValueId>> {
    match *offset {
        Offset::Scalar(o) => {
            let t = table(q, kv, |i, j| {
                let p = i + o;
                left.is_none_or(|l| j >= p - l) && right.is_none_or(|r| j <= p + r)
            });
            Ok(Some(ctx.constant_value("attention_band", t)))
        }
        Offset::PerBatch(nonpad) => {
            // p = i + n − q, so j ≥ p − l ⇔ n ≤ l + q + j − i and j ≤ p + r ⇔ j − i + q − r ≤ n.
            let qi = q as i64;
            let mut allowed = None;
            if let Some(l) = left {
                let t =
                    ctx.constant_value("attention_band_left", table(q, kv, |i, j| l + qi + j - i));
                allowed = Some(binary(ctx, BinaryOp::LessOrEqual, nonpad, t)?);
            }
            if let Some(r) = right {
                let t =
                    ctx.constant_value("attention_band_right", table(q, kv, |i, j| j - i + qi - r));
                let ok = binary(ctx, BinaryOp::LessOrEqual, t, nonpad)?;
                allowed = Some(match allowed {
                    Some(a) => binary(ctx, BinaryOp::And, a, ok)?,
                    None => ok,
                });
            }
            Ok(allowed)
        }
    }
}

fn and(
    ctx: &mut NodeCtx,
    acc: Option<ValueId>,
    v: Option<ValueId>,
) -> ImportResult<Option<ValueId>> {
    Ok(match (acc, v) {
        (Some(a), Some(b)) => Some(binary(ctx, BinaryOp::And, a, b)?),
        (a, b) => a.or(b),
    })
}

pub fn attention(ctx: &mut NodeCtx) -> ImportResult {
    let (q_ty, k_ty, v_ty) = (ctx.input_ty(0)?, ctx.input_ty(1)?, ctx.input_ty(2)?);
    let dtype = q_ty.dtype;
    if !dtype.is_float() {
        return Err(ImportError::Unsupported(format!(
            "Attention on {dtype} tensors"
        )));
    }
    if k_ty.dtype != dtype || v_ty.dtype != dtype {
        return Err("Q, K and V must have the same element type".into());
    }
    let rank = q_ty.rank();
    if !(rank == 3 || rank == 4) || k_ty.rank() != rank || v_ty.rank() != rank {
        return Err(
            format!("Q, K and V must all be 3-D or all 4-D, not {q_ty}, {k_ty}, {v_ty}").into(),
        );
    }
    let a = &ctx.attrs;
    let scale = a.float_opt("scale")?;
    let is_causal = a.flag("is_causal", false)?;
    let q_heads_attr = a.int_opt("q_num_heads")?;
    let kv_heads_attr = a.int_opt("kv_num_heads")?;
    let softmax_precision = match a.int_opt("softmax_precision")? {
        Some(code) => Some(
            DType::from_onnx(code as i32)
                .filter(|d| d.is_float())
                .ok_or_else(|| format!("softmax_precision {code} is not a float type"))?,
        ),
        None => None,
    };
    let softcap = a.float("softcap", 0.0)?;
    let mode = a.int("qk_matmul_output_mode", 0)?;
    if !(0..=QK_MATMUL_OUTPUT_AFTER_SOFTMAX).contains(&mode) {
        return Err(format!("qk_matmul_output_mode must be 0..3, not {mode}").into());
    }
    let window = |name| -> ImportResult<Option<i64>> {
        match a.int(name, -1)? {
            -1 => Ok(None),
            // A window past any sequence length masks nothing more: capped so that
            // position arithmetic cannot overflow.
            w if w >= 0 => Ok(Some(w.min(1 << 40))),
            w => Err(format!("{name} must be -1 or non-negative, not {w}").into()),
        }
    };
    let (left_window, right_window) = (window("left_window_size")?, window("right_window_size")?);

    // Q, K, V as [B, H, S, D].
    let (mut q, mut k, mut v) = (ctx.required(0)?, ctx.required(1)?, ctx.required(2)?);
    if rank == 3 {
        let to_usize = |h: Option<i64>, name: &str| -> ImportResult<usize> {
            let h = h.ok_or_else(|| format!("3-D inputs need the attribute '{name}'"))?;
            usize::try_from(h).map_err(|_| format!("{name} must be positive, not {h}").into())
        };
        let (qh, kvh) = (
            to_usize(q_heads_attr, "q_num_heads")?,
            to_usize(kv_heads_attr, "kv_num_heads")?,
        );
        q = split_heads(ctx, q, qh, "Q")?;
        k = split_heads(ctx, k, kvh, "K")?;
        v = split_heads(ctx, v, kvh, "V")?;
    } else {
        for (attr, dim, name) in [
            (q_heads_attr, q_ty.shape[1], "q_num_heads"),
            (kv_heads_attr, k_ty.shape[1], "kv_num_heads"),
        ] {
            if attr.is_some_and(|h| h != dim as i64) {
                return Err(format!(
                    "{name} = {} contradicts the 4-D input's {dim} heads",
                    attr.unwrap_or_default()
                )
                .into());
            }
        }
    }
    let [batch, q_heads, q_len, head_size] = ctx.ty(q).shape[..] else {
        unreachable!("4-D")
    };

    // The KV cache.
    let past = match (ctx.input(4), ctx.input(5)) {
        (Some(pk), Some(pv)) => Some((pk, pv)),
        (None, None) => None,
        _ => return Err("past_key and past_value must be given together".into()),
    };
    let nonpad = ctx.input(6);
    if nonpad.is_some() && past.is_some() {
        return Err("nonpad_kv_seqlen cannot be combined with past_key/past_value".into());
    }
    let past_len = past.map_or(0, |(pk, _)| ctx.ty(pk).shape.get(2).copied().unwrap_or(0));
    if let Some((pk, pv)) = past {
        k = ctx.emit1(Op::Concat { axis: 2 }, vec![Some(pk), Some(k)])?;
        v = ctx.emit1(Op::Concat { axis: 2 }, vec![Some(pv), Some(v)])?;
    }
    for (i, cache) in [(1, k), (2, v)] {
        if ctx.node.output.get(i).is_some_and(|o| !o.is_empty()) {
            // A 4-D input passed through is copied: a graph output must be its own value.
            let cache = if past.is_none() && rank == 4 {
                ctx.emit1(Op::Unary(UnaryOp::Identity), vec![Some(cache)])?
            } else {
                cache
            };
            ctx.bind_output(i, cache);
        }
    }
    let kv_len = ctx.ty(k).shape[2];
    let (kv_heads, v_heads) = (ctx.ty(k).shape[1], ctx.ty(v).shape[1]);
    // Grouped-query attention: query heads h·r .. h·r + r − 1 share KV head h.
    let group =
        if q_heads != kv_heads && kv_heads > 0 && q_heads % kv_heads == 0 && kv_heads == v_heads {
            q_heads / kv_heads
        } else if q_heads == kv_heads && kv_heads == v_heads {
            1
        } else {
            return Err(format!(
                "{q_heads} query heads cannot attend {kv_heads} key and {v_heads} value heads"
            )
            .into());
        };

    // qk = (Q·s) @ (K·s)ᵀ, s = sqrt(scale) in Q's type.
    let scale = scale.map_or(1.0 / (head_size as f64).sqrt(), f64::from);
    let s = scale.sqrt();
    if scalar_of(dtype, s).to_f64_vec()[0] != 1.0 {
        let sv = scalar(ctx, "attention_scale", dtype, s);
        q = binary(ctx, BinaryOp::Mul, q, sv)?;
        k = binary(ctx, BinaryOp::Mul, k, sv)?;
    }
    let kt = ctx.emit1(
        Op::Transpose {
            perm: vec![0, 1, 3, 2],
        },
        vec![Some(k)],
    )?;
    let q = reshape(ctx, q, vec![batch, kv_heads, group * q_len, head_size])?;
    let qk = ctx.emit1(Op::matmul(), vec![Some(q), Some(kt)])?;
    let mut qk = reshape(ctx, qk, vec![batch, q_heads, q_len, kv_len])?;
    if softcap > 0.0 {
        let c = scalar(ctx, "attention_softcap", dtype, softcap as f64);
        let x = binary(ctx, BinaryOp::Div, qk, c)?;
        let x = ctx.emit1(Op::Unary(UnaryOp::Tanh), vec![Some(x)])?;
        qk = binary(ctx, BinaryOp::Mul, x, c)?;
    }

    // The additive bias: a float mask, plus −inf wherever a bool constraint forbids.
    let mut float_bias = None;
    let mut allowed = None;
    if let Some(mask) = ctx.input(3) {
        let mt = ctx.ty(mask).clone();
        let last = *mt.shape.last().ok_or("attn_mask must have rank ≥ 1")?;
        if last > kv_len {
            return Err(
                format!("attn_mask covers {last} keys, more than the {kv_len} there are").into(),
            );
        }
        let is_bool = mt.dtype == DType::Bool;
        if !is_bool && !mt.dtype.is_float() {
            return Err(format!("attn_mask must be bool or float, not {}", mt.dtype).into());
        }
        let mut m = mask;
        if !is_bool && mt.dtype != dtype {
            m = ctx.emit1(Op::Cast { to: dtype }, vec![Some(m)])?;
        }
        // A mask shorter than the keys leaves the rest masked.
        if last < kv_len {
            let mut shape = mt.shape.clone();
            shape[mt.rank() - 1] = kv_len - last;
            let n = shape.iter().product();
            let fill = if is_bool {
                Tensor::from_vec(&shape, vec![false; n])
            } else {
                Tensor::from_vec(&shape, vec![f64::NEG_INFINITY; n]).cast(dtype)
            };
            let fill = ctx.constant_value("attn_mask_pad", fill);
            m = ctx.emit1(
                Op::Concat {
                    axis: mt.rank() - 1,
                },
                vec![Some(m), Some(fill)],
            )?;
        }
        if is_bool {
            allowed = Some(m);
        } else {
            float_bias = Some(m);
        }
    }
    // Causal and window masks align the query block bottom-right: its first query sits
    // after the past keys, or (external cache) `nonpad_kv_seqlen[b] − q` keys in.
    let nonpad_b = match nonpad {
        Some(n) => {
            let nt = ctx.ty(n).clone();
            if !nt.dtype.is_int() || nt.numel() != batch {
                return Err(
                    format!("nonpad_kv_seqlen must hold {batch} integers, not {nt}").into(),
                );
            }
            let n = if nt.dtype == DType::I64 {
                n
            } else {
                ctx.emit1(Op::Cast { to: DType::I64 }, vec![Some(n)])?
            };
            Some(reshape(ctx, n, vec![batch, 1, 1, 1])?)
        }
        None => None,
    };
    let offset = match nonpad_b {
        Some(n) => Offset::PerBatch(n),
        None => Offset::Scalar(past_len as i64),
    };
    if is_causal {
        let causal = band(ctx, &offset, q_len, kv_len, None, Some(0))?;
        allowed = and(ctx, allowed, causal)?;
    }
    if left_window.is_some() || right_window.is_some() {
        let win = band(ctx, &offset, q_len, kv_len, left_window, right_window)?;
        allowed = and(ctx, allowed, win)?;
    }
    if let Some(n) = nonpad_b {
        // Keys at or past nonpad_kv_seqlen[b] are padding.
        let keys = Tensor::from_vec(&[kv_len], (0..kv_len as i64).collect::<Vec<i64>>());
        let keys = ctx.constant_value("attention_keys", keys);
        let valid = binary(ctx, BinaryOp::Less, keys, n)?;
        allowed = and(ctx, allowed, Some(valid))?;
    }
    // Masked scores are −inf (a select: no bias tensor to add); a row with no attendable
    // key, judged on the mask alone as the reference does, gets probabilities 0.
    let neg_inf = scalar(ctx, "neg_inf", dtype, f64::NEG_INFINITY);
    let mut with_bias = qk;
    if let Some(f) = float_bias {
        with_bias = binary(ctx, BinaryOp::Add, with_bias, f)?;
    }
    if let Some(ok) = allowed {
        with_bias = ctx.emit1(Op::Where, vec![Some(ok), Some(with_bias), Some(neg_inf)])?;
    }
    let bias = match allowed {
        Some(ok) => {
            let zero = scalar(ctx, "zero", dtype, 0.0);
            let b = ctx.emit1(Op::Where, vec![Some(ok), Some(zero), Some(neg_inf)])?;
            Some(match float_bias {
                Some(f) => binary(ctx, BinaryOp::Add, f, b)?,
                None => b,
            })
        }
        None => float_bias,
    };
    let empty_rows = match bias {
        Some(b) => {
            let rank = ctx.ty(b).rank();
            let max = ctx.emit1(
                Op::Reduce(ReduceAttrs {
                    kind: ReduceKind::Max,
                    axes: vec![rank - 1],
                    keepdims: true,
                }),
                vec![Some(b)],
            )?;
            let empty = ctx.emit1(
                Op::Unary(UnaryOp::IsInf {
                    positive: false,
                    negative: true,
                }),
                vec![Some(max)],
            )?;
            let never = ctx
                .constant(empty)
                .is_some_and(|t| t.to_i64_vec().iter().all(|&e| e == 0));
            (!never).then_some(empty)
        }
        None => None,
    };

    // Softmax in softmax_precision.
    let sm_type = softmax_precision.unwrap_or(dtype);
    let mut p = if sm_type != dtype {
        ctx.emit1(Op::Cast { to: sm_type }, vec![Some(with_bias)])?
    } else {
        with_bias
    };
    p = ctx.emit1(
        Op::Softmax {
            axis: 3,
            log: false,
        },
        vec![Some(p)],
    )?;
    if let Some(empty) = empty_rows {
        let zero = scalar(ctx, "zero", sm_type, 0.0);
        p = ctx.emit1(Op::Where, vec![Some(empty), Some(zero), Some(p)])?;
    }
    if ctx.node.output.get(3).is_some_and(|o| !o.is_empty()) {
        // The reference returns the softcapped product for modes 0 and 1 alike.
        let out = match mode {
            QK_MATMUL_OUTPUT_AFTER_SOFTMAX => p,
            QK_MATMUL_OUTPUT_WITH_BIAS => with_bias,
            _ => qk,
        };
        let out = if ctx.ty(out).dtype != dtype {
            ctx.emit1(Op::Cast { to: dtype }, vec![Some(out)])?
        } else {
            out
        };
        ctx.bind_output(3, out);
    }
    if sm_type != dtype {
        p = ctx.emit1(Op::Cast { to: dtype }, vec![Some(p)])?;
    }

    // Y = p @ V.
    let dv = ctx.ty(v).shape[3];
    let p = reshape(ctx, p, vec![batch, kv_heads, group * q_len, kv_len])?;
    let y = ctx.emit1(Op::matmul(), vec![Some(p), Some(v)])?;
    let mut y = reshape(ctx, y, vec![batch, q_heads, q_len, dv])?;
    if rank == 3 {
        y = ctx.emit1(
            Op::Transpose {
                perm: vec![0, 2, 1, 3],
            },
            vec![Some(y)],
        )?;
        y = reshape(ctx, y, vec![batch, q_len, q_heads * dv])?;
    }
    ctx.bind_output(0, y);
    Ok(())
}

/// FlexAttention (`ai.onnx.preview`): scaled dot-product attention whose scores and
/// probabilities pass through optional subgraphs (`score_mod`, `prob_mod`), imported
/// inline on the `[B, Hq, Sq, Skv]` tensors. Computed in float32 (float64 inputs in
/// float64, the `softmax_precision` default); grouped K/V heads are repeated.
pub fn flex_attention(ctx: &mut NodeCtx) -> ImportResult {
    let (q, k, v) = (ctx.required(0)?, ctx.required(1)?, ctx.required(2)?);
    let (qt, kt, vt) = (ctx.ty(q).clone(), ctx.ty(k).clone(), ctx.ty(v).clone());
    let (&[b, hq, _, d], &[kb, hkv, skv, kd], &[vb, vh, vs, dv]) =
        (&qt.shape[..], &kt.shape[..], &vt.shape[..])
    else {
        return Err("Q, K and V must be rank 4".into());
    };
    if (kb, vb, vh, vs, kd) != (b, b, hkv, skv, d) || hkv == 0 || hq % hkv != 0 {
        return Err(format!(
            "Q {:?}, K {:?}, V {:?} do not fit (batch, heads, sequence, size) with q heads a multiple of kv heads",
            qt.shape, kt.shape, vt.shape
        )
        .into());
    }
    let work = match ctx.attrs.int_opt("softmax_precision")? {
        Some(code) => DType::from_onnx(code as i32)
            .filter(|d| d.is_float())
            .ok_or_else(|| format!("softmax_precision {code} is not a float type"))?,
        None if qt.dtype == DType::F64 => DType::F64,
        None => DType::F32,
    };
    let to_work = |ctx: &mut NodeCtx, x: ValueId| -> ImportResult<ValueId> {
        if ctx.ty(x).dtype == work {
            Ok(x)
        } else {
            ctx.emit1(Op::Cast { to: work }, vec![Some(x)])
        }
    };
    let group = hq / hkv;
    let repeat_heads =
        |ctx: &mut NodeCtx, x: ValueId, s: usize, size: usize| -> ImportResult<ValueId> {
            if group == 1 {
                return Ok(x);
            }
            let x = ctx.emit1(
                Op::Reshape {
                    shape: vec![b, hkv, 1, s, size],
                },
                vec![Some(x)],
            )?;
            let x = ctx.emit1(
                Op::Expand {
                    shape: vec![b, hkv, group, s, size],
                },
                vec![Some(x)],
            )?;
            ctx.emit1(
                Op::Reshape {
                    shape: vec![b, hq, s, size],
                },
                vec![Some(x)],
            )
        };
    let qw = to_work(ctx, q)?;
    let kw = to_work(ctx, k)?;
    let kw = repeat_heads(ctx, kw, skv, d)?;
    let vw = to_work(ctx, v)?;
    let vw = repeat_heads(ctx, vw, skv, dv)?;
    let kt_ = ctx.emit1(
        Op::Transpose {
            perm: vec![0, 1, 3, 2],
        },
        vec![Some(kw)],
    )?;
    let mut scores = ctx.emit1(Op::matmul(), vec![Some(qw), Some(kt_)])?;
    let scale = match ctx.attrs.float_opt("scale")? {
        Some(s) => s as f64,
        None => 1.0 / (d as f64).sqrt(),
    };
    let scale = ctx.constant_value("scale", Tensor::scalar(scale).cast(work));
    scores = ctx.emit1(Op::Binary(BinaryOp::Mul), vec![Some(scores), Some(scale)])?;
    if let Some(g) = ctx.attrs.graph_opt("score_mod")? {
        scores = single_output(ctx.import_subgraph(g, "score_mod", &[scores])?, "score_mod")?;
    }
    let mut probs = ctx.emit1(
        Op::Softmax {
            axis: 3,
            log: false,
        },
        vec![Some(scores)],
    )?;
    if let Some(g) = ctx.attrs.graph_opt("prob_mod")? {
        probs = single_output(ctx.import_subgraph(g, "prob_mod", &[probs])?, "prob_mod")?;
    }
    let mut y = ctx.emit1(Op::matmul(), vec![Some(probs), Some(vw)])?;
    if qt.dtype != work {
        y = ctx.emit1(Op::Cast { to: qt.dtype }, vec![Some(y)])?;
    }
    ctx.bind_output(0, y);
    Ok(())
}

fn single_output(outputs: Vec<ValueId>, what: &str) -> ImportResult<ValueId> {
    match outputs[..] {
        [v] => Ok(v),
        _ => Err(format!("{what} must have one output, has {}", outputs.len()).into()),
    }
}
