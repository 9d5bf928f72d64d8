//! Machine-code kernels for x86-64 (AVX2 + FMA and AVX-512), encoded with iced-x86 and
//! placed in the object as function bytes. Cranelift lowers only 128-bit vectors, a
//! quarter of what AVX-512 computes per instruction; these kernels have the same
//! arguments and meaning as the Cranelift code they replace (System V calling
//! convention).

pub mod activation;
pub mod asm;
pub mod conv_u8s8;
pub mod conv_u8s8_ymm;
pub mod dwconv;
pub mod dwconv_rows;
pub mod dwconv_u8s8_ymm;
pub mod gemm;
pub mod gemm_u8s8_ymm;
pub mod maxpool2d;
pub mod maxpool_plane;
pub mod patch_rows;
pub mod plane_phases;
mod planes_walk;
pub mod quantize_planes_avx2;
pub mod softmax;
pub mod winograd;
pub mod winograd_plane;

pub use activation::{supports_activation, supports_activation_with};
