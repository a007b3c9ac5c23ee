//! The run-time half of tensorfn: typed tensors, their devices, dtypes and
//! shapes, and the CPU and CUDA backends that execute operations.
//!
//! Most users depend on the `tensorfn` facade crate, which re-exports this
//! one together with the `tensor_fn!` macro.
//!
//! ```
//! use tensorfn_runtime::{Tensor, Cpu, shape};
//! let x = Tensor::<Cpu, f32, shape![2, 3]>::ones().unwrap();
//! assert_eq!(x.numel(), 6);
//! ```
#![deny(missing_docs)]

mod backend;
pub(crate) mod cpu;
pub(crate) mod cuda;
pub mod device;
pub mod dtype;
pub mod error;
pub mod interop;
pub mod layout;
pub mod ops;
mod random;
pub mod shape;
mod storage;
pub mod stream;
pub mod tensor;

pub use cuda::{
    allow_tf32, cuda_device_count, cuda_empty_cache, cuda_memory_stats, set_allow_tf32,
    CudaMemoryStats,
};
pub use device::{Cpu, Cuda, Device, DeviceKind, SameDevice};
pub use dtype::{DType, DTypeKind, FloatDType, NumDType, SameDType};
pub use error::{Error, Result};
pub use half::{bf16, f16};
pub use interop::NdShape;
pub use layout::Layout;
pub use shape::{Const, Dim, Dyn, Shape, MAX_RANK};
pub use stream::{stream_map, ChunkShape, StreamMap, StreamStats};
pub use tensor::Tensor;

/// Everything a program using tensors needs in scope.
pub mod prelude {
    pub use crate::{bf16, f16, shape, Const, Cpu, Cuda, Dyn, Error, Result, Tensor};
}
