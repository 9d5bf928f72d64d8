//! Ops whose output extent depends on the input values (NonZero, Compress, Unique,
//! NonMaxSuppression). Each output is planned at its largest extent and written densely
//! for the actual one, which the node stores in its count output (an int64 scalar) for
//! `run` to report. Every loop bound is a compile-time size or a count that cannot
//! exceed one, so no input value makes the code write past a buffer.

use crate::codegen::plan::scratch::{self, kept_columns};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, InstBuilder, Value};
use cranelift_frontend::{FunctionBuilder, Variable};

use super::indexing::{sort_key, var};
use super::movement::copy_bytes;
use super::sort;
use super::{LowerCtx, LowerResult, Operand};
use crate::codegen::kernel::{self, flags};
use crate::ir::DType;

/// Refuses element types whose elements are not whole bytes or whose order nnc does
/// not compute (float8 and the other packed codes).
fn check_dtype(op: &str, dtype: DType) -> LowerResult {
    if dtype.low_precision().is_some() || !dtype.bits().is_multiple_of(8) {
        return Err(format!("{op} of {dtype} is not supported"));
    }
    Ok(())
}

/// Whether the element at `addr` is nonzero: its bits without the sign (so -0 is zero
/// and NaN is not) for floats, any bit for the rest.
fn is_nonzero(b: &mut FunctionBuilder, dtype: DType, addr: Value) -> Value {
    let raw = b.ins().load(int_type(dtype), flags(), addr, 0);
    let raw = if dtype.is_float() {
        let magnitude = (1u64 << (dtype.bits() - 1)) - 1;
        let magnitude = b.ins().iconst(int_type(dtype), magnitude as i64);
        b.ins().band(raw, magnitude)
    } else {
        raw
    };
    b.ins().icmp_imm_u(IntCC::NotEqual, raw, 0)
}

fn int_type(dtype: DType) -> types::Type {
    match dtype.size() {
        1 => types::I8,
        2 => types::I16,
        4 => types::I32,
        _ => types::I64,
    }
}

/// `count += cond` as an i64.
fn add_flag(b: &mut FunctionBuilder, count: Variable, cond: Value) {
    let one = b.ins().uextend(types::I64, cond);
    let c = b.use_var(count);
    let c = b.ins().iadd(c, one);
    b.def_var(count, c);
}

fn store_count(b: &mut FunctionBuilder, out: &Operand, n: Value) {
    b.ins().store(flags(), n, out.ptr, 0);
}

pub fn non_zero(ctx: &mut LowerCtx, transposed: bool) -> LowerResult {
    let (x, out, count_out) = (ctx.input(0)?, ctx.output(0), ctx.output(1));
    let dtype = x.ty.dtype;
    check_dtype("NonZero", dtype)?;
    let shape = x.ty.shape.clone();
    let numel = x.ty.numel();
    let strides = kernel::strides_of(&shape);
    let elem = dtype.size();
    let b = &mut *ctx.b;
    let zero = kernel::iconst(b, 0);
    let count = var(b, zero);
    kernel::counted_loop(b, 0, numel as i64, 1, |b, i| {
        let at = kernel::elem_addr(b, x.ptr, i, elem);
        let nz = is_nonzero(b, dtype, at);
        add_flag(b, count, nz);
    });
    let n = b.use_var(count);
    store_count(b, &count_out, n);
    let column = var(b, zero);
    kernel::counted_loop(b, 0, numel as i64, 1, |b, i| {
        let at = kernel::elem_addr(b, x.ptr, i, elem);
        let nz = is_nonzero(b, dtype, at);
        kernel::if_else(
            b,
            nz,
            |b| {
                let j = b.use_var(column);
                for (a, (&d, &s)) in shape.iter().zip(&strides).enumerate() {
                    let q = b.ins().udiv_imm_u(i, s as i64);
                    let coord = b.ins().urem_imm_u(q, d as i64);
                    let at = if transposed {
                        let row = b.ins().imul_imm_s(j, shape.len() as i64);
                        b.ins().iadd_imm_s(row, a as i64)
                    } else {
                        let row = b.ins().imul_imm_s(n, a as i64);
                        b.ins().iadd(row, j)
                    };
                    let dst = kernel::elem_addr(b, out.ptr, at, 8);
                    b.ins().store(flags(), coord, dst, 0);
                }
                let next = b.ins().iadd_imm_s(j, 1);
                b.def_var(column, next);
            },
            |_| {},
        );
    });
    Ok(())
}

