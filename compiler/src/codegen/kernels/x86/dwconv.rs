//! x86-64 depthwise convolution as machine code: `f32-dwconv-avx512f` and
//! `f32-dwconv-avx2-fma`, encoded with iced-x86 like the GEMM kernels of
//! [`super::gemm_x86`] and placed in the object with `define_function_bytes`.
//!
//! One call computes every channel of one image: `(X_n, W, Y_n, scratch, bias, R_n)`
//! (System V; bias and R are null when absent). Per input channel the kernel copies the
//! plane into a zero-bordered scratch plane, then computes each of its output maps (the
//! depth multiplier) from it, with the bias, the residual and the activation applied to
//! the accumulators before the one store, so no second pass reads the output.
//!
//! Layout of the scratch plane: `rows` rows of `stride_w` phases of `phase_w` floats,
//! phase `p` of a row holding its padded columns `p, p + s, p + 2s, …`. For stride 1
//! that is just the padded row; for stride 2 the copy deinterleaves even and odd
//! columns (vpermt2ps / shufps+vpermpd, once per input element), and tap `kw` of output
//! column `o` is then the contiguous run at phase `kw·d mod 2`, index `o + kw·d div 2`:
//! every tap is one unaligned full-vector load (folded into the FMA), as for stride 1.
//! Rows are as wide as the last, partial output vector reads, and zero there, so only
//! stores (and residual loads) need the tail mask.
//!
//! Why this shape. Measured on this Xeon (AVX-512, GEMM peak 171 GFLOP/s; a busy
//! 2-core VM: thread CPU time, min of 25 rounds, ±10–20% run to run) on MobileNetV2's
//! ten depthwise convs (3×3, pad 1, + Relu6) as one-node models; sum over the ten:
//! Cranelift 128-bit path + Clip pass 3.4–4.1 ms, this kernel 1.3–1.6 ms.
//! * Padding through a scratch copy rather than masked border loads in the tiles: the
//!   copy is one load and one store per input element at 16 lanes against ≥ 9 FMAs
//!   per output, and keeps the tile code free of per-tap masks. A border-masking
//!   kernel was not built; the copy's measured cost bounds what it could save: without
//!   the copy (timing only) the kernel of 192ch 28×28 ran 51 instead of 62 µs, and
//!   part of that is the input arriving from L2/L3, which the tiles would wait for too.
//! * Stride 2 deinterleaved once in the copy rather than per tap (not measured
//!   against each other): per tap it would take 2 loads and a port-5 permute per
//!   output vector (18 loads and 9 permutes per 9 FMAs for a 3×3), the copy takes 4
//!   loads/stores and 2 permutes per 32 inputs, once.
//! * Each phase's first copied column is 64-byte aligned (so the copy's stores do not
//!   split cache lines); the taps then load unaligned, 2 of 3 taps of a 3×3 splitting
//!   a line. Making every tap load aligned (wrong results, timing only) took 192ch
//!   28×28 from 65 to 53 µs: the ceiling of reusing aligned loads through `valignd`,
//!   not done here.
//! * The next channel is copied into a second plane before the current one is
//!   computed (independent work for the out-of-order core): 1.41 vs 1.44 ms in total,
//!   mostly on the small planes (960ch 7×7: 38 vs 50 µs).
//! * Output tiles of `rows × vecs` accumulators (AVX-512: up to 22 with the 9 taps of a
//!   3×3 held in registers; AVX2: 12, taps broadcast per tile and tap): enough
//!   independent FMA chains to cover the FMA latency on both ports.
//! * A software prefetch of the next channel's input during the tiles (before the
//!   second plane existed) measured no better: 1.62 vs 1.63 ms, slower on stride 2.
//! * Output rows of ≤ 8 columns use the 8-lane kernel even on AVX-512 (see [`emit`]).

use iced_x86::code_asm::*;

