//! Graph passes run between import and code generation (see [`crate::driver`]).
//!
//! A [`PassManager`] runs an ordered pipeline of named passes over the [`Graph`], each
//! a function rewriting it in place, and can dump the IR (the graph's `Display`) before
//! and after each pass. Every pass keeps the graph's invariants: nodes topologically
//! ordered, graph inputs and outputs (and so the ABI's tensor names) unchanged, and
//! types consistent with [`crate::ops::infer_types`]. A rewrite that replaces a chain
//! of nodes makes the new node produce the chain's last value, so a graph output never
//! changes identity; the dead remainder is removed by [`dce`].
//!
//! The default pipeline:
//! * [`const_fold`]: nodes whose inputs are all constant are evaluated with the
//!   reference interpreter (shape arithmetic chains included);
//! * [`cse`]: identical constants deduplicated by content, then nodes with the same
//!   op, attributes and inputs merged;
//! * [`views`]: Transposes that only move unit axes become Reshapes (views); 2-D ones
//!   read by a Gemm become its transA / transB;
//! * [`dead_taps`]: Conv kernel rows and columns that read only padding for every
//!   output (dilated convs on small maps) cut away, with the padding shifted;
//! * [`scale_operand`]: a scalar `Mul`/`Div` of a MatMul's result moved onto its
//!   smaller operand (attention scores scaled through the queries);
//! * [`attention`]: `MatMul(Softmax(MatMul(Q, Kᵀ) + mask), V)` becomes one
//!   `Attention`, computed a block of query rows at a time so the scores stay in cache;
//! * [`fold_affine`]: per-channel `Mul`/`Add` after a Conv (BatchNormalization after
//!   import) and per-column ones after a Gemm/MatMul folded into weights and bias,
//!   which turns `MatMul + Add(bias)` into one biased MatMul;
//! * [`gelu`]: the erf and tanh forms of GELU as exported (`x·0.5·(1+Erf(x/√2))`,
//!   `x·0.5·(1+Tanh(√(2/π)·(x+0.044715·x³)))` and their variants) recognized as one
//!   `Gelu`;
//! * [`small_powers`]: float `Pow(x, 2|3|4)` with a constant exponent become Muls;
//! * [`batch_gemm`]: float32 MatMul / Gemm nodes multiplying independent inputs by
//!   one constant weight become one GEMM over their stacked rows;
//! * [`tap_split`]: dilated convs whose outer taps reach only the map's edges become
//!   a sum of 1×1 convs over the outputs each tap reaches;
//! * [`fuse_epilogue`]: residual `Add`s and activations folded into the preceding
//!   Conv/Gemm/MatMul, computed in its epilogue;
//! * [`dce`]: nodes whose outputs nothing reads removed (also run after each rewrite).

pub mod attention;
pub mod batch_gemm;
pub mod const_fold;
pub mod cse;
pub mod dce;
pub mod dead_taps;
pub mod fold_affine;
pub mod fuse_epilogue;
pub mod gelu;
pub mod per_sample;
pub mod qdq;
pub mod scale_operand;
pub mod small_powers;
pub mod tap_split;
pub mod util;
pub mod views;

use crate::ir::Graph;
use crate::limits::Limits;

/// One graph pass: rewrites the graph in place, keeping to the limits; errors are
/// messages.
pub type PassFn = fn(&mut Graph, &Limits) -> Result<(), String>;

/// Why the pass pipeline could not be built or run.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    #[error("unknown pass '{name}' (known: {})", PASSES.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "))]
    Unknown { name: String },
    #[error("pass {pass}: {message}")]
    Failed { pass: String, message: String },
}

/// Every pass by name, in the default pipeline's order.
pub const PASSES: &[(&str, PassFn)] = &[
    ("qdq", |g, _| qdq::run(g)),
    ("const_fold", const_fold::run),
    ("cse", |g, _| cse::run(g)),
    ("views", |g, _| views::run(g)),
    ("dead_taps", |g, _| dead_taps::run(g)),
    ("scale_operand", |g, _| scale_operand::run(g)),
    ("attention", |g, _| attention::run(g)),
    ("fold_affine", |g, _| fold_affine::run(g)),
    ("gelu", |g, _| gelu::run(g)),
    ("small_powers", |g, _| small_powers::run(g)),
    ("batch_gemm", |g, _| batch_gemm::run(g)),
    ("tap_split", |g, _| tap_split::run(g)),
    ("fuse_epilogue", |g, _| fuse_epilogue::run(g)),
    ("dce", |g, _| dce::run(g)),
];

/// Passes that rewrite a conv by which of its taps reach the map, which depends on the
/// map's size.
const SIZE_DEPENDENT_PASSES: &[&str] = &["dead_taps", "tap_split"];

/// Looks a pass up by name.
pub fn pass(name: &str) -> Option<PassFn> {
    PASSES.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

/// Where [`PassManager`] dumps the IR.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Dump {
    #[default]
    Off,
    /// Before the first pass and after each one, to stderr.
    Stderr,
}

pub struct PassManager {
    pub pipeline: Vec<(String, PassFn)>,
    pub dump: Dump,
    /// Sizes the passes keep to (constant folding leaves bigger results to `infer`).
    pub limits: Limits,
}

impl Default for PassManager {
    fn default() -> Self {
        PassManager {
            pipeline: PASSES.iter().map(|(n, f)| (n.to_string(), *f)).collect(),
            dump: Dump::Off,
            limits: Limits::default(),
        }
    }
}

impl PassManager {
    /// The default pipeline without the passes whose rewrites depend on the planes'
    /// sizes (dead and split kernel taps): for models whose image size varies.
    pub fn for_any_plane_size() -> PassManager {
        let mut p = PassManager::default();
        p.pipeline
            .retain(|(n, _)| !SIZE_DEPENDENT_PASSES.contains(&n.as_str()));
        p
    }

    /// A pipeline of the named passes, in order; `"none"` (or empty) is no pass and
    /// `"default"` the default pipeline.
    pub fn from_list(list: &str) -> Result<PassManager, PassError> {
        let list = list.trim();
        if list == "default" {
            return Ok(PassManager::default());
        }
        let mut pipeline = vec![];
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if name == "none" {
                continue;
            }
            let f = pass(name).ok_or_else(|| PassError::Unknown {
                name: name.to_string(),
            })?;
            pipeline.push((name.to_string(), f));
        }
        Ok(PassManager {
            pipeline,
            dump: Dump::Off,
            limits: Limits::default(),
        })
    }

    /// Runs the pipeline; `after` is called with each pass's name and the graph it left.
    pub fn run_with(
        &self,
        graph: &mut Graph,
        mut after: impl FnMut(&str, &Graph),
    ) -> Result<(), PassError> {
        if self.dump == Dump::Stderr {
            eprintln!("; IR before passes ({} nodes)\n{graph}", graph.nodes.len());
        }
        for (name, f) in &self.pipeline {
            f(graph, &self.limits).map_err(|message| PassError::Failed {
                pass: name.clone(),
                message,
            })?;
            if self.dump == Dump::Stderr {
                eprintln!("; IR after {name} ({} nodes)\n{graph}", graph.nodes.len());
            }
            after(name, graph);
        }
        Ok(())
    }

    pub fn run(&self, graph: &mut Graph) -> Result<(), PassError> {
        self.run_with(graph, |_, _| {})
    }
}

/// Runs the default pipeline.
pub fn optimize(graph: &mut Graph) -> Result<(), PassError> {
    PassManager::default().run(graph)
}
