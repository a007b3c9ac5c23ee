//! `tanh`, `sigmoid`, `silu` and `gelu`, all built on [`exp`](super::exp).

use super::coeffs::{TANH_F32, TANH_F64};
use super::exp_log::exp_scaled;
use super::{copysign, exp, horner, k, kx};
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
    // large
    let two = kx(b, ty, 2.0);
    let one = kx(b, ty, 1.0);
    let two_ax = b.mul(two, ax);
    let e = exp(b, two_ax);
    let d = b.add(e, one);
    let q = b.div(two, d);
    let large = b.sub(one, q);
    let large = copysign(b, large, x);
    let limit = k(b, ty, TANH_SERIES_LIMIT as f32, TANH_SERIES_LIMIT);
    let is_small = b.cmp(CmpOp::Lt, ax, limit);
    b.select(is_small, small, large)
}

/// The logistic function `1/(1 + e^-u)` times `f`, for `u = uh + ul`:
/// `f/(1+e)` when `u >= 0`, `f e/(1+e)` otherwise, with `e = exp(-|u|)`
/// (no overflow, no cancellation; the power of two of `e` applied last so
/// tiny results round once).
fn logistic_times(b: &mut Builder, f: Reg, uh: Reg, ul: Option<Reg>) -> Reg {
    let ty = b.ty(uh);
    let zero = kx(b, ty, 0.0);
    let pos = b.cmp(CmpOp::Ge, uh, zero);
    let auh = b.fabs(uh);
    let nauh = b.fneg(auh);
    let lo = ul.map(|ul| {
        let nul = b.fneg(ul);
        b.select(pos, nul, ul)
    });
    let (m, s) = exp_scaled(b, nauh, lo);
    let e = b.mul(m, s);
    let one = kx(b, ty, 1.0);
    let d = b.add(one, e);
    let p = b.div(f, d);
    let fm = b.mul(f, m);
    let q = b.div(fm, d);
    let n = b.mul(q, s);
    b.select(pos, p, n)
}

/// `1 / (1 + e^-x)`.
pub(crate) fn sigmoid(b: &mut Builder, x: Reg) -> Reg {
    let ty = b.ty(x);
    let one = kx(b, ty, 1.0);
    logistic_times(b, one, x, None)
}

/// `x * sigmoid(x)`.
pub(crate) fn silu(b: &mut Builder, x: Reg) -> Reg {
    logistic_times(b, x, x, None)
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
    logistic_times(b, x, uh, Some(ul))
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
