//! Softmax / LogSoftmax and LayerNormalization.
//!
//! Softmax views the input as `[outer, n, inner]` around its axis. With `inner == 1`
//! every row is contiguous and is processed with F32X4 along the row (maxima and sums
//! folded across lanes at the end); otherwise blocks of consecutive columns are
//! processed together, one lane per column, so no lane shuffling is needed. Three passes:
//! the maximum (NaN-propagating, so a NaN row stays NaN), `Σ exp(x − max)` (Softmax
//! keeps the exponentials in the output when its dtype holds them exactly, so the last
//! pass does not recompute them), then the normalization. LogSoftmax is
//! `(x − max) − ln Σ exp(x − max)`, finite where `ln(softmax)` would underflow.
//!
//! LayerNorm normalizes contiguous rows of `∏ shape[axis..]` elements: the mean, the
//! population variance around it (two passes, which keeps precision for rows with a
//! large mean), then `(x − mean) / sqrt(var + ε) · scale + bias`. scale and bias are
//! broadcast to X (numpy rules); the usual layouts (per-element rows, or one value) are
//! vectorized, any other broadcast is handled by a scalar loop over the row's axes.

use crate::codegen::plan::Strategy;
use cranelift_codegen::ir::{types, InstBuilder, Type, Value};
use cranelift_frontend::{FunctionBuilder, Variable};

use super::gemm;
use super::reduce::{self, fconst, for_blocks, for_chunks, load_vec, var, Elems, Step};
use super::{LowerCtx, LowerResult, Operand};
use crate::codegen::isa::Vector;
use crate::codegen::kernel::{self, flags};
use crate::codegen::kernels::x86;
use crate::codegen::math;
use crate::ir::DType;

/// A float element type as read by these kernels.
fn float_elems(dtype: DType, what: &str) -> Result<Elems, String> {
    if !dtype.is_float() {
        return Err(format!(
            "{what} is defined for float tensors only, not {dtype}"
        ));
    }
    Ok(Elems::new(dtype))
}

/// Loads `lanes` consecutive elements at `addr + offset` bytes: an F32X4 or a scalar.
fn load(b: &mut FunctionBuilder, e: Elems, ty: Type, addr: Value, offset: i64) -> Value {
    if ty.is_vector() {
        load_vec(b, addr, offset)
    } else {
        e.load(b, addr, offset)
    }
}

/// Stores an F32X4 or a scalar (converted to `dtype`) at `addr + offset` bytes.
fn store(b: &mut FunctionBuilder, dtype: DType, v: Value, addr: Value, offset: i64) {
    if b.func.dfg.value_type(v).is_vector() {
        b.ins().store(flags(), v, addr, offset as i32);
    } else {
        kernel::store_elem(b, dtype, v, addr, offset as i32);
    }
}

/// `v` splatted to F32X4 on the vector path (F32 values only); `v` itself otherwise,
/// where the vector form is never used.
fn splat_if(b: &mut FunctionBuilder, vector: bool, v: Value) -> Value {
    if vector {
        b.ins().splat(types::F32X4, v)
    } else {
        v
    }
}

/// Converts a float scalar to the float type `to` (f32 ↔ f64).
fn convert_float(b: &mut FunctionBuilder, v: Value, to: Type) -> Value {
    match (b.func.dfg.value_type(v), to) {
        (from, to) if from == to => v,
        (_, types::F64) => b.ins().fpromote(types::F64, v),
        _ => b.ins().fdemote(to, v),
    }
}

/// The scalar partial sum plus (on the vector path) the lanes of the vector one.
fn partial_sum(b: &mut FunctionBuilder, vector: bool, sum_v: Variable, sum: Variable) -> Value {
    let s = b.use_var(sum);
    if !vector {
        return s;
    }
    let v = b.use_var(sum_v);
    let h = reduce::horizontal(b, Step::Sum, v);
    b.ins().fadd(h, s)
}

