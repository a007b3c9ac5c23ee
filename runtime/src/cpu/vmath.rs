//! `f32` transcendental functions written so that a loop over a slice
//! vectorises: no branches on the data (both sides of a choice are computed
//! and one is selected), no calls into the C maths library on the common
//! path, range reduction by Cody–Waite. `std`'s `f32::sin` and friends call
//! the C library once per element, which the compiler cannot vectorise.
//!
//! Every function returns what `std` returns for NaN, ±0, ±inf, subnormal
//! inputs and results, and overflow. Errors against `f64` `std` (the
//! `libm` crate for `erf` and `erfc`), the
//! largest seen over 2 million random inputs per range (uniform and
//! log-uniform, in every range the function treats differently) plus the
//! special values, as the tests measure them (release build); the tests
//! fail above the bound:
//!
//! | function | largest error seen | bound tested |
//! | --- | --- | --- |
//! | [`exp`] | 0.98 ulp | 1 ulp |
//! | [`ln`] | 0.80 ulp | 1 ulp |
//! | [`sin`], [`cos`] | 0.62 ulp, any finite argument | 1 ulp |
//! | [`tanh`] | 1.31 ulp | 2 ulp |
//! | [`expm1`] | 0.50 ulp | 1 ulp |
//! | [`log1p`] | 0.50 ulp | 1 ulp |
//! | [`erf`] | 0.50 ulp | 1 ulp |
//! | [`erfc`] | 0.50 ulp, down to the subnormals | 1 ulp |
//! | [`gelu_erf`] | 0.50 ulp | 1 ulp |
//!
//! The results do not depend on the vector width, so the scalar, AVX2
//! and AVX-512 versions of a loop agree bit for bit: multiply-adds are
//! either written as two roundings or as [`f64::mul_add`], which is always
//! fused (one FMA instruction where the CPU has it, as both vector
//! versions do; the C library's `fma` otherwise). Sine and cosine use
//! fused ones: their `f64` polynomials take half the instructions that
//! way. `exp` keeps separate roundings, which hold its error under 1 ulp
//! on every `f32` input; fused ones reach 1.01 ulp.
//!
//! [`expm1`], [`log1p`], [`erf`] and [`erfc`] compute in `f64` (half the
//! lanes of a vector of `f32`) and round once, which is why they stay near
//! half an ulp.
//!
//! `sigmoid`, `silu` and `gelu` are built from [`exp`] by callers, as on the
//! GPU.

/// `c ? a : b` on values, which the compiler turns into a vector blend.
#[inline(always)]
fn select(c: bool, a: f32, b: f32) -> f32 {
    if c {
        a
    } else {
        b
    }
}

/// `f64` version of [`select`].
#[inline(always)]
fn select64(c: bool, a: f64, b: f64) -> f64 {
    if c {
        a
    } else {
        b
    }
}

/// `2^n` for `-126 <= n <= 127`, built from its bits.
#[inline(always)]
fn pow2i(n: i32) -> f32 {
    f32::from_bits(((n + 127) as u32) << 23)
}

/// 1.5 * 2^23: adding and subtracting it rounds an `f32` of magnitude
/// below 2^22 to the nearest integer (ties to even), in two instructions.
const ROUND_F32: f32 = 12_582_912.0;
/// 1.5 * 2^52, [`ROUND_F32`] for `f64`.
const ROUND_F64: f64 = 6_755_399_441_055_744.0;

