//! The optimizer update rules of the `ai.onnx.preview.training` domain (Adagrad, Adam,
//! Momentum and Nesterov momentum): elementwise arithmetic on each optimized tensor,
//! with the learning rate R and the step count T read at run time (float32 math, the
//! `T > 0` cases chosen by Where).

use crate::ir::{DType, Tensor, ValueId};
use crate::onnx::import::{ImportError, ImportResult, NodeCtx};
use crate::ops::{BinaryOp, Op, UnaryOp};

struct Arith<'c, 'a> {
    ctx: &'c mut NodeCtx<'a>,
}

impl Arith<'_, '_> {
    fn k(&mut self, v: f64) -> ValueId {
        self.ctx
            .constant_value("optimizer_constant", Tensor::from_vec(&[], vec![v as f32]))
    }
    fn bin(&mut self, op: BinaryOp, a: ValueId, b: ValueId) -> ImportResult<ValueId> {
        self.ctx.emit1(Op::Binary(op), vec![Some(a), Some(b)])
    }
    fn scale(&mut self, a: ValueId, v: f64) -> ImportResult<ValueId> {
        let k = self.k(v);
        self.bin(BinaryOp::Mul, a, k)
    }
    fn f32(&mut self, v: ValueId) -> ImportResult<ValueId> {
        if self.ctx.ty(v).dtype == DType::F32 {
            Ok(v)
        } else {
            self.ctx.emit1(Op::Cast { to: DType::F32 }, vec![Some(v)])
        }
    }
    fn back(&mut self, v: ValueId, to: DType) -> ImportResult<ValueId> {
        if to == DType::F32 {
            Ok(v)
        } else {
            self.ctx.emit1(Op::Cast { to }, vec![Some(v)])
        }
    }
    /// `norm · x + g`.
    fn regularized(&mut self, x: ValueId, g: ValueId, norm: f64) -> ImportResult<ValueId> {
        let nx = self.scale(x, norm)?;
        self.bin(BinaryOp::Add, nx, g)
    }
}

/// R, T as float32 scalars, and how many tensors the node optimizes with `per` inputs
/// each.
fn common(ctx: &mut NodeCtx, per: usize) -> ImportResult<(ValueId, ValueId, usize)> {
    let inputs = ctx.node.input.len();
    if inputs < 2 + per || !(inputs - 2).is_multiple_of(per) {
        return Err(format!(
            "expected R, T and {per} inputs per optimized tensor, got {inputs} inputs"
        )
        .into());
    }
    let (r, t) = (ctx.required(0)?, ctx.required(1)?);
    let mut a = Arith { ctx };
    let (r, t) = (a.f32(r)?, a.f32(t)?);
    Ok((r, t, (inputs - 2) / per))
}

pub fn adagrad(ctx: &mut NodeCtx) -> ImportResult {
    let decay = ctx.attrs.float("decay_factor", 0.0)? as f64;
    let eps = ctx.attrs.float("epsilon", 1e-6)? as f64;
    let norm = ctx.attrs.float("norm_coefficient", 0.0)? as f64;
    let (r, t, n) = common(ctx, 3)?;
    let mut a = Arith { ctx };
    // r / (1 + t · decay)
    let td = a.scale(t, decay)?;
    let one = a.k(1.0);
    let denom = a.bin(BinaryOp::Add, td, one)?;
    let rate = a.bin(BinaryOp::Div, r, denom)?;
    let (mut xs, mut hs) = (vec![], vec![]);
    for i in 0..n {
        let (x, g, h) = (
            a.ctx.required(2 + i)?,
            a.ctx.required(2 + n + i)?,
            a.ctx.required(2 + 2 * n + i)?,
        );
        let (xd, hd) = (a.ctx.ty(x).dtype, a.ctx.ty(h).dtype);
        let (x, g, h) = (a.f32(x)?, a.f32(g)?, a.f32(h)?);
        let g = a.regularized(x, g, norm)?;
        let gg = a.bin(BinaryOp::Mul, g, g)?;
        let h_new = a.bin(BinaryOp::Add, h, gg)?;
        let root = a.ctx.emit1(Op::Unary(UnaryOp::Sqrt), vec![Some(h_new)])?;
        let eps_v = a.k(eps);
        let root = a.bin(BinaryOp::Add, root, eps_v)?;
        let step = a.bin(BinaryOp::Mul, rate, g)?;
        let step = a.bin(BinaryOp::Div, step, root)?;
        let x_new = a.bin(BinaryOp::Sub, x, step)?;
        xs.push(a.back(x_new, xd)?);
        hs.push(a.back(h_new, hd)?);
    }
    xs.extend(hs);
    ctx.bind_outputs(&xs);
    Ok(())
}

