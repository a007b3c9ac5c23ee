#!/usr/bin/env python3
"""Joins the matrix products of one training step with their kernels'
times: `train_gpt2`'s `TENSORFN_MATMUL_LOG=1` lines (one per product, in
launch order) with an `ncu` CSV of the same run, and prints one row per
product of the last step (shape, transposes, epilogue, algorithm, its
kernels and their microseconds), then the totals by kind.

    TENSORFN_MATMUL_LOG=1 ncu --clock-control none --metrics gpu__time_duration.sum \\
        --csv --print-units base --log-file k.csv train_gpt2 --bench --steps 1 2> log.txt
    python3 products_table.py log.txt k.csv [--csv out.csv]

The run repeats one step, so its last step's products are the last
period of the log (the shortest tail that the lines before it repeat).
Product kernels are told from the others by name; each log line takes
one main kernel and the reduction kernels cuBLASLt queues after it (the
bias gradients' `globalKernelBgradAB`, split-K's reduction).
"""
import argparse
import csv
import re
import sys

MAIN = re.compile(r"gemm|xmma|nvjet|cutlass|gemv", re.I)
AUX = re.compile(r"Bgrad|splitKreduce|reduce_kernel|splitk", re.I)
LINE = re.compile(r"tensorfn matmul (\S+) batch (\d+) m (\d+) k (\d+) n (\d+) a(\w) b(\w) (\w+) (.*)")


def period(lines):
    """The shortest p such that the last p lines equal the p before them."""
    for p in range(1, len(lines) // 2 + 1):
        if lines[-p:] == lines[-2 * p:-p]:
            return p
    return len(lines)


def kernels(path):
    out = []
    with open(path, newline="") as f:
        rows = [r for r in f if r.startswith('"')]
    for r in csv.DictReader(rows):
        if r.get("Metric Name") == "gpu__time_duration.sum":
            out.append((r["Kernel Name"], float(r["Metric Value"].replace(",", "")) / 1e3))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log")
    ap.add_argument("ncu_csv")
    ap.add_argument("--csv", help="also write the rows here")
    args = ap.parse_args()
    log = [LINE.match(l.strip()) for l in open(args.log, errors="replace")]
    log = [m.groups() for m in log if m]
    p = period(log)
    step = log[-p:]
    ks = [(n, us) for n, us in kernels(args.ncu_csv) if MAIN.search(n) or AUX.search(n)]
    mains = [i for i, (n, _) in enumerate(ks) if not AUX.search(n)]
    if len(mains) < p:
        sys.exit(f"{p} products a step but only {len(mains)} product kernels in {args.ncu_csv}")
    first = mains[-p]
    rows = []
    j = first
    for g in step:
        own = [ks[j]]
        j += 1
        while j < len(ks) and AUX.search(ks[j][0]):
            own.append(ks[j])
            j += 1
        rows.append(g + (" + ".join(n[:60] for n, _ in own), sum(us for _, us in own), own[0][1]))
    w = csv.writer(open(args.csv, "w", newline="")) if args.csv else None
    if w:
        w.writerow(["dtype", "batch", "m", "k", "n", "ta", "tb", "epilogue", "algo", "kernels", "us", "main_us"])
    total = {}
    for r in rows:
        dt, b, m, k, n, ta, tb, epi, how, names, us, main_us = r
        print(f"{dt:5} {b:>2} {m:>6} {k:>6} {n:>6} {ta}{tb} {epi:8} {us:8.1f} us  {how} | {names}")
        key = (m, k, n, ta, tb, epi)
        c, t = total.get(key, (0, 0.0))
        total[key] = (c + 1, t + us)
        if w:
            w.writerow(r)
    print(f"{len(rows)} products a step, {sum(r[10] for r in rows) / 1e3:.3f} ms")
    for (m, k, n, ta, tb, epi), (c, t) in sorted(total.items(), key=lambda kv: -kv[1][1]):
        print(f"  {c:3} x m {m} k {k} n {n} {ta}{tb} {epi}: {t / 1e3:.3f} ms ({t / c:.1f} us each)")


if __name__ == "__main__":
    main()
