//! 3×3, stride-1, one-group convs on run-time planes by Winograd F(m×m, 3×3) (the
//! algorithm, its transforms and its weights: `conv::winograd`), every extent from the
//! run. Per image:
//!
//! 1. each input channel copied with a zero border into m column phases,
//!    `X[c][row][p][j] = padded[c][row][j·m + p]`, at a layout fixed by the largest
//!    extents: the same tap of four horizontally adjacent tiles is one f32x4, at an
//!    immediate offset from the tiles' base;
//! 2. the tiles, numbered row-major over the image, a chunk at a time (as few chunks of
//!    at most a fixed count as hold them, their vectors of tiles dealt evenly; V and M
//!    of a chunk stay in L2, see `CHUNK_BYTES`): the input transform writes `V_ξν[c][t]`
//!    a group of tiles at a time, (m+2)² GEMMs `M_ξν = U_ξν · V_ξν` run on the chunk's
//!    tiles (on x86 one call of the chunk's count, else calls of whole panels), and the
//!    output transform adds the bias and the residual, applies the activation and
//!    stores each tile's rows and columns that lie inside the output plane. On x86 the
//!    transforms are machine code called per tile row (`x86::winograd`'s `tile_row`
//!    kernels: groups of 16 or 8 tiles, the row's counts at run time); elsewhere
//!    Cranelift's, four tiles a group.
//!
//! A chunk starts and ends anywhere in a tile row, so a small image fills the GEMM's
//! panels as a large one does. Four-tile groups at the end of a chunk's part of a row
//! compute lanes past it; their V columns are overwritten by the next row's tiles (the
//! writes go in increasing tile order) or fall in the rows' slack, and the output
//! transform does not store them.

use std::cell::Cell;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, FuncRef, InstBuilder, StackSlotData, StackSlotKind, Value};
use cranelift_frontend::FunctionBuilder;

use super::super::conv::winograd::{
    self as wino, input_tile, load4, output_row_runs, output_tile, store4, transpose4,
};
use super::super::gemm::{
    self, ALayout, BLayout, GemmKernel, GemmSpec, KernelKind, RunTimeStrides,
};
use super::super::{LowerCtx, LowerResult};
use super::{conv_operands, extents, product, ConvIo, PlaneSource, F32};
use crate::codegen::isa::Vector;
use crate::codegen::kernel::{self, flags, PTR};
use crate::codegen::kernels::x86::{self, winograd::TransformSpec};
use crate::codegen::math;
use crate::codegen::plan::conv::winograd::{LANES, OUTPUT_TILE_AT};
use crate::codegen::plan::planes::winograd::STAGE_VECTORS;
use crate::codegen::plan::planes::WinogradPlan;
use crate::ops::{Activation, ConvAttrs};

impl WinogradPlan {
    /// The phase planes' layout: on the machine-code transforms, for the run's input
    /// extents `(h, w)` (a small image's rows and channels lie close, as a library
    /// compiled for its size lays them out, where the largest extents' layout spread
    /// them over up to 8 times the cache lines); the Cranelift transforms address
    /// them at the largest extents' fixed offsets.
    fn layout(
        &self,
        b: &mut FunctionBuilder,
        (h, w): (Value, Value),
        pads: &[usize; 4],
    ) -> PhaseLayout {
        let fixed = |b: &mut FunctionBuilder, v: usize| kernel::iconst(b, v as i64);
        if self.transforms.is_none() {
            return PhaseLayout {
                phase_bytes: fixed(b, self.phase_floats * F32),
                row_bytes: fixed(b, self.padded_row_bytes()),
                channel_bytes: fixed(b, self.channel_bytes()),
            };
        }
        let [top, left, bottom, right] = *pads;
        let m = self.m as i64;
        // The columns `pad_phases` writes (the last tile column's reads past the pads
        // included), whole quads: no slack per row. A group of tiles past a row's end
        // reads the next phase row's floats into lanes nothing stores; past the last
        // channel it reads the room the largest extents' layout leaves (see `new`).
        // Why: a 28×28 input laid out at the largest extents' 16 floats of slack per
        // phase row took 3.5 times the cache lines it needs, and its input transform
        // four times as long as the static one's.
        let cols = b.ins().iadd_imm_s(w, (left + right) as i64 + 2 * (m - 1));
        let lp = b.ins().udiv_imm_u(cols, m);
        let lp = b.ins().iadd_imm_s(lp, LANES as i64 - 1);
        let lp = b.ins().band_imm_s(lp, -(LANES as i64));
        let phase_bytes = b.ins().imul_imm_s(lp, F32 as i64);
        let row_bytes = b.ins().imul_imm_s(phase_bytes, m);
        let rows = b.ins().iadd_imm_s(h, (top + bottom) as i64 + m - 1);
        let bytes = b.ins().imul(rows, row_bytes);
        // `skewed`: an odd count of cache lines.
        let lines = b.ins().iadd_imm_s(bytes, 63);
        let lines = b.ins().ushr_imm_u(lines, 6);
        let lines = b.ins().bor_imm_u(lines, 1);
        let channel_bytes = b.ins().ishl_imm_u(lines, 6);
        PhaseLayout {
            phase_bytes,
            row_bytes,
            channel_bytes,
        }
    }
}

