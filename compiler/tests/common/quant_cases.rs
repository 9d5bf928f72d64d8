//! Operands of the INT8 operators nnc's quantization passes create (`ConvU8S8`,
//! `QuantizeToPlanes`): values spanning the whole 8-bit ranges, so zero points,
//! widening and saturation see their extremes. Shared by the tests of their lowering
//! and of the kernel library.
//!
//! Include beside `graphs.rs`: `#[path = "common/quant_cases.rs"] mod quant_cases;`.

#![allow(dead_code)] // each test crate uses a different subset

use nnc::ir::{DType, Tensor};
use nnc::ops::{Activation, ConvAttrs, Op, PlaneLayout, Requantize};

use crate::graphs::In;

/// `n` values cycling through the whole range of `dtype` (8-bit), scrambled.
pub fn full_range(dtype: DType, shape: &[usize], seed: usize) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<i64> = (0..n)
        .map(|i| ((i * 97 + seed * 31 + 13) % 256) as i64)
        .map(|u| if dtype == DType::I8 { u - 128 } else { u })
        .collect();
    Tensor::from_vec(shape, v).cast(dtype)
}

pub fn ints(dtype: DType, shape: &[usize], v: Vec<i64>) -> Tensor {
    Tensor::from_vec(shape, v).cast(dtype)
}

pub fn floats(shape: &[usize], v: Vec<f32>) -> Tensor {
    Tensor::from_vec(shape, v)
}

/// nnc's INT8 conv attributes and the plane layout it reads from `[N, C, H, W]`.
pub fn conv_u8s8_attrs(
    x_shape: [usize; 4],
    kernel: usize,
    stride: usize,
    pad: usize,
    group: usize,
    activation: Activation,
) -> (ConvAttrs, PlaneLayout) {
    let conv = ConvAttrs {
        kernel: vec![kernel; 2],
        strides: vec![stride; 2],
        pads: vec![pad; 4],
        dilations: vec![1; 2],
        group,
        activation,
    };
    let planes = PlaneLayout::for_conv(&conv, &x_shape).expect("a plane layout");
    (conv, planes)
}

/// A `ConvU8S8` case over full-range planes and weights: maps, float32 output scale
/// and bias per map, and an optional residual.
#[allow(clippy::too_many_arguments)]
pub fn conv_u8s8_case(
    x_shape: [usize; 4],
    maps: usize,
    kernel: usize,
    stride: usize,
    pad: usize,
    depthwise: bool,
    activation: Activation,
    residual: bool,
    seed: usize,
) -> (Op, Vec<In>) {
    let group = if depthwise { x_shape[1] } else { 1 };
    let (conv, planes) = conv_u8s8_attrs(x_shape, kernel, stride, pad, group, activation);
    let w_channels = if depthwise { 1 } else { x_shape[1] };
    let op = Op::ConvU8S8 {
        conv: conv.clone(),
        planes: planes.clone(),
        requantize: None,
    };
    let out_h = (x_shape[2] + 2 * pad - kernel) / stride + 1;
    let out_w = (x_shape[3] + 2 * pad - kernel) / stride + 1;
    let out = [x_shape[0], maps, out_h, out_w];
    let bias: Vec<i64> = (0..maps as i64).map(|m| (m * 7919 - 20000) * 3).collect();
    let scale: Vec<f32> = (0..maps).map(|m| 1e-4 * (m as f32 + 1.5)).collect();
    let res: Vec<f32> = (0..out.iter().product::<usize>())
        .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.01)
        .collect();
    let ins = vec![
        In::Given(full_range(DType::U8, &planes.shape(x_shape[0]), seed)),
        In::GivenConst(full_range(
            DType::I8,
            &[maps, w_channels, kernel, kernel],
            seed + 1,
        )),
        In::GivenConst(ints(DType::I32, &[maps], bias)),
        if residual {
            In::Given(floats(&out, res))
        } else {
            In::Omitted
        },
        In::GivenConst(floats(&[maps], scale)),
        In::GivenConst(ints(DType::U8, &[], vec![(seed * 41 % 256) as i64])),
    ];
    (op, ins)
}

/// [`conv_u8s8_case`] requantizing into the planes of a next convolution (`kernel`,
/// `stride`, `pad`); for stride 1 both plane layouts get the same columns, as the
/// requantize pass gives them.
#[allow(clippy::too_many_arguments)]
pub fn conv_u8s8_requantize_case(
    x_shape: [usize; 4],
    maps: usize,
    kernel: usize,
    depthwise: bool,
    activation: Activation,
    residual: bool,
    seed: usize,
    next: (usize, usize, usize),
) -> (Op, Vec<In>) {
    conv_u8s8_requantize_strided_case(
        x_shape, maps, kernel, 1, depthwise, activation, residual, seed, next,
    )
}

