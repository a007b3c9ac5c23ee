#!/usr/bin/env python3
"""PyTorch baselines for the GPU benchmarks of tensorfn.

Times every GPU case of `benches/gpu_*.rs` with PyTorch eager and
`torch.compile`, and measures the two limits the report divides by: the
device-to-device copy bandwidth and the dense matrix-product rate of each
dtype (a large `torch.matmul`), both in the same run.

Output: one JSON object per line on stdout (see `scripts/bench-report`);
progress goes to stderr. Timing: CUDA events around batches of launches,
after a warm-up, median over many batches; every case rotates among enough
input sets to exceed the L2 cache; inputs are random, never zeros.

    python3 scripts/torch_baseline.py [--quick] [--filter SUBSTR] [--no-compile]

Case names, sizes and byte/flop counts must match the Rust benches.
"""

import argparse
import datetime
import json
import math
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F

# Input sets together span this many bytes, well above the 50-60 MB of L2
# on H100/H200, so repeated launches read from device memory, not cache.
ROTATE_BYTES = 256 << 20
MAX_SETS = 64

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


class Plan:
    """Iteration counts: a full pass or a short `--quick` one."""

    def __init__(self, quick):
        self.quick = quick
        self.warmup = 3 if quick else 5
        self.batch_s = 0.002 if quick else 0.005
        self.runs = 7 if quick else 25
        self.min_runs = 5 if quick else 10
        self.case_budget_s = 0.1 if quick else 0.4


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def emit(case, dtype, size, impl, **fields):
    rec = {"case": case, "dtype": dtype, "size": str(size), "impl": impl}
    rec.update(fields)
    print(json.dumps(rec), flush=True)


def n_sets(set_bytes):
    return max(1, min(MAX_SETS, math.ceil(ROTATE_BYTES / max(set_bytes, 1))))


def time_call(plan, call, sets):
    """Median microseconds per `call(i)` over batches timed with CUDA events."""
    for i in range(plan.warmup):
        call(i % sets)
    torch.cuda.synchronize()
    # Estimate one call's time to size the batches.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    probe = 3
    start.record()
    for i in range(probe):
        call(i % sets)
    end.record()
    end.synchronize()
    est_s = max(start.elapsed_time(end) / 1e3 / probe, 1e-7)
    batch = max(1, min(2000, round(plan.batch_s / est_s)))
    runs = max(plan.min_runs, min(plan.runs, int(plan.case_budget_s / (batch * est_s))))
    times, queued = [], []
    k = 0
    for _ in range(runs):
        start.record()
        t0 = time.perf_counter()
        for _ in range(batch):
            call(k % sets)
            k += 1
        # Host time spent queuing the batch: near the device time, the
        # host is what limits the case.
        queued.append((time.perf_counter() - t0) * 1e6 / batch)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / batch)
    return {
        "median_us": round(statistics.median(times), 3),
        "min_us": round(min(times), 3),
        "enqueue_us": round(statistics.median(queued), 3),
        "runs": runs,
        "batch": batch,
    }


