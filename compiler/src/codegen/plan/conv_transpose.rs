//! The plan of a ConvTranspose node.

use super::{NodeKernel, NodeOperands, Strategy};
use crate::codegen::kernels::gemm::Geometry;
use crate::ir::DType;

/// The kernel plan of a ConvTranspose node: float32 runs one GEMM per (tap, input row)
/// on the portable kernel, whose A (the tap's weights, packed or strided) and C (a
/// strided window of the output) layouts the machine-code kernels do not take.
pub fn plan_conv_transpose(node: &NodeOperands) -> Option<NodeKernel> {
    (node.input(0)?.dtype == DType::F32).then(|| {
        NodeKernel::new(
            Strategy::Gemm(Geometry::CLIF),
            0,
            "per-tap GEMMs into strided output windows: the portable kernel",
        )
    })
}
