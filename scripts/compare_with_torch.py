#!/usr/bin/env python3
"""Reruns in PyTorch every case that `tests/torch_parity.rs` wrote (with
TENSORFN_PARITY_DIR set) and compares tensorfn's outputs with PyTorch's,
element by element, on the same inputs.

For each case three results meet: ours, PyTorch's in the same dtype, and
PyTorch's in float64 on the same (exactly representable) inputs. Errors are
taken against the float64 result, relative to its largest value. A case
passes when our error is at most twice PyTorch's plus the dtype's unit
roundoff u, times sqrt(K) for products with K-term dot products (their
usual error bound; which of two correct summation orders PyTorch's and our
cuBLAS calls pick is not ours to match) and times K for K optimizer steps
(`torch.optim.AdamW` and `SGD` with momentum, run from the same parameter
and per-step gradients; the parameter is rounded once a step). `cat` must
be exact. The largest
difference from PyTorch's same-dtype result is printed too.

Usage: compare_with_torch.py DIR [DIR ...]   (each DIR holds manifest.jsonl)
Exits 1 when a case fails, 2 when there is nothing to compare.
"""
import json
import math
import os
import sys

import torch

DTYPES = {
    "f64": torch.float64,
    "f32": torch.float32,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
}
# Unit roundoff of each dtype's significand.
EPS = {"f64": 2.0**-52, "f32": 2.0**-23, "f16": 2.0**-10, "bf16": 2.0**-7}


def gelu_tanh(x):
    return x * 0.5 * (torch.tanh((x + x * x * x * 0.044715) * 0.7978846) + 1.0)


