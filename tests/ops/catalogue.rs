//! Walks the op catalogue: for every unary and binary op of its tables,
//! a `tensor_fn!` use at every rank the op's shape rule accepts (0 to 3
//! here, function and method forms, alone and fused with neighbours) and
//! the typed-API call, generated from the same tables, compiled and
//! compared with each other and with the op's `f64` reference on random
//! inputs from its test domain and on NaN, ±inf and ±0.

use tensorfn::prelude::*;
use tensorfn::{DType, Shape};
use tensorfn_kernels::{BinaryOp, UnaryOp};

/// Inputs of an op: its domain swept at random, then the edge values.
fn inputs(domain: (f64, f64), n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut v: Vec<f64> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let u = (s >> 11) as f64 / (1u64 << 53) as f64;
            domain.0 + (domain.1 - domain.0) * u
        })
        .collect();
    let edges = [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
        0.5,
        -0.5,
    ];
    for (o, e) in v.iter_mut().rev().zip(edges) {
        *o = e;
    }
    v
}

/// `got` against `want` within `rel` (relative, with a floor at `floor`);
/// NaN must be NaN, infinities and zeros exact with their signs.
fn check(what: &str, x: &[f64], got: &[f64], want: &[f64], rel: f64, floor: f64) {
    for ((x, g), w) in x.iter().zip(got).zip(want) {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() || *w == 0.0 {
            g.to_bits() == w.to_bits() || (*w == 0.0 && g.abs() <= floor)
        } else {
            (g - w).abs() <= rel * w.abs().max(floor)
        };
        assert!(ok, "{what}({x}) = {g}, reference {w}");
    }
}

/// The f32 rounding of each value's reference (what an f32 result can be
/// at best), for comparing f32 results.
fn f32_ref(v: &[f64]) -> Vec<f64> {
    v.iter().map(|&w| w as f32 as f64).collect()
}

