//! Weights a later variant of a multi-versioned library copies, at its first run, out
//! of weights the library already stores.
//!
//! Each variant packs the model's weights for its own kernels: the same numbers in
//! panels of 48, 16 or 8 columns, tiles of 8, 6 or 5 rows, K blocks of different
//! lengths. Stored once per variant, resnet18's x86-64 library was three times the
//! size of a single-variant one. A later variant's blob is instead found, element by
//! element, in the blobs already stored (as bit patterns of 4-byte elements, so a copy
//! of any equal element is exact: nothing can be matched wrongly), and described as a
//! short program of strided copies that the variant runs once into zeroed writable
//! memory before its first inference (see `prepare.rs`). Packings are regular, so the
//! copies fold into loops: converting one panel layout into another takes a few words
//! per panel and K block.
//!
//! A program is little-endian `u32` words, in elements of 4 bytes: a header `(groups,
//! loops)`, then tables of groups ([`GROUP_WORDS`] words `(count, dst_step, first_loop,
//! loops)`), loops ([`LOOP_WORDS`] words `(dst, count, dst_step, first_run, runs)`)
//! and runs ([`RUN_WORDS`] words `(src, src_step, len, dst_rel, stride, group_step)`).
//! It means
//!
//! ```text
//! for each group: for g in 0..count: for each of its loops: for c in 0..count:
//!   for each of the loop's runs: for e in 0..len:
//!     dst[dst + g·group_dst_step + c·dst_step + dst_rel + e]
//!         = src[src + g·group_step + c·src_step + e·stride]
//! ```
//!
//! with the steps of sources signed 32-bit numbers. Elements it does not write stay
//! zero.

use std::collections::BTreeMap;

/// Words of a program's header: its numbers of groups and of loops.
pub const HEADER_WORDS: usize = 2;
/// Words of a group: repetitions, destination step per repetition, index of its first
/// loop, number of loops.
pub const GROUP_WORDS: usize = 4;
/// Words of a loop: destination, iterations, destination step, index of its first
/// run, number of runs.
pub const LOOP_WORDS: usize = 5;
/// Words of a run: source, source step per iteration (signed), length, destination
/// offset within the iteration, source stride between its elements, source step per
/// repetition of its group (signed).
pub const RUN_WORDS: usize = 6;

/// Blobs smaller than this are stored: their program would not save much.
const MIN_DERIVED_BYTES: usize = 4096;
/// A program may take at most this fraction (1/N) of the bytes it derives; else the
/// blob is stored (weights with no regular relation to those stored).
const MAX_PROGRAM_FRACTION: usize = 4;
/// Runs repeating with a period up to this many fold into one loop.
const MAX_PERIOD: usize = 8;
/// Candidates looked at for the start of a run whose element occurs several times.
const MAX_CANDIDATES: usize = 64;
/// Elements compared ahead to choose among them.
const LOOKAHEAD: usize = 8;

/// The elements of the stored blobs, indexed by bit pattern.
#[derive(Default)]
pub struct Sources {
    /// Every stored element, blob after blob.
    elements: Vec<u32>,
    /// `(first element, blob)` of each indexed blob, in `elements` order.
    blobs: Vec<(usize, usize)>,
    /// `bits << 32 | position`, sorted.
    index: Vec<u64>,
}

/// Copies of one source blob into a derived one (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Program {
    /// The source blob (as numbered by [`Sources::add`]'s caller).
    pub source: usize,
    /// The header, the group table, the loop table and the run table.
    pub words: Vec<u32>,
}

impl Program {
    pub fn bytes(&self) -> Vec<u8> {
        self.words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }
}

/// A run of consecutive elements copied from the concatenated sources.
#[derive(Clone, Copy, Debug)]
struct Run {
    dst: usize,
    src: usize,
    len: usize,
    /// Elements from one source element of the run to the next (a transposed layout
    /// copies every K-th element).
    stride: usize,
}

impl Sources {
    /// Adds stored blob `blob` (its bytes) as a source; blobs whose size is not a
    /// whole number of elements are left out. Call [`Self::seal`] before deriving.
    pub fn add(&mut self, blob: usize, bytes: &[u8]) {
        if !bytes.len().is_multiple_of(4) || bytes.is_empty() {
            return;
        }
        self.blobs.push((self.elements.len(), blob));
        self.elements.extend(elements(bytes));
    }

