//! Slice and Split whose positions are read at run time, and Choose. The output is planned at the
//! input's shape (no slice is longer) and written densely for the actual extents, which
//! the node stores for `run` to report. Every position is clamped into its axis before
//! it is used, so no value of starts, ends, steps or sizes makes the code read or write
//! past a buffer; the values ONNX calls invalid (an axis out of range or repeated, a
//! step of 0, split sizes that do not sum to the axis) fail as a bad index.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{InstBuilder, Value};
use cranelift_frontend::{FunctionBuilder, Variable};

use super::index_check::{resolve, OnBadIndex};
use super::indexing::var;
use super::movement::copy_bytes;
use super::{LowerCtx, LowerResult, Operand};
use crate::codegen::kernel::{self, flags};

/// Where the slice of one axis starts, its step and how many elements it takes.
#[derive(Clone, Copy)]
struct AxisRun {
    start: Variable,
    step: Variable,
    len: Variable,
}

/// Element `i` of a one-dimensional integer input, as an i64.
fn load_int(b: &mut FunctionBuilder, input: &Operand, i: usize) -> Value {
    let at = kernel::iconst(b, i as i64);
    let at = kernel::elem_addr(b, input.ptr, at, input.ty.dtype.size());
    kernel::load_elem(b, input.ty.dtype, at, 0)
}

/// Branches to the failure block when `bad` holds; with clamping does nothing.
fn fail_if(b: &mut FunctionBuilder, bad: Value, on_bad: OnBadIndex) {
    if let OnBadIndex::Fail(fail) = on_bad {
        let ok = b.create_block();
        b.ins().brif(bad, fail, &[], ok, &[]);
        b.seal_block(ok);
        b.switch_to_block(ok);
    }
}

/// `(start, len)` of the slice `starts..ends` by `step` (non-zero) of an axis of `dim`
/// elements, with ONNX's clamping: positive steps clamp into `[0, dim]`, negative ones
/// into `[-1, dim - 1]`; an empty slice starts at 0.
fn clamped_run(
    b: &mut FunctionBuilder,
    (start, end, step): (Value, Value, Value),
    dim: Value,
) -> (Value, Value) {
    let zero = kernel::iconst(b, 0);
    let forward = b.ins().icmp_imm_s(IntCC::SignedGreaterThan, step, 0);
    let lo_back = kernel::iconst(b, -1);
    let lo = b.ins().select(forward, zero, lo_back);
    let hi_back = b.ins().iadd_imm_s(dim, -1);
    let hi = b.ins().select(forward, dim, hi_back);
    let clamp = |b: &mut FunctionBuilder, v: Value| {
        // A negative position counts from the end; `v + dim` cannot overflow as `v < 0`.
        let from_end = b.ins().iadd(v, dim);
        let negative = b.ins().icmp_imm_s(IntCC::SignedLessThan, v, 0);
        let v = b.ins().select(negative, from_end, v);
        let v = b.ins().smax(v, lo);
        b.ins().smin(v, hi)
    };
    let (s, e) = (clamp(b, start), clamp(b, end));
    let ahead = b.ins().isub(e, s);
    let behind = b.ins().isub(s, e);
    let span = b.ins().select(forward, ahead, behind);
    let span = b.ins().smax(span, zero);
    // len = ceil(span / |step|) as (span - 1) / |step| + 1, never overflowing; |i64::MIN|
    // is 2^63 read unsigned.
    let magnitude = b.ins().iabs(step);
    let one = kernel::iconst(b, 1);
    let span_less = b.ins().isub(span, one);
    let span_less = b.ins().smax(span_less, zero);
    let len = b.ins().udiv(span_less, magnitude);
    let len = b.ins().iadd(len, one);
    let empty = b.ins().icmp_imm_s(IntCC::Equal, span, 0);
    let len = b.ins().select(empty, zero, len);
    let start = b.ins().select(empty, zero, s);
    (start, len)
}

