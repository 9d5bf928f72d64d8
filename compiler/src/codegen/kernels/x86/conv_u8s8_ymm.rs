//! 256-bit machine code for nnc's INT8 convolution (see `lower::conv_u8s8`),
//! for x86-64 CPUs without AVX-512 VNNI: `u8s8-conv-4x24-avxvnni` (Alder Lake and
//! later, Zen 5), and `u8s7-conv-4x16-avx2` and `u8s8-conv-4x8-avx2` (Haswell to Zen
//! 4). Their planes come from [`super::quantize_planes_avx2`].
//!
//! The GEMM is the AVX-512 kernel's ([`super::conv_u8s8`]) on registers of 8 wide
//! pixels, with tiles of 4 maps (one output quad):
//! * AVX-VNNI: 4 maps × 3 vectors = 12 accumulators; one K step (a tap's channel quad)
//!   loads 3 × 32 bytes of planes in place and broadcasts 4 maps' 4 weight bytes, for
//!   12 VEX `vpdpbusd` of 32 multiply-adds each.
//! * AVX2 with weights within ±64 (what nnc's quantizer gives a library with an AVX2
//!   variant): 4 maps × 2 vectors = 8 accumulators; one K step loads 2 × 32 bytes of
//!   planes and broadcasts each map's 4 weight bytes, then per vector `vpmaddubsw`
//!   (u8 × s8 products added in 16-bit pairs: at most 255 · 64 · 2 = 32640, exact),
//!   `vpmaddwd` by ones (the pairs into the 32-bit lane) and `vpaddd`: 32
//!   multiply-adds in three instructions, the weights int8 in the VNNI layout.
//! * AVX2 with larger weights (an imported QDQ model's): exact 16-bit products. `vpmaddubsw` saturates the sum of two u8 × s8
//!   products (255 · 127 · 2 > 32767), which would make the integers differ from the
//!   VNNI kernels'. Instead the planes' bytes are zero-extended (`vpmovzxbw`: 4 pixels ×
//!   4 channels per register), the weights are stored as int16 and `vpmaddwd` adds
//!   channel pairs into 32-bit lanes `[p0: c0+c1, p0: c2+c3, p1: …]`. That is 16
//!   multiply-adds per multiplying instruction, as many as `vpmaddubsw` followed by the
//!   `vpmaddwd` that widens its pairs, and exact. Two 4-pixel halves per map are
//!   accumulated, then `vphaddd` adds the lane pairs and `vpermq` restores pixel order.
//!   The library stores the weights as int8 like the other kernels; the kernel widens
//!   them into the node's scratch (`vpmovsxbw`): one map tile at a time when tiles are
//!   outermost (it stays in L1 while every panel reads it), all of them first when
//!   panels are (then the weights are the small operand).
//!
//! Without opmasks the epilogue keeps the valid output columns with a table: per vector
//! of 8 wide pixels, the permutation that packs its valid lanes to the front
//! (`vpermd`), the one that spreads packed values back over them (the residual of a
//! requantizing convolution), the mask of the first `n` lanes (`vmaskmovps` reads and
//! writes exactly the valid outputs), the mask of the valid lanes and the output pixel
//! of the first. The integer sums are exact and the float32 epilogue is the same
//! sequence of operations as the other kernels', so results are identical.

use iced_x86::code_asm::*;

use super::activation::{activate, supports_activation};
use super::asm::{emit_consts, imm, AsmError, AsmResult, Consts, Vecs, Vector, YMM};
use crate::codegen::isa::X86Dot;
use crate::codegen::kernels::conv_u8s8::ConvU8Geometry;
use crate::codegen::options::Int8Order;
use crate::ops::{Activation, Requantize};

/// The kernel library's name of the convolution kernel on `dot`'s products.
pub fn kernel_name(dot: X86Dot) -> &'static str {
    match dot {
        X86Dot::Pmaddwd => "u8s8-conv-4x8-avx2",
        X86Dot::Pmaddubsw => "u8s7-conv-4x16-avx2",
        X86Dot::Vpdpbusd { evex: false } => "u8s8-conv-4x24-avxvnni",
        X86Dot::Vpdpbusd { evex: true } => "u8s8-conv-4x24-avx512vnni",
    }
}

/// Vectors of 8 wide pixels per column panel.
fn vectors(dot: X86Dot) -> usize {
    match dot {
        X86Dot::Pmaddwd => 1,
        X86Dot::Pmaddubsw => 2,
        X86Dot::Vpdpbusd { .. } => 3,
    }
}

/// Scratch bytes of the kernel: the int16 weights of one tile (tiles outermost) or of
/// all tiles (panels outermost) for AVX2, none for AVX-VNNI.
pub fn scratch_bytes(g: &ConvU8Geometry, isa: X86Dot, tiles_outer: bool) -> usize {
    if isa != X86Dot::Pmaddwd {
        return 0;
    }
    let tile = g.taps.len() * g.k_quads() * MR * 4 * 2;
    if tiles_outer {
        tile
    } else {
        tile * g.maps.div_ceil(MR)
    }
}

