//! The depthwise path of Conv (one input channel per group, float32, 1-D or 2-D). On
//! x86 targets with AVX2 or AVX-512, the machine-code kernel of
//! `kernels/x86/dwconv.rs` computes it with the epilogue fused;
//! elsewhere (aarch64, baseline x86, width strides other than 1 and 2), a Cranelift
//! loop vectorized along the output width over a zero-padded copy of one input plane,
//! followed by the epilogue pass. A child module of `conv` (declared there), so it uses
//! conv's geometry and padded-copy helpers directly.

use crate::codegen::plan::conv::depthwise::*;
use cranelift_codegen::ir::{types, InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;

use super::gemm::{self, LANES};
use super::{apply_epilogue, copy_padded, input_group, scratch, ConvGeometry, ConvOperands, F32};
use crate::codegen::isa::Vector;
use crate::codegen::kernel::{self, flags, PTR};
use crate::codegen::kernels::x86;
use crate::codegen::kernels::x86::dwconv::DwSpec;
use crate::codegen::lower::{LowerCtx, LowerResult};
use crate::codegen::math;

/// Lowers a depthwise conv, its bias, residual and activation included, on the
/// machine-code family `isa` or, without one, in Cranelift.
pub(super) fn conv_depthwise(
    ctx: &mut LowerCtx,
    g: &ConvGeometry,
    ops: &ConvOperands,
    isa: Option<Vector>,
) -> LowerResult {
    let Some(isa) = isa else {
        conv_depthwise_clif(ctx, g, ops)?;
        return apply_epilogue(ctx.b, ops);
    };
    let spec = x86_spec(
        g,
        ops.bias.is_some(),
        ops.residual.is_some(),
        ops.activation,
    );
    conv_depthwise_x86(ctx, g, ops, &spec, isa)?;
    if x86::dwconv::fuses(ops.activation) {
        Ok(())
    } else {
        apply_epilogue(ctx.b, ops)
    }
}

fn conv_depthwise_x86(
    ctx: &mut LowerCtx,
    g: &ConvGeometry,
    ops: &ConvOperands,
    spec: &DwSpec,
    isa: Vector,
) -> LowerResult {
    if let Some(task) = ctx.task {
        return conv_depthwise_x86_task(ctx, g, ops, spec, isa, task);
    }
    let plane = scratch(ctx)?;
    let code = x86::dwconv::emit(spec, isa)?;
    let func = gemm::define_machine_code(ctx, 6, &code)?;
    let b = &mut *ctx.b;
    let in_image = g.channels * g.in_size() * F32;
    let out_image = g.maps * g.out_size() * F32;
    kernel::counted_loop(b, 0, g.batch as i64, 1, |b, n| {
        let x_n = kernel::elem_addr(b, ops.x.ptr, n, in_image);
        let y_n = kernel::elem_addr(b, ops.y.ptr, n, out_image);
        let null = b.ins().iconst(PTR, 0);
        let bias = ops.bias.as_ref().map_or(null, |bias| bias.ptr);
        let res = match &ops.residual {
            Some(r) if spec.residual => kernel::elem_addr(b, r.ptr, n, out_image),
            _ => null,
        };
        b.ins().call(func, &[x_n, ops.w.ptr, y_n, plane, bias, res]);
    });
    Ok(())
}

fn conv_depthwise_clif(ctx: &mut LowerCtx, g: &ConvGeometry, ops: &ConvOperands) -> LowerResult {
    let plane = scratch(ctx)?;
    let fma = gemm::has_fma(ctx.target);
    let p = Plane2d::new(g);
    let layout = PlaneLayout::new(g);
    let taps = g.taps();
    let has_bias = ops.bias.is_some();
    // One output plane per call, compiled out of line at opt_level "none" like the GEMM:
    // at "speed" the optimizer hoists every input load of a block above its FMAs and
    // spills them.
    let plane_kernel = gemm::define_out_of_line(ctx, 3 + usize::from(has_bias), |b, params| {
        depthwise_plane(b, &p, &layout, fma, taps, params);
        Ok(())
    })?;
    let b = &mut *ctx.b;
    kernel::nested_loop(b, &[g.batch, g.channels], &mut |b, idx| {
        let (n, ch) = (idx[0], idx[1]);
        let x_c = input_group(b, g, ops.x.ptr, n, ch, F32);
        copy_padded(
            b,
            x_c,
            &[p.in_h, p.in_w],
            1,
            plane,
            &[layout.height, layout.width],
            &p.pad,
        );
        kernel::counted_loop(b, 0, g.mg as i64, 1, |b, j| {
            // Output map m = ch·Mg + j reads input channel ch.
            let m = b.ins().imul_imm_s(ch, g.mg as i64);
            let m = b.ins().iadd(m, j);
            let w_m = kernel::elem_addr(b, ops.w.ptr, m, taps * F32);
            let y_n = kernel::elem_addr(b, ops.y.ptr, n, g.maps * g.out_size() * F32);
            let y_nm = kernel::elem_addr(b, y_n, m, g.out_size() * F32);
            let mut args = vec![plane, w_m, y_nm];
            if let Some(bias) = &ops.bias {
                args.push(kernel::elem_addr(b, bias.ptr, m, F32));
            }
            b.ins().call(plane_kernel, &args);
        });
    });
    Ok(())
}

/// Body of the depthwise kernel: `params` = (padded plane, the map's taps, its output
/// plane[, its bias]). The taps stay in registers as splats for the whole plane.
fn depthwise_plane(
    b: &mut FunctionBuilder,
    p: &Plane2d,
    layout: &PlaneLayout,
    fma: bool,
    taps: usize,
    params: &[Value],
) {
    let (plane, w_m, y_nm) = (params[0], params[1], params[2]);
    let weights: Vec<Value> = (0..taps)
        .map(|t| {
            let w = b.ins().load(types::F32, flags(), w_m, (t * F32) as i32);
            b.ins().splat(types::F32X4, w)
        })
        .collect();
    let init = match params.get(3) {
        Some(&bias) => {
            let v = b.ins().load(types::F32, flags(), bias, 0);
            b.ins().splat(types::F32X4, v)
        }
        None => {
            let z = b.ins().f32const(0.0);
            b.ins().splat(types::F32X4, z)
        }
    };
    let row = DepthwiseRow {
        p,
        width: layout.width,
        weights: &weights,
        init,
        fma,
    };
    kernel::counted_loop(b, 0, p.out_h as i64, 1, |b, oh| {
        let y_row = kernel::elem_addr(b, y_nm, oh, p.out_w * F32);
        let x_row = kernel::elem_addr(b, plane, oh, p.stride[0] * layout.width * F32);
        row.emit(b, x_row, y_row);
    });
}

/// One output row of a depthwise conv.
struct DepthwiseRow<'a> {
    p: &'a Plane2d,
    /// Row pitch of the padded plane, in floats.
    width: usize,
    /// The kernel taps, each splat to a vector.
    weights: &'a [Value],
    /// Bias (or zero) splat.
    init: Value,
    fma: bool,
}

