//! Elementwise ops against f64 references: every numeric dtype, every
//! view kind, broadcasting corners, empty dims and the error cases.

use crate::common;

use common::*;
use tensorfn_kernels::UnaryOp;
use tensorfn_runtime::{bf16, f16, shape, Cpu, DType, Dyn, Error, FloatDType, Tensor};

type D2 = (Dyn, Dyn);
type D3 = (Dyn, Dyn, Dyn);

#[derive(Clone, Copy, Debug)]
enum Op {
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
}

const OPS: [Op; 6] = [Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Max, Op::Min];

/// The reference: exact in f64 (or i128 for integers), then stored in `T`.
fn reference<T: TestDType>(op: Op, a: f64, b: f64) -> f64 {
    if T::INT {
        let (x, y) = (a as i128, b as i128);
        let r = match op {
            Op::Add => x + y,
            Op::Sub => x - y,
            Op::Mul => x * y,
            Op::Div => x / y,
            Op::Max => x.max(y),
            Op::Min => x.min(y),
        };
        return T::wrap(r);
    }
    round::<T>(match op {
        Op::Add => a + b,
        Op::Sub => a - b,
        Op::Mul => a * b,
        Op::Div => a / b,
        Op::Max => a.max(b),
        Op::Min => a.min(b),
    })
}

fn apply<T: TestDType, S: tensorfn_runtime::Shape>(
    op: Op,
    a: &Tensor<Cpu, T, S>,
    b: &Tensor<Cpu, T, S>,
) -> tensorfn_runtime::Result<Tensor<Cpu, T, S>> {
    match op {
        Op::Add => a.add(b),
        Op::Sub => a.sub(b),
        Op::Mul => a.mul(b),
        Op::Div => a.div(b),
        Op::Max => a.maximum(b),
        Op::Min => a.minimum(b),
    }
}

/// Inputs in a range where no dtype overflows and no divisor is 0.
fn operands<T: TestDType>(rng: &mut Rng, op: Op) -> ((f64, f64), (f64, f64)) {
    let hi = if T::KIND == tensorfn_runtime::DTypeKind::U8 {
        15.0
    } else {
        100.0
    };
    let lo = if T::KIND == tensorfn_runtime::DTypeKind::U8 {
        0.0
    } else {
        -hi
    };
    let _ = rng;
    match op {
        // Divisors away from 0 keep float quotients well conditioned.
        Op::Div => ((lo, hi), (1.0, hi / 4.0 + 1.0)),
        _ => ((lo, hi), (lo, hi)),
    }
}

fn check_binary<T: TestDType>(rng: &mut Rng) {
    for op in OPS {
        for ka in KINDS {
            let kb = *rng.pick(&KINDS);
            let dims = rng.dims_maybe_empty(3, 1, 6);
            let (ra, rb) = operands::<T>(rng, op);
            let (a, av) = view::<T, D3>(rng, &dims, ka, ra.0, ra.1);
            let (b, bv) = view::<T, D3>(rng, &dims, kb, rb.0, rb.1);
            let got = apply(op, &a, &b).unwrap().to_vec().unwrap();
            let want: Vec<f64> = av
                .iter()
                .zip(&bv)
                .map(|(&x, &y)| reference::<T>(op, x, y))
                .collect();
            let what = format!(
                "{op:?} {} {ka:?}x{kb:?} {dims:?} seed {}",
                name::<T>(),
                rng.seed
            );
            assert_close(&got, &want, T::TOL, &what);
        }
    }
}

#[test]
fn binary_ops_every_dtype_and_layout() {
    let mut rng = Rng::new("binary_ops_every_dtype_and_layout");
    for_num_dtypes!(T => { check_binary::<T>(&mut rng); });
}

