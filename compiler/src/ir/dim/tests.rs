use super::text::parse;
use super::*;

/// An expression as written, evaluated directly: the independent reference for the
/// normalized form.
#[derive(Clone, Debug)]
enum Expr {
    Const(i64),
    Sym(u32),
    Add(Box<Expr>, Box<Expr>),
    Sub(Box<Expr>, Box<Expr>),
    Mul(Box<Expr>, Box<Expr>),
    FloorDiv(Box<Expr>, Box<Expr>),
    CeilDiv(Box<Expr>, Box<Expr>),
    Min(Box<Expr>, Box<Expr>),
    Max(Box<Expr>, Box<Expr>),
}

impl Expr {
    fn eval(&self, v: &[i64]) -> Option<i128> {
        let f = |a: &Expr| a.eval(v);
        Some(match self {
            Expr::Const(c) => *c as i128,
            Expr::Sym(s) => v[*s as usize] as i128,
            Expr::Add(a, b) => f(a)? + f(b)?,
            Expr::Sub(a, b) => f(a)? - f(b)?,
            Expr::Mul(a, b) => f(a)? * f(b)?,
            Expr::FloorDiv(a, b) => {
                let d = f(b)?;
                if d == 0 {
                    return None;
                }
                let n = f(a)?;
                let q = n / d;
                if n % d != 0 && ((n < 0) != (d < 0)) {
                    q - 1
                } else {
                    q
                }
            }
            Expr::CeilDiv(a, b) => {
                let d = f(b)?;
                if d == 0 {
                    return None;
                }
                let n = f(a)?;
                let q = n / d;
                if n % d != 0 && ((n < 0) == (d < 0)) {
                    q + 1
                } else {
                    q
                }
            }
            Expr::Min(a, b) => f(a)?.min(f(b)?),
            Expr::Max(a, b) => f(a)?.max(f(b)?),
        })
    }