/// Bytes from one phase row of a padded channel to the next phase's, from one padded
/// row to the next, and from one channel to the next (i64 values).
#[derive(Clone, Copy)]
struct PhaseLayout {
    phase_bytes: Value,
    row_bytes: Value,
    channel_bytes: Value,
}

/// The run's extents a conv's chunks need (i64 values).
#[derive(Clone, Copy)]
struct Extents {
    out_h: Value,
    out_w: Value,
    /// Tiles per tile row.
    tw: Value,
}

/// Tiles `t0 .. t0 + n` of the image, row-major, in tile rows `first_row .. rows_end`.
#[derive(Clone, Copy)]
struct Chunk {
    t0: Value,
    n: Value,
    first_row: Value,
    rows_end: Value,
}

impl Chunk {
    fn new(b: &mut FunctionBuilder, t0: Value, n: Value, tw: Value) -> Chunk {
        let first_row = b.ins().udiv(t0, tw);
        let end = b.ins().iadd(t0, n);
        let last = b.ins().iadd_imm_s(end, -1);
        let last = b.ins().udiv(last, tw);
        let rows_end = b.ins().iadd_imm_s(last, 1);
        Chunk {
            t0,
            n,
            first_row,
            rows_end,
        }
    }
}

/// The chunk's tiles of tile row `ti`: `lo .. hi`, tile `tx` at column `col0 + tx` of V
/// and M, `groups` four-tile groups.
#[derive(Clone, Copy)]
struct TileRow {
    ti: Value,
    lo: Value,
    hi: Value,
    col0: Value,
    groups: Value,
}

/// `body` for each tile row the chunk covers.
fn tile_rows(
    b: &mut FunctionBuilder,
    ext: &Extents,
    chunk: &Chunk,
    mut body: impl FnMut(&mut FunctionBuilder, TileRow),
) {
    kernel::range_loop(b, chunk.first_row, chunk.rows_end, |b, ti| {
        let row_start = b.ins().imul(ti, ext.tw);
        let col0 = b.ins().isub(row_start, chunk.t0);
        let lo = b.ins().ineg(col0);
        let zero = kernel::iconst(b, 0);
        let lo = b.ins().smax(lo, zero);
        let hi = b.ins().isub(chunk.n, col0);
        let hi = b.ins().smin(hi, ext.tw);
        let groups = b.ins().isub(hi, lo);
        let groups = b.ins().iadd_imm_s(groups, LANES as i64 - 1);
        let groups = b.ins().ushr_imm_u(groups, 2);
        body(
            b,
            TileRow {
                ti,
                lo,
                hi,
                col0,
                groups,
            },
        );
    });
}

/// `min(x, k)` of i64 `x` and constant `k`.
fn min_imm(b: &mut FunctionBuilder, x: Value, k: i64) -> Value {
    let k = kernel::iconst(b, k);
    b.ins().smin(x, k)
}

