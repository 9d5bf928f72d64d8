#!/usr/bin/env python3
"""Writes a bidirectional LSTM unrolled over time steps, the way exporters unroll one
(issue 19): per direction and step one Gemm of the step's input against `weight_ih`
[4H, I] and one of the state against `weight_hh` [4H, H], both with transB=1, then the
gate math. The weights of a direction are single initializers that every step's Gemm
reads, so a compiler that packs weights per node stores them once per step.

usage: benches/unrolled_lstm.py OUT_DIR [--steps 20] [--input 4096] [--hidden 100]
                                        [--batch 1]

Writes OUT_DIR/lstm_unrolled_t{STEPS}_i{INPUT}_h{HIDDEN}.onnx with its input
`x` [STEPS, BATCH, INPUT] as OUT_DIR/<model>.input.x.npy and onnxruntime's output
`y` [STEPS, BATCH, 2·HIDDEN] as OUT_DIR/<model>.output.y.npy (when onnxruntime is
installed): the layout benches/bench_models.py reads. Needs numpy and onnx; the weights
are seeded random numbers.
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build(steps, inp, hidden, batch, seed=0):
    rng = np.random.default_rng(seed)
    h4 = 4 * hidden
    nodes, init = [], []

    def const(name, array):
        init.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def node(op, inputs, output, **attrs):
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    scale = 1.0 / np.sqrt(hidden)
    starts = {}
    for t in range(steps + 1):
        starts[t] = const(f"idx_{t}", np.array([t], dtype=np.int64))
    axis0 = const("axis0", np.array([0], dtype=np.int64))
    zeros = const("zero_state", np.zeros((batch, hidden), dtype=np.float32))
    split = const("gate_split", np.array([hidden] * 4, dtype=np.int64))
    per_direction = []
    for d, name in enumerate(["fwd", "bwd"]):
        w_ih = const(f"{name}_weight_ih", (rng.standard_normal((h4, inp)) * scale).astype(np.float32))
        w_hh = const(f"{name}_weight_hh", (rng.standard_normal((h4, hidden)) * scale).astype(np.float32))
        b_ih = const(f"{name}_bias_ih", (rng.standard_normal(h4) * scale).astype(np.float32))
        b_hh = const(f"{name}_bias_hh", (rng.standard_normal(h4) * scale).astype(np.float32))
        h, c = zeros, zeros
        outs = {}
        order = range(steps) if d == 0 else reversed(range(steps))
        for t in order:
            p = f"{name}_t{t}"
            x3 = node("Slice", ["x", starts[t], starts[t + 1], axis0], f"{p}_x3")
            x_t = node("Squeeze", [x3, axis0], f"{p}_x")
            gi = node("Gemm", [x_t, w_ih, b_ih], f"{p}_gi", transB=1)
            gh = node("Gemm", [h, w_hh, b_hh], f"{p}_gh", transB=1)
            gates = node("Add", [gi, gh], f"{p}_gates")
            names = [f"{p}_pre_{g}" for g in "ifgo"]
            nodes.append(helper.make_node("Split", [gates, split], names, axis=1, name=f"{p}_split"))
            i = node("Sigmoid", [names[0]], f"{p}_i")
            f = node("Sigmoid", [names[1]], f"{p}_f")
            g = node("Tanh", [names[2]], f"{p}_g")
            o = node("Sigmoid", [names[3]], f"{p}_o")
            fc = node("Mul", [f, c], f"{p}_fc")
            ig = node("Mul", [i, g], f"{p}_ig")
            c = node("Add", [fc, ig], f"{p}_c")
            tc = node("Tanh", [c], f"{p}_tc")
            h = node("Mul", [o, tc], f"{p}_h")
            outs[t] = node("Unsqueeze", [h, axis0], f"{p}_h3")
        per_direction.append(outs)
    steps_out = []
    for t in range(steps):
        steps_out.append(node("Concat", [per_direction[0][t], per_direction[1][t]], f"y_t{t}", axis=2))
    node("Concat", steps_out, "y", axis=0)
    graph = helper.make_graph(
        nodes,
        "unrolled_bilstm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, batch, inp])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [steps, batch, 2 * hidden])],
        init,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--input", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=100)
    ap.add_argument("--batch", type=int, default=1)
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    model = build(args.steps, args.input, args.hidden, args.batch)
    stem = f"lstm_unrolled_t{args.steps}_i{args.input}_h{args.hidden}"
    path = os.path.join(args.out_dir, stem + ".onnx")
    onnx.save(model, path)
    x = np.random.default_rng(1).standard_normal((args.steps, args.batch, args.input)).astype(np.float32)
    np.save(os.path.join(args.out_dir, stem + ".input.x.npy"), x)
    weight_bytes = sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)
    print(f"{path}: {len(model.graph.node)} nodes, {weight_bytes} weight bytes")
    try:
        import onnxruntime as ort
    except ImportError:
        print("onnxruntime missing: no expected output written")
        return
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": x})
    np.save(os.path.join(args.out_dir, stem + ".output.y.npy"), y)


if __name__ == "__main__":
    main()
