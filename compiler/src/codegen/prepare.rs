//! A variant's preparation: the weights it derives from stored ones (see
//! `derived_weights`) are copied into their zeroed memory once, before its first
//! inference, by whichever call of the library's entry points gets there first.

use std::sync::Arc;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, Value};
use cranelift_codegen::isa::TargetIsa;
use cranelift_codegen::Context;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_module::{FuncId, Linkage, Module};
use cranelift_object::ObjectModule;

use super::derived_weights::{GROUP_WORDS, HEADER_WORDS, LOOP_WORDS, RUN_WORDS};
use super::kernel::{dynamic_loop, flags, PTR};
use super::rodata_pool::CopyJob;
use super::{define_function, define_zeroed, ptr_signature, Result};

/// Defines `nnc_copy_weights(dst, src, program)`, which runs a copy program.
pub(super) fn define_copy_program(
    module: &mut ObjectModule,
    ctx: &mut Context,
    fctx: &mut FunctionBuilderContext,
    isa: &Arc<dyn TargetIsa>,
) -> Result<FuncId> {
    let sig = ptr_signature(module, 3, false);
    define_function(
        module,
        ctx,
        fctx,
        isa,
        "nnc_copy_weights",
        Linkage::Local,
        sig,
        |b, _, p| {
            let (dst, src, program) = (p[0], p[1], p[2]);
            let groups = word(b, program, 0);
            let loops = word(b, program, 1);
            let group_table = b.ins().iadd_imm_s(program, (HEADER_WORDS * 4) as i64);
            let loop_table = table_after(b, group_table, groups, GROUP_WORDS);
            let run_table = table_after(b, loop_table, loops, LOOP_WORDS);
            dynamic_loop(b, groups, |b, gi| {
                let g = table_after(b, group_table, gi, GROUP_WORDS);
                let (count2, dst_step2) = (word(b, g, 0), word(b, g, 1));
                let (first_loop, n_loops) = (word(b, g, 2), word(b, g, 3));
                dynamic_loop(b, count2, |b, g2| {
                    dynamic_loop(b, n_loops, |b, li| {
                        let index = b.ins().iadd(first_loop, li);
                        let l = table_after(b, loop_table, index, LOOP_WORDS);
                        let (d, count, dst_step) = (word(b, l, 0), word(b, l, 1), word(b, l, 2));
                        let (first_run, n_runs) = (word(b, l, 3), word(b, l, 4));
                        let moved = b.ins().imul(g2, dst_step2);
                        let group_base = b.ins().iadd(d, moved);
                        dynamic_loop(b, count, |b, c| {
                            let moved = b.ins().imul(c, dst_step);
                            let base = b.ins().iadd(group_base, moved);
                            dynamic_loop(b, n_runs, |b, ri| {
                                let index = b.ins().iadd(first_run, ri);
                                let r = table_after(b, run_table, index, RUN_WORDS);
                                let from = word(b, r, 0);
                                let step = signed_word(b, r, 1);
                                let len = word(b, r, 2);
                                let rel = word(b, r, 3);
                                let stride = word(b, r, 4);
                                let stride = b.ins().ishl_imm_u(stride, 2);
                                let group_step = signed_word(b, r, 5);
                                let s = {
                                    let by_c = b.ins().imul(c, step);
                                    let by_g = b.ins().imul(g2, group_step);
                                    let s = b.ins().iadd(from, by_c);
                                    let s = b.ins().iadd(s, by_g);
                                    let s = b.ins().ishl_imm_u(s, 2);
                                    b.ins().iadd(src, s)
                                };
                                let t = {
                                    let t = b.ins().iadd(base, rel);
                                    let t = b.ins().ishl_imm_u(t, 2);
                                    b.ins().iadd(dst, t)
                                };
                                dynamic_loop(b, len, |b, e| {
                                    let from = b.ins().imul(e, stride);
                                    let from = b.ins().iadd(s, from);
                                    let v = b.ins().load(types::I32, flags(), from, 0);
                                    let off = b.ins().ishl_imm_u(e, 2);
                                    let to = b.ins().iadd(t, off);
                                    b.ins().store(flags(), v, to, 0);
                                });
                            });
                        });
                    });
                });
            });
            b.ins().return_(&[]);
            Ok(())
        },
    )
}

