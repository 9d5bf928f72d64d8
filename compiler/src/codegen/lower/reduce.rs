//! Reductions (ReduceSum … ReduceLogSumExp) and ArgMax/ArgMin.
//!
//! The input is viewed as alternating groups of kept and reduced axes: adjacent axes of
//! the same kind are merged (they are contiguous together) and size-1 axes dropped. The
//! innermost group then decides the loop shape:
//!
//! * **Run** (innermost group reduced): every output folds contiguous runs of input. For
//!   float32 the run is read as F32X4 into two vector accumulators (for instruction-level
//!   parallelism), combined across lanes at the end.
//! * **Columns** (innermost group kept): consecutive outputs read consecutive inputs at
//!   every reduced position, so a block of outputs is folded at once, row by row. For
//!   float32 the block is four F32X4 accumulators (16 outputs): no lane shuffling at all.
//!
//! Other dtypes use the same shapes with scalar accumulators in their computation domain
//! (f16/bf16 in f32, integers in i64, whose wrap-around on store gives numpy's modular
//! sums and products). The semantics are those of `crate::interp::reduce`: NaN
//! propagates through Max/Min, LogSumExp shifts by the largest finite element, integer
//! Mean divides the (type-wrapped) sum truncating toward zero, and an empty reduction
//! yields the reference's constants (0, 1, ∓∞ or the type's extreme, NaN for Mean).
//!
//! The fold steps and loop shapes are shared with pooling (`super::pool`).

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, Endianness, InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::{FunctionBuilder, Variable};

use super::{LowerCtx, LowerResult};
use crate::codegen::kernel::{self, domain, flags, Domain};
use crate::codegen::math;
use crate::ir::DType;
use crate::ops::{ArgReduceAttrs, ReduceAttrs, ReduceKind};

/// Bytes of one f32 and of one F32X4.
const F32_BYTES: i64 = 4;
const F32: usize = 4;
const VEC_BYTES: i64 = 16;

// ---------------------------------------------------------------------------------------
// Value helpers shared by the reduction-like lowerings (pooling, softmax, layer norm).

/// A float constant of type `ty` (F32, F64 or a splatted F32X4).
pub(super) fn fconst(b: &mut FunctionBuilder, ty: Type, v: f64) -> Value {
    match ty {
        types::F32 => b.ins().f32const(v as f32),
        types::F64 => b.ins().f64const(v),
        _ => {
            let s = b.ins().f32const(v as f32);
            b.ins().splat(ty, s)
        }
    }
}

/// `cc(x, y) ? a : c` on floats: `select` on scalars, a lane mask on vectors.
pub(super) fn fselect(
    b: &mut FunctionBuilder,
    cc: FloatCC,
    x: Value,
    y: Value,
    a: Value,
    c: Value,
) -> Value {
    let ty = b.func.dfg.value_type(a);
    let m = b.ins().fcmp(cc, x, y);
    if ty.is_vector() {
        let m = b.ins().bitcast(
            ty,
            MemFlagsData::new().with_endianness(Endianness::Little),
            m,
        );
        b.ins().bitselect(m, a, c)
    } else {
        b.ins().select(m, a, c)
    }
}

/// Folds the four lanes of an F32X4 into one f32 with `step`'s combining operation.
pub(super) fn horizontal(b: &mut FunctionBuilder, step: Step, v: Value) -> Value {
    let lanes: Vec<Value> = (0..4).map(|i| b.ins().extractlane(v, i as u8)).collect();
    let lo = merge(b, step, false, lanes[0], lanes[1]);
    let hi = merge(b, step, false, lanes[2], lanes[3]);
    merge(b, step, false, lo, hi)
}

/// A loop-carried variable initialized to `init`.
pub(super) fn var(b: &mut FunctionBuilder, init: Value) -> Variable {
    let ty = b.func.dfg.value_type(init);
    let v = b.declare_var(ty);
    b.def_var(v, init);
    v
}

/// Loads the F32X4 at `addr + offset` bytes.
pub(super) fn load_vec(b: &mut FunctionBuilder, addr: Value, offset: i64) -> Value {
    b.ins().load(types::F32X4, flags(), addr, offset as i32)
}

// ---------------------------------------------------------------------------------------
// Fold steps.

/// How one element is folded into an accumulator.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Step {
    Sum,
    AbsSum,
    SquareSum,
    Prod,
    /// NaN-propagating maximum / minimum (numpy's `maximum.reduce`).
    Max,
    Min,
    /// A maximum that NaN never wins (MaxPool, as onnxruntime).
    MaxIgnoreNan,
    /// The maximum of the finite elements (LogSumExp's shift, as the ONNX reference).
    MaxFinite,
    /// `Σ exp(x − shift)` (LogSumExp's second pass).
    ExpSum,
    /// `Σ |x|^p` (LpPool).
    PowAbsSum(f32),
}

/// The accumulator's initial value: the identity of the step's operation.
pub(super) fn identity(b: &mut FunctionBuilder, step: Step, dtype: DType, ty: Type) -> Value {
    if ty == types::I64 {
        let (lowest, highest) = int_range(dtype);
        let v = match step {
            Step::Prod => 1,
            Step::Max | Step::MaxIgnoreNan | Step::MaxFinite => lowest,
            Step::Min => highest,
            _ => 0,
        };
        return kernel::iconst(b, v);
    }
    let v = match step {
        Step::Prod => 1.0,
        Step::Max | Step::MaxIgnoreNan | Step::MaxFinite => f64::NEG_INFINITY,
        Step::Min => f64::INFINITY,
        _ => 0.0,
    };
    fconst(b, ty, v)
}

