//! `sin` and `cos`: reduction to `r` in [-π/4, π/4] and a quadrant, then
//! the sine or cosine polynomial.

use super::coeffs::{COS_F32, COS_F64, SIN_F32, SIN_F64};
use super::{horner_tail, inf, int_of, k, kx, nan, Fit};
use crate::prim::{Builder, CmpOp, Reg, Round, Ty};

const TWO_OVER_PI_F32: f32 = f32::from_bits(0x3f22_f983);
const TWO_OVER_PI_F64: f64 = f64::from_bits(0x3fe4_5f30_6dc9_c883);
/// π/2 as a sum of three values, each the nearest to what the previous
/// ones leave (with `fma` every product `n * P_i` is exact).
pub(super) const PIO2_F32: [f32; 3] = [
    f32::from_bits(0x3fc9_0fda),
    f32::from_bits(0x33a2_2168),
    f32::from_bits(0x27c2_34c5),
];
pub(super) const PIO2_F64: [f64; 3] = [
    f64::from_bits(0x3ff9_21fb_5444_2d18),
    f64::from_bits(0x3c91_a626_3314_5c06),
    f64::from_bits(0x394c_1cd1_2902_4e09),
];

/// Above this, the f32 reduction switches to the exact integer one.
pub(crate) const CODY_WAITE_LIMIT_F32: f32 = 131_072.0;
/// Above this (2^30), the f64 reduction switches to the exact integer one.
pub(crate) const CODY_WAITE_LIMIT_F64: f64 = 1_073_741_824.0;

/// The first 1280 bits of 2/π after the binary point, in 64-bit words
/// (enough for every f64: the exponent selects a window of them).
const TWO_OVER_PI_WORDS: [u64; 20] = [
    0xa2f9_836e_4e44_1529,
    0xfc27_57d1_f534_ddc0,
    0xdb62_9599_3c43_9041,
    0xfe51_63ab_debb_c561,
    0xb724_6e3a_424d_d2e0,
    0x0649_2eea_09d1_921c,
    0xfe1d_eb1c_b129_a73e,
    0xe882_35f5_2ebb_4484,
    0xe99c_7026_b45f_7e41,
    0x3991_d639_8353_39f4,
    0x9c84_5f8b_bdf9_283b,
    0x1ff8_97ff_de05_980f,
    0xef2f_118b_5a0a_6d1f,
    0x6d36_7ecf_27cb_09b7,
    0x4f46_3f66_9e5f_ea2d,
    0x7527_bac7_ebe5_f17b,
    0x3d07_39f7_8a52_92ea,
    0x6bfb_5fb1_1f8d_5d08,
    0x5603_3046_fc7b_6bab,
    0xf0cf_bc20_9af4_361d,
];

/// The first 224 bits of 2/π after the binary point, in 32-bit words.
pub(super) const TWO_OVER_PI_BITS: [u32; 7] = [
    0xa2f9_836e,
    0x4e44_1529,
    0xfc27_57d1,
    0xf534_ddc0,
    0xdb62_9599,
    0x3c43_9041,
    0xfe51_63ab,
];
/// π/2 · 2^-62 split in two f32 (the weight of one unit of the fixed-point
/// remainder).
const PIO2_2M62_HI: f32 = f32::from_bits(0x20c9_0fdb);
const PIO2_2M62_LO: f32 = f32::from_bits(0x943b_bd2e);

/// `sin(x)`.
pub(crate) fn sin(b: &mut Builder, x: Reg) -> Reg {
    let y = sincos(b, x, 0);
    // sin(-0) = -0 (the reduction loses the sign of zero).
    let ty = b.ty(x);
    let zero = kx(b, ty, 0.0);
    let is_zero = b.cmp(CmpOp::Eq, x, zero);
    b.select(is_zero, x, y)
}

/// `cos(x)`.
pub(crate) fn cos(b: &mut Builder, x: Reg) -> Reg {
    sincos(b, x, 1)
}

/// `sin(x)` for a result rounded to 16 bits at once.
pub(crate) fn sin_fit(b: &mut Builder, x: Reg, fit: Fit) -> Reg {
    let y = sincos_fit(b, x, 0, fit);
    let ty = b.ty(x);
    let zero = kx(b, ty, 0.0);
    let is_zero = b.cmp(CmpOp::Eq, x, zero);
    b.select(is_zero, x, y)
}

/// `cos(x)` for a result rounded to 16 bits at once.
pub(crate) fn cos_fit(b: &mut Builder, x: Reg, fit: Fit) -> Reg {
    sincos_fit(b, x, 1, fit)
}

