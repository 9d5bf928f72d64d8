//! Winograd F(2×2, 3×3) transforms for whole small planes on AVX-512:
//! `f32-winograd-f2-plane16-input-avx512f`, `f32-winograd-f2-plane16-products-avx512f`
//! and `f32-winograd-f2-plane16-output-avx512f`.
//!
//! A conv whose output has at most 16 F(2×2) tiles (an 8×8 map) fits all its tiles in
//! one zmm, so every vector of the transforms holds a whole channel (map). The input
//! kernel reads each channel's plane unpadded into up to 8 zmm and gathers the 16 tile
//! vectors `d_ij` (lane t = input pixel (2·ty + i − pad_top, 2·tx + j − pad_left) of
//! tile t, zero outside the plane) with `vpermi2ps` under zeroing masks, one per pair of
//! plane registers; the output kernel scatters the four product vectors `o_ab` back
//! into the plane's rows the same way, then adds bias and residual and applies the
//! activation on the plane's own vectors.
//!
//! Why: the general transforms ([`super::winograd_x86`], and the Cranelift ones for
//! rows of up to 4 tiles) work on one tile row at a time behind a padded copy and a
//! phase split, all of it per channel: on digits_cnn's 16→32 conv on 8×8 those
//! Cranelift loops took about as long as its 16 GEMMs (`scripts/profile_model.py
//! --symbols`: 31% of the model's samples in the node's own code, 30% in the GEMM),
//! for a few hundred additions.
//!
//! Layouts are the Winograd path's (`conv/winograd.rs`): `V_ξν[c][t]` and `M_ξν[map][t]`
//! with rows of `ts` floats, planes `v_plane` / `m_plane` bytes apart; input and output
//! in NCHW.

use iced_x86::code_asm::*;

use super::activation::{activate, supports_activation_with};
use super::asm::{emit_consts, imm, AsmError, AsmResult, Consts, VOp, Vecs, Vector, ZMM};
use crate::ops::Activation;

const F32: usize = 4;
const LANES: usize = 16;
/// Tiles of F(2×2): 4×4 inputs, 2×2 outputs.
const A: usize = 4;
const M: usize = 2;
/// Plane registers the input kernel can hold (128 floats).
const MAX_PLANE_VECS: usize = 8;
/// Free registers of the epilogue's activation.
const OUTPUT_TEMPS: [usize; 4] = [20, 21, 22, 23];

/// One conv's plane transforms; sizes in floats unless noted.
#[derive(Clone, Debug)]
pub(crate) struct PlaneSpec {
    pub channels: usize,
    pub maps: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub pad_top: usize,
    pub pad_left: usize,
    pub out_h: usize,
    pub out_w: usize,
    /// Row length of V and M (floats), bytes from one V_ξν (M_ξν) to the next.
    pub ts: usize,
    pub v_plane: usize,
    pub m_plane: usize,
    pub bias: bool,
    pub residual: bool,
    pub activation: Activation,
}

impl PlaneSpec {
    fn tiles_w(&self) -> usize {
        self.out_w.div_ceil(M)
    }

    fn tiles(&self) -> usize {
        self.out_h.div_ceil(M) * self.tiles_w()
    }
}

/// Whether the plane kernels take a conv of these sizes: at most 16 tiles, an input
/// plane of at most 128 floats (8 zmm) and an activation the epilogue has.
pub(crate) fn applies(
    in_h: usize,
    in_w: usize,
    out_h: usize,
    out_w: usize,
    act: Activation,
) -> bool {
    out_h.div_ceil(M) * out_w.div_ceil(M) <= LANES
        && in_h * in_w <= MAX_PLANE_VECS * LANES
        && supports_activation_with(act, OUTPUT_TEMPS.len())
}

/// Constant data after the code: permutation indices and opmasks.
#[derive(Default)]
struct Tables {
    indices: Vec<([u32; 16], CodeLabel)>,
    masks: Vec<(u16, CodeLabel)>,
}

impl Tables {
    fn index(&mut self, a: &mut CodeAssembler, idx: [u32; 16]) -> CodeLabel {
        if let Some((_, l)) = self.indices.iter().find(|(i, _)| *i == idx) {
            return *l;
        }
        let l = a.create_label();
        self.indices.push((idx, l));
        l
    }

    fn mask(&mut self, a: &mut CodeAssembler, bits: u16) -> CodeLabel {
        if let Some((_, l)) = self.masks.iter().find(|(b, _)| *b == bits) {
            return *l;
        }
        let l = a.create_label();
        self.masks.push((bits, l));
        l
    }

    fn emit(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        for (idx, mut l) in std::mem::take(&mut self.indices) {
            a.set_label(&mut l)?;
            a.dd(&idx)?;
        }
        for (bits, mut l) in std::mem::take(&mut self.masks) {
            a.set_label(&mut l)?;
            a.dw(&[bits])?;
        }
        Ok(())
    }
}