/// The smallest and largest value of an integer (or bool) dtype, as the i64 bits its
/// computation domain holds (u64's maximum is all ones).
pub(super) fn int_range(dtype: DType) -> (i64, i64) {
    let bits = 8 * dtype.size() as u32;
    match dtype {
        DType::Bool => (0, 1),
        d if d.is_signed_int() => (i64::MIN >> (64 - bits), i64::MAX >> (64 - bits)),
        _ if bits == 64 => (0, -1),
        _ => (0, ((1u64 << bits) - 1) as i64),
    }
}

/// Folds element `x` into `acc`. `shift` is the ExpSum pass's per-lane offset.
pub(super) fn fold(
    b: &mut FunctionBuilder,
    step: Step,
    signed: bool,
    acc: Value,
    x: Value,
    shift: Option<Value>,
) -> Value {
    let ty = b.func.dfg.value_type(acc);
    if ty == types::I64 {
        return fold_int(b, step, signed, acc, x);
    }
    match step {
        Step::Sum => b.ins().fadd(acc, x),
        Step::AbsSum => {
            let a = b.ins().fabs(x);
            b.ins().fadd(acc, a)
        }
        Step::SquareSum => {
            let sq = b.ins().fmul(x, x);
            b.ins().fadd(acc, sq)
        }
        Step::Prod => b.ins().fmul(acc, x),
        Step::Max => b.ins().fmax(acc, x),
        Step::Min => b.ins().fmin(acc, x),
        // An unordered comparison (x is NaN) is false, so NaN is never taken. Written as
        // `acc < x ? x : acc`, the form x86-64 lowers to one branch-free maxss/maxps.
        Step::MaxIgnoreNan => fselect(b, FloatCC::LessThan, acc, x, x, acc),
        Step::MaxFinite => {
            let inf = fconst(b, ty, f64::INFINITY);
            let neg_inf = fconst(b, ty, f64::NEG_INFINITY);
            let mag = b.ins().fabs(x);
            let finite_or_nan = fselect(b, FloatCC::Equal, mag, inf, neg_inf, x);
            b.ins().fmax(acc, finite_or_nan)
        }
        Step::ExpSum => {
            let d = match shift {
                Some(s) => b.ins().fsub(x, s),
                None => x,
            };
            let e = math::exp(b, d);
            b.ins().fadd(acc, e)
        }
        Step::PowAbsSum(p) => {
            let a = b.ins().fabs(x);
            let t = pow_const(b, a, p as f64);
            b.ins().fadd(acc, t)
        }
    }
}

fn fold_int(b: &mut FunctionBuilder, step: Step, signed: bool, acc: Value, x: Value) -> Value {
    match step {
        Step::AbsSum if signed => {
            let a = b.ins().iabs(x);
            b.ins().iadd(acc, a)
        }
        Step::SquareSum => {
            let sq = b.ins().imul(x, x);
            b.ins().iadd(acc, sq)
        }
        Step::Prod => b.ins().imul(acc, x),
        Step::Max | Step::MaxIgnoreNan | Step::MaxFinite if signed => b.ins().smax(acc, x),
        Step::Max | Step::MaxIgnoreNan | Step::MaxFinite => b.ins().umax(acc, x),
        Step::Min if signed => b.ins().smin(acc, x),
        Step::Min => b.ins().umin(acc, x),
        // Sums (|x| = x when unsigned).
        _ => b.ins().iadd(acc, x),
    }
}

/// Combines two partial accumulators of the same step.
pub(super) fn merge(
    b: &mut FunctionBuilder,
    step: Step,
    signed: bool,
    x: Value,
    y: Value,
) -> Value {
    let ty = b.func.dfg.value_type(x);
    match step {
        Step::Prod if ty == types::I64 => b.ins().imul(x, y),
        Step::Prod => b.ins().fmul(x, y),
        Step::Max | Step::MaxIgnoreNan | Step::MaxFinite if ty == types::I64 => {
            if signed {
                b.ins().smax(x, y)
            } else {
                b.ins().umax(x, y)
            }
        }
        Step::Min if ty == types::I64 => {
            if signed {
                b.ins().smin(x, y)
            } else {
                b.ins().umin(x, y)
            }
        }
        Step::Max | Step::MaxFinite => b.ins().fmax(x, y),
        Step::Min => b.ins().fmin(x, y),
        // Partial maxima of MaxIgnoreNan never hold NaN, so either order is fine.
        Step::MaxIgnoreNan => fselect(b, FloatCC::LessThan, y, x, x, y),
        _ if ty == types::I64 => b.ins().iadd(x, y),
        _ => b.ins().fadd(x, y),
    }
}

/// `x^p` for a compile-time exponent: the common cases without `pow`.
pub(super) fn pow_const(b: &mut FunctionBuilder, x: Value, p: f64) -> Value {
    let ty = b.func.dfg.value_type(x);
    if p == 1.0 {
        x
    } else if p == 2.0 {
        b.ins().fmul(x, x)
    } else if p == 0.5 {
        b.ins().sqrt(x)
    } else {
        let e = fconst(b, ty, p);
        math::pow(b, x, e)
    }
}

// ---------------------------------------------------------------------------------------
// Loop shapes.

/// How the elements are read and accumulated.
#[derive(Clone, Copy, Debug)]
pub(super) struct Elems {
    pub dtype: DType,
    /// The accumulator's scalar type: the dtype's domain, or F64 for integer L2.
    pub acc: Type,
    /// Whether F32X4 may be used (float32 in, float32 accumulators).
    pub vector: bool,
}

