//! MatMul and Gemm of symbolic nodes. Constant weights with fixed K and N (every
//! projection of a transformer) run the planned GEMM kernel on rows the run counts,
//! B packed once as for a static shape; products of two run-time operands (attention
//! scores, their weighted sum) run a register-tiled loop whose M, N and K are the
//! run's.

use cranelift_codegen::ir::{types, InstBuilder, Value};
use cranelift_frontend::{FunctionBuilder, Variable};

use super::super::gemm::{self, GemmKernel};
use super::super::linalg::f32_values;
use super::super::run_shape::{self, Ext};
use super::super::{LowerCtx, LowerResult, Operand};
use crate::codegen::kernel::{self, flags};
use crate::codegen::kernels::gemm::{
    mul_add, pack_weights_b, ALayout, Addend, GemmSpec, RunTimeStrides,
};
use crate::ir::DType;
use crate::ops::{Activation, GemmAttrs, MatMulAttrs};

/// `y = A·B (+ bias row) (+ residual)`, then `activation`, over `rows` rows the run
/// counts, B a constant `[k, n]` read through `get(kk, j)`.
#[allow(clippy::too_many_arguments)]
fn rows_times_weights(
    ctx: &mut LowerCtx,
    (a, y): (&Operand, &Operand),
    rows: Ext,
    (k, n): (usize, usize),
    get: &dyn Fn(usize, usize) -> f32,
    alpha: f32,
    (bias, residual): ((Option<&Operand>, f32), Option<&Operand>),
    activation: Activation,
) -> LowerResult {
    let geom = ctx.planned_gemm()?;
    let (packed, layout) = pack_weights_b(&geom, k, n, ctx.kernel.weights_by_columns, get);
    let b_ptr = ctx.weights_f32(&packed)?;
    let max_rows = y.ty.numel() / n.max(1);
    let spec = GemmSpec {
        m: max_rows,
        n,
        k,
        a: ALayout::Strided {
            row_stride: k,
            col_stride: 1,
        },
        b: layout,
        ldc: n,
        c_col_stride: 1,
        alpha,
        addends: bias
            .0
            .map(|_| Addend {
                row_stride: 0,
                col_stride: 1,
                scale: bias.1,
            })
            .into_iter()
            .chain(residual.map(|_| Addend {
                row_stride: n,
                col_stride: 1,
                scale: 1.0,
            }))
            .collect(),
        activation,
        geometry: geom,
        b_taps: vec![],
        rows_at_run_time: true,
        cols_at_run_time: false,
        run_time_strides: RunTimeStrides::None,
    };
    let kernel = GemmKernel::define(ctx, &spec)?;
    let addends: Vec<Value> = bias.0.into_iter().chain(residual).map(|t| t.ptr).collect();
    let rows = rows.value(ctx.b);
    kernel.call_rows(ctx.b, a.ptr, b_ptr, y.ptr, &addends, Some(rows));
    Ok(())
}

/// The machine-code GEMM of `a · b` (`None` where the planned kernel family is not
/// x86 machine code, or K and N are both the run's): rows at run time; where `n` is the
/// run's, columns too, B's and C's row stride the columns; where `k` is, K too, A's
/// row stride K.
fn machine_kernel(
    ctx: &mut LowerCtx,
    a: &Operand,
    bo: &Operand,
    k: Ext,
    n: Ext,
) -> Result<Option<GemmKernel>, String> {
    let Ok(geom) = ctx.planned_gemm() else {
        return Ok(None);
    };
    if !matches!(geom.kernel, gemm::KernelKind::X86(_)) {
        return Ok(None);
    }
    let (ar, br) = (a.ty.rank(), bo.ty.rank());
    let (run_cols, run_k) = (n.fixed().is_none(), k.fixed().is_none());
    let (max_m, k, max_n) = (a.ty.shape[ar - 2], a.ty.shape[ar - 1], bo.ty.shape[br - 1]);
    if run_cols && run_k {
        return Ok(None);
    }
    let spec = GemmSpec {
        m: max_m,
        n: max_n,
        k,
        a: ALayout::Strided {
            row_stride: k,
            col_stride: 1,
        },
        b: gemm::BLayout::Rows { row_stride: max_n },
        ldc: max_n,
        c_col_stride: 1,
        alpha: 1.0,
        addends: vec![],
        activation: Activation::None,
        geometry: geom,
        b_taps: vec![],
        rows_at_run_time: true,
        cols_at_run_time: run_cols,
        run_time_strides: match (run_cols, run_k) {
            (true, _) => RunTimeStrides::BAndC,
            (false, true) => RunTimeStrides::AK,
            (false, false) => RunTimeStrides::None,
        },
    };
    if !crate::codegen::kernels::x86::gemm::supports(&spec) {
        return Ok(None);
    }
    GemmKernel::define(ctx, &spec).map(Some)
}

