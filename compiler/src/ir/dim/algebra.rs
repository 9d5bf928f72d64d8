//! Arithmetic on [`Dim`]s, each result normalized: sums and products as polynomials,
//! floor division pulled apart as far as integer identities allow, `min`/`max`
//! flattened and pruned where two arguments differ by a constant.

use std::cmp::Ordering;

use super::{Atom, Dim, Monomial, Term, MAX_DEPTH, MAX_TERMS};

impl Monomial {
    fn is_one(&self) -> bool {
        self.0.is_empty()
    }

    fn degree(&self) -> u64 {
        self.0.iter().map(|(_, p)| *p as u64).sum()
    }

    fn mul(&self, o: &Monomial) -> Option<Monomial> {
        let mut out: Vec<(Atom, u32)> = Vec::with_capacity(self.0.len() + o.0.len());
        let (mut i, mut j) = (0, 0);
        while i < self.0.len() || j < o.0.len() {
            let next = match (self.0.get(i), o.0.get(j)) {
                (Some(a), Some(b)) => match a.0.cmp(&b.0) {
                    Ordering::Less => {
                        i += 1;
                        a.clone()
                    }
                    Ordering::Greater => {
                        j += 1;
                        b.clone()
                    }
                    Ordering::Equal => {
                        i += 1;
                        j += 1;
                        (a.0.clone(), a.1.checked_add(b.1)?)
                    }
                },
                (Some(a), None) => {
                    i += 1;
                    a.clone()
                }
                (None, Some(b)) => {
                    j += 1;
                    b.clone()
                }
                (None, None) => unreachable!("the loop runs while one side has atoms"),
            };
            out.push(next);
        }
        Some(Monomial(out))
    }

    /// `self / d` when every atom of `d` divides `self` (power for power).
    fn div(&self, d: &Monomial) -> Option<Monomial> {
        let mut out = self.0.clone();
        for (atom, p) in &d.0 {
            let at = out.iter().position(|(a, _)| a == atom)?;
            match out[at].1.cmp(p) {
                Ordering::Less => return None,
                Ordering::Equal => {
                    out.remove(at);
                }
                Ordering::Greater => out[at].1 -= p,
            }
        }
        Some(Monomial(out))
    }

    /// Graded lexicographic order (a monomial order: it survives multiplication), which
    /// polynomial division needs to pick leading terms.
    fn grlex(&self, o: &Monomial) -> Ordering {
        self.degree().cmp(&o.degree()).then_with(|| {
            let (mut i, mut j) = (0, 0);
            loop {
                match (self.0.get(i), o.0.get(j)) {
                    (None, None) => return Ordering::Equal,
                    (Some(_), None) => return Ordering::Greater,
                    (None, Some(_)) => return Ordering::Less,
                    (Some(a), Some(b)) => match a.0.cmp(&b.0) {
                        Ordering::Less => return Ordering::Greater,
                        Ordering::Greater => return Ordering::Less,
                        Ordering::Equal if a.1 != b.1 => return a.1.cmp(&b.1),
                        Ordering::Equal => {
                            i += 1;
                            j += 1;
                        }
                    },
                }
            }
        })
    }
}

/// The canonical polynomial of `terms` (any order, repeats allowed).
fn from_terms(mut terms: Vec<Term>) -> Option<Dim> {
    terms.sort_by(|a, b| a.mono.cmp(&b.mono));
    let mut out: Vec<Term> = Vec::with_capacity(terms.len());
    for t in terms {
        match out.last_mut() {
            Some(last) if last.mono == t.mono => last.coef = last.coef.checked_add(t.coef)?,
            _ => out.push(t),
        }
        if out.last().is_some_and(|t| t.coef == 0) {
            out.pop();
        }
    }
    let d = Dim { terms: out };
    (d.terms.len() <= MAX_TERMS && d.depth() <= MAX_DEPTH).then_some(d)
}

