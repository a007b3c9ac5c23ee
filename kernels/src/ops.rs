//! The scalar operations every back-end implements: the CPU loops, the PTX
//! emitter and the interpreter all match on these enums. They are the
//! elementwise part of the op catalogue, defined in
//! [`tensorfn_core::ops`] and re-exported here.
//!
//! Each op carries its `f64` reference (`eval_f64`), the value every
//! back-end is tested against:
//!
//! ```
//! use tensorfn_kernels::ops::{BinaryOp, UnaryOp};
//! let x = 0.75f64;
//! let silu = BinaryOp::Mul.eval_f64(x, UnaryOp::Sigmoid.eval_f64(x));
//! assert!((UnaryOp::Silu.eval_f64(x) - silu).abs() < 1e-15);
//! ```

pub use tensorfn_core::ops::{
    BinaryOp, CmpOp, ElemMath, NormOp, ReduceOp, RowOp, RowShape, UnaryOp,
};
