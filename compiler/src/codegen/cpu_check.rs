//! The CPU check at a library's entry points: a library compiled for features beyond
//! its architecture's baseline asks the CPU which it has (x86-64: `cpuid`, and `xgetbv`
//! for the vector state the OS saves; aarch64: the ID registers) and returns
//! `NNC_ERR_UNSUPPORTED_CPU`, writing nothing, where one is missing, instead of dying
//! on the first instruction the CPU lacks; a multi-versioned library picks its variant
//! with the same answer.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, Block, BlockArg, InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;
use cranelift_module::{DataId, FuncId, Linkage, Module};
use cranelift_object::ObjectModule;
use iced_x86::code_asm::*;

use super::kernel::{self, PTR};
use super::target::{Arch, CpuFeature, CpuFeatures, Target};
use super::{codegen_err, ptr_signature, Result};

/// `cpuid` register bits of each x86 feature: (leaf, sub-leaf, register, bit).
#[derive(Clone, Copy)]
enum Reg {
    Ebx,
    Ecx,
    Eax,
}

fn cpuid_bit(f: CpuFeature) -> Option<(u32, u32, Reg, u32)> {
    use CpuFeature as F;
    Some(match f {
        F::Sse3 => (1, 0, Reg::Ecx, 0),
        F::Ssse3 => (1, 0, Reg::Ecx, 9),
        F::Fma => (1, 0, Reg::Ecx, 12),
        F::Sse41 => (1, 0, Reg::Ecx, 19),
        F::Sse42 => (1, 0, Reg::Ecx, 20),
        F::Popcnt => (1, 0, Reg::Ecx, 23),
        F::Avx => (1, 0, Reg::Ecx, 28),
        F::Bmi1 => (7, 0, Reg::Ebx, 3),
        F::Avx2 => (7, 0, Reg::Ebx, 5),
        F::Bmi2 => (7, 0, Reg::Ebx, 8),
        F::Avx512f => (7, 0, Reg::Ebx, 16),
        F::Avx512dq => (7, 0, Reg::Ebx, 17),
        F::Avx512vl => (7, 0, Reg::Ebx, 31),
        F::Avx512vnni => (7, 0, Reg::Ecx, 11),
        F::AvxVnni => (7, 1, Reg::Eax, 4),
        F::Lzcnt => (0x8000_0001, 0, Reg::Ecx, 5),
        F::Dotprod | F::I8mm => return None,
    })
}

/// Features whose registers the OS must save: the AVX state (XCR0 bits 1 and 2), and
/// for AVX-512 the opmask and ZMM state too (bits 5, 6 and 7).
fn xcr0_needed(f: CpuFeature) -> u64 {
    use CpuFeature as F;
    match f {
        F::Avx | F::Avx2 | F::Fma | F::AvxVnni => 0x6,
        F::Avx512f | F::Avx512dq | F::Avx512vl | F::Avx512vnni => 0xE6,
        _ => 0,
    }
}

/// Machine code of `u32 nnc_cpu_features(void)`: the [`CpuFeatures`] bits of the
/// features of `required` this CPU has and its OS enables. Only leaves the CPU
/// reports are read.
fn features_code(required: CpuFeatures) -> std::result::Result<Vec<u8>, IcedError> {
    let mut a = CodeAssembler::new(64)?;
    a.push(rbx)?;
    a.xor(r8d, r8d)?; // the answer
                      // Leaf 0: the highest standard leaf.
    a.xor(eax, eax)?;
    a.xor(ecx, ecx)?;
    a.cpuid()?;
    a.mov(r9d, eax)?;
    // XCR0 where the OS enables xgetbv (leaf 1 ECX bit 27), else 0.
    a.xor(r10d, r10d)?;
    a.mov(eax, 1u32)?;
    a.xor(ecx, ecx)?;
    a.cpuid()?;
    let mut no_xsave = a.create_label();
    a.bt(ecx, 27u32)?;
    a.jae(no_xsave)?;
    a.xor(ecx, ecx)?;
    a.xgetbv()?;
    a.mov(r10d, eax)?;
    a.set_label(&mut no_xsave)?;
    for f in required.iter() {
        let Some((leaf, sub, reg, bit)) = cpuid_bit(f) else {
            continue;
        };
        let mut absent = a.create_label();
        // The leaf must be one the CPU reports.
        if leaf >= 0x8000_0000 {
            a.mov(eax, 0x8000_0000u32)?;
            a.xor(ecx, ecx)?;
            a.cpuid()?;
            a.cmp(eax, leaf)?;
            a.jb(absent)?;
        } else {
            a.cmp(r9d, leaf)?;
            a.jb(absent)?;
        }
        if sub > 0 {
            a.mov(eax, leaf)?;
            a.xor(ecx, ecx)?;
            a.cpuid()?;
            a.cmp(eax, sub)?;
            a.jb(absent)?;
        }
        a.mov(eax, leaf)?;
        a.mov(ecx, sub)?;
        a.cpuid()?;
        match reg {
            Reg::Eax => a.bt(eax, bit)?,
            Reg::Ebx => a.bt(ebx, bit)?,
            Reg::Ecx => a.bt(ecx, bit)?,
        }
        a.jae(absent)?;
        let state = xcr0_needed(f) as u32;
        if state != 0 {
            a.mov(eax, r10d)?;
            a.and(eax, state)?;
            a.cmp(eax, state)?;
            a.jne(absent)?;
        }
        a.or(r8d, 1u32 << (f as u32))?;
        a.set_label(&mut absent)?;
    }
    a.mov(eax, r8d)?;
    a.pop(rbx)?;
    a.ret()?;
    a.assemble(0)
}