def run(op, args, xs):
    if op in ("matmul",):
        return torch.matmul(xs[0], xs[1])
    if op == "matmul_nt":
        return torch.matmul(xs[0], xs[1].t())
    if op == "bmm":
        return torch.bmm(xs[0], xs[1])
    if op == "addmm":
        return torch.addmm(xs[0], xs[1], xs[2], beta=args["beta"], alpha=args["alpha"])
    if op == "cat":
        return torch.cat(xs, dim=args["dim"])
    if op == "softmax":
        return torch.softmax(xs[0], dim=args["dim"])
    if op == "log_softmax":
        return torch.log_softmax(xs[0], dim=args["dim"])
    if op == "layer_norm":
        return torch.nn.functional.layer_norm(xs[0], (xs[0].shape[-1],), xs[1], xs[2], args["eps"])
    if op == "rms_norm":
        return torch.nn.functional.rms_norm(xs[0], (xs[0].shape[-1],), xs[1], args["eps"])
    if op in ("layer_norm_backward", "rms_norm_backward"):
        # xs: input, weight, (bias,) grad_output; args["grad"] picks one of
        # the gradients autograd gives.
        params = [x.clone().requires_grad_(True) for x in xs[:-1]]
        x = params[0]
        if op == "layer_norm_backward":
            y = torch.nn.functional.layer_norm(x, (x.shape[-1],), params[1], params[2], args["eps"])
        else:
            y = torch.nn.functional.rms_norm(x, (x.shape[-1],), params[1], args["eps"])
        grads = torch.autograd.grad(y, params, xs[-1])
        return grads[["dx", "dweight", "dbias"].index(args["grad"])]
    if op == "batch_norm":
        # xs: input, running_mean, running_var, weight, bias; args["out"]
        # picks the output or a running statistic after the update.
        x, rm, rv, w, b = xs
        rm, rv = rm.clone(), rv.clone()
        y = torch.nn.functional.batch_norm(x, rm, rv, w, b, args["training"], args["momentum"], args["eps"])
        return {"y": y, "running_mean": rm, "running_var": rv}[args["out"]]
    if op == "batch_norm_backward":
        # xs: input, running_mean, running_var, weight, bias, grad_output.
        x, rm, rv, w, b, g = xs
        params = [t.clone().requires_grad_(True) for t in (x, w, b)]
        y = torch.nn.functional.batch_norm(params[0], rm.clone(), rv.clone(), params[1], params[2],
                                           args["training"], args["momentum"], args["eps"])
        grads = torch.autograd.grad(y, params, g)
        return grads[["dx", "dweight", "dbias"].index(args["grad"])]
    if op == "attention":
        # xs: query, key, value (keys and values of fewer heads under
        # enable_gqa).
        return torch.nn.functional.scaled_dot_product_attention(
            *xs, is_causal=args["causal"], enable_gqa=args.get("enable_gqa", False))
    if op == "attention_backward":
        # xs: query, key, value, grad_output; args["grad"] picks one of the
        # gradients autograd gives.
        params = [x.clone().requires_grad_(True) for x in xs[:-1]]
        y = torch.nn.functional.scaled_dot_product_attention(
            *params, is_causal=args["causal"], enable_gqa=args.get("enable_gqa", False))
        grads = torch.autograd.grad(y, params, xs[-1])
        return grads[["dq", "dk", "dv"].index(args["grad"])]
    if op in ("max_pool2d", "avg_pool2d", "adaptive_avg_pool2d",
              "max_pool2d_backward", "avg_pool2d_backward", "adaptive_avg_pool2d_backward"):
        F = torch.nn.functional
        base = op.removesuffix("_backward")
        x = xs[0].clone().requires_grad_(True)
        if base == "max_pool2d":
            y = F.max_pool2d(x, args["kernel_size"], args["stride"], args["padding"],
                             args["dilation"], ceil_mode=args["ceil_mode"])
        elif base == "avg_pool2d":
            y = F.avg_pool2d(x, args["kernel_size"], args["stride"], args["padding"],
                             ceil_mode=args["ceil_mode"], count_include_pad=args["count_include_pad"],
                             divisor_override=args["divisor_override"])
        else:
            y = F.adaptive_avg_pool2d(x, args["output_size"])
        if op == base:
            return y.detach()
        return torch.autograd.grad(y, [x], xs[1])[0]
    if op == "conv2d":
        return torch.nn.functional.conv2d(xs[0], xs[1], xs[2], stride=tuple(args["stride"]),
                                          padding=tuple(args["padding"]),
                                          dilation=tuple(args["dilation"]), groups=args["groups"])
    if op == "conv2d_backward":
        # xs: input, weight, bias, grad_output; args["grad"] picks one of
        # the gradients autograd gives.
        params = [x.clone().requires_grad_(True) for x in xs[:-1]]
        y = torch.nn.functional.conv2d(*params, stride=tuple(args["stride"]),
                                       padding=tuple(args["padding"]),
                                       dilation=tuple(args["dilation"]), groups=args["groups"])
        grads = torch.autograd.grad(y, params, xs[-1])
        return grads[["dx", "dweight", "dbias"].index(args["grad"])]
    if op == "rope":
        # Hugging Face's Llama: x * cos + rotate_half(x) * sin.
        x, cos, sin = xs
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin
    if op == "index_add":
        # xs: input, index (exact small integers), source.
        return xs[0].index_add(args["dim"], xs[1].long(), xs[2], alpha=args["alpha"])
    if op == "scatter_add":
        return xs[0].scatter_add(args["dim"], xs[1].long(), xs[2])
    if op == "embedding_backward":
        # xs: ids, the table, the gradient of the lookup's result.
        w = xs[1].clone().requires_grad_(True)
        y = torch.nn.functional.embedding(xs[0].long(), w)
        return torch.autograd.grad(y, w, xs[2])[0]
    if op == "sin_affine":
        return torch.sin(xs[0]) * 2 + 5
    if op == "gelu_tanh":
        return gelu_tanh(xs[0])
    if op == "chain6":
        x, y = xs
        return torch.tanh(torch.sigmoid(x * y + 1.0) * x) - y
    if op in ("adamw", "sgd"):
        # xs[0]: the parameter; xs[1]: one gradient per step, stacked.
        p = xs[0].clone().requires_grad_(True)
        if op == "adamw":
            opt = torch.optim.AdamW([p], lr=args["lr"], betas=(args["beta1"], args["beta2"]),
                                    eps=args["eps"], weight_decay=args["weight_decay"],
                                    amsgrad=args["amsgrad"])
        else:
            opt = torch.optim.SGD([p], lr=args["lr"], momentum=args["momentum"],
                                  dampening=args["dampening"], weight_decay=args["weight_decay"],
                                  nesterov=args["nesterov"])
        for g in xs[1]:
            p.grad = g.clone()
            opt.step()
        return p.detach()
    raise ValueError(f"unknown op {op}")


def load(folder, spec, device):
    path = os.path.join(folder, spec["file"])
    with open(path, "rb") as f:
        data = bytearray(f.read())
    t = torch.frombuffer(data, dtype=torch.float64) if data else torch.zeros(0, dtype=torch.float64)
    return t.reshape(spec["shape"]).to(device)


