//! Index-driven data movement and scans: GatherElements, GatherND, ScatterElements,
//! ScatterND (copy, then update in row-major order of the indices), CumSum and TopK.
//!
//! Runtime indices are resolved by [`index_check`](super::index_check): a bad one fails
//! the node or is clamped, as `--index-checks` says, and never touches memory outside
//! a tensor.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::{FunctionBuilder, Variable};

use super::index_check::{self, OnBadIndex};
use super::movement::copy_bytes;
use super::{LowerCtx, LowerResult, Operand};
use crate::codegen::kernel::{self, domain, flags, Domain};
use crate::ir::DType;
use crate::ops::ScatterReduction;

/// Loads index element `i` (a flat position) of `indices` as i64.
fn load_index(b: &mut FunctionBuilder, indices: &Operand, i: Value) -> Value {
    let d = indices.ty.dtype;
    let a = kernel::elem_addr(b, indices.ptr, i, d.size());
    kernel::load_elem(b, d, a, 0)
}

fn check_indices(indices: &Operand) -> LowerResult {
    if indices.ty.dtype.is_int() {
        Ok(())
    } else {
        Err(format!(
            "indices must be integers, got {}",
            indices.ty.dtype
        ))
    }
}

/// Copies one element (raw bits) from `src` to `dst`.
fn copy_elem(b: &mut FunctionBuilder, dtype: DType, dst: Value, src: Value) {
    let v = b.ins().load(kernel::mem_type(dtype), flags(), src, 0);
    b.ins().store(flags(), v, dst, 0);
}

/// `reduction(current, update)` on computation-domain values.
fn combine(
    b: &mut FunctionBuilder,
    dtype: DType,
    r: ScatterReduction,
    cur: Value,
    upd: Value,
) -> Value {
    let d = domain(dtype);
    let float = matches!(d, Domain::F32 | Domain::F64);
    let signed = matches!(d, Domain::Int { signed: true });
    match r {
        ScatterReduction::None => upd,
        ScatterReduction::Add if float => b.ins().fadd(cur, upd),
        ScatterReduction::Add => b.ins().iadd(cur, upd),
        ScatterReduction::Mul if float => b.ins().fmul(cur, upd),
        ScatterReduction::Mul => b.ins().imul(cur, upd),
        // fmax / fmin propagate NaN, as numpy's maximum / minimum.
        ScatterReduction::Max if float => b.ins().fmax(cur, upd),
        ScatterReduction::Min if float => b.ins().fmin(cur, upd),
        ScatterReduction::Max if signed => b.ins().smax(cur, upd),
        ScatterReduction::Min if signed => b.ins().smin(cur, upd),
        ScatterReduction::Max => b.ins().umax(cur, upd),
        ScatterReduction::Min => b.ins().umin(cur, upd),
    }
}

/// Applies one update element at `dst` (raw copy without a reduction).
fn update_elem(b: &mut FunctionBuilder, dtype: DType, r: ScatterReduction, dst: Value, src: Value) {
    if r == ScatterReduction::None {
        copy_elem(b, dtype, dst, src);
        return;
    }
    let cur = kernel::load_elem(b, dtype, dst, 0);
    let upd = kernel::load_elem(b, dtype, src, 0);
    let v = combine(b, dtype, r, cur, upd);
    kernel::store_elem(b, dtype, v, dst, 0);
}

/// Visits every position of `indices` (shaped like the data off `axis`): calls `f`
/// with the flat position and the element offset into the data it addresses.
fn for_each_element(
    b: &mut FunctionBuilder,
    data: &Operand,
    indices: &Operand,
    axis: usize,
    on_bad: OnBadIndex,
    f: &mut dyn FnMut(&mut FunctionBuilder, Value, Value),
) -> LowerResult {
    check_indices(indices)?;
    let (ds, is) = (&data.ty.shape, &indices.ty.shape);
    let rank = ds.len();
    if is.len() != rank || axis >= rank || (0..rank).any(|d| d != axis && is[d] > ds[d]) {
        return Err(format!(
            "indices {is:?} do not fit data {ds:?} along axis {axis}"
        ));
    }
    if indices.ty.numel() == 0 {
        return Ok(());
    }
    if ds[axis] == 0 {
        return Err(format!("cannot index the empty axis {axis}"));
    }
    let dstr = kernel::strides_of(ds);
    let istr = kernel::strides_of(is);
    let mut off_strides = dstr.clone();
    off_strides[axis] = 0;
    let dim = ds[axis];
    let axis_stride = dstr[axis] as i64;
    kernel::nested_loop(b, is, &mut |b, idx| {
        let flat = kernel::linear_offset(b, idx, &istr);
        let i = load_index(b, indices, flat);
        let i = index_check::resolve(b, indices, i, dim, on_bad);
        let base = kernel::linear_offset(b, idx, &off_strides);
        let along = b.ins().imul_imm_s(i, axis_stride);
        let off = b.ins().iadd(base, along);
        f(b, flat, off);
    });
    Ok(())
}

