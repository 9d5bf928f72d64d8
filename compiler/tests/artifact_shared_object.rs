//! End-to-end tests of nnc's own shared-object linker and archive writer.
//!
//! A small module is generated with Cranelift exactly the way the code
//! generator does it (everything colocated), linked with
//! `nnc::artifact::link_shared_object`, and then loaded and executed:
//! in-process via `libloading` on x86-64, and under `qemu-aarch64` from a C
//! program on aarch64. External tools are optional (see `common/tools.rs`).

#[path = "common/tools.rs"]
mod tools;

use std::path::{Path, PathBuf};
use std::process::Command;

use cranelift_codegen::ir::{types, AbiParam, InstBuilder, MemFlagsData, Signature};
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_codegen::Context;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_module::{DataDescription, DataId, FuncId, Linkage, Module};
use cranelift_object::{ObjectBuilder, ObjectModule};
use nnc::artifact::ArtifactError;
use nnc::artifact::{link_shared_object, write_atomically_with_mode, write_static_archive};
use object::elf;
use object::read::elf::{ElfFile64, FileHeader as _, ProgramHeader as _};
use object::{Object, ObjectSection, ObjectSymbol};

const X86_64: &str = "x86_64-unknown-linux-gnu";
const AARCH64: &str = "aarch64-unknown-linux-gnu";

/// Number of f32 entries in the 64-byte aligned table (= "weights").
const TABLE_LEN: usize = 16;
const MODEL_NAME: &str = "nnc-test-model";
const INITIAL_COUNT: i64 = 100;

/// Layout of the exported `nnc_test_info` object; mirrors the C struct below.
#[repr(C)]
struct Info {
    name: *const std::ffi::c_char,
    table: *const f32,
    count: u64,
    compute: extern "C" fn(f32, i64) -> f32,
}

const C_TEST_PROGRAM: &str = r#"
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct info {
    const char *name;
    const float *table;
    uint64_t count;
    float (*compute)(float, int64_t);
};

#ifdef USE_DLOPEN
#include <dlfcn.h>
#define CHECK(cond, code) do { if (!(cond)) { fprintf(stderr, "check %d failed: %s\n", code, #cond); return code; } } while (0)
static void *lib;
static void *sym(const char *name) {
    void *p = dlsym(lib, name);
    if (!p) { fprintf(stderr, "dlsym(%s): %s\n", name, dlerror()); }
    return p;
}
#else
#define CHECK(cond, code) do { if (!(cond)) { fprintf(stderr, "check %d failed: %s\n", code, #cond); return code; } } while (0)
extern const struct info nnc_test_info;
extern int64_t *nnc_test_state_ptr;
float nnc_test_compute(float, int64_t);
int64_t nnc_test_call_count(void);
float nnc_test_last_result(void);
#endif

int main(int argc, char **argv) {
#ifdef USE_DLOPEN
    CHECK(argc == 2, 20);
    lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 21; }
    float (*nnc_test_compute)(float, int64_t) = sym("nnc_test_compute");
    int64_t (*nnc_test_call_count)(void) = sym("nnc_test_call_count");
    float (*nnc_test_last_result)(void) = sym("nnc_test_last_result");
    const struct info *info_ptr = sym("nnc_test_info");
    int64_t **state_ptr = sym("nnc_test_state_ptr");
    CHECK(nnc_test_compute && nnc_test_call_count && nnc_test_last_result && info_ptr && state_ptr, 22);
    const struct info *info = info_ptr;
    int64_t *state = *state_ptr;
#else
    (void)argc; (void)argv;
    const struct info *info = &nnc_test_info;
    int64_t *state = nnc_test_state_ptr;
#endif
    /* compute(x, i) = x * table[i] + 0.5 with table[i] = i + 1 */
    CHECK(nnc_test_compute(2.0f, 3) == 8.5f, 1);
    CHECK(nnc_test_call_count() == 101, 2);
    CHECK(nnc_test_last_result() == 8.5f, 3);
    CHECK(strcmp(info->name, "nnc-test-model") == 0, 4);
    CHECK(info->count == 16, 5);
    CHECK(info->table[0] == 1.0f && info->table[15] == 16.0f, 6);
    CHECK(((uintptr_t)info->table & 63) == 0, 7);
    CHECK(info->compute(1.0f, 15) == 16.5f, 8);
    CHECK(nnc_test_call_count() == 102, 9);
    CHECK(*state == 102, 10);
    printf("ok\n");
    return 0;
}
"#;

// ---------------------------------------------------------------------------
// Building test objects with Cranelift
// ---------------------------------------------------------------------------

fn isa(triple: &str, pic: bool) -> OwnedTargetIsa {
    let mut flags = settings::builder();
    flags.set("opt_level", "speed").unwrap();
    flags
        .set("is_pic", if pic { "true" } else { "false" })
        .unwrap();
    cranelift_codegen::isa::lookup_by_name(triple)
        .unwrap()
        .finish(settings::Flags::new(flags))
        .unwrap()
}

/// How the test object is generated.
#[derive(Clone, Copy, Debug)]
struct Build {
    /// Address symbols through the GOT (Cranelift's `is_pic`).
    pic: bool,
    /// One section per function and per data object, as with
    /// `-ffunction-sections -fdata-sections`.
    split_sections: bool,
}

impl Build {
    const DEFAULT: Build = Build {
        pic: false,
        split_sections: false,
    };
    const PIC: Build = Build {
        pic: true,
        split_sections: false,
    };
    const SPLIT: Build = Build {
        pic: false,
        split_sections: true,
    };
}

fn new_module(triple: &str, pic: bool) -> ObjectModule {
    new_module_with(
        triple,
        Build {
            pic,
            ..Build::DEFAULT
        },
    )
}

fn new_module_with(triple: &str, build: Build) -> ObjectModule {
    let mut builder = ObjectBuilder::new(
        isa(triple, build.pic),
        "nnc_test",
        cranelift_module::default_libcall_names(),
    )
    .unwrap();
    builder
        .per_function_section(build.split_sections)
        .per_data_object_section(build.split_sections);
    ObjectModule::new(builder)
}

