//! The kernel library against its reference: every micro-kernel of
//! `nnc::codegen::kernels::KERNELS`, over a sweep of shapes (partial register tiles
//! and panels, strides, padding, fused epilogues), on every `--cpu` preset and the
//! `--kernel` overrides that pick another kernel for the same node.
//!
//! Each case is a one-node graph. For every cpu and override, the test plans it
//! (`plan_kernels`), checks that every kernel the plan names is in the library and may
//! run on that cpu, compiles it, and where the host can execute that cpu runs it and
//! compares with the reference interpreter (float32 within the whole-tensor relative
//! tolerance of `graphs::tolerance`, the INT8 kernels exactly). Presets the host cannot
//! execute (aarch64 ones on an x86-64 host, AVX-512 ones on an AVX2 machine) are
//! compiled only.
//!
//! At the end every kernel of the library must have been run on at least one cpu, or,
//! when the host lacks its features, planned and compiled for one: a kernel added to
//! the library without a case that reaches it fails here. The coverage table
//! (`-- --nocapture`) lists, per kernel, the cpus it ran on and those it was only
//! compiled for.

#[path = "common/dynamic.rs"]
mod dynamic;
#[path = "common/graphs.rs"]
mod graphs;
#[path = "common/models.rs"]
mod models;
#[path = "common/quant_cases.rs"]
mod quant_cases;
#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use graphs::{compare, cst, f32s, one_node, tolerance, In, Scale};
use nnc::codegen::kernels::{self, KERNELS};
use nnc::codegen::plan::{plan_kernels, Strategy};
use nnc::codegen::{compile_graph, Arch, CompileOptions, KernelOptions, Target, CPU_PRESETS};
use nnc::ir::{DType, Graph, Tensor, TensorType};
use nnc::ops::infer::window_output;
use nnc::ops::{
    infer_types, Activation, ConvAttrs, ConvTransposeAttrs, GemmAttrs, Op, PoolAttrs, PoolKind,
};
use quant_cases::{
    conv_u8s8_case, conv_u8s8_pair_extremes_case, conv_u8s8_requantize_case,
    conv_u8s8_requantize_strided_case, full_range, ints, narrow_weights, quantize_planes_case,
};
use runner::Compiled;

