//! The text form of a [`Dim`]: integer arithmetic with `+ - *`, `/` rounding down
//! (toward −∞), `min(…)` and `max(…)`, symbols by name: `2*batch*seq`,
//! `(h - 1)/2 + 1`, `min(seq, 512)`. Written so that [`parse`] reads it back to the
//! same expression (IR dumps, filetests, diagnostics and headers use it).

use super::{Atom, Dim, SymbolId, Term};

impl Dim {
    /// The expression as text, symbols named by `name`.
    pub fn written(&self, name: &dyn Fn(SymbolId) -> String) -> String {
        if self.terms.is_empty() {
            return "0".into();
        }
        // The constant last, as people write `n + 1`.
        let (constant, varying): (Vec<&Term>, Vec<&Term>) =
            self.terms.iter().partition(|t| t.mono.0.is_empty());
        let mut out = String::new();
        for (i, t) in varying.iter().chain(&constant).enumerate() {
            let (neg, body) = term_text(t, name);
            // `-(a)/4` would read as ⌊−a/4⌋.
            let body = match (i, neg) {
                (0, true) if body.contains('/') => format!("({body})"),
                _ => body,
            };
            out += match (i, neg) {
                (0, false) => "",
                (0, true) => "-",
                (_, false) => " + ",
                (_, true) => " - ",
            };
            out += &body;
        }
        out
    }
}

/// The sign and the text of `|t|`.
fn term_text(t: &Term, name: &dyn Fn(SymbolId) -> String) -> (bool, String) {
    let k = t.coef.unsigned_abs();
    let mut factors: Vec<String> = vec![];
    if k != 1 || t.mono.0.is_empty() {
        factors.push(k.to_string());
    }
    let alone = factors.is_empty() && t.mono.0.len() == 1 && t.mono.0[0].1 == 1;
    for (a, pow) in &t.mono.0 {
        let text = atom_text(a, name);
        let text = match a {
            Atom::FloorDiv(..) if !alone => format!("({text})"),
            _ => text,
        };
        for _ in 0..*pow {
            factors.push(text.clone());
        }
    }
    (t.coef < 0, factors.join("*"))
}

fn atom_text(a: &Atom, name: &dyn Fn(SymbolId) -> String) -> String {
    match a {
        Atom::Sym(s) => name(*s),
        Atom::FloorDiv(n, d) => {
            let n_text = n.written(name);
            let d_text = d.written(name);
            let n_text = if n.as_symbol().is_some() || n.as_const().is_some_and(|c| c >= 0) {
                n_text
            } else {
                format!("({n_text})")
            };
            let d_text = if d.as_symbol().is_some() || d.as_const().is_some_and(|c| c > 0) {
                d_text
            } else {
                format!("({d_text})")
            };
            format!("{n_text}/{d_text}")
        }
        Atom::Min(args) | Atom::Max(args) => {
            let f = if matches!(a, Atom::Min(_)) {
                "min"
            } else {
                "max"
            };
            let args: Vec<String> = args.iter().map(|a| a.written(name)).collect();
            format!("{f}({})", args.join(", "))
        }
    }
}

/// Reads an expression; `symbol` resolves each name (`None`: an unknown name).
pub fn parse(text: &str, symbol: &mut dyn FnMut(&str) -> Option<SymbolId>) -> Result<Dim, String> {
    let tokens = tokenize(text)?;
    let mut p = Parser {
        tokens,
        at: 0,
        symbol,
        text,
    };
    let d = p.sum()?;
    match p.tokens.get(p.at) {
        None => Ok(d),
        Some(t) => Err(format!("'{text}': unexpected '{}'", t.text())),
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Int(i64),
    Name(String),
    Punct(char),
}

impl Token {
    fn text(&self) -> String {
        match self {
            Token::Int(v) => v.to_string(),
            Token::Name(n) => n.clone(),
            Token::Punct(c) => c.to_string(),
        }
    }
}

fn tokenize(text: &str) -> Result<Vec<Token>, String> {
    let mut out = vec![];
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && chars[i].is_ascii_digit() {
                i += 1;
            }
            let s: String = chars[start..i].iter().collect();
            let v = s
                .parse::<i64>()
                .map_err(|_| format!("'{text}': {s} is too large"))?;
            out.push(Token::Int(v));
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || "_.:".contains(chars[i])) {
                i += 1;
            }
            out.push(Token::Name(chars[start..i].iter().collect()));
        } else if "+-*/(),".contains(c) {
            out.push(Token::Punct(c));
            i += 1;
        } else {
            return Err(format!("'{text}': unexpected '{c}'"));
        }
    }
    Ok(out)
}

struct Parser<'a> {
    tokens: Vec<Token>,
    at: usize,
    symbol: &'a mut dyn FnMut(&str) -> Option<SymbolId>,
    text: &'a str,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(&Token::Punct(c)) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn overflow(&self) -> String {
        format!("'{}': the arithmetic overflows", self.text)
    }

    fn sum(&mut self) -> Result<Dim, String> {
        let mut d = self.product()?;
        loop {
            if self.eat('+') {
                let r = self.product()?;
                d = d.checked_add(&r).ok_or_else(|| self.overflow())?;
            } else if self.eat('-') {
                let r = self.product()?;
                d = d.checked_sub(&r).ok_or_else(|| self.overflow())?;
            } else {
                return Ok(d);
            }
        }
    }

    fn product(&mut self) -> Result<Dim, String> {
        let mut d = self.unary()?;
        loop {
            if self.eat('*') {
                let r = self.unary()?;
                d = d.checked_mul(&r).ok_or_else(|| self.overflow())?;
            } else if self.eat('/') {
                let r = self.unary()?;
                d = d
                    .floor_div(&r)
                    .ok_or_else(|| format!("'{}': a division by zero or an overflow", self.text))?;
            } else {
                return Ok(d);
            }
        }
    }

    fn unary(&mut self) -> Result<Dim, String> {
        if self.eat('-') {
            let d = self.unary()?;
            return d.checked_neg().ok_or_else(|| self.overflow());
        }
        self.atom()
    }

    fn atom(&mut self) -> Result<Dim, String> {
        let text = self.text;
        let t = self
            .peek()
            .cloned()
            .ok_or_else(|| format!("'{text}': the expression ends early"))?;
        self.at += 1;
        match t {
            Token::Int(v) => Ok(Dim::constant(v)),
            Token::Punct('(') => {
                let d = self.sum()?;
                if !self.eat(')') {
                    return Err(format!("'{text}': a '(' is not closed"));
                }
                Ok(d)
            }
            Token::Name(n) if (n == "min" || n == "max") && self.eat('(') => {
                let mut args = vec![self.sum()?];
                while self.eat(',') {
                    args.push(self.sum()?);
                }
                if !self.eat(')') {
                    return Err(format!("'{text}': {n}( is not closed"));
                }
                let d = if n == "min" {
                    Dim::min_of(&args)
                } else {
                    Dim::max_of(&args)
                };
                d.ok_or_else(|| self.overflow())
            }
            Token::Name(n) => (self.symbol)(&n)
                .map(Dim::symbol)
                .ok_or_else(|| format!("'{text}': no symbol '{n}'")),
            Token::Punct(c) => Err(format!("'{text}': unexpected '{c}'")),
        }
    }
}
