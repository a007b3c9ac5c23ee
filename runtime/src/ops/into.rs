//! Elementwise results written into a tensor the caller already has.

use super::dispatch::dispatch;
use crate::device::Device;
use crate::dtype::NumDType;
use crate::error::Result;
use crate::shape::Shape;
use crate::tensor::Tensor;
use tensorfn_core::rules;
use tensorfn_kernels::BinaryOp;

impl<D: Device, T: NumDType, S: Shape> Tensor<D, T, S> {
    fn binary_into(&self, op: BinaryOp, other: &Self, out: &mut Self) -> Result<()> {
        let name = format!("{}_into", op.name());
        let dims = rules::broadcast(&name, &[("self", self.dims()), ("other", other.dims())])?;
        rules::same_shape(&name, ("result", &dims[..]), ("out", out.dims()))?;
        let la = self.layout.broadcast_to(&dims);
        let lb = other.layout.broadcast_to(&dims);
        let (storage, ld) = out.make_unique_for_overwrite()?;
        let ld = ld.clone();
        dispatch!(D, |be| be.binary_into(
            op,
            be.buf(&self.storage),
            &la,
            be.buf(&other.storage),
            &lb,
            be.buf_mut(storage),
            &ld
        ))
    }

    /// `self + other` written into `out` (its buffer is reused when no
    /// other tensor shares it).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let a = Tensor::<Cpu, f32, shape![2]>::ones().unwrap();
    /// let mut out = Tensor::<Cpu, f32, shape![2]>::zeros().unwrap();
    /// a.add_into(&a, &mut out).unwrap();
    /// assert_eq!(out.to_vec().unwrap(), vec![2., 2.]);
    /// ```
    pub fn add_into(&self, other: &Self, out: &mut Self) -> Result<()> {
        self.binary_into(BinaryOp::Add, other, out)
    }

    /// `self - other` written into `out`.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let a = Tensor::<Cpu, i32, shape![2]>::ones().unwrap();
    /// let mut out = Tensor::<Cpu, i32, shape![2]>::zeros().unwrap();
    /// a.sub_into(&a, &mut out).unwrap();
    /// assert_eq!(out.to_vec().unwrap(), vec![0, 0]);
    /// ```
    pub fn sub_into(&self, other: &Self, out: &mut Self) -> Result<()> {
        self.binary_into(BinaryOp::Sub, other, out)
    }

    /// `self * other` written into `out`.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let a = Tensor::<Cpu, f32, shape![2]>::full(3.0).unwrap();
    /// let mut out = Tensor::<Cpu, f32, shape![2]>::zeros().unwrap();
    /// a.mul_into(&a, &mut out).unwrap();
    /// assert_eq!(out.to_vec().unwrap(), vec![9., 9.]);
    /// ```
    pub fn mul_into(&self, other: &Self, out: &mut Self) -> Result<()> {
        self.binary_into(BinaryOp::Mul, other, out)
    }

    /// `self / other` written into `out` (`Err` for an integer 0).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let a = Tensor::<Cpu, f32, shape![2]>::full(3.0).unwrap();
    /// let mut out = Tensor::<Cpu, f32, shape![2]>::zeros().unwrap();
    /// a.div_into(&a, &mut out).unwrap();
    /// assert_eq!(out.to_vec().unwrap(), vec![1., 1.]);
    /// ```
    pub fn div_into(&self, other: &Self, out: &mut Self) -> Result<()> {
        self.binary_into(BinaryOp::Div, other, out)
    }
}
