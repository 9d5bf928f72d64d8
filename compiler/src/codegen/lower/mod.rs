//! Lowering of each core op to CLIF, one module per op family. Every node becomes one
//! function whose parameters are the addresses of its inputs, outputs and scratch.

mod attention;
mod conv;
mod conv_transpose;
pub(crate) mod conv_u8s8;
mod counted_rows;
pub(crate) mod elementwise;
pub mod f16_weights;
mod gather_packed;
mod gemm;
pub mod index_check;
mod indexing;
mod linalg;
mod low_precision;
mod movement;
mod norm;
mod planes;
mod pool;
mod quant;
mod recurrence;
mod reduce;
mod resize;
pub mod run_shape;
mod run_time_slice;
mod sort;
pub(crate) mod symbolic;
mod value_dependent;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;
use cranelift_module::Module;

use super::rodata_pool::RodataPool;
use cranelift_object::ObjectModule;

use super::kernel::{self, PTR};
use super::plan::{NodeKernel, Strategy};
use super::Target;
use crate::ir::{Tensor, TensorType};
use crate::ops::Op;

pub use gemm::{Geometry, KernelKind};

pub type LowerResult = Result<(), String>;

/// Longest axis a lowering builds a compile-time index table for (Pad's and Resize's
/// per-axis source offsets): such tables grow with the axis, so a hostile shape that
/// fits `--max-tensor-bytes` could otherwise make them gigabytes large.
pub const MAX_TABLE_AXIS: usize = 1 << 24;

/// Refuses an axis of `len` elements that needs a per-element table.
pub fn check_table_axis(what: &str, len: usize) -> LowerResult {
    if len > MAX_TABLE_AXIS {
        return Err(format!(
            "{what} has an axis of {len} elements; nnc's index tables allow at most {MAX_TABLE_AXIS}"
        ));
    }
    Ok(())
}

/// One input or output of the node being lowered.
#[derive(Clone)]
pub struct Operand {
    /// The buffer's address (a function parameter).
    pub ptr: Value,
    pub ty: TensorType,
    /// The value, when it is a compile-time constant (weights): kernels may specialize
    /// on it or repack it.
    pub constant: Option<Tensor>,
}

pub struct LowerCtx<'a, 'f> {
    pub b: &'a mut FunctionBuilder<'f>,
    pub target: &'a Target,
    /// The kernel plan's decision for this node, which lowering follows.
    pub kernel: &'a NodeKernel,
    pub module: &'a mut ObjectModule,
    /// `None` for omitted optional inputs.
    pub inputs: Vec<Option<Operand>>,
    pub outputs: Vec<Operand>,
    /// Arena scratch of the planned bytes, when the node asked for some (with a
    /// thread pool, the running worker's own).
    pub scratch: Option<Value>,
    /// The index (an i64 below the plan's `tasks`) of the task to compute, when the
    /// kernel plan split the node; the lowering then computes only that task's share.
    /// For a node with a prologue, index `tasks` asks for the prologue.
    pub task: Option<Value>,
    /// The node's scratch in the arena, which its prologue fills and every task reads
    /// (`scratch` when not running a task). Tasks keep their own data in `scratch`
    /// past what the prologue writes: worker 0's scratch is this one.
    pub shared_scratch: Option<Value>,
    /// Where float32 weights go when they are stored as half (`--quantize fp16`).
    pub half: Option<HalfWeights>,
    /// What an index read at run time does when it is out of range (see
    /// [`index_check`]): `Fail` only in node functions that return a status.
    pub on_bad_index: index_check::OnBadIndex,
    /// The artifact's read-only data, one symbol per distinct content.
    pub rodata: &'a mut RodataPool,
    /// The machine-code kernels defined so far, one function per distinct code.
    pub machine_code: &'a mut crate::codegen::machine_code_pool::MachineCodePool,
    /// This node's index in the graph, and the name of its largest constant input
    /// (what its weight blobs are reported as).
    pub node_index: usize,
    pub weight_label: &'a str,
    /// For a node computing rows whose number only the run knows (see
    /// [`crate::codegen::row_loops`]): that number, of the `bound` its operands are
    /// planned for.
    pub run_rows: Option<RunRows>,
    /// In a graph with symbolic shapes: the dims' values this run, which a symbolic
    /// node's extents are computed from (see [`run_shape`]).
    pub run_dims: Option<run_shape::RunDims>,
}

