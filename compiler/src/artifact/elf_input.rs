//! Parsing of the relocatable ELF object (`ET_REL`) produced by cranelift-object
//! into the few facts the shared-object linker needs: allocated sections,
//! symbols and RELA relocations.
//!
//! Everything is validated here (indices, bounds, alignments) so that the
//! later stages can index without panicking.

use object::elf;
use object::read::elf::{FileHeader, Rela as _, SectionHeader as _, Sym as _};
use object::{Endian as _, Endianness, SymbolIndex};

use super::reloc::Arch;
use super::ArtifactError;

type Elf = elf::FileHeader64<Endianness>;

/// Upper bound for a section's size (1 TiB) and alignment (1 MiB). Real
/// objects are far below; the caps keep all address arithmetic of the linker
/// comfortably inside `u64` whatever the input claims.
const MAX_SECTION_SIZE: u64 = 1 << 40;
const MAX_SECTION_ALIGN: u64 = 1 << 20;

/// An allocated (`SHF_ALLOC`) section of the input.
#[derive(Debug)]
pub(crate) struct InputSection<'data> {
    pub name: String,
    /// File contents; empty for `SHT_NOBITS`.
    pub data: &'data [u8],
    pub size: u64,
    /// Always a power of two, at least 1.
    pub align: u64,
    pub writable: bool,
    pub executable: bool,
    pub nobits: bool,
}

/// Where a symbol's value lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SymbolDef {
    Undefined,
    Absolute,
    Common,
    /// Defined in the allocated input section with this ELF section index.
    Section(usize),
    /// Defined in a section that does not end up in memory (e.g. debug info).
    NonAlloc(String),
}

#[derive(Debug)]
pub(crate) struct InputSymbol<'data> {
    pub name: &'data [u8],
    pub def: SymbolDef,
    pub value: u64,
    pub size: u64,
    pub st_info: u8,
    pub st_other: u8,
}

impl InputSymbol<'_> {
    pub fn display_name(&self) -> String {
        String::from_utf8_lossy(self.name).into_owned()
    }

    pub fn bind(&self) -> u8 {
        self.st_info >> 4
    }

    pub fn kind(&self) -> u8 {
        self.st_info & 0xf
    }

    pub fn visibility(&self) -> u8 {
        self.st_other & 0x3
    }
}

/// One RELA entry that applies to an allocated section.
#[derive(Clone, Copy, Debug)]
pub(crate) struct InputReloc {
    /// ELF section index of the section being relocated.
    pub section: usize,
    pub offset: u64,
    pub symbol: usize,
    pub r_type: u32,
    pub addend: i64,
}

#[derive(Debug)]
pub(crate) struct InputObject<'data> {
    pub arch: Arch,
    pub os_abi: u8,
    pub e_flags: u32,
    /// Indexed by ELF section index; `None` for sections that are not loaded.
    pub sections: Vec<Option<InputSection<'data>>>,
    /// Indexed by ELF symbol index (index 0 is the null symbol).
    pub symbols: Vec<InputSymbol<'data>>,
    pub relocs: Vec<InputReloc>,
}

