//! The threaded entry points of ABI version 3: `PREFIXworkspace_size(options)` and
//! `PREFIXrun(inputs, outputs, workspace, options)`, and the task functions a thread
//! pool calls.
//!
//! A node the kernel plan split into `tasks` tasks is compiled twice: whole, as every
//! node, for `infer`, `infer_with_workspace` and `run` with no pool or one thread; and
//! as a function taking the task index as its last parameter. With a pool, `run` writes
//! the node's arguments into a launch record in the workspace and calls the pool's
//! `parallel_for` with the node's task function, which reads them back, swaps in the
//! running worker's scratch and computes one task. The split never depends on the
//! thread count, and each task computes its elements as the whole node does, so the
//! outputs never depend on the pool.
//!
//! Workspace of a run with `t > 1` threads: the arena (`model_info()->workspace_size`),
//! then the launch record, then `s − 1` scratch areas, `s = min(t, m)` where `m` is the
//! most calls any split node's `parallel_for` makes (its tasks, or its prologue's
//! parts). Slot 0 is the node's planned scratch in the arena. With `t ≤ m` a call takes
//! the slot of the worker running it; with more threads than calls it takes the slot
//! of its own index, distinct within a `parallel_for` whatever worker numbers the pool
//! hands out, so a pool of 2^31 threads needs no more workspace than one of `m`.

use std::mem::offset_of;
use std::sync::Arc;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, AbiParam, Block, InstBuilder, Signature, Value};
use cranelift_codegen::isa::TargetIsa;
use cranelift_codegen::Context;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_module::{FuncId, Linkage, Module};
use cranelift_object::ObjectModule;

use super::kernel::{flags, PTR};
use super::sample_loop::{self, SampleLayout};
use super::{define_function, plan, Result};
use nnc_runtime_abi::abi::{
    NncRunOptions, NncThreadPool, NNC_ERR_BAD_OPTIONS, NNC_ERR_DIM_OUT_OF_RANGE,
    NNC_ERR_WORKSPACE_TOO_SMALL, NNC_OK,
};

/// Offsets in `nnc_run_options` and `nnc_thread_pool`: the runtime-abi crate's
/// `#[repr(C)]` twins (see `model_info`), as i32 displacements.
const fn field(offset: usize) -> i32 {
    offset as i32
}
/// The byte just past a pointer or 64-bit field at `offset`, as the `size` that reaches it.
const fn past(offset: usize) -> i64 {
    (offset + 8) as i64
}
const OPTIONS_SIZE: i32 = field(offset_of!(NncRunOptions, size));
const OPTIONS_POOL: i32 = field(offset_of!(NncRunOptions, pool));
const OPTIONS_WORKSPACE_BYTES: i32 = field(offset_of!(NncRunOptions, workspace_bytes));
/// `size` must reach past `pool` (ABI 3's first two fields) ...
const OPTIONS_MIN_SIZE: i64 = past(offset_of!(NncRunOptions, pool));
/// ... and past `workspace_bytes` for that to be read ...
const OPTIONS_WITH_WORKSPACE_BYTES: i64 = past(offset_of!(NncRunOptions, workspace_bytes));
/// ... and past `dims` (ABI 4) for that.
const OPTIONS_DIMS: i32 = field(offset_of!(NncRunOptions, dims));
const OPTIONS_WITH_DIMS: i64 = past(offset_of!(NncRunOptions, dims));
/// `int64_t *output_shapes` (ABI 5), read when `size` reaches the end of it.
const OPTIONS_OUTPUT_SHAPES: i32 = field(offset_of!(NncRunOptions, output_shapes));
const OPTIONS_WITH_OUTPUT_SHAPES: i64 = past(offset_of!(NncRunOptions, output_shapes));

/// Where `run` finds the size of one output axis for `options->output_shapes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum AxisExtent {
    Fixed(usize),
    /// `scale` times the looped dim's value (see `sample_loop`).
    Samples {
        scale: usize,
    },
    /// The int64 a node wrote at this workspace offset: an extent the values decide.
    Counted {
        offset: usize,
    },
    /// An expression over the symbols, whose values are `symbols` bytes into the
    /// workspace (symbolic shapes).
    Symbolic {
        dim: crate::ir::Dim,
        symbols: usize,
    },
}
const POOL_CTX: i32 = field(offset_of!(NncThreadPool, ctx));
const POOL_NUM_THREADS: i32 = field(offset_of!(NncThreadPool, num_threads));
const POOL_PARALLEL_FOR: i32 = field(offset_of!(NncThreadPool, parallel_for));

