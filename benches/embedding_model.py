#!/usr/bin/env python3
"""Writes an embedding-heavy model for measuring nnc's run-time index checks: token ids
[1, SEQ] (int64) → Gather from a [VOCAB, DIM] float32 table (the checked op) plus a
position embedding (a second Gather), then two small layers (MatMul + Add + Relu,
MatMul) and a mean over the sequence. Nearly all of its time is the gathers, so the
cost of checking every id shows here if anywhere.

usage: benches/embedding_model.py OUT_DIR [--vocab 50000] [--dim 256] [--seq 512]

Writes OUT_DIR/embedding_v{VOCAB}_d{DIM}.onnx and its input
OUT_DIR/embedding_v{VOCAB}_d{DIM}.input.ids.npy (seeded random ids in range), the
layout benches/bench_models.py reads:

  python3 benches/embedding_model.py /tmp/emb
  python3 benches/bench_models.py /tmp/emb --models embedding_v50000_d256 \\
      --variant=--index-checks=clamp

Needs numpy and onnx; the weights are seeded random numbers.
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--vocab", type=int, default=50000)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--seq", type=int, default=512)
    args = ap.parse_args()
    v, d, s = args.vocab, args.dim, args.seq
    rng = np.random.default_rng(0)
    init = [
        numpy_helper.from_array(rng.standard_normal((v, d)).astype(np.float32), "table"),
        numpy_helper.from_array(rng.standard_normal((s, d)).astype(np.float32), "positions"),
        numpy_helper.from_array(np.arange(s, dtype=np.int64).reshape(1, s), "position_ids"),
        numpy_helper.from_array((rng.standard_normal((d, 64)) / 16).astype(np.float32), "w1"),
        numpy_helper.from_array(np.zeros(64, np.float32), "b1"),
        numpy_helper.from_array((rng.standard_normal((64, 16)) / 8).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["tokens"], axis=0),
        # The position ids are a constant: folded or clamped, never checked.
        helper.make_node("Gather", ["positions", "position_ids"], ["pos"], axis=0),
        helper.make_node("Add", ["tokens", "pos"], ["x"]),
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["o"]),
        helper.make_node("ReduceMean", ["o"], ["y"], axes=[1], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "embedding",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, s])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        init,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    os.makedirs(args.out_dir, exist_ok=True)
    name = f"embedding_v{v}_d{d}"
    onnx.save(model, os.path.join(args.out_dir, f"{name}.onnx"))
    ids = rng.integers(0, v, size=(1, s), dtype=np.int64)
    np.save(os.path.join(args.out_dir, f"{name}.input.ids.npy"), ids)
    print(os.path.join(args.out_dir, f"{name}.onnx"))


if __name__ == "__main__":
    main()
