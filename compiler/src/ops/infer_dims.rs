//! Symbolic shape inference: each op's output axes as [`Dim`] expressions of its
//! inputs' axes, for the graphs whose extents are set at run time. The static
//! inference ([`super::infer`]) decides types and checks operands; this adds what
//! varies. Where an op needs a fact the expressions cannot prove (two extents a
//! broadcast or a matrix product pairs being equal), the fact becomes a [`DimCheck`]
//! the run verifies before it writes anything.
//!
//! Ops whose attributes hold extents computed for one size (a Reshape's target, a
//! Slice's starts, an Expand's shape) have no rule here: their importers give their
//! output axes themselves, and over a symbolic input they are refused otherwise.

use super::{ConvAttrs, Op, PoolAttrs};
use crate::ir::dim::{Dim, DimCheck, SymbolTable};
use crate::ir::TensorType;

/// The facts symbolic inference reads and the checks it leaves.
pub struct DimContext<'a> {
    pub symbols: &'a SymbolTable,
    pub checks: Vec<DimCheck>,
}

type DimsResult = Result<Vec<Vec<Dim>>, String>;

impl DimContext<'_> {
    fn text(&self, d: &Dim) -> String {
        d.written(&|s| self.symbols.name(s).to_string())
    }

    /// `a` and `b` as one extent: equal where proven, else equal by a run-time check.
    fn same(&mut self, a: &Dim, b: &Dim, what: &str) -> Result<Dim, String> {
        if self.symbols.prove_eq(a, b) {
            return Ok(a.clone());
        }
        if let (Some(x), Some(y)) = (a.as_const(), b.as_const()) {
            return Err(format!("{what}: {x} and {y} differ"));
        }
        // A check no value in range passes is a model the ranges cannot run.
        let differ = (a.checked_sub(b))
            .and_then(|d| self.symbols.bounds(&self.symbols.simplify(&d)))
            .is_some_and(|r| r.min > 0 || r.max < 0);
        if differ {
            return Err(format!(
                "{what}: {} and {} are never equal within the declared ranges",
                self.text(a),
                self.text(b)
            ));
        }
        self.checks.push(DimCheck::equal(a, b, what)?);
        // The constant side, where there is one, keeps more static.
        Ok(if a.is_const() { a.clone() } else { b.clone() })
    }

    /// numpy broadcasting of two extents.
    fn broadcast(&mut self, a: &Dim, b: &Dim) -> Result<Dim, String> {
        let one = Dim::constant(1);
        if *a == one {
            return Ok(b.clone());
        }
        if *b == one {
            return Ok(a.clone());
        }
        let what = format!("broadcasting {} with {}", self.text(a), self.text(b));
        self.same(a, b, &what)
    }

    /// numpy broadcasting of any number of shapes.
    pub fn broadcast_all(&mut self, shapes: &[Vec<Dim>]) -> Result<Vec<Dim>, String> {
        let rank = shapes.iter().map(Vec::len).max().unwrap_or(0);
        let mut out = vec![Dim::constant(1); rank];
        for s in shapes {
            let off = rank - s.len();
            for (i, d) in s.iter().enumerate() {
                out[off + i] = self.broadcast(&out[off + i], d)?;
            }
        }
        Ok(out)
    }
}

fn overflow() -> String {
    "the extent arithmetic overflows".into()
}

