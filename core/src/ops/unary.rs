//! Functions of one element: the catalogue's unary ops.
//!
//! Each entry of the table in [`for_each_unary_op!`](crate::for_each_unary_op)
//! is the whole definition of an op: its name (the function and method
//! `tensor_fn!` and the typed API accept), whether integers have it,
//! whether its result is exact in the input's dtype, the range its tests
//! draw inputs from, its `f64` reference, and, for a composite, its
//! definition over [`ElemMath`], or, for an op with math of its own, the
//! name of its functions (`math: erf`). The enum and its methods below,
//! the runtime's typed methods, the CPU loops and the PTX lowering are all
//! derived from that table. An op with `math: f` runs `f` from each
//! back-end's math library: the PTX expansion `f` of the kernels' `mathfn`
//! module, the vectorisable `f32` function `f` of the runtime's CPU math
//! (which 16-bit dtypes use too), and its `f64` reference on the CPU in
//! `f64`. The oldest ops (`exp`, `sin`, `gelu`, ...) predate that field and
//! are written out in each back-end.

use super::math::ElemMath;
use super::{BinaryOp, CmpOp};

/// The unary-op table, handed to the macro `$callback` (which receives
/// any tokens given after its name, then every entry: see the syntax
/// below). `tensorfn-core` derives
/// [`UnaryOp`] from it; the runtime derives its typed methods
/// (`x.gelu()`, ...) from it.
///
/// ```
/// macro_rules! names {
///     ($($(#[doc = $doc:literal])* $V:ident => $m:ident { $($field:tt)* })*) => {
///         [$(stringify!($m)),*]
///     };
/// }
/// let names = tensorfn_core::for_each_unary_op!(names);
/// assert!(names.contains(&"softplus"));
/// assert_eq!(names.len(), tensorfn_core::ops::UnaryOp::ALL.len());
/// ```
#[macro_export]
macro_rules! for_each_unary_op {
    ($callback:ident $($arg:tt)*) => {
        $callback! {
            $($arg)*
            /// `-x` (integers wrap: `-i32::MIN == i32::MIN`, `-1u8 == 255`).
            Neg => neg {
                ints: true, exact: true, domain: (-6.0, 6.0),
                reference: |x| -x,
            }
            /// `|x|`.
            Abs => abs {
                ints: true, exact: true, domain: (-6.0, 6.0),
                reference: |x| x.abs(),
            }
            /// `max(x, 0)` (NaN stays NaN, like `torch.relu`).
            Relu => relu {
                ints: true, exact: true, domain: (-6.0, 6.0),
                reference: |x| if x.is_nan() { x } else { x.max(0.0) },
            }
            /// `1 / (1 + e^-x)`.
            Sigmoid => sigmoid {
                ints: false, exact: false, domain: (-20.0, 20.0),
                reference: |x| 1.0 / (1.0 + (-x).exp()),
            }
            /// Hyperbolic tangent.
            Tanh => tanh {
                ints: false, exact: false, domain: (-6.0, 6.0),
                reference: |x| x.tanh(),
            }
            /// `e^x`.
            Exp => exp {
                ints: false, exact: false, domain: (-8.0, 8.0),
                reference: |x| x.exp(),
            }
            /// Natural logarithm (NaN below 0, -inf at 0).
            Log => log {
                ints: false, exact: false, domain: (0.05, 20.0),
                reference: |x| x.ln(),
            }
            /// Sine.
            Sin => sin {
                ints: false, exact: false, domain: (-10.0, 10.0),
                reference: |x| x.sin(),
            }
            /// Cosine.
            Cos => cos {
                ints: false, exact: false, domain: (-10.0, 10.0),
                reference: |x| x.cos(),
            }
            /// Square root (NaN below 0).
            Sqrt => sqrt {
                ints: false, exact: false, domain: (0.05, 20.0),
                reference: |x| x.sqrt(),
            }
            /// `1 / sqrt(x)`.
            Rsqrt => rsqrt {
                ints: false, exact: false, domain: (0.05, 20.0),
                reference: |x| 1.0 / x.sqrt(),
            }
            /// `x * x` (integers wrap).
            Square => square {
                ints: true, exact: false, domain: (-6.0, 6.0),
                reference: |x| x * x,
            }
            /// `1 / x`.
            Recip => recip {
                ints: false, exact: false, domain: (0.5, 4.0),
                reference: |x| 1.0 / x,
            }
            /// GELU, tanh approximation (PyTorch's `gelu(x, approximate='tanh')`);
            /// [`gelu_erf`](UnaryOp::GeluErf) is the exact form.
            Gelu => gelu {
                ints: false, exact: false, domain: (-6.0, 6.0),
                // 0.5 x (1 + tanh(u)) = x sigmoid(2u), written without the
                // cancellation of 1 + tanh(u) for negative x.
                reference: |x| {
                    let c = (2.0 / ::core::f64::consts::PI).sqrt();
                    let u2 = 2.0 * c * (x + 0.044715 * x * x * x);
                    if u2 >= 0.0 {
                        x / (1.0 + (-u2).exp())
                    } else {
                        let e = u2.exp();
                        x * e / (1.0 + e)
                    }
                },
            }
            /// `x * sigmoid(x)` (SiLU, swish).
            Silu => silu {
                ints: false, exact: false, domain: (-20.0, 20.0),
                reference: |x| x / (1.0 + (-x).exp()),
            }
            /// The error function, `2/sqrt(pi) * integral of e^(-t^2) from 0 to x`.
            Erf => erf {
                ints: false, exact: false, domain: (-5.0, 5.0),
                reference: |x| $crate::ops::libm::erf(x),
                math: erf,
            }
            /// The complementary error function `1 - erf(x)`, accurate where
            /// it is tiny (`x` large) rather than computed as that difference.
            Erfc => erfc {
                ints: false, exact: false, domain: (-4.0, 10.0),
                reference: |x| $crate::ops::libm::erfc(x),
                math: erfc,
            }
            /// `e^x - 1`, accurate near 0.
            Expm1 => expm1 {
                ints: false, exact: false, domain: (-8.0, 8.0),
                reference: |x| x.exp_m1(),
                math: expm1,
            }
            /// `ln(1 + x)`, accurate near 0 (NaN below -1, -inf at -1).
            Log1p => log1p {
                ints: false, exact: false, domain: (-0.95, 20.0),
                reference: |x| x.ln_1p(),
                math: log1p,
            }
            /// Rounds toward zero (integers are unchanged).
            Trunc => trunc {
                ints: true, exact: true, domain: (-100.0, 100.0),
                reference: |x| x.trunc(),
            }
            /// Rounds to the nearest integer, halves to even, like
            /// `torch.round` (integers are unchanged).
            Round => round {
                ints: true, exact: true, domain: (-100.0, 100.0),
                reference: |x| x.round_ties_even(),
            }
            /// Rounds toward -inf (integers are unchanged).
            Floor => floor {
                ints: true, exact: true, domain: (-100.0, 100.0),
                reference: |x| x.floor(),
                // trunc(x) - 1 where truncation went up (negative
                // non-integers); exact, and keeps -0, infinities and NaN.
                composite: |m, x| {
                    let t = m.unary(UnaryOp::Trunc, x);
                    let up = m.compare(CmpOp::Gt, t, x);
                    let one = m.lit(x, 1.0);
                    let t1 = m.binary(BinaryOp::Sub, t, one);
                    m.select(up, t1, t)
                },
            }
            /// Rounds toward +inf (integers are unchanged).
            Ceil => ceil {
                ints: true, exact: true, domain: (-100.0, 100.0),
                reference: |x| x.ceil(),
                composite: |m, x| {
                    let t = m.unary(UnaryOp::Trunc, x);
                    let down = m.compare(CmpOp::Lt, t, x);
                    let one = m.lit(x, 1.0);
                    let t1 = m.binary(BinaryOp::Add, t, one);
                    m.select(down, t1, t)
                },
            }
            /// -1, 0 or 1 by the sign of `x`; `sign(±0) = ±0` and
            /// `sign(NaN) = NaN`.
            Sign => sign {
                ints: true, exact: true, domain: (-3.0, 3.0),
                reference: |x| if x > 0.0 { 1.0 } else if x < 0.0 { -1.0 } else { x },
                composite: |m, x| {
                    let zero = m.lit(x, 0.0);
                    let pos = m.compare(CmpOp::Gt, x, zero);
                    let neg = m.compare(CmpOp::Lt, x, zero);
                    let one = m.lit(x, 1.0);
                    let minus_one = m.lit(x, -1.0);
                    let s = m.select(neg, minus_one, x);
                    m.select(pos, one, s)
                },
            }
            /// `ln(1 + e^x)`, and `x` itself above 20 (PyTorch's `softplus`
            /// with `beta = 1`, `threshold = 20`).
            Softplus => softplus {
                ints: false, exact: false, domain: (-30.0, 30.0),
                reference: |x| if x > 20.0 { x } else { x.exp().ln_1p() },
                composite: |m, x| {
                    let threshold = m.lit(x, 20.0);
                    let linear = m.compare(CmpOp::Gt, x, threshold);
                    let e = m.unary(UnaryOp::Exp, x);
                    let l = m.unary(UnaryOp::Log1p, e);
                    m.select(linear, x, l)
                },
            }
            /// GELU, exact form `x/2 (1 + erf(x/sqrt(2)))` (PyTorch's default
            /// `gelu`), computed as `x/2 erfc(-x/sqrt(2))`, which keeps its
            /// accuracy for negative `x` where `1 + erf` cancels.
            GeluErf => gelu_erf {
                ints: false, exact: false, domain: (-6.0, 6.0),
                reference: |x| 0.5 * x * $crate::ops::libm::erfc(-x * ::core::f64::consts::FRAC_1_SQRT_2),
                math: gelu_erf,
            }
        }
    };
}

