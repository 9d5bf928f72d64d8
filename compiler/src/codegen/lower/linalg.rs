//! MatMul and Gemm.
//!
//! float32 goes through the register-tiled GEMM emitter ([`super::gemm`]), with constant
//! B packed at compile time; every other dtype (float64, float16/bfloat16 computed in
//! f32, the integers wrapping in i64) through a plain scalar dot-product loop.

use crate::codegen::plan::gemm::{GemmShape, MatMulShape};
use cranelift_codegen::ir::{types, InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;

use super::gemm::{self, ALayout, Addend, BLayout, GemmKernel, GemmSpec, Geometry, RunTimeStrides};
use super::{LowerCtx, LowerResult, Operand};
use crate::codegen::kernel::{self, domain, Domain};
use crate::ir::{DType, Tensor};
use crate::ops::{Activation, GemmAttrs, MatMulAttrs};

/// The elements of a constant float32 tensor, row-major.
pub(super) fn f32_values(t: &Tensor) -> Option<Vec<f32>> {
    match t {
        Tensor::F32(a) => Some(a.iter().copied().collect()),
        _ => None,
    }
}

/// Inputs 2 (bias) and 3 (residual) of a fused MatMul, Gemm or Conv; f32 only.
fn epilogue_inputs(ctx: &LowerCtx, first: usize) -> (Vec<Option<Operand>>, bool) {
    let extra: Vec<Option<Operand>> = (first..4)
        .map(|i| ctx.inputs.get(i).cloned().flatten())
        .collect();
    let fused = extra.iter().any(Option::is_some);
    (extra, fused)
}

/// The axis the plan split a GEMM along (see [`plan_gemm`]).
fn split_axis(ctx: &LowerCtx) -> gemm::SplitAxis {
    match ctx.kernel.weights_by_columns {
        true => gemm::SplitAxis::Cols,
        false => gemm::SplitAxis::Rows,
    }
}

/// Copies B (`k` rows of `n` floats, `row_stride` floats apart, at `src`) into `dst` in
/// [`gemm::pack_b`]'s layout: full panels of `nr` columns as `[k][nr]`, then the tail
/// panel, zero-padded to its width.
pub(super) fn pack_b_at_run_time(
    b: &mut FunctionBuilder,
    geom: &Geometry,
    (k, n, row_stride): (usize, usize, usize),
    src: Value,
    dst: Value,
) {
    let nr = geom.nr;
    let copy_row = |b: &mut FunctionBuilder, ptrs: &[Value], floats: usize| {
        let bytes = floats * 4;
        let mut off = 0;
        while off + 16 <= bytes {
            let v = b
                .ins()
                .load(types::I8X16, kernel::flags(), ptrs[0], off as i32);
            b.ins().store(kernel::flags(), v, ptrs[1], off as i32);
            off += 16;
        }
        while off < bytes {
            let v = b
                .ins()
                .load(types::I32, kernel::flags(), ptrs[0], off as i32);
            b.ins().store(kernel::flags(), v, ptrs[1], off as i32);
            off += 4;
        }
    };
    let panels = n / nr;
    kernel::counted_loop(b, 0, panels as i64, 1, |b, p| {
        let from = b.ins().imul_imm_s(p, (nr * 4) as i64);
        let from = b.ins().iadd(src, from);
        let to = b.ins().imul_imm_s(p, (nr * k * 4) as i64);
        let to = b.ins().iadd(dst, to);
        kernel::strided_loop(b, k, &[(from, row_stride * 4), (to, nr * 4)], |b, ptrs| {
            copy_row(b, ptrs, nr)
        });
    });
    let rem = n % nr;
    if rem > 0 {
        let width = geom.tail_panel_width(rem);
        let from = b.ins().iadd_imm_s(src, (panels * nr * 4) as i64);
        let to = b.ins().iadd_imm_s(dst, (panels * nr * k * 4) as i64);
        if width > rem {
            super::conv_u8s8::fill_bytes(b, to, width * k * 4, 0);
        }
        kernel::strided_loop(
            b,
            k,
            &[(from, row_stride * 4), (to, width * 4)],
            |b, ptrs| copy_row(b, ptrs, rem),
        );
    }
}

pub fn matmul(ctx: &mut LowerCtx, attrs: &MatMulAttrs) -> LowerResult {
    let (a, b, y) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0));
    let (extra, fused) = epilogue_inputs(ctx, 2);
    if (fused || attrs.activation != Activation::None) && a.ty.dtype != DType::F32 {
        return Err(format!(
            "a fused MatMul epilogue needs float32, not {}",
            a.ty.dtype
        ));
    }
    if a.ty.dtype != b.ty.dtype {
        return Err(format!(
            "MatMul input types differ: {} and {}",
            a.ty.dtype, b.ty.dtype
        ));
    }
    let shape = MatMulShape::new(&a.ty.shape, &b.ty.shape)?;
    match a.ty.dtype {
        DType::F32 => matmul_f32(ctx, &shape, &a, &b, &y, attrs, &extra),
        DType::Bool => Err("MatMul does not support bool".into()),
        dtype => {
            matmul_scalar(ctx.b, dtype, &shape, &a, &b, &y);
            Ok(())
        }
    }
}

