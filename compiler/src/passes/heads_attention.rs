//! Multi-head attention as exporters write it, with its head split and merge, becomes
//! one [`Op::HeadsAttention`] reading Q, K and V `[..., S, H·d]` in place:
//!
//! ```text
//! Qh = Transpose(Reshape(Q, [..., S, H, d]), [.., H, S, d])
//! Kt = Transpose(Reshape(K, [..., T, H, d]), [.., H, d, T])   (or two Transposes)
//! Vh = Transpose(Reshape(V, [..., T, H, dv]), [.., H, T, dv])
//! Y  = Reshape(Transpose(MatMul(Softmax(MatMul(Qh, Kt) [·/÷ c] [+ mask]), Vh),
//!              [.., S, H, dv]), [..., S, H·dv])
//! ```
//!
//! A scalar may also multiply Qh and Kt (√scale on each, as exported
//! `scaled_dot_product_attention` writes it). The mask must be one row per head
//! (broadcast over the queries, as padding masks are). Run where a sequence's length is known only at run time
//! ([`crate::dims::row_extent`]): the transposed `[.., H, S, d]` values would put
//! that length behind the head axis, where rows of a run-time count are not
//! contiguous; the fused op reads the rows as they are.

use super::{dce, util};
use crate::ir::{DType, Graph, ValueId};
use crate::ops::{infer, Activation, BinaryOp, Op};

pub fn run(g: &mut Graph) -> Result<(), String> {
    while fuse_one(g) {}
    dce::run(g)
}

fn fuse_one(g: &mut Graph) -> bool {
    let producers = util::producers(g);
    let uses = util::use_counts(g);
    for i in 0..g.nodes.len() {
        if let Some((op, inputs)) = match_heads_attention(g, i, &producers, &uses) {
            let node = &mut g.nodes[i];
            node.op = op;
            node.inputs = inputs;
            return true;
        }
    }
    false
}

/// The fused op and its inputs `[Q, K, V, mask?]` when node `i` is the head merge
/// ending such an attention.
fn match_heads_attention(
    g: &Graph,
    i: usize,
    producers: &[Option<usize>],
    uses: &[usize],
) -> Option<(Op, Vec<Option<ValueId>>)> {
    let private = |v: ValueId| uses[v.0] == 1 && !util::is_output(g, v);
    // The producer of `v` when `v` is read only by its consumer.
    let from = |v: ValueId| producers[v.0].filter(|_| private(v));
    let input = |n: usize, k: usize| g.nodes[n].inputs.get(k).copied().flatten();
    let plain_matmul = |n: usize| {
        matches!(&g.nodes[n].op, Op::MatMul(m) if m.activation == Activation::None)
            && g.nodes[n].inputs.len() == 2
    };

    let Op::Reshape { shape: merged } = &g.nodes[i].op else {
        return None;
    };
    let r = merged.len();
    if r < 2 {
        return None;
    }
    let p = r - 2;
    let lead: Vec<usize> = (0..p).collect();
    let perm = |tail: [usize; 3]| -> Vec<usize> { lead.iter().copied().chain(tail).collect() };
    let heads_first = perm([p + 1, p, p + 2]);
    let keys_last = perm([p + 1, p + 2, p]);
    let swap_last = perm([p, p + 2, p + 1]);
    // `Transpose(v)` with `perm`: its input.
    let transposed = |v: ValueId, want: &[usize]| -> Option<ValueId> {
        let n = from(v)?;
        match &g.nodes[n].op {
            Op::Transpose { perm } if perm == want => input(n, 0),
            _ => None,
        }
    };
    // `Reshape(x, [..., L, heads, w])` splitting x's last axis: x.
    let split = |v: ValueId| -> Option<(ValueId, usize)> {
        let n = from(v)?;
        let Op::Reshape { shape } = &g.nodes[n].op else {
            return None;
        };
        let x = input(n, 0)?;
        let xs = &g.ty(x).shape;
        (xs.len() == r && shape.len() == r + 1 && shape[..r - 1] == xs[..r - 1]).then_some(())?;
        (shape[r - 1] * shape[r] == xs[r - 1]).then_some((x, shape[r - 1]))
    };

    let merged_in = input(i, 0)?;
    let o = transposed(merged_in, &heads_first)?;
    let pv = from(o)?;
    if !plain_matmul(pv) {
        return None;
    }
    let (probs, vh) = (input(pv, 0)?, input(pv, 1)?);
    let softmax = from(probs)?;
    if g.nodes[softmax].op
        != (Op::Softmax {
            axis: r,
            log: false,
        })
    {
        return None;
    }
    // `[causal mask of] [c ·|÷] MatMul(Qh, Kt)`: Qh, Kt, the scale and whether it is
    // masked causally.
    let scores = |x: ValueId| -> Option<(ValueId, ValueId, f32, bool)> {
        let mut n = from(x)?;
        let causal = causally_masked(g, n);
        if let Some(inner) = causal {
            n = from(inner)?;
        }
        let mut scale = 1.0f32;
        if let Op::Binary(op @ (BinaryOp::Mul | BinaryOp::Div)) = g.nodes[n].op {
            let c = util::scalar_f32(g, input(n, 1)?)?;
            scale = if op == BinaryOp::Mul { c } else { 1.0 / c };
            n = from(input(n, 0)?)?;
        }
        plain_matmul(n).then_some((input(n, 0)?, input(n, 1)?, scale, causal.is_some()))
    };
    let s = input(softmax, 0)?;
    let ((qh, kt, scale, causal), mask) = match scores(s) {
        Some(found) => (found, None),
        None => {
            let add = from(s)?;
            if g.nodes[add].op != Op::Binary(BinaryOp::Add) {
                return None;
            }
            let (a, b) = (input(add, 0)?, input(add, 1)?);
            match (scores(a), scores(b)) {
                (Some(found), _) => (found, Some(b)),
                (None, Some(found)) => (found, Some(a)),
                _ => return None,
            }
        }
    };
    // A scalar on Q or Kᵀ (√scale on each, as scaled_dot_product_attention exports).
    let scaled = |v: ValueId| -> (ValueId, f32) {
        let on = |n: usize| -> Option<(ValueId, f32)> {
            if g.nodes[n].op != Op::Binary(BinaryOp::Mul) {
                return None;
            }
            let (a, b) = (input(n, 0)?, input(n, 1)?);
            match (util::scalar_f32(g, b), util::scalar_f32(g, a)) {
                (Some(c), _) => Some((a, c)),
                (None, Some(c)) => Some((b, c)),
                _ => None,
            }
        };
        from(v).and_then(on).unwrap_or((v, 1.0))
    };
    let ((qh, q_scale), (kt, k_scale)) = (scaled(qh), scaled(kt));
    let scale = scale * q_scale * k_scale;
    // Kᵀ in one Transpose, or the heads moved first and then the last two axes swapped.
    let k_heads_first = transposed(kt, &keys_last)
        .or_else(|| transposed(transposed(kt, &swap_last)?, &heads_first))?;
    let (q, heads) = split(transposed(qh, &heads_first)?)?;
    let (k, k_heads) = split(k_heads_first)?;
    let (v, v_heads) = split(transposed(vh, &heads_first)?)?;
    if k_heads != heads || v_heads != heads {
        return None;
    }
    let f32s = [Some(q), Some(k), Some(v), mask]
        .iter()
        .flatten()
        .all(|&x| g.ty(x).dtype == DType::F32);
    // One mask row per head: broadcast over the queries.
    let one_row = mask.is_none_or(|m| {
        let ms = &g.ty(m).shape;
        ms.len() < 2 || ms[ms.len() - 2] == 1
    });
    if !f32s || !one_row {
        return None;
    }
    let op = Op::HeadsAttention {
        heads,
        scale,
        causal,
    };
    let inputs = vec![Some(q), Some(k), Some(v), mask];
    let types: Vec<_> = inputs.iter().map(|x| x.map(|x| g.ty(x).clone())).collect();
    let out = infer::infer_types(&op, &types).ok()?;
    (out.first() == Some(g.ty(g.nodes[i].outputs[0]))).then_some(())?;
    let inputs = match mask {
        Some(_) => inputs,
        None => inputs[..3].to_vec(),
    };
    Some((op, inputs))
}

