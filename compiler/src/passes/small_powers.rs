//! Small integer powers: a float `Pow(x, 2)`, `Pow(x, 3)` or `Pow(x, 4)` with a
//! constant exponent becomes multiplications (`x·x`; `(x·x)·x`; `(x·x)·(x·x)`), which
//! fuse and vectorize like any Mul; the general power goes through exp and log per
//! element. RMSNorm's `Pow(x, 2)` (T5, LLaMA) and the tanh GELU's `Pow(x, 3)` are the
//! ones exporters write. `x·x` is exactly `pow(x, 2)` (one rounding); the cube and
//! fourth power are within an ulp of it, with the same infinities, NaNs and signed
//! zeros.

use super::util;
use crate::ir::{DType, Graph, Node};
use crate::ops::{BinaryOp, Op};

pub fn run(g: &mut Graph) -> Result<(), String> {
    let mut i = 0;
    while i < g.nodes.len() {
        i += 1 + usize::from(rewrite(g, i));
    }
    Ok(())
}

/// Rewrites node `i` when it is a small power; returns whether a node was inserted
/// before it.
fn rewrite(g: &mut Graph, i: usize) -> bool {
    let n = &g.nodes[i];
    if n.op != Op::Binary(BinaryOp::Pow) {
        return false;
    }
    let (Some(x), Some(k)) = (n.inputs[0], n.inputs.get(1).copied().flatten()) else {
        return false;
    };
    let ty = g.ty(x).clone();
    if !matches!(ty.dtype, DType::F32 | DType::F64 | DType::F16) || g.ty(n.outputs[0]) != &ty {
        return false;
    }
    // The exponent's one element, whatever its type.
    let Some(k) = g
        .constant(k)
        .filter(|t| t.len() == 1)
        .map(|t| t.to_f64_vec()[0])
    else {
        return false;
    };
    let node_name = n.name.clone();
    let square = |g: &mut Graph| -> crate::ir::ValueId {
        let value = util::fresh_name(g, &format!("{}_squared", g.values[x.0].name));
        let sq = g.add_value(value, ty.clone(), None);
        g.nodes.insert(
            i,
            Node {
                // Diagnostics name the ONNX node it came from.
                name: format!("{node_name}/square"),
                onnx_op: "Pow".into(),
                op: Op::Binary(BinaryOp::Mul),
                inputs: vec![Some(x), Some(x)],
                outputs: vec![sq],
            },
        );
        sq
    };
    let (inputs, inserted) = match k {
        2.0 => ([x, x], false),
        3.0 => ([square(g), x], true),
        4.0 => {
            let sq = square(g);
            ([sq, sq], true)
        }
        _ => return false,
    };
    let n = &mut g.nodes[i + usize::from(inserted)];
    n.op = Op::Binary(BinaryOp::Mul);
    n.inputs = inputs.iter().map(|&v| Some(v)).collect();
    inserted
}
