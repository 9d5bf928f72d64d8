//! AVX-512 VNNI machine code for nnc's INT8 convolution (see [`super::conv_u8s8`]):
//! `u8s8-conv-8x48-avx512vnni` and `f32-u8-quantize-planes-avx512`.
//!
//! The convolution kernel is the FP32 GEMM kernel's register tile with 8-bit dot
//! products: 8 maps × 3 zmm of 16 wide pixels = 24 int32 accumulators. One K step (a
//! tap's channel quad) loads 3 × 64 bytes of planes (16 pixels × 4 channels each, read
//! in place: no packing) and broadcasts 8 maps' 4 weight bytes, for 24 `vpdpbusd` of 64
//! multiply-adds each. Column panels are the outer loop, so a panel's planes (a few
//! rows around 48 pixels, for every quad) stay in L1 while every map tile sweeps them.
//!
//! The epilogue adds the folded int32 bias, converts, scales, and then keeps only the
//! valid output columns: a table after the code gives, per vector of 16 wide pixels,
//! the mask of valid lanes and where in the output row-major image the first one goes;
//! `vpcompressd` packs them and a masked store writes them, after the residual (read
//! with the same mask) and the activation. When no column is dropped the compression
//! is skipped.

use crate::codegen::options::Int8Order;
use iced_x86::code_asm::*;

use super::activation::{activate, supports_activation};
use super::asm::{emit_consts, imm, AsmError, AsmResult, Consts, Vecs, Vector, ZMM};
use super::planes_walk::{quantize_image, ChunkEmitter};
use crate::codegen::kernels::conv_u8s8::ConvU8Geometry;
use crate::ops::{Activation, PlaneLayout, Requantize};

/// `x{k}` for the opmask `k` (k1..k6) of a register or memory operand: iced has one
/// method per opmask.
macro_rules! masked {
    ($x:expr, $k:expr) => {{
        let (x, k) = ($x, $k);
        match k {
            k if k == k1 => x.k1(),
            k if k == k2 => x.k2(),
            k if k == k3 => x.k3(),
            k if k == k4 => x.k4(),
            k if k == k5 => x.k5(),
            _ => x.k6(),
        }
    }};
}

/// Maps per register tile.
pub const MR: usize = 8;
/// Vectors of 16 wide pixels per register tile.
const NR: usize = 3;
const LANES: usize = 16;
const SAVED: [AsmRegister64; 6] = [rbx, rbp, r12, r13, r14, r15];

pub fn supports(act: Activation) -> bool {
    supports_activation(act)
}

/// What one convolution kernel computes (one image per call).
pub struct ConvSpec {
    maps: usize,
    /// Output pixels per map (`Ho · Wo`).
    out_pixels: usize,
    /// Vectors of 16 wide pixels covering the wide output.
    vectors: usize,
    /// Per vector: mask of valid lanes, and the output pixel of the first.
    columns: Vec<(u16, u32)>,
    /// Bytes from the planes' base to tap t's quad-0 run.
    tap_offsets: Vec<usize>,
    /// Quads per tap in K (1 for depthwise).
    quads: usize,
    quad_stride: usize,
    depthwise: bool,
    compact: bool,
    residual: bool,
    activation: Activation,
    requantize: Option<RequantSpec>,
    /// Loop order: map tiles outermost (each tile's weights read once, the planes once
    /// per tile) or column panels outermost (the planes read once, all the weights
    /// once per panel). Tiles go outermost when streaming the weights once per panel
    /// would move more bytes than reading the planes once per tile: ResNet's deep
    /// layers (2.4 MB of weights, 7×7 outputs in 2 panels). `NNC_INT8_ORDER=tiles|panels`
    /// forces one, for measurements.
    tiles_outer: bool,
}

/// The output planes of a requantizing convolution (see `quant::requantize`).
struct RequantSpec {
    inv_scale: f32,
    zero_point: u8,
    /// Bytes of one output quad's planes (stride 1: one phase).
    quad_bytes: usize,
    /// Pixel of the planes where wide output pixel 0 goes (top and left padding).
    offset: usize,
    quads: usize,
    /// For planes split in phases (a strided next convolution): per wide pixel, the
    /// dword it goes to in its quad's planes (scattered); else None (stored whole).
    scatter: Option<Vec<u32>>,
}

/// Whether the kernel runs weight tiles outermost (see [`ConvSpec::tiles_outer`]): when
/// streaming the weights once per input panel would cost more than streaming the planes
/// once per weight tile; `order` forces one order, for measurements.
pub fn tiles_outer(g: &ConvU8Geometry, order: Int8Order) -> bool {
    g.tiles_outer(order, MR, NR * LANES, 1)
}

