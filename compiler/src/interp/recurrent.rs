//! `Op::RnnSequence`: a recurrent cell's recurrence, step by step, in float32 (the
//! gates' functions in f64, rounded once, as the elementwise ops compute them).

use crate::ir::Tensor;
use crate::ops::RnnCell;

fn sigmoid(x: f32) -> f32 {
    let x = f64::from(x);
    let y = if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    };
    y as f32
}

fn tanh(x: f32) -> f32 {
    f64::from(x).tanh() as f32
}

/// `Y`, `Y_h` (and an LSTM's `Y_c`) from `xw` `[T, B, D·G·H]`, `R` `[D, G·H, H]`, the
/// optional initial h `[D, B, H]` and `extra` (an LSTM's initial c, a GRU's `Rb_h`).
pub(super) fn rnn_sequence(
    cell: RnnCell,
    xw: &Tensor,
    r: &Tensor,
    h0: Option<&Tensor>,
    extra: Option<&Tensor>,
    reverse: &[bool],
) -> Result<Vec<Tensor>, String> {
    let (&[t_len, batch, _], &[dirs, _, hidden]) = (xw.shape(), r.shape()) else {
        return Err("RnnSequence needs 3-D xw and R".into());
    };
    let f32s = |t: &Tensor| {
        t.to_f64_vec()
            .into_iter()
            .map(|v| v as f32)
            .collect::<Vec<_>>()
    };
    let (xw, r) = (f32s(xw), f32s(r));
    let zeros = |n: usize| vec![0f32; n];
    let mut hs = h0.map_or_else(|| zeros(dirs * batch * hidden), f32s);
    let (mut cs, rb_h) = match cell {
        RnnCell::Lstm => (
            extra.map_or_else(|| zeros(dirs * batch * hidden), f32s),
            vec![],
        ),
        RnnCell::Gru => (vec![], extra.map_or_else(|| zeros(dirs * hidden), f32s)),
        RnnCell::Simple => (vec![], vec![]),
    };
    let gh = cell.gates() * hidden;
    let mut y = vec![0f32; t_len * dirs * batch * hidden];
    let mut prod = vec![0f32; gh];
    for (d, &rev) in reverse.iter().enumerate().take(dirs) {
        let r_d = &r[d * gh * hidden..(d + 1) * gh * hidden];
        for step in 0..t_len {
            let t = if rev { t_len - 1 - step } else { step };
            for b in 0..batch {
                let at = (d * batch + b) * hidden;
                let x = &xw[(t * batch + b) * dirs * gh + d * gh..][..gh];
                for (j, p) in prod.iter_mut().enumerate() {
                    *p = (0..hidden).map(|k| hs[at + k] * r_d[j * hidden + k]).sum();
                }
                for k in 0..hidden {
                    let h_new = match cell {
                        RnnCell::Simple => tanh(x[k] + prod[k]),
                        RnnCell::Gru => {
                            let z = sigmoid(x[k] + prod[k]);
                            let rr = sigmoid(x[hidden + k] + prod[hidden + k]);
                            let pre = prod[2 * hidden + k] + rb_h[d * hidden + k];
                            let cand = tanh(x[2 * hidden + k] + rr * pre);
                            cand + z * (hs[at + k] - cand)
                        }
                        RnnCell::Lstm => {
                            let i = sigmoid(x[k] + prod[k]);
                            let o = sigmoid(x[hidden + k] + prod[hidden + k]);
                            let f = sigmoid(x[2 * hidden + k] + prod[2 * hidden + k]);
                            let c =
                                f * cs[at + k] + i * tanh(x[3 * hidden + k] + prod[3 * hidden + k]);
                            cs[at + k] = c;
                            o * tanh(c)
                        }
                    };
                    hs[at + k] = h_new;
                }
                let out = ((t * dirs + d) * batch + b) * hidden;
                y[out..out + hidden].copy_from_slice(&hs[at..at + hidden]);
            }
        }
    }
    let states = [dirs, batch, hidden];
    let mut outs = vec![
        Tensor::from_vec(&[t_len, dirs, batch, hidden], y),
        Tensor::from_vec(&states, hs),
    ];
    if cell == RnnCell::Lstm {
        outs.push(Tensor::from_vec(&states, cs));
    }
    Ok(outs)
}
