#!/usr/bin/env python3
"""Writes batch_model.onnx: model.onnx (the tiny CNN) with its batch axis named "N",
as exporters write dynamic axes, and expected_batch.txt: onnx.reference's output on
three images (the ramp of main.c, its reverse and a constant 0.5). The Rust
build-script example compiles it once with `dim_range("N", 1, 4)` and runs the three
images in one call. Run once; both files are committed."""
import numpy as np, onnx
from onnx.reference import ReferenceEvaluator

model = onnx.load("model.onnx")
for value in list(model.graph.input) + list(model.graph.output):
    value.type.tensor_type.shape.dim[0].dim_param = "N"
onnx.checker.check_model(model)
onnx.save(model, "batch_model.onnx")

ramp = np.arange(64, dtype=np.float32) / 64.0
images = np.stack([ramp, ramp[::-1], np.full(64, 0.5, np.float32)]).reshape(3, 1, 8, 8)
probs = ReferenceEvaluator(model).run(None, {"image": images})[0]
with open("expected_batch.txt", "w") as f:
    for row in probs:
        f.write(" ".join(f"{p:.6f}" for p in row) + "\n")
