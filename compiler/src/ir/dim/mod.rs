//! Dimensions as expressions: the extent of an axis is a constant or an integer
//! expression over the model's symbols (the dims the caller sets at run time, and the
//! counts value-dependent ops produce), built from sums, products, floor division,
//! `min` and `max` as convs, pools, slices, pads and exporters' shape arithmetic make
//! them.
//!
//! A [`Dim`] is kept in one canonical form, a polynomial with integer coefficients over
//! *atoms* (a symbol, a floor division that does not divide out, a `min` or `max`), so
//! that two expressions normalizing to the same form are equal for every value of the
//! symbols: structural equality is a proof. What needs the symbols' ranges (bounds,
//! comparisons, `min`/`max` decided by them) lives in [`SymbolTable`]; evaluation at
//! given values in [`Dim::eval`]; the text form (`2*batch*seq`, `(h - 1)/2 + 1`,
//! `min(seq, 512)`, `/` rounding down) in [`text`].
//!
//! Every operation is checked: a coefficient that would overflow `i64`, or an
//! expression past [`MAX_TERMS`] terms or [`MAX_DEPTH`] nested atoms, gives `None`
//! rather than a wrong or runaway expression (hostile models can multiply sums
//! repeatedly).

mod algebra;
mod symbols;
pub mod text;

pub use symbols::{Bounds, SymbolKind, SymbolTable};

/// A symbol of a model: an index into its [`SymbolTable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SymbolId(pub u32);

/// An integer expression over symbols, in canonical form (see the module docs).
/// `Debug` writes it with symbols as `s0`, `s1`... (the names live in the table).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Dim {
    /// Sorted by monomial, each monomial once, no zero coefficient; empty is 0.
    terms: Vec<Term>,
}

/// `coef · monomial`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Term {
    mono: Monomial,
    coef: i64,
}

/// A product of atoms, each with a positive power, sorted by atom; empty is 1.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
struct Monomial(Vec<(Atom, u32)>);

/// What a polynomial is over.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Atom {
    Sym(SymbolId),
    /// `⌊num / den⌋`, where normalization could not divide it out.
    FloorDiv(Box<Dim>, Box<Dim>),
    /// At least two arguments, sorted, none provably below (above) another.
    Min(Vec<Dim>),
    Max(Vec<Dim>),
}

/// Most terms one expression may have.
pub const MAX_TERMS: usize = 64;
/// Most atoms nested in one another (a division of a min of a division ...).
pub const MAX_DEPTH: usize = 24;

impl Dim {
    pub fn zero() -> Dim {
        Dim::default()
    }

    pub fn constant(v: i64) -> Dim {
        let terms = if v == 0 {
            vec![]
        } else {
            vec![Term {
                mono: Monomial::default(),
                coef: v,
            }]
        };
        Dim { terms }
    }

    pub fn symbol(s: SymbolId) -> Dim {
        Dim::atom(Atom::Sym(s))
    }

    fn atom(a: Atom) -> Dim {
        Dim {
            terms: vec![Term {
                mono: Monomial(vec![(a, 1)]),
                coef: 1,
            }],
        }
    }

    /// The value, when the expression is a constant.
    pub fn as_const(&self) -> Option<i64> {
        match self.terms.as_slice() {
            [] => Some(0),
            [t] if t.mono.0.is_empty() => Some(t.coef),
            _ => None,
        }
    }

    pub fn is_const(&self) -> bool {
        self.as_const().is_some()
    }

    /// The symbol, when the expression is exactly one.
    pub fn as_symbol(&self) -> Option<SymbolId> {
        match self.terms.as_slice() {
            [Term { mono, coef: 1 }] => match mono.0.as_slice() {
                [(Atom::Sym(s), 1)] => Some(*s),
                _ => None,
            },
            _ => None,
        }
    }

    /// `(c, s)` when the expression is `c · s` for one symbol `s` and `c ≥ 1`.
    pub fn as_scaled_symbol(&self) -> Option<(i64, SymbolId)> {
        match self.terms.as_slice() {
            [Term { mono, coef }] if *coef >= 1 => match mono.0.as_slice() {
                [(Atom::Sym(s), 1)] => Some((*coef, *s)),
                _ => None,
            },
            _ => None,
        }
    }

    /// Every symbol the expression reads, in order.
    pub fn symbols(&self) -> Vec<SymbolId> {
        let mut out = vec![];
        self.collect_symbols(&mut out);
        out.sort();
        out.dedup();
        out
    }

    fn collect_symbols(&self, out: &mut Vec<SymbolId>) {
        for t in &self.terms {
            for (a, _) in &t.mono.0 {
                match a {
                    Atom::Sym(s) => out.push(*s),
                    Atom::FloorDiv(n, d) => {
                        n.collect_symbols(out);
                        d.collect_symbols(out);
                    }
                    Atom::Min(args) | Atom::Max(args) => {
                        args.iter().for_each(|a| a.collect_symbols(out))
                    }
                }
            }
        }
    }

    /// The value at `values` (each symbol's), `None` where the arithmetic overflows or
    /// divides by zero.
    pub fn eval(&self, values: &dyn Fn(SymbolId) -> i64) -> Option<i64> {
        self.terms.iter().try_fold(0i64, |sum, t| {
            let m = t.mono.0.iter().try_fold(t.coef, |p, (a, pow)| {
                let v = a.eval(values)?;
                (0..*pow).try_fold(p, |p, _| p.checked_mul(v))
            })?;
            sum.checked_add(m)
        })
    }

    /// The value with the symbols' values in `values` (indexed by symbol).
    pub fn eval_at(&self, values: &[i64]) -> Option<i64> {
        let missing = self.symbols().iter().any(|s| s.0 as usize >= values.len());
        if missing {
            return None;
        }
        self.eval(&|s| values[s.0 as usize])
    }

