//! A model's symbols with their ranges, and what the ranges let one prove of an
//! expression: its bounds, comparisons, and `min`/`max` decided by them.

use super::{Atom, Dim, SymbolId};

/// What a symbol stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SymbolKind {
    /// A dimension the caller sets at run time (`--dim`, a named input axis).
    Dim,
    /// An extent the input values decide (NonZero's count, a Unique's length), at most
    /// the symbol's `max`.
    Count,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Symbol {
    pub name: String,
    pub kind: SymbolKind,
    pub min: i64,
    pub max: i64,
}

/// The symbols of one model, numbered in declaration order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct SymbolTable {
    symbols: Vec<Symbol>,
}

/// Inclusive bounds of an expression over the symbols' ranges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    pub min: i128,
    pub max: i128,
}

impl Bounds {
    fn point(v: i128) -> Bounds {
        Bounds { min: v, max: v }
    }

    fn add(self, o: Bounds) -> Bounds {
        Bounds {
            min: self.min.saturating_add(o.min),
            max: self.max.saturating_add(o.max),
        }
    }

    fn mul(self, o: Bounds) -> Bounds {
        let c = [
            self.min.saturating_mul(o.min),
            self.min.saturating_mul(o.max),
            self.max.saturating_mul(o.min),
            self.max.saturating_mul(o.max),
        ];
        Bounds {
            min: *c.iter().min().expect("four corners"),
            max: *c.iter().max().expect("four corners"),
        }
    }

    /// `⌊self / d⌋` for a divisor that is positive throughout (`None` otherwise).
    fn floor_div(self, d: Bounds) -> Option<Bounds> {
        if d.min <= 0 {
            return None;
        }
        let f = |n: i128, d: i128| n.div_euclid(d);
        let c = [
            f(self.min, d.min),
            f(self.min, d.max),
            f(self.max, d.min),
            f(self.max, d.max),
        ];
        Some(Bounds {
            min: *c.iter().min().expect("four corners"),
            max: *c.iter().max().expect("four corners"),
        })
    }
}

impl SymbolTable {
    pub fn new() -> SymbolTable {
        SymbolTable::default()
    }

    /// Declares a symbol; its id is its position. Names are the caller's to keep
    /// distinct.
    pub fn declare(&mut self, name: &str, kind: SymbolKind, min: i64, max: i64) -> SymbolId {
        self.symbols.push(Symbol {
            name: name.to_string(),
            kind,
            min,
            max,
        });
        SymbolId(self.symbols.len() as u32 - 1)
    }

    pub fn get(&self, s: SymbolId) -> &Symbol {
        &self.symbols[s.0 as usize]
    }

    pub fn find(&self, name: &str) -> Option<SymbolId> {
        (self.symbols.iter())
            .position(|s| s.name == name)
            .map(|i| SymbolId(i as u32))
    }

    pub fn len(&self) -> usize {
        self.symbols.len()
    }

