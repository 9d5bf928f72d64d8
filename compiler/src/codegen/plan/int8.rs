//! The plan of the INT8 nodes: the convolution on planes (`ConvU8S8`), quantization
//! into planes, and MatMulInteger / ConvInteger, each on the widest INT8 machine code
//! the target runs or on Cranelift's dot-product code.

use super::{Int8Conv, NodeKernel, NodeOperands, Strategy};
use crate::codegen::isa::{Isa, Vector, X86Dot};
use crate::codegen::kernels::clif::gemm_int::IntGemm;
use crate::codegen::kernels::conv_u8s8::ConvU8Geometry;
use crate::codegen::kernels::x86;
use crate::codegen::kernels::x86::gemm_u8s8_ymm::GemmSpec;
use crate::codegen::options::{KernelOptions, KernelSource};
use crate::codegen::target::Arch;
use crate::codegen::target::Target;
use crate::codegen::tasks::Split;
use crate::ir::{DType, Tensor, TensorType};
use crate::ops::{ConvAttrs, Op, PlaneLayout, Requantize};

/// Map tile of the portable kernel.
pub(crate) const CLIF_MR: usize = 4;

/// Column tile of the portable kernel, in pixels (vectors of 4): 2 vectors on x86-64's
/// 16 registers, 4 on aarch64's 32 (16 accumulators: each loaded quad and weight
/// broadcast then feeds twice the dot products).
pub(crate) fn clif_nr(arch: Arch) -> usize {
    match arch {
        Arch::Aarch64 => 16,
        Arch::X86_64 => 8,
    }
}

/// The INT8 convolution's machine-code kernel, as the kernel library names it.
pub const U8S8_CONV_X86_KERNEL: &str = "u8s8-conv-8x48-avx512vnni";

/// The kernel plan of an INT8 convolution: the widest machine code the target runs
/// (AVX-512 VNNI, AVX-VNNI or AVX2) and its loop order, where the activation has a
/// machine-code form, else the Cranelift dot-product tiles. Scratch is the portable
/// kernel's: the wide rows, when columns must be dropped, then (requantizing) one
/// image's float32 output.
pub fn plan_conv_u8s8(
    conv: &ConvAttrs,
    planes: &PlaneLayout,
    requantize: Option<&Requantize>,
    node: &NodeOperands,
    isa: &Isa,
    options: &KernelOptions,
) -> Option<NodeKernel> {
    let g = ConvU8Geometry::new(conv, planes, node.outputs.first()?, requantize);
    let machine = x86::supports_activation(conv.activation);
    match int8_machine_code(isa, options) {
        Some((Vector::Zmm, _)) if machine => {
            let tiles_outer = x86::conv_u8s8::tiles_outer(&g, options.int8_order);
            let tasks = map_split(&g, x86::conv_u8s8::MR).tasks;
            return Some(
                NodeKernel::new(
                    Strategy::ConvU8S8(Int8Conv::Vnni { tiles_outer }),
                    0,
                    "AVX-512 VNNI target",
                )
                .with_tasks(tasks),
            );
        }
        Some((Vector::Ymm, _))
            if machine
                && x86::dwconv_u8s8_ymm::supports(
                    &g,
                    requantize,
                    node.inputs.get(3).copied().flatten().is_some(),
                ) =>
        {
            let tasks = map_split(&g, 4).tasks;
            return Some(
                NodeKernel::new(
                    Strategy::ConvU8S8(Int8Conv::DepthwiseYmm),
                    0,
                    "256-bit target, depthwise into stride-1 planes: a quad's channels per register",
                )
                .with_tasks(tasks),
            );
        }
        Some((Vector::Ymm, isa)) if machine => {
            let pairs = isa == X86Dot::Pmaddwd && weights_within(node, PAIRS_WEIGHT_MAX);
            let isa = if pairs { X86Dot::Pmaddubsw } else { isa };
            let tiles_outer = x86::conv_u8s8_ymm::tiles_outer(&g, options.int8_order, isa);
            let reason = match isa {
                X86Dot::Vpdpbusd { .. } => "AVX-VNNI target",
                X86Dot::Pmaddubsw => "AVX2 target, weights within ±64: vpmaddubsw pairs",
                X86Dot::Pmaddwd => "AVX2 target, weights past ±64: exact 16-bit products",
            };
            let tasks = map_split(&g, x86::conv_u8s8_ymm::MR).tasks;
            return Some(
                NodeKernel::new(
                    Strategy::ConvU8S8(Int8Conv::Ymm { isa, tiles_outer }),
                    x86::conv_u8s8_ymm::scratch_bytes(&g, isa, tiles_outer),
                    reason,
                )
                .with_tasks(tasks),
            );
        }
        _ => {}
    }
    let reason = if options.int8_conv == KernelSource::Clif {
        "--kernel int8-conv=clif"
    } else {
        "no x86 machine code for this target or activation"
    };
    let scratch = wide_scratch(&g, clif_nr(isa.arch))
        + requantize.map_or(0, |_| g.maps * g.out_h * g.out_w * 4);
    Some(NodeKernel::new(
        Strategy::ConvU8S8(Int8Conv::Clif(isa.dot)),
        scratch,
        reason,
    ))
}