#[test]
fn operators_match_methods() {
    let mut rng = Rng::new("operators_match_methods");
    let (a, av) = view::<f32, D2>(&mut rng, &[3, 4], Kind::Transposed, -5.0, 5.0);
    let (b, bv) = view::<f32, D2>(&mut rng, &[3, 4], Kind::Contiguous, 1.0, 5.0);
    let sum = (&a + &b).unwrap().to_vec().unwrap();
    let diff = (a.clone() - b.clone()).unwrap().to_vec().unwrap();
    let prod = (&a * b.clone()).unwrap().to_vec().unwrap();
    let quot = (a.clone() / &b).unwrap().to_vec().unwrap();
    for i in 0..12 {
        assert_eq!(sum[i], (av[i] + bv[i]) as f32);
        assert_eq!(diff[i], (av[i] - bv[i]) as f32);
        assert_eq!(prod[i], (av[i] * bv[i]) as f32);
        assert_eq!(quot[i], (av[i] / bv[i]) as f32);
    }
    let s = (&a + 2.5).unwrap().to_vec().unwrap();
    let m = (a.clone() * -2.0).unwrap().to_vec().unwrap();
    let d = (&a / 4.0).unwrap().to_vec().unwrap();
    let sub = (a - 1.0).unwrap().to_vec().unwrap();
    for i in 0..12 {
        assert_eq!(s[i], (av[i] + 2.5) as f32);
        assert_eq!(m[i], (av[i] * -2.0) as f32);
        assert_eq!(d[i], (av[i] / 4.0) as f32);
        assert_eq!(sub[i], (av[i] - 1.0) as f32);
    }
}

/// An op's name, its result and the reference applied to each element.
type ScalarCase<'a, T> = (
    &'static str,
    tensorfn_runtime::Result<Tensor<Cpu, T, D2>>,
    Box<dyn Fn(f64) -> f64 + 'a>,
);

fn check_scalars<T: TestDType>(rng: &mut Rng) {
    for kind in KINDS {
        let dims = rng.dims_maybe_empty(2, 1, 7);
        let (lo, hi) = if T::INT && T::KIND == tensorfn_runtime::DTypeKind::U8 {
            (1.0, 15.0)
        } else {
            (1.0, 50.0)
        };
        let (x, xv) = view::<T, D2>(rng, &dims, kind, lo, hi);
        let s = T::sample(rng, 1.0, 9.0);
        let st = T::from_f64(s);
        let cases: [ScalarCase<'_, T>; 8] = [
            (
                "add_scalar",
                x.add_scalar(st),
                Box::new(|v| reference::<T>(Op::Add, v, s)),
            ),
            (
                "sub_scalar",
                x.sub_scalar(st),
                Box::new(|v| reference::<T>(Op::Sub, v, s)),
            ),
            (
                "mul_scalar",
                x.mul_scalar(st),
                Box::new(|v| reference::<T>(Op::Mul, v, s)),
            ),
            (
                "div_scalar",
                x.div_scalar(st),
                Box::new(|v| reference::<T>(Op::Div, v, s)),
            ),
            (
                "rsub_scalar",
                x.rsub_scalar(st),
                Box::new(|v| reference::<T>(Op::Sub, s, v)),
            ),
            (
                "rdiv_scalar",
                x.rdiv_scalar(st),
                Box::new(|v| reference::<T>(Op::Div, s, v)),
            ),
            (
                "maximum_scalar",
                x.maximum_scalar(st),
                Box::new(|v| reference::<T>(Op::Max, v, s)),
            ),
            (
                "minimum_scalar",
                x.minimum_scalar(st),
                Box::new(|v| reference::<T>(Op::Min, v, s)),
            ),
        ];
        for (what, got, f) in cases {
            let want: Vec<f64> = xv.iter().map(|&v| f(v)).collect();
            let what = format!("{what} {} {kind:?} {dims:?} seed {}", name::<T>(), rng.seed);
            assert_close(&got.unwrap().to_vec().unwrap(), &want, T::TOL, &what);
        }
    }
}

#[test]
fn scalar_ops_every_dtype_and_layout() {
    let mut rng = Rng::new("scalar_ops_every_dtype_and_layout");
    for_num_dtypes!(T => { check_scalars::<T>(&mut rng); });
}