/// Maps per register tile: one output quad.
pub const MR: usize = 4;
const LANES: usize = 8;
pub(super) const SAVED: [AsmRegister64; 6] = [rbx, rbp, r12, r13, r14, r15];
/// One column-table entry per vector: its first output pixel (dword), its valid-lane
/// bits and contiguous flag (bytes), its lane pattern's index (word).
const ENTRY: usize = 8;
const FIRST: usize = 0;
const VALID_BITS: usize = 4;
const CONTIGUOUS: usize = 5;
const PATTERN: usize = 6;
/// A lane pattern (128 bytes; few per kernel, shared by the vectors whose valid lanes
/// are the same): compress and expand permutations, store mask, valid mask.
const COMPRESS: usize = 0;
const EXPAND: usize = 32;
const STORE_MASK: usize = 64;
const VALID_MASK: usize = 96;

pub fn supports(act: Activation) -> bool {
    supports_activation(act)
}

/// One vector of 8 wide pixels in the column table.
struct Column {
    compress: [u32; LANES],
    expand: [u32; LANES],
    count: usize,
    valid: u32,
    first: u32,
    /// Requantizing into phases: 1 when the vector's 8 pixels are all valid and go to
    /// runs the fast scatter stores whole (see [`YmmConvSpec::scatter_step`]).
    contiguous: u32,
}

/// What one convolution kernel computes (one image per call).
pub struct YmmConvSpec {
    isa: X86Dot,
    maps: usize,
    out_pixels: usize,
    vectors: usize,
    columns: Vec<Column>,
    tap_offsets: Vec<usize>,
    quads: usize,
    quad_stride: usize,
    depthwise: bool,
    compact: bool,
    residual: bool,
    activation: Activation,
    requantize: Option<RequantSpec>,
    tiles_outer: bool,
}

/// The output planes of a requantizing convolution.
struct RequantSpec {
    inv_scale: f32,
    zero_point: u8,
    quad_bytes: usize,
    offset: usize,
    quads: usize,
    /// The next planes' column stride: how a row's pixels spread over the phases.
    column_stride: usize,
    /// Per wide pixel, the dword of its quad's planes it goes to (planes split in
    /// phases), else None (stored whole vectors).
    scatter: Option<Vec<u32>>,
}

/// Whether 8 pixels going to the dwords `lanes` of phase planes with column stride
/// `sw` form runs stored whole: one run of 8 (`sw` = 1), or the even pixels' run of 4
/// and the odd pixels' (`sw` = 2, after `vpermd` puts even lanes first). Returns `sw`.
fn scatter_step(sw: usize, lanes: &[u32]) -> Option<usize> {
    let run = |first: usize, step: usize| {
        lanes
            .iter()
            .skip(first)
            .step_by(step)
            .enumerate()
            .all(|(i, &d)| d == lanes[first] + i as u32)
    };
    match sw {
        1 if run(0, 1) => Some(1),
        2 if run(0, 2) && run(1, 2) => Some(2),
        _ => None,
    }
}

/// Whether the kernel runs weight tiles outermost: when streaming the weights once per
/// column panel would move more bytes than reading the planes once per tile.
pub fn tiles_outer(g: &ConvU8Geometry, order: Int8Order, isa: X86Dot) -> bool {
    g.tiles_outer(order, MR, vectors(isa) * LANES, isa.weight_bytes())
}

impl YmmConvSpec {
    pub fn new(
        isa: X86Dot,
        g: &ConvU8Geometry,
        activation: Activation,
        residual: bool,
        requantize: Option<&Requantize>,
        tiles_outer: bool,
    ) -> YmmConvSpec {
        let vectors = g.wide().div_ceil(LANES);
        let mut columns: Vec<Column> = (0..vectors)
            .map(|v| {
                let mut c = Column {
                    compress: [0; LANES],
                    expand: [0; LANES],
                    count: 0,
                    valid: 0,
                    first: 0,
                    contiguous: 0,
                };
                for lane in 0..LANES {
                    let Some(pixel) = g.output_pixel(v * LANES + lane) else {
                        continue;
                    };
                    if c.count == 0 {
                        c.first = pixel as u32;
                    }
                    c.compress[c.count] = lane as u32;
                    c.expand[lane] = c.count as u32;
                    c.valid |= 1 << lane;
                    c.count += 1;
                }
                c
            })
            .collect();
        let requantize = requantize.map(|r| {
            let l = &r.layout;
            let scatter = (l.stride != [1, 1]).then(|| {
                (0..vectors * LANES)
                    .map(|n| g.requantized_dword(l, n).unwrap_or(0))
                    .collect::<Vec<u32>>()
            });
            if let Some(t) = &scatter {
                for (v, c) in columns.iter_mut().enumerate() {
                    let lanes = &t[v * LANES..(v + 1) * LANES];
                    c.contiguous =
                        u32::from(c.count == LANES && scatter_step(l.stride[1], lanes).is_some());
                }
            }
            RequantSpec {
                inv_scale: r.inv_scale,
                zero_point: r.zero_point,
                quad_bytes: l.phases() * l.plane_pixels() * 4,
                offset: l.pad_top * l.cols + l.pad_left,
                // The quads of this call's maps: all of them, or a task's (see
                // `plan::int8::map_split`).
                quads: g.maps.div_ceil(4).min(l.quads()),
                column_stride: l.stride[1],
                scatter,
            }
        });
        YmmConvSpec {
            isa,
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
            requantize,
        }
    }

