#!/usr/bin/env python3
"""PyTorch's peer of the runtime's `cuda::tests::norm_bandwidth`.

Times `F.layer_norm`, `F.rms_norm` and `clone` on the same shapes and
dtypes as the test, with the test's protocol (3 warm-up calls, then the
mean of 20 calls between two synchronisations, inputs resident), and the
residual block `rms_norm(x + r, w) * g` that a fused row kernel runs in
one pass, in eager mode. Prints one line per case.

Usage: python3 scripts/torch_norm_bandwidth.py
"""

import torch
import torch.nn.functional as F


def time(f):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    reps = 20
    start.record()
    for _ in range(reps):
        f()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / reps


def case(dtype, rows, cols):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = (torch.rand(rows, cols, device="cuda", generator=g) * 4 - 2).to(dtype)
    w = (torch.rand(cols, device="cuda", generator=g) * 4 - 2).to(dtype)
    b = (torch.rand(cols, device="cuda", generator=g) * 4 - 2).to(dtype)
    nbytes = 2 * x.numel() * x.element_size()
    copy = time(lambda: x.clone())
    name = str(dtype).replace("torch.", "").replace("bfloat16", "bf16").replace("float32", "f32").replace("float16", "f16")
    for op, f in [
        ("layer_norm", lambda: F.layer_norm(x, (cols,), w, b, 1e-5)),
        ("rms_norm", lambda: F.rms_norm(x, (cols,), w, 1e-5)),
    ]:
        t = time(f)
        print(
            f"torch {op} {name} [{rows}, {cols}]: {t * 1e6:.1f} us, {nbytes / t / 1e9:.0f} GB/s; "
            f"copy {copy * 1e6:.1f} us",
            flush=True,
        )
    r = (torch.rand(rows, cols, device="cuda", generator=g) * 4 - 2).to(dtype)
    gate = (torch.rand(rows, cols, device="cuda", generator=g) * 4 - 2).to(dtype)
    t = time(lambda: F.rms_norm(x + r, (cols,), w, 1e-5) * gate)
    print(f"torch residual_rms_gate {name} [{rows}, {cols}]: {t * 1e6:.1f} us", flush=True)


def main():
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}", flush=True)
    for dtype, rows, cols in [
        (torch.float32, 16384, 4096),
        (torch.bfloat16, 8192, 768),
        (torch.float16, 8192, 768),
        (torch.float32, 8192, 768),
        (torch.bfloat16, 4096, 8192),
        (torch.float32, 2048, 16384),
    ]:
        case(dtype, rows, cols)


if __name__ == "__main__":
    main()