    /// Builds the index over what was added.
    pub fn seal(&mut self) {
        if self.elements.len() > u32::MAX as usize {
            // Positions would not fit the index: derive nothing.
            self.index.clear();
            return;
        }
        self.index = (self.elements.iter().enumerate())
            .filter(|(_, &e)| e != 0)
            .map(|(i, &e)| (u64::from(e) << 32) | i as u64)
            .collect();
        self.index.sort_unstable();
    }

    /// Programs (one per source blob) that rebuild `bytes` from the sources, when
    /// `bytes` is large enough to be worth it and the programs are small against it.
    pub fn derive(&self, bytes: &[u8]) -> Option<Vec<Program>> {
        if bytes.len() < MIN_DERIVED_BYTES
            || !bytes.len().is_multiple_of(4)
            || self.index.is_empty()
        {
            return None;
        }
        let dst: Vec<u32> = elements(bytes).collect();
        if dst.len() > u32::MAX as usize {
            return None;
        }
        let runs = self.match_runs(&dst)?;
        // Runs by source blob, each list in destination order.
        let mut by_blob: BTreeMap<usize, Vec<Run>> = BTreeMap::new();
        for r in runs {
            let (start, blob) = self.blob_of(r.src);
            let local = Run {
                src: r.src - start,
                ..r
            };
            by_blob.entry(blob).or_default().push(local);
        }
        let programs: Vec<Program> = (by_blob.into_iter())
            .map(|(blob, runs)| encode(self.blobs[blob].1, &group(fold(&runs))))
            .collect::<Option<_>>()?;
        let words: usize = programs.iter().map(|p| p.words.len()).sum();
        if words * 4 * MAX_PROGRAM_FRACTION > bytes.len() {
            return None;
        }
        // What the library will do, done here: a program that did not rebuild the
        // bytes exactly would be a wrong weight, so it is checked, not trusted.
        let mut rebuilt = vec![0u32; dst.len()];
        for p in &programs {
            let blob = self.blobs.iter().position(|b| b.1 == p.source)?;
            let start = self.blobs[blob].0;
            let end = self
                .blobs
                .get(blob + 1)
                .map_or(self.elements.len(), |b| b.0);
            apply(p, &self.elements[start..end], &mut rebuilt)?;
        }
        (rebuilt == dst).then_some(programs)
    }

    /// The index of `self.blobs` holding element `pos`, and its first element.
    fn blob_of(&self, pos: usize) -> (usize, usize) {
        let i = self.blobs.partition_point(|b| b.0 <= pos) - 1;
        (self.blobs[i].0, i)
    }

    fn blob_end(&self, pos: usize) -> usize {
        let i = self.blobs.partition_point(|b| b.0 <= pos);
        self.blobs.get(i).map_or(self.elements.len(), |b| b.0)
    }

    /// Covers every nonzero element of `dst` by runs of equal source elements; `None`
    /// where one occurs in no source.
    fn match_runs(&self, dst: &[u32]) -> Option<Vec<Run>> {
        let mut runs: Vec<Run> = vec![];
        let mut open = false;
        for (i, &bits) in dst.iter().enumerate() {
            if open && self.extend(&mut runs, bits, dst.get(i + 1).copied()) {
                continue;
            }
            open = false;
            if bits == 0 {
                continue;
            }
            let src = match self.predicted_start(&runs, bits) {
                Some(src) => src,
                None => self.best_start(bits, &dst[i..])?,
            };
            runs.push(Run {
                dst: i,
                src,
                len: 1,
                stride: 1,
            });
            open = true;
        }
        Some(runs)
    }

    /// Extends the last run by the element `bits` (followed by `then`): at its stride,
    /// or, for a run of one element, at the first stride that fits of 1, the previous
    /// run's, and the distance to a later copy of `bits` whose next element at the
    /// same stride is `then`.
    fn extend(&self, runs: &mut [Run], bits: u32, then: Option<u32>) -> bool {
        let n = runs.len();
        let r = runs[n - 1];
        let end = self.blob_end(r.src);
        let holds = |at: usize, want: u32| at < end && self.elements[at] == want;
        if r.len > 1 {
            if holds(r.src + r.len * r.stride, bits) {
                runs[n - 1].len += 1;
                return true;
            }
            return false;
        }
        if holds(r.src + 1, bits) {
            runs[n - 1].len = 2;
            return true;
        }
        // Where the element starts a run that continues the pattern, no stride is
        // guessed.
        if self.predicted_start(runs, bits).is_some() {
            return false;
        }
        let previous = (n >= 2).then(|| runs[n - 2].stride);
        let found = self.later_copy(bits, r.src, end, then);
        let stride = [previous, found]
            .into_iter()
            .flatten()
            .find(|&s| s > 1 && holds(r.src + s, bits));
        match stride {
            Some(s) => {
                runs[n - 1].stride = s;
                runs[n - 1].len = 2;
                true
            }
            None => false,
        }
    }