use super::activation::{activate, activation_temps};
use super::asm::{
    emit_consts, imm, AsmError, AsmResult, Consts, TailMasks, Vecs, Vector, AVX2_MASK, YMM, ZMM,
};
use crate::ops::Activation;

const F32: usize = 4;
/// Kernels with more taps fall back to the Cranelift path (code size grows with taps).
const MAX_TAPS: usize = 64;
/// Free registers the epilogue has for its activation (see [`Emitter::new`]).
const MAX_ACTIVATION_TEMPS: usize = 3;
/// Lanes the scratch layout is sized for: AVX-512's, which also covers AVX2's, so the
/// arena's scratch size does not depend on the CPU.
const LAYOUT_LANES: usize = 16;

/// One depthwise conv seen as 2-D (1-D with a unit height), for one image.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct DwSpec {
    pub channels: usize,
    /// Output maps per input channel (the depth multiplier).
    pub mg: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub out_h: usize,
    pub out_w: usize,
    pub k: [usize; 2],
    pub stride: [usize; 2],
    pub dil: [usize; 2],
    /// Leading padding (top, left); trailing padding needs no copy, the plane is zero.
    pub pad: [usize; 2],
    pub bias: bool,
    pub residual: bool,
    /// Any activation with a machine-code form (see [`activation_temps`]).
    pub activation: Activation,
}

/// The scratch plane (see the module docs).
#[derive(Clone, Copy, Debug)]
pub(crate) struct DwLayout {
    rows: usize,
    phase_w: usize,
    /// Floats before index 0 of each phase, so that the first input column copied
    /// into it lands on a 64-byte boundary: the copy's stores are then aligned (a
    /// split store per vector made the copy of a 14×14 plane ~10% of its kernel).
    lead: [usize; 2],
}

impl DwLayout {
    pub(crate) fn new(s: &DwSpec) -> DwLayout {
        let sw = s.stride[1];
        let vectors = s.out_w.div_ceil(LAYOUT_LANES) * LAYOUT_LANES;
        let reach = vectors + (s.k[1] - 1) * s.dil[1] / sw;
        let copied = (s.in_w + s.pad[1]).div_ceil(sw);
        // Index of the first copied column in each phase (see copy_row_deinterleaved).
        let pl = s.pad[1];
        let mut first = [0; 2];
        if sw == 1 {
            first[0] = pl;
        } else {
            first[pl % 2] = pl / 2;
            first[(pl + 1) % 2] = pl.div_ceil(2);
        }
        let lead = first.map(|f| (16 - f % 16) % 16);
        DwLayout {
            rows: (s.out_h - 1) * s.stride[0] + (s.k[0] - 1) * s.dil[0] + 1,
            // Whole cache lines, so every row starts 64-byte aligned.
            phase_w: (lead[0].max(lead[1]) + reach.max(copied)).div_ceil(16) * 16,
            lead,
        }
    }

    fn row_bytes(&self, s: &DwSpec) -> usize {
        s.stride[1] * self.phase_w * F32
    }

    fn plane_bytes(&self, s: &DwSpec) -> usize {
        self.rows * self.row_bytes(s)
    }

    /// Two planes: the channel being computed and the next one, being copied.
    pub(crate) fn bytes(&self, s: &DwSpec) -> usize {
        2 * self.plane_bytes(s)
    }
}

/// Whether the kernel's epilogue applies `act` (else an epilogue pass does, after it).
pub(crate) fn fuses(act: Activation) -> bool {
    activation_temps(act) <= MAX_ACTIVATION_TEMPS
}

/// Whether the machine-code kernel computes `s` (else the Cranelift path does).
pub(crate) fn supports(s: &DwSpec) -> bool {
    let sizes_ok = s.channels > 0 && s.mg > 0 && s.out_h > 0 && s.out_w > 0 && s.in_w > 0;
    sizes_ok
        && matches!(s.stride[1], 1 | 2)
        && s.k[0] * s.k[1] <= MAX_TAPS
        && fuses(s.activation)
        // Every displacement (plane offsets, output rows) fits in 32 bits with room.
        && DwLayout::new(s).bytes(s) < 1 << 30
        && s.out_h * s.out_w * F32 < 1 << 30
        && s.in_h * s.in_w * F32 < 1 << 30
}