impl ConvSpec {
    pub fn new(
        g: &ConvU8Geometry,
        activation: Activation,
        residual: bool,
        requantize: Option<&Requantize>,
        tiles_outer: bool,
    ) -> ConvSpec {
        let vectors = g.wide().div_ceil(LANES);
        let columns = (0..vectors)
            .map(|v| {
                let mut mask = 0u16;
                let mut first = None;
                for lane in 0..LANES {
                    if let Some(pixel) = g.output_pixel(v * LANES + lane) {
                        mask |= 1 << lane;
                        first.get_or_insert(pixel);
                    }
                }
                (mask, first.unwrap_or(0) as u32)
            })
            .collect();
        ConvSpec {
            maps: g.maps,
            out_pixels: g.out_h * g.out_w,
            vectors,
            columns,
            tap_offsets: (0..g.taps.len()).map(|t| g.tap_offset(t)).collect(),
            quads: g.k_quads(),
            quad_stride: g.quad_stride(),
            depthwise: g.depthwise,
            compact: g.compact(),
            residual,
            activation,
            tiles_outer,
            requantize: requantize.map(|r| {
                let l = &r.layout;
                let scatter = (l.stride != [1, 1]).then(|| {
                    (0..vectors * LANES)
                        .map(|n| g.requantized_dword(l, n).unwrap_or(0))
                        .collect()
                });
                RequantSpec {
                    inv_scale: r.inv_scale,
                    zero_point: r.zero_point,
                    quad_bytes: l.phases() * l.plane_pixels() * 4,
                    offset: l.pad_top * l.cols + l.pad_left,
                    // The quads of this call's maps: all of them, or a task's (see
                    // `plan::int8::map_split`).
                    quads: g.maps.div_ceil(4).min(l.quads()),
                    scatter,
                }
            }),
        }
    }
}

/// Accumulator register of tile row `r`, vector `j`.
fn acc(r: usize, j: usize) -> usize {
    r * NR + j
}
const B_REG: usize = 24;
const W_REG: usize = 27;
/// Free in the epilogue: the output vector and the activation's temporaries.
const OUT_REG: usize = 26;
const TMP_REGS: [usize; 3] = [27, 28, 29];
const BIAS_REG: usize = 24;
const SCALE_REG: usize = 25;
/// Requantizing epilogue: a shifted map and the zero point in every byte.
const SHIFT_REG: usize = 27;
const ZP_WORD_REG: usize = 28;
const INDEX_REG: usize = 29;

/// Encodes `u8s8-conv-8x48-avx512vnni` for `s`: arguments `(planes, W, Y, bias, scale,
/// residual)` (System V), W packed by [`super::conv_u8s8::pack_weights`] for [`MR`].
pub fn emit_conv(s: &ConvSpec) -> Result<Vec<u8>, String> {
    if s.tap_offsets.is_empty() || s.quads == 0 {
        return Err("INT8 conv kernel: the convolution has no taps or channels".into());
    }
    let mut a = CodeAssembler::new(64).map_err(|e| e.to_string())?;
    let mut e = ConvEmitter {
        s,
        consts: Consts { values: vec![] },
        table: a.create_label(),
        scatter_table: a.create_label(),
        taps_table: a.create_label(),
    };
    e.function(&mut a)
        .map_err(|err| format!("INT8 conv kernel: {}", err.0))?;
    a.assemble(0)
        .map_err(|err| format!("INT8 conv kernel: {err}"))
}

struct ConvEmitter<'s> {
    s: &'s ConvSpec,
    consts: Consts,
    table: CodeLabel,
    scatter_table: CodeLabel,
    taps_table: CodeLabel,
}

