//! QuantizeLinear, DequantizeLinear, MatMulInteger and ConvInteger.
//!
//! The integer products go through the exact int16 GEMM of [`crate::codegen::kernels::clif::gemm_int`]:
//! MatMulInteger widens A (minus its zero point) into scratch and packs B at compile
//! time when it is constant; ConvInteger packs constant weights at compile time and
//! writes the zero-point-adjusted im2col matrix of each image in the GEMM's pair-packed
//! layout. QuantizeLinear and DequantizeLinear are element loops.

use crate::codegen::plan::int8::{align, dot_zero_point, matmul_int_shape, ConvInt, MatMulInt};
use crate::codegen::plan::Strategy;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;

use super::{LowerCtx, LowerResult, Operand};
use crate::codegen::isa::{Dot, X86Dot};
use crate::codegen::kernel::{self, flags};
use crate::codegen::kernels::clif::gemm_dot::{self, DotGemm};
use crate::codegen::kernels::clif::gemm_int::{self, IntGemm};
use crate::codegen::kernels::x86::gemm_u8s8_ymm::{self, GemmSpec};
use crate::ir::{DType, Tensor};
use crate::ops::ConvAttrs;

/// `[outer, dim, inner]` around `axis` when the parameters are per axis, else the whole
/// tensor as one run; and whether they are.
fn axis_runs(shape: &[usize], axis: usize, per_axis: bool) -> [usize; 3] {
    let n: usize = shape.iter().product();
    if !per_axis {
        return [1, 1, n];
    }
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    [outer, shape[axis], inner]
}

/// The zero point at index `k` (a run-time value), or 0 when omitted.
fn zero_point_at(b: &mut FunctionBuilder, zp: Option<&Operand>, k: Value) -> Value {
    match zp {
        None => kernel::iconst(b, 0),
        Some(z) => {
            let k = if z.ty.numel() > 1 {
                k
            } else {
                kernel::iconst(b, 0)
            };
            let at = kernel::elem_addr(b, z.ptr, k, z.ty.dtype.size());
            kernel::load_elem(b, z.ty.dtype, at, 0)
        }
    }
}

/// Calls `body(flat index, scale, zero point)` for every element of `x`, with the
/// float32 scale and the zero point (0 when omitted) of its index along `axis`, or the
/// single ones.
fn per_axis_elements(
    b: &mut FunctionBuilder,
    x: &Operand,
    scale: &Operand,
    zp: Option<&Operand>,
    axis: usize,
    body: &mut dyn FnMut(&mut FunctionBuilder, Value, Value, Value),
) {
    let runs = axis_runs(&x.ty.shape, axis, scale.ty.numel() > 1);
    kernel::nested_loop(b, &runs, &mut |b, idx| {
        let k = idx[1];
        let s_at = kernel::elem_addr(b, scale.ptr, k, 4);
        let s = b.ins().load(types::F32, flags(), s_at, 0);
        let z = zero_point_at(b, zp, k);
        let flat = kernel::linear_offset(b, idx, &[runs[1] * runs[2], runs[2], 1]);
        body(b, flat, s, z);
    });
}

pub fn quantize_linear(ctx: &mut LowerCtx, axis: usize, to: DType) -> LowerResult {
    let (x, scale, y) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0));
    let zp = ctx.inputs.get(2).cloned().flatten();
    if x.ty.dtype != DType::F32 || scale.ty.dtype != DType::F32 {
        return Err(format!(
            "QuantizeLinear lowers float32 inputs and scales, not {} / {}",
            x.ty.dtype, scale.ty.dtype
        ));
    }
    let (lo, hi) = to
        .quantized_range()
        .ok_or_else(|| format!("QuantizeLinear to {to}"))?;
    per_axis_elements(
        ctx.b,
        &x,
        &scale,
        zp.as_ref(),
        axis,
        &mut |b, flat, s, z| {
            let at = kernel::elem_addr(b, x.ptr, flat, 4);
            let v = kernel::load_elem(b, DType::F32, at, 0);
            // round_half_even(x / scale) + zp, saturated; NaN becomes 0 + zp.
            let q = b.ins().fdiv(v, s);
            let q = b.ins().nearest(q);
            let q = b.ins().fcvt_to_sint_sat(types::I64, q);
            let q = b.ins().iadd(q, z);
            let (lo, hi) = (kernel::iconst(b, lo), kernel::iconst(b, hi));
            let q = b.ins().smax(q, lo);
            let q = b.ins().smin(q, hi);
            let at = kernel::elem_addr(b, y.ptr, flat, to.size());
            kernel::store_elem(b, to, q, at, 0);
        },
    );
    Ok(())
}

