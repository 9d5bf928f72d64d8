//! Static memory planning: where every tensor lives while `infer` runs.
//!
//! Graph inputs and outputs live in the caller's buffers, constants in one read-only
//! blob, everything else in one arena whose offsets are reused by liveness. Reshape-like
//! nodes are views: their output shares the input's storage.

use crate::ir::{Graph, ValueId};
use crate::ops::{Op, UnaryOp};

/// Alignment of every arena and weight buffer: a cache line, enough for any vector load.
pub const ALIGN: usize = 64;

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
    /// Every constant that code reads, 64-byte aligned.
    pub weights: Vec<u8>,
    pub arena_size: usize,
    /// The largest total of simultaneously live arena bytes: no plan can do better.
    pub lower_bound: usize,
    /// Graph outputs that are not written by a node (constants, inputs, duplicates):
    /// copied into `outputs[i]` at the end of `infer`.
    pub final_copies: Vec<(ValueId, usize)>,
    /// Nodes whose output is a view of their input: no code is emitted for them.
    pub is_view: Vec<bool>,
    /// For each value, the value that owns its storage (itself unless it is a view).
    pub root: Vec<usize>,
}

fn align(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

/// True for nodes that only reinterpret their input's shape.
fn is_view_op(op: &Op) -> bool {
    matches!(op, Op::Reshape { .. } | Op::Unary(UnaryOp::Identity))
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
        scratch: vec![None; nn],
        is_view: vec![false; nn],
        ..Default::default()
    };

    // Caller-owned storage first.
    for (i, v) in graph.inputs.iter().enumerate() {
        plan.storage[v.0] = Some(Storage::Input(i));
    }
    let mut produced = vec![false; nv];
    for n in &graph.nodes {
        for o in &n.outputs {
            produced[o.0] = true;
        }
    }
    for (i, v) in graph.outputs.iter().enumerate() {
        if produced[v.0] && plan.storage[v.0].is_none() {
            plan.storage[v.0] = Some(Storage::Output(i));
        } else {
            plan.final_copies.push((*v, i));
        }
    }

    // Views share their input's root; `root[v]` is the value that owns the storage.
    let mut root: Vec<usize> = (0..nv).collect();
    for (k, n) in graph.nodes.iter().enumerate() {
        let (Some(Some(inp)), Some(out)) = (n.inputs.first(), n.outputs.first()) else {
            continue;
        };
        if is_view_op(&n.op) && plan.storage[out.0].is_none() {
            root[out.0] = root[inp.0];
            plan.is_view[k] = true;
        }
    }

    // Liveness of each root over node indices.
    let mut first = vec![usize::MAX; nv];
    let mut last = vec![0usize; nv];
    let mut used = vec![false; nv];
    for (k, n) in graph.nodes.iter().enumerate() {
        for o in &n.outputs {
            let r = root[o.0];
            first[r] = first[r].min(k);
            last[r] = last[r].max(k);
        }
        for i in n.inputs.iter().flatten() {
            let r = root[i.0];
            used[r] = true;
            last[r] = last[r].max(k);
        }
    }
    for (v, _) in &plan.final_copies {
        used[root[v.0]] = true;
        last[root[v.0]] = nn;
    }

    place_constants(&mut plan, graph, &used);

    // Arena buffers: every produced root without caller storage, plus node scratch.
    let mut buffers: Vec<(Option<usize>, Option<usize>, Interval)> = vec![];
    for v in 0..nv {
        if root[v] == v && produced[v] && plan.storage[v].is_none() && first[v] != usize::MAX {
            let size = align(graph.values[v].ty.byte_size().max(1));
            buffers.push((
                Some(v),
                None,
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
            buffers.push((
                None,
                Some(k),
                Interval {
                    size: align(bytes),
                    start: k,
                    end: k,
                    offset: 0,
                },
            ));
        }
    }
    place(&mut buffers.iter_mut().map(|(_, _, i)| i).collect::<Vec<_>>());
    for (v, k, iv) in &buffers {
        plan.arena_size = plan.arena_size.max(iv.offset + iv.size);
        if let Some(v) = v {
            plan.storage[*v] = Some(Storage::Arena(iv.offset));
        }
        if let Some(k) = k {
            plan.scratch[*k] = Some(iv.offset);
        }
    }
    plan.lower_bound = (0..nn.max(1))
        .map(|t| {
            buffers
                .iter()
                .filter(|(_, _, i)| i.start <= t && t <= i.end)
                .map(|(_, _, i)| i.size)
                .sum()
        })
        .max()
        .unwrap_or(0);

    // Views take their root's storage.
    plan.root = root;
    propagate_views(&mut plan);
    plan
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

/// Greedy-by-size placement: largest buffers first, each at the lowest offset that does
/// not overlap a placed buffer whose lifetime intersects its own. Near-optimal in
/// practice for inference graphs (chains with short skip connections).
fn place(buffers: &mut [&mut Interval]) {
    let mut order: Vec<usize> = (0..buffers.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(buffers[i].size), buffers[i].start));
    let mut placed: Vec<usize> = vec![];
    for &i in &order {
        let mut conflicts: Vec<(usize, usize)> = placed
            .iter()
            .filter(|&&j| buffers[j].start <= buffers[i].end && buffers[i].start <= buffers[j].end)
            .map(|&j| (buffers[j].offset, buffers[j].offset + buffers[j].size))
            .collect();
        conflicts.sort_unstable();
        let mut offset = 0;
        for (s, e) in conflicts {
            if offset + buffers[i].size <= s {
                break;
            }
            offset = offset.max(e);
        }
        buffers[i].offset = offset;
        placed.push(i);
    }
}
