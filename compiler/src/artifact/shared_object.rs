//! A minimal static linker: one relocatable ELF object in, one self-contained
//! `ET_DYN` shared library out, without any external tool.
//!
//! # Image layout
//!
//! ```text
//! PT_LOAD R    ELF header, program headers, .hash, .gnu.hash, .dynsym,
//!              .dynstr, .rela.dyn, .rodata
//! PT_LOAD R+X  .text
//! PT_LOAD RW   .data.rel.ro, .got, .dynamic        (also PT_GNU_RELRO)
//! PT_LOAD RW   .data, .bss                         (only if present)
//! (not loaded) .shstrtab, section headers
//! ```
//!
//! File offsets are packed (no page padding in the file); instead every new
//! segment starts `segment_align` bytes further in the address space than in
//! the file, so `p_vaddr ≡ p_offset (mod p_align)` holds and no two segments
//! share a page at any page size up to the architecture's maximum (64 KiB on
//! aarch64). This is the layout lld uses by default.
//!
//! # Symbol binding
//!
//! All relocations are resolved at link time against the object's own
//! definitions (like `-Bsymbolic`); the only dynamic relocations are
//! `R_*_RELATIVE`. Consequently the library has no `DT_NEEDED`, no PLT and
//! needs no symbol lookup when loaded.
//!
//! # Limitations
//!
//! * Only what cranelift-object emits is supported: no TLS, no
//!   constructors (`.init_array`), no COMMON symbols, no `SHT_REL`, no symbol
//!   versioning, no branch veneers (aarch64 calls must stay within ±128 MiB,
//!   x86-64 PC-relative references within ±2 GiB; violations are reported
//!   as [`ArtifactError::RelocationOutOfRange`]).
//! * Absolute relocations in code (non-PIC, non-colocated references) are
//!   rejected rather than turned into text relocations.
//! * Undefined symbols are an error only when something references them.
//! * Exported symbols are bound internally (`-Bsymbolic`). If an executable
//!   takes a copy relocation of an exported *writable* object, it and the
//!   library see different copies; exported read-only data is unaffected.
//! * `.eh_frame`, if present, is loaded as plain read-only data; no
//!   `PT_GNU_EH_FRAME` is emitted, so unwinders cannot find it.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

use object::elf;
use object::write::elf::{
    FileHeader, ProgramHeader, Rel, SectionHeader, SectionIndex, Sym, Writer,
};
use object::write::StringId;
use object::Endianness;

use super::elf_input::{InputObject, InputReloc, SymbolDef};
use super::link_plan::{is_absolute, symbol_name, OutKind, Plan};
use super::reloc::{self, RelocInputs};
use super::ArtifactError;

const RELA_ENTRY_SIZE: u64 = 24;
const GOT_ENTRY_SIZE: u64 = 8;

/// Links `relocatable_elf` (an `ET_REL` object for x86-64 or aarch64, as
/// produced by cranelift-object) into a shared library named `soname`.
///
/// Every global/weak symbol with default or protected visibility that the
/// object defines is exported with its type and size. Fails with
/// [`ArtifactError`] on references to undefined symbols, on relocation types
/// or sections it does not support, and on out-of-range relocations.
pub fn link_shared_object(relocatable_elf: &[u8], soname: &str) -> Result<Vec<u8>, ArtifactError> {
    check_soname(soname)?;
    let input = InputObject::parse(relocatable_elf)?;
    let plan = Plan::new(&input)?;
    emit(&input, &plan, soname)
}

fn check_soname(soname: &str) -> Result<(), ArtifactError> {
    if soname.is_empty() || soname.contains('\0') || soname.contains('/') {
        return Err(ArtifactError::InvalidArgument(format!(
            "soname {soname:?} must be a non-empty file name without '/' or NUL"
        )));
    }
    Ok(())
}

/// A laid-out piece of the image.
#[derive(Clone, Copy, Debug, Default)]
struct Region {
    offset: u64,
    vaddr: u64,
    size: u64,
}

impl Region {
    fn end_offset(&self) -> u64 {
        self.offset + self.size
    }

