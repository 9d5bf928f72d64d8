//! ONNX model → nnc IR: resolves every shape statically, folds constants as it goes
//! (so `Shape → Gather → Concat → Reshape` chains become plain attributes), and collects
//! every unsupported op in one pass.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use prost::Message;

use super::attributes::Attributes;
use super::proto::TensorProto;
use super::proto::{
    tensor_shape_proto::dimension, type_proto, GraphProto, ModelProto, NodeProto, ValueInfoProto,
};
use super::tensor_proto::tensor_from_proto;
use super::weight_budget::WeightBudget;
use crate::error::{NncError, NodeExcerpt, Result, UnsupportedOp};
use crate::interp;
use crate::ir::{DType, Dim, Graph, Node, RunExtent, Tensor, TensorType, ValueId};
use crate::limits::Limits;
use crate::ops::{infer_types, Op};

/// How to bind dimensions the model leaves symbolic.
#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// `--input-shape NAME=D0,D1,...`
    pub input_shapes: HashMap<String, Vec<usize>>,
    /// `--dim PARAM=VALUE`
    pub dims: HashMap<String, usize>,
    /// `--dim NAME=MIN..MAX` and ranges in `--input-shape` (whose axis then holds any
    /// value in `input_shapes`): dims the caller sets at run time (see [`super::ranges`]).
    pub ranges: Vec<super::ranges::DimRange>,
    /// `--freeze-input NAME=FILE`: graph inputs replaced by constants, e.g. the axes,
    /// pads or target shape a model takes as an input but the user never varies.
    pub frozen_inputs: HashMap<String, Tensor>,
    /// `--sequence-input NAME=SHAPE;SHAPE;...`: a sequence input's length and element
    /// shapes. Element k crosses the C ABI as the tensor input `NAME[k]`.
    pub sequence_inputs: HashMap<String, Vec<Vec<usize>>>,
    /// `--absent-input NAME`: an optional input compiled as empty (it is then not an
    /// input of infer()). An optional input not named here is compiled as present.
    pub absent_inputs: HashSet<String>,
    /// Sizes past which import refuses the model or stops folding constants.
    pub limits: Limits,
}

/// What import produced: the graph, and every node that could not be imported.
pub struct Imported {
    pub graph: Graph,
    pub unsupported: Vec<UnsupportedOp>,
    pub opset: i64,
    /// ONNX op histogram of the source model, in first-seen order.
    pub onnx_ops: Vec<(String, usize)>,
}

/// Reads, decodes and imports a model file; errors carry the file's path.
pub fn load_model(path: &Path, opts: &ImportOptions) -> Result<Graph> {
    let imported = load_model_partial(path, opts)?;
    if !imported.unsupported.is_empty() {
        return Err(NncError::Unsupported(imported.unsupported).in_file(path));
    }
    Ok(imported.graph)
}

/// Like [`load_model`] but returns unsupported ops instead of failing on them
/// (for `nnc inspect`).
pub fn load_model_partial(path: &Path, opts: &ImportOptions) -> Result<Imported> {
    let bytes = crate::files::read_regular(path).map_err(|e| NncError::read(path, e))?;
    let model = ModelProto::decode(bytes.as_slice()).map_err(|source| NncError::Decode {
        path: path.to_path_buf(),
        source,
    })?;
    import_model(&model, path.parent(), opts).map_err(|e| e.in_file(path))
}

pub fn import_model(
    model: &ModelProto,
    base_dir: Option<&Path>,
    opts: &ImportOptions,
) -> Result<Imported> {
    // A range of one value (MIN..MIN) varies nothing: it is that value.
    if let Some(which) = opts.ranges.iter().position(|r| r.min == r.max) {
        let value = opts.ranges[which].min;
        return import_model(model, base_dir, &opts.with_range_fixed(which, value));
    }
    // Ranges import once over symbolic shapes.
    if !opts.ranges.is_empty() {
        return import_symbolic(model, base_dir, opts);
    }
    import_once(model, base_dir, opts, false)
}

/// Imports the model once with every declared range a symbol: each value's axes are
/// expressions of them (see [`crate::ir::dim`]) and shape subgraphs fold to
/// expressions. A range on an input axis the model names takes that name
/// ([`super::ranges::named_ranges`]). A node whose import cannot take a symbolic extent
/// yet is reported unsupported, naming the input, the axis and the expression.
pub fn import_symbolic(
    model: &ModelProto,
    base_dir: Option<&Path>,
    opts: &ImportOptions,
) -> Result<Imported> {
    import_once(
        model,
        base_dir,
        &super::ranges::named_ranges(model, opts),
        true,
    )
}

fn import_once(
    model: &ModelProto,
    base_dir: Option<&Path>,
    opts: &ImportOptions,
    symbolic: bool,
) -> Result<Imported> {
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| NncError::Model("the model has no graph".into()))?;
    let declared = model
        .opset_import
        .iter()
        .find(|o| o.domain.is_empty() || o.domain == "ai.onnx")
        .map(|o| o.version);
    if let Some(v) = declared.filter(|v| !(1..=MAX_OPSET).contains(v)) {
        return Err(NncError::Model(format!(
            "the model imports ai.onnx opset {v}; nnc knows opsets 1 to {MAX_OPSET} (the newest)"
        )));
    }
    // IR version 3+ models must declare it; very old ones default to opset 1.
    let opset = declared.unwrap_or(1);
    let default_opset_known = declared.is_some() || model.ir_version < 3;
    let mut b = GraphBuilder {
        graph: Graph::default(),
        names: HashMap::new(),
        unsupported: vec![],
        opset,
        base_dir: base_dir.map(Path::to_path_buf),
        scope: String::new(),
        sequences: HashMap::new(),
        absent: HashSet::new(),
        run_shapes: HashMap::new(),
        row_sums: HashMap::new(),
        limits: opts.limits,
        weights: WeightBudget::new(opts.limits.max_weight_bytes),
        origins: HashMap::new(),
        default_opset_known,
        symbolic,
        symbol_sites: vec![],
        declared_shapes: match symbolic {
            true => HashMap::new(),
            false => declared_shapes(graph),
        },
        input_guards: Default::default(),
    };
    if symbolic {
        b.declare_symbols(model, opts)?;
    }
    b.import_initializers(graph, base_dir)?;
    b.import_inputs(graph, opts)?;
    if symbolic {
        b.check_symbols_reach_inputs()?;
    }
    let mut hist: Vec<(String, usize)> = vec![];
    for (i, node) in graph.node.iter().enumerate() {
        match hist.iter_mut().find(|(n, _)| *n == node.op_type) {
            Some((_, c)) => *c += 1,
            None => hist.push((node.op_type.clone(), 1)),
        }
        b.import_node(node, i)?;
    }
    b.import_outputs(graph)?;
    b.graph.input_guards = b.input_guards.into_inner();
    Ok(Imported {
        graph: b.graph,
        unsupported: b.unsupported,
        opset,
        onnx_ops: hist,
    })
}

