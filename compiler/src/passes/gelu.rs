//! GELU recognition: the forms exporters write out become one `Gelu` (which
//! [`super::fuse_epilogue`] may then fold into a GEMM).
//!
//! * The erf form `x·0.5·(1 + Erf(x/√2))`: `x/1.4142…` or `x·0.7071…` into the Erf.
//!   Only where the Gelu will fuse: `x` comes from a float32 Conv/Gemm/MatMul without
//!   an activation and the pattern is all that reads it. A standalone `Gelu` would cost
//!   more than the pattern: its lowering (`math::gelu_erf`) also evaluates erfc for an
//!   accurate negative tail, while the fused epilogue computes the pattern's formula.
//! * The tanh form `x·0.5·(1 + Tanh(√(2/π)·(x + 0.044715·Pow(x, 3))))` (GPT-2's
//!   `gelu_new`, T5's gated GELU), everywhere: `Gelu { tanh }` computes it as x·σ(2u),
//!   cheaper than the pattern's seven nodes (its Pow alone was half of T5's time).
//!
//! `Erf + 1` / `Tanh + 1` either way round, the products in any association:
//! `(x·p)·0.5`, `(x·0.5)·p`, `x·(p·0.5)`, operands of each Mul and Add in either order.
//! Every intermediate must have no other reader.

use super::{dce, util};
use crate::ir::{Graph, ValueId};
use crate::ops::{BinaryOp, Op, UnaryOp};

pub fn run(g: &mut Graph) -> Result<(), String> {
    while rewrite_one(g) {}
    dce::run(g)
}

fn near(x: f32, want: f32) -> bool {
    (x - want).abs() <= 1e-3 * want.abs()
}

/// Node `i` is `Binary(op)` of a non-constant value and a one-element constant:
/// returns them (`Div`/`Sub` only with the constant second).
fn with_scalar(g: &Graph, i: usize, op: BinaryOp) -> Option<(ValueId, f32)> {
    let n = &g.nodes[i];
    if n.op != Op::Binary(op) {
        return None;
    }
    let (a, b) = (n.inputs.first().copied()??, n.inputs.get(1).copied()??);
    if let Some(c) = util::scalar_f32(g, b) {
        return Some((a, c));
    }
    let commutes = matches!(op, BinaryOp::Mul | BinaryOp::Add);
    match util::scalar_f32(g, a) {
        Some(c) if commutes => Some((b, c)),
        _ => None,
    }
}

/// Node `i` is `Mul(a, b)` of two values; returns the operand that is not `x`, if one is.
fn mul_with(g: &Graph, i: usize, x: ValueId) -> Option<ValueId> {
    let n = &g.nodes[i];
    if n.op != Op::Binary(BinaryOp::Mul) {
        return None;
    }
    let (a, b) = (n.inputs.first().copied()??, n.inputs.get(1).copied()??);
    if a == x {
        Some(b)
    } else if b == x {
        Some(a)
    } else {
        None
    }
}

/// `x` comes from an op the Gelu can fuse into, and only the pattern's `readers` nodes
/// read it.
fn fuses(g: &Graph, prod: &[Option<usize>], uses: &[usize], x: ValueId, readers: usize) -> bool {
    let Some(i) = prod[x.0] else { return false };
    let n = &g.nodes[i];
    matches!(n.op, Op::Conv(_) | Op::Gemm(_) | Op::MatMul(_))
        && n.op.activation() == crate::ops::Activation::None
        && g.ty(x).dtype == crate::ir::DType::F32
        && uses[x.0] == readers
}

fn rewrite_one(g: &mut Graph) -> bool {
    let uses = util::use_counts(g);
    let cons = util::consumers(g);
    let prod = util::producers(g);
    // The single reader of `v`, when `v` is not a graph output.
    let only = |v: ValueId| -> Option<usize> {
        (uses[v.0] == 1 && cons[v.0].len() == 1).then(|| cons[v.0][0])
    };
    for e in 0..g.nodes.len() {
        let (x, tanh) = match g.nodes[e].op {
            Op::Unary(UnaryOp::Erf) => match erf_argument(g, &prod, &only, e) {
                Some(x) if fuses(g, &prod, &uses, x, 2) => (x, false),
                _ => continue,
            },
            Op::Unary(UnaryOp::Tanh) => match tanh_argument(g, &prod, &only, e) {
                Some(x) => (x, true),
                None => continue,
            },
            _ => continue,
        };
        let Some(last) = half_x_times_one_plus(g, &prod, &only, e, x) else {
            continue;
        };
        let node = &mut g.nodes[last];
        node.op = Op::Unary(UnaryOp::Gelu { tanh });
        node.inputs = vec![Some(x)];
        return true;
    }
    false
}