macro_rules! unary_cases {
    ($($(#[doc = $doc:literal])* $V:ident => $m:ident { $($field:tt)* })*) => {
        $(
            #[allow(non_snake_case)]
            mod $V {
                use super::*;
                tensor_fn! {
                    pub fn rank0(x: &Tensor<Cpu, f64, []>) -> Tensor<Cpu, f64, []> {
                        $m(x)
                    }
                    pub fn rank1(x: &Tensor<Cpu, f64, [N]>) -> Tensor<Cpu, f64, [N]> {
                        x.$m()
                    }
                    pub fn rank2(x: &Tensor<Cpu, f64, [R, C]>) -> Tensor<Cpu, f64, [R, C]> {
                        $m(x)
                    }
                    /// Fused with neighbours that change nothing but
                    /// must not be folded away.
                    pub fn rank3(x: &Tensor<Cpu, f64, [A, B, C]>, one: f64) -> Tensor<Cpu, f64, [A, B, C]> {
                        $m(x * one) * one
                    }
                    pub fn single(x: &Tensor<Cpu, f32, [N]>) -> Tensor<Cpu, f32, [N]> {
                        x.$m()
                    }
                }
            }
        )*

        #[test]
        fn every_unary_op_at_every_rank() {
            let mut checked = 0;
            $(
                let op = UnaryOp::$V;
                let what = op.name();
                let x = inputs(op.test_domain(), 24, checked + 1);
                let want: Vec<f64> = x.iter().map(|&v| op.eval_f64(v)).collect();
                // f64: rank 0 element by element, ranks 1 to 3 over all of them.
                for (xi, wi) in x.iter().zip(&want) {
                    let t = Tensor::<Cpu, f64, shape![]>::from_vec(vec![*xi]).unwrap();
                    let got = $V::rank0(&t).unwrap().to_vec().unwrap();
                    check(what, &[*xi], &got, &[*wi], 1e-14, 1e-300);
                }
                let v1 = Tensor::<Cpu, f64, shape![_]>::from_vec_dims(x.clone(), &[24]).unwrap();
                let typed = v1.$m().unwrap().to_vec().unwrap();
                check(what, &x, &typed, &want, 1e-14, 1e-300);
                check(what, &x, &$V::rank1(&v1).unwrap().to_vec().unwrap(), &typed, 0.0, 0.0);
                let v2 = Tensor::<Cpu, f64, shape![_, _]>::from_vec_dims(x.clone(), &[4, 6]).unwrap();
                check(what, &x, &$V::rank2(&v2).unwrap().to_vec().unwrap(), &typed, 0.0, 0.0);
                let v3 = Tensor::<Cpu, f64, shape![_, _, _]>::from_vec_dims(x.clone(), &[2, 3, 4]).unwrap();
                check(what, &x, &$V::rank3(&v3, 1.0).unwrap().to_vec().unwrap(), &typed, 0.0, 0.0);
                // f32: the typed API and the generated closure agree bit for
                // bit, within 4 ulp of the reference.
                let xf: Vec<f32> = x.iter().map(|&v| v as f32).collect();
                let xd: Vec<f64> = xf.iter().map(|&v| v as f64).collect();
                let wf = f32_ref(&xd.iter().map(|&v| op.eval_f64(v)).collect::<Vec<_>>());
                let t = Tensor::<Cpu, f32, shape![_]>::from_vec_dims(xf, &[24]).unwrap();
                let typed: Vec<f64> = t.$m().unwrap().to_vec().unwrap().iter().map(|&v| v as f64).collect();
                let fused: Vec<f64> = $V::single(&t).unwrap().to_vec().unwrap().iter().map(|&v| v as f64).collect();
                check(what, &xd, &typed, &wf, 4.0 * f32::EPSILON as f64, f32::MIN_POSITIVE as f64);
                check(what, &xd, &fused, &typed, 0.0, 0.0);
                checked += 1;
            )*
            assert_eq!(checked as usize, UnaryOp::ALL.len());
        }
    };
}

tensorfn_kernels::for_each_unary_op!(unary_cases);

macro_rules! binary_cases {
    ($($(#[doc = $doc:literal])* $V:ident => $m:ident { $($field:tt)* })*) => {
        $(
            #[allow(non_snake_case)]
            mod $V {
                use super::*;
                tensor_fn! {
                    pub fn rank0(x: &Tensor<Cpu, f64, []>, y: &Tensor<Cpu, f64, []>) -> Tensor<Cpu, f64, []> {
                        $m(x, y)
                    }
                    /// The second operand broadcast along the rows.
                    pub fn rank2(x: &Tensor<Cpu, f64, [R, C]>, y: &Tensor<Cpu, f64, [C]>) -> Tensor<Cpu, f64, [R, C]> {
                        x.$m(y)
                    }
                    pub fn rank3(x: &Tensor<Cpu, f64, [A, B, C]>, y: &Tensor<Cpu, f64, [A, B, C]>) -> Tensor<Cpu, f64, [A, B, C]> {
                        $m(x, y) + 0.0
                    }
                    /// A scalar second operand.
                    pub fn scalar(x: &Tensor<Cpu, f64, [N]>, s: f64) -> Tensor<Cpu, f64, [N]> {
                        $m(x, s)
                    }
                }
            }
        )*

        #[test]
        fn every_binary_op_at_every_rank() {
            let mut checked = 0;
            $(
                let op = BinaryOp::$V;
                let what = op.name();
                // Positive second operands where `pow` and `div` would
                // otherwise only test NaN.
                let x = inputs((-4.0, 4.0), 24, 7 + checked);
                let y = inputs((0.25, 3.0), 24, 11 + checked);
                let want: Vec<f64> = x.iter().zip(&y).map(|(&a, &b)| op.eval_f64(a, b)).collect();
                for ((a, b), w) in x.iter().zip(&y).zip(&want) {
                    let ta = Tensor::<Cpu, f64, shape![]>::from_vec(vec![*a]).unwrap();
                    let tb = Tensor::<Cpu, f64, shape![]>::from_vec(vec![*b]).unwrap();
                    let got = $V::rank0(&ta, &tb).unwrap().to_vec().unwrap();
                    check(what, &[*a], &got, &[*w], 1e-14, 1e-300);
                }
                let a3 = Tensor::<Cpu, f64, shape![_, _, _]>::from_vec_dims(x.clone(), &[2, 3, 4]).unwrap();
                let b3 = Tensor::<Cpu, f64, shape![_, _, _]>::from_vec_dims(y.clone(), &[2, 3, 4]).unwrap();
                check(what, &x, &$V::rank3(&a3, &b3).unwrap().to_vec().unwrap(), &want, 1e-14, 1e-300);
                let a2 = Tensor::<Cpu, f64, shape![_, _]>::from_vec_dims(x.clone(), &[4, 6]).unwrap();
                let b1 = Tensor::<Cpu, f64, shape![_]>::from_vec_dims(y[..6].to_vec(), &[6]).unwrap();
                let want2: Vec<f64> = x.iter().enumerate().map(|(i, &a)| op.eval_f64(a, y[i % 6])).collect();
                check(what, &x, &$V::rank2(&a2, &b1).unwrap().to_vec().unwrap(), &want2, 1e-14, 1e-300);
                let a1 = Tensor::<Cpu, f64, shape![_]>::from_vec_dims(x.clone(), &[24]).unwrap();
                let want_s: Vec<f64> = x.iter().map(|&a| op.eval_f64(a, 1.5)).collect();
                check(what, &x, &$V::scalar(&a1, 1.5).unwrap().to_vec().unwrap(), &want_s, 1e-14, 1e-300);
                checked += 1;
            )*
            assert_eq!(checked as usize, BinaryOp::ALL.len());
        }
    };
}

tensorfn_kernels::for_each_binary_op!(binary_cases);

tensor_fn! {
    fn less(a: &Tensor<Cpu, f32, [N]>, b: &Tensor<Cpu, f32, [N]>) -> Tensor<Cpu, bool, [N]> {
        a < b
    }
    fn at_most(a: &Tensor<Cpu, f32, [N]>, b: &Tensor<Cpu, f32, [N]>) -> Tensor<Cpu, bool, [N]> {
        a.le(b)
    }
    fn equal(a: &Tensor<Cpu, f32, [N]>, b: &Tensor<Cpu, f32, [N]>) -> Tensor<Cpu, bool, [N]> {
        eq(a, b)
    }
    fn not_half(a: &Tensor<Cpu, f32, [N]>) -> Tensor<Cpu, bool, [N]> {
        a != 0.5
    }
    /// Broadcast: each row against a column threshold.
    fn above(a: &Tensor<Cpu, i64, [R, C]>, t: &Tensor<Cpu, i64, [R, 1]>) -> Tensor<Cpu, bool, [R, C]> {
        a > t
    }
    /// `relu` written with `where_`, fused with its comparison.
    fn relu_by_where(x: &Tensor<Cpu, f32, [N]>) -> Tensor<Cpu, f32, [N]> {
        where_(x > 0.0, x, 0.0) * 2.0
    }
    /// A causal-style mask filled before a softmax.
    fn masked(x: &Tensor<Cpu, f32, [R, C]>, m: &Tensor<Cpu, bool, [C]>) -> Tensor<Cpu, f32, [R, C]> {
        x.masked_fill(m, -1000.0).softmax(1)
    }
    fn clamped(x: &Tensor<Cpu, f32, [N]>) -> Tensor<Cpu, f32, [N]> {
        x.clamp(-1.0, 1.0) + clamp(x, min = 0.5) - x.clamp(max = 0.0)
    }
    /// Parameters by default, by keyword and positionally.
    fn slopes(x: &Tensor<Cpu, f32, [N]>) -> Tensor<Cpu, f32, [N]> {
        leaky_relu(x) + elu(x, alpha = 0.5) + x.leaky_relu(0.2) + x.elu()
    }
    /// New ops fused with each other in 16 bits.
    fn half_chain(x: &Tensor<Cpu, f16, [N]>) -> Tensor<Cpu, f16, [N]> {
        where_(x >= 0.0, gelu_erf(x), softplus(x) - log1p(x * x)) + floor(x) * sign(x)
    }
}

fn vec32(v: &[f64]) -> Tensor<Cpu, f32, shape![_]> {
    Tensor::from_vec_dims(v.iter().map(|&x| x as f32).collect(), &[v.len()]).unwrap()
}

#[test]
fn comparisons_follow_ieee_and_broadcast() {
    let a = inputs((-2.0, 2.0), 40, 3);
    let mut b = inputs((-2.0, 2.0), 40, 5);
    b[3] = a[3]; // some equal pairs
    b[9] = a[9];
    let (ta, tb) = (vec32(&a), vec32(&b));
    let af: Vec<f32> = ta.to_vec().unwrap();
    let bf: Vec<f32> = tb.to_vec().unwrap();
    let pairs = || af.iter().zip(&bf);
    let lt: Vec<bool> = pairs().map(|(x, y)| x < y).collect();
    let le: Vec<bool> = pairs().map(|(x, y)| x <= y).collect();
    let eqv: Vec<bool> = pairs().map(|(x, y)| x == y).collect();
    assert_eq!(less(&ta, &tb).unwrap().to_vec().unwrap(), lt);
    assert_eq!(at_most(&ta, &tb).unwrap().to_vec().unwrap(), le);
    assert_eq!(equal(&ta, &tb).unwrap().to_vec().unwrap(), eqv);
    let typed: Tensor<Cpu, bool, shape![_]> = ta.lt(&tb).unwrap();
    assert_eq!(typed.to_vec().unwrap(), lt);
    let ne: Vec<bool> = af.iter().map(|&x| x != 0.5).collect();
    assert_eq!(not_half(&ta).unwrap().to_vec().unwrap(), ne);
    assert_eq!(ta.ne_scalar(0.5).unwrap().to_vec().unwrap(), ne);
    // NaN: false but for `!=`.
    assert!(ne[af.iter().position(|x| x.is_nan()).unwrap()]);

    let m =
        Tensor::<Cpu, i64, shape![_, _]>::from_vec_dims(vec![1, 5, 9, 1, 5, 9], &[2, 3]).unwrap();
    let t = Tensor::<Cpu, i64, shape![_, 1]>::from_vec_dims(vec![4, 8], &[2, 1]).unwrap();
    let want = vec![false, true, true, false, false, true];
    assert_eq!(above(&m, &t).unwrap().to_vec().unwrap(), want);
    let typed: Tensor<Cpu, bool, shape![_, _]> = m.gt(&t).unwrap();
    assert_eq!(typed.to_vec().unwrap(), want);
    // Shapes that do not broadcast are an `Err` naming the operand.
    let bad = Tensor::<Cpu, i64, shape![_]>::zeros_dims(&[4]).unwrap();
    let e = m.gt::<shape![_, _]>(&bad).unwrap_err().to_string();
    assert!(e.contains("other"), "{e}");
}

#[test]
fn where_masked_fill_and_clamp() {
    let x = inputs((-3.0, 3.0), 33, 9);
    let t = vec32(&x);
    let xf: Vec<f32> = t.to_vec().unwrap();
    // where_: NaN > 0 is false, so NaN becomes 0 like `torch.where(x > 0, x, 0)`.
    let want: Vec<f32> = xf
        .iter()
        .map(|&v| if v > 0.0 { v * 2.0 } else { 0.0 })
        .collect();
    let got = relu_by_where(&t).unwrap().to_vec().unwrap();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.to_bits(), w.to_bits());
    }
    let zero = Tensor::<Cpu, f32, shape![]>::zeros().unwrap();
    let typed: Tensor<Cpu, f32, shape![_]> =
        tensorfn::ops::where_(&t.gt_scalar(0.0).unwrap(), &t, &zero).unwrap();
    let half: Vec<f32> = want.iter().map(|v| v / 2.0).collect();
    assert_eq!(typed.to_vec().unwrap(), half);

    // clamp keeps NaN; min alone, max alone.
    let got = clamped(&t).unwrap().to_vec().unwrap();
    let typed_c = t.clamp(-1.0, 1.0).unwrap().to_vec().unwrap();
    for (i, &v) in xf.iter().enumerate() {
        let c = if v.is_nan() { v } else { v.clamp(-1.0, 1.0) };
        let w = c + (if v.is_nan() { v } else { v.max(0.5) })
            - (if v.is_nan() { v } else { v.min(0.0) });
        assert!(
            got[i].to_bits() == w.to_bits() || (w.is_nan() && got[i].is_nan()),
            "{v}: {} vs {w}",
            got[i]
        );
        assert!(typed_c[i].to_bits() == c.to_bits() || (c.is_nan() && typed_c[i].is_nan()));
    }

    // masked_fill, then softmax: masked columns get (about) nothing.
    let x = Tensor::<Cpu, f32, shape![_, _]>::from_vec_dims(vec![1., 2., 3., 4., 5., 6.], &[2, 3])
        .unwrap();
    let m = Tensor::<Cpu, bool, shape![_]>::from_vec_dims(vec![false, false, true], &[3]).unwrap();
    let p = masked(&x, &m).unwrap().to_vec().unwrap();
    let e = (1f32).exp();
    let (p0, p1) = (1.0 / (1.0 + e), e / (1.0 + e));
    for (g, w) in p.iter().zip([p0, p1, 0.0, p0, p1, 0.0]) {
        assert!((g - w).abs() < 1e-6, "{p:?}");
    }
    let typed = x.masked_fill(&m, 0.0).unwrap().to_vec().unwrap();
    assert_eq!(typed, vec![1., 2., 0., 4., 5., 0.]);
    // A mask that would grow the tensor is an `Err` naming it.
    let wide = Tensor::<Cpu, bool, shape![2, 2, 3]>::from_vec(vec![true; 12]).unwrap();
    let e = x.masked_fill(&wide, 0.0).unwrap_err().to_string();
    assert!(e.contains("mask"), "{e}");
}

#[test]
fn parameters_and_sixteen_bit_chains() {
    let x = inputs((-4.0, 4.0), 30, 13);
    let t = vec32(&x);
    let xf: Vec<f64> = t.to_vec().unwrap().iter().map(|&v| v as f64).collect();
    let got = slopes(&t).unwrap().to_vec().unwrap();
    for (i, &v) in xf.iter().enumerate() {
        let w = BinaryOp::LeakyRelu.eval_f64(v, 0.01f32 as f64)
            + BinaryOp::Elu.eval_f64(v, 0.5)
            + BinaryOp::LeakyRelu.eval_f64(v, 0.2f32 as f64)
            + BinaryOp::Elu.eval_f64(v, 1.0);
        let g = got[i] as f64;
        let ok = (w.is_nan() && g.is_nan()) || g == w || (g - w).abs() <= 1e-6 * w.abs().max(1.0);
        assert!(ok, "slopes({v}) = {g}, reference {w}");
    }
    let typed = t.leaky_relu(0.2).unwrap().to_vec().unwrap();
    for (g, &v) in typed.iter().zip(&xf) {
        let w = BinaryOp::LeakyRelu.eval_f64(v, 0.2f32 as f64) as f32;
        assert!(
            g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
            "{v}"
        );
    }

    // Each 16-bit op rounds once, as the kernels do; compare with the same
    // chain written out in f32 with a rounding after each op.
    let h: Vec<f16> = xf.iter().map(|&v| f16::from_f64(v)).collect();
    let th = Tensor::<Cpu, f16, shape![_]>::from_vec_dims(h.clone(), &[h.len()]).unwrap();
    let got = half_chain(&th).unwrap().to_vec().unwrap();
    let r = |v: f64| f16::from_f64(v).to_f64();
    for (g, x) in got.iter().zip(&h) {
        let v = x.to_f64();
        let branch = if v >= 0.0 {
            r(UnaryOp::GeluErf.eval_f64(v))
        } else {
            r(r(UnaryOp::Softplus.eval_f64(v)) - r(UnaryOp::Log1p.eval_f64(r(v * v))))
        };
        let w = r(branch + r(r(v.floor()) * UnaryOp::Sign.eval_f64(v)));
        let g = g.to_f64();
        // One 16-bit ulp for the rounding of the f32 transcendentals.
        let ok = (w.is_nan() && g.is_nan())
            || g == w
            || (g - w).abs() <= 2f64.powi(-10) * w.abs().max(1e-4);
        assert!(ok, "half_chain({v}) = {g}, expected {w}");
    }
}

macro_rules! device_fns {
    ($module:ident, $dev:ident) => {
        mod $module {
            use tensorfn::prelude::*;
            tensor_fn! {
                pub fn special(x: &Tensor<$dev, f32, [N]>) -> Tensor<$dev, f32, [N]> {
                    erf(x) + erfc(x) * 0.5 + gelu_erf(x) - softplus(x) + expm1(x * 0.1) + log1p(abs(x))
                }
                pub fn special64(x: &Tensor<$dev, f64, [N]>) -> Tensor<$dev, f64, [N]> {
                    erf(x) + erfc(x) * 0.5 + gelu_erf(x) - softplus(x) + expm1(x * 0.1) + log1p(abs(x))
                }
                pub fn rounding(x: &Tensor<$dev, f32, [N]>) -> Tensor<$dev, f32, [N]> {
                    floor(x) + ceil(x) * 2.0 + round(x) * 4.0 + trunc(x) * 8.0 + sign(x) * 16.0
                }
                pub fn choose(x: &Tensor<$dev, f32, [R, C]>, m: &Tensor<$dev, bool, [C]>) -> Tensor<$dev, f32, [R, C]> {
                    where_(x > 0.5, x.leaky_relu(0.1), x.elu()).masked_fill(m, -3.0).clamp(-1.0, 2.0)
                }
                pub fn half(x: &Tensor<$dev, f16, [N]>) -> Tensor<$dev, f16, [N]> {
                    gelu_erf(x) + softplus(x) * erf(x) - sign(x)
                }
                pub fn bhalf(x: &Tensor<$dev, bf16, [N]>) -> Tensor<$dev, bf16, [N]> {
                    gelu_erf(x) + softplus(x) * erf(x) - round(x * 3.0)
                }
                pub fn order(a: &Tensor<$dev, i32, [N]>, b: &Tensor<$dev, i32, [N]>) -> Tensor<$dev, bool, [N]> {
                    a <= b
                }
            }
        }
    };
}

device_fns!(on_cpu, Cpu);
device_fns!(on_gpu, Cuda);

/// Largest difference between the GPU's and the CPU's results, relative
/// to `max(1, |cpu|)`; both back-ends compute each op to within a few ulps
/// of the reference, not bit for bit (their expansions differ).
fn gpu_vs_cpu<T: DType, S: Shape>(
    what: &str,
    c: &Tensor<Cpu, T, S>,
    g: &Tensor<Cuda, T, S>,
    tol: f64,
) {
    let c: Vec<f64> = c.to_vec().unwrap().iter().map(|v| v.to_f64()).collect();
    let g: Vec<f64> = g
        .to_cpu()
        .unwrap()
        .to_vec()
        .unwrap()
        .iter()
        .map(|v| v.to_f64())
        .collect();
    for (i, (x, y)) in c.iter().zip(&g).enumerate() {
        let ok = (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= tol * x.abs().max(1.0);
        assert!(ok, "{what}[{i}]: cpu {x}, gpu {y}");
    }
}

#[test]
fn new_ops_on_the_gpu_match_the_cpu() {
    let probe = Tensor::<Cpu, f32, shape![1]>::ones().unwrap();
    if let Err(e) = probe.to_device::<Cuda>() {
        eprintln!("skipping: no CUDA device ({e})");
        return;
    }
    let up = |t: &Tensor<Cpu, f32, shape![_]>| t.to_device::<Cuda>().unwrap();
    let x = vec32(&inputs((-6.0, 6.0), 4099, 21));
    gpu_vs_cpu(
        "special",
        &on_cpu::special(&x).unwrap(),
        &on_gpu::special(&up(&x)).unwrap(),
        1e-6,
    );
    gpu_vs_cpu(
        "rounding",
        &on_cpu::rounding(&x).unwrap(),
        &on_gpu::rounding(&up(&x)).unwrap(),
        0.0,
    );
    let x64 = x.cast::<f64>().unwrap();
    gpu_vs_cpu(
        "special64",
        &on_cpu::special64(&x64).unwrap(),
        &on_gpu::special64(&x64.to_device::<Cuda>().unwrap()).unwrap(),
        1e-14,
    );
    let (xh, xb) = (x.cast::<f16>().unwrap(), x.cast::<bf16>().unwrap());
    gpu_vs_cpu(
        "f16",
        &on_cpu::half(&xh).unwrap(),
        &on_gpu::half(&xh.to_device::<Cuda>().unwrap()).unwrap(),
        2e-3,
    );
    gpu_vs_cpu(
        "bf16",
        &on_cpu::bhalf(&xb).unwrap(),
        &on_gpu::bhalf(&xb.to_device::<Cuda>().unwrap()).unwrap(),
        1.6e-2,
    );

    let m = Tensor::<Cpu, f32, shape![_, _]>::from_vec_dims(
        x.to_vec().unwrap()[..4096].to_vec(),
        &[64, 64],
    )
    .unwrap();
    let mask =
        Tensor::<Cpu, bool, shape![_]>::from_vec_dims((0..64).map(|i| i % 3 == 0).collect(), &[64])
            .unwrap();
    let (gm, gmask) = (
        m.to_device::<Cuda>().unwrap(),
        mask.to_device::<Cuda>().unwrap(),
    );
    gpu_vs_cpu(
        "choose",
        &on_cpu::choose(&m, &mask).unwrap(),
        &on_gpu::choose(&gm, &gmask).unwrap(),
        1e-6,
    );

    let a = Tensor::<Cpu, i32, shape![_]>::from_vec_dims(
        (0..1000).map(|i| i * 7 % 31).collect(),
        &[1000],
    )
    .unwrap();
    let b = Tensor::<Cpu, i32, shape![_]>::from_vec_dims(
        (0..1000).map(|i| i * 11 % 29).collect(),
        &[1000],
    )
    .unwrap();
    let (ga, gb) = (
        a.to_device::<Cuda>().unwrap(),
        b.to_device::<Cuda>().unwrap(),
    );
    gpu_vs_cpu(
        "order",
        &on_cpu::order(&a, &b).unwrap(),
        &on_gpu::order(&ga, &gb).unwrap(),
        0.0,
    );

    // The typed API's run-time-built kernels on the GPU.
    let gx = up(&x);
    let lt: Tensor<Cuda, bool, shape![_]> = gx.lt(&gx.mul_scalar(0.5).unwrap()).unwrap();
    let want: Tensor<Cpu, bool, shape![_]> = x.lt(&x.mul_scalar(0.5).unwrap()).unwrap();
    gpu_vs_cpu("lt", &want, &lt, 0.0);
    gpu_vs_cpu(
        "clamp",
        &x.clamp(-0.5, 0.5).unwrap(),
        &gx.clamp(-0.5, 0.5).unwrap(),
        0.0,
    );
    let cond = x.gt_scalar(0.0).unwrap();
    let zero = Tensor::<Cpu, f32, shape![]>::zeros().unwrap();
    let w: Tensor<Cpu, f32, shape![_]> = tensorfn::ops::where_(&cond, &x, &zero).unwrap();
    let gw: Tensor<Cuda, f32, shape![_]> = tensorfn::ops::where_(
        &cond.to_device::<Cuda>().unwrap(),
        &gx,
        &zero.to_device::<Cuda>().unwrap(),
    )
    .unwrap();
    gpu_vs_cpu("where_", &w, &gw, 0.0);
    let gmf = gm.masked_fill(&gmask, 7.0).unwrap();
    gpu_vs_cpu(
        "masked_fill",
        &m.masked_fill(&mask, 7.0).unwrap(),
        &gmf,
        0.0,
    );
}
