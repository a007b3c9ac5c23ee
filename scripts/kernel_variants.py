#!/usr/bin/env python3
"""Times variants of tensorfn's elementwise kernels against PyTorch.

Loads `NAME_contig` entries straight from PTX files (as `tensorfn-ptx DIR`
writes them: `cargo run -p tensorfn-kernels --bin tensorfn-ptx DIR`) with
the CUDA driver API and times them beside PyTorch eager, `torch.compile`
and a device-to-device copy of the same bytes, in one process: a kernel
change can be measured without building the benchmarks. Each directory
given is one variant (e.g. the kernels before and after a change); files
that name the same kernel are compared on one line, with each variant's
ratio to `torch.compile` and its largest error against PyTorch in f32.

    python3 scripts/kernel_variants.py DIR [DIR ...] [--sizes 24,26,28]
        [--filter SUBSTR] [--grids rt,32,occ2,g4] [--no-compile] [--quick]

Known kernels: the `sin_mul_add`, `sigmoid_tanh_chain` and `gelu` ones.
Launch geometry: 256 threads a block; `--grids` lists the grid sizes to
try: `rt` (the runtime's default rule, `GridRule::Capped` in
runtime/src/cuda/grid.rs: two 16-byte steps a thread, at most 128
blocks per multiprocessor), blocks per multiprocessor (`32`: at most 32
per multiprocessor), `occN` (N times the blocks of the kernel that fit on a
multiprocessor at once, from the driver's occupancy query) or `gN`
(enough blocks for N 16-byte groups per thread); every variant runs
with each. The runtime times `rt`, `g2` and `g4` on a kernel's first
large launch and keeps the fastest. Inputs, their rotation beyond the L2 cache and the timing
(CUDA events around batches of launches, median over batches) are those
of `torch_baseline.py`, which must sit in the same folder.
"""

import argparse
import ctypes
import glob
import os

import torch
import torch.nn.functional as F

# The benchmarks' own timing, input rotation and inputs, so that these
# figures compare with theirs.
from torch_baseline import DTYPES, Plan, n_sets, rand, time_call

# name fragment -> (inputs, the same function in PyTorch)
FUNCTIONS = {
    "sin_mul_add": (1, lambda x: torch.sin(x) * 2 + 5),
    "sigmoid_tanh_chain": (2, lambda x, y: torch.tanh(torch.sigmoid(x * y + 1) * x) - y),
    "gelu": (1, lambda x: F.gelu(x, approximate="tanh")),
}
BLOCK = 256


