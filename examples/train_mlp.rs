//! Trains a small MLP to tell three interleaved spirals apart, on points
//! it generates: the loss and its gradient come from one `tensor_fn!`
//! (`#[grad(p)]` derives the backward at compile time), AdamW updates the
//! parameters. Written once for every device and float dtype; on the GPU
//! when there is one.
//!
//! ```sh
//! cargo run --release --example train_mlp
//! cargo run --release --example train_mlp -- --steps 500 --lr 0.01 --cpu --dump run/
//! ```
//!
//! Options: `--steps N` (300), `--lr LR` (0.01), `--seed S`, `--cpu`,
//! `--dtype f32|f64`, `--dump DIR`: writes the initial parameters
//! (`DIR/init.safetensors`), every batch (`DIR/batches.safetensors`: `x`
//! `[steps, 128, 2]`, `y` `[steps, 128]`) and the loss of every step
//! (`DIR/losses.txt`), so that `scripts/train_mlp_reference.py DIR` can
//! run the same steps in PyTorch and compare the losses.

mod common;

use common::AnyResult;
use std::path::PathBuf;
use tensorfn::prelude::*;
use tensorfn::{Float, Shape};

/// Points per batch.
const BATCH: usize = 128;
/// Points per class in the data set.
const PER_CLASS: usize = 1000;

/// Two hidden layers of 64 with ReLU, three classes; `x @ w + b`.
#[derive(Params)]
pub struct Mlp<D: Device, T: Float> {
    pub w1: Tensor<D, T, shape![2, 64]>,
    pub b1: Tensor<D, T, shape![64]>,
    pub w2: Tensor<D, T, shape![64, 64]>,
    pub b2: Tensor<D, T, shape![64]>,
    pub w3: Tensor<D, T, shape![64, 3]>,
    pub b3: Tensor<D, T, shape![3]>,
}

tensor_fn! {
    /// The class scores of a batch of points.
    pub fn logits<D: Device, T: Float, const B: usize>(
        x: &Tensor<D, T, [B, 2]>,
        p: &Mlp<D, T>,
    ) -> Tensor<D, T, [B, 3]> {
        let h = relu(addmm(p.b1, x, p.w1));
        let h = relu(addmm(p.b2, h, p.w2));
        addmm(p.b3, h, p.w3)
    }

    /// The mean cross-entropy of a batch; `loss::value_and_grad` also
    /// gives its gradient with respect to every parameter, as an `Mlp`.
    #[grad(p)]
    pub fn loss<D: Device, T: Float, const B: usize>(
        x: &Tensor<D, T, [B, 2]>,
        y: &Tensor<D, i64, [B]>,
        p: &Mlp<D, T>,
    ) -> Tensor<D, T, []> {
        cross_entropy(logits(x, p), y)
    }
}

/// A batch of every step, for `--dump`.
#[derive(Params)]
struct Batches<D: Device, T: Float> {
    x: Tensor<D, T, shape![_, BATCH, 2]>,
    y: Tensor<D, i64, shape![_, BATCH]>,
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

    fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform().max(1e-300), self.uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

/// Three spirals of `PER_CLASS` noisy points each: `(x, y)` and class.
fn spirals(rng: &mut Lcg) -> (Vec<[f64; 2]>, Vec<i64>) {
    let (mut points, mut classes) = (Vec::new(), Vec::new());
    for c in 0..3 {
        for i in 0..PER_CLASS {
            let r = i as f64 / PER_CLASS as f64;
            let t = c as f64 * 2.0 * std::f64::consts::PI / 3.0 + 4.0 * r + 0.2 * rng.normal();
            points.push([r * t.sin(), r * t.cos()]);
            classes.push(c);
        }
    }
    (points, classes)
}

/// PyTorch's `nn.Linear` initialisation: uniform in `±1/sqrt(fan_in)`.
fn init<T: Float>(rng: &mut Lcg) -> Result<Mlp<Cpu, T>> {
    fn uniform<T: Float, S: Shape>(
        rng: &mut Lcg,
        dims: &[usize],
        fan_in: usize,
    ) -> Result<Tensor<Cpu, T, S>> {
        let a = 1.0 / (fan_in as f64).sqrt();
        let n = dims.iter().product();
        let v = (0..n)
            .map(|_| T::from_f64(a * (2.0 * rng.uniform() - 1.0)))
            .collect();
        Tensor::from_vec_dims(v, dims)
    }
    Ok(Mlp {
        w1: uniform(rng, &[2, 64], 2)?,
        b1: uniform(rng, &[64], 2)?,
        w2: uniform(rng, &[64, 64], 64)?,
        b2: uniform(rng, &[64], 64)?,
        w3: uniform(rng, &[64, 3], 64)?,
        b3: uniform(rng, &[3], 64)?,
    })
}

struct Options {
    steps: usize,
    lr: f64,
    seed: u64,
    cpu: bool,
    dtype: String,
    dump: Option<PathBuf>,
}

impl Options {
    fn from_args() -> AnyResult<Options> {
        let mut o = Options {
            steps: 300,
            lr: 0.01,
            seed: 7,
            cpu: false,
            dtype: "f32".into(),
            dump: None,
        };
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            let mut value = || args.next().ok_or(format!("{a} needs a value"));
            match a.as_str() {
                "--steps" => o.steps = value()?.parse()?,
                "--lr" => o.lr = value()?.parse()?,
                "--seed" => o.seed = value()?.parse()?,
                "--cpu" => o.cpu = true,
                "--dtype" => o.dtype = value()?,
                "--dump" => o.dump = Some(value()?.into()),
                other => {
                    return Err(format!("unknown option {other} (see the example's docs)").into())
                }
            }
        }
        Ok(o)
    }
}

