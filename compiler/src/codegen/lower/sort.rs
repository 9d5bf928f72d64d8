//! A stable sort of `(key, position)` pairs packed in u64s (key in the high half,
//! position in the low half), for the ops that take elements best first (TopK with k at
//! run time, NonMaxSuppression): an LSD radix sort on the key's four bytes, O(n) per
//! pass, where picking the best remaining element each round was O(n) per element.

use cranelift_codegen::ir::{types, InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;

use super::indexing::var;
use crate::codegen::kernel::{self, flags};

/// Sorts the `m` (run-time) u64 pairs at `pairs` by their high 32 bits, ascending;
/// pairs of one key keep their order (so pairs written in position order come out by
/// key, then position). `scratch` holds `plan::scratch::sort_scratch` bytes for at least `m` pairs.
pub fn sort_by_key(b: &mut FunctionBuilder, pairs: Value, scratch: Value, m: Value) {
    let other = scratch;
    let counts_at = b.ins().imul_imm_s(m, 8);
    let counts = b.ins().iadd(scratch, counts_at);
    // Four passes: the sorted pairs end where they started.
    let (mut from, mut to) = (pairs, other);
    for pass in 0..4 {
        let shift = 32 + 8 * pass;
        let zero = kernel::iconst(b, 0);
        kernel::counted_loop(b, 0, 256, 1, |b, d| {
            let at = kernel::elem_addr(b, counts, d, 8);
            b.ins().store(flags(), zero, at, 0);
        });
        kernel::dynamic_loop(b, m, |b, i| {
            let at = kernel::elem_addr(b, from, i, 8);
            let v = b.ins().load(types::I64, flags(), at, 0);
            let digit = digit_of(b, v, shift);
            let c = kernel::elem_addr(b, counts, digit, 8);
            let n = b.ins().load(types::I64, flags(), c, 0);
            let n = b.ins().iadd_imm_s(n, 1);
            b.ins().store(flags(), n, c, 0);
        });
        // Counts to starting offsets.
        let total = var(b, zero);
        kernel::counted_loop(b, 0, 256, 1, |b, d| {
            let at = kernel::elem_addr(b, counts, d, 8);
            let n = b.ins().load(types::I64, flags(), at, 0);
            let t = b.use_var(total);
            b.ins().store(flags(), t, at, 0);
            let t = b.ins().iadd(t, n);
            b.def_var(total, t);
        });
        kernel::dynamic_loop(b, m, |b, i| {
            let at = kernel::elem_addr(b, from, i, 8);
            let v = b.ins().load(types::I64, flags(), at, 0);
            let digit = digit_of(b, v, shift);
            let c = kernel::elem_addr(b, counts, digit, 8);
            let slot = b.ins().load(types::I64, flags(), c, 0);
            // A count never exceeds m, so the slot is inside the buffer.
            let dst = kernel::elem_addr(b, to, slot, 8);
            b.ins().store(flags(), v, dst, 0);
            let next = b.ins().iadd_imm_s(slot, 1);
            b.ins().store(flags(), next, c, 0);
        });
        std::mem::swap(&mut from, &mut to);
    }
}

fn digit_of(b: &mut FunctionBuilder, v: Value, shift: i64) -> Value {
    let d = b.ins().ushr_imm_u(v, shift);
    b.ins().band_imm_u(d, 0xff)
}