fn check_pow<T: TestDType + FloatDType>(rng: &mut Rng) {
    for kind in KINDS {
        let dims = rng.dims(2, 1, 6);
        let (x, xv) = view::<T, D2>(rng, &dims, kind, 0.1, 4.0);
        let k1 = *rng.pick(&KINDS);
        let (e, ev) = view::<T, D2>(rng, &dims, k1, -2.0, 3.0);
        let got = x.pow(&e).unwrap().to_vec().unwrap();
        let want: Vec<f64> = xv
            .iter()
            .zip(&ev)
            .map(|(a, b)| round::<T>(a.powf(*b)))
            .collect();
        assert_close(
            &got,
            &want,
            T::TOL * 4.0,
            &format!("pow {} seed {}", name::<T>(), rng.seed),
        );
        let got = x.pow_scalar(T::from_f64(1.5)).unwrap().to_vec().unwrap();
        let want: Vec<f64> = xv.iter().map(|a| round::<T>(a.powf(1.5))).collect();
        assert_close(
            &got,
            &want,
            T::TOL * 4.0,
            &format!("pow_scalar {} seed {}", name::<T>(), rng.seed),
        );
    }
}

#[test]
fn pow_for_floats() {
    let mut rng = Rng::new("pow_for_floats");
    for_float_dtypes!(T => { check_pow::<T>(&mut rng); });
}

#[test]
fn integers_wrap_like_pytorch() {
    let a = Tensor::<Cpu, i32, shape![3]>::from_vec(vec![i32::MAX, i32::MIN, i32::MIN]).unwrap();
    let b = Tensor::<Cpu, i32, shape![3]>::from_vec(vec![1, -1, -1]).unwrap();
    assert_eq!(
        a.add(&b).unwrap().to_vec().unwrap(),
        vec![i32::MIN, i32::MAX, i32::MAX]
    );
    assert_eq!(
        a.div(&b).unwrap().to_vec().unwrap(),
        vec![i32::MAX, i32::MIN, i32::MIN]
    );
    assert_eq!(a.mul(&a).unwrap().to_vec().unwrap(), vec![1, 0, 0]);
    let u = Tensor::<Cpu, u8, shape![3]>::from_vec(vec![0, 200, 255]).unwrap();
    assert_eq!(
        u.sub_scalar(1).unwrap().to_vec().unwrap(),
        vec![255, 199, 254]
    );
    assert_eq!(u.add(&u).unwrap().to_vec().unwrap(), vec![0, 144, 254]);
    assert_eq!(u.neg().unwrap().to_vec().unwrap(), vec![0, 56, 1]);
    let i = Tensor::<Cpu, i64, shape![2]>::from_vec(vec![-7, 7]).unwrap();
    assert_eq!(i.div_scalar(2).unwrap().to_vec().unwrap(), vec![-3, 3]);
    assert_eq!(i.rdiv_scalar(-14).unwrap().to_vec().unwrap(), vec![2, -2]);
}

#[test]
fn integer_division_by_zero_is_an_error() {
    let a = Tensor::<Cpu, i32, shape![2, 2]>::from_vec(vec![1, 2, 3, 4]).unwrap();
    let b = Tensor::<Cpu, i32, shape![2, 2]>::from_vec(vec![1, 0, 3, 4]).unwrap();
    let e = a.div(&b).unwrap_err();
    assert!(matches!(e, Error::Arithmetic { .. }), "{e:?}");
    assert!(
        e.to_string().contains("division by zero") && e.to_string().contains("`other`"),
        "{e}"
    );
    let e = a.div_scalar(0).unwrap_err();
    assert!(e.to_string().contains("scalar divisor"), "{e}");
    let e = b.rdiv_scalar(5).unwrap_err();
    assert!(e.to_string().contains("`self`"), "{e}");
    let u = Tensor::<Cpu, u8, shape![1]>::zeros().unwrap();
    assert!(u.div(&u).is_err());
    // Only the selected elements count: a 0 outside the view is fine.
    let wide = Tensor::<Cpu, i64, shape![2, 2]>::from_vec(vec![0, 2, 0, 4]).unwrap();
    let col = wide.narrow::<1, shape![2, 1]>(1, 1).unwrap();
    let ones = Tensor::<Cpu, i64, shape![2, 1]>::full(8).unwrap();
    assert_eq!(ones.div(&col).unwrap().to_vec().unwrap(), vec![4, 2]);
    // Float division by zero follows IEEE.
    let f = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![1.0, 0.0]).unwrap();
    let z = Tensor::<Cpu, f32, shape![2]>::zeros().unwrap();
    let q = f.div(&z).unwrap().to_vec().unwrap();
    assert!(q[0].is_infinite() && q[1].is_nan());
}

