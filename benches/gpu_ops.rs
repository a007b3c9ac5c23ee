//! Memory-bound operations on the GPU: `cat` of 2 and 8 inputs along
//! dim 1, and softmax over rows of 4096; and causal bf16
//! `scaled_dot_product_attention` of `[B, H, T, D]` tensors.
//!
//! Compare with `scripts/torch_baseline.py` (cases `cat2`, `cat8`,
//! `softmax`, `attention`) through `scripts/bench-report`.
//! Run: `cargo bench --bench gpu_ops -- --quick`.

mod common;

use common::*;
use tensorfn::prelude::*;
use tensorfn::{AttentionArgs, FloatDType};

type Matrix<T> = Tensor<Cuda, T, shape![_, _]>;

/// Output (rows, cols) of the `cat` cases; each of the k inputs has
/// cols / k columns.
fn cat_shapes(args: &Args) -> Vec<(usize, usize)> {
    if args.quick {
        vec![(4096, 2048)]
    } else {
        vec![(4096, 2048), (4096, 16384)]
    }
}

/// Row counts of the softmax cases (rows of 4096).
fn softmax_rows(args: &Args) -> Vec<usize> {
    if args.quick {
        vec![4096]
    } else {
        vec![256, 4096, 32768]
    }
}

fn bench_cat<T: FloatDType>(args: &Args, parts: usize, rows: usize, cols: usize) {
    let plan = args.plan();
    let dtype = dtype_name::<T>();
    let es = std::mem::size_of::<T>();
    let name = format!("cat{parts}");
    let case = Case::new(
        &name,
        dtype,
        format!("{rows}x{cols}"),
        (2 * rows * cols * es) as u64,
        0,
    );
    let w = cols / parts;
    let sets = n_sets(rows * cols * es, GPU_ROTATE_BYTES, 64);
    let run = || -> Result<(Timing, Check)> {
        let mut host0 = Vec::new();
        let mut inputs: Vec<Vec<Matrix<T>>> = Vec::with_capacity(sets);
        for s in 0..sets {
            let mut set = Vec::with_capacity(parts);
            for p in 0..parts {
                let data = random_vec::<T>(rows * w, (s * parts + p) as u64, -2.0, 2.0);
                if s == 0 {
                    host0.push(data.clone());
                }
                set.push(Matrix::<T>::from_vec_dims(data, &[rows, w])?);
            }
            inputs.push(set);
        }
        let cat = |set: &[Matrix<T>]| -> Result<Matrix<T>> {
            if let [a, b] = set {
                a.cat::<1, shape![_, _]>(b)
            } else {
                Tensor::cat_slice::<1, shape![_, _]>(&set.iter().collect::<Vec<_>>())
            }
        };
        let out = cat(&inputs[0])?.to_vec()?;
        // A copy must be exact: compare every element.
        let check = check_pairs(
            (0..rows * cols).map(|i| {
                let (r, c) = (i / cols, i % cols);
                (out[i].to_f64(), host0[c / w][r * w + c % w].to_f64())
            }),
            0.0,
        );
        let t = time_call(&plan, sets, |i| cat(&inputs[i]).map(drop), &sync_cuda)?;
        Ok((t, check))
    };
    match run() {
        Ok((t, check)) => case.emit("tensorfn", &t, Some(check)),
        Err(e) => case.emit_error("tensorfn", &e),
    }
}

fn bench_softmax<T: FloatDType>(args: &Args, rows: usize) {
    let plan = args.plan();
    let dtype = dtype_name::<T>();
    let es = std::mem::size_of::<T>();
    let cols = 4096;
    let case = Case::new(
        "softmax",
        dtype,
        format!("{rows}x{cols}"),
        (2 * rows * cols * es) as u64,
        (5 * rows * cols) as u64,
    );
    let sets = n_sets(rows * cols * es, GPU_ROTATE_BYTES, 64);
    let host0 = random_vec::<T>(rows * cols, 0, -4.0, 4.0);
    let run = || -> Result<(Timing, Check)> {
        let mut inputs = Vec::with_capacity(sets);
        for s in 0..sets {
            let data = if s == 0 {
                host0.clone()
            } else {
                random_vec::<T>(rows * cols, s as u64, -4.0, 4.0)
            };
            inputs.push(Matrix::<T>::from_vec_dims(data, &[rows, cols])?);
        }
        let out = inputs[0].softmax::<1>()?.to_vec()?;
        let check = check_pairs(
            [0, rows / 2, rows - 1].iter().flat_map(|&r| {
                let x = f64s(&host0[r * cols..(r + 1) * cols]);
                let max = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = x.iter().map(|v| (v - max).exp()).sum();
                let got = &out[r * cols..(r + 1) * cols];
                x.iter()
                    .zip(got)
                    .map(|(v, g)| (g.to_f64(), (v - max).exp() / sum))
                    .collect::<Vec<_>>()
            }),
            elementwise_tol(dtype),
        );
        let t = time_call(
            &plan,
            sets,
            |i| inputs[i].softmax::<1>().map(drop),
            &sync_cuda,
        )?;
        Ok((t, check))
    };
    match run() {
        Ok((t, check)) => case.emit("tensorfn", &t, Some(check)),
        Err(e) => case.emit_error("tensorfn", &e),
    }
}