/// Taylor terms kept, `(sin, cos)`: for f32 up to `r^9` and `r^10`; for
/// results rounded to f16 at once up to `r^7` and `r^6` (truncation below
/// 2^-21 and 2^-17.6 relative on |r| <= π/4), for bf16 up to `r^5` and
/// `r^6` (below 2^-14.3 and 2^-17.6).
fn sincos_terms(fit: Fit) -> (usize, usize) {
    match fit {
        Fit::Full => (SIN_F32.len(), COS_F32.len()),
        Fit::F16 => (3, 3),
        Fit::Bf16 => (2, 3),
    }
}

/// `sin(x + shift·π/2)`.
fn sincos(b: &mut Builder, x: Reg, shift: i64) -> Reg {
    sincos_fit(b, x, shift, Fit::Full)
}

/// `sin(x + shift·π/2)` to the precision `fit` asks for. f16 arguments
/// stay below 2^16, inside the range of the three-part reduction, so the
/// large-argument one is left out for them.
fn sincos_fit(b: &mut Builder, x: Reg, shift: i64, fit: Fit) -> Reg {
    let ty = b.ty(x);
    let (r, q) = if fit == Fit::F16 {
        cody_waite(b, x)
    } else {
        reduce(b, x)
    };
    let (ns, nc) = sincos_terms(fit);
    let z = b.mul(r, r);
    // sin r = r + r z S(z); cos r = 1 + z C(z)
    let ps = horner_tail(b, z, &SIN_F32, &SIN_F64, ns);
    let rz = b.mul(r, z);
    let sin_r = b.fma(rz, ps, r);
    let pc = horner_tail(b, z, &COS_F32, &COS_F64, nc);
    let one = kx(b, ty, 1.0);
    let cos_r = b.fma(z, pc, one);

    let shift = b.ci(Ty::I32, shift);
    let n = b.iadd(q, shift);
    let one_i = b.ci(Ty::I32, 1);
    let two_i = b.ci(Ty::I32, 2);
    let zero_i = b.ci(Ty::I32, 0);
    let odd = b.and(n, one_i);
    let swap = b.cmp(CmpOp::Ne, odd, zero_i);
    let v = b.select(swap, cos_r, sin_r);
    let hi = b.and(n, two_i);
    let flip = b.cmp(CmpOp::Ne, hi, zero_i);
    let neg_v = b.fneg(v);
    let v = b.select(flip, neg_v, v);
    // sin/cos of ±inf is NaN (NaN propagates on its own).
    let ax = b.fabs(x);
    let pinf = inf(b, ty);
    let is_inf = b.cmp(CmpOp::Eq, ax, pinf);
    let q = nan(b, ty);
    b.select(is_inf, q, v)
}

/// `x = q·π/2 + r` with `|r| <= π/4` (about); `q` as an `i32` (only its
/// two low bits matter).
fn reduce(b: &mut Builder, x: Reg) -> (Reg, Reg) {
    let ty = b.ty(x);
    let (r, q) = cody_waite(b, x);
    let (r2, q2, limit) = if ty == Ty::F64 {
        let (r2, q2) = payne_hanek_f64(b, x);
        (r2, q2, CODY_WAITE_LIMIT_F64)
    } else {
        let (r2, q2) = payne_hanek_f32(b, x);
        (r2, q2, CODY_WAITE_LIMIT_F32 as f64)
    };
    let ax = b.fabs(x);
    let limit = kx(b, ty, limit);
    let big = b.cmp(CmpOp::Gt, ax, limit);
    let r = b.select_rare(big, r2, r);
    let q = b.select_rare(big, q2, q);
    (r, q)
}

/// The reduction by a three-part π/2, accurate while `n·π/2` needs no more
/// bits than the parts provide.
pub(super) fn cody_waite(b: &mut Builder, x: Reg) -> (Reg, Reg) {
    let ty = b.ty(x);
    let it = int_of(ty);
    let two_over_pi = k(b, ty, TWO_OVER_PI_F32, TWO_OVER_PI_F64);
    let t = b.mul(x, two_over_pi);
    let n = b.rint(t);
    let neg_n = b.fneg(n);
    let mut r = x;
    for i in 0..3 {
        let p = k(b, ty, PIO2_F32[i], PIO2_F64[i]);
        r = b.fma(neg_n, p, r);
    }
    let q = b.ftoi(n, it);
    let q = b.icvt(q, Ty::I32);
    (r, q)
}

