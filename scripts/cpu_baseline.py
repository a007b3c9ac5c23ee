#!/usr/bin/env python3
"""NumPy baselines for the CPU benchmarks of tensorfn (`benches/cpu.rs`).

Times the CPU cases with NumPy (its bundled OpenBLAS for matrix products)
and prints one JSON object per line on stdout (see `scripts/bench-report`).
Threads: OPENBLAS_NUM_THREADS defaults to 2 here, matching
RAYON_NUM_THREADS=2 for the Rust side; NumPy's elementwise ufuncs use one
thread whatever the setting. Inputs are random, never zeros; each case
rotates among enough input sets to exceed the last-level cache.

    OPENBLAS_NUM_THREADS=2 python3 scripts/cpu_baseline.py [--quick] [--filter SUBSTR]

Case names, sizes and byte/flop counts must match `benches/cpu.rs`.
"""

import os

# Must be set before NumPy loads OpenBLAS.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

ROTATE_BYTES = 64 << 20
MAX_SETS = 16


class Plan:
    """Iteration counts: a full pass or a short `--quick` one."""

    def __init__(self, quick):
        self.warmup = 1 if quick else 2
        # Warm-up lasts at least this long, as in benches/common: the first
        # case after large inputs are allocated otherwise runs while the
        # kernel is still busy with their pages.
        self.warmup_s = 0.2 if quick else 1.0
        self.batch_s = 0.01 if quick else 0.02
        self.runs = 5 if quick else 15
        self.min_runs = 3 if quick else 5
        self.case_budget_s = 0.3 if quick else 1.5


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def emit(case, dtype, size, impl, **fields):
    rec = {"case": case, "dtype": dtype, "size": str(size), "impl": impl}
    rec.update(fields)
    print(json.dumps(rec), flush=True)


def n_sets(set_bytes):
    return max(1, min(MAX_SETS, math.ceil(ROTATE_BYTES / max(set_bytes, 1))))


def time_call(plan, call, sets):
    """Median microseconds per `call(i)` over timed batches."""
    warm = time.perf_counter()
    i = 0
    while i < plan.warmup or time.perf_counter() - warm < plan.warmup_s:
        call(i % sets)
        i += 1
    t0 = time.perf_counter()
    call(0)
    est_s = max(time.perf_counter() - t0, 1e-7)
    batch = max(1, min(1000, round(plan.batch_s / est_s)))
    runs = max(plan.min_runs, min(plan.runs, int(plan.case_budget_s / (batch * est_s))))
    times = []
    k = 0
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(batch):
            call(k % sets)
            k += 1
        times.append((time.perf_counter() - t0) * 1e6 / batch)
    return {"median_us": round(statistics.median(times), 3), "min_us": round(min(times), 3), "runs": runs, "batch": batch}


def measure(plan, case, dtype, size, nbytes, flops, call, sets):
    try:
        emit(case, dtype, size, "numpy", bytes=nbytes, flops=flops, **time_call(plan, call, sets))
    except Exception as e:  # noqa: BLE001 - report and go on
        emit(case, dtype, size, "numpy", error=f"{type(e).__name__}: {e}"[:300])
    log(f"{case} {dtype} {size}")


def rand(rng, shape):
    return (rng.random(shape, dtype=np.float32) * 4 - 2).astype(np.float32)


def sin_affine(x):
    return np.sin(x) * np.float32(2) + np.float32(5)


def gelu_tanh(x):
    c = np.float32(0.7978846)
    return np.float32(0.5) * x * (np.float32(1) + np.tanh(c * (x + np.float32(0.044715) * x * x * x)))


def chain6(x, y):
    s = np.float32(1) / (np.float32(1) + np.exp(-(x * y + np.float32(1))))
    return np.tanh(s * x) - y


def softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


CHAINS = [("ew_sin_affine", sin_affine, 1, 3), ("ew_gelu_tanh", gelu_tanh, 1, 9), ("ew_chain6", chain6, 2, 6)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer sizes and runs")
    ap.add_argument("--filter", default="", help="only cases whose name contains this")
    args = ap.parse_args()
    plan = Plan(args.quick)
    rng = np.random.default_rng(0)
    emit("meta", "-", "-", "numpy", numpy=np.__version__, python=platform.python_version(),
         openblas_threads=os.environ.get("OPENBLAS_NUM_THREADS"), cpus=os.cpu_count(),
         cpu=platform.processor() or platform.machine(), host=platform.node(),
         date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
         loadavg=" ".join(f"{v:.2f}" for v in os.getloadavg()), quick=args.quick)

    def want(case):
        return args.filter in case

    if want("cpu_matmul"):
        for n in ([256, 1024] if args.quick else [256, 512, 1024, 2048]):
            sets = n_sets(2 * n * n * 4)
            ins = [(rand(rng, (n, n)), rand(rng, (n, n))) for _ in range(sets)]
            measure(plan, "cpu_matmul", "f32", f"{n}x{n}x{n}", 3 * n * n * 4, 2 * n**3,
                    lambda i: ins[i][0] @ ins[i][1], sets)
    for n in ([1 << 20] if args.quick else [1 << 20, 1 << 22, 1 << 24]):
        sets = n_sets(2 * n * 4)
        xs = [rand(rng, (n,)) for _ in range(sets)]
        ys = [rand(rng, (n,)) for _ in range(sets)]
        for name, fn, arity, fl in CHAINS:
            case = "cpu_" + name
            if not want(case):
                continue
            call = (lambda i, fn=fn: fn(xs[i])) if arity == 1 else (lambda i, fn=fn: fn(xs[i], ys[i]))
            measure(plan, case, "f32", n, (arity + 1) * n * 4, fl * n, call, sets)
    if want("cpu_softmax"):
        for rows in ([256] if args.quick else [256, 1024, 4096]):
            cols = 4096
            sets = n_sets(rows * cols * 4)
            xs = [rand(rng, (rows, cols)) for _ in range(sets)]
            measure(plan, "cpu_softmax", "f32", f"{rows}x{cols}", 2 * rows * cols * 4, 5 * rows * cols,
                    lambda i: softmax(xs[i]), sets)


if __name__ == "__main__":
    main()
