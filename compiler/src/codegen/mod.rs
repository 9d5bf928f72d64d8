//! The Cranelift back end: memory plan → one object file holding the weights, one
//! function per node, and the exported C ABI (`infer`, `infer_with_workspace`,
//! `model_info`).

mod cpu_check;
pub mod dim_values;
mod input_guards;
pub mod kernel;
pub mod kernel_plan;
pub mod kernels;
pub mod lower;
pub mod machine_code_pool;
pub mod math;
mod model_info;
pub mod options;
pub mod plan;
pub mod rodata_pool;
mod row_loops;
mod run;
mod sample_loop;
mod shared_tables;
mod symbol_block;
pub mod target;
pub mod tasks;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{
    types, AbiParam, Block, BlockArg, Function, InstBuilder, Signature, UserFuncName, Value,
};
use std::sync::Arc;

use cranelift_codegen::isa::TargetIsa;
use cranelift_codegen::Context;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_module::{DataDescription, FuncId, Linkage, Module};
use cranelift_object::{ObjectBuilder, ObjectModule};

pub use options::{CompileOptions, IndexChecks, KernelOptions, WeightFormat};
pub use plan::{MemoryPlan, Storage};
pub use target::{Arch, CpuFeature, CpuFeatures, Target, CPU_PRESETS};

use crate::error::{NncError, Result};
use crate::ir::{Graph, ValueId};
use crate::ops::Op;
use kernel::{flags, PTR};
use lower::{LowerCtx, Operand};
use nnc_runtime_abi::abi::{
    NNC_ERR_DIMS_INCONSISTENT, NNC_ERR_INDEX_OUT_OF_RANGE, NNC_ERR_MISALIGNED_WORKSPACE,
    NNC_ERR_NULL_POINTER, NNC_ERR_SHAPE_INPUT_MISMATCH, NNC_OK,
};
use rodata_pool::RodataPool;

/// The compiled object and what the header and `nnc inspect` report about it.
pub struct CompiledModel {
    pub object: Vec<u8>,
    pub arena_size: usize,
    pub arena_lower_bound: usize,
    /// Weight bytes stored: constants read as they are plus packed or transformed
    /// forms, each distinct form once however many nodes read it.
    pub weights_size: usize,
    /// What the weights would take if every node had its own copy.
    pub unshared_weights_size: usize,
    /// Bytes of machine code.
    pub code_size: usize,
    /// Weight forms several nodes read, largest first.
    pub shared_weights: Vec<SharedWeight>,
}

/// A packed or transformed weight stored once for several nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedWeight {
    /// The constant it was derived from.
    pub constant: String,
    pub bytes: usize,
    /// The nodes reading it.
    pub nodes: Vec<String>,
}

pub fn symbol_prefix(name: &str) -> String {
    if name.is_empty() {
        String::new()
    } else {
        format!("{name}_")
    }
}

fn codegen_err(context: impl Into<String>, e: impl std::fmt::Display) -> NncError {
    NncError::Codegen {
        context: context.into(),
        message: e.to_string(),
    }
}

/// What a diagnostic quotes of an IR node: its operands with their types (an unnamed
/// value by its number) and its lowered op.
fn node_excerpt(graph: &Graph, node: &crate::ir::Node) -> crate::error::NodeExcerpt {
    let operand = |v: &crate::ir::ValueId| {
        let name = &graph.values[v.0].name;
        let name = if name.is_empty() {
            format!("%{}", v.0)
        } else {
            name.clone()
        };
        format!("{name}: {}", graph.ty(*v))
    };
    crate::error::NodeExcerpt {
        inputs: node
            .inputs
            .iter()
            .map(|i| i.as_ref().map_or_else(String::new, operand))
            .collect(),
        outputs: node.outputs.iter().map(operand).collect(),
        attributes: vec![format!("lowered as {}", node.op.name())],
    }
}

/// Where `run` finds each output axis's size: the value an extent node wrote, the
/// looped dim, or the size itself.
fn output_extents(
    graph: &Graph,
    plan: &plan::MemoryPlan,
    symbols: Option<&symbol_block::SymbolBlock>,
) -> Vec<Vec<run::AxisExtent>> {
    if let Some(block) = symbols {
        return graph
            .outputs
            .iter()
            .map(|v| {
                let ty = graph.ty(*v);
                (0..ty.rank())
                    .map(|axis| match ty.dim(axis).as_const() {
                        Some(c) => run::AxisExtent::Fixed(c as usize),
                        None => run::AxisExtent::Symbolic {
                            dim: ty.dim(axis),
                            symbols: block.offset,
                        },
                    })
                    .collect()
            })
            .collect();
    }
    let deps = crate::ir::run_dims::axis_dims(graph);
    let offset_of = |v: ValueId| match plan.storage[plan.root[v.0]] {
        Some(plan::Storage::Arena(off)) => Some(off + plan.offset[v.0]),
        _ => None,
    };
    graph
        .outputs
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let info = graph.value(*v);
            let tensor = graph.inputs.len() + i;
            (info.ty.shape.iter().enumerate())
                .map(|(axis, &size)| {
                    if let Some(e) = &info.run_extent {
                        let at = e.offset_of(axis).zip(offset_of(e.count));
                        if let Some((within, offset)) = at {
                            let offset = offset + within;
                            return run::AxisExtent::Counted { offset };
                        }
                    }
                    match deps.iter().find(|d| d.tensor == tensor && d.axis == axis) {
                        Some(d) => run::AxisExtent::Samples { scale: d.scale },
                        None => run::AxisExtent::Fixed(size),
                    }
                })
                .collect()
        })
        .collect()
}

