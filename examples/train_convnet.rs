//! Trains a small convnet to tell four shapes apart (a horizontal bar, a
//! vertical bar, a square outline and a diagonal cross) on 16×16 noisy
//! images it draws itself: two convolutions, batch norm, max pooling,
//! dropout and a linear classifier, whose loss and gradient come from one
//! `tensor_fn!` (`#[grad(p)]`); AdamW updates the parameters. The batch
//! norm normalises with the batch's statistics while training, and its
//! running statistics, updated after every step, are what the evaluation
//! uses. On the GPU when there is one.
//!
//! ```sh
//! cargo run --release --example train_convnet
//! cargo run --release --example train_convnet -- --steps 400 --lr 0.003 --cpu
//! ```
//!
//! Options: `--steps N` (200), `--lr LR` (0.003), `--seed S`, `--cpu`.

mod common;

use common::AnyResult;
use tensorfn::params::BatchNorm;
use tensorfn::prelude::*;
use tensorfn::{Float, Shape};

/// Images per batch.
const BATCH: usize = 64;
/// The image side.
const SIDE: usize = 16;
/// Shapes to tell apart.
const CLASSES: usize = 4;

/// The parameters: keys `conv1.weight`, `conv1.bias`, `bn1.weight`, ...
#[derive(Params)]
pub struct Net<D: Device, T: Float> {
    pub conv1: Conv<D, T, 8, 1>,
    pub bn1: Affine<D, T, 8>,
    pub conv2: Conv<D, T, 16, 8>,
    pub fc: Linear<D, T>,
}

/// `nn.Conv2d(I, O, 3, padding=1)`.
#[derive(Params)]
pub struct Conv<D: Device, T: Float, const O: usize, const I: usize> {
    pub weight: Tensor<D, T, shape![O, I, 3, 3]>,
    pub bias: Tensor<D, T, shape![O]>,
}

/// The trained scale and shift of a batch norm.
#[derive(Params)]
pub struct Affine<D: Device, T: Float, const C: usize> {
    pub weight: Tensor<D, T, shape![C]>,
    pub bias: Tensor<D, T, shape![C]>,
}

/// The classifier over the 16 × 4 × 4 pooled features, `x @ weight + bias`.
#[derive(Params)]
pub struct Linear<D: Device, T: Float> {
    pub weight: Tensor<D, T, shape![256, CLASSES]>,
    pub bias: Tensor<D, T, shape![CLASSES]>,
}

tensor_fn! {
    /// The first convolution's output: what the batch norm normalises.
    pub fn features<D: Device, T: Float, const B: usize>(
        x: &Tensor<D, T, [B, 1, 16, 16]>,
        p: &Net<D, T>,
    ) -> Tensor<D, T, [B, 8, 16, 16]> {
        conv2d(x, p.conv1.weight, p.conv1.bias, padding = 1)
    }

    /// The logits; `training` picks the batch's statistics (and dropout)
    /// or the running ones.
    pub fn logits<D: Device, T: Float, const B: usize>(
        x: &Tensor<D, T, [B, 1, 16, 16]>,
        p: &Net<D, T>,
        running_mean: &Tensor<D, T, [8]>,
        running_var: &Tensor<D, T, [8]>,
    ) -> Tensor<D, T, [B, CLASSES]> {
        let h = batch_norm(features(x, p), running_mean, running_var, p.bn1.weight, p.bn1.bias);
        let h = max_pool2d(relu(h), 2);
        let h = max_pool2d(relu(conv2d(h, p.conv2.weight, p.conv2.bias, padding = 1)), 2);
        addmm(p.fc.bias, flatten(h, 1), p.fc.weight)
    }

    /// The mean cross-entropy of a batch; `loss::value_and_grad` gives its
    /// gradient with respect to every parameter, as a `Net`.
    #[grad(p)]
    pub fn loss<D: Device, T: Float, const B: usize>(
        x: &Tensor<D, T, [B, 1, 16, 16]>,
        y: &Tensor<D, i64, [B]>,
        p: &Net<D, T>,
        running_mean: &Tensor<D, T, [8]>,
        running_var: &Tensor<D, T, [8]>,
        seed: usize,
    ) -> Tensor<D, T, []> {
        // The training forward: the batch's statistics, dropout before
        // the classifier.
        let h = conv2d(x, p.conv1.weight, p.conv1.bias, padding = 1);
        let h = batch_norm(h, running_mean, running_var, p.bn1.weight, p.bn1.bias, training = true);
        let h = max_pool2d(relu(h), 2);
        let h = max_pool2d(relu(conv2d(h, p.conv2.weight, p.conv2.bias, padding = 1)), 2);
        let logits = addmm(p.fc.bias, dropout(flatten(h, 1), p = 0.1, seed = seed), p.fc.weight);
        cross_entropy(logits, y)
    }
}

