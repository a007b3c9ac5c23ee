//! Matrix products against naive f64 loops: every float dtype, every rank
//! pairing, transposed / sliced / permuted / broadcast operands, biases,
//! scaling, empty dims, a size large enough for the parallel path, and
//! the run-time errors.

use crate::common;

use common::*;
use tensorfn_runtime::{shape, Cpu, Dyn, FloatDType, Tensor};

type D1 = (Dyn,);
type D2 = (Dyn, Dyn);
type D3 = (Dyn, Dyn, Dyn);

/// The `m x n` product of the row-major blocks of `a` and `b` starting at
/// their offsets, in f64, appended to `out` with each element's error bound
/// (from the sum of the magnitudes of its terms) appended to `bound`.
fn block<T: TestDType>(
    (a, oa): (&[f64], usize),
    (b, ob): (&[f64], usize),
    (m, k, n): (usize, usize, usize),
    out: &mut Vec<f64>,
    bound: &mut Vec<f64>,
) {
    for i in 0..m {
        for j in 0..n {
            let (mut s, mut mag) = (0.0, 0.0);
            for p in 0..k {
                let t = a[oa + i * k + p] * b[ob + p * n + j];
                s += t;
                mag += t.abs();
            }
            out.push(s);
            bound.push(tol::<T>(k, mag));
        }
    }
}

