//! The C ABI of nnc-compiled models: `include/nnc.h` and its Rust twins.
//!
//! The compiler uses these definitions to lay out the `model_info` data it
//! emits and to name the exported symbols; hosts use them to load and call
//! compiled libraries, safely through `loader::Library` (feature `loader`, on by
//! default).

pub mod abi;
#[cfg(feature = "loader")]
pub mod loader;
pub mod pool;

pub use abi::*;
pub use pool::ThreadPool;