/// `(outer, dim, inner)` around `axis` of `shape`.
fn around(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (
        shape[..axis].iter().product(),
        shape[axis],
        shape[axis + 1..].iter().product(),
    )
}

pub fn compress(ctx: &mut LowerCtx, axis: Option<usize>) -> LowerResult {
    let (x, cond, y, count_out) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0), ctx.output(1));
    check_dtype("Compress", x.ty.dtype)?;
    let (outer, dim, inner) = match axis {
        None => (1, x.ty.numel(), 1),
        Some(a) => around(&x.ty.shape, a),
    };
    let kept_dim = dim.min(cond.ty.numel());
    let row = inner * x.ty.dtype.size();
    let b = &mut *ctx.b;
    let zero = kernel::iconst(b, 0);
    let count = var(b, zero);
    kernel::counted_loop(b, 0, kept_dim as i64, 1, |b, i| {
        let at = kernel::elem_addr(b, cond.ptr, i, 1);
        let c = is_nonzero(b, DType::Bool, at);
        add_flag(b, count, c);
    });
    let n = b.use_var(count);
    store_count(b, &count_out, n);
    if row == 0 {
        return Ok(());
    }
    let kept = var(b, zero);
    kernel::counted_loop(b, 0, outer as i64, 1, |b, o| {
        let src_base = b.ins().imul_imm_s(o, (dim * row) as i64);
        let src_base = b.ins().iadd(x.ptr, src_base);
        kernel::counted_loop(b, 0, kept_dim as i64, 1, |b, i| {
            let at = kernel::elem_addr(b, cond.ptr, i, 1);
            let c = is_nonzero(b, DType::Bool, at);
            kernel::if_else(
                b,
                c,
                |b| {
                    let k = b.use_var(kept);
                    let src = kernel::elem_addr(b, src_base, i, row);
                    let dst = kernel::elem_addr(b, y.ptr, k, row);
                    copy_bytes(b, dst, src, row);
                    let next = b.ins().iadd_imm_s(k, 1);
                    b.def_var(kept, next);
                },
                |_| {},
            );
        });
    });
    Ok(())
}

/// Compares slices `i` and `j` of `x` (`[outer, dim, inner]`) in numpy's order (the
/// axis moved to the front, the rest row-major) by their elements' sort keys:
/// `(equal, less)` with `less` meaning slice i sorts before slice j.
fn compare_slices(
    b: &mut FunctionBuilder,
    x: &Operand,
    (outer, dim, inner): (usize, usize, usize),
    i: Value,
    j: Value,
) -> (Value, Value) {
    let dtype = x.ty.dtype;
    let elem = dtype.size();
    // 0: equal so far, 1: i before j, 2: j before i.
    let zero = kernel::iconst(b, 0);
    let state = var(b, zero);
    let (bi, bj) = (
        b.ins().imul_imm_s(i, inner as i64),
        b.ins().imul_imm_s(j, inner as i64),
    );
    kernel::nested_loop(b, &[outer, inner], &mut |b, idx| {
        let base = b.ins().imul_imm_s(idx[0], (dim * inner) as i64);
        let base = b.ins().iadd(base, idx[1]);
        let (ai, aj) = (b.ins().iadd(base, bi), b.ins().iadd(base, bj));
        let (pi, pj) = (
            kernel::elem_addr(b, x.ptr, ai, elem),
            kernel::elem_addr(b, x.ptr, aj, elem),
        );
        let (vi, vj) = (
            kernel::load_elem(b, dtype, pi, 0),
            kernel::load_elem(b, dtype, pj, 0),
        );
        let (ki, kj) = (sort_key(b, dtype, vi), sort_key(b, dtype, vj));
        let s = b.use_var(state);
        let undecided = b.ins().icmp_imm_u(IntCC::Equal, s, 0);
        let lt = b.ins().icmp(IntCC::UnsignedLessThan, ki, kj);
        let gt = b.ins().icmp(IntCC::UnsignedGreaterThan, ki, kj);
        let (one, two) = (kernel::iconst(b, 1), kernel::iconst(b, 2));
        let decided = b.ins().select(gt, two, s);
        let decided = b.ins().select(lt, one, decided);
        let s = b.ins().select(undecided, decided, s);
        b.def_var(state, s);
    });
    let s = b.use_var(state);
    (
        b.ins().icmp_imm_u(IntCC::Equal, s, 0),
        b.ins().icmp_imm_u(IntCC::Equal, s, 1),
    )
}

