//! Reductions and softmax against f64 references: every dim, every
//! dtype, every view kind, empty dims, NaN, and long sums.

use crate::common;

use common::*;
use tensorfn_runtime::{bf16, f16, shape, Cpu, Dyn, FloatDType, Tensor};

type D3 = (Dyn, Dyn, Dyn);

/// The values along `dim` for each output position (row-major over the
/// other dims).
fn lanes(values: &[f64], dims: &[usize], dim: usize) -> Vec<Vec<f64>> {
    let mut out_dims = dims.to_vec();
    out_dims.remove(dim);
    indices(&out_dims)
        .iter()
        .map(|o| {
            (0..dims[dim])
                .map(|r| {
                    let mut i = o.clone();
                    i.insert(dim, r);
                    values[ravel(&i, dims)]
                })
                .collect()
        })
        .collect()
}

fn max_nan(xs: &[f64]) -> f64 {
    xs.iter().fold(xs[0], |m, &v| {
        if m.is_nan() || v.is_nan() {
            f64::NAN
        } else {
            m.max(v)
        }
    })
}

fn min_nan(xs: &[f64]) -> f64 {
    xs.iter().fold(xs[0], |m, &v| {
        if m.is_nan() || v.is_nan() {
            f64::NAN
        } else {
            m.min(v)
        }
    })
}

fn first_index(xs: &[f64], better: impl Fn(f64, f64) -> bool) -> f64 {
    let mut best = 0;
    for (i, &v) in xs.iter().enumerate() {
        if xs[best].is_nan() {
            break;
        }
        if v.is_nan() || better(v, xs[best]) {
            best = i;
        }
    }
    best as f64
}

/// Tolerance of a sum of `n` values whose magnitudes add to `mag`.
fn sum_tol<T: TestDType>(n: usize, mag: f64, want: f64) -> f64 {
    let acc = if T::KIND == tensorfn_runtime::DTypeKind::F64 {
        2.3e-16
    } else {
        1.2e-7
    };
    acc * (n as f64).log2().max(1.0) * 4.0 * mag + T::TOL * want.abs()
}

