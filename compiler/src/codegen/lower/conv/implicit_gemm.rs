//! The implicit GEMM: the x86 GEMM kernels read the padded input (stride 1) or its
//! four stride-2 phase planes in place through a table of tap offsets, so no im2col
//! matrix is written; wide output rows are written straight into Y.

use super::*;
use crate::codegen::plan::conv::im2col::Im2colLayout;
use crate::codegen::plan::conv::implicit_gemm::*;

impl PhasePlanes {
    /// Splits the padded planes at `src` (rows of `padded[1]` floats) into the phases
    /// at `dst`, eight floats (four per column phase) at a time.
    pub(super) fn split(&self, b: &mut FunctionBuilder, g: &ConvGeometry, src: Value, dst: Value) {
        let padded = g.padded();
        let (hp, wp) = (padded[0], padded[1]);
        let plane = self.h * self.w * F32;
        let vectors = self.w / LANES;
        // Every phase row is written below but, for an odd padded height, the last row
        // of the odd-row phases: it stays zero.
        if hp % 2 == 1 {
            kernel::counted_loop(b, 0, g.cg as i64, 1, |b, c| {
                for pw in 0..2 {
                    let pl = b.ins().imul_imm_s(c, 4);
                    let pl = b.ins().iadd_imm_s(pl, 2 + pw);
                    let d = kernel::elem_addr(b, dst, pl, plane);
                    let d = b.ins().iadd_imm_s(d, ((self.h - 1) * self.w * F32) as i64);
                    zero_f32(b, d, self.w);
                }
            });
        }
        kernel::nested_loop(b, &[g.cg, hp], &mut |b, idx| {
            let (c, i) = (idx[0], idx[1]);
            let row = b.ins().imul_imm_s(c, hp as i64);
            let row = b.ins().iadd(row, i);
            let s = kernel::elem_addr(b, src, row, wp * F32);
            // Phase (i mod 2, ·) of channel c, row i div 2.
            let ph = b.ins().band_imm_u(i, 1);
            let half = b.ins().ushr_imm_u(i, 1);
            let pl = b.ins().imul_imm_s(c, 4);
            let pl = b.ins().iadd(pl, ph);
            let pl = b.ins().iadd(pl, ph);
            let d = kernel::elem_addr(b, dst, pl, plane);
            let d = kernel::elem_addr(b, d, half, self.w * F32);
            for v in 0..vectors {
                // Columns 8v .. 8v + 8 of the padded row; past its end, zeros.
                let at = |k: usize| 8 * v + 4 * k;
                let load = |b: &mut FunctionBuilder, k: usize| {
                    if at(k) + LANES <= wp {
                        b.ins().load(types::F32X4, flags(), s, (at(k) * F32) as i32)
                    } else {
                        let z = b.ins().f32const(0.0);
                        let mut x = b.ins().splat(types::F32X4, z);
                        for l in 0..LANES.min(wp.saturating_sub(at(k))) {
                            let e =
                                b.ins()
                                    .load(types::F32, flags(), s, ((at(k) + l) * F32) as i32);
                            x = b.ins().insertlane(x, e, l as u8);
                        }
                        x
                    }
                };
                let (lo, hi) = (load(b, 0), load(b, 1));
                let even = crate::codegen::math::pick_lanes(b, lo, hi, [0, 2, 4, 6]);
                let odd = crate::codegen::math::pick_lanes(b, lo, hi, [1, 3, 5, 7]);
                b.ins().store(flags(), even, d, (v * LANES * F32) as i32);
                b.ins()
                    .store(flags(), odd, d, (plane + v * LANES * F32) as i32);
            }
        });
    }
}

