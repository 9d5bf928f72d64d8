//! Compiles ONNX models from a cargo build script, as the `cc` crate compiles C:
//!
//! ```ignore
//! // build.rs
//! fn main() {
//!     nnc_build::Model::new("models/resnet18.onnx")
//!         .name("resnet18")
//!         .quantize_int8("models/calib/") // optional; needs features = ["int8"]
//!         .compile();
//! }
//! ```
//! ```ignore
//! // src/main.rs
//! nnc_build::include_model!("resnet18");
//! let mut ws = resnet18::Workspace::new();
//! let out = ws.infer(&resnet18::Inputs { input: &image })?;
//! ```
//!
//! The model is compiled in the build script's process (no external linker, no
//! Python) for cargo's `TARGET`, into `OUT_DIR/lib<name>.a` with its C header and a
//! Rust module `OUT_DIR/<name>.rs`; cargo is told to link the archive and to rerun
//! the script when the model or the calibration data change.

#[cfg(feature = "compile")]
mod build;

#[cfg(feature = "compile")]
pub use build::{Artifacts, Error, Model};

/// A thread pool for the bindings' `Workspace::run_with` (std threads; one pool may
/// serve several models and threads at once).
pub use nnc_runtime_abi::ThreadPool;

/// The options type of `PREFIXrun` (for the generated bindings).
#[doc(hidden)]
pub type __RunOptions = nnc_runtime_abi::NncRunOptions;

/// The `nnc_run_options` the generated bindings pass (not for direct use).
#[doc(hidden)]
pub fn __run_options(
    pool: &nnc_runtime_abi::NncThreadPool,
    workspace_bytes: u64,
) -> nnc_runtime_abi::NncRunOptions {
    nnc_runtime_abi::NncRunOptions::new(Some(pool), workspace_bytes)
}

/// The `nnc_run_options` of the generated bindings' `run_dims` (not for direct use):
/// `dims` must outlive the call.
#[doc(hidden)]
pub fn __run_options_dims(
    pool: Option<&nnc_runtime_abi::NncThreadPool>,
    workspace_bytes: u64,
    dims: &[i64],
) -> nnc_runtime_abi::NncRunOptions {
    nnc_runtime_abi::NncRunOptions::new(pool, workspace_bytes).with_dims(dims)
}

/// The `nnc_run_options` of the generated bindings' `run_shaped` (not for direct use):
/// `shapes` receives every output's shape and must outlive the call.
#[doc(hidden)]
pub fn __run_options_shapes(
    pool: Option<&nnc_runtime_abi::NncThreadPool>,
    workspace_bytes: u64,
    shapes: &mut [i64],
) -> nnc_runtime_abi::NncRunOptions {
    nnc_runtime_abi::NncRunOptions::new(pool, workspace_bytes).with_output_shapes(shapes)
}

/// Includes the bindings `Model::compile` wrote for the model named `$name`: a module
/// `$name` with `Inputs`, `Outputs`, `Workspace` and the raw `ffi` declarations.
#[macro_export]
macro_rules! include_model {
    ($name:literal) => {
        include!(concat!(env!("OUT_DIR"), "/", $name, ".rs"));
    };
}
