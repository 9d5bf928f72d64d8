//! Resize over extents the run sets (sizes computed from the dims, or an image whose
//! plane the run sets): nearest and linear sampling of the last two axes. Each resized
//! axis maps output index `o` to an input coordinate as the interpreter does
//! ([`crate::ops::resize_sampling`]), from the extents the run has: the columns' taps
//! once per node into the scratch, a row's taps at the row.

use crate::codegen::plan::scratch::{ScratchLayout, TAP_BYTES};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;

use super::super::run_shape::{self, Ext};
use super::super::{LowerCtx, LowerResult};
use crate::codegen::kernel;
use crate::ir::DType;
use crate::ops::resize_sampling::axis_scale;
use crate::ops::{CoordinateTransform, NearestMode, ResizeAttrs, ResizeMode};

/// The slot holding input row `j` (i64), sampling it there first (`sample(slot)`)
/// unless the slot holds it already.
fn fill_slot(
    b: &mut FunctionBuilder,
    scratch: Value,
    layout: &ScratchLayout,
    j: Value,
    sample: impl FnOnce(&mut FunctionBuilder, Value),
) -> Value {
    let parity = b.ins().band_imm_s(j, 1);
    let tag_at = b.ins().imul_imm_s(parity, 8);
    let tag_at = b.ins().iadd(scratch, tag_at);
    let slot = b.ins().imul_imm_s(parity, layout.slot_bytes as i64);
    let slot = b.ins().iadd_imm_s(slot, layout.slot(0) as i64);
    let slot = b.ins().iadd(scratch, slot);
    let held = b
        .ins()
        .load(types::I64, kernel::flags(), tag_at, layout.tag(0) as i32);
    let stale = b.ins().icmp(IntCC::NotEqual, held, j);
    let (fill, done) = (b.create_block(), b.create_block());
    b.ins().brif(stale, fill, &[], done, &[]);
    b.switch_to_block(fill);
    b.seal_block(fill);
    sample(b, slot);
    b.ins()
        .store(kernel::flags(), j, tag_at, layout.tag(0) as i32);
    b.ins().jump(done, &[]);
    b.switch_to_block(done);
    b.seal_block(done);
    slot
}

/// `dst[o] = row` sampled at output column `o` by its taps in the scratch: the nearest
/// column, or the two columns' weighted sum.
fn sample_row(b: &mut FunctionBuilder, taps: Value, row: Value, dst: Value, n: Ext, nearest: bool) {
    run_shape::run_loop(b, n, |b, o| {
        let at = kernel::elem_addr(b, taps, o, TAP_BYTES);
        let load =
            |b: &mut FunctionBuilder, ty, k: i32| b.ins().load(ty, kernel::flags(), at, 4 * k);
        let sample = |b: &mut FunctionBuilder, k: i32| {
            let i = load(b, types::I32, k);
            let i = b.ins().sextend(types::I64, i);
            let a = kernel::elem_addr(b, row, i, 4);
            b.ins().load(types::F32, kernel::flags(), a, 0)
        };
        let value = if nearest {
            sample(b, 0)
        } else {
            let (a, c) = (sample(b, 0), sample(b, 1));
            let (w0, w1) = (load(b, types::F32, 2), load(b, types::F32, 3));
            let a = b.ins().fmul(a, w0);
            let c = b.ins().fmul(c, w1);
            b.ins().fadd(a, c)
        };
        let d = kernel::elem_addr(b, dst, o, 4);
        b.ins().store(kernel::flags(), value, d, 0);
    });
}

/// `dst = w[0]·rows[0] + w[1]·rows[1]` over `n` floats, four at a time.
fn blend_rows(b: &mut FunctionBuilder, rows: [Value; 2], w: [Value; 2], dst: Value, n: Value) {
    let quads = b.ins().band_imm_s(n, !3);
    let (wv0, wv1) = (
        b.ins().splat(types::F32X4, w[0]),
        b.ins().splat(types::F32X4, w[1]),
    );
    let blend = |b: &mut FunctionBuilder, i: Value, ty, w0: Value, w1: Value| {
        let at = |b: &mut FunctionBuilder, base: Value| kernel::elem_addr(b, base, i, 4);
        let (p, q, d) = (at(b, rows[0]), at(b, rows[1]), at(b, dst));
        let p = b.ins().load(ty, kernel::flags(), p, 0);
        let q = b.ins().load(ty, kernel::flags(), q, 0);
        let p = b.ins().fmul(p, w0);
        let q = b.ins().fmul(q, w1);
        let v = b.ins().fadd(p, q);
        b.ins().store(kernel::flags(), v, d, 0);
    };
    run_shape::run_loop_from(b, Ext::Fixed(0), Ext::Run(quads), 4, |b, i| {
        blend(b, i, types::F32X4, wv0, wv1)
    });
    run_shape::run_loop_from(b, Ext::Run(quads), Ext::Run(n), 1, |b, i| {
        blend(b, i, types::F32, w[0], w[1])
    });
}