fn matmul_f32(
    ctx: &mut LowerCtx,
    s: &MatMulShape,
    a: &Operand,
    b: &Operand,
    y: &Operand,
    attrs: &MatMulAttrs,
    extra: &[Option<Operand>],
) -> LowerResult {
    let (bias, residual) = (extra[0].as_ref(), extra[1].as_ref());
    // Constant B: every matrix packed once, back to back.
    let geom = ctx.planned_gemm()?;
    let packed = match b.constant.as_ref().and_then(f32_values) {
        Some(values) => {
            let mat = s.k * s.n;
            let mut all = Vec::with_capacity(s.b_matrices * gemm::packed_b_len(&geom, s.k, s.n));
            let mut layout = BLayout::Packed;
            for t in 0..s.b_matrices {
                let (packed, l) = gemm::pack_weights_b(
                    &geom,
                    s.k,
                    s.n,
                    ctx.kernel.weights_by_columns,
                    |kk, j| values[t * mat + kk * s.n + j],
                );
                all.extend(packed);
                layout = l;
            }
            Some((ctx.weights_f32(&all)?, layout))
        }
        None => None,
    };
    // The plan gives a MatMul scratch only to pack its run-time B into (see
    // `packs_runtime_b`): matrix by matrix, the rows then read panels.
    let pack_into = if packed.is_none() { ctx.scratch } else { None };
    let (b_base, b_layout, b_mat_elems) = match packed {
        Some((p, layout)) => (p, layout, gemm::packed_b_len(&geom, s.k, s.n)),
        None if pack_into.is_some() => (b.ptr, BLayout::Packed, s.k * s.n),
        None => (b.ptr, BLayout::Rows { row_stride: s.n }, s.k * s.n),
    };
    let folded = s.folds_into_rows();
    let rows = s.gemm_rows();
    let spec = GemmSpec {
        m: rows,
        n: s.n,
        k: s.k,
        a: ALayout::Strided {
            row_stride: s.k,
            col_stride: 1,
        },
        b: b_layout,
        ldc: s.n,
        c_col_stride: 1,
        alpha: 1.0,
        addends: bias
            .map(|_| Addend {
                row_stride: 0,
                col_stride: 1,
                scale: 1.0,
            })
            .into_iter()
            .chain(residual.map(|_| Addend {
                row_stride: s.n,
                col_stride: 1,
                scale: 1.0,
            }))
            .collect(),
        activation: attrs.activation,
        geometry: geom,
        b_taps: vec![],
        rows_at_run_time: false,
        cols_at_run_time: false,
        run_time_strides: RunTimeStrides::None,
    };
    let dims = (s.k, s.n, s.n);
    let batches: usize = s.batch.iter().product();
    if let Some(run) = ctx.run_rows {
        // One call for the rows the run has, the A rows of all of them contiguous.
        if !(folded || batches == 1) || pack_into.is_some() || !rows.is_multiple_of(run.bound) {
            return Err("rows counted at run time need one GEMM over constant weights".into());
        }
        let spec = GemmSpec {
            rows_at_run_time: true,
            cols_at_run_time: false,
            run_time_strides: RunTimeStrides::None,
            ..spec
        };
        let kernel = GemmKernel::define(ctx, &spec)?;
        let rows_now = ctx.b.ins().imul_imm_s(run.count, (rows / run.bound) as i64);
        let addends: Vec<Value> = bias.into_iter().chain(residual).map(|t| t.ptr).collect();
        kernel.call_rows(ctx.b, a.ptr, b_base, y.ptr, &addends, Some(rows_now));
        return Ok(());
    }
    if folded || batches == 1 {
        let addends: Vec<Value> = bias.into_iter().chain(residual).map(|t| t.ptr).collect();
        let b_ptr = match pack_into {
            Some(scratch) => {
                pack_b_at_run_time(ctx.b, &geom, dims, b_base, scratch);
                scratch
            }
            None => b_base,
        };
        return gemm::call_split(ctx, split_axis(ctx), &spec, a.ptr, b_ptr, y.ptr, &addends);
    }
    let kernel = GemmKernel::define(ctx, &spec)?;
    let y_strides = kernel::strides_of(&s.batch);
    kernel::nested_loop(ctx.b, &s.batch, &mut |bld, idx| {
        let a_ptr = batch_ptr(bld, a.ptr, idx, &s.a_batch_strides, s.m * s.k);
        let mut b_ptr = batch_ptr(bld, b_base, idx, &s.b_batch_strides, b_mat_elems);
        if let Some(scratch) = pack_into {
            pack_b_at_run_time(bld, &geom, dims, b_ptr, scratch);
            b_ptr = scratch;
        }
        let c_ptr = batch_ptr(bld, y.ptr, idx, &y_strides, s.m * s.n);
        let mut addends: Vec<Value> = bias.iter().map(|t| t.ptr).collect();
        if let Some(r) = residual {
            addends.push(batch_ptr(bld, r.ptr, idx, &y_strides, s.m * s.n));
        }
        kernel.call(bld, a_ptr, b_ptr, c_ptr, &addends);
    });
    Ok(())
}

