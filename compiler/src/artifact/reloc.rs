//! Relocation semantics for the two architectures the shared-object linker
//! supports: how each relocation type computes its value and how that value is
//! encoded into the relocated field (a data word or an instruction immediate).
//!
//! Notation (as in the psABIs): `S` symbol address, `A` addend, `P` address of
//! the place being relocated, `G` address of the GOT entry for the symbol,
//! `Page(x) = x & !0xfff`.

use object::elf;

use super::ArtifactError;

/// Target architecture of the object being linked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arch {
    X86_64,
    Aarch64,
}

impl Arch {
    pub(crate) fn from_machine(e_machine: u16) -> Result<Self, ArtifactError> {
        match e_machine {
            elf::EM_X86_64 => Ok(Arch::X86_64),
            elf::EM_AARCH64 => Ok(Arch::Aarch64),
            other => Err(ArtifactError::UnsupportedMachine(other)),
        }
    }

    pub(crate) fn e_machine(self) -> u16 {
        match self {
            Arch::X86_64 => elf::EM_X86_64,
            Arch::Aarch64 => elf::EM_AARCH64,
        }
    }

    /// The largest page size the output must work with. aarch64 Linux kernels
    /// may run with 4, 16 or 64 KiB pages, so segments are laid out for 64 KiB
    /// (as GNU ld and lld do by default there).
    pub(crate) fn max_page_size(self) -> u64 {
        match self {
            Arch::X86_64 => 0x1000,
            Arch::Aarch64 => 0x1_0000,
        }
    }

    /// The dynamic relocation that adds the load base to an addend.
    pub(crate) fn relative_reloc(self) -> u32 {
        match self {
            Arch::X86_64 => elf::R_X86_64_RELATIVE,
            Arch::Aarch64 => elf::R_AARCH64_RELATIVE,
        }
    }

    /// Human-readable name of a relocation type, for error messages.
    pub(crate) fn reloc_name(self, r_type: u32) -> String {
        let table = match self {
            Arch::X86_64 => X86_64_NAMES,
            Arch::Aarch64 => AARCH64_NAMES,
        };
        match table.iter().find(|(value, _)| *value == r_type) {
            Some((_, name)) => format!("{name} ({r_type})"),
            None => format!("unknown relocation type {r_type}"),
        }
    }

    /// How to process relocation `r_type`.
    pub(crate) fn howto(self, r_type: u32) -> HowTo {
        match self {
            Arch::X86_64 => howto_x86_64(r_type),
            Arch::Aarch64 => howto_aarch64(r_type),
        }
    }
}

/// What the linker does with one relocation type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HowTo {
    /// A no-op relocation (`R_*_NONE`).
    Ignore,
    /// Compute a value with `Calc` and store it into `Field`.
    Apply(Calc, Field),
    /// Not implemented; linking fails with the relocation's name.
    Unsupported,
}

/// How the value stored by a relocation is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Calc {
    /// `S + A`, a full address. In a shared object this needs a RELATIVE
    /// dynamic relocation (unless `S` is an absolute symbol).
    Abs,
    /// `S + A - P`.
    PcRel,
    /// `Page(S + A) - Page(P)` (aarch64 ADRP).
    PageRel,
    /// `S + A`, of which only the low 12 bits are encoded. Position independent
    /// because the load base is always page aligned.
    AbsLo12,
    /// `G + A - P` where the GOT entry holds `S` (x86-64 GOTPCREL family).
    GotPcRel,
    /// `Page(G) - Page(P)` where the GOT entry holds `S + A` (aarch64).
    GotPageRel,
    /// `G`, low 12 bits, where the GOT entry holds `S + A` (aarch64).
    GotLo12,
}

impl Calc {
    /// Whether the relocation needs a GOT entry.
    pub(crate) fn uses_got(self) -> bool {
        matches!(self, Calc::GotPcRel | Calc::GotPageRel | Calc::GotLo12)
    }

