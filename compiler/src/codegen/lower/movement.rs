//! Data movement: copies through strided views (Reshape, Transpose, Slice, Expand,
//! Concat), Gather with runtime indices, and Pad.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;
use cranelift_module::Module;

use super::index_check;
use super::{f16_weights, LowerCtx, LowerResult};
use crate::codegen::kernel::{self, flags};
use crate::ir::{DType, Tensor};
use crate::ops::{PadAttrs, PadMode};

/// A strided view: element `idx` lives at `base + Σ idx[d] * strides[d]` (elements).
#[derive(Clone, Debug)]
struct View {
    base: i64,
    strides: Vec<i64>,
}

/// Merges axes along which both views are contiguous with each other, drops size-1 axes.
fn collapse(shape: &[usize], views: &mut [&mut View]) -> Vec<usize> {
    let mut out_shape: Vec<usize> = vec![];
    let mut out_strides: Vec<Vec<i64>> = vec![vec![]; views.len()];
    for (d, &size) in shape.iter().enumerate() {
        if size == 1 {
            continue;
        }
        let merge = !out_shape.is_empty()
            && views.iter().enumerate().all(|(k, v)| {
                *out_strides[k].last().expect("nonempty") == v.strides[d] * size as i64
            });
        if merge {
            *out_shape.last_mut().expect("nonempty") *= size;
            for (k, v) in views.iter().enumerate() {
                *out_strides[k].last_mut().expect("nonempty") = v.strides[d];
            }
        } else {
            out_shape.push(size);
            for (k, v) in views.iter().enumerate() {
                out_strides[k].push(v.strides[d]);
            }
        }
    }
    for (k, v) in views.iter_mut().enumerate() {
        v.strides = std::mem::take(&mut out_strides[k]);
    }
    out_shape
}

fn signed_offset(b: &mut FunctionBuilder, idx: &[Value], strides: &[i64], base: i64) -> Value {
    let mut acc = kernel::iconst(b, base);
    for (&i, &s) in idx.iter().zip(strides) {
        if s != 0 {
            let t = b.ins().imul_imm_s(i, s);
            acc = b.ins().iadd(acc, t);
        }
    }
    acc
}

/// Copies `shape` elements of `elem` bytes from the `src` view to the `dst` view. Runs
/// that are contiguous on both sides move 16 bytes at a time.
fn strided_copy(
    b: &mut FunctionBuilder,
    shape: &[usize],
    elem: usize,
    src_ptr: Value,
    mut src: View,
    dst_ptr: Value,
    mut dst: View,
) {
    if shape.contains(&0) {
        return;
    }
    let shape = collapse(shape, &mut [&mut src, &mut dst]);
    let (shape, inner_run) = match (shape.last(), src.strides.last(), dst.strides.last()) {
        (Some(&n), Some(1), Some(1)) => (shape[..shape.len() - 1].to_vec(), n),
        _ => (shape, 1),
    };
    let outer_src = src.strides[..shape.len()].to_vec();
    let outer_dst = dst.strides[..shape.len()].to_vec();
    let bytes = inner_run * elem;
    kernel::nested_loop(b, &shape, &mut |b, idx| {
        let so = signed_offset(b, idx, &outer_src, src.base);
        let d_o = signed_offset(b, idx, &outer_dst, dst.base);
        let s = kernel::elem_addr(b, src_ptr, so, elem);
        let d = kernel::elem_addr(b, dst_ptr, d_o, elem);
        copy_bytes(b, d, s, bytes);
    });
}

/// Copies a run of `n` bytes known at compile time.
pub fn copy_bytes(b: &mut FunctionBuilder, dst: Value, src: Value, n: usize) {
    let chunks = [
        (16usize, types::I8X16),
        (8, types::I64),
        (4, types::I32),
        (2, types::I16),
        (1, types::I8),
    ];
    let n16 = n / 16 * 16;
    if n16 >= 64 {
        kernel::counted_loop(b, 0, n16 as i64, 16, |b, i| {
            let s = b.ins().iadd(src, i);
            let d = b.ins().iadd(dst, i);
            let v = b.ins().load(types::I8X16, flags(), s, 0);
            b.ins().store(flags(), v, d, 0);
        });
    }
    let mut off = if n16 >= 64 { n16 } else { 0 };
    for (size, ty) in chunks {
        while n - off >= size {
            let v = b.ins().load(ty, flags(), src, off as i32);
            b.ins().store(flags(), v, dst, off as i32);
            off += size;
        }
    }
}

