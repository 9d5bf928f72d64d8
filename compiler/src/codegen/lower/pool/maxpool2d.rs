//! 2-D float32 max pooling as two separable passes per output row: a vertical pass
//! takes the maximum of the window's input rows column by column into a row buffer
//! (whole vectors, no shuffles), then a horizontal pass takes the maximum of each
//! output's window along that buffer. The buffer holds the row in padded coordinates:
//! −∞ before and after the input columns, so left/right padding and ceil_mode overhang
//! need no border code, and every output of a row is computed four at a time.
//!
//! The generic pooling path (`super::pool`) folds all `kh·kw` taps of every output,
//! with two loads and a shuffle per tap at stride 2; this path reads each input once
//! per window row and each buffer float a few times. Measured on squeezenet1_1's
//! 3×3/2 pool of 64×111×111 (`benches/bench_conv.py maxpool 64 111 3 2`): see
//! BENCHMARKS.md's history in git.
//!
//! On x86 targets the same passes run as machine code (`lower/maxpool2d_x86.rs`, 16 or
//! 8 lanes, one call per image); this file keeps the plane and row structure and the
//! Cranelift passes for other targets.
//!
//! Semantics are the generic path's: padding never contributes, a NaN input never
//! wins (`acc < x ? x : acc`, from −∞), a window without inputs gives −∞.

