//! ONNX RNN, GRU and LSTM, unrolled at import: the sequence length is static, so each
//! time step becomes a handful of core ops (one Gemm against the recurrence weights plus
//! elementwise gate math), per direction.
//!
//! ```text
//! xw = X·Wᵀ + bias                      one Gemm over all T·B rows, per direction
//! for t (forward) / for t reversed:
//!   RNN:  H = f(xw_t + H·Rᵀ)
//!   GRU:  z, r = f(xw_t[zr] + H·R[zr]ᵀ)
//!         h̃ = g(xw_t[h] + (r ⊙ H)·R[h]ᵀ)              linear_before_reset = 0
//!         h̃ = g(xw_t[h] + r ⊙ (H·R[h]ᵀ + Rb[h]))       linear_before_reset = 1
//!         H = (1 − z) ⊙ h̃ + z ⊙ H
//!   LSTM: i = f(xw_t[i] + H·R[i]ᵀ + Pi ⊙ C)    f likewise (or 1 − i with input_forget)
//!         C = f ⊙ C + i ⊙ g(xw_t[c] + H·R[c]ᵀ)
//!         o = f(xw_t[o] + H·R[o]ᵀ + Po ⊙ C);  H = o ⊙ h(C)
//! ```
//!
//! `clip` bounds every gate's pre-activation. With `sequence_lens` (constant or not)
//! each step is masked per batch row: past a row's length its state stays put and its
//! `Y` is 0. A reverse pass walks t = T−1 … 0 and a row starts updating at its own last
//! step, so the masked state stays the initial one until then.

use super::build::{binary, concat, reshape, reshape_dims, scalar, slice, transpose, unary};
use crate::ir::{DType, Dim, Tensor, ValueId};
use crate::onnx::import::{ImportError, ImportResult, NodeCtx};
use crate::ops::{Activation as Fused, BinaryOp, GemmAttrs, Op, RnnCell, UnaryOp};

#[derive(Clone, Copy, PartialEq)]
enum Cell {
    Rnn,
    Gru { linear_before_reset: bool },
    Lstm { input_forget: bool },
}

impl Cell {
    /// Gate blocks stacked in W and R: RNN one, GRU z r h, LSTM i o f c.
    fn gates(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru { .. } => 3,
            Cell::Lstm { .. } => 4,
        }
    }

    /// One direction's activation functions (f; f g; f g h) when none are given.
    fn default_activations(self) -> &'static [&'static str] {
        match self {
            Cell::Rnn => &["Tanh"],
            Cell::Gru { .. } => &["Sigmoid", "Tanh"],
            Cell::Lstm { .. } => &["Sigmoid", "Tanh", "Tanh"],
        }
    }
}

/// The activation functions the recurrent ops accept, with their parameters.
#[derive(Clone, Copy, Debug)]
enum Act {
    Relu,
    Tanh,
    Sigmoid,
    Affine { alpha: f32, beta: f32 },
    LeakyRelu { alpha: f32 },
    ThresholdedRelu { alpha: f32 },
    ScaledTanh { alpha: f32, beta: f32 },
    HardSigmoid { alpha: f32, beta: f32 },
    Elu { alpha: f32 },
    Softsign,
    Softplus,
}