impl Elems {
    pub(super) fn new(dtype: DType) -> Elems {
        let acc = kernel::domain_type(domain(dtype));
        Elems {
            dtype,
            acc,
            vector: dtype == DType::F32,
        }
    }

    fn signed(&self) -> bool {
        matches!(domain(self.dtype), Domain::Int { signed: true })
    }

    fn size(&self) -> usize {
        self.dtype.size()
    }

    /// Loads element `addr + offset` bytes as an accumulator scalar.
    pub(super) fn load(&self, b: &mut FunctionBuilder, addr: Value, offset: i64) -> Value {
        let v = kernel::load_elem(b, self.dtype, addr, offset as i32);
        match domain(self.dtype) {
            Domain::Int { signed } if self.acc != types::I64 => {
                if signed {
                    b.ins().fcvt_from_sint(self.acc, v)
                } else {
                    b.ins().fcvt_from_uint(self.acc, v)
                }
            }
            _ => v,
        }
    }
}

/// The loops of one reduction after merging axes (see the module comment). Sizes and
/// strides are in elements.
#[derive(Clone, Debug)]
pub(super) struct Loops {
    /// Kept groups outside the inner one: (size, input stride, output stride).
    pub outer_kept: Vec<(usize, usize, usize)>,
    /// Reduced groups outside the inner one: (size, input stride).
    pub outer_reduced: Vec<(usize, usize)>,
    pub inner: Inner,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Inner {
    /// Each output folds a contiguous run of this many elements (per outer position).
    Run(usize),
    /// This many consecutive outputs read consecutive elements.
    Columns(usize),
}

/// Consecutive axes of the same kind, merged.
#[derive(Clone, Copy, Debug)]
struct Group {
    size: usize,
    /// The input stride of the group's innermost axis, in elements.
    stride: usize,
    reduced: bool,
}

impl Loops {
    /// The loops reducing `axes` of a contiguous tensor of `shape` (no size is 0).
    pub(super) fn new(shape: &[usize], axes: &[usize]) -> Loops {
        let strides = kernel::strides_of(shape);
        let mut groups: Vec<Group> = vec![];
        for (d, (&size, &stride)) in shape.iter().zip(&strides).enumerate() {
            if size == 1 {
                continue;
            }
            let reduced = axes.contains(&d);
            match groups.last_mut() {
                // Adjacent axes of a contiguous tensor merge into one.
                Some(g) if g.reduced == reduced => {
                    g.size *= size;
                    g.stride = stride;
                }
                _ => groups.push(Group {
                    size,
                    stride,
                    reduced,
                }),
            }
        }
        let inner = match groups.pop() {
            Some(g) if g.reduced => Inner::Run(g.size),
            Some(g) => Inner::Columns(g.size),
            None => Inner::Run(1),
        };
        let kept: Vec<Group> = groups.iter().copied().filter(|g| !g.reduced).collect();
        let inner_outputs = match inner {
            Inner::Columns(n) => n,
            Inner::Run(_) => 1,
        };
        let kept_sizes: Vec<usize> = kept.iter().map(|g| g.size).collect();
        let out_strides = kernel::strides_of(&kept_sizes);
        let outer_kept = kept
            .iter()
            .zip(out_strides)
            .map(|(g, os)| (g.size, g.stride, os * inner_outputs))
            .collect();
        let outer_reduced = groups
            .iter()
            .filter(|g| g.reduced)
            .map(|g| (g.size, g.stride))
            .collect();
        Loops {
            outer_kept,
            outer_reduced,
            inner,
        }
    }
}

/// Turns a unit's accumulators into output values: `(builder, accumulator, shift)`.
pub(super) type Finish<'a> = dyn Fn(&mut FunctionBuilder, Value, Option<Value>) -> Value + 'a;

/// What a reduction computes: an optional MaxFinite pass whose result shifts the main
/// step (LogSumExp), the main step, and the finishing function.
pub(super) struct Fold<'a> {
    pub elems: Elems,
    pub shift_pass: bool,
    pub step: Step,
    pub finish: &'a Finish<'a>,
}

/// Emits the whole reduction from `src` into `dst` (element type `out`).
pub(super) fn emit(
    b: &mut FunctionBuilder,
    loops: &Loops,
    f: &Fold,
    src: Value,
    dst: Value,
    out: DType,
) {
    let in_size = f.elems.size();
    let sizes: Vec<usize> = loops.outer_kept.iter().map(|k| k.0).collect();
    let in_strides: Vec<usize> = loops.outer_kept.iter().map(|k| k.1).collect();
    let out_strides: Vec<usize> = loops.outer_kept.iter().map(|k| k.2).collect();
    kernel::nested_loop(b, &sizes, &mut |b, idx| {
        let i = kernel::linear_offset(b, idx, &in_strides);
        let o = kernel::linear_offset(b, idx, &out_strides);
        let src = kernel::elem_addr(b, src, i, in_size);
        let dst = kernel::elem_addr(b, dst, o, out.size());
        match loops.inner {
            Inner::Run(len) => {
                let r = run_unit(b, f, src, &loops.outer_reduced, len);
                kernel::store_elem(b, out, r, dst, 0);
            }
            Inner::Columns(len) => columns(b, f, src, dst, out, &loops.outer_reduced, len),
        }
    });
}