    /// Accumulators per map row: two 4-pixel halves (AVX2) or one per vector.
    fn accs(&self) -> usize {
        match self.isa {
            X86Dot::Pmaddwd | X86Dot::Pmaddubsw => 2,
            X86Dot::Vpdpbusd { .. } => 3,
        }
    }

    /// Accumulator register of map row `r`, slot `j`; after the K loop slot `j` holds
    /// output vector `j`.
    fn acc(&self, r: usize, j: usize) -> usize {
        r * self.accs() + j
    }
}

/// K-loop registers past the accumulators: planes, weights, product.
const AVX2_B: usize = 8;
const AVX2_W: usize = 10;
const AVX2_PRODUCT: usize = 11;
const VNNI_B: usize = 12;
const VNNI_W: usize = 15;
const PAIRS_B: usize = 8;
const PAIRS_W: usize = 10;
/// Sixteen int16 ones: `vpmaddwd` by them adds the pairs into 32-bit lanes.
const PAIRS_ONES: usize = 11;
const PAIRS_PRODUCT: usize = 12;
/// Free in the epilogue of both: a permutation, a mask and a temporary (also the
/// activation's).
/// The first of three registers the requantizing epilogue holds its constants in when
/// the accumulators end below it (the K loop's planes and weights registers).
const EP_HELD: usize = 8;
const EP_PERM: usize = 12;
const EP_MASK: usize = 13;
const EP_T: usize = 14;

/// Encodes the convolution kernel of `s`: arguments `(planes, W, Y, bias, scale,
/// residual, scratch)` (System V), W packed for [`MR`] maps by
/// [`crate::codegen::kernels::conv_u8s8::pack_weights`], scratch of [`scratch_bytes`].
pub fn emit_conv(s: &YmmConvSpec) -> Result<Vec<u8>, String> {
    if s.tap_offsets.is_empty() || s.quads == 0 {
        return Err("INT8 conv kernel: the convolution has no taps or channels".into());
    }
    let mut a = CodeAssembler::new(64).map_err(|e| e.to_string())?;
    if let X86Dot::Vpdpbusd { evex: true } = s.isa {
        a.set_prefer_vex(false);
    }
    let mut e = ConvEmitter {
        s,
        consts: Consts { values: vec![] },
        table: a.create_label(),
        patterns: a.create_label(),
        scatter_table: a.create_label(),
        taps_table: a.create_label(),
        even_odd: a.create_label(),
    };
    e.function(&mut a)
        .map_err(|err| format!("INT8 conv kernel: {}", err.0))?;
    a.assemble(0)
        .map_err(|err| format!("INT8 conv kernel: {err}"))
}

struct ConvEmitter<'s> {
    s: &'s YmmConvSpec,
    consts: Consts,
    table: CodeLabel,
    patterns: CodeLabel,
    scatter_table: CodeLabel,
    taps_table: CodeLabel,
    /// vpermd's even lanes, then odd ones.
    even_odd: CodeLabel,
}

fn xmm(r: usize) -> AsmRegisterXmm {
    XMM[r]
}

const XMM: [AsmRegisterXmm; 16] = [
    xmm0, xmm1, xmm2, xmm3, xmm4, xmm5, xmm6, xmm7, xmm8, xmm9, xmm10, xmm11, xmm12, xmm13, xmm14,
    xmm15,
];

