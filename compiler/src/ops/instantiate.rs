//! A symbolic graph at given values of its symbols: the static graph it stands for
//! there. Every varying axis takes its expression's value, the ops whose attributes hold
//! extents computed at the ranges' maxima (Reshape's, Expand's and Slice's shapes, a
//! pool's and a transposed conv's output planes, Resize's output) take the extents of this instance,
//! extents used as data become constants, and every fact the run checks is checked.
//!
//! The reference a library compiled with extents set at run time is held to: the
//! interpreter runs the instance, and a static compile of it is the library at those
//! values.

use super::{infer_types, Op};
use crate::ir::{Dim, Graph, Tensor, TensorType};

/// `graph` with its symbols at `values` (one per symbol, in order), each in its range.
pub fn instantiate(graph: &Graph, values: &[i64]) -> Result<Graph, String> {
    if values.len() != graph.symbols.len() {
        return Err(format!(
            "{} values for {} symbols",
            values.len(),
            graph.symbols.len()
        ));
    }
    for (i, (_, s)) in graph.symbols.iter().enumerate() {
        if values[i] < s.min || values[i] > s.max {
            return Err(format!(
                "{} = {} is outside {}..{}",
                s.name, values[i], s.min, s.max
            ));
        }
    }
    at_values(graph, values)
}

/// [`instantiate`] at values that may lie below the ranges' minima (one sample of a
/// batch the caller passes at least two of); the facts the run checks must still hold.
pub fn at_values(graph: &Graph, values: &[i64]) -> Result<Graph, String> {
    if values.len() != graph.symbols.len() {
        return Err(format!(
            "{} values for {} symbols",
            values.len(),
            graph.symbols.len()
        ));
    }
    let name = |s| graph.symbols.name(s).to_string();
    for c in &graph.dim_checks {
        if !c.holds_at(values) {
            let rule = if c.zero { "= 0" } else { ">= 0" };
            return Err(format!(
                "{} {rule} fails: {}",
                c.expr.written(&name),
                c.what
            ));
        }
    }
    let eval = |d: &Dim| -> Result<i64, String> {
        d.eval_at(values)
            .ok_or_else(|| format!("{} has no value here", d.written(&name)))
    };
    let mut g = graph.clone();
    g.symbols = Default::default();
    g.dim_checks.clear();
    for v in g.values.iter_mut() {
        if let Some(dims) = v.ty.dims.take() {
            let shape = (dims.iter())
                .map(|d| {
                    eval(d).and_then(|x| {
                        usize::try_from(x).map_err(|_| format!("{} is negative", d.written(&name)))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            if (shape.iter().zip(&v.ty.shape)).any(|(a, b)| a > b) {
                return Err(format!(
                    "'{}' exceeds its planned extents {:?}",
                    v.name, v.ty.shape
                ));
            }
            v.ty = TensorType::new(v.ty.dtype, shape);
        }
        if let Some(e) = v.dim_elements.take() {
            let data = e.iter().map(&eval).collect::<Result<Vec<i64>, _>>()?;
            v.constant = Some(Tensor::from_vec(&v.ty.shape, data).cast(v.ty.dtype));
        }
    }
    let mut nodes = Vec::with_capacity(g.nodes.len());
    for mut node in std::mem::take(&mut g.nodes) {
        let out = |k: usize| g.values[node.outputs[k].0].ty.shape.clone();
        match &mut node.op {
            Op::Reshape { shape } | Op::Expand { shape } | Op::Slice { shape, .. } => {
                *shape = out(0)
            }
            Op::Pool(p) => p.output_spatial = out(0)[2..].to_vec(),
            Op::ConvTranspose(c) => c.output_spatial = out(0)[2..].to_vec(),
            Op::Resize(r) => {
                r.output_shape = out(0);
                if r.scales_from_extents {
                    let input = node.inputs[0].ok_or("Resize has no data input")?;
                    let x = &g.values[input.0].ty.shape;
                    for (i, s) in r.scales.iter_mut().enumerate() {
                        *s = r.output_shape[i] as f32 / x[i].max(1) as f32;
                    }
                    r.scales_from_extents = false;
                }
            }
            Op::DimValues { values: e, .. } => {
                let data = e.iter().map(&eval).collect::<Result<Vec<i64>, _>>()?;
                let o = node.outputs[0];
                let t = Tensor::from_vec(&g.values[o.0].ty.shape, data);
                g.values[o.0].constant = Some(t);
                continue;
            }
            _ => {}
        }
        // The instance must type as the expressions say.
        let types: Vec<Option<TensorType>> = (node.inputs.iter())
            .map(|i| i.map(|v| g.values[v.0].ty.clone()))
            .collect();
        let inferred = infer_types(&node.op, &types)
            .map_err(|m| format!("node '{}' ({}): {m}", node.name, node.onnx_op))?;
        for (k, t) in inferred.iter().enumerate() {
            let want = &g.values[node.outputs[k].0].ty;
            if t.shape != want.shape {
                return Err(format!(
                    "node '{}' ({}): output {k} is {t} here, its expressions give {want}",
                    node.name, node.onnx_op
                ));
            }
        }
        nodes.push(node);
    }
    g.nodes = nodes;
    Ok(g)
}
