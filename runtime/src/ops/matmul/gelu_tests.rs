//! `Tensor::addmm_gelu_aux`, `matmul_dgelu` and `matmul_dgelu_sum`
//! against f64 references: fresh random inputs, odd, GPT-2-like and empty
//! dims, the transposed weight a backward multiplies, f32, f16, bf16 and
//! f64, and non-finite pre-activations. The CPU runs the parts; the GPU
//! test (`cuda/tests.rs`) runs the same checks through cuBLASLt's
//! `GELU_AUX_BIAS`, `DGELU` and `DGELU_BGRAD` epilogues where it takes
//! them.

use super::gelu_derivative;
use crate::device::{Cpu, Device};
use crate::dtype::{DTypeKind, FloatDType};
use crate::random::SplitMix64;
use crate::shape::Dyn;
use crate::tensor::Tensor;
use half::{bf16, f16};

type Mat<D, T> = Tensor<D, T, (Dyn, Dyn)>;

/// GELU, tanh form, in f64.
fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + (0.797_884_560_802_865_4 * (x + 0.044715 * x * x * x)).tanh())
}

/// The relative error allowed against the sum of the terms' magnitudes:
/// two roundings of the result (the separate path rounds the product
/// before the derivative multiplies it) plus TF32 inputs for f32.
fn tolerance(t: DTypeKind) -> f64 {
    match t {
        DTypeKind::F64 => 1e-12,
        DTypeKind::F32 => 2e-3,
        DTypeKind::F16 => 4e-3,
        _ => 3.2e-2,
    }
}

/// The absolute error of GELU's derivative evaluated in f32, as
/// cuBLASLt's `DGELU` and the separate kernel both evaluate it (and
/// PyTorch's tanh-form backward): past |x| of about 4.5 the inner `tanh`
/// rounds to ±1 in f32, so the derivative comes out 0 where its f64 value
/// is still about 1e-6; the f32 rounding of `tanh` scaled by the
/// derivative's `x (1 + 3k x²)` factor is at most about 2^-23 (1 + |x|)³.
fn derivative_error(t: DTypeKind, x: f64) -> f64 {
    match t {
        DTypeKind::F64 => 0.0,
        _ => f64::from(f32::EPSILON) * (1.0 + x.abs()).powi(3),
    }
}

fn random<T: FloatDType>(rng: &mut SplitMix64, n: usize, scale: f64) -> Vec<T> {
    rng.uniforms(n, -scale, scale)
        .into_iter()
        .map(T::from_f64)
        .collect()
}

fn put<D: Device, T: FloatDType>(v: &[T], dims: &[usize]) -> Mat<D, T> {
    Mat::<Cpu, T>::from_vec_dims(v.to_vec(), dims)
        .and_then(|t| t.to_device::<D>())
        .unwrap()
}

fn get<D: Device, T: FloatDType>(t: &Mat<D, T>) -> Vec<f64> {
    t.to_vec()
        .unwrap()
        .into_iter()
        .map(|v| v.to_f64())
        .collect()
}

