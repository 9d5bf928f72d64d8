#!/usr/bin/env python3
"""nnc's `run` with a thread pool against onnxruntime with intra-op threads, in one
process, alternating call by call, wall time (the threads are the point).

usage: benches/threads_vs_ort.py MODELS_DIR [--models a,b] [--threads 1,2] [--rounds N]
                                  [--nnc-args "..."] [--baseline-nnc PATH] [--json FILE]

Each model is compiled with target/release/nnc (plus --nnc-args) and run through
`run()` with the header-only pthread pool of runtime-abi/include/nnc_pool.h (built here
into a small helper library with the system C compiler) of each thread count, and with
onnxruntime sessions of `intra_op_num_threads` = each count. Prints the median ms per
call, nnc's speedup over its own 1-thread run, and nnc/onnxruntime at equal threads.
Outputs of every thread count are checked bit-identical to the 1-thread run's.
With --baseline-nnc, the models are also compiled with that nnc binary (an earlier
build) and timed in the same rounds, for an A/B of two builds next to onnxruntime.
"""
import argparse, ctypes, json, os, platform, shlex, statistics, subprocess, sys, tempfile, time
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benches"))
from bench_models import NncModel, model_inputs, NNC  # noqa: E402

POOL_C = """
#include "nnc_pool.h"
nnc_pool *bench_pool_create(uint32_t n) { return nnc_pool_create(n); }
const nnc_thread_pool *bench_pool_get(nnc_pool *p) { return nnc_pool_get(p); }
void bench_pool_destroy(nnc_pool *p) { nnc_pool_destroy(p); }
"""


class RunOptions(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("pool", ctypes.c_void_p), ("workspace_bytes", ctypes.c_uint64)]


def build_pool_lib(tmp):
    src = os.path.join(tmp, "pool.c")
    lib = os.path.join(tmp, "libbenchpool.so")
    with open(src, "w") as f:
        f.write(POOL_C)
    subprocess.run(["cc", "-O2", "-std=c11", "-shared", "-fPIC", "-pthread",
                    "-I", os.path.join(ROOT, "runtime-abi", "include"), src, "-o", lib], check=True)
    pl = ctypes.CDLL(lib)
    pl.bench_pool_create.restype = ctypes.c_void_p
    pl.bench_pool_create.argtypes = [ctypes.c_uint32]
    pl.bench_pool_get.restype = ctypes.c_void_p
    pl.bench_pool_get.argtypes = [ctypes.c_void_p]
    pl.bench_pool_destroy.argtypes = [ctypes.c_void_p]
    return pl


class PooledRun:
    """One nnc model run through `run()` with one pool and its own workspace."""

    def __init__(self, model, pool):
        self.m = model
        self.lib = model.lib
        self.lib.workspace_size.restype = ctypes.c_uint64
        self.lib.run.restype = ctypes.c_int32
        self.opts = RunOptions(ctypes.sizeof(RunOptions), pool, 0)
        size = self.lib.workspace_size(ctypes.byref(self.opts))
        self.opts.workspace_bytes = size
        self.ws = np.zeros(size + 64, np.uint8)
        self.ws_ptr = ctypes.c_void_p(self.ws.ctypes.data + (-self.ws.ctypes.data) % 64)
        self.results = [np.zeros(s, dtype=d) for _, d, s in model.outputs]
        self.out_ptrs = (ctypes.c_void_p * len(self.results))(*[r.ctypes.data for r in self.results])

    def __call__(self):
        rc = self.lib.run(self.m.in_ptrs, self.out_ptrs, self.ws_ptr, ctypes.byref(self.opts))
        if rc != 0:
            raise RuntimeError(f"run returned {rc}")


def compile_model(nnc, path, so, nnc_args):
    """`path` compiled by the nnc binary `nnc` into `so`, loaded."""
    subprocess.run([nnc, "compile", path, "-o", so, *shlex.split(nnc_args)],
                   check=True, capture_output=True)
    return NncModel(so)


