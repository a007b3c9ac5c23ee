//! Inference with weights read from a safetensors file.
//!
//! The example writes a file of random weights (as a training script
//! would), reads it back into typed tensors, checking each one's dtype and
//! shape against the model's types, runs a batch through the model on the
//! GPU when there is one, and checks the outputs against an f64 reference.
//!
//! The layers are stored like PyTorch's `nn.Linear`: `weight` is
//! `[out, in]`, so a layer is `x @ weight.t() + bias`.
//!
//! ```sh
//! cargo run --release --example mlp_inference
//! ```

mod common;

use common::{check_close, on_best_device, seed, to_f64, AnyResult, TempFile};
use tensorfn::prelude::*;

const INPUTS: usize = 64;
const HIDDEN: usize = 32;
const CLASSES: usize = 5;
const BATCH: usize = 16;

/// A layer stored like PyTorch's `nn.Linear`: keys `weight` and `bias`.
#[derive(Params)]
struct Linear<D: Device, const OUT: usize, const IN: usize> {
    weight: Tensor<D, f32, shape![OUT, IN]>,
    bias: Tensor<D, f32, shape![OUT]>,
}

/// The model's weights, with the shapes the file must have: keys
/// `fc1.weight`, `fc1.bias`, `fc2.weight`, `fc2.bias`.
#[derive(Params)]
struct Mlp<D: Device> {
    fc1: Linear<D, HIDDEN, INPUTS>,
    fc2: Linear<D, CLASSES, HIDDEN>,
}

tensor_fn! {
    /// Logits: `relu(x @ fc1.weight.t() + fc1.bias) @ fc2.weight.t() + fc2.bias`,
    /// the weights read from the struct, every shape checked at compile
    /// time as if they were parameters.
    fn forward<D: Device, const B: usize>(
        x: &Tensor<D, f32, [B, {INPUTS}]>,
        p: &Mlp<D>,
    ) -> Tensor<D, f32, [B, {CLASSES}]> {
        // `.t()` is a view: the product reads the stored weight transposed.
        let hidden = relu(addmm(p.fc1.bias, x, p.fc1.weight.t()));
        addmm(p.fc2.bias, hidden, p.fc2.weight.t())
    }
}

/// The same file read with `fc1`'s dims swapped, to show the refusal.
#[derive(Params)]
struct Swapped<D: Device> {
    fc1: Linear<D, INPUTS, HIDDEN>,
    fc2: Linear<D, CLASSES, HIDDEN>,
}

/// Random weights with PyTorch's default scale (uniform bound
/// `1/sqrt(in)`, here normal with that deviation), like a checkpoint.
fn random_layer<const OUT: usize, const IN: usize>(seed: u64) -> Result<Linear<Cpu, OUT, IN>> {
    let scale = (IN as f32).sqrt().recip();
    let scaled = |v: Vec<f32>| v.into_iter().map(|x| x * scale).collect::<Vec<f32>>();
    Ok(Linear {
        weight: Tensor::from_vec(scaled(
            Tensor::<Cpu, f32, shape![OUT, IN]>::randn(seed)?.to_vec()?,
        ))?,
        bias: Tensor::from_vec(scaled(
            Tensor::<Cpu, f32, shape![OUT]>::randn(seed + 1)?.to_vec()?,
        ))?,
    })
}

/// The forward pass in f64 on the host, from the same weights.
fn reference<D: Device>(m: &Mlp<D>, x: &[f64]) -> Result<Vec<f64>> {
    let linear = |x: &[f64], w: &[f64], b: &[f64], rows: usize, inp: usize, out: usize| {
        let mut y = vec![0.0; rows * out];
        for r in 0..rows {
            for o in 0..out {
                y[r * out + o] = b[o]
                    + (0..inp)
                        .map(|i| x[r * inp + i] * w[o * inp + i])
                        .sum::<f64>();
            }
        }
        y
    };
    let h: Vec<f64> = linear(
        x,
        &to_f64(&m.fc1.weight)?,
        &to_f64(&m.fc1.bias)?,
        BATCH,
        INPUTS,
        HIDDEN,
    )
    .into_iter()
    .map(|v| v.max(0.0))
    .collect();
    Ok(linear(
        &h,
        &to_f64(&m.fc2.weight)?,
        &to_f64(&m.fc2.bias)?,
        BATCH,
        HIDDEN,
        CLASSES,
    ))
}

/// Writes, loads and runs the model on device `D`.
pub fn run<D: Device>() -> AnyResult {
    let seed = seed();
    let file = TempFile::new(&format!("tensorfn-mlp-{seed}.safetensors"));
    let weights = Mlp {
        fc1: random_layer(seed)?,
        fc2: random_layer(seed + 2)?,
    };
    weights.save_safetensors(&file.0)?;
    println!(
        "wrote {} ({} parameters)",
        file.0.display(),
        weights.num_params()
    );

    // Memory-mapped, every tensor's dtype and shape checked, on `D`.
    let model = Mlp::<D>::load_safetensors(&file.0)?;

    // A file whose shapes do not match the model is refused at load time,
    // naming the tensor, not during the first product.
    match Swapped::<D>::load_safetensors(&file.0) {
        Err(e) => println!("loading fc1 as [{INPUTS}, {HIDDEN}]: {e}"),
        Ok(_) => return Err("a [32, 64] weight loaded as [64, 32]".into()),
    }

    let x = Tensor::<Cpu, f32, shape![BATCH, INPUTS]>::randn(seed + 100)?.to_device::<D>()?;
    let logits = forward(&x, &model)?;
    let classes = logits.argmax::<1>()?.to_vec()?;
    println!("logits on {}:\n{logits}", logits.device());
    println!("predicted classes: {classes:?}");

    let want = reference(&model, &to_f64(&x)?)?;
    check_close("logits", &to_f64(&logits)?, &want, 1e-4, 1e-5)
}

pub fn main() -> AnyResult {
    on_best_device(run::<Cuda>, run::<Cpu>)
}