/// The activations of each direction. `activation_alpha` / `activation_beta` are
/// consumed in order by the functions that take a parameter (as onnxruntime does);
/// when they run out, the function's ONNX default applies.
fn activations(ctx: &NodeCtx, cell: Cell, dirs: usize) -> ImportResult<Vec<Vec<Act>>> {
    let defaults = cell.default_activations();
    let per_dir = defaults.len();
    let names = match ctx.attrs.strings_opt("activations")? {
        Some(names) => names,
        None => (0..dirs)
            .flat_map(|_| defaults.iter().map(|s| s.to_string()))
            .collect(),
    };
    if names.len() != per_dir * dirs {
        return Err(format!(
            "'activations' lists {} functions; {dirs} direction(s) of {} need {}",
            names.len(),
            ctx.node.op_type,
            per_dir * dirs
        )
        .into());
    }
    let mut alphas = ctx
        .attrs
        .floats_opt("activation_alpha")?
        .unwrap_or_default();
    let mut betas = ctx.attrs.floats_opt("activation_beta")?.unwrap_or_default();
    alphas.reverse();
    betas.reverse();
    let mut alpha = |default: f32| alphas.pop().unwrap_or(default);
    let mut beta = |default: f32| betas.pop().unwrap_or(default);
    let mut acts = Vec::with_capacity(names.len());
    for name in &names {
        acts.push(match name.to_ascii_lowercase().as_str() {
            "relu" => Act::Relu,
            "tanh" => Act::Tanh,
            "sigmoid" => Act::Sigmoid,
            "affine" => Act::Affine {
                alpha: alpha(1.0),
                beta: beta(0.0),
            },
            "leakyrelu" => Act::LeakyRelu { alpha: alpha(0.01) },
            "thresholdedrelu" => Act::ThresholdedRelu { alpha: alpha(1.0) },
            "scaledtanh" => Act::ScaledTanh {
                alpha: alpha(1.0),
                beta: beta(1.0),
            },
            "hardsigmoid" => Act::HardSigmoid {
                alpha: alpha(0.2),
                beta: beta(0.5),
            },
            "elu" => Act::Elu { alpha: alpha(1.0) },
            "softsign" => Act::Softsign,
            "softplus" => Act::Softplus,
            _ => {
                return Err(ImportError::Unsupported(format!(
                    "activation function '{name}'"
                )))
            }
        });
    }
    Ok(acts.chunks(per_dir).map(<[Act]>::to_vec).collect())
}

/// Which batch rows are still inside their sequence at a step.
enum Lengths {
    /// Every row runs all T steps.
    Full,
    /// Constant per-row lengths (some shorter than T).
    Known(Vec<i64>),
    /// `sequence_lens` computed at run time, reshaped to `[B, 1]`.
    Runtime(ValueId),
}

impl Lengths {
    /// Bool `[B, 1]`: row b is active at step t; `None` when every row is.
    fn active(&self, ctx: &mut NodeCtx, t: usize) -> ImportResult<Option<ValueId>> {
        match self {
            Lengths::Full => Ok(None),
            Lengths::Known(lens) => {
                let active: Vec<bool> = lens.iter().map(|&l| l > t as i64).collect();
                if active.iter().all(|&a| a) {
                    return Ok(None);
                }
                let mask = Tensor::from_vec(&[active.len(), 1], active);
                Ok(Some(ctx.constant_value("rnn_active", mask)))
            }
            Lengths::Runtime(lens) => {
                let dtype = ctx.ty(*lens).dtype;
                let step = scalar(ctx, "rnn_step", dtype, t as f64);
                Ok(Some(binary(ctx, BinaryOp::Less, step, *lens)?))
            }
        }
    }
}

/// What every step needs to know.
#[derive(Clone, Copy)]
struct Spec {
    cell: Cell,
    dtype: DType,
    batch: usize,
    hidden: usize,
    /// Clip threshold for the gates' pre-activations.
    clip: Option<f32>,
}