def time_graph(plan, call, sets, per_graph=64):
    """Median microseconds per `call(i)` replayed from a captured CUDA
    graph of `per_graph` calls (rotating over the sets): what the device
    takes per call with no host work between launches."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(min(sets, per_graph)):
            call(i)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(per_graph):
            call(i % sets)
    t = time_call(plan, lambda i: graph.replay(), 1)
    for key in ("median_us", "min_us", "enqueue_us"):
        t[key] = round(t[key] / per_graph, 3)
    return t


def rand(shape, dtype, gen, lo=-2.0, hi=2.0):
    # Uniform in [lo, hi): random, never zero. Each case uses the range of
    # its Rust bench, since the data can move the time (a matrix unit's
    # power draw depends on the bits it multiplies).
    return torch.rand(shape, dtype=torch.float32, device="cuda", generator=gen).mul_(hi - lo).add_(lo).to(dtype)


def measure(plan, case, dtype, size, impl, nbytes, flops, call, sets, timer=time_call):
    """Times one case and prints its record; an exception becomes an error
    record so that one failing case does not end the run."""
    try:
        t = timer(plan, call, sets)
        emit(case, dtype, size, impl, bytes=nbytes, flops=flops, **t)
    except Exception as e:  # noqa: BLE001 - report and go on
        emit(case, dtype, size, impl, error=f"{type(e).__name__}: {e}"[:300])
        torch.cuda.empty_cache()


# ---------------------------------------------------------------- limits


def limits(plan, gen):
    nbytes = (256 << 20) if plan.quick else (1 << 30)
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    src.copy_(torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device="cuda", generator=gen))
    dst = torch.empty_like(src)
    t = time_call(plan, lambda i: dst.copy_(src), 1)
    # A copy reads and writes every byte.
    emit("limit_copy", "u8", nbytes, "torch_eager", bytes=2 * nbytes, flops=0, **t)
    log(f"copy bandwidth: {2 * nbytes / t['median_us'] / 1e3:.0f} GB/s")
    del src, dst
    n = 4096 if plan.quick else 8192
    for name, dt in DTYPES.items():
        # The products' own range (benches/gpu_matmul.rs).
        a, b = rand((n, n), dt, gen, -1.0, 1.0), rand((n, n), dt, gen, -1.0, 1.0)
        t = time_call(plan, lambda i: torch.matmul(a, b), 1)
        flops = 2 * n**3
        emit("limit_matmul", name, f"{n}x{n}x{n}", "torch_eager", bytes=3 * n * n * a.element_size(), flops=flops, **t)
        log(f"matmul peak {name}: {flops / t['median_us'] / 1e6:.1f} TFLOP/s")
        del a, b
    torch.cuda.empty_cache()


# ---------------------------------------------------------- elementwise


def sin_affine(x):
    return torch.sin(x) * 2 + 5


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


def chain6(x, y):
    return torch.tanh(torch.sigmoid(x * y + 1) * x) - y


# (name, function, inputs, flops per element)
CHAINS = [("ew_sin_affine", sin_affine, 1, 3), ("ew_gelu_tanh", gelu_tanh, 1, 9), ("ew_chain6", chain6, 2, 6)]


def ew_sizes(plan):
    return [1 << 20, 1 << 24] if plan.quick else [1 << k for k in (20, 22, 24, 26, 28)]


def same_size_copy(plan, case, dtype, size, nbytes):
    """Times a device-to-device copy moving `nbytes` (half read, half
    written), rotated like the case: the bandwidth a kernel of this size
    can reach, launch included (below about 2^24 elements it is well under
    the 1 GiB copy's)."""
    half = nbytes // 2
    sets = n_sets(nbytes)
    srcs = [torch.empty(half, dtype=torch.uint8, device="cuda") for _ in range(sets)]
    dsts = [torch.empty(half, dtype=torch.uint8, device="cuda") for _ in range(sets)]
    measure(plan, case, dtype, size, "torch_copy", nbytes, 0, lambda i: dsts[i].copy_(srcs[i]), sets)
    # The same copies replayed from a CUDA graph: the device's own time
    # for a copy of this size, with no launch work on the host between
    # them (the most a single kernel of this size can reach here). Only
    # below 1 GiB: larger graph-captured copies ran 20% slower than
    # launched ones, and there the launch costs nothing anyway.
    if nbytes < 1 << 30:
        measure(plan, case, dtype, size, "torch_copy_graph", nbytes, 0, lambda i: dsts[i].copy_(srcs[i]), sets,
                timer=time_graph)


def elementwise(plan, gen, want, compile_too):
    compiled = {name: torch.compile(fn) for name, fn, _, _ in CHAINS} if compile_too else {}
    for dname, dt in DTYPES.items():
        for n in ew_sizes(plan):
            es = torch.empty((), dtype=dt).element_size()
            sets = n_sets(2 * n * es)
            xs = [rand((n,), dt, gen) for _ in range(sets)]
            ys = [rand((n,), dt, gen) for _ in range(sets)]
            for name, fn, arity, fl in CHAINS:
                if not want(name):
                    continue
                args = (lambda i: (xs[i],)) if arity == 1 else (lambda i: (xs[i], ys[i]))
                impls = [("torch_eager", fn)] + ([("torch_compile", compiled[name])] if compile_too else [])
                for impl, f in impls:
                    measure(plan, name, dname, n, impl, (arity + 1) * n * es, fl * n,
                            lambda i, f=f: f(*args(i)), sets)
                same_size_copy(plan, name, dname, n, (arity + 1) * n * es)
                log(f"{name} {dname} {n}")
            del xs, ys
            torch.cuda.empty_cache()


# --------------------------------------------------------------- matmul


def addmm_shapes(plan):
    square = [1024, 4096] if plan.quick else [1024, 2048, 4096, 8192]
    skinny = [1, 64] if plan.quick else [1, 8, 16, 32, 64]
    return [(m, m, m) for m in square] + [(m, 4096, 4096) for m in skinny]


def bmm_shapes(plan):
    return [(32, 512, 512, 512)] if plan.quick else [(128, 128, 128, 128), (32, 512, 512, 512), (8, 2048, 2048, 2048)]


def matmul(plan, gen, want):
    if want("addmm"):
        for dname, dt in DTYPES.items():
            for m, k, n in addmm_shapes(plan):
                es = torch.empty((), dtype=dt).element_size()
                set_bytes = (m * k + k * n + n) * es
                sets = n_sets(set_bytes)
                # [-1, 1), as benches/gpu_matmul.rs draws them.
                ins = [tuple(rand(s, dt, gen, -1.0, 1.0) for s in ((n,), (m, k), (k, n))) for _ in range(sets)]
                measure(plan, "addmm", dname, f"{m}x{k}x{n}", "torch_eager", set_bytes + m * n * es,
                        2 * m * k * n, lambda i: torch.addmm(*ins[i]), sets)
                log(f"addmm {dname} {m}x{k}x{n}")
                del ins
                torch.cuda.empty_cache()
    if want("bmm"):
        for dname, dt in DTYPES.items():
            for b, m, k, n in bmm_shapes(plan):
                es = torch.empty((), dtype=dt).element_size()
                set_bytes = b * (m * k + k * n) * es
                sets = n_sets(set_bytes)
                ins = [(rand((b, m, k), dt, gen, -1.0, 1.0), rand((b, k, n), dt, gen, -1.0, 1.0)) for _ in range(sets)]
                measure(plan, "bmm", dname, f"{b}x{m}x{k}x{n}", "torch_eager", set_bytes + b * m * n * es,
                        2 * b * m * k * n, lambda i: torch.bmm(*ins[i]), sets)
                log(f"bmm {dname} {b}x{m}x{k}x{n}")
                del ins
                torch.cuda.empty_cache()


# ---------------------------------------------------------- cat, softmax


def cat_shapes(plan):
    return [(4096, 2048)] if plan.quick else [(4096, 2048), (4096, 16384)]


def softmax_rows(plan):
    return [4096] if plan.quick else [256, 4096, 32768]


def cat_softmax(plan, gen, want, compile_too):
    cat_c = torch.compile(lambda ts: torch.cat(ts, dim=1)) if compile_too else None
    soft_c = torch.compile(lambda x: torch.softmax(x, dim=-1)) if compile_too else None
    for parts in (2, 8):
        case = f"cat{parts}"
        if not want(case):
            continue
        for dname in ("f32", "bf16"):
            dt = DTYPES[dname]
            es = torch.empty((), dtype=dt).element_size()
            for rows, cols in cat_shapes(plan):
                w = cols // parts
                sets = n_sets(rows * cols * es)
                ins = [[rand((rows, w), dt, gen) for _ in range(parts)] for _ in range(sets)]
                impls = [("torch_eager", lambda ts: torch.cat(ts, dim=1))] + ([("torch_compile", cat_c)] if compile_too else [])
                for impl, f in impls:
                    measure(plan, case, dname, f"{rows}x{cols}", impl, 2 * rows * cols * es, 0,
                            lambda i, f=f: f(ins[i]), sets)
                log(f"{case} {dname} {rows}x{cols}")
                del ins
                torch.cuda.empty_cache()
    if want("softmax"):
        for dname, dt in DTYPES.items():
            es = torch.empty((), dtype=dt).element_size()
            for rows in softmax_rows(plan):
                cols = 4096
                sets = n_sets(rows * cols * es)
                # [-4, 4), as benches/gpu_ops.rs draws them.
                xs = [rand((rows, cols), dt, gen, -4.0, 4.0) for _ in range(sets)]
                impls = [("torch_eager", lambda x: torch.softmax(x, dim=-1))] + ([("torch_compile", soft_c)] if compile_too else [])
                for impl, f in impls:
                    measure(plan, "softmax", dname, f"{rows}x{cols}", impl, 2 * rows * cols * es,
                            5 * rows * cols, lambda i, f=f: f(xs[i]), sets)
                log(f"softmax {dname} {rows}x{cols}")
                del xs
                torch.cuda.empty_cache()


# ------------------------------------------------------------ attention


def attention_shapes(plan):
    if plan.quick:
        return [(8, 12, 1024, 64)]
    return [(8, 12, 1024, 64), (4, 16, 4096, 128), (1, 32, 8192, 128)]


def attention(plan, gen, want):
    # Causal bf16 `scaled_dot_product_attention`, as benches/gpu_ops.rs.
    if not want("attention"):
        return
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for b, h, t, d in attention_shapes(plan):
        q, k, v = (rand((b, h, t, d), torch.bfloat16, gen) for _ in range(3))
        measure(plan, "attention", "bf16", f"B{b}xH{h}xT{t}xD{d}", "torch_eager", 4 * q.numel() * 2,
                2 * b * h * t * t * d, lambda i: sdpa(q, k, v, is_causal=True), 1)
        log(f"attention bf16 B{b} H{h} T{t} D{d}")
        del q, k, v
        torch.cuda.empty_cache()


# -------------------------------------------------- layer_norm backward


def norm_backward(plan, gen, want):
    # `layer_norm`'s backward alone (`torch.autograd.grad` through a kept
    # graph: LayerNormBackward, dx, dweight and dbias), as
    # benches/gpu_norm_backward.rs; and the peak memory of its static
    # training step `block_loss` (forward and backward) as
    # torch.cuda.max_memory_allocated measures it above the inputs.
    if want("layer_norm_bwd"):
        for dname, rows, cols in (("bf16", 8192, 768), ("f32", 16384, 4096)):
            dt = DTYPES[dname]
            es = torch.tensor([], dtype=dt).element_size()
            sets = min(16, n_sets(2 * rows * cols * es))
            w = rand((cols,), dt, gen, 0.5, 1.5).requires_grad_()
            b = torch.zeros(cols, dtype=dt, device="cuda", requires_grad=True)
            xs = [rand((rows, cols), dt, gen).requires_grad_() for _ in range(sets)]
            gs = [rand((rows, cols), dt, gen, -1.0, 1.0) for _ in range(sets)]
            ys = [F.layer_norm(x, (cols,), w, b, 1e-5) for x in xs]
            measure(plan, "layer_norm_bwd", dname, f"{rows}x{cols}", "torch_eager",
                    3 * rows * cols * es, 10 * rows * cols,
                    lambda i: torch.autograd.grad(ys[i], (xs[i], w, b), gs[i], retain_graph=True), sets)
            log(f"layer_norm_bwd {dname} {rows}x{cols}")
            del w, b, xs, gs, ys
            torch.cuda.empty_cache()
    if want("grad_peak"):
        f = lambda *s: rand(s, torch.float32, gen, -1.0, 1.0)
        x = f(1024, 512)
        ln_w, ln_b, w1, w2 = (t.requires_grad_() for t in (f(512), f(512), f(512, 2048), f(2048, 512)))
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        h = F.layer_norm(x, (512,), ln_w, ln_b, 1e-5)
        a = F.gelu(h @ w1)
        y = x + a @ w2
        loss = (y * y).mean()
        grads = torch.autograd.grad(loss, (w1, w2, ln_w, ln_b))
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
        emit("grad_peak", "f32", "block_1024x512x2048", "torch_eager", measured_peak_bytes=peak,
             loss=loss.item())
        del h, a, y, loss, grads


# ------------------------------------------------------------ transfers


def transfer_sizes(plan):
    mib = [16, 256] if plan.quick else [16, 64, 256, 1024]
    return [m << 20 for m in mib]


def transfers(plan, gen, want):
    for nbytes in transfer_sizes(plan):
        n = nbytes // 4
        dev = rand((n,), torch.float32, gen)
        pinned = torch.empty(n, dtype=torch.float32, pin_memory=True)
        pinned.copy_(dev.cpu())
        pageable = pinned.clone()
        dst = torch.empty_like(dev)
        # `h2d`/`d2h`: from and into pinned memory; `*_pageable`: ordinary
        # host memory (the tensorfn cases of the same names do the same).
        cases = [
            ("h2d", "torch_eager", lambda i: dst.copy_(pinned, non_blocking=True)),
            ("h2d_pageable", "torch_eager", lambda i: dst.copy_(pageable)),
            ("d2h", "torch_eager", lambda i: pinned.copy_(dev, non_blocking=True)),
            ("d2h_pageable", "torch_eager", lambda i: pageable.copy_(dev)),
        ]
        for case, impl, f in cases:
            if not want(case):
                continue
            measure(plan, case, "f32", n, impl, nbytes, 0, f, 1)
        log(f"transfers {nbytes >> 20} MiB")
        del dev, pinned, pageable, dst
        torch.cuda.empty_cache()


# ------------------------------------------------------------------ MLP

MLP_DIMS = (256, 784, 4096, 4096, 10)


def mlp_forward(x, w1, b1, w2, b2, w3, b3):
    h = torch.relu(torch.addmm(b1, x, w1))
    h = torch.relu(torch.addmm(b2, h, w2))
    return torch.addmm(b3, h, w3)


def mlp(plan, gen, want, compile_too):
    if not want("mlp_fwd"):
        return
    batch, d0, d1, d2, d3 = MLP_DIMS
    dt = torch.bfloat16
    # Weights scaled like a default init so activations stay O(1); the
    # ranges of benches/gpu_mlp.rs.
    def weight(i, o):
        s = 1 / math.sqrt(i)
        return rand((i, o), dt, gen, -s, s)

    def bias(o):
        return rand((o,), dt, gen, -0.5, 0.5)

    params = (weight(d0, d1), bias(d1), weight(d1, d2), bias(d2), weight(d2, d3), bias(d3))
    es = 2
    weights_bytes = sum(p.numel() for p in params) * es
    sets = n_sets(batch * d0 * es + weights_bytes)
    xs = [rand((batch, d0), dt, gen, -1.0, 1.0) for _ in range(sets)]
    flops = 2 * batch * (d0 * d1 + d1 * d2 + d2 * d3)
    act_bytes = batch * (d0 + 2 * d1 + 2 * d2 + d3) * es
    size = "x".join(map(str, MLP_DIMS))
    impls = [("torch_eager", mlp_forward)] + ([("torch_compile", torch.compile(mlp_forward))] if compile_too else [])
    for impl, f in impls:
        measure(plan, "mlp_fwd", "bf16", size, impl, weights_bytes + act_bytes, flops,
                lambda i, f=f: f(xs[i], *params), sets)
    log("mlp_fwd bf16")


# ----------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer sizes and runs")
    ap.add_argument("--filter", default="", help="only cases whose name contains this")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        emit("skipped", "-", "-", "torch_eager", error="torch.cuda.is_available() is False")
        log("no CUDA device: skipped")
        return
    plan = Plan(args.quick)
    # f32 products stay exact f32 (PyTorch's default, and tensorfn's): the
    # TF32 flags are left alone, since writing them through one API and
    # reading them through the other raises in recent PyTorch; their state
    # is recorded in the meta record.
    try:
        tf32 = torch.backends.cuda.matmul.allow_tf32
    except Exception as e:  # noqa: BLE001 - only recorded
        tf32 = f"unknown ({type(e).__name__})"
    for knob in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 256)
    props = torch.cuda.get_device_properties(0)
    emit("meta", "-", "-", "torch_eager",
         device=props.name, sms=props.multi_processor_count,
         l2_bytes=getattr(props, "L2_cache_size", 0), memory_bytes=props.total_memory,
         torch=torch.__version__, cuda=torch.version.cuda, python=platform.python_version(),
         date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
         quick=args.quick, host=platform.node(), matmul_allow_tf32=str(tf32))
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    compile_too = not args.no_compile

    def want(case):
        return args.filter in case

    t0 = time.time()
    limits(plan, gen)
    elementwise(plan, gen, want, compile_too)
    matmul(plan, gen, want)
    cat_softmax(plan, gen, want, compile_too)
    attention(plan, gen, want)
    norm_backward(plan, gen, want)
    transfers(plan, gen, want)
    mlp(plan, gen, want, compile_too)
    log(f"torch baseline done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
