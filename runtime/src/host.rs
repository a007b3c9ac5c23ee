//! Host tensors in page-locked (pinned) memory, and copies into existing
//! host tensors.
//!
//! A pinned CPU tensor is an ordinary `Tensor<Cpu, T, S>`: every CPU
//! operation reads it, and results of operations are ordinary pageable
//! tensors (as in PyTorch). What differs is the copy to and from a GPU: the
//! DMA engine reads or writes its memory directly, with no staging copy,
//! at the full speed of the bus. A loop that downloads results repeatedly
//! reuses one host tensor with [`Tensor::to_cpu_into`].

use crate::cpu::copy::gather;
use crate::cuda::PinnedVec;
use crate::device::{Cpu, Device};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::{contiguous_strides, Layout};
use crate::ops::dispatch::dispatch;
use crate::shape::Shape;
use crate::storage::Storage;
use crate::tensor::{checked_numel, Tensor};
use std::sync::Arc;
use tensorfn_core::rules;

impl<T: DType, S: Shape> Tensor<Cpu, T, S> {
    /// Wraps a pinned buffer holding `dims` row-major.
    fn from_pinned(p: PinnedVec<T>, dims: &[usize]) -> Self {
        let layout = Layout::new(dims.to_vec(), contiguous_strides(dims), p.offset());
        Tensor::from_parts(Arc::new(Storage::Pinned(p)), layout)
    }

    /// A copy of this tensor in page-locked host memory, which the GPU
    /// copies from and into directly (like PyTorch's `pin_memory()`).
    /// `Err(CudaUnavailable)` without a CUDA driver: pinning is a service
    /// of the driver.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, Cuda, Error, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 3]>::arange(0.0, 1.0).unwrap();
    /// match x.pin() {
    ///     Ok(p) => {
    ///         assert!(p.is_pinned());
    ///         assert_eq!(p.to_vec().unwrap(), x.to_vec().unwrap());
    ///         let g = p.to_device::<Cuda>().unwrap(); // one DMA, no staging
    ///         assert_eq!(g.to_vec().unwrap(), x.to_vec().unwrap());
    ///     }
    ///     Err(e) => assert!(matches!(e, Error::CudaUnavailable { .. })),
    /// }
    /// ```
    pub fn pin(&self) -> Result<Self> {
        let data = self.storage.as_cpu();
        let p = if self.layout.is_contiguous() {
            let start = self.layout.offset();
            let n = self.numel();
            PinnedVec::from_slice(if n == 0 {
                &data[..0]
            } else {
                &data[start..start + n]
            })?
        } else {
            PinnedVec::from_slice(&gather(data, &self.layout))?
        };
        Ok(Self::from_pinned(p, self.shape()))
    }

    /// Zeros in page-locked host memory, e.g. the destination of repeated
    /// [`to_cpu_into`](Tensor::to_cpu_into) downloads.
    /// `Err(CudaUnavailable)` without a CUDA driver.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, Error, shape};
    /// match Tensor::<Cpu, f32, shape![4, 4]>::zeros_pinned() {
    ///     Ok(z) => assert_eq!(z.sum_all().unwrap().item().unwrap(), 0.0),
    ///     Err(e) => assert!(matches!(e, Error::CudaUnavailable { .. })),
    /// }
    /// ```
    pub fn zeros_pinned() -> Result<Self> {
        let dims = S::static_dims().ok_or_else(|| {
            Error::shape(
                "zeros_pinned",
                "a shape type with only Const dims",
                format!(
                    "{}; pass the dims with `zeros_pinned_dims(&[..])`",
                    crate::shape::type_name::<S>()
                ),
            )
        })?;
        Self::zeros_pinned_dims(&dims)
    }

    /// [`zeros_pinned`](Self::zeros_pinned) with run-time dims.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// if let Ok(z) = Tensor::<Cpu, u8, shape![_, 3]>::zeros_pinned_dims(&[5, 3]) {
    ///     assert_eq!(z.shape(), &[5, 3]);
    /// }
    /// assert!(Tensor::<Cpu, u8, shape![_, 3]>::zeros_pinned_dims(&[5, 4]).is_err());
    /// ```
    pub fn zeros_pinned_dims(dims: &[usize]) -> Result<Self> {
        S::check(dims)?;
        let n = checked_numel("zeros_pinned", dims)?;
        Ok(Self::from_pinned(PinnedVec::filled(n, T::zero())?, dims))
    }

    /// True when the elements are in page-locked host memory (made by
    /// [`pin`](Self::pin) or [`zeros_pinned`](Self::zeros_pinned)).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2]>::ones().unwrap();
    /// assert!(!x.is_pinned());
    /// if let Ok(p) = x.pin() {
    ///     assert!(p.is_pinned());
    ///     assert!(!p.add_scalar(1.0).unwrap().is_pinned()); // results are ordinary
    /// }
    /// ```
    pub fn is_pinned(&self) -> bool {
        self.storage.is_pinned()
    }
}