/// `d[u] = plane[src[u]]` (None: 0) for the plane held in registers `plane[0..]`, 16
/// floats each: one zeroing `vpermi2ps` per register pair that `src` reads, OR-ed
/// together through `tmp`.
fn gather(
    a: &mut CodeAssembler,
    t: &mut Tables,
    d: usize,
    tmp: usize,
    plane: &[usize],
    src: &[Option<usize>; 16],
) -> AsmResult<()> {
    let mut first = true;
    for (p, pair) in plane.chunks(2).enumerate() {
        let bits = (0..16).fold(0u16, |m, u| match src[u] {
            Some(s) if s / 32 == p => m | 1 << u,
            _ => m,
        });
        if bits == 0 {
            continue;
        }
        let idx = std::array::from_fn(|u| src[u].map_or(0, |s| (s % 32) as u32));
        let (il, ml) = (t.index(a, idx), t.mask(a, bits));
        let r = if first { d } else { tmp };
        a.vmovups(ZMM[r], zmmword_ptr(il))?;
        a.kmovw(k2, word_ptr(ml))?;
        // A lone register of the plane pairs with itself: its indices stay below 16.
        let hi = pair.get(1).copied().unwrap_or(pair[0]);
        a.vpermi2ps(ZMM[r].k2().z(), ZMM[pair[0]], ZMM[hi])?;
        if !first {
            a.vpord(ZMM[d], ZMM[d], ZMM[tmp])?;
        }
        first = false;
    }
    if first {
        a.vpxord(ZMM[d], ZMM[d], ZMM[d])?;
    }
    Ok(())
}

/// One kernel's bytes: `code` emitted into a fresh assembler and assembled.
fn emit(
    what: &str,
    code: impl FnOnce(&mut CodeAssembler) -> AsmResult<()>,
) -> Result<Vec<u8>, String> {
    let mut a = CodeAssembler::new(64).map_err(|e| e.to_string())?;
    code(&mut a).map_err(|AsmError(e)| e)?;
    a.assemble(0)
        .map_err(|e| format!("Winograd plane {what} kernel: {e}"))
}

/// Sets k1 to the first `n` lanes, for the plane's last, partial vector.
fn tail_mask(a: &mut CodeAssembler, n: usize) -> AsmResult<()> {
    a.mov(eax, ((1u32 << n) - 1) as i32)?;
    a.kmovw(k1, eax)?;
    Ok(())
}

/// The input transform: `(X, V)`, System V; X at channel 0 of the batch item, V at
/// (ξν 0, channel 0, tile 0).
pub(crate) fn emit_input(s: &PlaneSpec) -> Result<Vec<u8>, String> {
    emit("input", |a| input_code(a, s))
}

fn input_code(a: &mut CodeAssembler, s: &PlaneSpec) -> AsmResult<()> {
    let v = Vecs { isa: Vector::Zmm };
    let mut t = Tables::default();
    let n_in = s.in_h * s.in_w;
    let vecs = n_in.div_ceil(LANES);
    let tail = n_in % LANES;
    // Registers: the plane 0..8, d 8..12, t[ξ][j] 12..28, gather temporary 28.
    let plane: Vec<usize> = (0..vecs).collect();
    let d = [8, 9, 10, 11];
    let tr = |xi: usize, j: usize| 12 + xi * A + j;
    let tmp = 28;
    let (tiles, tw) = (s.tiles(), s.tiles_w());
    if tail != 0 {
        tail_mask(a, tail)?;
    }
    a.mov(r8, s.channels as u64)?;
    let mut top = a.create_label();
    a.set_label(&mut top)?;
    for (q, &r) in plane.iter().enumerate() {
        let masked = tail != 0 && q + 1 == vecs;
        v.load(a, r, rdi + imm(q * LANES * F32)?, masked)?;
    }
    // Column pass: t[ξ][j] = Σ_i Bᵀ[ξ][i] d[i][j], Bᵀ = [1 0 -1 0; 0 1 1 0; 0 -1 1 0;
    // 0 1 0 -1], each d[i][j] gathered from the plane.
    for j in 0..A {
        for (i, &dr) in d.iter().enumerate() {
            let src: [Option<usize>; 16] = std::array::from_fn(|u| {
                if u >= tiles {
                    return None;
                }
                let y = (2 * (u / tw) + i).checked_sub(s.pad_top)?;
                let x = (2 * (u % tw) + j).checked_sub(s.pad_left)?;
                (y < s.in_h && x < s.in_w).then_some(y * s.in_w + x)
            });
            gather(a, &mut t, dr, tmp, &plane, &src)?;
        }
        input_1d(a, &v, d, [tr(0, j), tr(1, j), tr(2, j), tr(3, j)])?;
    }
    // Row pass: V[ξ][ν] = Σ_j t[ξ][j] Bᵀ[ν][j], into their V planes.
    for xi in 0..A {
        input_1d(a, &v, [tr(xi, 0), tr(xi, 1), tr(xi, 2), tr(xi, 3)], d)?;
        for (nu, &r) in d.iter().enumerate() {
            v.store(a, rsi + imm((xi * A + nu) * s.v_plane)?, r, false)?;
        }
    }
    a.add(rdi, imm(n_in * F32)?)?;
    a.add(rsi, imm(s.ts * F32)?)?;
    a.dec(r8)?;
    a.jnz(top)?;
    a.vzeroupper()?;
    a.ret()?;
    t.emit(a)
}