/// A sliding window's output extent over `n`: `⌊(n + pads − span)/stride⌋ + 1`, or
/// with `ceil` rounded up and the last window starting inside the input or its
/// leading pad (as onnxruntime and torch count it).
pub fn window_dim(
    n: &Dim,
    pad_begin: usize,
    pad_end: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
    ceil: bool,
) -> Result<Dim, String> {
    let span = dilation
        .checked_mul(kernel.saturating_sub(1))
        .and_then(|s| s.checked_add(1))
        .ok_or_else(overflow)? as i64;
    let (pb, pe, s) = (
        pad_begin as i64,
        pad_end as i64,
        Dim::constant(stride as i64),
    );
    let room = n.add_const(pb + pe - span).ok_or_else(overflow)?;
    let steps = if ceil {
        room.ceil_div(&s)
    } else {
        room.floor_div(&s)
    };
    let out = steps.and_then(|d| d.add_const(1)).ok_or_else(overflow)?;
    if !ceil {
        return Ok(out);
    }
    if pe >= span {
        return Err(format!(
            "a ceil-mode window whose end padding {pe} reaches its extent {span}"
        ));
    }
    // With the end pad shorter than the window, dropping one window is always enough,
    // so the rule is `min(out, ⌈(n + pad_begin)/stride⌉)`.
    let starts = n
        .add_const(pb)
        .and_then(|d| d.ceil_div(&s))
        .ok_or_else(overflow)?;
    Dim::min_of(&[out, starts]).ok_or_else(overflow)
}

fn spatial_windows(
    x: &[Dim],
    kernel: &[usize],
    strides: &[usize],
    pads: &[usize],
    dilations: &[usize],
    ceil: bool,
) -> Result<Vec<Dim>, String> {
    let n = kernel.len();
    (0..n)
        .map(|i| {
            window_dim(
                &x[2 + i],
                pads[i],
                pads[n + i],
                kernel[i],
                strides[i],
                dilations[i],
                ceil,
            )
        })
        .collect()
}