/// The family whose kernel computes `s` on a target of family `isa`. Rows of at most 8
/// outputs waste half of a 16-lane vector: the 8-lane kernel (AVX2 + FMA, which every
/// AVX-512 target here has) was faster there (960ch 7×7: 27 vs 38 µs), the 16-lane one
/// from 14 columns up (384ch 14×14: 49 vs 59 µs).
pub(crate) fn family(s: &DwSpec, isa: Vector) -> Vector {
    if s.out_w <= 8 {
        Vector::Ymm
    } else {
        isa
    }
}

/// Encodes the kernel for `s` (which must satisfy [`supports`]).
pub(crate) fn emit(s: &DwSpec, isa: Vector) -> Result<Vec<u8>, String> {
    if !supports(s) {
        return Err(format!("no x86 depthwise kernel for {s:?}"));
    }
    let isa = family(s, isa);
    let layout = DwLayout::new(s);
    let mut e = Emitter::new(s, isa, layout);
    let mut a = CodeAssembler::new(64).map_err(|e| e.to_string())?;
    e.function(&mut a)
        .map_err(|err| format!("{}: {}", e.name(), err.0))?;
    a.assemble(0).map_err(|err| format!("{}: {err}", e.name()))
}

/// Callee-saved registers the kernel uses, pushed in this order.
const SAVED: [AsmRegister64; 6] = [rbx, rbp, r12, r13, r14, r15];

/// Output tile: `rows` output rows × `vecs` vectors, the last one `tail` lanes wide.
#[derive(Clone, Copy)]
struct Tile {
    rows: usize,
    vecs: usize,
    tail: Option<usize>,
}

/// How a vector access is masked.
#[derive(Clone, Copy, PartialEq)]
enum Mask {
    Full,
    /// AVX-512: opmask register k`n`; AVX2: mask in ymm`n`.
    Reg(usize),
}

struct Emitter<'s> {
    s: &'s DwSpec,
    v: Vecs,
    l: DwLayout,
    lanes: usize,
    consts: Consts,
    /// Weights live in registers for the whole map (else broadcast per tile and tap).
    resident: bool,
    /// Accumulators available, then the per-tile block shape.
    vecs: usize,
    rows: usize,
    /// Scratch vector registers.
    tmp: usize,
    wtmp: usize,
    /// Free registers of the epilogue's activation (`tmp` first).
    act_tmps: Vec<usize>,
    masks: TailMasks,
    /// AVX-512 deinterleave indices: even lanes, odd lanes.
    perm_table: Option<(CodeLabel, CodeLabel)>,
}

impl<'s> Emitter<'s> {
    fn new(s: &'s DwSpec, isa: Vector, l: DwLayout) -> Emitter<'s> {
        let lanes = isa.lanes();
        let taps = s.k[0] * s.k[1];
        // AVX-512: 32 registers; with ≤ 16 taps the weights stay in registers, the
        // rest hold accumulators and two temporaries (and two more below `tmp` for an
        // activation that needs three). AVX2: 16 registers, 12 accumulators, a weight
        // broadcast, a temporary, a spare and the tail mask (ymm15); the epilogue's
        // activation has the broadcast's, the temporary's and the spare.
        let extra = activation_temps(s.activation).saturating_sub(1);
        let (resident, budget, tmp, wtmp) = match isa {
            Vector::Zmm if taps <= 16 => (true, (31 - taps - extra).min(24), 31 - taps, 31),
            Vector::Zmm => (false, 24, 30, 31),
            Vector::Ymm => (false, 12, 13, 12),
        };
        let act_tmps = match isa {
            Vector::Zmm => vec![tmp, tmp - 1, tmp - 2],
            Vector::Ymm => vec![tmp, wtmp, 14],
        };
        let row_vecs = s.out_w.div_ceil(lanes);
        let max_vecs = match isa {
            Vector::Zmm => 8,
            Vector::Ymm => 4,
        };
        let blocks = row_vecs.div_ceil(max_vecs);
        let vecs = row_vecs.div_ceil(blocks);
        let rows = (budget / vecs).min(s.out_h).max(1);
        Emitter {
            s,
            v: Vecs { isa },
            l,
            lanes,
            consts: Consts { values: vec![] },
            resident,
            vecs,
            rows,
            tmp,
            wtmp,
            act_tmps,
            masks: TailMasks::default(),
            perm_table: None,
        }
    }

    fn name(&self) -> &'static str {
        match self.v.isa {
            Vector::Zmm => "f32-dwconv-avx512f",
            Vector::Ymm => "f32-dwconv-avx2-fma",
        }
    }

