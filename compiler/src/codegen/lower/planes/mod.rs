//! Nodes on image planes whose size only the run knows (see [`crate::dims::planes`]):
//! every operand dense at its actual extents, each extent computed from the dim's count
//! by its [`ExtentExpr`].
//!
//! * 3×3 stride-1 convs by Winograd with run-time tile counts ([`winograd`]).
//! * Pointwise convs (1×1, stride 1, no pads) on x86: one GEMM per image and group that
//!   reads the input planes and writes the output planes in place, their size the
//!   GEMM's column count and every row stride (bias, residual, activation in its
//!   epilogue).
//! * Other convs, per group, a block of output positions at a time: the positions' input
//!   patches gathered into `P[K][B]` (2-D convs: one output row's run at a time, from
//!   a copy of the group's planes with a zero border split by stride phase, so every
//!   tap's run is one contiguous copy; others: zeros where a patch leaves the plane), the GEMM
//!   `C[Mg, B] = W · P` on the weights packed at compile time (bias and, without a
//!   residual, the activation in its epilogue; on x86 the last block's width counted
//!   at run time, else rounded up to the narrowest width holding it). On x86 the GEMM
//!   writes the output planes itself (C's row stride the plane size, the residual and
//!   the activation in its epilogue); else `C`'s rows are copied into them (adding the
//!   residual and applying the activation after it). Many maps over few positions run
//!   it transposed, `Cᵀ = Pᵀ · Wᵀ`, the block's positions the GEMM's rows.
//! * Depthwise 2-D convs: per channel, the plane copied into a zero border in scratch,
//!   each row split into its stride's column phases, then on x86 a machine-code kernel
//!   over the run's rows and columns (`kernels::x86::dwconv_rows`, which also makes the
//!   stride-1 copy), elsewhere Cranelift's loops four outputs at a time.
//! * 2-D max pools: per channel, the plane copied into a -inf border split by stride
//!   phase, then the windows read without bounds checks, four outputs at a time.
//! * Other pools, windowed or global: direct loops, windows clipped to the plane.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, FuncRef, InstBuilder, StackSlotData, StackSlotKind, Value};
use cranelift_frontend::FunctionBuilder;

use super::gemm::{self, ALayout, Addend, BLayout, GemmKernel, GemmSpec, KernelKind};
use super::run_shape;
use super::{LowerCtx, LowerResult, Operand};
use crate::codegen::kernel::{self, flags};
use crate::codegen::kernels::x86::dwconv_rows;
use crate::codegen::kernels::x86::maxpool_plane::{self, MaxPoolPlaneSpec};
use crate::codegen::kernels::x86::patch_rows::{self};
use crate::codegen::kernels::x86::plane_phases::{self};
use crate::codegen::plan::Strategy;
use crate::ir::Tensor;
use crate::ops::{Activation, ConvAttrs, Op, PoolAttrs, PoolKind};

mod movement;
mod winograd;

use crate::codegen::plan::planes::*;

const F32: usize = 4;
/// Where a node on planes finds its run-time extents: the symbols' values, each extent
/// the operand's dimension expression.
pub(in crate::codegen::lower) struct PlaneSource(super::run_shape::RunDims);

impl PlaneSource {
    /// Axis 0 of a value of type `ty` (the images).
    fn batch(&self, b: &mut FunctionBuilder, ty: &crate::ir::TensorType) -> super::run_shape::Ext {
        self.0.extent(b, &ty.dim(0))
    }
}

/// The extents of the axes of a value of type `ty` from axis `from` on: constants
/// where fixed.
fn extents(
    b: &mut FunctionBuilder,
    src: &PlaneSource,
    ty: &crate::ir::TensorType,
    from: usize,
) -> Vec<Value> {
    (src.0.shape(b, ty)[from..].iter())
        .map(|e| e.value(b))
        .collect()
}

fn product(b: &mut FunctionBuilder, xs: &[Value]) -> Value {
    let one = kernel::iconst(b, 1);
    xs.iter().fold(one, |p, &x| b.ins().imul(p, x))
}

pub fn lower_planes(ctx: &mut LowerCtx, op: &Op) -> LowerResult {
    let Strategy::Planes(plan) = ctx.kernel.strategy.clone() else {
        return Err("no planes plan for this node".into());
    };
    let src = match &ctx.run_dims {
        Some(dims) => PlaneSource(dims.clone()),
        None => return Err("a node on run-time planes needs the symbols' values".into()),
    };
    match op {
        Op::Conv(c) if depthwise(c, &ctx.input(0)?.ty, &ctx.output(0).ty) => {
            depthwise_conv(ctx, c, &plan, &src)
        }
        Op::Conv(c) => match &plan.winograd {
            Some(wp) => winograd::conv(ctx, c, wp, &src),
            None => conv(ctx, c, &plan, &src),
        },
        Op::Pool(p) if p.kind == PoolKind::Max && p.kernel.len() == 2 => {
            max_pool_2d(ctx, p, &plan, &src)
        }
        Op::Pool(p) => pool(ctx, p, &plan, &src),
        Op::Binary(kind) => per_plane_binary(ctx, *kind, &src),
        Op::Reshape { .. } => movement::reshape(ctx, &src),
        Op::Transpose { perm } => movement::transpose(ctx, perm, &src),
        other => Err(format!(
            "{} does not run on run-time planes (the import should have refused it)",
            other.name()
        )),
    }
}

/// A conv's input, output, bias and residual, and its weights, which a conv on planes
/// needs constant and float32 (`what` names the conv in the error).
fn conv_operands(ctx: &LowerCtx, what: &str) -> Result<(ConvIo, Vec<f32>), String> {
    let w = ctx.input(1)?;
    let Some(Tensor::F32(weights)) = &w.constant else {
        return Err(format!(
            "{what} on run-time planes needs constant float32 weights"
        ));
    };
    let io = ConvIo {
        x: ctx.input(0)?,
        bias: ctx.inputs.get(2).cloned().flatten(),
        residual: ctx.inputs.get(3).cloned().flatten(),
        y: ctx.output(0),
    };
    Ok((io, weights.iter().copied().collect()))
}

/// The operands of a conv on planes besides its weights.
struct ConvIo {
    x: Operand,
    bias: Option<Operand>,
    residual: Option<Operand>,
    y: Operand,
}