    fn end_vaddr(&self) -> u64 {
        self.vaddr + self.size
    }
}

/// An output section that made it into the image.
#[derive(Clone, Copy, Debug)]
struct PlacedOutput {
    kind: OutKind,
    region: Region,
    align: u64,
    index: SectionIndex,
    name: StringId,
}

/// Everything the writing phase needs to know about addresses.
#[derive(Debug, Default)]
struct Layout {
    hash: Region,
    gnu_hash: Region,
    dynsym: Region,
    dynstr: Region,
    rela: Region,
    rela_name: Option<StringId>,
    dynsym_index: SectionIndex,
    got: Option<(Region, SectionIndex, StringId)>,
    dynamic: Region,
    /// Indexed by `OutKind::index()`.
    outputs: [Option<PlacedOutput>; 5],
    segments: Vec<ProgramHeader>,
}

impl Layout {
    fn output(&self, kind: OutKind) -> Option<&PlacedOutput> {
        self.outputs[kind.index()].as_ref()
    }
}

/// Parameters of the symbol hash tables.
#[derive(Clone, Copy, Debug)]
struct HashParams {
    sysv_buckets: u32,
    /// Number of `.dynsym` entries including the null symbol.
    sysv_chains: u32,
    gnu_buckets: u32,
    bloom_count: u32,
    bloom_shift: u32,
    exported: u32,
}

impl HashParams {
    fn new(plan: &Plan<'_>) -> Result<Self, ArtifactError> {
        let exported = u32::try_from(plan.exports.len())
            .map_err(|_| ArtifactError::TooLarge("too many exported symbols".into()))?;
        Ok(HashParams {
            sysv_buckets: exported.max(1),
            sysv_chains: exported + 1,
            gnu_buckets: plan.gnu_hash_buckets,
            // Roughly 12 bits of bloom filter per symbol, as lld does.
            bloom_count: (exported.saturating_mul(12) / 64)
                .max(1)
                .next_power_of_two(),
            bloom_shift: 26,
            exported,
        })
    }
}

fn to_usize(value: u64, what: &str) -> Result<usize, ArtifactError> {
    usize::try_from(value)
        .map_err(|_| ArtifactError::TooLarge(format!("{what} exceeds the address space")))
}

fn internal_error(message: impl Into<String>) -> ArtifactError {
    ArtifactError::Write(message.into())
}

fn emit(input: &InputObject<'_>, plan: &Plan<'_>, soname: &str) -> Result<Vec<u8>, ArtifactError> {
    let hash = HashParams::new(plan)?;
    let mut out = Vec::new();
    let mut w = Writer::new(Endianness::Little, true, &mut out);

    // Phase 1: strings, indices and file ranges; then everything that depends
    // on final addresses.
    let soname_id = w.add_dynamic_string(soname.as_bytes());
    let export_names: Vec<StringId> = plan
        .exports
        .iter()
        .map(|e| w.add_dynamic_string(e.name))
        .collect();
    let layout = reserve(&mut w, input, plan, &hash)?;
    let dynsyms = dynamic_symbols(input, plan, &layout, &export_names)?;
    let mut contents = OutputContents::new(input, plan)?;
    let relatives = contents.apply_relocations(input, plan, &layout)?;
    let dynamic = dynamic_entries(&layout, soname_id, relatives.len());
    if relatives.len() != plan.dynamic_reloc_count
        || dynamic.len() != dynamic_entry_count(plan.dynamic_reloc_count)
    {
        return Err(internal_error(format!(
            "planned {} dynamic relocations but produced {}",
            plan.dynamic_reloc_count,
            relatives.len()
        )));
    }

    // Phase 2: write in exactly the order of reservation.
    w.write_file_header(&FileHeader {
        os_abi: input.os_abi,
        abi_version: 0,
        e_type: elf::ET_DYN,
        e_machine: input.arch.e_machine(),
        e_entry: 0,
        e_flags: input.e_flags,
    })?;
    w.write_align_program_headers();
    for segment in &layout.segments {
        w.write_program_header(segment);
    }
    write_symbol_tables(&mut w, plan, &hash, &dynsyms);
    write_relocations(&mut w, &layout, &relatives, input.arch.relative_reloc())?;
    write_contents(&mut w, input, plan, &layout, &contents, &dynamic)?;
    write_section_headers(&mut w, &layout);
    Ok(out)
}

