//! The entry points of a graph compiled for one sample (see [`crate::dims`]): `run`
//! reads the dim from `nnc_run_options.dims`, checks it against its range and calls the
//! one-sample node sequence once per sample, with each marked input and output pointer
//! advanced by the sample's bytes; `infer` and `infer_with_workspace` run every dim at
//! its maximum. Also `PREFIXshapes`, which every library exports: the concrete shape
//! of each input and output for given dims.

use std::sync::Arc;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{
    types, AbiParam, BlockArg, InstBuilder, StackSlotData, StackSlotKind, Value,
};
use cranelift_codegen::isa::TargetIsa;
use cranelift_codegen::Context;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_module::{FuncId, Linkage, Module};
use cranelift_object::ObjectModule;

use super::kernel::{self, flags, PTR};
use super::{define_function, Result};
use crate::ir::run_dims::{AxisDim, SymbolicDim};
use crate::ir::Graph;
use nnc_runtime_abi::abi::{
    NNC_ERR_DIMS_INCONSISTENT, NNC_ERR_DIM_OUT_OF_RANGE, NNC_ERR_NULL_POINTER, NNC_OK,
};

/// How the samples of a one-sample graph lie in the caller's buffers.
pub(super) struct SampleLayout {
    /// Bytes per sample of each input and output; 0 for one all samples share.
    pub inputs: Vec<i64>,
    pub outputs: Vec<i64>,
    /// The looped dim: its index in `nnc_run_options.dims` and its range.
    pub dim: usize,
    pub min: i64,
    pub max: i64,
}

impl SampleLayout {
    /// `None` for a graph that is not one sample's; an error when its inputs or outputs
    /// changed after the sample loop was planned (a tool that adds outputs must drop it).
    pub fn of(graph: &Graph) -> Result<Option<SampleLayout>> {
        let Some(sl) = graph.sample_loop.as_ref() else {
            return Ok(None);
        };
        if sl.inputs.len() != graph.inputs.len() || sl.outputs.len() != graph.outputs.len() {
            return Err(crate::error::NncError::Codegen {
                context: "the sample loop".into(),
                message: "the graph's inputs or outputs no longer match those it was planned for"
                    .into(),
            });
        }
        let bytes = |vs: &[crate::ir::ValueId], marks: &[bool]| {
            vs.iter()
                .zip(marks)
                .map(|(v, &m)| {
                    if m {
                        graph.ty(*v).byte_size() as i64
                    } else {
                        0
                    }
                })
                .collect()
        };
        let d = &graph.dims[sl.dim];
        Ok(Some(SampleLayout {
            inputs: bytes(&graph.inputs, &sl.inputs),
            outputs: bytes(&graph.outputs, &sl.outputs),
            dim: sl.dim,
            min: d.min as i64,
            max: d.max as i64,
        }))
    }
}