/// A library's CPU check: the feature function, the word caching its answer (0 until
/// the first call; then the features with bit 31 set), and the features required.
#[derive(Clone)]
pub struct CpuCheck {
    features: FuncId,
    state: DataId,
    required: u32,
}

/// Machine code of `u32 nnc_cpu_features(void)` on aarch64: the `Dotprod` and `I8mm`
/// bits from `ID_AA64ISAR0_EL1.DP` and `ID_AA64ISAR1_EL1.I8MM`, which Linux lets user
/// space read (it traps the `mrs` and answers with the sanitized value, `HWCAP_CPUID`);
/// no libc call, so the library still needs no shared object.
const AARCH64_FEATURES_CODE: [u32; 10] = [
    0x5280_0000, // mov  w0, #0
    0xd538_0601, // mrs  x1, ID_AA64ISAR0_EL1
    0xd36c_bc21, // ubfx x1, x1, #44, #4      (DP)
    0xb400_0041, // cbz  x1, +8
    0x3210_0000, // orr  w0, w0, #(1 << 16)   (CpuFeature::Dotprod)
    0xd538_0622, // mrs  x2, ID_AA64ISAR1_EL1
    0xd374_dc42, // ubfx x2, x2, #52, #4      (I8MM)
    0xb400_0042, // cbz  x2, +8
    0x320f_0000, // orr  w0, w0, #(1 << 17)   (CpuFeature::I8mm)
    0xd65f_03c0, // ret
];

/// The check of a library whose variants are `variants`, or `None` where nothing needs
/// checking (a baseline x86-64 or armv8 library). The feature function asks for every
/// feature any variant requires; [`CpuCheck::requiring`] gives each variant's check.
pub fn define_check(module: &mut ObjectModule, variants: &[Target]) -> Result<Option<CpuCheck>> {
    let mut asked = CpuFeatures::empty();
    for target in variants {
        for f in required_features(target).iter() {
            asked.insert(f);
        }
    }
    let Some(arch) = variants.first().map(|t| t.arch) else {
        return Ok(None);
    };
    if asked == CpuFeatures::empty() {
        return Ok(None);
    }
    let name = "nnc_cpu_features";
    let code = match arch {
        Arch::X86_64 => features_code(asked).map_err(|e| codegen_err(name, e))?,
        Arch::Aarch64 => (AARCH64_FEATURES_CODE.iter())
            .flat_map(|w| w.to_le_bytes())
            .collect(),
    };
    let sig = ptr_signature(module, 0, true);
    let features = module
        .declare_function(name, Linkage::Local, &sig)
        .map_err(|e| codegen_err(name, e))?;
    module
        .define_function_bytes(features, 16, &code, &[])
        .map_err(|e| codegen_err(name, e))?;
    let state = super::define_zeroed(module, "nnc_cpu_state", 4)?;
    Ok(Some(CpuCheck {
        features,
        state,
        required: asked.bits(),
    }))
}