#[test]
fn nan_propagates_through_maximum_and_minimum() {
    for_float_dtypes!(T => {
        let n = T::from_f64(f64::NAN);
        let a = Tensor::<Cpu, T, shape![3]>::from_vec(vec![n, T::from_f64(1.0), T::from_f64(2.0)]).unwrap();
        let b = Tensor::<Cpu, T, shape![3]>::from_vec(vec![T::from_f64(0.0), n, T::from_f64(3.0)]).unwrap();
        for r in [a.maximum(&b).unwrap(), a.minimum(&b).unwrap()] {
            let v = r.to_vec().unwrap();
            assert!(v[0].to_f64().is_nan() && v[1].to_f64().is_nan(), "{}", name::<T>());
        }
        assert_eq!(a.maximum(&b).unwrap().to_vec().unwrap()[2].to_f64(), 3.0);
        assert_eq!(a.minimum(&b).unwrap().to_vec().unwrap()[2].to_f64(), 2.0);
    });
}

fn check_broadcast<T: TestDType>(rng: &mut Rng) {
    // (a dims, b dims, out dims)
    let cases: [(&[usize], &[usize], &[usize]); 6] = [
        // `b` gets a leading dim and grows; `a` does not (strict rule).
        (&[4, 5, 3], &[5, 1], &[4, 5, 3]),
        (&[2, 3, 4], &[4], &[2, 3, 4]),
        (&[1, 1, 1], &[3, 2, 5], &[3, 2, 5]),
        (&[3, 1, 5], &[1, 4, 1], &[3, 4, 5]),
        (&[0, 1, 3], &[1, 3], &[0, 1, 3]),
        (&[2, 0, 3], &[2, 1, 1], &[2, 0, 3]),
    ];
    for (ad, bd, od) in cases {
        let (av, a) = values::<T>(rng, numel(ad), 1.0, 20.0);
        let (bv, b) = values::<T>(rng, numel(bd), 1.0, 20.0);
        let at = Tensor::<Cpu, T, D3>::from_vec_dims(a, ad).unwrap();
        let want = |op: Op| -> Vec<f64> {
            indices(od)
                .iter()
                .map(|i| {
                    let pick = |dims: &[usize], vals: &[f64]| {
                        let pad = od.len() - dims.len();
                        let j: Vec<usize> = dims
                            .iter()
                            .enumerate()
                            .map(|(k, &d)| if d == 1 { 0 } else { i[pad + k] })
                            .collect();
                        vals[ravel(&j, dims)]
                    };
                    reference::<T>(op, pick(ad, &av), pick(bd, &bv))
                })
                .collect()
        };
        let what = format!("broadcast {} {ad:?} {bd:?} seed {}", name::<T>(), rng.seed);
        macro_rules! with_b {
            ($S:ty) => {{
                let bt = Tensor::<Cpu, T, $S>::from_vec_dims(b.clone(), bd).unwrap();
                let r: Tensor<Cpu, T, D3> = at.add_broadcast(&bt).unwrap();
                assert_eq!(r.shape(), od);
                assert_close(&r.to_vec().unwrap(), &want(Op::Add), T::TOL, &what);
                let r = at.sub_broadcast::<D3>(&bt).unwrap();
                assert_close(&r.to_vec().unwrap(), &want(Op::Sub), T::TOL, &what);
                let r = at.mul_broadcast::<D3>(&bt).unwrap();
                assert_close(&r.to_vec().unwrap(), &want(Op::Mul), T::TOL, &what);
                let r = at.div_broadcast::<D3>(&bt).unwrap();
                assert_close(&r.to_vec().unwrap(), &want(Op::Div), T::TOL, &what);
            }};
        }
        match bd.len() {
            1 => with_b!((Dyn,)),
            2 => with_b!(D2),
            _ => with_b!(D3),
        }
    }
}

#[test]
fn broadcasting_corners() {
    let mut rng = Rng::new("broadcasting_corners");
    for_num_dtypes!(T => { check_broadcast::<T>(&mut rng); });
}

