//! Shapes whose extents are known at compile time or computed by the run from the
//! model's dims (see [`crate::ir::dim`]). A value with a symbolic axis is laid out
//! densely at the run's extents inside a buffer planned for their maxima, so its
//! strides are products of extents too. Lowerings of symbolic nodes build their loops
//! over [`Ext`]s: a fixed extent gives the same constant loop a static shape would, a
//! run-time one a loop whose bound is an `i64` value computed once at the node's start.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;

use crate::codegen::kernel;
use crate::ir::{Dim, TensorType};

/// One extent: a constant, or an `i64` the run computed (never negative where a
/// check guards it; loops over a negative one run zero times).
#[derive(Clone, Copy, Debug)]
pub enum Ext {
    Fixed(usize),
    Run(Value),
}

impl Ext {
    pub fn fixed(self) -> Option<usize> {
        match self {
            Ext::Fixed(n) => Some(n),
            Ext::Run(_) => None,
        }
    }

    pub fn is_fixed(self, n: usize) -> bool {
        self.fixed() == Some(n)
    }

    /// The extent as an `i64` value.
    pub fn value(self, b: &mut FunctionBuilder) -> Value {
        match self {
            Ext::Fixed(n) => b.ins().iconst(types::I64, n as i64),
            Ext::Run(v) => v,
        }
    }

    pub fn mul(self, b: &mut FunctionBuilder, o: Ext) -> Ext {
        match (self, o) {
            (Ext::Fixed(x), Ext::Fixed(y)) => Ext::Fixed(x * y),
            (Ext::Fixed(1), e) | (e, Ext::Fixed(1)) => e,
            (Ext::Fixed(k), Ext::Run(v)) | (Ext::Run(v), Ext::Fixed(k)) => {
                Ext::Run(b.ins().imul_imm_s(v, k as i64))
            }
            (Ext::Run(x), Ext::Run(y)) => Ext::Run(b.ins().imul(x, y)),
        }
    }

    pub fn scale(self, b: &mut FunctionBuilder, k: usize) -> Ext {
        self.mul(b, Ext::Fixed(k))
    }

    pub fn add(self, b: &mut FunctionBuilder, o: Ext) -> Ext {
        match (self, o) {
            (Ext::Fixed(x), Ext::Fixed(y)) => Ext::Fixed(x + y),
            (Ext::Fixed(0), e) | (e, Ext::Fixed(0)) => e,
            (Ext::Fixed(k), Ext::Run(v)) | (Ext::Run(v), Ext::Fixed(k)) => {
                Ext::Run(b.ins().iadd_imm_s(v, k as i64))
            }
            (Ext::Run(x), Ext::Run(y)) => Ext::Run(b.ins().iadd(x, y)),
        }
    }

    /// The product of `exts` (1 for none).
    pub fn product(b: &mut FunctionBuilder, exts: &[Ext]) -> Ext {
        exts.iter().fold(Ext::Fixed(1), |acc, &e| acc.mul(b, e))
    }

    /// `index · self` as an `i64` value (`index` an `i64`).
    pub fn times(self, b: &mut FunctionBuilder, index: Value) -> Value {
        match self {
            Ext::Fixed(1) => index,
            Ext::Fixed(k) => b.ins().imul_imm_s(index, k as i64),
            Ext::Run(v) => b.ins().imul(index, v),
        }
    }
}

/// Row-major element strides of `shape`.
pub fn strides(b: &mut FunctionBuilder, shape: &[Ext]) -> Vec<Ext> {
    let mut s = vec![Ext::Fixed(1); shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1].mul(b, shape[i + 1]);
    }
    s
}

/// `Σ idx[i] · strides[i]` (elements); 0 for none.
pub fn offset(b: &mut FunctionBuilder, idx: &[Value], strides: &[Ext]) -> Value {
    let mut acc: Option<Value> = None;
    for (&i, &s) in idx.iter().zip(strides) {
        if s.is_fixed(0) {
            continue;
        }
        let t = s.times(b, i);
        acc = Some(match acc {
            None => t,
            Some(a) => b.ins().iadd(a, t),
        });
    }
    acc.unwrap_or_else(|| kernel::iconst(b, 0))
}