pub(super) fn conv(
    ctx: &mut LowerCtx,
    c: &ConvAttrs,
    wp: &WinogradPlan,
    src: &PlaneSource,
) -> LowerResult {
    let (
        ConvIo {
            x,
            bias,
            residual,
            y,
        },
        weights,
    ) = conv_operands(ctx, "a Winograd conv")?;
    let w_ty = ctx.input(1)?.ty;
    let alg = wp.alg();
    let u = wino::weights_on_planes(c, (&x.ty, &w_ty, &y.ty), alg, &weights, &wp.geometry)?;
    let u_ab_bytes = u.len() / (wp.a() * wp.a()) * F32;
    let u_ptr = ctx.weights_f32(&u)?;
    let spec = |n: usize| GemmSpec {
        m: wp.maps,
        n,
        k: wp.channels,
        a: ALayout::Packed,
        b: BLayout::Rows {
            row_stride: wp.row_floats(),
        },
        ldc: wp.row_floats(),
        c_col_stride: 1,
        alpha: 1.0,
        addends: vec![],
        activation: Activation::None,
        geometry: wp.geometry,
        b_taps: vec![],
        rows_at_run_time: false,
        cols_at_run_time: false,
        run_time_strides: RunTimeStrides::None,
    };
    let kernels = match wp.geometry.kernel {
        KernelKind::X86(_) => Products::Counted(GemmKernel::define(
            ctx,
            &GemmSpec {
                cols_at_run_time: true,
                ..spec(wp.chunk_tiles)
            },
        )?),
        KernelKind::Clif => Products::Widths(
            wp.widths()
                .into_iter()
                .map(|n| Ok((n, GemmKernel::define(ctx, &spec(n))?)))
                .collect::<Result<_, String>>()?,
        ),
    };
    let transforms =
        RowTransforms::define(ctx, wp, bias.is_some(), residual.is_some(), c.activation)?;
    let scratch = ctx
        .scratch
        .ok_or("a Winograd conv on planes needs scratch")?;
    let fma = gemm::has_fma(ctx.target);
    let batch = src.batch(ctx.b, &x.ty);
    let pads = [c.pads[0], c.pads[1], c.pads[2], c.pads[3]];
    let act = c.activation;
    let b = &mut *ctx.b;
    let in_ext = extents(b, src, &x.ty, 2);
    let out_ext = extents(b, src, &y.ty, 2);
    let in_plane = product(b, &in_ext);
    let positions = product(b, &out_ext);
    let in_image = b.ins().imul_imm_s(in_plane, (wp.channels * F32) as i64);
    let out_plane_bytes = b.ins().imul_imm_s(positions, F32 as i64);
    let out_image = b.ins().imul_imm_s(out_plane_bytes, wp.maps as i64);
    let m = wp.m as i64;
    let tile_count = |b: &mut FunctionBuilder, extent: Value| {
        let e = b.ins().iadd_imm_s(extent, m - 1);
        b.ins().udiv_imm_u(e, m)
    };
    let th = tile_count(b, out_ext[0]);
    let tw = tile_count(b, out_ext[1]);
    let tiles = b.ins().imul(th, tw);
    // As few chunks as hold the tiles, the tiles' vectors (the GEMM's columns by
    // vectors) dealt evenly between them: 49 tiles in chunks of 48 ran as 48 + 1, the
    // second streaming all of U for one tile, and dealt tile by tile, widths such as
    // 33 computed a whole panel each.
    let chunks = b.ins().iadd_imm_s(tiles, wp.chunk_tiles as i64 - 1);
    let chunks = b.ins().udiv_imm_u(chunks, wp.chunk_tiles as i64);
    let lanes = wp.geometry.lanes as i64;
    let vectors = b.ins().iadd_imm_s(tiles, lanes - 1);
    let vectors = b.ins().udiv_imm_u(vectors, lanes);
    // Where a chunk holds whole tile rows, chunks of whole rows, dealt evenly: a row
    // split between two chunks is transformed twice at full vector width.
    let rows_fit = kernel::iconst(b, wp.chunk_tiles as i64);
    let rows_fit = b.ins().udiv(rows_fit, tw);
    let by_rows = b.ins().icmp_imm_s(IntCC::SignedGreaterThan, rows_fit, 0);
    let one = kernel::iconst(b, 1);
    let rows_fit = b.ins().smax(rows_fit, one);
    let row_chunks = b.ins().iadd(th, rows_fit);
    let row_chunks = b.ins().iadd_imm_s(row_chunks, -1);
    let row_chunks = b.ins().udiv(row_chunks, rows_fit);
    let chunks = b.ins().select(by_rows, row_chunks, chunks);
    let ext = Extents {
        out_h: out_ext[0],
        out_w: out_ext[1],
        tw,
    };
    let bufs = Buffers {
        padded: scratch,
        v: b.ins().iadd_imm_s(scratch, wp.v_at() as i64),
        mt: b.ins().iadd_imm_s(scratch, wp.m_at() as i64),
        stage: b.ins().iadd_imm_s(scratch, wp.stage_at() as i64),
    };
    let layout = wp.layout(b, (in_ext[0], in_ext[1]), &pads);
    let counts = transforms.as_ref().map(|_| {
        let s = b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 32, 3));
        b.ins().stack_addr(PTR, s, 0)
    });
    let failure = Cell::new(None);
    super::super::run_shape::run_loop(b, batch, |b, n| {
        let off = b.ins().imul(n, in_image);
        let x_n = b.ins().iadd(x.ptr, off);
        let off = b.ins().imul(n, out_image);
        let y_n = b.ins().iadd(y.ptr, off);
        let r_n = residual.as_ref().map(|r| b.ins().iadd(r.ptr, off));
        pad_phases(
            b,
            wp,
            x_n,
            (in_ext[0], in_ext[1]),
            &pads,
            (bufs.padded, &layout),
        );
        let out = Output {
            y: y_n,
            residual: r_n,
            bias: bias.as_ref().map(|t| t.ptr),
            plane_bytes: out_plane_bytes,
            act,
        };
        kernel::dynamic_loop(b, chunks, |b, k| {
            let first_vector = |b: &mut FunctionBuilder, k: Value| {
                let v = b.ins().imul(k, vectors);
                let v = b.ins().udiv(v, chunks);
                b.ins().imul_imm_s(v, lanes)
            };
            let first_row = |b: &mut FunctionBuilder, k: Value| {
                let r = b.ins().imul(k, th);
                let r = b.ins().udiv(r, chunks);
                b.ins().imul(r, tw)
            };
            let k1 = b.ins().iadd_imm_s(k, 1);
            let (v0, v1) = (first_vector(b, k), first_vector(b, k1));
            let (r0, r1) = (first_row(b, k), first_row(b, k1));
            let t0 = b.ins().select(by_rows, r0, v0);
            let t1 = b.ins().select(by_rows, r1, v1);
            let t1 = b.ins().smin(t1, tiles);
            let n = b.ins().isub(t1, t0);
            let chunk = Chunk::new(b, t0, n, tw);
            match (&transforms, counts) {
                (Some(t), Some(counts)) => {
                    t.input(b, wp, (&bufs, &layout), &ext, &chunk);
                    products(b, wp, (&bufs, u_ptr, u_ab_bytes), &kernels, chunk.n);
                    t.output(b, wp, &bufs, &ext, &chunk, &out, counts);
                }
                _ => {
                    input_transform(b, wp, fma, &bufs, &ext, &chunk);
                    products(b, wp, (&bufs, u_ptr, u_ab_bytes), &kernels, chunk.n);
                    if let Err(e) = output_transform(b, wp, fma, &bufs, &ext, &chunk, &out) {
                        failure.set(Some(e));
                    }
                }
            }
        });
    });
    failure.take().map_or(Ok(()), Err)
}