/// `e^x`, within 1 ulp.
///
/// ```
/// use tensorfn_runtime::__private::vmath;
/// assert_eq!(vmath::exp(0.0), 1.0);
/// assert!((vmath::exp(1.0) - std::f32::consts::E).abs() <= f32::EPSILON * 3.0);
/// assert_eq!(vmath::exp(-200.0), 0.0);
/// assert_eq!(vmath::exp(100.0), f32::INFINITY);
/// ```
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    // Beyond these the result is 0 or inf whatever the reduction; clamping
    // keeps the exponent arithmetic in range. NaN fails both tests and
    // passes through.
    let xc = select(x > 89.0, 89.0, x);
    let xc = select(xc < -104.0, -104.0, xc);
    // n = round(x / ln 2), x = n ln 2 + r with |r| <= ln(2)/2; ln 2 in two
    // parts (the first with 9 significant bits) so n * LN2_HI is exact.
    let t = xc * std::f32::consts::LOG2_E + ROUND_F32;
    let n = (t.to_bits() as i32).wrapping_sub(ROUND_F32.to_bits() as i32);
    let nf = t - ROUND_F32;
    let r = (xc - nf * 0.693_359_4) - nf * (-2.121_944_4e-4);
    // Cephes' minimax polynomial for e^r - 1 - r on that interval.
    let z = r * r;
    let p = ((((1.987_569_1e-4 * r + 1.398_2e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 1.666_666_5e-1)
        * r
        + 0.5;
    let y = p * z + r + 1.0;
    // Scale by 2^n in two steps: n reaches -150 (subnormal results) and
    // 128 (overflow to inf), outside what one exponent field holds.
    let n1 = n >> 1;
    let y = y * pow2i(n1) * pow2i(n - n1);
    select(x.is_nan(), x, y)
}

/// Natural logarithm, within 1 ulp; NaN below zero, `-inf` at ±0.
///
/// ```
/// use tensorfn_runtime::__private::vmath;
/// assert_eq!(vmath::ln(1.0), 0.0);
/// assert!((vmath::ln(std::f32::consts::E) - 1.0).abs() <= f32::EPSILON);
/// assert_eq!(vmath::ln(0.0), f32::NEG_INFINITY);
/// assert!(vmath::ln(-1.0).is_nan());
/// ```
#[inline(always)]
pub fn ln(x: f32) -> f32 {
    // Subnormals: scale into the normal range first.
    let sub = x < f32::MIN_POSITIVE;
    let xs = select(sub, x * 8_388_608.0, x);
    let bits = xs.to_bits() as i32;
    // x = m 2^e with m in [sqrt(1/2), sqrt(2)).
    let e = (bits >> 23) - 126 - (sub as i32) * 23;
    let m = f32::from_bits(((bits & 0x007f_ffff) | 0x3f00_0000) as u32); // [0.5, 1)
    let small = m < std::f32::consts::FRAC_1_SQRT_2;
    let e = e - small as i32;
    let f = select(small, m + m, m) - 1.0;
    let fe = e as f32;
    // Cephes' minimax polynomial for ln(1 + f) - f + f^2/2.
    let z = f * f;
    let p = (((((((7.037_683_6e-2 * f - 1.151_461e-1) * f + 1.167_699_9e-1) * f
        - 1.242_014_1e-1)
        * f
        + 1.424_932_3e-1)
        * f
        - 1.666_805_8e-1)
        * f
        + 2.000_071_4e-1)
        * f
        - 2.499_999_4e-1)
        * f
        + 3.333_333e-1;
    let y = p * f * z + fe * (-2.121_944_4e-4) - 0.5 * z;
    let y = (f + y) + fe * 0.693_359_4;
    // Specials: ln(+inf) = inf, ln(NaN) = NaN, ln(negative) = NaN, ln(±0) = -inf.
    let y = select(x == f32::INFINITY, x, y);
    let y = select(x < 0.0 || x.is_nan(), f32::NAN, y);
    select(x == 0.0, f32::NEG_INFINITY, y)
}

/// Up to this magnitude (2^28) [`sin`] and [`cos`] use the Cody–Waite
/// reduction, whose quotient must fit 28 bits.
const TRIG_FAST_LIMIT: f32 = 268_435_456.0;

/// `x - n π/2` and `n` (modulo 4), in `f64`: π/2 in two parts, the first
/// with 25 significant bits so `n * PIO2_1` is exact for `|n| < 2^28`
/// (and the first fused step exact too).
#[inline(always)]
fn reduce_pio2(x: f32) -> (f64, i32) {
    const PIO2_1: f64 = 1.570_796_310_901_641_8;
    const PIO2_1T: f64 = 1.589_325_477_352_819_7e-8;
    let xd = x as f64;
    let t = xd.mul_add(std::f64::consts::FRAC_2_PI, ROUND_F64);
    let n = t.to_bits() as i32;
    let nf = t - ROUND_F64;
    ((-nf).mul_add(PIO2_1T, (-nf).mul_add(PIO2_1, xd)), n)
}

/// `sin r` for `|r| <= π/4` (FreeBSD's `__kernel_sindf`, error < 2^-37.5).
#[inline(always)]
fn sin_kernel(r: f64) -> f64 {
    // r (1 + ...) rather than r + r (...) keeps the sign of r = -0; in
    // f64 the extra rounding is far below an f32 ulp.
    let z = r * r;
    let p = z.mul_add(2.718_311_493_989_822e-6, -1.984_333_483_609_663_2e-4);
    let p = z.mul_add(p, 8.333_329_385_889_463e-3);
    let p = z.mul_add(p, -1.666_666_664_162_652_4e-1);
    r * z.mul_add(p, 1.0)
}

/// `cos r` for `|r| <= π/4` (FreeBSD's `__kernel_cosdf`, error < 2^-34.1).
#[inline(always)]
fn cos_kernel(r: f64) -> f64 {
    let z = r * r;
    let p = z.mul_add(2.439_044_879_627_741e-5, -1.388_676_377_460_993e-3);
    let p = z.mul_add(p, 4.166_662_332_373_906e-2);
    let p = z.mul_add(p, -4.999_999_972_510_31e-1);
    z.mul_add(p, 1.0)
}

/// `sin` (`cos` when `shift` is 1) of a reduced argument in quadrant `n`.
#[inline(always)]
fn sin_quadrant(r: f64, n: i32) -> f32 {
    let s = sin_kernel(r);
    let c = cos_kernel(r);
    let v = select64(n & 1 != 0, c, s);
    let v = select64(n & 2 != 0, -v, v);
    v as f32
}

/// The first 256 bits of the fraction of 2/π, 32 to a word.
const TWO_OVER_PI: [u32; 8] = [
    0xa2f9_836e,
    0x4e44_1529,
    0xfc27_57d1,
    0xf534_ddc0,
    0xdb62_9599,
    0x3c43_9041,
    0xfe51_63ab,
    0xdebb_c561,
];

/// `x - n π/2` and `n` (modulo 4) for `|x| >= 2^28` (any finite `x`),
/// branch-free Payne–Hanek: `x = m 2^k` with an integer `m < 2^24` and
/// `5 <= k <= 104`, and only the 96 bits of 2/π from bit `k - 3` on
/// matter, the earlier ones adding multiples of 8 to `x 2/π`. The product
/// keeps 61 bits of the fraction, enough for the closest `f32` to a
/// multiple of π/2. Lanes outside that range compute garbage the caller
/// discards.
#[inline(always)]
fn reduce_pio2_big(x: f32) -> (f64, i32) {
    let bits = x.to_bits();
    let m = ((bits & 0x007f_ffff) | 0x0080_0000) as u64;
    let k = (((bits >> 23) & 0xff) as i32 - 150).clamp(5, 104);
    let p = (k - 3) as u32;
    let (i, s) = ((p >> 5) as usize & 3, p & 31);
    let word = |j: usize| -> u64 {
        let pair = ((TWO_OVER_PI[i + j] as u64) << 32) | TWO_OVER_PI[i + j + 1] as u64;
        ((pair << s) >> 32) & 0xffff_ffff
    }; // m * (w0 w1 w2), 120 bits, from three 56-bit partial products.
    let p0 = m * word(2);
    let s1 = m * word(1) + (p0 >> 32);
    let s2 = (m * word(0)).wrapping_add(s1 >> 32);
    // x 2/π mod 8 = s2[31:29] . s2[28:0] s1[31:0] (the rest is below 2^-61).
    let hi = s2 & 0xffff_ffff;
    let frac = ((hi & 0x1fff_ffff) << 32) | (s1 & 0xffff_ffff);
    let up = frac >> 60; // fraction >= 1/2: round n up
    let n = ((hi >> 29) + up) as i32;
    let f = frac as i64 - ((up as i64) << 61);
    // To f64 by 32-bit halves: 64-bit integer conversions have no vector
    // instruction before AVX-512DQ. The sum rounds once.
    let f = ((f >> 32) as i32) as f64 * 4_294_967_296.0 + (f as u32) as f64;
    let r = f * (std::f64::consts::FRAC_PI_2 / (1u64 << 61) as f64);
    let neg = bits >> 31 != 0;
    (select64(neg, -r, r), if neg { n.wrapping_neg() } else { n })
}

/// `sin` (`cos` when `shift` is 1) of `x`: the Cody–Waite reduction up
/// to [`TRIG_FAST_LIMIT`], Payne–Hanek beyond it, NaN for inf and NaN.
#[inline(always)]
pub(crate) fn sin_shifted(x: f32, shift: i32) -> f32 {
    let (r1, n1) = reduce_pio2(x);
    let (r2, n2) = reduce_pio2_big(x);
    let fast = trig_fast_fits(x);
    let r = select64(fast, r1, r2);
    let n = if fast { n1 } else { n2 };
    let y = sin_quadrant(r, n.wrapping_add(shift));
    select(x.is_finite(), y, f32::NAN)
}

/// [`sin_shifted`] with the Cody–Waite reduction alone, for arguments
/// where [`trig_fast_fits`] holds: the same arithmetic, so the same bits,
/// without the cost of Payne–Hanek on every lane.
#[inline(always)]
pub(crate) fn sin_shifted_fast(x: f32, shift: i32) -> f32 {
    let (r, n) = reduce_pio2(x);
    sin_quadrant(r, n.wrapping_add(shift))
}

/// Whether [`sin_shifted_fast`] gives what [`sin_shifted`] gives for `x`:
/// finite arguments up to [`TRIG_FAST_LIMIT`]. NaN and infinities are
/// left to the exact path, which turns them into NaN.
#[inline(always)]
pub(crate) fn trig_fast_fits(x: f32) -> bool {
    x.abs() <= TRIG_FAST_LIMIT
}

/// Sine, within 1 ulp (usually correctly rounded).
///
/// ```
/// use tensorfn_runtime::__private::vmath;
/// assert_eq!(vmath::sin(0.0), 0.0);
/// assert!((vmath::sin(1.0) - 1.0f64.sin() as f32).abs() <= f32::EPSILON);
/// assert!(vmath::sin(f32::INFINITY).is_nan());
/// ```
#[inline(always)]
pub fn sin(x: f32) -> f32 {
    sin_shifted(x, 0)
}

/// Cosine, within 1 ulp (usually correctly rounded).
///
/// ```
/// use tensorfn_runtime::__private::vmath;
/// assert_eq!(vmath::cos(0.0), 1.0);
/// assert!((vmath::cos(2.0) - 2.0f64.cos() as f32).abs() <= f32::EPSILON);
/// assert!(vmath::cos(f32::NAN).is_nan());
/// ```
#[inline(always)]
pub fn cos(x: f32) -> f32 {
    sin_shifted(x, 1)
}

/// Hyperbolic tangent, within 2 ulp.
///
/// ```
/// use tensorfn_runtime::__private::vmath;
/// assert_eq!(vmath::tanh(0.0), 0.0);
/// assert_eq!(vmath::tanh(20.0), 1.0);
/// assert_eq!(vmath::tanh(f32::NEG_INFINITY), -1.0);
/// assert!((vmath::tanh(0.5) - 0.5f64.tanh() as f32).abs() <= f32::EPSILON);
/// ```
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let a = x.abs();
    // Small |x|: Cephes' odd minimax polynomial.
    let z = x * x;
    let p = (((-5.704_988_7e-3 * z + 2.063_909e-2) * z - 5.373_971_6e-2) * z + 1.333_144_2e-1) * z
        - 3.333_328e-1;
    // Exact zeros are passed through: the sum would turn -0 into +0.
    let small = select(x == 0.0, x, p * z * x + x);
    // Otherwise 1 - 2 / (e^{2|x|} + 1), with the sign of x put back. exp
    // overflows to inf for large |x|, giving exactly 1.
    let big = 1.0 - 2.0 / (exp(a + a) + 1.0);
    let big = f32::from_bits(big.to_bits() | (x.to_bits() & 0x8000_0000));
    select(a < 0.625, small, select(x.is_nan(), x, big))
}

/// `e^r - 1` for `|r| <= ln(2)/2 + 2^-20` in `f64`, to about 2^-44
/// relative: `r + r^2 (1/2 + r/6 + ... + r^9/11!)` (the truncation,
/// `r^11/12!`, is below 2^-48 of `r`).
#[inline(always)]
fn expm1_reduced(r: f64) -> f64 {
    let q = r.mul_add(1.0 / 39_916_800.0, 1.0 / 3_628_800.0);
    let q = r.mul_add(q, 1.0 / 362_880.0);
    let q = r.mul_add(q, 1.0 / 40_320.0);
    let q = r.mul_add(q, 1.0 / 5_040.0);
    let q = r.mul_add(q, 1.0 / 720.0);
    let q = r.mul_add(q, 1.0 / 120.0);
    let q = r.mul_add(q, 1.0 / 24.0);
    let q = r.mul_add(q, 1.0 / 6.0);
    let q = r.mul_add(q, 0.5);
    (r * r).mul_add(q, r)
}

/// `x = n ln 2 + r` in `f64` for `|x| <= 300`: `r` and `2^n`. One fused
/// step with the `f64` `ln 2`: the error, `n` times 2^-54, stays below
/// 2^-45 of the result.
#[inline(always)]
fn reduce_ln2(xd: f64) -> (f64, f64) {
    let t = xd.mul_add(std::f64::consts::LOG2_E, ROUND_F64);
    let n = t.to_bits() as i32;
    let nf = t - ROUND_F64;
    let r = (-nf).mul_add(std::f64::consts::LN_2, xd);
    (r, f64::from_bits((n.wrapping_add(1023) as u64) << 52))
}

/// `e^x - 1`, within 1 ulp (0.5 ulp and a hair: computed in `f64`).
/// Accurate where `exp(x) - 1` cancels, near 0.
///
/// ```
/// use tensorfn_runtime::__private::vmath;
/// assert_eq!(vmath::expm1(0.0), 0.0);
/// assert_eq!(vmath::expm1(1.0e-10), 1.0e-10); // exp(1e-10) - 1 would give 0
/// assert!((vmath::expm1(1.0) - (std::f32::consts::E - 1.0)).abs() <= f32::EPSILON * 2.0);
/// assert_eq!(vmath::expm1(-100.0), -1.0);
/// assert_eq!(vmath::expm1(100.0), f32::INFINITY);
/// ```
#[inline(always)]
pub fn expm1(x: f32) -> f32 {
    // Below -30 the result is -1 in f32, above 89 it overflows; clamping
    // keeps 2^n normal. NaN fails both tests and is restored at the end.
    let xd = x as f64;
    let xc = select64(xd > 89.0, 89.0, xd);
    let xc = select64(xc < -30.0, -30.0, xc);
    let (r, s) = reduce_ln2(xc);
    // 2^n (1 + p) - 1 with 2^n - 1 exact (|n| <= 44) or 2^n (n up to
    // 128, far above f32's precision): one rounding in f64, no
    // cancellation but at n = 0, where the result is p itself.
    let y = s.mul_add(expm1_reduced(r), s - 1.0) as f32;
    // The reduction turns -0 into +0.
    let y = select(x == 0.0, x, y);
    select(x.is_nan(), x, y)
}

/// `ln(1 + x)`, within 1 ulp (0.5 ulp and a hair: computed in `f64`);
/// `-inf` at -1 and NaN below. Accurate where `ln(1 + x)` loses `x`,
/// near 0.
///
/// ```
/// use tensorfn_runtime::__private::vmath;
/// assert_eq!(vmath::log1p(0.0), 0.0);
/// assert_eq!(vmath::log1p(1.0e-10), 1.0e-10); // ln(1 + 1e-10) would give 0
/// assert!((vmath::log1p(1.0) - std::f32::consts::LN_2).abs() <= f32::EPSILON);
/// assert_eq!(vmath::log1p(-1.0), f32::NEG_INFINITY);
/// assert!(vmath::log1p(-2.0).is_nan());
/// ```
#[inline(always)]
pub fn log1p(x: f32) -> f32 {
    let xd = x as f64;
    // u = 1 + x rounded (inexact only for |x| < 2^-29 or x > 2^29) and c
    // what the rounding lost, exactly (Fast2Sum, the larger term first).
    let u = 1.0 + xd;
    let c = select64(xd >= 1.0, 1.0 - (u - xd), xd - (u - 1.0));
    // u = m 2^e with m in [sqrt(1/2), sqrt(2)); u >= 2^-24 when x > -1.
    // Other lanes (u <= 0, inf, NaN) compute garbage replaced below.
    let bits = u.to_bits() as i64;
    let e = bits.wrapping_sub(0x3fe6_a09e_667f_3bcd) >> 52;
    let m = f64::from_bits(bits.wrapping_sub(e << 52) as u64);
    // ln(1 + x) = e ln 2 + ln(m + c 2^-e); m - 1 is exact and c 2^-e is
    // below half an ulp of m, so their sum rounds once in f64.
    let inv = f64::from_bits((1023i64.wrapping_sub(e) as u64) << 52);
    let f = (m - 1.0) + c * inv;
    // ln(1 + f) = 2 atanh(s), s = f/(2 + f), |s| <= 0.172: the series to
    // s^15 (truncation below 2^-40 relative).
    let s = f / (2.0 + f);
    let z = s * s;
    let p = z.mul_add(1.0 / 15.0, 1.0 / 13.0);
    let p = z.mul_add(p, 1.0 / 11.0);
    let p = z.mul_add(p, 1.0 / 9.0);
    let p = z.mul_add(p, 1.0 / 7.0);
    let p = z.mul_add(p, 1.0 / 5.0);
    let p = z.mul_add(p, 1.0 / 3.0);
    let ln_m = (2.0 * s).mul_add(z * p, 2.0 * s);
    let y = (e as f64).mul_add(std::f64::consts::LN_2, ln_m) as f32;
    // Specials: +inf, -1 -> -inf, below -1 or NaN -> NaN, ±0 kept.
    let y = select(x == f32::INFINITY, x, y);
    let y = select(x == -1.0, f32::NEG_INFINITY, y);
    let y = select(x == 0.0, x, y);
    select(x < -1.0 || x.is_nan(), f32::NAN, y)
}

use tensorfn_core::ops::erf_coeffs::{
    ERFC_FAR as ERF_FAR, ERFC_NEAR as ERF_NEAR, ERFC_NEAR_END, ERF_MID, ERF_MID_END, ERF_SMALL,
    ERF_SMALL_END, ERX as ERF_ERX,
};

/// A polynomial by Horner's rule with fused steps, highest power first.
#[inline(always)]
fn poly<const N: usize>(c: &[f64; N], t: f64) -> f64 {
    let mut p = c[0];
    for &k in &c[1..] {
        p = p.mul_add(t, k);
    }
    p
}

/// What [`erf`] and [`erfc`] share, in `f64`: `|x|`, whether `|x|` is
/// below 0.84375 and below 1.25, the rational of the interval of `|x|`,
/// and `erfc(|x|)` as used from 1.25 on.
#[inline(always)]
fn erf_parts(xd: f64) -> (f64, bool, bool, f64, f64) {
    let ax = xd.abs();
    let small = ax < ERF_SMALL_END;
    let mid = ax < ERF_MID_END;
    let near = ax < ERFC_NEAR_END;
    let w = 1.0 / ax;
    // Every lane evaluates the four rationals and keeps one numerator and
    // one denominator: selecting the coefficients instead would make the
    // compiler look them up in a table, which does not vectorise.
    // (Separate polynomials, not pairs: a select of pairs does not
    // vectorise either.)
    let (z, s1, t) = (xd * xd, ax - 1.0, w * w);
    let n = select64(
        small,
        poly(&ERF_SMALL.0, z),
        select64(
            mid,
            poly(&ERF_MID.0, s1),
            select64(near, poly(&ERF_NEAR.0, t), poly(&ERF_FAR.0, t)),
        ),
    );
    let d = select64(
        small,
        poly(&ERF_SMALL.1, z),
        select64(
            mid,
            poly(&ERF_MID.1, s1),
            select64(near, poly(&ERF_NEAR.1, t), poly(&ERF_FAR.1, t)),
        ),
    );
    let q = n / d;
    // e^(-x² - 0.5625 + q): x² is exact in f64 for an f32 x, so one
    // rounding in the argument, 2^-46 relative at the most. Below -200
    // the f32 result is 0 anyway; the clamp keeps 2^n normal.
    let a = (-ax).mul_add(ax, q - 0.5625);
    let a = select64(a < -200.0, -200.0, a);
    let (r, s) = reduce_ln2(a);
    let tail = s.mul_add(expm1_reduced(r), s) * w;
    (ax, small, mid, q, tail)
}

/// The error function, `2/√π ∫₀ˣ e^(-t²) dt`, within 1 ulp (0.5 ulp and a
/// hair: computed in `f64`).
///
/// ```
/// use tensorfn_runtime::__private::vmath;
/// assert_eq!(vmath::erf(0.0), 0.0);
/// assert!((vmath::erf(0.5) - 0.520_499_9).abs() <= f32::EPSILON);
/// assert_eq!(vmath::erf(5.0), 1.0);
/// assert_eq!(vmath::erf(f32::NEG_INFINITY), -1.0);
/// ```
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let xd = x as f64;
    let (ax, small, mid, q, tail) = erf_parts(xd);
    // x + x q with one rounding keeps the sign of zero.
    let y_small = xd.mul_add(q, xd);
    let y = select64(mid, ERF_ERX + q, select64(ax < 6.0, 1.0 - tail, 1.0));
    let y = select64(small, y_small, y.copysign(xd)) as f32;
    select(x.is_nan(), x, y)
}

