//! Resize (nearest, linear, cubic; every coordinate transform), with the semantics of
//! `onnx/reference/ops/op_resize.py` (as `crate::interp::resize`).
//!
//! Shapes, scales and the roi are compile-time constants, so everything about the
//! coordinates is computed here, in Rust and in f64 exactly as the reference does: for
//! every resized axis and output index, the `n` source indices (edge-clamped, already
//! multiplied into byte offsets), their weights (after `exclude_outside`) and whether
//! the output is replaced (tf_crop_and_resize's extrapolation, or a window whose taps
//! were all excluded). These rows go to read-only data and one generic loop nest reads
//! them: each resized axis loads its row once per output index, outside the loops of
//! the inner axes.
//!
//! Interpolation is separable, `Σ_t w_t · Σ_u w_u · … x[i_t, i_u, …]`, evaluated in
//! f64 and rounded once to the output type (integers: half to even, saturating, as the
//! reference's `saturate_cast`). Nearest copies elements bit for bit and copies runs of
//! unresized trailing axes as whole blocks.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::FunctionBuilder;

use super::movement::copy_bytes;
use super::reduce::{float_bytes, float_to_int_saturating};
use super::{LowerCtx, LowerResult};
use crate::codegen::kernel::{self, domain, flags, Domain};
use crate::codegen::math;
use crate::ir::DType;
use crate::ops::resize_sampling::{
    axis_scale, first_neighbour, is_close, source_coordinate, tap_weights,
};
use crate::ops::{CoordinateTransform, ResizeAttrs, ResizeMode};

/// Row flags: how an output index along an axis is produced.
const NORMAL: i64 = 0;
const EXTRAPOLATED: i64 = 1;
const ZERO: i64 = 2;

pub fn resize(ctx: &mut LowerCtx, r: &ResizeAttrs) -> LowerResult {
    let x = ctx.input(0)?;
    let y = ctx.output(0);
    let rank = x.ty.rank();
    check_attrs(r, rank, &y.ty.shape)?;
    if y.ty.numel() == 0 {
        return Ok(());
    }
    let dtype = x.ty.dtype;
    if dtype == DType::Bool && r.mode != ResizeMode::Nearest {
        return Err("linear and cubic Resize are not defined for bool".into());
    }
    let elem = dtype.size();
    let in_strides = kernel::strides_of(&x.ty.shape);
    let mut axes = vec![];
    for (a, &stride) in in_strides.iter().enumerate() {
        super::check_table_axis("Resize's input", x.ty.shape[a])?;
        super::check_table_axis("Resize's output", r.output_shape[a])?;
        let taps = AxisTaps::new(r, a, x.ty.shape[a], r.output_shape[a])?;
        let stride_bytes = (stride * elem) as i64;
        axes.push(match taps {
            None => Axis::Identity {
                size: r.output_shape[a],
                stride: stride_bytes,
            },
            Some(t) => {
                let table =
                    ctx.rodata(t.table_bytes(stride_bytes, r.mode == ResizeMode::Nearest))?;
                Axis::Resized {
                    size: r.output_shape[a],
                    n: t.n(r.mode),
                    table,
                    replaces: t.replaces(),
                }
            }
        });
    }
    let run = copy_run(r.mode, &axes, elem);
    let g = Gen {
        dtype,
        mode: r.mode,
        loop_axes: axes.len() - run.map_or(0, |r| r.0),
        run: run.map(|r| r.1),
        axes,
        out_strides: kernel::strides_of(&r.output_shape)
            .iter()
            .map(|&s| (s * elem) as i64)
            .collect(),
        fill: element_bytes(dtype, r.extrapolation_value as f64),
        zero: element_bytes(dtype, 0.0),
        extrapolation: r.extrapolation_value as f64,
        src: x.ptr,
    };
    let mut leaf = Leaf {
        base: None,
        levels: vec![],
    };
    g.level(ctx.b, 0, y.ptr, &mut leaf);
    Ok(())
}

fn check_attrs(r: &ResizeAttrs, rank: usize, out_shape: &[usize]) -> LowerResult {
    if r.scales.len() != rank
        || r.output_shape.len() != rank
        || out_shape != r.output_shape.as_slice()
    {
        return Err(format!(
            "scales {:?} and output shape {:?} must have {rank} entries",
            r.scales, r.output_shape
        ));
    }
    if !r.roi.is_empty() && r.roi.len() != 2 * rank {
        return Err(format!("roi {:?} must have {} entries", r.roi, 2 * rank));
    }
    if r.coordinate_transform == CoordinateTransform::TfCropAndResize && r.roi.is_empty() {
        return Err("tf_crop_and_resize needs a roi".into());
    }
    Ok(())
}

