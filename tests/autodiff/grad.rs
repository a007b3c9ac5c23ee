//! `#[grad]`: every derivative rule of `tensor_fn!` against `f64` central
//! finite differences, on seeded random inputs (a few seeds per case),
//! through `name::value_and_grad`; broadcasting, scalar operands,
//! parameter structs, dtype-generic functions and a few `f32` cases with
//! a looser tolerance; `name::vjp` of layers with a tensor result, and a
//! chain of layers by hand against the gradient of the composed loss.

use crate::common::*;
use tensorfn::prelude::*;
use tensorfn::{DType, Shape};

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

/// The gradients `value_and_grad` gives, flattened.
trait Flat {
    fn flat(&self) -> Vec<Vec<f64>>;
}

impl<S: Shape> Flat for Tensor<Cpu, f64, S> {
    fn flat(&self) -> Vec<Vec<f64>> {
        vec![value(self)]
    }
}

impl<A: Flat, B: Flat> Flat for (A, B) {
    fn flat(&self) -> Vec<Vec<f64>> {
        let mut v = self.0.flat();
        v.extend(self.1.flat());
        v
    }
}

impl<A: Flat, B: Flat, C: Flat> Flat for (A, B, C) {
    fn flat(&self) -> Vec<Vec<f64>> {
        let mut v = self.0.flat();
        v.extend(self.1.flat());
        v.extend(self.2.flat());
        v
    }
}

