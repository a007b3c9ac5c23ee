//! Arithmetic on one element, per concrete dtype: wrapping integers like
//! PyTorch, f16/bf16 computed in f32 and rounded once.

use super::blocks::Lanes;
use super::vmath;
use crate::dtype::NumDType;
use half::{bf16, f16};
use std::marker::PhantomData;
use std::ops::{Add, Div, Mul, Neg, Sub};
use tensorfn_kernels::ops::ElemMath;
use tensorfn_kernels::{BinaryOp, CmpOp, UnaryOp};

/// The functions of the catalogue's ops with math of their own (`math: f`
/// in their entry): a method `f` of [`Real`], for `f32` the vectorisable
/// [`vmath`] function `f`, for `f64` the op's reference; and
/// [`math_unary`], which picks the op's method.
macro_rules! real_math {
    (@$mode:ident $($(#[doc = $doc:literal])* $V:ident => $m:ident {
        ints: $ints:literal, exact: $exact:literal, domain: ($lo:expr, $hi:expr),
        reference: |$rx:ident| $reference:expr,
        $(composite: |$cm:ident, $cx:ident| $composite:block,)?
        $(math: $mf:ident,)?
    })*) => {
        real_math!(@$mode: $($($V $mf |$rx| $reference;)?)*);
    };
    (@decl: $($V:ident $mf:ident |$rx:ident| $reference:expr;)*) => {
        $(
            #[doc = concat!("[`UnaryOp::", stringify!($V), "`] of `self`.")]
            fn $mf(self) -> Self;
        )*
    };
    (@f32: $($V:ident $mf:ident |$rx:ident| $reference:expr;)*) => {
        $(
            #[inline(always)]
            fn $mf(self) -> Self {
                vmath::$mf(self)
            }
        )*
    };
    (@f64: $($V:ident $mf:ident |$rx:ident| $reference:expr;)*) => {
        $(
            #[inline]
            fn $mf(self) -> Self {
                let $rx = self;
                $reference
            }
        )*
    };
    (@pick: $($V:ident $mf:ident |$rx:ident| $reference:expr;)*) => {
        /// `op(x)` through the op's own function, for the catalogue's ops
        /// with math of their own.
        #[inline(always)]
        fn math_unary<A: Real>(op: UnaryOp, x: A) -> Option<A> {
            match op {
                $(UnaryOp::$V => Some(x.$mf()),)*
                _ => None,
            }
        }
    };
}
tensorfn_core::for_each_unary_op!(real_math @pick);

/// The precision math is carried out in: `f32` (for f32, f16, bf16) or
/// `f64`.
pub trait Real:
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
    /// `0`.
    const ZERO: Self;
    /// `1`.
    const ONE: Self;
    /// `v` rounded to this precision.
    fn from_f64(v: f64) -> Self;
    /// `n` as this precision.
    fn from_usize(n: usize) -> Self;
    /// The value as an `f64` (exact).
    fn as_f64(self) -> f64;
    /// `e^x`.
    fn exp(self) -> Self;
    /// Natural logarithm.
    fn ln(self) -> Self;
    /// Hyperbolic tangent.
    fn tanh(self) -> Self;
    /// Sine; `lanes` evaluates it where the precision has a block path.
    fn sin(self, lanes: &mut Lanes) -> Self;
    /// Cosine, like [`Real::sin`].
    fn cos(self, lanes: &mut Lanes) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// `|x|`.
    fn abs(self) -> Self;
    /// True for NaN.
    fn is_nan(self) -> bool;
    /// Rounds toward zero.
    fn trunc(self) -> Self;
    /// Nearest integer, halves to even.
    fn round(self) -> Self;
    /// `x^o`.
    fn powf(self, o: Self) -> Self;
    tensorfn_core::for_each_unary_op!(real_math @decl);
}