pub fn gather_elements(ctx: &mut LowerCtx, axis: usize) -> LowerResult {
    let (data, indices, y) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0));
    let dtype = data.ty.dtype;
    let elem = dtype.size();
    let on_bad = ctx.on_bad_index;
    for_each_element(ctx.b, &data, &indices, axis, on_bad, &mut |b, flat, off| {
        let src = kernel::elem_addr(b, data.ptr, off, elem);
        let dst = kernel::elem_addr(b, y.ptr, flat, elem);
        copy_elem(b, dtype, dst, src);
    })
}

pub fn scatter_elements(ctx: &mut LowerCtx, axis: usize, r: ScatterReduction) -> LowerResult {
    let (data, indices, updates, y) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?, ctx.output(0));
    if updates.ty.shape != indices.ty.shape || updates.ty.dtype != data.ty.dtype {
        return Err(format!(
            "updates {} must be shaped like indices {} with the data's type",
            updates.ty, indices.ty
        ));
    }
    let dtype = data.ty.dtype;
    let elem = dtype.size();
    copy_bytes(ctx.b, y.ptr, data.ptr, y.ty.byte_size());
    let on_bad = ctx.on_bad_index;
    for_each_element(ctx.b, &data, &indices, axis, on_bad, &mut |b, flat, off| {
        let src = kernel::elem_addr(b, updates.ptr, flat, elem);
        let dst = kernel::elem_addr(b, y.ptr, off, elem);
        update_elem(b, dtype, r, dst, src);
    })
}

/// Where the `k` components of an index tuple point: axes `first..first + k` of data
/// shaped `ds` with strides `dstr`.
struct TupleAxes<'a> {
    k: usize,
    ds: &'a [usize],
    dstr: &'a [usize],
    first: usize,
}

/// The element offset into data of index tuple `j`.
fn tuple_offset(
    b: &mut FunctionBuilder,
    indices: &Operand,
    j: Value,
    axes: &TupleAxes,
    on_bad: OnBadIndex,
) -> Value {
    let TupleAxes { k, ds, dstr, first } = *axes;
    let mut off = kernel::iconst(b, 0);
    for d in 0..k {
        let at = b.ins().imul_imm_s(j, k as i64);
        let at = b.ins().iadd_imm_s(at, d as i64);
        let i = load_index(b, indices, at);
        let i = index_check::resolve(b, indices, i, ds[first + d], on_bad);
        let t = b.ins().imul_imm_s(i, dstr[first + d] as i64);
        off = b.ins().iadd(off, t);
    }
    off
}

pub fn scatter_nd(ctx: &mut LowerCtx, r: ScatterReduction) -> LowerResult {
    let (data, indices, updates, y) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?, ctx.output(0));
    check_indices(&indices)?;
    let ds = data.ty.shape.clone();
    let is = &indices.ty.shape;
    let (&k, lead) = is.split_last().ok_or("indices must have rank ≥ 1")?;
    let tuples: usize = lead.iter().product();
    if k > ds.len() || updates.ty.dtype != data.ty.dtype {
        return Err(format!(
            "cannot scatter {} into {} by {}",
            updates.ty, data.ty, indices.ty
        ));
    }
    let dtype = data.ty.dtype;
    let elem = dtype.size();
    copy_bytes(ctx.b, y.ptr, data.ptr, y.ty.byte_size());
    let slice: usize = ds[k..].iter().product();
    if tuples == 0 || slice == 0 {
        return Ok(());
    }
    if ds[..k].contains(&0) {
        return Err("cannot index an empty axis".into());
    }
    let dstr = kernel::strides_of(&ds);
    let axes = TupleAxes {
        k,
        ds: &ds,
        dstr: &dstr,
        first: 0,
    };
    let on_bad = ctx.on_bad_index;
    let b = &mut *ctx.b;
    kernel::counted_loop(b, 0, tuples as i64, 1, |b, j| {
        let off = tuple_offset(b, &indices, j, &axes, on_bad);
        let dst = kernel::elem_addr(b, y.ptr, off, elem);
        let src = kernel::elem_addr(b, updates.ptr, j, slice * elem);
        if r == ScatterReduction::None {
            copy_bytes(b, dst, src, slice * elem);
        } else {
            kernel::counted_loop(b, 0, slice as i64, 1, |b, e| {
                let d = kernel::elem_addr(b, dst, e, elem);
                let s = kernel::elem_addr(b, src, e, elem);
                update_elem(b, dtype, r, d, s);
            });
        }
    });
    Ok(())
}

