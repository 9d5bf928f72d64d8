//! Attention (`Op::Attention`): `Y = Softmax(Q·Kᵀ + mask) · V` per batch matrix,
//! computed a block of query rows at a time. For rows `r..r+R`:
//! 1. the GEMM `S = Q[r..r+R] · Kᵀ` into a scores block in scratch, the mask's rows
//!    added in its epilogue;
//! 2. the softmax of the block's rows, in place;
//! 3. the GEMM `Y[r..r+R] = S · V`.
//!
//! The block (`R × T` floats, see [`SCORES_BLOCK_BYTES`]) stays in L2 between the three
//! steps, where the unfused nodes sent all `M × T` scores to memory and back three
//! times. With enough query rows, Kᵀ and V are first packed into panels (as a MatMul
//! packs its run-time B), once per batch matrix, for every block to read.
//!
//! Each output element is computed by the same operations in the same order as by the
//! unfused MatMul, Softmax and MatMul nodes: the results are bit-identical.

use cranelift_codegen::ir::{InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;

use super::gemm::{ALayout, Addend, BLayout, GemmKernel, GemmSpec, RunTimeStrides};
use super::linalg::{batch_ptr, pack_b_at_run_time};
use super::norm::SoftmaxRows;
use super::{LowerCtx, LowerResult};
use crate::codegen::kernel::{self, broadcast_strides};
use crate::codegen::plan::attention::{head_split, Dims};
use crate::codegen::plan::gemm::MatMulShape;
use crate::codegen::plan::Strategy;
use crate::ops::Activation;

const F32: usize = 4;

pub fn attention(ctx: &mut LowerCtx) -> LowerResult {
    let Strategy::Attention(plan) = ctx.kernel.strategy.clone() else {
        return Err("no attention plan for this node".into());
    };
    let (q, kt, v, y) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?, ctx.output(0));
    let mask = ctx.inputs.get(3).cloned().flatten();
    let s1 = MatMulShape::new(&q.ty.shape, &kt.ty.shape)?;
    let mut scores_shape = s1.batch.clone();
    scores_shape.extend([s1.m, s1.n]);
    let s2 = MatMulShape::new(&scores_shape, &v.ty.shape)?;
    if s2.batch != s1.batch {
        return Err(format!(
            "V {:?} broadcasts the batch of the scores {scores_shape:?}",
            v.ty.shape
        ));
    }
    let dims = Dims {
        m: s1.m,
        d: s1.k,
        t: s1.n,
        dv: s2.n,
    };
    let [_, v_at, scores_at, _] = plan.scratch_layout(&dims);
    let scratch = ctx
        .scratch
        .ok_or("the attention plan gave no scratch for the scores")?;
    let rank = scores_shape.len();
    // The mask's element strides over the scores' axes (0 where it broadcasts).
    let mask_strides = mask
        .as_ref()
        .map(|m| broadcast_strides(&m.ty.shape, &scores_shape));
    let geom = plan.gemm;
    let scores_spec = |rows: usize| GemmSpec {
        m: rows,
        n: dims.t,
        k: dims.d,
        a: ALayout::Strided {
            row_stride: dims.d,
            col_stride: 1,
        },
        b: if plan.pack_kt {
            BLayout::Packed
        } else {
            BLayout::Rows { row_stride: dims.t }
        },
        ldc: dims.t,
        c_col_stride: 1,
        alpha: 1.0,
        addends: mask_strides
            .iter()
            .map(|s| Addend {
                row_stride: s[rank - 2],
                col_stride: s[rank - 1],
                scale: 1.0,
            })
            .collect(),
        activation: Activation::None,
        geometry: geom,
        b_taps: vec![],
        rows_at_run_time: false,
        cols_at_run_time: false,
        run_time_strides: RunTimeStrides::None,
    };
    let output_spec = |rows: usize| GemmSpec {
        m: rows,
        n: dims.dv,
        k: dims.t,
        a: ALayout::Strided {
            row_stride: dims.t,
            col_stride: 1,
        },
        b: if plan.pack_v {
            BLayout::Packed
        } else {
            BLayout::Rows {
                row_stride: dims.dv,
            }
        },
        ldc: dims.dv,
        c_col_stride: 1,
        alpha: 1.0,
        addends: vec![],
        activation: Activation::None,
        geometry: geom,
        b_taps: vec![],
        rows_at_run_time: false,
        cols_at_run_time: false,
        run_time_strides: RunTimeStrides::None,
    };
    let full_blocks = dims.m / plan.block_rows;
    let tail_rows = dims.m % plan.block_rows;
    let mut steps = Vec::new();
    for (rows, count) in [(plan.block_rows, full_blocks), (tail_rows, 1)] {
        if rows > 0 && count > 0 {
            steps.push(BlockCode {
                rows,
                scores: GemmKernel::define(ctx, &scores_spec(rows))?,
                softmax: SoftmaxRows::define(ctx, plan.softmax, rows, dims.t)?,
                output: GemmKernel::define(ctx, &output_spec(rows))?,
            });
        }
    }
    let y_strides = kernel::strides_of(&s1.batch);
    let batches: usize = s1.batch.iter().product();
    let split = head_split(batches, &dims);
    let task = ctx.task;
    if task.is_some() && split.tasks != ctx.kernel.tasks {
        return Err(format!(
            "the plan split this attention into {} tasks, its heads into {}",
            ctx.kernel.tasks, split.tasks
        ));
    }
    let b = &mut *ctx.b;
    let scores_block = b.ins().iadd_imm_s(scratch, scores_at as i64);
    let mut head = |b: &mut FunctionBuilder, idx: &[Value]| {
        let q_ptr = batch_ptr(b, q.ptr, idx, &s1.a_batch_strides, dims.m * dims.d);
        let mut kt_ptr = batch_ptr(b, kt.ptr, idx, &s1.b_batch_strides, dims.d * dims.t);
        if plan.pack_kt {
            pack_b_at_run_time(b, &geom, (dims.d, dims.t, dims.t), kt_ptr, scratch);
            kt_ptr = scratch;
        }
        let mut v_ptr = batch_ptr(b, v.ptr, idx, &s2.b_batch_strides, dims.t * dims.dv);
        if plan.pack_v {
            let packed = b.ins().iadd_imm_s(scratch, v_at as i64);
            pack_b_at_run_time(b, &geom, (dims.t, dims.dv, dims.dv), v_ptr, packed);
            v_ptr = packed;
        }
        let y_ptr = batch_ptr(b, y.ptr, idx, &y_strides, dims.m * dims.dv);
        let mask_at = mask.as_ref().zip(mask_strides.as_ref()).map(|(m, s)| {
            let bytes: Vec<usize> = s[..rank - 2].iter().map(|x| x * F32).collect();
            let off = kernel::linear_offset(b, idx, &bytes);
            (b.ins().iadd(m.ptr, off), s[rank - 2])
        });
        let block = |b: &mut FunctionBuilder, code: &BlockCode, r0: Value| {
            let at = |b: &mut FunctionBuilder, base: Value, row: usize| {
                kernel::elem_addr(b, base, r0, row * F32)
            };
            let q_rows = at(b, q_ptr, dims.d);
            let addends: Vec<Value> = mask_at
                .iter()
                .map(|&(base, row_stride)| at(b, base, row_stride))
                .collect();
            code.scores.call(b, q_rows, kt_ptr, scores_block, &addends);
            code.softmax.call(b, scores_block);
            let y_rows = at(b, y_ptr, dims.dv);
            code.output.call(b, scores_block, v_ptr, y_rows, &[]);
        };
        for (i, code) in steps.iter().enumerate() {
            if i == 0 && code.rows == plan.block_rows {
                kernel::counted_loop(b, 0, full_blocks as i64, 1, |b, blk| {
                    let r0 = b.ins().imul_imm_s(blk, plan.block_rows as i64);
                    block(b, code, r0);
                });
            } else {
                let r0 = b
                    .ins()
                    .iconst(kernel::PTR, (full_blocks * plan.block_rows) as i64);
                block(b, code, r0);
            }
        }
    };
    match task {
        None => kernel::nested_loop(b, &s1.batch, &mut head),
        Some(task) => {
            kernel::task_share_loop(b, task, split.per, batches, |b, flat| {
                let idx = kernel::unflatten(b, flat, &s1.batch);
                head(b, &idx);
            });
        }
    }
    Ok(())
}

/// The code of one block size: its scores GEMM, softmax rows and output GEMM.
struct BlockCode {
    rows: usize,
    scores: GemmKernel,
    softmax: SoftmaxRows,
    output: GemmKernel,
}
