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
use crate::ir::Graph;

/// Where a row dim's value goes and its range.
pub(super) struct RowDimLayout {
    pub dim: usize,
    pub min: i64,
    pub max: i64,
    /// Bytes into the workspace of its count.
    pub count_offset: usize,
}

impl RowDimLayout {
    /// The graph's row dim (`None`: it has none).
    pub fn of(graph: &Graph, plan: &MemoryPlan) -> Result<Option<RowDimLayout>> {
        let Some(d) = graph.row_dims.first() else {
            return Ok(None);
        };
        let fail = |m: &str| crate::error::NncError::Codegen {
            context: "the row dim".into(),
            message: m.into(),
        };
        if graph.row_dims.len() > 1 {
            return Err(fail("only one row dim per graph so far"));
        }
        let Some(Storage::Arena(at)) = plan.storage[plan.root[d.count.0]] else {
            return Err(fail("its count has no place in the workspace"));
        };
        let range = &graph.dims[d.dim];
        Ok(Some(RowDimLayout {
            dim: d.dim,
            min: range.min as i64,
            max: range.max as i64,
            count_offset: at + plan.offset[d.count.0],
        }))
    }

    pub fn range(&self) -> (usize, i64, i64) {
        (self.dim, self.min, self.max)
    }

    /// Writes `value` to the count in the workspace `ws`, unless `ws` is NULL (which the
    /// node sequence then reports).
    pub fn store(&self, b: &mut FunctionBuilder, ws: Value, value: Value) {
        let (write, join) = (b.create_block(), b.create_block());
        let null = b.ins().icmp_imm_u(IntCC::Equal, ws, 0);
        b.ins().brif(null, join, &[], write, &[]);
        b.seal_block(write);
        b.switch_to_block(write);
        b.ins().store(flags(), value, ws, self.count_offset as i32);
        b.ins().jump(join, &[]);
        b.seal_block(join);
        b.switch_to_block(join);
    }
}
