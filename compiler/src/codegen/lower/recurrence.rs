//! `Op::RnnSequence`: a recurrent cell's recurrence (RNN, GRU, LSTM), one step after
//! another, over as many steps as the sequence has (a constant, or the count of rows
//! only the run knows).
//!
//! Per direction and step, each batch row's gates are `xw[t]` and `h·Rᵀ`: the recurrent
//! product runs over R packed as column blocks of [`BLOCK`] gate units, each block's K
//! rows contiguous (one 128-byte row per unit of h), accumulating eight f32x4 vectors.
//! The gate units are laid out gate by gate, each gate padded to `Hp` units (so that
//! the gates fill whole blocks): the padding's weights are zero, so its units' states
//! stay zero, and every step is whole vectors. The states live in scratch; `Y` gets
//! each step's `h`, `Y_h` (and an LSTM's `Y_c`) the last ones.
//!
//! Where the target has the machine-code GEMM and R is constant, the recurrent product
//! is that GEMM with one row (its GEMV), R packed as its B in the same gate-by-gate
//! column order: the Cranelift loop above keeps eight f32x4 accumulators and eight
//! loaded weight vectors live, more than x86-64's 16 registers, and its spills put a
//! store and a reload on every K step's dependency chain (lstm_lm, 2 × 256 units:
//! 48 µs per step against onnxruntime's ~25 on a Zen 3).

