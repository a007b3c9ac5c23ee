//! `tanh`, `sigmoid`, `silu` and `gelu`, all built on [`exp`](super::exp).

use super::coeffs::{TANH_BF16_P, TANH_BF16_Q, TANH_F16_P, TANH_F16_Q, TANH_F32, TANH_F64};
use super::exp_log::{exp_scaled, EXP_FLOOR_F16, EXP_FLOOR_F32, EXP_FLOOR_F64};
use super::{
    copysign, div_positive, div_unit_range, div_unit_range_full, exp, horner, inf, k, kx, Fit,
};
use crate::prim::{Builder, CmpOp, Reg, Ty};

/// Below this `|x|`, tanh uses its Taylor polynomial (no cancellation);
/// above, `1 - 2/(e^{2|x|} + 1)` (result above 1/2, so no cancellation).
const TANH_SERIES_LIMIT: f64 = 0.55;

/// The cubic coefficient of the tanh form of GELU.
const GELU_A: f64 = 0.044715;
/// `2 sqrt(2/π)`.
const GELU_2C: f64 = 1.595_769_121_605_730_7;

/// Hyperbolic tangent.
pub(crate) fn tanh(b: &mut Builder, x: Reg) -> Reg {
    let ty = b.ty(x);
    let ax = b.fabs(x);
    // small: x + x z P(z)
    let z = b.mul(x, x);
    let p = horner(b, z, &TANH_F32, &TANH_F64);
    let xz = b.mul(x, z);
    let small = b.fma(xz, p, x);
    // large: 1 - 2e/(1 + e), e = e^{-2|x|} <= e^{-1.1}, so the divisor
    // stays in [1, 2]
    let m_two = kx(b, ty, -2.0);
    let one = kx(b, ty, 1.0);
    let m_two_ax = b.mul(m_two, ax);
    let e = exp(b, m_two_ax);
    let d = b.add(e, one);
    let two_e = b.add(e, e);
    let q = div_unit_range_full(b, two_e, d);
    let large = b.sub(one, q);
    let large = copysign(b, large, x);
    let limit = k(b, ty, TANH_SERIES_LIMIT as f32, TANH_SERIES_LIMIT);
    let is_small = b.cmp(CmpOp::Lt, ax, limit);
    let y = b.select(is_small, small, large);
    keep_zero(b, x, y)
}

/// The logistic function `1/(1 + e^-u)` times `f`, for `u = uh + ul`:
/// `f/(1+e)` when `u >= 0`, `f e/(1+e)` otherwise, with `e = exp(-|u|)`
/// (no overflow, no cancellation; the power of two of `e` applied last so
/// tiny results round once). `f_finite`: `f` is never infinite, so the
/// division needs no case for it.
fn logistic_times(b: &mut Builder, f: Reg, uh: Reg, ul: Option<Reg>, f_finite: bool) -> Reg {
    let ty = b.ty(uh);
    let zero = kx(b, ty, 0.0);
    let pos = b.cmp(CmpOp::Ge, uh, zero);
    let auh = b.fabs(uh);
    let nauh = b.fneg(auh);
    let lo = ul.map(|ul| {
        let nul = b.fneg(ul);
        b.select(pos, nul, ul)
    });
    let (m, s) = exp_scaled(b, nauh, lo, Fit::Full, true);
    let s = s.expect("full-precision exp scales in two steps");
    let e = b.mul(m, s);
    let one = kx(b, ty, 1.0);
    let d = b.add(one, e);
    // One division for both signs: the numerator is chosen first.
    let fm = b.mul(f, m);
    let num = b.select(pos, f, fm);
    let p = div_unit_range_full(b, num, d);
    // An infinite numerator would leave `inf - inf` in the residual step.
    let p = if f_finite {
        p
    } else {
        let inf = inf(b, ty);
        let an = b.fabs(num);
        let is_inf = b.cmp(CmpOp::Eq, an, inf);
        b.select(is_inf, num, p)
    };
    let n = b.mul(p, s);
    let n = beyond_floor(b, f, auh, n, Fit::Full);
    b.select(pos, p, n)
}

