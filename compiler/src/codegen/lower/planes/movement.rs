//! Movement of values on run-time planes, dense at their actual extents before and
//! after: a Reshape adding or removing unit axes copies the bytes the run has, a
//! Transpose walks the output in order with each axis's input stride computed from
//! the extents (a CRNN's columns `[1, C, w]` become the sequence `[w, 1, C]`).

use cranelift_codegen::ir::{types, InstBuilder, Value};
use cranelift_frontend::{FunctionBuilder, Variable};

use super::{extents, product, PlaneSource};
use crate::codegen::kernel::{self, flags};
use crate::codegen::lower::{LowerCtx, LowerResult};
use crate::ir::DType;

/// The input's elements (every extent at the dim's `count`), copied as they are.
pub(super) fn reshape(ctx: &mut LowerCtx, src: &PlaneSource) -> LowerResult {
    let (x, y) = (ctx.input(0)?, ctx.output(0));
    if x.ty.dtype != DType::F32 {
        return Err("a Reshape on run-time planes moves float32 values".into());
    }
    let b = &mut *ctx.b;
    let dims = extents(b, src, &x.ty, 0);
    let n = product(b, &dims);
    let vectors = b.ins().ushr_imm_s(n, 2);
    kernel::dynamic_loop(b, vectors, |b, i| {
        let at = b.ins().imul_imm_s(i, 16);
        let (s, d) = (b.ins().iadd(x.ptr, at), b.ins().iadd(y.ptr, at));
        let v = b.ins().load(types::F32X4, flags(), s, 0);
        b.ins().store(flags(), v, d, 0);
    });
    let done = b.ins().ishl_imm_s(vectors, 2);
    kernel::range_loop(b, done, n, |b, i| {
        let at = b.ins().imul_imm_s(i, 4);
        let (s, d) = (b.ins().iadd(x.ptr, at), b.ins().iadd(y.ptr, at));
        let v = b.ins().load(types::F32, flags(), s, 0);
        b.ins().store(flags(), v, d, 0);
    });
    Ok(())
}

/// `y = transpose(x, perm)` at the run's extents.
pub(super) fn transpose(ctx: &mut LowerCtx, perm: &[usize], src: &PlaneSource) -> LowerResult {
    let (x, y) = (ctx.input(0)?, ctx.output(0));
    let dtype = x.ty.dtype;
    let rank = x.ty.rank();
    if perm.len() != rank {
        return Err("the Transpose's permutation does not match its input".into());
    }
    let elem = dtype.size();
    let b = &mut *ctx.b;
    let dims = extents(b, src, &x.ty, 0);
    // Bytes between neighbours along each input axis.
    let mut strides = vec![kernel::iconst(b, elem as i64); rank];
    for a in (0..rank.saturating_sub(1)).rev() {
        strides[a] = b.ins().imul(strides[a + 1], dims[a + 1]);
    }
    let walk = Walk {
        dims: perm.iter().map(|&p| dims[p]).collect(),
        strides: perm.iter().map(|&p| strides[p]).collect(),
        dtype,
        dst: b.declare_var(types::I64),
    };
    b.def_var(walk.dst, y.ptr);
    walk.emit(b, 0, x.ptr);
    Ok(())
}

/// The output's axes in order, with the input's stride along each.
struct Walk {
    dims: Vec<Value>,
    strides: Vec<Value>,
    dtype: DType,
    /// The next output element's address.
    dst: Variable,
}

impl Walk {
    fn emit(&self, b: &mut FunctionBuilder, level: usize, src: Value) {
        if level == self.dims.len() {
            let v = kernel::load_elem(b, self.dtype, src, 0);
            let dst = b.use_var(self.dst);
            kernel::store_elem(b, self.dtype, v, dst, 0);
            let next = b.ins().iadd_imm_s(dst, self.dtype.size() as i64);
            b.def_var(self.dst, next);
            return;
        }
        kernel::dynamic_loop(b, self.dims[level], |b, i| {
            let off = b.ins().imul(i, self.strides[level]);
            let s = b.ins().iadd(src, off);
            self.emit(b, level + 1, s);
        });
    }
}
