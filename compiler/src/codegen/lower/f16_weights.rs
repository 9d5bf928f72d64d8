//! FP16 weight storage (`nnc compile --quantize fp16`): the float32 weights a kernel
//! reads are stored as IEEE half, halving the artifact, and expanded back to float32
//! into the workspace by the node that uses them, just before its kernels run, which
//! then compute in float32 exactly as they do from float32 weights.
//!
//! The expansion is one function per object, `nnc_expand_f16(dst, src, n)`, `n` a
//! multiple of [`QUANTUM`] halves: on x86-64 targets with AVX2 or AVX-512 machine code
//! around `vcvtph2ps` (F16C, which every such CPU has), elsewhere a Cranelift loop that
//! converts with integer bit operations (Cranelift has no f16 arithmetic or
//! conversions; on aarch64 they panic).
//!
//! Why per node and not once per call: the expanded copy of one node's weights is
//! written just before its kernels read it, so it is still in L2 (or L3) when they do;
//! the workspace grows by the largest node's expanded weights, not by all of them.

use crate::codegen::isa::Isa;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, Endianness, FuncRef, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::FunctionBuilder;
use half::f16;
use iced_x86::code_asm::*;

use crate::codegen::kernel::{self, flags};
use crate::codegen::kernels::x86::asm::{AsmError, Vector, YMM, ZMM};
use crate::codegen::Target;

/// Halves per loop iteration of every expansion variant; blobs are padded to it.
pub const QUANTUM: usize = 32;

/// `floats` as little-endian halves (round to nearest even), zero-padded to a multiple
/// of [`QUANTUM`]. Magnitudes beyond half's range saturate to ±65504 rather than
/// becoming infinite, so a large weight stays large instead of poisoning its outputs.
pub fn f16_bytes(floats: &[f32]) -> Vec<u8> {
    let n = floats.len().next_multiple_of(QUANTUM);
    let mut out = Vec::with_capacity(2 * n);
    for &x in floats {
        let h = if x.is_finite() {
            f16::from_f32(x.clamp(-f16::MAX.to_f32(), f16::MAX.to_f32()))
        } else {
            f16::from_f32(x)
        };
        out.extend_from_slice(&h.to_le_bytes());
    }
    out.resize(2 * n, 0);
    out
}

/// Machine code of `nnc_expand_f16` for `target`, or None where the Cranelift body
/// ([`expand_body`]) serves.
pub fn machine_code(target: &Target) -> Option<Result<Vec<u8>, String>> {
    let isa = Isa::of(target).vector?;
    Some(x86_expand(isa).map_err(|AsmError(e)| format!("f16 expansion kernel: {e}")))
}

/// `f16-f32-vcvt-avx512f` / `-avx2`: QUANTUM halves per iteration (rdi = dst, rsi = src,
/// rdx = n).
fn x86_expand(isa: Vector) -> Result<Vec<u8>, AsmError> {
    let mut a = CodeAssembler::new(64)?;
    let mut top = a.create_label();
    let mut done = a.create_label();
    a.test(rdx, rdx)?;
    a.jz(done)?;
    a.set_label(&mut top)?;
    match isa {
        Vector::Zmm => {
            for (q, &r) in ZMM[..2].iter().enumerate() {
                a.vcvtph2ps(r, ymmword_ptr(rsi + 32 * q as i32))?;
            }
            for (q, &r) in ZMM[..2].iter().enumerate() {
                a.vmovups(zmmword_ptr(rdi + 64 * q as i32), r)?;
            }
        }
        Vector::Ymm => {
            for (q, &r) in YMM[..4].iter().enumerate() {
                a.vcvtph2ps(r, xmmword_ptr(rsi + 16 * q as i32))?;
            }
            for (q, &r) in YMM[..4].iter().enumerate() {
                a.vmovups(ymmword_ptr(rdi + 32 * q as i32), r)?;
            }
        }
    }
    a.add(rsi, (2 * QUANTUM) as i32)?;
    a.add(rdi, (4 * QUANTUM) as i32)?;
    a.sub(rdx, QUANTUM as i32)?;
    a.jnz(top)?;
    a.set_label(&mut done)?;
    a.vzeroupper()?;
    a.ret()?;
    Ok(a.assemble(0)?)
}

