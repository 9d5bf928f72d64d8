//! One variant of a library: the kernel and memory plans, node functions and entry
//! points of the graph for one CPU feature set. A single-variant library is one of
//! these with the exported names; a multi-versioned one (`--cpu` a list, and the
//! x86-64 default) holds several under local names, which its exported entry points
//! choose between by the running CPU's features. The variants share the module's
//! read-only data and machine-code pools (both keyed by content, so a packed weight or
//! a kernel that two variants ask for in the same form is stored once) and the
//! weights read as they are.

use std::sync::Arc;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder};
use cranelift_codegen::isa::TargetIsa;
use cranelift_codegen::Context;
use cranelift_frontend::FunctionBuilderContext;
use cranelift_module::{FuncId, Linkage, Module};
use cranelift_object::ObjectModule;

use super::kernel::{flags, PTR};
use super::lower::{self, LowerCtx, Operand};
use super::machine_code_pool::MachineCodePool;
use super::plan::{self, KernelPlan, MemoryPlan};
use super::rodata_pool::RodataPool;
use super::row_loops::RowLoops;
use super::FunctionPool;
use super::{
    codegen_err, cpu_check, define_expand_f16, define_exported_infer_with_workspace,
    define_infer_with_workspace, define_pooled_function, load_operand_table, node_excerpt,
    output_extents, ptr_signature, run, sample_loop, symbol_block, value_is_used, CompileOptions,
    NodeSequence, Target, WeightFormat,
};
use crate::error::{NncError, Result};
use crate::ir::Graph;
use crate::ops::Op;
use crate::progress::{Progress, Task};
use nnc_runtime_abi::abi::{NNC_ERR_INDEX_OUT_OF_RANGE, NNC_OK};

/// Names of a variant's functions: as they always were in a single-variant library,
/// `nnc_v{i}_...` for variant `i` of a multi-versioned one.
#[derive(Clone, Copy)]
pub(super) struct Names {
    variant: Option<usize>,
}

impl Names {
    pub(super) fn new(variant: Option<usize>) -> Names {
        Names { variant }
    }

    /// A variant after the first: its read-only data requests reuse the blobs of the
    /// first without counting again as reads (for the sharing report).
    fn later(&self) -> bool {
        self.variant.is_some_and(|i| i > 0)
    }

    /// `name` (`nnc_...`) as this variant's local symbol.
    pub(super) fn local(&self, name: &str) -> String {
        match (self.variant, name.strip_prefix("nnc_")) {
            (Some(i), Some(rest)) => format!("nnc_v{i}_{rest}"),
            _ => name.to_string(),
        }
    }

    /// An entry point `PREFIX{what}`: exported from a single-variant library, local
    /// (`nnc_v{i}_{what}`) in a multi-versioned one, whose exported one dispatches.
    fn entry(&self, prefix: &str, what: &str) -> (String, Linkage) {
        match self.variant {
            None => (format!("{prefix}{what}"), Linkage::Export),
            Some(i) => (format!("nnc_v{i}_{what}"), Linkage::Local),
        }
    }
}

/// What every variant's lowering adds to: the pools and which constants the code reads
/// (every variant's reads, so the weights are laid out once for all).
pub(super) struct Shared {
    pub(super) rodata: RodataPool,
    pub(super) functions: FunctionPool,
    pub(super) machine_code: MachineCodePool,
    pub(super) const_read: Vec<bool>,
    pub(super) ctx: Context,
    pub(super) fctx: FunctionBuilderContext,
}

/// A variant whose nodes are lowered.
pub(super) struct Variant {
    pub(super) target: Target,
    pub(super) isa: Arc<dyn TargetIsa>,
    pub(super) names: Names,
    kernels: KernelPlan,
    pub(super) plan: MemoryPlan,
    pub(super) symbols: Option<symbol_block::SymbolBlock>,
    symbolic_nodes: Vec<bool>,
    node_fns: Vec<Option<FuncId>>,
    /// Split nodes' task functions (see `run.rs`).
    task_fns: Vec<Option<FuncId>>,
    /// Per split node: its arguments without the task index, and which is the scratch.
    task_args: Vec<Option<(usize, Option<usize>)>>,
    expand: Option<FuncId>,
}

/// The entry points of one variant.
pub(super) struct Entries {
    /// `infer_with_workspace(inputs, outputs, workspace)`.
    pub(super) infer_with_workspace: FuncId,
    /// `run(inputs, outputs, workspace, options)`.
    pub(super) run: FuncId,
    /// `workspace_size(options)`.
    pub(super) workspace_size: FuncId,
}

