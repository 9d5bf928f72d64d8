//! Address-independent decisions of the shared-object linker: which output
//! section each input section goes to, which relocations need GOT slots or
//! dynamic relocations, and which symbols are exported.
//!
//! Nothing here knows final addresses; `shared_object` assigns those.

use std::collections::{BTreeMap, HashSet};

use object::elf;

use super::elf_input::{InputObject, InputReloc, InputSymbol, SymbolDef};
use super::reloc::{Calc, Field, HowTo};
use super::ArtifactError;

/// Output sections, in address order. The GOT and `.dynamic` are synthesized
/// and placed between `RelRo` and `Data` (see `shared_object`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum OutKind {
    /// Read-only data without absolute relocations.
    Rodata,
    Text,
    /// Read-only data that holds absolute addresses: written once by the
    /// dynamic loader, then made read-only (PT_GNU_RELRO).
    RelRo,
    Data,
    Bss,
}

impl OutKind {
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn section_name(self) -> &'static [u8] {
        match self {
            OutKind::Rodata => b".rodata",
            OutKind::Text => b".text",
            OutKind::RelRo => b".data.rel.ro",
            OutKind::Data => b".data",
            OutKind::Bss => b".bss",
        }
    }

    pub fn sh_flags(self) -> u64 {
        let flags = match self {
            OutKind::Rodata => elf::SHF_ALLOC,
            OutKind::Text => elf::SHF_ALLOC | elf::SHF_EXECINSTR,
            OutKind::RelRo | OutKind::Data | OutKind::Bss => elf::SHF_ALLOC | elf::SHF_WRITE,
        };
        u64::from(flags)
    }
}

/// Size and alignment of one output section (before addresses are known).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct OutputSpec {
    pub size: u64,
    pub align: u64,
}

/// An input relocation together with how to apply it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PlannedReloc {
    pub input: InputReloc,
    pub calc: Calc,
    pub field: Field,
    pub got_slot: Option<usize>,
}

/// A GOT entry: holds the address of `symbol` plus `addend`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct GotSlot {
    pub symbol: usize,
    pub addend: i64,
}

/// A symbol exported through `.dynsym`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Export<'data> {
    pub name: &'data [u8],
    pub symbol: usize,
    pub gnu_hash: u32,
}

#[derive(Debug)]
pub(crate) struct Plan<'data> {
    /// Per input section index: the output section and offset within it.
    pub placement: Vec<Option<(OutKind, u64)>>,
    /// Indexed by `OutKind::index()`.
    pub outputs: [OutputSpec; 5],
    pub relocs: Vec<PlannedReloc>,
    pub got: Vec<GotSlot>,
    /// Number of RELATIVE dynamic relocations the image will need.
    pub dynamic_reloc_count: usize,
    /// Sorted by GNU hash bucket, as `.gnu.hash` requires.
    pub exports: Vec<Export<'data>>,
    pub gnu_hash_buckets: u32,
}

impl<'data> Plan<'data> {
    pub fn new(input: &InputObject<'data>) -> Result<Self, ArtifactError> {
        let (relocs, got) = plan_relocs(input)?;
        let needs_dynamic = sections_with_dynamic_relocs(input, &relocs)?;
        let placement = place_sections(input, &needs_dynamic);
        let outputs = output_specs(input, &placement);
        let dynamic_reloc_count = relocs
            .iter()
            .filter(|r| r.calc == Calc::Abs && !is_absolute(input, r.input.symbol))
            .count()
            + got
                .iter()
                .filter(|slot| !is_absolute(input, slot.symbol))
                .count();
        let exports = collect_exports(input)?;
        let gnu_hash_buckets = (exports.len() as u32 / 4).max(1);
        let exports = sort_for_gnu_hash(exports, gnu_hash_buckets);
        Ok(Plan {
            placement,
            outputs,
            relocs,
            got,
            dynamic_reloc_count,
            exports,
            gnu_hash_buckets,
        })
    }

    pub fn has(&self, kind: OutKind) -> bool {
        self.outputs[kind.index()].size > 0
    }

    /// Largest alignment of any output section; segments are spaced by a
    /// multiple of it so that virtual addresses keep the file's alignment.
    pub fn max_align(&self) -> u64 {
        self.outputs.iter().map(|o| o.align).max().unwrap_or(1)
    }
}

/// Whether a relocation's symbol has a link-time-constant value (no load-base
/// adjustment needed). The null symbol (index 0) counts as absolute zero.
pub(crate) fn is_absolute(input: &InputObject<'_>, symbol: usize) -> bool {
    match input.symbols.get(symbol) {
        None => true,
        Some(sym) => sym.def == SymbolDef::Absolute,
    }
}