def slack(op, inputs, args):
    """How many units of roundoff a correct result may be off by."""
    if op in ("layer_norm_backward", "rms_norm_backward"):
        # dx sums over a row, dweight and dbias over the rows; dweight's
        # terms carry the normalised input, whose statistics sum a row.
        rows, cols = inputs[0]["shape"]
        terms = {"dx": cols, "dweight": rows + cols, "dbias": rows}[args["grad"]]
        return 2.0 * math.sqrt(terms)
    if op in ("batch_norm", "batch_norm_backward"):
        # Per-channel sums over N * H * W elements.
        n, _, *spatial = inputs[0]["shape"]
        return 2.0 * math.sqrt(n * math.prod(spatial))
    if op == "attention":
        # A sum over the keys and one over the head dim.
        _, _, l, e = inputs[0]["shape"]
        s = inputs[1]["shape"][2]
        return 2.0 * math.sqrt(max(l, s) + e)
    if op == "attention_backward":
        # Sums over the keys (dq) or the queries (dk, dv), and the head dim;
        # under enable_gqa dk and dv also sum over each group of heads.
        _, h, l, e = inputs[0]["shape"]
        s = inputs[1]["shape"][2]
        group = h // inputs[1]["shape"][1] if args.get("enable_gqa") else 1
        return 2.0 * math.sqrt((max(l, s) + e) * group)
    if op in ("conv2d", "conv2d_backward"):
        # A sum over the kernel's taps (dx, dweight and dbias over more).
        n, _, h, w = inputs[0]["shape"]
        co, cg, kh, kw = inputs[1]["shape"]
        terms = {"dx": co * kh * kw, "dweight": n * h * w, "dbias": n * h * w}
        return 2.0 * math.sqrt(terms.get(args.get("grad"), cg * kh * kw))
    if op in ("avg_pool2d", "avg_pool2d_backward", "adaptive_avg_pool2d", "adaptive_avg_pool2d_backward"):
        # A sum over each window, at most the whole plane (the summation
        # order is ours, not PyTorch's).
        h, w = inputs[0]["shape"][-2:]
        return 2.0 * math.sqrt(h * w)
    if op in ("matmul", "matmul_nt", "bmm", "addmm"):
        a = inputs[1] if op == "addmm" else inputs[0]
        return 2.0 * math.sqrt(a["shape"][-1])
    if op in ("index_add", "scatter_add", "embedding_backward"):
        # Repeated indices: a sum of (index entries / targets) terms each.
        idx = inputs[0] if op == "embedding_backward" else inputs[1]
        count = math.prod(idx["shape"])
        targets = inputs[1]["shape"][0] if op == "embedding_backward" else inputs[0]["shape"][args["dim"]]
        return 2.0 + 2.0 * count / max(targets, 1)
    if op in ("adamw", "sgd"):
        # One rounding of the parameter per step.
        return 2.0 * inputs[1]["shape"][0]
    return 2.0


def max_rel(a, ref, scale):
    diff = (a.double() - ref).abs()
    # NaN anywhere is a failure, never a silent pass.
    if torch.isnan(diff).any():
        return float("inf")
    return diff.max().item() / scale if diff.numel() else 0.0


def compare(folder, device):
    failures = 0
    rows = []
    with open(os.path.join(folder, "manifest.jsonl")) as f:
        cases = [json.loads(line) for line in f if line.strip()]
    for case in cases:
        op, dt, args = case["op"], case["dtype"], case["args"]
        exact = [load(folder, spec, device) for spec in case["inputs"]]
        ours = load(folder, case["output"], device)
        native = run(op, args, [x.to(DTYPES[dt]) for x in exact])
        ref = run(op, args, exact)
        if tuple(ours.shape) != tuple(ref.shape):
            failures += 1
            rows.append((op, dt, "shape", str(tuple(ours.shape)), str(tuple(ref.shape)), "", "FAIL"))
            continue
        scale = max(ref.abs().max().item() if ref.numel() else 0.0, 1e-300)
        ours_err = max_rel(ours, ref, scale)
        torch_err = max_rel(native, ref, scale)
        vs_torch = max_rel(ours, native.double(), scale)
        allowed = 2 * torch_err + EPS[dt] * slack(op, case["inputs"], args)
        ok = ours_err <= allowed if op != "cat" else ours_err == 0.0
        failures += not ok
        shapes = "x".join(str(tuple(s["shape"])) for s in case["inputs"])
        rows.append((op, dt, shapes, f"{ours_err:.2e}", f"{torch_err:.2e}", f"{vs_torch:.2e}", "ok" if ok else "FAIL"))
    head = ("op", "dtype", "inputs", "ours vs f64", "torch vs f64", "ours vs torch", "")
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    for r in [head] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
    print(f"parity {folder}: {len(rows) - failures} of {len(rows)} cases as accurate as PyTorch "
          f"({device}, torch {torch.__version__})")
    return failures, len(rows)


def main():
    folders = [f for f in sys.argv[1:] if os.path.exists(os.path.join(f, "manifest.jsonl"))]
    if not folders:
        print("nothing to compare: run tests/torch_parity.rs with TENSORFN_PARITY_DIR set", file=sys.stderr)
        return 2
    # Same settings as tensorfn's defaults: exact f32 products, no TF32.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = "cuda" if torch.cuda.is_available() else "cpu"
    failed = 0
    for folder in folders:
        f, _ = compare(folder, device)
        failed += f
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
