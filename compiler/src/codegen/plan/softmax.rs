//! The plan of a Softmax node: machine-code rows on x86-64, or Cranelift's rows and
//! columns.

use super::{NodeKernel, NodeOperands, Strategy};
use crate::codegen::isa::Isa;
use crate::codegen::options::{KernelOptions, KernelSource};
use crate::ir::DType;

/// The kernel plan of a Softmax node: the machine-code rows on x86-64 targets with AVX2
/// or AVX-512 for float32 softmax (not log-softmax) over the innermost axis;
/// `--kernel softmax=clif` keeps the Cranelift rows, for A/B.
pub fn plan_softmax(
    axis: usize,
    log: bool,
    node: &NodeOperands,
    isa: &Isa,
    options: &KernelOptions,
) -> Option<NodeKernel> {
    let (x, y) = (node.input(0)?, *node.outputs.first()?);
    // One contiguous row per softmax: every axis after `axis` has size 1.
    let inner: usize = x.shape.get(axis + 1..)?.iter().product();
    let rows = !log && inner == 1 && x.dtype == DType::F32 && y.dtype == DType::F32;
    let isa = isa
        .vector
        .filter(|_| rows && options.softmax == KernelSource::Auto);
    let reason = match (isa, rows) {
        (Some(_), _) => "float32 softmax over the innermost axis: machine-code rows",
        (None, true) if options.softmax == KernelSource::Clif => "--kernel softmax=clif",
        (None, true) => "no machine-code rows for this target",
        (None, false) => "log-softmax, another axis or dtype: Cranelift rows and columns",
    };
    Some(NodeKernel::new(Strategy::Softmax(isa), 0, reason))
}
