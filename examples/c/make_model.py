#!/usr/bin/env python3
"""Writes model.onnx: a tiny CNN classifier (1x1x8x8 image -> 4 class probabilities)
with fixed weights, and expected.txt: onnxruntime's (or onnx.reference's) output on the
ramp input main.c feeds it. Run once; both files are committed."""
import numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto

rng = np.random.default_rng(42)
w1 = numpy_helper.from_array(rng.standard_normal((4, 1, 3, 3)).astype(np.float32) * 0.5, "conv.weight")
b1 = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32) * 0.1, "conv.bias")
w2 = numpy_helper.from_array(rng.standard_normal((4, 64)).astype(np.float32) * 0.2, "fc.weight")
b2 = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32) * 0.1, "fc.bias")
nodes = [
    helper.make_node("Conv", ["image", "conv.weight", "conv.bias"], ["c"], pads=[1, 1, 1, 1], name="conv"),
    helper.make_node("Relu", ["c"], ["r"], name="relu"),
    helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
    helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
    helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["logits"], transB=1, name="fc"),
    helper.make_node("Softmax", ["logits"], ["probs"], axis=-1, name="softmax"),
]
graph = helper.make_graph(nodes, "tiny_cnn",
                          [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 8, 8])],
                          [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 4])],
                          [w1, b1, w2, b2])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="nnc-example")
onnx.checker.check_model(model)
onnx.save(model, "model.onnx")

from onnx.reference import ReferenceEvaluator
image = (np.arange(64, dtype=np.float32) / 64.0).reshape(1, 1, 8, 8)
probs = ReferenceEvaluator(model).run(None, {"image": image})[0]
with open("expected.txt", "w") as f:
    f.write(" ".join(f"{v:.6f}" for v in probs.ravel()) + "\n")
print(open("expected.txt").read(), end="")
