//! The entry points of a graph with a row dim (see [`crate::dims::row_extent`]): the
//! node sequence reads the dim's value from its count in the workspace, which `run`
//! writes from `nnc_run_options.dims` (after checking its range) and
//! `infer_with_workspace` writes as the maximum, before the first node (see
//! `define_exported_infer_with_workspace`).

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;

use super::kernel::flags;
use super::plan::{MemoryPlan, Storage};
use super::Result;
use crate::ir::{ExtentExpr, Graph};

/// Where a row dim's value goes and its range.
pub(super) struct RowDimLayout {
    pub dim: usize,
    pub min: i64,
    pub max: i64,
    /// Bytes into the workspace of each count of the dim, with what it holds (the dim
    /// itself, or an extent computed from it).
    pub counts: Vec<(usize, ExtentExpr)>,
}

impl RowDimLayout {
    /// The graph's row dim (`None`: it has none).
    pub fn of(graph: &Graph, plan: &MemoryPlan) -> Result<Option<RowDimLayout>> {
        let Some(first) = graph.row_dims.first() else {
            return Ok(None);
        };
        let fail = |m: &str| crate::error::NncError::Codegen {
            context: "the row dim".into(),
            message: m.into(),
        };
        if graph.row_dims.iter().any(|d| d.dim != first.dim) {
            return Err(fail("only one row dim per graph so far"));
        }
        let mut counts = vec![];
        for d in &graph.row_dims {
            let Some(Storage::Arena(at)) = plan.storage[plan.root[d.count.0]] else {
                return Err(fail("its count has no place in the workspace"));
            };
            counts.push((at + plan.offset[d.count.0], d.size.clone()));
        }
        let range = &graph.dims[first.dim];
        Ok(Some(RowDimLayout {
            dim: first.dim,
            min: range.min as i64,
            max: range.max as i64,
            counts,
        }))
    }

    pub fn range(&self) -> (usize, i64, i64) {
        (self.dim, self.min, self.max)
    }

    /// Writes the counts for the dim's `value` in the workspace `ws`, unless `ws` is
    /// NULL (which the node sequence then reports).
    pub fn store(&self, b: &mut FunctionBuilder, ws: Value, value: Value) {
        let (write, join) = (b.create_block(), b.create_block());
        let null = b.ins().icmp_imm_u(IntCC::Equal, ws, 0);
        b.ins().brif(null, join, &[], write, &[]);
        b.seal_block(write);
        b.switch_to_block(write);
        for (offset, size) in &self.counts {
            let n = super::kernel::extent_value(b, value, size);
            b.ins().store(flags(), n, ws, *offset as i32);
        }
        b.ins().jump(join, &[]);
        b.seal_block(join);
        b.switch_to_block(join);
    }
}
