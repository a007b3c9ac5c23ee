//! Helpers shared by the compile-and-run cases.

use tensorfn::prelude::*;
use tensorfn::{DType, Device, Shape};

/// The elements as f64.
pub fn f64s<D: Device, T: DType, S: Shape>(t: &Tensor<D, T, S>) -> Vec<f64> {
    t.to_vec()
        .expect("readable")
        .iter()
        .map(|v| v.to_f64())
        .collect()
}

/// Asserts elementwise closeness to an f64 reference.
pub fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let scale = 1.0f64.max(w.abs());
        assert!(
            (g - w).abs() <= tol * scale,
            "{what}[{i}]: got {g}, want {w}"
        );
    }
}

/// Row-major matrix product of an [m, k] and a [k, n] in f64.
pub fn matmul_ref(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
        }
    }
    out
}

/// Runs `f` with the tensor moved to cuda:0, or says why it cannot.
pub fn on_gpu<T: DType, S: Shape>(x: &Tensor<Cpu, T, S>) -> Option<Tensor<Cuda, T, S>> {
    match x.to_device::<Cuda>() {
        Ok(g) => Some(g),
        Err(Error::CudaUnavailable { .. }) => None,
        Err(e) => panic!("unexpected error moving to the GPU: {e}"),
    }
}
