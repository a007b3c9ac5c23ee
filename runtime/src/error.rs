//! The one error type of tensorfn.

use tensorfn_core::RuleError;

/// Everything that can go wrong at run time. Compile-time checks catch
/// device, dtype and static-shape mistakes; what is left (run-time dims,
/// resources, the driver) arrives here, never as a panic.
///
/// ```
/// use tensorfn_runtime::{Error, Tensor, Cpu, shape};
/// let e = Tensor::<Cpu, f32, shape![2, 3]>::from_vec(vec![1.0; 5]).unwrap_err();
/// assert!(matches!(e, Error::Shape { .. }));
/// assert!(e.to_string().contains("6 elements"));
/// ```
///
/// `Debug` prints the same message as `Display`, so that `main` returning
/// `Result<(), Error>` and `unwrap()` show the sentence, not the fields:
///
/// ```
/// use tensorfn_runtime::{Tensor, Cpu, shape};
/// let e = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![1.0; 3]).unwrap_err();
/// assert_eq!(format!("{e:?}"), e.to_string());
/// ```
#[derive(thiserror::Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// No usable CUDA driver or device.
    #[error("CUDA is unavailable: {reason}; run on the CPU with `Cpu` tensors or install an NVIDIA driver")]
    CudaUnavailable {
        /// Why the driver or device could not be used.
        reason: String,
    },
    /// The device could not hold an allocation even after the cache was freed.
    #[error("out of GPU memory: {requested} bytes requested, {free} bytes free of {total}; free tensors, use smaller chunks (`stream_map`) or a smaller batch")]
    OutOfMemory {
        /// Bytes asked for.
        requested: usize,
        /// Bytes the driver reported free after the cache was emptied.
        free: usize,
        /// Total device memory in bytes.
        total: usize,
    },
    /// The host could not allocate a buffer of this size.
    #[error("out of host memory: {requested} bytes requested; use smaller tensors or process the data in chunks (`stream_map`)")]
    HostOutOfMemory {
        /// Bytes asked for.
        requested: usize,
    },
    /// Shapes that do not fit the operation.
    #[error("{op}: expected {expected}, found {found}")]
    Shape {
        /// The operation.
        op: String,
        /// What the operation needs.
        expected: String,
        /// What it was given.
        found: String,
    },
    /// A dtype the operation does not take (a float-only op on integers).
    #[error("{op}: expected {expected}, found {found}")]
    DType {
        /// The operation.
        op: String,
        /// The dtypes the operation takes.
        expected: String,
        /// What it was given, and the fix.
        found: String,
    },
    /// A shape rule of the operation failed; the message names the operand.
    #[error("{0}")]
    Rule(#[from] RuleError),
    /// An index or slice past the end of a dim.
    #[error("{0}")]
    Index(String),
    /// A cuBLAS call returned an error status.
    #[error("cuBLAS {op} failed with {status} for shapes {shapes}")]
    Cublas {
        /// The cuBLAS routine.
        op: String,
        /// The status the library returned.
        status: String,
        /// The operand shapes, for the report.
        shapes: String,
    },
    /// A cuDNN call returned an error status (one that is not "not
    /// supported": those fall back to the built-in kernels).
    #[error("cuDNN {op} failed with {status} for {problem}")]
    Cudnn {
        /// The cuDNN routine.
        op: String,
        /// The status the library returned.
        status: String,
        /// The convolution: shapes, strides, dtype.
        problem: String,
    },
    /// NCCL, which the collectives need, cannot be opened.
    #[error("NCCL is unavailable: {reason}")]
    NcclUnavailable {
        /// Why, and how to install it.
        reason: String,
    },
    /// An NCCL call failed, reported an asynchronous error (a peer gone, a
    /// mismatched call), or did not finish within the communicator's
    /// timeout (`status` is then `"timeout"`); the communicator is aborted.
    #[error("NCCL {op} failed with {status}: {message}")]
    Nccl {
        /// The NCCL routine.
        op: String,
        /// `ncclResult_t`'s name, `"timeout"` or `"aborted"`.
        status: String,
        /// NCCL's description and its last message.
        message: String,
    },
    /// The CUDA driver returned an error.
    #[error("CUDA driver error in {op}: {message}")]
    Driver {
        /// What was being done.
        op: String,
        /// The driver's message.
        message: String,
    },
    /// Arithmetic PyTorch refuses at run time: integer division by zero,
    /// integers to negative powers.
    #[error("{op}: {message}")]
    Arithmetic {
        /// The operation.
        op: String,
        /// What went wrong, which operand holds the value, and the fix.
        message: String,
    },
    /// A conversion between dtypes or from a foreign value failed.
    #[error("{0}")]
    Conversion(String),
    /// An I/O error (loading weights, files).
    #[error("I/O error: {0}")]
    Io(String),
    /// Parameters that do not match a file: a missing or unexpected key,
    /// a file that is not safetensors.
    #[error("loading parameters: {0}")]
    Load(String),
    /// An argument outside what the operation accepts (a negative
    /// learning rate, `nesterov` without momentum).
    #[error("{op}: {message}")]
    InvalidArgument {
        /// The operation.
        op: String,
        /// Which argument, its value, and the fix.
        message: String,
    },
}