/// The machine-code transforms of one tile row (`x86::winograd`'s `tile_row`
/// kernels), ymm and, on AVX-512, zmm: `(lanes, input, output)`, narrowest first.
struct RowTransforms {
    variants: Vec<(usize, FuncRef, FuncRef)>,
}

impl RowTransforms {
    fn define(
        ctx: &mut LowerCtx,
        wp: &WinogradPlan,
        bias: bool,
        residual: bool,
        activation: Activation,
    ) -> Result<Option<RowTransforms>, String> {
        let Some(widest) = wp.transforms else {
            return Ok(None);
        };
        let isas = match widest {
            Vector::Zmm => vec![Vector::Ymm, Vector::Zmm],
            Vector::Ymm => vec![Vector::Ymm],
        };
        let mut variants = vec![];
        for isa in isas {
            let spec = TransformSpec {
                m: wp.m,
                isa,
                channels: wp.channels,
                maps: wp.maps,
                rows: 1,
                tw: 0,
                groups: 0,
                lp: wp.phase_floats,
                channel_bytes: wp.channel_bytes(),
                tile_row: true,
                ts: wp.row_floats(),
                v_plane: wp.v_plane(),
                m_plane: wp.m_plane(),
                out_h: 0,
                out_w: 0,
                last_rows: wp.m,
                bias,
                residual,
                activation,
            };
            let input = gemm::define_machine_code(ctx, 5, &x86::winograd::emit_input(&spec)?)?;
            let output = gemm::define_machine_code(ctx, 5, &x86::winograd::emit_output(&spec)?)?;
            variants.push((isa.lanes(), input, output));
        }
        Ok(Some(RowTransforms { variants }))
    }

    /// `call(lanes, input, output)` of the variant for a tile row of `tiles` tiles: the
    /// narrowest whose vector they fill, else the widest.
    fn pick(
        &self,
        b: &mut FunctionBuilder,
        tiles: Value,
        call: &mut dyn FnMut(&mut FunctionBuilder, usize, FuncRef, FuncRef),
    ) {
        let (lanes, input, output) = self.variants[0];
        let Some(&(wide, wide_input, wide_output)) = self.variants.get(1) else {
            return call(b, lanes, input, output);
        };
        let narrow = b
            .ins()
            .icmp_imm_s(IntCC::SignedLessThanOrEqual, tiles, lanes as i64);
        let (on_narrow, on_wide, join) = (b.create_block(), b.create_block(), b.create_block());
        b.ins().brif(narrow, on_narrow, &[], on_wide, &[]);
        for (block, (lanes, input, output)) in [
            (on_narrow, (lanes, input, output)),
            (on_wide, (wide, wide_input, wide_output)),
        ] {
            b.seal_block(block);
            b.switch_to_block(block);
            call(b, lanes, input, output);
            b.ins().jump(join, &[]);
        }
        b.seal_block(join);
        b.switch_to_block(join);
    }

    /// The input transform of the chunk's tiles, tile row by tile row.
    fn input(
        &self,
        b: &mut FunctionBuilder,
        wp: &WinogradPlan,
        (bufs, layout): (&Buffers, &PhaseLayout),
        ext: &Extents,
        chunk: &Chunk,
    ) {
        let tile_row_bytes = b.ins().imul_imm_s(layout.row_bytes, wp.m as i64);
        tile_rows(b, ext, chunk, |b, row| {
            let at = b.ins().imul(row.ti, tile_row_bytes);
            let src = b.ins().iadd(bufs.padded, at);
            let src = kernel::elem_addr(b, src, row.lo, F32);
            let col = b.ins().iadd(row.col0, row.lo);
            let dst = kernel::elem_addr(b, bufs.v, col, F32);
            let tiles = b.ins().isub(row.hi, row.lo);
            self.pick(b, tiles, &mut |b, lanes, input, _| {
                let groups = b.ins().iadd_imm_s(tiles, lanes as i64 - 1);
                let groups = b.ins().udiv_imm_u(groups, lanes as i64);
                let layout = [layout.phase_bytes, layout.channel_bytes];
                b.ins()
                    .call(input, &[src, dst, groups, layout[0], layout[1]]);
            });
        });
    }

    /// The output transform of the chunk's tiles into the planes, tile row by tile
    /// row, with `counts` (32 bytes) passing each row's extents.
    #[allow(clippy::too_many_arguments)]
    fn output(
        &self,
        b: &mut FunctionBuilder,
        wp: &WinogradPlan,
        bufs: &Buffers,
        ext: &Extents,
        chunk: &Chunk,
        out: &Output,
        counts: Value,
    ) {
        let m = wp.m as i64;
        let row_bytes = b.ins().imul_imm_s(ext.out_w, F32 as i64);
        let zero = kernel::iconst(b, 0);
        tile_rows(b, ext, chunk, |b, row| {
            let y0 = b.ins().imul_imm_s(row.ti, m);
            let rows_left = b.ins().isub(ext.out_h, y0);
            let valid_rows = min_imm(b, rows_left, m);
            let x0 = b.ins().imul_imm_s(row.lo, m);
            let x_end = b.ins().imul_imm_s(row.hi, m);
            let x_end = b.ins().smin(x_end, ext.out_w);
            let valid_cols = b.ins().isub(x_end, x0);
            for (k, v) in [valid_rows, valid_cols, row_bytes, out.plane_bytes]
                .into_iter()
                .enumerate()
            {
                b.ins().store(flags(), v, counts, (k * 8) as i32);
            }
            let col = b.ins().iadd(row.col0, row.lo);
            let src = kernel::elem_addr(b, bufs.mt, col, F32);
            let at = b.ins().imul(y0, row_bytes);
            let at = kernel::elem_addr(b, at, x0, F32);
            let y = b.ins().iadd(out.y, at);
            let r = out.residual.map_or(zero, |r| b.ins().iadd(r, at));
            let bias = out.bias.unwrap_or(zero);
            let tiles = b.ins().isub(row.hi, row.lo);
            self.pick(b, tiles, &mut |b, _, _, output| {
                b.ins().call(output, &[src, y, bias, r, counts]);
            });
        });
    }
}

