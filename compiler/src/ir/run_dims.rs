//! What a compiled graph records about the dims its caller sets at run time: their
//! ranges in the ABI's order, how the run covers them (one sample's graph in a loop, see
//! [`crate::passes::per_sample`], or symbolic shapes), and how the inputs' and outputs'
//! axes follow them.

use super::{Graph, Tensor};

/// A dimension of a compiled graph the caller sets at run time, in `[min, max]`:
/// what `model_info` lists, in the order of `nnc_run_options.dims`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymbolicDim {
    pub name: String,
    pub min: usize,
    pub max: usize,
}

/// The graph is one sample's; `run` calls it `dims[dim]` times. `inputs[i]` /
/// `outputs[i]` mark the graph inputs and outputs whose axis 0 holds the samples
/// (`[dim · unit, ...]`, the graph's shape being `[unit, ...]`); the others are the
/// same for every sample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SampleLoop {
    pub dim: usize,
    pub inputs: Vec<bool>,
    pub outputs: Vec<bool>,
}

/// How one axis of an input or output depends on a dim: its size is `scale · dims[dim]`
/// put through `size` (a conv's output-size formula; the dim itself for every input).
/// `tensor` counts the inputs first, then the outputs, as `nnc_axis_dim` does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AxisDim {
    pub tensor: usize,
    pub axis: usize,
    pub dim: usize,
    pub scale: usize,
    pub size: super::ExtentExpr,
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
        return vec![];
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
            size: super::ExtentExpr::dim(),
        });
    samples.collect()
}

/// The axes of a symbolic graph's inputs and outputs that are a function of one symbol
/// the ABI's steps can write (`scale · dim` put through `⌊(x + add) / div⌋` steps, as
/// convs and pools make them); axes of other expressions are reported by `shapes` only.
fn symbolic_axis_dims(graph: &Graph) -> Vec<AxisDim> {
    let mut out = vec![];
    for (tensor, v) in graph.inputs.iter().chain(&graph.outputs).enumerate() {
        let Some(dims) = &graph.ty(*v).dims else {
            continue;
        };
        for (axis, d) in dims.iter().enumerate() {
            if let Some((s, scale, size)) = as_steps(d) {
                out.push(AxisDim {
                    tensor,
                    axis,
                    dim: s.0 as usize,
                    scale: scale as usize,
                    size,
                });
            }
        }
    }
    out
}

/// `d` as `scale · symbol` put through steps, when it has that form: `c·s + k`, or
/// `⌊e / m⌋ + k` of such an `e`.
fn as_steps(d: &super::Dim) -> Option<(super::SymbolId, i64, super::ExtentExpr)> {
    use super::DimAtom;
    let mut constant = 0i64;
    let mut varying = None;
    for (coef, atoms) in d.terms() {
        match atoms.as_slice() {
            [] => constant = coef,
            [(atom, 1)] if varying.is_none() => varying = Some((coef, *atom)),
            _ => return None,
        }
    }
    let (coef, atom) = varying?;
    match atom {
        DimAtom::Symbol(s) if coef >= 1 => {
            Some((s, coef, super::ExtentExpr::dim().then(constant, 1)))
        }
        DimAtom::FloorDiv(num, den) if coef == 1 => {
            let m = u64::try_from(den.as_const()?).ok().filter(|&m| m >= 1)?;
            let (s, scale, e) = as_steps(num)?;
            Some((s, scale, e.then(0, m).then(constant, 1)))
        }
        _ => None,
    }
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
    let mut samples = None;
    for ((v, t), &marked) in graph.inputs.iter().zip(inputs).zip(&sl.inputs) {
        let unit = graph.ty(*v);
        if !marked {
            continue;
        }
        let (s, u) = (t.shape(), &unit.shape);
        let same_axes = (1..u.len()).all(|a| s.get(a) == u.get(a));
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
                let ty = super::TensorType::new(t.dtype(), shape);
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
            let ty = super::TensorType::new(graph.ty(*v).dtype, shape);
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
            let mut shape = t.shape().to_vec();
            if let (Some(d), Some(&u)) = (shape.first_mut(), graph.ty(*v).shape.first()) {
                *d = u;
            }
            let unit = super::TensorType::new(t.dtype(), shape);
            if !marked || t.shape() == unit.shape.as_slice() {
                return t.clone();
            }
            let bytes = t.to_le_bytes();
            Tensor::from_le_bytes(&unit, &bytes[..unit.byte_size().min(bytes.len())])
                .unwrap_or_else(|| t.clone())
        })
        .collect()
}