    fn vbytes(&self) -> usize {
        self.lanes * F32
    }

    fn weight_reg(&self, t: usize) -> usize {
        32 - self.s.k[0] * self.s.k[1] + t
    }

    fn function(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        let s = self.s;
        for r in SAVED {
            a.push(r)?;
        }
        // [rsp]: the other scratch plane (the one the next channel is copied into).
        a.sub(rsp, 8)?;
        // Zero both planes: the borders (padding, and the columns the last output
        // vector reads past the row) stay zero, the copies only write the interior.
        let plane_bytes = self.l.plane_bytes(s);
        self.v.zero(a, 0)?;
        a.xor(eax, eax)?;
        let mut zero_top = a.create_label();
        a.set_label(&mut zero_top)?;
        self.store(a, rcx + rax, 0, Mask::Full)?;
        a.add(rax, imm(self.vbytes())?)?;
        a.cmp(rax, imm(2 * plane_bytes)?)?;
        a.jb(zero_top)?;
        a.lea(rax, rcx + imm(plane_bytes)?)?;
        a.mov(qword_ptr(rsp), rax)?;
        // The output tail mask, for the whole call (the copy uses other registers).
        let tail = s.out_w % self.lanes;
        if tail != 0 {
            self.set_mask(a, 1, AVX2_MASK, tail)?;
        }
        self.copy_channel(a, false)?;
        a.mov(r10, s.channels as u64)?;
        let mut channel_top = a.create_label();
        a.set_label(&mut channel_top)?;
        // Copy the next channel into the other plane before computing this one: the
        // two are independent, so the copy's loads overlap the FMAs, and the tiles
        // never read a plane whose stores are still in flight.
        let mut no_next = a.create_label();
        a.cmp(r10, 1)?;
        a.je(no_next)?;
        self.copy_channel(a, true)?;
        a.set_label(&mut no_next)?;
        if s.mg > 1 {
            a.mov(r11, s.mg as u64)?;
            let mut map_top = a.create_label();
            a.set_label(&mut map_top)?;
            self.map_and_advance(a)?;
            a.dec(r11)?;
            a.jnz(map_top)?;
        } else {
            self.map_and_advance(a)?;
        }
        a.add(rdi, imm(s.in_h * s.in_w * F32)?)?;
        // Swap the planes.
        a.mov(rax, qword_ptr(rsp))?;
        a.mov(qword_ptr(rsp), rcx)?;
        a.mov(rcx, rax)?;
        a.dec(r10)?;
        a.jnz(channel_top)?;
        a.add(rsp, 8)?;
        for r in SAVED.iter().rev() {
            a.pop(*r)?;
        }
        a.vzeroupper()?;
        a.ret()?;
        self.data(a)
    }

    /// One output map, then the weights, bias, output and residual of the next.
    fn map_and_advance(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        let s = self.s;
        self.map(a)?;
        let taps = s.k[0] * s.k[1];
        let out_plane = s.out_h * s.out_w * F32;
        a.add(rsi, imm(taps * F32)?)?;
        a.add(rdx, imm(out_plane)?)?;
        if s.bias {
            a.add(r8, F32 as i32)?;
        }
        if s.residual {
            a.add(r9, imm(out_plane)?)?;
        }
        Ok(())
    }

