//! tensorfn: tensors whose device, dtype and shape mistakes fail to compile.
#![deny(missing_docs)]

pub use tensorfn_macros::tensor_fn;
pub use tensorfn_runtime::*;

/// Everything a program using tensorfn needs in scope.
pub mod prelude {
    pub use tensorfn_macros::tensor_fn;
    pub use tensorfn_runtime::prelude::*;
}