class Driver:
    """The few driver calls needed, on PyTorch's context and stream."""

    def __init__(self):
        torch.zeros(1, device="cuda")  # creates the primary context
        self.cu = ctypes.CDLL("libcuda.so.1")
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count
        self.stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

    def check(self, status, what):
        if status != 0:
            raise RuntimeError(f"{what}: CUDA driver error {status}")

    def function(self, path, entry):
        module = ctypes.c_void_p()
        text = open(path, "rb").read() + b"\0"
        self.check(self.cu.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(text)), f"loading {path}")
        f = ctypes.c_void_p()
        self.check(self.cu.cuModuleGetFunction(ctypes.byref(f), module, entry.encode()), f"{entry} in {path}")
        return f

    def resident_blocks(self, f):
        """Blocks of BLOCK threads of `f` that fit on one multiprocessor."""
        blocks = ctypes.c_int()
        self.check(
            self.cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(blocks), f, BLOCK, ctypes.c_size_t(0)),
            "occupancy",
        )
        return blocks.value

    def grid(self, f, policy, n, size):
        """The grid `policy` (see --grids) gives `f` over `n` elements of `size` bytes."""
        if policy == "rt":
            return max(1, min(-(-n // (BLOCK * (16 // size) * 2)), self.sms * 128))
        if policy.startswith("g"):
            per_thread = int(policy[1:]) * (16 // size)
            return max(1, -(-n // (BLOCK * per_thread)))
        if policy.startswith("occ"):
            per_sm = self.resident_blocks(f) * int(policy[3:] or 1)
        else:
            per_sm = int(policy)
        return min((n + BLOCK - 1) // BLOCK, self.sms * per_sm)

    def launch(self, f, out, inputs, n, grid):
        values = [ctypes.c_uint64(t.data_ptr()) for t in [out, *inputs]] + [ctypes.c_uint64(n)]
        params = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in values])
        self.check(self.cu.cuLaunchKernel(f, grid, 1, 1, BLOCK, 1, 1, 0, self.stream, params, None), "launch")


def kernel_of(path):
    """(kernel name, function key, dtype) of a PTX file, or None."""
    name = os.path.basename(path).replace(".sm_80", "").replace(".ptx", "")
    dtype = name.rsplit("_", 1)[-1]
    if dtype not in DTYPES:
        return None
    for key in FUNCTIONS:
        if key in name:
            return name, key, dtype
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+", help="one directory of PTX files per variant")
    ap.add_argument("--sizes", default="24,26,28", help="log2 of the element counts")
    ap.add_argument("--filter", default="", help="only kernels whose name contains this")
    ap.add_argument("--grids", default="rt", help="blocks per multiprocessor to try: N or occN (see above)")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--quick", action="store_true", help="fewer and shorter batches")
    args = ap.parse_args()
    plan = Plan(args.quick)

    driver = Driver()
    variants = {}
    for d in args.dirs:
        for path in sorted(glob.glob(os.path.join(d, "*.ptx"))):
            k = kernel_of(path)
            if k and args.filter in k[0]:
                variants.setdefault(k, []).append((os.path.basename(d.rstrip("/")), path))
    gen = torch.Generator(device="cuda").manual_seed(1)
    compiled = {}
    for (name, key, dt), files in sorted(variants.items()):
        inputs, fn = FUNCTIONS[key]
        dtype = DTYPES[dt]
        functions = []
        for v, p in files:
            f = driver.function(p, name + "_contig")
            for g in args.grids.split(","):
                label = v if args.grids == "rt" else f"{v}@{g}"
                functions.append((label, f, g))
        for lg in (int(s) for s in args.sizes.split(",")):
            n = 1 << lg
            size = torch.tensor([], dtype=dtype).element_size()
            per_set = n * size * (inputs + 1)
            sets = [[rand(n, dtype, gen) for _ in range(inputs)] for _ in range(n_sets(per_set))]
            outs = [torch.empty(n, device="cuda", dtype=dtype) for _ in sets]

            def us(call):
                return time_call(plan, call, len(sets))["median_us"]

            t = {"eager": us(lambda i: fn(*sets[i]))}
            if not args.no_compile:
                if (key, dt) not in compiled:
                    compiled[key, dt] = torch.compile(fn)
                c = compiled[key, dt]
                t["compile"] = us(lambda i: c(*sets[i]))
            src = torch.empty(per_set // 2, dtype=torch.uint8, device="cuda")
            dst = torch.empty_like(src)
            t["copy"] = us(lambda i: dst.copy_(src))
            base = t.get("compile", t["eager"])
            line = (
                f"{name:38s} 2^{lg}  eager {t['eager']:8.1f}  compile {t.get('compile', float('nan')):8.1f}"
                f"  copy {t['copy']:8.1f} us |"
            )
            reference = fn(*[x.float() for x in sets[0]])
            for variant, f, policy in functions:
                grid = driver.grid(f, policy, n, size)
                driver.launch(f, outs[0], sets[0], n, grid)
                torch.cuda.synchronize()
                err = ((outs[0].float() - reference).abs().max() / reference.abs().max()).item()
                v = us(lambda i: driver.launch(f, outs[i], sets[i], n, grid))
                line += f" {variant} {v:8.1f} ({base / v:.3f}x, {t['copy'] / v:.0%} copy BW, err {err:.1e})"
            print(line, flush=True)
            del sets, outs, src, dst
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