    /// Sets mask `k` (AVX-512) or ymm `y` (AVX2) to the first `lanes` lanes.
    fn set_mask(
        &mut self,
        a: &mut CodeAssembler,
        k: usize,
        y: usize,
        lanes: usize,
    ) -> AsmResult<()> {
        let kr = match k {
            1 => k1,
            2 => k2,
            3 => k3,
            4 => k4,
            5 => k5,
            _ => return Err(AsmError(format!("no opmask k{k}"))),
        };
        self.masks.set(a, self.v.isa, kr, y, lanes)
    }

    fn mask_of(&self, k: usize, y: usize) -> Mask {
        match self.v.isa {
            Vector::Zmm => Mask::Reg(k),
            Vector::Ymm => Mask::Reg(y),
        }
    }

    /// `r = [m]` under `mask` (masked-off lanes become zero and are not read).
    fn load(
        &self,
        a: &mut CodeAssembler,
        r: usize,
        m: AsmMemoryOperand,
        mask: Mask,
    ) -> AsmResult<()> {
        match (self.v.isa, mask) {
            (_, Mask::Full) => self.v.load(a, r, m, false)?,
            (Vector::Ymm, Mask::Reg(y)) => a.vmaskmovps(YMM[r], YMM[y], ymmword_ptr(m))?,
            (Vector::Zmm, Mask::Reg(k)) => {
                let z = ZMM[r];
                let dst = match k {
                    1 => z.k1(),
                    2 => z.k2(),
                    3 => z.k3(),
                    4 => z.k4(),
                    _ => z.k5(),
                };
                a.vmovups(dst.z(), zmmword_ptr(m))?
            }
        }
        Ok(())
    }

    fn store(
        &self,
        a: &mut CodeAssembler,
        m: AsmMemoryOperand,
        r: usize,
        mask: Mask,
    ) -> AsmResult<()> {
        match (self.v.isa, mask) {
            (_, Mask::Full) => self.v.store(a, m, r, false)?,
            (Vector::Ymm, Mask::Reg(y)) => a.vmaskmovps(ymmword_ptr(m), YMM[y], YMM[r])?,
            (Vector::Zmm, Mask::Reg(k)) => {
                let mem = zmmword_ptr(m);
                let dst = match k {
                    1 => mem.k1(),
                    2 => mem.k2(),
                    3 => mem.k3(),
                    4 => mem.k4(),
                    _ => mem.k5(),
                };
                a.vmovups(dst, ZMM[r])?
            }
        }
        Ok(())
    }

    /// Copies input channel `rdi` into the scratch plane `rcx` or, for `next`, channel
    /// `rdi + 1` into the plane at `[rsp]` (the rows the outputs read). Uses rax, rbx,
    /// rbp, r12, r13, r15, vector registers 0–11 and (AVX-512) k2–k5.
    fn copy_channel(&mut self, a: &mut CodeAssembler, next: bool) -> AsmResult<()> {
        let s = self.s;
        let row_bytes = self.l.row_bytes(s);
        // Always one instruction: a label may precede this.
        if next {
            a.lea(r12, rdi + imm(s.in_h * s.in_w * F32)?)?;
            a.mov(r13, qword_ptr(rsp))?;
        } else {
            a.mov(r12, rdi)?;
            a.mov(r13, rcx)?;
        }
        let rows = s.in_h.min(self.l.rows.saturating_sub(s.pad[0]));
        if rows == 0 {
            return Ok(());
        }
        a.add(r13, imm(s.pad[0] * row_bytes)?)?;
        a.mov(r15, rows as u64)?;
        let mut top = a.create_label();
        a.set_label(&mut top)?;
        if s.stride[1] == 1 {
            self.copy_row(a)?;
        } else {
            self.copy_row_deinterleaved(a)?;
        }
        a.add(r12, imm(s.in_w * F32)?)?;
        a.add(r13, imm(row_bytes)?)?;
        a.dec(r15)?;
        a.jnz(top)?;
        Ok(())
    }

