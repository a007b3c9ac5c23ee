//! Accuracy of every transcendental expansion, measured by running the
//! built kernels in the interpreter (which executes exactly the operation
//! sequence the PTX does) over dense sweeps, against `f64` references for
//! f32 and the platform libm for f64. The bounds asserted here are the ones
//! stated in the crate docs.

#[path = "../src/test_support.rs"]
mod test_support;
use tensorfn_kernels::interp::{run_elementwise, HostData, HostView};
use tensorfn_kernels::ir::ElementwiseBuilder;
use tensorfn_kernels::{BinaryOp, DTypeKind, UnaryOp};
use test_support::{ulp_err_f32, ulp_err_f64, Rng};

fn unary_kernel(op: UnaryOp, dtype: DTypeKind) -> tensorfn_kernels::ir::Kernel {
    let mut k = ElementwiseBuilder::new();
    let x = k.input(dtype);
    let y = k.unary(op, x);
    k.output(y).unwrap()
}

fn run_f32(op: UnaryOp, xs: &[f32]) -> Vec<f32> {
    let data = HostData::F32(xs.to_vec());
    let out = run_elementwise(
        &unary_kernel(op, DTypeKind::F32),
        &[HostView::contiguous(&data)],
        &[xs.len()],
    )
    .unwrap();
    match out {
        HostData::F32(v) => v,
        other => panic!("unexpected {other:?}"),
    }
}

fn run_f64(op: UnaryOp, xs: &[f64]) -> Vec<f64> {
    let data = HostData::F64(xs.to_vec());
    let out = run_elementwise(
        &unary_kernel(op, DTypeKind::F64),
        &[HostView::contiguous(&data)],
        &[xs.len()],
    )
    .unwrap();
    match out {
        HostData::F64(v) => v,
        other => panic!("unexpected {other:?}"),
    }
}

/// Every `step`-th f32 bit pattern with magnitude in `[lo, hi]`, both signs
/// (if `signed`), plus a dense linear sweep of `[-dense, dense]`.
fn f32_sweep(lo: f32, hi: f32, step: u32, signed: bool, dense: f32) -> Vec<f32> {
    let mut v = Vec::new();
    let mut b = lo.to_bits();
    while b <= hi.to_bits() {
        let x = f32::from_bits(b);
        v.push(x);
        if signed {
            v.push(-x);
        }
        b += step;
    }
    let n = 200_000;
    for i in 0..=n {
        let x = -dense + 2.0 * dense * (i as f32 / n as f32);
        if signed || x >= 0.0 {
            v.push(x);
        }
    }
    v
}

fn f64_sweep(lo: f64, hi: f64, n: usize, seed: u64) -> Vec<f64> {
    let mut rng = Rng(seed);
    let mut v = Vec::with_capacity(n);
    for i in 0..n {
        // half log-uniform magnitudes, half linear
        let x = if i % 2 == 0 {
            // log-uniform magnitudes from 1e-8 (or lo when positive) to the
            // larger bound
            let l = if lo > 0.0 { lo.ln() } else { 1e-8f64.ln() };
            let h = lo.abs().max(hi.abs()).ln();
            rng.uniform(l.min(h), l.max(h)).exp()
        } else {
            rng.uniform(lo, hi).abs()
        };
        let s = if lo < 0.0 && rng.next() & 1 == 1 {
            -x
        } else {
            x
        };
        v.push(s);
    }
    v
}

/// Max ulp error of `op` in f32 against `reference` over `xs`, with the
/// worst input.
fn max_err_f32(op: UnaryOp, xs: &[f32], reference: impl Fn(f64) -> f64) -> (f64, f32) {
    let got = run_f32(op, xs);
    let mut worst = (0.0, 0.0f32);
    for (&x, &g) in xs.iter().zip(&got) {
        let e = ulp_err_f32(g, reference(x as f64));
        if e > worst.0 {
            worst = (e, x);
        }
    }
    worst
}

fn max_err_f64(op: UnaryOp, xs: &[f64], reference: impl Fn(f64) -> f64) -> (f64, f64) {
    let got = run_f64(op, xs);
    let mut worst = (0.0, 0.0);
    for (&x, &g) in xs.iter().zip(&got) {
        let e = ulp_err_f64(g, reference(x));
        if e > worst.0 {
            worst = (e, x);
        }
    }
    worst
}

fn check_f32(op: UnaryOp, xs: &[f32], bound: f64) {
    let (e, x) = max_err_f32(op, xs, |x| op.eval_f64(x));
    println!(
        "{:8} f32: max {e:.3} ulp at x = {x:e} ({} points)",
        op.name(),
        xs.len()
    );
    assert!(
        e <= bound,
        "{} f32: {e} ulp at {x:e} (bound {bound})",
        op.name()
    );
}

fn check_f64(op: UnaryOp, xs: &[f64], reference: impl Fn(f64) -> f64, bound: f64) {
    let (e, x) = max_err_f64(op, xs, reference);
    println!(
        "{:8} f64: max {e:.3} ulp at x = {x:e} ({} points)",
        op.name(),
        xs.len()
    );
    assert!(
        e <= bound,
        "{} f64: {e} ulp at {x:e} (bound {bound})",
        op.name()
    );
}

#[test]
fn exp_f32() {
    let xs = f32_sweep(1e-30, 104.0, 601, true, 90.0);
    check_f32(UnaryOp::Exp, &xs, 1.0);
}

#[test]
fn log_f32() {
    let mut xs = f32_sweep(f32::from_bits(1), f32::MAX, 1201, false, 4.0);
    xs.retain(|x| *x > 0.0);
    check_f32(UnaryOp::Log, &xs, 1.0);
}

