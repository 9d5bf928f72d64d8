//! The guarantees the README's reliability section makes about compiled libraries:
//! rebuilds are byte-identical, the library imports nothing (so `infer` cannot call an
//! allocator or any other library), and concurrent `infer_with_workspace` calls with
//! distinct workspaces give exactly the results of serial calls.

use std::path::{Path, PathBuf};
use std::process::Command;

use nnc_runtime_abi::loader::{Library, Tensor, TensorMut};
use object::{Object, ObjectSymbol};

fn example_model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/c/model.onnx")
}

/// `nnc compile MODEL -o DIR/libm.so ARGS...`; returns the library's path.
fn compile(dir: &Path, args: &[&str]) -> PathBuf {
    let so = dir.join("libm.so");
    let out = Command::new(env!("CARGO_BIN_EXE_nnc"))
        .arg("compile")
        .arg(example_model())
        .arg("-o")
        .arg(&so)
        .args(args)
        .output()
        .expect("nnc runs");
    assert!(
        out.status.success(),
        "nnc compile {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    so
}

#[test]
fn rebuilds_are_byte_identical_for_every_target_and_weight_format() {
    let variants: &[&[&str]] = &[
        &["--cpu", "baseline"],
        &["--cpu", "x86-64-v3"],
        &["--cpu", "x86-64-v4+vnni"],
        &["--cpu", "x86-64-v3", "--quantize", "fp16"],
        &["--cpu", "x86-64-v3", "--index-checks", "clamp"],
        &["--target", "aarch64"],
        &["--target", "aarch64", "--cpu", "+i8mm"],
    ];
    for args in variants {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (so_a, so_b) = (compile(a.path(), args), compile(b.path(), args));
        assert!(
            std::fs::read(&so_a).unwrap() == std::fs::read(&so_b).unwrap(),
            "{args:?}: two compiles gave different libraries"
        );
        assert_eq!(
            std::fs::read(so_a.with_extension("h")).unwrap(),
            std::fs::read(so_b.with_extension("h")).unwrap(),
            "{args:?}: two compiles gave different headers"
        );
    }
}

#[test]
fn compiled_libraries_import_no_symbol_and_need_no_library() {
    for args in [&["--cpu", "x86-64-v3"][..], &["--target", "aarch64"][..]] {
        let dir = tempfile::tempdir().unwrap();
        let bytes = std::fs::read(compile(dir.path(), args)).unwrap();
        let file = object::File::parse(&*bytes).unwrap();
        let undefined: Vec<String> = file
            .dynamic_symbols()
            .filter(|s| s.is_undefined() && !s.name().unwrap_or("").is_empty())
            .map(|s| s.name().unwrap_or("?").to_string())
            .collect();
        assert!(
            undefined.is_empty(),
            "{args:?}: imports {undefined:?} (infer must not call into any library)"
        );
        let needed = file.imports().unwrap();
        assert!(
            needed.is_empty(),
            "{args:?}: imports {} symbols",
            needed.len()
        );
    }
}

#[test]
fn concurrent_calls_with_distinct_workspaces_match_serial_calls() {
    let dir = tempfile::tempdir().unwrap();
    let lib = Library::open(compile(dir.path(), &[]), None).unwrap();
    let n_in = lib.inputs()[0].element_count();
    let n_out = lib.outputs()[0].element_count();
    // Distinct inputs per call, so a call that read another's workspace would show.
    let inputs: Vec<Vec<f32>> = (0..16)
        .map(|k| {
            (0..n_in)
                .map(|i| ((i * 7 + k * 13) % 29) as f32 / 29.0 - 0.5)
                .collect()
        })
        .collect();
    let run = |ws: &mut nnc_runtime_abi::loader::Workspace, x: &[f32]| -> Vec<f32> {
        let mut y = vec![0f32; n_out];
        lib.run(ws, &[Tensor::from(x)], &mut [TensorMut::from(&mut y[..])])
            .unwrap();
        y
    };
    let mut ws = lib.workspace();
    let serial: Vec<Vec<f32>> = inputs.iter().map(|x| run(&mut ws, x)).collect();
    std::thread::scope(|s| {
        for t in 0..4 {
            let (inputs, serial, run, lib) = (&inputs, &serial, &run, &lib);
            s.spawn(move || {
                let mut ws = lib.workspace();
                for round in 0..200 {
                    let k = (t * 5 + round) % inputs.len();
                    let y = run(&mut ws, &inputs[k]);
                    assert!(
                        y.iter()
                            .zip(&serial[k])
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "thread {t}, round {round}: differs from the serial result"
                    );
                }
            });
        }
    });
}

/// Two compiles of different models to one `-o`, run at once, leave a library and a
/// header of the same model: the header's `WORKSPACE_SIZE` (which C code sizes its
/// buffers by) is the library's `model_info()->workspace_size`, in every round.
#[test]
fn concurrent_compiles_to_one_output_leave_a_matching_pair() {
    let dir = tempfile::tempdir().unwrap();
    let so = dir.path().join("libm.so");
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/c");
    let compile = |model: &str, extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_nnc"))
            .arg("compile")
            .arg(examples.join(model))
            .arg("-o")
            .arg(&so)
            .args(extra)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("nnc starts")
    };
    let mut seen = std::collections::BTreeSet::new();
    for round in 0..16 {
        let children = [
            compile("model.onnx", &[]),
            compile("batch_model.onnx", &["--dim", "N=4"]),
        ];
        for child in children {
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let header = std::fs::read_to_string(so.with_extension("h")).unwrap();
        let declared: usize = header
            .lines()
            .filter_map(|l| l.strip_prefix("#define "))
            .find_map(|l| l.split_once("_WORKSPACE_SIZE ").map(|(_, v)| v))
            .unwrap_or_else(|| panic!("no WORKSPACE_SIZE in:\n{header}"))
            .trim()
            .parse()
            .unwrap();
        // A private copy: dlopen of one path may hand back an earlier round's library.
        let copy = dir.path().join(format!("libround{round}.so"));
        std::fs::copy(&so, &copy).unwrap();
        let actual = Library::open(&copy, None).unwrap().workspace_size();
        assert_eq!(
            declared, actual,
            "round {round}: the header describes another library"
        );
        seen.insert(actual);
    }
    eprintln!("workspace sizes seen over 16 rounds: {seen:?}");
}
