//! nnc: a quantizing ahead-of-time compiler from ONNX models to native libraries.
//!
//! Pipeline: [`onnx`] import → [`ir`] graph → [`ops`] shape inference → [`interp`]
//! (reference) / [`codegen`] (Cranelift) → [`artifact`] (.so / .o / .a writers).

pub mod artifact;
pub mod bindings;
pub mod codegen;
pub mod conformance;
pub mod conformance_cli;
pub mod diagnostic;
pub mod driver;
pub mod error;
pub mod header;
pub mod inspect;
pub mod interp;
pub mod ir;
pub mod npy;
pub mod onnx;
pub mod ops;
pub mod passes;
pub mod progress;
pub mod quant;
pub mod suite_status;
pub mod verify;