/// How one axis maps output indices to input coordinates in this run.
struct AxisMap {
    transform: CoordinateTransform,
    /// The scale (output over input) as f64.
    scale: Value,
    /// The input extent as f64, and as an integer (for clamping).
    input: Value,
    input_int: Value,
    /// The un-rounded output length `scale · input`, and the output extent, as f64.
    width: Value,
    output: Value,
}

impl AxisMap {
    fn new(
        b: &mut FunctionBuilder,
        r: &ResizeAttrs,
        axis: usize,
        input: Ext,
        output: Ext,
    ) -> AxisMap {
        let (input_int, output_int) = (input.value(b), output.value(b));
        let input_f = b.ins().fcvt_from_sint(types::F64, input_int);
        let output_f = b.ins().fcvt_from_sint(types::F64, output_int);
        let scale = match (input, output) {
            (Ext::Fixed(i), Ext::Fixed(o)) if !r.scales_from_extents => {
                b.ins().f64const(axis_scale(r.scales[axis], i, o))
            }
            // A whole factor over an extent the run sets: exactly output / input.
            _ if !r.scales_from_extents => b.ins().f64const(f64::from(r.scales[axis])),
            _ => {
                let one = b.ins().f64const(1.0);
                let denominator = b.ins().fmax(input_f, one);
                b.ins().fdiv(output_f, denominator)
            }
        };
        let width = b.ins().fmul(scale, input_f);
        AxisMap {
            transform: r.coordinate_transform,
            scale,
            input: input_f,
            input_int,
            width,
            output: output_f,
        }
    }

    /// The input coordinate output index `o` (i64) samples.
    fn coordinate(&self, b: &mut FunctionBuilder, o: Value) -> Value {
        let y = b.ins().fcvt_from_sint(types::F64, o);
        let half = b.ins().f64const(0.5);
        let one = b.ins().f64const(1.0);
        let half_pixel = |b: &mut FunctionBuilder| {
            let y = b.ins().fadd(y, half);
            let x = b.ins().fdiv(y, self.scale);
            b.ins().fsub(x, half)
        };
        let unit_width = b.ins().fcmp(FloatCC::Equal, self.width, one);
        match self.transform {
            CoordinateTransform::AlignCorners => {
                let last = b.ins().fsub(self.input, one);
                let span = b.ins().fsub(self.width, one);
                let x = b.ins().fmul(y, last);
                let x = b.ins().fdiv(x, span);
                let zero = b.ins().f64const(0.0);
                b.ins().select(unit_width, zero, x)
            }
            CoordinateTransform::Asymmetric => b.ins().fdiv(y, self.scale),
            CoordinateTransform::PytorchHalfPixel => {
                let x = half_pixel(b);
                let minus_half = b.ins().f64const(-0.5);
                b.ins().select(unit_width, minus_half, x)
            }
            CoordinateTransform::HalfPixelSymmetric => {
                let adjustment = b.ins().fdiv(self.output, self.width);
                let keep = b.ins().fsub(one, adjustment);
                let centre = b.ins().fmul(self.input, half);
                let offset = b.ins().fmul(centre, keep);
                let x = half_pixel(b);
                b.ins().fadd(offset, x)
            }
            // tf_crop_and_resize is refused at import.
            CoordinateTransform::HalfPixel | CoordinateTransform::TfCropAndResize => half_pixel(b),
        }
    }

    /// `i` clamped to `[0, input)` as i32.
    fn clamp(&self, b: &mut FunctionBuilder, i: Value) -> Value {
        let zero = kernel::iconst(b, 0);
        let last = b.ins().iadd_imm_s(self.input_int, -1);
        let i = b.ins().smin(i, last);
        let i = b.ins().smax(i, zero);
        b.ins().ireduce(types::I32, i)
    }

    /// The two input indices output index `o` reads (i32) and their f32 weights: the
    /// floor and the next index for linear sampling, the rounded index twice for
    /// nearest.
    fn taps(&self, b: &mut FunctionBuilder, r: &ResizeAttrs, o: Value) -> [Value; 4] {
        let x = self.coordinate(b, o);
        let floor = b.ins().floor(x);
        match r.mode {
            ResizeMode::Nearest => {
                let half = b.ins().f64const(0.5);
                let rounded = match r.nearest_mode {
                    NearestMode::RoundPreferFloor => {
                        let x = b.ins().fsub(x, half);
                        b.ins().ceil(x)
                    }
                    NearestMode::RoundPreferCeil => {
                        let x = b.ins().fadd(x, half);
                        b.ins().floor(x)
                    }
                    NearestMode::Floor => floor,
                    NearestMode::Ceil => b.ins().ceil(x),
                };
                let i = b.ins().fcvt_to_sint_sat(types::I64, rounded);
                let i = self.clamp(b, i);
                let (one, zero) = (b.ins().f32const(1.0), b.ins().f32const(0.0));
                [i, i, one, zero]
            }
            _ => {
                let ratio = b.ins().fsub(x, floor);
                let w1 = b.ins().fdemote(types::F32, ratio);
                let one = b.ins().f32const(1.0);
                let w0 = b.ins().fsub(one, w1);
                let i = b.ins().fcvt_to_sint_sat(types::I64, floor);
                let next = b.ins().iadd_imm_s(i, 1);
                [self.clamp(b, i), self.clamp(b, next), w0, w1]
            }
        }
    }
}