/// `for i in 0..n { body(i) }`: a constant loop for a fixed extent, else one tested at
/// the top (nothing runs for `n ≤ 0`).
pub fn run_loop(b: &mut FunctionBuilder, n: Ext, body: impl FnMut(&mut FunctionBuilder, Value)) {
    match n {
        Ext::Fixed(n) => kernel::counted_loop(b, 0, n as i64, 1, body),
        Ext::Run(v) => kernel::dynamic_loop(b, v, body),
    }
}

/// `for i in (start..end).step_by(step)` with run-time or fixed bounds.
pub fn run_loop_from(
    b: &mut FunctionBuilder,
    start: Ext,
    end: Ext,
    step: usize,
    mut body: impl FnMut(&mut FunctionBuilder, Value),
) {
    if let (Ext::Fixed(s), Ext::Fixed(e)) = (start, end) {
        kernel::counted_loop(b, s as i64, e as i64, step as i64, body);
        return;
    }
    let (s, e) = (start.value(b), end.value(b));
    let header = b.create_block();
    b.append_block_param(header, types::I64);
    let (body_block, exit) = (b.create_block(), b.create_block());
    b.ins()
        .jump(header, &[cranelift_codegen::ir::BlockArg::Value(s)]);
    b.switch_to_block(header);
    let i = b.block_params(header)[0];
    let more = b.ins().icmp(IntCC::SignedLessThan, i, e);
    b.ins().brif(more, body_block, &[], exit, &[]);
    b.switch_to_block(body_block);
    b.seal_block(body_block);
    body(b, i);
    let next = b.ins().iadd_imm_s(i, step as i64);
    b.ins()
        .jump(header, &[cranelift_codegen::ir::BlockArg::Value(next)]);
    b.seal_block(header);
    b.switch_to_block(exit);
    b.seal_block(exit);
}

/// Loops over every index of `shape`, outermost first.
pub fn nested_run_loop(
    b: &mut FunctionBuilder,
    shape: &[Ext],
    body: &mut dyn FnMut(&mut FunctionBuilder, &[Value]),
) {
    fn rec(
        b: &mut FunctionBuilder,
        shape: &[Ext],
        idx: &mut Vec<Value>,
        body: &mut dyn FnMut(&mut FunctionBuilder, &[Value]),
    ) {
        let depth = idx.len();
        if depth == shape.len() {
            body(b, idx);
            return;
        }
        run_loop(b, shape[depth], |b, i| {
            idx.push(i);
            rec(b, shape, idx, body);
            idx.pop();
        });
    }
    if shape.iter().any(|e| e.is_fixed(0)) {
        return;
    }
    rec(b, shape, &mut vec![], body);
}

/// The symbols' values in a node function, loaded once at its entry (so every later
/// block may use them), with their names for refusals.
#[derive(Clone)]
pub struct RunDims {
    pub values: Vec<Value>,
    pub names: Vec<String>,
}

impl RunDims {
    /// Loads the `n` symbols' `i64` values from `block` (the workspace's dims block).
    pub fn load(b: &mut FunctionBuilder, block: Value, names: Vec<String>) -> RunDims {
        let values = (0..names.len())
            .map(|i| {
                b.ins()
                    .load(types::I64, kernel::flags(), block, (i * 8) as i32)
            })
            .collect();
        RunDims { values, names }
    }

    /// `d` at the run's dims.
    pub fn extent(&self, b: &mut FunctionBuilder, d: &Dim) -> Ext {
        if let Some(c) = d.as_const() {
            return Ext::Fixed(c.max(0) as usize);
        }
        let mut ev = crate::codegen::symbol_block::Evaluator {
            values: &self.values,
            bad_divisor: None,
        };
        Ext::Run(ev.emit(b, d))
    }

    /// Every axis of a value of type `ty` at the run's dims.
    pub fn shape(&self, b: &mut FunctionBuilder, ty: &TensorType) -> Vec<Ext> {
        match &ty.dims {
            None => ty.shape.iter().map(|&n| Ext::Fixed(n)).collect(),
            Some(dims) => dims.iter().map(|d| self.extent(b, d)).collect(),
        }
    }

    /// `d` written with the symbols' names.
    pub fn written(&self, d: &Dim) -> String {
        d.written(&|s| self.names[s.0 as usize].clone())
    }
}
