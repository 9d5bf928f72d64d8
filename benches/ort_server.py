#!/usr/bin/env python3
"""onnxruntime timing server for `cargo bench -p nnc-benches --bench models`.

Runs onnxruntime's CPU provider with 1 intra-op and 1 inter-op thread (sequential
execution, all graph optimizations) and answers one line per request on stdout.
Fields are separated by tabs, so paths may hold spaces.

  hello                              -> ok <onnxruntime version>
  load <model.onnx> <NAME=FILE.npy>* -> ok            (loads the model and its inputs)
  run <N>                            -> ok <wall s> <cpu s>  (N calls of session.run, timed
                                        here: perf_counter and this thread's CPU time;
                                        with 1 intra-op thread onnxruntime runs on it)
  quit                               -> (exits)

Any failure answers `err <message>` and the server keeps serving.
If onnxruntime or numpy cannot be imported, the first line is `err ...` and it exits.
"""
import sys
import time

try:
    import numpy as np
    import onnxruntime as ort
except Exception as e:  # noqa: BLE001 - reported to the bench, which prints a SKIP
    print(f"err cannot import onnxruntime/numpy: {e}", flush=True)
    sys.exit(0)


def session(path):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def main():
    sess, feeds = None, None
    for line in sys.stdin:
        f = line.rstrip("\n").split("\t")
        try:
            if f[0] == "hello":
                reply = f"ok {ort.__version__}"
            elif f[0] == "load":
                sess = session(f[1])
                feeds = {}
                for spec in f[2:]:
                    name, path = spec.split("=", 1)
                    feeds[name] = np.load(path)
                wanted = {i.name for i in sess.get_inputs()}
                feeds = {k: v for k, v in feeds.items() if k in wanted}
                sess.run(None, feeds)
                reply = "ok"
            elif f[0] == "run":
                n = int(f[1])
                t0, c0 = time.perf_counter(), time.thread_time()
                for _ in range(n):
                    sess.run(None, feeds)
                reply = f"ok {time.perf_counter() - t0:.9f} {time.thread_time() - c0:.9f}"
            elif f[0] == "quit":
                return
            else:
                reply = f"err unknown request {f[0]!r}"
        except Exception as e:  # noqa: BLE001 - sent back to the bench
            reply = "err " + " ".join(str(e).split())
        print(reply, flush=True)


main()
