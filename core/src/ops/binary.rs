//! Functions of two elements: the catalogue's binary ops.
//!
//! Like the unary table, each entry of
//! [`for_each_binary_op!`](crate::for_each_binary_op) is an op's whole
//! definition. Ops whose second operand is a parameter rather than data
//! (`leaky_relu`'s slope, `elu`'s alpha) are binary ops too: the parameter
//! is a scalar operand broadcast over the tensor, so the CPU loops, the
//! built-in GPU kernels and fusion treat it like any other operand.

use super::math::ElemMath;
use super::CmpOp;

/// The binary-op table, handed to `$callback` like
/// [`for_each_unary_op!`](crate::for_each_unary_op).
///
/// ```
/// macro_rules! names {
///     ($($(#[doc = $doc:literal])* $V:ident => $m:ident { $($field:tt)* })*) => {
///         [$(stringify!($m)),*]
///     };
/// }
/// let names = tensorfn_core::for_each_binary_op!(names);
/// assert!(names.contains(&"leaky_relu"));
/// ```
#[macro_export]
macro_rules! for_each_binary_op {
    ($callback:ident) => {
        $callback! {
            /// `a + b` (integers wrap).
            Add => add {
                ints: true, exact: false, symbol: Some("+"), operand: "other",
                reference: |a, b| a + b,
            }
            /// `a - b` (integers wrap).
            Sub => sub {
                ints: true, exact: false, symbol: Some("-"), operand: "other",
                reference: |a, b| a - b,
            }
            /// `a * b` (integers wrap).
            Mul => mul {
                ints: true, exact: false, symbol: Some("*"), operand: "other",
                reference: |a, b| a * b,
            }
            /// `a / b` (integer division truncates toward zero, like Rust).
            Div => div {
                ints: true, exact: false, symbol: Some("/"), operand: "other",
                reference: |a, b| a / b,
            }
            /// `max(a, b)` (NaN if either is NaN, like `torch.maximum`).
            Max => maximum {
                ints: true, exact: true, symbol: None, operand: "other",
                reference: |a, b| if a.is_nan() || b.is_nan() { f64::NAN } else { a.max(b) },
            }
            /// `min(a, b)` (NaN if either is NaN, like `torch.minimum`).
            Min => minimum {
                ints: true, exact: true, symbol: None, operand: "other",
                reference: |a, b| if a.is_nan() || b.is_nan() { f64::NAN } else { a.min(b) },
            }
            /// `a ^ b` (floats only).
            Pow => pow {
                ints: false, exact: false, symbol: None, operand: "exponent",
                reference: |a, b| a.powf(b),
            }
            /// `x` where `x > 0`, else `negative_slope * x` (PyTorch's
            /// `leaky_relu`; the slope is usually a scalar, 0.01 by default).
            LeakyRelu => leaky_relu {
                ints: false, exact: false, symbol: None, operand: "negative_slope",
                reference: |x, s| if x > 0.0 { x } else { x * s },
                composite: |m, x, s| {
                    let zero = m.lit(x, 0.0);
                    let pos = m.compare(CmpOp::Gt, x, zero);
                    let scaled = m.binary(BinaryOp::Mul, x, s);
                    m.select(pos, x, scaled)
                },
            }
            /// `x` where `x > 0`, else `alpha * (e^x - 1)` (PyTorch's `elu`;
            /// `alpha` is usually a scalar, 1 by default).
            Elu => elu {
                ints: false, exact: false, symbol: None, operand: "alpha",
                reference: |x, a| if x > 0.0 { x } else { a * x.exp_m1() },
                composite: |m, x, a| {
                    let zero = m.lit(x, 0.0);
                    let pos = m.compare(CmpOp::Gt, x, zero);
                    let e = m.unary($crate::ops::UnaryOp::Expm1, x);
                    let scaled = m.binary(BinaryOp::Mul, a, e);
                    m.select(pos, x, scaled)
                },
            }
        }
    };
}

