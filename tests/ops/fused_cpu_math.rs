//! The CPU side of `tensor_fn!`'s fused kernels: transcendental functions
//! in f32, f16, bf16 and f64, on contiguous inputs large enough to be split
//! over threads, on transposed views and on special values, against f64
//! references.

use tensorfn::prelude::*;

type Vector<T> = Tensor<Cpu, T, shape![_]>;
type Matrix<T> = Tensor<Cpu, T, shape![_, _]>;

tensor_fn! {
    fn trig(x: &Tensor<Cpu, f32, [N]>) -> Tensor<Cpu, f32, [N]> {
        sin(x) * 2.0 + cos(x)
    }

    fn activations(x: &Tensor<Cpu, f32, [N]>) -> Tensor<Cpu, f32, [N]> {
        tanh(x) + sigmoid(x) * exp(x * 0.25) + gelu(x) - silu(x)
    }

    fn logarithm(x: &Tensor<Cpu, f32, [N]>) -> Tensor<Cpu, f32, [N]> {
        log(x * x + 0.5)
    }

    fn half_chain(x: &Tensor<Cpu, f16, [N]>) -> Tensor<Cpu, f16, [N]> {
        sin(x) + tanh(x) * exp(x * 0.125)
    }

    fn bhalf_chain(x: &Tensor<Cpu, bf16, [N]>) -> Tensor<Cpu, bf16, [N]> {
        sin(x) + tanh(x) * exp(x * 0.125)
    }

    fn double_chain(x: &Tensor<Cpu, f64, [N]>) -> Tensor<Cpu, f64, [N]> {
        sin(x) + tanh(x) * exp(x * 0.125)
    }

    fn matrix_trig(x: &Tensor<Cpu, f32, [R, C]>) -> Tensor<Cpu, f32, [R, C]> {
        sin(x) * exp(cos(x))
    }
}

/// Uniform values in `[lo, hi)`, never exactly zero.
fn random(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let u = ((s >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
            lo + (hi - lo) * u
        })
        .collect()
}

/// Fails unless `got` is within `rel` of `want` (relative to `scale + |want|`).
fn check(name: &str, x: &[f64], got: &[f64], want: impl Fn(f64) -> f64, rel: f64, scale: f64) {
    assert_eq!(got.len(), x.len(), "{name}: length");
    for (i, (&x, &g)) in x.iter().zip(got).enumerate() {
        let w = want(x);
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= rel * (scale + w.abs())
        };
        assert!(ok, "{name}[{i}]: x = {x:e}: got {g:e}, want {w:e}");
    }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn gelu_tanh(x: f64) -> f64 {
    0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
}

/// Inputs for f32 cases: a large random part (split over threads) and
/// special values at the end.
fn f32_inputs(seed: u64, lo: f64, hi: f64, specials: &[f32]) -> Vec<f32> {
    let mut v: Vec<f32> = random(100_003, seed, lo, hi)
        .into_iter()
        .map(|x| x as f32)
        .collect();
    v.extend_from_slice(specials);
    v
}

fn as_f64<T: Copy + Into<f64>>(v: &[T]) -> Vec<f64> {
    v.iter().map(|&x| x.into()).collect()
}

#[test]
fn f32_trig_over_every_range() -> Result<()> {
    let x = f32_inputs(
        1,
        -30.0,
        30.0,
        &[
            0.0,
            -0.0,
            1.0e-40,
            1.0e6,
            -3.0e8,
            1.0e30,
            -f32::MAX,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ],
    );
    let n = x.len();
    let y = trig(&Vector::<f32>::from_vec_dims(x.clone(), &[n])?)?;
    check(
        "sin(x) * 2 + cos(x)",
        &as_f64(&x),
        &as_f64(&y.to_vec()?),
        |x| x.sin() * 2.0 + x.cos(),
        5e-7,
        1.0,
    );
    Ok(())
}

/// Arguments in `[-30, 30)` with huge ones (up to 2^128), infinities and
/// NaN scattered through them, so that some stretches of the CPU loop take
/// the exact path for sine and cosine and their neighbours the fast one.
fn with_huge(n: usize, seed: u64) -> Vec<f32> {
    let small = random(n, seed, -30.0, 30.0);
    let log2 = random(n, seed + 1, 28.0, 127.99);
    small
        .iter()
        .zip(&log2)
        .enumerate()
        .map(|(i, (&s, &e))| match i % 1031 {
            0 => f32::NAN,
            113 => f32::INFINITY,
            7 | 200 | 201 => (e.exp2() * s.signum()) as f32,
            _ => s as f32,
        })
        .collect()
}

