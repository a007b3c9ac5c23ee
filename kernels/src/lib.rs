//! Kernels for tensorfn: a small typed IR, a PTX back-end, a CPU
//! interpreter and the built-in kernels.
#![deny(missing_docs)]

pub mod abi;
pub mod ops;

pub use ops::{BinaryOp, ReduceOp, UnaryOp};

pub use abi::FusedKernel;