/// The Cranelift body of `nnc_expand_f16(dst, src, n)`, four halves per step, by the
/// bit manipulation of F. Giesen's `half_to_float`: shift exponent and mantissa into
/// place and rebias the exponent; infinities and NaNs get the rest of the bias; zeros
/// and subnormals are renormalized by one float subtraction.
pub fn expand_body(b: &mut FunctionBuilder, dst: Value, src: Value, n: Value) {
    let steps = b.ins().ushr_imm_u(n, 2);
    kernel::dynamic_loop(b, steps, |b, i| {
        let s = kernel::elem_addr(b, src, i, 8);
        let h = b.ins().uload16x4(flags(), s, 0);
        let o = convert4(b, h);
        let d = kernel::elem_addr(b, dst, i, 16);
        b.ins().store(flags(), o, d, 0);
    });
}

/// Four halves (zero-extended into an i32x4) to the bits of four floats.
fn convert4(b: &mut FunctionBuilder, h: Value) -> Value {
    let splat = |b: &mut FunctionBuilder, v: u32| {
        let s = b.ins().iconst(types::I32, v as i64);
        b.ins().splat(types::I32X4, s)
    };
    let lanes = MemFlagsData::new().with_endianness(Endianness::Little);
    let low15 = splat(b, 0x7fff);
    let magnitude = b.ins().band(h, low15);
    let o = b.ins().ishl_imm_u(magnitude, 13);
    let exp_mask = splat(b, 0x7c00 << 13);
    let exp = b.ins().band(o, exp_mask);
    let rebias = splat(b, (127 - 15) << 23);
    let o = b.ins().iadd(o, rebias);
    // Infinity / NaN: exponent all ones.
    let is_special = b.ins().icmp(IntCC::Equal, exp, exp_mask);
    let extra = splat(b, (128 - 16) << 23);
    let special = b.ins().iadd(o, extra);
    let o = b.ins().bitselect(is_special, special, o);
    // Zero / subnormal: exponent zero; renormalize through a float subtraction.
    let zero = splat(b, 0);
    let is_small = b.ins().icmp(IntCC::Equal, exp, zero);
    let one_exp = splat(b, 1 << 23);
    let small = b.ins().iadd(o, one_exp);
    let small = b.ins().bitcast(types::F32X4, lanes, small);
    let magic = splat(b, 113 << 23);
    let magic = b.ins().bitcast(types::F32X4, lanes, magic);
    let small = b.ins().fsub(small, magic);
    let small = b.ins().bitcast(types::I32X4, lanes, small);
    let o = b.ins().bitselect(is_small, small, o);
    let sign_mask = splat(b, 0x8000);
    let sign = b.ins().band(h, sign_mask);
    let sign = b.ins().ishl_imm_u(sign, 16);
    b.ins().bor(o, sign)
}

/// Expands `n` halves at `src` into floats at `dst` for any `n`: the multiple of
/// [`QUANTUM`] by `expand` (`nnc_expand_f16`), the rest inline, four at a time and the
/// last one to three lane by lane. Reads up to three halves past `src + n` (tables are
/// padded by [`f16_bytes`]), never writes past `dst + n`.
pub fn emit_expand(b: &mut FunctionBuilder, expand: FuncRef, dst: Value, src: Value, n: usize) {
    let full = n / QUANTUM * QUANTUM;
    if full > 0 {
        let count = b.ins().iconst(types::I64, full as i64);
        b.ins().call(expand, &[dst, src, count]);
    }
    for at in (full..n).step_by(4) {
        let h = b.ins().uload16x4(flags(), src, (2 * at) as i32);
        let o = convert4(b, h);
        if n - at >= 4 {
            b.ins().store(flags(), o, dst, (4 * at) as i32);
            continue;
        }
        for lane in 0..n - at {
            let x = b.ins().extractlane(o, lane as u8);
            b.ins().store(flags(), x, dst, (4 * (at + lane)) as i32);
        }
    }
}
