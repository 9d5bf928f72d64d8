//! `f32-qu8-planes-avx2`: float32 NCHW quantized into the uint8 planes of nnc's INT8
//! convolutions (see [`crate::ops::PlaneLayout`]) on 256-bit registers, for the AVX2
//! and AVX-VNNI kernels of [`super::conv_u8s8_ymm`].

use iced_x86::code_asm::*;

use super::asm::{emit_consts, imm, AsmError, AsmResult, Consts, TailMasks, YMM};
use super::conv_u8s8_ymm::{FILL_RBX, SAVED};
use super::planes_walk::{quantize_image, ChunkEmitter};
use crate::ops::PlaneLayout;

const LANES: usize = 8;

/// Whether [`emit_quantize`] handles `layout` (strides 1 and 2).
pub fn quantize_supports(layout: &PlaneLayout) -> bool {
    layout.stride.iter().all(|&s| s == 1 || s == 2)
}

/// Encodes `f32-qu8-planes-avx2` for one image: arguments `(x, planes)`. Fills the
/// image's planes with the zero point, then quantizes 8 pixels × 4 channels at a time
/// (`vcvtps2dq` rounds half to even; the packs saturate nothing, the values being
/// clamped to 0..255 first), turns the bytes pixel-major (`vpshufb`) and stores each
/// pixel's 4 bytes to its phase.
pub fn emit_quantize(layout: &PlaneLayout, inv_scale: f32, zp: u8) -> Result<Vec<u8>, String> {
    let mut a = CodeAssembler::new(64).map_err(|e| e.to_string())?;
    let mut q = Quantizer {
        l: layout,
        consts: Consts { values: vec![] },
        shuffle: a.create_label(),
        tails: TailMasks::default(),
    };
    q.function(&mut a, inv_scale, zp)
        .map_err(|e| format!("INT8 quantize kernel: {}", e.0))?;
    a.assemble(0)
        .map_err(|e| format!("INT8 quantize kernel: {e}"))
}

const Q_TAIL: usize = 9;
const Q_PERM: usize = 10;
const Q_SHUFFLE: usize = 11;
const Q_INV: usize = 12;
const Q_ZP: usize = 13;
const Q_ZERO: usize = 14;
const Q_TOP: usize = 15;

struct Quantizer<'l> {
    l: &'l PlaneLayout,
    consts: Consts,
    /// vpshufb's channel-major → pixel-major bytes, then vpermd's even/odd dwords.
    shuffle: CodeLabel,
    tails: TailMasks,
}

impl Quantizer<'_> {
    fn function(&mut self, a: &mut CodeAssembler, inv: f32, zp: u8) -> AsmResult<()> {
        let l = self.l;
        if !quantize_supports(l) {
            return Err(AsmError(format!(
                "no quantize kernel for strides {:?}",
                l.stride
            )));
        }
        for r in SAVED {
            a.push(r)?;
        }
        a.mov(r11d, i32::from_ne_bytes([zp; 4]))?;
        a.vmovd(xmm0, r11d)?;
        a.vpbroadcastd(ymm0, xmm0)?;
        a.mov(rbx, rsi)?;
        FILL_RBX.fill(a, 0, l.image_bytes())?;
        let zero = self.consts.get(a, 0.0);
        let top = self.consts.get(a, 255.0);
        let inv = self.consts.get(a, inv);
        let zpf = self.consts.get(a, zp as f32);
        a.vmovups(YMM[Q_ZERO], ymmword_ptr(zero))?;
        a.vmovups(YMM[Q_TOP], ymmword_ptr(top))?;
        a.vmovups(YMM[Q_INV], ymmword_ptr(inv))?;
        a.vmovups(YMM[Q_ZP], ymmword_ptr(zpf))?;
        a.lea(rax, ptr(self.shuffle))?;
        a.vmovdqu(YMM[Q_SHUFFLE], ymmword_ptr(rax))?;
        a.vmovdqu(YMM[Q_PERM], ymmword_ptr(rax + 32))?;
        quantize_image(self, a, l)?;
        for r in SAVED.iter().rev() {
            a.pop(*r)?;
        }
        a.vzeroupper()?;
        a.ret()?;
        emit_consts(a, &mut self.consts, LANES)?;
        a.set_label(&mut self.shuffle)?;
        let within: Vec<u8> = (0..16u8).map(|i| i % 4 * 4 + i / 4).collect();
        let mut bytes = within.clone();
        bytes.extend(&within);
        a.db(&bytes)?;
        a.dd(&[0, 2, 4, 6, 1, 3, 5, 7])?;
        self.tails.emit_table(a)
    }
}

