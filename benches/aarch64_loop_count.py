#!/usr/bin/env python3
"""Instructions per multiply-accumulate in the INT8 convolution K loops of an aarch64
library: disassembles LIB.so (aarch64-linux-gnu-objdump), finds backward-branching
loops that load data and contain dot-product or multiply instructions and have one
branch, and prints the most common bodies with their instruction mix.

usage: benches/aarch64_loop_count.py LIB.so [--top 2]

Build the library with e.g. `nnc compile resnet18.onnx --target aarch64 --cpu +dotprod
--quantize int8 --calibration calib.npy -o LIB.so`. MACs per iteration are counted by
the caller from the tile (4 maps x 16 pixels x 4 channels = 256 in nnc's Cranelift tile).
"""
import argparse, collections, re, subprocess

MULS = ("sdot", "usdot", "udot", "smull", "smull2", "umull", "umull2", "mul")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("--top", type=int, default=2)
    args = ap.parse_args()
    out = subprocess.run(["aarch64-linux-gnu-objdump", "-d", "--no-show-raw-insn", args.lib],
                         capture_output=True, text=True, check=True).stdout
    ins = []
    for line in out.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\s+(\S+)\s*(.*)", line)
        if m:
            ins.append((int(m.group(1), 16), m.group(2), m.group(3)))
    at = {a: i for i, (a, _, _) in enumerate(ins)}
    loops = collections.Counter()
    for i, (a, op, operands) in enumerate(ins):
        t = re.search(r"([0-9a-f]+) <", operands)
        if not op.startswith("b.") or not t or int(t.group(1), 16) >= a or int(t.group(1), 16) not in at:
            continue
        body = [o for _, o, _ in ins[at[int(t.group(1), 16)]:i + 1]]
        if 10 < len(body) < 200 and "ldr" in body and any(o in MULS for o in body) \
                and sum(o.startswith("b.") for o in body) == 1:
            loops[tuple(sorted(collections.Counter(body).items()))] += 1
    for mix, n in loops.most_common(args.top):
        print(f"{n} loops of {sum(c for _, c in mix)} instructions: {dict(mix)}")


main()
