//! Progress bars for the slow steps (code generation of big graphs, calibration), one
//! rule for all: drawn on stderr only when it is a terminal, hidden otherwise so tests,
//! scripts and CI logs see no change.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// A bar over `len` steps drawn with `template` (an indicatif template, e.g.
/// `"calibrating {bar:40} {pos}/{len} samples ({eta} left)"`), or a hidden one when
/// stderr is not a terminal or there are fewer than `min_len` steps (too quick to be
/// worth a bar).
pub fn bar(len: u64, template: &str, min_len: u64) -> ProgressBar {
    if len < min_len || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}
