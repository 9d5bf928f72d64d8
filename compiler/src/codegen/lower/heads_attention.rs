//! Multi-head attention with the heads side by side in the last axis
//! (`Op::HeadsAttention`), for sequences whose length may be known only at run time.
//!
//! Per leading index and head `h`, with `n` keys (the run's count, or the static
//! extent):
//! 1. the keys of head `h` are copied transposed into a `d × W` block whose columns
//!    `n..W` are zero, its values into a `W × dv` block whose rows `n..W` are zero, and
//!    the mask's row into `W` floats ending in `f32::MIN` (so padded keys get no weight),
//!    `W` being the smallest *key bucket* holding `n`;
//! 2. blocks of query rows are computed as [`super::attention`] does: the scores
//!    GEMM (scaled, the mask row added in its epilogue), softmax rows and the GEMM by the
//!    values, written straight into head `h`'s columns of the output.
//!
//! Every GEMM, softmax and packing is compiled for its bucket's fixed width, so the
//! kernels stay register-blocked; the buckets double from 16 keys up to the bound, so
//! no run pays for more than twice its keys, and a length that is a bucket (a power of
//! two, or the bound) computes exactly what a library compiled for it does.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;

use super::gemm::{ALayout, Addend, BLayout, GemmKernel, GemmSpec, Geometry, RunTimeStrides};
use super::linalg::{pack_b_at_run_time, packs_runtime_b_of};
use super::norm::SoftmaxRows;
use super::{LowerCtx, LowerResult};
use crate::codegen::kernel::{self, broadcast_strides, flags};
use crate::codegen::kernel_plan::{NodeKernel, NodeOperands, Strategy};
use crate::codegen::kernels::gemm::packed_b_len;
use crate::codegen::kernels::x86::X86Isa;
use crate::codegen::options::{KernelOptions, KernelSource};
use crate::codegen::Target;
use crate::ir::TensorType;
use crate::ops::Activation;

const F32: usize = 4;

/// Bytes of scores a block of query rows holds at most (see [`super::attention`]).
const SCORES_BLOCK_BYTES: usize = 128 << 10;

/// The narrowest key bucket: below it, padding costs less than another variant.
const FIRST_BUCKET: usize = 16;

/// How a HeadsAttention node runs: decided by [`plan_heads_attention`].
#[derive(Clone, Debug, PartialEq)]
pub struct HeadsAttentionPlan {
    pub gemm: Geometry,
    /// The softmax rows' machine code, or Cranelift's.
    pub softmax: Option<X86Isa>,
    /// The key widths compiled for, ascending; the last is the bound.
    pub buckets: Vec<KeyBucket>,
}

/// The code of one key width.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KeyBucket {
    pub keys: usize,
    /// Query rows per block.
    pub block_rows: usize,
    /// Whether the transposed keys and the values are packed into panels.
    pub pack_kt: bool,
    pub pack_v: bool,
}

/// The operands' sizes: `heads` heads of key width `d` and value width `dv`, `s`
/// queries and `t` keys (the bounds), `lead` leading matrices.
#[derive(Clone, Copy)]
struct Dims {
    heads: usize,
    d: usize,
    dv: usize,
    s: usize,
    t: usize,
    lead: usize,
}

impl Dims {
    fn of(heads: usize, [q, k, v]: [&TensorType; 3]) -> Option<Dims> {
        let r = q.rank();
        if r < 2 || heads == 0 || k.rank() != r || v.rank() != r {
            return None;
        }
        Some(Dims {
            heads,
            d: q.shape[r - 1] / heads,
            dv: v.shape[r - 1] / heads,
            s: q.shape[r - 2],
            t: k.shape[r - 2],
            lead: q.shape[..r - 2].iter().product(),
        })
    }
}

