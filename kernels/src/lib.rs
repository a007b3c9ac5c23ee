//! Kernels for tensorfn: a small typed IR of elementwise work, a PTX
//! back-end, a CPU interpreter that computes exactly what the PTX does, and
//! the built-in kernels of the CUDA runtime.
//!
//! * [`ir`]: the typed SSA IR and [`ElementwiseBuilder`](ir::ElementwiseBuilder),
//!   used by `tensor_fn!` to describe a fused elementwise group;
//! * [`ptx`]: PTX text for sm_70 and newer (no CUDA toolkit needed);
//! * [`interp`]: the reference interpreter;
//! * [`builtin`]: unary, binary, cast, reduction and softmax kernels;
//! * [`abi`]: how elementwise kernels are launched;
//! * [`ops`]: the scalar operations, with their `f64` references.
//!
//! Transcendental functions are expansions into correctly rounded
//! operations, shared by the PTX and the interpreter; their accuracy is
//! stated in the table of the `ir` module docs and asserted by the tests.
//!
//! ```
//! use tensorfn_kernels::ir::ElementwiseBuilder;
//! use tensorfn_kernels::interp::{run_elementwise, HostData, HostView};
//! use tensorfn_kernels::{ptx, BinaryOp, DTypeKind, UnaryOp};
//!
//! let mut k = ElementwiseBuilder::new();
//! let x = k.input(DTypeKind::F32);
//! let s = k.unary(UnaryOp::Sin, x);
//! let two = k.constant(2.0, DTypeKind::F32);
//! let y = k.binary(BinaryOp::Mul, s, two);
//! let kernel = k.output(y)?;
//!
//! let text = ptx::elementwise(&kernel, &kernel.default_name())?; // for the GPU
//! let data = HostData::F32(vec![0.5, -1.0]);
//! let out = run_elementwise(&kernel, &[HostView::contiguous(&data)], &[2])?; // on the host
//! let want: Vec<f64> = [0.5f64, -1.0].iter().map(|v| 2.0 * v.sin()).collect();
//! for (g, w) in out.to_f64_vec().iter().zip(&want) {
//!     assert!((g - w).abs() < 1e-6);
//! }
//! # let _ = text;
//! # Ok::<(), tensorfn_kernels::Error>(())
//! ```
#![deny(missing_docs)]

pub mod abi;
pub mod builtin;
mod error;
mod expand;
pub mod interp;
pub mod ir;
mod lower;
pub mod ops;
mod prim;
pub mod ptx;
mod reduction;
mod round;

pub use error::{Error, Result};
pub use ops::{BinaryOp, CmpOp, ReduceOp, UnaryOp};
pub use tensorfn_core::DTypeKind;

pub use abi::FusedKernel;