use cranelift_codegen::ir::{types, InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;

use super::reduce::{fconst, fold, Step};
use super::{AxisWindows, LowerCtx, LowerResult, Operand};
use crate::codegen::isa::Vector;
use crate::codegen::kernel::{self, flags};
use crate::codegen::kernels::x86;
use crate::codegen::kernels::x86::maxpool2d::{BorderRow, MaxPoolSpec};
use crate::codegen::lower::gemm;
use crate::codegen::math;
use crate::codegen::plan::pool::row_floats;
use crate::ops::PoolAttrs;

const F32: usize = 4;
const LANES: usize = 4;

/// The separable max pool, its row passes on the machine-code family `isa` or, without
/// one, in Cranelift.
pub(super) fn max_pool(
    ctx: &mut LowerCtx,
    p: &PoolAttrs,
    x: &Operand,
    y: &Operand,
    isa: Option<Vector>,
) -> LowerResult {
    let scratch = ctx
        .scratch
        .ok_or("MaxPool needs a scratch row but none was planned")?;
    let (in_h, in_w) = (x.ty.shape[2], x.ty.shape[3]);
    let (out_h, out_w) = (p.output_spatial[0], p.output_spatial[1]);
    let planes = x.ty.shape[0] * x.ty.shape[1];
    let pass = RowPass {
        in_w,
        out_w,
        pad_left: p.pads[1],
        kernel_w: p.kernel[1],
        stride_w: p.strides[1],
        row: scratch,
    };
    // Output rows whose window lies inside the input share one loop; the others (top
    // and bottom borders) are emitted one by one with their own row count.
    let rows = AxisWindows::new(p, 0, in_h);
    if let Some(isa) = isa {
        let spec = MaxPoolSpec {
            isa,
            planes,
            in_h,
            in_w,
            out_h,
            out_w,
            kernel_h: p.kernel[0],
            kernel_w: p.kernel[1],
            stride_h: p.strides[0],
            stride_w: p.strides[1],
            pad_top: p.pads[0],
            pad_left: p.pads[1],
            row_floats: row_floats(p, in_w),
            interior: rows.interior.clone(),
            border: rows
                .border
                .iter()
                .map(|r| BorderRow {
                    out_row: r.o,
                    first: r.first,
                    taps: r.taps,
                })
                .collect(),
        };
        let func = gemm::define_machine_code(ctx, 3, &x86::maxpool2d::emit(&spec)?)?;
        ctx.b.ins().call(func, &[x.ptr, y.ptr, scratch]);
        return Ok(());
    }
    let b = &mut *ctx.b;
    let neg_inf = fconst(b, types::F32X4, f64::NEG_INFINITY);
    for v in 0..row_floats(p, in_w) / LANES {
        b.ins()
            .store(flags(), neg_inf, scratch, (v * LANES * F32) as i32);
    }
    kernel::counted_loop(b, 0, planes as i64, 1, |b, plane| {
        let src = kernel::elem_addr(b, x.ptr, plane, in_h * in_w * F32);
        let dst = kernel::elem_addr(b, y.ptr, plane, out_h * out_w * F32);
        for r in &rows.border {
            let s = b.ins().iadd_imm_s(src, (r.first * in_w * F32) as i64);
            let d = b.ins().iadd_imm_s(dst, (r.o * out_w * F32) as i64);
            pass.emit(b, s, r.taps, d);
        }
        let (start, end) = (rows.interior.start as i64, rows.interior.end as i64);
        kernel::counted_loop(b, start, end, 1, |b, oh| {
            let first = b.ins().imul_imm_s(oh, p.strides[0] as i64);
            let first = b.ins().iadd_imm_s(first, -(p.pads[0] as i64));
            let s = kernel::elem_addr(b, src, first, in_w * F32);
            let d = kernel::elem_addr(b, dst, oh, out_w * F32);
            pass.emit(b, s, p.kernel[0], d);
        });
    });
    Ok(())
}

/// One output row from `rows` input rows.
struct RowPass {
    in_w: usize,
    out_w: usize,
    pad_left: usize,
    kernel_w: usize,
    stride_w: usize,
    /// The row buffer, in padded coordinates, −∞ outside the input columns.
    row: Value,
}

fn max_step(b: &mut FunctionBuilder, acc: Value, x: Value) -> Value {
    fold(b, Step::MaxIgnoreNan, false, acc, x, None)
}

impl RowPass {
    fn emit(&self, b: &mut FunctionBuilder, src: Value, rows: usize, dst: Value) {
        self.vertical(b, src, rows);
        self.horizontal(b, dst);
    }

    /// `row[pad_left + c] = max over the window's rows of X[r][c]`.
    fn vertical(&self, b: &mut FunctionBuilder, src: Value, rows: usize) {
        let row_bytes = (self.in_w * F32) as i32;
        let out = b.ins().iadd_imm_s(self.row, (self.pad_left * F32) as i64);
        let column = |b: &mut FunctionBuilder, ty, c: Value| {
            let at = kernel::elem_addr(b, src, c, F32);
            let mut acc = fconst(b, ty, f64::NEG_INFINITY);
            for r in 0..rows {
                let v = b.ins().load(ty, flags(), at, r as i32 * row_bytes);
                acc = max_step(b, acc, v);
            }
            let to = kernel::elem_addr(b, out, c, F32);
            b.ins().store(flags(), acc, to, 0);
        };
        let vectors = self.in_w / LANES * LANES;
        kernel::counted_loop(b, 0, vectors as i64, LANES as i64, |b, c| {
            column(b, types::F32X4, c)
        });
        kernel::counted_loop(b, vectors as i64, self.in_w as i64, 1, |b, c| {
            column(b, types::F32, c)
        });
    }

    /// `Y[j] = max over t < kw of row[j·sw + t]`, four outputs at a time; the last
    /// vector's valid lanes are stored one by one.
    fn horizontal(&self, b: &mut FunctionBuilder, dst: Value) {
        let full = self.out_w / LANES;
        kernel::counted_loop(b, 0, full as i64, 1, |b, j| {
            let v = self.outputs(b, j);
            let to = kernel::elem_addr(b, dst, j, LANES * F32);
            b.ins().store(flags(), v, to, 0);
        });
        let tail = self.out_w % LANES;
        if tail > 0 {
            let j = kernel::iconst(b, full as i64);
            let v = self.outputs(b, j);
            for l in 0..tail {
                let e = b.ins().extractlane(v, l as u8);
                let at = ((full * LANES + l) * F32) as i32;
                b.ins().store(flags(), e, dst, at);
            }
        }
    }

    /// Outputs `4j .. 4j + 4` of the row.
    fn outputs(&self, b: &mut FunctionBuilder, j: Value) -> Value {
        let base = kernel::elem_addr(b, self.row, j, self.stride_w * LANES * F32);
        let load = |b: &mut FunctionBuilder, at: usize| {
            b.ins().load(types::F32X4, flags(), base, (at * F32) as i32)
        };
        let mut acc = fconst(b, types::F32X4, f64::NEG_INFINITY);
        if self.stride_w == 1 {
            for t in 0..self.kernel_w {
                let v = load(b, t);
                acc = max_step(b, acc, v);
            }
            return acc;
        }
        // Stride 2: taps 2u and 2u + 1 are the even and odd lanes of the eight floats
        // at 2u.
        for u in 0..self.kernel_w.div_ceil(2) {
            let (lo, hi) = (load(b, 2 * u), load(b, 2 * u + LANES));
            let even = math::pick_lanes(b, lo, hi, [0, 2, 4, 6]);
            acc = max_step(b, acc, even);
            if 2 * u + 1 < self.kernel_w {
                let odd = math::pick_lanes(b, lo, hi, [1, 3, 5, 7]);
                acc = max_step(b, acc, odd);
            }
        }
        acc
    }
}
