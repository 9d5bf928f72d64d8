//! GELU recognition: the erf form exporters write out, `x·0.5·(1 + Erf(x/√2))`, becomes
//! one `Gelu` (which [`super::fuse_epilogue`] may then fold into a GEMM). Accepted:
//! `x/1.4142…` or `x·0.7071…` into the Erf, `Erf + 1` either way round, and the
//! products in any association: `(x·p)·0.5`, `(x·0.5)·p`, `x·(p·0.5)`, where
//! `p = 1 + Erf(..)`, operands of each Mul in either order. Every intermediate must
//! have no other reader.
//!
//! Only where the Gelu will fuse: `x` comes from a float32 Conv/Gemm/MatMul without an
//! activation and the pattern is all that reads it. A standalone `Gelu` would cost
//! more than the pattern: its lowering (`math::gelu_erf`) also evaluates erfc for an
//! accurate negative tail, while the fused epilogue computes the pattern's formula.

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

/// `x` comes from an op the Gelu can fuse into, and only the pattern's two nodes read it.
fn fuses(g: &Graph, prod: &[Option<usize>], uses: &[usize], x: ValueId) -> bool {
    let Some(i) = prod[x.0] else { return false };
    let n = &g.nodes[i];
    matches!(n.op, Op::Conv(_) | Op::Gemm(_) | Op::MatMul(_))
        && n.op.activation() == crate::ops::Activation::None
        && g.ty(x).dtype == crate::ir::DType::F32
        && uses[x.0] == 2
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
        if g.nodes[e].op != Op::Unary(UnaryOp::Erf) {
            continue;
        }
        let Some(d) = g.nodes[e].inputs[0] else {
            continue;
        };
        let Some(dn) = prod[d.0] else { continue };
        let x = match (
            with_scalar(g, dn, BinaryOp::Div),
            with_scalar(g, dn, BinaryOp::Mul),
        ) {
            (Some((x, c)), _) if near(c, std::f32::consts::SQRT_2) => x,
            (_, Some((x, c))) if near(c, std::f32::consts::FRAC_1_SQRT_2) => x,
            _ => continue,
        };
        if only(d) != Some(e) || !fuses(g, &prod, &uses, x) {
            continue;
        }
        let erf = g.nodes[e].outputs[0];
        let Some(pn) = only(erf) else { continue };
        match with_scalar(g, pn, BinaryOp::Add) {
            Some((v, c)) if v == erf && c == 1.0 => {}
            _ => continue,
        }
        let p = g.nodes[pn].outputs[0];
        let Some(m1) = only(p) else { continue };
        let m1_out = g.nodes[m1].outputs[0];
        // The node computing the whole product.
        let last = if mul_with(g, m1, p) == Some(x) {
            // (x·p)·0.5
            match only(m1_out) {
                Some(m2)
                    if with_scalar(g, m2, BinaryOp::Mul)
                        .is_some_and(|(v, c)| v == m1_out && c == 0.5) =>
                {
                    m2
                }
                _ => continue,
            }
        } else if let Some((v, c)) = with_scalar(g, m1, BinaryOp::Mul) {
            // x·(p·0.5)
            if v != p || c != 0.5 {
                continue;
            }
            match only(m1_out) {
                Some(m2) if mul_with(g, m2, m1_out) == Some(x) => m2,
                _ => continue,
            }
        } else {
            // (x·0.5)·p
            let Some(h) = mul_with(g, m1, p) else {
                continue;
            };
            let Some(hn) = prod[h.0] else { continue };
            match with_scalar(g, hn, BinaryOp::Mul) {
                Some((v, c)) if v == x && c == 0.5 && only(h) == Some(m1) => m1,
                _ => continue,
            }
        };
        let node = &mut g.nodes[last];
        node.op = Op::Unary(UnaryOp::Gelu { tanh: false });
        node.inputs = vec![Some(x)];
        return true;
    }
    false
}
