//! The plan of MatMul and Gemm: the GEMM kernel family, whether a run-time B is
//! packed first, and how the product is split into tasks.

use super::{NodeKernel, NodeOperands, Strategy};
use crate::codegen::isa::Isa;
use crate::codegen::kernel;
use crate::codegen::kernels::gemm::{packed_b_len, BLayout, Geometry, KernelKind};
use crate::codegen::options::{KernelOptions, KernelSource};
use crate::codegen::tasks::Split;
use crate::ir::{DType, Tensor};
use crate::ops::infer::broadcast_shapes;
use crate::ops::GemmAttrs;
/// numpy matmul geometry: 1-D operands promoted, batch axes broadcast.
pub(crate) struct MatMulShape {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    /// The output's batch axes.
    pub batch: Vec<usize>,
    /// Per output batch axis, how many matrices to step in A and B (0 when broadcast).
    pub a_batch_strides: Vec<usize>,
    pub b_batch_strides: Vec<usize>,
    /// Matrices stored in B (the product of its own batch axes).
    pub b_matrices: usize,
}

impl MatMulShape {
    pub(crate) fn new(a: &[usize], b: &[usize]) -> Result<MatMulShape, String> {
        if a.is_empty() || b.is_empty() {
            return Err("MatMul operands must have rank ≥ 1".into());
        }
        let (a2, b2) = crate::ops::infer::as_matrices(a, b);
        let (a_batch, a_mat) = a2.split_at(a2.len() - 2);
        let (b_batch, b_mat) = b2.split_at(b2.len() - 2);
        if a_mat[1] != b_mat[0] {
            return Err(format!("inner dimensions differ: {a:?} @ {b:?}"));
        }
        let batch = broadcast_shapes(&[a_batch, b_batch])?;
        Ok(MatMulShape {
            m: a_mat[0],
            k: a_mat[1],
            n: b_mat[1],
            a_batch_strides: kernel::broadcast_strides(a_batch, &batch),
            b_batch_strides: kernel::broadcast_strides(b_batch, &batch),
            b_matrices: b_batch.iter().product(),
            batch,
        })
    }

    /// Rows of each GEMM: every batch's when they fold into one, else M.
    pub(crate) fn gemm_rows(&self) -> usize {
        if self.folds_into_rows() {
            self.batch.iter().product::<usize>() * self.m
        } else {
            self.m
        }
    }

    /// True when B is one matrix shared by every batch and A's batches are all distinct
    /// and contiguous: the batches then stack into one GEMM with `batch·M` rows.
    pub(crate) fn folds_into_rows(&self) -> bool {
        let dense = kernel::strides_of(&self.batch);
        self.b_batch_strides.iter().all(|&s| s == 0)
            && (0..self.batch.len())
                .all(|d| self.batch[d] == 1 || self.a_batch_strides[d] == dense[d])
    }
}

/// The kernel plan of MatMul and Gemm (`gemm`: its attributes): float32 runs on the
/// target's GEMM kernel family, other dtypes on a scalar loop nest. A Gemm whose B is
/// read at run time transposed is gathered by the portable kernel, the one layout the
/// machine-code kernels do not take (see `lower::linalg`).
pub fn plan_gemm(
    gemm: Option<&GemmAttrs>,
    node: &NodeOperands,
    isa: &Isa,
    options: &KernelOptions,
) -> Option<NodeKernel> {
    let a = node.input(0)?;
    if a.dtype != DType::F32 {
        return None;
    }
    let b = node.input(1)?;
    if let Some(Ok(s)) = gemm.map(|g| GemmShape::new(g, &a.shape, &b.shape)) {
        let constant_b = matches!(node.constant(1), Some(Tensor::F32(_)));
        if !constant_b && s.b_strides.1 != 1 {
            return Some(NodeKernel::new(
                Strategy::Gemm(Geometry::CLIF),
                0,
                "float32 with B transposed at run time: the portable kernel gathers it",
            ));
        }
    }
    let geometry = Geometry::for_isa(isa, options);
    if gemm.is_none() && !matches!(node.constant(1), Some(Tensor::F32(_))) {
        if let Ok(s) = MatMulShape::new(&a.shape, &b.shape) {
            if packs_runtime_b(&s, &geometry) {
                return Some(NodeKernel::new(
                    Strategy::Gemm(geometry),
                    packed_b_len(&geometry, s.k, s.n) * 4,
                    "float32 with B known at run time: packed into panels, which the rows reuse",
                ));
            }
        }
    }
    let reason = match geometry.kernel {
        KernelKind::X86(_) => "float32: the target's machine-code GEMM",
        KernelKind::Clif if options.gemm == KernelSource::Clif => "float32; --kernel gemm=clif",
        KernelKind::Clif => "float32: no machine-code GEMM for this target",
    };
    // One GEMM over all rows (a Gemm, or a MatMul whose batches stack into rows) is
    // split: by column panels when B is constant (packed weights), else by row tiles.
    let rows = match gemm {
        Some(g) => GemmShape::new(g, &a.shape, &b.shape)
            .ok()
            .map(|s| (s.m, s.n, s.k)),
        None => MatMulShape::new(&a.shape, &b.shape)
            .ok()
            .filter(|s| s.folds_into_rows() || s.batch.iter().product::<usize>() == 1)
            .map(|s| (s.gemm_rows(), s.n, s.k)),
    };
    let constant_b = matches!(node.constant(1), Some(Tensor::F32(_)));
    let (axis, split) = match rows {
        Some((m, n, k)) if constant_b => weights_split(m, n, k, &geometry, SplitAxis::Cols),
        Some((m, n, k)) => (SplitAxis::Rows, row_split(m, n, k, &geometry)),
        None => (SplitAxis::Rows, Split::of(1, 0)),
    };
    let mut kernel = NodeKernel::new(Strategy::Gemm(geometry), 0, reason).with_tasks(split.tasks);
    kernel.weights_by_columns = axis == SplitAxis::Cols && split.tasks > 1;
    Some(kernel)
}

