//! Functions of a whole row: the catalogue's row ops (`softmax`,
//! `log_softmax`, `logsumexp`), each computed along one dim of a float
//! tensor.
//!
//! Each entry of the table in [`for_each_row_op!`](crate::for_each_row_op)
//! is the op's description: its name (the function and the method of
//! `tensor_fn!` and the typed API, with PyTorch's parameters `input, dim`),
//! its dtype rule, what it does to the dim (keeps it, like `softmax`, or
//! removes it), what it returns along a dim of size 1 (for the macro's
//! message), its `f64` reference for one row, and the slot for its
//! derivative. The enum [`RowOp`] and its methods below, the catalogue
//! entries, the macro's checker and expansion, the `Backend` method, the
//! interpreter and the runtime's typed methods are derived from the table;
//! each back-end writes the op's row loop or row kernel itself (the CPU's
//! row loops, the PTX row kernels).

use super::{DTypeRule, Derivative};

/// The row-op table, handed to the macro `$callback` (which receives any
/// tokens given after its name, then every entry: see the syntax below).
/// `tensorfn-core` derives [`RowOp`] and the catalogue's entries from it;
/// the runtime derives its typed methods (`x.softmax::<1>()`, ...).
///
/// ```
/// macro_rules! names {
///     ($($(#[doc = $doc:literal])* $V:ident => $m:ident { $($field:tt)* })*) => {
///         [$(stringify!($m)),*]
///     };
/// }
/// let names = tensorfn_core::for_each_row_op!(names);
/// assert!(names.contains(&"log_softmax"));
/// assert_eq!(names.len(), tensorfn_core::ops::RowOp::ALL.len());
/// ```
#[macro_export]
macro_rules! for_each_row_op {
    ($callback:ident $($arg:tt)*) => {
        $callback! {
            $($arg)*
            /// `exp(x) / sum(exp(x))` along `dim`.
            Softmax => softmax {
                dtype: SameFloat, shape: Keep,
                size_one: "every value it returns is 1",
                reference: |row| {
                    let m = $crate::ops::rows::row_max(row);
                    let s = $crate::ops::rows::exp_sum(row, m);
                    row.iter().map(|v| (v - m).exp() / s).collect()
                },
                derivative: Rule,
            }
            /// `x - log(sum(exp(x)))` along `dim`.
            LogSoftmax => log_softmax {
                dtype: SameFloat, shape: Keep,
                size_one: "every value it returns is 0",
                reference: |row| {
                    let m = $crate::ops::rows::row_max(row);
                    let ls = $crate::ops::rows::exp_sum(row, m).ln();
                    row.iter().map(|v| (v - m) - ls).collect()
                },
                derivative: Rule,
            }
            /// `log(sum(exp(x)))` along `dim`, which is removed (PyTorch's
            /// `logsumexp` with `keepdim=False`): `-inf` for an empty or an
            /// all `-inf` row, `+inf` with a `+inf`, NaN with a NaN.
            LogSumExp => logsumexp {
                dtype: SameFloat, shape: Reduce,
                size_one: "it returns the input's values unchanged",
                reference: |row| {
                    // An infinite max shifts by 0, as PyTorch does:
                    // `x - max` would be NaN.
                    let m = $crate::ops::rows::row_max(row);
                    let shift = if m.is_infinite() { 0.0 } else { m };
                    vec![$crate::ops::rows::exp_sum(row, shift).ln() + shift]
                },
                derivative: Rule,
            }
        }
    };
}

/// What a row op does to its dim.
///
/// ```
/// use tensorfn_core::ops::{RowOp, RowShape};
/// assert_eq!(RowOp::Softmax.shape(), RowShape::Keep);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RowShape {
    /// One output per element: the result has the input's dims.
    Keep,
    /// One output per row: the dim is removed (PyTorch's `keepdim=False`).
    Reduce,
}