impl<'data> InputObject<'data> {
    pub fn parse(data: &'data [u8]) -> Result<Self, ArtifactError> {
        let header = Elf::parse(data)?;
        let endian = header.endian()?;
        if !endian.is_little_endian() {
            return Err(invalid("big-endian objects are not supported"));
        }
        let e_type = header.e_type(endian);
        if e_type != elf::ET_REL {
            return Err(invalid(format!(
                "expected a relocatable object (ET_REL), found ELF type {e_type}"
            )));
        }
        let arch = Arch::from_machine(header.e_machine(endian))?;
        let table = header.sections(endian, data)?;

        let mut sections = Vec::with_capacity(table.len());
        for (_, section) in table.enumerate() {
            let name = String::from_utf8_lossy(table.section_name(endian, section)?).into_owned();
            sections.push(parse_section(endian, data, section, name)?);
        }

        let symtab = table.symbols(endian, data, elf::SHT_SYMTAB)?;
        let mut symbols = Vec::with_capacity(symtab.len());
        for (index, sym) in symtab.enumerate() {
            let symbol = InputSymbol {
                name: symtab.symbol_name(endian, sym)?,
                def: symbol_def(endian, &symtab, sym, index, &sections, &table)?,
                value: sym.st_value(endian),
                size: sym.st_size(endian),
                st_info: sym.st_info(),
                st_other: sym.st_other(),
            };
            check_symbol_value(&symbol, &sections)?;
            symbols.push(symbol);
        }

        let mut relocs = Vec::new();
        for (_, section) in table.enumerate() {
            collect_relocs(endian, data, section, &sections, symbols.len(), &mut relocs)?;
        }

        Ok(InputObject {
            arch,
            os_abi: header.e_ident().os_abi,
            e_flags: header.e_flags(endian),
            sections,
            symbols,
            relocs,
        })
    }

    /// The allocated section a relocation applies to. Relocations are only
    /// collected for allocated sections, so this never fails for them.
    pub fn section(&self, index: usize) -> Result<&InputSection<'data>, ArtifactError> {
        self.sections
            .get(index)
            .and_then(Option::as_ref)
            .ok_or_else(|| invalid(format!("section index {index} is not an allocated section")))
    }
}

fn invalid(message: impl Into<String>) -> ArtifactError {
    ArtifactError::InvalidObject(message.into())
}

fn unsupported_section(name: &str, reason: &str) -> ArtifactError {
    ArtifactError::UnsupportedSection {
        section: name.to_owned(),
        reason: reason.to_owned(),
    }
}

/// Keeps allocated sections; everything else (symbol tables, relocation
/// sections, notes such as `.note.GNU-stack`, debug info) is not loaded and is
/// dropped.
fn parse_section<'data>(
    endian: Endianness,
    data: &'data [u8],
    section: &elf::SectionHeader64<Endianness>,
    name: String,
) -> Result<Option<InputSection<'data>>, ArtifactError> {
    let flags = section.sh_flags(endian);
    let sh_type = section.sh_type(endian);
    if sh_type == elf::SHT_NULL || flags & u64::from(elf::SHF_ALLOC) == 0 {
        return Ok(None);
    }
    if flags & u64::from(elf::SHF_TLS) != 0 {
        return Err(unsupported_section(
            &name,
            "thread-local storage is not supported",
        ));
    }
    let nobits = match sh_type {
        elf::SHT_NOBITS => true,
        elf::SHT_PROGBITS | elf::SHT_NOTE | elf::SHT_X86_64_UNWIND => false,
        elf::SHT_INIT_ARRAY | elf::SHT_FINI_ARRAY | elf::SHT_PREINIT_ARRAY => {
            return Err(unsupported_section(
                &name,
                "constructors/destructors are not supported",
            ))
        }
        other => {
            return Err(unsupported_section(
                &name,
                &format!("allocated section of type {other:#x} is not supported"),
            ))
        }
    };
    let align = section.sh_addralign(endian).max(1);
    if !align.is_power_of_two() {
        return Err(invalid(format!(
            "section `{name}` has alignment {align}, not a power of two"
        )));
    }
    if align > MAX_SECTION_ALIGN {
        return Err(unsupported_section(
            &name,
            &format!("alignment {align:#x} is too large"),
        ));
    }
    let size = section.sh_size(endian);
    if size > MAX_SECTION_SIZE {
        return Err(ArtifactError::TooLarge(format!(
            "section `{name}` is {size:#x} bytes"
        )));
    }
    let contents = if nobits {
        &[][..]
    } else {
        section
            .data(endian, data)
            .map_err(|_| invalid(format!("section `{name}` lies outside the file")))?
    };
    Ok(Some(InputSection {
        name,
        data: contents,
        size,
        align,
        writable: flags & u64::from(elf::SHF_WRITE) != 0,
        executable: flags & u64::from(elf::SHF_EXECINSTR) != 0,
        nobits,
    }))
}