pub fn slice_run_time(ctx: &mut LowerCtx, count: usize) -> LowerResult {
    let (x, starts, ends) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
    let axes = ctx.inputs.get(3).cloned().flatten();
    let steps = ctx.inputs.get(4).cloned().flatten();
    let (y, shape_out) = (ctx.output(0), ctx.output(1));
    let on_bad = ctx.on_bad_index;
    let shape = x.ty.shape.clone();
    let rank = shape.len();
    if axes.is_none() && count > rank {
        return Err(format!("{count} starts for a rank-{rank} input"));
    }
    let b = &mut *ctx.b;
    let (zero, one) = (kernel::iconst(b, 0), kernel::iconst(b, 1));
    let runs: Vec<AxisRun> = (shape.iter())
        .map(|&d| {
            let len = kernel::iconst(b, d as i64);
            AxisRun {
                start: var(b, zero),
                step: var(b, one),
                len: var(b, len),
            }
        })
        .collect();
    let mut mask = zero;
    for i in 0..count {
        let axis = match &axes {
            Some(a) => {
                let v = load_int(b, a, i);
                resolve(b, a, v, rank, on_bad)
            }
            None => kernel::iconst(b, i as i64),
        };
        let bit = b.ins().ishl(one, axis);
        mask = b.ins().bor(mask, bit);
        let step = match &steps {
            Some(s) => load_int(b, s, i),
            None => one,
        };
        let stopped = b.ins().icmp_imm_s(IntCC::Equal, step, 0);
        fail_if(b, stopped, on_bad);
        let step = b.ins().select(stopped, one, step);
        // The dim of the axis named: a select over the rank.
        let mut dim = zero;
        for (a, &d) in shape.iter().enumerate() {
            let is_a = b.ins().icmp_imm_s(IntCC::Equal, axis, a as i64);
            let d = kernel::iconst(b, d as i64);
            dim = b.ins().select(is_a, d, dim);
        }
        let bounds = (load_int(b, &starts, i), load_int(b, &ends, i), step);
        let (start, len) = clamped_run(b, bounds, dim);
        for (a, run) in runs.iter().enumerate() {
            let is_a = b.ins().icmp_imm_s(IntCC::Equal, axis, a as i64);
            for (v, new) in [(run.start, start), (run.step, step), (run.len, len)] {
                let old = b.use_var(v);
                let picked = b.ins().select(is_a, new, old);
                b.def_var(v, picked);
            }
        }
    }
    if count > 0 {
        // A repeated axis leaves fewer bits than axes.
        let bits = b.ins().popcnt(mask);
        let repeated = b.ins().icmp_imm_u(IntCC::NotEqual, bits, count as i64);
        fail_if(b, repeated, on_bad);
    }
    for (a, run) in runs.iter().enumerate() {
        let len = b.use_var(run.len);
        b.ins().store(flags(), len, shape_out.ptr, (8 * a) as i32);
    }
    let written = var(b, zero);
    let strides = kernel::strides_of(&shape);
    copy_runs(b, (&x, &y), &runs, &strides, zero, written);
    Ok(())
}

/// Copies the elements the runs select, axis by axis from `level`, to `y` densely
/// (`written` counts the elements stored so far); `offset` is the element offset in x
/// of the axes before `level`.
fn copy_runs(
    b: &mut FunctionBuilder,
    (x, y): (&Operand, &Operand),
    runs: &[AxisRun],
    strides: &[usize],
    offset: Value,
    written: Variable,
) {
    let elem = x.ty.dtype.size();
    let Some((run, rest)) = runs.split_first() else {
        let src = kernel::elem_addr(b, x.ptr, offset, elem);
        let k = b.use_var(written);
        let dst = kernel::elem_addr(b, y.ptr, k, elem);
        copy_bytes(b, dst, src, elem);
        let k = b.ins().iadd_imm_s(k, 1);
        b.def_var(written, k);
        return;
    };
    let (start, step, len) = (
        b.use_var(run.start),
        b.use_var(run.step),
        b.use_var(run.len),
    );
    let zero = kernel::iconst(b, 0);
    kernel::range_loop(b, zero, len, |b, j| {
        let position = b.ins().imul(j, step);
        let position = b.ins().iadd(position, start);
        let at = b.ins().imul_imm_s(position, strides[0] as i64);
        let at = b.ins().iadd(offset, at);
        copy_runs(b, (x, y), rest, &strides[1..], at, written);
    });
}

