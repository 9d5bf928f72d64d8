//! Helpers shared by the passes: use counts, constants as f32, value rewiring.

use ndarray::{ArrayD, IxDyn};

use crate::ir::{DType, Graph, Tensor, TensorType, ValueId};

/// How many times each value is read: by node inputs and as a graph output.
pub fn use_counts(g: &Graph) -> Vec<usize> {
    let mut uses = vec![0; g.values.len()];
    for n in &g.nodes {
        for v in n.inputs.iter().flatten() {
            uses[v.0] += 1;
        }
    }
    for o in &g.outputs {
        uses[o.0] += 1;
    }
    uses
}

/// The node producing each value (`None` for inputs and constants).
pub fn producers(g: &Graph) -> Vec<Option<usize>> {
    let mut p = vec![None; g.values.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        for o in &n.outputs {
            p[o.0] = Some(i);
        }
    }
    p
}

/// The nodes reading each value, in order (a node reading it twice appears twice).
pub fn consumers(g: &Graph) -> Vec<Vec<usize>> {
    let mut c = vec![vec![]; g.values.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        for v in n.inputs.iter().flatten() {
            c[v.0].push(i);
        }
    }
    c
}

pub fn is_output(g: &Graph, v: ValueId) -> bool {
    g.outputs.contains(&v)
}

/// Every node input reading `from` reads `to` instead.
pub fn replace_uses(g: &mut Graph, from: ValueId, to: ValueId) {
    for n in &mut g.nodes {
        for v in n.inputs.iter_mut().flatten() {
            if *v == from {
                *v = to;
            }
        }
    }
}

/// A float32 constant's elements, row-major.
pub fn const_f32(g: &Graph, v: ValueId) -> Option<Vec<f32>> {
    match g.constant(v)? {
        Tensor::F32(a) => Some(a.iter().copied().collect()),
        _ => None,
    }
}

/// The value of a one-element float32 constant.
pub fn scalar_f32(g: &Graph, v: ValueId) -> Option<f32> {
    let c = const_f32(g, v)?;
    (c.len() == 1).then(|| c[0])
}

/// Adds a float32 constant value.
pub fn add_const_f32(g: &mut Graph, name: String, shape: Vec<usize>, data: Vec<f32>) -> ValueId {
    let ty = TensorType::new(DType::F32, shape.clone());
    let t = Tensor::F32(ArrayD::from_shape_vec(IxDyn(&shape), data).expect("shape matches data"));
    g.add_value(name, ty, Some(t))
}

/// A name for a value derived from `base`, unique among the graph's value names.
pub fn fresh_name(g: &Graph, base: &str) -> String {
    let mut i = g.values.len();
    loop {
        let name = format!("{base}_{i}");
        if !g.values.iter().any(|v| v.name == name) {
            return name;
        }
        i += 1;
    }
}

/// True when `shape`, broadcast against an output of `rank` axes, varies along
/// `axis` only (leading 1s may be missing); returns the number of elements along it.
pub fn varies_along(shape: &[usize], rank: usize, axis: usize) -> bool {
    if shape.len() > rank {
        return false;
    }
    let off = rank - shape.len();
    shape
        .iter()
        .enumerate()
        .all(|(i, &d)| d == 1 || i + off == axis)
}
