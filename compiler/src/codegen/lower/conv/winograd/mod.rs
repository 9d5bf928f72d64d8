//! The Winograd path of Conv: 3×3, stride 1, dilation 1, 2-D, float32, one group,
//! constant weights, computed as F(m×m, 3×3) (Lavin & Gray, "Fast Algorithms for
//! Convolutional Neural Networks", 2015): every m×m block of outputs ("tile") comes
//! from an (m+2)×(m+2) block of the padded input `d` as `Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A`.
//! Summed over input channels, the element-wise products become (m+2)² independent
//! GEMMs `M_ξν[maps, tiles] = U_ξν[maps, channels] · V_ξν[channels, tiles]`, with
//! `U = G g Gᵀ` transformed and packed at compile time. F(4×4, 3×3) does 36 products
//! per 16 outputs where the direct conv does 144: 4× fewer multiplications, which is
//! why ResNet's 3×3 convs (70% of its time as implicit GEMM) go through here.
//!
//! Code shape, per batch:
//! 1. the input is copied zero-padded (as for im2col) to `hp × m·lp` floats per channel,
//!    then split into its m column phases, `X[c][row][p][j] = P[c][row][j·m + p]`, so
//!    the inputs of four horizontally adjacent tiles at column offset `s` are four
//!    consecutive floats (phase `s mod m`, from `j = s div m`);
//! 2. the input transform writes `V_ξν[c][t]` four tiles (one f32x4) at a time, tiles
//!    numbered row-major, each V row `ts` floats long;
//! 3. (m+2)² calls of one GEMM kernel (the x86 machine-code kernel where the target
//!    has one) compute `M_ξν = U_ξν · V_ξν`;
//! 4. the output transform reads four tiles of `M`, applies `Aᵀ · A`, transposes the
//!    result into rows of output, adds bias and residual, applies the activation and
//!    stores into the NCHW output.
//!
//! On x86 targets, for tile rows of more than 4 tiles, steps 2 and 4 are machine code
//! (`lower/winograd_x86.rs`) with 16 (AVX-512) or 8 tiles per vector; the plan's phase
//! rows and V/M rows are then sized for that width. On AVX-512, F(2×2) convs of at most
//! 16 tiles (8×8 maps) skip steps 1 and 3's general forms: whole-plane kernels
//! (`lower/winograd_plane_x86.rs`) transform a channel's 16 tiles as one zmm straight
//! from the unpadded input and compute the 16 products in one call.
//!
//! Vectors always run across consecutive tiles of one tile row (4 here); a group at the end
//! of a tile row spills into the next row's tiles. Writes to V go in increasing tile
//! order, so the next row's real values overwrite that spill, and V rows have lanes − 1
//! floats of slack for the last one; the output transform computes the spilled lanes and does
//! not store them.
//!
//! NaN and infinite inputs: the transforms mix every input of a tile's (m+2)² patch into
//! every output of the tile, so a NaN (or an ∞, through ∞ − ∞) makes all m² outputs of
//! each tile whose patch holds it NaN, where the direct convolution makes NaN only the
//! outputs whose 3×3 window holds it. Finite inputs are unaffected.
//!
//! Accuracy (numpy, float32 vs float64 direct conv, max |err| / max |ref|, ReLU inputs,
//! He-scaled weights): F(2×2) 2–4e-7, F(4×4) 2–6e-6 for 64–512 channels; the direct
//! conv is ~1e-7.

use crate::codegen::plan::conv::winograd::*;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;

use cranelift_codegen::ir::FuncRef;

use super::gemm::{self, ALayout, BLayout, GemmKernel, GemmSpec, Geometry, RunTimeStrides};
use super::{
    copy_padded, input_group, output_and_bias, ConvGeometry, ConvOperands, WinogradSplit,
    WinogradTransforms, F32,
};
use crate::codegen::isa::Vector;
use crate::codegen::kernel::{self, flags};
use crate::codegen::kernels::x86;
use crate::codegen::kernels::x86::winograd::TransformSpec;
use crate::codegen::kernels::x86::winograd_plane::PlaneSpec;
use crate::codegen::lower::{LowerCtx, LowerResult};
use crate::codegen::math;
use crate::ir::{Tensor, TensorType};
use crate::ops::{Activation, ConvAttrs};

mod by_maps;

/// `U_ξν = G g Gᵀ` for every (map, channel), each U_ξν packed as the GEMM's A.
fn transformed_weights(g: &ConvGeometry, alg: &Algorithm, w: &[f32], geom: &Geometry) -> Vec<f32> {
    let a = alg.a();
    let (maps, channels) = (g.mg, g.cg);
    let u = weight_transform(g, alg, w);
    let mut packed = Vec::with_capacity(u.len());
    for ab in 0..a * a {
        let mat = &u[ab * maps * channels..][..maps * channels];
        packed.extend(gemm::pack_a(geom, maps, channels, |i, k| {
            mat[i * channels + k]
        }));
    }
    packed
}

