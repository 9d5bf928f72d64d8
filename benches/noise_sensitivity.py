#!/usr/bin/env python3
"""How much a model amplifies noise: Gaussian noise at a given SNR is added to the
input, and the output's SQNR against the clean run is reported (onnxruntime, float32).

An 8-bit activation adds roughly 40 dB noise per tensor (range/255 steps over a
signal whose peak is a few times its RMS). A model that turns 40 dB of input noise
into less than 20 dB at its output (a cosine similarity under 0.995) cannot reach a
0.995 cosine with any 8-bit activation quantization: the noise of the first quantized
tensor alone exceeds the budget.

usage: benches/noise_sensitivity.py MODEL.onnx --inputs X.npy [--snr 60,48,40] [--samples 16]

X.npy stacks samples along the batch axis of the model's single input.
"""
import argparse
import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--inputs", required=True)
    ap.add_argument("--snr", default="60,48,40", help="input SNRs in dB, comma-separated")
    ap.add_argument("--samples", type=int, default=16)
    args = ap.parse_args()
    import onnxruntime as ort
    s = ort.InferenceSession(args.model, providers=["CPUExecutionProvider"])
    name = s.get_inputs()[0].name
    xs = np.load(args.inputs)[: args.samples]
    rng = np.random.default_rng(0)
    clean = [s.run(None, {name: x[None]})[0] for x in xs]
    print(f"{args.model}: {len(xs)} samples")
    for db in (float(v) for v in args.snr.split(",")):
        signal = noise = 0.0
        for x, ref in zip(xs, clean):
            x = x[None]
            sigma = np.sqrt((x.astype(np.float64) ** 2).mean() / 10 ** (db / 10))
            noisy = s.run(None, {name: (x + rng.standard_normal(x.shape) * sigma).astype(np.float32)})[0]
            signal += (ref.astype(np.float64) ** 2).sum()
            noise += ((noisy.astype(np.float64) - ref) ** 2).sum()
        out = 10 * np.log10(signal / noise)
        print(f"  input noise {db:5.1f} dB -> output SQNR {out:5.1f} dB (amplified by {db - out:4.1f} dB)")


if __name__ == "__main__":
    main()
