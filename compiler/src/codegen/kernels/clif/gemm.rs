//! The body of a GEMM kernel function (see [`super::gemm`]), hand-scheduled for
//! opt_level "none": what is written here is the instruction order the CPU sees.
//!
//! C is covered by register tiles of `MR × NR`: `MR · NR/4` f32x4 accumulators live in
//! registers for the whole K loop. A K step loads `NR/4` vectors of one row of B (B is
//! read along N: its rows are contiguous, or packed) and, for each accumulator, one
//! broadcast element of A (A may have any strides, so a transposed A costs nothing).
//! Each broadcast is loaded again per accumulator instead of once per row: it then
//! folds into `vbroadcastss xmm, [mem]` and, having a single use, may be overwritten by
//! x86's `vfmadd213ps` (whose destination is a multiplicand), so no register copies are
//! needed. The K loop is unrolled [`K_UNROLL`] times to amortize the loop's own
//! instructions and the accumulator moves on its back edge.
//!
//! Long K is split into blocks ([`K_BLOCK`]); the epilogue of the first block scales by
//! alpha, adds the addends and stores, later blocks add their scaled sums to C; lane by
//! lane where a tile sticks out of C or C's columns are strided. The fused activation
//! ([`GemmSpec::activation`]) is applied by the last block, after alpha and the addends,
//! to the accumulator vectors just before they are stored.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, BlockArg, InstBuilder, Type, Value};
use cranelift_frontend::FunctionBuilder;

use crate::codegen::kernel::{self, flags};
use crate::codegen::kernels::gemm::{mul_add, ALayout, BLayout, GemmSpec, LANES, MR, NR};
use crate::codegen::unary::activation;

/// K steps per loop iteration: 8 beat 4 by ~6% and 1 or 2 by 10–20% on the 256³ GEMM.
const K_UNROLL: usize = 8;
/// K is processed in blocks of about this many steps when it is longer, so the parts of
/// A and B the tiles sweep over stay in L2 and L1 (8 KB of a B panel) instead of A
/// streaming from L3 once per column panel; C takes one extra read and write per block.
/// On this Xeon (2 MB L2) blocking changed nothing measurable (1024³ GEMM, ResNet 3×3
/// convs, interleaved runs); it bounds the working set for cores with smaller caches.
const K_BLOCK: usize = 256;
const F32: usize = 4;

/// Columns a run of identical tiles covers.
#[derive(Clone, Copy, Debug)]
enum ColTile {
    /// `vecs` f32x4 per row; `valid` of its columns exist in C.
    Vector { vecs: usize, valid: usize },
    /// One column, scalar (the last < 4 columns of a B we cannot over-read).
    Scalar,
}

/// `count` tiles side by side starting at column `start`, each `width` columns apart.
#[derive(Clone, Copy, Debug)]
struct ColRun {
    start: usize,
    count: usize,
    width: usize,
    tile: ColTile,
}

/// How N is covered: full NR panels, then a partial panel (packed B is zero-padded, so
/// it may be over-read) or a one-vector panel and scalar columns (unpacked B may not).
fn column_runs(n: usize, b: BLayout) -> Vec<ColRun> {
    let mut runs = vec![];
    let full = n / NR;
    if full > 0 {
        runs.push(ColRun {
            start: 0,
            count: full,
            width: NR,
            tile: ColTile::Vector {
                vecs: NR / LANES,
                valid: NR,
            },
        });
    }
    let mut start = full * NR;
    let rem = n - start;
    if rem == 0 {
        return runs;
    }
    if b == BLayout::Packed {
        let width = crate::codegen::kernels::gemm::Geometry::CLIF.tail_panel_width(rem);
        runs.push(ColRun {
            start,
            count: 1,
            width,
            tile: ColTile::Vector {
                vecs: width / LANES,
                valid: rem,
            },
        });
        return runs;
    }
    if rem >= LANES {
        runs.push(ColRun {
            start,
            count: 1,
            width: LANES,
            tile: ColTile::Vector {
                vecs: 1,
                valid: LANES,
            },
        });
        start += LANES;
    }
    if n > start {
        runs.push(ColRun {
            start,
            count: n - start,
            width: 1,
            tile: ColTile::Scalar,
        });
    }
    runs
}

