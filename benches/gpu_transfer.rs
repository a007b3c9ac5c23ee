//! Host ↔ device copies of 16 MiB to 1 GiB: `to_device::<Cuda>()` of a
//! host tensor and `to_cpu()` of a device one, from and into ordinary
//! (pageable) host memory as a user holds it.
//!
//! Compare with `scripts/torch_baseline.py` (cases `h2d`, `d2h`: PyTorch
//! copies from and into pinned memory, and pageable for reference) through
//! `scripts/bench-report`. Run: `cargo bench --bench gpu_transfer -- --quick`.

mod common;

use common::*;
use tensorfn::prelude::*;

type HostVector = Tensor<Cpu, f32, shape![_]>;

fn sizes_mib(args: &Args) -> Vec<usize> {
    if args.quick {
        vec![16, 256]
    } else {
        vec![16, 64, 256, 1024]
    }
}

fn bench_size(args: &Args, mib: usize) {
    let plan = args.plan();
    let n = (mib << 20) / 4;
    let h2d = Case::new("h2d", "f32", n, (mib << 20) as u64, 0);
    let d2h = Case::new("d2h", "f32", n, (mib << 20) as u64, 0);
    let data = random_vec::<f32>(n, mib as u64, -2.0, 2.0);
    let host = match HostVector::from_vec_dims(data.clone(), &[n]) {
        Ok(h) => h,
        Err(e) => return h2d.emit_error("tensorfn", &e),
    };
    let dev = match host.to_device::<Cuda>() {
        Ok(d) => d,
        Err(e) => {
            h2d.emit_error("tensorfn", &e);
            return d2h.emit_error("tensorfn", &e);
        }
    };
    // A round trip must give back the same bits.
    let check = || -> Result<Check> {
        let back = dev.to_cpu()?.to_vec()?;
        Ok(check_pairs(
            back.iter().zip(&data).map(|(g, w)| (*g as f64, *w as f64)),
            0.0,
        ))
    };
    let check = match check() {
        Ok(c) => c,
        Err(e) => {
            h2d.emit_error("tensorfn", &e);
            return d2h.emit_error("tensorfn", &e);
        }
    };
    if args.wants("h2d") {
        match time_call(&plan, 1, |_| host.to_device::<Cuda>().map(drop), &sync_cuda) {
            Ok(t) => h2d.emit("tensorfn", &t, Some(check)),
            Err(e) => h2d.emit_error("tensorfn", &e),
        }
    }
    if args.wants("d2h") {
        match time_call(&plan, 1, |_| dev.to_cpu().map(drop), &sync_cuda) {
            Ok(t) => d2h.emit("tensorfn", &t, Some(check)),
            Err(e) => d2h.emit_error("tensorfn", &e),
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