impl Spec {
    fn act(&self, ctx: &mut NodeCtx, act: Act, x: ValueId) -> ImportResult<ValueId> {
        let x = match self.clip {
            Some(c) => unary(
                ctx,
                UnaryOp::Clip {
                    min: -(c as f64),
                    max: c as f64,
                },
                x,
            )?,
            None => x,
        };
        let dtype = self.dtype;
        let affine = |ctx: &mut NodeCtx, x: ValueId, a: f32, b: f32| -> ImportResult<ValueId> {
            let mut y = x;
            if a != 1.0 {
                let av = scalar(ctx, "rnn_alpha", dtype, a as f64);
                y = binary(ctx, BinaryOp::Mul, y, av)?;
            }
            if b != 0.0 {
                let bv = scalar(ctx, "rnn_beta", dtype, b as f64);
                y = binary(ctx, BinaryOp::Add, y, bv)?;
            }
            Ok(y)
        };
        match act {
            Act::Relu => unary(ctx, UnaryOp::Relu, x),
            Act::Tanh => unary(ctx, UnaryOp::Tanh, x),
            Act::Sigmoid => unary(ctx, UnaryOp::Sigmoid, x),
            Act::Affine { alpha, beta } => {
                let y = affine(ctx, x, alpha, beta)?;
                // A graph output must be a value of its own, never the input itself.
                if y == x {
                    unary(ctx, UnaryOp::Identity, x)
                } else {
                    Ok(y)
                }
            }
            Act::LeakyRelu { alpha } => unary(ctx, UnaryOp::LeakyRelu { alpha }, x),
            Act::ThresholdedRelu { alpha } => unary(ctx, UnaryOp::ThresholdedRelu { alpha }, x),
            Act::ScaledTanh { alpha, beta } => {
                let y = affine(ctx, x, beta, 0.0)?;
                let y = unary(ctx, UnaryOp::Tanh, y)?;
                affine(ctx, y, alpha, 0.0)
            }
            Act::HardSigmoid { alpha, beta } => unary(ctx, UnaryOp::HardSigmoid { alpha, beta }, x),
            Act::Elu { alpha } => unary(ctx, UnaryOp::Elu { alpha }, x),
            Act::Softsign => unary(ctx, UnaryOp::Softsign, x),
            Act::Softplus => unary(ctx, UnaryOp::Softplus, x),
        }
    }

    /// Columns `[k·H, (k+n)·H)` of a `[B, G·H]` value.
    fn gate(&self, ctx: &mut NodeCtx, v: ValueId, k: usize, n: usize) -> ImportResult<ValueId> {
        let (b, h) = (self.batch, self.hidden);
        slice(ctx, v, vec![0, k * h], vec![b, n * h])
    }
}

/// `a · bᵀ + c`.
fn gemm_bt(ctx: &mut NodeCtx, a: ValueId, b: ValueId, c: Option<ValueId>) -> ImportResult<ValueId> {
    let attrs = GemmAttrs {
        alpha: 1.0,
        beta: 1.0,
        trans_a: false,
        trans_b: true,
        activation: Fused::None,
    };
    ctx.emit1(Op::Gemm(attrs), vec![Some(a), Some(b), c])
}

/// One direction's parameters, sliced out of the stacked inputs.
struct Params {
    /// `[G·H, H]`
    r: ValueId,
    /// `Rb`, `[G·H]`, when B is given.
    rb: Option<ValueId>,
    /// LSTM peepholes `[3·H]` (i, o, f).
    p: Option<ValueId>,
}

/// The recurrent state of one direction.
struct State {
    h: ValueId,
    /// LSTM only.
    c: Option<ValueId>,
}

