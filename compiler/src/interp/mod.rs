//! The reference interpreter: plain Rust over [`Tensor`]s, the oracle for tests, constant
//! folding and calibration.
//!
//! Semantics follow the ONNX operator specification, cross-checked against
//! `onnx.reference` (numpy): integers wrap, integer division truncates toward zero,
//! f16/bf16 are computed in f32 (transcendental functions in f64) and rounded back once,
//! correctly. Every op returns an error message instead of panicking on bad input, and
//! [`eval_op`] checks its results against [`ops::infer_types`].
//!
//! One file per op family: [`elementwise`], [`linalg`], [`conv`], [`pool`], [`norm`],
//! [`reduce`], [`shape`], [`resize`]; [`scalar`] holds the element-level arithmetic.

use std::borrow::Cow;

use half::{bf16, f16};
use ndarray::ArrayD;

use crate::ir::{DType, Element, Graph, Node, Tensor, TensorType, ValueId};
use crate::ops::{self, Op};
use crate::with_tensor;

/// `match` over the numeric tensors computed natively (every integer type, f32, f64),
/// binding the array; anything else (f16, bf16, bool) goes to the fallback arm.
macro_rules! with_num {
    ($t:expr, $a:ident => $body:expr, _ => $other:expr) => {
        match $t {
            $crate::ir::Tensor::F32($a) => $body,
            $crate::ir::Tensor::F64($a) => $body,
            $crate::ir::Tensor::I8($a) => $body,
            $crate::ir::Tensor::I16($a) => $body,
            $crate::ir::Tensor::I32($a) => $body,
            $crate::ir::Tensor::I64($a) => $body,
            $crate::ir::Tensor::U8($a) => $body,
            $crate::ir::Tensor::U16($a) => $body,
            $crate::ir::Tensor::U32($a) => $body,
            $crate::ir::Tensor::U64($a) => $body,
            #[allow(unreachable_patterns)]
            _ => $other,
        }
    };
}

/// Like [`with_num!`] for the integer tensors only.
macro_rules! with_int {
    ($t:expr, $a:ident => $body:expr, _ => $other:expr) => {
        match $t {
            $crate::ir::Tensor::I8($a) => $body,
            $crate::ir::Tensor::I16($a) => $body,
            $crate::ir::Tensor::I32($a) => $body,
            $crate::ir::Tensor::I64($a) => $body,
            $crate::ir::Tensor::U8($a) => $body,
            $crate::ir::Tensor::U16($a) => $body,
            $crate::ir::Tensor::U32($a) => $body,
            $crate::ir::Tensor::U64($a) => $body,
            #[allow(unreachable_patterns)]
            _ => $other,
        }
    };
}

/// Binds two tensors of the same variant (the bracketed list names the accepted ones);
/// mismatched or unlisted pairs go to the fallback arm.
macro_rules! with_pair {
    ($a:expr, $b:expr, $x:ident, $y:ident => $body:expr, [$($v:ident),*], _ => $other:expr) => {
        match ($a, $b) {
            $(($crate::ir::Tensor::$v($x), $crate::ir::Tensor::$v($y)) => $body,)*
            #[allow(unreachable_patterns)]
            _ => $other,
        }
    };
}

mod conv;
mod elementwise;
mod indexing;
mod linalg;
mod norm;
mod pool;
mod quant;
mod recurrent;
mod reduce;
mod resize;
mod scalar;
mod shape;
mod value_dependent;

pub use elementwise::{bit_cast, cast, cast_codes};

