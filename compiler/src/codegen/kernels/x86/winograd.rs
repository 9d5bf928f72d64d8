//! x86-64 Winograd transforms as machine code: `f32-winograd-f4-input-avx512f`,
//! `f32-winograd-f4-output-avx512f` and their F(2×2) and 8-lane (`avx2-fma`) variants,
//! encoded with iced-x86 like the GEMM kernels of [`super::gemm_x86`].
//!
//! They replace the Cranelift input and output transforms of the Winograd conv path
//! (`conv/winograd.rs`, whose module docs give the algorithm and the buffer layouts);
//! the padding copy, the phase split and the (m+2)² GEMMs stay as they are. Vectors
//! still run across consecutive tiles of one tile row, 16 (zmm) or 8 (ymm) of them
//! instead of Cranelift's 4, so each instruction transforms 4× (2×) the tiles.
//!
//! Why: with 4-lane vectors the transforms took more time than the GEMMs between them
//! (ResNet-18's 64-channel 56×56 conv alone: 56% of its samples in the node's own code,
//! 41% in the GEMM kernels; `scripts/profile_model.py --symbols`), and ResNet-18's
//! Winograd layers spent ~15% of the model's time there.
//!
//! Shape of the code, per chunk of tile rows (the chunking of the Cranelift path):
//! * input: for each channel, tile row and group of `L` tiles, the column pass
//!   `t = Bᵀ d` (a loads from the phase planes, one per tile row of d) goes to a stage
//!   on the stack, the row pass `V = t B` reads it back and stores the (m+2)² vectors
//!   into their V planes. A group at the end of a tile row spills into the next row's
//!   tiles, overwritten when that row is transformed (the Cranelift path does the same);
//! * output: for each map, tile row and group, `Aᵀ M A` through the stage, then each
//!   output row of the tiles is transposed from lanes-are-tiles to lanes-are-columns
//!   (vpermi2ps on AVX-512, unpack + vperm2f128 on AVX2), gets bias, residual and the
//!   activation, and is stored with a tail mask where the row ends.

use iced_x86::code_asm::*;

use super::activation::{activate, supports_activation_with};
use super::asm::{
    emit_consts, imm, AsmError, AsmResult, Consts, TailMasks, VOp, Vecs, Vector, AVX2_MASK, YMM,
    ZMM,
};
use crate::ops::Activation;

const F32: usize = 4;

/// One chunk's transforms: sizes in floats as in the Cranelift path's `Plan`.
#[derive(Clone, Debug)]
pub(crate) struct TransformSpec {
    /// Output tile side (2 or 4); input tiles are m + 2.
    pub m: usize,
    /// zmm (16 tiles per vector) or ymm (8).
    pub isa: Vector,
    pub channels: usize,
    pub maps: usize,
    /// Tile rows in this chunk, tiles per tile row, groups of `lanes` tiles per row.
    pub rows: usize,
    pub tw: usize,
    pub groups: usize,
    /// Phase row length.
    pub lp: usize,
    /// Bytes from one channel's phase planes to the next.
    pub channel_bytes: usize,
    /// One tile row per call, its counts (groups; valid rows and columns, row and
    /// plane bytes of the output) and the phase planes' layout (phase row and channel
    /// bytes) from the arguments: planes whose extents only the run knows
    /// (`lower::planes::winograd`). `rows`, `tw`, `groups`, `lp`, `channel_bytes`,
    /// `out_h`, `out_w` and `last_rows` are then unused.
    pub tile_row: bool,
    /// Row length of V and M (floats), bytes from one V_ξν (M_ξν) to the next.
    pub ts: usize,
    pub v_plane: usize,
    pub m_plane: usize,
    pub out_h: usize,
    pub out_w: usize,
    /// Valid output rows of the chunk's last tile row (m unless it is the conv's last,
    /// partial, tile row).
    pub last_rows: usize,
    pub bias: bool,
    pub residual: bool,
    pub activation: Activation,
}

/// Whether the machine-code output transform applies `act` (else the Cranelift
/// transforms run).
pub(crate) fn supports(act: Activation) -> bool {
    supports_activation_with(act, OUTPUT_TEMPS.len())
}

impl TransformSpec {
    fn a(&self) -> usize {
        self.m + 2
    }

    fn lanes(&self) -> usize {
        self.isa.lanes()
    }

    fn vb(&self) -> usize {
        self.lanes() * F32
    }
}

/// Vector operations the transforms need beyond [`Vecs`].
struct Ops {
    v: Vecs,
}