/// The features a library for `target` may execute instructions of (those the check
/// can ask the CPU about).
pub fn required_features(target: &Target) -> CpuFeatures {
    let detectable = |f: CpuFeature| match target.arch {
        Arch::X86_64 => cpuid_bit(f).is_some(),
        Arch::Aarch64 => matches!(f, CpuFeature::Dotprod | CpuFeature::I8mm),
    };
    CpuFeatures::of(
        &(target.features.iter())
            .filter(|f| detectable(*f))
            .collect::<Vec<_>>(),
    )
}

const KNOWN: i64 = 1 << 31;

impl CpuCheck {
    /// The check of one variant, `None` where it requires nothing.
    pub fn requiring(&self, target: &Target) -> Option<CpuCheck> {
        let required = required_features(target).bits();
        (required != 0).then(|| CpuCheck {
            required,
            ..self.clone()
        })
    }

    /// The features of this CPU (an `i32` of [`CpuFeatures`] bits, bit 31 set). The
    /// CPU is asked once per process (`cpuid` traps to the hypervisor on a VM); racing
    /// first calls store the same answer.
    fn emit_features(&self, b: &mut FunctionBuilder, module: &mut ObjectModule) -> Value {
        let gv = module.declare_data_in_func(self.state, b.func);
        let at = b.ins().symbol_value(PTR, gv);
        let cached = b.ins().atomic_load(types::I32, kernel::flags(), at);
        let (ask, known) = (b.create_block(), b.create_block());
        b.append_block_param(known, types::I32);
        b.ins()
            .brif(cached, known, &[BlockArg::Value(cached)], ask, &[]);
        b.switch_to_block(ask);
        b.seal_block(ask);
        let f = module.declare_func_in_func(self.features, b.func);
        let call = b.ins().call(f, &[]);
        let has = b.inst_results(call)[0];
        let answer = b.ins().bor_imm_s(has, KNOWN);
        b.ins().atomic_store(kernel::flags(), answer, at);
        b.ins().jump(known, &[BlockArg::Value(answer)]);
        b.switch_to_block(known);
        b.seal_block(known);
        b.block_params(known)[0]
    }

    /// Emits the body of a multi-versioned entry point: calls, with `args`, the first
    /// of `choices` (each `(variant, its function)`, most capable first) whose required
    /// features this CPU has, and returns its status; `NNC_ERR_UNSUPPORTED_CPU` where
    /// none fits.
    pub fn emit_dispatch(
        &self,
        b: &mut FunctionBuilder,
        module: &mut ObjectModule,
        choices: &[(&Target, Option<FuncId>, FuncId)],
        args: &[Value],
    ) {
        let has = self.emit_features(b, module);
        for &(target, prepare, f) in choices {
            let next = branch_unless_all(b, has, required_features(target).bits());
            if let Some(prepare) = prepare {
                let fref = module.declare_func_in_func(prepare, b.func);
                b.ins().call(fref, &[]);
            }
            let fref = module.declare_func_in_func(f, b.func);
            let call = b.ins().call(fref, args);
            let status = b.inst_results(call)[0];
            b.ins().return_(&[status]);
            b.switch_to_block(next);
            b.seal_block(next);
        }
        return_unsupported(b);
    }

    /// Emits: where the CPU lacks a required feature, return
    /// `NNC_ERR_UNSUPPORTED_CPU`; else go on in a new block.
    pub fn emit(&self, b: &mut FunctionBuilder, module: &mut ObjectModule) {
        let has = self.emit_features(b, module);
        let fail = branch_unless_all(b, has, self.required);
        let ok = b.create_block();
        b.ins().jump(ok, &[]);
        b.switch_to_block(fail);
        b.seal_block(fail);
        return_unsupported(b);
        b.switch_to_block(ok);
        b.seal_block(ok);
    }
}

/// Goes on in a new block where `has` holds every bit of `required`; returns the
/// block it branches to otherwise (not yet switched to).
fn branch_unless_all(b: &mut FunctionBuilder, has: Value, required: u32) -> Block {
    let required = i64::from(required);
    let present = b.ins().band_imm_s(has, required);
    let all = b.ins().icmp_imm_s(IntCC::Equal, present, required);
    let (yes, no) = (b.create_block(), b.create_block());
    b.ins().brif(all, yes, &[], no, &[]);
    b.switch_to_block(yes);
    b.seal_block(yes);
    no
}

fn return_unsupported(b: &mut FunctionBuilder) {
    let code = i64::from(nnc_runtime_abi::abi::NNC_ERR_UNSUPPORTED_CPU);
    let code = b.ins().iconst(types::I32, code);
    b.ins().return_(&[code]);
}
