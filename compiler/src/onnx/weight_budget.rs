//! `--max-weight-bytes`: the total size of a model's weights (initializers, external
//! data, `Constant` nodes), charged as each tensor is declared, before its bytes are
//! read or copied, so a hostile model is refused instead of exhausting memory.

use std::cell::Cell;

use super::proto::TensorProto;
use super::tensor_proto::declared_byte_size;
use crate::limits::ByteSize;

/// A `Cell` so op importers, which read attributes through shared borrows, can charge.
pub struct WeightBudget {
    limit: u64,
    used: Cell<u64>,
}

impl WeightBudget {
    pub fn new(limit: u64) -> Self {
        WeightBudget {
            limit,
            used: Cell::new(0),
        }
    }

    /// Adds `t`'s declared size; an error once the total passes the limit. A tensor
    /// whose size cannot be computed is left to decoding, which refuses it.
    pub fn charge(&self, t: &TensorProto) -> Result<(), String> {
        let Some(bytes) = declared_byte_size(t) else {
            return Ok(());
        };
        let used = self.used.get().saturating_add(bytes);
        self.used.set(used);
        if used > self.limit {
            return Err(format!(
                "tensor '{}' ({bytes} bytes) brings the model's weights to {} bytes, more than the limit of {} (raise it with --max-weight-bytes)",
                t.name,
                used,
                ByteSize(self.limit)
            ));
        }
        Ok(())
    }
}