/// The shapes `g` declares for its outputs and `value_info`, where every axis is a
/// number.
fn declared_shapes(g: &GraphProto) -> HashMap<String, Vec<usize>> {
    let fixed = |vi: &super::proto::ValueInfoProto| -> Option<Vec<usize>> {
        let t = match vi.r#type.as_ref()?.value.as_ref()? {
            super::proto::type_proto::Value::TensorType(t) => t,
            _ => return None,
        };
        (t.shape.as_ref()?.dim.iter())
            .map(|d| match d.value {
                Some(dimension::Value::DimValue(v)) => usize::try_from(v).ok(),
                _ => None,
            })
            .collect()
    };
    (g.output.iter().chain(&g.value_info))
        .filter_map(|vi| Some((vi.name.clone(), fixed(vi)?)))
        .collect()
}

/// The newest ai.onnx opset the importer implements (that of the pinned `onnx` package
/// whose node suite nnc passes); a model importing a newer one is refused.
pub const MAX_OPSET: i64 = 28;

/// The most elements a shape input checked at run time may have.
const MAX_IMPLIED_ELEMENTS: usize = 64;

/// Marks a value whose producer could not be imported: its consumers are skipped
/// silently, so only the root causes are reported.
const POISON: ValueId = ValueId(usize::MAX);

pub struct GraphBuilder {
    pub graph: Graph,
    names: HashMap<String, ValueId>,
    unsupported: Vec<UnsupportedOp>,
    pub opset: i64,
    pub base_dir: Option<std::path::PathBuf>,
    /// Prefix of the names of nodes imported from a subgraph (`Loop_3/iter2/`), so
    /// messages tell an unrolled body's nodes apart.
    scope: String,
    /// Sequence values (static: their length and elements are known at import), by the
    /// placeholder value their name is bound to.
    sequences: HashMap<ValueId, Vec<ValueId>>,
    /// Empty optional values (an `Optional` without input, an --absent-input), by the
    /// placeholder value their name is bound to.
    absent: HashSet<ValueId>,
    /// Shapes computed at run time from a value's counted extents (a `Shape` of kept
    /// scores), by the shape value: the value whose shape it is.
    run_shapes: HashMap<ValueId, ValueId>,
    /// The count of rows concatenated from values of these counts (`None`: a fixed
    /// extent) and bounds, so two Concats of the same counts (boxes, and their scores)
    /// give rows of one count.
    row_sums: HashMap<Vec<(Option<ValueId>, usize)>, ValueId>,
    /// Sizes no tensor may exceed and constant folding keeps to.
    pub limits: Limits,
    /// `--max-weight-bytes`, charged by every weight tensor the model declares.
    weights: WeightBudget,
    /// What defined each name in scope (`graph input 'x'`, `the output of node 'a'
    /// (Relu)`...), so a second definition is refused naming the first.
    origins: HashMap<String, String>,
    /// Whether the model imports an ai.onnx opset (or is old enough to default to 1):
    /// without one, the version of a default-domain op is unknown.
    default_opset_known: bool,
    /// Whether declared ranges are symbols (see [`import_symbolic`]).
    symbolic: bool,
    /// Where each symbol's range applies, by symbol.
    symbol_sites: Vec<super::ranges::DimSite>,
    /// The fully static shapes the model declares for its values (graph outputs and
    /// `value_info`), by name: what a shape input computed at run time must imply (see
    /// [`super::implied_inputs`]).
    declared_shapes: HashMap<String, Vec<usize>>,
    /// The checks of the shape inputs compiled as those values, for the graph
    /// (`input_guards`) once imported; recorded by importers holding `&self`.
    input_guards: std::cell::RefCell<Vec<crate::ir::InputGuard>>,
}

impl GraphBuilder {
    /// Decodes a weight tensor (an initializer or an attribute), charging its declared
    /// size to the weight budget first.
    fn weight_from_proto(
        &self,
        t: &TensorProto,
        base_dir: Option<&Path>,
    ) -> Result<Tensor, String> {
        self.weights.charge(t)?;
        tensor_from_proto(t, base_dir).map_err(|e| e.0)
    }

    fn import_initializers(&mut self, g: &GraphProto, base_dir: Option<&Path>) -> Result<()> {
        for t in &g.initializer {
            let tensor = self
                .weight_from_proto(t, base_dir)
                .map_err(|m| NncError::Model(format!("initializer '{}': {m}", t.name)))?;
            self.limits
                .check_tensor(&tensor.ty())
                .map_err(|m| NncError::Model(format!("initializer '{}': {m}", t.name)))?;
            let id = self
                .graph
                .add_value(t.name.clone(), tensor.ty(), Some(tensor));
            self.names.insert(t.name.clone(), id);
            self.origins
                .insert(t.name.clone(), format!("initializer '{}'", t.name));
        }
        if let Some(s) = g.sparse_initializer.first() {
            let name = s
                .values
                .as_ref()
                .map(|v| v.name.clone())
                .unwrap_or_default();
            return Err(NncError::Model(format!(
                "sparse initializer '{name}' is not supported"
            )));
        }
        Ok(())
    }

    fn import_inputs(&mut self, g: &GraphProto, opts: &ImportOptions) -> Result<()> {
        // A misspelt name first: it is why the input it meant looks unbound.
        let bound = opts
            .input_shapes
            .keys()
            .map(|n| (n, "--input-shape"))
            .chain(opts.frozen_inputs.keys().map(|n| (n, "--freeze-input")))
            .chain(opts.sequence_inputs.keys().map(|n| (n, "--sequence-input")))
            .chain(opts.absent_inputs.iter().map(|n| (n, "--absent-input")));
        for (name, flag) in bound {
            if !g.input.iter().any(|i| &i.name == name) {
                return Err(NncError::Model(format!(
                    "'{name}' is not an input of the model ({flag})"
                )));
            }
        }
        for vi in &g.input {
            if self.names.contains_key(&vi.name) {
                continue; // an initializer listed as input (IR < 4): a constant
            }
            self.origins
                .insert(vi.name.clone(), format!("graph input '{}'", vi.name));
            if let Some(t) = opts.frozen_inputs.get(&vi.name) {
                let id = self
                    .graph
                    .add_value(vi.name.clone(), t.ty(), Some(t.clone()));
                self.names.insert(vi.name.clone(), id);
                continue;
            }
            let ty = vi.r#type.as_ref().and_then(|t| t.value.as_ref());
            let id = self.import_input(vi, ty, opts)?;
            self.names.insert(vi.name.clone(), id);
        }
        Ok(())
    }

