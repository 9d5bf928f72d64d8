//! nnc: a quantizing ahead-of-time compiler from ONNX models to native libraries.
//!
//! Pipeline: [`onnx`] import → [`ir`] graph → [`ops`] shape inference → [`interp`]
//! (reference) / [`codegen`] (Cranelift) → [`artifact`] (.so / .o / .a writers).
//!
//! This is the compiler core only: the `nnc` command line, the conformance runner,
//! `run`/`verify`/`inspect` live in `nnc-cli`, and what runs compiled graphs in this
//! process or reads `.npy`/`.npz` files in `nnc-host`.

pub mod artifact;
pub mod bindings;
pub mod codegen;
pub mod driver;
pub mod error;
pub mod files;
pub mod header;
pub mod interp;
pub mod ir;
pub mod limits;
pub mod memory;
pub mod model_name;
pub mod onnx;
pub mod ops;
pub mod output_paths;
pub mod passes;
pub mod progress;
pub mod quant;
