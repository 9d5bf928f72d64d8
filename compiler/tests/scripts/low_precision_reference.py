"""Test helper: onnx's reference semantics of the low-precision element types, for
tests/low_precision_formats.rs.

usage: low_precision_reference.py VALUES.bin OUT_DIR

VALUES.bin holds little-endian float32 values. Everything is computed by onnx's
ReferenceEvaluator on one-node models (Cast opset 25, QuantizeLinear opset 25), and
written to OUT_DIR as raw files:

  decode_<name>.f32        Cast(code -> FLOAT) of every code 0 .. 2^bits - 1 (f32 LE)
  packed_<name>.bin        onnx.numpy_helper.from_array(...).raw_data of the codes
                           0 .. 2^bits - 1 followed by code 1 (an odd count)
  cast_<name>_sat<0|1>.u8  Cast(VALUES -> format, saturate) codes, one byte each
  cast_float8e8m0_sat<0|1>_<up|down|nearest>.u8   the same with round_mode
  quant_<name>_zp<zp>.u8   QuantizeLinear(VALUES, scale 1, zero point zp) codes for the
                           integer formats, for the zero points in ZERO_POINTS
  quant_<name>_sat<0|1>.u8 QuantizeLinear(VALUES, scale 1, output_dtype, saturate) codes
                           for the float8 formats and FLOAT4E2M1 (no zero point)

and prints the onnx version.
"""
import os
import sys
import warnings

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

FORMATS = {
    "float8e4m3fn": TensorProto.FLOAT8E4M3FN,
    "float8e4m3fnuz": TensorProto.FLOAT8E4M3FNUZ,
    "float8e5m2": TensorProto.FLOAT8E5M2,
    "float8e5m2fnuz": TensorProto.FLOAT8E5M2FNUZ,
    "uint4": TensorProto.UINT4,
    "int4": TensorProto.INT4,
    "float4e2m1": TensorProto.FLOAT4E2M1,
    "float8e8m0": TensorProto.FLOAT8E8M0,
    "uint2": TensorProto.UINT2,
    "int2": TensorProto.INT2,
}
BITS = {"uint4": 4, "int4": 4, "float4e2m1": 4, "uint2": 2, "int2": 2}
INTEGERS = {"uint4", "int4", "uint2", "int2"}
# Zero points tried for QuantizeLinear, per integer format (in range).
ZERO_POINTS = {
    "uint4": [0, 3, 15],
    "int4": [0, -3, 5, -8],
    "uint2": [0, 1, 3],
    "int2": [0, -1, -2, 1],
}
OPSET = [helper.make_opsetid("", 25)]


def run(node, inputs, output_type):
    """Runs a one-node model on inputs [(name, elem_type, array)]."""
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, t, a.shape) for n, t, a in inputs],
        [helper.make_tensor_value_info("y", output_type, None)],
    )
    model = helper.make_model(graph, opset_imports=OPSET)
    (y,) = ReferenceEvaluator(model).run(None, {n: a for n, _, a in inputs})
    return np.asarray(y)


def codes_of(y, name):
    """The per-element codes of a result in an ml_dtypes type (one byte each)."""
    assert y.dtype.itemsize == 1, (name, y.dtype)
    mask = (1 << BITS.get(name, 8)) - 1
    return y.view(np.uint8) & np.uint8(mask)


def as_type(codes, to):
    """uint8 codes viewed as the numpy (ml_dtypes) type of ONNX type `to`."""
    return codes.astype(np.uint8).view(helper.tensor_dtype_to_np_dtype(to))


def main():
    # numpy warns when the reference casts NaN or inf to an integer type; the result
    # (what this script reports) is what the reference does.
    warnings.filterwarnings("ignore", category=RuntimeWarning)
    values_path, out = sys.argv[1:3]
    x = np.fromfile(values_path, dtype="<f4").astype(np.float32)
    os.makedirs(out, exist_ok=True)

    def write(file, array):
        np.ascontiguousarray(array).tofile(os.path.join(out, file))

    for name, to in FORMATS.items():
        count = 1 << BITS.get(name, 8)
        codes = np.arange(count, dtype=np.uint8)
        decoded = run(
            helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT),
            [("x", to, as_type(codes, to))],
            TensorProto.FLOAT,
        )
        write(f"decode_{name}.f32", decoded.astype("<f4"))
        packed = numpy_helper.from_array(as_type(np.append(codes, 1), to), "p")
        write(f"packed_{name}.bin", np.frombuffer(packed.raw_data, dtype=np.uint8))

        rounds = ["up", "down", "nearest"] if name == "float8e8m0" else [None]
        for saturate in (0, 1):
            for round_mode in rounds:
                attrs = {"to": to, "saturate": saturate}
                suffix = f"_{round_mode}" if round_mode else ""
                if round_mode:
                    attrs["round_mode"] = round_mode
                y = run(
                    helper.make_node("Cast", ["x"], ["y"], **attrs),
                    [("x", TensorProto.FLOAT, x)],
                    to,
                )
                write(f"cast_{name}_sat{saturate}{suffix}.u8", codes_of(y, name))

        scale = ("s", TensorProto.FLOAT, np.array(1.0, dtype=np.float32))
        if name in INTEGERS:
            for zp in ZERO_POINTS[name]:
                zero_point = np.array(zp).astype(helper.tensor_dtype_to_np_dtype(to))
                y = run(
                    helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"]),
                    [("x", TensorProto.FLOAT, x), scale, ("z", to, zero_point)],
                    to,
                )
                write(f"quant_{name}_zp{zp}.u8", codes_of(y, name))
        elif name != "float8e8m0":
            for saturate in (0, 1):
                node = helper.make_node(
                    "QuantizeLinear",
                    ["x", "s"],
                    ["y"],
                    output_dtype=to,
                    saturate=saturate,
                )
                y = run(node, [("x", TensorProto.FLOAT, x), scale], to)
                write(f"quant_{name}_sat{saturate}.u8", codes_of(y, name))
    print(f"onnx {onnx.__version__}, ml_dtypes {ml_dtypes.__version__}, {x.size} values")


if __name__ == "__main__":
    main()
