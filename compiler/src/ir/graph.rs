//! The graph: values (typed, possibly constant) and nodes in topological order.

use std::fmt;

use super::{Tensor, TensorType};
use crate::ops::Op;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct ValueId(pub usize);

#[derive(Clone, Debug)]
pub struct ValueInfo {
    /// The ONNX name, kept for diagnostics, headers and the ABI's tensor names.
    pub name: String,
    pub ty: TensorType,
    /// Set for initializers and everything constant folding produced.
    pub constant: Option<Tensor>,
    /// Set when one axis's extent is known only at run time.
    pub run_extent: Option<RunExtent>,
    /// The elements of a 1-D (or scalar) int64 value computed from symbolic extents (a
    /// `Shape`, and the exporters' arithmetic over it), one expression each; `None`
    /// where the elements are a constant or data.
    pub dim_elements: Option<Vec<super::Dim>>,
}

/// Axes whose extent the values of the inputs decide (NonZero's count, a reduction's
/// axes given at run time): `ty.shape` holds their upper bounds, the elements are stored
/// densely (row-major) for the actual extents, and the value `count` its producer
/// writes holds them: an int64 scalar, the extent of the one axis in `axes`, or with
/// `whole_shape` an int64 `[rank]`, the whole shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunExtent {
    pub axes: Vec<usize>,
    pub count: ValueId,
    pub whole_shape: bool,
}

impl RunExtent {
    /// Bytes into `count` of axis `axis`'s extent.
    pub fn offset_of(&self, axis: usize) -> Option<usize> {
        match (self.axes.contains(&axis), self.whole_shape) {
            (false, _) => None,
            (true, true) => Some(8 * axis),
            (true, false) => Some(0),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Node {
    /// The ONNX node name (or a generated one), for diagnostics.
    pub name: String,
    /// The ONNX op this node came from, for diagnostics: one ONNX node may become several
    /// IR nodes (BatchNormalization → Mul + Add) and their op differs from the source.
    pub onnx_op: String,
    pub op: Op,
    /// `None` marks an omitted optional input.
    pub inputs: Vec<Option<ValueId>>,
    pub outputs: Vec<ValueId>,
}

#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub values: Vec<ValueInfo>,
    /// Topologically ordered.
    pub nodes: Vec<Node>,
    /// Runtime inputs (initializers are not among them), in the model's order.
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    /// Dimensions the caller sets at run time, in the ABI's order (empty: a static graph).
    pub dims: Vec<super::run_dims::SymbolicDim>,
    /// Set when the graph is one sample's and `run` loops over the samples of `dims`.
    pub sample_loop: Option<super::run_dims::SampleLoop>,
    /// The symbols the extents of symbolic values are expressions over (the dims set
    /// at run time, in `dims` order), with their ranges.
    pub symbols: super::SymbolTable,
    /// Facts about the symbols' values the run checks before anything else (see
    /// [`super::dim::DimCheck`]).
    pub dim_checks: Vec<super::dim::DimCheck>,
    /// Inputs read as shapes whose values the run checks before anything else (see
    /// [`super::InputGuard`]).
    pub input_guards: Vec<super::InputGuard>,
}

impl Graph {
    pub fn value(&self, id: ValueId) -> &ValueInfo {
        &self.values[id.0]
    }

    pub fn ty(&self, id: ValueId) -> &TensorType {
        &self.values[id.0].ty
    }

    pub fn constant(&self, id: ValueId) -> Option<&Tensor> {
        self.values[id.0].constant.as_ref()
    }

    pub fn add_value(&mut self, name: String, ty: TensorType, constant: Option<Tensor>) -> ValueId {
        self.values.push(ValueInfo {
            name,
            ty,
            constant,
            run_extent: None,
            dim_elements: None,
        });
        ValueId(self.values.len() - 1)
    }

    /// `(output, axis)` of every graph output axis whose extent the input values decide.
    pub fn bounded_axes(&self) -> Vec<(usize, usize)> {
        (self.outputs.iter().enumerate())
            .flat_map(|(i, v)| {
                let axes = (self.values[v.0].run_extent.as_ref()).map(|e| e.axes.clone());
                axes.unwrap_or_default().into_iter().map(move |a| (i, a))
            })
            .collect()
    }

    /// Number of constant elements that nodes actually read (the model's parameters).
    pub fn parameter_count(&self) -> usize {
        let mut used = vec![false; self.values.len()];
        for n in &self.nodes {
            for v in n.inputs.iter().flatten() {
                used[v.0] = true;
            }
        }
        for o in &self.outputs {
            used[o.0] = true;
        }
        self.values
            .iter()
            .zip(used)
            .filter(|(v, u)| *u && v.constant.is_some())
            .map(|(v, _)| v.ty.numel())
            .sum()
    }
}

impl Graph {
    /// `v`'s type, symbolic axes written as expressions of the symbols' names
    /// (`float32[batch,3,(h + 1)/2,(w + 1)/2]`), and the elements of a value computed
    /// from them (`int64[3] = {batch, seq, 768}`).
    pub fn type_text(&self, v: ValueId) -> String {
        let info = &self.values[v.0];
        let name = |s: super::SymbolId| self.symbols.name(s).to_string();
        let ty = match &info.ty.dims {
            None => info.ty.to_string(),
            Some(dims) => {
                let axes: Vec<String> = dims.iter().map(|d| d.written(&name)).collect();
                format!("{}[{}]", info.ty.dtype, axes.join(","))
            }
        };
        match &info.dim_elements {
            None => ty,
            Some(e) => {
                let e: Vec<String> = e.iter().map(|d| d.written(&name)).collect();
                format!("{ty} = {{{}}}", e.join(", "))
            }
        }
    }
}

/// A stable textual dump, one node per line, used by pass tests and `--dump-ir`.
impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |id: &ValueId| format!("%{}", self.values[id.0].name);
        if !self.symbols.is_empty() {
            let syms: Vec<String> = (self.symbols.iter())
                .map(|(_, s)| format!("{}={}..{}", s.name, s.min, s.max))
                .collect();
            writeln!(f, "symbols {}", syms.join(", "))?;
        }
        let ins: Vec<String> = self
            .inputs
            .iter()
            .map(|i| format!("{}: {}", name(i), self.type_text(*i)))
            .collect();
        writeln!(f, "graph({}) {{", ins.join(", "))?;
        for n in &self.nodes {
            let outs: Vec<String> = n
                .outputs
                .iter()
                .map(|o| format!("{}: {}", name(o), self.type_text(*o)))
                .collect();
            let args: Vec<String> = n
                .inputs
                .iter()
                .map(|i| match i {
                    None => "_".to_string(),
                    Some(v) if self.constant(*v).is_some() => {
                        format!("const {}", self.ty(*v))
                    }
                    Some(v) => name(v),
                })
                .collect();
            writeln!(f, "  {} = {:?}({})", outs.join(", "), n.op, args.join(", "))?;
        }
        let outs: Vec<String> = self.outputs.iter().map(name).collect();
        writeln!(f, "  return {}", outs.join(", "))?;
        write!(f, "}}")
    }
}