    /// Whether the addend is part of the GOT entry's contents (aarch64 GDAT(S+A))
    /// rather than applied to the GOT entry address (x86-64 G + A - P).
    pub(crate) fn got_entry_includes_addend(self) -> bool {
        matches!(self, Calc::GotPageRel | Calc::GotLo12)
    }
}

/// Where and how a computed value is stored (all little-endian).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Field {
    /// 64-bit data word; any value.
    Data64,
    /// 32-bit data word holding a signed value (x86-64 PC32 family).
    Data32Signed,
    /// 32-bit data word holding a signed or unsigned value (aarch64 PREL32).
    Data32Any,
    /// ADRP immediate: the page delta `>> 12`, 21 bits signed (±4 GiB).
    A64Adrp,
    /// ADR immediate: 21 bits signed (±1 MiB).
    A64Adr,
    /// ADD (immediate) imm12, unscaled, no overflow check.
    A64AddLo12,
    /// LDR/STR (unsigned offset) imm12 scaled by the access size `1 << shift`,
    /// no overflow check but the low bits must be zero.
    A64LdStLo12 { shift: u32 },
    /// B/BL imm26, in instructions (±128 MiB).
    A64Branch26,
    /// B.cond/CBZ/LDR (literal) imm19, in instructions (±1 MiB).
    A64Imm19,
    /// TBZ/TBNZ imm14, in instructions (±32 KiB).
    A64Imm14,
}

impl Field {
    /// Number of bytes the field occupies at the relocated place.
    pub(crate) fn width(self) -> usize {
        match self {
            Field::Data64 => 8,
            _ => 4,
        }
    }
}

fn howto_x86_64(r_type: u32) -> HowTo {
    use HowTo::Apply;
    match r_type {
        elf::R_X86_64_NONE => HowTo::Ignore,
        elf::R_X86_64_64 => Apply(Calc::Abs, Field::Data64),
        elf::R_X86_64_PC32 | elf::R_X86_64_PLT32 => Apply(Calc::PcRel, Field::Data32Signed),
        elf::R_X86_64_PC64 => Apply(Calc::PcRel, Field::Data64),
        elf::R_X86_64_GOTPCREL | elf::R_X86_64_GOTPCRELX | elf::R_X86_64_REX_GOTPCRELX => {
            Apply(Calc::GotPcRel, Field::Data32Signed)
        }
        _ => HowTo::Unsupported,
    }
}

fn howto_aarch64(r_type: u32) -> HowTo {
    use HowTo::Apply;
    // 256 is the historical R_AARCH64_NONE ("withdrawn") number, still emitted
    // by some tools.
    const R_AARCH64_NONE_OLD: u32 = 256;
    let ldst = |shift| Apply(Calc::AbsLo12, Field::A64LdStLo12 { shift });
    match r_type {
        elf::R_AARCH64_NONE | R_AARCH64_NONE_OLD => HowTo::Ignore,
        elf::R_AARCH64_ABS64 => Apply(Calc::Abs, Field::Data64),
        elf::R_AARCH64_PREL64 => Apply(Calc::PcRel, Field::Data64),
        elf::R_AARCH64_PREL32 => Apply(Calc::PcRel, Field::Data32Any),
        elf::R_AARCH64_LD_PREL_LO19 | elf::R_AARCH64_CONDBR19 => {
            Apply(Calc::PcRel, Field::A64Imm19)
        }
        elf::R_AARCH64_TSTBR14 => Apply(Calc::PcRel, Field::A64Imm14),
        elf::R_AARCH64_ADR_PREL_LO21 => Apply(Calc::PcRel, Field::A64Adr),
        elf::R_AARCH64_ADR_PREL_PG_HI21 => Apply(Calc::PageRel, Field::A64Adrp),
        elf::R_AARCH64_ADD_ABS_LO12_NC => Apply(Calc::AbsLo12, Field::A64AddLo12),
        elf::R_AARCH64_LDST8_ABS_LO12_NC => ldst(0),
        elf::R_AARCH64_LDST16_ABS_LO12_NC => ldst(1),
        elf::R_AARCH64_LDST32_ABS_LO12_NC => ldst(2),
        elf::R_AARCH64_LDST64_ABS_LO12_NC => ldst(3),
        elf::R_AARCH64_LDST128_ABS_LO12_NC => ldst(4),
        elf::R_AARCH64_JUMP26 | elf::R_AARCH64_CALL26 => Apply(Calc::PcRel, Field::A64Branch26),
        elf::R_AARCH64_ADR_GOT_PAGE => Apply(Calc::GotPageRel, Field::A64Adrp),
        elf::R_AARCH64_LD64_GOT_LO12_NC => Apply(Calc::GotLo12, Field::A64LdStLo12 { shift: 3 }),
        _ => HowTo::Unsupported,
    }
}

