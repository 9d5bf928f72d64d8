#!/usr/bin/env python3
"""The default (multi-versioned) library against a single-variant library and
onnxruntime, in one process, alternating call by call.

usage: benches/dispatch_vs_single.py MODEL.onnx [MODEL.onnx ...] [--single CPU]
                                     [--rounds N] [--nnc-args "..."] [--json FILE]

Each model is compiled twice: without `--cpu` (every x86-64 variant, the one the CPU
has chosen at run time) and with `--cpu CPU` (default `native`: what this process's
CPU runs). Under a CPUID profile (`../shared/tools/cpumask/run-as zen3 python3 ...`)
pass the preset that profile runs (`--single x86-64-v3`): the default library must then
choose the same variant, which the bit-identical outputs check. Prints ms per call of
each (median of --rounds), default/single and default/onnxruntime, and the two files'
sizes, and the wall time of each library's first call (where the default library's
chosen variant first copies the weights it derives from the stored ones). Single
thread: `infer`, onnxruntime with one intra-op thread.
"""
import argparse, json, os, shlex, statistics, sys, tempfile, time
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benches"))
from bench_models import NncModel, time_calls  # noqa: E402
from threads_vs_ort import cpu_line  # noqa: E402
from dynamic_vs_static import compile_to, random_feeds  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--single", default="native", help="the --cpu of the single-variant library")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--nnc-args", default="")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    import onnxruntime as ort
    profile = os.environ.get("CPUMASK", "none")
    print(f"CPU: {cpu_line()}; CPUID profile: {profile}; 1 thread; median of {a.rounds} alternating rounds")
    extra = shlex.split(a.nnc_args)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in a.models:
            name = os.path.splitext(os.path.basename(model))[0]
            multi_so, single_so = os.path.join(tmp, f"{name}.multi.so"), os.path.join(tmp, f"{name}.single.so")
            multi_size = compile_to(model, multi_so, extra)
            single_size = compile_to(model, single_so, ["--cpu", a.single, *extra])
            multi, single = NncModel(multi_so), NncModel(single_so)
            feeds = random_feeds(single.inputs, 0)
            multi.bind(feeds)
            single.bind(feeds)
            so_opts = ort.SessionOptions()
            so_opts.intra_op_num_threads = 1
            so_opts.inter_op_num_threads = 1
            sess = ort.InferenceSession(model, so_opts, providers=["CPUExecutionProvider"])
            ort_feeds = {i.name: feeds[i.name] for i in sess.get_inputs()}
            engines = {"default": multi.run, "single": single.run, "ort": lambda: sess.run(None, ort_feeds)}
            first = {}
            for k, fn in engines.items():
                t0 = time.perf_counter()
                fn()
                first[k] = (time.perf_counter() - t0) * 1e3
            for m, s in zip(multi.results, single.results):
                if not np.array_equal(m, s):
                    raise SystemExit(f"{name}: the default library's outputs differ from --cpu {a.single}'s "
                                     "(it ran another variant)")
            calls = max(1, int(0.2 / max(1e-4, time_calls(single.run, 1) / 1e3)))
            times = {k: [] for k in engines}
            for _ in range(a.rounds):
                for k, fn in engines.items():
                    times[k].append(time_calls(fn, calls))
            t = {k: statistics.median(x) for k, x in times.items()}
            row = {"model": name, "default_ms": t["default"], "single_ms": t["single"], "ort_ms": t["ort"],
                   "default_over_single": t["default"] / t["single"], "default_over_ort": t["default"] / t["ort"],
                   "default_first_ms": first["default"], "single_first_ms": first["single"],
                   "default_bytes": multi_size, "single_bytes": single_size,
                   "size_ratio": multi_size / single_size}
            rows.append(row)
            print(f"{name:<22} default {t['default']:8.3f}  --cpu {a.single} {t['single']:8.3f}  "
                  f"ort {t['ort']:8.3f} ms  default/single {row['default_over_single']:.3f}  "
                  f"default/ort {row['default_over_ort']:.3f}  size {multi_size}/{single_size} = "
                  f"{row['size_ratio']:.2f}  first call {first['default']:.1f}/{first['single']:.1f} ms")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpu": cpu_line(), "profile": profile, "single": a.single, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
