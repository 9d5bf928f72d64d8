//! The depthwise conv's padded plane, its machine-code kernel's choice and spec, and
//! its split by channels.

use super::{align_up, ConvGeometry, F32};
use crate::codegen::isa::Isa;
use crate::codegen::isa::Vector;
use crate::codegen::kernels::gemm::LANES;
use crate::codegen::kernels::x86;
use crate::codegen::kernels::x86::dwconv::{DwLayout, DwSpec};
use crate::codegen::options::{KernelOptions, KernelSource};
use crate::codegen::tasks::Split;
use crate::ops::Activation;

/// A 1-D or 2-D depthwise conv seen as 2-D (1-D gets a unit height).
pub(crate) struct Plane2d {
    pub(crate) in_h: usize,
    pub(crate) in_w: usize,
    pub(crate) out_h: usize,
    pub(crate) out_w: usize,
    pub(crate) k: [usize; 2],
    pub(crate) stride: [usize; 2],
    pub(crate) dil: [usize; 2],
    pub(crate) pad: [usize; 2],
}

impl Plane2d {
    pub(crate) fn new(g: &ConvGeometry) -> Plane2d {
        let two = |v: &[usize], unit: usize| {
            if v.len() == 1 {
                [unit, v[0]]
            } else {
                [v[0], v[1]]
            }
        };
        let (input, output) = (two(&g.input, 1), two(&g.output, 1));
        Plane2d {
            in_h: input[0],
            in_w: input[1],
            out_h: output[0],
            out_w: output[1],
            k: two(&g.kernel, 1),
            stride: two(&g.strides, 1),
            dil: two(&g.dilations, 1),
            pad: two(&g.pad_begin, 0),
        }
    }
}

/// The zero-padded input plane of the depthwise path: tall enough for every window and
/// wide enough that the last, partial output vector reads only inside it.
pub(crate) struct PlaneLayout {
    pub(crate) height: usize,
    pub(crate) width: usize,
}

impl PlaneLayout {
    pub(crate) fn new(g: &ConvGeometry) -> PlaneLayout {
        let p = Plane2d::new(g);
        let reach = |out: usize, axis: usize| {
            (out - 1) * p.stride[axis] + (p.k[axis] - 1) * p.dil[axis] + 1
        };
        let out_w_vectors = p.out_w.div_ceil(LANES) * LANES;
        // Stride 2 loads two whole vectors per window and keeps the even lanes: one
        // float past the last window's last input.
        let deinterleave_slack = usize::from(p.stride[1] == 2);
        PlaneLayout {
            height: reach(p.out_h, 0).max(p.in_h + p.pad[0]),
            width: (reach(out_w_vectors, 1) + deinterleave_slack).max(p.in_w + p.pad[1]),
        }
    }

    pub(crate) fn bytes(&self) -> usize {
        align_up(self.height * self.width * F32)
    }
}

/// The machine-code kernel's description of `g` (without the epilogue).
pub(crate) fn dw_spec(g: &ConvGeometry) -> DwSpec {
    let p = Plane2d::new(g);
    DwSpec {
        channels: g.channels,
        mg: g.mg,
        in_h: p.in_h,
        in_w: p.in_w,
        out_h: p.out_h,
        out_w: p.out_w,
        k: p.k,
        stride: p.stride,
        dil: p.dil,
        pad: p.pad,
        bias: false,
        residual: false,
        activation: Activation::None,
    }
}

/// Scratch bytes of the depthwise path: enough for the Cranelift path's plane and, when
/// it applies, the machine-code kernel's (whose layout is sized for AVX-512's lanes, so
/// neither depends on the CPU).
pub(crate) fn scratch_bytes(g: &ConvGeometry) -> usize {
    let clif = PlaneLayout::new(g).bytes();
    let spec = dw_spec(g);
    if x86::dwconv::supports(&spec) {
        clif.max(align_up(DwLayout::new(&spec).bytes(&spec)))
    } else {
        clif
    }
}

/// The machine-code kernel's spec for this conv: activations without a machine-code
/// form leave the residual and the activation to the epilogue pass.
pub(crate) fn x86_spec(
    g: &ConvGeometry,
    bias: bool,
    residual: bool,
    activation: Activation,
) -> DwSpec {
    let fused = x86::dwconv::fuses(activation);
    DwSpec {
        bias,
        residual: fused && residual,
        activation: if fused { activation } else { Activation::None },
        ..dw_spec(g)
    }
}

/// The machine-code family that computes this conv on `target`, if any (narrow rows
/// take the 8-lane kernel on AVX-512 targets too); `--kernel dwconv=clif` keeps the
/// Cranelift path, for comparisons.
pub(crate) fn x86_kernel(
    g: &ConvGeometry,
    bias: bool,
    residual: bool,
    activation: Activation,
    isa: &Isa,
    options: &KernelOptions,
) -> Option<Vector> {
    let isa = isa.vector?;
    let spec = x86_spec(g, bias, residual, activation);
    (options.dwconv == KernelSource::Auto && x86::dwconv::supports(&spec))
        .then(|| x86::dwconv::family(&spec, isa))
}

/// One call of the machine-code kernel per image: `(X_n, W, Y_n, scratch, bias, R_n)`,
/// null for an absent bias or residual.
/// With a thread pool, the machine-code path splits a single image's channels into
/// tasks, each on its worker's scratch plane.
pub(crate) fn channel_split(g: &ConvGeometry) -> Split {
    if g.batch != 1 {
        return Split::of(1, 0);
    }
    let taps: usize = g.kernel.iter().product();
    // A depthwise multiply-add costs several of a GEMM's (each input is read for only
    // `taps` of them), which is what the work units of `Split` are.
    const GEMM_MACS_PER_TAP: usize = 4;
    Split::of(
        g.channels,
        g.channels * g.mg * g.out_size() * taps * GEMM_MACS_PER_TAP,
    )
}