/// Address of the matrix at batch index `idx`: `base + Σ idx·strides · matrix` floats.
pub(super) fn batch_ptr(
    b: &mut FunctionBuilder,
    base: Value,
    idx: &[Value],
    strides: &[usize],
    matrix_elems: usize,
) -> Value {
    let scaled: Vec<usize> = strides.iter().map(|s| s * matrix_elems * 4).collect();
    let off = kernel::linear_offset(b, idx, &scaled);
    b.ins().iadd(base, off)
}

fn matmul_scalar(
    bld: &mut FunctionBuilder,
    dtype: DType,
    s: &MatMulShape,
    a: &Operand,
    b: &Operand,
    y: &Operand,
) {
    let size = dtype.size();
    let mut shape = s.batch.clone();
    shape.extend([s.m, s.n]);
    let a_strides: Vec<usize> = s
        .a_batch_strides
        .iter()
        .map(|x| x * s.m * s.k)
        .chain([s.k, 0])
        .collect();
    let b_strides: Vec<usize> = s
        .b_batch_strides
        .iter()
        .map(|x| x * s.k * s.n)
        .chain([0, 1])
        .collect();
    kernel::nested_loop(bld, &shape, &mut |bld, idx| {
        let a_row = kernel::linear_offset(bld, idx, &a_strides);
        let a_row = kernel::elem_addr(bld, a.ptr, a_row, size);
        let b_col = kernel::linear_offset(bld, idx, &b_strides);
        let b_col = kernel::elem_addr(bld, b.ptr, b_col, size);
        let acc = scalar_dot(bld, dtype, a_row, 1, b_col, s.n, s.k);
        let out = kernel::linear_offset(bld, idx, &kernel::strides_of(&shape));
        let out = kernel::elem_addr(bld, y.ptr, out, size);
        kernel::store_elem(bld, dtype, acc, out, 0);
    });
}

/// `Σ_k A[k·a_step] · B[k·b_step]` (steps in elements) in `dtype`'s computation domain.
fn scalar_dot(
    b: &mut FunctionBuilder,
    dtype: DType,
    a: Value,
    a_step: usize,
    bp: Value,
    b_step: usize,
    k: usize,
) -> Value {
    let d = domain(dtype);
    let acc = b.declare_var(kernel::domain_type(d));
    let zero = domain_zero(b, d);
    b.def_var(acc, zero);
    kernel::counted_loop(b, 0, k as i64, 1, |b, kk| {
        let x = kernel::elem_addr(b, a, kk, a_step * dtype.size());
        let x = kernel::load_elem(b, dtype, x, 0);
        let w = kernel::elem_addr(b, bp, kk, b_step * dtype.size());
        let w = kernel::load_elem(b, dtype, w, 0);
        let p = domain_mul(b, d, x, w);
        let sum = b.use_var(acc);
        let sum = domain_add(b, d, sum, p);
        b.def_var(acc, sum);
    });
    b.use_var(acc)
}

pub(super) fn domain_zero(b: &mut FunctionBuilder, d: Domain) -> Value {
    match d {
        Domain::F32 => b.ins().f32const(0.0),
        Domain::F64 => b.ins().f64const(0.0),
        Domain::Int { .. } => b.ins().iconst(types::I64, 0),
    }
}

pub(super) fn domain_mul(b: &mut FunctionBuilder, d: Domain, x: Value, y: Value) -> Value {
    match d {
        Domain::Int { .. } => b.ins().imul(x, y),
        _ => b.ins().fmul(x, y),
    }
}