/// A `#[grad]` function of every parameter, and a test comparing its
/// gradients with finite differences on three seeds.
macro_rules! fd_case {
    ($test:ident: $(#[kernel] $k:item)* fn $name:ident($($p:ident: [$($d:literal),*] in ($lo:expr, $hi:expr)),+) { $($body:tt)* }) => {
        tensor_fn! {
            $(#[kernel] $k)*
            #[grad($($p),+)]
            fn $name($($p: &Tensor<Cpu, f64, [$($d),*]>),+) -> Tensor<Cpu, f64, []> { $($body)* }
        }

        #[test]
        fn $test() {
            for seed in 0..3u64 {
                let mut k = 0u64;
                let inputs: Vec<Vec<f64>> = vec![$({
                    k += 1;
                    rand_vec(1 $(* $d)*, seed * 31 + k, $lo, $hi)
                }),+];
                let eval = |xs: &[Vec<f64>]| -> f64 {
                    let mut it = xs.iter();
                    $(let $p = tensor::<shape![$($d),*]>(it.next().unwrap());)+
                    value(&$name($(&$p),+).unwrap())[0]
                };
                let (v, grads) = {
                    let mut it = inputs.iter();
                    $(let $p = tensor::<shape![$($d),*]>(it.next().unwrap());)+
                    let (v, g) = $name::value_and_grad($(&$p),+).unwrap();
                    (value(&v)[0], g.flat())
                };
                assert_eq!(v, eval(&inputs), "{}: value", stringify!($name));
                for (i, g) in grads.iter().enumerate() {
                    check_fd(
                        &format!("{} (operand {i}, seed {seed})", stringify!($name)),
                        &inputs[i],
                        g,
                        |xi| {
                            let mut xs = inputs.clone();
                            xs[i] = xi.to_vec();
                            eval(&xs)
                        },
                        1e-6,
                    );
                }
            }
        }
    };
}

// Binary ops, with broadcasting both ways and scalars.
fd_case!(add_broadcast: fn b_add(x: [3, 4] in (-2.0, 2.0), y: [4] in (-2.0, 2.0)) { sin(x + y).sum() });
fd_case!(sub_broadcast: fn b_sub(x: [3, 1] in (-2.0, 2.0), y: [3, 4] in (-2.0, 2.0)) { sin(x - y).sum() });
fd_case!(mul_broadcast: fn b_mul(x: [2, 3, 4] in (-2.0, 2.0), y: [3, 1] in (-2.0, 2.0)) { sin(x * y).sum() });
fd_case!(div_broadcast: fn b_div(x: [3, 4] in (-2.0, 2.0), y: [1, 4] in (0.5, 2.0)) { sin(x / y).sum() });
fd_case!(maximum_minimum: fn b_maxmin(x: [3, 4] in (-2.0, 2.0), y: [4] in (-2.0, 2.0)) {
    (sin(maximum(x, y)) + cos(minimum(x, y))).sum()
});
fd_case!(pow_tensor: fn b_pow(x: [3, 4] in (0.5, 2.0), y: [3, 4] in (-1.5, 1.5)) { pow(x, y).sum() });
fd_case!(scalars: fn b_scalars(x: [3, 4] in (0.5, 2.0)) { sin(x * 2.0 - 1.0 / x + 0.5).sum() });
fd_case!(leaky_relu_elu: fn b_leaky(x: [3, 4] in (-2.0, 2.0)) { (sin(leaky_relu(x, 0.2)) + sin(elu(x))).sum() });
fd_case!(addcmul_rule: fn b_addcmul(x: [3, 4] in (-2.0, 2.0), a: [1, 4] in (-2.0, 2.0), b: [3, 1] in (-2.0, 2.0)) {
    sin(addcmul(x, a, b, 0.5)).sum()
});
fd_case!(where_branches: fn s_where(x: [3, 4] in (-2.0, 2.0), y: [3, 4] in (-2.0, 2.0)) {
    sin(where_(x.gt(y), x * x, y * 3.0)).sum()
});
fd_case!(masked_fill_rule: fn s_masked(x: [3, 4] in (-2.0, 2.0)) { sin(x.masked_fill(x.gt(0.5), 2.0) * x).sum() });

// Products.
fd_case!(matmul_2d: fn m_mm(x: [3, 4] in (-1.0, 1.0), y: [4, 5] in (-1.0, 1.0)) { sin(matmul(x, y)).sum() });
fd_case!(matmul_batched: fn m_bmm_b(x: [2, 3, 4] in (-1.0, 1.0), y: [4, 5] in (-1.0, 1.0)) { sin(matmul(x, y)).sum() });
fd_case!(bmm_rule: fn m_bmm(x: [2, 3, 4] in (-1.0, 1.0), y: [2, 4, 5] in (-1.0, 1.0)) { sin(bmm(x, y)).sum() });
fd_case!(dot_rule: fn m_dot(x: [4] in (-1.0, 1.0), y: [4] in (-1.0, 1.0)) { sin(dot(x, y)) });
fd_case!(addmm_rule: fn m_addmm(b: [5] in (-1.0, 1.0), x: [3, 4] in (-1.0, 1.0), y: [4, 5] in (-1.0, 1.0)) {
    sin(addmm(b, x, y, beta = 0.5, alpha = 2.0)).sum()
});

// Views.
fd_case!(t_reshape: fn v_t(x: [3, 4] in (-2.0, 2.0), w: [2, 6] in (-1.0, 1.0)) { (sin(x.t()).reshape([2, 6]) * w).sum() });
fd_case!(permute_transpose: fn v_perm(x: [2, 3, 4] in (-2.0, 2.0), w: [4, 3, 2] in (-1.0, 1.0)) {
    (sin(x.permute([2, 1, 0])) * w + cos(x.transpose(0, 2)) * w).sum()
});
fd_case!(expand_rule: fn v_expand(x: [3, 1] in (-2.0, 2.0), w: [2, 3, 4] in (-1.0, 1.0)) { (x.expand([2, 3, 4]) * w).sum() });
fd_case!(narrow_rule: fn v_narrow(x: [3, 5] in (-2.0, 2.0)) { sin(x.narrow(1, 1, 3)).sum() });
// An empty slice of an empty dim: nothing to place back.
fd_case!(narrow_empty_dim: fn v_narrow_e(x: [3, 0] in (-2.0, 2.0), w: [3] in (-1.0, 1.0)) {
    sin(x.narrow(1, 0, 0)).sum() + (x.sum(1) * w).sum() + sin(w).sum()
});

// Reductions.
fd_case!(sum_mean_dims: fn r_sum(x: [3, 4] in (-2.0, 2.0)) {
    (sin(x.sum(1)).sum() + cos(x.mean(0)).sum() + sin(x.mean()) + sin(x.sum(0, keepdim = true) * x).sum())
});
fd_case!(max_min_dim: fn r_max(x: [3, 4] in (-2.0, 2.0)) { (sin(x.max(1)).sum() + cos(x.min(0)).sum()) });
fd_case!(max_all: fn r_max_all(x: [3, 4] in (-2.0, 2.0)) { sin(x.max()) + x.min() * 2.0 });

// Row ops.
fd_case!(softmax_rule: fn w_softmax(x: [3, 4] in (-2.0, 2.0), w: [3, 4] in (-1.0, 1.0)) { (x.softmax(1) * w).sum() + (x.softmax(0) * w).sum() });
fd_case!(log_softmax_rule: fn w_lsm(x: [3, 4] in (-2.0, 2.0), w: [3, 4] in (-1.0, 1.0)) { (x.log_softmax(1) * w).sum() });
fd_case!(logsumexp_rule: fn w_lse(x: [3, 4] in (-2.0, 2.0)) { sin(x.logsumexp(1)).sum() + x.logsumexp(0).sum() });

// Joins.
fd_case!(cat_rule: fn j_cat(x: [3, 2] in (-2.0, 2.0), y: [3, 4] in (-2.0, 2.0), w: [3, 6] in (-1.0, 1.0)) { (cat([x, y], 1) * w).sum() });
fd_case!(stack_rule: fn j_stack(x: [3, 4] in (-2.0, 2.0), y: [3, 4] in (-2.0, 2.0), w: [3, 2, 4] in (-1.0, 1.0)) { (stack([x, y], 1) * w).sum() });

// `topk`'s values: their gradient goes to the picked positions (random
// inputs have no ties); its indices, used as an index, carry none.
fd_case!(topk_values: fn s_topk(x: [3, 5] in (-2.0, 2.0), w: [3, 2] in (-1.0, 1.0)) {
    let (v, i) = x.topk(2);
    (sin(v) * w).sum() + (gather(x, 1, i) * w).sum()
});
fd_case!(topk_values_along_dim_0: fn s_topk0(x: [4, 2, 3] in (-2.0, 2.0), w: [3, 2, 3] in (-1.0, 1.0)) {
    let (v, _) = topk(x * x, 3, dim = 0);
    (v * w).sum()
});

// `#[kernel]`s: differentiated through their element programs, with the
// same rules as the catalogue's ops, fused with their neighbours.
fd_case!(kernel_with_built_ins:
    #[kernel]
    fn swishy(v: f64) -> f64 {
        v * tanh(v) + exp(-v * v) / (1.0 + v.abs())
    }
    fn k_swishy(x: [3, 4] in (-2.0, 2.0)) { (sin(x) * swishy(x * 2.0 - 0.5)).sum() });
fd_case!(kernel_with_a_branch:
    #[kernel]
    fn leaky(v: f64, slope: f64) -> f64 {
        if v > 0.0 { v * v } else { slope * v.sin() }
    }
    fn k_leaky(x: [3, 4] in (-2.0, 2.0), s: [4] in (0.1, 0.5)) { (leaky(x, s) * cos(x)).sum() + leaky(x, 0.2).mean() });
fd_case!(kernel_calling_a_kernel_with_scalars:
    #[kernel]
    fn sq(v: f64) -> f64 {
        v * v
    }
    #[kernel]
    fn soft(a: f64, b: f64, t: f64) -> f64 {
        let m = a.max(b) + (sq(a - b) + 1.0).ln() / t;
        let c = (m as f64).tanh();
        c * pow(sq(t) + 1.0, 0.5) + a.min(b)
    }
    fn k_soft(x: [3, 4] in (-2.0, 2.0), y: [3, 1] in (-2.0, 2.0)) { sin(soft(x, y, 1.5)).sum() + soft(x, x, 2.0).sum() });

#[derive(Params)]
struct Mlp<D: Device, T: Float> {
    w1: Tensor<D, T, shape![4, 8]>,
    b1: Tensor<D, T, shape![8]>,
    w2: Tensor<D, T, shape![8, 3]>,
    b2: Tensor<D, T, shape![3]>,
    unused: Tensor<D, T, shape![2]>,
}

tensor_fn! {
    /// A dtype- and device-generic loss over a parameter struct.
    #[grad(p)]
    fn mlp_loss<D: Device, T: Float, const B: usize>(
        x: &Tensor<D, T, [B, 4]>,
        p: &Mlp<D, T>,
    ) -> Tensor<D, T, []> {
        let h = tanh(addmm(p.b1, x, p.w1));
        addmm(p.b2, h, p.w2).log_softmax(1).mean()
    }

    /// Gradients of a tensor and a struct, in `#[grad]` order.
    #[grad(p, x)]
    fn mlp_both(x: &Tensor<Cpu, f64, [2, 4]>, p: &Mlp<Cpu, f64>) -> Tensor<Cpu, f64, []> {
        let h = tanh(addmm(p.b1, x, p.w1));
        (addmm(p.b2, h, p.w2) * 0.5).logsumexp(1).sum()
    }
}

tensor_fn! {
    /// `mlp_loss` with GELU: its 16-bit instances fold the forward's
    /// `gelu(addmm)` and the backward's `(g w2ᵀ) * gelu'(p)` with b1's
    /// column sum into the GELU epilogue products; f64 does not.
    #[grad(p)]
    fn gelu_mlp_loss<D: Device, T: Float, const B: usize>(
        x: &Tensor<D, T, [B, 4]>,
        p: &Mlp<D, T>,
    ) -> Tensor<D, T, []> {
        let h = gelu(addmm(p.b1, x, p.w1));
        addmm(p.b2, h, p.w2).log_softmax(1).mean()
    }
}

/// An instance's MLP gradients (`w1`, `b1`, `w2`, `b2`) within `tol` of
/// the f64 ones, element by element.
fn assert_mlp_grads_close(
    kind: impl std::fmt::Display,
    got: &[Vec<f64>],
    want: &[Vec<f64>],
    tol: f64,
) {
    for (f, (a, b)) in got.iter().zip(want).enumerate() {
        for (i, (a, b)) in a.iter().zip(b).enumerate() {
            assert!((a - b).abs() <= tol, "{kind}: field {f}[{i}]: {a} vs {b}");
        }
    }
}

#[test]
fn folded_gelu_layers_agree_with_f64() {
    let sizes = [32, 8, 24, 3, 2];
    for seed in 0..3u64 {
        let pv: Vec<Vec<f64>> = sizes
            .iter()
            .enumerate()
            .map(|(k, &n)| rand_vec(n, seed * 10 + 190 + k as u64, -1.0, 1.0))
            .collect();
        let xv = rand_vec(20, seed + 199, -2.0, 2.0);
        let x = tensor::<shape![5, 4]>(&xv);
        let p = mlp_from(&pv);
        let (_, want) = gelu_mlp_loss::value_and_grad(&x, &p).unwrap();
        let want = mlp_flat(&want);
        // The f64 gradient itself against finite differences.
        check_fd(
            "gelu mlp w1",
            &pv[0],
            &want[0],
            |xi| {
                let mut q = pv.clone();
                q[0] = xi.to_vec();
                value(&gelu_mlp_loss(&x, &mlp_from(&q)).unwrap())[0]
            },
            1e-6,
        );
        fn check<T: Float + Into<f64>>(
            x: &Tensor<Cpu, f64, shape![5, 4]>,
            p: &Mlp<Cpu, f64>,
            want: &[Vec<f64>],
            tol: f64,
        ) {
            let (_, g) =
                gelu_mlp_loss::value_and_grad(&x.cast::<T>().unwrap(), &p.cast::<T>().unwrap())
                    .unwrap();
            let got = [value(&g.w1), value(&g.b1), value(&g.w2), value(&g.b2)];
            assert_mlp_grads_close(T::KIND, &got, want, tol);
        }
        check::<f32>(&x, &p, &want, 1e-5);
        check::<f16>(&x, &p, &want, 2e-2);
        check::<bf16>(&x, &p, &want, 1e-1);
    }
}

fn mlp_from(v: &[Vec<f64>]) -> Mlp<Cpu, f64> {
    Mlp {
        w1: tensor(&v[0]),
        b1: tensor(&v[1]),
        w2: tensor(&v[2]),
        b2: tensor(&v[3]),
        unused: tensor(&v[4]),
    }
}

fn mlp_flat(p: &Mlp<Cpu, f64>) -> Vec<Vec<f64>> {
    vec![
        value(&p.w1),
        value(&p.b1),
        value(&p.w2),
        value(&p.b2),
        value(&p.unused),
    ]
}

#[test]
fn parameter_struct_gradients() {
    let sizes = [32, 8, 24, 3, 2];
    for seed in 0..3u64 {
        let pv: Vec<Vec<f64>> = sizes
            .iter()
            .enumerate()
            .map(|(k, &n)| rand_vec(n, seed * 7 + k as u64, -1.0, 1.0))
            .collect();
        let xv = rand_vec(20, seed + 50, -2.0, 2.0);
        let x = tensor::<shape![5, 4]>(&xv);
        let (v, g) = mlp_loss::value_and_grad(&x, &mlp_from(&pv)).unwrap();
        assert_eq!(value(&v), value(&mlp_loss(&x, &mlp_from(&pv)).unwrap()));
        let g = mlp_flat(&g);
        assert_eq!(g[4], vec![0.0, 0.0], "a field the loss does not read");
        for f in 0..4 {
            check_fd(
                &format!("mlp field {f}"),
                &pv[f],
                &g[f],
                |xi| {
                    let mut q = pv.clone();
                    q[f] = xi.to_vec();
                    value(&mlp_loss(&x, &mlp_from(&q)).unwrap())[0]
                },
                1e-6,
            );
        }
        // Two parameters: the struct's gradient first, as written.
        let x2v = rand_vec(8, seed + 60, -2.0, 2.0);
        let x2 = tensor::<shape![2, 4]>(&x2v);
        let (_, (gp, gx)) = mlp_both::value_and_grad(&x2, &mlp_from(&pv)).unwrap();
        check_fd(
            "mlp_both x",
            &x2v,
            &value(&gx),
            |xi| value(&mlp_both(&tensor(xi), &mlp_from(&pv)).unwrap())[0],
            1e-6,
        );
        check_fd(
            "mlp_both w2",
            &pv[2],
            &value(&gp.w2),
            |xi| {
                let mut q = pv.clone();
                q[2] = xi.to_vec();
                value(&mlp_both(&x2, &mlp_from(&q)).unwrap())[0]
            },
            1e-6,
        );
    }
}

#[test]
fn f32_and_16_bit_instances_agree_with_f64() {
    let sizes = [32, 8, 24, 3, 2];
    let pv: Vec<Vec<f64>> = sizes
        .iter()
        .enumerate()
        .map(|(k, &n)| rand_vec(n, 90 + k as u64, -1.0, 1.0))
        .collect();
    let xv = rand_vec(20, 99, -2.0, 2.0);
    let x = tensor::<shape![5, 4]>(&xv);
    let p = mlp_from(&pv);
    let (_, want) = mlp_loss::value_and_grad(&x, &p).unwrap();
    let want = mlp_flat(&want);
    fn check<T: Float + Into<f64>>(
        x: &Tensor<Cpu, f64, shape![5, 4]>,
        p: &Mlp<Cpu, f64>,
        want: &[Vec<f64>],
        tol: f64,
    ) {
        let (_, g) =
            mlp_loss::value_and_grad(&x.cast::<T>().unwrap(), &p.cast::<T>().unwrap()).unwrap();
        let got = [value(&g.w1), value(&g.b1), value(&g.w2), value(&g.b2)];
        assert_mlp_grads_close(T::KIND, &got, want, tol);
    }
    check::<f32>(&x, &p, &want, 1e-5);
    check::<f16>(&x, &p, &want, 2e-2);
    check::<bf16>(&x, &p, &want, 1e-1);
}

tensor_fn! {
    fn mlp_logits<D: Device, T: Float, const B: usize>(
        x: &Tensor<D, T, [B, 4]>,
        p: &Mlp<D, T>,
    ) -> Tensor<D, T, [B, 3]> {
        let h = tanh(addmm(p.b1, x, p.w1));
        addmm(p.b2, h, p.w2)
    }

    /// The loss through a call: the callee's body is differentiated at
    /// the call.
    #[grad(p)]
    fn call_loss<D: Device, T: Float, const B: usize>(
        x: &Tensor<D, T, [B, 4]>,
        p: &Mlp<D, T>,
    ) -> Tensor<D, T, []> {
        mlp_logits(x, p).log_softmax(1).mean()
    }
}

#[test]
fn gradients_through_calls() {
    let sizes = [32, 8, 24, 3, 2];
    let pv: Vec<Vec<f64>> = sizes
        .iter()
        .enumerate()
        .map(|(k, &n)| rand_vec(n, 70 + k as u64, -1.0, 1.0))
        .collect();
    let x = tensor::<shape![5, 4]>(&rand_vec(20, 79, -2.0, 2.0));
    let (v, g) = call_loss::value_and_grad(&x, &mlp_from(&pv)).unwrap();
    let (w, h) = mlp_loss::value_and_grad(&x, &mlp_from(&pv)).unwrap();
    assert_eq!(value(&v), value(&w));
    assert_eq!(mlp_flat(&g), mlp_flat(&h));
    let (_, g32) = call_loss::value_and_grad(
        &x.cast::<f32>().unwrap(),
        &mlp_from(&pv).cast::<f32>().unwrap(),
    )
    .unwrap();
    for (a, b) in value(&g32.w1).iter().zip(&value(&h.w1)) {
        assert!((a - b).abs() < 1e-5);
    }
}

tensor_fn! {
    /// Rules with their own runtime calls (reductions, row ops, `cat`,
    /// transposed products, expands) on any device.
    #[grad(x, w)]
    fn mixed<D: Device, T: Float>(
        x: &Tensor<D, T, [6, 5]>,
        w: &Tensor<D, T, [5, 3]>,
    ) -> Tensor<D, T, []> {
        let y = matmul(x, w);
        let z = cat([y.softmax(1), y.log_softmax(0), y.t().reshape([6, 3])], 1);
        (z * z).sum() + y.max(1).sum() + y.logsumexp(0).mean() + maximum(y, y * 0.5).mean()
    }
}

fn close(what: &str, a: &[f64], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * x.abs().max(1.0),
            "{what}[{i}]: cpu {x}, gpu {y}"
        );
    }
}