    /// The distance from `from` to a copy of `bits` before `end` whose element as far
    /// again along holds `then` (the first such among the first few copies).
    fn later_copy(&self, bits: u32, from: usize, end: usize, then: Option<u32>) -> Option<usize> {
        self.copies(bits)
            .filter(|&pos| pos > from && pos < end)
            .find(|&pos| {
                let next = 2 * pos - from;
                then.is_none_or(|t| next < end && self.elements[next] == t)
            })
            .map(|pos| pos - from)
    }

    /// Where the run after `runs` starts if it continues a pattern of the last few
    /// (run `n` at run `n - P`'s source plus the step from run `n - 2P`), when that
    /// position holds `bits`: an element that occurs several times is then taken from
    /// the place that keeps the copies one loop.
    fn predicted_start(&self, runs: &[Run], bits: u32) -> Option<usize> {
        let n = runs.len();
        (1..=MAX_PERIOD.min(n / 2)).find_map(|period| {
            let (last, before) = (runs[n - period].src, runs[n - 2 * period].src);
            let at = (2 * last).checked_sub(before)?;
            (self.elements.get(at) == Some(&bits)).then_some(at)
        })
    }

    /// The first [`MAX_CANDIDATES`] source positions holding `bits`.
    fn copies(&self, bits: u32) -> impl Iterator<Item = usize> + '_ {
        let key = u64::from(bits) << 32;
        let first = self.index.partition_point(|&e| e < key);
        self.index[first..]
            .iter()
            .take(MAX_CANDIDATES)
            .take_while(move |&&e| e >> 32 == u64::from(bits))
            .map(|&e| (e & u64::from(u32::MAX)) as usize)
    }

    /// A source position holding `bits` (= `ahead[0]`), the one whose next elements
    /// match `ahead` the furthest among the first few.
    fn best_start(&self, bits: u32, ahead: &[u32]) -> Option<usize> {
        let mut best: Option<(usize, usize)> = None;
        for pos in self.copies(bits) {
            let end = self.blob_end(pos).min(pos + LOOKAHEAD);
            let matched = (pos..end)
                .zip(ahead)
                .take_while(|(p, &a)| self.elements[*p] == a)
                .count();
            if best.is_none_or(|(_, m)| matched > m) {
                best = Some((pos, matched));
            }
            if matched == LOOKAHEAD.min(ahead.len()) {
                break;
            }
        }
        best.map(|(pos, _)| pos)
    }
}

fn elements(bytes: &[u8]) -> impl Iterator<Item = u32> + '_ {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
}

/// `count` iterations of copies: iteration `c` writes each run `(src, src_step, len,
/// dst_rel, stride)`, `len` elements `stride` apart from `src + c·src_step`, to
/// `dst + c·dst_step + dst_rel`.
#[derive(Clone)]
struct Loop {
    dst: usize,
    count: usize,
    dst_step: usize,
    runs: Vec<LoopRun>,
}

#[derive(Clone, Copy, PartialEq)]
struct LoopRun {
    src: usize,
    src_step: isize,
    len: usize,
    dst_rel: usize,
    stride: usize,
}

/// Folds runs (in destination order) into loops: at each run, the period (up to
/// [`MAX_PERIOD`]) whose repetitions, each the same lengths at constant steps, cover
/// the most runs per program word.
fn fold(runs: &[Run]) -> Vec<Loop> {
    let mut loops = vec![];
    let mut i = 0;
    while i < runs.len() {
        let (period, count) = best_period(runs.len() - i, RUN_WORDS, |period| {
            repetitions(&runs[i..], period, |a, b| {
                a.len == b.len && a.stride == b.stride
            })
        });
        let base = runs[i].dst;
        let dst_step = if count > 1 {
            runs[i + period].dst - base
        } else {
            0
        };
        loops.push(Loop {
            dst: base,
            count,
            dst_step,
            runs: (0..period)
                .map(|q| {
                    let r = runs[i + q];
                    LoopRun {
                        src: r.src,
                        src_step: if count > 1 {
                            runs[i + period + q].src as isize - r.src as isize
                        } else {
                            0
                        },
                        len: r.len,
                        dst_rel: r.dst - base,
                        stride: r.stride,
                    }
                })
                .collect(),
        });
        i += period * count;
    }
    loops
}