/// `U_ξν = G g Gᵀ` of a conv on run-time planes, each U_ξν packed as the GEMM's A.
pub(in crate::codegen::lower) fn weights_on_planes(
    c: &ConvAttrs,
    (x, w_ty, y): (&TensorType, &TensorType, &TensorType),
    alg: &'static Algorithm,
    w: &[f32],
    geom: &Geometry,
) -> Result<Vec<f32>, String> {
    let g = ConvGeometry::new(c, x, w_ty, y)?;
    Ok(transformed_weights(&g, alg, w, geom))
}

/// `u[ξν][map][channel]`, computed in f64.
fn weight_transform(g: &ConvGeometry, alg: &Algorithm, w: &[f32]) -> Vec<f32> {
    let a = alg.a();
    let (maps, channels) = (g.mg, g.cg);
    // u[ξν][map][channel], computed in f64.
    let mut u = vec![0f32; a * a * maps * channels];
    for mm in 0..maps {
        for c in 0..channels {
            let k = &w[(mm * channels + c) * 9..][..9];
            for xi in 0..a {
                for nu in 0..a {
                    let mut s = 0f64;
                    for i in 0..3 {
                        for j in 0..3 {
                            s += alg.g[xi][i] * k[i * 3 + j] as f64 * alg.g[nu][j];
                        }
                    }
                    u[((xi * a + nu) * maps + mm) * channels + c] = s as f32;
                }
            }
        }
    }
    u
}

/// The GEMM `M_ξν = U_ξν · V_ξν` of `plan`'s maps over `tiles` tiles (V and M rows of
/// `plan.ts` floats).
fn products_spec(plan: &Plan, geom: Geometry, tiles: usize) -> GemmSpec {
    GemmSpec {
        m: plan.maps,
        n: tiles,
        k: plan.channels,
        a: ALayout::Packed,
        b: BLayout::Rows {
            row_stride: plan.ts,
        },
        ldc: plan.ts,
        c_col_stride: 1,
        alpha: 1.0,
        addends: vec![],
        activation: Activation::None,
        geometry: geom,
        b_taps: vec![],
        rows_at_run_time: false,
        cols_at_run_time: false,
        run_time_strides: RunTimeStrides::None,
    }
}

/// The machine-code transforms' description of `rows` tile rows of `plan` (the conv's
/// last tile row among them when `last`).
fn transform_spec(
    g: &ConvGeometry,
    plan: &Plan,
    ops: &ConvOperands,
    isa: Vector,
    (rows, last): (usize, bool),
) -> TransformSpec {
    let m = plan.alg.m;
    TransformSpec {
        m,
        isa,
        channels: plan.channels,
        maps: plan.maps,
        rows,
        tw: plan.tw,
        groups: plan.groups,
        lp: plan.lp,
        channel_bytes: plan.hp * plan.wp() * F32,
        tile_row: false,
        ts: plan.ts,
        v_plane: plan.v_plane(),
        m_plane: plan.m_plane(),
        out_h: g.output[0],
        out_w: g.output[1],
        last_rows: match g.output[0] % m {
            r if last && r != 0 => r,
            _ => m,
        },
        bias: ops.bias.is_some(),
        residual: ops.residual.is_some(),
        activation: ops.activation,
    }
}