/// `Result` with tensorfn's [`Error`].
///
/// ```
/// use tensorfn_runtime::{Cpu, Result, Tensor, shape};
/// fn total(v: Vec<f32>) -> Result<f32> {
///     let x = Tensor::<Cpu, f32, shape![_]>::from_vec_dims(v.clone(), &[v.len()])?;
///     Ok(x.to_vec()?.iter().sum())
/// }
/// assert_eq!(total(vec![1.0, 2.5]).unwrap(), 3.5);
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The error of a float-only operation given `kind` elements.
    ///
    /// ```
    /// use tensorfn_runtime::{DTypeKind, Error};
    /// let e = Error::float_only("exp", DTypeKind::I32);
    /// assert!(matches!(e, Error::DType { .. }));
    /// assert!(e.to_string().contains("cast it first"));
    /// ```
    pub fn float_only(op: &str, kind: crate::dtype::DTypeKind) -> Self {
        Error::DType {
            op: op.to_string(),
            expected: "a floating-point tensor".to_string(),
            found: format!(
                "a `{}` tensor; cast it first with `.cast::<f32>()`",
                kind.name()
            ),
        }
    }

    /// Builds a [`Error::Shape`].
    ///
    /// ```
    /// use tensorfn_runtime::Error;
    /// let e = Error::shape("load", "784 columns", "785 columns");
    /// assert!(matches!(e, Error::Shape { .. }));
    /// assert_eq!(e.to_string(), "load: expected 784 columns, found 785 columns");
    /// ```
    pub fn shape(
        op: impl Into<String>,
        expected: impl Into<String>,
        found: impl Into<String>,
    ) -> Self {
        Error::Shape {
            op: op.into(),
            expected: expected.into(),
            found: found.into(),
        }
    }
}

impl std::fmt::Debug for Error {
    /// The `Display` message: what a failing `main` or `unwrap` prints.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a program prints when its `fn main() -> Result<()>` fails: std
    /// writes `Error: ` and the error's `Debug`, which is the sentence.
    #[test]
    fn failing_main_prints_the_message() {
        if std::env::var_os("TENSORFN_FAILING_MAIN").is_some() {
            let main: Result<()> = Err(Error::shape("load", "784 columns", "785 columns"));
            std::process::Termination::report(main);
            std::process::exit(1);
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "error::tests::failing_main_prints_the_message"])
            .args(["--nocapture", "--test-threads=1"])
            .env("TENSORFN_FAILING_MAIN", "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("Error: load: expected 784 columns, found 785 columns\n"),
            "{stderr}"
        );
        assert!(!stderr.contains("Shape {"), "{stderr}");
        assert_eq!(out.status.code(), Some(1));
    }
}
