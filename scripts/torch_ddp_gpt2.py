#!/usr/bin/env python3
"""PyTorch DistributedDataParallel GPT-2 124M training step, the peer of
`train_gpt2 --bench --gpus N`.

One process per GPU (torch.multiprocessing spawn, no torchrun), NCCL
backend, NVLink multicast off (NCCL_NVLS_ENABLE=0). Each rank runs the
step of torch_train_gpt2.py (transformers' GPT2LMHeadModel, GPT-2 small,
random init with the same seed on every rank, SDPA attention, projection
padded to 50304 rows): batch 8 of 1024 tokens per GPU, bf16 autocast over
f32 weights (TF32 allowed), `loss.backward()` under DDP (25 MiB buckets,
all-reduced while the backward runs), global-norm clipping to 1.0
(`clip_grad_norm_`, foreach), `torch.optim.AdamW(fused=True)`.

Warm-up steps, then N steps each timed on every rank between
`torch.cuda.synchronize()` calls after a barrier; rank 0 prints the median
and minimum ms per step and the tokens per second of the whole group
(world × batch × seq / median). `--gpus 1,2` runs a world of 1 and then
of 2 (default: 1 and every GPU), so the scaling is read off one run.

    python3 scripts/torch_ddp_gpt2.py [--gpus 1,2] [--batch 8] [--seq 1024]
        [--steps 20] [--warmup 5] [--json]
"""

import argparse
import json
import os
import socket
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, world, port, args, out):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_train_gpt2 import PADDED_VOCAB, LossModel, adamw, build_model, random_tokens

    torch.cuda.set_device(rank)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        device_id=torch.device("cuda", rank),
    )
    torch.manual_seed(0)
    model = build_model(PADDED_VOCAB).cuda().train()
    ddp = DDP(model, device_ids=[rank], bucket_cap_mb=25)
    step_fn = LossModel(ddp)
    opt = adamw(model)
    # Each rank its own batches (the global batch is world × batch).
    gen = torch.Generator().manual_seed(1 + rank)
    batches = [tuple(t.cuda() for t in random_tokens(args.batch, args.seq, gen)) for _ in range(4)]

    def step(i):
        ids, labels = batches[i % len(batches)]
        loss = step_fn(ids, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for i in range(args.warmup):
        loss = step(i)
    first_loss = loss.item()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(args.steps):
        dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step(args.warmup + i)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    last_loss = loss.item()
    if rank == 0:
        times.sort()
        med = times[len(times) // 2]
        out.put({
            "case": "gpt2_ddp_train_step", "impl": "torch_ddp", "gpus": world,
            "batch_per_gpu": args.batch, "seq": args.seq,
            "median_ms": round(med, 3), "min_ms": round(times[0], 3),
            "tokens_per_s": round(world * args.batch * args.seq / med * 1e3),
            "peak_bytes": torch.cuda.max_memory_allocated(),
            "loss_after_warmup": round(first_loss, 4), "loss_last": round(last_loss, 4),
        })
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpus", default="", help="comma-separated world sizes (default: 1 and all)")
    p.add_argument("--batch", type=int, default=8, help="sequences per GPU")
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    import torch
    import torch.multiprocessing as mp

    n = torch.cuda.device_count()
    if n == 0:
        print("skipping: no GPU")
        return 0
    worlds = [int(w) for w in args.gpus.split(",")] if args.gpus else sorted({1, n})
    if any(w < 1 or w > n for w in worlds):
        print(f"--gpus {args.gpus}: this machine has {n} GPU(s)")
        return 1
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()} x {n}")
    ctx = mp.get_context("spawn")
    base = None
    for world in worlds:
        out = ctx.SimpleQueue()
        mp.start_processes(worker, args=(world, free_port(), args, out), nprocs=world,
                           join=True, start_method="spawn")
        r = out.get()
        base = base or (r["tokens_per_s"] if world == 1 else None)
        scale = f", {r['tokens_per_s'] / base:.2f}x one GPU" if base and world > 1 else ""
        print(f"torch ddp gpt2 train step {world} GPU(s) [{args.batch} per GPU, {args.seq}]: "
              f"median {r['median_ms']:.2f} ms (min {r['min_ms']:.2f}), "
              f"{r['tokens_per_s'] / 1e3:.0f}k tok/s{scale}, peak {r['peak_bytes'] / 2**30:.2f} GiB, "
              f"loss {r['loss_after_warmup']:.3f} -> {r['loss_last']:.3f}")
        if args.json:
            print(json.dumps(r))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