/// Unique in three passes over the slices: each slice's first equal slice (into
/// scratch), the distinct ones' positions (sorted: how many distinct slices sort
/// before it; else how many come before it) with Y, indices and zeroed counts written
/// there, then every slice's position (inverse) and the counts. Quadratic in the
/// slices and needing no sort: the node suite's sizes and post-processing ones.
pub fn unique(ctx: &mut LowerCtx, axis: Option<usize>, sorted: bool) -> LowerResult {
    let x = ctx.input(0)?;
    let (y, indices, inverse, counts, count_out) = (
        ctx.output(0),
        ctx.output(1),
        ctx.output(2),
        ctx.output(3),
        ctx.output(4),
    );
    check_dtype("Unique", x.ty.dtype)?;
    let geometry = match axis {
        None => (1, x.ty.numel(), 1),
        Some(a) => around(&x.ty.shape, a),
    };
    let (outer, dim, inner) = geometry;
    if dim.saturating_mul(dim).saturating_mul(outer * inner) > MAX_QUADRATIC_WORK {
        return Err(format!(
            "Unique over {dim} slices of {} elements: nnc's kernel compares every pair, at most {MAX_QUADRATIC_WORK} element comparisons",
            outer * inner
        ));
    }
    let first = ctx.scratch.ok_or("Unique needs scratch")?;
    let row = inner * x.ty.dtype.size();
    let b = &mut *ctx.b;
    let zero = kernel::iconst(b, 0);
    // Pass 1: first[i] = the least j with slice j equal to slice i.
    kernel::counted_loop(b, 0, dim as i64, 1, |b, i| {
        let f = var(b, i);
        kernel::range_loop(b, zero, i, |b, j| {
            let (equal, _) = compare_slices(b, &x, geometry, j, i);
            let cur = b.use_var(f);
            let unset = b.ins().icmp(IntCC::Equal, cur, i);
            let take = b.ins().band(equal, unset);
            let nf = b.ins().select(take, j, cur);
            b.def_var(f, nf);
        });
        let fv = b.use_var(f);
        let dst = kernel::elem_addr(b, first, i, 8);
        b.ins().store(flags(), fv, dst, 0);
    });
    let is_first = |b: &mut FunctionBuilder, i: Value| {
        let at = kernel::elem_addr(b, first, i, 8);
        let f = b.ins().load(types::I64, flags(), at, 0);
        b.ins().icmp(IntCC::Equal, f, i)
    };
    let distinct = var(b, zero);
    kernel::counted_loop(b, 0, dim as i64, 1, |b, i| {
        let yes = is_first(b, i);
        add_flag(b, distinct, yes);
    });
    let n = b.use_var(distinct);
    store_count(b, &count_out, n);
    // Pass 2: the distinct slices' positions.
    kernel::counted_loop(b, 0, dim as i64, 1, |b, i| {
        let yes = is_first(b, i);
        kernel::if_else(
            b,
            yes,
            |b| {
                let pos = var(b, zero);
                let end = if sorted {
                    kernel::iconst(b, dim as i64)
                } else {
                    i
                };
                kernel::range_loop(b, zero, end, |b, k| {
                    let k_first = is_first(b, k);
                    let before = if sorted {
                        let (_, less) = compare_slices(b, &x, geometry, k, i);
                        b.ins().band(k_first, less)
                    } else {
                        k_first
                    };
                    add_flag(b, pos, before);
                });
                let p = b.use_var(pos);
                let dst = kernel::elem_addr(b, inverse.ptr, i, 8);
                b.ins().store(flags(), p, dst, 0);
                let dst = kernel::elem_addr(b, indices.ptr, p, 8);
                b.ins().store(flags(), i, dst, 0);
                let dst = kernel::elem_addr(b, counts.ptr, p, 8);
                b.ins().store(flags(), zero, dst, 0);
                if row > 0 {
                    kernel::counted_loop(b, 0, outer as i64, 1, |b, o| {
                        let src = b.ins().imul_imm_s(o, dim as i64);
                        let src = b.ins().iadd(src, i);
                        let src = kernel::elem_addr(b, x.ptr, src, row);
                        let dst = b.ins().imul(o, n);
                        let dst = b.ins().iadd(dst, p);
                        let dst = kernel::elem_addr(b, y.ptr, dst, row);
                        copy_bytes(b, dst, src, row);
                    });
                }
            },
            |_| {},
        );
    });
    // Pass 3: every slice's position (its first's, set in pass 2) and the counts.
    kernel::counted_loop(b, 0, dim as i64, 1, |b, j| {
        let at = kernel::elem_addr(b, first, j, 8);
        let f = b.ins().load(types::I64, flags(), at, 0);
        let at = kernel::elem_addr(b, inverse.ptr, f, 8);
        let p = b.ins().load(types::I64, flags(), at, 0);
        let dst = kernel::elem_addr(b, inverse.ptr, j, 8);
        b.ins().store(flags(), p, dst, 0);
        let at = kernel::elem_addr(b, counts.ptr, p, 8);
        let c = b.ins().load(types::I64, flags(), at, 0);
        let c = b.ins().iadd_imm_s(c, 1);
        b.ins().store(flags(), c, at, 0);
    });
    Ok(())
}