/// How a one-image x86 INT8 conv is split into tasks: by its tiles of `mr` maps, each
/// task a call of the kernel compiled for its maps (its output quads, weights, bias and
/// scales, and for a depthwise conv its input quads). Every map is computed by the same
/// tile code either way.
pub fn map_split(g: &ConvU8Geometry, mr: usize) -> Split {
    if g.batch != 1 {
        return Split::of(1, 0);
    }
    // A depthwise multiply-add reads its input for only `taps` of them: counted at a
    // few of a dense conv's.
    let cost = if g.depthwise { 16 } else { 4 };
    let work = g.maps * g.out_h * g.out_w * g.taps.len() * g.k_quads() * cost;
    Split::of(g.maps.div_ceil(mr), work)
}

/// The kernel plan of quantization into planes: the machine code of the INT8
/// convolutions' family where the layout suits it.
pub fn plan_quantize_to_planes(
    layout: &PlaneLayout,
    batch: usize,
    isa: &Isa,
    options: &KernelOptions,
) -> Option<NodeKernel> {
    let isa = match int8_machine_code(isa, options) {
        Some((Vector::Zmm, _)) if x86::conv_u8s8::quantize_supports(layout) => Some(Vector::Zmm),
        Some((Vector::Ymm, _)) if x86::quantize_planes_avx2::quantize_supports(layout) => {
            Some(Vector::Ymm)
        }
        _ => None,
    };
    let reason = match isa {
        Some(Vector::Zmm) => "AVX-512 VNNI target",
        Some(Vector::Ymm) => "AVX2 target",
        None => "no machine code for this target or layout",
    };
    let tasks = match (isa, batch) {
        (Some(_), 1) => quad_split(layout).tasks,
        _ => 1,
    };
    Some(NodeKernel::new(Strategy::QuantizeToPlanes(isa), 0, reason).with_tasks(tasks))
}

/// How a one-image quantization into planes is split into tasks: by channel quads,
/// each task the kernel compiled for its channels.
pub fn quad_split(layout: &PlaneLayout) -> Split {
    let work = layout.channels * layout.height * layout.width * 8;
    Split::of(layout.quads(), work)
}

pub(crate) fn wide_scratch(g: &ConvU8Geometry, nr: usize) -> usize {
    if g.compact() {
        0
    } else {
        (g.maps.next_multiple_of(CLIF_MR) * g.wide().next_multiple_of(nr) * 4).next_multiple_of(64)
    }
}

/// The INT8 machine code `target` runs (convolutions, quantization into planes and the
/// MatMulInteger GEMM): its vectors and products; `--kernel int8-conv=clif` forces the
/// Cranelift code, for comparisons.
pub(crate) fn int8_machine_code(isa: &Isa, options: &KernelOptions) -> Option<(Vector, X86Dot)> {
    isa.int8_x86()
        .filter(|_| options.int8_conv == KernelSource::Auto)
}

/// The largest weight magnitude whose products with uint8 add in pairs without
/// saturating 16 bits: 255 · 64 · 2 = 32640.
pub const PAIRS_WEIGHT_MAX: i64 = 64;

/// Whether the node's weights (input 1) are a constant within `±max`.
pub(crate) fn weights_within(node: &NodeOperands, max: i64) -> bool {
    (node.constants.get(1).copied().flatten())
        .is_some_and(|w| w.to_i64_vec().iter().all(|v| v.abs() <= max))
}

/// Whether `target`'s INT8 kernels add u8 · s8 products in saturating 16-bit pairs
/// (AVX2's `vpmaddubsw`): exact only for weights of at most 64 in magnitude.
pub fn multiplies_in_pairs(target: &Target) -> bool {
    matches!(
        int8_machine_code(&Isa::of(target), &KernelOptions::default()),
        Some((Vector::Ymm, X86Dot::Pmaddwd))
    )
}

/// MatMulInteger's operand sizes.
pub(crate) struct MatMulInt {
    pub batch: Vec<usize>,
    pub a_batch: Vec<usize>,
    pub b_batch: Vec<usize>,
    pub m: usize,
    pub k: usize,
    pub n: usize,
}

pub(crate) fn matmul_int_shape(a: &TensorType, b: &TensorType) -> Result<MatMulInt, String> {
    let (a2, b2) = crate::ops::infer::as_matrices(&a.shape, &b.shape);
    let (ab, am) = a2.split_at(a2.len() - 2);
    let (bb, bm) = b2.split_at(b2.len() - 2);
    let batch = crate::ops::infer::broadcast_shapes(&[ab, bb])?;
    Ok(MatMulInt {
        a_batch: crate::codegen::kernel::broadcast_strides(ab, &batch),
        b_batch: crate::codegen::kernel::broadcast_strides(bb, &batch),
        batch,
        m: am[0],
        k: am[1],
        n: bm[1],
    })
}

