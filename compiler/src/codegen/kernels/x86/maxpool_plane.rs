//! x86-64 separable 2-D max pooling of planes whose size only the run knows
//! (`lower::planes`): `f32-maxpool-plane-avx512f` and `f32-maxpool-plane-avx2-fma`.
//! The run-time twin of `super::maxpool2d`: the same row buffer in padded coordinates
//! (−∞ outside the input columns), the same passes, the extents read from `counts`.
//!
//! Per output row, the vertical pass takes the maximum of the window's input rows
//! column by column into the row buffer (one load and one `vmaxps` per row and vector,
//! straight from the input: no bordered copy of the plane); rows whose window reaches
//! past the plane take only the rows inside it, one pass each. The horizontal pass then
//! takes each window's maximum along the buffer, a vector of outputs at a time (stride
//! 2: the even and odd floats of a pair of vectors picked by one permute each). Each
//! row's last vector runs under a tail mask.
//!
//! Why: the bordered copy and Cranelift's `fmax` (a compare-and-blend sequence for IEEE
//! NaN rules, four lanes at a time) took ResNet-18's 3×3/2 pool on run-time planes
//! 0.65 ms against the static kernel's 0.12 ms.
//!
//! NaN: the accumulators start at −∞ and each input is the first operand of `vmaxps`,
//! which returns the second (the accumulator) when either is NaN, so a NaN input never
//! wins: the interpreter's and `maxpool2d`'s rule.
//!
//! The kernel is `(X, Y, counts, row buffer)`, System V, `X` and `Y` all planes in
//! order, `counts` eight u64s (see [`COUNTS`]), the row buffer [`row_floats`] floats.

use iced_x86::code_asm::*;

use super::asm::{imm, AsmError, AsmResult, TailMasks, VOp, Vecs, Vector, AVX2_MASK};
use super::maxpool2d::{window_maximum, PoolConstants, ACC, NEG_INF, X};

const F32: usize = 4;

/// The fields of `counts`, in order: planes, input height and width, output height and
/// width, bytes of an input row, bytes between the rows of a window (`dy` rows), bytes
/// of an input plane.
pub const COUNTS: [&str; 8] = [
    "planes",
    "in_h",
    "in_w",
    "out_h",
    "out_w",
    "in_row_bytes",
    "window_row_bytes",
    "in_plane_bytes",
];
const PLANES: usize = 0;
const IN_H: usize = 8;
const IN_W: usize = 16;
const OUT_H: usize = 24;
const OUT_W: usize = 32;
const IN_ROW_BYTES: usize = 40;
const WINDOW_ROW_BYTES: usize = 48;
const IN_PLANE_BYTES: usize = 56;

/// One pool's window, baked into the kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct MaxPoolPlaneSpec {
    pub isa: Vector,
    /// Window height and width.
    pub kernel: [usize; 2],
    pub strides: [usize; 2],
    pub dilations: [usize; 2],
    /// Leading pads (top, left).
    pub pads: [usize; 2],
}

/// Registers pointing at the window's input rows in the vertical pass.
const ROWS: [AsmRegister64; 5] = [rbx, rbp, r12, r13, r14];
/// Callee-saved registers the kernel uses.
const SAVED: [AsmRegister64; 6] = [rbx, rbp, r12, r13, r14, r15];

/// Whether the kernel takes the pool: at most five window rows, column stride 1 (any
/// dilation) or 2 (none).
pub(crate) fn supports(s: &MaxPoolPlaneSpec) -> bool {
    let [kh, kw] = s.kernel;
    (1..=ROWS.len()).contains(&kh)
        && kw >= 1
        && s.strides[0] >= 1
        && s.dilations[0] >= 1
        && match s.strides[1] {
            1 => s.dilations[1] >= 1,
            2 => s.dilations[1] == 1,
            _ => false,
        }
}

/// Floats of the row buffer for inputs at most `max_in_w` wide and outputs at most
/// `max_out_w` wide: the left pad and the input columns, and every float the
/// horizontal pass's whole vectors read (their last tap, and a stride-2 pair's second
/// vector).
pub fn row_floats(s: &MaxPoolPlaneSpec, max_in_w: usize, max_out_w: usize) -> usize {
    let lanes = s.isa.lanes();
    let vertical = s.pads[1] + max_in_w.next_multiple_of(lanes);
    let horizontal = max_out_w.next_multiple_of(lanes) * s.strides[1]
        + (s.kernel[1] - 1) * s.dilations[1]
        + 2 * lanes;
    vertical.max(horizontal).next_multiple_of(lanes)
}