/// How the split nodes run under a pool: their task functions and the workspace
/// layout beyond the arena.
pub(super) struct Pooled {
    /// Per node: its task function, when the plan split it.
    pub trampolines: Vec<Option<FuncId>>,
    /// Per node: its task count (1: not split).
    pub tasks: Vec<usize>,
    /// Per node: the parts of its task function's prologue (task indices `tasks ..
    /// tasks + parts`), 0 for none.
    pub prologues: Vec<usize>,
    /// Where the launch record starts (after the arena).
    pub record_offset: usize,
    /// Where worker 1's scratch starts, and the bytes between workers' scratch.
    pub extra_offset: usize,
    pub worker_stride: usize,
    /// The most calls one `parallel_for` of any split node makes: the scratch slots a
    /// pool of more threads than that still needs.
    pub max_parallel: usize,
}

impl Pooled {
    /// True when some node is split: only then does a pool change anything.
    pub fn any(&self) -> bool {
        self.trampolines.iter().any(Option::is_some)
    }
}

/// The launch record: the node function's arguments (without the task index), the
/// base of the workers' extra scratch, the number of threads and the index the pool's
/// indices count from (the task count while the prologue's parts run, else 0).
pub(super) fn record_bytes(max_args: usize) -> usize {
    (max_args + 3) * 8
}

/// Defines the task function of a split node: `(record, index, worker)` → computes
/// task `index` (plus the record's base index) with worker `worker`'s scratch
/// (`scratch_arg`: which argument is the scratch), or, for a node with a prologue,
/// indices `tasks ..` run its parts (before the tasks: see [`emit_pooled_launch`]); such
/// a node also gets the arena scratch it shares with its tasks as its last argument. An index past these does
/// nothing; a worker number past the pool's threads uses the last worker's scratch (a
/// pool breaking its contract gets wrong outputs, never writes outside the workspace).
#[allow(clippy::too_many_arguments)]
pub(super) fn define_trampoline(
    module: &mut ObjectModule,
    ctx: &mut Context,
    fctx: &mut FunctionBuilderContext,
    isa: &Arc<dyn TargetIsa>,
    (node_fn, name): (FuncId, &str),
    n_args: usize,
    scratch_arg: Option<usize>,
    (tasks, prologue_parts, worker_stride): (usize, usize, usize),
    max_parallel: usize,
) -> Result<FuncId> {
    let prologue = prologue_parts > 0;
    let mut sig = module.make_signature();
    sig.params.push(AbiParam::new(PTR));
    sig.params.push(AbiParam::new(types::I32));
    sig.params.push(AbiParam::new(types::I32));
    define_function(
        module,
        ctx,
        fctx,
        isa,
        name,
        Linkage::Local,
        sig,
        |b, module, p| {
            let (record, index, worker) = (p[0], p[1], p[2]);
            let index = b.ins().uextend(PTR, index);
            let call = index;
            let base = b.ins().load(PTR, flags(), record, (n_args * 8 + 16) as i32);
            let index = b.ins().iadd(index, base);
            let run = b.create_block();
            let done = b.create_block();
            let calls = tasks + prologue_parts;
            let in_range = b
                .ins()
                .icmp_imm_u(IntCC::UnsignedLessThan, index, calls as i64);
            b.ins().brif(in_range, run, &[], done, &[]);
            b.seal_block(run);
            b.switch_to_block(run);
            let mut args: Vec<Value> = (0..n_args)
                .map(|j| b.ins().load(PTR, flags(), record, (j * 8) as i32))
                .collect();
            let shared = scratch_arg.map(|j| args[j]);
            if let Some(j) = scratch_arg {
                let extra = b.ins().load(PTR, flags(), record, (n_args * 8) as i32);
                let threads = b.ins().load(PTR, flags(), record, (n_args * 8 + 8) as i32);
                // The slot: the worker's while the pool has no more threads than the
                // most calls a launch makes, else the call's own index (see the
                // module docs); clamped to the last slot either way.
                let worker = b.ins().uextend(PTR, worker);
                let cap = b.ins().iconst(PTR, max_parallel as i64);
                let many = b.ins().icmp(IntCC::UnsignedGreaterThan, threads, cap);
                let key = b.ins().select(many, call, worker);
                let slots = b.ins().umin(threads, cap);
                let last = b.ins().iadd_imm_s(slots, -1);
                let w = b.ins().umin(key, last);
                // Worker w > 0: extra + (w − 1)·stride.
                let above = b.ins().iadd_imm_s(w, -1);
                let off = b.ins().imul_imm_s(above, worker_stride as i64);
                let own = b.ins().iadd(extra, off);
                args[j] = b.ins().select(w, own, args[j]);
            }
            args.push(index);
            if let (true, Some(shared)) = (prologue, shared) {
                args.push(shared);
            }
            let fref = module.declare_func_in_func(node_fn, b.func);
            b.ins().call(fref, &args);
            b.ins().jump(done, &[]);
            b.seal_block(done);
            b.switch_to_block(done);
            b.ins().return_(&[]);
            Ok(())
        },
    )
}