/// Evaluates one op. `inputs` has `None` for omitted optional inputs.
///
/// The outputs' types are checked against [`ops::infer_types`]: a mismatch is reported
/// as an error (it would be an interpreter bug).
pub fn eval_op(op: &Op, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, String> {
    let outputs = eval_unchecked(op, inputs).map_err(|e| format!("{}: {e}", op.name()))?;
    let types: Vec<Option<TensorType>> = inputs.iter().map(|t| t.map(Tensor::ty)).collect();
    let expected = ops::infer_types(op, &types).map_err(|e| format!("{}: {e}", op.name()))?;
    let actual: Vec<TensorType> = outputs.iter().map(Tensor::ty).collect();
    // An extent the values decide may be anything up to its bound.
    let within_bounds = |(k, (a, e)): (usize, (&TensorType, &TensorType))| {
        let axes: Vec<usize> = (op.counted_outputs().into_iter())
            .flat_map(|c| c.axes.into_iter())
            .filter(|(o, _, _)| *o == k)
            .map(|(_, axis, _)| axis)
            .collect();
        a.dtype == e.dtype
            && a.rank() == e.rank()
            && (0..a.rank()).all(|d| {
                a.shape[d] == e.shape[d] || (axes.contains(&d) && a.shape[d] <= e.shape[d])
            })
    };
    let fits = actual.len() == expected.len()
        && actual.iter().zip(&expected).enumerate().all(within_bounds);
    if !fits {
        return Err(format!(
            "{}: interpreter produced {} but shape inference says {}",
            op.name(),
            list_types(&actual),
            list_types(&expected)
        ));
    }
    Ok(outputs)
}

fn list_types(types: &[TensorType]) -> String {
    let v: Vec<String> = types.iter().map(|t| t.to_string()).collect();
    v.join(", ")
}

fn eval_unchecked(op: &Op, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, String> {
    let x = || required(inputs, 0);
    let out = match op {
        Op::Unary(u) => elementwise::unary(*u, x()?)?,
        Op::Binary(b) => elementwise::binary(*b, x()?, required(inputs, 1)?)?,
        Op::Where => elementwise::where_(x()?, required(inputs, 1)?, required(inputs, 2)?)?,
        Op::Cast { to } => cast(x()?, *to),
        Op::BitCast { to } => bit_cast(x()?, *to)?,
        Op::CastCodes {
            to,
            saturate,
            rounding,
        } => cast_codes(x()?, *to, *saturate, *rounding),
        Op::MatMul(_) => linalg::matmul(x()?, required(inputs, 1)?)?,
        Op::Attention => {
            let mut scores = linalg::matmul(x()?, required(inputs, 1)?)?;
            if let Some(mask) = optional(inputs, 3) {
                scores = elementwise::binary(ops::BinaryOp::Add, &scores, mask)?;
            }
            let rank = scores.shape().len();
            let p = norm::softmax(&scores, rank - 1, false)?;
            linalg::matmul(&p, required(inputs, 2)?)?
        }
        Op::Gemm(g) => linalg::gemm(g, x()?, required(inputs, 1)?, optional(inputs, 2))?,
        Op::Conv(c) => conv::conv(c, x()?, required(inputs, 1)?, optional(inputs, 2))?,
        Op::ConvTranspose(c) => {
            conv::conv_transpose(c, x()?, required(inputs, 1)?, optional(inputs, 2))?
        }
        Op::Pool(p) => pool::pool(p, x()?)?,
        Op::Softmax { axis, log } => norm::softmax(x()?, *axis, *log)?,
        Op::LayerNorm { axis, epsilon } => norm::layer_norm(
            x()?,
            required(inputs, 1)?,
            optional(inputs, 2),
            *axis,
            *epsilon,
        )?,
        Op::Reduce(r) => reduce::reduce(r, x()?)?,
        Op::ArgReduce(a) => reduce::arg_reduce(a, x()?)?,
        Op::Reshape { shape } => shape::reshape(x()?, shape)?,
        Op::Transpose { perm } => shape::transpose(x()?, perm)?,
        Op::Concat { axis } => {
            let parts = (0..inputs.len())
                .map(|i| required(inputs, i))
                .collect::<Result<Vec<_>, _>>()?;
            shape::concat(&parts, *axis)?
        }
        Op::Slice {
            starts,
            steps,
            shape,
        } => shape::slice(x()?, starts, steps, shape)?,
        Op::Gather { axis } => shape::gather(x()?, required(inputs, 1)?, *axis)?,
        Op::Expand { shape } => shape::expand(x()?, shape)?,
        Op::Pad(p) => shape::pad(p, x()?)?,
        Op::Resize(r) => resize::resize(r, x()?)?,
        Op::GatherElements { axis } => {
            indexing::gather_elements(x()?, required(inputs, 1)?, *axis)?
        }
        Op::ScatterElements { axis, reduction } => indexing::scatter_elements(
            x()?,
            required(inputs, 1)?,
            required(inputs, 2)?,
            *axis,
            *reduction,
        )?,
        Op::ScatterND { reduction } => {
            indexing::scatter_nd(x()?, required(inputs, 1)?, required(inputs, 2)?, *reduction)?
        }
        Op::GatherND { batch_dims } => {
            indexing::gather_nd(x()?, required(inputs, 1)?, *batch_dims)?
        }
        Op::CumSum {
            axis,
            exclusive,
            reverse,
            product,
        } => indexing::cumsum(x()?, *axis, *exclusive, *reverse, *product)?,
        Op::TopK { axis, k, largest } => return indexing::top_k(x()?, *axis, *k, *largest),
        Op::RnnSequence { cell, reverse } => {
            return recurrent::rnn_sequence(
                *cell,
                x()?,
                required(inputs, 1)?,
                optional(inputs, 2),
                optional(inputs, 3),
                reverse,
            )
        }
        Op::ConcatRows { axis, parts } => {
            let values = (0..*parts)
                .map(|i| required(inputs, i))
                .collect::<Result<Vec<_>, _>>()?;
            let rows: usize = values.iter().map(|t| t.shape()[*axis]).sum();
            return Ok(vec![
                shape::concat(&values, *axis)?,
                Tensor::scalar(rows as i64),
            ]);
        }
        Op::FirstRows { axis, bound } => {
            let xt = x()?;
            let n = required(inputs, 2)?.to_i64_vec()[0].max(0) as usize;
            let rows = n.min(xt.shape()[*axis]).min(*bound);
            return Ok(vec![
                ops::rows::first_rows(xt, *axis, rows),
                Tensor::scalar(rows as i64),
            ]);
        }
        Op::TopKRunTime {
            axis,
            largest,
            max_k,
        } => {
            let k = required(inputs, 1)?.to_i64_vec()[0];
            let dim = x()?.shape()[*axis].min(*max_k);
            let k = usize::try_from(k)
                .ok()
                .filter(|&k| k <= dim)
                .ok_or_else(|| format!("k = {k} is outside [0, {dim}]"))?;
            let mut out = indexing::top_k(x()?, *axis, k, *largest)?;
            out.push(Tensor::scalar(k as i64));
            return Ok(out);
        }
        Op::ReduceRunTimeAxes { kind, keepdims, .. } => {
            let xt = x()?;
            let rank = xt.shape().len() as i64;
            let mut axes = (required(inputs, 1)?.to_i64_vec().iter())
                .map(|&a| {
                    let n = if a < 0 { a + rank } else { a };
                    (0..rank)
                        .contains(&n)
                        .then_some(n as usize)
                        .ok_or_else(|| format!("axis {a} is out of range for rank {rank}"))
                })
                .collect::<Result<Vec<usize>, String>>()?;
            let count = axes.len();
            axes.sort_unstable();
            axes.dedup();
            if axes.len() != count {
                return Err("the axes repeat an axis".into());
            }
            let attrs = ops::ReduceAttrs {
                kind: *kind,
                axes,
                keepdims: *keepdims,
            };
            let y = reduce::reduce(&attrs, xt)?;
            let shape: Vec<i64> = y.shape().iter().map(|&d| d as i64).collect();
            return Ok(vec![y, Tensor::from_vec(&[shape.len()], shape)]);
        }
        Op::DimValues { .. } => {
            return Err("DimValues needs the run's dims; the interpreter runs static graphs".into())
        }
        Op::ReshapeByAxes {
            axes_rank, shapes, ..
        } => {
            let rank = *axes_rank as i64;
            let mut mask = 0u64;
            for &a in &required(inputs, 1)?.to_i64_vec() {
                let n = if a < 0 { a + rank } else { a };
                if !(0..rank).contains(&n) || mask & (1 << n) != 0 {
                    return Err(format!("axis {a} is out of range or repeated"));
                }
                mask |= 1 << n;
            }
            let (_, shape) = (shapes.iter())
                .find(|(m, _)| *m == mask)
                .ok_or("these axes do not fit the input's shape")?;
            let y = x()?.reshape(shape);
            let s: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
            return Ok(vec![y, Tensor::from_vec(&[s.len()], s)]);
        }
        Op::Choose { shapes } => {
            let i = required(inputs, 0)?.to_i64_vec()[0];
            let n = shapes.len() as i64;
            let k = if i < 0 { i + n } else { i };
            let picked = (usize::try_from(k).ok())
                .filter(|&k| k < shapes.len() && shapes[k].is_some())
                .and_then(|k| optional(inputs, 1 + k))
                .ok_or_else(|| format!("index {i} picks no candidate"))?;
            let s: Vec<i64> = picked.shape().iter().map(|&d| d as i64).collect();
            return Ok(vec![picked.clone(), Tensor::from_vec(&[s.len()], s)]);
        }
        Op::SliceRunTime { .. } => {
            let ints = |i: usize| optional(inputs, i).map(Tensor::to_i64_vec);
            let positions = [ints(1), ints(2), ints(3), ints(4)];
            return value_dependent::slice_run_time(x()?, &positions);
        }
        Op::SplitRunTime { axis, .. } => {
            let sizes = required(inputs, 1)?.to_i64_vec();
            return value_dependent::split_run_time(x()?, *axis, &sizes);
        }
        Op::NonZero { transposed } => {
            let mut out = value_dependent::non_zero(x()?)?;
            if *transposed {
                out[0] = shape::transpose(&out[0], &[1, 0])?;
            }
            return Ok(out);
        }
        Op::Compress { axis } => {
            return value_dependent::compress(x()?, required(inputs, 1)?, *axis)
        }
        Op::Unique { axis, sorted } => return value_dependent::unique(x()?, *axis, *sorted),
        Op::NonMaxSuppression {
            center_point_box, ..
        } => {
            let limits = [
                optional(inputs, 2),
                optional(inputs, 3),
                optional(inputs, 4),
            ];
            return value_dependent::non_max_suppression(
                x()?,
                required(inputs, 1)?,
                limits,
                *center_point_box,
            );
        }
        Op::QuantizeLinear { axis, to } => {
            quant::quantize_linear(x()?, required(inputs, 1)?, optional(inputs, 2), *axis, *to)?
        }
        Op::DequantizeLinear { axis } => {
            quant::dequantize_linear(x()?, required(inputs, 1)?, optional(inputs, 2), *axis)?
        }
        Op::MatMulInteger => quant::matmul_integer(
            x()?,
            required(inputs, 1)?,
            optional(inputs, 2),
            optional(inputs, 3),
        )?,
        Op::ConvInteger(c) => quant::conv_integer(
            c,
            x()?,
            required(inputs, 1)?,
            optional(inputs, 2),
            optional(inputs, 3),
        )?,
        Op::QuantizeToPlanes(layout) => {
            quant::quantize_to_planes(layout, x()?, required(inputs, 1)?, required(inputs, 2)?)?
        }
        Op::PackPlanes(layout) => quant::pack_planes(layout, x()?, required(inputs, 1)?)?,
        Op::ConvU8S8 { conv, planes, .. } => quant::conv_u8s8(
            conv,
            planes,
            x()?,
            required(inputs, 1)?,
            required(inputs, 2)?,
            required(inputs, 4)?,
            required(inputs, 5)?,
        )?,
    };
    let out = match op {
        Op::Conv(_) | Op::Gemm(_) | Op::MatMul(_) => epilogue(op, out, inputs)?,
        Op::ConvU8S8 { requantize, .. } => {
            let y = epilogue(op, out, inputs)?;
            match requantize {
                None => y,
                Some(r) => quant::quantize_to_planes(
                    &r.layout,
                    &y,
                    &Tensor::scalar(r.inv_scale),
                    &Tensor::scalar(r.zero_point),
                )?,
            }
        }
        _ => out,
    };
    Ok(vec![out])
}

/// The fused epilogue of Conv, Gemm and MatMul: MatMul's bias (input 2), the residual
/// (input 3), then the activation.
fn epilogue(op: &Op, mut out: Tensor, inputs: &[Option<&Tensor>]) -> Result<Tensor, String> {
    use crate::ops::{Activation, BinaryOp, UnaryOp};
    if let (Op::MatMul(_), Some(bias)) = (op, optional(inputs, 2)) {
        out = elementwise::binary(BinaryOp::Add, &out, bias)?;
    }
    if let Some(r) = optional(inputs, 3) {
        out = elementwise::binary(BinaryOp::Add, &out, r)?;
    }
    Ok(match op.activation() {
        Activation::None => out,
        Activation::Silu => {
            let s = elementwise::unary(UnaryOp::Sigmoid, &out)?;
            elementwise::binary(BinaryOp::Mul, &out, &s)?
        }
        a => elementwise::unary(a.as_unary().expect("a unary activation"), &out)?,
    })
}

fn required<'a>(inputs: &[Option<&'a Tensor>], i: usize) -> Result<&'a Tensor, String> {
    inputs
        .get(i)
        .copied()
        .flatten()
        .ok_or_else(|| format!("missing required input {i}"))
}

