//! Bias correction (Nagel et al., "Data-Free Quantization", 2019, section 4.2):
//! rounding the weights shifts each output channel's mean by `Σ_k ΔW[m,k]·E[x_k]`,
//! because the inputs of a layer after a ReLU are far from zero-mean. Calibration
//! records each input channel's mean, and the int32 bias absorbs the expected shift,
//! so the quantized layer's outputs are unbiased.

/// Per-channel means of one tensor over every calibration sample.
#[derive(Clone, Debug, Default)]
pub struct ChannelMeans {
    sums: Vec<f64>,
    counts: u64,
}

impl ChannelMeans {
    /// Folds in one sample whose channels lie along `axis` of `shape`.
    pub fn observe(&mut self, values: &[f32], shape: &[usize], axis: usize) {
        let Some(&channels) = shape.get(axis) else {
            return;
        };
        let inner: usize = shape[axis + 1..].iter().product();
        if channels == 0 || inner == 0 {
            return;
        }
        if self.sums.len() != channels {
            *self = ChannelMeans {
                sums: vec![0.0; channels],
                counts: 0,
            };
        }
        for (i, run) in values.chunks(inner).enumerate() {
            let s: f64 = run
                .iter()
                .filter(|x| x.is_finite())
                .map(|&x| x as f64)
                .sum();
            self.sums[i % channels] += s;
        }
        self.counts += (values.len() / channels) as u64;
    }

    /// The mean of each channel, if anything was seen.
    pub fn means(&self) -> Option<Vec<f64>> {
        (self.counts > 0).then(|| self.sums.iter().map(|s| s / self.counts as f64).collect())
    }
}

/// The expected output shift of each map whose float weights `rows[m]` (`[M][K]`)
/// were quantized to `quantized[m]·scales[m]`, where `mean_of(m, k)` is the mean of
/// the input that row `m`'s element `k` multiplies. Subtract it from the bias.
pub fn expected_shift(
    rows: &[Vec<f32>],
    scales: &[f32],
    quantized: &[Vec<i8>],
    mean_of: impl Fn(usize, usize) -> f64,
) -> Vec<f64> {
    rows.iter()
        .zip(scales)
        .zip(quantized)
        .enumerate()
        .map(|(m, ((row, &s), q))| {
            row.iter()
                .zip(q)
                .enumerate()
                .map(|(k, (&w, &wq))| (wq as f64 * s as f64 - w as f64) * mean_of(m, k))
                .sum()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn means_follow_the_channel_axis() {
        let mut m = ChannelMeans::default();
        // [1, 2, 3]: channel 0 holds 1, 2, 3; channel 1 holds 10, 20, 30.
        m.observe(&[1.0, 2.0, 3.0, 10.0, 20.0, 30.0], &[1, 2, 3], 1);
        m.observe(&[3.0, 3.0, 3.0, 0.0, 0.0, 0.0], &[1, 2, 3], 1);
        assert_eq!(m.means().unwrap(), vec![2.5, 10.0]);
    }

    #[test]
    fn the_shift_is_the_rounding_error_times_the_mean() {
        // One map, two input channels of 2 taps each; scale 0.5.
        let rows = vec![vec![0.6, -0.2, 1.0, 0.0]];
        let q = vec![vec![1i8, 0, 2, 0]];
        let means = [2.0, -1.0];
        let shift = expected_shift(&rows, &[0.5], &q, |_, k| means[k / 2]);
        // channel 0: (0.5 − 0.6 + 0 + 0.2)·2 = 0.2; channel 1: (1.0 − 1.0)·(−1) = 0.
        assert!((shift[0] - 0.2).abs() < 1e-6, "{shift:?}");
    }
}
