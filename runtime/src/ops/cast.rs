//! Explicit dtype conversion.

use super::dispatch::dispatch;
use super::output::output;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::Result;
use crate::shape::Shape;
use crate::tensor::Tensor;

impl<D: Device, T: DType, S: Shape> Tensor<D, T, S> {
    /// A copy converted to dtype `U`, on the same device. Floats to
    /// integers truncate toward zero and saturate (NaN becomes 0), any
    /// value to `bool` is `value != 0`, and floats round to nearest.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, f16, shape};
    /// let x = Tensor::<Cpu, f32, shape![3]>::from_vec(vec![1.7, -2.5, 300.0]).unwrap();
    /// assert_eq!(x.cast::<i32>().unwrap().to_vec().unwrap(), vec![1, -2, 300]);
    /// assert_eq!(x.cast::<u8>().unwrap().to_vec().unwrap(), vec![1, 0, 255]);
    /// let h = x.cast::<f16>().unwrap();
    /// assert_eq!(h.to_vec().unwrap()[2], f16::from_f32(300.0));
    /// ```
    pub fn cast<U: DType>(&self) -> Result<Tensor<D, U, S>> {
        let storage = dispatch!(D, |be| be
            .wrap(be.cast::<T, U>(be.buf(&self.storage), &self.layout)?));
        output(storage, self.dims())
    }
}