pub fn dequantize_linear(ctx: &mut LowerCtx, axis: usize) -> LowerResult {
    let (x, scale, y) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0));
    let zp = ctx.inputs.get(2).cloned().flatten();
    if scale.ty.dtype != DType::F32
        || !matches!(
            x.ty.dtype,
            DType::U8 | DType::I8 | DType::U16 | DType::I16 | DType::I32
        )
    {
        return Err(format!(
            "DequantizeLinear lowers 8/16/32-bit integers with float32 scales, not {} / {}",
            x.ty.dtype, scale.ty.dtype
        ));
    }
    per_axis_elements(
        ctx.b,
        &x,
        &scale,
        zp.as_ref(),
        axis,
        &mut |b, flat, s, z| {
            let at = kernel::elem_addr(b, x.ptr, flat, x.ty.dtype.size());
            let v = kernel::load_elem(b, x.ty.dtype, at, 0);
            let d = b.ins().isub(v, z);
            let d = b.ins().fcvt_from_sint(types::F32, d);
            let r = b.ins().fmul(d, s);
            let at = kernel::elem_addr(b, y.ptr, flat, 4);
            b.ins().store(flags(), r, at, 0);
        },
    );
    Ok(())
}

/// Integer values of a constant 8-bit tensor (or of a zero point: `None` is 0).
fn ints(t: Option<&Operand>) -> Option<Vec<i64>> {
    match t {
        None => Some(vec![0]),
        Some(o) => o.constant.as_ref().map(Tensor::to_i64_vec),
    }
}

pub fn matmul_integer(ctx: &mut LowerCtx) -> LowerResult {
    let (a, bt, y) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0));
    let (a_zp, b_zp) = (
        ctx.inputs.get(2).cloned().flatten(),
        ctx.inputs.get(3).cloned().flatten(),
    );
    let s = matmul_int_shape(&a.ty, &bt.ty)?;
    if s.k == 0 {
        // Empty sums: zeros, whatever the zero points.
        super::conv_u8s8::fill_bytes(ctx.b, y.ptr, y.ty.numel() * 4, 0);
        return Ok(());
    }
    if let Strategy::IntGemm {
        dot: Some(form),
        x86,
    } = ctx.kernel.strategy
    {
        let operands = (&a, &bt, &y, a_zp.as_ref(), b_zp.as_ref());
        return matmul_dot(ctx, &s, operands, form, x86);
    }
    let runtime_g = IntGemm::new(s.m, s.n, s.k, s.n);
    let mut g = runtime_g;
    let scratch = ctx.scratch.ok_or("MatMulInteger needs scratch")?;
    // Constant B (and zero point): every B matrix pair-packed at compile time, as int8
    // when the values minus the zero point fit.
    let packed = match (&bt.constant, ints(b_zp.as_ref())) {
        (Some(t), Some(zp)) => {
            let v = t.to_i64_vec();
            let mats = v.len() / (s.k * s.n).max(1);
            let mut all = vec![];
            for t in 0..mats {
                all.extend(gemm_int::pack_b(&g, s.k, |kk, j| {
                    let z = zp[if zp.len() > 1 { j } else { 0 }];
                    (v[t * s.k * s.n + kk * s.n + j] - z) as i16
                }));
            }
            g.b_bytes = gemm_int::narrowest(&all);
            Some(ctx.weight_rodata(gemm_int::element_bytes(&all, g.b_bytes))?)
        }
        _ => None,
    };
    let b = &mut *ctx.b;
    let a16 = scratch;
    let bp_scratch = b.ins().iadd_imm_s(scratch, align(s.m * g.k2 * 2) as i64);
    let mat_a = s.m * s.k;
    let mat_b = s.k * s.n;
    let out_strides = kernel::strides_of(&s.batch);
    kernel::nested_loop(
        b,
        &s.batch.iter().map(|&d| d.max(1)).collect::<Vec<_>>(),
        &mut |b, idx| {
            let ai = kernel::linear_offset(b, idx, &s.a_batch);
            let a_mat = kernel::elem_addr(b, a.ptr, ai, mat_a * a.ty.dtype.size());
            let bi = kernel::linear_offset(b, idx, &s.b_batch);
            let yi = kernel::linear_offset(b, idx, &out_strides);
            let y_mat = kernel::elem_addr(b, y.ptr, yi, s.m * s.n * 4);
            // A16[r][kk] = A[r][kk] − a_zp[r], zero past K.
            widen_rows(b, a_mat, a.ty.dtype, a_zp.as_ref(), 0, a16, s.m, s.k, g.k2);
            let bp = match packed {
                Some(p) => kernel::elem_addr(b, p, bi, g.packed_b_bytes()),
                None => {
                    let b_mat = kernel::elem_addr(b, bt.ptr, bi, mat_b * bt.ty.dtype.size());
                    pack_b_runtime(
                        b,
                        &runtime_g,
                        b_mat,
                        bt.ty.dtype,
                        b_zp.as_ref(),
                        s.k,
                        bp_scratch,
                    );
                    bp_scratch
                }
            };
            gemm_int::emit(b, &g, a16, bp, y_mat);
        },
    );
    Ok(())
}

