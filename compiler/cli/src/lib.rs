//! The tools around the compiler core (`nnc`): the `nnc` command line's subcommands
//! other than compiling itself, and how it talks to a terminal.
//!
//! - [`conformance`], [`conformance_cli`]: the ONNX backend-test runner;
//! - [`verify`]: `nnc run` and `nnc verify` (compiled code vs the interpreter and
//!   onnxruntime);
//! - [`inspect`]: `nnc inspect`, with [`suite_status`] for unsupported ops;
//! - [`diagnostic`], [`progress`]: errors and progress bars on stderr.

pub mod conformance;
pub mod conformance_cli;
pub mod diagnostic;
pub mod inspect;
pub mod progress;
pub mod suite_status;
pub mod verify;