impl Ops {
    fn mov(&self, a: &mut CodeAssembler, d: usize, x: usize) -> AsmResult<()> {
        match self.v.isa {
            Vector::Ymm => a.vmovaps(YMM[d], YMM[x])?,
            Vector::Zmm => a.vmovaps(ZMM[d], ZMM[x])?,
        }
        Ok(())
    }

    fn add(&self, a: &mut CodeAssembler, d: usize, x: usize, y: usize) -> AsmResult<()> {
        Ok(self.v.op(a, VOp::Add, d, x, y)?)
    }

    fn sub(&self, a: &mut CodeAssembler, d: usize, x: usize, y: usize) -> AsmResult<()> {
        Ok(self.v.op(a, VOp::Sub, d, x, y)?)
    }

    /// `d += x · c` with the constant `c` splat in memory.
    fn fma_const(
        &self,
        a: &mut CodeAssembler,
        consts: &mut Consts,
        d: usize,
        x: usize,
        c: f32,
    ) -> AsmResult<()> {
        let m = consts.get(a, c);
        match self.v.isa {
            Vector::Ymm => a.vfmadd231ps(YMM[d], YMM[x], ymmword_ptr(m))?,
            Vector::Zmm => a.vfmadd231ps(ZMM[d], ZMM[x], zmmword_ptr(m))?,
        }
        Ok(())
    }

    /// `o = Bᵀ d` for the (m+2) vectors `d`, into the (m+2) registers `o`, with two
    /// temporaries (the factored forms of the Cranelift path's `input_1d`).
    fn input_1d(
        &self,
        a: &mut CodeAssembler,
        consts: &mut Consts,
        m: usize,
        d: &[usize],
        o: &[usize],
        t: [usize; 2],
    ) -> AsmResult<()> {
        if m == 2 {
            self.sub(a, o[0], d[0], d[2])?;
            self.add(a, o[1], d[1], d[2])?;
            self.sub(a, o[2], d[2], d[1])?;
            return self.sub(a, o[3], d[1], d[3]);
        }
        // r0 = 4·d0 − 5·d2 + d4
        self.mov(a, o[0], d[4])?;
        self.fma_const(a, consts, o[0], d[0], 4.0)?;
        self.fma_const(a, consts, o[0], d[2], -5.0)?;
        // r1 = −4·(d1 + d2) + (d3 + d4)
        self.add(a, t[0], d[1], d[2])?;
        self.add(a, o[1], d[3], d[4])?;
        self.fma_const(a, consts, o[1], t[0], -4.0)?;
        // r2 = 4·(d1 − d2) + (d4 − d3)
        self.sub(a, t[0], d[1], d[2])?;
        self.sub(a, o[2], d[4], d[3])?;
        self.fma_const(a, consts, o[2], t[0], 4.0)?;
        // r3, r4 = ±2·(d3 − d1) + (d4 − d2)
        self.sub(a, t[0], d[3], d[1])?;
        self.sub(a, t[1], d[4], d[2])?;
        self.mov(a, o[3], t[1])?;
        self.fma_const(a, consts, o[3], t[0], 2.0)?;
        self.mov(a, o[4], t[1])?;
        self.fma_const(a, consts, o[4], t[0], -2.0)?;
        // r5 = 4·d1 − 5·d3 + d5
        self.mov(a, o[5], d[5])?;
        self.fma_const(a, consts, o[5], d[1], 4.0)?;
        self.fma_const(a, consts, o[5], d[3], -5.0)
    }

    /// `o = Aᵀ x` for the (m+2) vectors `x`, into the m registers `o`, with four
    /// temporaries (the Cranelift path's `output_1d`).
    fn output_1d(
        &self,
        a: &mut CodeAssembler,
        consts: &mut Consts,
        m: usize,
        x: &[usize],
        o: &[usize],
        t: [usize; 4],
    ) -> AsmResult<()> {
        if m == 2 {
            self.add(a, t[0], x[1], x[2])?;
            self.sub(a, t[1], x[1], x[2])?;
            self.add(a, o[0], x[0], t[0])?;
            return self.sub(a, o[1], t[1], x[3]);
        }
        let [p, q, r, s] = t;
        self.add(a, p, x[1], x[2])?;
        self.sub(a, q, x[1], x[2])?;
        self.add(a, r, x[3], x[4])?;
        self.sub(a, s, x[3], x[4])?;
        self.add(a, o[0], x[0], p)?;
        self.add(a, o[0], o[0], r)?;
        self.mov(a, o[1], q)?;
        self.fma_const(a, consts, o[1], s, 2.0)?;
        self.mov(a, o[2], p)?;
        self.fma_const(a, consts, o[2], r, 4.0)?;
        self.mov(a, o[3], q)?;
        self.fma_const(a, consts, o[3], s, 8.0)?;
        self.add(a, o[3], o[3], x[5])
    }
}

