#!/usr/bin/env python3
"""Regenerate the ONNX backend test suites (model + input/output .pb files).

    scripts/gen_onnx_suite.py OUT_DIR [--suite node|simple|pytorch-converted|pytorch-operator|real|all]

Writes OUT_DIR/<suite>/<case>/model.onnx and
OUT_DIR/<suite>/<case>/test_data_set_<N>/{input,output}_<K>.pb, the layout of
onnx's backend test data, whatever the source of each suite in the installed
onnx (1.23.2):

  node               generated from onnx.backend.test.case.node (the wheel
                     ships no node data); 1884 cases.
  simple             generated from onnx.backend.test.case.model; 26 cases
                     (the wheel's data/simple holds an older 23 of them).
  pytorch-converted  shipped as data in the wheel (no generator exists);
  pytorch-operator   copied verbatim.
  real               the nine model-zoo networks in their "light" form
                     (weights replaced by ConstantOfShape) shipped in the
                     wheel, with the input onnx's runner synthesizes and the
                     shipped expected output; data.json carries the per-model
                     rtol/atol. Needs no download.

The output is deterministic: the generators' global numpy RNG is seeded, and
cases are written in a fixed order. Existing case directories are replaced.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.backend.test
import onnx.backend.test.case.model as model_cases
import onnx.backend.test.case.node as node_cases
from onnx import numpy_helper
from onnx.backend.test.runner import Runner

SHIPPED_DATA = Path(onnx.backend.test.__file__).parent / "data"
SUITES = ("node", "simple", "pytorch-converted", "pytorch-operator", "real")
# What onnx 1.23.2 produces; a different count means a different onnx.
EXPECTED_COUNTS = {
    "node": 1884,
    "simple": 26,
    "pytorch-converted": 82,
    "pytorch-operator": 35,
    "real": 9,
}


def serialize_value(value: Any, value_info: onnx.ValueInfoProto) -> bytes:
    """Serializes one input or output the way onnx's cmd_tools.generate_data
    does: the proto kind follows the graph's declared type, not the value."""
    type_proto = value_info.type
    if type_proto.HasField("map_type"):
        proto = numpy_helper.from_dict(value, value_info.name)
    elif type_proto.HasField("sequence_type"):
        proto = numpy_helper.from_list(value, value_info.name)
    elif type_proto.HasField("optional_type"):
        proto = numpy_helper.from_optional(value, value_info.name)
    else:
        assert type_proto.HasField("tensor_type"), value_info
        if isinstance(value, onnx.TensorProto):
            proto = value  # already encoded (e.g. float8, int4 test data)
        else:
            proto = numpy_helper.from_array(value, value_info.name)
    return proto.SerializeToString()


def fresh_dir(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def write_case(case_dir: Path, model: onnx.ModelProto, data_sets: list) -> None:
    fresh_dir(case_dir)
    (case_dir / "model.onnx").write_bytes(model.SerializeToString())
    for n, (inputs, outputs) in enumerate(data_sets):
        set_dir = fresh_dir(case_dir / f"test_data_set_{n}")
        for k, value in enumerate(inputs):
            data = serialize_value(value, model.graph.input[k])
            (set_dir / f"input_{k}.pb").write_bytes(data)
        for k, value in enumerate(outputs):
            data = serialize_value(value, model.graph.output[k])
            (set_dir / f"output_{k}.pb").write_bytes(data)


def generate_node(suite_dir: Path) -> int:
    # Many node cases draw inputs from np.random without seeding it.
    np.random.seed(0)
    with warnings.catch_warnings():
        # Some cases compute inf/nan expectations on purpose.
        warnings.simplefilter("ignore", RuntimeWarning)
        cases = node_cases.collect_testcases()
    for case in cases:
        write_case(suite_dir / case.name, case.model, case.data_sets)
    return len(cases)


def generate_simple(suite_dir: Path) -> int:
    np.random.seed(0)
    cases = [c for c in model_cases.collect_testcases() if c.kind == "simple"]
    for case in cases:
        write_case(suite_dir / case.name, case.model, case.data_sets)
    return len(cases)


def generate_real(suite_dir: Path) -> int:
    """The runner's handling of light models (Runner._add_model_test), made
    into files: input = generate_dummy_data(random=False) for each graph input
    that is not an initializer; output = the shipped light_*_output_K.pb."""
    cases = [c for c in model_cases.collect_testcases() if c.kind == "real"]
    for case in cases:
        model_path = SHIPPED_DATA / "light" / f"light_{case.model_name}.onnx"
        model = onnx.load(model_path)
        case_dir = fresh_dir(suite_dir / case.name)
        shutil.copyfile(model_path, case_dir / "model.onnx")
        (case_dir / "data.json").write_text(
            json.dumps({"rtol": case.rtol, "atol": case.atol}, sort_keys=True)
        )
        set_dir = fresh_dir(case_dir / "test_data_set_0")
        initializers = {init.name for init in model.graph.initializer}
        real_inputs = [i for i in model.graph.input if i.name not in initializers]
        for k, value_info in enumerate(real_inputs):
            value = Runner.generate_dummy_data(value_info, seed=0, random=False)
            (set_dir / f"input_{k}.pb").write_bytes(serialize_value(value, value_info))
        for k in range(len(model.graph.output)):
            expected = model_path.with_name(f"light_{case.model_name}_output_{k}.pb")
            shutil.copyfile(expected, set_dir / f"output_{k}.pb")
    return len(cases)


def copy_shipped(suite: str, suite_dir: Path) -> int:
    cases = sorted(p for p in (SHIPPED_DATA / suite).iterdir() if p.is_dir())
    for case in cases:
        target = suite_dir / case.name
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(case, target)
    return len(cases)


GENERATORS = {
    "node": generate_node,
    "simple": generate_simple,
    "pytorch-converted": lambda d: copy_shipped("pytorch-converted", d),
    "pytorch-operator": lambda d: copy_shipped("pytorch-operator", d),
    "real": generate_real,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path, help="where <suite>/<case>/ directories go")
    parser.add_argument("--suite", choices=(*SUITES, "all"), default="all")
    args = parser.parse_args()

    suites = SUITES if args.suite == "all" else (args.suite,)
    mismatched = []
    for suite in suites:
        start = time.monotonic()
        suite_dir = args.out_dir / suite
        suite_dir.mkdir(parents=True, exist_ok=True)
        count = GENERATORS[suite](suite_dir)
        expected = EXPECTED_COUNTS[suite]
        note = "" if count == expected else f"  (EXPECTED {expected})"
        print(f"{suite}: {count} cases in {suite_dir} ({time.monotonic() - start:.1f}s){note}")
        if count != expected:
            mismatched.append(suite)
    if mismatched:
        print(
            f"case counts differ from onnx 1.23.2 for {', '.join(mismatched)} "
            f"(installed onnx {onnx.__version__})",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
