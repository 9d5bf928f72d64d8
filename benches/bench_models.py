#!/usr/bin/env python3
"""Times nnc-compiled models against onnxruntime (1 intra-op thread) in one process,
alternating between the engines, and prints medians and nnc/onnxruntime ratios.

usage: benches/bench_models.py MODELS_DIR [--models a,b] [--rounds N] [--cpu CPU] [--json FILE]
                                [--clock cpu|wall] [--variant KIND=CHOICE ...]

Each model is compiled with target/release/nnc (build it first: cargo build --release),
loaded with ctypes, and run on the model's saved inputs (MODEL.input.NAME.npy) or on
random inputs of the declared shapes. One round times a batch of calls of each engine in
turn; the median over rounds of the per-call time is reported, so drift on the machine
hits both engines alike. tract is timed in-process by `cargo bench --bench models`.

`--variant KIND=CHOICE` (repeatable) also compiles the model with `--kernel KIND=CHOICE`
(`nnc compile --help` lists the kinds) and times it in the same rounds, printing its ms and its ratio
to the default build: an A/B of one change inside whole models that machine drift
cannot fake. A variant that starts with `--` is an `nnc compile` option instead
(`--variant=--quantize=fp16`); `--nnc-args "..."` adds options to every nnc build. `--clock cpu` (default) times the calling thread's CPU time, which
onnxruntime with one intra-op thread also runs on; `wall` times elapsed time.
"""
import argparse, ctypes, glob, json, os, shlex, statistics, subprocess, sys, tempfile, time
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
NNC = os.path.join(ROOT, "target", "release", "nnc")

from nnc_ctypes import model_info  # noqa: E402 (scripts/ is put on the path above)


def model_inputs(models_dir, name, specs):
    saved = {os.path.basename(p)[len(name) + 7:-4]: np.load(p) for p in glob.glob(os.path.join(models_dir, f"{name}.input.*.npy"))}
    rng = np.random.default_rng(0)
    out = {}
    for n, dt, shape in specs:
        if n in saved:
            out[n] = np.ascontiguousarray(saved[n].astype(dt).reshape(shape))
        elif np.issubdtype(dt, np.floating):
            out[n] = rng.standard_normal(shape).astype(dt)
        else:
            out[n] = np.ones(shape, dtype=dt)
    return out


class NncModel:
    def __init__(self, lib_path):
        self.lib = ctypes.CDLL(lib_path)
        self.inputs, self.outputs = model_info(self.lib)

    def bind(self, feeds):
        self.arrays = [feeds[n] for n, _, _ in self.inputs]
        self.results = [np.zeros(s, dtype=d) for _, d, s in self.outputs]
        self.in_ptrs = (ctypes.c_void_p * len(self.arrays))(*[a.ctypes.data for a in self.arrays])
        self.out_ptrs = (ctypes.c_void_p * len(self.results))(*[r.ctypes.data for r in self.results])

    def run(self):
        rc = self.lib.infer(self.in_ptrs, self.out_ptrs)
        if rc != 0:
            raise RuntimeError(f"infer returned {rc}")


CLOCK = time.thread_time


def time_calls(fn, calls):
    t0 = CLOCK()
    for _ in range(calls):
        fn()
    return (CLOCK() - t0) / calls * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models_dir")
    ap.add_argument("--models", default="resnet18,mobilenet_v2,squeezenet1_1,vit_tiny_l4_d256,minibert_l4_d256,digits_cnn")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--budget-ms", type=float, default=150.0, help="target time per engine per round")
    ap.add_argument("--cpu", default="native")
    ap.add_argument("--json", help="write the results as JSON to this file")
    ap.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    ap.add_argument("--variant", action="append", default=[], metavar="KIND=CHOICE",
                    help="also time a build compiled with --kernel KIND=CHOICE (or, starting "
                         "with --, with that nnc compile option)")
    ap.add_argument("--nnc-args", default="",
                    help="more `nnc compile` options for every nnc build (one string), e.g. "
                         "\"--quantize int8 --calibration calib/{model}.npy\" ({model}: the model's name)")
    args = ap.parse_args()
    global CLOCK
    CLOCK = time.thread_time if args.clock == "cpu" else time.perf_counter
    # (environment, extra nnc compile arguments) per variant.
    variants = [({}, v.split("=", 1)) if v.startswith("--") else ({}, ["--kernel", v])
                for v in args.variant]
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    rows = []
    extra = "".join(f"  {v:>24} {'/nnc':>6}" for v in args.variant)
    print(f"{'model':<20} {'nnc ms':>9} {'ort ms':>9} {'nnc/ort':>8}{extra}  "
          f"(median of {args.rounds} rounds, 1 thread, cpu {args.cpu}, {args.clock} time)")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            onnx_path = os.path.join(args.models_dir, name + ".onnx")
            models = []
            for i, (env, flags) in enumerate([({}, [])] + variants):
                lib = os.path.join(tmp, f"lib{name}.{i}.so")
                r = subprocess.run([NNC, "compile", onnx_path, "--cpu", args.cpu, "-o", lib]
                                   + shlex.split(args.nnc_args.replace("{model}", name)) + flags,
                                   capture_output=True, text=True, env={**os.environ, **env})
                if r.returncode != 0:
                    print(f"{name}: compile failed: {r.stderr.strip()}")
                    break
                models.append(NncModel(lib))
            if len(models) != 1 + len(variants):
                continue
            feeds = model_inputs(args.models_dir, name, models[0].inputs)
            for m in models:
                m.bind(feeds)
            sess = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
            ort_feeds = {i.name: feeds[i.name] for i in sess.get_inputs()}
            run_ort = lambda: sess.run(None, ort_feeds)
            engines = [m.run for m in models] + [run_ort]
            # Warm up and size the batch of calls per round from one timed call.
            for fn in engines:
                fn()
            once = max(time_calls(fn, 2) for fn in engines)
            calls = max(1, int(args.budget_ms / max(once, 1e-3)))
            times = [[] for _ in engines]
            for _ in range(args.rounds):
                for t, fn in zip(times, engines):
                    t.append(time_calls(fn, calls))
            med = [statistics.median(t) for t in times]
            n, o = med[0], med[-1]
            row = {"model": name, "nnc_ms": n, "onnxruntime_ms": o, "nnc_over_onnxruntime": n / o}
            cols = ""
            for v, ms in zip(args.variant, med[1:-1]):
                row.setdefault("variants", {})[v] = ms
                cols += f"  {ms:24.3f} {ms / n:6.2f}"
            rows.append(row)
            print(f"{name:<20} {n:9.3f} {o:9.3f} {n / o:8.2f}{cols}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d"), "cpu": args.cpu, "clock": args.clock, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