#[test]
fn scalar_tensors_broadcast_everywhere() {
    let s = Tensor::<Cpu, f64, shape![]>::full(2.5).unwrap();
    let x = Tensor::<Cpu, f64, shape![2, 3]>::arange(0.0, 1.0).unwrap();
    let y: Tensor<Cpu, f64, shape![2, 3]> = s.mul_broadcast(&x).unwrap();
    assert_eq!(y.to_vec().unwrap(), vec![0.0, 2.5, 5.0, 7.5, 10.0, 12.5]);
    let z = s.add(&s).unwrap();
    assert_eq!(z.item().unwrap(), 5.0);
    let empty = Tensor::<Cpu, f64, (Dyn, Dyn)>::zeros_dims(&[0, 3]).unwrap();
    let e = empty.add_broadcast::<(Dyn, Dyn)>(&s).unwrap();
    assert_eq!(e.shape(), &[0, 3]);
    assert!(e.to_vec().unwrap().is_empty());
}

#[test]
fn broadcast_errors_name_the_operand() {
    let a = Tensor::<Cpu, f32, shape![2, 3]>::zeros().unwrap();
    let b = Tensor::<Cpu, f32, shape![4]>::zeros().unwrap();
    let e = a.add_broadcast::<shape![2, 3]>(&b).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("`self`") && msg.contains("`other`") && msg.contains("[4]"),
        "{msg}"
    );
    // A result type that does not fit the broadcast dims.
    let c = Tensor::<Cpu, f32, shape![3]>::zeros().unwrap();
    let e = a.add_broadcast::<shape![3, 3]>(&c).unwrap_err();
    assert!(e.to_string().contains("[2, 3]"), "{e}");
    // Same shape type with Dyn dims that do not broadcast.
    let x = Tensor::<Cpu, f32, (Dyn,)>::zeros_dims(&[3]).unwrap();
    let y = Tensor::<Cpu, f32, (Dyn,)>::zeros_dims(&[4]).unwrap();
    assert!(x.add(&y).unwrap_err().to_string().contains("`other`"));
    // With a run-time dim of 1 they broadcast, like PyTorch.
    let one = Tensor::<Cpu, f32, (Dyn,)>::ones_dims(&[1]).unwrap();
    assert_eq!(x.add(&one).unwrap().to_vec().unwrap(), vec![1.0; 3]);
    assert_eq!(
        tensorfn_runtime::broadcast_dims(&[&[2, 1, 4], &[1, 3, 1], &[]]).unwrap(),
        vec![2, 3, 4]
    );
    // Implicit rank promotion meeting a size-1 dim is an `Err` naming
    // both operands, for run-time dims too: `[N, 1]` with `[N]` is not
    // silently `[N, N]`.
    let col = Tensor::<Cpu, f32, (Dyn, Dyn)>::zeros_dims(&[3, 1]).unwrap();
    let e = col.add_broadcast::<(Dyn, Dyn)>(&x).unwrap_err().to_string();
    assert!(
        e.contains("`self` [3, 1] with `other` [3] to [3, 3]")
            && e.contains("`other.unsqueeze(1)`"),
        "{e}"
    );
    assert!(tensorfn_runtime::broadcast_dims(&[&[2, 1, 4], &[3, 1]]).is_err());
}

fn unary_reference(op: UnaryOp, x: f64) -> f64 {
    op.eval_f64(x)
}

fn check_unary_float<T: TestDType + FloatDType>(rng: &mut Rng) {
    for op in UnaryOp::ALL {
        for kind in KINDS {
            let dims = rng.dims(2, 0, 7);
            // Each op's named method is generated from the catalogue with
            // `unary`, and its doc example checks it against the reference.
            let (lo, hi) = op.test_domain();
            let (x, xv) = view::<T, D2>(rng, &dims, kind, lo, hi);
            let generic = x.unary(op).unwrap();
            let want: Vec<f64> = xv
                .iter()
                .map(|&v| round::<T>(unary_reference(op, v)))
                .collect();
            // f32 transcendentals are within a few ulp; values near 0 of
            // sin/cos/tanh/gelu are compared with the absolute floor.
            let tol = T::TOL * 4.0;
            let what = format!(
                "{} {} {kind:?} {dims:?} seed {}",
                op.name(),
                name::<T>(),
                rng.seed
            );
            assert_close(&generic.to_vec().unwrap(), &want, tol, &what);
        }
    }
}