/// Stride-1 2-D conv as one implicit GEMM per batch and group: B is the zero-padded
/// input read in place through [`BLayout::Taps`] (no im2col matrix): output column
/// `q` of the GEMM reads padded-input offset `q + tap[k]`, so the GEMM's columns run
/// over whole padded rows ("wide" output, written to scratch), and a copy keeps the
/// `out` valid columns of each row. A residual (compact layout) is added by that copy,
/// followed by the activation; otherwise the GEMM's epilogue applies the activation.
pub(super) fn conv_implicit_gemm(
    ctx: &mut LowerCtx,
    g: &ConvGeometry,
    ops: &ConvOperands,
    im: ImplicitConv,
    rows_in_place: bool,
) -> LowerResult {
    if rows_in_place {
        return conv_implicit_rows(ctx, g, ops, im);
    }
    let ImplicitConv {
        weights,
        spec,
        taps,
        scratch,
        layout,
    } = im;
    let wide = wide_columns(g).ok_or("implicit GEMM needs a 2-D stride-1 or 2 conv")?;
    let row = wide_row(g).ok_or("implicit GEMM needs a 2-D stride-1 or 2 conv")?;
    let (out_h, out_w) = (g.output[0], g.output[1]);
    let residual = ops.residual.is_some();
    let mut spec = spec;
    if residual {
        // The residual's addend is the last (see group_gemm); the copy applies it.
        spec.addends.pop();
        spec.activation = Activation::None;
    }
    // Output rows per GEMM call: C of one call within IMPLICIT_C_BYTES, so the kernel's
    // passes over C (one per K block) and the compaction stay in L2. As one call, the
    // 7×7 stem's 3 MB wide output was swept from L3.
    let (chunk_rows, loop_chunks, last_rows) = row_chunks(g, g.mg * row * F32);
    // One call computes `n` wide columns from its first row.
    let spec_of = |n: usize| GemmSpec {
        n,
        b: BLayout::Taps {
            out_w: n,
            out_h: 1,
            row_step: n,
        },
        ldc: wide,
        b_taps: taps.clone(),
        rows_at_run_time: false,
        cols_at_run_time: false,
        run_time_strides: RunTimeStrides::None,
        ..spec.clone()
    };
    let full_kernel = match loop_chunks {
        0 => None,
        // A full chunk's columns run on to the next row's start: real positions.
        _ => Some(GemmKernel::define(ctx, &spec_of(chunk_rows * row))?),
    };
    let last_kernel = GemmKernel::define(ctx, &spec_of((last_rows - 1) * row + out_w))?;
    // The row chunks of one image and group, from the prepared input `src`: all of
    // them, or one task's share. Each computes C wide into `c_wide` (the task's own
    // scratch) and compacts it into the output rows.
    let mut failure = None;
    let mut chunks = |b: &mut FunctionBuilder,
                      (src, c_wide, y_g, a): (Value, Value, Value, Value),
                      addends: &[Value],
                      r_g: Option<Value>,
                      share: Option<(Value, &Split)>| {
        let mut compact = |b: &mut FunctionBuilder, m: Value, oh: Value, r: Value| {
            let src_row = kernel::elem_addr(b, c_wide, m, wide * F32);
            let src_row = kernel::elem_addr(b, src_row, oh, row * F32);
            let dst_row = kernel::elem_addr(b, y_g, r, out_w * F32);
            match r_g {
                None => copy_f32(b, dst_row, src_row, out_w),
                Some(r_g) => {
                    // Y = act(C + R) while copying C out.
                    let res_row = kernel::elem_addr(b, r_g, r, out_w * F32);
                    if let Err(e) = crate::codegen::lower::elementwise::activate_run(
                        b,
                        dst_row,
                        src_row,
                        Some(res_row),
                        out_w,
                        ops.activation,
                    ) {
                        failure = Some(e);
                    }
                }
            }
        };
        kernel::chunk_loop(b, share, loop_chunks, true, |b, i, last| {
            let (rows, k) = match (last, &full_kernel) {
                (false, Some(k)) => (chunk_rows, k),
                _ => (last_rows, &last_kernel),
            };
            let row0 = b.ins().imul_imm_s(i, chunk_rows as i64);
            let at = b.ins().imul_imm_s(row0, (row * F32) as i64);
            let (src_c, c_c) = (b.ins().iadd(src, at), b.ins().iadd(c_wide, at));
            k.call(b, a, src_c, c_c, addends);
            kernel::nested_loop(b, &[g.mg, rows], &mut |b, idx| {
                let (m, oh) = (idx[0], b.ins().iadd(row0, idx[1]));
                let r = b.ins().imul_imm_s(m, out_h as i64);
                let r = b.ins().iadd(r, oh);
                compact(b, m, oh, r);
            });
        });
    };
    if ctx.kernel.tasks > 1 {
        let split = position_split(g, loop_chunks + 1);
        split_implicit(ctx, g, ops, layout, &split, |ctx, src, own| {
            let b = &mut *ctx.b;
            let c_wide = b.ins().iadd_imm_s(own, layout.padded_bytes as i64);
            let zero = kernel::iconst(b, 0);
            let (y_g, mut addends) = output_and_bias(b, g, ops, zero, zero);
            let r_g = if residual { addends.pop() } else { None };
            let a = weights.group(b, zero, g);
            chunks(
                b,
                (src, c_wide, y_g, a),
                &addends,
                r_g,
                ctx.task.map(|t| (t, &split)),
            );
        })?;
        return failure.map_or(Ok(()), Err);
    }
    let b = &mut *ctx.b;
    let c_wide = b.ins().iadd_imm_s(scratch, layout.padded_bytes as i64);
    let phase_planes = layout.phase_planes(b, scratch);
    kernel::nested_loop(b, &[g.batch, g.group], &mut |b, idx| {
        let (n, grp) = (idx[0], idx[1]);
        let src = implicit_input(b, g, ops, n, grp, scratch, phase_planes);
        let (y_g, mut addends) = output_and_bias(b, g, ops, n, grp);
        let r_g = if residual { addends.pop() } else { None };
        let a = weights.group(b, grp, g);
        chunks(b, (src, c_wide, y_g, a), &addends, r_g, None);
    });
    failure.map_or(Ok(()), Err)
}