/// Reads and writes `v` through a loop-carried variable.
fn update(
    b: &mut FunctionBuilder,
    v: Variable,
    f: impl FnOnce(&mut FunctionBuilder, Value) -> Value,
) {
    let cur = b.use_var(v);
    let next = f(b, cur);
    b.def_var(v, next);
}

// ---------------------------------------------------------------------------------------
// Softmax.

pub fn softmax(ctx: &mut LowerCtx, axis: usize, log: bool) -> LowerResult {
    let x = ctx.input(0)?;
    let y = ctx.output(0);
    let shape = &x.ty.shape;
    if axis >= shape.len() {
        return Err(format!(
            "axis {axis} is out of range for rank {}",
            shape.len()
        ));
    }
    let e = float_elems(x.ty.dtype, "Softmax")?;
    if x.ty.numel() == 0 {
        return Ok(());
    }
    let s = Softmax {
        e,
        log,
        n: shape[axis],
        inner: shape[axis + 1..].iter().product(),
        // The output holds the exponentials exactly only in the computation type.
        keep_exp: matches!(y.ty.dtype, DType::F32 | DType::F64),
    };
    let outer: usize = shape[..axis].iter().product();
    if let Strategy::Softmax(Some(isa)) = ctx.kernel.strategy {
        let code = x86::softmax::emit(outer, s.n, isa)?;
        let func = gemm::define_machine_code(ctx, 2, &code)?;
        ctx.b.ins().call(func, &[x.ptr, y.ptr]);
        return Ok(());
    }
    let row_bytes = s.n * s.inner * e.dtype.size();
    let b = &mut *ctx.b;
    kernel::counted_loop(b, 0, outer as i64, 1, |b, o| {
        let src = kernel::elem_addr(b, x.ptr, o, row_bytes);
        let dst = kernel::elem_addr(b, y.ptr, o, row_bytes);
        if s.inner == 1 {
            s.row(b, src, dst);
        } else {
            for_blocks(b, s.inner, e, &mut |b, c, ty, count| {
                let src = kernel::elem_addr(b, src, c, e.dtype.size());
                let dst = kernel::elem_addr(b, dst, c, e.dtype.size());
                s.columns(b, src, dst, ty, count);
            });
        }
    });
    Ok(())
}

/// Softmax in place over a block of contiguous float32 rows (attention's scores): the
/// x86 machine-code rows, or Cranelift's.
pub(super) enum SoftmaxRows {
    MachineCode(cranelift_codegen::ir::FuncRef),
    Clif { rows: usize, n: usize },
}

impl SoftmaxRows {
    /// The rows code for `rows` rows of `n` floats.
    pub(super) fn define(
        ctx: &mut LowerCtx,
        isa: Option<Vector>,
        rows: usize,
        n: usize,
    ) -> Result<SoftmaxRows, String> {
        Ok(match isa {
            Some(isa) => {
                let code = x86::softmax::emit(rows, n, isa)?;
                SoftmaxRows::MachineCode(gemm::define_machine_code(ctx, 2, &code)?)
            }
            None => SoftmaxRows::Clif { rows, n },
        })
    }

    /// Emits the softmax of the rows at `ptr`, written back in place.
    pub(super) fn call(&self, b: &mut FunctionBuilder, ptr: Value) {
        match *self {
            SoftmaxRows::MachineCode(func) => {
                b.ins().call(func, &[ptr, ptr]);
            }
            SoftmaxRows::Clif { rows, n } => {
                let s = Softmax {
                    e: Elems::new(DType::F32),
                    log: false,
                    n,
                    inner: 1,
                    keep_exp: true,
                };
                kernel::counted_loop(b, 0, rows as i64, 1, |b, r| {
                    let row = kernel::elem_addr(b, ptr, r, n * 4);
                    s.row(b, row, row);
                });
            }
        }
    }
}

struct Softmax {
    e: Elems,
    log: bool,
    /// The softmax axis' length and the elements after it.
    n: usize,
    inner: usize,
    keep_exp: bool,
}