/// `o = Bᵀ x` of F(2×2) for four vectors.
fn input_1d(a: &mut CodeAssembler, v: &Vecs, x: [usize; 4], o: [usize; 4]) -> AsmResult<()> {
    v.op(a, VOp::Sub, o[0], x[0], x[2])?;
    v.op(a, VOp::Add, o[1], x[1], x[2])?;
    v.op(a, VOp::Sub, o[2], x[2], x[1])?;
    v.op(a, VOp::Sub, o[3], x[1], x[3])?;
    Ok(())
}

/// `o = Aᵀ x` of F(2×2), Aᵀ = [1 1 1 0; 0 1 -1 -1], `tmp` clobbered.
fn output_1d(
    a: &mut CodeAssembler,
    v: &Vecs,
    x: [usize; 4],
    o: [usize; 2],
    tmp: usize,
) -> AsmResult<()> {
    v.op(a, VOp::Add, tmp, x[1], x[2])?;
    v.op(a, VOp::Sub, o[1], x[1], x[2])?;
    v.op(a, VOp::Sub, o[1], o[1], x[3])?;
    v.op(a, VOp::Add, o[0], x[0], tmp)?;
    Ok(())
}

/// The output transform: `(M, Y, bias, R)`, System V; M at (ξν 0, map 0, tile 0), Y and
/// R at map 0 of the batch item; bias and R are ignored unless the spec has them.
pub(crate) fn emit_output(s: &PlaneSpec) -> Result<Vec<u8>, String> {
    emit("output", |a| output_code(a, s))
}

fn output_code(a: &mut CodeAssembler, s: &PlaneSpec) -> AsmResult<()> {
    let v = Vecs { isa: Vector::Zmm };
    let mut t = Tables::default();
    let mut consts = Consts { values: vec![] };
    let n_out = s.out_h * s.out_w;
    let vecs = n_out.div_ceil(LANES);
    let tail = n_out % LANES;
    let tw = s.tiles_w();
    // Registers: M loads 0..4, z[ξ][j] 4..12, o[a][b] 12..16, the plane's vectors
    // 16..20, temporaries 20..24, bias 24.
    let x = [0, 1, 2, 3];
    let z = |xi: usize, j: usize| 4 + xi * M + j;
    let o = |i: usize, j: usize| 12 + i * M + j;
    let out: Vec<usize> = (16..16 + vecs).collect();
    let (tmp, bias) = (20, 24);
    if tail != 0 {
        tail_mask(a, tail)?;
    }
    a.mov(r8, s.maps as u64)?;
    let mut top = a.create_label();
    a.set_label(&mut top)?;
    // Row pass: z[ξ][j] = Σ_ν Aᵀ[j][ν] M[ξ][ν].
    for xi in 0..A {
        for (nu, &r) in x.iter().enumerate() {
            v.load(a, r, rdi + imm((xi * A + nu) * s.m_plane)?, false)?;
        }
        output_1d(a, &v, x, [z(xi, 0), z(xi, 1)], tmp)?;
    }
    // Column pass: o[i][j] = Σ_ξ Aᵀ[i][ξ] z[ξ][j].
    for j in 0..M {
        output_1d(
            a,
            &v,
            [z(0, j), z(1, j), z(2, j), z(3, j)],
            [o(0, j), o(1, j)],
            tmp,
        )?;
    }
    // Scatter: plane float p (row y, column x) is o[y mod 2][x mod 2] of tile
    // (y div 2, x div 2); o[i][0] and o[i][1] are pair i of the gather's registers.
    let pairs = [o(0, 0), o(0, 1), o(1, 0), o(1, 1)];
    for (q, &r) in out.iter().enumerate() {
        let src: [Option<usize>; 16] = std::array::from_fn(|u| {
            let p = q * LANES + u;
            (p < n_out).then(|| {
                let (y, x) = (p / s.out_w, p % s.out_w);
                ((y % 2) * 2 + x % 2) * LANES + (y / 2) * tw + x / 2
            })
        });
        gather(a, &mut t, r, tmp, &pairs, &src)?;
    }
    if s.bias {
        v.broadcast(a, bias, rdx + 0)?;
    }
    for (q, &r) in out.iter().enumerate() {
        let masked = tail != 0 && q + 1 == vecs;
        let off = imm(q * LANES * F32)?;
        if s.bias {
            v.op(a, VOp::Add, r, r, bias)?;
        }
        if s.residual {
            v.load(a, tmp, rcx + off, masked)?;
            v.op(a, VOp::Add, r, r, tmp)?;
        }
    }
    activate(a, &v, &mut consts, s.activation, &out, &OUTPUT_TEMPS)?;
    for (q, &r) in out.iter().enumerate() {
        let masked = tail != 0 && q + 1 == vecs;
        v.store(a, rsi + imm(q * LANES * F32)?, r, masked)?;
    }
    a.add(rdi, imm(s.ts * F32)?)?;
    a.add(rsi, imm(n_out * F32)?)?;
    if s.residual {
        a.add(rcx, imm(n_out * F32)?)?;
    }
    if s.bias {
        a.add(rdx, F32 as i32)?;
    }
    a.dec(r8)?;
    a.jnz(top)?;
    a.vzeroupper()?;
    a.ret()?;
    emit_consts(a, &mut consts, LANES)?;
    t.emit(a)
}