/// A batch-1, one-group implicit-GEMM conv split into tasks by row chunks: the padded
/// copy and phase planes are its prologue, in the node's shared scratch; `tasks(ctx,
/// src, own)` emits the current task's chunks (or all) from the prepared input `src`
/// with the task's own scratch `own`.
fn split_implicit(
    ctx: &mut LowerCtx,
    g: &ConvGeometry,
    ops: &ConvOperands,
    layout: &Im2colLayout,
    split: &Split,
    tasks: impl FnOnce(&mut LowerCtx, Value, Value),
) -> LowerResult {
    if split.tasks != ctx.kernel.tasks {
        return Err("the plan split this conv differently".into());
    }
    let shared = ctx.shared_scratch.ok_or("implicit GEMM needs scratch")?;
    let prologue = |ctx: &mut LowerCtx, part: Option<Value>| -> LowerResult {
        let phase_planes = layout.phase_planes(ctx.b, shared);
        let (in_plane, padded_plane) = (g.in_size(), g.padded().iter().product());
        kernel::part_range(ctx.b, part, &prologue_split(g), |b, first, count| {
            // The padded copy and phase planes of input channels first .. first+count.
            let mut src = channel_at(b, ops.x.ptr, first, in_plane);
            if g.has_padding() {
                let dst = channel_at(b, shared, first, padded_plane);
                copy_padded(b, src, &g.input, count, dst, &g.padded(), &g.pad_begin);
                src = dst;
            }
            if let Some(p) = PhasePlanes::of(g) {
                let part_g = ConvGeometry {
                    cg: count,
                    ..g.clone()
                };
                let dst = channel_at(b, phase_planes, first, 4 * p.h * p.w);
                p.split(b, &part_g, src, dst);
            }
        });
        Ok(())
    };
    let body = |ctx: &mut LowerCtx| -> LowerResult {
        let own = scratch(ctx)?;
        let b = &mut *ctx.b;
        let src = if PhasePlanes::of(g).is_some() {
            layout.phase_planes(b, shared)
        } else if g.has_padding() {
            shared
        } else {
            ops.x.ptr
        };
        tasks(ctx, src, own);
        Ok(())
    };
    match ctx.kernel.prologue {
        true => ctx.with_prologue(prologue, body),
        false => body(ctx),
    }
}

/// What the implicit-GEMM paths share: the weights (A), the whole-conv GEMM spec they
/// specialize per call, B's K-row offsets and the scratch with its layout.
pub(super) struct ImplicitConv<'a> {
    pub(super) weights: &'a WeightsA,
    pub(super) spec: GemmSpec,
    pub(super) taps: Vec<i32>,
    pub(super) scratch: Value,
    pub(super) layout: &'a Im2colLayout,
}

