//! ConvTranspose: every kernel tap adds `W_tap^T · X` into a strided window of the
//! output, whose bounds are static per tap, so no loop checks them. float32 does it as
//! one GEMM per (tap, input row) accumulating into the output; other dtypes with a
//! scalar loop per (input channel, output channel, tap).

use cranelift_codegen::ir::{types, InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;

use super::conv::{unravel, ConvOperands};
use super::gemm::{self, ALayout, Addend, BLayout, GemmKernel, GemmSpec, Geometry, LANES};
use super::linalg::{domain_add, domain_mul, domain_zero};
use super::{LowerCtx, LowerResult, Operand};
use crate::codegen::kernel::{self, domain, flags};
use crate::codegen::plan::conv::F32;
use crate::ir::{DType, Tensor, TensorType};
use crate::ops::{Activation, ConvTransposeAttrs};

/// ConvTranspose shapes: X `[N, C, in...]`, W `[C, Mg, k...]`, Y `[N, Mg·group, out...]`.
struct TransposeGeometry {
    batch: usize,
    group: usize,
    cg: usize,
    mg: usize,
    input: Vec<usize>,
    output: Vec<usize>,
    kernel: Vec<usize>,
    strides: Vec<usize>,
    dilations: Vec<usize>,
    pad_begin: Vec<usize>,
}

impl TransposeGeometry {
    fn new(
        c: &ConvTransposeAttrs,
        x: &TensorType,
        w: &TensorType,
        y: &TensorType,
    ) -> Result<TransposeGeometry, String> {
        let sp = x
            .rank()
            .checked_sub(2)
            .filter(|&s| s > 0)
            .ok_or("ConvTranspose input must have rank ≥ 3")?;
        let attrs_ok = c.kernel.len() == sp
            && c.strides.len() == sp
            && c.dilations.len() == sp
            && c.pads.len() == 2 * sp;
        if !attrs_ok
            || w.rank() != sp + 2
            || y.rank() != sp + 2
            || c.group == 0
            || !x.shape[1].is_multiple_of(c.group)
        {
            return Err(format!(
                "ConvTranspose attributes do not match input {x} and weight {w}"
            ));
        }
        if c.kernel.contains(&0) || c.strides.contains(&0) || c.dilations.contains(&0) {
            return Err("ConvTranspose kernel, strides and dilations must be positive".into());
        }
        if w.shape[0] != x.shape[1]
            || w.shape[2..] != c.kernel[..]
            || y.shape[1] != w.shape[1] * c.group
            || y.shape[2..] != c.output_spatial[..]
        {
            return Err(format!(
                "ConvTranspose shapes do not match: input {x}, weight {w}, output {y}"
            ));
        }
        Ok(TransposeGeometry {
            batch: x.shape[0],
            group: c.group,
            cg: x.shape[1] / c.group,
            mg: w.shape[1],
            input: x.shape[2..].to_vec(),
            output: y.shape[2..].to_vec(),
            kernel: c.kernel.clone(),
            strides: c.strides.clone(),
            dilations: c.dilations.clone(),
            pad_begin: c.pads[..sp].to_vec(),
        })
    }

    /// For kernel offset `k` along `axis`, the input range whose outputs
    /// `i·s − pad + k·d` land inside the output: empty when none do.
    fn valid_inputs(&self, axis: usize, k: usize) -> std::ops::Range<usize> {
        // In i128: strides, dilations and pads are attributes up to 2^63, and their
        // products and differences must not wrap.
        let wide = |v: usize| v as i128;
        let s = wide(self.strides[axis]);
        let shift = wide(k) * wide(self.dilations[axis]) - wide(self.pad_begin[axis]);
        // i·s + shift ∈ [0, out)  ⇔  i ∈ [ceil(−shift / s), floor((out − 1 − shift) / s)].
        let lo = ((-shift).max(0) + s - 1) / s;
        let hi_incl = (wide(self.output[axis]) - 1 - shift).div_euclid(s);
        let hi = (hi_incl + 1).clamp(0, wide(self.input[axis]));
        (lo.min(hi)) as usize..hi as usize
    }
}

pub fn conv_transpose(ctx: &mut LowerCtx, c: &ConvTransposeAttrs) -> LowerResult {
    let (x, w, y) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0));
    let bias = ctx.inputs.get(2).cloned().flatten();
    if !x.ty.dtype.is_float()
        || w.ty.dtype != x.ty.dtype
        || bias
            .as_ref()
            .is_some_and(|b| b.ty.dtype != x.ty.dtype || b.ty.numel() != y.ty.shape[1])
    {
        return Err(format!(
            "ConvTranspose operand types do not match input {}",
            x.ty
        ));
    }
    let g = TransposeGeometry::new(c, &x.ty, &w.ty, &y.ty)?;
    if y.ty.numel() == 0 {
        return Ok(());
    }
    let fma = gemm::has_fma(ctx.target);
    let ops = ConvOperands {
        x,
        w,
        bias,
        y,
        residual: None,
        activation: Activation::None,
    };
    init_output(ctx.b, &g, &ops);
    if ops.x.ty.dtype == DType::F32 {
        return transpose_gemm_taps(ctx, &g, &ops);
    }
    scatter_taps(ctx.b, &g, &ops, fma);
    Ok(())
}

