//! Extents that are functions of one dim set at run time: a conv's output size
//! `⌊(n + pads − dilation·(k−1) − 1) / stride⌋ + 1` of its input's `n`, composed
//! through a network. Written as steps `x ↦ ⌊(x + add) / div⌋`, each stride and
//! offset folded into one step, so the run evaluates an extent with a few adds and
//! divisions by constants.

use std::fmt;

/// One step `x ↦ ⌊(x + add) / div⌋` (`div ≥ 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ExtentStep {
    pub add: i64,
    pub div: u64,
}

/// An extent as a function of a dim's value `n`: `n` put through `steps` in order.
/// No steps: `n` itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ExtentExpr {
    pub steps: Vec<ExtentStep>,
}

impl ExtentExpr {
    /// The dim's value itself.
    pub fn dim() -> ExtentExpr {
        ExtentExpr::default()
    }

    pub fn is_dim(&self) -> bool {
        self.steps.is_empty()
    }

    /// This extent put through `x ↦ ⌊(x + add) / div⌋`; a step dividing by 1 merges
    /// into the one before it.
    pub fn then(&self, add: i64, div: u64) -> ExtentExpr {
        let mut steps = self.steps.clone();
        match steps.last_mut() {
            Some(last) if div == 1 && add % (last.div as i64) == 0 => {
                last.add += add * last.div as i64;
            }
            _ if div == 1 && add == 0 => {}
            _ => steps.push(ExtentStep { add, div }),
        }
        ExtentExpr { steps }
    }

    /// A sliding window's output extent over this one: `⌊(x + pads − span) / stride⌋ + 1`
    /// (`span` = dilation·(kernel−1) + 1), rounded up with `ceil`.
    pub fn window(&self, pads: i64, span: i64, stride: u64, ceil: bool) -> ExtentExpr {
        let s = stride as i64;
        let round = if ceil { s - 1 } else { 0 };
        self.then(pads - span + s + round, stride)
    }

    /// The extent at `n`; `None` when a step would divide a negative number (no
    /// valid extent there).
    pub fn eval(&self, n: i64) -> Option<i64> {
        self.steps.iter().try_fold(n, |x, s| {
            let y = x.checked_add(s.add)?;
            (y >= 0).then(|| y / s.div as i64)
        })
    }
}

impl ExtentExpr {
    /// The extent when the dim is `n`, 0 where the formula leaves none.
    pub fn size_at(&self, n: usize) -> usize {
        self.eval(n as i64).unwrap_or(0).max(0) as usize
    }

    /// This extent of `x` in ASCII arithmetic of non-negative integers, `/` rounding
    /// down as C's does (`(width - 4)/4`), for headers and listings.
    pub fn written(&self, x: &str) -> String {
        let mut e = x.to_string();
        for (i, s) in self.steps.iter().enumerate() {
            let sum = match s.add {
                0 => e,
                a if a > 0 => format!("{e} + {a}"),
                a => format!("{e} - {}", -a),
            };
            let last = i + 1 == self.steps.len();
            let atom = sum.chars().all(|c| c.is_alphanumeric() || "_.".contains(c));
            e = match (s.div, last || atom) {
                (1, true) => sum,
                (1, false) => format!("({sum})"),
                (d, true) if atom => format!("{sum}/{d}"),
                (d, _) => format!("({sum})/{d}"),
            };
        }
        e
    }
}

impl fmt::Display for ExtentExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut e = "n".to_string();
        for s in &self.steps {
            let sum = match s.add {
                0 => e,
                a if a > 0 => format!("{e} + {a}"),
                a => format!("{e} - {}", -a),
            };
            e = if s.div == 1 {
                format!("({sum})")
            } else {
                format!("⌊({sum})/{}⌋", s.div)
            };
        }
        write!(f, "{e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_gives_the_conv_output_size() {
        // 3×3, pads 1+1, stride 2: ⌊(n + 2 − 3)/2⌋ + 1.
        let e = ExtentExpr::dim().window(2, 3, 2, false);
        for n in 1..50i64 {
            assert_eq!(e.eval(n), Some((n + 2 - 3) / 2 + 1), "n={n}");
        }
        // Then a 3×3 stride-2 ceil-mode pool without pads.
        let p = e.window(0, 3, 2, true);
        for n in 5..50i64 {
            let c = (n + 2 - 3) / 2 + 1;
            let ceil = ((c - 3) as u64).div_ceil(2) as i64 + 1;
            assert_eq!(p.eval(n), Some(ceil), "n={n}");
        }
        // A same-size conv is the identity.
        assert!(ExtentExpr::dim().window(2, 3, 1, false).is_dim());
        assert_eq!(ExtentExpr::dim().window(0, 3, 1, false).eval(2), Some(0));
        assert_eq!(ExtentExpr::dim().window(0, 5, 1, false).eval(2), None);
        assert_eq!(e.to_string(), "⌊(n + 1)/2⌋");
    }
}
