//! Transposes that need no data movement:
//! * a Transpose that only moves axes of size 1 (its other axes keep their order) is a
//!   Reshape, which the memory plan makes a view of its input
//!   (`[1,197,256] → [197,1,256]` in exported attention blocks);
//! * a 2-D Transpose read by a Gemm becomes the Gemm's `transA` / `transB` (the GEMM
//!   reads A through strides; a constant B is repacked at compile time either way).
//!
//! Reshape, Flatten, Squeeze and Unsqueeze are already views (see `codegen::plan`).

use super::{dce, util};
use crate::ir::Graph;
use crate::ops::Op;

pub fn run(g: &mut Graph) -> Result<(), String> {
    for i in 0..g.nodes.len() {
        let Op::Transpose { perm } = &g.nodes[i].op else {
            continue;
        };
        let Some(x) = g.nodes[i].inputs[0] else {
            continue;
        };
        let shape = &g.ty(x).shape;
        let moved: Vec<usize> = perm.iter().copied().filter(|&p| shape[p] != 1).collect();
        if moved.windows(2).all(|w| w[0] < w[1]) {
            let out = g.ty(g.nodes[i].outputs[0]).shape.clone();
            g.nodes[i].op = Op::Reshape { shape: out };
        }
    }
    let prod = util::producers(g);
    for j in 0..g.nodes.len() {
        if !matches!(g.nodes[j].op, Op::Gemm(_)) {
            continue;
        }
        for slot in 0..2 {
            let Some(v) = g.nodes[j].inputs[slot] else {
                continue;
            };
            let Some(t) = prod[v.0] else { continue };
            if g.nodes[t].op != (Op::Transpose { perm: vec![1, 0] }) {
                continue;
            }
            let Some(src) = g.nodes[t].inputs[0] else {
                continue;
            };
            let node = &mut g.nodes[j];
            node.inputs[slot] = Some(src);
            if let Op::Gemm(ga) = &mut node.op {
                if slot == 0 {
                    ga.trans_a = !ga.trans_a;
                } else {
                    ga.trans_b = !ga.trans_b;
                }
            }
        }
    }
    dce::run(g)
}