impl ConvEmitter<'_> {
    fn function(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        for r in SAVED {
            a.push(r)?;
        }
        if self.s.requantize.is_some() {
            self.fill_padding(a)?;
        }
        if self.s.tiles_outer {
            self.tiles_outer(a)?;
        } else {
            self.panels(a, &mut |e, a, vecs| e.panel(a, vecs))?;
        }
        for r in SAVED.iter().rev() {
            a.pop(*r)?;
        }
        a.vzeroupper()?;
        a.ret()?;
        self.data(a)
    }

    /// `body(vecs)` for each column panel, r10 = the byte offset of its first wide pixel.
    fn panels(
        &mut self,
        a: &mut CodeAssembler,
        body: &mut dyn FnMut(&mut Self, &mut CodeAssembler, usize) -> AsmResult<()>,
    ) -> AsmResult<()> {
        let full_panels = self.s.vectors / NR;
        let rest = self.s.vectors % NR;
        a.xor(r10d, r10d)?;
        if full_panels > 0 {
            let mut top = a.create_label();
            a.set_label(&mut top)?;
            body(self, a, NR)?;
            a.add(r10, imm(NR * LANES * 4)?)?;
            a.cmp(r10, imm(full_panels * NR * LANES * 4)?)?;
            a.jb(top)?;
        }
        if rest > 0 {
            body(self, a, rest)?;
        }
        Ok(())
    }

    /// Map tiles outermost, each over every panel: its weights stay in L1 while the
    /// planes (small here) come from L2 (see [`ConvSpec::tiles_outer`]).
    fn tiles_outer(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        let s = self.s;
        let full_tiles = s.maps / MR;
        let tile_bytes = s.tap_offsets.len() * s.quads * MR * 4;
        a.xor(r12d, r12d)?;
        a.mov(r13, rsi)?;
        if full_tiles > 0 {
            let mut top = a.create_label();
            a.set_label(&mut top)?;
            self.panels(a, &mut |e, a, vecs| e.tile(a, MR, vecs))?;
            a.add(r12, imm(MR)?)?;
            a.add(r13, imm(tile_bytes)?)?;
            a.cmp(r12, imm(full_tiles * MR)?)?;
            a.jb(top)?;
        }
        if !s.maps.is_multiple_of(MR) {
            let rows = s.maps % MR;
            self.panels(a, &mut |e, a, vecs| e.tile(a, rows, vecs))?;
        }
        Ok(())
    }

    /// Every map tile over the panel at r10, `vecs` vectors wide.
    fn panel(&mut self, a: &mut CodeAssembler, vecs: usize) -> AsmResult<()> {
        let s = self.s;
        let full_tiles = s.maps / MR;
        let tile_bytes = s.tap_offsets.len() * s.quads * MR * 4;
        // r12: first map of the tile; r13: its packed weights.
        a.xor(r12d, r12d)?;
        a.mov(r13, rsi)?;
        if full_tiles > 0 {
            let mut top = a.create_label();
            a.set_label(&mut top)?;
            self.tile(a, MR, vecs)?;
            a.add(r12, imm(MR)?)?;
            a.add(r13, imm(tile_bytes)?)?;
            a.cmp(r12, imm(full_tiles * MR)?)?;
            a.jb(top)?;
        }
        if !s.maps.is_multiple_of(MR) {
            self.tile(a, s.maps % MR, vecs)?;
        }
        Ok(())
    }

    fn tile(&mut self, a: &mut CodeAssembler, rows: usize, vecs: usize) -> AsmResult<()> {
        let s = self.s;
        for r in 0..rows {
            for j in 0..vecs {
                let z = ZMM[acc(r, j)];
                a.vpxord(z, z, z)?;
            }
        }
        // rbp walks the tile's weights: [tap][quad][MR][4].
        a.mov(rbp, r13)?;
        if s.depthwise {
            return self.depthwise_taps(a, rows, vecs);
        }
        // Taps in a loop over the table of their offsets (r15, counter ebx): unrolled,
        // a 3×3 kernel's tile code was 9 times as long, and small models' libraries
        // mostly code.
        let taps_table = self.taps_table;
        let mut tap_top = a.create_label();
        a.lea(r15, ptr(taps_table))?;
        a.mov(ebx, imm(s.tap_offsets.len())?)?;
        a.set_label(&mut tap_top)?;
        {
            a.mov(eax, dword_ptr(r15))?;
            a.add(rax, rdi)?;
            a.add(rax, r10)?;
            a.mov(r11d, imm(s.quads)?)?;
            let mut top = a.create_label();
            a.set_label(&mut top)?;
            for j in 0..vecs {
                a.vmovdqu32(ZMM[B_REG + j], zmmword_ptr(rax + imm(j * 64)?))?;
            }
            for r in 0..rows {
                let w = ZMM[W_REG + r % 2];
                a.vpbroadcastd(w, dword_ptr(rbp + imm(4 * r)?))?;
                for j in 0..vecs {
                    a.vpdpbusd(ZMM[acc(r, j)], ZMM[B_REG + j], w)?;
                }
            }
            a.add(rax, imm(s.quad_stride)?)?;
            a.add(rbp, imm(MR * 4)?)?;
            a.dec(r11d)?;
            a.jnz(top)?;
        }
        a.add(r15, 4)?;
        a.dec(ebx)?;
        a.jnz(tap_top)?;
        self.epilogue(a, rows, vecs)
    }

    /// Depthwise K loop: per tap, the tile's maps 0–3 read quad m0/4 and maps 4–7 the
    /// next one (their weights are zero but in their own channel's byte).
    fn depthwise_taps(&mut self, a: &mut CodeAssembler, rows: usize, vecs: usize) -> AsmResult<()> {
        let s = self.s;
        // r14: the tile's first quad (m0 / 4 · quad stride) in this panel.
        a.mov(r14, r12)?;
        a.shr(r14, 2)?;
        a.imul_3(r14, r14, imm(s.quad_stride)?)?;
        a.add(r14, rdi)?;
        a.add(r14, r10)?;
        let mut tap_top = a.create_label();
        a.lea(r15, ptr(self.taps_table))?;
        a.mov(ebx, imm(s.tap_offsets.len())?)?;
        a.set_label(&mut tap_top)?;
        a.mov(eax, dword_ptr(r15))?;
        a.add(rax, r14)?;
        for r in 0..rows {
            if r % 4 == 0 {
                for j in 0..vecs {
                    let at = rax + imm(r / 4 * s.quad_stride + j * 64)?;
                    a.vmovdqu32(ZMM[B_REG + j], zmmword_ptr(at))?;
                }
            }
            let w = ZMM[W_REG + r % 2];
            a.vpbroadcastd(w, dword_ptr(rbp + imm(4 * r)?))?;
            for j in 0..vecs {
                a.vpdpbusd(ZMM[acc(r, j)], ZMM[B_REG + j], w)?;
            }
        }
        a.add(rbp, imm(MR * 4)?)?;
        a.add(r15, 4)?;
        a.dec(ebx)?;
        a.jnz(tap_top)?;
        self.epilogue(a, rows, vecs)
    }

    /// Loads the column table's entries of this panel's `vecs` vectors: each one's
    /// valid lanes into k1..k3 and its first output pixel's byte offset into r11, rbx,
    /// r14 (returned). rax: the entries (8 bytes per vector, 3 per panel: r10 / 8).
    fn load_columns(
        &mut self,
        a: &mut CodeAssembler,
        vecs: usize,
    ) -> AsmResult<[AsmRegister64; NR]> {
        let starts = [r11, rbx, r14];
        a.mov(rax, r10)?;
        a.shr(rax, 3)?;
        a.lea(r15, ptr(self.table))?;
        a.add(rax, r15)?;
        for (j, &start) in starts.iter().enumerate().take(vecs) {
            a.kmovw(mask_k(j), word_ptr(rax + imm(8 * j)?))?;
            a.mov(start.into_32(), dword_ptr(rax + imm(8 * j + 4)?))?;
            a.shl(start, 2)?;
        }
        Ok(starts)
    }

    /// Sets what the requantizing stores do not reach to the zero point: each output
    /// quad's pixels before the first wide pixel and after the last vector.
    fn fill_padding(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        let s = self.s;
        let rq = s.requantize.as_ref().expect("requantizing");
        // Scattering, only valid pixels are written: fill everything.
        let (offset, written_end) = match rq.scatter {
            Some(_) => (0, 0),
            None => (rq.offset, (rq.offset + s.vectors * LANES) * 4),
        };
        if written_end > rq.quad_bytes {
            return Err(AsmError("requantized output overruns its planes".into()));
        }
        let zp = u32::from_ne_bytes([rq.zero_point; 4]);
        a.mov(eax, zp as i32)?;
        a.vpbroadcastd(ZMM[0], eax)?;
        a.mov(rbx, rdx)?;
        a.xor(r12d, r12d)?;
        let mut top = a.create_label();
        a.set_label(&mut top)?;
        for (from, to) in [(0, offset * 4), (written_end, rq.quad_bytes)] {
            fill_range(a, from, to)?;
        }
        a.add(rbx, imm(rq.quad_bytes)?)?;
        a.inc(r12d)?;
        a.cmp(r12d, imm(rq.quads)?)?;
        a.jb(top)?;
        Ok(())
    }

    /// The requantizing epilogue: the tile's float32 results (as [`Self::epilogue`]
    /// computes them, residual read expanded into the wide lanes), quantized, packed
    /// four maps to a pixel, invalid lanes set to the zero point, stored.
    fn requantize_epilogue(
        &mut self,
        a: &mut CodeAssembler,
        rows: usize,
        vecs: usize,
    ) -> AsmResult<()> {
        let s = self.s;
        let rq = s.requantize.as_ref().expect("requantizing");
        let starts = self.load_columns(a, vecs)?;
        let row_bytes = s.out_pixels * 4;
        if s.residual {
            a.imul_3(r15, r12, imm(row_bytes)?)?;
            a.add(r15, r9)?;
        }
        // rbp: the tile's first output quad at this panel's first wide pixel.
        a.mov(rbp, r12)?;
        a.shr(rbp, 2)?;
        a.imul_3(rbp, rbp, imm(rq.quad_bytes)?)?;
        a.add(rbp, rdx)?;
        if rq.scatter.is_none() {
            a.add(rbp, r10)?;
        }
        let v = Vecs { isa: Vector::Zmm };
        let inv = self.consts.get(a, rq.inv_scale);
        let zp = self.consts.get(a, rq.zero_point as f32);
        let zero = self.consts.get(a, 0.0);
        let top = self.consts.get(a, 255.0);
        for r in 0..rows {
            a.vpbroadcastd(ZMM[BIAS_REG], dword_ptr(rcx + r12 * 4 + imm(4 * r)?))?;
            a.vbroadcastss(ZMM[SCALE_REG], dword_ptr(r8 + r12 * 4 + imm(4 * r)?))?;
            for (j, &start) in starts.iter().enumerate().take(vecs) {
                let x = acc(r, j);
                a.vpaddd(ZMM[x], ZMM[x], ZMM[BIAS_REG])?;
                a.vcvtdq2ps(ZMM[x], ZMM[x])?;
                a.vmulps(ZMM[x], ZMM[x], ZMM[SCALE_REG])?;
                if s.residual {
                    let res = r15 + start + imm(r * row_bytes)?;
                    a.vpexpandd(masked!(ZMM[OUT_REG], mask_k(j)).z(), zmmword_ptr(res))?;
                    a.vaddps(ZMM[x], ZMM[x], ZMM[OUT_REG])?;
                }
                activate(a, &v, &mut self.consts, s.activation, &[x], &TMP_REGS)?;
                a.vmulps(ZMM[x], ZMM[x], zmmword_ptr(inv))?;
                a.vaddps(ZMM[x], ZMM[x], zmmword_ptr(zp))?;
                // vmaxps returns its second operand when the first is NaN: NaN → 0.
                a.vmaxps(ZMM[x], ZMM[x], zmmword_ptr(zero))?;
                a.vminps(ZMM[x], ZMM[x], zmmword_ptr(top))?;
                a.vcvtps2dq(ZMM[x], ZMM[x])?;
            }
        }
        if rq.scatter.is_some() {
            // r14: this panel's scatter indices (the residual is read by now).
            a.lea(r14, ptr(self.scatter_table))?;
            a.add(r14, r10)?;
        }
        let zp_bytes = u32::from_ne_bytes([rq.zero_point; 4]);
        let zp_word = self.consts.get(a, f32::from_bits(zp_bytes));
        a.vmovups(ZMM[ZP_WORD_REG], zmmword_ptr(zp_word))?;
        for quad in 0..rows.div_ceil(4) {
            let present = (rows - 4 * quad).min(4);
            for j in 0..vecs {
                let out = ZMM[OUT_REG];
                a.vmovdqa32(out, ZMM[acc(4 * quad, j)])?;
                for byte in 1..present {
                    let t = ZMM[SHIFT_REG];
                    a.vpslld(t, ZMM[acc(4 * quad + byte, j)], (8 * byte) as i32)?;
                    a.vpord(out, out, t)?;
                }
                if present < 4 {
                    // Channels past the maps hold the zero point, as QuantizeToPlanes
                    // writes them (their weights are zero either way).
                    let missing =
                        (present..4).fold(0u32, |m, b| m | u32::from(rq.zero_point) << (8 * b));
                    let c = self.consts.get(a, f32::from_bits(missing));
                    a.vpord(out, out, zmmword_ptr(c))?;
                }
                if rq.scatter.is_some() {
                    // vpscatterdd clears its mask as it goes: a copy.
                    a.kmovw(k7, mask_k(j))?;
                    a.vmovdqu32(ZMM[INDEX_REG], zmmword_ptr(r14 + imm(j * 64)?))?;
                    let at = rbp + ZMM[INDEX_REG] * 4 + imm(quad * rq.quad_bytes)?;
                    a.vpscatterdd(zmmword_ptr(at).k7(), out)?;
                    continue;
                }
                a.vpblendmd(masked!(out, mask_k(j)), ZMM[ZP_WORD_REG], out)?;
                let at = rbp + imm(quad * rq.quad_bytes + j * 64 + rq.offset * 4)?;
                a.vmovdqu32(zmmword_ptr(at), out)?;
            }
        }
        Ok(())
    }

    fn epilogue(&mut self, a: &mut CodeAssembler, rows: usize, vecs: usize) -> AsmResult<()> {
        let s = self.s;
        if s.requantize.is_some() {
            return self.requantize_epilogue(a, rows, vecs);
        }
        let starts = self.load_columns(a, vecs)?;
        if !s.compact {
            // Store masks: the first popcount(mask) lanes.
            for j in 0..vecs {
                a.kmovw(eax, mask_k(j))?;
                a.popcnt(eax, eax)?;
                a.mov(r15d, 1)?;
                a.shlx(r15d, r15d, eax)?;
                a.dec(r15d)?;
                a.kmovw(store_k(j), r15d)?;
            }
        }
        // rbp: the tile's first output row; r15: its residual row.
        let row_bytes = s.out_pixels * 4;
        a.imul_3(rbp, r12, imm(row_bytes)?)?;
        if s.residual {
            a.lea(r15, qword_ptr(r9 + rbp))?;
        }
        a.add(rbp, rdx)?;
        let v = Vecs { isa: Vector::Zmm };
        for r in 0..rows {
            a.vpbroadcastd(ZMM[BIAS_REG], dword_ptr(rcx + r12 * 4 + imm(4 * r)?))?;
            a.vbroadcastss(ZMM[SCALE_REG], dword_ptr(r8 + r12 * 4 + imm(4 * r)?))?;
            for (j, &start) in starts.iter().enumerate().take(vecs) {
                let x = acc(r, j);
                a.vpaddd(ZMM[x], ZMM[x], ZMM[BIAS_REG])?;
                a.vcvtdq2ps(ZMM[x], ZMM[x])?;
                a.vmulps(ZMM[x], ZMM[x], ZMM[SCALE_REG])?;
                let k = if s.compact {
                    a.vmovaps(ZMM[OUT_REG], ZMM[x])?;
                    mask_k(j)
                } else {
                    a.vpcompressd(masked!(ZMM[OUT_REG], mask_k(j)).z(), ZMM[x])?;
                    store_k(j)
                };
                let at = rbp + start + imm(r * row_bytes)?;
                if s.residual {
                    let res = r15 + start + imm(r * row_bytes)?;
                    a.vaddps(masked!(ZMM[OUT_REG], k), ZMM[OUT_REG], zmmword_ptr(res))?;
                }
                activate(a, &v, &mut self.consts, s.activation, &[OUT_REG], &TMP_REGS)?;
                a.vmovups(masked!(zmmword_ptr(at), k), ZMM[OUT_REG])?;
            }
        }
        Ok(())
    }

    fn data(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        emit_consts(a, &mut self.consts, LANES)?;
        a.set_label(&mut self.table)?;
        let mut words = Vec::with_capacity(self.s.columns.len() * 2);
        for &(mask, first) in &self.s.columns {
            words.push(u32::from(mask));
            words.push(first);
        }
        // Whole panels read three entries.
        words.resize(words.len() + 2 * NR, 0);
        a.dd(&words)?;
        a.set_label(&mut self.taps_table)?;
        let taps: Vec<u32> = self.s.tap_offsets.iter().map(|&o| o as u32).collect();
        a.dd(&taps)?;
        if let Some(t) = self.s.requantize.as_ref().and_then(|r| r.scatter.as_ref()) {
            a.set_label(&mut self.scatter_table)?;
            a.dd(t)?;
        }
        Ok(())
    }
}

