#!/usr/bin/env python3
"""Exports a torchvision CNN classifier (random weights) with a dynamic batch and image
size, as `dynamic_axes` writes them: input `image` `[batch, 3, size, size]`, output
`logits` `[batch, 1000]`.

usage: benches/cnn_model.py OUT.onnx [--model resnet18|mobilenet_v2|...]

Needs torch and torchvision (`pip install torch torchvision`). Then
`benches/dynamic_vs_static.py OUT.onnx --dim batch=1..8 --dim size=64..320 --values 1x224,8x224`.
"""
import argparse, sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--model", default="resnet18")
    a = ap.parse_args()
    try:
        import torch
        import torchvision
    except ImportError:
        raise SystemExit("cnn_model.py needs torch and torchvision: pip install torch torchvision")
    torch.manual_seed(0)
    model = getattr(torchvision.models, a.model)(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    torch.onnx.export(model, x, a.out, opset_version=17, input_names=["image"], output_names=["logits"],
                      dynamic_axes={"image": {0: "batch", 2: "size", 3: "size"}, "logits": {0: "batch"}},
                      dynamo=False)
    print(f"wrote {a.out} ({a.model}, dims batch and size)", file=sys.stderr)


if __name__ == "__main__":
    main()
