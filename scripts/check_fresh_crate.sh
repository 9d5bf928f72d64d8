#!/usr/bin/env bash
# The issue-6 check "a fresh `cargo new` crate with the three lines builds and runs":
# makes a crate with `cargo new`, adds nnc-build (path dependency on this checkout) to
# [dependencies] (the macro only) and [build-dependencies] (the compiler), writes the
# build.rs and main.rs a user would, and runs it. Usage: scripts/check_fresh_crate.sh
# [CARGO_TARGET_DIR] (default: a fresh one under target/, so everything is built the
# way a new user's machine builds it).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
target="${1:-$repo/target/fresh-crate}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
cargo new -q --vcs none fresh
cd fresh
cp "$repo/examples/c/model.onnx" model.onnx
cat >> Cargo.toml <<TOML
nnc-build = { path = "$repo/compiler/nnc-build", default-features = false }

[build-dependencies]
nnc-build = { path = "$repo/compiler/nnc-build" }

[profile.release.build-override]
opt-level = 3
codegen-units = 16
TOML
cat > build.rs <<'RS'
fn main() {
    nnc_build::Model::new("model.onnx").name("tiny").compile();
}
RS
cat > src/main.rs <<'RS'
nnc_build::include_model!("tiny");

fn main() {
    let image: Vec<f32> = (0..64).map(|i| i as f32 / 64.0).collect();
    let inputs = tiny::Inputs::from_slices(&image).unwrap();
    let out = tiny::Workspace::new().infer(&inputs).unwrap();
    println!("{:?}", out.probs);
}
RS
# The same dependency versions as the repository.
cp "$repo/Cargo.lock" .
CARGO_TARGET_DIR="$target" cargo run -q --release
