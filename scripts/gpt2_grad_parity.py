#!/usr/bin/env python3
"""Whole-model gradient parity of `train_gpt2` with `transformers`' autograd.

    gpt2_grad_parity.py write DIR [--layers 12] [--batch 4] [--seq 256] [--seed 1]
        Writes DIR/model.safetensors (a random-init GPT2LMHeadModel with
        Hugging Face's names; the norms' weights drawn around 1 and the
        biases around 0, so that their gradients are not those of the
        library's init) and DIR/tokens.safetensors (`input_ids`, `labels`:
        i64 [B, T], `labels[b, t]` the token that follows `input_ids[b, t]`).
        Then: train_gpt2 --weights DIR/model.safetensors \\
                  --tokens DIR/tokens.safetensors --grads-out G.safetensors

    gpt2_grad_parity.py compare DIR G.safetensors [--dtype f32|bf16] [--tf32] [--slack 2]
        Runs the same model on the same tokens with autograd in float64 (the
        reference) and in float32, and with `--dtype bf16` also under bf16
        autocast over the f32 weights (what a bf16 training step computes),
        and compares G's `loss` and every parameter's gradient (f32, under
        its Hugging Face name, with or without the `transformer.` prefix)
        with the float64 ones. The loss is the mean cross-entropy over all
        B * T positions against `labels`; if G's loss is instead that of
        transformers' own shifted labels (position t against labels[t + 1],
        the last position dropped), that convention is used and said.

        Per tensor: err = max|g - g64| / max|g64| (the largest error scaled
        by the tensor's largest gradient). The tolerance comes from the
        dtype: tol = slack * err_torch + 4 * u, where err_torch is PyTorch's
        own err in the same dtype on the same inputs (what that precision
        costs on this model and these tokens) and u the dtype's unit
        roundoff (2^-24 for f32, 2^-8 for bf16: the rounding of the
        gradient itself). `wte` is tied to `lm_head`, so its reference is
        the sum of both uses, as transformers accumulates it; a separate
        `lm_head.weight` in G is held to the same summed reference. A
        missing tensor or a shape that differs fails. Exits 1 on any
        failure.

    gpt2_grad_parity.py torch-grads DIR OUT [--dtype f32|bf16|f64]
        Writes PyTorch's own loss and gradients in G's format (a check of
        this script, and an example of the format).
"""
import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

UNIT_ROUNDOFF = {"f32": 2.0**-24, "bf16": 2.0**-8, "f64": 2.0**-53}


def load_model(d, device):
    from transformers import GPT2LMHeadModel

    model = GPT2LMHeadModel.from_pretrained(d, attn_implementation="eager")
    return model.to(device).eval()  # no dropout; autograd works the same


def losses(logits, labels):
    """Both conventions from the same logits: every position against labels[t]
    (`aligned`), and transformers' shift (position t against labels[t + 1])."""
    v = logits.shape[-1]
    aligned = F.cross_entropy(logits.reshape(-1, v), labels.reshape(-1))
    shifted = F.cross_entropy(logits[:, :-1].reshape(-1, v), labels[:, 1:].reshape(-1))
    return {"aligned": aligned, "shifted": shifted}