/// The implicit GEMM's B for image `n`, group `grp`: the group's input, zero-padded
/// into scratch when the conv pads, then split into phase planes when it has stride 2.
pub(super) fn implicit_input(
    b: &mut FunctionBuilder,
    g: &ConvGeometry,
    ops: &ConvOperands,
    n: Value,
    grp: Value,
    scratch: Value,
    phase_planes: Value,
) -> Value {
    let x_g = input_group(b, g, ops.x.ptr, n, grp, F32);
    let mut src = if g.has_padding() {
        copy_padded(b, x_g, &g.input, g.cg, scratch, &g.padded(), &g.pad_begin);
        scratch
    } else {
        x_g
    };
    if let Some(p) = PhasePlanes::of(g) {
        p.split(b, g, src, phase_planes);
        src = phase_planes;
    }
    src
}

/// [`conv_implicit_gemm`] for wide output rows: the kernel walks output rows itself
/// (`BLayout::Taps` with `out_h` rows of `out_w` columns, B advancing by the padded or
/// phase-plane row) and writes C, bias, residual and activation straight into Y.
pub(super) fn conv_implicit_rows(
    ctx: &mut LowerCtx,
    g: &ConvGeometry,
    ops: &ConvOperands,
    im: ImplicitConv,
) -> LowerResult {
    let (weights, scratch, layout) = (im.weights, im.scratch, im.layout);
    let (spec, taps) = (&im.spec, &im.taps);
    let row = wide_row(g).ok_or("implicit GEMM needs a 2-D stride-1 or 2 conv")?;
    let out_w = g.output[1];
    // Output rows per call: C of one call within IMPLICIT_C_BYTES (L2).
    let (chunk_rows, loop_chunks, last_rows) = row_chunks(g, g.mg * out_w * F32);
    let spec_of = |rows: usize| GemmSpec {
        n: rows * out_w,
        b: BLayout::Taps {
            out_w,
            out_h: rows,
            row_step: row,
        },
        ldc: g.out_size(),
        b_taps: taps.clone(),
        rows_at_run_time: false,
        cols_at_run_time: false,
        run_time_strides: RunTimeStrides::None,
        ..spec.clone()
    };
    let full_kernel = match loop_chunks {
        0 => None,
        _ => Some(GemmKernel::define(ctx, &spec_of(chunk_rows))?),
    };
    let last_kernel = GemmKernel::define(ctx, &spec_of(last_rows))?;
    // The row chunks of one image and group, from the prepared input `src`, straight
    // into the output rows: all of them, or one task's share.
    let chunks = |b: &mut FunctionBuilder,
                  (src, y_g, a): (Value, Value, Value),
                  addends: &[Value],
                  share: Option<(Value, &Split)>| {
        kernel::chunk_loop(b, share, loop_chunks, true, |b, i, last| {
            let k = match (last, &full_kernel) {
                (false, Some(k)) => k,
                _ => &last_kernel,
            };
            let row0 = b.ins().imul_imm_s(i, chunk_rows as i64);
            let at_in = b.ins().imul_imm_s(row0, (row * F32) as i64);
            let src_c = b.ins().iadd(src, at_in);
            let at_out = b.ins().imul_imm_s(row0, (out_w * F32) as i64);
            let y_c = b.ins().iadd(y_g, at_out);
            let mut addends = addends.to_vec();
            if ops.residual.is_some() {
                // The residual, last, moves with C.
                let r = addends.pop().expect("the residual addend");
                addends.push(b.ins().iadd(r, at_out));
            }
            k.call(b, a, src_c, y_c, &addends);
        });
    };
    if ctx.kernel.tasks > 1 {
        let split = position_split(g, loop_chunks + 1);
        return split_implicit(ctx, g, ops, layout, &split, |ctx, src, _own| {
            let b = &mut *ctx.b;
            let zero = kernel::iconst(b, 0);
            let (y_g, addends) = output_and_bias(b, g, ops, zero, zero);
            let a = weights.group(b, zero, g);
            chunks(b, (src, y_g, a), &addends, ctx.task.map(|t| (t, &split)));
        });
    }
    let b = &mut *ctx.b;
    let phase_planes = layout.phase_planes(b, scratch);
    kernel::nested_loop(b, &[g.batch, g.group], &mut |b, idx| {
        let (n, grp) = (idx[0], idx[1]);
        let src = implicit_input(b, g, ops, n, grp, scratch, phase_planes);
        let (y_g, addends) = output_and_bias(b, g, ops, n, grp);
        let a = weights.group(b, grp, g);
        chunks(b, (src, y_g, a), &addends, None);
    });
    Ok(())
}