    fn dim(&self) -> Option<Dim> {
        Some(match self {
            Expr::Const(c) => Dim::constant(*c),
            Expr::Sym(s) => Dim::symbol(SymbolId(*s)),
            Expr::Add(a, b) => a.dim()?.checked_add(&b.dim()?)?,
            Expr::Sub(a, b) => a.dim()?.checked_sub(&b.dim()?)?,
            Expr::Mul(a, b) => a.dim()?.checked_mul(&b.dim()?)?,
            Expr::FloorDiv(a, b) => a.dim()?.floor_div(&b.dim()?)?,
            Expr::CeilDiv(a, b) => a.dim()?.ceil_div(&b.dim()?)?,
            Expr::Min(a, b) => Dim::min_of(&[a.dim()?, b.dim()?])?,
            Expr::Max(a, b) => Dim::max_of(&[a.dim()?, b.dim()?])?,
        })
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Expressions as shape arithmetic makes them: small constants (divisors mostly
    /// positive, a few negative), three symbols.
    fn expr(&mut self, depth: u32) -> Expr {
        if depth == 0 || self.below(4) == 0 {
            return match self.below(3) {
                0 => Expr::Const(self.below(9) as i64 - 2),
                _ => Expr::Sym(self.below(3) as u32),
            };
        }
        let a = Box::new(self.expr(depth - 1));
        let b = Box::new(self.expr(depth - 1));
        let divisor = |r: &mut Rng, b: Box<Expr>| match r.below(3) {
            0 => b,
            1 => Box::new(Expr::Const(-(r.below(4) as i64) - 1)),
            _ => Box::new(Expr::Const(r.below(7) as i64 + 1)),
        };
        match self.below(8) {
            0 => Expr::Add(a, b),
            1 => Expr::Sub(a, b),
            2 => Expr::Mul(a, b),
            3 => Expr::FloorDiv(a, divisor(self, b)),
            4 => Expr::CeilDiv(a, divisor(self, b)),
            5 => Expr::Min(a, b),
            6 => Expr::Max(a, b),
            _ => Expr::Add(a, Box::new(Expr::Const(self.below(5) as i64 - 2))),
        }
    }
}

fn names(s: SymbolId) -> String {
    ["n", "seq", "w"][s.0 as usize].to_string()
}

fn resolve(n: &str) -> Option<SymbolId> {
    ["n", "seq", "w"]
        .iter()
        .position(|x| *x == n)
        .map(|i| SymbolId(i as u32))
}

#[test]
fn normalized_expressions_evaluate_as_written() {
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let mut checked = 0;
    for _ in 0..20_000 {
        let e = rng.expr(4);
        let Some(d) = e.dim() else { continue };
        let text = d.written(&names);
        let reread = parse(&text, &mut resolve).unwrap_or_else(|m| panic!("{text}: {m}"));
        assert_eq!(reread, d, "{e:?} written as {text} reads back differently");
        for _ in 0..8 {
            let v: Vec<i64> = (0..3).map(|_| rng.below(40) as i64 - 4).collect();
            let want = e.eval(&v);
            let got = d.eval_at(&v);
            match (want, got) {
                (Some(w), Some(g)) => assert_eq!(w, g as i128, "{e:?} = {text} at {v:?}"),
                // Normalization may cancel a division by zero away (x/x = 1), never
                // invent one.
                (None, _) => {}
                (Some(w), None) => {
                    assert!(
                        i64::try_from(w).is_err(),
                        "{e:?} = {text} at {v:?} gave no value"
                    )
                }
            }
            checked += 1;
        }
    }
    assert!(checked > 100_000, "only {checked} evaluations");
}

fn d(text: &str) -> Dim {
    parse(text, &mut resolve).unwrap()
}

#[test]
fn shape_arithmetic_normalizes() {
    // Whole multiples leave a division; common factors cancel; divisions merge.
    assert_eq!(d("(2*n + 1)/2"), d("n"));
    assert_eq!(d("(4*n + 6)/4"), d("(2*n + 3)/2"));
    assert_eq!(d("(2*n + 3)/2"), d("n + 1"));
    assert_eq!(d("((n + 1)/2)/3"), d("(n + 1)/6"));
    assert_eq!(d("(n/2 + 1)/2"), d("(n + 2)/4"));
    // Reshape's −1: the known axes divide the element count out.
    assert_eq!(d("(n*seq*768)/(n*12)"), d("64*seq"));
    assert_eq!(d("(4*seq + 4)/(seq + 1)"), d("4"));
    assert_eq!(d("(n*seq + n)/n"), d("seq + 1"));
    assert_eq!(d("(seq*seq - 1)/(seq - 1)"), d("seq + 1"));
    // A conv (3×3, pads 1, stride 2) then a pool (3×3, stride 2, pads 1).
    let conv = d("(w + 2 - 3)/2 + 1");
    assert_eq!(conv, d("(w + 1)/2"));
    let pool = conv
        .checked_add(&d("2 - 3"))
        .unwrap()
        .floor_div(&d("2"))
        .unwrap();
    assert_eq!(pool.add_const(1).unwrap(), d("(w + 3)/4"));
    // ⌈n/4⌉ is ⌊(n + 3)/4⌋.
    assert_eq!(d("n").ceil_div(&d("4")).unwrap(), d("(n + 3)/4"));
    // min and max prune arguments a constant apart, flatten, and sort.
    assert_eq!(d("min(n, n + 1)"), d("n"));
    assert_eq!(d("max(n - 1, n + 3, 2)"), d("max(2, n + 3)"));
    assert_eq!(d("min(min(n, 3), seq)"), d("min(3, n, seq)"));
    assert_eq!(d("min(seq, n)").written(&names), "min(n, seq)");
    assert_eq!(d("min((w + 3)/8, (w + 7)/8)"), d("(w + 3)/8"));
    assert_eq!(d("max((w + 3)/8, (w + 7)/8)"), d("(w + 7)/8"));
    // Text as people write it.
    assert_eq!(d("seq*n*2 + 1").written(&names), "2*n*seq + 1");
    assert_eq!(d("2*((w + 1)/3)").written(&names), "2*((w + 1)/3)");
    assert_eq!(d("1 - n").written(&names), "-n + 1");
    assert_eq!(d("n*n*seq").written(&names), "n*n*seq");
}

#[test]
fn exact_division_is_proved_or_refused() {
    assert_eq!(d("n*seq*768").exact_div(&d("seq*12")), Some(d("64*n")));
    assert_eq!(d("n*n - 1").exact_div(&d("n + 1")), Some(d("n - 1")));
    assert_eq!(d("n*seq").exact_div(&d("seq + 1")), None);
    assert_eq!(d("7*n").exact_div(&d("2")), None);
    assert_eq!(d("0").exact_div(&d("seq")), Some(d("0")));
}

#[test]
fn ranges_bound_and_decide() {
    let mut t = SymbolTable::new();
    let n = t.declare("n", SymbolKind::Dim, 1, 8);
    let seq = t.declare("seq", SymbolKind::Dim, 1, 512);
    let _w = t.declare("w", SymbolKind::Dim, 64, 512);
    assert_eq!((n, seq), (SymbolId(0), SymbolId(1)));
    let b = t.bounds(&d("2*n*seq + 1")).unwrap();
    assert_eq!((b.min, b.max), (3, 2 * 8 * 512 + 1));
    assert_eq!(t.max_value(&d("(w - 3)/2 + 1")), Some(255));
    assert_eq!(t.min_value(&d("(w - 3)/2 + 1")), Some(31));
    assert_eq!(t.max_value(&d("seq - n")), Some(511));
    assert_eq!(t.min_value(&d("seq - n")), Some(-7));
    // The ranges decide a min and a max exporters write for −1 and clamps.
    assert_eq!(t.simplify(&d("max(seq, 1)")), d("seq"));
    assert_eq!(t.simplify(&d("min(seq, 1024)")), d("seq"));
    assert_eq!(t.simplify(&d("min(w, 32)")), d("32"));
    assert_eq!(t.simplify(&d("min(seq, 256)")), d("min(256, seq)"));
    assert_eq!(t.simplify(&d("n/16")), d("0"));
    assert!(t.prove_eq(&d("(n*seq*4)/4"), &d("seq*n")));
    assert!(t.prove_ge(&d("w"), &d("64")));
    assert!(!t.prove_ge(&d("seq"), &d("2")));
    assert!(!t.prove_eq(&d("seq"), &d("n")));
    // A divisor that may be zero has no bounds.
    assert_eq!(t.bounds(&d("seq/(n - 1)")), None);
}

#[test]
fn runaway_expressions_stop() {
    let mut e = d("n + seq + w + 1");
    let mut stopped = false;
    for _ in 0..10 {
        match e.checked_mul(&e) {
            Some(x) => e = x,
            None => {
                stopped = true;
                break;
            }
        }
    }
    assert!(stopped, "{} terms", e.terms.len());
    assert_eq!(
        d("n").mul_const(i64::MAX).and_then(|x| x.mul_const(2)),
        None
    );
    assert!(Dim::min_of(&[]).is_none());
    assert_eq!(Dim::constant(5).floor_div(&Dim::zero()), None);
}

#[test]
fn substitution_binds_symbols() {
    let e = d("(n*seq + w)/2");
    let bound = e
        .substitute(&|s| (s == SymbolId(0)).then(|| Dim::constant(2)))
        .unwrap();
    assert_eq!(bound, d("seq + w/2"));
    assert_eq!(bound.eval_at(&[0, 5, 7]), Some(8));
    assert_eq!(e.symbols(), vec![SymbolId(0), SymbolId(1), SymbolId(2)]);
}
