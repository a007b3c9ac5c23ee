//! The backward of `layer_norm` on the GPU: the fused
//! `layer_norm_backward` (one kernel for `dx`, per-block partial sums of
//! `dweight` and `dbias` added in order by a second) against the same
//! gradients written with the graph's ops (the composite rule `#[grad]`
//! used before the fused node: means, `rsqrt` and column sums), on
//! `[8192, 768]` bf16 and `[16384, 4096]` f32; and the static memory plan
//! of a training step (`GRAD_PEAK_BYTES`) against the caching allocator's
//! measured peak.
//!
//! Compare with `scripts/torch_baseline.py` (cases `layer_norm_bwd` and
//! `grad_peak`) through `scripts/bench-report`.
//! Run: `cargo bench --bench gpu_norm_backward -- --quick`.

mod common;

use common::*;
use tensorfn::prelude::*;
use tensorfn::{cuda_memory_stats, FloatDType};

type Rows<T> = Tensor<Cuda, T, shape![_, _]>;
type Row<T> = Tensor<Cuda, T, shape![_]>;

/// The gradients of `layer_norm(x, w, b, 1e-5)` for `g`, written with the
/// graph's ops: the statistics recomputed from `x`, then PyTorch's
/// formulas over the last dim.
macro_rules! composite {
    ($name:ident, $t:ty) => {
        tensor_fn! {
            fn $name(
                x: &Tensor<Cuda, $t, [R, N]>,
                w: &Tensor<Cuda, $t, [N]>,
                g: &Tensor<Cuda, $t, [R, N]>,
            ) -> (Tensor<Cuda, $t, [R, N]>, Tensor<Cuda, $t, [N]>, Tensor<Cuda, $t, [N]>) {
                let xc = x - x.mean(1, keepdim = true);
                let r = rsqrt((xc * xc).mean(1, keepdim = true) + 1e-5);
                let xhat = xc * r;
                let gh = g * w;
                let dx = r * (gh - gh.mean(1, keepdim = true) - xhat * (gh * xhat).mean(1, keepdim = true));
                (dx, (g * xhat).sum(0), g.sum(0))
            }
        }
    };
}
composite!(composite_bf16, bf16);
composite!(composite_f32, f32);

/// `dx` of `layer_norm` for one row, in f64.
fn dx_row(x: &[f64], w: &[f64], g: &[f64], eps: f64) -> Vec<f64> {
    let n = x.len() as f64;
    let mu = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / n;
    let r = 1.0 / (var + eps).sqrt();
    let xhat: Vec<f64> = x.iter().map(|v| (v - mu) * r).collect();
    let gh: Vec<f64> = g.iter().zip(w).map(|(g, w)| g * w).collect();
    let m1 = gh.iter().sum::<f64>() / n;
    let m2 = gh.iter().zip(&xhat).map(|(a, b)| a * b).sum::<f64>() / n;
    gh.iter()
        .zip(&xhat)
        .map(|(gh, xh)| r * (gh - m1 - xh * m2))
        .collect()
}

type Grads<T> = (Rows<T>, Row<T>, Row<T>);
/// A function computing [`Grads`] from `x`, `weight` and `grad_output`.
type Backward<T> = fn(&Rows<T>, &Row<T>, &Rows<T>) -> Result<Grads<T>>;

fn bench_layer_norm<T: FloatDType>(
    args: &Args,
    (rows, cols): (usize, usize),
    composite: Backward<T>,
) {
    let plan = args.plan();
    let dtype = dtype_name::<T>();
    let es = std::mem::size_of::<T>();
    // Read x and g, write dx (the weight-sized vectors aside).
    let case = Case::new(
        "layer_norm_bwd",
        dtype,
        format!("{rows}x{cols}"),
        (3 * rows * cols * es) as u64,
        (10 * rows * cols) as u64,
    );
    let sets = n_sets(2 * rows * cols * es, GPU_ROTATE_BYTES, 16);
    let check_rows = 16.min(rows);
    let run = |fused: bool| -> Result<(Timing, Check)> {
        let hx = random_vec::<T>(rows * cols, 1, -2.0, 2.0);
        let hw = random_vec::<T>(cols, 2, 0.5, 1.5);
        let hg = random_vec::<T>(rows * cols, 3, -1.0, 1.0);
        let w = Row::<T>::from_vec_dims(hw.clone(), &[cols])?;
        let mut inputs = vec![(
            Rows::<T>::from_vec_dims(hx.clone(), &[rows, cols])?,
            Rows::<T>::from_vec_dims(hg.clone(), &[rows, cols])?,
        )];
        for s in 1..sets {
            let seed = 10 + 2 * s as u64;
            inputs.push((
                Rows::<T>::from_vec_dims(random_vec(rows * cols, seed, -2.0, 2.0), &[rows, cols])?,
                Rows::<T>::from_vec_dims(
                    random_vec(rows * cols, seed + 1, -1.0, 1.0),
                    &[rows, cols],
                )?,
            ));
        }
        let call = |i: usize| -> Result<Grads<T>> {
            let (x, g) = &inputs[i];
            if fused {
                x.layer_norm_backward(&w, g, 1e-5)
            } else {
                composite(x, &w, g)
            }
        };
        let dx = call(0)?.0.to_vec()?;
        let (x64, w64, g64) = (f64s(&hx), f64s(&hw), f64s(&hg));
        let check = check_pairs(
            (0..check_rows).flat_map(|r| {
                let s = r * cols..(r + 1) * cols;
                let want = dx_row(&x64[s.clone()], &w64, &g64[s.clone()], 1e-5);
                dx[s]
                    .iter()
                    .zip(want)
                    .map(|(a, b)| (a.to_f64(), b))
                    .collect::<Vec<_>>()
            }),
            elementwise_tol(dtype),
        );
        let t = time_call(&plan, sets, |i| call(i).map(drop), &sync_cuda)?;
        Ok((t, check))
    };
    for (imp, fused) in [("tensorfn", true), ("tensorfn_composite", false)] {
        match run(fused) {
            Ok((t, check)) => case.emit(imp, &t, Some(check)),
            Err(e) => case.emit_error(imp, &e),
        }
    }
}

