//! ONNX Einsum, parsed at import and decomposed into core ops:
//!
//! 1. per operand, a repeated label takes the diagonal (the two axes moved last,
//!    flattened, and every `n+1`-th element gathered);
//! 2. labels only one operand has and the output lacks are summed away (ReduceSum);
//! 3. operands are contracted left to right, each pair as one batched MatMul
//!    `[batch, M, K] @ [batch, K, N]` after Transpose + Reshape (labels both share and
//!    still need are the batch, labels both share and no longer need are K);
//! 4. what is left is summed and transposed into the output's order.
//!
//! An ellipsis stands for the same broadcast axes in every term (right-aligned, size-1
//! axes broadcast); without `->` the output is the ellipsis axes, then the labels that
//! occur once, in alphabetical order.

use super::build::{reshape, transpose};
use crate::ir::{Tensor, ValueId};
use crate::onnx::import::{ImportResult, NodeCtx};
use crate::ops::{Op, ReduceAttrs, ReduceKind, UnaryOp};

/// A letter (its ASCII code), or `ELLIPSIS + k` for the k-th broadcast ellipsis axis.
type Label = u32;
const ELLIPSIS: Label = 1000;

/// One side of the equation, as written: letters, and where the ellipsis sits.
struct Term {
    letters: Vec<Label>,
    /// Index into `letters` where `...` stands.
    ellipsis: Option<usize>,
}

fn parse_term(s: &str) -> Result<Term, String> {
    let mut letters = vec![];
    let mut ellipsis = None;
    let mut rest = s;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("...") {
            if ellipsis.is_some() {
                return Err(format!("term '{s}' has more than one ellipsis"));
            }
            ellipsis = Some(letters.len());
            rest = r;
            continue;
        }
        let c = rest.chars().next().expect("not empty");
        if !c.is_ascii_alphabetic() {
            return Err(format!("term '{s}' has '{c}', not a letter"));
        }
        letters.push(c as Label);
        rest = &rest[1..];
    }
    Ok(Term { letters, ellipsis })
}

impl Term {
    /// The labels of an operand of `rank` axes when the ellipsis spans `total` axes.
    fn labels(&self, rank: usize, total: usize) -> Result<Vec<Label>, String> {
        let Some(at) = self.ellipsis else {
            if rank != self.letters.len() {
                return Err(format!(
                    "{} labels for an operand of rank {rank}",
                    self.letters.len()
                ));
            }
            return Ok(self.letters.clone());
        };
        let spanned = rank.checked_sub(self.letters.len()).ok_or_else(|| {
            format!(
                "{} labels for an operand of rank {rank}",
                self.letters.len()
            )
        })?;
        let mut labels = self.letters[..at].to_vec();
        labels.extend((total - spanned..total).map(|k| ELLIPSIS + k as Label));
        labels.extend(&self.letters[at..]);
        Ok(labels)
    }
}

/// An intermediate result and the label of each of its axes.
struct Operand {
    v: ValueId,
    labels: Vec<Label>,
}

fn reduce_sum(ctx: &mut NodeCtx, x: Operand, drop: &[Label]) -> ImportResult<Operand> {
    let axes: Vec<usize> = (0..x.labels.len())
        .filter(|&i| drop.contains(&x.labels[i]))
        .collect();
    if axes.is_empty() {
        return Ok(x);
    }
    let v = ctx.emit1(
        Op::Reduce(ReduceAttrs {
            kind: ReduceKind::Sum,
            axes: axes.clone(),
            keepdims: false,
        }),
        vec![Some(x.v)],
    )?;
    let labels = (0..x.labels.len())
        .filter(|i| !axes.contains(i))
        .map(|i| x.labels[i])
        .collect();
    Ok(Operand { v, labels })
}

/// Takes the diagonal of every label the operand repeats.
fn diagonals(ctx: &mut NodeCtx, mut x: Operand) -> ImportResult<Operand> {
    loop {
        let labels = &x.labels;
        let Some((i, j)) = (0..labels.len())
            .flat_map(|i| (i + 1..labels.len()).map(move |j| (i, j)))
            .find(|&(i, j)| labels[i] == labels[j])
        else {
            return Ok(x);
        };
        let shape = ctx.ty(x.v).shape.clone();
        let n = shape[i];
        if shape[j] != n {
            return Err(
                format!("a repeated label spans axes of sizes {n} and {}", shape[j]).into(),
            );
        }
        let others: Vec<usize> = (0..shape.len()).filter(|&a| a != i && a != j).collect();
        let mut perm = others.clone();
        perm.extend([i, j]);
        let moved = transpose(ctx, x.v, perm)?;
        let mut flat: Vec<usize> = others.iter().map(|&a| shape[a]).collect();
        flat.push(n * n);
        let flat_v = reshape(ctx, moved, flat.clone())?;
        let picks: Vec<i64> = (0..n as i64).map(|k| k * (n as i64 + 1)).collect();
        let picks = ctx.constant_value("einsum_diagonal", Tensor::from_vec(&[n], picks));
        let v = ctx.emit1(
            Op::Gather {
                axis: flat.len() - 1,
            },
            vec![Some(flat_v), Some(picks)],
        )?;
        let mut labels: Vec<Label> = others.iter().map(|&a| x.labels[a]).collect();
        labels.push(x.labels[i]);
        x = Operand { v, labels };
    }
}

