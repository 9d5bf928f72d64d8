//! The kernel library: every micro-kernel nnc emits, described once by its name
//! (XNNPACK's `dtype-op-tile-isa` form), the CPU features it needs and the shapes it
//! takes. The kernel plan names these kernels for each node; tests run each one against
//! its reference on every `--cpu` the host can execute.

pub mod clif;
pub mod conv_u8s8;
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
    /// The function that emits it.
    pub emitter: &'static str,
    /// Workspace it needs besides its operands (the node's planned scratch holds it).
    pub scratch: &'static str,
}

impl KernelInfo {
    /// Whether code for `target` may call it.
    pub fn runs_on(&self, target: &Target) -> bool {
        self.arch.is_none_or(|a| a == target.arch) && self.features.iter().all(|&f| target.has(f))
    }
}

use CpuFeature::{Avx, Avx2, Avx512f, Avx512vl, Avx512vnni, AvxVnni, Fma};

const AVX2_FMA: &[CpuFeature] = &[Avx, Avx2, Fma];
const AVX512: &[CpuFeature] = &[Avx, Avx2, Fma, Avx512f];
const AVX512_VNNI: &[CpuFeature] = &[Avx, Avx2, Fma, Avx512f, Avx512vl, Avx512vnni];
const AVX2: &[CpuFeature] = &[Avx, Avx2];
const AVX_VNNI: &[CpuFeature] = &[Avx, Avx2, AvxVnni];
const X86: Option<Arch> = Some(Arch::X86_64);

