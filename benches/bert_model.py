#!/usr/bin/env python3
"""Writes a BERT-style encoder as exporting a PyTorch BERT with `dynamic_axes` does:
inputs `input_ids` and `attention_mask`, int64 `[batch, seq]` (both dim_params; or a
fixed batch with --batch N); word embeddings plus position embeddings sliced to the
sequence by `Shape`; the padding mask `(1 - mask)·-10000` unsqueezed to
`[batch, 1, 1, seq]`; per layer multi-head self-attention (heads split by
`Reshape [0, 0, H, dh]` and `Transpose`, scores divided by √dh), output projection,
residual and LayerNorm, an erf-GELU MLP, residual and LayerNorm; outputs
`last_hidden_state` and a tanh pooler over the first token. Random weights (seeded).

usage: benches/bert_model.py OUT.onnx [--batch N] [--layers 4] [--d 256] [--heads 4]
                             [--ffn 1024] [--vocab 1000] [--max-len 512]

For benches/dynamic_vs_static.py OUT.onnx --dim seq=1..MAX-LEN (with --batch 1).
"""
import argparse
import numpy as np
import onnx
from onnx import helper as h, numpy_helper as nh, TensorProto


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--batch", type=int, default=None, help="a fixed batch (default: the dim 'batch')")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    d, f, heads = a.d, a.ffn, a.heads
    dh = d // heads
    inits = []

    def w(name, shape, scale):
        inits.append(nh.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def const(name, value, dtype):
        inits.append(nh.from_array(np.array(value, dtype), name))
        return name

    n = h.make_node
    nodes = []

    def node(op, inputs, name, **attrs):
        nodes.append(n(op, inputs, [name], name=name, **attrs))
        return name

    def layer_norm(x, prefix):
        return node("LayerNormalization", [x, w(prefix + ".g", (d,), 1.0), w(prefix + ".b", (d,), 0.1)],
                    prefix, axis=-1, epsilon=1e-12)

    def linear(x, prefix, fan_in, fan_out):
        m = node("MatMul", [x, w(prefix + ".w", (fan_in, fan_out), 1 / np.sqrt(fan_in))], prefix + "/MatMul")
        return node("Add", [w(prefix + ".bias", (fan_out,), 0.1), m], prefix + "/Add")

    const("axis1", [1], np.int64)
    const("zero1", [0], np.int64)
    const("pos_ids", np.arange(a.max_len, dtype=np.int64)[None, :], np.int64)
    tok = node("Gather", [w("tok.weight", (a.vocab, d), 0.5), "input_ids"], "tok")
    shape = node("Shape", ["input_ids"], "shape")
    seq = node("Gather", [shape, "axis1"], "seq_len")
    positions = node("Slice", ["pos_ids", "zero1", seq, "axis1"], "positions")
    pe = node("Gather", [w("pos.weight", (a.max_len, d), 0.5), positions], "pos")
    x = layer_norm(node("Add", [tok, pe], "embed"), "ln0")
    const("axes1", [1], np.int64)
    const("axes2", [2], np.int64)
    m = node("Unsqueeze", ["attention_mask", "axes1"], "mask/Unsqueeze")
    m = node("Unsqueeze", [m, "axes2"], "mask/Unsqueeze_1")
    m = node("Cast", [m], "mask/Cast", to=TensorProto.FLOAT)
    m = node("Sub", [const("one", 1.0, np.float32), m], "mask/Sub")
    mask = node("Mul", [m, const("neg", -10000.0, np.float32)], "mask/Mul")
    const("split", [0, 0, heads, dh], np.int64)
    const("merge", [0, 0, d], np.int64)
    const("sqrt_dh", np.sqrt(dh), np.float32)
    const("rsqrt2", 1 / np.sqrt(2), np.float32)
    const("half", 0.5, np.float32)
    for i in range(a.layers):
        p = f"layers.{i}"

        def heads_of(name, perm):
            y = node("Reshape", [linear(x, f"{p}.{name}", d, d), "split"], f"{p}/{name}/Reshape")
            return node("Transpose", [y], f"{p}/{name}/Transpose", perm=perm)

        q = heads_of("q", [0, 2, 1, 3])
        k = heads_of("k", [0, 2, 3, 1])
        v = heads_of("v", [0, 2, 1, 3])
        s = node("MatMul", [q, k], f"{p}/scores")
        s = node("Div", [s, "sqrt_dh"], f"{p}/scaled")
        s = node("Add", [s, mask], f"{p}/masked")
        s = node("Softmax", [s], f"{p}/Softmax", axis=-1)
        o = node("MatMul", [s, v], f"{p}/context")
        o = node("Transpose", [o], f"{p}/context/Transpose", perm=[0, 2, 1, 3])
        o = node("Reshape", [o, "merge"], f"{p}/context/Reshape")
        o = linear(o, f"{p}.o", d, d)
        x1 = layer_norm(node("Add", [x, o], f"{p}/residual1"), f"{p}.ln1")
        f1 = linear(x1, f"{p}.f1", d, f)
        e = node("Erf", [node("Mul", [f1, "rsqrt2"], f"{p}/gelu/Mul")], f"{p}/gelu/Erf")
        e = node("Add", [e, "one"], f"{p}/gelu/Add")
        g = node("Mul", [node("Mul", [f1, e], f"{p}/gelu/Mul_1"), "half"], f"{p}/gelu/Mul_2")
        f2 = linear(g, f"{p}.f2", f, d)
        x = layer_norm(node("Add", [x1, f2], f"{p}/residual2"), f"{p}.ln2")
    nodes.append(n("Identity", [x], ["last_hidden_state"]))
    cls = node("Gather", ["last_hidden_state", const("first", 0, np.int64)], "cls", axis=1)
    pooled = node("Gemm", [cls, w("pool.w", (d, d), 1 / np.sqrt(d)), w("pool.b", (d,), 0.1)], "pool", transB=1)
    nodes.append(n("Tanh", [pooled], ["pooled"]))
    batch = a.batch if a.batch is not None else "batch"
    graph = h.make_graph(
        nodes, "bert",
        [h.make_tensor_value_info("input_ids", TensorProto.INT64, [batch, "seq"]),
         h.make_tensor_value_info("attention_mask", TensorProto.INT64, [batch, "seq"])],
        [h.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [batch, "seq", d]),
         h.make_tensor_value_info("pooled", TensorProto.FLOAT, [batch, d])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, a.out)


if __name__ == "__main__":
    main()
