//! `u8s8-dwconv-8px-avx2`: nnc's INT8 depthwise convolution (see
//! `lower::conv_u8s8`) on 256-bit registers, for every x86-64 variant
//! without AVX-512 VNNI.
//!
//! The GEMM kernels of [`super::conv_u8s8_ymm`] compute a depthwise map as a dense one
//! whose weights are zero outside its channel: three quarters of their products are
//! zeros. Here one register holds two wide pixels × one quad's four channels, as the
//! planes store them, so every product counts: per tap, `vpmovzxbd` widens the 8 bytes
//! of two pixels into 32-bit lanes, and `vpmaddwd` multiplies them by the tap's four
//! channel weights (int16 in the low half of each 32-bit lane, zero in the high half,
//! so each lane gets exactly `x · w`), then `vpaddd` accumulates. Four registers make a
//! chunk of 8 pixels of one output row; the integer sums are exact, and the epilogue is
//! the GEMM kernels' sequence of float32 operations, so the bytes are theirs.
//!
//! The output is the next convolution's planes (stride 1, no residual): each row's
//! valid pixels are stored (the row's last chunk under a mask), and the rest of the
//! output quad — its padding and the columns past the row — is written with the zero
//! point, as the GEMM kernels leave it.

use iced_x86::code_asm::*;

use super::activation::activate;
use super::asm::{emit_consts, imm, AsmResult, Consts, Vecs, Vector, YMM};
use super::conv_u8s8_ymm::ZeroPointFill;
use crate::codegen::kernels::conv_u8s8::ConvU8Geometry;
use crate::ops::{Activation, Requantize};

/// The kernel library's name of the kernel.
pub const KERNEL_NAME: &str = "u8s8-dwconv-8px-avx2";

/// Pixels per chunk: four registers of two pixels.
const CHUNK: usize = 8;
const ACCS: usize = 4;
/// Bytes of one tap's weights for one quad: four int16-in-int32 lanes, twice.
pub const TAP_BYTES: usize = 32;

/// The tap's weights, loaded once for the chunk's four registers.
const WEIGHTS: usize = 4;
/// The requantization's `1 / scale`, zero point and 255.0, kept for every chunk.
const INV: usize = 5;
const ZP: usize = 6;
const TOP: usize = 7;
const BIAS: usize = 8;
const SCALE: usize = 9;
const PERM: usize = 10;
/// The zero point's four bytes in every lane (xmm11 builds it).
const ZP_BYTES: usize = 11;
const INPUT: usize = 12;
const ACT_T: usize = 13;
const PACK: usize = 14;
const TAIL_MASK: usize = 15;

/// Whether the kernel computes this convolution (its activation having a register form,
/// as the plan checks for every x86 INT8 kernel): depthwise, requantized into stride-1
/// planes, no residual, whole quads of maps.
pub fn supports(g: &ConvU8Geometry, requantize: Option<&Requantize>, residual: bool) -> bool {
    let Some(r) = requantize else { return false };
    g.depthwise
        && !residual
        && g.maps.is_multiple_of(4)
        && r.layout.stride == [1, 1]
        && r.layout.cols >= g.out_w
        && g.out_w > 0
        && g.out_h > 0
}

/// The weights as the kernel reads them: per quad of maps, per tap, each map's weight
/// as an int16 zero-extended into 32 bits, the quad's four twice (two pixels per
/// register). `w` is `[maps][taps]`.
pub fn pack_weights(g: &ConvU8Geometry, w: &[i64]) -> Vec<u8> {
    let taps = g.taps.len();
    let mut out = Vec::with_capacity(g.maps.div_ceil(4) * taps * TAP_BYTES);
    for quad in 0..g.maps.div_ceil(4) {
        for t in 0..taps {
            for _ in 0..2 {
                for c in 0..4 {
                    let m = quad * 4 + c;
                    let v = if m < g.maps { w[m * taps + t] } else { 0 };
                    let lane = u32::from(v as i16 as u16);
                    out.extend_from_slice(&lane.to_le_bytes());
                }
            }
        }
    }
    out
}

/// What one call computes: `quads` output quads of one image.
pub struct DwSpec {
    quads: usize,
    /// Each tap's byte offset from an output pixel's wide input pixel.
    taps: Vec<usize>,
    in_quad_bytes: usize,
    in_row_bytes: usize,
    out_h: usize,
    out_w: usize,
    out_quad_bytes: usize,
    out_row_bytes: usize,
    /// Byte offset of output pixel (0, 0) in its quad's planes.
    out_first: usize,
    activation: Activation,
    inv_scale: f32,
    zero_point: u8,
}