/// Reads `options` (maybe NULL): jumps to `bad` on unreadable options or a broken
/// pool, to the returned block with (pool, threads) for a pool of two or more threads,
/// and falls through otherwise, with `options->size` (0 for NULL options).
fn check_options(b: &mut FunctionBuilder, options: Value, bad: Block) -> (Block, Value) {
    let pooled = b.create_block();
    b.append_block_param(pooled, PTR);
    b.append_block_param(pooled, PTR);
    let single = b.create_block();
    let read = b.create_block();
    let null = b.ins().icmp_imm_u(IntCC::Equal, options, 0);
    b.ins().brif(null, single, &[], read, &[]);
    b.seal_block(read);
    b.switch_to_block(read);
    let size = b.ins().uload32(flags(), options, OPTIONS_SIZE);
    let small = b
        .ins()
        .icmp_imm_u(IntCC::UnsignedLessThan, size, OPTIONS_MIN_SIZE);
    let size_ok = b.create_block();
    b.ins().brif(small, bad, &[], size_ok, &[]);
    b.seal_block(size_ok);
    b.switch_to_block(size_ok);
    let pool = b.ins().load(PTR, flags(), options, OPTIONS_POOL);
    let has_pool = b.create_block();
    let no_pool = b.ins().icmp_imm_u(IntCC::Equal, pool, 0);
    b.ins().brif(no_pool, single, &[], has_pool, &[]);
    b.seal_block(has_pool);
    b.switch_to_block(has_pool);
    let threads = b.ins().uload32(flags(), pool, POOL_NUM_THREADS);
    let parallel_for = b.ins().load(PTR, flags(), pool, POOL_PARALLEL_FOR);
    let no_threads = b.ins().icmp_imm_u(IntCC::Equal, threads, 0);
    let no_fn = b.ins().icmp_imm_u(IntCC::Equal, parallel_for, 0);
    let broken = b.ins().bor(no_threads, no_fn);
    let pool_ok = b.create_block();
    b.ins().brif(broken, bad, &[], pool_ok, &[]);
    b.seal_block(pool_ok);
    b.switch_to_block(pool_ok);
    let one = b.ins().icmp_imm_u(IntCC::Equal, threads, 1);
    b.ins().brif(
        one,
        single,
        &[],
        pooled,
        &[
            cranelift_codegen::ir::BlockArg::Value(pool),
            cranelift_codegen::ir::BlockArg::Value(threads),
        ],
    );
    b.seal_block(single);
    b.switch_to_block(single);
    (pooled, size_or_zero(b, options))
}

