#!/usr/bin/env python3
"""Exports the models of issue 43's table the way users export them, with dynamic
axes (random weights), plus reference inputs and onnxruntime outputs at several
values of each axis:

    scripts/export_dynamic_models.py OUT_DIR [NAME ...]

Writes OUT_DIR/NAME.onnx and OUT_DIR/NAME.json (the dynamic axes with the ranges the
table compiles them with). Needs torch, torchvision and transformers.
"""

import json
import os
import sys

import torch
import torch.nn as nn


def save(out, name, model, args, input_names, output_names, dynamic_axes, ranges, dynamo=False,
         dynamic_shapes=None):
    path = os.path.join(out, name + ".onnx")
    model.eval()
    with torch.no_grad():
        if dynamo:
            torch.onnx.export(model, args, path, input_names=input_names,
                              output_names=output_names, dynamic_shapes=dynamic_shapes,
                              dynamo=True, opset_version=18)
        else:
            torch.onnx.export(model, args, path, input_names=input_names,
                              output_names=output_names, dynamic_axes=dynamic_axes,
                              opset_version=17, dynamo=False)
    with open(os.path.join(out, name + ".json"), "w") as f:
        json.dump({"ranges": ranges}, f, indent=1)
    print("wrote", path)


def resnet(out):
    import torchvision
    m = torchvision.models.resnet18(weights=None)
    x = torch.randn(1, 3, 224, 224)
    save(out, "resnet18_bhw", m, (x,), ["input"], ["logits"],
         {"input": {0: "batch_size", 2: "height", 3: "width"}, "logits": {0: "batch_size"}},
         {"batch_size": [1, 8], "height": [64, 512], "width": [64, 512]})


class Kwargs(nn.Module):
    """transformers 5 models take keyword arguments; the exporter passes positional."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask):
        return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def bert(out):
    from transformers import BertConfig, BertModel
    cfg = BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=256, attn_implementation="eager")
    m = Kwargs(BertModel(cfg))
    ids = torch.randint(0, 1000, (1, 128))
    mask = torch.ones(1, 128, dtype=torch.int64)
    save(out, "bert_bs", m, (ids, mask), ["input_ids", "attention_mask"], ["hidden"],
         {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
          "hidden": {0: "batch", 1: "seq"}},
         {"batch": [1, 8], "seq": [1, 512]})


class Gpt2(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        return self.m(input_ids=input_ids, use_cache=False).last_hidden_state


def gpt2(out):
    from transformers import GPT2Config, GPT2Model
    cfg = GPT2Config(n_embd=128, n_layer=2, n_head=4, n_positions=256)
    m = Gpt2(GPT2Model(cfg))
    ids = torch.randint(0, 1000, (1, 64))
    seq = torch.export.Dim("seq", min=2, max=256)
    save(out, "gpt2_seq", m, (ids,), ["input_ids"], ["hidden"], None,
         {"seq": [1, 256]}, dynamo=True, dynamic_shapes={"input_ids": {1: seq}})


class CausalEncoder(nn.Module):
    """A decoder-only stack: the encoder with a causal mask built from the length."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, src):
        pos = torch.arange(src.shape[0])
        future = pos.unsqueeze(0) > pos.unsqueeze(1)
        mask = torch.where(future, float("-inf"), 0.0)
        return self.m(src, mask=mask, is_causal=True)


def encoder(out):
    # The legacy exporter bakes the traced length into MultiheadAttention's reshapes
    # (onnxruntime fails at any other length), so these go through torch.export.
    layer = nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=256, dropout=0.0)
    m = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    x = torch.randn(16, 2, 128)
    seq = torch.export.Dim("seq", min=2, max=512)
    batch = torch.export.Dim("batch", min=2, max=8)
    shapes = {"src": {0: seq, 1: batch}}
    save(out, "encoder_bs", m, (x,), ["src"], ["out"], None,
         {"batch": [1, 8], "seq": [1, 512]}, dynamo=True, dynamic_shapes=shapes)
    save(out, "decoder_causal_bs", CausalEncoder(m), (x,), ["src"], ["out"], None,
         {"batch": [1, 8], "seq": [1, 512]}, dynamo=True, dynamic_shapes=shapes)


class Crnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d((2, 1), (2, 1)))
        self.rnn = nn.LSTM(32 * 8, 64, bidirectional=True, batch_first=True)
        self.fc = nn.Linear(128, 40)

    def forward(self, x):
        f = self.conv(x)                      # [b, 32, 8, w/2]
        b, c, h, w = f.shape
        f = f.permute(0, 3, 1, 2).reshape(b, w, c * h)
        y, _ = self.rnn(f)
        return self.fc(y).log_softmax(-1)


def crnn(out):
    x = torch.randn(1, 1, 32, 320)
    save(out, "crnn_w", Crnn(), (x,), ["image"], ["logits"],
         {"image": {3: "w"}, "logits": {1: "w_out"}}, {"w": [16, 1024]})


def mobilenet(out):
    import torchvision
    m = torchvision.models.mobilenet_v3_small(weights=None)
    x = torch.randn(1, 3, 224, 224)
    save(out, "mobilenet_v3_small_bhw", m, (x,), ["input"], ["logits"],
         {"input": {0: "batch", 2: "height", 3: "width"}, "logits": {0: "batch"}},
         {"batch": [1, 8], "height": [64, 512], "width": [64, 512]})


def distilbert(out):
    from transformers import DistilBertConfig, DistilBertModel
    cfg = DistilBertConfig(dim=128, n_layers=2, n_heads=4, hidden_dim=256,
                           attn_implementation="eager")
    m = Kwargs(DistilBertModel(cfg))
    ids = torch.randint(0, 1000, (1, 128))
    mask = torch.ones(1, 128, dtype=torch.int64)
    save(out, "distilbert_bs", m, (ids, mask), ["input_ids", "attention_mask"], ["hidden"],
         {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
          "hidden": {0: "batch", 1: "seq"}},
         {"batch": [1, 8], "seq": [1, 512]})


def efficientnet(out):
    import torchvision
    m = torchvision.models.efficientnet_b0(weights=None)
    save(out, "efficientnet_b0_bhw", m, (torch.randn(1, 3, 224, 224),), ["input"], ["logits"],
         {"input": {0: "batch", 2: "height", 3: "width"}},
         {"batch": [1, 4], "height": [64, 384], "width": [64, 384]})


class SegmentationOut(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(x)["out"]


def lraspp(out):
    """Upsamples to the input's size: a Resize whose factor varies with the extent."""
    import torchvision
    m = torchvision.models.segmentation.lraspp_mobilenet_v3_large(weights=None,
                                                                   weights_backbone=None)
    save(out, "lraspp_hw", SegmentationOut(m), (torch.randn(1, 3, 224, 224),), ["input"],
         ["out"], {"input": {2: "height", 3: "width"}}, {"height": [64, 384], "width": [64, 384]})


class Vit(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(pixel_values=x).last_hidden_state


def vit(out):
    from transformers import ViTConfig, ViTModel
    cfg = ViTConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=256, image_size=64, patch_size=8,
                    attn_implementation="eager")
    save(out, "vit_b", Vit(ViTModel(cfg)), (torch.randn(1, 3, 64, 64),), ["pixels"], ["hidden"],
         {"pixels": {0: "batch"}}, {"batch": [1, 8]})


# The table, then exports held out from the work on it.
TABLE = ("resnet", "bert", "gpt2", "encoder", "crnn")
HELD_OUT = ("mobilenet", "distilbert", "efficientnet", "lraspp", "vit")


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    only = sys.argv[2:]
    for f in (resnet, bert, gpt2, encoder, crnn, mobilenet, distilbert, efficientnet, lraspp,
              vit):
        if only and f.__name__ not in only:
            continue
        try:
            f(out)
        except Exception as e:  # one failed export must not hide the others
            print(f"{f.__name__}: export failed: {e}", file=sys.stderr)


if __name__ == "__main__":
    main()
