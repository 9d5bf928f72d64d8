#!/usr/bin/env python3
"""Writes tests/onnx_node_ops.tsv: for every node-suite case, the op types its model
uses (domain-qualified outside the default domain), so `nnc inspect` can say, for an
op it cannot compile, how many suite cases with that op pass (with
tests/onnx_node_passing.txt). The node suite is pinned (onnx 1.23.2), so the table
changes only when the suite does.

usage: scripts/suite_ops.py SUITE_DIR/node [-o tests/onnx_node_ops.tsv]
"""
import argparse, os, sys

import onnx


def ops_of(graph, out):
    for n in graph.node:
        out.add(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}:{n.op_type}")
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                ops_of(a.g, out)
            for g in a.graphs:
                ops_of(g, out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("suite")
    ap.add_argument("-o", "--output", default=os.path.join(os.path.dirname(__file__), "..", "tests", "onnx_node_ops.tsv"))
    args = ap.parse_args()
    rows = []
    for case in sorted(os.listdir(args.suite)):
        path = os.path.join(args.suite, case, "model.onnx")
        if not os.path.exists(path):
            continue
        ops = set()
        ops_of(onnx.load(path, load_external_data=False).graph, ops)
        rows.append(f"{case}\t{','.join(sorted(ops))}\n")
    with open(args.output, "w") as f:
        f.writelines(rows)
    print(f"{len(rows)} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
