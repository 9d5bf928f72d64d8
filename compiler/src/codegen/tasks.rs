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
    /// The split of `units` pieces of `work` in total. The task count aimed at is a
    /// power of two, so that 2, 4, 8 … threads get equal shares of it: three tasks
    /// on two threads leave one idle for a third of the node.
    pub fn of(units: usize, work: usize) -> Split {
        let units = units.max(1);
        let wanted = (work / MIN_TASK_WORK)
            .clamp(1, MAX_TASKS)
            .next_power_of_two()
            .min(MAX_TASKS)
            .min(units);
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

/// The largest thread's share of a split node's output over a fair share, when the
/// tasks go to `threads` threads in contiguous chunks, as `nnc_runtime_abi::ThreadPool`
/// and `nnc_pool.h` deal them first: every piece is `piece` elements but the last,
/// which ends at `total`. 1.0 is a perfect balance.
pub fn imbalance(split: &Split, piece: usize, total: usize, threads: usize) -> f64 {
    let task_size = |i: usize| {
        let start = i * split.per * piece;
        ((i + 1) * split.per * piece).min(total) - start.min(total)
    };
    let chunks = threads.clamp(1, split.tasks);
    let bound = |c: usize| split.tasks * c / chunks;
    let largest = (0..chunks)
        .map(|c| (bound(c)..bound(c + 1)).map(task_size).sum::<usize>())
        .max()
        .unwrap_or(0);
    largest as f64 * threads as f64 / total.max(1) as f64
}

/// When `threads` threads finish tasks of `sizes` (in units of time), dealt as the
/// pools of `nnc_runtime_abi` and `nnc_pool.h` deal them: each thread runs its own
/// contiguous chunk of the indices in order, then takes the next unclaimed index of
/// the chunks after its own. Ties go to the lower thread.
pub fn makespan(sizes: &[usize], threads: usize) -> usize {
    let n = sizes.len();
    let chunks = threads.clamp(1, n.max(1));
    let mut next: Vec<usize> = (0..chunks).map(|c| n * c / chunks).collect();
    let end: Vec<usize> = (0..chunks).map(|c| n * (c + 1) / chunks).collect();
    let mut clock = vec![0usize; threads.max(1)];
    loop {
        let (worker, &now) = clock
            .iter()
            .enumerate()
            .min_by_key(|&(w, &t)| (t, w))
            .expect("at least one thread");
        let own = worker % chunks;
        let Some(c) = (0..chunks)
            .map(|k| (own + k) % chunks)
            .find(|&c| next[c] < end[c])
        else {
            return clock.into_iter().max().unwrap_or(0);
        };
        clock[worker] = now + sizes[next[c]];
        next[c] += 1;
    }
}

/// Elementwise slices start on multiples of this many elements: every element is then
/// computed by the same (vector or tail) code as in the whole node, whose loops step
/// by up to 16 floats.
const SLICE_QUANTUM: usize = 16;

/// A node split into slices along one axis of its output (see [`row_slicing`]): task
/// `t` computes rows `t·rows_per ..` (`rows_per` rows, the last task what is left) of
/// `axis`, every axis before it being 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowSlicing {
    pub axis: usize,
    pub rows: usize,
    pub rows_per: usize,
    pub tasks: usize,
    /// For a Transpose: input elements between output rows along `axis` (the input is
    /// read in place, whole, from the task's first row).
    pub transposed_input: Option<usize>,
}

