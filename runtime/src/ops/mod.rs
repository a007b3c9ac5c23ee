//! Operations on tensors: the typed methods, their shape checks (through
//! `tensorfn_core::rules`) and the dispatch to a backend.
//!
//! One file per family; each method checks shapes with the shared rule,
//! prepares layouts (views cost nothing) and calls one backend primitive
//! through one dispatch helper (CPU or the CUDA ordinal of the device type).

pub(crate) mod dispatch;

mod addcmul;
pub(crate) mod attention;
mod binary;
mod bnorm;
mod cast;
mod cat;
#[cfg(test)]
mod channels_last_tests;
mod conv;
mod cumsum;
mod dropout;
pub(crate) mod fused;
mod gather;
mod index;
mod inplace;
mod into;
pub(crate) mod matmul;
mod multinomial;
mod norm;
mod order;
pub(crate) mod output;
mod pool;
mod reduce;
pub(crate) mod retype;
mod rope;
pub(crate) mod rowkernel;
mod rows;
pub(crate) mod scatter;
mod select;
#[cfg(test)]
pub(crate) mod sum_k_tests;
mod topk;
mod triangle;
mod unary;
mod view;
mod xent;

#[cfg(test)]
pub(crate) use attention::reference as attention_reference;
pub use attention::{AttentionArgs, AttentionShape, AttnMaskDType};
pub use binary::broadcast_dims;
pub use bnorm::{BatchNormArgs, ChannelDim};
pub use conv::{Conv1dArgs, ConvArgs};
pub use cumsum::CumsumDType;
pub use index::RemoveDim;
pub use inplace::{AssignRhs, StaticShape};
pub use matmul::{BiasFor, MatMulShape};
pub use norm::LastDim;
pub use rope::LastTwoDims;
pub use select::where_;
pub use view::Transpose2;

use crate::error::{Error, Result};
use crate::shape::{type_name, Shape};

/// The dims a shape type fixes, or an error pointing to the `_dims` form.
pub(crate) fn static_dims<S: Shape>(op: &str) -> Result<Vec<usize>> {
    S::static_dims().ok_or_else(|| {
        Error::shape(
            op,
            "a result shape type with only Const dims",
            format!(
                "{}; pass the dims at run time with `{op}_dims(&[..])`",
                type_name::<S>()
            ),
        )
    })
}

/// Checks an operation's result dims against the result type the caller
/// chose (`SO` in `add_broadcast::<SO>`, `cat::<AXIS, SO>`, ...).
pub(crate) fn check_result<S: Shape>(op: &str, dims: &[usize]) -> Result<()> {
    S::check(dims).map_err(|_| {
        Error::shape(
            op,
            format!("a result that fits {}", type_name::<S>()),
            format!(
                "result dims {}; annotate the result type with these dims",
                tensorfn_core::rules::fmt_dims(dims)
            ),
        )
    })
}