/// Exact reduction of a finite f32 of any size: `|x|·2/π mod 4` as a
/// 2.62 fixed-point number, from the 24-bit significand times 224 bits of
/// 2/π (64-bit integer products, wrapping sums: the wrap is the `mod 4`).
/// Returns `r` (f32) and the quadrant.
pub(super) fn payne_hanek_f32(b: &mut Builder, x: Reg) -> (Reg, Reg) {
    let bits = b.bits(x);
    let mant_mask = b.ci(Ty::I32, 0x007f_ffff);
    let implicit = b.ci(Ty::I32, 0x0080_0000);
    let frac = b.and(bits, mant_mask);
    let m = b.or(frac, implicit);
    let m = b.icvt(m, Ty::I64);
    let ebits = b.shrl_c(bits, 23);
    let emask = b.ci(Ty::I32, 0xff);
    let ebits = b.and(ebits, emask);
    // |x| = m · 2^(ebits - 150); word i of 2/π weighs 2^(-32(i+1)); the
    // product lands at bit (ebits - 150) + 62 - 32(i+1) of the fixed point.
    let zero = b.ci(Ty::I32, 0);
    let mut acc = b.ci(Ty::I64, 0);
    for (i, &w) in TWO_OVER_PI_BITS.iter().enumerate() {
        let w = b.ci(Ty::I64, w as i64);
        let p = b.imul(m, w); // < 2^56
        let off = b.ci(Ty::I32, -150 + 62 - 32 * (i as i64 + 1));
        let s = b.iadd(ebits, off);
        let left = b.imax(s, zero);
        let neg_s = b.ineg(s);
        let right = b.imax(neg_s, zero);
        let term = b.shl(p, left);
        let term = b.shrl(term, right);
        acc = b.iadd(acc, term);
    }
    // Round to the nearest quadrant: q = top two bits of acc + 1/2 quadrant,
    // remainder in [-2^61, 2^61).
    let half_q = b.ci(Ty::I64, 1 << 61);
    let acc = b.iadd(acc, half_q);
    let q = b.shrl_c(acc, 62);
    let q = b.icvt(q, Ty::I32);
    let low_mask = b.ci(Ty::I64, (1 << 62) - 1);
    let rem = b.and(acc, low_mask);
    let rem = b.isub(rem, half_q);
    // rem as an exact f32 pair, times π/2·2^-62.
    let a = b.itof(rem, Ty::F32, Round::Nearest);
    let a_int = b.ftoi(a, Ty::I64);
    let d = b.isub(rem, a_int);
    let d = b.itof(d, Ty::F32, Round::Nearest);
    let khi = b.cf(Ty::F32, PIO2_2M62_HI as f64);
    let klo = b.cf(Ty::F32, PIO2_2M62_LO as f64);
    let dk = b.mul(d, khi);
    let t = b.fma(a, klo, dk);
    let r = b.fma(a, khi, t);
    odd_symmetry(b, x, Ty::F32, r, q)
}

/// The reduction of `x` from that of `|x|`: the remainder and the
/// quadrant count change sign with `x` (odd symmetry).
fn odd_symmetry(b: &mut Builder, x: Reg, ty: Ty, r: Reg, q: Reg) -> (Reg, Reg) {
    let fzero = b.cf(ty, 0.0);
    let neg = b.cmp(CmpOp::Lt, x, fzero);
    let neg_r = b.fneg(r);
    let r = b.select(neg, neg_r, r);
    let neg_q = b.ineg(q);
    let q = b.select(neg, neg_q, q);
    (r, q)
}

/// `(hi:lo) << s` for `s >= 0`, `>> -s` for `s < 0`, as a 128-bit value
/// (bits shifted out are dropped). PTX clamps shift amounts to the width,
/// which zeroes the parts that do not apply.
fn shift128(b: &mut Builder, hi: Reg, lo: Reg, s: Reg) -> (Reg, Reg) {
    let zero = b.ci(Ty::I32, 0);
    let c64 = b.ci(Ty::I32, 64);
    let l = b.imax(s, zero);
    let ns = b.ineg(s);
    let r = b.imax(ns, zero);
    // left by l
    let l_64 = b.isub(c64, l);
    let l_m64 = b.isub(l, c64);
    let h1 = b.shl(hi, l);
    let h2 = b.shrl(lo, l_64);
    let h3 = b.shl(lo, l_m64);
    let h = b.or(h1, h2);
    let hi = b.or(h, h3);
    let lo = b.shl(lo, l);
    // right by r
    let r_64 = b.isub(c64, r);
    let r_m64 = b.isub(r, c64);
    let l1 = b.shrl(lo, r);
    let l2 = b.shl(hi, r_64);
    let l3 = b.shrl(hi, r_m64);
    let lo2 = b.or(l1, l2);
    let lo2 = b.or(lo2, l3);
    let hi2 = b.shrl(hi, r);
    (hi2, lo2)
}

/// `(ah:al) + (bh:bl)` modulo 2^128.
fn add128(b: &mut Builder, ah: Reg, al: Reg, bh: Reg, bl: Reg) -> (Reg, Reg) {
    let lo = b.iadd(al, bl);
    // carry out of the low word: top bit of (a & b) | ((a | b) & !sum)
    let both = b.and(al, bl);
    let either = b.or(al, bl);
    let nlo = b.not(lo);
    let t = b.and(either, nlo);
    let t = b.or(both, t);
    let carry = b.shrl_c(t, 63);
    let hi = b.iadd(ah, bh);
    let hi = b.iadd(hi, carry);
    (hi, lo)
}