/// `[B, H, T, D]` of the attention cases.
fn attention_shapes(args: &Args) -> Vec<[usize; 4]> {
    if args.quick {
        vec![[8, 12, 1024, 64]]
    } else {
        vec![[8, 12, 1024, 64], [4, 16, 4096, 128], [1, 32, 8192, 128]]
    }
}

fn bench_attention<T: FloatDType>(args: &Args, [b, h, t, d]: [usize; 4]) {
    type Heads<T> = Tensor<Cuda, T, shape![_, _, _, _]>;
    let plan = args.plan();
    let dtype = dtype_name::<T>();
    let es = std::mem::size_of::<T>();
    let n = b * h * t * d;
    // Causal: half the scores; two products of 2 * d flops each.
    let case = Case::new(
        "attention",
        dtype,
        format!("B{b}xH{h}xT{t}xD{d}"),
        (4 * n * es) as u64,
        (2 * b * h * t * t * d) as u64,
    );
    let run = || -> Result<(Timing, Check)> {
        let host: Vec<Vec<T>> = (0..3).map(|s| random_vec::<T>(n, s, -2.0, 2.0)).collect();
        let [q, k, v] =
            [0, 1, 2].map(|s| Heads::<T>::from_vec_dims(host[s].clone(), &[b, h, t, d]));
        let (q, k, v) = (q?, k?, v?);
        let attend =
            || q.scaled_dot_product_attention(&k, &v, AttentionArgs::new().is_causal(true));
        let out = attend()?.to_vec()?;
        // Three query rows of the first head against an f64 reference.
        let (hq, hk, hv) = (f64s(&host[0]), f64s(&host[1]), f64s(&host[2]));
        let scale = 1.0 / (d as f64).sqrt();
        let check = check_pairs(
            [0, t / 2, t - 1].into_iter().flat_map(|i| {
                let s: Vec<f64> = (0..=i)
                    .map(|j| (0..d).map(|c| hq[i * d + c] * hk[j * d + c]).sum::<f64>() * scale)
                    .collect();
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
                let want: Vec<f64> = (0..d)
                    .map(|c| {
                        s.iter()
                            .enumerate()
                            .map(|(j, x)| (x - m).exp() * hv[j * d + c])
                            .sum::<f64>()
                            / z
                    })
                    .collect();
                (0..d)
                    .map(|c| (out[i * d + c].to_f64(), want[c]))
                    .collect::<Vec<_>>()
            }),
            matmul_tol(dtype),
        );
        let t = time_call(&plan, 1, |_| attend().map(drop), &sync_cuda)?;
        Ok((t, check))
    };
    match run() {
        Ok((t, check)) => case.emit("tensorfn", &t, Some(check)),
        Err(e) => case.emit_error("tensorfn", &e),
    }
}

fn main() {
    let args = Args::parse();
    emit_meta("gpu_ops", &args);
    if let Err(e) = sync_cuda() {
        emit_skipped("gpu_ops", &e);
        return;
    }
    for parts in [2, 8] {
        if !args.wants(&format!("cat{parts}")) {
            continue;
        }
        for (rows, cols) in cat_shapes(&args) {
            bench_cat::<f32>(&args, parts, rows, cols);
            bench_cat::<bf16>(&args, parts, rows, cols);
        }
    }
    if args.wants("softmax") {
        for rows in softmax_rows(&args) {
            bench_softmax::<f32>(&args, rows);
            bench_softmax::<f16>(&args, rows);
            bench_softmax::<bf16>(&args, rows);
        }
    }
    if args.wants("attention") {
        for shape in attention_shapes(&args) {
            bench_attention::<bf16>(&args, shape);
        }
    }
}