impl<D: Device, T: DType, S: Shape> Tensor<D, T, S> {
    /// Copies this tensor into the existing host tensor `out` of the same
    /// dims, reusing its memory: a loop that downloads a result every step
    /// allocates nothing and touches no fresh pages. Into a pinned `out`
    /// (see [`Tensor::zeros_pinned`]) the DMA engine writes directly.
    /// Returns once `out` holds the data. `Err` when the dims differ.
    ///
    /// `out` keeps its buffer when it is the only tensor using it;
    /// otherwise it gets a buffer of its own first, so other tensors
    /// sharing the old one do not change (copy-on-write).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, Cuda, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 2]>::arange(1.0, 1.0).unwrap();
    /// let mut out = Tensor::<Cpu, f32, shape![2, 2]>::zeros().unwrap();
    /// x.to_cpu_into(&mut out).unwrap();
    /// assert_eq!(out.to_vec().unwrap(), vec![1., 2., 3., 4.]);
    ///
    /// if let (Ok(g), Ok(mut pinned)) = (x.to_device::<Cuda>(), Tensor::zeros_pinned()) {
    ///     g.mul_scalar(2.0).unwrap().to_cpu_into(&mut pinned).unwrap();
    ///     assert_eq!(pinned.to_vec().unwrap(), vec![2., 4., 6., 8.]);
    /// }
    ///
    /// // Dims must agree, also for run-time shapes.
    /// let mut wrong = Tensor::<Cpu, f32, shape![_, 2]>::zeros_dims(&[3, 2]).unwrap();
    /// let y = Tensor::<Cpu, f32, shape![_, 2]>::zeros_dims(&[2, 2]).unwrap();
    /// assert!(y.to_cpu_into(&mut wrong).is_err());
    /// ```
    pub fn to_cpu_into(&self, out: &mut Tensor<Cpu, T, S>) -> Result<()> {
        rules::same_shape("to_cpu_into", ("out", out.dims()), ("self", self.dims()))?;
        if out.layout.is_contiguous() {
            if let Some(storage) = Arc::get_mut(&mut out.storage) {
                // Written in place, by DMA into a pinned buffer on a GPU.
                let n = self.numel();
                let start = out.layout.offset();
                let pinned = storage.is_pinned();
                let buf = storage.host_vec_mut();
                let dst = if n == 0 {
                    &mut buf[..0]
                } else {
                    &mut buf[start..start + n]
                };
                return dispatch!(D, |be| be.download_into(
                    be.buf(&self.storage),
                    &self.layout,
                    dst,
                    pinned
                ));
            }
        }
        // A shared or strided destination: the values on the host (shared
        // when they already are), then an element-wise copy.
        out.copy_from(&self.to_cpu()?)
    }
}

#[cfg(test)]
mod tests {
    use crate::prelude::*;

    #[test]
    fn to_cpu_into_copies_host_tensors_of_every_layout() {
        let x = Tensor::<Cpu, i64, shape![2, 3]>::arange(5, -2).unwrap();
        // A transposed destination is written through its strides.
        let out = Tensor::<Cpu, i64, shape![3, 2]>::zeros().unwrap();
        let mut view = out.t().unwrap();
        x.to_cpu_into(&mut view).unwrap();
        assert_eq!(view.to_vec().unwrap(), x.to_vec().unwrap());
        // A shared destination is copied first: the other owner keeps its values.
        let mut a = Tensor::<Cpu, i64, shape![2, 3]>::zeros().unwrap();
        let keep = a.clone();
        x.to_cpu_into(&mut a).unwrap();
        assert_eq!(a.to_vec().unwrap(), x.to_vec().unwrap());
        assert_eq!(keep.to_vec().unwrap(), vec![0; 6]);
        // Empty tensors.
        let e = Tensor::<Cpu, f32, shape![_, 4]>::zeros_dims(&[0, 4]).unwrap();
        let mut eo = Tensor::<Cpu, f32, shape![_, 4]>::zeros_dims(&[0, 4]).unwrap();
        e.to_cpu_into(&mut eo).unwrap();
        assert_eq!(eo.shape(), &[0, 4]);
    }

    #[test]
    fn to_cpu_into_rejects_other_dims_naming_the_operand() {
        let x = Tensor::<Cpu, f32, shape![_, 2]>::ones_dims(&[4, 2]).unwrap();
        let mut out = Tensor::<Cpu, f32, shape![_, 2]>::zeros_dims(&[3, 2]).unwrap();
        let e = x.to_cpu_into(&mut out).unwrap_err().to_string();
        assert!(e.contains("to_cpu_into") && e.contains("out"), "{e}");
        assert_eq!(out.to_vec().unwrap(), vec![0.0; 6]);
    }

    #[test]
    fn pinning_without_a_gpu_is_an_error_not_a_panic() {
        let x = Tensor::<Cpu, f32, shape![3]>::ones().unwrap();
        match x.pin() {
            Ok(p) => assert_eq!(p.to_vec().unwrap(), vec![1.0; 3]),
            Err(e) => assert!(matches!(e, Error::CudaUnavailable { .. }), "{e}"),
        }
        match Tensor::<Cpu, f32, shape![_]>::zeros_pinned_dims(&[3]) {
            Ok(p) => assert!(p.is_pinned()),
            Err(e) => assert!(matches!(e, Error::CudaUnavailable { .. }), "{e}"),
        }
        assert!(Tensor::<Cpu, f32, shape![_]>::zeros_pinned().is_err());
    }
}
