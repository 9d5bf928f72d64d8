//! Convs with few output positions and many maps (the 7×7 stages of ResNet and
//! MobileNet: 49 positions, 160–1280 maps) as the transposed GEMM
//! `Yᵀ[P, M] = Xᵀ[P, K] · Wᵀ[K, M]`, on the x86 machine-code kernels.
//!
//! Why: the kernels vectorize along the GEMM's N. As `Y = W · X` that is the positions:
//! 49 of them fill one 48-column panel and one 16-lane panel holding a single column
//! (the implicit GEMM's 61 "wide" columns did little better), and the 1-vector tail
//! panel is bound by its loads. Transposed, N is the maps (512 = 10 panels of 48 and
//! one of 32) and the 49 positions are the rows of the tiles. Measured on ResNet-18's
//! 3×3×512 convs on 7×7 (Xeon, AVX-512): 3.1 ms per conv as implicit GEMM.
//!
//! Xᵀ (the input itself for a pointwise conv, else an im2col matrix `[K][P']`, the
//! im2col panel code with one panel as wide as P rounded to vectors) is copied into
//! the GEMM's packed-A layout first (see [`pack_a_rows`]): read strided, the K loop
//! took another cache line of Xᵀ per step and ran at ~70 GFLOP/s on a Zen 3. The
//! weights, constant, are packed at compile time as B. The kernel adds the bias (one per column now) and applies the activation; a residual cannot follow
//! the transposed layout through the kernel, so the copy that transposes `Yᵀ` into the
//! NCHW output adds it and applies the activation after it.

use crate::codegen::plan::conv::narrow::*;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;

use super::gemm::{self, ALayout, Addend, GemmKernel, GemmSpec, Geometry, RunTimeStrides};
use super::{
    copy_padded, i32_bytes, im2col_panel, im2col_tables, input_group, output_and_bias, tap_offsets,
    ConvGeometry, ConvOperands, TablePtrs, F32,
};
use crate::codegen::kernel::{self, flags};
use crate::codegen::lower::{LowerCtx, LowerResult};
use crate::ir::Tensor;
use crate::ops::Activation;

pub(super) fn conv_transposed_gemm(
    ctx: &mut LowerCtx,
    g: &ConvGeometry,
    ops: &ConvOperands,
    geom: Geometry,
) -> LowerResult {
    let Some(Tensor::F32(w)) = &ops.w.constant else {
        return Err("the transposed conv GEMM needs constant weights".into());
    };
    let layout = Layout::new(g);
    let (p, maps, k) = (g.out_size(), g.mg, g.gemm_k());
    let w: Vec<f32> = w.iter().copied().collect();
    let by_columns = ctx.kernel.weights_by_columns;
    let (packed, b_layout) =
        gemm::pack_weights_b(&geom, k, maps, by_columns, |kk, j| w[j * k + kk]);
    let w_ptr = ctx.weights_f32(&packed)?;
    let pointwise = pointwise(g);
    // Xᵀ[pos, k] is at k·width + pos: the input plane (pointwise) or the im2col matrix.
    let width = if pointwise { p } else { layout.cols_width };
    let residual = ops.residual.is_some();
    let spec = GemmSpec {
        m: p,
        n: maps,
        k,
        a: ALayout::Packed,
        b: b_layout,
        ldc: maps,
        c_col_stride: 1,
        alpha: 1.0,
        addends: ops
            .bias
            .iter()
            .map(|_| Addend {
                row_stride: 0,
                col_stride: 1,
                scale: 1.0,
            })
            .collect(),
        activation: if residual {
            Activation::None
        } else {
            ops.activation
        },
        geometry: geom,
        b_taps: vec![],
        rows_at_run_time: false,
        cols_at_run_time: false,
        run_time_strides: RunTimeStrides::None,
    };
    let tables = if pointwise {
        None
    } else {
        let t = im2col_tables(g, width, tap_offsets(g)?);
        Some(TablePtrs {
            lane: ctx.rodata(i32_bytes(&t.lane))?,
            tap: ctx.rodata(i32_bytes(&t.tap))?,
            contiguous: ctx.rodata(i32_bytes(&t.contiguous))?,
        })
    };
    if ctx.kernel.tasks > 1 {
        return split_transposed_gemm(ctx, g, ops, &spec, &layout, (tables, width), w_ptr);
    }
    let kernel = GemmKernel::define(ctx, &spec)?;
    let scratch = super::scratch(ctx)?;
    let b = &mut *ctx.b;
    let cols = b.ins().iadd_imm_s(scratch, layout.padded_bytes as i64);
    let yt = b
        .ins()
        .iadd_imm_s(scratch, (layout.padded_bytes + layout.cols_bytes) as i64);
    let packed_a = b.ins().iadd_imm_s(scratch, layout.packed_a_offset() as i64);
    let mut failure = None;
    kernel::counted_loop(b, 0, g.batch as i64, 1, |b, n| {
        let zero = kernel::iconst(b, 0);
        let x_n = input_group(b, g, ops.x.ptr, n, zero, F32);
        let a = match tables {
            None => x_n,
            Some(t) => {
                im2col_matrix(b, g, t, x_n, scratch, cols, width);
                cols
            }
        };
        let (y, addends) = output_and_bias(b, g, ops, n, zero);
        let bias: Vec<Value> = addends
            .iter()
            .take(ops.bias.iter().count())
            .copied()
            .collect();
        pack_a_rows(b, &geom, (p, k), (a, width), packed_a, (zero, k));
        kernel.call(b, packed_a, w_ptr, yt, &bias);
        let r = residual.then(|| addends[addends.len() - 1]);
        if let Err(e) = transpose_out(b, yt, y, r, (p, maps), maps, ops.activation) {
            failure = Some(e);
        }
    });
    failure.map_or(Ok(()), Err)
}