    /// Stride 1: input row r12 to padded row r13 at column `pad_left`.
    fn copy_row(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        let s = self.s;
        let vb = self.vbytes();
        let dst = (self.l.lead[0] + s.pad[1]) * F32;
        let full = s.in_w / self.lanes;
        // Four vectors per iteration, then the leftovers unrolled.
        const U: usize = 4;
        let loops = full / U;
        a.xor(ebx, ebx)?;
        if loops > 0 {
            let mut top = a.create_label();
            a.set_label(&mut top)?;
            for u in 0..U {
                self.load(a, u, r12 + rbx + imm(u * vb)?, Mask::Full)?;
            }
            for u in 0..U {
                self.store(a, r13 + rbx + imm(dst + u * vb)?, u, Mask::Full)?;
            }
            a.add(rbx, imm(U * vb)?)?;
            a.cmp(rbx, imm(loops * U * vb)?)?;
            a.jb(top)?;
        }
        let done = loops * U * vb;
        for u in 0..full % U {
            self.load(a, u, r12 + imm(done + u * vb)?, Mask::Full)?;
            self.store(a, r13 + imm(dst + done + u * vb)?, u, Mask::Full)?;
        }
        let rest = s.in_w % self.lanes;
        if rest > 0 {
            let at = full * vb;
            self.set_mask(a, 2, 8, rest)?;
            let m = self.mask_of(2, 8);
            self.load(a, 0, r12 + imm(at)?, m)?;
            self.store(a, r13 + imm(dst + at)?, 0, m)?;
        }
        Ok(())
    }

    /// Stride 2: input row r12 split into the even and odd padded columns of row r13.
    /// Input column `i` is padded column `i + pad_left`: a chunk of `2·lanes` inputs
    /// starting at even `i0` puts its even inputs at phase `pad_left mod 2`, index
    /// `i0/2 + pad_left div 2`, and its odd ones at the other phase, index
    /// `i0/2 + ceil(pad_left / 2)`.
    fn copy_row_deinterleaved(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        let s = self.s;
        let (lanes, vb) = (self.lanes, self.vbytes());
        let pl = s.pad[1];
        let phase = self.l.phase_w * F32;
        let (pe, po) = (pl % 2, (pl + 1) % 2);
        let even_dst = pe * phase + (self.l.lead[pe] + pl / 2) * F32;
        let odd_dst = po * phase + (self.l.lead[po] + pl.div_ceil(2)) * F32;
        let full = s.in_w / (2 * lanes);
        if self.v.isa == Vector::Zmm {
            let (evens, odds) = *self
                .perm_table
                .get_or_insert_with(|| (a.create_label(), a.create_label()));
            a.vmovups(ZMM[6], zmmword_ptr(ptr(evens)))?;
            a.vmovups(ZMM[7], zmmword_ptr(ptr(odds)))?;
        }
        // rbx: input bytes done, rbp: output index bytes (half of them).
        a.xor(ebx, ebx)?;
        a.xor(ebp, ebp)?;
        if full > 0 {
            let mut top = a.create_label();
            a.set_label(&mut top)?;
            self.load(a, 0, r12 + rbx, Mask::Full)?;
            self.load(a, 1, r12 + rbx + imm(vb)?, Mask::Full)?;
            self.deinterleave(a)?;
            self.store(a, r13 + rbp + imm(even_dst)?, 2, Mask::Full)?;
            self.store(a, r13 + rbp + imm(odd_dst)?, 3, Mask::Full)?;
            a.add(rbx, imm(2 * vb)?)?;
            a.add(rbp, imm(vb)?)?;
            a.cmp(rbx, imm(full * 2 * vb)?)?;
            a.jb(top)?;
        }
        let rest = s.in_w % (2 * lanes);
        if rest > 0 {
            let (at, out) = (full * 2 * vb, full * vb);
            let first = rest.min(lanes);
            if first == lanes {
                self.load(a, 0, r12 + imm(at)?, Mask::Full)?;
            } else {
                self.set_mask(a, 2, 8, first)?;
                self.load(a, 0, r12 + imm(at)?, self.mask_of(2, 8))?;
            }
            if rest > lanes {
                self.set_mask(a, 3, 9, rest - lanes)?;
                self.load(a, 1, r12 + imm(at + vb)?, self.mask_of(3, 9))?;
            } else {
                self.v.zero(a, 1)?;
            }
            self.deinterleave(a)?;
            let (evens, odds) = (rest.div_ceil(2), rest / 2);
            self.set_mask(a, 4, 10, evens)?;
            self.store(a, r13 + imm(out + even_dst)?, 2, self.mask_of(4, 10))?;
            if odds > 0 {
                self.set_mask(a, 5, 11, odds)?;
                self.store(a, r13 + imm(out + odd_dst)?, 3, self.mask_of(5, 11))?;
            }
        }
        Ok(())
    }