#[test]
fn unary_float_ops() {
    let mut rng = Rng::new("unary_float_ops");
    for_float_dtypes!(T => { check_unary_float::<T>(&mut rng); });
}

/// Sine and cosine of mostly ordinary arguments with huge ones (beyond
/// 2^28, up to the largest f32), infinities and NaN at random places:
/// contiguous and transposed, in f32 and f16 (where the huge ones are
/// infinities).
#[test]
fn sin_cos_of_scattered_huge_arguments() {
    let mut rng = Rng::new("sin_cos_of_scattered_huge_arguments");
    let (rows, cols) = (37, 301);
    let x: Vec<f64> = (0..rows * cols)
        .map(|_| match rng.int(0, 400) {
            0 => f64::NAN,
            1 => f64::INFINITY,
            2 => f64::NEG_INFINITY,
            3..=6 => {
                (rng.uniform(28.0, 127.9).exp2() as f32 as f64).copysign(rng.uniform(-1.0, 1.0))
            }
            _ => rng.uniform(-6.0, 6.0) as f32 as f64,
        })
        .collect();
    fn check<T: TestDType + FloatDType>(x: &[f64], rows: usize, cols: usize, seed: u64) {
        let stored: Vec<T> = x.iter().map(|&v| T::from_f64(v)).collect();
        let xs: Vec<f64> = stored.iter().map(|v| v.to_f64()).collect();
        let m = Tensor::<Cpu, T, D2>::from_vec_dims(stored, &[rows, cols]).unwrap();
        let t: Tensor<Cpu, T, D2> = m.transpose(0, 1).unwrap();
        let logical_t: Vec<f64> = (0..rows * cols)
            .map(|k| xs[(k % rows) * cols + k / rows])
            .collect();
        for (v, logical) in [(&m, &xs), (&t, &logical_t)] {
            for (op, got, f) in [
                ("sin", v.sin().unwrap(), f64::sin as fn(f64) -> f64),
                ("cos", v.cos().unwrap(), f64::cos),
            ] {
                let want: Vec<f64> = logical.iter().map(|&x| round::<T>(f(x))).collect();
                let what = format!("{op} {} {:?} seed {seed}", name::<T>(), v.shape());
                assert_close(&got.to_vec().unwrap(), &want, T::TOL * 4.0, &what);
            }
        }
    }
    check::<f32>(&x, rows, cols, rng.seed);
    check::<f16>(&x, rows, cols, rng.seed);
}

fn check_unary_int<T: TestDType>(rng: &mut Rng) {
    for kind in KINDS {
        let dims = rng.dims(3, 1, 5);
        let (x, xv) = view::<T, D3>(rng, &dims, kind, -50.0, 50.0);
        let cases = [
            (x.neg().unwrap(), UnaryOp::Neg),
            (x.abs().unwrap(), UnaryOp::Abs),
            (x.relu().unwrap(), UnaryOp::Relu),
            (x.square().unwrap(), UnaryOp::Square),
        ];
        for (got, op) in cases {
            let want: Vec<f64> = xv
                .iter()
                .map(|&v| T::wrap(unary_reference(op, v) as i128))
                .collect();
            assert_close(
                &got.to_vec().unwrap(),
                &want,
                0.0,
                &format!("{} {}", op.name(), name::<T>()),
            );
        }
        let e = x.unary(UnaryOp::Exp).unwrap_err();
        assert!(e.to_string().contains("cast"), "{e}");
    }
}

#[test]
fn unary_integer_ops() {
    let mut rng = Rng::new("unary_integer_ops");
    check_unary_int::<i32>(&mut rng);
    check_unary_int::<i64>(&mut rng);
    check_unary_int::<u8>(&mut rng);
}