def grads(model, ids, labels, dtype, convention=None):
    """Loss(es) and gradients by name (float64, on the CPU) of one forward and
    backward in `dtype`: f64 and f32 convert the model, bf16 autocasts over f32."""
    model.zero_grad(set_to_none=True)
    if dtype == "f64":
        model.double()
    else:
        model.float()
    with torch.autocast(ids.device.type, dtype=torch.bfloat16, enabled=dtype == "bf16"):
        logits = model(input_ids=ids).logits
        ls = losses(logits.float() if dtype == "bf16" else logits, labels)
    del logits
    if convention is None:
        return ls, None
    ls[convention].backward()
    g = {n: p.grad.detach().double().cpu() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return {k: v.item() for k, v in ls.items()}, g


def reference_grads(model, ids, labels, dtype, convention):
    ls, g = grads(model, ids, labels, dtype, convention)
    return ls[convention], g


def tokens(d, device):
    t = load_file(f"{d}/tokens.safetensors")
    return t["input_ids"].to(device), t["labels"].to(device)


def scaled_err(g, ref):
    scale = ref.abs().max().item()
    diff = (g - ref).abs().max().item()
    return diff / scale if scale > 0 else diff, scale


def compare(args):
    device = args.device
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    ours = load_file(args.grads)
    if "loss" not in ours:
        sys.exit(f"FAIL: {args.grads} has no `loss` tensor")
    our_loss = ours.pop("loss").double().reshape(-1)[0].item()
    ids, labels = tokens(args.dir, device)
    model = load_model(args.dir, device)

    # Which loss the file holds: the f64 losses of both conventions, then the
    # gradients of the nearer one.
    with torch.no_grad():
        ls64, _ = grads(model, ids, labels, "f64")
    ls64 = {k: v.item() for k, v in ls64.items()}
    convention = min(ls64, key=lambda k: abs(ls64[k] - our_loss))
    loss64, g64 = reference_grads(model, ids, labels, "f64", convention)
    dtypes = ["f32"] + (["bf16"] if args.dtype == "bf16" else [])
    theirs = {dt: reference_grads(model, ids, labels, dt, convention) for dt in dtypes}
    del model
    u = UNIT_ROUNDOFF[args.dtype]

    print(f"gpt2 gradient parity: {args.grads} ({args.dtype}) against transformers autograd, tokens "
          f"[{ids.shape[0]}, {ids.shape[1]}], loss convention {convention} (f64 losses: aligned "
          f"{ls64['aligned']:.6f}, shifted {ls64['shifted']:.6f}), TF32 {'on' if args.tf32 else 'off'}")
    print(f"err = max|g - g_f64| / max|g_f64| per tensor; tol = {args.slack:g} * err(torch {args.dtype}) "
          f"+ 4 * {u:.3g}")
    cols = ["tensor", "shape", "max|g64|", "tensorfn"] + [f"torch {dt}" for dt in dtypes] + ["tol", ""]
    fmt = "{:<36} {:>13} {:>9} {:>9}" + " {:>10}" * len(dtypes) + " {:>9} {}"
    print(fmt.format(*cols))

    failures = []

    def row(name, shape, scale, err, errs, tol, ok, note=""):
        print(fmt.format(name, shape, f"{scale:.2e}", f"{err:.2e}" if err is not None else "-",
                         *[f"{e:.2e}" for e in errs], f"{tol:.2e}", ("ok" if ok else "FAIL") + note))
        if not ok:
            failures.append(name)

    # The loss, relative to its f64 value.
    errs = [abs(theirs[dt][0] - loss64) / abs(loss64) for dt in dtypes]
    err = abs(our_loss - loss64) / abs(loss64)
    tol = args.slack * errs[-1] + 4 * u
    row("loss", "[]", abs(loss64), err, errs, tol, err <= tol, f"  ({our_loss:.6f} vs f64 {loss64:.6f})")

    def norm(k):
        return k if k in g64 else ("transformer." + k if "transformer." + k in g64 else k)

    by_name = {}
    for k, v in ours.items():
        by_name.setdefault(norm(k), []).append((k, v))
    wte = "transformer.wte.weight"
    worst = (0.0, None)
    for name, ref in g64.items():
        entries = by_name.pop(name, [])
        if name == wte:
            entries += by_name.pop("lm_head.weight", [])
        shape = "x".join(str(s) for s in ref.shape)
        errs_t, scale = [], ref.abs().max().item()
        for dt in dtypes:
            errs_t.append(scaled_err(theirs[dt][1][name], ref)[0])
        tol = args.slack * errs_t[-1] + 4 * u
        if not entries:
            row(name, shape, scale, None, errs_t, tol, False, "  missing")
            continue
        for key, g in entries:
            label = key if key == name or key == name.removeprefix("transformer.") else f"{key} (= {name})"
            if tuple(g.shape) != tuple(ref.shape):
                hint = " (transposed? HF's Conv1D stores [in, out])" if tuple(g.shape) == tuple(ref.shape[::-1]) else ""
                row(label, shape, scale, None, errs_t, tol, False, f"  shape {list(g.shape)}{hint}")
                continue
            err, _ = scaled_err(g.double(), ref)
            if not math.isfinite(err):
                err = math.inf
            ok = err <= tol
            if err / tol > worst[0]:
                worst = (err / tol, label)
            row(label, shape, scale, err, errs_t, tol, ok)
    for name, entries in by_name.items():
        print(f"note: {', '.join(k for k, _ in entries)} in {args.grads} is not a parameter of the model; ignored")

    n = len(g64) + 1
    if failures:
        print(f"FAIL gpt2 gradients {args.dtype}: {len(failures)} of {n} checks failed: {', '.join(failures[:8])}"
              f"{' ...' if len(failures) > 8 else ''}")
        sys.exit(1)
    print(f"ok gpt2 gradients {args.dtype}: loss and {len(g64)} parameter gradients within tolerance "
          f"(closest to its bound: {worst[1]}, at {worst[0]:.2f} of it)")


def torch_grads(args):
    device = args.device
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    ids, labels = tokens(args.dir, device)
    model = load_model(args.dir, device)
    loss, g = reference_grads(model, ids, labels, args.dtype, "aligned")
    out = {n: v.float().contiguous() for n, v in g.items()}
    out["loss"] = torch.tensor(loss, dtype=torch.float32)
    save_file(out, args.out)
    print(f"wrote {args.out}: loss {loss:.6f} and {len(g)} gradients ({args.dtype})")


def write(args):
    from torch_train_gpt2 import write_files

    write_files(args.dir, layers=args.layers, batch=args.batch, seq=args.seq, seed=args.seed, perturb=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    w = sub.add_parser("write")
    w.add_argument("dir")
    w.add_argument("--layers", type=int, default=12)
    w.add_argument("--batch", type=int, default=4)
    w.add_argument("--seq", type=int, default=256)
    w.add_argument("--seed", type=int, default=1)
    c = sub.add_parser("compare")
    c.add_argument("dir")
    c.add_argument("grads")
    c.add_argument("--dtype", choices=["f32", "bf16"], default="f32", help="the precision G was computed in")
    c.add_argument("--tf32", action="store_true", help="let PyTorch's f32 products use TF32")
    c.add_argument("--slack", type=float, default=2.0)
    c.add_argument("--device", default=dev)
    t = sub.add_parser("torch-grads")
    t.add_argument("dir")
    t.add_argument("out")
    t.add_argument("--dtype", choices=["f32", "bf16", "f64"], default="f32")
    t.add_argument("--device", default=dev)
    args = ap.parse_args()
    {"write": write, "compare": compare, "torch-grads": torch_grads}[args.cmd](args)


if __name__ == "__main__":
    main()
