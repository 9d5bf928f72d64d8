//! nnc's graph IR: static-shaped tensors, constants, and nodes holding parsed ops.

pub mod code_elements;
pub mod dim;
pub mod dtype;
pub mod extent_expr;
pub mod graph;
pub mod input_guard;
pub mod low_precision;
pub mod run_dims;
pub mod tensor;

pub use dim::{Dim, DimAtom, SymbolId, SymbolTable};
pub use dtype::{DType, TensorType};
pub use extent_expr::{ExtentExpr, ExtentStep};
pub use graph::{Graph, Node, RunExtent, ValueId, ValueInfo};
pub use input_guard::InputGuard;
pub use tensor::{Element, Tensor};