/// Broadcasts size-1 axes of `x` to `dims` (the size of each of its labels overall).
fn broadcast(ctx: &mut NodeCtx, x: Operand, dims: &[(Label, usize)]) -> ImportResult<Operand> {
    let shape = ctx.ty(x.v).shape.clone();
    let full: Vec<usize> = x
        .labels
        .iter()
        .map(|l| dims.iter().find(|(k, _)| k == l).map_or(1, |d| d.1))
        .collect();
    if full == shape {
        return Ok(x);
    }
    let v = ctx.emit1(Op::Expand { shape: full }, vec![Some(x.v)])?;
    Ok(Operand { v, ..x })
}

/// `a` and `b` as one operand with the labels in `keep` they have (batched MatMul).
fn contract(
    ctx: &mut NodeCtx,
    a: Operand,
    b: Operand,
    keep: &[Label],
    dims: &[(Label, usize)],
) -> ImportResult<Operand> {
    let unused = |x: &Operand, other: &Operand| -> Vec<Label> {
        x.labels
            .iter()
            .filter(|l| !other.labels.contains(l) && !keep.contains(l))
            .copied()
            .collect()
    };
    let (drop_a, drop_b) = (unused(&a, &b), unused(&b, &a));
    let a = reduce_sum(ctx, a, &drop_a)?;
    let b = reduce_sum(ctx, b, &drop_b)?;
    let a = broadcast(ctx, a, dims)?;
    let b = broadcast(ctx, b, dims)?;
    let shared: Vec<Label> = a
        .labels
        .iter()
        .filter(|l| b.labels.contains(l))
        .copied()
        .collect();
    let (batch, summed): (Vec<Label>, Vec<Label>) = shared.iter().partition(|l| keep.contains(l));
    let a_only: Vec<Label> = a
        .labels
        .iter()
        .filter(|l| !shared.contains(l))
        .copied()
        .collect();
    let b_only: Vec<Label> = b
        .labels
        .iter()
        .filter(|l| !shared.contains(l))
        .copied()
        .collect();
    let size = |ls: &[Label]| -> usize { ls.iter().map(|l| dim_of(dims, *l)).product() };
    let (nb, m, k, n) = (size(&batch), size(&a_only), size(&summed), size(&b_only));
    let arrange = |ctx: &mut NodeCtx, x: &Operand, order: Vec<Label>, shape: Vec<usize>| {
        let perm = order
            .iter()
            .map(|l| x.labels.iter().position(|k| k == l).expect("own label"))
            .collect();
        let t = transpose(ctx, x.v, perm)?;
        reshape(ctx, t, shape)
    };
    let av = arrange(
        ctx,
        &a,
        [&batch[..], &a_only, &summed].concat(),
        vec![nb, m, k],
    )?;
    let bv = arrange(
        ctx,
        &b,
        [&batch[..], &summed, &b_only].concat(),
        vec![nb, k, n],
    )?;
    let prod = ctx.emit1(Op::matmul(), vec![Some(av), Some(bv)])?;
    let labels = [&batch[..], &a_only, &b_only].concat();
    let shape = labels.iter().map(|l| dim_of(dims, *l)).collect();
    let v = reshape(ctx, prod, shape)?;
    Ok(Operand { v, labels })
}

fn dim_of(dims: &[(Label, usize)], l: Label) -> usize {
    dims.iter().find(|(k, _)| *k == l).map_or(1, |d| d.1)
}

