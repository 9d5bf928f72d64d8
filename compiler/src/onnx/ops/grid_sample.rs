//! GridSample (2-D and 3-D; nearest, linear and cubic; zeros, border and reflection
//! padding; both corner alignments) as elementwise coordinate arithmetic plus one
//! GatherElements per interpolation tap: every output point reads `taps^D` input
//! pixels (1, 2 or 4 per axis), each with the product of its per-axis weights. The
//! arithmetic follows onnx's reference (PyTorch's `grid_sampler`) step by step.

use crate::ir::{DType, Tensor, ValueId};
use crate::onnx::import::{ImportError, ImportResult, NodeCtx};
use crate::ops::{BinaryOp, Op, UnaryOp};

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

#[derive(Clone, Copy, PartialEq)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

/// Emits float32 arithmetic on `[N, P]` coordinate tensors.
struct Arith<'c, 'a> {
    ctx: &'c mut NodeCtx<'a>,
}

impl Arith<'_, '_> {
    fn k(&mut self, v: f64) -> ValueId {
        self.ctx.constant_value(
            "grid_sample_constant",
            Tensor::from_vec(&[], vec![v as f32]),
        )
    }
    fn bin(&mut self, op: BinaryOp, a: ValueId, b: ValueId) -> ImportResult<ValueId> {
        self.ctx.emit1(Op::Binary(op), vec![Some(a), Some(b)])
    }
    fn add_k(&mut self, a: ValueId, v: f64) -> ImportResult<ValueId> {
        let k = self.k(v);
        self.bin(BinaryOp::Add, a, k)
    }
    fn mul_k(&mut self, a: ValueId, v: f64) -> ImportResult<ValueId> {
        let k = self.k(v);
        self.bin(BinaryOp::Mul, a, k)
    }
    fn un(&mut self, op: UnaryOp, a: ValueId) -> ImportResult<ValueId> {
        self.ctx.emit1(Op::Unary(op), vec![Some(a)])
    }
    fn select(&mut self, cond: ValueId, a: ValueId, b: ValueId) -> ImportResult<ValueId> {
        self.ctx
            .emit1(Op::Where, vec![Some(cond), Some(a), Some(b)])
    }
    fn clamp(&mut self, a: ValueId, lo: f64, hi: f64) -> ImportResult<ValueId> {
        self.un(UnaryOp::Clip { min: lo, max: hi }, a)
    }
    /// Toward zero (C's `(int)` cast).
    fn trunc(&mut self, a: ValueId) -> ImportResult<ValueId> {
        let zero = self.k(0.0);
        let neg = self.bin(BinaryOp::Less, a, zero)?;
        let up = self.un(UnaryOp::Ceil, a)?;
        let down = self.un(UnaryOp::Floor, a)?;
        self.select(neg, up, down)
    }
    /// Reflects `x` by the nearer border until it lies in `[lo, hi]` (the reference's
    /// `_gs_reflect`, elementwise).
    fn reflect(&mut self, x: ValueId, lo: f64, hi: f64) -> ImportResult<ValueId> {
        let range = hi - lo;
        if range <= 0.0 {
            // A one-pixel axis with aligned corners: everything reflects onto it.
            let k = self.k(lo);
            let zero = self.mul_k(x, 0.0)?;
            return self.bin(BinaryOp::Add, zero, k);
        }
        let (lo_v, hi_v) = (self.k(lo), self.k(hi));
        // Below: dx = lo − x; above: dx = x − hi.
        let below = self.bin(BinaryOp::Less, x, lo_v)?;
        let above = self.bin(BinaryOp::Greater, x, hi_v)?;
        let dx_below = self.bin(BinaryOp::Sub, lo_v, x)?;
        let dx_above = self.bin(BinaryOp::Sub, x, hi_v)?;
        let dx = self.select(below, dx_below, dx_above)?;
        let folds = self.mul_k(dx, 1.0 / range)?;
        let folds = self.trunc(folds)?;
        let r = self.mul_k(folds, range)?;
        let r = self.bin(BinaryOp::Sub, dx, r)?;
        // Even folds: lo + r below, hi − r above; odd folds the other way round.
        let half = self.mul_k(folds, 0.5)?;
        let half_floor = self.un(UnaryOp::Floor, half)?;
        let even = self.bin(BinaryOp::Equal, half, half_floor)?;
        let lo_plus = self.bin(BinaryOp::Add, lo_v, r)?;
        let hi_minus = self.bin(BinaryOp::Sub, hi_v, r)?;
        let from_below = self.select(even, lo_plus, hi_minus)?;
        let from_above = self.select(even, hi_minus, lo_plus)?;
        let moved = self.select(below, from_below, from_above)?;
        let outside = self.bin(BinaryOp::Or, below, above)?;
        self.select(outside, moved, x)
    }
}

