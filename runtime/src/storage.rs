//! The buffer behind a tensor: host memory or a CUDA allocation.

use crate::cuda::CudaStorage;
use crate::dtype::DType;

/// Elements of one dtype on one device. Tensors share it through an `Arc`;
/// views share it too, and writes copy it first when it is shared.
#[derive(Debug)]
pub(crate) enum Storage<T: DType> {
    /// Host memory.
    Cpu(Vec<T>),
    /// Device memory on a CUDA ordinal.
    Cuda(CudaStorage<T>),
}

impl<T: DType> Storage<T> {
    /// The host buffer. Tensors typed `Cpu` always hold one.
    pub(crate) fn as_cpu(&self) -> &[T] {
        match self {
            Storage::Cpu(v) => v,
            Storage::Cuda(_) => unreachable!("a Cpu tensor holds host storage"),
        }
    }

    /// The device buffer. Tensors typed `Cuda` always hold one.
    pub(crate) fn as_cuda(&self) -> &CudaStorage<T> {
        match self {
            Storage::Cuda(s) => s,
            Storage::Cpu(_) => unreachable!("a Cuda tensor holds device storage"),
        }
    }
}