fn gcd(a: i64, b: i64) -> i64 {
    let (mut a, mut b) = (a.unsigned_abs(), b.unsigned_abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.min(i64::MAX as u64) as i64
}

impl Dim {
    pub fn checked_add(&self, o: &Dim) -> Option<Dim> {
        from_terms(self.terms.iter().chain(&o.terms).cloned().collect())
    }

    pub fn checked_neg(&self) -> Option<Dim> {
        let terms = (self.terms.iter())
            .map(|t| {
                Some(Term {
                    mono: t.mono.clone(),
                    coef: t.coef.checked_neg()?,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Dim { terms })
    }

    pub fn checked_sub(&self, o: &Dim) -> Option<Dim> {
        self.checked_add(&o.checked_neg()?)
    }

    pub fn checked_mul(&self, o: &Dim) -> Option<Dim> {
        if self.terms.len().saturating_mul(o.terms.len()) > MAX_TERMS * MAX_TERMS {
            return None;
        }
        let mut terms = Vec::with_capacity(self.terms.len() * o.terms.len());
        for a in &self.terms {
            for b in &o.terms {
                terms.push(Term {
                    mono: a.mono.mul(&b.mono)?,
                    coef: a.coef.checked_mul(b.coef)?,
                });
            }
        }
        from_terms(terms)
    }

    pub fn add_const(&self, k: i64) -> Option<Dim> {
        self.checked_add(&Dim::constant(k))
    }

    pub fn mul_const(&self, k: i64) -> Option<Dim> {
        self.checked_mul(&Dim::constant(k))
    }

    /// The constant term.
    fn constant_term(&self) -> i64 {
        (self.terms.iter())
            .find(|t| t.mono.is_one())
            .map_or(0, |t| t.coef)
    }

    /// `⌊self / d⌋`; `None` where `d` is the constant 0 or the result is too large.
    pub fn floor_div(&self, d: &Dim) -> Option<Dim> {
        if let Some(c) = d.as_const() {
            return match c {
                0 => None,
                c if c < 0 => self
                    .checked_neg()?
                    .floor_div(&Dim::constant(c.checked_neg()?)),
                _ => self.floor_div_const(c),
            };
        }
        if let Some(n) = self.as_const().filter(|&n| n == 0) {
            return Some(Dim::constant(n));
        }
        if self == d {
            return Some(Dim::constant(1));
        }
        if let Some(q) = self.exact_div(d) {
            return Some(q);
        }
        // A divisor that is one term `k·m` divides the monomial out of a numerator whose
        // every term holds it: ⌊m·P / (k·m)⌋ = ⌊P / k⌋.
        if let [Term { mono, coef }] = d.terms.as_slice() {
            if *coef > 0 {
                let p = (self.terms.iter())
                    .map(|t| {
                        Some(Term {
                            mono: t.mono.div(mono)?,
                            coef: t.coef,
                        })
                    })
                    .collect::<Option<Vec<_>>>();
                if let Some(p) = p {
                    return from_terms(p)?.floor_div_const(*coef);
                }
            }
        }
        from_terms(vec![Term {
            mono: Monomial(vec![(
                Atom::FloorDiv(Box::new(self.clone()), Box::new(d.clone())),
                1,
            )]),
            coef: 1,
        }])
    }

    /// `⌊self / c⌋` for `c > 0`: whole multiples of `c` leave the division
    /// (`⌊(c·q + r)/c⌋ = q + ⌊r/c⌋` for integer `q`), a factor common to what remains
    /// and `c` cancels (`⌊(g·x + r)/(g·c')⌋ = ⌊(x + ⌊r/g⌋)/c'⌋`), and a division of a
    /// division merges (`⌊⌊a/b⌋/c⌋ = ⌊a/(b·c)⌋`).
    fn floor_div_const(&self, c: i64) -> Option<Dim> {
        debug_assert!(c > 0);
        if c == 1 {
            return Some(self.clone());
        }
        let mut quotient = vec![];
        let mut rest = vec![];
        for t in &self.terms {
            let (q, r) = (t.coef.div_euclid(c), t.coef.rem_euclid(c));
            if q != 0 {
                quotient.push(Term {
                    mono: t.mono.clone(),
                    coef: q,
                });
            }
            if r != 0 {
                rest.push(Term {
                    mono: t.mono.clone(),
                    coef: r,
                });
            }
        }
        let quotient = from_terms(quotient)?;
        let rest = from_terms(rest)?;
        let r0 = rest.constant_term(); // in [0, c)
        let varying: Vec<Term> = rest
            .terms
            .iter()
            .filter(|t| !t.mono.is_one())
            .cloned()
            .collect();
        if varying.is_empty() {
            return Some(quotient); // ⌊r0 / c⌋ = 0
        }
        let g = varying.iter().fold(c, |g, t| gcd(g, t.coef));
        let (c, r0, varying) = if g > 1 {
            let v = varying
                .into_iter()
                .map(|t| Term {
                    mono: t.mono,
                    coef: t.coef / g,
                })
                .collect::<Vec<_>>();
            (c / g, r0 / g, v)
        } else {
            (c, r0, varying)
        };
        let x = from_terms(varying)?;
        let remainder = if c == 1 {
            x.add_const(r0)?
        } else if let Some((a, b)) = x.as_floor_div_by_const() {
            // ⌊(⌊a/b⌋ + r0)/c⌋ = ⌊(a + r0·b)/(b·c)⌋.
            a.add_const(r0.checked_mul(b)?)?
                .floor_div_const(b.checked_mul(c)?)?
        } else {
            from_terms(vec![Term {
                mono: Monomial(vec![(
                    Atom::FloorDiv(Box::new(x.add_const(r0)?), Box::new(Dim::constant(c))),
                    1,
                )]),
                coef: 1,
            }])?
        };
        quotient.checked_add(&remainder)
    }

    /// `(a, b)` when `self` is exactly `⌊a / b⌋` with a constant `b`.
    fn as_floor_div_by_const(&self) -> Option<(Dim, i64)> {
        match self.terms.as_slice() {
            [Term { mono, coef: 1 }] => match mono.0.as_slice() {
                [(Atom::FloorDiv(a, b), 1)] => Some(((**a).clone(), b.as_const()?)),
                _ => None,
            },
            _ => None,
        }
    }

    /// `⌈self / d⌉`: `⌊(self + d − 1) / d⌋` for a positive constant `d` (the form a
    /// floor division of the same value takes), `−⌊−self / d⌋` otherwise.
    pub fn ceil_div(&self, d: &Dim) -> Option<Dim> {
        match d.as_const() {
            Some(c) if c > 0 => self.add_const(c - 1)?.floor_div(d),
            _ => self.checked_neg()?.floor_div(d)?.checked_neg(),
        }
    }

    /// `q` with `q · d = self` for every value of the symbols (polynomial division
    /// leaving no remainder), `None` where that is not proven.
    pub fn exact_div(&self, d: &Dim) -> Option<Dim> {
        let lead = |p: &Dim| -> Option<Term> {
            p.terms.iter().max_by(|a, b| a.mono.grlex(&b.mono)).cloned()
        };
        let divisor = lead(d)?;
        let mut rest = self.clone();
        let mut quotient = Dim::zero();
        for _ in 0..=MAX_TERMS {
            let Some(t) = lead(&rest) else {
                return Some(quotient);
            };
            if t.coef % divisor.coef != 0 {
                return None;
            }
            let q = from_terms(vec![Term {
                mono: t.mono.div(&divisor.mono)?,
                coef: t.coef / divisor.coef,
            }])?;
            rest = rest.checked_sub(&q.checked_mul(d)?)?;
            quotient = quotient.checked_add(&q)?;
        }
        None
    }

    /// The smallest of `args` (at least one).
    pub fn min_of(args: &[Dim]) -> Option<Dim> {
        Dim::extremum(args, true)
    }

    /// The largest of `args` (at least one).
    pub fn max_of(args: &[Dim]) -> Option<Dim> {
        Dim::extremum(args, false)
    }

    fn extremum(args: &[Dim], min: bool) -> Option<Dim> {
        let mut flat: Vec<Dim> = vec![];
        for a in args {
            match a.as_single_atom() {
                Some(Atom::Min(inner)) if min => flat.extend(inner.iter().cloned()),
                Some(Atom::Max(inner)) if !min => flat.extend(inner.iter().cloned()),
                _ => flat.push(a.clone()),
            }
        }
        flat.sort();
        flat.dedup();
        // Arguments that differ by a constant: only the smaller (larger) can decide.
        let mut kept: Vec<Dim> = vec![];
        'next: for a in flat {
            for k in kept.iter_mut() {
                if let Some(diff) = a.constant_difference(k)? {
                    if (diff < 0) == min && diff != 0 {
                        *k = a;
                    }
                    continue 'next;
                }
            }
            kept.push(a);
        }
        match kept.len() {
            0 => None,
            1 => kept.pop(),
            _ => {
                kept.sort();
                let atom = if min {
                    Atom::Min(kept)
                } else {
                    Atom::Max(kept)
                };
                from_terms(vec![Term {
                    mono: Monomial(vec![(atom, 1)]),
                    coef: 1,
                }])
            }
        }
    }

    /// `self − o` when it is a constant of known sign: `Some(Some(d))` for a constant
    /// `d`, and for two floor divisions by one constant whose numerators differ by a
    /// constant, `±1` standing for "at least as large / as small" (`⌊(h + 7)/8⌋ ≥
    /// ⌊(h + 3)/8⌋`). `None` on overflow.
    fn constant_difference(&self, o: &Dim) -> Option<Option<i64>> {
        let diff = self.checked_sub(o)?;
        if let Some(d) = diff.as_const() {
            return Some(Some(d));
        }
        let (Some((a, x)), Some((b, y))) =
            (self.as_floor_div_by_const(), o.as_floor_div_by_const())
        else {
            return Some(None);
        };
        if x != y || x <= 0 {
            return Some(None);
        }
        Some(a.checked_sub(&b)?.as_const().map(i64::signum))
    }

    fn as_single_atom(&self) -> Option<&Atom> {
        match self.terms.as_slice() {
            [Term { mono, coef: 1 }] => match mono.0.as_slice() {
                [(a, 1)] => Some(a),
                _ => None,
            },
            _ => None,
        }
    }
}