/// Split into pieces whose sizes are read at run time: each size is checked (every one
/// in `[0, dim]`, their sum `dim`), then each piece copied row by row. With clamping,
/// each size is clamped into what is left of the axis.
pub fn split_run_time(ctx: &mut LowerCtx, axis: usize, parts: usize) -> LowerResult {
    let (x, sizes) = (ctx.input(0)?, ctx.input(1)?);
    let on_bad = ctx.on_bad_index;
    let shape = &x.ty.shape;
    let dim = shape[axis];
    let outer: usize = shape[..axis].iter().product();
    let row = shape[axis + 1..].iter().product::<usize>() * x.ty.dtype.size();
    let pieces: Vec<Operand> = (0..parts).map(|k| ctx.output(k)).collect();
    let counts: Vec<Operand> = (0..parts).map(|k| ctx.output(parts + k)).collect();
    let b = &mut *ctx.b;
    let zero = kernel::iconst(b, 0);
    let dim_v = kernel::iconst(b, dim as i64);
    let mut lens = Vec::with_capacity(parts);
    let (mut used, mut sum) = (zero, zero);
    for k in 0..parts {
        let size = load_int(b, &sizes, k);
        let bad = b
            .ins()
            .icmp_imm_u(IntCC::UnsignedGreaterThan, size, dim as i64);
        fail_if(b, bad, on_bad);
        // Past the check each size is in [0, dim], so the sum cannot overflow.
        sum = b.ins().iadd(sum, size);
        let left = b.ins().isub(dim_v, used);
        let size = b.ins().smax(size, zero);
        let size = b.ins().smin(size, left);
        lens.push(size);
        used = b.ins().iadd(used, size);
    }
    let wrong_sum = b.ins().icmp_imm_s(IntCC::NotEqual, sum, dim as i64);
    fail_if(b, wrong_sum, on_bad);
    let mut start = zero;
    for k in 0..parts {
        let len = lens[k];
        b.ins().store(flags(), len, counts[k].ptr, 0);
        if row > 0 {
            let piece = pieces[k].ptr;
            kernel::counted_loop(b, 0, outer as i64, 1, |b, o| {
                let src_row = b.ins().imul_imm_s(o, dim as i64);
                let src_row = b.ins().iadd(src_row, start);
                let dst_row = b.ins().imul(o, len);
                kernel::range_loop(b, zero, len, |b, j| {
                    let s = b.ins().iadd(src_row, j);
                    let src = kernel::elem_addr(b, x.ptr, s, row);
                    let d = b.ins().iadd(dst_row, j);
                    let dst = kernel::elem_addr(b, piece, d, row);
                    copy_bytes(b, dst, src, row);
                });
            });
        }
        start = b.ins().iadd(start, len);
    }
    Ok(())
}

/// Choose: the index resolved (checked, or clamped) into the candidates, then the one
/// it names copied whole and its shape stored; a missing candidate fails like a bad
/// index (with clamping, the first present one is taken).
pub fn choose(ctx: &mut LowerCtx, shapes: &[Option<Vec<usize>>]) -> LowerResult {
    let index = ctx.input(0)?;
    let (y, shape_out) = (ctx.output(0), ctx.output(1));
    let candidates: Vec<Option<Operand>> = (0..shapes.len())
        .map(|i| ctx.inputs.get(1 + i).cloned().flatten())
        .collect();
    let on_bad = ctx.on_bad_index;
    let b = &mut *ctx.b;
    let v = kernel::load_elem(b, index.ty.dtype, index.ptr, 0);
    let picked = resolve(b, &index, v, shapes.len(), on_bad);
    let done = b.create_block();
    let present: Vec<(usize, &Operand)> = (candidates.iter().enumerate())
        .filter_map(|(k, c)| c.as_ref().map(|c| (k, c)))
        .collect();
    for (n, &(k, c)) in present.iter().enumerate() {
        let take = b.create_block();
        let next = b.create_block();
        let hit = b.ins().icmp_imm_s(IntCC::Equal, picked, k as i64);
        let last = n + 1 == present.len();
        match on_bad {
            OnBadIndex::Fail(fail) if last => b.ins().brif(hit, take, &[], fail, &[]),
            _ => b.ins().brif(hit, take, &[], next, &[]),
        };
        b.seal_block(take);
        b.switch_to_block(take);
        take_candidate(b, c, (&y, &shape_out));
        b.ins().jump(done, &[]);
        b.seal_block(next);
        b.switch_to_block(next);
    }
    // Reached with clamping (or a failed last compare, never taken): the first one.
    if let Some(&(_, c)) = present.first() {
        take_candidate(b, c, (&y, &shape_out));
    }
    b.ins().jump(done, &[]);
    b.seal_block(done);
    b.switch_to_block(done);
    Ok(())
}

/// Copies candidate `c` whole into `y` and stores its shape.
fn take_candidate(b: &mut FunctionBuilder, c: &Operand, (y, shape_out): (&Operand, &Operand)) {
    copy_bytes(b, y.ptr, c.ptr, c.ty.byte_size());
    for (d, &size) in c.ty.shape.iter().enumerate() {
        let size = kernel::iconst(b, size as i64);
        b.ins().store(flags(), size, shape_out.ptr, (8 * d) as i32);
    }
}
