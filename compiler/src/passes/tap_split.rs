//! Dilated convs whose outer taps reach the map only near its edges, split by tap.
//! DeepLab's ASPP runs a 3×3 conv with dilation 12 on a 16×16 map: the top kernel row
//! reads the map only for the bottom 4 output rows, the left column only for the right
//! 4 columns, so three quarters of the im2col GEMM's multiply-adds are by padding zeros.
//!
//! The conv becomes a sum over its taps, each a 1×1 conv over only the outputs it
//! reaches: for tap (i, j) with output rectangle R, the input window R reads is cut out
//! with a cropping `Pad`, multiplied by the tap's `[M, C, 1, 1]` weights (few positions:
//! the transposed GEMM) and padded back to the output's size with zeros; the partial
//! sums are added. The tap that reaches every output (the centre of a "same" conv)
//! stays a conv with the bias, and the sum of the others becomes its residual input, so
//! [`super::fuse_epilogue`] folds the sum and the activation into it.
//!
//! Stride 1, one group, constant float32 weights, 2-D only, and only where the taps
//! reach at most half of the kernel's outputs (else the im2col GEMM's zeros cost less
//! than the extra nodes). Runs after [`super::fold_affine`], so a BatchNormalization is
//! in the weights and bias already.

use super::{dce, util};
use crate::ir::{DType, Graph, Node, TensorType, ValueId};
use crate::ops::{Activation, BinaryOp, ConvAttrs, Op, PadAttrs, PadMode};

pub fn run(g: &mut Graph) -> Result<(), String> {
    let mut i = 0;
    while i < g.nodes.len() {
        i += 1 + split(g, i);
    }
    dce::run(g)
}

/// The largest dilation or padding, and kernel size, the pass considers.
const ATTR_LIMIT: usize = 1 << 24;
const KERNEL_LIMIT: usize = 1 << 8;

/// Outputs `[first, end)` of one axis that tap `t` reaches (stride 1).
fn reach(
    input: usize,
    output: usize,
    dilation: usize,
    pad_begin: usize,
    t: usize,
) -> (usize, usize) {
    let shift = (t * dilation) as i64 - pad_begin as i64;
    let first = (-shift).clamp(0, output as i64) as usize;
    let end = (input as i64 - shift).clamp(0, output as i64) as usize;
    (first, end.max(first))
}