/// The complementary error function, `1 - erf(x)`, within 1 ulp (0.5 ulp
/// and a hair: computed in `f64`). It keeps its relative accuracy where
/// `1 - erf(x)` would round to 0, down to the smallest subnormal (near
/// x = 10); `erfc(-inf) = 2`.
///
/// ```
/// use tensorfn_runtime::__private::vmath;
/// assert_eq!(vmath::erfc(0.0), 1.0);
/// assert!((vmath::erfc(5.0) / 1.537_459_8e-12 - 1.0).abs() <= f32::EPSILON);
/// assert!(vmath::erfc(10.0) > 0.0); // 1 - erf(10) would give 0
/// assert_eq!(vmath::erfc(11.0), 0.0);
/// assert_eq!(vmath::erfc(f32::NEG_INFINITY), 2.0);
/// ```
#[inline(always)]
pub fn erfc(x: f32) -> f32 {
    erfc_wide(x as f64) as f32
}

/// [`erfc`] of an `f64` argument, in `f64` (accurate to a few parts in
/// 2^53 relative), for callers that round to `f32` once.
#[inline(always)]
pub(crate) fn erfc_wide(xd: f64) -> f64 {
    let (ax, small, mid, q, tail) = erf_parts(xd);
    let pos = xd > 0.0;
    // fdlibm's forms: 1/2 - (x q + (x - 1/2)) from x = 1/4 loses less to
    // the subtraction than 1 - (x + x q).
    let y_small = select64(
        xd < 0.25,
        1.0 - xd.mul_add(q, xd),
        0.5 - xd.mul_add(q, xd - 0.5),
    );
    let y_mid = select64(pos, (1.0 - ERF_ERX) - q, 1.0 + (ERF_ERX + q));
    let y_far = select64(
        ax < 28.0,
        select64(pos, tail, 2.0 - tail),
        select64(pos, 0.0, 2.0),
    );
    let y = select64(small, y_small, select64(mid, y_mid, y_far));
    select64(xd.is_nan(), xd, y)
}

