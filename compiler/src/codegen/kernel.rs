//! Building blocks for writing kernels in CLIF: element loads and stores per dtype, the
//! arithmetic domain each dtype computes in, counted loops and address arithmetic.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, BlockArg, InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::FunctionBuilder;

use crate::ir::DType;

/// The pointer type of both supported targets.
pub const PTR: Type = types::I64;

/// How a dtype's elements are held in registers while computing. Narrow floats compute
/// in f32; every integer type (and bool, as 0/1) in i64 with its signedness noted, which
/// gives numpy's wrap-around semantics once the result is truncated on store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Domain {
    F32,
    F64,
    Int { signed: bool },
}

pub fn domain(d: DType) -> Domain {
    match d {
        DType::F32 | DType::F16 | DType::BF16 => Domain::F32,
        DType::F64 => Domain::F64,
        d => Domain::Int {
            signed: d.is_signed_int(),
        },
    }
}

pub fn domain_type(d: Domain) -> Type {
    match d {
        Domain::F32 => types::F32,
        Domain::F64 => types::F64,
        Domain::Int { .. } => types::I64,
    }
}

/// The type elements have in memory.
pub fn mem_type(d: DType) -> Type {
    match d.size() {
        1 => types::I8,
        2 => types::I16,
        4 if d == DType::F32 => types::F32,
        4 => types::I32,
        _ if d == DType::F64 => types::F64,
        _ => types::I64,
    }
}

/// Non-trapping, but not `aligned`: callers' buffers need only their element alignment,
/// and legacy-SSE memory operands would fault on unaligned vectors.
pub fn flags() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

/// Loads one element at `addr + offset` into its computation domain.
pub fn load_elem(b: &mut FunctionBuilder, d: DType, addr: Value, offset: i32) -> Value {
    let raw = b.ins().load(mem_type(d), flags(), addr, offset);
    to_domain(b, d, raw)
}

/// Converts a raw memory value into the computation domain.
pub fn to_domain(b: &mut FunctionBuilder, d: DType, raw: Value) -> Value {
    match d {
        DType::F32 | DType::F64 | DType::I64 | DType::U64 => raw,
        DType::F16 => f16_bits_to_f32(b, raw),
        DType::BF16 => {
            let w = b.ins().uextend(types::I32, raw);
            let w = b.ins().ishl_imm_u(w, 16);
            b.ins().bitcast(types::F32, MemFlagsData::new(), w)
        }
        d if d.is_signed_int() => b.ins().sextend(types::I64, raw),
        _ => b.ins().uextend(types::I64, raw),
    }
}

/// Stores a computation-domain value as element type `d`.
pub fn store_elem(b: &mut FunctionBuilder, d: DType, v: Value, addr: Value, offset: i32) {
    let raw = from_domain(b, d, v);
    b.ins().store(flags(), raw, addr, offset);
}

pub fn from_domain(b: &mut FunctionBuilder, d: DType, v: Value) -> Value {
    match d {
        DType::F32 | DType::F64 | DType::I64 | DType::U64 => v,
        DType::F16 => f32_to_f16_bits(b, v),
        DType::BF16 => f32_to_bf16_bits(b, v),
        DType::Bool => {
            let nz = b.ins().icmp_imm_s(IntCC::NotEqual, v, 0);
            nz
        }
        _ => b.ins().ireduce(mem_type(d), v),
    }
}

