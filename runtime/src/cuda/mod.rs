//! CUDA backend. Placeholder until the cudarc backend lands: every entry
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

/// The CUDA backend for one ordinal.
#[derive(Debug, Clone)]
pub(crate) struct CudaBackend {
    _ordinal: usize,
}

impl CudaBackend {
    /// The backend of cuda:`ord`, creating its context on first use.
    pub(crate) fn for_ordinal(_ord: usize) -> Result<CudaBackend> {
        Err(unavailable())
    }
}

/// Launches a fused elementwise kernel over `inputs` (device pointer and
/// broadcast layout each), returning a contiguous output of `out_dims`.
pub(crate) fn launch_fused<O: DType>(
    _kernel: &'static tensorfn_kernels::FusedKernel,
    _ord: usize,
    _inputs: &[(u64, &Layout)],
    _out_dims: &[usize],
) -> Result<CudaStorage<O>> {
    Err(unavailable())
}

impl<T: DType> CudaStorage<T> {
    /// Device address of element 0.
    pub(crate) fn device_ptr(&self) -> u64 {
        0
    }
}

impl crate::backend::Backend for CudaBackend {
    type Buf<T: DType> = CudaStorage<T>;

    fn full<T: DType>(&self, _n: usize, _value: T) -> Result<CudaStorage<T>> {
        Err(unavailable())
    }
    fn contiguous<T: DType>(&self, _x: &CudaStorage<T>, _l: &Layout) -> Result<CudaStorage<T>> {
        Err(unavailable())
    }
    fn copy_into<T: DType>(
        &self,
        _s: &CudaStorage<T>,
        _ls: &Layout,
        _d: &mut CudaStorage<T>,
        _ld: &Layout,
    ) -> Result<()> {
        Err(unavailable())
    }
    fn unary<T: crate::NumDType>(
        &self,
        _op: tensorfn_kernels::UnaryOp,
        _x: &CudaStorage<T>,
        _l: &Layout,
    ) -> Result<CudaStorage<T>> {
        Err(unavailable())
    }
    fn binary<T: crate::NumDType>(
        &self,
        _op: tensorfn_kernels::BinaryOp,
        _a: &CudaStorage<T>,
        _la: &Layout,
        _b: &CudaStorage<T>,
        _lb: &Layout,
    ) -> Result<CudaStorage<T>> {
        Err(unavailable())
    }
    fn binary_scalar<T: crate::NumDType>(
        &self,
        _op: tensorfn_kernels::BinaryOp,
        _x: &CudaStorage<T>,
        _l: &Layout,
        _s: T,
        _scalar_first: bool,
    ) -> Result<CudaStorage<T>> {
        Err(unavailable())
    }
    fn cast<T: DType, U: DType>(&self, _x: &CudaStorage<T>, _l: &Layout) -> Result<CudaStorage<U>> {
        Err(unavailable())
    }
    fn reduce<T: crate::NumDType>(
        &self,
        _op: tensorfn_kernels::ReduceOp,
        _x: &CudaStorage<T>,
        _l: &Layout,
        _dim: usize,
    ) -> Result<CudaStorage<T>> {
        Err(unavailable())
    }
    fn arg_reduce<T: crate::NumDType>(
        &self,
        _op: tensorfn_kernels::ReduceOp,
        _x: &CudaStorage<T>,
        _l: &Layout,
        _dim: usize,
    ) -> Result<CudaStorage<i64>> {
        Err(unavailable())
    }
    fn softmax<T: crate::FloatDType>(
        &self,
        _x: &CudaStorage<T>,
        _l: &Layout,
        _dim: usize,
        _log: bool,
    ) -> Result<CudaStorage<T>> {
        Err(unavailable())
    }
    fn matmul<T: crate::FloatDType>(
        &self,
        _a: &CudaStorage<T>,
        _la: &Layout,
        _b: &CudaStorage<T>,
        _lb: &Layout,
        _bias: Option<(&CudaStorage<T>, &Layout)>,
        _alpha: T,
        _beta: T,
    ) -> Result<CudaStorage<T>> {
        Err(unavailable())
    }
}