fn conv(ctx: &mut LowerCtx, c: &ConvAttrs, plan: &PlanesPlan, src: &PlaneSource) -> LowerResult {
    let blocks = plan
        .gemm
        .as_ref()
        .ok_or("a conv on planes has a GEMM plan")?;
    let (geom, block, widths) = (blocks.geometry, blocks.block, &blocks.widths);
    let (
        ConvIo {
            x,
            bias,
            residual,
            y,
        },
        weights,
    ) = conv_operands(ctx, "a conv")?;
    let sp = c.kernel.len();
    if x.ty.rank() != sp + 2 || sp == 0 || sp > 3 {
        return Err("a conv on run-time planes is 1-, 2- or 3-D".into());
    }
    let (channels, maps, group) = (x.ty.shape[1], y.ty.shape[1], c.group);
    let batch = src.batch(ctx.b, &x.ty);
    let (cg, mg) = (channels / group, maps / group);
    let taps: usize = c.kernel.iter().product();
    let k = cg * taps;
    // Each group's W[Mg, K] packed as the GEMM's A (or Wᵀ as its B), the groups one
    // after another.
    let mut packed = vec![];
    let mut b_layout = BLayout::Packed;
    for gi in 0..group {
        let rows = &weights[gi * mg * k..(gi + 1) * mg * k];
        if blocks.transposed {
            let by_columns = ctx.kernel.weights_by_columns;
            let (p, layout) =
                gemm::pack_weights_b(&geom, k, mg, by_columns, |kk, j| rows[j * k + kk]);
            packed.extend(p);
            b_layout = layout;
        } else {
            packed.extend(gemm::pack_a(&geom, mg, k, |i, kk| rows[i * k + kk]));
        }
    }
    let group_floats = packed.len() / group.max(1);
    let w_ptr = ctx.weights_f32(&packed)?;
    if blocks.in_place {
        let positions: usize = y.ty.shape[2..].iter().product();
        let spec = pointwise_spec(
            c,
            (cg, mg, positions),
            (bias.is_some(), residual.is_some()),
            geom,
        );
        let kernel = GemmKernel::define(ctx, &spec)?;
        let b = &mut *ctx.b;
        let out_ext = extents(b, src, &y.ty, 2);
        let positions = product(b, &out_ext);
        let plane_bytes = b.ins().imul_imm_s(positions, F32 as i64);
        let images = batch.scale(b, group);
        run_shape::run_loop(b, images, |b, ng| {
            // Image n, group g: its channels' and maps' planes, one after another.
            let x_at = b.ins().imul_imm_s(plane_bytes, cg as i64);
            let x_at = b.ins().imul(ng, x_at);
            let y_at = b.ins().imul_imm_s(plane_bytes, mg as i64);
            let y_at = b.ins().imul(ng, y_at);
            let gi = b.ins().urem_imm_u(ng, group as i64);
            let w_g = kernel::elem_addr(b, w_ptr, gi, group_floats * F32);
            let mut addends = vec![];
            if let Some(t) = &bias {
                addends.push(kernel::elem_addr(b, t.ptr, gi, mg * F32));
            }
            if let Some(r) = &residual {
                addends.push(b.ins().iadd(r.ptr, y_at));
            }
            let (x_g, y_g) = (b.ins().iadd(x.ptr, x_at), b.ins().iadd(y.ptr, y_at));
            kernel.call_strided(
                b,
                (w_g, x_g, y_g),
                &addends,
                (None, Some(positions)),
                Some(positions),
            );
        });
        return Ok(());
    }
    // The x86 kernel computes a block of any width up to `block`; the Cranelift one
    // runs the block's width rounded up to one of `widths`. The patches are read as
    // rows (a block's rows are at most `MAX_BLOCK_PANELS` panels long): packed into
    // panels first, like a MatMul's wide B, MobileNetV2's 96→576 conv on 14×14 took
    // 1.6× as long.
    let counted = matches!(geom.kernel, KernelKind::X86(_));
    let writes_planes = blocks.writes_planes;
    let addends = (bias.is_some(), residual.is_some());
    let spec = |n: usize| blocks_spec(c, (k, mg, n, block), addends, geom, writes_planes);
    let transposed_spec = GemmSpec {
        m: block,
        n: mg,
        k,
        a: ALayout::Strided {
            row_stride: 1,
            col_stride: block,
        },
        b: b_layout,
        ldc: mg,
        c_col_stride: 1,
        alpha: 1.0,
        addends: bias
            .iter()
            .map(|_| Addend {
                row_stride: 0,
                col_stride: 1,
                scale: 1.0,
            })
            .collect(),
        rows_at_run_time: true,
        cols_at_run_time: false,
        ..spec(block)
    };
    let kernels: Vec<(usize, GemmKernel)> = match (blocks.transposed, counted) {
        (true, _) => vec![(block, GemmKernel::define(ctx, &transposed_spec)?)],
        (false, true) => vec![(
            block,
            GemmKernel::define(
                ctx,
                &GemmSpec {
                    cols_at_run_time: true,
                    ..spec(block)
                },
            )?,
        )],
        (false, false) => widths
            .iter()
            .map(|&n| Ok((n, GemmKernel::define(ctx, &spec(n))?)))
            .collect::<Result<_, String>>()?,
    };
    let transposed = blocks.transposed;
    let copy_kernel = PlaneCopier::define(ctx, plan)?;
    let gather = match &blocks.patch_rows {
        Some(spec) => Some(gemm::define_machine_code(ctx, 5, &patch_rows::emit(spec)?)?),
        None => None,
    };
    let scratch = ctx.scratch.ok_or("a conv on planes needs scratch")?;
    let act = c.activation;
    let layout = ConvScratch::new(k, block, mg, !writes_planes);
    let padded_chan = blocks.padded_channel_bytes;
    let from_padded = sp == 2 && padded_chan > 0;
    let b = &mut *ctx.b;
    let patches = scratch;
    let out_block = b.ins().iadd_imm_s(scratch, layout.out as i64);
    let padded_at = b.ins().iadd_imm_s(scratch, layout.bytes as i64);
    let in_ext = extents(b, src, &x.ty, 2);
    let out_ext = extents(b, src, &y.ty, 2);
    let in_plane = product(b, &in_ext);
    let positions = product(b, &out_ext);
    let in_image = b.ins().imul_imm_s(in_plane, (channels * F32) as i64);
    let out_plane_bytes = b.ins().imul_imm_s(positions, F32 as i64);
    let out_image = b.ins().imul_imm_s(out_plane_bytes, maps as i64);
    let window = Window {
        kernel: c.kernel.clone(),
        strides: c.strides.clone(),
        dilations: c.dilations.clone(),
        pads: c.pads[..sp].to_vec(),
        pads_end: c.pads[sp..].to_vec(),
    };
    let copier = from_padded.then(|| {
        let copier = PlaneCopier::new(
            b,
            copy_kernel,
            (in_ext[0], in_ext[1]),
            &c.pads,
            window.strides[1],
            0.0,
        );
        kernel::counted_loop(b, 0, cg as i64, 1, |b, ch| {
            let dst = kernel::elem_addr(b, padded_at, ch, padded_chan);
            copier.fill_border(b, dst);
        });
        copier
    });
    let mut failure = None;
    run_shape::run_loop(b, batch, |b, n| {
        let off = b.ins().imul(n, in_image);
        let x_n = b.ins().iadd(x.ptr, off);
        let off = b.ins().imul(n, out_image);
        let y_n = b.ins().iadd(y.ptr, off);
        let r_n = residual.as_ref().map(|r| b.ins().iadd(r.ptr, off));
        kernel::counted_loop(b, 0, group as i64, 1, |b, gi| {
            let group_in = b.ins().imul_imm_s(in_plane, (cg * F32) as i64);
            let group_in = b.ins().imul(gi, group_in);
            let x_g = b.ins().iadd(x_n, group_in);
            let group_out = b.ins().imul_imm_s(out_plane_bytes, mg as i64);
            let group_out = b.ins().imul(gi, group_out);
            let y_g = b.ins().iadd(y_n, group_out);
            let r_g = r_n.map(|r| b.ins().iadd(r, group_out));
            let w_g = kernel::elem_addr(b, w_ptr, gi, group_floats * F32);
            let bias_g = bias
                .as_ref()
                .map(|t| kernel::elem_addr(b, t.ptr, gi, mg * F32));
            let padded = copier.as_ref().map(|copier| {
                kernel::counted_loop(b, 0, cg as i64, 1, |b, ch| {
                    let src = b.ins().imul(ch, in_plane);
                    let src = kernel::elem_addr(b, x_g, src, F32);
                    let dst = kernel::elem_addr(b, padded_at, ch, padded_chan);
                    copier.copy(b, src, dst);
                });
                (&copier.layout, padded_chan)
            });
            let mut run_block = |b: &mut FunctionBuilder, p0: Value, r: Value, n: usize| {
                if let Some((layout, chan_bytes)) = &padded {
                    gather_rows_padded(
                        b,
                        &window,
                        (padded_at, *chan_bytes, layout, cg),
                        (&out_ext, p0, r),
                        (patches, block),
                        gather,
                    );
                } else if sp == 2 {
                    gather_rows_2d(
                        b,
                        &window,
                        (x_g, cg, &in_ext),
                        (&out_ext, p0, r),
                        patches,
                        block,
                    );
                } else {
                    gather_patches(
                        b,
                        &window,
                        (x_g, cg, &in_ext),
                        (&out_ext, p0, r),
                        patches,
                        block,
                    );
                }
                let mut addends: Vec<Value> = bias_g.iter().copied().collect();
                let gemm = &kernels
                    .iter()
                    .find(|(w, _)| *w == n)
                    .expect("a kernel per width")
                    .1;
                if writes_planes {
                    addends.extend(r_g.map(|r| kernel::elem_addr(b, r, p0, F32)));
                    let c_at = kernel::elem_addr(b, y_g, p0, F32);
                    let cols = (None, Some(r));
                    gemm.call_strided(b, (w_g, patches, c_at), &addends, cols, Some(positions));
                    return;
                }
                // C[map][position] one map's row at a time, or Cᵀ by columns.
                let strides = if transposed {
                    gemm.call_rows(b, patches, w_g, out_block, &addends, Some(r));
                    (1, mg)
                } else {
                    let cols = counted.then_some(r);
                    gemm.call_counted(b, (w_g, patches, out_block), &addends, None, cols);
                    (block, 1)
                };
                let copied = copy_out(
                    b,
                    out_block,
                    (y_g, r_g),
                    (positions, p0, r),
                    (mg, strides),
                    act,
                );
                if let Err(e) = copied {
                    failure = Some(e);
                }
            };
            let full = b.ins().udiv_imm_u(positions, block as i64);
            kernel::dynamic_loop(b, full, |b, blk| {
                let p0 = b.ins().imul_imm_s(blk, block as i64);
                let r = kernel::iconst(b, block as i64);
                run_block(b, p0, r, block);
            });
            let p0 = b.ins().imul_imm_s(full, block as i64);
            let rest = b.ins().isub(positions, p0);
            let widths: &[usize] = if counted { &[block] } else { widths };
            tail_widths(b, widths, rest, &mut |b, n| run_block(b, p0, rest, n));
        });
    });
    failure.map_or(Ok(()), Err)
}