pub fn gather_nd(ctx: &mut LowerCtx, batch_dims: usize) -> LowerResult {
    let (data, indices, y) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0));
    check_indices(&indices)?;
    let ds = data.ty.shape.clone();
    let is = indices.ty.shape.clone();
    let (&k, lead) = is.split_last().ok_or("indices must have rank ≥ 1")?;
    if batch_dims >= is.len() || batch_dims + k > ds.len() {
        return Err(format!(
            "GatherND of {} by {} with {batch_dims} batch axes is invalid",
            data.ty, indices.ty
        ));
    }
    let elem = data.ty.dtype.size();
    let batches: usize = ds[..batch_dims].iter().product();
    let per_batch: usize = lead[batch_dims..].iter().product();
    let batch_size: usize = ds[batch_dims..].iter().product();
    let slice: usize = ds[batch_dims + k..].iter().product();
    if y.ty.numel() == 0 {
        return Ok(());
    }
    if ds[batch_dims..batch_dims + k].contains(&0) {
        return Err("cannot index an empty axis".into());
    }
    let dstr = kernel::strides_of(&ds);
    let axes = TupleAxes {
        k,
        ds: &ds,
        dstr: &dstr,
        first: batch_dims,
    };
    let on_bad = ctx.on_bad_index;
    let b = &mut *ctx.b;
    kernel::counted_loop(b, 0, batches as i64, 1, |b, bi| {
        kernel::counted_loop(b, 0, per_batch as i64, 1, |b, t| {
            let j = b.ins().imul_imm_s(bi, per_batch as i64);
            let j = b.ins().iadd(j, t);
            let off = tuple_offset(b, &indices, j, &axes, on_bad);
            let base = b.ins().imul_imm_s(bi, batch_size as i64);
            let off = b.ins().iadd(off, base);
            let src = kernel::elem_addr(b, data.ptr, off, elem);
            let dst = kernel::elem_addr(b, y.ptr, j, slice * elem);
            copy_bytes(b, dst, src, slice * elem);
        });
    });
    Ok(())
}

pub(super) fn var(b: &mut FunctionBuilder, init: Value) -> Variable {
    let ty = b.func.dfg.value_type(init);
    let v = b.declare_var(ty);
    b.def_var(v, init);
    v
}

fn zero_of(b: &mut FunctionBuilder, d: Domain) -> Value {
    match d {
        Domain::F32 => b.ins().f32const(0.0),
        Domain::F64 => b.ins().f64const(0.0),
        Domain::Int { .. } => kernel::iconst(b, 0),
    }
}