fn define_data(
    module: &mut ObjectModule,
    name: &str,
    linkage: Linkage,
    writable: bool,
    align: u64,
    contents: Vec<u8>,
) -> DataId {
    let id = module.declare_data(name, linkage, writable, false).unwrap();
    let mut desc = DataDescription::new();
    desc.define(contents.into_boxed_slice());
    desc.set_align(align);
    module.define_data(id, &desc).unwrap();
    id
}

fn signature(module: &ObjectModule, params: &[types::Type], ret: Option<types::Type>) -> Signature {
    let mut sig = module.make_signature();
    sig.params.extend(params.iter().map(|&t| AbiParam::new(t)));
    sig.returns.extend(ret.map(AbiParam::new));
    sig
}

/// Declares and defines a function whose body `body` builds; `body` gets the
/// builder, the module and the entry block parameters, and returns the values
/// to return.
fn define_function(
    module: &mut ObjectModule,
    name: &str,
    linkage: Linkage,
    sig: Signature,
    body: impl FnOnce(
        &mut FunctionBuilder,
        &mut ObjectModule,
        &[cranelift_codegen::ir::Value],
    ) -> Vec<cranelift_codegen::ir::Value>,
) -> FuncId {
    let id = module.declare_function(name, linkage, &sig).unwrap();
    let mut ctx = Context::new();
    ctx.func.signature = sig;
    let mut fctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
    let block = b.create_block();
    b.append_block_params_for_function_params(block);
    b.switch_to_block(block);
    b.seal_block(block);
    let params = b.block_params(block).to_vec();
    let results = body(&mut b, module, &params);
    b.ins().return_(&results);
    b.finalize(module.target_config());
    module.define_function(id, &mut ctx).unwrap();
    id
}

/// The test model. With `pic` set, Cranelift addresses every symbol through
/// the GOT, which exercises the linker's GOT synthesis.
///
/// * `scale_table` (local, read-only, 64-byte aligned): f32 `i + 1`
/// * `model_name` (local, read-only): "nnc-test-model\0"
/// * `call_count` (local, writable, .data): i64, initially 100
/// * `last_result` (local, zero-initialised, .bss): f32
/// * `scale(x, i) = x * scale_table[i]` (local function)
/// * `nnc_test_compute(x, i) = scale(x, i) + 0.5`; bumps `call_count`,
///   stores the result in `last_result` (exported)
/// * `nnc_test_call_count()`, `nnc_test_last_result()` (exported getters)
/// * `nnc_test_info` (exported, read-only): {&model_name, &scale_table, 16, &nnc_test_compute}
/// * `nnc_test_state_ptr` (exported, writable): &call_count
fn build_test_object(triple: &str, build: Build) -> Vec<u8> {
    let mut module = new_module_with(triple, build);
    let ptr = module.target_config().pointer_type();

    let table_bytes = (0..TABLE_LEN)
        .flat_map(|i| (i as f32 + 1.0).to_le_bytes())
        .collect();
    let table = define_data(
        &mut module,
        "scale_table",
        Linkage::Local,
        false,
        64,
        table_bytes,
    );
    let name = define_data(
        &mut module,
        "model_name",
        Linkage::Local,
        false,
        1,
        format!("{MODEL_NAME}\0").into_bytes(),
    );
    let counter = define_data(
        &mut module,
        "call_count",
        Linkage::Local,
        true,
        8,
        INITIAL_COUNT.to_le_bytes().to_vec(),
    );
    let last = module
        .declare_data("last_result", Linkage::Local, true, false)
        .unwrap();
    let mut desc = DataDescription::new();
    desc.define_zeroinit(4);
    desc.set_align(4);
    module.define_data(last, &desc).unwrap();

    let flags = MemFlagsData::trusted();
    let scale_sig = signature(&module, &[types::F32, types::I64], Some(types::F32));
    let scale = define_function(
        &mut module,
        "scale",
        Linkage::Local,
        scale_sig.clone(),
        |b, m, p| {
            let gv = m.declare_data_in_func(table, b.func);
            let base = b.ins().symbol_value(ptr, gv);
            let offset = b.ins().imul_imm_s(p[1], 4);
            let addr = b.ins().iadd(base, offset);
            let factor = b.ins().load(types::F32, flags, addr, 0);
            vec![b.ins().fmul(p[0], factor)]
        },
    );
    let compute = define_function(
        &mut module,
        "nnc_test_compute",
        Linkage::Export,
        scale_sig,
        |b, m, p| {
            let callee = m.declare_func_in_func(scale, b.func);
            let call = b.ins().call(callee, &[p[0], p[1]]);
            let scaled = b.inst_results(call)[0];
            let half = b.ins().f32const(0.5);
            let result = b.ins().fadd(scaled, half);
            let counter_gv = m.declare_data_in_func(counter, b.func);
            let counter_addr = b.ins().symbol_value(ptr, counter_gv);
            let count = b.ins().load(types::I64, flags, counter_addr, 0);
            let count = b.ins().iadd_imm_s(count, 1);
            b.ins().store(flags, count, counter_addr, 0);
            let last_gv = m.declare_data_in_func(last, b.func);
            let last_addr = b.ins().symbol_value(ptr, last_gv);
            b.ins().store(flags, result, last_addr, 0);
            vec![result]
        },
    );
    let getter_sig = signature(&module, &[], Some(types::I64));
    define_function(
        &mut module,
        "nnc_test_call_count",
        Linkage::Export,
        getter_sig,
        |b, m, _| {
            let gv = m.declare_data_in_func(counter, b.func);
            let addr = b.ins().symbol_value(ptr, gv);
            vec![b.ins().load(types::I64, flags, addr, 0)]
        },
    );
    let getter_sig = signature(&module, &[], Some(types::F32));
    define_function(
        &mut module,
        "nnc_test_last_result",
        Linkage::Export,
        getter_sig,
        |b, m, _| {
            let gv = m.declare_data_in_func(last, b.func);
            let addr = b.ins().symbol_value(ptr, gv);
            vec![b.ins().load(types::F32, flags, addr, 0)]
        },
    );

    // Exported data holding absolute pointers: RELATIVE dynamic relocations.
    let info = module
        .declare_data("nnc_test_info", Linkage::Export, false, false)
        .unwrap();
    let mut desc = DataDescription::new();
    let mut bytes = vec![0u8; 32];
    bytes[16..24].copy_from_slice(&(TABLE_LEN as u64).to_le_bytes());
    desc.define(bytes.into_boxed_slice());
    desc.set_align(8);
    let name_gv = module.declare_data_in_data(name, &mut desc);
    let table_gv = module.declare_data_in_data(table, &mut desc);
    let compute_ref = module.declare_func_in_data(compute, &mut desc);
    desc.write_data_addr(0, name_gv, 0);
    desc.write_data_addr(8, table_gv, 0);
    desc.write_function_addr(24, compute_ref);
    module.define_data(info, &desc).unwrap();

    let state = module
        .declare_data("nnc_test_state_ptr", Linkage::Export, true, false)
        .unwrap();
    let mut desc = DataDescription::new();
    desc.define(vec![0u8; 8].into_boxed_slice());
    desc.set_align(8);
    let counter_gv = module.declare_data_in_data(counter, &mut desc);
    desc.write_data_addr(0, counter_gv, 0);
    module.define_data(state, &desc).unwrap();

    module.finish().emit().unwrap()
}

