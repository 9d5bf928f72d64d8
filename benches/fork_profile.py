#!/usr/bin/env python3
"""Where a model's multithreaded `run()` loses to a perfect speedup: the wall time of
every fork (one split node's `parallel_for`) and of the serial code between forks, with
T threads against the same forks run one task after another on the calling thread.

usage: benches/fork_profile.py MODEL.onnx [--threads 2] [--rounds 15] [--top 25]
                               [--nnc-args "..."]

The model is compiled to an object (`nnc compile -o X.o`, which keeps the symbols
`nnc_task_K` of the split nodes' task functions) and linked with the system C
compiler. A timing pool wraps a `nnc_pool.h` pool of T threads: its `parallel_for`
notes the clock before and after the inner pool's, and the task function's node. The
serial reference is a pool that claims T threads (so `run` forks as with T) but runs
every task itself, in order. Per fork: the node, its task count, the median ms of each
(over the rounds), the speedup, and the time lost against a perfect split (T-thread
time − serial time / T). "between forks" is the rest of `run`: the nodes left whole
and the parts of split nodes that run before their fork. Needs numpy, nm and cc.
"""
import argparse, collections, ctypes, os, re, shlex, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benches"))
from bench_models import NncModel, model_inputs, NNC  # noqa: E402
from threads_vs_ort import PooledRun, cpu_line  # noqa: E402

TIMING_POOL_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <time.h>
#include "nnc_pool.h"

#define MAX_FORKS 65536
typedef int32_t (*run_fn)(const void *const *, void *const *, void *, const void *);

typedef struct {
    nnc_thread_pool abi;          /* what the model calls */
    const nnc_thread_pool *inner; /* NULL: run the tasks in order here */
    uint32_t forks;
    double start[MAX_FORKS], end[MAX_FORKS];
    uint32_t tasks[MAX_FORKS];
    uintptr_t fn[MAX_FORKS];
    double run_start, run_end;
} timing_pool;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void timed_parallel_for(void *ctx, uint32_t n, nnc_task_fn task, void *task_ctx) {
    timing_pool *p = (timing_pool *)ctx;
    double t0 = now();
    if (p->inner)
        p->inner->parallel_for(p->inner->ctx, n, task, task_ctx);
    else
        for (uint32_t i = 0; i < n; i++) task(task_ctx, i, 0);
    double t1 = now();
    if (p->forks < MAX_FORKS) {
        p->start[p->forks] = t0;
        p->end[p->forks] = t1;
        p->tasks[p->forks] = n;
        p->fn[p->forks] = (uintptr_t)task;
        p->forks++;
    }
}

timing_pool *timing_pool_create(uint32_t threads, nnc_pool *inner) {
    timing_pool *p = (timing_pool *)calloc(1, sizeof(timing_pool));
    p->abi.ctx = p;
    p->abi.num_threads = threads;
    p->abi.parallel_for = timed_parallel_for;
    p->inner = inner ? nnc_pool_get(inner) : NULL;
    return p;
}

nnc_pool *inner_pool_create(uint32_t n) { return nnc_pool_create(n); }

/* One timed run; returns its status. */
int32_t timed_run(timing_pool *p, run_fn run, const void *const *in, void *const *out,
                  void *ws, const void *opts) {
    p->forks = 0;
    p->run_start = now();
    int32_t rc = run(in, out, ws, opts);
    p->run_end = now();
    return rc;
}

