//! The runtime's typed API on the CPU, in one test binary (one link of the
//! library instead of one per file): elementwise ops, reductions, shape
//! ops, products, the remaining ops (`misc`), conversions to and from
//! `ndarray`, `Vec`s and slices, and creation at sizes the host cannot
//! hold. `common` holds the helpers they share.

// First, so that its `for_*_dtypes!` macros are in scope in every module.
#[macro_use]
mod common;

mod creation_limits;
mod elementwise;
mod interop;
mod matmul;
mod misc;
mod reductions;
mod shape_ops;
