#!/usr/bin/env python3
"""torchvision's ResNet-18, the reference for tensorfn's `resnet18` example.

    resnet_reference.py write DIR [--seed 0] [--classes 1000]
        Writes a random-init torchvision `resnet18` as DIR/model.safetensors
        under torchvision's state-dict names (`conv1.weight`,
        `layer1.0.bn1.running_mean`, `fc.bias`, ...). Batch-norm weights,
        biases and running statistics are drawn too (the library
        initialises them to 1, 0, 0 and 1), so that parity checks them.

    resnet_reference.py compare DIR OUT --dtype f32|bf16
        OUT is a safetensors file the example wrote with `input`
        ([N, 3, H, W], f32) and `logits` ([N, classes]). Runs the same model
        in eval mode on the same input in float64 (the reference) and in the
        dtype (PyTorch's own result, channels-last), and fails if
        tensorfn's largest error against float64 is more than twice
        PyTorch's plus the dtype's roundoff of the largest logit.

    resnet_reference.py bench [--batch 64] [--iters 50] [--rounds 5] [--eager-only]
                              [--model-only] [--dtype bf16|f32] [--layout nhwc|nchw] [--no-tf32]
        Times, on the GPU, PyTorch's `conv2d` on the issue's cases (the
        3x3 ones also backward, data and filter apart; not with
        --model-only) and the whole ResNet-18 forward (bf16 and
        channels-last unless --dtype and --layout say otherwise, eval; f32
        with TF32 unless --no-tf32, as tensorfn's example runs it),
        eager and `torch.compile`, and prints one `name ms` line per case:
        the best of --rounds rounds of --iters calls each. A short run
        (`--model-only --eager-only --iters 2 --rounds 1`) suits a
        profiler.
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torchvision.models import resnet18

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
ROUNDOFF = {"f32": 2.0**-24, "bf16": 2.0**-8}


def model_from(dir_, classes):
    model = resnet18(weights=None, num_classes=classes).eval()
    model.load_state_dict(load_file(f"{dir_}/model.safetensors"))
    return model


def write(args):
    torch.manual_seed(args.seed)
    os.makedirs(args.dir, exist_ok=True)
    model = resnet18(weights=None, num_classes=args.classes).eval()
    with torch.no_grad():
        for name, m in model.named_modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.normal_(1.0, 0.1)
                m.bias.normal_(0.0, 0.1)
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, f"{args.dir}/model.safetensors")
    print(f"wrote {args.dir}/model.safetensors: {len(state)} tensors, "
          f"{sum(p.numel() for p in model.parameters())} parameters")


def compare(args):
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    out = load_file(args.out)
    x = out["input"].to(dev)
    ours = out["logits"].to(dev).double()
    model = model_from(args.dir, ours.shape[1]).to(dev)
    with torch.no_grad():
        ref = model.double()(x.double())
        m = model.to(DTYPES[args.dtype]).to(memory_format=torch.channels_last)
        theirs = m(x.to(DTYPES[args.dtype]).contiguous(memory_format=torch.channels_last)).double()
    if ours.shape != ref.shape:
        sys.exit(f"FAIL resnet18 {args.dtype}: logits of shape {list(ours.shape)}, want {list(ref.shape)}")
    err_ours = (ours - ref).abs().max().item()
    err_theirs = (theirs - ref).abs().max().item()
    bound = 2 * err_theirs + ROUNDOFF[args.dtype] * ref.abs().max().item()
    ok = err_ours <= bound and bool(torch.isfinite(ours).all())
    print(f"{'ok' if ok else 'FAIL'} resnet18 logits {args.dtype} {list(ref.shape)}: "
          f"max|tensorfn - f64| {err_ours:.3e}, max|torch {args.dtype} - f64| {err_theirs:.3e}, "
          f"bound {bound:.3e}")
    if not ok:
        sys.exit(1)


def timed(fn, iters, rounds=5):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(rounds):
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / iters)
    return best


def bench(args):
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    cl = torch.channels_last
    cases = [
        ("conv2d_bf16_n32_64x64_56_3x3", torch.bfloat16, (32, 64, 56, 56), (64, 64, 3, 3), 1, 1),
        ("conv2d_f32_n32_64x64_56_3x3", torch.float32, (32, 64, 56, 56), (64, 64, 3, 3), 1, 1),
        ("conv2d_bf16_n32_3x64_224_7x7_s2", torch.bfloat16, (32, 3, 224, 224), (64, 3, 7, 7), 2, 3),
    ]
    for name, dt, xs, ws, stride, pad in [] if args.model_only else cases:
        x = torch.randn(xs, device="cuda", dtype=dt).contiguous(memory_format=cl)
        w = torch.randn(ws, device="cuda", dtype=dt).contiguous(memory_format=cl)
        ms = timed(lambda: F.conv2d(x, w, stride=stride, padding=pad), args.iters, args.rounds)
        print(f"{name} {ms:.4f}")
        if ws[2] == 3:
            # The backward passes alone, as autograd calls them.
            g = F.conv2d(x, w, stride=stride, padding=pad).contiguous(memory_format=cl)
            for part, mask in (("bwd_data", [True, False, False]), ("bwd_filter", [False, True, False])):
                bwd = lambda: torch.ops.aten.convolution_backward(
                    g, x, w, None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], 1, mask)
                print(f"{name}_{part} {timed(bwd, args.iters, args.rounds):.4f}")
    if args.no_tf32:
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    dt = DTYPES[args.dtype]
    fmt = cl if args.layout == "nhwc" else torch.contiguous_format
    model = resnet18(weights=None).eval().cuda().to(dt).to(memory_format=fmt)
    x = torch.randn(args.batch, 3, 224, 224, device="cuda", dtype=dt).contiguous(memory_format=fmt)
    # The default case keeps its old name; others name dtype and layout.
    tag = "bf16" if (args.dtype, args.layout) == ("bf16", "nhwc") else f"{args.dtype}_{args.layout}"
    tag += "_exact" if args.no_tf32 and args.dtype == "f32" else ""
    with torch.no_grad():
        print(f"resnet18_{tag}_b{args.batch}_eager {timed(lambda: model(x), args.iters, args.rounds):.4f}")
        if args.eager_only:
            return
        compiled = torch.compile(model)
        print(f"resnet18_{tag}_b{args.batch}_compile {timed(lambda: compiled(x), args.iters, args.rounds):.4f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("dir")
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--classes", type=int, default=1000)
    c = sub.add_parser("compare")
    c.add_argument("dir")
    c.add_argument("out")
    c.add_argument("--dtype", choices=DTYPES, default="f32")
    b = sub.add_parser("bench")
    b.add_argument("--batch", type=int, default=64)
    b.add_argument("--iters", type=int, default=50)
    b.add_argument("--rounds", type=int, default=5)
    b.add_argument("--eager-only", action="store_true", help="skip torch.compile")
    b.add_argument("--model-only", action="store_true", help="skip the conv2d cases")
    b.add_argument("--dtype", choices=DTYPES, default="bf16", help="the model's dtype")
    b.add_argument("--layout", choices=("nhwc", "nchw"), default="nhwc", help="the model's memory format")
    b.add_argument("--no-tf32", action="store_true", help="exact f32 convolutions and products")
    args = ap.parse_args()
    {"write": write, "compare": compare, "bench": bench}[args.cmd](args)


if __name__ == "__main__":
    main()