/// IEEE half → single with integer operations only (Cranelift has no f16 conversions
/// on every target): shift the exponent/mantissa into place, rescale by 2^112 (which
/// also normalizes subnormals), and force the exponent for inf/NaN.
fn f16_bits_to_f32(b: &mut FunctionBuilder, h: Value) -> Value {
    let h = b.ins().uextend(types::I32, h);
    let sign = b.ins().band_imm_u(h, 0x8000);
    let sign = b.ins().ishl_imm_u(sign, 16);
    let mag = b.ins().band_imm_u(h, 0x7fff);
    let shifted = b.ins().ishl_imm_u(mag, 13);
    let f = b.ins().bitcast(types::F32, MemFlagsData::new(), shifted);
    let scale = b.ins().f32const(f32::from_bits(0x7780_0000)); // 2^112
    let scaled = b.ins().fmul(f, scale);
    let scaled = b.ins().bitcast(types::I32, MemFlagsData::new(), scaled);
    let inf_nan = b.ins().bor_imm_u(shifted, 0x7f80_0000);
    let is_special = b
        .ins()
        .icmp_imm_s(IntCC::UnsignedGreaterThanOrEqual, mag, 0x7c00);
    let bits = b.ins().select(is_special, inf_nan, scaled);
    let bits = b.ins().bor(bits, sign);
    b.ins().bitcast(types::F32, MemFlagsData::new(), bits)
}

/// Single → IEEE half, round to nearest even, with integer operations only.
fn f32_to_f16_bits(b: &mut FunctionBuilder, f: Value) -> Value {
    let x = b.ins().bitcast(types::I32, MemFlagsData::new(), f);
    let sign = b.ins().ushr_imm_u(x, 16);
    let sign = b.ins().band_imm_u(sign, 0x8000);
    let mag = b.ins().band_imm_u(x, 0x7fff_ffff);
    // Normal range: rebias the exponent (127 → 15) and round the 13 dropped bits.
    let rebiased = b.ins().iadd_imm_s(mag, -((127 - 15) << 23));
    let lsb = b.ins().ushr_imm_u(rebiased, 13);
    let lsb = b.ins().band_imm_u(lsb, 1);
    let rounded = b.ins().iadd_imm_s(rebiased, 0xfff);
    let rounded = b.ins().iadd(rounded, lsb);
    let normal = b.ins().ushr_imm_u(rounded, 13);
    // Subnormal range (|x| < 2^-14): let the FPU align the mantissa by adding 0.5
    // (2^-1), whose ulp is 2^-24, the f16 subnormal step; round-to-nearest-even for free.
    let half = b.ins().f32const(0.5);
    let absf = b.ins().bitcast(types::F32, MemFlagsData::new(), mag);
    let sub = b.ins().fadd(absf, half);
    let sub = b.ins().bitcast(types::I32, MemFlagsData::new(), sub);
    let half_bits = b.ins().iconst(types::I32, 0x3f00_0000);
    let sub = b.ins().isub(sub, half_bits);
    let is_sub = b
        .ins()
        .icmp_imm_s(IntCC::UnsignedLessThan, mag, 0x3880_0000);
    let v = b.ins().select(is_sub, sub, normal);
    // Overflow → inf; NaN → quiet NaN.
    let is_over = b
        .ins()
        .icmp_imm_s(IntCC::UnsignedGreaterThanOrEqual, mag, 0x477f_f000);
    let inf = b.ins().iconst(types::I32, 0x7c00);
    let v = b.ins().select(is_over, inf, v);
    let is_nan = b
        .ins()
        .icmp_imm_s(IntCC::UnsignedGreaterThan, mag, 0x7f80_0000);
    let nan = b.ins().iconst(types::I32, 0x7e00);
    let v = b.ins().select(is_nan, nan, v);
    let v = b.ins().bor(v, sign);
    b.ins().ireduce(types::I16, v)
}

/// Single → bfloat16, round to nearest even (NaN stays NaN).
fn f32_to_bf16_bits(b: &mut FunctionBuilder, f: Value) -> Value {
    let x = b.ins().bitcast(types::I32, MemFlagsData::new(), f);
    let lsb = b.ins().ushr_imm_u(x, 16);
    let lsb = b.ins().band_imm_u(lsb, 1);
    let r = b.ins().iadd_imm_s(x, 0x7fff);
    let r = b.ins().iadd(r, lsb);
    let r = b.ins().ushr_imm_u(r, 16);
    let mag = b.ins().band_imm_u(x, 0x7fff_ffff);
    let is_nan = b
        .ins()
        .icmp_imm_s(IntCC::UnsignedGreaterThan, mag, 0x7f80_0000);
    let q = b.ins().ushr_imm_u(x, 16);
    let q = b.ins().bor_imm_u(q, 0x40);
    let v = b.ins().select(is_nan, q, r);
    b.ins().ireduce(types::I16, v)
}