/// The most element comparisons a quadratic kernel here may need (about a second):
/// past it, compiling is refused rather than a run taking hours.
const MAX_QUADRATIC_WORK: usize = 1 << 30;

/// A reduction over axes read at run time: the set they name (each normalized and
/// checked as an index into the rank; a repeated axis fails too) becomes a bit mask,
/// and the reduction compiled for that set runs, writing its output densely and its
/// shape into output 1. In `--index-checks clamp` libraries an invalid set runs the
/// last set's reduction.
pub fn reduce_run_time_axes(
    ctx: &mut LowerCtx,
    kind: crate::ops::ReduceKind,
    keepdims: bool,
    count: usize,
) -> LowerResult {
    let (x, axes_in, shape_out) = (ctx.input(0)?, ctx.input(1)?, ctx.output(1));
    let rank = x.ty.rank();
    let sets = crate::ops::infer::axis_sets(rank, count);
    if sets.len() > MAX_AXIS_SETS {
        return Err(format!(
            "a reduction over {count} of {rank} axes given at run time has {} possible sets; nnc compiles at most {MAX_AXIS_SETS}",
            sets.len()
        ));
    }
    let mask = axes_mask(ctx, &axes_in, count, rank);
    let dtype = x.ty.dtype;
    reduce_one_of(ctx, &sets, mask, (kind, keepdims, dtype), &shape_out)
}

/// The bit mask of the `count` axes `axes_in` holds, each normalized and checked as an
/// index into `rank` axes; a repeated axis fails too (or, clamping, is kept once).
fn axes_mask(ctx: &mut LowerCtx, axes_in: &Operand, count: usize, rank: usize) -> Value {
    let on_bad = ctx.on_bad_index;
    let b = &mut *ctx.b;
    let mut mask = kernel::iconst(b, 0);
    for l in 0..count {
        let at = kernel::iconst(b, l as i64);
        let at = kernel::elem_addr(b, axes_in.ptr, at, axes_in.ty.dtype.size());
        let a = kernel::load_elem(b, axes_in.ty.dtype, at, 0);
        let a = super::index_check::resolve(b, axes_in, a, rank, on_bad);
        let one = kernel::iconst(b, 1);
        let bit = b.ins().ishl(one, a);
        mask = b.ins().bor(mask, bit);
    }
    if let super::index_check::OnBadIndex::Fail(fail) = on_bad {
        // A repeated axis leaves fewer bits than axes.
        let bits = b.ins().popcnt(mask);
        let repeated = b.ins().icmp_imm_u(IntCC::NotEqual, bits, count as i64);
        let ok = b.create_block();
        b.ins().brif(repeated, fail, &[], ok, &[]);
        b.seal_block(ok);
        b.switch_to_block(ok);
    }
    mask
}

