//! The plans code generation follows, decided before any code is emitted: for every
//! node the kernel that runs it ([`kernels`]), then where every tensor lives
//! ([`memory`]). Lowering reads them and never chooses again; nothing here depends on
//! lowering.

pub mod attention;
pub mod conv;
pub mod conv_transpose;
pub mod gemm;
pub mod int8;
pub mod kernels;
pub mod memory;
pub mod planes;
pub mod pool;
pub mod recurrence;
pub mod scratch;
mod shared_tables;
pub mod softmax;

pub use kernels::*;
pub use memory::*;