/// Reserves file ranges (through the writer, which must see the same order
/// when writing) and assigns virtual addresses.
fn reserve(
    w: &mut Writer<'_>,
    input: &InputObject<'_>,
    plan: &Plan<'_>,
    hash: &HashParams,
) -> Result<Layout, ArtifactError> {
    let page = input.arch.max_page_size();
    let segment_align = plan.max_align().max(page);
    let has_text = plan.has(OutKind::Text);
    let has_data = plan.has(OutKind::Data) || plan.has(OutKind::Bss);
    // LOAD R, [LOAD RX], LOAD RELRO, [LOAD RW], DYNAMIC, GNU_RELRO, GNU_STACK
    let segment_count = 5 + usize::from(has_text) + usize::from(has_data);

    w.reserve_file_header();
    w.reserve_program_headers(segment_count as u32);
    let mut layout = reserve_section_indices(w, plan);
    w.reserve_null_dynamic_symbol_index();
    for _ in &plan.exports {
        w.reserve_dynamic_symbol_index();
    }

    // Each segment starts `segment_align` further on in memory than in the
    // file (see the module documentation); `delta` is vaddr - file offset.
    let mut delta = 0;
    let readonly = reserve_readonly_segment(w, plan, hash, &mut layout)?;
    layout
        .segments
        .push(load_region(elf::PF_R, readonly, segment_align));
    if has_text {
        delta += segment_align;
        let text = reserve_output_range(w, plan, &mut layout, OutKind::Text, delta)?;
        layout
            .segments
            .push(load_region(elf::PF_R | elf::PF_X, text, segment_align));
    }
    delta += segment_align;
    let relro = reserve_relro_segment(w, plan, &mut layout, delta)?;
    // Extend the segment in memory to a page boundary so that PT_GNU_RELRO
    // protects all of it at every page size (the loader rounds its end down).
    let relro_memsz = relro.end_vaddr().next_multiple_of(page) - relro.vaddr;
    layout.segments.push(ProgramHeader {
        p_memsz: relro_memsz,
        ..load_region(elf::PF_R | elf::PF_W, relro, segment_align)
    });
    if has_data {
        delta += segment_align;
        let segment = reserve_data_segment(w, plan, &mut layout, delta, segment_align)?;
        layout.segments.push(segment);
    }

    layout.segments.extend([
        ProgramHeader {
            p_type: elf::PT_DYNAMIC,
            ..load_region(elf::PF_R | elf::PF_W, layout.dynamic, 8)
        },
        ProgramHeader {
            p_type: elf::PT_GNU_RELRO,
            p_memsz: relro_memsz,
            ..load_region(elf::PF_R, relro, 1)
        },
        ProgramHeader {
            p_type: elf::PT_GNU_STACK,
            ..load_region(elf::PF_R | elf::PF_W, Region::default(), 16)
        },
    ]);
    if layout.segments.len() != segment_count {
        return Err(internal_error("program header count mismatch"));
    }

    w.reserve_shstrtab();
    w.reserve_section_headers();
    Ok(layout)
}

/// Reserves section header indices in address order, which is also the
/// order `write_section_headers` writes them in.
fn reserve_section_indices(w: &mut Writer<'_>, plan: &Plan<'_>) -> Layout {
    w.reserve_hash_section_index();
    w.reserve_gnu_hash_section_index();
    let dynsym_index = w.reserve_dynsym_section_index();
    w.reserve_dynstr_section_index();
    let mut layout = Layout {
        rela_name: Some(w.add_section_name(b".rela.dyn")),
        dynsym_index,
        ..Layout::default()
    };
    w.reserve_section_index();
    let mut reserve_output = |w: &mut Writer<'_>, kind: OutKind| {
        if plan.has(kind) {
            let name = w.add_section_name(kind.section_name());
            let index = w.reserve_section_index();
            layout.outputs[kind.index()] = Some(PlacedOutput {
                kind,
                region: Region::default(),
                align: plan.outputs[kind.index()].align,
                index,
                name,
            });
        }
    };
    reserve_output(w, OutKind::Rodata);
    reserve_output(w, OutKind::Text);
    reserve_output(w, OutKind::RelRo);
    if !plan.got.is_empty() {
        let name = w.add_section_name(b".got");
        layout.got = Some((Region::default(), w.reserve_section_index(), name));
    }
    w.reserve_dynamic_section_index();
    reserve_output(w, OutKind::Data);
    reserve_output(w, OutKind::Bss);
    w.reserve_shstrtab_section_index();
    layout
}