/// Inputs of one relocation computation, all as addresses in the output image.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RelocInputs {
    /// `S`: the symbol address.
    pub symbol: u64,
    /// `A`: the addend.
    pub addend: i64,
    /// `P`: the address of the relocated place.
    pub place: u64,
    /// `G`: the GOT entry address, when the relocation uses the GOT.
    pub got_entry: Option<u64>,
}

/// Computes the value a relocation stores (before field encoding).
pub(crate) fn compute(calc: Calc, inputs: RelocInputs) -> Result<i64, &'static str> {
    let s_plus_a = inputs.symbol.wrapping_add_signed(inputs.addend);
    let page = |x: u64| x & !0xfff;
    let got = || inputs.got_entry.ok_or("no GOT entry was allocated");
    let value = match calc {
        Calc::Abs | Calc::AbsLo12 => s_plus_a,
        Calc::PcRel => s_plus_a.wrapping_sub(inputs.place),
        Calc::PageRel => page(s_plus_a).wrapping_sub(page(inputs.place)),
        Calc::GotPcRel => got()?
            .wrapping_add_signed(inputs.addend)
            .wrapping_sub(inputs.place),
        Calc::GotPageRel => page(got()?).wrapping_sub(page(inputs.place)),
        Calc::GotLo12 => got()?,
    };
    // Addresses are below 2^63 in any image we build, so reinterpreting the
    // wrapped u64 difference as i64 yields the true signed difference.
    Ok(value as i64)
}

/// Stores `value` into `place` (exactly `field.width()` bytes) according to
/// `field`, checking range and alignment.
pub(crate) fn encode(field: Field, place: &mut [u8], value: i64) -> Result<(), &'static str> {
    match field {
        Field::Data64 => {
            place.copy_from_slice(&value.to_le_bytes());
            Ok(())
        }
        Field::Data32Signed => {
            let v = i32::try_from(value).map_err(|_| "does not fit in a signed 32-bit field")?;
            place.copy_from_slice(&v.to_le_bytes());
            Ok(())
        }
        Field::Data32Any => {
            if !(-(1i64 << 31)..(1i64 << 32)).contains(&value) {
                return Err("does not fit in a 32-bit field");
            }
            place.copy_from_slice(&(value as u32).to_le_bytes());
            Ok(())
        }
        Field::A64Adrp => {
            check_signed_bits(value >> 12, 21, "page offset exceeds ADRP range (±4 GiB)")?;
            patch_adr_imm(place, value >> 12);
            Ok(())
        }
        Field::A64Adr => {
            check_signed_bits(value, 21, "exceeds ADR range (±1 MiB)")?;
            patch_adr_imm(place, value);
            Ok(())
        }
        Field::A64AddLo12 => {
            patch_insn(place, (value as u32 & 0xfff) << 10, 0xfff << 10);
            Ok(())
        }
        Field::A64LdStLo12 { shift } => {
            let lo12 = value as u32 & 0xfff;
            if lo12 & ((1 << shift) - 1) != 0 {
                return Err("target is not aligned to the access size of the load/store");
            }
            patch_insn(place, (lo12 >> shift) << 10, 0xfff << 10);
            Ok(())
        }
        Field::A64Branch26 => {
            let imm = insn_offset(value, 26, "exceeds branch range (±128 MiB)")?;
            patch_insn(place, imm & 0x3ff_ffff, 0x3ff_ffff);
            Ok(())
        }
        Field::A64Imm19 => {
            let imm = insn_offset(value, 19, "exceeds 19-bit PC-relative range (±1 MiB)")?;
            patch_insn(place, (imm & 0x7_ffff) << 5, 0x7_ffff << 5);
            Ok(())
        }
        Field::A64Imm14 => {
            let imm = insn_offset(value, 14, "exceeds test-and-branch range (±32 KiB)")?;
            patch_insn(place, (imm & 0x3fff) << 5, 0x3fff << 5);
            Ok(())
        }
    }
}

