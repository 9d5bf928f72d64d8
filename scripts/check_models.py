#!/usr/bin/env python3
"""Compiles reference models with nnc and compares the artifacts' outputs with saved
reference outputs (max |error| / max |reference| per output).

usage: check_models.py MODELS_DIR [--target x86_64|aarch64] [--cpu CPU] [--models a,b,...]
                       [--quantize fp16|int8 [--calibration PATH]] [--against-x86]
                       [--tolerance T]

With --quantize the artifact is compiled quantized and its size is also reported as a
fraction of the float32 artifact's (compiled alongside). int8 needs --calibration
(a path; `{model}` in it is replaced by the model's name); its error against the
float32 reference outputs is reported but not judged.

--against-x86 (with --target aarch64) also compiles the same model for the host
(x86-64; for int8 `--cpu baseline`, whose weights are quantized as aarch64's) and
compares the two libraries' outputs: the quantized libraries must give the same
outputs on both (integer paths exactly, float tails within --tolerance).

MODELS_DIR holds MODEL.onnx with MODEL.input.NAME.npy / MODEL.output.NAME.npy pairs.
x86_64 loads each .so in this process (ctypes); aarch64 runs it under qemu-aarch64
through tests/harness/nnc_run.c built with aarch64-linux-gnu-gcc.
"""
import argparse, ctypes, glob, os, subprocess, sys, tempfile, time
import numpy as np

from nnc_ctypes import DTYPES, model_info

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NNC = os.path.join(ROOT, "target", "release", "nnc")


