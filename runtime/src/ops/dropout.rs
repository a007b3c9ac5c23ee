//! Seeded `dropout`: the mask hashed from the seed and each element's
//! position (`tensorfn_core::ops::dropout`), so the CPU and CUDA draw the
//! same mask and the backward draws it again.

use super::dispatch::dispatch;
use super::output::output;
use crate::device::Device;
use crate::dtype::FloatDType;
use crate::error::{Error, Result};
use crate::shape::Shape;
use crate::tensor::Tensor;

impl<D: Device, T: FloatDType, S: Shape> Tensor<D, T, S> {
    /// PyTorch's `dropout(self, p, training)`, seeded: when `training`,
    /// each element is multiplied by 0 with probability `p` and by
    /// `1 / (1 - p)` otherwise (a NaN stays NaN, as PyTorch's product);
    /// which ones is a hash of `seed` and the element's row-major position,
    /// the same on every device, so a new seed per step draws a new mask
    /// and the gradient is `dropout` of the output's gradient with the same
    /// seed. Not `training`, or `p = 0`, is a copy of `self`; `p = 1`
    /// zeros it. The masks are not PyTorch's (its generator is a stateful
    /// stream). A `p` outside [0, 1] is an `Err`.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![1000]>::ones().unwrap();
    /// let y = x.dropout(0.25, true, 7).unwrap().to_vec().unwrap();
    /// let kept = y.iter().filter(|&&v| v != 0.0).count();
    /// assert!((700..800).contains(&kept));
    /// assert!(y.iter().all(|&v| v == 0.0 || (v - 4.0 / 3.0).abs() < 1e-6));
    /// assert_eq!(x.dropout(0.25, true, 7).unwrap().to_vec().unwrap(), y); // same seed, same mask
    /// assert_eq!(x.dropout(0.25, false, 7).unwrap().to_vec().unwrap(), vec![1.0; 1000]);
    /// assert!(x.dropout(1.5, true, 7).is_err());
    /// ```
    pub fn dropout(&self, p: f64, training: bool, seed: usize) -> Result<Tensor<D, T, S>> {
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::shape(
                "dropout",
                "a probability `p` in [0, 1]",
                format!("p = {p}"),
            ));
        }
        let p = if training { p } else { 0.0 };
        let storage = dispatch!(D, |be| be.wrap(be.dropout::<T>(
            be.buf(&self.storage),
            &self.layout,
            p,
            seed as u64
        )?));
        output(storage, self.dims())
    }
}