/// A small, seeded generator (the data must not depend on a crate's
/// stream).
struct Lcg(u64);

impl Lcg {
    fn uniform(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }

    fn below(&mut self, n: usize) -> usize {
        (self.uniform() * n as f64) as usize % n
    }
}

/// A batch of `n` images of random classes: a shape of random size and
/// place, drawn at 1 over noise of ±0.3.
fn images(rng: &mut Lcg, n: usize) -> (Vec<f32>, Vec<i64>) {
    let (mut pixels, mut labels) = (vec![0f32; n * SIDE * SIDE], Vec::with_capacity(n));
    for img in pixels.chunks_mut(SIDE * SIDE) {
        let class = rng.below(CLASSES);
        let size = 6 + rng.below(6);
        let (r0, c0) = (rng.below(SIDE - size), rng.below(SIDE - size));
        let mut set = |r: usize, c: usize| img[(r0 + r) * SIDE + c0 + c] = 1.0;
        for k in 0..size {
            match class {
                0 => set(size / 2, k),
                1 => set(k, size / 2),
                2 => {
                    set(0, k);
                    set(size - 1, k);
                    set(k, 0);
                    set(k, size - 1);
                }
                _ => {
                    set(k, k);
                    set(k, size - 1 - k);
                }
            }
        }
        for v in img.iter_mut() {
            *v += (0.6 * (rng.uniform() - 0.5)) as f32;
        }
        labels.push(class as i64);
    }
    (pixels, labels)
}

/// PyTorch's initialisation: uniform in `±1/sqrt(fan_in)`, batch norm at
/// scale 1 and shift 0.
fn init(rng: &mut Lcg) -> Result<Net<Cpu, f32>> {
    fn uniform<S: Shape>(
        rng: &mut Lcg,
        dims: &[usize],
        fan_in: usize,
    ) -> Result<Tensor<Cpu, f32, S>> {
        let a = 1.0 / (fan_in as f64).sqrt();
        let v = (0..dims.iter().product())
            .map(|_| (a * (2.0 * rng.uniform() - 1.0)) as f32)
            .collect();
        Tensor::from_vec_dims(v, dims)
    }
    Ok(Net {
        conv1: Conv {
            weight: uniform(rng, &[8, 1, 3, 3], 9)?,
            bias: uniform(rng, &[8], 9)?,
        },
        bn1: Affine {
            weight: Tensor::ones()?,
            bias: Tensor::zeros()?,
        },
        conv2: Conv {
            weight: uniform(rng, &[16, 8, 3, 3], 72)?,
            bias: uniform(rng, &[16], 72)?,
        },
        fc: Linear {
            weight: uniform(rng, &[256, CLASSES], 256)?,
            bias: uniform(rng, &[CLASSES], 256)?,
        },
    })
}

/// Options of a run.
struct Options {
    steps: usize,
    lr: f64,
    seed: u64,
    cpu: bool,
}

impl Options {
    fn from_args() -> AnyResult<Options> {
        let mut o = Options {
            steps: 200,
            lr: 0.003,
            seed: 11,
            cpu: false,
        };
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            let mut value = || args.next().ok_or(format!("{a} needs a value"));
            match a.as_str() {
                "--steps" => o.steps = value()?.parse()?,
                "--lr" => o.lr = value()?.parse()?,
                "--seed" => o.seed = value()?.parse()?,
                "--cpu" => o.cpu = true,
                other => {
                    return Err(format!("unknown option {other} (see the example's docs)").into())
                }
            }
        }
        Ok(o)
    }
}

