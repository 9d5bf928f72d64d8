#!/usr/bin/env python3
"""Models users actually export, outside nnc's reference set (resnet18, mobilenet_v2,
squeezenet1_1, the small ViT and BERT): exported with torch.onnx.export, compiled with
`nnc compile` (plus --nnc-args, e.g. "--cpu x86-64-v3" to time the AVX2 kernels on an
AVX-512 machine), run through ctypes and compared with onnxruntime (1 thread).

usage: benches/exported_models.py [--nnc PATH] [--models a,b,...] [--cache DIR] [--force]
                                  [--runs N] [--no-time] [--json FILE] [--nnc-args "ARGS"]

Needs (installs nothing itself): numpy, onnx, onnxruntime, CPU torch + torchvision +
torchaudio (`pip install torch torchvision torchaudio --index-url
https://download.pytorch.org/whl/cpu`; the PyPI wheels work too) and transformers
(`pip install transformers`) for the language models. Models whose package is missing
are reported as skipped. All weights are random (weights=None / random configs under a
fixed seed): nothing is downloaded at run time.

Each model is exported once (opset 17, static shapes, batch 1, the TorchScript exporter:
dynamo=False; `--exporter dynamo` uses the torch.export-based one at opset 18 and needs
onnxscript) into the cache folder (default target/exported-models/, --force
re-exports), compiled with the nnc CLI (--nnc, else $NNC, else target/release/nnc) into
CACHE/NAME.so, run on a seeded random input and compared output by output with
onnxruntime. A model matches when every output is within rtol 1e-3 / atol 1e-4 of
onnxruntime ("yes"); deep models whose float32 rounding differences grow with depth
match "loose" when every output's max abs error is at most 1e-3 of its largest value
and its cosine is at least 0.99999. Classifiers must also agree on the top-1 class.
Times are the median over --runs calls per inference, both engines on one thread in
this process, alternating call by call; --clock cpu (default) times the calling
thread's CPU time, as benches/bench_models.py does, since the machine may be shared.
"""
import argparse
import ctypes
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
import traceback
import warnings

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from nnc_ctypes import model_info  # noqa: E402 (scripts/ is put on the path above)

SEED = 0


