#!/usr/bin/env python3
"""Runs the steps of `cargo run --example train_mlp -- --dump DIR` in PyTorch
(the same initial parameters, batches, model and `torch.optim.AdamW`
settings) and compares the loss of every step with the one tensorfn wrote.

    python3 scripts/train_mlp_reference.py DIR [--lr 0.01] [--device cuda]

Exits non-zero when a step's loss differs by more than the tolerance
(relative 1e-3 for f32 over the run, 1e-9 for f64).
"""
import argparse
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    p = {k: v.to(a.device).requires_grad_(True) for k, v in load_file(f"{a.dir}/init.safetensors").items()}
    b = load_file(f"{a.dir}/batches.safetensors")
    xs, ys = b["x"].to(a.device), b["y"].to(a.device)
    ours = [float(line) for line in open(f"{a.dir}/losses.txt")]
    order = ["w1", "b1", "w2", "b2", "w3", "b3"]
    opt = torch.optim.AdamW([p[k] for k in order], lr=a.lr, weight_decay=a.weight_decay)
    theirs = []
    for x, y in zip(xs, ys):
        h = torch.relu(torch.addmm(p["b1"], x, p["w1"]))
        h = torch.relu(torch.addmm(p["b2"], h, p["w2"]))
        loss = F.cross_entropy(torch.addmm(p["b3"], h, p["w3"]), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        theirs.append(loss.item())
    tol = 1e-9 if xs.dtype == torch.float64 else 1e-3
    worst = max(abs(o - t) / max(abs(t), 1e-3) for o, t in zip(ours, theirs))
    for i in list(range(0, len(ours), 50)) + [len(ours) - 1]:
        print(f"step {i:4}: tensorfn {ours[i]:.6f}  torch {theirs[i]:.6f}")
    print(f"train_mlp {xs.dtype} on {a.device}: {len(ours)} steps, largest relative loss difference {worst:.2e} (tolerance {tol:g})")
    if len(ours) != len(theirs) or worst > tol:
        print("train_mlp: the losses differ from PyTorch's")
        sys.exit(1)


if __name__ == "__main__":
    main()