/// The region of the file reserved since `offset`.
fn reserved_since(w: &Writer<'_>, offset: usize, delta: u64) -> Region {
    Region {
        offset: offset as u64,
        vaddr: offset as u64 + delta,
        size: (w.reserved_len() - offset) as u64,
    }
}

/// Segment 1: headers, dynamic linking tables and `.rodata`, mapped at
/// address 0 from file offset 0.
fn reserve_readonly_segment(
    w: &mut Writer<'_>,
    plan: &Plan<'_>,
    hash: &HashParams,
    layout: &mut Layout,
) -> Result<Region, ArtifactError> {
    let offset = w.reserve_hash(hash.sysv_buckets, hash.sysv_chains);
    layout.hash = reserved_since(w, offset, 0);
    let offset = w.reserve_gnu_hash(hash.bloom_count, hash.gnu_buckets, hash.exported);
    layout.gnu_hash = reserved_since(w, offset, 0);
    let offset = w.reserve_dynsym();
    layout.dynsym = reserved_since(w, offset, 0);
    let offset = w.reserve_dynstr();
    layout.dynstr = reserved_since(w, offset, 0);
    let offset = w.reserve_relocations(plan.dynamic_reloc_count, true);
    layout.rela = reserved_since(w, offset, 0);
    reserve_output_range(w, plan, layout, OutKind::Rodata, 0)?;
    Ok(reserved_since(w, 0, 0))
}

/// Segment 3: data written only by the loader (`.data.rel.ro`, the GOT,
/// `.dynamic`), read-only afterwards.
fn reserve_relro_segment(
    w: &mut Writer<'_>,
    plan: &Plan<'_>,
    layout: &mut Layout,
    delta: u64,
) -> Result<Region, ArtifactError> {
    // Everything in this segment is 8-byte aligned at least.
    let start = w.reserve(0, 8);
    reserve_output_range(w, plan, layout, OutKind::RelRo, delta)?;
    if let Some((got, _, _)) = &mut layout.got {
        let size = plan.got.len() as u64 * GOT_ENTRY_SIZE;
        let offset = w.reserve(to_usize(size, ".got")?, GOT_ENTRY_SIZE as usize);
        *got = reserved_since(w, offset, delta);
    }
    let offset = w.reserve_dynamic(dynamic_entry_count(plan.dynamic_reloc_count));
    layout.dynamic = reserved_since(w, offset, delta);
    Ok(reserved_since(w, start, delta))
}

/// Reserves `.data` in the file and places `.bss` after it in memory.
fn reserve_data_segment(
    w: &mut Writer<'_>,
    plan: &Plan<'_>,
    layout: &mut Layout,
    delta: u64,
    segment_align: u64,
) -> Result<ProgramHeader, ArtifactError> {
    let data = reserve_output_range(w, plan, layout, OutKind::Data, delta)?;
    let bss_spec = plan.outputs[OutKind::Bss.index()];
    let Some(bss) = layout.outputs[OutKind::Bss.index()].as_mut() else {
        return Ok(load_region(elf::PF_R | elf::PF_W, data, segment_align));
    };
    let (start, offset) = if plan.has(OutKind::Data) {
        (data.vaddr, data.offset)
    } else {
        // A segment without file contents must start on a page boundary:
        // the loader zero-fills the partial page at p_vaddr + p_filesz with
        // memset, and that page would not be mapped otherwise.
        let start = (w.reserved_len() as u64 + delta).next_multiple_of(segment_align);
        (start, 0)
    };
    let bss_vaddr = data.end_vaddr().max(start).next_multiple_of(bss_spec.align);
    bss.region = Region {
        offset: w.reserved_len() as u64,
        vaddr: bss_vaddr,
        size: bss_spec.size,
    };
    Ok(ProgramHeader {
        p_type: elf::PT_LOAD,
        p_flags: elf::PF_R | elf::PF_W,
        p_offset: offset,
        p_vaddr: start,
        p_paddr: start,
        p_filesz: data.size,
        p_memsz: bss_vaddr + bss_spec.size - start,
        p_align: segment_align,
    })
}

