//! Matrix products on the GPU: `addmm` (bias of N, square 1024-8192 and
//! skinny batch 1-64 × 4096 × 4096) and batched `bmm`, in f32, f16 and
//! bf16, through the typed method API.
//!
//! Compare with `scripts/torch_baseline.py` (cases `addmm`, `bmm`) through
//! `scripts/bench-report`. Run: `cargo bench --bench gpu_matmul -- --quick`.

mod common;

use common::*;
use tensorfn::prelude::*;
use tensorfn::FloatDType;

type Vector<T> = Tensor<Cuda, T, shape![_]>;
type Matrix<T> = Tensor<Cuda, T, shape![_, _]>;
type Batch<T> = Tensor<Cuda, T, shape![_, _, _]>;

/// (M, K, N) of the `addmm` cases.
fn addmm_shapes(args: &Args) -> Vec<(usize, usize, usize)> {
    let (square, skinny): (&[usize], &[usize]) = if args.quick {
        (&[1024, 4096], &[1, 64])
    } else {
        (&[1024, 2048, 4096, 8192], &[1, 8, 16, 32, 64])
    };
    square
        .iter()
        .map(|&m| (m, m, m))
        .chain(skinny.iter().map(|&m| (m, 4096, 4096)))
        .collect()
}

/// (B, M, K, N) of the `bmm` cases.
fn bmm_shapes(args: &Args) -> Vec<(usize, usize, usize, usize)> {
    if args.quick {
        vec![(32, 512, 512, 512)]
    } else {
        vec![
            (128, 128, 128, 128),
            (32, 512, 512, 512),
            (8, 2048, 2048, 2048),
        ]
    }
}

/// Uniform in [-1, 1): sums of K products stay O(sqrt(K)), far from the
/// f16 range.
fn host<T: FloatDType>(n: usize, seed: u64) -> Vec<T> {
    random_vec::<T>(n, seed, -1.0, 1.0)
}

/// Row `r` of `bias + a @ b` in f64, for `a` (M, K) and `b` (K, N) row-major.
fn addmm_row<T: FloatDType>(
    bias: &[T],
    a: &[T],
    b: &[T],
    k: usize,
    n: usize,
    r: usize,
) -> Vec<f64> {
    let mut row: Vec<f64> = bias.iter().map(|v| v.to_f64()).collect();
    for (kk, av) in a[r * k..(r + 1) * k].iter().enumerate() {
        let av = av.to_f64();
        for (o, bv) in row.iter_mut().zip(&b[kk * n..(kk + 1) * n]) {
            *o += av * bv.to_f64();
        }
    }
    row
}

fn bench_addmm<T: FloatDType>(args: &Args, m: usize, k: usize, n: usize) {
    let plan = args.plan();
    let dtype = dtype_name::<T>();
    let es = std::mem::size_of::<T>();
    let set_bytes = (m * k + k * n + n) * es;
    let case = Case::new(
        "addmm",
        dtype,
        format!("{m}x{k}x{n}"),
        (set_bytes + m * n * es) as u64,
        (2 * m * k * n) as u64,
    );
    let sets = n_sets(set_bytes, GPU_ROTATE_BYTES, 64);
    let (hb, ha, hw) = (host::<T>(n, 1), host::<T>(m * k, 2), host::<T>(k * n, 3));
    let run = || -> Result<(Timing, Check)> {
        let mut inputs = Vec::with_capacity(sets);
        for s in 0..sets as u64 {
            let fresh = |len, seed| {
                if s == 0 {
                    None
                } else {
                    Some(host::<T>(len, seed))
                }
            };
            inputs.push((
                Vector::<T>::from_vec_dims(
                    fresh(n, 10 * s + 1).unwrap_or_else(|| hb.clone()),
                    &[n],
                )?,
                Matrix::<T>::from_vec_dims(
                    fresh(m * k, 10 * s + 2).unwrap_or_else(|| ha.clone()),
                    &[m, k],
                )?,
                Matrix::<T>::from_vec_dims(
                    fresh(k * n, 10 * s + 3).unwrap_or_else(|| hw.clone()),
                    &[k, n],
                )?,
            ));
        }
        let (b0, a0, w0) = &inputs[0];
        let out: Matrix<T> = Tensor::addmm(b0, a0, w0)?;
        let out = out.to_vec()?;
        let rows = [0, m / 2, m - 1];
        let check = check_pairs(
            rows.iter().flat_map(|&r| {
                let want = addmm_row(&hb, &ha, &hw, k, n, r);
                let got = &out[r * n..(r + 1) * n];
                got.iter().map(|g| g.to_f64()).zip(want).collect::<Vec<_>>()
            }),
            matmul_tol(dtype),
        );
        let t = time_call(
            &plan,
            sets,
            |i| {
                let (b, a, w) = &inputs[i];
                let out: Matrix<T> = Tensor::addmm(b, a, w)?;
                drop(out);
                Ok(())
            },
            &sync_cuda,
        )?;
        Ok((t, check))
    };
    match run() {
        Ok((t, check)) => case.emit("tensorfn", &t, Some(check)),
        Err(e) => case.emit_error("tensorfn", &e),
    }
}