#[test]
fn sin_cos_f32() {
    let xs = f32_sweep(1e-30, 1e6, 601, true, 50.0);
    check_f32(UnaryOp::Sin, &xs, 1.5);
    check_f32(UnaryOp::Cos, &xs, 1.5);
    // the whole range, through the exact reduction
    let big = f32_sweep(1e6, f32::MAX, 5003, true, 1.0);
    check_f32(UnaryOp::Sin, &big, 1.5);
    check_f32(UnaryOp::Cos, &big, 1.5);
}

#[test]
fn tanh_sigmoid_silu_f32() {
    let xs = f32_sweep(1e-30, 100.0, 601, true, 12.0);
    check_f32(UnaryOp::Tanh, &xs, 2.0);
    check_f32(UnaryOp::Sigmoid, &xs, 2.5);
    check_f32(UnaryOp::Silu, &xs, 3.0);
}

#[test]
fn gelu_f32() {
    let xs = f32_sweep(1e-30, 10.0, 601, true, 10.0);
    check_f32(UnaryOp::Gelu, &xs, 3.0);
    let pos = f32_sweep(3.0, 1e30, 601, false, 0.0);
    check_f32(UnaryOp::Gelu, &pos, 3.0);
}

#[test]
fn sqrt_rsqrt_recip_f32() {
    let xs = f32_sweep(1e-38, 1e38, 997, false, 100.0);
    let xs: Vec<f32> = xs.into_iter().filter(|x| *x > 0.0).collect();
    check_f32(UnaryOp::Sqrt, &xs, 0.5);
    check_f32(UnaryOp::Rsqrt, &xs, 1.5);
    check_f32(UnaryOp::Recip, &xs, 0.5);
}

#[test]
fn exp_log_f64() {
    let xs = f64_sweep(-745.0, 709.0, 400_000, 1);
    check_f64(UnaryOp::Exp, &xs, f64::exp, 1.0);
    let ys = f64_sweep(1e-300, 1e300, 400_000, 2);
    check_f64(UnaryOp::Log, &ys, f64::ln, 1.0);
}

#[test]
fn sin_cos_f64() {
    let xs = f64_sweep(-1.1e9, 1.1e9, 400_000, 3);
    check_f64(UnaryOp::Sin, &xs, f64::sin, 1.5);
    check_f64(UnaryOp::Cos, &xs, f64::cos, 1.5);
    // the whole range, through the exact reduction
    let mut rng = Rng(5);
    let mut big: Vec<f64> = (0..200_000)
        .map(|_| {
            // random significand, exponent uniform in 2^30 .. 2^1023, random sign
            let r = rng.next();
            let exp = 1023 + 30 + (r >> 53) % 994;
            f64::from_bits((r & (1 << 63)) | (exp << 52) | (rng.next() >> 12))
        })
        .collect();
    big.push(f64::MAX);
    check_f64(UnaryOp::Sin, &big, f64::sin, 1.5);
    check_f64(UnaryOp::Cos, &big, f64::cos, 1.5);
    // The double closest to a multiple of pi/2: 6381956970095103 * 2^797,
    // whose remainder is 4.68716592425462761112e-19 (Muller, "Elementary
    // Functions"); the platform libm misses it by several ulps.
    let x = 6381956970095103.0 * 2f64.powi(797);
    let cos = run_f64(UnaryOp::Cos, &[x, -x]);
    let sin = run_f64(UnaryOp::Sin, &[x, -x]);
    let r = -4.687_165_924_254_628e-19; // the f64 nearest -4.68716592425462761e-19
    assert!(
        ulp_err_f64(cos[0], r) <= 0.5 && ulp_err_f64(cos[1], r) <= 0.5,
        "{cos:?}"
    );
    assert_eq!(sin, vec![1.0, -1.0]);
}

#[test]
fn hyperbolic_f64() {
    let xs = f64_sweep(-40.0, 40.0, 400_000, 4);
    check_f64(UnaryOp::Tanh, &xs, f64::tanh, 2.0);
    check_f64(UnaryOp::Sigmoid, &xs, |x| UnaryOp::Sigmoid.eval_f64(x), 3.0);
}

#[test]
fn pow_f32_and_f64() {
    let mut rng = Rng(7);
    let n = 200_000;
    let mut xs = Vec::with_capacity(n);
    let mut ys = Vec::with_capacity(n);
    for _ in 0..n {
        xs.push(rng.uniform(0.0, 30.0));
        ys.push(rng.uniform(-20.0, 20.0));
    }
    for dtype in [DTypeKind::F32, DTypeKind::F64] {
        let mut k = ElementwiseBuilder::new();
        let a = k.input(dtype);
        let b = k.input(dtype);
        let c = k.binary(BinaryOp::Pow, a, b);
        let kernel = k.output(c).unwrap();
        let xa = HostData::from_f64(dtype, &xs);
        let ya = HostData::from_f64(dtype, &ys);
        let out = run_elementwise(
            &kernel,
            &[HostView::contiguous(&xa), HostView::contiguous(&ya)],
            &[n],
        )
        .unwrap()
        .to_f64_vec();
        let (xa, ya) = (xa.to_f64_vec(), ya.to_f64_vec());
        let mut worst = 0.0f64;
        for i in 0..n {
            let want = xa[i].powf(ya[i]);
            let e = if dtype == DTypeKind::F32 {
                ulp_err_f32(out[i] as f32, want)
            } else {
                ulp_err_f64(out[i], want)
            };
            worst = worst.max(e);
        }
        println!("pow {dtype}: max {worst:.3} ulp");
        let bound = if dtype == DTypeKind::F32 { 1.0 } else { 2.0 };
        assert!(worst <= bound, "pow {dtype}: {worst} ulp");
    }
}