/// MatMulInteger of uint8 A and constant int8 B without a zero point on the 8-bit
/// dot-product GEMM ([`crate::codegen::kernels::clif::gemm_dot`]); false (nothing emitted) for other operands.
#[allow(clippy::too_many_arguments)]
fn matmul_dot(
    ctx: &mut LowerCtx,
    s: &MatMulInt,
    (a, bt, y, a_zp, b_zp): (
        &Operand,
        &Operand,
        &Operand,
        Option<&Operand>,
        Option<&Operand>,
    ),
    form: Dot,
    x86: Option<X86Dot>,
) -> LowerResult {
    let (Some(b_const), Some(za)) = (
        &bt.constant,
        dot_zero_point(
            a.ty.dtype,
            bt.constant.as_ref(),
            a_zp.map(|z| z.constant.as_ref()),
            b_zp.map(|z| z.constant.as_ref()),
        ),
    ) else {
        return Err("the dot-product GEMM was planned for operands it cannot take".into());
    };
    let g = DotGemm {
        m: s.m,
        n: s.n,
        k4: s.k.next_multiple_of(4),
        form,
    };
    // The kernel sums (x − offset)·w: the constant term is relative to that offset.
    let za = za - g.form.activation_offset();
    let v = b_const.to_i64_vec();
    let mats = v.len() / (s.k * s.n).max(1);
    let spec = x86.map(|isa| GemmSpec {
        isa,
        m: s.m,
        n: s.n,
        k4: g.k4,
    });
    let mut packed = vec![];
    let mut corr: Vec<u8> = vec![];
    // corr (one int32 per packed column) takes A's zero point out.
    let columns = spec.map_or(g.groups() * 4, |spec| spec.padded_n());
    for t in 0..mats {
        let at = |kk: usize, j: usize| v[t * s.k * s.n + kk * s.n + j];
        packed.extend(match &spec {
            Some(spec) => gemm_u8s8_ymm::pack_b(spec, s.k, |kk, j| at(kk, j) as i8),
            None => gemm_dot::pack_b(&g, s.k, |kk, j| at(kk, j) as i8),
        });
        for j in 0..columns {
            let sum: i64 = if j < s.n {
                (0..s.k).map(|kk| at(kk, j)).sum()
            } else {
                0
            };
            corr.extend(((-za * sum) as i32).to_le_bytes());
        }
    }
    let packed_bytes = packed.len() / mats.max(1);
    let packed = ctx.weight_rodata(packed)?;
    let corr = ctx.weight_rodata(corr)?;
    let scratch = ctx.scratch.ok_or("MatMulInteger needs scratch")?;
    let machine = match &spec {
        Some(spec) => {
            let code = gemm_u8s8_ymm::emit(spec)?;
            Some(super::gemm::define_machine_code(ctx, 5, &code)?)
        }
        None => None,
    };
    let b = &mut *ctx.b;
    let mat_a = s.m * s.k;
    let out_strides = kernel::strides_of(&s.batch);
    kernel::nested_loop(
        b,
        &s.batch.iter().map(|&d| d.max(1)).collect::<Vec<_>>(),
        &mut |b, idx| {
            let ai = kernel::linear_offset(b, idx, &s.a_batch);
            let a_mat = kernel::elem_addr(b, a.ptr, ai, mat_a);
            let bi = kernel::linear_offset(b, idx, &s.b_batch);
            let yi = kernel::linear_offset(b, idx, &out_strides);
            let y_mat = kernel::elem_addr(b, y.ptr, yi, s.m * s.n * 4);
            // Rows of K bytes are read in place when K is a multiple of 4; else copied
            // into rows of k4, zero padded.
            let rows = if s.k == g.k4 {
                a_mat
            } else {
                zero_fill(b, scratch, (s.m * g.k4).next_multiple_of(16));
                kernel::nested_loop(b, &[s.m, s.k], &mut |b, i| {
                    let from = kernel::linear_offset(b, i, &[s.k, 1]);
                    let from = b.ins().iadd(a_mat, from);
                    let to = kernel::linear_offset(b, i, &[g.k4, 1]);
                    let to = b.ins().iadd(scratch, to);
                    let x = b.ins().load(types::I8, flags(), from, 0);
                    b.ins().store(flags(), x, to, 0);
                });
                scratch
            };
            if let (Some(func), Some(spec)) = (machine, &spec) {
                let bp = kernel::elem_addr(b, packed, bi, packed_bytes);
                let cp = kernel::elem_addr(b, corr, bi, spec.padded_n() * 4);
                let a16 = b.ins().iadd_imm_s(scratch, align(s.m * g.k4) as i64);
                b.ins().call(func, &[rows, bp, cp, y_mat, a16]);
                return;
            }
            let bp = kernel::elem_addr(b, packed, bi, g.packed_b_bytes());
            let cp = kernel::elem_addr(b, corr, bi, g.groups() * 16);
            gemm_dot::emit(b, &g, rows, bp, cp, y_mat);
        },
    );
    Ok(())
}

