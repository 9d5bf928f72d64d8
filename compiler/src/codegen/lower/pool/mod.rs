//! Max, average and Lp pooling, N-d over NC[D]HW.
//!
//! Semantics (as `crate::interp::pool`): padding never contributes (MaxPool treats it as
//! −∞ and a NaN input never wins, AveragePool sums real inputs only), AveragePool divides
//! by the number of real inputs in the window or, with `count_include_pad`, by the
//! number of window positions inside the padded input, and LpPool is `(Σ |x|^p)^(1/p)`.
//!
//! Along each spatial axis the outputs split at compile time into the *interior*, whose
//! windows lie entirely inside the input, and the *border* (windows touching padding or,
//! with ceil_mode, past the end). The output space is covered by one loop nest per
//! combination of interior/border choices: interior axes use the full kernel with
//! compile-time tap offsets (small kernels are unrolled into loads at immediate offsets
//! from one window address); border axes read, per output, the first valid tap, the
//! number of valid taps and the padded count from a read-only table. float32 windows
//! along an interior innermost axis with stride 1 are computed four outputs at a time in
//! F32X4; with stride 2 too, each tap's four inputs being the even lanes of two vector
//! loads. Global pooling (a window covering the whole plane) is a contiguous reduction
//! and goes through the reduction kernels (`super::reduce`).

use cranelift_codegen::ir::{types, InstBuilder, Type, Value};
use cranelift_frontend::FunctionBuilder;

use super::reduce::{self, fconst, fold, identity, load_vec, var, Elems, Fold, Inner, Loops, Step};
use super::{LowerCtx, LowerResult, Operand};
use crate::codegen::kernel::{self, domain, flags, Domain};
use crate::codegen::math;
use crate::codegen::plan::pool::PoolStrategy;
use crate::codegen::plan::Strategy;
use crate::ir::DType;
use crate::ops::{PoolAttrs, PoolKind};

/// The separable 2-D max pool, a strategy of its own.
mod maxpool2d;

/// Static tap loops are unrolled while the unrolled window has at most this many taps.
const UNROLL_TAPS: usize = 64;

pub fn pool(ctx: &mut LowerCtx, p: &PoolAttrs) -> LowerResult {
    let x = ctx.input(0)?;
    let y = ctx.output(0);
    let shape = &x.ty.shape;
    let spatial = shape
        .len()
        .checked_sub(2)
        .filter(|&s| s > 0)
        .ok_or("pooling needs an input of rank ≥ 3 (N, C, spatial...)")?;
    check_attrs(p, spatial)?;
    let dtype = x.ty.dtype;
    let (step, elems) = recipe(p.kind, dtype)?;
    if y.ty.numel() == 0 {
        return Ok(());
    }
    let in_spatial = &shape[2..];
    if in_spatial.contains(&0) {
        return Err("cannot pool an empty spatial input".into());
    }
    let planes = shape[0] * shape[1];
    match ctx.kernel.strategy {
        Strategy::Pool(PoolStrategy::Global) => return global(ctx.b, p.kind, &x, &y),
        Strategy::Pool(PoolStrategy::SeparableMax(isa)) => {
            return maxpool2d::max_pool(ctx, p, &x, &y, isa)
        }
        Strategy::Pool(PoolStrategy::Windows) => {}
        _ => return Err("no pooling kernel was planned for this node".into()),
    }
    let mut axes: Vec<AxisWindows> = (0..spatial)
        .map(|a| AxisWindows::new(p, a, in_spatial[a]))
        .collect();
    let table = border_table(ctx, &mut axes)?;
    let g = Gen {
        elems,
        step,
        kind: p.kind,
        axes,
        in_strides: kernel::strides_of(in_spatial),
        out_strides: kernel::strides_of(&p.output_spatial),
        table,
    };
    let in_plane = in_spatial.iter().product::<usize>() * dtype.size();
    let out_plane = p.output_spatial.iter().product::<usize>() * dtype.size();
    let b = &mut *ctx.b;
    kernel::counted_loop(b, 0, planes as i64, 1, |b, plane| {
        let src = kernel::elem_addr(b, x.ptr, plane, in_plane);
        let dst = kernel::elem_addr(b, y.ptr, plane, out_plane);
        for choice in g.regions() {
            let start = Window {
                src,
                dst,
                taps: vec![],
                count: Count::default(),
            };
            g.region(b, &choice, 0, start);
        }
    });
    Ok(())
}

