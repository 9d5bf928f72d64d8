//! Calls of the float32 GEMM from lowering. Every GEMM shape a node needs becomes its
//! own function, compiled out of line at opt_level "none" and called from the node's
//! function: the register tile of the Cranelift kernel (`kernels/clif/gemm.rs`) is
//! scheduled by hand, and at "speed" the e-graph re-elaborates an unrolled K step
//! accumulator by accumulator, which keeps every broadcast of the step alive at once
//! and spills (256³ GEMM on this Xeon: ~25 GFLOP/s inside the node function at
//! "speed", ~37 out of line at "none"; the 128-bit FMA peak is ~46). The interface
//! (specs, layouts, packing) is `kernels/gemm.rs`, re-exported here.

pub use crate::codegen::kernels::gemm::*;
pub(super) use crate::codegen::plan::gemm::{col_split, row_split, SplitAxis};

use cranelift_codegen::control::ControlPlane;
use cranelift_codegen::ir::{
    AbiParam, FuncRef, Function, InstBuilder, Signature, UserFuncName, Value,
};
use cranelift_codegen::Context;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_module::{FuncId, Module, ModuleReloc};

use super::LowerCtx;
use crate::codegen::kernel::PTR;
use crate::codegen::kernels::x86;
use crate::codegen::tasks::Split;
use crate::ops::Activation;

/// A GEMM function defined in the module, callable from the node being lowered.
pub struct GemmKernel {
    func: FuncRef,
    addends: usize,
    /// Applies an activation the machine-code epilogue lacks (transcendental ones) to
    /// C after the kernel: one pass over C while it is still in cache.
    post: Option<FuncRef>,
}

impl GemmKernel {
    /// Defines the out-of-line function computing `spec`.
    pub fn define(ctx: &mut LowerCtx, spec: &GemmSpec) -> Result<GemmKernel, String> {
        let counted = usize::from(spec.rows_at_run_time);
        let params = 3
            + spec.addends.len()
            + counted
            + usize::from(spec.cols_at_run_time)
            + usize::from(spec.run_time_strides.any());
        let packed = spec.a == ALayout::Packed
            || matches!(
                spec.b,
                BLayout::Packed | BLayout::PackedBlocks | BLayout::Taps { .. }
            );
        let mut post = None;
        let without_activation = GemmSpec {
            activation: Activation::None,
            ..spec.clone()
        };
        let func = match spec.geometry.kernel {
            KernelKind::X86(isa) if x86::gemm::supports(spec) => {
                define_machine_code(ctx, params, &x86::gemm::emit(spec, isa)?)?
            }
            KernelKind::X86(isa)
                if x86::gemm::supports(&without_activation) && !spec.run_time_strides.any() =>
            {
                let act = spec.activation;
                let (m, n, ldc) = (spec.m, spec.n, spec.ldc);
                // At "speed": the activation's polynomial math is ordinary code, and
                // at "none" every intermediate went through the stack.
                post = Some(define_out_of_line_at(ctx, 1 + counted, "speed", |b, p| {
                    let rows = match p.get(1) {
                        Some(&rows) => rows,
                        None => crate::codegen::kernel::iconst(b, m as i64),
                    };
                    apply_activation(b, act, p[0], rows, n, ldc)
                })?);
                define_machine_code(ctx, params, &x86::gemm::emit(&without_activation, isa)?)?
            }
            KernelKind::X86(_)
                if spec.rows_at_run_time
                    || spec.cols_at_run_time
                    || spec.run_time_strides.any() =>
            {
                return Err(format!(
                    "rows or columns counted at run time the x86 kernel cannot compute: {spec:?}"
                ))
            }
            _ if spec.cols_at_run_time || spec.run_time_strides.any() => {
                return Err("columns or strides at run time need the x86 machine-code GEMM".into())
            }
            KernelKind::X86(_) if packed => {
                return Err(format!(
                    "packed GEMM the x86 kernel cannot compute: {spec:?}"
                ))
            }
            _ => {
                let fma = has_fma(ctx.target);
                let spec = GemmSpec {
                    geometry: Geometry::CLIF,
                    ..spec.clone()
                };
                define_out_of_line(ctx, params, |b, p| {
                    crate::codegen::kernels::clif::gemm::emit(b, fma, &spec, p)
                })?
            }
        };
        Ok(GemmKernel {
            func,
            addends: spec.addends.len(),
            post,
        })
    }