/// One output of a Run reduction: folds `len` contiguous elements at every position of
/// `outer` (reduced groups) and finishes.
fn run_unit(
    b: &mut FunctionBuilder,
    f: &Fold,
    src: Value,
    outer: &[(usize, usize)],
    len: usize,
) -> Value {
    let shift = f
        .shift_pass
        .then(|| run_pass(b, f.elems, Step::MaxFinite, src, outer, len, None));
    let acc = run_pass(b, f.elems, f.step, src, outer, len, shift);
    (f.finish)(b, acc, shift)
}

/// Folds the elements of one Run output with `step`, returning the scalar accumulator.
pub(super) fn run_pass(
    b: &mut FunctionBuilder,
    e: Elems,
    step: Step,
    src: Value,
    outer: &[(usize, usize)],
    len: usize,
    shift: Option<Value>,
) -> Value {
    let signed = e.signed();
    let vector = e.vector && len >= 4;
    let scalar_acc = identity(b, step, e.dtype, e.acc);
    let scalar_acc = var(b, scalar_acc);
    let vec_accs: Vec<Variable> = if vector {
        let init = identity(b, step, e.dtype, types::F32X4);
        (0..2).map(|_| var(b, init)).collect()
    } else {
        vec![]
    };
    let vec_shift = match shift {
        Some(s) if vector => Some(b.ins().splat(types::F32X4, s)),
        _ => None,
    };
    let sizes: Vec<usize> = outer.iter().map(|g| g.0).collect();
    let strides: Vec<usize> = outer.iter().map(|g| g.1).collect();
    kernel::nested_loop(b, &sizes, &mut |b, idx| {
        let off = kernel::linear_offset(b, idx, &strides);
        let base = kernel::elem_addr(b, src, off, e.size());
        let mut done = 0;
        if vector {
            let n8 = len / 8 * 8;
            kernel::counted_loop(b, 0, n8 as i64, 8, |b, i| {
                let a = kernel::elem_addr(b, base, i, 4);
                for (k, acc) in vec_accs.iter().enumerate() {
                    let x = load_vec(b, a, k as i64 * VEC_BYTES);
                    let cur = b.use_var(*acc);
                    let next = fold(b, step, false, cur, x, vec_shift);
                    b.def_var(*acc, next);
                }
            });
            done = n8;
            if len - done >= 4 {
                let x = load_vec(b, base, done as i64 * F32_BYTES);
                let cur = b.use_var(vec_accs[0]);
                let next = fold(b, step, false, cur, x, vec_shift);
                b.def_var(vec_accs[0], next);
                done += 4;
            }
        }
        let fold_at = |b: &mut FunctionBuilder, addr: Value, offset: i64| {
            let x = e.load(b, addr, offset);
            let cur = b.use_var(scalar_acc);
            let next = fold(b, step, signed, cur, x, shift);
            b.def_var(scalar_acc, next);
        };
        if len - done <= 4 {
            // A short tail: unrolled at constant offsets.
            for j in done..len {
                fold_at(b, base, (j * e.size()) as i64);
            }
        } else {
            kernel::counted_loop(b, done as i64, len as i64, 1, |b, j| {
                let a = kernel::elem_addr(b, base, j, e.size());
                fold_at(b, a, 0);
            });
        }
    });
    let s = b.use_var(scalar_acc);
    if !vector {
        return s;
    }
    let v0 = b.use_var(vec_accs[0]);
    let v1 = b.use_var(vec_accs[1]);
    let v = merge(b, step, false, v0, v1);
    let h = horizontal(b, step, v);
    merge(b, step, false, h, s)
}

/// Splits `len` consecutive elements into blocks for column-wise code: calls
/// `body(b, first, lane_ty, count)` for `count` accumulators of `lane_ty` covering the
/// elements from index `first` on. float32 uses blocks of four F32X4 (16 elements), then
/// single vectors, then scalars; other types blocks of 4 scalars, then single scalars.
pub(super) fn for_blocks(
    b: &mut FunctionBuilder,
    len: usize,
    e: Elems,
    body: &mut dyn FnMut(&mut FunctionBuilder, Value, Type, usize),
) {
    let (lane_ty, lanes) = if e.vector {
        (types::F32X4, 4)
    } else {
        (e.acc, 1)
    };
    let block = lanes * 4;
    let full = len / block * block;
    kernel::counted_loop(b, 0, full as i64, block as i64, |b, c| {
        body(b, c, lane_ty, 4)
    });
    let mut done = full;
    let vectors = (len - done) / lanes;
    if vectors > 0 {
        let c = kernel::iconst(b, done as i64);
        body(b, c, lane_ty, vectors);
        done += vectors * lanes;
    }
    if done < len {
        let c = kernel::iconst(b, done as i64);
        body(b, c, e.acc, len - done);
    }
}

/// Visits `len` contiguous elements: `body(b, index, ty)` for F32X4 chunks (when
/// `vector`; `index` is the chunk's first element), then for single elements of
/// `scalar_ty`. Short tails are unrolled.
pub(super) fn for_chunks(
    b: &mut FunctionBuilder,
    len: usize,
    vector: bool,
    scalar_ty: Type,
    body: &mut dyn FnMut(&mut FunctionBuilder, Value, Type),
) {
    let mut done = 0;
    if vector {
        done = len / 4 * 4;
        kernel::counted_loop(b, 0, done as i64, 4, |b, i| body(b, i, types::F32X4));
    }
    if len - done <= 4 {
        for j in done..len {
            let i = kernel::iconst(b, j as i64);
            body(b, i, scalar_ty);
        }
    } else {
        kernel::counted_loop(b, done as i64, len as i64, 1, |b, i| body(b, i, scalar_ty));
    }
}