/// Calls `body(A, B, Y)` with the addresses of the matrices of every batch index of
/// the output (shapes `ash`, `bsh`, `ysh` at the run's extents), A's and B's batch axes
/// broadcast.
fn for_each_matrix(
    b: &mut FunctionBuilder,
    (a, bo, y): (&Operand, &Operand, &Operand),
    (ash, bsh, ysh): (&[Ext], &[Ext], &[Ext]),
    body: &mut dyn FnMut(&mut FunctionBuilder, Value, Value, Value),
) {
    let (ar, br, yr) = (ash.len(), bsh.len(), ysh.len());
    let (m, k, n) = (ash[ar - 2], ash[ar - 1], bsh[br - 1]);
    let batch = &ysh[..yr - 2];
    let a_batch = batch_strides(b, &ash[..ar - 2], &unit_axes(a)[..ar - 2], batch);
    let b_batch = batch_strides(b, &bsh[..br - 2], &unit_axes(bo)[..br - 2], batch);
    let y_strides = run_shape::strides(b, batch);
    let (a_mat, b_mat, y_mat) = (m.mul(b, k), k.mul(b, n), m.mul(b, n));
    run_shape::nested_run_loop(b, batch, &mut |b, idx| {
        let ptr = |b: &mut FunctionBuilder, base: Value, strides: &[Ext], mat: Ext| {
            let o = run_shape::offset(b, idx, strides);
            let o = mat.times(b, o);
            kernel::elem_addr(b, base, o, 4)
        };
        let ap = ptr(b, a.ptr, &a_batch, a_mat);
        let bp = ptr(b, bo.ptr, &b_batch, b_mat);
        let yp = ptr(b, y.ptr, &y_strides, y_mat);
        body(b, ap, bp, yp);
    });
}

/// A matrix operand of the tiled loop: `M[i, j]` at `ptr + (i·rows + j·cols)·4`.
#[derive(Clone, Copy)]
struct Matrix {
    ptr: Value,
    rows: Ext,
    cols: Ext,
}

fn at(b: &mut FunctionBuilder, m: Matrix, i: Value, j: Value) -> Value {
    let r = m.rows.times(b, i);
    let c = m.cols.times(b, j);
    let o = b.ins().iadd(r, c);
    kernel::elem_addr(b, m.ptr, o, 4)
}

/// `C = A·B` (`[m, k]·[k, n]`, B's rows contiguous along N) in tiles of 4 rows by 8
/// columns, with tails of single rows and single columns.
fn tiled_gemm(
    b: &mut FunctionBuilder,
    fma: bool,
    (m, n, k): (Ext, Ext, Ext),
    (a, bm, c): (Matrix, Matrix, Matrix),
) {
    let round = |b: &mut FunctionBuilder, e: Ext, to: usize| match e {
        Ext::Fixed(v) => Ext::Fixed(v / to * to),
        Ext::Run(v) => Ext::Run(b.ins().band_imm_s(v, !(to as i64 - 1))),
    };
    let (m4, n8) = (round(b, m, 4), round(b, n, 8));
    for (r0, r1, rows) in [(Ext::Fixed(0), m4, 4usize), (m4, m, 1)] {
        run_shape::run_loop_from(b, r0, r1, rows, |b, i| {
            run_shape::run_loop_from(b, Ext::Fixed(0), n8, 8, |b, j| {
                tile(b, fma, (i, rows), (j, true), k, (a, bm, c));
            });
            run_shape::run_loop_from(b, n8, n, 1, |b, j| {
                tile(b, fma, (i, rows), (j, false), k, (a, bm, c));
            });
        });
    }
}