/// The output axes of `op` over inputs of types `inputs` (at least one symbolic);
/// `Err` says why the op cannot take them.
pub fn infer_dims(op: &Op, inputs: &[Option<&TensorType>], cx: &mut DimContext) -> DimsResult {
    let dims = |i: usize| -> Result<Vec<Dim>, String> {
        inputs
            .get(i)
            .copied()
            .flatten()
            .map(TensorType::dims)
            .ok_or_else(|| format!("missing required input {i}"))
    };
    match op {
        Op::Unary(_)
        | Op::Cast { .. }
        | Op::BitCast { .. }
        | Op::CastCodes { .. }
        | Op::Softmax { .. }
        | Op::CumSum { .. }
        | Op::LayerNorm { .. } => Ok(vec![dims(0)?]),
        Op::Binary(_) => {
            let shapes = [dims(0)?, dims(1)?];
            Ok(vec![cx.broadcast_all(&shapes)?])
        }
        Op::Where => {
            let shapes = [dims(0)?, dims(1)?, dims(2)?];
            Ok(vec![cx.broadcast_all(&shapes)?])
        }
        Op::MatMul(_) => Ok(vec![matmul_dims(&dims(0)?, &dims(1)?, cx)?]),
        Op::Gemm(g) => {
            let (a, b) = (dims(0)?, dims(1)?);
            if a.len() != 2 || b.len() != 2 {
                return Err("Gemm needs matrices".into());
            }
            let (m, k) = if g.trans_a {
                (&a[1], &a[0])
            } else {
                (&a[0], &a[1])
            };
            let (k2, n) = if g.trans_b {
                (&b[1], &b[0])
            } else {
                (&b[0], &b[1])
            };
            cx.same(k, k2, "the inner axes of a matrix product")?;
            Ok(vec![vec![m.clone(), n.clone()]])
        }
        Op::Conv(c) => Ok(vec![conv_dims(&dims(0)?, &dims(1)?, c)?]),
        Op::Pool(p) => Ok(vec![pool_dims(&dims(0)?, p)?]),
        Op::Reduce(r) => {
            let x = dims(0)?;
            Ok(vec![reduced(&x, &r.axes, r.keepdims)])
        }
        Op::ArgReduce(a) => {
            let x = dims(0)?;
            Ok(vec![reduced(&x, &[a.axis], a.keepdims)])
        }
        Op::Transpose { perm } => {
            let x = dims(0)?;
            Ok(vec![perm.iter().map(|&p| x[p].clone()).collect()])
        }
        Op::Concat { axis } => {
            let parts: Vec<Vec<Dim>> = (0..inputs.len()).map(dims).collect::<Result<_, _>>()?;
            let mut out = parts[0].clone();
            let mut sum = Dim::zero();
            for p in &parts {
                for (a, d) in p.iter().enumerate() {
                    if a != *axis {
                        out[a] = cx.same(&out[a], d, "the axes Concat does not join")?;
                    }
                }
                sum = sum.checked_add(&p[*axis]).ok_or_else(overflow)?;
            }
            out[*axis] = sum;
            Ok(vec![out])
        }
        Op::Gather { axis } => {
            let (x, i) = (dims(0)?, dims(1)?);
            let mut out = x[..*axis].to_vec();
            out.extend(i);
            out.extend_from_slice(&x[axis + 1..]);
            Ok(vec![out])
        }
        Op::Attention => {
            // q [..., M, dk], k [..., dk, T] (transposed), v [..., T, dv].
            let (q, k, v) = (dims(0)?, dims(1)?, dims(2)?);
            let (r, kr, vr) = (q.len(), k.len(), v.len());
            if r < 2 || kr < 2 || vr < 2 {
                return Err("Attention needs matrices".into());
            }
            cx.same(&q[r - 1], &k[kr - 2], "the query and key widths")?;
            cx.same(&k[kr - 1], &v[vr - 2], "the key and value counts")?;
            let mut out = q.clone();
            out[r - 1] = v[vr - 1].clone();
            Ok(vec![out])
        }
        Op::Pad(p) => {
            let x = dims(0)?;
            let r = x.len();
            if p.pads.len() != 2 * r {
                return Err("Pad's pads do not match the rank".into());
            }
            let out = (x.iter().enumerate())
                .map(|(i, d)| {
                    d.add_const(p.pads[i])
                        .and_then(|d| d.add_const(p.pads[r + i]))
                })
                .collect::<Option<Vec<_>>>()
                .ok_or_else(overflow)?;
            Ok(vec![out])
        }
        Op::ConvTranspose(c) => {
            // out = stride·(in − 1) + span − pads + output_padding, the output padding
            // recovered from the extents the importer computed at the largest input.
            let (x, w) = (dims(0)?, dims(1)?);
            let at_max = inputs[0].ok_or("missing input 0")?;
            let n = c.kernel.len();
            if x.len() != n + 2 || w.len() != n + 2 || c.output_spatial.len() != n {
                return Err("ConvTranspose's input does not match its kernel".into());
            }
            let channels = w[1].mul_const(c.group as i64).ok_or_else(overflow)?;
            let mut out = vec![x[0].clone(), channels];
            for i in 0..n {
                let (s, k, dil) = (
                    c.strides[i] as i64,
                    c.kernel[i] as i64,
                    c.dilations[i] as i64,
                );
                let span = dil * (k - 1) + 1;
                let pads = (c.pads[i] + c.pads[n + i]) as i64;
                let big = at_max.shape[2 + i] as i64;
                let extra = c.output_spatial[i] as i64 - (s * (big - 1) + span - pads);
                let d = (x[2 + i].add_const(-1))
                    .and_then(|d| d.mul_const(s))
                    .and_then(|d| d.add_const(span - pads + extra))
                    .ok_or_else(overflow)?;
                out.push(d);
            }
            Ok(vec![out])
        }
        Op::Resize(r) => {
            // A varying axis scales by a whole factor (`⌊n · k⌋ = k·n`); a fixed one
            // keeps the extent its importer computed.
            let x = dims(0)?;
            if r.coordinate_transform == super::CoordinateTransform::TfCropAndResize {
                return Err("Resize with tf_crop_and_resize over a varying axis".into());
            }
            let mut out = Vec::with_capacity(x.len());
            for (i, d) in x.iter().enumerate() {
                if d.is_const() {
                    out.push(Dim::constant(r.output_shape[i] as i64));
                    continue;
                }
                let k = r.scales[i];
                if k < 1.0 || k.fract() != 0.0 || k > 1024.0 {
                    return Err(format!(
                        "axis {i} of its input is {} (set at run time); Resize scales it by {k}, \
                         and only a whole factor keeps its extent an expression",
                        cx.text(d)
                    ));
                }
                out.push(d.mul_const(k as i64).ok_or_else(overflow)?);
            }
            Ok(vec![out])
        }
        Op::GatherElements { .. } => Ok(vec![dims(1)?]),
        Op::GatherND { batch_dims } => {
            let (d, i) = (dims(0)?, dims(1)?);
            let k = i
                .last()
                .and_then(Dim::as_const)
                .ok_or("GatherND's index tuples must have a fixed length")?
                as usize;
            let mut out = i[..i.len() - 1].to_vec();
            out.extend_from_slice(
                d.get(batch_dims + k..)
                    .ok_or("GatherND indexes past the rank")?,
            );
            Ok(vec![out])
        }
        Op::RnnSequence { cell, reverse } => {
            // xw [T, B, D·G·H], R [D, G·H, H]: Y [T, D, B, H] and the states [D, B, H].
            let (xw, r) = (dims(0)?, dims(1)?);
            if xw.len() != 3 || r.len() != 3 {
                return Err("RnnSequence needs xw [T, B, D·G·H] and R [D, G·H, H]".into());
            }
            let d = Dim::constant(reverse.len() as i64);
            let state = vec![d.clone(), xw[1].clone(), r[2].clone()];
            let mut out = vec![
                vec![xw[0].clone(), d, xw[1].clone(), r[2].clone()],
                state.clone(),
            ];
            if *cell == super::RnnCell::Lstm {
                out.push(state);
            }
            Ok(out)
        }
        other => Err(format!(
            "{} cannot take an extent set at run time yet",
            other.name()
        )),
    }
}

