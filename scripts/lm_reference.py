#!/usr/bin/env python3
"""The language models of Hugging Face `transformers`, the references for
tensorfn's `gpt2` and `llama` examples.

    lm_reference.py write gpt2|llama DIR [--layers N] [--seed 0]
        Writes a random-init model with `save_pretrained`:
        DIR/model.safetensors, as a Hugging Face checkpoint stores it.
        `gpt2` is GPT2LMHeadModel with GPT-2 small's shapes; `llama` is
        LlamaForCausalLM with the `llama` example's shapes (hidden 512, 8
        heads of 64 over 2 key-value heads, MLP 1376, vocabulary 32000,
        RoPE theta 10000, RMSNorm eps 1e-5, untied head). Norm weights and
        biases are drawn too (the library initialises them to 1 and 0), so
        that parity checks them.

    lm_reference.py compare DIR LOGITS --tokens 464,2068,... --batch B --dtype f32|bf16
        Runs the same model on the same token ids (B rows) in float64 (the
        reference) and in the dtype (PyTorch's own result), and compares
        tensorfn's logits (a safetensors file with a `logits` tensor of
        shape [B * T, vocab]) with both. It fails if tensorfn's largest
        error against float64 is more than twice PyTorch's plus the dtype's
        roundoff of the largest logit, or if the argmax of a position
        differs from PyTorch's where PyTorch's top two differ by more than
        that error.
"""
import argparse
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
ROUNDOFF = {"f32": 2.0**-24, "bf16": 2.0**-8}


def llama_config(layers):
    return LlamaConfig(
        vocab_size=32000, hidden_size=512, intermediate_size=1376, num_hidden_layers=layers,
        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=1024,
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
        attention_bias=False, mlp_bias=False)


def write(args):
    torch.manual_seed(args.seed)
    if args.model == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(n_layer=args.layers or 12)).eval()
    else:
        model = LlamaForCausalLM(llama_config(args.layers or 4)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight", "layernorm.weight", "norm.weight")):
                p.normal_(1.0, 0.1)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.02)
    model.save_pretrained(args.dir, safe_serialization=True)
    keys = sorted(load_file(f"{args.dir}/model.safetensors").keys())
    print(f"wrote {args.dir}/model.safetensors: {len(keys)} tensors, "
          f"{sum(p.numel() for p in model.parameters())} parameters; "
          f"first keys {keys[:3]}")


def compare(args):
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    ids = torch.tensor([int(t) for t in args.tokens.split(",")], device=dev)
    ids = ids.reshape(args.batch, -1)
    model = AutoModelForCausalLM.from_pretrained(args.dir, attn_implementation="eager").eval().to(dev)
    with torch.no_grad():
        ref = model.double()(ids).logits.reshape(ids.numel(), -1)
        theirs = model.to(DTYPES[args.dtype])(ids).logits.reshape(ids.numel(), -1).double()
    ours = load_file(args.logits)["logits"].to(dev).double()
    if ours.shape != ref.shape:
        sys.exit(f"FAIL {args.dir} {args.dtype}: logits of shape {list(ours.shape)}, want {list(ref.shape)}")
    err_ours = (ours - ref).abs().max().item()
    err_theirs = (theirs - ref).abs().max().item()
    bound = 2 * err_theirs + ROUNDOFF[args.dtype] * ref.abs().max().item()
    top2 = theirs.topk(2, dim=1).values
    clear = (top2[:, 0] - top2[:, 1]) > 2 * bound
    argmax_differs = ((ours.argmax(1) != theirs.argmax(1)) & clear).sum().item()
    ok = err_ours <= bound and argmax_differs == 0
    print(f"{'ok' if ok else 'FAIL'} {model.config.model_type} logits {args.dtype} [{ids.shape[0]}x{ids.shape[1]}, "
          f"{ref.shape[1]}]: max|tensorfn - f64| {err_ours:.3e}, "
          f"max|torch {args.dtype} - f64| {err_theirs:.3e}, bound {bound:.3e}, "
          f"argmax differs at {argmax_differs} clear positions")
    if not ok:
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("model", choices=["gpt2", "llama"])
    w.add_argument("dir")
    w.add_argument("--layers", type=int, default=0, help="default: 12 for gpt2, 4 for llama")
    w.add_argument("--seed", type=int, default=0)
    c = sub.add_parser("compare")
    c.add_argument("dir")
    c.add_argument("logits")
    c.add_argument("--tokens", required=True)
    c.add_argument("--batch", type=int, default=1)
    c.add_argument("--dtype", choices=DTYPES, default="f32")
    args = ap.parse_args()
    {"write": write, "compare": compare}[args.cmd](args)


if __name__ == "__main__":
    main()