/// Compiles a graph into a relocatable object for `opts.target`.
pub fn compile_graph(graph: &Graph, opts: &CompileOptions) -> Result<CompiledModel> {
    compile_graph_reporting(graph, opts, &crate::progress::Silent)
}

/// [`compile_graph`], reporting each node to `progress`.
pub fn compile_graph_reporting(
    graph: &Graph,
    opts: &CompileOptions,
    progress: &dyn crate::progress::Progress,
) -> Result<CompiledModel> {
    let row_loops = row_loops::plan(graph)?;
    // The graph code is generated from: row-looped nodes at one row.
    let lowered = row_loops.lowered.as_ref().unwrap_or(graph);
    let isa = opts.target.isa("speed")?;
    let builder = ObjectBuilder::new(
        isa.clone(),
        "nnc_model",
        cranelift_module::default_libcall_names(),
    )
    .map_err(|e| codegen_err("object setup", e))?;
    let mut module = ObjectModule::new(builder);

    let mut kernels =
        kernel_plan::plan_kernels_for(lowered, &opts.target, &opts.kernels, opts.weights);
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
    // Constants the generated code reads (filled in as nodes are lowered).
    let mut const_read = vec![false; graph.values.len()];
    for (v, _) in &plan.final_copies {
        const_read[plan.root[v.0]] = true;
    }

    let mut fctx = FunctionBuilderContext::new();
    let mut ctx = module.make_context();
    // FP16 weights expand into an area after the planned arena, as large as the most
    // any node expands; every node function then also gets the workspace base.
    let expand = match opts.weights {
        WeightFormat::F32 => None,
        WeightFormat::F16 => Some(define_expand_f16(
            &mut module,
            &mut ctx,
            &mut fctx,
            &isa,
            &opts.target,
        )?),
    };
    let half_region = plan.arena_size.next_multiple_of(plan::ALIGN);
    let mut half_area = 0usize;
    let mut rodata = RodataPool::default();
    let mut machine_code = machine_code_pool::MachineCodePool::default();
    let mut node_fns = vec![None; graph.nodes.len()];
    // Split nodes' task functions (see `run.rs`).
    let mut task_fns: Vec<Option<cranelift_module::FuncId>> = vec![None; graph.nodes.len()];
    // Per split node: its arguments without the task index, and which is the scratch.
    let mut task_args: Vec<Option<(usize, Option<usize>)>> = vec![None; graph.nodes.len()];
    progress.start(crate::progress::Task::CodeGeneration, graph.nodes.len());
    for (k, node) in lowered.nodes.iter().enumerate() {
        progress.step(crate::progress::Task::CodeGeneration);
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
            rodata.set_second_lowering(split);
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
            let sig = ptr_signature(&module, n_args, checks_indices);
            let name = if split {
                format!("nnc_node_{k}_task")
            } else {
                format!("nnc_node_{k}")
            };
            let id = define_function(
                &mut module,
                &mut ctx,
                &mut fctx,
                &isa,
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
                        target: &opts.target,
                        kernel: &kernels.nodes[k],
                        module,
                        inputs,
                        outputs,
                        scratch,
                        task,
                        shared_scratch,
                        half,
                        on_bad_index,
                        rodata: &mut rodata,
                        machine_code: &mut machine_code,
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
    progress.finish(crate::progress::Task::CodeGeneration);
    if half_area > 0 {
        plan.arena_size = half_region + half_area;
    }
    // Never empty: infer() passes it as the workspace, which must be non-NULL.
    let arena = define_zeroed(&mut module, "nnc_arena", plan.arena_size.max(1))?;
    let info = model_info::define(&mut module, graph, &plan, &opts.prefix)?;

    plan::place_constants(&mut plan, graph, &const_read);
    let weights = define_data(&mut module, "nnc_weights", &plan.weights, false)?;
    let copy_fn = define_copy(&mut module, &mut ctx, &mut fctx, &isa)?;
    let clear_upper = define_clear_upper_vector_state(&mut module, &opts.target)?;
    let cpu_check = cpu_check::define_check(&mut module, &opts.target)?;
    let tasks: Vec<usize> = kernels.nodes.iter().map(|n| n.tasks).collect();
    let max_args = task_args.iter().flatten().map(|a| a.0).max().unwrap_or(0);
    let scratch_sizes: Vec<usize> = kernels.scratch_bytes();
    let (record_offset, extra_offset, worker_stride) =
        run::layout(plan.arena_size, &tasks, &scratch_sizes, max_args);
    // The parts of each task function's prologue (0: none): the node's own, or, with
    // FP16 weights, the expansions (see `lower::HalfWeights::prologue`).
    let task_prologues: Vec<usize> = kernels
        .nodes
        .iter()
        .map(|n| match n.tasks > 1 && (n.prologue || expand.is_some()) {
            true => n.prologue_parts.max(1),
            false => 0,
        })
        .collect();
    // The most calls one parallel_for of any split node makes: no more scratch areas
    // are ever in use at once, whatever the pool's size.
    let max_parallel = (0..graph.nodes.len())
        .filter(|&k| task_args[k].is_some() && task_fns[k].is_some())
        .map(|k| tasks[k].max(task_prologues[k]))
        .max()
        .unwrap_or(1);
    let mut trampolines = vec![None; graph.nodes.len()];
    for (k, a) in task_args.iter().enumerate() {
        if let (Some((n_args, scratch_arg)), Some(fid)) = (a, task_fns[k]) {
            trampolines[k] = Some(run::define_trampoline(
                &mut module,
                &mut ctx,
                &mut fctx,
                &isa,
                (fid, k),
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
        plan: &plan,
        node_fns: &node_fns,
        weights,
        copy_fn,
        clear_upper,
        cpu_check: cpu_check.as_ref(),
        pass_workspace: expand.is_some(),
        pooled: &pooled,
        row_loops: &row_loops.loops,
        symbols: symbols.as_ref(),
        symbolic_nodes: &symbolic_nodes,
    };
    // A one-sample graph's node sequence is local: the exported entry points loop over
    // the samples (see `sample_loop`).
    let samples = sample_loop::SampleLayout::of(graph)?;
    let infer_ws_name = match &samples {
        Some(_) => "nnc_sample_infer_with_workspace".to_string(),
        None if symbols.is_some() => "nnc_symbolic_infer_with_workspace".to_string(),
        None => format!("{}infer_with_workspace", opts.prefix),
    };
    let infer_ws = define_infer_with_workspace(
        &mut module,
        &mut ctx,
        &mut fctx,
        &isa,
        &sequence,
        false,
        &infer_ws_name,
    )?;
    let run_pooled = define_infer_with_workspace(
        &mut module,
        &mut ctx,
        &mut fctx,
        &isa,
        &sequence,
        true,
        "nnc_run_pooled",
    )?;
    // With dims, the exported entry point sets every dim at its maximum around the
    // local node sequence.
    let exported_infer_ws = match &samples {
        Some(layout) => define_exported_infer_with_workspace(
            (&mut module, &mut ctx, &mut fctx, &isa),
            &opts.prefix,
            |b, module, p| {
                let count = b.ins().iconst(PTR, layout.max);
                sample_loop::emit_loop(b, module, layout, infer_ws, p, None, count)
            },
        )?,
        None => match &symbols {
            // Every symbol at its maximum, then the node sequence.
            Some(block) => define_exported_infer_with_workspace(
                (&mut module, &mut ctx, &mut fctx, &isa),
                &opts.prefix,
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
    run::define_workspace_size(
        &mut module,
        &mut ctx,
        &mut fctx,
        &isa,
        &pooled,
        plan.arena_size,
        &opts.prefix,
    )?;
    run::define_run(
        &mut module,
        &mut ctx,
        &mut fctx,
        &isa,
        &pooled,
        plan.arena_size,
        (infer_ws, run_pooled),
        (
            samples.as_ref(),
            &output_extents(graph, &plan, symbols.as_ref()),
            symbols.as_ref(),
        ),
        &opts.prefix,
    )?;
    define_infer(
        &mut module,
        &mut ctx,
        &mut fctx,
        &isa,
        exported_infer_ws,
        arena,
        &opts.prefix,
    )?;
    let io_shapes: Vec<&[usize]> = graph
        .inputs
        .iter()
        .chain(&graph.outputs)
        .map(|v| graph.ty(*v).shape.as_slice())
        .collect();
    let axis_dims = crate::ir::run_dims::axis_dims(graph);
    sample_loop::define_shapes(
        &mut module,
        &mut ctx,
        &mut fctx,
        &isa,
        (&io_shapes, &axis_dims),
        &graph.dims,
        symbols.as_ref().map(|_| graph),
        &opts.prefix,
    )?;
    define_model_info_fn(&mut module, &mut ctx, &mut fctx, &isa, info, &opts.prefix)?;

    let stored_weight_bytes = rodata.weight_bytes();
    let requested_weight_bytes = rodata.requested_weight_bytes();
    let shared_weights = rodata
        .shared()
        .into_iter()
        .map(|b| SharedWeight {
            constant: b.label,
            bytes: b.bytes,
            nodes: b
                .nodes
                .iter()
                .map(|&k| graph.nodes[k].name.clone())
                .collect(),
        })
        .collect();
    rodata
        .define_all(&mut module, plan::ALIGN as u64)
        .map_err(|e| codegen_err("read-only data", e))?;
    let product = module.finish();
    let object = product
        .emit()
        .map_err(|e| codegen_err("object emission", e))?;
    Ok(CompiledModel {
        code_size: code_bytes(&object),
        object,
        arena_size: plan.arena_size,
        arena_lower_bound: plan.lower_bound,
        // Every weight byte the artifact stores: constants the code reads as they are,
        // and those lowering repacked, transformed or folded into read-only data (each
        // distinct blob once).
        weights_size: plan.weights.len() + stored_weight_bytes,
        unshared_weights_size: plan.weights.len() + requested_weight_bytes,
        shared_weights,
    })
}

/// Bytes of machine code in an object file: its executable sections.
fn code_bytes(object: &[u8]) -> usize {
    use object::{Object, ObjectSection, SectionKind};
    object::File::parse(object).map_or(0, |file| {
        file.sections()
            .filter(|s| s.kind() == SectionKind::Text)
            .map(|s| s.size() as usize)
            .sum()
    })
}

/// The memory plan `compile_graph` uses for the host, including each node's scratch.
pub fn plan_graph_memory(graph: &Graph) -> MemoryPlan {
    plan_graph_memory_for(graph, &Target::host(), &KernelOptions::default())
}

/// The memory plan for `target` and `options`, whose kernel plan sets each node's
/// scratch.
pub fn plan_graph_memory_for(
    graph: &Graph,
    target: &Target,
    options: &KernelOptions,
) -> MemoryPlan {
    let kernels = kernel_plan::plan_kernels(graph, target, options);
    plan::plan_memory(graph, &kernels.scratch_bytes())
}

/// Declares `name` and defines it with the body `body(builder, module, params)` writes
/// into a fresh entry block (the body ends with its own `return`). The finished function
/// stays in `ctx.func` until the next call, for callers that inspect it.
#[allow(clippy::too_many_arguments)]
fn define_function(
    module: &mut ObjectModule,
    ctx: &mut Context,
    fctx: &mut FunctionBuilderContext,
    isa: &Arc<dyn TargetIsa>,
    name: &str,
    linkage: Linkage,
    sig: Signature,
    body: impl FnOnce(&mut FunctionBuilder, &mut ObjectModule, &[Value]) -> Result<()>,
) -> Result<FuncId> {
    module.clear_context(ctx);
    let id = module
        .declare_function(name, linkage, &sig)
        .map_err(|e| codegen_err(name, e))?;
    ctx.func = Function::with_name_signature(UserFuncName::user(0, id.as_u32()), sig);
    let mut b = FunctionBuilder::new(&mut ctx.func, fctx);
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    b.seal_block(entry);
    let params = b.block_params(entry).to_vec();
    body(&mut b, module, &params)?;
    b.finalize(isa.frontend_config());
    module
        .define_function(id, ctx)
        .map_err(|e| codegen_err(name, format!("{e:?}")))?;
    Ok(id)
}

/// The `n` addresses in a node's operand table (see [`plan::MAX_DIRECT_OPERANDS`]). The
/// loads are marked read-only and movable, so the optimizer places each one just before
/// its first use instead of keeping all `n` addresses live from the function's entry.
fn load_operand_table(b: &mut FunctionBuilder, table: Value, n: usize) -> Vec<Value> {
    let table_flags = flags().with_readonly().with_can_move();
    (0..n)
        .map(|j| {
            let slot = b.ins().iadd_imm_s(table, (j * 8) as i64);
            b.ins().load(PTR, table_flags, slot, 0)
        })
        .collect()
}

/// Whether any instruction of `func` reads `v`.
fn value_is_used(func: &Function, v: Value) -> bool {
    func.layout.blocks().any(|block| {
        func.layout
            .block_insts(block)
            .any(|inst| func.dfg.inst_values(inst).any(|u| u == v))
    })
}

fn ptr_signature(module: &ObjectModule, n_args: usize, returns_i32: bool) -> Signature {
    let mut sig = module.make_signature();
    sig.params.extend((0..n_args).map(|_| AbiParam::new(PTR)));
    if returns_i32 {
        sig.returns.push(AbiParam::new(types::I32));
    }
    sig
}

fn define_data(
    module: &mut ObjectModule,
    name: &str,
    bytes: &[u8],
    writable: bool,
) -> Result<cranelift_module::DataId> {
    let id = module
        .declare_data(name, Linkage::Local, writable, false)
        .map_err(|e| codegen_err(name, e))?;
    let mut d = DataDescription::new();
    // An empty blob still needs an address; one byte keeps every symbol distinct.
    d.define(if bytes.is_empty() {
        vec![0u8].into_boxed_slice()
    } else {
        bytes.to_vec().into_boxed_slice()
    });
    d.set_align(plan::ALIGN as u64);
    module
        .define_data(id, &d)
        .map_err(|e| codegen_err(name, e))?;
    Ok(id)
}

fn define_zeroed(
    module: &mut ObjectModule,
    name: &str,
    size: usize,
) -> Result<cranelift_module::DataId> {
    let id = module
        .declare_data(name, Linkage::Local, true, false)
        .map_err(|e| codegen_err(name, e))?;
    let mut d = DataDescription::new();
    d.define_zeroinit(size);
    d.set_align(plan::ALIGN as u64);
    module
        .define_data(id, &d)
        .map_err(|e| codegen_err(name, e))?;
    Ok(id)
}

/// On x86-64 with AVX: a function that executes `vzeroupper`, called first by `infer`.
/// A caller whose own code left the upper halves of the vector registers dirty (tract
/// does) otherwise makes every legacy-SSE instruction in the model pay a merge with
/// them: measured 5–35× slower inference until something cleared the state.
fn define_clear_upper_vector_state(
    module: &mut ObjectModule,
    target: &Target,
) -> Result<Option<FuncId>> {
    if target.arch != Arch::X86_64 || !target.has(CpuFeature::Avx) {
        return Ok(None);
    }
    let sig = ptr_signature(module, 0, false);
    let id = module
        .declare_function("nnc_clear_upper_vector_state", Linkage::Local, &sig)
        .map_err(|e| codegen_err("vzeroupper", e))?;
    // vzeroupper; ret
    module
        .define_function_bytes(id, 16, &[0xC5, 0xF8, 0x77, 0xC3], &[])
        .map_err(|e| codegen_err("vzeroupper", e))?;
    Ok(Some(id))
}

/// `nnc_expand_f16(dst, src, n)` (see `lower::f16_weights`): machine code where the
/// target has it, else a Cranelift loop.
fn define_expand_f16(
    module: &mut ObjectModule,
    ctx: &mut Context,
    fctx: &mut FunctionBuilderContext,
    isa: &Arc<dyn TargetIsa>,
    target: &Target,
) -> Result<FuncId> {
    let name = "nnc_expand_f16";
    let sig = ptr_signature(module, 3, false);
    if let Some(code) = lower::f16_weights::machine_code(target) {
        let code = code.map_err(|e| codegen_err(name, e))?;
        let id = module
            .declare_function(name, Linkage::Local, &sig)
            .map_err(|e| codegen_err(name, e))?;
        module
            .define_function_bytes(id, 64, &code, &[])
            .map_err(|e| codegen_err(name, e))?;
        return Ok(id);
    }
    define_function(
        module,
        ctx,
        fctx,
        isa,
        name,
        Linkage::Local,
        sig,
        |b, _, p| {
            lower::f16_weights::expand_body(b, p[0], p[1], p[2]);
            b.ins().return_(&[]);
            Ok(())
        },
    )
}

/// `nnc_copy(dst, src, nbytes)`: used for graph outputs that no node writes (constants,
/// pass-through inputs, duplicates).
fn define_copy(
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
        "nnc_copy",
        Linkage::Local,
        sig,
        |b, _, p| {
            let (dst, src, n) = (p[0], p[1], p[2]);
            kernel::dynamic_loop(b, n, |b, i| {
                let s = b.ins().iadd(src, i);
                let v = b.ins().load(types::I8, flags(), s, 0);
                let d = b.ins().iadd(dst, i);
                b.ins().store(flags(), v, d, 0);
            });
            b.ins().return_(&[]);
            Ok(())
        },
    )
}

/// Pointers loaded from the `inputs` / `outputs` arrays and then checked as one group.
/// A group's loaded pointers are all live until its checks, so the bound keeps the
/// entry function's size and register allocation linear in the number of inputs and
/// outputs; a graph with at most this many is one group, in the order nnc always
/// emitted (unchanged artifacts).
const CHECKED_POINTERS_PER_GROUP: usize = 16;

/// Argument checks at the start of `infer_with_workspace`: every pointer the plan
/// dereferences must be non-null (`inputs`, `outputs` and each of their elements), and
/// the workspace, when it is used, non-null and aligned as `model_info` promises.
/// Returns the blocks the failures branch to, `(null pointer, misaligned workspace)`,
/// for the caller to fill in.
fn emit_argument_checks(
    b: &mut FunctionBuilder,
    (inputs, n_inputs): (Value, usize),
    (outputs, n_outputs): (Value, usize),
    ws: Value,
) -> (Block, Block) {
    let fail_null = b.create_block();
    let fail_align = b.create_block();
    let check_null = |b: &mut FunctionBuilder, v: Value, fail| {
        let ok = b.create_block();
        let null = b.ins().icmp_imm_s(IntCC::Equal, v, 0);
        b.ins().brif(null, fail, &[], ok, &[]);
        b.seal_block(ok);
        b.switch_to_block(ok);
    };
    let mut pending: Vec<Value> = vec![];
    if n_inputs > 0 {
        pending.push(inputs);
    }
    if n_outputs > 0 {
        pending.push(outputs);
    }
    let elements: Vec<(Value, usize)> = (0..n_inputs)
        .map(|i| (inputs, i))
        .chain((0..n_outputs).map(|i| (outputs, i)))
        .collect();
    for group in elements.chunks(CHECKED_POINTERS_PER_GROUP) {
        for &(arr, i) in group {
            // Check the array pointer before loading from it.
            check_null(b, arr, fail_null);
            pending.push(b.ins().load(PTR, flags(), arr, (i * 8) as i32));
        }
        for v in pending.drain(..) {
            check_null(b, v, fail_null);
        }
    }
    // Checked even when the model needs no workspace, as nnc.h promises; infer() passes
    // its static arena, which is never empty (at least one byte).
    check_null(b, ws, fail_align);
    let ok = b.create_block();
    let misaligned = b.ins().band_imm_u(ws, (plan::ALIGN - 1) as i64);
    b.ins().brif(misaligned, fail_align, &[], ok, &[]);
    b.seal_block(ok);
    b.switch_to_block(ok);
    (fail_null, fail_align)
}

/// What the node sequence of `infer_with_workspace` (and of `run` with a pool) calls.
struct NodeSequence<'a> {
    graph: &'a Graph,
    plan: &'a MemoryPlan,
    node_fns: &'a [Option<FuncId>],
    weights: cranelift_module::DataId,
    copy_fn: FuncId,
    clear_upper: Option<FuncId>,
    /// Run first: returns `NNC_ERR_UNSUPPORTED_CPU` on a CPU lacking a feature used.
    cpu_check: Option<&'a cpu_check::CpuCheck>,
    pass_workspace: bool,
    pooled: &'a run::Pooled,
    row_loops: &'a [Option<row_loops::RowLoop>],
    /// A graph with symbolic shapes: where the symbols' values are, and which nodes
    /// read them.
    symbols: Option<&'a symbol_block::SymbolBlock>,
    symbolic_nodes: &'a [bool],
}

/// `PREFIXinfer_with_workspace(inputs, outputs, workspace)` of a graph with dims:
/// `emit` runs its node sequence with every dim at its maximum and returns the status.
fn define_exported_infer_with_workspace(
    (module, ctx, fctx, isa): (
        &mut ObjectModule,
        &mut Context,
        &mut FunctionBuilderContext,
        &Arc<dyn TargetIsa>,
    ),
    prefix: &str,
    emit: impl FnOnce(&mut FunctionBuilder, &mut ObjectModule, (Value, Value, Value)) -> Value,
) -> Result<FuncId> {
    let sig = ptr_signature(module, 3, true);
    let name = format!("{prefix}infer_with_workspace");
    define_function(
        module,
        ctx,
        fctx,
        isa,
        &name,
        Linkage::Export,
        sig,
        |b, module, p| {
            let status = emit(b, module, (p[0], p[1], p[2]));
            b.ins().return_(&[status]);
            Ok(())
        },
    )
}

/// `infer_with_workspace(inputs, outputs, workspace)`: every node in order, a split
/// node's tasks in a loop; or, `with_pool`, the local `run_pooled(inputs, outputs,
/// workspace, pool)` that launches the split nodes' tasks on the pool.
fn define_infer_with_workspace(
    module: &mut ObjectModule,
    ctx: &mut Context,
    fctx: &mut FunctionBuilderContext,
    isa: &Arc<dyn TargetIsa>,
    seq: &NodeSequence,
    with_pool: bool,
    name: &str,
) -> Result<FuncId> {
    let NodeSequence {
        graph,
        plan,
        node_fns,
        weights,
        copy_fn,
        clear_upper,
        cpu_check,
        pass_workspace,
        pooled,
        row_loops,
        symbols,
        symbolic_nodes,
    } = *seq;
    let sig = ptr_signature(module, if with_pool { 4 } else { 3 }, true);
    let linkage = if with_pool || graph.sample_loop.is_some() || symbols.is_some() {
        Linkage::Local
    } else {
        Linkage::Export
    };
    define_function(
        module,
        ctx,
        fctx,
        isa,
        name,
        linkage,
        sig,
        |b, module, p| {
            let (inputs, outputs, ws) = (p[0], p[1], p[2]);
            let pool = with_pool.then(|| p[3]);
            if let Some(check) = cpu_check {
                check.emit(b, module);
            }
            if let Some(f) = clear_upper {
                let fref = module.declare_func_in_func(f, b.func);
                b.ins().call(fref, &[]);
            }

            let (fail_null, fail_align) = emit_argument_checks(
                b,
                (inputs, graph.inputs.len()),
                (outputs, graph.outputs.len()),
                ws,
            );
            // The shape inputs compiled as the values their outputs imply.
            let fail_guards = (!graph.input_guards.is_empty()).then(|| b.create_block());
            if let Some(fail) = fail_guards {
                input_guards::emit(b, graph, inputs, fail);
            }
            // The symbols' values, and the facts they must meet before anything runs.
            let fail_dims = symbols.map(|_| b.create_block());
            let symbol_values = match (symbols, fail_dims) {
                (Some(block), Some(fail)) => {
                    let values = block.load(b, ws);
                    symbol_block::emit_checks(b, graph, &values, fail);
                    values
                }
                _ => vec![],
            };

            let wgv = module.declare_data_in_func(weights, b.func);
            let wbase = b.ins().symbol_value(PTR, wgv);
            let addr_of = |b: &mut FunctionBuilder, s: Storage| -> Value {
                match s {
                    Storage::Input(i) => b.ins().load(PTR, flags(), inputs, (i * 8) as i32),
                    Storage::Output(i) => b.ins().load(PTR, flags(), outputs, (i * 8) as i32),
                    Storage::Const(off) => b.ins().iadd_imm_s(wbase, off as i64),
                    Storage::Arena(off) => b.ins().iadd_imm_s(ws, off as i64),
                }
            };
            let offset_by = |b: &mut FunctionBuilder, a: Value, off: usize| -> Value {
                if off == 0 {
                    a
                } else {
                    b.ins().iadd_imm_s(a, off as i64)
                }
            };
            let mut fail_status: Option<cranelift_codegen::ir::Block> = None;
            for (k, node) in graph.nodes.iter().enumerate() {
                let Some(fid) = node_fns[k] else { continue };
                let mut operands = node.inputs.iter().flatten().chain(node.outputs.iter());
                // A constant the kernel repacked has no storage: its parameter is unused.
                let mut operand_address = |b: &mut FunctionBuilder| {
                    let v = operands.next()?;
                    Some(match plan.storage[v.0] {
                        Some(s) => {
                            let a = addr_of(b, s);
                            offset_by(b, a, plan.offset[v.0])
                        }
                        None => b.ins().iconst(PTR, 0),
                    })
                };
                if let Some(rows) = &row_loops[k] {
                    let mut addresses = vec![];
                    while let Some(a) = operand_address(b) {
                        addresses.push(a);
                    }
                    let count = plan.storage[rows.count.0].expect("a count has storage");
                    let count = addr_of(b, count);
                    let count = offset_by(b, count, plan.offset[rows.count.0] + rows.within);
                    let mut extra = vec![];
                    if let Some(off) = plan.scratch[k] {
                        extra.push(addr_of(b, Storage::Arena(off)));
                    }
                    if pass_workspace {
                        extra.push(ws);
                    }
                    let table = plan.operand_tables[k].map(|off| addr_of(b, Storage::Arena(off)));
                    let fref = module.declare_func_in_func(fid, b.func);
                    if rows.whole.is_some() {
                        let mut args = match table {
                            Some(table) => {
                                for (j, &a) in addresses.iter().enumerate() {
                                    b.ins().store(flags(), a, table, (j * 8) as i32);
                                }
                                vec![table]
                            }
                            None => addresses,
                        };
                        args.extend(extra);
                        args.push(count);
                        let call = b.ins().call(fref, &args);
                        stop_on_failure(b, call, &mut fail_status);
                        continue;
                    }
                    let call = RowCall {
                        fref,
                        addresses: &addresses,
                        row_bytes: &rows.row_bytes,
                        table,
                        extra: &extra,
                    };
                    emit_row_loop(b, &call, count, &mut fail_status);
                    continue;
                }
                let mut args = vec![];
                if let Some(off) = plan.operand_tables[k] {
                    // Each address is stored as soon as it is computed, so only one is
                    // live at a time.
                    let table = addr_of(b, Storage::Arena(off));
                    for j in 0.. {
                        let Some(a) = operand_address(b) else { break };
                        let slot = offset_by(b, table, j * 8);
                        b.ins().store(flags(), a, slot, 0);
                    }
                    args.push(table);
                } else {
                    while let Some(a) = operand_address(b) {
                        args.push(a);
                    }
                }
                if let Some(off) = plan.scratch[k] {
                    args.push(addr_of(b, Storage::Arena(off)));
                }
                if pass_workspace {
                    args.push(ws);
                }
                if let (Some(block), true) = (symbols, symbolic_nodes[k]) {
                    args.push(block.address(b, ws));
                }
                // With a pool, a split node's tasks go to it; otherwise the node's
                // whole function runs, like any other.
                if let (Some(pool), true) = (pool, pooled.tasks[k] > 1) {
                    run::emit_pooled_launch(b, module, pooled, k, &args, (ws, pool));
                    continue;
                }
                let fref = module.declare_func_in_func(fid, b.func);
                let call = b.ins().call(fref, &args);
                stop_on_failure(b, call, &mut fail_status);
            }
            let cref = module.declare_func_in_func(copy_fn, b.func);
            for (v, i) in &plan.final_copies {
                let src = addr_of(b, plan.storage[v.0].expect("copied outputs have storage"));
                let src = offset_by(b, src, plan.offset[v.0]);
                let dst = addr_of(b, Storage::Output(*i));
                let n = match graph.ty(*v).dims.is_some() {
                    true => symbol_block::Evaluator {
                        values: &symbol_values,
                        bad_divisor: None,
                    }
                    .bytes(b, graph.ty(*v)),
                    false => kernel::iconst(b, graph.ty(*v).byte_size() as i64),
                };
                b.ins().call(cref, &[dst, src, n]);
            }
            let ok = b.ins().iconst(types::I32, NNC_OK as i64);
            b.ins().return_(&[ok]);

            let dims_failure = fail_dims.map(|blk| (blk, NNC_ERR_DIMS_INCONSISTENT));
            let guard_failure = fail_guards.map(|blk| (blk, NNC_ERR_SHAPE_INPUT_MISMATCH));
            for (blk, code) in [
                (fail_null, NNC_ERR_NULL_POINTER),
                (fail_align, NNC_ERR_MISALIGNED_WORKSPACE),
            ]
            .into_iter()
            .chain(dims_failure)
            .chain(guard_failure)
            {
                b.switch_to_block(blk);
                b.seal_block(blk);
                let c = b.ins().iconst(types::I32, code as i64);
                b.ins().return_(&[c]);
            }
            if let Some(blk) = fail_status {
                b.switch_to_block(blk);
                b.seal_block(blk);
                let code = b.block_params(blk)[0];
                b.ins().return_(&[code]);
            }
            Ok(())
        },
    )
}

/// A node that checks indices returns its status: stops at the first failure (the
/// failure block, made on first use, returns it).
fn stop_on_failure(
    b: &mut FunctionBuilder,
    call: cranelift_codegen::ir::Inst,
    fail_status: &mut Option<cranelift_codegen::ir::Block>,
) {
    if let Some(&status) = b.inst_results(call).first() {
        let fail = *fail_status.get_or_insert_with(|| {
            let blk = b.create_block();
            b.append_block_param(blk, types::I32);
            blk
        });
        let next = b.create_block();
        b.ins()
            .brif(status, fail, &[BlockArg::Value(status)], next, &[]);
        b.seal_block(next);
        b.switch_to_block(next);
    }
}

/// One call of a row-looped node's function per row (see [`row_loops`]).
struct RowCall<'a> {
    fref: cranelift_codegen::ir::FuncRef,
    /// The operands' addresses at row 0.
    addresses: &'a [Value],
    /// Bytes per row of each operand that carries rows.
    row_bytes: &'a [Option<usize>],
    /// The operand table the addresses go into, when the node takes one.
    table: Option<Value>,
    /// Scratch and workspace arguments, after the operands.
    extra: &'a [Value],
}

/// Calls the node once per row: the extent read from `count` (an int64 the producing
/// node wrote, never more than the planned rows), each row-carrying operand advanced
/// by its row.
fn emit_row_loop(
    b: &mut FunctionBuilder,
    call: &RowCall,
    count: Value,
    fail_status: &mut Option<cranelift_codegen::ir::Block>,
) {
    let rows = b.ins().load(types::I64, flags(), count, 0);
    let zero = kernel::iconst(b, 0);
    kernel::range_loop(b, zero, rows, |b, i| {
        let operands: Vec<Value> = (call.addresses.iter().zip(call.row_bytes))
            .map(|(&a, bytes)| match bytes {
                Some(n) => {
                    let step = b.ins().imul_imm_s(i, *n as i64);
                    b.ins().iadd(a, step)
                }
                None => a,
            })
            .collect();
        let mut args = match call.table {
            Some(table) => {
                for (j, &a) in operands.iter().enumerate() {
                    b.ins().store(flags(), a, table, (8 * j) as i32);
                }
                vec![table]
            }
            None => operands,
        };
        args.extend_from_slice(call.extra);
        let inst = b.ins().call(call.fref, &args);
        stop_on_failure(b, inst, fail_status);
    });
}

fn define_infer(
    module: &mut ObjectModule,
    ctx: &mut Context,
    fctx: &mut FunctionBuilderContext,
    isa: &Arc<dyn TargetIsa>,
    infer_ws: FuncId,
    arena: cranelift_module::DataId,
    prefix: &str,
) -> Result<()> {
    let sig = ptr_signature(module, 2, true);
    let name = format!("{prefix}infer");
    define_function(
        module,
        ctx,
        fctx,
        isa,
        &name,
        Linkage::Export,
        sig,
        |b, module, p| {
            let agv = module.declare_data_in_func(arena, b.func);
            let ws = b.ins().symbol_value(PTR, agv);
            let fref = module.declare_func_in_func(infer_ws, b.func);
            let call = b.ins().call(fref, &[p[0], p[1], ws]);
            let r = b.inst_results(call)[0];
            b.ins().return_(&[r]);
            Ok(())
        },
    )?;
    Ok(())
}

fn define_model_info_fn(
    module: &mut ObjectModule,
    ctx: &mut Context,
    fctx: &mut FunctionBuilderContext,
    isa: &Arc<dyn TargetIsa>,
    info: cranelift_module::DataId,
    prefix: &str,
) -> Result<()> {
    let mut sig = ptr_signature(module, 0, false);
    sig.returns.push(AbiParam::new(PTR));
    let name = format!("{prefix}model_info");
    define_function(
        module,
        ctx,
        fctx,
        isa,
        &name,
        Linkage::Export,
        sig,
        |b, module, _| {
            let gv = module.declare_data_in_func(info, b.func);
            let p = b.ins().symbol_value(PTR, gv);
            b.ins().return_(&[p]);
            Ok(())
        },
    )?;
    Ok(())
}
