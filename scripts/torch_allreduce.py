#!/usr/bin/env python3
"""all_reduce bandwidth with torch.distributed (NCCL), one process per GPU.

The peer of `benches/gpu_allreduce.rs`: the in-place sum of an f32 and a
bf16 buffer of 1 MiB to 1 GiB per GPU, each call waited on
(torch.cuda.synchronize), over every GPU of the machine (any number >= 1),
NVLink multicast off (NCCL_NVLS_ENABLE=0). Prints the same table:
algbw = bytes / time, busbw = algbw * 2(n-1)/n (nccl-tests' definitions).

    python3 scripts/torch_allreduce.py [--quick] [--gpus N]
"""

import argparse
import os
import socket
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def iters(nbytes):
    return max(5, min(50, (2 << 30) // nbytes))


def worker(rank, world, port, sizes_mib, out):
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        device_id=torch.device("cuda", rank),
    )
    rows = []
    for mib in sizes_mib:
        nbytes = mib << 20
        for name, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
            x = torch.ones(nbytes // torch.finfo(dtype).bits * 8, dtype=dtype, device="cuda")
            for _ in range(3):
                dist.all_reduce(x)
                torch.cuda.synchronize()
            k = iters(nbytes)
            dist.barrier()
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(k):
                dist.all_reduce(x)
                torch.cuda.synchronize()
            secs = (time.perf_counter() - start) / k
            rows.append((name, nbytes, secs))
            del x
    if rank == 0:
        out.put(rows)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="1, 16 and 256 MiB only")
    p.add_argument("--gpus", type=int, default=0, help="GPUs to use (default: all)")
    args = p.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    import torch
    import torch.multiprocessing as mp

    n = torch.cuda.device_count()
    if n == 0:
        print("skipping: no GPU")
        return 0
    world = min(args.gpus, n) if args.gpus > 0 else n
    sizes = [1, 16, 256] if args.quick else [1, 4, 16, 64, 256, 1024]
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.spawn(worker, args=(world, free_port(), sizes, out), nprocs=world, join=True)
    rows = out.get()
    print(
        f"{'impl':<10} {'collective':<10} {'dtype':<5} {'bytes':>10} {'time_us':>12} "
        f"{'algbw_GB/s':>11} {'busbw_GB/s':>11} {'gpus':>5}"
    )
    for name, nbytes, secs in rows:
        algbw = nbytes / secs / 1e9
        busbw = algbw * 2 * (world - 1) / world
        print(
            f"{'torch':<10} {'all_reduce':<10} {name:<5} {nbytes:>10} {secs * 1e6:>12.1f} "
            f"{algbw:>11.2f} {busbw:>11.2f} {world:>5}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