/// Rows of A from which a MatMul copies its run-time B into panels first: the x86
/// kernels otherwise read every K step of a tile from another row of B, a page apart
/// for wide B (attention scores `Q·Kᵀ`: 2.1× onnxruntime's time) or 4 KB apart, all in
/// one L1 set (B with 1024 columns).
const PACK_B_MIN_ROWS: usize = 64;

/// Whether the MatMul `s` packs its run-time B (see [`PACK_B_MIN_ROWS`]).
fn packs_runtime_b(s: &MatMulShape, geom: &Geometry) -> bool {
    packs_runtime_b_of(s.gemm_rows(), s.k, s.n, geom)
}

/// Whether a GEMM of `rows` rows packs its run-time `k × n` B first.
pub(crate) fn packs_runtime_b_of(rows: usize, k: usize, n: usize, geom: &Geometry) -> bool {
    matches!(geom.kernel, KernelKind::X86(_)) && rows >= PACK_B_MIN_ROWS && n >= geom.nr && k >= 8
}

/// Gemm's operands as strided matrices.
pub(crate) struct GemmShape {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    /// Element strides of op(A) along (row, k) and of op(B) along (k, column).
    pub a_strides: (usize, usize),
    pub b_strides: (usize, usize),
}

impl GemmShape {
    pub(crate) fn new(g: &GemmAttrs, a: &[usize], b: &[usize]) -> Result<GemmShape, String> {
        let (&[a0, a1], &[b0, b1]) = (a, b) else {
            return Err("Gemm operands must be 2-D".into());
        };
        let (m, k, a_strides) = if g.trans_a {
            (a1, a0, (1, a1))
        } else {
            (a0, a1, (a1, 1))
        };
        let (k2, n, b_strides) = if g.trans_b {
            (b1, b0, (1, b1))
        } else {
            (b0, b1, (b1, 1))
        };
        if k != k2 {
            return Err(format!("Gemm inner dimensions differ: {k} vs {k2}"));
        }
        Ok(GemmShape {
            m,
            k,
            n,
            a_strides,
            b_strides,
        })
    }
}

/// How a GEMM of `spec`'s shape is split into tasks by its row tiles: A read with a
/// row stride, or packed by task groups (`lower::gemm::pack_a_by_task`).
pub fn row_split(spec_m: usize, n: usize, k: usize, geom: &Geometry) -> Split {
    Split::of(spec_m.div_ceil(geom.mr), spec_m * n * k)
}

/// How a GEMM is split into tasks by its column panels, when B is read by panel (rows
/// of B, or panels of it packed over the whole K).
pub fn col_split(m: usize, n: usize, k: usize, b: &BLayout, geom: &Geometry) -> Split {
    if !matches!(b, BLayout::Rows { .. } | BLayout::Packed) {
        return Split::of(1, 0);
    }
    Split::of(n.div_ceil(geom.nr), m * n * k)
}

/// Weights bytes past which a GEMM split across the weights' other axis would be bound
/// by every task streaming all of them from outside its core's L2: ResNet's 3×3×512
/// convs on 7×7 read 9.4 MB of weights for 8 output rows per task.
const STREAMED_WEIGHTS_BYTES: usize = 3 << 19;

/// How a GEMM whose weights are packed at compile time is split: along the weights'
/// own axis (`weights`: B's column panels, or A's row tiles for a pointwise conv whose
/// A is maps × channels), each task streaming only its share of them, when they are
/// too large for a core's L2 or that axis balances 2 and 4 threads better; else along
/// the other. A 48-column panel is coarse: minibert's 256-column weights are 5⅓ panels,
/// and split by them its GEMMs ran slower on 2 threads than by row tiles (1.52× vs
/// 1.63×); SqueezeNet's classifier (1000 maps, 169 positions) split by positions was 4
/// tasks of 48, 48, 48 and 25, each reading all 2 MB of weights.
pub fn weights_split(
    m: usize,
    n: usize,
    k: usize,
    geom: &Geometry,
    weights: SplitAxis,
) -> (SplitAxis, Split) {
    let rows = row_split(m, n, k, geom);
    let cols = col_split(m, n, k, &BLayout::Packed, geom);
    let unbalance = |s: &Split, piece: usize, total: usize| {
        [2, 4]
            .iter()
            .map(|&t| crate::codegen::tasks::imbalance(s, piece, total, t))
            .sum::<f64>()
    };
    let (by_rows, by_cols) = (unbalance(&rows, geom.mr, m), unbalance(&cols, geom.nr, n));
    let (own, own_score, other, other_score, bytes) = match weights {
        SplitAxis::Cols => (cols, by_cols, rows, by_rows, k * n * 4),
        SplitAxis::Rows => (rows, by_rows, cols, by_cols, m * k * 4),
    };
    let other_axis = match weights {
        SplitAxis::Cols => SplitAxis::Rows,
        SplitAxis::Rows => SplitAxis::Cols,
    };
    if own.tasks > 1 && (bytes > STREAMED_WEIGHTS_BYTES || own_score < other_score - 1e-9) {
        (weights, own)
    } else {
        (other_axis, other)
    }
}

/// Which axis of C a split GEMM's tasks divide.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum SplitAxis {
    /// Row tiles (see [`row_split`]).
    Rows,
    /// Column panels (see [`col_split`]).
    Cols,
}