/// Accumulators of one block of maps, and V registers per channel chunk.
const MAP_BLOCK: usize = 16;
const CHANNEL_CHUNK: usize = 12;

/// The 16 products `M_ξν = U_ξν · V_ξν`: `(U, V, M)`, System V; U in the layout of
/// `U[ξν][map][channel]` (not packed), V and M at ξν 0.
///
/// Why not the general GEMM kernel: with N = 16 tiles (one zmm) and K = channels
/// (16 on digits_cnn), its 8 × 1-vector tiles do one vector load and eight broadcasts
/// per eight FMAs and keep only eight accumulators, each a chain of K dependent FMAs;
/// it took 37% of digits_cnn's samples for 8192 FMAs. Here a block of 16 maps
/// accumulates at once, each V vector is loaded once per block, and the weights come as
/// embedded broadcasts (`vfmadd231ps zmm, zmm, [U]{1to16}`), one load per FMA.
pub(crate) fn emit_products(s: &PlaneSpec) -> Result<Vec<u8>, String> {
    emit("products", |a| products_code(a, s))
}

fn products_code(a: &mut CodeAssembler, s: &PlaneSpec) -> AsmResult<()> {
    let rows = MAP_BLOCK.min(s.maps);
    let (blocks, rem) = (s.maps / rows, s.maps % rows);
    a.mov(r8, (A * A) as u64)?;
    let mut top = a.create_label();
    a.set_label(&mut top)?;
    a.mov(r9, rdi)?;
    a.mov(r10, rdx)?;
    if blocks > 0 {
        a.mov(r11, blocks as u64)?;
        let mut block_top = a.create_label();
        a.set_label(&mut block_top)?;
        map_block(a, s, rows)?;
        a.add(r9, imm(rows * s.channels * F32)?)?;
        a.add(r10, imm(rows * s.ts * F32)?)?;
        a.dec(r11)?;
        a.jnz(block_top)?;
    }
    if rem > 0 {
        map_block(a, s, rem)?;
    }
    a.add(rdi, imm(s.maps * s.channels * F32)?)?;
    a.add(rsi, imm(s.v_plane)?)?;
    a.add(rdx, imm(s.m_plane)?)?;
    a.dec(r8)?;
    a.jnz(top)?;
    a.vzeroupper()?;
    a.ret()?;
    Ok(())
}

/// `rows` maps of one ξν (r9 = U at the block's first map, rsi = V_ξν, r10 = M_ξν at
/// the block's first map): accumulators 0..rows, V chunks from register 16.
fn map_block(a: &mut CodeAssembler, s: &PlaneSpec, rows: usize) -> AsmResult<()> {
    let acc = &ZMM[..rows];
    for &r in acc {
        a.vpxord(r, r, r)?;
    }
    for c0 in (0..s.channels).step_by(CHANNEL_CHUNK) {
        let chunk = CHANNEL_CHUNK.min(s.channels - c0);
        for i in 0..chunk {
            a.vmovups(ZMM[16 + i], zmmword_ptr(rsi + imm((c0 + i) * s.ts * F32)?))?;
        }
        for i in 0..chunk {
            for (r, &acc_r) in acc.iter().enumerate() {
                let w = r9 + imm((r * s.channels + c0 + i) * F32)?;
                a.vfmadd231ps(acc_r, ZMM[16 + i], dword_bcst(w))?;
            }
        }
    }
    for (r, &acc_r) in acc.iter().enumerate() {
        a.vmovups(zmmword_ptr(r10 + imm(r * s.ts * F32)?), acc_r)?;
    }
    Ok(())
}
