//! `all_reduce` bandwidth over every GPU of the machine (1 to 8), one
//! process: the sum of an f32 and a bf16 buffer of 1 MiB to 1 GiB per GPU,
//! in place, each call waited on (as a data-parallel step waits for its
//! gradient buckets). Prints nccl-tests' two figures:
//!
//! - algbw = bytes per GPU / time;
//! - busbw = algbw × 2(n − 1)/n, the bytes each GPU's link carries in a
//!   ring all-reduce over n GPUs (0 for one GPU: nothing leaves it).
//!
//! `scripts/torch_allreduce.py` measures the same with `torch.distributed`
//! (NCCL, one process per GPU) and prints the same table. NVLink multicast
//! stays off (`NCCL_NVLS_ENABLE=0`) in both. Run:
//! `cargo bench --bench gpu_allreduce -- --quick`.

mod common;

use common::*;
use std::time::Instant;
use tensorfn::collective::{Comm, ReduceOp};
use tensorfn::prelude::*;
use tensorfn::DType;

fn sizes_mib(args: &Args) -> Vec<usize> {
    if args.quick {
        vec![1, 16, 256]
    } else {
        vec![1, 4, 16, 64, 256, 1024]
    }
}

/// Calls per size: about 2 GiB of traffic, between 5 and 50.
fn iters(bytes: usize) -> usize {
    ((2usize << 30) / bytes).clamp(5, 50)
}

fn row(dtype: &str, bytes: usize, secs: f64, n: usize) {
    let algbw = bytes as f64 / secs / 1e9;
    let busbw = algbw * 2.0 * (n as f64 - 1.0) / n as f64;
    println!(
        "{:<10} {:<10} {:<5} {:>10} {:>12.1} {:>11.2} {:>11.2} {:>5}",
        "tensorfn",
        "all_reduce",
        dtype,
        bytes,
        secs * 1e6,
        algbw,
        busbw,
        n
    );
}

macro_rules! group_bench {
    ($args:expr, $($o:literal),+) => {{
        type G = ($(Cuda<$o>,)+);
        fn one<T: DType>(comm: &Comm<G>, bytes: usize) -> Result<f64> {
            let n = bytes / std::mem::size_of::<T>();
            let mut x = ($(Tensor::<Cuda<$o>, T, shape![_]>::ones_dims(&[n])?,)+);
            for _ in 0..3 {
                comm.all_reduce_(&mut x, ReduceOp::Sum)?;
            }
            let k = iters(bytes);
            let start = Instant::now();
            for _ in 0..k {
                comm.all_reduce_(&mut x, ReduceOp::Sum)?;
            }
            Ok(start.elapsed().as_secs_f64() / k as f64)
        }
        let comm = Comm::<G>::new()?;
        let n = [$($o),+].len();
        for mib in sizes_mib($args) {
            let bytes = mib << 20;
            if $args.wants("f32") {
                row("f32", bytes, one::<f32>(&comm, bytes)?, n);
            }
            if $args.wants("bf16") {
                row("bf16", bytes, one::<bf16>(&comm, bytes)?, n);
            }
        }
        Ok(())
    }};
}

fn run(args: &Args, gpus: usize) -> Result<()> {
    match gpus {
        1 => group_bench!(args, 0),
        2 => group_bench!(args, 0, 1),
        3 => group_bench!(args, 0, 1, 2),
        4 => group_bench!(args, 0, 1, 2, 3),
        5 => group_bench!(args, 0, 1, 2, 3, 4),
        6 => group_bench!(args, 0, 1, 2, 3, 4, 5),
        7 => group_bench!(args, 0, 1, 2, 3, 4, 5, 6),
        _ => group_bench!(args, 0, 1, 2, 3, 4, 5, 6, 7),
    }
}

fn main() {
    let args = Args::parse();
    let gpus = match tensorfn::cuda_device_count() {
        Ok(n) if n > 0 => n.min(8),
        _ => {
            println!("skipping: no GPU");
            return;
        }
    };
    println!(
        "{:<10} {:<10} {:<5} {:>10} {:>12} {:>11} {:>11} {:>5}",
        "impl", "collective", "dtype", "bytes", "time_us", "algbw_GB/s", "busbw_GB/s", "gpus"
    );
    match run(&args, gpus) {
        Ok(()) => {}
        Err(tensorfn::Error::NcclUnavailable { reason }) => {
            println!("skipping: no NCCL ({reason})")
        }
        Err(e) => {
            eprintln!("gpu_allreduce: {e}");
            std::process::exit(1);
        }
    }
}
