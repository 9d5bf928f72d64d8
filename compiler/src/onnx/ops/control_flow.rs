//! Control flow with static shapes: If, Loop and Scan imported by inlining their
//! subgraphs. An If whose condition is known at compile time keeps only the taken
//! branch; with a run-time condition both branches are imported and `Where` selects
//! their outputs. Loop and Scan are unrolled: each iteration imports the body again
//! with the loop-carried values bound, and the per-iteration outputs are stacked.

use crate::ir::{Tensor, TensorType, ValueId};
use crate::onnx::import::{ImportError, ImportResult, NodeCtx};
use crate::onnx::proto::GraphProto;
use crate::ops::Op;

/// A Loop that would run more iterations than this is not unrolled: the program would
/// grow without bound (an "infinite" loop has no trip count and a condition that stays
/// true).
const MAX_UNROLL: usize = 4096;

fn graph_attr<'a>(ctx: &NodeCtx<'a>, name: &str) -> ImportResult<&'a GraphProto> {
    Ok(ctx
        .attrs
        .graph_opt(name)?
        .ok_or_else(|| format!("attribute '{name}' (a graph) is required"))?)
}

/// The value of a one-element condition (bool, or any number: nonzero is true).
fn truth(t: &Tensor) -> ImportResult<bool> {
    match t.to_i64_vec().as_slice() {
        [v] => Ok(*v != 0),
        _ => Err(format!(
            "a condition must hold one element, found shape {:?}",
            t.shape()
        )
        .into()),
    }
}

pub fn if_op(ctx: &mut NodeCtx) -> ImportResult {
    let then_branch = graph_attr(ctx, "then_branch")?;
    let else_branch = graph_attr(ctx, "else_branch")?;
    let cond = ctx.required(0)?;
    for (g, which) in [(then_branch, "then_branch"), (else_branch, "else_branch")] {
        if g.output.len() != ctx.node.output.len() {
            return Err(format!(
                "{which} has {} outputs, the node {}",
                g.output.len(),
                ctx.node.output.len()
            )
            .into());
        }
    }
    if let Some(c) = ctx.constant(cond) {
        // Known at compile time: the other branch is never imported, so it may hold
        // anything nnc cannot compile.
        let (g, scope) = if truth(c)? {
            (then_branch, "then")
        } else {
            (else_branch, "else")
        };
        let outputs = ctx.import_subgraph(g, scope, &[])?;
        ctx.bind_outputs(&outputs);
        return Ok(());
    }
    let cond_ty = ctx.ty(cond).clone();
    if cond_ty.numel() != 1 {
        return Err(format!("the condition must hold one element, found {cond_ty}").into());
    }
    let then_out = ctx.import_subgraph(then_branch, "then", &[])?;
    let else_out = ctx.import_subgraph(else_branch, "else", &[])?;
    // Sequences are selected element by element, so both branches must give the same
    // number of elements; an optional must be full in both.
    let mut pairs: Vec<Vec<(ValueId, ValueId)>> = vec![];
    for (k, (&t, &e)) in then_out.iter().zip(&else_out).enumerate() {
        let differs = |what: String| {
            ImportError::Unsupported(format!(
                "the condition is computed at run time and output {k} differs between the \
                 branches ({what}); nnc keeps shapes static, so it can only select between \
                 outputs of one type and shape"
            ))
        };
        if ctx.absent_value(t) || ctx.absent_value(e) {
            return Err(differs("an empty optional".into()));
        }
        let list = match (ctx.sequence_value(t), ctx.sequence_value(e)) {
            (None, None) => vec![(t, e)],
            (Some(ts), Some(es)) if ts.len() == es.len() => ts.into_iter().zip(es).collect(),
            (ts, es) => {
                return Err(differs(format!(
                    "then {} elements, else {}",
                    ts.map_or("no sequence".into(), |s| s.len().to_string()),
                    es.map_or("no sequence".into(), |s| s.len().to_string())
                )))
            }
        };
        for &(t, e) in &list {
            let (tt, et) = (ctx.ty(t), ctx.ty(e));
            if tt != et && none_or_rows(ctx, t, e).is_none() {
                return Err(differs(format!("then {tt}, else {et}")));
            }
        }
        pairs.push(list);
    }
    // A scalar condition broadcasts against outputs of any shape, `[1]` would not.
    let cond = if cond_ty.rank() == 0 {
        cond
    } else {
        ctx.emit1(Op::Reshape { shape: vec![] }, vec![Some(cond)])?
    };
    for (k, list) in pairs.into_iter().enumerate() {
        let mut selected = vec![];
        for (t, e) in list {
            selected.push(if t == e {
                t
            } else if let Some(rows) = none_or_rows(ctx, t, e) {
                choose_rows(ctx, cond, rows)?
            } else {
                ctx.emit1(Op::Where, vec![Some(cond), Some(t), Some(e)])?
            });
        }
        if ctx.sequence_value(then_out[k]).is_some() {
            ctx.bind_sequence(k, selected);
        } else {
            ctx.bind_output(k, selected[0]);
        }
    }
    Ok(())
}

