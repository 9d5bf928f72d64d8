#!/usr/bin/env python3
"""Writes a token-wise model over `ids: int64[1, seq]` (seq a dim_param, as exporting with
`dynamic_axes` writes): word embeddings plus position embeddings gathered by
`Range(0, Shape(ids)[1])`, LayerNorm, an erf-GELU MLP with biases and a residual.
Every node computes each token's row from that token's rows alone, so one library
compiled with `--dim seq=MIN..MAX` runs it by rows.

usage: benches/token_model.py OUT.onnx [--d 256] [--ffn 1024] [--vocab 1000] [--max-len 128]

For benches/dynamic_vs_static.py OUT.onnx --dim seq=1..MAX-LEN.
"""
import argparse
import numpy as np
import onnx
from onnx import helper as h, numpy_helper as nh, TensorProto


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    d, f = a.d, a.ffn

    def w(name, shape, scale):
        return nh.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [
        w("emb", (a.vocab, d), 0.5), w("pos", (a.max_len, d), 0.5),
        w("g", (d,), 1.0), w("b", (d,), 0.1),
        w("w1", (d, f), 1 / np.sqrt(d)), w("b1", (f,), 0.1),
        w("w2", (f, d), 1 / np.sqrt(f)), w("b2", (d,), 0.1),
        nh.from_array(np.array([1], np.int64), "axis1"),
        nh.from_array(np.array(0, np.int64), "zero"),
        nh.from_array(np.array(1, np.int64), "step"),
        nh.from_array(np.array(0.5, np.float32), "half"),
        nh.from_array(np.array(1.0, np.float32), "one"),
        nh.from_array(np.array(1 / np.sqrt(2), np.float32), "rsqrt2"),
    ]
    n = h.make_node
    nodes = [
        n("Gather", ["emb", "ids"], ["tok"]),
        n("Shape", ["ids"], ["shape"]), n("Gather", ["shape", "axis1"], ["len1"]),
        n("Squeeze", ["len1"], ["len"]), n("Range", ["zero", "len", "step"], ["positions"]),
        n("Gather", ["pos", "positions"], ["pe"]), n("Add", ["tok", "pe"], ["x"]),
        n("LayerNormalization", ["x", "g", "b"], ["ln"], axis=-1),
        n("MatMul", ["ln", "w1"], ["m1"]), n("Add", ["m1", "b1"], ["a1"]),
        n("Mul", ["a1", "rsqrt2"], ["s"]), n("Erf", ["s"], ["e"]), n("Add", ["e", "one"], ["e1"]),
        n("Mul", ["a1", "e1"], ["g1"]), n("Mul", ["g1", "half"], ["gelu"]),
        n("MatMul", ["gelu", "w2"], ["m2"]), n("Add", ["m2", "b2"], ["a2"]),
        n("Add", ["a2", "x"], ["y"]),
    ]
    graph = h.make_graph(
        nodes, "tokens",
        [h.make_tensor_value_info("ids", TensorProto.INT64, [1, "seq"])],
        [h.make_tensor_value_info("y", TensorProto.FLOAT, [1, "seq", d])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, a.out)


if __name__ == "__main__":
    main()
