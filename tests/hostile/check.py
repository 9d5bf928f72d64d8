#!/usr/bin/env python3
"""Attacks `nnc compile` the way a hostile model would, and checks that every attempt
ends in a compiled model or in one clear refusal.

Two kinds of input:
  * a corpus of hand-made hostile models and command lines (`corpus()` below): panicking
    op/shape combinations, folding that would allocate terabytes, overflowing shapes,
    FIFOs, symlink escapes, sparse external data, invalid graphs, bad CLI arguments,
    very wide graphs;
  * byte-level mutants (flips, truncations, insertions, splices) of seed models.

Each attempt runs under a time limit and an address-space limit. A finding is any of: a
panic (exit 101), a signal (abort, segfault), a timeout, a refusal that is not exactly one
`error:` line naming the model file (and the node, where the case names one), an exit
code other than 0 or 1, or an output file left behind by a failed compile.

    tests/hostile/check.py --nnc target/release/nnc [--seeds A.onnx B.onnx]
                           [--mutants 1000] [--seed 1] [--timeout 20] [--memory 8G]

Prints one line per finding and a summary; exits 1 if there was any finding. Needs the
`onnx` and `numpy` Python packages.
"""
import argparse
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def model(nodes, inputs, outputs, inits=(), opset=OPSET, ir_version=8):
    g = helper.make_graph(nodes, "hostile", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)] if opset else [])
    m.ir_version = ir_version
    return m


def vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def i64(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
BIG = 2**62


class Case:
    """One attempt: a model (or raw bytes) written as `model.onnx` in a fresh folder,
    optional files beside it, extra CLI arguments, and what a refusal must mention."""

    def __init__(self, name, model=None, raw=None, args=(), files=None, node=None,
                 setup=None, model_name="model.onnx", may_compile=False, names=None):
        self.name, self.model, self.raw, self.args = name, model, raw, list(args)
        self.files, self.node, self.setup = files or {}, node, setup
        self.model_name, self.may_compile = model_name, may_compile
        # What the refusal must name: the model file, or for a bad command line the
        # argument at fault.
        self.names = names or model_name


def one(op, ins, outs, inputs, outputs, inits=(), **attrs):
    return model([helper.make_node(op, ins, outs, name="n0", **attrs)], inputs, outputs, inits)


def external(name, location, offset=0, length=None, dims=(4,)):
    t = TensorProto(name=name, data_type=F, dims=list(dims))
    t.data_location = TensorProto.EXTERNAL
    for k, v in [("location", location), ("offset", str(offset))] + (
        [("length", str(length))] if length is not None else []
    ):
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


def ext_model(location, dims=(4,), offset=0, length=None):
    w = external("w", location, offset, length, dims)
    return model([helper.make_node("Add", ["x", "w"], ["y"], name="add")],
                 [vi("x", F, list(dims))], [vi("y", F, list(dims))], [w])


def corpus():
    cases = []
    add = cases.append
    # Op/shape/dtype combinations that once panicked the compiler.
    add(Case("gather_rank0_data", one("Gather", ["d", "i"], ["y"], [vi("d", F, []), vi("i", I64, [1])], [vi("y", F, None)]), node="n0"))
    add(Case("gather_float_indices", one("Gather", ["d", "i"], ["y"], [vi("d", F, [4]), vi("i", F, [2])], [vi("y", F, None)]), node="n0"))
    add(Case("gather_bool_indices", one("Gather", ["d", "i"], ["y"], [vi("d", F, [4]), vi("i", B, [2])], [vi("y", F, None)]), node="n0"))
    add(Case("split_scalar", model([helper.make_node("Split", ["x"], ["a", "b"], name="n0")],
                                   [vi("x", F, [])], [vi("a", F, None), vi("b", F, None)]), node="n0"))
    add(Case("split_to_sequence_scalar", model([helper.make_node("SplitToSequence", ["x"], ["s"], name="n0"),
                                               helper.make_node("SequenceAt", ["s", "k"], ["y"], name="n1")],
                                              [vi("x", F, [])], [vi("y", F, None)], [i64("k", 0)]), node="n0"))
    add(Case("where_float_condition", one("Where", ["c", "a", "b"], ["y"], [vi("c", F, [3]), vi("a", F, [3]), vi("b", F, [3])], [vi("y", F, None)]), node="n0"))
    # Constant folding that would allocate without bound.
    add(Case("constant_of_shape_2p37", one("ConstantOfShape", ["s"], ["y"], [], [vi("y", F, None)], [i64("s", [2**37])])))
    add(Case("range_2p40", model([helper.make_node("Range", ["a", "b", "d"], ["y"], name="n0")], [], [vi("y", I64, None)],
                                 [i64("a", 0), i64("b", 2**40), i64("d", 1)])))
    add(Case("range_delta_zero", model([helper.make_node("Range", ["a", "b", "d"], ["y"], name="n0")], [], [vi("y", I64, None)],
                                       [i64("a", 0), i64("b", 10), i64("d", 0)])))
    add(Case("onehot_depth_2p40", model([helper.make_node("OneHot", ["i", "d", "v"], ["y"], name="n0")], [vi("i", I64, [2])], [vi("y", F, None)],
                                        [i64("d", 2**40), numpy_helper.from_array(np.array([0, 1], np.float32), "v")])))
    add(Case("pad_2p31", model([helper.make_node("Pad", ["x", "p"], ["y"], name="n0")], [vi("x", F, [2])], [vi("y", F, None)],
                               [i64("p", [0, 2**31])])))
    add(Case("resize_axis_2p25", model([helper.make_node("Resize", ["x", "", "s"], ["y"], name="n0", mode="linear")],
                                       [vi("x", F, [1, 1, 1, 16])], [vi("y", F, None)],
                                       [numpy_helper.from_array(np.array([1, 1, 1, 2**21], np.float32), "s")]), node="n0"))
    add(Case("tile_huge", model([helper.make_node("Tile", ["x", "r"], ["y"], name="n0")], [vi("x", F, [2, 2])], [vi("y", F, None)],
                                [i64("r", [2**31, 2**31])])))
    # Shape arithmetic that overflows.
    add(Case("input_2p62x4", model([helper.make_node("Relu", ["x"], ["y"], name="n0")], [vi("x", F, [BIG, 4])], [vi("y", F, [BIG, 4])])))
    add(Case("expand_2p62_reducemax", model([helper.make_node("Expand", ["x", "s"], ["e"], name="n0"),
                                             helper.make_node("ReduceMax", ["e"], ["y"], name="n1", keepdims=0)],
                                            [vi("x", F, [1])], [vi("y", F, None)], [i64("s", [BIG + 1])])))
    add(Case("reshape_overflow", model([helper.make_node("Reshape", ["x", "s"], ["y"], name="n0")], [vi("x", F, [4])], [vi("y", F, None)],
                                       [i64("s", [BIG, BIG, 0])])))
    add(Case("input_shape_flag_overflow", model([helper.make_node("Relu", ["x"], ["y"], name="n0")], [vi("x", F, ["n", 4])], [vi("y", F, ["n", 4])]),
             args=["--dim", f"n={BIG}"]))
    # Invalid graphs.
    add(Case("two_producers", model([helper.make_node("Relu", ["x"], ["y"], name="n0"), helper.make_node("Neg", ["x"], ["y"], name="n1")],
                                    [vi("x", F, [2])], [vi("y", F, [2])]), node="n1"))
    add(Case("overwrites_input", model([helper.make_node("Relu", ["x"], ["x"], name="n0")], [vi("x", F, [2])], [vi("x", F, [2])]), node="n0"))
    add(Case("cycle", model([helper.make_node("Relu", ["b"], ["a"], name="n0"), helper.make_node("Neg", ["a"], ["b"], name="n1")],
                            [vi("x", F, [2])], [vi("b", F, [2])]), node="n0"))
    add(Case("opset_99", model([helper.make_node("Relu", ["x"], ["y"], name="n0")], [vi("x", F, [2])], [vi("y", F, [2])], opset=99)))
    add(Case("no_opset", model([helper.make_node("Relu", ["x"], ["y"], name="n0")], [vi("x", F, [2])], [vi("y", F, [2])], opset=None)))
    add(Case("transpose_negative_perm", one("Transpose", ["x"], ["y"], [vi("x", F, [2, 3])], [vi("y", F, None)], perm=[-1, 0]), node="n0"))
    add(Case("transpose_repeated_perm", one("Transpose", ["x"], ["y"], [vi("x", F, [2, 3])], [vi("y", F, None)], perm=[0, 0]), node="n0"))
    add(Case("resize_nan_scales", model([helper.make_node("Resize", ["x", "", "s"], ["y"], name="n0")], [vi("x", F, [1, 1, 2, 2])], [vi("y", F, None)],
                                        [numpy_helper.from_array(np.array([1, 1, np.nan, 2], np.float32), "s")]), node="n0"))
    add(Case("resize_negative_scales", model([helper.make_node("Resize", ["x", "", "s"], ["y"], name="n0")], [vi("x", F, [1, 1, 2, 2])], [vi("y", F, None)],
                                             [numpy_helper.from_array(np.array([1, 1, -2, 2], np.float32), "s")]), node="n0"))
    for attr, val in [("strides", [0, 0]), ("kernel_shape", [-3, 3]), ("dilations", [0, 1]), ("group", 0), ("pads", [-5, 0, 0, 0])]:
        w = numpy_helper.from_array(np.ones((2, 2, 3, 3), np.float32), "w")
        add(Case(f"conv_{attr}_bad", model([helper.make_node("Conv", ["x", "w"], ["y"], name="n0", **{attr: val})],
                                           [vi("x", F, [1, 2, 5, 5])], [vi("y", F, None)], [w]), node="n0"))
    add(Case("maxpool_kernel_zero", one("MaxPool", ["x"], ["y"], [vi("x", F, [1, 1, 4, 4])], [vi("y", F, None)], kernel_shape=[0, 0]), node="n0"))
    add(Case("softmax_axis_99", one("Softmax", ["x"], ["y"], [vi("x", F, [2, 3])], [vi("y", F, None)], axis=99), node="n0"))
    add(Case("concat_axis_99", one("Concat", ["x", "x"], ["y"], [vi("x", F, [2, 3])], [vi("y", F, None)], axis=99), node="n0"))
    add(Case("depth_to_space_blocksize_0", one("DepthToSpace", ["x"], ["y"], [vi("x", F, [1, 4, 2, 2])], [vi("y", F, None)], blocksize=0), node="n0"))
    add(Case("slice_step_zero", model([helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"], name="n0")], [vi("x", F, [4])], [vi("y", F, None)],
                                      [i64("s", [0]), i64("e", [4]), i64("a", [0]), i64("st", [0])]), node="n0"))
    add(Case("lrn_size_zero", one("LRN", ["x"], ["y"], [vi("x", F, [1, 2, 2, 2])], [vi("y", F, None)], size=0), node="n0"))
    # Run time: integer division overflow compiles (the check of its result is in the tests).
    add(Case("div_int64_min_by_minus_one", one("Div", ["a", "b"], ["y"], [vi("a", I64, [1]), vi("b", I64, [1])], [vi("y", I64, [1])]), may_compile=True))
    # Bytes that are not a model.
    add(Case("garbage", raw=bytes(random.Random(7).randrange(256) for _ in range(4096))))
    add(Case("empty_file", raw=b""))
    add(Case("names_break_header", model([helper.make_node("Relu", ["x*/\n#error"], ["y\"\\"], name="n0")],
                                         [vi("x*/\n#error", F, [2])], [vi("y\"\\", F, [2])]), may_compile=True))
    add(Case("nul_in_name", model([helper.make_node("Relu", ["x\0y"], ["y"], name="n0")], [vi("x\0y", F, [2])], [vi("y", F, [2])]), may_compile=True))
    deep = [helper.make_node("Relu", ["x" if k == 0 else f"v{k-1}"], [f"v{k}"], name=f"n{k}") for k in range(10000)]
    add(Case("deep_10000", model(deep, [vi("x", F, [2])], [vi("v9999", F, [2])]), may_compile=True))
    wide = [helper.make_node("Relu", ["x"], [f"y{k}"], name=f"n{k}") for k in range(10000)]
    add(Case("outputs_10000", model(wide, [vi("x", F, [2])], [vi(f"y{k}", F, [2]) for k in range(10000)]), may_compile=True))
    add(Case("concat_4000_inputs", model([helper.make_node("Concat", [f"x{k}" for k in range(4000)], ["y"], name="n0", axis=0)],
                                         [vi(f"x{k}", F, [2]) for k in range(4000)], [vi("y", F, [8000])]), may_compile=True))
    # External data: escapes, special files, lies about sizes.
    add(Case("external_parent_dir", ext_model("../w.bin")))
    add(Case("external_absolute", ext_model("/etc/hostname")))
    add(Case("external_offset_past_end", ext_model("w.bin", offset=1 << 40), files={"w.bin": b"\0" * 16}))
    add(Case("external_symlink_out", ext_model("w.bin"), setup=lambda d: os.symlink("/etc/hostname", os.path.join(d, "w.bin"))))
    add(Case("external_symlinked_folder", ext_model("sub/hostname"), setup=lambda d: os.symlink("/etc", os.path.join(d, "sub"))))
    add(Case("external_dev_zero", ext_model("z.bin", dims=(1 << 36,)), setup=lambda d: os.symlink("/dev/zero", os.path.join(d, "z.bin"))))
    add(Case("external_sparse_1tib", ext_model("s.bin", dims=(1 << 38,)), setup=lambda d: os.truncate(_touch(os.path.join(d, "s.bin")), 1 << 40)))
    add(Case("external_fifo", ext_model("f.bin"), setup=lambda d: os.mkfifo(os.path.join(d, "f.bin"))))
    add(Case("model_is_fifo", setup=lambda d: os.mkfifo(os.path.join(d, "model.onnx"))))
    add(Case("model_is_directory", setup=lambda d: os.mkdir(os.path.join(d, "model.onnx"))))
    # Command lines.
    relu = model([helper.make_node("Relu", ["x"], ["y"], name="n0")], [vi("x", F, [2])], [vi("y", F, [2])])
    add(Case("name_starts_with_digit", relu, args=["--name", "9x"], names="'9x'"))
    add(Case("header_would_overwrite_model", relu, model_name="m.h", args=["-o", "{dir}/m.so"]))
    add(Case("output_is_model", relu, model_name="m.so", args=["-o", "{dir}/m.so"]))
    add(Case("unwritable_output", relu, args=["-o", "/proc/nnc-hostile/libm.so"], names="/proc/nnc-hostile/libm.so: cannot write"))
    return cases


def _touch(path):
    open(path, "wb").close()
    return path


def mutate(data, rng):
    """One byte-level mutant: flips, overwrites with interesting values, truncation,
    insertion or a splice of the file with itself."""
    b = bytearray(data)
    kind = rng.randrange(6)
    if kind == 0 or not b:
        for _ in range(rng.randint(1, 8)):
            if b:
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    elif kind == 1:
        for _ in range(rng.randint(1, 4)):
            if b:
                b[rng.randrange(len(b))] = rng.choice([0, 1, 0x7F, 0x80, 0xFF])
    elif kind == 2:
        del b[rng.randrange(len(b)):]
    elif kind == 3:
        pos = rng.randrange(len(b) + 1)
        b[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    elif kind == 4:
        # Varint fields: set a run of continuation bits, the cheapest way to giant sizes.
        pos = rng.randrange(len(b))
        for k in range(pos, min(len(b), pos + rng.randint(1, 9))):
            b[k] |= 0x80
    else:
        a, c = sorted(rng.randrange(len(b) + 1) for _ in range(2))
        d = rng.randrange(len(b) + 1)
        b[d:d] = b[a:c]
    return bytes(b)


def limit_memory(max_bytes):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (max_bytes, max_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def attempt(nnc, folder, model_name, args, timeout, memory):
    """Runs `nnc compile` once; returns (verdict, detail) where verdict is 'compiled',
    'refused' or 'FINDING'."""
    model_path = os.path.join(folder, model_name)
    args = [a.replace("{dir}", folder) for a in args]
    if "-o" not in args:
        args += ["-o", os.path.join(folder, "out", "libm.so")]
        os.makedirs(os.path.join(folder, "out"), exist_ok=True)
    out_path = args[args.index("-o") + 1]
    before = set(os.listdir(os.path.dirname(out_path))) if os.path.isdir(os.path.dirname(out_path)) else set()
    cmd = [nnc, "compile", model_path] + args
    started = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=timeout, preexec_fn=limit_memory(memory))
    except subprocess.TimeoutExpired:
        return "FINDING", f"timeout after {timeout} s"
    elapsed = time.monotonic() - started
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode == 0:
        return "compiled", f"{elapsed:.1f} s"
    if p.returncode < 0:
        return "FINDING", f"signal {-p.returncode}: {err.strip()[:300]}"
    if p.returncode != 1:
        return "FINDING", f"exit {p.returncode}: {err.strip()[:300]}"
    lines = [l for l in err.splitlines() if l.strip()]
    if len(lines) < 1 or not lines[0].startswith("error: ") or sum(l.startswith("error") for l in lines) != 1:
        return "FINDING", f"not one error line: {err.strip()[:300]}"
    if "panicked" in err:
        return "FINDING", f"panic: {err.strip()[:300]}"
    if os.path.isdir(os.path.dirname(out_path)):
        left = set(os.listdir(os.path.dirname(out_path))) - before
        if left:
            return "FINDING", f"left behind {sorted(left)}: {lines[0][:200]}"
    # The diagnostic is one `error:` line, then where: `--> FILE, node 'N' (Op)`.
    return "refused", " | ".join(l.strip() for l in lines[:3])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nnc", required=True)
    ap.add_argument("--seeds", nargs="*", default=[])
    ap.add_argument("--mutants", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=20)
    ap.add_argument("--memory", default="8G")
    ap.add_argument("--no-corpus", action="store_true")
    ap.add_argument("--only", help="run only corpus cases whose name contains this")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    nnc = os.path.abspath(a.nnc)
    memory = parse_size(a.memory)
    findings, counts = [], {"compiled": 0, "refused": 0, "FINDING": 0}
    work = tempfile.mkdtemp(prefix="nnc-hostile-")
    try:
        if not a.no_corpus:
            for c in corpus():
                if a.only and a.only not in c.name:
                    continue
                folder = os.path.join(work, c.name)
                os.makedirs(folder)
                if c.model is not None:
                    with open(os.path.join(folder, c.model_name), "wb") as f:
                        f.write(c.model.SerializeToString())
                elif c.raw is not None:
                    with open(os.path.join(folder, c.model_name), "wb") as f:
                        f.write(c.raw)
                for name, data in c.files.items():
                    with open(os.path.join(folder, name), "wb") as f:
                        f.write(data)
                if c.setup:
                    c.setup(folder)
                verdict, detail = attempt(nnc, folder, c.model_name, c.args, a.timeout, memory)
                if verdict == "refused":
                    if c.names not in detail:
                        verdict, detail = "FINDING", f"refusal does not name the file: {detail}"
                    elif c.node and c.node not in detail:
                        verdict, detail = "FINDING", f"refusal does not name node {c.node}: {detail}"
                if verdict == "compiled" and not c.may_compile:
                    verdict, detail = "FINDING", "compiled, but this command line must be refused"
                counts[verdict] += 1
                if verdict == "FINDING":
                    findings.append(f"{c.name}: {detail}")
                if a.verbose or verdict == "FINDING":
                    print(f"{verdict:9} {c.name}: {detail}", flush=True)
        rng = random.Random(a.seed)
        seeds = [open(s, "rb").read() for s in a.seeds]
        for k in range(a.mutants if seeds else 0):
            which = rng.randrange(len(seeds))
            data = mutate(seeds[which], rng)
            folder = os.path.join(work, f"mutant{k}")
            os.makedirs(folder)
            with open(os.path.join(folder, "model.onnx"), "wb") as f:
                f.write(data)
            verdict, detail = attempt(nnc, folder, "model.onnx", [], a.timeout, memory)
            if verdict == "refused" and "model.onnx" not in detail:
                verdict, detail = "FINDING", f"refusal does not name the file: {detail}"
            counts[verdict] += 1
            if verdict == "FINDING":
                keep = os.path.join(tempfile.gettempdir(), f"nnc-hostile-finding-{a.seed}-{k}.onnx")
                shutil.copy(os.path.join(folder, "model.onnx"), keep)
                findings.append(f"mutant {k} of {a.seeds[which]} (kept as {keep}): {detail}")
                print(f"FINDING   mutant {k}: {detail}", flush=True)
            shutil.rmtree(folder, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"hostile check: {counts['compiled']} compiled, {counts['refused']} refused, "
          f"{counts['FINDING']} findings (timeout {a.timeout:g} s, address space {a.memory})")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