    /// Binds one graph input of type `ty`: a tensor becomes an input of infer(), a
    /// sequence one input per element (`NAME[k]`, as --sequence-input shapes it), an
    /// optional its element, or nothing at all when --absent-input empties it.
    fn import_input(
        &mut self,
        vi: &ValueInfoProto,
        ty: Option<&type_proto::Value>,
        opts: &ImportOptions,
    ) -> Result<ValueId> {
        let err = |m: String| NncError::Model(format!("input '{}': {m}", vi.name));
        match ty {
            Some(type_proto::Value::OptionalType(o)) => {
                if opts.absent_inputs.contains(&vi.name) {
                    return Ok(self.new_absent());
                }
                let inner = o.elem_type.as_ref().and_then(|t| t.value.as_ref());
                self.import_input(vi, inner, opts)
            }
            Some(type_proto::Value::SequenceType(s)) => {
                let Some(type_proto::Value::TensorType(t)) =
                    s.elem_type.as_ref().and_then(|t| t.value.as_ref())
                else {
                    return Err(err("only sequences of tensors are supported".into()));
                };
                let shapes = opts.sequence_inputs.get(&vi.name).ok_or_else(|| {
                    err(format!(
                        "a sequence; bind its length and element shapes with --sequence-input {}=D0,D1;D0,D1;...",
                        vi.name
                    ))
                })?;
                let mut elements = Vec::with_capacity(shapes.len());
                for (k, shape) in shapes.iter().enumerate() {
                    let name = format!("{}[{k}]", vi.name);
                    let ty = tensor_input_type(&name, t, Some(shape), opts)?;
                    opts.limits
                        .check_tensor(&ty)
                        .map_err(|m| NncError::Model(format!("input '{name}': {m}")))?;
                    let id = self.graph.add_value(name, ty, None);
                    self.graph.inputs.push(id);
                    elements.push(id);
                }
                Ok(self.new_sequence(elements))
            }
            Some(type_proto::Value::TensorType(t)) if self.symbolic => {
                let ty = self.symbolic_input_type(&vi.name, t, opts)?;
                opts.limits.check_tensor(&ty).map_err(err)?;
                let id = self.graph.add_value(vi.name.clone(), ty, None);
                self.graph.inputs.push(id);
                Ok(id)
            }
            Some(type_proto::Value::TensorType(t)) => {
                let ty = tensor_input_type(&vi.name, t, opts.input_shapes.get(&vi.name), opts)?;
                opts.limits.check_tensor(&ty).map_err(err)?;
                let id = self.graph.add_value(vi.name.clone(), ty, None);
                self.graph.inputs.push(id);
                Ok(id)
            }
            _ => Err(err(
                "only tensor, sequence and optional inputs are supported".into(),
            )),
        }
    }

    /// A placeholder value standing for the sequence `elements`.
    fn new_sequence(&mut self, elements: Vec<ValueId>) -> ValueId {
        let placeholder = self.graph.add_value(
            "sequence".into(),
            TensorType::new(DType::I64, vec![0]),
            Some(Tensor::from_vec(&[0], Vec::<i64>::new())),
        );
        self.sequences.insert(placeholder, elements);
        placeholder
    }

    /// A placeholder value standing for an empty optional.
    fn new_absent(&mut self) -> ValueId {
        let placeholder = self.graph.add_value(
            "empty optional".into(),
            TensorType::new(DType::I64, vec![0]),
            Some(Tensor::from_vec(&[0], Vec::<i64>::new())),
        );
        self.absent.insert(placeholder);
        placeholder
    }

    /// Graph outputs become outputs of infer(): a tensor as itself, a sequence as one
    /// output per element (`NAME[k]`), an empty optional as none.
    fn import_outputs(&mut self, g: &GraphProto) -> Result<()> {
        for vi in &g.output {
            let id = *self.names.get(&vi.name).ok_or_else(|| {
                NncError::Model(format!("graph output '{}' is never produced", vi.name))
            })?;
            if id == POISON || self.absent.contains(&id) {
                continue;
            }
            if self.graph.value(id).dim_elements.is_some() {
                return Err(NncError::Model(format!(
                    "graph output '{}' is computed from extents set at run time; \
                     such an output is not supported yet",
                    vi.name
                )));
            }
            if let Some(elements) = self.sequences.get(&id).cloned() {
                for (k, v) in elements.into_iter().enumerate() {
                    let v = self.distinct_output(v, &vi.name);
                    self.graph.values[v.0].name = format!("{}[{k}]", vi.name);
                    self.graph.outputs.push(v);
                }
                continue;
            }
            // The ABI reports outputs by their graph names, whatever produced them.
            self.graph.values[id.0].name = vi.name.clone();
            self.graph.outputs.push(id);
        }
        Ok(())
    }

    /// `v`, or a copy of it when renaming `v` after an output would rename a graph
    /// input or an earlier output (a sequence that repeats an element or passes an
    /// input through).
    fn distinct_output(&mut self, v: ValueId, output: &str) -> ValueId {
        if !self.graph.inputs.contains(&v) && !self.graph.outputs.contains(&v) {
            return v;
        }
        let ty = self.graph.ty(v).clone();
        let copy = self.graph.add_value(String::new(), ty.clone(), None);
        self.graph.nodes.push(Node {
            name: format!("{output}/copy"),
            onnx_op: "Identity".into(),
            op: Op::Reshape { shape: ty.shape },
            inputs: vec![Some(v)],
            outputs: vec![copy],
        });
        copy
    }

    fn import_node(&mut self, node: &NodeProto, index: usize) -> Result<()> {
        let name = if node.name.is_empty() {
            format!("{}{}_{index}", self.scope, node.op_type)
        } else {
            format!("{}{}", self.scope, node.name)
        };
        self.define_outputs(node, &name)?;
        let mut inputs = Vec::with_capacity(node.input.len());
        let mut poisoned = false;
        for i in &node.input {
            if i.is_empty() {
                inputs.push(None);
                continue;
            }
            match self.names.get(i) {
                Some(&POISON) => {
                    poisoned = true;
                    break;
                }
                Some(&id) => inputs.push(Some(id)),
                None => {
                    return Err(NncError::node(
                        &name,
                        &node.op_type,
                        format!("input '{i}' is not produced by any earlier node (nodes must be in topological order, without cycles)"),
                    ))
                }
            }
        }
        let default_domain = matches!(node.domain.as_str(), "" | "ai.onnx");
        if default_domain && !self.default_opset_known {
            return Err(NncError::node(
                &name,
                &node.op_type,
                "the model imports no ai.onnx opset (opset_import), so the version of this op is unknown",
            ));
        }
        let import = match node.domain.as_str() {
            "" | "ai.onnx" => super::ops::importer(&node.op_type),
            "com.microsoft" => super::ops::microsoft_importer(&node.op_type),
            "ai.onnx.preview" => super::ops::preview_importer(&node.op_type),
            "ai.onnx.preview.training" => super::ops::training_importer(&node.op_type),
            "ai.onnx.ml" => super::ops::ml_importer(&node.op_type),
            other => {
                return self.unsupported(node, &name, format!("domain '{other}' is not supported"));
            }
        };
        let Some(import) = import else {
            let reason = if super::ops::has_value_dependent_shape(&node.op_type) {
                "its output shape depends on the input values; nnc compiles static shapes only"
            } else {
                "no such operator in nnc"
            };
            return self.unsupported(node, &name, reason.to_string());
        };
        // Checked after the op itself, so an unknown op behind another one is still
        // reported (every unsupported node in one run); a known op over an unknown
        // operand cannot be typed and is skipped without a report of its own.
        if poisoned {
            self.poison(node);
            return Ok(());
        }
        if matches!(node.domain.as_str(), "" | "ai.onnx") {
            let types: Vec<Option<&TensorType>> = inputs
                .iter()
                .map(|v| {
                    v.filter(|v| !self.is_placeholder(*v))
                        .map(|v| self.graph.ty(v))
                })
                .collect();
            if let Err(message) = super::constraints::check_inputs(&node.op_type, &types) {
                return Err(NncError::node(&name, &node.op_type, message)
                    .with_excerpt(|| self.excerpt(node)));
            }
        }
        let attrs = Attributes::new(&node.attribute);
        let symbolic_operand =
            self.symbolic && inputs.iter().flatten().any(|v| self.is_symbolic(*v));
        let mut ctx = NodeCtx {
            b: self,
            node,
            name: &name,
            attrs,
            inputs,
        };
        let imported = if symbolic_operand {
            super::symbolic::import(&mut ctx, import)
        } else {
            import(&mut ctx)
        };
        match imported {
            Ok(()) => {}
            Err(ImportError::Unsupported(reason)) => return self.unsupported(node, &name, reason),
            Err(ImportError::Invalid(message)) => {
                return Err(NncError::node(&name, &node.op_type, message)
                    .with_excerpt(|| self.excerpt(node)))
            }
        }
        for o in node.output.iter().filter(|o| !o.is_empty()) {
            if !self.names.contains_key(o) {
                return Err(NncError::node(
                    &name,
                    &node.op_type,
                    format!("output '{o}' was not produced"),
                )
                .with_excerpt(|| self.excerpt(node)));
            }
        }
        Ok(())
    }

