#!/usr/bin/env python3
"""PyTorch's GPT-2 124M training step, the peer of `train_gpt2 --bench`:
`transformers`' GPT2LMHeadModel (GPT-2 small's config, random init, SDPA
attention), batch 8 of 1024 tokens, bf16 autocast over f32 weights (TF32
allowed), cross-entropy over every position against the next token (as
llm.c and `train_gpt2` compute it), `loss.backward()`, then
`torch.optim.AdamW(fused=True)` (lr 6e-4, betas 0.9/0.95, eps 1e-8,
weight decay 0.1 on the matrices and embeddings, none on biases and
norms, as GPT-2 training does); gradients set to None between steps.

Each mode builds a fresh model with the same seed, runs warm-up steps
(compilation included), then times N steps with CUDA events, one pair a
step, and prints one line per mode: the median and minimum ms per step,
tokens per second at the median, and `torch.cuda.max_memory_allocated`
over the timed steps (the peak statistics are reset after warm-up;
parameters, gradients and AdamW's state are all live then).

Modes: `eager`, `compile` (`torch.compile` of the model and its loss,
mode "default") and `autotune` (mode "max-autotune-no-cudagraphs"; slow to
compile, so not in the default list). Vocabularies: `padded` (50304 rows,
llm.c's and `train_gpt2`'s padded vocabulary; the padding rows are in the
softmax, as in nanoGPT) and `hf` (50257, the checkpoint's), or `both`.

    python3 torch_train_gpt2.py [--modes eager,compile] [--vocab padded|hf|both]
        [--batch 8] [--seq 1024] [--steps 20] [--warmup 5] [--clip 0] [--json]

`--clip 1.0` adds global-norm clipping (`clip_grad_norm_`, foreach), which
llm.c always does. `--act gelu_pytorch_tanh` swaps GPT-2's `gelu_new`
(the same tanh GELU written as several elementwise ops, each a kernel in
eager mode) for `F.gelu(approximate="tanh")`, one kernel. `--json` also prints one JSON object per mode.
`--kernels PREFIX` runs one more step under `torch.profiler` and writes
its GPU kernels in launch order (name and microseconds) to
PREFIX.MODE.csv, for a per-kernel comparison with `ncu` over `train_gpt2`,
and the kernels of its matrix products (`aten::mm`, `addmm`, `bmm`, ...)
with the product's input shapes to PREFIX.MODE.products.csv, to match
them with the lines of `TENSORFN_MATMUL_LOG=1`.

    python3 torch_train_gpt2.py write DIR [--vocab 50257] [--layers 12]
        [--batch 8] [--seq 1024] [--seed 0]

writes DIR/model.safetensors (a random-init GPT2LMHeadModel with Hugging
Face's names, through `save_pretrained`; the tied `lm_head` is not stored)
and DIR/tokens.safetensors (`input_ids` and `labels`, i64 [B, T]: `labels`
is the next token of each position, the last one drawn like the rest),
for `train_gpt2 --weights ... --tokens ...`.
"""
import argparse
import csv
import gc
import json
import sys
import time

import torch
import torch.nn.functional as F

HF_VOCAB = 50257
PADDED_VOCAB = 50304


def gpt2_config(vocab, layers=12, act="gelu_new"):
    from transformers import GPT2Config

    # No dropout: nanoGPT and llm.c train GPT-2 124M without it.
    return GPT2Config(vocab_size=vocab, n_positions=1024, n_embd=768, n_layer=layers, n_head=12,
                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, activation_function=act)


def build_model(vocab, layers=12, attn="sdpa", act="gelu_new"):
    """A random-init GPT2LMHeadModel in f32 with the given attention implementation."""
    from transformers import GPT2LMHeadModel

    cfg = gpt2_config(vocab, layers, act)
    try:
        return GPT2LMHeadModel._from_config(cfg, attn_implementation=attn)
    except TypeError:
        cfg._attn_implementation = attn
        return GPT2LMHeadModel(cfg)


def random_tokens(batch, seq, generator):
    """`seq + 1` random ids per row: inputs are the first `seq`, labels the last `seq`."""
    ids = torch.randint(0, HF_VOCAB, (batch, seq + 1), generator=generator)
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


