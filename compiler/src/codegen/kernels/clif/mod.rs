//! Portable kernels written in Cranelift IR: they run on every target (128-bit vectors,
//! fma where the target has it), and are the reference the machine-code kernels are
//! tested against.

pub mod gemm;
pub mod gemm_dot;
pub mod gemm_int;
