"""Test helper: quantizes MODEL with onnxruntime's quantize_static (QDQ, per-channel,
uint8 activations, int8 weights) on CALIB.npy (samples stacked on the batch axis) and
writes the QDQ model and onnxruntime's outputs on HELD.npy.

usage: ort_qdq.py MODEL CALIB.npy HELD.npy OUT_QDQ.onnx OUT_Y.npy
"""
import sys
import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quantize_static)

model, calib, held, qdq, out = sys.argv[1:6]
name = onnx.load(model).graph.input[0].name
calib, held = np.load(calib), np.load(held)


class Reader(CalibrationDataReader):
    def __init__(self):
        self.it = iter(calib)

    def get_next(self):
        x = next(self.it, None)
        return None if x is None else {name: x[None].astype(np.float32)}


quantize_static(model, qdq, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
so = ort.SessionOptions()
so.intra_op_num_threads = 1
# The reference is the QDQ graph as it states (DequantizeLinear → float op →
# QuantizeLinear), not onnxruntime's fused integer kernels: on x86 CPUs without VNNI
# those add u8 · s8 products in saturating 16-bit pairs (vpmaddubsw), so their outputs
# depend on the CPU; nnc's integer sums are exact on every CPU.
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
s = ort.InferenceSession(qdq, so, providers=["CPUExecutionProvider"])
np.save(out, np.stack([s.run(None, {name: x[None].astype(np.float32)})[0] for x in held]))
