//! CPU cases, tensorfn against ndarray (and NumPy through
//! `scripts/cpu_baseline.py`): f32 matrix products of 256 to 2048, the
//! fused elementwise chains (written with `tensor_fn!`) and softmax over
//! rows of 4096.
//!
//! Run with two threads on both sides:
//! `RAYON_NUM_THREADS=2 cargo bench --bench cpu -- --quick`.
//! ndarray is used as configured in this workspace (default features:
//! matrixmultiply without its threading feature, so one thread).

mod common;

use common::*;
use ndarray::{Array1, Array2, Axis, Zip};
use tensorfn::prelude::*;

type Vector = Tensor<Cpu, f32, shape![_]>;
type Matrix = Tensor<Cpu, f32, shape![_, _]>;

tensor_fn! {
    /// `sin(x) * 2 + 5`: three ops, one loop.
    fn sin_affine(x: &Tensor<Cpu, f32, [N]>) -> Tensor<Cpu, f32, [N]> {
        sin(x) * 2.0 + 5.0
    }

    /// GELU, tanh approximation.
    fn gelu_tanh(x: &Tensor<Cpu, f32, [N]>) -> Tensor<Cpu, f32, [N]> {
        x * 0.5 * (tanh((x + x * x * x * 0.044715) * 0.7978846) + 1.0)
    }

    /// Six ops over two inputs: mul, add, sigmoid, mul, tanh, sub.
    fn chain6(x: &Tensor<Cpu, f32, [N]>, y: &Tensor<Cpu, f32, [N]>) -> Tensor<Cpu, f32, [N]> {
        tanh(sigmoid(x * y + 1.0) * x) - y
    }
}

fn no_sync() -> Result<()> {
    Ok(())
}

fn report(case: &Case, imp: &str, r: Result<(Timing, Check)>) {
    match r {
        Ok((t, c)) => case.emit(imp, &t, Some(c)),
        Err(e) => case.emit_error(imp, &e),
    }
}

// ------------------------------------------------------------- matmul

