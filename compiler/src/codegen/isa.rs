//! The instruction families nnc's kernels are written for: one vocabulary, chosen once
//! per target (a library variant) from its CPU features, that every planner reads.
//!
//! Two things vary between CPUs and are named here: the vectors of the float32 machine
//! code ([`Vector`]) and the instruction the INT8 kernels form u8 · s8 products with
//! ([`Dot`]), in machine code and in Cranelift's code alike. A kernel takes the one its
//! code depends on; the kernel plan records which, and kernel names derive from it.

use super::target::{Arch, CpuFeature, Target};

/// The vectors of x86-64 machine code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Vector {
    /// 256-bit ymm: AVX2 (with FMA for the float32 kernels).
    Ymm,
    /// 512-bit zmm: AVX-512F.
    Zmm,
}

impl Vector {
    /// float32 lanes.
    pub fn lanes(self) -> usize {
        match self {
            Vector::Ymm => 8,
            Vector::Zmm => 16,
        }
    }

    /// The float32 GEMM's register tile: rows, and vectors per row (16 ymm hold 6 × 2
    /// accumulators, 32 zmm 8 × 3).
    pub fn tile(self) -> (usize, usize) {
        match self {
            Vector::Ymm => (6, 2),
            Vector::Zmm => (8, 3),
        }
    }

    /// The suffix of the float32 kernels' names (`f32-gemm-6x16-avx2-fma`).
    pub fn suffix(self) -> &'static str {
        match self {
            Vector::Ymm => "avx2-fma",
            Vector::Zmm => "avx512f",
        }
    }
}

/// How an INT8 kernel forms the products of uint8 activations and int8 weights and adds
/// them four to a 32-bit lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dot {
    /// x86-64's instructions, which the machine-code kernels and Cranelift's code use.
    X86(X86Dot),
    /// aarch64 `sdot` (+dotprod without +i8mm) on the activations with their top bit
    /// flipped (x − 128 as int8): sums relative to 128, which the constant terms take
    /// out like a zero point.
    Sdot,
    /// aarch64 `usdot` (+i8mm), widening multiplies on plain armv8.
    Usdot,
}

/// The x86-64 forms of [`Dot`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum X86Dot {
    /// `vpdpbusd` (AVX-512 VNNI, AVX-VNNI): four products summed into a lane in one
    /// instruction, exact. `evex`: the EVEX encoding, on ymm with AVX-512 VNNI+VL for a
    /// CPU without AVX-VNNI's VEX one.
    Vpdpbusd { evex: bool },
    /// `vpmaddubsw`, then `vpmaddwd` by ones (AVX2): the pair sums saturate past
    /// 32767, so exact only for weights of at most 64 in magnitude (255 · 64 · 2 =
    /// 32640), which the quantizer gives libraries with an AVX2 variant.
    Pmaddubsw,
    /// The bytes widened to int16, then `vpmaddwd` (x86 without VNNI): each product fits
    /// in int16 and a pair's sum in int32, so exact for any weight.
    Pmaddwd,
}

impl X86Dot {
    /// Bytes of one weight as the K loop reads it: int16 for `vpmaddwd` on widened
    /// bytes, int8 otherwise.
    pub fn weight_bytes(self) -> usize {
        match self {
            X86Dot::Pmaddwd => 2,
            X86Dot::Pmaddubsw | X86Dot::Vpdpbusd { .. } => 1,
        }
    }
}

impl Dot {
    /// The value the activation bytes are relative to: `Σ (x − offset)·w` is what the
    /// products sum.
    pub fn activation_offset(self) -> i64 {
        match self {
            Dot::Sdot => 128,
            Dot::X86(_) | Dot::Usdot => 0,
        }
    }
}

/// What a target's kernels are written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Isa {
    pub arch: Arch,
    /// The float32 machine code's vectors: x86-64 with AVX2 and FMA, or AVX-512F.
    /// `None`: Cranelift's 128-bit code (baseline x86-64, aarch64).
    pub vector: Option<Vector>,
    /// The INT8 machine code's vectors: x86-64 with AVX2, or AVX-512 VNNI (with VL).
    /// `None`: Cranelift's dot-product code.
    pub int8_vector: Option<Vector>,
    /// The INT8 products of every INT8 kernel of the target, machine code or not.
    pub dot: Dot,
}