pub(super) fn conv_winograd(
    ctx: &mut LowerCtx,
    g: &ConvGeometry,
    ops: &ConvOperands,
    (m, transforms, split): (usize, WinogradTransforms, WinogradSplit),
    geom: Geometry,
) -> LowerResult {
    let alg = [&F2, &F4]
        .into_iter()
        .find(|a| a.m == m)
        .ok_or("Winograd has no F(m×m, 3×3) of this m")?;
    let x86 = match transforms {
        WinogradTransforms::Plane16 => {
            return conv_winograd_plane(ctx, g, alg, ops, &plane_spec(g, alg, ops));
        }
        WinogradTransforms::X86(isa) => Some(isa),
        WinogradTransforms::Clif => None,
    };
    if ctx.kernel.tasks > 1 && split.tasks() != ctx.kernel.tasks {
        return Err(format!(
            "the plan split this Winograd conv into {} tasks, its strategy into {}",
            ctx.kernel.tasks,
            split.tasks()
        ));
    }
    let Some(Tensor::F32(w)) = &ops.w.constant else {
        return Err("the Winograd path needs constant weights".into());
    };
    let w: Vec<f32> = w.iter().copied().collect();
    if let (WinogradSplit::Maps(split), true) = (split, ctx.kernel.tasks > 1) {
        return by_maps::conv(ctx, g, ops, (alg, x86), geom, &split, &w);
    }
    let plan = Plan::new(g, alg, x86.map_or(LANES, Vector::lanes));
    let u = transformed_weights(g, alg, &w, &geom);
    let u_ptr = ctx.weights_f32(&u)?;
    let scratch = super::scratch(ctx)?;
    // Chunks of `chunk_rows` or one fewer tile rows (see [`chunk_start`]), the last
    // one (which holds the last, maybe partial, tile row) emitted on its own.
    let (th, count) = (plan.th, plan.chunks);
    let rows_of = |c: usize| chunk_start(th, count, c + 1) - chunk_start(th, count, c);
    let last_rows = rows_of(count - 1);
    let loop_chunks = count - 1;
    let (long, short) = (plan.chunk_rows, th / count);
    let has_short = long != short && (0..loop_chunks).any(|c| rows_of(c) == short);
    let mut kernels = |rows: usize, last: bool| -> Result<ChunkKernels, String> {
        let gemm = GemmKernel::define(ctx, &products_spec(&plan, geom, rows * plan.tw))?;
        let transforms = match x86 {
            Some(isa) => {
                let t = transform_spec(g, &plan, ops, isa, (rows, last));
                let input = gemm::define_machine_code(ctx, 2, &x86::winograd::emit_input(&t)?)?;
                let output = gemm::define_machine_code(ctx, 4, &x86::winograd::emit_output(&t)?)?;
                Some([input, output])
            }
            None => None,
        };
        Ok(ChunkKernels { gemm, transforms })
    };
    let full_kernel = match (0..loop_chunks).any(|c| rows_of(c) == long) {
        false => None,
        true => Some(kernels(long, false)?),
    };
    let short_kernel = match has_short {
        false => None,
        true => Some(kernels(short, false)?),
    };
    let last_kernel = kernels(last_rows, true)?;
    let fma = gemm::has_fma(ctx.target);
    // The padded input and its phases come first in the scratch (with a pool, in the
    // node's shared scratch, made by the prologue), the chunk buffers after them (in
    // the task's own).
    let buffers = |b: &mut FunctionBuilder, shared: Value, own: Value| {
        let at = |b: &mut FunctionBuilder, base: Value, bytes: usize| {
            b.ins().iadd_imm_s(base, bytes as i64)
        };
        Buffers {
            padded: shared,
            phases: at(b, shared, plan.plane_bytes()),
            v: at(b, own, 2 * plan.plane_bytes()),
            mt: at(b, own, 2 * plan.plane_bytes() + plan.v_bytes()),
            stage: at(
                b,
                own,
                2 * plan.plane_bytes() + plan.v_bytes() + plan.m_bytes(),
            ),
            u: u_ptr,
        }
    };
    let prepare = |b: &mut FunctionBuilder, bufs: &Buffers, n: Value| {
        let zero = kernel::iconst(b, 0);
        let x_n = input_group(b, g, ops.x.ptr, n, zero, F32);
        copy_padded(
            b,
            x_n,
            &g.input,
            g.cg,
            bufs.padded,
            &[plan.hp, plan.wp()],
            &g.pad_begin,
        );
        split_phases(b, &plan, plan.channels, bufs.padded, bufs.phases);
    };
    let mut failure = None;
    // The chunks of image `n` from its prepared input: all of them, or one task's.
    let mut chunks = |b: &mut FunctionBuilder, bufs: &Buffers, n: Value, share| {
        let zero = kernel::iconst(b, 0);
        let (y, addends) = output_and_bias(b, g, ops, n, zero);
        let bias = ops.bias.as_ref().map(|_| addends[0]);
        let residual = ops.residual.as_ref().map(|_| addends[addends.len() - 1]);
        let out = OutputPtrs { y, bias, residual };
        kernel::chunk_loop(b, share, loop_chunks, true, |b, c, last| {
            let mut emit = |b: &mut FunctionBuilder, row0: Value, rows, k: &ChunkKernels| {
                let chunk = Chunk { row0, rows, last };
                if let Err(e) = chunk.emit(b, g, &plan, fma, bufs, k, out, ops.activation) {
                    failure = Some(e);
                }
            };
            if last {
                let row0 = kernel::iconst(b, chunk_start(th, count, count - 1) as i64);
                return emit(b, row0, last_rows, &last_kernel);
            }
            // Row c·th / count, and (with chunks of two sizes) its size from the next's.
            let start = |b: &mut FunctionBuilder, c: Value| {
                let scaled = b.ins().imul_imm_s(c, th as i64);
                b.ins().udiv_imm_u(scaled, count as i64)
            };
            let row0 = start(b, c);
            match (&full_kernel, &short_kernel) {
                (Some(k), None) => emit(b, row0, long, k),
                (None, Some(k)) => emit(b, row0, short, k),
                (Some(long_k), Some(short_k)) => {
                    let next = b.ins().iadd_imm_s(c, 1);
                    let end = start(b, next);
                    let rows = b.ins().isub(end, row0);
                    let is_long = b.ins().icmp_imm_u(IntCC::Equal, rows, long as i64);
                    let (on_long, on_short, join) =
                        (b.create_block(), b.create_block(), b.create_block());
                    b.ins().brif(is_long, on_long, &[], on_short, &[]);
                    for (block, rows, k) in [(on_long, long, long_k), (on_short, short, short_k)] {
                        b.seal_block(block);
                        b.switch_to_block(block);
                        emit(b, row0, rows, k);
                        b.ins().jump(join, &[]);
                    }
                    b.seal_block(join);
                    b.switch_to_block(join);
                }
                (None, None) => failure = Some("Winograd: a chunk with no kernel".into()),
            }
        });
    };
    if let (WinogradSplit::Chunks(split), true) = (split, ctx.kernel.tasks > 1) {
        let shared = ctx.shared_scratch.ok_or("Winograd needs scratch")?;
        let prologue = |ctx: &mut LowerCtx, part: Option<Value>| -> LowerResult {
            let bufs = buffers(ctx.b, shared, shared);
            let (in_plane, padded_plane) = (g.in_size(), plan.hp * plan.wp());
            let parts = super::prologue_split(g);
            kernel::part_range(ctx.b, part, &parts, |b, first, count| {
                // Input channels first .. first+count: padded, then split in phases.
                let src = super::channel_at(b, ops.x.ptr, first, in_plane);
                let padded = super::channel_at(b, bufs.padded, first, padded_plane);
                let shape = [plan.hp, plan.wp()];
                copy_padded(b, src, &g.input, count, padded, &shape, &g.pad_begin);
                let phases = super::channel_at(b, bufs.phases, first, padded_plane);
                split_phases(b, &plan, count, padded, phases);
            });
            Ok(())
        };
        let tasks = |ctx: &mut LowerCtx| -> LowerResult {
            let bufs = buffers(ctx.b, shared, scratch);
            let zero = kernel::iconst(ctx.b, 0);
            chunks(ctx.b, &bufs, zero, ctx.task.map(|t| (t, &split)));
            Ok(())
        };
        ctx.with_prologue(prologue, tasks)?;
        return failure.map_or(Ok(()), Err);
    }
    let b = &mut *ctx.b;
    let bufs = buffers(b, scratch, scratch);
    kernel::counted_loop(b, 0, g.batch as i64, 1, |b, n| {
        prepare(b, &bufs, n);
        chunks(b, &bufs, n, None);
    });
    failure.map_or(Ok(()), Err)
}