/// A constant of `dtype` as the reference's saturate_cast makes it.
fn element_bytes(dtype: DType, v: f64) -> Vec<u8> {
    if dtype.is_float() {
        return float_bytes(dtype, v);
    }
    let v = v.round_ties_even();
    let bits: i64 = match dtype {
        DType::Bool => i64::from(v != 0.0),
        DType::U64 => (v as u64) as i64,
        d if d.is_signed_int() => {
            let (lo, hi) = super::reduce::int_range(d);
            (v as i64).clamp(lo, hi)
        }
        d => {
            let (_, hi) = super::reduce::int_range(d);
            (v as i64).clamp(0, hi)
        }
    };
    bits.to_le_bytes()[..dtype.size()].to_vec()
}

// ---------------------------------------------------------------------------------------
// Coordinates (compile time, f64, as the reference).

/// One resized axis: per output index, `n` clamped source indices and weights, and the
/// row's flag.
struct AxisTaps {
    n: usize,
    indices: Vec<usize>,
    weights: Vec<f64>,
    flags: Vec<i64>,
}

impl AxisTaps {
    /// `None` when the axis is unchanged (the reference skips it).
    fn new(
        r: &ResizeAttrs,
        axis: usize,
        input: usize,
        output: usize,
    ) -> Result<Option<AxisTaps>, String> {
        let rank = r.scales.len();
        let roi = (!r.roi.is_empty()).then(|| (r.roi[axis], r.roi[rank + axis]));
        let scale = axis_scale(r.scales[axis], input, output);
        let trivial_roi =
            roi.is_none_or(|(start, end)| is_close(start.into(), 0.0) && is_close(end.into(), 1.0));
        if is_close(scale, 1.0) && output == input && trivial_roi {
            return Ok(None);
        }
        if input == 0 {
            return Err(format!("cannot resize the empty axis {axis} to {output}"));
        }
        let n = match r.mode {
            ResizeMode::Nearest | ResizeMode::Linear => 2,
            ResizeMode::Cubic => 4,
        };
        let mut t = AxisTaps {
            n,
            indices: vec![],
            weights: vec![],
            flags: vec![],
        };
        for y in 0..output {
            let (x, extrapolated) =
                source_coordinate(r.coordinate_transform, y, scale, input, output, roi);
            let mut w = tap_weights(r, x);
            let first = first_neighbour(x, n);
            let mut all_excluded = false;
            if r.exclude_outside {
                for (j, wj) in w.iter_mut().enumerate() {
                    if !(0..input as i64).contains(&first.saturating_add(j as i64)) {
                        *wj = 0.0;
                    }
                }
                let total: f64 = w.iter().sum();
                all_excluded = total == 0.0;
                let total = if all_excluded { 1.0 } else { total };
                w.iter_mut().for_each(|wj| *wj /= total);
            }
            for (j, &wj) in w.iter().enumerate() {
                t.indices
                    .push(first.saturating_add(j as i64).clamp(0, input as i64 - 1) as usize);
                t.weights.push(wj);
            }
            t.flags.push(if extrapolated {
                EXTRAPOLATED
            } else if all_excluded {
                ZERO
            } else {
                NORMAL
            });
        }
        Ok(Some(t))
    }

    /// Taps read per output: nearest keeps only the neighbour its one-hot weight picks.
    fn n(&self, mode: ResizeMode) -> usize {
        if mode == ResizeMode::Nearest {
            1
        } else {
            self.n
        }
    }

    fn replaces(&self) -> bool {
        self.flags.iter().any(|&f| f != NORMAL)
    }

    /// Rows of `[n byte offsets (i64), n weights (f64), flag (i64)]`; nearest rows are
    /// `[offset, flag]`.
    fn table_bytes(&self, stride: i64, nearest: bool) -> Vec<u8> {
        let mut bytes = vec![];
        for (o, &flag) in self.flags.iter().enumerate() {
            let row = o * self.n..(o + 1) * self.n;
            if nearest {
                // The weight that is 1 picks the neighbour.
                let j = row
                    .clone()
                    .find(|&j| self.weights[j] == 1.0)
                    .unwrap_or(row.start);
                bytes.extend((self.indices[j] as i64 * stride).to_le_bytes());
            } else {
                for j in row.clone() {
                    bytes.extend((self.indices[j] as i64 * stride).to_le_bytes());
                }
                for j in row {
                    bytes.extend(self.weights[j].to_le_bytes());
                }
            }
            bytes.extend(flag.to_le_bytes());
        }
        bytes
    }
}

// ---------------------------------------------------------------------------------------
// Code generation.

enum Axis {
    /// Output index o reads input index o (`stride` bytes apart).
    Identity { size: usize, stride: i64 },
    /// Output index o reads the taps of row o of `table`.
    Resized {
        size: usize,
        n: usize,
        table: Value,
        replaces: bool,
    },
}