/// One linear layer `x [m, k] @ w [k, n] + b` with GELU, forward and
/// backward: checks `addmm_gelu_aux`'s two results, then with a fresh
/// upstream gradient `g [m, k2]` and the next layer's weight `w2 [n, k2]`
/// (read transposed, as a backward does, and contiguous) checks
/// `matmul_dgelu` and `matmul_dgelu_sum` against f64.
pub(crate) fn check<D: Device, T: FloatDType>(
    rng: &mut SplitMix64,
    (m, k, n): (usize, usize, usize),
) {
    let tol = tolerance(T::KIND);
    let close = |what: &str, got: f64, (want, mag): (f64, f64)| {
        assert!(
            (got - want).abs() <= tol * (mag + 1e-3),
            "{:?} [{m}, {k}, {n}] {what}: {got}, f64 gives {want}",
            T::KIND
        );
    };
    let (x, w, b) = (
        random::<T>(rng, m * k, 1.0),
        random::<T>(rng, k * n, 1.0),
        random::<T>(rng, n, 1.0),
    );
    let f = |v: &[T], i: usize| v[i].to_f64();
    let pre_ref = |i: usize, j: usize| {
        (0..k).fold((f(&b, j), f(&b, j).abs()), |(s, a), t| {
            let p = f(&x, i * k + t) * f(&w, t * n + j);
            (s + p, a + p.abs())
        })
    };
    let bias = Tensor::<Cpu, T, (Dyn,)>::from_vec_dims(b.clone(), &[n])
        .and_then(|t| t.to_device::<D>())
        .unwrap();
    let (y, pre) =
        Tensor::addmm_gelu_aux(&bias, &put::<D, T>(&x, &[m, k]), &put(&w, &[k, n])).unwrap();
    assert_eq!((y.dims(), pre.dims()), (&[m, n][..], &[m, n][..]));
    let (yv, pv) = (get(&y), get(&pre));
    for i in 0..m {
        for j in 0..n {
            let (want, mag) = pre_ref(i, j);
            close(&format!("pre ({i}, {j})"), pv[i * n + j], (want, mag));
            // gelu' is at most 1.13: the pre-activation's error carries over.
            close(
                &format!("gelu ({i}, {j})"),
                yv[i * n + j],
                (gelu(want), 1.13 * mag),
            );
        }
    }

    // Backward: a = g [m, k2], b = w2ᵀ with w2 [n, k2].
    let k2 = k.max(1) + 3;
    let (g, w2) = (random::<T>(rng, m * k2, 1.0), random::<T>(rng, n * k2, 1.0));
    let pre_t: Vec<T> = pv.iter().map(|&v| T::from_f64(v)).collect();
    let d_ref = |i: usize, j: usize| {
        let (s, a) = (0..k2).fold((0.0, 0.0), |(s, a), t| {
            let p = f(&g, i * k2 + t) * f(&w2, j * k2 + t);
            (s + p, a + p.abs())
        });
        let x = f(&pre_t, i * n + j);
        let d = gelu_derivative(x);
        (s * d, a * (d.abs() + derivative_error(T::KIND, x)))
    };
    let gt = put::<D, T>(&g, &[m, k2]);
    let w2_stored = put::<D, T>(&w2, &[n, k2]);
    let w2_t: Vec<T> = (0..k2 * n).map(|i| w2[(i % n) * k2 + i / n]).collect();
    let w2_dense = put::<D, T>(&w2_t, &[k2, n]);
    for (how, wt) in [("wᵀ view", w2_stored.t().unwrap()), ("dense", w2_dense)] {
        let d = Tensor::matmul_dgelu(&gt, &wt, &pre).unwrap();
        let (ds, sums) = Tensor::matmul_dgelu_sum(&gt, &wt, &pre).unwrap();
        assert_eq!(
            (d.dims(), ds.dims(), sums.dims()),
            (&[m, n][..], &[m, n][..], &[n][..])
        );
        let (dv, dsv) = (get(&d), get(&ds));
        let sv: Vec<f64> = sums
            .to_vec()
            .unwrap()
            .into_iter()
            .map(|v| v.to_f64())
            .collect();
        for i in 0..m {
            for j in 0..n {
                let want = d_ref(i, j);
                close(&format!("{how} dgelu ({i}, {j})"), dv[i * n + j], want);
                close(
                    &format!("{how} dgelu with sums ({i}, {j})"),
                    dsv[i * n + j],
                    want,
                );
            }
        }
        for (j, &got) in sv.iter().enumerate() {
            let want = (0..m).fold((0.0, 0.0), |(s, a), i| {
                let (v, mag) = d_ref(i, j);
                (s + v, a + mag)
            });
            close(&format!("{how} column sum {j}"), got, want);
        }
    }
}

/// The shapes checked on each device: odd sizes, rows of a multiple of 8
/// elements (what cuBLASLt's aux matrix needs), a GPT-2-like MLP product
/// and every empty dim (an empty `k` is the bias alone).
pub(crate) const SHAPES: [(usize, usize, usize); 7] = [
    (7, 33, 5),
    (1, 1, 1),
    (9, 20, 16),
    (64, 96, 384),
    (0, 4, 8),
    (3, 0, 8),
    (5, 6, 0),
];

/// Every shape in every float dtype on device `D`.
pub(crate) fn check_all<D: Device>(rng: &mut SplitMix64) {
    for s in SHAPES {
        check::<D, f32>(rng, s);
        check::<D, f16>(rng, s);
        check::<D, bf16>(rng, s);
        check::<D, f64>(rng, s);
    }
}