/// Emits `for s in 0..count { status = body(inputs_s, outputs_s, ws[, extra]) }`,
/// stopping at the first nonzero status, and returns the status (0 after the last
/// sample). `inputs_s[i]` is `inputs[i] + s · bytes[i]`, built in a stack array; NULL
/// `inputs` or `outputs` arrays give `NNC_ERR_NULL_POINTER` before anything runs (a
/// NULL element is caught by the first sample's own checks, before it writes).
pub(super) fn emit_loop(
    b: &mut FunctionBuilder,
    module: &mut ObjectModule,
    layout: &SampleLayout,
    body: FuncId,
    (inputs, outputs, ws): (Value, Value, Value),
    extra: Option<Value>,
    count: Value,
) -> Value {
    let exit = b.create_block();
    b.append_block_param(exit, types::I32);
    let null_code = b.ins().iconst(types::I32, NNC_ERR_NULL_POINTER as i64);
    for (arr, n) in [
        (inputs, layout.inputs.len()),
        (outputs, layout.outputs.len()),
    ] {
        if n > 0 {
            let ok = b.create_block();
            let null = b.ins().icmp_imm_u(IntCC::Equal, arr, 0);
            b.ins()
                .brif(null, exit, &[BlockArg::Value(null_code)], ok, &[]);
            b.seal_block(ok);
            b.switch_to_block(ok);
        }
    }
    let slot = |b: &mut FunctionBuilder, n: usize| {
        let s = b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            (n * 8).max(8) as u32,
            3,
        ));
        b.ins().stack_addr(PTR, s, 0)
    };
    // Each sample's bytes, computed once.
    let mut sample_bytes = |fixed: &[i64]| -> Vec<Option<Value>> {
        (fixed.iter())
            .map(|&bytes| (bytes != 0).then(|| b.ins().iconst(PTR, bytes)))
            .collect()
    };
    let in_bytes = sample_bytes(&layout.inputs);
    let out_bytes = sample_bytes(&layout.outputs);
    let ins_s = slot(b, layout.inputs.len());
    let outs_s = slot(b, layout.outputs.len());
    let header = b.create_block();
    b.append_block_param(header, PTR);
    let zero = b.ins().iconst(PTR, 0);
    b.ins().jump(header, &[BlockArg::Value(zero)]);
    b.switch_to_block(header);
    let s = b.block_params(header)[0];
    let more = b.ins().icmp(IntCC::UnsignedLessThan, s, count);
    let step = b.create_block();
    let done = b.ins().iconst(types::I32, NNC_OK as i64);
    b.ins()
        .brif(more, step, &[], exit, &[BlockArg::Value(done)]);
    b.seal_block(step);
    b.switch_to_block(step);
    for (src, dst, strides) in [(inputs, ins_s, &in_bytes), (outputs, outs_s, &out_bytes)] {
        for (i, bytes) in strides.iter().enumerate() {
            let mut p = b.ins().load(PTR, flags(), src, (i * 8) as i32);
            if let Some(bytes) = *bytes {
                let off = b.ins().imul(s, bytes);
                p = b.ins().iadd(p, off);
            }
            b.ins().store(flags(), p, dst, (i * 8) as i32);
        }
    }
    let mut args = vec![ins_s, outs_s, ws];
    args.extend(extra);
    let f = module.declare_func_in_func(body, b.func);
    let call = b.ins().call(f, &args);
    let status = b.inst_results(call)[0];
    let next = b.create_block();
    b.ins()
        .brif(status, exit, &[BlockArg::Value(status)], next, &[]);
    b.seal_block(next);
    b.switch_to_block(next);
    let s1 = b.ins().iadd_imm_s(s, 1);
    b.ins().jump(header, &[BlockArg::Value(s1)]);
    b.seal_block(header);
    b.seal_block(exit);
    b.switch_to_block(exit);
    b.block_params(exit)[0]
}

/// The value of dim `dim` in `min..=max`, read from `dims` (a pointer that may be NULL:
/// then the maximum); jumps to `out_of_range` (no block arguments) otherwise.
pub(super) fn emit_dim_value(
    b: &mut FunctionBuilder,
    dims: Value,
    (dim, min, max): (usize, i64, i64),
    out_of_range: cranelift_codegen::ir::Block,
) -> Value {
    let read = b.create_block();
    let join = b.create_block();
    b.append_block_param(join, types::I64);
    let max_v = b.ins().iconst(types::I64, max);
    let null = b.ins().icmp_imm_u(IntCC::Equal, dims, 0);
    b.ins()
        .brif(null, join, &[BlockArg::Value(max_v)], read, &[]);
    b.seal_block(read);
    b.switch_to_block(read);
    let v = b.ins().load(types::I64, flags(), dims, (dim * 8) as i32);
    // min ≤ v ≤ max as one unsigned comparison of v − min with max − min.
    let above_min = b.ins().iadd_imm_s(v, -min);
    let bad = b
        .ins()
        .icmp_imm_u(IntCC::UnsignedGreaterThan, above_min, max - min);
    b.ins()
        .brif(bad, out_of_range, &[], join, &[BlockArg::Value(v)]);
    b.seal_block(join);
    b.switch_to_block(join);
    b.block_params(join)[0]
}

