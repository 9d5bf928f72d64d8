//! Artifacts from the CLI: a .so made with no C toolchain on PATH (no DT_NEEDED, loads
//! with dlopen), a relocatable .o linked by a C compiler, and models whose weights live
//! in external data files.

#[path = "../../tests/common/models.rs"]
mod models;
#[path = "../../tests/common/tools.rs"]
mod tools;

use std::path::Path;
use std::process::Command;

use object::read::elf::{Dyn, ElfFile64, FileHeader};
use object::{elf, Endianness};

fn nnc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nnc"))
}

/// Runs `cmd` and asserts it succeeded, showing its stderr otherwise.
fn run_ok(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn dynamic_tags(so: &[u8]) -> Vec<i64> {
    let file = ElfFile64::<Endianness>::parse(so).expect("valid ELF");
    let endian = file.endian();
    let sections = file.elf_header().sections(endian, so).unwrap();
    let (dynamic, _) = sections
        .dynamic(endian, so)
        .unwrap()
        .expect("a dynamic section");
    dynamic.iter().map(|d| d.d_tag(endian)).collect()
}

#[test]
fn shared_object_needs_no_toolchain_and_has_no_dt_needed() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("cnn.onnx");
    std::fs::write(&model, models::cnn(3).0).unwrap();
    let empty_path = dir.path().join("empty-bin");
    std::fs::create_dir(&empty_path).unwrap();
    let so = dir.path().join("libcnn.so");
    run_ok(
        nnc()
            .env("PATH", &empty_path)
            .arg("compile")
            .arg(&model)
            .arg("-o")
            .arg(&so),
    );
    let bytes = std::fs::read(&so).unwrap();
    let tags = dynamic_tags(&bytes);
    assert!(
        !tags.contains(&elf::DT_NEEDED),
        "the .so has DT_NEEDED entries"
    );
    assert!(tags.contains(&elf::DT_SONAME));
    let lib = unsafe { libloading::Library::new(&so) }.expect("dlopen");
    for sym in [&b"infer\0"[..], b"infer_with_workspace\0", b"model_info\0"] {
        assert!(
            unsafe { lib.get::<*const u8>(sym) }.is_ok(),
            "missing {}",
            String::from_utf8_lossy(sym)
        );
    }
    // The aarch64 library is made the same way.
    let so_a64 = dir.path().join("libcnn_a64.so");
    run_ok(
        nnc()
            .env("PATH", &empty_path)
            .args(["compile", "--target", "aarch64"])
            .arg(&model)
            .arg("-o")
            .arg(&so_a64),
    );
    let bytes = std::fs::read(&so_a64).unwrap();
    assert!(!dynamic_tags(&bytes).contains(&elf::DT_NEEDED));
    assert_eq!(u16::from_le_bytes([bytes[18], bytes[19]]), elf::EM_AARCH64);
}

#[test]
fn object_file_links_with_a_c_compiler() {
    if !tools::require_tool("cc") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.onnx");
    std::fs::write(&model, models::elementwise(5).0).unwrap();
    let obj = dir.path().join("m.o");
    run_ok(
        nnc()
            .arg("compile")
            .arg(&model)
            .arg("-o")
            .arg(&obj)
            .args(["--name", "elt"]),
    );
    let main = dir.path().join("main.c");
    std::fs::write(
        &main,
        "#include \"m.h\"\n#include <stdio.h>\nint main(void){ const nnc_model_info *i = elt_model_info();\n\
         static float in[NNC_ELT_INPUT_0_NUMEL], out[NNC_ELT_OUTPUT_0_NUMEL]; const void *ins[]={in}; void *outs[]={out};\n\
         int rc = elt_infer(ins, outs); printf(\"%u %u %d\\n\", i->num_inputs, i->num_outputs, rc); return rc; }\n",
    )
    .unwrap();
    let exe = dir.path().join("main");
    let cc = Command::new("cc")
        .arg("-std=c11")
        .arg("-Wall")
        .arg("-Werror")
        .arg(&main)
        .arg(&obj)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    assert_eq!(String::from_utf8_lossy(&run.stdout).trim(), "1 1 0");
}

