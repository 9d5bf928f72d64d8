//! QDQ fusion: in a graph quantized the QDQ way (onnxruntime's `quantize_static` writes
//! `DequantizeLinear` in front of every input of a quantized Conv, Gemm or MatMul), the
//! float layer over dequantized operands becomes the integer layer over the quantized
//! ones, so pre-quantized models run on the integer kernels instead of silently in
//! float32:
//!
//! `Conv(DQ(x_q, s_x, z_x), DQ(w_q, s_w, z_w), DQ(b_q, s_x·s_w))` →
//! `float32(ConvInteger(x_q, w_q, z_x, z_w) + b_q) · (s_x · s_w)`
//!
//! (MatMul / Gemm: MatMulInteger with B as `[K, N]`; a 2-D conv of uint8 activations
//! and symmetric int8 weights, dense or depthwise: `PackPlanes → ConvU8S8`, nnc's fused
//! INT8 convolution, the same sums and rescale), writing the layer's original
//! output. Both sides compute the same sums of products; the fused one exactly in
//! integers. It runs first: constant folding would otherwise turn `DQ(w_q)` into float
//! weights and lose the integer form. Layers whose operands do not all have this shape
//! (per-tensor x, constant 8-bit weights per tensor or per output channel, an int32 or
//! float32 bias) are left as they are.

use crate::ir::{DType, Graph, Node, Tensor, TensorType, ValueId};
use crate::ops::{Activation, BinaryOp, Op, PlaneLayout};

use super::util::producers;
use crate::quant::int8::Rewriter;

/// A `DequantizeLinear` producer of `v`: (quantized input, scale values, zero point,
/// axis).
struct Dq {
    q: ValueId,
    scale: Vec<f32>,
    zero_point: Option<ValueId>,
    axis: usize,
}

fn dequantized(g: &Graph, nodes: &[Node], prod: &[Option<usize>], v: ValueId) -> Option<Dq> {
    let n = &nodes[prod[v.0]?];
    let Op::DequantizeLinear { axis } = n.op else {
        return None;
    };
    let scale = g.constant(n.inputs[1]?)?;
    if scale.dtype() != DType::F32 {
        return None;
    }
    let zero_point = n.inputs.get(2).copied().flatten();
    if zero_point.is_some_and(|z| g.constant(z).is_none()) {
        return None;
    }
    Some(Dq {
        q: n.inputs[0]?,
        scale: scale.to_f64_vec().iter().map(|&s| s as f32).collect(),
        zero_point,
        axis,
    })
}

pub fn run(g: &mut Graph) -> Result<(), String> {
    let prod = producers(g);
    let old = std::mem::take(&mut g.nodes);
    let mut nodes = Vec::with_capacity(old.len());
    for n in &old {
        match fuse(g, &old, &prod, n) {
            Some(replacement) => nodes.extend(replacement),
            None => nodes.push(n.clone()),
        }
    }
    g.nodes = nodes;
    Ok(())
}