struct Buffers {
    padded: Value,
    v: Value,
    mt: Value,
    stage: Value,
}

/// Copies the `channels` planes at `x` (`h × w` each) into the phase planes at `dst`
/// (laid out as `layout` says) with `pads` `[top, left, bottom, right]` of zeros, the
/// bottom and right grown by m − 1 for the rows and columns the last tiles read.
fn pad_phases(
    b: &mut FunctionBuilder,
    wp: &WinogradPlan,
    x: Value,
    (h, w): (Value, Value),
    pads: &[usize; 4],
    (dst, layout): (Value, &PhaseLayout),
) {
    let m = wp.m;
    let [top, left, bottom, right] = *pads;
    let rows = b.ins().iadd_imm_s(h, (top + bottom + m - 1) as i64);
    let cols = b.ins().iadd_imm_s(w, (left + right + 2 * (m - 1)) as i64);
    let phase_w = b.ins().udiv_imm_u(cols, m as i64);
    let zero_f = b.ins().f32const(0.0);
    let zero_x4 = b.ins().splat(types::F32X4, zero_f);
    let quads = b.ins().iadd_imm_s(phase_w, 3);
    let quads = b.ins().ushr_imm_u(quads, 2);
    let in_plane = b.ins().imul(h, w);
    let PhaseLayout {
        phase_bytes,
        row_bytes,
        channel_bytes,
    } = *layout;
    // Phase p of a row at `row + phase_at[p]`.
    let phase_at: Vec<Value> = (0..m)
        .map(|p| b.ins().imul_imm_s(phase_bytes, p as i64))
        .collect();
    let at = |b: &mut FunctionBuilder, base: Value, index: Value, bytes: Value| {
        let off = b.ins().imul(index, bytes);
        b.ins().iadd(base, off)
    };
    // The quads of each phase the copy leaves: all of them in the top and bottom pad
    // rows; in the rows holding the input, the first quad (the left pad, where it is
    // at most 4m columns) and those from the quad holding the last input column on.
    // Why: zeros over every quad of every row, then the copy over most of them, took
    // more instructions than the copy itself.
    let left_quads = match left {
        0 => 0,
        l if l <= 4 * m => 1,
        _ => -1,
    };
    let last = b.ins().iadd_imm_s(w, left as i64);
    let last = b.ins().udiv_imm_u(last, (4 * m) as i64);
    let last = b.ins().iadd_imm_s(last, -1);
    let zero_from = kernel::iconst(b, 0);
    let last = b.ins().smax(last, zero_from);
    let zero_quads = |b: &mut FunctionBuilder, row: Value, from: Value, to: Value| {
        let phases: Vec<Value> = phase_at.iter().map(|&p| b.ins().iadd(row, p)).collect();
        kernel::range_loop(b, from, to, |b, q| {
            let off = b.ins().imul_imm_s(q, (LANES * F32) as i64);
            for &phase in &phases {
                let a = b.ins().iadd(phase, off);
                b.ins().store(flags(), zero_x4, a, 0);
            }
        });
    };
    let first_bottom = b.ins().iadd_imm_s(h, top as i64);
    kernel::counted_loop(b, 0, wp.channels as i64, 1, |b, c| {
        let chan = at(b, dst, c, channel_bytes);
        kernel::dynamic_loop(b, rows, |b, r| {
            let row = at(b, chan, r, row_bytes);
            let above = b.ins().icmp_imm_s(IntCC::SignedLessThan, r, top as i64);
            let below = b
                .ins()
                .icmp(IntCC::SignedGreaterThanOrEqual, r, first_bottom);
            let pad_row = b.ins().bor(above, below);
            kernel::if_else(
                b,
                pad_row,
                |b| zero_quads(b, row, zero_from, quads),
                |b| {
                    if left_quads < 0 {
                        zero_quads(b, row, zero_from, quads);
                        return;
                    }
                    if left_quads > 0 {
                        let one = kernel::iconst(b, 1);
                        zero_quads(b, row, zero_from, one);
                    }
                    zero_quads(b, row, last, quads);
                },
            );
        });
        let base = b.ins().imul(c, in_plane);
        let src_c = kernel::elem_addr(b, x, base, F32);
        kernel::dynamic_loop(b, h, |b, r| {
            let pr = b.ins().iadd_imm_s(r, top as i64);
            let row = at(b, chan, pr, row_bytes);
            let phases: Vec<Value> = phase_at.iter().map(|&p| b.ins().iadd(row, p)).collect();
            let src_row = b.ins().imul(r, w);
            let src = kernel::elem_addr(b, src_c, src_row, F32);
            // Input column j lands at padded column j + left: phase (j + left) mod m,
            // float (j + left) div m. A run of 4m columns is four floats per phase.
            let run = 4 * m;
            let runs = b.ins().udiv_imm_u(w, run as i64);
            kernel::dynamic_loop(b, runs, |b, o| {
                let s = kernel::elem_addr(b, src, o, run * F32);
                let off = b.ins().imul_imm_s(o, (LANES * F32) as i64);
                let split = phase_split(b, s, m);
                for (q, val) in split.into_iter().enumerate() {
                    let (phase, index) = ((left + q) % m, (left + q) / m);
                    let d = b.ins().iadd(phases[phase], off);
                    store4(b, val, d, index * F32);
                }
            });
            // The columns past the last whole run: as one more run ending at the row's
            // end (rewriting some columns with their own values), its phases rotated
            // by its start; a row shorter than a run, column by column.
            let done = b.ins().imul_imm_s(runs, run as i64);
            let short = b.ins().icmp_imm_s(IntCC::SignedLessThan, w, run as i64);
            let first = b.ins().select(short, done, w);
            kernel::range_loop(b, first, w, |b, j| {
                let s = kernel::elem_addr(b, src, j, F32);
                let v = b.ins().load(types::F32, flags(), s, 0);
                let col = b.ins().iadd_imm_s(j, left as i64);
                let phase = b.ins().urem_imm_u(col, m as i64);
                let index = b.ins().udiv_imm_u(col, m as i64);
                let d = at(b, row, phase, phase_bytes);
                let d = kernel::elem_addr(b, d, index, F32);
                b.ins().store(flags(), v, d, 0);
            });
            let partial = b.ins().icmp(IntCC::SignedLessThan, done, w);
            let not_short = b.ins().bnot(short);
            let last_run = b.ins().band(partial, not_short);
            kernel::if_else(
                b,
                last_run,
                |b| {
                    let j0 = b.ins().iadd_imm_s(w, -(run as i64));
                    let s = kernel::elem_addr(b, src, j0, F32);
                    let split = phase_split(b, s, m);
                    // Vector q holds columns j0 + q + m·i: padded column j0 + left + q.
                    let col0 = b.ins().iadd_imm_s(j0, left as i64);
                    for (q, val) in split.into_iter().enumerate() {
                        let col = b.ins().iadd_imm_s(col0, q as i64);
                        let phase = b.ins().urem_imm_u(col, m as i64);
                        let index = b.ins().udiv_imm_u(col, m as i64);
                        let d = at(b, row, phase, phase_bytes);
                        let d = kernel::elem_addr(b, d, index, F32);
                        store4(b, val, d, 0);
                    }
                },
                |_| {},
            );
        });
    });
}