/// `count` repetitions of `loops`, repetition `g` moved by `g·dst_step` in the
/// destination and by `g·src_steps[l][r]` in the source of run `r` of loop `l`.
struct Group {
    count: usize,
    dst_step: usize,
    loops: Vec<Loop>,
    src_steps: Vec<Vec<isize>>,
}

/// Folds loops (in destination order) the same way into groups: a packing converted
/// tile by tile repeats the same few loops for every tile and K block.
fn group(loops: Vec<Loop>) -> Vec<Group> {
    let same_shape = |a: &Loop, b: &Loop| {
        a.count == b.count
            && a.dst_step == b.dst_step
            && a.runs.len() == b.runs.len()
            && (a.runs.iter().zip(&b.runs)).all(|(x, y)| {
                x.src_step == y.src_step
                    && x.len == y.len
                    && x.dst_rel == y.dst_rel
                    && x.stride == y.stride
            })
    };
    let mut groups = vec![];
    let mut i = 0;
    while i < loops.len() {
        let (period, count) = best_period(loops.len() - i, LOOP_WORDS + 2 * RUN_WORDS, |p| {
            repetitions(&loops[i..], p, same_shape)
        });
        let first = &loops[i..i + period];
        let (dst_step, src_steps) = if count > 1 {
            let next = &loops[i + period..i + 2 * period];
            let steps = (first.iter().zip(next))
                .map(|(a, b)| {
                    (a.runs.iter().zip(&b.runs))
                        .map(|(x, y)| y.src as isize - x.src as isize)
                        .collect()
                })
                .collect();
            (next[0].dst - first[0].dst, steps)
        } else {
            (0, first.iter().map(|l| vec![0; l.runs.len()]).collect())
        };
        groups.push(Group {
            count,
            dst_step,
            loops: first.to_vec(),
            src_steps,
        });
        i += period * count;
    }
    groups
}

/// Where something repeats: dst positions and src positions, for [`repetitions`].
trait Placed {
    fn dst(&self) -> usize;
    /// Source positions, compared as steps between repetitions.
    fn srcs(&self) -> Vec<usize>;
}

impl Placed for Run {
    fn dst(&self) -> usize {
        self.dst
    }
    fn srcs(&self) -> Vec<usize> {
        vec![self.src]
    }
}

impl Placed for Loop {
    fn dst(&self) -> usize {
        self.dst
    }
    fn srcs(&self) -> Vec<usize> {
        self.runs.iter().map(|r| r.src).collect()
    }
}

/// The period (and its repetitions) among `1..=MAX_PERIOD` that covers the most items
/// per program word, each item costing `item_words`; the shortest on a tie.
fn best_period(left: usize, item_words: usize, reps: impl Fn(usize) -> usize) -> (usize, usize) {
    let mut best = (1, reps(1));
    let score = |(period, count): (usize, usize)| {
        (period * count) as f64 / (LOOP_WORDS + item_words * period) as f64
    };
    for period in 2..=MAX_PERIOD.min(left) {
        let candidate = (period, reps(period));
        if candidate.1 > 1 && score(candidate) > score(best) {
            best = candidate;
        }
    }
    best
}

/// How many times the first `period` items repeat: alike (`same`) and at constant
/// destination and source steps.
fn repetitions<T: Placed>(items: &[T], period: usize, same: impl Fn(&T, &T) -> bool) -> usize {
    if items.len() < 2 * period {
        return 1;
    }
    let dst_step = items[period].dst() as isize - items[0].dst() as isize;
    let src_steps: Vec<Vec<isize>> = (0..period)
        .map(|q| {
            let (a, b) = (items[q].srcs(), items[period + q].srcs());
            (a.iter().zip(&b))
                .map(|(x, y)| *y as isize - *x as isize)
                .collect()
        })
        .collect();
    let mut count = 1;
    while items.len() >= (count + 1) * period
        && (0..period).all(|q| {
            let (base, item) = (&items[q], &items[count * period + q]);
            let c = count as isize;
            same(base, item)
                && item.dst() as isize == base.dst() as isize + c * dst_step
                && (base.srcs().iter().zip(item.srcs()).zip(&src_steps[q]))
                    .all(|((b, i), step)| i as isize == *b as isize + c * step)
        })
    {
        count += 1;
    }
    count
}