fn symbol_def(
    endian: Endianness,
    symtab: &object::read::elf::SymbolTable<'_, Elf>,
    sym: &elf::Sym64<Endianness>,
    index: SymbolIndex,
    sections: &[Option<InputSection<'_>>],
    table: &object::read::elf::SectionTable<'_, Elf>,
) -> Result<SymbolDef, ArtifactError> {
    match sym.st_shndx(endian) {
        elf::SHN_UNDEF => return Ok(SymbolDef::Undefined),
        elf::SHN_ABS => return Ok(SymbolDef::Absolute),
        elf::SHN_COMMON => return Ok(SymbolDef::Common),
        _ => {}
    }
    let Some(section) = symtab.symbol_section(endian, sym, index)? else {
        return Err(invalid(format!(
            "symbol #{} has unsupported section index {:#x}",
            index.0,
            sym.st_shndx(endian)
        )));
    };
    match sections.get(section.0) {
        Some(Some(_)) => Ok(SymbolDef::Section(section.0)),
        Some(None) => {
            let header = table.section(section)?;
            let name = table.section_name(endian, header)?;
            Ok(SymbolDef::NonAlloc(
                String::from_utf8_lossy(name).into_owned(),
            ))
        }
        None => Err(invalid(format!(
            "symbol #{} refers to missing section {}",
            index.0, section.0
        ))),
    }
}

/// A symbol defined in a section must lie within it (its end may coincide
/// with the section's end, as for `__stop_*`-style symbols).
fn check_symbol_value(
    symbol: &InputSymbol<'_>,
    sections: &[Option<InputSection<'_>>],
) -> Result<(), ArtifactError> {
    let SymbolDef::Section(index) = symbol.def else {
        return Ok(());
    };
    let Some(Some(section)) = sections.get(index) else {
        return Ok(());
    };
    if symbol.value > section.size {
        return Err(invalid(format!(
            "symbol `{}` at {:#x} lies outside section `{}` ({:#x} bytes)",
            symbol.display_name(),
            symbol.value,
            section.name,
            section.size
        )));
    }
    Ok(())
}

/// Appends the relocations of `section` (if it is a relocation section that
/// applies to an allocated section), validating symbol indices and bounds.
fn collect_relocs(
    endian: Endianness,
    data: &[u8],
    section: &elf::SectionHeader64<Endianness>,
    sections: &[Option<InputSection<'_>>],
    symbol_count: usize,
    out: &mut Vec<InputReloc>,
) -> Result<(), ArtifactError> {
    let sh_type = section.sh_type(endian);
    if sh_type != elf::SHT_RELA && sh_type != elf::SHT_REL {
        return Ok(());
    }
    let target_index = section.info_link(endian).0;
    let Some(Some(target)) = sections.get(target_index) else {
        // Relocations for non-loaded sections (debug info) are irrelevant.
        return Ok(());
    };
    let Some((entries, _symtab)) = section.rela(endian, data)? else {
        return Err(unsupported_section(
            &target.name,
            "SHT_REL relocations (implicit addends) are not supported",
        ));
    };
    for entry in entries {
        let reloc = InputReloc {
            section: target_index,
            offset: entry.r_offset(endian),
            symbol: entry.r_sym(endian, false) as usize,
            r_type: entry.r_type(endian, false),
            addend: entry.r_addend(endian),
        };
        if reloc.symbol >= symbol_count.max(1) {
            return Err(invalid(format!(
                "relocation in `{}` at {:#x} refers to missing symbol #{}",
                target.name, reloc.offset, reloc.symbol
            )));
        }
        if reloc.offset >= target.size || target.nobits {
            return Err(invalid(format!(
                "relocation at {:#x} lies outside section `{}`",
                reloc.offset, target.name
            )));
        }
        out.push(reloc);
    }
    Ok(())
}
