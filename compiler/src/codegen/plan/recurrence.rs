//! The plan of an `RnnSequence`: the recurrent product's kernel and the scratch of the
//! states, one row's gates and, for R known only at run time, its packed copy.

use super::{NodeKernel, NodeOperands, Strategy};
use crate::codegen::isa::Isa;
use crate::codegen::kernels::gemm::{Geometry, KernelKind};
use crate::codegen::options::KernelOptions;
use crate::codegen::plan::ALIGN;
use crate::ir::TensorType;
use crate::ops::RnnCell;

/// Gate units (columns of the recurrent product) one pass accumulates.
pub(crate) const BLOCK: usize = 32;

/// The units of a gate as stored: `hidden` rounded up so that the cell's gates fill
/// whole blocks (to a multiple of 8 for an LSTM's four gates, of 32 for one or three).
pub(crate) fn padded_hidden(hidden: usize, cell: RnnCell) -> usize {
    let unit = match cell.gates() % 4 {
        0 => BLOCK / 4,
        2 => BLOCK / 2,
        _ => BLOCK,
    };
    hidden.next_multiple_of(unit)
}

/// Bytes of the packed recurrence weights of `dirs` directions.
pub(crate) fn packed_bytes(cell: RnnCell, dirs: usize, hidden: usize) -> usize {
    dirs * cell.gates() * padded_hidden(hidden, cell) * hidden * 4
}

/// Bytes of the states in scratch: h (and an LSTM's c) of every batch row.
pub(crate) fn states_bytes(cell: RnnCell, batch: usize, hp: usize) -> usize {
    let states = if cell == RnnCell::Lstm { 2 } else { 1 };
    (states * batch * hp * 4).next_multiple_of(ALIGN)
}

/// Scratch bytes: the states, one row's gates, and the packed weights when R is known
/// only at run time.
pub fn rnn_scratch(
    cell: RnnCell,
    dirs: usize,
    batch: usize,
    hidden: usize,
    r_constant: bool,
) -> usize {
    let hp = padded_hidden(hidden, cell);
    let states = states_bytes(cell, batch, hp);
    let gates = (cell.gates() * hp * 4).next_multiple_of(ALIGN);
    let packed = if r_constant {
        0
    } else {
        packed_bytes(cell, dirs, hidden)
    };
    states + gates + packed
}

/// The kernel plan of an `RnnSequence`: the recurrent product on the target's
/// machine-code GEMM when R is constant, else the Cranelift loop.
pub fn plan_rnn_sequence(
    cell: RnnCell,
    dirs: usize,
    xw: &TensorType,
    r: &TensorType,
    node: &NodeOperands,
    isa: &Isa,
    options: &KernelOptions,
) -> NodeKernel {
    let (batch, hidden) = (xw.shape[1], r.shape[2]);
    let r_constant = node.constant(1).is_some();
    let bytes = rnn_scratch(cell, dirs, batch, hidden, r_constant);
    let geometry = Geometry::for_isa(isa, options);
    if r_constant && matches!(geometry.kernel, KernelKind::X86(_)) {
        return NodeKernel::new(
            Strategy::Gemm(geometry),
            bytes,
            "the recurrent product h·Rᵀ on the machine-code GEMM (one row), R packed as its B",
        );
    }
    NodeKernel::new(
        Strategy::Clif,
        bytes,
        "the states, one row's gates, packed R",
    )
}