/// One time step: the new state from the step's input projection `xw_t` (`[B, G·H]`,
/// biases included except GRU's `Rb[h]` with `linear_before_reset`).
fn step(
    ctx: &mut NodeCtx,
    spec: &Spec,
    acts: &[Act],
    prm: &Params,
    xw_t: ValueId,
    s: &State,
) -> ImportResult<State> {
    let hs = spec.hidden;
    match spec.cell {
        Cell::Rnn => {
            let pre = gemm_bt(ctx, s.h, prm.r, Some(xw_t))?;
            let h = spec.act(ctx, acts[0], pre)?;
            Ok(State { h, c: None })
        }
        Cell::Gru {
            linear_before_reset,
        } => {
            let xw_zr = spec.gate(ctx, xw_t, 0, 2)?;
            let xw_h = spec.gate(ctx, xw_t, 2, 1)?;
            let (zr, h_tilde_pre) = if linear_before_reset {
                // One product with all of R, Rb added: the reset gate scales its h part.
                let hr = gemm_bt(ctx, s.h, prm.r, prm.rb)?;
                let hr_zr = spec.gate(ctx, hr, 0, 2)?;
                let hr_h = spec.gate(ctx, hr, 2, 1)?;
                let zr = binary(ctx, BinaryOp::Add, xw_zr, hr_zr)?;
                let r = spec.gate(ctx, zr, 1, 1)?;
                let r = spec.act(ctx, acts[0], r)?;
                let rh = binary(ctx, BinaryOp::Mul, r, hr_h)?;
                (zr, binary(ctx, BinaryOp::Add, xw_h, rh)?)
            } else {
                let r_zr = slice(ctx, prm.r, vec![0, 0], vec![2 * hs, hs])?;
                let r_h = slice(ctx, prm.r, vec![2 * hs, 0], vec![hs, hs])?;
                let zr = gemm_bt(ctx, s.h, r_zr, Some(xw_zr))?;
                let r = spec.gate(ctx, zr, 1, 1)?;
                let r = spec.act(ctx, acts[0], r)?;
                let rh = binary(ctx, BinaryOp::Mul, r, s.h)?;
                (zr, gemm_bt(ctx, rh, r_h, Some(xw_h))?)
            };
            let z = spec.gate(ctx, zr, 0, 1)?;
            let z = spec.act(ctx, acts[0], z)?;
            let h_tilde = spec.act(ctx, acts[1], h_tilde_pre)?;
            // (1 − z) ⊙ h̃ + z ⊙ H, written h̃ + z ⊙ (H − h̃).
            let d = binary(ctx, BinaryOp::Sub, s.h, h_tilde)?;
            let zd = binary(ctx, BinaryOp::Mul, z, d)?;
            let h = binary(ctx, BinaryOp::Add, h_tilde, zd)?;
            Ok(State { h, c: None })
        }
        Cell::Lstm { input_forget } => {
            let c_prev = s.c.expect("an LSTM carries a cell state");
            let gates = gemm_bt(ctx, s.h, prm.r, Some(xw_t))?;
            let peephole = |ctx: &mut NodeCtx, k: usize, pre: ValueId, c: ValueId| {
                let Some(p) = prm.p else { return Ok(pre) };
                let pk = slice(ctx, p, vec![k * hs], vec![hs])?;
                let pc = binary(ctx, BinaryOp::Mul, pk, c)?;
                binary(ctx, BinaryOp::Add, pre, pc)
            };
            let (f, g, h) = (acts[0], acts[1], acts[2]);
            let i_pre = spec.gate(ctx, gates, 0, 1)?;
            let i_pre = peephole(ctx, 0, i_pre, c_prev)?;
            let i = spec.act(ctx, f, i_pre)?;
            let forget = if input_forget {
                // Coupled gates: what is let in is forgotten.
                let one = scalar(ctx, "one", spec.dtype, 1.0);
                binary(ctx, BinaryOp::Sub, one, i)?
            } else {
                let f_pre = spec.gate(ctx, gates, 2, 1)?;
                let f_pre = peephole(ctx, 2, f_pre, c_prev)?;
                spec.act(ctx, f, f_pre)?
            };
            let c_pre = spec.gate(ctx, gates, 3, 1)?;
            let c_tilde = spec.act(ctx, g, c_pre)?;
            let kept = binary(ctx, BinaryOp::Mul, forget, c_prev)?;
            let added = binary(ctx, BinaryOp::Mul, i, c_tilde)?;
            let c = binary(ctx, BinaryOp::Add, kept, added)?;
            let o_pre = spec.gate(ctx, gates, 1, 1)?;
            let o_pre = peephole(ctx, 1, o_pre, c)?;
            let o = spec.act(ctx, f, o_pre)?;
            // h's input is the cell state, not a gate: clip does not apply to it.
            let hc = Spec {
                clip: None,
                ..*spec
            };
            let hc = hc.act(ctx, h, c)?;
            let h = binary(ctx, BinaryOp::Mul, o, hc)?;
            Ok(State { h, c: Some(c) })
        }
    }
}

fn wants_output(ctx: &NodeCtx, k: usize) -> bool {
    ctx.node.output.get(k).is_some_and(|o| !o.is_empty())
}

/// Checks that input `i`, if given, has `shape` and the sequence's element type.
fn check_input(ctx: &NodeCtx, i: usize, what: &str, shape: &[usize], dtype: DType) -> ImportResult {
    if let Some(v) = ctx.input(i) {
        let ty = ctx.ty(v);
        if ty.shape != shape || ty.dtype != dtype {
            return Err(format!("{what} must be {dtype} {shape:?}, not {ty}").into());
        }
    }
    Ok(())
}