/// The rows a node computes when only the run knows how many: `count` (an i64) of the
/// `bound` its row-carrying operands are planned for.
#[derive(Clone, Copy)]
pub struct RunRows {
    pub count: Value,
    pub bound: usize,
}

/// The expansion area of FP16 weights (see [`f16_weights`]): the node's weights are
/// expanded one after another from `region` bytes into the workspace.
pub struct HalfWeights {
    /// The workspace base (a node function parameter).
    pub workspace: Value,
    pub region: usize,
    /// Bytes of the area this node has used so far.
    pub used: usize,
    /// `nnc_expand_f16(dst, src, n)`.
    pub expand: cranelift_module::FuncId,
    /// In a split node's task function: the block that runs as its prologue (see
    /// [`NodeKernel::prologue`]), where the expansions go, so that they run once
    /// before the tasks, which then only read the expanded weights.
    /// With it, this part's index and the parts: each part expands its share of
    /// every blob.
    pub prologue: Option<(cranelift_codegen::ir::Block, Value, usize)>,
}

impl LowerCtx<'_, '_> {
    /// Emits `if cond { then } else { otherwise }`, each lowering into its own block.
    pub fn branch(
        &mut self,
        cond: Value,
        then: impl FnOnce(&mut Self) -> LowerResult,
        otherwise: impl FnOnce(&mut Self) -> LowerResult,
    ) -> LowerResult {
        let (yes, no, join) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        self.b.ins().brif(cond, yes, &[], no, &[]);
        self.b.seal_block(yes);
        self.b.seal_block(no);
        self.b.switch_to_block(yes);
        then(self)?;
        self.b.ins().jump(join, &[]);
        self.b.switch_to_block(no);
        otherwise(self)?;
        self.b.ins().jump(join, &[]);
        self.b.seal_block(join);
        self.b.switch_to_block(join);
        Ok(())
    }

