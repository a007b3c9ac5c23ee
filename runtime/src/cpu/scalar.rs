//! Arithmetic on one element, per concrete dtype: wrapping integers like
//! PyTorch, f16/bf16 computed in f32 and rounded once.

use super::blocks::Lanes;
use super::vmath;
use crate::dtype::NumDType;
use half::{bf16, f16};
use std::ops::{Add, Div, Mul, Neg, Sub};

/// The precision math is carried out in: `f32` (for f32, f16, bf16) or
/// `f64`.
pub(crate) trait Real:
    Copy
    + Send
    + Sync
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + 'static
{
    const ZERO: Self;
    const ONE: Self;
    fn from_f64(v: f64) -> Self;
    fn from_usize(n: usize) -> Self;
    fn exp(self) -> Self;
    fn ln(self) -> Self;
    fn tanh(self) -> Self;
    /// Sine; `lanes` evaluates it where the precision has a block path.
    fn sin(self, lanes: &mut Lanes) -> Self;
    /// Cosine, like [`Real::sin`].
    fn cos(self, lanes: &mut Lanes) -> Self;
    fn sqrt(self) -> Self;
    fn abs(self) -> Self;
    fn is_nan(self) -> bool;
}

macro_rules! real {
    ($t:ty, $m:ident, |$lanes:ident, $x:ident| $sin:expr, $cos:expr) => {
        impl Real for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            #[inline]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline]
            fn from_usize(n: usize) -> Self {
                n as $t
            }
            #[inline(always)]
            fn exp(self) -> Self {
                $m::exp(self)
            }
            #[inline(always)]
            fn ln(self) -> Self {
                $m::ln(self)
            }
            #[inline(always)]
            fn tanh(self) -> Self {
                $m::tanh(self)
            }
            #[inline(always)]
            fn sin(self, $lanes: &mut Lanes) -> Self {
                let $x = self;
                $sin
            }
            #[inline(always)]
            fn cos(self, $lanes: &mut Lanes) -> Self {
                let $x = self;
                $cos
            }
            #[inline]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
        }
    };
}
// f32 (and f16/bf16, computed in f32) use the vectorisable functions the
// generated fused kernels use too; f64 keeps the C library's.
real!(f32, vmath, |lanes, x| lanes.sin(x), lanes.cos(x));
real!(f64, f64, |_lanes, x| x.sin(), x.cos());

/// `max` that returns NaN when either side is NaN (`torch.maximum`).
#[inline]
pub(crate) fn max_nan<A: PartialOrd + Copy>(a: A, b: A) -> A {
    #[allow(clippy::eq_op)]
    let a_nan = a != a;
    if a_nan || a > b {
        a
    } else if b > a {
        b
    } else {
        // Equal, or `b` is NaN.
        b
    }
}

/// `min` that returns NaN when either side is NaN (`torch.minimum`).
#[inline]
pub(crate) fn min_nan<A: PartialOrd + Copy>(a: A, b: A) -> A {
    #[allow(clippy::eq_op)]
    let a_nan = a != a;
    if a_nan || a < b {
        a
    } else {
        b
    }
}

/// A numeric dtype the CPU loops are written for.
pub(crate) trait CpuNum: NumDType {
    /// True for integer dtypes (wrapping arithmetic, division can fail).
    const IS_INT: bool;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    /// Integer division truncates toward zero; the caller rules out 0.
    fn div(self, o: Self) -> Self;
    /// Integer powers wrap; the caller rules out negative exponents.
    fn pow(self, o: Self) -> Self;
    fn maximum(self, o: Self) -> Self;
    fn minimum(self, o: Self) -> Self;
    fn neg(self) -> Self;
    fn abs(self) -> Self;
    fn relu(self) -> Self;
    fn square(self) -> Self;
    fn is_zero(self) -> bool;
    fn is_negative(self) -> bool;
}