#[test]
fn mixed_rules_against_finite_differences() {
    let xv = rand_vec(30, 5, -1.0, 1.0);
    let wv = rand_vec(15, 6, -1.0, 1.0);
    let (x, w) = (tensor::<shape![6, 5]>(&xv), tensor::<shape![5, 3]>(&wv));
    let (_, (gx, gw)) = mixed::value_and_grad(&x, &w).unwrap();
    check_fd(
        "mixed x",
        &xv,
        &value(&gx),
        |xi| value(&mixed(&tensor(xi), &w).unwrap())[0],
        1e-6,
    );
    check_fd(
        "mixed w",
        &wv,
        &value(&gw),
        |wi| value(&mixed(&x, &tensor(wi)).unwrap())[0],
        1e-6,
    );
}

#[test]
fn gpu_gradients_match_the_cpu() {
    let probe = Tensor::<Cpu, f32, shape![1]>::ones().unwrap();
    if let Err(e) = probe.to_device::<Cuda>() {
        eprintln!("skipping: no CUDA device ({e})");
        return;
    }
    let sizes = [32, 8, 24, 3, 2];
    let pv: Vec<Vec<f64>> = sizes
        .iter()
        .enumerate()
        .map(|(k, &n)| rand_vec(n, 40 + k as u64, -1.0, 1.0))
        .collect();
    let p = mlp_from(&pv);
    let x = tensor::<shape![5, 4]>(&rand_vec(20, 49, -2.0, 2.0));
    let (v, g) = mlp_loss::value_and_grad(&x, &p).unwrap();
    let (want_v, want) = (value(&v), mlp_flat(&g));
    // f64 and f32 on the GPU against the f64 CPU gradients.
    let (gv, gg) = mlp_loss::value_and_grad(
        &x.to_device::<Cuda>().unwrap(),
        &p.to_device::<Cuda>().unwrap(),
    )
    .unwrap();
    close(
        "mlp value f64",
        &want_v,
        &value(&gv.to_cpu().unwrap()),
        1e-12,
    );
    let got = mlp_flat(&gg.to_device::<Cpu>().unwrap());
    for f in 0..5 {
        close(&format!("mlp f64 field {f}"), &want[f], &got[f], 1e-12);
    }
    let (_, g32) = mlp_loss::value_and_grad(
        &x.cast::<f32>().unwrap().to_device::<Cuda>().unwrap(),
        &p.cast::<f32>().unwrap().to_device::<Cuda>().unwrap(),
    )
    .unwrap();
    let g32 = g32.to_device::<Cpu>().unwrap().cast::<f64>().unwrap();
    let got = mlp_flat(&g32);
    for f in 0..5 {
        close(&format!("mlp f32 field {f}"), &want[f], &got[f], 1e-5);
    }
    let (x, w) = (
        tensor::<shape![6, 5]>(&rand_vec(30, 1, -1.0, 1.0)),
        tensor::<shape![5, 3]>(&rand_vec(15, 2, -1.0, 1.0)),
    );
    let (_, (cx, cw)) = mixed::value_and_grad(&x, &w).unwrap();
    let (_, (gx, gw)) = mixed::value_and_grad(
        &x.to_device::<Cuda>().unwrap(),
        &w.to_device::<Cuda>().unwrap(),
    )
    .unwrap();
    close("mixed x", &value(&cx), &value(&gx.to_cpu().unwrap()), 1e-12);
    close("mixed w", &value(&cw), &value(&gw.to_cpu().unwrap()), 1e-12);
}

tensor_fn! {
    /// Run-time dims: means and broadcasts whose counts are known only
    /// when the function runs.
    #[grad(x, b)]
    fn dyn_dims(x: &Tensor<Cpu, f64, [N, 3]>, b: &Tensor<Cpu, f64, [3]>) -> Tensor<Cpu, f64, []> {
        sin(x + b).mean(0).sum() + cos(x).mean() + (x * b).sum(1).mean()
    }
}

#[test]
fn run_time_dims() {
    for n in [1usize, 4] {
        let xv = rand_vec(n * 3, n as u64, -2.0, 2.0);
        let bv = rand_vec(3, 9, -2.0, 2.0);
        let xt = |v: &[f64]| {
            Tensor::<Cpu, f64, shape![_, 3]>::from_vec_dims(v.to_vec(), &[n, 3]).unwrap()
        };
        let b = tensor::<shape![3]>(&bv);
        let (_, (gx, gb)) = dyn_dims::value_and_grad(&xt(&xv), &b).unwrap();
        check_fd(
            "dyn x",
            &xv,
            &value(&gx),
            |xi| value(&dyn_dims(&xt(xi), &b).unwrap())[0],
            1e-6,
        );
        check_fd(
            "dyn b",
            &bv,
            &value(&gb),
            |bi| value(&dyn_dims(&xt(&xv), &tensor(bi)).unwrap())[0],
            1e-6,
        );
    }
}

// Norms (a composite backward: the statistics recomputed from the input).
fd_case!(layer_norm_rule: fn n_ln(x: [3, 5] in (-2.0, 2.0), w: [5] in (-1.5, 1.5), b: [5] in (-1.0, 1.0)) {
    sin(layer_norm(x, w, b, 1e-5)).sum()
});
fd_case!(layer_norm_default_eps: fn n_ln_d(x: [2, 3, 4] in (-2.0, 2.0), w: [4] in (-1.5, 1.5), b: [4] in (-1.0, 1.0)) {
    sin(layer_norm(x, w, b)).sum()
});
fd_case!(rms_norm_rule: fn n_rms(x: [3, 5] in (-2.0, 2.0), w: [5] in (-1.5, 1.5)) { sin(rms_norm(x, w, 1e-6)).sum() });
// The norms' edge cases through the fused backward: rows of one element
// (layer_norm's normalised value is 0 whatever `x`, so `dx` and `dweight`
// are 0), no rows at all (every gradient 0), and rows far from 0 (the
// statistics recomputed from `x` must not lose the row's spread).
fd_case!(layer_norm_width_1: fn n_ln_w1(x: [4, 1] in (-2.0, 2.0), w: [1] in (-1.5, 1.5), b: [1] in (-1.0, 1.0)) {
    sin(layer_norm(x, w, b, 1e-5)).sum()
});
fd_case!(rms_norm_width_1: fn n_rms_w1(x: [4, 1] in (-0.01, 0.01), w: [1] in (-1.5, 1.5)) {
    sin(rms_norm(x, w, 1e-4)).sum()
});
fd_case!(layer_norm_empty_batch: fn n_ln_e(x: [0, 4] in (-2.0, 2.0), w: [4] in (-1.5, 1.5), b: [4] in (-1.0, 1.0)) {
    sin(layer_norm(x, w, b, 1e-5)).sum() + w.sum()
});
fd_case!(rms_norm_empty_batch: fn n_rms_e(x: [2, 0, 3] in (-2.0, 2.0), w: [3] in (-1.5, 1.5)) {
    sin(rms_norm(x, w)).sum() + w.sum()
});
fd_case!(layer_norm_large: fn n_ln_big(x: [3, 6] in (990.0, 1010.0), w: [6] in (-1.5, 1.5), b: [6] in (-1.0, 1.0)) {
    sin(layer_norm(x, w, b, 1e-5)).sum()
});
fd_case!(rms_norm_large: fn n_rms_big(x: [3, 6] in (-1e4, 1e4), w: [6] in (-1.5, 1.5)) {
    sin(rms_norm(x, w, 1e-6)).sum()
});
// batch_norm: a composite of reductions and elementwise ops, so its
// gradients come from theirs. Training mode normalises with the batch's
// statistics (the running ones, here derived from `w`, are unused);
// inference mode with the running statistics, which get gradients too.
fd_case!(batch_norm_training: fn n_bn(x: [3, 2, 4] in (-2.0, 2.0), w: [2] in (-1.5, 1.5), b: [2] in (-1.0, 1.0)) {
    sin(batch_norm(x, w * 0.0, w * 0.0 + 1.0, w, b, training = true)).sum()
});
fd_case!(batch_norm_training_2d: fn n_bn4(x: [2, 3, 2, 2] in (-2.0, 2.0), w: [3] in (-1.5, 1.5), b: [3] in (-1.0, 1.0)) {
    sin(batch_norm(x, w * 0.0, w * 0.0 + 1.0, w, b, true, 0.1, 1e-3)).sum()
});
fd_case!(batch_norm_inference: fn n_bn_eval(x: [3, 2] in (-2.0, 2.0), v: [2] in (0.5, 2.0), w: [2] in (-1.5, 1.5)) {
    sin(batch_norm(x, w * 0.5, v, w, w + 1.0)).sum()
});
fd_case!(rope_rule: fn n_rope(x: [2, 3, 4] in (-2.0, 2.0), c: [3, 4] in (-1.0, 1.0), s: [3, 4] in (-1.0, 1.0)) {
    sin(rope(x, c, s)).sum()
});