    /// Emits a node with a prologue (see [`NodeKernel::prologue`]): in the whole node,
    /// `prologue(None)` then `tasks` (all of them); in the task function, for task
    /// indices from the task count on, `prologue` of that part (`Some(index − tasks)`
    /// when the plan split it into [`NodeKernel::prologue_parts`], else `None`), and
    /// `tasks` for the others.
    pub fn with_prologue(
        &mut self,
        prologue: impl FnOnce(&mut Self, Option<Value>) -> LowerResult,
        tasks: impl FnOnce(&mut Self) -> LowerResult,
    ) -> LowerResult {
        let Some(task) = self.task else {
            prologue(self, None)?;
            return tasks(self);
        };
        if !self.kernel.prologue {
            return Err("the plan gave this node no prologue".into());
        }
        let first = self.kernel.tasks as i64;
        let is_prologue = self
            .b
            .ins()
            .icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, task, first);
        self.branch(
            is_prologue,
            |ctx| {
                let parts = ctx.kernel.prologue_parts > 1;
                let part = parts.then(|| ctx.b.ins().iadd_imm_s(task, -first));
                prologue(ctx, part)
            },
            tasks,
        )
    }

    /// The GEMM kernel family the kernel plan chose for this node.
    pub fn planned_gemm(&self) -> Result<Geometry, String> {
        match &self.kernel.strategy {
            Strategy::Gemm(g) => Ok(*g),
            Strategy::Conv(c) => c
                .gemm()
                .copied()
                .ok_or_else(|| format!("the planned {} runs no GEMM", c.name())),
            _ => Err("no GEMM kernel was planned for this node".into()),
        }
    }

    pub fn input(&self, i: usize) -> Result<Operand, String> {
        self.inputs
            .get(i)
            .cloned()
            .flatten()
            .ok_or_else(|| format!("input {i} is missing"))
    }

    pub fn output(&self, i: usize) -> Operand {
        self.outputs[i].clone()
    }

    /// Places float32 weights (repacked for a kernel) in read-only data and returns the
    /// address the kernel reads them from: the data itself, or with FP16 weights a
    /// float32 copy the node expands into the workspace first (see [`f16_weights`]).
    pub fn weights_f32(&mut self, floats: &[f32]) -> Result<Value, String> {
        let Some(half) = &self.half else {
            return self.weight_rodata(gemm::f32_bytes(floats));
        };
        let (workspace, at, expand) = (half.workspace, half.region + half.used, half.expand);
        let prologue = half.prologue;
        let bytes = f16_weights::f16_bytes(floats);
        let halves = bytes.len() / 2;
        let f = self.module.declare_func_in_func(expand, self.b.func);
        match prologue {
            None => {
                let src = self.weight_rodata(bytes)?;
                let dst = self.b.ins().iadd_imm_s(workspace, at as i64);
                let n = self.b.ins().iconst(PTR, halves as i64);
                self.b.ins().call(f, &[dst, src, n]);
            }
            Some((block, part, parts)) => {
                // Inserted before the prologue block's branch: the code being lowered
                // goes on in the current block. Part `part` expands quanta
                // [part·per, min(part·per + per, quanta)).
                use cranelift_codegen::cursor::{Cursor, FuncCursor};
                let src = self.weight_data(bytes, true)?;
                let quanta = halves / f16_weights::QUANTUM;
                let per = quanta.div_ceil(parts.max(1));
                let mut pos = FuncCursor::new(self.b.func).at_last_inst(block);
                let src = pos.ins().symbol_value(PTR, src);
                let all = pos.ins().iconst(PTR, quanta as i64);
                let first = pos.ins().imul_imm_s(part, per as i64);
                let first = pos.ins().umin(first, all);
                let end = pos.ins().iadd_imm_s(first, per as i64);
                let end = pos.ins().umin(end, all);
                let count = pos.ins().isub(end, first);
                let n = pos.ins().imul_imm_s(count, f16_weights::QUANTUM as i64);
                let dst = pos.ins().iadd_imm_s(workspace, at as i64);
                let dst_off = pos
                    .ins()
                    .imul_imm_s(first, (f16_weights::QUANTUM * 4) as i64);
                let dst = pos.ins().iadd(dst, dst_off);
                let src_off = pos
                    .ins()
                    .imul_imm_s(first, (f16_weights::QUANTUM * 2) as i64);
                let src = pos.ins().iadd(src, src_off);
                pos.ins().call(f, &[dst, src, n]);
            }
        }
        let dst = self.b.ins().iadd_imm_s(workspace, at as i64);
        if let Some(h) = &mut self.half {
            h.used += (4 * halves).next_multiple_of(super::plan::ALIGN);
        }
        Ok(dst)
    }

    /// [`Self::rodata`] for weights derived from the model's (repacked, transformed or
    /// folded), counted as weights in the sizes `nnc compile` reports.
    pub fn weight_rodata(&mut self, bytes: Vec<u8>) -> Result<Value, String> {
        self.place(bytes, true)
    }

    /// Places `bytes` (a table, or weights through [`Self::weight_rodata`]) in
    /// read-only data, 64-byte aligned, and returns its address inside the current
    /// function. Equal bytes asked for by several nodes are stored once.
    pub fn rodata(&mut self, bytes: Vec<u8>) -> Result<Value, String> {
        self.place(bytes, false)
    }

    fn place(&mut self, bytes: Vec<u8>, weight: bool) -> Result<Value, String> {
        let gv = self.weight_data(bytes, weight)?;
        Ok(cranelift_codegen::ir::InstBuilder::symbol_value(
            self.b.ins(),
            PTR,
            gv,
        ))
    }

    /// The global value of `bytes` in read-only data (see [`Self::place`]).
    fn weight_data(
        &mut self,
        bytes: Vec<u8>,
        weight: bool,
    ) -> Result<cranelift_codegen::ir::GlobalValue, String> {
        let id = self.rodata.intern(
            &mut *self.module,
            bytes,
            weight,
            self.node_index,
            self.weight_label,
        )?;
        Ok(self.module.declare_data_in_func(id, self.b.func))
    }
}