/// Exact GELU, `x/2 erfc(-x/sqrt(2))`, in `f64` and rounded once: in
/// `f32` the rounding of `-x/sqrt(2)` alone would cost up to 30 ulps in
/// the negative tail, where `erfc` amplifies it.
///
/// ```
/// use tensorfn_runtime::__private::vmath;
/// assert_eq!(vmath::gelu_erf(0.0), 0.0);
/// assert_eq!(vmath::gelu_erf(10.0), 10.0);
/// let tail = vmath::gelu_erf(-8.0) as f64;
/// assert!((tail / -4.976e-15 - 1.0).abs() < 1e-3, "{tail}");
/// ```
#[inline(always)]
pub fn gelu_erf(x: f32) -> f32 {
    let xd = x as f64;
    (0.5 * xd * erfc_wide(-xd * std::f64::consts::FRAC_1_SQRT_2)) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance from `got` to the exact `want`, in units of the last place
    /// of `want` as an `f32` (subnormal spacing below the normal range).
    fn ulps(got: f32, want: f64) -> f64 {
        if got.is_nan() || want.is_nan() {
            return if got.is_nan() && want.is_nan() {
                0.0
            } else {
                f64::INFINITY
            };
        }
        if got.is_infinite() || want.is_infinite() || want.abs() > f32::MAX as f64 {
            return if got as f64 == want || (got.is_infinite() && want.abs() > f32::MAX as f64) {
                0.0
            } else {
                f64::INFINITY
            };
        }
        let a = (want.abs() as f32).max(f32::MIN_POSITIVE);
        let ulp = (f32::from_bits(a.to_bits() + 1) - a) as f64;
        let ulp = if want.abs() < f32::MIN_POSITIVE as f64 {
            f32::from_bits(1) as f64
        } else {
            ulp
        };
        (got as f64 - want).abs() / ulp
    }

    /// A deterministic stream of `f32`s: uniform in `[lo, hi)` half the
    /// time, uniform in bit pattern (log-uniform) between `lo` and `hi`
    /// otherwise.
    fn inputs(seed: u64, n: usize, lo: f32, hi: f32) -> impl Iterator<Item = f32> {
        let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        (0..n).map(move |i| {
            let u = (next() >> 11) as f64 / (1u64 << 53) as f64;
            if i % 2 == 0 {
                (lo as f64 + (hi as f64 - lo as f64) * u) as f32
            } else {
                // Random magnitude between the bounds' magnitudes, random sign
                // where the range spans zero.
                let (a, b) = (lo.abs().min(hi.abs()), lo.abs().max(hi.abs()));
                let a = if lo < 0.0 && hi > 0.0 { 0.0 } else { a };
                let (ba, bb) = (a.to_bits() as f64, b.to_bits() as f64);
                let m = f32::from_bits((ba + (bb - ba) * u) as u32);
                let neg = if lo < 0.0 && hi > 0.0 {
                    next() & 1 == 1
                } else {
                    hi <= 0.0
                };
                if neg {
                    -m
                } else {
                    m
                }
            }
        })
    }

    /// The largest error of `f` against `reference` over `ranges` and
    /// `specials`, failing on the first input past `bound` ulp.
    fn max_error(
        f: fn(f32) -> f32,
        reference: fn(f64) -> f64,
        ranges: &[(f32, f32)],
        specials: &[f32],
        bound: f64,
    ) -> f64 {
        let mut worst = 0.0f64;
        let n = if cfg!(debug_assertions) {
            40_000
        } else {
            2_000_000
        };
        for (k, &(lo, hi)) in ranges.iter().enumerate() {
            for x in inputs(k as u64 + 1, n, lo, hi).chain(specials.iter().copied()) {
                let e = ulps(f(x), reference(x as f64));
                assert!(
                    e <= bound,
                    "x = {x:e} ({:#x}): {} vs {}",
                    x.to_bits(),
                    f(x),
                    reference(x as f64)
                );
                worst = worst.max(e);
            }
        }
        worst
    }

    const EDGES: [f32; 10] = [
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        1.0e-40,
        -1.0e-40,
        f32::MAX,
    ];

    #[test]
    fn exp_within_one_ulp() {
        let specials = [
            EDGES.as_slice(),
            &[
                88.72283,
                88.72284,
                -87.33655,
                -103.97207,
                -103.97208,
                -150.0,
                f32::MIN,
            ],
        ]
        .concat();
        let e = max_error(
            exp,
            f64::exp,
            &[
                (-1.0, 1.0),
                (-104.0, 89.0),
                (-88.0, -80.0),
                (-103.97, -87.0),
            ],
            &specials,
            1.0,
        );
        eprintln!("exp: max {e:.3} ulp");
    }

    #[test]
    fn ln_within_one_ulp() {
        let specials = [
            EDGES.as_slice(),
            &[
                1.0,
                0.70710677,
                f32::from_bits(std::f32::consts::FRAC_1_SQRT_2.to_bits() + 1),
                std::f32::consts::SQRT_2,
                f32::from_bits(1),
                -1.0,
            ],
        ]
        .concat();
        let e = max_error(
            ln,
            f64::ln,
            &[(0.5, 2.0), (0.0, f32::MAX), (0.0, 1.0e-37), (0.99, 1.01)],
            &specials,
            1.0,
        );
        eprintln!("ln: max {e:.3} ulp");
    }

    #[test]
    fn sin_cos_within_one_ulp() {
        let ranges = [
            (-4.0, 4.0),
            (-1.0e4, 1.0e4),
            (-3.0e8, 3.0e8),
            (-f32::MAX, f32::MAX),
            (-1.0e-3, 1.0e-3),
        ];
        // Near multiples of π/2, just past the fast reduction's limit, and
        // the hardest f32 case known for this reduction (1.6e38).
        let specials = [
            EDGES.as_slice(),
            &[
                std::f32::consts::FRAC_PI_2,
                std::f32::consts::PI,
                -std::f32::consts::PI,
                3.0 * std::f32::consts::FRAC_PI_2,
                TRIG_FAST_LIMIT,
                f32::from_bits(TRIG_FAST_LIMIT.to_bits() + 1),
                -f32::from_bits(TRIG_FAST_LIMIT.to_bits() + 1),
                1.0e30,
                f32::from_bits(0x5922aa80),
                f32::from_bits(0x7c9bf2af),
                16_367_173.0 * 2f32.powi(72),
            ],
        ]
        .concat();
        let e = max_error(sin, f64::sin, &ranges, &specials, 1.0);
        eprintln!("sin: max {e:.3} ulp");
        let e = max_error(cos, f64::cos, &ranges, &specials, 1.0);
        eprintln!("cos: max {e:.3} ulp");
    }

    #[test]
    fn tanh_within_two_ulp() {
        let specials = [
            EDGES.as_slice(),
            &[0.625, -0.625, 0.62499994, 9.0, -9.0, 1.0e-20],
        ]
        .concat();
        let e = max_error(
            tanh,
            f64::tanh,
            &[(-1.0, 1.0), (-10.0, 10.0), (-0.7, 0.7), (-100.0, 100.0)],
            &specials,
            2.0,
        );
        eprintln!("tanh: max {e:.3} ulp");
    }

    #[test]
    fn expm1_within_one_ulp() {
        let specials = [
            EDGES.as_slice(),
            &[
                88.72283,
                88.72284,
                -17.328_68,
                -17.328_68 - 1.0e-5,
                std::f32::consts::LN_2 / 2.0,
                -std::f32::consts::LN_2 / 2.0,
                1.0e-10,
                -1.0e-10,
                f32::MIN,
            ],
        ]
        .concat();
        let e = max_error(
            expm1,
            f64::exp_m1,
            &[
                (-1.0, 1.0),
                (-1.0e-3, 1.0e-3),
                (-30.0, 89.0),
                (-f32::MAX, f32::MAX),
            ],
            &specials,
            1.0,
        );
        eprintln!("expm1: max {e:.3} ulp");
    }

    #[test]
    fn log1p_within_one_ulp() {
        let specials = [
            EDGES.as_slice(),
            &[
                -1.0,
                -2.0,
                -0.999_999_94,
                f32::MIN,
                1.0e-30,
                -1.0e-30,
                std::f32::consts::SQRT_2 - 1.0,
                std::f32::consts::FRAC_1_SQRT_2 - 1.0,
                1.0,
            ],
        ]
        .concat();
        let e = max_error(
            log1p,
            f64::ln_1p,
            &[
                (-1.0, 1.0),
                (-1.0e-3, 1.0e-3),
                (-1.0, -0.99),
                (0.0, f32::MAX),
            ],
            &specials,
            1.0,
        );
        eprintln!("log1p: max {e:.3} ulp");
    }

    #[test]
    fn erf_erfc_within_one_ulp() {
        // The ends of fdlibm's intervals, where erfc(x) leaves the
        // subnormals (about 10.05), erf(x) reaching 1.
        let specials = [
            EDGES.as_slice(),
            &[
                0.843_75,
                0.843_749_94,
                -0.843_75,
                0.25,
                1.25,
                1.249_999_9,
                -1.25,
                2.857_141_5,
                2.857_142_7,
                6.0,
                -6.0,
                10.0,
                10.05,
                10.06,
                27.0,
                28.0,
                -28.0,
                3.9,
                -3.9,
                1.0e-30,
                f32::MIN,
            ],
        ]
        .concat();
        let ranges = [
            (-6.0, 6.0),
            (-1.5, 1.5),
            (0.0, 11.0),
            (-1.0e-3, 1.0e-3),
            (-f32::MAX, f32::MAX),
        ];
        let e = max_error(erf, libm::erf, &ranges, &specials, 1.0);
        eprintln!("erf: max {e:.3} ulp");
        let e = max_error(erfc, libm::erfc, &ranges, &specials, 1.0);
        eprintln!("erfc: max {e:.3} ulp");
    }

    #[test]
    fn gelu_erf_accuracy() {
        // x/2 erfc(-x/sqrt(2)) in f64; its own error is far below an f32
        // ulp.
        let reference = |x: f64| 0.5 * x * libm::erfc(-x * std::f64::consts::FRAC_1_SQRT_2);
        let ranges = [
            (-6.0, 6.0),
            (-14.0, -5.0),
            (-1.0e-3, 1.0e-3),
            (-f32::MAX, f32::MAX),
        ];
        let e = max_error(gelu_erf, reference, &ranges, EDGES.as_slice(), 1.0);
        eprintln!("gelu_erf: max {e:.3} ulp");
    }

    #[test]
    fn signs_of_zero_survive() {
        for f in [sin, tanh, expm1, log1p, erf] {
            assert_eq!(f(-0.0).to_bits(), (-0.0f32).to_bits());
            assert_eq!(f(0.0).to_bits(), 0);
        }
        assert_eq!(exp(-0.0), 1.0);
        assert_eq!(erfc(-0.0), 1.0);
    }
}
