//! The im2col strategy: the padded input copied once per group, then the im2col matrix
//! written a chunk of output positions at a time in the GEMM's panel layout, each chunk
//! multiplied right away while it is in L2. Also the implicit GEMM's entry: with the
//! kernel plan's `ImplicitGemm`, B is read in place through a tap table instead.

use super::*;
use crate::codegen::plan::conv::im2col::*;
use crate::codegen::plan::conv::implicit_gemm::PhasePlanes;

impl Im2colLayout {
    /// Where the phase planes start in the scratch.
    pub(super) fn phase_planes(&self, b: &mut FunctionBuilder, scratch: Value) -> Value {
        let at = self.padded_bytes + align_up(self.col_bytes);
        b.ins().iadd_imm_s(scratch, at as i64)
    }
}

/// Compile-time im2col tables, in bytes relative to the (padded) group input:
/// `lane[q]` is where output position q's window starts, `tap[k]` how far K row
/// `k = (channel, tap)` moves it; `contiguous[q / 4]` says output positions `q..q+4` are
/// consecutive in memory (1: one output row, stride 1) or every other float (2: stride
/// 2), so rows can be copied as vectors, or as the even lanes of two.
pub(super) struct Im2colTables {
    pub(super) lane: Vec<i32>,
    pub(super) tap: Vec<i32>,
    pub(super) contiguous: Vec<i32>,
}

/// Byte offset of each K row `k = (channel, tap)` from a window start in the (padded)
/// group input: the im2col `tap` table, and the implicit GEMM's K-row table.
pub(super) fn tap_offsets(g: &ConvGeometry) -> Result<Vec<i32>, String> {
    let padded = g.padded();
    let pstrides = kernel::strides_of(&padded);
    let plane: usize = padded.iter().product();
    if g.cg * plane * F32 > i32::MAX as usize {
        return Err("Conv input too large for 32-bit im2col offsets".to_string());
    }
    let mut tap = Vec::with_capacity(g.gemm_k());
    for c in 0..g.cg {
        for t in 0..g.taps() {
            let kidx = unravel(t, &g.kernel);
            let off: usize = c * plane
                + (0..kidx.len())
                    .map(|d| kidx[d] * g.dilations[d] * pstrides[d])
                    .sum::<usize>();
            tap.push((off * F32) as i32);
        }
    }
    Ok(tap)
}

pub(super) fn im2col_tables(g: &ConvGeometry, nr: usize, tap: Vec<i32>) -> Im2colTables {
    let padded = g.padded();
    let pstrides = kernel::strides_of(&padded);
    let plane: usize = padded.iter().product();
    let p = g.out_size();
    let lane_of = |q: usize| -> i32 {
        let o = unravel(q, &g.output);
        let off: usize = (0..o.len())
            .map(|d| o[d] * g.strides[d] * pstrides[d])
            .sum();
        (off * F32) as i32
    };
    let panels = p.div_ceil(nr);
    // Positions past the end repeat the last valid one: always in bounds, results unused.
    let lane: Vec<i32> = (0..panels * nr).map(|q| lane_of(q.min(p - 1))).collect();
    // 1: four consecutive floats; 2: every other float of eight (stride 2), when the
    // eighth, loaded but unused, is still inside the input for every tap.
    let max_tap = tap.iter().copied().max().unwrap_or(0) as i64;
    let input_bytes = (g.cg * plane * F32) as i64;
    let contiguous = (0..panels * nr / LANES)
        .map(|v| {
            let q = v * LANES;
            if q + LANES > p {
                return 0;
            }
            let spaced =
                |step: usize| (1..LANES).all(|l| lane[q + l] == lane[q] + (l * step * F32) as i32);
            if spaced(1) {
                1
            } else if spaced(2)
                && lane[q] as i64 + max_tap + (2 * LANES * F32) as i64 <= input_bytes
            {
                2
            } else {
                0
            }
        })
        .collect();
    Im2colTables {
        lane,
        tap,
        contiguous,
    }
}

/// Row-major multi-index of `flat` in `shape`.
pub(crate) fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = flat % shape[d];
        flat /= shape[d];
    }
    idx
}

pub(super) fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Run-time addresses of the im2col tables.
#[derive(Clone, Copy)]
pub(super) struct TablePtrs {
    pub(super) lane: Value,
    pub(super) tap: Value,
    pub(super) contiguous: Value,
}