fn plan_relocs(
    input: &InputObject<'_>,
) -> Result<(Vec<PlannedReloc>, Vec<GotSlot>), ArtifactError> {
    let mut planned = Vec::with_capacity(input.relocs.len());
    let mut got_index: BTreeMap<GotSlot, usize> = BTreeMap::new();
    let mut got = Vec::new();
    for &reloc in &input.relocs {
        let (calc, field) = match input.arch.howto(reloc.r_type) {
            HowTo::Ignore => continue,
            HowTo::Apply(calc, field) => (calc, field),
            HowTo::Unsupported => return Err(unsupported_reloc(input, &reloc)),
        };
        check_in_bounds(input, &reloc, field)?;
        check_target_symbol(input, reloc.symbol)?;
        let got_slot = calc.uses_got().then(|| {
            let slot = GotSlot {
                symbol: reloc.symbol,
                addend: if calc.got_entry_includes_addend() {
                    reloc.addend
                } else {
                    0
                },
            };
            *got_index.entry(slot).or_insert_with(|| {
                got.push(slot);
                got.len() - 1
            })
        });
        planned.push(PlannedReloc {
            input: reloc,
            calc,
            field,
            got_slot,
        });
    }
    Ok((planned, got))
}

fn unsupported_reloc(input: &InputObject<'_>, reloc: &InputReloc) -> ArtifactError {
    ArtifactError::UnsupportedRelocation {
        kind: input.arch.reloc_name(reloc.r_type),
        section: section_name(input, reloc.section),
        offset: reloc.offset,
    }
}

fn section_name(input: &InputObject<'_>, index: usize) -> String {
    input
        .section(index)
        .map(|s| s.name.clone())
        .unwrap_or_else(|_| format!("#{index}"))
}

fn check_in_bounds(
    input: &InputObject<'_>,
    reloc: &InputReloc,
    field: Field,
) -> Result<(), ArtifactError> {
    let section = input.section(reloc.section)?;
    let end = reloc.offset.checked_add(field.width() as u64);
    if end.is_none_or(|end| end > section.data.len() as u64) {
        return Err(ArtifactError::InvalidObject(format!(
            "relocation {} at {:#x} extends past the end of section `{}`",
            input.arch.reloc_name(reloc.r_type),
            reloc.offset,
            section.name
        )));
    }
    Ok(())
}

/// A relocation can only target something with an address in the image.
fn check_target_symbol(input: &InputObject<'_>, symbol: usize) -> Result<(), ArtifactError> {
    let Some(sym) = input.symbols.get(symbol) else {
        return Ok(()); // null symbol: value 0
    };
    match &sym.def {
        SymbolDef::Section(_) | SymbolDef::Absolute => Ok(()),
        SymbolDef::Undefined => Err(ArtifactError::UndefinedSymbol(sym.display_name())),
        SymbolDef::Common => Err(unsupported_symbol(sym, "common symbols are not supported")),
        SymbolDef::NonAlloc(section) => Err(unsupported_symbol(
            sym,
            &format!("defined in non-loaded section `{section}`"),
        )),
    }
}

fn unsupported_symbol(sym: &InputSymbol<'_>, reason: &str) -> ArtifactError {
    ArtifactError::UnsupportedSymbol {
        symbol: sym.display_name(),
        reason: reason.to_owned(),
    }
}

/// Input sections that receive RELATIVE dynamic relocations. Those must be
/// writable at load time; in executable sections that would mean text
/// relocations, which we refuse.
fn sections_with_dynamic_relocs(
    input: &InputObject<'_>,
    relocs: &[PlannedReloc],
) -> Result<HashSet<usize>, ArtifactError> {
    let mut sections = HashSet::new();
    for reloc in relocs {
        if reloc.calc != Calc::Abs || is_absolute(input, reloc.input.symbol) {
            continue;
        }
        let section = input.section(reloc.input.section)?;
        if section.executable {
            return Err(ArtifactError::TextRelocation {
                kind: input.arch.reloc_name(reloc.input.r_type),
                symbol: symbol_name(input, reloc.input.symbol),
                section: section.name.clone(),
                offset: reloc.input.offset,
            });
        }
        sections.insert(reloc.input.section);
    }
    Ok(sections)
}

pub(crate) fn symbol_name(input: &InputObject<'_>, symbol: usize) -> String {
    match input.symbols.get(symbol) {
        Some(sym) if !sym.name.is_empty() => sym.display_name(),
        Some(sym) => match &sym.def {
            // Section symbols are nameless; the section name is more useful.
            SymbolDef::Section(index) => section_name(input, *index),
            _ => format!("symbol #{symbol}"),
        },
        None => "<none>".to_owned(),
    }
}

