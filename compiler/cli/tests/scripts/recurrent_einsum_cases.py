"""Writes RNN / GRU / LSTM and Einsum test cases in the ONNX backend-test layout
(`<case>/model.onnx`, `<case>/test_data_set_0/{input,output}_K.pb`) into argv[1].

onnx's ReferenceEvaluator ignores most recurrent attributes (activations, clip,
sequence_lens, input_forget...), so the expected outputs come from the numpy model
below, written from the operator specs' equations (float64, then cast to float32).
Einsum's come from numpy.einsum. Cases named `error_*` hold a model import must
reject and `expect_error`, a substring of the message.

Activation parameters (activation_alpha / activation_beta) are consumed in order by
the functions that take one, falling back to the ONNX defaults, as onnxruntime does.
"""

import os
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

OUT = sys.argv[1]
FAMILY = sys.argv[2]  # "recurrent" or "einsum"
rng = np.random.default_rng(20261130)


def save(name, node, feeds, outputs, initializers=(), opset=22, expect_error=None):
    d = os.path.join(OUT, name)
    os.makedirs(os.path.join(d, "test_data_set_0"))

    def info(n, a):
        return helper.make_tensor_value_info(
            n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape
        )

    graph = helper.make_graph(
        [node],
        name,
        [info(n, a) for n, a in feeds],
        [info(n, a) for n, a in outputs],
        [numpy_helper.from_array(a, n) for n, a in initializers],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    if expect_error is None:
        onnx.checker.check_model(model)
    onnx.save(model, os.path.join(d, "model.onnx"))
    for kind, tensors in (("input", feeds), ("output", outputs)):
        for k, (n, a) in enumerate(tensors):
            with open(os.path.join(d, "test_data_set_0", f"{kind}_{k}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(a, n).SerializeToString())
    if expect_error is not None:
        with open(os.path.join(d, "expect_error"), "w") as f:
            f.write(expect_error)


# --- RNN, GRU, LSTM -----------------------------------------------------------

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
DEFAULT_ACTS = {
    "RNN": ["Tanh"],
    "GRU": ["Sigmoid", "Tanh"],
    "LSTM": ["Sigmoid", "Tanh", "Tanh"],
}


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def activation(name, alphas, betas):
    def take(lst, default):
        return lst.pop(0) if lst else default

    n = name.lower()
    if n == "relu":
        return lambda x: np.maximum(x, 0)
    if n == "tanh":
        return np.tanh
    if n == "sigmoid":
        return sigmoid
    if n == "affine":
        a, b = take(alphas, 1.0), take(betas, 0.0)
        return lambda x: a * x + b
    if n == "leakyrelu":
        a = take(alphas, 0.01)
        return lambda x: np.where(x >= 0, x, a * x)
    if n == "thresholdedrelu":
        a = take(alphas, 1.0)
        return lambda x: np.where(x > a, x, 0)
    if n == "scaledtanh":
        a, b = take(alphas, 1.0), take(betas, 1.0)
        return lambda x: a * np.tanh(b * x)
    if n == "hardsigmoid":
        a, b = take(alphas, 0.2), take(betas, 0.5)
        return lambda x: np.clip(a * x + b, 0, 1)
    if n == "elu":
        a = take(alphas, 1.0)
        return lambda x: np.where(x >= 0, x, a * (np.exp(x) - 1))
    if n == "softsign":
        return lambda x: x / (1 + np.abs(x))
    if n == "softplus":
        return lambda x: np.log1p(np.exp(x))
    raise ValueError(name)


def run_direction(op, X, W, R, Wb, Rb, P, h, c, lens, reverse, acts, clip, lbr, input_forget):
    """One direction over time-major X [T, B, I]: Y [T, B, H], final h and c."""
    T = X.shape[0]
    H = R.shape[-1]
    Y = np.zeros((T, X.shape[1], H))
    cl = (lambda v: np.clip(v, -clip, clip)) if clip is not None else (lambda v: v)
    for t in range(T - 1, -1, -1) if reverse else range(T):
        x = X[t]
        active = (t < lens)[:, None]
        cn = c
        if op == "RNN":
            hn = acts[0](cl(x @ W.T + h @ R.T + Wb + Rb))
        elif op == "GRU":
            f, g = acts
            (Wz, Wr, Wh), (Rz, Rr, Rh) = np.split(W, 3), np.split(R, 3)
            (Wbz, Wbr, Wbh), (Rbz, Rbr, Rbh) = np.split(Wb, 3), np.split(Rb, 3)
            z = f(cl(x @ Wz.T + h @ Rz.T + Wbz + Rbz))
            r = f(cl(x @ Wr.T + h @ Rr.T + Wbr + Rbr))
            if lbr:
                ht = g(cl(x @ Wh.T + r * (h @ Rh.T + Rbh) + Wbh))
            else:
                ht = g(cl(x @ Wh.T + (r * h) @ Rh.T + Rbh + Wbh))
            hn = (1 - z) * ht + z * h
        else:
            f, g, hf = acts
            (Wi, Wo, Wf, Wc), (Ri, Ro, Rf, Rc) = np.split(W, 4), np.split(R, 4)
            (Wbi, Wbo, Wbf, Wbc), (Rbi, Rbo, Rbf, Rbc) = np.split(Wb, 4), np.split(Rb, 4)
            Pi, Po, Pf = np.split(P, 3)
            i = f(cl(x @ Wi.T + h @ Ri.T + Pi * c + Wbi + Rbi))
            if input_forget:
                ft = 1 - i
            else:
                ft = f(cl(x @ Wf.T + h @ Rf.T + Pf * c + Wbf + Rbf))
            ct = g(cl(x @ Wc.T + h @ Rc.T + Wbc + Rbc))
            cn = ft * c + i * ct
            o = f(cl(x @ Wo.T + h @ Ro.T + Po * cn + Wbo + Rbo))
            hn = o * hf(cn)
        Y[t] = np.where(active, hn, 0)
        h = np.where(active, hn, h)
        c = np.where(active, cn, c)
    return Y, h, c


def recurrent(
    name,
    op,
    T=3,
    B=2,
    I=3,
    H=4,
    direction="forward",
    layout=0,
    bias=True,
    lens=None,
    lens_runtime=False,
    init_h=False,
    init_c=False,
    peepholes=False,
    activations=None,
    alpha=None,
    beta=None,
    clip=None,
    linear_before_reset=0,
    input_forget=0,
    outputs=("Y", "Y_h", "Y_c"),
    const_weights=False,
):
    G = GATES[op]
    D = 2 if direction == "bidirectional" else 1
    f32 = np.float32

    def rand(*shape):
        return rng.uniform(-1, 1, shape).astype(f32)

    X = rand(*((T, B, I) if layout == 0 else (B, T, I)))
    W, R = rand(D, G * H, I), rand(D, G * H, H)
    Bv = rand(D, 2 * G * H) if bias else None
    state_shape = (D, B, H) if layout == 0 else (B, D, H)
    h0 = rand(*state_shape) if init_h else None
    c0 = rand(*state_shape) if init_c else None
    P = rand(D, 3 * H) if peepholes else None
    L = np.array(lens, dtype=np.int32) if lens is not None else None

    feeds, inits, names = [("X", X)], [], ["X"]
    for n, a in [("W", W), ("R", R), ("B", Bv), ("sequence_lens", L), ("initial_h", h0),
                 ("initial_c", c0), ("P", P)]:
        if a is None:
            names.append("")
            continue
        names.append(n)
        runtime = (n != "sequence_lens" and not const_weights) or (n == "sequence_lens" and lens_runtime)
        (feeds if runtime else inits).append((n, a))
    while names[-1] == "":
        names.pop()

    attrs = {"hidden_size": H, "direction": direction}
    if layout:
        attrs["layout"] = layout
    if activations is not None:
        attrs["activations"] = activations
    if alpha is not None:
        attrs["activation_alpha"] = alpha
    if beta is not None:
        attrs["activation_beta"] = beta
    if clip is not None:
        attrs["clip"] = clip
    if op == "GRU" and linear_before_reset:
        attrs["linear_before_reset"] = linear_before_reset
    if op == "LSTM" and input_forget:
        attrs["input_forget"] = input_forget

    # The reference, time-major, in float64.
    x = (X if layout == 0 else X.transpose(1, 0, 2)).astype(np.float64)
    to_dbh = (lambda s: s) if layout == 0 else (lambda s: s.transpose(1, 0, 2))
    h_init = to_dbh(h0).astype(np.float64) if h0 is not None else np.zeros((D, B, H))
    c_init = to_dbh(c0).astype(np.float64) if c0 is not None else np.zeros((D, B, H))
    bias64 = Bv.astype(np.float64) if Bv is not None else np.zeros((D, 2 * G * H))
    P64 = P.astype(np.float64) if P is not None else np.zeros((D, 3 * H))
    lens_ref = L if L is not None else np.full(B, T)
    names_all = activations or DEFAULT_ACTS[op] * D
    alphas, betas = list(alpha or []), list(beta or [])
    funcs = [activation(n, alphas, betas) for n in names_all]
    per_dir = len(DEFAULT_ACTS[op])
    ys, hs, cs = [], [], []
    for d in range(D):
        y, h, c = run_direction(
            op, x, W[d].astype(np.float64), R[d].astype(np.float64),
            bias64[d, : G * H], bias64[d, G * H:], P64[d], h_init[d], c_init[d],
            lens_ref, direction == "reverse" or d == 1,
            funcs[d * per_dir:(d + 1) * per_dir], clip, linear_before_reset, input_forget,
        )
        ys.append(y)
        hs.append(h)
        cs.append(c)
    Y = np.stack(ys, axis=1)  # [T, D, B, H]
    Yh, Yc = np.stack(hs), np.stack(cs)
    if layout == 1:
        Y, Yh, Yc = Y.transpose(2, 0, 1, 3), Yh.transpose(1, 0, 2), Yc.transpose(1, 0, 2)
    results = {"Y": Y, "Y_h": Yh, "Y_c": Yc}
    slots = ["Y", "Y_h", "Y_c"][: 3 if op == "LSTM" else 2]
    node_outputs = [s if s in outputs else "" for s in slots]
    while node_outputs[-1] == "":
        node_outputs.pop()
    node = helper.make_node(op, names, node_outputs, **attrs)
    outs = [(s, results[s].astype(f32)) for s in slots if s in outputs]
    save(name, node, feeds, outs, inits)


def recurrent_cases():
    recurrent("rnn_bias_initial_h", "RNN", init_h=True)
    recurrent("rnn_bidirectional_layout1_leakyrelu", "RNN", direction="bidirectional",
              layout=1, activations=["Relu", "LeakyRelu"], alpha=[0.2])
    recurrent("rnn_reverse_scaledtanh_clip", "RNN", direction="reverse",
              activations=["ScaledTanh"], alpha=[1.5], beta=[0.7], clip=0.8)
    recurrent("rnn_affine_no_bias", "RNN", bias=False, activations=["Affine"],
              alpha=[0.5], beta=[0.1], T=2)
    recurrent("rnn_seq_lens_const_bidirectional", "RNN", direction="bidirectional",
              lens=[3, 1], init_h=True)
    recurrent("rnn_seq_lens_runtime_reverse", "RNN", direction="reverse", lens=[2, 0],
              lens_runtime=True, init_h=True)
    recurrent("gru_bias_initial_h", "GRU", init_h=True)
    recurrent("gru_linear_before_reset_bidirectional", "GRU", direction="bidirectional",
              linear_before_reset=1, init_h=True)
    recurrent("gru_linear_before_reset_no_bias", "GRU", linear_before_reset=1, bias=False)
    recurrent("gru_layout1_hardsigmoid_softsign", "GRU", layout=1, init_h=True,
              activations=["HardSigmoid", "Softsign"], alpha=[0.3], beta=[0.4])
    recurrent("gru_reverse_clip_seq_lens_runtime", "GRU", direction="reverse", clip=0.5,
              lens=[1, 3], lens_runtime=True)
    recurrent("gru_only_y_h_const_weights", "GRU", outputs=("Y_h",), const_weights=True,
              T=4, B=3)
    recurrent("lstm_peepholes_initial_state_bidirectional", "LSTM",
              direction="bidirectional", peepholes=True, init_h=True, init_c=True)
    recurrent("lstm_input_forget_peepholes", "LSTM", input_forget=1, peepholes=True,
              init_c=True)
    recurrent("lstm_layout1_seq_lens_const_bidirectional", "LSTM", layout=1,
              direction="bidirectional", lens=[2, 3], init_h=True, init_c=True)
    recurrent("lstm_reverse_activations_clip", "LSTM", direction="reverse",
              activations=["HardSigmoid", "Elu", "Softplus"], alpha=[0.25, 0.9],
              beta=[0.45], clip=2.0)
    recurrent("lstm_seq_lens_runtime_bidirectional_peepholes", "LSTM",
              direction="bidirectional", lens=[3, 1], lens_runtime=True, peepholes=True,
              init_h=True, init_c=True)
    recurrent("lstm_const_weights_thresholdedrelu", "LSTM", const_weights=True,
              activations=["Sigmoid", "ThresholdedRelu", "Tanh"], alpha=[0.1], T=4)
    recurrent("lstm_only_y_c", "LSTM", outputs=("Y_c",), bias=False)

    X = np.zeros((2, 1, 3), np.float32)
    W = np.zeros((1, 4, 3), np.float32)
    R = np.zeros((1, 4, 4), np.float32)
    feeds = [("X", X), ("W", W), ("R", R)]
    Y = [("Y_h", np.zeros((1, 1, 4), np.float32))]
    save("error_rnn_direction",
         helper.make_node("RNN", ["X", "W", "R"], ["", "Y_h"], hidden_size=4,
                          direction="sideways"),
         feeds, Y, expect_error="direction must be forward, reverse or bidirectional")
    save("error_rnn_activation",
         helper.make_node("RNN", ["X", "W", "R"], ["", "Y_h"], activations=["Swishy"]),
         feeds, Y, expect_error="activation function 'Swishy'")
    save("error_rnn_hidden_size",
         helper.make_node("RNN", ["X", "W", "R"], ["", "Y_h"], hidden_size=5),
         feeds, Y, expect_error="hidden_size 5")


# --- Einsum -------------------------------------------------------------------


def einsum(name, equation, *shapes, dtype=np.float32):
    arrays = [rng.uniform(-1, 1, s).astype(dtype) for s in shapes]
    names = [f"x{k}" for k in range(len(arrays))]
    want = np.asarray(np.einsum(equation, *[a.astype(np.float64) for a in arrays]))
    node = helper.make_node("Einsum", names, ["y"], equation=equation)
    save(name, node, list(zip(names, arrays)), [("y", want.astype(dtype))], opset=12)


def einsum_cases():
    einsum("einsum_matmul", "ij,jk->ik", (3, 4), (4, 5))
    einsum("einsum_matmul_implicit", "ij,jk", (3, 4), (4, 5))
    einsum("einsum_batch_matmul_f64", "bij,bjk->bik", (2, 3, 4), (2, 4, 5), dtype=np.float64)
    einsum("einsum_ellipsis_broadcast", "...ij,...jk->...ik", (2, 1, 3, 4), (5, 4, 2))
    einsum("einsum_ellipsis_rank_differs", "...i,...i->...", (3, 4), (4,))
    einsum("einsum_ellipsis_middle", "i...j->j...i", (2, 3, 4, 5))
    einsum("einsum_diagonal", "ii->i", (4, 4))
    einsum("einsum_trace", "ii", (4, 4))
    einsum("einsum_diagonal_extra_axis", "iij->ji", (3, 3, 2))
    einsum("einsum_outer", "i,j->ij", (3,), (4,))
    einsum("einsum_three_operands", "ij,jk,kl->il", (2, 3), (3, 4), (4, 5))
    einsum("einsum_attention_scores", "bhqd,bhkd->bhqk", (2, 2, 3, 4), (2, 2, 5, 4))
    einsum("einsum_sum_all", "ijk->", (2, 3, 4))
    einsum("einsum_uppercase", "Ab,bC->AC", (2, 3), (3, 4))
    einsum("einsum_elementwise", "i,i->i", (5,), (5,))
    einsum("einsum_frobenius", "ij,ij->", (3, 4), (3, 4))
    einsum("einsum_sum_rows_then_dot", "ij,i->j", (3, 4), (3,))
    einsum("einsum_reduce_unshared_early", "ijk,jil->kl", (2, 3, 4), (3, 2, 5))
    einsum("einsum_batch_and_sum", "bn,bnm,m->b", (2, 3), (2, 3, 4), (4,))

    save("error_einsum_terms",
         helper.make_node("Einsum", ["x0"], ["y"], equation="ij,jk->ik"),
         [("x0", np.zeros((2, 2), np.float32))], [("y", np.zeros((2, 2), np.float32))],
         opset=12, expect_error="has 2 terms for 1 inputs")
    save("error_einsum_output_label",
         helper.make_node("Einsum", ["x0"], ["y"], equation="ij->k"),
         [("x0", np.zeros((2, 2), np.float32))], [("y", np.zeros((2,), np.float32))],
         opset=12, expect_error="output label 'k'")
    save("error_einsum_rank",
         helper.make_node("Einsum", ["x0"], ["y"], equation="ijk->i"),
         [("x0", np.zeros((2, 2), np.float32))], [("y", np.zeros((2,), np.float32))],
         opset=12, expect_error="3 labels for an operand of rank 2")


{"recurrent": recurrent_cases, "einsum": einsum_cases}[FAMILY]()