/// Stores `zmm0` over bytes `from .. to` of rbx (multiples of 4): whole vectors, then
/// a masked one. Clobbers rax, r11 and k7.
fn fill_range(a: &mut CodeAssembler, from: usize, to: usize) -> AsmResult<()> {
    if to <= from {
        return Ok(());
    }
    let whole = (to - from) / 64;
    if whole > 0 {
        a.lea(rax, qword_ptr(rbx + imm(from)?))?;
        a.lea(r11, qword_ptr(rbx + imm(from + whole * 64)?))?;
        let mut top = a.create_label();
        a.set_label(&mut top)?;
        a.vmovdqu32(zmmword_ptr(rax), ZMM[0])?;
        a.add(rax, 64)?;
        a.cmp(rax, r11)?;
        a.jb(top)?;
    }
    let rest = (to - from) % 64 / 4;
    if rest > 0 {
        a.mov(eax, ((1u32 << rest) - 1) as i32)?;
        a.kmovw(k7, eax)?;
        let at = rbx + imm(from + whole * 64)?;
        a.vmovdqu32(zmmword_ptr(at).k7(), ZMM[0])?;
    }
    Ok(())
}

/// Opmask of the valid lanes of vector j (k1..k3) and of its compressed store (k4..k6).
fn mask_k(j: usize) -> AsmRegisterK {
    [k1, k2, k3][j]
}
fn store_k(j: usize) -> AsmRegisterK {
    [k4, k5, k6][j]
}