/// Reserves the file range of a `PROGBITS` output section (if present) and
/// records its address. Returns the (possibly empty) region.
fn reserve_output_range(
    w: &mut Writer<'_>,
    plan: &Plan<'_>,
    layout: &mut Layout,
    kind: OutKind,
    delta: u64,
) -> Result<Region, ArtifactError> {
    let spec = plan.outputs[kind.index()];
    let Some(placed) = layout.outputs[kind.index()].as_mut() else {
        let offset = w.reserved_len() as u64;
        return Ok(Region {
            offset,
            vaddr: offset + delta,
            size: 0,
        });
    };
    let name = String::from_utf8_lossy(kind.section_name());
    let offset = w.reserve(to_usize(spec.size, &name)?, to_usize(spec.align, &name)?) as u64;
    placed.region = Region {
        offset,
        vaddr: offset + delta,
        size: spec.size,
    };
    Ok(placed.region)
}

/// A `PT_LOAD` header mapping exactly `region`.
fn load_region(flags: u32, region: Region, align: u64) -> ProgramHeader {
    ProgramHeader {
        p_type: elf::PT_LOAD,
        p_flags: flags,
        p_offset: region.offset,
        p_vaddr: region.vaddr,
        p_paddr: region.vaddr,
        p_filesz: region.size,
        p_memsz: region.size,
        p_align: align,
    }
}

/// One `R_*_RELATIVE` dynamic relocation: `*(base + offset) = base + addend`.
#[derive(Clone, Copy, Debug)]
struct Relative {
    offset: u64,
    addend: i64,
}

/// Relocated section contents. Only input sections that have relocations
/// are copied (and patched); everything else — notably the weights, which
/// dominate model size — is written straight from the input buffer.
struct OutputContents {
    /// Patched copies, by input section index.
    patched: BTreeMap<usize, Vec<u8>>,
    got: Vec<u8>,
}

impl OutputContents {
    fn new(input: &InputObject<'_>, plan: &Plan<'_>) -> Result<Self, ArtifactError> {
        let mut patched = BTreeMap::new();
        for planned in &plan.relocs {
            let index = planned.input.section;
            if let Entry::Vacant(entry) = patched.entry(index) {
                entry.insert(input.section(index)?.data.to_vec());
            }
        }
        let got = vec![0; plan.got.len() * GOT_ENTRY_SIZE as usize];
        Ok(OutputContents { patched, got })
    }

