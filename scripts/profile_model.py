#!/usr/bin/env python3
"""Where a compiled model spends its time: samples `infer` with `perf record` and
attributes each sample to the graph node whose code (node function or the GEMM /
out-of-line kernels it defined) was running.

usage: profile_model.py MODEL.onnx [--seconds S] [--cpu CPU] [--top N] [--nnc-args "ARGS"]
                        [--dims V,V,...] [--symbols] [--keep DIR]

--nnc-args passes more options to `nnc compile`, e.g.
`--nnc-args "--quantize int8 --calibration calib.npy"`.

Needs perf and gcc. The model is compiled to an object (`nnc compile -o X.o`, which
keeps the local symbols `nnc_node_K` and `.LfnID`) and linked with gcc into a .so
perf can symbolize. Kernels are anonymous functions declared while the node that
defines them is built, before the node function itself, so `.LfnID` belongs to the
first `nnc_node_K` declared after ID.
Inputs are random (or MODEL.input.NAME.npy beside the model). A library compiled with
ranges (`--nnc-args "--dim size=64..320"`) runs through `run` at `--dims`, its shapes
from `shapes`. Prints the share of
samples per node (top N) and per op kind; shares are of all samples of the process,
so the remainder is Python's loop and library code.
"""
import argparse, collections, os, re, shlex, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NNC = os.path.join(ROOT, "target", "release", "nnc")

LOOP = r'''
import sys, time, os
sys.path.insert(0, os.path.join(sys.argv[4], "benches"))
import importlib.util
spec = importlib.util.spec_from_file_location("bench_models", os.path.join(sys.argv[4], "benches", "bench_models.py"))
src = open(spec.origin).read().replace("\nmain()\n", "\n")
ns = {"__file__": spec.origin}
exec(compile(src, spec.origin, "exec"), ns)
model = ns["NncModel"](sys.argv[1])
dims = [int(x) for x in sys.argv[6].split(",")] if sys.argv[6] else []
call = model.run
if dims:
    import ctypes, numpy as np
    lib = model.lib
    values = (ctypes.c_int64 * len(dims))(*dims)
    ranks = [len(s) for _, _, s in model.inputs + model.outputs]
    shapes = (ctypes.c_int64 * sum(ranks))()
    if lib.shapes(values, shapes) != 0:
        raise SystemExit(f"shapes({dims}) failed")
    at, concrete = 0, []
    for r in ranks:
        concrete.append(tuple(shapes[at:at + r]))
        at += r
    n_in = len(model.inputs)
    model.inputs = [(n, d, s) for (n, d, _), s in zip(model.inputs, concrete[:n_in])]
    model.outputs = [(n, d, s) for (n, d, _), s in zip(model.outputs, concrete[n_in:])]
    class RunOptions(ctypes.Structure):
        _fields_ = [("size", ctypes.c_uint32), ("pool", ctypes.c_void_p), ("workspace_bytes", ctypes.c_uint64),
                    ("dims", ctypes.POINTER(ctypes.c_int64))]
    opts = RunOptions(ctypes.sizeof(RunOptions), None, 0, values)
    lib.workspace_size.restype = ctypes.c_uint64
    ws = np.zeros(lib.workspace_size(ctypes.byref(opts)) + 64, np.uint8)
    ws_ptr = ctypes.c_void_p(ws.ctypes.data + (-ws.ctypes.data) % 64)
    def call():
        if lib.run(model.in_ptrs, model.out_ptrs, ws_ptr, ctypes.byref(opts)) != 0:
            raise RuntimeError("run failed")
model.bind(ns["model_inputs"](os.path.dirname(sys.argv[2]), os.path.basename(sys.argv[2])[:-5], model.inputs))
end = time.time() + float(sys.argv[3])
runs, cpu = 0, time.thread_time()
while time.time() < end:
    call()
    runs += 1
with open(sys.argv[5], "w") as f:
    f.write(str((time.thread_time() - cpu) / runs * 1e3))
'''