pub(super) fn domain_add(b: &mut FunctionBuilder, d: Domain, x: Value, y: Value) -> Value {
    match d {
        Domain::Int { .. } => b.ins().iadd(x, y),
        _ => b.ins().fadd(x, y),
    }
}

/// `v · factor` for a float domain (f32 or f64).
fn scale_float(b: &mut FunctionBuilder, d: Domain, v: Value, factor: f32) -> Value {
    let f = match d {
        Domain::F64 => b.ins().f64const(f64::from(factor)),
        _ => b.ins().f32const(factor),
    };
    b.ins().fmul(v, f)
}

pub fn gemm(ctx: &mut LowerCtx, g: &GemmAttrs) -> LowerResult {
    let (a, b, y) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0));
    let s = GemmShape::new(g, &a.ty.shape, &b.ty.shape)?;
    // C is ignored when beta = 0, as in the reference (so NaN/inf in C do not leak).
    let c = ctx
        .inputs
        .get(2)
        .cloned()
        .flatten()
        .filter(|_| g.beta != 0.0);
    if let Some(c) = &c {
        if c.ty.dtype != a.ty.dtype || c.ty.rank() > 2 {
            return Err(format!("Gemm C {} does not match A {}", c.ty, a.ty));
        }
    }
    if a.ty.dtype != b.ty.dtype {
        return Err(format!(
            "Gemm input types differ: {} and {}",
            a.ty.dtype, b.ty.dtype
        ));
    }
    let residual = ctx.inputs.get(3).cloned().flatten();
    if (residual.is_some() || g.activation != Activation::None) && a.ty.dtype != DType::F32 {
        return Err(format!(
            "a fused Gemm epilogue needs float32, not {}",
            a.ty.dtype
        ));
    }
    match a.ty.dtype {
        DType::F32 => gemm_f32(ctx, g, &s, &a, &b, c.as_ref(), residual.as_ref(), &y),
        DType::Bool => Err("Gemm does not support bool".into()),
        dtype => {
            gemm_scalar(ctx.b, g, dtype, &s, &a, &b, c.as_ref(), &y);
            Ok(())
        }
    }
}

/// Strides (row, column) in elements that broadcast C to `[m, n]`.
fn c_strides(c: &Operand, m: usize, n: usize) -> (usize, usize) {
    let s = kernel::broadcast_strides(&c.ty.shape, &[m, n]);
    (s[0], s[1])
}

#[allow(clippy::too_many_arguments)]
fn gemm_f32(
    ctx: &mut LowerCtx,
    g: &GemmAttrs,
    s: &GemmShape,
    a: &Operand,
    b: &Operand,
    c: Option<&Operand>,
    residual: Option<&Operand>,
    y: &Operand,
) -> LowerResult {
    let geom = ctx.planned_gemm()?;
    let (b_ptr, b_layout) = match b.constant.as_ref().and_then(f32_values) {
        Some(v) => {
            let (ks, ns) = s.b_strides;
            let (packed, layout) =
                gemm::pack_weights_b(&geom, s.k, s.n, ctx.kernel.weights_by_columns, |kk, j| {
                    v[kk * ks + j * ns]
                });
            (ctx.weights_f32(&packed)?, layout)
        }
        None if s.b_strides.1 == 1 => (
            b.ptr,
            BLayout::Rows {
                row_stride: s.b_strides.0,
            },
        ),
        None => (
            b.ptr,
            BLayout::Gather {
                k_stride: s.b_strides.0,
                n_stride: s.b_strides.1,
            },
        ),
    };
    let addends: Vec<Addend> = c
        .map(|c| {
            let (row_stride, col_stride) = c_strides(c, s.m, s.n);
            Addend {
                row_stride,
                col_stride,
                scale: g.beta,
            }
        })
        .into_iter()
        .chain(residual.map(|_| Addend {
            row_stride: s.n,
            col_stride: 1,
            scale: 1.0,
        }))
        .collect();
    let spec = GemmSpec {
        m: s.m,
        n: s.n,
        k: s.k,
        a: ALayout::Strided {
            row_stride: s.a_strides.0,
            col_stride: s.a_strides.1,
        },
        b: b_layout,
        ldc: s.n,
        c_col_stride: 1,
        alpha: g.alpha,
        addends,
        activation: g.activation,
        geometry: geom,
        b_taps: vec![],
        rows_at_run_time: false,
        cols_at_run_time: false,
        run_time_strides: RunTimeStrides::None,
    };
    let c_ptrs: Vec<Value> = c.into_iter().chain(residual).map(|c| c.ptr).collect();
    gemm::call_split(ctx, split_axis(ctx), &spec, a.ptr, b_ptr, y.ptr, &c_ptrs)
}

