//! How the `nnc` command line reports an error: `error:` and the message, then, when the
//! error is about nodes, each node quoted like a compiler quotes a source line:
//!
//! ```text
//! error: unsupported operators (1)
//!   --> model.onnx, node 'NonZero_0' (NonZero)
//!    |  y = NonZero(x: float32[3,4])
//!    = note: its output shape depends on the input values; nnc compiles static shapes only
//! ```
//!
//! Styled with ANSI escapes; [`eprint`] strips them unless stderr is a terminal (or
//! `CLICOLOR_FORCE` is set), and always when `NO_COLOR` is set.

use std::fmt::Write;
use std::path::Path;

use anstyle::{AnsiColor, Style};

use nnc::error::{NncError, NodeExcerpt};

const ERROR: Style = AnsiColor::Red.on_default().bold();
const ARROW: Style = AnsiColor::Blue.on_default().bold();
const BOLD: Style = Style::new().bold();

/// The diagnostic for `e`, with ANSI styles (see [`eprint`]).
pub fn render(e: &NncError) -> String {
    let file = e.file();
    let mut s = String::new();
    let _ = write!(s, "{ERROR}error{ERROR:#}{BOLD}: ");
    match e.innermost() {
        NncError::Unsupported(ops) => {
            let _ = writeln!(s, "unsupported operators ({}){BOLD:#}", ops.len());
            for u in ops {
                quote(&mut s, file, &u.node, &u.op, Some(&u.excerpt));
                let _ = writeln!(s, "   {ARROW}={ARROW:#} {BOLD}note{BOLD:#}: {}", u.reason);
            }
        }
        NncError::Node {
            node,
            op,
            message,
            excerpt,
        } => {
            let _ = writeln!(s, "{message}{BOLD:#}");
            quote(&mut s, file, node, op, excerpt.as_deref());
        }
        _ => {
            let _ = writeln!(s, "{e}{BOLD:#}");
        }
    }
    s
}

/// `  --> FILE, node 'NAME' (OP)` and the excerpt line.
fn quote(s: &mut String, file: Option<&Path>, node: &str, op: &str, excerpt: Option<&NodeExcerpt>) {
    let _ = write!(s, "  {ARROW}-->{ARROW:#} ");
    if let Some(file) = file {
        let _ = write!(s, "{}, ", file.display());
    }
    let _ = writeln!(s, "node '{node}' ({op})");
    if let Some(excerpt) = excerpt {
        let _ = writeln!(s, "   {ARROW}|{ARROW:#}  {}", excerpt.render(op));
    }
}

/// Prints [`render`]'s diagnostic to stderr, styled only where colour is wanted.
pub fn eprint(e: &NncError) {
    anstream::eprint!("{}", render(e));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(e: &NncError) -> String {
        anstream::adapter::strip_str(&render(e)).to_string()
    }

    #[test]
    fn quotes_a_node_error_with_its_file() {
        let e = NncError::node("mm", "MatMul", "inner dimensions differ")
            .with_excerpt(|| NodeExcerpt {
                inputs: vec!["a: float32[2,3]".into(), "b: float32[4,5]".into()],
                outputs: vec!["c".into()],
                attributes: vec![],
            })
            .in_file("m.onnx");
        assert_eq!(
            plain(&e),
            "error: inner dimensions differ\n  --> m.onnx, node 'mm' (MatMul)\n   |  \
             c = MatMul(a: float32[2,3], b: float32[4,5])\n"
        );
        assert!(render(&e).starts_with("\x1b[1m\x1b[31merror\x1b[0m"));
    }

    #[test]
    fn other_errors_are_one_line() {
        let e = NncError::Model("--dim batch: expected PARAM=VALUE".into());
        assert_eq!(plain(&e), "error: --dim batch: expected PARAM=VALUE\n");
        // Without an excerpt a node error still names file and node.
        let e = NncError::node("n", "Relu", "bad").in_file("m.onnx");
        assert_eq!(plain(&e), "error: bad\n  --> m.onnx, node 'n' (Relu)\n");
    }
}