/// Copies K rows `first .. first + count` of `A[i, kk] = src[kk·width + i]` (`m × k`:
/// Xᵀ, the input plane or the im2col matrix) into `dst` in [`gemm::pack_a`]'s layout
/// for `geom`: per K block, per row tile, the tile's rows of each K step contiguous.
/// Read strided instead, each K step of a tile loads from another cache line of Xᵀ,
/// and over a K block those lines and the block of B's panel outgrow L1.
fn pack_a_rows(
    b: &mut FunctionBuilder,
    geom: &Geometry,
    (m, k): (usize, usize),
    (src, width): (Value, usize),
    dst: Value,
    (first, count): (Value, usize),
) {
    let kc = geom.k_block_len(k);
    let last_block = (k - 1) / kc * kc;
    let end = b.ins().iadd_imm_s(first, count as i64);
    kernel::range_loop(b, first, end, |b, kk| {
        let block = b.ins().udiv_imm_u(kk, kc as i64);
        let kb = b.ins().imul_imm_s(block, kc as i64);
        // The block's length: kc, or what the last block holds.
        let len = if k - last_block == kc {
            kernel::iconst(b, kc as i64)
        } else {
            let is_last = b.ins().icmp_imm_u(IntCC::Equal, kb, last_block as i64);
            let (last, full) = (
                kernel::iconst(b, (k - last_block) as i64),
                kernel::iconst(b, kc as i64),
            );
            b.ins().select(is_last, last, full)
        };
        let step = b.ins().isub(kk, kb);
        let row = kernel::elem_addr(b, src, kk, width * F32);
        let block_at = kernel::elem_addr(b, dst, kb, m * F32);
        for i0 in (0..m).step_by(geom.mr) {
            let rows = geom.mr.min(m - i0);
            // Tile i0's block starts after the block's earlier tiles: i0 rows × len.
            let tile_at = kernel::elem_addr(b, block_at, len, i0 * F32);
            let to = kernel::elem_addr(b, tile_at, step, rows * F32);
            let from = b.ins().iadd_imm_s(row, (i0 * F32) as i64);
            copy_floats(b, from, to, rows);
        }
    });
}

/// Copies `n` floats from `src` to `dst`: four at a time, then two, then one.
fn copy_floats(b: &mut FunctionBuilder, src: Value, dst: Value, n: usize) {
    let mut off = 0;
    for (floats, ty) in [(4, types::I8X16), (2, types::I64), (1, types::I32)] {
        while n - off >= floats {
            let v = b.ins().load(ty, kernel::flags(), src, (off * F32) as i32);
            b.ins().store(kernel::flags(), v, dst, (off * F32) as i32);
            off += floats;
        }
    }
}

/// Xᵀ as the im2col matrix `[K][width]` at `cols`, from image `x_n` (padded first
/// into `padded` when the conv pads).
fn im2col_matrix(
    b: &mut FunctionBuilder,
    g: &ConvGeometry,
    t: TablePtrs,
    x_n: Value,
    padded: Value,
    cols: Value,
    width: usize,
) {
    let src = if g.has_padding() {
        copy_padded(b, x_n, &g.input, g.cg, padded, &g.padded(), &g.pad_begin);
        padded
    } else {
        x_n
    };
    let zero = kernel::iconst(b, 0);
    im2col_panel(b, g.gemm_k(), t, src, cols, zero, width, width);
}

