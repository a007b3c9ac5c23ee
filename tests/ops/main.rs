//! The op catalogue and the CPU side of fused kernels, in one test binary
//! (one link of the library instead of one per file):
//!
//! - `catalogue`: every elementwise op, in `tensor_fn!` and typed, against
//!   its `f64` reference;
//! - `catalogue_ops`: every other op of the catalogue, likewise;
//! - `fused_cpu_math`: fused transcendental functions on the CPU;
//! - `row_kernels`: row kernels written in `tensor_fn!`.

mod catalogue;
mod catalogue_ops;
mod fused_cpu_math;
mod row_kernels;