/// Cumulative sum (or product) along `axis`, accumulated in the computation domain
/// (f32 for the 32- and 16-bit floats, f64, wrapping i64).
pub fn cumsum(
    ctx: &mut LowerCtx,
    axis: usize,
    exclusive: bool,
    reverse: bool,
    product: bool,
) -> LowerResult {
    let (x, y) = (ctx.input(0)?, ctx.output(0));
    let dtype = x.ty.dtype;
    if dtype == DType::Bool {
        return Err("CumSum is not defined for bool".into());
    }
    let shape = &x.ty.shape;
    let outer: usize = shape[..axis].iter().product();
    let dim = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    if x.ty.numel() == 0 {
        return Ok(());
    }
    let elem = dtype.size();
    let d = domain(dtype);
    let float = matches!(d, Domain::F32 | Domain::F64);
    let b = &mut *ctx.b;
    kernel::nested_loop(b, &[outer, inner], &mut |b, idx| {
        let (o, i) = (idx[0], idx[1]);
        let start = match (product, d) {
            (false, _) => zero_of(b, d),
            (true, Domain::F32) => b.ins().f32const(1.0),
            (true, Domain::F64) => b.ins().f64const(1.0),
            (true, Domain::Int { .. }) => kernel::iconst(b, 1),
        };
        let acc = var(b, start);
        let lane = b.ins().imul_imm_s(o, (dim * inner) as i64);
        let lane = b.ins().iadd(lane, i);
        kernel::counted_loop(b, 0, dim as i64, 1, |b, t| {
            let p = if reverse {
                let neg = b.ins().ineg(t);
                b.ins().iadd_imm_s(neg, dim as i64 - 1)
            } else {
                t
            };
            let at = b.ins().imul_imm_s(p, inner as i64);
            let at = b.ins().iadd(at, lane);
            let src = kernel::elem_addr(b, x.ptr, at, elem);
            let dst = kernel::elem_addr(b, y.ptr, at, elem);
            let v = kernel::load_elem(b, dtype, src, 0);
            let cur = b.use_var(acc);
            let next = match (float, product) {
                (true, false) => b.ins().fadd(cur, v),
                (true, true) => b.ins().fmul(cur, v),
                (false, false) => b.ins().iadd(cur, v),
                (false, true) => b.ins().imul(cur, v),
            };
            kernel::store_elem(b, dtype, if exclusive { cur } else { next }, dst, 0);
            b.def_var(acc, next);
        });
    });
    Ok(())
}

/// A key whose unsigned order is the element order TopK sorts by: numbers ascending,
/// -0 equal to +0, NaN above everything (numpy's sort order).
pub(super) fn sort_key(b: &mut FunctionBuilder, dtype: DType, v: Value) -> Value {
    match domain(dtype) {
        Domain::F32 => {
            let zero = b.ins().f32const(0.0);
            let is_zero = b.ins().fcmp(FloatCC::Equal, v, zero);
            let v = b.ins().select(is_zero, zero, v);
            let bits = b.ins().bitcast(types::I32, MemFlagsData::new(), v);
            let is_nan = b.ins().fcmp(FloatCC::Unordered, v, v);
            let qnan = b.ins().iconst(types::I32, 0x7fc0_0000);
            let bits = b.ins().select(is_nan, qnan, bits);
            let neg = b.ins().icmp_imm_s(IntCC::SignedLessThan, bits, 0);
            let flipped = b.ins().bnot(bits);
            let set = b.ins().bor_imm_u(bits, 0x8000_0000u32 as i64);
            let k = b.ins().select(neg, flipped, set);
            b.ins().uextend(types::I64, k)
        }
        Domain::F64 => {
            let zero = b.ins().f64const(0.0);
            let is_zero = b.ins().fcmp(FloatCC::Equal, v, zero);
            let v = b.ins().select(is_zero, zero, v);
            let bits = b.ins().bitcast(types::I64, MemFlagsData::new(), v);
            let is_nan = b.ins().fcmp(FloatCC::Unordered, v, v);
            let qnan = b.ins().iconst(types::I64, 0x7ff8_0000_0000_0000);
            let bits = b.ins().select(is_nan, qnan, bits);
            let neg = b.ins().icmp_imm_s(IntCC::SignedLessThan, bits, 0);
            let flipped = b.ins().bnot(bits);
            let set = b.ins().bor_imm_s(bits, i64::MIN);
            b.ins().select(neg, flipped, set)
        }
        Domain::Int { signed: true } => b.ins().bxor_imm_s(v, i64::MIN),
        Domain::Int { signed: false } => v,
    }
}

