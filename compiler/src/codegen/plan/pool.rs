//! The plan of a pooling node: a whole-plane reduction, the separable 2-D max pool (on
//! this target's machine code or Cranelift's), or the general window loops.

use super::{NodeKernel, NodeOperands, Strategy};
use crate::codegen::isa::Isa;
use crate::codegen::isa::Vector;
use crate::codegen::options::{KernelOptions, KernelSource, Toggle};
use crate::ir::{DType, TensorType};
use crate::ops::{PoolAttrs, PoolKind};

const F32: usize = 4;

/// How a pooling node is computed, as the kernel plan decides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolStrategy {
    /// The window covers the whole plane: one reduction per plane.
    Global,
    /// 2-D float32 max pooling as a row pass and a column pass (`lower::pool::maxpool2d`), the
    /// row passes in machine code of this family or in Cranelift.
    SeparableMax(Option<Vector>),
    /// Every other window: static tap loops, border regions apart.
    Windows,
}

impl PoolStrategy {
    pub fn name(&self) -> &'static str {
        match self {
            PoolStrategy::Global => "global-pool",
            PoolStrategy::SeparableMax(_) => "separable-maxpool2d",
            PoolStrategy::Windows => "window-pool",
        }
    }

    pub fn kernels(&self) -> Vec<String> {
        match self {
            PoolStrategy::SeparableMax(Some(Vector::Zmm)) => {
                vec!["f32-maxpool2d-avx512f".into()]
            }
            PoolStrategy::SeparableMax(Some(Vector::Ymm)) => vec!["f32-maxpool2d-avx2".into()],
            PoolStrategy::SeparableMax(None) => vec!["f32-maxpool2d-clif".into()],
            _ => vec![],
        }
    }
}

/// The kernel plan of a pooling node (`None` for operands that are not a valid pool).
pub fn plan_pool(
    p: &PoolAttrs,
    node: &NodeOperands,
    isa: &Isa,
    options: &KernelOptions,
) -> Option<NodeKernel> {
    let (x, y) = (node.input(0)?, *node.outputs.first()?);
    let plan = |s: PoolStrategy, scratch: usize, reason: &str| {
        Some(NodeKernel::new(Strategy::Pool(s), scratch, reason))
    };
    if is_global(p, x.shape.get(2..).unwrap_or(&[])) {
        return plan(PoolStrategy::Global, 0, "the window covers the whole plane");
    }
    if separable_max_applies(p, x, options) {
        let isa = separable_max_kernel(x, y, isa, options);
        return plan(
            PoolStrategy::SeparableMax(isa),
            separable_max_scratch_bytes(p, x),
            "2-D float32 max pool, no dilation, row stride 1 or 2",
        );
    }
    plan(PoolStrategy::Windows, 0, "the general window loops")
}

/// Whether each window is the whole (unpadded) plane.
pub(crate) fn is_global(p: &PoolAttrs, in_spatial: &[usize]) -> bool {
    p.output_spatial.iter().all(|&o| o == 1)
        && p.pads.iter().all(|&q| q == 0)
        && p.kernel == in_spatial
        && p.kernel
            .iter()
            .zip(&p.dilations)
            .all(|(&k, &d)| k == 1 || d == 1)
}

/// Whether this path computes the pool: float32 max over two spatial axes, no
/// dilation, horizontal stride 1 or 2. `--kernel separable-pool=off` keeps every pool on the
/// generic path, for measurements.
pub(crate) fn separable_max_applies(
    p: &PoolAttrs,
    x: &TensorType,
    options: &KernelOptions,
) -> bool {
    options.separable_pool == Toggle::Auto
        && p.kind == PoolKind::Max
        && x.dtype == DType::F32
        && x.shape.len() == 4
        && p.kernel.len() == 2
        && p.strides.len() == 2
        && p.output_spatial.len() == 2
        && p.pads.len() == 4
        && p.dilations == [1, 1]
        && matches!(p.strides[1], 1 | 2)
}

/// Floats of the row buffer: the padded row, and whatever the last output vector's
/// window reads past it, for vectors of up to 16 lanes (the machine-code kernel's), so
/// the scratch does not depend on the CPU.
pub(crate) fn row_floats(p: &PoolAttrs, in_w: usize) -> usize {
    const LAYOUT_LANES: usize = 16;
    let out_w = p.output_spatial[1];
    let vectors = out_w.div_ceil(LAYOUT_LANES);
    let reach = p.strides[1] * LAYOUT_LANES * vectors + p.kernel[1] + 2 * LAYOUT_LANES;
    (p.pads[1] + in_w).max(reach).div_ceil(LAYOUT_LANES) * LAYOUT_LANES
}

/// Arena scratch: the row buffer.
pub(crate) fn separable_max_scratch_bytes(p: &PoolAttrs, x: &TensorType) -> usize {
    row_floats(p, x.shape[3]) * F32
}

/// The machine-code kernel's family for this pool on `target`, if any: 16 lanes
/// on AVX-512 for rows of more than 8 outputs, else 8. `--kernel pool=clif` keeps the
/// Cranelift passes, for measurements.
pub(crate) fn separable_max_kernel(
    x: &TensorType,
    y: &TensorType,
    isa: &Isa,
    options: &KernelOptions,
) -> Option<Vector> {
    let isa = isa.vector?;
    // The kernel addresses within a plane by 32-bit displacements.
    let plane_bytes = |t: &TensorType| t.shape[2] * t.shape[3] * F32;
    if options.pool == KernelSource::Clif
        || plane_bytes(x).max(plane_bytes(y)) > i32::MAX as usize / 2
    {
        return None;
    }
    let out_w = y.shape[3];
    Some(if isa == Vector::Zmm && out_w > 8 {
        Vector::Zmm
    } else {
        Vector::Ymm
    })
}
