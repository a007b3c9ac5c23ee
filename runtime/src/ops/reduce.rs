//! Reductions: along one dim (`sum::<1>()`), or over every element
//! (`sum_all()`).

use super::check_result;
use super::dispatch::dispatch;
use super::index::RemoveDim;
use super::output::output;
use crate::device::Device;
use crate::dtype::{FloatDType, NumDType};
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::shape::Shape;
use crate::storage::Storage;
use crate::tensor::Tensor;
use tensorfn_core::rules;
use tensorfn_kernels::ReduceOp;

fn check_not_empty(op: ReduceOp, dims: &[usize], dim: usize) -> Result<()> {
    let needs_elements = matches!(
        op,
        ReduceOp::Max | ReduceOp::Min | ReduceOp::ArgMax | ReduceOp::ArgMin
    );
    if needs_elements && dims.get(dim) == Some(&0) {
        return Err(Error::shape(
            op.name(),
            format!(
                "a non-empty dim {dim} (the {} of no elements is undefined)",
                op.name()
            ),
            format!("`self` of dims {}", rules::fmt_dims(dims)),
        ));
    }
    Ok(())
}

/// `op` along `dim`, the result typed `SO` (dim removed, or kept as 1).
fn reduce_dim<D: Device, T: NumDType, SO: Shape>(
    x: &Tensor<D, T, impl Shape>,
    op: ReduceOp,
    dim: usize,
    keepdim: bool,
) -> Result<Tensor<D, T, SO>> {
    let dims = rules::reduce(op.name(), ("self", x.dims()), dim, keepdim)?;
    check_result::<SO>(op.name(), &dims)?;
    check_not_empty(op, x.dims(), dim)?;
    let storage = dispatch!(D, |be| be.wrap(be.reduce(
        op,
        be.buf(&x.storage),
        &x.layout,
        dim
    )?));
    output(storage, &dims)
}

fn arg_reduce_dim<D: Device, T: NumDType, SO: Shape>(
    x: &Tensor<D, T, impl Shape>,
    op: ReduceOp,
    dim: usize,
) -> Result<Tensor<D, i64, SO>> {
    let dims = rules::reduce(op.name(), ("self", x.dims()), dim, false)?;
    check_not_empty(op, x.dims(), dim)?;
    let storage = dispatch!(D, |be| be.wrap(be.arg_reduce(
        op,
        be.buf(&x.storage),
        &x.layout,
        dim
    )?));
    output(storage, &dims)
}

/// `op` over every element, as a 0-D tensor.
fn reduce_all<D: Device, T: NumDType>(
    x: &Tensor<D, T, impl Shape>,
    op: ReduceOp,
) -> Result<Tensor<D, T, ()>> {
    let n = x.numel();
    check_not_empty(op, &[n], 0)?;
    // Reduce the elements as one dim: a view when contiguous, else a copy.
    let copy: Storage<T>;
    let (storage, flat) = if x.layout.is_contiguous() {
        let l = Layout::new(vec![n], vec![1], x.layout.offset());
        (&*x.storage, l)
    } else {
        copy = dispatch!(D, |be| be
            .wrap(be.contiguous(be.buf(&x.storage), &x.layout)?));
        (&copy, Layout::contiguous(&[n]))
    };
    let out = dispatch!(D, |be| be.wrap(be.reduce(op, be.buf(storage), &flat, 0)?));
    output(out, &[])
}

impl<D: Device, T: NumDType, S: Shape> Tensor<D, T, S> {
    /// Sum along dim `DIM`, which disappears. f32 sums are pairwise,
    /// f16/bf16 accumulate in f32, integers wrap.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 3]>::from_vec(vec![1., 2., 3., 4., 5., 6.]).unwrap();
    /// assert_eq!(x.sum::<0>().unwrap().to_vec().unwrap(), vec![5., 7., 9.]);
    /// assert_eq!(x.sum::<1>().unwrap().to_vec().unwrap(), vec![6., 15.]);
    /// ```
    pub fn sum<const DIM: usize>(&self) -> Result<Tensor<D, T, S::Output>>
    where
        S: RemoveDim<DIM>,
    {
        reduce_dim(self, ReduceOp::Sum, DIM, false)
    }

    /// Sum along dim `DIM`, kept as a dim of size 1; the result type `SO`
    /// is checked at run time.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, i32, shape![2, 3]>::arange(0, 1).unwrap();
    /// let s = x.sum_keepdim::<1, shape![2, 1]>().unwrap();
    /// assert_eq!(s.to_vec().unwrap(), vec![3, 12]);
    /// ```
    pub fn sum_keepdim<const DIM: usize, SO: Shape>(&self) -> Result<Tensor<D, T, SO>>
    where
        S: RemoveDim<DIM>,
    {
        reduce_dim(self, ReduceOp::Sum, DIM, true)
    }

    /// Maximum along dim `DIM` (NaN propagates); `Err` for an empty dim.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, i64, shape![2, 2]>::from_vec(vec![1, 9, 7, 3]).unwrap();
    /// assert_eq!(x.max::<1>().unwrap().to_vec().unwrap(), vec![9, 7]);
    /// ```
    pub fn max<const DIM: usize>(&self) -> Result<Tensor<D, T, S::Output>>
    where
        S: RemoveDim<DIM>,
    {
        reduce_dim(self, ReduceOp::Max, DIM, false)
    }