/// A binary op of planes by a fixed operand holding one value per plane, either
/// operand first.
fn per_plane_binary(
    ctx: &mut LowerCtx,
    op: crate::ops::BinaryOp,
    src: &PlaneSource,
) -> LowerResult {
    let (a, c) = (ctx.input(0)?, ctx.input(1)?);
    let y = ctx.output(0);
    // The planes operand is shaped like the output; the other is not (else the op would
    // run over the whole buffer as an elementwise op of one size).
    let planes_first = a.ty.shape == y.ty.shape;
    let (x, s) = if planes_first { (a, c) } else { (c, a) };
    let rank = y.ty.rank();
    let channels = y.ty.shape[1];
    let batch = src.batch(ctx.b, &y.ty);
    // Floats from one sample's (channel's) value of `s` to the next; 0 when broadcast.
    let s_dim = |axis: usize| {
        let lead = rank - s.ty.rank();
        axis.checked_sub(lead).map_or(1, |i| s.ty.shape[i])
    };
    let s_channel = usize::from(s_dim(1) != 1);
    let s_sample = if s_dim(0) != 1 { s_dim(1) } else { 0 };
    let b = &mut *ctx.b;
    let out_ext = extents(b, src, &y.ty, 2);
    let plane = product(b, &out_ext);
    let mut failure = None;
    run_shape::run_loop(b, batch, |b, n| {
        kernel::counted_loop(b, 0, channels as i64, 1, |b, ch| {
            let si = b.ins().imul_imm_s(n, s_sample as i64);
            let sc = b.ins().imul_imm_s(ch, s_channel as i64);
            let si = b.ins().iadd(si, sc);
            let at = kernel::elem_addr(b, s.ptr, si, F32);
            let sv = b.ins().load(types::F32, flags(), at, 0);
            let nc = b.ins().imul_imm_s(n, channels as i64);
            let nc = b.ins().iadd(nc, ch);
            let base = b.ins().imul(nc, plane);
            let src = kernel::elem_addr(b, x.ptr, base, F32);
            let dst = kernel::elem_addr(b, y.ptr, base, F32);
            let mut apply = |b: &mut FunctionBuilder, i: Value, ty: types::Type| {
                let at = kernel::elem_addr(b, src, i, F32);
                let xv = b.ins().load(ty, flags(), at, 0);
                let svv = if ty == types::F32 {
                    sv
                } else {
                    b.ins().splat(ty, sv)
                };
                let (l, r) = if planes_first { (xv, svv) } else { (svv, xv) };
                match super::elementwise::binary_float(b, op, l, r) {
                    Ok(v) => {
                        let at = kernel::elem_addr(b, dst, i, F32);
                        b.ins().store(flags(), v, at, 0);
                    }
                    Err(e) => failure = Some(e),
                }
            };
            // Four vectors per step (one a step ran at the loop's overhead), then single
            // vectors, then floats.
            let wide = b.ins().ushr_imm_u(plane, 4);
            kernel::dynamic_loop(b, wide, |b, q| {
                let i = b.ins().ishl_imm_u(q, 4);
                for u in 0..4 {
                    let at = b.ins().iadd_imm_s(i, 4 * u);
                    apply(b, at, types::F32X4);
                }
            });
            let from = b.ins().ishl_imm_u(wide, 2);
            let quads = b.ins().ushr_imm_u(plane, 2);
            kernel::range_loop(b, from, quads, |b, q| {
                let i = b.ins().ishl_imm_u(q, 2);
                apply(b, i, types::F32X4);
            });
            let done = b.ins().ishl_imm_u(quads, 2);
            kernel::range_loop(b, done, plane, |b, i| apply(b, i, types::F32));
        });
    });
    failure.map_or(Ok(()), Err)
}

/// Runs `body` with the narrowest of `widths` (ascending) holding `rest` columns; nothing
/// when `rest` is 0.
fn tail_widths(
    b: &mut FunctionBuilder,
    widths: &[usize],
    rest: Value,
    body: &mut dyn FnMut(&mut FunctionBuilder, usize),
) {
    let any = b.ins().icmp_imm_s(IntCC::SignedGreaterThan, rest, 0);
    kernel::if_else(b, any, |b| narrowest(b, widths, rest, body), |_| {});
}

fn narrowest(
    b: &mut FunctionBuilder,
    widths: &[usize],
    rest: Value,
    body: &mut dyn FnMut(&mut FunctionBuilder, usize),
) {
    match widths {
        [] => {}
        [last] => body(b, *last),
        [first, others @ ..] => {
            let fits = b
                .ins()
                .icmp_imm_s(IntCC::SignedLessThanOrEqual, rest, *first as i64);
            let (yes, no, join) = (b.create_block(), b.create_block(), b.create_block());
            b.ins().brif(fits, yes, &[], no, &[]);
            b.seal_block(yes);
            b.seal_block(no);
            b.switch_to_block(yes);
            body(b, *first);
            b.ins().jump(join, &[]);
            b.switch_to_block(no);
            narrowest(b, others, rest, body);
            b.ins().jump(join, &[]);
            b.seal_block(join);
            b.switch_to_block(join);
        }
    }
}

/// The patches `P` of a 2-D conv, one output row's run of positions at a time: per tap
/// and channel, the run's input row segment, zero where it leaves the plane (stride 1:
/// a zero fill, a contiguous copy, a zero fill).
fn gather_rows_2d(
    b: &mut FunctionBuilder,
    win: &Window,
    (x, channels, in_ext): (Value, usize, &[Value]),
    (out_ext, p0, rows): (&[Value], Value, Value),
    patches: Value,
    block: usize,
) {
    let (h, w) = (in_ext[0], in_ext[1]);
    let ow = out_ext[1];
    let taps = win.kernel[0] * win.kernel[1];
    let in_plane = b.ins().imul(h, w);
    row_runs(b, ow, p0, rows, |b, i, oy, ox, len| {
        let zero = kernel::iconst(b, 0);
        for ky in 0..win.kernel[0] {
            let iy = b.ins().imul_imm_s(oy, win.strides[0] as i64);
            let iy = b
                .ins()
                .iadd_imm_s(iy, (ky * win.dilations[0]) as i64 - win.pads[0] as i64);
            let row_ok = b.ins().icmp(IntCC::UnsignedLessThan, iy, h);
            let iy = b.ins().select(row_ok, iy, zero);
            for kx in 0..win.kernel[1] {
                let t = ky * win.kernel[1] + kx;
                let ix0 = b.ins().imul_imm_s(ox, win.strides[1] as i64);
                let ix0 = b
                    .ins()
                    .iadd_imm_s(ix0, (kx * win.dilations[1]) as i64 - win.pads[1] as i64);
                // Positions j in [lo, hi) read inside the row.
                let (lo, hi) = if win.strides[1] == 1 {
                    let neg = b.ins().ineg(ix0);
                    let lo = b.ins().smax(neg, zero);
                    let lo = b.ins().smin(lo, len);
                    let room = b.ins().isub(w, ix0);
                    let hi = b.ins().smax(room, zero);
                    let hi = b.ins().smin(hi, len);
                    (lo, hi)
                } else {
                    strided_span(b, ix0, w, len, win.strides[1])
                };
                let lo = b.ins().select(row_ok, lo, len);
                let hi = b.ins().select(row_ok, hi, len);
                let hi = b.ins().smax(hi, lo);
                let row_off = b.ins().imul(iy, w);
                let src_off = b.ins().iadd(row_off, ix0);
                kernel::counted_loop(b, 0, channels as i64, 1, |b, ch| {
                    let kk = b.ins().imul_imm_s(ch, taps as i64);
                    let kk = b.ins().iadd_imm_s(kk, t as i64);
                    let dst = kernel::elem_addr(b, patches, kk, block * F32);
                    let dst = kernel::elem_addr(b, dst, i, F32);
                    let plane = b.ins().imul(ch, in_plane);
                    let src = b.ins().iadd(plane, src_off);
                    // `src` may point before the plane; only [lo, hi) is read.
                    let src = b.ins().ishl_imm_u(src, 2);
                    let src = b.ins().iadd(x, src);
                    fill_zero(b, dst, zero, lo);
                    if win.strides[1] == 1 {
                        copy_run(b, dst, src, lo, hi);
                    } else {
                        copy_strided(b, dst, src, (lo, hi), win.strides[1]);
                    }
                    fill_zero(b, dst, hi, len);
                });
            }
        }
    });
}

/// The patches `P` of a 2-D conv from its group's channels copied with their border
/// (`cg` planes `chan_bytes` apart in `layout`, see [`pad_plane`]), one output row's
/// run of positions at a time: per tap and channel, one contiguous copy (by the
/// machine-code `gather`, one call per run, where there is one).
fn gather_rows_padded(
    b: &mut FunctionBuilder,
    win: &Window,
    (padded, chan_bytes, layout, channels): (Value, usize, &PaddedPlane, usize),
    (out_ext, p0, rows): (&[Value], Value, Value),
    (patches, block): (Value, usize),
    gather: Option<FuncRef>,
) {
    let ow = out_ext[1];
    let taps = win.kernel[0] * win.kernel[1];
    let (sx, dx) = (win.strides[1], win.dilations[1]);
    row_runs(b, ow, p0, rows, |b, i, oy, ox, len| {
        if let Some(gather) = gather {
            let row = b.ins().imul_imm_s(oy, win.strides[0] as i64);
            let row = b.ins().imul(row, layout.row_bytes);
            let src = b.ins().iadd(padded, row);
            let src = kernel::elem_addr(b, src, ox, F32);
            let dst = kernel::elem_addr(b, patches, i, F32);
            let phase_bytes = layout.phase_bytes[sx - 1];
            let args = [src, dst, len, layout.row_bytes, phase_bytes];
            b.ins().call(gather, &args);
            return;
        }
        let zero = kernel::iconst(b, 0);
        let rows_at = layout.window_rows(
            b,
            padded,
            oy,
            (win.kernel[0], win.strides[0], win.dilations[0]),
        );
        let col = b.ins().imul_imm_s(ox, F32 as i64);
        let dst_i = kernel::elem_addr(b, patches, i, F32);
        for (ky, phases) in rows_at.iter().enumerate() {
            for kx in 0..win.kernel[1] {
                let t = ky * win.kernel[1] + kx;
                let (phase, index) = ((kx * dx) % sx, (kx * dx) / sx);
                let src_t = b.ins().iadd(phases[phase], col);
                let src_t = b.ins().iadd_imm_s(src_t, (index * F32) as i64);
                kernel::counted_loop(b, 0, channels as i64, 1, |b, ch| {
                    let kk = b.ins().imul_imm_s(ch, taps as i64);
                    let kk = b.ins().iadd_imm_s(kk, t as i64);
                    let dst = kernel::elem_addr(b, dst_i, kk, block * F32);
                    let src = kernel::elem_addr(b, src_t, ch, chan_bytes);
                    copy_run(b, dst, src, zero, len);
                });
            }
        }
    });
}