fn bench_matmul(args: &Args, n: usize) {
    let plan = args.cpu_plan();
    let case = Case::new(
        "cpu_matmul",
        "f32",
        format!("{n}x{n}x{n}"),
        (3 * n * n * 4) as u64,
        (2 * n * n * n) as u64,
    );
    let sets = n_sets(2 * n * n * 4, CPU_ROTATE_BYTES, 16);
    let host: Vec<(Vec<f32>, Vec<f32>)> = (0..sets as u64)
        .map(|s| {
            (
                random_vec::<f32>(n * n, 2 * s, -1.0, 1.0),
                random_vec::<f32>(n * n, 2 * s + 1, -1.0, 1.0),
            )
        })
        .collect();
    // Rows 0 and n-1 of set 0 in f64.
    let (a0, b0) = &host[0];
    let reference: Vec<(usize, Vec<f64>)> = [0, n - 1]
        .iter()
        .map(|&r| {
            let mut row = vec![0.0f64; n];
            for k in 0..n {
                let av = a0[r * n + k] as f64;
                for (o, bv) in row.iter_mut().zip(&b0[k * n..(k + 1) * n]) {
                    *o += av * *bv as f64;
                }
            }
            (r, row)
        })
        .collect();
    let check = |out: &[f32]| {
        check_pairs(
            reference.iter().flat_map(|(r, row)| {
                out[r * n..(r + 1) * n]
                    .iter()
                    .map(|v| *v as f64)
                    .zip(row.iter().copied())
                    .collect::<Vec<_>>()
            }),
            matmul_tol("f32"),
        )
    };

    let ours = || -> Result<(Timing, Check)> {
        let ts = host
            .iter()
            .map(|(a, b)| {
                Ok((
                    Matrix::from_vec_dims(a.clone(), &[n, n])?,
                    Matrix::from_vec_dims(b.clone(), &[n, n])?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let out: Matrix = ts[0].0.matmul(&ts[0].1)?;
        let c = check(&out.to_vec()?);
        let t = time_call(
            &plan,
            sets,
            |i| {
                let out: Matrix = ts[i].0.matmul(&ts[i].1)?;
                drop(out);
                Ok(())
            },
            &no_sync,
        )?;
        Ok((t, c))
    };
    report(&case, "tensorfn", ours());

    let nd = || -> Result<(Timing, Check)> {
        let arrays: Vec<(Array2<f32>, Array2<f32>)> = host
            .iter()
            .map(|(a, b)| {
                (
                    Array2::from_shape_vec((n, n), a.clone()).expect("n*n elements"),
                    Array2::from_shape_vec((n, n), b.clone()).expect("n*n elements"),
                )
            })
            .collect();
        let out = arrays[0].0.dot(&arrays[0].1);
        let c = check(out.as_slice().expect("standard layout"));
        let t = time_call(
            &plan,
            sets,
            |i| {
                drop(arrays[i].0.dot(&arrays[i].1));
                Ok(())
            },
            &no_sync,
        )?;
        Ok((t, c))
    };
    report(&case, "ndarray", nd());
}

// ---------------------------------------------------------- elementwise

#[derive(Clone, Copy)]
enum Kind {
    SinAffine,
    GeluTanh,
    Chain6,
}

struct Chain {
    name: &'static str,
    kind: Kind,
    inputs: usize,
    flops: u64,
    reference: fn(f64, f64) -> f64,
}

const CHAINS: [Chain; 3] = [
    Chain {
        name: "cpu_ew_sin_affine",
        kind: Kind::SinAffine,
        inputs: 1,
        flops: 3,
        reference: |x, _| x.sin() * 2.0 + 5.0,
    },
    Chain {
        name: "cpu_ew_gelu_tanh",
        kind: Kind::GeluTanh,
        inputs: 1,
        flops: 9,
        reference: |x, _| 0.5 * x * (1.0 + (0.797_884_6 * (x + 0.044715 * x * x * x)).tanh()),
    },
    Chain {
        name: "cpu_ew_chain6",
        kind: Kind::Chain6,
        inputs: 2,
        flops: 6,
        reference: |x, y| (x * (1.0 / (1.0 + (-(x * y + 1.0)).exp()))).tanh() - y,
    },
];

fn launch(kind: Kind, x: &Vector, y: &Vector) -> Result<Vector> {
    match kind {
        Kind::SinAffine => sin_affine(x),
        Kind::GeluTanh => gelu_tanh(x),
        Kind::Chain6 => chain6(x, y),
    }
}

/// The idiomatic ndarray version: one `mapv` / `Zip` pass, one thread.
fn launch_ndarray(kind: Kind, x: &Array1<f32>, y: &Array1<f32>) -> Array1<f32> {
    match kind {
        Kind::SinAffine => x.mapv(|v| v.sin() * 2.0 + 5.0),
        Kind::GeluTanh => {
            x.mapv(|v| 0.5 * v * (1.0 + (0.797_884_6 * (v + 0.044715 * v * v * v)).tanh()))
        }
        Kind::Chain6 => Zip::from(x)
            .and(y)
            .map_collect(|&a, &b| (a * (1.0 / (1.0 + (-(a * b + 1.0)).exp()))).tanh() - b),
    }
}

fn bench_chains(args: &Args, n: usize) {
    let plan = args.cpu_plan();
    let sets = n_sets(2 * n * 4, CPU_ROTATE_BYTES, 16);
    let host: Vec<(Vec<f32>, Vec<f32>)> = (0..sets as u64)
        .map(|s| {
            (
                random_vec::<f32>(n, 2 * s, -2.0, 2.0),
                random_vec::<f32>(n, 2 * s + 1, -2.0, 2.0),
            )
        })
        .collect();
    let tensors = host
        .iter()
        .map(|(x, y)| {
            Ok((
                Vector::from_vec_dims(x.clone(), &[n])?,
                Vector::from_vec_dims(y.clone(), &[n])?,
            ))
        })
        .collect::<Result<Vec<_>>>();
    let arrays: Vec<(Array1<f32>, Array1<f32>)> = host
        .iter()
        .map(|(x, y)| (Array1::from(x.clone()), Array1::from(y.clone())))
        .collect();
    let (hx, hy) = &host[0];
    for chain in CHAINS.iter().filter(|c| args.wants(c.name)) {
        let case = Case::new(
            chain.name,
            "f32",
            n,
            ((chain.inputs + 1) * n * 4) as u64,
            chain.flops * n as u64,
        );
        let check = |out: &[f32]| {
            check_pairs(
                sample_indices(n, 1 << 16)
                    .map(|i| (out[i] as f64, (chain.reference)(hx[i] as f64, hy[i] as f64))),
                elementwise_tol("f32"),
            )
        };
        let ours = || -> Result<(Timing, Check)> {
            let ts = tensors.as_ref().map_err(Clone::clone)?;
            let c = check(&launch(chain.kind, &ts[0].0, &ts[0].1)?.to_vec()?);
            let t = time_call(
                &plan,
                sets,
                |i| launch(chain.kind, &ts[i].0, &ts[i].1).map(drop),
                &no_sync,
            )?;
            Ok((t, c))
        };
        report(&case, "tensorfn", ours());
        let nd = || -> Result<(Timing, Check)> {
            let out = launch_ndarray(chain.kind, &arrays[0].0, &arrays[0].1);
            let c = check(out.as_slice().expect("standard layout"));
            let t = time_call(
                &plan,
                sets,
                |i| {
                    drop(launch_ndarray(chain.kind, &arrays[i].0, &arrays[i].1));
                    Ok(())
                },
                &no_sync,
            )?;
            Ok((t, c))
        };
        report(&case, "ndarray", nd());
    }
}

// -------------------------------------------------------------- softmax

fn softmax_ndarray(x: &Array2<f32>) -> Array2<f32> {
    let mut out = x.clone();
    for mut row in out.axis_iter_mut(Axis(0)) {
        let max = row.fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        row.mapv_inplace(|v| (v - max).exp());
        let sum = row.sum();
        row.mapv_inplace(|v| v / sum);
    }
    out
}

fn bench_softmax(args: &Args, rows: usize) {
    let plan = args.cpu_plan();
    let cols = 4096;
    let case = Case::new(
        "cpu_softmax",
        "f32",
        format!("{rows}x{cols}"),
        (2 * rows * cols * 4) as u64,
        (5 * rows * cols) as u64,
    );
    let sets = n_sets(rows * cols * 4, CPU_ROTATE_BYTES, 16);
    let host: Vec<Vec<f32>> = (0..sets as u64)
        .map(|s| random_vec::<f32>(rows * cols, s, -4.0, 4.0))
        .collect();
    let check = |out: &[f32]| {
        check_pairs(
            [0, rows / 2, rows - 1].iter().flat_map(|&r| {
                let x = f64s(&host[0][r * cols..(r + 1) * cols]);
                let max = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = x.iter().map(|v| (v - max).exp()).sum();
                out[r * cols..(r + 1) * cols]
                    .iter()
                    .zip(x.clone())
                    .map(|(g, v)| (*g as f64, (v - max).exp() / sum))
                    .collect::<Vec<_>>()
            }),
            elementwise_tol("f32"),
        )
    };
    let ours = || -> Result<(Timing, Check)> {
        let ts = host
            .iter()
            .map(|h| Matrix::from_vec_dims(h.clone(), &[rows, cols]))
            .collect::<Result<Vec<_>>>()?;
        let c = check(&ts[0].softmax::<1>()?.to_vec()?);
        let t = time_call(&plan, sets, |i| ts[i].softmax::<1>().map(drop), &no_sync)?;
        Ok((t, c))
    };
    report(&case, "tensorfn", ours());
    let nd = || -> Result<(Timing, Check)> {
        let arrays: Vec<Array2<f32>> = host
            .iter()
            .map(|h| Array2::from_shape_vec((rows, cols), h.clone()).expect("rows*cols elements"))
            .collect();
        let c = check(
            softmax_ndarray(&arrays[0])
                .as_slice()
                .expect("standard layout"),
        );
        let t = time_call(
            &plan,
            sets,
            |i| {
                drop(softmax_ndarray(&arrays[i]));
                Ok(())
            },
            &no_sync,
        )?;
        Ok((t, c))
    };
    report(&case, "ndarray", nd());
}

fn main() {
    let args = Args::parse();
    emit_meta("cpu", &args);
    // The comparison with NumPy is defined at a fixed thread count; an
    // unset pool would take every core of the machine it lands on.
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        emit_skipped(
            "cpu",
            &"set RAYON_NUM_THREADS=2 and OPENBLAS_NUM_THREADS=2 to run the CPU comparison",
        );
        return;
    }
    if args.wants("cpu_matmul") {
        let sizes: &[usize] = if args.quick {
            &[256, 1024]
        } else {
            &[256, 512, 1024, 2048]
        };
        for &n in sizes {
            bench_matmul(&args, n);
        }
    }
    let ew_sizes: &[usize] = if args.quick {
        &[1 << 20]
    } else {
        &[1 << 20, 1 << 22, 1 << 24]
    };
    for &n in ew_sizes {
        bench_chains(&args, n);
    }
    if args.wants("cpu_softmax") {
        let rows: &[usize] = if args.quick {
            &[256]
        } else {
            &[256, 1024, 4096]
        };
        for &r in rows {
            bench_softmax(&args, r);
        }
    }
}
