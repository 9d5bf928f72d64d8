//! How slow steps (code generation of big graphs, INT8 calibration and sensitivity
//! trials) report progress: through a [`Progress`] their caller passes in. The library
//! draws nothing itself; the `nnc` command line shows bars on a terminal.

/// The steps that report progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Task {
    /// One step per graph node.
    CodeGeneration,
    /// One step per calibration sample.
    Calibration,
    /// One step per layer whose float32 build is tried (`--int8-min-sqnr`).
    Sensitivity,
}

/// Receives progress; every method defaults to doing nothing.
pub trait Progress: Sync {
    /// `task` starts, with `steps` steps to go.
    fn start(&self, task: Task, steps: usize) {
        let _ = (task, steps);
    }

    /// One more step of `task` is done.
    fn step(&self, task: Task) {
        let _ = task;
    }

    /// `task` is over.
    fn finish(&self, task: Task) {
        let _ = task;
    }
}

/// Reports nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct Silent;

impl Progress for Silent {}
