//! `exp` and `log`, plus the double-word variants `pow` builds on.

use super::coeffs::{EXP_F32, EXP_F64, LOG_F32, LOG_F64};
use super::{horner, horner_tail, inf, int_of, k, kx, nan, pow2, Fit};
use crate::prim::{Builder, CmpOp, Reg, Round, Ty};

/// `ln 2` split so that `k * LN2_HI` is exact for every reduction count.
const LN2_HI_F32: f32 = f32::from_bits(0x3f31_7200);
const LN2_LO_F32: f32 = f32::from_bits(0x35bf_be8e);
const LN2_HI_F64: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
const LN2_LO_F64: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);
/// The f32 nearest to `ln 2`.
const LN2_F32: f32 = std::f32::consts::LN_2;
const LOG2E_F32: f32 = f32::from_bits(0x3fb8_aa3b);
const LOG2E_F64: f64 = f64::from_bits(0x3ff7_1547_652b_82fe);

/// Where the argument of `exp` is clamped from below. Lower than where
/// `e^x` itself underflows (-104, -746): `silu` and `gelu` multiply `e^x`
/// by up to `|x|` first, and `|x| e^x` only rounds to 0 below about -110
/// (f32) and -752 (f64). `2^n` still splits into two normal factors.
pub(super) const EXP_FLOOR_F32: f64 = 112.0;
/// See [`EXP_FLOOR_F32`].
pub(super) const EXP_FLOOR_F64: f64 = 760.0;
/// The clamp with [`Fit::F16`] (see [`exp_scaled`]).
pub(super) const EXP_FLOOR_F16: f64 = 32.0;

/// `e^x`.
pub(crate) fn exp(b: &mut Builder, x: Reg) -> Reg {
    exp2w(b, x, None)
}

/// `e^x` to the precision `fit` asks for.
pub(crate) fn exp_fit(b: &mut Builder, x: Reg, fit: Fit) -> Reg {
    let (m, s) = exp_scaled(b, x, None, fit, false);
    match s {
        Some(s) => b.mul(m, s),
        None => m,
    }
}

/// `e^(hi + lo)` for a double-word argument (`lo` tiny next to `hi`).
pub(super) fn exp2w(b: &mut Builder, x: Reg, lo: Option<Reg>) -> Reg {
    let (m, s) = exp_scaled(b, x, lo, Fit::Full, false);
    let s = s.expect("full-precision exp scales in two steps");
    b.mul(m, s)
}

/// The Taylor terms `1/n!`, n >= 2, the polynomial of `exp` keeps: up to
/// `1/7!` (f32), `1/13!` (f64); for results rounded to f16 at once up to
/// `1/5!` (truncation below 2^-18.7 relative on |r| <= ln2/2), for bf16
/// up to `1/4!` (below 2^-14.5).
fn exp_terms(fit: Fit) -> usize {
    match fit {
        Fit::Full => EXP_F32.len(),
        Fit::F16 => 4,
        Fit::Bf16 => 3,
    }
}

