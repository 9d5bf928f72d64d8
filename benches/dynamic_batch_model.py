#!/usr/bin/env python3
"""Names axis 0 of a model's inputs and outputs `batch` (as exporting with
`dynamic_axes={..: {0: "batch"}}` would) in a model exported for batch 1, and makes
constant Reshape targets that fix that axis at 1 infer it instead (first entry -1, or 0
to copy it where the target already has a -1).

usage: benches/dynamic_batch_model.py MODEL.onnx OUT.onnx [--name batch]

For measuring one library compiled with `--dim batch=MIN..MAX` against static ones
(benches/dynamic_vs_static.py) on models that were exported static. nnc proves on
import whether the result really treats samples independently, and refuses it (naming
the node) where it does not.
"""
import argparse
import onnx
from onnx import numpy_helper


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--name", default="batch")
    a = ap.parse_args()
    m = onnx.load(a.model)
    g = m.graph
    for v in list(g.input) + list(g.output):
        dims = v.type.tensor_type.shape.dim
        if dims and dims[0].dim_value == 1:
            dims[0].dim_param = a.name
    targets = {n.input[1] for n in g.node if n.op_type == "Reshape" and len(n.input) > 1}
    inits = {t.name: t for t in g.initializer}
    consts = {n.output[0]: n for n in g.node if n.op_type == "Constant"}
    fixed = 0

    def free_batch(arr):
        arr[0] = 0 if (arr == -1).any() else -1

    for name in targets:
        if name in inits:
            arr = numpy_helper.to_array(inits[name]).copy()
            if arr.ndim == 1 and arr.size and arr[0] == 1:
                free_batch(arr)
                inits[name].CopyFrom(numpy_helper.from_array(arr, name))
                fixed += 1
        elif name in consts:
            attr = consts[name].attribute[0]
            arr = numpy_helper.to_array(attr.t).copy()
            if arr.ndim == 1 and arr.size and arr[0] == 1:
                free_batch(arr)
                attr.t.CopyFrom(numpy_helper.from_array(arr, attr.t.name))
                fixed += 1
    onnx.save(m, a.out)
    print(f"{a.out}: axis 0 named '{a.name}', {fixed} Reshape targets no longer fix it")


if __name__ == "__main__":
    main()