macro_rules! define_unary_op {
    ($(
        $(#[doc = $doc:literal])*
        $V:ident => $m:ident {
            ints: $ints:literal, exact: $exact:literal, domain: ($lo:expr, $hi:expr),
            reference: |$rx:ident| $reference:expr,
            $(composite: |$cm:ident, $cx:ident| $composite:block,)?
            $(math: $mf:ident,)?
        }
    )*) => {
        op_enum! {
            /// A function of one element (see the [module docs](self)).
            ///
            /// ```
            /// use tensorfn_core::ops::UnaryOp;
            /// assert_eq!(UnaryOp::Sigmoid.name(), "sigmoid");
            /// assert!(UnaryOp::Exp.needs_float());
            /// assert!(!UnaryOp::Neg.needs_float());
            /// ```
            UnaryOp {
                $($(#[doc = $doc])* $V => $m),*
            }
        }

        impl UnaryOp {
            /// True for ops defined only on floating-point dtypes.
            ///
            /// ```
            /// use tensorfn_core::ops::UnaryOp;
            /// assert!(UnaryOp::Sqrt.needs_float());
            /// assert!(!UnaryOp::Square.needs_float()); // integers square too
            /// assert!(!UnaryOp::Floor.needs_float()); // and round (to themselves)
            /// ```
            pub const fn needs_float(self) -> bool {
                match self {
                    $(UnaryOp::$V => !$ints,)*
                }
            }

            /// True for ops whose exact result is a value of the input's
            /// dtype, so a 16-bit result needs no rounding.
            ///
            /// ```
            /// use tensorfn_core::ops::UnaryOp;
            /// assert!(UnaryOp::Floor.is_exact());
            /// assert!(!UnaryOp::Exp.is_exact());
            /// ```
            pub const fn is_exact(self) -> bool {
                match self {
                    $(UnaryOp::$V => $exact,)*
                }
            }

            /// The range tests draw finite inputs from: where the op is
            /// defined and its result is neither tiny nor overflowing.
            ///
            /// ```
            /// use tensorfn_core::ops::UnaryOp;
            /// let (lo, _) = UnaryOp::Log.test_domain();
            /// assert!(lo > 0.0);
            /// ```
            pub fn test_domain(self) -> (f64, f64) {
                match self {
                    $(UnaryOp::$V => ($lo, $hi),)*
                }
            }

            /// The op in `f64`, the reference every back-end is tested
            /// against.
            ///
            /// ```
            /// use tensorfn_core::ops::UnaryOp;
            /// assert_eq!(UnaryOp::Relu.eval_f64(-2.0), 0.0);
            /// assert!(UnaryOp::Relu.eval_f64(f64::NAN).is_nan());
            /// assert!((UnaryOp::Sigmoid.eval_f64(0.0) - 0.5).abs() < 1e-15);
            /// assert!((UnaryOp::Gelu.eval_f64(10.0) - 10.0).abs() < 1e-12);
            /// assert_eq!(UnaryOp::Round.eval_f64(2.5), 2.0); // halves to even
            /// assert_eq!(UnaryOp::Floor.eval_f64(-0.5), -1.0);
            /// ```
            pub fn eval_f64(self, x: f64) -> f64 {
                match self {
                    $(UnaryOp::$V => {
                        let $rx = x;
                        $reference
                    })*
                }
            }

            /// The op's definition over other ops, for composites; `None`
            /// for a primitive, which each back-end expands itself.
            ///
            /// ```
            /// use tensorfn_core::ops::{math::F64Math, UnaryOp};
            /// assert_eq!(UnaryOp::Floor.composite(&mut F64Math, -2.5), Some(-3.0));
            /// assert_eq!(UnaryOp::Sign.composite(&mut F64Math, -0.0).map(f64::to_bits), Some((-0.0f64).to_bits()));
            /// assert!(UnaryOp::Exp.composite(&mut F64Math, 1.0).is_none());
            /// ```
            #[inline(always)]
            pub fn composite<M: ElemMath>(self, m: &mut M, x: M::V) -> Option<M::V> {
                match self {
                    $($(UnaryOp::$V => {
                        let ($cm, $cx) = (m, x);
                        Some($composite)
                    })?)*
                    #[allow(unreachable_patterns)]
                    _ => None,
                }
            }
        }
    };
}

crate::for_each_unary_op!(define_unary_op);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::math::F64Math;

    /// Inputs every op is checked on: the edges and a sweep of its domain.
    fn inputs(op: UnaryOp) -> Vec<f64> {
        let (lo, hi) = op.test_domain();
        let mut v = vec![
            0.0,
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            0.5,
            -0.5,
            1.5,
            -2.5,
            1e-300,
            -1e-300,
        ];
        v.extend((0..=400).map(|i| lo + (hi - lo) * i as f64 / 400.0));
        v
    }

    fn same(a: f64, b: f64) -> bool {
        (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits() || (a - b).abs() <= 4e-16 * b.abs()
    }

    #[test]
    fn composites_agree_with_their_references() {
        for op in UnaryOp::ALL {
            for x in inputs(op) {
                if let Some(got) = op.composite(&mut F64Math, x) {
                    let want = op.eval_f64(x);
                    assert!(
                        same(got, want),
                        "{}({x}) = {got}, reference {want}",
                        op.name()
                    );
                }
            }
        }
    }

    #[test]
    fn exact_ops_give_integers_or_the_input() {
        for op in UnaryOp::ALL.into_iter().filter(|op| op.is_exact()) {
            for x in inputs(op) {
                let y = op.eval_f64(x);
                assert!(y.is_nan() == x.is_nan(), "{}({x})", op.name());
            }
        }
    }

    #[test]
    fn names_are_unique_and_summaries_present() {
        for (i, a) in UnaryOp::ALL.iter().enumerate() {
            assert!(!a.summary().is_empty());
            for b in &UnaryOp::ALL[i + 1..] {
                assert_ne!(a.name(), b.name());
            }
        }
    }

    #[test]
    fn edge_values() {
        use UnaryOp::*;
        assert_eq!(Round.eval_f64(-2.5), -2.0);
        assert_eq!(Round.eval_f64(3.5), 4.0);
        assert_eq!(Ceil.eval_f64(-0.5).to_bits(), (-0.0f64).to_bits());
        assert_eq!(Floor.eval_f64(-0.0).to_bits(), (-0.0f64).to_bits());
        assert_eq!(Expm1.eval_f64(-0.0).to_bits(), (-0.0f64).to_bits());
        assert_eq!(Log1p.eval_f64(-1.0), f64::NEG_INFINITY);
        assert!(Log1p.eval_f64(-2.0).is_nan());
        assert_eq!(Erf.eval_f64(f64::INFINITY), 1.0);
        assert_eq!(Erfc.eval_f64(f64::NEG_INFINITY), 2.0);
        assert_eq!(Softplus.eval_f64(f64::INFINITY), f64::INFINITY);
        assert_eq!(Softplus.eval_f64(f64::NEG_INFINITY), 0.0);
        assert_eq!(GeluErf.eval_f64(f64::INFINITY), f64::INFINITY);
        assert!(Sign.eval_f64(f64::NAN).is_nan());
        // Exact GELU keeps its relative accuracy far into the negative tail.
        let tail = GeluErf.eval_f64(-10.0);
        assert!(tail < 0.0 && tail > -1e-20, "{tail}");
        assert!((tail / -7.619853e-23 - 1.0).abs() < 1e-6, "{tail}");
    }
}