/// The program of `groups` over one source blob (offsets within it).
fn encode(source: usize, groups: &[Group]) -> Option<Program> {
    let word = |x: usize| u32::try_from(x).ok();
    let signed = |x: isize| i32::try_from(x).ok().map(|x| x as u32);
    let (mut group_table, mut loop_table, mut run_table) = (vec![], vec![], vec![]);
    let (mut n_loops, mut n_runs) = (0, 0);
    for g in groups {
        group_table.extend([
            word(g.count)?,
            word(g.dst_step)?,
            word(n_loops)?,
            word(g.loops.len())?,
        ]);
        for (l, steps) in g.loops.iter().zip(&g.src_steps) {
            loop_table.extend([
                word(l.dst)?,
                word(l.count)?,
                word(l.dst_step)?,
                word(n_runs)?,
                word(l.runs.len())?,
            ]);
            for (r, &group_step) in l.runs.iter().zip(steps) {
                run_table.extend([
                    word(r.src)?,
                    signed(r.src_step)?,
                    word(r.len)?,
                    word(r.dst_rel)?,
                    word(r.stride)?,
                    signed(group_step)?,
                ]);
            }
            n_runs += l.runs.len();
        }
        n_loops += g.loops.len();
    }
    let mut words = vec![word(groups.len())?, word(n_loops)?];
    words.extend(group_table);
    words.extend(loop_table);
    words.extend(run_table);
    Some(Program { source, words })
}