/// `for t in 0..count { body(start + t·step) }` with the index as a value.
fn strided_loop(
    b: &mut FunctionBuilder,
    start: usize,
    count: usize,
    step: usize,
    mut body: impl FnMut(&mut FunctionBuilder, Value),
) {
    kernel::counted_loop(
        b,
        start as i64,
        (start + count * step) as i64,
        step as i64,
        |b, i| body(b, i),
    );
}

/// `base + index·scale` bytes.
fn offset_ptr(b: &mut FunctionBuilder, base: Value, index: Value, scale: usize) -> Value {
    if scale == 0 {
        return base;
    }
    kernel::elem_addr(b, base, index, scale)
}

/// The kernel's arguments.
struct Ptrs<'a> {
    a: Value,
    b: Value,
    c: Value,
    addends: &'a [Value],
}

struct Emitter<'a> {
    spec: &'a GemmSpec,
    fma: bool,
    ptrs: Ptrs<'a>,
}

/// A row tile's view of A: row `r` of K step `k` is at `base + k·k_bytes + r·row_bytes`.
struct ATile {
    base: Value,
    row_bytes: usize,
    k_bytes: usize,
}

/// A column tile's view of B: row `k` starts at `base + k·k_bytes`; column `c` of it is
/// `c·col_bytes` further.
struct BTile {
    base: Value,
    k_bytes: usize,
    col_bytes: usize,
}

/// A range of K steps the tiles accumulate over before writing C.
#[derive(Clone, Copy, Debug)]
struct KBlock {
    start: usize,
    len: usize,
    /// The first block writes `alpha·AB + addends`; later ones add `alpha·AB` to C.
    first: bool,
    /// The activation is applied by the last block only.
    last: bool,
}

/// K split into blocks of similar length, each a multiple of [`K_UNROLL`] but the last.
fn k_blocks(k: usize) -> Vec<KBlock> {
    if k <= K_BLOCK * 3 / 2 {
        return vec![KBlock {
            start: 0,
            len: k,
            first: true,
            last: true,
        }];
    }
    let count = k.div_ceil(K_BLOCK);
    let len = k.div_ceil(count).div_ceil(K_UNROLL) * K_UNROLL;
    (0..k)
        .step_by(len)
        .map(|start| KBlock {
            start,
            len: len.min(k - start),
            first: start == 0,
            last: start + len >= k,
        })
        .collect()
}

/// Emits the whole GEMM; `params` are the kernel's arguments (A, B, C, addends...).
pub(crate) fn emit(
    b: &mut FunctionBuilder,
    fma: bool,
    spec: &GemmSpec,
    params: &[Value],
) -> Result<(), String> {
    let counted = usize::from(spec.rows_at_run_time);
    if params.len() != 3 + spec.addends.len() + counted {
        return Err("GEMM kernel called with the wrong number of arguments".into());
    }
    if spec.m == 0 || spec.n == 0 {
        return Ok(());
    }
    if matches!(spec.b, BLayout::Taps { .. } | BLayout::PackedBlocks) {
        return Err(format!("B layout {:?} needs an x86 kernel", spec.b));
    }
    if largest_offset(spec) > i32::MAX as usize {
        return Err(format!(
            "GEMM operands too large for 32-bit address offsets: {spec:?}"
        ));
    }
    let e = Emitter {
        spec,
        fma,
        ptrs: Ptrs {
            a: params[0],
            b: params[1],
            c: params[2],
            addends: &params[3..3 + spec.addends.len()],
        },
    };
    // The row count, read at run time: never more rows than planned for.
    let rows = spec.rows_at_run_time.then(|| {
        let planned = kernel::iconst(b, spec.m as i64);
        b.ins().umin(params[params.len() - 1], planned)
    });
    // K blocks outermost; then column panels, row tiles inside: one panel of B stays in
    // L1 while every row tile of A's block streams past it from L2.
    for kb in k_blocks(spec.k) {
        for run in column_runs(spec.n, spec.b) {
            strided_loop(b, run.start, run.count, run.width, |b, j0| {
                if let Some(rows) = rows {
                    e.counted_row_tiles(b, rows, j0, run, kb);
                    return;
                }
                let full_rows = spec.m / MR * MR;
                strided_loop(b, 0, spec.m / MR, MR, |b, i0| {
                    e.tile(b, i0, MR, j0, run, kb)
                });
                if full_rows < spec.m {
                    let i0 = kernel::iconst(b, full_rows as i64);
                    e.tile(b, i0, spec.m - full_rows, j0, run, kb);
                }
            });
        }
    }
    Ok(())
}