/// Saves rbp and aligns a stage of `bytes` on the stack to 64 bytes (rsp = stage).
fn enter(a: &mut CodeAssembler, saved: &[AsmRegister64], bytes: usize) -> AsmResult<()> {
    a.push(rbp)?;
    a.mov(rbp, rsp)?;
    for r in saved {
        a.push(*r)?;
    }
    a.and(rsp, -64)?;
    a.sub(rsp, imm(bytes.next_multiple_of(64))?)?;
    Ok(())
}

fn leave(a: &mut CodeAssembler, saved: &[AsmRegister64]) -> AsmResult<()> {
    a.lea(rsp, rbp - imm(saved.len() * 8)?)?;
    for r in saved.iter().rev() {
        a.pop(*r)?;
    }
    a.pop(rbp)?;
    a.vzeroupper()?;
    a.ret()?;
    Ok(())
}

fn assemble(a: &mut CodeAssembler) -> Result<Vec<u8>, String> {
    a.assemble(0)
        .map_err(|e| format!("Winograd transform kernel: {e}"))
}

/// The input transform of one chunk: `(phases, V)`, System V; `phases` at the chunk's
/// first tile row (channel 0), `V` at (ξν 0, channel 0, tile 0). With `tile_row`:
/// `(phases, V, groups, phase_row_bytes, channel_bytes)`, the groups of one tile row
/// in phase planes laid out for the run's extents.
pub(crate) fn emit_input(s: &TransformSpec) -> Result<Vec<u8>, String> {
    let mut a = CodeAssembler::new(64).map_err(|e| e.to_string())?;
    match s.tile_row {
        true => input_row_code(&mut a, s),
        false => input_code(&mut a, s),
    }
    .map_err(|AsmError(e)| e)?;
    assemble(&mut a)
}

/// The `tile_row` input transform: as [`input_code`]'s for one tile row, each padded
/// row's phase `p` read at `p · phase_row_bytes` (r12) from a pointer that steps
/// `m · phase_row_bytes` (r13) a row, channels `channel_bytes` (r14) apart.
fn input_row_code(a: &mut CodeAssembler, s: &TransformSpec) -> AsmResult<()> {
    let ops = Ops {
        v: Vecs { isa: s.isa },
    };
    let mut consts = Consts { values: vec![] };
    let (m, an, vb, lanes) = (s.m, s.a(), s.vb(), s.lanes());
    let v_ab = s.v_plane;
    let saved = [rbx, r12, r13, r14, r15];
    enter(a, &saved, an * an * vb)?;
    let mut exit = a.create_label();
    a.mov(rbx, rdx)?;
    a.test(rbx, rbx)?;
    a.jz(exit)?;
    a.mov(r12, rcx)?;
    a.imul_3(r13, rcx, m as i32)?;
    a.mov(r14, r8)?;
    let (d, o): (Vec<usize>, Vec<usize>) = ((0..an).collect(), (an..2 * an).collect());
    let t = [2 * an, 2 * an + 1];
    a.mov(r8, s.channels as u64)?;
    let mut chan_top = a.create_label();
    a.set_label(&mut chan_top)?;
    a.mov(rax, rdi)?;
    a.mov(rdx, rsi)?;
    a.mov(rcx, rbx)?;
    let mut group_top = a.create_label();
    a.set_label(&mut group_top)?;
    // Column pass: t[ξ][s] = Σ_r Bᵀ[ξ][r] d[r][s], d[r][s] at phase s mod m, column
    // s div m of padded row r.
    for col in 0..an {
        match col % m {
            0 => a.mov(r15, rax)?,
            1 => a.lea(r15, rax + r12)?,
            2 => a.lea(r15, rax + r12 * 2)?,
            _ => {
                a.lea(r15, rax + r12 * 2)?;
                a.add(r15, r12)?;
            }
        }
        let off = (col / m) * F32;
        for (r, &dr) in d.iter().enumerate() {
            ops.v.load(a, dr, r15 + imm(off)?, false)?;
            if r + 1 < an {
                a.add(r15, r13)?;
            }
        }
        ops.input_1d(a, &mut consts, m, &d, &o, t)?;
        for (xi, &ox) in o.iter().enumerate() {
            ops.v
                .store(a, rsp + imm((xi * an + col) * vb)?, ox, false)?;
        }
    }
    // Row pass: V[ξ][ν] = Σ_s t[ξ][s] Bᵀ[ν][s].
    for xi in 0..an {
        for (col, &dr) in d.iter().enumerate() {
            ops.v.load(a, dr, rsp + imm((xi * an + col) * vb)?, false)?;
        }
        ops.input_1d(a, &mut consts, m, &d, &o, t)?;
        for (nu, &on) in o.iter().enumerate() {
            ops.v
                .store(a, rdx + imm((xi * an + nu) * v_ab)?, on, false)?;
        }
    }
    a.add(rax, imm(lanes * F32)?)?;
    a.add(rdx, imm(lanes * F32)?)?;
    a.dec(rcx)?;
    a.jnz(group_top)?;
    a.add(rdi, r14)?;
    a.add(rsi, imm(s.ts * F32)?)?;
    a.dec(r8)?;
    a.jnz(chan_top)?;
    a.set_label(&mut exit)?;
    leave(a, &saved)?;
    emit_consts(a, &mut consts, lanes)
}