impl Softmax {
    /// One contiguous row of `n` elements.
    fn row(&self, b: &mut FunctionBuilder, src: Value, dst: Value) {
        let e = self.e;
        let size = e.dtype.size();
        let vector = e.vector && self.n >= 4;
        let max = reduce::run_pass(b, e, Step::Max, src, &[], self.n, None);
        let max_v = splat_if(b, vector, max);
        let pick = |ty: Type| if ty.is_vector() { max_v } else { max };
        // Σ exp(x − max), with a vector and a scalar partial sum.
        let zero_v = fconst(b, types::F32X4, 0.0);
        let zero = fconst(b, e.acc, 0.0);
        let (sum_v, sum) = (var(b, zero_v), var(b, zero));
        for_chunks(b, self.n, vector, e.acc, &mut |b, i, ty| {
            let off = b.ins().imul_imm_s(i, size as i64);
            let (s, d) = (b.ins().iadd(src, off), b.ins().iadd(dst, off));
            let v = load(b, e, ty, s, 0);
            let shifted = b.ins().fsub(v, pick(ty));
            let ex = math::exp_nonpositive(b, shifted);
            if self.keep_exp && !self.log {
                store(b, e.dtype, ex, d, 0);
            }
            update(b, if ty.is_vector() { sum_v } else { sum }, |b, acc| {
                b.ins().fadd(acc, ex)
            });
        });
        let total = partial_sum(b, vector, sum_v, sum);
        let factor = self.factor(b, total);
        let factor_v = splat_if(b, vector, factor);
        for_chunks(b, self.n, vector, e.acc, &mut |b, i, ty| {
            let off = b.ins().imul_imm_s(i, size as i64);
            let (s, d) = (b.ins().iadd(src, off), b.ins().iadd(dst, off));
            let (m, f) = if ty.is_vector() {
                (max_v, factor_v)
            } else {
                (max, factor)
            };
            let r = self.normalize(b, ty, s, d, m, f);
            store(b, e.dtype, r, d, 0);
        });
    }

    /// `count` accumulators of `ty`, each covering its lanes of consecutive columns, at
    /// stride `inner` along the axis.
    fn columns(&self, b: &mut FunctionBuilder, src: Value, dst: Value, ty: Type, count: usize) {
        let e = self.e;
        let size = e.dtype.size();
        let lanes = ty.lane_count() as usize;
        let step_bytes = (self.inner * size) as i64;
        let neg_inf = fconst(b, ty, f64::NEG_INFINITY);
        let zero = fconst(b, ty, 0.0);
        let maxes: Vec<Variable> = (0..count).map(|_| var(b, neg_inf)).collect();
        let sums: Vec<Variable> = (0..count).map(|_| var(b, zero)).collect();
        let along =
            |b: &mut FunctionBuilder,
             body: &mut dyn FnMut(&mut FunctionBuilder, Value, Value, usize)| {
                kernel::counted_loop(b, 0, self.n as i64, 1, |b, j| {
                    let off = b.ins().imul_imm_s(j, step_bytes);
                    let (s, d) = (b.ins().iadd(src, off), b.ins().iadd(dst, off));
                    for k in 0..count {
                        body(b, s, d, k);
                    }
                });
            };
        let offset = |k: usize| (k * lanes * size) as i64;
        along(b, &mut |b, s, _, k| {
            let v = load(b, e, ty, s, offset(k));
            update(b, maxes[k], |b, m| b.ins().fmax(m, v));
        });
        let max: Vec<Value> = maxes.iter().map(|m| b.use_var(*m)).collect();
        along(b, &mut |b, s, d, k| {
            let v = load(b, e, ty, s, offset(k));
            let shifted = b.ins().fsub(v, max[k]);
            let ex = math::exp_nonpositive(b, shifted);
            if self.keep_exp && !self.log {
                store(b, e.dtype, ex, d, offset(k));
            }
            update(b, sums[k], |b, acc| b.ins().fadd(acc, ex));
        });
        let factors: Vec<Value> = sums
            .iter()
            .map(|s| b.use_var(*s))
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| self.factor(b, t))
            .collect();
        along(b, &mut |b, s, d, k| {
            let (s, d) = (
                b.ins().iadd_imm_s(s, offset(k)),
                b.ins().iadd_imm_s(d, offset(k)),
            );
            let r = self.normalize(b, ty, s, d, max[k], factors[k]);
            store(b, e.dtype, r, d, 0);
        });
    }

    /// What the last pass applies: `1 / Σ` (Softmax) or `ln Σ` (LogSoftmax).
    fn factor(&self, b: &mut FunctionBuilder, total: Value) -> Value {
        if self.log {
            math::log(b, total)
        } else {
            let ty = b.func.dfg.value_type(total);
            let one = fconst(b, ty, 1.0);
            b.ins().fdiv(one, total)
        }
    }

    /// The final value of the elements at `src` (whose exponentials are at `dst` when
    /// kept): `exp(x − max) / Σ` or `(x − max) − ln Σ`.
    fn normalize(
        &self,
        b: &mut FunctionBuilder,
        ty: Type,
        src: Value,
        dst: Value,
        max: Value,
        factor: Value,
    ) -> Value {
        if self.keep_exp && !self.log {
            let ex = load(b, self.e, ty, dst, 0);
            return b.ins().fmul(ex, factor);
        }
        let v = load(b, self.e, ty, src, 0);
        let shifted = b.ins().fsub(v, max);
        if self.log {
            b.ins().fsub(shifted, factor)
        } else {
            let ex = math::exp_nonpositive(b, shifted);
            b.ins().fmul(ex, factor)
        }
    }
}