macro_rules! real {
    ($t:ty, $m:ident, $math:ident, |$lanes:ident, $x:ident| $sin:expr, $cos:expr) => {
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
            #[inline]
            fn as_f64(self) -> f64 {
                self as f64
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
            #[inline]
            fn trunc(self) -> Self {
                <$t>::trunc(self)
            }
            #[inline]
            fn round(self) -> Self {
                <$t>::round_ties_even(self)
            }
            #[inline]
            fn powf(self, o: Self) -> Self {
                <$t>::powf(self, o)
            }
            tensorfn_core::for_each_unary_op!(real_math @$math);
        }
    };
}
// f32 (and f16/bf16, computed in f32) use the vectorisable functions the
// generated fused kernels use too; f64 keeps the C library's, which the
// catalogue's references call.
real!(f32, vmath, f32, |lanes, x| lanes.sin(x), lanes.cos(x));
real!(f64, f64, f64, |_lanes, x| x.sin(), x.cos());

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
pub trait CpuNum: NumDType {
    /// True for integer dtypes (wrapping arithmetic, division can fail).
    const IS_INT: bool;
    /// `self + o` (integers wrap).
    fn add(self, o: Self) -> Self;
    /// `self - o` (integers wrap).
    fn sub(self, o: Self) -> Self;
    /// `self * o` (integers wrap).
    fn mul(self, o: Self) -> Self;
    /// Integer division truncates toward zero; the caller rules out 0.
    fn div(self, o: Self) -> Self;
    /// Integer powers wrap; the caller rules out negative exponents.
    fn pow(self, o: Self) -> Self;
    /// `max` propagating NaN.
    fn maximum(self, o: Self) -> Self;
    /// `min` propagating NaN.
    fn minimum(self, o: Self) -> Self;
    /// `-self` (integers wrap).
    fn neg(self) -> Self;
    /// `|x|`.
    fn abs(self) -> Self;
    /// `max(self, 0)`, NaN kept.
    fn relu(self) -> Self;
    /// `self * self`.
    fn square(self) -> Self;
    /// True for 0.
    fn is_zero(self) -> bool;
    /// True below 0.
    fn is_negative(self) -> bool;
    /// `op(self)`, for an op the dtype has (floats: any; integers: those
    /// without [`UnaryOp::needs_float`]; the callers check).
    fn num_unary(self, op: UnaryOp) -> Self;
    /// `op(self, o)`, for an op the dtype has (the callers check).
    fn num_binary(self, op: BinaryOp, o: Self) -> Self;
}

/// A floating-point dtype with the precision its math is done in.
pub trait CpuFloat: CpuNum {
    /// The precision math is done in.
    type Acc: Real;
    /// The value in [`CpuFloat::Acc`].
    fn to_acc(self) -> Self::Acc;
    /// `a` rounded to this dtype once.
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
            #[inline(always)]
            fn num_unary(self, op: UnaryOp) -> Self {
                match op {
                    UnaryOp::Neg => CpuNum::neg(self),
                    UnaryOp::Abs => CpuNum::abs(self),
                    UnaryOp::Relu => self.relu(),
                    UnaryOp::Square => self.square(),
                    #[allow(unused_comparisons)]
                    UnaryOp::Sign => {
                        if self > 0 {
                            1
                        } else if self < 0 {
                            (0 as Self).wrapping_sub(1)
                        } else {
                            0
                        }
                    }
                    // Integers are integral already; float-only ops never
                    // reach an integer (the callers check).
                    _ => self,
                }
            }
            #[inline(always)]
            fn num_binary(self, op: BinaryOp, o: Self) -> Self {
                match op {
                    BinaryOp::Add => CpuNum::add(self, o),
                    BinaryOp::Sub => CpuNum::sub(self, o),
                    BinaryOp::Mul => CpuNum::mul(self, o),
                    BinaryOp::Div => CpuNum::div(self, o),
                    BinaryOp::Max => self.maximum(o),
                    BinaryOp::Min => self.minimum(o),
                    BinaryOp::Pow => CpuNum::pow(self, o),
                    // Float-only ops never reach an integer.
                    _ => self,
                }
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
            #[inline(always)]
            fn num_unary(self, op: UnaryOp) -> Self {
                Self::from_acc(float_unary(op, self.to_acc(), &mut Lanes::exact()))
            }
            #[inline(always)]
            fn num_binary(self, op: BinaryOp, o: Self) -> Self {
                match op {
                    // Exact: no trip through the accumulation precision.
                    BinaryOp::Max => max_nan(self, o),
                    BinaryOp::Min => min_nan(self, o),
                    _ => Self::from_acc(float_binary(
                        op,
                        self.to_acc(),
                        o.to_acc(),
                        &mut Lanes::exact(),
                    )),
                }
            }
        }
    };
}