/// One tile: `rows` rows from `i`, 8 columns from `j` (`wide`) or the one column `j`.
fn tile(
    b: &mut FunctionBuilder,
    fma: bool,
    (i, rows): (Value, usize),
    (j, wide): (Value, bool),
    k: Ext,
    (a, bm, c): (Matrix, Matrix, Matrix),
) {
    let (ty, vecs) = if wide {
        (types::F32X4, 2)
    } else {
        (types::F32, 1)
    };
    let zero = b.ins().f32const(0.0);
    let zero = if wide { b.ins().splat(ty, zero) } else { zero };
    let acc: Vec<Variable> = (0..rows * vecs)
        .map(|_| super::super::reduce::var(b, zero))
        .collect();
    let a_rows: Vec<Value> = (0..rows)
        .map(|r| {
            let ir = b.ins().iadd_imm_s(i, r as i64);
            let z = kernel::iconst(b, 0);
            at(b, a, ir, z)
        })
        .collect();
    let z = kernel::iconst(b, 0);
    let b_col = at(b, bm, z, j);
    run_shape::run_loop(b, k, |b, kk| {
        let bk = bm.rows.times(b, kk);
        let bk = kernel::elem_addr(b, b_col, bk, 4);
        let bv: Vec<Value> = (0..vecs)
            .map(|v| b.ins().load(ty, flags(), bk, (16 * v) as i32))
            .collect();
        let ak = a.cols.times(b, kk);
        for (r, &row) in a_rows.iter().enumerate() {
            let addr = kernel::elem_addr(b, row, ak, 4);
            let x = b.ins().load(types::F32, flags(), addr, 0);
            let x = if wide { b.ins().splat(ty, x) } else { x };
            for (v, &bvv) in bv.iter().enumerate() {
                let var = acc[r * vecs + v];
                let s = b.use_var(var);
                let s = mul_add(b, fma, x, bvv, s);
                b.def_var(var, s);
            }
        }
    });
    for r in 0..rows {
        let ir = b.ins().iadd_imm_s(i, r as i64);
        let dst = at(b, c, ir, j);
        for v in 0..vecs {
            let s = b.use_var(acc[r * vecs + v]);
            b.ins().store(flags(), s, dst, (16 * v) as i32);
        }
    }
}

/// Batch axes broadcast to the output's: each operand's stride per output batch axis
/// (0 where it has 1 or lacks the axis), in matrices.
fn batch_strides(b: &mut FunctionBuilder, own: &[Ext], unit: &[bool], out: &[Ext]) -> Vec<Ext> {
    let lead = out.len() - own.len();
    let mut strides = vec![Ext::Fixed(0); out.len()];
    let mut s = Ext::Fixed(1);
    for d in (0..own.len()).rev() {
        if !unit[d] {
            strides[lead + d] = s;
        }
        s = s.mul(b, own[d]);
    }
    strides
}

fn unit_axes(o: &Operand) -> Vec<bool> {
    match &o.ty.dims {
        Some(d) => d.iter().map(|d| d.as_const() == Some(1)).collect(),
        None => o.ty.shape.iter().map(|&n| n == 1).collect(),
    }
}

pub fn matmul(ctx: &mut LowerCtx, attrs: &MatMulAttrs) -> LowerResult {
    let (a, bo, y) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0));
    if a.ty.dtype != DType::F32 || bo.ty.dtype != DType::F32 {
        return Err(format!(
            "a symbolic MatMul runs on float32 only, not {}",
            a.ty.dtype
        ));
    }
    if a.ty.rank() < 2 || bo.ty.rank() < 2 {
        return Err("a symbolic MatMul needs matrices (rank 2 or more) on both sides".into());
    }
    let bias = ctx.inputs.get(2).cloned().flatten();
    let residual = ctx.inputs.get(3).cloned().flatten();
    let dims = ctx.run_dims.as_ref().expect("symbolic");
    let ash = dims.shape(ctx.b, &a.ty);
    let bsh = dims.shape(ctx.b, &bo.ty);
    let ysh = dims.shape(ctx.b, &y.ty);
    let (ar, br) = (ash.len(), bsh.len());
    let (m, k, n) = (ash[ar - 2], ash[ar - 1], bsh[br - 1]);
    // Constant weights of fixed K and N: all of A's rows in one GEMM.
    if let (Some(values), Some(kf), Some(nf), 2) = (
        bo.constant.as_ref().and_then(f32_values),
        k.fixed(),
        n.fixed(),
        br,
    ) {
        let all: Vec<Ext> = ash[..ar - 1].to_vec();
        let rows = Ext::product(ctx.b, &all);
        return rows_times_weights(
            ctx,
            (&a, &y),
            rows,
            (kf, nf),
            &|kk, j| values[kk * nf + j],
            1.0,
            ((bias.as_ref(), 1.0), residual.as_ref()),
            attrs.activation,
        );
    }
    if let Some(kernel) = machine_kernel(ctx, &a, &bo, k, n)? {
        // The machine-code GEMM over the run's rows, and its columns (B's and C's row
        // stride) or its K (A's row stride).
        let b = &mut *ctx.b;
        let (rows, cols, depth) = (m.value(b), n.value(b), k.value(b));
        let (run_cols, run_k) = (n.fixed().is_none(), k.fixed().is_none());
        let shapes = (&ash[..], &bsh[..], &ysh[..]);
        for_each_matrix(b, (&a, &bo, &y), shapes, &mut |b, ap, bp, yp| {
            match (run_cols, run_k) {
                (true, _) => {
                    kernel.call_strided(b, (ap, bp, yp), &[], (Some(rows), Some(cols)), Some(cols))
                }
                (false, true) => {
                    kernel.call_strided(b, (ap, bp, yp), &[], (Some(rows), None), Some(depth))
                }
                (false, false) => kernel.call_rows(b, ap, bp, yp, &[], Some(rows)),
            };
        });
        return epilogue(
            ctx,
            &y,
            &ysh,
            n,
            (bias.as_ref(), residual.as_ref()),
            attrs.activation,
        );
    }
    let fma = gemm::has_fma(ctx.target);
    let b = &mut *ctx.b;
    let shapes = (&ash[..], &bsh[..], &ysh[..]);
    for_each_matrix(b, (&a, &bo, &y), shapes, &mut |b, ap, bp, yp| {
        tiled_gemm(
            b,
            fma,
            (m, n, k),
            (
                Matrix {
                    ptr: ap,
                    rows: k,
                    cols: Ext::Fixed(1),
                },
                Matrix {
                    ptr: bp,
                    rows: n,
                    cols: Ext::Fixed(1),
                },
                Matrix {
                    ptr: yp,
                    rows: n,
                    cols: Ext::Fixed(1),
                },
            ),
        );
    });
    epilogue(
        ctx,
        &y,
        &ysh,
        n,
        (bias.as_ref(), residual.as_ref()),
        attrs.activation,
    )
}

