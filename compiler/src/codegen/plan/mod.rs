//! The plans code generation follows, decided before any code is emitted: for every
//! node the kernel that runs it ([`kernels`]), then where every tensor lives
//! ([`memory`]). Lowering reads them and never chooses again; nothing here depends on
//! lowering.

pub mod kernels;
pub mod memory;
mod shared_tables;

pub use kernels::*;
pub use memory::*;