/// Zeroes `bytes` (a multiple of 16) at `dst`.
fn zero_fill(b: &mut FunctionBuilder, dst: Value, bytes: usize) {
    let zero = b.ins().iconst(types::I32, 0);
    let zero = b.ins().splat(types::I32X4, zero);
    kernel::counted_loop(b, 0, (bytes / 16) as i64, 1, |b, i| {
        let at = kernel::elem_addr(b, dst, i, 16);
        b.ins().store(flags(), zero, at, 0);
    });
}

/// A runtime `k × n` matrix minus its per-column zero point, pair-packed into `dst`.
fn pack_b_runtime(
    b: &mut FunctionBuilder,
    g: &IntGemm,
    src: Value,
    dtype: DType,
    zp: Option<&Operand>,
    k: usize,
    dst: Value,
) {
    zero_fill(b, dst, g.packed_b_bytes());
    kernel::nested_loop(b, &[k, g.n], &mut |b, idx| {
        let (kk, j) = (idx[0], idx[1]);
        let z = zero_point_at(b, zp, j);
        let flat = kernel::linear_offset(b, idx, &[g.n, 1]);
        let at = kernel::elem_addr(b, src, flat, dtype.size());
        let v = kernel::load_elem(b, dtype, at, 0);
        let v = b.ins().isub(v, z);
        let v = b.ins().ireduce(types::I16, v);
        let at = packed_index(b, g, kk, j);
        let at = kernel::elem_addr(b, dst, at, 2);
        b.ins().store(flags(), v, at, 0);
    });
}