#[allow(clippy::too_many_arguments)]
fn gemm_scalar(
    bld: &mut FunctionBuilder,
    g: &GemmAttrs,
    dtype: DType,
    s: &GemmShape,
    a: &Operand,
    b: &Operand,
    c: Option<&Operand>,
    y: &Operand,
) {
    let size = dtype.size();
    let d = domain(dtype);
    // Integers stay exact (wrapping) unless alpha or beta actually scale; then the
    // reference goes through float64 and truncates back, saturating.
    let int_scaled =
        matches!(d, Domain::Int { .. }) && (g.alpha != 1.0 || (c.is_some() && g.beta != 1.0));
    let c_strides = c.map(|c| c_strides(c, s.m, s.n));
    kernel::nested_loop(bld, &[s.m, s.n], &mut |bld, idx| {
        let a_row = kernel::linear_offset(bld, &idx[..1], &[s.a_strides.0]);
        let a_row = kernel::elem_addr(bld, a.ptr, a_row, size);
        let b_col = kernel::linear_offset(bld, &idx[1..], &[s.b_strides.1]);
        let b_col = kernel::elem_addr(bld, b.ptr, b_col, size);
        let ab = scalar_dot(bld, dtype, a_row, s.a_strides.1, b_col, s.b_strides.0, s.k);
        let c_val = c.zip(c_strides).map(|(c, (rs, cs))| {
            let off = kernel::linear_offset(bld, idx, &[rs, cs]);
            let addr = kernel::elem_addr(bld, c.ptr, off, size);
            kernel::load_elem(bld, dtype, addr, 0)
        });
        let out = if int_scaled {
            int_gemm_via_f64(bld, dtype, ab, c_val, g)
        } else if let Domain::Int { .. } = d {
            c_val.map_or(ab, |cv| bld.ins().iadd(ab, cv))
        } else {
            let mut v = if g.alpha != 1.0 {
                scale_float(bld, d, ab, g.alpha)
            } else {
                ab
            };
            if let Some(cv) = c_val {
                let cv = if g.beta != 1.0 {
                    scale_float(bld, d, cv, g.beta)
                } else {
                    cv
                };
                v = bld.ins().fadd(v, cv);
            }
            v
        };
        let off = kernel::linear_offset(bld, idx, &[s.n, 1]);
        let addr = kernel::elem_addr(bld, y.ptr, off, size);
        kernel::store_elem(bld, dtype, out, addr, 0);
    });
}

/// numpy's integer Gemm with a real alpha/beta: `T(f64(wrap_T(ab))·alpha + f64(c)·beta)`
/// with the final conversion saturating to T's range (NaN → 0), like Rust's `as`.
fn int_gemm_via_f64(
    b: &mut FunctionBuilder,
    dtype: DType,
    ab: Value,
    c: Option<Value>,
    g: &GemmAttrs,
) -> Value {
    let signed = dtype.is_signed_int();
    // Wrap the i64 product to T first: store/load semantics without the memory.
    let raw = kernel::from_domain(b, dtype, ab);
    let ab = kernel::to_domain(b, dtype, raw);
    let to_f64 = |b: &mut FunctionBuilder, v: Value| {
        if signed {
            b.ins().fcvt_from_sint(types::F64, v)
        } else {
            b.ins().fcvt_from_uint(types::F64, v)
        }
    };
    let abf = to_f64(b, ab);
    let alpha = b.ins().f64const(f64::from(g.alpha));
    let mut v = b.ins().fmul(abf, alpha);
    if let Some(c) = c {
        let cf = to_f64(b, c);
        let beta = b.ins().f64const(f64::from(g.beta));
        let cf = b.ins().fmul(cf, beta);
        v = b.ins().fadd(v, cf);
    }
    if dtype.size() < 8 {
        let (lo, hi) = int_range(dtype);
        let lo = b.ins().f64const(lo);
        let hi = b.ins().f64const(hi);
        v = b.ins().fmax(v, lo);
        v = b.ins().fmin(v, hi);
    }
    if signed {
        b.ins().fcvt_to_sint_sat(types::I64, v)
    } else {
        b.ins().fcvt_to_uint_sat(types::I64, v)
    }
}

/// The range of a narrow integer type, as f64 (exact for ≤ 32 bits).
fn int_range(dtype: DType) -> (f64, f64) {
    let bits = dtype.size() as i32 * 8;
    if dtype.is_signed_int() {
        (-(2f64.powi(bits - 1)), 2f64.powi(bits - 1) - 1.0)
    } else {
        (0.0, 2f64.powi(bits) - 1.0)
    }
}