/// What the variants' node sequences share.
pub(super) struct Common {
    pub(super) weights: cranelift_module::DataId,
    pub(super) copy_fn: FuncId,
    /// `vzeroupper`, where some variant has AVX.
    pub(super) clear_upper: Option<FuncId>,
    pub(super) cpu_check: Option<cpu_check::CpuCheck>,
}

/// Plans `graph` for `target` and lowers its nodes (`lowered`: the graph code is
/// generated from, see [`RowLoops`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn lower(
    module: &mut ObjectModule,
    shared: &mut Shared,
    (graph, lowered, row_loops): (&Graph, &Graph, &RowLoops),
    opts: &CompileOptions,
    target: Target,
    names: Names,
    progress: &dyn Progress,
) -> Result<Variant> {
    let isa = target.isa("speed")?;
    let Shared {
        rodata,
        functions,
        machine_code,
        const_read,
        ctx,
        fctx,
    } = shared;
    rodata.begin_variant(names.variant);
    let mut kernels = plan::plan_kernels_for(lowered, &target, &opts.kernels, opts.weights);
    for (k, l) in row_loops.loops.iter().enumerate() {
        if let Some(l) = l {
            kernels.run_whole(k, l.whole);
        }
    }
    // Nodes over symbolic extents run whole, reading the symbols' values (see
    // `symbol_block`).
    let symbolic_nodes: Vec<bool> = lowered
        .nodes
        .iter()
        .map(|n| {
            matches!(n.op, Op::DimValues { .. })
                || (n.inputs.iter().flatten().chain(&n.outputs))
                    .any(|v| lowered.ty(*v).dims.is_some())
        })
        .collect();
    for (k, &symbolic) in symbolic_nodes.iter().enumerate() {
        if symbolic {
            kernels.run_whole(k, None);
        }
    }
    let mut plan = plan::plan_memory(graph, &kernels.scratch_bytes());
    let symbols = symbol_block::SymbolBlock::reserve(graph, &mut plan);
    let symbol_names: Vec<String> = graph.symbols.iter().map(|(_, s)| s.name.clone()).collect();
    for (v, _) in &plan.final_copies {
        const_read[plan.root[v.0]] = true;
    }
    // FP16 weights expand into an area after the planned arena, as large as the most
    // any node expands; every node function then also gets the workspace base.
    let expand = match opts.weights {
        WeightFormat::F32 => None,
        WeightFormat::F16 => Some(define_expand_f16(
            module,
            ctx,
            fctx,
            &isa,
            &target,
            &names.local("nnc_expand_f16"),
        )?),
    };
    let half_region = plan.arena_size.next_multiple_of(plan::ALIGN);
    let mut half_area = 0usize;
    let mut node_fns = vec![None; graph.nodes.len()];
    let mut task_fns: Vec<Option<FuncId>> = vec![None; graph.nodes.len()];
    let mut task_args: Vec<Option<(usize, Option<usize>)>> = vec![None; graph.nodes.len()];
    for (k, node) in lowered.nodes.iter().enumerate() {
        progress.step(Task::CodeGeneration);
        if plan.is_view[k] {
            continue;
        }
        let n_operands = node.inputs.iter().flatten().count() + node.outputs.len();
        let table = plan.operand_tables[k].is_some();
        // A split node is lowered twice: whole, for `infer` and single-threaded `run`
        // (so one thread never repeats a task's set-up), and by task, for pools.
        let variants: &[bool] = if kernels.nodes[k].tasks > 1 {
            &[false, true]
        } else {
            &[false]
        };
        for &split in variants {
            rodata.set_second_lowering(split || names.later());
            // A split node's task function also takes the task index and, with a
            // prologue and scratch, the node's shared scratch (see `run.rs`).
            let shared = split
                && (kernels.nodes[k].prologue || expand.is_some())
                && plan.scratch[k].is_some();
            let whole_rows = kernels.nodes[k].rows_at_run_time;
            let reads_symbols = symbolic_nodes[k] && symbols.is_some();
            let n_args = if table { 1 } else { n_operands }
                + usize::from(plan.scratch[k].is_some())
                + usize::from(expand.is_some())
                + usize::from(reads_symbols)
                + usize::from(split)
                + usize::from(shared)
                + usize::from(whole_rows.is_some());
            let mut node_half_bytes = 0;
            let weight_label = node
                .inputs
                .iter()
                .flatten()
                .filter(|v| lowered.constant(**v).is_some())
                .max_by_key(|v| lowered.ty(**v).numel())
                .map_or_else(|| node.name.clone(), |v| lowered.values[v.0].name.clone());
            let indices_constant = node
                .inputs
                .get(1)
                .copied()
                .flatten()
                .is_some_and(|v| lowered.constant(v).is_some());
            // A node that checks indices returns NNC_OK or NNC_ERR_INDEX_OUT_OF_RANGE; the
            // others return nothing (so `--index-checks clamp` code is what it always was).
            let checks_indices = lower::index_check::node_checks_indices(
                &node.op,
                indices_constant,
                opts.index_checks,
            );
            if split {
                if checks_indices {
                    return Err(codegen_err(
                        &node.name,
                        "a node that checks indices cannot be split into tasks",
                    ));
                }
                let first_scratch = if table { 1 } else { n_operands };
                task_args[k] = Some((
                    n_args - 1 - usize::from(shared),
                    plan.scratch[k].is_some().then_some(first_scratch),
                ));
            }
            let sig = ptr_signature(module, n_args, checks_indices);
            let name = if split {
                names.local(&format!("nnc_node_{k}_task"))
            } else {
                names.local(&format!("nnc_node_{k}"))
            };
            let id = define_pooled_function(
                (module, ctx, fctx, &isa),
                (functions, names.later()),
                &name,
                Linkage::Local,
                sig,
                |b, module, params| {
                    let mut next = params.iter().copied();
                    let operand_ptrs = if table {
                        let table = next.next().expect("the operand table parameter");
                        load_operand_table(b, table, n_operands)
                    } else {
                        next.by_ref().take(n_operands).collect()
                    };
                    let mut ptrs = operand_ptrs.into_iter();
                    let inputs: Vec<Option<Operand>> = node
                        .inputs
                        .iter()
                        .map(|i| {
                            i.map(|v| Operand {
                                ptr: ptrs.next().expect("one pointer per input"),
                                ty: lowered.ty(v).clone(),
                                constant: lowered.constant(v).cloned(),
                            })
                        })
                        .collect();
                    let outputs: Vec<Operand> = node
                        .outputs
                        .iter()
                        .map(|o| Operand {
                            ptr: ptrs.next().expect("one pointer per output"),
                            ty: lowered.ty(*o).clone(),
                            constant: None,
                        })
                        .collect();
                    let scratch = if plan.scratch[k].is_some() {
                        next.next()
                    } else {
                        None
                    };
                    let workspace = expand.map(|_| next.next().expect("the workspace parameter"));
                    let run_dims = reads_symbols.then(|| {
                        let block = next.next().expect("the symbols parameter");
                        lower::run_shape::RunDims::load(b, block, symbol_names.clone())
                    });
                    let task = if split { next.next() } else { None };
                    let shared_scratch = if shared { next.next() } else { scratch };
                    let run_rows = whole_rows.map(|bound| {
                        let at = next.next().expect("the row count parameter");
                        lower::RunRows {
                            count: b.ins().load(types::I64, flags(), at, 0),
                            bound,
                        }
                    });
                    // A split node's half weights are expanded by its prologue: task
                    // index `tasks` branches to a block that the lowering fills with
                    // the expansions and that then goes on to the node's own prologue
                    // (or returns).
                    let half_prologue = match (task, expand) {
                        (Some(task), Some(_)) => {
                            let (pro, body) = (b.create_block(), b.create_block());
                            let tasks = kernels.nodes[k].tasks as i64;
                            let is_pro =
                                b.ins()
                                    .icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, task, tasks);
                            b.ins().brif(is_pro, pro, &[], body, &[]);
                            b.seal_block(pro);
                            b.switch_to_block(pro);
                            let part = b.ins().iadd_imm_s(task, -tasks);
                            // The expansions go before this (see `weights_f32`).
                            if kernels.nodes[k].prologue {
                                b.ins().jump(body, &[]);
                            } else {
                                b.ins().return_(&[]);
                            }
                            b.seal_block(body);
                            b.switch_to_block(body);
                            Some((pro, part, kernels.nodes[k].prologue_parts))
                        }
                        _ => None,
                    };
                    let half = expand.map(|expand| lower::HalfWeights {
                        workspace: workspace.expect("the workspace parameter"),
                        region: half_region,
                        used: 0,
                        expand,
                        prologue: half_prologue,
                    });
                    let fail = checks_indices.then(|| b.create_block());
                    let on_bad_index = match fail {
                        Some(block) => lower::index_check::OnBadIndex::Fail(block),
                        None => lower::index_check::OnBadIndex::Clamp,
                    };
                    let mut lctx = LowerCtx {
                        b,
                        target: &target,
                        kernel: &kernels.nodes[k],
                        module,
                        inputs,
                        outputs,
                        scratch,
                        task,
                        shared_scratch,
                        half,
                        on_bad_index,
                        rodata: &mut *rodata,
                        machine_code: &mut *machine_code,
                        node_index: k,
                        weight_label: &weight_label,
                        run_rows,
                        run_dims,
                    };
                    lower::lower_row_task(&mut lctx, &node.op).map_err(|m| {
                        NncError::node(&node.name, &node.onnx_op, format!("code generation: {m}"))
                            .with_excerpt(|| node_excerpt(lowered, node))
                    })?;
                    node_half_bytes = lctx.half.as_ref().map_or(0, |h| h.used);
                    match fail {
                        None => {
                            b.ins().return_(&[]);
                        }
                        Some(fail) => {
                            let ok = b.ins().iconst(types::I32, NNC_OK as i64);
                            b.ins().return_(&[ok]);
                            b.switch_to_block(fail);
                            b.seal_block(fail);
                            let code = b
                                .ins()
                                .iconst(types::I32, NNC_ERR_INDEX_OUT_OF_RANGE as i64);
                            b.ins().return_(&[code]);
                        }
                    }
                    Ok(())
                },
            )?;
            // Which constant operands the code reads (the function is still in `ctx`). Those
            // of a node with an operand table all count as read: its entries are stored
            // whether or not the code loads them.
            let entry = ctx
                .func
                .layout
                .entry_block()
                .expect("node functions have a body");
            let params = ctx.func.dfg.block_params(entry).to_vec();
            for (j, v) in graph.nodes[k].inputs.iter().flatten().enumerate() {
                let root = plan.root[v.0];
                if graph.values[root].constant.is_some()
                    && (table || value_is_used(&ctx.func, params[j]))
                {
                    const_read[root] = true;
                }
            }
            if split {
                task_fns[k] = Some(id);
            } else {
                node_fns[k] = Some(id);
            }
            half_area = half_area.max(node_half_bytes);
        }
    }
    rodata.set_second_lowering(false);
    if half_area > 0 {
        plan.arena_size = half_region + half_area;
    }
    Ok(Variant {
        target,
        isa,
        names,
        kernels,
        plan,
        symbols,
        symbolic_nodes,
        node_fns,
        task_fns,
        task_args,
        expand,
    })
}