/// [`IntGemm::packed_b_index`] of run-time `(kk, j)`.
fn packed_index(b: &mut FunctionBuilder, g: &IntGemm, kk: Value, j: Value) -> Value {
    let grp = b.ins().ushr_imm_u(j, 2);
    let q = b.ins().ushr_imm_u(kk, 1);
    let base = b.ins().imul_imm_s(grp, (g.k2 / 2) as i64);
    let base = b.ins().iadd(base, q);
    let base = b.ins().imul_imm_s(base, 8);
    let lane = b.ins().band_imm_u(j, 3);
    let lane = b.ins().imul_imm_s(lane, 2);
    let odd = b.ins().band_imm_u(kk, 1);
    let off = b.ins().iadd(lane, odd);
    b.ins().iadd(base, off)
}

pub fn conv_integer(ctx: &mut LowerCtx, c: &ConvAttrs) -> LowerResult {
    let (x, w, y) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0));
    let (x_zp, w_zp) = (
        ctx.inputs.get(2).cloned().flatten(),
        ctx.inputs.get(3).cloned().flatten(),
    );
    let v = ConvInt::new(c, &x.ty, &w.ty, &y.ty)?;
    let mut g = v.gemm();
    let k = v.k();
    let scratch = ctx.scratch.ok_or("ConvInteger needs scratch")?;
    // Weights minus their per-map zero point as rows, packed once when constant (int8
    // when they fit, else int16); runtime weights are widened to int16 per call.
    let (weights, a_group) = match (&w.constant, ints(w_zp.as_ref())) {
        (Some(t), Some(zp)) => {
            let vals = t.to_i64_vec();
            let group_len = v.mg * g.k2;
            let mut rows = vec![0i16; group_len * v.group];
            for m in 0..v.maps {
                let z = zp[if zp.len() > 1 { m } else { 0 }];
                let (grp, r) = (m / v.mg, m % v.mg);
                for kk in 0..k {
                    rows[grp * group_len + r * g.k2 + kk] = (vals[m * k + kk] - z) as i16;
                }
            }
            g.a_bytes = gemm_int::narrowest(&rows);
            let bytes = gemm_int::element_bytes(&rows, g.a_bytes);
            (Some(ctx.weight_rodata(bytes)?), group_len * g.a_bytes)
        }
        _ => (None, align(v.mg * g.k2 * 2)),
    };
    let b = &mut *ctx.b;
    let a_rows = match weights {
        Some(p) => p,
        None => {
            // Runtime weights: widened once per call into the first part of scratch.
            let rows_ptr = scratch;
            for grp in 0..v.group {
                let src = b
                    .ins()
                    .iadd_imm_s(w.ptr, (grp * v.mg * k * w.ty.dtype.size()) as i64);
                let dst = b.ins().iadd_imm_s(rows_ptr, (grp * a_group) as i64);
                let zp = w_zp.clone();
                widen_rows(
                    b,
                    src,
                    w.ty.dtype,
                    zp.as_ref(),
                    grp * v.mg,
                    dst,
                    v.mg,
                    k,
                    g.k2,
                );
            }
            rows_ptr
        }
    };
    let bp = b
        .ins()
        .iadd_imm_s(scratch, (align(v.mg * g.k2 * 2) * v.group) as i64);
    let p = v.oh * v.ow;
    kernel::nested_loop(b, &[v.batch, v.group], &mut |b, idx| {
        let (n, grp) = (idx[0], idx[1]);
        let img = b.ins().imul_imm_s(n, v.group as i64);
        let img = b.ins().iadd(img, grp);
        let x_g = kernel::elem_addr(b, x.ptr, img, v.cg * v.h * v.w * x.ty.dtype.size());
        im2col(b, &v, &g, x_g, x.ty.dtype, x_zp.as_ref(), bp);
        let a_g = kernel::elem_addr(b, a_rows, grp, a_group);
        let y_g = kernel::elem_addr(b, y.ptr, img, v.mg * p * 4);
        gemm_int::emit(b, &g, a_g, bp, y_g);
    });
    Ok(())
}