def node_kinds(ir_dump):
    """Op kind per node index, from `--dump-ir` (one `%out: type = Op...` line per node)."""
    kinds = []
    for line in ir_dump.splitlines():
        m = re.match(r"\s*%.*? = (\w+)(\((\w+)\))?", line)
        if not m:
            continue
        kind = m.group(1) + (f"({m.group(3)})" if m.group(3) else "")
        if kind == "Conv":
            k = re.search(r"kernel: \[([\d, ]+)\]", line).group(1).replace(", ", "x")
            s = re.search(r"strides: \[(\d+)", line).group(1)
            g = re.search(r"group: (\d+)", line).group(1)
            kind = f"Conv {k} s{s}" + (" grouped" if g != "1" else "")
        kinds.append((kind, line.split(" = ")[0].strip()))
    return kinds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--cpu", default="native")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--nnc-args", default="", help="more `nnc compile` options (one string)")
    ap.add_argument("--dims", default="",
                    help="comma-separated values of the model's symbolic dims (in `nnc_model_info` order) "
                         "to run at, for a library compiled with ranges")
    ap.add_argument("--symbols", action="store_true",
                    help="also print the top symbols (a node's own code vs the kernels it calls)")
    ap.add_argument("--keep", metavar="DIR",
                    help="keep the object, library and perf.data in DIR (for `perf annotate`)")
    args = ap.parse_args()
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or scratch
        obj, lib, data, per_run = (os.path.join(tmp, n) for n in ("m.o", "libm.so", "perf.data", "ms"))
        r = subprocess.run([NNC, "compile", args.model, "--cpu", args.cpu, "-o", obj, "--dump-ir"]
                           + shlex.split(args.nnc_args),
                           capture_output=True, text=True, check=True)
        kinds = node_kinds(r.stdout + r.stderr)
        subprocess.run(["gcc", "-shared", "-o", lib, obj], check=True)
        subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-o", data, sys.executable, "-c", LOOP,
                        lib, os.path.abspath(args.model), str(args.seconds), ROOT, per_run, args.dims],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        nm = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
        report = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "sym", "--stdio"],
                                capture_output=True, text=True, check=True).stdout
        ms = float(open(per_run).read())
    kernels = {int(l.split()[2][4:], 16) for l in nm.splitlines() if " .Lfn" in l and l.split()[1] in "tT"}
    # A split node's task variant (`nnc_node_K_task`) follows its whole function.
    nodes = sorted(int(m.group(1)) for m in re.finditer(r"\snnc_node_(\d+)(?:_task)?$", nm, re.M))
    # Walk the function ids: ids that are not kernels are the node functions, in order.
    # A node function is declared once its code is built (variants compare it with
    # the earlier ones' first), so the kernels it declared come right before it.
    owner, node_iter, pending = {}, iter(nodes), []
    for fid in range(max(kernels, default=0) + 1):
        if fid in kernels:
            pending.append(fid)
        else:
            node = next(node_iter, None)
            owner.update((k, node) for k in pending)
            pending = []
    per_node = collections.Counter()
    for line in report.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+\[\.\]\s+(\S+)", line)
        if not m:
            continue
        share, sym = float(m.group(1)), m.group(2)
        if sym.startswith(".Lfn"):
            per_node[owner.get(int(sym[4:], 16))] += share
        elif sym.startswith("nnc_node_"):
            per_node[int(sym[9:])] += share
    if args.symbols:
        print(f"{'share':>7}  symbol (owning node)")
        shown = 0
        for line in report.splitlines():
            m = re.match(r"\s*([\d.]+)%\s+\[\.\]\s+(\S+)", line)
            if m and shown < args.top:
                sym = m.group(2)
                node = owner.get(int(sym[4:], 16)) if sym.startswith(".Lfn") else None
                print(f"{float(m.group(1)):6.1f}%  {sym}" + (f" (node {node})" if node is not None else ""))
                shown += 1
        print()
    per_kind = collections.Counter()
    print(f"{ms:.4g} ms per run (thread CPU time, while sampled); ms column = share × that")
    print(f"{'share':>7} {'ms':>6}  node")
    for k, share in per_node.most_common():
        kind, out = kinds[k] if k is not None and k < len(kinds) else ("?", "?")
        per_kind[kind] += share
    for k, share in per_node.most_common(args.top):
        kind, out = kinds[k] if k is not None and k < len(kinds) else ("?", "?")
        print(f"{share:6.1f}% {share * ms / 100:6.3g}  {k}: {kind} -> {out}")
    print(f"\n{'share':>7} {'ms':>6}  op kind (all nodes; {sum(per_node.values()):.1f}% of samples in model code)")
    for kind, share in per_kind.most_common():
        print(f"{share:6.1f}% {share * ms / 100:6.3g}  {kind}")


main()