macro_rules! define_binary_op {
    ($(
        $(#[doc = $doc:literal])*
        $V:ident => $m:ident {
            ints: $ints:literal, exact: $exact:literal, symbol: $symbol:expr, operand: $operand:literal,
            reference: |$ra:ident, $rb:ident| $reference:expr,
            $(composite: |$cm:ident, $ca:ident, $cb:ident| $composite:block,)?
        }
    )*) => {
        op_enum! {
            /// A function of two elements (see the [module docs](self)).
            ///
            /// ```
            /// use tensorfn_core::ops::BinaryOp;
            /// assert_eq!(BinaryOp::Sub.eval_f64(5.0, 2.0), 3.0);
            /// assert_eq!(BinaryOp::Max.symbol(), None);
            /// ```
            BinaryOp {
                $($(#[doc = $doc])* $V => $m),*
            }
        }

        impl BinaryOp {
            /// The Rust operator, for the four arithmetic ops.
            ///
            /// ```
            /// use tensorfn_core::ops::BinaryOp;
            /// assert_eq!(BinaryOp::Div.symbol(), Some("/"));
            /// assert_eq!(BinaryOp::Pow.symbol(), None);
            /// ```
            pub const fn symbol(self) -> Option<&'static str> {
                match self {
                    $(BinaryOp::$V => $symbol,)*
                }
            }

            /// PyTorch's name for the second operand (`other`,
            /// `exponent`, `negative_slope`, `alpha`).
            ///
            /// ```
            /// use tensorfn_core::ops::BinaryOp;
            /// assert_eq!(BinaryOp::LeakyRelu.operand(), "negative_slope");
            /// ```
            pub const fn operand(self) -> &'static str {
                match self {
                    $(BinaryOp::$V => $operand,)*
                }
            }

            /// True for ops defined only on floating-point dtypes.
            ///
            /// ```
            /// use tensorfn_core::ops::BinaryOp;
            /// assert!(BinaryOp::Pow.needs_float());
            /// assert!(!BinaryOp::Max.needs_float());
            /// ```
            pub const fn needs_float(self) -> bool {
                match self {
                    $(BinaryOp::$V => !$ints,)*
                }
            }

            /// True for ops whose exact result is one of the operands, so a
            /// 16-bit result needs no rounding.
            ///
            /// ```
            /// use tensorfn_core::ops::BinaryOp;
            /// assert!(BinaryOp::Min.is_exact());
            /// assert!(!BinaryOp::Add.is_exact());
            /// ```
            pub const fn is_exact(self) -> bool {
                match self {
                    $(BinaryOp::$V => $exact,)*
                }
            }

            /// The op in `f64`, the reference every back-end is tested
            /// against.
            ///
            /// ```
            /// use tensorfn_core::ops::BinaryOp;
            /// assert_eq!(BinaryOp::Pow.eval_f64(2.0, 10.0), 1024.0);
            /// assert!(BinaryOp::Max.eval_f64(1.0, f64::NAN).is_nan()); // unlike f64::max
            /// assert_eq!(BinaryOp::LeakyRelu.eval_f64(-2.0, 0.1), -0.2);
            /// ```
            pub fn eval_f64(self, a: f64, b: f64) -> f64 {
                match self {
                    $(BinaryOp::$V => {
                        let ($ra, $rb) = (a, b);
                        $reference
                    })*
                }
            }

            /// The op's definition over other ops, for composites; `None`
            /// for a primitive.
            ///
            /// ```
            /// use tensorfn_core::ops::{math::F64Math, BinaryOp};
            /// assert_eq!(BinaryOp::LeakyRelu.composite(&mut F64Math, -3.0, 0.5), Some(-1.5));
            /// assert!(BinaryOp::Add.composite(&mut F64Math, 1.0, 2.0).is_none());
            /// ```
            #[inline(always)]
            pub fn composite<M: ElemMath>(self, m: &mut M, a: M::V, b: M::V) -> Option<M::V> {
                match self {
                    $($(BinaryOp::$V => {
                        let ($cm, $ca, $cb) = (m, a, b);
                        Some($composite)
                    })?)*
                    #[allow(unreachable_patterns)]
                    _ => None,
                }
            }
        }
    };
}

crate::for_each_binary_op!(define_binary_op);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::math::F64Math;

    #[test]
    fn composites_agree_with_their_references() {
        let edges = [
            0.0,
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            0.5,
            -2.0,
            3.0,
            -1e-300,
        ];
        for op in BinaryOp::ALL {
            for a in edges
                .iter()
                .copied()
                .chain((0..100).map(|i| -10.0 + 0.2 * i as f64))
            {
                for b in [0.01, 0.2, 1.0, 1.5, f64::NAN, 0.0] {
                    if let Some(got) = op.composite(&mut F64Math, a, b) {
                        let want = op.eval_f64(a, b);
                        let ok = (got.is_nan() && want.is_nan()) || got.to_bits() == want.to_bits();
                        assert!(ok, "{}({a}, {b}) = {got}, reference {want}", op.name());
                    }
                }
            }
        }
    }

    #[test]
    fn parameters_follow_pytorch() {
        assert_eq!(BinaryOp::LeakyRelu.eval_f64(2.0, 0.01), 2.0);
        assert!(BinaryOp::LeakyRelu.eval_f64(f64::NAN, 0.01).is_nan());
        assert_eq!(BinaryOp::Elu.eval_f64(f64::NEG_INFINITY, 1.0), -1.0);
        assert_eq!(
            BinaryOp::Elu.eval_f64(-0.0, 1.0).to_bits(),
            (-0.0f64).to_bits()
        );
    }
}