uint32_t forks(timing_pool *p) { return p->forks; }
double run_seconds(timing_pool *p) { return p->run_end - p->run_start; }
double fork_seconds(timing_pool *p, uint32_t i) { return p->end[i] - p->start[i]; }
uint32_t fork_tasks(timing_pool *p, uint32_t i) { return p->tasks[i]; }
/* The task function's offset in its library. */
uint64_t fork_fn_offset(timing_pool *p, uint32_t i) {
    Dl_info info;
    if (!dladdr((void *)p->fn[i], &info)) return 0;
    return (uint64_t)(p->fn[i] - (uintptr_t)info.dli_fbase);
}
"""


def build_timing_lib(tmp):
    src, lib = os.path.join(tmp, "timing_pool.c"), os.path.join(tmp, "libtimingpool.so")
    with open(src, "w") as f:
        f.write(TIMING_POOL_C)
    subprocess.run(["cc", "-O2", "-std=gnu11", "-shared", "-fPIC", "-pthread",
                    "-I", os.path.join(ROOT, "runtime-abi", "include"), src, "-o", lib, "-ldl"], check=True)
    tl = ctypes.CDLL(lib)
    for name, res, args in [("timing_pool_create", ctypes.c_void_p, [ctypes.c_uint32, ctypes.c_void_p]),
                            ("inner_pool_create", ctypes.c_void_p, [ctypes.c_uint32]),
                            ("timed_run", ctypes.c_int32, [ctypes.c_void_p] * 6),
                            ("forks", ctypes.c_uint32, [ctypes.c_void_p]),
                            ("run_seconds", ctypes.c_double, [ctypes.c_void_p]),
                            ("fork_seconds", ctypes.c_double, [ctypes.c_void_p, ctypes.c_uint32]),
                            ("fork_tasks", ctypes.c_uint32, [ctypes.c_void_p, ctypes.c_uint32]),
                            ("fork_fn_offset", ctypes.c_uint64, [ctypes.c_void_p, ctypes.c_uint32])]:
        getattr(tl, name).restype = res
        getattr(tl, name).argtypes = args
    return tl


def task_symbols(lib):
    """Offset → node index of every task function (`nnc_task_K`, node K's) in the linked
    library."""
    nm = subprocess.run(["nm", lib], capture_output=True, text=True, check=True).stdout
    return {int(m.group(1), 16): int(m.group(2))
            for m in re.finditer(r"^([0-9a-f]+) \w nnc_task_(\d+)$", nm, re.M)}


def node_names(ir_dump):
    """`%output` per node index, from `--dump-ir`."""
    return [line.split(" = ")[0].strip() for line in ir_dump.splitlines()
            if re.match(r"\s*%.*? = \w+", line)]


class TimedRuns(PooledRun):
    """`run()` of one model through one timing pool, with its own workspace."""

    def __init__(self, tl, model, pool):
        super().__init__(model, pool)
        self.tl, self.pool = tl, pool
        self.run_ptr = ctypes.cast(model.lib.run, ctypes.c_void_p).value

    def once(self):
        """(run seconds, [(fn offset, tasks, seconds)] per fork) of one run."""
        tl, p = self.tl, self.pool
        rc = tl.timed_run(p, self.run_ptr, ctypes.cast(self.m.in_ptrs, ctypes.c_void_p),
                          ctypes.cast(self.out_ptrs, ctypes.c_void_p), self.ws_ptr,
                          ctypes.addressof(self.opts))
        if rc != 0:
            raise RuntimeError(f"run returned {rc}")
        return tl.run_seconds(p), [(tl.fork_fn_offset(p, i), tl.fork_tasks(p, i), tl.fork_seconds(p, i))
                                   for i in range(tl.forks(p))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--nnc-args", default="")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        obj, so = os.path.join(tmp, "m.o"), os.path.join(tmp, "libm.so")
        r = subprocess.run([NNC, "compile", args.model, "-o", obj, "--dump-ir", *shlex.split(args.nnc_args)],
                           capture_output=True, text=True, check=True)
        names = node_names(r.stdout + r.stderr)
        subprocess.run(["cc", "-shared", "-o", so, obj], check=True)
        symbols = task_symbols(so)
        tl = build_timing_lib(tmp)
        model = NncModel(so)
        models_dir, stem = os.path.dirname(os.path.abspath(args.model)), os.path.basename(args.model)[:-5]
        model.bind(model_inputs(models_dir, stem, model.inputs))
        engines = {"serial": TimedRuns(tl, model, tl.timing_pool_create(args.threads, None)),
                   "pooled": TimedRuns(tl, model, tl.timing_pool_create(
                       args.threads, tl.inner_pool_create(args.threads)))}
        samples = collections.defaultdict(list)
        for e in engines.values():
            for _ in range(3):
                e.once()
        for _ in range(args.rounds):
            for name, e in engines.items():
                total, forks = e.once()
                samples[name].append((total, forks))
    layout = [(fn, n) for fn, n, _ in samples["serial"][0][1]]
    for name in engines:
        if any([(fn, n) for fn, n, _ in forks] != layout for _, forks in samples[name]):
            sys.exit(f"{name}: the forks differ from run to run")
    med = {name: ([statistics.median(f[i][2] for _, f in runs) for i in range(len(layout))],
                  statistics.median(t for t, _ in runs)) for name, runs in samples.items()}
    t = args.threads
    print(f"CPU: {cpu_line()}; {os.path.basename(args.model)} {args.nnc_args}".rstrip())
    print(f"{len(layout)} forks per run; wall ms, median of {args.rounds} alternating rounds; "
          f"serial: every task on the calling thread; pooled: {t} threads")
    rows = []
    for i, (fn, n) in enumerate(layout):
        node = symbols.get(fn)
        s, p = med["serial"][0][i] * 1e3, med["pooled"][0][i] * 1e3
        label = f"{node}: {names[node]}" if node is not None and node < len(names) else f"? {fn:#x}"
        rows.append((p - s / t, i, label, n, s, p))
    between = {name: (m[1] - sum(m[0])) * 1e3 for name, m in med.items()}
    total = {name: m[1] * 1e3 for name, m in med.items()}
    print(f"{'fork':>4} {'tasks':>5} {'serial ms':>9} {'pooled ms':>9} {'speedup':>7} {'lost ms':>7}  node")
    for lost, i, label, n, s, p in sorted(rows, reverse=True)[:args.top]:
        print(f"{i:4d} {n:5d} {s:9.3f} {p:9.3f} {s / p if p else 0:7.2f} {lost:7.3f}  {label}")
    forks_s, forks_p = sum(r[4] for r in rows), sum(r[5] for r in rows)
    if rows:
        print(f"forks:         serial {forks_s:8.3f} ms, pooled {forks_p:8.3f} ms, "
              f"speedup {forks_s / forks_p:.2f}, lost {forks_p - forks_s / t:.3f} ms")
    else:
        print("forks:         none (no node is split: `run` computes it all on the calling thread)")
    print(f"between forks: serial {between['serial']:8.3f} ms, pooled {between['pooled']:8.3f} ms")
    print(f"run:           serial {total['serial']:8.3f} ms, pooled {total['pooled']:8.3f} ms, "
          f"speedup {total['serial'] / total['pooled']:.2f}")



if __name__ == "__main__":
    main()