/// TopK by repeated selection: output `j` is the least element, in the order (key,
/// index), strictly after output `j - 1`. O(k · n) per lane and no scratch; the order
/// is total, so ties go to the lower index as in the reference.
/// `k`: the count, or `None` for TopK's run-time k (input 1, one integer): the outputs
/// are then planned for the whole axis and filled densely for k, which output 2 holds;
/// a k outside `[0, dim]` fails as a bad index (or is clamped into it).
/// Writes element `p` of `x`'s lane (`lane`, elements `inner` apart) as TopK's `j`-th
/// value and its index into the output lane `out_lane`.
fn emit_taken(
    b: &mut FunctionBuilder,
    (x, lane, inner): (&Operand, Value, usize),
    p: Value,
    (values, indices, out_lane): (&Operand, &Operand, Value),
    j: Value,
) {
    let elem = x.ty.dtype.size();
    let at = b.ins().imul_imm_s(p, inner as i64);
    let at = b.ins().iadd(at, lane);
    let src = kernel::elem_addr(b, x.ptr, at, elem);
    let dst = b.ins().imul_imm_s(j, inner as i64);
    let dst = b.ins().iadd(dst, out_lane);
    let vdst = kernel::elem_addr(b, values.ptr, dst, elem);
    copy_elem(b, x.ty.dtype, vdst, src);
    let idst = kernel::elem_addr(b, indices.ptr, dst, 8);
    b.ins().store(flags(), p, idst, 0);
}

/// TopK with k read at run time, at most `max_k`.
pub fn top_k_run_time(ctx: &mut LowerCtx, axis: usize, max_k: usize, largest: bool) -> LowerResult {
    top_k_up_to(ctx, axis, None, max_k, largest)
}

pub fn top_k(ctx: &mut LowerCtx, axis: usize, k: Option<usize>, largest: bool) -> LowerResult {
    let dim = ctx.input(0)?.ty.shape.get(axis).copied().unwrap_or(0);
    top_k_up_to(ctx, axis, k, dim, largest)
}