fn input_code(a: &mut CodeAssembler, s: &TransformSpec) -> AsmResult<()> {
    let ops = Ops {
        v: Vecs { isa: s.isa },
    };
    let mut consts = Consts { values: vec![] };
    let (m, an, vb, lanes) = (s.m, s.a(), s.vb(), s.lanes());
    let wp = m * s.lp;
    let v_ab = s.v_plane;
    enter(a, &[], an * an * vb)?;
    let rows = s.rows;
    let (d, o): (Vec<usize>, Vec<usize>) = ((0..an).collect(), (an..2 * an).collect());
    let t = [2 * an, 2 * an + 1];
    a.mov(r8, s.channels as u64)?;
    let mut chan_top = a.create_label();
    a.set_label(&mut chan_top)?;
    a.mov(r10, rdi)?;
    a.mov(r11, rsi)?;
    a.mov(r9, rows as u64)?;
    let mut row_top = a.create_label();
    a.set_label(&mut row_top)?;
    a.mov(rax, r10)?;
    a.mov(rdx, r11)?;
    a.mov(rcx, s.groups as u64)?;
    let mut group_top = a.create_label();
    a.set_label(&mut group_top)?;
    // Column pass: t[ξ][s] = Σ_r Bᵀ[ξ][r] d[r][s], d[r][s] at phase s mod m, column
    // s div m of padded row r.
    for col in 0..an {
        for (r, &dr) in d.iter().enumerate() {
            let off = ((r * m + col % m) * s.lp + col / m) * F32;
            ops.v.load(a, dr, rax + imm(off)?, false)?;
        }
        ops.input_1d(a, &mut consts, m, &d, &o, t)?;
        for (xi, &ox) in o.iter().enumerate() {
            ops.v
                .store(a, rsp + imm((xi * an + col) * vb)?, ox, false)?;
        }
    }
    // Row pass: V[ξ][ν] = Σ_s t[ξ][s] Bᵀ[ν][s].
    for xi in 0..an {
        for (col, &dr) in d.iter().enumerate() {
            ops.v.load(a, dr, rsp + imm((xi * an + col) * vb)?, false)?;
        }
        ops.input_1d(a, &mut consts, m, &d, &o, t)?;
        for (nu, &on) in o.iter().enumerate() {
            ops.v
                .store(a, rdx + imm((xi * an + nu) * v_ab)?, on, false)?;
        }
    }
    a.add(rax, imm(lanes * F32)?)?;
    a.add(rdx, imm(lanes * F32)?)?;
    a.dec(rcx)?;
    a.jnz(group_top)?;
    a.add(r10, imm(m * wp * F32)?)?;
    a.add(r11, imm(s.tw * F32)?)?;
    a.dec(r9)?;
    a.jnz(row_top)?;
    a.add(rdi, imm(s.channel_bytes)?)?;
    a.add(rsi, imm(s.ts * F32)?)?;
    a.dec(r8)?;
    a.jnz(chan_top)?;
    leave(a, &[])?;
    emit_consts(a, &mut consts, lanes)
}

/// Callee-saved registers the output kernel uses.
const OUT_SAVED: [AsmRegister64; 5] = [rbx, r12, r13, r14, r15];

/// The output transform of one chunk: `(M, Y, bias, R)`, System V; `M` at (ξν 0, map 0,
/// tile 0), `Y` and `R` at (map 0, the chunk's first output row); bias and R are
/// ignored unless the spec has them. With `tile_row`: `(M, Y, bias, R, counts)`, `M`
/// at the tile row's first tile, `Y` and `R` at its first output row and column, and
/// `counts` the address of four i64: the valid output rows (1 to m) and columns of the
/// tile row, the bytes of an output row and of an output plane.
pub(crate) fn emit_output(s: &TransformSpec) -> Result<Vec<u8>, String> {
    let mut a = CodeAssembler::new(64).map_err(|e| e.to_string())?;
    let mut e = OutputEmitter {
        s,
        ops: Ops {
            v: Vecs { isa: s.isa },
        },
        consts: Consts { values: vec![] },
        masks: TailMasks::default(),
        indices: vec![],
    };
    e.code(&mut a).map_err(|AsmError(e)| e)?;
    assemble(&mut a)
}