    /// Emits a call: `C = alpha·A·B + Σ scale·T` with A at `a`, B at `b_ptr`, C at `c`
    /// and the addends at `addends` (one per [`GemmSpec::addends`]).
    pub fn call(
        &self,
        b: &mut FunctionBuilder,
        a: Value,
        b_ptr: Value,
        c: Value,
        addends: &[Value],
    ) {
        debug_assert_eq!(addends.len(), self.addends, "one address per addend");
        self.call_rows(b, a, b_ptr, c, addends, None);
    }

    /// [`Self::call`] for a kernel of rows counted at run time: `rows` of them.
    pub fn call_rows(
        &self,
        b: &mut FunctionBuilder,
        a: Value,
        b_ptr: Value,
        c: Value,
        addends: &[Value],
        rows: Option<Value>,
    ) {
        self.call_counted(b, (a, b_ptr, c), addends, rows, None);
    }

    /// [`Self::call`] for a kernel of rows or columns counted at run time (the spec's
    /// `rows_at_run_time`, `cols_at_run_time`).
    pub fn call_counted(
        &self,
        b: &mut FunctionBuilder,
        (a, b_ptr, c): (Value, Value, Value),
        addends: &[Value],
        rows: Option<Value>,
        cols: Option<Value>,
    ) {
        self.call_strided(b, (a, b_ptr, c), addends, (rows, cols), None);
    }

    /// [`Self::call_counted`] for a kernel of `run_time_strides`: `stride` floats.
    pub fn call_strided(
        &self,
        b: &mut FunctionBuilder,
        (a, b_ptr, c): (Value, Value, Value),
        addends: &[Value],
        (rows, cols): (Option<Value>, Option<Value>),
        stride: Option<Value>,
    ) {
        let mut args = vec![a, b_ptr, c];
        args.extend_from_slice(addends);
        args.extend(rows);
        args.extend(cols);
        args.extend(stride);
        b.ins().call(self.func, &args);
        if let Some(post) = self.post {
            let mut args = vec![c];
            args.extend(rows);
            b.ins().call(post, &args);
        }
    }
}

/// `C[i, j] = act(C[i, j])` over `rows × n` with rows `ldc` floats apart.
fn apply_activation(
    b: &mut FunctionBuilder,
    act: Activation,
    c: Value,
    rows: Value,
    n: usize,
    ldc: usize,
) -> Result<(), String> {
    let mut failure = None;
    let zero = crate::codegen::kernel::iconst(b, 0);
    crate::codegen::kernel::range_loop(b, zero, rows, |b, i| {
        let row = crate::codegen::kernel::elem_addr(b, c, i, ldc * 4);
        if let Err(e) = super::elementwise::activate_run(b, row, row, None, n, act) {
            failure = Some(e);
        }
    });
    failure.map_or(Ok(()), Err)
}

/// Defines a function of `params` pointer arguments whose body `build` emits, compiled
/// at opt_level "none" for the node's target, and imports it into the function being
/// lowered. For hand-scheduled kernels (this GEMM, the depthwise conv): the program
/// order written is the order executed.
pub(super) fn define_out_of_line(
    ctx: &mut LowerCtx,
    params: usize,
    build: impl FnOnce(&mut FunctionBuilder, &[Value]) -> Result<(), String>,
) -> Result<FuncRef, String> {
    define_out_of_line_at(ctx, params, "none", build)
}