/// Lowers task `ctx.task` of a node the plan split into row slices: the node itself on
/// the task's slice (its operands narrowed to those rows), through code for the full
/// slices and for the last one.
pub fn lower_row_task(ctx: &mut LowerCtx, op: &Op) -> LowerResult {
    if ctx.run_dims.is_some() && (symbolic::is_symbolic(ctx) || matches!(op, Op::DimValues { .. }))
    {
        return symbolic::lower(ctx, op);
    }
    if let Strategy::Planes(_) = ctx.kernel.strategy {
        return planes::lower_planes(ctx, op);
    }
    let (Some(task), Some(rows)) = (ctx.task, ctx.kernel.rows) else {
        return lower_node(ctx, op);
    };
    let out_rank = ctx.outputs[0].ty.rank();
    let last_rows = rows.rows - rows.rows_per * (rows.tasks - 1);
    let (inputs, outputs) = (ctx.inputs.clone(), ctx.outputs.clone());
    let slice = |b: &mut FunctionBuilder, o: &Operand, n: usize| -> Operand {
        // Operands of lower rank, or with 1 there, broadcast along the axis.
        let Some(at) = (rows.axis + o.ty.rank()).checked_sub(out_rank) else {
            return o.clone();
        };
        if o.ty.shape[at] != rows.rows {
            return o.clone();
        }
        let row_bytes = o.ty.shape[at + 1..].iter().product::<usize>() * o.ty.dtype.size();
        let mut ty = o.ty.clone();
        ty.shape[at] = n;
        Operand {
            ptr: kernel::elem_addr(b, o.ptr, task, rows.rows_per * row_bytes),
            ty,
            constant: None,
        }
    };
    // The node on `n` rows from the task's first.
    let lower_slice = |ctx: &mut LowerCtx, n: usize| -> LowerResult {
        ctx.inputs = match rows.transposed_input {
            // A Transpose reads its input whole, from the task's first row on.
            Some(elems) => inputs
                .iter()
                .map(|i| {
                    i.as_ref().map(|o| Operand {
                        ptr: kernel::elem_addr(
                            ctx.b,
                            o.ptr,
                            task,
                            rows.rows_per * elems * o.ty.dtype.size(),
                        ),
                        ty: o.ty.clone(),
                        constant: None,
                    })
                })
                .collect(),
            None => inputs
                .iter()
                .map(|i| i.as_ref().map(|o| slice(ctx.b, o, n)))
                .collect(),
        };
        ctx.outputs = outputs.iter().map(|o| slice(ctx.b, o, n)).collect();
        lower_node(ctx, op)
    };
    let is_last = ctx
        .b
        .ins()
        .icmp_imm_u(IntCC::Equal, task, (rows.tasks - 1) as i64);
    ctx.task = None;
    ctx.branch(
        is_last,
        |ctx| lower_slice(ctx, last_rows),
        |ctx| lower_slice(ctx, rows.rows_per),
    )?;
    ctx.task = Some(task);
    Ok(())
}

