//! The kernel library: every micro-kernel nnc emits, described once by its name
//! (XNNPACK's `dtype-op-tile-isa` form), the CPU features it needs and the shapes it
//! takes. The kernel plan names these kernels for each node; tests run each one against
//! its reference on every `--cpu` the host can execute.

pub mod clif;
pub mod gemm;
pub mod x86;

use super::target::{Arch, CpuFeature, Target};

/// One micro-kernel.
#[derive(Debug)]
pub struct KernelInfo {
    pub name: &'static str,
    /// The architecture it is machine code for; `None` for Cranelift kernels, which
    /// run on both.
    pub arch: Option<Arch>,
    /// CPU features it needs besides the architecture's baseline.
    pub features: &'static [CpuFeature],
    /// The op and shapes it computes (its `supports` rule, in words).
    pub takes: &'static str,
}

impl KernelInfo {
    /// Whether code for `target` may call it.
    pub fn runs_on(&self, target: &Target) -> bool {
        self.arch.is_none_or(|a| a == target.arch) && self.features.iter().all(|&f| target.has(f))
    }
}

use CpuFeature::{Avx, Avx2, Avx512f, Avx512vl, Avx512vnni, Fma};

const AVX2_FMA: &[CpuFeature] = &[Avx, Avx2, Fma];
const AVX512: &[CpuFeature] = &[Avx, Avx2, Fma, Avx512f];
const AVX512_VNNI: &[CpuFeature] = &[Avx, Avx2, Fma, Avx512f, Avx512vl, Avx512vnni];
const X86: Option<Arch> = Some(Arch::X86_64);

const fn x86(
    name: &'static str,
    features: &'static [CpuFeature],
    takes: &'static str,
) -> KernelInfo {
    KernelInfo {
        name,
        arch: X86,
        features,
        takes,
    }
}

const fn clif(name: &'static str, takes: &'static str) -> KernelInfo {
    KernelInfo {
        name,
        arch: None,
        features: &[],
        takes,
    }
}

/// Every kernel, machine code first.
pub const KERNELS: &[KernelInfo] = &[
    x86(
        "f32-gemm-8x48-avx512f",
        AVX512,
        "C = act(alpha·A·B + addends): packed or strided A and B, tap-table B (implicit conv), unit-stride C",
    ),
    x86("f32-gemm-6x16-avx2-fma", AVX2_FMA, "as f32-gemm-8x48-avx512f"),
    x86(
        "f32-dwconv-avx512f",
        AVX512,
        "depthwise 2-D conv, width stride 1 or 2, fused bias, residual and activation",
    ),
    x86("f32-dwconv-avx2-fma", AVX2_FMA, "as f32-dwconv-avx512f"),
    x86(
        "f32-winograd-f4-input-avx512f",
        AVX512,
        "Winograd F(4x4, 3x3) input transform of a chunk of tile rows, 16 tiles per vector",
    ),
    x86("f32-winograd-f4-output-avx512f", AVX512, "its output transform with the fused epilogue"),
    x86("f32-winograd-f2-input-avx512f", AVX512, "Winograd F(2x2, 3x3) input transform"),
    x86("f32-winograd-f2-output-avx512f", AVX512, "its output transform"),
    x86("f32-winograd-f4-input-avx2-fma", AVX2_FMA, "F(4x4) input transform, 8 tiles per vector"),
    x86("f32-winograd-f4-output-avx2-fma", AVX2_FMA, "its output transform"),
    x86("f32-winograd-f2-input-avx2-fma", AVX2_FMA, "F(2x2) input transform, 8 tiles per vector"),
    x86("f32-winograd-f2-output-avx2-fma", AVX2_FMA, "its output transform"),
    x86(
        "f32-winograd-f2-plane16-input-avx512f",
        AVX512,
        "F(2x2) input transform of a whole plane of at most 16 tiles (8x8 maps)",
    ),
    x86("f32-winograd-f2-plane16-products-avx512f", AVX512, "its 16 transformed products"),
    x86("f32-winograd-f2-plane16-output-avx512f", AVX512, "its output transform"),
    x86(
        "f32-maxpool2d-avx512f",
        AVX512,
        "row pass of the separable 2-D max pool, 16 outputs per vector",
    ),
    x86("f32-maxpool2d-avx2", AVX2_FMA, "row pass of the separable max pool, 8 outputs per vector"),
    x86("f32-softmax-avx512f", AVX512, "float32 softmax over contiguous rows"),
    x86("f32-softmax-avx2-fma", AVX2_FMA, "float32 softmax over contiguous rows"),
    x86(
        "u8s8-conv-8x48-avx512vnni",
        AVX512_VNNI,
        "INT8 conv over uint8 planes and int8 weights (vpdpbusd), fused requantizing epilogue",
    ),
    x86("f32-qu8-planes-avx512f", AVX512_VNNI, "quantizes float32 NCHW into uint8 planes"),
    clif(
        "f32-gemm-5x8-clif",
        "every GEMM layout, on 128-bit vectors (fma where the target has it)",
    ),
    clif("f32-dwconv-clif", "depthwise 1-D and 2-D conv over a padded plane"),
    clif("f32-winograd-f4-input-clif", "F(4x4) input transform, 4 tiles per vector"),
    clif("f32-winograd-f4-output-clif", "its output transform"),
    clif("f32-winograd-f2-input-clif", "F(2x2) input transform, 4 tiles per vector"),
    clif("f32-winograd-f2-output-clif", "its output transform"),
    clif("f32-maxpool2d-clif", "row pass of the separable max pool, 4 outputs per vector"),
    clif("f32-softmax-clif", "softmax rows and columns, any float dtype"),
    clif(
        "u8s8-conv-4x8-clif",
        "INT8 conv; its dot-product tree becomes vpdpbusd (AVX-VNNI) or usdot (aarch64 +i8mm)",
    ),
    clif("f32-qu8-planes-clif", "quantizes float32 NCHW into uint8 planes"),
    clif(
        "u8s8-gemm-dot-clif",
        "MatMulInteger of uint8 A and constant int8 B on 8-bit dot products",
    ),
    clif("i16-gemm-clif", "exact integer GEMM of any 8-bit operands, widened to int16"),
];

/// The kernel named `name`.
pub fn find(name: &str) -> Option<&'static KernelInfo> {
    KERNELS.iter().find(|k| k.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_follow_dtype_op_tile_isa() {
        for (i, k) in KERNELS.iter().enumerate() {
            assert!(
                KERNELS[..i].iter().all(|o| o.name != k.name),
                "{} twice",
                k.name
            );
            let isa = k.name.rsplit('-').next().unwrap_or_default();
            let known = ["avx512f", "fma", "avx2", "avx512vnni", "clif"];
            assert!(known.contains(&isa), "{}: unknown ISA suffix", k.name);
            assert_eq!(k.arch.is_none(), isa == "clif", "{}", k.name);
        }
    }
}