struct OutputEmitter<'s> {
    s: &'s TransformSpec,
    ops: Ops,
    consts: Consts,
    masks: TailMasks,
    /// Permutation index vectors (AVX-512), placed after the code.
    indices: Vec<([u32; 16], CodeLabel)>,
}

/// Free registers of the output epilogue's activation.
const OUTPUT_TEMPS: [usize; 2] = [12, 13];

/// Frame slots (i64) of the `tile_row` output kernel after its stage: the four counts
/// of its arguments, then the row's whole groups and its columns after them.
const ROWS_SLOT: usize = 0;
const ROW_BYTES_SLOT: usize = 2;
const PLANE_SLOT: usize = 3;
const GROUPS_SLOT: usize = 4;
const REST_SLOT: usize = 5;
const COUNT_SLOTS: usize = 6;

/// Which columns of a group of tiles the `tile_row` output kernel stores.
#[derive(Clone, Copy, PartialEq)]
enum Columns {
    Whole,
    /// The frame's rest of the row's valid columns.
    Counted,
}

/// Register of the splat bias (AVX2 keeps its tail mask in ymm15).
fn bias_reg(isa: Vector) -> usize {
    match isa {
        Vector::Ymm => 14,
        Vector::Zmm => 15,
    }
}

impl OutputEmitter<'_> {
    fn code(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        if self.s.tile_row {
            return self.tile_row_code(a);
        }
        let s = self.s;
        let (an, m, vb) = (s.a(), s.m, s.vb());
        enter(a, &OUT_SAVED, (an * m + m * m) * vb)?;
        let plane = s.out_h * s.out_w * F32;
        let partial = s.last_rows < m;
        let full_rows = s.rows - usize::from(partial);
        a.mov(r8, s.maps as u64)?;
        let mut map_top = a.create_label();
        a.set_label(&mut map_top)?;
        if s.bias {
            self.ops.v.broadcast(a, bias_reg(s.isa), rdx + 0)?;
        }
        a.mov(r10, rdi)?;
        a.mov(r11, rsi)?;
        a.mov(r12, rcx)?;
        if full_rows > 0 {
            a.mov(r9, full_rows as u64)?;
            let mut row_top = a.create_label();
            a.set_label(&mut row_top)?;
            self.tile_row(a, m)?;
            a.dec(r9)?;
            a.jnz(row_top)?;
        }
        if partial {
            self.tile_row(a, s.last_rows)?;
        }
        a.add(rdi, imm(s.ts * F32)?)?;
        a.add(rsi, imm(plane)?)?;
        a.add(rcx, imm(plane)?)?;
        a.add(rdx, F32 as i32)?;
        a.dec(r8)?;
        a.jnz(map_top)?;
        leave(a, &OUT_SAVED)?;
        self.data(a)
    }

    /// Constants, masks and permutation indices, after the code.
    fn data(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        emit_consts(a, &mut self.consts, self.s.lanes())?;
        self.masks.emit_table(a)?;
        for (idx, mut l) in std::mem::take(&mut self.indices) {
            a.set_label(&mut l)?;
            a.dd(&idx)?;
        }
        Ok(())
    }

    /// The `tile_row` kernel: for each map, the row's whole groups of tiles, then the
    /// group where its valid columns end (masked by their count), each output row of a
    /// group stored only when it is one of the valid rows.
    fn tile_row_code(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        let s = self.s;
        let (an, m, vb, lanes) = (s.a(), s.m, s.vb(), s.lanes());
        let span = lanes * m;
        let stage = (an * m + m * m) * vb;
        enter(a, &OUT_SAVED, stage + COUNT_SLOTS * 8)?;
        // The counts, then the whole groups and the columns after them, in the frame.
        for k in 0..4 {
            a.mov(rax, qword_ptr(r8 + k * 8))?;
            a.mov(qword_ptr(rsp + imm(stage + k as usize * 8)?), rax)?;
        }
        a.mov(rax, qword_ptr(r8 + 8))?;
        a.shr(rax, span.trailing_zeros())?;
        a.mov(qword_ptr(rsp + imm(stage + GROUPS_SLOT * 8)?), rax)?;
        a.mov(rax, qword_ptr(r8 + 8))?;
        a.and(rax, imm(span - 1)?)?;
        a.mov(qword_ptr(rsp + imm(stage + REST_SLOT * 8)?), rax)?;
        a.mov(r8, s.maps as u64)?;
        let mut map_top = a.create_label();
        a.set_label(&mut map_top)?;
        if s.bias {
            self.ops.v.broadcast(a, bias_reg(s.isa), rdx + 0)?;
        }
        a.mov(r14, rdi)?;
        a.mov(r15, rsi)?;
        a.mov(rbx, rcx)?;
        let mut rest = a.create_label();
        a.mov(r13, qword_ptr(rsp + imm(stage + GROUPS_SLOT * 8)?))?;
        a.test(r13, r13)?;
        a.jz(rest)?;
        let mut top = a.create_label();
        a.set_label(&mut top)?;
        self.transform_group(a)?;
        self.store_group(a, Columns::Whole, stage)?;
        a.add(r14, imm(lanes * F32)?)?;
        a.add(r15, imm(span * F32)?)?;
        a.add(rbx, imm(span * F32)?)?;
        a.dec(r13)?;
        a.jnz(top)?;
        a.set_label(&mut rest)?;
        let mut next_map = a.create_label();
        a.cmp(qword_ptr(rsp + imm(stage + REST_SLOT * 8)?), 0)?;
        a.je(next_map)?;
        self.transform_group(a)?;
        self.store_group(a, Columns::Counted, stage)?;
        a.set_label(&mut next_map)?;
        a.add(rdi, imm(s.ts * F32)?)?;
        a.add(rsi, qword_ptr(rsp + imm(stage + PLANE_SLOT * 8)?))?;
        a.add(rcx, qword_ptr(rsp + imm(stage + PLANE_SLOT * 8)?))?;
        a.add(rdx, F32 as i32)?;
        a.dec(r8)?;
        a.jnz(map_top)?;
        leave(a, &OUT_SAVED)?;
        self.data(a)
    }

    /// `Aᵀ M A` of the group of tiles at r14 into the stage: output row i, column j of
    /// every tile at `rsp + (an·m + i·m + j)·vb`.
    fn transform_group(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        let s = self.s;
        let (an, m, vb) = (s.a(), s.m, s.vb());
        let m_ab = s.m_plane;
        let x: Vec<usize> = (0..an).collect();
        let o: Vec<usize> = (6..6 + m).collect();
        let t = [10, 11, 12, 13];
        // Row pass: z[ξ][j] = Σ_ν Aᵀ[j][ν] M[ξ][ν], staged at z[ξ·m + j].
        for xi in 0..an {
            for (nu, &xr) in x.iter().enumerate() {
                self.ops
                    .v
                    .load(a, xr, r14 + imm((xi * an + nu) * m_ab)?, false)?;
            }
            self.ops.output_1d(a, &mut self.consts, m, &x, &o, t)?;
            for (j, &oj) in o.iter().enumerate() {
                self.ops
                    .v
                    .store(a, rsp + imm((xi * m + j) * vb)?, oj, false)?;
            }
        }
        // Column pass: out[i][j] = Σ_ξ Aᵀ[i][ξ] z[ξ][j], staged after z.
        let o_at = an * m * vb;
        for j in 0..m {
            for (xi, &xr) in x.iter().enumerate() {
                self.ops
                    .v
                    .load(a, xr, rsp + imm((xi * m + j) * vb)?, false)?;
            }
            self.ops.output_1d(a, &mut self.consts, m, &x, &o, t)?;
            for (i, &oi) in o.iter().enumerate() {
                self.ops
                    .v
                    .store(a, rsp + imm(o_at + (i * m + j) * vb)?, oi, false)?;
            }
        }
        Ok(())
    }

    /// Stores the staged group (r15 = Y, rbx = R at its first row and column) with
    /// bias, residual and activation: its valid rows (the frame's count) and all
    /// `lanes·m` columns or the frame's rest of them. Uses r9 and r12 for the rows.
    fn store_group(
        &mut self,
        a: &mut CodeAssembler,
        cols: Columns,
        counts: usize,
    ) -> AsmResult<()> {
        let s = self.s;
        let (an, m, vb, lanes) = (s.a(), s.m, s.vb(), s.lanes());
        let o_at = an * m * vb;
        let mut done = a.create_label();
        a.mov(r9, r15)?;
        a.mov(r12, rbx)?;
        for i in 0..m {
            if i > 0 {
                a.cmp(qword_ptr(rsp + imm(counts + ROWS_SLOT * 8)?), imm(i)?)?;
                a.jbe(done)?;
                a.add(r9, qword_ptr(rsp + imm(counts + ROW_BYTES_SLOT * 8)?))?;
                a.add(r12, qword_ptr(rsp + imm(counts + ROW_BYTES_SLOT * 8)?))?;
            }
            for j in 0..m {
                self.ops
                    .v
                    .load(a, j, rsp + imm(o_at + (i * m + j) * vb)?, false)?;
            }
            let outs = self.tiles_to_columns(a)?;
            for (q, &r) in outs.iter().enumerate() {
                let off = imm(q * lanes * F32)?;
                if cols == Columns::Whole {
                    self.store_output(a, r, (r9 + off, r12 + off), false)?;
                    continue;
                }
                // Lanes of this vector inside the row: rest − q·lanes. A whole vector
                // is stored plainly: a masked store (vmaskmovps) costs tens of cycles
                // on AMD Zen, and only a row's last vector needs one.
                let (mut partial, mut stored) = (a.create_label(), a.create_label());
                a.mov(rax, qword_ptr(rsp + imm(counts + REST_SLOT * 8)?))?;
                a.sub(rax, imm(q * lanes)?)?;
                a.cmp(rax, lanes as i32)?;
                a.jl(partial)?;
                self.store_output(a, r, (r9 + off, r12 + off), false)?;
                a.jmp(stored)?;
                a.set_label(&mut partial)?;
                a.xor(r10d, r10d)?;
                a.cmp(rax, 0)?;
                a.cmovl(rax, r10)?;
                self.masks.set_counted(a, s.isa, k1, AVX2_MASK, rax, r10)?;
                self.store_output(a, r, (r9 + off, r12 + off), true)?;
                a.set_label(&mut stored)?;
                a.nop()?;
            }
        }
        a.set_label(&mut done)?;
        // The code after may open with a label of its own.
        a.nop()?;
        Ok(())
    }

    /// One tile row (r10 = M, r11 = Y, r12 = R at its start), `rows` valid output rows;
    /// advances the three pointers to the next tile row.
    fn tile_row(&mut self, a: &mut CodeAssembler, rows: usize) -> AsmResult<()> {
        let s = self.s;
        let (lanes, m) = (s.lanes(), s.m);
        let span = lanes * m;
        let (full_groups, rem_cols) = (s.out_w / span, s.out_w % span);
        a.mov(r14, r10)?;
        a.mov(r15, r11)?;
        a.mov(rbx, r12)?;
        if full_groups > 0 {
            a.mov(r13, full_groups as u64)?;
            let mut top = a.create_label();
            a.set_label(&mut top)?;
            self.group(a, rows, span)?;
            a.add(r14, imm(lanes * F32)?)?;
            a.add(r15, imm(span * F32)?)?;
            a.add(rbx, imm(span * F32)?)?;
            a.dec(r13)?;
            a.jnz(top)?;
        }
        if rem_cols > 0 {
            self.group(a, rows, rem_cols)?;
        }
        a.add(r10, imm(s.tw * F32)?)?;
        a.add(r11, imm(m * s.out_w * F32)?)?;
        a.add(r12, imm(m * s.out_w * F32)?)?;
        Ok(())
    }

    /// One group of tiles (r14 = M, r15 = Y, rbx = R), `rows` × `cols` valid outputs.
    fn group(&mut self, a: &mut CodeAssembler, rows: usize, cols: usize) -> AsmResult<()> {
        let s = self.s;
        let (an, m, vb, lanes) = (s.a(), s.m, s.vb(), s.lanes());
        self.transform_group(a)?;
        let o_at = an * m * vb;
        for i in 0..rows {
            for j in 0..m {
                self.ops
                    .v
                    .load(a, j, rsp + imm(o_at + (i * m + j) * vb)?, false)?;
            }
            let outs = self.tiles_to_columns(a)?;
            for (q, &r) in outs.iter().enumerate() {
                let first = q * lanes;
                if first >= cols {
                    break;
                }
                let valid = (cols - first).min(lanes);
                let masked = valid < lanes;
                if masked {
                    self.masks.set(a, s.isa, k1, AVX2_MASK, valid)?;
                }
                let off = imm((i * s.out_w + first) * F32)?;
                self.store_output(a, r, (r15 + off, rbx + off), masked)?;
            }
        }
        Ok(())
    }

    /// Stores output vector `r` at `y` after the bias, the residual at `res` (through
    /// register 12) and the activation; `masked` by the mask register.
    fn store_output(
        &mut self,
        a: &mut CodeAssembler,
        r: usize,
        (y, res): (AsmMemoryOperand, AsmMemoryOperand),
        masked: bool,
    ) -> AsmResult<()> {
        let s = self.s;
        if s.bias {
            self.ops.add(a, r, r, bias_reg(s.isa))?;
        }
        if s.residual {
            self.ops.v.load(a, 12, res, masked)?;
            self.ops.add(a, r, r, 12)?;
        }
        activate(
            a,
            &self.ops.v,
            &mut self.consts,
            s.activation,
            &[r],
            &OUTPUT_TEMPS,
        )?;
        Ok(self.ops.v.store(a, y, r, masked)?)
    }

    /// Transposes registers 0..m (lane t = tile t, register j = column j of each tile)
    /// into m registers of consecutive output columns; returns their numbers.
    fn tiles_to_columns(&mut self, a: &mut CodeAssembler) -> AsmResult<Vec<usize>> {
        let m = self.s.m;
        match self.s.isa {
            Vector::Zmm => {
                // P_h[v] = o_{v mod 2}[8h + v div 2]: the pairs (o0, o1) (and (o2, o3))
                // of tiles 8h .. 8h+8. For m = 2 those are the output vectors.
                let pair_idx = |h: usize| -> [u32; 16] {
                    std::array::from_fn(|v| ((v % 2) * 16 + h * 8 + v / 2) as u32)
                };
                let pairs = [4, 5, 6, 7];
                for (k, src) in [(0usize, 0usize), (2, 2)] {
                    if src >= m {
                        break;
                    }
                    for h in 0..2 {
                        let p = pairs[k + h];
                        self.permute(a, p, pair_idx(h), src, src + 1)?;
                    }
                }
                if m == 2 {
                    return Ok(vec![4, 5]);
                }
                // out_q[u] = o_{u mod 4}[4q + u div 4], from P01_{q div 2} (u mod 4 < 2)
                // and P23_{q div 2}.
                let quad_idx = |q: usize| -> [u32; 16] {
                    std::array::from_fn(|u| {
                        let j = u % 4;
                        ((if j < 2 { 0 } else { 16 }) + 2 * ((q % 2) * 4 + u / 4) + j % 2) as u32
                    })
                };
                for q in 0..4 {
                    self.permute(a, 8 + q, quad_idx(q), pairs[q / 2], pairs[2 + q / 2])?;
                }
                Ok(vec![8, 9, 10, 11])
            }
            Vector::Ymm => {
                a.vunpcklps(YMM[4], YMM[0], YMM[1])?;
                a.vunpckhps(YMM[5], YMM[0], YMM[1])?;
                if m == 2 {
                    // lo = tiles 0,1 | 4,5; hi = tiles 2,3 | 6,7.
                    a.vperm2f128(YMM[8], YMM[4], YMM[5], 0x20)?;
                    a.vperm2f128(YMM[9], YMM[4], YMM[5], 0x31)?;
                    return Ok(vec![8, 9]);
                }
                a.vunpcklps(YMM[6], YMM[2], YMM[3])?;
                a.vunpckhps(YMM[7], YMM[2], YMM[3])?;
                // u_k = tile k | tile k + 4, all four columns.
                a.vunpcklpd(YMM[0], YMM[4], YMM[6])?;
                a.vunpckhpd(YMM[1], YMM[4], YMM[6])?;
                a.vunpcklpd(YMM[2], YMM[5], YMM[7])?;
                a.vunpckhpd(YMM[3], YMM[5], YMM[7])?;
                a.vperm2f128(YMM[8], YMM[0], YMM[1], 0x20)?;
                a.vperm2f128(YMM[9], YMM[2], YMM[3], 0x20)?;
                a.vperm2f128(YMM[10], YMM[0], YMM[1], 0x31)?;
                a.vperm2f128(YMM[11], YMM[2], YMM[3], 0x31)?;
                Ok(vec![8, 9, 10, 11])
            }
        }
    }

    /// `d[u] = (x ++ y)[idx[u]]` (AVX-512 vpermi2ps; the index vector is loaded into d).
    fn permute(
        &mut self,
        a: &mut CodeAssembler,
        d: usize,
        idx: [u32; 16],
        x: usize,
        y: usize,
    ) -> AsmResult<()> {
        let label = match self.indices.iter().find(|(i, _)| *i == idx) {
            Some((_, l)) => *l,
            None => {
                let l = a.create_label();
                self.indices.push((idx, l));
                l
            }
        };
        a.vmovups(ZMM[d], zmmword_ptr(label))?;
        a.vpermi2ps(ZMM[d], ZMM[x], ZMM[y])?;
        Ok(())
    }
}