#[test]
fn f32_trig_with_huge_arguments_scattered() -> Result<()> {
    let x = with_huge(100_003, 11);
    let n = x.len();
    let y = trig(&Vector::<f32>::from_vec_dims(x.clone(), &[n])?)?;
    let want = |x: f64| x.sin() * 2.0 + x.cos();
    check(
        "sin(x) * 2 + cos(x)",
        &as_f64(&x),
        &as_f64(&y.to_vec()?),
        want,
        5e-7,
        1.0,
    );
    // The same through the strided loop.
    let (rows, cols) = (301, 257);
    let x = with_huge(rows * cols, 12);
    let m = Matrix::<f32>::from_vec_dims(x.clone(), &[rows, cols])?;
    let t: Matrix<f32> = m.t()?.into_shape()?;
    let y = matrix_trig(&t)?.to_vec()?;
    let got: Vec<f64> = (0..rows * cols)
        .map(|k| y[(k % cols) * rows + k / cols] as f64)
        .collect();
    let want = |x: f64| x.sin() * x.cos().exp();
    check(
        "sin(x) * exp(cos(x)), transposed",
        &as_f64(&x),
        &got,
        want,
        1e-6,
        1.0,
    );
    Ok(())
}

#[test]
fn f32_activations_and_exp() -> Result<()> {
    let x = f32_inputs(
        2,
        -12.0,
        12.0,
        &[0.0, -0.0, -90.0, 90.0, -200.0, 1.0e-40, f32::NAN],
    );
    let n = x.len();
    let y = activations(&Vector::<f32>::from_vec_dims(x.clone(), &[n])?)?;
    let x32 = |x: f64| x as f32 as f64;
    check(
        "tanh + sigmoid * exp + gelu - silu",
        &as_f64(&x),
        &as_f64(&y.to_vec()?),
        // `x * 0.25` is exact; the sum of four terms cancels at most to
        // the size of its largest one.
        |x| x.tanh() + sigmoid(x) * x32(x * 0.25).exp() + gelu_tanh(x) - x * sigmoid(x),
        1e-6,
        1.0 + 4.0 * (0.25 * 12.0f64).exp(),
    );
    Ok(())
}

#[test]
fn f32_logarithm() -> Result<()> {
    let x = f32_inputs(
        3,
        -1.0e3,
        1.0e3,
        &[0.0, 1.0e-30, 1.0e19, f32::INFINITY, f32::NAN],
    );
    let n = x.len();
    let y = logarithm(&Vector::<f32>::from_vec_dims(x.clone(), &[n])?)?;
    // Compare with the f32 argument the kernel actually takes the log of.
    check(
        "log(x * x + 0.5)",
        &as_f64(&x),
        &as_f64(&y.to_vec()?),
        |x| ((x as f32 * x as f32) + 0.5).ln() as f64,
        3e-7,
        1.0,
    );
    Ok(())
}

#[test]
fn half_precision_and_f64_chains() -> Result<()> {
    let r = random(50_001, 4, -8.0, 8.0);
    let want = |x: f64| x.sin() + x.tanh() * (x * 0.125).exp();
    let n = r.len();

    let h: Vec<f16> = r.iter().map(|&x| f16::from_f64(x)).collect();
    let y = half_chain(&Vector::<f16>::from_vec_dims(h.clone(), &[n])?)?;
    let hx: Vec<f64> = h.iter().map(|v| v.to_f64()).collect();
    let hy: Vec<f64> = y.to_vec()?.iter().map(|v| v.to_f64()).collect();
    check("f16 chain", &hx, &hy, want, 2e-3, 1.0);

    let b: Vec<bf16> = r.iter().map(|&x| bf16::from_f64(x)).collect();
    let y = bhalf_chain(&Vector::<bf16>::from_vec_dims(b.clone(), &[n])?)?;
    let bx: Vec<f64> = b.iter().map(|v| v.to_f64()).collect();
    let by: Vec<f64> = y.to_vec()?.iter().map(|v| v.to_f64()).collect();
    check("bf16 chain", &bx, &by, want, 1e-2, 1.0);

    let y = double_chain(&Vector::<f64>::from_vec_dims(r.clone(), &[n])?)?;
    check("f64 chain", &r, &y.to_vec()?, want, 1e-14, 1.0);
    Ok(())
}

#[test]
fn transposed_views() -> Result<()> {
    let (rows, cols) = (300, 257);
    let x: Vec<f32> = random(rows * cols, 5, -20.0, 20.0)
        .into_iter()
        .map(|x| x as f32)
        .collect();
    let m = Matrix::<f32>::from_vec_dims(x.clone(), &[rows, cols])?;
    let t: Matrix<f32> = m.t()?.into_shape()?; // (cols, rows), strided
    let y = matrix_trig(&t)?;
    assert_eq!(y.shape(), &[cols, rows]);
    let y = y.to_vec()?;
    let got: Vec<f64> = (0..rows * cols)
        .map(|k| y[(k % cols) * rows + k / cols] as f64)
        .collect();
    check(
        "sin(x) * exp(cos(x)) of a transposed view",
        &as_f64(&x),
        &got,
        |x| x.sin() * x.cos().exp(),
        1e-6,
        1.0,
    );
    Ok(())
}