/// The im2col path, or with `implicit = Some(rows_in_place)` the implicit GEMM.
pub(super) fn conv_im2col(
    ctx: &mut LowerCtx,
    g: &ConvGeometry,
    ops: &ConvOperands,
    geom: Geometry,
    implicit: Option<bool>,
) -> LowerResult {
    let layout = Im2colLayout::new(g);
    let scratch = scratch(ctx)?;
    let weights = weights_operand(ctx, g, &ops.w, geom, None)?;
    let tap = tap_offsets(g)?;
    if let Some(rows_in_place) = implicit {
        let whole = group_gemm(g, &weights, BLayout::Packed, g.out_size(), g.gemm_k(), ops);
        let tap = match PhasePlanes::of(g) {
            Some(p) => p.taps(g)?,
            None => tap,
        };
        let im = ImplicitConv {
            weights: &weights,
            spec: whole,
            taps: tap,
            scratch,
            layout: &layout,
        };
        return conv_implicit_gemm(ctx, g, ops, im, rows_in_place);
    }
    let tables = im2col_tables(g, geom.nr, tap);
    let ptrs = TablePtrs {
        lane: ctx.rodata(i32_bytes(&tables.lane))?,
        tap: ctx.rodata(i32_bytes(&tables.tap))?,
        contiguous: ctx.rodata(i32_bytes(&tables.contiguous))?,
    };
    let p = g.out_size();
    let chunk_cols = layout.chunk_cols;
    let full_chunks = p / chunk_cols;
    let tail_cols = p - full_chunks * chunk_cols;
    let full_kernel = if full_chunks > 0 {
        Some(GemmKernel::define(
            ctx,
            &group_gemm(g, &weights, BLayout::Packed, chunk_cols, g.gemm_k(), ops),
        )?)
    } else {
        None
    };
    let tail_kernel = if tail_cols > 0 {
        Some(GemmKernel::define(
            ctx,
            &group_gemm(g, &weights, BLayout::Packed, tail_cols, g.gemm_k(), ops),
        )?)
    } else {
        None
    };
    // The chunks of one image and group: from the (padded) input `src`, im2col
    // panels at `col`, into `c`; all of them, or one task's share.
    let chunks = |b: &mut FunctionBuilder,
                  (src, col, c, a): (Value, Value, Value, Value),
                  bias: &[Value],
                  share: Option<(Value, &Split)>| {
        let chunk = |b: &mut FunctionBuilder, col0: Value, cols: usize, kernel: &GemmKernel| {
            im2col_panels(b, g, &geom, ptrs, src, col, col0, cols);
            let c0 = kernel::elem_addr(b, c, col0, F32);
            let mut addends = bias.to_vec();
            if ops.residual.is_some() {
                let r = addends.pop().expect("the residual addend");
                addends.push(kernel::elem_addr(b, r, col0, F32));
            }
            kernel.call(b, a, col, c0, &addends);
        };
        kernel::chunk_loop(b, share, full_chunks, tail_cols > 0, |b, i, last| {
            let col0 = b.ins().imul_imm_s(i, chunk_cols as i64);
            match (last, &full_kernel, &tail_kernel) {
                (false, Some(k), _) => chunk(b, col0, chunk_cols, k),
                (true, _, Some(k)) => chunk(b, col0, tail_cols, k),
                _ => unreachable!("a kernel per chunk size"),
            }
        });
    };
    if ctx.kernel.tasks > 1 {
        // One image and group (see `position_split`): the padded copy is the prologue.
        let split = im2col_split(g);
        if split.tasks != ctx.kernel.tasks {
            return Err("the plan split this conv differently".into());
        }
        let shared = ctx.shared_scratch.ok_or("im2col needs scratch")?;
        let prologue = |ctx: &mut LowerCtx, part: Option<Value>| -> LowerResult {
            let (in_plane, padded_plane) = (g.in_size(), g.padded().iter().product());
            kernel::part_range(ctx.b, part, &prologue_split(g), |b, first, count| {
                let src = channel_at(b, ops.x.ptr, first, in_plane);
                let dst = channel_at(b, shared, first, padded_plane);
                copy_padded(b, src, &g.input, count, dst, &g.padded(), &g.pad_begin);
            });
            Ok(())
        };
        let tasks = |ctx: &mut LowerCtx| -> LowerResult {
            let b = &mut *ctx.b;
            let col = b.ins().iadd_imm_s(scratch, layout.padded_bytes as i64);
            let src = if g.has_padding() { shared } else { ops.x.ptr };
            let zero = kernel::iconst(b, 0);
            let (c, bias) = output_and_bias(b, g, ops, zero, zero);
            let a = weights.group(b, zero, g);
            chunks(b, (src, col, c, a), &bias, ctx.task.map(|t| (t, &split)));
            Ok(())
        };
        return match ctx.kernel.prologue {
            true => ctx.with_prologue(prologue, tasks),
            false => tasks(ctx),
        };
    }
    let b = &mut *ctx.b;
    let col = b.ins().iadd_imm_s(scratch, layout.padded_bytes as i64);
    kernel::nested_loop(b, &[g.batch, g.group], &mut |b, idx| {
        let (n, grp) = (idx[0], idx[1]);
        let x_g = input_group(b, g, ops.x.ptr, n, grp, F32);
        let src = if g.has_padding() {
            copy_padded(b, x_g, &g.input, g.cg, scratch, &g.padded(), &g.pad_begin);
            scratch
        } else {
            x_g
        };
        let (c, bias) = output_and_bias(b, g, ops, n, grp);
        let a = weights.group(b, grp, g);
        chunks(b, (src, col, c, a), &bias, None);
    });
    Ok(())
}

