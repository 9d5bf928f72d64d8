#!/usr/bin/env bash
# The project's test command: builds everything and runs every test, including the
# ONNX node suite (generated from the onnx pip package) and the aarch64 tests under
# qemu. Tools a machine may lack make their tests print SKIP; with
# NNC_TEST_REQUIRE_TOOLS=1 (as CI sets) a missing tool fails instead.
set -uo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace || exit 1
# nnc-benches has no tests; leaving it out keeps the dev-dependency tract-onnx from
# unifying its features into the shared dependencies (which would build a second copy of
# cranelift, prost, ndarray and nnc for the tests). tract itself is never built by
# `cargo test` either way.
cargo test --release --no-fail-fast --workspace --exclude nnc-benches 2>&1 | tee target/test-output.txt
status=${PIPESTATUS[0]}
# nnc-build's `quantize_int8` is behind its opt-in `int8` feature, which the workspace
# run leaves off (and tests that way); its calibrating tests run here.
cargo test --release -p nnc-build --features int8 2>&1 | tee -a target/test-output.txt
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
# The C harness that runs compiled models on other targets, natively and under qemu.
tests/harness/selftest.sh || status=1
exit "$status"
