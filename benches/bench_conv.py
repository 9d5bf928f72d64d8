#!/usr/bin/env python3
"""A/B of one convolution compiled by nnc under different code-generation switches.

usage: bench_conv.py C M H K S [KIND=CHOICE ...]
       bench_conv.py dw C H K S [KIND=CHOICE ...]
       bench_conv.py maxpool C H K S [KIND=CHOICE ...]

Builds a one-node model (Conv C→M channels, H×H input, K×K kernel (or KHxKW, e.g. 1x7),
stride S, padding K div 2, bias, Relu; `dw`: the depthwise conv, group = C = M; or MaxPool K×K, stride S, no padding, on C×H×H), compiles it once with nnc's own kernel choices ("base") and once per
`--kernel` KIND=CHOICE given (e.g. winograd=off, phase-planes=off, narrow-conv=off,
gemm=clif, dwconv=clif; `nnc compile --help` lists them), then times the variants in alternating
rounds (thread CPU time, best of 15 rounds) and prints ms, GFLOP/s of the direct
convolution and the largest difference from the base output. When onnxruntime is
installed, the same one-node model run by it (1 thread) is timed in the same rounds as
a last row, to see which layers lose to it; whole-model ratios come from the model
benches.

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


def kernel_dims(text):
    """K as `7` (7×7) or `1x7` (1 row, 7 columns: Inception's factorized convs)."""
    kh, _, kw = text.partition("x")
    return int(kh), int(kw or kh)


def conv_model(c, m, h, k, s, path, group=1):
    kh, kw = k
    oh = (h + 2 * (kh // 2) - kh) // s + 1
    ow = (h + 2 * (kw // 2) - kw) // s + 1
    rng = np.random.default_rng(0)
    w = rng.standard_normal((m, c // group, kh, kw)) * 0.05
    w = numpy_helper.from_array(w.astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), "b")
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[kh, kw],
                            pads=[kh // 2, kw // 2, kh // 2, kw // 2], strides=[s, s],
                            group=group)
    relu = helper.make_node("Relu", ["c"], ["y"])
    graph = helper.make_graph(
        [conv, relu], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, h])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, m, oh, ow])], [w, b])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return oh, ow


def maxpool_model(c, h, k, s, path):
    oh = (h - k) // s + 1
    pool = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[k, k], strides=[s, s])
    graph = helper.make_graph(
        [pool], "maxpool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, h])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, oh, oh])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return oh


class OrtRun:
    """onnxruntime on the same model, shaped like an nnc run for the timing loop."""

    def __init__(self, model, x):
        import onnxruntime as ort
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        self.session = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
        self.feeds = {"x": x}
        self.out = self.session.run(None, self.feeds)[0]

    def infer(self, _ins, _outs):
        self.out = self.session.run(None, self.feeds)[0]
        return 0


def main():
    pooling = len(sys.argv) > 1 and sys.argv[1] == "maxpool"
    depthwise = len(sys.argv) > 1 and sys.argv[1] == "dw"
    args = sys.argv[2:] if pooling or depthwise else sys.argv[1:]
    if len(args) < (4 if pooling or depthwise else 5):
        sys.exit(__doc__)
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "node.onnx")
        if pooling:
            c, h, k, s = map(int, args[:4])
            m, envs = c, args[4:]
            oh = ow = maxpool_model(c, h, k, s, model)
            flops = c * k * k * oh * oh
        elif depthwise:
            c, h, s = int(args[0]), int(args[1]), int(args[3])
            kh, kw = kernel_dims(args[2])
            m, envs = c, args[4:]
            oh, ow = conv_model(c, c, h, (kh, kw), s, model, group=c)
            flops = 2 * c * kh * kw * oh * ow
        else:
            c, m, h, s = int(args[0]), int(args[1]), int(args[2]), int(args[4])
            kh, kw = kernel_dims(args[3])
            envs = args[5:]
            oh, ow = conv_model(c, m, h, (kh, kw), s, model)
            flops = 2 * m * c * kh * kw * oh * ow
        variants = [("base", [])] + [(e, ["--kernel", e]) for e in envs]
        x = np.random.default_rng(1).random((1, c, h, h), dtype=np.float32)
        runs = []
        for i, (name, extra) in enumerate(variants):
            lib_path = os.path.join(tmp, f"v{i}.so")
            subprocess.run([NNC, "compile", model, "-o", lib_path, *extra],
                           check=True, capture_output=True)
            lib = ctypes.CDLL(lib_path)
            out = np.zeros((1, m, oh, ow), np.float32)
            ins = (ctypes.c_void_p * 1)(x.ctypes.data)
            outs = (ctypes.c_void_p * 1)(out.ctypes.data)
            runs.append((name, lib, ins, outs, out))
        try:
            ort_run = OrtRun(model, x)
            runs.append(("onnxruntime", ort_run, None, None, None))
        except ImportError:
            ort_run = None
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
        if ort_run is not None:
            runs[-1] = (*runs[-1][:4], ort_run.out)
        ref = runs[0][4]
        for name, *_, out in runs:
            print(f"{name:28s} {best[name]:8.3f} ms  {flops / best[name] / 1e6:7.1f} G{'op' if pooling else 'FLOP'}/s  "
                  f"max diff {np.abs(out - ref).max():.2e}")


if __name__ == "__main__":
    main()