// ---------------------------------------------------------------------------------------
// LayerNormalization.

/// How scale or bias is addressed within one row, given its strides broadcast to X.
#[derive(Clone, Debug)]
enum Param {
    Absent,
    /// One value per row.
    Splat {
        ptr: Value,
        dtype: DType,
        outer: Vec<usize>,
    },
    /// One value per row element, laid out like the row.
    Row {
        ptr: Value,
        dtype: DType,
        outer: Vec<usize>,
    },
    /// Any other broadcast: strides over every axis of X.
    General {
        ptr: Value,
        dtype: DType,
        strides: Vec<usize>,
    },
}

impl Param {
    fn new(op: Option<Operand>, shape: &[usize], axis: usize, what: &str) -> Result<Param, String> {
        let Some(op) = op else {
            return Ok(Param::Absent);
        };
        let ps = &op.ty.shape;
        let rank = shape.len();
        let fits = ps.len() <= rank
            && ps
                .iter()
                .rev()
                .zip(shape.iter().rev())
                .all(|(&p, &x)| p == 1 || p == x);
        if !fits {
            return Err(format!("{what} {ps:?} does not broadcast to {shape:?}"));
        }
        if !op.ty.dtype.is_float() {
            return Err(format!(
                "{what} must be a float tensor, not {}",
                op.ty.dtype
            ));
        }
        let strides = kernel::broadcast_strides(ps, shape);
        let row_strides = kernel::strides_of(&shape[axis..]);
        let inner = &strides[axis..];
        let outer = strides[..axis].to_vec();
        let (ptr, dtype) = (op.ptr, op.ty.dtype);
        // Size-1 axes never move the address, so their strides do not matter.
        let matches = |want: &dyn Fn(usize) -> usize| {
            (0..rank - axis).all(|d| shape[axis + d] == 1 || inner[d] == want(d))
        };
        Ok(if matches(&|_| 0) {
            Param::Splat { ptr, dtype, outer }
        } else if matches(&|d| row_strides[d]) {
            Param::Row { ptr, dtype, outer }
        } else {
            Param::General {
                ptr,
                dtype,
                strides,
            }
        })
    }