/// The integer replacement of `n`, if it is a QDQ layer.
fn fuse(g: &mut Graph, old: &[Node], prod: &[Option<usize>], n: &Node) -> Option<Vec<Node>> {
    let (attrs_ok, is_conv) = match &n.op {
        Op::Conv(c) => (
            c.activation == Activation::None && g.ty(n.inputs[0]?).rank() == 4,
            true,
        ),
        Op::MatMul(m) => (
            m.activation == Activation::None && n.inputs.len() <= 2,
            false,
        ),
        Op::Gemm(gm) => (
            gm.activation == Activation::None && !gm.trans_a && gm.alpha == 1.0 && gm.beta == 1.0,
            false,
        ),
        _ => return None,
    };
    if !attrs_ok || n.inputs.get(3).copied().flatten().is_some() {
        return None;
    }
    let x = dequantized(g, old, prod, n.inputs[0]?)?;
    let w = dequantized(g, old, prod, n.inputs[1]?)?;
    let xq_ty = g.ty(x.q).clone();
    let w_const = g.constant(w.q)?.clone();
    if x.scale.len() != 1
        || !matches!(xq_ty.dtype, DType::U8 | DType::I8)
        || !matches!(w_const.dtype(), DType::U8 | DType::I8)
    {
        return None;
    }
    let w_shape = w_const.shape().to_vec();
    // Output channels and the weights as the integer op wants them.
    let trans_b = matches!(&n.op, Op::Gemm(gm) if gm.trans_b);
    let (maps, w_int, w_axis) = if is_conv {
        (w_shape[0], w_const.clone(), 0)
    } else if w_shape.len() != 2 {
        return None;
    } else if trans_b {
        // B is [N, K]: store it as [K, N] for MatMulInteger.
        let (nn, k) = (w_shape[0], w_shape[1]);
        let v = w_const.to_i64_vec();
        let t: Vec<i64> = (0..k * nn).map(|i| v[(i % nn) * k + i / nn]).collect();
        (nn, Tensor::from_vec(&[k, nn], t).cast(w_const.dtype()), 0)
    } else {
        (w_shape[1], w_const.clone(), 1)
    };
    // Per-tensor weights, or per output channel along the weights' channel axis.
    let per_channel = w.scale.len() == maps && maps > 1;
    if !(w.scale.len() == 1 || per_channel && w.axis == w_axis) {
        return None;
    }
    let s_w = |m: usize| w.scale[if per_channel { m } else { 0 }];
    let w_zp = match w.zero_point {
        None => None,
        Some(z) => {
            let zt = g.constant(z)?.clone();
            if zt.to_i64_vec().iter().all(|&v| v == 0) {
                None
            } else if zt.len() == 1 || zt.len() == maps {
                Some(zt)
            } else {
                return None;
            }
        }
    };
    let out = n.outputs[0];
    let out_ty = g.ty(out).clone();
    let mut channel_shape = vec![maps];
    if is_conv {
        channel_shape = vec![1; out_ty.rank()];
        channel_shape[1] = maps;
    }
    let scale: Vec<f32> = (0..maps).map(|m| x.scale[0] * s_w(m)).collect();
    // The bias: DQ of int32 with the product scale joins the accumulator; a float bias
    // is added after rescaling.
    let (int_bias, float_bias) = match n.inputs.get(2).copied().flatten() {
        None => (None, None),
        Some(b) => match dequantized(g, old, prod, b) {
            Some(bq)
                if g.constant(bq.q)
                    .is_some_and(|t| t.dtype() == DType::I32 && t.len() == maps)
                    && bq.zero_point.is_none_or(|z| {
                        g.constant(z)
                            .is_some_and(|t| t.to_i64_vec().iter().all(|&v| v == 0))
                    })
                    && (0..maps).all(|m| {
                        let s = bq.scale[if bq.scale.len() == 1 { 0 } else { m }];
                        (s - scale[m]).abs() <= 1e-6 * scale[m].abs()
                    }) =>
            {
                let t = g.constant(bq.q)?.to_i64_vec();
                (
                    Some(Tensor::from_vec(&channel_shape, t).cast(DType::I32)),
                    None,
                )
            }
            // A float bias on a conv needs the channel shape: only a constant one.
            _ if is_conv => {
                let t = g.constant(b)?.clone();
                if t.len() != maps {
                    return None;
                }
                let t = t.reshape(&channel_shape);
                let v = g.add_value(format!("{}/bias", n.name), t.ty(), Some(t));
                (None, Some(v))
            }
            _ => (None, Some(b)),
        },
    };
    if let Some(nodes) = fused_conv(
        g,
        n,
        &x,
        &w_int,
        w_zp.as_ref(),
        &int_bias,
        &float_bias,
        &scale,
    ) {
        return Some(nodes);
    }
    let mut r = Rewriter::new(g, n);
    let w_v = r.constant("w_quantized", w_int);
    let w_zp_v = w_zp.map(|t| {
        let t = if is_conv || t.len() == 1 {
            t
        } else {
            t.reshape(&[maps])
        };
        r.constant("w_zero_point", t)
    });
    let acc_ty = TensorType::new(DType::I32, out_ty.shape.clone());
    let int_op = match &n.op {
        Op::Conv(c) => Op::ConvInteger(c.clone()),
        _ => Op::MatMulInteger,
    };
    let ins = vec![Some(x.q), Some(w_v), x.zero_point, w_zp_v];
    let mut acc = r.emit(int_op, ins, acc_ty.clone(), None);
    if let Some(t) = int_bias {
        let b = r.constant("bias_quantized", t);
        acc = r.emit(
            Op::Binary(BinaryOp::Add),
            vec![Some(acc), Some(b)],
            acc_ty,
            None,
        );
    }
    let f_ty = TensorType::new(DType::F32, out_ty.shape.clone());
    let f = r.emit(
        Op::Cast { to: DType::F32 },
        vec![Some(acc)],
        f_ty.clone(),
        None,
    );
    let s = r.constant("output_scale", Tensor::from_vec(&channel_shape, scale));
    let target = float_bias.is_none().then_some(out);
    let y = r.emit(
        Op::Binary(BinaryOp::Mul),
        vec![Some(f), Some(s)],
        f_ty.clone(),
        target,
    );
    if let Some(b) = float_bias {
        r.emit(
            Op::Binary(BinaryOp::Add),
            vec![Some(y), Some(b)],
            f_ty,
            Some(out),
        );
    }
    Some(r.finish())
}

