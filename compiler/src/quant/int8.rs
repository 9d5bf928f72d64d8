//! Static INT8 quantization of a float32 graph (after the graph passes, so BatchNorm is
//! already folded into the weights and activations into their producers).
//!
//! Every Conv (2-D), Gemm and MatMul with constant float32 weights becomes:
//! `QuantizeLinear(x) → ConvInteger / MatMulInteger → + int32 bias → float32 ·
//! (s_x · s_w) → + residual → activation`, writing the node's original output, so the
//! rest of the graph is untouched and ops without an integer kernel keep running in
//! float32 between the quantized layers.
//!
//! * Weights: per output channel, symmetric int8 in [−127, 127] (`s_w = max|w| / 127`),
//!   or `[−weight_max, weight_max]` where the target's kernels need a narrower range.
//! * Activations: per tensor, asymmetric uint8 from the calibrated range, widened to
//!   hold 0 (`s_x = (hi − lo) / 255`, zero point `round(−lo / s_x)`).
//! * Bias: int32, `round(b / (s_x · s_w))`.
//!
//! The integer products are exact; the result is rescaled in float32 (a fixed-point
//! multiplier and shift, and integer-to-integer requantization between consecutive
//! quantized layers, come with the fused integer kernels).

use std::collections::HashMap;

use super::bias_correction;
use crate::ir::{DType, Graph, Node, Tensor, TensorType, ValueId};
use crate::ops::{Activation, BinaryOp, ConvAttrs, Op, PlaneLayout};

/// A quantized layer: the node's name and the float32 input it now quantizes.
#[derive(Clone, Debug)]
pub struct Layer {
    pub node: String,
    pub op: String,
    pub input: ValueId,
    /// The axis of `input` whose index each weight row's elements run over by
    /// channel: 1 for a conv's NCHW input, the last axis for a GEMM's.
    pub channel_axis: usize,
    pub output: ValueId,
}

/// What calibration measured about a layer's float32 input.
#[derive(Clone, Debug)]
pub struct InputStats {
    /// The range quantized to uint8, `lo ≤ 0 ≤ hi`.
    pub range: (f32, f32),
    /// Each channel's mean (along the layer's channel axis), for bias correction;
    /// `None` leaves the bias uncorrected.
    pub means: Option<Vec<f64>>,
}

/// The nodes this pass would quantize (their names, ops and activation inputs), minus
/// those named in `keep_fp32`.
pub fn candidates(graph: &Graph, keep_fp32: &[String]) -> Vec<Layer> {
    graph
        .nodes
        .iter()
        .filter(|n| !keep_fp32.contains(&n.name))
        .filter(|n| weights_of(graph, n).is_some())
        .map(|n| Layer {
            node: n.name.clone(),
            op: n.onnx_op.clone(),
            input: n.inputs[0].expect("checked by weights_of"),
            channel_axis: match n.op {
                Op::Conv(_) => 1,
                _ => graph
                    .ty(n.inputs[0].expect("checked"))
                    .rank()
                    .saturating_sub(1),
            },
            output: n.outputs[0],
        })
        .collect()
}

/// The integer op `--quantize int8` computes the candidate layer `n` with.
pub fn integer_op_of(graph: &Graph, n: &Node) -> &'static str {
    match &n.op {
        Op::Conv(_) if conv_u8s8_layout(graph, n).is_some() => "ConvU8S8",
        Op::Conv(_) => "ConvInteger",
        _ => "MatMulInteger",
    }
}

/// The layer's float32 weights as `[out channels][k]` rows (Conv: `[M][C·kh·kw]`;
/// Gemm/MatMul: B's columns), if the node is one this pass handles.
fn weights_of(graph: &Graph, n: &Node) -> Option<Vec<Vec<f32>>> {
    let x = graph.ty(n.inputs.first().copied().flatten()?);
    let w_id = n.inputs.get(1).copied().flatten()?;
    let Some(Tensor::F32(w)) = graph.constant(w_id) else {
        return None;
    };
    if x.dtype != DType::F32 {
        return None;
    }
    let w: Vec<f32> = w.iter().copied().collect();
    let shape = graph.ty(w_id).shape.clone();
    match &n.op {
        Op::Conv(_) if x.rank() == 4 => {
            let k = w.len() / shape[0];
            Some(w.chunks(k).map(<[f32]>::to_vec).collect())
        }
        Op::Gemm(g) if !g.trans_a && shape.len() == 2 => {
            let (k, nn) = if g.trans_b {
                (shape[1], shape[0])
            } else {
                (shape[0], shape[1])
            };
            Some(
                (0..nn)
                    .map(|j| {
                        (0..k)
                            .map(|i| {
                                if g.trans_b {
                                    w[j * k + i]
                                } else {
                                    w[i * nn + j]
                                }
                            })
                            .collect()
                    })
                    .collect(),
            )
        }
        Op::MatMul(_) if shape.len() == 2 && x.rank() >= 2 => {
            let (k, nn) = (shape[0], shape[1]);
            Some(
                (0..nn)
                    .map(|j| (0..k).map(|i| w[i * nn + j]).collect())
                    .collect(),
            )
        }
        _ => None,
    }
}

