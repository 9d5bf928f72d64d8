//! Sequence ops whose structure is static: every sequence's length and elements are
//! known at import, so a sequence is just a list of tensor values (bound to a
//! placeholder name) and the ops are list edits, Slices and a Concat. Positions and
//! split sizes must be constants. At the C ABI a sequence is one tensor per element
//! (`--sequence-input`, and `NAME[k]` outputs).

use crate::ir::{Tensor, ValueId};
use crate::onnx::attributes::normalize_axis;
use crate::onnx::import::{ImportError, ImportResult, NodeCtx};
use crate::onnx::proto::GraphProto;
use crate::ops::Op;

fn sequence(ctx: &NodeCtx, i: usize) -> ImportResult<Vec<ValueId>> {
    ctx.sequence_input(i)
        .ok_or_else(|| ImportError::Unsupported(format!("input {i} is not a sequence")))
}

/// A constant position input `i` (None when absent), wrapped into `0..=len` for an
/// insertion (`insert`) or `0..len` otherwise.
fn position(ctx: &NodeCtx, i: usize, len: usize, insert: bool) -> ImportResult<Option<usize>> {
    if ctx.input(i).is_none() {
        return Ok(None);
    }
    let t = ctx.const_input(i, "position")?.ok_or_else(|| {
        ImportError::Unsupported("a sequence position computed at run time".into())
    })?;
    let p = *t
        .to_i64_vec()
        .first()
        .ok_or("position must hold one value")?;
    let bound = len as i64 + insert as i64;
    let q = if p < 0 { p + len as i64 } else { p };
    if !(0..bound).contains(&q) {
        return Err(format!("position {p} is out of range for a sequence of {len}").into());
    }
    Ok(Some(q as usize))
}

pub fn sequence_empty(ctx: &mut NodeCtx) -> ImportResult {
    ctx.bind_sequence(0, vec![]);
    Ok(())
}

pub fn sequence_construct(ctx: &mut NodeCtx) -> ImportResult {
    let elements = (0..ctx.node.input.len())
        .map(|i| ctx.required(i))
        .collect::<ImportResult<Vec<_>>>()?;
    ctx.bind_sequence(0, elements);
    Ok(())
}

pub fn sequence_insert(ctx: &mut NodeCtx) -> ImportResult {
    let mut s = sequence(ctx, 0)?;
    let t = ctx.required(1)?;
    let at = position(ctx, 2, s.len(), true)?.unwrap_or(s.len());
    s.insert(at, t);
    ctx.bind_sequence(0, s);
    Ok(())
}

pub fn sequence_erase(ctx: &mut NodeCtx) -> ImportResult {
    let mut s = sequence(ctx, 0)?;
    if s.is_empty() {
        return Err("SequenceErase on an empty sequence".into());
    }
    let at = position(ctx, 1, s.len(), false)?.unwrap_or(s.len() - 1);
    s.remove(at);
    ctx.bind_sequence(0, s);
    Ok(())
}

pub fn sequence_at(ctx: &mut NodeCtx) -> ImportResult {
    let s = sequence(ctx, 0)?;
    let at = position(ctx, 1, s.len(), false)?.ok_or("input 'position' is required")?;
    ctx.bind_output(0, s[at]);
    Ok(())
}

pub fn sequence_length(ctx: &mut NodeCtx) -> ImportResult {
    let s = sequence(ctx, 0)?;
    let n = ctx.constant_value("sequence_length", Tensor::scalar(s.len() as i64));
    ctx.bind_output(0, n);
    Ok(())
}

pub fn concat_from_sequence(ctx: &mut NodeCtx) -> ImportResult {
    let s = sequence(ctx, 0)?;
    let first = *s.first().ok_or("ConcatFromSequence of an empty sequence")?;
    let rank = ctx.ty(first).rank();
    let new_axis = ctx.attrs.flag("new_axis", false)?;
    let axis = ctx
        .attrs
        .int_opt("axis")?
        .ok_or("attribute 'axis' is required")?;
    let axis = normalize_axis(axis, rank + new_axis as usize)?;
    let mut parts = vec![];
    for v in s {
        parts.push(if new_axis {
            let mut shape = ctx.ty(v).shape.clone();
            shape.insert(axis, 1);
            ctx.emit1(Op::Reshape { shape }, vec![Some(v)])?
        } else {
            v
        });
    }
    let y = ctx.emit1(Op::Concat { axis }, parts.into_iter().map(Some).collect())?;
    ctx.bind_output(0, y);
    Ok(())
}