/// `base + index * scale` (index is an i64 value).
pub fn elem_addr(b: &mut FunctionBuilder, base: Value, index: Value, scale: usize) -> Value {
    let off = if scale == 1 {
        index
    } else {
        b.ins().imul_imm_s(index, scale as i64)
    };
    b.ins().iadd(base, off)
}

pub fn iconst(b: &mut FunctionBuilder, v: i64) -> Value {
    b.ins().iconst(types::I64, v)
}

/// The extent `e` of the dim's value `n` (an i64): each step `⌊(x + add) / div⌋`, the
/// sums never negative over the dim's range (`dims::planes` checks every extent ≥ 1).
pub fn extent_value(b: &mut FunctionBuilder, n: Value, e: &crate::ir::ExtentExpr) -> Value {
    let mut x = n;
    for s in &e.steps {
        x = b.ins().iadd_imm_s(x, s.add);
        if s.div != 1 {
            x = b.ins().udiv_imm_u(x, s.div as i64);
        }
    }
    x
}

/// Emits `for i in (start..end).step_by(step) { body(i) }` with constant bounds. The
/// loop is bottom-tested since trip counts are known; no code is emitted for an empty
/// range.
pub fn counted_loop(
    b: &mut FunctionBuilder,
    start: i64,
    end: i64,
    step: i64,
    mut body: impl FnMut(&mut FunctionBuilder, Value),
) {
    if start >= end {
        return;
    }
    if start + step >= end {
        let i = iconst(b, start);
        body(b, i);
        return;
    }
    let header = b.create_block();
    b.append_block_param(header, types::I64);
    let exit = b.create_block();
    let init = iconst(b, start);
    b.ins().jump(header, &[BlockArg::Value(init)]);
    b.switch_to_block(header);
    let i = b.block_params(header)[0];
    body(b, i);
    let next = b.ins().iadd_imm_s(i, step);
    let more = b.ins().icmp_imm_s(IntCC::SignedLessThan, next, end);
    b.ins()
        .brif(more, header, &[BlockArg::Value(next)], exit, &[]);
    b.seal_block(header);
    b.switch_to_block(exit);
    b.seal_block(exit);
}

/// Emits `count` iterations of `body(pointers)`, each pointer starting at its base and
/// advancing by its stride (bytes, the first one nonzero) per iteration, so the loop
/// has no multiplications; bottom-tested, nothing emitted for `count == 0`.
pub fn strided_loop(
    b: &mut FunctionBuilder,
    count: usize,
    bases: &[(Value, usize)],
    mut body: impl FnMut(&mut FunctionBuilder, &[Value]),
) {
    let starts: Vec<Value> = bases.iter().map(|&(p, _)| p).collect();
    if count <= 1 {
        if count == 1 {
            body(b, &starts);
        }
        return;
    }
    let header = b.create_block();
    for _ in bases {
        b.append_block_param(header, types::I64);
    }
    let exit = b.create_block();
    let end = b.ins().iadd_imm_s(bases[0].0, (count * bases[0].1) as i64);
    let args: Vec<BlockArg> = starts.iter().map(|&v| BlockArg::Value(v)).collect();
    b.ins().jump(header, &args);
    b.switch_to_block(header);
    let at = b.block_params(header).to_vec();
    body(b, &at);
    let next: Vec<Value> = at
        .iter()
        .zip(bases)
        .map(|(&p, &(_, stride))| b.ins().iadd_imm_s(p, stride as i64))
        .collect();
    let more = b.ins().icmp(IntCC::UnsignedLessThan, next[0], end);
    let args: Vec<BlockArg> = next.iter().map(|&v| BlockArg::Value(v)).collect();
    b.ins().brif(more, header, &args, exit, &[]);
    b.seal_block(header);
    b.switch_to_block(exit);
    b.seal_block(exit);
}