    /// Registers 0, 1 (2·lanes consecutive inputs) → 2 = even lanes, 3 = odd lanes.
    fn deinterleave(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        match self.v.isa {
            Vector::Zmm => {
                // zmm6/zmm7: even/odd indices into the 32 floats of zmm0:zmm1.
                a.vmovaps(ZMM[2], ZMM[0])?;
                a.vpermt2ps(ZMM[2], ZMM[6], ZMM[1])?;
                a.vmovaps(ZMM[3], ZMM[0])?;
                a.vpermt2ps(ZMM[3], ZMM[7], ZMM[1])?;
            }
            Vector::Ymm => {
                // shufps picks lanes within 128-bit halves: [a0 a2 b0 b2 | a4 a6 b4 b6];
                // vpermpd 0xD8 (qwords 0, 2, 1, 3) puts the a's before the b's.
                a.vshufps(YMM[2], YMM[0], YMM[1], 0x88)?;
                a.vpermpd(YMM[2], YMM[2], 0xD8)?;
                a.vshufps(YMM[3], YMM[0], YMM[1], 0xDD)?;
                a.vpermpd(YMM[3], YMM[3], 0xD8)?;
            }
        }
        Ok(())
    }

    /// One output map: weights at rsi, output plane at rdx, bias at r8, residual at r9,
    /// from the scratch plane at rcx.
    fn map(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        let s = self.s;
        if self.resident {
            for t in 0..s.k[0] * s.k[1] {
                self.v
                    .broadcast(a, self.weight_reg(t), rsi + imm(t * F32)?)?;
            }
        }
        a.mov(r12, rdx)?;
        a.mov(r13, rcx)?;
        a.mov(r14, r9)?;
        let full = s.out_h / self.rows;
        let rest = s.out_h % self.rows;
        if full > 0 {
            a.mov(r15, full as u64)?;
            let mut top = a.create_label();
            a.set_label(&mut top)?;
            self.row_block(a, self.rows)?;
            let out_rows = imm(self.rows * s.out_w * F32)?;
            a.add(r12, out_rows)?;
            a.add(r13, imm(self.rows * s.stride[0] * self.l.row_bytes(s))?)?;
            if s.residual {
                a.add(r14, out_rows)?;
            }
            a.dec(r15)?;
            a.jnz(top)?;
        }
        if rest > 0 {
            self.row_block(a, rest)?;
        }
        Ok(())
    }