/// The whole-plane kernels' description of this conv.
fn plane_spec(g: &ConvGeometry, alg: &'static Algorithm, ops: &ConvOperands) -> PlaneSpec {
    let (in_h, in_w, out_h, out_w) = (g.input[0], g.input[1], g.output[0], g.output[1]);
    let plan = Plan::new(g, alg, 16);
    PlaneSpec {
        channels: plan.channels,
        maps: plan.maps,
        in_h,
        in_w,
        pad_top: g.pad_begin[0],
        pad_left: g.pad_begin[1],
        out_h,
        out_w,
        ts: plan.ts,
        v_plane: plan.v_plane(),
        m_plane: plan.m_plane(),
        bias: ops.bias.is_some(),
        residual: ops.residual.is_some(),
        activation: ops.activation,
    }
}

/// The Winograd conv with the whole-plane kernels: per batch item, the input
/// transform reads X in place (no padded copy or phase split), one kernel computes the
/// 16 products from unpacked U, then the output transform writes Y with the fused epilogue. V and M sit where the
/// general path's [`Buffers`] put them for 16 lanes.
fn conv_winograd_plane(
    ctx: &mut LowerCtx,
    g: &ConvGeometry,
    alg: &'static Algorithm,
    ops: &ConvOperands,
    spec: &PlaneSpec,
) -> LowerResult {
    let plan = Plan::new(g, alg, 16);
    let Some(Tensor::F32(w)) = &ops.w.constant else {
        return Err("the Winograd path needs constant weights".into());
    };
    let w: Vec<f32> = w.iter().copied().collect();
    let u = weight_transform(g, alg, &w);
    let u_ptr = ctx.weights_f32(&u)?;
    let scratch = super::scratch(ctx)?;
    let products = gemm::define_machine_code(ctx, 3, &x86::winograd_plane::emit_products(spec)?)?;
    let input = gemm::define_machine_code(ctx, 2, &x86::winograd_plane::emit_input(spec)?)?;
    let output = gemm::define_machine_code(ctx, 4, &x86::winograd_plane::emit_output(spec)?)?;
    let b = &mut *ctx.b;
    let v = b.ins().iadd_imm_s(scratch, (2 * plan.plane_bytes()) as i64);
    let mt = b
        .ins()
        .iadd_imm_s(scratch, (2 * plan.plane_bytes() + plan.v_bytes()) as i64);
    kernel::counted_loop(b, 0, g.batch as i64, 1, |b, n| {
        let zero = kernel::iconst(b, 0);
        let x_n = input_group(b, g, ops.x.ptr, n, zero, F32);
        b.ins().call(input, &[x_n, v]);
        b.ins().call(products, &[u_ptr, v, mt]);
        let (y, addends) = output_and_bias(b, g, ops, n, zero);
        let null = b.ins().iconst(types::I64, 0);
        let bias = ops.bias.as_ref().map_or(null, |_| addends[0]);
        let r = ops
            .residual
            .as_ref()
            .map_or(null, |_| addends[addends.len() - 1]);
        b.ins().call(output, &[mt, y, bias, r]);
    });
    Ok(())
}

