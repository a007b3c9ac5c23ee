//! GPU throughput of the CUDA backend: transfers through the pinned
//! staging buffers, elementwise and strided-copy kernels, cuBLAS products
//! per dtype, launch overhead and the caching allocator. Prints one table;
//! `scripts/torch_cuda_baseline.py` measures the same in PyTorch.
//!
//! Run with `cargo bench -p tensorfn-runtime --bench cuda` on a GPU
//! machine (or from the bundle, see DEVELOPERS.md). Without a GPU it says
//! so and exits.

use std::time::Instant;
use tensorfn_runtime::{
    bf16, cuda_memory_stats, f16, set_allow_tf32, shape, Cpu, Cuda, FloatDType, Result, Tensor,
};

type M2 = shape![_, _];

/// Waits for the stream by reading one element back.
fn sync<T: FloatDType>(t: &Tensor<Cuda, T, M2>) -> Result<()> {
    t.index::<0>(0)?.index::<0>(0)?.item().map(|_| ())
}

/// Median seconds of `reps` timed runs of `f` after `warm` untimed ones.
fn time(warm: usize, reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..warm {
        f()?;
    }
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let s = Instant::now();
            f().map(|_| s.elapsed().as_secs_f64())
        })
        .collect::<Result<_>>()?;
    t.sort_by(f64::total_cmp);
    Ok(t[t.len() / 2])
}

fn row(what: &str, value: f64, unit: &str, note: &str) {
    println!("{what:<44} {value:>10.2} {unit:<8} {note}");
}

fn matmul_rate<T: FloatDType>(name: &str, n: usize, note: &str) -> Result<()> {
    let a = Tensor::<Cpu, T, M2>::randn_dims(1, &[n, n])?.to_device::<Cuda>()?;
    let b = Tensor::<Cpu, T, M2>::randn_dims(2, &[n, n])?.to_device::<Cuda>()?;
    let reps = 10;
    let s = time(2, 5, || {
        let mut last = None;
        for _ in 0..reps {
            last = Some(a.matmul(&b)?);
        }
        sync(&last.expect("reps > 0"))
    })?;
    let flops = 2.0 * (n as f64).powi(3) * reps as f64;
    row(
        &format!("matmul {name} {n}x{n}x{n}"),
        flops / s / 1e12,
        "TFLOP/s",
        note,
    );
    Ok(())
}

