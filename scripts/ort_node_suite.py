#!/usr/bin/env python3
"""Run onnxruntime on every case of a generated ONNX backend suite.

    scripts/ort_node_suite.py SUITE_DIR [-o RESULTS.tsv] [--rtol 1e-3] [--atol 1e-4]

SUITE_DIR is a suite directory (OUT_DIR/node) or a whole OUT_DIR of
gen_onnx_suite.py: every directory below it holding a model.onnx is a case,
named by its path relative to SUITE_DIR. Writes one `case<TAB>status<TAB>message`
line per case (to RESULTS.tsv, or stdout), status being

  pass   every data set matched,
  fail   onnxruntime ran but an output differs (or has the wrong shape/dtype),
  error  onnxruntime could not load or run the model,

and prints the totals to stderr. This is the reference point nnc's own
results are compared with.

Outputs are compared exactly as onnx's backend runner does
(Runner.assert_similar_outputs: per-output np.testing.assert_allclose, exact
comparison for strings/objects, NaN == NaN, shape and dtype must match,
sequences compared element by element), with one rtol/atol for every case.
Tensors of types numpy cannot hold (bfloat16, float8, int4, ...) cross into
and out of onnxruntime as raw bytes, since its Python binding rejects the
ml_dtypes arrays onnx decodes them to.
"""

from __future__ import annotations

import argparse
import ctypes
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper
from onnx.backend.test.runner import Runner

MESSAGE_LIMIT = 300

# Element types onnxruntime's Python binding exchanges as numpy arrays. The
# others (bfloat16, float8*, int4/uint4, int2/uint2, float4/float6) onnx
# represents with ml_dtypes arrays, which the binding rejects; cases using
# them go through raw bytes instead (see run_with_raw_tensors).
NUMPY_NATIVE_TYPES = set(range(onnx.TensorProto.UNDEFINED + 1, onnx.TensorProto.COMPLEX128 + 1))


def load_value(path: Path, type_proto: onnx.TypeProto) -> Any:
    """Reads a .pb test value as onnx's runner does (Runner._load_proto): the
    file's proto kind is given by the graph's declared type."""
    data = path.read_bytes()
    if type_proto.HasField("sequence_type"):
        proto = onnx.SequenceProto()
        proto.ParseFromString(data)
        return numpy_helper.to_list(proto)
    if type_proto.HasField("optional_type"):
        proto = onnx.OptionalProto()
        proto.ParseFromString(data)
        return numpy_helper.to_optional(proto)
    if type_proto.HasField("tensor_type"):
        proto = onnx.TensorProto()
        proto.ParseFromString(data)
        return numpy_helper.to_array(proto)
    raise NotImplementedError(f"{path.name}: values of type {type_proto} are not supported")


def data_sets(case_dir: Path, graph: onnx.GraphProto) -> list[tuple[dict, list]]:
    """(feeds by input name, expected outputs) for each test_data_set_N.

    input_K is the K-th graph input that is not an initializer: older models
    (the "real" suite) also list their weights as graph inputs, first."""
    initializers = {init.name for init in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initializers]
    sets = []
    for set_dir in sorted(case_dir.glob("test_data_set_*")):
        n_inputs = len(list(set_dir.glob("input_*.pb")))
        n_outputs = len(list(set_dir.glob("output_*.pb")))
        feeds = {
            inputs[k].name: load_value(set_dir / f"input_{k}.pb", inputs[k].type)
            for k in range(n_inputs)
        }
        expected = [
            load_value(set_dir / f"output_{k}.pb", graph.output[k].type)
            for k in range(n_outputs)
        ]
        sets.append((feeds, expected))
    return sets


def tensor_elem_type(value_info: onnx.ValueInfoProto) -> int | None:
    t = value_info.type
    return t.tensor_type.elem_type if t.HasField("tensor_type") else None


def needs_raw_tensors(graph: onnx.GraphProto) -> bool:
    types = (tensor_elem_type(v) for v in (*graph.input, *graph.output))
    return any(t is not None and t not in NUMPY_NATIVE_TYPES for t in types)