/// The batch-1 conv split by groups of maps (see [`split`]): the prologue makes the
/// im2col matrix in the node's shared scratch; each task computes its maps' columns of
/// `Yᵀ` into its own scratch and transposes them into the output.
fn split_transposed_gemm(
    ctx: &mut LowerCtx,
    g: &ConvGeometry,
    ops: &ConvOperands,
    spec: &GemmSpec,
    layout: &Layout,
    (tables, width): (Option<TablePtrs>, usize),
    w_ptr: Value,
) -> LowerResult {
    let (p, maps) = (g.out_size(), g.mg);
    let split = split(g, &spec.geometry);
    let size = split.per * spec.geometry.nr;
    let last_size = maps - size * (split.tasks - 1);
    let shared = ctx
        .shared_scratch
        .ok_or("the transposed conv GEMM needs scratch")?;
    let geom = spec.geometry;
    let (k, packed_at) = (spec.k, layout.packed_a_offset());
    let prologue = |ctx: &mut LowerCtx, part: Option<Value>| -> LowerResult {
        let packed_a = ctx.b.ins().iadd_imm_s(shared, packed_at as i64);
        let Some(t) = tables else {
            // Pointwise: input channel c is K row c of Xᵀ.
            kernel::part_range(ctx.b, part, &prologue_split(g), |b, first, count| {
                pack_a_rows(b, &geom, (p, k), (ops.x.ptr, p), packed_a, (first, count));
            });
            return Ok(());
        };
        let cols = ctx.b.ins().iadd_imm_s(shared, layout.padded_bytes as i64);
        let (in_plane, padded_plane) = (g.in_size(), g.padded().iter().product());
        let taps = g.taps();
        // Input channels first .. first+count: padded, then their K rows of the matrix
        // (the tap table's offsets are from the padded input's start), then those rows
        // packed.
        kernel::part_range(ctx.b, part, &prologue_split(g), |b, first, count| {
            let x = super::channel_at(b, ops.x.ptr, first, in_plane);
            let src = if g.has_padding() {
                let dst = super::channel_at(b, shared, first, padded_plane);
                copy_padded(b, x, &g.input, count, dst, &g.padded(), &g.pad_begin);
                shared
            } else {
                ops.x.ptr
            };
            let rows = TablePtrs {
                tap: kernel::elem_addr(b, t.tap, first, taps * 4),
                ..t
            };
            let dst = kernel::elem_addr(b, cols, first, taps * width * F32);
            let zero = kernel::iconst(b, 0);
            im2col_panel(b, count * taps, rows, src, dst, zero, width, width);
            let first_row = b.ins().imul_imm_s(first, taps as i64);
            let k_rows = (first_row, count * taps);
            pack_a_rows(b, &geom, (p, k), (cols, width), packed_a, k_rows);
        });
        Ok(())
    };
    let tasks = |ctx: &mut LowerCtx| -> LowerResult {
        let own = super::scratch(ctx)?;
        let b = &mut *ctx.b;
        let a = b.ins().iadd_imm_s(shared, packed_at as i64);
        let yt = b
            .ins()
            .iadd_imm_s(own, (layout.padded_bytes + layout.cols_bytes) as i64);
        let bias: Vec<Value> = ops.bias.iter().map(|t| t.ptr).collect();
        gemm::call_split(ctx, gemm::SplitAxis::Cols, spec, a, w_ptr, yt, &bias)?;
        let b = &mut *ctx.b;
        let residual = ops.residual.as_ref().map(|r| r.ptr);
        let act = ops.activation;
        let Some(task) = ctx.task else {
            return transpose_out(b, yt, ops.y.ptr, residual, (p, maps), maps, act);
        };
        // The task's maps: columns j0.. of Yᵀ, planes j0.. of Y (and R).
        let yt = kernel::elem_addr(b, yt, task, size * F32);
        let y = kernel::elem_addr(b, ops.y.ptr, task, size * p * F32);
        let r = residual.map(|r| kernel::elem_addr(b, r, task, size * p * F32));
        if last_size == size {
            return transpose_out(b, yt, y, r, (p, maps), size, act);
        }
        let (mut last, mut other) = (Ok(()), Ok(()));
        kernel::if_last_task(
            b,
            task,
            split.tasks,
            |b| last = transpose_out(b, yt, y, r, (p, maps), last_size, act),
            |b| other = transpose_out(b, yt, y, r, (p, maps), size, act),
        );
        last.and(other)
    };
    if ctx.kernel.prologue {
        ctx.with_prologue(prologue, tasks)
    } else {
        tasks(ctx)
    }
}

/// `Y[j, i] = Yᵀ[i, j]` for the first `count` maps j (of `Yᵀ`'s `p × maps`), plus
/// `R[j, i]` and then the activation when there is a residual (else the kernel applied
/// the activation).
fn transpose_out(
    b: &mut FunctionBuilder,
    yt: Value,
    y: Value,
    r: Option<Value>,
    (p, maps): (usize, usize),
    count: usize,
    act: Activation,
) -> LowerResult {
    let mut failure = None;
    kernel::counted_loop(b, 0, count as i64, 1, |b, j| {
        let src = kernel::elem_addr(b, yt, j, F32);
        let dst = kernel::elem_addr(b, y, j, p * F32);
        let res = r.map(|r| kernel::elem_addr(b, r, j, p * F32));
        for i in 0..p {
            let mut v = b
                .ins()
                .load(types::F32, flags(), src, (i * maps * F32) as i32);
            if let Some(res) = res {
                let rv = b.ins().load(types::F32, flags(), res, (i * F32) as i32);
                v = b.ins().fadd(v, rv);
                match crate::codegen::unary::activation(b, act, v) {
                    Ok(a) => v = a,
                    Err(e) => failure = Some(e),
                }
            }
            b.ins().store(flags(), v, dst, (i * F32) as i32);
        }
    });
    failure.map_or(Ok(()), Err)
}