use cranelift_codegen::ir::{types, InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;

use super::gemm::{ALayout, GemmKernel, GemmSpec, Geometry};
use super::{LowerCtx, LowerResult, Operand};
use crate::codegen::kernel::{self, flags};
use crate::codegen::kernels::gemm;
use crate::codegen::math;
use crate::codegen::plan::recurrence::{packed_bytes, padded_hidden, states_bytes, BLOCK};
use crate::codegen::plan::Strategy;
use crate::codegen::plan::ALIGN;
use crate::ops::RnnCell;

const LANES: usize = 4;

/// The one-row GEMM `gates = h·Rᵀ` of one direction, R `[G·H, H]` (`r`, that
/// direction's rows) packed as B with column `g·Hp + j` holding unit j of gate g (zero
/// for the padding units), and its packed weights.
fn recurrent_gemm(
    geometry: Geometry,
    r: &[f32],
    cell: RnnCell,
    hidden: usize,
) -> (GemmSpec, Vec<f32>) {
    let hp = padded_hidden(hidden, cell);
    let n = cell.gates() * hp;
    let (packed, b) = gemm::pack_constant_b(&geometry, hidden, n, |k, col| {
        let (g, j) = (col / hp, col % hp);
        if j < hidden {
            r[(g * hidden + j) * hidden + k]
        } else {
            0.0
        }
    });
    let a = ALayout::Strided {
        row_stride: hp,
        col_stride: 1,
    };
    let spec = GemmSpec::product((1, n, hidden), a, b, geometry);
    (spec, packed)
}

/// `R` `[D, G·H, H]` packed: per direction, per block of [`BLOCK`] gate units, per unit
/// k of h, the block's weights (unit j of gate g is column `g·Hp + j`).
fn pack(r: &[f32], cell: RnnCell, dirs: usize, hidden: usize) -> Vec<f32> {
    let (hp, gates) = (padded_hidden(hidden, cell), cell.gates());
    let blocks = gates * hp / BLOCK;
    let mut out = vec![0f32; packed_bytes(cell, dirs, hidden) / 4];
    for d in 0..dirs {
        for g in 0..gates {
            for j in 0..hidden {
                let col = g * hp + j;
                let (blk, l) = (col / BLOCK, col % BLOCK);
                for k in 0..hidden {
                    let at = ((d * blocks + blk) * hidden + k) * BLOCK + l;
                    out[at] = r[((d * gates + g) * hidden + j) * hidden + k];
                }
            }
        }
    }
    out
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

pub fn rnn_sequence(ctx: &mut LowerCtx, cell: RnnCell, reverse: &[bool]) -> LowerResult {
    let (xw, r) = (ctx.input(0)?, ctx.input(1)?);
    let optional = |i: usize| ctx.inputs.get(i).cloned().flatten();
    let (h0, extra) = (optional(2), optional(3));
    let c0 = extra.clone().filter(|_| cell == RnnCell::Lstm);
    let rb_h = extra.filter(|_| cell == RnnCell::Gru).map(|o| o.ptr);
    let (y, y_h) = (ctx.output(0), ctx.output(1));
    let y_c = (cell == RnnCell::Lstm).then(|| ctx.output(2));
    let (&[t_max, batch, cols], &[dirs, _, hidden]) =
        (xw.ty.shape.as_slice(), r.ty.shape.as_slice())
    else {
        return Err("RnnSequence needs 3-D xw and R".into());
    };
    if t_max == 0 || batch == 0 || hidden == 0 || dirs != reverse.len() {
        return Err("RnnSequence over an empty sequence, batch or state".into());
    }
    let (hp, gates_n) = (padded_hidden(hidden, cell), cell.gates());
    let scratch = ctx.scratch.ok_or("RnnSequence was planned no scratch")?;
    let gates = ctx
        .b
        .ins()
        .iadd_imm_s(scratch, states_bytes(cell, batch, hp) as i64);
    // The machine-code GEMM of each direction and its packed R, when planned.
    let mut gemms: Vec<(GemmKernel, Value)> = vec![];
    let planned_gemm = match &ctx.kernel.strategy {
        Strategy::Gemm(g) => Some(*g),
        _ => None,
    };
    let packed = match (&r.constant, planned_gemm) {
        (Some(t), Some(geometry)) => {
            let floats: Vec<f32> = t.to_f64_vec().iter().map(|&v| v as f32).collect();
            let per_dir = gates_n * hidden * hidden;
            for d in 0..dirs {
                let rows = &floats[d * per_dir..(d + 1) * per_dir];
                let (spec, packed) = recurrent_gemm(geometry, rows, cell, hidden);
                let kernel = GemmKernel::define(ctx, &spec)?;
                gemms.push((kernel, ctx.weights_f32(&packed)?));
            }
            gemms[0].1
        }
        (Some(t), None) => {
            let floats: Vec<f32> = t.to_f64_vec().iter().map(|&v| v as f32).collect();
            ctx.weights_f32(&pack(&floats, cell, dirs, hidden))?
        }
        (None, _) => {
            let at = (gates_n * hp * 4).next_multiple_of(ALIGN) as i64;
            let dst = ctx.b.ins().iadd_imm_s(gates, at);
            pack_at_run_time(ctx.b, &r, dst, cell, dirs, hidden);
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
    // An LSTM's cell states follow its hidden ones (the other cells have none).
    let c = b.ins().iadd_imm_s(scratch, (batch * hp * 4) as i64);
    let (row, state_row) = ((hidden * 4) as i64, (hp * 4) as i64);
    for (d, &rev) in reverse.iter().enumerate() {
        let weights = b
            .ins()
            .iadd_imm_s(packed, (d * packed_bytes(cell, 1, hidden)) as i64);
        let rb = rb_h.map(|p| b.ins().iadd_imm_s(p, (d * hidden * 4) as i64));
        // The initial states, the padding zero.
        let states = match cell {
            RnnCell::Lstm => vec![(h, &h0), (c, &c0)],
            _ => vec![(h, &h0)],
        };
        for (state, init) in states {
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
                        let v = kernel::load_lanes(b, s, 0, lanes);
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
            let x_at = b.ins().iadd_imm_s(x_at, (d * gates_n * hidden * 4) as i64);
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
                match gemms.get(d) {
                    Some((kernel, packed_r)) => kernel.call(b, hb, *packed_r, gates, &[]),
                    None => recurrent_product(b, fma, weights, hb, gates, (hidden, hp, gates_n)),
                }
                let step = Step {
                    gates,
                    x: x_row,
                    h: hb,
                    c: cb,
                    y: y_row,
                    rb,
                };
                step_states(b, fma, cell, &step, (hidden, hp));
            });
        });
        // The last states.
        for (state, out) in [(h, Some(&y_h)), (c, y_c.as_ref())] {
            let Some(out) = out else { continue };
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

/// `gates = h·Rᵀ` for one batch row (all `G·Hp` units), block by block.
fn recurrent_product(
    b: &mut FunctionBuilder,
    fma: bool,
    weights: Value,
    h: Value,
    gates: Value,
    (hidden, hp, gates_n): (usize, usize, usize),
) {
    let blocks = gates_n * hp / BLOCK;
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

/// Where one step of one batch row reads and writes.
struct Step {
    /// `h·Rᵀ`, gate by gate (`Hp` units each).
    gates: Value,
    /// The step's input projection, gate by gate (`H` units each).
    x: Value,
    /// The states (`Hp` units) and the step's row of `Y` (`H` units).
    h: Value,
    c: Value,
    y: Value,
    /// A GRU's `Rb` of its h gate (`H` units), when given.
    rb: Option<Value>,
}

/// One step of one batch row: the gates' pre-activations, the new states, and `h`
/// into `y`.
fn step_states(
    b: &mut FunctionBuilder,
    fma: bool,
    cell: RnnCell,
    s: &Step,
    (hidden, hp): (usize, usize),
) {
    let hp4 = (hp * 4) as i32;
    let x_gate = (hidden * 4) as i32;
    for_unit_groups(b, hidden, |b, at, lanes| {
        let g_at = b.ins().iadd(s.gates, at);
        let x_at = b.ins().iadd(s.x, at);
        let product =
            |b: &mut FunctionBuilder, g: i32| b.ins().load(types::F32X4, flags(), g_at, g * hp4);
        let input =
            |b: &mut FunctionBuilder, g: i32| kernel::load_lanes(b, x_at, g * x_gate, lanes);
        let pre = |b: &mut FunctionBuilder, g: i32| {
            let (p, x) = (product(b, g), input(b, g));
            b.ins().fadd(p, x)
        };
        let h_at = b.ins().iadd(s.h, at);
        let h_new = match cell {
            RnnCell::Simple => {
                let p = pre(b, 0);
                math::tanh(b, p)
            }
            RnnCell::Gru => {
                let (z, r) = (pre(b, 0), pre(b, 1));
                let (z, r) = (math::sigmoid(b, z), math::sigmoid(b, r));
                let mut hr = product(b, 2);
                if let Some(rb) = s.rb {
                    let rb_at = b.ins().iadd(rb, at);
                    let bias = kernel::load_lanes(b, rb_at, 0, lanes);
                    hr = b.ins().fadd(hr, bias);
                }
                let xh = input(b, 2);
                let cand = gemm::mul_add(b, fma, r, hr, xh);
                let cand = math::tanh(b, cand);
                let h_prev = b.ins().load(types::F32X4, flags(), h_at, 0);
                let diff = b.ins().fsub(h_prev, cand);
                gemm::mul_add(b, fma, z, diff, cand)
            }
            RnnCell::Lstm => {
                let [i, o, f, cand] = [0, 1, 2, 3].map(|g| pre(b, g));
                let (i, o, f) = (
                    math::sigmoid(b, i),
                    math::sigmoid(b, o),
                    math::sigmoid(b, f),
                );
                let cand = math::tanh(b, cand);
                let c_at = b.ins().iadd(s.c, at);
                let c_prev = b.ins().load(types::F32X4, flags(), c_at, 0);
                let kept = b.ins().fmul(f, c_prev);
                let c_new = gemm::mul_add(b, fma, i, cand, kept);
                b.ins().store(flags(), c_new, c_at, 0);
                let tc = math::tanh(b, c_new);
                b.ins().fmul(o, tc)
            }
        };
        b.ins().store(flags(), h_new, h_at, 0);
        let y_at = b.ins().iadd(s.y, at);
        kernel::store_lanes(b, h_new, y_at, 0, lanes);
    });
}

/// Packs a run-time `R` (see [`pack`]) into `dst`, zeroing the padding first.
fn pack_at_run_time(
    b: &mut FunctionBuilder,
    r: &Operand,
    dst: Value,
    cell: RnnCell,
    dirs: usize,
    hidden: usize,
) {
    let (hp, gates) = (padded_hidden(hidden, cell), cell.gates());
    let zero = b.ins().f32const(0.0);
    let zero = b.ins().splat(types::F32X4, zero);
    let bytes = packed_bytes(cell, dirs, hidden);
    kernel::strided_loop(b, bytes / 16, &[(dst, 16)], |b, p| {
        b.ins().store(flags(), zero, p[0], 0);
    });
    let blocks = gates * hp / BLOCK;
    for d in 0..dirs {
        for g in 0..gates {
            kernel::counted_loop(b, 0, hidden as i64, 1, |b, j| {
                let col = b.ins().iadd_imm_s(j, (g * hp) as i64);
                let blk = b.ins().ushr_imm_s(col, BLOCK.trailing_zeros() as i64);
                let l = b.ins().band_imm_s(col, (BLOCK - 1) as i64);
                let src = b.ins().iadd_imm_s(j, ((d * gates + g) * hidden) as i64);
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
