//! Movement ops of symbolic nodes: Reshape (a dense copy), Transpose, Slice, Expand,
//! Concat and Gather as strided copies over the run's extents.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;

use super::super::index_check::{self, OnBadIndex};
use super::super::run_shape::{self, Ext};
use super::super::{LowerCtx, LowerResult, Operand};
use crate::codegen::kernel;

/// Copies the elements of `shape` (outermost first) from `src` (element strides
/// `src_strides`, starting `src_base` elements in) to `dst` (strides `dst_strides`,
/// `dst_base` elements in), `elem` bytes each.
#[allow(clippy::too_many_arguments)]
fn strided_copy(
    b: &mut FunctionBuilder,
    shape: &[Ext],
    elem: usize,
    (src, src_base, src_strides): (Value, Value, &[Ext]),
    (dst, dst_base, dst_strides): (Value, Value, &[Ext]),
) {
    let rank = shape.len();
    if rank == 0 {
        let s = kernel::elem_addr(b, src, src_base, elem);
        let d = kernel::elem_addr(b, dst, dst_base, elem);
        copy_elem(b, elem, s, d);
        return;
    }
    let outer = &shape[..rank - 1];
    run_shape::nested_run_loop(b, outer, &mut |b, idx| {
        let so = run_shape::offset(b, idx, &src_strides[..rank - 1]);
        let so = b.ins().iadd(so, src_base);
        let s_row = kernel::elem_addr(b, src, so, elem);
        let dof = run_shape::offset(b, idx, &dst_strides[..rank - 1]);
        let dof = b.ins().iadd(dof, dst_base);
        let d_row = kernel::elem_addr(b, dst, dof, elem);
        let (ss, ds) = (src_strides[rank - 1], dst_strides[rank - 1]);
        if ss.is_fixed(1) && ds.is_fixed(1) {
            copy_row(b, elem, s_row, d_row, shape[rank - 1]);
            return;
        }
        run_shape::run_loop(b, shape[rank - 1], |b, i| {
            let si = ss.times(b, i);
            let s = kernel::elem_addr(b, s_row, si, elem);
            let di = ds.times(b, i);
            let d = kernel::elem_addr(b, d_row, di, elem);
            copy_elem(b, elem, s, d);
        });
    });
}

/// Copies `n` contiguous elements of `elem` bytes: 16 bytes at a time, then the rest
/// element by element.
fn copy_row(b: &mut FunctionBuilder, elem: usize, src: Value, dst: Value, n: Ext) {
    use cranelift_codegen::ir::types;
    let per = 16 / elem.clamp(1, 16);
    let (whole, done) = match n {
        Ext::Fixed(n) => (Ext::Fixed(n / per * per), Ext::Fixed(n / per * per)),
        Ext::Run(v) => {
            let w = b.ins().udiv_imm_u(v, per as i64);
            let w = b.ins().imul_imm_s(w, per as i64);
            (Ext::Run(w), Ext::Run(w))
        }
    };
    if 16 % elem == 0 {
        run_shape::run_loop_from(b, Ext::Fixed(0), whole, per, |b, i| {
            let s = kernel::elem_addr(b, src, i, elem);
            let d = kernel::elem_addr(b, dst, i, elem);
            let v = b.ins().load(types::I8X16, kernel::flags(), s, 0);
            b.ins().store(kernel::flags(), v, d, 0);
        });
    }
    let start = if 16 % elem == 0 { done } else { Ext::Fixed(0) };
    run_shape::run_loop_from(b, start, n, 1, |b, i| {
        let s = kernel::elem_addr(b, src, i, elem);
        let d = kernel::elem_addr(b, dst, i, elem);
        copy_elem(b, elem, s, d);
    });
}

pub(super) fn copy_elem(b: &mut FunctionBuilder, elem: usize, s: Value, d: Value) {
    use cranelift_codegen::ir::types;
    let ty = match elem {
        1 => types::I8,
        2 => types::I16,
        4 => types::I32,
        8 => types::I64,
        _ => {
            for k in 0..elem {
                let v = b.ins().load(types::I8, kernel::flags(), s, k as i32);
                b.ins().store(kernel::flags(), v, d, k as i32);
            }
            return;
        }
    };
    let v = b.ins().load(ty, kernel::flags(), s, 0);
    b.ins().store(kernel::flags(), v, d, 0);
}