pub fn split_to_sequence(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.required(0)?;
    let xt = ctx.ty(x).clone();
    let axis = normalize_axis(ctx.attrs.int("axis", 0)?, xt.rank())?;
    let len = xt.shape[axis];
    let (sizes, squeeze) = match ctx.input(1) {
        None => (vec![1; len], !ctx.attrs.flag("keepdims", true)?),
        Some(_) => {
            let t = ctx.const_input(1, "split")?.ok_or_else(|| {
                ImportError::Unsupported("split sizes computed at run time".into())
            })?;
            let v = t.to_i64_vec();
            let sizes: Vec<usize> = if t.shape().is_empty() {
                let chunk = usize::try_from(v[0])
                    .ok()
                    .filter(|&c| c > 0)
                    .ok_or("split must be positive")?;
                (0..len.div_ceil(chunk))
                    .map(|i| chunk.min(len - i * chunk))
                    .collect()
            } else {
                v.iter()
                    .map(|&c| usize::try_from(c).map_err(|_| "split sizes must be non-negative"))
                    .collect::<Result<_, _>>()?
            };
            let total = sizes.iter().try_fold(0usize, |t, &c| t.checked_add(c));
            if total != Some(len) {
                return Err(format!("split sizes {sizes:?} do not add up to {len}").into());
            }
            (sizes, false)
        }
    };
    let mut elements = vec![];
    let mut start = 0;
    for size in sizes {
        let mut shape = xt.shape.clone();
        shape[axis] = size;
        let mut starts = vec![0; xt.rank()];
        starts[axis] = start;
        let mut v = ctx.emit1(
            Op::Slice {
                starts,
                steps: vec![1; xt.rank()],
                shape: shape.clone(),
            },
            vec![Some(x)],
        )?;
        if squeeze {
            shape.remove(axis);
            v = ctx.emit1(Op::Reshape { shape }, vec![Some(v)])?;
        }
        elements.push(v);
        start += size;
    }
    ctx.bind_sequence(0, elements);
    Ok(())
}

/// SequenceMap: the body imported once per element, with element `k` of every sequence
/// input and the tensor inputs as they are; output `j` collects the body's output `j`.
pub fn sequence_map(ctx: &mut NodeCtx) -> ImportResult {
    let body: &GraphProto = ctx
        .attrs
        .graph_opt("body")?
        .ok_or("attribute 'body' (a graph) is required")?;
    let len = sequence(ctx, 0)?.len();
    let n_in = ctx.node.input.len();
    let mut per_input = vec![];
    for i in 0..n_in {
        let v = ctx.required(i)?;
        per_input.push(match ctx.sequence_value(v) {
            Some(s) if s.len() == len => Some(s),
            Some(s) => {
                return Err(
                    format!("input {i} holds {} elements, input 0 holds {len}", s.len()).into(),
                )
            }
            None => None,
        });
    }
    let mut outputs: Vec<Vec<ValueId>> = vec![vec![]; ctx.node.output.len()];
    for k in 0..len {
        let args: Vec<ValueId> = (0..n_in)
            .map(|i| match &per_input[i] {
                Some(s) => s[k],
                None => ctx.inputs[i].expect("checked above"),
            })
            .collect();
        let results = ctx.import_subgraph(body, &format!("iter{k}"), &args)?;
        if results.len() != outputs.len() {
            return Err(format!(
                "the body gives {} outputs, the node has {}",
                results.len(),
                outputs.len()
            )
            .into());
        }
        for (out, r) in outputs.iter_mut().zip(results) {
            out.push(r);
        }
    }
    for (j, elements) in outputs.into_iter().enumerate() {
        ctx.bind_sequence(j, elements);
    }
    Ok(())
}
