//! The buffer behind a tensor: host memory (pageable or page-locked) or a
//! CUDA allocation.

use crate::cuda::{CudaStorage, PinnedVec};
use crate::dtype::DType;

/// Elements of one dtype on one device. Tensors share it through an `Arc`;
/// views share it too, and writes copy it first when it is shared.
#[derive(Debug)]
pub(crate) enum Storage<T: DType> {
    /// Host memory.
    Cpu(Vec<T>),
    /// Page-locked host memory: a CPU buffer the GPU copies from and into
    /// directly. Tensors address its buffer like a `Cpu` one.
    Pinned(PinnedVec<T>),
    /// Device memory on a CUDA ordinal.
    Cuda(CudaStorage<T>),
}

impl<T: DType> Drop for Storage<T> {
    fn drop(&mut self) {
        // A large host buffer goes back to the CPU pool for the next output.
        if let Storage::Cpu(v) = self {
            crate::cpu::buffer::recycle(std::mem::take(v));
        }
    }
}

impl<T: DType> Storage<T> {
    /// The host buffer. Tensors typed `Cpu` always hold one.
    pub(crate) fn as_cpu(&self) -> &[T] {
        self.host_vec()
    }

    /// The host buffer as the CPU backend takes it.
    pub(crate) fn host_vec(&self) -> &Vec<T> {
        match self {
            Storage::Cpu(v) => v,
            Storage::Pinned(p) => p.buffer(),
            Storage::Cuda(_) => unreachable!("a Cpu tensor holds host storage"),
        }
    }

    /// The host buffer for writing (its length is never changed).
    pub(crate) fn host_vec_mut(&mut self) -> &mut Vec<T> {
        match self {
            Storage::Cpu(v) => v,
            Storage::Pinned(p) => p.buffer_mut(),
            Storage::Cuda(_) => unreachable!("a Cpu tensor holds host storage"),
        }
    }

    /// The device buffer. Tensors typed `Cuda` always hold one.
    pub(crate) fn as_cuda(&self) -> &CudaStorage<T> {
        match self {
            Storage::Cuda(s) => s,
            Storage::Cpu(_) | Storage::Pinned(_) => {
                unreachable!("a Cuda tensor holds device storage")
            }
        }
    }

    /// True for page-locked host memory.
    pub(crate) fn is_pinned(&self) -> bool {
        matches!(self, Storage::Pinned(_))
    }
}