/// A QDQ conv nnc's fused INT8 convolution computes (uint8 activations, symmetric int8
/// weights, an int32 bias or none; 2-D, group 1 or depthwise) as `PackPlanes →
/// ConvU8S8`: the same integer sums and the same float32 rescale as the ConvInteger
/// chain, on the VNNI / dot-product kernels.
#[allow(clippy::too_many_arguments)]
fn fused_conv(
    g: &mut Graph,
    n: &Node,
    x: &Dq,
    w_int: &Tensor,
    w_zp: Option<&Tensor>,
    int_bias: &Option<Tensor>,
    float_bias: &Option<ValueId>,
    scale: &[f32],
) -> Option<Vec<Node>> {
    let Op::Conv(c) = &n.op else { return None };
    let x_ty = g.ty(x.q).clone();
    let maps = w_int.shape()[0];
    let channels = x_ty.shape[1];
    let depthwise = c.group > 1 && c.group == channels && c.group == maps;
    let zp_ok = x
        .zero_point
        .is_none_or(|z| g.constant(z).is_some_and(|t| t.len() == 1));
    if x_ty.dtype != DType::U8
        || w_int.dtype() != DType::I8
        || w_zp.is_some()
        || float_bias.is_some()
        || !(c.group == 1 || depthwise)
        || !zp_ok
    {
        return None;
    }
    let layout = PlaneLayout::for_conv(c, &x_ty.shape)?;
    let out = n.outputs[0];
    let mut r = Rewriter::new(g, n);
    let zp = match x.zero_point {
        Some(z) => z,
        None => r.constant(
            "x_zero_point",
            Tensor::from_vec(&[], vec![0i64]).cast(DType::U8),
        ),
    };
    let planes = r.emit(
        Op::PackPlanes(layout.clone()),
        vec![Some(x.q), Some(zp)],
        TensorType::new(DType::U8, layout.shape(x_ty.shape[0])),
        None,
    );
    let bias = match int_bias {
        Some(t) => t.reshape(&[maps]),
        None => Tensor::from_vec(&[maps], vec![0i64; maps]).cast(DType::I32),
    };
    r.conv_u8s8(
        c,
        layout,
        [planes, zp],
        w_int.clone(),
        bias,
        scale.to_vec(),
        None,
        out,
    );
    Some(r.finish())
}
