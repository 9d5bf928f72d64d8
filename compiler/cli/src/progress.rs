//! Progress bars for the slow steps the compiler reports ([`nnc::progress::Task`]), one
//! rule for all: drawn on stderr only when it is a terminal, hidden otherwise so tests,
//! scripts and CI logs see no change.

use std::io::IsTerminal;
use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressStyle};
use nnc::progress::{Progress, Task};

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

/// The template of each task's bar and the fewest steps worth drawing one for.
fn style(task: Task) -> (&'static str, u64) {
    match task {
        Task::CodeGeneration => (
            "generating code {bar:40} {pos}/{len} nodes ({eta} left)",
            200,
        ),
        Task::Calibration => ("calibrating {bar:40} {pos}/{len} samples ({eta} left)", 1),
        Task::Sensitivity => (
            "int8 sensitivity {bar:40} {pos}/{len} layers ({eta} left)",
            1,
        ),
    }
}

/// Draws the compiler's progress as one bar per task.
#[derive(Default)]
pub struct Bars {
    current: Mutex<Option<(Task, ProgressBar)>>,
}

impl Progress for Bars {
    fn start(&self, task: Task, steps: usize) {
        let (template, min_len) = style(task);
        let new = bar(steps as u64, template, min_len);
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, old)) = current.replace((task, new)) {
            old.finish_and_clear();
        }
    }

    fn step(&self, task: Task) {
        let current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((t, bar)) = current.as_ref() {
            if *t == task {
                bar.inc(1);
            }
        }
    }

    fn finish(&self, task: Task) {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if current.as_ref().is_some_and(|(t, _)| *t == task) {
            if let Some((_, bar)) = current.take() {
                bar.finish_and_clear();
            }
        }
    }
}

impl Drop for Bars {
    fn drop(&mut self) {
        if let Some((_, bar)) = self
            .current
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            bar.finish_and_clear();
        }
    }
}
