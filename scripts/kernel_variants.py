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
        [--launch stream,graph,pdl,pdl-graph]

Known kernels: the `sin_mul_add`, `sigmoid_tanh_chain` and `gelu` ones.
Launch geometry: 256 threads a block; `--grids` lists the grid sizes to
try: `rt` (the runtime's default rule, `GridRule::Capped` in
runtime/src/cuda/grid.rs: two 16-byte steps a thread, at most 128
blocks per multiprocessor), blocks per multiprocessor (`32`: at most 32
per multiprocessor), `occN` (N times the blocks of the kernel that fit on a
multiprocessor at once, from the driver's occupancy query) or `gN`
(enough blocks for N 16-byte groups per thread); every variant runs
with each. The runtime times `rt`, `g2` and `g4` on a kernel's first
large launch and keeps the fastest.

`--launch` says how the kernels are queued: `stream` (one driver launch
per call from Python, the default), `graph` (64 launches captured in a
CUDA graph and replayed: the device's own time per kernel, no host work
between launches), and `pdl` / `pdl-graph`, the same with programmatic
dependent launch (Hopper and newer): each launch may start while the one
before it drains, its text (rewritten for sm_90) waits with
`griddepcontrol.wait` before touching memory and lets the next launch in
with `griddepcontrol.launch_dependents` at its start. The copy and
`torch.compile` columns are timed from Python as always; a graph mode
adds a `copy@graph` column (the copy replayed from a graph) and divides
by it.
Inputs, their rotation beyond the L2 cache and the timing
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
from torch_baseline import DTYPES, Plan, n_sets, rand, time_call, time_graph

# name fragment -> (inputs, the same function in PyTorch)
FUNCTIONS = {
    "sin_mul_add": (1, lambda x: torch.sin(x) * 2 + 5),
    "sigmoid_tanh_chain": (2, lambda x, y: torch.tanh(torch.sigmoid(x * y + 1) * x) - y),
    "gelu": (1, lambda x: F.gelu(x, approximate="tanh")),
}
BLOCK = 256

# CUlaunchAttributeID of programmatic dependent launch.
PROGRAMMATIC_STREAM_SERIALIZATION = 6


class LaunchAttribute(ctypes.Structure):
    # CUlaunchAttribute: an id, padding, and a 64-byte value union whose
    # first int is the flag used here.
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int), ("rest", ctypes.c_char * 60)]


class LaunchConfig(ctypes.Structure):
    # CUlaunchConfig.
    _fields_ = [
        ("grid", ctypes.c_uint * 3),
        ("block", ctypes.c_uint * 3),
        ("shared", ctypes.c_uint),
        ("stream", ctypes.c_void_p),
        ("attrs", ctypes.POINTER(LaunchAttribute)),
        ("num_attrs", ctypes.c_uint),
    ]


def with_pdl(text):
    """The PTX text rewritten for programmatic dependent launch: sm_90
    (griddepcontrol needs it), each entry letting the next launch in at
    once and waiting for the previous grid before its first memory access
    (its parameters come first, as they are not memory another kernel
    writes)."""
    lines = text.decode().splitlines()
    out, in_entry = [], False
    for line in lines:
        if line.startswith(".version"):
            line = ".version 7.8"
        elif line.startswith(".target"):
            line = ".target sm_90"
        if line.startswith(".visible .entry"):
            in_entry = True
        stripped = line.strip()
        if in_entry and stripped and not stripped.startswith((".reg", "{", ".param", ")", ".visible", "ld.param", "//")):
            out.append("\tgriddepcontrol.launch_dependents;")
            out.append("\tgriddepcontrol.wait;")
            in_entry = False
        out.append(line)
    return "\n".join(out).encode() + b"\n"