/// `body(i, oy, ox, len)` for each run of a block's `rows` positions from flat
/// position `p0` (row length `ow`) that lies in one output row: `len` positions from
/// `(oy, ox)`, the run's first at index `i` of the block.
fn row_runs(
    b: &mut FunctionBuilder,
    ow: Value,
    p0: Value,
    rows: Value,
    mut body: impl FnMut(&mut FunctionBuilder, Value, Value, Value, Value),
) {
    let (i_var, oy_var, ox_var) = (
        b.declare_var(types::I64),
        b.declare_var(types::I64),
        b.declare_var(types::I64),
    );
    let zero = kernel::iconst(b, 0);
    b.def_var(i_var, zero);
    let oy0 = b.ins().udiv(p0, ow);
    let ox0 = b.ins().urem(p0, ow);
    b.def_var(oy_var, oy0);
    b.def_var(ox_var, ox0);
    kernel::while_loop(
        b,
        |b| {
            let i = b.use_var(i_var);
            b.ins().icmp(IntCC::SignedLessThan, i, rows)
        },
        |b| {
            let (i, oy, ox) = (b.use_var(i_var), b.use_var(oy_var), b.use_var(ox_var));
            let row_left = b.ins().isub(ow, ox);
            let block_left = b.ins().isub(rows, i);
            let len = b.ins().smin(row_left, block_left);
            body(b, i, oy, ox, len);
            let next = b.ins().iadd(i, len);
            b.def_var(i_var, next);
            let oy1 = b.ins().iadd_imm_s(oy, 1);
            b.def_var(oy_var, oy1);
            let zero = kernel::iconst(b, 0);
            b.def_var(ox_var, zero);
        },
    );
}

/// For stride `s`: the positions `j < len` whose column `ix0 + j·s` lies in `[0, w)`.
fn strided_span(
    b: &mut FunctionBuilder,
    ix0: Value,
    w: Value,
    len: Value,
    s: usize,
) -> (Value, Value) {
    let zero = kernel::iconst(b, 0);
    // lo = ceil(-ix0 / s) for ix0 < 0.
    let neg = b.ins().ineg(ix0);
    let neg = b.ins().smax(neg, zero);
    let lo = b.ins().iadd_imm_s(neg, s as i64 - 1);
    let lo = b.ins().udiv_imm_u(lo, s as i64);
    let lo = b.ins().smin(lo, len);
    // hi = ceil((w - ix0) / s) when positive.
    let room = b.ins().isub(w, ix0);
    let room = b.ins().smax(room, zero);
    let hi = b.ins().iadd_imm_s(room, s as i64 - 1);
    let hi = b.ins().udiv_imm_u(hi, s as i64);
    let hi = b.ins().smin(hi, len);
    (lo, hi)
}

/// Floats `from..to` of `dst` set to zero.
fn fill_zero(b: &mut FunctionBuilder, dst: Value, from: Value, to: Value) {
    let z = b.ins().f32const(0.0);
    kernel::range_loop(b, from, to, |b, j| {
        let at = kernel::elem_addr(b, dst, j, F32);
        b.ins().store(flags(), z, at, 0);
    });
}

/// `dst[j] = value` for `j` in `0..n`, four floats at a time.
fn fill_plane(b: &mut FunctionBuilder, dst: Value, n: Value, value: f32) {
    let v = b.ins().f32const(value);
    let vx4 = b.ins().splat(types::F32X4, v);
    let quads = b.ins().ushr_imm_u(n, 2);
    kernel::dynamic_loop(b, quads, |b, q| {
        let d = kernel::elem_addr(b, dst, q, 4 * F32);
        b.ins().store(flags(), vx4, d, 0);
    });
    let done = b.ins().ishl_imm_u(quads, 2);
    kernel::range_loop(b, done, n, |b, j| {
        let d = kernel::elem_addr(b, dst, j, F32);
        b.ins().store(flags(), v, d, 0);
    });
}

/// `dst[j] = src[j]` for `j` in `from..to`, four floats at a time.
fn copy_run(b: &mut FunctionBuilder, dst: Value, src: Value, from: Value, to: Value) {
    let n = b.ins().isub(to, from);
    let quads = b.ins().ushr_imm_u(n, 2);
    let d0 = kernel::elem_addr(b, dst, from, F32);
    let s0 = kernel::elem_addr(b, src, from, F32);
    kernel::dynamic_loop(b, quads, |b, q| {
        let s = kernel::elem_addr(b, s0, q, 4 * F32);
        let v = b.ins().load(types::F32X4, flags(), s, 0);
        let d = kernel::elem_addr(b, d0, q, 4 * F32);
        b.ins().store(flags(), v, d, 0);
    });
    let done = b.ins().ishl_imm_u(quads, 2);
    let rest = b.ins().iadd(from, done);
    kernel::range_loop(b, rest, to, |b, j| {
        let s = kernel::elem_addr(b, src, j, F32);
        let v = b.ins().load(types::F32, flags(), s, 0);
        let d = kernel::elem_addr(b, dst, j, F32);
        b.ins().store(flags(), v, d, 0);
    });
}

/// `dst[j] = src[j·stride]` for `j` in `from..to`.
fn copy_strided(
    b: &mut FunctionBuilder,
    dst: Value,
    src: Value,
    (from, to): (Value, Value),
    stride: usize,
) {
    kernel::range_loop(b, from, to, |b, j| {
        let s = kernel::elem_addr(b, src, j, stride * F32);
        let v = b.ins().load(types::F32, flags(), s, 0);
        let d = kernel::elem_addr(b, dst, j, F32);
        b.ins().store(flags(), v, d, 0);
    });
}

/// `Y[j][p0 + i] = C(j, i)` (+ `R[j][p0 + i]`, then the activation, when there is a
/// residual) for the `rows` positions of a block and `maps` maps; `C(j, i)` at
/// `j·map_stride + i·position_stride` floats (a block `[maps][B]`, or transposed), planes
/// `positions` floats long.
fn copy_out(
    b: &mut FunctionBuilder,
    c: Value,
    (y, r): (Value, Option<Value>),
    (positions, p0, rows): (Value, Value, Value),
    (maps, (map_stride, position_stride)): (usize, (usize, usize)),
    act: Activation,
) -> LowerResult {
    let mut failure = None;
    kernel::counted_loop(b, 0, maps as i64, 1, |b, j| {
        let src = kernel::elem_addr(b, c, j, map_stride * F32);
        let plane = b.ins().imul(j, positions);
        let first = b.ins().iadd(plane, p0);
        let dst = kernel::elem_addr(b, y, first, F32);
        if r.is_none() && position_stride == 1 {
            let zero = kernel::iconst(b, 0);
            copy_run(b, dst, src, zero, rows);
            return;
        }
        let res = r.map(|r| kernel::elem_addr(b, r, first, F32));
        kernel::dynamic_loop(b, rows, |b, i| {
            let s = kernel::elem_addr(b, src, i, position_stride * F32);
            let mut v = b.ins().load(types::F32, flags(), s, 0);
            if let Some(res) = res {
                let at = kernel::elem_addr(b, res, i, F32);
                let rv = b.ins().load(types::F32, flags(), at, 0);
                v = b.ins().fadd(v, rv);
                match crate::codegen::unary::activation(b, act, v) {
                    Ok(a) => v = a,
                    Err(e) => failure = Some(e),
                }
            }
            let d = kernel::elem_addr(b, dst, i, F32);
            b.ins().store(flags(), v, d, 0);
        });
    });
    failure.map_or(Ok(()), Err)
}

/// A sliding window's shape; `pads` are those before each axis, `pads_end` after.
struct Window {
    kernel: Vec<usize>,
    strides: Vec<usize>,
    dilations: Vec<usize>,
    pads: Vec<usize>,
    pads_end: Vec<usize>,
}

/// Output position `p` (flat) as one coordinate per axis of `ext`.
fn unflatten(b: &mut FunctionBuilder, p: Value, ext: &[Value]) -> Vec<Value> {
    let mut coords = vec![p; ext.len()];
    let mut rest = p;
    for a in (0..ext.len()).rev() {
        if a == 0 {
            coords[0] = rest;
        } else {
            coords[a] = b.ins().urem(rest, ext[a]);
            rest = b.ins().udiv(rest, ext[a]);
        }
    }
    coords
}