impl KeyBucket {
    fn new(keys: usize, dims: &Dims, gemm: &Geometry) -> KeyBucket {
        let per_block = (SCORES_BLOCK_BYTES / (keys * F32)).max(1);
        // Below the bound, a bucket runs self-attention: as many queries as keys.
        let queries = if keys >= dims.t {
            dims.s
        } else {
            dims.s.min(keys)
        };
        let block_rows = if per_block >= queries {
            queries.max(1)
        } else {
            (per_block / gemm.mr).max(1) * gemm.mr
        };
        KeyBucket {
            keys,
            block_rows,
            pack_kt: packs_runtime_b_of(queries, dims.d, keys, gemm),
            pack_v: packs_runtime_b_of(queries, keys, dims.dv, gemm),
        }
    }

    /// Scratch offsets of the transposed keys, their panels, the values, their panels,
    /// the mask row and the scores block, and the total size.
    fn scratch_layout(&self, dims: &Dims, gemm: &Geometry) -> [usize; 7] {
        let w = self.keys;
        let sizes = [
            dims.d * w * F32,
            if self.pack_kt {
                packed_b_len(gemm, dims.d, w) * F32
            } else {
                0
            },
            w * dims.dv * F32,
            if self.pack_v {
                packed_b_len(gemm, w, dims.dv) * F32
            } else {
                0
            },
            w * F32,
            self.block_rows * w * F32,
        ];
        let mut at = [0; 7];
        for (i, s) in sizes.iter().enumerate() {
            at[i + 1] = at[i] + s.next_multiple_of(64);
        }
        at
    }
}

/// The key widths for keys up to `t`: 16, 32, 64... below it, then `t`.
fn bucket_widths(t: usize) -> Vec<usize> {
    let mut w = vec![];
    let mut k = FIRST_BUCKET;
    while k < t {
        w.push(k);
        k *= 2;
    }
    w.push(t);
    w
}

/// The kernel plan of a HeadsAttention node.
pub fn plan_heads_attention(
    heads: usize,
    node: &NodeOperands,
    target: &Target,
    options: &KernelOptions,
) -> Option<NodeKernel> {
    let dims = Dims::of(heads, [node.input(0)?, node.input(1)?, node.input(2)?])?;
    let gemm = Geometry::for_target(target, options);
    let buckets: Vec<KeyBucket> = bucket_widths(dims.t)
        .into_iter()
        .map(|w| KeyBucket::new(w, &dims, &gemm))
        .collect();
    let scratch = (buckets.iter())
        .map(|k| k.scratch_layout(&dims, &gemm)[6])
        .max()?;
    let plan = HeadsAttentionPlan {
        gemm,
        softmax: X86Isa::for_target(target).filter(|_| options.softmax == KernelSource::Auto),
        buckets,
    };
    Some(NodeKernel::new(
        Strategy::HeadsAttention(plan),
        scratch,
        "per head: keys and values copied to their key bucket's width, then scores, softmax \
         and product a block of query rows at a time, in cache",
    ))
}

/// One bucket's compiled code.
struct BucketCode {
    bucket: KeyBucket,
    layout: [usize; 7],
    scores: GemmKernel,
    softmax: SoftmaxRows,
    output: GemmKernel,
    /// The last block's: rows counted at run time, one softmax row at a time.
    scores_tail: GemmKernel,
    softmax_row: SoftmaxRows,
    output_tail: GemmKernel,
}

