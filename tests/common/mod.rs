//! Helpers shared by the integration tests of `tensorfn`: seeded random
//! inputs, tensors made from them, and the parameter structs several
//! `#[grad]` tests differentiate.
#![allow(dead_code)] // each test module uses its own subset

use tensorfn::prelude::*;
use tensorfn::{DType, Shape};

/// `n` uniform values in `lo..hi` from a seeded LCG: the same seed gives
/// the same values on every machine.
pub fn rand_vec(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (s >> 11) as f64 / (1u64 << 53) as f64;
            lo + (hi - lo) * u
        })
        .collect()
}

/// An f64 CPU tensor of shape `S` holding `v`.
pub fn tensor<S: Shape>(v: &[f64]) -> Tensor<Cpu, f64, S> {
    Tensor::from_vec(v.to_vec()).unwrap()
}

/// A CPU tensor of dtype `T` and shape `S` holding `v` rounded to `T`.
pub fn tensor_as<T: DType, S: Shape>(v: &[f64]) -> Tensor<Cpu, T, S> {
    tensor::<S>(v).cast::<T>().unwrap()
}

/// A linear layer `[4] -> [3]`.
#[derive(Params)]
pub struct Lin<D: Device, T: Float> {
    pub w: Tensor<D, T, shape![4, 3]>,
    pub b: Tensor<D, T, shape![3]>,
}

/// A pre-norm residual MLP block of width 8 (hidden 16).
#[derive(Params)]
pub struct Block<D: Device, T: Float> {
    pub ln_w: Tensor<D, T, shape![8]>,
    pub ln_b: Tensor<D, T, shape![8]>,
    pub fc: Tensor<D, T, shape![8, 16]>,
    pub fc_b: Tensor<D, T, shape![16]>,
    pub proj: Tensor<D, T, shape![16, 8]>,
    pub proj_b: Tensor<D, T, shape![8]>,
}

/// A square layer `[4] -> [4]`, for chains of layers.
#[derive(Params)]
pub struct Dense<D: Device, T: Float> {
    pub w: Tensor<D, T, shape![4, 4]>,
    pub b: Tensor<D, T, shape![4]>,
}
