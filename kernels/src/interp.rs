//! The CPU interpreter: runs kernels on host buffers, computing exactly
//! what the PTX computes (same lowered program, same rounding of every
//! operation, same reduction order), so it is the reference the tests
//! compare against `f64` and the GPU results against.
//!
//! ```
//! use tensorfn_kernels::interp::{run_elementwise, HostData, HostView};
//! use tensorfn_kernels::ir::ElementwiseBuilder;
//! use tensorfn_kernels::{BinaryOp, DTypeKind};
//!
//! // a [2, 3] + b [3] (broadcast along dim 0)
//! let mut k = ElementwiseBuilder::new();
//! let a = k.input(DTypeKind::I32);
//! let b = k.input(DTypeKind::I32);
//! let s = k.binary(BinaryOp::Add, a, b);
//! let kernel = k.output(s)?;
//! let a_data = HostData::I32(vec![1, 2, 3, 4, 5, 6]);
//! let b_data = HostData::I32(vec![10, 20, 30]);
//! let out = run_elementwise(
//!     &kernel,
//!     &[HostView::contiguous(&a_data), HostView::strided(&b_data, 0, vec![0, 1])],
//!     &[2, 3],
//! )?;
//! assert_eq!(out, HostData::I32(vec![11, 22, 33, 14, 25, 36]));
//! # Ok::<(), tensorfn_kernels::Error>(())
//! ```

pub(crate) mod eval;
mod host;
mod norm;
mod reduce;
mod rope;
mod rowkernel;

pub use host::{HostData, HostView};
pub use norm::norm;
pub use reduce::{reduce, row};
pub use rope::rope;
pub use rowkernel::row_kernel;

use crate::error::{Error, Result};
use crate::ir::Kernel;
use crate::lower::lower;

/// Lanes evaluated together (bounds the interpreter's memory).
const CHUNK: usize = 4096;

/// Runs an elementwise kernel over `dims`: input `i` is read through
/// `inputs[i]` (dtype must match, every element in bounds); the output is a
/// new row-major buffer of the kernel's output dtype.
///
/// ```
/// use tensorfn_kernels::interp::{run_elementwise, HostData, HostView};
/// use tensorfn_kernels::ir::ElementwiseBuilder;
/// use tensorfn_kernels::{DTypeKind, UnaryOp};
/// let mut k = ElementwiseBuilder::new();
/// let x = k.input(DTypeKind::F64);
/// let y = k.unary(UnaryOp::Exp, x);
/// let kernel = k.output(y)?;
/// let data = HostData::F64(vec![0.0, 1.0]);
/// let out = run_elementwise(&kernel, &[HostView::contiguous(&data)], &[2])?;
/// assert_eq!(out.to_f64_vec(), vec![1.0, std::f64::consts::E]);
///
/// // A view that reads past the buffer is an error, not a panic.
/// let bad = run_elementwise(&kernel, &[HostView::strided(&data, 1, vec![1])], &[2]);
/// assert!(bad.is_err());
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
pub fn run_elementwise(
    kernel: &Kernel,
    inputs: &[HostView<'_>],
    dims: &[usize],
) -> Result<HostData> {
    if inputs.len() != kernel.inputs().len() {
        return Err(Error::Buffer {
            operand: "inputs".into(),
            message: format!(
                "the kernel takes {} inputs, {} were given",
                kernel.inputs().len(),
                inputs.len()
            ),
        });
    }
    let n = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| Error::Buffer {
            operand: "dims".into(),
            message: format!("{dims:?} has more elements than memory can address"),
        })?;
    let mut strides = Vec::with_capacity(inputs.len());
    for (i, (view, &dtype)) in inputs.iter().zip(kernel.inputs()).enumerate() {
        let operand = format!("input {i}");
        if view.data.dtype() != dtype {
            return Err(Error::Buffer {
                operand,
                message: format!("is {}, the kernel expects {dtype}", view.data.dtype()),
            });
        }
        strides.push(view.checked_strides(&operand, dims)?);
    }

    let prog = lower(kernel);
    let mut out = HostData::zeros(kernel.output_dtype(), n);
    let mut start = 0;
    while start < n {
        let lanes = CHUNK.min(n - start);
        let mut cols = Vec::with_capacity(inputs.len());
        for (view, st) in inputs.iter().zip(&strides) {
            let col: Vec<u64> = (start..start + lanes)
                .map(|i| view.data.reg_bits(element_offset(i, dims, st, view.offset)))
                .collect();
            cols.push(col);
        }
        let refs: Vec<&Vec<u64>> = cols.iter().collect();
        let result = eval::run(&prog, &refs, lanes);
        for (j, &bits) in result[0].iter().enumerate() {
            out.set_reg_bits(start + j, bits);
        }
        start += lanes;
    }
    Ok(out)
}

/// Position of row-major element `i` of `dims` in a view.
fn element_offset(mut i: usize, dims: &[usize], strides: &[usize], offset: usize) -> usize {
    let mut off = offset;
    for d in (0..dims.len()).rev() {
        off += (i % dims[d]) * strides[d];
        i /= dims[d];
    }
    off
}