fn contiguous(shape: &[usize]) -> View {
    View {
        base: 0,
        strides: kernel::strides_of(shape)
            .iter()
            .map(|&s| s as i64)
            .collect(),
    }
}

pub fn copy(ctx: &mut LowerCtx) -> LowerResult {
    let (x, y) = (ctx.input(0)?, ctx.output(0));
    copy_bytes(ctx.b, y.ptr, x.ptr, y.ty.byte_size());
    Ok(())
}

pub fn transpose(ctx: &mut LowerCtx, perm: &[usize]) -> LowerResult {
    let (x, y) = (ctx.input(0)?, ctx.output(0));
    let xs = kernel::strides_of(&x.ty.shape);
    let src = View {
        base: 0,
        strides: perm.iter().map(|&p| xs[p] as i64).collect(),
    };
    strided_copy(
        ctx.b,
        &y.ty.shape,
        y.ty.dtype.size(),
        x.ptr,
        src,
        y.ptr,
        contiguous(&y.ty.shape),
    );
    Ok(())
}

pub fn slice(ctx: &mut LowerCtx, starts: &[usize], steps: &[i64]) -> LowerResult {
    let (x, y) = (ctx.input(0)?, ctx.output(0));
    let xs = kernel::strides_of(&x.ty.shape);
    let base = starts
        .iter()
        .zip(&xs)
        .map(|(&s, &st)| (s * st) as i64)
        .sum();
    let src = View {
        base,
        strides: steps
            .iter()
            .zip(&xs)
            .map(|(&k, &st)| k * st as i64)
            .collect(),
    };
    strided_copy(
        ctx.b,
        &y.ty.shape,
        y.ty.dtype.size(),
        x.ptr,
        src,
        y.ptr,
        contiguous(&y.ty.shape),
    );
    Ok(())
}

pub fn expand(ctx: &mut LowerCtx) -> LowerResult {
    let (x, y) = (ctx.input(0)?, ctx.output(0));
    let src = View {
        base: 0,
        strides: kernel::broadcast_strides(&x.ty.shape, &y.ty.shape)
            .iter()
            .map(|&s| s as i64)
            .collect(),
    };
    strided_copy(
        ctx.b,
        &y.ty.shape,
        y.ty.dtype.size(),
        x.ptr,
        src,
        y.ptr,
        contiguous(&y.ty.shape),
    );
    Ok(())
}

pub fn concat(ctx: &mut LowerCtx, axis: usize) -> LowerResult {
    let y = ctx.output(0);
    let ys = kernel::strides_of(&y.ty.shape);
    let mut at = 0usize;
    for x in ctx.inputs.clone().into_iter().flatten() {
        let dst = View {
            base: (at * ys[axis]) as i64,
            strides: ys.iter().map(|&s| s as i64).collect(),
        };
        strided_copy(
            ctx.b,
            &x.ty.shape,
            y.ty.dtype.size(),
            x.ptr,
            contiguous(&x.ty.shape),
            y.ptr,
            dst,
        );
        at += x.ty.shape[axis];
    }
    Ok(())
}

/// Constant Gather tables at least this large are stored as half with FP16 weights;
/// smaller ones (index tables, shape constants) are not worth an expansion per row.
const HALF_TABLE_MIN_BYTES: usize = 64 << 10;

pub fn gather(ctx: &mut LowerCtx, axis: usize) -> LowerResult {
    if ctx.inputs.len() == 3 {
        return gather_counted(ctx, axis);
    }
    let (data, indices, y) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0));
    let elem = data.ty.dtype.size();
    let outer: usize = data.ty.shape[..axis].iter().product();
    let dim = data.ty.shape[axis];
    let inner: usize = data.ty.shape[axis + 1..].iter().product();
    let n_idx = indices.ty.numel();
    if y.ty.numel() == 0 {
        return Ok(());
    }
    // With FP16 weights a large constant table (an embedding) is stored as half and
    // its gathered rows are expanded as they are copied.
    let half_table = match (&ctx.half, &data.constant) {
        (Some(h), Some(Tensor::F32(t))) if data.ty.byte_size() >= HALF_TABLE_MIN_BYTES => {
            let floats: Vec<f32> = t.iter().copied().collect();
            let expand = h.expand;
            let table = ctx.weight_rodata(f16_weights::f16_bytes(&floats))?;
            Some((table, ctx.module.declare_func_in_func(expand, ctx.b.func)))
        }
        _ => None,
    };
    let on_bad = ctx.on_bad_index;
    let b = &mut *ctx.b;
    // Checked once before anything is written (and not again for each of the `outer`
    // rows).
    index_check::check_gather_indices(b, &indices, dim, on_bad);
    kernel::counted_loop(b, 0, outer as i64, 1, |b, o| {
        kernel::counted_loop(b, 0, n_idx as i64, 1, |b, j| {
            let i = index_check::gathered_index(b, &indices, j, dim, on_bad);
            let row = b.ins().imul_imm_s(o, dim as i64);
            let row = b.ins().iadd(row, i);
            let orow = b.ins().imul_imm_s(o, n_idx as i64);
            let orow = b.ins().iadd(orow, j);
            let d = kernel::elem_addr(b, y.ptr, orow, inner * elem);
            match half_table {
                Some((table, expand)) => {
                    let s = kernel::elem_addr(b, table, row, inner * 2);
                    f16_weights::emit_expand(b, expand, d, s, inner);
                }
                None => {
                    let s = kernel::elem_addr(b, data.ptr, row, inner * elem);
                    copy_bytes(b, d, s, inner * elem);
                }
            }
        });
    });
    Ok(())
}

