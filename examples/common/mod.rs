//! Shared by the examples: choosing the device, fresh seeds and checking
//! results against f64 references computed on the host.

#![allow(dead_code)] // each example uses a part of it

pub mod generate;
pub mod hf_gpt2;

use tensorfn::prelude::*;
use tensorfn::{DType, Device, Shape};

/// Any error an example can meet: tensorfn's, I/O, a failed check.
pub type AnyResult<T = ()> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// True when cuda:0 answers. Without a GPU (no driver, no device) prints a
/// one-line notice and returns false; any other error is returned.
pub fn gpu_available() -> Result<bool> {
    match Tensor::<Cpu, f32, shape![1]>::zeros()?.to_device::<Cuda>() {
        Ok(_) => Ok(true),
        Err(Error::CudaUnavailable { reason }) => {
            println!("note: no usable GPU ({reason}); running on the CPU");
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// Runs `gpu` on cuda:0 when present, else `cpu`. The two are usually the
/// same generic function: `on_best_device(run::<Cuda>, run::<Cpu>)`.
pub fn on_best_device(
    gpu: impl FnOnce() -> AnyResult,
    cpu: impl FnOnce() -> AnyResult,
) -> AnyResult {
    if gpu_available()? {
        println!("running on cuda:0");
        gpu()
    } else {
        cpu()
    }
}

/// A seed for this run: `SEED` from the environment to replay one, else
/// the clock. Printed so that any run can be repeated.
pub fn seed() -> u64 {
    let seed = std::env::var("SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    println!("seed {seed} (SEED={seed} replays this run)");
    seed
}

/// The elements of any tensor as f64, row-major (downloaded from a GPU).
pub fn to_f64<D: Device, T: DType, S: Shape>(t: &Tensor<D, T, S>) -> Result<Vec<f64>> {
    Ok(t.to_vec()?.into_iter().map(DType::to_f64).collect())
}

/// `a [m, k] @ b [k, n]` in f64, row-major.
pub fn matmul_f64(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for p in 0..k {
            let x = a[i * k + p];
            for j in 0..n {
                out[i * n + j] += x * b[p * n + j];
            }
        }
    }
    out
}

/// Entries `(i, j)` of the product `a [m, k] @ b [k, n]` in f64: a sample
/// check of a product too large to recompute whole on the host.
pub fn matmul_entries_f64(
    a: &[f64],
    b: &[f64],
    k: usize,
    n: usize,
    at: &[(usize, usize)],
) -> Vec<f64> {
    at.iter()
        .map(|&(i, j)| (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum())
        .collect()
}

/// Checks `|got - want| <= atol + rtol * |want|` element by element and
/// reports the worst element when it fails.
pub fn check_close(what: &str, got: &[f64], want: &[f64], rtol: f64, atol: f64) -> AnyResult {
    if got.len() != want.len() {
        return Err(format!("{what}: {} values, expected {}", got.len(), want.len()).into());
    }
    let worst = got
        .iter()
        .zip(want)
        .enumerate()
        .map(|(i, (g, w))| (i, (g - w).abs() / (atol + rtol * w.abs())))
        .fold(
            (0, 0.0f64),
            |a, b| if b.1 > a.1 || b.1.is_nan() { b } else { a },
        );
    if worst.1 > 1.0 || worst.1.is_nan() {
        let i = worst.0;
        return Err(format!(
            "{what}: element {i} is {}, the f64 reference is {} (rtol {rtol}, atol {atol})",
            got[i], want[i]
        )
        .into());
    }
    let (n, verb) = match got.len() {
        1 => ("1 value".to_string(), "matches"),
        n => (format!("{n} values"), "match"),
    };
    println!("  {what}: {n} {verb} the f64 reference");
    Ok(())
}

/// A file of this process in the temp dir (`name` prefixed with the
/// process id), removed when dropped.
pub struct TempFile(pub std::path::PathBuf);

impl TempFile {
    /// The path for `name`; nothing is created.
    pub fn new(name: &str) -> TempFile {
        TempFile(std::env::temp_dir().join(format!("{}-{name}", std::process::id())))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