/// A floating-point dtype with the precision its math is done in.
pub(crate) trait CpuFloat: CpuNum {
    type Acc: Real;
    fn to_acc(self) -> Self::Acc;
    fn from_acc(a: Self::Acc) -> Self;
}

macro_rules! int_num {
    ($t:ty, $signed:tt) => {
        impl CpuNum for $t {
            const IS_INT: bool = true;
            #[inline]
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            #[inline]
            fn sub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            #[inline]
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            #[inline]
            fn div(self, o: Self) -> Self {
                if o == 0 {
                    0
                } else {
                    self.wrapping_div(o)
                }
            }
            #[inline]
            fn pow(self, o: Self) -> Self {
                #[allow(unused_comparisons)]
                if o < 0 {
                    0
                } else {
                    self.wrapping_pow(o as u32)
                }
            }
            #[inline]
            fn maximum(self, o: Self) -> Self {
                Ord::max(self, o)
            }
            #[inline]
            fn minimum(self, o: Self) -> Self {
                Ord::min(self, o)
            }
            #[inline]
            fn neg(self) -> Self {
                self.wrapping_neg()
            }
            #[inline]
            fn abs(self) -> Self {
                int_abs!(self, $signed)
            }
            #[inline]
            fn relu(self) -> Self {
                Ord::max(self, 0)
            }
            #[inline]
            fn square(self) -> Self {
                self.wrapping_mul(self)
            }
            #[inline]
            fn is_zero(self) -> bool {
                self == 0
            }
            #[inline]
            fn is_negative(self) -> bool {
                #[allow(unused_comparisons)]
                let neg = self < 0;
                neg
            }
        }
    };
}

macro_rules! int_abs {
    ($x:expr, true) => {
        $x.wrapping_abs()
    };
    ($x:expr, false) => {
        $x
    };
}

int_num!(i32, true);
int_num!(i64, true);
int_num!(u8, false);

macro_rules! float_num {
    ($t:ty, $acc:ty, |$a:ident| $to:expr, |$b:ident| $from:expr) => {
        impl CpuFloat for $t {
            type Acc = $acc;
            #[inline]
            fn to_acc(self) -> $acc {
                let $a = self;
                $to
            }
            #[inline]
            fn from_acc($b: $acc) -> Self {
                $from
            }
        }
        impl CpuNum for $t {
            const IS_INT: bool = false;
            #[inline]
            fn add(self, o: Self) -> Self {
                Self::from_acc(self.to_acc() + o.to_acc())
            }
            #[inline]
            fn sub(self, o: Self) -> Self {
                Self::from_acc(self.to_acc() - o.to_acc())
            }
            #[inline]
            fn mul(self, o: Self) -> Self {
                Self::from_acc(self.to_acc() * o.to_acc())
            }
            #[inline]
            fn div(self, o: Self) -> Self {
                Self::from_acc(self.to_acc() / o.to_acc())
            }
            #[inline]
            fn pow(self, o: Self) -> Self {
                Self::from_acc(self.to_acc().powf(o.to_acc()))
            }
            #[inline]
            fn maximum(self, o: Self) -> Self {
                max_nan(self, o)
            }
            #[inline]
            fn minimum(self, o: Self) -> Self {
                min_nan(self, o)
            }
            #[inline]
            fn neg(self) -> Self {
                Self::from_acc(-self.to_acc())
            }
            #[inline]
            fn abs(self) -> Self {
                Self::from_acc(self.to_acc().abs())
            }
            #[inline]
            fn relu(self) -> Self {
                // NaN stays NaN, like PyTorch's relu.
                let a = self.to_acc();
                if a < <$acc as Real>::ZERO {
                    Self::from_acc(<$acc as Real>::ZERO)
                } else {
                    self
                }
            }
            #[inline]
            fn square(self) -> Self {
                let a = self.to_acc();
                Self::from_acc(a * a)
            }
            #[inline]
            fn is_zero(self) -> bool {
                self.to_acc() == <$acc as Real>::ZERO
            }
            #[inline]
            fn is_negative(self) -> bool {
                self.to_acc() < <$acc as Real>::ZERO
            }
        }
    };
}