// ---------------------------------------------------------------------------
// Inspecting the output
// ---------------------------------------------------------------------------

const EXPORTS: [(&str, object::SymbolKind, u64); 5] = [
    ("nnc_test_compute", object::SymbolKind::Text, 0),
    ("nnc_test_call_count", object::SymbolKind::Text, 0),
    ("nnc_test_last_result", object::SymbolKind::Text, 0),
    ("nnc_test_info", object::SymbolKind::Data, 32),
    ("nnc_test_state_ptr", object::SymbolKind::Data, 8),
];

fn export_names() -> Vec<&'static str> {
    EXPORTS.iter().map(|(name, _, _)| *name).collect()
}

/// Structural checks that do not need any external tool.
fn check_structure(so: &[u8], soname: &str, machine: u16) {
    let file = ElfFile64::<object::Endianness>::parse(so).expect("output parses as ELF64");
    let endian = file.endian();
    let header = file.elf_header();
    assert_eq!(header.e_type(endian), elf::ET_DYN);
    assert_eq!(header.e_machine(endian), machine);

    // Dynamic table: SONAME present, nothing NEEDED.
    let dynamic = file
        .elf_section_table()
        .dynamic_table(endian, so)
        .expect("dynamic table");
    let tags: Vec<i64> = dynamic.iter().map(|d| d.tag).collect();
    let mut found_soname = false;
    for entry in dynamic.iter() {
        assert_ne!(entry.tag, elf::DT_NEEDED, "output must not have DT_NEEDED");
        assert_ne!(
            entry.tag,
            elf::DT_TEXTREL,
            "output must not have text relocations"
        );
        if entry.tag == elf::DT_SONAME {
            assert_eq!(dynamic.string(entry).unwrap(), soname.as_bytes());
            found_soname = true;
        }
    }
    assert!(found_soname, "DT_SONAME missing; tags: {tags:?}");

    // Exported symbols with the right kind and size.
    let dynsyms: Vec<_> = file.dynamic_symbols().collect();
    for (name, kind, size) in EXPORTS {
        let sym = dynsyms
            .iter()
            .find(|s| s.name() == Ok(name))
            .unwrap_or_else(|| panic!("{name} not exported"));
        assert_eq!(sym.kind(), kind, "{name} kind");
        assert!(
            sym.is_global() && sym.is_definition(),
            "{name} global+defined"
        );
        if size != 0 {
            assert_eq!(sym.size(), size, "{name} size");
        } else {
            assert!(sym.size() > 0, "{name} has a size");
        }
    }
    for local in ["scale", "scale_table", "call_count", "model_name"] {
        assert!(
            dynsyms.iter().all(|s| s.name() != Ok(local)),
            "local symbol {local} must not be exported"
        );
    }

    check_segments(so, machine);

    // The required section headers are present.
    for name in [
        ".text",
        ".rodata",
        ".data",
        ".bss",
        ".dynsym",
        ".dynstr",
        ".hash",
        ".dynamic",
        ".rela.dyn",
        ".shstrtab",
    ] {
        assert!(
            file.section_by_name(name).is_some(),
            "section {name} missing"
        );
    }
    // The weights table keeps its 64-byte alignment.
    let rodata = file.section_by_name(".rodata").unwrap();
    assert_eq!(rodata.address() % 64, 0);
    assert!(rodata.align() >= 64);
}

/// Segment invariants every output must satisfy: non-executable stack,
/// congruent page-aligned loads, W^X, and non-overlapping load pages.
fn check_segments(so: &[u8], machine: u16) {
    let file = ElfFile64::<object::Endianness>::parse(so).expect("output parses as ELF64");
    let endian = file.endian();
    let mut loads = Vec::new();
    let mut saw_stack = false;
    for phdr in file.elf_program_headers() {
        let p_type = phdr.p_type(endian);
        let flags = phdr.p_flags(endian);
        if p_type == elf::PT_GNU_STACK {
            saw_stack = true;
            assert_eq!(flags & elf::PF_X, 0, "stack must not be executable");
        }
        if p_type == elf::PT_LOAD {
            let align = phdr.p_align(endian);
            let min_page = if machine == elf::EM_AARCH64 {
                0x10000
            } else {
                0x1000
            };
            assert!(align >= min_page, "PT_LOAD alignment {align:#x}");
            assert_eq!(
                phdr.p_vaddr(endian) % align,
                phdr.p_offset(endian) % align,
                "p_vaddr and p_offset must be congruent"
            );
            assert!(
                flags & elf::PF_W == 0 || flags & elf::PF_X == 0,
                "no segment may be writable and executable"
            );
            let start = phdr.p_vaddr(endian) / align * align;
            let end = (phdr.p_vaddr(endian) + phdr.p_memsz(endian)).next_multiple_of(align);
            loads.push((start, end));
        }
    }
    assert!(saw_stack, "PT_GNU_STACK missing");

    for pair in loads.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "PT_LOAD pages overlap: {loads:x?}");
    }
}