pub fn grid_sample(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.required(0)?;
    let grid = ctx.required(1)?;
    let (xt, gt) = (ctx.ty(x).clone(), ctx.ty(grid).clone());
    let spatial = xt.rank().saturating_sub(2);
    if !(1..=3).contains(&spatial)
        || gt.rank() != xt.rank()
        || gt.shape[0] != xt.shape[0]
        || gt.shape[gt.rank() - 1] != spatial
    {
        return Err(format!(
            "X {:?} and grid {:?} must be [N, C, D1..Dr] and [N, O1..Or, r]",
            xt.shape, gt.shape
        )
        .into());
    }
    let mode = match ctx
        .attrs
        .string(
            "mode",
            if ctx.opset() >= 20 {
                "linear"
            } else {
                "bilinear"
            },
        )?
        .as_str()
    {
        "nearest" => Mode::Nearest,
        "linear" | "bilinear" => Mode::Linear,
        "cubic" | "bicubic" => Mode::Cubic,
        m => return Err(format!("mode '{m}': expected nearest, linear or cubic").into()),
    };
    let padding = match ctx.attrs.string("padding_mode", "zeros")?.as_str() {
        "zeros" => Padding::Zeros,
        "border" => Padding::Border,
        "reflection" => Padding::Reflection,
        m => {
            return Err(format!("padding_mode '{m}': expected zeros, border or reflection").into())
        }
    };
    let align = ctx.attrs.flag("align_corners", false)?;
    if !xt.dtype.is_float() || !gt.dtype.is_float() {
        return Err(ImportError::Unsupported(format!(
            "GridSample of {} with a {} grid",
            xt.dtype, gt.dtype
        )));
    }
    let (n, c) = (xt.shape[0], xt.shape[1]);
    let dims = xt.shape[2..].to_vec();
    let out = gt.shape[1..gt.rank() - 1].to_vec();
    let points: usize = out.iter().product();
    let pixels: usize = dims.iter().product();
    if pixels >= 1 << 24 {
        return Err(ImportError::Unsupported(
            "GridSample inputs of 2^24 pixels or more".into(),
        ));
    }
    let to_f32 = |ctx: &mut NodeCtx, v: ValueId| -> ImportResult<ValueId> {
        if ctx.ty(v).dtype == DType::F32 {
            Ok(v)
        } else {
            ctx.emit1(Op::Cast { to: DType::F32 }, vec![Some(v)])
        }
    };
    let xf = to_f32(ctx, x)?;
    let gf = to_f32(ctx, grid)?;
    let flat_x = ctx.emit1(
        Op::Reshape {
            shape: vec![n, c, pixels],
        },
        vec![Some(xf)],
    )?;
    let flat_grid = ctx.emit1(
        Op::Reshape {
            shape: vec![n, points, spatial],
        },
        vec![Some(gf)],
    )?;
    let mut a = Arith { ctx };
    // Per spatial axis: the unnormalized coordinate (the grid lists the last axis
    // first), moved inside the borders as padding_mode says.
    let mut coords = vec![];
    for (axis, &len) in dims.iter().enumerate() {
        let component = spatial - 1 - axis;
        let g = a.ctx.emit1(
            Op::Slice {
                starts: vec![0, 0, component],
                steps: vec![1, 1, 1],
                shape: vec![n, points, 1],
            },
            vec![Some(flat_grid)],
        )?;
        let g = a.ctx.emit1(
            Op::Reshape {
                shape: vec![n, points],
            },
            vec![Some(g)],
        )?;
        let len_f = len as f64;
        let mut v = if align {
            let t = a.add_k(g, 1.0)?;
            a.mul_k(t, (len_f - 1.0) / 2.0)?
        } else {
            let t = a.add_k(g, 1.0)?;
            let t = a.mul_k(t, len_f)?;
            let t = a.add_k(t, -1.0)?;
            a.mul_k(t, 0.5)?
        };
        if mode == Mode::Nearest {
            v = a.un(UnaryOp::Round, v)?;
        }
        let (lo, hi) = border(len, align);
        v = match padding {
            Padding::Zeros => v,
            Padding::Border => a.clamp(v, 0.0, len_f - 1.0)?,
            Padding::Reflection => a.reflect(v, lo, hi)?,
        };
        coords.push(v);
    }
    // Per axis: the taps' integer coordinates and weights.
    let mut axis_taps: Vec<Vec<(ValueId, Option<ValueId>)>> = vec![];
    for &v in &coords {
        let taps = match mode {
            Mode::Nearest => vec![(a.trunc(v)?, None)],
            Mode::Linear => {
                let x0 = a.un(UnaryOp::Floor, v)?;
                let t = a.bin(BinaryOp::Sub, v, x0)?;
                let one_minus = a.mul_k(t, -1.0)?;
                let one_minus = a.add_k(one_minus, 1.0)?;
                let x1 = a.add_k(x0, 1.0)?;
                vec![(x0, Some(one_minus)), (x1, Some(t))]
            }
            Mode::Cubic => {
                let x0 = a.un(UnaryOp::Floor, v)?;
                let t = a.bin(BinaryOp::Sub, v, x0)?;
                let mut taps = vec![];
                for (offset, weight) in cubic_weights(&mut a, t)?.into_iter().enumerate() {
                    taps.push((a.add_k(x0, offset as f64 - 1.0)?, Some(weight)));
                }
                taps
            }
        };
        axis_taps.push(taps);
    }
    let strides: Vec<usize> = (0..spatial)
        .map(|i| dims[i + 1..].iter().product())
        .collect();
    // Every combination of one tap per axis.
    let combos: usize = axis_taps.iter().map(Vec::len).product();
    let mut sum: Option<ValueId> = None;
    for combo in 0..combos {
        let mut rest = combo;
        let mut index: Option<ValueId> = None;
        let mut weight: Option<ValueId> = None;
        for (axis, taps) in axis_taps.iter().enumerate().rev() {
            let (i, w) = taps[rest % taps.len()];
            rest /= taps.len();
            let len = dims[axis];
            let (lo, hi) = border(len, align);
            // The pixel the reference reads for integer coordinate i.
            let (i, valid) = match padding {
                Padding::Zeros => {
                    let ge = {
                        let zero = a.k(0.0);
                        a.bin(BinaryOp::GreaterOrEqual, i, zero)?
                    };
                    let le = {
                        let top = a.k(len as f64 - 1.0);
                        a.bin(BinaryOp::LessOrEqual, i, top)?
                    };
                    let inside = a.bin(BinaryOp::And, ge, le)?;
                    (a.clamp(i, 0.0, len as f64 - 1.0)?, Some(inside))
                }
                Padding::Border => (a.clamp(i, 0.0, len as f64 - 1.0)?, None),
                Padding::Reflection => {
                    let r = a.reflect(i, lo, hi)?;
                    let r = a.trunc(r)?;
                    (a.clamp(r, 0.0, len as f64 - 1.0)?, None)
                }
            };
            let scaled = a.mul_k(i, strides[axis] as f64)?;
            index = Some(match index {
                Some(s) => a.bin(BinaryOp::Add, s, scaled)?,
                None => scaled,
            });
            let mut w = w;
            if let Some(inside) = valid {
                let base = match w {
                    Some(w) => w,
                    None => a.k(1.0),
                };
                let zero = a.k(0.0);
                w = Some(a.select(inside, base, zero)?);
            }
            weight = match (weight, w) {
                (Some(p), Some(q)) => Some(a.bin(BinaryOp::Mul, p, q)?),
                (p, q) => p.or(q),
            };
        }
        let index = index.expect("at least one axis");
        let index = a
            .ctx
            .emit1(Op::Cast { to: DType::I64 }, vec![Some(index)])?;
        let index = a.ctx.emit1(
            Op::Reshape {
                shape: vec![n, 1, points],
            },
            vec![Some(index)],
        )?;
        let index = a.ctx.emit1(
            Op::Expand {
                shape: vec![n, c, points],
            },
            vec![Some(index)],
        )?;
        let mut value = a.ctx.emit1(
            Op::GatherElements { axis: 2 },
            vec![Some(flat_x), Some(index)],
        )?;
        if let Some(w) = weight {
            let w = a.ctx.emit1(
                Op::Reshape {
                    shape: vec![n, 1, points],
                },
                vec![Some(w)],
            )?;
            value = a.bin(BinaryOp::Mul, value, w)?;
        }
        sum = Some(match sum {
            Some(s) => a.bin(BinaryOp::Add, s, value)?,
            None => value,
        });
    }
    let mut shape = vec![n, c];
    shape.extend(&out);
    let ctx = a.ctx;
    let mut y = ctx.emit1(Op::Reshape { shape }, vec![sum])?;
    if xt.dtype != DType::F32 {
        y = ctx.emit1(Op::Cast { to: xt.dtype }, vec![Some(y)])?;
    }
    ctx.bind_output(0, y);
    Ok(())
}