/// Squeeze / Unsqueeze with axes read at run time: the data copied as it is, the shape
/// for the set of axes stored in output 1; a set with no shape (squeezing an axis that
/// is not 1) fails as a bad index, or with clamping keeps the first shape.
pub fn reshape_by_axes(
    ctx: &mut LowerCtx,
    count: usize,
    axes_rank: usize,
    shapes: &[(u64, Vec<usize>)],
) -> LowerResult {
    let (x, axes_in, y, shape_out) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0), ctx.output(1));
    let mask = axes_mask(ctx, &axes_in, count, axes_rank);
    let fail = match ctx.on_bad_index {
        super::index_check::OnBadIndex::Fail(fail) => Some(fail),
        super::index_check::OnBadIndex::Clamp => None,
    };
    let b = &mut *ctx.b;
    let done = b.create_block();
    for (k, (bits, shape)) in shapes.iter().enumerate() {
        let last = k + 1 == shapes.len();
        let next = b.create_block();
        let store = b.create_block();
        let hit = b.ins().icmp_imm_u(IntCC::Equal, mask, *bits as i64);
        let miss = match (last, fail) {
            (true, Some(fail)) => fail,
            _ => next,
        };
        if last && fail.is_none() {
            b.ins().jump(store, &[]);
        } else {
            b.ins().brif(hit, store, &[], miss, &[]);
        }
        b.seal_block(store);
        b.switch_to_block(store);
        for (d, &size) in shape.iter().enumerate() {
            let v = kernel::iconst(b, size as i64);
            b.ins().store(flags(), v, shape_out.ptr, (8 * d) as i32);
        }
        b.ins().jump(done, &[]);
        b.seal_block(next);
        b.switch_to_block(next);
    }
    // Reached only past a failed last match (or with no shapes): nothing to store; with
    // clamping the last shape is stored whatever the set.
    b.ins().jump(done, &[]);
    b.seal_block(done);
    b.switch_to_block(done);
    copy_bytes(b, y.ptr, x.ptr, x.ty.byte_size());
    Ok(())
}

/// The most axis sets a reduction over axes given at run time compiles.
const MAX_AXIS_SETS: usize = 64;

/// Emits `if mask == sets[0] { reduce over it } else if ... else { reduce over the
/// last }`, each branch typing output 0 for its set.
fn reduce_one_of(
    ctx: &mut LowerCtx,
    sets: &[Vec<usize>],
    mask: Value,
    (kind, keepdims, dtype): (crate::ops::ReduceKind, bool, DType),
    shape_out: &Operand,
) -> LowerResult {
    let Some((set, rest)) = sets.split_first() else {
        return Ok(());
    };
    let run = |ctx: &mut LowerCtx| -> LowerResult {
        let x = ctx.input(0)?;
        let shape = crate::ops::infer::reduced_shape(&x.ty.shape, set, keepdims);
        ctx.outputs[0].ty = crate::ir::TensorType::new(dtype, shape.clone());
        let attrs = crate::ops::ReduceAttrs {
            kind,
            axes: set.clone(),
            keepdims,
        };
        super::reduce::reduce(ctx, &attrs)?;
        for (d, &size) in shape.iter().enumerate() {
            let v = kernel::iconst(ctx.b, size as i64);
            ctx.b.ins().store(flags(), v, shape_out.ptr, (8 * d) as i32);
        }
        Ok(())
    };
    if rest.is_empty() {
        return run(ctx);
    }
    let bits = crate::ops::infer::axes_mask(set);
    let is_set = ctx.b.ins().icmp_imm_u(IntCC::Equal, mask, bits as i64);
    ctx.branch(is_set, run, |ctx| {
        reduce_one_of(ctx, rest, mask, (kind, keepdims, dtype), shape_out)
    })
}

/// One box's `(min, max)` along x, then along y, as the reference computes them.
fn box_extent(b: &mut FunctionBuilder, at: Value, center_point_box: bool) -> [(Value, Value); 2] {
    let c: Vec<Value> = (0..4)
        .map(|k| b.ins().load(types::F32, flags(), at, 4 * k))
        .collect();
    if center_point_box {
        let two = b.ins().f32const(2.0);
        let hw = b.ins().fdiv(c[2], two);
        let hh = b.ins().fdiv(c[3], two);
        [
            (b.ins().fsub(c[0], hw), b.ins().fadd(c[0], hw)),
            (b.ins().fsub(c[1], hh), b.ins().fadd(c[1], hh)),
        ]
    } else {
        let mut ordered = |p: Value, q: Value| {
            // max_min: (q, p) when p >= q.
            let ge = b.ins().fcmp(FloatCC::GreaterThanOrEqual, p, q);
            (b.ins().select(ge, q, p), b.ins().select(ge, p, q))
        };
        [ordered(c[1], c[3]), ordered(c[0], c[2])]
    }
}

/// A box as the IoU reads it: its `(min, max)` along x and along y, and its area.
type BoxExtent = ([(Value, Value); 2], Value);

/// [`box_extent`] of the box at `at`, with its area.
fn box_with_area(b: &mut FunctionBuilder, at: Value, center_point_box: bool) -> BoxExtent {
    let e = box_extent(b, at, center_point_box);
    let w = b.ins().fsub(e[0].1, e[0].0);
    let h = b.ins().fsub(e[1].1, e[1].0);
    (e, b.ins().fmul(w, h))
}