    /// `rows` output rows at r12 (input rows at r13, residual at r14), column blocks
    /// of `self.vecs` vectors, the last block separately (it has the tail).
    fn row_block(&mut self, a: &mut CodeAssembler, rows: usize) -> AsmResult<()> {
        let s = self.s;
        let row_vecs = s.out_w.div_ceil(self.lanes);
        let blocks = row_vecs.div_ceil(self.vecs);
        let block_bytes = self.vecs * self.vbytes();
        a.xor(ebx, ebx)?;
        if blocks > 1 {
            let mut top = a.create_label();
            a.set_label(&mut top)?;
            self.tile(
                a,
                Tile {
                    rows,
                    vecs: self.vecs,
                    tail: None,
                },
            )?;
            a.add(rbx, imm(block_bytes)?)?;
            a.cmp(rbx, imm((blocks - 1) * block_bytes)?)?;
            a.jb(top)?;
        }
        let tail = s.out_w % self.lanes;
        self.tile(
            a,
            Tile {
                rows,
                vecs: row_vecs - (blocks - 1) * self.vecs,
                tail: (tail != 0).then_some(tail),
            },
        )
    }

    /// One tile at output column byte rbx: accumulate every tap, then bias (the
    /// initial value), residual, activation, store.
    fn tile(&mut self, a: &mut CodeAssembler, t: Tile) -> AsmResult<()> {
        let s = self.s;
        let acc = |r: usize, v: usize| r * t.vecs + v;
        let vb = self.vbytes();
        for r in 0..t.rows {
            for v in 0..t.vecs {
                if s.bias {
                    self.v.broadcast(a, acc(r, v), r8 + 0)?;
                } else {
                    self.v.zero(a, acc(r, v))?;
                }
            }
        }
        let row_bytes = self.l.row_bytes(s);
        let phase_bytes = self.l.phase_w * F32;
        for kh in 0..s.k[0] {
            for kw in 0..s.k[1] {
                let t_idx = kh * s.k[1] + kw;
                let w = if self.resident {
                    self.weight_reg(t_idx)
                } else {
                    self.v.broadcast(a, self.wtmp, rsi + imm(t_idx * F32)?)?;
                    self.wtmp
                };
                let col = kw * s.dil[1];
                let (phase, shift) = (col % s.stride[1], col / s.stride[1]);
                for r in 0..t.rows {
                    let row = (r * s.stride[0] + kh * s.dil[0]) * row_bytes;
                    for v in 0..t.vecs {
                        let col = self.l.lead[phase] + v * self.lanes + shift;
                        let off = imm(row + phase * phase_bytes + col * F32)?;
                        self.v.fma_mem(a, acc(r, v), w, r13 + rbx + off)?;
                    }
                }
            }
        }
        let masked = |v: usize| t.tail.is_some() && v + 1 == t.vecs;
        let out_off = |r: usize, v: usize| imm(r * s.out_w * F32 + v * vb);
        if s.residual {
            for r in 0..t.rows {
                for v in 0..t.vecs {
                    let at = r14 + rbx + out_off(r, v)?;
                    if masked(v) {
                        self.v.load(a, self.tmp, at, true)?;
                        self.v
                            .op(a, super::asm::VOp::Add, acc(r, v), acc(r, v), self.tmp)?;
                    } else {
                        self.v
                            .op_mem(a, super::asm::VOp::Add, acc(r, v), acc(r, v), at)?;
                    }
                }
            }
        }
        let regs: Vec<usize> = (0..t.rows * t.vecs).collect();
        activate(
            a,
            &self.v,
            &mut self.consts,
            s.activation,
            &regs,
            &self.act_tmps,
        )?;
        for r in 0..t.rows {
            for v in 0..t.vecs {
                self.v
                    .store(a, r12 + rbx + out_off(r, v)?, acc(r, v), masked(v))?;
            }
        }
        Ok(())
    }

    /// Constants, the deinterleave indices and the AVX2 mask table, after the code.
    fn data(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        emit_consts(a, &mut self.consts, self.lanes)?;
        if let Some((mut evens, mut odds)) = self.perm_table.take() {
            a.set_label(&mut evens)?;
            a.dd(&(0..16).map(|i| 2 * i).collect::<Vec<u32>>())?;
            a.set_label(&mut odds)?;
            a.dd(&(0..16).map(|i| 2 * i + 1).collect::<Vec<u32>>())?;
        }
        self.masks.emit_table(a)
    }
}