fn check_reduce<T: TestDType>(rng: &mut Rng) {
    for kind in KINDS {
        let dims = rng.dims(3, 1, 6);
        let (lo, hi) = if T::KIND == tensorfn_runtime::DTypeKind::U8 {
            (0.0, 40.0)
        } else {
            (-40.0, 40.0)
        };
        let (x, xv) = view::<T, D3>(rng, &dims, kind, lo, hi);
        let what = |op: &str, d: usize| {
            format!(
                "{op}::<{d}> {} {kind:?} {dims:?} seed {}",
                name::<T>(),
                rng.seed
            )
        };
        macro_rules! along {
            ($d:literal) => {{
                let l = lanes(&xv, &dims, $d);
                let sums: Vec<f64> = l
                    .iter()
                    .map(|v| {
                        if T::INT {
                            T::wrap(v.iter().map(|&x| x as i128).sum())
                        } else {
                            v.iter().sum()
                        }
                    })
                    .collect();
                let got = x.sum::<$d>().unwrap().to_vec().unwrap();
                for (i, g) in got.iter().enumerate() {
                    let mag: f64 = l[i].iter().map(|v| v.abs()).sum();
                    let t = if T::INT {
                        0.0
                    } else {
                        sum_tol::<T>(l[i].len(), mag, sums[i])
                    };
                    assert!(
                        (g.to_f64() - sums[i]).abs() <= t,
                        "{}: {} vs {}",
                        what("sum", $d),
                        g,
                        sums[i]
                    );
                }
                let want: Vec<f64> = l.iter().map(|v| max_nan(v)).collect();
                assert_close(
                    &x.max::<$d>().unwrap().to_vec().unwrap(),
                    &want,
                    0.0,
                    &what("max", $d),
                );
                let want: Vec<f64> = l.iter().map(|v| min_nan(v)).collect();
                assert_close(
                    &x.min::<$d>().unwrap().to_vec().unwrap(),
                    &want,
                    0.0,
                    &what("min", $d),
                );
                let want: Vec<f64> = l.iter().map(|v| first_index(v, |a, b| a > b)).collect();
                assert_close(
                    &x.argmax::<$d>().unwrap().to_vec().unwrap(),
                    &want,
                    0.0,
                    &what("argmax", $d),
                );
                let want: Vec<f64> = l.iter().map(|v| first_index(v, |a, b| a < b)).collect();
                assert_close(
                    &x.argmin::<$d>().unwrap().to_vec().unwrap(),
                    &want,
                    0.0,
                    &what("argmin", $d),
                );
                let mut kd = dims.clone();
                kd[$d] = 1;
                let keep = x.sum_keepdim::<$d, D3>().unwrap();
                assert_eq!(keep.shape(), &kd[..]);
                assert_eq!(
                    keep.to_vec().unwrap(),
                    x.sum::<$d>().unwrap().to_vec().unwrap()
                );
            }};
        }
        along!(0);
        along!(1);
        along!(2);
        let total: f64 = xv.iter().sum();
        let got = x.sum_all().unwrap().item().unwrap().to_f64();
        let want = if T::INT {
            T::wrap(xv.iter().map(|&v| v as i128).sum())
        } else {
            total
        };
        let t = if T::INT {
            0.0
        } else {
            sum_tol::<T>(xv.len(), xv.iter().map(|v| v.abs()).sum(), want)
        };
        assert!(
            (got - want).abs() <= t,
            "sum_all {} {got} vs {want}",
            name::<T>()
        );
        assert_eq!(x.max_all().unwrap().item().unwrap().to_f64(), max_nan(&xv));
        assert_eq!(x.min_all().unwrap().item().unwrap().to_f64(), min_nan(&xv));
    }
}

#[test]
fn reductions_every_dim_dtype_and_layout() {
    let mut rng = Rng::new("reductions_every_dim_dtype_and_layout");
    for_num_dtypes!(T => { check_reduce::<T>(&mut rng); });
}

fn check_mean<T: TestDType + FloatDType>(rng: &mut Rng) {
    for kind in KINDS {
        let dims = rng.dims(3, 1, 6);
        let (x, xv) = view::<T, D3>(rng, &dims, kind, -10.0, 10.0);
        macro_rules! along {
            ($d:literal) => {{
                let l = lanes(&xv, &dims, $d);
                let got = x.mean::<$d>().unwrap().to_vec().unwrap();
                for (i, g) in got.iter().enumerate() {
                    let want = l[i].iter().sum::<f64>() / l[i].len() as f64;
                    let mag = l[i].iter().map(|v| v.abs()).sum::<f64>() / l[i].len() as f64;
                    let t = sum_tol::<T>(l[i].len(), mag, want) + T::TOL * mag;
                    assert!(
                        (g.to_f64() - want).abs() <= t,
                        "mean::<{}> {} {g} vs {want} seed {}",
                        $d,
                        name::<T>(),
                        rng.seed
                    );
                }
            }};
        }
        along!(0);
        along!(1);
        along!(2);
        let want = xv.iter().sum::<f64>() / xv.len() as f64;
        let got = x.mean_all().unwrap().item().unwrap().to_f64();
        assert!(
            (got - want).abs() <= 10.0 * T::TOL,
            "mean_all {} {got} vs {want}",
            name::<T>()
        );
    }
}

#[test]
fn means_of_floats() {
    let mut rng = Rng::new("means_of_floats");
    for_float_dtypes!(T => { check_mean::<T>(&mut rng); });
}

