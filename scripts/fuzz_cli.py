#!/usr/bin/env python3
"""Structure-aware mutants through the whole command line: `nnc verify`.

    scripts/fuzz_cli.py NNC SUITE_NODE_DIR [--models DIR] [--ops A,B,...] [--mutants N]
                        [--seed S] [--timeout SECONDS] [--log FILE]

Takes the ONNX node-suite cases of the given ops (default: the ops that decide
their output extents or carry subgraphs or state: NonMaxSuppression, TopK,
Unique, Loop, Scan, If, LSTM, GRU, RNN, Attention, NonZero) and the models in
--models (e.g. the reference models), and for each makes N mutants: an int,
ints or float attribute set to an edge value or dropped, an input axis turned
into a symbolic dim compiled with `--dim d=1..K` (the value used, or past it),
or the model unchanged with its axis 0 ranged. Each runs `nnc verify` (the
compiled library against nnc's interpreter and onnxruntime) under a time limit.

Findings, printed and counted per kind: an exit other than 0 or 1 (a panic,
abort, signal), a timeout (a hang), a compiled output that differs from the
interpreter's, and one that differs from onnxruntime's where both accept the
model (onnxruntime refusing a hostile mutant is not a finding). Exit status 1
when there is any finding of the first three kinds.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx
from onnx import AttributeProto

DEFAULT_OPS = "NonMaxSuppression,TopK,Unique,Loop,Scan,If,LSTM,GRU,RNN,Attention,NonZero"
EDGE_INTS = [0, 1, -1, 2, 3, 7, 2**31, 2**40, 2**62, 2**63 - 1, -(2**63)]
EDGE_FLOATS = [0.0, -1.0, 1e-30, 1e30, float("inf"), float("nan"), 0.5]


def mutate(model: onnx.ModelProto, rng: random.Random) -> tuple[onnx.ModelProto, list[str], str]:
    """A mutant of `model`, the extra `nnc verify` flags it needs, and what changed."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    kind = rng.choice(["attr", "attr", "attr", "dim", "dim"])
    nodes = [n for n in g.node if n.attribute]
    if kind == "attr" and nodes:
        node = rng.choice(nodes)
        attr = rng.choice(list(node.attribute))
        if rng.random() < 0.15:
            node.attribute.remove(attr)
            return m, [], f"{node.op_type}: dropped {attr.name}"
        if attr.type == AttributeProto.INT:
            attr.i = rng.choice(EDGE_INTS)
            return m, [], f"{node.op_type}: {attr.name}={attr.i}"
        if attr.type == AttributeProto.INTS and len(attr.ints):
            i = rng.randrange(len(attr.ints))
            attr.ints[i] = rng.choice(EDGE_INTS)
            return m, [], f"{node.op_type}: {attr.name}[{i}]={attr.ints[i]}"
        if attr.type == AttributeProto.FLOAT:
            attr.f = rng.choice(EDGE_FLOATS)
            return m, [], f"{node.op_type}: {attr.name}={attr.f}"
    # A symbolic axis ranged on the command line.
    inputs = [i for i in g.input if i.type.HasField("tensor_type") and len(i.type.tensor_type.shape.dim)]
    if not inputs:
        return m, [], "unchanged"
    inp = rng.choice(inputs)
    dims = inp.type.tensor_type.shape.dim
    axis = rng.randrange(len(dims))
    value = dims[axis].dim_value or 1
    dims[axis].ClearField("dim_value")
    dims[axis].dim_param = "d"
    hi = max(value, 1) * rng.choice([1, 2, 4])
    return m, ["--dim", f"d=1..{hi}"], f"{inp.name} axis {axis} ({value}) as d=1..{hi}"


def classify(proc: subprocess.CompletedProcess | None) -> str:
    if proc is None:
        return "timeout"
    if proc.returncode not in (0, 1):
        return f"exit {proc.returncode}"
    out = proc.stdout
    if "compiled vs interpreter" in out:
        interp = out.split("compiled vs interpreter", 1)[1].split("onnxruntime", 1)[0]
        if "FAIL" in interp:
            return "differs from the interpreter"
        if "compiled vs onnxruntime" in out and "FAIL" in out.split("compiled vs onnxruntime", 1)[1]:
            return "differs from onnxruntime"
        return "verified"
    return "refused"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("nnc")
    ap.add_argument("node_dir", type=Path)
    ap.add_argument("--models", type=Path)
    ap.add_argument("--ops", default=DEFAULT_OPS)
    ap.add_argument("--mutants", type=int, default=6)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--log", type=Path)
    args = ap.parse_args()
    ops = set(args.ops.split(","))
    sources: list[Path] = []
    for case in sorted(args.node_dir.iterdir()):
        f = case / "model.onnx"
        if f.is_file() and any(n.op_type in ops for n in onnx.load(f).graph.node):
            sources.append(f)
    if args.models:
        sources += sorted(args.models.glob("*.onnx"))
    rng = random.Random(args.seed)
    counts: dict[str, int] = {}
    findings: list[str] = []
    log = open(args.log, "w") if args.log else None
    with tempfile.TemporaryDirectory() as tmp:
        for src in sources:
            model = onnx.load(src)
            for k in range(args.mutants):
                mutant, flags, what = mutate(model, rng) if k else (model, [], "unchanged")
                path = Path(tmp) / f"{src.parent.name}_{k}.onnx"
                onnx.save(mutant, path)
                cmd = [args.nnc, "verify", str(path), *flags]
                try:
                    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
                except subprocess.TimeoutExpired:
                    proc = None
                verdict = classify(proc)
                counts[verdict] = counts.get(verdict, 0) + 1
                line = f"{src.parent.name if src.name == 'model.onnx' else src.name} #{k} [{what}] {' '.join(flags)}: {verdict}"
                if log:
                    print(line, file=log, flush=True)
                if verdict not in ("verified", "refused"):
                    detail = "" if proc is None else (proc.stderr.strip().splitlines() or [""])[-1][:200]
                    findings.append(f"{line} {detail}")
                    print(findings[-1], flush=True)
    total = sum(counts.values())
    print(f"{total} runs of {len(sources)} models: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    bad = [f for f in findings if "onnxruntime" not in f]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
