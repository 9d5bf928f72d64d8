#!/usr/bin/env python3
"""Writes second.onnx: a tiny MLP (6 features -> 3 scores) with fixed weights, and
expected_second.txt: onnx.reference's output on the input two_models.c feeds it.
two_models.c links it next to model.onnx to show that two models compiled with
different --name prefixes live in one program. Run once; both files are committed."""
import numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto

rng = np.random.default_rng(7)
w1 = numpy_helper.from_array(rng.standard_normal((6, 8)).astype(np.float32) * 0.5, "fc1.weight")
b1 = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32) * 0.1, "fc1.bias")
w2 = numpy_helper.from_array(rng.standard_normal((8, 3)).astype(np.float32) * 0.5, "fc2.weight")
b2 = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32) * 0.1, "fc2.bias")
nodes = [
    helper.make_node("Gemm", ["features", "fc1.weight", "fc1.bias"], ["h"], name="fc1"),
    helper.make_node("Tanh", ["h"], ["t"], name="tanh"),
    helper.make_node("Gemm", ["t", "fc2.weight", "fc2.bias"], ["scores"], name="fc2"),
]
graph = helper.make_graph(nodes, "tiny_mlp",
                          [helper.make_tensor_value_info("features", TensorProto.FLOAT, [1, 6])],
                          [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 3])],
                          [w1, b1, w2, b2])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="nnc-example")
onnx.checker.check_model(model)
onnx.save(model, "second.onnx")

from onnx.reference import ReferenceEvaluator
features = (np.arange(6, dtype=np.float32) * 0.5 - 1.0).reshape(1, 6)  # -1.0, -0.5, ..., 1.5
scores = ReferenceEvaluator(model).run(None, {"features": features})[0]
with open("expected_second.txt", "w") as f:
    f.write(" ".join(f"{v:.6f}" for v in scores.ravel()) + "\n")
print(open("expected_second.txt").read(), end="")