/// The 4m floats at `s` split by column phase: vector q holds columns q, q + m, ….
fn phase_split(b: &mut FunctionBuilder, s: Value, m: usize) -> Vec<Value> {
    let v: Vec<Value> = (0..m).map(|q| load4(b, s, q * LANES * F32)).collect();
    match m {
        4 => transpose4(b, [v[0], v[1], v[2], v[3]]).to_vec(),
        _ => vec![
            math::pick_lanes(b, v[0], v[1], [0, 2, 4, 6]),
            math::pick_lanes(b, v[0], v[1], [1, 3, 5, 7]),
        ],
    }
}

/// `V_ξν[c][t..t+4] = (Bᵀ d B)_ξν` for every channel and four-tile group of the chunk.
fn input_transform(
    b: &mut FunctionBuilder,
    wp: &WinogradPlan,
    fma: bool,
    bufs: &Buffers,
    ext: &Extents,
    chunk: &Chunk,
) {
    let m = wp.m;
    let (row_floats, phase) = (wp.m * wp.phase_floats, wp.phase_floats);
    let v_ab_bytes = wp.v_plane();
    let stage = bufs.stage;
    let tile_row_bytes = m * wp.padded_row_bytes();
    kernel::counted_loop(b, 0, wp.channels as i64, 1, |b, c| {
        let chan = kernel::elem_addr(b, bufs.padded, c, wp.channel_bytes());
        let v_c = kernel::elem_addr(b, bufs.v, c, wp.row_floats() * F32);
        tile_rows(b, ext, chunk, |b, row| {
            let src_row = kernel::elem_addr(b, chan, row.ti, tile_row_bytes);
            kernel::dynamic_loop(b, row.groups, |b, gi| {
                let g4 = b.ins().ishl_imm_u(gi, 2);
                let tx = b.ins().iadd(row.lo, g4);
                let src = kernel::elem_addr(b, src_row, tx, F32);
                let col = b.ins().iadd(row.col0, tx);
                let dst = kernel::elem_addr(b, v_c, col, F32);
                let tap = |r: usize, s: usize| (r * row_floats + (s % m) * phase + s / m) * F32;
                input_tile(b, fma, m, (src, tap), stage, (dst, v_ab_bytes));
            });
        });
    });
}

/// The GEMMs of a chunk's products.
enum Products {
    /// One kernel taking the chunk's tile count (the x86 machine code).
    Counted(GemmKernel),
    /// Kernels of fixed widths, widest first (see [`WinogradPlan::widths`]).
    Widths(Vec<(usize, GemmKernel)>),
}