/// `PREFIXshapes(dims, shapes)`: for the dims' values `dims` (NULL: each at its
/// maximum), writes the sizes of every input's axes, then every output's, into
/// `shapes`; `NNC_ERR_DIM_OUT_OF_RANGE` (writing nothing) for a value out of range,
/// `NNC_ERR_NULL_POINTER` for a NULL `shapes` when there is something to write.
#[allow(clippy::too_many_arguments)]
pub(super) fn define_shapes(
    module: &mut ObjectModule,
    ctx: &mut Context,
    fctx: &mut FunctionBuilderContext,
    isa: &Arc<dyn TargetIsa>,
    (shapes, deps): (&[&[usize]], &[AxisDim]),
    dims: &[SymbolicDim],
    symbolic: Option<&crate::ir::Graph>,
    prefix: &str,
) -> Result<()> {
    let mut sig = module.make_signature();
    sig.params.push(AbiParam::new(PTR));
    sig.params.push(AbiParam::new(PTR));
    sig.returns.push(AbiParam::new(types::I32));
    define_function(
        module,
        ctx,
        fctx,
        isa,
        &format!("{prefix}shapes"),
        Linkage::Export,
        sig,
        |b, _, p| {
            let (dims_ptr, out) = (p[0], p[1]);
            let out_of_range = b.create_block();
            let null_out = b.create_block();
            let inconsistent = b.create_block();
            let values: Vec<Value> = dims
                .iter()
                .enumerate()
                .map(|(j, d)| {
                    emit_dim_value(b, dims_ptr, (j, d.min as i64, d.max as i64), out_of_range)
                })
                .collect();
            // Symbolic shapes: the facts the values must meet, and each axis's
            // expression (below).
            if let Some(graph) = symbolic {
                super::symbol_block::emit_checks(b, graph, &values, inconsistent);
            }
            let io: Vec<crate::ir::ValueId> = symbolic
                .map(|g| g.inputs.iter().chain(&g.outputs).copied().collect())
                .unwrap_or_default();
            if shapes.iter().any(|s| !s.is_empty()) {
                let ok = b.create_block();
                let null = b.ins().icmp_imm_u(IntCC::Equal, out, 0);
                b.ins().brif(null, null_out, &[], ok, &[]);
                b.seal_block(ok);
                b.switch_to_block(ok);
            }
            let mut at = 0i32;
            for (t, shape) in shapes.iter().enumerate() {
                for (axis, &size) in shape.iter().enumerate() {
                    let expr = symbolic.map(|g| g.ty(io[t]).dim(axis));
                    let v = match deps.iter().find(|d| d.tensor == t && d.axis == axis) {
                        _ if expr.as_ref().is_some_and(|e| !e.is_const()) => {
                            super::symbol_block::Evaluator {
                                values: &values,
                                bad_divisor: None,
                            }
                            .emit(b, expr.as_ref().expect("checked"))
                        }
                        Some(d) => {
                            let n = b.ins().imul_imm_s(values[d.dim], d.scale as i64);
                            kernel::extent_value(b, n, &d.size)
                        }
                        None => b.ins().iconst(types::I64, size as i64),
                    };
                    b.ins().store(flags(), v, out, at);
                    at += 8;
                }
            }
            let ok = b.ins().iconst(types::I32, NNC_OK as i64);
            b.ins().return_(&[ok]);
            for (blk, code) in [
                (out_of_range, NNC_ERR_DIM_OUT_OF_RANGE),
                (null_out, NNC_ERR_NULL_POINTER),
                (inconsistent, NNC_ERR_DIMS_INCONSISTENT),
            ] {
                b.switch_to_block(blk);
                b.seal_block(blk);
                let c = b.ins().iconst(types::I32, code as i64);
                b.ins().return_(&[c]);
            }
            Ok(())
        },
    )?;
    Ok(())
}