/// Slice `d` of a direction-stacked input `[D, ...]`, without the direction axis.
fn direction_slice(ctx: &mut NodeCtx, v: ValueId, d: usize) -> ImportResult<ValueId> {
    let shape = ctx.ty(v).shape.clone();
    let mut starts = vec![0; shape.len()];
    starts[0] = d;
    let mut one = shape.clone();
    one[0] = 1;
    let s = slice(ctx, v, starts, one)?;
    reshape(ctx, s, shape[1..].to_vec())
}

fn recurrent(ctx: &mut NodeCtx, cell: Cell) -> ImportResult {
    let x_ty = ctx.input_ty(0)?;
    let dtype = x_ty.dtype;
    if !dtype.is_float() {
        return Err(ImportError::Unsupported(format!(
            "{} on {dtype} tensors",
            ctx.node.op_type
        )));
    }
    let layout = ctx.attrs.int("layout", 0)?;
    let [d0, d1, input_size] = x_ty.shape[..] else {
        return Err(format!("X must be 3-D, not {x_ty}").into());
    };
    // The steps may be set at run time (the symbolic import); nothing else may.
    let seq_axis = usize::from(layout == 1);
    let seq_dim = x_ty.dim(seq_axis);
    if let Some((axis, _)) = (x_ty.first_symbolic_axis()).filter(|(a, _)| *a != seq_axis) {
        return Err(ImportError::Unsupported(format!(
            "X's axis {axis} varies at run time; only its steps may"
        )));
    }
    let (seq, batch) = match layout {
        0 => (d0, d1),
        1 => (d1, d0),
        _ => return Err(format!("layout must be 0 or 1, not {layout}").into()),
    };
    let reverse: Vec<bool> = match ctx.attrs.string("direction", "forward")?.as_str() {
        "forward" => vec![false],
        "reverse" => vec![true],
        "bidirectional" => vec![false, true],
        other => {
            return Err(format!(
                "direction must be forward, reverse or bidirectional, not '{other}'"
            )
            .into())
        }
    };
    let dirs = reverse.len();
    let gates = cell.gates();
    let r_ty = ctx.input_ty(2)?;
    let hidden = match r_ty.shape[..] {
        [_, _, h] => h,
        _ => return Err(format!("R must be 3-D, not {r_ty}").into()),
    };
    if let Some(h) = ctx.attrs.int_opt("hidden_size")? {
        if h != hidden as i64 {
            return Err(format!("hidden_size {h} contradicts R's shape {r_ty}").into());
        }
    }
    let gh = gates * hidden;
    check_input(ctx, 1, "W", &[dirs, gh, input_size], dtype)?;
    check_input(ctx, 2, "R", &[dirs, gh, hidden], dtype)?;
    check_input(ctx, 3, "B", &[dirs, 2 * gh], dtype)?;
    let state_shape = if layout == 0 {
        [dirs, batch, hidden]
    } else {
        [batch, dirs, hidden]
    };
    check_input(ctx, 5, "initial_h", &state_shape, dtype)?;
    let is_lstm = matches!(cell, Cell::Lstm { .. });
    if is_lstm {
        check_input(ctx, 6, "initial_c", &state_shape, dtype)?;
        check_input(ctx, 7, "P", &[dirs, 3 * hidden], dtype)?;
    }
    if seq == 0 || batch == 0 {
        return Err(ImportError::Unsupported(format!(
            "{} over an empty sequence or batch",
            ctx.node.op_type
        )));
    }
    let clip = match ctx.attrs.float_opt("clip")? {
        Some(c) if c.is_nan() || c < 0.0 => {
            return Err(format!("clip must be non-negative, not {c}").into())
        }
        c => c,
    };
    let acts = activations(ctx, cell, dirs)?;
    let spec = Spec {
        cell,
        dtype,
        batch,
        hidden,
        clip,
    };

    let lengths = match ctx.input(4) {
        None => Lengths::Full,
        Some(v) => {
            let ty = ctx.ty(v).clone();
            if !ty.dtype.is_int() || ty.shape != [batch] {
                return Err(format!("sequence_lens must hold {batch} integers, not {ty}").into());
            }
            match ctx.constant(v) {
                Some(t) => {
                    let lens = t.to_i64_vec();
                    if let Some(l) = lens.iter().find(|&&l| l < 0 || l > seq as i64) {
                        return Err(format!("sequence length {l} is outside 0..={seq}").into());
                    }
                    if lens.iter().all(|&l| l == seq as i64) {
                        Lengths::Full
                    } else {
                        Lengths::Known(lens)
                    }
                }
                None => Lengths::Runtime(reshape(ctx, v, vec![batch, 1])?),
            }
        }
    };

    // X as [T·B, I] rows, time-major.
    let mut x = ctx.required(0)?;
    if layout == 1 {
        x = transpose(ctx, x, vec![1, 0, 2])?;
    }
    let rows = seq_dim.mul_const(batch as i64).ok_or("too many steps")?;
    let x = reshape_dims(ctx, x, vec![rows, Dim::constant(input_size as i64)])?;
    // Initial states as [D, B, H].
    let initial = |ctx: &mut NodeCtx, i: usize| -> ImportResult<Option<ValueId>> {
        match ctx.input(i) {
            Some(v) if layout == 1 => Ok(Some(transpose(ctx, v, vec![1, 0, 2])?)),
            v => Ok(v),
        }
    };
    let (h0, c0) = (initial(ctx, 5)?, initial(ctx, 6)?);
    if let Some(cell) = sequence_cell(ctx, &spec, &acts, &lengths) {
        let shape = Sequence {
            seq: seq_dim,
            batch,
            hidden,
            layout,
        };
        return rnn_sequence(ctx, cell, x, shape, &reverse, (h0, c0));
    }
    if !seq_dim.is_const() {
        return Err(ImportError::Unsupported(
            "steps set at run time need the plain cell nnc runs as one loop (float32, \
             default activations, no clip, no sequence_lens, no peepholes)"
                .into(),
        ));
    }
    let zeros = Tensor::from_vec(&[batch, hidden], vec![0.0f64; batch * hidden]).cast(dtype);
    let zero = scalar(ctx, "zero", dtype, 0.0);
    let want_y = wants_output(ctx, 0);

    let (w_all, r_all) = (ctx.required(1)?, ctx.required(2)?);
    let (b_all, p_all) = (ctx.input(3), if is_lstm { ctx.input(7) } else { None });
    let mut ys = Vec::with_capacity(dirs);
    let mut last_h = Vec::with_capacity(dirs);
    let mut last_c = Vec::with_capacity(dirs);
    for (d, &rev) in reverse.iter().enumerate() {
        let w = direction_slice(ctx, w_all, d)?;
        let r = direction_slice(ctx, r_all, d)?;
        let (wb, rb) = match b_all {
            Some(b) => {
                let b = direction_slice(ctx, b, d)?;
                (
                    Some(slice(ctx, b, vec![0], vec![gh])?),
                    Some(slice(ctx, b, vec![gh], vec![gh])?),
                )
            }
            None => (None, None),
        };
        let p = match p_all {
            Some(p) => Some(direction_slice(ctx, p, d)?),
            None => None,
        };
        // GRU with linear_before_reset adds Rb inside the recurrent product.
        let rb_in_recurrence = matches!(
            cell,
            Cell::Gru {
                linear_before_reset: true
            }
        );
        let x_bias = match (wb, rb) {
            (Some(wb), Some(_)) if rb_in_recurrence => Some(wb),
            (Some(wb), Some(rb)) => Some(binary(ctx, BinaryOp::Add, wb, rb)?),
            _ => None,
        };
        let xw = gemm_bt(ctx, x, w, x_bias)?;
        let prm = Params { r, rb, p };

        let start = |ctx: &mut NodeCtx, init: Option<ValueId>| -> ImportResult<ValueId> {
            match init {
                Some(v) => direction_slice(ctx, v, d),
                None => Ok(ctx.constant_value("rnn_zero_state", zeros.clone())),
            }
        };
        let mut state = State {
            h: start(ctx, h0)?,
            c: if is_lstm { Some(start(ctx, c0)?) } else { None },
        };
        let mut y_steps = vec![None; seq];
        let order: Vec<usize> = if rev {
            (0..seq).rev().collect()
        } else {
            (0..seq).collect()
        };
        for t in order {
            let xw_t = slice(ctx, xw, vec![t * batch, 0], vec![batch, gh])?;
            let next = step(ctx, &spec, &acts[d], &prm, xw_t, &state)?;
            let y_t = match lengths.active(ctx, t)? {
                None => {
                    state = next;
                    Some(state.h)
                }
                Some(active) => {
                    let pick = |ctx: &mut NodeCtx, new: ValueId, old: ValueId| {
                        ctx.emit1(Op::Where, vec![Some(active), Some(new), Some(old)])
                    };
                    // Past its length a row outputs 0 and keeps its state.
                    let y_t = match want_y {
                        true => Some(pick(ctx, next.h, zero)?),
                        false => None,
                    };
                    state.h = pick(ctx, next.h, state.h)?;
                    if let (Some(new), Some(old)) = (next.c, state.c) {
                        state.c = Some(pick(ctx, new, old)?);
                    }
                    y_t
                }
            };
            y_steps[t] = y_t;
        }
        if want_y {
            let mut parts = Vec::with_capacity(seq);
            for y_t in y_steps.into_iter().flatten() {
                parts.push(reshape(ctx, y_t, vec![1, 1, batch, hidden])?);
            }
            ys.push(concat(ctx, parts, 0)?);
        }
        last_h.push(reshape(ctx, state.h, vec![1, batch, hidden])?);
        if let Some(c) = state.c {
            last_c.push(reshape(ctx, c, vec![1, batch, hidden])?);
        }
    }

    if want_y {
        // [T, D, B, H], or [B, T, D, H] with layout 1.
        let y = concat(ctx, ys, 1)?;
        let y = if layout == 1 {
            transpose(ctx, y, vec![2, 0, 1, 3])?
        } else {
            y
        };
        ctx.bind_output(0, y);
    }
    // [D, B, H], or [B, D, H] with layout 1.
    let finals = |ctx: &mut NodeCtx, parts: Vec<ValueId>| -> ImportResult<ValueId> {
        let v = concat(ctx, parts, 0)?;
        if layout == 1 {
            transpose(ctx, v, vec![1, 0, 2])
        } else {
            Ok(v)
        }
    };
    if wants_output(ctx, 1) {
        let y_h = finals(ctx, last_h)?;
        ctx.bind_output(1, y_h);
    }
    if is_lstm && wants_output(ctx, 2) {
        let y_c = finals(ctx, last_c)?;
        ctx.bind_output(2, y_c);
    }
    Ok(())
}

