//! The Cranelift back end: memory plan → one object file holding the weights, one
//! function per node, and the exported C ABI (`infer`, `infer_with_workspace`,
//! `model_info`).

mod cpu_check;
mod derived_weights;
pub mod dim_values;
mod dispatch;
mod input_guards;
pub mod isa;
pub mod kernel;
pub mod kernels;
pub mod lower;
pub mod machine_code_pool;
pub mod math;
mod model_info;
pub mod options;
pub mod plan;
mod prepare;
pub mod rodata_pool;
mod row_loops;
mod run;
mod sample_loop;
mod symbol_block;
pub mod target;
pub mod tasks;
mod unary;
mod variant;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{
    types, AbiParam, Block, BlockArg, Function, InstBuilder, Signature, UserFuncName, Value,
};
use std::collections::HashMap;
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
use kernel::{flags, PTR};
use nnc_runtime_abi::abi::{
    NNC_ERR_DIMS_INCONSISTENT, NNC_ERR_MISALIGNED_WORKSPACE, NNC_ERR_NULL_POINTER,
    NNC_ERR_SHAPE_INPUT_MISMATCH, NNC_OK,
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
    /// Weight bytes later variants of a multi-versioned library copy out of the
    /// stored ones before their first inference (zeroed memory in the artifact, not
    /// file bytes; resident only in the process whose CPU runs that variant).
    pub derived_weights_size: usize,
    /// Weight forms several nodes read, largest first.
    pub shared_weights: Vec<SharedWeight>,
    /// The CPU variants, most capable first, as `--cpu` names them (comma-separated).
    pub cpu_variants: String,
    /// The features a CPU needs to run the library (comma-separated).
    pub required_cpu_features: String,
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

/// The largest INT8 weight magnitude that every variant of `target` multiplies with
/// exact sums at full speed: 64 where a variant runs AVX2's `vpmaddubsw`, whose sum of
/// two u8 · s8 products saturates past 32767 (255 · 64 · 2 does not), else 127.
pub fn int8_weight_max(target: &Target) -> i8 {
    if target
        .variants()
        .iter()
        .any(plan::int8::multiplies_in_pairs)
    {
        plan::int8::PAIRS_WEIGHT_MAX as i8
    } else {
        127
    }
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
    let targets = opts.target.variants();
    let multi = opts.target.is_multi_versioned();
    // What every variant shares (the exported entry points, copies) is compiled for
    // the least capable, so it runs wherever one of them does.
    let isa = targets.last().expect("at least one variant").isa("speed")?;
    let builder = ObjectBuilder::new(
        isa.clone(),
        "nnc_model",
        cranelift_module::default_libcall_names(),
    )
    .map_err(|e| codegen_err("object setup", e))?;
    let mut module = ObjectModule::new(builder);
    let mut shared = variant::Shared {
        rodata: RodataPool::default(),
        functions: FunctionPool::default(),
        machine_code: machine_code_pool::MachineCodePool::default(),
        // Constants the generated code reads (filled in as nodes are lowered).
        const_read: vec![false; graph.values.len()],
        ctx: module.make_context(),
        fctx: FunctionBuilderContext::new(),
    };
    let task = crate::progress::Task::CodeGeneration;
    progress.start(task, graph.nodes.len() * targets.len());
    let mut variants = vec![];
    for (i, target) in targets.iter().enumerate() {
        let names = variant::Names::new(multi.then_some(i));
        let sources = (graph, lowered, &row_loops);
        let v = variant::lower(
            &mut module,
            &mut shared,
            sources,
            opts,
            target.clone(),
            names,
            progress,
        )?;
        variants.push(v);
    }
    progress.finish(task);
    let arena_size = variants
        .iter()
        .map(|v| v.plan.arena_size)
        .max()
        .unwrap_or(0);
    // Never empty: infer() passes it as the workspace, which must be non-NULL.
    let arena = define_zeroed(&mut module, "nnc_arena", arena_size.max(1))?;
    let info = model_info::define(&mut module, graph, arena_size, &opts.target, &opts.prefix)?;

    // Every variant reads the constants it reads as they are at the same offsets.
    for v in &mut variants {
        plan::place_constants(&mut v.plan, graph, &shared.const_read);
    }
    let weights = define_data(&mut module, "nnc_weights", &variants[0].plan.weights, false)?;
    let variant::Shared {
        mut rodata,
        mut ctx,
        mut fctx,
        ..
    } = shared;
    let common = variant::Common {
        weights,
        copy_fn: define_copy(&mut module, &mut ctx, &mut fctx, &isa)?,
        clear_upper: define_clear_upper_vector_state(&mut module, &targets[0])?,
        cpu_check: cpu_check::define_check(&mut module, &targets)?,
    };
    let mut entries = vec![];
    for v in &variants {
        let parts = (&mut module, &mut ctx, &mut fctx);
        let e = variant::define_entries(parts, v, &common, (graph, &row_loops), opts)?;
        entries.push(e);
    }
    let exported_infer_ws = match (&common.cpu_check, multi) {
        (Some(check), true) => {
            let prepares = define_prepares(
                (&mut module, &mut ctx, &mut fctx, &isa),
                &mut rodata,
                &variants,
            )?;
            let parts = (&mut module, &mut ctx, &mut fctx, &isa);
            dispatch::define_entry_points(
                parts,
                check,
                (&variants, &entries, &prepares),
                &opts.prefix,
            )?
        }
        _ => entries[0].infer_with_workspace,
    };
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
        variants[0].symbols.as_ref().map(|_| graph),
        &opts.prefix,
    )?;
    define_model_info_fn(&mut module, &mut ctx, &mut fctx, &isa, info, &opts.prefix)?;

    let weights_len = variants[0].plan.weights.len();
    let stored_weight_bytes = rodata.weight_bytes();
    let requested_weight_bytes = rodata.requested_weight_bytes();
    let derived_weights_size = rodata.derived_weight_bytes();
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
        derived_weights_size,
        object,
        arena_size,
        arena_lower_bound: variants
            .iter()
            .map(|v| v.plan.lower_bound)
            .max()
            .unwrap_or(0),
        // Every weight byte the artifact stores: constants the code reads as they are,
        // and those lowering repacked, transformed or folded into read-only data (each
        // distinct blob once).
        weights_size: weights_len + stored_weight_bytes,
        unshared_weights_size: weights_len + requested_weight_bytes,
        shared_weights,
        cpu_variants: opts.target.cpu.clone(),
        required_cpu_features: opts.target.required_feature_names(),
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
    let kernels = plan::plan_kernels(graph, target, options);
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
    build_function((module, ctx, fctx, isa), id.as_u32(), sig, body)?;
    let (alignment, bytes, relocs) =
        compile_code(ctx, isa, id).map_err(|e| codegen_err(name, e))?;
    module
        .define_function_bytes(id, u64::from(alignment), &bytes, &relocs)
        .map_err(|e| codegen_err(name, format!("{e:?}")))?;
    Ok(id)
}