    /// Imports a subgraph (an If branch, a Loop or Scan body) inline: `inputs` bind its
    /// formal inputs in order, its nodes see every enclosing value by name (ONNX lexical
    /// scoping), and the names it defines are forgotten afterwards. `None` when one of
    /// its nodes could not be imported (reported as unsupported already).
    fn import_subgraph(
        &mut self,
        g: &GraphProto,
        scope: String,
        inputs: &[ValueId],
    ) -> Result<Option<Vec<ValueId>>> {
        if g.input.len() != inputs.len() {
            return Err(NncError::Model(format!(
                "subgraph '{}' declares {} inputs, {} are bound",
                g.name,
                g.input.len(),
                inputs.len()
            )));
        }
        let outer_names = self.names.clone();
        let outer_origins = self.origins.clone();
        let outer_scope = std::mem::replace(&mut self.scope, scope);
        let result = self.import_subgraph_body(g, inputs);
        self.names = outer_names;
        self.origins = outer_origins;
        self.scope = outer_scope;
        result
    }

    fn import_subgraph_body(
        &mut self,
        g: &GraphProto,
        inputs: &[ValueId],
    ) -> Result<Option<Vec<ValueId>>> {
        let base_dir = self.base_dir.clone();
        self.import_initializers(g, base_dir.as_deref())?;
        for (vi, &v) in g.input.iter().zip(inputs) {
            self.names.insert(vi.name.clone(), v);
            self.origins
                .insert(vi.name.clone(), format!("subgraph input '{}'", vi.name));
        }
        for (i, node) in g.node.iter().enumerate() {
            self.import_node(node, i)?;
        }
        let mut outputs = Vec::with_capacity(g.output.len());
        for vi in &g.output {
            match self.names.get(&vi.name) {
                Some(&POISON) => return Ok(None),
                Some(&v) => outputs.push(v),
                None => {
                    return Err(NncError::Model(format!(
                        "subgraph output '{}' is never produced",
                        vi.name
                    )))
                }
            }
        }
        Ok(Some(outputs))
    }

    /// Records `node` as the one producer of its outputs: a name already defined (by a
    /// graph input, an initializer, an earlier node or the node itself) is refused, as
    /// ONNX's single-assignment rule requires.
    fn define_outputs(&mut self, node: &NodeProto, name: &str) -> Result<()> {
        let this = format!("the output of node '{name}' ({})", node.op_type);
        for o in node.output.iter().filter(|o| !o.is_empty()) {
            if let Some(origin) = self.origins.get(o) {
                return Err(NncError::node(
                    name,
                    &node.op_type,
                    format!("output '{o}' would redefine {origin}; every name has one producer"),
                ));
            }
            self.origins.insert(o.clone(), this.clone());
        }
        Ok(())
    }

    fn unsupported(&mut self, node: &NodeProto, name: &str, reason: String) -> Result<()> {
        let excerpt = self.excerpt(node);
        self.unsupported.push(UnsupportedOp {
            node: name.to_string(),
            op: node.op_type.clone(),
            reason,
            excerpt,
        });
        self.poison(node);
        Ok(())
    }

    /// What diagnostics quote of `node`: its operands, with the types of those already
    /// imported, and its attributes.
    fn excerpt(&self, node: &NodeProto) -> NodeExcerpt {
        let operand = |name: &String| -> String {
            match self.names.get(name) {
                _ if name.is_empty() => String::new(),
                Some(&POISON) | None => name.clone(),
                Some(v) if self.absent.contains(v) => format!("{name}: absent"),
                Some(v) => match self.sequences.get(v) {
                    Some(elements) => format!("{name}: sequence of {}", elements.len()),
                    None => format!("{name}: {}", self.graph.ty(*v)),
                },
            }
        };
        NodeExcerpt {
            inputs: node.input.iter().map(operand).collect(),
            outputs: node.output.iter().map(operand).collect(),
            attributes: node.attribute.iter().map(format_attribute).collect(),
        }
    }

    /// Whether `v` has an extent set at run time or holds extents (a `Shape` of one).
    fn is_symbolic(&self, v: ValueId) -> bool {
        v != POISON && {
            let info = self.graph.value(v);
            info.ty.is_symbolic() || info.dim_elements.is_some()
        }
    }