/// `e^(x + lo)` as `m * s` where `m` is a normal number (or NaN) and `s` a
/// power of two: a caller multiplying `m` by other factors first and by `s`
/// last rounds into the subnormal range only once.
///
/// With [`Fit::F16`] the scale is already applied (`s` is `None`): an
/// f16 result needs no f32 subnormal, so the argument is clamped to
/// [-32, 12], where `2^n` is one normal factor. (-32, not -17.4 where
/// `e^x` leaves f16's range: `silu` and `gelu` multiply `e^x` by up to
/// 65504 before rounding.)
///
/// `nonpositive`: the caller guarantees `x <= 0` (or NaN). Then `s` is
/// the constant `2^-64` (`2^-128` in f64) and `m = e^x 2^64` stays
/// normal, one integer step cheaper than splitting `2^n` in two.
pub(super) fn exp_scaled(
    b: &mut Builder,
    x: Reg,
    lo: Option<Reg>,
    fit: Fit,
    nonpositive: bool,
) -> (Reg, Option<Reg>) {
    let ty = b.ty(x);
    // Beyond these the result is 0 or inf; clamping keeps the reduction
    // count in range (NaN is restored at the end: min/max drop it).
    let (min, max) = match (ty, fit) {
        (Ty::F32, Fit::F16) => (-EXP_FLOOR_F16, 12.0),
        (Ty::F32, _) => (-EXP_FLOOR_F32, 89.0),
        _ => (-EXP_FLOOR_F64, 710.0),
    };
    let lo_clamp = kx(b, ty, min);
    let xc = b.fmax(x, lo_clamp);
    let xc = if nonpositive {
        xc
    } else {
        let hi_clamp = kx(b, ty, max);
        b.fmin(xc, hi_clamp)
    };

    // x = n ln2 + r, |r| <= ln2/2 (a hair more when x*log2e rounds).
    let log2e = k(b, ty, LOG2E_F32, LOG2E_F64);
    let t = b.mul(xc, log2e);
    let n = b.rint(t);
    let neg_n = b.fneg(n);
    let mut r = if fit == Fit::Full {
        let ln2_hi = k(b, ty, LN2_HI_F32, LN2_HI_F64);
        let ln2_lo = k(b, ty, LN2_LO_F32, LN2_LO_F64);
        let r = b.fma(neg_n, ln2_hi, xc);
        b.fma(neg_n, ln2_lo, r)
    } else {
        // One step: |n| <= 162 times the 2^-25.4 error of the nearest f32
        // to ln 2 leaves r within 2^-18 (absolute), a relative error of the
        // result below what the 16-bit rounding can see.
        let ln2 = kx(b, ty, LN2_F32 as f64);
        b.fma(neg_n, ln2, xc)
    };
    if let Some(lo) = lo {
        // A clamped argument is out of range anyway; its low word is not.
        let kept = b.cmp(CmpOp::Eq, xc, x);
        let zero = kx(b, ty, 0.0);
        let lo = b.select(kept, lo, zero);
        r = b.add(r, lo);
    }

    // e^r = 1 + r + r^2/2 + ... ; the last two steps round once each.
    let p = horner_tail(b, r, &EXP_F32, &EXP_F64, exp_terms(fit));
    let one = kx(b, ty, 1.0);
    let p = b.fma(p, r, one);
    let p = b.fma(p, r, one);

    let it = int_of(ty);
    let ni = b.ftoi(n, it);
    let bad = b.is_nan(x);
    if fit == Fit::F16 {
        let s = pow2(b, ty, ni);
        let y = b.mul(p, s);
        return (b.select(bad, x, y), None);
    }
    if nonpositive {
        // n >= -162 (f32) or -1097 (f64): 2^(n + c) is normal.
        let c: i64 = if ty == Ty::F32 { 64 } else { 128 };
        let nc = b.ci(it, c);
        let n1 = b.iadd(ni, nc);
        let s1 = pow2(b, ty, n1);
        let y = b.mul(p, s1);
        let s2 = kx(b, ty, 2f64.powi(-c as i32));
        return (b.select(bad, x, y), Some(s2));
    }
    // p * 2^n in two factors, so 2^n may be subnormal or overflow without
    // a second rounding (p * 2^n1 is exact).
    let n1 = b.shra_c(ni, 1);
    let n2 = b.isub(ni, n1);
    let s1 = pow2(b, ty, n1);
    let s2 = pow2(b, ty, n2);
    let y = b.mul(p, s1);
    (b.select(bad, x, y), Some(s2))
}

/// The exponent `e` (integer register of the float's width) and the
/// significand `m` in `[sqrt(1/2), sqrt(2))` of a positive finite `x`,
/// with `x = m 2^e` (subnormals included).
fn split(b: &mut Builder, x: Reg) -> (Reg, Reg) {
    split_fit(b, x, Fit::Full)
}