/// The cell as one `Op::RnnSequence` (whose loop runs over a sequence of any length,
/// so the graph is the same at every length), if it is one the op runs: float32, the
/// default activations, no clip, every row the whole sequence; an LSTM without
/// peepholes (or zero ones) and coupled gates, a GRU with `linear_before_reset` (what
/// PyTorch exports).
fn sequence_cell(
    ctx: &NodeCtx,
    spec: &Spec,
    acts: &[Vec<Act>],
    lengths: &Lengths,
) -> Option<RnnCell> {
    let no_peepholes = ctx.input(7).is_none_or(|p| {
        ctx.constant(p)
            .is_some_and(|t| t.to_f64_vec().iter().all(|&v| v == 0.0))
    });
    let (cell, default_acts) = match spec.cell {
        Cell::Lstm {
            input_forget: false,
        } if no_peepholes => (
            RnnCell::Lstm,
            acts.iter()
                .all(|a| matches!(a[..], [Act::Sigmoid, Act::Tanh, Act::Tanh])),
        ),
        Cell::Gru {
            linear_before_reset: true,
        } => (
            RnnCell::Gru,
            acts.iter()
                .all(|a| matches!(a[..], [Act::Sigmoid, Act::Tanh])),
        ),
        Cell::Rnn => (
            RnnCell::Simple,
            acts.iter().all(|a| matches!(a[..], [Act::Tanh])),
        ),
        _ => return None,
    };
    let plain = spec.dtype == DType::F32 && spec.clip.is_none() && matches!(lengths, Lengths::Full);
    (plain && default_acts).then_some(cell)
}