/// `M_ξν = U_ξν · V_ξν` over the chunk's `n` tiles: one call of `n` columns, or calls
/// of the widest width while it fits, then of each narrower one the rest still holds,
/// then one panel for the last columns (computing a few past them, in the rows' slack).
fn products(
    b: &mut FunctionBuilder,
    wp: &WinogradPlan,
    (bufs, u, u_ab_bytes): (&Buffers, Value, usize),
    kernels: &Products,
    n: Value,
) {
    let a2 = wp.a() * wp.a();
    kernel::counted_loop(b, 0, a2 as i64, 1, |b, ab| {
        let ua = kernel::elem_addr(b, u, ab, u_ab_bytes);
        let vb = kernel::elem_addr(b, bufs.v, ab, wp.v_plane());
        let mc = kernel::elem_addr(b, bufs.mt, ab, wp.m_plane());
        let kernels = match kernels {
            Products::Counted(k) => return k.call_counted(b, (ua, vb, mc), &[], None, Some(n)),
            Products::Widths(k) => k,
        };
        let call = |b: &mut FunctionBuilder, k: &GemmKernel, p0: Value| {
            let vp = kernel::elem_addr(b, vb, p0, F32);
            let mp = kernel::elem_addr(b, mc, p0, F32);
            k.call(b, ua, vp, mp, &[]);
        };
        let (widest, first) = &kernels[0];
        let full = b.ins().udiv_imm_u(n, *widest as i64);
        kernel::dynamic_loop(b, full, |b, i| {
            let p0 = b.ins().imul_imm_s(i, *widest as i64);
            call(b, first, p0);
        });
        let mut p0 = b.ins().imul_imm_s(full, *widest as i64);
        for (width, k) in &kernels[1..] {
            let rest = b.ins().isub(n, p0);
            let fits = b
                .ins()
                .icmp_imm_s(IntCC::SignedGreaterThanOrEqual, rest, *width as i64);
            let (on, join) = (b.create_block(), b.create_block());
            b.append_block_param(join, types::I64);
            let next = b.ins().iadd_imm_s(p0, *width as i64);
            b.ins().brif(
                fits,
                on,
                &[],
                join,
                &[cranelift_codegen::ir::BlockArg::Value(p0)],
            );
            b.seal_block(on);
            b.switch_to_block(on);
            call(b, k, p0);
            b.ins()
                .jump(join, &[cranelift_codegen::ir::BlockArg::Value(next)]);
            b.seal_block(join);
            b.switch_to_block(join);
            p0 = b.block_params(join)[0];
        }
        let (_, narrowest) = kernels.last().expect("a GEMM width");
        let rest = b.ins().isub(n, p0);
        let some = b.ins().icmp_imm_s(IntCC::SignedGreaterThan, rest, 0);
        kernel::if_else(b, some, |b| call(b, narrowest, p0), |_| {});
    });
}

/// Where the output transform writes one image and what it adds.
struct Output {
    y: Value,
    residual: Option<Value>,
    bias: Option<Value>,
    plane_bytes: Value,
    act: Activation,
}

/// `Y[map][ti·m + i][tx·m + j] = act((Aᵀ M A)[i][j] + bias + R)` for every map and
/// tile of the chunk, inside the plane.
fn output_transform(
    b: &mut FunctionBuilder,
    wp: &WinogradPlan,
    fma: bool,
    bufs: &Buffers,
    ext: &Extents,
    chunk: &Chunk,
    out: &Output,
) -> LowerResult {
    let m = wp.m;
    let failure = Cell::new(None);
    let row_bytes = b.ins().imul_imm_s(ext.out_w, F32 as i64);
    kernel::counted_loop(b, 0, wp.maps as i64, 1, |b, map| {
        let bias = out.bias.map(|p| {
            let at = kernel::elem_addr(b, p, map, F32);
            b.ins().load(types::F32, flags(), at, 0)
        });
        let m_map = kernel::elem_addr(b, bufs.mt, map, wp.row_floats() * F32);
        let plane_at = b.ins().imul(map, out.plane_bytes);
        let y_map = b.ins().iadd(out.y, plane_at);
        let r_map = out.residual.map(|r| b.ins().iadd(r, plane_at));
        tile_rows(b, ext, chunk, |b, row| {
            let y0 = b.ins().imul_imm_s(row.ti, m as i64);
            let rows_left = b.ins().isub(ext.out_h, y0);
            let valid_rows = min_imm(b, rows_left, m as i64);
            let y_row = b.ins().imul(y0, row_bytes);
            kernel::dynamic_loop(b, row.groups, |b, gi| {
                let g4 = b.ins().ishl_imm_u(gi, 2);
                let tx = b.ins().iadd(row.lo, g4);
                let col = b.ins().iadd(row.col0, tx);
                let src = kernel::elem_addr(b, m_map, col, F32);
                let x0 = b.ins().imul_imm_s(tx, m as i64);
                // Valid columns: the group's tiles in the chunk, inside the plane.
                let tiles_left = b.ins().isub(row.hi, tx);
                let tiles = min_imm(b, tiles_left, LANES as i64);
                let by_tiles = b.ins().imul_imm_s(tiles, m as i64);
                let cols_left = b.ins().isub(ext.out_w, x0);
                let valid_cols = b.ins().smin(by_tiles, cols_left);
                let x0_bytes = b.ins().imul_imm_s(x0, F32 as i64);
                let at = b.ins().iadd(y_row, x0_bytes);
                let group = Group {
                    y: b.ins().iadd(y_map, at),
                    r: r_map.map(|r| b.ins().iadd(r, at)),
                    row_bytes,
                    bias,
                    act: out.act,
                };
                let o = transform_group(b, wp, fma, bufs.stage, src);
                let rows_full = b.ins().icmp_imm_s(IntCC::Equal, valid_rows, m as i64);
                let cols_full = b
                    .ins()
                    .icmp_imm_s(IntCC::Equal, valid_cols, (LANES * m) as i64);
                let full = b.ins().band(rows_full, cols_full);
                let mut whole = None;
                let mut part = None;
                kernel::if_else(
                    b,
                    full,
                    |b| whole = group.store_whole(b, m, &o).err(),
                    |b| {
                        part = group
                            .store_part(b, m, &o, bufs.stage, (valid_rows, valid_cols))
                            .err()
                    },
                );
                if let Some(e) = whole.or(part) {
                    failure.set(Some(e));
                }
            });
        });
    });
    failure.take().map_or(Ok(()), Err)
}

