//! Activation ranges from calibration: each tensor's values over all samples are folded
//! into a [`RangeObserver`] (min, max and a histogram of |x|), and a [`Method`] turns
//! the observer into the range the tensor is quantized to.
//!
//! The histogram has [`BINS`] bins over `[0, top)`; when a value reaches `top`, `top`
//! doubles and neighbouring bins merge, so no value is dropped and no second pass over
//! the samples is needed (onnxruntime's calibrator re-bins the same way, with arbitrary
//! ratios). Bin counts are exact; a threshold read from the histogram is exact to one
//! bin width, `top / BINS`.

/// Histogram bins (TensorRT's and onnxruntime's default for entropy calibration).
pub const BINS: usize = 2048;
/// Levels a symmetric int8 range has on one side: KL divergence is measured after
/// quantizing the reference distribution to this many bins.
const LEVELS: usize = 128;

/// How a tensor's range is chosen from its observed values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Method {
    /// The smallest and largest values seen.
    MinMax,
    /// Clip |x| at this percentile of all values seen (e.g. 99.99).
    Percentile(f64),
    /// Clip |x| where the KL divergence between the histogram and its quantized form is
    /// smallest (TensorRT's entropy calibration).
    Entropy,
}

/// Everything calibration keeps about one tensor.
#[derive(Clone, Debug)]
pub struct RangeObserver {
    min: f32,
    max: f32,
    /// Counts of |x| in `BINS` bins over `[0, top)`.
    hist: Vec<u64>,
    top: f32,
    count: u64,
    nan: u64,
}

impl Default for RangeObserver {
    fn default() -> Self {
        RangeObserver {
            min: f32::INFINITY,
            max: f32::NEG_INFINITY,
            hist: vec![0; BINS],
            top: 0.0,
            count: 0,
            nan: 0,
        }
    }
}

impl RangeObserver {
    /// Folds in one sample's values. NaNs are counted but do not move the range;
    /// infinities are an error left to the caller (they make every range infinite).
    pub fn observe(&mut self, values: &[f32]) {
        let mut largest = 0f32;
        for &x in values {
            if x.is_nan() {
                self.nan += 1;
                continue;
            }
            self.min = self.min.min(x);
            self.max = self.max.max(x);
            largest = largest.max(x.abs());
        }
        if !largest.is_finite() {
            return;
        }
        self.grow_to(largest);
        let scale = BINS as f32 / self.top;
        for &x in values {
            if x.is_nan() {
                continue;
            }
            let bin = ((x.abs() * scale) as usize).min(BINS - 1);
            self.hist[bin] += 1;
            self.count += 1;
        }
    }

    /// Doubles `top` (merging bin pairs into the lower half) until `x < top`.
    fn grow_to(&mut self, x: f32) {
        if self.top == 0.0 {
            // The first range: the next power of two above the values, at least 2⁻²⁰
            // so an all-zero tensor still gets a histogram.
            self.top = (x.max(f32::MIN_POSITIVE) * 1.0001).max(1.0 / (1 << 20) as f32);
            self.top = 2f32.powi(self.top.log2().ceil() as i32);
            if x >= self.top {
                self.top *= 2.0;
            }
            return;
        }
        while x >= self.top {
            for i in 0..BINS / 2 {
                self.hist[i] = self.hist[2 * i] + self.hist[2 * i + 1];
            }
            self.hist[BINS / 2..].iter_mut().for_each(|c| *c = 0);
            self.top *= 2.0;
        }
    }

    /// Values seen (NaNs excluded).
    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn nan_count(&self) -> u64 {
        self.nan
    }

    /// The range `method` picks, `(lo, hi)` with `lo ≤ 0 ≤ hi` (quantized ranges must
    /// hold zero exactly); `None` when no value was seen.
    pub fn range(&self, method: Method) -> Option<(f32, f32)> {
        if self.count == 0 {
            return None;
        }
        let (lo, hi) = (self.min.min(0.0), self.max.max(0.0));
        let clip = match method {
            Method::MinMax => return Some((lo, hi)),
            Method::Percentile(p) => self.percentile(p),
            Method::Entropy => self.entropy_threshold(),
        };
        Some((lo.max(-clip), hi.min(clip)))
    }

    fn bin_width(&self) -> f32 {
        self.top / BINS as f32
    }

    /// The upper edge of the first bin at which the cumulative share of |x| reaches
    /// `p` percent.
    fn percentile(&self, p: f64) -> f32 {
        let target = (p.clamp(0.0, 100.0) / 100.0 * self.count as f64).ceil() as u64;
        let mut seen = 0;
        for (i, &c) in self.hist.iter().enumerate() {
            seen += c;
            if seen >= target.max(1) {
                return (i + 1) as f32 * self.bin_width();
            }
        }
        self.top
    }

