#!/usr/bin/env python3
"""One Conv (+ Relu) on a square image of symbolic size `s`, for single-conv dynamic/static
measurements.

usage: benches/conv_model.py OUT.onnx CHANNELS MAPS KERNEL STRIDE
then:  benches/dynamic_vs_static.py OUT.onnx --dim s=MIN..MAX --values 7,14
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main():
    out, (c, m, k, s) = sys.argv[1], (int(x) for x in sys.argv[2:6])
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((m, c, k, k)) * 0.05).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, "s", "s"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, m, None, None])
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[k // 2] * 4, strides=[s, s]),
             helper.make_node("Relu", ["c"], ["y"])]
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")]
    g = helper.make_graph(nodes, "conv", [x], [y], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), out)


if __name__ == "__main__":
    main()