def to_ort_value(value: np.ndarray, elem_type: int) -> ort.OrtValue:
    """An OrtValue holding `value` as ONNX type `elem_type`, filled from the
    TensorProto raw_data encoding, which is also onnxruntime's memory layout
    (little-endian, sub-byte types packed LSB first)."""
    if elem_type in NUMPY_NATIVE_TYPES:
        return ort.OrtValue.ortvalue_from_numpy(value)
    raw = numpy_helper.from_array(value).raw_data
    ort_value = ort.OrtValue.ortvalue_from_shape_and_type(list(value.shape), elem_type)
    if ort_value.tensor_size_in_bytes() != len(raw):
        raise ValueError(f"{len(raw)} bytes do not fill a {value.shape} tensor of type {elem_type}")
    ctypes.memmove(ort_value.data_ptr(), raw, len(raw))
    return ort_value


def from_ort_value(ort_value: ort.OrtValue, elem_type: int) -> np.ndarray:
    """The inverse of to_ort_value: an array of the dtype onnx uses for
    `elem_type` (an ml_dtypes one for the exotic types)."""
    if elem_type in NUMPY_NATIVE_TYPES:
        return ort_value.numpy()
    raw = ctypes.string_at(ort_value.data_ptr(), ort_value.tensor_size_in_bytes())
    proto = onnx.helper.make_tensor("", elem_type, ort_value.shape(), raw, raw=True)
    return numpy_helper.to_array(proto)


def run_with_raw_tensors(
    session: ort.InferenceSession, graph: onnx.GraphProto, feeds: dict
) -> list[np.ndarray]:
    """session.run for graphs with tensors of types numpy cannot carry."""
    inputs = {v.name: v for v in graph.input}
    ort_feeds = {
        name: to_ort_value(value, tensor_elem_type(inputs[name])) for name, value in feeds.items()
    }
    names = [o.name for o in graph.output]
    results = session.run_with_ort_values(names, ort_feeds)
    return [from_ort_value(r, tensor_elem_type(o)) for r, o in zip(results, graph.output, strict=True)]


def one_line(error: BaseException) -> str:
    text = re.sub(r"\s+", " ", f"{type(error).__name__}: {error}").strip()
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."


def run_case(case_dir: Path, rtol: float, atol: float) -> tuple[str, str]:
    """Returns (status, message) for one case."""
    try:
        model = onnx.load(case_dir / "model.onnx")
        sets = data_sets(case_dir, model.graph)
        session = ort.InferenceSession(
            str(case_dir / "model.onnx"), providers=["CPUExecutionProvider"]
        )
        raw = needs_raw_tensors(model.graph)
        output_names = [o.name for o in model.graph.output]

        def run(feeds: dict) -> list:
            if raw:
                return run_with_raw_tensors(session, model.graph, feeds)
            return session.run(output_names, feeds)

        results = [(run(feeds), expected) for feeds, expected in sets]
    except Exception as e:  # noqa: BLE001 - any failure to load or run is an "error"
        return "error", one_line(e)
    try:
        for outputs, expected in results:
            Runner.assert_similar_outputs(expected, outputs, rtol=rtol, atol=atol)
    except Exception as e:  # noqa: BLE001 - the runner also fails on TypeError etc.
        return "fail", one_line(e)
    return "pass", ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suite_dir", type=Path)
    parser.add_argument("-o", "--output", type=Path, help="results file (default: stdout)")
    parser.add_argument("--rtol", type=float, default=1e-3)
    parser.add_argument("--atol", type=float, default=1e-4)
    args = parser.parse_args()

    # Fatal messages only: failures are reported in the results instead.
    ort.set_default_logger_severity(4)
    cases = sorted(p.parent for p in args.suite_dir.rglob("model.onnx"))
    if not cases:
        print(f"no model.onnx below {args.suite_dir}", file=sys.stderr)
        return 1

    out = args.output.open("w") if args.output else sys.stdout
    counts = {"pass": 0, "fail": 0, "error": 0}
    start = time.monotonic()
    for n, case_dir in enumerate(cases, 1):
        status, message = run_case(case_dir, args.rtol, args.atol)
        counts[status] += 1
        out.write(f"{case_dir.relative_to(args.suite_dir)}\t{status}\t{message}\n")
        if n % 250 == 0:
            print(f"... {n}/{len(cases)}", file=sys.stderr)
    if out is not sys.stdout:
        out.close()

    print(
        f"onnxruntime {ort.__version__}: {len(cases)} cases, {counts['pass']} pass, "
        f"{counts['fail']} fail, {counts['error']} error "
        f"(rtol {args.rtol}, atol {args.atol}, {time.monotonic() - start:.0f}s)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