/// The uint8 activations' zero point when MatMulInteger can run on the 8-bit
/// dot-product GEMM: uint8 A with a constant scalar zero point (or none), constant int8
/// B with a zero point of zeros (or none). Each optional input is `None` when absent and
/// `Some(None)` when present but not constant.
pub(crate) fn dot_zero_point(
    a: DType,
    b: Option<&Tensor>,
    a_zp: Option<Option<&Tensor>>,
    b_zp: Option<Option<&Tensor>>,
) -> Option<i64> {
    let b_zero = match b_zp {
        None => true,
        Some(z) => z.is_some_and(|t| t.to_i64_vec().iter().all(|&v| v == 0)),
    };
    let za = match a_zp {
        None => Some(0),
        Some(z) => match z.map(Tensor::to_i64_vec) {
            Some(v) if v.len() == 1 => Some(v[0]),
            _ => None,
        },
    };
    (b_zero && a == DType::U8 && b?.dtype() == DType::I8).then_some(za?)
}

/// The kernel plan of MatMulInteger and ConvInteger: the 8-bit dot-product GEMM where
/// `dot_zero_point` allows (MatMulInteger), the exact int16 GEMM otherwise, with the
/// scratch of its packed operands.
pub fn plan_integer(
    op: &Op,
    node: &NodeOperands,
    isa: &Isa,
    options: &KernelOptions,
) -> Option<NodeKernel> {
    let (a, b) = (node.input(0)?, node.input(1)?);
    let optional = |i: usize| node.has_input(i).then(|| node.constant(i));
    let mut x86 = None;
    let mut dot = None;
    let scratch = match op {
        Op::MatMulInteger => {
            let s = matmul_int_shape(a, b).ok()?;
            let g = IntGemm::new(s.m, s.n, s.k, s.n);
            let zero_point = dot_zero_point(a.dtype, node.constant(1), optional(2), optional(3));
            dot = zero_point.map(|_| isa.dot);
            x86 = zero_point.and(int8_machine_code(isa, options).map(|(_, d)| d));
            match x86 {
                Some(isa) => {
                    let k4 = s.k.next_multiple_of(4);
                    let spec = GemmSpec {
                        isa,
                        m: s.m,
                        n: s.n,
                        k4,
                    };
                    align(s.m * k4) + align(spec.scratch_bytes())
                }
                None => align(s.m * g.k2 * 2) + align(g.packed_b_bytes()),
            }
        }
        Op::ConvInteger(c) => {
            let v = ConvInt::new(c, a, b, node.outputs.first()?).ok()?;
            let g = v.gemm();
            align(v.mg * g.k2 * 2) * v.group + align(g.packed_b_bytes())
        }
        _ => return None,
    };
    let reason = if x86.is_some() {
        "uint8 activations and constant int8 weights: 8-bit dot products, x86 machine code"
    } else if dot.is_some() {
        "uint8 activations and constant int8 weights: 8-bit dot products"
    } else {
        "operand types or zero points the 8-bit dot products cannot take: exact int16 GEMM"
    };
    Some(NodeKernel::new(
        Strategy::IntGemm { dot, x86 },
        scratch,
        reason,
    ))
}

pub(crate) fn align(bytes: usize) -> usize {
    bytes.next_multiple_of(64)
}

/// ConvInteger's geometry (2-D).
pub(crate) struct ConvInt {
    pub batch: usize,
    pub h: usize,
    pub w: usize,
    pub maps: usize,
    pub group: usize,
    pub cg: usize,
    pub mg: usize,
    pub kh: usize,
    pub kw: usize,
    pub oh: usize,
    pub ow: usize,
    pub stride: [usize; 2],
    pub dilation: [usize; 2],
    pub pad: [usize; 2],
}

impl ConvInt {
    pub(crate) fn new(
        c: &ConvAttrs,
        x: &TensorType,
        w: &TensorType,
        y: &TensorType,
    ) -> Result<ConvInt, String> {
        if x.rank() != 4 {
            return Err(format!("ConvInteger lowers 2-D convolutions, not {x}"));
        }
        Ok(ConvInt {
            batch: x.shape[0],
            h: x.shape[2],
            w: x.shape[3],
            maps: w.shape[0],
            group: c.group,
            cg: w.shape[1],
            mg: w.shape[0] / c.group,
            kh: c.kernel[0],
            kw: c.kernel[1],
            oh: y.shape[2],
            ow: y.shape[3],
            stride: [c.strides[0], c.strides[1]],
            dilation: [c.dilations[0], c.dilations[1]],
            pad: [c.pads[0], c.pads[1]],
        })
    }

    pub(crate) fn k(&self) -> usize {
        self.cg * self.kh * self.kw
    }

    pub(crate) fn gemm(&self) -> IntGemm {
        let p = self.oh * self.ow;
        IntGemm::new(self.mg, p, self.k(), p)
    }
}
