//! Kernel-plan step for tables read both as rows and as a GEMM's transposed weight.
//!
//! A language model with tied embeddings reads one [V, D] matrix `E` twice: as a table
//! (`Gather(E, ids)`) and as the output projection's weight `Eᵀ` (a Gemm with
//! `transB = 1` on `E`, or a MatMul on `Eᵀ`, which exporters and constant folding
//! write as a second initializer holding the transpose). The GEMM needs `Eᵀ` packed in
//! column panels; the Gather is planned to read its rows from those panels
//! ([`Strategy::GatherPackedColumns`]) so that only the packed form is stored.

use super::kernels::{KernelPlan, Strategy};
use crate::ir::{DType, Graph, Tensor, ValueId};
use crate::ops::Op;

/// Re-plans each float32 Gather of a constant [V, D] table along axis 0 whose table a
/// GEMM reads, transposed, as its constant B.
pub fn read_tables_from_gemm_panels(graph: &Graph, plan: &mut KernelPlan) {
    let gemms: Vec<(usize, ValueId, bool)> = graph
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(k, n)| {
            let trans_b = match &n.op {
                Op::Gemm(g) if !g.trans_a => g.trans_b,
                Op::MatMul(_) => false,
                _ => return None,
            };
            let b = n.inputs.get(1).copied().flatten()?;
            let packed = matches!(plan.nodes[k].strategy, Strategy::Gemm(_));
            let a_rank = graph.ty(n.inputs[0]?).rank();
            (packed && a_rank >= 2 && graph.ty(b).rank() == 2).then_some((k, b, trans_b))
        })
        .collect();
    if gemms.is_empty() {
        return;
    }
    for (k, node) in graph.nodes.iter().enumerate() {
        if !matches!(node.op, Op::Gather { axis: 0 }) || plan.nodes[k].strategy != Strategy::Clif {
            continue;
        }
        let Some(table) = node.inputs.first().copied().flatten() else {
            continue;
        };
        let ty = graph.ty(table);
        if ty.dtype != DType::F32 || ty.rank() != 2 {
            continue;
        }
        let Some(Tensor::F32(e)) = graph.constant(table) else {
            continue;
        };
        let found = gemms.iter().find(|&&(_, b, trans_b)| {
            if trans_b {
                b == table
            } else {
                // B = Eᵀ stored as its own constant: [D, V] equal to E transposed.
                match graph.constant(b) {
                    Some(Tensor::F32(bt)) => {
                        bt.shape() == [ty.shape[1], ty.shape[0]] && bt.t() == *e
                    }
                    _ => false,
                }
            }
        });
        if let Some(&(g, _, _)) = found {
            let Strategy::Gemm(geometry) = plan.nodes[g].strategy else {
                continue;
            };
            let whole_k = plan.nodes[g].weights_by_columns;
            let n = &mut plan.nodes[k];
            n.strategy = Strategy::GatherPackedColumns(geometry, whole_k);
            n.reason = format!(
                "the table is node '{}''s weight, transposed: rows read from its packed panels, stored once",
                graph.nodes[g].name
            );
        }
    }
}