/// For nearest without replaced outputs: the number of trailing unresized axes and
/// the bytes they span, copied as one block per output position of the others.
fn copy_run(mode: ResizeMode, axes: &[Axis], elem: usize) -> Option<(usize, usize)> {
    if mode != ResizeMode::Nearest
        || axes
            .iter()
            .any(|a| matches!(a, Axis::Resized { replaces: true, .. }))
    {
        return None;
    }
    let mut count = 0;
    let mut elems = 1;
    for a in axes.iter().rev() {
        match a {
            Axis::Identity { size, .. } => {
                count += 1;
                elems *= size;
            }
            Axis::Resized { .. } => break,
        }
    }
    (count > 0).then_some((count, elems * elem))
}

/// The taps of one resized axis at the current output index.
struct Level {
    offsets: Vec<Value>,
    weights: Vec<Value>,
    flag: Option<Value>,
}

/// What the loops above the innermost level have computed: the byte offset contributed
/// by unresized axes and the resized axes' taps.
struct Leaf {
    base: Option<Value>,
    levels: Vec<Level>,
}

struct Gen {
    dtype: DType,
    mode: ResizeMode,
    axes: Vec<Axis>,
    /// Output strides in bytes.
    out_strides: Vec<i64>,
    /// The axes with loops; below them the leaf writes one element, or copies `run`
    /// bytes (see [`copy_run`]).
    loop_axes: usize,
    run: Option<usize>,
    /// The extrapolation value and zero as raw elements (for nearest).
    fill: Vec<u8>,
    zero: Vec<u8>,
    /// The extrapolation value linear and cubic interpolate with.
    extrapolation: f64,
    src: Value,
}

impl Gen {
    /// Emits the loop of `axis` and everything inside it, writing from `dst` on.
    fn level(&self, b: &mut FunctionBuilder, axis: usize, dst: Value, leaf: &mut Leaf) {
        if axis == self.loop_axes {
            match self.run {
                Some(bytes) => {
                    let src = self.nearest_addr(b, leaf);
                    copy_bytes(b, dst, src, bytes);
                }
                None => self.element(b, dst, leaf),
            }
            return;
        }
        let out_stride = self.out_strides[axis];
        match self.axes[axis] {
            Axis::Identity { size, stride } => {
                kernel::counted_loop(b, 0, size as i64, 1, |b, o| {
                    let off = b.ins().imul_imm_s(o, stride);
                    let saved = leaf.base;
                    leaf.base = Some(match saved {
                        Some(base) => b.ins().iadd(base, off),
                        None => off,
                    });
                    let d = b.ins().imul_imm_s(o, out_stride);
                    let d = b.ins().iadd(dst, d);
                    self.level(b, axis + 1, d, leaf);
                    leaf.base = saved;
                })
            }
            Axis::Resized {
                size,
                n,
                table,
                replaces,
            } => kernel::counted_loop(b, 0, size as i64, 1, |b, o| {
                let row_len = if self.mode == ResizeMode::Nearest {
                    2
                } else {
                    2 * n + 1
                };
                let row = kernel::elem_addr(b, table, o, row_len * 8);
                let load = |b: &mut FunctionBuilder, ty, i: usize| {
                    b.ins().load(ty, flags(), row, (8 * i) as i32)
                };
                let offsets = (0..n).map(|t| load(b, types::I64, t)).collect();
                let weights = if self.mode == ResizeMode::Nearest {
                    vec![]
                } else {
                    (0..n).map(|t| load(b, types::F64, n + t)).collect()
                };
                let flag = replaces.then(|| load(b, types::I64, row_len - 1));
                leaf.levels.push(Level {
                    offsets,
                    weights,
                    flag,
                });
                let d = b.ins().imul_imm_s(o, out_stride);
                let d = b.ins().iadd(dst, d);
                self.level(b, axis + 1, d, leaf);
                leaf.levels.pop();
            }),
        }
    }

    /// The input address nearest mode reads for the current output.
    fn nearest_addr(&self, b: &mut FunctionBuilder, leaf: &Leaf) -> Value {
        let mut addr = match leaf.base {
            Some(base) => b.ins().iadd(self.src, base),
            None => self.src,
        };
        for l in &leaf.levels {
            addr = b.ins().iadd(addr, l.offsets[0]);
        }
        addr
    }

