//! nnc's INT8 convolution: `QuantizeToPlanes` and `ConvU8S8` (see
//! [`crate::ops::PlaneLayout`] for the layout they share).
//!
//! The convolution is a GEMM `C[m][n'] = Σ_k W[m][k] · B[k][n']` over the wide output
//! pixels `n'`, K running tap by tap and, within a tap, over channel quads; the four
//! bytes of one quad at one pixel are one 32-bit lane of the 8-bit dot products. The
//! zero point of the planes is folded into the bias at compile time
//! (`Σ (q − zp)·w = Σ q·w − zp·Σ w`), so the kernels multiply raw uint8 by int8.
//!
//! Implementations with identical results (the integer sums are exact and the float32
//! epilogue is the same sequence of operations):
//! * x86-64 with AVX-512 VNNI: the machine-code kernels of
//!   [`crate::codegen::kernels::x86::conv_u8s8`];
//! * x86-64 with AVX-VNNI or AVX2: the 256-bit ones of
//!   [`crate::codegen::kernels::x86::conv_u8s8_ymm`];
//! * everywhere else, Cranelift code whose dot-product tree folds to `usdot` (aarch64
//!   +i8mm), `sdot` (aarch64 +dotprod, on activation bytes with the top bit flipped)
//!   or widening multiplies otherwise. It writes the wide rows to scratch and a
//!   second pass keeps the `Wo` valid columns of each row while adding the residual
//!   and applying the activation.