/// Trains for `o.steps` steps and returns the loss of every step.
fn train<D: Device, T: Float>(o: &Options) -> AnyResult<Vec<f64>> {
    let mut rng = Lcg(o.seed);
    let (points, classes) = spirals(&mut rng);
    let init = init::<T>(&mut rng)?;
    let mut p = init.to_device::<D>()?;
    let mut opt = AdamW::new(
        &p,
        AdamWConfig {
            lr: o.lr,
            weight_decay: 0.01,
            ..Default::default()
        },
    )?;
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    let mut losses = Vec::new();
    let started = std::time::Instant::now();
    for step in 0..o.steps {
        let pick: Vec<usize> = (0..BATCH)
            .map(|_| (rng.uniform() * points.len() as f64) as usize % points.len())
            .collect();
        let xb: Vec<T> = pick
            .iter()
            .flat_map(|&i| points[i])
            .map(T::from_f64)
            .collect();
        let yb: Vec<i64> = pick.iter().map(|&i| classes[i]).collect();
        if o.dump.is_some() {
            xs.extend_from_slice(&xb);
            ys.extend_from_slice(&yb);
        }
        let x = Tensor::<Cpu, T, shape![BATCH, 2]>::from_vec(xb)?.to_device::<D>()?;
        let y = Tensor::<Cpu, i64, shape![BATCH]>::from_vec(yb)?.to_device::<D>()?;
        let (value, grads) = loss::value_and_grad(&x, &y, &p)?;
        opt.step(&mut p, &grads)?;
        let l = value.to_vec()?[0].to_f64();
        losses.push(l);
        if step % 50 == 0 || step + 1 == o.steps {
            println!("step {step:4}: loss {l:.4}");
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{} steps in {:.2} s ({:.0} steps/s, {:.0} points/s)",
        o.steps,
        secs,
        o.steps as f64 / secs,
        (o.steps * BATCH) as f64 / secs
    );
    // Accuracy over the whole data set.
    let all: Vec<T> = points.iter().flatten().map(|&v| T::from_f64(v)).collect();
    let x = Tensor::<Cpu, T, shape![{ 3 * PER_CLASS }, 2]>::from_vec(all)?.to_device::<D>()?;
    let scores = logits(&x, &p)?.to_device::<Cpu>()?.to_vec()?;
    let right = scores
        .chunks(3)
        .zip(&classes)
        .filter(|&(s, &c)| {
            let best = (0..3).max_by(|&a, &b| s[a].to_f64().total_cmp(&s[b].to_f64()));
            best == Some(c as usize)
        })
        .count();
    println!(
        "accuracy on all {} points: {:.1}%",
        points.len(),
        100.0 * right as f64 / points.len() as f64
    );
    if let Some(dir) = &o.dump {
        std::fs::create_dir_all(dir)?;
        init.save_safetensors(dir.join("init.safetensors"))?;
        let batches = Batches::<Cpu, T> {
            x: Tensor::from_vec_dims(xs, &[o.steps, BATCH, 2])?,
            y: Tensor::from_vec_dims(ys, &[o.steps, BATCH])?,
        };
        batches.save_safetensors(dir.join("batches.safetensors"))?;
        let text: String = losses.iter().map(|l| format!("{l:.9e}\n")).collect();
        std::fs::write(dir.join("losses.txt"), text)?;
        println!("wrote {}", dir.display());
    }
    Ok(losses)
}

/// An `Err` unless the loss fell to under half: the mean of the last 20
/// steps against the first.
fn fell(losses: &[f64]) -> AnyResult {
    let tail = &losses[losses.len().saturating_sub(20)..];
    let last = tail.iter().sum::<f64>() / tail.len().max(1) as f64;
    if let Some(&first) = losses.first() {
        if last.is_nan() || last >= 0.5 * first {
            return Err(format!(
                "the loss did not fall: {first:.4} at first, {last:.4} at the end"
            )
            .into());
        }
        println!("loss {first:.4} -> {last:.4}");
    }
    Ok(())
}

/// The test's run: 200 steps in f32 on `D`.
pub fn run<D: Device>() -> AnyResult {
    let o = Options {
        steps: 200,
        lr: 0.01,
        seed: common::seed(),
        cpu: false,
        dtype: "f32".into(),
        dump: None,
    };
    fell(&train::<D, f32>(&o)?)
}

pub fn main() -> AnyResult {
    let o = Options::from_args()?;
    let gpu = !o.cpu && common::gpu_available()?;
    let losses = match (gpu, o.dtype.as_str()) {
        (true, "f32") => train::<Cuda, f32>(&o)?,
        (true, "f64") => train::<Cuda, f64>(&o)?,
        (false, "f32") => train::<Cpu, f32>(&o)?,
        (false, "f64") => train::<Cpu, f64>(&o)?,
        (_, other) => return Err(format!("--dtype {other}: f32 or f64").into()),
    };
    fell(&losses)
}