/// One node under test, and the `--kernel` overrides to try on it besides nnc's own
/// choice.
struct Case {
    name: String,
    op: Op,
    ins: Vec<In>,
    /// Each a list of `KIND=CHOICE`; the default options always run first.
    overrides: &'static [&'static [&'static str]],
    /// Tolerance of the whole-tensor relative error; 0 compares exactly.
    tol: f64,
}

fn case(name: impl Into<String>, op: Op, ins: Vec<In>) -> Case {
    Case {
        name: name.into(),
        op,
        ins,
        overrides: &[],
        tol: tolerance(DType::F32),
    }
}

impl Case {
    fn overrides(self, overrides: &'static [&'static [&'static str]]) -> Case {
        Case { overrides, ..self }
    }

    fn exact(self) -> Case {
        Case { tol: 0.0, ..self }
    }
}

// ---- f32 GEMM -------------------------------------------------------------------------

const GEMM: &[&[&str]] = &[&["gemm=clif"]];
const GEMM_ORDERS: &[&[&str]] = &[
    &["gemm=clif"],
    &["gemm-order=blocks"],
    &["gemm-order=panels"],
    &["gemm-prefetch=off"],
];

fn gemm(trans_a: bool, trans_b: bool, alpha: f32, beta: f32, activation: Activation) -> Op {
    Op::Gemm(GemmAttrs {
        alpha,
        beta,
        trans_a,
        trans_b,
        activation,
    })
}

/// Row counts leave partial row tiles of every family (8·2 + 1, 6·2 + 5, 5·3 + 2),
/// column counts partial panels and vectors (48·2 + 1, 16·6 + 1, 8·12 + 1), K is odd.
fn gemm_cases() -> Vec<Case> {
    let f32 = DType::F32;
    let mut cases = vec![];
    for (a, b) in [
        (&[1usize, 1][..], &[1usize, 1][..]),
        (&[17, 33], &[33, 97]),
        (&[13, 37], &[37, 50]),
        (&[5], &[5, 7]),
        (&[2, 3, 7, 20], &[20, 29]),
        (&[2, 7, 20], &[2, 20, 29]),
        // Enough rows that a run-time B is packed into panels first: per batch matrix,
        // and once for rows folded over a shared B (tail panels of every family).
        (&[2, 70, 20], &[2, 20, 53]),
        (&[3, 40, 24], &[24, 61]),
    ] {
        cases.push(case(
            format!("MatMul {a:?} x {b:?}"),
            Op::matmul(),
            vec![f32s(a), f32s(b)],
        ));
        cases.push(case(
            format!("MatMul {a:?} x const {b:?} (packed B)"),
            Op::matmul(),
            vec![f32s(a), cst(f32, b)],
        ));
    }
    for c in &mut cases {
        c.overrides = GEMM;
    }
    let (m, k, n) = (11, 19, 53);
    cases.push(
        case(
            "Gemm transA transB, alpha 0.75, beta 1.5, C per column",
            gemm(true, true, 0.75, 1.5, Activation::None),
            vec![f32s(&[k, m]), cst(f32, &[n, k]), f32s(&[n])],
        )
        .overrides(GEMM),
    );
    cases.push(
        case(
            "Gemm runtime B, C [m, 1], fused Relu",
            gemm(false, false, 1.0, 1.0, Activation::Relu),
            vec![f32s(&[m, k]), f32s(&[k, n]), f32s(&[m, 1])],
        )
        .overrides(GEMM),
    );
    cases.push(
        case(
            "Gemm runtime B transposed (gathered), C [n]",
            gemm(false, true, 1.0, 0.5, Activation::None),
            vec![f32s(&[m, k]), f32s(&[n, k]), f32s(&[n])],
        )
        .overrides(GEMM),
    );
    cases.push(
        case(
            "Gemm const B, fused erf-GELU (the epilogue's polynomial)",
            gemm(false, true, 1.0, 1.0, Activation::Gelu { tanh: false }),
            vec![f32s(&[9, 40]), cst(f32, &[70, 40]), cst(f32, &[70])],
        )
        .overrides(GEMM),
    );
    for act in [Activation::Silu, Activation::Sigmoid, Activation::Tanh] {
        cases.push(
            case(
                format!("Gemm const B, fused {act:?} (the epilogue's exponential)"),
                gemm(false, true, 1.0, 1.0, act),
                vec![f32s(&[13, 24]), cst(f32, &[41, 24]), cst(f32, &[41])],
            )
            .overrides(GEMM),
        );
    }
    cases.push(
        case(
            "Gemm const B, fused HardSwish",
            gemm(false, true, 1.0, 1.0, Activation::HardSwish),
            vec![f32s(&[14, 24]), cst(f32, &[33, 24]), cst(f32, &[33])],
        )
        .overrides(GEMM),
    );
    // K split into blocks (alpha and C must apply once), a GEMV spreading K over
    // accumulator sets, and every loop order.
    for (m, k, n) in [(7, 1003, 13), (1, 517, 70), (30, 300, 100)] {
        cases.push(
            case(
                format!("Gemm {m}x{k}x{n} const B, bias"),
                gemm(false, true, 0.75, 1.5, Activation::None),
                vec![f32s(&[m, k]), cst(f32, &[n, k]), f32s(&[n])],
            )
            .overrides(GEMM_ORDERS),
        );
    }
    cases
}

// ---- Conv -----------------------------------------------------------------------------

fn conv_attrs(kernel: [usize; 2], stride: usize, pads: [usize; 4], group: usize) -> ConvAttrs {
    ConvAttrs {
        kernel: kernel.to_vec(),
        strides: vec![stride; 2],
        pads: pads.to_vec(),
        dilations: vec![1, 1],
        group,
        activation: Activation::None,
    }
}

/// A float32 conv: input `x`, weights `w` (constant or not), optional bias and
/// residual.
fn conv_case(
    name: &str,
    attrs: ConvAttrs,
    x: &[usize],
    w: &[usize],
    const_w: bool,
    bias: bool,
    residual: bool,
) -> Case {
    let f32 = DType::F32;
    let op = Op::Conv(attrs);
    let y = infer_types(
        &op,
        &[
            Some(TensorType::new(f32, x.to_vec())),
            Some(TensorType::new(f32, w.to_vec())),
        ],
    )
    .unwrap_or_else(|e| panic!("{name}: {e}"))
    .remove(0);
    let mut ins = vec![
        f32s(x),
        if const_w { cst(f32, w) } else { f32s(w) },
        if bias { cst(f32, &[w[0]]) } else { In::Omitted },
    ];
    if residual {
        ins.push(f32s(&y.shape));
    }
    case(name, op, ins)
}

/// The GEMM's other layouts, reached through Conv: packed A (constant weights),
/// the tap-table B of the implicit GEMM (stride 1 and stride-2 phase planes), im2col
/// panels, the transposed GEMM, and ConvTranspose's per-tap GEMMs.
fn conv_gemm_cases() -> Vec<Case> {
    const CONV_GEMM: &[&[&str]] = &[
        &["gemm=clif"],
        &["conv-rows=wide"],
        &["phase-planes=off"],
        &["narrow-conv=off"],
    ];
    let relu = Activation::Relu;
    let mut cases = vec![
        conv_case(
            "Conv 1x1 pointwise, packed A, 12 maps",
            conv_attrs([1, 1], 1, [0; 4], 1),
            &[2, 8, 5, 6],
            &[12, 8, 1, 1],
            true,
            true,
            false,
        ),
        conv_case(
            "Conv 3x3 implicit GEMM, runtime weights, output rows of 30",
            conv_attrs([3, 3], 1, [1; 4], 1),
            &[1, 8, 10, 30],
            &[12, 8, 3, 3],
            false,
            true,
            true,
        ),
        conv_case(
            "Conv 3x3 stride 2 over phase planes, odd input",
            ConvAttrs {
                activation: relu,
                ..conv_attrs([3, 3], 2, [1; 4], 1)
            },
            &[1, 8, 19, 51],
            &[10, 8, 3, 3],
            true,
            true,
            false,
        ),
        conv_case(
            "Conv 5x3 im2col, asymmetric pads",
            conv_attrs([5, 3], 1, [0, 1, 2, 0], 1),
            &[1, 2, 9, 8],
            &[3, 2, 5, 3],
            false,
            true,
            false,
        ),
        // A 1x1 on planes a multiple of 4 KB apart takes im2col panels, not the
        // pointwise GEMM reading them in place.
        conv_case(
            "Conv 1x1 on 32x32 planes (4 KB apart: im2col), residual",
            conv_attrs([1, 1], 1, [0; 4], 1),
            &[1, 8, 32, 32],
            &[12, 8, 1, 1],
            true,
            true,
            true,
        ),
        // The transposed GEMM takes 128+ maps on at most 64 positions; Xᵀ is packed
        // by K blocks (K past 1.5 blocks on every family) and row tiles (49 positions
        // end in a partial tile).
        conv_case(
            "Conv 3x3 on 7x7, 128 maps (transposed GEMM, im2col, K blocks)",
            conv_attrs([3, 3], 1, [1; 4], 1),
            &[1, 72, 7, 7],
            &[128, 72, 3, 3],
            true,
            true,
            false,
        ),
        conv_case(
            "Conv 1x1 on 7x7, 600 channels, 160 maps, residual (transposed GEMM)",
            conv_attrs([1, 1], 1, [0; 4], 1),
            &[1, 600, 7, 7],
            &[160, 600, 1, 1],
            true,
            true,
            true,
        ),
        conv_case(
            "Conv 1x1 on 6x6, batch 2, 130 maps (transposed GEMM, one task)",
            conv_attrs([1, 1], 1, [0; 4], 1),
            &[2, 200, 6, 6],
            &[130, 200, 1, 1],
            true,
            false,
            false,
        ),
    ];
    for c in &mut cases {
        c.overrides = CONV_GEMM;
    }
    cases.push(case(
        "ConvTranspose 3x3 stride 2 (per-tap GEMMs)",
        Op::ConvTranspose(ConvTransposeAttrs {
            kernel: vec![3, 3],
            strides: vec![2, 2],
            pads: vec![1; 4],
            dilations: vec![1, 1],
            group: 1,
            output_spatial: vec![7, 9],
        }),
        vec![
            f32s(&[1, 3, 4, 5]),
            cst(DType::F32, &[3, 4, 3, 3]),
            f32s(&[4]),
        ],
    ));
    cases
}

/// Depthwise convs: stride 1 and 2, padding, bias, residual, the activations the
/// machine-code epilogue fuses, widths ending inside a vector of 8 and of 16 (rows of
/// at most 8 outputs take the 8-lane code).
fn depthwise_cases() -> Vec<Case> {
    const DW: &[&[&str]] = &[&["dwconv=clif"]];
    let dw = |kernel, stride, pads, group, activation| ConvAttrs {
        activation,
        ..conv_attrs(kernel, stride, pads, group)
    };
    let clip = Activation::Clip { min: 0.0, max: 0.5 };
    let hard_sigmoid = Activation::HardSigmoid {
        alpha: 0.3,
        beta: 0.4,
    };
    let leaky = Activation::LeakyRelu { alpha: 0.1 };
    let cases = vec![
        conv_case(
            "depthwise 3x3 s1 p1, bias, Relu, width 37",
            dw([3, 3], 1, [1; 4], 4, Activation::Relu),
            &[1, 4, 11, 37],
            &[4, 1, 3, 3],
            true,
            true,
            false,
        ),
        conv_case(
            "depthwise 3x3 s2 p1, residual, Clip, batch 2, width 17",
            dw([3, 3], 2, [1; 4], 3, clip),
            &[2, 3, 14, 33],
            &[3, 1, 3, 3],
            true,
            false,
            true,
        ),
        conv_case(
            "depthwise 5x5 s2 p2, SiLU, width 40 (weights not resident on AVX-512)",
            dw([5, 5], 2, [2; 4], 3, Activation::Silu),
            &[1, 3, 11, 80],
            &[3, 1, 5, 5],
            true,
            true,
            false,
        ),
        conv_case(
            "depthwise 4x4 s1 p1, residual, Sigmoid, width 35 (16 resident weights)",
            dw([4, 4], 1, [1, 2, 2, 1], 2, Activation::Sigmoid),
            &[1, 2, 12, 35],
            &[2, 1, 4, 4],
            true,
            true,
            true,
        ),
        conv_case(
            "depthwise 5x5 s1 p2, HardSigmoid, width 20",
            dw([5, 5], 1, [2; 4], 3, hard_sigmoid),
            &[1, 3, 9, 20],
            &[3, 1, 5, 5],
            true,
            true,
            false,
        ),
        conv_case(
            "depthwise multiplier 2, asymmetric pads, LeakyRelu, residual",
            dw([3, 3], 1, [0, 1, 2, 1], 2, leaky),
            &[1, 2, 6, 20],
            &[4, 1, 3, 3],
            true,
            true,
            true,
        ),
        conv_case(
            "depthwise 3x3 s2 p1, width 7, HardSwish",
            dw([3, 3], 2, [1; 4], 3, Activation::HardSwish),
            &[1, 3, 13, 13],
            &[3, 1, 3, 3],
            true,
            true,
            false,
        ),
        conv_case(
            "depthwise 3x3 s1, runtime weights, no pad, width 130",
            dw([3, 3], 1, [0; 4], 2, Activation::None),
            &[1, 2, 5, 132],
            &[2, 1, 3, 3],
            false,
            false,
            false,
        ),
    ];
    cases.into_iter().map(|c| c.overrides(DW)).collect()
}

/// 3×3 stride-1 convs with constant weights under Winograd F(2×2) and F(4×4), forced,
/// with machine-code and Cranelift transforms: tile rows of more than 8 tiles (the
/// AVX-512 transforms), of 5 to 8 (AVX2), of at most 4 (Cranelift), and maps of at
/// most 8×8 (the whole-plane F(2×2) kernels).
fn winograd_cases() -> Vec<Case> {
    const WINOGRAD: &[&[&str]] = &[
        &["winograd=f2"],
        &["winograd=f4"],
        &["winograd=f2", "winograd-transform=clif"],
        &["winograd=f4", "winograd-transform=clif"],
    ];
    let act = |activation| ConvAttrs {
        activation,
        ..conv_attrs([3, 3], 1, [1; 4], 1)
    };
    let relu6 = Activation::Clip { min: 0.0, max: 6.0 };
    let cases = vec![
        conv_case(
            "3x3 on 18x40 (F4: 10 tiles a row, F2: 20), bias, Relu",
            act(Activation::Relu),
            &[1, 5, 18, 40],
            &[7, 5, 3, 3],
            true,
            true,
            false,
        ),
        conv_case(
            "3x3 on 17x20 (F4: 5 tiles a row, F2: 10), residual, Relu6",
            act(relu6),
            &[1, 4, 17, 20],
            &[6, 4, 3, 3],
            true,
            false,
            true,
        ),
        conv_case(
            "3x3 asymmetric pads, 12x13 out (F4: 4 tiles a row, F2: 7), batch 2",
            conv_attrs([3, 3], 1, [0, 1, 2, 0], 1),
            &[2, 3, 12, 14],
            &[5, 3, 3, 3],
            true,
            true,
            false,
        ),
        conv_case(
            "3x3 on an 8x8 map, bias, Relu (whole-plane F2)",
            act(Activation::Relu),
            &[1, 8, 8, 8],
            &[12, 8, 3, 3],
            true,
            true,
            false,
        ),
        conv_case(
            "3x3 on 8x8 maps, residual, batch 2 (whole-plane F2)",
            act(Activation::None),
            &[2, 6, 8, 8],
            &[10, 6, 3, 3],
            true,
            true,
            true,
        ),
        conv_case(
            "3x3 on a 6x6 map, SiLU (whole-plane F2: the three-register epilogue)",
            act(Activation::Silu),
            &[1, 5, 6, 6],
            &[7, 5, 3, 3],
            true,
            true,
            false,
        ),
        conv_case(
            "3x3 on 17x20, Tanh (no machine-code output transform: two free registers)",
            act(Activation::Tanh),
            &[1, 4, 17, 20],
            &[6, 4, 3, 3],
            true,
            true,
            false,
        ),
        conv_case(
            "3x3 on a 7x7 map, partial tiles (whole-plane F2)",
            act(Activation::LeakyRelu { alpha: 0.2 }),
            &[1, 4, 7, 7],
            &[9, 4, 3, 3],
            true,
            true,
            false,
        ),
    ];
    cases.into_iter().map(|c| c.overrides(WINOGRAD)).collect()
}

// ---- MaxPool, Softmax -----------------------------------------------------------------

/// A max pool over `x` with the output size ONNX gives.
fn max_pool(
    x: &[usize],
    kernel: [usize; 2],
    strides: [usize; 2],
    pads: [usize; 4],
    ceil: bool,
) -> Op {
    let output_spatial = (0..2)
        .map(|a| {
            let o = window_output(
                x[2 + a],
                kernel[a],
                strides[a],
                pads[a] + pads[2 + a],
                1,
                ceil,
            )
            .expect("valid window");
            // ONNX drops a last ceil_mode window that would start inside the end padding.
            if ceil && (o - 1) * strides[a] >= x[2 + a] + pads[a] {
                o - 1
            } else {
                o
            }
        })
        .collect();
    Op::Pool(PoolAttrs {
        kind: PoolKind::Max,
        kernel: kernel.to_vec(),
        strides: strides.to_vec(),
        pads: pads.to_vec(),
        dilations: vec![1, 1],
        output_spatial,
        ceil_mode: false,
    })
}

/// Separable 2-D max pools: output rows wider than 8 (the 16-lane kernel) and not,
/// row strides 1 and 2, padding on every side, ceil mode.
fn pool_cases() -> Vec<Case> {
    const POOL: &[&[&str]] = &[&["pool=clif"]];
    /// Input, kernel, strides, pads, ceil mode.
    type Window = (&'static [usize], [usize; 2], [usize; 2], [usize; 4], bool);
    let shapes: [Window; 6] = [
        (&[1, 3, 17, 40], [3, 3], [2, 2], [1; 4], false),
        (&[1, 2, 9, 14], [2, 2], [2, 2], [0; 4], false),
        (&[2, 2, 7, 33], [3, 3], [1, 1], [1; 4], false),
        (&[1, 3, 10, 19], [3, 2], [1, 2], [1, 0, 0, 1], true),
        (&[1, 1, 6, 70], [5, 5], [1, 1], [2; 4], false),
        (&[1, 4, 12, 12], [3, 3], [2, 2], [0, 0, 1, 1], true),
    ];
    shapes
        .into_iter()
        .map(|(x, k, s, p, ceil)| {
            case(
                format!("MaxPool {x:?} k={k:?} s={s:?} p={p:?} ceil={ceil}"),
                max_pool(x, k, s, p, ceil),
                vec![f32s(x)],
            )
            .overrides(POOL)
        })
        .collect()
}

/// Softmax over the innermost axis: rows shorter than a vector, ending inside one,
/// long, and of large magnitude (the max subtracted first).
fn softmax_cases() -> Vec<Case> {
    const SOFTMAX: &[&[&str]] = &[&["softmax=clif"]];
    let shapes: [(&[usize], f64); 6] = [
        (&[3, 7], 1.0),
        (&[2, 5, 33], 4.0),
        (&[4, 1000], 1.0),
        (&[1, 16], 1.0),
        (&[6, 1], 1.0),
        (&[2, 3, 17], 60.0),
    ];
    shapes
        .into_iter()
        .map(|(x, scale)| {
            case(
                format!("Softmax {x:?} values x{scale}"),
                Op::Softmax {
                    axis: x.len() - 1,
                    log: false,
                },
                vec![In::Scaled(TensorType::new(DType::F32, x.to_vec()), scale)],
            )
            .overrides(SOFTMAX)
        })
        .collect()
}

// ---- INT8 -----------------------------------------------------------------------------

/// nnc's INT8 convolution and quantization into planes (exact), on the VNNI machine
/// code in both loop orders and on Cranelift's dot-product tiles.
fn int8_conv_cases() -> Vec<Case> {
    const INT8: &[&[&str]] = &[
        &["int8-conv=clif"],
        &["int8-order=tiles"],
        &["int8-order=panels"],
    ];
    const QUANTIZE: &[&[&str]] = &[&["int8-conv=clif"]];
    let relu = Activation::Relu;
    let clip = Activation::Clip {
        min: -0.5,
        max: 2.0,
    };
    let none = Activation::None;
    // With the requantization's inv_scale 37 and zero point 9, -0.3 quantizes to 0 and
    // 7 to 255: the kernels skip the clamp, the interpreter applies it.
    let subsumed_clip = Activation::Clip {
        min: -0.3,
        max: 7.0,
    };
    let convs = [
        (
            "ConvU8S8 3x3 s1 p1, 10 channels, 11 maps, residual, Relu",
            conv_u8s8_case([1, 10, 5, 19], 11, 3, 1, 1, false, relu, true, 20),
        ),
        (
            "ConvU8S8 1x1 compact, 8 channels, 9 maps, Clip, batch 2",
            conv_u8s8_case([2, 8, 3, 20], 9, 1, 1, 0, false, clip, false, 21),
        ),
        (
            "ConvU8S8 7x7 s2 p3 on 3 channels",
            conv_u8s8_case([1, 3, 13, 13], 8, 7, 2, 3, false, none, false, 22),
        ),
        (
            "ConvU8S8 3x3 s1 p1, 16 channels, 20 maps over 6x50 (several panels)",
            conv_u8s8_case([1, 16, 6, 50], 20, 3, 1, 1, false, relu, false, 23),
        ),
        (
            "ConvU8S8 depthwise 3x3 s2 p1, 12 maps",
            conv_u8s8_case([1, 12, 9, 10], 12, 3, 2, 1, true, relu, false, 24),
        ),
        (
            "ConvU8S8 3x3 requantized for a 3x3 pad 1, residual, Relu",
            conv_u8s8_requantize_case([1, 5, 7, 19], 6, 3, false, relu, true, 25, (3, 1, 1)),
        ),
        (
            "ConvU8S8 1x1 requantized for a 3x3 stride 2 (scattered), batch 2",
            conv_u8s8_requantize_case([2, 8, 9, 10], 11, 1, false, clip, false, 26, (3, 2, 1)),
        ),
        (
            "ConvU8S8 depthwise 3x3 s1 p1, 7 maps, residual",
            conv_u8s8_case([1, 7, 6, 11], 7, 3, 1, 1, true, none, true, 27),
        ),
        (
            "ConvU8S8 depthwise requantized for a 3x3 stride 2, 10 maps, residual, Relu",
            conv_u8s8_requantize_case([1, 10, 8, 13], 10, 3, true, relu, true, 28, (3, 2, 1)),
        ),
        (
            "ConvU8S8 3x3 requantized for a 1x1, 3 maps over 5x26 (partial quad), Clip",
            conv_u8s8_requantize_case([1, 6, 5, 26], 3, 3, false, clip, false, 29, (1, 1, 0)),
        ),
        // Depthwise into stride-1 planes: the 256-bit depthwise kernel on AVX2 targets.
        (
            "ConvU8S8 depthwise 3x3 s1 p1 requantized for a 1x1, 12 maps over 7x19 (row tails), Relu",
            conv_u8s8_requantize_case([1, 12, 7, 19], 12, 3, true, relu, false, 30, (1, 1, 0)),
        ),
        (
            "ConvU8S8 depthwise 3x3 s2 p1 requantized for a 3x3 pad 1, 8 maps, batch 2, Clip the requantization subsumes",
            conv_u8s8_requantize_strided_case(
                [2, 8, 9, 21],
                8,
                3,
                2,
                true,
                subsumed_clip,
                false,
                31,
                (3, 1, 1),
            ),
        ),
        (
            "ConvU8S8 depthwise 5x5 s1 p2 requantized for a 3x3 pad 1, 16 maps over 4x16 (whole chunks)",
            conv_u8s8_requantize_case([1, 16, 4, 16], 16, 5, true, none, false, 32, (3, 1, 1)),
        ),
        (
            "ConvU8S8 3x3 requantized for a 1x1, 8 maps, residual, Clip the requantization subsumes",
            conv_u8s8_requantize_case([1, 6, 5, 26], 8, 3, false, subsumed_clip, true, 33, (1, 1, 0)),
        ),
        // Weights within ±64: AVX2's vpmaddubsw kernel.
        (
            "ConvU8S8 weights within ±64, 3x3 s1 p1, 10 channels, 11 maps, residual, Relu",
            narrow_weights(conv_u8s8_case(
                [1, 10, 5, 19],
                11,
                3,
                1,
                1,
                false,
                relu,
                true,
                40,
            )),
        ),
        (
            "ConvU8S8 weights within ±64, 3x3 s1 p1, 16 channels, 20 maps over 6x50",
            narrow_weights(conv_u8s8_case(
                [1, 16, 6, 50],
                20,
                3,
                1,
                1,
                false,
                relu,
                false,
                41,
            )),
        ),
        (
            "ConvU8S8 weights within ±64, depthwise 3x3 s1 p1, 7 maps, residual",
            narrow_weights(conv_u8s8_case(
                [1, 7, 6, 11],
                7,
                3,
                1,
                1,
                true,
                none,
                true,
                42,
            )),
        ),
        (
            "ConvU8S8 weights within ±64, 1x1 requantized for a 3x3 stride 2, batch 2",
            narrow_weights(conv_u8s8_requantize_case(
                [2, 8, 9, 10],
                11,
                1,
                false,
                clip,
                false,
                43,
                (3, 2, 1),
            )),
        ),
        (
            "ConvU8S8 weights within ±64, depthwise 3x3 s1 p1 requantized for a 1x1, 8 maps",
            narrow_weights(conv_u8s8_requantize_case(
                [1, 8, 6, 10],
                8,
                3,
                true,
                relu,
                false,
                44,
                (1, 1, 0),
            )),
        ),
        (
            "ConvU8S8 1x1 pair sums at their largest (planes 255, weights ±64)",
            conv_u8s8_pair_extremes_case(),
        ),
    ];
    let quantize = [
        (
            "QuantizeToPlanes stride 1 pad 1, 6 channels, batch 2",
            quantize_planes_case([2, 6, 5, 19], 3, 1, 1),
        ),
        (
            "QuantizeToPlanes stride 2 pad 3, odd rows and columns",
            quantize_planes_case([1, 3, 7, 21], 7, 2, 3),
        ),
        (
            "QuantizeToPlanes stride 2 pad 1 (even), 4 channels",
            quantize_planes_case([1, 4, 6, 34], 3, 2, 1),
        ),
    ];
    let convs = convs
        .into_iter()
        .map(|(name, (op, ins))| case(name, op, ins).overrides(INT8).exact());
    let quantize = quantize
        .into_iter()
        .map(|(name, (op, ins))| case(name, op, ins).overrides(QUANTIZE).exact());
    convs.chain(quantize).collect()
}

/// MatMulInteger on 8-bit dot products (uint8 × constant int8, B's zero point 0) and
/// on the exact int16 GEMM (int8 × int8 at run time, ConvInteger).
fn int_gemm_cases() -> Vec<Case> {
    use DType::{I8, U8};
    let given = |t: Tensor| In::Given(t);
    let fixed = |t: Tensor| In::GivenConst(t);
    vec![
        case(
            "MatMulInteger u8 x const i8 (dot), K = 19, a_zp 173",
            Op::MatMulInteger,
            vec![
                given(full_range(U8, &[6, 19], 30)),
                fixed(full_range(I8, &[19, 13], 31)),
                fixed(ints(U8, &[], vec![173])),
                fixed(ints(I8, &[], vec![0])),
            ],
        ),
        case(
            "MatMulInteger u8 x const i8 (dot), batched A, K = 16, N = 9",
            Op::MatMulInteger,
            vec![
                given(full_range(U8, &[2, 3, 5, 16], 32)),
                fixed(full_range(I8, &[16, 9], 33)),
                In::Omitted,
                In::Omitted,
            ],
        ),
        case(
            "MatMulInteger u8 x const i8 (dot), K = 64, N = 37",
            Op::MatMulInteger,
            vec![
                given(full_range(U8, &[9, 64], 34)),
                fixed(full_range(I8, &[64, 37], 35)),
                given(ints(U8, &[], vec![255])),
                In::Omitted,
            ],
        ),
        case(
            "MatMulInteger i8 x runtime i8 (int16), zero points",
            Op::MatMulInteger,
            vec![
                given(full_range(I8, &[7, 21], 36)),
                given(full_range(I8, &[21, 10], 37)),
                given(ints(I8, &[], vec![-128])),
                given(ints(I8, &[], vec![127])),
            ],
        ),
        case(
            "MatMulInteger i8 x runtime i8 (int16), batched, no zero points",
            Op::MatMulInteger,
            vec![
                given(full_range(I8, &[2, 5, 33], 38)),
                given(full_range(I8, &[2, 33, 6], 39)),
                In::Omitted,
                In::Omitted,
            ],
        ),
        case(
            "ConvInteger u8 x const i8 3x3 stride 2 (int16)",
            Op::ConvInteger(conv_attrs([3, 3], 2, [1; 4], 1)),
            vec![
                given(full_range(U8, &[1, 3, 9, 11], 40)),
                fixed(full_range(I8, &[8, 3, 3, 3], 41)),
                fixed(ints(U8, &[], vec![128])),
                In::Omitted,
            ],
        ),
    ]
    .into_iter()
    .map(Case::exact)
    .collect()
}

// ---- sweeps ---------------------------------------------------------------------------

/// Every edge of the register tiles: rows around 5, 6 and 8, columns around 8, 16 and
/// 48 (a vector, a panel), depth 1 and odd; B constant (packed) for every other shape.
fn gemm_sweep() -> Vec<Case> {
    let mut cases = vec![];
    for m in [1, 5, 7, 9, 17] {
        for n in [1, 7, 8, 15, 16, 17, 47, 48, 49, 97] {
            for k in [1, 33] {
                let b = match cases.len() % 2 {
                    0 => f32s(&[k, n]),
                    _ => cst(DType::F32, &[k, n]),
                };
                let name = format!("MatMul sweep {m}x{k}x{n}");
                cases.push(case(name, Op::matmul(), vec![f32s(&[m, k]), b]).overrides(GEMM));
            }
        }
    }
    cases
}

/// Depthwise output rows of every width up to 18 and past two vectors, stride 1 and 2.
fn depthwise_sweep() -> Vec<Case> {
    let mut cases = vec![];
    for stride in [1, 2] {
        for out_w in (1..=18).chain([31, 33]) {
            let in_w = stride * (out_w - 1) + 1;
            cases.push(
                conv_case(
                    &format!("depthwise sweep 3x3 s{stride}, output width {out_w}"),
                    conv_attrs([3, 3], stride, [1; 4], 3),
                    &[1, 3, 5, in_w],
                    &[3, 1, 3, 3],
                    true,
                    true,
                    false,
                )
                .overrides(&[&["dwconv=clif"]]),
            );
        }
    }
    cases
}

/// Winograd tile rows across the thresholds of the transform families (4, 8 tiles).
fn winograd_sweep() -> Vec<Case> {
    [8, 9, 16, 17, 24, 32, 33]
        .into_iter()
        .map(|w| {
            conv_case(
                &format!("Winograd sweep 3x3 on 6x{w}"),
                conv_attrs([3, 3], 1, [1; 4], 1),
                &[1, 3, 6, w],
                &[4, 3, 3, 3],
                true,
                true,
                false,
            )
            .overrides(&[&["winograd=f2"], &["winograd=f4"]])
        })
        .collect()
}

/// Max-pool output rows of every width up to 18 and past two vectors, row strides 1
/// and 2.
fn pool_sweep() -> Vec<Case> {
    let mut cases = vec![];
    for stride in [1, 2] {
        for out_w in (1..=18).chain([33]) {
            let x = [1, 2, 5, stride * (out_w - 1) + 3];
            cases.push(
                case(
                    format!("MaxPool sweep 3x3 s{stride}, output width {out_w}"),
                    max_pool(&x, [3, 3], [stride, stride], [0; 4], false),
                    vec![f32s(&x)],
                )
                .overrides(&[&["pool=clif"]]),
            );
        }
    }
    cases
}

/// Softmax rows of every length up to 17 and around 32 and 64.
fn softmax_sweep() -> Vec<Case> {
    (1..=17)
        .chain([31, 32, 33, 64, 65])
        .map(|n| {
            case(
                format!("Softmax sweep, rows of {n}"),
                Op::Softmax {
                    axis: 1,
                    log: false,
                },
                vec![f32s(&[3, n])],
            )
            .overrides(&[&["softmax=clif"]])
        })
        .collect()
}

/// INT8 convolutions with map counts around the 4- and 8-map tiles and output rows
/// around the 8- and 16-pixel vectors and the 24- and 48-pixel panels.
fn int8_conv_sweep() -> Vec<Case> {
    let mut cases = vec![];
    for (i, maps) in [1, 4, 5, 7, 8, 9, 17].into_iter().enumerate() {
        for (j, w) in [3, 8, 9, 16, 17, 23, 25, 47, 49].into_iter().enumerate() {
            let seed = 100 + 9 * i + j;
            let (op, ins) = conv_u8s8_case(
                [1, 5, 2, w],
                maps,
                1,
                1,
                0,
                false,
                Activation::None,
                false,
                seed,
            );
            cases.push(
                case(
                    format!("ConvU8S8 sweep 1x1, {maps} maps, width {w}"),
                    op.clone(),
                    ins.clone(),
                )
                .overrides(&[&["int8-conv=clif"]])
                .exact(),
            );
            // The vpmaddubsw kernel's 16-pixel panels.
            let (op, ins) = narrow_weights((op, ins));
            cases.push(
                case(
                    format!("ConvU8S8 sweep 1x1 weights within ±64, {maps} maps, width {w}"),
                    op,
                    ins,
                )
                .overrides(&[&["int8-conv=clif"]])
                .exact(),
            );
        }
    }
    cases
}

/// MatMulInteger over small M, N and K: the dot-product GEMM (uint8 × constant int8)
/// and the int16 one (int8 × int8 at run time).
fn int_gemm_sweep() -> Vec<Case> {
    use DType::{I8, U8};
    let mut cases = vec![];
    // Rows around the 4-row tile, columns around the 8-column vector and the 24-column
    // panel of the x86 kernels.
    for m in [1, 5, 9] {
        for n in [1, 9, 17, 24, 25, 49] {
            for k in [0, 1, 5, 16, 17] {
                let seed = cases.len();
                cases.push(
                    case(
                        format!("MatMulInteger sweep u8 x const i8, {m}x{k}x{n}"),
                        Op::MatMulInteger,
                        vec![
                            In::Given(full_range(U8, &[m, k], seed)),
                            In::GivenConst(full_range(I8, &[k, n], seed + 1)),
                        ],
                    )
                    .exact(),
                );
                cases.push(
                    case(
                        format!("MatMulInteger sweep i8 x i8, {m}x{k}x{n}"),
                        Op::MatMulInteger,
                        vec![
                            In::Given(full_range(I8, &[m, k], seed + 2)),
                            In::Given(full_range(I8, &[k, n], seed + 3)),
                        ],
                    )
                    .exact(),
                );
            }
        }
    }
    cases
}

fn all_cases() -> Vec<Case> {
    let mut cases = gemm_cases();
    cases.extend(conv_gemm_cases());
    cases.extend(depthwise_cases());
    cases.extend(winograd_cases());
    cases.extend(pool_cases());
    cases.extend(softmax_cases());
    cases.extend(int8_conv_cases());
    cases.extend(int_gemm_cases());
    cases.extend(gemm_sweep());
    cases.extend(depthwise_sweep());
    cases.extend(winograd_sweep());
    cases.extend(pool_sweep());
    cases.extend(softmax_sweep());
    cases.extend(int8_conv_sweep());
    cases.extend(int_gemm_sweep());
    cases
}

// ---- planes whose size only the run knows ----------------------------------------------

/// A model over images of a run-time `size` (`--dim size=MIN..MAX`), whose nodes run on
/// planes, and the sizes it runs at (rows ending at every part of a vector).
struct PlanesCase {
    name: &'static str,
    model: Vec<u8>,
    range: (usize, usize),
    sizes: &'static [usize],
}

/// An image `[1, c, s, s]` with both spatial axes `size`.
fn image(m: &mut models::ModelBuilder, c: usize, s: usize) -> String {
    let x = m.input("image", &[1, c, s, s]);
    dynamic::symbolic(m, &x, 2, "size");
    dynamic::symbolic(m, &x, 3, "size");
    x
}

fn conv_node(
    m: &mut models::ModelBuilder,
    x: &str,
    (c, maps, k, stride, group): (usize, usize, usize, i64, usize),
) -> String {
    use models::Attr;
    let w = m.weight(&[maps, c / group, k, k], 0.4);
    let b = m.weight(&[maps], 0.1);
    let attrs = vec![
        ("pads", Attr::Ints(vec![(k as i64 - 1) / 2; 4])),
        ("strides", Attr::Ints(vec![stride; 2])),
        ("group", Attr::I(group as i64)),
    ];
    m.node("Conv", &[x, &w, &b], attrs)
}

fn planes_cases() -> Vec<PlanesCase> {
    use models::{Attr, ModelBuilder};
    // Depthwise 3×3 of stride 1 and 5×5 of stride 2: the row kernel, copying its plane.
    let mut m = ModelBuilder::new(60);
    let x = image(&mut m, 8, 40);
    let y = conv_node(&mut m, &x, (8, 8, 3, 1, 8));
    let y = m.node("Relu", &[&y], vec![]);
    let y = conv_node(&mut m, &y, (8, 8, 5, 2, 8));
    m.output(&y);
    let depthwise = m.encode();
    // A strided conv and a max pool: padded copies by phase, patches by row runs.
    let mut m = ModelBuilder::new(61);
    let x = image(&mut m, 3, 40);
    let y = conv_node(&mut m, &x, (3, 16, 3, 2, 1));
    let pool = vec![
        ("kernel_shape", Attr::Ints(vec![3, 3])),
        ("strides", Attr::Ints(vec![2, 2])),
        ("pads", Attr::Ints(vec![1; 4])),
    ];
    let y = m.node("MaxPool", &[&y], pool);
    m.output(&y);
    let strided = m.encode();
    // A 3×3 conv of stride 1: Winograd, transformed a tile row at a time.
    let mut m = ModelBuilder::new(62);
    let x = image(&mut m, 16, 40);
    let y = conv_node(&mut m, &x, (16, 32, 3, 1, 1));
    m.output(&y);
    let winograd = m.encode();
    vec![
        PlanesCase {
            name: "planes depthwise",
            model: depthwise,
            range: (5, 80),
            sizes: &[5, 9, 17, 33, 80],
        },
        PlanesCase {
            name: "planes strided conv and max pool",
            model: strided,
            range: (5, 80),
            sizes: &[5, 12, 31, 66, 80],
        },
        PlanesCase {
            name: "planes winograd",
            model: winograd,
            range: (6, 70),
            sizes: &[6, 13, 35, 70],
        },
    ]
}

/// A planes case on every cpu: planned (every kernel in the library and runnable
/// there), compiled, and where the host executes the cpu run at every size against the
/// interpreter on the model imported at that size.
fn run_planes_case(c: &PlanesCase, cpus: &[Cpu]) -> Outcome {
    let mut out = Outcome::default();
    let model = dynamic::decode(&c.model);
    let g = dynamic::import(&model, &dynamic::with_range("size", c.range.0, c.range.1))
        .expect("the case imports with its range");
    for cpu in cpus {
        let label = format!("{} --cpu {}", c.name, cpu.target.cpu);
        let plan = plan_kernels(&g, &cpu.target, &KernelOptions::default());
        let names: BTreeSet<String> = (plan.nodes.iter())
            .filter(|k| matches!(k.strategy, Strategy::Planes(_)))
            .flat_map(|k| k.kernels())
            .collect();
        let mut library = vec![];
        for name in &names {
            match kernels::find(name) {
                Some(k) if k.runs_on(&cpu.target) => library.push(k.name),
                _ => out
                    .failures
                    .push(format!("{label}: plans {name}, not in KERNELS for it")),
            }
        }
        if let Err(e) = compile_graph(&g, &CompileOptions::new(cpu.target.clone())) {
            out.failures.push(format!("{label}: compile: {e}"));
            continue;
        }
        out.compilations += 1;
        if cpu.runs {
            out.runs += 1;
            let lib =
                dynamic::Dynamic::for_target(g.clone(), cpu.target.clone(), Default::default());
            let sizes: Vec<(usize, u64)> = c.sizes.iter().map(|&s| (s, s as u64)).collect();
            dynamic::check_sizes(&lib, &model, &sizes, &label);
        }
        let cpu_name = cpu.target.cpu.clone();
        out.kernels
            .extend(library.into_iter().map(|k| (k, cpu_name.clone(), cpu.runs)));
    }
    out
}

// ---- the run --------------------------------------------------------------------------

/// A `--cpu` value, and whether this machine executes its code.
struct Cpu {
    target: Target,
    runs: bool,
}

/// Every preset of `CPU_PRESETS`, then `native`.
fn cpus() -> Vec<Cpu> {
    let host = Target::host();
    let mut targets: Vec<Target> = CPU_PRESETS
        .iter()
        .map(|p| Target::new(p.arch, Some(p.name)).expect("every preset resolves"))
        .collect();
    targets.push(host.clone());
    targets
        .into_iter()
        .map(|target| Cpu {
            runs: target.arch == host.arch && host.features.contains_all(target.features),
            target,
        })
        .collect()
}

/// What one case did: kernels run or compiled per cpu, and failures.
#[derive(Default)]
struct Outcome {
    /// (kernel, cpu, ran).
    kernels: Vec<(&'static str, String, bool)>,
    compilations: usize,
    runs: usize,
    failures: Vec<String>,
}

fn run_case(c: &Case, seed: u64, cpus: &[Cpu]) -> Outcome {
    let mut out = Outcome::default();
    let (g, inputs) = one_node(c.op.clone(), c.ins.clone(), seed);
    let expected = match nnc::interp::run_graph(&g, &inputs) {
        Ok(e) => e,
        Err(e) => {
            out.failures.push(format!("{}: interpreter: {e}", c.name));
            return out;
        }
    };
    let variants = std::iter::once(&[][..]).chain(c.overrides.iter().copied());
    let variants: Vec<&[&str]> = variants.collect();
    for cpu in cpus {
        // Overrides that plan what another variant planned compile the same code.
        let mut planned: Vec<(Strategy, usize)> = vec![];
        // The kernels each variant named and the object it compiled to.
        let mut objects: Vec<(Vec<String>, Vec<u8>)> = vec![];
        for specs in &variants {
            let label = match specs.is_empty() {
                true => format!("{} --cpu {}", c.name, cpu.target.cpu),
                false => format!(
                    "{} --cpu {} --kernel {}",
                    c.name,
                    cpu.target.cpu,
                    specs.join(" --kernel ")
                ),
            };
            let kernel_options =
                KernelOptions::parse(specs.iter().copied()).expect("valid --kernel options");
            let plan = plan_kernels(&g, &cpu.target, &kernel_options);
            let node = &plan.nodes[0];
            let key = (node.strategy.clone(), node.scratch_bytes);
            if planned.contains(&key) {
                continue;
            }
            planned.push(key);
            let names = node.kernels();
            if names.is_empty() {
                out.failures
                    .push(format!("{label}: plans no library kernel ({node})"));
                continue;
            }
            let mut library = vec![];
            for name in &names {
                match kernels::find(name) {
                    Some(k) if k.runs_on(&cpu.target) => library.push(k.name),
                    Some(_) => out
                        .failures
                        .push(format!("{label}: plans {name}, which cannot run on it")),
                    None => out
                        .failures
                        .push(format!("{label}: plans {name}, which is not in KERNELS")),
                }
            }
            let options = CompileOptions {
                kernels: kernel_options,
                ..CompileOptions::new(cpu.target.clone())
            };
            let object = match compile_graph(&g, &options) {
                Ok(compiled) => compiled.object,
                Err(e) => {
                    out.failures.push(format!("{label}: compile: {e}"));
                    continue;
                }
            };
            out.compilations += 1;
            // A plan naming other kernels than another variant's must compile other
            // code: the same object means the node runs something the plan does not
            // name.
            if let Some((other, _)) = objects.iter().find(|(n, o)| *n != names && *o == object) {
                out.failures.push(format!(
                    "{label}: plans [{}] but compiles the same object as a plan of [{}]",
                    names.join(", "),
                    other.join(", ")
                ));
            }
            objects.push((names.clone(), object));
            let result = if cpu.runs {
                out.runs += 1;
                run_and_compare(&g, &inputs, &expected, &options, c.tol)
            } else {
                Ok(())
            };
            match result {
                Ok(()) => {
                    let cpu_name = cpu.target.cpu.clone();
                    out.kernels
                        .extend(library.into_iter().map(|k| (k, cpu_name.clone(), cpu.runs)));
                }
                Err(e) => out
                    .failures
                    .push(format!("{label} [{}]: {e}", names.join(", "))),
            }
        }
    }
    out
}

fn run_and_compare(
    g: &Graph,
    inputs: &[Tensor],
    expected: &[Tensor],
    options: &CompileOptions,
    tol: f64,
) -> Result<(), String> {
    let actual = Compiled::with_options(g, options)?.run(g, inputs)?;
    compare(&actual[0], &expected[0], tol, Scale::Whole)
}

/// Per kernel, the cpus it ran on and those it was compiled for without running.
#[derive(Default)]
struct Coverage {
    run: BTreeSet<String>,
    compiled: BTreeSet<String>,
}

#[test]
fn every_kernel_matches_its_reference_on_every_cpu() {
    let start = Instant::now();
    let cases = all_cases();
    let cpus = cpus();
    let next = AtomicUsize::new(0);
    let outcomes = Mutex::new(vec![]);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(c) = cases.get(i) else { break };
                let outcome = run_case(c, i as u64, &cpus);
                outcomes.lock().unwrap().push(outcome);
            });
        }
    });
    let mut outcomes = outcomes.into_inner().unwrap();
    outcomes.extend(planes_cases().iter().map(|c| run_planes_case(c, &cpus)));

    let mut coverage: BTreeMap<&str, Coverage> = BTreeMap::new();
    let mut failures = vec![];
    let (mut compilations, mut runs) = (0, 0);
    for o in outcomes {
        for (kernel, cpu, ran) in o.kernels {
            let entry = coverage.entry(kernel).or_default();
            if ran {
                entry.run.insert(cpu);
            } else {
                entry.compiled.insert(cpu);
            }
        }
        compilations += o.compilations;
        runs += o.runs;
        failures.extend(o.failures);
    }

    let host = Target::host();
    let mut table = format!("{:<42} {:<54} compiled only\n", "kernel", "cpus run");
    for k in KERNELS {
        let c = coverage.get(k.name);
        let list = |set: Option<&BTreeSet<String>>| {
            let names: Vec<&str> = set.into_iter().flatten().map(String::as_str).collect();
            match names.is_empty() {
                true => "-".to_string(),
                false => names.join(" "),
            }
        };
        let run = list(c.map(|c| &c.run));
        let compiled_only = list(c.map(|c| &c.compiled));
        table += &format!("{:<42} {run:<54} {compiled_only}\n", k.name);
        let ran = c.is_some_and(|c| !c.run.is_empty());
        let compiled = c.is_some_and(|c| !c.compiled.is_empty());
        if k.runs_on(&host) && !ran {
            failures.push(format!(
                "{}: the host has its features but no case ran it",
                k.name
            ));
        } else if !ran && !compiled {
            failures.push(format!("{}: no case planned and compiled it", k.name));
        }
    }
    println!("{table}");
    println!(
        "{} cases, {compilations} compilations ({runs} run) on {} cpus in {:.1} s",
        cases.len(),
        cpus.len(),
        start.elapsed().as_secs_f64()
    );
    for f in &failures {
        eprintln!("FAIL {f}");
    }
    assert!(failures.is_empty(), "{} failures", failures.len());
}

