//! Dimensions the caller picks at run time: declared with `--dim NAME=MIN..MAX` or a
//! range on an axis of `--input-shape`, numbered in the ABI's order, and the way code
//! generation covers them.
//!
//! Two strategies exist so far. The *sample loop*: when a dim is a leading factor of
//! axis 0 of every value it reaches and no node mixes values across that axis (a
//! batch), the graph is compiled for one sample (the dim at 1) and `run` calls it once
//! per sample, each marked input and output advanced by its bytes per sample. Weights,
//! packed panels, the memory plan and the workspace are those of one sample, so the
//! library is as small as a static one, and every value in range runs exactly.
//! [`sample_loop`] proves the conditions from the model itself (importing it at three
//! values of the dim) and names the node that breaks them. Otherwise, *rows*
//! ([`row_extent`]): a dim on an axis only unit axes precede, through nodes that compute
//! each row from the same rows, is the run-time extent of the values it reaches in the
//! graph compiled at its maximum.

pub mod planes;
pub mod row_extent;
pub mod sample_loop;

pub use crate::onnx::ranges as range;
pub use crate::onnx::ranges::{named_ranges, parse_range, DimRange, DimSite};
pub use sample_loop::import_with_ranges;

pub use crate::ir::run_dims::{RowDim, SampleLoop, SymbolicDim};

use crate::ir::{Graph, Tensor, ValueId};

/// How one axis of an input or output depends on a dim: its size is `scale · dims[dim]`
/// put through `size` (a conv's output-size formula; the dim itself for every input).
/// `tensor` counts the inputs first, then the outputs, as `nnc_axis_dim` does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AxisDim {
    pub tensor: usize,
    pub axis: usize,
    pub dim: usize,
    pub scale: usize,
    pub size: crate::ir::ExtentExpr,
}

impl AxisDim {
    /// The axis's size as a formula of the dim named `name` (`2*batch`,
    /// `(width - 4)/4`).
    pub fn written(&self, name: &str) -> String {
        let x = match self.scale {
            1 => name.to_string(),
            s => format!("{s}*{name}"),
        };
        self.size.written(&x)
    }

    /// The axis's size when its dim is `value`.
    pub fn at(&self, value: usize) -> usize {
        self.size.size_at(self.scale * value)
    }
}

/// How the inputs' and outputs' axes depend on the dims set at run time (none for a
/// static graph): for a one-sample graph, axis 0 of each marked tensor holds
/// `unit · dim` samples, `unit` being the graph's own size there.
pub fn axis_dims(graph: &Graph) -> Vec<AxisDim> {
    if !graph.symbols.is_empty() {
        return symbolic_axis_dims(graph);
    }
    let Some(sl) = &graph.sample_loop else {
        return row_axis_dims(graph);
    };
    let samples = (graph.inputs.iter().chain(&graph.outputs))
        .zip(sl.inputs.iter().chain(&sl.outputs))
        .enumerate()
        .filter(|(_, (_, &marked))| marked)
        .map(|(tensor, (v, _))| AxisDim {
            tensor,
            axis: 0,
            dim: sl.dim,
            scale: graph.ty(*v).shape[0],
            size: crate::ir::ExtentExpr::dim(),
        });
    samples.chain(row_axis_dims(graph)).collect()
}

/// The axes of a symbolic graph's inputs and outputs that are a multiple of one symbol
/// (`scale · dim`); axes of other expressions are reported by `shapes` only.
fn symbolic_axis_dims(graph: &Graph) -> Vec<AxisDim> {
    let mut out = vec![];
    for (tensor, v) in graph.inputs.iter().chain(&graph.outputs).enumerate() {
        let Some(dims) = &graph.ty(*v).dims else {
            continue;
        };
        for (axis, d) in dims.iter().enumerate() {
            if let Some((scale, s)) = d.as_scaled_symbol() {
                out.push(AxisDim {
                    tensor,
                    axis,
                    dim: s.0 as usize,
                    scale: scale as usize,
                    size: crate::ir::ExtentExpr::dim(),
                });
            }
        }
    }
    out
}

/// The row dim whose value `count` holds, if it is one's.
pub fn row_dim_of(graph: &Graph, count: ValueId) -> Option<&RowDim> {
    graph.row_dims.iter().find(|d| d.count == count)
}