fn check_attrs(p: &PoolAttrs, spatial: usize) -> LowerResult {
    let lens = [
        p.kernel.len(),
        p.strides.len(),
        p.dilations.len(),
        p.output_spatial.len(),
        p.pads.len() / 2,
    ];
    if lens.iter().any(|&l| l != spatial) || p.pads.len() != 2 * spatial {
        return Err(format!(
            "pooling attributes do not match the {spatial} spatial axes: {p:?}"
        ));
    }
    if [&p.kernel, &p.strides, &p.dilations]
        .iter()
        .any(|v| v.contains(&0))
    {
        return Err("kernel, strides and dilations must be positive".into());
    }
    Ok(())
}

/// The fold step and element handling of a pool kind on `dtype`.
fn recipe(kind: PoolKind, dtype: DType) -> Result<(Step, Elems), String> {
    let step = match kind {
        PoolKind::Max => Step::MaxIgnoreNan,
        PoolKind::Average { .. } => Step::Sum,
        PoolKind::Lp { p: 1.0 } => Step::AbsSum,
        PoolKind::Lp { p: 2.0 } => Step::SquareSum,
        PoolKind::Lp { p } => Step::PowAbsSum(p),
    };
    if dtype == DType::Bool || (!dtype.is_float() && kind != PoolKind::Max) {
        return Err(format!("{kind:?} pooling is not defined for {dtype}"));
    }
    Ok((step, Elems::new(dtype)))
}

/// Global pooling: one contiguous reduction per plane.
fn global(b: &mut FunctionBuilder, kind: PoolKind, x: &Operand, y: &Operand) -> LowerResult {
    let (step, elems) = recipe(kind, x.ty.dtype)?;
    let planes = x.ty.shape[0] * x.ty.shape[1];
    let plane: usize = x.ty.shape[2..].iter().product();
    let loops = Loops {
        outer_kept: vec![(planes, plane, 1)],
        outer_reduced: vec![],
        inner: Inner::Run(plane),
    };
    let finish = move |b: &mut FunctionBuilder, acc: Value, _: Option<Value>| {
        let ty = b.func.dfg.value_type(acc);
        let divisor = fconst(b, ty, plane as f64);
        finish(b, kind, acc, Some(divisor))
    };
    let f = Fold {
        elems,
        shift_pass: false,
        step,
        finish: &finish,
    };
    reduce::emit(b, &loops, &f, x.ptr, y.ptr, elems.dtype);
    Ok(())
}

/// The pooled value from the folded accumulator; `divisor` is AveragePool's count.
fn finish(b: &mut FunctionBuilder, kind: PoolKind, acc: Value, divisor: Option<Value>) -> Value {
    match kind {
        PoolKind::Max => acc,
        PoolKind::Average { .. } => match divisor {
            Some(d) => b.ins().fdiv(acc, d),
            None => acc,
        },
        PoolKind::Lp { p: 1.0 } => acc,
        PoolKind::Lp { p: 2.0 } => b.ins().sqrt(acc),
        PoolKind::Lp { p } => reduce::pow_const(b, acc, 1.0 / p as f64),
    }
}

// ---------------------------------------------------------------------------------------
// Windows along one axis.

/// A border output along one axis: its index, first valid input index, number of valid
/// taps and number of taps inside the padded input.
#[derive(Clone, Copy, Debug)]
struct BorderOut {
    o: usize,
    first: usize,
    taps: usize,
    padded: usize,
}

#[derive(Clone, Debug)]
struct AxisWindows {
    kernel: usize,
    stride: usize,
    dilation: usize,
    pad_begin: usize,
    /// The input's length along the axis.
    size: usize,
    /// Outputs whose window lies entirely inside the input.
    interior: std::ops::Range<usize>,
    border: Vec<BorderOut>,
    /// The index of this axis' first border row in the shared table.
    table_row: usize,
}