/// `count` accumulators of type `ty`, each covering its lanes of consecutive columns
/// whose first input element is at `src`.
#[derive(Clone, Copy)]
struct Block {
    src: Value,
    ty: Type,
    count: usize,
}

/// The Columns outputs of one outer kept position, block by block.
fn columns(
    b: &mut FunctionBuilder,
    f: &Fold,
    src: Value,
    dst: Value,
    out: DType,
    reduced: &[(usize, usize)],
    len: usize,
) {
    let e = f.elems;
    for_blocks(b, len, e, &mut |b, c, ty, count| {
        let src = kernel::elem_addr(b, src, c, e.size());
        let d = kernel::elem_addr(b, dst, c, out.size());
        column_block(b, f, Block { src, ty, count }, reduced, d, out);
    });
}

/// Folds a block over every reduced position and stores the finished results at `dst`.
fn column_block(
    b: &mut FunctionBuilder,
    f: &Fold,
    block: Block,
    reduced: &[(usize, usize)],
    dst: Value,
    out: DType,
) {
    let shifts = f
        .shift_pass
        .then(|| column_pass(b, f.elems, Step::MaxFinite, block, reduced, None));
    let accs = column_pass(b, f.elems, f.step, block, reduced, shifts.as_deref());
    let lanes = block.ty.lane_count() as usize;
    for (k, acc) in accs.into_iter().enumerate() {
        let shift = shifts.as_ref().map(|s| s[k]);
        let v = (f.finish)(b, acc, shift);
        let offset = (k * lanes * out.size()) as i32;
        if block.ty.is_vector() {
            b.ins().store(flags(), v, dst, offset);
        } else {
            kernel::store_elem(b, out, v, dst, offset);
        }
    }
}

/// One fold of a block over the reduced positions; `shifts` are ExpSum's per
/// accumulator offsets.
fn column_pass(
    b: &mut FunctionBuilder,
    e: Elems,
    step: Step,
    block: Block,
    reduced: &[(usize, usize)],
    shifts: Option<&[Value]>,
) -> Vec<Value> {
    let signed = e.signed();
    let init = identity(b, step, e.dtype, block.ty);
    let accs: Vec<Variable> = (0..block.count).map(|_| var(b, init)).collect();
    let lanes = block.ty.lane_count() as usize;
    let sizes: Vec<usize> = reduced.iter().map(|g| g.0).collect();
    let strides: Vec<usize> = reduced.iter().map(|g| g.1).collect();
    kernel::nested_loop(b, &sizes, &mut |b, idx| {
        let off = kernel::linear_offset(b, idx, &strides);
        let base = kernel::elem_addr(b, block.src, off, e.size());
        for (k, acc) in accs.iter().enumerate() {
            let offset = (k * lanes * e.size()) as i64;
            let x = if block.ty.is_vector() {
                load_vec(b, base, offset)
            } else {
                e.load(b, base, offset)
            };
            let cur = b.use_var(*acc);
            let next = fold(b, step, signed, cur, x, shifts.map(|s| s[k]));
            b.def_var(*acc, next);
        }
    });
    accs.iter().map(|a| b.use_var(*a)).collect()
}

// ---------------------------------------------------------------------------------------
// ReduceXxx.

/// The per-kind recipe: step, LogSumExp's shift pass, and the accumulator type.
fn recipe(kind: ReduceKind, dtype: DType) -> Result<(Step, bool, Elems), String> {
    let mut elems = Elems::new(dtype);
    let is_float = dtype.is_float();
    if dtype == DType::Bool && !matches!(kind, ReduceKind::Max | ReduceKind::Min) {
        return Err(format!("Reduce{kind:?} is not defined for bool"));
    }
    if !is_float && matches!(kind, ReduceKind::LogSum | ReduceKind::LogSumExp) {
        return Err(format!("Reduce{kind:?} is not defined for {dtype}"));
    }
    let step = match kind {
        ReduceKind::Sum | ReduceKind::Mean | ReduceKind::LogSum => Step::Sum,
        ReduceKind::Max => Step::Max,
        ReduceKind::Min => Step::Min,
        ReduceKind::Prod => Step::Prod,
        ReduceKind::L1 => Step::AbsSum,
        ReduceKind::L2 | ReduceKind::SumSquare => Step::SquareSum,
        ReduceKind::LogSumExp => Step::ExpSum,
    };
    if kind == ReduceKind::L2 && !is_float {
        // As the reference: the root of the sum of squares in float64, truncated back.
        elems.acc = types::F64;
        elems.vector = false;
    }
    Ok((step, kind == ReduceKind::LogSumExp, elems))
}

/// The finishing function of a float reduction of `count` elements.
fn finish_float(
    b: &mut FunctionBuilder,
    kind: ReduceKind,
    count: usize,
    acc: Value,
    shift: Option<Value>,
) -> Value {
    let ty = b.func.dfg.value_type(acc);
    match kind {
        ReduceKind::Mean => {
            let n = fconst(b, ty, count as f64);
            b.ins().fdiv(acc, n)
        }
        ReduceKind::L2 => b.ins().sqrt(acc),
        ReduceKind::LogSum => math::log(b, acc),
        ReduceKind::LogSumExp => {
            let l = math::log(b, acc);
            match shift {
                Some(s) => b.ins().fadd(l, s),
                None => l,
            }
        }
        _ => acc,
    }
}