pub fn resize(ctx: &mut LowerCtx, r: &ResizeAttrs) -> LowerResult {
    let (x, y) = (ctx.input(0)?, ctx.output(0));
    if x.ty.dtype != DType::F32 {
        return Err(format!(
            "a Resize over extents the run sets samples float32, not {}",
            x.ty.dtype
        ));
    }
    if r.mode == ResizeMode::Cubic {
        return Err("cubic sampling over extents the run sets has no form yet".into());
    }
    let (xd, yd) = (x.ty.dims(), y.ty.dims());
    let rank = xd.len();
    let plane_axes = rank.min(2);
    if let Some(axis) = (0..rank - plane_axes).find(|&i| xd[i] != yd[i]) {
        return Err(format!(
            "axis {axis} is resized; over extents the run sets only the last two axes are"
        ));
    }
    let scratch = ctx
        .scratch
        .ok_or("a Resize over run-time extents needs scratch")?;
    let dims = ctx.run_dims.as_ref().expect("symbolic");
    let xs = dims.shape(ctx.b, &x.ty);
    let ys = dims.shape(ctx.b, &y.ty);
    let b = &mut *ctx.b;
    let axis = |s: &[Ext], from_end: usize| match rank.checked_sub(from_end) {
        Some(i) if from_end <= plane_axes => (rank - from_end, s[i]),
        _ => (usize::MAX, Ext::Fixed(1)),
    };
    let ((h_axis, h_in), (_, h_out)) = (axis(&xs, 2), axis(&ys, 2));
    let ((w_axis, w_in), (_, w_out)) = (axis(&xs, 1), axis(&ys, 1));
    let planes = Ext::product(b, &ys[..rank - plane_axes]);
    let unit = ResizeAttrs {
        scales: vec![1.0],
        scales_from_extents: false,
        ..r.clone()
    };
    let map = |b: &mut FunctionBuilder, axis: usize, input: Ext, output: Ext| match axis {
        usize::MAX => AxisMap::new(b, &unit, 0, input, output),
        a => AxisMap::new(b, r, a, input, output),
    };
    let rows = map(b, h_axis, h_in, h_out);
    let columns = map(b, w_axis, w_in, w_out);
    run_shape::run_loop(b, w_out, |b, o| {
        let taps = columns.taps(b, r, o);
        let at = kernel::elem_addr(b, scratch, o, TAP_BYTES);
        for (k, v) in taps.into_iter().enumerate() {
            b.ins().store(kernel::flags(), v, at, 4 * k as i32);
        }
    });
    let nearest = r.mode == ResizeMode::Nearest;
    let in_plane = h_in.mul(b, w_in);
    let out_plane = h_out.mul(b, w_out);
    let w_in_v = w_in.value(b);
    let w_out_v = w_out.value(b);
    let layout = ScratchLayout::new(y.ty.shape.last().copied().unwrap_or(1));
    run_shape::run_loop(b, planes, |b, p| {
        let src = in_plane.times(b, p);
        let src = kernel::elem_addr(b, x.ptr, src, 4);
        let dst = out_plane.times(b, p);
        let dst = kernel::elem_addr(b, y.ptr, dst, 4);
        // No input row of this plane is in a slot yet.
        let none = kernel::iconst(b, -1);
        for slot in 0..2 {
            b.ins()
                .store(kernel::flags(), none, scratch, layout.tag(slot) as i32);
        }
        run_shape::run_loop(b, h_out, |b, oy| {
            let [j0, j1, v0, v1] = rows.taps(b, r, oy);
            let out_row = w_out.times(b, oy);
            let out_row = kernel::elem_addr(b, dst, out_row, 4);
            let input_row = |b: &mut FunctionBuilder, j: Value| {
                let at = b.ins().imul(j, w_in_v);
                kernel::elem_addr(b, src, at, 4)
            };
            if nearest {
                let j0 = b.ins().sextend(types::I64, j0);
                let row = input_row(b, j0);
                sample_row(b, scratch, row, out_row, w_out, true);
                return;
            }
            let slots = [j0, j1].map(|j| {
                let j = b.ins().sextend(types::I64, j);
                fill_slot(b, scratch, &layout, j, |b, slot| {
                    let row = input_row(b, j);
                    sample_row(b, scratch, row, slot, w_out, false);
                })
            });
            blend_rows(b, slots, [v0, v1], out_row, w_out_v);
        });
    });
    Ok(())
}
