//! Nodes that read the count of their input's rows as an input of their own (see
//! [`crate::ops::rows::reads_whole`]): a Concat of differently counted rows, the first
//! rows of a counted value, a reduction over counted rows. Each count is clamped into
//! `[0, bound]` before use, so whatever it holds nothing outside a buffer is touched.

use cranelift_codegen::ir::{types, InstBuilder, Type, Value};
use cranelift_frontend::FunctionBuilder;

use super::movement::copy_bytes;
use super::{LowerCtx, LowerResult, Operand};
use crate::codegen::kernel::{self, flags};
use crate::ir::DType;
use crate::ops::{ReduceAttrs, ReduceKind};

/// The rows `count` (an int64 scalar operand; `None`: all of them) holds, clamped into
/// `[0, bound]`.
fn rows_of(b: &mut FunctionBuilder, count: Option<&Operand>, bound: usize) -> Value {
    let bound_v = kernel::iconst(b, bound as i64);
    let Some(count) = count else {
        return bound_v;
    };
    let raw = kernel::load_elem(b, DType::I64, count.ptr, 0);
    let zero = kernel::iconst(b, 0);
    let rows = b.ins().smax(raw, zero);
    b.ins().smin(rows, bound_v)
}

/// Bytes of one row along `axis` of `x` (only unit axes before it, checked).
fn row_bytes(x: &Operand, axis: usize) -> Result<usize, String> {
    if x.ty.shape[..axis].iter().any(|&d| d != 1) {
        return Err(format!(
            "rows counted at run time must lead (axis {axis} of {})",
            x.ty
        ));
    }
    Ok(x.ty.shape[axis + 1..].iter().product::<usize>() * x.ty.dtype.size())
}

/// Copies `rows` rows of `row` bytes from `src` to `dst`.
fn copy_rows(b: &mut FunctionBuilder, dst: Value, src: Value, rows: Value, row: usize) {
    if row == 0 {
        return;
    }
    kernel::dynamic_loop(b, rows, |b, r| {
        let d = kernel::elem_addr(b, dst, r, row);
        let s = kernel::elem_addr(b, src, r, row);
        copy_bytes(b, d, s, row);
    });
}

/// [`crate::ops::Op::ConcatRows`]: each value's actual rows after the previous ones'.
pub fn concat_rows(ctx: &mut LowerCtx, axis: usize, parts: usize) -> LowerResult {
    let (y, total) = (ctx.output(0), ctx.output(1));
    let row = row_bytes(&y, axis)?;
    let inputs = ctx.inputs.clone();
    let b = &mut *ctx.b;
    let mut at = kernel::iconst(b, 0);
    for (k, x) in inputs[..parts].iter().enumerate() {
        let x = x.as_ref().ok_or("a value to concatenate is missing")?;
        let count = inputs.get(parts + k).and_then(Option::as_ref);
        let rows = rows_of(b, count, x.ty.shape[axis]);
        let dst = kernel::elem_addr(b, y.ptr, at, row);
        copy_rows(b, dst, x.ptr, rows, row);
        at = b.ins().iadd(at, rows);
    }
    b.ins().store(flags(), at, total.ptr, 0);
    Ok(())
}

/// [`crate::ops::Op::FirstRows`]: `min(count, n)` rows copied, at most the output's.
pub fn first_rows(ctx: &mut LowerCtx, axis: usize) -> LowerResult {
    let (x, y, taken) = (ctx.input(0)?, ctx.output(0), ctx.output(1));
    let count = ctx.inputs.get(1).cloned().flatten();
    let n = ctx.input(2)?;
    let row = row_bytes(&x, axis)?;
    let b = &mut *ctx.b;
    let rows = rows_of(b, count.as_ref(), x.ty.shape[axis]);
    let wanted = kernel::load_elem(b, n.ty.dtype, n.ptr, 0);
    let zero = kernel::iconst(b, 0);
    let wanted = b.ins().smax(wanted, zero);
    let rows = b.ins().smin(rows, wanted);
    let planned = kernel::iconst(b, y.ty.shape[axis] as i64);
    let rows = b.ins().smin(rows, planned);
    copy_rows(b, y.ptr, x.ptr, rows, row);
    b.ins().store(flags(), rows, taken.ptr, 0);
    Ok(())
}