/// Splits node `i` when it suits; returns the number of nodes inserted before it.
fn split(g: &mut Graph, i: usize) -> usize {
    let n = &g.nodes[i];
    let Op::Conv(attrs) = n.op.clone() else {
        return 0;
    };
    if attrs.kernel.len() != 2
        || attrs.pads.len() != 4
        || attrs.dilations.len() != 2
        || attrs.group != 1
        || attrs.strides.iter().any(|&s| s != 1)
        || attrs.activation != Activation::None
        || n.inputs.len() > 3
        // Planes sized at run time: which taps reach which outputs depends on the size.
        || n.inputs[0].is_some_and(|x| g.value(x).run_extent.is_some())
    {
        return 0;
    }
    let (Some(x), Some(w)) = (n.inputs[0], n.inputs.get(1).copied().flatten()) else {
        return 0;
    };
    let bias = n.inputs.get(2).copied().flatten();
    // Sizes far beyond any real conv are left alone, so that the tap arithmetic below
    // cannot overflow whatever the attributes.
    if attrs
        .dilations
        .iter()
        .chain(&attrs.pads)
        .any(|&v| v > ATTR_LIMIT)
        || attrs.kernel.iter().any(|&k| k > KERNEL_LIMIT)
    {
        return 0;
    }
    let (x_ty, y_ty) = (g.ty(x).clone(), g.ty(n.outputs[0]).clone());
    if x_ty.dtype != DType::F32 || x_ty.rank() != 4 || y_ty.shape[0] != 1 {
        return 0;
    }
    let Some(weights) = util::const_f32(g, w) else {
        return 0;
    };
    let (kh, kw) = (attrs.kernel[0], attrs.kernel[1]);
    let (h, wd, oh, ow) = (x_ty.shape[2], x_ty.shape[3], y_ty.shape[2], y_ty.shape[3]);
    let (m, c) = (y_ty.shape[1], x_ty.shape[1]);
    // Each tap's output rectangle (rows, columns).
    let mut taps = vec![];
    for ti in 0..kh {
        let rows = reach(h, oh, attrs.dilations[0], attrs.pads[0], ti);
        for tj in 0..kw {
            let cols = reach(wd, ow, attrs.dilations[1], attrs.pads[1], tj);
            if rows.1 > rows.0 && cols.1 > cols.0 {
                taps.push((ti, tj, rows, cols));
            }
        }
    }
    let area =
        |&(_, _, r, c): &(usize, usize, (usize, usize), (usize, usize))| (r.1 - r.0) * (c.1 - c.0);
    let live: usize = taps.iter().map(area).sum();
    let Some(main) = taps.iter().position(|t| area(t) == oh * ow) else {
        return 0;
    };
    if 2 * live > kh * kw * oh * ow || taps.len() < 2 {
        return 0;
    }
    let tap_weights = |ti: usize, tj: usize| -> Vec<f32> {
        (0..m * c)
            .map(|mc| weights[(mc * kh + ti) * kw + tj])
            .collect()
    };
    let name = n.name.clone();
    let onnx_op = n.onnx_op.clone();
    let y = n.outputs[0];
    let mut new_nodes: Vec<Node> = vec![];
    let value = |g: &mut Graph, base: &str, ty: TensorType| -> ValueId {
        let v = util::fresh_name(g, &format!("{}_{base}", g.values[y.0].name));
        g.add_value(v, ty, None)
    };
    let node = |op: Op, inputs: Vec<ValueId>, out: ValueId, part: &str| Node {
        name: format!("{name}/{part}"),
        onnx_op: onnx_op.clone(),
        op,
        inputs: inputs.into_iter().map(Some).collect(),
        outputs: vec![out],
    };
    let one_by_one = ConvAttrs {
        kernel: vec![1, 1],
        strides: vec![1, 1],
        pads: vec![0; 4],
        dilations: vec![1, 1],
        group: 1,
        activation: Activation::None,
    };
    // The cropping Pad that cuts out of X the input window tap (ti, tj) reads for the
    // outputs `rows` × `cols`: input rows from rows.0 + ti·dilation − pad on.
    let window_crop = |ti: usize, tj: usize, rows: (usize, usize), cols: (usize, usize)| {
        let top = (rows.0 + ti * attrs.dilations[0]) as i64 - attrs.pads[0] as i64;
        let left = (cols.0 + tj * attrs.dilations[1]) as i64 - attrs.pads[1] as i64;
        let (rh, rw) = ((rows.1 - rows.0) as i64, (cols.1 - cols.0) as i64);
        PadAttrs {
            mode: PadMode::Constant,
            pads: vec![
                0,
                0,
                -top,
                -left,
                0,
                0,
                top + rh - h as i64,
                left + rw - wd as i64,
            ],
            value: 0.0,
        }
    };
    let mut sum: Option<ValueId> = None;
    for (k, &(ti, tj, rows, cols)) in taps.iter().enumerate() {
        if k == main {
            continue;
        }
        let part = format!("tap{ti}{tj}");
        let (rh, rw) = (rows.1 - rows.0, cols.1 - cols.0);
        let window = value(
            g,
            &format!("{part}_window"),
            TensorType::new(DType::F32, vec![1, c, rh, rw]),
        );
        new_nodes.push(node(
            Op::Pad(window_crop(ti, tj, rows, cols)),
            vec![x],
            window,
            &format!("{part}/window"),
        ));
        let wv = util::fresh_name(g, &format!("{}_{part}", g.values[w.0].name));
        let wv = util::add_const_f32(g, wv, vec![m, c, 1, 1], tap_weights(ti, tj));
        let prod = value(
            g,
            &format!("{part}_product"),
            TensorType::new(DType::F32, vec![1, m, rh, rw]),
        );
        new_nodes.push(node(
            Op::Conv(one_by_one.clone()),
            vec![window, wv],
            prod,
            &format!("{part}/product"),
        ));
        let place = PadAttrs {
            mode: PadMode::Constant,
            pads: vec![
                0,
                0,
                rows.0 as i64,
                cols.0 as i64,
                0,
                0,
                (oh - rows.1) as i64,
                (ow - cols.1) as i64,
            ],
            value: 0.0,
        };
        let placed = value(g, &format!("{part}_placed"), y_ty.clone());
        new_nodes.push(node(
            Op::Pad(place),
            vec![prod],
            placed,
            &format!("{part}/placed"),
        ));
        sum = Some(match sum {
            None => placed,
            Some(s) => {
                let t = value(g, &format!("{part}_sum"), y_ty.clone());
                new_nodes.push(node(
                    Op::Binary(BinaryOp::Add),
                    vec![s, placed],
                    t,
                    &format!("{part}/sum"),
                ));
                t
            }
        });
    }
    let Some(others) = sum else { return 0 };
    // The tap reaching every output: its 1×1 weights over the whole input window
    // (shifted by its offset), with the bias; then the others' sum added.
    let (ti, tj, rows, cols) = taps[main];
    let crop = window_crop(ti, tj, rows, cols);
    let main_in = if crop.pads.iter().all(|&p| p == 0) {
        x
    } else {
        let window = value(
            g,
            "main_window",
            TensorType::new(DType::F32, vec![1, c, oh, ow]),
        );
        new_nodes.push(node(Op::Pad(crop), vec![x], window, "main/window"));
        window
    };
    let wv = util::fresh_name(g, &format!("{}_main", g.values[w.0].name));
    let wv = util::add_const_f32(g, wv, vec![m, c, 1, 1], tap_weights(ti, tj));
    let main_out = value(g, "main", y_ty.clone());
    let mut main_inputs = vec![Some(main_in), Some(wv)];
    if let Some(b) = bias {
        main_inputs.push(Some(b));
    }
    new_nodes.push(Node {
        name: format!("{name}/main"),
        onnx_op: onnx_op.clone(),
        op: Op::Conv(one_by_one),
        inputs: main_inputs,
        outputs: vec![main_out],
    });
    let inserted = new_nodes.len();
    let n = &mut g.nodes[i];
    n.op = Op::Binary(BinaryOp::Add);
    n.inputs = vec![Some(main_out), Some(others)];
    g.nodes.splice(i..i, new_nodes);
    inserted
}

#[cfg(test)]
mod tests {
    use super::reach;

    #[test]
    fn reach_of_dilated_taps() {
        // 3×3, dilation 12, padding 12 on 16: the outer taps reach 4 outputs each.
        assert_eq!(reach(16, 16, 12, 12, 0), (12, 16));
        assert_eq!(reach(16, 16, 12, 12, 1), (0, 16));
        assert_eq!(reach(16, 16, 12, 12, 2), (0, 4));
        // Dilation 24: the outer taps reach nothing.
        assert_eq!(reach(16, 16, 24, 24, 0).0, 16);
        assert_eq!(reach(16, 16, 24, 24, 2), (0, 0));
    }
}