fn reduced(x: &[Dim], axes: &[usize], keepdims: bool) -> Vec<Dim> {
    (x.iter().enumerate())
        .filter_map(|(a, d)| match (axes.contains(&a), keepdims) {
            (false, _) => Some(d.clone()),
            (true, true) => Some(Dim::constant(1)),
            (true, false) => None,
        })
        .collect()
}

fn matmul_dims(a: &[Dim], b: &[Dim], cx: &mut DimContext) -> Result<Vec<Dim>, String> {
    if a.is_empty() || b.is_empty() {
        return Err("MatMul of a scalar".into());
    }
    // 1-D operands are promoted (and the added axis dropped again), as numpy does.
    let a2: Vec<Dim> = if a.len() == 1 {
        vec![Dim::constant(1), a[0].clone()]
    } else {
        a.to_vec()
    };
    let b2: Vec<Dim> = if b.len() == 1 {
        vec![b[0].clone(), Dim::constant(1)]
    } else {
        b.to_vec()
    };
    let (ra, rb) = (a2.len(), b2.len());
    cx.same(
        &a2[ra - 1],
        &b2[rb - 2],
        "the inner axes of a matrix product",
    )?;
    let batch = cx.broadcast_all(&[a2[..ra - 2].to_vec(), b2[..rb - 2].to_vec()])?;
    let mut out = batch;
    if a.len() > 1 {
        out.push(a2[ra - 2].clone());
    }
    if b.len() > 1 {
        out.push(b2[rb - 1].clone());
    }
    Ok(out)
}

fn conv_dims(x: &[Dim], w: &[Dim], c: &ConvAttrs) -> Result<Vec<Dim>, String> {
    if x.len() != c.kernel.len() + 2 || w.is_empty() {
        return Err("Conv's input does not match its kernel".into());
    }
    let mut out = vec![x[0].clone(), w[0].clone()];
    out.extend(spatial_windows(
        x,
        &c.kernel,
        &c.strides,
        &c.pads,
        &c.dilations,
        false,
    )?);
    Ok(out)
}

fn pool_dims(x: &[Dim], p: &PoolAttrs) -> Result<Vec<Dim>, String> {
    if x.len() != p.kernel.len() + 2 {
        return Err("the pool's input does not match its kernel".into());
    }
    let mut out = x[..2].to_vec();
    out.extend(spatial_windows(
        x,
        &p.kernel,
        &p.strides,
        &p.pads,
        &p.dilations,
        p.ceil_mode,
    )?);
    Ok(out)
}