/// Where a value's rows are counted by a row dim: the count and the axis, and for an
/// image's planes the dim itself along `axes` axes from `axis` (the caller's buffer
/// then holds `count^axes` units of [`CountedRows::unit_bytes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CountedRows {
    pub count: ValueId,
    pub axis: usize,
    pub axes: u32,
}

impl CountedRows {
    /// Bytes per row of `v` (its rows contiguous: only unit axes before them).
    pub fn row_bytes(&self, graph: &Graph, v: ValueId) -> usize {
        self.unit_bytes(graph, v)
    }

    /// Bytes of `v` per unit of each counted axis: its bytes at the bound divided by
    /// the counted axes' bounds.
    pub fn unit_bytes(&self, graph: &Graph, v: ValueId) -> usize {
        let ty = graph.ty(v);
        let e = graph.value(v).run_extent.as_ref();
        let axes = e.map_or(&[][..], |e| e.axes.as_slice());
        let bounds: usize = axes.iter().map(|&a| ty.shape[a].max(1)).product();
        ty.byte_size() / bounds.max(1)
    }
}

/// How a row dim counts `v`'s rows, if it does (a value of run-time extent whose count
/// is a row dim's, not a value-dependent output's): along one axis, or along an image's
/// planes that are each the dim itself.
pub fn counted_rows(graph: &Graph, v: ValueId) -> Option<CountedRows> {
    let e = graph.value(v).run_extent.as_ref()?;
    row_dim_of(graph, e.count)?;
    let axis = *e.axes.first()?;
    if e.is_planes() && !e.sizes.iter().all(|s| s.is_dim()) {
        return None;
    }
    let axes = if e.is_planes() { e.axes.len() } else { 1 };
    (axis < graph.ty(v).rank()).then_some(CountedRows {
        count: e.count,
        axis,
        axes: axes as u32,
    })
}

/// Per value: whether a node or the graph's outputs read it.
pub(crate) fn read_values(graph: &Graph) -> Vec<bool> {
    let mut read = vec![false; graph.values.len()];
    for v in (graph.nodes.iter().flat_map(|n| n.inputs.iter().flatten())).chain(&graph.outputs) {
        read[v.0] = true;
    }
    read
}

/// The axes of the inputs and outputs whose extent is a row dim's value (see
/// [`row_extent`]).
fn row_axis_dims(graph: &Graph) -> Vec<AxisDim> {
    let tensors = graph.inputs.iter().chain(&graph.outputs).enumerate();
    tensors
        .filter_map(|(tensor, v)| {
            let e = graph.value(*v).run_extent.as_ref()?;
            let d = row_dim_of(graph, e.count)?;
            let counted = if e.is_planes() { e.axes.len() } else { 1 };
            Some((0..counted).map(move |i| AxisDim {
                tensor,
                axis: e.axes[i],
                dim: d.dim,
                scale: 1,
                // Planes carry their own formula of the dim; rows, their count's.
                size: e.sizes.get(i).cloned().unwrap_or_else(|| d.size.clone()),
            }))
        })
        .flatten()
        .collect()
}

/// The shape of an input or output for dim values `values`: `shape` with each axis
/// in `deps` (for this tensor) set to `scale · value`.
pub fn concrete_shape(
    shape: &[usize],
    tensor: usize,
    deps: &[AxisDim],
    values: &[usize],
) -> Vec<usize> {
    let mut s = shape.to_vec();
    for d in deps.iter().filter(|d| d.tensor == tensor) {
        s[d.axis] = d.at(values[d.dim]);
    }
    s
}