/// Like [`counted_loop`] but with a runtime (i64 value) end bound and start 0; runs the
/// body zero times when `end <= 0`.
pub fn dynamic_loop(
    b: &mut FunctionBuilder,
    end: Value,
    body: impl FnMut(&mut FunctionBuilder, Value),
) {
    let zero = iconst(b, 0);
    range_loop(b, zero, end, body);
}

/// `for i in start..end { body(i) }` with both bounds run-time i64 values (a task's
/// share of a loop); nothing runs when `end <= start`.
pub fn range_loop(
    b: &mut FunctionBuilder,
    start: Value,
    end: Value,
    mut body: impl FnMut(&mut FunctionBuilder, Value),
) {
    let header = b.create_block();
    b.append_block_param(header, types::I64);
    let body_block = b.create_block();
    let exit = b.create_block();
    b.ins().jump(header, &[BlockArg::Value(start)]);
    b.switch_to_block(header);
    let i = b.block_params(header)[0];
    let more = b.ins().icmp(IntCC::SignedLessThan, i, end);
    b.ins().brif(more, body_block, &[], exit, &[]);
    b.switch_to_block(body_block);
    b.seal_block(body_block);
    body(b, i);
    let next = b.ins().iadd_imm_s(i, 1);
    b.ins().jump(header, &[BlockArg::Value(next)]);
    b.seal_block(header);
    b.switch_to_block(exit);
    b.seal_block(exit);
}

/// `while cond(b) { body(b) }` with cond re-evaluated at each iteration's top.
pub fn while_loop(
    b: &mut FunctionBuilder,
    mut cond: impl FnMut(&mut FunctionBuilder) -> Value,
    mut body: impl FnMut(&mut FunctionBuilder),
) {
    let (header, body_block, exit) = (b.create_block(), b.create_block(), b.create_block());
    b.ins().jump(header, &[]);
    b.switch_to_block(header);
    let c = cond(b);
    b.ins().brif(c, body_block, &[], exit, &[]);
    b.switch_to_block(body_block);
    b.seal_block(body_block);
    body(b);
    b.ins().jump(header, &[]);
    b.seal_block(header);
    b.switch_to_block(exit);
    b.seal_block(exit);
}

/// Emits `if task == tasks − 1 { last(b) } else { other(b) }`: the last task of a split
/// often covers a shorter slice, through code compiled for its size.
pub fn if_last_task(
    b: &mut FunctionBuilder,
    task: Value,
    tasks: usize,
    last: impl FnOnce(&mut FunctionBuilder),
    other: impl FnOnce(&mut FunctionBuilder),
) {
    let is_last = b.ins().icmp_imm_u(IntCC::Equal, task, (tasks - 1) as i64);
    if_else(b, is_last, last, other);
}

/// Emits `if cond { then(b) } else { otherwise(b) }`.
pub fn if_else(
    b: &mut FunctionBuilder,
    cond: Value,
    then: impl FnOnce(&mut FunctionBuilder),
    otherwise: impl FnOnce(&mut FunctionBuilder),
) {
    let (then_block, else_block, join) = (b.create_block(), b.create_block(), b.create_block());
    b.ins().brif(cond, then_block, &[], else_block, &[]);
    b.seal_block(then_block);
    b.switch_to_block(then_block);
    then(b);
    b.ins().jump(join, &[]);
    b.seal_block(else_block);
    b.switch_to_block(else_block);
    otherwise(b);
    b.ins().jump(join, &[]);
    b.seal_block(join);
    b.switch_to_block(join);
}