float_num!(f32, f32, |a| a, |b| b);
float_num!(f64, f64, |a| a, |b| b);
float_num!(f16, f32, |a| a.to_f32(), |b| f16::from_f32(b));
float_num!(bf16, f32, |a| a.to_f32(), |b| bf16::from_f32(b));

/// `op(x)` for a float op, in the accumulation precision of `U`, sine and
/// cosine by `lanes`. Always inlined so that a loop over it, with `op`
/// fixed, vectorises.
#[inline(always)]
pub(crate) fn float_unary<A: Real>(op: tensorfn_kernels::UnaryOp, x: A, lanes: &mut Lanes) -> A {
    use tensorfn_kernels::UnaryOp as U;
    let one = A::ONE;
    match op {
        U::Neg => -x,
        U::Abs => x.abs(),
        U::Relu => {
            if x < A::ZERO {
                A::ZERO
            } else {
                x
            }
        }
        U::Square => x * x,
        U::Sigmoid => one / (one + (-x).exp()),
        U::Tanh => x.tanh(),
        U::Exp => x.exp(),
        U::Log => x.ln(),
        U::Sin => x.sin(lanes),
        U::Cos => x.cos(lanes),
        U::Sqrt => x.sqrt(),
        U::Rsqrt => one / x.sqrt(),
        U::Recip => one / x,
        U::Gelu => {
            // 0.5 x (1 + tanh(u)) = x sigmoid(2u), without the cancellation
            // of 1 + tanh(u) for negative x.
            let c2 = A::from_f64(2.0 * 0.797_884_560_802_865_4);
            let k = A::from_f64(0.044_715);
            let u2 = c2 * (x + k * x * x * x);
            // One exp of -|u2|, which cannot overflow; both sides are
            // cheap, so a select replaces the branch.
            let e = (-u2.abs()).exp();
            let pos = x / (one + e);
            let neg = x * e / (one + e);
            if u2 >= A::ZERO {
                pos
            } else {
                neg
            }
        }
        U::Silu => x / (one + (-x).exp()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_aware_extrema() {
        assert!(max_nan(f32::NAN, 1.0).is_nan());
        assert!(max_nan(1.0, f32::NAN).is_nan());
        assert!(min_nan(f32::NAN, 1.0).is_nan());
        assert!(min_nan(1.0, f32::NAN).is_nan());
        assert_eq!(max_nan(1.0, 2.0), 2.0);
        assert_eq!(min_nan(1.0, 2.0), 1.0);
    }

    #[test]
    fn wrapping_integers() {
        assert_eq!(CpuNum::add(i32::MAX, 1), i32::MIN);
        assert_eq!(CpuNum::sub(0u8, 1), 255);
        assert_eq!(CpuNum::neg(3u8), 253);
        assert_eq!(CpuNum::abs(i64::MIN), i64::MIN);
        assert_eq!(CpuNum::div(i32::MIN, -1), i32::MIN);
        assert_eq!(CpuNum::div(-7i32, 2), -3);
        assert_eq!(CpuNum::pow(3i64, 4), 81);
    }

    #[test]
    fn gelu_is_accurate_for_negative_inputs() {
        let x = -9.0f64;
        let u2 = 2.0 * (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
        let want = x * u2.exp() / (1.0 + u2.exp());
        let got = float_unary(
            tensorfn_kernels::UnaryOp::Gelu,
            x as f32,
            &mut Lanes::exact(),
        ) as f64;
        assert!(((got - want) / want).abs() < 1e-5, "{got} vs {want}");
    }

    #[test]
    fn half_rounds_once() {
        let a = f16::from_f32(1.0);
        let b = f16::from_f32(0.000_5);
        assert_eq!(CpuNum::add(a, b), f16::from_f32(1.0 + b.to_f32()));
    }
}
