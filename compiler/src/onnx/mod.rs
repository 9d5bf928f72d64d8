//! The ONNX front end: protobuf messages, tensors, attributes, and one importer per op
//! family mapping ONNX nodes onto nnc's core ops.

pub mod attributes;
pub mod constraints;
pub mod external_data;
mod implied_inputs;
pub mod import;
pub mod ops;
pub mod proto;
pub mod ranges;
mod symbolic;
pub mod tensor_proto;
pub mod weight_budget;

pub use import::{
    import_model, import_symbolic, load_model, load_model_partial, ImportOptions, Imported,
};