impl ChunkEmitter for Quantizer<'_> {
    const LANES: usize = LANES;

    /// `lanes` pixels at rax → planes at rbx.
    fn chunk(&mut self, a: &mut CodeAssembler, channels: usize, lanes: usize) -> AsmResult<()> {
        let l = self.l;
        let plane_in = l.height * l.width * 4;
        if lanes < LANES {
            self.tails.ymm(a, Q_TAIL, lanes, rdx)?;
        }
        for (c, &y) in YMM.iter().enumerate().take(4) {
            if c >= channels {
                a.vmovaps(y, YMM[Q_ZERO])?;
            } else if lanes < LANES {
                a.vmaskmovps(y, YMM[Q_TAIL], ymmword_ptr(rax + imm(c * plane_in)?))?;
            } else {
                a.vmovups(y, ymmword_ptr(rax + imm(c * plane_in)?))?;
            }
            a.vmulps(y, y, YMM[Q_INV])?;
            a.vaddps(y, y, YMM[Q_ZP])?;
            // vmaxps returns its second operand when the first is NaN: NaN → 0.
            a.vmaxps(y, y, YMM[Q_ZERO])?;
            a.vminps(y, y, YMM[Q_TOP])?;
            a.vcvtps2dq(y, y)?;
        }
        // Per 128-bit lane: channel-major bytes of 4 pixels, then pixel-major.
        a.vpackusdw(ymm4, ymm0, ymm1)?;
        a.vpackusdw(ymm5, ymm2, ymm3)?;
        a.vpackuswb(ymm4, ymm4, ymm5)?;
        a.vpshufb(ymm4, ymm4, YMM[Q_SHUFFLE])?;
        let sw = l.stride[1];
        if sw == 1 {
            let at = rbx + imm(l.pad_left * 4)?;
            if lanes == LANES {
                a.vmovdqu(ymmword_ptr(at), ymm4)?;
            } else {
                a.vmaskmovps(ymmword_ptr(at), YMM[Q_TAIL], ymm4)?;
            }
            return Ok(());
        }
        // Stride 2: even pixels to one column phase, odd ones to the other.
        a.vpermd(ymm4, YMM[Q_PERM], ymm4)?;
        a.vextracti128(xmm5, ymm4, 1)?;
        let even = lanes.div_ceil(2);
        let odd = lanes / 2;
        // Padded column of lane 0 is pad_left: its phase is pad_left % 2, its plane
        // column pad_left / 2; lane 1's is the other phase, column (pad_left + 1) / 2.
        let plane = l.plane_pixels() * 4;
        let (even_phase, odd_phase) = if l.pad_left % 2 == 1 { (1, 0) } else { (0, 1) };
        let even_at = rbx + imm(even_phase * plane + l.pad_left / 2 * 4)?;
        let odd_at = rbx + imm(odd_phase * plane + l.pad_left.div_ceil(2) * 4)?;
        for (count, at, reg) in [(even, even_at, xmm4), (odd, odd_at, xmm5)] {
            if count == 0 {
                continue;
            }
            if count == 4 {
                a.vmovdqu(xmmword_ptr(at), reg)?;
            } else {
                self.tails.ymm(a, 6, count, rdx)?;
                a.vmaskmovps(xmmword_ptr(at), xmm6, reg)?;
            }
        }
        Ok(())
    }
}