/// The forward's GELU is the tanh form (not the erf form, which differs
/// by up to 1.5e-4 near |x| = 2): pre-activations on a grid of exact
/// values (`1 * w`, exact in TF32 too) against f64.
pub(crate) fn check_formula<D: Device>() {
    let n = 128;
    let w: Vec<f32> = (0..n).map(|j| j as f32 / 16.0 - 4.0).collect();
    let x = put::<D, f32>(&[1.0; 8], &[8, 1]);
    let bias = Tensor::<D, f32, (Dyn,)>::zeros_dims(&[n]).unwrap();
    let (y, _) = Tensor::addmm_gelu_aux(&bias, &x, &put(&w, &[1, n])).unwrap();
    let y = get(&y);
    for (j, &v) in w.iter().enumerate() {
        let want = gelu(v as f64);
        assert!(
            (y[j] - want).abs() <= 2e-6 * (1.0 + want.abs()),
            "gelu({v}) = {}, f64 tanh form gives {want}",
            y[j]
        );
    }
    // The backward's derivative, against a central difference of f64 GELU.
    let pre = put::<D, f32>(&w, &[1, n]);
    let one = put::<D, f32>(&[1.0], &[1, 1]);
    let ones = put::<D, f32>(&vec![1.0; n], &[1, n]);
    let d = get(&Tensor::matmul_dgelu(&one, &ones, &pre).unwrap());
    for (j, &v) in w.iter().enumerate() {
        let h = 1e-5;
        let want = (gelu(v as f64 + h) - gelu(v as f64 - h)) / (2.0 * h);
        assert!(
            (d[j] - want).abs() <= 2e-6,
            "gelu'({v}) = {}, f64 gives {want}",
            d[j]
        );
    }
}

/// NaN and infinities in the pre-activation reach the gradient: a NaN
/// gives NaN, an infinity NaN (the expression `#[grad]` builds has
/// `x (1 - t²)` = ∞ · 0 there) or the derivative's limit (1 at +∞, 0 at
/// -∞, what cuBLASLt's epilogue may give), never a finite wrong value.
pub(crate) fn check_non_finite<D: Device>() {
    let n = 8;
    let vals = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1.0,
        -1.0,
        30.0,
    ];
    let pre = put::<D, f32>(&vals, &[1, n]);
    let one = put::<D, f32>(&[2.0], &[1, 1]);
    let ones = put::<D, f32>(&vec![1.0; n], &[1, n]);
    let d = get(&Tensor::matmul_dgelu(&one, &ones, &pre).unwrap());
    let (ds, sums) = Tensor::matmul_dgelu_sum(&one, &ones, &pre).unwrap();
    let (ds, sums) = (get(&ds), sums.to_vec().unwrap());
    for (j, &v) in vals.iter().enumerate() {
        for (what, got) in [("dgelu", d[j]), ("dgelu with sums", ds[j])] {
            let limit = if v > 0.0 { 2.0 } else { 0.0 };
            let ok = if v.is_nan() {
                got.is_nan()
            } else if v.is_infinite() {
                got.is_nan() || got == limit
            } else {
                (got - 2.0 * gelu_derivative(v as f64)).abs() <= 1e-6
            };
            assert!(ok, "{what} at pre = {v}: {got}");
        }
        assert_eq!(sums[j].is_nan(), ds[j].is_nan(), "sum of column {j}");
    }
    // A NaN bias spoils its column of both forward results.
    let mut b = vec![0.0f32; n];
    b[3] = f32::NAN;
    let bias = Tensor::<Cpu, f32, (Dyn,)>::from_vec_dims(b, &[n])
        .and_then(|t| t.to_device::<D>())
        .unwrap();
    let (y, pre) = Tensor::addmm_gelu_aux(&bias, &one, &ones).unwrap();
    let (y, pre) = (get(&y), get(&pre));
    for j in 0..n {
        assert_eq!(
            (y[j].is_nan(), pre[j].is_nan()),
            (j == 3, j == 3),
            "column {j}"
        );
    }
}

#[test]
fn gelu_products_match_f64_on_the_cpu() {
    check_all::<Cpu>(&mut crate::cuda::tests::seed());
    check_formula::<Cpu>();
    check_non_finite::<Cpu>();
}

#[test]
fn mismatched_pre_activations_are_errors_naming_the_operand() {
    let a = Mat::<Cpu, f32>::zeros_dims(&[2, 3]).unwrap();
    let b = Mat::<Cpu, f32>::zeros_dims(&[3, 4]).unwrap();
    let pre = Mat::<Cpu, f32>::zeros_dims(&[2, 5]).unwrap();
    let e = Tensor::matmul_dgelu(&a, &b, &pre).unwrap_err().to_string();
    assert!(e.contains("pre"), "{e}");
    let e = a
        .gelu_backward(&Mat::zeros_dims(&[3, 2]).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("pre"), "{e}");
}
