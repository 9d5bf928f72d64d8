#!/usr/bin/env python3
"""A/B of one convolution compiled by nnc under different code-generation switches.

usage: bench_conv.py C M H K S [ENV=VALUE ...]

Builds a one-node model (Conv C→M channels, H×H input, K×K kernel, stride S, padding
K div 2, bias, Relu), compiles it once with the environment as is ("base") and once per
ENV=VALUE given (e.g. NNC_WINOGRAD=off, NNC_PHASE_PLANES=off, NNC_NARROW_CONV=off,
NNC_GEMM_KERNEL=clif, NNC_DWCONV_KERNEL=clif), then times the variants in alternating
rounds (thread CPU time, best of 15 rounds) and prints ms, GFLOP/s of the direct
convolution and the largest difference from the base output. nnc-vs-nnc only: ratios
against onnxruntime and tract come from the model benches.

Needs numpy, onnx and target/release/nnc (cargo build --release).
"""
import ctypes
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NNC = os.path.join(ROOT, "target", "release", "nnc")
ROUNDS, CALLS = 15, 5


def conv_model(c, m, h, k, s, path):
    pad = k // 2
    oh = (h + 2 * pad - k) // s + 1
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((m, c, k, k)) * 0.05).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), "b")
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[k, k], pads=[pad] * 4, strides=[s, s])
    relu = helper.make_node("Relu", ["c"], ["y"])
    graph = helper.make_graph(
        [conv, relu], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, h])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, m, oh, oh])], [w, b])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return oh


def main():
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    c, m, h, k, s = map(int, sys.argv[1:6])
    variants = [("base", {})] + [(e, dict([e.split("=", 1)])) for e in sys.argv[6:]]
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "conv.onnx")
        oh = conv_model(c, m, h, k, s, model)
        x = np.random.default_rng(1).random((1, c, h, h), dtype=np.float32)
        runs = []
        for i, (name, extra) in enumerate(variants):
            lib_path = os.path.join(tmp, f"v{i}.so")
            subprocess.run([NNC, "compile", model, "-o", lib_path], env={**os.environ, **extra},
                           check=True, capture_output=True)
            lib = ctypes.CDLL(lib_path)
            out = np.zeros((1, m, oh, oh), np.float32)
            ins = (ctypes.c_void_p * 1)(x.ctypes.data)
            outs = (ctypes.c_void_p * 1)(out.ctypes.data)
            runs.append((name, lib, ins, outs, out))
        for _, lib, ins, outs, _ in runs:
            if lib.infer(ins, outs) != 0:
                sys.exit("infer failed")
        best = {name: float("inf") for name, *_ in runs}
        for _ in range(ROUNDS):
            for name, lib, ins, outs, _ in runs:
                t = time.thread_time()
                for _ in range(CALLS):
                    lib.infer(ins, outs)
                best[name] = min(best[name], (time.thread_time() - t) / CALLS * 1e3)
        flops = 2 * m * c * k * k * oh * oh
        ref = runs[0][4]
        for name, *_, out in runs:
            print(f"{name:28s} {best[name]:8.3f} ms  {flops / best[name] / 1e6:7.1f} GFLOP/s  "
                  f"max diff {np.abs(out - ref).max():.2e}")


main()