fn optional<'a>(inputs: &[Option<&'a Tensor>], i: usize) -> Option<&'a Tensor> {
    inputs.get(i).copied().flatten()
}

// ---------------------------------------------------------------------------------------
// Shared helpers for the op families.

/// f16 and bf16 widened (exactly) to f32, the type the interpreter computes them in;
/// other tensors unchanged.
fn widen_half(t: &Tensor) -> Cow<'_, Tensor> {
    match t {
        Tensor::F16(a) => Cow::Owned(Tensor::F32(a.mapv(f16::to_f32))),
        Tensor::BF16(a) => Cow::Owned(Tensor::F32(a.mapv(bf16::to_f32))),
        _ => Cow::Borrowed(t),
    }
}

/// Rounds an f32 result back to `dtype` when that is f16 or bf16 (f32 → half rounding
/// is correct in `half`); other results are returned unchanged.
fn narrow_half(t: Tensor, dtype: DType) -> Tensor {
    match (t, dtype) {
        (Tensor::F32(a), DType::F16) => Tensor::F16(a.mapv(f16::from_f32)),
        (Tensor::F32(a), DType::BF16) => Tensor::BF16(a.mapv(bf16::from_f32)),
        (t, _) => t,
    }
}

/// The array inside `t` if its element type is `T`.
fn array_ref<T: Element>(t: &Tensor) -> Option<&ArrayD<T>> {
    with_tensor!(t, a => (a as &dyn std::any::Any).downcast_ref::<ArrayD<T>>())
}