/// [`split`]; an f16 value is never an f32 subnormal, so with [`Fit::F16`]
/// the scaling of subnormals is left out.
fn split_fit(b: &mut Builder, x: Reg, fit: Fit) -> (Reg, Reg) {
    let ty = b.ty(x);
    let it = int_of(ty);
    if fit == Fit::F16 {
        return split_normal(b, x, 0x3f35_04f3, 23);
    }
    let (min_normal, scale, scale_exp, off, shift) = match ty {
        Ty::F32 => (
            f32::MIN_POSITIVE as f64,
            16_777_216.0,
            24,
            0x3f35_04f3_i64,
            23,
        ),
        _ => (
            f64::MIN_POSITIVE,
            18_014_398_509_481_984.0,
            54,
            0x3fe6_a09e_667f_3bcd_i64,
            52,
        ),
    };
    let min_normal = kx(b, ty, min_normal);
    let tiny = b.cmp(CmpOp::Lt, x, min_normal);
    let scale = kx(b, ty, scale);
    let scaled = b.mul(x, scale);
    let xs = b.select(tiny, scaled, x);
    let adj = b.ci(it, -scale_exp);
    let zero = b.ci(it, 0);
    let adj = b.select(tiny, adj, zero);

    let (e, m) = split_normal(b, xs, off, shift);
    let e = b.iadd(e, adj);
    (e, m)
}

/// [`split`] of a positive normal `x` from its bits: `off` is the bit
/// pattern of `sqrt(1/2)` and `shift` the significand width, so the
/// exponent of `x / sqrt(1/2)` is read off and taken out of `x`.
fn split_normal(b: &mut Builder, x: Reg, off: i64, shift: i64) -> (Reg, Reg) {
    let it = int_of(b.ty(x));
    let bits = b.bits(x);
    let off = b.ci(it, off);
    let tmp = b.isub(bits, off);
    let e = b.shra_c(tmp, shift);
    let e_shifted = b.shl_c(e, shift);
    let mbits = b.isub(bits, e_shifted);
    (e, b.bits(mbits))
}

/// `log(1 + f)` as `f - (hfsq - s (hfsq + R))` without the exponent part,
/// returning the pieces the callers combine.
struct LogParts {
    f: Reg,
    s: Reg,
    hfsq: Reg,
    r: Reg,
}

/// The terms `2/(2k+1)` of the series of `log` kept: k up to 4 (f32), 9
/// (f64); for results rounded to f16 at once k up to 2 (truncation
/// `2 s z^3/7`, below 2^-18 relative with |s| <= 0.172), for bf16 k = 1
/// (below 2^-12.5).
fn log_terms(fit: Fit) -> usize {
    match fit {
        Fit::Full => LOG_F32.len(),
        Fit::F16 => 2,
        Fit::Bf16 => 1,
    }
}

fn log_parts(b: &mut Builder, m: Reg, fit: Fit) -> LogParts {
    let ty = b.ty(m);
    let one = kx(b, ty, 1.0);
    let two = kx(b, ty, 2.0);
    let half = kx(b, ty, 0.5);
    let f = b.sub(m, one); // exact: m in [0.70, 1.42)
    let den = b.add(two, f);
    let s = b.div(f, den);
    let z = b.mul(s, s);
    let q = horner_tail(b, z, &LOG_F32, &LOG_F64, log_terms(fit));
    let r = b.mul(q, z);
    let hf = b.mul(half, f);
    let hfsq = b.mul(hf, f);
    LogParts { f, s, hfsq, r }
}

/// Natural logarithm.
pub(crate) fn log(b: &mut Builder, x: Reg) -> Reg {
    log_fit(b, x, Fit::Full)
}

/// Natural logarithm to the precision `fit` asks for.
pub(crate) fn log_fit(b: &mut Builder, x: Reg, fit: Fit) -> Reg {
    let ty = b.ty(x);
    let (e, m) = split_fit(b, x, fit);
    let LogParts { f, s, hfsq, r } = log_parts(b, m, fit);
    let dk = b.itof(e, ty, Round::Nearest);
    let ln2_hi = k(b, ty, LN2_HI_F32, LN2_HI_F64);
    let ln2_lo = k(b, ty, LN2_LO_F32, LN2_LO_F64);
    // dk*ln2_hi - ((hfsq - (s*(hfsq+R) + dk*ln2_lo)) - f)
    let elo = b.mul(dk, ln2_lo);
    let hr = b.add(hfsq, r);
    let t = b.fma(s, hr, elo);
    let u = b.sub(hfsq, t);
    let u = b.sub(u, f);
    let neg_u = b.fneg(u);
    let y = b.fma(dk, ln2_hi, neg_u);
    specials(b, x, y)
}