/// `o[i][j] = (Aᵀ M A)[i][j]` of four tiles (lanes) whose M column is at `src`.
fn transform_group(
    b: &mut FunctionBuilder,
    wp: &WinogradPlan,
    fma: bool,
    stage: Value,
    src: Value,
) -> Vec<Value> {
    output_tile(b, fma, wp.m, (src, wp.m_plane()), stage);
    (0..wp.m * wp.m)
        .map(|k| load4(b, stage, OUTPUT_TILE_AT + k * LANES * F32))
        .collect()
}

/// One four-tile group's place in the output.
struct Group {
    /// Output (and residual) at the group's first row and column.
    y: Value,
    r: Option<Value>,
    row_bytes: Value,
    bias: Option<Value>,
    act: Activation,
}

impl Group {
    /// Output row `i` of the four tiles as runs of four columns: run `k` holds columns
    /// 4k .. 4k+4 of the group, plus the bias.
    fn row_runs(&self, b: &mut FunctionBuilder, m: usize, o: &[Value], i: usize) -> Vec<Value> {
        let runs = output_row_runs(b, &o[i * m..(i + 1) * m]);
        match self.bias {
            Some(bias) => {
                let bias = b.ins().splat(types::F32X4, bias);
                runs.into_iter().map(|v| b.ins().fadd(v, bias)).collect()
            }
            None => runs,
        }
    }

    /// All m rows and 4·m columns inside the plane.
    fn store_whole(&self, b: &mut FunctionBuilder, m: usize, o: &[Value]) -> LowerResult {
        let mut y = self.y;
        let mut r = self.r;
        for i in 0..m {
            if i > 0 {
                y = b.ins().iadd(y, self.row_bytes);
                r = r.map(|r| b.ins().iadd(r, self.row_bytes));
            }
            for (k, mut val) in self.row_runs(b, m, o, i).into_iter().enumerate() {
                let off = k * LANES * F32;
                if let Some(r) = r {
                    let rv = load4(b, r, off);
                    val = b.ins().fadd(val, rv);
                }
                val = crate::codegen::unary::activation(b, self.act, val)?;
                store4(b, val, y, off);
            }
        }
        Ok(())
    }

    /// The group's first `rows` rows and `cols` columns: staged, then one float at a
    /// time.
    fn store_part(
        &self,
        b: &mut FunctionBuilder,
        m: usize,
        o: &[Value],
        stage: Value,
        (rows, cols): (Value, Value),
    ) -> LowerResult {
        let staged = (STAGE_VECTORS - 16) * LANES * F32;
        let row_floats = LANES * m;
        for i in 0..m {
            for (k, val) in self.row_runs(b, m, o, i).into_iter().enumerate() {
                store4(b, val, stage, staged + (i * row_floats + k * LANES) * F32);
            }
        }
        let from = b.ins().iadd_imm_s(stage, staged as i64);
        let failure = Cell::new(None);
        kernel::dynamic_loop(b, rows, |b, i| {
            let s_row = kernel::elem_addr(b, from, i, row_floats * F32);
            let at = b.ins().imul(i, self.row_bytes);
            let y_row = b.ins().iadd(self.y, at);
            let r_row = self.r.map(|r| b.ins().iadd(r, at));
            kernel::dynamic_loop(b, cols, |b, j| {
                let s = kernel::elem_addr(b, s_row, j, F32);
                let mut v = b.ins().load(types::F32, flags(), s, 0);
                if let Some(r) = r_row {
                    let ra = kernel::elem_addr(b, r, j, F32);
                    let rv = b.ins().load(types::F32, flags(), ra, 0);
                    v = b.ins().fadd(v, rv);
                }
                match crate::codegen::unary::activation(b, self.act, v) {
                    Ok(a) => v = a,
                    Err(e) => failure.set(Some(e)),
                }
                let d = kernel::elem_addr(b, y_row, j, F32);
                b.ins().store(flags(), v, d, 0);
            });
        });
        failure.take().map_or(Ok(()), Err)
    }
}
