//! The element-level operations that composite ops are written in.
//!
//! A composite op (softplus, ELU, `floor`, ...) is defined once, as a
//! function generic over [`ElemMath`]; every back-end implements the trait
//! over its own values and so runs the same definition:
//!
//! * the PTX lowering over registers (`tensorfn-kernels`), which is also
//!   what the reference interpreter executes;
//! * the CPU loops of the runtime and the closures `tensor_fn!` generates,
//!   over `f32`/`f64` values (always inlined, so a loop over a composite
//!   still vectorises);
//! * the tests below, over plain `f64`.
//!
//! ```
//! use tensorfn_core::ops::{ElemMath, UnaryOp};
//! use tensorfn_core::ops::math::F64Math;
//! // softplus(x) = log1p(exp(x)) below its threshold of 20, x above it.
//! let y = UnaryOp::Softplus.composite(&mut F64Math, 1.5).unwrap();
//! assert!((y - 1.5f64.exp().ln_1p()).abs() < 1e-15);
//! assert_eq!(UnaryOp::Softplus.composite(&mut F64Math, 30.0), Some(30.0));
//! assert_eq!(UnaryOp::Exp.composite(&mut F64Math, 1.0), None); // a primitive
//! ```

use super::{BinaryOp, CmpOp, UnaryOp};

/// Element arithmetic over a back-end's values: what a composite op's
/// definition may use.
///
/// `V` is a value of the op's dtype (an `f32` register, an `f64`, ...),
/// `B` a boolean. Primitive unary and binary ops go through
/// [`unary`](ElemMath::unary) and [`binary`](ElemMath::binary), so a
/// composite gets each back-end's own accurate expansion of them.
///
/// ```
/// use tensorfn_core::ops::{BinaryOp, CmpOp, ElemMath};
/// use tensorfn_core::ops::math::F64Math;
/// let m = &mut F64Math;
/// let two = m.lit(0.0, 2.0);
/// let big = m.compare(CmpOp::Gt, 3.0, two);
/// assert_eq!(m.select(big, 1.0, -1.0), 1.0);
/// assert_eq!(m.binary(BinaryOp::Mul, two, 4.0), 8.0);
/// ```
pub trait ElemMath {
    /// A value of the op's dtype.
    type V: Copy;
    /// A boolean.
    type B: Copy;
    /// The constant `v` in the dtype of `like`.
    fn lit(&mut self, like: Self::V, v: f64) -> Self::V;
    /// `op(x)` by the back-end's definition of the primitive `op`.
    fn unary(&mut self, op: UnaryOp, x: Self::V) -> Self::V;
    /// `op(a, b)`.
    fn binary(&mut self, op: BinaryOp, a: Self::V, b: Self::V) -> Self::V;
    /// `a op b`.
    fn compare(&mut self, op: CmpOp, a: Self::V, b: Self::V) -> Self::B;
    /// `c ? a : b` (both sides are computed: there is no branch per element).
    fn select(&mut self, c: Self::B, a: Self::V, b: Self::V) -> Self::V;
}

/// [`ElemMath`] over `f64` with the `f64` references of the primitives:
/// composites evaluated in double precision (the unit tests of the
/// catalogue use it to check each composite against its own reference
/// formula).
///
/// ```
/// use tensorfn_core::ops::{ElemMath, UnaryOp};
/// use tensorfn_core::ops::math::F64Math;
/// assert_eq!(F64Math.unary(UnaryOp::Exp, 0.0), 1.0);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct F64Math;

impl ElemMath for F64Math {
    type V = f64;
    type B = bool;
    fn lit(&mut self, _like: f64, v: f64) -> f64 {
        v
    }
    fn unary(&mut self, op: UnaryOp, x: f64) -> f64 {
        op.eval_f64(x)
    }
    fn binary(&mut self, op: BinaryOp, a: f64, b: f64) -> f64 {
        op.eval_f64(a, b)
    }
    fn compare(&mut self, op: CmpOp, a: f64, b: f64) -> bool {
        op.eval_f64(a, b)
    }
    fn select(&mut self, c: bool, a: f64, b: f64) -> f64 {
        if c {
            a
        } else {
            b
        }
    }
}