/// Moves every initializer's bytes into `weights.bin` beside the model.
fn externalize(model_bytes: Vec<u8>, dir: &Path, location: &str) -> Vec<u8> {
    use nnc::onnx::proto::{ModelProto, StringStringEntryProto, DATA_LOCATION_EXTERNAL};
    use prost::Message;
    let mut m = ModelProto::decode(model_bytes.as_slice()).unwrap();
    let mut blob = vec![];
    for t in &mut m.graph.as_mut().unwrap().initializer {
        if t.raw_data.is_empty() {
            continue;
        }
        let offset = blob.len();
        blob.extend(std::mem::take(&mut t.raw_data));
        t.data_location = DATA_LOCATION_EXTERNAL;
        let kv = |k: &str, v: String| StringStringEntryProto {
            key: k.into(),
            value: v,
        };
        t.external_data = vec![
            kv("location", location.into()),
            kv("offset", offset.to_string()),
            kv("length", (blob.len() - offset).to_string()),
        ];
    }
    std::fs::write(dir.join("weights.bin"), blob).unwrap();
    m.encode_to_vec()
}

#[test]
fn external_data_is_read_from_the_model_folder_only() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, shape) = models::cnn(2);
    let model = dir.path().join("ext.onnx");
    std::fs::write(
        &model,
        externalize(bytes.clone(), dir.path(), "weights.bin"),
    )
    .unwrap();
    let so = dir.path().join("libext.so");
    run_ok(nnc().arg("compile").arg(&model).arg("-o").arg(&so));

    // The same weights as the embedded model: the two libraries' outputs agree exactly.
    let embedded = dir.path().join("emb.onnx");
    std::fs::write(&embedded, bytes).unwrap();
    let so2 = dir.path().join("libemb.so");
    assert!(nnc()
        .arg("compile")
        .arg(&embedded)
        .arg("-o")
        .arg(&so2)
        .status()
        .unwrap()
        .success());
    let input: Vec<f32> = models::Rng::new(9).vec(shape.iter().product(), 1.0);
    let run = |path: &Path| -> Vec<f32> {
        type InferFn = unsafe extern "C" fn(
            *const *const std::ffi::c_void,
            *const *mut std::ffi::c_void,
        ) -> i32;
        let lib = unsafe { libloading::Library::new(path) }.unwrap();
        let infer = unsafe { lib.get::<InferFn>(b"infer\0") }.unwrap();
        let mut out = vec![0f32; 10];
        let ins = [input.as_ptr().cast()];
        let outs = [out.as_mut_ptr().cast()];
        assert_eq!(unsafe { infer(ins.as_ptr(), outs.as_ptr()) }, 0);
        out
    };
    assert_eq!(run(&so), run(&so2));

    for bad in ["/etc/passwd", "../weights.bin"] {
        let (bytes, _) = models::cnn(2);
        let evil = dir.path().join("evil.onnx");
        std::fs::write(&evil, externalize(bytes, dir.path(), bad)).unwrap();
        let out = nnc()
            .arg("compile")
            .arg(&evil)
            .arg("-o")
            .arg(dir.path().join("libevil.so"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("must be relative and stay inside the model's folder"),
            "{stderr}"
        );
    }
}

/// Conv → BatchNormalization → Relu → Conv → BatchNormalization → Add(x) → Relu: a
/// ResNet block, whose BN, Relu and Add the passes fold into the convs.
fn residual_block(seed: u64) -> Vec<u8> {
    let mut m = models::ModelBuilder::new(seed);
    let (c, hw) = (8 + 4 * seed as usize, 12);
    let x = m.input("x", &[1, c, hw, hw]);
    let conv_bn = |m: &mut models::ModelBuilder, x: &str| {
        let w = m.weight(&[c, c, 3, 3], 0.2);
        let y = m.node(
            "Conv",
            &[x, &w],
            vec![("pads", models::Attr::Ints(vec![1; 4]))],
        );
        let (scale, bias, mean) = (
            m.weight(&[c], 1.0),
            m.weight(&[c], 1.0),
            m.weight(&[c], 1.0),
        );
        let var = m.float_init(&[c], vec![1.5; c]);
        m.node(
            "BatchNormalization",
            &[&y, &scale, &bias, &mean, &var],
            vec![],
        )
    };
    let y = conv_bn(&mut m, &x);
    let y = m.node("Relu", &[&y], vec![]);
    let y = conv_bn(&mut m, &y);
    let y = m.node("Add", &[&y, &x], vec![]);
    let y = m.node("Relu", &[&y], vec![]);
    m.output(&y);
    m.encode()
}