/// Gather from data whose rows along `axis` (only unit axes before it) the run counts,
/// that count input 2: a negative index counts from the last actual row and one past
/// it fails (or is clamped into them), so rows the run does not have are never read.
fn gather_counted(ctx: &mut LowerCtx, axis: usize) -> LowerResult {
    let (data, indices, count, y) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?, ctx.output(0));
    if data.ty.shape[..axis].iter().any(|&d| d != 1) {
        return Err("the counted rows of a Gather's data must lead".into());
    }
    let elem = data.ty.dtype.size();
    let dim = data.ty.shape[axis];
    let row = data.ty.shape[axis + 1..].iter().product::<usize>() * elem;
    let n_idx = indices.ty.numel();
    if y.ty.numel() == 0 || dim == 0 {
        return Ok(());
    }
    let on_bad = ctx.on_bad_index;
    let b = &mut *ctx.b;
    let raw = kernel::load_elem(b, DType::I64, count.ptr, 0);
    let zero = kernel::iconst(b, 0);
    let rows = b.ins().smax(raw, zero);
    let dim_v = kernel::iconst(b, dim as i64);
    let rows = b.ins().smin(rows, dim_v);
    let resolve = |b: &mut FunctionBuilder, j: Value, check: bool| {
        let ia = kernel::elem_addr(b, indices.ptr, j, indices.ty.dtype.size());
        let i = kernel::load_elem(b, indices.ty.dtype, ia, 0);
        let i = if index_check::is_unsigned(indices.ty.dtype) {
            i
        } else {
            let wrapped = b.ins().iadd(i, rows);
            let neg = b.ins().icmp_imm_s(IntCC::SignedLessThan, i, 0);
            b.ins().select(neg, wrapped, i)
        };
        match on_bad {
            index_check::OnBadIndex::Fail(fail) => {
                if check {
                    index_check::check_below(b, i, rows, fail);
                }
                i
            }
            index_check::OnBadIndex::Clamp => {
                let zero = kernel::iconst(b, 0);
                let last = b.ins().iadd_imm_s(rows, -1);
                let i = b.ins().smin(i, last);
                b.ins().smax(i, zero)
            }
        }
    };
    // Checked once before anything is written.
    if matches!(on_bad, index_check::OnBadIndex::Fail(_)) {
        kernel::counted_loop(b, 0, n_idx as i64, 1, |b, j| {
            resolve(b, j, true);
        });
    }
    kernel::counted_loop(b, 0, n_idx as i64, 1, |b, j| {
        let i = resolve(b, j, false);
        let d = kernel::elem_addr(b, y.ptr, j, row);
        let s = kernel::elem_addr(b, data.ptr, i, row);
        copy_bytes(b, d, s, row);
    });
    Ok(())
}

/// Source index along one axis for each output index (`-1`: the constant fill).
/// Negative pads crop first; edge, wrap and reflect then read the cropped range only.
fn pad_axis_table(
    mode: PadMode,
    size: usize,
    (before, after): (i64, i64),
    out: usize,
) -> Result<Vec<i64>, String> {
    let cut_begin = before.saturating_neg().max(0);
    let cut_end = after.saturating_neg().max(0);
    let n = (size as i64).saturating_sub(cut_begin.saturating_add(cut_end));
    if n < 0 {
        return Err("pads crop an axis below zero".into());
    }
    if n == 0 && mode != PadMode::Constant && out > 0 {
        return Err(format!(
            "cannot pad an axis cropped to nothing in {mode:?} mode"
        ));
    }
    let grow_before = before.max(0);
    Ok((0..out as i64)
        .map(|o| {
            let i = o - grow_before;
            let j = if (0..n).contains(&i) {
                i
            } else {
                match mode {
                    PadMode::Constant => return -1,
                    PadMode::Edge => i.clamp(0, n - 1),
                    PadMode::Wrap => i.rem_euclid(n),
                    PadMode::Reflect if n == 1 => 0,
                    PadMode::Reflect => {
                        // Reflection without repeating the edge has period 2(n − 1).
                        let period = 2 * (n - 1);
                        let m = i.rem_euclid(period);
                        if m < n {
                            m
                        } else {
                            period - m
                        }
                    }
                }
            };
            cut_begin + j
        })
        .collect())
}

