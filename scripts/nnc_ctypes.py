"""ctypes view of an nnc artifact's `model_info()` (runtime-abi/include/nnc.h), shared by
scripts/check_models.py and benches/bench_models.py."""
import ctypes
import numpy as np

# ONNX TensorProto.DataType codes of the dtypes these scripts feed and read.
DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 6: np.int32, 7: np.int64, 9: np.bool_, 11: np.float64}


class TensorInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int32), ("rank", ctypes.c_int32), ("dims", ctypes.POINTER(ctypes.c_int64))]


class ModelInfo(ctypes.Structure):
    _fields_ = [("abi_version", ctypes.c_uint32), ("num_inputs", ctypes.c_uint32), ("num_outputs", ctypes.c_uint32),
                ("inputs", ctypes.POINTER(TensorInfo)), ("outputs", ctypes.POINTER(TensorInfo)),
                ("workspace_size", ctypes.c_uint64), ("workspace_align", ctypes.c_uint64)]


def tensors(n, arr):
    """(name, numpy dtype, shape) of the first `n` entries of a TensorInfo array."""
    return [(arr[i].name.decode(), DTYPES[arr[i].dtype], tuple(arr[i].dims[k] for k in range(arr[i].rank))) for i in range(n)]


def model_info(lib):
    """The `model_info()` of a loaded library, as (inputs, outputs) lists of `tensors`."""
    lib.model_info.restype = ctypes.POINTER(ModelInfo)
    info = lib.model_info().contents
    return tensors(info.num_inputs, info.inputs), tensors(info.num_outputs, info.outputs)