def rel_err(actual, ref):
    ref = ref.astype(np.float64)
    return float(np.abs(actual.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


def run_x86(lib_path, inputs_by_name):
    lib = ctypes.CDLL(lib_path)
    ins, outs = model_info(lib)
    arrays = [np.ascontiguousarray(inputs_by_name[n].astype(d).reshape(s)) for n, d, s in ins]
    results = [np.zeros(s, dtype=d) for _, d, s in outs]
    in_ptrs = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
    out_ptrs = (ctypes.c_void_p * len(results))(*[r.ctypes.data for r in results])
    rc = lib.infer(in_ptrs, out_ptrs)
    assert rc == 0, f"infer returned {rc}"
    return {n: r for (n, _, _), r in zip(outs, results)}, (lib, in_ptrs, out_ptrs)


def build_harness(tmp):
    exe = os.path.join(tmp, "nnc_run")
    subprocess.run(["aarch64-linux-gnu-gcc", "-O1", "-std=c11", "-I", os.path.join(ROOT, "runtime-abi", "include"),
                    os.path.join(ROOT, "tests", "harness", "nnc_run.c"), "-o", exe, "-pthread", "-ldl"], check=True)
    return exe


def run_aarch64(exe, lib_path, onnx_path, inputs_by_name, tmp):
    # Input order and output names come from the model (the header lists them too).
    import onnx
    m = onnx.load(onnx_path, load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    in_names = [i.name for i in m.graph.input if i.name not in inits]
    out_specs = [(o.name, o.type.tensor_type.elem_type, [d.dim_value for d in o.type.tensor_type.shape.dim]) for o in m.graph.output]
    in_dir, out_dir = os.path.join(tmp, "in"), os.path.join(tmp, "out")
    os.makedirs(in_dir, exist_ok=True); os.makedirs(out_dir, exist_ok=True)
    for i, n in enumerate(in_names):
        inputs_by_name[n].tofile(os.path.join(in_dir, f"input_{i}.bin"))
    subprocess.run(["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", exe, lib_path, "", in_dir, out_dir], check=True, stdout=subprocess.DEVNULL)
    return {n: np.fromfile(os.path.join(out_dir, f"output_{i}.bin"), dtype=DTYPES[t]).reshape(s) for i, (n, t, s) in enumerate(out_specs)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models_dir")
    ap.add_argument("--target", default="x86_64")
    ap.add_argument("--models", default="resnet18,mobilenet_v2,squeezenet1_1,vit_tiny_l4_d256,minibert_l4_d256,digits_cnn")
    ap.add_argument("--tolerance", type=float, default=1e-4)
    ap.add_argument("--quantize", choices=["fp16", "int8"], help="compile with nnc --quantize")
    ap.add_argument("--calibration", help="nnc --calibration for int8 ({model} is replaced)")
    ap.add_argument("--cpu", help="nnc --cpu")
    ap.add_argument("--against-x86", action="store_true",
                    help="with --target aarch64: compare with the same model compiled for x86-64")
    args = ap.parse_args()
    if args.quantize == "int8" and not args.calibration:
        ap.error("--quantize int8 needs --calibration")
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_harness(tmp) if args.target == "aarch64" else None
        for name in args.models.split(","):
            onnx_path = os.path.join(args.models_dir, name + ".onnx")
            lib = os.path.join(tmp, f"lib{name}.so")
            t0 = time.time()
            extra = ["--quantize", args.quantize] if args.quantize else []
            if args.quantize == "int8":
                extra += ["--calibration", args.calibration.replace("{model}", name)]
            cpu = ["--cpu", args.cpu] if args.cpu else []
            r = subprocess.run([NNC, "compile", onnx_path, "--target", args.target, "-o", lib] + cpu + extra, capture_output=True, text=True)
            secs = time.time() - t0
            if r.returncode != 0:
                print(f"{name}: compile failed: {r.stderr.strip()}"); failed += 1; continue
            size = f"{os.path.getsize(lib)} bytes"
            if args.quantize:
                ref_lib = os.path.join(tmp, f"lib{name}_f32.so")
                subprocess.run([NNC, "compile", onnx_path, "--target", args.target, "-o", ref_lib], capture_output=True, check=True)
                size += f" ({os.path.getsize(lib) / os.path.getsize(ref_lib):.3f} of float32)"
            inputs = {os.path.basename(p)[len(name) + 7:-4]: np.load(p) for p in glob.glob(os.path.join(args.models_dir, f"{name}.input.*.npy"))}
            expected = {os.path.basename(p)[len(name) + 8:-4]: np.load(p) for p in glob.glob(os.path.join(args.models_dir, f"{name}.output.*.npy"))}
            if args.target == "aarch64":
                got = run_aarch64(exe, lib, onnx_path, inputs, os.path.join(tmp, name))
            else:
                got, _keep = run_x86(lib, inputs)
            judged = args.quantize != "int8"
            for out_name, ref in sorted(expected.items()):
                err = rel_err(got[out_name], ref)
                ok = err <= args.tolerance or not judged
                failed += not ok
                verdict = ("ok" if ok else "FAIL") if judged else "(int8, not judged)"
                print(f"{name}: {args.target} compile {secs:.2f} s, {size}, output {out_name}: rel err {err:.2e} {verdict}")
            if args.against_x86 and args.target == "aarch64":
                host_lib = os.path.join(tmp, f"lib{name}_x86.so")
                # Without an AVX2 variant: a library with one quantizes its weights to
                # ±64 (`vpmaddubsw` pairs), so its INT8 outputs differ from aarch64's.
                host_cpu = ["--cpu", "baseline"] if args.quantize == "int8" else []
                subprocess.run([NNC, "compile", onnx_path, "-o", host_lib] + host_cpu + extra, capture_output=True, check=True)
                host, _keep = run_x86(host_lib, inputs)
                for out_name in sorted(expected):
                    a, b = host[out_name], got[out_name]
                    same = int((a == b).sum())
                    err = rel_err(b, a)
                    ok = err <= args.tolerance
                    failed += not ok
                    print(f"{name}: aarch64 vs x86-64 output {out_name}: {same} of {a.size} identical, "
                          f"max |diff| / max |x86| {err:.2e} {'ok' if ok else 'FAIL'}")
    print(f"models: {failed} failed")
    sys.exit(1 if failed else 0)


main()