/// `dst[r][kk] = src[r][kk] − zp[first + r]` as int16 rows of `k2`, zero for `kk ≥ k`.
#[allow(clippy::too_many_arguments)]
fn widen_rows(
    b: &mut FunctionBuilder,
    src: Value,
    dtype: DType,
    zp: Option<&Operand>,
    first: usize,
    dst: Value,
    rows: usize,
    k: usize,
    k2: usize,
) {
    kernel::counted_loop(b, 0, rows as i64, 1, |b, r| {
        let zr = b.ins().iadd_imm_s(r, first as i64);
        let z = zero_point_at(b, zp, zr);
        let s_row = kernel::elem_addr(b, src, r, k * dtype.size());
        let d_row = kernel::elem_addr(b, dst, r, k2 * 2);
        kernel::counted_loop(b, 0, k as i64, 1, |b, kk| {
            let at = kernel::elem_addr(b, s_row, kk, dtype.size());
            let v = kernel::load_elem(b, dtype, at, 0);
            let v = b.ins().isub(v, z);
            let v = b.ins().ireduce(types::I16, v);
            let at = kernel::elem_addr(b, d_row, kk, 2);
            b.ins().store(flags(), v, at, 0);
        });
        if k2 > k {
            let zero = b.ins().iconst(types::I16, 0);
            b.ins().store(flags(), zero, d_row, (k * 2) as i32);
        }
    });
}

/// The image's im2col matrix (`K × P`, minus the input zero point; padding is 0)
/// pair-packed into `dst`.
fn im2col(
    b: &mut FunctionBuilder,
    v: &ConvInt,
    g: &IntGemm,
    x: Value,
    dtype: DType,
    zp: Option<&Operand>,
    dst: Value,
) {
    zero_fill(b, dst, g.packed_b_bytes());
    let zero_idx = kernel::iconst(b, 0);
    let z = zero_point_at(b, zp, zero_idx);
    kernel::nested_loop(b, &[v.cg, v.kh, v.kw, v.oh, v.ow], &mut |b, idx| {
        let (c, ky, kx, oy, ox) = (idx[0], idx[1], idx[2], idx[3], idx[4]);
        let coord = |b: &mut FunctionBuilder, o: Value, t: Value, axis: usize| {
            let a = b.ins().imul_imm_s(o, v.stride[axis] as i64);
            let t = b.ins().imul_imm_s(t, v.dilation[axis] as i64);
            let a = b.ins().iadd(a, t);
            b.ins().iadd_imm_s(a, -(v.pad[axis] as i64))
        };
        let iy = coord(b, oy, ky, 0);
        let ix = coord(b, ox, kx, 1);
        // Unsigned compares reject negative coordinates too.
        let in_y = b.ins().icmp_imm_u(IntCC::UnsignedLessThan, iy, v.h as i64);
        let in_x = b.ins().icmp_imm_u(IntCC::UnsignedLessThan, ix, v.w as i64);
        let inside = b.ins().band(in_y, in_x);
        let flat = kernel::linear_offset(b, &[c, iy, ix], &[v.h * v.w, v.w, 1]);
        let flat = b.ins().select(inside, flat, zero_idx);
        let at = kernel::elem_addr(b, x, flat, dtype.size());
        let val = kernel::load_elem(b, dtype, at, 0);
        let val = b.ins().isub(val, z);
        let zero = kernel::iconst(b, 0);
        let val = b.ins().select(inside, val, zero);
        let val = b.ins().ireduce(types::I16, val);
        let kk = kernel::linear_offset(b, &[c, ky, kx], &[v.kh * v.kw, v.kw, 1]);
        let pp = kernel::linear_offset(b, &[oy, ox], &[v.ow, 1]);
        let at = packed_index(b, g, kk, pp);
        let at = kernel::elem_addr(b, dst, at, 2);
        b.ins().store(flags(), val, at, 0);
    });
}