impl AxisWindows {
    fn new(p: &PoolAttrs, a: usize, size: usize) -> AxisWindows {
        let spatial = p.kernel.len();
        let (k, s, d) = (p.kernel[a], p.strides[a], p.dilations[a]);
        let (pb, pe) = (p.pads[a], p.pads[spatial + a]);
        let mut interior: Option<std::ops::Range<usize>> = None;
        let mut border = vec![];
        for o in 0..p.output_spatial[a] {
            // Window taps sit at `start + t·d` (input coordinates), t in 0..k.
            let start = (o * s) as i64 - pb as i64;
            let (first_tap, end_tap) = valid_taps(start, k, d, size);
            if first_tap == 0 && end_tap == k {
                let r = interior.get_or_insert(o..o);
                r.end = o + 1;
                continue;
            }
            // In padded coordinates tap t sits at o·s + t·d; it counts while inside.
            // (Counted in closed form: a kernel may have 2^40 taps.)
            let padded = (size + pb + pe)
                .checked_sub(o * s)
                .map_or(0, |room| room.div_ceil(d).min(k));
            let first = (start + (first_tap * d) as i64).max(0) as usize;
            border.push(BorderOut {
                o,
                first,
                taps: end_tap.saturating_sub(first_tap),
                padded,
            });
        }
        AxisWindows {
            kernel: k,
            stride: s,
            dilation: d,
            pad_begin: pb,
            size,
            interior: interior.unwrap_or(0..0),
            border,
            table_row: 0,
        }
    }
}

/// The taps `first..end` of a window starting at input coordinate `start` that fall
/// inside `[0, size)` (an empty range when none does).
fn valid_taps(start: i64, k: usize, d: usize, size: usize) -> (usize, usize) {
    let d = d as i64;
    let first = if start >= 0 { 0 } else { (-start + d - 1) / d };
    let last = size as i64 - 1 - start; // the furthest tap offset still inside
    let end = if last < 0 {
        0
    } else {
        (last / d + 1).min(k as i64)
    };
    let first = first.min(k as i64) as usize;
    (first, (end as usize).max(first))
}

/// Puts every axis' border rows `[o, first, taps, padded]` (i64) in read-only data and
/// notes where each axis' rows start.
fn border_table(ctx: &mut LowerCtx, axes: &mut [AxisWindows]) -> Result<Option<Value>, String> {
    if axes.iter().all(|a| a.border.is_empty()) {
        return Ok(None);
    }
    let mut bytes = vec![];
    let mut rows = 0;
    for a in axes.iter_mut() {
        a.table_row = rows;
        rows += a.border.len();
        for r in &a.border {
            for v in [r.o, r.first, r.taps, r.padded] {
                bytes.extend((v as i64).to_le_bytes());
            }
        }
    }
    ctx.rodata(bytes).map(Some)
}

// ---------------------------------------------------------------------------------------
// Code generation.

/// Which outputs of an axis a loop nest covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Choice {
    Interior,
    Border,
}

/// How the taps of the current window run along one axis.
#[derive(Clone, Copy, Debug)]
enum Taps {
    /// The full kernel: `count` taps `step` bytes apart.
    Static { count: usize, step: i64 },
    /// A runtime number of taps `step` bytes apart.
    Dynamic { count: Value, step: i64 },
}

/// AveragePool's divisor: a compile-time factor times runtime factors.
#[derive(Clone, Debug, Default)]
struct Count {
    fixed: Option<usize>,
    runtime: Vec<Value>,
}

impl Count {
    fn times(&self, c: usize) -> Count {
        Count {
            fixed: Some(self.fixed.unwrap_or(1) * c),
            runtime: self.runtime.clone(),
        }
    }

    fn times_value(&self, v: Value) -> Count {
        let mut runtime = self.runtime.clone();
        runtime.push(v);
        Count {
            fixed: self.fixed,
            runtime,
        }
    }

    /// The product as a float of type `ty`.
    fn emit(&self, b: &mut FunctionBuilder, ty: Type) -> Value {
        let fixed = self.fixed.unwrap_or(1);
        let Some((&first, rest)) = self.runtime.split_first() else {
            return fconst(b, ty, fixed as f64);
        };
        let mut n = first;
        for &v in rest {
            n = b.ins().imul(n, v);
        }
        if fixed != 1 {
            n = b.ins().imul_imm_s(n, fixed as i64);
        }
        let scalar = ty.lane_type();
        let f = b.ins().fcvt_from_sint(scalar, n);
        if ty.is_vector() {
            b.ins().splat(ty, f)
        } else {
            f
        }
    }
}