/// `options->size` when options is not NULL, else 0 (emitted in the single-thread
/// block, where only the workspace-bytes check needs it).
fn size_or_zero(b: &mut FunctionBuilder, options: Value) -> Value {
    let zero = b.ins().iconst(PTR, 0);
    let null = b.ins().icmp_imm_u(IntCC::Equal, options, 0);
    let read = b.create_block();
    let join = b.create_block();
    b.append_block_param(join, PTR);
    b.ins().brif(
        null,
        join,
        &[cranelift_codegen::ir::BlockArg::Value(zero)],
        read,
        &[],
    );
    b.seal_block(read);
    b.switch_to_block(read);
    let size = b.ins().uload32(flags(), options, OPTIONS_SIZE);
    b.ins()
        .jump(join, &[cranelift_codegen::ir::BlockArg::Value(size)]);
    b.seal_block(join);
    b.switch_to_block(join);
    b.block_params(join)[0]
}

/// Bytes a run with `threads` (≥ 2) threads needs.
fn pooled_bytes(b: &mut FunctionBuilder, pooled: &Pooled, arena: usize, threads: Value) -> Value {
    if !pooled.any() {
        return b.ins().iconst(PTR, arena as i64);
    }
    let cap = b.ins().iconst(PTR, pooled.max_parallel as i64);
    let slots = b.ins().umin(threads, cap);
    let extra = b.ins().iadd_imm_s(slots, -1);
    let extra = b.ins().imul_imm_s(extra, pooled.worker_stride as i64);
    b.ins().iadd_imm_s(extra, pooled.extra_offset as i64)
}

/// `PREFIXworkspace_size(options)`: the arena, plus the launch record and a scratch
/// area per extra worker when a pool of 2+ threads is given and some node is split.
/// Unreadable options get the arena's size (`run` then refuses them).
pub(super) fn define_workspace_size(
    module: &mut ObjectModule,
    ctx: &mut Context,
    fctx: &mut FunctionBuilderContext,
    isa: &Arc<dyn TargetIsa>,
    pooled: &Pooled,
    arena: usize,
    (name, linkage): (String, Linkage),
) -> Result<FuncId> {
    let mut sig = module.make_signature();
    sig.params.push(AbiParam::new(PTR));
    sig.returns.push(AbiParam::new(types::I64));
    define_function(module, ctx, fctx, isa, &name, linkage, sig, |b, _, p| {
        let bad = b.create_block();
        let (pooled_block, _) = check_options(b, p[0], bad);
        let base = b.ins().iconst(PTR, arena as i64);
        b.ins().return_(&[base]);
        b.switch_to_block(pooled_block);
        b.seal_block(pooled_block);
        let threads = b.block_params(pooled_block)[1];
        let bytes = pooled_bytes(b, pooled, arena, threads);
        b.ins().return_(&[bytes]);
        b.switch_to_block(bad);
        b.seal_block(bad);
        let base = b.ins().iconst(PTR, arena as i64);
        b.ins().return_(&[base]);
        Ok(())
    })
}

