//! Matrix products against naive f64 loops: every float dtype, every rank
//! pairing, transposed / sliced / permuted / broadcast operands, biases,
//! scaling, empty dims, a size large enough for the parallel path, and
//! the run-time errors.

mod common;

use common::*;
use tensorfn_runtime::{shape, Cpu, Dyn, FloatDType, Tensor};

type D1 = (Dyn,);
type D2 = (Dyn, Dyn);
type D3 = (Dyn, Dyn, Dyn);

/// Per-dtype bound on the error of one dot product of length `k` whose
/// absolute terms sum to `mag`: accumulation (f32 at least) plus one final
/// rounding to `T`.
fn tol<T: TestDType>(k: usize, mag: f64) -> f64 {
    let acc = if T::KIND == tensorfn_runtime::DTypeKind::F64 {
        2.3e-16
    } else {
        1.2e-7
    };
    let out = match T::KIND {
        tensorfn_runtime::DTypeKind::F16 => 1e-3,
        tensorfn_runtime::DTypeKind::BF16 => 8e-3,
        _ => 0.0,
    };
    (2.0 * acc * k as f64 + out) * mag + 1e-30
}

/// `c[b][i][j] = sum_p a[b][i][p] * w[b][p][j]` on logical values, with
/// the bound each element may be off by.
fn reference<T: TestDType>(
    a: &[f64],
    w: &[f64],
    batch: (usize, usize),
    m: usize,
    k: usize,
    n: usize,
) -> (Vec<f64>, Vec<f64>) {
    let (ba, bw) = batch;
    let b = ba.max(bw);
    let mut out = vec![];
    let mut bound = vec![];
    for bi in 0..b {
        let (oa, ow) = (
            if ba == 1 { 0 } else { bi * m * k },
            if bw == 1 { 0 } else { bi * k * n },
        );
        for i in 0..m {
            for j in 0..n {
                let (mut s, mut mag) = (0.0, 0.0);
                for p in 0..k {
                    let t = a[oa + i * k + p] * w[ow + p * n + j];
                    s += t;
                    mag += t.abs();
                }
                out.push(s);
                bound.push(tol::<T>(k, mag));
            }
        }
    }
    (out, bound)
}

fn assert_within<T: TestDType>(got: &[T], want: &[f64], bound: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for i in 0..got.len() {
        let g = got[i].to_f64();
        assert!(
            (g - want[i]).abs() <= bound[i].max(want[i].abs() * T::TOL),
            "{what}: element {i} is {g}, expected {} (bound {})",
            want[i],
            bound[i]
        );
    }
}

fn check_2d<T: TestDType + FloatDType>(rng: &mut Rng) {
    for ka in KINDS {
        for kb in KINDS {
            let (m, k, n) = (
                rng.int(1, 9) as usize,
                rng.int(1, 9) as usize,
                rng.int(1, 9) as usize,
            );
            let (a, av) = view::<T, D2>(rng, &[m, k], ka, -2.0, 2.0);
            let (w, wv) = view::<T, D2>(rng, &[k, n], kb, -2.0, 2.0);
            let got = a.matmul(&w).unwrap();
            assert_eq!(got.shape(), &[m, n]);
            let (want, bound) = reference::<T>(&av, &wv, (1, 1), m, k, n);
            let what = format!(
                "matmul {} {ka:?}x{kb:?} {m}x{k}x{n} seed {}",
                name::<T>(),
                rng.seed
            );
            assert_within(&got.to_vec().unwrap(), &want, &bound, &what);
        }
    }
}

#[test]
fn matrix_times_matrix_every_layout() {
    let mut rng = Rng::new("matrix_times_matrix_every_layout");
    for_float_dtypes!(T => { check_2d::<T>(&mut rng); });
}