/// uint8 scale and zero point of the range `(lo, hi)` (widened to hold 0).
pub fn activation_params(lo: f32, hi: f32) -> (f32, u8) {
    let (lo, hi) = (lo.min(0.0), hi.max(0.0));
    let scale = (hi - lo) / 255.0;
    if !(scale > 0.0 && scale.is_finite()) {
        return (1.0, 0);
    }
    let zp = (-lo / scale).round_ties_even().clamp(0.0, 255.0) as u8;
    (scale, zp)
}

/// Per-row symmetric int8 of `rows` in `[−weight_max, weight_max]`: the scales and the
/// quantized rows.
pub fn weight_params(rows: &[Vec<f32>], weight_max: i8) -> (Vec<f32>, Vec<Vec<i8>>) {
    let top = f32::from(weight_max.max(1));
    rows.iter()
        .map(|r| {
            let max = r.iter().fold(0f32, |m, v| m.max(v.abs()));
            let s = if max > 0.0 && max.is_finite() {
                max / top
            } else {
                1.0
            };
            let q = r
                .iter()
                .map(|v| (v / s).round_ties_even().clamp(-top, top) as i8)
                .collect();
            (s, q)
        })
        .unzip()
}

/// Builds the replacement nodes of one layer (also used by the QDQ fusion pass):
/// values and nodes are named after the layer, and keep its ONNX op for diagnostics.
pub(crate) struct Rewriter<'g> {
    pub graph: &'g mut Graph,
    nodes: Vec<Node>,
    name: String,
    onnx_op: String,
}