/// The largest immediate byte offset the kernel emits (loads and stores address a tile
/// from its base with constant offsets, which must fit in 32 bits).
fn largest_offset(spec: &GemmSpec) -> usize {
    let (a_row, a_k) = match spec.a {
        ALayout::Strided {
            row_stride,
            col_stride,
        } => (row_stride, col_stride),
        ALayout::Packed => (1, MR),
    };
    let (b_k, b_col) = match spec.b {
        BLayout::Packed => (NR, 1),
        BLayout::Rows { row_stride } => (row_stride, 1),
        BLayout::Gather { k_stride, n_stride } => (k_stride, n_stride),
        BLayout::Taps { .. } | BLayout::PackedBlocks => unreachable!("rejected by emit"),
    };
    let block = |rows: usize, cols: usize| (MR * rows + NR * cols) * F32;
    let addends = spec
        .addends
        .iter()
        .map(|t| block(t.row_stride, t.col_stride));
    [
        block(a_row, 0) + K_UNROLL * a_k * F32,
        block(0, b_col) + K_UNROLL * b_k * F32,
        block(spec.ldc, spec.c_col_stride),
    ]
    .into_iter()
    .chain(addends)
    .max()
    .unwrap_or(0)
}

impl Emitter<'_> {
    fn tile(
        &self,
        b: &mut FunctionBuilder,
        i0: Value,
        rows: usize,
        j0: Value,
        run: ColRun,
        kb: KBlock,
    ) {
        match run.tile {
            ColTile::Vector { vecs, valid } => self.vector_tile(b, i0, rows, j0, vecs, valid, kb),
            ColTile::Scalar => self.scalar_tile(b, i0, rows, j0, kb),
        }
    }

    /// A's rows `i0..i0+rows` from K step `k0` on.
    /// The row tiles of one column panel for `rows` rows counted at run time: whole MR
    /// tiles, then the 1 to MR−1 rows left as tiles of 4, 2 and 1 rows.
    fn counted_row_tiles(
        &self,
        b: &mut FunctionBuilder,
        rows: Value,
        j0: Value,
        run: ColRun,
        kb: KBlock,
    ) {
        let tiles = b.ins().udiv_imm_u(rows, MR as i64);
        let zero = kernel::iconst(b, 0);
        kernel::range_loop(b, zero, tiles, |b, t| {
            let i0 = b.ins().imul_imm_s(t, MR as i64);
            self.tile(b, i0, MR, j0, run, kb);
        });
        let mut i0 = b.ins().imul_imm_s(tiles, MR as i64);
        let left = b.ins().isub(rows, i0);
        for part in [4usize, 2, 1].into_iter().filter(|&r| r < MR) {
            let (then, next) = (b.create_block(), b.create_block());
            let bit = b.ins().band_imm_u(left, part as i64);
            b.ins().brif(bit, then, &[], next, &[]);
            b.seal_block(then);
            b.switch_to_block(then);
            self.tile(b, i0, part, j0, run, kb);
            b.ins().jump(next, &[]);
            b.seal_block(next);
            b.switch_to_block(next);
            i0 = b.ins().iadd(i0, bit);
        }
    }

    fn a_tile(&self, b: &mut FunctionBuilder, i0: Value, rows: usize, k0: usize) -> ATile {
        let tile = self.a_tile_at_k0(b, i0, rows);
        ATile {
            base: b.ins().iadd_imm_s(tile.base, (k0 * tile.k_bytes) as i64),
            ..tile
        }
    }

    fn a_tile_at_k0(&self, b: &mut FunctionBuilder, i0: Value, rows: usize) -> ATile {
        match self.spec.a {
            ALayout::Strided {
                row_stride,
                col_stride,
            } => ATile {
                base: offset_ptr(b, self.ptrs.a, i0, row_stride * F32),
                row_bytes: row_stride * F32,
                k_bytes: col_stride * F32,
            },
            // Tile t starts at element t·MR·K = i0·K and holds `rows` floats per K step.
            ALayout::Packed => ATile {
                base: offset_ptr(b, self.ptrs.a, i0, self.spec.k * F32),
                row_bytes: F32,
                k_bytes: rows * F32,
            },
        }
    }

    /// B's columns from `j0` (`vecs` vectors wide) from K step `k0` on.
    fn b_tile(&self, b: &mut FunctionBuilder, j0: Value, vecs: usize, k0: usize) -> BTile {
        let tile = self.b_tile_at_k0(b, j0, vecs);
        BTile {
            base: b.ins().iadd_imm_s(tile.base, (k0 * tile.k_bytes) as i64),
            ..tile
        }
    }

    fn b_tile_at_k0(&self, b: &mut FunctionBuilder, j0: Value, vecs: usize) -> BTile {
        match self.spec.b {
            BLayout::Packed => BTile {
                base: offset_ptr(b, self.ptrs.b, j0, self.spec.k * F32),
                k_bytes: vecs * LANES * F32,
                col_bytes: F32,
            },
            BLayout::Rows { row_stride } => BTile {
                base: offset_ptr(b, self.ptrs.b, j0, F32),
                k_bytes: row_stride * F32,
                col_bytes: F32,
            },
            BLayout::Taps { .. } | BLayout::PackedBlocks => unreachable!("rejected by emit"),
            BLayout::Gather { k_stride, n_stride } => BTile {
                base: offset_ptr(b, self.ptrs.b, j0, n_stride * F32),
                k_bytes: k_stride * F32,
                col_bytes: n_stride * F32,
            },
        }
    }

    /// Loads vector `v` of the B row at `row + off`: one load, or four gathered lanes.
    fn load_b_vector(
        &self,
        b: &mut FunctionBuilder,
        bt: &BTile,
        row: Value,
        off: usize,
        v: usize,
    ) -> Value {
        if bt.col_bytes == F32 {
            return b
                .ins()
                .load(types::F32X4, flags(), row, (off + v * LANES * F32) as i32);
        }
        let lane = |b: &mut FunctionBuilder, l: usize| {
            b.ins().load(
                types::F32,
                flags(),
                row,
                (off + (v * LANES + l) * bt.col_bytes) as i32,
            )
        };
        let first = lane(b, 0);
        let mut vec = b.ins().scalar_to_vector(types::F32X4, first);
        for l in 1..LANES {
            let x = lane(b, l);
            vec = b.ins().insertlane(vec, x, l as u8);
        }
        vec
    }

    /// An `rows × vecs·4` tile of C at `(i0, j0)`, of which `valid` columns exist, over
    /// the K steps of `kb`.
    #[allow(clippy::too_many_arguments)]
    fn vector_tile(
        &self,
        b: &mut FunctionBuilder,
        i0: Value,
        rows: usize,
        j0: Value,
        vecs: usize,
        valid: usize,
        kb: KBlock,
    ) {
        let at = self.a_tile(b, i0, rows, kb.start);
        let bt = self.b_tile(b, j0, vecs, kb.start);
        let zero = b.ins().f32const(0.0);
        let zero = b.ins().splat(types::F32X4, zero);
        let accs = k_loop(
            b,
            kb.len,
            rows * vecs,
            types::F32X4,
            zero,
            [(at.base, at.k_bytes), (bt.base, bt.k_bytes)],
            |b, [(a_row, a_off), (b_row, b_off)], acc| {
                let bv: Vec<Value> = (0..vecs)
                    .map(|v| self.load_b_vector(b, &bt, b_row, b_off, v))
                    .collect();
                for r in 0..rows {
                    for (v, &bv) in bv.iter().enumerate() {
                        let a = b.ins().load(
                            types::F32,
                            flags(),
                            a_row,
                            (a_off + r * at.row_bytes) as i32,
                        );
                        let a = b.ins().splat(types::F32X4, a);
                        acc[r * vecs + v] = mul_add(b, self.fma, a, bv, acc[r * vecs + v]);
                    }
                }
            },
        );
        let out = Epilogue::new(b, self, i0, j0);
        for r in 0..rows {
            for v in 0..vecs {
                let lanes = valid.saturating_sub(v * LANES).min(LANES);
                out.store_vector(b, self, accs[r * vecs + v], r, v * LANES, lanes, kb);
            }
        }
    }

    /// A `rows × 1` tile of C at `(i0, j0)`, in scalar registers.
    fn scalar_tile(&self, b: &mut FunctionBuilder, i0: Value, rows: usize, j0: Value, kb: KBlock) {
        let at = self.a_tile(b, i0, rows, kb.start);
        let bt = self.b_tile(b, j0, 1, kb.start);
        let zero = b.ins().f32const(0.0);
        let accs = k_loop(
            b,
            kb.len,
            rows,
            types::F32,
            zero,
            [(at.base, at.k_bytes), (bt.base, bt.k_bytes)],
            |b, [(a_row, a_off), (b_row, b_off)], acc| {
                let bv = b.ins().load(types::F32, flags(), b_row, b_off as i32);
                for (r, acc) in acc.iter_mut().enumerate() {
                    let a = b.ins().load(
                        types::F32,
                        flags(),
                        a_row,
                        (a_off + r * at.row_bytes) as i32,
                    );
                    *acc = mul_add(b, self.fma, a, bv, *acc);
                }
            },
        );
        let out = Epilogue::new(b, self, i0, j0);
        for (r, &acc) in accs.iter().enumerate() {
            out.store_scalar(b, self, acc, r, 0, kb);
        }
    }
}