/// Exact reduction of a finite f64 of any size: `|x|·2/π mod 4` as a
/// 2.126 fixed-point number (two 64-bit words), from the 53-bit
/// significand times 1280 bits of 2/π. Returns `r` and the quadrant.
pub(super) fn payne_hanek_f64(b: &mut Builder, x: Reg) -> (Reg, Reg) {
    let bits = b.bits(x);
    let mant_mask = b.ci(Ty::I64, (1 << 52) - 1);
    let implicit = b.ci(Ty::I64, 1 << 52);
    let frac = b.and(bits, mant_mask);
    let m = b.or(frac, implicit);
    let e = b.shrl_c(bits, 52);
    let emask = b.ci(Ty::I64, 0x7ff);
    let e = b.and(e, emask);
    let e = b.icvt(e, Ty::I32);
    // |x| = m 2^(e - 1075); word j weighs 2^(-64(j+1)); the product lands
    // at bit (e - 1075) - 64(j+1) + 126 of the fixed point.
    let mut acc_hi = b.ci(Ty::I64, 0);
    let mut acc_lo = b.ci(Ty::I64, 0);
    for (j, &w) in TWO_OVER_PI_WORDS.iter().enumerate() {
        let w = b.ci(Ty::I64, w as i64);
        let ph = b.mulhi_u(m, w);
        let pl = b.imul(m, w);
        let off = b.ci(Ty::I32, -1075 + 126 - 64 * (j as i64 + 1));
        let s = b.iadd(e, off);
        let (th, tl) = shift128(b, ph, pl, s);
        let (h, l) = add128(b, acc_hi, acc_lo, th, tl);
        acc_hi = h;
        acc_lo = l;
    }
    // Nearest quadrant: add half a quadrant (2^125), q = top two bits,
    // remainder (hi & (2^62 - 1)) - 2^61 : lo, signed.
    let half_q = b.ci(Ty::I64, 1 << 61);
    let hi = b.iadd(acc_hi, half_q);
    let q = b.shrl_c(hi, 62);
    let q = b.icvt(q, Ty::I32);
    let low_mask = b.ci(Ty::I64, (1 << 62) - 1);
    let hi = b.and(hi, low_mask);
    let hi = b.isub(hi, half_q);
    let lo = acc_lo;
    // |f| as a 128-bit magnitude (mh:ml), so the conversion below adds
    // only terms of one sign (no cancellation when f is tiny).
    let izero = b.ci(Ty::I64, 0);
    let ione = b.ci(Ty::I64, 1);
    let f_neg = b.cmp(CmpOp::Lt, hi, izero);
    let nlo = b.ineg(lo);
    let lo_zero = b.cmp(CmpOp::Eq, lo, izero);
    let nhi = b.not(hi);
    let nhi1 = b.iadd(nhi, ione);
    let nhi = b.select(lo_zero, nhi1, nhi);
    let mh = b.select(f_neg, nhi, hi);
    let ml = b.select(f_neg, nlo, lo);
    // |f| = mh 2^64 + ml as fh + fl, then |r| = |f| 2^-126 π/2.
    let a = b.itof(mh, Ty::F64, Round::Nearest);
    let a_int = b.ftoi(a, Ty::I64);
    let d = b.isub(mh, a_int);
    let d = b.itof(d, Ty::F64, Round::Nearest);
    let lo53 = b.shrl_c(ml, 11);
    let l = b.itof(lo53, Ty::F64, Round::Nearest);
    let two64 = b.cf(Ty::F64, 18_446_744_073_709_551_616.0);
    let two11 = b.cf(Ty::F64, 2048.0);
    let fh = b.mul(a, two64);
    let dl = b.mul(d, two64);
    let fl = b.fma(l, two11, dl);
    let scale = b.cf(Ty::F64, 2f64.powi(-126));
    let fh = b.mul(fh, scale);
    let fl = b.mul(fl, scale);
    let c_hi = b.cf(Ty::F64, PIO2_F64[0]);
    let c_lo = b.cf(Ty::F64, PIO2_F64[1]);
    let rh = b.mul(fh, c_hi);
    let nrh = b.fneg(rh);
    let err = b.fma(fh, c_hi, nrh);
    let t = b.fma(fh, c_lo, err);
    let t = b.fma(fl, c_hi, t);
    let r = b.add(rh, t);
    let neg_r = b.fneg(r);
    let r = b.select(f_neg, neg_r, r);
    odd_symmetry(b, x, Ty::F64, r, q)
}
