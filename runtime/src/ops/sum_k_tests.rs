//! `Tensor::matmul_sum_b` and `matmul_sum_a` (a weight gradient and its
//! bias gradient from one read of the output gradient) against f64
//! references: fresh random inputs, odd and empty dims, the transposed
//! views a backward multiplies, f32, f16, bf16 and f64. The CPU runs the
//! two parts; the GPU test (`cuda/tests.rs`) runs the same checks through
//! cuBLASLt's bias-gradient epilogues.

use crate::device::{Cpu, Device};
use crate::dtype::{DTypeKind, FloatDType};
use crate::random::SplitMix64;
use crate::shape::Dyn;
use crate::tensor::Tensor;
use half::{bf16, f16};

type Mat<D, T> = Tensor<D, T, (Dyn, Dyn)>;

/// The relative error allowed against the sum of the terms' magnitudes:
/// one rounding of the result plus TF32 inputs for f32.
fn tolerance(t: DTypeKind) -> f64 {
    match t {
        DTypeKind::F64 => 1e-12,
        DTypeKind::F32 => 2e-3,
        DTypeKind::F16 => 2e-3,
        _ => 1.6e-2,
    }
}

/// `x` (`[k, m]`) and `g` (`[k, n]`) as stored by a linear layer's forward
/// and backward (`k` rows of the batch); checks `(xᵀ g, colsum g)` through
/// `matmul_sum_b` and `(gᵀ x, colsum g)` through `matmul_sum_a`, each
/// entry within the tolerance of its f64 value.
pub(crate) fn check<D: Device, T: FloatDType>(
    rng: &mut SplitMix64,
    (m, k, n): (usize, usize, usize),
) {
    let x: Vec<T> = rng
        .uniforms(k * m, -1.0, 1.0)
        .into_iter()
        .map(T::from_f64)
        .collect();
    let g: Vec<T> = rng
        .uniforms(k * n, -1.0, 1.0)
        .into_iter()
        .map(T::from_f64)
        .collect();
    let put = |v: &[T], r, c| {
        Mat::<Cpu, T>::from_vec_dims(v.to_vec(), &[r, c])
            .and_then(|t| t.to_device::<D>())
            .unwrap()
    };
    let (xt, gt) = (put(&x, k, m), put(&g, k, n));
    let f = |v: &[T], i: usize| v[i].to_f64();
    // (xᵀ g)[i][j] = Σ_t x[t][i] g[t][j]; each column sum of g.
    let dw = |i: usize, j: usize| {
        (0..k).fold((0.0, 0.0), |(s, a), t| {
            let p = f(&x, t * m + i) * f(&g, t * n + j);
            (s + p, a + p.abs())
        })
    };
    let db = |j: usize| {
        (0..k).fold((0.0, 0.0), |(s, a), t| {
            (s + f(&g, t * n + j), a + f(&g, t * n + j).abs())
        })
    };
    let tol = tolerance(T::KIND);
    let close = |what: &str, got: f64, (want, mag): (f64, f64)| {
        assert!(
            (got - want).abs() <= tol * (mag + 1e-3),
            "{:?} [{m}, {k}, {n}] {what}: {got}, f64 gives {want}",
            T::KIND
        );
    };
    let (w, b) = Tensor::matmul_sum_b(&xt.t().unwrap(), &gt).unwrap();
    assert_eq!((w.dims(), b.dims()), (&[m, n][..], &[n][..]));
    let (w, b) = (w.to_vec().unwrap(), b.to_vec().unwrap());
    for i in 0..m {
        for j in 0..n {
            close(&format!("xᵀ g ({i}, {j})"), w[i * n + j].to_f64(), dw(i, j));
        }
    }
    for (j, v) in b.iter().enumerate() {
        close(&format!("column sum {j}"), v.to_f64(), db(j));
    }
    let (w, b) = Tensor::matmul_sum_a(&gt.t().unwrap(), &xt).unwrap();
    assert_eq!((w.dims(), b.dims()), (&[n, m][..], &[n][..]));
    let (w, b) = (w.to_vec().unwrap(), b.to_vec().unwrap());
    for j in 0..n {
        for i in 0..m {
            close(&format!("gᵀ x ({j}, {i})"), w[j * m + i].to_f64(), dw(i, j));
        }
    }
    for (j, v) in b.iter().enumerate() {
        close(&format!("row sum {j}"), v.to_f64(), db(j));
    }
}

/// The shapes checked on each device: odd sizes, a GPT-2-like product and
/// every empty dim (an empty `k` sums to zeros).
pub(crate) const SHAPES: [(usize, usize, usize); 6] = [
    (7, 33, 5),
    (1, 1, 1),
    (96, 515, 72),
    (0, 4, 3),
    (3, 0, 4),
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

#[test]
fn weight_and_bias_gradients_of_one_product_match_f64_on_the_cpu() {
    check_all::<Cpu>(&mut crate::cuda::tests::seed());
}

#[test]
fn non_finite_gradients_reach_both_results() {
    // A NaN in the gradient spoils its column's sum and that column of the
    // weight gradient; an infinity its sum.
    let x = Mat::<Cpu, f32>::from_vec_dims(vec![1.0; 6], &[3, 2]).unwrap();
    let g =
        Mat::<Cpu, f32>::from_vec_dims(vec![1.0, f32::NAN, f32::INFINITY, 0.0, -0.0, 2.0], &[3, 2])
            .unwrap();
    let (w, b) = Tensor::matmul_sum_b(&x.t().unwrap(), &g).unwrap();
    let (w, b) = (w.to_vec().unwrap(), b.to_vec().unwrap());
    assert_eq!(b[0], f32::INFINITY);
    assert!(b[1].is_nan());
    assert!(w[1].is_nan() && w[3].is_nan());
    assert_eq!((w[0], w[2]), (f32::INFINITY, f32::INFINITY));
}
