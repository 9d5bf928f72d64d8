//! Affine folding: a constant per-channel (Conv) or per-column (Gemm, MatMul) `Mul`,
//! `Div`, `Add` or `Sub` applied to the op's result is folded into its weights and
//! bias. BatchNormalization, which import turns into `Mul(scale) → Add(shift)` with
//! `[C,1,1]`-shaped constants, disappears into the Conv before it; `MatMul → Add(bias)`
//! becomes one MatMul with a bias input (a GEMM epilogue addend).
//!
//! Only float32, only when the op's result has no other reader, and only ops without a
//! fused residual or activation (those come later, in [`super::fuse_epilogue`]). A
//! scaling needs constant weights (and a constant bias); a shift only a constant bias
//! or none. The folded constants are new values: weights shared with other nodes are
//! not touched.

use super::{dce, util};
use crate::ir::{DType, Graph, ValueId};
use crate::ops::{Activation, BinaryOp, Op};

pub fn run(g: &mut Graph) -> Result<(), String> {
    while fold_one(g) {}
    dce::run(g)
}

/// The affine map found after a node: `y·scale` or `y + shift`, per channel.
enum Affine {
    Scale(Vec<f32>),
    Shift(Vec<f32>),
}

/// Finds and applies one fold; false when there is none left.
fn fold_one(g: &mut Graph) -> bool {
    let uses = util::use_counts(g);
    let consumers = util::consumers(g);
    for i in 0..g.nodes.len() {
        let n = &g.nodes[i];
        let Some(axis) = channel_axis(g, i) else {
            continue;
        };
        let y = n.outputs[0];
        if uses[y.0] != 1 || util::is_output(g, y) || consumers[y.0].len() != 1 {
            continue;
        }
        let j = consumers[y.0][0];
        let Some(affine) = affine_after(g, j, y, axis) else {
            continue;
        };
        if apply(g, i, &affine) {
            let out = g.nodes[j].outputs[0];
            g.nodes[i].outputs[0] = out;
            g.nodes.remove(j);
            return true;
        }
    }
    false
}

/// The output axis channels run along, for a float32 Conv / Gemm / MatMul without a
/// fused epilogue.
fn channel_axis(g: &Graph, i: usize) -> Option<usize> {
    let n = &g.nodes[i];
    if n.inputs.get(3).copied().flatten().is_some()
        || n.op.activation() != Activation::None
        || g.ty(n.outputs[0]).dtype != DType::F32
    {
        return None;
    }
    let rank = g.ty(n.outputs[0]).rank();
    match &n.op {
        Op::Conv(_) => Some(1),
        Op::Gemm(_) => Some(1),
        Op::MatMul(_) if g.ty(n.inputs[1]?).rank() >= 2 && rank >= 1 => Some(rank - 1),
        _ => None,
    }
}

/// Node `j` as an affine map of `y` with a constant per-channel operand.
fn affine_after(g: &Graph, j: usize, y: ValueId, axis: usize) -> Option<Affine> {
    let n = &g.nodes[j];
    let Op::Binary(op) = n.op else { return None };
    let (a, b) = (n.inputs.first().copied()??, n.inputs.get(1).copied()??);
    let (other, y_first) = if a == y && b != y {
        (b, true)
    } else if b == y && a != y {
        (a, false)
    } else {
        return None;
    };
    if g.ty(n.outputs[0]) != g.ty(y) {
        return None;
    }
    let out = g.ty(y);
    let shape = &g.ty(other).shape;
    if !util::varies_along(shape, out.rank(), axis) {
        return None;
    }
    let c = out.shape[axis];
    let values = util::const_f32(g, other)?;
    let per_channel = if values.len() == 1 {
        vec![values[0]; c]
    } else if values.len() == c {
        values
    } else {
        return None;
    };
    match op {
        BinaryOp::Mul => Some(Affine::Scale(per_channel)),
        BinaryOp::Add => Some(Affine::Shift(per_channel)),
        BinaryOp::Div if y_first => {
            Some(Affine::Scale(per_channel.iter().map(|s| 1.0 / s).collect()))
        }
        BinaryOp::Sub if y_first => Some(Affine::Shift(per_channel.iter().map(|t| -t).collect())),
        _ => None,
    }
}

/// Rewrites node `i`'s constants; false (graph untouched) when they are not constant.
fn apply(g: &mut Graph, i: usize, affine: &Affine) -> bool {
    let n = g.nodes[i].clone();
    let c = match affine {
        Affine::Scale(v) | Affine::Shift(v) => v.len(),
    };
    // The bias slot: Conv B / MatMul bias, both [C]; Gemm C per column (or absent).
    let bias_slot = 2;
    let bias_value = n.inputs.get(bias_slot).copied().flatten();
    let bias: Option<Vec<f32>> = match (&n.op, bias_value) {
        (_, None) => None,
        (Op::Gemm(ga), Some(v)) => {
            let Some(vals) = util::const_f32(g, v) else {
                return false;
            };
            let shape = &g.ty(v).shape;
            if !util::varies_along(shape, 2, 1) || (vals.len() != 1 && vals.len() != c) {
                return false;
            }
            let beta = if ga.beta == 0.0 { 0.0 } else { ga.beta };
            Some(
                (0..c)
                    .map(|j| beta * vals[if vals.len() == 1 { 0 } else { j }])
                    .collect(),
            )
        }
        (_, Some(v)) => match util::const_f32(g, v) {
            Some(vals) if vals.len() == c => Some(vals),
            _ => return false,
        },
    };
    let mut new = n.clone();
    let new_bias = match affine {
        Affine::Scale(s) => {
            let Some(w) = n.inputs[1] else { return false };
            let Some(wv) = util::const_f32(g, w) else {
                return false;
            };
            let wshape = g.ty(w).shape.clone();
            let scaled: Vec<f32> = match &n.op {
                // W [C_out, ...]: rows.
                Op::Conv(_) => {
                    let per = wv.len() / c;
                    wv.iter().enumerate().map(|(k, x)| x * s[k / per]).collect()
                }
                Op::Gemm(ga) if ga.trans_b => {
                    let per = wv.len() / c;
                    wv.iter().enumerate().map(|(k, x)| x * s[k / per]).collect()
                }
                // B [K, N]: columns.
                _ => wv.iter().enumerate().map(|(k, x)| x * s[k % c]).collect(),
            };
            let name = util::fresh_name(g, &g.value(w).name.clone());
            new.inputs[1] = Some(util::add_const_f32(g, name, wshape, scaled));
            bias.map(|b| b.iter().zip(s).map(|(b, s)| b * s).collect::<Vec<f32>>())
        }
        Affine::Shift(t) => Some(match bias {
            Some(b) => b.iter().zip(t).map(|(b, t)| b + t).collect(),
            None => t.clone(),
        }),
    };
    if let Some(b) = new_bias {
        let base = match bias_value {
            Some(v) => g.value(v).name.clone(),
            None => format!("{}_bias", n.name),
        };
        let name = util::fresh_name(g, &base);
        let v = util::add_const_f32(g, name, vec![c], b);
        while new.inputs.len() <= bias_slot {
            new.inputs.push(None);
        }
        new.inputs[bias_slot] = Some(v);
        if let Op::Gemm(ga) = &mut new.op {
            ga.beta = 1.0;
        }
    }
    g.nodes[i] = new;
    true
}