/// Output vectors computed together: four independent accumulator chains hide the FMA
/// latency (one chain would wait on each add).
const DEPTHWISE_VECS: usize = 4;

impl DepthwiseRow<'_> {
    /// `x_row`: the padded plane at the first input row of this output row's windows.
    fn emit(&self, b: &mut FunctionBuilder, x_row: Value, y_row: Value) {
        let out_w = self.p.out_w;
        let block = DEPTHWISE_VECS * LANES;
        let blocks = out_w / block;
        kernel::counted_loop(b, 0, (blocks * block) as i64, block as i64, |b, ow| {
            self.vectors(b, x_row, y_row, ow, DEPTHWISE_VECS, LANES)
        });
        // The leftover columns as one group of independent chains: one at a time, each
        // would wait out the latency of its taps' dependent FMAs.
        let done = blocks * block;
        if done < out_w {
            let rest = out_w - done;
            let at = kernel::iconst(b, done as i64);
            let last_lanes = rest - (rest - 1) / LANES * LANES;
            self.vectors(b, x_row, y_row, at, rest.div_ceil(LANES), last_lanes);
        }
    }

    /// `vecs` output vectors starting at column `ow`; the last has `last_lanes` valid lanes.
    fn vectors(
        &self,
        b: &mut FunctionBuilder,
        x_row: Value,
        y_row: Value,
        ow: Value,
        vecs: usize,
        last_lanes: usize,
    ) {
        let p = self.p;
        let x0 = kernel::elem_addr(b, x_row, ow, p.stride[1] * F32);
        let mut acc = vec![self.init; vecs];
        for kh in 0..p.k[0] {
            for kw in 0..p.k[1] {
                let tap_off = (kh * p.dil[0] * self.width + kw * p.dil[1]) * F32;
                let w = self.weights[kh * p.k[1] + kw];
                for (v, acc) in acc.iter_mut().enumerate() {
                    let off = tap_off + v * LANES * p.stride[1] * F32;
                    let x = self.load_window(b, x0, off);
                    *acc = gemm::mul_add(b, self.fma, w, x, *acc);
                }
            }
        }
        let y0 = kernel::elem_addr(b, y_row, ow, F32);
        for (v, &acc) in acc.iter().enumerate() {
            let lanes = if v + 1 == vecs { last_lanes } else { LANES };
            store_lanes(b, acc, y0, (v * LANES * F32) as i32, lanes);
        }
    }

    /// Four inputs `stride` apart starting `off` bytes after `x0`.
    fn load_window(&self, b: &mut FunctionBuilder, x0: Value, off: usize) -> Value {
        let s = self.p.stride[1];
        if s == 1 {
            return b.ins().load(types::F32X4, flags(), x0, off as i32);
        }
        if s == 2 {
            // The even lanes of eight consecutive inputs: two loads and one shuffle
            // (shufps / uzp1) instead of four scalar loads and lane inserts.
            let lo = b.ins().load(types::F32X4, flags(), x0, off as i32);
            let hi = b
                .ins()
                .load(types::F32X4, flags(), x0, (off + LANES * F32) as i32);
            let evens = core::array::from_fn(|i| ((i / 4) * 8 + i % 4) as u8);
            return math::shuffle_f32x4(b, lo, hi, evens);
        }
        let first = b.ins().load(types::F32, flags(), x0, off as i32);
        let mut v = b.ins().scalar_to_vector(types::F32X4, first);
        for l in 1..LANES {
            let x = b
                .ins()
                .load(types::F32, flags(), x0, (off + l * s * F32) as i32);
            v = b.ins().insertlane(v, x, l as u8);
        }
        v
    }
}