/// `PREFIXrun(inputs, outputs, workspace, options)`: checks the options and the
/// workspace bytes, then runs `infer_with_workspace` (no pool, or one thread) or the
/// pooled node sequence `run_pooled(inputs, outputs, workspace, pool)`. For a graph of
/// one sample (`samples`), those are the one-sample sequences, called for each sample
/// of the dim `options->dims` sets (checked against its range first).
#[allow(clippy::too_many_arguments)]
pub(super) fn define_run(
    module: &mut ObjectModule,
    ctx: &mut Context,
    fctx: &mut FunctionBuilderContext,
    isa: &Arc<dyn TargetIsa>,
    pooled: &Pooled,
    arena: usize,
    (infer_ws, run_pooled): (FuncId, FuncId),
    (samples, output_shapes, symbols): RunDims,
    (name, linkage): (String, Linkage),
) -> Result<FuncId> {
    let sig = super::ptr_signature(module, 4, true);
    define_function(
        module,
        ctx,
        fctx,
        isa,
        &name,
        linkage,
        sig,
        |b, module, p| {
            let (inputs, outputs, ws, options) = (p[0], p[1], p[2], p[3]);
            let bad = b.create_block();
            let too_small = b.create_block();
            let out_of_range = b.create_block();
            let (pooled_block, size) = check_options(b, options, bad);
            // Single thread: the workspace must hold the arena.
            let needed = b.ins().iconst(PTR, arena as i64);
            check_workspace_bytes(b, options, size, needed, too_small);
            let (r, count) = match samples {
                Some(layout) => {
                    let range = (layout.dim, layout.min, layout.max);
                    let count = dim_value(b, options, size, range, out_of_range);
                    let args = (inputs, outputs, ws);
                    let r = sample_loop::emit_loop(b, module, layout, infer_ws, args, None, count);
                    (r, Some(count))
                }
                None => {
                    symbol_values(b, (options, size, ws), symbols, out_of_range);
                    let f = module.declare_func_in_func(infer_ws, b.func);
                    let call = b.ins().call(f, &[inputs, outputs, ws]);
                    (b.inst_results(call)[0], None)
                }
            };
            write_output_shapes(b, (options, size, ws), r, count, output_shapes);
            b.ins().return_(&[r]);

            b.switch_to_block(pooled_block);
            b.seal_block(pooled_block);
            let (pool, threads) = (
                b.block_params(pooled_block)[0],
                b.block_params(pooled_block)[1],
            );
            let size = b.ins().uload32(flags(), options, OPTIONS_SIZE);
            let needed = pooled_bytes(b, pooled, arena, threads);
            check_workspace_bytes(b, options, size, needed, too_small);
            let (r, count) = match samples {
                Some(layout) => {
                    let range = (layout.dim, layout.min, layout.max);
                    let count = dim_value(b, options, size, range, out_of_range);
                    let args = (inputs, outputs, ws);
                    let r = sample_loop::emit_loop(
                        b,
                        module,
                        layout,
                        run_pooled,
                        args,
                        Some(pool),
                        count,
                    );
                    (r, Some(count))
                }
                None => {
                    symbol_values(b, (options, size, ws), symbols, out_of_range);
                    let f = module.declare_func_in_func(run_pooled, b.func);
                    let call = b.ins().call(f, &[inputs, outputs, ws, pool]);
                    (b.inst_results(call)[0], None)
                }
            };
            write_output_shapes(b, (options, size, ws), r, count, output_shapes);
            b.ins().return_(&[r]);

            for (blk, code) in [
                (bad, NNC_ERR_BAD_OPTIONS),
                (too_small, NNC_ERR_WORKSPACE_TOO_SMALL),
                (out_of_range, NNC_ERR_DIM_OUT_OF_RANGE),
            ] {
                b.switch_to_block(blk);
                b.seal_block(blk);
                let c = b.ins().iconst(types::I32, code as i64);
                b.ins().return_(&[c]);
            }
            Ok(())
        },
    )
}

/// How `run` sets the dims: the sample loop, where each output axis's size comes
/// from, and the symbols' block.
pub(super) type RunDims<'a> = (
    Option<&'a SampleLayout>,
    &'a [Vec<AxisExtent>],
    Option<&'a super::symbol_block::SymbolBlock>,
);

/// Each symbol's value (see [`dim_value`]), stored in the symbols' block of `ws`.
fn symbol_values(
    b: &mut FunctionBuilder,
    (options, size, ws): (Value, Value, Value),
    symbols: Option<&super::symbol_block::SymbolBlock>,
    out_of_range: Block,
) {
    let Some(block) = symbols else { return };
    let values: Vec<Value> = (block.ranges.iter().enumerate())
        .map(|(i, &(min, max))| dim_value(b, options, size, (i, min, max), out_of_range))
        .collect();
    // A NULL workspace is left for the node sequence to report.
    let (write, join) = (b.create_block(), b.create_block());
    let null = b.ins().icmp_imm_u(IntCC::Equal, ws, 0);
    b.ins().brif(null, join, &[], write, &[]);
    b.seal_block(write);
    b.switch_to_block(write);
    for (i, v) in values.into_iter().enumerate() {
        block.store(b, ws, i, v);
    }
    b.ins().jump(join, &[]);
    b.seal_block(join);
    b.switch_to_block(join);
}