pub fn lower_node(ctx: &mut LowerCtx, op: &Op) -> LowerResult {
    match op {
        Op::Unary(u) => elementwise::unary(ctx, *u),
        Op::Binary(b) => elementwise::binary(ctx, *b),
        Op::Where => elementwise::where_op(ctx),
        Op::Cast { to } => elementwise::cast(ctx, *to),
        Op::CastCodes {
            to,
            saturate,
            rounding,
        } => low_precision::cast_codes(ctx, *to, *saturate, *rounding),
        Op::Reshape { .. } | Op::BitCast { .. } => movement::copy(ctx),
        Op::Transpose { perm } => movement::transpose(ctx, perm),
        Op::Slice { starts, steps, .. } => movement::slice(ctx, starts, steps),
        Op::Expand { .. } => movement::expand(ctx),
        Op::Concat { axis } => movement::concat(ctx, *axis),
        Op::Gather { axis } => match &ctx.kernel.strategy {
            Strategy::GatherPackedColumns(g, whole_k) => {
                let (g, whole_k) = (*g, *whole_k);
                gather_packed::gather_packed_columns(ctx, &g, whole_k)
            }
            _ => movement::gather(ctx, *axis),
        },
        Op::Pad(p) => movement::pad(ctx, p),
        Op::MatMul(m) => linalg::matmul(ctx, m),
        Op::Attention => attention::attention(ctx),
        Op::Gemm(g) => linalg::gemm(ctx, g),
        Op::Conv(c) => conv::conv(ctx, c),
        Op::ConvTranspose(c) => conv_transpose::conv_transpose(ctx, c),
        Op::Pool(p) => pool::pool(ctx, p),
        Op::Softmax { axis, log } => norm::softmax(ctx, *axis, *log),
        Op::LayerNorm { axis, epsilon } => norm::layer_norm(ctx, *axis, *epsilon),
        Op::Reduce(r) if ctx.inputs.len() == 2 => counted_rows::reduce_rows(ctx, r),
        Op::Reduce(r) => reduce::reduce(ctx, r),
        Op::ConcatRows { axis, parts } => counted_rows::concat_rows(ctx, *axis, *parts),
        Op::FirstRows { axis, .. } => counted_rows::first_rows(ctx, *axis),
        Op::ArgReduce(a) => reduce::arg_reduce(ctx, a),
        Op::Resize(r) => resize::resize(ctx, r),
        Op::GatherElements { axis } => indexing::gather_elements(ctx, *axis),
        Op::ScatterElements { axis, reduction } => {
            indexing::scatter_elements(ctx, *axis, *reduction)
        }
        Op::ScatterND { reduction } => indexing::scatter_nd(ctx, *reduction),
        Op::GatherND { batch_dims } => indexing::gather_nd(ctx, *batch_dims),
        Op::CumSum {
            axis,
            exclusive,
            reverse,
            product,
        } => indexing::cumsum(ctx, *axis, *exclusive, *reverse, *product),
        Op::TopK { axis, k, largest } => indexing::top_k(ctx, *axis, Some(*k), *largest),
        Op::RnnSequence { cell, reverse } => recurrence::rnn_sequence(ctx, *cell, reverse),
        Op::TopKRunTime {
            axis,
            largest,
            max_k,
        } => indexing::top_k_run_time(ctx, *axis, *max_k, *largest),
        Op::ReduceRunTimeAxes {
            kind,
            keepdims,
            count,
            ..
        } => value_dependent::reduce_run_time_axes(ctx, *kind, *keepdims, *count),
        Op::ReshapeByAxes {
            count,
            axes_rank,
            shapes,
        } => value_dependent::reshape_by_axes(ctx, *count, *axes_rank, shapes),
        Op::DimValues { .. } => {
            Err("extents set at run time are not compiled yet (symbolic import only)".into())
        }
        Op::Choose { shapes } => run_time_slice::choose(ctx, shapes),
        Op::SliceRunTime { count, .. } => run_time_slice::slice_run_time(ctx, *count),
        Op::SplitRunTime { axis, parts } => run_time_slice::split_run_time(ctx, *axis, *parts),
        Op::NonZero { transposed } => value_dependent::non_zero(ctx, *transposed),
        Op::Compress { axis } => value_dependent::compress(ctx, *axis),
        Op::Unique { axis, sorted } => value_dependent::unique(ctx, *axis, *sorted),
        Op::NonMaxSuppression {
            center_point_box,
            per_class,
        } => value_dependent::non_max_suppression(ctx, *center_point_box, *per_class),
        Op::QuantizeLinear { axis, to } => quant::quantize_linear(ctx, *axis, *to),
        Op::DequantizeLinear { axis } => quant::dequantize_linear(ctx, *axis),
        Op::MatMulInteger => quant::matmul_integer(ctx),
        Op::ConvInteger(c) => quant::conv_integer(ctx, c),
        Op::QuantizeToPlanes(layout) => conv_u8s8::quantize_to_planes(ctx, layout),
        Op::PackPlanes(layout) => conv_u8s8::pack_planes(ctx, layout),
        Op::ConvU8S8 {
            conv,
            planes,
            requantize,
        } => conv_u8s8::conv_u8s8(ctx, conv, planes, requantize.as_ref()),
    }
}
