"""Writes DeformConv, RoiAlign, MaxPool-with-Indices, antialiased Resize and
TreeEnsemble test cases in the ONNX backend-test layout (`<case>/model.onnx`,
`<case>/test_data_set_0/{input,output}_K.pb`) into argv[1], for the family argv[2].

Expected outputs come from onnx's ReferenceEvaluator, on configurations the backend
node suite does not cover (strides, dilations, groups, several rois and batches,
other ranks and storage orders, axes and exclude_outside, several trees and every
aggregate function). Cases named `error_*` hold a model import must reject and
`expect_error`, a substring of the message.
"""

import os
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

OUT = sys.argv[1]
FAMILY = sys.argv[2]
rng = np.random.default_rng(20260417)


def save(name, node, feeds, initializers=(), opset=22, ml_opset=None, expect_error=None):
    d = os.path.join(OUT, name)
    os.makedirs(os.path.join(d, "test_data_set_0"))

    def info(n, a):
        return helper.make_tensor_value_info(
            n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape
        )

    opsets = [helper.make_opsetid("", opset)]
    if ml_opset is not None:
        opsets.append(helper.make_opsetid("ai.onnx.ml", ml_opset))
    outputs = []
    if expect_error is None:
        probe = helper.make_model(
            helper.make_graph(
                [node],
                name,
                [info(n, a) for n, a in feeds],
                [helper.make_value_info(o, onnx.TypeProto()) for o in node.output],
                [numpy_helper.from_array(a, n) for n, a in initializers],
            ),
            opset_imports=opsets,
        )
        results = ReferenceEvaluator(probe).run(None, dict(feeds))
        outputs = list(zip(node.output, results))
    graph = helper.make_graph(
        [node],
        name,
        [info(n, a) for n, a in feeds],
        [info(n, a) for n, a in outputs]
        or [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in node.output],
        [numpy_helper.from_array(a, n) for n, a in initializers],
    )
    model = helper.make_model(graph, opset_imports=opsets)
    onnx.save(model, os.path.join(d, "model.onnx"))
    for kind, tensors in (("input", feeds), ("output", outputs)):
        for k, (n, a) in enumerate(tensors):
            with open(os.path.join(d, "test_data_set_0", f"{kind}_{k}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(np.asarray(a), n).SerializeToString())
    if expect_error is not None:
        with open(os.path.join(d, "expect_error"), "w") as f:
            f.write(expect_error)


def f32(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# --- DeformConv ------------------------------------------------------------------


def deform_conv_cases():
    configs = [
        # name, N, C, H, W, OC, kernel, attrs, with bias, with mask
        ("plain", 1, 2, 5, 6, 3, (3, 3), {}, False, False),
        ("pads_strides", 2, 2, 6, 5, 2, (3, 2), dict(pads=[1, 0, 2, 1], strides=[2, 1]), True, False),
        ("dilations", 1, 3, 7, 7, 2, (2, 3), dict(dilations=[2, 1], pads=[1, 1, 1, 1]), False, True),
        ("groups", 2, 4, 5, 5, 6, (2, 2), dict(group=2, offset_group=2), True, True),
        ("offset_groups", 1, 6, 4, 5, 2, (3, 3), dict(offset_group=3, pads=[1, 1, 1, 1]), True, True),
    ]
    for name, n, c, h, w, oc, k, attrs, bias, mask in configs:
        group = attrs.get("group", 1)
        og = attrs.get("offset_group", 1)
        pads = attrs.get("pads", [0, 0, 0, 0])
        strides = attrs.get("strides", [1, 1])
        dil = attrs.get("dilations", [1, 1])
        oh = (h + pads[0] + pads[2] - (dil[0] * (k[0] - 1) + 1)) // strides[0] + 1
        ow = (w + pads[1] + pads[3] - (dil[1] * (k[1] - 1) + 1)) // strides[1] + 1
        # Offsets of up to ±2.5 pixels: many samples fall between pixels, some outside.
        feeds = [
            ("X", f32(n, c, h, w)),
            ("W", f32(oc, c // group, *k)),
            ("offset", f32(n, og * k[0] * k[1] * 2, oh, ow, scale=1.2)),
        ]
        inputs = ["X", "W", "offset"]
        if bias:
            feeds.append(("B", f32(oc)))
            inputs.append("B")
        elif mask:
            inputs.append("")
        if mask:
            feeds.append(("mask", rng.uniform(0, 1, (n, og * k[0] * k[1], oh, ow)).astype(np.float32)))
            inputs.append("mask")
        node = helper.make_node(
            "DeformConv", inputs, ["Y"], kernel_shape=list(k), **attrs
        )
        save(f"deform_conv_{name}", node, feeds)
    node = helper.make_node("DeformConv", ["X", "W", "offset"], ["Y"], kernel_shape=[2, 2])
    save(
        "error_deform_conv_offset_shape",
        node,
        [("X", f32(1, 1, 4, 4)), ("W", f32(1, 1, 2, 2)), ("offset", f32(1, 6, 3, 3))],
        expect_error="offset_group · kernel taps",
    )


# --- RoiAlign --------------------------------------------------------------------


def roi_align_cases():
    x = f32(2, 3, 9, 11)
    # Boxes (x1, y1, x2, y2) inside, across the border, tiny and inverted, on both
    # images.
    rois = np.array(
        [
            [0.5, 1.0, 7.3, 6.2],
            [-2.0, 3.5, 4.0, 12.0],
            [8.0, 0.0, 13.0, 3.0],
            [2.2, 2.2, 2.6, 2.4],
            [6.0, 5.0, 3.0, 4.0],
        ],
        np.float32,
    )
    batch = np.array([0, 1, 1, 0, 1], np.int64)
    for mode in ("avg", "max"):
        for ct in ("half_pixel", "output_half_pixel"):
            for ratio, scale in ((2, 1.0), (3, 0.75)):
                node = helper.make_node(
                    "RoiAlign",
                    ["X", "rois", "batch_indices"],
                    ["Y"],
                    mode=mode,
                    coordinate_transformation_mode=ct,
                    output_height=3,
                    output_width=2,
                    sampling_ratio=ratio,
                    spatial_scale=scale,
                )
                save(
                    f"roi_align_{mode}_{ct}_{ratio}",
                    node,
                    [("X", x), ("rois", rois), ("batch_indices", batch)],
                )
        # An adaptive grid: one per box, from the constant rois.
        node = helper.make_node(
            "RoiAlign",
            ["X", "rois", "batch_indices"],
            ["Y"],
            mode=mode,
            output_height=2,
            output_width=3,
            sampling_ratio=0,
            spatial_scale=0.9,
        )
        save(
            f"roi_align_{mode}_adaptive",
            node,
            [("X", x), ("batch_indices", batch)],
            initializers=[("rois", rois)],
        )
    node = helper.make_node("RoiAlign", ["X", "rois", "batch_indices"], ["Y"])
    save(
        "error_roi_align_adaptive_runtime_rois",
        node,
        [("X", x), ("rois", rois), ("batch_indices", batch)],
        expect_error="needs constant rois",
    )


# --- MaxPool with Indices --------------------------------------------------------


def max_pool_cases():
    def ties(*shape):
        # onnx's reference numbers indices only off its generic pooling path, taken with
    # a stride or dilation other than 1: every case has one.
    # Few distinct values: many windows hold their maximum twice.
        return rng.integers(-3, 3, shape).astype(np.float32)

    configs = [
        ("1d", ties(2, 3, 11), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
        ("1d_dilated", f32(1, 2, 12), dict(kernel_shape=[2], dilations=[3])),
        ("2d_ties", ties(2, 2, 7, 6), dict(kernel_shape=[3, 2], strides=[1, 2], pads=[1, 0, 1, 1])),
        (
            "2d_ceil",
            f32(1, 3, 8, 7),
            dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
        ),
        ("2d_dilated", f32(1, 2, 7, 6), dict(kernel_shape=[2, 3], dilations=[2, 1], pads=[0, 1, 1, 1])),
        (
            "2d_column_major",
            ties(2, 2, 6, 5),
            dict(kernel_shape=[2, 2], strides=[1, 2], pads=[1, 1, 0, 0], storage_order=1),
        ),
        ("3d", f32(1, 2, 5, 4, 6), dict(kernel_shape=[2, 3, 2], strides=[2, 1, 2])),
        (
            "3d_column_major",
            ties(1, 2, 4, 5, 3),
            dict(
                kernel_shape=[2, 2, 2],
                strides=[1, 1, 2],
                pads=[1, 0, 1, 0, 1, 1],
                storage_order=1,
            ),
        ),
    ]
    for name, x, attrs in configs:
        node = helper.make_node("MaxPool", ["x"], ["y", "indices"], **attrs)
        save(f"max_pool_indices_{name}", node, [("x", x)])
    # -inf everywhere next to the padding: the index still names a real pixel.
    x = f32(1, 1, 4, 4)
    x[0, 0, :2, :2] = -np.inf
    node = helper.make_node(
        "MaxPool",
        ["x"],
        ["y", "indices"],
        kernel_shape=[3, 3],
        strides=[1, 2],
        pads=[2, 2, 0, 0],
    )
    save("max_pool_indices_neg_inf", node, [("x", x)])


# --- Antialiased Resize ----------------------------------------------------------


def resize_cases():
    x = f32(2, 3, 11, 9)
    configs = [
        # name, mode, scales, sizes, extra attrs, roi
        ("linear_scales", "linear", [1, 1, 0.4, 0.7], None, {}, None),
        ("cubic_sizes", "cubic", None, [2, 3, 4, 5], {}, None),
        ("cubic_a_exclude", "cubic", [1, 1, 0.3, 0.55], None, dict(cubic_coeff_a=-0.5, exclude_outside=1), None),
        ("linear_exclude", "linear", [1, 1, 0.25, 0.45], None, dict(exclude_outside=1), None),
        ("linear_axes", "linear", [0.6, 0.35], None, dict(axes=[3, 2]), None),
        ("cubic_up_down", "cubic", [1, 1, 1.6, 0.5], None, {}, None),
        ("linear_align_corners", "linear", None, [2, 3, 5, 3], dict(coordinate_transformation_mode="align_corners"), None),
        ("cubic_symmetric", "cubic", [1, 1, 0.45, 0.8], None, dict(coordinate_transformation_mode="half_pixel_symmetric"), None),
        ("linear_not_larger", "linear", None, [4, 4], dict(axes=[2, 3], keep_aspect_ratio_policy="not_larger"), None),
        (
            "linear_crop",
            "linear",
            None,
            [2, 3, 4, 3],
            dict(coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=7.5),
            [0, 0, -0.2, 0.3, 1, 1, 0.9, 1.3],
        ),
    ]
    for name, mode, scales, sizes, attrs, roi in configs:
        inits = []
        inputs = ["X", "", "", ""]
        if roi is not None:
            inits.append(("roi", np.array(roi, np.float32)))
            inputs[1] = "roi"
        if scales is not None:
            inits.append(("scales", np.array(scales, np.float32)))
            inputs[2] = "scales"
        if sizes is not None:
            inits.append(("sizes", np.array(sizes, np.int64)))
            inputs[3] = "sizes"
        while inputs[-1] == "":
            inputs.pop()
        node = helper.make_node("Resize", inputs, ["Y"], mode=mode, antialias=1, **attrs)
        save(f"resize_antialias_{name}", node, [("X", x)], initializers=inits)


# --- TreeEnsemble ----------------------------------------------------------------


def random_ensemble(n_trees, n_features, n_targets, modes, max_depth):
    """Random trees over features drawn from {1..6} (and NaN): comparisons hit both
    ways, equality and membership included. Member values avoid 0, which the
    reference's parser takes for the end of a set."""
    nodes = dict(mode=[], feature=[], split=[], tid=[], tleaf=[], fid=[], fleaf=[], missing=[])
    members = []
    leaves = dict(target=[], weight=[])

    def leaf():
        leaves["target"].append(int(rng.integers(0, n_targets)))
        leaves["weight"].append(float(np.round(rng.uniform(-5, 5), 2)))
        return len(leaves["target"]) - 1, 1

    def node(depth):
        if depth == max_depth or (depth > 0 and rng.uniform() < 0.25):
            return leaf()
        i = len(nodes["mode"])
        mode = int(rng.choice(modes))
        for k in nodes:
            nodes[k].append(0)
        nodes["mode"][i] = mode
        nodes["feature"][i] = int(rng.integers(0, n_features))
        nodes["split"][i] = float(rng.integers(1, 7)) + (0.5 if mode < 4 and rng.uniform() < 0.5 else 0)
        nodes["missing"][i] = int(rng.uniform() < 0.5)
        if mode == 6:
            members.append(rng.choice(np.arange(1, 7), int(rng.integers(1, 4)), replace=False))
        nodes["tid"][i], nodes["tleaf"][i] = node(depth + 1)
        nodes["fid"][i], nodes["fleaf"][i] = node(depth + 1)
        return i, 0

    roots = []
    for _ in range(n_trees):
        roots.append(node(0)[0])
    # Member sets in node order (the spec's; node() numbers nodes as it makes
    # them), each ended by NaN.
    membership = [v for m in members for v in list(m) + [np.nan]]
    return nodes, leaves, roots, membership


def tree_ensemble_cases():
    configs = [
        # name, trees, features, targets, modes, depth, aggregate, dtype, split dtype
        ("leq_sum", 3, 3, 2, [0], 3, 1, np.float32, np.float32),
        ("all_modes_sum", 4, 4, 3, [0, 1, 2, 3, 4, 5, 6], 4, 1, np.float32, np.float32),
        ("average", 5, 3, 2, [0, 3, 4], 3, 0, np.float32, np.float64),
        ("min", 4, 2, 3, [1, 2, 6], 4, 2, np.float32, np.float32),
        ("max", 4, 3, 2, [0, 5, 6], 3, 3, np.float64, np.float64),
        ("double_input", 2, 3, 4, [0, 2, 4], 4, 1, np.float64, np.float32),
    ]
    for name, trees, nf, nt, modes, depth, agg, dtype, split_dtype in configs:
        nodes, leaves, roots, membership = random_ensemble(trees, nf, nt, modes, depth)
        attrs = dict(
            n_targets=nt,
            aggregate_function=agg,
            post_transform=0,
            tree_roots=roots,
            nodes_modes=numpy_helper.from_array(np.array(nodes["mode"], np.uint8), "nodes_modes"),
            nodes_featureids=nodes["feature"],
            nodes_splits=numpy_helper.from_array(np.array(nodes["split"], split_dtype), "nodes_splits"),
            nodes_truenodeids=nodes["tid"],
            nodes_trueleafs=nodes["tleaf"],
            nodes_falsenodeids=nodes["fid"],
            nodes_falseleafs=nodes["fleaf"],
            nodes_missing_value_tracks_true=nodes["missing"],
            leaf_targetids=leaves["target"],
            leaf_weights=numpy_helper.from_array(np.array(leaves["weight"], split_dtype), "leaf_weights"),
        )
        if membership:
            attrs["membership_values"] = numpy_helper.from_array(
                np.array(membership, np.float32), "membership_values"
            )
        x = rng.integers(1, 7, (40, nf)).astype(dtype)
        x[rng.uniform(size=x.shape) < 0.3] += 0.5
        x[rng.uniform(size=x.shape) < 0.1] = np.nan
        node = helper.make_node("TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml", **attrs)
        save(f"tree_ensemble_{name}", node, [("X", x)], ml_opset=5)
    # A tree that is a single leaf, next to a real one.
    node = helper.make_node(
        "TreeEnsemble",
        ["X"],
        ["Y"],
        domain="ai.onnx.ml",
        n_targets=2,
        tree_roots=[0, 1],
        nodes_modes=numpy_helper.from_array(np.array([0, 0], np.uint8), "nodes_modes"),
        nodes_featureids=[0, 1],
        nodes_splits=numpy_helper.from_array(np.array([0.0, 0.5], np.float32), "nodes_splits"),
        nodes_truenodeids=[0, 1],
        nodes_trueleafs=[1, 1],
        nodes_falsenodeids=[0, 2],
        nodes_falseleafs=[1, 1],
        leaf_targetids=[1, 0, 1],
        leaf_weights=numpy_helper.from_array(np.array([2.5, -1.0, 4.0], np.float32), "leaf_weights"),
    )
    save("tree_ensemble_leaf_tree", node, [("X", f32(7, 2))], ml_opset=5)
    # A cycle is a broken model.
    node = helper.make_node(
        "TreeEnsemble",
        ["X"],
        ["Y"],
        domain="ai.onnx.ml",
        n_targets=1,
        tree_roots=[0],
        nodes_modes=numpy_helper.from_array(np.array([0, 0], np.uint8), "nodes_modes"),
        nodes_featureids=[0, 0],
        nodes_splits=numpy_helper.from_array(np.array([0.0, 0.5], np.float32), "nodes_splits"),
        nodes_truenodeids=[1, 0],
        nodes_trueleafs=[0, 0],
        nodes_falsenodeids=[0, 0],
        nodes_falseleafs=[1, 1],
        leaf_targetids=[0],
        leaf_weights=numpy_helper.from_array(np.array([1.0], np.float32), "leaf_weights"),
    )
    save("error_tree_ensemble_cycle", node, [("X", f32(2, 1))], ml_opset=5, expect_error="form a cycle")


FAMILIES = {
    "deform_conv": deform_conv_cases,
    "roi_align": roi_align_cases,
    "max_pool": max_pool_cases,
    "resize": resize_cases,
    "tree_ensemble": tree_ensemble_cases,
}

FAMILIES[FAMILY]()