/// Compilers (cranelift-object included) put constant data that holds
/// addresses into `.data.rel.ro*`, flagged writable only so that the loader
/// can relocate it. Like GNU ld, we make it read-only after relocation.
fn is_relro_by_name(name: &str) -> bool {
    name == ".data.rel.ro" || name.starts_with(".data.rel.ro.")
}

fn classify(section: &super::elf_input::InputSection<'_>, needs_dynamic_relocs: bool) -> OutKind {
    if section.executable {
        OutKind::Text
    } else if section.nobits {
        // Zero-initialised; even a read-only NOBITS section is harmless in .bss.
        OutKind::Bss
    } else if is_relro_by_name(&section.name) || (!section.writable && needs_dynamic_relocs) {
        OutKind::RelRo
    } else if section.writable {
        OutKind::Data
    } else {
        OutKind::Rodata
    }
}

/// Concatenates input sections into output sections in input order, keeping
/// each input section's alignment.
fn place_sections(
    input: &InputObject<'_>,
    needs_dynamic: &HashSet<usize>,
) -> Vec<Option<(OutKind, u64)>> {
    let mut cursor = [0u64; 5];
    input
        .sections
        .iter()
        .enumerate()
        .map(|(index, section)| {
            let section = section.as_ref()?;
            let kind = classify(section, needs_dynamic.contains(&index));
            let offset = cursor[kind.index()].next_multiple_of(section.align);
            cursor[kind.index()] = offset + section.size;
            Some((kind, offset))
        })
        .collect()
}

fn output_specs(input: &InputObject<'_>, placement: &[Option<(OutKind, u64)>]) -> [OutputSpec; 5] {
    let mut specs = [OutputSpec { size: 0, align: 1 }; 5];
    for (section, place) in input.sections.iter().zip(placement) {
        if let (Some(section), Some((kind, offset))) = (section, place) {
            let spec = &mut specs[kind.index()];
            spec.size = spec.size.max(offset + section.size);
            spec.align = spec.align.max(section.align);
        }
    }
    specs
}

/// Every global or weak symbol with default or protected visibility that is
/// defined in the image. Hidden symbols stay internal, as ELF intends.
/// Undefined symbols that nothing references are ignored (a referenced one
/// already failed in `plan_relocs`).
fn collect_exports<'data>(input: &InputObject<'data>) -> Result<Vec<Export<'data>>, ArtifactError> {
    let mut exports = Vec::new();
    let mut seen = HashSet::new();
    for (index, sym) in input.symbols.iter().enumerate().skip(1) {
        let global = matches!(sym.bind(), elf::STB_GLOBAL | elf::STB_WEAK);
        let visible = matches!(sym.visibility(), elf::STV_DEFAULT | elf::STV_PROTECTED);
        if !global || !visible || sym.def == SymbolDef::Undefined {
            continue;
        }
        check_exportable(sym)?;
        if !seen.insert(sym.name) {
            return Err(ArtifactError::InvalidObject(format!(
                "global symbol `{}` is defined twice",
                sym.display_name()
            )));
        }
        exports.push(Export {
            name: sym.name,
            symbol: index,
            gnu_hash: elf::gnu_hash(sym.name),
        });
    }
    Ok(exports)
}

fn check_exportable(sym: &InputSymbol<'_>) -> Result<(), ArtifactError> {
    match sym.kind() {
        elf::STT_NOTYPE | elf::STT_OBJECT | elf::STT_FUNC => {}
        elf::STT_TLS => return Err(unsupported_symbol(sym, "thread-local symbols")),
        elf::STT_GNU_IFUNC => return Err(unsupported_symbol(sym, "indirect functions")),
        other => return Err(unsupported_symbol(sym, &format!("symbol type {other}"))),
    }
    if sym.name.is_empty() {
        return Err(unsupported_symbol(sym, "global symbol without a name"));
    }
    match &sym.def {
        SymbolDef::Section(_) | SymbolDef::Absolute | SymbolDef::Undefined => Ok(()),
        SymbolDef::Common => Err(unsupported_symbol(sym, "common symbols are not supported")),
        SymbolDef::NonAlloc(section) => Err(unsupported_symbol(
            sym,
            &format!("defined in non-loaded section `{section}`"),
        )),
    }
}

/// `.gnu.hash` requires the hashed symbols to be grouped by bucket.
fn sort_for_gnu_hash(mut exports: Vec<Export<'_>>, buckets: u32) -> Vec<Export<'_>> {
    exports.sort_by_key(|e| e.gnu_hash % buckets);
    exports
}