trait Low32 {
    fn into_32(self) -> AsmRegister32;
}

impl Low32 for AsmRegister64 {
    fn into_32(self) -> AsmRegister32 {
        match self {
            r if r == r11 => r11d,
            r if r == rbx => ebx,
            _ => r14d,
        }
    }
}

/// Whether [`emit_quantize`] handles `layout` (strides 1 and 2).
pub fn quantize_supports(layout: &PlaneLayout) -> bool {
    layout.stride.iter().all(|&s| s == 1 || s == 2)
}

/// Encodes `f32-u8-quantize-planes-avx512` for one image: arguments `(x, planes)`.
/// Fills the image's planes with the zero point, then quantizes 16 pixels × 4 channels
/// at a time (`vcvtps2dq` rounds half to even, `vpmovusdb` narrows), interleaves the
/// four channels' bytes pixel by pixel and stores each pixel's 4 bytes to its phase.
pub fn emit_quantize(layout: &PlaneLayout, inv_scale: f32, zp: u8) -> Result<Vec<u8>, String> {
    let mut a = CodeAssembler::new(64).map_err(|e| e.to_string())?;
    let mut consts = Consts { values: vec![] };
    let mut perm = a.create_label();
    quantize_function(&mut a, layout, inv_scale, zp, &mut consts, perm)
        .map_err(|e| format!("INT8 quantize kernel: {}", e.0))?;
    (|| -> AsmResult<()> {
        emit_consts(&mut a, &mut consts, LANES)?;
        a.set_label(&mut perm)?;
        // Even dwords, then odd ones: a stride-2 row's two column phases.
        let idx: Vec<u32> = (0..8)
            .map(|i| 2 * i)
            .chain((0..8).map(|i| 2 * i + 1))
            .collect();
        a.dd(&idx)?;
        Ok(())
    })()
    .map_err(|e| format!("INT8 quantize kernel: {}", e.0))?;
    a.assemble(0)
        .map_err(|e| format!("INT8 quantize kernel: {e}"))
}