/// Runs `p` (see the module docs) from `src` into `dst`; `None` where it would reach
/// outside either.
pub fn apply(p: &Program, src: &[u32], dst: &mut [u32]) -> Option<()> {
    let (groups, loops) = (*p.words.first()? as usize, *p.words.get(1)? as usize);
    let body = p.words.get(HEADER_WORDS..)?;
    let (group_table, rest) = body.split_at_checked(groups * GROUP_WORDS)?;
    let (loop_table, run_table) = rest.split_at_checked(loops * LOOP_WORDS)?;
    let signed = |w: u32| i64::from(w as i32);
    for g in group_table.chunks_exact(GROUP_WORDS) {
        let (count2, dst_step2) = (i64::from(g[0]), i64::from(g[1]));
        let members = loop_table.get(g[2] as usize * LOOP_WORDS..)?;
        let members = members.get(..g[3] as usize * LOOP_WORDS)?;
        for g2 in 0..count2 {
            for l in members.chunks_exact(LOOP_WORDS) {
                let [d, count, dst_step] = [l[0], l[1], l[2]].map(i64::from);
                let runs = run_table.get(l[3] as usize * RUN_WORDS..)?;
                let runs = runs.get(..l[4] as usize * RUN_WORDS)?;
                for c in 0..count {
                    for r in runs.chunks_exact(RUN_WORDS) {
                        let s = i64::from(r[0]) + c * signed(r[1]) + g2 * signed(r[5]);
                        let t = d + g2 * dst_step2 + c * dst_step + i64::from(r[3]);
                        let (len, stride) = (r[2] as usize, r[4] as usize);
                        let (s, t) = (usize::try_from(s).ok()?, usize::try_from(t).ok()?);
                        let out = dst.get_mut(t..t + len)?;
                        if len > 0 {
                            src.get(s + (len - 1) * stride)?;
                        }
                        for (e, o) in out.iter_mut().enumerate() {
                            *o = src[s + e * stride];
                        }
                    }
                }
            }
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::kernels::gemm::{pack_a, pack_b, pack_b_blocks, Geometry, KernelKind};
    use crate::codegen::options::GemmOrder;

    fn geometry(mr: usize, nr: usize, kc: usize) -> Geometry {
        Geometry {
            kernel: KernelKind::Clif,
            mr,
            nr,
            lanes: 4,
            kc,
            order: GemmOrder::Auto,
            prefetch: false,
        }
    }

    /// `n` pseudo-random floats, at most `levels` distinct ones (0: all distinct).
    fn values(n: usize, levels: u32) -> Vec<f32> {
        let mut x = 0x2545_f491_u32;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                let v = if levels == 0 { x } else { x % levels };
                (v as f32 / u32::MAX as f32) - 0.25
            })
            .collect()
    }

    fn bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn sources(blobs: &[&[f32]]) -> Sources {
        let mut s = Sources::default();
        for (i, b) in blobs.iter().enumerate() {
            s.add(i, &bytes(b));
        }
        s.seal();
        s
    }

    /// Runs `programs` as the library would, into zeroed memory.
    fn rebuild(programs: &[Program], blobs: &[&[f32]], len: usize) -> Vec<f32> {
        let mut out = vec![0u32; len];
        for p in programs {
            let src: Vec<u32> = blobs[p.source].iter().map(|x| x.to_bits()).collect();
            apply(p, &src, &mut out).expect("in bounds");
        }
        out.into_iter().map(f32::from_bits).collect()
    }

    #[test]
    fn one_panel_layout_is_rebuilt_from_another_by_a_small_program() {
        let (k, n) = (300, 100);
        let w = values(k * n, 0);
        let at = |kk: usize, j: usize| w[kk * n + j];
        // AVX-512-like panels and tiles stored; AVX2-like and SSE-like ones derived.
        let b48 = pack_b_blocks(&geometry(8, 48, 128), k, n, at);
        let a8 = pack_a(&geometry(8, 48, 128), n, k, |i, kk| at(kk, i));
        let stored: [&[f32]; 2] = [&b48, &a8];
        let s = sources(&stored);
        for derived in [
            pack_b(&geometry(5, 8, usize::MAX), k, n, at),
            pack_b_blocks(&geometry(6, 16, 384), k, n, at),
            pack_a(&geometry(5, 8, usize::MAX), n, k, |i, kk| at(kk, i)),
            pack_a(&geometry(6, 16, 384), n, k, |i, kk| at(kk, i)),
        ] {
            let programs = s.derive(&bytes(&derived)).expect("derivable");
            let words: usize = programs.iter().map(|p| p.words.len()).sum();
            assert!(words * 4 * 25 < derived.len() * 4, "{words} words");
            let got = rebuild(&programs, &stored, derived.len());
            assert_eq!(bytes(&got), bytes(&derived));
        }
    }

    #[test]
    fn repeated_values_are_copied_exactly_whatever_copy_is_chosen() {
        let (k, n) = (64, 96);
        let w = values(k * n, 7);
        let at = |kk: usize, j: usize| w[kk * n + j];
        let b48 = pack_b_blocks(&geometry(8, 48, 16), k, n, at);
        let stored: [&[f32]; 1] = [&b48];
        let s = sources(&stored);
        let derived = pack_b(&geometry(5, 8, usize::MAX), k, n, at);
        // Few distinct values make poor loops; whatever is derived must be exact.
        if let Some(programs) = s.derive(&bytes(&derived)) {
            let got = rebuild(&programs, &stored, derived.len());
            assert_eq!(bytes(&got), bytes(&derived));
        }
    }

    #[test]
    fn weights_found_in_no_stored_blob_are_stored() {
        let stored = values(4096, 0);
        let s = sources(&[&stored]);
        let other: Vec<f32> = values(8192, 0).into_iter().map(|x| x + 1.0).collect();
        assert!(s.derive(&bytes(&other)).is_none());
        // Small blobs are not worth a program.
        assert!(s.derive(&bytes(&stored[..64])).is_none());
    }

    #[test]
    fn a_program_steps_its_sources_backwards_when_the_step_is_negative() {
        // dst[c·2 ..][..2] = src[6 - 2c ..][..2] for c in 0..3.
        let p = Program {
            source: 0,
            words: vec![
                1,
                1,
                1,
                0,
                0,
                1,
                0,
                3,
                2,
                0,
                1,
                6,
                (-2i32) as u32,
                2,
                0,
                1,
                0,
            ],
        };
        let src: Vec<u32> = (1..=8).collect();
        let mut dst = vec![0; 6];
        apply(&p, &src, &mut dst).unwrap();
        assert_eq!(dst, [7, 8, 5, 6, 3, 4]);
        // Out of bounds is refused, not clipped.
        let mut short = vec![0; 5];
        assert!(apply(&p, &src, &mut short).is_none());
    }
}