fn main() -> Result<()> {
    if let Err(e) = tensorfn_runtime::cuda_device_count() {
        println!("skipping the CUDA benchmarks: no CUDA device ({e})");
        return Ok(());
    }
    println!("{:<44} {:>10} {:<8} note", "what", "value", "unit");

    // Transfers: 256 MiB of f32 through the pinned staging buffers.
    let n = 64 << 20;
    let host = Tensor::<Cpu, f32, M2>::rand_dims(3, &[n / 1024, 1024])?;
    let bytes = (n * 4) as f64;
    let mut dev = host.to_device::<Cuda>()?;
    let up = time(1, 5, || {
        dev = host.to_device::<Cuda>()?;
        sync(&dev)
    })?;
    row(
        "upload 256 MiB (host -> GPU)",
        bytes / up / 1e9,
        "GB/s",
        "pageable source, pinned staging",
    );
    let down = time(1, 5, || dev.to_vec().map(|_| ()))?;
    row(
        "download 256 MiB (GPU -> host)",
        bytes / down / 1e9,
        "GB/s",
        "to_vec",
    );

    // Elementwise and strided copies, bytes read + written.
    let other = Tensor::<Cpu, f32, M2>::rand_dims(4, &[n / 1024, 1024])?.to_device::<Cuda>()?;
    let add = time(3, 10, || sync(&dev.add(&other)?))?;
    row(
        "add f32, 64 Mi elements",
        3.0 * bytes / add / 1e9,
        "GB/s",
        "contiguous entry",
    );
    let sq = Tensor::<Cpu, f32, M2>::rand_dims(5, &[8192, 8192])?.to_device::<Cuda>()?;
    let tr = time(3, 10, || sync(&sq.t()?.contiguous()?))?;
    row(
        "contiguous() of a transposed 8192^2 f32",
        2.0 * 8192.0 * 8192.0 * 4.0 / tr / 1e9,
        "GB/s",
        "strided copy kernel",
    );
    let ex = time(3, 10, || sync(&dev.exp()?))?;
    row(
        "exp f32, 64 Mi elements",
        2.0 * bytes / ex / 1e9,
        "GB/s",
        "",
    );
    let sm = time(3, 10, || sync(&sq.softmax::<1>()?))?;
    row(
        "softmax f32 8192x8192 along rows",
        2.0 * 8192.0 * 8192.0 * 4.0 / sm / 1e9,
        "GB/s",
        "row kernel",
    );
    let rs = time(3, 10, || sq.sum::<1>()?.index::<0>(0)?.item().map(|_| ()))?;
    row(
        "sum f32 8192x8192 along rows",
        8192.0 * 8192.0 * 4.0 / rs / 1e9,
        "GB/s",
        "row kernel",
    );

    // Products.
    matmul_rate::<f32>("f32", 4096, "exact f32 (no TF32)")?;
    set_allow_tf32(true);
    matmul_rate::<f32>("f32", 4096, "set_allow_tf32(true)")?;
    set_allow_tf32(false);
    matmul_rate::<f16>("f16", 4096, "f32 accumulation")?;
    matmul_rate::<bf16>("bf16", 4096, "f32 accumulation")?;
    matmul_rate::<bf16>("bf16", 8192, "f32 accumulation")?;
    matmul_rate::<f64>("f64", 2048, "")?;
    let x = Tensor::<Cpu, f16, M2>::randn_dims(6, &[4096, 4096])?.to_device::<Cuda>()?;
    let w = Tensor::<Cpu, f16, M2>::randn_dims(7, &[4096, 4096])?.to_device::<Cuda>()?;
    let bias = Tensor::<Cpu, f16, shape![_]>::randn_dims(8, &[4096])?.to_device::<Cuda>()?;
    let fused = time(2, 10, || sync(&Tensor::addmm_relu(&bias, &x, &w)?))?;
    let plain = time(2, 10, || sync(&Tensor::addmm(&bias, &x, &w)?.relu()?))?;
    let flops = 2.0 * 4096f64.powi(3);
    row(
        "addmm_relu f16 4096^3 (cuBLASLt epilogue)",
        flops / fused / 1e12,
        "TFLOP/s",
        "one call",
    );
    row(
        "addmm + relu f16 4096^3",
        flops / plain / 1e12,
        "TFLOP/s",
        "product, then a kernel",
    );

    // Launch overhead and the allocator in a steady state.
    let small = Tensor::<Cpu, f32, M2>::rand_dims(9, &[32, 32])?.to_device::<Cuda>()?;
    let before = cuda_memory_stats(0)?;
    let k = 1000;
    let s = time(1, 5, || {
        let mut y = small.clone();
        for _ in 0..k {
            y = y.add(&small)?;
        }
        sync(&y)
    })?;
    let after = cuda_memory_stats(0)?;
    row(
        "small add (32x32) incl. allocation",
        s / k as f64 * 1e6,
        "us/op",
        "",
    );
    row(
        "cuMemAlloc calls during those 6000 adds",
        (after.device_allocations - before.device_allocations) as f64,
        "calls",
        "caching allocator",
    );
    println!(
        "memory: {:.1} MiB in tensors, {:.1} MiB cached, peak {:.1} MiB",
        after.allocated_bytes as f64 / 1048576.0,
        after.cached_bytes as f64 / 1048576.0,
        after.peak_allocated_bytes as f64 / 1048576.0
    );
    Ok(())
}