use crate::codegen::isa::Dot;
use crate::codegen::kernels::clif::gemm_dot::{self, dot_accumulate};
use crate::codegen::kernels::conv_u8s8::{folded_bias, pack_weights, ConvU8Geometry};
use crate::codegen::plan::int8::{clif_nr, map_split, quad_split, wide_scratch, CLIF_MR};
use crate::codegen::plan::{Int8Conv, Strategy};
use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{types, Endianness, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::FunctionBuilder;

use super::elementwise::activate_run;
use super::{LowerCtx, LowerResult};
use crate::codegen::isa::Vector;
use crate::codegen::kernel::{self, flags, PTR};
use crate::codegen::kernels::x86;
use crate::ops::{Activation, ConvAttrs, PlaneLayout, Requantize};

fn scalar_params(ctx: &LowerCtx) -> Result<(f32, u8), String> {
    let inv = ctx
        .input(1)?
        .constant
        .ok_or("QuantizeToPlanes needs a constant scale")?;
    let zp = ctx
        .input(2)?
        .constant
        .ok_or("QuantizeToPlanes needs a constant zero point")?;
    match (&inv.to_f64_vec()[..], &zp.to_i64_vec()[..]) {
        (&[s], &[z]) => Ok((s as f32, z as u8)),
        _ => Err("QuantizeToPlanes takes one scale and one zero point".into()),
    }
}

pub fn quantize_to_planes(ctx: &mut LowerCtx, layout: &PlaneLayout) -> LowerResult {
    let (inv, zp) = scalar_params(ctx)?;
    let (x, y) = (ctx.input(0)?, ctx.output(0));
    let batch = x.ty.shape[0];
    let code = match ctx.kernel.strategy {
        Strategy::QuantizeToPlanes(Some(Vector::Zmm)) => {
            Some(x86::conv_u8s8::emit_quantize(layout, inv, zp)?)
        }
        Strategy::QuantizeToPlanes(Some(Vector::Ymm)) => {
            Some(x86::quantize_planes_avx2::emit_quantize(layout, inv, zp)?)
        }
        _ => None,
    };
    if let (Some(_), Some(task)) = (&code, ctx.task) {
        // Quads q0 .. of the task: its channels' planes in, its quads' planes out.
        let split = quad_split(layout);
        let quads = split.per;
        let sized = |quads: usize| PlaneLayout {
            channels: (4 * quads).min(layout.channels),
            ..layout.clone()
        };
        let last_channels = layout.channels - 4 * quads * (split.tasks - 1);
        let emit = |l: &PlaneLayout| match ctx.kernel.strategy {
            Strategy::QuantizeToPlanes(Some(Vector::Zmm)) => {
                x86::conv_u8s8::emit_quantize(l, inv, zp)
            }
            _ => x86::quantize_planes_avx2::emit_quantize(l, inv, zp),
        };
        let full_code = emit(&sized(quads))?;
        let last_code = emit(&PlaneLayout {
            channels: last_channels,
            ..layout.clone()
        })?;
        let full = super::gemm::define_machine_code(ctx, 2, &full_code)?;
        let last = super::gemm::define_machine_code(ctx, 2, &last_code)?;
        let plane = layout.height * layout.width * 4;
        let quad_bytes = layout.image_bytes() / layout.quads();
        let b = &mut *ctx.b;
        let x_t = kernel::elem_addr(b, x.ptr, task, 4 * quads * plane);
        let y_t = kernel::elem_addr(b, y.ptr, task, quads * quad_bytes);
        kernel::if_last_task(
            b,
            task,
            split.tasks,
            |b| {
                b.ins().call(last, &[x_t, y_t]);
            },
            |b| {
                b.ins().call(full, &[x_t, y_t]);
            },
        );
        return Ok(());
    }
    if let Some(code) = code {
        let func = super::gemm::define_machine_code(ctx, 2, &code)?;
        let in_image = layout.channels * layout.height * layout.width * 4;
        let b = &mut *ctx.b;
        kernel::counted_loop(b, 0, batch as i64, 1, |b, n| {
            let x_n = kernel::elem_addr(b, x.ptr, n, in_image);
            let y_n = kernel::elem_addr(b, y.ptr, n, layout.image_bytes());
            b.ins().call(func, &[x_n, y_n]);
        });
        return Ok(());
    }
    quantize_clif(ctx.b, x.ptr, y.ptr, layout, batch, inv, zp);
    Ok(())
}

/// The portable `QuantizeToPlanes` of `batch` images from `x` to `y`, element by
/// element.
fn quantize_clif(
    b: &mut FunctionBuilder,
    x: Value,
    y: Value,
    layout: &PlaneLayout,
    batch: usize,
    inv: f32,
    zp: u8,
) {
    fill_bytes(b, y, batch * layout.image_bytes(), zp);
    let shape = [batch, layout.channels, layout.height, layout.width];
    let strides = kernel::strides_of(&shape);
    kernel::nested_loop(b, &shape, &mut |b, idx| {
        let at = kernel::linear_offset(b, idx, &strides);
        let src = kernel::elem_addr(b, x, at, 4);
        let v = b.ins().load(types::F32, flags(), src, 0);
        let q = quantize_value(b, v, inv, zp);
        let dst = plane_byte_address(b, y, layout, idx);
        b.ins().istore8(flags(), q, dst, 0);
    });
}

/// `PackPlanes`: the zero point everywhere, then each byte to its place.
pub fn pack_planes(ctx: &mut LowerCtx, layout: &PlaneLayout) -> LowerResult {
    let zp = ctx
        .input(1)?
        .constant
        .ok_or("PackPlanes needs a constant zero point")?
        .to_i64_vec()[0] as u8;
    let (x, y) = (ctx.input(0)?, ctx.output(0));
    let batch = x.ty.shape[0];
    let b = &mut *ctx.b;
    fill_bytes(b, y.ptr, batch * layout.image_bytes(), zp);
    let shape = [batch, layout.channels, layout.height, layout.width];
    let strides = kernel::strides_of(&shape);
    kernel::nested_loop(b, &shape, &mut |b, idx| {
        let at = kernel::linear_offset(b, idx, &strides);
        let src = b.ins().iadd(x.ptr, at);
        let v = b.ins().uload8(types::I32, flags(), src, 0);
        let dst = plane_byte_address(b, y.ptr, layout, idx);
        b.ins().istore8(flags(), v, dst, 0);
    });
    Ok(())
}

/// The address of element `idx` (`[n, c, h, w]`) in planes at `y`, as
/// `PlaneLayout::byte_offset` places it.
fn plane_byte_address(
    b: &mut FunctionBuilder,
    y: Value,
    layout: &PlaneLayout,
    idx: &[Value],
) -> Value {
    let [sh, sw] = layout.stride;
    let hp = b.ins().iadd_imm_s(idx[2], layout.pad_top as i64);
    let wp = b.ins().iadd_imm_s(idx[3], layout.pad_left as i64);
    let (ph, row) = div_rem(b, hp, sh);
    let (pw, col) = div_rem(b, wp, sw);
    let phase = b.ins().imul_imm_s(ph, sw as i64);
    let phase = b.ins().iadd(phase, pw);
    let quad = b.ins().ushr_imm_u(idx[1], 2);
    let plane = b.ins().imul_imm_s(quad, layout.phases() as i64);
    let plane = b.ins().iadd(plane, phase);
    let pixel = b.ins().imul_imm_s(row, layout.cols as i64);
    let pixel = b.ins().iadd(pixel, col);
    let pixel_base = b.ins().imul_imm_s(plane, layout.plane_pixels() as i64);
    let pixel = b.ins().iadd(pixel_base, pixel);
    let lane = b.ins().band_imm_u(idx[1], 3);
    let byte = b.ins().imul_imm_s(pixel, 4);
    let byte = b.ins().iadd(byte, lane);
    let image = b.ins().imul_imm_s(idx[0], layout.image_bytes() as i64);
    let byte = b.ins().iadd(byte, image);
    b.ins().iadd(y, byte)
}

/// `(v % d, v / d)` for a constant `d` (no division for 1).
fn div_rem(b: &mut FunctionBuilder, v: Value, d: usize) -> (Value, Value) {
    if d == 1 {
        return (kernel::iconst(b, 0), v);
    }
    let q = b.ins().udiv_imm_s(v, d as i64);
    let back = b.ins().imul_imm_s(q, d as i64);
    (b.ins().isub(v, back), q)
}

/// One float32 quantized as `QuantizeToPlanes` defines it, as an i32.
fn quantize_value(b: &mut FunctionBuilder, v: Value, inv: f32, zp: u8) -> Value {
    let inv = b.ins().f32const(inv);
    let zpf = b.ins().f32const(zp as f32);
    let t = b.ins().fmul(v, inv);
    let t = b.ins().fadd(t, zpf);
    let zero = b.ins().f32const(0.0);
    let positive = b.ins().fcmp(FloatCC::GreaterThan, t, zero);
    let t = b.ins().select(positive, t, zero);
    let top = b.ins().f32const(255.0);
    let t = b.ins().fmin(t, top);
    let t = b.ins().nearest(t);
    b.ins().fcvt_to_sint(types::I32, t)
}

/// `bytes` bytes at `dst` set to `value`: 16 at a time, then 4 at a time (the sizes
/// here are multiples of 4).
pub(super) fn fill_bytes(b: &mut FunctionBuilder, dst: Value, bytes: usize, value: u8) {
    let word = b
        .ins()
        .iconst(types::I32, i64::from(u32::from_ne_bytes([value; 4])));
    let vector = b.ins().splat(types::I32X4, word);
    let vec_end = bytes / 16 * 16;
    kernel::counted_loop(b, 0, vec_end as i64, 16, |b, i| {
        let at = b.ins().iadd(dst, i);
        b.ins().store(flags(), vector, at, 0);
    });
    kernel::counted_loop(b, vec_end as i64, bytes as i64, 4, |b, i| {
        let at = b.ins().iadd(dst, i);
        b.ins().store(flags(), word, at, 0);
    });
}

/// The constant operands of a `ConvU8S8` node.
struct Constants {
    w: Vec<i64>,
    bias: Vec<i64>,
    scale: Vec<f32>,
    zp: i64,
}

fn constants(ctx: &LowerCtx) -> Result<Constants, String> {
    let konst = |i: usize, what: &str| {
        ctx.input(i)?
            .constant
            .ok_or_else(|| format!("ConvU8S8 needs constant {what}"))
    };
    Ok(Constants {
        w: konst(1, "weights")?.to_i64_vec(),
        bias: konst(2, "bias")?.to_i64_vec(),
        scale: konst(4, "scale")?
            .to_f64_vec()
            .iter()
            .map(|&v| v as f32)
            .collect(),
        zp: konst(5, "zero point")?.to_i64_vec()[0],
    })
}

pub fn conv_u8s8(
    ctx: &mut LowerCtx,
    conv: &ConvAttrs,
    layout: &PlaneLayout,
    requantize: Option<&Requantize>,
) -> LowerResult {
    let y = ctx.output(0);
    let g = ConvU8Geometry::new(conv, layout, &y.ty, requantize);
    let k = constants(ctx)?;
    // The machine-code kernels skip an activation the requantization's clamp makes
    // redundant (the bytes are the same, see `Requantize::subsumes`).
    let activation = match requantize {
        Some(r) if r.subsumes(conv.activation) => Activation::None,
        _ => conv.activation,
    };
    match ctx.kernel.strategy {
        Strategy::ConvU8S8(Int8Conv::Vnni { tiles_outer }) => {
            let residual = ctx.inputs[3].is_some();
            let emit = |g: &ConvU8Geometry| {
                let spec =
                    x86::conv_u8s8::ConvSpec::new(g, activation, residual, requantize, tiles_outer);
                x86::conv_u8s8::emit_conv(&spec)
            };
            let w = pack_weights(&g, &k.w, x86::conv_u8s8::MR);
            return conv_x86(
                ctx,
                &g,
                &k,
                (x86::conv_u8s8::MR, w),
                &emit,
                requantize,
                false,
            );
        }
        Strategy::ConvU8S8(Int8Conv::Ymm { isa, tiles_outer }) => {
            use x86::conv_u8s8_ymm as ymm;
            let residual = ctx.inputs[3].is_some();
            let emit = |g: &ConvU8Geometry| {
                let spec =
                    ymm::YmmConvSpec::new(isa, g, activation, residual, requantize, tiles_outer);
                ymm::emit_conv(&spec)
            };
            let w = pack_weights(&g, &k.w, ymm::MR);
            return conv_x86(ctx, &g, &k, (ymm::MR, w), &emit, requantize, true);
        }
        Strategy::ConvU8S8(Int8Conv::DepthwiseYmm) => {
            use x86::dwconv_u8s8_ymm as dw;
            let r = requantize.ok_or("the INT8 depthwise kernel writes planes")?;
            let emit = |g: &ConvU8Geometry| dw::emit_dwconv(&dw::DwSpec::new(g, r, activation));
            let w = dw::pack_weights(&g, &k.w);
            return conv_x86(ctx, &g, &k, (4, w), &emit, requantize, false);
        }
        Strategy::ConvU8S8(Int8Conv::Clif(form)) => {
            return conv_clif(ctx, &g, &k, conv, requantize, form)
        }
        _ => {}
    }
    Err("no INT8 convolution kernel was planned for this node".into())
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The packed weights `w`, folded bias and output scale of a kernel with map tiles of
/// `mr`, in read-only data (bias and scale padded to whole tiles).
fn tile_constants(
    ctx: &mut LowerCtx,
    g: &ConvU8Geometry,
    k: &Constants,
    w: Vec<u8>,
    mr: usize,
    activation_offset: i64,
) -> Result<(Value, Value, Value), String> {
    let maps = g.maps.next_multiple_of(mr);
    let w = ctx.weight_rodata(w)?;
    // The kernel sums (q − offset)·w, so the zero point is folded relative to it.
    let zp = k.zp - activation_offset;
    let bias = ctx.weight_rodata(i32_bytes(&folded_bias(g, &k.w, &k.bias, zp, maps)))?;
    let mut scale = k.scale.clone();
    scale.resize(maps, 0.0);
    let scale = ctx.weight_rodata(f32_bytes(&scale))?;
    Ok((w, bias, scale))
}

/// One machine-code call per image: `(planes, W, Y, bias, scale, residual)`, and the
/// node's scratch when `with_scratch`; the weights `w` packed for tiles of `mr` maps, `emit` the
/// kernel's code for a geometry. Split into tasks (see [`map_split`]), a task calls
/// the kernel compiled for its maps with every pointer moved to its first map.
fn conv_x86(
    ctx: &mut LowerCtx,
    g: &ConvU8Geometry,
    k: &Constants,
    (mr, w): (usize, Vec<u8>),
    emit: &dyn Fn(&ConvU8Geometry) -> Result<Vec<u8>, String>,
    requantize: Option<&Requantize>,
    with_scratch: bool,
) -> LowerResult {
    let tile_bytes = w.len() / g.maps.div_ceil(mr).max(1);
    let (w, bias, scale) = tile_constants(ctx, g, k, w, mr, 0)?;
    let params = 6 + usize::from(with_scratch);
    let scratch = ctx.scratch;
    let (planes, y) = (ctx.input(0)?, ctx.output(0));
    let residual = ctx.inputs[3].clone();
    let out_image = g.maps * g.out_h * g.out_w * 4;
    let y_image = requantize.map_or(out_image, |r| r.layout.image_bytes());
    if let Some(task) = ctx.task.filter(|_| ctx.kernel.tasks > 1) {
        let split = map_split(g, mr);
        if split.tasks != ctx.kernel.tasks {
            return Err("the plan split this INT8 conv differently".into());
        }
        let maps = split.per * mr;
        let last_maps = g.maps - maps * (split.tasks - 1);
        let sized = |n: usize| ConvU8Geometry {
            maps: n,
            ..g.clone()
        };
        let full = super::gemm::define_machine_code(ctx, params, &emit(&sized(maps))?)?;
        let last = match last_maps == maps {
            true => full,
            false => super::gemm::define_machine_code(ctx, params, &emit(&sized(last_maps))?)?,
        };
        // Bytes a task moves each pointer on: its maps' output quads (requantized) or
        // planes, weight tiles, and bias, scale and residual entries.
        let y_step = match requantize {
            Some(r) => maps / 4 * r.layout.phases() * r.layout.plane_pixels() * 4,
            None => maps * g.out_h * g.out_w * 4,
        };
        let b = &mut *ctx.b;
        let at = |b: &mut FunctionBuilder, base: Value, step: usize| {
            kernel::elem_addr(b, base, task, step)
        };
        // A depthwise map reads its own channel's quad.
        let planes_at = match g.depthwise {
            true => at(b, planes.ptr, maps / 4 * g.quad_stride()),
            false => planes.ptr,
        };
        let mut args = vec![
            planes_at,
            at(b, w, split.per * tile_bytes),
            at(b, y.ptr, y_step),
            at(b, bias, maps * 4),
            at(b, scale, maps * 4),
            match &residual {
                Some(r) => at(b, r.ptr, maps * g.out_h * g.out_w * 4),
                None => b.ins().iconst(PTR, 0),
            },
        ];
        if with_scratch {
            args.push(scratch.unwrap_or_else(|| b.ins().iconst(PTR, 0)));
        }
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
        return Ok(());
    }
    let func = super::gemm::define_machine_code(ctx, params, &emit(g)?)?;
    let b = &mut *ctx.b;
    kernel::counted_loop(b, 0, g.batch as i64, 1, |b, n| {
        let p_n = kernel::elem_addr(b, planes.ptr, n, g.layout.image_bytes());
        let y_n = kernel::elem_addr(b, y.ptr, n, y_image);
        let r_n = match &residual {
            Some(r) => kernel::elem_addr(b, r.ptr, n, out_image),
            None => b.ins().iconst(PTR, 0),
        };
        let mut args = vec![p_n, w, y_n, bias, scale, r_n];
        if with_scratch {
            args.push(scratch.unwrap_or_else(|| b.ins().iconst(PTR, 0)));
        }
        b.ins().call(func, &args);
    });
    Ok(())
}

/// The portable kernel (see the module docs).
fn conv_clif(
    ctx: &mut LowerCtx,
    g: &ConvU8Geometry,
    k: &Constants,
    conv: &ConvAttrs,
    requantize: Option<&Requantize>,
    form: Dot,
) -> LowerResult {
    let maps = g.maps.next_multiple_of(CLIF_MR);
    let nr = clif_nr(ctx.target.arch);
    let w = pack_weights(g, &k.w, CLIF_MR);
    let (w, bias, scale) = tile_constants(ctx, g, k, w, CLIF_MR, form.activation_offset())?;
    let (planes, y) = (ctx.input(0)?, ctx.output(0));
    let residual = ctx.inputs[3].clone();
    let wide_cols = if g.compact() {
        g.wide()
    } else {
        g.wide().next_multiple_of(nr)
    };
    let needs_scratch = !g.compact() || requantize.is_some();
    let scratch = match ctx.scratch {
        Some(s) => Some(s),
        None if needs_scratch => return Err("ConvU8S8 needs scratch".into()),
        None => None,
    };
    let out_image = g.maps * g.out_h * g.out_w * 4;
    let mut failure = Ok(());
    let b = &mut *ctx.b;
    // Requantizing, the float32 image goes to scratch (after the wide rows) and is
    // then quantized into the output planes.
    let float_image = requantize.map(|_| {
        let s = scratch.expect("checked");
        b.ins().iadd_imm_s(s, wide_scratch(g, nr) as i64)
    });
    kernel::counted_loop(b, 0, g.batch as i64, 1, |b, n| {
        let p_n = kernel::elem_addr(b, planes.ptr, n, g.layout.image_bytes());
        let y_n = match float_image {
            Some(f) => f,
            None => kernel::elem_addr(b, y.ptr, n, out_image),
        };
        let wide = if g.compact() {
            y_n
        } else {
            scratch.expect("checked")
        };
        let tiles = ClifTiles {
            g,
            planes: p_n,
            w,
            bias,
            scale,
            out: wide,
            ldc: wide_cols,
            form,
        };
        kernel::counted_loop(b, 0, maps as i64, CLIF_MR as i64, |b, m0| {
            let full = g.wide() / nr * nr;
            kernel::counted_loop(b, 0, full as i64, nr as i64, |b, n0| {
                tiles.tile(b, m0, n0, nr / 4, None);
            });
            if full < g.wide() {
                let n0 = kernel::iconst(b, full as i64);
                let tail = g.wide() - full;
                tiles.tile(b, m0, n0, tail.div_ceil(4), Some(tail));
            }
        });
        let res_n = residual
            .as_ref()
            .map(|r| kernel::elem_addr(b, r.ptr, n, out_image));
        let valid = |b: &mut FunctionBuilder, m: Value, oh: Value| -> (Value, Value) {
            let row = b.ins().imul_imm_s(m, g.out_h as i64);
            let row = b.ins().iadd(row, oh);
            let dst = kernel::elem_addr(b, y_n, row, g.out_w * 4);
            let src_row = b.ins().imul_imm_s(m, wide_cols as i64);
            let col = b.ins().imul_imm_s(oh, g.layout.cols as i64);
            let src_at = b.ins().iadd(src_row, col);
            let src = kernel::elem_addr(b, wide, src_at, 4);
            (dst, src)
        };
        let requantize_image = |b: &mut FunctionBuilder| {
            if let Some(r) = requantize {
                let planes_n = kernel::elem_addr(b, y.ptr, n, r.layout.image_bytes());
                quantize_clif(b, y_n, planes_n, &r.layout, 1, r.inv_scale, r.zero_point);
            }
        };
        if g.compact() && residual.is_none() && conv.activation == crate::ops::Activation::None {
            requantize_image(b);
            return;
        }
        kernel::counted_loop(b, 0, g.maps as i64, 1, |b, m| {
            kernel::counted_loop(b, 0, g.out_h as i64, 1, |b, oh| {
                let (dst, src) = valid(b, m, oh);
                let res = res_n.map(|r| {
                    let off = b.ins().isub(dst, y_n);
                    b.ins().iadd(r, off)
                });
                if let Err(e) = activate_run(b, dst, src, res, g.out_w, conv.activation) {
                    failure = Err(e);
                }
            });
        });
        requantize_image(b);
    });
    failure
}

/// Addresses and sizes of the portable kernel's tiles.
struct ClifTiles<'g> {
    g: &'g ConvU8Geometry,
    planes: Value,
    w: Value,
    bias: Value,
    scale: Value,
    /// Wide rows out (scratch, or the output itself when compact) and their stride.
    out: Value,
    ldc: usize,
    /// The dot-product tree's form for the target's instruction.
    form: Dot,
}

impl ClifTiles<'_> {
    /// Maps `m0 .. m0 + 4` × wide pixels `n0 .. n0 + 4·vecs` (`valid` of them when the
    /// tile ends early: the last vector is stored lane by lane).
    fn tile(
        &self,
        b: &mut FunctionBuilder,
        m0: Value,
        n0: Value,
        vecs: usize,
        valid: Option<usize>,
    ) {
        let g = self.g;
        let little = MemFlagsData::new().with_endianness(Endianness::Little);
        let accs = kernel::zeroed_vector_vars(b, types::I32X4, CLIF_MR * vecs);
        let quads = g.k_quads();
        let tile_w = g.taps.len() * quads * CLIF_MR * 4;
        let w_tile = b.ins().imul_imm_s(m0, (tile_w / CLIF_MR) as i64);
        let w_tile = b.ins().iadd(self.w, w_tile);
        let pixel = b.ins().imul_imm_s(n0, 4);
        let mut b_base = b.ins().iadd(self.planes, pixel);
        if g.depthwise {
            // The tile's 4 maps are one quad, m0 / 4.
            let quad = b.ins().ushr_imm_u(m0, 2);
            let at = b.ins().imul_imm_s(quad, g.quad_stride() as i64);
            b_base = b.ins().iadd(b_base, at);
        }
        for t in 0..g.taps.len() {
            let b_tap = b.ins().iadd_imm_s(b_base, g.tap_offset(t) as i64);
            let w_tap = b.ins().iadd_imm_s(w_tile, (t * quads * CLIF_MR * 4) as i64);
            let walk = [(b_tap, g.quad_stride()), (w_tap, CLIF_MR * 4)];
            kernel::strided_loop(b, quads, &walk, |b, at| {
                let (b_at, w_at) = (at[0], at[1]);
                let xs: Vec<Value> = (0..vecs)
                    .map(|j| {
                        let x = b.ins().load(types::I8X16, flags(), b_at, (16 * j) as i32);
                        gemm_dot::prepare(self.form, b, x)
                    })
                    .collect();
                for r in 0..CLIF_MR {
                    let wv = b.ins().load(types::I32, flags(), w_at, (4 * r) as i32);
                    let wv = b.ins().splat(types::I32X4, wv);
                    let wv = b.ins().bitcast(types::I8X16, little, wv);
                    for (j, &x) in xs.iter().enumerate() {
                        let acc = accs[r * vecs + j];
                        let sum = b.use_var(acc);
                        let sum = dot_accumulate(b, sum, wv, x, self.form);
                        b.def_var(acc, sum);
                    }
                }
            });
        }
        let out_tile = b.ins().imul_imm_s(n0, 4);
        let out_tile = b.ins().iadd(self.out, out_tile);
        for r in 0..CLIF_MR {
            let m = b.ins().iadd_imm_s(m0, r as i64);
            let bias_at = kernel::elem_addr(b, self.bias, m, 4);
            let bias = b.ins().load(types::I32, flags(), bias_at, 0);
            let bias = b.ins().splat(types::I32X4, bias);
            let scale_at = kernel::elem_addr(b, self.scale, m, 4);
            let scale = b.ins().load(types::F32, flags(), scale_at, 0);
            let scale = b.ins().splat(types::F32X4, scale);
            let row = kernel::elem_addr(b, out_tile, m, self.ldc * 4);
            // Maps past the end (the last tile of a map count not a multiple of 4) are
            // computed with zero weights and not stored.
            let store_row = |b: &mut FunctionBuilder, f: &mut dyn FnMut(&mut FunctionBuilder)| {
                let inside = b.ins().icmp_imm_s(
                    cranelift_codegen::ir::condcodes::IntCC::SignedLessThan,
                    m,
                    g.maps as i64,
                );
                let yes = b.create_block();
                let done = b.create_block();
                b.ins().brif(inside, yes, &[], done, &[]);
                b.switch_to_block(yes);
                b.seal_block(yes);
                f(b);
                b.ins().jump(done, &[]);
                b.switch_to_block(done);
                b.seal_block(done);
            };
            let vals: Vec<Value> = (0..vecs)
                .map(|j| {
                    let v = b.use_var(accs[r * vecs + j]);
                    let v = b.ins().iadd(v, bias);
                    let v = b.ins().fcvt_from_sint(types::F32X4, v);
                    b.ins().fmul(v, scale)
                })
                .collect();
            store_row(b, &mut |b| {
                for (j, &v) in vals.iter().enumerate() {
                    let lanes = valid.map_or(4, |n| (n - 4 * j).min(4));
                    kernel::store_lanes(b, v, row, (16 * j) as i32, lanes);
                }
            });
        }
    }
}
