//! TreeEnsemble (ai.onnx.ml, opset 5): every tree of a static ensemble evaluated at
//! once, one level per step. The trees become a state machine over `states` = interior
//! nodes then leaves (a leaf steps to itself); a `[N, trees]` int64 state starts at
//! the roots and, as many times as the deepest tree has levels, gathers each state's
//! feature, threshold and comparison from constant tables, compares and picks the
//! true or false successor (Where). The final leaves gather rows of a constant
//! `[leaves, targets]` table (each leaf's weight in its target's column, the
//! aggregation's neutral value elsewhere) that are summed, averaged, or min/max
//! reduced over the trees.

use super::build::{binary, unary};
use crate::ir::{DType, Tensor, ValueId};
use crate::onnx::import::{ImportError, ImportResult, NodeCtx};
use crate::ops::{BinaryOp, Op, ReduceAttrs, ReduceKind, UnaryOp};

/// A node comparison, as `nodes_modes` numbers them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    Leq,
    Lt,
    Gte,
    Gt,
    Eq,
    Neq,
    Member,
}

impl Mode {
    fn from_code(code: i64) -> ImportResult<Mode> {
        Ok(match code {
            0 => Mode::Leq,
            1 => Mode::Lt,
            2 => Mode::Gte,
            3 => Mode::Gt,
            4 => Mode::Eq,
            5 => Mode::Neq,
            6 => Mode::Member,
            m => return Err(format!("node mode {m}: expected 0 to 6").into()),
        })
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Aggregate {
    Average,
    Sum,
    Min,
    Max,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum PostTransform {
    None,
    Softmax,
    Logistic,
}

/// Where a branch goes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Next {
    Node(usize),
    Leaf(usize),
}

/// One interior node.
#[derive(Clone, Debug)]
pub struct Branch {
    pub mode: Mode,
    pub feature: usize,
    pub threshold: f64,
    /// The set a `Member` node tests.
    pub members: Vec<f64>,
    pub if_true: Next,
    pub if_false: Next,
    pub missing_tracks_true: bool,
}

/// A static ensemble: the trees' roots, their interior nodes, and the leaves as
/// (target, weight).
pub struct Ensemble {
    pub roots: Vec<Next>,
    pub branches: Vec<Branch>,
    pub leaves: Vec<(usize, f64)>,
    pub n_targets: usize,
    pub aggregate: Aggregate,
    pub post: PostTransform,
    /// Thresholds compare in float64 (else float32).
    pub wide: bool,
}

pub fn tree_ensemble(ctx: &mut NodeCtx) -> ImportResult {
    let ensemble = read_tree_ensemble(ctx)?;
    let x = ctx.required(0)?;
    let y = ensemble.emit(ctx, x)?;
    ctx.bind_output(0, y);
    Ok(())
}

/// Reads TreeEnsemble's attributes.
fn read_tree_ensemble(ctx: &NodeCtx) -> ImportResult<Ensemble> {
    let a = &ctx.attrs;
    let ints = |name: &str| -> ImportResult<Vec<i64>> {
        a.ints_opt(name)?
            .ok_or_else(|| format!("attribute '{name}' is required").into())
    };
    let tensor = |name: &str| -> ImportResult<Option<Tensor>> {
        match a.tensor_opt(name)? {
            Some(t) => Ok(Some(ctx.weight_attribute(t)?)),
            None => Ok(None),
        }
    };
    let index = |v: i64, len: usize, what: &str| -> ImportResult<usize> {
        usize::try_from(v)
            .ok()
            .filter(|&i| i < len)
            .ok_or_else(|| format!("{what} {v} is out of range (0..{len})").into())
    };
    let splits = tensor("nodes_splits")?.ok_or("attribute 'nodes_splits' is required")?;
    let modes = tensor("nodes_modes")?.ok_or("attribute 'nodes_modes' is required")?;
    let weights = tensor("leaf_weights")?.ok_or("attribute 'leaf_weights' is required")?;
    let features = ints("nodes_featureids")?;
    let (true_ids, false_ids) = (ints("nodes_truenodeids")?, ints("nodes_falsenodeids")?);
    let (true_leafs, false_leafs) = (ints("nodes_trueleafs")?, ints("nodes_falseleafs")?);
    let targets = ints("leaf_targetids")?;
    let roots = ints("tree_roots")?;
    let n_targets = usize::try_from(a.int("n_targets", -1)?)
        .map_err(|_| "attribute 'n_targets' is required")?;
    let missing = a
        .ints_opt("nodes_missing_value_tracks_true")?
        .unwrap_or_default();
    let m = features.len();
    let lens = [
        splits.len(),
        modes.len(),
        true_ids.len(),
        false_ids.len(),
        true_leafs.len(),
        false_leafs.len(),
    ];
    if lens.iter().any(|&l| l != m) || !(missing.is_empty() || missing.len() == m) {
        return Err("the nodes_* attributes must all have one entry per node".into());
    }
    if targets.len() != weights.len() {
        return Err("leaf_targetids and leaf_weights must have one entry per leaf".into());
    }
    let leaves: Vec<(usize, f64)> = targets
        .iter()
        .zip(weights.to_f64_vec())
        .map(|(&t, w)| Ok((index(t, n_targets, "leaf target")?, w)))
        .collect::<ImportResult<_>>()?;
    let l = leaves.len();
    let next = |id: i64, leaf: i64| -> ImportResult<Next> {
        Ok(if leaf != 0 {
            Next::Leaf(index(id, l, "leaf")?)
        } else {
            Next::Node(index(id, m, "node")?)
        })
    };
    // One set per Member node, in node order, each ended by a NaN.
    let member_values = tensor("membership_values")?
        .map(|t| t.to_f64_vec())
        .unwrap_or_default();
    let mut sets = member_values.split(|v| v.is_nan());
    let wide = splits.dtype() == DType::F64;
    let (splits, modes) = (splits.to_f64_vec(), modes.to_i64_vec());
    let mut branches = Vec::with_capacity(m);
    for i in 0..m {
        let mode = Mode::from_code(modes[i])?;
        let members = if mode == Mode::Member {
            sets.next()
                .ok_or("membership_values holds fewer sets than there are member nodes")?
                .to_vec()
        } else {
            vec![]
        };
        branches.push(Branch {
            mode,
            feature: usize::try_from(features[i]).map_err(|_| "negative feature id")?,
            threshold: splits[i],
            members,
            if_true: next(true_ids[i], true_leafs[i])?,
            if_false: next(false_ids[i], false_leafs[i])?,
            missing_tracks_true: missing.get(i).is_some_and(|&v| v != 0),
        });
    }
    let roots = roots
        .iter()
        .map(|&r| {
            let b = &branches[index(r, m, "tree root")?];
            // A tree that is a single leaf: both branches name it.
            Ok(match (b.if_true, b.if_false) {
                (Next::Leaf(t), Next::Leaf(f)) if t == f => Next::Leaf(t),
                _ => Next::Node(r as usize),
            })
        })
        .collect::<ImportResult<Vec<_>>>()?;
    let aggregate = match a.int("aggregate_function", 1)? {
        0 => Aggregate::Average,
        1 => Aggregate::Sum,
        2 => Aggregate::Min,
        3 => Aggregate::Max,
        f => return Err(format!("aggregate_function {f}: expected 0 to 3").into()),
    };
    let post = match a.int("post_transform", 0)? {
        0 => PostTransform::None,
        1 => PostTransform::Softmax,
        2 => PostTransform::Logistic,
        p => {
            return Err(ImportError::Unsupported(format!(
                "TreeEnsemble post_transform {p} (SOFTMAX_ZERO or PROBIT)"
            )))
        }
    };
    Ok(Ensemble {
        roots,
        branches,
        leaves,
        n_targets,
        aggregate,
        post,
        wide,
    })
}

impl Ensemble {
    /// The number of comparisons on the longest root-to-leaf path.
    fn depth(&self) -> ImportResult<usize> {
        // 0: unvisited, 1: on the current path, 2: done.
        let mut state = vec![0u8; self.branches.len()];
        let mut depth = vec![0usize; self.branches.len()];
        fn visit(
            e: &Ensemble,
            i: usize,
            state: &mut [u8],
            depth: &mut [usize],
        ) -> ImportResult<usize> {
            match state[i] {
                1 => return Err(format!("the trees' nodes form a cycle through node {i}").into()),
                2 => return Ok(depth[i]),
                _ => {}
            }
            state[i] = 1;
            let mut d = 0;
            for next in [e.branches[i].if_true, e.branches[i].if_false] {
                if let Next::Node(j) = next {
                    d = d.max(visit(e, j, state, depth)?);
                }
            }
            state[i] = 2;
            depth[i] = d + 1;
            Ok(d + 1)
        }
        let mut deepest = 0;
        for root in &self.roots {
            if let Next::Node(r) = *root {
                deepest = deepest.max(visit(self, r, &mut state, &mut depth)?);
            }
        }
        Ok(deepest)
    }

    /// The state a branch leads to: nodes first, then leaves.
    fn state(&self, n: Next) -> i64 {
        match n {
            Next::Node(i) => i as i64,
            Next::Leaf(i) => (self.branches.len() + i) as i64,
        }
    }

    /// `[N, n_targets]` in x's type for x `[N, F]`.
    pub fn emit(&self, ctx: &mut NodeCtx, x: ValueId) -> ImportResult<ValueId> {
        let xt = ctx.ty(x).clone();
        if xt.rank() != 2 || !xt.dtype.is_float() {
            return Err(ImportError::Unsupported(format!(
                "tree ensemble input {xt}: expected float [N, F]"
            )));
        }
        let (n, features) = (xt.shape[0], xt.shape[1]);
        if let Some(b) = self.branches.iter().find(|b| b.feature >= features) {
            return Err(format!("feature id {} is out of range for X {xt}", b.feature).into());
        }
        let trees = self.roots.len();
        if trees == 0 {
            return Err("tree_roots is empty".into());
        }
        let cmp = if self.wide || xt.dtype == DType::F64 {
            DType::F64
        } else {
            DType::F32
        };
        let xc = if xt.dtype == cmp {
            x
        } else {
            ctx.emit1(Op::Cast { to: cmp }, vec![Some(x)])?
        };
        let roots: Vec<i64> = self.roots.iter().map(|&r| self.state(r)).collect();
        let roots = ctx.constant_value("tree_roots", Tensor::from_vec(&[1, trees], roots));
        let mut state = ctx.emit1(
            Op::Expand {
                shape: vec![n, trees],
            },
            vec![Some(roots)],
        )?;
        let depth = self.depth()?;
        if depth > 0 {
            let tables = self.tables(ctx, cmp);
            for _ in 0..depth {
                state = self.step(ctx, &tables, xc, state)?;
            }
        }
        let leaf_base =
            ctx.constant_value("tree_leaf_base", Tensor::scalar(self.branches.len() as i64));
        let leaf = binary(ctx, BinaryOp::Sub, state, leaf_base)?;
        self.aggregate(ctx, leaf, xt.dtype)
    }

    /// One level: every tree's state moves to its true or false successor.
    fn step(
        &self,
        ctx: &mut NodeCtx,
        t: &Tables,
        x: ValueId,
        state: ValueId,
    ) -> ImportResult<ValueId> {
        let at = |ctx: &mut NodeCtx, table: ValueId| {
            ctx.emit1(Op::Gather { axis: 0 }, vec![Some(table), Some(state)])
        };
        let feature = at(ctx, t.feature)?;
        let v = ctx.emit1(Op::GatherElements { axis: 1 }, vec![Some(x), Some(feature)])?;
        let threshold = at(ctx, t.threshold)?;
        let mut cond: Option<ValueId> = None;
        for &(mode, is_mode) in &t.modes {
            let c = match mode {
                Mode::Leq => binary(ctx, BinaryOp::LessOrEqual, v, threshold)?,
                Mode::Lt => binary(ctx, BinaryOp::Less, v, threshold)?,
                Mode::Gte => binary(ctx, BinaryOp::GreaterOrEqual, v, threshold)?,
                Mode::Gt => binary(ctx, BinaryOp::Greater, v, threshold)?,
                Mode::Eq => binary(ctx, BinaryOp::Equal, v, threshold)?,
                Mode::Neq => {
                    let eq = binary(ctx, BinaryOp::Equal, v, threshold)?;
                    unary(ctx, UnaryOp::Not, eq)?
                }
                Mode::Member => {
                    let mut any: Option<ValueId> = None;
                    for &member in &t.members {
                        let m = at(ctx, member)?;
                        let eq = binary(ctx, BinaryOp::Equal, v, m)?;
                        any = Some(match any {
                            Some(a) => binary(ctx, BinaryOp::Or, a, eq)?,
                            None => eq,
                        });
                    }
                    any.expect("a member node has a member column")
                }
            };
            let c = match is_mode {
                Some(table) => {
                    let is = at(ctx, table)?;
                    binary(ctx, BinaryOp::And, is, c)?
                }
                None => c,
            };
            cond = Some(match cond {
                Some(a) => binary(ctx, BinaryOp::Or, a, c)?,
                None => c,
            });
        }
        let mut cond = cond.expect("at least one mode");
        if let Some(missing) = t.missing {
            let nan = unary(ctx, UnaryOp::IsNaN, v)?;
            let tracks = at(ctx, missing)?;
            let go = binary(ctx, BinaryOp::And, nan, tracks)?;
            cond = binary(ctx, BinaryOp::Or, cond, go)?;
        }
        let if_true = at(ctx, t.if_true)?;
        let if_false = at(ctx, t.if_false)?;
        ctx.emit1(Op::Where, vec![Some(cond), Some(if_true), Some(if_false)])
    }

    /// The per-state constant tables.
    fn tables(&self, ctx: &mut NodeCtx, cmp: DType) -> Tables {
        let s = self.branches.len() + self.leaves.len();
        let pad = |mut v: Vec<f64>| {
            v.resize(s, 0.0);
            Tensor::from_vec(&[s], v).cast(cmp)
        };
        let feature: Vec<i64> = (0..s)
            .map(|i| self.branches.get(i).map_or(0, |b| b.feature as i64))
            .collect();
        let threshold = pad(self.branches.iter().map(|b| b.threshold).collect());
        let successor = |pick: fn(&Branch) -> Next| -> Vec<i64> {
            (0..s)
                .map(|i| match self.branches.get(i) {
                    Some(b) => self.state(pick(b)),
                    None => i as i64,
                })
                .collect()
        };
        let (if_true, if_false) = (successor(|b| b.if_true), successor(|b| b.if_false));
        let mut present: Vec<Mode> = vec![];
        for b in &self.branches {
            if !present.contains(&b.mode) {
                present.push(b.mode);
            }
        }
        let single = present.len() == 1;
        let modes = present
            .iter()
            .map(|&mode| {
                // With one mode every state uses it (leaves do not care).
                let table = (!single).then(|| {
                    let is: Vec<bool> = (0..s)
                        .map(|i| self.branches.get(i).is_some_and(|b| b.mode == mode))
                        .collect();
                    ctx.constant_value("tree_is_mode", Tensor::from_vec(&[s], is))
                });
                (mode, table)
            })
            .collect();
        // Member sets padded with NaN (equal to nothing) to the largest, one column each.
        let widest = self
            .branches
            .iter()
            .map(|b| b.members.len())
            .max()
            .unwrap_or(0);
        let members = (0..widest)
            .map(|k| {
                let column = pad(self
                    .branches
                    .iter()
                    .map(|b| b.members.get(k).copied().unwrap_or(f64::NAN))
                    .collect());
                ctx.constant_value("tree_members", column)
            })
            .collect();
        let missing = self
            .branches
            .iter()
            .any(|b| b.missing_tracks_true)
            .then(|| {
                let v: Vec<bool> = (0..s)
                    .map(|i| self.branches.get(i).is_some_and(|b| b.missing_tracks_true))
                    .collect();
                ctx.constant_value("tree_missing_tracks_true", Tensor::from_vec(&[s], v))
            });
        Tables {
            feature: ctx.constant_value("tree_features", Tensor::from_vec(&[s], feature)),
            threshold: ctx.constant_value("tree_thresholds", threshold),
            if_true: ctx.constant_value("tree_if_true", Tensor::from_vec(&[s], if_true)),
            if_false: ctx.constant_value("tree_if_false", Tensor::from_vec(&[s], if_false)),
            modes,
            members,
            missing,
        }
    }

    /// The leaves `[N, trees]` aggregated per target, post-transformed, in `dtype`.
    fn aggregate(&self, ctx: &mut NodeCtx, leaf: ValueId, dtype: DType) -> ImportResult<ValueId> {
        let acc = if dtype == DType::F64 {
            DType::F64
        } else {
            DType::F32
        };
        let neutral = match self.aggregate {
            Aggregate::Average | Aggregate::Sum => 0.0,
            Aggregate::Min => largest(dtype),
            Aggregate::Max => -largest(dtype),
        };
        let (l, t) = (self.leaves.len(), self.n_targets);
        let mut table = vec![neutral; l * t];
        for (i, &(target, weight)) in self.leaves.iter().enumerate() {
            table[i * t + target] = weight;
        }
        let table = ctx.constant_value(
            "tree_leaf_values",
            Tensor::from_vec(&[l, t], table).cast(acc),
        );
        let values = ctx.emit1(Op::Gather { axis: 0 }, vec![Some(table), Some(leaf)])?;
        let kind = match self.aggregate {
            Aggregate::Average | Aggregate::Sum => ReduceKind::Sum,
            Aggregate::Min => ReduceKind::Min,
            Aggregate::Max => ReduceKind::Max,
        };
        let mut y = ctx.emit1(
            Op::Reduce(ReduceAttrs {
                kind,
                axes: vec![1],
                keepdims: false,
            }),
            vec![Some(values)],
        )?;
        if self.aggregate == Aggregate::Average {
            let k = super::build::scalar(ctx, "tree_count", acc, 1.0 / self.roots.len() as f64);
            y = binary(ctx, BinaryOp::Mul, y, k)?;
        }
        y = match self.post {
            PostTransform::None => y,
            PostTransform::Softmax => ctx.emit1(
                Op::Softmax {
                    axis: 1,
                    log: false,
                },
                vec![Some(y)],
            )?,
            PostTransform::Logistic => unary(ctx, UnaryOp::Sigmoid, y)?,
        };
        if dtype != acc {
            y = ctx.emit1(Op::Cast { to: dtype }, vec![Some(y)])?;
        }
        Ok(y)
    }
}

/// The constant per-state tables one level reads.
struct Tables {
    feature: ValueId,
    threshold: ValueId,
    if_true: ValueId,
    if_false: ValueId,
    /// Each comparison in use, with its "state uses it" table unless it is the only one.
    modes: Vec<(Mode, Option<ValueId>)>,
    /// Column k of the member sets (NaN where a set has fewer members).
    members: Vec<ValueId>,
    missing: Option<ValueId>,
}

/// numpy's `finfo(dtype).max`, the reference's starting value for MIN and MAX.
fn largest(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::MAX,
        DType::F16 => 65504.0,
        DType::BF16 => 3.389_531_389_251_535_5e38,
        _ => f32::MAX as f64,
    }
}