/// Runs `step` for k in 0..K with `count` accumulators of type `ty` (starting at `init`)
/// carried through the loop, and returns their final values. `streams` are (pointer,
/// bytes per K step) pairs; `step` receives each as (pointer, byte offset of this step)
/// so its loads use immediate offsets. The loop advances the pointers once per
/// [`K_UNROLL`] steps; leftover steps follow it.
///
/// The loop is top-tested on purpose: the accumulators leave it as the header's block
/// parameters, so each FMA result has exactly one use (the back edge). A value with two
/// uses (back edge and exit) makes Cranelift assume the whole FMA chain feeding it might
/// be duplicated, and it then refuses to fold the broadcasts' loads into `vbroadcastss`.
#[allow(clippy::type_complexity)]
fn k_loop<const S: usize>(
    b: &mut FunctionBuilder,
    k: usize,
    count: usize,
    ty: Type,
    init: Value,
    streams: [(Value, usize); S],
    mut step: impl FnMut(&mut FunctionBuilder, [(Value, usize); S], &mut [Value]),
) -> Vec<Value> {
    // Runs `steps` K steps from the given accumulators and pointers; returns the new ones.
    let mut run_steps = |b: &mut FunctionBuilder,
                         steps: usize,
                         mut acc: Vec<Value>,
                         bases: &[Value]|
     -> (Vec<Value>, Vec<Value>) {
        for u in 0..steps {
            let args: [(Value, usize); S] = std::array::from_fn(|s| (bases[s], u * streams[s].1));
            step(b, args, &mut acc);
        }
        let next = bases
            .iter()
            .zip(&streams)
            .map(|(&base, &(_, stride))| b.ins().iadd_imm_s(base, (steps * stride) as i64))
            .collect();
        (acc, next)
    };
    let mut acc = vec![init; count];
    let mut bases: Vec<Value> = streams.iter().map(|&(p, _)| p).collect();
    let iterations = k / K_UNROLL;
    if iterations > 0 {
        let header = b.create_block();
        let body = b.create_block();
        let exit = b.create_block();
        let counter = b.append_block_param(header, types::I64);
        let acc_params: Vec<Value> = (0..count)
            .map(|_| b.append_block_param(header, ty))
            .collect();
        let base_params: Vec<Value> = (0..S)
            .map(|_| b.append_block_param(header, kernel::PTR))
            .collect();
        let zero = kernel::iconst(b, 0);
        let entry_args: Vec<BlockArg> = std::iter::once(zero)
            .chain(acc.iter().copied())
            .chain(bases.iter().copied())
            .map(BlockArg::Value)
            .collect();
        b.ins().jump(header, &entry_args);
        b.switch_to_block(header);
        let more = b
            .ins()
            .icmp_imm_s(IntCC::SignedLessThan, counter, iterations as i64);
        b.ins().brif(more, body, &[], exit, &[]);
        b.switch_to_block(body);
        b.seal_block(body);
        let (acc_next, bases_next) = run_steps(b, K_UNROLL, acc_params.clone(), &base_params);
        let counter_next = b.ins().iadd_imm_s(counter, 1);
        let back_args: Vec<BlockArg> = std::iter::once(counter_next)
            .chain(acc_next)
            .chain(bases_next)
            .map(BlockArg::Value)
            .collect();
        b.ins().jump(header, &back_args);
        b.seal_block(header);
        b.switch_to_block(exit);
        b.seal_block(exit);
        acc = acc_params;
        bases = base_params;
    }
    if !k.is_multiple_of(K_UNROLL) {
        acc = run_steps(b, k % K_UNROLL, acc, &bases).0;
    }
    acc
}

