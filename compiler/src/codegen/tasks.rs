//! How the kernel plan splits a node's work into tasks for `run` with a thread pool
//! (see [`super::run`]).
//!
//! A node is split along an axis of independent pieces (a GEMM's row tiles, attention
//! heads, rows of an elementwise op), never along a reduction, and at piece
//! boundaries: each output element is then computed by the same instructions in the
//! same order however the pieces are grouped, which keeps the outputs bit-identical for
//! every number of threads. The split depends only on the node's shape, so it is
//! decided at compile time.

/// Work (multiply-adds, or element operations) below which a task would cost more to
/// hand to another thread than it saves: a fork and join through a pool is a few
/// microseconds, this much work ~5–10 µs on one core.
pub const MIN_TASK_WORK: usize = 1 << 18;
/// Tasks per node at most: enough to balance 2–32 threads, few enough that each task
/// still runs whole register tiles and reads its operands' panels once.
pub const MAX_TASKS: usize = 32;

/// `units` indivisible pieces grouped into tasks of `per` pieces, the last task taking
/// what is left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Split {
    pub units: usize,
    pub per: usize,
    pub tasks: usize,
}

impl Split {
    /// The split of `units` pieces of `work` in total.
    pub fn of(units: usize, work: usize) -> Split {
        let units = units.max(1);
        let wanted = (work / MIN_TASK_WORK).clamp(1, MAX_TASKS).min(units);
        let per = units.div_ceil(wanted);
        Split {
            units,
            per,
            tasks: units.div_ceil(per),
        }
    }

    /// Pieces of the last task.
    pub fn last(&self) -> usize {
        self.units - self.per * (self.tasks - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_cover_every_piece_once() {
        for units in 1..200 {
            for work in [0, MIN_TASK_WORK, 7 * MIN_TASK_WORK, 1000 * MIN_TASK_WORK] {
                let s = Split::of(units, work);
                assert!(s.tasks >= 1 && s.tasks <= MAX_TASKS);
                assert!(s.last() >= 1 && s.last() <= s.per);
                assert_eq!(s.per * (s.tasks - 1) + s.last(), units);
            }
        }
        assert_eq!(Split::of(100, 0).tasks, 1);
        assert_eq!(Split::of(4, 1000 * MIN_TASK_WORK).tasks, 4);
    }
}