/// Per-dtype bound on the error of one dot product of length `k` whose
/// absolute terms sum to `mag`: accumulation (f32, or f16 for f16) plus one final
/// rounding to `T`.
fn tol<T: TestDType>(k: usize, mag: f64) -> f64 {
    // f16 products run on `gemm`'s f16 kernel, whose sums round to f16
    // as they go (a seed gave 3.2 f16 ulps at k = 12): its unit roundoff
    // per addition, not f32's.
    let acc = match T::KIND {
        tensorfn_runtime::DTypeKind::F64 => 2.3e-16,
        tensorfn_runtime::DTypeKind::F16 => 4.9e-4,
        _ => 1.2e-7,
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
        block::<T>((a, oa), (w, ow), (m, k, n), &mut out, &mut bound);
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

/// `a @ b` by `torch.matmul`'s definition on logical values: a vector on
/// the left is a row, on the right a column (dropped from the result);
/// batch dims broadcast right-aligned. Returns the dims, values and
/// per-element bounds.
fn general_reference<T: TestDType>(
    a: &[f64],
    ad: &[usize],
    b: &[f64],
    bd: &[usize],
) -> (Vec<usize>, Vec<f64>, Vec<f64>) {
    let (ra, rb) = (ad.len(), bd.len());
    let (m, k) = if ra == 1 {
        (1, ad[0])
    } else {
        (ad[ra - 2], ad[ra - 1])
    };
    let n = if rb == 1 { 1 } else { bd[rb - 1] };
    let (ba, bb) = (&ad[..ra.saturating_sub(2)], &bd[..rb.saturating_sub(2)]);
    let nb = ba.len().max(bb.len());
    let dim_of = |d: &[usize], i: usize| (i + d.len()).checked_sub(nb).map_or(1, |j| d[j]);
    let batch: Vec<usize> = (0..nb).map(|i| dim_of(ba, i).max(dim_of(bb, i))).collect();
    // Index of a batch position in an operand's own batch dims.
    let flat = |d: &[usize], idx: &[usize]| {
        let pad = nb - d.len();
        d.iter().enumerate().fold(0, |acc, (j, &dj)| {
            acc * dj + if dj == 1 { 0 } else { idx[j + pad] }
        })
    };
    let (mut out, mut bound) = (vec![], vec![]);
    for idx in indices(&batch) {
        let (oa, ob) = (flat(ba, &idx) * m * k, flat(bb, &idx) * k * n);
        block::<T>((a, oa), (b, ob), (m, k, n), &mut out, &mut bound);
    }
    let mut dims = batch;
    if ra > 1 {
        dims.push(m);
    }
    if rb > 1 {
        dims.push(n);
    }
    (dims, out, bound)
}

/// Random `[..batch, rows, cols]` dims for one side of a broadcast
/// product: each batch dim is the full one or 1, right-aligned.
fn side_dims(
    rng: &mut Rng,
    batch: &[usize],
    rank: usize,
    last: [usize; 2],
    rhs: bool,
) -> Vec<usize> {
    if rank == 1 {
        return vec![if rhs { last[0] } else { last[1] }];
    }
    let nb = rank - 2;
    let mut d: Vec<usize> = batch[batch.len() - nb..]
        .iter()
        .map(|&b| if rng.int(0, 3) == 0 { 1 } else { b })
        .collect();
    d.extend(last);
    d
}

fn check_general<T, SA, SB, SO>(rng: &mut Rng, ra: usize, rb: usize)
where
    T: TestDType + FloatDType,
    SA: tensorfn_runtime::Shape + tensorfn_runtime::RemoveDim<0>,
    SB: tensorfn_runtime::Shape + tensorfn_runtime::RemoveDim<0>,
    SO: tensorfn_runtime::Shape,
{
    let nb = ra.max(rb).saturating_sub(2);
    let batch: Vec<usize> = (0..nb).map(|_| rng.int(1, 4) as usize).collect();
    let (m, k, n) = (
        rng.int(1, 5) as usize,
        rng.int(0, 6) as usize,
        rng.int(1, 5) as usize,
    );
    let ad = side_dims(rng, &batch, ra, [m, k], false);
    let bd = side_dims(rng, &batch, rb, [k, n], true);
    let (ka, kb) = (*rng.pick(&KINDS), *rng.pick(&KINDS));
    let (a, av) = view::<T, SA>(rng, &ad, ka, -2.0, 2.0);
    let (b, bv) = view::<T, SB>(rng, &bd, kb, -2.0, 2.0);
    let (dims, want, bound) = general_reference::<T>(&av, &ad, &bv, &bd);
    let what = format!(
        "{} {ad:?} {ka:?} x {bd:?} {kb:?} seed {}",
        name::<T>(),
        rng.seed
    );
    let got = a
        .matmul_broadcast::<SO>(&b)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(got.shape(), &dims[..], "{what}: shape");
    assert_within(&got.to_vec().unwrap(), &want, &bound, &what);
}

/// The shape type of each rank, for the pairings walked below.
macro_rules! dyn_shape {
    (0) => {
        ()
    };
    (1) => {
        (Dyn,)
    };
    (2) => {
        (Dyn, Dyn)
    };
    (3) => {
        (Dyn, Dyn, Dyn)
    };
    (4) => {
        (Dyn, Dyn, Dyn, Dyn)
    };
    (5) => {
        (Dyn, Dyn, Dyn, Dyn, Dyn)
    };
}

#[test]
fn batch_dims_broadcast_like_torch_matmul() {
    let mut rng = Rng::new("batch_dims_broadcast");
    macro_rules! pairs {
        ($(($ra:tt, $rb:tt, $ro:tt)),*) => {
            for _ in 0..6 {
                for_float_dtypes!(T => {
                    $(check_general::<T, dyn_shape!($ra), dyn_shape!($rb), dyn_shape!($ro)>(
                        &mut rng, $ra, $rb,
                    );)*
                });
            }
        };
    }
    pairs!(
        (1, 3, 2),
        (1, 4, 3),
        (3, 1, 2),
        (4, 1, 3),
        (2, 3, 3),
        (3, 2, 3),
        (2, 4, 4),
        (4, 2, 4),
        (3, 3, 3),
        (3, 4, 4),
        (4, 3, 4),
        (4, 4, 4),
        (5, 3, 5),
        (3, 5, 5),
        (5, 5, 5)
    );
}

#[test]
fn attention_shaped_products_type_check() {
    // [batch, heads, T, d] x [batch, heads, d, T] pairs in the types.
    let q = Tensor::<Cpu, f32, shape![2, 3, 4, 5]>::from_vec(
        (0..120).map(|v| v as f32 * 0.01).collect(),
    )
    .unwrap();
    let kt = q.transpose::<shape![2, 3, 5, 4]>(2, 3).unwrap();
    let s: Tensor<Cpu, f32, shape![2, 3, 4, 4]> = q.matmul(&kt).unwrap();
    let v: Vec<f64> = q.to_vec().unwrap().iter().map(|&x| x as f64).collect();
    for (i, got) in s.to_vec().unwrap().into_iter().enumerate() {
        let (bh, r, c) = (i / 16, (i / 4) % 4, i % 4);
        let want: f64 = (0..5)
            .map(|p| v[bh * 20 + r * 5 + p] * v[bh * 20 + c * 5 + p])
            .sum();
        assert!(
            (got as f64 - want).abs() <= 1e-5 * want.abs().max(1.0),
            "{i}: {got} vs {want}"
        );
    }
    // A vector against a batch, and a batch of 5-D matrices against one matrix.
    let x = Tensor::<Cpu, f32, shape![5]>::ones().unwrap();
    let y: Tensor<Cpu, f32, shape![2, 3, 4]> = x.matmul(&kt).unwrap();
    assert_eq!(y.shape(), &[2, 3, 4]);
    let w = Tensor::<Cpu, f32, shape![5, 6]>::ones().unwrap();
    let z: Tensor<Cpu, f32, shape![2, 3, 4, 6]> = q.matmul(&w).unwrap();
    assert_eq!(z.shape(), &[2, 3, 4, 6]);
    // Batch dims that do not broadcast are an error naming the operands.
    let bad = Tensor::<Cpu, f32, shape![_, _, _]>::zeros_dims(&[4, 5, 2]).unwrap();
    let e = q
        .matmul_broadcast::<shape![_, _, _, _]>(&bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("`self`") && e.contains("`other`"), "{e}");
}
