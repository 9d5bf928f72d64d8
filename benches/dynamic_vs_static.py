#!/usr/bin/env python3
"""One library for a range of a dim against libraries compiled for each value, and
onnxruntime, in one process, alternating call by call.

usage: benches/dynamic_vs_static.py MODEL.onnx --dim NAME=MIN..MAX [--dim ...] [--values 1,8]
                                    [--rounds N] [--nnc-args "..."] [--json FILE]

MODEL must name the dims (ONNX dim_params, as `dynamic_axes` exports write). The model
is compiled once with `--dim NAME=MIN..MAX` (each dim given) and once per value with
`--dim NAME=VALUE`. With several dims, each value is a tuple in the order the dims are
given, `x`-separated: `--dim batch=1..8 --dim seq=1..512 --values 1x128,8x128`.
For each value, all three engines run the same random inputs (single thread: nnc's
`run` without a pool, onnxruntime with one intra-op thread); prints ms per call (the
statistic of --stat over rounds), dynamic/static and dynamic/onnxruntime, the
libraries' sizes, and checks the dynamic library's outputs against the static one's.
"""
import argparse, ctypes, json, os, shlex, statistics, subprocess, sys, tempfile
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benches"))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from bench_models import NncModel, NNC, time_calls  # noqa: E402
from threads_vs_ort import cpu_line  # noqa: E402


class RunOptions(ctypes.Structure):
    """`nnc_run_options` of ABI 4 (runtime-abi/include/nnc.h)."""
    _fields_ = [("size", ctypes.c_uint32), ("pool", ctypes.c_void_p), ("workspace_bytes", ctypes.c_uint64),
                ("dims", ctypes.POINTER(ctypes.c_int64))]


class DynamicRun:
    """A library with symbolic dims, run through `run` for given dim values."""

    def __init__(self, so, values, feeds, out_specs):
        self.model = NncModel(so)
        self.lib = self.model.lib
        self.lib.run.restype = ctypes.c_int32
        self.lib.workspace_size.restype = ctypes.c_uint64
        self.values = (ctypes.c_int64 * len(values))(*values)
        self.opts = RunOptions(ctypes.sizeof(RunOptions), None, 0, self.values)
        size = self.lib.workspace_size(ctypes.byref(self.opts))
        self.ws = np.zeros(size + 64, np.uint8)
        self.ws_ptr = ctypes.c_void_p(self.ws.ctypes.data + (-self.ws.ctypes.data) % 64)
        self.arrays = [feeds[n] for n, _, _ in self.model.inputs]
        self.results = [np.zeros(s, dtype=d) for _, d, s in out_specs]
        self.in_ptrs = (ctypes.c_void_p * len(self.arrays))(*[a.ctypes.data for a in self.arrays])
        self.out_ptrs = (ctypes.c_void_p * len(self.results))(*[r.ctypes.data for r in self.results])

    def __call__(self):
        rc = self.lib.run(self.in_ptrs, self.out_ptrs, self.ws_ptr, ctypes.byref(self.opts))
        if rc != 0:
            raise RuntimeError(f"run returned {rc}")


def compile_to(model, so, args):
    subprocess.run([NNC, "compile", model, "-o", so, *args], check=True, capture_output=True)
    return os.path.getsize(so)


def random_feeds(specs, seed):
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, dt, shape in specs:
        if np.issubdtype(dt, np.floating):
            feeds[name] = rng.standard_normal(shape).astype(dt)
        else:
            feeds[name] = rng.integers(0, 2, shape).astype(dt)
    return feeds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--dim", required=True, action="append", help="NAME=MIN..MAX (repeatable)")
    ap.add_argument("--values", default=None,
                    help="comma-separated, each x-separated per dim (default: the MINs, the MAXs)")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=0, help="calls per round (default: ~0.2 s)")
    ap.add_argument("--stat", choices=["median", "min"], default="median")
    ap.add_argument("--nnc-args", default="")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    names, bounds = [], []
    for d in a.dim:
        name, rng = d.split("=", 1)
        lo, hi = (int(x) for x in rng.split(".."))
        names.append(name)
        bounds.append((lo, hi))
    if a.values:
        values = [tuple(int(x) for x in v.split("x")) for v in a.values.split(",")]
    else:
        values = [tuple(lo for lo, _ in bounds), tuple(hi for _, hi in bounds)]
    if any(len(v) != len(names) for v in values):
        raise SystemExit("each value needs one number per --dim")
    name = ",".join(names)
    extra = shlex.split(a.nnc_args)
    stat = statistics.median if a.stat == "median" else min
    import onnxruntime as ort
    so_opts = ort.SessionOptions()
    so_opts.intra_op_num_threads = 1
    so_opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(a.model, so_opts, providers=["CPUExecutionProvider"])
    print(f"CPU: {cpu_line()}; 1 thread; {a.stat} of {a.rounds} alternating rounds")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        dyn_so = os.path.join(tmp, "dynamic.so")
        dyn_size = compile_to(a.model, dyn_so, [x for d in a.dim for x in ("--dim", d)] + extra)
        for v in values:
            label = "x".join(str(x) for x in v)
            st_so = os.path.join(tmp, f"static{label}.so")
            fixed = [x for n, k in zip(names, v) for x in ("--dim", f"{n}={k}")]
            st_size = compile_to(a.model, st_so, fixed + extra)
            static = NncModel(st_so)
            feeds = random_feeds(static.inputs, sum(v))
            static.bind(feeds)
            dynamic = DynamicRun(dyn_so, list(v), feeds, static.outputs)
            ort_feeds = {i.name: feeds[i.name] for i in sess.get_inputs()}
            engines = {"static": static.run, "dynamic": dynamic, "ort": lambda: sess.run(None, ort_feeds)}
            for fn in engines.values():
                fn()
            ort_out = engines["ort"]()
            for s, d, o in zip(static.results, dynamic.results, ort_out):
                if not np.allclose(s, d, rtol=1e-3, atol=1e-4):
                    raise SystemExit(f"{name}={label}: dynamic and static outputs differ")
                if not np.allclose(d, o, rtol=1e-3, atol=1e-4):
                    err = float(np.max(np.abs(d - o)))
                    raise SystemExit(f"{name}={label}: dynamic and onnxruntime outputs differ (max {err:g})")
            calls = a.calls or max(1, int(0.2 / max(1e-4, time_calls(static.run, 1) / 1e3)))
            times = {k: [] for k in engines}
            for _ in range(a.rounds):
                for k, fn in engines.items():
                    times[k].append(time_calls(fn, calls))
            t = {k: stat(x) for k, x in times.items()}
            row = {"value": label, "static_ms": t["static"], "dynamic_ms": t["dynamic"], "ort_ms": t["ort"],
                   "dynamic_over_static": t["dynamic"] / t["static"], "dynamic_over_ort": t["dynamic"] / t["ort"],
                   "static_bytes": st_size, "dynamic_bytes": dyn_size, "size_ratio": dyn_size / st_size}
            rows.append(row)
            print(f"{name}={label:<7} static {t['static']:8.3f}  dynamic {t['dynamic']:8.3f}  ort {t['ort']:8.3f} ms  "
                  f"dynamic/static {row['dynamic_over_static']:.3f}  dynamic/ort {row['dynamic_over_ort']:.3f}  "
                  f"size {dyn_size}/{st_size} = {row['size_ratio']:.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpu": cpu_line(), "model": a.model, "dims": a.dim, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