/// `readelf` must parse the file without complaints and `nm -D` must list the
/// exports, if binutils is installed.
fn check_with_binutils(path: &Path, exports: &[&str]) {
    if !tools::require_tools(&["readelf", "nm"]) {
        return;
    }
    let output = tools::run(Command::new("readelf").arg("--wide").arg("-a").arg(path));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.trim().is_empty(), "readelf complained:\n{stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!stdout.contains("NEEDED"), "unexpected NEEDED:\n{stdout}");
    let nm = tools::run_stdout(Command::new("nm").arg("-D").arg(path));
    for name in exports {
        assert!(nm.contains(name), "nm -D does not list {name}:\n{nm}");
    }
}

fn write_library(dir: &Path, file_name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(file_name);
    write_atomically_with_mode(&path, bytes, 0o755).unwrap();
    path
}

fn write_c_program(dir: &Path) -> PathBuf {
    let path = dir.join("main.c");
    std::fs::write(&path, C_TEST_PROGRAM).unwrap();
    path
}

// ---------------------------------------------------------------------------
// x86-64
// ---------------------------------------------------------------------------

/// Loads the library in-process and checks everything the C program checks.
fn check_in_process(path: &Path) {
    unsafe {
        let lib = libloading::Library::new(path).expect("dlopen");
        let compute: libloading::Symbol<extern "C" fn(f32, i64) -> f32> =
            lib.get(b"nnc_test_compute").unwrap();
        let call_count: libloading::Symbol<extern "C" fn() -> i64> =
            lib.get(b"nnc_test_call_count").unwrap();
        let last_result: libloading::Symbol<extern "C" fn() -> f32> =
            lib.get(b"nnc_test_last_result").unwrap();
        let info: libloading::Symbol<*const Info> = lib.get(b"nnc_test_info").unwrap();
        let state: libloading::Symbol<*const *const i64> = lib.get(b"nnc_test_state_ptr").unwrap();

        assert_eq!(call_count(), INITIAL_COUNT);
        assert_eq!(last_result(), 0.0, ".bss must start zeroed");
        assert_eq!(compute(2.0, 3), 8.5);
        assert_eq!(call_count(), INITIAL_COUNT + 1);
        assert_eq!(last_result(), 8.5);

        let info = &**info;
        let name = std::ffi::CStr::from_ptr(info.name);
        assert_eq!(name.to_str().unwrap(), MODEL_NAME);
        assert_eq!(info.count, TABLE_LEN as u64);
        assert_eq!(
            info.table as usize % 64,
            0,
            "table must stay 64-byte aligned"
        );
        let table = std::slice::from_raw_parts(info.table, TABLE_LEN);
        assert_eq!(table[0], 1.0);
        assert_eq!(table[TABLE_LEN - 1], TABLE_LEN as f32);
        assert_eq!((info.compute)(1.0, 15), 16.5);
        assert_eq!(info.compute as usize, *compute as usize);
        assert_eq!(***state, INITIAL_COUNT + 2);

        // Page protections after loading: code r-x, relocated constants
        // read-only again (PT_GNU_RELRO), mutable data rw-.
        assert_eq!(mapping_permissions(*compute as usize), "r-xp");
        assert_eq!(mapping_permissions(info as *const Info as usize), "r--p");
        assert_eq!(mapping_permissions(*state as usize), "rw-p");
    }
}

/// Permission string of the mapping containing `address`, from /proc/self/maps.
fn mapping_permissions(address: usize) -> String {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (range, perms) = (fields.next().unwrap(), fields.next().unwrap());
        let (start, end) = range.split_once('-').unwrap();
        let start = usize::from_str_radix(start, 16).unwrap();
        let end = usize::from_str_radix(end, 16).unwrap();
        if (start..end).contains(&address) {
            return perms.to_owned();
        }
    }
    panic!("{address:#x} is not mapped");
}

fn link_and_check_x86_64(build: Build) {
    let object = build_test_object(X86_64, build);
    let so = link_shared_object(&object, "libnnctest.so").expect("link");
    check_structure(&so, "libnnctest.so", elf::EM_X86_64);
    let dir = tempfile::tempdir().unwrap();
    let path = write_library(dir.path(), "libnnctest.so", &so);
    check_with_binutils(&path, &export_names());
    if cfg!(all(target_arch = "x86_64", target_os = "linux")) {
        check_in_process(&path);
    }
}

#[test]
fn x86_64_links_loads_and_runs() {
    link_and_check_x86_64(Build::DEFAULT);
}

#[test]
fn x86_64_got_relocations_are_supported() {
    let object = build_test_object(X86_64, Build::PIC);
    assert!(
        relocation_types(&object)
            .iter()
            .any(|&t| t == elf::R_X86_64_GOTPCREL || t == elf::R_X86_64_REX_GOTPCRELX),
        "the PIC build should reference data through the GOT"
    );
    link_and_check_x86_64(Build::PIC);
}

#[test]
fn x86_64_per_symbol_sections_are_merged() {
    let object = build_test_object(X86_64, Build::SPLIT);
    assert!(section_count(&object, ".text") > 1, "expected split .text");
    link_and_check_x86_64(Build::SPLIT);
}

/// Number of sections named `prefix` or `prefix.*`.
fn section_count(object: &[u8], prefix: &str) -> usize {
    let file = object::File::parse(object).unwrap();
    file.sections()
        .filter_map(|s| s.name().ok().map(str::to_owned))
        .filter(|name| name == prefix || name.starts_with(&format!("{prefix}.")))
        .count()
}

#[test]
fn x86_64_gcc_links_against_shared_object() {
    if !cfg!(all(target_arch = "x86_64", target_os = "linux")) || !tools::require_tool("gcc") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let so =
        link_shared_object(&build_test_object(X86_64, Build::DEFAULT), "libnnctest.so").unwrap();
    write_library(dir.path(), "libnnctest.so", &so);
    let main = write_c_program(dir.path());
    let exe = dir.path().join("prog");
    let lib_dir = dir.path().to_str().unwrap();
    tools::run(
        Command::new("gcc")
            .arg("-O1")
            .arg(&main)
            .arg("-o")
            .arg(&exe)
            .arg(format!("-L{lib_dir}"))
            .arg("-lnnctest")
            .arg(format!("-Wl,-rpath,{lib_dir}")),
    );
    assert_eq!(tools::run_stdout(&mut Command::new(&exe)), "ok\n");

    // The same program, loading the library with dlopen.
    let exe = dir.path().join("prog_dlopen");
    tools::run(
        Command::new("gcc")
            .args(["-O1", "-DUSE_DLOPEN"])
            .arg(&main)
            .arg("-o")
            .arg(&exe)
            .arg("-ldl"),
    );
    let out = tools::run_stdout(Command::new(&exe).arg(dir.path().join("libnnctest.so")));
    assert_eq!(out, "ok\n");
}