pub fn adam(ctx: &mut NodeCtx) -> ImportResult {
    let alpha = ctx.attrs.float("alpha", 0.9)? as f64;
    let beta = ctx.attrs.float("beta", 0.999)? as f64;
    let eps = ctx.attrs.float("epsilon", 1e-6)? as f64;
    let norm = ctx.attrs.float("norm_coefficient", 0.0)? as f64;
    let post = ctx.attrs.float("norm_coefficient_post", 0.0)? as f64;
    let (r, t, n) = common(ctx, 4)?;
    let mut a = Arith { ctx };
    // T > 0: r · sqrt(1 − βᵗ) / (1 − αᵗ); otherwise r.
    let zero = a.k(0.0);
    let positive = a.bin(BinaryOp::Greater, t, zero)?;
    let (alpha_v, beta_v, one) = (a.k(alpha), a.k(beta), a.k(1.0));
    let at = a.bin(BinaryOp::Pow, alpha_v, t)?;
    let bt = a.bin(BinaryOp::Pow, beta_v, t)?;
    let num = a.bin(BinaryOp::Sub, one, bt)?;
    let num = a.ctx.emit1(Op::Unary(UnaryOp::Sqrt), vec![Some(num)])?;
    let den = a.bin(BinaryOp::Sub, one, at)?;
    let adjusted = a.bin(BinaryOp::Mul, r, num)?;
    let adjusted = a.bin(BinaryOp::Div, adjusted, den)?;
    let rate = a
        .ctx
        .emit1(Op::Where, vec![Some(positive), Some(adjusted), Some(r)])?;
    let (mut xs, mut vs, mut hs) = (vec![], vec![], vec![]);
    for i in 0..n {
        let [x, g, v, h] = [0, 1, 2, 3].map(|k| a.ctx.required(2 + k * n + i));
        let (x, g, v, h) = (x?, g?, v?, h?);
        let dt = [x, v, h].map(|id| a.ctx.ty(id).dtype);
        let (x, g, v, h) = (a.f32(x)?, a.f32(g)?, a.f32(v)?, a.f32(h)?);
        let g = a.regularized(x, g, norm)?;
        let av = a.scale(v, alpha)?;
        let ag = a.scale(g, 1.0 - alpha)?;
        let v_new = a.bin(BinaryOp::Add, av, ag)?;
        let gg = a.bin(BinaryOp::Mul, g, g)?;
        let bh = a.scale(h, beta)?;
        let bg = a.scale(gg, 1.0 - beta)?;
        let h_new = a.bin(BinaryOp::Add, bh, bg)?;
        let root = a.ctx.emit1(Op::Unary(UnaryOp::Sqrt), vec![Some(h_new)])?;
        let eps_v = a.k(eps);
        let root = a.bin(BinaryOp::Add, root, eps_v)?;
        let ratio = a.bin(BinaryOp::Div, v_new, root)?;
        let step = a.bin(BinaryOp::Mul, rate, ratio)?;
        let x_new = a.bin(BinaryOp::Sub, x, step)?;
        let x_final = a.scale(x_new, 1.0 - post)?;
        xs.push(a.back(x_final, dt[0])?);
        vs.push(a.back(v_new, dt[1])?);
        hs.push(a.back(h_new, dt[2])?);
    }
    xs.extend(vs);
    xs.extend(hs);
    ctx.bind_outputs(&xs);
    Ok(())
}

pub fn momentum(ctx: &mut NodeCtx) -> ImportResult {
    let required = |ctx: &NodeCtx, name: &str| -> ImportResult<f64> {
        Ok(ctx
            .attrs
            .float_opt(name)?
            .ok_or_else(|| format!("attribute '{name}' is required"))? as f64)
    };
    let alpha = required(ctx, "alpha")?;
    let beta = required(ctx, "beta")?;
    let norm = required(ctx, "norm_coefficient")?;
    let nesterov = match ctx.attrs.string("mode", "")?.as_str() {
        "standard" => false,
        "nesterov" => true,
        m => {
            return Err(ImportError::Invalid(format!(
                "mode '{m}': expected standard or nesterov"
            )))
        }
    };
    let (r, t, n) = common(ctx, 3)?;
    let mut a = Arith { ctx };
    // β, or 1 at the first step (T = 0).
    let zero = a.k(0.0);
    let positive = a.bin(BinaryOp::Greater, t, zero)?;
    let (beta_v, one) = (a.k(beta), a.k(1.0));
    let beta_t = a
        .ctx
        .emit1(Op::Where, vec![Some(positive), Some(beta_v), Some(one)])?;
    let (mut xs, mut vs) = (vec![], vec![]);
    for i in 0..n {
        let (x, g, v) = (
            a.ctx.required(2 + i)?,
            a.ctx.required(2 + n + i)?,
            a.ctx.required(2 + 2 * n + i)?,
        );
        let (xd, vd) = (a.ctx.ty(x).dtype, a.ctx.ty(v).dtype);
        let (x, g, v) = (a.f32(x)?, a.f32(g)?, a.f32(v)?);
        let g = a.regularized(x, g, norm)?;
        let av = a.scale(v, alpha)?;
        let bg = a.bin(BinaryOp::Mul, beta_t, g)?;
        let v_new = a.bin(BinaryOp::Add, av, bg)?;
        let direction = if nesterov {
            let av_new = a.scale(v_new, alpha)?;
            a.bin(BinaryOp::Add, g, av_new)?
        } else {
            v_new
        };
        let step = a.bin(BinaryOp::Mul, r, direction)?;
        let x_new = a.bin(BinaryOp::Sub, x, step)?;
        xs.push(a.back(x_new, xd)?);
        vs.push(a.back(v_new, vd)?);
    }
    xs.extend(vs);
    ctx.bind_outputs(&xs);
    Ok(())
}