// A training step's loss with static shapes: a pre-norm MLP block. Every
// tensor is a multiple of 2 MiB, the allocator's grain above 1 MiB, so
// the measured peak can equal the plan's.
tensor_fn! {
    #[grad(w1, w2, ln_w, ln_b)]
    fn block_loss(
        x: &Tensor<Cuda, f32, [1024, 512]>,
        ln_w: &Tensor<Cuda, f32, [512]>,
        ln_b: &Tensor<Cuda, f32, [512]>,
        w1: &Tensor<Cuda, f32, [512, 2048]>,
        w2: &Tensor<Cuda, f32, [2048, 512]>,
    ) -> Tensor<Cuda, f32, []> {
        let h = layer_norm(x, ln_w, ln_b, 1e-5);
        let a = gelu(h.matmul(w1));
        let y = x + a.matmul(w2);
        (y * y).mean()
    }
}

/// `block_loss::GRAD_PEAK_BYTES` against the allocator's peak over one
/// `value_and_grad` call made right after the inputs are allocated (the
/// allocator's peak never decreases, so this is the first call).
fn grad_peak() -> Result<()> {
    let f = |n: usize, seed: u64| random_vec::<f32>(n, seed, -1.0, 1.0);
    let x = Tensor::<Cuda, f32, shape![1024, 512]>::from_vec(f(1024 * 512, 1))?;
    let ln_w = Tensor::<Cuda, f32, shape![512]>::from_vec(f(512, 2))?;
    let ln_b = Tensor::<Cuda, f32, shape![512]>::from_vec(f(512, 3))?;
    let w1 = Tensor::<Cuda, f32, shape![512, 2048]>::from_vec(f(512 * 2048, 4))?;
    let w2 = Tensor::<Cuda, f32, shape![2048, 512]>::from_vec(f(2048 * 512, 5))?;
    sync_cuda()?;
    let before = cuda_memory_stats(0)?;
    let (loss, grads) = block_loss::value_and_grad(&x, &ln_w, &ln_b, &w1, &w2)?;
    sync_cuda()?;
    let after = cuda_memory_stats(0)?;
    let measured = after.peak_allocated_bytes - before.allocated_bytes;
    let loss = loss.to_vec()?[0];
    drop(grads);
    println!(
        "{{\"case\": \"grad_peak\", \"dtype\": \"f32\", \"size\": \"block_1024x512x2048\", \"impl\": \"tensorfn\", \"plan_bytes\": {}, \"forward_plan_bytes\": {}, \"measured_peak_bytes\": {measured}, \"loss\": {loss}}}",
        block_loss::GRAD_PEAK_BYTES,
        block_loss::PEAK_BYTES,
    );
    Ok(())
}

fn main() {
    let args = Args::parse();
    emit_meta("gpu_norm_backward", &args);
    if let Err(e) = sync_cuda() {
        emit_skipped("gpu_norm_backward", &e);
        return;
    }
    // First, while the allocator's peak is still that of the inputs.
    if args.wants("grad_peak") {
        if let Err(e) = grad_peak() {
            Case::new("grad_peak", "f32", "block_1024x512x2048", 0, 0).emit_error("tensorfn", &e);
        }
    }
    if args.wants("layer_norm_bwd") {
        bench_layer_norm::<bf16>(&args, (8192, 768), composite_bf16);
        bench_layer_norm::<f32>(&args, (16384, 4096), composite_f32);
    }
}