/// Stores `e` as kept box `k` of the columns at `kept`, each `lanes` long.
fn store_extent(b: &mut FunctionBuilder, e: &BoxExtent, kept: Value, k: Value, lanes: usize) {
    let ([(x0, x1), (y0, y1)], area) = *e;
    let at = kernel::elem_addr(b, kept, k, 4);
    for (c, v) in [x0, x1, y0, y1, area].into_iter().enumerate() {
        b.ins().store(flags(), v, at, (c * lanes * 4) as i32);
    }
}

/// Whether one of kept boxes `k..k + 4` (those below `kept_n`) suppresses `a`:
/// [`suppresses`] lane by lane.
fn any_suppresses(
    b: &mut FunctionBuilder,
    a: &BoxExtent,
    (kept, lanes): (Value, usize),
    k: Value,
    kept_n: Value,
    threshold: Value,
) -> Value {
    let at = kernel::elem_addr(b, kept, k, 4);
    let col = |b: &mut FunctionBuilder, c: usize| {
        b.ins()
            .load(types::F32X4, flags(), at, (c * lanes * 4) as i32)
    };
    let c: Vec<Value> = (0..5).map(|i| col(b, i)).collect();
    let splat = |b: &mut FunctionBuilder, v: Value| b.ins().splat(types::F32X4, v);
    let ([ax, ay], area_a) = *a;
    let a_v = [ax.0, ax.1, ay.0, ay.1, area_a].map(|v| splat(b, v));
    let other: BoxExtent = ([(c[0], c[1]), (c[2], c[3])], c[4]);
    let mine: BoxExtent = ([(a_v[0], a_v[1]), (a_v[2], a_v[3])], a_v[4]);
    // Lanes past the kept boxes hold stale values.
    let first = b.ins().ireduce(types::I32, k);
    let first = b.ins().splat(types::I32X4, first);
    let lane = b.func.dfg.constants.insert(
        [0u32, 1, 2, 3]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>()
            .into(),
    );
    let lane = b.ins().vconst(types::I32X4, lane);
    let index = b.ins().iadd(first, lane);
    let n = b.ins().ireduce(types::I32, kept_n);
    let n = b.ins().splat(types::I32X4, n);
    let live = b.ins().icmp(IntCC::SignedLessThan, index, n);
    // Most pairs do not overlap: `min(a1, c1) > max(a0, c0)` holds exactly when each
    // end is past each start (NaN failing both), four compares where the IoU takes
    // far more; the IoU only when a lane overlaps.
    let mut overlaps = live;
    for ((a0, a1), (c0, c1)) in [(mine.0[0], other.0[0]), (mine.0[1], other.0[1])] {
        for (end, start) in [(a1, a0), (a1, c0), (c1, a0), (c1, c0)] {
            let past = b.ins().fcmp(FloatCC::GreaterThan, end, start);
            overlaps = b.ins().band(overlaps, past);
        }
    }
    let any = b.ins().vany_true(overlaps);
    let zero = b.ins().iconst(types::I8, 0);
    let result = var(b, zero);
    kernel::if_else(
        b,
        any,
        |b| {
            let t = splat(b, threshold);
            let hit = suppresses(b, &mine, &other, t);
            let hit = b.ins().band(hit, live);
            let hit = b.ins().vany_true(hit);
            b.def_var(result, hit);
        },
        |_| {},
    );
    b.use_var(result)
}

