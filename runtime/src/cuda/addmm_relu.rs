//! `relu(addmm(bias, a, b))` as one entry point, so that `tensor_fn!` can
//! send a linear layer with its activation to one cuBLASLt call (bias and
//! ReLU fused into the product's epilogue) instead of three passes.

use super::backend::CudaBackend;
use crate::device::{Device, DeviceKind};
use crate::dtype::FloatDType;
use crate::error::Result;
use crate::layout::Layout;
use crate::ops::BiasFor;
use crate::shape::Dim;
use crate::storage::Storage;
use crate::tensor::Tensor;
use std::sync::Arc;
use tensorfn_core::rules;

/// A 2-D layout as the one-matrix batch the backend takes.
fn one_batch(l: &Layout) -> Layout {
    Layout::new(
        vec![1, l.dims()[0], l.dims()[1]],
        vec![0, l.strides()[0], l.strides()[1]],
        l.offset(),
    )
}

impl<D: Device, T: FloatDType, M: Dim, N: Dim> Tensor<D, T, (M, N)> {
    /// `relu(bias + m1 @ m2)`, the same as `Tensor::addmm(..)?.relu()`; on
    /// the GPU a bias of shape `(N,)` is fused with the ReLU into the
    /// cuBLASLt product. Used by code `tensor_fn!` generates.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let b = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![-10., 1.]).unwrap();
    /// let x = Tensor::<Cpu, f32, shape![1, 2]>::from_vec(vec![1., 2.]).unwrap();
    /// let w = Tensor::<Cpu, f32, shape![2, 2]>::from_vec(vec![1., 0., 0., 1.]).unwrap();
    /// let y = Tensor::addmm_relu(&b, &x, &w).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![0., 3.]);
    /// ```
    #[doc(hidden)]
    pub fn addmm_relu<K: Dim>(
        bias: &Tensor<D, T, impl BiasFor<(M, N)>>,
        m1: &Tensor<D, T, (M, K)>,
        m2: &Tensor<D, T, (K, N)>,
    ) -> Result<Self> {
        let DeviceKind::Cuda(ord) = D::KIND else {
            return Self::addmm(bias, m1, m2)?.relu();
        };
        let dims = rules::addmm(
            "addmm",
            ("bias", bias.dims()),
            ("mat1", m1.dims()),
            ("mat2", m2.dims()),
        )?;
        let lc = one_batch(&bias.layout.broadcast_to(&dims));
        let out = CudaBackend::for_ordinal(ord)?.addmm_relu(
            (bias.storage.as_cuda(), &lc),
            m1.storage.as_cuda(),
            &one_batch(&m1.layout),
            m2.storage.as_cuda(),
            &one_batch(&m2.layout),
            T::one(),
            T::one(),
        )?;
        Ok(Tensor::from_parts(
            Arc::new(Storage::Cuda(out)),
            Layout::contiguous(&dims),
        ))
    }
}