tensor_fn! {
    #[grad(x)]
    fn xent_mean(x: &Tensor<Cpu, f64, [5, 7]>, y: &Tensor<Cpu, i64, [5]>) -> Tensor<Cpu, f64, []> {
        cross_entropy(x, y)
    }

    #[grad(x)]
    fn xent_smoothed_sum(x: &Tensor<Cpu, f64, [5, 7]>, y: &Tensor<Cpu, i64, [5]>) -> Tensor<Cpu, f64, []> {
        cross_entropy(x, y, reduction = "sum", label_smoothing = 0.2, ignore_index = 3)
    }

    #[grad(x)]
    fn xent_rows(x: &Tensor<Cpu, f64, [5, 7]>, y: &Tensor<Cpu, i64, [5]>, w: &Tensor<Cpu, f64, [5]>) -> Tensor<Cpu, f64, []> {
        (cross_entropy(x, y, reduction = "none") * w).sum()
    }

    #[grad(x)]
    fn running(x: &Tensor<Cpu, f64, [3, 6]>, w: &Tensor<Cpu, f64, [3, 6]>) -> Tensor<Cpu, f64, []> {
        (cumsum(x, 1) * w).sum() + (x.cumsum(0) * w).sum()
    }
}

#[test]
fn cross_entropy_and_cumsum_against_finite_differences() {
    for seed in 0..3u64 {
        let x0 = rand_vec(35, seed, -3.0, 3.0);
        let ids: Vec<i64> = rand_vec(5, seed + 7, 0.0, 7.0)
            .iter()
            .map(|v| *v as i64)
            .collect();
        let y = Tensor::<Cpu, i64, shape![5]>::from_vec(ids).unwrap();
        let w0 = rand_vec(5, seed + 9, -1.0, 1.0);
        let w = tensor::<shape![5]>(&w0);
        let x = tensor::<shape![5, 7]>(&x0);
        let (_, g) = xent_mean::value_and_grad(&x, &y).unwrap();
        check_fd(
            "cross_entropy mean",
            &x0,
            &value(&g),
            |xs| value(&xent_mean(&tensor(xs), &y).unwrap())[0],
            1e-6,
        );
        let (_, g) = xent_smoothed_sum::value_and_grad(&x, &y).unwrap();
        check_fd(
            "cross_entropy smoothed sum",
            &x0,
            &value(&g),
            |xs| value(&xent_smoothed_sum(&tensor(xs), &y).unwrap())[0],
            1e-6,
        );
        let (_, g) = xent_rows::value_and_grad(&x, &y, &w).unwrap();
        check_fd(
            "cross_entropy none",
            &x0,
            &value(&g),
            |xs| value(&xent_rows(&tensor(xs), &y, &w).unwrap())[0],
            1e-6,
        );
        let c0 = rand_vec(18, seed + 3, -2.0, 2.0);
        let cw = tensor::<shape![3, 6]>(&rand_vec(18, seed + 4, -1.0, 1.0));
        let (_, g) = running::value_and_grad(&tensor::<shape![3, 6]>(&c0), &cw).unwrap();
        check_fd(
            "cumsum",
            &c0,
            &value(&g),
            |xs| value(&running(&tensor(xs), &cw).unwrap())[0],
            1e-6,
        );
    }
}

// `vjp`: functions with a tensor result, the backward seeded with
// `grad_output`, against the finite differences of
// `sum(f(..) * grad_output)`.