impl ConvEmitter<'_> {
    fn function(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        for r in SAVED {
            a.push(r)?;
        }
        // The 7th argument, scratch, is on the stack above the saved registers and the
        // return address; it stays there ([rsp + SCRATCH_ARG]).
        if self.s.requantize.is_some() {
            self.fill_padding(a)?;
        }
        let widen = self.s.isa == X86Dot::Pmaddwd;
        if self.s.tiles_outer {
            self.tiles_outer(a)?;
        } else {
            if widen {
                // All tiles' weights to int16, then the K loops read them from scratch.
                let total = self.int8_tile_bytes() * self.s.maps.div_ceil(MR);
                a.mov(r13, qword_ptr(rsp + SCRATCH_ARG))?;
                widen_weights(a, total)?;
                a.mov(rsi, qword_ptr(rsp + SCRATCH_ARG))?;
            }
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
        let per_panel = vectors(self.s.isa);
        let full_panels = self.s.vectors / per_panel;
        let rest = self.s.vectors % per_panel;
        a.xor(r10d, r10d)?;
        if full_panels > 0 {
            let mut top = a.create_label();
            a.set_label(&mut top)?;
            body(self, a, per_panel)?;
            a.add(r10, imm(per_panel * LANES * 4)?)?;
            a.cmp(r10, imm(full_panels * per_panel * LANES * 4)?)?;
            a.jb(top)?;
        }
        if rest > 0 {
            body(self, a, rest)?;
        }
        Ok(())
    }

    fn tile_bytes(&self) -> usize {
        self.int8_tile_bytes() * self.s.isa.weight_bytes()
    }

    /// Bytes of one tile's weights as stored (int8).
    fn int8_tile_bytes(&self) -> usize {
        self.s.tap_offsets.len() * self.s.quads * MR * 4
    }

    /// Map tiles outermost, each over every panel. AVX2 first widens the tile's
    /// weights (rsi walks the int8 ones) into scratch, where r13 then points.
    fn tiles_outer(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        let s = self.s;
        let full_tiles = s.maps / MR;
        let widen = s.isa == X86Dot::Pmaddwd;
        let step = if widen {
            self.int8_tile_bytes()
        } else {
            self.tile_bytes()
        };
        a.xor(r12d, r12d)?;
        a.mov(r13, rsi)?;
        let each_tile = |e: &mut Self, a: &mut CodeAssembler, rows: usize| -> AsmResult<()> {
            if widen {
                a.mov(r13, qword_ptr(rsp + SCRATCH_ARG))?;
                widen_weights(a, e.int8_tile_bytes())?;
                a.mov(r13, qword_ptr(rsp + SCRATCH_ARG))?;
            }
            e.panels(a, &mut |e, a, vecs| e.tile(a, rows, vecs))
        };
        if full_tiles > 0 {
            let mut top = a.create_label();
            a.set_label(&mut top)?;
            each_tile(self, a, MR)?;
            a.add(r12, imm(MR)?)?;
            if widen {
                a.add(rsi, imm(step)?)?;
            } else {
                a.add(r13, imm(step)?)?;
            }
            a.cmp(r12, imm(full_tiles * MR)?)?;
            a.jb(top)?;
        }
        if !s.maps.is_multiple_of(MR) {
            each_tile(self, a, s.maps % MR)?;
        }
        Ok(())
    }

    /// Every map tile over the panel at r10, `vecs` vectors wide.
    fn panel(&mut self, a: &mut CodeAssembler, vecs: usize) -> AsmResult<()> {
        let s = self.s;
        let full_tiles = s.maps / MR;
        let tile_bytes = self.tile_bytes();
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
        let slots = match s.isa {
            X86Dot::Pmaddwd => 2,
            X86Dot::Pmaddubsw | X86Dot::Vpdpbusd { .. } => vecs,
        };
        if s.isa == X86Dot::Pmaddubsw {
            let ones = YMM[PAIRS_ONES];
            a.vpcmpeqw(ones, ones, ones)?;
            a.vpsrlw(ones, ones, 15)?;
        }
        for r in 0..rows {
            for j in 0..slots {
                let y = YMM[s.acc(r, j)];
                a.vpxor(y, y, y)?;
            }
        }
        // r14: the K rows' base in this panel; a depthwise tile's 4 maps read their own
        // quad, r12 / 4.
        a.lea(r14, qword_ptr(rdi + r10))?;
        if s.depthwise {
            a.mov(rax, r12)?;
            a.shr(rax, 2)?;
            a.imul_3(rax, rax, imm(s.quad_stride)?)?;
            a.add(r14, rax)?;
        }
        // rbp walks the tile's weights: [tap][quad][MR][4]; taps in a loop over the
        // table of their offsets (r15, counter ebx), quads in an inner one (r11d).
        a.mov(rbp, r13)?;
        let mut tap_top = a.create_label();
        a.lea(r15, ptr(self.taps_table))?;
        a.mov(ebx, imm(s.tap_offsets.len())?)?;
        a.set_label(&mut tap_top)?;
        {
            a.mov(eax, dword_ptr(r15))?;
            a.add(rax, r14)?;
            a.mov(r11d, imm(s.quads)?)?;
            let mut top = a.create_label();
            a.set_label(&mut top)?;
            self.k_step(a, rows, vecs)?;
            a.add(rax, imm(s.quad_stride)?)?;
            a.add(rbp, imm(MR * 4 * s.isa.weight_bytes())?)?;
            a.dec(r11d)?;
            a.jnz(top)?;
        }
        a.add(r15, 4)?;
        a.dec(ebx)?;
        a.jnz(tap_top)?;
        if s.isa == X86Dot::Pmaddwd {
            // Lane pairs of the two halves → 8 pixels, in order.
            for r in 0..rows {
                let (lo, hi) = (YMM[s.acc(r, 0)], YMM[s.acc(r, 1)]);
                a.vphaddd(lo, lo, hi)?;
                a.vpermq(lo, lo, 0xD8)?;
            }
        }
        if s.requantize.is_some() {
            self.requantize_epilogue(a, rows, vecs)
        } else {
            self.epilogue(a, rows, vecs)
        }
    }

    /// One K step: the quad at rax times the tile's weights at rbp.
    fn k_step(&mut self, a: &mut CodeAssembler, rows: usize, vecs: usize) -> AsmResult<()> {
        let s = self.s;
        match s.isa {
            X86Dot::Pmaddwd => {
                for h in 0..2 {
                    a.vpmovzxbw(YMM[AVX2_B + h], xmmword_ptr(rax + imm(16 * h)?))?;
                }
                let w = YMM[AVX2_W];
                let p = YMM[AVX2_PRODUCT];
                for r in 0..rows {
                    a.vpbroadcastq(w, qword_ptr(rbp + imm(8 * r)?))?;
                    for h in 0..2 {
                        let acc = YMM[s.acc(r, h)];
                        a.vpmaddwd(p, YMM[AVX2_B + h], w)?;
                        a.vpaddd(acc, acc, p)?;
                    }
                }
            }
            X86Dot::Pmaddubsw => {
                for j in 0..vecs {
                    a.vmovdqu(YMM[PAIRS_B + j], ymmword_ptr(rax + imm(32 * j)?))?;
                }
                let (w, ones) = (YMM[PAIRS_W], YMM[PAIRS_ONES]);
                for r in 0..rows {
                    a.vpbroadcastd(w, dword_ptr(rbp + imm(4 * r)?))?;
                    for j in 0..vecs {
                        // Two products in flight: one register per vector.
                        let p = YMM[PAIRS_PRODUCT + j];
                        a.vpmaddubsw(p, YMM[PAIRS_B + j], w)?;
                        a.vpmaddwd(p, p, ones)?;
                        a.vpaddd(YMM[s.acc(r, j)], YMM[s.acc(r, j)], p)?;
                    }
                }
            }
            X86Dot::Vpdpbusd { .. } => {
                for j in 0..vecs {
                    a.vmovdqu(YMM[VNNI_B + j], ymmword_ptr(rax + imm(32 * j)?))?;
                }
                let w = YMM[VNNI_W];
                for r in 0..rows {
                    a.vpbroadcastd(w, dword_ptr(rbp + imm(4 * r)?))?;
                    for j in 0..vecs {
                        a.vpdpbusd(YMM[s.acc(r, j)], YMM[VNNI_B + j], w)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// rax = this panel's first column-table entry (8 bytes per vector: r10 / 4).
    fn load_entries(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        a.mov(rax, r10)?;
        a.shr(rax, 2)?;
        a.lea(r14, ptr(self.table))?;
        a.add(rax, r14)?;
        Ok(())
    }

    /// Vector `j`'s first output pixel's byte offset into r11 and its lane pattern's
    /// address into rbx (r14 = the patterns).
    fn load_vector(&mut self, a: &mut CodeAssembler, j: usize) -> AsmResult<()> {
        a.lea(r14, ptr(self.patterns))?;
        a.mov(r11d, dword_ptr(rax + imm(ENTRY * j + FIRST)?))?;
        a.shl(r11, 2)?;
        a.movzx(ebx, word_ptr(rax + imm(ENTRY * j + PATTERN)?))?;
        a.shl(ebx, 7)?;
        a.add(rbx, r14)?;
        Ok(())
    }

    /// Adds the bias and scales map row `r`'s vectors (float32 from here on).
    fn scale_row(&mut self, a: &mut CodeAssembler, r: usize, vecs: usize) -> AsmResult<()> {
        let s = self.s;
        let t = YMM[EP_T];
        a.vpbroadcastd(t, dword_ptr(rcx + r12 * 4 + imm(4 * r)?))?;
        for j in 0..vecs {
            let x = YMM[s.acc(r, j)];
            a.vpaddd(x, x, t)?;
            a.vcvtdq2ps(x, x)?;
        }
        a.vbroadcastss(t, dword_ptr(r8 + r12 * 4 + imm(4 * r)?))?;
        for j in 0..vecs {
            let x = YMM[s.acc(r, j)];
            a.vmulps(x, x, t)?;
        }
        Ok(())
    }

    /// Float32 output: each vector's valid lanes packed to the front, the residual added,
    /// activated and stored at its first output pixel.
    fn epilogue(&mut self, a: &mut CodeAssembler, rows: usize, vecs: usize) -> AsmResult<()> {
        let s = self.s;
        self.load_entries(a)?;
        // rbp: the tile's first output row; r15: its residual row.
        let row_bytes = s.out_pixels * 4;
        a.imul_3(rbp, r12, imm(row_bytes)?)?;
        if s.residual {
            a.lea(r15, qword_ptr(r9 + rbp))?;
        }
        a.add(rbp, rdx)?;
        for r in 0..rows {
            self.scale_row(a, r, vecs)?;
        }
        let v = Vecs { isa: Vector::Ymm };
        let (perm, mask, t) = (YMM[EP_PERM], YMM[EP_MASK], YMM[EP_T]);
        for j in 0..vecs {
            self.load_vector(a, j)?;
            // A vector whose 8 lanes are all outputs (consecutive ones) is read and
            // stored whole: `vmaskmovps` to memory is microcoded on AMD CPUs, and took
            // as long as the K loop on resnet18's float32-output convolutions (Zen 4).
            let (mut masked, mut done) = (a.create_label(), a.create_label());
            a.cmp(byte_ptr(rax + imm(ENTRY * j + VALID_BITS)?), 0xFF)?;
            a.jne(masked)?;
            for r in 0..rows {
                let xi = s.acc(r, j);
                let x = YMM[xi];
                if s.residual {
                    a.vaddps(x, x, ymmword_ptr(r15 + r11 + imm(r * row_bytes)?))?;
                }
                activate(a, &v, &mut self.consts, s.activation, &[xi], &[EP_T])?;
                a.vmovups(ymmword_ptr(rbp + r11 + imm(r * row_bytes)?), x)?;
            }
            a.jmp(done)?;
            a.set_label(&mut masked)?;
            if !s.compact {
                a.vmovdqu(perm, ymmword_ptr(rbx + COMPRESS))?;
            }
            a.vmovdqu(mask, ymmword_ptr(rbx + STORE_MASK))?;
            for r in 0..rows {
                let xi = s.acc(r, j);
                let x = YMM[xi];
                if !s.compact {
                    a.vpermd(x, perm, x)?;
                }
                if s.residual {
                    a.vmaskmovps(t, mask, ymmword_ptr(r15 + r11 + imm(r * row_bytes)?))?;
                    a.vaddps(x, x, t)?;
                }
                activate(a, &v, &mut self.consts, s.activation, &[xi], &[EP_T])?;
                a.vmaskmovps(ymmword_ptr(rbp + r11 + imm(r * row_bytes)?), mask, x)?;
            }
            a.set_label(&mut done)?;
        }
        Ok(())
    }

    /// Requantizing output: the tile's float32 results in wide lanes (residual spread
    /// over them), quantized, four maps packed to a pixel, invalid lanes set to the zero
    /// point, stored whole (or into phases: whole runs where the table allows, else
    /// pixel by pixel).
    fn requantize_epilogue(
        &mut self,
        a: &mut CodeAssembler,
        rows: usize,
        vecs: usize,
    ) -> AsmResult<()> {
        let s = self.s;
        let rq = s.requantize.as_ref().expect("requantizing");
        self.load_entries(a)?;
        let row_bytes = s.out_pixels * 4;
        if s.residual {
            a.imul_3(r15, r12, imm(row_bytes)?)?;
            a.add(r15, r9)?;
        }
        // rbp: the tile's output quad at this panel's first wide pixel.
        a.mov(rbp, r12)?;
        a.shr(rbp, 2)?;
        a.imul_3(rbp, rbp, imm(rq.quad_bytes)?)?;
        a.add(rbp, rdx)?;
        if rq.scatter.is_none() {
            a.add(rbp, r10)?;
        }
        for r in 0..rows {
            self.scale_row(a, r, vecs)?;
        }
        let v = Vecs { isa: Vector::Ymm };
        let inv = self.consts.get(a, rq.inv_scale);
        let zp = self.consts.get(a, rq.zero_point as f32);
        let zero = self.consts.get(a, 0.0);
        let top = self.consts.get(a, 255.0);
        let zp_bytes = u32::from_ne_bytes([rq.zero_point; 4]);
        let zp_word = self.consts.get(a, f32::from_bits(zp_bytes));
        let missing = (rows..4).fold(0u32, |w, b| w | u32::from(rq.zero_point) << (8 * b));
        let missing = self.consts.get(a, f32::from_bits(missing));
        let (perm, mask, t) = (YMM[EP_PERM], YMM[EP_MASK], YMM[EP_T]);
        // With 8 accumulators (AVX2) the K loop's registers are free here: the
        // requantization's constants are loaded once per tile, not once per vector.
        let held = (s.accs() * MR <= EP_HELD).then_some([
            YMM[EP_HELD],
            YMM[EP_HELD + 1],
            YMM[EP_HELD + 2],
        ]);
        if let Some([i, z, c]) = held {
            a.vmovups(i, ymmword_ptr(inv))?;
            a.vmovups(z, ymmword_ptr(zp))?;
            a.vmovups(c, ymmword_ptr(top))?;
        }
        for j in 0..vecs {
            self.load_vector(a, j)?;
            if s.residual {
                a.vmovdqu(mask, ymmword_ptr(rbx + STORE_MASK))?;
                if !s.compact {
                    a.vmovdqu(perm, ymmword_ptr(rbx + EXPAND))?;
                }
            }
            for r in 0..rows {
                let xi = s.acc(r, j);
                let x = YMM[xi];
                if s.residual {
                    a.vmaskmovps(t, mask, ymmword_ptr(r15 + r11 + imm(r * row_bytes)?))?;
                    if !s.compact {
                        a.vpermd(t, perm, t)?;
                    }
                    a.vaddps(x, x, t)?;
                }
                activate(a, &v, &mut self.consts, s.activation, &[xi], &[EP_T])?;
                match held {
                    Some([i, z, _]) => {
                        a.vmulps(x, x, i)?;
                        a.vaddps(x, x, z)?;
                    }
                    None => {
                        a.vmulps(x, x, ymmword_ptr(inv))?;
                        a.vaddps(x, x, ymmword_ptr(zp))?;
                    }
                }
                // vmaxps returns its second operand when the first is NaN: NaN → 0.
                a.vmaxps(x, x, ymmword_ptr(zero))?;
                match held {
                    Some([_, _, c]) => a.vminps(x, x, c)?,
                    None => a.vminps(x, x, ymmword_ptr(top))?,
                }
                a.vcvtps2dq(x, x)?;
            }
            let out = YMM[s.acc(0, j)];
            for byte in 1..rows {
                a.vpslld(t, YMM[s.acc(byte, j)], (8 * byte) as i32)?;
                a.vpor(out, out, t)?;
            }
            if rows < 4 {
                // Channels past the maps hold the zero point, as QuantizeToPlanes
                // writes them (their weights are zero either way).
                a.vpor(out, out, ymmword_ptr(missing))?;
            }
            a.vmovdqu(t, ymmword_ptr(zp_word))?;
            a.vmovdqu(mask, ymmword_ptr(rbx + VALID_MASK))?;
            a.vpblendvb(out, t, out, mask)?;
            if rq.scatter.is_none() {
                let at = rbp + imm(j * LANES * 4 + rq.offset * 4)?;
                a.vmovdqu(ymmword_ptr(at), out)?;
                continue;
            }
            self.scatter(a, j, rq.column_stride)?;
        }
        Ok(())
    }

    /// Stores vector `j`'s packed quads (in `acc(0, j)`) to their pixels in the phases:
    /// whole runs when the table marks the vector contiguous, else each valid lane.
    /// rbx: this panel's scatter indices; r11 and r14 are clobbered.
    fn scatter(&mut self, a: &mut CodeAssembler, j: usize, column_stride: usize) -> AsmResult<()> {
        let s = self.s;
        let out = YMM[s.acc(0, j)];
        let out_x = xmm(s.acc(0, j));
        a.lea(rbx, ptr(self.scatter_table))?;
        a.add(rbx, r10)?;
        let index = |lane: usize| dword_ptr(rbx + (j * LANES * 4 + 4 * lane) as i32);
        let mut slow = a.create_label();
        let mut done = a.create_label();
        if column_stride <= 2 {
            a.test(byte_ptr(rax + imm(ENTRY * j + CONTIGUOUS)?), 1)?;
            a.jz(slow)?;
            a.mov(r11d, index(0))?;
            if column_stride == 1 {
                a.vmovdqu(ymmword_ptr(rbp + r11 * 4), out)?;
            } else {
                let m = YMM[EP_MASK];
                a.vmovdqu(m, ymmword_ptr(self.even_odd))?;
                a.vpermd(m, m, out)?;
                a.vmovdqu(xmmword_ptr(rbp + r11 * 4), xmm(EP_MASK))?;
                a.mov(r11d, index(1))?;
                a.vextracti128(xmm(EP_T), m, 1)?;
                a.vmovdqu(xmmword_ptr(rbp + r11 * 4), xmm(EP_T))?;
            }
            a.jmp(done)?;
        }
        a.set_label(&mut slow)?;
        a.vextracti128(xmm(EP_T), out, 1)?;
        for lane in 0..LANES {
            let mut skip = a.create_label();
            a.test(byte_ptr(rax + imm(ENTRY * j + VALID_BITS)?), 1i32 << lane)?;
            a.jz(skip)?;
            a.mov(r11d, index(lane))?;
            let src = if lane < 4 { out_x } else { xmm(EP_T) };
            if lane % 4 == 0 {
                a.vmovd(r14d, src)?;
            } else {
                a.vpextrd(r14d, src, (lane % 4) as i32)?;
            }
            a.mov(dword_ptr(rbp + r11 * 4), r14d)?;
            a.set_label(&mut skip)?;
            a.nop()?;
        }
        a.set_label(&mut done)?;
        a.nop()?;
        Ok(())
    }

    /// Sets what the requantizing stores do not reach to the zero point: each output
    /// quad's pixels before the first wide pixel and after the last vector (all of it
    /// when scattering).
    fn fill_padding(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        let s = self.s;
        let rq = s.requantize.as_ref().expect("requantizing");
        let (offset, written_end) = match rq.scatter {
            Some(_) => (0, 0),
            None => (rq.offset, (rq.offset + s.vectors * LANES) * 4),
        };
        if written_end > rq.quad_bytes {
            return Err(AsmError("requantized output overruns its planes".into()));
        }
        let zp = u32::from_ne_bytes([rq.zero_point; 4]);
        a.mov(r11d, zp as i32)?;
        a.vmovd(xmm0, r11d)?;
        a.vpbroadcastd(ymm0, xmm0)?;
        a.mov(rbx, rdx)?;
        a.xor(r12d, r12d)?;
        let mut top = a.create_label();
        a.set_label(&mut top)?;
        for (from, to) in [(0, offset * 4), (written_end, rq.quad_bytes)] {
            FILL_RBX.fill(a, from, to)?;
        }
        a.add(rbx, imm(rq.quad_bytes)?)?;
        a.inc(r12d)?;
        a.cmp(r12d, imm(rq.quads)?)?;
        a.jb(top)?;
        Ok(())
    }

    fn data(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        emit_consts(a, &mut self.consts, LANES)?;
        // Patterns in first-use order, so the bytes depend only on the spec.
        let mut patterns: Vec<[u32; 4 * LANES]> = vec![];
        let mut entries = Vec::with_capacity(self.s.columns.len() * 2);
        for c in &self.s.columns {
            let mut p = [0u32; 4 * LANES];
            p[..LANES].copy_from_slice(&c.compress);
            p[LANES..2 * LANES].copy_from_slice(&c.expand);
            for l in 0..LANES {
                p[2 * LANES + l] = if l < c.count { u32::MAX } else { 0 };
                p[3 * LANES + l] = if c.valid >> l & 1 == 1 { u32::MAX } else { 0 };
            }
            let index = match patterns.iter().position(|q| *q == p) {
                Some(i) => i,
                None => {
                    patterns.push(p);
                    patterns.len() - 1
                }
            };
            let index = u16::try_from(index)
                .map_err(|_| AsmError("more lane patterns than a word indexes".into()))?;
            entries.push(c.first);
            entries.push(c.valid | c.contiguous << 8 | u32::from(index) << 16);
        }
        a.set_label(&mut self.table)?;
        a.dd(&entries)?;
        a.set_label(&mut self.patterns)?;
        for p in &patterns {
            a.dd(p)?;
        }
        a.set_label(&mut self.taps_table)?;
        let taps: Vec<u32> = self.s.tap_offsets.iter().map(|&o| o as u32).collect();
        a.dd(&taps)?;
        if let Some(t) = self.s.requantize.as_ref().and_then(|r| r.scatter.as_ref()) {
            a.set_label(&mut self.scatter_table)?;
            a.dd(t)?;
            a.set_label(&mut self.even_odd)?;
            a.dd(&[0, 2, 4, 6, 1, 3, 5, 7])?;
        }
        Ok(())
    }
}

/// Stack offset of the 7th argument after the saved registers' pushes.
const SCRATCH_ARG: usize = 8 * (SAVED.len() + 1);

/// Widens `bytes` (a multiple of 16) int8 weights at rsi to int16 at r13. Clobbers rax
/// and ymm0.
fn widen_weights(a: &mut CodeAssembler, bytes: usize) -> AsmResult<()> {
    a.xor(eax, eax)?;
    let mut top = a.create_label();
    a.set_label(&mut top)?;
    a.vpmovsxbw(ymm0, xmmword_ptr(rsi + rax))?;
    a.vmovdqu(ymmword_ptr(r13 + rax * 2), ymm0)?;
    a.add(rax, 16)?;
    a.cmp(rax, imm(bytes)?)?;
    a.jb(top)?;
    Ok(())
}

/// Registers that store a zero point's four bytes over a byte range: the base address,
/// two it clobbers (cursor and end), and the bytes in every lane of `vector` and in `word`.
pub(super) struct ZeroPointFill {
    pub base: AsmRegister64,
    pub cursor: AsmRegister64,
    pub end: AsmRegister64,
    pub vector: AsmRegisterYmm,
    pub word: AsmRegister32,
}

/// The GEMM and quantization kernels' registers: rbx, clobbering rax and r13, ymm0 / r11d.
pub(super) const FILL_RBX: ZeroPointFill = ZeroPointFill {
    base: rbx,
    cursor: rax,
    end: r13,
    vector: ymm0,
    word: r11d,
};

impl ZeroPointFill {
    /// Stores the zero point over bytes `from .. to` of `base` (multiples of 4): whole
    /// vectors, then dwords.
    pub(super) fn fill(&self, a: &mut CodeAssembler, from: usize, to: usize) -> AsmResult<()> {
        if to <= from {
            return Ok(());
        }
        let whole = (to - from) / 32;
        if whole > 0 {
            a.lea(self.cursor, qword_ptr(self.base + imm(from)?))?;
            a.lea(self.end, qword_ptr(self.base + imm(from + whole * 32)?))?;
            let mut top = a.create_label();
            a.set_label(&mut top)?;
            a.vmovdqu(ymmword_ptr(self.cursor), self.vector)?;
            a.add(self.cursor, 32)?;
            a.cmp(self.cursor, self.end)?;
            a.jb(top)?;
        }
        for d in 0..(to - from) % 32 / 4 {
            a.mov(
                dword_ptr(self.base + imm(from + whole * 32 + 4 * d)?),
                self.word,
            )?;
        }
        Ok(())
    }
}
