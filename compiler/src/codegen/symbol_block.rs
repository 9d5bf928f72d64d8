//! The symbols' values while a graph with symbolic shapes runs: one `i64` per symbol
//! in a block at the end of the workspace arena. The entry points fill it (`run` from
//! `options->dims`, each checked against its range; `infer` with the maxima), the node
//! sequence checks the graph's facts about extents ([`crate::ir::dim::DimCheck`])
//! before any node runs, and every symbolic node computes its extents from it.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, Block, InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;

use super::dim_values::DimEmitter;
use super::kernel::flags;
use super::plan::MemoryPlan;
use crate::ir::{Dim, Graph, SymbolId, TensorType};

pub(super) struct SymbolBlock {
    /// Bytes into the workspace.
    pub offset: usize,
    /// Each symbol's range, in the order of `nnc_run_options.dims`.
    pub ranges: Vec<(i64, i64)>,
}

impl SymbolBlock {
    /// Reserves the block after the planned arena (`None`: the graph has no symbols).
    pub fn reserve(graph: &Graph, plan: &mut MemoryPlan) -> Option<SymbolBlock> {
        if graph.symbols.is_empty() {
            return None;
        }
        let offset = plan.arena_size.next_multiple_of(8);
        plan.arena_size = offset + 8 * graph.symbols.len();
        let ranges = graph.symbols.iter().map(|(_, s)| (s.min, s.max)).collect();
        Some(SymbolBlock { offset, ranges })
    }

    /// The block's address in the workspace `ws`.
    pub fn address(&self, b: &mut FunctionBuilder, ws: Value) -> Value {
        b.ins().iadd_imm_s(ws, self.offset as i64)
    }

    /// Stores symbol `i`'s value `v`.
    pub fn store(&self, b: &mut FunctionBuilder, ws: Value, i: usize, v: Value) {
        b.ins().store(flags(), v, ws, (self.offset + 8 * i) as i32);
    }

    /// Stores every symbol's maximum, unless `ws` is NULL (which the node sequence
    /// then reports).
    pub fn store_maxima(&self, b: &mut FunctionBuilder, ws: Value) {
        let (write, join) = (b.create_block(), b.create_block());
        let null = b.ins().icmp_imm_u(IntCC::Equal, ws, 0);
        b.ins().brif(null, join, &[], write, &[]);
        b.seal_block(write);
        b.switch_to_block(write);
        for (i, &(_, max)) in self.ranges.iter().enumerate() {
            let v = b.ins().iconst(types::I64, max);
            self.store(b, ws, i, v);
        }
        b.ins().jump(join, &[]);
        b.seal_block(join);
        b.switch_to_block(join);
    }

    /// The symbols' values, loaded from the block.
    pub fn load(&self, b: &mut FunctionBuilder, ws: Value) -> Vec<Value> {
        (0..self.ranges.len())
            .map(|i| {
                b.ins()
                    .load(types::I64, flags(), ws, (self.offset + 8 * i) as i32)
            })
            .collect()
    }
}

/// Evaluates expressions at the symbols' values `values` (loaded once).
pub(super) struct Evaluator<'v> {
    pub values: &'v [Value],
    /// Raised where a divisor fell below 1 (the facts then fail).
    pub bad_divisor: Option<Value>,
}

impl Evaluator<'_> {
    pub fn emit(&mut self, b: &mut FunctionBuilder, d: &Dim) -> Value {
        let values = self.values;
        let mut read = |_: &mut FunctionBuilder, s: SymbolId| values[s.0 as usize];
        let mut e = DimEmitter::new(&mut read);
        let v = e.emit(b, d);
        if let Some(flag) = e.bad_divisor {
            self.bad_divisor = Some(match self.bad_divisor {
                None => flag,
                Some(f) => b.ins().bor(f, flag),
            });
        }
        v
    }

    /// The bytes of a value of type `ty` at these values.
    pub fn bytes(&mut self, b: &mut FunctionBuilder, ty: &TensorType) -> Value {
        let Some(dims) = &ty.dims else {
            return b.ins().iconst(types::I64, ty.byte_size() as i64);
        };
        let mut n = b.ins().iconst(types::I64, ty.dtype.size() as i64);
        for d in dims {
            let e = self.emit(b, d);
            let zero = b.ins().iconst(types::I64, 0);
            let e = b.ins().smax(e, zero);
            n = b.ins().imul(n, e);
        }
        n
    }
}

/// Jumps to `fail` unless every fact of `graph.dim_checks` holds at `values`.
pub(super) fn emit_checks(b: &mut FunctionBuilder, graph: &Graph, values: &[Value], fail: Block) {
    if graph.dim_checks.is_empty() {
        return;
    }
    let mut ev = Evaluator {
        values,
        bad_divisor: None,
    };
    let mut bad: Option<Value> = None;
    for c in &graph.dim_checks {
        let v = ev.emit(b, &c.expr);
        let broken = if c.zero {
            b.ins().icmp_imm_s(IntCC::NotEqual, v, 0)
        } else {
            b.ins().icmp_imm_s(IntCC::SignedLessThan, v, 0)
        };
        bad = Some(match bad {
            None => broken,
            Some(x) => b.ins().bor(x, broken),
        });
    }
    if let Some(f) = ev.bad_divisor {
        bad = Some(match bad {
            None => f,
            Some(x) => b.ins().bor(x, f),
        });
    }
    if let Some(bad) = bad {
        let ok = b.create_block();
        b.ins().brif(bad, fail, &[], ok, &[]);
        b.seal_block(ok);
        b.switch_to_block(ok);
    }
}