/// [`define_out_of_line`] at Cranelift opt_level `opt` ("none" or "speed").
fn define_out_of_line_at(
    ctx: &mut LowerCtx,
    params: usize,
    opt: &str,
    build: impl FnOnce(&mut FunctionBuilder, &[Value]) -> Result<(), String>,
) -> Result<FuncRef, String> {
    let (id, sig) = declare_kernel(ctx, params)?;
    // Namespace 2: node functions use 0 and the exported entry points 1.
    let mut func = Function::with_name_signature(UserFuncName::user(2, id.as_u32()), sig);
    let isa = ctx.target.isa(opt).map_err(|e| e.to_string())?;
    let mut fctx = FunctionBuilderContext::new();
    {
        let mut b = FunctionBuilder::new(&mut func, &mut fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        b.seal_block(entry);
        let args = b.block_params(entry).to_vec();
        build(&mut b, &args)?;
        b.ins().return_(&[]);
        b.seal_all_blocks();
        b.finalize(isa.frontend_config());
    }
    let mut cctx = Context::for_function(func);
    cctx.compile(&*isa, &mut ControlPlane::default())
        .map_err(|e| format!("{:?}", e.inner))?;
    let compiled = cctx
        .compiled_code()
        .ok_or("out-of-line kernel did not compile")?;
    let alignment = u64::from(compiled.buffer.alignment).max(64);
    let relocs: Vec<ModuleReloc> = compiled
        .buffer
        .relocs()
        .iter()
        .map(|r| ModuleReloc::from_mach_reloc(r, &cctx.func, id))
        .collect();
    let bytes = compiled.buffer.data().to_vec();
    ctx.module
        .define_function_bytes(id, alignment, &bytes, &relocs)
        .map_err(|e| e.to_string())?;
    Ok(ctx.module.declare_func_in_func(id, ctx.b.func))
}

/// Declares an anonymous function of `params` pointer arguments.
fn declare_kernel(ctx: &mut LowerCtx, params: usize) -> Result<(FuncId, Signature), String> {
    let mut sig = ctx.module.make_signature();
    sig.params.extend((0..params).map(|_| AbiParam::new(PTR)));
    let id = ctx
        .module
        .declare_anonymous_function(&sig)
        .map_err(|e| e.to_string())?;
    Ok((id, sig))
}

/// Defines a function of `params` pointer arguments from machine code without
/// relocations (once per distinct code, see [`crate::codegen::machine_code_pool`]),
/// and imports it into the function being lowered.
pub(super) fn define_machine_code(
    ctx: &mut LowerCtx,
    params: usize,
    code: &[u8],
) -> Result<FuncRef, String> {
    let id = match ctx.machine_code.get(params, code) {
        Some(id) => id,
        None => {
            let (id, _) = declare_kernel(ctx, params)?;
            ctx.module
                .define_function_bytes(id, 64, code, &[])
                .map_err(|e| e.to_string())?;
            ctx.machine_code.insert(params, code, id);
            id
        }
    };
    Ok(ctx.module.declare_func_in_func(id, ctx.b.func))
}

/// Packs constant `A[i, k] = get(i, k)` (a conv's weights) for a GEMM split by row
/// tiles into `split`'s tasks: each task's rows packed on their own ([`pack_a`] is K
/// block by K block over all rows, so a task's rows would not be contiguous), one
/// group after another, task `t`'s at `t · rows_per_task · K` floats.
pub fn pack_a_by_task(
    geom: &Geometry,
    m: usize,
    k: usize,
    split: &Split,
    get: impl Fn(usize, usize) -> f32,
) -> Vec<f32> {
    let size = split.per * geom.mr;
    let mut out = Vec::with_capacity(m * k);
    for r0 in (0..m).step_by(size.max(1)) {
        let rows = size.min(m - r0);
        out.extend(pack_a(geom, rows, k, |i, kk| get(r0 + i, kk)));
    }
    out
}

/// Emits `C = A·B (+ addends)` for `spec`, or, when the node is split into tasks, for
/// the current task's rows or columns only: whole register tiles per task, so every
/// element is computed exactly as without the split.
pub fn call_split(
    ctx: &mut LowerCtx,
    axis: SplitAxis,
    spec: &GemmSpec,
    a: Value,
    b_ptr: Value,
    c: Value,
    addends: &[Value],
) -> Result<(), String> {
    let task = match ctx.task {
        Some(task) => task,
        // Whole-K panels of packed B go group by group, as the tasks do: in one call
        // the kernel would stream a K block of every panel at once. A packed by task
        // groups (see `pack_a_by_task`) is only read that way.
        None if ctx.kernel.tasks > 1
            && ((axis == SplitAxis::Cols && spec.b == BLayout::Packed)
                || (axis == SplitAxis::Rows && spec.a == ALayout::Packed)) =>
        {
            return call_each_task(ctx, axis, spec, a, b_ptr, c, addends);
        }
        None => {
            let kernel = GemmKernel::define(ctx, spec)?;
            kernel.call(ctx.b, a, b_ptr, c, addends);
            return Ok(());
        }
    };
    call_task(ctx, axis, spec, (a, b_ptr, c, addends), task)
}

/// The whole GEMM as its tasks one after another.
fn call_each_task(
    ctx: &mut LowerCtx,
    axis: SplitAxis,
    spec: &GemmSpec,
    a: Value,
    b_ptr: Value,
    c: Value,
    addends: &[Value],
) -> Result<(), String> {
    let gemm = TaskGemm::define(ctx, axis, spec)?;
    let b = &mut *ctx.b;
    let (zero, tasks) = (
        crate::codegen::kernel::iconst(b, 0),
        crate::codegen::kernel::iconst(b, gemm.split.tasks as i64),
    );
    crate::codegen::kernel::range_loop(b, zero, tasks, |b, task| {
        gemm.emit(b, (a, b_ptr, c, addends), task)
    });
    Ok(())
}

/// Emits task `task`'s share (rows or columns) of `C = A·B (+ addends)`.
fn call_task(
    ctx: &mut LowerCtx,
    axis: SplitAxis,
    spec: &GemmSpec,
    operands: (Value, Value, Value, &[Value]),
    task: Value,
) -> Result<(), String> {
    let gemm = TaskGemm::define(ctx, axis, spec)?;
    gemm.emit(ctx.b, operands, task);
    Ok(())
}

/// The kernels of one split GEMM's tasks (all equal but maybe the last) and how far
/// each task moves the operands.
struct TaskGemm {
    split: Split,
    full: GemmKernel,
    last: Option<GemmKernel>,
    /// Bytes one task moves A, B, C and each addend on.
    steps: (usize, usize, usize),
    addend_steps: Vec<usize>,
}

impl TaskGemm {
    fn define(ctx: &mut LowerCtx, axis: SplitAxis, spec: &GemmSpec) -> Result<TaskGemm, String> {
        let (split, piece, total) = match axis {
            SplitAxis::Rows => (
                row_split(spec.m, spec.n, spec.k, &spec.geometry),
                spec.geometry.mr,
                spec.m,
            ),
            SplitAxis::Cols => (
                col_split(spec.m, spec.n, spec.k, &spec.b, &spec.geometry),
                spec.geometry.nr,
                spec.n,
            ),
        };
        if split.tasks != ctx.kernel.tasks {
            return Err(format!(
                "the plan split this GEMM into {} tasks, its axis into {}",
                ctx.kernel.tasks, split.tasks
            ));
        }
        let size = split.per * piece;
        let last_size = total - size * (split.tasks - 1);
        let sized = |n: usize| match axis {
            SplitAxis::Rows => GemmSpec {
                m: n,
                ..spec.clone()
            },
            SplitAxis::Cols => GemmSpec { n, ..spec.clone() },
        };
        let steps = match (axis, spec.a, spec.b) {
            (SplitAxis::Rows, ALayout::Strided { row_stride, .. }, _) => {
                (size * row_stride * 4, 0, size * spec.ldc * 4)
            }
            // Packed by task groups (`pack_a_by_task`): a group is `size` rows of K.
            (SplitAxis::Rows, ALayout::Packed, _) => (size * spec.k * 4, 0, size * spec.ldc * 4),
            (SplitAxis::Cols, _, BLayout::Rows { .. }) => {
                (0, size * 4, size * spec.c_col_stride * 4)
            }
            (SplitAxis::Cols, _, BLayout::Packed) => {
                (0, size * spec.k * 4, size * spec.c_col_stride * 4)
            }
            (SplitAxis::Cols, _, _) => return Err("this B layout is not split by columns".into()),
        };
        let addend_steps = spec
            .addends
            .iter()
            .map(|d| match axis {
                SplitAxis::Rows => size * d.row_stride * 4,
                SplitAxis::Cols => size * d.col_stride * 4,
            })
            .collect();
        let full = GemmKernel::define(ctx, &sized(size))?;
        let last = if last_size == size {
            None
        } else {
            Some(GemmKernel::define(ctx, &sized(last_size))?)
        };
        Ok(TaskGemm {
            split,
            full,
            last,
            steps,
            addend_steps,
        })
    }

    fn emit(
        &self,
        b: &mut FunctionBuilder,
        (a, b_ptr, c, addends): (Value, Value, Value, &[Value]),
        task: Value,
    ) {
        let at = |b: &mut FunctionBuilder, base: Value, step: usize| match step {
            0 => base,
            _ => crate::codegen::kernel::elem_addr(b, base, task, step),
        };
        let (a_step, b_step, c_step) = self.steps;
        let a_task = at(b, a, a_step);
        let b_task = at(b, b_ptr, b_step);
        let c_task = at(b, c, c_step);
        let addend_task: Vec<Value> = addends
            .iter()
            .zip(&self.addend_steps)
            .map(|(&p, &step)| at(b, p, step))
            .collect();
        match &self.last {
            None => self.full.call(b, a_task, b_task, c_task, &addend_task),
            Some(last) => crate::codegen::kernel::if_last_task(
                b,
                task,
                self.split.tasks,
                |b| last.call(b, a_task, b_task, c_task, &addend_task),
                |b| self.full.call(b, a_task, b_task, c_task, &addend_task),
            ),
        }
    }
}
