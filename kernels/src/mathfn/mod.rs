//! Transcendental functions as sequences of exactly-rounded operations
//! (`fma`, `+`, `*`, `/`, `sqrt`, round-to-integral, integer and bit
//! operations). The PTX emitter and the interpreter execute the very same
//! sequence, so the accuracy measured by the interpreter on the host is the
//! accuracy of the GPU kernels.
//!
//! The methods and their measured accuracy are listed in the crate docs
//! (section "Accuracy"); `tests/accuracy.rs` asserts them.

mod activation;
mod coeffs;
mod exp_log;
mod pow;
mod special;
mod trig;

use crate::prim::{Builder, Reg, Ty};

pub(crate) use activation::{gelu, sigmoid, silu, tanh};
pub(crate) use exp_log::{exp, log};
pub(crate) use pow::pow;
// The expansions that catalogue entries name (`math: erf`), by op name.
pub(crate) use special::*;
pub(crate) use trig::{cos, sin};

use crate::ops::UnaryOp;

/// `op(x)` for an f32 register whose result is rounded to 16 bits at once
/// (`fit` is [`Fit::F16`] or [`Fit::Bf16`]), with the shorter expansion
/// where one exists; `None` for the ops that have none (the caller uses
/// the full one). `x` must hold a value of the 16-bit type (f16 inputs
/// stay below 2^16, which is what lets `sin`/`cos` skip the large-argument
/// reduction).
pub(crate) fn unary_fit(b: &mut Builder, op: UnaryOp, x: Reg, fit: Fit) -> Option<Reg> {
    debug_assert!(fit != Fit::Full && b.ty(x) == Ty::F32);
    Some(match op {
        UnaryOp::Exp => exp_log::exp_fit(b, x, fit),
        UnaryOp::Log => exp_log::log_fit(b, x, fit),
        UnaryOp::Sin => trig::sin_fit(b, x, fit),
        UnaryOp::Cos => trig::cos_fit(b, x, fit),
        UnaryOp::Tanh => activation::tanh_fit(b, x, fit),
        UnaryOp::Sigmoid => activation::sigmoid_fit(b, x, fit),
        UnaryOp::Silu => activation::silu_fit(b, x, fit),
        UnaryOp::Gelu => activation::gelu_fit(b, x, fit),
        _ => return None,
    })
}

/// `a` constant of the type of `like`, given in both precisions (each
/// the nearest value of its type).
fn k(b: &mut Builder, ty: Ty, v32: f32, v64: f64) -> Reg {
    match ty {
        Ty::F32 => b.cf(ty, v32 as f64),
        _ => b.cf(ty, v64),
    }
}

/// `v` as a constant of float type `ty` (exact in both: small integers,
/// powers of two, halves).
fn kx(b: &mut Builder, ty: Ty, v: f64) -> Reg {
    b.cf(ty, v)
}

/// How accurate an expansion must be.
///
/// An `f16`/`bf16` operation computes in `f32` and rounds its result to its
/// dtype at once, so nothing but that rounding ever sees the `f32` value.
/// Its expansion then only needs an `f32` error well below the 16-bit
/// rounding (about 2^-17 relative for f16, 2^-14 for bf16, against
/// 2^-12 and 2^-9 for half an ulp): shorter polynomials, fewer reduction
/// steps. The rule is the op's dtype, nothing else: an `f32`/`f64` op
/// (even one whose result is later cast to 16 bits) always gets
/// [`Fit::Full`], so no f32 or f64 result ever loses accuracy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fit {
    /// The register's own type: the accuracy in the crate docs.
    Full,
    /// An f32 result rounded to f16 at once.
    F16,
    /// An f32 result rounded to bf16 at once.
    Bf16,
}

/// Horner's rule with `fma`: `c[0] x^(n-1) + ... + c[n-1]`.
fn horner(b: &mut Builder, x: Reg, c32: &[f32], c64: &[f64]) -> Reg {
    let ty = b.ty(x);
    let coeffs: Vec<f64> = match ty {
        Ty::F32 => c32.iter().map(|&c| c as f64).collect(),
        _ => c64.to_vec(),
    };
    let mut p = b.cf(ty, coeffs[0]);
    for &c in &coeffs[1..] {
        let c = b.cf(ty, c);
        p = b.fma(p, x, c);
    }
    p
}

/// Horner's rule over the last `n` coefficients of the f32 list (the low
/// order terms of a Taylor series, highest first), or all of them.
fn horner_tail(b: &mut Builder, x: Reg, c32: &[f32], c64: &[f64], n: usize) -> Reg {
    if n >= c32.len() {
        return horner(b, x, c32, c64);
    }
    debug_assert_eq!(b.ty(x), Ty::F32, "short polynomials are for f32");
    horner(b, x, &c32[c32.len() - n..], &[])
}

/// `num / d` for `d` in [1, 2] (or NaN), for results rounded to 16 bits
/// at once: `num` times [`recip_unit_range`], within about 2^-22 of the
/// quotient. A correctly rounded `div` costs a reciprocal estimate, a
/// check and a branch to a slow path per lane; this is seven
/// straight-line instructions that the compiler can interleave across
/// lanes. An infinite `num` gives an infinite result, as a division would.
fn div_unit_range(b: &mut Builder, num: Reg, d: Reg) -> Reg {
    debug_assert_eq!(b.ty(d), Ty::F32, "a 16-bit expansion computes in f32");
    let r = recip_unit_range(b, d);
    b.mul(num, r)
}

