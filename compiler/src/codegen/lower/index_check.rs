//! Indices read from a tensor at run time (Gather, GatherElements, GatherND,
//! ScatterElements, ScatterND and every op the importer builds from them): how such an
//! index becomes a position on its axis of `dim` elements.
//!
//! A negative index counts from the end. One outside `[-dim, dim)` either makes the
//! node return `NNC_ERR_INDEX_OUT_OF_RANGE` (`--index-checks error`, the default: one
//! unsigned compare and a branch per index, taken before the index is used, so nothing
//! outside a buffer is ever read or written) or is clamped into the axis
//! (`--index-checks clamp`, nnc's behaviour before ABI version 2).

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{Block, InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;

use super::Operand;
use crate::codegen::kernel;
use crate::codegen::IndexChecks;
use crate::ir::DType;
use crate::ops::Op;

/// What the node does with an index outside its axis.
#[derive(Clone, Copy, Debug)]
pub enum OnBadIndex {
    /// Clamp it into `[0, dim)`.
    Clamp,
    /// Branch to this block, which returns `NNC_ERR_INDEX_OUT_OF_RANGE`.
    Fail(Block),
}

/// Whether the node function of `op` must check the indices it reads and so can fail
/// (it then returns an i32 status). Indices that are a constant of the model were
/// either folded or are clamped as before: only data can be bad at run time.
pub fn node_checks_indices(op: &Op, indices_constant: bool, mode: IndexChecks) -> bool {
    // Slice's and Split's other inputs are read at run time even when input 1 is not.
    let run_time =
        !indices_constant || matches!(op, Op::SliceRunTime { .. } | Op::SplitRunTime { .. });
    mode == IndexChecks::Error && reads_runtime_indices(op) && run_time
}

/// The ops whose input 1 holds indices into input 0 (or into the output), or, TopK's,
/// a count of its axis, or, Slice's and Split's, positions and extents on its axes, or,
/// Choose's (input 0), which candidate to take.
fn reads_runtime_indices(op: &Op) -> bool {
    matches!(
        op,
        Op::Gather { .. }
            | Op::GatherElements { .. }
            | Op::GatherND { .. }
            | Op::ScatterElements { .. }
            | Op::ScatterND { .. }
            | Op::TopKRunTime { .. }
            | Op::ReduceRunTimeAxes { .. }
            | Op::ReshapeByAxes { .. }
            | Op::SliceRunTime { .. }
            | Op::SplitRunTime { .. }
            | Op::Choose { .. }
    )
}

/// The position on an axis of `dim > 0` elements of index `i` (an i64 in the
/// computation domain) read from `indices`.
pub fn resolve(
    b: &mut FunctionBuilder,
    indices: &Operand,
    i: Value,
    dim: usize,
    on_bad: OnBadIndex,
) -> Value {
    match on_bad {
        OnBadIndex::Clamp => clamp(b, i, dim),
        OnBadIndex::Fail(fail) => {
            let i = if is_unsigned(indices.ty.dtype) {
                i
            } else {
                wrap_negative(b, i, dim)
            };
            check(b, i, dim, fail);
            i
        }
    }
}

/// For a gather of whole slices by `indices` (one index per slice, into an axis of
/// `dim`): checked indices are all checked once before anything is written, so the
/// copy loop reads each with [`gathered_index`] and no branch.
pub fn check_gather_indices(
    b: &mut FunctionBuilder,
    indices: &Operand,
    dim: usize,
    on_bad: OnBadIndex,
) {
    if matches!(on_bad, OnBadIndex::Fail(_)) {
        let idx_ty = indices.ty.dtype;
        kernel::counted_loop(b, 0, indices.ty.numel() as i64, 1, |b, j| {
            let ia = kernel::elem_addr(b, indices.ptr, j, idx_ty.size());
            let i = kernel::load_elem(b, idx_ty, ia, 0);
            resolve(b, indices, i, dim, on_bad);
        });
    }
}

/// Index `j` of `indices` as a position on an axis of `dim`, after
/// [`check_gather_indices`]: clamped, or (already checked) only wrapped if negative.
pub fn gathered_index(
    b: &mut FunctionBuilder,
    indices: &Operand,
    j: Value,
    dim: usize,
    on_bad: OnBadIndex,
) -> Value {
    let idx_ty = indices.ty.dtype;
    let ia = kernel::elem_addr(b, indices.ptr, j, idx_ty.size());
    let i = kernel::load_elem(b, idx_ty, ia, 0);
    match on_bad {
        OnBadIndex::Clamp => resolve(b, indices, i, dim, on_bad),
        OnBadIndex::Fail(_) if is_unsigned(idx_ty) => i,
        OnBadIndex::Fail(_) => wrap_negative(b, i, dim),
    }
}

/// `i + dim` for a negative `i`, else `i`.
pub fn wrap_negative(b: &mut FunctionBuilder, i: Value, dim: usize) -> Value {
    let wrapped = b.ins().iadd_imm_s(i, dim as i64);
    let neg = b.ins().icmp_imm_s(IntCC::SignedLessThan, i, 0);
    b.ins().select(neg, wrapped, i)
}

/// Branches to `fail` unless `0 <= i < dim` (one unsigned compare: a negative `i` is
/// a huge unsigned one).
pub fn check(b: &mut FunctionBuilder, i: Value, dim: usize, fail: Block) {
    let bad = b
        .ins()
        .icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, i, dim as i64);
    let ok = b.create_block();
    b.ins().brif(bad, fail, &[], ok, &[]);
    b.seal_block(ok);
    b.switch_to_block(ok);
}

/// [`check`] against an extent only the run knows.
pub fn check_below(b: &mut FunctionBuilder, i: Value, dim: Value, fail: Block) {
    let bad = b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, i, dim);
    let ok = b.create_block();
    b.ins().brif(bad, fail, &[], ok, &[]);
    b.seal_block(ok);
    b.switch_to_block(ok);
}

/// Wraps a negative index and clamps it into `[0, dim)`: a bad index reads or writes a
/// wrong element of the tensor but never memory outside it.
fn clamp(b: &mut FunctionBuilder, i: Value, dim: usize) -> Value {
    let i = wrap_negative(b, i, dim);
    let zero = kernel::iconst(b, 0);
    let i = b.ins().smax(i, zero);
    let last = kernel::iconst(b, dim as i64 - 1);
    b.ins().smin(i, last)
}

/// Whether `dtype` indices are read without sign (no negative wrap).
pub fn is_unsigned(dtype: DType) -> bool {
    dtype.is_int() && !dtype.is_signed_int()
}
