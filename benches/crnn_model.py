#!/usr/bin/env python3
"""Exports a CRNN-style text recognizer (random weights) with a dynamic image width, as
`dynamic_axes` writes it: input `image` `[1, 1, 32, width]` (a grey text line), output
`log_probs` `[steps, 1, classes]` (per-column CTC log-probabilities, steps = width/4 − 1).

The model is Shi et al.'s CRNN: seven 3×3 convs (batch norm on three) with 2×2 and 2×1
max pools down to a height of 1, the columns as a sequence, two bidirectional LSTMs and a
per-step classifier.

usage: benches/crnn_model.py OUT.onnx [--hidden 256] [--classes 37]

Needs torch (`pip install torch`). Then
`benches/dynamic_vs_static.py OUT.onnx --dim width=32..800 --values 100,400`.
"""
import argparse, sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--classes", type=int, default=37)
    a = ap.parse_args()
    try:
        import torch
        from torch import nn
    except ImportError:
        raise SystemExit("crnn_model.py needs torch: pip install torch")

    def conv(cin, cout, bn=False, k=3, p=1):
        layers = [nn.Conv2d(cin, cout, k, 1, p)]
        if bn:
            layers.append(nn.BatchNorm2d(cout))
        return layers + [nn.ReLU()]

    class Crnn(nn.Module):
        def __init__(self):
            super().__init__()
            self.cnn = nn.Sequential(
                *conv(1, 64), nn.MaxPool2d(2, 2),
                *conv(64, 128), nn.MaxPool2d(2, 2),
                *conv(128, 256, True), *conv(256, 256), nn.MaxPool2d((2, 1), (2, 1)),
                *conv(256, 512, True), *conv(512, 512), nn.MaxPool2d((2, 1), (2, 1)),
                *conv(512, 512, True, k=2, p=0))
            self.rnn1 = nn.LSTM(512, a.hidden, bidirectional=True)
            self.mid = nn.Linear(2 * a.hidden, a.hidden)
            self.rnn2 = nn.LSTM(a.hidden, a.hidden, bidirectional=True)
            self.out = nn.Linear(2 * a.hidden, a.classes)

        def forward(self, x):
            f = self.cnn(x).squeeze(2).permute(2, 0, 1)  # [steps, batch, 512]
            f, _ = self.rnn1(f)
            f, _ = self.rnn2(self.mid(f))
            return self.out(f).log_softmax(2)

    torch.manual_seed(0)
    model = Crnn().eval()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    x = torch.randn(1, 1, 32, 128)
    torch.onnx.export(model, x, a.out, opset_version=17, input_names=["image"], output_names=["log_probs"],
                      dynamic_axes={"image": {3: "width"}, "log_probs": {0: "steps"}}, dynamo=False)
    print(f"wrote {a.out} (dim width)", file=sys.stderr)


if __name__ == "__main__":
    main()