#[test]
fn long_sums_stay_accurate() {
    // 2^24 + 1 ones: a naive f32 running sum stops at 16777216.
    let n = (1 << 24) + 7;
    let x = Tensor::<Cpu, f32, (Dyn,)>::ones_dims(&[n]).unwrap();
    assert_eq!(x.sum_all().unwrap().item().unwrap(), n as f32);
    let mut rng = Rng::new("long_sums_stay_accurate");
    let (xv, x) = values::<f32>(&mut rng, 3_000_000, 0.0, 1.0);
    let x = Tensor::<Cpu, f32, (Dyn,)>::from_vec_dims(x, &[3_000_000]).unwrap();
    let want: f64 = xv.iter().sum();
    let got = x.sum::<0>().unwrap().item().unwrap() as f64;
    assert!(
        (got - want).abs() / want < 1e-6,
        "{got} vs {want} seed {}",
        rng.seed
    );
    // f16 accumulates in f32: 4096 ones give 4096 (f16 alone stalls at 2048).
    let h = Tensor::<Cpu, f16, (Dyn,)>::ones_dims(&[4096]).unwrap();
    assert_eq!(h.sum_all().unwrap().item().unwrap(), f16::from_f32(4096.0));
    let b = Tensor::<Cpu, bf16, (Dyn, Dyn)>::ones_dims(&[3, 1000]).unwrap();
    assert_eq!(b.mean::<1>().unwrap().to_vec().unwrap(), vec![bf16::ONE; 3]);
}

#[test]
fn nan_and_empty_dims() {
    let x = Tensor::<Cpu, f32, shape![2, 3]>::from_vec(vec![1., f32::NAN, 3., 4., 5., 6.]).unwrap();
    let m = x.max::<1>().unwrap().to_vec().unwrap();
    assert!(m[0].is_nan() && m[1] == 6.0);
    assert_eq!(x.argmax::<1>().unwrap().to_vec().unwrap(), vec![1, 2]);
    assert_eq!(x.argmin::<1>().unwrap().to_vec().unwrap(), vec![1, 0]);
    assert!(x.sum_all().unwrap().item().unwrap().is_nan());
    let e = Tensor::<Cpu, f32, (Dyn, Dyn)>::zeros_dims(&[3, 0]).unwrap();
    assert_eq!(e.sum::<1>().unwrap().to_vec().unwrap(), vec![0.0; 3]);
    assert!(e
        .mean::<1>()
        .unwrap()
        .to_vec()
        .unwrap()
        .iter()
        .all(|v| v.is_nan()));
    assert_eq!(e.sum::<0>().unwrap().shape(), &[0]);
    let err = e.max::<1>().unwrap_err().to_string();
    assert!(err.contains("non-empty") && err.contains("`self`"), "{err}");
    assert!(e.argmin::<1>().is_err());
    assert!(e.max_all().is_err());
    assert_eq!(e.max::<0>().unwrap().shape(), &[0]);
    assert_eq!(e.sum_all().unwrap().item().unwrap(), 0.0);
    let i = Tensor::<Cpu, i32, shape![3]>::from_vec(vec![i32::MAX, 1, 1]).unwrap();
    assert_eq!(i.sum_all().unwrap().item().unwrap(), i32::MIN + 1);
    let s = Tensor::<Cpu, f64, shape![]>::full(2.5).unwrap();
    assert_eq!(s.sum_all().unwrap().item().unwrap(), 2.5);
}

fn softmax_ref(lane: &[f64], log: bool) -> Vec<f64> {
    let m = lane.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let s: f64 = lane.iter().map(|v| (v - m).exp()).sum();
    lane.iter()
        .map(|v| {
            if log {
                v - m - s.ln()
            } else {
                (v - m).exp() / s
            }
        })
        .collect()
}