/// The largest element of `row`, NaN if any is NaN, `-inf` for an empty
/// row: the shift the stable references subtract before `exp`.
///
/// ```
/// use tensorfn_core::ops::rows::row_max;
/// assert_eq!(row_max(&[1.0, 3.0, 2.0]), 3.0);
/// assert!(row_max(&[1.0, f64::NAN]).is_nan());
/// assert_eq!(row_max(&[]), f64::NEG_INFINITY);
/// ```
pub fn row_max(row: &[f64]) -> f64 {
    if row.iter().any(|v| v.is_nan()) {
        return f64::NAN;
    }
    row.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

/// `sum(exp(x - shift))` over `row`: the sum the stable references take
/// the log of or divide by.
///
/// ```
/// use tensorfn_core::ops::rows::exp_sum;
/// assert_eq!(exp_sum(&[1.0, 1.0], 1.0), 2.0);
/// assert_eq!(exp_sum(&[], 0.0), 0.0);
/// ```
pub fn exp_sum(row: &[f64], shift: f64) -> f64 {
    row.iter().map(|v| (v - shift).exp()).sum()
}

macro_rules! define_row_op {
    ($(
        $(#[doc = $doc:literal])*
        $V:ident => $m:ident {
            dtype: $dtype:ident, shape: $shape:ident,
            size_one: $size_one:literal,
            reference: |$rx:ident| $reference:block,
            derivative: $derivative:ident,
        }
    )*) => {
        op_enum! {
            /// A function of a whole row along one dim (see the
            /// [module docs](self)).
            ///
            /// ```
            /// use tensorfn_core::ops::RowOp;
            /// assert_eq!(RowOp::LogSoftmax.name(), "log_softmax");
            /// assert_eq!(RowOp::from_name("softmax"), Some(RowOp::Softmax));
            /// ```
            RowOp {
                $($(#[doc = $doc])* $V => $m),*
            }
        }

        impl RowOp {
            /// The result's dtype.
            ///
            /// ```
            /// use tensorfn_core::ops::{DTypeRule, RowOp};
            /// assert_eq!(RowOp::Softmax.dtype(), DTypeRule::SameFloat);
            /// ```
            pub const fn dtype(self) -> DTypeRule {
                match self {
                    $(RowOp::$V => DTypeRule::$dtype,)*
                }
            }

            /// Whether the op keeps its dim or removes it.
            ///
            /// ```
            /// use tensorfn_core::ops::{RowOp, RowShape};
            /// assert_eq!(RowOp::LogSoftmax.shape(), RowShape::Keep);
            /// ```
            pub const fn shape(self) -> RowShape {
                match self {
                    $(RowOp::$V => RowShape::$shape,)*
                }
            }

            /// What the op returns along a dim of size 1, where it is of no
            /// use (the macro reports such a call).
            ///
            /// ```
            /// use tensorfn_core::ops::RowOp;
            /// assert!(RowOp::Softmax.size_one().contains("1"));
            /// ```
            pub const fn size_one(self) -> &'static str {
                match self {
                    $(RowOp::$V => $size_one,)*
                }
            }

            /// The slot for the op's derivative.
            ///
            /// ```
            /// use tensorfn_core::ops::{Derivative, RowOp};
            /// assert_eq!(RowOp::Softmax.derivative(), Derivative::Rule);
            /// ```
            pub const fn derivative(self) -> Derivative {
                match self {
                    $(RowOp::$V => Derivative::$derivative,)*
                }
            }

            /// The op on one row in `f64`, the reference every back-end is
            /// tested against: one value per element, or one value for
            /// the row when the op removes its dim.
            ///
            /// ```
            /// use tensorfn_core::ops::RowOp;
            /// assert_eq!(RowOp::Softmax.eval_f64(&[1.0, 1.0]), vec![0.5, 0.5]);
            /// assert!(RowOp::Softmax.eval_f64(&[0.0, f64::NAN]).iter().all(|v| v.is_nan()));
            /// ```
            pub fn eval_f64(self, row: &[f64]) -> Vec<f64> {
                match self {
                    $(RowOp::$V => {
                        let $rx = row;
                        $reference
                    })*
                }
            }
        }
    };
}

crate::for_each_row_op!(define_row_op);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_give_one_value_per_element_or_per_row() {
        let row = [0.5, -1.0, 2.0];
        for op in RowOp::ALL {
            let n = op.eval_f64(&row).len();
            match op.shape() {
                RowShape::Keep => assert_eq!(n, row.len(), "{}", op.name()),
                RowShape::Reduce => assert_eq!(n, 1, "{}", op.name()),
            }
        }
    }

    #[test]
    fn logsumexp_follows_pytorch_at_the_edges() {
        let lse = |row: &[f64]| RowOp::LogSumExp.eval_f64(row)[0];
        let inf = f64::INFINITY;
        assert_eq!(lse(&[]), -inf);
        assert_eq!(lse(&[-inf, -inf]), -inf);
        assert_eq!(lse(&[-inf, 2.0]), 2.0);
        assert_eq!(lse(&[inf, 1.0, -inf]), inf);
        assert!(lse(&[inf, f64::NAN]).is_nan());
        assert!((lse(&[0.0, -0.0]) - 2f64.ln()).abs() < 1e-15);
        assert!((lse(&[1000.0, 1000.0]) - (1000.0 + 2f64.ln())).abs() < 1e-12);
    }

    #[test]
    fn references_are_shift_invariant_where_they_should_be() {
        // Softmax does not see a constant added to the row.
        let a = RowOp::Softmax.eval_f64(&[1.0, 2.0, 3.0]);
        let b = RowOp::Softmax.eval_f64(&[1001.0, 1002.0, 1003.0]);
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() < 1e-12);
        }
    }
}
