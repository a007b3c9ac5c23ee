//! Shared helpers for the GPU integration tests: the one-line skip
//! notice when no GPU is present, and fresh clock-seeded inputs (the seed
//! is printed).

#![allow(dead_code)] // each test binary uses its own subset

use tensorfn_runtime::{shape, Cpu, DType, Tensor};

/// True when at least `n` CUDA devices are present; otherwise prints the
/// one-line skip notice.
pub fn has_gpus(n: usize) -> bool {
    match tensorfn_runtime::cuda_device_count() {
        Ok(found) if found >= n => true,
        Ok(found) => {
            eprintln!("skipping: needs {n} CUDA devices, found {found}");
            false
        }
        Err(e) => {
            eprintln!("skipping: no CUDA device ({e})");
            false
        }
    }
}

/// True when a CUDA device is present; otherwise prints the skip notice.
pub fn has_gpu() -> bool {
    has_gpus(1)
}

/// A seed from the clock, printed so that a failure can be replayed.
pub fn seed() -> u64 {
    let s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    eprintln!("seed {s}");
    s
}

/// Fresh values in `[-100, 100)` (booleans: both values).
pub fn fresh<T: DType>(n: usize) -> Vec<T> {
    Tensor::<Cpu, f64, shape![_]>::rand_dims(seed(), &[n])
        .unwrap()
        .to_vec()
        .unwrap()
        .into_iter()
        .map(|u| T::from_f64(u * 200.0 - 100.0))
        .collect()
}