/// How an elementwise, normalization or pooling node is split into tasks, if it is:
/// by slices of the first output axis longer than 1, when every input either is
/// sliced with it (the same extent there, not a constant) or broadcasts along it, and
/// the op computes each slice alone (a Softmax or LayerNorm over later axes; pooling
/// over spatial axes after it).
pub fn row_slicing(graph: &crate::ir::Graph, node: &crate::ir::Node) -> Option<RowSlicing> {
    use crate::ops::Op;
    let out = graph.ty(*node.outputs.first()?);
    let axis = out.shape.iter().position(|&d| d > 1)?;
    let inner: usize = out.shape[axis + 1..].iter().product();
    if let Op::Transpose { perm } = &node.op {
        // Any output axis: each output row reads the input through its strides.
        let x = graph.ty(node.inputs.first().copied().flatten()?);
        // A strided gather per element: ~10 µs for a 128×256 transformer activation.
        let split = Split::of(out.shape[axis], out.numel() * 16);
        let x_strides = crate::codegen::kernel::strides_of(&x.shape);
        let rows = out.shape[axis];
        return (split.tasks > 1).then(|| RowSlicing {
            axis,
            rows,
            rows_per: split.per,
            tasks: split.tasks,
            transposed_input: Some(x_strides[perm[axis]]),
        });
    }
    let (cost, elementwise) = match &node.op {
        Op::Unary(_) | Op::Binary(_) | Op::Where => (8, true),
        Op::Softmax { axis: a, .. } | Op::LayerNorm { axis: a, .. } if *a > axis => (16, false),
        Op::Pool(p) if axis + p.kernel.len() < out.rank() => {
            (p.kernel.iter().product::<usize>().max(1), false)
        }
        _ => return None,
    };
    for v in node.inputs.iter().flatten() {
        let ty = graph.ty(*v);
        let Some(at) = (axis + ty.rank()).checked_sub(out.rank()) else {
            continue; // Broadcast along the axis: read whole by every task.
        };
        let (before, dim) = (&ty.shape[..at], ty.shape[at]);
        if before.iter().any(|&d| d != 1) {
            return None;
        }
        if dim == out.shape[axis] {
            if graph.constant(*v).is_some() {
                return None;
            }
        } else if dim != 1 {
            return None;
        }
    }
    let rows = out.shape[axis];
    // Rows per unit: whole quanta of elements for elementwise ops, any for row ops.
    let unit = match elementwise {
        true => SLICE_QUANTUM / gcd(inner, SLICE_QUANTUM),
        false => 1,
    };
    let split = Split::of(rows.div_ceil(unit), out.numel() * cost);
    if split.tasks < 2 {
        return None;
    }
    let rows_per = split.per * unit;
    Some(RowSlicing {
        axis,
        rows,
        rows_per,
        tasks: rows.div_ceil(rows_per),
        transposed_input: None,
    })
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a.max(1)
    } else {
        gcd(b, a % b)
    }
}

/// A node's work in multiply-adds (convolutions, GEMMs, attention) or, for every other
/// op, its output elements: the weights `nnc inspect --threads` gives the nodes when it
/// estimates a model's parallel speedup.
pub fn node_work(graph: &crate::ir::Graph, node: &crate::ir::Node) -> usize {
    use crate::ops::Op;
    let out: usize = node.outputs.first().map_or(0, |o| graph.ty(*o).numel());
    let input = |i: usize| node.inputs.get(i).copied().flatten().map(|v| graph.ty(v));
    match &node.op {
        // Each output: (C_in / group) · kernel taps, W's shape after its first axis.
        Op::Conv(_) => input(1).map_or(out, |w| out * w.shape.iter().skip(1).product::<usize>()),
        Op::MatMul(_) | Op::MatMulInteger => {
            input(0).map_or(out, |a| out * a.shape.last().copied().unwrap_or(1))
        }
        Op::Gemm(g) => input(0).map_or(out, |a| {
            let k = if g.trans_a {
                a.shape[0]
            } else {
                a.shape[a.rank() - 1]
            };
            out * k
        }),
        Op::Attention => match (input(0), input(1), input(2)) {
            (Some(q), Some(kt), Some(v)) => {
                let batches: usize = q.shape[..q.rank() - 2].iter().product();
                let (m, d) = (q.shape[q.rank() - 2], q.shape[q.rank() - 1]);
                let t = kt.shape[kt.rank() - 1];
                batches * m * t * (d + v.shape[v.rank() - 1])
            }
            _ => out,
        },
        _ => out,
    }
}