class LossModel(torch.nn.Module):
    """Logits then the mean cross-entropy over all positions, under bf16 autocast."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids, labels):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = self.model(input_ids=ids).logits
            return F.cross_entropy(logits.flatten(0, 1), labels.flatten())


def adamw(model):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)


def bench_mode(mode, vocab, args):
    torch.manual_seed(0)
    model = build_model(vocab, act=args.act).cuda().train()
    step_fn = LossModel(model)
    if mode == "compile":
        step_fn = torch.compile(step_fn)
    elif mode == "autotune":
        step_fn = torch.compile(step_fn, mode="max-autotune-no-cudagraphs")
    opt = adamw(model)
    gen = torch.Generator().manual_seed(1)
    batches = [tuple(t.cuda() for t in random_tokens(args.batch, args.seq, gen)) for _ in range(4)]

    def step(i):
        ids, labels = batches[i % len(batches)]
        loss = step_fn(ids, labels)
        loss.backward()
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.perf_counter()
    for i in range(args.warmup):
        loss = step(i)
    first_loss = loss.item()
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - t0
    torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(args.steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        loss = step(args.warmup + i)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    last_loss = loss.item()
    peak = torch.cuda.max_memory_allocated()
    if args.kernels:
        kernel_table(lambda: step(args.warmup + args.steps), f"{args.kernels}.{mode}.csv")
    times.sort()
    med = times[len(times) // 2]
    res = {
        "case": "gpt2_train_step", "impl": f"torch_{mode}", "vocab": vocab, "batch": args.batch,
        "seq": args.seq, "clip": args.clip, "act": args.act,
        "median_ms": round(med, 3), "min_ms": round(times[0], 3),
        "tokens_per_s": round(args.batch * args.seq / med * 1e3), "peak_bytes": peak,
        "warmup_s": round(warm_s, 1), "loss_after_warmup": round(first_loss, 4), "loss_last": round(last_loss, 4),
    }
    del step_fn, model, opt, batches, loss
    gc.collect()
    torch.cuda.empty_cache()
    torch._dynamo.reset()
    return res


PRODUCT_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_addmm_activation"}


def kernel_table(run, path):
    """Runs one more step under torch.profiler and writes each GPU kernel
    of it, in launch order, to `path` (CSV: order, name, microseconds),
    and each kernel of a matrix product with its op's input shapes to
    `path` with `.products.csv` for `.csv`; prints the ten longest kernel
    names by their total."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        run()
        torch.cuda.synchronize()
    events = prof.events()
    products = sorted((e for e in events if e.name in PRODUCT_OPS and e.kernels),
                      key=lambda e: e.time_range.start)
    with open(path[: -len(".csv")] + ".products.csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["order", "op", "shapes", "kernel", "us"])
        for i, e in enumerate(products):
            for k in e.kernels:
                out.writerow([i, e.name, e.input_shapes, k.name, f"{k.duration:.3f}"])
    print(f"{len(products)} products, {sum(k.duration for e in products for k in e.kernels) / 1e3:.2f} ms of kernels")
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    kernels.sort(key=lambda e: e.time_range.start)
    totals = {}
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["order", "name", "us"])
        for i, e in enumerate(kernels):
            us = e.time_range.elapsed_us()
            totals[e.name] = totals.get(e.name, 0.0) + us
            out.writerow([i, e.name, f"{us:.3f}"])
    top = sorted(totals.items(), key=lambda kv: -kv[1])[:10]
    print(f"{len(kernels)} kernels, {sum(totals.values()) / 1e3:.2f} ms in all; longest:")
    for name, us in top:
        print(f"  {us / 1e3:8.3f} ms  {name[:100]}")


def bench(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default="eager,compile", help="comma-separated: eager, compile, autotune")
    ap.add_argument("--vocab", choices=["padded", "hf", "both"], default="padded")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--clip", type=float, default=0.0, help="global-norm clipping (0: none)")
    ap.add_argument("--act", default="gelu_new",
                    help="GPT-2's gelu_new (tanh GELU in several elementwise ops) or gelu_pytorch_tanh (one kernel)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--kernels", metavar="PREFIX",
                    help="profile one more step and write its kernels to PREFIX.MODE.csv")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("skipping: no CUDA device")
        return
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    vocabs = {"padded": [PADDED_VOCAB], "hf": [HF_VOCAB], "both": [PADDED_VOCAB, HF_VOCAB]}[args.vocab]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    failed = False
    for mode in args.modes.split(","):
        for vocab in vocabs:
            try:
                r = bench_mode(mode, vocab, args)
            except Exception as e:  # one mode failing (a compiler error, say) leaves the others
                failed = True
                print(f"torch gpt2 train step {mode} vocab {vocab}: FAILED: {type(e).__name__}: {e}")
                continue
            variant = (" clip" if args.clip > 0 else "") + ("" if args.act == "gelu_new" else " " + args.act)
            print(f"torch gpt2 train step [{args.batch}, {args.seq}] {mode} vocab {vocab}{variant}: "
                  f"median {r['median_ms']:.2f} ms "
                  f"(min {r['min_ms']:.2f}), {r['tokens_per_s'] / 1e3:.0f}k tok/s, "
                  f"peak {r['peak_bytes'] / 2**30:.2f} GiB, warm-up {r['warmup_s']} s, "
                  f"loss {r['loss_after_warmup']:.3f} -> {r['loss_last']:.3f}")
            if args.json:
                print(json.dumps(r))
            sys.stdout.flush()
    if failed:
        sys.exit(1)


def write(argv):
    ap = argparse.ArgumentParser(prog="torch_train_gpt2.py write")
    ap.add_argument("dir")
    ap.add_argument("--vocab", type=int, default=HF_VOCAB)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    write_files(args.dir, vocab=args.vocab, layers=args.layers, batch=args.batch, seq=args.seq, seed=args.seed)


def write_files(out, vocab=HF_VOCAB, layers=12, batch=8, seq=1024, seed=0, perturb=False):
    """Writes OUT/model.safetensors and OUT/tokens.safetensors; returns their paths.

    `perturb` draws the norms' weights around 1 and the biases around 0
    (the library initialises them to exactly 1 and 0), so that a gradient
    check sees them take part."""
    import os

    from safetensors.torch import save_file

    torch.manual_seed(seed)
    model = build_model(vocab, layers, attn="eager").eval()
    if perturb:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if ".ln_" in name and name.endswith("weight"):
                    p.normal_(1.0, 0.1)
                elif name.endswith("bias"):
                    p.normal_(0.0, 0.02)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    ids, labels = random_tokens(batch, seq, torch.Generator().manual_seed(seed + 1))
    save_file({"input_ids": ids, "labels": labels}, f"{out}/tokens.safetensors")
    n = sum(p.numel() for p in model.parameters())
    print(f"wrote {out}/model.safetensors ({n} parameters, {layers} layers, vocab {vocab}) "
          f"and {out}/tokens.safetensors (input_ids, labels: i64 [{batch}, {seq}])")
    return f"{out}/model.safetensors", f"{out}/tokens.safetensors"


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "write":
        write(sys.argv[2:])
    else:
        bench(sys.argv[1:])


if __name__ == "__main__":
    main()