/// Scratch buffers (see [`Plan::bytes`]) and the transformed weights.
struct Buffers {
    padded: Value,
    phases: Value,
    v: Value,
    mt: Value,
    stage: Value,
    u: Value,
}

/// The functions one kind of chunk calls: its GEMM, and the machine-code input and
/// output transforms where they apply.
struct ChunkKernels {
    gemm: GemmKernel,
    transforms: Option<[FuncRef; 2]>,
}

/// `rows` tile rows from tile row `row0` (a run-time value): the last chunk holds the
/// conv's last tile row, which may be partial.
struct Chunk {
    row0: Value,
    rows: usize,
    last: bool,
}

impl Chunk {
    /// Input transform, the (m+2)² GEMMs, output transform.
    #[allow(clippy::too_many_arguments)]
    fn emit(
        &self,
        b: &mut FunctionBuilder,
        g: &ConvGeometry,
        plan: &Plan,
        fma: bool,
        bufs: &Buffers,
        kernels: &ChunkKernels,
        out: OutputPtrs,
        act: Activation,
    ) -> LowerResult {
        let m = plan.alg.m;
        if let Some([input, _]) = kernels.transforms {
            let src = kernel::elem_addr(b, bufs.phases, self.row0, m * plan.wp() * F32);
            b.ins().call(input, &[src, bufs.v]);
        } else {
            input_transform(b, plan, fma, bufs, self);
        }
        let a2 = plan.alg.a() * plan.alg.a();
        kernel::counted_loop(b, 0, a2 as i64, 1, |b, ab| {
            let ua = kernel::elem_addr(b, bufs.u, ab, plan.maps * plan.channels * F32);
            let vb = kernel::elem_addr(b, bufs.v, ab, plan.v_plane());
            let mc = kernel::elem_addr(b, bufs.mt, ab, plan.m_plane());
            kernels.gemm.call(b, ua, vb, mc, &[]);
        });
        let Some([_, output]) = kernels.transforms else {
            return output_transform(b, g, plan, fma, bufs, self, out, act);
        };
        // Y and R at the chunk's first output row.
        let row_bytes = m * g.output[1] * F32;
        let y = kernel::elem_addr(b, out.y, self.row0, row_bytes);
        let null = b.ins().iconst(types::I64, 0);
        let r = match out.residual {
            Some(r) => kernel::elem_addr(b, r, self.row0, row_bytes),
            None => null,
        };
        let bias = out.bias.unwrap_or(null);
        b.ins().call(output, &[bufs.mt, y, bias, r]);
        Ok(())
    }
}

/// 4×4 transpose of f32x4 rows.
pub(in crate::codegen::lower) fn transpose4(b: &mut FunctionBuilder, r: [Value; 4]) -> [Value; 4] {
    let lo01 = math::pick_lanes(b, r[0], r[1], [0, 4, 1, 5]);
    let hi01 = math::pick_lanes(b, r[0], r[1], [2, 6, 3, 7]);
    let lo23 = math::pick_lanes(b, r[2], r[3], [0, 4, 1, 5]);
    let hi23 = math::pick_lanes(b, r[2], r[3], [2, 6, 3, 7]);
    [
        math::pick_lanes(b, lo01, lo23, [0, 1, 4, 5]),
        math::pick_lanes(b, lo01, lo23, [2, 3, 6, 7]),
        math::pick_lanes(b, hi01, hi23, [0, 1, 4, 5]),
        math::pick_lanes(b, hi01, hi23, [2, 3, 6, 7]),
    ]
}

pub(in crate::codegen::lower) fn load4(b: &mut FunctionBuilder, addr: Value, off: usize) -> Value {
    b.ins().load(types::F32X4, flags(), addr, off as i32)
}

pub(in crate::codegen::lower) fn store4(
    b: &mut FunctionBuilder,
    v: Value,
    addr: Value,
    off: usize,
) {
    b.ins().store(flags(), v, addr, off as i32);
}

/// `X[c][row][p][j] = P[c][row][j·m + p]`: each run of 4m floats of a padded row
/// becomes four floats of each of the m phases.
fn split_phases(
    b: &mut FunctionBuilder,
    plan: &Plan,
    channels: usize,
    padded: Value,
    phases: Value,
) {
    let m = plan.alg.m;
    let row_bytes = plan.wp() * F32;
    kernel::counted_loop(b, 0, (channels * plan.hp) as i64, 1, |b, row| {
        let src = kernel::elem_addr(b, padded, row, row_bytes);
        let dst = kernel::elem_addr(b, phases, row, row_bytes);
        for j0 in (0..plan.lp).step_by(LANES) {
            let run: Vec<Value> = (0..m)
                .map(|q| load4(b, src, (j0 * m + q * LANES) * F32))
                .collect();
            let split: Vec<Value> = match m {
                4 => transpose4(b, [run[0], run[1], run[2], run[3]]).to_vec(),
                _ => vec![
                    math::pick_lanes(b, run[0], run[1], [0, 2, 4, 6]),
                    math::pick_lanes(b, run[0], run[1], [1, 3, 5, 7]),
                ],
            };
            for (p, v) in split.into_iter().enumerate() {
                store4(b, v, dst, (p * plan.lp + j0) * F32);
            }
        }
    });
}