pub fn einsum(ctx: &mut NodeCtx) -> ImportResult {
    let equation: String = ctx
        .attrs
        .string_opt("equation")?
        .ok_or("attribute 'equation' is required")?
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let (lhs, rhs) = match equation.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (equation.as_str(), None),
    };
    let terms = lhs
        .split(',')
        .map(parse_term)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("equation '{equation}': {e}"))?;
    let n_inputs = ctx.inputs.len();
    if terms.len() != n_inputs {
        return Err(format!(
            "equation '{equation}' has {} terms for {n_inputs} inputs",
            terms.len()
        )
        .into());
    }
    let mut inputs = Vec::with_capacity(n_inputs);
    for i in 0..n_inputs {
        inputs.push(ctx.required(i)?);
    }
    let dtype = ctx.ty(inputs[0]).dtype;
    if inputs.iter().any(|&v| ctx.ty(v).dtype != dtype) {
        return Err("all inputs must have the same element type".into());
    }
    // The ellipsis spans as many axes as the widest operand gives it.
    let mut total = 0;
    for (t, &v) in terms.iter().zip(&inputs) {
        if t.ellipsis.is_some() {
            total = total.max(ctx.ty(v).rank().saturating_sub(t.letters.len()));
        }
    }
    let mut operands = Vec::with_capacity(n_inputs);
    let mut dims: Vec<(Label, usize)> = vec![];
    for (t, &v) in terms.iter().zip(&inputs) {
        let shape = ctx.ty(v).shape.clone();
        let labels = t
            .labels(shape.len(), total)
            .map_err(|e| format!("equation '{equation}': {e}"))?;
        for (&l, &d) in labels.iter().zip(&shape) {
            match dims.iter_mut().find(|(k, _)| *k == l) {
                Some((_, have)) if *have == d || d == 1 => {}
                Some((_, have)) if *have == 1 => *have = d,
                Some((_, have)) => {
                    return Err(format!(
                        "equation '{equation}': a label spans sizes {have} and {d}"
                    )
                    .into())
                }
                None => dims.push((l, d)),
            }
        }
        operands.push(Operand { v, labels });
    }
    let ellipsis_labels: Vec<Label> = (0..total).map(|k| ELLIPSIS + k as Label).collect();
    let output: Vec<Label> = match rhs {
        Some(r) => {
            let t = parse_term(r).map_err(|e| format!("equation '{equation}': {e}"))?;
            let mut out = t.letters.clone();
            if let Some(at) = t.ellipsis {
                out.splice(at..at, ellipsis_labels.iter().copied());
            }
            for (i, l) in out.iter().enumerate() {
                if out[..i].contains(l) || !dims.iter().any(|(k, _)| k == l) {
                    return Err(format!(
                        "equation '{equation}': output label '{}' is repeated or in no input",
                        char::from_u32(*l).unwrap_or('?')
                    )
                    .into());
                }
            }
            out
        }
        None => {
            // Implicit output: the letters written exactly once, alphabetically.
            let mut written: Vec<Label> = terms
                .iter()
                .flat_map(|t| t.letters.iter().copied())
                .collect();
            written.sort_unstable();
            let count = |l: Label| written.iter().filter(|&&k| k == l).count();
            let mut single: Vec<Label> =
                written.iter().copied().filter(|&l| count(l) == 1).collect();
            single.dedup();
            [ellipsis_labels, single].concat()
        }
    };

    // Diagonals, then labels no one else needs.
    let label_sets: Vec<Vec<Label>> = operands.iter().map(|x| x.labels.clone()).collect();
    let mut reduced = Vec::with_capacity(operands.len());
    for (i, x) in operands.into_iter().enumerate() {
        let x = diagonals(ctx, x)?;
        let elsewhere = |l: &Label| {
            output.contains(l)
                || label_sets
                    .iter()
                    .enumerate()
                    .any(|(j, ls)| j != i && ls.contains(l))
        };
        let drop: Vec<Label> = x.labels.iter().filter(|l| !elsewhere(l)).copied().collect();
        reduced.push(reduce_sum(ctx, x, &drop)?);
    }
    let mut ops = reduced.into_iter();
    let mut acc = ops.next().ok_or("Einsum needs at least one input")?;
    let rest: Vec<Operand> = ops.collect();
    let later_labels: Vec<Vec<Label>> = (0..rest.len())
        .map(|k| {
            rest[k + 1..]
                .iter()
                .flat_map(|x| x.labels.clone())
                .collect()
        })
        .collect();
    for (b, later) in rest.into_iter().zip(later_labels) {
        let keep = [&output[..], &later].concat();
        acc = contract(ctx, acc, b, &keep, &dims)?;
    }
    let drop: Vec<Label> = acc
        .labels
        .iter()
        .filter(|l| !output.contains(l))
        .copied()
        .collect();
    let acc = reduce_sum(ctx, acc, &drop)?;
    let acc = broadcast(ctx, acc, &dims)?;
    let perm = output
        .iter()
        .map(|l| {
            acc.labels
                .iter()
                .position(|k| k == l)
                .expect("output label")
        })
        .collect();
    let mut y = transpose(ctx, acc.v, perm)?;
    if inputs.contains(&y) {
        // A graph output must be a value of its own, never an input passed through.
        y = ctx.emit1(Op::Unary(UnaryOp::Identity), vec![Some(y)])?;
    }
    ctx.bind_output(0, y);
    Ok(())
}