/// The elements of a float tensor as f64 (exact); `None` for other types.
fn float_to_f64(t: &Tensor) -> Option<ArrayD<f64>> {
    Some(match t {
        Tensor::F64(a) => a.clone(),
        Tensor::F32(a) => a.mapv(f64::from),
        Tensor::F16(a) => a.mapv(f64::from),
        Tensor::BF16(a) => a.mapv(f64::from),
        _ => return None,
    })
}

/// Rounds f64 results to the float type `dtype`, once and correctly.
fn f64_to_float(a: ArrayD<f64>, dtype: DType) -> Result<Tensor, String> {
    Ok(match dtype {
        DType::F64 => Tensor::F64(a),
        DType::F32 => Tensor::F32(a.mapv(|v| v as f32)),
        DType::F16 => Tensor::F16(a.mapv(scalar::f16_of)),
        DType::BF16 => Tensor::BF16(a.mapv(scalar::bf16_of)),
        other => return Err(format!("expected a float type, got {other}")),
    })
}

/// The error for an op that does not accept `dtype`.
fn unsupported(dtype: DType) -> String {
    format!("unsupported element type {dtype}")
}

// ---------------------------------------------------------------------------------------
// Whole graphs.

/// A value's storage while a graph runs: constants are borrowed from the graph.
enum Slot<'g> {
    Empty,
    Borrowed(&'g Tensor),
    Owned(Tensor),
}

