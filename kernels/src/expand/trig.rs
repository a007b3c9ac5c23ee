//! `sin` and `cos`: reduction to `r` in [-π/4, π/4] and a quadrant, then
//! the sine or cosine polynomial.

use super::coeffs::{COS_F32, COS_F64, SIN_F32, SIN_F64};
use super::{horner, inf, int_of, k, kx, nan};
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

/// `sin(x + shift·π/2)`.
fn sincos(b: &mut Builder, x: Reg, shift: i64) -> Reg {
    let ty = b.ty(x);
    let (r, q) = reduce(b, x);
    let z = b.mul(r, r);
    // sin r = r + r z S(z); cos r = 1 + z C(z)
    let ps = horner(b, z, &SIN_F32, &SIN_F64);
    let rz = b.mul(r, z);
    let sin_r = b.fma(rz, ps, r);
    let pc = horner(b, z, &COS_F32, &COS_F64);
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
    if ty == Ty::F64 {
        return (r, q);
    }
    let (r2, q2) = payne_hanek_f32(b, x);
    let ax = b.fabs(x);
    let limit = kx(b, ty, CODY_WAITE_LIMIT_F32 as f64);
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
    // Odd symmetry: the computation used |x|.
    let fzero = b.cf(Ty::F32, 0.0);
    let neg = b.cmp(CmpOp::Lt, x, fzero);
    let neg_r = b.fneg(r);
    let r = b.select(neg, neg_r, r);
    let neg_q = b.ineg(q);
    let q = b.select(neg, neg_q, q);
    (r, q)
}