/// The finishing function of an integer reduction of `count` elements.
fn finish_int(
    b: &mut FunctionBuilder,
    kind: ReduceKind,
    dtype: DType,
    count: usize,
    acc: Value,
) -> Value {
    let signed = dtype.is_signed_int();
    match kind {
        ReduceKind::Mean => {
            // numpy's mean with dtype=T: the sum wraps in T, then divides toward zero.
            let wrapped = wrap_to(b, dtype, acc);
            let n = kernel::iconst(b, count as i64);
            if signed {
                b.ins().sdiv(wrapped, n)
            } else {
                b.ins().udiv(wrapped, n)
            }
        }
        ReduceKind::L2 => {
            let root = b.ins().sqrt(acc);
            float_to_int_saturating(b, dtype, root)
        }
        _ => acc,
    }
}

/// Truncates an i64 domain value to `dtype`'s width and extends it back.
fn wrap_to(b: &mut FunctionBuilder, dtype: DType, v: Value) -> Value {
    if dtype.size() == 8 {
        return v;
    }
    let narrow = b.ins().ireduce(kernel::mem_type(dtype), v);
    if dtype.is_signed_int() {
        b.ins().sextend(types::I64, narrow)
    } else {
        b.ins().uextend(types::I64, narrow)
    }
}

/// An F64 value converted to `dtype` saturating (NaN → 0), as Rust's `as`: clamped to
/// the type's range first when that is narrower than i64's.
pub(super) fn float_to_int_saturating(b: &mut FunctionBuilder, dtype: DType, v: Value) -> Value {
    let (lo, hi) = int_range(dtype);
    let v = if dtype.size() < 8 {
        let lo = b.ins().f64const(lo as f64);
        let hi = b.ins().f64const(hi as f64);
        let v = b.ins().fmax(v, lo);
        let v = b.ins().fmin(v, hi);
        // fmax/fmin propagate NaN; the saturating conversion maps it to 0.
        v
    } else {
        v
    };
    if dtype.is_signed_int() {
        b.ins().fcvt_to_sint_sat(types::I64, v)
    } else {
        b.ins().fcvt_to_uint_sat(types::I64, v)
    }
}

/// The value an empty reduction produces, as the raw little-endian element.
fn empty_result(kind: ReduceKind, dtype: DType) -> Result<Vec<u8>, String> {
    if dtype.is_float() {
        let v = match kind {
            ReduceKind::Mean => f64::NAN,
            ReduceKind::Prod => 1.0,
            ReduceKind::Max | ReduceKind::LogSum | ReduceKind::LogSumExp => f64::NEG_INFINITY,
            ReduceKind::Min => f64::INFINITY,
            _ => 0.0,
        };
        return Ok(float_bytes(dtype, v));
    }
    let (lowest, highest) = int_range(dtype);
    let v = match kind {
        ReduceKind::Mean => return Err("the integer mean of an empty set is undefined".into()),
        ReduceKind::Prod => 1,
        ReduceKind::Max => lowest,
        ReduceKind::Min => highest,
        _ => 0,
    };
    Ok(v.to_le_bytes()[..dtype.size()].to_vec())
}

/// The little-endian bytes of `v` as float dtype `dtype`.
pub(super) fn float_bytes(dtype: DType, v: f64) -> Vec<u8> {
    match dtype {
        DType::F64 => v.to_le_bytes().to_vec(),
        DType::F16 => half::f16::from_f64(v).to_le_bytes().to_vec(),
        DType::BF16 => half::bf16::from_f64(v).to_le_bytes().to_vec(),
        _ => (v as f32).to_le_bytes().to_vec(),
    }
}

/// Stores the element `bytes` (1, 2, 4 or 8 of them) `n` times from `dst` on.
pub(super) fn fill(b: &mut FunctionBuilder, dst: Value, n: usize, bytes: &[u8]) {
    let mut raw = [0u8; 8];
    raw[..bytes.len()].copy_from_slice(bytes);
    let bits = i64::from_le_bytes(raw);
    let ty = match bytes.len() {
        1 => types::I8,
        2 => types::I16,
        4 => types::I32,
        _ => types::I64,
    };
    let size = bytes.len();
    kernel::counted_loop(b, 0, n as i64, 1, |b, i| {
        let v = b.ins().iconst(ty, bits);
        let a = kernel::elem_addr(b, dst, i, size);
        b.ins().store(flags(), v, a, 0);
    });
}