/// `log` at the edges: `log(+inf) = inf`, `log(±0) = -inf`, NaN below 0.
fn specials(b: &mut Builder, x: Reg, y: Reg) -> Reg {
    let ty = b.ty(x);
    let pinf = inf(b, ty);
    let is_inf = b.cmp(CmpOp::Eq, x, pinf);
    let y = b.select(is_inf, pinf, y);
    let zero = kx(b, ty, 0.0);
    let is_zero = b.cmp(CmpOp::Eq, x, zero);
    let ninf = kx(b, ty, f64::NEG_INFINITY);
    let y = b.select(is_zero, ninf, y);
    let neg = b.cmp(CmpOp::Lt, x, zero);
    let nan_in = b.is_nan(x);
    let bad = b.or(neg, nan_in);
    let q = nan(b, ty);
    b.select(bad, q, y)
}

/// `log(x)` of a positive `f64` as a double word `hi + lo`, accurate to
/// about 2^-62 relative; `x = 0` gives `(-inf, 0)` and `x = inf` gives
/// `(inf, 0)`.
pub(super) fn log2w(b: &mut Builder, x: Reg) -> (Reg, Reg) {
    debug_assert_eq!(b.ty(x), Ty::F64);
    let ty = Ty::F64;
    let (e, m) = split(b, x);
    let one = kx(b, ty, 1.0);
    let two = kx(b, ty, 2.0);
    let f = b.sub(m, one);
    // d = m + 1 exactly as dh + dl (TwoSum).
    let dh = b.add(m, one);
    let bb = b.sub(dh, m);
    let t1 = b.sub(dh, bb);
    let t1 = b.sub(m, t1);
    let t2 = b.sub(one, bb);
    let dl = b.add(t1, t2);
    // s = f / d as sh + sl.
    let sh = b.div(f, dh);
    let neg_sh = b.fneg(sh);
    let rem = b.fma(neg_sh, dh, f); // exact remainder of the division
    let rem = b.fma(neg_sh, dl, rem);
    let sl = b.div(rem, dh);
    // log(m) = 2 s + s R(s^2), R only needs working precision.
    let z = b.mul(sh, sh);
    let q = horner(b, z, &LOG_F32, &LOG_F64);
    let r = b.mul(q, z);
    let tail = b.mul(sh, r);
    let dk = b.itof(e, ty, Round::Nearest);
    let ln2_hi = kx(b, ty, LN2_HI_F64);
    let ln2_lo = kx(b, ty, LN2_LO_F64);
    let ehi = b.mul(dk, ln2_hi); // exact: 32-bit constant, 11-bit integer
    let elo = b.mul(dk, ln2_lo);
    let two_sh = b.mul(two, sh);
    // (ah, al) = ehi + 2 sh exactly.
    let ah = b.add(ehi, two_sh);
    let bv = b.sub(ah, ehi);
    let av = b.sub(ah, bv);
    let e1 = b.sub(ehi, av);
    let e2 = b.sub(two_sh, bv);
    let al = b.add(e1, e2);
    let two_sl = b.mul(two, sl);
    let lo = b.add(two_sl, tail);
    let lo = b.add(lo, elo);
    let lo = b.add(lo, al);
    // Renormalise (|ah| >= |lo|).
    let hi = b.add(ah, lo);
    let d = b.sub(hi, ah);
    let lo = b.sub(lo, d);

    let hi = specials(b, x, hi);
    let zero = kx(b, ty, 0.0);
    let pinf = inf(b, ty);
    let is_inf = b.cmp(CmpOp::Eq, x, pinf);
    let is_zero = b.cmp(CmpOp::Eq, x, zero);
    let edge = b.or(is_inf, is_zero);
    let lo = b.select(edge, zero, lo);
    (hi, lo)
}