/// Builds `ctx.func`, user function `name_index` of signature `sig`, with `body`.
fn build_function(
    (module, ctx, fctx, isa): (
        &mut ObjectModule,
        &mut Context,
        &mut FunctionBuilderContext,
        &Arc<dyn TargetIsa>,
    ),
    name_index: u32,
    sig: Signature,
    body: impl FnOnce(&mut FunctionBuilder, &mut ObjectModule, &[Value]) -> Result<()>,
) -> Result<()> {
    ctx.func = Function::with_name_signature(UserFuncName::user(0, name_index), sig);
    let mut b = FunctionBuilder::new(&mut ctx.func, fctx);
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    b.seal_block(entry);
    let params = b.block_params(entry).to_vec();
    body(&mut b, module, &params)?;
    b.finalize(isa.frontend_config());
    Ok(())
}

/// Node functions of a multi-versioned library by their compiled code: a later
/// variant's node that compiles to the same bytes and relocations as an earlier one's
/// (a float32 node of `x86-64-v3+avxvnni` and `x86-64-v3`, whose instruction sets
/// differ only in INT8 dot products) calls the earlier function instead of storing a
/// copy.
#[derive(Default)]
pub(super) struct FunctionPool {
    by_hash: HashMap<u64, Vec<(Vec<u8>, String, FuncId)>>,
}

