"""PyTorch's side of the attention benchmark (`attention_timing` in the
runtime's CUDA tests, `benches/gpu_ops.rs`): causal bf16
`F.scaled_dot_product_attention` at the same sizes, and the semantics
tensorfn follows (rows whose every key is masked give 0)."""

import time

import torch
import torch.nn.functional as F


def median_seconds(fn, warm=2, reps=5):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def semantics():
    q = torch.randn(1, 1, 4, 8, device="cuda")
    mask = torch.ones(4, 4, dtype=torch.bool, device="cuda")
    mask[2] = False
    for dtype in (torch.float32, torch.bfloat16):
        y = F.scaled_dot_product_attention(q.to(dtype), q.to(dtype), q.to(dtype), attn_mask=mask)
        print(f"fully masked row, {dtype}: {y[0, 0, 2].float().tolist()[:3]}")
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        y = F.scaled_dot_product_attention(q, q, q, attn_mask=mask)
    print(f"fully masked row, math backend: {y[0, 0, 2].tolist()[:3]}")
    k = torch.randn(1, 1, 6, 8, device="cuda")
    y = F.scaled_dot_product_attention(q, k, k, is_causal=True)
    ref = F.scaled_dot_product_attention(q, k, k, attn_mask=torch.ones(4, 6, dtype=torch.bool, device="cuda").tril())
    print(f"is_causal with L=4, S=6 is top-left ones(L, S).tril(): {torch.allclose(y, ref, atol=1e-6)}")


def main():
    if not torch.cuda.is_available():
        print("skipping: no CUDA device for PyTorch")
        return
    print(f"PyTorch {torch.__version__} on {torch.cuda.get_device_name()}")
    semantics()
    for b, h, t, d in [(8, 12, 1024, 64), (4, 16, 4096, 128), (1, 32, 8192, 128)]:
        q, k, v = (torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        s = median_seconds(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
        flops = 4 * b * h * t * t * d / 2
        print(f"attention causal bf16 B{b} H{h} T{t} D{d}: {s * 1e3:.3f} ms, {flops / s / 1e12:.2f} TFLOP/s")
    # Grouped-query attention (8 key and value heads for 32 query heads).
    for b, h, hkv, t, d in [(1, 32, 8, 8192, 128), (4, 16, 4, 4096, 128)]:
        q = torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(b, hkv, t, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        s = median_seconds(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))
        flops = 4 * b * h * t * t * d / 2
        print(f"attention causal bf16 enable_gqa B{b} H{h} Hkv{hkv} T{t} D{d}: {s * 1e3:.3f} ms, "
              f"{flops / s / 1e12:.2f} TFLOP/s")
    # The backward alone (`attention_backward_timing`): the gradients of
    # q, k, v from a saved forward, as a training step runs it.
    for b, h, t, d in [(8, 12, 1024, 64), (4, 16, 4096, 128)]:
        q, k, v = (torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        g = torch.randn_like(y)
        s = median_seconds(lambda: torch.autograd.grad(y, (q, k, v), g, retain_graph=True), reps=11)
        # Five products (S, dP recomputed; dV, dK, dQ), causal: half.
        flops = 2.5 * 4 * b * h * t * t * d / 2
        print(f"attention backward causal bf16 B{b} H{h} T{t} D{d}: {s * 1e3:.3f} ms, {flops / s / 1e12:.2f} TFLOP/s")


if __name__ == "__main__":
    main()