#[test]
fn x86_64_gcc_links_against_static_archive() {
    if !cfg!(all(target_arch = "x86_64", target_os = "linux")) || !tools::require_tool("gcc") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let archive = write_static_archive(
        "nnc_test_model.o",
        &build_test_object(X86_64, Build::DEFAULT),
    )
    .unwrap();
    std::fs::write(dir.path().join("libnnctest.a"), archive).unwrap();
    let main = write_c_program(dir.path());
    let exe = dir.path().join("prog_static");
    tools::run(
        Command::new("gcc")
            .arg("-O1")
            .arg(&main)
            .arg("-o")
            .arg(&exe)
            .arg(format!("-L{}", dir.path().display()))
            .arg("-l:libnnctest.a"),
    );
    assert_eq!(tools::run_stdout(&mut Command::new(&exe)), "ok\n");
}

// ---------------------------------------------------------------------------
// aarch64
// ---------------------------------------------------------------------------

fn link_and_check_aarch64(build: Build) {
    let object = build_test_object(AARCH64, build);
    let so = link_shared_object(&object, "libnnctest.so").expect("link");
    check_structure(&so, "libnnctest.so", elf::EM_AARCH64);
    let dir = tempfile::tempdir().unwrap();
    let lib = write_library(dir.path(), "libnnctest.so", &so);
    check_with_binutils(&lib, &export_names());
    if !tools::require_aarch64_toolchain() {
        return;
    }
    let main = write_c_program(dir.path());

    // dlopen at run time.
    let exe = dir.path().join("prog_dlopen");
    tools::run(
        Command::new("aarch64-linux-gnu-gcc")
            .args(["-O1", "-DUSE_DLOPEN"])
            .arg(&main)
            .arg("-o")
            .arg(&exe)
            .arg("-ldl"),
    );
    let out = tools::run_stdout(tools::qemu_aarch64(&exe).arg(&lib));
    assert_eq!(out, "ok\n");

    // Linked at build time by GNU ld.
    let exe = dir.path().join("prog");
    let lib_dir = dir.path().to_str().unwrap();
    tools::run(
        Command::new("aarch64-linux-gnu-gcc")
            .arg("-O1")
            .arg(&main)
            .arg("-o")
            .arg(&exe)
            .arg(format!("-L{lib_dir}"))
            .arg("-lnnctest")
            .arg(format!("-Wl,-rpath,{lib_dir}")),
    );
    assert_eq!(tools::run_stdout(&mut tools::qemu_aarch64(&exe)), "ok\n");
}

#[test]
fn aarch64_links_loads_and_runs() {
    link_and_check_aarch64(Build::DEFAULT);
}

#[test]
fn aarch64_got_relocations_are_supported() {
    let object = build_test_object(AARCH64, Build::PIC);
    let types = relocation_types(&object);
    assert!(types.contains(&elf::R_AARCH64_ADR_GOT_PAGE));
    assert!(types.contains(&elf::R_AARCH64_LD64_GOT_LO12_NC));
    link_and_check_aarch64(Build::PIC);
}

#[test]
fn aarch64_per_symbol_sections_are_merged() {
    let object = build_test_object(AARCH64, Build::SPLIT);
    assert!(section_count(&object, ".text") > 1, "expected split .text");
    link_and_check_aarch64(Build::SPLIT);
}