    /// One symbol per declared range, in the ranges' order (the ABI's `dims`).
    fn declare_symbols(&mut self, model: &ModelProto, opts: &ImportOptions) -> Result<()> {
        for r in opts.ranges.iter().cloned() {
            if r.min == 0 || r.min > r.max || r.max > super::ranges::MAX_DIM_VALUE {
                return Err(NncError::Model(format!(
                    "dimension '{}': the range {}..{} must have 1 <= MIN <= MAX <= {}",
                    r.name,
                    r.min,
                    r.max,
                    super::ranges::MAX_DIM_VALUE
                )));
            }
            let named_by_an_input = || {
                use super::proto::tensor_shape_proto::dimension;
                let inputs = model.graph.as_ref().map_or(&[][..], |g| g.input.as_slice());
                inputs.iter().any(|i| match i.r#type.as_ref().and_then(|t| t.value.as_ref()) {
                    Some(type_proto::Value::TensorType(t)) => (t.shape.iter())
                        .flat_map(|s| &s.dim)
                        .any(|d| matches!(&d.value, Some(dimension::Value::DimParam(p)) if *p == r.name)),
                    _ => false,
                })
            };
            if r.site == super::ranges::DimSite::Param && !named_by_an_input() {
                return Err(NncError::Model(format!(
                    "dimension '{}': no input of the model has an axis with this name",
                    r.name
                )));
            }
            if self.graph.symbols.find(&r.name).is_some() {
                return Err(NncError::Model(format!(
                    "dimension '{}' is declared twice",
                    r.name
                )));
            }
            self.graph.symbols.declare(
                &r.name,
                crate::ir::dim::SymbolKind::Dim,
                r.min as i64,
                r.max as i64,
            );
            // What model_info lists, in the order of `nnc_run_options.dims`.
            self.graph.dims.push(crate::ir::run_dims::SymbolicDim {
                name: r.name.clone(),
                min: r.min,
                max: r.max,
            });
            self.symbol_sites.push(r.site);
        }
        Ok(())
    }

    /// Every declared dim is an axis of some input: a range naming none is a typo, or
    /// a name the model does not use.
    fn check_symbols_reach_inputs(&self) -> Result<()> {
        let g = &self.graph;
        for (s, symbol) in g.symbols.iter() {
            let reaches = (g.inputs.iter())
                .filter_map(|v| g.ty(*v).dims.as_ref())
                .any(|dims| dims.iter().any(|d| d.symbols().contains(&s)));
            if !reaches {
                return Err(NncError::Model(format!(
                    "dimension '{}': no input of the model has an axis with this name",
                    symbol.name
                )));
            }
        }
        Ok(())
    }

    /// An input's type with each axis a declared range covers a symbol: the axis the
    /// model names after a `--dim`, or the one a range in `--input-shape` gives.
    fn symbolic_input_type(
        &self,
        name: &str,
        t: &type_proto::Tensor,
        opts: &ImportOptions,
    ) -> Result<TensorType> {
        let at_max = opts.bound(
            &self
                .graph
                .symbols
                .maxima()
                .iter()
                .map(|&m| m as usize)
                .collect::<Vec<_>>(),
        );
        let ty = tensor_input_type(name, t, at_max.input_shapes.get(name), &at_max)?;
        let declared = t
            .shape
            .as_ref()
            .map(|s| s.dim.as_slice())
            .unwrap_or_default();
        let mut dims: Vec<Dim> = ty.shape.iter().map(|&d| Dim::constant(d as i64)).collect();
        for (i, site) in self.symbol_sites.iter().enumerate() {
            let symbol = Dim::symbol(crate::ir::SymbolId(i as u32));
            let sym_name = self.graph.symbols.name(crate::ir::SymbolId(i as u32));
            for (axis, d) in dims.iter_mut().enumerate() {
                let named = matches!(
                    declared.get(axis).and_then(|d| d.value.as_ref()),
                    Some(dimension::Value::DimParam(p)) if p == sym_name
                ) && !opts.input_shapes.contains_key(name);
                let at_site = matches!(site, super::ranges::DimSite::InputAxis { input, axis: a }
                    if input == name && *a == axis);
                if named || at_site {
                    *d = symbol.clone();
                }
            }
        }
        TensorType::from_dims(ty.dtype, dims, &self.graph.symbols)
            .map_err(|m| NncError::Model(format!("input '{name}': {m}")))
    }

    /// Whether `v` stands for a sequence or an empty optional rather than a tensor.
    fn is_placeholder(&self, v: ValueId) -> bool {
        self.sequences.contains_key(&v) || self.absent.contains(&v)
    }

    fn poison(&mut self, node: &NodeProto) {
        for o in &node.output {
            self.names.insert(o.clone(), POISON);
        }
    }
}

/// `name=value` for a diagnostic: numbers and strings in full (long lists cut short),
/// tensors and graphs by their type.
fn format_attribute(a: &super::proto::AttributeProto) -> String {
    fn list<T: std::fmt::Display>(items: &[T]) -> String {
        const SHOWN: usize = 8;
        let mut parts: Vec<String> = items.iter().take(SHOWN).map(T::to_string).collect();
        if items.len() > SHOWN {
            parts.push(format!("... {} in all", items.len()));
        }
        format!("[{}]", parts.join(", "))
    }
    fn tensor(t: &super::proto::TensorProto) -> String {
        let dims: Vec<String> = t.dims.iter().map(i64::to_string).collect();
        let dtype = DType::from_onnx(t.data_type)
            .map(|d| d.to_string())
            .unwrap_or_else(|| format!("type {}", t.data_type));
        format!("tensor {dtype}[{}]", dims.join(","))
    }
    let string = |s: &[u8]| format!("{:?}", String::from_utf8_lossy(s));
    // The declared type, else whichever field is set (some exporters leave it 0).
    let value = match a.r#type {
        1 => format!("{}", a.f),
        2 => a.i.to_string(),
        3 => string(&a.s),
        4 => a.t.as_ref().map_or_else(|| "tensor".into(), tensor),
        5 => "graph".into(),
        6 => list(&a.floats),
        7 => list(&a.ints),
        8 => list(&a.strings.iter().map(|s| string(s)).collect::<Vec<_>>()),
        9 => format!("{} tensors", a.tensors.len()),
        10 => format!("{} graphs", a.graphs.len()),
        _ if !a.ints.is_empty() => list(&a.ints),
        _ if !a.floats.is_empty() => list(&a.floats),
        _ if !a.s.is_empty() => string(&a.s),
        _ if a.t.is_some() => a.t.as_ref().map_or_else(String::new, tensor),
        _ if a.g.is_some() => "graph".into(),
        _ if a.f != 0.0 => format!("{}", a.f),
        _ => a.i.to_string(),
    };
    format!("{}={value}", a.name)
}

/// The type of a tensor input named `name`: the model's, with `shape` (from
/// --input-shape or --sequence-input) or --dim bindings filling what it leaves open.
fn tensor_input_type(
    name: &str,
    t: &type_proto::Tensor,
    shape: Option<&Vec<usize>>,
    opts: &ImportOptions,
) -> Result<TensorType> {
    let err = |m: String| NncError::Model(format!("input '{name}': {m}"));
    let dtype = DType::from_onnx(t.elem_type)
        .ok_or_else(|| err(format!("unsupported element type {}", t.elem_type)))?;
    if let Some(shape) = shape {
        check_declared_shape(t, shape).map_err(err)?;
        return Ok(TensorType::new(dtype, shape.clone()));
    }
    let dims = t
        .shape
        .as_ref()
        .map(|s| s.dim.as_slice())
        .unwrap_or_default();
    if t.shape.is_none() {
        return Err(err(format!(
            "the shape is unknown; bind it with --input-shape {}=D0,D1,...",
            name
        )));
    }
    let mut shape = Vec::with_capacity(dims.len());
    for (axis, d) in dims.iter().enumerate() {
        let v = match &d.value {
            Some(dimension::Value::DimValue(v)) if *v >= 0 => *v as usize,
            Some(dimension::Value::DimParam(p)) if opts.dims.contains_key(p) => opts.dims[p],
            Some(dimension::Value::DimParam(p)) => {
                return Err(err(format!(
                    "dimension {axis} is symbolic ('{p}'); bind it with --dim {p}=VALUE (or --dim {p}=MIN..MAX to set it at run time) or --input-shape {}=D0,D1,...",
                    name
                )))
            }
            _ => return Err(err(format!("dimension {axis} is unknown; bind it with --input-shape {}=D0,D1,...", name))),
        };
        shape.push(v);
    }
    Ok(TensorType::new(dtype, shape))
}

