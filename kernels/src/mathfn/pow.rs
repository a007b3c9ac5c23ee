//! `pow(x, y)` with the C99 / IEEE special cases (those of Rust's `powf`).

use super::exp_log::{exp2w, log2w};
use super::{inf, kx, nan};
use crate::prim::{Builder, CmpOp, Reg, Round, Ty};

/// `x^y`. The core is `exp(y log|x|)` in `f64` with `log` as a double word,
/// so the product keeps ~62 bits whatever the size of `y log|x|`; `f32`
/// converts in and out (one final rounding).
pub(crate) fn pow(b: &mut Builder, x: Reg, y: Reg) -> Reg {
    let ty = b.ty(x);
    let (xd, yd) = match ty {
        Ty::F32 => (
            b.fcvt(x, Ty::F64, Round::Nearest),
            b.fcvt(y, Ty::F64, Round::Nearest),
        ),
        _ => (x, y),
    };
    let ax = b.fabs(xd);
    let (lh, ll) = log2w(b, ax);
    // t = y * (lh + ll) as th + tl
    let th = b.mul(yd, lh);
    let nth = b.fneg(th);
    let err = b.fma(yd, lh, nth);
    let tl = b.fma(yd, ll, err);
    // Far outside exp's range the low word is meaningless (inf - inf).
    let tth = th;
    let ath = b.fabs(tth);
    let big = kx(b, Ty::F64, 1.0e300);
    let sane = b.cmp(CmpOp::Lt, ath, big);
    let zero64 = kx(b, Ty::F64, 0.0);
    let tl = b.select(sane, tl, zero64);
    let core = exp2w(b, th, Some(tl));
    let core = match ty {
        Ty::F32 => b.fcvt(core, Ty::F32, Round::Nearest),
        _ => core,
    };

    // Sign and domain.
    let zero = kx(b, ty, 0.0);
    let one = kx(b, ty, 1.0);
    let half = kx(b, ty, 0.5);
    let ty_trunc = b.trunc(y);
    let y_int = b.cmp(CmpOp::Eq, y, ty_trunc);
    let hy = b.mul(y, half);
    let hy_trunc = b.trunc(hy);
    let hy_frac = b.cmp(CmpOp::Ne, hy, hy_trunc);
    let y_odd = b.and(y_int, hy_frac);
    let xbits = b.bits(x);
    let izero = match ty {
        Ty::F32 => b.ci(Ty::I32, 0),
        _ => b.ci(Ty::I64, 0),
    };
    let x_signed = b.cmp(CmpOp::Lt, xbits, izero);
    let flip = b.and(x_signed, y_odd);
    let neg_core = b.fneg(core);
    let r = b.select(flip, neg_core, core);
    // negative finite base, non-integral exponent: NaN
    let x_neg = b.cmp(CmpOp::Lt, x, zero);
    let ninf = kx(b, ty, f64::NEG_INFINITY);
    let x_fin = b.cmp(CmpOp::Gt, x, ninf);
    let y_frac = b.not(y_int);
    let bad = b.and(x_neg, x_fin);
    let bad = b.and(bad, y_frac);
    let q = nan(b, ty);
    let r = b.select(bad, q, r);
    // pow(x, ±0) = 1, pow(1, y) = 1, pow(-1, ±inf) = 1 (even for NaN).
    let y_zero = b.cmp(CmpOp::Eq, y, zero);
    let r = b.select(y_zero, one, r);
    let x_one = b.cmp(CmpOp::Eq, x, one);
    let r = b.select(x_one, one, r);
    let mone = kx(b, ty, -1.0);
    let x_mone = b.cmp(CmpOp::Eq, x, mone);
    let ay = b.fabs(y);
    let pinf = inf(b, ty);
    let y_inf = b.cmp(CmpOp::Eq, ay, pinf);
    let unit = b.and(x_mone, y_inf);
    b.select(unit, one, r)
}