/// `P[kk][i]` for `rows` positions from `p0`: channel `c` at tap `t` of position
/// `p0 + i`'s window, 0 outside the plane; rows `block` floats apart.
fn gather_patches(
    b: &mut FunctionBuilder,
    win: &Window,
    (x, channels, in_ext): (Value, usize, &[Value]),
    (out_ext, p0, rows): (&[Value], Value, Value),
    patches: Value,
    block: usize,
) {
    let sp = win.kernel.len();
    let taps: usize = win.kernel.iter().product();
    let zero = b.ins().f32const(0.0);
    let in_plane = product(b, in_ext);
    kernel::dynamic_loop(b, rows, |b, i| {
        let p = b.ins().iadd(p0, i);
        let coords = unflatten(b, p, out_ext);
        // Each axis's first input coordinate of the window (may be negative).
        let starts: Vec<Value> = (0..sp)
            .map(|a| {
                let s = b.ins().imul_imm_s(coords[a], win.strides[a] as i64);
                b.ins().iadd_imm_s(s, -(win.pads[a] as i64))
            })
            .collect();
        let column = kernel::elem_addr(b, patches, i, F32);
        for t in 0..taps {
            // The tap's offset along each axis.
            let mut rest = t;
            let mut offs = vec![0; sp];
            for a in (0..sp).rev() {
                offs[a] = (rest % win.kernel[a]) * win.dilations[a];
                rest /= win.kernel[a];
            }
            let mut inside = None;
            let mut flat = kernel::iconst(b, 0);
            for a in 0..sp {
                let at = b.ins().iadd_imm_s(starts[a], offs[a] as i64);
                let ok = b.ins().icmp(IntCC::UnsignedLessThan, at, in_ext[a]);
                inside = Some(match inside {
                    None => ok,
                    Some(prev) => b.ins().band(prev, ok),
                });
                let f = b.ins().imul(flat, in_ext[a]);
                flat = b.ins().iadd(f, at);
            }
            let inside = inside.expect("at least one axis");
            // Outside the plane, read its first element instead (then zeroed).
            let zero_i = kernel::iconst(b, 0);
            let flat = b.ins().select(inside, flat, zero_i);
            kernel::counted_loop(b, 0, channels as i64, 1, |b, ch| {
                let plane = b.ins().imul(ch, in_plane);
                let idx = b.ins().iadd(plane, flat);
                let src = kernel::elem_addr(b, x, idx, F32);
                let v = b.ins().load(types::F32, flags(), src, 0);
                let v = b.ins().select(inside, v, zero);
                let row = b.ins().imul_imm_s(ch, taps as i64);
                let row = b.ins().iadd_imm_s(row, t as i64);
                let dst = kernel::elem_addr(b, column, row, block * F32);
                b.ins().store(flags(), v, dst, 0);
            });
        }
    });
}

fn pool(ctx: &mut LowerCtx, p: &PoolAttrs, plan: &PlanesPlan, src: &PlaneSource) -> LowerResult {
    let x = ctx.input(0)?;
    let y = ctx.output(0);
    let sp = p.kernel.len();
    if x.ty.rank() != sp + 2 || x.ty.dtype != crate::ir::DType::F32 {
        return Err("a pool on run-time planes reads float32 N×C×spatial".into());
    }
    let (average, include_pad) = match p.kind {
        PoolKind::Max => (false, false),
        PoolKind::Average { count_include_pad } => (true, count_include_pad),
        PoolKind::Lp { .. } => return Err("LpPool does not run on run-time planes".into()),
    };
    let b = &mut *ctx.b;
    let planes = src.batch(b, &x.ty).scale(b, x.ty.shape[1]);
    let in_ext = extents(b, src, &x.ty, 2);
    let in_plane = product(b, &in_ext);
    let global = plan.output.iter().all(Option::is_none) && y.ty.shape[2..].iter().all(|&d| d == 1);
    if global {
        // The whole plane: one sum or maximum per channel.
        run_shape::run_loop(b, planes, |b, c| {
            let base = b.ins().imul(c, in_plane);
            let src = kernel::elem_addr(b, x.ptr, base, F32);
            let init = if average { 0.0 } else { f32::NEG_INFINITY };
            let acc = accumulate(b, src, in_plane, average, init);
            let v = if average {
                let n = b.ins().fcvt_from_uint(types::F32, in_plane);
                b.ins().fdiv(acc, n)
            } else {
                acc
            };
            let dst = kernel::elem_addr(b, y.ptr, c, F32);
            b.ins().store(flags(), v, dst, 0);
        });
        return Ok(());
    }
    let out_ext = extents(b, src, &y.ty, 2);
    let positions = product(b, &out_ext);
    let win = Window {
        kernel: p.kernel.clone(),
        strides: p.strides.clone(),
        dilations: p.dilations.clone(),
        pads: p.pads[..sp].to_vec(),
        pads_end: p.pads[sp..].to_vec(),
    };
    let taps: usize = p.kernel.iter().product();
    run_shape::run_loop(b, planes, |b, c| {
        let base = b.ins().imul(c, in_plane);
        let src = kernel::elem_addr(b, x.ptr, base, F32);
        let out_base = b.ins().imul(c, positions);
        let dst = kernel::elem_addr(b, y.ptr, out_base, F32);
        kernel::dynamic_loop(b, positions, |b, pos| {
            let coords = unflatten(b, pos, &out_ext);
            let init = if average { 0.0 } else { f32::NEG_INFINITY };
            let mut acc = b.ins().f32const(init);
            let mut inside_count = kernel::iconst(b, 0);
            for t in 0..taps {
                let mut rest = t;
                let mut offs = vec![0; sp];
                for a in (0..sp).rev() {
                    offs[a] = (rest % win.kernel[a]) * win.dilations[a];
                    rest /= win.kernel[a];
                }
                let mut inside = None;
                let mut flat = kernel::iconst(b, 0);
                for a in 0..sp {
                    let s = b.ins().imul_imm_s(coords[a], win.strides[a] as i64);
                    let at = b.ins().iadd_imm_s(s, offs[a] as i64 - win.pads[a] as i64);
                    let ok = b.ins().icmp(IntCC::UnsignedLessThan, at, in_ext[a]);
                    inside = Some(match inside {
                        None => ok,
                        Some(prev) => b.ins().band(prev, ok),
                    });
                    let f = b.ins().imul(flat, in_ext[a]);
                    flat = b.ins().iadd(f, at);
                }
                let inside = inside.expect("at least one axis");
                let zero_i = kernel::iconst(b, 0);
                let flat = b.ins().select(inside, flat, zero_i);
                let at = kernel::elem_addr(b, src, flat, F32);
                let v = b.ins().load(types::F32, flags(), at, 0);
                acc = if average {
                    let z = b.ins().f32const(0.0);
                    let v = b.ins().select(inside, v, z);
                    b.ins().fadd(acc, v)
                } else {
                    let m = b.ins().fmax(acc, v);
                    b.ins().select(inside, m, acc)
                };
                let one = b.ins().uextend(types::I64, inside);
                inside_count = b.ins().iadd(inside_count, one);
            }
            let v = if !average {
                acc
            } else {
                let n = if include_pad {
                    // Pads count, the window past the padded plane does not.
                    padded_window_count(b, &win, &coords, &in_ext)
                } else {
                    inside_count
                };
                let n = b.ins().fcvt_from_uint(types::F32, n);
                b.ins().fdiv(acc, n)
            };
            let d = kernel::elem_addr(b, dst, pos, F32);
            b.ins().store(flags(), v, d, 0);
        });
    });
    Ok(())
}

/// Taps of the window at `coords` inside the padded plane (count_include_pad): per
/// axis, those within `[-pad_begin, extent + pad_end)`.
fn padded_window_count(
    b: &mut FunctionBuilder,
    win: &Window,
    coords: &[Value],
    in_ext: &[Value],
) -> Value {
    let mut total = kernel::iconst(b, 1);
    for a in 0..win.kernel.len() {
        let mut n = kernel::iconst(b, 0);
        for t in 0..win.kernel[a] {
            let s = b.ins().imul_imm_s(coords[a], win.strides[a] as i64);
            // Shifted by the pad so the padded plane starts at 0.
            let at = b.ins().iadd_imm_s(s, (t * win.dilations[a]) as i64);
            let end = b
                .ins()
                .iadd_imm_s(in_ext[a], (win.pads[a] + win.pads_end[a]) as i64);
            let ok = b.ins().icmp(IntCC::SignedLessThan, at, end);
            let one = b.ins().uextend(types::I64, ok);
            n = b.ins().iadd(n, one);
        }
        total = b.ins().imul(total, n);
    }
    total
}

