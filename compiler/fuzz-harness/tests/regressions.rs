//! Replays every reproducer in compiler/fuzz/regressions/TARGET/ through the code the
//! fuzz target TARGET runs, so what the fuzzers found stays fixed on stable Rust
//! without cargo-fuzz. A reproducer is the raw fuzz input libFuzzer saved (its file
//! name says what it found); each must now run to the end without a panic.

use std::path::PathBuf;

fn replay(target: &str, case: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/regressions")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.is_file() && p.file_name().is_some_and(|n| n != ".gitkeep"))
        .collect();
    files.sort();
    for file in files {
        let data = std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        eprintln!("replaying {}", file.display());
        case(&data);
    }
}

#[test]
fn import_reproducers_import_or_are_refused() {
    replay("import", nnc_fuzz_harness::import_bytes);
}

#[test]
fn compile_reproducers_compile_or_are_refused() {
    replay("compile", nnc_fuzz_harness::compile_case);
}

#[test]
fn differential_reproducers_match_the_interpreter() {
    replay("differential", nnc_fuzz_harness::differential_case);
}

/// The structure-aware targets over a fixed sweep of inputs: a smoke test of the
/// generator and of what the fuzzers run, on stable.
#[test]
fn random_models_compile_and_match_the_interpreter() {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..40 {
        let data: Vec<u8> = (0..256)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 56) as u8
            })
            .collect();
        nnc_fuzz_harness::compile_case(&data);
        nnc_fuzz_harness::differential_case(&data);
    }
}

/// The dims target over a sweep of inputs: random models with their inputs' axis 0 set
/// at run time, wherever import proves it batch-like, match the interpreter at 2 and 3
/// samples. Counts the accepted models so a generator change that stops producing any
/// is noticed.
#[test]
fn random_models_with_a_batch_dim_match_the_interpreter() {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut compared = 0;
    for _ in 0..300 {
        let data: Vec<u8> = (0..256)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 56) as u8
            })
            .collect();
        compared += usize::from(nnc_fuzz_harness::dims_case(&data));
    }
    eprintln!("{compared} of 300 random models ran with a batch dim");
    assert!(
        compared >= 30,
        "only {compared} of 300 random models ran with a batch dim"
    );
}

/// The importer's axis checks on scalars (found by the compile target): an op that
/// takes an axis's size refuses a rank-0 operand with one error naming the file and
/// the node, instead of indexing its empty shape.
#[test]
fn ops_that_take_an_axis_size_refuse_scalars() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/import");
    for (file, op) in [
        ("slice-of-a-scalar.onnx", "Slice"),
        ("squeeze-of-a-scalar-axis-0.onnx", "Squeeze"),
        ("topk-of-a-scalar.onnx", "TopK"),
        ("blocked-quantize-of-a-scalar.onnx", "QuantizeLinear"),
        ("blocked-dequantize-of-a-scalar.onnx", "DequantizeLinear"),
    ] {
        let path = dir.join(file);
        let err = match nnc::onnx::load_model(&path, &Default::default()) {
            Ok(_) => panic!("{file}: imported"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(file), "{file}: {err}");
        assert!(err.contains(&format!("({op})")), "{file}: {err}");
        assert!(
            err.contains("scalar (rank 0)") || err.contains("must have rank ≥ 1"),
            "{file}: {err}"
        );
    }
}