# ---------------------------------------------------------------------------- models
def recalibrate_batchnorm(m, batch):
    """Random-init torchvision models have BatchNorm at identity statistics and often
    zero-init residual branches, so their outputs can be ~1e-15 and any absolute
    tolerance passes. Giving every BatchNorm a random affine and the statistics of one
    random batch (as a trained network's would be) keeps activations O(1) throughout."""
    import torch
    bns = [b for b in m.modules() if isinstance(b, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    with torch.no_grad():
        for b in bns:
            b.momentum = 1.0
            b.weight.uniform_(0.5, 1.5)
            b.bias.normal_(0.0, 0.2)
        m.train()
        m(batch)
    m.eval()


# Each builder returns (module, tuple of example inputs, input names, output names,
# classifier?). Inputs are the ones the model is exported with and run on.

def _vision(ctor, size=224, classifier=True, **kw):
    def build():
        import torch
        import torchvision.models as tvm
        import torchvision.models.segmentation as tvs
        fn = getattr(tvm, ctor, None) or getattr(tvs, ctor)
        m = fn(weights=None, **kw).eval()
        x = torch.randn(1, 3, size, size)
        recalibrate_batchnorm(m, torch.randn(4, 3, size, size))
        if classifier:
            return m, (x,), ["input"], ["logits"], True
        return _OutTensor(m), (x,), ["input"], ["out"], False
    return build


class _OutTensor:
    """torchvision segmentation models return a dict; export its "out" tensor."""
    def __new__(cls, m):
        import torch

        class Wrap(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, x):
                return self.inner(x)["out"]
        return Wrap(m).eval()


def scene_image(h, w, seed=0):
    """A real-looking photograph stand-in, [3, h, w] in [0, 1]: sky and ground
    gradients, a sun, a house with a roof and windows, a tree, a car, sensor noise
    and a little blur, so a detector sees edges, textures and objects at several
    scales rather than uniform noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.zeros((3, h, w), np.float32)
    horizon = 0.6 * h
    sky = y < horizon
    for c, (top, bottom) in enumerate([(0.35, 0.75), (0.55, 0.85), (0.9, 0.95)]):
        img[c][sky] = (top + (bottom - top) * y / horizon)[sky]
    for c, (near, far) in enumerate([(0.25, 0.4), (0.45, 0.6), (0.15, 0.25)]):
        t = (y - horizon) / (h - horizon)
        img[c][~sky] = (far + (near - far) * t)[~sky]
    def fill(mask, rgb):
        for c in range(3):
            img[c][mask] = rgb[c]
    fill((x - 0.82 * w) ** 2 + (y - 0.15 * h) ** 2 < (0.07 * w) ** 2, (1.0, 0.9, 0.5))
    wall = (x > 0.15 * w) & (x < 0.45 * w) & (y > 0.38 * h) & (y < 0.68 * h)
    fill(wall, (0.75, 0.55, 0.4))
    roof = (y > 0.22 * h) & (y <= 0.38 * h) & (np.abs(x - 0.3 * w) < (y - 0.22 * h) * 1.0)
    fill(roof, (0.5, 0.15, 0.1))
    for wx in (0.2, 0.34):
        fill((x > wx * w) & (x < (wx + 0.07) * w) & (y > 0.45 * h) & (y < 0.53 * h), (0.6, 0.8, 0.95))
    fill((x > 0.27 * w) & (x < 0.33 * w) & (y > 0.55 * h) & (y < 0.68 * h), (0.35, 0.2, 0.1))
    fill((x > 0.62 * w) & (x < 0.65 * w) & (y > 0.45 * h) & (y < 0.7 * h), (0.4, 0.25, 0.1))
    fill((x - 0.635 * w) ** 2 + (y - 0.4 * h) ** 2 < (0.09 * w) ** 2, (0.1, 0.45, 0.15))
    body = (x > 0.55 * w) & (x < 0.85 * w) & (y > 0.74 * h) & (y < 0.84 * h)
    fill(body, (0.8, 0.1, 0.1))
    fill((x > 0.6 * w) & (x < 0.78 * w) & (y > 0.67 * h) & (y <= 0.74 * h), (0.7, 0.1, 0.1))
    for cx in (0.61, 0.79):
        fill((x - cx * w) ** 2 + (y - 0.85 * h) ** 2 < (0.035 * w) ** 2, (0.05, 0.05, 0.05))
    img += rng.normal(0, 0.02, img.shape).astype(np.float32)
    blurred = img.copy()
    for dy, dx in ((0, 1), (1, 0), (0, -1), (-1, 0)):
        blurred += np.roll(img, (dy, dx), axis=(1, 2))
    return np.clip(blurred / 5, 0, 1).astype(np.float32)


def ssdlite():
    """SSDlite320 MobileNetV3 detector, whole model: backbone, heads, box decoding and
    per-class NMS, exporting boxes, scores and labels (data-dependent output sizes),
    run on a synthetic street scene (`scene_image`)."""
    import torch
    import torchvision.models.detection as tvd
    m = tvd.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None).eval()
    recalibrate_batchnorm(m.backbone, torch.randn(4, 3, 320, 320))

    class Wrap(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            d = self.inner([x[0]])[0]
            return d["boxes"], d["scores"], d["labels"]
    image = torch.from_numpy(scene_image(320, 320))[None]
    return Wrap(m).eval(), (image,), ["image"], ["boxes", "scores", "labels"], "detector"


def ssdlite_heads():
    """SSDlite320 MobileNetV3 as usually deployed: backbone and heads only (raw class
    logits and box regressions for the 3234 anchors), decoding and NMS left to the app."""
    import torch
    import torchvision.models.detection as tvd
    m = tvd.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None).eval()

    class Heads(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.backbone, self.head = inner.backbone, inner.head

        def forward(self, x):
            out = self.head(list(self.backbone(x).values()))
            return out["cls_logits"], out["bbox_regression"]
    h = Heads(m)
    recalibrate_batchnorm(h, torch.randn(4, 3, 320, 320))
    return h.eval(), (torch.randn(1, 3, 320, 320),), ["image"], ["cls_logits", "bbox_regression"], False


def wav2vec2_base():
    import torch
    import torchaudio
    m = torchaudio.models.wav2vec2_base(aux_num_out=32).eval()  # CTC head over 32 tokens

    class Wrap(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, wav):
            return self.inner(wav)[0]
    return Wrap(m).eval(), (torch.randn(1, 16000),), ["waveform"], ["logits"], False


def conformer_asr():
    """torchaudio Conformer encoder (4 layers, 144 dims: the Conformer-S width) over 80
    log-mel features, with a linear CTC head."""
    import torch
    import torchaudio

    class Asr(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(80, 144)
            self.enc = torchaudio.models.Conformer(input_dim=144, num_heads=4, ffn_dim=576, num_layers=4,
                                                   depthwise_conv_kernel_size=31)
            self.head = torch.nn.Linear(144, 32)

        def forward(self, feats):
            lengths = torch.full((feats.shape[0],), feats.shape[1], dtype=torch.int64)
            y, _ = self.enc(self.proj(feats), lengths)
            return self.head(y)
    return Asr().eval(), (torch.randn(1, 200, 80),), ["features"], ["logits"], False


def kws_melgru():
    """Keyword spotter: log-mel front end (torch.stft with a Hann window, centred with
    reflect padding; power spectrum times torchaudio's mel filter bank) on raw audio, two
    strided convs, a bidirectional GRU and a classifier. The legacy exporter cannot
    export complex STFT outputs, so the front end uses return_complex=False, which
    exports to ONNX STFT."""
    import torch
    import torchaudio

    class Kws(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("window", torch.hann_window(400))
            self.register_buffer("fb", torchaudio.functional.melscale_fbanks(201, 0.0, 8000.0, 40, 16000))
            self.conv = torch.nn.Sequential(
                torch.nn.Conv1d(40, 64, 5, stride=2, padding=2), torch.nn.BatchNorm1d(64), torch.nn.ReLU(),
                torch.nn.Conv1d(64, 64, 3, padding=1), torch.nn.BatchNorm1d(64), torch.nn.ReLU())
            self.gru = torch.nn.GRU(64, 64, batch_first=True, bidirectional=True)
            self.fc = torch.nn.Linear(128, 12)

        def forward(self, wav):
            spec = torch.stft(wav, n_fft=400, hop_length=160, window=self.window, center=True,
                              pad_mode="reflect", return_complex=False)      # [B, 201, T, 2]
            power = spec.pow(2).sum(-1)                                      # [B, 201, T]
            x = torch.log(torch.matmul(power.transpose(1, 2), self.fb) + 1e-6).transpose(1, 2)  # [B, 40, T]
            x = self.conv(x).transpose(1, 2)      # [B, T', 64]
            y, _ = self.gru(x)
            return self.fc(y.mean(dim=1))
    m = Kws()
    recalibrate_batchnorm(m, torch.randn(4, 16000))
    return m.eval(), (torch.randn(1, 16000),), ["waveform"], ["logits"], True


def emformer_asr():
    """torchaudio Emformer (streaming ASR encoder, 2 layers) over 80-dim features."""
    import torch
    import torchaudio

    class Asr(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = torchaudio.models.Emformer(input_dim=80, num_heads=4, ffn_dim=256, num_layers=2,
                                                  segment_length=8, right_context_length=2)
            self.head = torch.nn.Linear(80, 32)

        def forward(self, feats):
            lengths = torch.full((feats.shape[0],), feats.shape[1], dtype=torch.int64)
            y, _ = self.enc(feats, lengths)
            return self.head(y)
    return Asr().eval(), (torch.randn(1, 66, 80),), ["features"], ["logits"], False


def whisper_encoder_random():
    """Whisper-style audio encoder (two convs over 80 log-mel bins, sinusoidal positions,
    2 pre-norm transformer layers) from transformers with a small random config."""
    import torch
    from transformers import WhisperConfig, WhisperModel
    cfg = WhisperConfig(d_model=256, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=1024,
                        decoder_layers=1, decoder_attention_heads=4, decoder_ffn_dim=256, num_mel_bins=80,
                        max_source_positions=1500, attn_implementation="eager")
    enc = WhisperModel(cfg).encoder.eval()

    class Wrap(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, feats):
            return self.inner(feats).last_hidden_state
    return Wrap(enc).eval(), (torch.randn(1, 80, 3000),), ["input_features"], ["hidden"], False


def lstm_lm():
    """Word-level LSTM language model (the PyTorch word_language_model example shape):
    embedding, 2-layer LSTM, tied decoder."""
    import torch

    class Lm(torch.nn.Module):
        def __init__(self, vocab=5000, d=256):
            super().__init__()
            self.emb = torch.nn.Embedding(vocab, d)
            self.lstm = torch.nn.LSTM(d, d, num_layers=2, batch_first=True)
            self.dec = torch.nn.Linear(d, vocab)
            self.dec.weight = self.emb.weight

        def forward(self, ids):
            y, _ = self.lstm(self.emb(ids))
            return self.dec(y)
    ids = torch.randint(0, 5000, (1, 32), generator=torch.Generator().manual_seed(SEED))
    return Lm().eval(), (ids,), ["input_ids"], ["logits"], False


def transformer_encoder_lm():
    """torch.nn.TransformerEncoder (pre-norm, GELU, causal mask) language model."""
    import torch

    class Lm(torch.nn.Module):
        def __init__(self, vocab=8000, d=256, n=4, seq=64):
            super().__init__()
            self.emb = torch.nn.Embedding(vocab, d)
            self.pos = torch.nn.Parameter(torch.randn(1, seq, d) * 0.02)
            layer = torch.nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, activation="gelu",
                                                     batch_first=True, norm_first=True)
            self.enc = torch.nn.TransformerEncoder(layer, n, enable_nested_tensor=False)
            self.out = torch.nn.Linear(d, vocab)
            self.register_buffer("mask", torch.nn.Transformer.generate_square_subsequent_mask(seq))

        def forward(self, ids):
            x = self.emb(ids) + self.pos
            return self.out(self.enc(x, mask=self.mask, is_causal=True))
    ids = torch.randint(0, 8000, (1, 64), generator=torch.Generator().manual_seed(SEED))
    # The eval-mode fast path (aten::_transformer_encoder_layer_fwd) has no ONNX export.
    torch.backends.mha.set_fastpath_enabled(False)
    return Lm().eval(), (ids,), ["input_ids"], ["logits"], False


def _hf_wrap(model, key, **kw):
    import torch

    class Wrap(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, ids, mask):
            return getattr(self.inner(input_ids=ids, attention_mask=mask, **kw), key)
    return Wrap(model).eval()


def _ids(vocab, n):
    import torch
    ids = torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(SEED))
    return ids, torch.ones(1, n, dtype=torch.int64)


def gpt2_small_random():
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=2, n_head=4, n_embd=256, vocab_size=8000, n_positions=128, attn_implementation="eager")
    m = _hf_wrap(GPT2LMHeadModel(cfg).eval(), "logits")
    return m, _ids(8000, 32), ["input_ids", "attention_mask"], ["logits"], False


def llama_random():
    """Llama-style decoder (RMSNorm, rotary positions, SwiGLU, grouped-query attention with
    2 KV heads for 4 query heads), 2 layers, random config."""
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=8000, max_position_embeddings=128,
                      attn_implementation="eager")
    m = _hf_wrap(LlamaForCausalLM(cfg).eval(), "logits", use_cache=False)
    return m, _ids(8000, 32), ["input_ids", "attention_mask"], ["logits"], False


def distilbert_random():
    from transformers import DistilBertConfig, DistilBertForSequenceClassification
    cfg = DistilBertConfig(n_layers=2, n_heads=4, dim=256, hidden_dim=1024, vocab_size=8000, num_labels=3,
                           attn_implementation="eager")
    m = _hf_wrap(DistilBertForSequenceClassification(cfg).eval(), "logits")
    return m, _ids(8000, 32), ["input_ids", "attention_mask"], ["logits"], True


def t5_encoder_random():
    from transformers import T5Config, T5EncoderModel
    cfg = T5Config(num_layers=2, num_heads=4, d_model=256, d_kv=64, d_ff=1024, vocab_size=8000,
                   feed_forward_proj="gated-gelu", attn_implementation="eager")
    m = _hf_wrap(T5EncoderModel(cfg).eval(), "last_hidden_state")
    return m, _ids(8000, 32), ["input_ids", "attention_mask"], ["hidden"], False


MODELS = {
    # vision
    "efficientnet_b0": ("vision", _vision("efficientnet_b0")),
    "regnet_y_400mf": ("vision", _vision("regnet_y_400mf")),
    "convnext_tiny": ("vision", _vision("convnext_tiny")),
    "densenet121": ("vision", _vision("densenet121")),
    "googlenet": ("vision", _vision("googlenet", aux_logits=False, init_weights=True)),
    "shufflenet_v2_x1_0": ("vision", _vision("shufflenet_v2_x1_0")),
    "mobilenet_v3_large": ("vision", _vision("mobilenet_v3_large")),
    "deeplabv3_mobilenet_v3_large": ("vision", _vision("deeplabv3_mobilenet_v3_large", size=256, classifier=False,
                                                       weights_backbone=None, aux_loss=False)),
    "inception_v3": ("vision", _vision("inception_v3", size=299, aux_logits=False, init_weights=True)),
    "swin_t": ("vision", _vision("swin_t")),
    "lraspp_mobilenet_v3_large": ("vision", _vision("lraspp_mobilenet_v3_large", size=256, classifier=False,
                                                    weights_backbone=None)),
    "ssdlite320_heads": ("vision", ssdlite_heads),
    "ssdlite320_mobilenet_v3_large": ("vision", ssdlite),
    # speech
    "wav2vec2_base": ("speech", wav2vec2_base),
    "conformer_s4": ("speech", conformer_asr),
    "kws_melgru": ("speech", kws_melgru),
    "emformer_2l": ("speech", emformer_asr),
    "whisper_encoder_2l": ("speech", whisper_encoder_random),
    # language
    "gpt2_2l": ("language", gpt2_small_random),
    "llama_2l": ("language", llama_random),
    "distilbert_2l": ("language", distilbert_random),
    "t5_encoder_2l": ("language", t5_encoder_random),
    "lstm_lm": ("language", lstm_lm),
    "transformer_lm": ("language", transformer_encoder_lm),
}


# ---------------------------------------------------------------------------- steps

def export(name, builder, path, exporter):
    import torch
    torch.manual_seed(SEED)
    module, inputs, in_names, out_names, classifier = builder()
    if not os.path.exists(path):
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            if exporter == "torchscript":
                torch.onnx.export(module, inputs, path, opset_version=17, dynamo=False, do_constant_folding=True,
                                  input_names=in_names, output_names=out_names)
            else:  # torch.export-based (needs onnxscript); weights inline, static shapes
                # Opset 18, its own: at 17 its down-conversion leaves Split's opset-18
                # num_outputs attribute in place (gpt2_2l, emformer_2l), which
                # onnxruntime rejects as an invalid model.
                torch.onnx.export(module, inputs, path, opset_version=18, dynamo=True, external_data=False,
                                  input_names=in_names, output_names=out_names, optimize=True, verbose=False)
    feeds = {n: t.numpy() for n, t in zip(in_names, inputs)}
    return feeds, classifier


def ort_session(path):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def cpu_description():
    """The CPU's model name and the vector features that pick nnc's kernels."""
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        return "unknown"
    model = re.search(r"^model name\s*:\s*(.*)$", text, re.M)
    flags = set((re.search(r"^flags\s*:\s*(.*)$", text, re.M) or [None, ""])[1].split())
    wanted = ["avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8"]
    return f"{model.group(1) if model else 'unknown'} ({' '.join(f for f in wanted if f in flags)})"


def compile_nnc(nnc, path, so_path, extra=()):
    t0 = time.perf_counter()
    p = subprocess.run([nnc, "compile", path, "-o", so_path, *extra], capture_output=True, text=True,
                       timeout=3600)
    secs = time.perf_counter() - t0
    if p.returncode != 0:
        lines = [ln.strip() for ln in (p.stderr + p.stdout).splitlines() if ln.strip()]
        if not lines:
            return None, secs, f"exit {p.returncode}"
        first = lines[0].replace(path + ": ", "")
        if first.endswith(":") and len(lines) > 1:  # a list follows: show its first entry and its length
            first += f" {lines[1]}" + (f" (+{len(lines) - 2} more)" if len(lines) > 2 else "")
        return None, secs, first[:240]
    return so_path, secs, None


class RunOptions(ctypes.Structure):
    """`nnc_run_options` of ABI 5 (runtime-abi/include/nnc.h): no pool, every dim at
    its maximum, each output's shape reported (a bounded axis at the run's extent)."""
    _fields_ = [("size", ctypes.c_uint32), ("pool", ctypes.c_void_p), ("workspace_bytes", ctypes.c_uint64),
                ("dims", ctypes.c_void_p), ("output_shapes", ctypes.POINTER(ctypes.c_int64))]


class Nnc:
    """ctypes caller of a compiled model through `run`, each output cut to the shape
    the run reports (outputs whose extent the values decide: a detector's boxes)."""

    def __init__(self, so_path, feeds):
        self.lib = ctypes.CDLL(os.path.abspath(so_path))
        self.lib.run.restype = ctypes.c_int32
        self.lib.workspace_size.restype = ctypes.c_uint64
        self.inputs, self.outputs = model_info(self.lib)
        self.shapes = (ctypes.c_int64 * max(1, sum(len(s) for _, _, s in self.outputs)))()
        self.opts = RunOptions(ctypes.sizeof(RunOptions), None, 0, None, self.shapes)
        size = self.lib.workspace_size(ctypes.byref(self.opts))
        self.ws = np.zeros(size + 64, np.uint8)
        self.ws_ptr = ctypes.c_void_p(self.ws.ctypes.data + (-self.ws.ctypes.data) % 64)
        self.arrays = []
        for n, dt, shape in self.inputs:
            if n not in feeds:
                raise RuntimeError(f"nnc input {n!r} is not a model input")
            self.arrays.append(np.ascontiguousarray(feeds[n].astype(dt).reshape(shape)))
        self.results = [np.zeros(s, dtype=d) for _, d, s in self.outputs]
        self.in_ptrs = (ctypes.c_void_p * len(self.arrays))(*[a.ctypes.data for a in self.arrays])
        self.out_ptrs = (ctypes.c_void_p * len(self.results))(*[r.ctypes.data for r in self.results])

    def run(self):
        rc = self.lib.run(self.in_ptrs, self.out_ptrs, self.ws_ptr, ctypes.byref(self.opts))
        if rc != 0:
            raise RuntimeError(f"run returned {rc}")
        out, at = {}, 0
        for (n, _, s), r in zip(self.outputs, self.results):
            shape = tuple(self.shapes[at:at + len(s)])
            at += len(s)
            out[n] = r.reshape(-1)[:int(np.prod(shape))].reshape(shape)
        return out


def same_detections(ref, got, names=("boxes", "scores", "labels")):
    """Whether two detectors' outputs hold the same detections: as many, and each of
    the reference's (label, box, score) found once in the other's within rtol 1e-3 /
    atol 1e-4 (boxes) and 1e-6 (scores): detections whose scores tie to float32
    rounding may come in either order. Returns that, how many are in the same place,
    and (when the same) the other's detections in the reference's order."""
    (rb, rs, rl), (gb, gs, gl) = ([d[n] for n in names] for d in (ref, got))
    if len(rl) != len(gl):
        return False, 0, None
    in_place = int(np.sum(gl == rl))
    unused, order = set(range(len(gl))), []
    for i in range(len(rl)):
        near = [j for j in unused if gl[j] == rl[i] and abs(float(gs[j]) - float(rs[i])) <= 1e-6
                and np.all(np.abs(gb[j] - rb[i]) <= 1e-4 + 1e-3 * np.abs(rb[i]))]
        if not near:
            return False, in_place, None
        order.append(min(near, key=lambda j: abs(j - i)))
        unused.remove(order[-1])
    return True, in_place, {n: got[n][order] for n in names}


def compare(ref, got):
    ref = ref.astype(np.float64).ravel()
    got = got.astype(np.float64).ravel()
    if ref.shape != got.shape:
        return dict(abs=float("inf"), rel=float("inf"), cos=0.0, strict=False, loose=False, finite=False)
    finite = bool(np.all(np.isfinite(got)))
    err = np.abs(ref - got)
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    denom = np.linalg.norm(ref) * np.linalg.norm(got)
    cos = float(ref @ got / denom) if denom > 0 else float(np.array_equal(ref, got))
    max_abs = float(err.max()) if err.size else 0.0
    max_rel = float((err / np.maximum(np.abs(ref), 1e-6)).max()) if err.size else 0.0
    strict = finite and bool(np.all(err <= 1e-4 + 1e-3 * np.abs(ref)))
    loose = finite and max_abs <= 1e-3 * max(scale, 1e-3) and cos >= 0.99999
    return dict(abs=max_abs, rel=max_rel, cos=cos, strict=strict, loose=loose, finite=finite)


def median_ms(engines, runs, clock):
    """Median ms per call of each engine over `runs` calls, the engines alternating call
    by call so machine drift hits both alike. `cpu` times the calling thread's CPU time
    (onnxruntime with one intra-op thread runs on the calling thread), `wall` elapsed time."""
    now = time.thread_time if clock == "cpu" else time.perf_counter
    for fn in engines:
        fn()
    ts = [[] for _ in engines]
    for _ in range(runs):
        for fn, t in zip(engines, ts):
            t0 = now()
            fn()
            t.append((now() - t0) * 1e3)
    return [statistics.median(t) for t in ts]


def run_model(name, kind, builder, args):
    import onnx
    row = dict(model=name, kind=kind, ops=None, op_types=None, status="", abs=None, rel=None, cos=None, scale=None,
               match="", nnc_ms=None, ort_ms=None, compile_s=None)
    stem = name if args.exporter == "torchscript" else f"{name}.{args.exporter}"
    path = os.path.join(args.cache, f"{stem}.onnx")
    if args.force and os.path.exists(path):
        os.remove(path)
    try:
        feeds, classifier = export(name, builder, path, args.exporter)
    except ImportError as e:
        row["status"] = f"skipped: {e}"
        return row
    except Exception as e:  # an exporter failure is a result too
        root = e
        while root.__cause__ is not None:  # torch.onnx wraps torch.export's error
            root = root.__cause__
        msg = re.sub(r"\x1b\[[0-9;]*m", "", str(root)).strip().splitlines()
        row["status"] = f"export failed: {type(root).__name__}: {msg[0][:160] if msg else ''}"
        traceback.print_exc()
        return row
    g = onnx.load(path, load_external_data=False).graph
    row["ops"] = len(g.node)
    row["op_types"] = sorted({n.op_type for n in g.node})

    so_path = os.path.join(args.cache, f"{stem}.so")
    so, secs, err = compile_nnc(args.nnc, path, so_path, shlex.split(args.nnc_args))
    row["compile_s"] = round(secs, 2)
    try:
        sess = ort_session(path)
        ort_feeds = {i.name: feeds[i.name] for i in sess.get_inputs()}
        ort_out = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, ort_feeds)))
    except Exception as e:
        row["status"] = ("compiles" if so else err) + f"; onnxruntime failed: {str(e).splitlines()[0][:200]}"
        row["match"] = "-"
        return row
    if so is None:
        row["status"] = err
        row["match"] = "-"
        return row
    row["status"] = "ok"
    model = Nnc(so, feeds)
    got = model.run()
    same = None
    if classifier == "detector":
        same, in_place, aligned = same_detections(ort_out, got)
        row["detections"] = f"{len(got['labels'])} ({len(ort_out['labels'])} ref), {in_place} in place"
        print(f"   detections: {row['detections']}, same set: {same}", file=sys.stderr, flush=True)
        got = aligned or got
    worst = None
    ok_strict = ok_loose = True
    for n, ref in ort_out.items():
        c = compare(ref, got[n])
        ok_strict &= c["strict"]
        ok_loose &= c["loose"]
        if worst is None or c["abs"] > worst["abs"] or not c["finite"]:
            worst = c
    if same is not None:
        ok_strict &= same
        ok_loose &= same
    top1 = True
    if classifier is True:
        ref = next(iter(ort_out.values()))
        top1 = int(np.argmax(ref)) == int(np.argmax(got[next(iter(ort_out))]))
    row.update(abs=worst["abs"], rel=worst["rel"], cos=worst["cos"])
    row["scale"] = max(float(np.max(np.abs(r))) if r.size else 0.0 for r in ort_out.values())
    row["match"] = ("yes" if ok_strict else "loose" if ok_loose else "no") if top1 else "no (top-1)"
    if not args.no_time:
        row["nnc_ms"], row["ort_ms"] = median_ms([model.run, lambda: sess.run(None, ort_feeds)], args.runs, args.clock)
    return row


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nnc", default=os.environ.get("NNC", os.path.join(ROOT, "target", "release", "nnc")))
    ap.add_argument("--models", help="comma-separated subset of: " + ",".join(MODELS))
    ap.add_argument("--cache", default=os.path.join(ROOT, "target", "exported-models"))
    ap.add_argument("--force", action="store_true", help="re-export models already in the cache")
    ap.add_argument("--exporter", choices=["torchscript", "dynamo"], default="torchscript",
                    help="torch.onnx.export(dynamo=False) (default) or dynamo=True (needs onnxscript)")
    ap.add_argument("--runs", type=int, default=10, help="timed calls per engine (median)")
    ap.add_argument("--clock", choices=["cpu", "wall"], default="cpu",
                    help="time the calling thread's CPU time (default: the machine is shared) or wall time")
    ap.add_argument("--no-time", action="store_true")
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--nnc-args", default="",
                    help='more `nnc compile` options, e.g. "--cpu x86-64-v3" (the AVX2 family on an '
                         'AVX-512 machine)')
    args = ap.parse_args()
    os.makedirs(args.cache, exist_ok=True)
    names = args.models.split(",") if args.models else list(MODELS)
    rows = []
    for name in names:
        kind, builder = MODELS[name]
        print(f"== {name}", file=sys.stderr, flush=True)
        try:
            row = run_model(name, kind, builder, args)
        except Exception as e:
            traceback.print_exc()
            row = dict(model=name, kind=kind, ops=None, status=f"harness error: {e}", match="-")
        print(f"   {row.get('status')} match={row.get('match')} abs={row.get('abs')} cos={row.get('cos')}",
              file=sys.stderr, flush=True)
        rows.append(row)

    print(f"CPU: {cpu_description()}; nnc compile {args.nnc_args or '(default options: --cpu native)'}")
    print("| model | kind | ONNX ops | nnc compile | max abs err | max abs ref | cosine | match | nnc ms | ort ms | nnc/ort |")
    print("|---|---|---:|---|---:|---:|---:|---|---:|---:|---:|")
    ratios = []
    for r in rows:
        ratio = None
        if r.get("nnc_ms") and r.get("ort_ms"):
            ratio = r["nnc_ms"] / r["ort_ms"]
            ratios.append((ratio, r["model"]))
        print(f"| {r['model']} | {r['kind']} | {fmt(r.get('ops'), 'd')} | {r.get('status')} | "
              f"{fmt(r.get('abs'), '.2e')} | {fmt(r.get('scale'), '.3g')} | {fmt(r.get('cos'), '.7f')} | {r.get('match')} | "
              f"{fmt(r.get('nnc_ms'), '.2f')} | {fmt(r.get('ort_ms'), '.2f')} | {fmt(ratio, '.2f')} |")
    if ratios:
        geo = math.exp(sum(math.log(x) for x, _ in ratios) / len(ratios))
        worst = max(ratios)
        print(f"\n{len(ratios)} models timed: geometric mean nnc/onnxruntime {geo:.2f}, "
              f"{sum(1 for x, _ in ratios if x <= 1.0)} at or below 1.0, worst {worst[1]} {worst[0]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