/// The sum (`sum`) or maximum of `n` floats at `src`, from `init`.
fn accumulate(b: &mut FunctionBuilder, src: Value, n: Value, sum: bool, init: f32) -> Value {
    let acc_var = b.declare_var(types::F32);
    let init = b.ins().f32const(init);
    b.def_var(acc_var, init);
    // Sums: sixteen floats per step into four f32x4 accumulators (a global pool over a
    // plane's every float ran one dependent add per float), folded into one, then
    // the rest one at a time.
    let done = if sum {
        let zero = b.ins().f32const(0.0);
        let zero4 = b.ins().splat(types::F32X4, zero);
        let vars: Vec<_> = (0..4)
            .map(|_| {
                let v = b.declare_var(types::F32X4);
                b.def_var(v, zero4);
                v
            })
            .collect();
        let steps = b.ins().ushr_imm_u(n, 4);
        kernel::dynamic_loop(b, steps, |b, i| {
            let at = kernel::elem_addr(b, src, i, 16 * F32);
            for (k, &v) in vars.iter().enumerate() {
                let x = b
                    .ins()
                    .load(types::F32X4, flags(), at, (k * 4 * F32) as i32);
                let acc = b.use_var(v);
                let next = b.ins().fadd(acc, x);
                b.def_var(v, next);
            }
        });
        let mut total = b.use_var(vars[0]);
        for &v in &vars[1..] {
            let x = b.use_var(v);
            total = b.ins().fadd(total, x);
        }
        let mut sum = b.use_var(acc_var);
        for lane in 0..4 {
            let x = b.ins().extractlane(total, lane);
            sum = b.ins().fadd(sum, x);
        }
        b.def_var(acc_var, sum);
        b.ins().ishl_imm_u(steps, 4)
    } else {
        kernel::iconst(b, 0)
    };
    kernel::range_loop(b, done, n, |b, i| {
        let at = kernel::elem_addr(b, src, i, F32);
        let v = b.ins().load(types::F32, flags(), at, 0);
        let acc = b.use_var(acc_var);
        let next = if sum {
            b.ins().fadd(acc, v)
        } else {
            let gt = b.ins().fcmp(FloatCC::GreaterThan, v, acc);
            b.ins().select(gt, v, acc)
        };
        b.def_var(acc_var, next);
    });
    b.use_var(acc_var)
}

/// A plane copied into scratch with a border (see [`pad_plane`]).
struct PaddedPlane {
    /// Bytes from one padded row to the next.
    row_bytes: Value,
    /// Bytes from a row's start to each of its column phases.
    phase_bytes: Vec<Value>,
}

impl PaddedPlane {
    /// Per window row `ky` of output row `oy`, per phase: the address of the phase's
    /// first float. The tap at column `kx` of output column `ox` is then float
    /// `ox + (kx·dx) div s` of phase `(kx·dx) mod s`: four adjacent outputs read four
    /// adjacent floats at any stride.
    fn window_rows(
        &self,
        b: &mut FunctionBuilder,
        base: Value,
        oy: Value,
        (kh, sy, dy): (usize, usize, usize),
    ) -> Vec<Vec<Value>> {
        (0..kh)
            .map(|ky| {
                let r = b.ins().imul_imm_s(oy, sy as i64);
                let r = b.ins().iadd_imm_s(r, (ky * dy) as i64);
                let r = b.ins().imul(r, self.row_bytes);
                let row = b.ins().iadd(base, r);
                (self.phase_bytes.iter())
                    .map(|&p| b.ins().iadd(row, p))
                    .collect()
            })
            .collect()
    }
}

/// How a node copies its input planes into bordered copies (see [`pad_plane`]): the
/// machine-code kernel of the plan's `phase_copy` (the border filled once per copy's
/// place, [`PlaneCopier::fill_border`], each plane then copied into the interior), or
/// Cranelift's [`pad_plane`].
struct PlaneCopier {
    /// The kernel and its counts (`kernels::x86::plane_phases`) on the stack.
    kernel: Option<(FuncRef, Value)>,
    extents: (Value, Value),
    pads: Vec<usize>,
    phases: usize,
    fill: f32,
    /// Where the copy puts the plane.
    layout: PaddedPlane,
}

impl PlaneCopier {
    fn define(ctx: &mut LowerCtx, plan: &PlanesPlan) -> Result<Option<FuncRef>, String> {
        match &plan.phase_copy {
            Some(spec) => Ok(Some(gemm::define_machine_code(
                ctx,
                3,
                &plane_phases::emit(spec)?,
            )?)),
            None => Ok(None),
        }
    }

    fn new(
        b: &mut FunctionBuilder,
        kernel: Option<FuncRef>,
        (h, w): (Value, Value),
        pads: &[usize],
        phases: usize,
        fill: f32,
    ) -> PlaneCopier {
        let layout = padded_layout(b, w, pads, phases);
        let kernel = kernel.map(|k| {
            let slot = StackSlotData::new(StackSlotKind::ExplicitSlot, 48, 3);
            let counts = b.create_sized_stack_slot(slot);
            let counts = b.ins().stack_addr(kernel::PTR, counts, 0);
            let phase_bytes = layout.phase_bytes[phases - 1];
            for (at, v) in [(0, h), (8, w), (32, layout.row_bytes), (40, phase_bytes)] {
                b.ins().store(flags(), v, counts, at);
            }
            (k, counts)
        });
        PlaneCopier {
            kernel,
            extents: (h, w),
            pads: pads.to_vec(),
            phases,
            fill,
            layout,
        }
    }

    /// Fills the whole bordered copy at `dst` with the border's value, once before the
    /// kernel copies planes there (Cranelift's copy writes every border itself).
    fn fill_border(&self, b: &mut FunctionBuilder, dst: Value) {
        if self.kernel.is_some() {
            fill_bordered(b, dst, self.extents.0, &self.pads, &self.layout, self.fill);
        }
    }

    /// Copies the plane at `src` into the bordered copy at `dst` (at `self.layout`).
    fn copy(&self, b: &mut FunctionBuilder, src: Value, dst: Value) {
        match self.kernel {
            Some((kernel, counts)) => {
                b.ins().call(kernel, &[src, dst, counts]);
            }
            None => {
                pad_plane(
                    b,
                    src,
                    self.extents,
                    &self.pads,
                    self.phases,
                    dst,
                    self.fill,
                );
            }
        }
    }
}

/// Fills the whole bordered copy (`layout`) of a plane `h` rows high at `dst` with
/// `fill`: its border, once, before a kernel copies planes into its interior.
fn fill_bordered(
    b: &mut FunctionBuilder,
    dst: Value,
    h: Value,
    pads: &[usize],
    layout: &PaddedPlane,
    fill: f32,
) {
    let rows = b.ins().iadd_imm_s(h, (pads[0] + pads[2]) as i64);
    let bytes = b.ins().imul(rows, layout.row_bytes);
    let floats = b.ins().ushr_imm_u(bytes, 2);
    fill_plane(b, dst, floats, fill);
}

/// Copies plane `src` (`h × w`) into `dst` with `pads` `[top, left, bottom, right]`
/// of `fill` around it, each padded row stored as `phases` runs: phase `p` holds the
/// padded columns `p, p + phases, p + 2·phases, …` (one run, the row itself, at
/// `phases` 1). A strided window's taps then read consecutive floats.
fn pad_plane(
    b: &mut FunctionBuilder,
    src: Value,
    (h, w): (Value, Value),
    pads: &[usize],
    phases: usize,
    dst: Value,
    fill: f32,
) -> PaddedPlane {
    let (top, left, bottom) = (pads[0], pads[1], pads[2]);
    let (phase_w, row_w) = padded_row(b, w, pads, phases);
    let ph = b.ins().iadd_imm_s(h, (top + bottom) as i64);
    let fill_row = |b: &mut FunctionBuilder, at: Value, from: Value, to: Value| {
        let n = b.ins().isub(to, from);
        let start = kernel::elem_addr(b, at, from, F32);
        fill_plane(b, start, n, fill);
    };
    let zero = kernel::iconst(b, 0);
    let border_rows = |b: &mut FunctionBuilder, from: Value, to: Value| {
        kernel::range_loop(b, from, to, |b, r| {
            let row = b.ins().imul(r, row_w);
            let at = kernel::elem_addr(b, dst, row, F32);
            fill_row(b, at, zero, row_w);
        });
    };
    let top_v = kernel::iconst(b, top as i64);
    border_rows(b, zero, top_v);
    kernel::dynamic_loop(b, h, |b, r| {
        let pr = b.ins().iadd_imm_s(r, top as i64);
        let row = b.ins().imul(pr, row_w);
        let at = kernel::elem_addr(b, dst, row, F32);
        let src_row = b.ins().imul(r, w);
        let src_at = kernel::elem_addr(b, src, src_row, F32);
        if phases == 1 {
            let left_v = kernel::iconst(b, left as i64);
            fill_row(b, at, zero, left_v);
            let inside = b.ins().iadd_imm_s(at, (left * F32) as i64);
            copy_run(b, inside, src_at, zero, w);
            let end = b.ins().iadd_imm_s(w, left as i64);
            fill_row(b, at, end, row_w);
        } else {
            // The border columns are spread over the phases: fill the whole row, then
            // place each input column at its phase.
            fill_row(b, at, zero, row_w);
            let scattered = if phases == 2 {
                deinterleave_pairs(b, src_at, w, at, (left, phase_w))
            } else {
                kernel::iconst(b, 0)
            };
            kernel::range_loop(b, scattered, w, |b, j| {
                let s = kernel::elem_addr(b, src_at, j, F32);
                let v = b.ins().load(types::F32, flags(), s, 0);
                let col = b.ins().iadd_imm_s(j, left as i64);
                let phase = b.ins().urem_imm_u(col, phases as i64);
                let index = b.ins().udiv_imm_u(col, phases as i64);
                let at_phase = b.ins().imul(phase, phase_w);
                let d = b.ins().iadd(at_phase, index);
                let d = kernel::elem_addr(b, at, d, F32);
                b.ins().store(flags(), v, d, 0);
            });
        }
    });
    let bottom_from = b.ins().iadd_imm_s(h, top as i64);
    border_rows(b, bottom_from, ph);
    padded_layout(b, w, pads, phases)
}

