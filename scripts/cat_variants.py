#!/usr/bin/env python3
"""Times tensorfn's `cat` kernel against `torch.cat`, over launch shapes.

Loads the row-block concatenation entry (`tf_cat_rows_16b` and the
narrower units, as `tensorfn-ptx DIR` writes them) with the CUDA driver
API and times it beside `torch.cat(..., dim=1)` (into a new tensor, as
the benchmark does, and into a preallocated one with `out=`) and a
device-to-device copy of the same bytes, in one process, checking each
variant's output against `torch.cat`'s, for the benchmark's cases: `cat`
of 2 and 8 inputs into 4096 x 2048 (and, without `--quick`,
4096 x 16384), f32 and bf16.

    python3 scripts/cat_variants.py DIR [DIR ...] [--grids rt,132,264]
        [--blocks 256,512] [--swap] [--quick]

`--grids`: blocks per input along the kernel's x dimension: `rt` (the
runtime's rule, `stride_grid` in runtime/src/cuda/launch.rs) or a number;
`--blocks`: threads per block (256 in the runtime).
`--swap` also runs each variant with the grid's axes exchanged (the
entry's `%ctaid.x`/`%ctaid.y` swapped in its text), so that consecutive
blocks copy different inputs. Inputs, their rotation beyond the L2 cache
and the timing are those of `torch_baseline.py`. Each launch goes through
`ctypes` (a few microseconds of host time), so cases of about 10 us are
bound by the host here; the benchmark (`benches/gpu_ops.rs`) times them.
"""

import argparse
import ctypes
import glob
import os

import torch

from kernel_variants import BLOCK, Driver
from torch_baseline import DTYPES, Plan, n_sets, rand, time_call

PARTS = 8  # inputs one launch takes (CAT_PARTS)
UNITS = [16, 8, 4, 2, 1]


def swapped(text):
    """The entry with its grid's x and y axes exchanged."""
    marks = {"%ctaid.x": "@CX", "%ctaid.y": "@CY", "%nctaid.x": "@NX", "%nctaid.y": "@NY"}
    for k, v in marks.items():
        text = text.replace(k, v)
    for k, v in {"@CX": "%ctaid.y", "@CY": "%ctaid.x", "@NX": "%nctaid.y", "@NY": "%nctaid.x"}.items():
        text = text.replace(k, v)
    return text


def load(driver, text, entry):
    module = ctypes.c_void_p()
    buf = ctypes.c_char_p(text.encode() + b"\0")
    driver.check(driver.cu.cuModuleLoadData(ctypes.byref(module), buf), "loading")
    f = ctypes.c_void_p()
    driver.check(driver.cu.cuModuleGetFunction(ctypes.byref(f), module, entry.encode()), entry)
    return f


def entry_file(d, unit):
    hits = glob.glob(os.path.join(d, f"tf_cat_rows_{unit}b.ptx"))
    return hits[0] if hits else None


def params(out, ins, rows, row_units, unit):
    """The entry's parameters for one launch, built once: building them
    per call would dominate the time of the smaller cases."""
    values = [out.data_ptr(), rows, row_units]
    offset = 0
    for t in ins:
        inner = t.shape[1] * t.element_size() // unit
        values += [t.data_ptr(), inner, offset]
        offset += inner
    values += [0] * (3 + 3 * PARTS - len(values))
    cvals = [ctypes.c_uint64(v) for v in values]
    array = (ctypes.c_void_p * len(cvals))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in cvals])
    return cvals, array


def launch(driver, f, prepared, parts, gx, swap, block=BLOCK):
    grid = (parts, gx) if swap else (gx, parts)
    driver.check(
        driver.cu.cuLaunchKernel(f, grid[0], grid[1], 1, block, 1, 1, 0, driver.stream, prepared[1], None),
        "launch",
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+", help="one directory of PTX files per variant")
    ap.add_argument("--grids", default="rt", help="blocks per input along x: rt or N, comma-separated")
    ap.add_argument("--swap", action="store_true", help="also run with the grid's axes exchanged")
    ap.add_argument("--blocks", default=str(BLOCK), help="threads per block to try, comma-separated")
    ap.add_argument("--quick", action="store_true", help="fewer and shorter batches, one size")
    args = ap.parse_args()
    plan = Plan(args.quick)
    driver = Driver()
    gen = torch.Generator(device="cuda").manual_seed(1)
    shapes = [(4096, 2048)] if args.quick else [(4096, 2048), (4096, 16384)]
    for parts in (2, 8):
        for dname in ("f32", "bf16"):
            dt = DTYPES[dname]
            es = torch.empty((), dtype=dt).element_size()
            for rows, cols in shapes:
                w = cols // parts
                unit = next(u for u in UNITS if (w * es) % u == 0)
                sets = n_sets(rows * cols * es)
                ins = [[rand((rows, w), dt, gen) for _ in range(parts)] for _ in range(sets)]
                outs = [torch.empty((rows, cols), dtype=dt, device="cuda") for _ in range(sets)]

                def us(call):
                    return time_call(plan, call, sets)["median_us"]

                t_eager = us(lambda i: torch.cat(ins[i], dim=1))
                t_out = us(lambda i: torch.cat(ins[i], dim=1, out=outs[i]))
                src = torch.empty(rows * cols * es, dtype=torch.uint8, device="cuda")
                dst = torch.empty_like(src)
                t_copy = us(lambda i: dst.copy_(src))
                line = f"cat{parts} {dname} {rows}x{cols}  eager {t_eager:7.1f}  into out= {t_out:7.1f}  copy {t_copy:7.1f} us |"
                want = torch.cat(ins[0], dim=1)
                units = w * es // unit
                prepared = [params(outs[i], ins[i], rows, cols * es // unit, unit) for i in range(sets)]
                for d in args.dirs:
                    path = entry_file(d, unit)
                    if path is None:
                        continue
                    text = open(path).read()
                    entry = text.split(".entry ")[1].split("(")[0].strip()
                    for swap in [False, True] if args.swap else [False]:
                        f = load(driver, swapped(text) if swap else text, entry)
                        for g, block in ((g, int(b)) for g in args.grids.split(",") for b in args.blocks.split(",")):
                            gx = (
                                max(1, min(-(-units * rows // (block * 2)), -(-driver.sms * 128 // parts)))
                                if g == "rt"
                                else int(g)
                            )
                            outs[0].zero_()
                            launch(driver, f, prepared[0], parts, gx, swap, block)
                            torch.cuda.synchronize()
                            ok = torch.equal(outs[0], want)
                            v = us(lambda i: launch(driver, f, prepared[i], parts, gx, swap, block))
                            label = f"{os.path.basename(d.rstrip('/'))}@{g}x{block}{'/swap' if swap else ''}"
                            line += f" {label} {v:7.1f} ({t_eager / v:.3f}x{'' if ok else ' WRONG'})"
                print(line, flush=True)
                del ins, outs, src, dst
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
