#!/usr/bin/env python3
"""Top-1 accuracy of a classifier compiled by nnc, float32 and quantized side by side,
over a labelled set, plus how often the two agree and the quantized logits' SQNR and
cosine similarity against float32's.

usage: accuracy.py MODEL.onnx --images X.npy --labels Y.npy --quantize fp16|int8
                   [--calibration PATH] [--calibration-method M]
                   [--nnc-args "--int8-bias-correction off"]

X.npy stacks the samples along the batch axis ([N, ...] for a [1, ...] input); Y.npy
holds N integer labels. The model must have one input and one output (logits).
"""
import argparse, ctypes, os, shlex, subprocess, sys, tempfile
import numpy as np

from nnc_ctypes import model_info

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NNC = os.path.join(ROOT, "target", "release", "nnc")


def compile_model(model, out, extra):
    subprocess.run([NNC, "compile", model, "-o", out] + extra, check=True, capture_output=True)
    return out


def logits(lib_path, images):
    lib = ctypes.CDLL(lib_path)
    ins, outs = model_info(lib)
    (_, in_dtype, in_shape), = ins
    (_, out_dtype, out_shape), = outs
    x = np.zeros(in_shape, dtype=in_dtype)
    y = np.zeros(out_shape, dtype=out_dtype)
    in_ptrs = (ctypes.c_void_p * 1)(x.ctypes.data)
    out_ptrs = (ctypes.c_void_p * 1)(y.ctypes.data)
    result = []
    for sample in images:
        x[...] = sample.reshape(in_shape)
        rc = lib.infer(in_ptrs, out_ptrs)
        if rc != 0:
            sys.exit(f"{lib_path}: infer returned {rc}")
        result.append(y.reshape(-1).copy())
    return np.stack(result)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--images", required=True)
    ap.add_argument("--labels", required=True)
    ap.add_argument("--quantize", choices=["fp16", "int8"], required=True)
    ap.add_argument("--calibration", help="nnc compile --calibration (int8)")
    ap.add_argument("--calibration-method", default="minmax")
    ap.add_argument("--nnc-args", default="", help="more nnc compile arguments")
    args = ap.parse_args()
    images, labels = np.load(args.images), np.load(args.labels)
    with tempfile.TemporaryDirectory() as tmp:
        ref_lib = compile_model(args.model, os.path.join(tmp, "libf32.so"), [])
        extra = ["--quantize", args.quantize]
        if args.quantize == "int8":
            extra += ["--calibration", args.calibration, "--calibration-method", args.calibration_method]
        extra += shlex.split(args.nnc_args)
        q_lib = compile_model(args.model, os.path.join(tmp, "libq.so"), extra)
        ref, q = logits(ref_lib, images), logits(q_lib, images)
        sizes = os.path.getsize(ref_lib), os.path.getsize(q_lib)
    acc = lambda z: float((z.argmax(1) == labels).mean())
    noise = ((q.astype(np.float64) - ref) ** 2).sum()
    sqnr = 10 * np.log10((ref.astype(np.float64) ** 2).sum() / max(noise, 1e-300))
    cos = float(np.mean((q * ref).sum(1) / (np.linalg.norm(q, axis=1) * np.linalg.norm(ref, axis=1))))
    print(f"{os.path.basename(args.model)}: {len(labels)} samples")
    print(f"  float32      top-1 {acc(ref) * 100:.2f}%  {sizes[0]} bytes")
    print(f"  {args.quantize:<12} top-1 {acc(q) * 100:.2f}%  {sizes[1]} bytes ({sizes[1] / sizes[0]:.3f} of float32)")
    print(f"  same top-1 as float32: {float((q.argmax(1) == ref.argmax(1)).mean()) * 100:.2f}%")
    print(f"  logits vs float32: SQNR {sqnr:.1f} dB, mean cosine similarity {cos:.6f}")


main()
