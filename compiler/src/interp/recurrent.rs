//! `Op::LstmSequence`: an LSTM's recurrence, step by step, in float32 (the gates'
//! functions in f64, rounded once, as the elementwise ops compute them).

use crate::ir::Tensor;

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

/// `Y`, `Y_h`, `Y_c` from `xw` `[T, B, D·4H]`, `R` `[D, 4H, H]` and the optional initial
/// states `[D, B, H]`.
pub(super) fn lstm_sequence(
    xw: &Tensor,
    r: &Tensor,
    h0: Option<&Tensor>,
    c0: Option<&Tensor>,
    reverse: &[bool],
) -> Result<Vec<Tensor>, String> {
    let (&[t_len, batch, _], &[dirs, _, hidden]) = (xw.shape(), r.shape()) else {
        return Err("LstmSequence needs 3-D xw and R".into());
    };
    let f32s = |t: &Tensor| {
        t.to_f64_vec()
            .into_iter()
            .map(|v| v as f32)
            .collect::<Vec<_>>()
    };
    let (xw, r) = (f32s(xw), f32s(r));
    let state = |s: Option<&Tensor>| s.map_or_else(|| vec![0f32; dirs * batch * hidden], f32s);
    let (mut hs, mut cs) = (state(h0), state(c0));
    let gh = 4 * hidden;
    let mut y = vec![0f32; t_len * dirs * batch * hidden];
    let mut gates = vec![0f32; gh];
    for (d, &rev) in reverse.iter().enumerate().take(dirs) {
        let r_d = &r[d * gh * hidden..(d + 1) * gh * hidden];
        for step in 0..t_len {
            let t = if rev { t_len - 1 - step } else { step };
            for b in 0..batch {
                let at = (d * batch + b) * hidden;
                let row = &xw[(t * batch + b) * dirs * gh + d * gh..][..gh];
                for (j, g) in gates.iter_mut().enumerate() {
                    let dot: f32 = (0..hidden).map(|k| hs[at + k] * r_d[j * hidden + k]).sum();
                    *g = row[j] + dot;
                }
                for k in 0..hidden {
                    let i = sigmoid(gates[k]);
                    let o = sigmoid(gates[hidden + k]);
                    let f = sigmoid(gates[2 * hidden + k]);
                    let c_new = f * cs[at + k] + i * tanh(gates[3 * hidden + k]);
                    cs[at + k] = c_new;
                    hs[at + k] = o * tanh(c_new);
                }
                let out = ((t * dirs + d) * batch + b) * hidden;
                y[out..out + hidden].copy_from_slice(&hs[at..at + hidden]);
            }
        }
    }
    let states = [dirs, batch, hidden];
    Ok(vec![
        Tensor::from_vec(&[t_len, dirs, batch, hidden], y),
        Tensor::from_vec(&states, hs),
        Tensor::from_vec(&states, cs),
    ])
}