/// Stores the first `lanes` lanes of `v` at `addr + off`.
fn store_lanes(b: &mut FunctionBuilder, v: Value, addr: Value, off: i32, lanes: usize) {
    if lanes == LANES {
        b.ins().store(flags(), v, addr, off);
        return;
    }
    for l in 0..lanes {
        let x = b.ins().extractlane(v, l as u8);
        b.ins().store(flags(), x, addr, off + (l * F32) as i32);
    }
}

/// One task of [`channel_split`]: its channels, through a kernel compiled for that
/// many channels (and one for the last task's).
fn conv_depthwise_x86_task(
    ctx: &mut LowerCtx,
    g: &ConvGeometry,
    ops: &ConvOperands,
    spec: &DwSpec,
    isa: Vector,
    task: Value,
) -> LowerResult {
    let split = channel_split(g);
    if split.tasks != ctx.kernel.tasks {
        return Err(format!(
            "the plan split this depthwise conv into {} tasks, its channels into {}",
            ctx.kernel.tasks, split.tasks
        ));
    }
    let plane = scratch(ctx)?;
    let full = gemm::define_machine_code(
        ctx,
        6,
        &x86::dwconv::emit(
            &DwSpec {
                channels: split.per,
                ..*spec
            },
            isa,
        )?,
    )?;
    let last = gemm::define_machine_code(
        ctx,
        6,
        &x86::dwconv::emit(
            &DwSpec {
                channels: split.last(),
                ..*spec
            },
            isa,
        )?,
    )?;
    let b = &mut *ctx.b;
    let taps: usize = g.kernel.iter().product();
    let c0 = b.ins().imul_imm_s(task, split.per as i64);
    let at = |b: &mut FunctionBuilder, base: Value, per_channel: usize| {
        kernel::elem_addr(b, base, c0, per_channel * F32)
    };
    let x = at(b, ops.x.ptr, g.in_size());
    let w = at(b, ops.w.ptr, g.mg * taps);
    let y = at(b, ops.y.ptr, g.mg * g.out_size());
    let null = b.ins().iconst(PTR, 0);
    let bias = match &ops.bias {
        Some(bias) => at(b, bias.ptr, g.mg),
        None => null,
    };
    let res = match &ops.residual {
        Some(r) if spec.residual => at(b, r.ptr, g.mg * g.out_size()),
        _ => null,
    };
    let args = [x, w, y, plane, bias, res];
    kernel::if_last_task(
        b,
        task,
        split.tasks,
        |b| {
            b.ins().call(last, &args);
        },
        |b| {
            b.ins().call(full, &args);
        },
    );
    Ok(())
}