impl DwSpec {
    /// The kernel of `g` (its maps: the call's) requantized by `r`.
    pub fn new(g: &ConvU8Geometry, r: &Requantize, activation: Activation) -> DwSpec {
        let l = &r.layout;
        DwSpec {
            quads: g.maps.div_ceil(4),
            taps: (0..g.taps.len()).map(|t| g.tap_offset(t)).collect(),
            in_quad_bytes: g.quad_stride(),
            in_row_bytes: g.layout.cols * 4,
            out_h: g.out_h,
            out_w: g.out_w,
            out_quad_bytes: l.phases() * l.plane_pixels() * 4,
            out_row_bytes: l.cols * 4,
            out_first: (l.pad_top * l.cols + l.pad_left) * 4,
            activation,
            inv_scale: r.inv_scale,
            zero_point: r.zero_point,
        }
    }
}

/// Encodes the kernel of `s`: arguments `(planes, W, Y, bias, scale, residual)`
/// (System V; residual unused), W from [`pack_weights`], bias and scale per map.
pub fn emit_dwconv(s: &DwSpec) -> Result<Vec<u8>, String> {
    if s.taps.is_empty() || s.quads == 0 {
        return Err("INT8 depthwise kernel: the convolution has no taps or maps".into());
    }
    // The last row's fill reaches the next row's first pixel.
    if s.out_first + s.out_h * s.out_row_bytes > s.out_quad_bytes {
        return Err("INT8 depthwise kernel: the output rows overrun their planes".into());
    }
    let mut a = CodeAssembler::new(64).map_err(|e| e.to_string())?;
    let mut e = DwEmitter {
        s,
        consts: Consts { values: vec![] },
        perm: a.create_label(),
        tail_mask: a.create_label(),
    };
    e.function(&mut a)
        .map_err(|err| format!("INT8 depthwise kernel: {}", err.0))?;
    a.assemble(0)
        .map_err(|err| format!("INT8 depthwise kernel: {err}"))
}

struct DwEmitter<'s> {
    s: &'s DwSpec,
    consts: Consts,
    perm: CodeLabel,
    tail_mask: CodeLabel,
}

const SAVED: [AsmRegister64; 4] = [rbx, rbp, r12, r13];