    /// Minimum along dim `DIM` (NaN propagates); `Err` for an empty dim.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, i64, shape![2, 2]>::from_vec(vec![1, 9, 7, 3]).unwrap();
    /// assert_eq!(x.min::<0>().unwrap().to_vec().unwrap(), vec![1, 3]);
    /// ```
    pub fn min<const DIM: usize>(&self) -> Result<Tensor<D, T, S::Output>>
    where
        S: RemoveDim<DIM>,
    {
        reduce_dim(self, ReduceOp::Min, DIM, false)
    }

    /// Position of the first maximum along dim `DIM` (a NaN counts as the
    /// maximum, like PyTorch).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 3]>::from_vec(vec![1., 9., 9., 7., 3., 8.]).unwrap();
    /// assert_eq!(x.argmax::<1>().unwrap().to_vec().unwrap(), vec![1, 2]);
    /// ```
    pub fn argmax<const DIM: usize>(&self) -> Result<Tensor<D, i64, S::Output>>
    where
        S: RemoveDim<DIM>,
    {
        arg_reduce_dim(self, ReduceOp::ArgMax, DIM)
    }

    /// Position of the first minimum along dim `DIM`.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 3]>::from_vec(vec![1., 9., 9., 7., 3., 8.]).unwrap();
    /// assert_eq!(x.argmin::<0>().unwrap().to_vec().unwrap(), vec![0, 1, 1]);
    /// ```
    pub fn argmin<const DIM: usize>(&self) -> Result<Tensor<D, i64, S::Output>>
    where
        S: RemoveDim<DIM>,
    {
        arg_reduce_dim(self, ReduceOp::ArgMin, DIM)
    }

    /// Sum of every element, as a 0-D tensor.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, i32, shape![2, 3]>::arange(0, 1).unwrap();
    /// assert_eq!(x.sum_all().unwrap().item().unwrap(), 15);
    /// ```
    pub fn sum_all(&self) -> Result<Tensor<D, T, ()>> {
        reduce_all(self, ReduceOp::Sum)
    }

    /// Largest element (NaN propagates); `Err` for an empty tensor.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![3]>::from_vec(vec![1., 7., -2.]).unwrap();
    /// assert_eq!(x.max_all().unwrap().item().unwrap(), 7.);
    /// ```
    pub fn max_all(&self) -> Result<Tensor<D, T, ()>> {
        reduce_all(self, ReduceOp::Max)
    }

    /// Smallest element (NaN propagates); `Err` for an empty tensor.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![3]>::from_vec(vec![1., 7., -2.]).unwrap();
    /// assert_eq!(x.min_all().unwrap().item().unwrap(), -2.);
    /// ```
    pub fn min_all(&self) -> Result<Tensor<D, T, ()>> {
        reduce_all(self, ReduceOp::Min)
    }
}

impl<D: Device, T: FloatDType, S: Shape> Tensor<D, T, S> {
    /// Mean along dim `DIM` (NaN for an empty dim, like PyTorch).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 2]>::from_vec(vec![1., 2., 3., 5.]).unwrap();
    /// assert_eq!(x.mean::<1>().unwrap().to_vec().unwrap(), vec![1.5, 4.]);
    /// ```
    pub fn mean<const DIM: usize>(&self) -> Result<Tensor<D, T, S::Output>>
    where
        S: RemoveDim<DIM>,
    {
        reduce_dim(self, ReduceOp::Mean, DIM, false)
    }

    /// Variance along dim `DIM`: `sum((x - mean)^2) / (n - correction)`,
    /// PyTorch's `var(dim, correction=..)` (1: the sample variance, 0: the
    /// population's). The divisor is `max(0, n - correction)`, as PyTorch's:
    /// NaN for an empty dim.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f64, shape![2, 3]>::from_vec(vec![1., 2., 3., 2., 2., 2.]).unwrap();
    /// assert_eq!(x.var::<1>(1).unwrap().to_vec().unwrap(), vec![1.0, 0.0]);
    /// assert_eq!(x.var::<1>(0).unwrap().to_vec().unwrap(), vec![2.0 / 3.0, 0.0]);
    /// ```
    pub fn var<const DIM: usize>(&self, correction: usize) -> Result<Tensor<D, T, S::Output>>
    where
        S: RemoveDim<DIM>,
    {
        let dims = self.dims().to_vec();
        // The mean with its dim kept, broadcast back over `self` (a view).
        let kept = rules::reduce("var", ("self", &dims), DIM, true)?;
        let mean = dispatch!(D, |be| be.wrap(be.reduce(
            ReduceOp::Mean,
            be.buf(&self.storage),
            &self.layout,
            DIM
        )?));
        let mean = Tensor::<D, T, S>::from_parts(
            std::sync::Arc::new(mean),
            Layout::contiguous(&kept).broadcast_to(&dims),
        );
        let dev = self.sub(&mean)?;
        let squares: Tensor<D, T, S::Output> = dev.mul(&dev)?.sum::<DIM>()?;
        // PyTorch divides by `max(0, n - correction)`: NaN for no elements.
        let divisor = dims[DIM].saturating_sub(correction) as f64;
        squares.mul_scalar(T::from_f64(1.0 / divisor))
    }

    /// Mean of every element, as a 0-D tensor.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f64, shape![4]>::arange(1.0, 1.0).unwrap();
    /// assert_eq!(x.mean_all().unwrap().item().unwrap(), 2.5);
    /// ```
    pub fn mean_all(&self) -> Result<Tensor<D, T, ()>> {
        reduce_all(self, ReduceOp::Mean)
    }
}