/// Floats per phase and per row of a plane `w` wide padded by `pads` into `phases`
/// column phases (see [`pad_plane`]).
fn padded_row(b: &mut FunctionBuilder, w: Value, pads: &[usize], phases: usize) -> (Value, Value) {
    let pw = b.ins().iadd_imm_s(w, (pads[1] + pads[3]) as i64);
    let phase_w = b.ins().iadd_imm_s(pw, phases as i64 - 1);
    let phase_w = b.ins().udiv_imm_u(phase_w, phases as i64);
    let row_w = b.ins().imul_imm_s(phase_w, phases as i64);
    (phase_w, row_w)
}

/// The layout [`pad_plane`] writes a plane `w` wide in.
fn padded_layout(b: &mut FunctionBuilder, w: Value, pads: &[usize], phases: usize) -> PaddedPlane {
    let (phase_w, row_w) = padded_row(b, w, pads, phases);
    let row_bytes = b.ins().imul_imm_s(row_w, F32 as i64);
    let phase_stride = b.ins().imul_imm_s(phase_w, F32 as i64);
    let phase_bytes = (0..phases as i64)
        .map(|p| b.ins().imul_imm_s(phase_stride, p))
        .collect();
    PaddedPlane {
        row_bytes,
        phase_bytes,
    }
}

/// Stride-2 phases of one padded row: input columns `0..8·⌊w/8⌋` of `src` (eight at a
/// time, split into evens and odds by two shuffles) to row `row`, whose phases are
/// `phase_w` floats long, column `j` landing at padded column `j + left`. Returns the
/// columns done.
fn deinterleave_pairs(
    b: &mut FunctionBuilder,
    src: Value,
    w: Value,
    row: Value,
    (left, phase_w): (usize, Value),
) -> Value {
    let phase_bytes = b.ins().imul_imm_s(phase_w, F32 as i64);
    // Even input columns land in phase `left mod 2` from float `left div 2`, odd ones
    // in the other phase from float `(left + 1) div 2`.
    let at_phase = |b: &mut FunctionBuilder, phase: usize, first: usize| {
        let p = b.ins().imul_imm_s(phase_bytes, phase as i64);
        let p = b.ins().iadd(row, p);
        b.ins().iadd_imm_s(p, (first * F32) as i64)
    };
    let evens_at = at_phase(b, left % 2, left / 2);
    let odds_at = at_phase(b, (left + 1) % 2, left.div_ceil(2));
    let octets = b.ins().ushr_imm_u(w, 3);
    kernel::dynamic_loop(b, octets, |b, o| {
        let s = kernel::elem_addr(b, src, o, 8 * F32);
        let lo = b.ins().load(types::F32X4, flags(), s, 0);
        let hi = b.ins().load(types::F32X4, flags(), s, (4 * F32) as i32);
        let evens = crate::codegen::math::pick_lanes(b, lo, hi, [0, 2, 4, 6]);
        let odds = crate::codegen::math::pick_lanes(b, lo, hi, [1, 3, 5, 7]);
        let d = kernel::elem_addr(b, evens_at, o, 4 * F32);
        b.ins().store(flags(), evens, d, 0);
        let d = kernel::elem_addr(b, odds_at, o, 4 * F32);
        b.ins().store(flags(), odds, d, 0);
    });
    b.ins().ishl_imm_u(octets, 3)
}

/// Max pool of 2-D windows: per plane, a copy with a -inf border, then each window's
/// maximum without bounds checks.
fn max_pool_2d(
    ctx: &mut LowerCtx,
    p: &PoolAttrs,
    plan: &PlanesPlan,
    src: &PlaneSource,
) -> LowerResult {
    if let Some(spec) = &plan.max_pool {
        return max_pool_2d_kernel(ctx, spec, src);
    }
    let x = ctx.input(0)?;
    let y = ctx.output(0);
    let scratch = ctx.scratch.ok_or("a max pool on planes needs scratch")?;
    let copy_kernel = PlaneCopier::define(ctx, plan)?;
    let b = &mut *ctx.b;
    let planes = src.batch(b, &x.ty).scale(b, x.ty.shape[1]);
    let in_ext = extents(b, src, &x.ty, 2);
    let out_ext = extents(b, src, &y.ty, 2);
    let in_plane = product(b, &in_ext);
    let positions = product(b, &out_ext);
    let (kh, kw) = (p.kernel[0], p.kernel[1]);
    let (sy, sx) = (p.strides[0], p.strides[1]);
    let (dy, dx) = (p.dilations[0], p.dilations[1]);
    let pads = pool_pads(p);
    let copier = PlaneCopier::new(
        b,
        copy_kernel,
        (in_ext[0], in_ext[1]),
        &pads,
        sx,
        f32::NEG_INFINITY,
    );
    copier.fill_border(b, scratch);
    run_shape::run_loop(b, planes, |b, c| {
        let base = b.ins().imul(c, in_plane);
        let src = kernel::elem_addr(b, x.ptr, base, F32);
        copier.copy(b, src, scratch);
        let plane = &copier.layout;
        let out_base = b.ins().imul(c, positions);
        let dst = kernel::elem_addr(b, y.ptr, out_base, F32);
        kernel::dynamic_loop(b, out_ext[0], |b, oy| {
            let rows = plane.window_rows(b, scratch, oy, (kh, sy, dy));
            let out_row = b.ins().imul(oy, out_ext[1]);
            let out_row = kernel::elem_addr(b, dst, out_row, F32);
            // `n` adjacent outputs (scalars) or vectors of four from `ox`, each window's
            // maximum taken as a tree: a chain of maxima ran at their latency.
            let outputs = |b: &mut FunctionBuilder, ox: Value, ty: types::Type, n: usize| {
                let step = ty.bytes() as usize;
                let col = b.ins().imul_imm_s(ox, F32 as i64);
                let d = kernel::elem_addr(b, out_row, ox, F32);
                for u in 0..n {
                    let mut taps = vec![];
                    for phases in &rows {
                        for kx in 0..kw {
                            let (phase, index) = ((kx * dx) % sx, (kx * dx) / sx);
                            let at = b.ins().iadd(phases[phase], col);
                            let off = (index * F32 + u * step) as i32;
                            taps.push(b.ins().load(ty, flags(), at, off));
                        }
                    }
                    while taps.len() > 1 {
                        taps = taps
                            .chunks(2)
                            .map(|p| match p {
                                [x, y] => b.ins().fmax(*x, *y),
                                [x] => *x,
                                _ => unreachable!("chunks of two"),
                            })
                            .collect();
                    }
                    b.ins().store(flags(), taps[0], d, (u * step) as i32);
                }
            };
            let wide = b.ins().ushr_imm_u(out_ext[1], 4);
            kernel::dynamic_loop(b, wide, |b, i| {
                let ox = b.ins().ishl_imm_u(i, 4);
                outputs(b, ox, types::F32X4, 4);
            });
            let from = b.ins().ishl_imm_u(wide, 2);
            let quads = b.ins().ushr_imm_u(out_ext[1], 2);
            kernel::range_loop(b, from, quads, |b, i| {
                let ox = b.ins().ishl_imm_u(i, 2);
                outputs(b, ox, types::F32X4, 1);
            });
            let done = b.ins().ishl_imm_u(quads, 2);
            kernel::range_loop(b, done, out_ext[1], |b, ox| outputs(b, ox, types::F32, 1));
        });
    });
    Ok(())
}

/// Max pool of 2-D windows by the machine-code kernel (`kernels::x86::maxpool_plane`):
/// one call for every plane of the batch, the node's scratch its row buffer.
fn max_pool_2d_kernel(
    ctx: &mut LowerCtx,
    (spec, row_floats): &(MaxPoolPlaneSpec, usize),
    src: &PlaneSource,
) -> LowerResult {
    let x = ctx.input(0)?;
    let y = ctx.output(0);
    let scratch = ctx.scratch.ok_or("a max pool on planes needs scratch")?;
    let code = maxpool_plane::emit(spec, *row_floats)?;
    let pool = gemm::define_machine_code(ctx, 4, &code)?;
    let b = &mut *ctx.b;
    let planes = src.batch(b, &x.ty).scale(b, x.ty.shape[1]);
    let planes = planes.value(b);
    let in_ext = extents(b, src, &x.ty, 2);
    let out_ext = extents(b, src, &y.ty, 2);
    let in_row = b.ins().imul_imm_s(in_ext[1], F32 as i64);
    let window_row = b.ins().imul_imm_s(in_row, spec.dilations[0] as i64);
    let in_plane = b.ins().imul(in_row, in_ext[0]);
    let fields = [
        planes, in_ext[0], in_ext[1], out_ext[0], out_ext[1], in_row, window_row, in_plane,
    ];
    let slot = StackSlotData::new(StackSlotKind::ExplicitSlot, (8 * fields.len()) as u32, 3);
    let counts = b.create_sized_stack_slot(slot);
    let counts = b.ins().stack_addr(kernel::PTR, counts, 0);
    for (i, v) in fields.into_iter().enumerate() {
        b.ins().store(flags(), v, counts, (8 * i) as i32);
    }
    b.ins().call(pool, &[x.ptr, y.ptr, counts, scratch]);
    Ok(())
}