/// The weights of one (group, tap) as the GEMM's A `[Mg, Cg]`: `W[grp·Cg + c, m, t]`.
/// Constant weights are packed per (group, tap) at compile time; otherwise A is read in
/// place with strides.
struct TapWeights {
    ptr: Value,
    layout: ALayout,
    /// Bytes from one group to the next, and from one tap to the next.
    group_bytes: usize,
    tap_bytes: usize,
}

fn tap_weights(
    ctx: &mut LowerCtx,
    g: &TransposeGeometry,
    w: &Operand,
    geometry: &Geometry,
) -> Result<TapWeights, String> {
    let taps: usize = g.kernel.iter().product();
    let (cg, mg) = (g.cg, g.mg);
    if let Some(Tensor::F32(values)) = &w.constant {
        let values: Vec<f32> = values.iter().copied().collect();
        let mut packed = Vec::with_capacity(values.len());
        for grp in 0..g.group {
            for t in 0..taps {
                packed.extend(gemm::pack_a(geometry, mg, cg, |m, c| {
                    values[((grp * cg + c) * mg + m) * taps + t]
                }));
            }
        }
        let ptr = ctx.weights_f32(&packed)?;
        return Ok(TapWeights {
            ptr,
            layout: ALayout::Packed,
            group_bytes: taps * mg * cg * F32,
            tap_bytes: mg * cg * F32,
        });
    }
    Ok(TapWeights {
        ptr: w.ptr,
        layout: ALayout::Strided {
            row_stride: taps,
            col_stride: mg * taps,
        },
        group_bytes: cg * mg * taps * F32,
        tap_bytes: F32,
    })
}

/// float32 ConvTranspose as one GEMM per kernel tap and input row:
/// `Y[n, grp·Mg + m, out(i, t)] += Σ_c W[grp·Cg + c, m, t] · X[n, grp·Cg + c, i]` over the
/// static range of i whose outputs land inside Y. Along the last axis consecutive
/// inputs i land `stride` apart, which the GEMM's C column stride expresses; C is also
/// its own addend, so the products accumulate onto the bias and the other taps.
fn transpose_gemm_taps(
    ctx: &mut LowerCtx,
    g: &TransposeGeometry,
    ops: &ConvOperands,
) -> LowerResult {
    let sp = g.input.len();
    let last = sp - 1;
    let taps: usize = g.kernel.iter().product();
    let in_plane: usize = g.input.iter().product();
    let out_plane: usize = g.output.iter().product();
    let (in_strides, out_strides) = (kernel::strides_of(&g.input), kernel::strides_of(&g.output));
    let (channels, maps) = (g.cg * g.group, g.mg * g.group);
    let geometry = ctx.planned_gemm()?;
    let weights = tap_weights(ctx, g, &ops.w, &geometry)?;
    let mut kernels: Vec<(GemmSpec, GemmKernel)> = vec![];
    for t in 0..taps {
        let k = unravel(t, &g.kernel);
        let ranges: Vec<std::ops::Range<usize>> =
            (0..sp).map(|d| g.valid_inputs(d, k[d])).collect();
        if ranges.iter().any(|r| r.is_empty()) {
            continue;
        }
        // A stride only matters between columns: one column takes stride 1, so huge
        // strides (that leave one input per tap) reach no size arithmetic.
        let col_stride = if ranges[last].len() > 1 {
            g.strides[last]
        } else {
            1
        };
        let rows = BLayout::Rows {
            row_stride: in_plane,
        };
        // Columns scatter with the stride: only the Cranelift kernel stores that way.
        let shape = (g.mg, ranges[last].len(), g.cg);
        let spec = GemmSpec {
            ldc: out_plane,
            c_col_stride: col_stride,
            addends: vec![Addend {
                row_stride: out_plane,
                col_stride,
                scale: 1.0,
            }],
            ..GemmSpec::product(shape, weights.layout, rows, geometry)
        };
        let index = match kernels.iter().position(|(s, _)| *s == spec) {
            Some(i) => i,
            None => {
                let kernel = GemmKernel::define(ctx, &spec)?;
                kernels.push((spec, kernel));
                kernels.len() - 1
            }
        };
        let gemm = &kernels[index].1;
        // Window start in X and Y (elements within a plane), and steps per outer axis.
        let x_start: usize = (0..sp).map(|d| ranges[d].start * in_strides[d]).sum();
        let y_start: usize = (0..sp)
            .map(|d| {
                // Inside the output (valid_inputs), though its terms may not fit alone.
                let at = ranges[d].start as i128 * g.strides[d] as i128
                    + k[d] as i128 * g.dilations[d] as i128
                    - g.pad_begin[d] as i128;
                at as usize
            })
            .zip(&out_strides)
            .map(|(o, s)| o * s)
            .sum();
        let x_steps: Vec<usize> = std::iter::once(channels * in_plane)
            .chain([g.cg * in_plane])
            .chain(in_strides[..last].iter().copied())
            .collect();
        let y_steps: Vec<usize> = std::iter::once(maps * out_plane)
            .chain([g.mg * out_plane])
            .chain((0..last).map(|d| match ranges[d].len() {
                0 | 1 => 0,
                _ => g.strides[d] * out_strides[d],
            }))
            .collect();
        let mut shape = vec![g.batch, g.group];
        shape.extend(ranges[..last].iter().map(|r| r.len()));
        let b = &mut *ctx.b;
        let (x0, y0) = (
            b.ins().iadd_imm_s(ops.x.ptr, (x_start * F32) as i64),
            b.ins().iadd_imm_s(ops.y.ptr, (y_start * F32) as i64),
        );
        let a0 = b
            .ins()
            .iadd_imm_s(weights.ptr, (t * weights.tap_bytes) as i64);
        kernel::nested_loop(b, &shape, &mut |b, idx| {
            let xo = kernel::linear_offset(b, idx, &x_steps);
            let x_row = kernel::elem_addr(b, x0, xo, F32);
            let yo = kernel::linear_offset(b, idx, &y_steps);
            let y_row = kernel::elem_addr(b, y0, yo, F32);
            let a = kernel::elem_addr(b, a0, idx[1], weights.group_bytes);
            gemm.call(b, a, x_row, y_row, &[y_row]);
        });
    }
    Ok(())
}