pub fn reduce(ctx: &mut LowerCtx, r: &ReduceAttrs) -> LowerResult {
    let x = ctx.input(0)?;
    let y = ctx.output(0);
    let rank = x.ty.rank();
    if r.axes.is_empty() || r.axes.iter().any(|&a| a >= rank) {
        return Err(format!(
            "reduction axes {:?} are invalid for rank {rank}",
            r.axes
        ));
    }
    let (step, shift_pass, elems) = recipe(r.kind, x.ty.dtype)?;
    if y.ty.numel() == 0 {
        return Ok(());
    }
    let count: usize = r.axes.iter().map(|&a| x.ty.shape[a]).product();
    if count == 0 {
        let bytes = empty_result(r.kind, x.ty.dtype)?;
        fill(ctx.b, y.ptr, y.ty.numel(), &bytes);
        return Ok(());
    }
    let loops = Loops::new(&x.ty.shape, &r.axes);
    let (kind, dtype) = (r.kind, x.ty.dtype);
    let finish = move |b: &mut FunctionBuilder, acc: Value, shift: Option<Value>| {
        if dtype.is_float() {
            finish_float(b, kind, count, acc, shift)
        } else {
            finish_int(b, kind, dtype, count, acc)
        }
    };
    let f = Fold {
        elems,
        shift_pass,
        step,
        finish: &finish,
    };
    emit(ctx.b, &loops, &f, x.ptr, y.ptr, dtype);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// ArgMax / ArgMin.

/// Whether element `v` replaces the current best `best` (numpy semantics: NaN is the
/// extreme and its first occurrence wins; `last` prefers later ties, and later NaNs).
fn arg_takes(
    b: &mut FunctionBuilder,
    dom: Domain,
    a: &ArgReduceAttrs,
    v: Value,
    best: Value,
) -> Value {
    match dom {
        Domain::Int { signed } => {
            let cc = match (a.max, a.select_last_index, signed) {
                (true, false, true) => IntCC::SignedGreaterThan,
                (true, false, false) => IntCC::UnsignedGreaterThan,
                (true, true, true) => IntCC::SignedGreaterThanOrEqual,
                (true, true, false) => IntCC::UnsignedGreaterThanOrEqual,
                (false, false, true) => IntCC::SignedLessThan,
                (false, false, false) => IntCC::UnsignedLessThan,
                (false, true, true) => IntCC::SignedLessThanOrEqual,
                (false, true, false) => IntCC::UnsignedLessThanOrEqual,
            };
            b.ins().icmp(cc, v, best)
        }
        _ => {
            // "Unordered or ..." is true when v is NaN: a NaN beats any number.
            let cc = match (a.max, a.select_last_index) {
                (true, false) => FloatCC::UnorderedOrGreaterThan,
                (true, true) => FloatCC::UnorderedOrGreaterThanOrEqual,
                (false, false) => FloatCC::UnorderedOrLessThan,
                (false, true) => FloatCC::UnorderedOrLessThanOrEqual,
            };
            let beats = b.ins().fcmp(cc, v, best);
            let best_is_nan = b.ins().fcmp(FloatCC::Unordered, best, best);
            // Once the best is NaN only a later NaN (with select_last_index) replaces it.
            let v_is_nan = b.ins().fcmp(FloatCC::Unordered, v, v);
            let after_nan = if a.select_last_index {
                v_is_nan
            } else {
                b.ins().iconst(types::I8, 0)
            };
            b.ins().select(best_is_nan, after_nan, beats)
        }
    }
}

pub fn arg_reduce(ctx: &mut LowerCtx, a: &ArgReduceAttrs) -> LowerResult {
    let x = ctx.input(0)?;
    let y = ctx.output(0);
    let shape = &x.ty.shape;
    if a.axis >= shape.len() {
        return Err(format!(
            "axis {} is out of range for rank {}",
            a.axis,
            shape.len()
        ));
    }
    if y.ty.numel() == 0 {
        return Ok(());
    }
    let n = shape[a.axis];
    if n == 0 {
        return Err("ArgMax/ArgMin of an empty axis".into());
    }
    let outer: usize = shape[..a.axis].iter().product();
    let inner: usize = shape[a.axis + 1..].iter().product();
    let dtype = x.ty.dtype;
    let dom = domain(dtype);
    let size = dtype.size() as i64;
    let b = &mut *ctx.b;
    kernel::nested_loop(b, &[outer, inner], &mut |b, idx| {
        // Element (o, 0, i) is at o * n * inner + i.
        let row = b.ins().imul_imm_s(idx[0], (n * inner) as i64);
        let first = b.ins().iadd(row, idx[1]);
        let base = kernel::elem_addr(b, x.ptr, first, dtype.size());
        let v0 = kernel::load_elem(b, dtype, base, 0);
        let best = var(b, v0);
        let zero = kernel::iconst(b, 0);
        let best_at = var(b, zero);
        kernel::counted_loop(b, 1, n as i64, 1, |b, k| {
            let addr = kernel::elem_addr(b, base, k, (inner as i64 * size) as usize);
            let v = kernel::load_elem(b, dtype, addr, 0);
            let cur = b.use_var(best);
            let take = arg_takes(b, dom, a, v, cur);
            let nb = b.ins().select(take, v, cur);
            b.def_var(best, nb);
            let cur_at = b.use_var(best_at);
            let na = b.ins().select(take, k, cur_at);
            b.def_var(best_at, na);
        });
        let out_index = b.ins().imul_imm_s(idx[0], inner as i64);
        let out_index = b.ins().iadd(out_index, idx[1]);
        let dst = kernel::elem_addr(b, y.ptr, out_index, 8);
        let r = b.use_var(best_at);
        b.ins().store(flags(), r, dst, 0);
    });
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Reductions over extents the run computes (symbolic nodes).

/// `reduce` over the run's extents: per output element, one scalar accumulator over
/// the reduced axes (merged into one loop where they trail contiguously, a global
/// pool's planes).
pub(super) fn reduce_run(ctx: &mut LowerCtx, r: &ReduceAttrs) -> LowerResult {
    use super::run_shape::{self, Ext};
    let x = ctx.input(0)?;
    let y = ctx.output(0);
    let rank = x.ty.rank();
    if r.axes.is_empty() || r.axes.iter().any(|&a| a >= rank) {
        return Err(format!(
            "reduction axes {:?} are invalid for rank {rank}",
            r.axes
        ));
    }
    let (step, shift_pass, elems) = recipe(r.kind, x.ty.dtype)?;
    let dtype = x.ty.dtype;
    if shift_pass || (!dtype.is_float() && matches!(r.kind, ReduceKind::Mean | ReduceKind::L2)) {
        return Err(format!(
            "Reduce{:?} of {dtype} has no symbolic form yet",
            r.kind
        ));
    }
    let dims = ctx.run_dims.as_ref().expect("symbolic");
    let shape = dims.shape(ctx.b, &x.ty);
    let b = &mut *ctx.b;
    let strides = run_shape::strides(b, &shape);
    let kept: Vec<usize> = (0..rank).filter(|a| !r.axes.contains(a)).collect();
    // Reduced axes that trail contiguously merge into one run of elements.
    let trailing = r
        .axes
        .iter()
        .rev()
        .zip((0..rank).rev())
        .all(|(&a, d)| a == d);
    let (reduced_shape, reduced_strides): (Vec<Ext>, Vec<Ext>) = if trailing {
        let n = Ext::product(b, &shape[r.axes[0]..]);
        (vec![n], vec![Ext::Fixed(1)])
    } else {
        (
            r.axes.iter().map(|&a| shape[a]).collect(),
            r.axes.iter().map(|&a| strides[a]).collect(),
        )
    };
    let kept_shape: Vec<Ext> = kept.iter().map(|&a| shape[a]).collect();
    let kept_strides: Vec<Ext> = kept.iter().map(|&a| strides[a]).collect();
    let out_strides = run_shape::strides(b, &kept_shape);
    let count = Ext::product(b, &reduced_shape).value(b);
    let signed = dtype.is_signed_int();
    let kind = r.kind;
    if trailing && dtype == DType::F32 && matches!(kind, ReduceKind::Sum | ReduceKind::Mean) {
        // A global pool's planes: four vector accumulators over each contiguous run.
        // Why: one scalar chain per plane ran at the add's latency, MobileNetV3's
        // squeeze-excite pools 13 times the static library's time.
        run_shape::nested_run_loop(b, &kept_shape, &mut |b, idx| {
            let base = run_shape::offset(b, idx, &kept_strides);
            let src = kernel::elem_addr(b, x.ptr, base, F32);
            let total = sum_run_f32(b, src, count);
            let result = match kind {
                ReduceKind::Mean => {
                    let n = b.ins().fcvt_from_sint(types::F32, count);
                    b.ins().fdiv(total, n)
                }
                _ => total,
            };
            let o = run_shape::offset(b, idx, &out_strides);
            let d = kernel::elem_addr(b, y.ptr, o, F32);
            b.ins().store(flags(), result, d, 0);
        });
        return Ok(());
    }
    run_shape::nested_run_loop(b, &kept_shape, &mut |b, idx| {
        let base = run_shape::offset(b, idx, &kept_strides);
        let init = identity(b, step, dtype, elems.acc);
        let acc = var(b, init);
        run_shape::nested_run_loop(b, &reduced_shape, &mut |b, ridx| {
            let off = run_shape::offset(b, ridx, &reduced_strides);
            let at = b.ins().iadd(base, off);
            let a = kernel::elem_addr(b, x.ptr, at, dtype.size());
            let v = elems.load(b, a, 0);
            let cur = b.use_var(acc);
            let next = fold(b, step, signed, cur, v, None);
            b.def_var(acc, next);
        });
        let total = b.use_var(acc);
        let result = match kind {
            ReduceKind::Mean => {
                let n = b.ins().fcvt_from_sint(elems.acc, count);
                b.ins().fdiv(total, n)
            }
            _ if dtype.is_float() => finish_float(b, kind, 0, total, None),
            _ => total,
        };
        let o = run_shape::offset(b, idx, &out_strides);
        let d = kernel::elem_addr(b, y.ptr, o, dtype.size());
        kernel::store_elem(b, dtype, result, d, 0);
    });
    Ok(())
}

/// The sum of the `n` floats at `src` (`n` an i64 the run computes): four F32X4
/// accumulators over blocks of 16, one over the remaining quads, then the lanes and
/// the last floats.
fn sum_run_f32(b: &mut FunctionBuilder, src: Value, n: Value) -> Value {
    let zero = b.ins().f32const(0.0);
    let zeros = b.ins().splat(types::F32X4, zero);
    let accs: Vec<Variable> = (0..4).map(|_| var(b, zeros)).collect();
    let blocks = b.ins().ushr_imm_u(n, 4);
    kernel::dynamic_loop(b, blocks, |b, i| {
        let at = kernel::elem_addr(b, src, i, 16 * F32);
        for (j, &acc) in accs.iter().enumerate() {
            let v = load_vec(b, at, (j * 4 * F32) as i64);
            let cur = b.use_var(acc);
            let next = b.ins().fadd(cur, v);
            b.def_var(acc, next);
        }
    });
    let quad_from = b.ins().ishl_imm_u(blocks, 2);
    let quads = b.ins().ushr_imm_u(n, 2);
    kernel::range_loop(b, quad_from, quads, |b, q| {
        let at = kernel::elem_addr(b, src, q, 4 * F32);
        let v = load_vec(b, at, 0);
        let cur = b.use_var(accs[0]);
        let next = b.ins().fadd(cur, v);
        b.def_var(accs[0], next);
    });
    let parts: Vec<Value> = accs.iter().map(|&a| b.use_var(a)).collect();
    let lo = b.ins().fadd(parts[0], parts[1]);
    let hi = b.ins().fadd(parts[2], parts[3]);
    let all = b.ins().fadd(lo, hi);
    let total = horizontal(b, Step::Sum, all);
    let sum = var(b, total);
    let tail_from = b.ins().ishl_imm_u(quads, 2);
    kernel::range_loop(b, tail_from, n, |b, k| {
        let at = kernel::elem_addr(b, src, k, F32);
        let v = b.ins().load(types::F32, flags(), at, 0);
        let cur = b.use_var(sum);
        let next = b.ins().fadd(cur, v);
        b.def_var(sum, next);
    });
    b.use_var(sum)
}
