#!/usr/bin/env python3
"""nnc --quantize int8 against onnxruntime's quantize_static on the same model and the
same calibration data: output SQNR and cosine similarity vs float32 on held-out inputs,
artifact sizes, and single-threaded latency of nnc float32, nnc int8, onnxruntime
float32 and onnxruntime QDQ, timed in this process in alternating rounds.

usage: benches/quant_vs_ort.py MODEL.onnx --calibration CALIB.npy --held-out X.npy
                               [--rounds N] [--method minmax|percentile|entropy]
                               [--nnc-args "--int8-min-sqnr 20"]

CALIB.npy and X.npy stack samples along the batch axis of the model's single input.
onnxruntime is quantized as its docs recommend for x86: QDQ, uint8 activations, int8
weights, per-channel, MinMax calibration (or the same method as nnc's), on the
calibration samples nnc gets.
"""
import argparse, ctypes, os, shlex, statistics, subprocess, sys, tempfile, time
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
NNC = os.path.join(ROOT, "target", "release", "nnc")

from nnc_ctypes import model_info  # noqa: E402


class Nnc:
    def __init__(self, lib_path):
        self.lib = ctypes.CDLL(lib_path)
        ins, outs = model_info(self.lib)
        (_, self.in_dtype, self.in_shape), = ins
        self.out = np.zeros(outs[0][2], dtype=outs[0][1])
        self.x = np.zeros(self.in_shape, dtype=self.in_dtype)
        self.ip = (ctypes.c_void_p * 1)(self.x.ctypes.data)
        self.op = (ctypes.c_void_p * 1)(self.out.ctypes.data)

    def __call__(self, x):
        self.x[...] = x.reshape(self.in_shape)
        assert self.lib.infer(self.ip, self.op) == 0
        return self.out.copy()


def ort_session(path):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    name = s.get_inputs()[0].name
    return lambda x: s.run(None, {name: x})[0]


def quality(ref, got):
    ref, got = np.concatenate([r.reshape(1, -1) for r in ref]), np.concatenate([g.reshape(1, -1) for g in got])
    noise = ((got.astype(np.float64) - ref) ** 2).sum()
    sqnr = 10 * np.log10((ref.astype(np.float64) ** 2).sum() / max(noise, 1e-300))
    cos = np.mean((ref * got).sum(1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1)))
    return sqnr, cos


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--calibration", required=True)
    ap.add_argument("--held-out", required=True)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--method", default="minmax", choices=["minmax", "percentile", "entropy"])
    ap.add_argument("--nnc-args", default="", help="more options for the nnc int8 build (one string)")
    args = ap.parse_args()
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat,
                                          QuantType, quantize_static)
    from onnxruntime.quantization.shape_inference import quant_pre_process
    calib, held = np.load(args.calibration), np.load(args.held_out)
    in_shape = None
    with tempfile.TemporaryDirectory() as tmp:
        libs = {}
        for tag, extra in [("f32", []), ("int8", ["--quantize", "int8", "--calibration", args.calibration,
                                                  "--calibration-method", args.method]
                                                 + shlex.split(args.nnc_args))]:
            libs[tag] = os.path.join(tmp, f"lib{tag}.so")
            t = time.time()
            r = subprocess.run([NNC, "compile", args.model, "-o", libs[tag]] + extra, capture_output=True, text=True)
            if r.returncode:
                sys.exit(r.stderr)
            print(f"nnc {tag}: compiled in {time.time() - t:.1f} s, {os.path.getsize(libs[tag])} bytes")
        nnc_f32, nnc_i8 = Nnc(libs["f32"]), Nnc(libs["int8"])
        in_shape = nnc_f32.in_shape

        import onnx
        name = onnx.load(args.model, load_external_data=False).graph.input[0].name

        class Reader(CalibrationDataReader):
            def __init__(self):
                self.it = iter(calib)

            def get_next(self):
                x = next(self.it, None)
                return None if x is None else {name: x.reshape(in_shape).astype(np.float32)}

        pre = os.path.join(tmp, "pre.onnx")
        quant_pre_process(args.model, pre)
        qdq = os.path.join(tmp, "qdq.onnx")
        method = {"minmax": CalibrationMethod.MinMax, "percentile": CalibrationMethod.Percentile,
                  "entropy": CalibrationMethod.Entropy}[args.method]
        t = time.time()
        quantize_static(pre, qdq, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        calibrate_method=method)
        print(f"onnxruntime quantize_static: {time.time() - t:.1f} s, {os.path.getsize(qdq)} bytes "
              f"(float32 model {os.path.getsize(args.model)} bytes)")
        ort_f32, ort_qdq = ort_session(args.model), ort_session(qdq)
        xs = [h.reshape(in_shape).astype(np.float32) for h in held]
        ref = [ort_f32(x) for x in xs]
        for tag, f in [("nnc float32", nnc_f32), ("nnc int8", nnc_i8), ("onnxruntime QDQ", ort_qdq)]:
            s, c = quality(ref, [f(x) for x in xs])
            print(f"{tag:<18} vs onnxruntime float32 on {len(xs)} held-out inputs: SQNR {s:6.1f} dB, cosine {c:.6f}")
        engines = [("nnc float32", nnc_f32), ("nnc int8", nnc_i8), ("onnxruntime float32", ort_f32),
                   ("onnxruntime QDQ", ort_qdq)]
        times = {t: [] for t, _ in engines}
        x = xs[0]
        for _ in range(args.rounds):
            for tag, f in engines:
                f(x)
                t0 = time.thread_time()
                n = 0
                while time.thread_time() - t0 < 0.15 or n < 2:
                    f(x)
                    n += 1
                times[tag].append((time.thread_time() - t0) / n * 1e3)
        med = {t: statistics.median(v) for t, v in times.items()}
        print(f"median ms over {args.rounds} alternating rounds, 1 thread, thread CPU time:")
        for t, _ in engines:
            print(f"  {t:<20} {med[t]:8.3f} ms")
        print(f"  nnc int8 / onnxruntime float32 {med['nnc int8'] / med['onnxruntime float32']:.2f}, "
              f"nnc int8 / onnxruntime QDQ {med['nnc int8'] / med['onnxruntime QDQ']:.2f}")


main()
