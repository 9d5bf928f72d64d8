#!/usr/bin/env python3
"""Where onnxruntime (CPU provider, 1 intra-op thread) spends its time on a model:
its own per-node profiler (`SessionOptions.enable_profiling`), median µs per node over
the runs, largest first, with the op type. Compare with `scripts/profile_model.py`
(nnc, per node): onnxruntime names a fused node after its last output, with `_nchwc`
appended when it runs in the channel-blocked layout, and adds nodes of its own
(Reorder*, Concat copies). Profiling slows onnxruntime a little, so compare shares and
per-node times, and take whole-model ratios from the benches.

usage: scripts/profile_onnxruntime.py MODEL.onnx [--runs N] [--top N]

Needs onnxruntime and numpy; inputs are the model's saved inputs
(MODEL.input.NAME.npy beside it) when present, random otherwise.
"""
import argparse, collections, json, os, statistics, tempfile

import numpy as np
import onnxruntime as ort


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        so = ort.SessionOptions()
        so.intra_op_num_threads = so.inter_op_num_threads = 1
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(tmp, "ort")
        sess = ort.InferenceSession(args.model, so, providers=["CPUExecutionProvider"])
        base = args.model[:-len(".onnx")]
        feeds = {}
        for i in sess.get_inputs():
            saved = f"{base}.input.{i.name}.npy"
            if os.path.exists(saved):
                feeds[i.name] = np.load(saved)
            else:
                feeds[i.name] = np.random.default_rng(0).random(i.shape).astype(np.float32)
        for _ in range(args.runs):
            sess.run(None, feeds)
        with open(sess.end_profiling()) as f:
            events = json.load(f)
    times = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            times[(e["name"][: -len("_kernel_time")], e["args"].get("op_name"))].append(e["dur"])
    rows = sorted(((statistics.median(v), k) for k, v in times.items()), reverse=True)
    total = sum(us for us, _ in rows)
    print(f"{total / 1e3:.3f} ms per run summed over nodes (median µs per node, {args.runs} runs, profiling on)")
    for us, (name, op) in rows[: args.top]:
        print(f"{us:8.0f} µs  {op:<18} {name}")


main()