    /// The final bytes of input section `index`.
    fn section_bytes<'a>(&'a self, input: &'a InputObject<'_>, index: usize) -> &'a [u8] {
        match self.patched.get(&index) {
            Some(bytes) => bytes,
            None => input.sections[index].as_ref().map_or(&[], |s| s.data),
        }
    }

    /// Applies all static relocations, fills the GOT, and returns the dynamic
    /// relocations the loader must still apply, sorted by address.
    fn apply_relocations(
        &mut self,
        input: &InputObject<'_>,
        plan: &Plan<'_>,
        layout: &Layout,
    ) -> Result<Vec<Relative>, ArtifactError> {
        let mut relatives = Vec::with_capacity(plan.dynamic_reloc_count);
        self.fill_got(input, plan, layout, &mut relatives)?;
        for planned in &plan.relocs {
            let r = &planned.input;
            let (_, _, section_vaddr) = placed_input(plan, layout, r.section)?;
            let inputs = RelocInputs {
                symbol: symbol_address(input, plan, layout, r.symbol)?,
                addend: r.addend,
                place: section_vaddr + r.offset,
                got_entry: planned
                    .got_slot
                    .and_then(|slot| Some(layout.got?.0.vaddr + slot as u64 * GOT_ENTRY_SIZE)),
            };
            let value = reloc::compute(planned.calc, inputs)
                .map_err(|reason| reloc_error(input, r, 0, reason))?;
            let start = to_usize(r.offset, "relocation offset")?;
            let section = self
                .patched
                .get_mut(&r.section)
                .ok_or_else(|| internal_error(format!("section #{} was not copied", r.section)))?;
            let place = &mut section[start..start + planned.field.width()];
            reloc::encode(planned.field, place, value)
                .map_err(|reason| reloc_error(input, r, value, reason))?;
            if planned.calc == reloc::Calc::Abs && !is_absolute(input, r.symbol) {
                relatives.push(Relative {
                    offset: inputs.place,
                    addend: value,
                });
            }
        }
        relatives.sort_by_key(|r| r.offset);
        Ok(relatives)
    }

    fn fill_got(
        &mut self,
        input: &InputObject<'_>,
        plan: &Plan<'_>,
        layout: &Layout,
        relatives: &mut Vec<Relative>,
    ) -> Result<(), ArtifactError> {
        let Some((got, _, _)) = layout.got else {
            return Ok(());
        };
        for (index, slot) in plan.got.iter().enumerate() {
            let value =
                symbol_address(input, plan, layout, slot.symbol)?.wrapping_add_signed(slot.addend);
            let start = index * GOT_ENTRY_SIZE as usize;
            self.got[start..start + GOT_ENTRY_SIZE as usize].copy_from_slice(&value.to_le_bytes());
            if !is_absolute(input, slot.symbol) {
                relatives.push(Relative {
                    offset: got.vaddr + start as u64,
                    addend: value as i64,
                });
            }
        }
        Ok(())
    }
}

fn reloc_error(
    input: &InputObject<'_>,
    reloc: &InputReloc,
    value: i64,
    reason: &'static str,
) -> ArtifactError {
    ArtifactError::RelocationOutOfRange {
        kind: input.arch.reloc_name(reloc.r_type),
        symbol: symbol_name(input, reloc.symbol),
        section: input
            .section(reloc.section)
            .map(|s| s.name.clone())
            .unwrap_or_default(),
        offset: reloc.offset,
        value,
        reason,
    }
}

/// Where input section `index` went: its output section, its offset in
/// there, and its address.
fn placed_input(
    plan: &Plan<'_>,
    layout: &Layout,
    index: usize,
) -> Result<(OutKind, u64, u64), ArtifactError> {
    let (kind, offset) = plan
        .placement
        .get(index)
        .copied()
        .flatten()
        .ok_or_else(|| internal_error(format!("input section #{index} was not placed")))?;
    let out = layout
        .output(kind)
        .ok_or_else(|| internal_error(format!("output section {kind:?} was not laid out")))?;
    Ok((kind, offset, out.region.vaddr + offset))
}

/// The address of a symbol in the image (relative to the load base).
fn symbol_address(
    input: &InputObject<'_>,
    plan: &Plan<'_>,
    layout: &Layout,
    symbol: usize,
) -> Result<u64, ArtifactError> {
    let Some(sym) = input.symbols.get(symbol) else {
        return Ok(0);
    };
    match sym.def {
        SymbolDef::Absolute => Ok(sym.value),
        SymbolDef::Section(section) => {
            let (_, _, section_vaddr) = placed_input(plan, layout, section)?;
            Ok(section_vaddr + sym.value)
        }
        // Plan::new rejects relocations and exports against anything else.
        _ => Err(ArtifactError::UndefinedSymbol(sym.display_name())),
    }
}

fn dynamic_entry_count(dynamic_reloc_count: usize) -> usize {
    // HASH GNU_HASH STRTAB SYMTAB STRSZ SYMENT SONAME NULL (+ RELA RELASZ RELAENT RELACOUNT)
    8 + if dynamic_reloc_count > 0 { 4 } else { 0 }
}

