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

use common::{check_close, on_best_device, seed, to_f64, AnyResult};
use safetensors::{tensor::TensorView, Dtype, SafeTensors};
use std::path::{Path, PathBuf};
use tensorfn::prelude::*;
use tensorfn::{Device, Shape};

const INPUTS: usize = 64;
const HIDDEN: usize = 32;
const CLASSES: usize = 5;
const BATCH: usize = 16;

/// The model's weights, with the shapes the file must have.
struct Mlp<D: Device> {
    fc1_weight: Tensor<D, f32, shape![HIDDEN, INPUTS]>,
    fc1_bias: Tensor<D, f32, shape![HIDDEN]>,
    fc2_weight: Tensor<D, f32, shape![CLASSES, HIDDEN]>,
    fc2_bias: Tensor<D, f32, shape![CLASSES]>,
}

impl<D: Device> Mlp<D> {
    /// Reads every weight from a safetensors file and moves it to `D`.
    fn load(path: &Path) -> AnyResult<Self> {
        let bytes = std::fs::read(path)?;
        let file = SafeTensors::deserialize(&bytes)?;
        Ok(Mlp {
            fc1_weight: load_f32(&file, "fc1.weight")?.to_device()?,
            fc1_bias: load_f32(&file, "fc1.bias")?.to_device()?,
            fc2_weight: load_f32(&file, "fc2.weight")?.to_device()?,
            fc2_bias: load_f32(&file, "fc2.bias")?.to_device()?,
        })
    }

    /// Logits: `relu(x @ fc1.weight.t() + fc1.bias) @ fc2.weight.t() + fc2.bias`.
    fn forward<const B: usize>(
        &self,
        x: &Tensor<D, f32, shape![B, INPUTS]>,
    ) -> Result<Tensor<D, f32, shape![B, CLASSES]>> {
        // `.t()` is a view: the product reads the stored weight transposed.
        let hidden = Tensor::addmm(&self.fc1_bias, x, &self.fc1_weight.t()?)?.relu()?;
        Tensor::addmm(&self.fc2_bias, &hidden, &self.fc2_weight.t()?)
    }
}

/// One f32 tensor of the file, checked against the shape type `S`: a
/// missing name, another dtype or other dims is an error naming the tensor.
fn load_f32<S: Shape>(file: &SafeTensors<'_>, name: &str) -> AnyResult<Tensor<Cpu, f32, S>> {
    let view = file.tensor(name).map_err(|e| format!("{name}: {e}"))?;
    if view.dtype() != Dtype::F32 {
        return Err(format!(
            "{name}: expected F32, found {:?}; convert the file or load it as that dtype",
            view.dtype()
        )
        .into());
    }
    let values: Vec<f32> = view
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    Tensor::<Cpu, f32, S>::from_vec_dims(values, view.shape())
        .map_err(|e| format!("{name}: {e}").into())
}

/// Writes random weights with PyTorch's default scale, like a checkpoint.
fn write_random_weights(path: &Path, seed: u64) -> AnyResult {
    let layers: [(&str, Vec<usize>, f32); 4] = [
        (
            "fc1.weight",
            vec![HIDDEN, INPUTS],
            (INPUTS as f32).sqrt().recip(),
        ),
        ("fc1.bias", vec![HIDDEN], (INPUTS as f32).sqrt().recip()),
        (
            "fc2.weight",
            vec![CLASSES, HIDDEN],
            (HIDDEN as f32).sqrt().recip(),
        ),
        ("fc2.bias", vec![CLASSES], (HIDDEN as f32).sqrt().recip()),
    ];
    let mut buffers = Vec::new();
    for (i, (name, dims, scale)) in layers.iter().enumerate() {
        let t =
            Tensor::<Cpu, f32, shape![_]>::randn_dims(seed + i as u64, &[dims.iter().product()])?;
        let bytes: Vec<u8> = t
            .to_vec()?
            .iter()
            .flat_map(|v| (v * scale).to_le_bytes())
            .collect();
        buffers.push((*name, dims.clone(), bytes));
    }
    let views = buffers
        .iter()
        .map(|(name, dims, bytes)| Ok((*name, TensorView::new(Dtype::F32, dims.clone(), bytes)?)))
        .collect::<std::result::Result<Vec<_>, safetensors::SafeTensorError>>()?;
    safetensors::serialize_to_file(views, None, path)?;
    Ok(())
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
        &to_f64(&m.fc1_weight)?,
        &to_f64(&m.fc1_bias)?,
        BATCH,
        INPUTS,
        HIDDEN,
    )
    .into_iter()
    .map(|v| v.max(0.0))
    .collect();
    Ok(linear(
        &h,
        &to_f64(&m.fc2_weight)?,
        &to_f64(&m.fc2_bias)?,
        BATCH,
        HIDDEN,
        CLASSES,
    ))
}

/// A file name of this process in the temp dir, removed when dropped.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Writes, loads and runs the model on device `D`.
pub fn run<D: Device>() -> AnyResult {
    let seed = seed();
    let file = TempFile(std::env::temp_dir().join(format!(
        "tensorfn-mlp-{}-{seed}.safetensors",
        std::process::id()
    )));
    write_random_weights(&file.0, seed)?;
    println!("wrote {}", file.0.display());

    let model = Mlp::<D>::load(&file.0)?;

    // A file whose shapes do not match the model is refused at load time,
    // naming the tensor, not during the first product.
    let bytes = std::fs::read(&file.0)?;
    let parsed = SafeTensors::deserialize(&bytes)?;
    match load_f32::<shape![INPUTS, HIDDEN]>(&parsed, "fc1.weight") {
        Err(e) => println!("loading fc1.weight as [{INPUTS}, {HIDDEN}]: {e}"),
        Ok(_) => return Err("a [32, 64] weight loaded as [64, 32]".into()),
    }

    let x = Tensor::<Cpu, f32, shape![BATCH, INPUTS]>::randn(seed + 100)?.to_device::<D>()?;
    let logits = model.forward(&x)?;
    let classes = logits.argmax::<1>()?.to_vec()?;
    println!("logits on {}:\n{logits}", logits.device());
    println!("predicted classes: {classes:?}");

    let want = reference(&model, &to_f64(&x)?)?;
    check_close("logits", &to_f64(&logits)?, &want, 1e-4, 1e-5)
}

pub fn main() -> AnyResult {
    on_best_device(run::<Cuda>, run::<Cpu>)
}