/// A bound shape must agree with what the model declares: the same rank, and the
/// same size on every axis the model fixes.
fn check_declared_shape(
    t: &type_proto::Tensor,
    shape: &[usize],
) -> std::result::Result<(), String> {
    let Some(declared) = &t.shape else {
        return Ok(());
    };
    if declared.dim.len() != shape.len() {
        return Err(format!(
            "the bound shape {shape:?} has rank {}, the model declares rank {}",
            shape.len(),
            declared.dim.len()
        ));
    }
    for (axis, (d, &n)) in declared.dim.iter().zip(shape).enumerate() {
        if let Some(dimension::Value::DimValue(v)) = d.value {
            if v >= 0 && v as usize != n {
                return Err(format!(
                    "the bound shape {shape:?} has {n} on axis {axis}, the model fixes {v}"
                ));
            }
        }
    }
    Ok(())
}

/// Why a node could not be imported: unsupported (reported with all others, import goes
/// on) or invalid (a broken model: import stops).
#[derive(Debug)]
pub enum ImportError {
    Unsupported(String),
    Invalid(String),
}

impl From<String> for ImportError {
    fn from(s: String) -> Self {
        ImportError::Invalid(s)
    }
}

impl From<super::tensor_proto::TensorProtoError> for ImportError {
    fn from(e: super::tensor_proto::TensorProtoError) -> Self {
        ImportError::Invalid(e.0)
    }
}

impl From<&str> for ImportError {
    fn from(s: &str) -> Self {
        ImportError::Invalid(s.to_string())
    }
}

pub type ImportResult<T = ()> = std::result::Result<T, ImportError>;

/// What an op importer sees of its node and how it adds IR.
pub struct NodeCtx<'a> {
    b: &'a mut GraphBuilder,
    pub node: &'a NodeProto,
    pub name: &'a str,
    pub attrs: Attributes<'a>,
    /// Resolved inputs; `None` for omitted optional ones.
    pub inputs: Vec<Option<ValueId>>,
}

