#!/usr/bin/env python3
"""Writes a GPT-style decoder as exporting a PyTorch GPT-2 with `dynamic_axes` does:
input `input_ids` int64 `[1, seq]` (seq a dim_param); word embeddings plus position
embeddings sliced to the sequence by `Shape`; per layer a pre-LayerNorm block of causal
multi-head self-attention (heads split by `Reshape [0, 0, H, dh]` and `Transpose`,
scores divided by √dh, masked by `Where(bias[:, :, :seq, :seq], scores, finfo.min)` with
`bias` a constant lower-triangular boolean `[1, 1, max, max]`) and a tanh-GELU MLP, both
with residuals; a final LayerNorm and logits over the vocabulary. Random weights.

usage: benches/gpt_model.py OUT.onnx [--layers 4] [--d 256] [--heads 4] [--ffn 1024]
                            [--vocab 1000] [--max-len 512]

For benches/dynamic_vs_static.py OUT.onnx --dim seq=1..MAX-LEN.
"""
import argparse
import numpy as np
import onnx
from onnx import helper as h, numpy_helper as nh, TensorProto


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
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
    inits, nodes = [], []

    def w(name, shape, scale):
        inits.append(nh.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def const(name, value, dtype):
        inits.append(nh.from_array(np.array(value, dtype), name))
        return name

    def node(op, inputs, name, **attrs):
        nodes.append(h.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def layer_norm(x, prefix):
        return node("LayerNormalization", [x, w(prefix + ".g", (d,), 1.0), w(prefix + ".b", (d,), 0.1)],
                    prefix, axis=-1, epsilon=1e-5)

    def linear(x, prefix, fan_in, fan_out):
        m = node("MatMul", [x, w(prefix + ".w", (fan_in, fan_out), 1 / np.sqrt(fan_in))], prefix + "/MatMul")
        return node("Add", [m, w(prefix + ".bias", (fan_out,), 0.1)], prefix + "/Add")

    const("axis1", [1], np.int64)
    const("zero1", [0], np.int64)
    const("zeros2", [0, 0], np.int64)
    const("axes23", [2, 3], np.int64)
    const("pos_ids", np.arange(a.max_len, dtype=np.int64)[None, :], np.int64)
    const("bias", np.tril(np.ones((a.max_len, a.max_len), bool))[None, None], bool)
    const("mask_value", np.finfo(np.float32).min, np.float32)
    const("sqrt_dh", np.sqrt(dh), np.float32)
    const("split", [0, 0, heads, dh], np.int64)
    const("merge", [0, 0, d], np.int64)
    for name, value in [("half", 0.5), ("one", 1.0), ("c0", 0.044715), ("c1", np.sqrt(2 / np.pi)), ("three", 3.0)]:
        const(name, value, np.float32)
    tok = node("Gather", [w("wte", (a.vocab, d), 0.5), "input_ids"], "tok")
    seq = node("Gather", [node("Shape", ["input_ids"], "shape"), "axis1"], "seq_len")
    positions = node("Slice", ["pos_ids", "zero1", seq, "axis1"], "positions")
    x = node("Add", [tok, node("Gather", [w("wpe", (a.max_len, d), 0.5), positions], "pos")], "embed")
    ends = node("Concat", [seq, seq], "causal/ends", axis=0)
    causal = node("Slice", ["bias", "zeros2", ends, "axes23"], "causal")
    for i in range(a.layers):
        p = f"h.{i}"
        hn = layer_norm(x, f"{p}.ln_1")

        def heads_of(name, perm):
            y = node("Reshape", [linear(hn, f"{p}.{name}", d, d), "split"], f"{p}/{name}/Reshape")
            return node("Transpose", [y], f"{p}/{name}/Transpose", perm=perm)

        q = heads_of("q", [0, 2, 1, 3])
        k = heads_of("k", [0, 2, 3, 1])
        v = heads_of("v", [0, 2, 1, 3])
        s = node("Div", [node("MatMul", [q, k], f"{p}/scores"), "sqrt_dh"], f"{p}/scaled")
        s = node("Where", [causal, s, "mask_value"], f"{p}/masked")
        s = node("Softmax", [s], f"{p}/Softmax", axis=-1)
        o = node("MatMul", [s, v], f"{p}/context")
        o = node("Transpose", [o], f"{p}/context/Transpose", perm=[0, 2, 1, 3])
        o = node("Reshape", [o, "merge"], f"{p}/context/Reshape")
        x = node("Add", [x, linear(o, f"{p}.c_proj", d, d)], f"{p}/residual1")
        hn = layer_norm(x, f"{p}.ln_2")
        u = linear(hn, f"{p}.c_fc", d, f)
        cube = node("Pow", [u, "three"], f"{p}/gelu/Pow")
        inner = node("Mul", [node("Add", [u, node("Mul", [cube, "c0"], f"{p}/gelu/Mul")], f"{p}/gelu/Add"), "c1"],
                     f"{p}/gelu/Mul_1")
        t = node("Add", [node("Tanh", [inner], f"{p}/gelu/Tanh"), "one"], f"{p}/gelu/Add_1")
        g = node("Mul", [node("Mul", [u, "half"], f"{p}/gelu/Mul_2"), t], f"{p}/gelu/Mul_3")
        x = node("Add", [x, linear(g, f"{p}.mlp_proj", f, d)], f"{p}/residual2")
    hn = layer_norm(x, "ln_f")
    nodes.append(h.make_node("MatMul", [hn, w("lm_head", (d, a.vocab), 1 / np.sqrt(d))], ["logits"]))
    graph = h.make_graph(
        nodes, "gpt",
        [h.make_tensor_value_info("input_ids", TensorProto.INT64, [1, "seq"])],
        [h.make_tensor_value_info("logits", TensorProto.FLOAT, [1, "seq", a.vocab])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, a.out)


if __name__ == "__main__":
    main()
