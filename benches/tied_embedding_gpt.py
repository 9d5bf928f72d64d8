#!/usr/bin/env python3
"""Writes a small GPT-style decoder whose input and output embeddings are tied (issue
19): token ids [1, SEQ] → Gather from the token table E [VOCAB, DIM] plus a position
table → LAYERS pre-norm blocks (causal single-head attention, GELU MLP) → LayerNorm →
logits = h · Eᵀ [1, SEQ, VOCAB].

The output projection is written three ways (--tie), as exporters write it:
  initializer  MatMul(h, Eᵀ) with Eᵀ a second initializer (torch.onnx with constant
               folding: the ONNX file holds E twice)
  transpose    MatMul(h, Transpose(E))
  gemm         Gemm(h2d, E, transB=1) on the flattened rows

usage: benches/tied_embedding_gpt.py OUT_DIR [--vocab 8192] [--dim 256] [--seq 64]
                                     [--layers 2] [--tie initializer]

Writes OUT_DIR/gpt_tied_{TIE}_v{VOCAB}_d{DIM}.onnx and its input `ids` as
OUT_DIR/<model>.input.ids.npy (the layout benches/bench_models.py reads). Needs numpy
and onnx; the weights are seeded random numbers.
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build(vocab, dim, seq, layers, tie, seed=0):
    rng = np.random.default_rng(seed)
    nodes, init = [], []

    def const(name, array):
        init.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def node(op, inputs, output, **attrs):
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def weight(name, shape):
        return const(name, (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32))

    def layer_norm(x, name):
        g = const(f"{name}_g", np.ones(dim, np.float32))
        b = const(f"{name}_b", np.zeros(dim, np.float32))
        return node("LayerNormalization", [x, g, b], name, axis=-1, epsilon=1e-5)

    table = (rng.standard_normal((vocab, dim)) * 0.02).astype(np.float32)
    wte = const("wte", table)
    wpe = const("wpe", (rng.standard_normal((seq, dim)) * 0.02).astype(np.float32))
    positions = const("positions", np.arange(seq, dtype=np.int64).reshape(1, seq))
    mask = const("causal_mask", np.triu(np.full((seq, seq), -1e4, np.float32), 1))
    scale = const("attn_scale", np.array(1.0 / np.sqrt(dim), np.float32))
    tok = node("Gather", [wte, "ids"], "tok_emb", axis=0)
    pos = node("Gather", [wpe, positions], "pos_emb", axis=0)
    h = node("Add", [tok, pos], "h0")
    for l in range(layers):
        p = f"l{l}"
        x = layer_norm(h, f"{p}_ln1")
        q = node("MatMul", [x, weight(f"{p}_wq", (dim, dim))], f"{p}_q")
        k = node("MatMul", [x, weight(f"{p}_wk", (dim, dim))], f"{p}_k")
        v = node("MatMul", [x, weight(f"{p}_wv", (dim, dim))], f"{p}_v")
        kt = node("Transpose", [k], f"{p}_kt", perm=[0, 2, 1])
        s = node("MatMul", [q, kt], f"{p}_s")
        s = node("Mul", [s, scale], f"{p}_ss")
        s = node("Add", [s, mask], f"{p}_sm")
        a = node("Softmax", [s], f"{p}_a", axis=-1)
        o = node("MatMul", [a, v], f"{p}_o")
        o = node("MatMul", [o, weight(f"{p}_wo", (dim, dim))], f"{p}_proj")
        h = node("Add", [h, o], f"{p}_h1")
        x = layer_norm(h, f"{p}_ln2")
        m = node("MatMul", [x, weight(f"{p}_w1", (dim, 4 * dim))], f"{p}_m1")
        m = node("Relu", [m], f"{p}_act")
        m = node("MatMul", [m, weight(f"{p}_w2", (4 * dim, dim))], f"{p}_m2")
        h = node("Add", [h, m], f"{p}_h2")
    h = layer_norm(h, "ln_f")
    if tie == "initializer":
        node("MatMul", [h, const("wte_t", table.T)], "logits")
    elif tie == "transpose":
        node("MatMul", [h, node("Transpose", [wte], "wte_transposed", perm=[1, 0])], "logits")
    else:
        rows = const("rows_shape", np.array([seq, dim], np.int64))
        out_shape = const("logits_shape", np.array([1, seq, vocab], np.int64))
        h2 = node("Reshape", [h, rows], "h_rows")
        y = node("Gemm", [h2, wte], "logits_rows", transB=1)
        node("Reshape", [y, out_shape], "logits")
    graph = helper.make_graph(
        nodes,
        "gpt_tied",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, seq])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, seq, vocab])],
        init,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--tie", choices=["initializer", "transpose", "gemm"], default="initializer")
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    model = build(args.vocab, args.dim, args.seq, args.layers, args.tie)
    stem = f"gpt_tied_{args.tie}_v{args.vocab}_d{args.dim}"
    path = os.path.join(args.out_dir, stem + ".onnx")
    onnx.save(model, path)
    ids = np.random.default_rng(1).integers(0, args.vocab, (1, args.seq), dtype=np.int64)
    np.save(os.path.join(args.out_dir, stem + ".input.ids.npy"), ids)
    table_bytes = args.vocab * args.dim * 4
    print(f"{path}: embedding table {table_bytes} bytes")


if __name__ == "__main__":
    main()