/// `f e^-|u|` is 0 (`f · 0`, NaN for an infinite `f`) where `-|u|` is
/// below the clamp of `exp`: there `f e^-|u|` underflows for every
/// finite `f` with `|f| <= |u|` (all callers), while the clamped value
/// times a large `f` would not.
fn beyond_floor(b: &mut Builder, f: Reg, au: Reg, fe: Reg, fit: Fit) -> Reg {
    let ty = b.ty(f);
    let floor = match fit {
        Fit::F16 => kx(b, ty, EXP_FLOOR_F16),
        _ => k(b, ty, EXP_FLOOR_F32 as f32, EXP_FLOOR_F64),
    };
    let zero = kx(b, ty, 0.0);
    let under = b.cmp(CmpOp::Gt, au, floor);
    let f0 = b.mul(f, zero);
    b.select(under, f0, fe)
}

/// `1 / (1 + e^-x)`.
pub(crate) fn sigmoid(b: &mut Builder, x: Reg) -> Reg {
    let ty = b.ty(x);
    let one = kx(b, ty, 1.0);
    logistic_times(b, one, x, None, true)
}

/// `x * sigmoid(x)`.
pub(crate) fn silu(b: &mut Builder, x: Reg) -> Reg {
    logistic_times(b, x, x, None, false)
}

/// `0.5 x (1 + tanh(u))` with `u = sqrt(2/π) (x + 0.044715 x^3)`, computed
/// as `x * sigmoid(2u)` (the same function, without the cancellation of
/// `1 + tanh` for negative `x`). `2u` is carried as a double word (exact
/// products by `fma`, constants split in two) so the exponential sees it
/// to ~2^-40 relative: the error then stays near that of `sigmoid` even
/// where `|2u|` is large.
pub(crate) fn gelu(b: &mut Builder, x: Reg) -> Reg {
    let ty = b.ty(x);
    let (a_hi, a_lo) = split_const(b, ty, GELU_A);
    let (c_hi, c_lo) = split_const(b, ty, GELU_2C);
    let one = kx(b, ty, 1.0);
    // x^2 = x2 + x2l
    let x2 = b.mul(x, x);
    let nx2 = b.fneg(x2);
    let x2l = b.fma(x, x, nx2);
    // A x^2 = t + tl
    let t = b.mul(a_hi, x2);
    let nt = b.fneg(t);
    let t_err = b.fma(a_hi, x2, nt);
    let t1 = b.mul(a_hi, x2l);
    let t2 = b.fma(a_lo, x2, t1);
    let tl = b.add(t_err, t2);
    // s = 1 + A x^2 = sh + sl (TwoSum of 1 and t, then tl)
    let sh = b.add(one, t);
    let bv = b.sub(sh, one);
    let av = b.sub(sh, bv);
    let e1 = b.sub(one, av);
    let e2 = b.sub(t, bv);
    let sl = b.add(e1, e2);
    let sl = b.add(sl, tl);
    // inner = x s = ih + il
    let ih = b.mul(x, sh);
    let nih = b.fneg(ih);
    let i_err = b.fma(x, sh, nih);
    let il = b.fma(x, sl, i_err);
    // 2u = C (ih + il) = uh + ul
    let uh = b.mul(c_hi, ih);
    let nuh = b.fneg(uh);
    let u_err = b.fma(c_hi, ih, nuh);
    let u1 = b.mul(c_hi, il);
    let u2 = b.fma(c_lo, ih, u1);
    let ul = b.add(u_err, u2);
    // Where |2u| overflows, the low word is inf - inf: drop it.
    let zero = kx(b, ty, 0.0);
    let auh = b.fabs(uh);
    let big = kx(b, ty, 1_267_650_600_228_229_401_496_703_205_376.0); // 2^100
    let sane = b.cmp(CmpOp::Lt, auh, big);
    let ul = b.select(sane, ul, zero);
    logistic_times(b, x, uh, Some(ul), false)
}

/// `v` as an unevaluated sum `hi + lo` of two constants of type `ty`.
fn split_const(b: &mut Builder, ty: Ty, v: f64) -> (Reg, Reg) {
    match ty {
        Ty::F32 => {
            let hi = v as f32;
            let lo = (v - hi as f64) as f32;
            (b.cf(ty, hi as f64), b.cf(ty, lo as f64))
        }
        _ => (b.cf(ty, v), b.cf(ty, 0.0)),
    }
}

/// From this `|x|` on, `tanh(x)` rounds to ±1: in f16 from about 4.505
/// (`1 - tanh(x)` below half an ulp, 2^-12), in bf16 from about 3.47
/// (2^-9). The rational fits hold up to these clamps.
const TANH_F16_CLAMP: f64 = 4.75;
const TANH_BF16_CLAMP: f64 = 3.5;

