//! tensorfn: tensors whose device, dtype and shape mistakes fail to compile.
#![deny(missing_docs)]

pub use tensorfn_macros::tensor_fn;
pub use tensorfn_runtime::*;

/// The kernels crate, for the statics `tensor_fn!` generates; not a stable API.
#[doc(hidden)]
pub use tensorfn_kernels as __kernels;

/// Everything a program using tensorfn needs in scope.
pub mod prelude {
    pub use tensorfn_macros::tensor_fn;
    pub use tensorfn_runtime::prelude::*;
}