    fn is_f32_or_absent(&self) -> bool {
        match self {
            Param::Absent => true,
            Param::Splat { dtype, .. } | Param::Row { dtype, .. } => *dtype == DType::F32,
            Param::General { .. } => false,
        }
    }

    /// The row's view of the parameter, given the row's outer indices; values are
    /// computed in `acc` (F32X4 only when `vector`).
    fn for_row(
        &self,
        b: &mut FunctionBuilder,
        outer_idx: &[Value],
        acc: Type,
        vector: bool,
    ) -> RowParam {
        match self {
            Param::Absent => RowParam::Absent,
            Param::Splat { ptr, dtype, outer } | Param::Row { ptr, dtype, outer } => {
                let off = kernel::linear_offset(b, outer_idx, outer);
                let base = kernel::elem_addr(b, *ptr, off, dtype.size());
                if matches!(self, Param::Splat { .. }) {
                    let v = kernel::load_elem(b, *dtype, base, 0);
                    let v = convert_float(b, v, acc);
                    let vv = splat_if(b, vector, v);
                    RowParam::Splat(v, vv)
                } else {
                    RowParam::Row(base, *dtype, acc)
                }
            }
            Param::General {
                ptr,
                dtype,
                strides,
            } => {
                let off = kernel::linear_offset(b, outer_idx, &strides[..outer_idx.len()]);
                let base = kernel::elem_addr(b, *ptr, off, dtype.size());
                RowParam::General(base, *dtype, acc, strides[outer_idx.len()..].to_vec())
            }
        }
    }
}

/// A parameter as seen from one row.
enum RowParam {
    Absent,
    /// The value as a scalar and splatted.
    Splat(Value, Value),
    /// The row's first value, its dtype and the computation type.
    Row(Value, DType, Type),
    /// The row's base, dtype, computation type and strides over the row's axes.
    General(Value, DType, Type, Vec<usize>),
}

impl RowParam {
    /// The parameter for the elements at row index `i` (flat) / `idx` (per axis).
    fn at(&self, b: &mut FunctionBuilder, ty: Type, i: Value, idx: &[Value]) -> Option<Value> {
        match self {
            RowParam::Absent => None,
            RowParam::Splat(s, v) => Some(if ty.is_vector() { *v } else { *s }),
            RowParam::Row(base, dtype, acc) => {
                let a = kernel::elem_addr(b, *base, i, dtype.size());
                if ty.is_vector() {
                    return Some(load_vec(b, a, 0));
                }
                let v = kernel::load_elem(b, *dtype, a, 0);
                Some(convert_float(b, v, *acc))
            }
            RowParam::General(base, dtype, acc, strides) => {
                let off = kernel::linear_offset(b, idx, strides);
                let a = kernel::elem_addr(b, *base, off, dtype.size());
                let v = kernel::load_elem(b, *dtype, a, 0);
                Some(convert_float(b, v, *acc))
            }
        }
    }
}

pub fn layer_norm(ctx: &mut LowerCtx, axis: usize, epsilon: f32) -> LowerResult {
    let x = ctx.input(0)?;
    let y = ctx.output(0);
    let shape = x.ty.shape.clone();
    if axis >= shape.len() {
        return Err(format!(
            "axis {axis} is out of range for rank {}",
            shape.len()
        ));
    }
    let mut e = float_elems(x.ty.dtype, "LayerNormalization")?;
    let scale = Param::new(Some(ctx.input(1)?), &shape, axis, "scale")?;
    let bias = Param::new(ctx.inputs.get(2).cloned().flatten(), &shape, axis, "bias")?;
    // The vector path reads scale and bias as F32X4 too.
    e.vector = e.vector && scale.is_f32_or_absent() && bias.is_f32_or_absent();
    if x.ty.numel() == 0 {
        return Ok(());
    }
    let ln = LayerNorm {
        e,
        row_shape: shape[axis..].to_vec(),
        n: shape[axis..].iter().product(),
        epsilon,
    };
    let row_bytes = ln.n * e.dtype.size();
    let outer_shape = shape[..axis].to_vec();
    let outer_strides = kernel::strides_of(&outer_shape);
    let b = &mut *ctx.b;
    kernel::nested_loop(b, &outer_shape, &mut |b, idx| {
        let row = kernel::linear_offset(b, idx, &outer_strides);
        let src = kernel::elem_addr(b, x.ptr, row, row_bytes);
        let dst = kernel::elem_addr(b, y.ptr, row, row_bytes);
        let vector = e.vector && ln.n >= 4;
        let s = scale.for_row(b, idx, e.acc, vector);
        let t = bias.for_row(b, idx, e.acc, vector);
        ln.row(b, src, dst, &s, &t);
    });
    Ok(())
}