fn elem_size(o: &Operand) -> Result<usize, String> {
    if !o.ty.dtype.bits().is_multiple_of(8) {
        return Err(format!(
            "{} elements are not whole bytes; a symbolic copy moves bytes",
            o.ty.dtype
        ));
    }
    Ok(o.ty.dtype.size())
}

fn zero(b: &mut FunctionBuilder) -> Value {
    kernel::iconst(b, 0)
}

/// Reshape: the elements in the same order.
pub fn copy(ctx: &mut LowerCtx) -> LowerResult {
    let (x, y) = (ctx.input(0)?, ctx.output(0));
    let elem = elem_size(&y)?;
    let dims = ctx.run_dims.as_ref().expect("symbolic");
    let shape = dims.shape(ctx.b, &y.ty);
    let n = Ext::product(ctx.b, &shape);
    let z = zero(ctx.b);
    let unit = [Ext::Fixed(1)];
    strided_copy(ctx.b, &[n], elem, (x.ptr, z, &unit), (y.ptr, z, &unit));
    Ok(())
}

pub fn transpose(ctx: &mut LowerCtx, perm: &[usize]) -> LowerResult {
    let (x, y) = (ctx.input(0)?, ctx.output(0));
    let elem = elem_size(&y)?;
    let dims = ctx.run_dims.as_ref().expect("symbolic");
    let xs = dims.shape(ctx.b, &x.ty);
    let ys = dims.shape(ctx.b, &y.ty);
    let x_strides = run_shape::strides(ctx.b, &xs);
    let src: Vec<Ext> = perm.iter().map(|&p| x_strides[p]).collect();
    let dst = run_shape::strides(ctx.b, &ys);
    let z = zero(ctx.b);
    strided_copy(ctx.b, &ys, elem, (x.ptr, z, &src), (y.ptr, z, &dst));
    Ok(())
}

pub fn slice(ctx: &mut LowerCtx, starts: &[usize], steps: &[i64]) -> LowerResult {
    let (x, y) = (ctx.input(0)?, ctx.output(0));
    let elem = elem_size(&y)?;
    if steps.iter().any(|&s| s < 1) {
        return Err("a Slice with a negative step cannot run on symbolic extents yet".into());
    }
    let dims = ctx.run_dims.as_ref().expect("symbolic");
    let xs = dims.shape(ctx.b, &x.ty);
    let ys = dims.shape(ctx.b, &y.ty);
    let x_strides = run_shape::strides(ctx.b, &xs);
    let b = &mut *ctx.b;
    let mut base = Ext::Fixed(0);
    let mut src = vec![];
    for ((&start, &step), &st) in starts.iter().zip(steps).zip(&x_strides) {
        let at = st.scale(b, start);
        base = base.add(b, at);
        src.push(st.scale(b, step as usize));
    }
    let dst = run_shape::strides(b, &ys);
    let base = base.value(b);
    let z = zero(b);
    strided_copy(b, &ys, elem, (x.ptr, base, &src), (y.ptr, z, &dst));
    Ok(())
}

pub fn expand(ctx: &mut LowerCtx) -> LowerResult {
    let (x, y) = (ctx.input(0)?, ctx.output(0));
    let elem = elem_size(&y)?;
    let nest = super::elementwise::run_nest(ctx, &[&x.ty], &y.ty);
    let dst = run_shape::strides(ctx.b, &nest.shape);
    let z = zero(ctx.b);
    strided_copy(
        ctx.b,
        &nest.shape,
        elem,
        (x.ptr, z, &nest.strides[0]),
        (y.ptr, z, &dst),
    );
    Ok(())
}