/// `tanh` for a result rounded to 16 bits at once: `t P(t²)/Q(t²)` with
/// `t = min(|x|, clamp)`, then the sign of `x` (so `tanh(-0) = -0`, and
/// NaN stays NaN). No exponential and one division; the rational is
/// within 2^-24.6 (f16) or 2^-17.3 (bf16) of `tanh` up to the clamp,
/// beyond which the 16-bit result is ±1.
pub(crate) fn tanh_fit(b: &mut Builder, x: Reg, fit: Fit) -> Reg {
    let ty = b.ty(x);
    let (clamp, p, q): (f64, &[f32], &[f32]) = match fit {
        Fit::Bf16 => (TANH_BF16_CLAMP, &TANH_BF16_P, &TANH_BF16_Q),
        _ => (TANH_F16_CLAMP, &TANH_F16_P, &TANH_F16_Q),
    };
    let ax = b.fabs(x);
    let clamp = kx(b, ty, clamp);
    let t = b.fmin(ax, clamp);
    let z = b.mul(t, t);
    let pz = horner(b, z, p, &[]);
    let qz = horner(b, z, q, &[]);
    let n = b.mul(t, pz);
    let y = div_positive(b, n, qz, fit);
    let y = copysign(b, y, x);
    let is_nan = b.is_nan(x);
    b.select(is_nan, x, y)
}

/// `tanh(±0) = ±0`: the series gives `x + (+0)`, which is `+0` for `-0`
/// (kept as it is for the f32 and f64 expansion, whose stated accuracy
/// was measured with that form).
fn keep_zero(b: &mut Builder, x: Reg, y: Reg) -> Reg {
    let ty = b.ty(x);
    let zero = kx(b, ty, 0.0);
    let is_zero = b.cmp(CmpOp::Eq, x, zero);
    b.select(is_zero, x, y)
}

/// `f * sigmoid(u)` for a result rounded to 16 bits at once: one division,
/// `f/(1+e)` for `u >= 0` and `f e/(1+e)` below, `e = exp(-|u|)` (for bf16
/// the power of two of `e` is applied to `f e` last, so results in bf16's
/// subnormal range round into f32 once).
fn logistic_times_fit(b: &mut Builder, f: Reg, u: Reg, fit: Fit) -> Reg {
    let ty = b.ty(u);
    let zero = kx(b, ty, 0.0);
    let pos = b.cmp(CmpOp::Ge, u, zero);
    let au = b.fabs(u);
    let nau = b.fneg(au);
    let (m, s) = exp_scaled(b, nau, None, fit, true);
    let fm = b.mul(f, m);
    let (e, fe) = match s {
        Some(s) => (b.mul(m, s), b.mul(fm, s)),
        None => (m, fm),
    };
    let fe = beyond_floor(b, f, au, fe, fit);
    let one = kx(b, ty, 1.0);
    let d = b.add(one, e);
    let num = b.select(pos, f, fe);
    div_unit_range(b, num, d)
}

/// `sigmoid` for a result rounded to 16 bits at once.
pub(crate) fn sigmoid_fit(b: &mut Builder, x: Reg, fit: Fit) -> Reg {
    let ty = b.ty(x);
    let one = kx(b, ty, 1.0);
    logistic_times_fit(b, one, x, fit)
}

/// `silu` for a result rounded to 16 bits at once.
pub(crate) fn silu_fit(b: &mut Builder, x: Reg, fit: Fit) -> Reg {
    logistic_times_fit(b, x, x, fit)
}

/// `gelu` (tanh form) for a result rounded to 16 bits at once:
/// `x sigmoid(2u)` with `2u = (2 sqrt(2/π) x)(1 + 0.044715 x^2)` in plain
/// f32 (relative error about 2^-22, which `e^{-|2u|}` turns into
/// `|2u| 2^-22`: below 2^-16 where an f16 result is not 0, below 2^-15
/// for bf16).
pub(crate) fn gelu_fit(b: &mut Builder, x: Reg, fit: Fit) -> Reg {
    let ty = b.ty(x);
    let a = k(b, ty, GELU_A as f32, GELU_A);
    let c = k(b, ty, GELU_2C as f32, GELU_2C);
    let one = kx(b, ty, 1.0);
    let x2 = b.mul(x, x);
    let s = b.fma(a, x2, one);
    let cx = b.mul(c, x);
    let u = b.mul(cx, s);
    logistic_times_fit(b, x, u, fit)
}