fn check_vectors<T: TestDType + FloatDType>(rng: &mut Rng) {
    let (m, k, n) = (
        rng.int(1, 7) as usize,
        rng.int(1, 12) as usize,
        rng.int(1, 7) as usize,
    );
    let kind = *rng.pick(&KINDS);
    let (v, vv) = view::<T, D1>(rng, &[k], kind, -2.0, 2.0);
    let (u, uv) = view::<T, D1>(rng, &[k], Kind::Sliced, -2.0, 2.0);
    let (a, av) = view::<T, D2>(rng, &[m, k], Kind::Transposed, -2.0, 2.0);
    let (w, wv) = view::<T, D2>(rng, &[k, n], Kind::Sliced, -2.0, 2.0);
    let what = format!("{} seed {}", name::<T>(), rng.seed);
    // (K,) x (K,) -> ()
    let d = v.matmul(&u).unwrap();
    assert_eq!(d.shape(), &[] as &[usize]);
    let (want, bound) = reference::<T>(&vv, &uv, (1, 1), 1, k, 1);
    assert_within(
        &d.to_vec().unwrap(),
        &want,
        &bound,
        &format!("vec.vec {what}"),
    );
    let dd = v.dot(&u).unwrap();
    assert_within(&dd.to_vec().unwrap(), &want, &bound, &format!("dot {what}"));
    // (K,) x (K, N) -> (N,)
    let r = v.matmul(&w).unwrap();
    assert_eq!(r.shape(), &[n]);
    let (want, bound) = reference::<T>(&vv, &wv, (1, 1), 1, k, n);
    assert_within(
        &r.to_vec().unwrap(),
        &want,
        &bound,
        &format!("vec.mat {what}"),
    );
    // (M, K) x (K,) -> (M,)
    let r = a.matmul(&v).unwrap();
    assert_eq!(r.shape(), &[m]);
    let (want, bound) = reference::<T>(&av, &vv, (1, 1), m, k, 1);
    assert_within(
        &r.to_vec().unwrap(),
        &want,
        &bound,
        &format!("mat.vec {what}"),
    );
}

#[test]
fn vector_pairings() {
    let mut rng = Rng::new("vector_pairings");
    for _ in 0..5 {
        for_float_dtypes!(T => { check_vectors::<T>(&mut rng); });
    }
}

fn check_batched<T: TestDType + FloatDType>(rng: &mut Rng) {
    for ka in KINDS {
        let (b, m, k, n) = (
            rng.int(1, 4) as usize,
            rng.int(1, 6) as usize,
            rng.int(1, 6) as usize,
            rng.int(1, 6) as usize,
        );
        let kb = *rng.pick(&KINDS);
        let (a, av) = view::<T, D3>(rng, &[b, m, k], ka, -2.0, 2.0);
        let (w, wv) = view::<T, D3>(rng, &[b, k, n], kb, -2.0, 2.0);
        let what = format!(
            "{} {ka:?}x{kb:?} {b}x{m}x{k}x{n} seed {}",
            name::<T>(),
            rng.seed
        );
        let (want, bound) = reference::<T>(&av, &wv, (b, b), m, k, n);
        let got = a.matmul(&w).unwrap();
        assert_eq!(got.shape(), &[b, m, n]);
        assert_within(
            &got.to_vec().unwrap(),
            &want,
            &bound,
            &format!("batched matmul {what}"),
        );
        let got = a.bmm(&w).unwrap();
        assert_within(
            &got.to_vec().unwrap(),
            &want,
            &bound,
            &format!("bmm {what}"),
        );
        // (B, M, K) x (K, N): one matrix shared by the batch.
        let (s, sv) = view::<T, D2>(rng, &[k, n], kb, -2.0, 2.0);
        let (want, bound) = reference::<T>(&av, &sv, (b, 1), m, k, n);
        let got = a.matmul(&s).unwrap();
        assert_within(
            &got.to_vec().unwrap(),
            &want,
            &bound,
            &format!("shared rhs {what}"),
        );
    }
}

#[test]
fn batched_products() {
    let mut rng = Rng::new("batched_products");
    for_float_dtypes!(T => { check_batched::<T>(&mut rng); });
}

