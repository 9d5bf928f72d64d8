//! Dimension expressions ([`crate::ir::dim`]) evaluated in generated code: what the
//! start of a run computes from the caller's dims before any node runs (the extents
//! of every value whose axes vary, the facts the run checks).
//!
//! Values are `i64`. Floor division rounds toward −∞ as [`Dim::eval`] does; a divisor
//! below 1 (a symbolic divisor the ranges do not keep positive) divides by 1 instead
//! and raises the returned flag, so the run can refuse the dims before anything reads
//! a wrong extent and no instruction traps.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;

use crate::ir::{Dim, DimAtom, SymbolId};

/// An evaluation in progress: how symbols are read, and whether a divisor fell
/// below 1.
pub struct DimEmitter<'a> {
    symbol: &'a mut dyn FnMut(&mut FunctionBuilder, SymbolId) -> Value,
    /// An `i8` that is nonzero when a divisor was below 1 (`None`: none can be).
    pub bad_divisor: Option<Value>,
}

impl<'a> DimEmitter<'a> {
    /// `symbol` emits the load of a symbol's value (an `i64`).
    pub fn new(symbol: &'a mut dyn FnMut(&mut FunctionBuilder, SymbolId) -> Value) -> Self {
        DimEmitter {
            symbol,
            bad_divisor: None,
        }
    }

    /// Emits `d`'s value.
    pub fn emit(&mut self, b: &mut FunctionBuilder, d: &Dim) -> Value {
        let mut sum: Option<Value> = None;
        for (coef, atoms) in d.terms() {
            let mut term: Option<Value> = None;
            for (atom, pow) in atoms {
                let v = self.atom(b, atom);
                for _ in 0..pow {
                    term = Some(match term {
                        None => v,
                        Some(t) => b.ins().imul(t, v),
                    });
                }
            }
            let term = match (term, coef) {
                (None, c) => b.ins().iconst(types::I64, c),
                (Some(t), 1) => t,
                (Some(t), c) => b.ins().imul_imm_s(t, c),
            };
            sum = Some(match sum {
                None => term,
                Some(s) => b.ins().iadd(s, term),
            });
        }
        sum.unwrap_or_else(|| b.ins().iconst(types::I64, 0))
    }

    fn atom(&mut self, b: &mut FunctionBuilder, atom: DimAtom) -> Value {
        match atom {
            DimAtom::Symbol(s) => (self.symbol)(b, s),
            DimAtom::FloorDiv(n, d) => {
                let n = self.emit(b, n);
                let d = match d.as_const() {
                    Some(c) if c >= 1 => b.ins().iconst(types::I64, c),
                    _ => {
                        let d = self.emit(b, d);
                        self.positive(b, d)
                    }
                };
                floor_div(b, n, d)
            }
            DimAtom::Min(args) | DimAtom::Max(args) => {
                let min = matches!(atom, DimAtom::Min(_));
                let mut acc: Option<Value> = None;
                for a in args {
                    let v = self.emit(b, a);
                    acc = Some(match (acc, min) {
                        (None, _) => v,
                        (Some(x), true) => b.ins().smin(x, v),
                        (Some(x), false) => b.ins().smax(x, v),
                    });
                }
                acc.expect("min and max have at least two arguments")
            }
        }
    }

    /// `d`, or 1 with the flag raised where `d < 1`.
    fn positive(&mut self, b: &mut FunctionBuilder, d: Value) -> Value {
        let below = b.ins().icmp_imm_s(IntCC::SignedLessThan, d, 1);
        self.bad_divisor = Some(match self.bad_divisor {
            None => below,
            Some(f) => b.ins().bor(f, below),
        });
        let one = b.ins().iconst(types::I64, 1);
        b.ins().select(below, one, d)
    }
}

/// `⌊n / d⌋` for `d ≥ 1`: the truncating quotient, one less where a negative `n`
/// leaves a remainder.
fn floor_div(b: &mut FunctionBuilder, n: Value, d: Value) -> Value {
    let q = b.ins().sdiv(n, d);
    let back = b.ins().imul(q, d);
    let inexact_negative = b.ins().icmp(IntCC::SignedGreaterThan, back, n);
    let adjust = b.ins().uextend(types::I64, inexact_negative);
    b.ins().isub(q, adjust)
}