/// After a successful run, writes every output's shape to `options->output_shapes`
/// when the options reach that field and it is not NULL.
fn write_output_shapes(
    b: &mut FunctionBuilder,
    (options, size, ws): (Value, Value, Value),
    status: Value,
    samples: Option<Value>,
    shapes: &[Vec<AxisExtent>],
) {
    if shapes.iter().all(Vec::is_empty) {
        return;
    }
    let (read, write, join) = (b.create_block(), b.create_block(), b.create_block());
    let ok = b.ins().icmp_imm_u(IntCC::Equal, status, NNC_OK as i64);
    let has_field = b.ins().icmp_imm_u(
        IntCC::UnsignedGreaterThanOrEqual,
        size,
        OPTIONS_WITH_OUTPUT_SHAPES,
    );
    let both = b.ins().band(ok, has_field);
    b.ins().brif(both, read, &[], join, &[]);
    b.seal_block(read);
    b.switch_to_block(read);
    let out = b.ins().load(PTR, flags(), options, OPTIONS_OUTPUT_SHAPES);
    let null = b.ins().icmp_imm_u(IntCC::Equal, out, 0);
    b.ins().brif(null, join, &[], write, &[]);
    b.seal_block(write);
    b.switch_to_block(write);
    let mut at = 0i32;
    for axes in shapes {
        for axis in axes {
            let v = match (axis, samples) {
                (&AxisExtent::Samples { scale }, Some(n)) => b.ins().imul_imm_s(n, scale as i64),
                (&AxisExtent::Counted { offset }, _) => {
                    let at = b.ins().iadd_imm_s(ws, offset as i64);
                    b.ins().load(types::I64, flags(), at, 0)
                }
                (&AxisExtent::Fixed(size), _) | (&AxisExtent::Samples { scale: size }, None) => {
                    b.ins().iconst(types::I64, size as i64)
                }
                (AxisExtent::Symbolic { dim, symbols }, _) => {
                    let n = dim
                        .symbols()
                        .iter()
                        .map(|s| s.0 as usize + 1)
                        .max()
                        .unwrap_or(0);
                    let values: Vec<Value> = (0..n)
                        .map(|i| {
                            b.ins()
                                .load(types::I64, flags(), ws, (symbols + 8 * i) as i32)
                        })
                        .collect();
                    super::symbol_block::Evaluator {
                        values: &values,
                        bad_divisor: None,
                    }
                    .emit(b, dim)
                }
            };
            b.ins().store(flags(), v, out, at);
            at += 8;
        }
    }
    b.ins().jump(join, &[]);
    b.seal_block(join);
    b.switch_to_block(join);
}

/// The value of dim `range.0` (a sample count): read from
/// `options->dims` when the options reach that field and it is not NULL (jumping to
/// `out_of_range` for a value outside `range.1..=range.2`), else the maximum.
fn dim_value(
    b: &mut FunctionBuilder,
    options: Value,
    size: Value,
    range: (usize, i64, i64),
    out_of_range: Block,
) -> Value {
    let zero = b.ins().iconst(PTR, 0);
    let has_field = b
        .ins()
        .icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, size, OPTIONS_WITH_DIMS);
    let read = b.create_block();
    let join = b.create_block();
    b.append_block_param(join, PTR);
    b.ins().brif(
        has_field,
        read,
        &[],
        join,
        &[cranelift_codegen::ir::BlockArg::Value(zero)],
    );
    b.seal_block(read);
    b.switch_to_block(read);
    let dims = b.ins().load(PTR, flags(), options, OPTIONS_DIMS);
    b.ins()
        .jump(join, &[cranelift_codegen::ir::BlockArg::Value(dims)]);
    b.seal_block(join);
    b.switch_to_block(join);
    let dims = b.block_params(join)[0];
    sample_loop::emit_dim_value(b, dims, range, out_of_range)
}