enum DynValue {
    Value(u64),
    String(StringId),
}

fn dynamic_entries(
    layout: &Layout,
    soname: StringId,
    relocation_count: usize,
) -> Vec<(i64, DynValue)> {
    use DynValue::{String, Value};
    let mut entries = vec![
        (elf::DT_HASH, Value(layout.hash.vaddr)),
        (elf::DT_GNU_HASH, Value(layout.gnu_hash.vaddr)),
        (elf::DT_STRTAB, Value(layout.dynstr.vaddr)),
        (elf::DT_SYMTAB, Value(layout.dynsym.vaddr)),
        (elf::DT_STRSZ, Value(layout.dynstr.size)),
        (elf::DT_SYMENT, Value(24)),
        (elf::DT_SONAME, String(soname)),
    ];
    if relocation_count > 0 {
        entries.extend([
            (elf::DT_RELA, Value(layout.rela.vaddr)),
            (elf::DT_RELASZ, Value(layout.rela.size)),
            (elf::DT_RELAENT, Value(RELA_ENTRY_SIZE)),
            // All relocations are RELATIVE, which lets the loader use its fast path.
            (elf::DT_RELACOUNT, Value(relocation_count as u64)),
        ]);
    }
    entries.push((elf::DT_NULL, Value(0)));
    entries
}

/// The `.dynsym` entries after the null symbol, in `plan.exports` order.
fn dynamic_symbols(
    input: &InputObject<'_>,
    plan: &Plan<'_>,
    layout: &Layout,
    names: &[StringId],
) -> Result<Vec<Sym>, ArtifactError> {
    let mut symbols = Vec::with_capacity(plan.exports.len());
    for (export, name) in plan.exports.iter().zip(names) {
        let sym = &input.symbols[export.symbol];
        let (section, st_shndx) = match sym.def {
            SymbolDef::Section(index) => {
                let section = plan.placement[index]
                    .and_then(|(kind, _)| layout.output(kind))
                    .map(|out| out.index)
                    .ok_or_else(|| internal_error("exported symbol's section was not placed"))?;
                (Some(section), elf::SHN_UNDEF)
            }
            _ => (None, elf::SHN_ABS),
        };
        symbols.push(Sym {
            name: Some(*name),
            section,
            st_info: sym.st_info,
            st_other: sym.st_other,
            st_shndx,
            st_value: symbol_address(input, plan, layout, export.symbol)?,
            st_size: sym.size,
        });
    }
    Ok(symbols)
}

/// Writes `.hash`, `.gnu.hash`, `.dynsym` and `.dynstr`.
fn write_symbol_tables(w: &mut Writer<'_>, plan: &Plan<'_>, hash: &HashParams, dynsyms: &[Sym]) {
    let exports = &plan.exports;
    w.write_hash(hash.sysv_buckets, hash.sysv_chains, |index| {
        // Index 0 is the null symbol, which is not hashed.
        let export = exports.get((index as usize).checked_sub(1)?)?;
        Some(elf::hash(export.name))
    });
    w.write_gnu_hash(
        1,
        hash.bloom_shift,
        hash.bloom_count,
        hash.gnu_buckets,
        hash.exported,
        |index| exports[index as usize].gnu_hash,
    );
    w.write_null_dynamic_symbol();
    for sym in dynsyms {
        w.write_dynamic_symbol(sym);
    }
    w.write_dynstr();
}

fn write_relocations(
    w: &mut Writer<'_>,
    layout: &Layout,
    relatives: &[Relative],
    r_type: u32,
) -> Result<(), ArtifactError> {
    w.write_align_relocation();
    if w.len() as u64 != layout.rela.offset {
        return Err(internal_error(".rela.dyn is misplaced"));
    }
    for rel in relatives {
        w.write_relocation(
            true,
            &Rel {
                r_offset: rel.offset,
                r_sym: 0,
                r_type,
                r_addend: rel.addend,
            },
        );
    }
    Ok(())
}

