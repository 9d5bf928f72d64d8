//! A one-image Winograd conv split into tasks by groups of maps, for thread pools.
//!
//! Split by chunks of tile rows, a conv whose tile rows do not divide evenly between
//! two threads waits for the longer half: ResNet-18's 28×28 and 14×14 convs and
//! SqueezeNet's 27×27 and 13×13 ones have 7 tile rows, cut 4 + 3, so two threads
//! finish in 4/7 of the serial time instead of 1/2. Here the prologue, split by input
//! channels, pads, phase-splits and transforms the whole input into V (in the node's
//! shared scratch); each task then computes the (m+2)² products of its maps over all
//! tiles into its own M and runs their output transform. The groups are whole row
//! tiles of the GEMM, and U is packed group by group, so every task streams only its
//! maps' share of the transformed weights. Each output element is computed by the same
//! instructions however many threads run the tasks, and the whole node (no pool) runs
//! the same groups one after another.

use cranelift_codegen::ir::{types, FuncRef, InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;

use super::super::gemm::{self, GemmKernel, Geometry};
use super::super::{
    channel_at, copy_padded, output_and_bias, prologue_split, scratch, ConvGeometry, ConvOperands,
    F32,
};
use super::{
    input_transform, output_transform, products_spec, split_phases, transform_spec,
    weight_transform, Algorithm, Buffers, Chunk, OutputPtrs, Plan, LANES,
};
use crate::codegen::isa::Vector;
use crate::codegen::kernel;
use crate::codegen::kernels::x86;
use crate::codegen::lower::{LowerCtx, LowerResult};
use crate::codegen::tasks::Split;

/// The kernels of one size of group: its GEMM and, on x86, its output transform.
struct GroupKernels {
    gemm: GemmKernel,
    output: Option<FuncRef>,
}

/// The conv split by `split`'s groups of maps; `x86` is the machine-code transforms'
/// ISA, if they run.
pub(super) fn conv(
    ctx: &mut LowerCtx,
    g: &ConvGeometry,
    ops: &ConvOperands,
    (alg, x86): (&'static Algorithm, Option<Vector>),
    geom: Geometry,
    split: &Split,
    w: &[f32],
) -> LowerResult {
    let plan = Plan::whole(g, alg, x86.map_or(LANES, Vector::lanes));
    let a2 = alg.a() * alg.a();
    let (maps, channels) = (plan.maps, plan.channels);
    let u = weight_transform(g, alg, w);
    let mut packed = Vec::with_capacity(u.len());
    for ab in 0..a2 {
        let mat = &u[ab * maps * channels..][..maps * channels];
        packed.extend(gemm::pack_a_by_task(
            &geom,
            maps,
            channels,
            split,
            |i, k| mat[i * channels + k],
        ));
    }
    let u_ptr = ctx.weights_f32(&packed)?;
    let size = split.per * geom.mr;
    let last_size = maps - size * (split.tasks - 1);
    let fma = gemm::has_fma(ctx.target);
    let shared = ctx.shared_scratch.ok_or("Winograd needs scratch")?;
    let group_kernels = |ctx: &mut LowerCtx, count: usize| -> Result<GroupKernels, String> {
        let spec = products_spec(&plan.part(channels, count), geom, plan.th * plan.tw);
        let gemm = GemmKernel::define(ctx, &spec)?;
        let output = match x86 {
            Some(isa) => {
                let t = transform_spec(g, &plan.part(channels, count), ops, isa, (plan.th, true));
                Some(gemm::define_machine_code(
                    ctx,
                    4,
                    &x86::winograd::emit_output(&t)?,
                )?)
            }
            None => None,
        };
        Ok(GroupKernels { gemm, output })
    };
    let full = group_kernels(ctx, size)?;
    let last = match last_size == size {
        true => None,
        false => Some(group_kernels(ctx, last_size)?),
    };
    // The input transform per prologue part size (the whole node's part is all channels).
    let parts = prologue_split(g);
    let mut inputs: Vec<(usize, FuncRef)> = vec![];
    if let Some(isa) = x86 {
        for count in [parts.units, parts.per, parts.last()] {
            if inputs.iter().all(|&(c, _)| c != count) {
                let t = transform_spec(g, &plan.part(count, maps), ops, isa, (plan.th, true));
                let f = gemm::define_machine_code(ctx, 2, &x86::winograd::emit_input(&t)?)?;
                inputs.push((count, f));
            }
        }
    }
    // V after the padded plane and its phases in the shared scratch; M and the
    // transforms' stage in each task's own.
    let buffers = |b: &mut FunctionBuilder, own: Value| {
        let at = |b: &mut FunctionBuilder, base: Value, bytes: usize| {
            b.ins().iadd_imm_s(base, bytes as i64)
        };
        let planes = 2 * plan.plane_bytes();
        Buffers {
            padded: shared,
            phases: at(b, shared, plan.plane_bytes()),
            v: at(b, shared, planes),
            mt: at(b, own, planes + plan.v_bytes()),
            stage: at(b, own, planes + plan.v_bytes() + plan.m_bytes()),
            u: u_ptr,
        }
    };
    let prologue = |ctx: &mut LowerCtx, part: Option<Value>| -> LowerResult {
        let own = scratch(ctx)?;
        let bufs = buffers(ctx.b, own);
        let (in_plane, padded_plane) = (g.in_size(), plan.hp * plan.wp());
        kernel::part_range(ctx.b, part, &parts, |b, first, count| {
            // Input channels first .. first+count: padded, split in phases, transformed.
            let src = channel_at(b, ops.x.ptr, first, in_plane);
            let padded = channel_at(b, bufs.padded, first, padded_plane);
            let shape = [plan.hp, plan.wp()];
            copy_padded(b, src, &g.input, count, padded, &shape, &g.pad_begin);
            let phases = channel_at(b, bufs.phases, first, padded_plane);
            split_phases(b, &plan, count, padded, phases);
            let v = kernel::elem_addr(b, bufs.v, first, plan.ts * F32);
            match inputs.iter().find(|&&(c, _)| c == count) {
                Some(&(_, f)) => {
                    b.ins().call(f, &[phases, v]);
                }
                None => {
                    let row0 = kernel::iconst(b, 0);
                    let chunk = Chunk {
                        row0,
                        rows: plan.th,
                        last: true,
                    };
                    let part = Buffers { phases, v, ..bufs };
                    input_transform(b, &plan.part(count, maps), fma, &part, &chunk);
                }
            }
        });
        Ok(())
    };
    let tasks = |ctx: &mut LowerCtx| -> LowerResult {
        let own = scratch(ctx)?;
        let b = &mut *ctx.b;
        let bufs = buffers(b, own);
        let zero = kernel::iconst(b, 0);
        let (y, addends) = output_and_bias(b, g, ops, zero, zero);
        let bias = ops.bias.as_ref().map(|_| addends[0]);
        let residual = ops.residual.as_ref().map(|_| addends[addends.len() - 1]);
        let plane = g.output[0] * g.output[1] * F32;
        // Group `t` of `count` maps from map t·size.
        let group = |b: &mut FunctionBuilder, t: Value, count: usize, k: &GroupKernels| {
            let u_group = kernel::elem_addr(b, bufs.u, t, size * channels * F32);
            kernel::counted_loop(b, 0, a2 as i64, 1, |b, ab| {
                let ua = kernel::elem_addr(b, u_group, ab, maps * channels * F32);
                let vb = kernel::elem_addr(b, bufs.v, ab, plan.v_plane());
                let mc = kernel::elem_addr(b, bufs.mt, ab, plan.m_plane());
                k.gemm.call(b, ua, vb, mc, &[]);
            });
            let out = OutputPtrs {
                y: kernel::elem_addr(b, y, t, size * plane),
                bias: bias.map(|p| kernel::elem_addr(b, p, t, size * F32)),
                residual: residual.map(|r| kernel::elem_addr(b, r, t, size * plane)),
            };
            let Some(f) = k.output else {
                let row0 = kernel::iconst(b, 0);
                let chunk = Chunk {
                    row0,
                    rows: plan.th,
                    last: true,
                };
                let part = plan.part(channels, count);
                return output_transform(b, g, &part, fma, &bufs, &chunk, out, ops.activation);
            };
            let null = b.ins().iconst(types::I64, 0);
            let (bias, r) = (out.bias.unwrap_or(null), out.residual.unwrap_or(null));
            b.ins().call(f, &[bufs.mt, out.y, bias, r]);
            Ok(())
        };
        let one = |b: &mut FunctionBuilder, t: Value| -> LowerResult {
            let Some(last) = &last else {
                return group(b, t, size, &full);
            };
            let (mut on_last, mut on_other) = (Ok(()), Ok(()));
            kernel::if_last_task(
                b,
                t,
                split.tasks,
                |b| on_last = group(b, t, last_size, last),
                |b| on_other = group(b, t, size, &full),
            );
            on_last.and(on_other)
        };
        match ctx.task {
            Some(t) => one(b, t),
            None => {
                let end = kernel::iconst(b, split.tasks as i64);
                let mut result = Ok(());
                kernel::range_loop(b, zero, end, |b, t| {
                    if let Err(e) = one(b, t) {
                        result = Err(e);
                    }
                });
                result
            }
        }
    };
    ctx.with_prologue(prologue, tasks)
}