/// A reduction of the rows along `r.axes[0]` the run counts (input 1): each of the
/// elements after the axis folded over the actual rows only.
pub fn reduce_rows(ctx: &mut LowerCtx, r: &ReduceAttrs) -> LowerResult {
    let (x, count, y) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0));
    let &[axis] = r.axes.as_slice() else {
        return Err("a reduction of counted rows reduces their axis alone".into());
    };
    row_bytes(&x, axis)?;
    let dtype = x.ty.dtype;
    let inner: usize = x.ty.shape[axis + 1..].iter().product();
    let lane = scalar_type(dtype).ok_or_else(|| format!("cannot reduce {dtype:?} rows"))?;
    let kind = r.kind;
    if !matches!(
        kind,
        ReduceKind::Sum
            | ReduceKind::Mean
            | ReduceKind::Max
            | ReduceKind::Min
            | ReduceKind::Prod
            | ReduceKind::L1
            | ReduceKind::L2
            | ReduceKind::SumSquare
    ) || (matches!(kind, ReduceKind::Mean | ReduceKind::L2) && !dtype.is_float())
    {
        return Err(format!(
            "Reduce{kind:?} of {dtype:?} rows the run counts is not supported"
        ));
    }
    let size = dtype.size();
    let b = &mut *ctx.b;
    let rows = rows_of(b, Some(&count), x.ty.shape[axis]);
    kernel::counted_loop(b, 0, inner as i64, 1, |b, i| {
        let acc = b.create_block();
        b.append_block_param(acc, lane);
        let start = initial(b, kind, dtype, lane);
        let header = b.create_block();
        b.append_block_param(header, types::I64);
        b.append_block_param(header, lane);
        let body = b.create_block();
        let zero = kernel::iconst(b, 0);
        b.ins().jump(header, &[zero.into(), start.into()]);
        b.switch_to_block(header);
        let (j, sum) = (b.block_params(header)[0], b.block_params(header)[1]);
        let more = b.ins().icmp(
            cranelift_codegen::ir::condcodes::IntCC::SignedLessThan,
            j,
            rows,
        );
        b.ins().brif(more, body, &[], acc, &[sum.into()]);
        b.switch_to_block(body);
        b.seal_block(body);
        let at = b.ins().imul_imm_s(j, inner as i64);
        let at = b.ins().iadd(at, i);
        let addr = kernel::elem_addr(b, x.ptr, at, size);
        let v = b.ins().load(lane, flags(), addr, 0);
        let next = combine(b, kind, dtype, sum, v);
        let j1 = b.ins().iadd_imm_s(j, 1);
        b.ins().jump(header, &[j1.into(), next.into()]);
        b.seal_block(header);
        b.switch_to_block(acc);
        b.seal_block(acc);
        let total = b.block_params(acc)[0];
        let out = match kind {
            ReduceKind::Mean => {
                let n = b.ins().fcvt_from_sint(lane, rows);
                b.ins().fdiv(total, n)
            }
            ReduceKind::L2 => b.ins().sqrt(total),
            _ => total,
        };
        let d = kernel::elem_addr(b, y.ptr, i, size);
        b.ins().store(flags(), out, d, 0);
    });
    Ok(())
}

fn scalar_type(dtype: DType) -> Option<Type> {
    Some(match dtype {
        DType::F32 => types::F32,
        DType::F64 => types::F64,
        DType::I32 | DType::U32 => types::I32,
        DType::I64 | DType::U64 => types::I64,
        _ => return None,
    })
}

/// The fold's starting value: what an empty reduction gives (the lowest value for
/// Max, the highest for Min).
fn initial(b: &mut FunctionBuilder, kind: ReduceKind, dtype: DType, lane: Type) -> Value {
    let float = |b: &mut FunctionBuilder, v: f64| match lane {
        types::F32 => b.ins().f32const(v as f32),
        _ => b.ins().f64const(v),
    };
    let bits = lane.bits();
    // Cranelift takes a narrow type's immediate as its bits, zero-extended.
    let int = |b: &mut FunctionBuilder, v: i64| match bits {
        64 => b.ins().iconst(lane, v),
        _ => b.ins().iconst(lane, v & ((1i64 << bits) - 1)),
    };
    match (kind, dtype.is_float()) {
        (ReduceKind::Prod, true) => float(b, 1.0),
        (ReduceKind::Prod, false) => int(b, 1),
        (ReduceKind::Max, true) => float(b, f64::NEG_INFINITY),
        (ReduceKind::Min, true) => float(b, f64::INFINITY),
        (ReduceKind::Max, false) if dtype.is_signed_int() => int(b, i64::MIN >> (64 - bits)),
        (ReduceKind::Max, false) => int(b, 0),
        (ReduceKind::Min, false) if dtype.is_signed_int() => int(b, i64::MAX >> (64 - bits)),
        (ReduceKind::Min, false) => int(b, -1),
        (_, true) => float(b, 0.0),
        (_, false) => int(b, 0),
    }
}

fn combine(b: &mut FunctionBuilder, kind: ReduceKind, dtype: DType, acc: Value, v: Value) -> Value {
    let signed = dtype.is_signed_int();
    if dtype.is_float() {
        return match kind {
            // IEEE maximum and minimum: NaN propagates, −0 below +0.
            ReduceKind::Max => b.ins().fmax(acc, v),
            ReduceKind::Min => b.ins().fmin(acc, v),
            ReduceKind::Prod => b.ins().fmul(acc, v),
            ReduceKind::L1 => {
                let a = b.ins().fabs(v);
                b.ins().fadd(acc, a)
            }
            ReduceKind::L2 | ReduceKind::SumSquare => {
                let sq = b.ins().fmul(v, v);
                b.ins().fadd(acc, sq)
            }
            _ => b.ins().fadd(acc, v),
        };
    }
    match kind {
        ReduceKind::Max if signed => b.ins().smax(acc, v),
        ReduceKind::Max => b.ins().umax(acc, v),
        ReduceKind::Min if signed => b.ins().smin(acc, v),
        ReduceKind::Min => b.ins().umin(acc, v),
        ReduceKind::Prod => b.ins().imul(acc, v),
        ReduceKind::L1 if signed => {
            let a = b.ins().iabs(v);
            b.ins().iadd(acc, a)
        }
        ReduceKind::SumSquare => {
            let sq = b.ins().imul(v, v);
            b.ins().iadd(acc, sq)
        }
        _ => b.ins().iadd(acc, v),
    }
}