fn bench_bmm<T: FloatDType>(args: &Args, b: usize, m: usize, k: usize, n: usize) {
    let plan = args.plan();
    let dtype = dtype_name::<T>();
    let es = std::mem::size_of::<T>();
    let set_bytes = b * (m * k + k * n) * es;
    let case = Case::new(
        "bmm",
        dtype,
        format!("{b}x{m}x{k}x{n}"),
        (set_bytes + b * m * n * es) as u64,
        (2 * b * m * k * n) as u64,
    );
    let sets = n_sets(set_bytes, GPU_ROTATE_BYTES, 64);
    let (ha, hw) = (host::<T>(b * m * k, 4), host::<T>(b * k * n, 5));
    let run = || -> Result<(Timing, Check)> {
        let mut inputs = Vec::with_capacity(sets);
        for s in 0..sets as u64 {
            let (a, w) = if s == 0 {
                (ha.clone(), hw.clone())
            } else {
                (
                    host::<T>(b * m * k, 10 * s + 4),
                    host::<T>(b * k * n, 10 * s + 5),
                )
            };
            inputs.push((
                Batch::<T>::from_vec_dims(a, &[b, m, k])?,
                Batch::<T>::from_vec_dims(w, &[b, k, n])?,
            ));
        }
        let out: Batch<T> = inputs[0].0.bmm(&inputs[0].1)?;
        let out = out.to_vec()?;
        let zeros = vec![T::from_f64(0.0); n];
        // Row 0 of the first batch and the last row of the last one.
        let picks = [(0, 0), (b - 1, m - 1)];
        let check = check_pairs(
            picks.iter().flat_map(|&(bi, r)| {
                let a = &ha[bi * m * k..(bi + 1) * m * k];
                let w = &hw[bi * k * n..(bi + 1) * k * n];
                let want = addmm_row(&zeros, a, w, k, n, r);
                let start = (bi * m + r) * n;
                out[start..start + n]
                    .iter()
                    .map(|g| g.to_f64())
                    .zip(want)
                    .collect::<Vec<_>>()
            }),
            matmul_tol(dtype),
        );
        let t = time_call(
            &plan,
            sets,
            |i| {
                let (a, w) = &inputs[i];
                a.bmm(w).map(drop)
            },
            &sync_cuda,
        )?;
        Ok((t, check))
    };
    match run() {
        Ok((t, check)) => case.emit("tensorfn", &t, Some(check)),
        Err(e) => case.emit_error("tensorfn", &e),
    }
}

fn bench_dtype<T: FloatDType>(args: &Args) {
    if args.wants("addmm") {
        for (m, k, n) in addmm_shapes(args) {
            bench_addmm::<T>(args, m, k, n);
        }
    }
    if args.wants("bmm") {
        for (b, m, k, n) in bmm_shapes(args) {
            bench_bmm::<T>(args, b, m, k, n);
        }
    }
}

fn main() {
    let args = Args::parse();
    emit_meta("gpu_matmul", &args);
    if let Err(e) = sync_cuda() {
        emit_skipped("gpu_matmul", &e);
        return;
    }
    bench_dtype::<f32>(&args);
    bench_dtype::<f16>(&args);
    bench_dtype::<bf16>(&args);
}