/// A product's fused epilogue after it, row by row over the whole output `y` of rows
/// of `n`: `act(y + bias + residual)`.
fn epilogue(
    ctx: &mut LowerCtx,
    y: &Operand,
    ysh: &[Ext],
    n: Ext,
    (bias, residual): (Option<&Operand>, Option<&Operand>),
    activation: Activation,
) -> LowerResult {
    if bias.is_none() && residual.is_none() && activation == Activation::None {
        return Ok(());
    }
    let b = &mut *ctx.b;
    let rows = Ext::product(b, &ysh[..ysh.len() - 1]);
    let mut result = Ok(());
    run_shape::run_loop(b, rows, |b, r| {
        let at = n.times(b, r);
        run_shape::run_loop(b, n, |b, j| {
            if result.is_err() {
                return;
            }
            let e = b.ins().iadd(at, j);
            let ya = kernel::elem_addr(b, y.ptr, e, 4);
            let mut v = b.ins().load(types::F32, flags(), ya, 0);
            if let Some(bias) = bias {
                let a = kernel::elem_addr(b, bias.ptr, j, 4);
                let t = b.ins().load(types::F32, flags(), a, 0);
                v = b.ins().fadd(v, t);
            }
            if let Some(res) = residual {
                let a = kernel::elem_addr(b, res.ptr, e, 4);
                let t = b.ins().load(types::F32, flags(), a, 0);
                v = b.ins().fadd(v, t);
            }
            match crate::codegen::unary::activation(b, activation, v) {
                Ok(v) => {
                    b.ins().store(flags(), v, ya, 0);
                }
                Err(e) => result = Err(e),
            }
        });
    });
    result
}

pub fn gemm_op(ctx: &mut LowerCtx, g: &GemmAttrs) -> LowerResult {
    let (a, bo, y) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0));
    let c = ctx
        .inputs
        .get(2)
        .cloned()
        .flatten()
        .filter(|_| g.beta != 0.0);
    let residual = ctx.inputs.get(3).cloned().flatten();
    if a.ty.dtype != DType::F32 || g.trans_a || a.ty.rank() != 2 || bo.ty.rank() != 2 {
        return Err("a symbolic Gemm runs on float32 A, not transposed".into());
    }
    let Some(values) = bo.constant.as_ref().and_then(f32_values) else {
        return Err("a symbolic Gemm needs constant B".into());
    };
    let (b0, b1) = (bo.ty.shape[0], bo.ty.shape[1]);
    let (k, n) = if g.trans_b { (b1, b0) } else { (b0, b1) };
    let get = |kk: usize, j: usize| {
        if g.trans_b {
            values[j * b1 + kk]
        } else {
            values[kk * b1 + j]
        }
    };
    let c = match c {
        Some(c) if c.ty.dims.is_none() && c.ty.numel() == n && c.ty.shape.last() == Some(&n) => {
            Some(c)
        }
        Some(_) => return Err("a symbolic Gemm's C must be a row of N".into()),
        None => None,
    };
    let dims = ctx.run_dims.as_ref().expect("symbolic");
    let ash = dims.shape(ctx.b, &a.ty);
    rows_times_weights(
        ctx,
        (&a, &y),
        ash[0],
        (k, n),
        &get,
        g.alpha,
        ((c.as_ref(), g.beta), residual.as_ref()),
        g.activation,
    )
}
