//! Forward pass of a 784-4096-4096-10 MLP (batch 256, bf16, relu), written
//! with `tensor_fn!` so that bias and activation can fuse into the matrix
//! products.
//!
//! Compare with `scripts/torch_baseline.py` (case `mlp_fwd`: the same
//! `relu(addmm(..))` chain in PyTorch eager) through `scripts/bench-report`.
//! Run: `cargo bench --bench gpu_mlp -- --quick`.

mod common;

use common::*;
use tensorfn::prelude::*;

const BATCH: usize = 256;
const D0: usize = 784;
const D1: usize = 4096;
const D2: usize = 4096;
const D3: usize = 10;
/// Parameter count (weights and biases).
const WEIGHTS: usize = D0 * D1 + D1 + D1 * D2 + D2 + D2 * D3 + D3;

tensor_fn! {
    /// Three dense layers, relu between them.
    fn mlp(
        x: &Tensor<Cuda, bf16, [256, 784]>,
        w1: &Tensor<Cuda, bf16, [784, 4096]>,
        b1: &Tensor<Cuda, bf16, [4096]>,
        w2: &Tensor<Cuda, bf16, [4096, 4096]>,
        b2: &Tensor<Cuda, bf16, [4096]>,
        w3: &Tensor<Cuda, bf16, [4096, 10]>,
        b3: &Tensor<Cuda, bf16, [10]>,
    ) -> Tensor<Cuda, bf16, [256, 10]> {
        let h1 = relu(addmm(b1, x, w1));
        let h2 = relu(addmm(b2, h1, w2));
        addmm(b3, h2, w3)
    }
}

type Input = Tensor<Cuda, bf16, shape![256, 784]>;

/// Host copies of the parameters, row-major, weights as (in, out).
struct Params {
    w: [Vec<bf16>; 3],
    b: [Vec<bf16>; 3],
}

impl Params {
    fn random() -> Params {
        // Scaled like a default initialisation so activations stay O(1).
        let weight = |i: usize, o: usize, seed| {
            let s = 1.0 / (i as f64).sqrt();
            random_vec::<bf16>(i * o, seed, -s, s)
        };
        let bias = |o: usize, seed| random_vec::<bf16>(o, seed, -0.5, 0.5);
        Params {
            w: [weight(D0, D1, 11), weight(D1, D2, 12), weight(D2, D3, 13)],
            b: [bias(D1, 21), bias(D2, 22), bias(D3, 23)],
        }
    }

    /// Row `r` of the forward pass in f64, rounding each layer's output to
    /// bf16 as the device does.
    fn reference_row(&self, x: &[bf16], r: usize) -> Vec<f64> {
        let dims = [D0, D1, D2, D3];
        let mut h: Vec<f64> = f64s(&x[r * D0..(r + 1) * D0]);
        for layer in 0..3 {
            let n = dims[layer + 1];
            let mut out = f64s(&self.b[layer]);
            for (kk, hv) in h.iter().enumerate() {
                for (o, w) in out.iter_mut().zip(&self.w[layer][kk * n..(kk + 1) * n]) {
                    *o += hv * w.to_f64();
                }
            }
            let relu = layer < 2;
            h = out
                .into_iter()
                .map(|v| bf16::from_f64(if relu { v.max(0.0) } else { v }).to_f64())
                .collect();
        }
        h
    }
}

fn run(args: &Args) -> Result<(Timing, Check)> {
    let plan = args.plan();
    let p = Params::random();
    let w1 = Tensor::<Cuda, bf16, shape![784, 4096]>::from_vec(p.w[0].clone())?;
    let w2 = Tensor::<Cuda, bf16, shape![4096, 4096]>::from_vec(p.w[1].clone())?;
    let w3 = Tensor::<Cuda, bf16, shape![4096, 10]>::from_vec(p.w[2].clone())?;
    let b1 = Tensor::<Cuda, bf16, shape![4096]>::from_vec(p.b[0].clone())?;
    let b2 = Tensor::<Cuda, bf16, shape![4096]>::from_vec(p.b[1].clone())?;
    let b3 = Tensor::<Cuda, bf16, shape![10]>::from_vec(p.b[2].clone())?;
    // The weights stay the same between calls, as in inference; only the
    // inputs rotate (PyTorch's side counts the same way).
    let sets = n_sets(2 * (BATCH * D0 + WEIGHTS), GPU_ROTATE_BYTES, 64);
    let x0 = random_vec::<bf16>(BATCH * D0, 1, -1.0, 1.0);
    let mut xs = vec![Input::from_vec(x0.clone())?];
    for s in 1..sets {
        xs.push(Input::from_vec(random_vec::<bf16>(
            BATCH * D0,
            1 + s as u64,
            -1.0,
            1.0,
        ))?);
    }
    let out = mlp(&xs[0], &w1, &b1, &w2, &b2, &w3, &b3)?.to_vec()?;
    let check = check_pairs(
        [0, BATCH / 2, BATCH - 1].iter().flat_map(|&r| {
            let got = f64s(&out[r * D3..(r + 1) * D3]);
            got.into_iter().zip(p.reference_row(&x0, r))
        }),
        2e-2,
    );
    let t = time_call(
        &plan,
        sets,
        |i| mlp(&xs[i], &w1, &b1, &w2, &b2, &w3, &b3).map(drop),
        &sync_cuda,
    )?;
    Ok((t, check))
}

fn main() {
    let args = Args::parse();
    emit_meta("gpu_mlp", &args);
    if let Err(e) = sync_cuda() {
        emit_skipped("gpu_mlp", &e);
        return;
    }
    if !args.wants("mlp_fwd") {
        return;
    }
    let activations = BATCH * (D0 + 2 * D1 + 2 * D2 + D3);
    let case = Case::new(
        "mlp_fwd",
        "bf16",
        format!("{BATCH}x{D0}x{D1}x{D2}x{D3}"),
        (2 * (WEIGHTS + activations)) as u64,
        (2 * BATCH * (D0 * D1 + D1 * D2 + D2 * D3)) as u64,
    );
    match run(&args) {
        Ok((t, check)) => case.emit("tensorfn", &t, Some(check)),
        Err(e) => case.emit_error("tensorfn", &e),
    }
}