pub fn heads_attention(ctx: &mut LowerCtx, heads: usize, scale: f32, causal: bool) -> LowerResult {
    let Strategy::HeadsAttention(plan) = ctx.kernel.strategy.clone() else {
        return Err("no heads-attention plan for this node".into());
    };
    let (q, k, v, y) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?, ctx.output(0));
    let mask = ctx.inputs.get(3).cloned().flatten();
    let r = q.ty.rank();
    let dims =
        Dims::of(heads, [&q.ty, &k.ty, &v.ty]).ok_or("HeadsAttention operands of no one rank")?;
    let run_rows = ctx.run_rows;
    if run_rows.is_some() && (dims.s != dims.t || dims.lead != 1) {
        return Err(format!(
            "queries {:?} and keys {:?} must be one sequence when its length is counted at run time",
            q.ty.shape, k.ty.shape
        ));
    }
    // The mask's element strides over the scores `[..., H, S, T]`: a row shared by every
    // query (the padding masks exporters write).
    let mut scores_shape = q.ty.shape[..r - 2].to_vec();
    scores_shape.extend([heads, dims.s, dims.t]);
    let mask_strides = mask
        .as_ref()
        .map(|m| broadcast_strides(&m.ty.shape, &scores_shape));
    if mask_strides.as_ref().is_some_and(|s| s[r - 1] != 0) && dims.s > 1 {
        return Err(
            "the mask differs between queries; heads attention takes one row per head".into(),
        );
    }
    // Statically, only the bound's bucket runs.
    let buckets: Vec<KeyBucket> = match run_rows {
        Some(_) => plan.buckets.clone(),
        None => plan
            .buckets
            .iter()
            .copied()
            .filter(|k| k.keys == dims.t)
            .collect(),
    };
    let (hd, hdv) = (heads * dims.d, heads * dims.dv);
    let geom = plan.gemm;
    let mut codes = vec![];
    for bucket in buckets {
        let w = bucket.keys;
        let scores_spec = |rows: usize, counted: bool| GemmSpec {
            m: rows,
            n: w,
            k: dims.d,
            a: ALayout::Strided {
                row_stride: hd,
                col_stride: 1,
            },
            b: if bucket.pack_kt {
                BLayout::Packed
            } else {
                BLayout::Rows { row_stride: w }
            },
            ldc: w,
            c_col_stride: 1,
            alpha: scale,
            addends: vec![Addend {
                row_stride: 0,
                col_stride: 1,
                scale: 1.0,
            }],
            activation: Activation::None,
            geometry: geom,
            b_taps: vec![],
            rows_at_run_time: counted,
            cols_at_run_time: false,
            run_time_strides: RunTimeStrides::None,
        };
        let output_spec = |rows: usize, counted: bool| GemmSpec {
            m: rows,
            n: dims.dv,
            k: w,
            a: ALayout::Strided {
                row_stride: w,
                col_stride: 1,
            },
            b: if bucket.pack_v {
                BLayout::Packed
            } else {
                BLayout::Rows {
                    row_stride: dims.dv,
                }
            },
            ldc: hdv,
            c_col_stride: 1,
            alpha: 1.0,
            addends: vec![],
            activation: Activation::None,
            geometry: geom,
            b_taps: vec![],
            rows_at_run_time: counted,
            cols_at_run_time: false,
            run_time_strides: RunTimeStrides::None,
        };
        let rows = bucket.block_rows;
        codes.push(BucketCode {
            bucket,
            layout: bucket.scratch_layout(&dims, &geom),
            scores: GemmKernel::define(ctx, &scores_spec(rows, false))?,
            softmax: SoftmaxRows::define(ctx, plan.softmax, rows, w)?,
            output: GemmKernel::define(ctx, &output_spec(rows, false))?,
            scores_tail: GemmKernel::define(ctx, &scores_spec(rows, true))?,
            softmax_row: SoftmaxRows::define(ctx, plan.softmax, 1, w)?,
            output_tail: GemmKernel::define(ctx, &output_spec(rows, true))?,
        });
    }
    let scratch = ctx
        .scratch
        .ok_or("the heads-attention plan gave no scratch")?;
    let b = &mut *ctx.b;
    // A counted sequence is both the queries and the keys (checked above).
    let (queries, keys) = match run_rows {
        Some(run) => (run.count, run.count),
        None => (
            kernel::iconst(b, dims.s as i64),
            kernel::iconst(b, dims.t as i64),
        ),
    };
    kernel::counted_loop(b, 0, dims.lead as i64, 1, |b, l| {
        kernel::counted_loop(b, 0, heads as i64, 1, |b, h| {
            let head = Head {
                q: operand_at(b, q.ptr, l, dims.s * hd, h, dims.d),
                k: operand_at(b, k.ptr, l, dims.t * hd, h, dims.d),
                v: operand_at(b, v.ptr, l, dims.t * hdv, h, dims.dv),
                y: operand_at(b, y.ptr, l, dims.s * hdv, h, dims.dv),
                mask: mask.as_ref().zip(mask_strides.as_ref()).map(|(m, s)| {
                    // Leading axes, then the head axis.
                    let lead_idx = kernel::unflatten(b, l, &scores_shape[..r - 2]);
                    let lead_off = kernel::linear_offset(
                        b,
                        &lead_idx,
                        &s[..r - 2].iter().map(|x| x * F32).collect::<Vec<_>>(),
                    );
                    let head_off = b.ins().imul_imm_s(h, (s[r - 2] * F32) as i64);
                    let at = b.ins().iadd(m.ptr, lead_off);
                    (b.ins().iadd(at, head_off), s[r])
                }),
            };
            choose_bucket(b, &codes, keys, &|b, code| {
                run_head(
                    b,
                    code,
                    (&dims, &geom),
                    (&head, causal),
                    (queries, keys),
                    scratch,
                );
            });
        });
    });
    Ok(())
}

