//! The plan of an Attention node: its GEMM family, softmax rows, the query rows a
//! block holds, which operands are packed first, and the scratch they take.

use super::gemm::packs_runtime_b_of;
use super::{NodeKernel, NodeOperands, Strategy};
use crate::codegen::isa::Isa;
use crate::codegen::isa::Vector;
use crate::codegen::kernels::gemm::{packed_b_len, Geometry};
use crate::codegen::options::{KernelOptions, KernelSource};
use crate::codegen::tasks::Split;

const F32: usize = 4;

/// Bytes of scores a block of query rows holds at most: with the packed V panel being
/// read (48 floats × T) and the block of Q, it stays in L2. Whisper's encoder (T = 1500)
/// measured flat around it: 64, 128 and 256 KB gave 73.1, 74.3 and 74.2 ms.
pub(crate) const SCORES_BLOCK_BYTES: usize = 128 << 10;

/// How an Attention node runs: decided by [`plan_attention`], followed by lowering.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionPlan {
    pub gemm: Geometry,
    /// The softmax rows' machine code, or Cranelift's.
    pub softmax: Option<Vector>,
    /// Query rows per block.
    pub block_rows: usize,
    /// Whether Kᵀ and V are packed into panels before the blocks.
    pub pack_kt: bool,
    pub pack_v: bool,
}

/// The matrices' sizes: queries M, key length d, keys T, value width dv.
pub(crate) struct Dims {
    pub m: usize,
    pub d: usize,
    pub t: usize,
    pub dv: usize,
}

impl AttentionPlan {
    /// Scratch offsets of packed Kᵀ, packed V and the scores block, and its total size.
    pub(crate) fn scratch_layout(&self, dims: &Dims) -> [usize; 4] {
        let kt = if self.pack_kt {
            packed_b_len(&self.gemm, dims.d, dims.t) * F32
        } else {
            0
        };
        let v = if self.pack_v {
            packed_b_len(&self.gemm, dims.t, dims.dv) * F32
        } else {
            0
        };
        let scores = self.block_rows * dims.t * F32;
        let v_at = align_up_64(kt);
        let scores_at = v_at + align_up_64(v);
        [0, v_at, scores_at, scores_at + scores]
    }
}

fn align_up_64(bytes: usize) -> usize {
    bytes.next_multiple_of(64)
}

fn dims(q: &[usize], kt: &[usize], v: &[usize]) -> Option<Dims> {
    let (qr, kr, vr) = (q.len(), kt.len(), v.len());
    if qr < 2 || kr < 2 || vr < 2 {
        return None;
    }
    Some(Dims {
        m: q[qr - 2],
        d: q[qr - 1],
        t: kt[kr - 1],
        dv: v[vr - 1],
    })
}

/// The kernel plan of an Attention node.
pub fn plan_attention(
    node: &NodeOperands,
    isa: &Isa,
    options: &KernelOptions,
) -> Option<NodeKernel> {
    let (q, kt, v) = (node.input(0)?, node.input(1)?, node.input(2)?);
    let dims = dims(&q.shape, &kt.shape, &v.shape)?;
    let gemm = Geometry::for_isa(isa, options);
    let per_block = (SCORES_BLOCK_BYTES / (dims.t * F32)).max(1);
    let block_rows = if per_block >= dims.m {
        dims.m
    } else {
        (per_block / gemm.mr).max(1) * gemm.mr
    };
    let plan = AttentionPlan {
        gemm,
        softmax: isa.vector.filter(|_| options.softmax == KernelSource::Auto),
        block_rows,
        pack_kt: packs_runtime_b_of(dims.m, dims.d, dims.t, &gemm),
        pack_v: packs_runtime_b_of(dims.m, dims.t, dims.dv, &gemm),
    };
    let scratch = plan.scratch_layout(&dims)[3];
    let batches = output_batches(node)?;
    Some(
        NodeKernel::new(
            Strategy::Attention(plan),
            scratch,
            "scores, softmax and product a block of query rows at a time, in cache",
        )
        .with_tasks(head_split(batches, &dims).tasks),
    )
}

/// The output's batch matrices (heads × batch).
fn output_batches(node: &NodeOperands) -> Option<usize> {
    let y = node.outputs.first()?;
    Some(y.shape[..y.shape.len().checked_sub(2)?].iter().product())
}

/// With a thread pool, the batch matrices (heads) are split into tasks, each with its
/// worker's scratch for the packed operands and the scores.
pub(crate) fn head_split(batches: usize, dims: &Dims) -> Split {
    Split::of(batches, batches * dims.m * dims.t * (dims.d + dims.dv))
}