/// Runs `body(b, i, false)` for chunks `i` in `[0, full)` and, when `has_last`, then
/// `body(b, full, true)` for a final chunk of another size; every chunk, or, with
/// `share = (task, split)` of the `full + has_last` chunks, only that task's chunks
/// (the last chunk is the last task's).
pub fn chunk_loop(
    b: &mut FunctionBuilder,
    share: Option<(Value, &crate::codegen::tasks::Split)>,
    full: usize,
    has_last: bool,
    mut body: impl FnMut(&mut FunctionBuilder, Value, bool),
) {
    match share {
        None => {
            counted_loop(b, 0, full as i64, 1, |b, i| body(b, i, false));
            if has_last {
                let i = iconst(b, full as i64);
                body(b, i, true);
            }
        }
        Some((task, split)) => {
            debug_assert_eq!(split.units, full + usize::from(has_last));
            task_share_loop(b, task, split.per, full, |b, i| body(b, i, false));
            if has_last {
                let is_last = b
                    .ins()
                    .icmp_imm_u(IntCC::Equal, task, (split.tasks - 1) as i64);
                let (then, join) = (b.create_block(), b.create_block());
                b.ins().brif(is_last, then, &[], join, &[]);
                b.seal_block(then);
                b.switch_to_block(then);
                let i = iconst(b, full as i64);
                body(b, i, true);
                b.ins().jump(join, &[]);
                b.seal_block(join);
                b.switch_to_block(join);
            }
        }
    }
}

/// Runs `body(b, first, count)` over the units of `split`: all of them (`part`
/// None), or part `part`'s `count` units from `first` (the last part's count through
/// code of its own).
pub fn part_range(
    b: &mut FunctionBuilder,
    part: Option<Value>,
    split: &crate::codegen::tasks::Split,
    mut body: impl FnMut(&mut FunctionBuilder, Value, usize),
) {
    let Some(part) = part else {
        let zero = iconst(b, 0);
        body(b, zero, split.units);
        return;
    };
    let first = b.ins().imul_imm_s(part, split.per as i64);
    if split.last() == split.per {
        body(b, first, split.per);
        return;
    }
    let is_last = b
        .ins()
        .icmp_imm_u(IntCC::Equal, part, (split.tasks - 1) as i64);
    let (last, other, join) = (b.create_block(), b.create_block(), b.create_block());
    b.ins().brif(is_last, last, &[], other, &[]);
    b.seal_block(last);
    b.seal_block(other);
    b.switch_to_block(last);
    body(b, first, split.last());
    b.ins().jump(join, &[]);
    b.switch_to_block(other);
    body(b, first, split.per);
    b.ins().jump(join, &[]);
    b.seal_block(join);
    b.switch_to_block(join);
}

/// Runs `body(i)` for this task's share `[task·per, min(task·per + per, end))` of the
/// indices below `end`.
pub fn task_share_loop(
    b: &mut FunctionBuilder,
    task: Value,
    per: usize,
    end: usize,
    body: impl FnMut(&mut FunctionBuilder, Value),
) {
    let first = b.ins().imul_imm_s(task, per as i64);
    let stop = b.ins().iadd_imm_s(first, per as i64);
    let limit = iconst(b, end as i64);
    let stop = b.ins().smin(stop, limit);
    range_loop(b, first, stop, body);
}

/// The per-axis indices of row-major flat index `flat` over `shape`.
pub fn unflatten(b: &mut FunctionBuilder, flat: Value, shape: &[usize]) -> Vec<Value> {
    let strides = strides_of(shape);
    shape
        .iter()
        .zip(&strides)
        .map(|(&n, &s)| {
            let q = if s == 1 {
                flat
            } else {
                b.ins().udiv_imm_u(flat, s as i64)
            };
            if n == 1 {
                b.ins().iconst(types::I64, 0)
            } else {
                b.ins().urem_imm_u(q, n as i64)
            }
        })
        .collect()
}