pub fn pad(ctx: &mut LowerCtx, p: &PadAttrs) -> LowerResult {
    let (x, y) = (ctx.input(0)?, ctx.output(0));
    let r = x.ty.rank();
    if y.ty.numel() == 0 {
        return Ok(());
    }
    if x.ty.numel() == 0 && p.mode != PadMode::Constant {
        return Err("cannot reflect, wrap or extend an empty tensor".into());
    }
    // Tables of per-axis source offsets (already multiplied by the input stride), stored
    // as i64 in read-only data; -1 entries select the fill value.
    for &len in &y.ty.shape {
        super::check_table_axis("the padded tensor", len)?;
    }
    let xs = kernel::strides_of(&x.ty.shape);
    let mut table_bytes = vec![];
    let mut table_at = vec![];
    for (d, &stride) in xs.iter().enumerate() {
        table_at.push(table_bytes.len() / 8);
        let pads = (p.pads[d], p.pads[d + r]);
        for v in pad_axis_table(p.mode, x.ty.shape[d], pads, y.ty.shape[d])? {
            let e = if v < 0 { i64::MIN } else { v * stride as i64 };
            table_bytes.extend(e.to_le_bytes());
        }
    }
    table_bytes.extend(0i64.to_le_bytes());
    let table = ctx.rodata(table_bytes)?;
    let fill = Tensor::scalar(p.value).cast(y.ty.dtype).to_le_bytes();
    let dtype = y.ty.dtype;
    let elem = dtype.size();
    let b = &mut *ctx.b;
    let ys = kernel::strides_of(&y.ty.shape);
    let x_empty = x.ty.numel() == 0;
    kernel::nested_loop(b, &y.ty.shape, &mut |b, idx| {
        // Sum the per-axis offsets; any i64::MIN entry makes the sum negative.
        let mut off = kernel::iconst(b, 0);
        let mut any_fill = b.ins().iconst(types::I8, 0);
        for d in 0..r {
            let a = b.ins().iadd_imm_s(idx[d], table_at[d] as i64);
            let a = kernel::elem_addr(b, table, a, 8);
            let v = b.ins().load(types::I64, flags(), a, 0);
            let f = b.ins().icmp_imm_s(IntCC::SignedLessThan, v, 0);
            any_fill = b.ins().bor(any_fill, f);
            let z = kernel::iconst(b, 0);
            let v = b.ins().select(f, z, v);
            off = b.ins().iadd(off, v);
        }
        let fill_v = match elem {
            8 => b.ins().iconst(
                types::I64,
                i64::from_le_bytes(fill[..8].try_into().expect("8 bytes")),
            ),
            4 => b.ins().iconst(
                types::I32,
                i32::from_le_bytes(fill[..4].try_into().expect("4 bytes")) as i64,
            ),
            2 => b.ins().iconst(
                types::I16,
                i16::from_le_bytes(fill[..2].try_into().expect("2 bytes")) as i64,
            ),
            _ => b.ins().iconst(types::I8, fill[0] as i8 as i64),
        };
        let mem_ty = kernel::mem_type(dtype);
        let fill_v = if mem_ty.is_float() {
            b.ins()
                .bitcast(mem_ty, cranelift_codegen::ir::MemFlagsData::new(), fill_v)
        } else {
            fill_v
        };
        // An empty input has no element to read (its pointer may be dangling): every
        // output element is the fill.
        let v = if x_empty {
            fill_v
        } else {
            let src = kernel::elem_addr(b, x.ptr, off, elem);
            let raw = b.ins().load(mem_ty, flags(), src, 0);
            b.ins().select(any_fill, fill_v, raw)
        };
        let o = kernel::linear_offset(b, idx, &ys);
        let d = kernel::elem_addr(b, y.ptr, o, elem);
        b.ins().store(flags(), v, d, 0);
    });
    Ok(())
}