#[test]
fn aarch64_gcc_links_against_static_archive() {
    if !tools::require_aarch64_toolchain() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let archive = write_static_archive(
        "nnc_test_model.o",
        &build_test_object(AARCH64, Build::DEFAULT),
    )
    .unwrap();
    std::fs::write(dir.path().join("libnnctest.a"), archive).unwrap();
    let main = write_c_program(dir.path());
    let exe = dir.path().join("prog_static");
    tools::run(
        Command::new("aarch64-linux-gnu-gcc")
            .arg("-O1")
            .arg(&main)
            .arg("-o")
            .arg(&exe)
            .arg(dir.path().join("libnnctest.a")),
    );
    assert_eq!(tools::run_stdout(&mut tools::qemu_aarch64(&exe)), "ok\n");
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

fn relocation_types(object: &[u8]) -> Vec<u32> {
    let file = object::File::parse(object).unwrap();
    file.sections()
        .flat_map(|s| s.relocations().collect::<Vec<_>>())
        .filter_map(|(_, r)| match r.flags() {
            object::RelocationFlags::Elf { r_type } => Some(r_type),
            _ => None,
        })
        .collect()
}

#[test]
fn calling_an_undefined_function_is_an_error_naming_it() {
    for triple in [X86_64, AARCH64] {
        let mut module = new_module(triple, false);
        let sig = signature(&module, &[types::F32], Some(types::F32));
        let sinf = module
            .declare_function("sinf", Linkage::Import, &sig)
            .unwrap();
        define_function(&mut module, "uses_libm", Linkage::Export, sig, |b, m, p| {
            let callee = m.declare_func_in_func(sinf, b.func);
            let call = b.ins().call(callee, &[p[0]]);
            vec![b.inst_results(call)[0]]
        });
        let object = module.finish().emit().unwrap();
        match link_shared_object(&object, "libx.so") {
            Err(ArtifactError::UndefinedSymbol(name)) => assert_eq!(name, "sinf"),
            other => panic!("{triple}: expected UndefinedSymbol(sinf), got {other:?}"),
        }
    }
}

#[test]
fn non_pic_absolute_code_reference_is_rejected() {
    // A preemptible symbol is not colocated, so non-PIC x86-64 code loads its
    // address with `movabs` and an R_X86_64_64 relocation in .text.
    let mut module = new_module(X86_64, false);
    let ptr = module.target_config().pointer_type();
    let data = define_data(
        &mut module,
        "far_data",
        Linkage::Preemptible,
        false,
        8,
        vec![1; 8],
    );
    let sig = signature(&module, &[], Some(ptr));
    define_function(&mut module, "get_far", Linkage::Export, sig, |b, m, _| {
        let gv = m.declare_data_in_func(data, b.func);
        vec![b.ins().symbol_value(ptr, gv)]
    });
    let object = module.finish().emit().unwrap();
    let err = link_shared_object(&object, "libx.so").unwrap_err();
    assert!(
        matches!(&err, ArtifactError::TextRelocation { symbol, section, .. }
            if symbol == "far_data" && section == ".text"),
        "got {err:?}"
    );
    assert!(err.to_string().contains("R_X86_64_64"), "{err}");
}

/// Hand-made object with one relocation of the given type in `.text`.
fn object_with_relocation(
    arch: object::Architecture,
    r_type: u32,
    target_in_bss_at: Option<u64>,
) -> Vec<u8> {
    use object::write::{Object, Relocation, StandardSection, Symbol, SymbolSection};
    use object::{BinaryFormat, Endianness, SymbolFlags, SymbolKind, SymbolScope};
    let mut obj = Object::new(BinaryFormat::Elf, arch, Endianness::Little);
    let text = obj.section_id(StandardSection::Text);
    let code = obj.append_section_data(text, &[0; 16], 16);
    obj.add_symbol(Symbol {
        name: b"entry".to_vec(),
        value: code,
        size: 16,
        kind: SymbolKind::Text,
        scope: SymbolScope::Dynamic,
        weak: false,
        section: SymbolSection::Section(text),
        flags: SymbolFlags::None,
    });
    let (section, value) = match target_in_bss_at {
        Some(offset) => {
            let bss = obj.section_id(StandardSection::UninitializedData);
            obj.append_section_bss(bss, offset + 16, 16);
            (bss, offset)
        }
        None => (text, 8),
    };
    let target = obj.add_symbol(Symbol {
        name: b"target".to_vec(),
        value,
        size: 0,
        kind: SymbolKind::Data,
        scope: SymbolScope::Compilation,
        weak: false,
        section: SymbolSection::Section(section),
        flags: SymbolFlags::None,
    });
    obj.add_relocation(
        text,
        Relocation {
            offset: 0,
            symbol: target,
            addend: 0,
            flags: object::RelocationFlags::Elf { r_type },
        },
    )
    .unwrap();
    obj.write().unwrap()
}

#[test]
fn unknown_relocation_type_is_an_error_naming_it() {
    let object = object_with_relocation(object::Architecture::X86_64, elf::R_X86_64_32S, None);
    let err = link_shared_object(&object, "libx.so").unwrap_err();
    assert!(
        matches!(err, ArtifactError::UnsupportedRelocation { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("R_X86_64_32S"), "{err}");

    let object = object_with_relocation(object::Architecture::Aarch64, 0x7777, None);
    let err = link_shared_object(&object, "libx.so").unwrap_err();
    assert!(err.to_string().contains("30583"), "{err}");
}

#[test]
fn out_of_range_branch_is_an_error() {
    // BL to a symbol 512 MiB away (beyond ±128 MiB). .bss costs no file space.
    let object = object_with_relocation(
        object::Architecture::Aarch64,
        elf::R_AARCH64_CALL26,
        Some(512 << 20),
    );
    let err = link_shared_object(&object, "libx.so").unwrap_err();
    assert!(
        matches!(&err, ArtifactError::RelocationOutOfRange { symbol, .. } if symbol == "target"),
        "{err:?}"
    );

    // The same branch to a nearby target links fine.
    let object = object_with_relocation(object::Architecture::Aarch64, elf::R_AARCH64_CALL26, None);
    link_shared_object(&object, "libx.so").unwrap();
}

#[test]
fn malformed_input_is_an_error_not_a_panic() {
    assert!(matches!(
        link_shared_object(b"definitely not ELF", "libx.so"),
        Err(ArtifactError::InvalidObject(_))
    ));
    assert!(link_shared_object(&[], "libx.so").is_err());
    let object = build_test_object(X86_64, Build::DEFAULT);
    // A linked library is not a relocatable object.
    let so = link_shared_object(&object, "libx.so").unwrap();
    assert!(matches!(
        link_shared_object(&so, "liby.so"),
        Err(ArtifactError::InvalidObject(_))
    ));
    assert!(matches!(
        link_shared_object(&object, ""),
        Err(ArtifactError::InvalidArgument(_))
    ));
    // Truncations and byte flips anywhere must never panic.
    for len in (0..object.len()).step_by(97) {
        let _ = link_shared_object(&object[..len], "libx.so");
    }
    let mut corrupted = object.clone();
    for i in (0..corrupted.len()).step_by(13) {
        corrupted[i] ^= 0xa5;
        let _ = link_shared_object(&corrupted, "libx.so");
        corrupted[i] ^= 0xa5;
    }
}

#[test]
fn unsupported_machine_is_an_error() {
    let object = object_with_relocation(object::Architecture::Riscv64, 0, None);
    assert!(matches!(
        link_shared_object(&object, "libx.so"),
        Err(ArtifactError::UnsupportedMachine(elf::EM_RISCV))
    ));
}

#[test]
fn output_is_deterministic() {
    let object = build_test_object(AARCH64, Build::DEFAULT);
    assert_eq!(
        link_shared_object(&object, "liba.so").unwrap(),
        link_shared_object(&object, "liba.so").unwrap()
    );
}

// ---------------------------------------------------------------------------
// Layout corner cases: missing .data, .bss-only, no code at all
// ---------------------------------------------------------------------------

/// 1 MiB + 8 bytes of zero-initialised data: spans many pages.
const BIG_BSS: u64 = (1 << 20) + 8;

#[derive(Clone, Copy, Debug)]
enum Variant {
    /// Code and writable data, the latter only in .bss (no file contents).
    BssWithoutData,
    /// Code and read-only data only: no RW segment besides RELRO.
    NoWritableData,
    /// Exported constant data and no code at all (a weights-only library).
    NoCode,
}

/// `probe() -> i64`: BssWithoutData bumps the last i64 of a big .bss buffer by 7 and
/// returns it (7, 14, …); NoWritableData returns 30 from a constant table.
fn build_variant(triple: &str, variant: Variant) -> Vec<u8> {
    let mut module = new_module(triple, false);
    let ptr = module.target_config().pointer_type();
    let flags = MemFlagsData::trusted();
    let sig = signature(&module, &[], Some(types::I64));
    match variant {
        Variant::BssWithoutData => {
            let buf = module
                .declare_data("big_buf", Linkage::Local, true, false)
                .unwrap();
            let mut desc = DataDescription::new();
            desc.define_zeroinit(BIG_BSS as usize);
            desc.set_align(64);
            module.define_data(buf, &desc).unwrap();
            define_function(&mut module, "probe", Linkage::Export, sig, |b, m, _| {
                let gv = m.declare_data_in_func(buf, b.func);
                let base = b.ins().symbol_value(ptr, gv);
                let offset = (BIG_BSS - 8) as i32;
                let value = b.ins().load(types::I64, flags, base, offset);
                let value = b.ins().iadd_imm_s(value, 7);
                b.ins().store(flags, value, base, offset);
                vec![value]
            });
        }
        Variant::NoWritableData => {
            let table = [10i64, 20, 30]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect();
            let table = define_data(&mut module, "table", Linkage::Local, false, 8, table);
            define_function(&mut module, "probe", Linkage::Export, sig, |b, m, _| {
                let gv = m.declare_data_in_func(table, b.func);
                let base = b.ins().symbol_value(ptr, gv);
                vec![b.ins().load(types::I64, flags, base, 16)]
            });
        }
        Variant::NoCode => {
            let weights = (0..=255u8).collect();
            define_data(&mut module, "weights", Linkage::Export, false, 64, weights);
        }
    }
    module.finish().emit().unwrap()
}

const C_RUNNER: &str = r#"
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
int main(int argc, char **argv) {
    if (argc != 3) return 2;
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 3; }
    int64_t (*probe)(void) = (int64_t (*)(void))dlsym(lib, argv[2]);
    if (!probe) { fprintf(stderr, "dlsym: %s\n", dlerror()); return 4; }
    long long first = probe();
    long long second = probe();
    printf("%lld %lld\n", first, second);
    return 0;
}
"#;

/// Runs `probe` twice in the aarch64 library under qemu; returns stdout.
fn run_probe_aarch64(dir: &Path, lib: &Path) -> Option<String> {
    if !tools::require_aarch64_toolchain() {
        return None;
    }
    let source = dir.join("runner.c");
    std::fs::write(&source, C_RUNNER).unwrap();
    let exe = dir.join("runner");
    tools::run(
        Command::new("aarch64-linux-gnu-gcc")
            .arg("-O1")
            .arg(&source)
            .arg("-o")
            .arg(&exe)
            .arg("-ldl"),
    );
    Some(tools::run_stdout(
        tools::qemu_aarch64(&exe).arg(lib).arg("probe"),
    ))
}

/// Links the variant for both architectures, checks segment invariants and
/// binutils' opinion, and returns (x86-64 library, aarch64 library, tempdir).
fn link_variant(variant: Variant, export: &str) -> (PathBuf, PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut paths = Vec::new();
    for (triple, machine, file) in [
        (X86_64, elf::EM_X86_64, "libx86.so"),
        (AARCH64, elf::EM_AARCH64, "liba64.so"),
    ] {
        let so = link_shared_object(&build_variant(triple, variant), file).unwrap();
        check_segments(&so, machine);
        let path = write_library(dir.path(), file, &so);
        check_with_binutils(&path, &[export]);
        paths.push(path);
    }
    let aarch64 = paths.pop().unwrap();
    let x86_64 = paths.pop().unwrap();
    (x86_64, aarch64, dir)
}

fn load_segments(path: &Path) -> Vec<(u32, u64, u64, u64)> {
    let bytes = std::fs::read(path).unwrap();
    let file = ElfFile64::<object::Endianness>::parse(&*bytes).unwrap();
    let endian = file.endian();
    file.elf_program_headers()
        .iter()
        .filter(|p| p.p_type(endian) == elf::PT_LOAD)
        .map(|p| {
            (
                p.p_flags(endian),
                p.p_vaddr(endian),
                p.p_filesz(endian),
                p.p_memsz(endian),
            )
        })
        .collect()
}

#[test]
fn bss_only_writable_data_is_zeroed_and_writable() {
    let (x86_64, aarch64, dir) = link_variant(Variant::BssWithoutData, "probe");
    for path in [&x86_64, &aarch64] {
        // The .bss-only segment has no file contents and starts on a page.
        let segments = load_segments(path);
        let (_, vaddr, filesz, memsz) = *segments.last().unwrap();
        assert_eq!(filesz, 0, "{segments:x?}");
        assert!(memsz >= BIG_BSS);
        assert_eq!(vaddr % 0x1000, 0, "{segments:x?}");
    }
    if cfg!(all(target_arch = "x86_64", target_os = "linux")) {
        unsafe {
            let lib = libloading::Library::new(&x86_64).unwrap();
            let probe: libloading::Symbol<extern "C" fn() -> i64> = lib.get(b"probe").unwrap();
            assert_eq!(probe(), 7);
            assert_eq!(probe(), 14);
        }
    }
    if let Some(out) = run_probe_aarch64(dir.path(), &aarch64) {
        assert_eq!(out, "7 14\n");
    }
}

#[test]
fn read_only_module_has_no_data_segment() {
    let (x86_64, aarch64, dir) = link_variant(Variant::NoWritableData, "probe");
    for path in [&x86_64, &aarch64] {
        let writable = load_segments(path)
            .iter()
            .filter(|(flags, ..)| flags & elf::PF_W != 0)
            .count();
        assert_eq!(writable, 1, "only the RELRO segment (.dynamic) is writable");
    }
    if cfg!(all(target_arch = "x86_64", target_os = "linux")) {
        unsafe {
            let lib = libloading::Library::new(&x86_64).unwrap();
            let probe: libloading::Symbol<extern "C" fn() -> i64> = lib.get(b"probe").unwrap();
            assert_eq!(probe(), 30);
        }
    }
    if let Some(out) = run_probe_aarch64(dir.path(), &aarch64) {
        assert_eq!(out, "30 30\n");
    }
}

#[test]
fn data_only_module_exports_aligned_weights() {
    let (x86_64, aarch64, _dir) = link_variant(Variant::NoCode, "weights");
    for path in [&x86_64, &aarch64] {
        let executable = load_segments(path)
            .iter()
            .filter(|(flags, ..)| flags & elf::PF_X != 0)
            .count();
        assert_eq!(executable, 0, "no code, no executable segment");
    }
    if cfg!(all(target_arch = "x86_64", target_os = "linux")) {
        unsafe {
            let lib = libloading::Library::new(&x86_64).unwrap();
            let weights: libloading::Symbol<*const [u8; 256]> = lib.get(b"weights").unwrap();
            assert_eq!(*weights as usize % 64, 0);
            let expected: Vec<u8> = (0..=255).collect();
            let actual: &[u8; 256] = &*(*weights);
            assert_eq!(&actual[..], &expected[..]);
        }
    }
}

#[test]
fn rustc_links_against_static_archive() {
    if !cfg!(all(target_arch = "x86_64", target_os = "linux")) {
        return;
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    if !tools::require_tool(&rustc) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let archive = write_static_archive(
        "nnc_test_model.o",
        &build_test_object(X86_64, Build::DEFAULT),
    )
    .unwrap();
    std::fs::write(dir.path().join("libnnctest.a"), archive).unwrap();
    let main = dir.path().join("main.rs");
    std::fs::write(
        &main,
        r#"
extern "C" {
    fn nnc_test_compute(x: f32, i: i64) -> f32;
    fn nnc_test_call_count() -> i64;
}
fn main() {
    unsafe {
        assert_eq!(nnc_test_compute(2.0, 3), 8.5);
        assert_eq!(nnc_test_call_count(), 101);
    }
    println!("ok");
}
"#,
    )
    .unwrap();
    let exe = dir.path().join("prog_rust");
    tools::run(
        Command::new(&rustc)
            .args(["--edition", "2021", "-O"])
            .arg(&main)
            .arg("-o")
            .arg(&exe)
            .arg("-L")
            .arg(dir.path())
            .args(["-l", "static=nnctest"]),
    );
    assert_eq!(tools::run_stdout(&mut Command::new(&exe)), "ok\n");
}

#[test]
fn absurd_section_sizes_are_rejected_without_panicking() {
    // A .bss claiming 2^50 bytes: representable in ELF, not in any address space.
    use object::write::{Object, StandardSection, Symbol, SymbolSection};
    use object::{BinaryFormat, Endianness, SymbolFlags, SymbolKind, SymbolScope};
    let mut obj = Object::new(
        BinaryFormat::Elf,
        object::Architecture::X86_64,
        Endianness::Little,
    );
    let bss = obj.section_id(StandardSection::UninitializedData);
    let offset = obj.append_section_bss(bss, 1 << 50, 8);
    obj.add_symbol(Symbol {
        name: b"huge".to_vec(),
        value: offset,
        size: 1 << 50,
        kind: SymbolKind::Data,
        scope: SymbolScope::Dynamic,
        weak: false,
        section: SymbolSection::Section(bss),
        flags: SymbolFlags::None,
    });
    let object = obj.write().unwrap();
    assert!(matches!(
        link_shared_object(&object, "libx.so"),
        Err(ArtifactError::TooLarge(_))
    ));
}

/// A library exporting `count` 8-byte constants `export_<i>` holding `i`.
fn build_many_exports(triple: &str, count: u64) -> Vec<u8> {
    let mut module = new_module(triple, false);
    for i in 0..count {
        let name = format!("export_{i}");
        define_data(
            &mut module,
            &name,
            Linkage::Export,
            false,
            8,
            i.to_le_bytes().to_vec(),
        );
    }
    module.finish().emit().unwrap()
}

#[test]
fn hash_tables_find_every_export() {
    use object::read::elf::{SectionHeader as _, VersionTable};
    const COUNT: u64 = 150;
    for triple in [X86_64, AARCH64] {
        let so = link_shared_object(&build_many_exports(triple, COUNT), "libmany.so").unwrap();
        let data = &*so;
        let file = ElfFile64::<object::Endianness>::parse(data).unwrap();
        let endian = file.endian();
        let sections = file.elf_section_table();
        let dynsyms = sections.symbols(endian, data, elf::SHT_DYNSYM).unwrap();
        let versions = VersionTable::default();
        let section = |sh_type| {
            sections
                .iter()
                .find(|s| s.sh_type(endian) == sh_type)
                .unwrap()
        };
        let (sysv, _) = section(elf::SHT_HASH).hash(endian, data).unwrap().unwrap();
        let (gnu, _) = section(elf::SHT_GNU_HASH)
            .gnu_hash(endian, data)
            .unwrap()
            .unwrap();
        let lookup = |name: &str| {
            let name = name.as_bytes();
            let by_sysv = sysv.find(endian, name, elf::hash(name), None, &dynsyms, &versions);
            let by_gnu = gnu.find(endian, name, elf::gnu_hash(name), None, &dynsyms, &versions);
            assert_eq!(by_sysv.map(|s| s.0), by_gnu.map(|s| s.0), "{triple}");
            by_gnu.map(|(_, sym)| sym.st_value.get(endian))
        };
        for i in 0..COUNT {
            assert!(
                lookup(&format!("export_{i}")).is_some(),
                "{triple}: export_{i}"
            );
        }
        assert_eq!(lookup("not_exported"), None);
    }

    if cfg!(all(target_arch = "x86_64", target_os = "linux")) {
        let dir = tempfile::tempdir().unwrap();
        let so = link_shared_object(&build_many_exports(X86_64, COUNT), "libmany.so").unwrap();
        let path = write_library(dir.path(), "libmany.so", &so);
        unsafe {
            let lib = libloading::Library::new(&path).unwrap();
            for i in 0..COUNT {
                let name = format!("export_{i}");
                let value: libloading::Symbol<*const u64> = lib.get(name.as_bytes()).unwrap();
                assert_eq!(**value, i);
            }
        }
    }
}