/// One branch's output holds no rows (a constant) and the other's rows the run counts:
/// a detector's "no boxes" branch against its NMS.
struct NoneOrRows {
    /// The counted value.
    rows: ValueId,
    /// Whether the then branch gives the rows.
    then_rows: bool,
    axis: usize,
}

/// The outputs `t` and `e` as [`NoneOrRows`], when they are that: of one dtype and
/// rank, one a constant of 0 rows along the axis the other's count runs along, their
/// other axes the same.
fn none_or_rows(ctx: &NodeCtx, t: ValueId, e: ValueId) -> Option<NoneOrRows> {
    let fits = |none: ValueId, rows: ValueId| -> Option<usize> {
        let (nt, rt) = (ctx.ty(none), ctx.ty(rows));
        ctx.constant(none)?;
        let extent = ctx.run_extent(rows).filter(|e| !e.whole_shape)?;
        let axis = crate::ops::rows::row_axis(rt, extent)?;
        let same_others = nt.rank() == rt.rank()
            && (0..nt.rank()).all(|a| a == axis || nt.shape[a] == rt.shape[a]);
        (nt.dtype == rt.dtype && same_others && nt.shape[axis] == 0).then_some(axis)
    };
    if let Some(axis) = fits(t, e) {
        return Some(NoneOrRows {
            rows: e,
            then_rows: false,
            axis,
        });
    }
    fits(e, t).map(|axis| NoneOrRows {
        rows: t,
        then_rows: true,
        axis,
    })
}

/// The counted rows when their branch is taken, none otherwise: their first
/// `cond ? all : 0` rows (or the reverse).
fn choose_rows(ctx: &mut NodeCtx, cond: ValueId, choice: NoneOrRows) -> ImportResult<ValueId> {
    let extent = ctx.run_extent(choice.rows).cloned().expect("counted rows");
    let bound = ctx.ty(choice.rows).shape[choice.axis] as i64;
    let all = ctx.constant_value("all_rows", Tensor::scalar(bound));
    let none = ctx.constant_value("no_rows", Tensor::scalar(0i64));
    let (when_true, when_false) = match choice.then_rows {
        true => (all, none),
        false => (none, all),
    };
    let n = ctx.emit1(
        Op::Where,
        vec![Some(cond), Some(when_true), Some(when_false)],
    )?;
    let outs = ctx.emit(
        Op::FirstRows {
            axis: choice.axis,
            bound: bound as usize,
        },
        vec![Some(choice.rows), Some(extent.count), Some(n)],
        2,
    )?;
    Ok(outs[0])
}

