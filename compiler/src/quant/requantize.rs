//! Requantization straight into the next layer: a `ConvU8S8` whose float32 output only
//! feeds a `QuantizeToPlanes` (stride 1) writes those uint8 planes itself, and the
//! float32 tensor (4 bytes a value, written and read back) disappears.
//!
//! The fused kernel stores each vector of wide output pixels at a constant offset in
//! the next planes, which requires the two to have the same number of columns: then
//! the wide pixels the convolution computes past each output row's end land exactly
//! on the next planes' right and left padding, and get the zero point. Plane layouts
//! may have more columns than their padding needs (more right padding), so the pass
//! gives every set of planes linked by a fused convolution the widest of their column
//! counts.

use std::collections::HashMap;

use crate::ir::{DType, Graph, TensorType, ValueId};
use crate::ops::{Op, PlaneLayout, Requantize};

/// One fusable pair: the convolution node, the quantizer node and its parameters.
struct Pair {
    conv: usize,
    quantize: usize,
    inv_scale: f32,
    zero_point: u8,
}

pub fn fuse(graph: &mut Graph) {
    let mut uses: HashMap<ValueId, usize> = HashMap::new();
    for n in &graph.nodes {
        for v in n.inputs.iter().flatten() {
            *uses.entry(*v).or_default() += 1;
        }
    }
    for v in &graph.outputs {
        *uses.entry(*v).or_default() += 1;
    }
    let producer: HashMap<ValueId, usize> = graph
        .nodes
        .iter()
        .enumerate()
        .flat_map(|(i, n)| n.outputs.iter().map(move |&o| (o, i)))
        .collect();
    let scalar = |v: Option<ValueId>| v.and_then(|v| graph.constant(v)).map(|t| t.to_f64_vec());
    let mut pairs = vec![];
    for (qi, q) in graph.nodes.iter().enumerate() {
        if !matches!(q.op, Op::QuantizeToPlanes(_)) {
            continue;
        }
        let Some(y) = q.inputs[0] else { continue };
        let Some(&pi) = producer.get(&y) else {
            continue;
        };
        let fusable_producer = matches!(
            graph.nodes[pi].op,
            Op::ConvU8S8 {
                requantize: None,
                ..
            }
        );
        let (Some(inv), Some(zp)) = (scalar(q.inputs[1]), scalar(q.inputs[2])) else {
            continue;
        };
        if fusable_producer && uses.get(&y) == Some(&1) {
            pairs.push(Pair {
                conv: pi,
                quantize: qi,
                inv_scale: inv[0] as f32,
                zero_point: zp[0] as u8,
            });
        }
    }
    if pairs.is_empty() {
        return;
    }
    // Planes linked by a fused convolution (its input and its output) share columns.
    let mut groups = UnionFind::default();
    for p in &pairs {
        let Op::QuantizeToPlanes(layout) = &graph.nodes[p.quantize].op else {
            continue;
        };
        // Strided planes are written pixel by pixel (scattered): no constraint.
        if layout.stride == [1, 1] {
            let input = graph.nodes[p.conv].inputs[0].expect("ConvU8S8 has planes");
            groups.union(input, graph.nodes[p.quantize].outputs[0]);
        }
    }
    let mut widest: HashMap<ValueId, usize> = HashMap::new();
    for_each_layout(graph, &mut |v, l| {
        let root = groups.find(v);
        let w = widest.entry(root).or_default();
        *w = (*w).max(l.cols);
    });
    let mut resized: HashMap<ValueId, PlaneLayout> = HashMap::new();
    for n in graph.nodes.iter_mut() {
        let (v, layout) = match &mut n.op {
            Op::QuantizeToPlanes(l) => (n.outputs[0], l),
            Op::ConvU8S8 { planes, .. } => (n.inputs[0].expect("planes"), planes),
            _ => continue,
        };
        if let Some(&cols) = widest.get(&groups.find(v)) {
            *layout = layout.with_cols(cols);
            resized.insert(v, layout.clone());
        }
    }
    for (v, l) in &resized {
        let batch = graph.values[v.0].ty.shape[0];
        graph.values[v.0].ty = TensorType::new(DType::U8, l.shape(batch));
    }
    let mut removed = vec![false; graph.nodes.len()];
    for p in &pairs {
        let Op::QuantizeToPlanes(layout) = graph.nodes[p.quantize].op.clone() else {
            continue;
        };
        let planes_out = graph.nodes[p.quantize].outputs[0];
        let conv = &mut graph.nodes[p.conv];
        if let Op::ConvU8S8 { requantize, .. } = &mut conv.op {
            *requantize = Some(Requantize {
                layout,
                inv_scale: p.inv_scale,
                zero_point: p.zero_point,
            });
        }
        conv.outputs[0] = planes_out;
        removed[p.quantize] = true;
    }
    let mut i = 0;
    graph.nodes.retain(|_| {
        i += 1;
        !removed[i - 1]
    });
}

/// Calls `f` with every planes value and the layout a node gives it.
fn for_each_layout(graph: &Graph, f: &mut dyn FnMut(ValueId, &PlaneLayout)) {
    for n in &graph.nodes {
        match &n.op {
            Op::QuantizeToPlanes(l) => f(n.outputs[0], l),
            Op::ConvU8S8 { planes, .. } => f(n.inputs[0].expect("planes"), planes),
            _ => {}
        }
    }
}

#[derive(Default)]
struct UnionFind {
    parent: HashMap<ValueId, ValueId>,
}

impl UnionFind {
    fn find(&mut self, v: ValueId) -> ValueId {
        let p = *self.parent.get(&v).unwrap_or(&v);
        if p == v {
            return v;
        }
        let root = self.find(p);
        self.parent.insert(v, root);
        root
    }

    fn union(&mut self, a: ValueId, b: ValueId) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            self.parent.insert(ra, rb);
        }
    }
}
