//! The one error type of this crate: ill-typed IR, bad kernel names and
//! host buffers that do not match a kernel.

use std::fmt;

/// Why a kernel could not be built, emitted or interpreted.
///
/// Every message names the operand at fault, what was expected and, where
/// there is one, the fix.
///
/// ```
/// use tensorfn_kernels::ir::ElementwiseBuilder;
/// use tensorfn_kernels::{DTypeKind, UnaryOp};
/// let mut k = ElementwiseBuilder::new();
/// let x = k.input(DTypeKind::I32);
/// let y = k.unary(UnaryOp::Sin, x);
/// let err = k.output(y).unwrap_err();
/// assert!(err.to_string().contains("sin"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// An instruction whose operands have the wrong dtypes.
    Type {
        /// Index of the offending instruction in its builder.
        inst: usize,
        /// What was expected, what was found and how to fix it.
        message: String,
    },
    /// A value used with a builder other than the one that created it, or
    /// one that does not exist.
    ForeignValue {
        /// The operation that received the value.
        op: String,
    },
    /// A constant that the requested dtype cannot hold exactly.
    Constant {
        /// Index of the constant in its builder.
        inst: usize,
        /// What went wrong.
        message: String,
    },
    /// A kernel name that is not a valid PTX identifier.
    Name {
        /// The rejected name.
        name: String,
    },
    /// A built-in kernel requested for a dtype the op does not support.
    Unsupported {
        /// The kernel family (`unary`, `reduce`, ...).
        kernel: &'static str,
        /// What is unsupported and the alternative.
        message: String,
    },
    /// Host buffers that do not fit the kernel run by the interpreter.
    Buffer {
        /// The operand (`input 0`, `out`, ...).
        operand: String,
        /// What was expected and what was found.
        message: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Type { inst, message } => write!(f, "instruction %{inst}: {message}"),
            Error::ForeignValue { op } => write!(
                f,
                "{op}: the value was not created by this builder; \
                 build every value of a kernel with the same ElementwiseBuilder"
            ),
            Error::Constant { inst, message } => write!(f, "constant %{inst}: {message}"),
            Error::Name { name } => write!(
                f,
                "kernel name `{name}` is not a PTX identifier: use ASCII letters, \
                 digits and `_`, starting with a letter or `_`"
            ),
            Error::Unsupported { kernel, message } => write!(f, "{kernel} kernel: {message}"),
            Error::Buffer { operand, message } => write!(f, "{operand}: {message}"),
        }
    }
}

impl std::error::Error for Error {}

/// `Result` with this crate's [`Error`].
///
/// ```
/// fn check() -> tensorfn_kernels::Result<()> { Ok(()) }
/// assert!(check().is_ok());
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;