/// The scores node `n` masks causally, as decoders export it: `Where(tril, x, fill)`
/// with a constant lower-triangular condition and a fill of -10⁴ or less, or `x + m`
/// with a constant `m` of 0 on and below the diagonal and -10⁴ or less above it. `x`,
/// when it is.
fn causally_masked(g: &Graph, n: usize) -> Option<ValueId> {
    let node = &g.nodes[n];
    let input = |k: usize| node.inputs.get(k).copied().flatten();
    // `pick(i, j)`: whether constant `c`, `[..., S, S]` with unit leading axes, is
    // `below(i, j)` where `j ≤ i` and `above(i, j)` elsewhere.
    let triangular = |c: ValueId, below: &dyn Fn(f64) -> bool, above: &dyn Fn(f64) -> bool| {
        let t = g.constant(c)?;
        let shape = t.shape();
        let r = shape.len();
        let square =
            r >= 2 && shape[r - 1] == shape[r - 2] && shape[..r - 2].iter().all(|&d| d == 1);
        let s = shape.get(r.wrapping_sub(1)).copied()?;
        let values = t.to_f64_vec();
        let ok = square
            && values
                .iter()
                .enumerate()
                .all(|(x, &v)| match x % s <= x / s {
                    true => below(v),
                    false => above(v),
                });
        ok.then_some(())
    };
    let masking = |v: f64| v <= -1e4;
    match node.op {
        Op::Where => {
            let (c, x, fill) = (input(0)?, input(1)?, input(2)?);
            triangular(c, &|v| v != 0.0, &|v| v == 0.0)?;
            masking(f64::from(util::scalar_f32(g, fill)?)).then_some(x)
        }
        Op::Binary(BinaryOp::Add) => {
            let (a, b) = (input(0)?, input(1)?);
            let zero = |v: f64| v == 0.0;
            match (
                triangular(b, &zero, &masking),
                triangular(a, &zero, &masking),
            ) {
                (Some(()), _) => Some(a),
                (None, Some(())) => Some(b),
                _ => None,
            }
        }
        _ => None,
    }
}