    /// Computes and stores one output element at `dst`.
    fn element(&self, b: &mut FunctionBuilder, dst: Value, leaf: &Leaf) {
        let mem = kernel::mem_type(self.dtype);
        if self.mode == ResizeMode::Nearest {
            let addr = self.nearest_addr(b, leaf);
            let v = b.ins().load(mem, flags(), addr, 0);
            let fill = raw_const(b, mem, &self.fill);
            let zero = raw_const(b, mem, &self.zero);
            let v = self.replace(b, leaf, v, fill, zero);
            b.ins().store(flags(), v, dst, 0);
            return;
        }
        let base = match leaf.base {
            Some(base) => b.ins().iadd(self.src, base),
            None => self.src,
        };
        let sum = self.interpolate(b, &leaf.levels, base);
        let fill = b.ins().f64const(self.extrapolation);
        let zero = b.ins().f64const(0.0);
        let v = self.replace(b, leaf, sum, fill, zero);
        let v = self.round_to_domain(b, v);
        kernel::store_elem(b, self.dtype, v, dst, 0);
    }

    /// The interpolated value in f64, summed in the reference's order: axis by axis
    /// from the first resized axis, so the first axis' taps are the innermost sum.
    fn interpolate(&self, b: &mut FunctionBuilder, levels: &[Level], addr: Value) -> Value {
        let Some((last, outer)) = levels.split_last() else {
            let v = kernel::load_elem(b, self.dtype, addr, 0);
            return self.to_f64(b, v);
        };
        weighted_sum(b, &last.weights, |b, t| {
            let a = b.ins().iadd(addr, last.offsets[t]);
            self.interpolate(b, outer, a)
        })
    }

    /// Applies the replaced rows of the resized axes, as the reference, which resizes
    /// axis after axis: a replaced row sets the value, and later axes interpolate that
    /// value with their own weights.
    fn replace(
        &self,
        b: &mut FunctionBuilder,
        leaf: &Leaf,
        v: Value,
        fill: Value,
        zero: Value,
    ) -> Value {
        if leaf.levels.iter().all(|l| l.flag.is_none()) {
            return v;
        }
        // The replacement so far (meaningful once `replaced` is set).
        let mut replacement = zero;
        let mut replaced = b.ins().iconst(types::I8, 0);
        for l in &leaf.levels {
            if !l.weights.is_empty() {
                replacement = weighted_sum(b, &l.weights, |_, _| replacement);
            }
            let Some(flag) = l.flag else { continue };
            let is_fill = b.ins().icmp_imm_s(IntCC::Equal, flag, EXTRAPOLATED);
            let is_zero = b.ins().icmp_imm_s(IntCC::Equal, flag, ZERO);
            replacement = b.ins().select(is_zero, zero, replacement);
            replacement = b.ins().select(is_fill, fill, replacement);
            let here = b.ins().icmp_imm_s(IntCC::NotEqual, flag, NORMAL);
            replaced = b.ins().bor(replaced, here);
        }
        b.ins().select(replaced, replacement, v)
    }

    fn to_f64(&self, b: &mut FunctionBuilder, v: Value) -> Value {
        match domain(self.dtype) {
            Domain::F64 => v,
            Domain::F32 => b.ins().fpromote(types::F64, v),
            Domain::Int { signed: true } => b.ins().fcvt_from_sint(types::F64, v),
            Domain::Int { signed: false } => b.ins().fcvt_from_uint(types::F64, v),
        }
    }

    /// Rounds an f64 result to the output's computation domain.
    fn round_to_domain(&self, b: &mut FunctionBuilder, v: Value) -> Value {
        match domain(self.dtype) {
            Domain::F64 => v,
            Domain::F32 => b.ins().fdemote(types::F32, v),
            Domain::Int { .. } => {
                let r = math::round_half_even(b, v);
                float_to_int_saturating(b, self.dtype, r)
            }
        }
    }
}

/// `Σ_t w_t · term(t)`, accumulated left to right (as numpy's per-tap updates).
fn weighted_sum(
    b: &mut FunctionBuilder,
    weights: &[Value],
    mut term: impl FnMut(&mut FunctionBuilder, usize) -> Value,
) -> Value {
    let mut sum: Option<Value> = None;
    for (t, &w) in weights.iter().enumerate() {
        let v = term(b, t);
        let product = b.ins().fmul(v, w);
        sum = Some(match sum {
            Some(s) => b.ins().fadd(s, product),
            None => product,
        });
    }
    sum.expect("every resized axis has taps")
}

/// The raw element `bytes` as a value of memory type `mem`.
fn raw_const(b: &mut FunctionBuilder, mem: types::Type, bytes: &[u8]) -> Value {
    let mut raw = [0u8; 8];
    raw[..bytes.len()].copy_from_slice(bytes);
    let bits = i64::from_le_bytes(raw);
    match mem {
        types::F32 => {
            let i = b.ins().iconst(types::I32, bits);
            b.ins().bitcast(types::F32, MemFlagsData::new(), i)
        }
        types::F64 => {
            let i = b.ins().iconst(types::I64, bits);
            b.ins().bitcast(types::F64, MemFlagsData::new(), i)
        }
        ty => b.ins().iconst(ty, bits),
    }
}