class Driver:
    """The few driver calls needed, on PyTorch's context and stream."""

    def __init__(self):
        torch.zeros(1, device="cuda")  # creates the primary context
        self.cu = ctypes.CDLL("libcuda.so.1")
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count

    def check(self, status, what):
        if status != 0:
            raise RuntimeError(f"{what}: CUDA driver error {status}")

    def function(self, path, entry, pdl=False):
        module = ctypes.c_void_p()
        text = open(path, "rb").read()
        text = (with_pdl(text) if pdl else text) + b"\0"
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

    def launch(self, f, out, inputs, n, grid, pdl=False):
        values = [ctypes.c_uint64(t.data_ptr()) for t in [out, *inputs]] + [ctypes.c_uint64(n)]
        params = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in values])
        # The current stream: a graph capture runs on its own.
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        if not pdl:
            self.check(self.cu.cuLaunchKernel(f, grid, 1, 1, BLOCK, 1, 1, 0, stream, params, None), "launch")
            return
        attr = LaunchAttribute(id=PROGRAMMATIC_STREAM_SERIALIZATION, value=1)
        config = LaunchConfig((grid, 1, 1), (BLOCK, 1, 1), 0, stream, ctypes.pointer(attr), 1)
        self.check(self.cu.cuLaunchKernelEx(ctypes.byref(config), f, params, None), "launch (PDL)")


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
    ap.add_argument("--launch", default="stream", help="stream, graph, pdl, pdl-graph (see above)")
    args = ap.parse_args()
    modes = args.launch.split(",")
    graphs = any(m.endswith("graph") for m in modes)
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
            for mode in modes:
                pdl = mode.startswith("pdl")
                f = driver.function(p, name + "_contig", pdl)
                for g in args.grids.split(","):
                    label = v if args.grids == "rt" else f"{v}@{g}"
                    label = label if modes == ["stream"] else f"{label}/{mode}"
                    functions.append((label, f, g, mode))
        for lg in (int(s) for s in args.sizes.split(",")):
            n = 1 << lg
            size = torch.tensor([], dtype=dtype).element_size()
            per_set = n * size * (inputs + 1)
            sets = [[rand(n, dtype, gen) for _ in range(inputs)] for _ in range(n_sets(per_set))]
            outs = [torch.empty(n, device="cuda", dtype=dtype) for _ in sets]

            def us(call, graph=False):
                timer = time_graph if graph else time_call
                return timer(plan, call, len(sets))["median_us"]

            t = {"eager": us(lambda i: fn(*sets[i]))}
            if not args.no_compile:
                if (key, dt) not in compiled:
                    compiled[key, dt] = torch.compile(fn)
                c = compiled[key, dt]
                t["compile"] = us(lambda i: c(*sets[i]))
            srcs = [torch.empty(per_set // 2, dtype=torch.uint8, device="cuda") for _ in sets]
            dsts = [torch.empty_like(x) for x in srcs]
            t["copy"] = us(lambda i: dsts[i].copy_(srcs[i]))
            if graphs:
                t["copy@graph"] = us(lambda i: dsts[i].copy_(srcs[i]), graph=True)
            base = t.get("compile", t["eager"])
            line = (
                f"{name:38s} 2^{lg}  eager {t['eager']:8.1f}  compile {t.get('compile', float('nan')):8.1f}"
                f"  copy {t['copy']:8.1f}"
                + (f"  copy@graph {t['copy@graph']:8.1f}" if graphs else "")
                + " us |"
            )
            reference = fn(*[x.float() for x in sets[0]])
            for variant, f, policy, mode in functions:
                grid = driver.grid(f, policy, n, size)
                pdl = mode.startswith("pdl")
                graph = mode.endswith("graph")
                outs[0].fill_(float("nan"))
                driver.launch(f, outs[0], sets[0], n, grid, pdl)
                torch.cuda.synchronize()
                err = ((outs[0].float() - reference).abs().max() / reference.abs().max()).item()
                v = us(lambda i: driver.launch(f, outs[i], sets[i], n, grid, pdl), graph)
                copy = t["copy@graph" if graph else "copy"]
                line += f" {variant} {v:8.1f} ({base / v:.3f}x, {copy / v:.0%} copy, err {err:.1e})"
            print(line, flush=True)
            del sets, outs, srcs, dsts
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