impl Slot<'_> {
    fn get(&self) -> Option<&Tensor> {
        match self {
            Slot::Empty => None,
            Slot::Borrowed(t) => Some(t),
            Slot::Owned(t) => Some(t),
        }
    }

    fn into_tensor(self) -> Option<Tensor> {
        match self {
            Slot::Empty => None,
            Slot::Borrowed(t) => Some(t.clone()),
            Slot::Owned(t) => Some(t),
        }
    }
}

/// Evaluates `graph` on its runtime `inputs` (in `graph.inputs` order) and returns the
/// values of `graph.outputs`. Intermediates are freed after their last use.
pub fn run_graph(graph: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, String> {
    if graph.sample_loop.is_some() {
        return crate::ir::run_dims::run_samples(graph, inputs, |one| run_one_graph(graph, one));
    }
    run_one_graph(graph, inputs)
}

fn run_one_graph(graph: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, String> {
    let slots = execute(graph, inputs, true)?;
    graph
        .outputs
        .iter()
        .map(|id| {
            let name = &graph.value(*id).name;
            let value = (slots[id.0].get())
                .ok_or_else(|| format!("graph output {name} was never computed"))?;
            let what = || format!("the interpreter's output '{name}' ({})", value.ty());
            crate::memory::check_fits(value.ty().byte_size(), &what)?;
            Ok(value.clone())
        })
        .collect()
}

/// Like [`run_graph`] but keeps and returns every value, indexed by `ValueId.0` (`None`
/// for values no node produced), for debugging and verification.
pub fn run_graph_all(graph: &Graph, inputs: &[Tensor]) -> Result<Vec<Option<Tensor>>, String> {
    Ok(execute(graph, inputs, false)?
        .into_iter()
        .map(Slot::into_tensor)
        .collect())
}

/// The node's op for the rows its inputs actually hold: a node computing row by row
/// over a run-time extent (see [`ops::rows`]) has shapes in its attributes at the
/// bound, which the actual extent replaces.
fn at_actual_rows<'n>(graph: &Graph, node: &'n Node, args: &[Option<&Tensor>]) -> Cow<'n, Op> {
    if let (Some(e), Op::Reshape { shape }) = (
        ops::rows::reshaped_extent(graph, &node.op, &node.inputs),
        &node.op,
    ) {
        let rows = args.first().copied().flatten().and_then(|t| {
            let x = node.inputs[0].and_then(|v| graph.value(v).run_extent.as_ref())?;
            t.shape().get(x.axes[0]).copied()
        });
        if let Some(rows) = rows {
            let mut shape = shape.clone();
            shape[e.axes[0]] = rows;
            return Cow::Owned(Op::Reshape { shape });
        }
    }
    if let (Op::Expand { .. }, [_, Some(like)]) = (&node.op, args) {
        // A fill taking the shape its input 1 actually has.
        return Cow::Owned(Op::Expand {
            shape: like.shape().to_vec(),
        });
    }
    let Ok(Some(form)) = ops::rows::row_form(graph, node) else {
        return Cow::Borrowed(&node.op);
    };
    let carrying = (form.input_axes.iter().zip(args)).find_map(|(a, t)| a.zip(*t));
    let rows = carrying.and_then(|(a, t)| t.shape().get(a).copied());
    let bound = (node.inputs.iter().zip(&form.input_axes))
        .find_map(|(v, a)| v.zip(*a))
        .and_then(|(v, a)| graph.ty(v).shape.get(a).copied());
    match (rows, bound) {
        (Some(rows), Some(bound)) => ops::rows::op_for_rows(&node.op, form.axis, bound, rows)
            .map_or(Cow::Borrowed(&node.op), Cow::Owned),
        _ => Cow::Borrowed(&node.op),
    }
}

