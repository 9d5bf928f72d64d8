//! `Op::LstmSequence`: an LSTM's recurrence, one step after another, over as many steps
//! as the sequence has (a constant, or the count of rows only the run knows).
//!
//! Per direction and step, each batch row's gates are `xw[t] + h·Rᵀ`: the recurrent
//! product runs over R packed as column blocks of [`BLOCK`] gate units, each block's K
//! rows contiguous (one 128-byte row per unit of h), accumulating eight f32x4 vectors.
//! The gate units are laid out gate by gate, each gate padded to `Hp` (a multiple of
//! eight) units: the padding's weights are zero, so its units' cell and hidden states
//! stay zero, and every step is whole vectors. The states live in scratch; `Y` gets
//! each step's `h`, `Y_h` and `Y_c` the last ones.

use cranelift_codegen::ir::{types, InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;

use super::{LowerCtx, LowerResult, Operand};
use crate::codegen::kernel::{self, flags};
use crate::codegen::kernels::gemm;
use crate::codegen::math;
use crate::codegen::plan::ALIGN;

/// Gate units (columns of the recurrent product) one pass accumulates.
const BLOCK: usize = 32;
const LANES: usize = 4;

/// The units of a gate as stored: `hidden` rounded up to a multiple of eight.
fn padded_hidden(hidden: usize) -> usize {
    hidden.next_multiple_of(8)
}

/// Bytes of the packed recurrence weights of `dirs` directions.
fn packed_bytes(dirs: usize, hidden: usize) -> usize {
    dirs * 4 * padded_hidden(hidden) * hidden * 4
}

/// Scratch bytes: the states h and c of every batch row, one row's gates, and the
/// packed weights when R is known only at run time.
pub fn lstm_scratch(dirs: usize, batch: usize, hidden: usize, r_constant: bool) -> usize {
    let hp = padded_hidden(hidden);
    let states = (2 * batch * hp * 4).next_multiple_of(ALIGN);
    let gates = (4 * hp * 4).next_multiple_of(ALIGN);
    let packed = if r_constant {
        0
    } else {
        packed_bytes(dirs, hidden)
    };
    states + gates + packed
}

/// `R` `[D, 4H, H]` packed: per direction, per block of [`BLOCK`] gate units, per unit
/// k of h, the block's weights (unit j of gate g is column `g·Hp + j`).
fn pack(r: &[f32], dirs: usize, hidden: usize) -> Vec<f32> {
    let hp = padded_hidden(hidden);
    let blocks = 4 * hp / BLOCK;
    let mut out = vec![0f32; packed_bytes(dirs, hidden) / 4];
    for d in 0..dirs {
        for g in 0..4 {
            for j in 0..hidden {
                let col = g * hp + j;
                let (blk, l) = (col / BLOCK, col % BLOCK);
                for k in 0..hidden {
                    let at = ((d * blocks + blk) * hidden + k) * BLOCK + l;
                    out[at] = r[((d * 4 + g) * hidden + j) * hidden + k];
                }
            }
        }
    }
    out
}

/// The first `lanes` floats at `addr` as a vector, the others zero.
fn load_part(b: &mut FunctionBuilder, addr: Value, offset: i32, lanes: usize) -> Value {
    if lanes == LANES {
        return b.ins().load(types::F32X4, flags(), addr, offset);
    }
    let zero = b.ins().f32const(0.0);
    let mut v = b.ins().splat(types::F32X4, zero);
    for lane in 0..lanes {
        let x = b
            .ins()
            .load(types::F32, flags(), addr, offset + 4 * lane as i32);
        v = b.ins().insertlane(v, x, lane as u8);
    }
    v
}

/// For each group of four units of a gate: `body(b, byte offset, lanes)` with the
/// units' byte offset and how many of the four are real (the last group may have
/// fewer); full groups run in a loop.
fn for_unit_groups(
    b: &mut FunctionBuilder,
    hidden: usize,
    mut body: impl FnMut(&mut FunctionBuilder, Value, usize),
) {
    let full = hidden / LANES * LANES;
    kernel::counted_loop(b, 0, full as i64, LANES as i64, |b, k| {
        let at = b.ins().imul_imm_s(k, 4);
        body(b, at, LANES);
    });
    if full < hidden {
        let at = kernel::iconst(b, 4 * full as i64);
        body(b, at, hidden - full);
    }
}

pub fn lstm_sequence(ctx: &mut LowerCtx, reverse: &[bool]) -> LowerResult {
    let (xw, r) = (ctx.input(0)?, ctx.input(1)?);
    let state_input = |i: usize| ctx.inputs.get(i).cloned().flatten();
    let (h0, c0) = (state_input(2), state_input(3));
    let (y, y_h, y_c) = (ctx.output(0), ctx.output(1), ctx.output(2));
    let (&[t_max, batch, cols], &[dirs, _, hidden]) =
        (xw.ty.shape.as_slice(), r.ty.shape.as_slice())
    else {
        return Err("LstmSequence needs 3-D xw and R".into());
    };
    if t_max == 0 || batch == 0 || hidden == 0 || dirs != reverse.len() {
        return Err("LstmSequence over an empty sequence, batch or state".into());
    }
    let hp = padded_hidden(hidden);
    let scratch = ctx.scratch.ok_or("LstmSequence was planned no scratch")?;
    let gates = ctx
        .b
        .ins()
        .iadd_imm_s(scratch, (2 * batch * hp * 4).next_multiple_of(ALIGN) as i64);
    let packed = match &r.constant {
        Some(t) => {
            let floats: Vec<f32> = t.to_f64_vec().iter().map(|&v| v as f32).collect();
            ctx.weights_f32(&pack(&floats, dirs, hidden))?
        }
        None => {
            let at = (4 * hp * 4).next_multiple_of(ALIGN) as i64;
            let dst = ctx.b.ins().iadd_imm_s(gates, at);
            pack_at_run_time(ctx.b, &r, dst, dirs, hidden);
            dst
        }
    };
    let steps = match ctx.run_rows {
        Some(run) => run.count,
        None => kernel::iconst(ctx.b, t_max as i64),
    };
    let fma = gemm::has_fma(ctx.target);
    let b = &mut *ctx.b;
    let h = scratch;
    let c = b.ins().iadd_imm_s(scratch, (batch * hp * 4) as i64);
    let (row, state_row) = ((hidden * 4) as i64, (hp * 4) as i64);
    for (d, &rev) in reverse.iter().enumerate() {
        let weights = b
            .ins()
            .iadd_imm_s(packed, (d * packed_bytes(1, hidden)) as i64);
        // The initial states, the padding zero.
        for (state, init) in [(h, &h0), (c, &c0)] {
            kernel::counted_loop(b, 0, batch as i64, 1, |b, bi| {
                let dst = b.ins().imul_imm_s(bi, state_row);
                let dst = b.ins().iadd(state, dst);
                let zero = b.ins().f32const(0.0);
                let zero = b.ins().splat(types::F32X4, zero);
                for k in (0..hp).step_by(LANES) {
                    b.ins().store(flags(), zero, dst, 4 * k as i32);
                }
                if let Some(init) = init {
                    let src = b.ins().imul_imm_s(bi, row);
                    let src = b.ins().iadd_imm_s(src, (d * batch) as i64 * row);
                    let src = b.ins().iadd(init.ptr, src);
                    for_unit_groups(b, hidden, |b, at, lanes| {
                        let s = b.ins().iadd(src, at);
                        let v = load_part(b, s, 0, lanes);
                        let t = b.ins().iadd(dst, at);
                        b.ins().store(flags(), v, t, 0);
                    });
                }
            });
        }
        kernel::dynamic_loop(b, steps, |b, s| {
            let t = if rev {
                let last = b.ins().iadd_imm_s(steps, -1);
                b.ins().isub(last, s)
            } else {
                s
            };
            let x_at = b.ins().imul_imm_s(t, (batch * cols * 4) as i64);
            let x_at = b.ins().iadd_imm_s(x_at, (d * 4 * hidden * 4) as i64);
            let x_step = b.ins().iadd(xw.ptr, x_at);
            let y_at = b.ins().imul_imm_s(t, (dirs * batch) as i64 * row);
            let y_at = b.ins().iadd_imm_s(y_at, (d * batch) as i64 * row);
            let y_step = b.ins().iadd(y.ptr, y_at);
            kernel::counted_loop(b, 0, batch as i64, 1, |b, bi| {
                let off = b.ins().imul_imm_s(bi, state_row);
                let (hb, cb) = (b.ins().iadd(h, off), b.ins().iadd(c, off));
                let x_off = b.ins().imul_imm_s(bi, (cols * 4) as i64);
                let x_row = b.ins().iadd(x_step, x_off);
                let y_off = b.ins().imul_imm_s(bi, row);
                let y_row = b.ins().iadd(y_step, y_off);
                recurrent_product(b, fma, weights, hb, gates, hidden);
                step_states(b, fma, gates, x_row, hb, cb, y_row, hidden);
            });
        });
        // The last states.
        for (state, out) in [(h, &y_h), (c, &y_c)] {
            kernel::counted_loop(b, 0, batch as i64, 1, |b, bi| {
                let src = b.ins().imul_imm_s(bi, state_row);
                let src = b.ins().iadd(state, src);
                let dst = b.ins().imul_imm_s(bi, row);
                let dst = b.ins().iadd_imm_s(dst, (d * batch) as i64 * row);
                let dst = b.ins().iadd(out.ptr, dst);
                for_unit_groups(b, hidden, |b, at, lanes| {
                    let s = b.ins().iadd(src, at);
                    let v = b.ins().load(types::F32X4, flags(), s, 0);
                    let t = b.ins().iadd(dst, at);
                    kernel::store_lanes(b, v, t, 0, lanes);
                });
            });
        }
    }
    Ok(())
}

/// `gates = h·Rᵀ` for one batch row (all `4·Hp` units), block by block.
fn recurrent_product(
    b: &mut FunctionBuilder,
    fma: bool,
    weights: Value,
    h: Value,
    gates: Value,
    hidden: usize,
) {
    let blocks = 4 * padded_hidden(hidden) / BLOCK;
    let vectors = BLOCK / LANES;
    kernel::counted_loop(b, 0, blocks as i64, 1, |b, blk| {
        let w_at = b.ins().imul_imm_s(blk, (hidden * BLOCK * 4) as i64);
        let w_block = b.ins().iadd(weights, w_at);
        let zero = b.ins().f32const(0.0);
        let zero = b.ins().splat(types::F32X4, zero);
        let acc: Vec<_> = (0..vectors)
            .map(|_| {
                let v = b.declare_var(types::F32X4);
                b.def_var(v, zero);
                v
            })
            .collect();
        kernel::strided_loop(b, hidden, &[(w_block, BLOCK * 4), (h, 4)], |b, p| {
            let hk = b.ins().load(types::F32, flags(), p[1], 0);
            let hk = b.ins().splat(types::F32X4, hk);
            for (i, &a) in acc.iter().enumerate() {
                let w = b.ins().load(types::F32X4, flags(), p[0], (16 * i) as i32);
                let cur = b.use_var(a);
                let next = gemm::mul_add(b, fma, hk, w, cur);
                b.def_var(a, next);
            }
        });
        let dst = b.ins().imul_imm_s(blk, (BLOCK * 4) as i64);
        let dst = b.ins().iadd(gates, dst);
        for (i, &a) in acc.iter().enumerate() {
            let v = b.use_var(a);
            b.ins().store(flags(), v, dst, (16 * i) as i32);
        }
    });
}

/// One step of one batch row: the gates' pre-activations (`gates` plus the step's input
/// projection `x`, gates i o f c), the new cell and hidden states, and `h` into `y`.
#[allow(clippy::too_many_arguments)]
fn step_states(
    b: &mut FunctionBuilder,
    fma: bool,
    gates: Value,
    x: Value,
    h: Value,
    c: Value,
    y: Value,
    hidden: usize,
) {
    let hp4 = (padded_hidden(hidden) * 4) as i32;
    let x_gate = (hidden * 4) as i32;
    for_unit_groups(b, hidden, |b, at, lanes| {
        let g_at = b.ins().iadd(gates, at);
        let x_at = b.ins().iadd(x, at);
        let mut pre = [None; 4];
        for (g, p) in pre.iter_mut().enumerate() {
            let v = b.ins().load(types::F32X4, flags(), g_at, g as i32 * hp4);
            let xv = load_part(b, x_at, g as i32 * x_gate, lanes);
            *p = Some(b.ins().fadd(v, xv));
        }
        let [i, o, f, cand] = pre.map(|p| p.expect("four gates"));
        let (i, o, f) = (
            math::sigmoid(b, i),
            math::sigmoid(b, o),
            math::sigmoid(b, f),
        );
        let cand = math::tanh(b, cand);
        let c_at = b.ins().iadd(c, at);
        let c_prev = b.ins().load(types::F32X4, flags(), c_at, 0);
        let kept = b.ins().fmul(f, c_prev);
        let c_new = gemm::mul_add(b, fma, i, cand, kept);
        b.ins().store(flags(), c_new, c_at, 0);
        let tc = math::tanh(b, c_new);
        let h_new = b.ins().fmul(o, tc);
        let h_at = b.ins().iadd(h, at);
        b.ins().store(flags(), h_new, h_at, 0);
        let y_at = b.ins().iadd(y, at);
        kernel::store_lanes(b, h_new, y_at, 0, lanes);
    });
}

/// Packs a run-time `R` (see [`pack`]) into `dst`, zeroing the padding first.
fn pack_at_run_time(b: &mut FunctionBuilder, r: &Operand, dst: Value, dirs: usize, hidden: usize) {
    let hp = padded_hidden(hidden);
    let zero = b.ins().f32const(0.0);
    let zero = b.ins().splat(types::F32X4, zero);
    let bytes = packed_bytes(dirs, hidden);
    kernel::strided_loop(b, bytes / 16, &[(dst, 16)], |b, p| {
        b.ins().store(flags(), zero, p[0], 0);
    });
    let blocks = 4 * hp / BLOCK;
    for d in 0..dirs {
        for g in 0..4 {
            kernel::counted_loop(b, 0, hidden as i64, 1, |b, j| {
                let col = b.ins().iadd_imm_s(j, (g * hp) as i64);
                let blk = b.ins().ushr_imm_s(col, BLOCK.trailing_zeros() as i64);
                let l = b.ins().band_imm_s(col, (BLOCK - 1) as i64);
                let src = b.ins().iadd_imm_s(j, ((d * 4 + g) * hidden) as i64);
                let src = b.ins().imul_imm_s(src, (hidden * 4) as i64);
                let src = b.ins().iadd(r.ptr, src);
                let at = b.ins().iadd_imm_s(blk, (d * blocks) as i64);
                let at = b.ins().imul_imm_s(at, (hidden * BLOCK) as i64);
                let at = b.ins().iadd(at, l);
                let at = b.ins().imul_imm_s(at, 4);
                let to = b.ins().iadd(dst, at);
                kernel::strided_loop(b, hidden, &[(src, 4), (to, BLOCK * 4)], |b, p| {
                    let v = b.ins().load(types::F32, flags(), p[0], 0);
                    b.ins().store(flags(), v, p[1], 0);
                });
            });
        }
    }
}