/// The `x` of Erf node `e`'s argument `x/√2` (or `x·(1/√2)`), read only by the Erf.
fn erf_argument(
    g: &Graph,
    prod: &[Option<usize>],
    only: &dyn Fn(ValueId) -> Option<usize>,
    e: usize,
) -> Option<ValueId> {
    let d = g.nodes[e].inputs[0]?;
    let dn = prod[d.0]?;
    let x = match (
        with_scalar(g, dn, BinaryOp::Div),
        with_scalar(g, dn, BinaryOp::Mul),
    ) {
        (Some((x, c)), _) if near(c, std::f32::consts::SQRT_2) => x,
        (_, Some((x, c))) if near(c, std::f32::consts::FRAC_1_SQRT_2) => x,
        _ => return None,
    };
    (only(d) == Some(e)).then_some(x)
}

/// The `x` of Tanh node `e`'s argument `√(2/π)·(x + 0.044715·x³)` (`x³` as
/// `Pow(x, 3)`, each Mul and Add either way round), every intermediate read only by the
/// pattern: the tanh form of GELU (`gelu_new` of GPT-2, T5's gated GELU). It becomes a
/// `Gelu { tanh }` whether or not it then fuses: the op (x·σ(2u)) is cheaper than the
/// pattern.
fn tanh_argument(
    g: &Graph,
    prod: &[Option<usize>],
    only: &dyn Fn(ValueId) -> Option<usize>,
    e: usize,
) -> Option<ValueId> {
    let u = g.nodes[e].inputs[0]?;
    let un = prod[u.0]?;
    let (s, c1) = with_scalar(g, un, BinaryOp::Mul)?;
    if !near(c1, (2.0 / std::f32::consts::PI).sqrt()) || only(u) != Some(e) {
        return None;
    }
    let sn = prod[s.0]?;
    if g.nodes[sn].op != Op::Binary(BinaryOp::Add) || only(s) != Some(un) {
        return None;
    }
    let (a, b) = (g.nodes[sn].inputs[0]?, g.nodes[sn].inputs.get(1).copied()??);
    // One addend is x, the other 0.044715·x³.
    let cubic_of = |m: ValueId| -> Option<ValueId> {
        let mn = prod[m.0]?;
        let (p, c3) = with_scalar(g, mn, BinaryOp::Mul)?;
        if !near(c3, 0.044715) || only(m) != Some(sn) {
            return None;
        }
        let pn = prod[p.0]?;
        let (x, k) = with_scalar(g, pn, BinaryOp::Pow)?;
        (k == 3.0 && only(p) == Some(mn)).then_some(x)
    };
    let x = match (cubic_of(b), cubic_of(a)) {
        (Some(x), _) if x == a => x,
        (_, Some(x)) if x == b => x,
        _ => return None,
    };
    (g.ty(x).dtype == crate::ir::DType::F32).then_some(x)
}

/// The node computing `x·0.5·(1 + f)` from node `e`'s output f (`f + 1` either way
/// round, the products in any association: `(x·p)·0.5`, `(x·0.5)·p`, `x·(p·0.5)`),
/// every intermediate read only by the pattern.
fn half_x_times_one_plus(
    g: &Graph,
    prod: &[Option<usize>],
    only: &dyn Fn(ValueId) -> Option<usize>,
    e: usize,
    x: ValueId,
) -> Option<usize> {
    let f = g.nodes[e].outputs[0];
    let pn = only(f)?;
    match with_scalar(g, pn, BinaryOp::Add) {
        Some((v, c)) if v == f && c == 1.0 => {}
        _ => return None,
    }
    let p = g.nodes[pn].outputs[0];
    let m1 = only(p)?;
    let m1_out = g.nodes[m1].outputs[0];
    if mul_with(g, m1, p) == Some(x) {
        // (x·p)·0.5
        let m2 = only(m1_out)?;
        with_scalar(g, m2, BinaryOp::Mul)
            .is_some_and(|(v, c)| v == m1_out && c == 0.5)
            .then_some(m2)
    } else if let Some((v, c)) = with_scalar(g, m1, BinaryOp::Mul) {
        // x·(p·0.5)
        if v != p || c != 0.5 {
            return None;
        }
        let m2 = only(m1_out)?;
        (mul_with(g, m2, m1_out) == Some(x)).then_some(m2)
    } else {
        // (x·0.5)·p
        let h = mul_with(g, m1, p)?;
        let hn = prod[h.0]?;
        match with_scalar(g, hn, BinaryOp::Mul) {
            Some((v, c)) if v == x && c == 0.5 && only(h) == Some(m1) => Some(m1),
            _ => None,
        }
    }
}