/// Writes the im2col columns `col0 .. col0+cols` (col0 a multiple of the panel width)
/// into `col` in [`gemm::pack_b`]'s panel layout, reading the (padded) group input at
/// `src`.
#[allow(clippy::too_many_arguments)]
pub(super) fn im2col_panels(
    b: &mut FunctionBuilder,
    g: &ConvGeometry,
    geom: &Geometry,
    t: TablePtrs,
    src: Value,
    col: Value,
    col0: Value,
    cols: usize,
) {
    let k = g.gemm_k();
    let nr = geom.nr;
    let full = cols / nr;
    kernel::counted_loop(b, 0, full as i64, 1, |b, i| {
        let panel = b.ins().udiv_imm_u(col0, nr as i64);
        let panel = b.ins().iadd(panel, i);
        let dst = kernel::elem_addr(b, col, i, k * nr * F32);
        im2col_panel(b, k, t, src, dst, panel, nr, nr);
    });
    let rem = cols - full * nr;
    if rem > 0 {
        let panel = b.ins().udiv_imm_u(col0, nr as i64);
        let panel = b.ins().iadd_imm_s(panel, full as i64);
        let dst = b.ins().iadd_imm_s(col, (full * k * nr * F32) as i64);
        im2col_panel(b, k, t, src, dst, panel, nr, geom.tail_panel_width(rem));
    }
}

/// One panel of `width` lanes: K rows of `width` floats at `dst`. Each group of four
/// lanes the table marks contiguous (stride 1 within one output row) is copied as one
/// vector per K row, the others lane by lane: the flags are loaded once per panel, and
/// the branch on each repeats the same pattern every row, so it predicts well. Per
/// panel rather than per vector, a 48-wide panel crossing an output row (most of them
/// at 56 columns) fell back to scalar copies: 30% of a 3×3 conv's time went to im2col.
#[allow(clippy::too_many_arguments)]
pub(super) fn im2col_panel(
    b: &mut FunctionBuilder,
    k: usize,
    t: TablePtrs,
    src: Value,
    dst: Value,
    panel: Value,
    nr: usize,
    width: usize,
) {
    let lanes = kernel::elem_addr(b, t.lane, panel, nr * 4);
    let lane_ptrs: Vec<Value> = (0..width)
        .map(|l| {
            let off = b.ins().sload32(flags(), lanes, (l * 4) as i32);
            b.ins().iadd(src, off)
        })
        .collect();
    let flag_base = kernel::elem_addr(b, t.contiguous, panel, nr / LANES * 4);
    let vec_flags: Vec<(Value, Value)> = (0..width / LANES)
        .map(|v| {
            let f = b.ins().load(types::I32, flags(), flag_base, (v * 4) as i32);
            let unit = b.ins().icmp_imm_s(IntCC::Equal, f, 1);
            let every_other = b.ins().icmp_imm_s(IntCC::Equal, f, 2);
            (unit, every_other)
        })
        .collect();
    kernel::counted_loop(b, 0, k as i64, 1, |b, kk| {
        let tap = tap_offset(b, t, kk);
        let row = kernel::elem_addr(b, dst, kk, width * F32);
        for (v, &(unit, every_other)) in vec_flags.iter().enumerate() {
            let (vector, not_vector, evens, lanewise, next) = (
                b.create_block(),
                b.create_block(),
                b.create_block(),
                b.create_block(),
                b.create_block(),
            );
            b.ins().brif(unit, vector, &[], not_vector, &[]);
            b.seal_block(vector);
            b.seal_block(not_vector);
            b.switch_to_block(vector);
            let a = b.ins().iadd(lane_ptrs[v * LANES], tap);
            let x = b.ins().load(types::F32X4, flags(), a, 0);
            b.ins().store(flags(), x, row, (v * LANES * F32) as i32);
            b.ins().jump(next, &[]);
            b.switch_to_block(not_vector);
            b.ins().brif(every_other, evens, &[], lanewise, &[]);
            b.seal_block(evens);
            b.seal_block(lanewise);
            b.switch_to_block(evens);
            // The even lanes of eight consecutive floats: two loads and one shuffle.
            let a = b.ins().iadd(lane_ptrs[v * LANES], tap);
            let lo = b.ins().load(types::F32X4, flags(), a, 0);
            let hi = b.ins().load(types::F32X4, flags(), a, (LANES * F32) as i32);
            let pick = core::array::from_fn(|i| ((i / 4) * 8 + i % 4) as u8);
            let x = crate::codegen::math::shuffle_f32x4(b, lo, hi, pick);
            b.ins().store(flags(), x, row, (v * LANES * F32) as i32);
            b.ins().jump(next, &[]);
            b.switch_to_block(lanewise);
            for (l, &lane) in lane_ptrs.iter().enumerate().skip(v * LANES).take(LANES) {
                let a = b.ins().iadd(lane, tap);
                let x = b.ins().load(types::F32, flags(), a, 0);
                b.ins().store(flags(), x, row, (l * F32) as i32);
            }
            b.ins().jump(next, &[]);
            b.switch_to_block(next);
            b.seal_block(next);
        }
    });
}

pub(super) fn tap_offset(b: &mut FunctionBuilder, t: TablePtrs, kk: Value) -> Value {
    let a = kernel::elem_addr(b, t.tap, kk, 4);
    b.ins().sload32(stable_flags(), a, 0)
}