impl<'g> Rewriter<'g> {
    pub fn new(graph: &'g mut Graph, layer: &Node) -> Rewriter<'g> {
        Rewriter {
            graph,
            nodes: vec![],
            name: layer.name.clone(),
            onnx_op: layer.onnx_op.clone(),
        }
    }

    /// The replacement nodes, in order.
    pub fn finish(self) -> Vec<Node> {
        self.nodes
    }

    pub fn constant(&mut self, what: &str, t: Tensor) -> ValueId {
        let name = format!("{}/{what}", self.name);
        self.graph.add_value(name, t.ty(), Some(t))
    }

    /// Appends `ConvU8S8` over `[planes, zero point]` writing `out`, with its constants:
    /// int8 weights, int32 bias and float32 output scale (one per map).
    #[allow(clippy::too_many_arguments)]
    pub fn conv_u8s8(
        &mut self,
        conv: &ConvAttrs,
        layout: PlaneLayout,
        [planes, zero_point]: [ValueId; 2],
        weights: Tensor,
        bias: Tensor,
        scale: Vec<f32>,
        residual: Option<ValueId>,
        out: ValueId,
    ) {
        let maps = scale.len();
        let w = self.constant("w_quantized", weights);
        let b = self.constant("bias_quantized", bias);
        let s = self.constant("output_scale", Tensor::from_vec(&[maps], scale));
        let ty = self.graph.ty(out).clone();
        self.emit(
            Op::ConvU8S8 {
                conv: conv.clone(),
                planes: layout,
                requantize: None,
            },
            vec![
                Some(planes),
                Some(w),
                Some(b),
                residual,
                Some(s),
                Some(zero_point),
            ],
            ty,
            Some(out),
        );
    }

    /// Appends `op(inputs)` writing `out` (a new value of type `ty` when None).
    pub fn emit(
        &mut self,
        op: Op,
        inputs: Vec<Option<ValueId>>,
        ty: TensorType,
        out: Option<ValueId>,
    ) -> ValueId {
        let out = out.unwrap_or_else(|| {
            let name = format!("{}/{}", self.name, op.name());
            self.graph.add_value(name, ty, None)
        });
        self.nodes.push(Node {
            name: format!("{}/{}", self.name, op.name()),
            onnx_op: self.onnx_op.clone(),
            op,
            inputs,
            outputs: vec![out],
        });
        out
    }
}

/// Quantizes every layer of `layers` whose input has statistics in `stats`. Returns the
/// layers quantized.
pub fn quantize(
    graph: &mut Graph,
    layers: &[Layer],
    stats: &HashMap<ValueId, InputStats>,
    weight_max: i8,
) -> Result<Vec<Layer>, String> {
    let old = std::mem::take(&mut graph.nodes);
    let mut done = vec![];
    let mut nodes = Vec::with_capacity(old.len());
    let mut planes = PlanesCache::new();
    for n in old {
        let layer = layers
            .iter()
            .find(|l| l.node == n.name && l.output == n.outputs[0]);
        let (Some(layer), Some(rows)) = (layer, weights_of(graph, &n)) else {
            nodes.push(n);
            continue;
        };
        let Some(input) = stats.get(&layer.input) else {
            nodes.push(n);
            continue;
        };
        let (lo, hi) = input.range;
        let (s_w, w_q) = weight_params(&rows, weight_max);
        let shift = input
            .means
            .as_ref()
            .map(|means| weight_rounding_shift(&n, &rows, &s_w, &w_q, means));
        let q = QuantizedWeights {
            scales: s_w,
            rows: w_q,
            bias_shift: shift.unwrap_or_else(|| vec![0.0; rows.len()]),
        };
        let mut r = Rewriter::new(graph, &n);
        let fused = match conv_u8s8_layout(r.graph, &n) {
            Some(layout) => rewrite_conv_u8s8(&mut r, &n, layout, &q, lo, hi, &mut planes),
            None => rewrite(&mut r, &n, &q, lo, hi),
        };
        fused.map_err(|e| format!("node '{}' ({}): {e}", n.name, n.onnx_op))?;
        nodes.extend(r.finish());
        done.push(layer.clone());
    }
    graph.nodes = nodes;
    Ok(done)
}

/// A layer's int8 weights: per-map scales, the rows, and the expected output shift
/// their rounding causes (in float32 output units), which the int32 bias takes out.
struct QuantizedWeights {
    scales: Vec<f32>,
    rows: Vec<Vec<i8>>,
    bias_shift: Vec<f64>,
}

/// [`bias_correction::expected_shift`] for layer `n`, whose weight rows read the input
/// channels `means` describes: a conv row is `[C/group][kh·kw]` of its group's channels,
/// a GEMM row (one of B's columns) runs over K.
fn weight_rounding_shift(
    n: &Node,
    rows: &[Vec<f32>],
    scales: &[f32],
    quantized: &[Vec<i8>],
    means: &[f64],
) -> Vec<f64> {
    let (maps, k) = (rows.len(), rows.first().map_or(0, Vec::len));
    let (groups, taps) = match &n.op {
        Op::Conv(c) => {
            let c_per_group = means.len() / c.group.max(1);
            (c.group.max(1), k / c_per_group.max(1))
        }
        _ => (1, 1),
    };
    let maps_per_group = (maps / groups).max(1);
    let c_per_group = k / taps.max(1);
    if means.len() != groups * c_per_group {
        return vec![0.0; maps];
    }
    bias_correction::expected_shift(rows, scales, quantized, |m, i| {
        means[(m / maps_per_group) * c_per_group + i / taps]
    })
}

/// Quantized planes already made, by float32 input, layout and quantization: convs
/// reading the same input the same way (ResNet's downsampling branch and its main
/// branch do not: their pads differ) share them.
type PlanesCache = HashMap<(ValueId, String, u32, u8), ValueId>;

/// The plane layout of a Conv the fused INT8 convolution computes: 2-D, group 1 or
/// depthwise, dilation 1, a bias with one value per map (or none).
fn conv_u8s8_layout(graph: &Graph, n: &Node) -> Option<PlaneLayout> {
    let Op::Conv(c) = &n.op else { return None };
    let x = graph.ty(n.inputs[0]?);
    let maps = graph.ty(n.inputs[1]?).shape[0];
    let bias_ok = match n.inputs.get(2).copied().flatten() {
        None => true,
        Some(b) => graph.constant(b).is_some_and(|t| t.len() == maps),
    };
    let depthwise = c.group > 1 && c.group == x.shape.get(1).copied()? && c.group == maps;
    ((c.group == 1 || depthwise) && bias_ok && c.activation != Activation::Silu)
        .then(|| PlaneLayout::for_conv(c, &x.shape))
        .flatten()
}

/// A Conv as `QuantizeToPlanes → ConvU8S8`: the quantization, the integer products,
/// the int32 bias, the rescale, the residual and the activation in two nodes (see
/// [`Op::ConvU8S8`]), computing what [`rewrite`]'s chain computes except that x is
/// multiplied by the scale's reciprocal rather than divided by the scale.
fn rewrite_conv_u8s8(
    r: &mut Rewriter,
    n: &Node,
    layout: PlaneLayout,
    q: &QuantizedWeights,
    lo: f32,
    hi: f32,
    planes_cache: &mut PlanesCache,
) -> Result<(), String> {
    let Op::Conv(c) = &n.op else {
        return Err("not a Conv".into());
    };
    let x = n.inputs[0].ok_or("no input")?;
    let (s_x, zp_x) = activation_params(lo, hi);
    let (s_w, w_q) = (&q.scales, &q.rows);
    let maps = w_q.len();
    let inv = 1.0 / s_x;
    let zp_v = r.constant(
        "x_zero_point",
        Tensor::from_vec(&[], vec![zp_x as i64]).cast(DType::U8),
    );
    let key = (x, format!("{layout:?}"), inv.to_bits(), zp_x);
    let planes = match planes_cache.get(&key) {
        Some(&p) => p,
        None => {
            let inv_v = r.constant("x_inverse_scale", Tensor::from_vec(&[], vec![inv]));
            let batch = r.graph.ty(x).shape[0];
            let p = r.emit(
                Op::QuantizeToPlanes(layout.clone()),
                vec![Some(x), Some(inv_v), Some(zp_v)],
                TensorType::new(DType::U8, layout.shape(batch)),
                None,
            );
            planes_cache.insert(key, p);
            p
        }
    };
    let w_shape = r.graph.ty(n.inputs[1].ok_or("no weights")?).shape.clone();
    let flat: Vec<i64> = w_q.iter().flatten().map(|&v| v as i64).collect();
    let wq = Tensor::from_vec(&w_shape, flat).cast(DType::I8);
    let bias_f = n
        .inputs
        .get(2)
        .copied()
        .flatten()
        .and_then(|b| r.graph.constant(b))
        .map(Tensor::to_f64_vec);
    let bias: Vec<i64> = (0..maps)
        .map(|m| {
            let b = bias_f.as_ref().map_or(0.0, |v| v[m]) - q.bias_shift[m];
            (b / (s_x as f64 * s_w[m] as f64)).round() as i64
        })
        .collect();
    r.conv_u8s8(
        c,
        layout,
        [planes, zp_v],
        wq,
        Tensor::from_vec(&[maps], bias).cast(DType::I32),
        s_w.iter().map(|s| s_x * s).collect(),
        n.inputs.get(3).copied().flatten(),
        n.outputs[0],
    );
    Ok(())
}

fn rewrite(
    r: &mut Rewriter,
    n: &Node,
    q: &QuantizedWeights,
    lo: f32,
    hi: f32,
) -> Result<(), String> {
    let x = n.inputs[0].ok_or("no input")?;
    let x_ty = r.graph.ty(x).clone();
    let out = n.outputs[0];
    let out_ty = r.graph.ty(out).clone();
    let (s_x, zp_x) = activation_params(lo, hi);
    let (s_w, w_q) = (&q.scales, &q.rows);
    let maps = w_q.len();
    let k = w_q.first().map_or(0, Vec::len);
    let s_x_v = r.constant("x_scale", Tensor::from_vec(&[], vec![s_x]));
    let zp_v = r.constant(
        "x_zero_point",
        Tensor::from_vec(&[], vec![zp_x as i64]).cast(DType::U8),
    );
    let xq = r.emit(
        Op::QuantizeLinear {
            axis: 0,
            to: DType::U8,
        },
        vec![Some(x), Some(s_x_v), Some(zp_v)],
        TensorType::new(DType::U8, x_ty.shape.clone()),
        None,
    );
    let acc_ty = TensorType::new(DType::I32, out_ty.shape.clone());
    // Per-channel values broadcast along the output's channel axis: axis 1 of a conv's
    // NCHW output, the last axis of a GEMM's.
    let channel_shape = match &n.op {
        Op::Conv(_) => {
            let mut s = vec![1; out_ty.rank()];
            s[1] = maps;
            s
        }
        _ => vec![maps],
    };
    let flat: Vec<i64> = w_q.iter().flatten().map(|&v| v as i64).collect();
    let (acc, bias, alpha, beta) = match &n.op {
        Op::Conv(c) => {
            let w_shape = r.graph.ty(n.inputs[1].ok_or("no weights")?).shape.clone();
            let wq = r.constant(
                "w_quantized",
                Tensor::from_vec(&w_shape, flat).cast(DType::I8),
            );
            let attrs = ConvAttrs {
                activation: Activation::None,
                ..c.clone()
            };
            let acc = r.emit(
                Op::ConvInteger(attrs),
                vec![Some(xq), Some(wq), Some(zp_v), None],
                acc_ty.clone(),
                None,
            );
            (acc, n.inputs.get(2).copied().flatten(), 1.0, 1.0)
        }
        Op::Gemm(_) | Op::MatMul(_) => {
            // Rows are B's columns: store B as [K, N].
            let mut kn = vec![0i64; k * maps];
            for (j, row) in w_q.iter().enumerate() {
                for (i, &v) in row.iter().enumerate() {
                    kn[i * maps + j] = v as i64;
                }
            }
            let wq = r.constant(
                "w_quantized",
                Tensor::from_vec(&[k, maps], kn).cast(DType::I8),
            );
            let acc = r.emit(
                Op::MatMulInteger,
                vec![Some(xq), Some(wq), Some(zp_v), None],
                acc_ty.clone(),
                None,
            );
            let (alpha, beta) = match &n.op {
                Op::Gemm(g) => (g.alpha, g.beta),
                _ => (1.0, 1.0),
            };
            (acc, n.inputs.get(2).copied().flatten(), alpha, beta)
        }
        _ => return Err("not a quantizable layer".into()),
    };
    // A bias with one value per channel joins the int32 accumulator, with the weight
    // rounding's expected shift taken out; any other C (a Gemm's full [M, N] C) is
    // added in float32 after rescaling.
    let mut per_map = vec![0f64; maps];
    let mut float_addend = None;
    if let Some(b) = bias {
        match r.graph.constant(b) {
            Some(t) if t.len() == maps || t.len() == 1 => {
                let v = t.to_f64_vec();
                for (m, p) in per_map.iter_mut().enumerate() {
                    *p = v[if v.len() == 1 { 0 } else { m }] * beta as f64;
                }
            }
            _ => float_addend = Some(b),
        }
    }
    let int_bias = (bias.is_some() || q.bias_shift.iter().any(|&d| d != 0.0)).then(|| {
        let q: Vec<i64> = (0..maps)
            .map(|m| {
                let bm = per_map[m] - alpha as f64 * q.bias_shift[m];
                (bm / (alpha as f64 * s_x as f64 * s_w[m] as f64)).round() as i64
            })
            .collect();
        Tensor::from_vec(&channel_shape, q).cast(DType::I32)
    });
    let acc = match int_bias {
        Some(t) => {
            let bq = r.constant("bias_quantized", t);
            r.emit(
                Op::Binary(BinaryOp::Add),
                vec![Some(acc), Some(bq)],
                acc_ty.clone(),
                None,
            )
        }
        None => acc,
    };
    let f_ty = TensorType::new(DType::F32, out_ty.shape.clone());
    let f = r.emit(
        Op::Cast { to: DType::F32 },
        vec![Some(acc)],
        f_ty.clone(),
        None,
    );
    let scale: Vec<f32> = s_w.iter().map(|s| alpha * s_x * s).collect();
    let scale_v = r.constant("output_scale", Tensor::from_vec(&channel_shape, scale));
    let act = n.op.activation();
    let residual = n.inputs.get(3).copied().flatten();
    let mut steps: Vec<(Op, Option<ValueId>)> = vec![(Op::Binary(BinaryOp::Mul), Some(scale_v))];
    if let Some(c) = float_addend {
        if beta != 1.0 {
            return Err("a Gemm C that is not per column needs beta = 1".into());
        }
        steps.push((Op::Binary(BinaryOp::Add), Some(c)));
    }
    if let Some(res) = residual {
        steps.push((Op::Binary(BinaryOp::Add), Some(res)));
    }
    match act {
        Activation::None => {}
        Activation::Silu => return Err("SiLU epilogues are not quantized yet".into()),
        a => steps.push((Op::Unary(a.as_unary().ok_or("activation")?), None)),
    }
    let last = steps.len() - 1;
    let mut y = f;
    for (i, (op, operand)) in steps.into_iter().enumerate() {
        let mut ins = vec![Some(y)];
        if let Some(o) = operand {
            ins.push(Some(o));
        }
        let target = (i == last).then_some(out);
        y = r.emit(op, ins, f_ty.clone(), target);
    }
    Ok(())
}