/// The library's table and the presets agree with the test's premises: every kernel
/// runs on some preset, so the coverage above can be reached on a capable host.
#[test]
fn every_kernel_runs_on_some_preset() {
    let cpus = cpus();
    for k in KERNELS {
        assert!(
            cpus.iter().any(|c| k.runs_on(&c.target)),
            "{} runs on no --cpu preset",
            k.name
        );
    }
    assert!(
        cpus.iter().any(|c| c.target.arch == Arch::Aarch64),
        "aarch64 presets are compiled for"
    );
}

/// The kernels the plan names for a node are the ones its code calls (what `nnc
/// inspect --kernels` reports): depthwise rows of at most 8 outputs run the 8-lane
/// kernel on AVX-512 targets too, and a Gemm whose B is transposed at run time is
/// gathered by the portable kernel on every target.
#[test]
fn the_plan_names_the_kernels_the_code_calls() {
    let v4 = Target::new(Arch::X86_64, Some("x86-64-v4")).expect("x86-64-v4");
    let kernels_of = |c: &Case, target: &Target, specs: &[&str]| {
        let (g, _) = one_node(c.op.clone(), c.ins.clone(), 0);
        let options = KernelOptions::parse(specs.iter().copied()).expect("valid options");
        let names = plan_kernels(&g, target, &options).nodes[0].kernels();
        let object = compile_graph(
            &g,
            &CompileOptions {
                kernels: options,
                ..CompileOptions::new(target.clone())
            },
        )
        .expect("compiles")
        .object;
        (names, object)
    };
    for (width, kernel) in [
        (7, "f32-dwconv-avx2-fma"),
        (8, "f32-dwconv-avx2-fma"),
        (9, "f32-dwconv-avx512f"),
    ] {
        let c = conv_case(
            "depthwise",
            conv_attrs([3, 3], 1, [1; 4], 3),
            &[1, 3, 6, width],
            &[3, 1, 3, 3],
            true,
            true,
            false,
        );
        assert_eq!(kernels_of(&c, &v4, &[]).0, [kernel], "output width {width}");
    }
    let f32 = DType::F32;
    let transposed = |b: In| {
        case(
            "Gemm transB",
            gemm(false, true, 1.0, 1.0, Activation::None),
            vec![f32s(&[9, 40]), b, f32s(&[70])],
        )
    };
    let runtime = transposed(f32s(&[70, 40]));
    for cpu in ["x86-64-v3", "x86-64-v4"] {
        let target = Target::new(Arch::X86_64, Some(cpu)).expect("x86-64 preset");
        let (names, object) = kernels_of(&runtime, &target, &[]);
        assert_eq!(names, ["f32-gemm-5x8-clif"], "{cpu}");
        assert!(
            object == kernels_of(&runtime, &target, &["gemm=clif"]).1,
            "{cpu}"
        );
    }
    let constant = transposed(cst(f32, &[70, 40]));
    assert_eq!(kernels_of(&constant, &v4, &[]).0, ["f32-gemm-8x48-avx512f"]);
    // K = 1: B's rows are contiguous, read in place by the machine code.
    let k1 = case(
        "Gemm transB, K = 1",
        gemm(false, true, 1.0, 1.0, Activation::None),
        vec![f32s(&[9, 1]), f32s(&[70, 1]), f32s(&[70])],
    );
    assert_eq!(kernels_of(&k1, &v4, &[]).0, ["f32-gemm-8x48-avx512f"]);
}