/// The state of the loop nest down to some axis: the window's first input address, the
/// output address, the tap loops of the axes so far and the divisor.
#[derive(Clone)]
struct Window {
    src: Value,
    dst: Value,
    taps: Vec<Taps>,
    count: Count,
}

struct Gen {
    elems: Elems,
    step: Step,
    kind: PoolKind,
    axes: Vec<AxisWindows>,
    in_strides: Vec<usize>,
    out_strides: Vec<usize>,
    table: Option<Value>,
}

impl Gen {
    /// Every combination of interior/border over the axes that has outputs.
    fn regions(&self) -> Vec<Vec<Choice>> {
        let mut all: Vec<Vec<Choice>> = vec![vec![]];
        for a in &self.axes {
            let mut options = vec![];
            if !a.interior.is_empty() {
                options.push(Choice::Interior);
            }
            if !a.border.is_empty() {
                options.push(Choice::Border);
            }
            all = all
                .iter()
                .flat_map(|prefix| {
                    options
                        .iter()
                        .map(move |&c| [prefix.clone(), vec![c]].concat())
                })
                .collect();
        }
        all
    }

    fn size(&self) -> usize {
        self.elems.dtype.size()
    }

    /// Emits the loops of axis `axis` onwards for one region.
    fn region(&self, b: &mut FunctionBuilder, choice: &[Choice], axis: usize, w: Window) {
        if axis == self.axes.len() {
            self.element(b, self.elems.acc, &w, false);
            return;
        }
        let a = &self.axes[axis];
        let size = self.size() as i64;
        let in_stride = self.in_strides[axis] as i64 * size;
        let out_stride = self.out_strides[axis] as i64 * size;
        let tap_step = a.dilation as i64 * in_stride;
        let innermost = axis + 1 == self.axes.len();
        match choice[axis] {
            Choice::Interior => {
                let (lo, hi) = (a.interior.start, a.interior.end);
                // Window start of output o: (o·s − pad) · stride, in bytes.
                let at = |b: &mut FunctionBuilder, w: &Window, o: Value| {
                    let first = b.ins().imul_imm_s(o, a.stride as i64 * in_stride);
                    let first = b.ins().iadd_imm_s(first, -(a.pad_begin as i64) * in_stride);
                    let src = b.ins().iadd(w.src, first);
                    let out = b.ins().imul_imm_s(o, out_stride);
                    let dst = b.ins().iadd(w.dst, out);
                    let mut taps = w.taps.clone();
                    taps.push(Taps::Static {
                        count: a.kernel,
                        step: tap_step,
                    });
                    Window {
                        src,
                        dst,
                        taps,
                        count: w.count.times(a.kernel),
                    }
                };
                let mut done = lo;
                // Four consecutive outputs read four consecutive inputs at every tap
                // (stride 1), or the even lanes of eight (stride 2).
                let groups = match a.stride {
                    1 => (hi - lo) / 4,
                    2 => {
                        // Stride 2 loads inputs 2o − pad + t·d .. +7 for the group at o:
                        // they must stay inside the row (the last row ends the buffer).
                        let reach = 8 + (a.kernel - 1) * a.dilation;
                        let last_start = (a.size + a.pad_begin).checked_sub(reach).map(|l| l / 2);
                        match last_start {
                            Some(l) if l >= lo => ((l - lo) / 4 + 1).min((hi - lo) / 4),
                            _ => 0,
                        }
                    }
                    _ => 0,
                };
                if innermost && self.elems.vector && groups > 0 {
                    done = lo + groups * 4;
                    let deinterleave = a.stride == 2;
                    kernel::counted_loop(b, lo as i64, done as i64, 4, |b, o| {
                        let inner = at(b, &w, o);
                        self.element(b, types::F32X4, &inner, deinterleave);
                    });
                }
                kernel::counted_loop(b, done as i64, hi as i64, 1, |b, o| {
                    let inner = at(b, &w, o);
                    self.region(b, choice, axis + 1, inner);
                });
            }
            Choice::Border => {
                let table = self.table.expect("border rows have a table");
                kernel::counted_loop(b, 0, a.border.len() as i64, 1, |b, j| {
                    let row = b.ins().iadd_imm_s(j, a.table_row as i64);
                    let row = kernel::elem_addr(b, table, row, 32);
                    let load = |b: &mut FunctionBuilder, field: i32| {
                        b.ins().load(types::I64, flags(), row, 8 * field)
                    };
                    let (o, first, taps, padded) = (load(b, 0), load(b, 1), load(b, 2), load(b, 3));
                    let first = b.ins().imul_imm_s(first, in_stride);
                    let src = b.ins().iadd(w.src, first);
                    let out = b.ins().imul_imm_s(o, out_stride);
                    let dst = b.ins().iadd(w.dst, out);
                    let mut tap_list = w.taps.clone();
                    tap_list.push(Taps::Dynamic {
                        count: taps,
                        step: tap_step,
                    });
                    let counted = match self.kind {
                        PoolKind::Average {
                            count_include_pad: true,
                        } => padded,
                        _ => taps,
                    };
                    let inner = Window {
                        src,
                        dst,
                        taps: tap_list,
                        count: w.count.times_value(counted),
                    };
                    self.region(b, choice, axis + 1, inner);
                });
            }
        }
    }