/// What a kernel is besides its name and features: what it takes, its emitter and its
/// scratch.
struct About(&'static str, &'static str, &'static str);

const fn x86(name: &'static str, features: &'static [CpuFeature], about: About) -> KernelInfo {
    KernelInfo {
        name,
        arch: X86,
        features,
        takes: about.0,
        emitter: about.1,
        scratch: about.2,
    }
}

const fn clif(name: &'static str, about: About) -> KernelInfo {
    KernelInfo {
        name,
        arch: None,
        features: &[],
        takes: about.0,
        emitter: about.1,
        scratch: about.2,
    }
}

/// Every kernel, machine code first.
pub const KERNELS: &[KernelInfo] = &[
    x86(
        "f32-gemm-8x48-avx512f",
        AVX512,
        About(
            "C = act(alpha·A·B + addends): packed or strided A and B, tap-table B (implicit conv), unit-stride C; rows, columns or one row stride of B, C and residual counted at run time",
            "kernels::x86::gemm::emit",
            "none: packed B comes from the node (im2col panels, packed weights)",
        ),
    ),
    x86(
        "f32-gemm-6x16-avx2-fma",
        AVX2_FMA,
        About(
            "as f32-gemm-8x48-avx512f",
            "kernels::x86::gemm::emit",
            "none",
        ),
    ),
    x86(
        "f32-dwconv-avx512f",
        AVX512,
        About(
            "depthwise 2-D conv, width stride 1 or 2, fused bias, residual and activation",
            "kernels::x86::dwconv::emit",
            "a padded row buffer (DwLayout)",
        ),
    ),
    x86(
        "f32-dwconv-avx2-fma",
        AVX2_FMA,
        About(
            "as f32-dwconv-avx512f",
            "kernels::x86::dwconv::emit",
            "a padded row buffer (DwLayout)",
        ),
    ),
    x86(
        "f32-dwconv-rows-avx512f",
        AVX512,
        About(
            "depthwise 2-D conv of one channel on planes of run-time size: window up to 5x7, column stride 1 or 2, its plane copied in (plane-phases layout), fused bias, residual and activation",
            "kernels::x86::dwconv_rows::emit",
            "one padded plane split by stride phase, with slack (lower::planes)",
        ),
    ),
    x86(
        "f32-dwconv-rows-avx2-fma",
        AVX2_FMA,
        About(
            "as f32-dwconv-rows-avx512f",
            "kernels::x86::dwconv_rows::emit",
            "as f32-dwconv-rows-avx512f",
        ),
    ),
    x86(
        "f32-plane-phases-avx512f",
        AVX512,
        About(
            "a plane of run-time size copied into the interior of its bordered copy, rows split into 1 or 2 column phases (a max pool's, a padded conv's input)",
            "kernels::x86::plane_phases::emit",
            "none: writes the node's padded planes",
        ),
    ),
    x86(
        "f32-plane-phases-avx2-fma",
        AVX2_FMA,
        About(
            "as f32-plane-phases-avx512f",
            "kernels::x86::plane_phases::emit",
            "none",
        ),
    ),
    x86(
        "f32-maxpool-plane-avx512f",
        AVX512,
        About(
            "2-D max pool of one plane of run-time size from its bordered copy (plane-phases layout, column stride 1 or 2), at most seven window rows and phases, a vector of outputs at a time",
            "kernels::x86::maxpool_plane::emit",
            "none: reads the node's bordered plane",
        ),
    ),
    x86(
        "f32-maxpool-plane-avx2-fma",
        AVX2_FMA,
        About(
            "as f32-maxpool-plane-avx512f",
            "kernels::x86::maxpool_plane::emit",
            "none",
        ),
    ),
    x86(
        "f32-patch-rows-avx512f",
        AVX512,
        About(
            "a conv's patches P[K][block] for a run of one output row, every tap and channel one contiguous copy from the plane-phases layout (column stride 1 or 2)",
            "kernels::x86::patch_rows::emit",
            "none: writes the node's patch block",
        ),
    ),
    x86(
        "f32-patch-rows-avx2-fma",
        AVX2_FMA,
        About(
            "as f32-patch-rows-avx512f",
            "kernels::x86::patch_rows::emit",
            "none",
        ),
    ),
    x86(
        "f32-winograd-f4-input-avx512f",
        AVX512,
        About(
            "Winograd F(4x4, 3x3) input transform of a chunk of tile rows, 16 tiles per vector; or of one tile row of run-time planes (tile_row)",
            "kernels::x86::winograd::emit_input",
            "the transformed tiles V (winograd Plan)",
        ),
    ),
    x86(
        "f32-winograd-f4-output-avx512f",
        AVX512,
        About(
            "its output transform with the fused epilogue",
            "kernels::x86::winograd::emit_output",
            "none: reads the products M",
        ),
    ),
    x86(
        "f32-winograd-f2-input-avx512f",
        AVX512,
        About(
            "Winograd F(2x2, 3x3) input transform",
            "kernels::x86::winograd::emit_input",
            "the transformed tiles V",
        ),
    ),
    x86(
        "f32-winograd-f2-output-avx512f",
        AVX512,
        About(
            "its output transform",
            "kernels::x86::winograd::emit_output",
            "none",
        ),
    ),
    x86(
        "f32-winograd-f4-input-avx2-fma",
        AVX2_FMA,
        About(
            "F(4x4) input transform, 8 tiles per vector",
            "kernels::x86::winograd::emit_input",
            "the transformed tiles V",
        ),
    ),
    x86(
        "f32-winograd-f4-output-avx2-fma",
        AVX2_FMA,
        About(
            "its output transform",
            "kernels::x86::winograd::emit_output",
            "none",
        ),
    ),
    x86(
        "f32-winograd-f2-input-avx2-fma",
        AVX2_FMA,
        About(
            "F(2x2) input transform, 8 tiles per vector",
            "kernels::x86::winograd::emit_input",
            "the transformed tiles V",
        ),
    ),
    x86(
        "f32-winograd-f2-output-avx2-fma",
        AVX2_FMA,
        About(
            "its output transform",
            "kernels::x86::winograd::emit_output",
            "none",
        ),
    ),
    x86(
        "f32-winograd-f2-plane16-input-avx512f",
        AVX512,
        About(
            "F(2x2) input transform of a whole plane of at most 16 tiles (8x8 maps)",
            "kernels::x86::winograd_plane::emit_input",
            "V for 16 tiles",
        ),
    ),
    x86(
        "f32-winograd-f2-plane16-products-avx512f",
        AVX512,
        About(
            "its 16 transformed products",
            "kernels::x86::winograd_plane::emit_products",
            "M for 16 tiles",
        ),
    ),
    x86(
        "f32-winograd-f2-plane16-output-avx512f",
        AVX512,
        About(
            "its output transform",
            "kernels::x86::winograd_plane::emit_output",
            "none",
        ),
    ),
    x86(
        "f32-maxpool2d-avx512f",
        AVX512,
        About(
            "row pass of the separable 2-D max pool, 16 outputs per vector",
            "kernels::x86::maxpool2d::emit",
            "one padded row",
        ),
    ),
    x86(
        "f32-maxpool2d-avx2",
        AVX2_FMA,
        About(
            "row pass of the separable max pool, 8 outputs per vector",
            "kernels::x86::maxpool2d::emit",
            "one padded row",
        ),
    ),
    x86(
        "f32-softmax-avx512f",
        AVX512,
        About(
            "float32 softmax over contiguous rows",
            "kernels::x86::softmax::emit",
            "none",
        ),
    ),
    x86(
        "f32-softmax-avx2-fma",
        AVX2_FMA,
        About(
            "float32 softmax over contiguous rows",
            "kernels::x86::softmax::emit",
            "none",
        ),
    ),
    x86(
        "u8s8-conv-8x48-avx512vnni",
        AVX512_VNNI,
        About(
            "INT8 conv over uint8 planes and int8 weights (vpdpbusd), fused requantizing epilogue",
            "kernels::x86::conv_u8s8::emit_conv",
            "none: reads the uint8 planes in place",
        ),
    ),
    x86(
        "f32-qu8-planes-avx512f",
        AVX512_VNNI,
        About(
            "quantizes float32 NCHW into uint8 planes",
            "kernels::x86::conv_u8s8::emit_quantize",
            "none",
        ),
    ),
    x86(
        "u8s8-conv-4x24-avxvnni",
        AVX_VNNI,
        About(
            "INT8 conv over uint8 planes and int8 weights (VEX vpdpbusd), fused requantizing epilogue",
            "kernels::x86::conv_u8s8_ymm::emit_conv",
            "none: reads the uint8 planes in place",
        ),
    ),
    x86(
        "u8s7-conv-4x16-avx2",
        AVX2,
        About(
            "INT8 conv over uint8 planes and int8 weights within ±64 (vpmaddubsw pairs, exact), fused requantizing epilogue",
            "kernels::x86::conv_u8s8_ymm::emit_conv",
            "none: reads the uint8 planes in place",
        ),
    ),
    x86(
        "u8s8-conv-4x8-avx2",
        AVX2,
        About(
            "INT8 conv over uint8 planes and int16-widened weights (exact vpmaddwd), fused requantizing epilogue",
            "kernels::x86::conv_u8s8_ymm::emit_conv",
            "none: reads the uint8 planes in place",
        ),
    ),
    x86(
        "u8s8-dwconv-8px-avx2",
        AVX2,
        About(
            "INT8 depthwise conv requantized into stride-1 planes, a quad's four channels per register (vpmovzxbd, vpmaddwd by int16 weights: exact)",
            "kernels::x86::dwconv_u8s8_ymm::emit_dwconv",
            "none: reads the uint8 planes in place",
        ),
    ),
    x86(
        "u8s8-gemm-4x24-avx512vnni",
        AVX512_VNNI,
        About(
            "MatMulInteger of uint8 A and constant int8 B (EVEX vpdpbusd on ymm)",
            "kernels::x86::gemm_u8s8_ymm::emit",
            "none",
        ),
    ),
    x86(
        "u8s8-gemm-4x24-avxvnni",
        AVX_VNNI,
        About(
            "MatMulInteger of uint8 A and constant int8 B (VEX vpdpbusd)",
            "kernels::x86::gemm_u8s8_ymm::emit",
            "none",
        ),
    ),
    x86(
        "u8s8-gemm-4x8-avx2",
        AVX2,
        About(
            "MatMulInteger of uint8 A and constant int8 B (exact vpmaddwd)",
            "kernels::x86::gemm_u8s8_ymm::emit",
            "A widened to int16",
        ),
    ),
    x86(
        "f32-qu8-planes-avx2",
        AVX2,
        About(
            "quantizes float32 NCHW into uint8 planes",
            "kernels::x86::quantize_planes_avx2::emit_quantize",
            "none",
        ),
    ),
    clif(
        "f32-gemm-5x8-clif",
        About(
            "every GEMM layout, on 128-bit vectors (fma where the target has it)",
            "kernels::clif::gemm::emit",
            "none",
        ),
    ),
    clif(
        "f32-dwconv-clif",
        About(
            "depthwise 1-D and 2-D conv over a padded plane",
            "lower::conv::depthwise (DepthwiseRow::emit)",
            "a zero-padded input plane",
        ),
    ),
    clif(
        "f32-winograd-f4-input-clif",
        About(
            "F(4x4) input transform, 4 tiles per vector",
            "lower::conv::winograd (input_transform)",
            "the padded input, its phases, V, M",
        ),
    ),
    clif(
        "f32-winograd-f4-output-clif",
        About(
            "its output transform",
            "lower::conv::winograd (OutputGroup::emit)",
            "a staging row",
        ),
    ),
    clif(
        "f32-winograd-f2-input-clif",
        About(
            "F(2x2) input transform, 4 tiles per vector",
            "lower::conv::winograd (input_transform)",
            "the padded input, its phases, V, M",
        ),
    ),
    clif(
        "f32-winograd-f2-output-clif",
        About(
            "its output transform",
            "lower::conv::winograd (OutputGroup::emit)",
            "a staging row",
        ),
    ),
    clif(
        "f32-maxpool2d-clif",
        About(
            "row pass of the separable max pool, 4 outputs per vector",
            "lower::pool::maxpool2d (RowPass::emit)",
            "one padded row",
        ),
    ),
    clif(
        "f32-softmax-clif",
        About(
            "softmax rows and columns, any float dtype",
            "lower::norm (Softmax::row, Softmax::columns)",
            "none",
        ),
    ),
    clif(
        "u8s8-conv-4x8-clif",
        About(
            "INT8 conv; its dot-product tree becomes usdot (aarch64 +i8mm) or sdot on flipped activation bytes (aarch64 +dotprod)",
            "lower::conv_u8s8 (ClifTiles)",
            "the wide rows when columns are dropped; one image in float32 when requantizing",
        ),
    ),
    clif(
        "f32-qu8-planes-clif",
        About(
            "quantizes float32 NCHW into uint8 planes",
            "lower::conv_u8s8 (quantize_clif)",
            "none",
        ),
    ),
    clif(
        "u8s8-gemm-dot-clif",
        About(
            "MatMulInteger of uint8 A and constant int8 B on 8-bit dot products (vpdpbusd, usdot, sdot)",
            "kernels::clif::gemm_dot::emit",
            "the packed A rows",
        ),
    ),
    clif(
        "i16-gemm-clif",
        About(
            "exact integer GEMM of any 8-bit operands, widened to int16",
            "kernels::clif::gemm_int::emit",
            "A pair-packed to int16 and packed B",
        ),
    ),
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
            let known = ["avx512f", "fma", "avx2", "avx512vnni", "avxvnni", "clif"];
            assert!(known.contains(&isa), "{}: unknown ISA suffix", k.name);
            assert_eq!(k.arch.is_none(), isa == "clif", "{}", k.name);
        }
    }
}