fn check_addcmul<T: TestDType>(rng: &mut Rng) {
    for kind in KINDS {
        let dims = rng.dims(2, 1, 6);
        let (x, xv) = view::<T, D2>(rng, &dims, kind, 0.0, 20.0);
        let k2 = *rng.pick(&KINDS);
        let (a, av) = view::<T, D2>(rng, &dims, k2, 0.0, 5.0);
        let k3 = *rng.pick(&KINDS);
        let (b, bv) = view::<T, D2>(rng, &dims, k3, 0.0, 5.0);
        let v = T::sample(rng, 1.0, 3.0);
        let got = x.addcmul(&a, &b, T::from_f64(v)).unwrap().to_vec().unwrap();
        let want: Vec<f64> = (0..xv.len())
            .map(|i| {
                if T::INT {
                    T::wrap(xv[i] as i128 + v as i128 * av[i] as i128 * bv[i] as i128)
                } else {
                    round::<T>(xv[i] + v * av[i] * bv[i])
                }
            })
            .collect();
        assert_close(
            &got,
            &want,
            T::TOL,
            &format!("addcmul {} {kind:?} seed {}", name::<T>(), rng.seed),
        );
    }
    // Broadcast form: a row and a column, every 1 written (a `[3]` row
    // would get a leading dim while the column grows too: an error).
    let (xv, x) = values::<T>(rng, 6, 0.0, 9.0);
    let (av, a) = values::<T>(rng, 3, 0.0, 3.0);
    let (bv, b) = values::<T>(rng, 2, 0.0, 3.0);
    let x = Tensor::<Cpu, T, shape![2, 3]>::from_vec(x).unwrap();
    let a = Tensor::<Cpu, T, shape![1, 3]>::from_vec(a).unwrap();
    let b = Tensor::<Cpu, T, shape![2, 1]>::from_vec(b).unwrap();
    let got = x
        .addcmul_broadcast::<shape![2, 3]>(&a, &b, T::one())
        .unwrap()
        .to_vec()
        .unwrap();
    let want: Vec<f64> = (0..6)
        .map(|i| T::wrap(0) + round::<T>(xv[i] + av[i % 3] * bv[i / 3]))
        .collect();
    assert_close(
        &got,
        &want,
        T::TOL,
        &format!("addcmul_broadcast {}", name::<T>()),
    );
    let bad = Tensor::<Cpu, T, shape![4]>::zeros().unwrap();
    let e = x
        .addcmul_broadcast::<shape![2, 3]>(&bad, &b, T::one())
        .unwrap_err();
    assert!(e.to_string().contains("`tensor1`"), "{e}");
    let row = Tensor::<Cpu, T, shape![3]>::zeros().unwrap();
    let e = x
        .addcmul_broadcast::<shape![2, 3]>(&row, &b, T::one())
        .unwrap_err();
    assert!(e.to_string().contains("both operands grow"), "{e}");
}

#[test]
fn addcmul_every_dtype() {
    let mut rng = Rng::new("addcmul_every_dtype");
    for_num_dtypes!(T => { check_addcmul::<T>(&mut rng); });
}

#[test]
fn large_inputs_take_the_parallel_path() {
    let mut rng = Rng::new("large_inputs_take_the_parallel_path");
    let dims = [300, 257];
    let (a, av) = view::<f32, D2>(&mut rng, &dims, Kind::Transposed, -1.0, 1.0);
    let (b, bv) = view::<f32, D2>(&mut rng, &dims, Kind::Broadcast, -1.0, 1.0);
    let got = a.mul(&b).unwrap().to_vec().unwrap();
    let want: Vec<f64> = av
        .iter()
        .zip(&bv)
        .map(|(x, y)| round::<f32>(x * y))
        .collect();
    assert_close(&got, &want, 0.0, "parallel mul");
    let (h, hv) = view::<f16, D2>(&mut rng, &dims, Kind::Permuted, -3.0, 3.0);
    let got = h.exp().unwrap().to_vec().unwrap();
    let want: Vec<f64> = hv.iter().map(|x| round::<f16>(x.exp())).collect();
    assert_close(&got, &want, f16::TOL, "parallel f16 exp");
    let (g, gv) = view::<bf16, D2>(&mut rng, &dims, Kind::Sliced, -3.0, 3.0);
    let got = g.add_scalar(bf16::from_f64(0.5)).unwrap().to_vec().unwrap();
    let want: Vec<f64> = gv.iter().map(|x| round::<bf16>(x + 0.5)).collect();
    assert_close(&got, &want, bf16::TOL, "parallel bf16 add_scalar");
}