struct LayerNorm {
    e: Elems,
    row_shape: Vec<usize>,
    n: usize,
    epsilon: f32,
}

impl LayerNorm {
    fn row(
        &self,
        b: &mut FunctionBuilder,
        src: Value,
        dst: Value,
        scale: &RowParam,
        bias: &RowParam,
    ) {
        let e = self.e;
        let vector = e.vector && self.n >= 4;
        let sum = reduce::run_pass(b, e, Step::Sum, src, &[], self.n, None);
        let n = fconst(b, e.acc, self.n as f64);
        let mean = b.ins().fdiv(sum, n);
        let mean_v = splat_if(b, vector, mean);
        let pick = move |ty: Type, s: Value, v: Value| if ty.is_vector() { v } else { s };
        // Σ (x − mean)².
        let zero_v = fconst(b, types::F32X4, 0.0);
        let zero = fconst(b, e.acc, 0.0);
        let (sq_v, sq) = (var(b, zero_v), var(b, zero));
        let size = e.dtype.size();
        for_chunks(b, self.n, vector, e.acc, &mut |b, i, ty| {
            let a = kernel::elem_addr(b, src, i, size);
            let v = load(b, e, ty, a, 0);
            let d = b.ins().fsub(v, pick(ty, mean, mean_v));
            let d2 = b.ins().fmul(d, d);
            update(b, if ty.is_vector() { sq_v } else { sq }, |b, acc| {
                b.ins().fadd(acc, d2)
            });
        });
        let total = partial_sum(b, vector, sq_v, sq);
        let variance = b.ins().fdiv(total, n);
        let eps = fconst(b, e.acc, self.epsilon as f64);
        let padded = b.ins().fadd(variance, eps);
        let root = b.ins().sqrt(padded);
        let one = fconst(b, e.acc, 1.0);
        let inv = b.ins().fdiv(one, root);
        let inv_v = splat_if(b, vector, inv);
        let apply = |b: &mut FunctionBuilder, ty: Type, i: Value, idx: &[Value]| {
            let a = kernel::elem_addr(b, src, i, size);
            let v = load(b, e, ty, a, 0);
            let d = b.ins().fsub(v, pick(ty, mean, mean_v));
            let mut r = b.ins().fmul(d, pick(ty, inv, inv_v));
            if let Some(s) = scale.at(b, ty, i, idx) {
                r = b.ins().fmul(r, s);
            }
            if let Some(t) = bias.at(b, ty, i, idx) {
                r = b.ins().fadd(r, t);
            }
            let o = kernel::elem_addr(b, dst, i, size);
            store(b, e.dtype, r, o, 0);
        };
        if matches!(scale, RowParam::General(..)) || matches!(bias, RowParam::General(..)) {
            // Per-axis indices are needed to address the parameters.
            let strides = kernel::strides_of(&self.row_shape);
            kernel::nested_loop(b, &self.row_shape, &mut |b, idx| {
                let i = kernel::linear_offset(b, idx, &strides);
                apply(b, e.acc, i, idx);
            });
        } else {
            for_chunks(b, self.n, vector, e.acc, &mut |b, i, ty| {
                apply(b, ty, i, &[])
            });
        }
    }
}

// ---------------------------------------------------------------------------------------
// Rows the run counts (symbolic nodes).

