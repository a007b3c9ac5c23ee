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
use tensorfn::Device;

const BATCH: usize = 4;

/// The model, written once and compiled for each device below.
macro_rules! mlp_on {
    ($device:ident) => {
        tensor_fn! {
            /// Class probabilities of a batch of 784-pixel images:
            /// `softmax(relu(x @ w1 + b1) @ w2 + b2)`.
            pub fn mlp<const B: usize>(
                x: &Tensor<$device, f32, [B, 784]>,
                w1: &Tensor<$device, f32, [784, 128]>,
                b1: &Tensor<$device, f32, [128]>,
                w2: &Tensor<$device, f32, [128, 10]>,
                b2: &Tensor<$device, f32, [10]>,
            ) -> Tensor<$device, f32, [B, 10]> {
                let hidden = relu(addmm(b1, x, w1));
                // `addmm(b1, hidden, w2)` would not compile: "`addmm` cannot
                // broadcast `b1` [128] to the result shape [B, 10]".
                addmm(b2, hidden, w2).softmax(1)
            }
        }
    };
}

mod cpu {
    use super::*;
    mlp_on!(Cpu);
}

mod gpu {
    use super::*;
    mlp_on!(Cuda);
}

/// The weights on device `D`.
pub struct Weights<D: Device> {
    w1: Tensor<D, f32, shape![784, 128]>,
    b1: Tensor<D, f32, shape![128]>,
    w2: Tensor<D, f32, shape![128, 10]>,
    b2: Tensor<D, f32, shape![10]>,
}

impl<D: Device> Weights<D> {
    /// Random weights scaled like PyTorch's default `nn.Linear` init,
    /// drawn on the host and moved to `D`.
    pub fn random(seed: u64) -> Result<Self> {
        let (s1, s2) = (1.0 / 784f32.sqrt(), 1.0 / 128f32.sqrt());
        Ok(Weights {
            w1: Tensor::<Cpu, f32, _>::randn(seed)?
                .mul_scalar(s1)?
                .to_device()?,
            b1: Tensor::<Cpu, f32, _>::randn(seed + 1)?
                .mul_scalar(s1)?
                .to_device()?,
            w2: Tensor::<Cpu, f32, _>::randn(seed + 2)?
                .mul_scalar(s2)?
                .to_device()?,
            b2: Tensor::<Cpu, f32, _>::randn(seed + 3)?
                .mul_scalar(s2)?
                .to_device()?,
        })
    }
}

/// A device with a compiled `mlp`: how generic code picks `cpu::mlp` or
/// `gpu::mlp` from the device type.
pub trait Mlp: Device {
    /// Sets aside the memory `mlp` needs for a batch of `B`, once, so a
    /// loop of forward passes never waits for the driver to allocate.
    fn reserve<const B: usize>() -> Result<()> {
        Ok(())
    }

    /// Runs the model on a batch.
    fn forward<const B: usize>(
        x: &Tensor<Self, f32, shape![B, 784]>,
        w: &Weights<Self>,
    ) -> Result<Tensor<Self, f32, shape![B, 10]>>;
}

impl Mlp for Cpu {
    fn forward<const B: usize>(
        x: &Tensor<Cpu, f32, shape![B, 784]>,
        w: &Weights<Cpu>,
    ) -> Result<Tensor<Cpu, f32, shape![B, 10]>> {
        cpu::mlp(x, &w.w1, &w.b1, &w.w2, &w.b2)
    }
}

impl Mlp for Cuda {
    fn reserve<const B: usize>() -> Result<()> {
        // The macro's static memory plan, plus a margin for the allocator's
        // 512-byte grain.
        tensorfn::cuda_reserve(0, gpu::mlp::peak_bytes::<B>() + (1 << 20))
    }

    fn forward<const B: usize>(
        x: &Tensor<Cuda, f32, shape![B, 784]>,
        w: &Weights<Cuda>,
    ) -> Result<Tensor<Cuda, f32, shape![B, 10]>> {
        gpu::mlp(x, &w.w1, &w.b1, &w.w2, &w.b2)
    }
}

/// Builds the model and a batch on `D`, runs it, prints the predictions
/// and checks them against an f64 computation on the host.
pub fn run<D: Mlp>() -> AnyResult {
    let seed = seed();
    let weights = Weights::<D>::random(seed)?;
    let x = Tensor::<Cpu, f32, shape![BATCH, 784]>::rand(seed + 4)?.to_device::<D>()?;

    D::reserve::<BATCH>()?;
    let probs = D::forward(&x, &weights)?;
    let classes = probs.argmax::<1>()?;
    println!("class probabilities on {}:\n{probs}", probs.device());
    println!("predicted classes: {:?}", classes.to_vec()?);

    let want = reference(&weights, &to_f64(&x)?)?;
    check_close("probabilities", &to_f64(&probs)?, &want, 1e-4, 1e-6)
}

/// The same forward pass in f64 on the host.
fn reference<D: Device>(w: &Weights<D>, x: &[f64]) -> Result<Vec<f64>> {
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
