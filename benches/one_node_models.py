#!/usr/bin/env python3
"""One-node ONNX models of layers whose speed was measured on their own, written into a
folder that benches/bench_models.py then times against onnxruntime:

    python3 benches/one_node_models.py /tmp/one_node
    python3 benches/bench_models.py /tmp/one_node --models qk,pv,mlp,softmax --rounds 5

qk / pv / mlp: whisper_encoder_2l's attention MatMuls [4,1500,64]·[4,64,1500] and
[4,1500,1500]·[4,1500,64] and its MLP [1500,256]·[256,1024], both operands graph
inputs; softmax: its [1,4,1500,1500] scores over the last axis. Needs numpy and onnx.
"""
import os
import sys

from onnx import TensorProto, helper, save


def model(path, node, inputs, output):
    g = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, output)])
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def matmul(path, a, b):
    model(path, helper.make_node("MatMul", ["a", "b"], ["y"]), [("a", a), ("b", b)],
          list(a[:-1]) + [b[-1]])


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "one_node"
    os.makedirs(out, exist_ok=True)
    matmul(os.path.join(out, "qk.onnx"), [1, 4, 1500, 64], [1, 4, 64, 1500])
    matmul(os.path.join(out, "pv.onnx"), [1, 4, 1500, 1500], [1, 4, 1500, 64])
    matmul(os.path.join(out, "mlp.onnx"), [1, 1500, 256], [1, 256, 1024])
    shape = [1, 4, 1500, 1500]
    model(os.path.join(out, "softmax.onnx"), helper.make_node("Softmax", ["a"], ["y"], axis=-1),
          [("a", shape)], shape)


main()