/// Whether box `a` suppresses box `c`: their IoU exceeds `threshold`, with the
/// reference's early outs (no overlap, an empty box) as false.
fn suppresses(b: &mut FunctionBuilder, a: &BoxExtent, c: &BoxExtent, threshold: Value) -> Value {
    let ([ax, ay], area_a) = *a;
    let ([cx, cy], area_c) = *c;
    let lo_x = b.ins().fmax(ax.0, cx.0);
    let hi_x = b.ins().fmin(ax.1, cx.1);
    let lo_y = b.ins().fmax(ay.0, cy.0);
    let hi_y = b.ins().fmin(ay.1, cy.1);
    let overlap_x = b.ins().fcmp(FloatCC::GreaterThan, hi_x, lo_x);
    let overlap_y = b.ins().fcmp(FloatCC::GreaterThan, hi_y, lo_y);
    let w = b.ins().fsub(hi_x, lo_x);
    let h = b.ins().fsub(hi_y, lo_y);
    let inter = b.ins().fmul(w, h);
    let zero = b.ins().f32const(0.0);
    let zero = match b.func.dfg.value_type(inter) {
        types::F32 => zero,
        vector => b.ins().splat(vector, zero),
    };
    let inter_pos = b.ins().fcmp(FloatCC::GreaterThan, inter, zero);
    let sum = b.ins().fadd(area_a, area_c);
    let union = b.ins().fsub(sum, inter);
    let pos_a = b.ins().fcmp(FloatCC::GreaterThan, area_a, zero);
    let pos_c = b.ins().fcmp(FloatCC::GreaterThan, area_c, zero);
    let pos_u = b.ins().fcmp(FloatCC::GreaterThan, union, zero);
    let iou = b.ins().fdiv(inter, union);
    let over = b.ins().fcmp(FloatCC::GreaterThan, iou, threshold);
    let ok = b.ins().band(overlap_x, overlap_y);
    let ok = b.ins().band(ok, inter_pos);
    let ok = b.ins().band(ok, pos_a);
    let ok = b.ins().band(ok, pos_c);
    let ok = b.ins().band(ok, pos_u);
    b.ins().band(ok, over)
}

/// Loads an optional one-element input, or `default`.
fn scalar_or(
    b: &mut FunctionBuilder,
    input: &Option<Operand>,
    ty: types::Type,
    default: Value,
) -> Value {
    match input {
        Some(op) => b.ins().load(ty, flags(), op.ptr, 0),
        None => default,
    }
}