impl DwEmitter<'_> {
    // Registers: rdi input quad, rsi its weights, rdx output quad, rcx bias, r8 scale;
    // r10d quads left, rax input row, rbx output row, r12d rows left, r13 input chunk,
    // rbp output chunk, r9d chunks left, r11d the zero point's four bytes.
    fn function(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        let s = self.s;
        for r in SAVED {
            a.push(r)?;
        }
        let zp = u32::from_ne_bytes([s.zero_point; 4]);
        a.mov(r11d, zp as i32)?;
        a.vmovd(xmm11, r11d)?;
        a.vpbroadcastd(YMM[ZP_BYTES], xmm11)?;
        a.vmovdqu(YMM[PERM], ymmword_ptr(self.perm))?;
        for (reg, value) in [(INV, s.inv_scale), (ZP, s.zero_point as f32), (TOP, 255.0)] {
            let at = self.consts.get(a, value);
            a.vmovups(YMM[reg], ymmword_ptr(at))?;
        }
        let tail = s.out_w % CHUNK;
        if tail > 0 {
            a.vmovdqu(YMM[TAIL_MASK], ymmword_ptr(self.tail_mask))?;
        }
        a.mov(r10d, imm(s.quads)?)?;
        let mut quad_top = a.create_label();
        a.set_label(&mut quad_top)?;
        {
            a.vbroadcasti128(YMM[BIAS], xmmword_ptr(rcx))?;
            a.vbroadcastf128(YMM[SCALE], xmmword_ptr(r8))?;
            self.fill(a, rdx, 0, s.out_first)?;
            a.mov(rax, rdi)?;
            a.lea(rbx, qword_ptr(rdx + imm(s.out_first)?))?;
            a.mov(r12d, imm(s.out_h)?)?;
            let mut row_top = a.create_label();
            a.set_label(&mut row_top)?;
            self.row(a)?;
            a.add(rax, imm(s.in_row_bytes)?)?;
            a.add(rbx, imm(s.out_row_bytes)?)?;
            a.dec(r12d)?;
            a.jnz(row_top)?;
            let rows_end = s.out_first + s.out_h * s.out_row_bytes;
            self.fill(a, rdx, rows_end, s.out_quad_bytes)?;
            a.add(rdi, imm(s.in_quad_bytes)?)?;
            a.add(rsi, imm(s.taps.len() * TAP_BYTES)?)?;
            a.add(rdx, imm(s.out_quad_bytes)?)?;
            a.add(rcx, 16)?;
            a.add(r8, 16)?;
            a.dec(r10d)?;
            a.jnz(quad_top)?;
        }
        for r in SAVED.iter().rev() {
            a.pop(*r)?;
        }
        a.vzeroupper()?;
        a.ret()?;
        self.data(a)
    }

    /// One output row (input row at rax, output row at rbx): its chunks, then the
    /// columns past it up to the next row's first pixel filled with the zero point.
    fn row(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        let s = self.s;
        a.mov(r13, rax)?;
        a.mov(rbp, rbx)?;
        let full = s.out_w / CHUNK;
        if full > 0 {
            a.mov(r9d, imm(full)?)?;
            let mut top = a.create_label();
            a.set_label(&mut top)?;
            self.chunk(a, false)?;
            a.add(r13, imm(CHUNK * 4)?)?;
            a.add(rbp, imm(CHUNK * 4)?)?;
            a.dec(r9d)?;
            a.jnz(top)?;
        }
        if !s.out_w.is_multiple_of(CHUNK) {
            self.chunk(a, true)?;
        }
        self.fill(a, rbx, s.out_w * 4, s.out_row_bytes)
    }

    /// Eight output pixels (or the row's last few, `masked`) of the quad: input at r13,
    /// output at rbp.
    fn chunk(&mut self, a: &mut CodeAssembler, masked: bool) -> AsmResult<()> {
        let s = self.s;
        for &acc in &YMM[..ACCS] {
            a.vpxor(acc, acc, acc)?;
        }
        let x = YMM[INPUT];
        let w = YMM[WEIGHTS];
        for (t, &offset) in s.taps.iter().enumerate() {
            a.vmovdqu(w, ymmword_ptr(rsi + imm(t * TAP_BYTES)?))?;
            for (v, &acc) in YMM[..ACCS].iter().enumerate() {
                a.vpmovzxbd(x, qword_ptr(r13 + imm(offset + 8 * v)?))?;
                a.vpmaddwd(x, x, w)?;
                a.vpaddd(acc, acc, x)?;
            }
        }
        let vecs = Vecs { isa: Vector::Ymm };
        let zero = self.consts.get(a, 0.0);
        for (v, &y) in YMM[..ACCS].iter().enumerate() {
            a.vpaddd(y, y, YMM[BIAS])?;
            a.vcvtdq2ps(y, y)?;
            a.vmulps(y, y, YMM[SCALE])?;
            activate(a, &vecs, &mut self.consts, s.activation, &[v], &[ACT_T])?;
            a.vmulps(y, y, YMM[INV])?;
            a.vaddps(y, y, YMM[ZP])?;
            // vmaxps returns its second operand when the first is NaN: NaN → 0.
            a.vmaxps(y, y, ymmword_ptr(zero))?;
            a.vminps(y, y, YMM[TOP])?;
            a.vcvtps2dq(y, y)?;
        }
        // Dwords of pixels [0 2 4 6 | 1 3 5 7] after the per-lane packs, then in order.
        let pack = YMM[PACK];
        a.vpackusdw(YMM[0], YMM[0], YMM[1])?;
        a.vpackusdw(pack, YMM[2], YMM[3])?;
        a.vpackuswb(YMM[0], YMM[0], pack)?;
        a.vpermd(YMM[0], YMM[PERM], YMM[0])?;
        if masked {
            a.vpmaskmovd(ymmword_ptr(rbp), YMM[TAIL_MASK], YMM[0])?;
        } else {
            a.vmovdqu(ymmword_ptr(rbp), YMM[0])?;
        }
        Ok(())
    }

    /// The zero point's bytes over `[base + from, base + to)` (dword-aligned); clobbers
    /// r13 and rbp.
    fn fill(
        &mut self,
        a: &mut CodeAssembler,
        base: AsmRegister64,
        from: usize,
        to: usize,
    ) -> AsmResult<()> {
        let fill = ZeroPointFill {
            base,
            cursor: r13,
            end: rbp,
            vector: YMM[ZP_BYTES],
            word: r11d,
        };
        fill.fill(a, from, to)
    }

    fn data(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        emit_consts(a, &mut self.consts, CHUNK)?;
        a.set_label(&mut self.perm)?;
        a.dd(&[0, 4, 1, 5, 2, 6, 3, 7])?;
        a.set_label(&mut self.tail_mask)?;
        let tail = self.s.out_w % CHUNK;
        let mask: Vec<u32> = (0..CHUNK)
            .map(|i| if i < tail { u32::MAX } else { 0 })
            .collect();
        a.dd(&mask)?;
        Ok(())
    }
}