fn write_contents(
    w: &mut Writer<'_>,
    input: &InputObject<'_>,
    plan: &Plan<'_>,
    layout: &Layout,
    contents: &OutputContents,
    dynamic: &[(i64, DynValue)],
) -> Result<(), ArtifactError> {
    for kind in [OutKind::Rodata, OutKind::Text, OutKind::RelRo] {
        write_output_section(w, input, plan, layout, contents, kind);
    }
    if let Some((got, _, _)) = layout.got {
        w.pad_until(got.offset as usize);
        w.write(&contents.got);
    }
    w.write_align_dynamic();
    for (tag, value) in dynamic {
        match value {
            DynValue::Value(v) => w.write_dynamic(*tag, *v)?,
            DynValue::String(id) => w.write_dynamic_string(*tag, *id)?,
        }
    }
    write_output_section(w, input, plan, layout, contents, OutKind::Data);
    w.write_shstrtab();
    Ok(())
}

/// Writes the input sections placed in output section `kind`, in order,
/// with zero padding between them.
fn write_output_section(
    w: &mut Writer<'_>,
    input: &InputObject<'_>,
    plan: &Plan<'_>,
    layout: &Layout,
    contents: &OutputContents,
    kind: OutKind,
) {
    let Some(out) = layout.output(kind) else {
        return;
    };
    // Placement offsets grow with the input section index (see
    // `place_sections`), so input order is file order.
    for (index, place) in plan.placement.iter().enumerate() {
        if let Some((placed_kind, offset)) = place {
            if *placed_kind == kind {
                w.pad_until((out.region.offset + offset) as usize);
                w.write(contents.section_bytes(input, index));
            }
        }
    }
    w.pad_until(out.region.end_offset() as usize);
}

fn write_section_headers(w: &mut Writer<'_>, layout: &Layout) {
    w.write_null_section_header();
    w.write_hash_section_header(layout.hash.vaddr);
    w.write_gnu_hash_section_header(layout.gnu_hash.vaddr);
    w.write_dynsym_section_header(layout.dynsym.vaddr, 1);
    w.write_dynstr_section_header(layout.dynstr.vaddr);
    w.write_section_header(&SectionHeader {
        name: layout.rela_name,
        sh_type: elf::SHT_RELA,
        sh_flags: u64::from(elf::SHF_ALLOC),
        sh_addr: layout.rela.vaddr,
        sh_offset: layout.rela.offset,
        sh_size: layout.rela.size,
        sh_link: layout.dynsym_index.0,
        sh_info: 0,
        sh_addralign: 8,
        sh_entsize: RELA_ENTRY_SIZE,
    });
    for kind in [OutKind::Rodata, OutKind::Text, OutKind::RelRo] {
        if let Some(out) = layout.output(kind) {
            write_output_section_header(w, out);
        }
    }
    if let Some((got, _, name)) = layout.got {
        w.write_section_header(&SectionHeader {
            name: Some(name),
            sh_type: elf::SHT_PROGBITS,
            sh_flags: u64::from(elf::SHF_ALLOC | elf::SHF_WRITE),
            sh_addr: got.vaddr,
            sh_offset: got.offset,
            sh_size: got.size,
            sh_link: 0,
            sh_info: 0,
            sh_addralign: GOT_ENTRY_SIZE,
            sh_entsize: GOT_ENTRY_SIZE,
        });
    }
    w.write_dynamic_section_header(layout.dynamic.vaddr);
    for kind in [OutKind::Data, OutKind::Bss] {
        if let Some(out) = layout.output(kind) {
            write_output_section_header(w, out);
        }
    }
    w.write_shstrtab_section_header();
}

fn write_output_section_header(w: &mut Writer<'_>, out: &PlacedOutput) {
    w.write_section_header(&SectionHeader {
        name: Some(out.name),
        sh_type: if out.kind == OutKind::Bss {
            elf::SHT_NOBITS
        } else {
            elf::SHT_PROGBITS
        },
        sh_flags: out.kind.sh_flags(),
        sh_addr: out.region.vaddr,
        sh_offset: out.region.offset,
        sh_size: out.region.size,
        sh_link: 0,
        sh_info: 0,
        sh_addralign: out.align,
        sh_entsize: 0,
    });
}