/// Runs a one-sample graph on inputs holding `k` samples each (axis 0 of every marked
/// input `k` times its one-sample size) by calling `run_one` per sample and joining
/// the outputs the same way; inputs of one sample go to `run_one` as they are.
pub fn run_samples(
    graph: &Graph,
    inputs: &[Tensor],
    run_one: impl Fn(&[Tensor]) -> Result<Vec<Tensor>, String>,
) -> Result<Vec<Tensor>, String> {
    let Some(sl) = &graph.sample_loop else {
        return run_one(inputs);
    };
    // A sample's axes are the graph's but for axis 0 (the samples) and a row dim's
    // axis, whose extent the inputs set.
    let counted_axis = |v: ValueId, a: usize| {
        let e = graph.value(v).run_extent.as_ref();
        e.filter(|_| counted_rows(graph, v).is_some())
            .is_some_and(|e| match e.is_planes() {
                true => e.axes.contains(&a),
                false => e.axes.first() == Some(&a),
            })
    };
    let mut samples = None;
    for ((v, t), &marked) in graph.inputs.iter().zip(inputs).zip(&sl.inputs) {
        let unit = graph.ty(*v);
        if !marked {
            continue;
        }
        let (s, u) = (t.shape(), &unit.shape);
        let same_axes = (1..u.len()).all(|a| s.get(a) == u.get(a) || counted_axis(*v, a));
        let k = (s.len() == u.len() && u[0] > 0 && s[0] % u[0] == 0 && same_axes)
            .then(|| s[0] / u[0])
            .ok_or_else(|| {
                format!(
                    "input '{}' is {:?}: axis 0 must hold whole samples of {u:?}",
                    graph.value(*v).name,
                    s
                )
            })?;
        if *samples.get_or_insert(k) != k {
            return Err("the inputs hold different numbers of samples".into());
        }
    }
    let k = samples.unwrap_or(1);
    if k == 1 {
        return run_one(inputs);
    }
    let input_bytes: Vec<Vec<u8>> = inputs.iter().map(Tensor::to_le_bytes).collect();
    let mut outputs: Vec<(Vec<usize>, Vec<u8>)> = vec![(vec![], vec![]); graph.outputs.len()];
    for s in 0..k {
        let sample: Vec<Tensor> = (graph.inputs.iter().zip(&input_bytes).zip(&sl.inputs))
            .zip(inputs)
            .map(|(((v, bytes), &marked), t)| {
                if !marked {
                    return Ok(t.clone());
                }
                let mut shape = t.shape().to_vec();
                shape[0] = graph.ty(*v).shape[0];
                let ty = crate::ir::TensorType::new(t.dtype(), shape);
                let n = ty.byte_size();
                Tensor::from_le_bytes(&ty, &bytes[s * n..(s + 1) * n])
                    .ok_or_else(|| "an input's bytes".to_string())
            })
            .collect::<Result<_, String>>()?;
        for ((out, t), &marked) in outputs.iter_mut().zip(run_one(&sample)?).zip(&sl.outputs) {
            if marked || s == 0 {
                out.0 = t.shape().to_vec();
                out.1.extend(t.to_le_bytes());
            }
        }
    }
    (graph.outputs.iter().zip(outputs).zip(&sl.outputs))
        .map(|((v, (mut shape, bytes)), &marked)| {
            if marked {
                shape[0] *= k;
            }
            let ty = crate::ir::TensorType::new(graph.ty(*v).dtype, shape);
            Tensor::from_le_bytes(&ty, &bytes).ok_or_else(|| "an output's bytes".to_string())
        })
        .collect()
}

/// The first sample of inputs holding several (see [`run_samples`]); inputs of a graph
/// that is not one sample's come back as they are.
pub fn first_sample(graph: &Graph, inputs: &[Tensor]) -> Vec<Tensor> {
    let Some(sl) = &graph.sample_loop else {
        return inputs.to_vec();
    };
    (graph.inputs.iter().zip(inputs).zip(&sl.inputs))
        .map(|((v, t), &marked)| {
            // A row dim's axis keeps the input's extent.
            let mut shape = t.shape().to_vec();
            if let (Some(d), Some(&u)) = (shape.first_mut(), graph.ty(*v).shape.first()) {
                *d = u;
            }
            let unit = crate::ir::TensorType::new(t.dtype(), shape);
            if !marked || t.shape() == unit.shape.as_slice() {
                return t.clone();
            }
            let bytes = t.to_le_bytes();
            Tensor::from_le_bytes(&unit, &bytes[..unit.byte_size().min(bytes.len())])
                .unwrap_or_else(|| t.clone())
        })
        .collect()
}

/// Whether `node` reads only rows that every run of its row-counted input has (see
/// [`crate::ops::rows::reads_first_rows`]), at least the range's minimum of them.
pub fn reads_fewest_rows(graph: &Graph, node: &crate::ir::Node) -> bool {
    let Some(Some(x)) = node.inputs.first() else {
        return false;
    };
    let Some(e) = graph.value(*x).run_extent.as_ref() else {
        return false;
    };
    let min = row_dim_of(graph, e.count)
        .and_then(|r| graph.dims.get(r.dim))
        .map(|d| d.min);
    min.is_some_and(|min| crate::ops::rows::reads_first_rows(graph, node, min))
}