/// Fills `Y[n, m]` with `bias[m]` (or zero).
fn init_output(b: &mut FunctionBuilder, g: &TransposeGeometry, ops: &ConvOperands) {
    let dtype = ops.y.ty.dtype;
    let d = domain(dtype);
    let size = dtype.size();
    let maps = g.mg * g.group;
    let plane: usize = g.output.iter().product();
    kernel::nested_loop(b, &[g.batch, maps], &mut |b, idx| {
        let m = idx[1];
        let v = match &ops.bias {
            Some(bias) => {
                let a = kernel::elem_addr(b, bias.ptr, m, size);
                kernel::load_elem(b, dtype, a, 0)
            }
            None => domain_zero(b, d),
        };
        let off = kernel::linear_offset(b, idx, &[maps * plane, plane]);
        let dst = kernel::elem_addr(b, ops.y.ptr, off, size);
        let vecs = if dtype == DType::F32 {
            plane / LANES
        } else {
            0
        };
        if vecs > 0 {
            let vv = b.ins().splat(types::F32X4, v);
            kernel::counted_loop(b, 0, vecs as i64, 1, |b, i| {
                let a = kernel::elem_addr(b, dst, i, LANES * F32);
                b.ins().store(flags(), vv, a, 0);
            });
        }
        kernel::counted_loop(b, (vecs * LANES) as i64, plane as i64, 1, |b, i| {
            let a = kernel::elem_addr(b, dst, i, size);
            kernel::store_elem(b, dtype, v, a, 0);
        });
    });
}