/// A recurrent op's extents and layout.
struct Sequence {
    seq: Dim,
    batch: usize,
    hidden: usize,
    layout: i64,
}

/// The recurrent op as one MatMul projecting every step's input for all directions
/// (biases added: both of each gate's, but GRU's `Rb` of its h gate, which the
/// recurrence adds inside the reset) and one `Op::RnnSequence`; `x` is `[T·B, I]`, the
/// initial states `[D, B, H]`.
fn rnn_sequence(
    ctx: &mut NodeCtx,
    cell: RnnCell,
    x: ValueId,
    shape: Sequence,
    reverse: &[bool],
    (h0, c0): (Option<ValueId>, Option<ValueId>),
) -> ImportResult {
    let Sequence {
        seq,
        batch,
        hidden,
        layout,
    } = shape;
    let (dirs, gh) = (reverse.len(), cell.gates() * hidden);
    let (w_all, r_all) = (ctx.required(1)?, ctx.required(2)?);
    let input_size = ctx.ty(w_all).shape[2];
    // A MatMul by Wᵀ (transposed once when constant) and the bias added: a GEMM of
    // the steps' rows however many the run has.
    let w = reshape(ctx, w_all, vec![dirs * gh, input_size])?;
    let wt = transpose(ctx, w, vec![1, 0])?;
    let mut xw = ctx.emit1(Op::MatMul(Default::default()), vec![Some(x), Some(wt)])?;
    let mut third = c0.filter(|_| cell == RnnCell::Lstm);
    if let Some(b) = ctx.input(3) {
        let wb = slice(ctx, b, vec![0, 0], vec![dirs, gh])?;
        let rb = slice(ctx, b, vec![0, gh], vec![dirs, gh])?;
        let sum = binary(ctx, BinaryOp::Add, wb, rb)?;
        let bias = match cell {
            RnnCell::Gru => {
                // z and r take both biases; h only Wb (Rb_h goes inside the reset).
                let zr = slice(ctx, sum, vec![0, 0], vec![dirs, 2 * hidden])?;
                let wb_h = slice(ctx, wb, vec![0, 2 * hidden], vec![dirs, hidden])?;
                third = Some(slice(ctx, rb, vec![0, 2 * hidden], vec![dirs, hidden])?);
                concat(ctx, vec![zr, wb_h], 1)?
            }
            _ => sum,
        };
        let bias = reshape(ctx, bias, vec![dirs * gh])?;
        xw = binary(ctx, BinaryOp::Add, xw, bias)?;
    }
    let xw = reshape_dims(
        ctx,
        xw,
        vec![
            seq,
            Dim::constant(batch as i64),
            Dim::constant((dirs * gh) as i64),
        ],
    )?;
    let op = Op::RnnSequence {
        cell,
        reverse: reverse.to_vec(),
    };
    let outs = ctx.emit(op, vec![Some(xw), Some(r_all), h0, third], cell.outputs())?;
    // [T, D, B, H], or [B, T, D, H] with layout 1; the states [D, B, H] or [B, D, H].
    let y = match layout {
        1 => transpose(ctx, outs[0], vec![2, 0, 1, 3])?,
        _ => outs[0],
    };
    let mut bound = vec![y];
    for &state in &outs[1..] {
        bound.push(match layout {
            1 => transpose(ctx, state, vec![1, 0, 2])?,
            _ => state,
        });
    }
    ctx.bind_outputs(&bound);
    Ok(())
}

pub fn rnn(ctx: &mut NodeCtx) -> ImportResult {
    recurrent(ctx, Cell::Rnn)
}

pub fn gru(ctx: &mut NodeCtx) -> ImportResult {
    let linear_before_reset = ctx.attrs.flag("linear_before_reset", false)?;
    recurrent(
        ctx,
        Cell::Gru {
            linear_before_reset,
        },
    )
}

pub fn lstm(ctx: &mut NodeCtx) -> ImportResult {
    let input_forget = ctx.attrs.flag("input_forget", false)?;
    recurrent(ctx, Cell::Lstm { input_forget })
}
