//! The loader against `fake_bounded.c`, a hand-written model library (NonZero with a
//! dim N = 1..6) built here with `cc` in the ABI 5 layout and the ABI 4 one; and the
//! C++ wrapper `examples/cpp/nnc.hpp` against the same library. Each test is skipped,
//! with a message, when its compiler is missing.
#![cfg(feature = "loader")]

use nnc_runtime_abi::loader::{BoundedAxis, Error, Library, Tensor, TensorMut};
use nnc_runtime_abi::ThreadPool;
use std::path::{Path, PathBuf};
use std::process::Command;

const INCLUDE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/include");
const FAKE_C: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fake_bounded.c");
const CPP_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/cpp");

/// A fresh scratch directory for one test, under cargo's per-target tmp dir.
fn scratch_dir(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("nnc-loader-{test}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn have(compiler: &str) -> bool {
    Command::new(compiler).arg("--version").output().is_ok()
}

/// Runs `compiler args…`, panicking with its diagnostics if it fails.
fn compile(compiler: &str, args: &[&str]) {
    let out = Command::new(compiler).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{compiler} {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The fake model built with the `-D` knobs `defines`, as a shared library in a
/// scratch directory named `test`; `None` (the test is skipped) without `cc`.
fn fake_library(test: &str, defines: &[&str]) -> Option<PathBuf> {
    if !have("cc") {
        println!("skipped: no `cc` on PATH to build the fake model");
        return None;
    }
    let lib = scratch_dir(test).join("libfake.so");
    let mut args = vec![
        "-std=c11",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-pedantic",
        "-shared",
        "-fPIC",
        "-I",
        INCLUDE_DIR,
    ];
    args.extend(defines);
    args.extend(["-o", lib.to_str().unwrap(), FAKE_C]);
    compile("cc", &args);
    Some(lib)
}

/// What one run gives: the reported shapes, all of `indices`' buffer, and `count`.
type Outcome = (Vec<Vec<usize>>, Vec<i64>, i64);

/// Runs `x` for N = `x.len()` with `run_shaped`.
fn run_shaped(lib: &Library, pool: Option<&ThreadPool>, x: &[f32]) -> Result<Outcome, Error> {
    let mut indices = vec![-7i64; x.len()];
    let mut count = [0i64];
    let mut workspace = match pool {
        Some(p) => lib.workspace_for(p),
        None => lib.workspace(),
    };
    let shapes = lib.run_shaped(
        pool,
        &mut workspace,
        &[x.len()],
        &[Tensor::from(x)],
        &mut [
            TensorMut::from(&mut indices[..]),
            TensorMut::from(&mut count[..]),
        ],
    )?;
    Ok((shapes, indices, count[0]))
}

#[test]
fn abi5_bounded_axes_are_read_and_their_extents_reported() {
    let Some(path) = fake_library("abi5", &[]) else {
        return;
    };
    let lib = Library::open(&path, None).unwrap();
    assert_eq!(lib.abi_version(), 5);
    assert_eq!(lib.bounded_axes(), &[BoundedAxis { output: 0, axis: 1 }]);
    assert_eq!(lib.outputs()[0].shape, vec![1, 6]);

    let pool = ThreadPool::new(2).unwrap();
    for pool in [None, Some(&pool)] {
        let x = [0.0, 1.5, 0.0, -2.0, 3.0, 0.0];
        let (shapes, indices, count) = run_shaped(&lib, pool, &x).unwrap();
        assert_eq!(shapes, vec![vec![1, 3], vec![]]);
        assert_eq!((&indices[..3], count), (&[1, 3, 4][..], 3));

        // N = 4: the bound is 4, the extent 2.
        let (shapes, indices, _) = run_shaped(&lib, pool, &x[..4]).unwrap();
        assert_eq!(shapes, vec![vec![1, 2], vec![]]);
        assert_eq!(&indices[..2], &[1, 3]);

        // Nothing nonzero: an empty extent is an extent.
        let (shapes, _, count) = run_shaped(&lib, pool, &[0.0; 5]).unwrap();
        assert_eq!((shapes, count), (vec![vec![1, 0], vec![]], 0));
    }

    // run_dims is unchanged: it checks the same buffers and asks for no shapes.
    let x = [1.0f32, 0.0];
    let (mut indices, mut count) = ([0i64; 2], [0i64]);
    lib.run_dims(
        None,
        &mut lib.workspace(),
        &[2],
        &[Tensor::from(&x[..])],
        &mut [
            TensorMut::from(&mut indices[..]),
            TensorMut::from(&mut count[..]),
        ],
    )
    .unwrap();
    assert_eq!((indices[0], count[0]), (0, 1));

    // The buffer must hold the bound for the run's dims, whatever the extent.
    let mut short = [0i64; 1];
    let e = lib
        .run_shaped(
            None,
            &mut lib.workspace(),
            &[2],
            &[Tensor::from(&x[..])],
            &mut [
                TensorMut::from(&mut short[..]),
                TensorMut::from(&mut count[..]),
            ],
        )
        .unwrap_err();
    assert!(
        matches!(&e, Error::Mismatch(m) if m.contains("needs 16 bytes")),
        "{e}"
    );
}

/// A library of ABI 4 has a 72-byte `nnc_model_info` (the fake's ends where an
/// inaccessible page starts, so reading the ABI 5 fields would crash): it loads with
/// no bounded axes, and `run_shaped` returns the shapes `shapes_for` gives.
#[test]
fn abi4_library_still_loads_and_runs_shaped() {
    let Some(path) = fake_library("abi4", &["-DFAKE_ABI=4"]) else {
        return;
    };
    let lib = Library::open(&path, None).unwrap();
    assert_eq!(lib.abi_version(), 4);
    assert!(lib.bounded_axes().is_empty());
    assert_eq!(lib.dims().len(), 1);
    let (shapes, indices, count) = run_shaped(&lib, None, &[0.0, 2.0, 0.0, 4.0]).unwrap();
    assert_eq!(shapes, vec![vec![1, 4], vec![]]);
    assert_eq!((&indices[..2], count), (&[1, 3][..], 2));
}

#[test]
fn reported_shapes_outside_the_bounds_are_errors() {
    // (knob, why): each run reports a shape model_info rules out.
    let cases: [(&[&str], &str); 5] = [
        (
            &["-DFAKE_REPORT=5"],
            "5 for axis 1 of output 'indices', which has at most 4",
        ),
        (
            &["-DFAKE_REPORT=-1"],
            "-1 for axis 1 of output 'indices', which has at most 4",
        ),
        (
            &["-DFAKE_REPORT_FIXED=2"],
            "2 for axis 0 of output 'indices', which has exactly 1",
        ),
        (
            &["-DFAKE_REPORT_FIXED=0"],
            "0 for axis 0 of output 'indices', which has exactly 1",
        ),
        (&["-DFAKE_NO_REPORT"], "-1 for axis 0 of output 'indices'"),
    ];
    for (k, (defines, message)) in cases.iter().enumerate() {
        let Some(path) = fake_library(&format!("report{k}"), defines) else {
            return;
        };
        let lib = Library::open(&path, None).unwrap();
        if k == 0 {
            // The bound is the run's: 5 is within 6 for N = 6, but not within 4 for N = 4.
            assert!(run_shaped(&lib, None, &[1.0; 6]).is_ok());
        }
        let e = run_shaped(&lib, None, &[1.0; 4]).unwrap_err();
        assert!(
            matches!(&e, Error::BadShapes { message: m, .. } if m.contains(message)),
            "{defines:?}: {e}"
        );
    }
}

#[test]
fn bounded_axes_naming_no_output_axis_are_refused_at_open() {
    let cases: [&[&str]; 2] = [&["-DFAKE_BOUNDED_AXIS=2"], &["-DFAKE_BOUNDED_OUTPUT=2"]];
    for (k, defines) in cases.iter().enumerate() {
        let Some(path) = fake_library(&format!("bad-axis{k}"), defines) else {
            return;
        };
        let e = Library::open(&path, None).err().expect("opened");
        assert!(
            matches!(&e, Error::BadInfo { message, .. } if message.contains("names no output axis")),
            "{defines:?}: {e}"
        );
    }
    // Only `run` reports the extents.
    let Some(path) = fake_library("no-run", &["-DFAKE_NO_RUN"]) else {
        return;
    };
    let e = Library::open(&path, None).err().expect("opened");
    assert!(
        matches!(&e, Error::BadInfo { message, .. } if message.contains("bounded output axes without `run`")),
        "{e}"
    );
}

/// nnc.hpp's `run_shaped` and `bounded_axes` against the fake, linked directly.
#[test]
fn cpp_wrapper_reports_bounded_shapes() {
    if !have("cc") || !have("c++") {
        println!("skipped: no `cc` or `c++` on PATH");
        return;
    }
    let dir = scratch_dir("cpp");
    let src = dir.join("main.cpp");
    std::fs::write(&src, CPP_PROBE).unwrap();
    // The probe linked with the fake built with `defines`: its output.
    let probe = |name: &str, defines: &[&str]| {
        let (obj, exe) = (dir.join(format!("{name}.o")), dir.join(name));
        let mut args = vec!["-std=c11", "-c", "-I", INCLUDE_DIR];
        args.extend(defines);
        args.extend(["-o", obj.to_str().unwrap(), FAKE_C]);
        compile("cc", &args);
        compile(
            "c++",
            &[
                "-std=c++17",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-pedantic",
                "-I",
                INCLUDE_DIR,
                "-I",
                CPP_DIR,
                "-o",
                exe.to_str().unwrap(),
                src.to_str().unwrap(),
                obj.to_str().unwrap(),
            ],
        );
        Command::new(&exe).output().unwrap()
    };
    let out = probe("good", &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "bounded 0.1\n\
         1x3 : 1 3 4 count 3\n\
         1x2 : count 2\n\
         refused: infer cannot report\n"
    );
    // An extent beyond the bound is an error, not a shape.
    let out = probe("bad", &["-DFAKE_REPORT=7"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(
            "nnc error -3: output 0 \"indices\": run reported 7 for axis 1, which has at most 6"
        ),
        "{stderr}"
    );
}

const CPP_PROBE: &str = r#"
#include <cstdio>
#include <vector>
#include "nnc.h"
#include "nnc.hpp"

NNC_DECLARE_MODEL();

static void print_shape(const std::vector<int64_t> &shape) {
    for (size_t i = 0; i < shape.size(); i++) std::printf(i ? "x%lld" : "%lld", (long long)shape[i]);
}

int main() {
    try {
        nnc::Model model(run, workspace_size, model_info, nullptr);
        for (const nnc_bounded_axis &b : model.bounded_axes())
            std::printf("bounded %u.%u\n", b.output, b.axis);

        std::vector<float> x{0, 1.5f, 0, -2, 3, 0};
        std::vector<int64_t> indices(6), count(1);
        // Every dim at its maximum.
        std::vector<std::vector<int64_t>> shapes = model.run_shaped({x}, {indices, count});
        print_shape(shapes[0]);
        std::printf(" :");
        for (int64_t i = 0; i < shapes[0][1]; i++) std::printf(" %lld", (long long)indices[i]);
        std::printf(" count %lld\n", (long long)count[0]);

        // N = 4.
        std::vector<float> x4(x.begin(), x.begin() + 4);
        std::vector<int64_t> indices4(4);
        shapes = model.run_shaped({4}, {x4}, {indices4, count});
        print_shape(shapes[0]);
        std::printf(" : count %lld\n", (long long)count[0]);

        // infer cannot report a bounded extent.
        nnc::Model plain(infer_with_workspace, model_info);
        try {
            plain.run_shaped({x}, {indices, count});
            return 1;
        } catch (const nnc::Error &e) {
            if (e.code() != nnc::ERR_INVALID_ARGUMENT) return 1;
            std::printf("refused: infer cannot report\n");
        }
    } catch (const nnc::Error &e) {
        std::fprintf(stderr, "nnc error %d: %s\n", e.code(), e.what());
        return 1;
    }
    return 0;
}
"#;