/// Softmax over `rows` contiguous rows of `n` elements, either extent the run's: rows
/// of a fixed length run the static row code (the machine-code rows, one call per
/// row); rows whose length the run sets run float32 rows over it.
pub(super) fn softmax_rows(
    ctx: &mut LowerCtx,
    log: bool,
    rows: super::run_shape::Ext,
    n: super::run_shape::Ext,
) -> LowerResult {
    use super::run_shape::{self, Ext};
    let (x, y) = (ctx.input(0)?, ctx.output(0));
    let e = float_elems(x.ty.dtype, "Softmax")?;
    let keep_exp = matches!(y.ty.dtype, DType::F32 | DType::F64);
    if let Ext::Fixed(n) = n {
        let s = Softmax {
            e,
            log,
            n,
            inner: 1,
            keep_exp,
        };
        let row_bytes = n * e.dtype.size();
        let machine = match ctx.kernel.strategy {
            Strategy::Softmax(Some(isa)) if !log && n > 0 => {
                let code = x86::softmax::emit(1, n, isa)?;
                Some(gemm::define_machine_code(ctx, 2, &code)?)
            }
            _ => None,
        };
        run_shape::run_loop(ctx.b, rows, |b, r| {
            let src = kernel::elem_addr(b, x.ptr, r, row_bytes);
            let dst = kernel::elem_addr(b, y.ptr, r, row_bytes);
            match machine {
                Some(f) => {
                    b.ins().call(f, &[src, dst]);
                }
                None => s.row(b, src, dst),
            }
        });
        return Ok(());
    }
    if x.ty.dtype != DType::F32 || y.ty.dtype != DType::F32 {
        return Err("a Softmax over an axis the run sets runs on float32 only".into());
    }
    if let Strategy::Softmax(Some(isa)) = ctx.kernel.strategy {
        if !log {
            // One call for every row: the machine code takes the rows and their length.
            let code = x86::softmax::emit_counted(isa)?;
            let f = gemm::define_machine_code(ctx, 4, &code)?;
            let (rows, n) = (rows.value(ctx.b), n.value(ctx.b));
            ctx.b.ins().call(f, &[x.ptr, y.ptr, rows, n]);
            return Ok(());
        }
    }
    let n_v = n.value(ctx.b);
    let b = &mut *ctx.b;
    let n4 = b.ins().band_imm_s(n_v, !3);
    let row_len = n;
    run_shape::run_loop(b, rows, |b, r| {
        let at = row_len.times(b, r);
        let src = kernel::elem_addr(b, x.ptr, at, 4);
        let dst = kernel::elem_addr(b, y.ptr, at, 4);
        // Both passes over the row: f32x4 to the last whole vector, then one by one.
        let chunks =
            |b: &mut FunctionBuilder, body: &mut dyn FnMut(&mut FunctionBuilder, Value, Type)| {
                run_shape::run_loop_from(b, Ext::Fixed(0), Ext::Run(n4), 4, |b, i| {
                    body(b, i, types::F32X4)
                });
                run_shape::run_loop_from(b, Ext::Run(n4), Ext::Run(n_v), 1, |b, i| {
                    body(b, i, types::F32)
                });
            };
        let neg_inf = fconst(b, types::F32, f64::NEG_INFINITY);
        let neg_inf_v = b.ins().splat(types::F32X4, neg_inf);
        let (max_v, max_s) = (var(b, neg_inf_v), var(b, neg_inf));
        chunks(b, &mut |b, i, ty| {
            let a = kernel::elem_addr(b, src, i, 4);
            let v = b.ins().load(ty, flags(), a, 0);
            update(b, if ty.is_vector() { max_v } else { max_s }, |b, m| {
                b.ins().fmax(m, v)
            });
        });
        let mv = b.use_var(max_v);
        let mv = reduce::horizontal(b, Step::Max, mv);
        let ms = b.use_var(max_s);
        let max = b.ins().fmax(mv, ms);
        let max_vec = b.ins().splat(types::F32X4, max);
        let zero = fconst(b, types::F32, 0.0);
        let zero_v = b.ins().splat(types::F32X4, zero);
        let (sum_v, sum_s) = (var(b, zero_v), var(b, zero));
        chunks(b, &mut |b, i, ty| {
            let a = kernel::elem_addr(b, src, i, 4);
            let v = b.ins().load(ty, flags(), a, 0);
            let m = if ty.is_vector() { max_vec } else { max };
            let shifted = b.ins().fsub(v, m);
            let ex = math::exp_nonpositive(b, shifted);
            if !log {
                let d = kernel::elem_addr(b, dst, i, 4);
                b.ins().store(flags(), ex, d, 0);
            }
            update(b, if ty.is_vector() { sum_v } else { sum_s }, |b, acc| {
                b.ins().fadd(acc, ex)
            });
        });
        let total = partial_sum(b, true, sum_v, sum_s);
        let factor = if log {
            math::log(b, total)
        } else {
            let one = fconst(b, types::F32, 1.0);
            b.ins().fdiv(one, total)
        };
        let factor_v = b.ins().splat(types::F32X4, factor);
        chunks(b, &mut |b, i, ty| {
            let d = kernel::elem_addr(b, dst, i, 4);
            let f = if ty.is_vector() { factor_v } else { factor };
            let r = if log {
                let s = kernel::elem_addr(b, src, i, 4);
                let v = b.ins().load(ty, flags(), s, 0);
                let m = if ty.is_vector() { max_vec } else { max };
                let shifted = b.ins().fsub(v, m);
                b.ins().fsub(shifted, f)
            } else {
                let ex = b.ins().load(ty, flags(), d, 0);
                b.ins().fmul(ex, f)
            };
            b.ins().store(flags(), r, d, 0);
        });
    });
    Ok(())
}