/// `base` advanced to leading matrix `l` (`matrix` floats each) and head `h` (`width`
/// floats into each row).
fn operand_at(
    b: &mut FunctionBuilder,
    base: Value,
    l: Value,
    matrix: usize,
    h: Value,
    width: usize,
) -> Value {
    let at = kernel::elem_addr(b, base, l, matrix * F32);
    kernel::elem_addr(b, at, h, width * F32)
}

/// One head's operands: Q, K, V and Y at the head's first column, and the mask's row
/// for it with its stride along the keys (floats).
struct Head {
    q: Value,
    k: Value,
    v: Value,
    y: Value,
    mask: Option<(Value, usize)>,
}

/// Runs `body` with the code of the narrowest bucket holding `n` keys.
fn choose_bucket(
    b: &mut FunctionBuilder,
    codes: &[BucketCode],
    n: Value,
    body: &dyn Fn(&mut FunctionBuilder, &BucketCode),
) {
    match codes {
        [] => {}
        [last] => body(b, last),
        [first, rest @ ..] => {
            let fits =
                b.ins()
                    .icmp_imm_s(IntCC::SignedLessThanOrEqual, n, first.bucket.keys as i64);
            kernel::if_else(
                b,
                fits,
                |b| body(b, first),
                |b| choose_bucket(b, rest, n, body),
            );
        }
    }
}