type Batch<D> = (
    Tensor<D, f32, shape![BATCH, 1, SIDE, SIDE]>,
    Tensor<D, i64, shape![BATCH]>,
);

fn batch<D: Device>(rng: &mut Lcg) -> Result<(Batch<D>, Vec<i64>)> {
    let (px, labels) = images(rng, BATCH);
    let x = Tensor::<Cpu, f32, shape![BATCH, 1, SIDE, SIDE]>::from_vec(px)?.to_device::<D>()?;
    let y = Tensor::<Cpu, i64, shape![BATCH]>::from_vec(labels.clone())?.to_device::<D>()?;
    Ok(((x, y), labels))
}

/// Trains for `o.steps` steps; returns the losses of the steps and the
/// accuracy on fresh images with the running statistics.
fn train<D: Device>(o: &Options) -> AnyResult<(Vec<f64>, f64)> {
    let mut rng = Lcg(o.seed);
    let mut p = init(&mut rng)?.to_device::<D>()?;
    let stats = BatchNorm::<D, f32, Const<8>>::new()?;
    let mut opt = AdamW::new(
        &p,
        AdamWConfig {
            lr: o.lr,
            weight_decay: 0.01,
            ..Default::default()
        },
    )?;
    let mut losses = Vec::with_capacity(o.steps);
    let started = std::time::Instant::now();
    for step in 0..o.steps {
        let ((x, y), _) = batch::<D>(&mut rng)?;
        let s = stats.stats();
        let (value, grads) =
            loss::value_and_grad(&x, &y, &p, &s.running_mean, &s.running_var, step)?;
        opt.step(&mut p, &grads)?;
        // The running statistics follow the batch norm's input, as a
        // module in training mode updates them.
        stats.update_running_stats(&features(&x, &p)?)?;
        let l = value.to_vec()?[0] as f64;
        losses.push(l);
        if step % 25 == 0 || step + 1 == o.steps {
            println!("step {step:4}  loss {l:.4}");
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let (mut right, mut total) = (0usize, 0usize);
    let s = stats.stats();
    for _ in 0..8 {
        let ((x, _), labels) = batch::<D>(&mut rng)?;
        let out = logits(&x, &p, &s.running_mean, &s.running_var)?.to_vec()?;
        for (row, &label) in out.chunks(CLASSES).zip(&labels) {
            let best = (0..CLASSES)
                .max_by(|&a, &b| row[a].total_cmp(&row[b]))
                .unwrap_or(0);
            right += usize::from(best as i64 == label);
            total += 1;
        }
    }
    let accuracy = right as f64 / total as f64;
    println!(
        "{} steps in {secs:.2} s on {}; accuracy on {total} new images: {:.1}%",
        o.steps,
        D::KIND,
        100.0 * accuracy
    );
    Ok((losses, accuracy))
}

/// The loss of the last `k` steps against the first `k`, and the accuracy.
fn check(losses: &[f64], accuracy: f64) -> AnyResult {
    let k = 20.min(losses.len() / 2).max(1);
    let first = losses[..k].iter().sum::<f64>() / k as f64;
    let last = losses[losses.len() - k..].iter().sum::<f64>() / k as f64;
    // A NaN loss fails too: it is not below half the first.
    let fell = last < 0.5 * first;
    if !fell || accuracy < 0.8 {
        return Err(format!(
            "training did not learn: mean loss {first:.4} over the first {k} steps, {last:.4} over the last; accuracy {accuracy:.3}"
        )
        .into());
    }
    Ok(())
}

/// The test's run.
pub fn run<D: Device>() -> AnyResult {
    let o = Options {
        steps: 150,
        lr: 0.003,
        seed: 11,
        cpu: false,
    };
    let (losses, accuracy) = train::<D>(&o)?;
    check(&losses, accuracy)
}

pub fn main() -> AnyResult {
    let o = Options::from_args()?;
    let (losses, accuracy) = if !o.cpu && common::gpu_available()? {
        train::<Cuda>(&o)?
    } else {
        train::<Cpu>(&o)?
    };
    check(&losses, accuracy)
}