/// TopK of `k` (or, `None`, of input 1's at run time, at most `max_k`).
fn top_k_up_to(
    ctx: &mut LowerCtx,
    axis: usize,
    k: Option<usize>,
    max_k: usize,
    largest: bool,
) -> LowerResult {
    let (x, values, indices) = (ctx.input(0)?, ctx.output(0), ctx.output(1));
    let dtype = x.ty.dtype;
    if dtype == DType::Bool {
        return Err("TopK is not defined for bool".into());
    }
    let shape = &x.ty.shape;
    let outer: usize = shape[..axis].iter().product();
    let dim = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let bound = k.unwrap_or(max_k.min(dim));
    if bound > dim {
        return Err(format!("k = {bound} exceeds the axis of {dim}"));
    }
    // The axis's actual extent: the rows the run has of an input whose rows only the
    // run knows (every axis before them a unit axis), else the axis.
    let rows = ctx.run_rows.filter(|_| outer == 1 && k.is_none());
    let extent = match rows {
        Some(r) => r.count,
        None => kernel::iconst(ctx.b, dim as i64),
    };
    // The most k may be: the extent, and the bound the model gives it.
    let most = kernel::iconst(ctx.b, bound as i64);
    let most = ctx.b.ins().smin(extent, most);
    let k_value = match k {
        Some(k) => kernel::iconst(ctx.b, k as i64),
        None => {
            let k_in = ctx.input(1)?;
            let count = ctx.output(2);
            let b = &mut *ctx.b;
            let raw = kernel::load_elem(b, k_in.ty.dtype, k_in.ptr, 0);
            // Valid values are [0, most]: checked as an index into an axis one longer.
            let k = match ctx.on_bad_index {
                index_check::OnBadIndex::Fail(fail) => {
                    let longer = b.ins().iadd_imm_s(most, 1);
                    index_check::check_below(b, raw, longer, fail);
                    raw
                }
                index_check::OnBadIndex::Clamp => {
                    let zero = kernel::iconst(b, 0);
                    let k = b.ins().smax(raw, zero);
                    b.ins().smin(k, most)
                }
            };
            b.ins().store(flags(), k, count.ptr, 0);
            k
        }
    };
    if outer * inner * bound == 0 {
        return Ok(());
    }
    let elem = dtype.size();
    if let (Some(scratch), None, DType::F32) = (ctx.scratch, k, dtype) {
        // The whole axis sorted once (see `top_k_sorted_scratch`), its first k taken.
        let b = &mut *ctx.b;
        let pairs = scratch;
        let sort_scratch = b.ins().iadd_imm_s(scratch, (dim * 8) as i64);
        kernel::nested_loop(b, &[outer, inner], &mut |b, idx| {
            let (o, i) = (idx[0], idx[1]);
            let lane = b.ins().imul_imm_s(o, (dim * inner) as i64);
            let lane = b.ins().iadd(lane, i);
            kernel::dynamic_loop(b, extent, |b, p| {
                let at = b.ins().imul_imm_s(p, inner as i64);
                let at = b.ins().iadd(at, lane);
                let src = kernel::elem_addr(b, x.ptr, at, elem);
                let v = kernel::load_elem(b, dtype, src, 0);
                let key = sort_key(b, dtype, v);
                let key = match largest {
                    true => b.ins().bxor_imm_u(key, 0xffff_ffff),
                    false => key,
                };
                let key = b.ins().ishl_imm_u(key, 32);
                let pair = b.ins().bor(key, p);
                let dst = kernel::elem_addr(b, pairs, p, 8);
                b.ins().store(flags(), pair, dst, 0);
            });
            super::sort::sort_by_key(b, pairs, sort_scratch, extent);
            let out_lane = b.ins().imul(o, k_value);
            let out_lane = b.ins().imul_imm_s(out_lane, inner as i64);
            let out_lane = b.ins().iadd(out_lane, i);
            kernel::dynamic_loop(b, k_value, |b, j| {
                let at = kernel::elem_addr(b, pairs, j, 8);
                let pair = b.ins().load(types::I64, flags(), at, 0);
                let p = b.ins().band_imm_u(pair, 0xffff_ffff);
                let out = (&values, &indices, out_lane);
                emit_taken(b, (&x, lane, inner), p, out, j);
            });
        });
        return Ok(());
    }
    let b = &mut *ctx.b;
    kernel::nested_loop(b, &[outer, inner], &mut |b, idx| {
        let (o, i) = (idx[0], idx[1]);
        let lane = b.ins().imul_imm_s(o, (dim * inner) as i64);
        let lane = b.ins().iadd(lane, i);
        let out_lane = b.ins().imul(o, k_value);
        let out_lane = b.ins().imul_imm_s(out_lane, inner as i64);
        let out_lane = b.ins().iadd(out_lane, i);
        let zero = kernel::iconst(b, 0);
        let minus_one = kernel::iconst(b, -1);
        let prev_key = var(b, zero);
        let prev_idx = var(b, minus_one);
        kernel::dynamic_loop(b, k_value, |b, j| {
            let all_ones = kernel::iconst(b, -1);
            let sentinel = kernel::iconst(b, dim as i64);
            let best_key = var(b, all_ones);
            let best_idx = var(b, sentinel);
            let (pk, pi) = (b.use_var(prev_key), b.use_var(prev_idx));
            kernel::dynamic_loop(b, extent, |b, p| {
                let at = b.ins().imul_imm_s(p, inner as i64);
                let at = b.ins().iadd(at, lane);
                let src = kernel::elem_addr(b, x.ptr, at, elem);
                let v = kernel::load_elem(b, dtype, src, 0);
                let key = sort_key(b, dtype, v);
                let key = if largest { b.ins().bnot(key) } else { key };
                let (bk, bi) = (b.use_var(best_key), b.use_var(best_idx));
                // after = (key, p) > (pk, pi); better = (key, p) < (bk, bi).
                let gt = b.ins().icmp(IntCC::UnsignedGreaterThan, key, pk);
                let eq = b.ins().icmp(IntCC::Equal, key, pk);
                let later = b.ins().icmp(IntCC::SignedGreaterThan, p, pi);
                let tie = b.ins().band(eq, later);
                let after = b.ins().bor(gt, tie);
                let lt = b.ins().icmp(IntCC::UnsignedLessThan, key, bk);
                let eq = b.ins().icmp(IntCC::Equal, key, bk);
                let earlier = b.ins().icmp(IntCC::SignedLessThan, p, bi);
                let tie = b.ins().band(eq, earlier);
                let better = b.ins().bor(lt, tie);
                let take = b.ins().band(after, better);
                let nk = b.ins().select(take, key, bk);
                let ni = b.ins().select(take, p, bi);
                b.def_var(best_key, nk);
                b.def_var(best_idx, ni);
            });
            let (bk, bi) = (b.use_var(best_key), b.use_var(best_idx));
            b.def_var(prev_key, bk);
            b.def_var(prev_idx, bi);
            // Always true when k ≤ the extent; the clamp only guards the load.
            let last = b.ins().iadd_imm_s(extent, -1);
            let bi = b.ins().smin(bi, last);
            emit_taken(b, (&x, lane, inner), bi, (&values, &indices, out_lane), j);
        });
    });
    Ok(())
}