pub fn loop_op(ctx: &mut NodeCtx) -> ImportResult {
    let body = graph_attr(ctx, "body")?;
    let initial: Vec<ValueId> = (2..ctx.inputs.len())
        .map(|i| ctx.required(i))
        .collect::<Result<_, _>>()?;
    let n_carried = initial.len();
    if body.input.len() != 2 + n_carried || body.output.len() < 1 + n_carried {
        return Err(format!(
            "the body takes {} inputs and gives {} outputs; with {n_carried} loop-carried \
             values it must take {} and give at least {}",
            body.input.len(),
            body.output.len(),
            2 + n_carried,
            1 + n_carried
        )
        .into());
    }
    let n_scan = body.output.len() - 1 - n_carried;
    let trip_count = match ctx.input(0) {
        None => None,
        Some(m) => match ctx.constant(m) {
            Some(t) => Some(t.to_i64_vec().first().map_or(0, |&n| n.max(0)) as usize),
            None => {
                return Err(ImportError::Unsupported(
                    "the trip count (input 0) is computed at run time; nnc unrolls loops at \
                     compile time, so it must be constant"
                        .into(),
                ))
            }
        },
    };
    // Without a condition input the body's condition output is ignored (ONNX: the
    // loop runs `M` times, or forever).
    let cond_given = ctx.input(1).is_some();
    let mut cond = match ctx.input(1) {
        None => true,
        Some(c) => match ctx.constant(c) {
            Some(t) => truth(t)?,
            None => {
                return Err(ImportError::Unsupported(
                    "the loop condition (input 1) is computed at run time; nnc unrolls loops \
                     at compile time, so it must be constant"
                        .into(),
                ))
            }
        },
    };
    let more = |i: usize| trip_count.is_none_or(|m| i < m);
    let mut carried = initial;
    let mut scanned: Vec<Vec<ValueId>> = vec![vec![]; n_scan];
    let mut i = 0;
    while cond && more(i) {
        if i == MAX_UNROLL {
            return Err(ImportError::Unsupported(format!(
                "the loop would run more than {MAX_UNROLL} iterations; nnc unrolls \
                 loops at compile time"
            )));
        }
        let iteration = ctx.constant_value("iteration_num", Tensor::scalar(i as i64));
        // The body only runs while the condition holds.
        let cond_in = ctx.constant_value("cond_in", Tensor::scalar(true));
        let mut inputs = vec![iteration, cond_in];
        inputs.extend(&carried);
        let outputs = ctx.import_subgraph(body, &format!("iter{i}"), &inputs)?;
        carried = outputs[1..1 + n_carried].to_vec();
        for (k, s) in scanned.iter_mut().enumerate() {
            s.push(outputs[1 + n_carried + k]);
        }
        i += 1;
        if cond_given && more(i) {
            cond = match ctx.constant(outputs[0]) {
                Some(t) => truth(t)?,
                None => {
                    return Err(ImportError::Unsupported(format!(
                        "the loop condition (body output 0) is computed at run time in \
                         iteration {}; nnc unrolls loops at compile time and cannot stop \
                         at a condition known only at run time",
                        i - 1
                    )))
                }
            };
        }
    }
    let mut results = carried;
    for (k, elems) in scanned.iter().enumerate() {
        if elems.is_empty() {
            return Err(ImportError::Unsupported(format!(
                "the loop runs no iteration, so the shape of scan output {k} is unknown"
            )));
        }
        results.push(stack(ctx, elems, 0, k)?);
    }
    ctx.bind_outputs(&results);
    Ok(())
}

pub fn scan(ctx: &mut NodeCtx) -> ImportResult {
    let body = graph_attr(ctx, "body")?;
    let n_scan_in = usize::try_from(
        ctx.attrs
            .int_opt("num_scan_inputs")?
            .ok_or("attribute 'num_scan_inputs' is required")?,
    )
    .map_err(|_| "attribute 'num_scan_inputs' is negative")?;
    // Opset 8 puts an optional `sequence_lens` first and a batch axis on every input.
    let first = usize::from(ctx.opset() < 9);
    let inputs: Vec<ValueId> = (first..ctx.inputs.len())
        .map(|i| ctx.required(i))
        .collect::<Result<_, _>>()?;
    if n_scan_in == 0 || n_scan_in > inputs.len() {
        return Err(format!(
            "num_scan_inputs is {n_scan_in}, the node has {} inputs besides sequence_lens",
            inputs.len()
        )
        .into());
    }
    let (states, scanned) = inputs.split_at(inputs.len() - n_scan_in);
    if body.input.len() != inputs.len() || body.output.len() < states.len() {
        return Err(format!(
            "the body takes {} inputs and gives {} outputs; the node has {} states and \
             {n_scan_in} scan inputs",
            body.input.len(),
            body.output.len(),
            states.len()
        )
        .into());
    }
    let n_scan_out = body.output.len() - states.len();
    let results = if ctx.opset() < 9 {
        scan_batched(ctx, body, states, scanned, n_scan_out)?
    } else {
        let spec = ScanSpec::from_attrs(ctx, scanned, n_scan_out)?;
        let (mut finals, stacked) = unroll_scan(ctx, body, states, scanned, &spec, "")?;
        finals.extend(stacked);
        finals
    };
    ctx.bind_outputs(&results);
    Ok(())
}