impl NodeCtx<'_> {
    pub fn opset(&self) -> i64 {
        self.b.opset
    }

    pub fn base_dir(&self) -> Option<&Path> {
        self.b.base_dir.as_deref()
    }

    /// A tensor attribute holding weights (`Constant`'s value...): decoded with the
    /// model's folder for external data, and charged to `--max-weight-bytes`.
    pub fn weight_attribute(&self, t: &TensorProto) -> ImportResult<Tensor> {
        Ok(self.b.weight_from_proto(t, self.base_dir())?)
    }

    pub fn input(&self, i: usize) -> Option<ValueId> {
        self.inputs.get(i).copied().flatten()
    }

    pub fn required(&self, i: usize) -> ImportResult<ValueId> {
        self.input(i)
            .ok_or_else(|| ImportError::Invalid(format!("required input {i} is missing")))
    }

    pub fn ty(&self, v: ValueId) -> &TensorType {
        self.b.graph.ty(v)
    }

    pub fn input_ty(&self, i: usize) -> ImportResult<TensorType> {
        Ok(self.ty(self.required(i)?).clone())
    }

    pub fn constant(&self, v: ValueId) -> Option<&Tensor> {
        self.b.graph.constant(v)
    }

    /// The op of the node that computes `v` (`None` for inputs and constants).
    pub fn producer_op(&self, v: ValueId) -> Option<&Op> {
        let mut nodes = self.b.graph.nodes.iter().rev();
        nodes.find(|n| n.outputs.contains(&v)).map(|n| &n.op)
    }

    /// The inputs of the node that computes `v` (empty for inputs and constants).
    pub fn producer_inputs(&self, v: ValueId) -> Vec<Option<ValueId>> {
        let mut nodes = self.b.graph.nodes.iter().rev();
        (nodes.find(|n| n.outputs.contains(&v))).map_or(vec![], |n| n.inputs.clone())
    }

    /// Records that `shape` holds the whole shape of `v`, whose extents only the run
    /// knows.
    pub fn note_run_shape(&mut self, shape: ValueId, v: ValueId) {
        self.b.run_shapes.insert(shape, v);
    }

    /// The value whose whole run-time shape `shape` holds (see [`Self::note_run_shape`]).
    pub fn run_shape_of(&self, shape: ValueId) -> Option<ValueId> {
        self.b.run_shapes.get(&shape).copied()
    }

    /// The count of rows concatenated from values of `counts` (see
    /// [`GraphBuilder::row_sums`]): the one recorded first, else `count`, recorded.
    pub fn shared_row_sum(
        &mut self,
        counts: Vec<(Option<ValueId>, usize)>,
        count: ValueId,
    ) -> ValueId {
        *self.b.row_sums.entry(counts).or_insert(count)
    }

    /// Gives `v` the run-time extents `e`.
    pub fn set_run_extent(&mut self, v: ValueId, e: RunExtent) {
        self.b.graph.values[v.0].run_extent = Some(e);
    }

    /// A bound on every element of the integer value `v` the model itself puts (a
    /// constant, a Min with one, a ReduceMin over a Concat holding one: `min(300, n)`),
    /// through reshapes and casts; `None` when none is found.
    pub fn upper_bound(&self, v: ValueId) -> Option<i64> {
        self.upper_bound_within(v, 16)
    }

    fn upper_bound_within(&self, v: ValueId, depth: usize) -> Option<i64> {
        if let Some(t) = self.constant(v) {
            return t
                .dtype()
                .is_int()
                .then(|| t.to_i64_vec().into_iter().max())?;
        }
        let depth = depth.checked_sub(1)?;
        let inputs = self.producer_inputs(v);
        let of = |i: usize| inputs.get(i).copied().flatten();
        let bound = |i: usize| of(i).and_then(|x| self.upper_bound_within(x, depth));
        match self.producer_op(v)? {
            Op::Reshape { .. } | Op::Unary(crate::ops::UnaryOp::Identity) => bound(0),
            Op::Cast { to: DType::I64 } if of(0).is_some_and(|x| self.ty(x).dtype.is_int()) => {
                bound(0)
            }
            Op::Binary(crate::ops::BinaryOp::Min) => match (bound(0), bound(1)) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            Op::Reduce(r) if r.kind == crate::ops::ReduceKind::Min => {
                // The least element is at most any element's bound.
                let x = of(0).filter(|x| self.ty(*x).numel() > 0)?;
                match self.producer_op(x) {
                    Some(Op::Concat { .. }) => (self.producer_inputs(x).iter().flatten())
                        .filter(|p| self.ty(**p).numel() > 0)
                        .filter_map(|p| self.upper_bound_within(*p, depth))
                        .min(),
                    _ => bound(0),
                }
            }
            Op::Concat { .. } => (0..inputs.len())
                .map(bound)
                .try_fold(i64::MIN, |m, b| Some(m.max(b?))),
            _ => None,
        }
    }

    /// The name `v` has in the model.
    pub fn value_name(&self, v: ValueId) -> &str {
        &self.b.graph.value(v).name
    }

    /// The extents of `v` only the run knows, if any (see [`RunExtent`]).
    pub fn run_extent(&self, v: ValueId) -> Option<&RunExtent> {
        self.b.graph.value(v).run_extent.as_ref()
    }

    /// An input that must be known at compile time (shapes, axes, pads...).
    ///
    /// A graph input whose values the node's declared output shape determines is
    /// compiled as holding them, and the run checks that it does (see
    /// [`super::implied_inputs`]).
    pub fn const_input(&self, i: usize, what: &str) -> ImportResult<Option<Tensor>> {
        match self.input(i) {
            None => Ok(None),
            Some(v) => match self.constant(v) {
                Some(t) => Ok(Some(t.clone())),
                None => self.implied_input(i, v, what).map(Some).ok_or_else(|| {
                    ImportError::Unsupported(format!(
                        "input {i} ({what}) is computed at run time; nnc needs it constant to keep shapes static"
                    ))
                }),
            },
        }
    }

    /// The values graph input `v` (the node's input `i`) must hold for the node to
    /// produce its declared output shape, recorded as a check for the run.
    fn implied_input(&self, i: usize, v: ValueId, what: &str) -> Option<Tensor> {
        if !self.b.scope.is_empty() || !self.b.graph.inputs.contains(&v) {
            return None;
        }
        let ty = self.ty(v).clone();
        let readable = matches!(ty.dtype, DType::I64 | DType::I32 | DType::F32 | DType::F64);
        if !readable || ty.rank() > 1 || ty.numel() > MAX_IMPLIED_ELEMENTS {
            return None;
        }
        let output = self.node.output.first()?;
        let declared = self.b.declared_shapes.get(output)?;
        let inputs: Vec<Option<Vec<usize>>> = (self.inputs.iter())
            .map(|x| x.map(|x| self.ty(x).shape.clone()))
            .collect();
        let shapes = super::implied_inputs::NodeShapes {
            inputs: &inputs,
            output: declared,
        };
        let (values, allowed, one_inferred) =
            super::implied_inputs::implied_values(&self.node.op_type, i, &self.attrs, &shapes)?;
        if values.len() != ty.numel() {
            return None;
        }
        self.b
            .input_guards
            .borrow_mut()
            .push(crate::ir::InputGuard {
                input: v,
                allowed,
                one_inferred,
                site: format!(
                    "node '{}' ({}) input {i} ({what})",
                    self.name, self.node.op_type
                ),
            });
        Some(Tensor::from_vec(&ty.shape, values).cast(ty.dtype))
    }

    /// Sizes no tensor may exceed and constant folding keeps to.
    pub fn limits(&self) -> &Limits {
        &self.b.limits
    }

    /// Refuses a constant an importer is about to compute itself (a window, a range...)
    /// when it would exceed the tensor or the constant-folding size limit: checked
    /// before it is allocated.
    pub fn check_computed_constant(&self, ty: &TensorType) -> ImportResult {
        self.b.limits.check_tensor(ty)?;
        Ok(self.b.limits.check_fold(ty)?)
    }

    /// Adds a constant value.
    pub fn constant_value(&mut self, name: &str, t: Tensor) -> ValueId {
        self.b.graph.add_value(name.to_string(), t.ty(), Some(t))
    }

    /// Adds an IR node (or folds it when every input is constant) and returns its outputs.
    pub fn emit(
        &mut self,
        op: Op,
        inputs: Vec<Option<ValueId>>,
        n_outputs: usize,
    ) -> ImportResult<Vec<ValueId>> {
        let types: Vec<Option<TensorType>> = inputs
            .iter()
            .map(|i| i.map(|v| self.ty(v).clone()))
            .collect();
        if types.iter().flatten().any(TensorType::is_symbolic) {
            let refs: Vec<Option<&TensorType>> = types.iter().map(Option::as_ref).collect();
            let mut cx = crate::ops::infer_dims::DimContext {
                symbols: &self.b.graph.symbols,
                checks: vec![],
            };
            let dims = crate::ops::infer_dims::infer_dims(&op, &refs, &mut cx)
                .map_err(ImportError::Unsupported)?;
            let checks = cx.checks;
            let outputs = self.emit_with_dims(op, inputs, dims)?;
            self.add_checks(checks);
            if outputs.len() < n_outputs {
                return Err(format!("{n_outputs} outputs expected").into());
            }
            return Ok(outputs);
        }
        let out_types = infer_types(&op, &types)?;
        if out_types.len() < n_outputs {
            return Err(ImportError::Invalid(format!(
                "{} produces {} outputs, {n_outputs} expected",
                op.name(),
                out_types.len()
            )));
        }
        // The one size check every computed value passes: past it, sizes and offsets
        // cannot overflow anywhere downstream.
        for ty in &out_types {
            self.b.limits.check_tensor(ty)?;
        }
        // DequantizeLinear of constant weights stays a node: the QDQ fusion pass turns
        // the layer it feeds into an integer one (`passes::qdq`), and constant folding
        // folds it afterwards where nothing fused.
        // A result past --max-fold-bytes is left to run in infer().
        let all_const = inputs.iter().flatten().all(|v| self.constant(*v).is_some())
            && !matches!(op, Op::DequantizeLinear { .. })
            && self.b.limits.may_fold(&out_types);
        if all_const {
            let args: Vec<Option<&Tensor>> = inputs
                .iter()
                .map(|i| i.and_then(|v| self.b.graph.constant(v)))
                .collect();
            if let Ok(results) = interp::eval_op(&op, &args) {
                let base = self.name.to_string();
                return Ok(results
                    .into_iter()
                    .enumerate()
                    .map(|(k, t)| {
                        self.b
                            .graph
                            .add_value(format!("{base}:{k}"), t.ty(), Some(t))
                    })
                    .collect());
            }
        }
        let outputs: Vec<ValueId> = out_types
            .into_iter()
            .enumerate()
            .map(|(k, ty)| {
                let name = match self.node.output.get(k) {
                    Some(n) if !n.is_empty() => n.clone(),
                    _ => format!("{}:{k}", self.name),
                };
                self.b.graph.add_value(name, ty, None)
            })
            .collect();
        let node = Node {
            name: self.name.to_string(),
            onnx_op: self.node.op_type.clone(),
            op,
            inputs,
            outputs: outputs.clone(),
        };
        // Downstream of a value whose extent only the run knows (see `ops::rows`).
        let extent = crate::ops::rows::output_extent(&self.b.graph, &node)
            .map_err(ImportError::Unsupported)?;
        if let Some(e) = extent {
            for o in &outputs {
                self.b.graph.values[o.0].run_extent = Some(e.clone());
            }
        }
        let op = &node.op;
        if let Some(counted) = op.counted_outputs() {
            for (k, axis, count) in counted.axes {
                let count = outputs[count];
                let e = &mut self.b.graph.values[outputs[k].0].run_extent;
                e.get_or_insert_with(|| RunExtent {
                    axes: vec![],
                    count,
                    whole_shape: counted.whole_shape,
                })
                .axes
                .push(axis);
            }
        }
        self.b.graph.nodes.push(node);
        Ok(outputs)
    }

    /// Renames `v` (an output this node emitted) after the ONNX output it binds.
    pub fn name_value(&mut self, v: ValueId, name: String) {
        self.b.graph.values[v.0].name = name;
    }

    /// The symbols extents are expressions over (empty for a static import).
    pub fn symbols(&self) -> &crate::ir::SymbolTable {
        &self.b.graph.symbols
    }

    /// Records facts the run must check (see [`crate::ir::dim::DimCheck`]), naming
    /// this node in each.
    pub fn add_checks(&mut self, checks: Vec<crate::ir::dim::DimCheck>) {
        for mut c in checks {
            c.what = format!("node '{}' ({}): {}", self.name, self.node.op_type, c.what);
            // One check per fact: the first node that needs it names it.
            let known =
                (self.b.graph.dim_checks.iter()).any(|k| k.expr == c.expr && k.zero == c.zero);
            if !known {
                self.b.graph.dim_checks.push(c);
            }
        }
    }

    /// Adds a node whose output axes are `dims` (what an importer computed from
    /// extents: a Reshape's target, an Expand's shape). The op's own attributes hold
    /// the extents at the ranges' maxima; the static inference checks them there.
    pub fn emit_with_dims(
        &mut self,
        op: Op,
        inputs: Vec<Option<ValueId>>,
        dims: Vec<Vec<Dim>>,
    ) -> ImportResult<Vec<ValueId>> {
        let types: Vec<Option<TensorType>> = inputs
            .iter()
            .map(|i| i.map(|v| self.ty(v).clone()))
            .collect();
        let at_max = infer_types(&op, &types)?;
        if at_max.len() != dims.len() {
            return Err(format!("{} outputs, {} with extents", at_max.len(), dims.len()).into());
        }
        let mut outputs = Vec::with_capacity(dims.len());
        for (k, (ty, d)) in at_max.into_iter().zip(dims).enumerate() {
            let ty = TensorType::from_dims(ty.dtype, d, &self.b.graph.symbols)
                .map_err(|m| format!("output {k}: {m}"))?;
            self.b.limits.check_tensor(&ty)?;
            let name = match self.node.output.get(k) {
                Some(n) if !n.is_empty() => n.clone(),
                _ => format!("{}:{k}", self.name),
            };
            outputs.push(self.b.graph.add_value(name, ty, None));
        }
        self.b.graph.nodes.push(Node {
            name: self.name.to_string(),
            onnx_op: self.node.op_type.clone(),
            op,
            inputs,
            outputs: outputs.clone(),
        });
        Ok(outputs)
    }

    /// The elements of the int64 value `v` as expressions: those it holds as extents,
    /// or its constant ones (`None` for data or a tensor of rank above 1).
    pub fn elements(&self, v: ValueId) -> Option<Vec<Dim>> {
        let info = self.b.graph.value(v);
        if let Some(e) = &info.dim_elements {
            return Some(e.clone());
        }
        let t = info.constant.as_ref()?;
        (t.dtype().is_int() && t.ty().rank() <= 1)
            .then(|| t.to_i64_vec().into_iter().map(Dim::constant).collect())
    }

    /// Binds output `k` to an int64 value of `shape` (`[]` or `[n]`) whose elements are
    /// `e`: a constant where every one is, else a value holding the expressions.
    pub fn bind_elements(&mut self, k: usize, dtype: DType, shape: Vec<usize>, e: Vec<Dim>) {
        let v = if let Some(c) = e.iter().map(Dim::as_const).collect::<Option<Vec<i64>>>() {
            let t = Tensor::from_vec(&shape, c).cast(dtype);
            self.constant_value(self.name, t)
        } else {
            let name = match self.node.output.get(k) {
                Some(n) if !n.is_empty() => n.clone(),
                _ => format!("{}:{k}", self.name),
            };
            let v = self
                .b
                .graph
                .add_value(name, TensorType::new(dtype, shape), None);
            self.b.graph.values[v.0].dim_elements = Some(e);
            v
        };
        self.bind_output(k, v);
    }

    /// Emits a single-output op.
    pub fn emit1(&mut self, op: Op, inputs: Vec<Option<ValueId>>) -> ImportResult<ValueId> {
        Ok(self.emit(op, inputs, 1)?[0])
    }

    /// Imports the subgraph `g` inline (see [`GraphBuilder::import_subgraph`]), its
    /// node names prefixed with this node's and `scope` (`If_0/then/`). A node inside
    /// that nnc cannot import makes this node unsupported too; a broken subgraph is
    /// invalid.
    pub fn import_subgraph(
        &mut self,
        g: &GraphProto,
        scope: &str,
        inputs: &[ValueId],
    ) -> ImportResult<Vec<ValueId>> {
        let scope = format!("{}/{scope}/", self.name);
        match self.b.import_subgraph(g, scope, inputs) {
            Ok(Some(outputs)) => Ok(outputs),
            Ok(None) => Err(ImportError::Unsupported(format!(
                "its subgraph '{}' holds a node nnc cannot import (listed separately)",
                g.name
            ))),
            Err(e) => Err(ImportError::Invalid(e.to_string())),
        }
    }

    /// Binds the node's ONNX output `k` to an IR value.
    pub fn bind_output(&mut self, k: usize, v: ValueId) {
        if let Some(name) = self.node.output.get(k).filter(|n| !n.is_empty()) {
            self.b.names.insert(name.clone(), v);
        }
    }

    pub fn bind_outputs(&mut self, vs: &[ValueId]) {
        for (k, v) in vs.iter().enumerate() {
            self.bind_output(k, *v);
        }
    }

    /// The graph imported so far.
    pub fn graph(&self) -> &Graph {
        &self.b.graph
    }

    /// The value an ONNX name is bound to in the current scope.
    pub fn value_named(&self, name: &str) -> Option<ValueId> {
        self.b.names.get(name).copied().filter(|&v| v != POISON)
    }

    /// Binds output `k` to a sequence of tensors (a placeholder value stands for it).
    pub fn bind_sequence(&mut self, k: usize, elements: Vec<ValueId>) {
        let placeholder = self.b.new_sequence(elements);
        self.bind_output(k, placeholder);
    }

    /// Binds output `k` to an empty optional.
    pub fn bind_absent(&mut self, k: usize) {
        let placeholder = self.b.new_absent();
        self.bind_output(k, placeholder);
    }

    /// Whether input `i` is an empty optional (or not given at all).
    pub fn is_absent(&self, i: usize) -> bool {
        self.input(i).is_none_or(|v| self.b.absent.contains(&v))
    }

    /// The elements of the sequence `v` stands for, if it stands for one.
    pub fn sequence_value(&self, v: ValueId) -> Option<Vec<ValueId>> {
        self.b.sequences.get(&v).cloned()
    }

    /// Whether `v` stands for an empty optional.
    pub fn absent_value(&self, v: ValueId) -> bool {
        self.b.absent.contains(&v)
    }

    /// The elements of input `i` when it is a sequence.
    pub fn sequence_input(&self, i: usize) -> Option<Vec<ValueId>> {
        self.input(i)
            .and_then(|v| self.b.sequences.get(&v).cloned())
    }
}