/// Checks that the node's outputs, and one temporary as large as the largest of them
/// (most ops build a result through one intermediate array), can be allocated: the
/// interpreter's arrays allocate infallibly, so a value that does not fit would abort.
fn check_outputs_fit(graph: &Graph, node: &Node) -> Result<(), String> {
    let sizes = node.outputs.iter().map(|id| graph.ty(*id).byte_size());
    let largest = sizes.clone().max().unwrap_or(0);
    let total = sizes.fold(largest, usize::saturating_add);
    crate::memory::check_fits(total, &|| {
        let names: Vec<String> = (node.outputs.iter())
            .map(|id| format!("'{}' ({})", graph.value(*id).name, graph.ty(*id)))
            .collect();
        format!("the interpreter's value {}", names.join(", "))
    })
}

/// Refuses shape inputs holding values other than those the graph was compiled for
/// (see [`crate::ir::InputGuard`]), as the compiled code does.
fn check_input_guards(graph: &Graph, slots: &[Slot]) -> Result<(), String> {
    for g in &graph.input_guards {
        let Some(t) = slots[g.input.0].get() else {
            continue;
        };
        let values: Vec<i64> = t.f64_values().map(|x| x as i64).collect();
        if !g.admits(&values) {
            return Err(format!(
                "input '{}' holds {values:?}; {} was compiled for the values its declared \
                 output shape implies ({:?})",
                graph.value(g.input).name,
                g.site,
                g.allowed
            ));
        }
    }
    Ok(())
}