const INV: usize = 28;
const ZP: usize = 29;
const ZERO: usize = 30;
const TOP: usize = 31;
const PERM: usize = 27;

fn quantize_function(
    a: &mut CodeAssembler,
    l: &PlaneLayout,
    inv: f32,
    zp: u8,
    consts: &mut Consts,
    perm: CodeLabel,
) -> AsmResult<()> {
    if !quantize_supports(l) {
        return Err(AsmError(format!(
            "no quantize kernel for strides {:?}",
            l.stride
        )));
    }
    for r in SAVED {
        a.push(r)?;
    }
    // Fill with the zero point: 64 bytes at a time, the rest (a multiple of 4) masked.
    let fill = l.image_bytes();
    a.mov(eax, i32::from_ne_bytes([zp; 4]))?;
    a.vpbroadcastd(ZMM[0], eax)?;
    a.mov(rax, rsi)?;
    let full = fill / 64;
    if full > 0 {
        a.lea(rcx, qword_ptr(rsi + imm(full * 64)?))?;
        let mut top = a.create_label();
        a.set_label(&mut top)?;
        a.vmovdqu32(zmmword_ptr(rax), ZMM[0])?;
        a.add(rax, 64)?;
        a.cmp(rax, rcx)?;
        a.jb(top)?;
    }
    if !fill.is_multiple_of(64) {
        a.mov(ecx, ((1u32 << (fill % 64 / 4)) - 1) as i32)?;
        a.kmovw(k1, ecx)?;
        a.vmovdqu32(zmmword_ptr(rax).k1(), ZMM[0])?;
    }
    let zero_f = consts.get(a, 0.0);
    let top_f = consts.get(a, 255.0);
    let inv_f = consts.get(a, inv);
    let zp_f = consts.get(a, zp as f32);
    a.vmovups(ZMM[ZERO], zmmword_ptr(zero_f))?;
    a.vmovups(ZMM[TOP], zmmword_ptr(top_f))?;
    a.vmovups(ZMM[INV], zmmword_ptr(inv_f))?;
    a.vmovups(ZMM[ZP], zmmword_ptr(zp_f))?;
    a.vmovdqu32(ZMM[PERM], zmmword_ptr(perm))?;
    quantize_image(&mut Quantizer { l }, a, l)?;
    for r in SAVED.iter().rev() {
        a.pop(*r)?;
    }
    a.vzeroupper()?;
    a.ret()?;
    Ok(())
}