/// [`conv_u8s8_requantize_case`] of a convolution with stride `stride` (pad
/// `kernel / 2`).
#[allow(clippy::too_many_arguments)]
pub fn conv_u8s8_requantize_strided_case(
    x_shape: [usize; 4],
    maps: usize,
    kernel: usize,
    stride: usize,
    depthwise: bool,
    activation: Activation,
    residual: bool,
    seed: usize,
    next: (usize, usize, usize),
) -> (Op, Vec<In>) {
    let (op, mut ins) = conv_u8s8_case(
        x_shape,
        maps,
        kernel,
        stride,
        kernel / 2,
        depthwise,
        activation,
        residual,
        seed,
    );
    let Op::ConvU8S8 { conv, planes, .. } = op else {
        unreachable!()
    };
    let out_h = (x_shape[2] + 2 * (kernel / 2) - kernel) / stride + 1;
    let out_w = (x_shape[3] + 2 * (kernel / 2) - kernel) / stride + 1;
    let (nk, ns, np) = next;
    let (_, mut next_planes) = conv_u8s8_attrs(
        [x_shape[0], maps, out_h, out_w],
        nk,
        ns,
        np,
        1,
        Activation::None,
    );
    let mut planes = planes;
    if ns == 1 {
        let cols = planes.cols.max(next_planes.cols);
        planes = planes.with_cols(cols);
        next_planes = next_planes.with_cols(cols);
    }
    ins[0] = In::Given(full_range(DType::U8, &planes.shape(x_shape[0]), seed));
    let op = Op::ConvU8S8 {
        conv,
        planes,
        requantize: Some(Requantize {
            layout: next_planes,
            inv_scale: 37.0,
            zero_point: 9,
        }),
    };
    (op, ins)
}

/// A `QuantizeToPlanes` case: values around the 8-bit range with ties, saturation and
/// a NaN.
pub fn quantize_planes_case(
    x_shape: [usize; 4],
    kernel: usize,
    stride: usize,
    pad: usize,
) -> (Op, Vec<In>) {
    let (_, planes) = conv_u8s8_attrs(x_shape, kernel, stride, pad, 1, Activation::None);
    let n: usize = x_shape.iter().product();
    let x: Vec<f32> = (0..n)
        .map(|i| match i % 23 {
            0 => f32::NAN,
            1 => 1e9,
            2 => -1e9,
            k => (i * 31 % 613) as f32 * 0.25 - 80.0 + k as f32 * 0.5,
        })
        .collect();
    let ins = vec![
        In::Given(floats(&x_shape, x)),
        In::GivenConst(floats(&[], vec![2.0])),
        In::GivenConst(ints(DType::U8, &[], vec![77])),
    ];
    (Op::QuantizeToPlanes(planes), ins)
}

/// `case` with its weights (input 1) halved into [−64, 64] (127 becomes 64): what the
/// quantizer gives a library with an AVX2 variant, whose `vpmaddubsw` kernel
/// (`u8s7-conv-4x16-avx2`) they select.
pub fn narrow_weights((op, mut ins): (Op, Vec<In>)) -> (Op, Vec<In>) {
    if let Some(In::GivenConst(w)) = ins.get(1) {
        let v: Vec<i64> = (w.to_i64_vec().into_iter())
            .map(|x| if x == 127 { 64 } else { x.div_euclid(2) })
            .collect();
        ins[1] = In::GivenConst(ints(DType::I8, w.shape(), v));
    }
    (op, ins)
}

/// A 1×1 `ConvU8S8` whose every pair sum is the largest `vpmaddubsw` adds exactly:
/// planes all 255, each map's weights all +64 or all −64 (255 · 64 · 2 = 32640).
pub fn conv_u8s8_pair_extremes_case() -> (Op, Vec<In>) {
    let (op, mut ins) = conv_u8s8_case(
        [1, 8, 3, 11],
        6,
        1,
        1,
        0,
        false,
        Activation::None,
        false,
        30,
    );
    if let (In::Given(planes), In::GivenConst(w)) = (&ins[0], &ins[1]) {
        let (p_shape, w_shape) = (planes.shape().to_vec(), w.shape().to_vec());
        let planes = ints(DType::U8, &p_shape, vec![255; p_shape.iter().product()]);
        let numel: usize = w_shape.iter().product();
        let per_map = numel / w_shape[0];
        let v: Vec<i64> = (0..numel)
            .map(|i| {
                if (i / per_map).is_multiple_of(2) {
                    64
                } else {
                    -64
                }
            })
            .collect();
        let w = ints(DType::I8, &w_shape, v);
        ins[0] = In::Given(planes);
        ins[1] = In::GivenConst(w);
    }
    (op, ins)
}