impl Isa {
    /// The widest families `target` runs.
    pub fn of(target: &Target) -> Isa {
        let has = |fs: &[CpuFeature]| fs.iter().all(|&f| target.has(f));
        if target.arch == Arch::Aarch64 {
            let dot = match has(&[CpuFeature::Dotprod]) && !has(&[CpuFeature::I8mm]) {
                true => Dot::Sdot,
                false => Dot::Usdot,
            };
            return Isa {
                arch: target.arch,
                vector: None,
                int8_vector: None,
                dot,
            };
        }
        let vector = match (
            has(&[CpuFeature::Avx, CpuFeature::Fma]),
            has(&[CpuFeature::Avx512f]),
        ) {
            (true, true) => Some(Vector::Zmm),
            (true, false) if has(&[CpuFeature::Avx2]) => Some(Vector::Ymm),
            _ => None,
        };
        let avx512_vnni = has(&[
            CpuFeature::Avx512f,
            CpuFeature::Avx512vl,
            CpuFeature::Avx512vnni,
        ]);
        let avx_vnni = has(&[CpuFeature::Avx, CpuFeature::Avx2, CpuFeature::AvxVnni]);
        let (int8_vector, dot) = if avx512_vnni {
            (Some(Vector::Zmm), X86Dot::Vpdpbusd { evex: !avx_vnni })
        } else if avx_vnni {
            (Some(Vector::Ymm), X86Dot::Vpdpbusd { evex: false })
        } else if has(&[CpuFeature::Avx, CpuFeature::Avx2]) {
            (Some(Vector::Ymm), X86Dot::Pmaddwd)
        } else {
            (None, X86Dot::Pmaddwd)
        };
        Isa {
            arch: target.arch,
            vector,
            int8_vector,
            dot: Dot::X86(dot),
        }
    }

    /// The INT8 machine code's vectors and products, where the target has them.
    pub fn int8_x86(&self) -> Option<(Vector, X86Dot)> {
        match (self.int8_vector, self.dot) {
            (Some(v), Dot::X86(d)) => Some((v, d)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn isa(arch: Arch, cpu: &str) -> Isa {
        Isa::of(&Target::new(arch, Some(cpu)).expect("a preset"))
    }

    /// Each preset's families: what the planners pick kernels from, so a preset that
    /// lost a feature (or a family chosen past what a preset has, a SIGILL) fails here.
    #[test]
    fn each_preset_has_its_families() {
        let x86 = |cpu| isa(Arch::X86_64, cpu);
        let pairs = Dot::X86(X86Dot::Pmaddwd);
        let vex = Dot::X86(X86Dot::Vpdpbusd { evex: false });
        let evex = Dot::X86(X86Dot::Vpdpbusd { evex: true });
        let cases = [
            ("baseline", None, None, pairs),
            ("x86-64-v3", Some(Vector::Ymm), Some(Vector::Ymm), pairs),
            (
                "x86-64-v3+avxvnni",
                Some(Vector::Ymm),
                Some(Vector::Ymm),
                vex,
            ),
            ("x86-64-v4", Some(Vector::Zmm), Some(Vector::Ymm), pairs),
            ("x86-64-v4+vnni", Some(Vector::Zmm), Some(Vector::Zmm), evex),
        ];
        for (cpu, vector, int8_vector, dot) in cases {
            let i = x86(cpu);
            assert_eq!(
                (i.vector, i.int8_vector, i.dot),
                (vector, int8_vector, dot),
                "{cpu}"
            );
        }
        let arm = |cpu| isa(Arch::Aarch64, cpu);
        for (cpu, dot) in [
            ("armv8", Dot::Usdot),
            ("+dotprod", Dot::Sdot),
            ("+i8mm", Dot::Usdot),
        ] {
            let i = arm(cpu);
            assert_eq!((i.vector, i.int8_vector, i.dot), (None, None, dot), "{cpu}");
        }
        assert_eq!(
            x86("x86-64-v4+vnni").int8_x86(),
            Some((Vector::Zmm, X86Dot::Vpdpbusd { evex: true }))
        );
        assert_eq!(arm("+i8mm").int8_x86(), None);
        assert_eq!(Dot::Sdot.activation_offset(), 128);
        assert_eq!(X86Dot::Pmaddwd.weight_bytes(), 2);
    }
}