/// [`define_function`] for a node function: when `reuse` and the compiled code and
/// relocations equal a function already in `pool`, that function's id is returned and
/// nothing is defined; otherwise the function is defined and added to the pool.
#[allow(clippy::too_many_arguments)]
fn define_pooled_function(
    (module, ctx, fctx, isa): (
        &mut ObjectModule,
        &mut Context,
        &mut FunctionBuilderContext,
        &Arc<dyn TargetIsa>,
    ),
    (pool, reuse): (&mut FunctionPool, bool),
    name: &str,
    linkage: Linkage,
    sig: Signature,
    body: impl FnOnce(&mut FunctionBuilder, &mut ObjectModule, &[Value]) -> Result<()>,
) -> Result<FuncId> {
    // The function's own id is not known before its code is compared: relocations to
    // itself name a placeholder until it is defined (`u32::MAX` is the entity's
    // reserved value, so the one below it).
    let placeholder = FuncId::from_u32(u32::MAX - 1);
    module.clear_context(ctx);
    build_function((module, ctx, fctx, isa), u32::MAX, sig.clone(), body)?;
    let (alignment, bytes, relocs) =
        compile_code(ctx, isa, placeholder).map_err(|e| codegen_err(name, e))?;
    let mut key = format!("{alignment} {sig:?}");
    for r in &relocs {
        key += &format!(" {} {:?} {:?} {}", r.offset, r.kind, r.name, r.addend);
    }
    let hash = {
        let mut h = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(&bytes, &mut h);
        std::hash::Hash::hash(&key, &mut h);
        std::hash::Hasher::finish(&h)
    };
    if reuse {
        if let Some((_, _, id)) = (pool.by_hash.get(&hash).into_iter().flatten())
            .find(|(b, k, _)| *b == bytes && *k == key)
        {
            return Ok(*id);
        }
    }
    let id = module
        .declare_function(name, linkage, &sig)
        .map_err(|e| codegen_err(name, e))?;
    let relocs: Vec<cranelift_module::ModuleReloc> = relocs
        .into_iter()
        .map(|mut r| {
            if let cranelift_module::ModuleRelocTarget::FunctionOffset(f, offset) = r.name {
                if f == placeholder {
                    r.name = cranelift_module::ModuleRelocTarget::FunctionOffset(id, offset);
                }
            }
            r
        })
        .collect();
    module
        .define_function_bytes(id, u64::from(alignment), &bytes, &relocs)
        .map_err(|e| codegen_err(name, format!("{e:?}")))?;
    pool.by_hash.entry(hash).or_default().push((bytes, key, id));
    Ok(id)
}

/// Compiles the function in `ctx` for `isa` (which may have more features than the
/// module's, for one variant of a multi-versioned library): its alignment, code and
/// relocations, those to itself naming `id`.
fn compile_code(
    ctx: &mut Context,
    isa: &Arc<dyn TargetIsa>,
    id: FuncId,
) -> std::result::Result<(u32, Vec<u8>, Vec<cranelift_module::ModuleReloc>), String> {
    let mut control = cranelift_codegen::control::ControlPlane::default();
    let alignment = ctx
        .compile(&**isa, &mut control)
        .map_err(|e| format!("{:?}", e.inner))?
        .buffer
        .alignment;
    let compiled = ctx.compiled_code().expect("compiled just now");
    let relocs = (compiled.buffer.relocs().iter())
        .map(|r| cranelift_module::ModuleReloc::from_mach_reloc(r, &ctx.func, id))
        .collect();
    Ok((alignment, compiled.buffer.data().to_vec(), relocs))
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
    name: &str,
) -> Result<FuncId> {
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
/// Each variant's preparation (see `prepare.rs`), where it derives weights.
fn define_prepares(
    (module, ctx, fctx, isa): (
        &mut ObjectModule,
        &mut Context,
        &mut FunctionBuilderContext,
        &Arc<dyn TargetIsa>,
    ),
    rodata: &mut RodataPool,
    variants: &[variant::Variant],
) -> Result<Vec<Option<FuncId>>> {
    let jobs = rodata
        .copy_jobs(module, variants.len())
        .map_err(|e| codegen_err("derived weights", e))?;
    if jobs.iter().all(Vec::is_empty) {
        return Ok(vec![None; variants.len()]);
    }
    let copy_program = prepare::define_copy_program(module, ctx, fctx, isa)?;
    (variants.iter().zip(&jobs))
        .map(|(v, jobs)| {
            if jobs.is_empty() {
                return Ok(None);
            }
            let name = v.names.local("nnc_prepare");
            let parts = (&mut *module, &mut *ctx, &mut *fctx, isa);
            prepare::define_prepare(parts, &name, jobs, copy_program).map(Some)
        })
        .collect()
}

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

/// `infer_with_workspace(inputs, outputs, workspace)` of a graph with dims (`name`):
/// `emit` runs its node sequence with every dim at its maximum and returns the status.
fn define_exported_infer_with_workspace(
    (module, ctx, fctx, isa): (
        &mut ObjectModule,
        &mut Context,
        &mut FunctionBuilderContext,
        &Arc<dyn TargetIsa>,
    ),
    (name, linkage): (String, Linkage),
    emit: impl FnOnce(&mut FunctionBuilder, &mut ObjectModule, (Value, Value, Value)) -> Value,
) -> Result<FuncId> {
    let sig = ptr_signature(module, 3, true);
    define_function(
        module,
        ctx,
        fctx,
        isa,
        &name,
        linkage,
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
    (with_pool, linkage): (bool, Linkage),
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
