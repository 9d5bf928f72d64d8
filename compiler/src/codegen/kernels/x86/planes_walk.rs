//! The walk both quantize-into-planes kernels (`f32-qu8-planes-avx512f`,
//! `f32-qu8-planes-avx2`) share: channel quads, then rows in groups of the vertical
//! stride (each row of a group to its own phase row), then chunks of the vector's
//! pixels, which the ISA's [`ChunkEmitter`] quantizes and stores.

use iced_x86::code_asm::*;

use super::asm::{imm, AsmResult};
use crate::ops::PlaneLayout;

/// Quantizes `lanes` (≤ `LANES`) pixels of a quad's `channels` real channels at rax
/// (float32, channel planes `height · width` apart) into the planes at rbx (the row's
/// phase-0 column 0). May clobber rdx and vector registers, not the walk's registers
/// (rax, rbx, rcx, r8, r9, r12–r15).
pub(super) trait ChunkEmitter {
    const LANES: usize;
    fn chunk(&mut self, a: &mut CodeAssembler, channels: usize, lanes: usize) -> AsmResult<()>;
}

/// Every quad of the image at rdi (float32 NCHW) into its planes at rsi.
pub(super) fn quantize_image<E: ChunkEmitter>(
    e: &mut E,
    a: &mut CodeAssembler,
    l: &PlaneLayout,
) -> AsmResult<()> {
    let full_quads = l.channels / 4;
    // r8: the quad's first float32 channel; r9: its planes.
    a.mov(r8, rdi)?;
    a.mov(r9, rsi)?;
    let plane_in = l.height * l.width * 4;
    let quad_out = l.phases() * l.plane_pixels() * 4;
    if full_quads > 0 {
        a.xor(r12d, r12d)?;
        let mut top = a.create_label();
        a.set_label(&mut top)?;
        quad(e, a, l, 4)?;
        a.add(r8, imm(4 * plane_in)?)?;
        a.add(r9, imm(quad_out)?)?;
        a.inc(r12d)?;
        a.cmp(r12d, imm(full_quads)?)?;
        a.jb(top)?;
    }
    if !l.channels.is_multiple_of(4) {
        quad(e, a, l, l.channels % 4)?;
    }
    Ok(())
}

/// All rows of the quad at r8 (float32) / r9 (planes) with `channels` real channels.
fn quad<E: ChunkEmitter>(
    e: &mut E,
    a: &mut CodeAssembler,
    l: &PlaneLayout,
    channels: usize,
) -> AsmResult<()> {
    let sh = l.stride[0];
    let row_in = l.width * 4;
    // r13 walks the input rows, r14 the plane row of the group's first row.
    let groups = l.height / sh;
    a.mov(r13, r8)?;
    a.mov(r14, r9)?;
    if groups > 0 {
        a.xor(r15d, r15d)?;
        let mut top = a.create_label();
        a.set_label(&mut top)?;
        for i in 0..sh {
            row(e, a, l, channels, i, i * row_in)?;
        }
        a.add(r13, imm(sh * row_in)?)?;
        a.add(r14, imm(l.cols * 4)?)?;
        a.inc(r15d)?;
        a.cmp(r15d, imm(groups)?)?;
        a.jb(top)?;
    }
    for i in 0..l.height % sh {
        row(e, a, l, channels, i, i * row_in)?;
    }
    Ok(())
}

/// Input row `r13 + in_off` (row `i` of its group): its chunks of `E::LANES` pixels.
fn row<E: ChunkEmitter>(
    e: &mut E,
    a: &mut CodeAssembler,
    l: &PlaneLayout,
    channels: usize,
    i: usize,
    in_off: usize,
) -> AsmResult<()> {
    let [sh, sw] = l.stride;
    let hp = i + l.pad_top; // relative to the group's first padded row
    let (phase_row, plane_row) = (hp % sh, hp / sh);
    let chunks = l.width / E::LANES;
    let tail = l.width % E::LANES;
    // rax: input chunk; rbx: planes of the row's phase-0 column 0.
    a.lea(rax, qword_ptr(r13 + imm(in_off)?))?;
    let out_off = (phase_row * sw) * l.plane_pixels() * 4 + plane_row * l.cols * 4;
    a.lea(rbx, qword_ptr(r14 + imm(out_off)?))?;
    if chunks > 0 {
        a.xor(ecx, ecx)?;
        let mut top = a.create_label();
        a.set_label(&mut top)?;
        e.chunk(a, channels, E::LANES)?;
        a.add(rax, imm(E::LANES * 4)?)?;
        a.add(rbx, imm(E::LANES * 4 / sw)?)?;
        a.inc(ecx)?;
        a.cmp(ecx, imm(chunks)?)?;
        a.jb(top)?;
    }
    if tail > 0 {
        e.chunk(a, channels, tail)?;
    }
    Ok(())
}