    /// TensorRT's search: for each candidate threshold of `i` bins (from [`LEVELS`] to
    /// the last used bin), the reference P is the first `i` bins with the rest of the
    /// mass folded into bin `i − 1`; Q merges P's bins into `LEVELS` groups and spreads
    /// each group's mass evenly over its non-empty bins; the threshold with the least
    /// KL(P ‖ Q) wins, at the upper edge of its last bin.
    fn entropy_threshold(&self) -> f32 {
        let used = self.hist.iter().rposition(|&c| c > 0).map_or(0, |i| i + 1);
        if used <= LEVELS {
            return used as f32 * self.bin_width();
        }
        let mut best = (f64::INFINITY, used);
        for i in LEVELS..=used {
            let mut p: Vec<f64> = self.hist[..i].iter().map(|&c| c as f64).collect();
            let outliers: u64 = self.hist[i..].iter().sum();
            p[i - 1] += outliers as f64;
            let mut q = vec![0f64; i];
            for g in 0..LEVELS {
                let (from, to) = (g * i / LEVELS, (g + 1) * i / LEVELS);
                // Q's group mass comes from the unclipped histogram, as in TensorRT.
                let mass: f64 = self.hist[from..to].iter().map(|&c| c as f64).sum();
                let nonzero = p[from..to].iter().filter(|&&v| v > 0.0).count();
                if nonzero > 0 {
                    for j in from..to {
                        if p[j] > 0.0 {
                            q[j] = mass / nonzero as f64;
                        }
                    }
                }
            }
            let kl = kl_divergence(&p, &q);
            if kl < best.0 {
                best = (kl, i);
            }
        }
        best.1 as f32 * self.bin_width()
    }
}

/// KL(P ‖ Q) of two unnormalized histograms; bins where P is zero add nothing, and a
/// bin where P is not but Q is makes it infinite.
fn kl_divergence(p: &[f64], q: &[f64]) -> f64 {
    let (sp, sq): (f64, f64) = (p.iter().sum(), q.iter().sum());
    if sp == 0.0 || sq == 0.0 {
        return f64::INFINITY;
    }
    p.iter()
        .zip(q)
        .filter(|(&pi, _)| pi > 0.0)
        .map(|(&pi, &qi)| {
            if qi == 0.0 {
                f64::INFINITY
            } else {
                let (pn, qn) = (pi / sp, qi / sq);
                pn * (pn / qn).ln()
            }
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic standard normal values (xorshift + Box–Muller).
    fn normal(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        let mut uniform = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        };
        (0..n)
            .map(|_| {
                let (u, v) = (uniform(), uniform());
                ((-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()) as f32
            })
            .collect()
    }

    #[test]
    fn minmax_is_exact_and_holds_zero() {
        let mut o = RangeObserver::default();
        o.observe(&[0.5, 3.25, 1.0]);
        assert_eq!(o.range(Method::MinMax), Some((0.0, 3.25)));
        o.observe(&[-7.5, f32::NAN]);
        assert_eq!(o.range(Method::MinMax), Some((-7.5, 3.25)));
        assert_eq!((o.count(), o.nan_count()), (4, 1));
        assert_eq!(RangeObserver::default().range(Method::MinMax), None);
    }

    #[test]
    fn growing_the_histogram_keeps_every_value() {
        let mut o = RangeObserver::default();
        let small: Vec<f32> = (0..1000).map(|i| i as f32 / 1000.0).collect();
        o.observe(&small);
        o.observe(&[300.0]);
        o.observe(&small);
        assert_eq!(o.count(), 2001);
        assert_eq!(o.hist.iter().sum::<u64>(), 2001);
        // 100% is the largest value, to a bin.
        let top = o.range(Method::Percentile(100.0)).unwrap().1;
        assert!((300.0..=300.0 + o.bin_width()).contains(&top), "{top}");
        // Half the values are below 0.5, to a bin (the small ones merged into bins of
        // width top / BINS).
        let half = o.range(Method::Percentile(50.0)).unwrap().1;
        assert!((half - 0.5).abs() <= 2.0 * o.bin_width(), "{half}");
    }

    #[test]
    fn percentile_of_uniform_values() {
        let mut o = RangeObserver::default();
        let v: Vec<f32> = (0..100_000).map(|i| i as f32 / 10.0).collect();
        o.observe(&v);
        let p99 = o.range(Method::Percentile(99.0)).unwrap().1;
        assert!((p99 - 9900.0).abs() <= o.bin_width(), "{p99}");
        let p9999 = o.range(Method::Percentile(99.99)).unwrap().1;
        assert!((p9999 - 9999.0).abs() <= o.bin_width(), "{p9999}");
    }

    /// On a normal distribution with two outliers at 15σ and 20σ, minmax takes the
    /// outliers, the 99.99th percentile lands near 3.9σ, and entropy clips between 2σ
    /// and 8σ. (With outliers hundreds of σ out, the bulk falls into a few of the 2048
    /// bins and entropy cannot clip below 128 bins: the method's known limit, which
    /// onnxruntime's and TensorRT's histograms share.)
    #[test]
    fn entropy_and_percentile_clip_outliers() {
        let mut o = RangeObserver::default();
        let mut v = normal(200_000, 42);
        v.extend([-15.0, 20.0]);
        for chunk in v.chunks(10_000) {
            o.observe(chunk);
        }
        assert_eq!(o.range(Method::MinMax), Some((-15.0, 20.0)));
        let (lo, hi) = o.range(Method::Percentile(99.99)).unwrap();
        assert!((3.5..4.5).contains(&hi) && lo == -hi, "{lo} {hi}");
        let (lo, hi) = o.range(Method::Entropy).unwrap();
        assert!((2.0..8.0).contains(&hi) && lo == -hi, "{lo} {hi}");
    }

    #[test]
    fn an_all_zero_tensor_has_the_zero_range() {
        let mut o = RangeObserver::default();
        o.observe(&[0.0; 64]);
        for m in [Method::MinMax, Method::Percentile(99.99), Method::Entropy] {
            assert_eq!(o.range(m), Some((0.0, 0.0)), "{m:?}");
        }
    }
}
