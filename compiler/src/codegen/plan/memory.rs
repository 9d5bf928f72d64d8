//! Static memory planning: where every tensor lives while `infer` runs.
//!
//! Graph inputs and outputs live in the caller's buffers, constants in one read-only
//! blob, everything else in one arena whose offsets are reused by liveness. Reshape-like
//! nodes are views: their output shares the input's storage. Elementwise nodes write in
//! place over an input of their output's shape that dies with them, and a Concat whose
//! inputs are contiguous runs of its output (every axis before the concat axis has size
//! 1) has its inputs' producers write straight into their slices.

use crate::ir::{Graph, ValueId};
use crate::ops::{Op, UnaryOp};

/// Alignment of every arena and weight buffer: a cache line, enough for any vector load.
pub const ALIGN: usize = 64;

/// A node with more operands (inputs and outputs) than this gets their addresses through
/// an operand table in the workspace instead of one function parameter each: thousands
/// of parameters (a Concat of every graph input) would be passed on the stack and kept
/// live across the whole node function, which register allocation handles in time
/// quadratic in their number.
pub const MAX_DIRECT_OPERANDS: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage {
    /// The caller's `inputs[i]`.
    Input(usize),
    /// The caller's `outputs[i]`.
    Output(usize),
    /// Offset into the read-only weights blob.
    Const(usize),
    /// Offset into the workspace arena.
    Arena(usize),
}

#[derive(Debug, Default)]
pub struct MemoryPlan {
    /// Indexed by `ValueId.0`; `None` for values nothing reads.
    pub storage: Vec<Option<Storage>>,
    /// Arena offset of each node's scratch buffer (im2col and the like), if it has one.
    pub scratch: Vec<Option<usize>>,
    /// Arena offset of each node's operand table (the addresses of its inputs, then of
    /// its outputs, 8 bytes each), for nodes with more than [`MAX_DIRECT_OPERANDS`].
    pub operand_tables: Vec<Option<usize>>,
    /// Every constant that code reads, 64-byte aligned.
    pub weights: Vec<u8>,
    pub arena_size: usize,
    /// The largest total of simultaneously live arena bytes: no plan can do better.
    pub lower_bound: usize,
    /// Graph outputs that are not written by a node (constants, inputs, duplicates):
    /// copied into `outputs[i]` at the end of `infer`.
    pub final_copies: Vec<(ValueId, usize)>,
    /// Nodes whose output is already in place (a view of its input, or a Concat whose
    /// inputs were all written into its output): no code is emitted for them.
    pub is_view: Vec<bool>,
    /// For each value, the value that owns its storage: itself, unless it is a view
    /// (Reshape), an in-place elementwise output, or a slice of an in-place Concat.
    pub root: Vec<usize>,
    /// Byte offset of each value inside its root's storage (nonzero only for values
    /// that producers write straight into their slice of a Concat output).
    pub offset: Vec<usize>,
}