/// `Y[n, g·Mg+m, i·s − p + k·d] += X[n, g·Cg+c, i] · W[g·Cg+c, m, k]` for every tap k,
/// over the static range of inputs i whose output lands inside Y.
fn scatter_taps(b: &mut FunctionBuilder, g: &TransposeGeometry, ops: &ConvOperands, fma: bool) {
    let dtype = ops.x.ty.dtype;
    let size = dtype.size();
    let sp = g.input.len();
    let in_plane: usize = g.input.iter().product();
    let out_plane: usize = g.output.iter().product();
    let (in_strides, out_strides) = (kernel::strides_of(&g.input), kernel::strides_of(&g.output));
    let taps: usize = g.kernel.iter().product();
    let channels = g.cg * g.group;
    let maps = g.mg * g.group;
    kernel::nested_loop(b, &[g.batch, g.group, g.cg, g.mg], &mut |b, idx| {
        let (n, grp, c, m) = (idx[0], idx[1], idx[2], idx[3]);
        let ci = b.ins().imul_imm_s(grp, g.cg as i64);
        let ci = b.ins().iadd(ci, c);
        let mo = b.ins().imul_imm_s(grp, g.mg as i64);
        let mo = b.ins().iadd(mo, m);
        let x_nc = kernel::linear_offset(b, &[n, ci], &[channels * in_plane, in_plane]);
        let x_nc = kernel::elem_addr(b, ops.x.ptr, x_nc, size);
        let y_nm = kernel::linear_offset(b, &[n, mo], &[maps * out_plane, out_plane]);
        let y_nm = kernel::elem_addr(b, ops.y.ptr, y_nm, size);
        let w_cm = kernel::linear_offset(b, &[ci, m], &[g.mg * taps, taps]);
        let w_cm = kernel::elem_addr(b, ops.w.ptr, w_cm, size);
        for t in 0..taps {
            let k = unravel(t, &g.kernel);
            let ranges: Vec<std::ops::Range<usize>> =
                (0..sp).map(|d| g.valid_inputs(d, k[d])).collect();
            if ranges.iter().any(|r| r.is_empty()) {
                continue;
            }
            let wv = kernel::load_elem(b, dtype, w_cm, (t * size) as i32);
            // First input and output element of the window, and their steps per axis.
            let x_start: usize = (0..sp).map(|d| ranges[d].start * in_strides[d]).sum();
            let y_start: i64 = (0..sp)
                .map(|d| {
                    ((ranges[d].start * g.strides[d] + k[d] * g.dilations[d]) as i64
                        - g.pad_begin[d] as i64)
                        * out_strides[d] as i64
                })
                .sum();
            let y_steps: Vec<usize> = (0..sp).map(|d| g.strides[d] * out_strides[d]).collect();
            let x0 = b.ins().iadd_imm_s(x_nc, (x_start * size) as i64);
            let y0 = b.ins().iadd_imm_s(y_nm, y_start * size as i64);
            let lens: Vec<usize> = ranges.iter().map(|r| r.len()).collect();
            let axpy = Axpy {
                dtype,
                fma,
                x_steps: &in_strides,
                y_steps: &y_steps,
                lens: &lens,
            };
            axpy.emit(b, wv, x0, y0);
        }
    });
}

/// `y[Σ t·y_steps] += w · x[Σ t·x_steps]` over the box `lens`; f32x4 along the last axis
/// when both sides are contiguous there.
struct Axpy<'a> {
    dtype: DType,
    fma: bool,
    x_steps: &'a [usize],
    y_steps: &'a [usize],
    lens: &'a [usize],
}

impl Axpy<'_> {
    fn emit(&self, b: &mut FunctionBuilder, w: Value, x0: Value, y0: Value) {
        let sp = self.lens.len();
        let size = self.dtype.size();
        let inner = self.lens[sp - 1];
        let vector = self.dtype == DType::F32
            && self.y_steps[sp - 1] == 1
            && self.x_steps[sp - 1] == 1
            && inner >= LANES;
        let wv = if vector {
            Some(b.ins().splat(types::F32X4, w))
        } else {
            None
        };
        let d = domain(self.dtype);
        kernel::nested_loop(b, &self.lens[..sp - 1], &mut |b, idx| {
            let xo = kernel::linear_offset(b, idx, &self.x_steps[..sp - 1]);
            let xr = kernel::elem_addr(b, x0, xo, size);
            let yo = kernel::linear_offset(b, idx, &self.y_steps[..sp - 1]);
            let yr = kernel::elem_addr(b, y0, yo, size);
            let mut done = 0;
            if let Some(wv) = wv {
                let vecs = inner / LANES;
                kernel::counted_loop(b, 0, vecs as i64, 1, |b, i| {
                    let xa = kernel::elem_addr(b, xr, i, LANES * F32);
                    let ya = kernel::elem_addr(b, yr, i, LANES * F32);
                    let xv = b.ins().load(types::F32X4, flags(), xa, 0);
                    let yv = b.ins().load(types::F32X4, flags(), ya, 0);
                    let r = gemm::mul_add(b, self.fma, wv, xv, yv);
                    b.ins().store(flags(), r, ya, 0);
                });
                done = vecs * LANES;
            }
            kernel::counted_loop(b, done as i64, inner as i64, 1, |b, i| {
                let xa = kernel::elem_addr(b, xr, i, self.x_steps[sp - 1] * size);
                let ya = kernel::elem_addr(b, yr, i, self.y_steps[sp - 1] * size);
                let xv = kernel::load_elem(b, self.dtype, xa, 0);
                let yv = kernel::load_elem(b, self.dtype, ya, 0);
                let p = domain_mul(b, d, w, xv);
                let r = domain_add(b, d, yv, p);
                kernel::store_elem(b, self.dtype, r, ya, 0);
            });
        });
    }
}