    /// One output (or four along the innermost axis when `ty` is F32X4): fold the
    /// window's taps, finish and store. `deinterleave`: the four outputs' inputs are the
    /// even lanes of eight consecutive floats (stride 2).
    fn element(&self, b: &mut FunctionBuilder, ty: Type, w: &Window, deinterleave: bool) {
        let e = self.elems;
        let signed = matches!(domain(e.dtype), Domain::Int { signed: true });
        let init = identity(b, self.step, e.dtype, ty);
        let acc = var(b, init);
        let step = self.step;
        let unrolled = unroll_depth(&w.taps);
        visit_taps(b, &w.taps, unrolled, w.src, 0, &mut |b, addr, offset| {
            let x = if ty.is_vector() && deinterleave {
                let lo = load_vec(b, addr, offset);
                let hi = load_vec(b, addr, offset + 16);
                let evens = core::array::from_fn(|i| ((i / 4) * 8 + i % 4) as u8);
                math::shuffle_f32x4(b, lo, hi, evens)
            } else if ty.is_vector() {
                load_vec(b, addr, offset)
            } else {
                e.load(b, addr, offset)
            };
            let cur = b.use_var(acc);
            let next = fold(b, step, signed, cur, x, None);
            b.def_var(acc, next);
        });
        let acc = b.use_var(acc);
        let divisor = matches!(self.kind, PoolKind::Average { .. }).then(|| w.count.emit(b, ty));
        let r = finish(b, self.kind, acc, divisor);
        if ty.is_vector() {
            b.ins().store(flags(), r, w.dst, 0);
        } else {
            kernel::store_elem(b, e.dtype, r, w.dst, 0);
        }
    }
}

/// The number of innermost tap axes to unroll: static ones, while the unrolled window
/// stays within [`UNROLL_TAPS`].
fn unroll_depth(taps: &[Taps]) -> usize {
    let mut product = 1usize;
    let mut depth = 0;
    for t in taps.iter().rev() {
        match *t {
            Taps::Static { count, .. } if product.saturating_mul(count) <= UNROLL_TAPS => {
                product *= count;
                depth += 1;
            }
            _ => break,
        }
    }
    depth
}

/// Calls `visit(b, addr, offset)` for every tap of the window; the innermost `unrolled`
/// axes are unrolled into compile-time offsets, the others are loops.
fn visit_taps(
    b: &mut FunctionBuilder,
    taps: &[Taps],
    unrolled: usize,
    addr: Value,
    offset: i64,
    visit: &mut dyn FnMut(&mut FunctionBuilder, Value, i64),
) {
    let Some((first, rest)) = taps.split_first() else {
        visit(b, addr, offset);
        return;
    };
    match *first {
        Taps::Static { count, step } if taps.len() <= unrolled => {
            for t in 0..count {
                visit_taps(b, rest, unrolled, addr, offset + t as i64 * step, visit);
            }
        }
        Taps::Static { count, step } => kernel::counted_loop(b, 0, count as i64, 1, |b, t| {
            let a = b.ins().imul_imm_s(t, step);
            let a = b.ins().iadd(addr, a);
            visit_taps(b, rest, unrolled, a, offset, visit);
        }),
        Taps::Dynamic { count, step } => kernel::dynamic_loop(b, count, |b, t| {
            let a = b.ins().imul_imm_s(t, step);
            let a = b.ins().iadd(addr, a);
            visit_taps(b, rest, unrolled, a, offset, visit);
        }),
    }
}