/// `Bᵀ d` for one column `d` of an input tile, with shared subexpressions factored out
/// (F4: 14 operations instead of 22). The matrices (Lavin & Gray):
/// ```text
/// F2 Bᵀ = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
/// F4 Bᵀ = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0;
///          0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1]
/// ```
fn input_1d(b: &mut FunctionBuilder, fma: bool, m: usize, d: &[Value]) -> Vec<Value> {
    let add = |b: &mut FunctionBuilder, x, y| b.ins().fadd(x, y);
    let sub = |b: &mut FunctionBuilder, x, y| b.ins().fsub(x, y);
    if m == 2 {
        return vec![
            sub(b, d[0], d[2]),
            add(b, d[1], d[2]),
            sub(b, d[2], d[1]),
            sub(b, d[1], d[3]),
        ];
    }
    let r0 = mul_add(b, fma, d[0], 4.0, d[4]);
    let r0 = mul_add(b, fma, d[2], -5.0, r0);
    let (s12, s34) = (add(b, d[1], d[2]), add(b, d[3], d[4]));
    let r1 = mul_add(b, fma, s12, -4.0, s34);
    let (d12, d43) = (sub(b, d[1], d[2]), sub(b, d[4], d[3]));
    let r2 = mul_add(b, fma, d12, 4.0, d43);
    let (d31, d42) = (sub(b, d[3], d[1]), sub(b, d[4], d[2]));
    let r3 = mul_add(b, fma, d31, 2.0, d42);
    let r4 = mul_add(b, fma, d31, -2.0, d42);
    let r5 = mul_add(b, fma, d[1], 4.0, d[5]);
    let r5 = mul_add(b, fma, d[3], -5.0, r5);
    vec![r0, r1, r2, r3, r4, r5]
}

/// `Aᵀ x` for one column `x` of a product tile (F4: 10 operations instead of 17):
/// ```text
/// F2 Aᵀ = [1 1 1 0; 0 1 -1 -1]
/// F4 Aᵀ = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1]
/// ```
fn output_1d(b: &mut FunctionBuilder, fma: bool, m: usize, x: &[Value]) -> Vec<Value> {
    let add = |b: &mut FunctionBuilder, p, q| b.ins().fadd(p, q);
    let sub = |b: &mut FunctionBuilder, p, q| b.ins().fsub(p, q);
    if m == 2 {
        let s = add(b, x[1], x[2]);
        let d = sub(b, x[1], x[2]);
        return vec![add(b, x[0], s), sub(b, d, x[3])];
    }
    let (p, q) = (add(b, x[1], x[2]), sub(b, x[1], x[2]));
    let (r, t) = (add(b, x[3], x[4]), sub(b, x[3], x[4]));
    let o0 = add(b, x[0], p);
    let o0 = add(b, o0, r);
    let o1 = mul_add(b, fma, t, 2.0, q);
    let o2 = mul_add(b, fma, r, 4.0, p);
    let o3 = mul_add(b, fma, t, 8.0, q);
    let o3 = add(b, o3, x[5]);
    vec![o0, o1, o2, o3]
}

fn splat(b: &mut FunctionBuilder, c: f64) -> Value {
    let s = b.ins().f32const(c as f32);
    b.ins().splat(types::F32X4, s)
}

/// `x·k + y`.
fn mul_add(b: &mut FunctionBuilder, fma: bool, x: Value, k: f64, y: Value) -> Value {
    let k = splat(b, k);
    if fma {
        b.ins().fma(x, k, y)
    } else {
        let p = b.ins().fmul(x, k);
        b.ins().fadd(p, y)
    }
}

/// `V_ξν = (Bᵀ d B)_ξν` of four tiles (lanes) at `dst`, one ξν `v_ab_bytes` after the
/// other, `d[r][s]` at `src + tap(r, s)`; the column pass staged in `stage`.
pub(in crate::codegen::lower) fn input_tile(
    b: &mut FunctionBuilder,
    fma: bool,
    m: usize,
    (src, tap): (Value, impl Fn(usize, usize) -> usize),
    stage: Value,
    (dst, v_ab_bytes): (Value, usize),
) {
    let a = m + 2;
    // Column pass: t[ξ][s] = Σ_r Bᵀ[ξ][r] d[r][s], staged.
    for s in 0..a {
        let d: Vec<Value> = (0..a).map(|r| load4(b, src, tap(r, s))).collect();
        for (xi, t) in input_1d(b, fma, m, &d).into_iter().enumerate() {
            store4(b, t, stage, (xi * a + s) * LANES * F32);
        }
    }
    // Row pass: V[ξ][ν] = Σ_s t[ξ][s] Bᵀ[ν][s].
    for xi in 0..a {
        let t: Vec<Value> = (0..a)
            .map(|s| load4(b, stage, (xi * a + s) * LANES * F32))
            .collect();
        for (nu, val) in input_1d(b, fma, m, &t).into_iter().enumerate() {
            store4(b, val, dst, (xi * a + nu) * v_ab_bytes);
        }
    }
}

