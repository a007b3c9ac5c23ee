//! `addcmul`: `input + value * tensor1 * tensor2`, one rounding per
//! element on the CPU.

use super::check_result;
use super::dispatch::dispatch;
use super::output::output;
use crate::device::Device;
use crate::dtype::NumDType;
use crate::error::Result;
use crate::shape::Shape;
use crate::tensor::Tensor;
use tensorfn_core::rules;

fn addcmul<D: Device, T: NumDType, SO: Shape>(
    x: &Tensor<D, T, impl Shape>,
    t1: &Tensor<D, T, impl Shape>,
    t2: &Tensor<D, T, impl Shape>,
    value: T,
) -> Result<Tensor<D, T, SO>> {
    let dims = rules::broadcast(
        "addcmul",
        &[
            ("self", x.dims()),
            ("tensor1", t1.dims()),
            ("tensor2", t2.dims()),
        ],
    )?;
    check_result::<SO>("addcmul", &dims)?;
    let (l0, l1, l2) = (
        x.layout.broadcast_to(&dims),
        t1.layout.broadcast_to(&dims),
        t2.layout.broadcast_to(&dims),
    );
    let storage = dispatch!(D, |be| be.wrap(be.addcmul(
        [
            (be.buf(&x.storage), &l0),
            (be.buf(&t1.storage), &l1),
            (be.buf(&t2.storage), &l2),
        ],
        value
    )?));
    output(storage, &dims)
}

impl<D: Device, T: NumDType, S: Shape> Tensor<D, T, S> {
    /// `self + value * t1 * t2` elementwise (PyTorch's `addcmul`); all
    /// three share one dtype, so an integer `t1` with float `self` does
    /// not compile.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![1., 2.]).unwrap();
    /// let a = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![3., 4.]).unwrap();
    /// let b = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![5., 6.]).unwrap();
    /// assert_eq!(x.addcmul(&a, &b, 0.5).unwrap().to_vec().unwrap(), vec![8.5, 14.]);
    /// ```
    pub fn addcmul(&self, t1: &Self, t2: &Self, value: T) -> Result<Self> {
        addcmul(self, t1, t2, value)
    }

    /// [`addcmul`](Self::addcmul) with the three operands broadcast
    /// together ([`rules::broadcast`]: a row `[2]` with a column `[2, 1]`
    /// is an `Err`, the row is written `[1, 2]`); the result type `SO` is
    /// checked at run time.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 2]>::zeros().unwrap();
    /// let a = Tensor::<Cpu, f32, shape![1, 2]>::from_vec(vec![1., 2.]).unwrap();
    /// let b = Tensor::<Cpu, f32, shape![2, 1]>::from_vec(vec![10., 100.]).unwrap();
    /// let y = x.addcmul_broadcast::<shape![2, 2]>(&a, &b, 1.0).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![10., 20., 100., 200.]);
    /// ```
    pub fn addcmul_broadcast<SO: Shape>(
        &self,
        t1: &Tensor<D, T, impl Shape>,
        t2: &Tensor<D, T, impl Shape>,
        value: T,
    ) -> Result<Tensor<D, T, SO>> {
        addcmul(self, t1, t2, value)
    }
}