/// Word `k` of the table entry at `at`, zero-extended.
fn word(b: &mut FunctionBuilder, at: Value, k: i32) -> Value {
    let w = b.ins().load(types::I32, flags(), at, 4 * k);
    b.ins().uextend(types::I64, w)
}

/// Word `k` of the table entry at `at`, sign-extended.
fn signed_word(b: &mut FunctionBuilder, at: Value, k: i32) -> Value {
    let w = b.ins().load(types::I32, flags(), at, 4 * k);
    b.ins().sextend(types::I64, w)
}

/// The address `entries` entries of `words` words after `table`.
fn table_after(b: &mut FunctionBuilder, table: Value, entries: Value, words: usize) -> Value {
    let bytes = b.ins().imul_imm_s(entries, (words * 4) as i64);
    b.ins().iadd(table, bytes)
}

/// Defines `name()`, which runs `jobs` the first time it is called and returns at
/// once after that. A call that finds another thread's copies under way waits for
/// them to finish (the weights are read right after it returns).
pub(super) fn define_prepare(
    (module, ctx, fctx, isa): (
        &mut ObjectModule,
        &mut Context,
        &mut FunctionBuilderContext,
        &Arc<dyn TargetIsa>,
    ),
    name: &str,
    jobs: &[CopyJob],
    copy_program: FuncId,
) -> Result<FuncId> {
    // 0: not started, 1: copying, 2: done.
    let state = define_zeroed(module, &format!("{name}_state"), 4)?;
    let sig = ptr_signature(module, 0, false);
    define_function(
        module,
        ctx,
        fctx,
        isa,
        name,
        Linkage::Local,
        sig,
        |b, module, _| {
            let gv = module.declare_data_in_func(state, b.func);
            let at = b.ins().symbol_value(PTR, gv);
            let done = b.create_block();
            let start = b.create_block();
            let copy = b.create_block();
            let wait = b.create_block();
            let now = b.ins().atomic_load(types::I32, flags(), at);
            let finished = b.ins().icmp_imm_s(IntCC::Equal, now, 2);
            b.ins().brif(finished, done, &[], start, &[]);

            b.switch_to_block(start);
            b.seal_block(start);
            let zero = b.ins().iconst(types::I32, 0);
            let one = b.ins().iconst(types::I32, 1);
            let was = b.ins().atomic_cas(flags(), at, zero, one);
            let won = b.ins().icmp_imm_s(IntCC::Equal, was, 0);
            b.ins().brif(won, copy, &[], wait, &[]);

            b.switch_to_block(copy);
            b.seal_block(copy);
            let f = module.declare_func_in_func(copy_program, b.func);
            for job in jobs {
                let mut address = |id| {
                    let gv = module.declare_data_in_func(id, b.func);
                    b.ins().symbol_value(PTR, gv)
                };
                let (dst, src, program) =
                    (address(job.dst), address(job.src), address(job.program));
                b.ins().call(f, &[dst, src, program]);
            }
            let two = b.ins().iconst(types::I32, 2);
            b.ins().atomic_store(flags(), two, at);
            b.ins().jump(done, &[]);

            b.switch_to_block(wait);
            let now = b.ins().atomic_load(types::I32, flags(), at);
            let finished = b.ins().icmp_imm_s(IntCC::Equal, now, 2);
            b.ins().brif(finished, done, &[], wait, &[]);
            b.seal_block(wait);

            b.switch_to_block(done);
            b.seal_block(done);
            b.ins().return_(&[]);
            Ok(())
        },
    )
}
