//! Softmax and log-softmax along one dim.

use super::dispatch::dispatch;
use super::index::RemoveDim;
use super::output::output;
use crate::device::Device;
use crate::dtype::FloatDType;
use crate::error::Result;
use crate::shape::Shape;
use crate::tensor::Tensor;
use tensorfn_core::rules;

impl<D: Device, T: FloatDType, S: Shape> Tensor<D, T, S> {
    fn softmax_impl(&self, dim: usize, log: bool) -> Result<Self> {
        let op = if log { "log_softmax" } else { "softmax" };
        rules::reduce(op, ("self", self.dims()), dim, false)?;
        let storage = dispatch!(D, |be| be.wrap(be.softmax(
            be.buf(&self.storage),
            &self.layout,
            dim,
            log
        )?));
        output(storage, self.dims())
    }

    /// `exp(x) / sum(exp(x))` along dim `DIM`, stable for large inputs
    /// (the maximum is subtracted first) and computed in at least f32.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![1, 2]>::from_vec(vec![1000., 1000.]).unwrap();
    /// assert_eq!(x.softmax::<1>().unwrap().to_vec().unwrap(), vec![0.5, 0.5]);
    /// ```
    pub fn softmax<const DIM: usize>(&self) -> Result<Self>
    where
        S: RemoveDim<DIM>,
    {
        self.softmax_impl(DIM, false)
    }

    /// `log(softmax(x))` along dim `DIM`, computed without forming the
    /// softmax (accurate for very negative results).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f64, shape![2]>::from_vec(vec![0., 0.]).unwrap();
    /// let y = x.log_softmax::<0>().unwrap().to_vec().unwrap();
    /// assert!((y[0] + std::f64::consts::LN_2).abs() < 1e-12);
    /// ```
    pub fn log_softmax<const DIM: usize>(&self) -> Result<Self>
    where
        S: RemoveDim<DIM>,
    {
        self.softmax_impl(DIM, true)
    }
}
