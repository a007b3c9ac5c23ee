//! Kernels for tensorfn: a small typed IR of elementwise work, a PTX
//! back-end, a CPU interpreter that computes exactly what the PTX does, and
//! the built-in kernels of the CUDA runtime.
//!
//! * [`ir`]: the typed SSA IR and [`ElementwiseBuilder`](ir::ElementwiseBuilder),
//!   used by `tensor_fn!` to describe a fused elementwise group;
//! * [`ptx`]: PTX text for sm_70 and newer, and for sm_80 and newer where
//!   that is faster (`bf16` rounding; no CUDA toolkit needed);
//! * [`interp`]: the reference interpreter;
//! * [`builtin`]: unary, binary, cast, reduction and row-op kernels;
//! * [`abi`]: how elementwise kernels are launched;
//! * [`ops`]: the scalar operations, with their `f64` references.
//!
//! # Accuracy
//!
//! Transcendental functions are expansions into correctly rounded
//! operations (`fma`, `+`, `*`, `/`, `sqrt`, round-to-integral, integer and
//! bit operations; no `.approx` instruction, no flush-to-zero). The PTX and
//! the interpreter execute the same sequence, so the GPU computes exactly
//! what the interpreter does (checked bit for bit on an H100 by
//! `examples/gpu_check.rs`), and the interpreter's measured accuracy is the
//! GPU's. Errors in ulps, maximum over dense sweeps (`tests/accuracy.rs`,
//! millions of points for f32, against `f64`; f64 against the platform
//! libm, whose own error is included), measured / asserted:
//!
//! | function | method | f32 | f64 |
//! | --- | --- | --- | --- |
//! | `exp` | reduction by ln 2 (Cody–Waite), Taylor polynomial, scaling in two steps (correct subnormals) | 0.92 / 1 | 1.0 / 1 |
//! | `log` | split at √2, `2 atanh(s)` series (msun layout) | 0.81 / 1 | 1.0 / 1 |
//! | `sin`, `cos` | 3-part Cody–Waite by π/2; beyond 2^17 (f32) or 2^30 (f64) exact integer Payne–Hanek, under a branch | 1.44 / 1.5, whole range | 1.0 / 1.5, whole range |
//! | `tanh` | Taylor polynomial below 0.55, `1 - 2e/(1+e)` with `e = e^{-2\|x\|}` above | 1.34 / 2 | 2.0 / 2 |
//! | `sigmoid` | `1/(1+e)` or `e/(1+e)` with `e = exp(-\|x\|)` | 2.20 / 2.5 | 3.0 / 3 |
//! | `silu` | `x/(1+e)` or `x e/(1+e)` | 2.73 / 3 | same method |
//! | `gelu` (tanh form) | `x · sigmoid(2u)`, `2u` as a double word | 2.86 / 3 | same method |
//! | `pow` | `exp(y log\|x\|)` in f64, double-word `log`; C99 special cases | 0.50 / 1 | 2.0 / 2 |
//! | `sqrt`, `recip`, `/` | IEEE instructions | 0.5 | 0.5 |
//! | `rsqrt` | `1/sqrt(x)` | 1.47 / 1.5 | 1.5 |
//! | `expm1` | reduction by ln 2 (Cody–Waite), Taylor polynomial, `(2^n - 1) + 2^n r` kept as a double word (Fast2Sum), scaling in two steps | 0.87 / 1.5 | 1.0 / 2 |
//! | `log1p` | `u = 1 + x` and its exact rounding error `c` (Fast2Sum), then `log u + c/u` as `log` (msun's `log1p`) | 0.82 / 1.5 | 1.0 / 2 |
//! | `erf` | fdlibm's rationals on four intervals, coefficients selected per lane (one division), `1 - erfc` from 1.25; f32 computes in f64 | 0.50 / 1.5 | 1.0 / 2 |
//! | `erfc` | the same; from 1.25 `e^(-x² - 9/16 + R(1/x²)) / x` with `x²` exact (split by `fma` in f64), so no cancellation down to underflow | 0.50 / 1.5 | 1.74 against 120-bit values; 4.0 / 4.5 against fdlibm, itself up to 2.5 off |
//! | `gelu_erf` | `x/2 erfc(-x/√2)`, the `erfc` above | 0.50 / 1 | 4.0 / 4.5 above -6; 20 / 24 below, where both it and the `f64` formula hinge on rounding `-x/√2` |
//!
//! The ops whose catalogue entry names math of their own (`expm1`,
//! `log1p`, `erf`, `erfc`, `gelu_erf`) are swept by their expansions' own
//! tests (`mathfn/special.rs`); the f64 references of `erf` and `erfc` are
//! the `libm` crate's (fdlibm's), not the platform's.
//!
//! In the f32 `tanh`, `sigmoid`, `silu` and `gelu`, the division by a
//! number in [1, 2] is a reciprocal by polynomial and Newton steps and one
//! residual step (straight-line code, where `div.rn.f32` branches per
//! lane); the errors above include it.
//!
//! `f16` and `bf16` compute in `f32` and round once to their type;
//! `+`, `-` and `*` of two `f16` values run as `f16` instructions, which
//! give the same bits (the `f32` result rounded to `f16` is the correctly
//! rounded one). Integer arithmetic wraps; `x / 0` is 0 for integers.
//!
//! An `f16`/`bf16` op rounds its `f32` result to 16 bits at once, so its
//! transcendental gets a shorter expansion (fewer Taylor terms, a one-step
//! `exp` reduction, no large-argument `sin`/`cos` reduction for f16, a
//! rational `tanh` with no exponential, and in `sigmoid`, `silu` and
//! `gelu` a division by a number in [1, 2] done as a reciprocal by
//! polynomial and Newton steps),
//! accurate to about 2^-17 (f16) or 2^-14 (bf16) relative before that
//! rounding. The choice depends on the op's dtype alone: an `f32` or `f64`
//! op always gets the expansion above, even when its result is later cast
//! to 16 bits. Measured on every one of the 65536 inputs of each type
//! against `f64` rounded once (`mathfn/fit_tests.rs`), in ulps of the
//! 16-bit result, with the number of results that are not the correctly
//! rounded value (the others are its neighbour):
//!
//! | function | f16: max ulp, not nearest | bf16: max ulp, not nearest | `f32` expansion rounded, for comparison (f16 / bf16 not nearest) |
//! | --- | --- | --- | --- |
//! | `exp` | 0.501, 6 | 0.502, 4 | 2 / 0 |
//! | `log` | 0.502, 8 | 0.507, 6 | 1 / 0 |
//! | `sin` | 0.505, 24 | 0.508, 30 | 4 / 0 |
//! | `cos` | 0.505, 18 | 0.508, 16 | 2 / 0 |
//! | `tanh` | 0.500, 0 | 0.498, 0 | 0 / 0 |
//! | `sigmoid` | 0.501, 8 | 0.500, 0 | 7 / 0 |
//! | `silu` | 0.501, 5 | 0.504, 3 | 3 / 0 |
//! | `gelu` | 0.501, 10 | 0.504, 2 | 2 / 0 |
//!
//! (A correctly rounded result is within 0.5 ulp; the `f32` expansions
//! miss it a few times too, by rounding twice.) NaN, infinities, zeros and
//! their signs, overflow and underflow come out as with the `f32`
//! expansion.
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
pub mod interp;
pub mod ir;
mod lower;
mod mathfn;
pub mod norm;
pub mod ops;
pub mod optim;
mod prim;
pub mod ptx;
mod reduction;
mod round;
pub mod rowkernel;
mod target;
#[cfg(test)]
mod test_support;

pub use error::{Error, Result};
pub use ops::{BinaryOp, CmpOp, NormOp, ReduceOp, RowOp, RowShape, UnaryOp};
pub use tensorfn_core::DTypeKind;
pub use tensorfn_core::{for_each_binary_op, for_each_unary_op};

pub use abi::FusedKernel;