fn check_softmax<T: TestDType + FloatDType>(rng: &mut Rng) {
    for kind in KINDS {
        let dims = rng.dims(3, 1, 7);
        let (x, xv) = view::<T, D3>(rng, &dims, kind, -30.0, 30.0);
        macro_rules! along {
            ($d:literal) => {{
                for log in [false, true] {
                    let got = if log {
                        x.log_softmax::<$d>()
                    } else {
                        x.softmax::<$d>()
                    }
                    .unwrap();
                    assert_eq!(got.shape(), &dims[..]);
                    let got = got.to_vec().unwrap();
                    let mut want = vec![0.0; xv.len()];
                    let mut out_dims = dims.clone();
                    out_dims.remove($d);
                    for o in indices(&out_dims) {
                        let pos: Vec<usize> = (0..dims[$d])
                            .map(|r| {
                                let mut i = o.clone();
                                i.insert($d, r);
                                ravel(&i, &dims)
                            })
                            .collect();
                        let lane: Vec<f64> = pos.iter().map(|&p| xv[p]).collect();
                        for (p, v) in pos.iter().zip(softmax_ref(&lane, log)) {
                            want[*p] = v;
                        }
                    }
                    // log-softmax values are large; softmax values are in [0, 1].
                    let tol = if log { T::TOL * 2.0 } else { T::TOL * 2.0 };
                    let what = format!(
                        "{}softmax::<{}> {} {kind:?} {dims:?} seed {}",
                        if log { "log_" } else { "" },
                        $d,
                        name::<T>(),
                        rng.seed
                    );
                    for i in 0..want.len() {
                        let g = got[i].to_f64();
                        let t = if log {
                            tol * want[i].abs().max(1.0)
                        } else {
                            tol * want[i].max(1e-3) + 1e-6
                        };
                        assert!(
                            (g - want[i]).abs() <= t,
                            "{what}: element {i} is {g}, expected {}",
                            want[i]
                        );
                    }
                }
            }};
        }
        along!(0);
        along!(1);
        along!(2);
    }
}

#[test]
fn softmax_every_dim_dtype_and_layout() {
    let mut rng = Rng::new("softmax_every_dim_dtype_and_layout");
    for_float_dtypes!(T => { check_softmax::<T>(&mut rng); });
}

#[test]
fn softmax_is_stable_and_handles_corners() {
    let x = Tensor::<Cpu, f32, shape![2, 3]>::from_vec(vec![
        1e4,
        1e4 + 1.0,
        1e4 - 1.0,
        -1e4,
        -1e4,
        -1e4,
    ])
    .unwrap();
    let y = x.softmax::<1>().unwrap().to_vec().unwrap();
    let e: Vec<f64> = softmax_ref(&[1.0, 2.0, 0.0], false);
    for i in 0..3 {
        assert!((y[i] as f64 - e[i]).abs() < 1e-6, "{y:?}");
        assert!((y[3 + i] - 1.0 / 3.0).abs() < 1e-6);
    }
    let l = x.log_softmax::<1>().unwrap().to_vec().unwrap();
    assert!(l.iter().all(|v| v.is_finite()));
    let h = Tensor::<Cpu, f16, shape![2]>::from_vec(vec![
        f16::from_f32(60000.0),
        f16::from_f32(-60000.0),
    ])
    .unwrap();
    let p = h.softmax::<0>().unwrap().to_vec().unwrap();
    assert_eq!(p, vec![f16::ONE, f16::ZERO]);
    let e = Tensor::<Cpu, f32, (Dyn, Dyn)>::zeros_dims(&[0, 4]).unwrap();
    assert_eq!(e.softmax::<1>().unwrap().shape(), &[0, 4]);
    let n = Tensor::<Cpu, f64, shape![3]>::from_vec(vec![1.0, f64::NAN, 2.0]).unwrap();
    assert!(n
        .softmax::<0>()
        .unwrap()
        .to_vec()
        .unwrap()
        .iter()
        .all(|v| v.is_nan()));
    // A large input takes the parallel path.
    let big = Tensor::<Cpu, f32, (Dyn, Dyn)>::ones_dims(&[5000, 40]).unwrap();
    let s = big.softmax::<0>().unwrap().to_vec().unwrap();
    assert!(s.iter().all(|&v| (v - 1.0 / 5000.0).abs() < 1e-9));
}
