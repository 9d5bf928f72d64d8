//! The bodies of nnc's fuzz targets (the thin `fuzz_target!` wrappers are in
//! `compiler/fuzz`, which needs cargo-fuzz; these build and test on stable):
//!
//! - [`import_bytes`]: model bytes → protobuf decode → import → shape inference;
//! - [`compile_case`]: a random small model ([`random_model`]) → import → the default
//!   passes → code generation → shared-object linking, all in memory;
//! - [`differential_case`]: the same models compiled for this machine, run on random
//!   inputs, and compared with the interpreter;
//! - [`dims_case`]: the same models with their inputs' axis 0 set at run time (one
//!   library for 1 to 3 samples), at 2 and 3 samples against the interpreter.
//!
//! Errors are fine (the input is refused and the case ends); a panic, an abort, a
//! signal or (in [`differential_case`]) a mismatch is a finding.

mod compare;
mod differential;
mod pipeline;
pub mod random_model;

pub use differential::{differential_case, dims_case};
pub use pipeline::{compile_case, import_bytes, imported_graph, optimized_graph};