    pub fn is_empty(&self) -> bool {
        self.symbols.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (SymbolId, &Symbol)> {
        (self.symbols.iter())
            .enumerate()
            .map(|(i, s)| (SymbolId(i as u32), s))
    }

    pub fn name(&self, s: SymbolId) -> &str {
        &self.get(s).name
    }

    /// Bounds of `d` over every symbol's range; `None` where a division's divisor may
    /// be zero or negative.
    pub fn bounds(&self, d: &Dim) -> Option<Bounds> {
        d.terms.iter().try_fold(Bounds::point(0), |sum, t| {
            let m = t
                .mono
                .0
                .iter()
                .try_fold(Bounds::point(t.coef as i128), |p, (a, pow)| {
                    let b = self.atom_bounds(a)?;
                    // x^p over [lo, hi] with lo ≥ 0 is [lo^p, hi^p]; otherwise multiply
                    // the interval p times (wider, still sound).
                    Some((0..*pow).fold(p, |q, _| q.mul(b)))
                })?;
            Some(sum.add(m))
        })
    }

    fn atom_bounds(&self, a: &Atom) -> Option<Bounds> {
        match a {
            Atom::Sym(s) => {
                let s = self.symbols.get(s.0 as usize)?;
                Some(Bounds {
                    min: s.min as i128,
                    max: s.max as i128,
                })
            }
            Atom::FloorDiv(n, d) => self.bounds(n)?.floor_div(self.bounds(d)?),
            Atom::Min(args) => {
                let b = args
                    .iter()
                    .map(|a| self.bounds(a))
                    .collect::<Option<Vec<_>>>()?;
                Some(Bounds {
                    min: b.iter().map(|b| b.min).min()?,
                    max: b.iter().map(|b| b.max).min()?,
                })
            }
            Atom::Max(args) => {
                let b = args
                    .iter()
                    .map(|a| self.bounds(a))
                    .collect::<Option<Vec<_>>>()?;
                Some(Bounds {
                    min: b.iter().map(|b| b.min).max()?,
                    max: b.iter().map(|b| b.max).max()?,
                })
            }
        }
    }

    /// Whether `a = b` for every value of the symbols in range.
    pub fn prove_eq(&self, a: &Dim, b: &Dim) -> bool {
        if a == b {
            return true;
        }
        let Some(diff) = a.checked_sub(b) else {
            return false;
        };
        diff.as_const() == Some(0)
            || self
                .bounds(&self.simplify(&diff))
                .is_some_and(|b| b.min == 0 && b.max == 0)
    }

    /// Whether `a ≥ b` for every value of the symbols in range.
    pub fn prove_ge(&self, a: &Dim, b: &Dim) -> bool {
        a.checked_sub(b)
            .map(|d| self.simplify(&d))
            .and_then(|d| self.bounds(&d))
            .is_some_and(|b| b.min >= 0)
    }

    /// The largest value of `d` over the ranges, `None` where unbounded or past `i64`.
    pub fn max_value(&self, d: &Dim) -> Option<i64> {
        let b = self.bounds(&self.simplify(d))?;
        i64::try_from(b.max).ok()
    }

    /// The smallest value of `d` over the ranges.
    pub fn min_value(&self, d: &Dim) -> Option<i64> {
        let b = self.bounds(&self.simplify(d))?;
        i64::try_from(b.min).ok()
    }

    /// `d` with what the ranges decide replaced: a `min`/`max` one of whose arguments
    /// bounds the others, a division whose numerator's range lies within one multiple
    /// of its divisor.
    pub fn simplify(&self, d: &Dim) -> Dim {
        self.try_simplify(d).unwrap_or_else(|| d.clone())
    }

    fn try_simplify(&self, d: &Dim) -> Option<Dim> {
        let by_atom = |a: &Atom| -> Option<Dim> {
            match a {
                Atom::Sym(s) => Some(Dim::symbol(*s)),
                Atom::FloorDiv(n, den) => {
                    let (n, den) = (self.try_simplify(n)?, self.try_simplify(den)?);
                    if let (Some(nb), Some(db)) = (self.bounds(&n), self.bounds(&den)) {
                        if let Some(q) = nb.floor_div(db).filter(|q| q.min == q.max) {
                            return Some(Dim::constant(i64::try_from(q.min).ok()?));
                        }
                    }
                    n.floor_div(&den)
                }
                Atom::Min(args) | Atom::Max(args) => {
                    let min = matches!(a, Atom::Min(_));
                    let args = args
                        .iter()
                        .map(|a| self.try_simplify(a))
                        .collect::<Option<Vec<_>>>()?;
                    let kept: Vec<Dim> = (args.iter())
                        .filter(|x| {
                            // Dropped when another argument is provably on its side.
                            !args.iter().any(|y| {
                                y != *x
                                    && if min {
                                        self.prove_ge(x, y)
                                    } else {
                                        self.prove_ge(y, x)
                                    }
                            })
                        })
                        .cloned()
                        .collect();
                    let kept = if kept.is_empty() { args } else { kept };
                    if min {
                        Dim::min_of(&kept)
                    } else {
                        Dim::max_of(&kept)
                    }
                }
            }
        };
        let mut sum = Dim::zero();
        for t in &d.terms {
            let mut p = Dim::constant(t.coef);
            for (a, pow) in &t.mono.0 {
                let v = by_atom(a)?;
                for _ in 0..*pow {
                    p = p.checked_mul(&v)?;
                }
            }
            sum = sum.checked_add(&p)?;
        }
        Some(sum)
    }

    /// Every symbol at its largest value (the extents buffers are planned for).
    pub fn maxima(&self) -> Vec<i64> {
        self.symbols.iter().map(|s| s.max).collect()
    }
}