/// `num / d` for `d` in [1, 2] (or NaN) and a finite `num`, to within a
/// few hundredths of an ulp more than a correctly rounded division (f32;
/// f64 divides): `q = num r` with `r` from [`recip_unit_range`], then one
/// residual step `q - r (d q - num)`, the residual exact by `fma`. Like
/// [`div_unit_range`], straight-line code where `div.rn.f32` branches.
fn div_unit_range_full(b: &mut Builder, num: Reg, d: Reg) -> Reg {
    if b.ty(d) != Ty::F32 {
        return b.div(num, d);
    }
    let r = recip_unit_range(b, d);
    let q = b.mul(num, r);
    // The residual negated, `d q - num`, so that a zero residual is +0
    // and `q - (+0) r` keeps the sign of a zero `q`.
    let nnum = b.fneg(num);
    let nrem = b.fma(d, q, nnum);
    let rem = b.fneg(nrem);
    b.fma(rem, r, q)
}

/// `1 / d` for `d` in [1, 2] (or NaN), in f32: a quadratic (relative error
/// 2^-6.6) and two Newton steps (2^-13.3, then below 2^-24 but for the
/// roundings), all `fma`.
fn recip_unit_range(b: &mut Builder, d: Reg) -> Reg {
    // Least relative error on [1, 2] (weighted least squares to the
    // equioscillation), coefficients rounded to f32.
    let seed = horner(b, d, &RECIP_1_2, &[]);
    refine_recip(b, d, seed, 2)
}

/// `steps` Newton steps `r + r (1 - d r)` from `r` toward `1 / d`, each
/// squaring the relative error (two `fma`).
fn refine_recip(b: &mut Builder, d: Reg, mut r: Reg, steps: usize) -> Reg {
    let one = kx(b, b.ty(d), 1.0);
    let nd = b.fneg(d);
    for _ in 0..steps {
        let e = b.fma(nd, r, one);
        r = b.fma(r, e, r);
    }
    r
}

/// `num / d` for a positive normal `d` (or NaN), for results rounded to
/// 16 bits at once: a reciprocal seed from the bits of `d` (the integer
/// `0x7ef311c3 - bits(d)`, relative error below 2^-4.3 for every normal
/// `d`) and Newton steps, all straight-line, as in [`div_unit_range`]:
/// two for bf16 (2^-8.6, then 2^-17), three for f16 (below 2^-24 but for
/// the roundings; two leave 116 f16 tanh results off the nearest).
fn div_positive(b: &mut Builder, num: Reg, d: Reg, fit: Fit) -> Reg {
    debug_assert_eq!(b.ty(d), Ty::F32, "a 16-bit expansion computes in f32");
    let magic = b.ci(Ty::I32, 0x7ef3_11c3);
    let bits = b.bits(d);
    let seed = b.isub(magic, bits);
    let seed = b.bits(seed);
    let steps = if fit == Fit::Bf16 { 2 } else { 3 };
    let r = refine_recip(b, d, seed, steps);
    b.mul(num, r)
}

/// [`recip_unit_range`]'s starting quadratic, highest power first.
const RECIP_1_2: [f32; 3] = [0.323_223_68, -1.454_507_1, 2.121_174];

/// The integer type with the width of float type `ty`.
fn int_of(ty: Ty) -> Ty {
    match ty {
        Ty::F32 => Ty::I32,
        _ => Ty::I64,
    }
}

/// `|mag|` with the sign of `sign`.
fn copysign(b: &mut Builder, mag: Reg, sign: Reg) -> Reg {
    let ty = b.ty(mag);
    let it = int_of(ty);
    let sign_bit = match it {
        Ty::I32 => b.ci(it, i32::MIN as i64),
        _ => b.ci(it, i64::MIN),
    };
    let not_sign = b.not(sign_bit);
    let m = b.bits(mag);
    let m = b.and(m, not_sign);
    let s = b.bits(sign);
    let s = b.and(s, sign_bit);
    let r = b.or(m, s);
    b.bits(r)
}

/// A quiet NaN of type `ty`.
fn nan(b: &mut Builder, ty: Ty) -> Reg {
    kx(b, ty, f64::NAN)
}

/// `+inf` of type `ty`.
fn inf(b: &mut Builder, ty: Ty) -> Reg {
    kx(b, ty, f64::INFINITY)
}

/// `2^e` for an integer register `e` in the normal exponent range.
fn pow2(b: &mut Builder, ty: Ty, e: Reg) -> Reg {
    let (bias, shift) = match ty {
        Ty::F32 => (127, 23),
        _ => (1023, 52),
    };
    let it = int_of(ty);
    let e = b.icvt(e, it);
    let bias = b.ci(it, bias);
    let biased = b.iadd(e, bias);
    let bits = b.shl_c(biased, shift);
    b.bits(bits)
}

#[cfg(test)]
mod fit_tests;
#[cfg(test)]
mod tests;
