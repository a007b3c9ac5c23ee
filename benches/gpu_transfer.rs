//! Host ↔ device copies of 16 MiB to 1 GiB.
//!
//! - `h2d`: a pinned host tensor (`Tensor::pin`) to the device with
//!   `to_device::<Cuda>()`: one DMA, no staging copy.
//! - `d2h`: a device tensor into an existing pinned host tensor with
//!   `to_cpu_into`.
//! - `h2d_pageable`, `d2h_pageable`: the same from and into ordinary
//!   (pageable) host tensors, as a user holds them without pinning; the
//!   download reuses its destination, like PyTorch's `pageable.copy_(dev)`.
//! - `d2h_alloc`: `to_cpu()`, which allocates a fresh host tensor each time
//!   (no PyTorch counterpart; shows the cost of touching new pages).
//!
//! Compare with `scripts/torch_baseline.py` (the same case names: pinned
//! copies for `h2d`/`d2h`, pageable ones for `*_pageable`) through
//! `scripts/bench-report`. Run: `cargo bench --bench gpu_transfer -- --quick`.

mod common;

use common::*;
use tensorfn::prelude::*;

type HostVector = Tensor<Cpu, f32, shape![_]>;
type DeviceVector = Tensor<Cuda, f32, shape![_]>;

fn sizes_mib(args: &Args) -> Vec<usize> {
    if args.quick {
        vec![16, 256]
    } else {
        vec![16, 64, 256, 1024]
    }
}

/// The tensors of one size: pageable and pinned host copies of the same
/// random data, the data on the device, and pinned and pageable
/// destinations for downloads.
struct Setup {
    data: Vec<f32>,
    pageable: HostVector,
    pinned: HostVector,
    dev: DeviceVector,
    pinned_out: HostVector,
    pageable_out: HostVector,
}

fn setup(n: usize, seed: u64) -> Result<Setup> {
    let data = random_vec::<f32>(n, seed, -2.0, 2.0);
    let pageable = HostVector::from_vec_dims(data.clone(), &[n])?;
    let pinned = pageable.pin()?;
    let dev = pageable.to_device::<Cuda>()?;
    let pinned_out = HostVector::zeros_pinned_dims(&[n])?;
    let pageable_out = HostVector::zeros_dims(&[n])?;
    Ok(Setup {
        data,
        pageable,
        pinned,
        dev,
        pinned_out,
        pageable_out,
    })
}

/// Every element of `got` must equal the data (a copy changes no bit).
fn exact(got: &HostVector, data: &[f32]) -> Result<Check> {
    let got = got.to_vec()?;
    Ok(check_pairs(
        got.iter().zip(data).map(|(g, w)| (*g as f64, *w as f64)),
        0.0,
    ))
}

fn bench_size(args: &Args, mib: usize) {
    let plan = args.plan();
    let n = (mib << 20) / 4;
    let bytes = (mib << 20) as u64;
    let cases = ["h2d", "d2h", "h2d_pageable", "d2h_pageable", "d2h_alloc"]
        .map(|name| (name, Case::new(name, "f32", n, bytes, 0)));
    let mut s = match setup(n, mib as u64) {
        Ok(s) => s,
        Err(e) => {
            for (_, c) in &cases {
                c.emit_error("tensorfn", &e);
            }
            return;
        }
    };
    for (name, case) in &cases {
        if !args.wants(name) {
            continue;
        }
        // Each case's result is checked once after timing, bit for bit.
        let outcome = (|| -> Result<(Timing, Check)> {
            match *name {
                "h2d" | "h2d_pageable" => {
                    let src = if *name == "h2d" {
                        &s.pinned
                    } else {
                        &s.pageable
                    };
                    let t = time_call(&plan, 1, |_| src.to_device::<Cuda>().map(drop), &sync_cuda)?;
                    let check = exact(&src.to_device::<Cuda>()?.to_cpu()?, &s.data)?;
                    Ok((t, check))
                }
                "d2h" | "d2h_pageable" => {
                    let (dev, out) = if *name == "d2h" {
                        (&s.dev, &mut s.pinned_out)
                    } else {
                        (&s.dev, &mut s.pageable_out)
                    };
                    let t = time_call(&plan, 1, |_| dev.to_cpu_into(out), &sync_cuda)?;
                    Ok((t, exact(out, &s.data)?))
                }
                _ => {
                    let t = time_call(&plan, 1, |_| s.dev.to_cpu().map(drop), &sync_cuda)?;
                    Ok((t, exact(&s.dev.to_cpu()?, &s.data)?))
                }
            }
        })();
        match outcome {
            Ok((t, check)) => case.emit("tensorfn", &t, Some(check)),
            Err(e) => case.emit_error("tensorfn", &e),
        }
    }
}

fn main() {
    let args = Args::parse();
    emit_meta("gpu_transfer", &args);
    if let Err(e) = sync_cuda() {
        emit_skipped("gpu_transfer", &e);
        return;
    }
    for mib in sizes_mib(&args) {
        bench_size(&args, mib);
    }
}