fn check_signed_bits(value: i64, bits: u32, reason: &'static str) -> Result<(), &'static str> {
    let limit = 1i64 << (bits - 1);
    if (-limit..limit).contains(&value) {
        Ok(())
    } else {
        Err(reason)
    }
}

/// Converts a byte offset into an instruction-count immediate of `bits` bits.
fn insn_offset(value: i64, bits: u32, reason: &'static str) -> Result<u32, &'static str> {
    if value & 3 != 0 {
        return Err("branch target is not 4-byte aligned");
    }
    check_signed_bits(value >> 2, bits, reason)?;
    Ok((value >> 2) as u32)
}

/// ADR/ADRP split their 21-bit immediate: immlo in bits 30:29, immhi in 23:5.
fn patch_adr_imm(place: &mut [u8], imm: i64) {
    let imm = imm as u32;
    let bits = ((imm & 3) << 29) | (((imm >> 2) & 0x7_ffff) << 5);
    patch_insn(place, bits, (3 << 29) | (0x7_ffff << 5));
}

fn patch_insn(place: &mut [u8], bits: u32, mask: u32) {
    let mut word = [0u8; 4];
    word.copy_from_slice(place);
    let insn = (u32::from_le_bytes(word) & !mask) | (bits & mask);
    place.copy_from_slice(&insn.to_le_bytes());
}

macro_rules! reloc_names {
    ($($name:ident),* $(,)?) => {
        &[$((elf::$name, stringify!($name))),*]
    };
}

const X86_64_NAMES: &[(u32, &str)] = reloc_names![
    R_X86_64_NONE,
    R_X86_64_64,
    R_X86_64_PC32,
    R_X86_64_GOT32,
    R_X86_64_PLT32,
    R_X86_64_COPY,
    R_X86_64_GLOB_DAT,
    R_X86_64_JUMP_SLOT,
    R_X86_64_RELATIVE,
    R_X86_64_GOTPCREL,
    R_X86_64_32,
    R_X86_64_32S,
    R_X86_64_16,
    R_X86_64_PC16,
    R_X86_64_8,
    R_X86_64_PC8,
    R_X86_64_DTPMOD64,
    R_X86_64_DTPOFF64,
    R_X86_64_TPOFF64,
    R_X86_64_TLSGD,
    R_X86_64_TLSLD,
    R_X86_64_DTPOFF32,
    R_X86_64_GOTTPOFF,
    R_X86_64_TPOFF32,
    R_X86_64_PC64,
    R_X86_64_GOTOFF64,
    R_X86_64_GOTPC32,
    R_X86_64_GOT64,
    R_X86_64_GOTPCREL64,
    R_X86_64_GOTPC64,
    R_X86_64_GOTPLT64,
    R_X86_64_PLTOFF64,
    R_X86_64_SIZE32,
    R_X86_64_SIZE64,
    R_X86_64_GOTPC32_TLSDESC,
    R_X86_64_TLSDESC_CALL,
    R_X86_64_TLSDESC,
    R_X86_64_IRELATIVE,
    R_X86_64_RELATIVE64,
    R_X86_64_GOTPCRELX,
    R_X86_64_REX_GOTPCRELX,
    R_X86_64_CODE_4_GOTPCRELX,
    R_X86_64_CODE_4_GOTTPOFF,
    R_X86_64_CODE_4_GOTPC32_TLSDESC,
];

const AARCH64_NAMES: &[(u32, &str)] = reloc_names![
    R_AARCH64_NONE,
    R_AARCH64_ABS64,
    R_AARCH64_ABS32,
    R_AARCH64_ABS16,
    R_AARCH64_PREL64,
    R_AARCH64_PREL32,
    R_AARCH64_PREL16,
    R_AARCH64_MOVW_UABS_G0,
    R_AARCH64_MOVW_UABS_G0_NC,
    R_AARCH64_MOVW_UABS_G1,
    R_AARCH64_MOVW_UABS_G1_NC,
    R_AARCH64_MOVW_UABS_G2,
    R_AARCH64_MOVW_UABS_G2_NC,
    R_AARCH64_MOVW_UABS_G3,
    R_AARCH64_MOVW_SABS_G0,
    R_AARCH64_MOVW_SABS_G1,
    R_AARCH64_MOVW_SABS_G2,
    R_AARCH64_LD_PREL_LO19,
    R_AARCH64_ADR_PREL_LO21,
    R_AARCH64_ADR_PREL_PG_HI21,
    R_AARCH64_ADR_PREL_PG_HI21_NC,
    R_AARCH64_ADD_ABS_LO12_NC,
    R_AARCH64_LDST8_ABS_LO12_NC,
    R_AARCH64_TSTBR14,
    R_AARCH64_CONDBR19,
    R_AARCH64_JUMP26,
    R_AARCH64_CALL26,
    R_AARCH64_LDST16_ABS_LO12_NC,
    R_AARCH64_LDST32_ABS_LO12_NC,
    R_AARCH64_LDST64_ABS_LO12_NC,
    R_AARCH64_MOVW_PREL_G0,
    R_AARCH64_MOVW_PREL_G0_NC,
    R_AARCH64_MOVW_PREL_G1,
    R_AARCH64_MOVW_PREL_G1_NC,
    R_AARCH64_MOVW_PREL_G2,
    R_AARCH64_MOVW_PREL_G2_NC,
    R_AARCH64_MOVW_PREL_G3,
    R_AARCH64_LDST128_ABS_LO12_NC,
    R_AARCH64_GOTREL64,
    R_AARCH64_GOTREL32,
    R_AARCH64_GOT_LD_PREL19,
    R_AARCH64_LD64_GOTOFF_LO15,
    R_AARCH64_ADR_GOT_PAGE,
    R_AARCH64_LD64_GOT_LO12_NC,
    R_AARCH64_LD64_GOTPAGE_LO15,
    R_AARCH64_PLT32,
    R_AARCH64_GOTPCREL32,
    R_AARCH64_TLSGD_ADR_PREL21,
    R_AARCH64_TLSGD_ADR_PAGE21,
    R_AARCH64_TLSGD_ADD_LO12_NC,
    R_AARCH64_TLSLD_ADR_PAGE21,
    R_AARCH64_TLSLD_ADD_LO12_NC,
    R_AARCH64_TLSIE_ADR_GOTTPREL_PAGE21,
    R_AARCH64_TLSIE_LD64_GOTTPREL_LO12_NC,
    R_AARCH64_TLSLE_ADD_TPREL_HI12,
    R_AARCH64_TLSLE_ADD_TPREL_LO12,
    R_AARCH64_TLSLE_ADD_TPREL_LO12_NC,
    R_AARCH64_TLSDESC_ADR_PAGE21,
    R_AARCH64_TLSDESC_LD64_LO12,
    R_AARCH64_TLSDESC_ADD_LO12,
    R_AARCH64_TLSDESC_CALL,
    R_AARCH64_COPY,
    R_AARCH64_GLOB_DAT,
    R_AARCH64_JUMP_SLOT,
    R_AARCH64_RELATIVE,
    R_AARCH64_TLS_DTPMOD,
    R_AARCH64_TLS_DTPREL,
    R_AARCH64_TLS_TPREL,
    R_AARCH64_TLSDESC,
    R_AARCH64_IRELATIVE,
];

#[cfg(test)]
mod tests {
    use super::*;

    fn insn(word: u32) -> [u8; 4] {
        word.to_le_bytes()
    }

    fn word(bytes: [u8; 4]) -> u32 {
        u32::from_le_bytes(bytes)
    }

    #[test]
    fn bl_encodes_forward_and_backward_offsets() {
        let mut place = insn(0x9400_0000); // bl #0
        encode(Field::A64Branch26, &mut place, 0x100).unwrap();
        assert_eq!(word(place), 0x9400_0040);
        encode(Field::A64Branch26, &mut place, -4).unwrap();
        assert_eq!(word(place), 0x97ff_ffff);
    }

    #[test]
    fn bl_rejects_out_of_range_and_misaligned_targets() {
        let mut place = insn(0x9400_0000);
        assert!(encode(Field::A64Branch26, &mut place, 1 << 27).is_err());
        assert!(encode(Field::A64Branch26, &mut place, -(1 << 27)).is_ok());
        assert!(encode(Field::A64Branch26, &mut place, -(1 << 27) - 4).is_err());
        assert!(encode(Field::A64Branch26, &mut place, 2).is_err());
    }

    #[test]
    fn adrp_splits_immediate() {
        // adrp x0, #0 ; page delta 0x5000 -> imm 5 -> immlo=1, immhi=1
        let mut place = insn(0x9000_0000);
        encode(Field::A64Adrp, &mut place, 0x5000).unwrap();
        assert_eq!(word(place), 0x9000_0000 | (1 << 29) | (1 << 5));
        assert!(encode(Field::A64Adrp, &mut place, 1 << 32).is_err());
        assert!(encode(Field::A64Adrp, &mut place, -(1 << 32)).is_ok());
    }

    #[test]
    fn ldst_scales_and_checks_alignment() {
        let mut place = insn(0xf940_0000); // ldr x0, [x0]
        encode(Field::A64LdStLo12 { shift: 3 }, &mut place, 0x1238).unwrap();
        assert_eq!(word(place), 0xf940_0000 | ((0x238 >> 3) << 10));
        assert!(encode(Field::A64LdStLo12 { shift: 3 }, &mut place, 0x1234).is_err());
    }

    #[test]
    fn pc32_range_is_checked() {
        let mut place = [0u8; 4];
        encode(Field::Data32Signed, &mut place, -8).unwrap();
        assert_eq!(i32::from_le_bytes(place), -8);
        assert!(encode(Field::Data32Signed, &mut place, 1 << 31).is_err());
    }

    #[test]
    fn page_relative_uses_pages_of_both_ends() {
        let inputs = RelocInputs {
            symbol: 0x2_0010,
            addend: 0,
            place: 0x1_0ffc,
            got_entry: None,
        };
        assert_eq!(compute(Calc::PageRel, inputs), Ok(0x1_0000));
        assert_eq!(compute(Calc::AbsLo12, inputs).map(|v| v & 0xfff), Ok(0x10));
        assert!(compute(Calc::GotLo12, inputs).is_err());
    }

    #[test]
    fn names_are_found_or_reported_as_unknown() {
        assert_eq!(Arch::X86_64.reloc_name(2), "R_X86_64_PC32 (2)");
        assert_eq!(Arch::Aarch64.reloc_name(283), "R_AARCH64_CALL26 (283)");
        assert_eq!(
            Arch::X86_64.reloc_name(9999),
            "unknown relocation type 9999"
        );
    }
}