/// Addresses of one tile's outputs and addends: C row `r`, column `c` of the tile is at
/// `c_base + (r·ldc + c·c_col_stride)·4`; addend `t`'s at `bases[t] + (r·rs + c·cs)·4`.
struct Epilogue {
    c_base: Value,
    addend_bases: Vec<Value>,
}

impl Epilogue {
    fn new(b: &mut FunctionBuilder, e: &Emitter, i0: Value, j0: Value) -> Epilogue {
        let row = offset_ptr(b, e.ptrs.c, i0, e.spec.ldc * F32);
        let c_base = offset_ptr(b, row, j0, e.spec.c_col_stride * F32);
        let addend_bases = e
            .spec
            .addends
            .iter()
            .zip(e.ptrs.addends)
            .map(|(t, &ptr)| {
                let row = offset_ptr(b, ptr, i0, t.row_stride * F32);
                offset_ptr(b, row, j0, t.col_stride * F32)
            })
            .collect();
        Epilogue {
            c_base,
            addend_bases,
        }
    }

    /// Finishes and stores `lanes` (≤ 4) columns `col..` of tile row `r` held in `acc`:
    /// `alpha·acc + addends` in the first K block, `C + alpha·acc` in later ones.
    #[allow(clippy::too_many_arguments)]
    fn store_vector(
        &self,
        b: &mut FunctionBuilder,
        e: &Emitter,
        acc: Value,
        r: usize,
        col: usize,
        lanes: usize,
        kb: KBlock,
    ) {
        let first = kb.first;
        let spec = e.spec;
        let contiguous = spec.c_col_stride == 1 && spec.addends.iter().all(|t| t.col_stride <= 1);
        if lanes < LANES || !contiguous {
            for l in 0..lanes {
                let x = b.ins().extractlane(acc, l as u8);
                self.store_scalar(b, e, x, r, col + l, kb);
            }
            return;
        }
        let splat = |b: &mut FunctionBuilder, x: f32| {
            let s = b.ins().f32const(x);
            b.ins().splat(types::F32X4, s)
        };
        let mut y = acc;
        if spec.alpha != 1.0 {
            let s = splat(b, spec.alpha);
            y = b.ins().fmul(y, s);
        }
        let c_off = spec.c_offset(r, col);
        if !first {
            let partial = b.ins().load(types::F32X4, flags(), self.c_base, c_off);
            y = b.ins().fadd(y, partial);
        }
        for (t, &base) in spec
            .addends
            .iter()
            .zip(&self.addend_bases)
            .filter(|_| first)
        {
            let off = ((r * t.row_stride + col * t.col_stride) * F32) as i32;
            let mut v = if t.col_stride == 1 {
                b.ins().load(types::F32X4, flags(), base, off)
            } else {
                let s = b.ins().load(types::F32, flags(), base, off);
                b.ins().splat(types::F32X4, s)
            };
            if t.scale != 1.0 {
                let s = splat(b, t.scale);
                v = b.ins().fmul(v, s);
            }
            y = b.ins().fadd(y, v);
        }
        if kb.last {
            y = activation(b, spec.activation, y).expect("activations lower on f32");
        }
        b.ins().store(flags(), y, self.c_base, c_off);
    }

