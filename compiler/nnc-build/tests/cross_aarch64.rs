//! The build helper under cargo's environment for a cross build
//! (`TARGET=aarch64-unknown-linux-gnu`): it must write an aarch64 archive that links
//! into a C program with aarch64-linux-gnu-gcc and gives the right numbers under qemu.
//! (This machine cannot build Rust for aarch64, so that is how the cross path is
//! checked.) One test per binary: it sets process environment variables.

#[path = "../../tests/common/tools.rs"]
mod tools;

use std::path::Path;
use std::process::Command;

const PROGRAM: &str = r#"
#include <stdio.h>
#include "libtiny.h"
int main(void) {
    float image[NNC_TINY_INPUT_0_NUMEL], probs[NNC_TINY_OUTPUT_0_NUMEL];
    const void *in[] = {image};
    void *out[] = {probs};
    for (int i = 0; i < NNC_TINY_INPUT_0_NUMEL; i++) image[i] = (float)i / 64.0f;
    if (tiny_infer(in, out) != NNC_OK) return 1;
    for (int i = 0; i < NNC_TINY_OUTPUT_0_NUMEL; i++) printf(i ? " %.6f" : "%.6f", probs[i]);
    printf("\n");
    return 0;
}
"#;

#[test]
fn a_cross_build_for_aarch64_writes_an_archive_that_runs_under_qemu() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = tempfile::tempdir().unwrap();
    // What cargo sets for a build script of a crate built with
    // `--target aarch64-unknown-linux-gnu`.
    // SAFETY (edition 2021: safe fn): the only test in this binary sets them.
    std::env::set_var("TARGET", "aarch64-unknown-linux-gnu");
    std::env::set_var("OUT_DIR", dir.path());
    std::env::set_var("PROFILE", "release");
    std::env::set_var("CARGO_CFG_TARGET_FEATURE", "neon,dotprod");
    let artifacts = nnc_build::Model::new(root.join("examples/c/model.onnx"))
        .name("tiny")
        .try_compile()
        .expect("compiles");
    assert_eq!(artifacts.archive, dir.path().join("libtiny.a"));
    let bindings = std::fs::read_to_string(&artifacts.bindings).unwrap();
    assert!(bindings.contains("pub unsafe fn tiny_infer_with_workspace("));
    assert!(bindings.contains("aarch64-unknown-linux-gnu (cpu +dotprod"));

    if !tools::require_tools(&["readelf"]) {
        return;
    }
    let elf = tools::run(Command::new("readelf").arg("-h").arg(&artifacts.archive));
    let elf = String::from_utf8_lossy(&elf.stdout);
    assert!(elf.contains("AArch64"), "{elf}");

    if !tools::require_aarch64_toolchain() {
        return;
    }
    std::fs::write(dir.path().join("main.c"), PROGRAM).unwrap();
    let exe = dir.path().join("main");
    tools::run(
        Command::new("aarch64-linux-gnu-gcc")
            .args(["-O1", "-std=c11", "-Wall"])
            .arg("-I")
            .arg(dir.path())
            .arg(dir.path().join("main.c"))
            .arg(&artifacts.archive)
            .arg("-o")
            .arg(&exe)
            .arg("-lm"),
    );
    let out = tools::run(&mut tools::qemu_aarch64(&exe));
    let got: Vec<f32> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    let want: Vec<f32> = std::fs::read_to_string(root.join("examples/c/expected.txt"))
        .unwrap()
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(got.len(), want.len(), "{got:?}");
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-4, "{got:?} vs {want:?}");
    }
}