/// `nnc inspect` reports the memory plan of the graph `nnc compile` lowers (after
/// fusion and views), so its arena is the workspace the header declares, and it stays
/// within 1.10× the live-bytes lower bound. Before, inspect planned the imported graph,
/// whose unfused intermediates gave ResNet-18 8.6 MB against the compiled 7.8 MB.
#[test]
fn inspect_reports_the_compiled_memory_plan() {
    let dir = tempfile::tempdir().unwrap();
    for seed in 0..3 {
        let model = residual_block(seed);
        let path = dir.path().join(format!("cnn{seed}.onnx"));
        std::fs::write(&path, model).unwrap();
        let lib = dir.path().join(format!("libcnn{seed}.so"));
        run_ok(nnc().arg("compile").arg(&path).arg("-o").arg(&lib));
        let header = std::fs::read_to_string(lib.with_extension("h")).unwrap();
        let workspace: usize = header
            .lines()
            .find_map(|l| {
                let rest = l.strip_prefix("#define ")?;
                let (name, value) = rest.split_once(' ')?;
                name.ends_with("_WORKSPACE_SIZE")
                    .then(|| value.trim().parse().unwrap())
            })
            .expect("the header defines the workspace size");
        let out = nnc().arg("inspect").arg(&path).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let numbers: Vec<usize> = stdout
            .lines()
            .find(|l| l.starts_with("arena: "))
            .unwrap_or_else(|| panic!("no arena line: {stdout}"))
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|w| w.parse().ok())
            .collect();
        let (arena, lower_bound) = (numbers[0], numbers[1]);
        assert_eq!(arena, workspace, "seed {seed}: {stdout}");
        assert!(
            lower_bound <= arena && arena as f64 <= 1.10 * lower_bound as f64,
            "seed {seed}: {stdout}"
        );
    }
}

/// `nnc inspect` says which layers `--quantize int8` puts on integer kernels and which
/// nodes stay in float32.
#[test]
fn inspect_lists_the_int8_kernels_and_the_float32_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("cnn.onnx");
    std::fs::write(&model, models::cnn(3).0).unwrap();
    let out = nnc().arg("inspect").arg(&model).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    // cnn: two dense convs and a depthwise one (fused kernels) and a Gemm.
    assert!(
        stdout.contains("--quantize int8 puts 4 layers on integer kernels: Conv -> ConvU8S8 3, Gemm -> MatMulInteger 1"),
        "{stdout}"
    );
    let float_line = stdout
        .lines()
        .find(|l| l.contains("float32 (no integer kernel"))
        .unwrap_or_else(|| panic!("{stdout}"));
    for op in ["Pool", "Softmax"] {
        assert!(
            stdout
                .lines()
                .any(|l| l.trim_start().starts_with("node '") && l.ends_with(&format!("({op})"))),
            "{op} not listed: {stdout}"
        );
    }
    assert!(!float_line.contains(" 0 nodes"), "{stdout}");
}

/// `--quantize fp16` makes a smaller library that still loads, and the flag's misuse is
/// refused with one clear error and no output: `--quantize int8` without
/// `--calibration`, `--calibration` without int8, an unknown value.
#[test]
fn quantize_fp16_is_smaller_and_misuse_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("cnn.onnx");
    std::fs::write(&model, models::cnn(3).0).unwrap();
    let (full, half) = (dir.path().join("libf32.so"), dir.path().join("libf16.so"));
    // One variant each: on a model this small, the code of a multi-versioned library's
    // variants (each with its own FP16 expansion) outweighs the halved weights.
    run_ok(
        nnc()
            .args(["compile", "--cpu", "native"])
            .arg(&model)
            .arg("-o")
            .arg(&full),
    );
    run_ok(
        nnc()
            .args(["compile", "--cpu", "native", "--quantize", "fp16"])
            .arg(&model)
            .arg("-o")
            .arg(&half),
    );
    let size = |p: &Path| std::fs::metadata(p).unwrap().len();
    assert!(
        size(&half) < size(&full),
        "{} vs {}",
        size(&half),
        size(&full)
    );
    let lib = unsafe { libloading::Library::new(&half) }.expect("dlopen");
    assert!(unsafe { lib.get::<*const u8>(b"infer\0") }.is_ok());
    for (args, needle) in [
        (&["--quantize", "int8"][..], "int8 needs --calibration"),
        (
            &["--calibration", "x.npy"][..],
            "--calibration is only for --quantize int8",
        ),
        (&["--quantize", "int4"][..], "int4"),
    ] {
        let out_path = dir.path().join("refused.so");
        let out = nnc()
            .arg("compile")
            .args(args)
            .arg(&model)
            .arg("-o")
            .arg(&out_path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(!out_path.exists(), "{args:?} left an output file");
    }
}