/// A depthwise 2-D conv: per channel, the plane copied into a zero border, then each
/// output's taps multiplied and added (four outputs at a time at stride 1), plus the
/// bias, the residual and the activation.
fn depthwise_conv(
    ctx: &mut LowerCtx,
    c: &ConvAttrs,
    plan: &PlanesPlan,
    src: &PlaneSource,
) -> LowerResult {
    let (
        ConvIo {
            x,
            bias,
            residual,
            y,
        },
        weights,
    ) = conv_operands(ctx, "a depthwise conv")?;
    let w_ptr = ctx.weights_f32(&weights)?;
    let fma = gemm::has_fma(ctx.target);
    let scratch = ctx
        .scratch
        .ok_or("a depthwise conv on planes needs scratch")?;
    let channels = x.ty.shape[1];
    let batch = src.batch(ctx.b, &x.ty);
    let (kh, kw) = (c.kernel[0], c.kernel[1]);
    let taps = kh * kw;
    let (sy, sx) = (c.strides[0], c.strides[1]);
    let (dy, dx) = (c.dilations[0], c.dilations[1]);
    let act = c.activation;
    let rows_kernel = match &plan.depthwise_rows {
        Some(spec) => Some(gemm::define_machine_code(
            ctx,
            6,
            &dwconv_rows::emit(spec)?,
        )?),
        None => None,
    };
    let b = &mut *ctx.b;
    let in_ext = extents(b, src, &x.ty, 2);
    let out_ext = extents(b, src, &y.ty, 2);
    let in_plane = product(b, &in_ext);
    let positions = product(b, &out_ext);
    if let Some(kernel) = rows_kernel {
        let layout = padded_layout(b, in_ext[1], &c.pads, sx);
        let counts =
            b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 56, 3));
        let counts = b.ins().stack_addr(kernel::PTR, counts, 0);
        for (k, v) in [
            in_ext[0],
            in_ext[1],
            out_ext[0],
            out_ext[1],
            layout.row_bytes,
            layout.phase_bytes[sx - 1],
        ]
        .into_iter()
        .enumerate()
        {
            b.ins().store(flags(), v, counts, (k * 8) as i32);
        }
        // The border, zero for every channel: the kernel copies only the inside.
        fill_bordered(b, scratch, in_ext[0], &c.pads, &layout, 0.0);
        let null = kernel::iconst(b, 0);
        let planes = batch.scale(b, channels);
        run_shape::run_loop(b, planes, |b, nc| {
            let ch = b.ins().urem_imm_u(nc, channels as i64);
            let base = b.ins().imul(nc, in_plane);
            let src = kernel::elem_addr(b, x.ptr, base, F32);
            let out_base = b.ins().imul(nc, positions);
            let dst = kernel::elem_addr(b, y.ptr, out_base, F32);
            let res = residual
                .as_ref()
                .map_or(null, |r| kernel::elem_addr(b, r.ptr, out_base, F32));
            let w_c = kernel::elem_addr(b, w_ptr, ch, taps * F32);
            if let Some(t) = &bias {
                let at = kernel::elem_addr(b, t.ptr, ch, F32);
                b.ins().store(flags(), at, counts, 48);
            }
            b.ins().call(kernel, &[src, scratch, w_c, dst, res, counts]);
        });
        return Ok(());
    }
    let mut failure = None;
    let planes = batch.scale(b, channels);
    run_shape::run_loop(b, planes, |b, nc| {
        let ch = b.ins().urem_imm_u(nc, channels as i64);
        let base = b.ins().imul(nc, in_plane);
        let src = kernel::elem_addr(b, x.ptr, base, F32);
        let plane = pad_plane(b, src, (in_ext[0], in_ext[1]), &c.pads, sx, scratch, 0.0);
        let out_base = b.ins().imul(nc, positions);
        let dst = kernel::elem_addr(b, y.ptr, out_base, F32);
        let res = residual
            .as_ref()
            .map(|r| kernel::elem_addr(b, r.ptr, out_base, F32));
        let w_c = kernel::elem_addr(b, w_ptr, ch, taps * F32);
        // A 3×3 kernel's weights stay in registers; more (a 5×5's 25) spilled, and are
        // loaded per use instead (a broadcast from L1).
        let held: Option<Vec<Value>> = (taps <= 9).then(|| {
            (0..taps)
                .map(|t| b.ins().load(types::F32, flags(), w_c, (t * F32) as i32))
                .collect()
        });
        let bias_v = match &bias {
            Some(t) => {
                let at = kernel::elem_addr(b, t.ptr, ch, F32);
                b.ins().load(types::F32, flags(), at, 0)
            }
            None => b.ins().f32const(0.0),
        };
        kernel::dynamic_loop(b, out_ext[0], |b, oy| {
            let rows = plane.window_rows(b, scratch, oy, (kh, sy, dy));
            let out_row = b.ins().imul(oy, out_ext[1]);
            // One output (scalar) or four (vectors) at `ox`.
            // `n` adjacent outputs (scalars) or vectors of four from `ox`: independent
            // accumulators, so the taps' multiply-adds do not wait on each other (one
            // vector at a time ran at the FMA's latency, 4× slower).
            // With `tail`, one vector of which only the first `tail` (1 to 3) outputs
            // are in the row: every lane is computed (the padded plane has the columns
            // and slack after its last row), only those are stored.
            let mut outputs = |b: &mut FunctionBuilder,
                               ox: Value,
                               ty: types::Type,
                               n: usize,
                               tail: Option<Value>| {
                let splat = |b: &mut FunctionBuilder, v: Value| {
                    if ty == types::F32 {
                        v
                    } else {
                        b.ins().splat(ty, v)
                    }
                };
                let step = ty.bytes() as usize;
                let col = b.ins().imul_imm_s(ox, F32 as i64);
                let init = splat(b, bias_v);
                let mut acc = vec![init; n];
                for (ky, phases) in rows.iter().enumerate() {
                    for kx in 0..kw {
                        let (phase, index) = ((kx * dx) % sx, (kx * dx) / sx);
                        let at = b.ins().iadd(phases[phase], col);
                        let t = ky * kw + kx;
                        let wt = match &held {
                            Some(ws) => ws[t],
                            None => b.ins().load(types::F32, flags(), w_c, (t * F32) as i32),
                        };
                        let wv = splat(b, wt);
                        for (u, a) in acc.iter_mut().enumerate() {
                            let off = (index * F32 + u * step) as i32;
                            let v = b.ins().load(ty, flags(), at, off);
                            *a = gemm::mul_add(b, fma, wv, v, *a);
                        }
                    }
                }
                let pos = b.ins().iadd(out_row, ox);
                let res_at = res.map(|r| kernel::elem_addr(b, r, pos, F32));
                let d = kernel::elem_addr(b, dst, pos, F32);
                if let Some(valid) = tail {
                    for lane in 0..3u8 {
                        let inside =
                            b.ins()
                                .icmp_imm_s(IntCC::SignedGreaterThan, valid, lane as i64);
                        let off = lane as i32 * F32 as i32;
                        let mut v = b.ins().extractlane(acc[0], lane);
                        kernel::if_else(
                            b,
                            inside,
                            |b| {
                                if let Some(r) = res_at {
                                    let rv = b.ins().load(types::F32, flags(), r, off);
                                    v = b.ins().fadd(v, rv);
                                }
                                match crate::codegen::unary::activation(b, act, v) {
                                    Ok(a) => v = a,
                                    Err(e) => failure = Some(e),
                                }
                                b.ins().store(flags(), v, d, off);
                            },
                            |_| {},
                        );
                    }
                    return;
                }
                for (u, mut a) in acc.into_iter().enumerate() {
                    let off = (u * step) as i32;
                    if let Some(r) = res_at {
                        let rv = b.ins().load(ty, flags(), r, off);
                        a = b.ins().fadd(a, rv);
                    }
                    match crate::codegen::unary::activation(b, act, a) {
                        Ok(v) => a = v,
                        Err(e) => failure = Some(e),
                    }
                    b.ins().store(flags(), a, d, off);
                }
            };
            const UNROLL: usize = 4;
            let wide = b.ins().ushr_imm_u(out_ext[1], 4);
            kernel::dynamic_loop(b, wide, |b, i| {
                let ox = b.ins().ishl_imm_u(i, 4);
                outputs(b, ox, types::F32X4, UNROLL, None);
            });
            let from = b.ins().ishl_imm_u(wide, 2);
            let q = b.ins().ushr_imm_u(out_ext[1], 2);
            kernel::range_loop(b, from, q, |b, i| {
                let ox = b.ins().ishl_imm_u(i, 2);
                outputs(b, ox, types::F32X4, 1, None);
            });
            let quads = b.ins().ishl_imm_u(q, 2);
            let rest = b.ins().isub(out_ext[1], quads);
            let some = b.ins().icmp_imm_s(IntCC::SignedGreaterThan, rest, 0);
            kernel::if_else(
                b,
                some,
                |b| outputs(b, quads, types::F32X4, 1, Some(rest)),
                |_| {},
            );
        });
    });
    failure.map_or(Ok(()), Err)
}