/// What splitting buys on `threads` threads, from each node's task count and work:
/// per node, the share of its work the largest task has and the fraction of the
/// threads' time left idle; for the model, the work in split nodes and the speedup
/// over one thread were every task equally long.
pub struct Estimate {
    pub parallel_fraction: f64,
    pub speedup: f64,
}

/// Idle fraction of `threads` threads running `tasks` equal tasks.
pub fn idle_fraction(tasks: usize, threads: usize) -> f64 {
    let rounds = tasks.div_ceil(threads.max(1));
    1.0 - tasks as f64 / (threads * rounds) as f64
}

/// The model estimate for `(work, tasks)` per node on `threads` threads.
pub fn estimate(nodes: &[(usize, usize)], threads: usize) -> Estimate {
    // Folded from +0.0: an empty float sum is −0.0, which prints as "-0".
    let total = nodes.iter().fold(0.0, |a, &(w, _)| a + w as f64);
    let split = nodes
        .iter()
        .filter(|&&(_, t)| t > 1)
        .fold(0.0, |a, &(w, _)| a + w as f64);
    let time = nodes.iter().fold(0.0, |a, &(w, t)| {
        let t = t.max(1);
        a + w as f64 * t.div_ceil(threads.max(1)) as f64 / t as f64
    });
    Estimate {
        parallel_fraction: if total > 0.0 { split / total } else { 0.0 },
        speedup: if time > 0.0 { total / time } else { 1.0 },
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

    #[test]
    fn task_counts_are_powers_of_two_when_the_pieces_allow() {
        // Work for 3 tasks: 4 of them, so that 2 threads share it evenly.
        let s = Split::of(197, 3 * MIN_TASK_WORK);
        assert_eq!((s.tasks, s.per), (4, 50));
        assert_eq!(Split::of(3, 1000 * MIN_TASK_WORK).tasks, 3);
        assert_eq!(Split::of(1000, 1000 * MIN_TASK_WORK).tasks, MAX_TASKS);
    }

    #[test]
    fn makespan_follows_the_pools_dealing() {
        // 3 tasks on 2 threads: thread 0 runs task 0, thread 1 tasks 1 and 2.
        assert_eq!(makespan(&[5, 5, 4], 2), 9);
        // Thread 0 finishes its two tasks first and takes thread 1's last one.
        assert_eq!(makespan(&[2, 2, 2, 2, 2, 2, 1], 2), 7);
        assert_eq!(makespan(&[4, 3, 4, 3], 2), 7);
        assert_eq!(makespan(&[10], 4), 10);
        assert_eq!(makespan(&[], 2), 0);
    }

    #[test]
    fn imbalance_weighs_the_short_last_piece() {
        // 256 columns in 48-column panels: 3 + 3 panels, 144 and 112 columns.
        let s = Split::of(6, 1000 * MIN_TASK_WORK);
        assert!((imbalance(&s, 48, 256, 2) - 144.0 * 2.0 / 256.0).abs() < 1e-9);
        // 128 rows in 16 tiles of 8: even on 2 and 4 threads; one task is all of it.
        let s = Split::of(16, 1000 * MIN_TASK_WORK);
        assert_eq!(imbalance(&s, 8, 128, 2), 1.0);
        assert_eq!(imbalance(&s, 8, 128, 4), 1.0);
        assert_eq!(imbalance(&Split::of(16, 0), 8, 128, 2), 2.0);
    }

    #[test]
    fn the_estimate_counts_rounds_of_tasks() {
        // 4 equal tasks on 3 threads take 2 rounds; an unsplit node runs alone.
        let e = estimate(&[(400, 4), (100, 1)], 3);
        assert!((e.parallel_fraction - 0.8).abs() < 1e-9);
        assert!((e.speedup - 500.0 / (200.0 + 100.0)).abs() < 1e-9);
        assert!((idle_fraction(4, 3) - (1.0 - 4.0 / 6.0)).abs() < 1e-9);
        assert_eq!(estimate(&[], 4).parallel_fraction, 0.0);
    }
}