/// Defines `v`'s node sequences and entry points (see [`Entries`]).
pub(super) fn define_entries(
    (module, ctx, fctx): (&mut ObjectModule, &mut Context, &mut FunctionBuilderContext),
    v: &Variant,
    common: &Common,
    (graph, row_loops): (&Graph, &RowLoops),
    opts: &CompileOptions,
) -> Result<Entries> {
    let isa = &v.isa;
    // A single-variant library checks the CPU in its node sequence; a multi-versioned
    // one in the entry point that chose the variant.
    let cpu_check = match v.names.variant {
        None => common
            .cpu_check
            .as_ref()
            .and_then(|c| c.requiring(&v.target)),
        Some(_) => None,
    };
    let clear_upper = common
        .clear_upper
        .filter(|_| v.target.has(super::CpuFeature::Avx));
    let tasks: Vec<usize> = v.kernels.nodes.iter().map(|n| n.tasks).collect();
    let max_args = v.task_args.iter().flatten().map(|a| a.0).max().unwrap_or(0);
    let scratch_sizes: Vec<usize> = v.kernels.scratch_bytes();
    let (record_offset, extra_offset, worker_stride) =
        run::layout(v.plan.arena_size, &tasks, &scratch_sizes, max_args);
    // The parts of each task function's prologue (0: none): the node's own, or, with
    // FP16 weights, the expansions (see `lower::HalfWeights::prologue`).
    let task_prologues: Vec<usize> = v
        .kernels
        .nodes
        .iter()
        .map(
            |n| match n.tasks > 1 && (n.prologue || v.expand.is_some()) {
                true => n.prologue_parts.max(1),
                false => 0,
            },
        )
        .collect();
    // The most calls one parallel_for of any split node makes: no more scratch areas
    // are ever in use at once, whatever the pool's size.
    let max_parallel = (0..graph.nodes.len())
        .filter(|&k| v.task_args[k].is_some() && v.task_fns[k].is_some())
        .map(|k| tasks[k].max(task_prologues[k]))
        .max()
        .unwrap_or(1);
    let mut trampolines = vec![None; graph.nodes.len()];
    for (k, a) in v.task_args.iter().enumerate() {
        if let (Some((n_args, scratch_arg)), Some(fid)) = (a, v.task_fns[k]) {
            trampolines[k] = Some(run::define_trampoline(
                module,
                ctx,
                fctx,
                isa,
                (fid, &v.names.local(&format!("nnc_task_{k}"))),
                *n_args,
                *scratch_arg,
                (tasks[k], task_prologues[k], worker_stride),
                max_parallel,
            )?);
        }
    }
    let pooled = run::Pooled {
        trampolines,
        prologues: task_prologues.clone(),
        tasks,
        record_offset,
        extra_offset,
        worker_stride,
        max_parallel,
    };
    let sequence = NodeSequence {
        graph,
        plan: &v.plan,
        node_fns: &v.node_fns,
        weights: common.weights,
        copy_fn: common.copy_fn,
        clear_upper,
        cpu_check: cpu_check.as_ref(),
        pass_workspace: v.expand.is_some(),
        pooled: &pooled,
        row_loops: &row_loops.loops,
        symbols: v.symbols.as_ref(),
        symbolic_nodes: &v.symbolic_nodes,
    };
    // A one-sample graph's node sequence is local: the exported entry points loop over
    // the samples (see `sample_loop`).
    let samples = sample_loop::SampleLayout::of(graph)?;
    let (infer_ws_name, infer_ws_linkage) = match &samples {
        Some(_) => (
            v.names.local("nnc_sample_infer_with_workspace"),
            Linkage::Local,
        ),
        None if v.symbols.is_some() => (
            v.names.local("nnc_symbolic_infer_with_workspace"),
            Linkage::Local,
        ),
        None => v.names.entry(&opts.prefix, "infer_with_workspace"),
    };
    let infer_ws = define_infer_with_workspace(
        module,
        ctx,
        fctx,
        isa,
        &sequence,
        (false, infer_ws_linkage),
        &infer_ws_name,
    )?;
    let run_pooled = define_infer_with_workspace(
        module,
        ctx,
        fctx,
        isa,
        &sequence,
        (true, Linkage::Local),
        &v.names.local("nnc_run_pooled"),
    )?;
    // With dims, the exported entry point sets every dim at its maximum around the
    // local node sequence.
    let exported_infer_ws = match &samples {
        Some(layout) => define_exported_infer_with_workspace(
            (&mut *module, &mut *ctx, &mut *fctx, isa),
            v.names.entry(&opts.prefix, "infer_with_workspace"),
            |b, module, p| {
                let count = b.ins().iconst(PTR, layout.max);
                sample_loop::emit_loop(b, module, layout, infer_ws, p, None, count)
            },
        )?,
        None => match &v.symbols {
            // Every symbol at its maximum, then the node sequence.
            Some(block) => define_exported_infer_with_workspace(
                (&mut *module, &mut *ctx, &mut *fctx, isa),
                v.names.entry(&opts.prefix, "infer_with_workspace"),
                |b, module, (inputs, outputs, ws)| {
                    block.store_maxima(b, ws);
                    let f = module.declare_func_in_func(infer_ws, b.func);
                    let call = b.ins().call(f, &[inputs, outputs, ws]);
                    b.inst_results(call)[0]
                },
            )?,
            None => infer_ws,
        },
    };
    let workspace_size = run::define_workspace_size(
        module,
        ctx,
        fctx,
        isa,
        &pooled,
        v.plan.arena_size,
        v.names.entry(&opts.prefix, "workspace_size"),
    )?;
    let run = run::define_run(
        module,
        ctx,
        fctx,
        isa,
        &pooled,
        v.plan.arena_size,
        (infer_ws, run_pooled),
        (
            samples.as_ref(),
            &output_extents(graph, &v.plan, v.symbols.as_ref()),
            v.symbols.as_ref(),
        ),
        v.names.entry(&opts.prefix, "run"),
    )?;
    Ok(Entries {
        infer_with_workspace: exported_infer_ws,
        run,
        workspace_size,
    })
}
