//! A two-layer perceptron on a batch of inputs: on the GPU when there is
//! one, else on the CPU.
//!
//! ```sh
//! cargo run --release --example quickstart
//! ```
//!
//! The model is a `tensor_fn!`: the macro checks the device, dtype and
//! shape of every operand at compile time, fuses the elementwise work into
//! kernels, and sends the matrix products to cuBLAS on a GPU. A weight of
//! the wrong shape, a bias left on the CPU or an `f16` input fed to `f32`
//! weights is a compile error naming the operand and the fix.

mod common;

use common::{check_close, matmul_f64, on_best_device, seed, to_f64, AnyResult};
use tensorfn::prelude::*;

const BATCH: usize = 4;

/// The weights, on device `D` in float dtype `T`, named as they are in a
/// safetensors file (`Mlp::<Cpu, f32>::load_safetensors(path)`).
#[derive(Params)]
pub struct Mlp<D: Device, T: Float> {
    pub w1: Tensor<D, T, shape![784, 128]>,
    pub b1: Tensor<D, T, shape![128]>,
    pub w2: Tensor<D, T, shape![128, 10]>,
    pub b2: Tensor<D, T, shape![10]>,
}

tensor_fn! {
    /// Class probabilities of a batch of 784-pixel images:
    /// `softmax(relu(x @ w1 + b1) @ w2 + b2)`, on any device `D` and in any
    /// float dtype `T`.
    pub fn mlp<D: Device, T: Float, const B: usize>(
        x: &Tensor<D, T, [B, 784]>,
        p: &Mlp<D, T>,
    ) -> Tensor<D, T, [B, 10]> {
        let hidden = relu(addmm(p.b1, x, p.w1));
        // `addmm(p.b1, hidden, p.w2)` would not compile: "`addmm` cannot
        // broadcast `p.b1` [128] to the result shape [B, 10]".
        addmm(p.b2, hidden, p.w2).softmax(1)
    }
}

impl Mlp<Cpu, f32> {
    /// Random weights scaled like PyTorch's default `nn.Linear` init.
    pub fn random(seed: u64) -> Result<Self> {
        let (s1, s2) = (1.0 / 784f32.sqrt(), 1.0 / 128f32.sqrt());
        Ok(Mlp {
            w1: Tensor::randn(seed)?.mul_scalar(s1)?,
            b1: Tensor::randn(seed + 1)?.mul_scalar(s1)?,
            w2: Tensor::randn(seed + 2)?.mul_scalar(s2)?,
            b2: Tensor::randn(seed + 3)?.mul_scalar(s2)?,
        })
    }
}

/// Builds the model and a batch on `D`, runs it, prints the predictions
/// and checks them against an f64 computation on the host.
pub fn run<D: Device>() -> AnyResult {
    let seed = seed();
    let weights = Mlp::random(seed)?.to_device::<D>()?;
    let x = Tensor::<Cpu, f32, shape![BATCH, 784]>::rand(seed + 4)?.to_device::<D>()?;

    // The macro's static memory plan, plus a margin for the allocator's
    // 512-byte grain: a loop of forward passes never waits for the driver.
    tensorfn::reserve::<D>(mlp::peak_bytes::<f32, BATCH>() + (1 << 20))?;
    let probs = mlp(&x, &weights)?;
    let classes = probs.argmax::<1>()?;
    println!("class probabilities on {}:\n{probs}", probs.device());
    println!("predicted classes: {:?}", classes.to_vec()?);

    let want = reference(&weights, &to_f64(&x)?)?;
    check_close("probabilities", &to_f64(&probs)?, &want, 1e-4, 1e-6)
}

/// The same forward pass in f64 on the host.
fn reference<D: Device>(w: &Mlp<D, f32>, x: &[f64]) -> Result<Vec<f64>> {
    let mut hidden = matmul_f64(x, &to_f64(&w.w1)?, BATCH, 784, 128);
    let b1 = to_f64(&w.b1)?;
    for (i, v) in hidden.iter_mut().enumerate() {
        *v = (*v + b1[i % 128]).max(0.0);
    }
    let mut logits = matmul_f64(&hidden, &to_f64(&w.w2)?, BATCH, 128, 10);
    let b2 = to_f64(&w.b2)?;
    for row in logits.chunks_mut(10) {
        for (v, b) in row.iter_mut().zip(&b2) {
            *v += b;
        }
        let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
        for v in row.iter_mut() {
            *v = (*v - max).exp() / sum;
        }
    }
    Ok(logits)
}

pub fn main() -> AnyResult {
    on_best_device(run::<Cuda>, run::<Cpu>)
}