/// `o = Aᵀ M A` of four tiles (lanes) whose `M_ξν` are at `src`, one `m_ab_bytes`
/// after the other: both passes staged in `stage`, `o[i][j]` at
/// `OUTPUT_TILE_AT + (i·m + j)` vectors.
pub(in crate::codegen::lower) fn output_tile(
    b: &mut FunctionBuilder,
    fma: bool,
    m: usize,
    (src, m_ab_bytes): (Value, usize),
    stage: Value,
) {
    let a = m + 2;
    let vec = LANES * F32;
    // Row pass: z[ξ][j] = Σ_ν Aᵀ[j][ν] M[ξ][ν], staged at z[ξ·m + j].
    for xi in 0..a {
        let row: Vec<Value> = (0..a)
            .map(|nu| load4(b, src, (xi * a + nu) * m_ab_bytes))
            .collect();
        for (j, z) in output_1d(b, fma, m, &row).into_iter().enumerate() {
            store4(b, z, stage, (xi * m + j) * vec);
        }
    }
    // Column pass: o[i][j] = Σ_ξ Aᵀ[i][ξ] z[ξ][j], staged after z.
    for j in 0..m {
        let col: Vec<Value> = (0..a)
            .map(|xi| load4(b, stage, (xi * m + j) * vec))
            .collect();
        for (i, o) in output_1d(b, fma, m, &col).into_iter().enumerate() {
            store4(b, o, stage, OUTPUT_TILE_AT + (i * m + j) * vec);
        }
    }
}

/// One output row `o[i][0..m]` of four tiles (lanes are tiles) as runs of output
/// columns: run `k` holds columns 4k .. 4k+4 of the four tiles.
pub(in crate::codegen::lower) fn output_row_runs(
    b: &mut FunctionBuilder,
    o: &[Value],
) -> Vec<Value> {
    match o.len() {
        4 => transpose4(b, [o[0], o[1], o[2], o[3]]).to_vec(),
        _ => vec![
            math::pick_lanes(b, o[0], o[1], [0, 4, 1, 5]),
            math::pick_lanes(b, o[0], o[1], [2, 6, 3, 7]),
        ],
    }
}

/// `V_ξν[c][t..t+4] = (Bᵀ d B)_ξν` for every channel, tile row and four-tile group.
fn input_transform(b: &mut FunctionBuilder, plan: &Plan, fma: bool, bufs: &Buffers, chunk: &Chunk) {
    let m = plan.alg.m;
    let chan_bytes = plan.hp * plan.wp() * F32;
    let v_ab_bytes = plan.v_plane();
    let stage = bufs.stage;
    kernel::nested_loop(
        b,
        &[plan.channels, chunk.rows, plan.groups],
        &mut |b, idx| {
            let (c, ti, gi) = (idx[0], idx[1], idx[2]);
            let ti_global = b.ins().iadd(chunk.row0, ti);
            // Phase planes at (channel c, row ti·m, phase 0, column 4·gi).
            let src = kernel::elem_addr(b, bufs.phases, c, chan_bytes);
            let src = kernel::elem_addr(b, src, ti_global, m * plan.wp() * F32);
            let src = kernel::elem_addr(b, src, gi, LANES * F32);
            // V at (ξν 0, channel c, chunk tile ti·tw + 4·gi).
            let t0 = b.ins().imul_imm_s(ti, plan.tw as i64);
            let g4 = b.ins().imul_imm_s(gi, LANES as i64);
            let t0 = b.ins().iadd(t0, g4);
            let dst = kernel::elem_addr(b, bufs.v, c, plan.ts * F32);
            let dst = kernel::elem_addr(b, dst, t0, F32);
            let tap = |r: usize, s: usize| ((r * m + s % m) * plan.lp + s / m) * F32;
            input_tile(b, fma, m, (src, tap), stage, (dst, v_ab_bytes));
        },
    );
}

/// Where the output transform writes (batch item's output) and what it adds.
#[derive(Clone, Copy)]
struct OutputPtrs {
    y: Value,
    bias: Option<Value>,
    residual: Option<Value>,
}