/// The coordinate range padding reflects within: pixel centres with aligned corners,
/// pixel edges without.
fn border(len: usize, align: bool) -> (f64, f64) {
    if align {
        (0.0, len as f64 - 1.0)
    } else {
        (-0.5, len as f64 - 0.5)
    }
}

/// Keys' cubic convolution weights (α = −0.75) of the taps at −1, 0, 1, 2 for the
/// fraction `t`.
fn cubic_weights(a: &mut Arith, t: ValueId) -> ImportResult<[ValueId; 4]> {
    const A: f64 = -0.75;
    // w(d) = ((A·d − 5A)·d + 8A)·d − 4A for 1 ≤ d ≤ 2; ((A+2)·d − (A+3))·d·d + 1 for d ≤ 1.
    let far = |a: &mut Arith, d: ValueId| -> ImportResult<ValueId> {
        let p = a.mul_k(d, A)?;
        let p = a.add_k(p, -5.0 * A)?;
        let p = a.bin(BinaryOp::Mul, p, d)?;
        let p = a.add_k(p, 8.0 * A)?;
        let p = a.bin(BinaryOp::Mul, p, d)?;
        a.add_k(p, -4.0 * A)
    };
    let near = |a: &mut Arith, d: ValueId| -> ImportResult<ValueId> {
        let p = a.mul_k(d, A + 2.0)?;
        let p = a.add_k(p, -(A + 3.0))?;
        let p = a.bin(BinaryOp::Mul, p, d)?;
        let p = a.bin(BinaryOp::Mul, p, d)?;
        a.add_k(p, 1.0)
    };
    let t_plus_1 = a.add_k(t, 1.0)?;
    let one_minus_t = {
        let m = a.mul_k(t, -1.0)?;
        a.add_k(m, 1.0)?
    };
    let two_minus_t = a.add_k(one_minus_t, 1.0)?;
    Ok([
        far(a, t_plus_1)?,
        near(a, t)?,
        near(a, one_minus_t)?,
        far(a, two_minus_t)?,
    ])
}