/// One head with bucket `code`: `queries` query rows against `n` keys.
fn run_head(
    b: &mut FunctionBuilder,
    code: &BucketCode,
    (dims, geom): (&Dims, &Geometry),
    (head, causal): (&Head, bool),
    (queries, n): (Value, Value),
    scratch: Value,
) {
    let w = code.bucket.keys;
    let (hd, hdv) = (dims.heads * dims.d, dims.heads * dims.dv);
    let [kt_at, kt_packed_at, v_at, v_packed_at, mask_at, scores_at, _] = code.layout;
    let area = |b: &mut FunctionBuilder, off: usize| b.ins().iadd_imm_s(scratch, off as i64);
    let (kt, v_rows, mask_row, scores) = (
        area(b, kt_at),
        area(b, v_at),
        area(b, mask_at),
        area(b, scores_at),
    );
    let zero = b.ins().f32const(0.0);
    // Keys transposed: kt[i][j] = K[j][i] for j < n, 0 after.
    kernel::counted_loop(b, 0, w as i64, 1, |b, j| {
        let real = b.ins().icmp(IntCC::SignedLessThan, j, n);
        let row = kernel::elem_addr(b, head.k, j, hd * F32);
        let col = kernel::elem_addr(b, kt, j, F32);
        kernel::counted_loop(b, 0, dims.d as i64, 1, |b, i| {
            let src = kernel::elem_addr(b, row, i, F32);
            let x = b.ins().load(types::F32, flags(), src, 0);
            let x = b.ins().select(real, x, zero);
            let dst = kernel::elem_addr(b, col, i, w * F32);
            b.ins().store(flags(), x, dst, 0);
        });
    });
    // Values: rows j < n copied, the rest zero.
    kernel::counted_loop(b, 0, w as i64, 1, |b, j| {
        let real = b.ins().icmp(IntCC::SignedLessThan, j, n);
        let src = kernel::elem_addr(b, head.v, j, hdv * F32);
        let dst = kernel::elem_addr(b, v_rows, j, dims.dv * F32);
        kernel::counted_loop(b, 0, dims.dv as i64, 1, |b, c| {
            let s = kernel::elem_addr(b, src, c, F32);
            let x = b.ins().load(types::F32, flags(), s, 0);
            let x = b.ins().select(real, x, zero);
            let d = kernel::elem_addr(b, dst, c, F32);
            b.ins().store(flags(), x, d, 0);
        });
    });
    // The mask row: the model's mask (or 0) for real keys, f32::MIN for padding.
    let padding = b.ins().f32const(f32::MIN);
    kernel::counted_loop(b, 0, w as i64, 1, |b, j| {
        let real = b.ins().icmp(IntCC::SignedLessThan, j, n);
        let x = match head.mask {
            Some((base, stride)) => {
                let at = kernel::elem_addr(b, base, j, stride * F32);
                b.ins().load(types::F32, flags(), at, 0)
            }
            None => zero,
        };
        let x = b.ins().select(real, x, padding);
        let dst = kernel::elem_addr(b, mask_row, j, F32);
        b.ins().store(flags(), x, dst, 0);
    });
    let kt_b = if code.bucket.pack_kt {
        let packed = area(b, kt_packed_at);
        pack_b_at_run_time(b, geom, (dims.d, w, w), kt, packed);
        packed
    } else {
        kt
    };
    let v_b = if code.bucket.pack_v {
        let packed = area(b, v_packed_at);
        pack_b_at_run_time(b, geom, (w, dims.dv, dims.dv), v_rows, packed);
        packed
    } else {
        v_rows
    };
    let rows = code.bucket.block_rows;
    let full = b.ins().udiv_imm_u(queries, rows as i64);
    kernel::dynamic_loop(b, full, |b, blk| {
        let r0 = b.ins().imul_imm_s(blk, rows as i64);
        let q_rows = kernel::elem_addr(b, head.q, r0, hd * F32);
        code.scores.call(b, q_rows, kt_b, scores, &[mask_row]);
        if causal {
            let rows = kernel::iconst(b, rows as i64);
            mask_after_diagonal(b, scores, w, r0, rows);
        }
        code.softmax.call(b, scores);
        let y_rows = kernel::elem_addr(b, head.y, r0, hdv * F32);
        code.output.call(b, scores, v_b, y_rows, &[]);
    });
    let r0 = b.ins().imul_imm_s(full, rows as i64);
    let tail = b.ins().isub(queries, r0);
    let any = b.ins().icmp_imm_s(IntCC::SignedGreaterThan, tail, 0);
    kernel::if_else(
        b,
        any,
        |b| {
            let q_rows = kernel::elem_addr(b, head.q, r0, hd * F32);
            code.scores_tail
                .call_rows(b, q_rows, kt_b, scores, &[mask_row], Some(tail));
            if causal {
                mask_after_diagonal(b, scores, w, r0, tail);
            }
            kernel::dynamic_loop(b, tail, |b, i| {
                let row = kernel::elem_addr(b, scores, i, w * F32);
                code.softmax_row.call(b, row);
            });
            let y_rows = kernel::elem_addr(b, head.y, r0, hdv * F32);
            code.output_tail
                .call_rows(b, scores, v_b, y_rows, &[], Some(tail));
        },
        |_| {},
    );
}

/// Sets the scores of query `r0 + i` (row `i` of the block at `scores`, `w` keys wide,
/// `i < rows`) for the keys after it to `f32::MIN`: a decoder's causal mask.
fn mask_after_diagonal(b: &mut FunctionBuilder, scores: Value, w: usize, r0: Value, rows: Value) {
    let masked = b.ins().f32const(f32::MIN);
    let end = kernel::iconst(b, w as i64);
    kernel::dynamic_loop(b, rows, |b, i| {
        let row = kernel::elem_addr(b, scores, i, w * F32);
        let query = b.ins().iadd(r0, i);
        let first = b.ins().iadd_imm_s(query, 1);
        kernel::range_loop(b, first, end, |b, j| {
            let at = kernel::elem_addr(b, row, j, F32);
            b.ins().store(flags(), masked, at, 0);
        });
    });
}