    /// Finishes and stores the scalar `acc` as tile element `(r, col)`, like
    /// [`Epilogue::store_vector`].
    #[allow(clippy::too_many_arguments)]
    fn store_scalar(
        &self,
        b: &mut FunctionBuilder,
        e: &Emitter,
        acc: Value,
        r: usize,
        col: usize,
        kb: KBlock,
    ) {
        let first = kb.first;
        let spec = e.spec;
        let mut y = acc;
        if spec.alpha != 1.0 {
            let s = b.ins().f32const(spec.alpha);
            y = b.ins().fmul(y, s);
        }
        let c_off = spec.c_offset(r, col);
        if !first {
            let partial = b.ins().load(types::F32, flags(), self.c_base, c_off);
            y = b.ins().fadd(y, partial);
        }
        for (t, &base) in spec
            .addends
            .iter()
            .zip(&self.addend_bases)
            .filter(|_| first)
        {
            let off = ((r * t.row_stride + col * t.col_stride) * F32) as i32;
            let mut v = b.ins().load(types::F32, flags(), base, off);
            if t.scale != 1.0 {
                let s = b.ins().f32const(t.scale);
                v = b.ins().fmul(v, s);
            }
            y = b.ins().fadd(y, v);
        }
        if kb.last {
            y = activation(b, spec.activation, y).expect("activations lower on f32");
        }
        b.ins().store(flags(), y, self.c_base, c_off);
    }
}