struct Quantizer<'l> {
    l: &'l PlaneLayout,
}

impl ChunkEmitter for Quantizer<'_> {
    const LANES: usize = LANES;

    /// `lanes` pixels at rax → planes at rbx (relative to the row's first chunk).
    fn chunk(&mut self, a: &mut CodeAssembler, channels: usize, lanes: usize) -> AsmResult<()> {
        let l = self.l;
        let plane_in = l.height * l.width * 4;
        if lanes < LANES {
            a.mov(edx, ((1u32 << lanes) - 1) as i32)?;
            a.kmovw(k1, edx)?;
        }
        for c in 0..4 {
            let z = ZMM[c];
            if c >= channels {
                a.vmovaps(z, ZMM[ZERO])?;
            } else if lanes < LANES {
                a.vmovups(z.k1().z(), zmmword_ptr(rax + imm(c * plane_in)?))?;
            } else {
                a.vmovups(z, zmmword_ptr(rax + imm(c * plane_in)?))?;
            }
            a.vmulps(z, z, ZMM[INV])?;
            a.vaddps(z, z, ZMM[ZP])?;
            // vmaxps returns its second operand when the first is NaN: NaN → 0.
            a.vmaxps(z, z, ZMM[ZERO])?;
            a.vminps(z, z, ZMM[TOP])?;
            a.vcvtps2dq(z, z)?;
            a.vpmovusdb(XMMS[4 + c], z)?;
        }
        // Bytes c0..c3 of 16 pixels → pixel-major: xmm8..11 hold pixels 0-3, 4-7, ...
        a.vpunpcklbw(XMMS[12], XMMS[4], XMMS[5])?;
        a.vpunpckhbw(XMMS[13], XMMS[4], XMMS[5])?;
        a.vpunpcklbw(XMMS[14], XMMS[6], XMMS[7])?;
        a.vpunpckhbw(XMMS[15], XMMS[6], XMMS[7])?;
        a.vpunpcklwd(XMMS[8], XMMS[12], XMMS[14])?;
        a.vpunpckhwd(XMMS[9], XMMS[12], XMMS[14])?;
        a.vpunpcklwd(XMMS[10], XMMS[13], XMMS[15])?;
        a.vpunpckhwd(XMMS[11], XMMS[13], XMMS[15])?;
        let sw = l.stride[1];
        let col = l.pad_left / sw * 4;
        if sw == 1 {
            for p in 0..4 {
                let valid = lanes.saturating_sub(4 * p).min(4);
                if valid == 0 {
                    break;
                }
                let at = rbx + imm(col + 16 * p)?;
                if valid == 4 {
                    a.vmovdqu32(xmmword_ptr(at), XMMS[8 + p])?;
                } else {
                    a.mov(edx, ((1u32 << valid) - 1) as i32)?;
                    a.kmovw(k2, edx)?;
                    a.vmovdqu32(xmmword_ptr(at).k2(), XMMS[8 + p])?;
                }
            }
            return Ok(());
        }
        // Stride 2: the 16 pixels' dwords in one zmm, even pixels to one column phase
        // and odd ones to the other.
        a.vinserti32x4(ZMM[8], ZMM[8], XMMS[9], 1)?;
        a.vinserti32x4(ZMM[8], ZMM[8], XMMS[10], 2)?;
        a.vinserti32x4(ZMM[8], ZMM[8], XMMS[11], 3)?;
        a.vpermd(ZMM[8], ZMM[PERM], ZMM[8])?;
        a.vextracti32x8(YMMS[9], ZMM[8], 1)?;
        let even = lanes.div_ceil(2);
        let odd = lanes / 2;
        let left_odd = l.pad_left % 2 == 1;
        // Padded column of lane 0 is pad_left: its phase is pad_left % 2, its plane
        // column pad_left / 2; lane 1's is the other phase, column (pad_left + 1) / 2.
        let plane = l.plane_pixels() * 4;
        let (even_phase, odd_phase) = if left_odd { (1, 0) } else { (0, 1) };
        let even_at = rbx + imm(even_phase * plane + l.pad_left / 2 * 4)?;
        let odd_at = rbx + imm(odd_phase * plane + l.pad_left.div_ceil(2) * 4)?;
        for (count, at, reg) in [(even, even_at, YMMS[8]), (odd, odd_at, YMMS[9])] {
            if count == 0 {
                continue;
            }
            if count == 8 {
                a.vmovdqu32(ymmword_ptr(at), reg)?;
            } else {
                a.mov(edx, ((1u32 << count) - 1) as i32)?;
                a.kmovw(k2, edx)?;
                a.vmovdqu32(ymmword_ptr(at).k2(), reg)?;
            }
        }
        Ok(())
    }
}

const XMMS: [AsmRegisterXmm; 16] = [
    xmm0, xmm1, xmm2, xmm3, xmm4, xmm5, xmm6, xmm7, xmm8, xmm9, xmm10, xmm11, xmm12, xmm13, xmm14,
    xmm15,
];
const YMMS: [AsmRegisterYmm; 16] = [
    ymm0, ymm1, ymm2, ymm3, ymm4, ymm5, ymm6, ymm7, ymm8, ymm9, ymm10, ymm11, ymm12, ymm13, ymm14,
    ymm15,
];
