//! What a compiled graph records about the dims its caller sets at run time: their
//! ranges in the ABI's order, and how the run covers each (a loop over samples, or the
//! run-time extent of the values that grow with it). `crate::dims` decides them.

use super::ValueId;

/// A dimension of a compiled graph the caller sets at run time, in `[min, max]`:
/// what `model_info` lists, in the order of `nnc_run_options.dims`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymbolicDim {
    pub name: String,
    pub min: usize,
    pub max: usize,
}

/// The graph is one sample's; `run` calls it `dims[dim]` times. `inputs[i]` /
/// `outputs[i]` mark the graph inputs and outputs whose axis 0 holds the samples
/// (`[dim · unit, ...]`, the graph's shape being `[unit, ...]`); the others are the
/// same for every sample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SampleLoop {
    pub dim: usize,
    pub inputs: Vec<bool>,
    pub outputs: Vec<bool>,
}

/// A dim covered by the row strategy (`crate::dims::row_extent`): `count` holds its value while
/// the graph runs, written by `run` from `options->dims` (by `infer`: the maximum), and
/// is the run-time extent of every value that grows with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowDim {
    pub dim: usize,
    pub count: ValueId,
    /// What the count holds: the dim's value put through this (the dim itself, or the
    /// columns a text line's convs leave, which a CRNN's recurrence runs over).
    pub size: crate::ir::ExtentExpr,
}

impl RowDim {
    /// The count of the dim `dim` itself.
    pub fn of(dim: usize, count: ValueId) -> RowDim {
        RowDim {
            dim,
            count,
            size: crate::ir::ExtentExpr::dim(),
        }
    }
}