fn check_addmm<T: TestDType + FloatDType>(rng: &mut Rng) {
    let (m, k, n) = (
        rng.int(1, 8) as usize,
        rng.int(1, 8) as usize,
        rng.int(1, 8) as usize,
    );
    let (a, av) = view::<T, D2>(rng, &[m, k], Kind::Transposed, -2.0, 2.0);
    let (w, wv) = view::<T, D2>(rng, &[k, n], Kind::Permuted, -2.0, 2.0);
    let (prod, bound) = reference::<T>(&av, &wv, (1, 1), m, k, n);
    let (beta, alpha) = (T::sample(rng, -2.0, 2.0), T::sample(rng, -2.0, 2.0));
    let what = format!("addmm {} {m}x{k}x{n} seed {}", name::<T>(), rng.seed);
    let check =
        |got: Tensor<Cpu, T, D2>, bias: &dyn Fn(usize, usize) -> f64, beta: f64, alpha: f64| {
            let want: Vec<f64> = (0..m * n)
                .map(|i| beta * bias(i / n, i % n) + alpha * prod[i])
                .collect();
            let bound: Vec<f64> = (0..m * n)
                .map(|i| bound[i] * alpha.abs() + T::TOL * 2.0 * (beta * bias(i / n, i % n)).abs())
                .collect();
            assert_within(&got.to_vec().unwrap(), &want, &bound, &what);
        };
    // Full (M, N) bias, sliced.
    let (c, cv) = view::<T, D2>(rng, &[m, n], Kind::Sliced, -2.0, 2.0);
    check(
        Tensor::addmm(&c, &a, &w).unwrap(),
        &|i, j| cv[i * n + j],
        1.0,
        1.0,
    );
    check(
        Tensor::addmm_scaled(&c, &a, &w, T::from_f64(beta), T::from_f64(alpha)).unwrap(),
        &|i, j| cv[i * n + j],
        beta,
        alpha,
    );
    // Row bias (N,).
    let (r, rv) = view::<T, D1>(rng, &[n], Kind::Contiguous, -2.0, 2.0);
    check(Tensor::addmm(&r, &a, &w).unwrap(), &|_, j| rv[j], 1.0, 1.0);
    // Scalar bias.
    let s = T::sample(rng, -2.0, 2.0);
    let st = Tensor::<Cpu, T, shape![]>::full(T::from_f64(s)).unwrap();
    check(
        Tensor::addmm_scaled(&st, &a, &w, T::from_f64(beta), T::one()).unwrap(),
        &|_, _| s,
        beta,
        1.0,
    );
    // beta = 0 ignores the bias, NaN included (PyTorch semantics).
    let nan = Tensor::<Cpu, T, D1>::full_dims(T::from_f64(f64::NAN), &[n]).unwrap();
    check(
        Tensor::addmm_scaled(&nan, &a, &w, T::zero(), T::from_f64(alpha)).unwrap(),
        &|_, _| 0.0,
        0.0,
        alpha,
    );
    // Into a preallocated output, shared or not.
    let mut out = Tensor::<Cpu, T, D2>::zeros_dims(&[m, n]).unwrap();
    Tensor::addmm_into(&r, &a, &w, &mut out).unwrap();
    check(out.clone(), &|_, j| rv[j], 1.0, 1.0);
    let keep = out.clone();
    a.matmul_into(&w, &mut out).unwrap();
    check(out, &|_, _| 0.0, 0.0, 1.0);
    check(keep, &|_, j| rv[j], 1.0, 1.0);
}

#[test]
fn addmm_biases_and_scaling() {
    let mut rng = Rng::new("addmm_biases_and_scaling");
    for _ in 0..3 {
        for_float_dtypes!(T => { check_addmm::<T>(&mut rng); });
    }
}

#[test]
fn empty_dims() {
    let a = Tensor::<Cpu, f32, D2>::zeros_dims(&[3, 0]).unwrap();
    let w = Tensor::<Cpu, f32, D2>::zeros_dims(&[0, 4]).unwrap();
    let c = a.matmul(&w).unwrap();
    assert_eq!(c.shape(), &[3, 4]);
    assert_eq!(c.to_vec().unwrap(), vec![0.0; 12]);
    let bias = Tensor::<Cpu, f32, D1>::from_vec_dims(vec![1., 2., 3., 4.], &[4]).unwrap();
    let c = Tensor::addmm_scaled(&bias, &a, &w, 2.0, 1.0).unwrap();
    assert_eq!(c.to_vec().unwrap(), [2., 4., 6., 8.].repeat(3));
    let a = Tensor::<Cpu, f64, D3>::zeros_dims(&[0, 2, 3]).unwrap();
    let w = Tensor::<Cpu, f64, D3>::zeros_dims(&[0, 3, 5]).unwrap();
    assert_eq!(a.bmm(&w).unwrap().shape(), &[0, 2, 5]);
    let a = Tensor::<Cpu, f64, D2>::zeros_dims(&[0, 3]).unwrap();
    let w = Tensor::<Cpu, f64, D2>::ones_dims(&[3, 2]).unwrap();
    assert_eq!(a.matmul(&w).unwrap().shape(), &[0, 2]);
    let e = Tensor::<Cpu, f64, D1>::zeros_dims(&[0]).unwrap();
    assert_eq!(e.dot(&e).unwrap().item().unwrap(), 0.0);
}