def cpu_line():
    name = platform.processor()
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and not name:
                    name = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    fl = line.split(":", 1)[1].split()
                    flags = " ".join(x for x in ["avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni"] if x in fl)
                    break
    except OSError:
        pass
    return f"{name} ({flags}), {os.cpu_count()} CPUs"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models_dir")
    ap.add_argument("--models", default="resnet18,mobilenet_v2,squeezenet1_1,vit_tiny_l4_d256,minibert_l4_d256,digits_cnn")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=0, help="calls per round (default: ~0.3 s)")
    ap.add_argument("--nnc-args", default="")
    ap.add_argument("--baseline-nnc", help="a second nnc binary, timed alongside")
    ap.add_argument("--stat", choices=["median", "min"], default="median",
                    help="per engine, the median or the fastest round (min resists bursts of "
                         "other load on shared machines)")
    ap.add_argument("--json")
    args = ap.parse_args()
    import onnxruntime as ort
    threads = [int(t) for t in args.threads.split(",")]
    print(f"CPU: {cpu_line()}; wall time, {args.stat} of {args.rounds} alternating rounds")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        pl = build_pool_lib(tmp)
        pools = {t: pl.bench_pool_create(t) for t in threads}
        for name in args.models.split(","):
            path = os.path.join(args.models_dir, f"{name}.onnx")
            so = os.path.join(tmp, f"{name}.so")
            model = compile_model(NNC, path, so, args.nnc_args)
            feeds = model_inputs(args.models_dir, name, model.inputs)
            model.bind(feeds)
            runs = {t: PooledRun(model, pl.bench_pool_get(pools[t])) for t in threads}
            base_runs = {}
            if args.baseline_nnc:
                base_so = os.path.join(tmp, f"{name}.base.so")
                base_model = compile_model(args.baseline_nnc, path, base_so, args.nnc_args)
                base_model.bind(feeds)
                base_runs = {t: PooledRun(base_model, pl.bench_pool_get(pools[t])) for t in threads}
            sessions = {}
            for t in threads:
                so_opts = ort.SessionOptions()
                so_opts.intra_op_num_threads = t
                so_opts.inter_op_num_threads = 1
                sess = ort.InferenceSession(path, so_opts, providers=["CPUExecutionProvider"])
                sessions[t] = (sess, {i.name: feeds[i.name] for i in sess.get_inputs()})
            engines = [(f"nnc{t}", runs[t]) for t in threads] + \
                      [(f"base{t}", r) for t, r in base_runs.items()] + \
                      [(f"ort{t}", (lambda s=s, f=f: s.run(None, f))) for t, (s, f) in sessions.items()]
            for _, fn in engines:
                fn()
            base = runs[threads[0]]
            for t in threads[1:]:
                for a, b in zip(base.results, runs[t].results):
                    if not np.array_equal(a, b):
                        sys.exit(f"{name}: outputs with {t} threads differ from {threads[0]} thread(s)")
            t0 = time.perf_counter()
            base()
            one = max(time.perf_counter() - t0, 1e-6)
            calls = args.calls or max(1, min(200, int(0.3 / one)))
            times = {n: [] for n, _ in engines}
            for _ in range(args.rounds):
                for n, fn in engines:
                    # onnxruntime's intra-op threads spin for a while after each run;
                    # let them stop before the next engine is timed.
                    time.sleep(0.05)
                    t0 = time.perf_counter()
                    for _ in range(calls):
                        fn()
                    times[n].append((time.perf_counter() - t0) * 1e3 / calls)
            stat = statistics.median if args.stat == "median" else min
            med = {n: stat(v) for n, v in times.items()}
            row = dict(model=name, **{k: round(v, 4) for k, v in med.items()})
            rows.append(row)
            cols = "  ".join(f"nnc{t} {med[f'nnc{t}']:8.3f}  ort{t} {med[f'ort{t}']:8.3f}  "
                             f"speedup {med[f'nnc{threads[0]}'] / med[f'nnc{t}']:.2f}  "
                             f"nnc/ort {med[f'nnc{t}'] / med[f'ort{t}']:.2f}" +
                             (f"  nnc/base {med[f'nnc{t}'] / med[f'base{t}']:.3f}" if base_runs else "")
                             for t in threads)
            print(f"{name:20s} {cols}", flush=True)
        for p in pools.values():
            pl.bench_pool_destroy(p)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