/// NonMaxSuppression per batch and class: the best remaining candidate (highest score
/// key, ties to the lower index) is taken each round and kept unless a kept box
/// suppresses it, until max_output are kept or no candidate is left.
pub fn non_max_suppression(
    ctx: &mut LowerCtx,
    center_point_box: bool,
    per_class: usize,
) -> LowerResult {
    let (boxes, scores) = (ctx.input(0)?, ctx.input(1)?);
    let limits = [
        ctx.inputs.get(2).cloned().flatten(),
        ctx.inputs.get(3).cloned().flatten(),
        ctx.inputs.get(4).cloned().flatten(),
    ];
    let (out, count_out) = (ctx.output(0), ctx.output(1));
    let (batches, n) = (boxes.ty.shape[0], boxes.ty.shape[1]);
    let classes = scores.ty.shape[1];
    // Each candidate is checked against the kept boxes: n · per_class per class.
    let work = (batches * classes)
        .saturating_mul(n)
        .saturating_mul(per_class.max(1));
    if work > MAX_QUADRATIC_WORK {
        return Err(format!(
            "NonMaxSuppression of {n} boxes keeping up to {per_class} per class over {} batch-classes: at most {MAX_QUADRATIC_WORK} box visits (give max_output_boxes_per_class as a constant to bound it)",
            batches * classes
        ));
    }
    let scratch = ctx.scratch;
    let b = &mut *ctx.b;
    let zero = kernel::iconst(b, 0);
    let rows = var(b, zero);
    if batches * classes * per_class == 0 {
        store_count(b, &count_out, zero);
        return Ok(());
    }
    let scratch = scratch.ok_or("NonMaxSuppression needs scratch")?;
    // The boxes the run has (input 5, when only the run knows it), at most the n
    // planned.
    let boxes_had = match ctx.inputs.get(5).cloned().flatten() {
        Some(c) => {
            let raw = b.ins().load(types::I64, flags(), c.ptr, 0);
            let r = b.ins().smax(raw, zero);
            let planned = kernel::iconst(b, n as i64);
            b.ins().smin(r, planned)
        }
        None => kernel::iconst(b, n as i64),
    };
    // The candidates as (descending score key, box) pairs, sorted once; then each in
    // turn is kept unless a kept box suppresses it.
    let pairs = scratch;
    let sort_scratch = b.ins().iadd_imm_s(scratch, (n * 8) as i64);
    let kept = b
        .ins()
        .iadd_imm_s(sort_scratch, scratch::sort_scratch(n) as i64);
    let lanes = kept_columns(per_class);
    let max_out = scalar_or(b, &limits[0], types::I64, zero);
    let max_out = b.ins().smax(max_out, zero);
    let bound = kernel::iconst(b, per_class as i64);
    let max_out = b.ins().smin(max_out, bound);
    let f_zero = b.ins().f32const(0.0);
    let iou = scalar_or(b, &limits[1], types::F32, f_zero);
    let score_threshold = limits[2].clone();
    kernel::nested_loop(b, &[batches, classes], &mut |b, idx| {
        let (bi, ci) = (idx[0], idx[1]);
        let box_base = b.ins().imul_imm_s(bi, (n * 16) as i64);
        let box_base = b.ins().iadd(boxes.ptr, box_base);
        let s_row = b.ins().imul_imm_s(bi, classes as i64);
        let s_row = b.ins().iadd(s_row, ci);
        let s_row = b.ins().imul_imm_s(s_row, (n * 4) as i64);
        let s_base = b.ins().iadd(scores.ptr, s_row);
        let candidates = var(b, zero);
        kernel::dynamic_loop(b, boxes_had, |b, i| {
            let at = kernel::elem_addr(b, s_base, i, 4);
            let s = b.ins().load(types::F32, flags(), at, 0);
            let flag = match &score_threshold {
                Some(t) => {
                    let thr = b.ins().load(types::F32, flags(), t.ptr, 0);
                    let gt = b.ins().fcmp(FloatCC::GreaterThan, s, thr);
                    b.ins().uextend(types::I64, gt)
                }
                None => kernel::iconst(b, 1),
            };
            // Written always, counted only when a candidate: no branch.
            let key = sort_key(b, DType::F32, s);
            let key = b.ins().bxor_imm_u(key, 0xffff_ffff);
            let key = b.ins().ishl_imm_u(key, 32);
            let pair = b.ins().bor(key, i);
            let m = b.use_var(candidates);
            let dst = kernel::elem_addr(b, pairs, m, 8);
            b.ins().store(flags(), pair, dst, 0);
            let m = b.ins().iadd(m, flag);
            b.def_var(candidates, m);
        });
        let m = b.use_var(candidates);
        sort::sort_by_key(b, pairs, sort_scratch, m);
        let kept_n = var(b, zero);
        let next = var(b, zero);
        kernel::while_loop(
            b,
            |b| {
                let j = b.use_var(next);
                let k = b.use_var(kept_n);
                let any = b.ins().icmp(IntCC::SignedLessThan, j, m);
                let room = b.ins().icmp(IntCC::SignedLessThan, k, max_out);
                b.ins().band(any, room)
            },
            |b| {
                let j = b.use_var(next);
                let at = kernel::elem_addr(b, pairs, j, 8);
                let pair = b.ins().load(types::I64, flags(), at, 0);
                let pick = b.ins().band_imm_u(pair, 0xffff_ffff);
                let j = b.ins().iadd_imm_s(j, 1);
                b.def_var(next, j);
                let pick_box = kernel::elem_addr(b, box_base, pick, 16);
                let picked = box_with_area(b, pick_box, center_point_box);
                // The kept boxes in the order kept, until one suppresses it.
                let suppressed = var(b, zero);
                let k_at = var(b, zero);
                kernel::while_loop(
                    b,
                    |b| {
                        let (k, s) = (b.use_var(k_at), b.use_var(suppressed));
                        let k_end = b.use_var(kept_n);
                        let more = b.ins().icmp(IntCC::SignedLessThan, k, k_end);
                        let none = b.ins().icmp_imm_u(IntCC::Equal, s, 0);
                        b.ins().band(more, none)
                    },
                    |b| {
                        let k = b.use_var(k_at);
                        let k_end = b.use_var(kept_n);
                        let s = any_suppresses(b, &picked, (kept, lanes), k, k_end, iou);
                        let s = b.ins().uextend(types::I64, s);
                        b.def_var(suppressed, s);
                        let k = b.ins().iadd_imm_s(k, 4);
                        b.def_var(k_at, k);
                    },
                );
                let s = b.use_var(suppressed);
                let keep = b.ins().icmp_imm_u(IntCC::Equal, s, 0);
                kernel::if_else(
                    b,
                    keep,
                    |b| {
                        let k = b.use_var(kept_n);
                        store_extent(b, &picked, kept, k, lanes);
                        let k = b.ins().iadd_imm_s(k, 1);
                        b.def_var(kept_n, k);
                        let r = b.use_var(rows);
                        let dst = kernel::elem_addr(b, out.ptr, r, 24);
                        b.ins().store(flags(), bi, dst, 0);
                        b.ins().store(flags(), ci, dst, 8);
                        b.ins().store(flags(), pick, dst, 16);
                        let r = b.ins().iadd_imm_s(r, 1);
                        b.def_var(rows, r);
                    },
                    |_| {},
                );
            },
        );
    });
    let r = b.use_var(rows);
    store_count(b, &count_out, r);
    Ok(())
}