/// Jumps to `too_small` when the options carry a nonzero `workspace_bytes` below
/// `needed`.
fn check_workspace_bytes(
    b: &mut FunctionBuilder,
    options: Value,
    size: Value,
    needed: Value,
    too_small: Block,
) {
    let has_field = b.ins().icmp_imm_u(
        IntCC::UnsignedGreaterThanOrEqual,
        size,
        OPTIONS_WITH_WORKSPACE_BYTES,
    );
    let read = b.create_block();
    let ok = b.create_block();
    b.ins().brif(has_field, read, &[], ok, &[]);
    b.seal_block(read);
    b.switch_to_block(read);
    let bytes = b
        .ins()
        .load(types::I64, flags(), options, OPTIONS_WORKSPACE_BYTES);
    let given = b.ins().icmp_imm_u(IntCC::NotEqual, bytes, 0);
    let short = b.ins().icmp(IntCC::UnsignedLessThan, bytes, needed);
    let fail = b.ins().band(given, short);
    b.ins().brif(fail, too_small, &[], ok, &[]);
    b.seal_block(ok);
    b.switch_to_block(ok);
}

/// Emits the launch of split node `k` in the pooled sequence: its arguments into the
/// launch record, its prologue (`task_k(record, tasks, 0)`) when it has one, then
/// `pool->parallel_for(pool->ctx, tasks, task_k, record)`.
pub(super) fn emit_pooled_launch(
    b: &mut FunctionBuilder,
    module: &mut ObjectModule,
    pooled: &Pooled,
    k: usize,
    args: &[Value],
    (ws, pool): (Value, Value),
) {
    let record = b.ins().iadd_imm_s(ws, pooled.record_offset as i64);
    for (j, &a) in args.iter().enumerate() {
        b.ins().store(flags(), a, record, (j * 8) as i32);
    }
    let extra = b.ins().iadd_imm_s(ws, pooled.extra_offset as i64);
    b.ins()
        .store(flags(), extra, record, (args.len() * 8) as i32);
    let threads = b.ins().uload32(flags(), pool, POOL_NUM_THREADS);
    b.ins()
        .store(flags(), threads, record, (args.len() * 8 + 8) as i32);
    let base_at = (args.len() * 8 + 16) as i32;
    let zero = b.ins().iconst(PTR, 0);
    b.ins().store(flags(), zero, record, base_at);
    let trampoline = pooled.trampolines[k].expect("split nodes have a task function");
    let tref = module.declare_func_in_func(trampoline, b.func);
    let task = b.ins().func_addr(PTR, tref);
    let pool_ctx = b.ins().load(PTR, flags(), pool, POOL_CTX);
    let parallel_for = b.ins().load(PTR, flags(), pool, POOL_PARALLEL_FOR);
    let mut sig = Signature::new(module.isa().default_call_conv());
    sig.params.push(AbiParam::new(PTR));
    sig.params.push(AbiParam::new(types::I32));
    sig.params.push(AbiParam::new(PTR));
    sig.params.push(AbiParam::new(PTR));
    let sig_ref = b.import_signature(sig);
    let tasks = pooled.tasks[k] as i64;
    match pooled.prologues[k] {
        0 => {}
        // One part: on this thread, no fork.
        1 => {
            let index = b.ins().iconst(types::I32, tasks);
            let worker = b.ins().iconst(types::I32, 0);
            b.ins().call(tref, &[record, index, worker]);
        }
        parts => {
            let base = b.ins().iconst(PTR, tasks);
            b.ins().store(flags(), base, record, base_at);
            let n = b.ins().iconst(types::I32, parts as i64);
            b.ins()
                .call_indirect(sig_ref, parallel_for, &[pool_ctx, n, task, record]);
            b.ins().store(flags(), zero, record, base_at);
        }
    }
    let n = b.ins().iconst(types::I32, tasks);
    b.ins()
        .call_indirect(sig_ref, parallel_for, &[pool_ctx, n, task, record]);
}

/// The workspace layout beyond the arena for `tasks` and per-node scratch bytes.
pub(super) fn layout(
    arena: usize,
    tasks: &[usize],
    scratch: &[usize],
    max_args: usize,
) -> (usize, usize, usize) {
    let record_offset = arena.next_multiple_of(plan::ALIGN);
    let extra_offset = (record_offset + record_bytes(max_args)).next_multiple_of(plan::ALIGN);
    let worker_stride = tasks
        .iter()
        .zip(scratch)
        .filter(|(&t, _)| t > 1)
        .map(|(_, &s)| s.next_multiple_of(plan::ALIGN))
        .max()
        .unwrap_or(0);
    (record_offset, extra_offset, worker_stride)
}