/// `Y[map][ti·m + i][tj·m + j] = act((Aᵀ M A)[i][j] + bias + R)` for every map and tile.
#[allow(clippy::too_many_arguments)]
fn output_transform(
    b: &mut FunctionBuilder,
    g: &ConvGeometry,
    plan: &Plan,
    fma: bool,
    bufs: &Buffers,
    chunk: &Chunk,
    out: OutputPtrs,
    act: Activation,
) -> LowerResult {
    let m = plan.alg.m;
    let (out_h, out_w) = (g.output[0], g.output[1]);
    let partial_row = chunk.last && out_h % m != 0;
    let full_rows = chunk.rows - usize::from(partial_row);
    let full_groups = out_w / (LANES * m);
    let mut failure = None;
    kernel::counted_loop(b, 0, plan.maps as i64, 1, |b, map| {
        let bias = out.bias.map(|p| {
            let at = kernel::elem_addr(b, p, map, F32);
            let s = b.ins().load(types::F32, flags(), at, 0);
            b.ins().splat(types::F32X4, s)
        });
        let m_map = kernel::elem_addr(b, bufs.mt, map, plan.ts * F32);
        let plane = out_h * out_w * F32;
        let y_map = kernel::elem_addr(b, out.y, map, plane);
        let r_map = out.residual.map(|r| kernel::elem_addr(b, r, map, plane));
        // (tile rows, valid output rows per tile) × (groups, valid columns per group):
        // the full ones in loops, the partial last ones once.
        let mut row_parts = vec![(0, full_rows, m)];
        if partial_row {
            row_parts.push((full_rows, full_rows + 1, out_h % m));
        }
        let mut col_parts = vec![(0, full_groups, LANES * m)];
        if out_w % (LANES * m) != 0 {
            col_parts.push((full_groups, full_groups + 1, out_w % (LANES * m)));
        }
        for &(r0, r1, rows) in &row_parts {
            for &(c0, c1, cols) in &col_parts {
                let mut body = |b: &mut FunctionBuilder, ti: Value, gi: Value| {
                    let group = OutputGroup {
                        plan,
                        fma,
                        stage: bufs.stage,
                        out_w,
                        rows,
                        cols,
                        bias,
                        act,
                    };
                    let ti_global = b.ins().iadd(chunk.row0, ti);
                    if let Err(e) = group.emit(b, m_map, y_map, r_map, [ti, ti_global], gi) {
                        failure = Some(e);
                    }
                };
                kernel::counted_loop(b, r0 as i64, r1 as i64, 1, |b, ti| {
                    kernel::counted_loop(b, c0 as i64, c1 as i64, 1, |b, gi| body(b, ti, gi));
                });
            }
        }
    });
    failure.map_or(Ok(()), Err)
}

/// One four-tile group of one map's output transform, with its static bounds.
struct OutputGroup<'p> {
    plan: &'p Plan,
    fma: bool,
    stage: Value,
    out_w: usize,
    /// Valid output rows of the tiles (m but in the last tile row) and valid columns
    /// of the group (4·m but in the last group).
    rows: usize,
    cols: usize,
    bias: Option<Value>,
    act: Activation,
}

impl OutputGroup<'_> {
    fn emit(
        &self,
        b: &mut FunctionBuilder,
        m_map: Value,
        y_map: Value,
        r_map: Option<Value>,
        [ti, ti_global]: [Value; 2],
        gi: Value,
    ) -> LowerResult {
        let plan = self.plan;
        let m = plan.alg.m;
        let t0 = b.ins().imul_imm_s(ti, plan.tw as i64);
        let g4 = b.ins().imul_imm_s(gi, LANES as i64);
        let t0 = b.ins().iadd(t0, g4);
        let src = kernel::elem_addr(b, m_map, t0, F32);
        let stage = self.stage;
        let vec = LANES * F32;
        output_tile(b, self.fma, m, (src, plan.m_plane()), stage);
        let o_at = OUTPUT_TILE_AT;
        // Output (row ti·m, column gi·4·m).
        let row0 = b.ins().imul_imm_s(ti_global, (m * self.out_w) as i64);
        let col0 = b.ins().imul_imm_s(gi, (LANES * m) as i64);
        let pos = b.ins().iadd(row0, col0);
        let y = kernel::elem_addr(b, y_map, pos, F32);
        let r = r_map.map(|r| kernel::elem_addr(b, r, pos, F32));
        for i in 0..self.rows {
            let o: Vec<Value> = (0..m)
                .map(|j| load4(b, stage, o_at + (i * m + j) * vec))
                .collect();
            let chunks = output_row_runs(b, &o);
            for (k, mut val) in chunks.into_iter().enumerate() {
                let first = k * LANES;
                if first >= self.cols {
                    break;
                }
                let valid = (self.cols - first).min(LANES);
                let off = (i * self.out_w + first) * F32;
                if let Some(bias) = self.bias {
                    val = b.ins().fadd(val, bias);
                }
                if let Some(r) = r {
                    let rv = kernel::load_lanes(b, r, off as i32, valid);
                    val = b.ins().fadd(val, rv);
                }
                val = crate::codegen::unary::activation(b, self.act, val)?;
                if valid == LANES {
                    store4(b, val, y, off);
                } else {
                    for l in 0..valid {
                        let x = b.ins().extractlane(val, l as u8);
                        b.ins().store(flags(), x, y, (off + l * F32) as i32);
                    }
                }
            }
        }
        Ok(())
    }
}