fn align(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

/// True for nodes that only reinterpret their input's shape (or, BitCast, its bits).
pub(super) fn is_view_op(op: &Op) -> bool {
    matches!(
        op,
        Op::Reshape { .. } | Op::Unary(UnaryOp::Identity) | Op::BitCast { .. }
    )
}

/// A buffer to place: its size and the interval of node indices during which it lives.
struct Interval {
    size: usize,
    start: usize,
    end: usize,
    offset: usize,
}

pub fn plan_memory(graph: &Graph, scratch_bytes: &[usize]) -> MemoryPlan {
    let nv = graph.values.len();
    let nn = graph.nodes.len();
    let mut plan = MemoryPlan {
        storage: vec![None; nv],
        offset: vec![0; nv],
        scratch: vec![None; nn],
        operand_tables: vec![None; nn],
        is_view: vec![false; nn],
        ..Default::default()
    };

    // Caller-owned storage first.
    for (i, v) in graph.inputs.iter().enumerate() {
        plan.storage[v.0] = Some(Storage::Input(i));
    }
    let mut producer = vec![usize::MAX; nv];
    for (k, n) in graph.nodes.iter().enumerate() {
        for o in &n.outputs {
            producer[o.0] = k;
        }
    }
    let produced = |v: usize| producer[v] != usize::MAX;
    for (i, v) in graph.outputs.iter().enumerate() {
        if produced(v.0) && plan.storage[v.0].is_none() {
            plan.storage[v.0] = Some(Storage::Output(i));
        } else {
            plan.final_copies.push((*v, i));
        }
    }

    // Last read of each value (`nn` when `infer` copies it out at the end); a value
    // nothing reads dies where it is produced.
    let mut last_use: Vec<usize> = (0..nv)
        .map(|v| if produced(v) { producer[v] } else { 0 })
        .collect();
    for (k, n) in graph.nodes.iter().enumerate() {
        for i in n.inputs.iter().flatten() {
            last_use[i.0] = last_use[i.0].max(k);
            // A node reading a value of run-time extents reads that extent too.
            if let Some(e) = &graph.value(*i).run_extent {
                last_use[e.count.0] = last_use[e.count.0].max(k);
            }
        }
    }
    for (v, _) in &plan.final_copies {
        last_use[v.0] = nn;
    }
    // `run` reads an output's extent after the last node.
    for v in &graph.outputs {
        if let Some(e) = &graph.value(*v).run_extent {
            last_use[e.count.0] = nn;
        }
    }

    // Storage groups: `root[v]` owns the storage of every value aliasing it, `v` sits
    // `offset[v]` bytes into it. Built in schedule order, so when node `k` is reached a
    // group's members are all produced and their last uses known.
    let mut g = Groups {
        root: (0..nv).collect(),
        members: (0..nv).map(|v| vec![v]).collect(),
        last: last_use.clone(),
    };
    // A group whose storage this plan owns (not the caller's, not a constant's).
    let plannable = |plan: &MemoryPlan, r: usize| {
        produced(r) && plan.storage[r].is_none() && graph.values[r].constant.is_none()
    };
    for (k, n) in graph.nodes.iter().enumerate() {
        let (Some(&out), [Some(first), ..]) = (n.outputs.first(), n.inputs.as_slice()) else {
            continue;
        };
        if n.outputs.len() != 1 || plan.storage[out.0].is_some() {
            continue;
        }
        // Offsets computed from shapes hold only for fixed extents: a value with
        // symbolic axes is laid out at the run's extents.
        let symbolic =
            (n.inputs.iter().flatten().chain(&n.outputs)).any(|v| graph.ty(*v).dims.is_some());
        if is_view_op(&n.op) {
            // Views may alias anything, even the caller's buffers or a constant.
            g.join(out.0, first.0, plan.offset[first.0], &mut plan.offset);
            plan.is_view[k] = true;
        } else if let Some(at) = contiguous_slice_offset(graph, n).filter(|_| !symbolic) {
            // A slice that is one contiguous run of its input (a Gather of one constant
            // index, a Slice of leading axes): read where it lies.
            g.join(out.0, first.0, plan.offset[first.0] + at, &mut plan.offset);
            plan.is_view[k] = true;
        } else if is_elementwise(&n.op) {
            // In place: the output overwrites an input of its own shape and element
            // size whose whole group dies here.
            let out_ty = graph.ty(out);
            // Of several candidates, the longest-lived group (a residual stream) keeps
            // its buffer rather than handing over to a fresh one: fewer, longer buffers
            // fragment the arena less.
            let victim = n
                .inputs
                .iter()
                .flatten()
                .filter(|x| {
                    let ty = graph.ty(**x);
                    let r = g.root[x.0];
                    ty.shape == out_ty.shape
                        && ty.dims == out_ty.dims
                        && ty.dtype.size() == out_ty.dtype.size()
                        && plannable(&plan, r)
                        && g.last[r] <= k
                })
                .min_by_key(|x| {
                    let r = g.root[x.0];
                    g.members[r].iter().map(|&m| producer[m]).min()
                });
            if let Some(x) = victim {
                g.join(out.0, x.0, plan.offset[x.0], &mut plan.offset);
            }
        } else if let Op::Concat { axis } = n.op {
            // Concat in place: with every axis before `axis` of size 1 each input is one
            // contiguous run of the output, so its producers can write there directly.
            let shape = &graph.ty(out).shape;
            if symbolic || shape[..axis].iter().any(|&d| d != 1) {
                continue;
            }
            let inner: usize = shape[axis + 1..].iter().product();
            let elem = graph.ty(out).dtype.size();
            let mut at = 0usize;
            let mut all = true;
            let mut uses = std::collections::HashMap::<usize, usize>::new();
            for x in n.inputs.iter().flatten() {
                *uses.entry(x.0).or_default() += 1;
            }
            for x in n.inputs.iter().flatten() {
                let ty = graph.ty(*x);
                let bytes = ty.byte_size();
                let r = g.root[x.0];
                let once = uses.get(&x.0) == Some(&1);
                // The input's whole group moves, so it must be exactly the input's bytes
                // (in-place chains and views are; slices of another concat are not).
                let whole = plan.offset[x.0] == 0 && graph.ty(ValueId(r)).byte_size() == bytes;
                if once && whole && plannable(&plan, r) && g.last[r] <= k && ty.dtype.size() == elem
                {
                    g.join_group(r, out.0, at * elem, &mut plan.offset);
                } else {
                    all = false;
                }
                at += ty.shape.get(axis).copied().unwrap_or(1) * inner;
            }
            plan.is_view[k] = all;
        }
    }
    let root = g.root;

    // Liveness of each group: from its first member's production to its last read.
    let mut first = vec![usize::MAX; nv];
    let mut last = vec![0usize; nv];
    let mut used = vec![false; nv];
    for v in 0..nv {
        let r = root[v];
        if produced(v) {
            first[r] = first[r].min(producer[v]);
        }
        last[r] = last[r].max(last_use[v]);
    }
    for n in &graph.nodes {
        for i in n.inputs.iter().flatten() {
            used[root[i.0]] = true;
        }
    }
    for (v, _) in &plan.final_copies {
        used[root[v.0]] = true;
    }

    place_constants(&mut plan, graph, &used);

    // Arena buffers: every produced root without caller storage, plus node scratch and
    // operand tables.
    let mut buffers: Vec<(Owner, Interval)> = vec![];
    let during = |k: usize, bytes: usize| Interval {
        size: align(bytes),
        start: k,
        end: k,
        offset: 0,
    };
    for v in 0..nv {
        if root[v] == v && produced(v) && plan.storage[v].is_none() && first[v] != usize::MAX {
            let size = align(graph.values[v].ty.byte_size().max(1));
            buffers.push((
                Owner::Value(v),
                Interval {
                    size,
                    start: first[v],
                    end: last[v].max(first[v]),
                    offset: 0,
                },
            ));
        }
    }
    for (k, &bytes) in scratch_bytes.iter().enumerate() {
        if bytes > 0 {
            buffers.push((Owner::Scratch(k), during(k, bytes)));
        }
    }
    for (k, n) in graph.nodes.iter().enumerate() {
        let operands = n.inputs.iter().flatten().count() + n.outputs.len();
        if operands > MAX_DIRECT_OPERANDS && !plan.is_view[k] {
            buffers.push((Owner::OperandTable(k), during(k, operands * 8)));
        }
    }
    place(&mut buffers.iter_mut().map(|(_, i)| i).collect::<Vec<_>>());
    for (owner, iv) in &buffers {
        plan.arena_size = plan.arena_size.max(iv.offset + iv.size);
        match *owner {
            Owner::Value(v) => plan.storage[v] = Some(Storage::Arena(iv.offset)),
            Owner::Scratch(k) => plan.scratch[k] = Some(iv.offset),
            Owner::OperandTable(k) => plan.operand_tables[k] = Some(iv.offset),
        }
    }
    // The live bytes while node `t` runs: every buffer whose interval contains `t` (a
    // node's inputs, outputs and scratch are all live during it; in-place outputs and
    // views are in their group's single buffer).
    // One sweep over the nodes rather than a scan of every buffer at each of them.
    let mut starting = vec![0usize; nn + 1];
    let mut ending = vec![0usize; nn + 2];
    for (_, i) in &buffers {
        starting[i.start] += i.size;
        ending[i.end + 1] += i.size;
    }
    let mut live = 0usize;
    plan.lower_bound = (0..nn.max(1))
        .map(|t| {
            live = live + starting[t] - ending[t];
            live
        })
        .max()
        .unwrap_or(0);

    // Group members take their root's storage.
    plan.root = root;
    propagate_views(&mut plan);
    plan
}

/// What an arena buffer holds.
enum Owner {
    /// The storage of a value's group.
    Value(usize),
    /// A node's scratch.
    Scratch(usize),
    /// A node's operand table.
    OperandTable(usize),
}

/// Union of storage groups while planning.
struct Groups {
    root: Vec<usize>,
    members: Vec<Vec<usize>>,
    /// Per root: the last read of any member.
    last: Vec<usize>,
}

impl Groups {
    /// Adds the fresh value `v` to the group of `of`, `offset` bytes into it.
    fn join(&mut self, v: usize, of: usize, offset: usize, offsets: &mut [usize]) {
        let r = self.root[of];
        self.root[v] = r;
        offsets[v] = offset;
        self.members[r].push(v);
        self.last[r] = self.last[r].max(self.last[v]);
        self.members[v].clear();
    }

    /// Moves the whole group rooted at `r` into the group of `into`, `offset` bytes in.
    fn join_group(&mut self, r: usize, into: usize, offset: usize, offsets: &mut [usize]) {
        let dst = self.root[into];
        let moved = std::mem::take(&mut self.members[r]);
        for &m in &moved {
            self.root[m] = dst;
            offsets[m] += offset;
        }
        self.members[dst].extend(moved);
        self.last[dst] = self.last[dst].max(self.last[r]);
    }
}

/// The byte offset of a Gather or Slice output inside its input, when the output is
/// one contiguous run of it: a Gather of a single constant index (in range) along an
/// axis before which the input has only ones, or a Slice taking single elements of the
/// axes before one, a unit-step range of it, and every later axis whole. A slice of a
/// constant is left to constant folding.
fn contiguous_slice_offset(graph: &Graph, n: &crate::ir::Node) -> Option<usize> {
    let data = n.inputs.first().copied().flatten()?;
    if graph.constant(data).is_some() {
        return None;
    }
    let x = graph.ty(data);
    let strides = crate::codegen::kernel::strides_of(&x.shape);
    let elems = match &n.op {
        Op::Gather { axis } => {
            let axis = *axis;
            let indices = graph.constant(n.inputs.get(1).copied().flatten()?)?;
            let [i] = indices.to_i64_vec()[..] else {
                return None;
            };
            let dim = i64::try_from(*x.shape.get(axis)?).ok()?;
            let i = if i < 0 { i.checked_add(dim)? } else { i };
            if !(0..dim).contains(&i) || x.shape[..axis].iter().any(|&d| d != 1) {
                return None;
            }
            usize::try_from(i).ok()? * strides[axis]
        }
        Op::Slice {
            starts,
            steps,
            shape,
        } => {
            let rank = x.rank();
            if shape.len() != rank || starts.len() != rank || steps.len() != rank {
                return None;
            }
            let whole = |a: usize| starts[a] == 0 && steps[a] == 1 && shape[a] == x.shape[a];
            // The last axis not taken whole: before it only single elements, along
            // it a unit-step range.
            if let Some(c) = (0..rank).rev().find(|&a| !whole(a)) {
                if shape[..c].iter().any(|&d| d != 1) || (steps[c] != 1 && shape[c] > 1) {
                    return None;
                }
            }
            if shape.contains(&0) {
                return None;
            }
            (0..rank)
                .map(|a| starts[a].checked_mul(strides[a]))
                .try_fold(0usize, |acc, o| acc.checked_add(o?))?
        }
        _ => return None,
    };
    elems.checked_mul(x.dtype.size())
}

/// Elementwise ops whose kernel reads each input element at the output element's index
/// before writing it: an input of the output's shape may share its buffer.
fn is_elementwise(op: &Op) -> bool {
    matches!(
        op,
        Op::Unary(_) | Op::Binary(_) | Op::Where | Op::Cast { .. }
    )
}

fn propagate_views(plan: &mut MemoryPlan) {
    for v in 0..plan.root.len() {
        let r = plan.root[v];
        if r != v {
            plan.storage[v] = plan.storage[r];
        }
    }
}

/// Lays out the weights blob: every constant with `read[v]` set, 64-byte aligned. The
/// others get no storage. Called again after code generation with the constants the
/// generated code really reads: kernels that repack weights into their own layout
/// leave the original unread, and storing it twice would double the artifact.
pub fn place_constants(plan: &mut MemoryPlan, graph: &Graph, read: &[bool]) {
    plan.weights.clear();
    for (v, info) in graph.values.iter().enumerate() {
        let Some(t) = &info.constant else { continue };
        if !read[v] {
            plan.storage[v] = None;
            continue;
        }
        let off = align(plan.weights.len());
        plan.weights.resize(off, 0);
        plan.weights.extend(t.to_le_bytes());
        plan.storage[v] = Some(Storage::Const(off));
    }
    if !plan.root.is_empty() {
        propagate_views(plan);
    }
}

/// Greedy placement: buffers in some priority order, each at the lowest offset that does
/// not overlap a placed buffer whose lifetime intersects its own. Several orders are
/// tried (largest first; largest size × lifetime first; longest-lived first; earliest
/// first) and the smallest arena kept: each alone is near-optimal for most inference
/// graphs but not for all.
fn place(buffers: &mut [&mut Interval]) {
    type Key = fn(&Interval) -> (std::cmp::Reverse<usize>, usize);
    let orders: [Key; 4] = [
        |b| (std::cmp::Reverse(b.size), b.start),
        |b| (std::cmp::Reverse(b.size * (b.end - b.start + 1)), b.start),
        |b| (std::cmp::Reverse(b.end - b.start), b.start),
        |b| (std::cmp::Reverse(0), b.start),
    ];
    let mut best: Option<(usize, Vec<usize>)> = None;
    for (key, best_fit) in orders.iter().flat_map(|k| [(k, false), (k, true)]) {
        let mut order: Vec<usize> = (0..buffers.len()).collect();
        order.sort_by_key(|&i| (key(buffers[i]), std::cmp::Reverse(buffers[i].size)));
        let offsets = place_in_order(buffers, &order, best_fit);
        let size = (0..buffers.len())
            .map(|i| offsets[i] + buffers[i].size)
            .max()
            .unwrap_or(0);
        if best.as_ref().is_none_or(|(s, _)| size < *s) {
            best = Some((size, offsets));
        }
    }
    if let Some((_, offsets)) = best {
        for (b, o) in buffers.iter_mut().zip(offsets) {
            b.offset = o;
        }
    }
}

/// Offsets for `buffers` placed in `order`, each in the lowest gap between the placed
/// buffers it overlaps in time that fits it (`best_fit`: the smallest such gap; either
/// way past all of them when none fits).
fn place_in_order(buffers: &[&mut Interval], order: &[usize], best_fit: bool) -> Vec<usize> {
    let mut offsets = vec![0usize; buffers.len()];
    let mut placed: Vec<usize> = vec![];
    for &i in order {
        let mut conflicts: Vec<(usize, usize)> = placed
            .iter()
            .filter(|&&j| buffers[j].start <= buffers[i].end && buffers[i].start <= buffers[j].end)
            .map(|&j| (offsets[j], offsets[j] + buffers[j].size))
            .collect();
        conflicts.sort_unstable();
        let size = buffers[i].size;
        // (gap size, offset) of every gap that fits; the space past the last conflict
        // counts as an unbounded gap.
        let mut best: Option<(usize, usize)> = None;
        let mut free_from = 0;
        for (s, e) in conflicts {
            if s >= free_from + size {
                let gap = (s - free_from, free_from);
                if !best_fit {
                    best = Some(gap);
                    break;
                }
                best = Some(best.map_or(gap, |b| b.min(gap)));
            }
            free_from = free_from.max(e);
        }
        offsets[i] = best.map_or(free_from, |(_, o)| o);
        placed.push(i);
    }
    offsets
}
