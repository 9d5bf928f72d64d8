//! Index-reading ops of symbolic nodes: GatherElements, GatherND (no batch axes) and
//! CumSum, over the run's extents. Every index is checked against its axis's extent
//! at run time (or clamped into it, with `--index-checks clamp`).

use cranelift_codegen::ir::{InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;

use super::super::index_check::OnBadIndex;
use super::super::reduce::var;
use super::super::run_shape::{self, Ext};
use super::super::{LowerCtx, LowerResult, Operand};
use super::movement::{copy_elem, resolve};
use crate::codegen::kernel::{self, domain, Domain};
use crate::ir::DType;

fn load_index(b: &mut FunctionBuilder, indices: &Operand, at: Value) -> Value {
    let a = kernel::elem_addr(b, indices.ptr, at, indices.ty.dtype.size());
    kernel::load_elem(b, indices.ty.dtype, a, 0)
}

pub fn gather_elements(ctx: &mut LowerCtx, axis: usize) -> LowerResult {
    let (data, indices, y) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0));
    let dims = ctx.run_dims.as_ref().expect("symbolic");
    let ds = dims.shape(ctx.b, &data.ty);
    let is = dims.shape(ctx.b, &indices.ty);
    let on_bad = ctx.on_bad_index;
    let b = &mut *ctx.b;
    let d_strides = run_shape::strides(b, &ds);
    let i_strides = run_shape::strides(b, &is);
    let dim = ds[axis].value(b);
    let elem = data.ty.dtype;
    // Checked before anything is written, then read clamped (never outside).
    if matches!(on_bad, OnBadIndex::Fail(_)) {
        let n = Ext::product(b, &is);
        run_shape::run_loop(b, n, |b, j| {
            let i = load_index(b, &indices, j);
            resolve(b, &indices, i, dim, on_bad);
        });
    }
    run_shape::nested_run_loop(b, &is, &mut |b, idx| {
        let at = run_shape::offset(b, idx, &i_strides);
        let i = load_index(b, &indices, at);
        let i = resolve(b, &indices, i, dim, OnBadIndex::Clamp);
        let mut pos = idx.to_vec();
        pos[axis] = i;
        let src = run_shape::offset(b, &pos, &d_strides);
        let s = kernel::elem_addr(b, data.ptr, src, elem.size());
        let d = kernel::elem_addr(b, y.ptr, at, elem.size());
        copy_elem(b, elem.size(), s, d);
    });
    Ok(())
}

pub fn gather_nd(ctx: &mut LowerCtx, batch_dims: usize) -> LowerResult {
    let (data, indices, y) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0));
    if batch_dims != 0 {
        return Err("a symbolic GatherND has no batch axes yet".into());
    }
    let Some(&q) = indices.ty.shape.last() else {
        return Err("GatherND indices must have rank ≥ 1".into());
    };
    let dims = ctx.run_dims.as_ref().expect("symbolic");
    let ds = dims.shape(ctx.b, &data.ty);
    let is = dims.shape(ctx.b, &indices.ty);
    if !is[is.len() - 1].is_fixed(q) || q > ds.len() {
        return Err("GatherND's index tuples must have a fixed length".into());
    }
    let on_bad = ctx.on_bad_index;
    let b = &mut *ctx.b;
    let d_strides = run_shape::strides(b, &ds);
    let tuples = Ext::product(b, &is[..is.len() - 1]);
    let inner = Ext::product(b, &ds[q..]);
    let extents: Vec<Value> = ds[..q].iter().map(|e| e.value(b)).collect();
    let elem = data.ty.dtype;
    let read = |b: &mut FunctionBuilder, t: Value, mode: OnBadIndex| -> Value {
        let mut src = kernel::iconst(b, 0);
        for (j, &extent) in extents.iter().enumerate() {
            let at = b.ins().imul_imm_s(t, q as i64);
            let at = b.ins().iadd_imm_s(at, j as i64);
            let i = load_index(b, &indices, at);
            let i = resolve(b, &indices, i, extent, mode);
            let o = d_strides[j].times(b, i);
            src = b.ins().iadd(src, o);
        }
        src
    };
    if matches!(on_bad, OnBadIndex::Fail(_)) {
        run_shape::run_loop(b, tuples, |b, t| {
            read(b, t, on_bad);
        });
    }
    run_shape::run_loop(b, tuples, |b, t| {
        let src = read(b, t, OnBadIndex::Clamp);
        let dst = inner.times(b, t);
        run_shape::run_loop(b, inner, |b, e| {
            let s = b.ins().iadd(src, e);
            let s = kernel::elem_addr(b, data.ptr, s, elem.size());
            let d = b.ins().iadd(dst, e);
            let d = kernel::elem_addr(b, y.ptr, d, elem.size());
            copy_elem(b, elem.size(), s, d);
        });
    });
    Ok(())
}

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
    let dims = ctx.run_dims.as_ref().expect("symbolic");
    let shape = dims.shape(ctx.b, &x.ty);
    let d = domain(dtype);
    let float = matches!(d, Domain::F32 | Domain::F64);
    let b = &mut *ctx.b;
    let outer = Ext::product(b, &shape[..axis]);
    let dim = shape[axis];
    let inner = Ext::product(b, &shape[axis + 1..]);
    let dim_v = dim.value(b);
    let elem = dtype.size();
    run_shape::nested_run_loop(b, &[outer, inner], &mut |b, idx| {
        let (o, i) = (idx[0], idx[1]);
        let start = match (product, d) {
            (false, Domain::F32) => b.ins().f32const(0.0),
            (false, Domain::F64) => b.ins().f64const(0.0),
            (false, Domain::Int { .. }) => kernel::iconst(b, 0),
            (true, Domain::F32) => b.ins().f32const(1.0),
            (true, Domain::F64) => b.ins().f64const(1.0),
            (true, Domain::Int { .. }) => kernel::iconst(b, 1),
        };
        let acc = var(b, start);
        let plane = dim.mul(b, inner);
        let lane = plane.times(b, o);
        let lane = b.ins().iadd(lane, i);
        run_shape::run_loop(b, dim, |b, t| {
            let p = if reverse {
                let last = b.ins().iadd_imm_s(dim_v, -1);
                b.ins().isub(last, t)
            } else {
                t
            };
            let at = inner.times(b, p);
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
            let out = if exclusive { cur } else { next };
            kernel::store_elem(b, dtype, out, dst, 0);
            b.def_var(acc, next);
        });
    });
    Ok(())
}
