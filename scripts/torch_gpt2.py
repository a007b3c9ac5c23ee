#!/usr/bin/env python3
"""PyTorch's GPT-2 small forward, the baseline of the `gpt2` example's
`--bench`: `transformers`' GPT2LMHeadModel (random weights), batch 8 of
1024 tokens, logits included, on the GPU, timed with CUDA events (median of
20 after warm-up):

  - eager with bf16 autocast (TF32 allowed), as the targets are stated;
  - eager with the weights in bf16 (what tensorfn's bf16 run computes);
  - `torch.compile` of the autocast model;

and greedy generation at batch 1 (`generate`, a key-value cache, 8 prompt
tokens then 64 new ones) in tokens per second, f32 and bf16 weights.

    python3 torch_gpt2.py [--batch 8] [--seq 1024] [--no-compile]
"""
import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def timed(fn, runs=20, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2], times[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("skipping: no CUDA device")
        return
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).eval().cuda()
    ids = torch.randint(0, 50257, (args.batch, args.seq), device="cuda")
    shape = f"[{args.batch}, {args.seq}]"

    def autocast():
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            return model(ids).logits

    med, low = timed(autocast)
    print(f"torch gpt2 forward {shape} eager bf16 autocast: median {med:.3f} ms, min {low:.3f} ms")

    if not args.no_compile:
        compiled = torch.compile(model)

        def compiled_autocast():
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                return compiled(ids).logits

        med, low = timed(compiled_autocast)
        print(f"torch gpt2 forward {shape} torch.compile bf16 autocast: median {med:.3f} ms, min {low:.3f} ms")

    model = model.to(torch.bfloat16)

    def bf16():
        with torch.no_grad():
            return model(ids).logits

    med, low = timed(bf16)
    print(f"torch gpt2 forward {shape} eager bf16 weights: median {med:.3f} ms, min {low:.3f} ms")

    prompt = ids[:1, :8]
    for name, dtype in [("f32", torch.float32), ("bf16", torch.bfloat16)]:
        model = model.to(dtype)

        def gen():
            with torch.no_grad():
                return model.generate(prompt, max_new_tokens=64, min_new_tokens=64, do_sample=False,
                                      pad_token_id=0)

        med, _ = timed(gen, runs=5, warmup=1)
        print(f"torch gpt2 generate batch 1 {name}: 64 tokens in {med:.1f} ms: {64e3 / med:.1f} tokens/s")


if __name__ == "__main__":
    main()