fn execute<'g>(graph: &'g Graph, inputs: &[Tensor], free: bool) -> Result<Vec<Slot<'g>>, String> {
    let mut slots: Vec<Slot<'g>> = graph
        .values
        .iter()
        .map(|v| v.constant.as_ref().map_or(Slot::Empty, Slot::Borrowed))
        .collect();
    bind_inputs(graph, inputs, &mut slots)?;
    check_input_guards(graph, &slots)?;
    let last_use = if free { last_uses(graph) } else { Vec::new() };
    for (index, node) in graph.nodes.iter().enumerate() {
        let context = || format!("node {} ({})", node.name, node.onnx_op);
        let args = node
            .inputs
            .iter()
            .map(|input| match input {
                None => Ok(None),
                Some(id) => slots[id.0].get().map(Some).ok_or_else(|| {
                    format!(
                        "{}: input {} is not available",
                        context(),
                        graph.value(*id).name
                    )
                }),
            })
            .collect::<Result<Vec<_>, _>>()?;
        check_outputs_fit(graph, node).map_err(|e| format!("{}: {e}", context()))?;
        let op = at_actual_rows(graph, node, &args);
        let results = eval_op(&op, &args).map_err(|e| format!("{}: {e}", context()))?;
        if results.len() < node.outputs.len() {
            return Err(format!(
                "{}: {} outputs expected, the op produced {}",
                context(),
                node.outputs.len(),
                results.len()
            ));
        }
        for (id, value) in node.outputs.iter().zip(results) {
            let declared = graph.ty(*id);
            // eval_op checked an extent the values decide against its bound.
            let bounded =
                graph.value(*id).run_extent.is_some() && value.shape().len() == declared.rank();
            if value.dtype() != declared.dtype
                || (value.shape() != declared.shape.as_slice() && !bounded)
            {
                return Err(format!(
                    "{}: output {} is {} but the graph declares {}",
                    context(),
                    graph.value(*id).name,
                    value.ty(),
                    declared
                ));
            }
            // With freeing on, a value nothing reads is dropped at once.
            let unread = free && last_use[id.0] == Lifetime::Unread;
            slots[id.0] = if unread {
                Slot::Empty
            } else {
                Slot::Owned(value)
            };
        }
        if free {
            for id in node.inputs.iter().flatten() {
                if last_use[id.0] == Lifetime::LastReadBy(index) {
                    if let Slot::Owned(_) = slots[id.0] {
                        slots[id.0] = Slot::Empty;
                    }
                }
            }
        }
    }
    Ok(slots)
}

fn bind_inputs<'g>(graph: &Graph, inputs: &[Tensor], slots: &mut [Slot<'g>]) -> Result<(), String> {
    if inputs.len() != graph.inputs.len() {
        return Err(format!(
            "the graph takes {} inputs, {} were given",
            graph.inputs.len(),
            inputs.len()
        ));
    }
    for (id, tensor) in graph.inputs.iter().zip(inputs) {
        let declared = graph.ty(*id);
        let what = || {
            format!(
                "the interpreter's copy of input '{}' ({})",
                graph.value(*id).name,
                tensor.ty()
            )
        };
        crate::memory::check_fits(tensor.ty().byte_size(), &what)?;
        if tensor.dtype() != declared.dtype || tensor.shape() != declared.shape.as_slice() {
            return Err(format!(
                "input {} must be {}, got {}",
                graph.value(*id).name,
                declared,
                tensor.ty()
            ));
        }
        slots[id.0] = Slot::Owned(tensor.clone());
    }
    Ok(())
}

/// How long a value must live while a graph runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Lifetime {
    /// No node reads it and it is not a graph output.
    Unread,
    /// Free it after this node ran.
    LastReadBy(usize),
    /// A graph output: kept to the end.
    Output,
}

fn last_uses(graph: &Graph) -> Vec<Lifetime> {
    let mut last = vec![Lifetime::Unread; graph.values.len()];
    for (index, node) in graph.nodes.iter().enumerate() {
        for id in node.inputs.iter().flatten() {
            last[id.0] = Lifetime::LastReadBy(index);
        }
    }
    for ValueId(i) in &graph.outputs {
        last[*i] = Lifetime::Output;
    }
    last
}
