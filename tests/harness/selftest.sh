#!/usr/bin/env bash
# Checks nnc_run end to end against fake_model.c, a hand-written model
# library, natively and (when the cross tools exist) on aarch64 under qemu.
# Usage: tests/harness/selftest.sh      (from anywhere; exits non-zero on failure)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
INCLUDE="$HERE/../../runtime-abi/include"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

CFLAGS=(-O1 -Wall -Wextra -Werror -std=c11 -I "$INCLUDE")
passed=0
failed=0

pass() { passed=$((passed + 1)); echo "  ok: $1"; }
flunk() { failed=$((failed + 1)); echo "  FAILED: $1"; }

# The test tensors, as raw little-endian float32 bytes.
# x = [1, 2, -3, 0.5]  ->  doubled = [2, 4, -6, 1], sum = 1
mkdir -p "$WORK/in" "$WORK/short" "$WORK/expected"
printf '\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\xc0\x00\x00\x00\x3f' >"$WORK/in/input_0.bin"
printf '\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\xc0' >"$WORK/short/input_0.bin"
printf '\x00\x00\x00\x40\x00\x00\x80\x40\x00\x00\xc0\xc0\x00\x00\x80\x3f' >"$WORK/expected/output_0.bin"
printf '\x00\x00\x80\x3f' >"$WORK/expected/output_1.bin"

# run_suite NAME CC [RUNNER...]: builds nnc_run and the fake models with CC
# and checks them, running each program through RUNNER (e.g. qemu).
run_suite() {
    local name="$1" cc="$2"
    shift 2
    local runner=("$@") dir="$WORK/$name"
    echo "$name ($cc${runner:+, via ${runner[*]}}):"
    mkdir -p "$dir"

    "$cc" "${CFLAGS[@]}" -pthread -o "$dir/nnc_run" "$HERE/nnc_run.c" -ldl
    # Default (empty) prefix with a 16-byte workspace; a named prefix with an
    # empty workspace; a model whose infer reports error code 7.
    "$cc" "${CFLAGS[@]}" -shared -fPIC -o "$dir/plain.so" "$HERE/fake_model.c"
    "$cc" "${CFLAGS[@]}" -shared -fPIC -DNNC_PREFIX=fake_ -DFAKE_WORKSPACE_SIZE=0 \
        -o "$dir/named.so" "$HERE/fake_model.c"
    "$cc" "${CFLAGS[@]}" -shared -fPIC -DFAKE_STATUS=7 -o "$dir/failing.so" "$HERE/fake_model.c"

    # expect_ok LIB PREFIX: runs and compares both outputs with the expected bytes.
    expect_ok() {
        local out="$dir/out-$2"
        rm -rf "$out" && mkdir -p "$out"
        if "${runner[@]}" "$dir/nnc_run" "$dir/$1" "$2" "$WORK/in" "$out" >"$dir/log" 2>&1 &&
            cmp -s "$out/output_0.bin" "$WORK/expected/output_0.bin" &&
            cmp -s "$out/output_1.bin" "$WORK/expected/output_1.bin"; then
            pass "$1 prefix='$2': $(cat "$dir/log")"
        else
            flunk "$1 prefix='$2': $(cat "$dir/log")"
        fi
    }
    # expect_error WHAT STATUS MESSAGE ARGS...: nnc_run must exit with STATUS
    # and print MESSAGE.
    expect_error() {
        local what="$1" want_status="$2" want_message="$3" status=0
        shift 3
        "${runner[@]}" "$dir/nnc_run" "$@" >"$dir/log" 2>&1 || status=$?
        if [[ $status == "$want_status" ]] && grep -qF "$want_message" "$dir/log"; then
            pass "$what: exit $status: $(cat "$dir/log")"
        else
            flunk "$what: exit $status, wanted $want_status and '$want_message': $(cat "$dir/log")"
        fi
    }

    expect_ok plain.so ""
    expect_ok named.so fake_
    mkdir -p "$dir/out-err"
    expect_error "input of the wrong size" 1 "has 12 bytes, the model expects 16" \
        "$dir/plain.so" "" "$WORK/short" "$dir/out-err"
    expect_error "missing input file" 1 "cannot open" \
        "$dir/plain.so" "" "$WORK/expected" "$dir/out-err"
    expect_error "wrong prefix" 1 "symbol 'fake_model_info' not found" \
        "$dir/plain.so" fake_ "$WORK/in" "$dir/out-err"
    expect_error "missing library" 1 "cannot load" \
        "$dir/absent.so" "" "$WORK/in" "$dir/out-err"
    expect_error "infer failure" 3 "infer_with_workspace returned 7" \
        "$dir/failing.so" "" "$WORK/in" "$dir/out-err"
    expect_error "bad usage" 2 "usage:" "$dir/plain.so"
}

run_suite host cc
if command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null; then
    run_suite aarch64 aarch64-linux-gnu-gcc qemu-aarch64 -L /usr/aarch64-linux-gnu
elif [[ "${NNC_TEST_REQUIRE_TOOLS:-}" == 1 ]]; then
    echo "aarch64: aarch64-linux-gnu-gcc and qemu-aarch64 are required (NNC_TEST_REQUIRE_TOOLS=1)"
    failed=$((failed + 1))
else
    echo "SKIP: aarch64 harness test (install qemu-user gcc-aarch64-linux-gnu)"
fi

echo "selftest: $passed passed, $failed failed"
[[ $failed == 0 ]]