/// The kernel for row buffers of `row_floats` floats (see the module's comment).
pub(crate) fn emit(s: &MaxPoolPlaneSpec, row_floats: usize) -> Result<Vec<u8>, String> {
    if !supports(s) {
        return Err(format!("no plane max pool for {s:?}"));
    }
    let mut a = CodeAssembler::new(64).map_err(|e| e.to_string())?;
    let mut e = Emitter {
        s,
        v: Vecs { isa: s.isa },
        masks: TailMasks::default(),
    };
    e.code(&mut a, row_floats).map_err(|AsmError(e)| e)?;
    a.assemble(0)
        .map_err(|e| format!("plane max pool kernel: {e}"))
}

struct Emitter<'s> {
    s: &'s MaxPoolPlaneSpec,
    v: Vecs,
    masks: TailMasks,
}

/// Registers through the kernel: rdi the plane's input, rsi the output row, rdx
/// `counts`, rcx the row buffer, r8 planes left, r9 the output row's index, r10 its
/// window's first input row (signed), r11 a column's byte offset, r15 a loop's count,
/// rax scratch (tail masks).
impl Emitter<'_> {
    fn lanes(&self) -> usize {
        self.s.isa.lanes()
    }

    fn code(&mut self, a: &mut CodeAssembler, row_floats: usize) -> AsmResult<()> {
        let s = self.s;
        let lanes = self.lanes();
        let mut done = a.create_label();
        for r in SAVED {
            a.push(r)?;
        }
        let constants = PoolConstants::load(a, &self.v)?;
        // The buffer starts all −∞; the vertical passes write only the input columns.
        for v in 0..row_floats / lanes {
            self.v
                .store(a, rcx + imm(v * lanes * F32)?, NEG_INF, false)?;
        }
        a.mov(r8, qword_ptr(rdx + PLANES))?;
        for field in [PLANES, OUT_H, OUT_W, IN_H, IN_W] {
            a.cmp(qword_ptr(rdx + field), 0)?;
            a.jle(done)?;
        }
        let mut plane_top = a.create_label();
        a.set_label(&mut plane_top)?;
        a.xor(r9d, r9d)?;
        let mut row_top = a.create_label();
        a.set_label(&mut row_top)?;
        a.imul_3(r10, r9, imm(s.strides[0])?)?;
        a.sub(r10, imm(s.pads[0])?)?;
        self.vertical(a)?;
        self.horizontal(a)?;
        a.mov(rax, qword_ptr(rdx + OUT_W))?;
        a.lea(rsi, rsi + rax * 4)?;
        a.inc(r9)?;
        a.cmp(r9, qword_ptr(rdx + OUT_H))?;
        a.jl(row_top)?;
        a.add(rdi, qword_ptr(rdx + IN_PLANE_BYTES))?;
        a.dec(r8)?;
        a.jnz(plane_top)?;
        a.set_label(&mut done)?;
        for r in SAVED.iter().rev() {
            a.pop(*r)?;
        }
        a.vzeroupper()?;
        a.ret()?;
        constants.emit(a)?;
        self.masks.emit_table(a)
    }

    /// The vertical pass of the output row whose window starts at input row r10: all
    /// rows at once where they are all inside the plane, else one pass per row inside.
    fn vertical(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        let s = self.s;
        let kh = s.kernel[0];
        let (mut border, mut end) = (a.create_label(), a.create_label());
        a.test(r10, r10)?;
        a.js(border)?;
        a.lea(rax, r10 + imm((kh - 1) * s.dilations[0])?)?;
        a.cmp(rax, qword_ptr(rdx + IN_H))?;
        a.jge(border)?;
        // ROWS[ky] = X + (r10 + ky·dy) · in_row_bytes.
        a.mov(rax, r10)?;
        a.imul_2(rax, qword_ptr(rdx + IN_ROW_BYTES))?;
        a.add(rax, rdi)?;
        for (ky, &row) in ROWS[..kh].iter().enumerate() {
            if ky > 0 {
                a.add(rax, qword_ptr(rdx + WINDOW_ROW_BYTES))?;
            }
            a.mov(row, rax)?;
        }
        let rows = &ROWS[..kh];
        self.columns(a, &|e, a, masked| {
            e.v.op(a, VOp::Max, ACC, NEG_INF, NEG_INF)?;
            for &row in rows {
                e.v.load(a, X, row + r11, masked)?;
                e.v.op(a, VOp::Max, ACC, X, ACC)?;
            }
            Ok(())
        })?;
        a.jmp(end)?;

        // A window reaching past the plane: the columns set to −∞, then each row inside
        // taken in turn.
        a.set_label(&mut border)?;
        self.columns(a, &|e, a, _| {
            Ok(e.v.op(a, VOp::Max, ACC, NEG_INF, NEG_INF)?)
        })?;
        for ky in 0..kh {
            let mut skip = a.create_label();
            a.lea(rax, r10 + imm(ky * s.dilations[0])?)?;
            a.cmp(rax, qword_ptr(rdx + IN_H))?;
            a.jae(skip)?;
            a.imul_2(rax, qword_ptr(rdx + IN_ROW_BYTES))?;
            a.lea(rbx, rdi + rax)?;
            let pl = s.pads[1] * F32;
            self.columns(a, &|e, a, masked| {
                e.v.load(a, ACC, rcx + r11 + imm(pl)?, masked)?;
                e.v.load(a, X, rbx + r11, masked)?;
                Ok(e.v.op(a, VOp::Max, ACC, X, ACC)?)
            })?;
            a.set_label(&mut skip)?;
            a.nop()?;
        }
        a.set_label(&mut end)?;
        a.nop()?;
        Ok(())
    }

    /// `body` (which leaves the vector in ACC) for each vector of the input's columns,
    /// r11 their byte offset, stored into the row buffer at the left pad; the last
    /// vector under the tail mask.
    fn columns(
        &mut self,
        a: &mut CodeAssembler,
        body: &dyn Fn(&mut Self, &mut CodeAssembler, bool) -> AsmResult<()>,
    ) -> AsmResult<()> {
        let pl = self.s.pads[1] * F32;
        let store = |e: &mut Self, a: &mut CodeAssembler, masked: bool| -> AsmResult<()> {
            body(e, a, masked)?;
            Ok(e.v.store(a, rcx + r11 + imm(pl)?, ACC, masked)?)
        };
        self.vectors(a, IN_W, &[(r11, 1)], &store)
    }

    /// `body` once per whole vector of a row of `counts[field]` elements, r15 counting,
    /// each register of `advance` starting at 0 and advancing by its multiple of a
    /// vector's bytes; then once under the tail mask where the row ends inside a vector.
    fn vectors(
        &mut self,
        a: &mut CodeAssembler,
        field: usize,
        advance: &[(AsmRegister64, usize)],
        body: &dyn Fn(&mut Self, &mut CodeAssembler, bool) -> AsmResult<()>,
    ) -> AsmResult<()> {
        let lanes = self.lanes();
        let (mut tail, mut end) = (a.create_label(), a.create_label());
        for &(reg, _) in advance {
            a.xor(reg, reg)?;
        }
        a.mov(r15, qword_ptr(rdx + field))?;
        a.shr(r15, lanes.trailing_zeros())?;
        a.jz(tail)?;
        let mut top = a.create_label();
        a.set_label(&mut top)?;
        body(self, a, false)?;
        for &(reg, times) in advance {
            a.add(reg, imm(times * lanes * F32)?)?;
        }
        a.dec(r15)?;
        a.jnz(top)?;
        a.set_label(&mut tail)?;
        a.mov(rax, qword_ptr(rdx + field))?;
        a.and(rax, imm(lanes - 1)?)?;
        a.jz(end)?;
        self.masks
            .set_counted(a, self.s.isa, k1, AVX2_MASK, rax, r15)?;
        body(self, a, true)?;
        a.set_label(&mut end)?;
        a.nop()?;
        Ok(())
    }

    /// `Y[j] = max over t < kw of row[j·sx + t·dx]`, a vector of outputs at a time: r11
    /// walks the buffer, r12 the output row. The buffer's loads are whole vectors (it
    /// has the slack); only the last store is masked.
    fn horizontal(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        let s = self.s;
        let (kw, step) = (s.kernel[1], s.dilations[1]);
        let outputs = |e: &mut Self, a: &mut CodeAssembler, masked: bool| -> AsmResult<()> {
            let at = |floats: usize| Ok(rcx + r11 + imm(floats * F32)?);
            window_maximum(a, &e.v, (kw, step, s.strides[1]), &at)?;
            Ok(e.v.store(a, rsi + r12, ACC, masked)?)
        };
        self.vectors(a, OUT_W, &[(r11, s.strides[1]), (r12, 1)], &outputs)
    }
}