fn check_large<T: TestDType + FloatDType>(rng: &mut Rng) {
    let (m, k, n) = (160, 300, 130);
    let (a, av) = view::<T, D2>(rng, &[m, k], Kind::Contiguous, -1.0, 1.0);
    let (w, wv) = view::<T, D2>(rng, &[k, n], Kind::Transposed, -1.0, 1.0);
    let (want, bound) = reference::<T>(&av, &wv, (1, 1), m, k, n);
    let got = a.matmul(&w).unwrap().to_vec().unwrap();
    assert_within(
        &got,
        &want,
        &bound,
        &format!("large {} seed {}", name::<T>(), rng.seed),
    );
    // Many small products go over the batch in parallel.
    let (x, xv) = view::<T, D3>(rng, &[300, 12, 20], Kind::Contiguous, -1.0, 1.0);
    let (y, yv) = view::<T, D3>(rng, &[300, 20, 10], Kind::Permuted, -1.0, 1.0);
    let (want, bound) = reference::<T>(&xv, &yv, (300, 300), 12, 20, 10);
    let got = x.bmm(&y).unwrap().to_vec().unwrap();
    assert_within(
        &got,
        &want,
        &bound,
        &format!("large batch {} seed {}", name::<T>(), rng.seed),
    );
}

#[test]
fn large_products_use_every_core() {
    let mut rng = Rng::new("large_products_use_every_core");
    for_float_dtypes!(T => { check_large::<T>(&mut rng); });
}

#[test]
fn run_time_dims_are_checked() {
    let a = Tensor::<Cpu, f32, D2>::zeros_dims(&[100, 200]).unwrap();
    let b = Tensor::<Cpu, f32, D2>::zeros_dims(&[300, 400]).unwrap();
    let e = a.matmul(&b).unwrap_err().to_string();
    assert!(
        e.contains("k = 200") && e.contains("k = 300") && e.contains("`other`"),
        "{e}"
    );
    let v = Tensor::<Cpu, f32, D1>::zeros_dims(&[3]).unwrap();
    let u = Tensor::<Cpu, f32, D1>::zeros_dims(&[4]).unwrap();
    assert!(v.dot(&u).unwrap_err().to_string().contains("equal lengths"));
    assert!(v.matmul(&u).is_err());
    let bias = Tensor::<Cpu, f32, D1>::zeros_dims(&[7]).unwrap();
    let m1 = Tensor::<Cpu, f32, D2>::zeros_dims(&[2, 3]).unwrap();
    let m2 = Tensor::<Cpu, f32, D2>::zeros_dims(&[3, 5]).unwrap();
    let e = Tensor::addmm(&bias, &m1, &m2).unwrap_err().to_string();
    assert!(e.contains("`bias`"), "{e}");
    let x = Tensor::<Cpu, f32, D3>::zeros_dims(&[2, 3, 4]).unwrap();
    let y = Tensor::<Cpu, f32, D3>::zeros_dims(&[3, 4, 5]).unwrap();
    assert!(x.bmm(&y).unwrap_err().to_string().contains("batch"));
    let mut out = Tensor::<Cpu, f32, D2>::zeros_dims(&[2, 4]).unwrap();
    let e = m1.matmul_into(&m2, &mut out).unwrap_err().to_string();
    assert!(e.contains("`out`"), "{e}");
}

#[test]
fn static_shapes_infer_the_result() {
    let a = Tensor::<Cpu, f32, shape![2, 3]>::from_vec(vec![1., 2., 3., 4., 5., 6.]).unwrap();
    let b = Tensor::<Cpu, f32, shape![3, 2]>::from_vec(vec![1., 0., 0., 1., 1., 1.]).unwrap();
    let c: Tensor<Cpu, f32, shape![2, 2]> = a.matmul(&b).unwrap();
    assert_eq!(c.to_vec().unwrap(), vec![4., 5., 10., 11.]);
    let bias = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![0.5, -0.5]).unwrap();
    let d: Tensor<Cpu, f32, shape![2, 2]> = Tensor::addmm(&bias, &a, &b).unwrap();
    assert_eq!(d.to_vec().unwrap(), vec![4.5, 4.5, 10.5, 10.5]);
    let bt = b.t().unwrap();
    let g: Tensor<Cpu, f32, shape![2, 2]> = a.matmul(&bt.t().unwrap()).unwrap();
    assert_eq!(g.to_vec().unwrap(), c.to_vec().unwrap());
}