pub fn concat(ctx: &mut LowerCtx, axis: usize) -> LowerResult {
    let y = ctx.output(0);
    let elem = elem_size(&y)?;
    let dims = ctx.run_dims.as_ref().expect("symbolic");
    let ys = dims.shape(ctx.b, &y.ty);
    let inputs: Vec<Operand> = ctx.inputs.iter().flatten().cloned().collect();
    let shapes: Vec<Vec<Ext>> = inputs.iter().map(|x| dims.shape(ctx.b, &x.ty)).collect();
    let b = &mut *ctx.b;
    let y_strides = run_shape::strides(b, &ys);
    let mut at = Ext::Fixed(0);
    for (x, xs) in inputs.iter().zip(&shapes) {
        let src = run_shape::strides(b, xs);
        let base = y_strides[axis].mul(b, at);
        let base = base.value(b);
        let z = zero(b);
        strided_copy(b, xs, elem, (x.ptr, z, &src), (y.ptr, base, &y_strides));
        at = at.add(b, xs[axis]);
    }
    Ok(())
}

/// Index `i` (as read) as a position on an axis of `dim` elements: wrapped when
/// negative, then checked (or clamped) against `dim`.
pub(super) fn resolve(
    b: &mut FunctionBuilder,
    indices: &Operand,
    i: Value,
    dim: Value,
    on_bad: OnBadIndex,
) -> Value {
    let i = if index_check::is_unsigned(indices.ty.dtype) {
        i
    } else {
        let wrapped = b.ins().iadd(i, dim);
        let neg = b.ins().icmp_imm_s(IntCC::SignedLessThan, i, 0);
        b.ins().select(neg, wrapped, i)
    };
    match on_bad {
        OnBadIndex::Fail(fail) => {
            index_check::check_below(b, i, dim, fail);
            i
        }
        OnBadIndex::Clamp => {
            // Into [0, dim), or 0 for an empty axis (its buffer is planned for the
            // axis's maximum, so element 0 is still inside it).
            let last = b.ins().iadd_imm_s(dim, -1);
            let i = b.ins().smin(i, last);
            let z = kernel::iconst(b, 0);
            b.ins().smax(i, z)
        }
    }
}

pub fn gather(ctx: &mut LowerCtx, axis: usize) -> LowerResult {
    if ctx.inputs.len() != 2 {
        return Err("a Gather with counted rows has no symbolic form".into());
    }
    let (data, indices, y) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0));
    let elem = elem_size(&data)?;
    let dims = ctx.run_dims.as_ref().expect("symbolic");
    let ds = dims.shape(ctx.b, &data.ty);
    let is = dims.shape(ctx.b, &indices.ty);
    let on_bad = ctx.on_bad_index;
    let b = &mut *ctx.b;
    let outer = Ext::product(b, &ds[..axis]);
    let dim = ds[axis];
    let inner = Ext::product(b, &ds[axis + 1..]);
    let n_idx = Ext::product(b, &is);
    let dim_v = dim.value(b);
    // Every index checked before anything is written.
    if matches!(on_bad, OnBadIndex::Fail(_)) {
        run_shape::run_loop(b, n_idx, |b, j| {
            let ia = kernel::elem_addr(b, indices.ptr, j, indices.ty.dtype.size());
            let i = kernel::load_elem(b, indices.ty.dtype, ia, 0);
            resolve(b, &indices, i, dim_v, on_bad);
        });
    }
    let unit = [Ext::Fixed(1)];
    run_shape::run_loop(b, outer, |b, o| {
        run_shape::run_loop(b, n_idx, |b, j| {
            let ia = kernel::elem_addr(b, indices.ptr, j, indices.ty.dtype.size());
            let i = kernel::load_elem(b, indices.ty.dtype, ia, 0);
            let i = resolve(b, &indices, i, dim_v, OnBadIndex::Clamp);
            let row = dim.times(b, o);
            let row = b.ins().iadd(row, i);
            let src = inner.times(b, row);
            let orow = n_idx.times(b, o);
            let orow = b.ins().iadd(orow, j);
            let dst = inner.times(b, orow);
            strided_copy(
                b,
                &[inner],
                elem,
                (data.ptr, src, &unit),
                (y.ptr, dst, &unit),
            );
        });
    });
    Ok(())
}