/// Which axis of each scan input is iterated and which way, and where the
/// per-iteration outputs are stacked.
struct ScanSpec {
    input_axes: Vec<usize>,
    input_reverse: Vec<bool>,
    /// Not yet normalized: the range depends on the body's output rank.
    output_axes: Vec<i64>,
    output_reverse: Vec<bool>,
}

impl ScanSpec {
    fn from_attrs(ctx: &NodeCtx, scanned: &[ValueId], n_out: usize) -> ImportResult<ScanSpec> {
        let list = |name: &str, n: usize| -> ImportResult<Vec<i64>> {
            match ctx.attrs.ints_opt(name)? {
                None => Ok(vec![0; n]),
                Some(v) if v.len() == n => Ok(v),
                Some(v) => Err(format!("'{name}' has {} entries, {n} expected", v.len()).into()),
            }
        };
        let input_axes = list("scan_input_axes", scanned.len())?
            .iter()
            .zip(scanned)
            .map(|(&a, &x)| normalize(a, ctx.ty(x).rank(), "scan_input_axes"))
            .collect::<Result<_, _>>()?;
        Ok(ScanSpec {
            input_axes,
            input_reverse: reverse_flags(&list("scan_input_directions", scanned.len())?)?,
            output_axes: list("scan_output_axes", n_out)?,
            output_reverse: reverse_flags(&list("scan_output_directions", n_out)?)?,
        })
    }
}

fn reverse_flags(directions: &[i64]) -> ImportResult<Vec<bool>> {
    directions
        .iter()
        .map(|&d| match d {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(format!("scan direction {d} is neither 0 (forward) nor 1 (reverse)").into()),
        })
        .collect()
}

fn normalize(axis: i64, rank: usize, what: &str) -> ImportResult<usize> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(format!("{what}: axis {axis} is out of range for rank {rank}").into());
    }
    Ok(axis.rem_euclid(r) as usize)
}

/// Unrolls a scan (opset 9+ semantics): returns the final states and the stacked scan
/// outputs. `scope` prefixes the iterations' node names.
fn unroll_scan(
    ctx: &mut NodeCtx,
    body: &GraphProto,
    states: &[ValueId],
    scanned: &[ValueId],
    spec: &ScanSpec,
    scope: &str,
) -> ImportResult<(Vec<ValueId>, Vec<ValueId>)> {
    let lengths: Vec<usize> = scanned
        .iter()
        .zip(&spec.input_axes)
        .map(|(&x, &a)| ctx.ty(x).shape[a])
        .collect();
    let steps = lengths[0];
    if lengths.iter().any(|&l| l != steps) {
        return Err(format!("the scan inputs have different sequence lengths {lengths:?}").into());
    }
    if steps == 0 {
        return Err(ImportError::Unsupported(
            "the sequence is empty, so the shape of the scan outputs is unknown".into(),
        ));
    }
    let n_states = states.len();
    let n_out = body.output.len() - n_states;
    let mut states = states.to_vec();
    let mut elems: Vec<Vec<ValueId>> = vec![vec![]; n_out];
    for t in 0..steps {
        let mut inputs = states.clone();
        for (j, &x) in scanned.iter().enumerate() {
            let index = if spec.input_reverse[j] {
                steps - 1 - t
            } else {
                t
            };
            inputs.push(take(ctx, x, spec.input_axes[j], index)?);
        }
        let outputs = ctx.import_subgraph(body, &format!("{scope}iter{t}"), &inputs)?;
        states = outputs[..n_states].to_vec();
        for (k, e) in elems.iter_mut().enumerate() {
            e.push(outputs[n_states + k]);
        }
    }
    let mut stacked = Vec::with_capacity(n_out);
    for (k, mut e) in elems.into_iter().enumerate() {
        if spec.output_reverse[k] {
            e.reverse();
        }
        stacked.push(stack(ctx, &e, spec.output_axes[k], k)?);
    }
    Ok((states, stacked))
}