tensor_fn! {
    /// A linear layer, generic over its batch.
    #[grad(x, p)]
    fn linear<const B: usize>(x: &Tensor<Cpu, f64, [B, 4]>, p: &Lin<Cpu, f64>) -> Tensor<Cpu, f64, [B, 3]> {
        addmm(p.b, x, p.w)
    }

    /// A pre-norm residual MLP block, as in a transformer.
    #[grad(x, p)]
    fn block(x: &Tensor<Cpu, f64, [2, 3, 8]>, p: &Block<Cpu, f64>) -> Tensor<Cpu, f64, [2, 3, 8]> {
        let h = layer_norm(x, p.ln_w, p.ln_b, 1e-5);
        let h = gelu(matmul(h, p.fc) + p.fc_b);
        x + matmul(h, p.proj) + p.proj_b
    }

    /// A broadcast operand: one scale per column.
    #[grad(x, s)]
    fn scaled(x: &Tensor<Cpu, f64, [3, 4]>, s: &Tensor<Cpu, f64, [4]>) -> Tensor<Cpu, f64, [3, 4]> {
        tanh(x * s)
    }

    /// One layer of a chain.
    #[grad(x, p)]
    fn dense(x: &Tensor<Cpu, f64, [5, 4]>, p: &Dense<Cpu, f64>) -> Tensor<Cpu, f64, [5, 4]> {
        tanh(addmm(p.b, x, p.w))
    }

    /// Two layers and a loss in one function.
    #[grad(x, p1, p2)]
    fn two_layers(x: &Tensor<Cpu, f64, [5, 4]>, p1: &Dense<Cpu, f64>, p2: &Dense<Cpu, f64>) -> Tensor<Cpu, f64, []> {
        let y = dense(dense(x, p1), p2);
        (y * y).sum() * 0.5
    }

    /// A loss: `vjp` with a 0-d `grad_output` agrees with `value_and_grad`.
    #[grad(x)]
    fn loss(x: &Tensor<Cpu, f64, [3, 4]>) -> Tensor<Cpu, f64, []> {
        sin(x).sum()
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Checks each gradient `grads[i]` of `sum(f(inputs) * go)` against
/// central finite differences of `f` at `inputs[i]`.
fn check_vjp(
    what: &str,
    inputs: &[Vec<f64>],
    grads: &[Vec<f64>],
    go: &[f64],
    f: impl Fn(&[Vec<f64>]) -> Vec<f64>,
) {
    for (i, g) in grads.iter().enumerate() {
        check_fd(
            &format!("{what} (operand {i})"),
            &inputs[i],
            g,
            |xi| {
                let mut xs = inputs.to_vec();
                xs[i] = xi.to_vec();
                dot(&f(&xs), go)
            },
            1e-6,
        );
    }
}

tensor_fn! {
    #[grad(w)]
    fn emb(ids: &Tensor<Cpu, i64, [2, 5]>, w: &Tensor<Cpu, f64, [4, 3]>, u: &Tensor<Cpu, f64, [2, 5, 3]>) -> Tensor<Cpu, f64, []> {
        (sin(embedding(ids, w)) * u).sum()
    }

    #[grad(x)]
    fn picked(x: &Tensor<Cpu, f64, [3, 4]>, idx: &Tensor<Cpu, i64, [6]>, j: &Tensor<Cpu, i64, [6]>, u: &Tensor<Cpu, f64, [3, 6]>, v: &Tensor<Cpu, f64, [6, 4]>) -> Tensor<Cpu, f64, []> {
        (sin(x.index_select(-1, idx)) * u).sum() + (x.index_select(0, j) * v).sum()
    }

    #[grad(x)]
    fn gathered(x: &Tensor<Cpu, f64, [3, 4]>, idx: &Tensor<Cpu, i32, [3, 5]>, i0: &Tensor<Cpu, i32, [2, 4]>, u: &Tensor<Cpu, f64, [3, 5]>) -> Tensor<Cpu, f64, []> {
        (sin(gather(x, 1, idx)) * u).sum() + cos(x.gather(-2, i0)).sum()
    }

    #[grad(x, s)]
    fn added(x: &Tensor<Cpu, f64, [4, 3]>, idx: &Tensor<Cpu, i64, [5]>, s: &Tensor<Cpu, f64, [5, 3]>, u: &Tensor<Cpu, f64, [4, 3]>) -> Tensor<Cpu, f64, []> {
        (sin(x.index_add(0, idx, s, alpha = 0.5)) * u).sum() + cos(index_add(x, 0, idx, s * s)).sum()
    }

    #[grad(x, s)]
    fn scattered(x: &Tensor<Cpu, f64, [3, 4]>, idx: &Tensor<Cpu, i64, [2, 3]>, s: &Tensor<Cpu, f64, [3, 5]>, u: &Tensor<Cpu, f64, [3, 4]>) -> Tensor<Cpu, f64, []> {
        (sin(x.scatter_add(1, idx, s)) * u).sum()
    }
}

/// Integer indices in `0..n` (repeats likely), from a seed.
fn rand_ids(len: usize, seed: u64, n: usize) -> Vec<i64> {
    rand_vec(len, seed, 0.0, n as f64)
        .iter()
        .map(|v| (*v as i64).min(n as i64 - 1))
        .collect()
}

#[test]
fn index_ops_against_finite_differences() {
    for seed in 0..3u64 {
        // embedding: 10 ids into 4 rows, so rows repeat.
        let ids0 = rand_ids(10, seed + 1, 4);
        assert!((0..4).any(|r| ids0.iter().filter(|&&i| i == r).count() > 1));
        let ids = Tensor::<Cpu, i64, shape![2, 5]>::from_vec(ids0).unwrap();
        let w0 = rand_vec(12, seed + 2, -2.0, 2.0);
        let u = tensor::<shape![2, 5, 3]>(&rand_vec(30, seed + 3, -1.0, 1.0));
        let (_, g) = emb::value_and_grad(&ids, &tensor(&w0), &u).unwrap();
        check_fd(
            "embedding",
            &w0,
            &value(&g),
            |ws| value(&emb(&ids, &tensor(ws), &u).unwrap())[0],
            1e-6,
        );

        let x0 = rand_vec(12, seed + 4, -2.0, 2.0);
        let idx = Tensor::<Cpu, i64, shape![6]>::from_vec(rand_ids(6, seed + 5, 4)).unwrap();
        let j = Tensor::<Cpu, i64, shape![6]>::from_vec(rand_ids(6, seed + 18, 3)).unwrap();
        let u = tensor::<shape![3, 6]>(&rand_vec(18, seed + 6, -1.0, 1.0));
        let v = tensor::<shape![6, 4]>(&rand_vec(24, seed + 7, -1.0, 1.0));
        let (_, g) = picked::value_and_grad(&tensor(&x0), &idx, &j, &u, &v).unwrap();
        check_fd(
            "index_select",
            &x0,
            &value(&g),
            |xs| value(&picked(&tensor(xs), &idx, &j, &u, &v).unwrap())[0],
            1e-6,
        );

        let gi: Vec<i32> = rand_ids(15, seed + 8, 4)
            .iter()
            .map(|&k| k as i32)
            .collect();
        let idx = Tensor::<Cpu, i32, shape![3, 5]>::from_vec(gi).unwrap();
        let i0: Vec<i32> = rand_ids(8, seed + 9, 3).iter().map(|&k| k as i32).collect();
        let i0 = Tensor::<Cpu, i32, shape![2, 4]>::from_vec(i0).unwrap();
        let u = tensor::<shape![3, 5]>(&rand_vec(15, seed + 10, -1.0, 1.0));
        let (_, g) = gathered::value_and_grad(&tensor(&x0), &idx, &i0, &u).unwrap();
        check_fd(
            "gather",
            &x0,
            &value(&g),
            |xs| value(&gathered(&tensor(xs), &idx, &i0, &u).unwrap())[0],
            1e-6,
        );

        let a0 = rand_vec(12, seed + 11, -2.0, 2.0);
        let s0 = rand_vec(15, seed + 12, -2.0, 2.0);
        let idx = Tensor::<Cpu, i64, shape![5]>::from_vec(rand_ids(5, seed + 13, 4)).unwrap();
        let u = tensor::<shape![4, 3]>(&rand_vec(12, seed + 14, -1.0, 1.0));
        let (_, g) = added::value_and_grad(&tensor(&a0), &idx, &tensor(&s0), &u).unwrap();
        let (gx, gs) = {
            let f = g.flat();
            (f[0].clone(), f[1].clone())
        };
        check_fd(
            "index_add (x)",
            &a0,
            &gx,
            |xs| value(&added(&tensor(xs), &idx, &tensor(&s0), &u).unwrap())[0],
            1e-6,
        );
        check_fd(
            "index_add (source)",
            &s0,
            &gs,
            |ss| value(&added(&tensor(&a0), &idx, &tensor(ss), &u).unwrap())[0],
            1e-6,
        );

        let s0 = rand_vec(15, seed + 15, -2.0, 2.0);
        let idx = Tensor::<Cpu, i64, shape![2, 3]>::from_vec(rand_ids(6, seed + 16, 4)).unwrap();
        let u = tensor::<shape![3, 4]>(&rand_vec(12, seed + 17, -1.0, 1.0));
        let (_, g) = scattered::value_and_grad(&tensor(&x0), &idx, &tensor(&s0), &u).unwrap();
        let (gx, gs) = {
            let f = g.flat();
            (f[0].clone(), f[1].clone())
        };
        check_fd(
            "scatter_add (x)",
            &x0,
            &gx,
            |xs| value(&scattered(&tensor(xs), &idx, &tensor(&s0), &u).unwrap())[0],
            1e-6,
        );
        check_fd(
            "scatter_add (src)",
            &s0,
            &gs,
            |ss| value(&scattered(&tensor(&x0), &idx, &tensor(ss), &u).unwrap())[0],
            1e-6,
        );
    }
}

#[test]
fn vjp_linear_layer() {
    for seed in 0..3u64 {
        let inputs = vec![
            rand_vec(20, seed, -2.0, 2.0),
            rand_vec(12, seed + 10, -1.0, 1.0),
            rand_vec(3, seed + 20, -1.0, 1.0),
        ];
        let go = rand_vec(15, seed + 30, -1.0, 1.0);
        let f = |v: &[Vec<f64>]| {
            let p = Lin {
                w: tensor(&v[1]),
                b: tensor(&v[2]),
            };
            value(&linear(&tensor::<shape![5, 4]>(&v[0]), &p).unwrap())
        };
        let p = Lin {
            w: tensor(&inputs[1]),
            b: tensor(&inputs[2]),
        };
        let x = tensor::<shape![5, 4]>(&inputs[0]);
        let (y, (gx, gp)) = linear::vjp(&x, &p, &tensor(&go)).unwrap();
        assert_eq!(value(&y), f(&inputs), "value");
        let grads = [value(&gx), value(&gp.w), value(&gp.b)];
        check_vjp("linear", &inputs, &grads, &go, f);
    }
}

#[test]
fn vjp_layer_norm_mlp_block() {
    let sizes = [48, 8, 8, 128, 16, 128, 8];
    for seed in 0..3u64 {
        let inputs: Vec<Vec<f64>> = sizes
            .iter()
            .enumerate()
            .map(|(k, &n)| rand_vec(n, seed * 13 + k as u64, -1.0, 1.0))
            .collect();
        let go = rand_vec(48, seed + 40, -1.0, 1.0);
        let params = |v: &[Vec<f64>]| Block {
            ln_w: tensor(&v[1]),
            ln_b: tensor(&v[2]),
            fc: tensor(&v[3]),
            fc_b: tensor(&v[4]),
            proj: tensor(&v[5]),
            proj_b: tensor(&v[6]),
        };
        let f = |v: &[Vec<f64>]| value(&block(&tensor(&v[0]), &params(v)).unwrap());
        let x = tensor::<shape![2, 3, 8]>(&inputs[0]);
        let (y, (gx, gp)) = block::vjp(&x, &params(&inputs), &tensor(&go)).unwrap();
        assert_eq!(value(&y), f(&inputs), "value");
        let grads = [
            value(&gx),
            value(&gp.ln_w),
            value(&gp.ln_b),
            value(&gp.fc),
            value(&gp.fc_b),
            value(&gp.proj),
            value(&gp.proj_b),
        ];
        check_vjp("block", &inputs, &grads, &go, f);
    }
}

#[test]
fn vjp_broadcast_operand() {
    for seed in 0..3u64 {
        let inputs = vec![
            rand_vec(12, seed, -2.0, 2.0),
            rand_vec(4, seed + 10, -1.5, 1.5),
        ];
        let go = rand_vec(12, seed + 20, -1.0, 1.0);
        let f = |v: &[Vec<f64>]| value(&scaled(&tensor(&v[0]), &tensor(&v[1])).unwrap());
        let (y, (gx, gs)) =
            scaled::vjp(&tensor(&inputs[0]), &tensor(&inputs[1]), &tensor(&go)).unwrap();
        assert_eq!(value(&y), f(&inputs), "value");
        assert_eq!(gs.dims(), &[4], "summed back to the operand's dims");
        check_vjp("scaled", &inputs, &[value(&gx), value(&gs)], &go, f);
    }
}

// `vjp` of a tuple result: `grad_output` is a tuple, one gradient per
// element, `()` in the place of an index tensor; checked against the
// finite differences of the sum of each element times its gradient.

tensor_fn! {
    /// Two results of the same inputs: each element's gradient adds into
    /// `x`'s.
    #[grad(x, s)]
    fn two_heads(x: &Tensor<Cpu, f64, [3, 4]>, s: &Tensor<Cpu, f64, [4]>) -> (Tensor<Cpu, f64, [3, 4]>, Tensor<Cpu, f64, [3]>) {
        (tanh(x * s), (x * x).sum(1))
    }

    /// `topk`'s values and indices: the indices take no gradient.
    #[grad(x)]
    fn top_two(x: &Tensor<Cpu, f64, [3, 5]>) -> (Tensor<Cpu, f64, [3, 2]>, Tensor<Cpu, i64, [3, 2]>) {
        let (v, i) = sin(x).topk(2);
        (v * v, i)
    }
}

#[test]
fn vjp_of_a_tuple_result() {
    for seed in 0..3u64 {
        let inputs = vec![
            rand_vec(12, seed, -2.0, 2.0),
            rand_vec(4, seed + 10, -1.5, 1.5),
        ];
        let (go0, go1) = (
            rand_vec(12, seed + 20, -1.0, 1.0),
            rand_vec(3, seed + 30, -1.0, 1.0),
        );
        let f = |v: &[Vec<f64>]| {
            let (a, b) = two_heads(&tensor(&v[0]), &tensor(&v[1])).unwrap();
            [value(&a), value(&b)].concat()
        };
        let (x, s) = (tensor(&inputs[0]), tensor(&inputs[1]));
        let (y, (gx, gs)) = two_heads::vjp(&x, &s, (&tensor(&go0), &tensor(&go1))).unwrap();
        assert_eq!([value(&y.0), value(&y.1)].concat(), f(&inputs), "value");
        let go = [go0.clone(), go1.clone()].concat();
        check_vjp("two_heads", &inputs, &[value(&gx), value(&gs)], &go, f);
        // Each element alone: the gradients add up.
        let z0: Tensor<Cpu, f64, shape![3, 4]> = tensor(&[0.0; 12]);
        let z1: Tensor<Cpu, f64, shape![3]> = tensor(&[0.0; 3]);
        let (_, (gx0, _)) = two_heads::vjp(&x, &s, (&tensor(&go0), &z1)).unwrap();
        let (_, (gx1, _)) = two_heads::vjp(&x, &s, (&z0, &tensor(&go1))).unwrap();
        for ((a, b), g) in value(&gx0).iter().zip(value(&gx1)).zip(value(&gx)) {
            assert!((a + b - g).abs() <= 1e-12, "{a} + {b} != {g}");
        }
    }
}

#[test]
fn vjp_of_a_tuple_with_indices() {
    for seed in 0..3u64 {
        let inputs = vec![rand_vec(15, seed, -2.0, 2.0)];
        let go = rand_vec(6, seed + 20, -1.0, 1.0);
        let f = |v: &[Vec<f64>]| value(&top_two(&tensor(&v[0])).unwrap().0);
        let x = tensor::<shape![3, 5]>(&inputs[0]);
        let ((v, i), gx) = top_two::vjp(&x, (&tensor(&go), ())).unwrap();
        let (want_v, want_i) = top_two(&x).unwrap();
        assert_eq!(value(&v), value(&want_v), "values");
        assert_eq!(i.to_vec().unwrap(), want_i.to_vec().unwrap(), "indices");
        check_vjp("top_two", &inputs, &[value(&gx)], &go, f);
    }
}

#[test]
fn vjp_of_a_loss_agrees_with_value_and_grad() {
    let x = tensor::<shape![3, 4]>(&rand_vec(12, 5, -2.0, 2.0));
    let (v, g) = loss::value_and_grad(&x).unwrap();
    let one = tensor::<shape![]>(&[1.0]);
    let (v1, g1) = loss::vjp(&x, &one).unwrap();
    assert_eq!(value(&v), value(&v1));
    assert_eq!(value(&g), value(&g1));
    // A seed of 2 doubles the gradient.
    let (_, g2) = loss::vjp(&x, &tensor::<shape![]>(&[2.0])).unwrap();
    let twice: Vec<f64> = value(&g).iter().map(|g| 2.0 * g).collect();
    assert_eq!(value(&g2), twice);
}

/// Layer by layer, as a model whose layers are a `Vec` trains: the
/// forward keeps each layer's input, the backward goes through the layers
/// in reverse, each `vjp` giving the gradient of its input to the layer
/// below.
#[test]
fn vjp_chain_equals_the_composed_gradient() {
    for seed in 0..3u64 {
        let dense_p = |k: u64| Dense {
            w: tensor(&rand_vec(16, seed * 5 + k, -1.0, 1.0)),
            b: tensor(&rand_vec(4, seed * 5 + k + 100, -0.5, 0.5)),
        };
        let layers = [dense_p(1), dense_p(2)];
        let x = tensor::<shape![5, 4]>(&rand_vec(20, seed + 70, -2.0, 2.0));
        let (want_loss, (want_gx, want_g1, want_g2)) =
            two_layers::value_and_grad(&x, &layers[0], &layers[1]).unwrap();

        // Forward, keeping each layer's input.
        let mut inputs = vec![x.clone()];
        for p in &layers {
            let y = dense(inputs.last().unwrap(), p).unwrap();
            inputs.push(y);
        }
        let y = inputs.pop().unwrap();
        // d(0.5 sum(y^2))/dy = y.
        let loss = value(&y).iter().map(|v| 0.5 * v * v).sum::<f64>();
        let mut g = y;
        let mut grads = Vec::new();
        for (p, input) in layers.iter().zip(&inputs).rev() {
            let (_, (gx, gp)) = dense::vjp(input, p, &g).unwrap();
            grads.push(gp);
            g = gx;
        }
        grads.reverse();
        let close = |what: &str, a: &[f64], b: &[f64]| {
            for (x, y) in a.iter().zip(b) {
                assert!(
                    (x - y).abs() <= 1e-12 * y.abs().max(1.0),
                    "{what}: {a:?} vs {b:?}"
                );
            }
        };
        close("loss", &[loss], &value(&want_loss));
        close("x", &value(&g), &value(&want_gx));
        close("layer 0 w", &value(&grads[0].w), &value(&want_g1.w));
        close("layer 0 b", &value(&grads[0].b), &value(&want_g1.b));
        close("layer 1 w", &value(&grads[1].w), &value(&want_g2.w));
        close("layer 1 b", &value(&grads[1].b), &value(&want_g2.b));
    }
}
// Attention: one fused backward from the log-sum-exps the forward saves.
fd_case!(attention_causal_rule: fn n_attn_causal(q: [2, 3, 4] in (-1.5, 1.5), k: [2, 5, 4] in (-1.5, 1.5), v: [2, 5, 6] in (-1.5, 1.5)) {
    sin(scaled_dot_product_attention(q, k, v, is_causal = true)).sum()
});
fd_case!(attention_scaled_rule: fn n_attn_scaled(q: [1, 2, 4, 8] in (-1.5, 1.5), k: [1, 2, 3, 8] in (-1.5, 1.5), v: [1, 2, 3, 2] in (-1.5, 1.5)) {
    (scaled_dot_product_attention(q, k, v, scale = 0.7) * q.narrow(3, 0, 2)).sum()
});

// Pooling: max sends each gradient to its window's largest element (random
// inputs have no ties), the averages spread it over the window.
fd_case!(max_pool2d_grad: fn g_max_pool(x: [2, 2, 5, 6] in (-2.0, 2.0)) {
    sin(max_pool2d(x, 3, stride = 2, padding = 1, ceil_mode = true)).sum()
        + (max_pool2d(x, [2, 3], dilation = 2, stride = 1) * 0.5).exp().sum()
});
fd_case!(avg_pool2d_grad: fn g_avg_pool(x: [2, 5, 6] in (-2.0, 2.0)) {
    sin(avg_pool2d(x, 3, stride = 2, padding = 1)).sum()
        + sin(avg_pool2d(x, 2, ceil_mode = true, count_include_pad = false)).sum()
        + avg_pool2d(x, 2, divisor_override = 3).exp().sum()
});
fd_case!(adaptive_avg_pool2d_grad: fn g_adaptive_pool(x: [1, 2, 5, 7] in (-2.0, 2.0)) {
    sin(adaptive_avg_pool2d(x, [3, 4])).sum() + adaptive_avg_pool2d(x, 1).exp().sum()
});
fd_case!(flatten_grad: fn g_flatten(x: [2, 3, 4] in (-2.0, 2.0), w: [12, 5] in (-1.0, 1.0)) {
    sin(matmul(flatten(x, 1), w)).sum() + sin(x.permute([2, 0, 1]).flatten(1)).sum()
});

// `dropout`'s gradient is the same mask, drawn again from the seed.
fd_case!(dropout_grad: fn g_dropout(x: [7, 9] in (-2.0, 2.0)) {
    sin(dropout(x, p = 0.3, seed = 11)).sum() + x.dropout(0.6, seed = 12).exp().sum()
});

// Convolutions: the input's, weight's and bias's gradients, with stride,
// padding, dilation and groups.
fd_case!(conv2d_rule: fn c_conv2d(x: [2, 4, 5, 6] in (-2.0, 2.0), w: [6, 2, 3, 2] in (-1.0, 1.0), b: [6] in (-1.0, 1.0)) {
    sin(conv2d(x, w, b, stride = (2, 1), padding = (1, 2), dilation = (1, 2), groups = 2)).sum()
});
fd_case!(conv2d_depthwise_rule: fn c_conv2d_dw(x: [1, 3, 4, 4] in (-2.0, 2.0), w: [3, 1, 3, 3] in (-1.0, 1.0)) {
    sin(conv2d(x, w, padding = "same", groups = 3)).sum()
});
fd_case!(conv1d_rule: fn c_conv1d(x: [2, 2, 7] in (-2.0, 2.0), w: [3, 2, 3] in (-1.0, 1.0), b: [3] in (-1.0, 1.0)) {
    sin(conv1d(x, w, b, stride = 2, padding = 1, dilation = 2)).sum()
});

// The norms over a last dim known only at run time: the rule divides by
// the size counted at run time.
tensor_fn! {
    #[grad(x, w, b)]
    fn ln_runtime(x: &Tensor<Cpu, f64, [R, N]>, w: &Tensor<Cpu, f64, [N]>, b: &Tensor<Cpu, f64, [N]>) -> Tensor<Cpu, f64, [R, N]> {
        layer_norm(x, w, b, 1e-5)
    }

    #[grad(x, w)]
    fn rms_runtime(x: &Tensor<Cpu, f64, [R, N]>, w: &Tensor<Cpu, f64, [N]>) -> Tensor<Cpu, f64, [R, N]> {
        rms_norm(x, w, 1e-6)
    }
}

#[test]
fn vjp_norms_over_a_run_time_dim() {
    type M = shape![_, _];
    type V = shape![_];
    let m = |v: &[f64], n: usize| {
        Tensor::<Cpu, f64, M>::from_vec_dims(v.to_vec(), &[v.len() / n, n]).unwrap()
    };
    let vec = |v: &[f64]| Tensor::<Cpu, f64, V>::from_vec_dims(v.to_vec(), &[v.len()]).unwrap();
    for (seed, n) in [(0u64, 5usize), (1, 7), (2, 1)] {
        let inputs = vec![
            rand_vec(3 * n, seed, -2.0, 2.0),
            rand_vec(n, seed + 10, -1.5, 1.5),
            rand_vec(n, seed + 20, -1.0, 1.0),
        ];
        let go = rand_vec(3 * n, seed + 30, -1.0, 1.0);
        let f =
            |v: &[Vec<f64>]| value(&ln_runtime(&m(&v[0], n), &vec(&v[1]), &vec(&v[2])).unwrap());
        let (y, (gx, gw, gb)) = ln_runtime::vjp(
            &m(&inputs[0], n),
            &vec(&inputs[1]),
            &vec(&inputs[2]),
            &m(&go, n),
        )
        .unwrap();
        assert_eq!(value(&y), f(&inputs), "layer_norm value");
        check_vjp(
            "layer_norm, run-time N",
            &inputs,
            &[value(&gx), value(&gw), value(&gb)],
            &go,
            f,
        );

        let inputs = &inputs[..2];
        let f = |v: &[Vec<f64>]| value(&rms_runtime(&m(&v[0], n), &vec(&v[1])).unwrap());
        let (y, (gx, gw)) =
            rms_runtime::vjp(&m(&inputs[0], n), &vec(&inputs[1]), &m(&go, n)).unwrap();
        assert_eq!(value(&y), f(inputs), "rms_norm value");
        check_vjp(
            "rms_norm, run-time N",
            inputs,
            &[value(&gx), value(&gw)],
            &go,
            f,
        );
    }
}

tensor_fn! {
    /// `narrow` at a run-time start (its gradient an `index_add` at the
    /// slice's positions).
    #[grad(x)]
    fn rt_narrow(x: &Tensor<Cpu, f64, [4, 6]>, s: usize, w: &Tensor<Cpu, f64, [4, 3]>) -> Tensor<Cpu, f64, []> {
        (sin(x.narrow(1, s, 3)) * w).sum()
    }

    /// A run-time start and length (the length a `usize` parameter, so
    /// a dim of the slice).
    #[grad(x)]
    fn rt_narrow_len(x: &Tensor<Cpu, f64, [5, 4]>, s: usize, l: usize) -> Tensor<Cpu, f64, []> {
        sin(x.narrow(0, s, l)).sum() + cos(x.narrow(0, 1, l)).sum()
    }

    /// Run-time indices, one and two deep.
    #[grad(x)]
    fn rt_index(x: &Tensor<Cpu, f64, [4, 3]>, i: usize, j: usize, w: &Tensor<Cpu, f64, [3]>) -> Tensor<Cpu, f64, []> {
        (sin(x[i]) * w).sum() + cos(x[j, 2]) * 3.0
    }

    /// Literal slices and indices of a dim known only at run time.
    #[grad(x)]
    fn rt_dim_slices(x: &Tensor<Cpu, f64, [N, 3]>) -> Tensor<Cpu, f64, []> {
        sin(x.narrow(0, 1, 2)).sum() + cos(x[0]).sum() + x.narrow(1, 2, 1).sum()
    }

    /// `cat` of operands whose lengths along the joined dim are run-time
    /// dims (the third operand's offset is `N + M`).
    #[grad(x, y)]
    fn rt_cat(x: &Tensor<Cpu, f64, [N, 3]>, y: &Tensor<Cpu, f64, [M, 3]>, w: &Tensor<Cpu, f64, [3]>) -> Tensor<Cpu, f64, []> {
        (sin(cat([x, y, x * 2.0], 0)) * w).sum() + (cos(cat([x, y], 0)) * w).sum()
    }
}

#[test]
fn run_time_slices_indices_and_joins() {
    for seed in 0..3u64 {
        let x0 = rand_vec(24, seed + 40, -2.0, 2.0);
        let w = tensor::<shape![4, 3]>(&rand_vec(12, seed + 41, -1.0, 1.0));
        // Every start the slice fits at, the ends included.
        for s in 0..=3 {
            let (_, g) = rt_narrow::value_and_grad(&tensor(&x0), s, &w).unwrap();
            check_fd(
                &format!("narrow at run-time start {s}"),
                &x0,
                &value(&g),
                |xs| value(&rt_narrow(&tensor(xs), s, &w).unwrap())[0],
                1e-6,
            );
        }
        // A start past the end is the forward's `Err`, not a panic.
        assert!(rt_narrow::value_and_grad(&tensor(&x0), 4, &w).is_err());

        let x1 = rand_vec(20, seed + 42, -2.0, 2.0);
        for (s, l) in [(0, 0), (0, 4), (2, 3), (4, 1), (1, 2)] {
            let (_, g) = rt_narrow_len::value_and_grad(&tensor(&x1), s, l).unwrap();
            check_fd(
                &format!("narrow at run-time start {s}, length {l}"),
                &x1,
                &value(&g),
                |xs| value(&rt_narrow_len(&tensor(xs), s, l).unwrap())[0],
                1e-6,
            );
        }

        let x2 = rand_vec(12, seed + 43, -2.0, 2.0);
        let w3 = tensor::<shape![3]>(&rand_vec(3, seed + 44, -1.0, 1.0));
        for (i, j) in [(0, 0), (3, 1), (2, 2), (1, 3)] {
            let (_, g) = rt_index::value_and_grad(&tensor(&x2), i, j, &w3).unwrap();
            check_fd(
                &format!("run-time index [{i}], [{j}, 2]"),
                &x2,
                &value(&g),
                |xs| value(&rt_index(&tensor(xs), i, j, &w3).unwrap())[0],
                1e-6,
            );
        }
        assert!(rt_index::value_and_grad(&tensor(&x2), 4, 0, &w3).is_err());

        let dyn_x = |v: &[f64], n: usize| {
            Tensor::<Cpu, f64, shape![_, 3]>::from_vec_dims(v.to_vec(), &[n, 3]).unwrap()
        };
        for n in [3usize, 5] {
            let xv = rand_vec(n * 3, seed + 45, -2.0, 2.0);
            let (_, g) = rt_dim_slices::value_and_grad(&dyn_x(&xv, n)).unwrap();
            check_fd(
                &format!("literal slices of a run-time dim {n}"),
                &xv,
                &value(&g),
                |xs| value(&rt_dim_slices(&dyn_x(xs, n)).unwrap())[0],
                1e-6,
            );
        }

        // Joined lengths 0, 1 and 4 (an empty operand included).
        for (n, m) in [(2usize, 0usize), (1, 4), (0, 3)] {
            let (xv, yv) = (
                rand_vec(n * 3, seed + 46, -2.0, 2.0),
                rand_vec(m * 3, seed + 47, -2.0, 2.0),
            );
            let (_, (gx, gy)) =
                rt_cat::value_and_grad(&dyn_x(&xv, n), &dyn_x(&yv, m), &w3).unwrap();
            check_fd(
                &format!("cat of run-time lengths {n} and {m}: x"),
                &xv,
                &value(&gx),
                |xs| value(&rt_cat(&dyn_x(xs, n), &dyn_x(&yv, m), &w3).unwrap())[0],
                1e-6,
            );
            check_fd(
                &format!("cat of run-time lengths {n} and {m}: y"),
                &yv,
                &value(&gy),
                |ys| value(&rt_cat(&dyn_x(&xv, n), &dyn_x(ys, m), &w3).unwrap())[0],
                1e-6,
            );
        }
    }
}

tensor_fn! {
    /// PyTorch's K-dimensional `cross_entropy`: classes in dim 1.
    #[grad(x)]
    fn xent_kdim_mean(x: &Tensor<Cpu, f64, [N, C, H, W]>, y: &Tensor<Cpu, i64, [N, H, W]>) -> Tensor<Cpu, f64, []> {
        cross_entropy(x, y, ignore_index = 1)
    }

    #[grad(x)]
    fn xent_kdim_sum(x: &Tensor<Cpu, f64, [N, C, H, W]>, y: &Tensor<Cpu, i64, [N, H, W]>) -> Tensor<Cpu, f64, []> {
        cross_entropy(x, y, reduction = "sum", label_smoothing = 0.3, ignore_index = 1)
    }

    #[grad(x)]
    fn xent_kdim_none(x: &Tensor<Cpu, f64, [N, C, H, W]>, y: &Tensor<Cpu, i64, [N, H, W]>, w: &Tensor<Cpu, f64, [N, H, W]>) -> Tensor<Cpu, f64, []> {
        (cross_entropy(x, y, reduction = "none", ignore_index = 1) * w).sum()
    }

    fn xent_kdim_rows(x: &Tensor<Cpu, f64, [N, C, H, W]>, y: &Tensor<Cpu, i64, [N, H, W]>) -> Tensor<Cpu, f64, [N, H, W]> {
        cross_entropy(x, y, reduction = "none", label_smoothing = 0.1, ignore_index = 1)
    }

    fn xent_kdim_gpu(x: &Tensor<Cuda, f32, [N, C, L]>, y: &Tensor<Cuda, i64, [N, L]>) -> Tensor<Cuda, f32, [N, L]> {
        cross_entropy(x, y, reduction = "none", label_smoothing = 0.2, ignore_index = 0)
    }

    #[grad(x)]
    fn xent_kdim_gpu_mean(x: &Tensor<Cuda, f32, [N, C, L]>, y: &Tensor<Cuda, i64, [N, L]>) -> Tensor<Cuda, f32, []> {
        cross_entropy(x, y, ignore_index = 0)
    }

    #[grad(x)]
    fn xent_kdim_cpu_mean(x: &Tensor<Cpu, f32, [N, C, L]>, y: &Tensor<Cpu, i64, [N, L]>) -> Tensor<Cpu, f32, []> {
        cross_entropy(x, y, ignore_index = 0)
    }
}

/// `[N, C, d..]` logits (row-major) moved to rows of classes,
/// `[N * d.., C]`, as the f64 reference takes them.
fn classes_last(x: &[f64], n: usize, c: usize, d: usize) -> Vec<f64> {
    let mut out = vec![0.0; x.len()];
    for i in 0..n {
        for k in 0..c {
            for j in 0..d {
                out[(i * d + j) * c + k] = x[(i * c + k) * d + j];
            }
        }
    }
    out
}

/// The same numbers whether they are NaN or not.
fn same(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol * w.abs().max(1.0);
        assert!(ok, "{what}: [{i}] is {g}, the f64 reference gives {w}");
    }
}

#[test]
fn cross_entropy_over_extra_dims() {
    use tensorfn_core::ops::xent::{cross_entropy_f64, Reduction};
    type X = Tensor<Cpu, f64, shape![_, _, _, _]>;
    type Y = Tensor<Cpu, i64, shape![_, _, _]>;
    // Shapes [N, C, H, W]: empty batch, empty spatial dim, one class.
    for (seed, [n, c, h, w]) in [
        [2, 4, 3, 2],
        [1, 3, 1, 5],
        [0, 3, 2, 2],
        [2, 3, 0, 2],
        [3, 1, 2, 1],
    ]
    .into_iter()
    .enumerate()
    {
        let seed = seed as u64;
        let d = h * w;
        let mut x0 = rand_vec(n * c * d, seed + 60, -3.0, 3.0);
        if x0.len() > 4 {
            x0[3] = f64::NEG_INFINITY;
        }
        let ids = rand_ids(n * d, seed + 61, c);
        for all_ignored in [false, true] {
            let ids: Vec<i64> = if all_ignored {
                vec![1; n * d]
            } else {
                ids.clone()
            };
            let x = X::from_vec_dims(x0.clone(), &[n, c, h, w]).unwrap();
            let y = Y::from_vec_dims(ids.clone(), &[n, h, w]).unwrap();
            let rows = classes_last(&x0, n, c, d);
            let reference = |r: Reduction, s: f64| {
                // Classes outside 0..C besides the ignored 1 are not drawn.
                cross_entropy_f64(&rows, c, &ids, r, 1, s).unwrap()
            };
            let what = format!("[{n}, {c}, {h}, {w}], all ignored: {all_ignored}");
            same(
                &format!("mean {what}"),
                &value(&xent_kdim_mean(&x, &y).unwrap()),
                &reference(Reduction::Mean, 0.0),
                1e-12,
            );
            same(
                &format!("sum {what}"),
                &value(&xent_kdim_sum(&x, &y).unwrap()),
                &reference(Reduction::Sum, 0.3),
                1e-12,
            );
            let per: Tensor<Cpu, f64, shape![_, _, _]> = xent_kdim_rows(&x, &y).unwrap();
            assert_eq!(per.dims(), &[n, h, w]);
            same(
                &format!("none {what}"),
                &value(&per),
                &reference(Reduction::None, 0.1),
                1e-12,
            );
            if all_ignored && n * d > 0 {
                assert!(value(&xent_kdim_mean(&x, &y).unwrap())[0].is_nan());
            }
        }
    }
    // Gradients by finite differences (finite logits; some targets
    // ignored; a mean, a smoothed sum and per-position weights).
    for seed in 0..3u64 {
        let (n, c, h, w) = (2, 3, 2, 2);
        let x0 = rand_vec(n * c * h * w, seed + 70, -3.0, 3.0);
        let y = Y::from_vec_dims(rand_ids(n * h * w, seed + 71, c), &[n, h, w]).unwrap();
        let wv = Tensor::<Cpu, f64, shape![_, _, _]>::from_vec_dims(
            rand_vec(n * h * w, seed + 72, -1.0, 1.0),
            &[n, h, w],
        )
        .unwrap();
        let xt = |v: &[f64]| X::from_vec_dims(v.to_vec(), &[n, c, h, w]).unwrap();
        let (_, g) = xent_kdim_mean::value_and_grad(&xt(&x0), &y).unwrap();
        check_fd(
            "K-dim cross_entropy mean",
            &x0,
            &value(&g),
            |xs| value(&xent_kdim_mean(&xt(xs), &y).unwrap())[0],
            1e-6,
        );
        let (_, g) = xent_kdim_sum::value_and_grad(&xt(&x0), &y).unwrap();
        check_fd(
            "K-dim cross_entropy smoothed sum",
            &x0,
            &value(&g),
            |xs| value(&xent_kdim_sum(&xt(xs), &y).unwrap())[0],
            1e-6,
        );
        let (_, g) = xent_kdim_none::value_and_grad(&xt(&x0), &y, &wv).unwrap();
        check_fd(
            "K-dim cross_entropy none",
            &x0,
            &value(&g),
            |xs| value(&xent_kdim_none(&xt(xs), &y, &wv).unwrap())[0],
            1e-6,
        );
    }
    // A target outside the classes is the forward's `Err`.
    let x = X::from_vec_dims(vec![0.0; 8], &[1, 2, 2, 2]).unwrap();
    let y = Y::from_vec_dims(vec![0, 5, 0, 0], &[1, 2, 2]).unwrap();
    assert!(xent_kdim_mean(&x, &y).is_err());
}

#[test]
fn cross_entropy_over_extra_dims_gpu_matches_the_cpu() {
    let probe = Tensor::<Cpu, f32, shape![1]>::ones().unwrap();
    if let Err(e) = probe.to_device::<Cuda>() {
        eprintln!("skipping: no CUDA device ({e})");
        return;
    }
    use tensorfn_core::ops::xent::{cross_entropy_f64, Reduction};
    for (seed, (n, c, l)) in [(3, 5, 7), (2, 33, 130), (0, 4, 3), (2, 4, 0)]
        .into_iter()
        .enumerate()
    {
        let x0: Vec<f32> = rand_vec(n * c * l, seed as u64 + 80, -4.0, 4.0)
            .into_iter()
            .map(|v| v as f32)
            .collect();
        let ids = rand_ids(n * l, seed as u64 + 81, c);
        let x = Tensor::<Cpu, f32, shape![_, _, _]>::from_vec_dims(x0.clone(), &[n, c, l])
            .unwrap()
            .to_device::<Cuda>()
            .unwrap();
        let y = Tensor::<Cpu, i64, shape![_, _]>::from_vec_dims(ids.clone(), &[n, l])
            .unwrap()
            .to_device::<Cuda>()
            .unwrap();
        let rows = classes_last(&x0.iter().map(|&v| v as f64).collect::<Vec<_>>(), n, c, l);
        let want = cross_entropy_f64(&rows, c, &ids, Reduction::None, 0, 0.2).unwrap();
        let got = value(&xent_kdim_gpu(&x, &y).unwrap().to_cpu().unwrap());
        same(&format!("GPU [{n}, {c}, {l}] none"), &got, &want, 1e-5);
        let (v, g) = xent_kdim_gpu_mean::value_and_grad(&x, &y).unwrap();
        let want = cross_entropy_f64(&rows, c, &ids, Reduction::Mean, 0, 0.0).unwrap();
        same(
            &format!("GPU [{n}, {c}, {l}] mean"),
            &value(&v.to_cpu().unwrap()),
            &want,
            1e-5,
        );
        let (_, gc) = xent_kdim_cpu_mean::value_and_grad(
            &x.to_device::<Cpu>().unwrap(),
            &y.to_device::<Cpu>().unwrap(),
        )
        .unwrap();
        same(
            &format!("GPU [{n}, {c}, {l}] gradient"),
            &value(&g.to_cpu().unwrap()),
            &value(&gc),
            1e-5,
        );
    }
}

// Row `#[kernel]`s: differentiated through their row programs (the
// statistics written again as reductions over the last dim).
fd_case!(row_kernel_layer_norm:
    #[kernel]
    fn row_ln(x: Row<f64>, w: Row<f64>, b: Row<f64>, eps: f64) -> Row<f64> {
        let mu = mean(x);
        let var = mean((x - mu) * (x - mu));
        (x - mu) * rsqrt(var + eps) * w + b
    }
    fn k_ln(x: [3, 5] in (-2.0, 2.0), w: [5] in (-1.5, 1.5), b: [5] in (-1.0, 1.0)) {
        sin(row_ln(x, w, b, 1e-5)).sum()
    }
);
fd_case!(row_kernel_rms_norm:
    #[kernel]
    fn row_rms(x: Row<f64>, w: Row<f64>, eps: f64) -> Row<f64> {
        x * rsqrt(mean(x * x) + eps) * w
    }
    fn k_rms(x: [2, 3, 4] in (-2.0, 2.0), w: [4] in (-1.5, 1.5)) { sin(row_rms(x, w, 1e-6)).sum() }
);
fd_case!(row_kernel_softmax:
    #[kernel]
    fn row_softmax(x: Row<f64>) -> Row<f64> {
        let m = max(x);
        exp(x - m) / sum(exp(x - m))
    }
    fn k_softmax(x: [3, 4] in (-2.0, 2.0), w: [3, 4] in (-1.0, 1.0)) { (row_softmax(x) * w).sum() }
);
fd_case!(row_kernel_per_row_results:
    #[kernel]
    fn row_lse(x: Row<f64>, t: f64) -> f64 {
        let m = max(x * t);
        m + log(sum(exp(x * t - m))) + min(x) * 0.5
    }
    fn k_lse(x: [4, 5] in (-2.0, 2.0), w: [4] in (-1.0, 1.0)) { (row_lse(x, 1.5) * w).sum() }
);
fd_case!(row_kernel_with_a_branch:
    #[kernel]
    fn row_clip(x: Row<f64>, y: Row<f64>) -> Row<f64> {
        let s = sum(x * y);
        if x > 0.0 { x * s } else { y / (1.0 + s * s) }
    }
    fn k_clip(x: [3, 4] in (-2.0, 2.0), y: [4] in (-1.0, 1.0)) { sin(row_clip(x, y)).sum() }
);

tensor_fn! {
    #[kernel]
    fn user_layer_norm(x: Row<f64>, w: Row<f64>, b: Row<f64>, eps: f64) -> Row<f64> {
        let mu = mean(x);
        let var = mean((x - mu) * (x - mu));
        (x - mu) * rsqrt(var + eps) * w + b
    }

    #[kernel]
    fn user_rms_norm(x: Row<f64>, w: Row<f64>, eps: f64) -> Row<f64> {
        x * rsqrt(mean(x * x) + eps) * w
    }

    #[kernel]
    fn user_softmax(x: Row<f64>) -> Row<f64> {
        let e = exp(x - max(x));
        e / sum(e)
    }

    #[kernel]
    fn row_max(x: Row<f64>) -> f64 {
        max(x)
    }

    #[grad(x, w, b)]
    fn ln_by_row_kernel(
        x: &Tensor<Cpu, f64, [4, 6]>, w: &Tensor<Cpu, f64, [6]>, b: &Tensor<Cpu, f64, [6]>, r: &Tensor<Cpu, f64, [4, 6]>,
    ) -> Tensor<Cpu, f64, []> {
        (user_layer_norm(x, w, b, 1e-5) * r).sum() + (user_rms_norm(x, w, 1e-6) * r * r).sum()
            + (user_softmax(x) * r).sum()
    }

    #[grad(x, w, b)]
    fn ln_by_catalogue(
        x: &Tensor<Cpu, f64, [4, 6]>, w: &Tensor<Cpu, f64, [6]>, b: &Tensor<Cpu, f64, [6]>, r: &Tensor<Cpu, f64, [4, 6]>,
    ) -> Tensor<Cpu, f64, []> {
        (layer_norm(x, w, b, 1e-5) * r).sum() + (rms_norm(x, w, 1e-6) * r * r).sum()
            + (x.softmax(1) * r).sum()
    }

    #[grad(x)]
    fn row_max_sum(x: &Tensor<Cpu, f64, [3, 4]>) -> Tensor<Cpu, f64, []> {
        row_max(x).sum()
    }
}

/// A layer norm, an RMS norm and a softmax written as row kernels train
/// to the gradients of the catalogue's ops, to f64 roundoff.
#[test]
fn row_kernel_norms_match_the_catalogue_gradients() {
    for seed in 0..3u64 {
        let x = tensor::<shape![4, 6]>(&rand_vec(24, seed * 7 + 1, -3.0, 3.0));
        let w = tensor::<shape![6]>(&rand_vec(6, seed * 7 + 2, -1.5, 1.5));
        let b = tensor::<shape![6]>(&rand_vec(6, seed * 7 + 3, -1.0, 1.0));
        let r = tensor::<shape![4, 6]>(&rand_vec(24, seed * 7 + 4, -1.0, 1.0));
        let (v1, g1) = ln_by_row_kernel::value_and_grad(&x, &w, &b, &r).unwrap();
        let (v2, g2) = ln_by_catalogue::value_and_grad(&x, &w, &b, &r).unwrap();
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs().max(1.0);
        assert!(close(value(&v1)[0], value(&v2)[0]), "value, seed {seed}");
        for (i, (a, b)) in g1.flat().iter().zip(g2.flat()).enumerate() {
            for (j, (&p, &q)) in a.iter().zip(&b).enumerate() {
                assert!(
                    close(p, q),
                    "operand {i}[{j}], seed {seed}: row kernel {p}, catalogue {q}"
                );
            }
        }
    }
}

/// A row's `max` splits its gradient evenly among tied maxima (PyTorch's
/// `amax` rule); a row whose max is NaN gets NaN, as PyTorch's does.
#[test]
fn row_kernel_max_splits_ties_evenly() {
    let nan = f64::NAN;
    let inf = f64::INFINITY;
    let x = tensor::<shape![3, 4]>(&[
        1.0, 3.0, 3.0, 2.0, //
        -inf, 0.0, -0.0, -1.0, //
        1.0, nan, 2.0, 2.0,
    ]);
    let (v, g) = row_max_sum::value_and_grad(&x).unwrap();
    assert!(value(&v)[0].is_nan());
    let g = value(&g);
    assert_eq!(&g[..8], &[0.0, 0.5, 0.5, 0.0, 0.0, 0.5, 0.5, 0.0]);
    assert!(g[8..].iter().all(|v| v.is_nan()), "{g:?}");
}

// Compares, selects and casts of a kernel's scalar arguments alone are
// computed again in the backward.
fd_case!(kernel_with_scalar_branches:
    #[kernel]
    fn scalar_branches(x: f64, alpha: f64) -> f64 {
        let s = if alpha > 1.0 { alpha } else { 2.0 * alpha };
        let n = (alpha * 3.0) as i32;
        let y = if alpha > 0.0 { x * s } else { -x };
        y * (n as f64) + sin(x)
    }
    fn k_scalar_if(x: [3, 4] in (-2.0, 2.0)) {
        (scalar_branches(x, 0.7) + scalar_branches(x, -0.4) + scalar_branches(x, 1.5)).sum()
    }
);

tensor_fn! {
    #[kernel]
    fn by_sign(x: f64, alpha: f64) -> f64 {
        if alpha > 0.0 { x * alpha } else { x * x }
    }

    #[grad(x)]
    fn by_sign_sum(x: &Tensor<Cpu, f64, [5]>, alpha: f64) -> Tensor<Cpu, f64, []> {
        by_sign(x, alpha).sum()
    }
}

/// A scalar parameter's comparison inside the kernel picks the branch the
/// gradient follows, as in the forward.
#[test]
fn kernel_branching_on_a_scalar_parameter_trains() {
    let xs = rand_vec(5, 11, -2.0, 2.0);
    let x = tensor::<shape![5]>(&xs);
    let (_, g) = by_sign_sum::value_and_grad(&x, 0.75).unwrap();
    assert_eq!(value(&g), vec![0.75; 5]);
    let (_, g) = by_sign_sum::value_and_grad(&x, -0.5).unwrap();
    assert_eq!(value(&g), xs.iter().map(|v| 2.0 * v).collect::<Vec<_>>());
}