    /// `self` with each symbol replaced by `by(symbol)` (`None`: kept).
    pub fn substitute(&self, by: &dyn Fn(SymbolId) -> Option<Dim>) -> Option<Dim> {
        let mut sum = Dim::zero();
        for t in &self.terms {
            let mut p = Dim::constant(t.coef);
            for (a, pow) in &t.mono.0 {
                let v = match a {
                    Atom::Sym(s) => by(*s).unwrap_or_else(|| Dim::symbol(*s)),
                    Atom::FloorDiv(n, d) => n.substitute(by)?.floor_div(&d.substitute(by)?)?,
                    Atom::Min(args) => Dim::min_of(
                        &args
                            .iter()
                            .map(|a| a.substitute(by))
                            .collect::<Option<Vec<_>>>()?,
                    )?,
                    Atom::Max(args) => Dim::max_of(
                        &args
                            .iter()
                            .map(|a| a.substitute(by))
                            .collect::<Option<Vec<_>>>()?,
                    )?,
                };
                for _ in 0..*pow {
                    p = p.checked_mul(&v)?;
                }
            }
            sum = sum.checked_add(&p)?;
        }
        Some(sum)
    }

    /// How deeply atoms nest (0 for a polynomial in symbols).
    fn depth(&self) -> usize {
        (self.terms.iter())
            .flat_map(|t| t.mono.0.iter())
            .map(|(a, _)| match a {
                Atom::Sym(_) => 0,
                Atom::FloorDiv(n, d) => 1 + n.depth().max(d.depth()),
                Atom::Min(args) | Atom::Max(args) => {
                    1 + args.iter().map(Dim::depth).max().unwrap_or(0)
                }
            })
            .max()
            .unwrap_or(0)
    }
}

/// One factor of a term, as [`Dim::terms`] shows it to code that evaluates
/// expressions itself (code generation).
#[derive(Clone, Copy, Debug)]
pub enum DimAtom<'a> {
    Symbol(SymbolId),
    /// `⌊num / den⌋`.
    FloorDiv(&'a Dim, &'a Dim),
    Min(&'a [Dim]),
    Max(&'a [Dim]),
}

impl Dim {
    /// The terms `coef · Π atomᵖ` whose sum the expression is.
    pub fn terms(&self) -> impl Iterator<Item = (i64, Vec<(DimAtom<'_>, u32)>)> {
        self.terms.iter().map(|t| {
            let atoms = (t.mono.0.iter())
                .map(|(a, p)| {
                    let view = match a {
                        Atom::Sym(s) => DimAtom::Symbol(*s),
                        Atom::FloorDiv(n, d) => DimAtom::FloorDiv(n, d),
                        Atom::Min(args) => DimAtom::Min(args),
                        Atom::Max(args) => DimAtom::Max(args),
                    };
                    (view, *p)
                })
                .collect();
            (t.coef, atoms)
        })
    }
}

impl Atom {
    fn eval(&self, values: &dyn Fn(SymbolId) -> i64) -> Option<i64> {
        match self {
            Atom::Sym(s) => Some(values(*s)),
            Atom::FloorDiv(n, d) => floor_div_i64(n.eval(values)?, d.eval(values)?),
            Atom::Min(args) => args
                .iter()
                .map(|a| a.eval(values))
                .try_fold(i64::MAX, |m, v| v.map(|v| m.min(v))),
            Atom::Max(args) => args
                .iter()
                .map(|a| a.eval(values))
                .try_fold(i64::MIN, |m, v| v.map(|v| m.max(v))),
        }
    }
}

impl std::fmt::Debug for Dim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.written(&|s| format!("s{}", s.0)))
    }
}

/// `⌊n / d⌋`, `None` for `d = 0` or an overflow.
pub fn floor_div_i64(n: i64, d: i64) -> Option<i64> {
    let q = n.checked_div(d)?;
    let inexact = n.checked_rem(d)? != 0;
    Some(if inexact && ((n < 0) != (d < 0)) {
        q - 1
    } else {
        q
    })
}

/// A fact about extents the compile could not prove and the run checks before it
/// writes anything (returning an error code where it fails): `expr = 0` (two extents
/// a broadcast, a Reshape or a matrix product needs equal) or `expr ≥ 0`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DimCheck {
    pub expr: Dim,
    pub zero: bool,
    /// What needs it, for messages: "the inner axes of a matrix product".
    pub what: String,
}

impl DimCheck {
    /// `a = b`.
    pub fn equal(a: &Dim, b: &Dim, what: &str) -> Result<DimCheck, String> {
        Ok(DimCheck {
            expr: a
                .checked_sub(b)
                .ok_or_else(|| format!("{what}: the extent arithmetic overflows"))?,
            zero: true,
            what: what.to_string(),
        })
    }

    /// `a ≥ b`.
    pub fn at_least(a: &Dim, b: &Dim, what: &str) -> Result<DimCheck, String> {
        Ok(DimCheck {
            zero: false,
            ..DimCheck::equal(a, b, what)?
        })
    }

    /// Whether the check passes at the symbols' values `values`.
    pub fn holds_at(&self, values: &[i64]) -> bool {
        match self.expr.eval_at(values) {
            Some(v) if self.zero => v == 0,
            Some(v) => v >= 0,
            None => false,
        }
    }
}

impl From<i64> for Dim {
    fn from(v: i64) -> Dim {
        Dim::constant(v)
    }
}

impl From<SymbolId> for Dim {
    fn from(s: SymbolId) -> Dim {
        Dim::symbol(s)
    }
}

#[cfg(test)]
mod tests;
