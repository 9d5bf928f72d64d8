"""Test helper: a model of onnxruntime's com.microsoft QLinearAdd, QLinearMul (with
broadcasting) and QLinearGlobalAveragePool on uint8 tensors, with onnxruntime's
outputs on random inputs.

usage: ort_qlinear.py OUT_DIR   (writes model.onnx, a.npy, b.npy, add.npy, mul.npy, gap.npy)
"""
import os, sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
import onnxruntime as ort

out = sys.argv[1]
rng = np.random.default_rng(3)
a = rng.integers(0, 256, size=(2, 5, 6, 7), dtype=np.uint8)
b = rng.integers(0, 256, size=(1, 5, 1, 7), dtype=np.uint8)
inits = [numpy_helper.from_array(np.array(v, dtype=t), name=n) for n, v, t in [
    ("sa", 0.031, np.float32), ("za", 117, np.uint8),
    ("sb", 0.017, np.float32), ("zb", 131, np.uint8),
    ("sc", 0.045, np.float32), ("zc", 120, np.uint8),
    ("sm", 0.05, np.float32), ("zm", 100, np.uint8),
    ("sg", 0.02, np.float32), ("zg", 90, np.uint8)]]
ms = "com.microsoft"
nodes = [
    helper.make_node("QLinearAdd", ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"], ["add"], domain=ms),
    helper.make_node("QLinearMul", ["add", "sc", "zc", "b", "sb", "zb", "sm", "zm"], ["mul"], domain=ms),
    helper.make_node("QLinearGlobalAveragePool", ["mul", "sm", "zm", "sg", "zg"], ["gap"], domain=ms,
                     channels_last=0),
]
u8 = TensorProto.UINT8
graph = helper.make_graph(
    nodes, "qlinear",
    [helper.make_tensor_value_info("a", u8, a.shape), helper.make_tensor_value_info("b", u8, b.shape)],
    [helper.make_tensor_value_info("add", u8, a.shape), helper.make_tensor_value_info("mul", u8, a.shape),
     helper.make_tensor_value_info("gap", u8, (2, 5, 1, 1))],
    inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ms, 1)])
path = os.path.join(out, "model.onnx")
onnx.save(model, path)
s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
add, mul, gap = s.run(None, {"a": a, "b": b})
for name, v in [("a", a), ("b", b), ("add", add), ("mul", mul), ("gap", gap)]:
    np.save(os.path.join(out, name + ".npy"), v)