/// Emits a nested loop over `shape` (row-major), calling `body` with the flat element
/// index and the per-axis indices. Loops over size-1 axes are elided.
pub fn nested_loop(
    b: &mut FunctionBuilder,
    shape: &[usize],
    body: &mut dyn FnMut(&mut FunctionBuilder, &[Value]),
) {
    fn rec(
        b: &mut FunctionBuilder,
        shape: &[usize],
        idx: &mut Vec<Value>,
        body: &mut dyn FnMut(&mut FunctionBuilder, &[Value]),
    ) {
        let depth = idx.len();
        if depth == shape.len() {
            body(b, idx);
            return;
        }
        counted_loop(b, 0, shape[depth] as i64, 1, |b, i| {
            idx.push(i);
            rec(b, shape, idx, body);
            idx.pop();
        });
    }
    if shape.contains(&0) {
        return;
    }
    rec(b, shape, &mut Vec::with_capacity(shape.len()), body);
}

/// `Σ idx[d] * strides[d]` (strides in elements; zero strides skipped).
pub fn linear_offset(b: &mut FunctionBuilder, idx: &[Value], strides: &[usize]) -> Value {
    let mut acc: Option<Value> = None;
    for (&i, &s) in idx.iter().zip(strides) {
        if s == 0 {
            continue;
        }
        let t = if s == 1 {
            i
        } else {
            b.ins().imul_imm_s(i, s as i64)
        };
        acc = Some(match acc {
            None => t,
            Some(a) => b.ins().iadd(a, t),
        });
    }
    acc.unwrap_or_else(|| iconst(b, 0))
}

/// Row-major strides (in elements) of a shape.
pub fn strides_of(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Strides that broadcast `shape` (right-aligned) to `out_rank` axes of `out_shape`:
/// broadcast axes get stride 0.
pub fn broadcast_strides(shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
    let own = strides_of(shape);
    let off = out_shape.len() - shape.len();
    (0..out_shape.len())
        .map(|d| {
            if d < off || shape[d - off] == 1 {
                0
            } else {
                own[d - off]
            }
        })
        .collect()
}

/// `count` vector variables of type `ty` (an integer vector), each set to zero: a
/// register tile's accumulators.
pub fn zeroed_vector_vars(
    b: &mut FunctionBuilder,
    ty: Type,
    count: usize,
) -> Vec<cranelift_frontend::Variable> {
    let zero = b.ins().iconst(ty.lane_type(), 0);
    let zero = b.ins().splat(ty, zero);
    (0..count)
        .map(|_| {
            let v = b.declare_var(ty);
            b.def_var(v, zero);
            v
        })
        .collect()
}

/// The first `lanes` floats at `base + offset` as an f32x4, the other lanes zero: the
/// whole vector when all four are wanted, else lane by lane (a row's last columns).
pub fn load_lanes(b: &mut FunctionBuilder, base: Value, offset: i32, lanes: usize) -> Value {
    if lanes == 4 {
        return b.ins().load(types::F32X4, flags(), base, offset);
    }
    let zero = b.ins().f32const(0.0);
    let mut v = b.ins().splat(types::F32X4, zero);
    for lane in 0..lanes {
        let x = b
            .ins()
            .load(types::F32, flags(), base, offset + 4 * lane as i32);
        v = b.ins().insertlane(v, x, lane as u8);
    }
    v
}

/// Stores the first `lanes` 32-bit lanes of the 4-lane vector `v` at `base + offset`:
/// the whole vector when all four are wanted, else lane by lane (a tile's last columns).
pub fn store_lanes(b: &mut FunctionBuilder, v: Value, base: Value, offset: i32, lanes: usize) {
    if lanes == 4 {
        b.ins().store(flags(), v, base, offset);
        return;
    }
    for lane in 0..lanes {
        let x = b.ins().extractlane(v, lane as u8);
        b.ins().store(flags(), x, base, offset + 4 * lane as i32);
    }
}