/// Opset-8 Scan: every input has a leading batch axis and scans along axis 1. Each batch
/// entry is unrolled on its own (the body sees unbatched values) and the results are
/// stacked back along axis 0.
fn scan_batched(
    ctx: &mut NodeCtx,
    body: &GraphProto,
    states: &[ValueId],
    scanned: &[ValueId],
    n_scan_out: usize,
) -> ImportResult<Vec<ValueId>> {
    let too_small = |x: &ValueId, rank: usize| ctx.ty(*x).rank() < rank;
    if states.iter().any(|x| too_small(x, 1)) || scanned.iter().any(|x| too_small(x, 2)) {
        return Err("opset-8 Scan needs a batch axis on every input and a scanned axis after                     it on the scan inputs"
            .into());
    }
    let all: Vec<ValueId> = states.iter().chain(scanned).copied().collect();
    let batch = ctx.ty(all[0]).shape[0];
    if all.iter().any(|&x| ctx.ty(x).shape[0] != batch) {
        return Err("the inputs disagree on the batch size (axis 0)".into());
    }
    let steps = ctx.ty(scanned[0]).shape[1];
    if let Some(lens) = ctx.input(0) {
        let Some(t) = ctx.constant(lens) else {
            return Err(ImportError::Unsupported(
                "sequence_lens (input 0) is computed at run time; nnc needs it constant".into(),
            ));
        };
        if t.to_i64_vec().iter().any(|&l| l != steps as i64) {
            return Err(ImportError::Unsupported(format!(
                "sequence_lens {:?} shorter than the scanned axis ({steps}) are not supported",
                t.to_i64_vec()
            )));
        }
    }
    let directions = match ctx.attrs.ints_opt("directions")? {
        None => vec![0; scanned.len()],
        Some(d) if d.len() == scanned.len() => d,
        Some(d) => {
            return Err(format!(
                "'directions' has {} entries, {} expected",
                d.len(),
                scanned.len()
            )
            .into())
        }
    };
    let spec = ScanSpec {
        input_axes: vec![0; scanned.len()],
        input_reverse: reverse_flags(&directions)?,
        output_axes: vec![0; n_scan_out],
        output_reverse: vec![false; n_scan_out],
    };
    let mut per_batch: Vec<Vec<ValueId>> = vec![vec![]; states.len() + n_scan_out];
    for b in 0..batch {
        let states_b = states
            .iter()
            .map(|&x| take(ctx, x, 0, b))
            .collect::<Result<Vec<_>, _>>()?;
        let scanned_b = scanned
            .iter()
            .map(|&x| take(ctx, x, 0, b))
            .collect::<Result<Vec<_>, _>>()?;
        let (finals, stacked) = unroll_scan(
            ctx,
            body,
            &states_b,
            &scanned_b,
            &spec,
            &format!("batch{b}/"),
        )?;
        for (acc, v) in per_batch.iter_mut().zip(finals.into_iter().chain(stacked)) {
            acc.push(v);
        }
    }
    per_batch
        .iter()
        .enumerate()
        .map(|(k, vs)| stack(ctx, vs, 0, k))
        .collect()
}

/// `x[.., index, ..]` along `axis`, the axis removed.
fn take(ctx: &mut NodeCtx, x: ValueId, axis: usize, index: usize) -> ImportResult<ValueId> {
    let shape = ctx.ty(x).shape.clone();
    let mut starts = vec![0; shape.len()];
    starts[axis] = index;
    let mut one = shape.clone();
    one[axis] = 1;
    let slice = ctx.emit1(
        Op::Slice {
            starts,
            steps: vec![1; shape.len()],
            shape: one,
        },
        vec![Some(x)],
    )?;
    let mut dropped = shape;
    dropped.remove(axis);
    ctx.emit1(Op::Reshape { shape: dropped }, vec![Some(slice)])
}

/// The per-iteration values of output `k` stacked along a new axis `axis` (negative
/// counts from the end of the stacked rank).
fn stack(ctx: &mut NodeCtx, elems: &[ValueId], axis: i64, k: usize) -> ImportResult<ValueId> {
    let ty: TensorType = ctx.ty(elems[0]).clone();
    if let Some(other) = elems.iter().map(|&e| ctx.ty(e)).find(|t| **t != ty) {
        return Err(ImportError::Unsupported(format!(
            "scan output {k} changes type between iterations ({ty}, then {other}); nnc \
             stacks them into one statically shaped tensor"
        )));
    }
    let axis = normalize(axis, ty.rank() + 1, "scan_output_axes")?;
    let mut shape = ty.shape.clone();
    shape.insert(axis, 1);
    let parts = elems
        .iter()
        .map(|&e| {
            ctx.emit1(
                Op::Reshape {
                    shape: shape.clone(),
                },
                vec![Some(e)],
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    if parts.len() == 1 {
        return Ok(parts[0]);
    }
    ctx.emit1(Op::Concat { axis }, parts.into_iter().map(Some).collect())
}