float_num!(f32, f32, |a| a, |b| b);
float_num!(f64, f64, |a| a, |b| b);
float_num!(f16, f32, |a| a.to_f32(), |b| f16::from_f32(b));
float_num!(bf16, f32, |a| a.to_f32(), |b| bf16::from_f32(b));

/// Values of one precision as [`ElemMath`] values, so that a composite op
/// of the catalogue runs its one definition here too, each primitive it
/// uses through [`float_unary`].
pub(crate) struct Values<'l, A> {
    lanes: &'l mut Lanes,
    precision: PhantomData<A>,
}

impl<'l, A> Values<'l, A> {
    #[inline(always)]
    fn new(lanes: &'l mut Lanes) -> Self {
        Values {
            lanes,
            precision: PhantomData,
        }
    }
}

impl<A: Real> ElemMath for Values<'_, A> {
    type V = A;
    type B = bool;
    #[inline(always)]
    fn lit(&mut self, _like: A, v: f64) -> A {
        A::from_f64(v)
    }
    #[inline(always)]
    fn unary(&mut self, op: UnaryOp, x: A) -> A {
        float_unary(op, x, self.lanes)
    }
    #[inline(always)]
    fn binary(&mut self, op: BinaryOp, a: A, b: A) -> A {
        float_binary(op, a, b, self.lanes)
    }
    #[inline(always)]
    fn compare(&mut self, op: CmpOp, a: A, b: A) -> bool {
        op.apply(a, b)
    }
    #[inline(always)]
    fn select(&mut self, c: bool, a: A, b: A) -> A {
        if c {
            a
        } else {
            b
        }
    }
}

/// `op(x)` for a float op, in the accumulation precision of `U`, sine and
/// cosine by `lanes`. Always inlined so that a loop over it, with `op`
/// fixed, vectorises. Composites come from the catalogue's definition,
/// primitives from the functions of [`Real`].
#[inline(always)]
pub fn float_unary<A: Real>(op: UnaryOp, x: A, lanes: &mut Lanes) -> A {
    if let Some(y) = op.composite(&mut Values::new(lanes), x) {
        return y;
    }
    if let Some(y) = math_unary(op, x) {
        return y;
    }
    let one = A::ONE;
    match op {
        UnaryOp::Neg => -x,
        UnaryOp::Abs => x.abs(),
        UnaryOp::Relu => {
            if x < A::ZERO {
                A::ZERO
            } else {
                x
            }
        }
        UnaryOp::Square => x * x,
        UnaryOp::Sigmoid => one / (one + (-x).exp()),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sin => x.sin(lanes),
        UnaryOp::Cos => x.cos(lanes),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Rsqrt => one / x.sqrt(),
        UnaryOp::Recip => one / x,
        UnaryOp::Gelu => {
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
        UnaryOp::Silu => x / (one + (-x).exp()),
        UnaryOp::Trunc => x.trunc(),
        UnaryOp::Round => x.round(),
        // Composites and the ops with math of their own, computed above
        // (with `op` constant in a loop, this arm is compiled away).
        _ => unreachable!("{} is computed from its catalogue entry", op.name()),
    }
}

/// `op(a, b)` for a float op in the accumulation precision `A`: the
/// arithmetic of [`CpuNum`] for the primitives, the catalogue's
/// definition for composites.
#[inline(always)]
pub fn float_binary<A: Real>(op: BinaryOp, a: A, b: A, lanes: &mut Lanes) -> A {
    if let Some(y) = op.composite(&mut Values::new(lanes), a, b) {
        return y;
    }
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Max => max_nan(a, b),
        BinaryOp::Min => min_nan(a, b),
        BinaryOp::Pow => a.powf(b),
        // Composites, computed above.
        BinaryOp::LeakyRelu | BinaryOp::Elu => unreachable!("{} is a composite", op.name()),
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
        let got = float_unary(UnaryOp::Gelu, x as f32, &mut Lanes::exact()) as f64;
        assert!(((got - want) / want).abs() < 1e-5, "{got} vs {want}");
    }

    #[test]
    fn half_rounds_once() {
        let a = f16::from_f32(1.0);
        let b = f16::from_f32(0.000_5);
        assert_eq!(CpuNum::add(a, b), f16::from_f32(1.0 + b.to_f32()));
    }
}