/// LayerNorm over `rows` rows the run counts, each of the fixed `shape[axis..]`; scale
/// and bias cover one row (or are one value).
pub(super) fn layer_norm_rows(
    ctx: &mut LowerCtx,
    axis: usize,
    epsilon: f32,
    rows: super::run_shape::Ext,
) -> LowerResult {
    let x = ctx.input(0)?;
    let y = ctx.output(0);
    let shape = x.ty.shape.clone();
    let row_rank = shape.len() - axis;
    let scale_op = ctx.input(1)?;
    let bias_op = ctx.inputs.get(2).cloned().flatten();
    for p in std::iter::once(&scale_op).chain(bias_op.as_ref()) {
        if p.ty.rank() > row_rank || p.ty.dims.is_some() {
            return Err("a symbolic LayerNorm's scale and bias must cover one row".into());
        }
    }
    let mut e = float_elems(x.ty.dtype, "LayerNormalization")?;
    let scale = Param::new(Some(scale_op), &shape, axis, "scale")?;
    let bias = Param::new(bias_op, &shape, axis, "bias")?;
    if matches!(scale, Param::General { .. }) || matches!(bias, Param::General { .. }) {
        return Err("a symbolic LayerNorm's scale and bias must be a row or one value".into());
    }
    e.vector = e.vector && scale.is_f32_or_absent() && bias.is_f32_or_absent();
    let ln = LayerNorm {
        e,
        row_shape: shape[axis..].to_vec(),
        n: shape[axis..].iter().product(),
        epsilon,
    };
    let row_bytes = ln.n * e.dtype.size();
    let b = &mut *ctx.b;
    super::run_shape::run_loop(b, rows, |b, r| {
        let src = kernel::elem_addr(b, x.ptr, r, row_bytes);
        let dst = kernel::elem_addr(b, y.ptr, r, row_bytes);
        let vector = e.vector && ln.n >= 4;
        let s = scale.for_row(b, &[], e.acc, vector);
        let t = bias.for_row(b, &[], e.acc, vector);
        ln.row(b, src, dst, &s, &t);
    });
    Ok(())
}
