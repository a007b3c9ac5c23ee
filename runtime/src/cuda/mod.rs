//! CUDA backend. Placeholder interface until the backend lands: every entry
//! point reports the device as unavailable.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::Layout;
use std::marker::PhantomData;

/// Elements on a CUDA device.
#[derive(Debug)]
pub(crate) struct CudaStorage<T: DType> {
    _marker: PhantomData<T>,
}

fn unavailable() -> Error {
    Error::CudaUnavailable {
        reason: "this build has no CUDA backend".into(),
    }
}

/// Copies a row-major host buffer to cuda:`ord`.
pub(crate) fn upload<T: DType>(_ord: usize, _data: &[T]) -> Result<CudaStorage<T>> {
    Err(unavailable())
}

/// Copies the elements a layout selects back to the host, row-major.
pub(crate) fn download<T: DType>(_s: &CudaStorage<T>, _layout: &Layout) -> Result<Vec<T>> {
    Err(unavailable())
}

/// Copies the elements a layout selects to another ordinal, contiguous.
pub(crate) fn copy_to_ordinal<T: DType>(
    _s: &CudaStorage<T>,
    _layout: &Layout,
    _ord: usize,
) -> Result<CudaStorage<T>> {
    Err(unavailable())
}
