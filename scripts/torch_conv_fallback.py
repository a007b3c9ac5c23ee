#!/usr/bin/env python3
"""PyTorch's side of the built-in convolution's timing
(`cuda::tests::builtin_conv2d_timing`): conv2d bf16 N32 64->64 56x56 3x3
(padding 1), forward, grad_input and grad_weight, NCHW and channels-last,
with cuDNN and with `torch.backends.cudnn.enabled = False` (PyTorch's own
im2col fallback). The same method as the Rust test: 3 warm-up calls, then
the mean of 20 calls between two synchronisations."""
import time

import torch
import torch.nn.functional as F


def timed(f):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    reps = 20
    t = time.perf_counter()
    for _ in range(reps):
        f()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3 / reps


def main():
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    x = torch.empty(32, 64, 56, 56, device=dev, dtype=torch.bfloat16).uniform_(-1, 1)
    w = torch.empty(64, 64, 3, 3, device=dev, dtype=torch.bfloat16).uniform_(-0.1, 0.1)
    g = torch.empty(32, 64, 56, 56, device=dev, dtype=torch.bfloat16).uniform_(-1, 1)
    conv_bwd = torch.ops.aten.convolution_backward
    for layout, fmt in [("NCHW", torch.contiguous_format), ("channels-last", torch.channels_last)]:
        xl, wl, gl = (t.contiguous(memory_format=fmt) for t in (x, w, g))
        for cudnn in [True, False]:
            torch.backends.cudnn.enabled = cudnn

            def bwd(mask):
                return conv_bwd(gl, xl, wl, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, mask)

            fwd = timed(lambda: F.conv2d(xl, wl, None, 1, 1))
            dx = timed(lambda: bwd([True, False, False]))
            dw = timed(lambda: bwd([False, True, False]))
            path = "cuDNN" if cudnn else "no cuDNN"
            print(
                f"torch conv2d bf16 [32, 64, 56, 56] * [64, 64, 3, 3] {layout} {path}: "
                f"forward {fwd:.4f} ms, dx {dx:.4f} ms, dw {dw:.4f} ms",
                flush=True,
            )
    torch.backends.cudnn.enabled = True


if __name__ == "__main__":
    main()
