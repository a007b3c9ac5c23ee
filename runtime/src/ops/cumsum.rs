//! `cumsum`, the cumulative sum along a dim, one kernel on the CPU and on
//! CUDA.

use super::dispatch::dispatch;
use super::output::output;
use crate::device::Device;
use crate::dtype::NumDType;
use crate::error::{Error, Result};
use crate::shape::Shape;
use crate::tensor::Tensor;
use half::{bf16, f16};

/// The dtype of `cumsum`'s result, as PyTorch's: a float keeps its dtype,
/// an integer sums into `i64`.
///
/// ```
/// use std::any::type_name;
/// use tensorfn_runtime::CumsumDType;
/// assert_eq!(type_name::<<i32 as CumsumDType>::Out>(), "i64");
/// assert_eq!(type_name::<<f32 as CumsumDType>::Out>(), "f32");
/// ```
pub trait CumsumDType: NumDType {
    /// The result's dtype.
    type Out: NumDType;
}

macro_rules! cumsum_dtype {
    ($($t:ty => $o:ty),*) => {$(impl CumsumDType for $t { type Out = $o; })*};
}
cumsum_dtype!(f32 => f32, f64 => f64, f16 => f16, bf16 => bf16, i32 => i64, i64 => i64, u8 => i64);

impl<D: Device, T: CumsumDType, S: Shape> Tensor<D, T, S> {
    /// The cumulative sum along dim `DIM` (PyTorch's `torch.cumsum(x,
    /// dim)`): element `j` along it is the sum of elements `0..=j`. Floats
    /// keep their dtype (added in f32, f64 for f64, and rounded at each
    /// step); integers sum into `i64` (wrapping), as PyTorch's. A `DIM`
    /// past the rank is an `Err` (a scalar takes `DIM = 0`).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, i32, shape![2, 3]>::from_vec(vec![1, 2, 3, 4, 5, 6]).unwrap();
    /// assert_eq!(x.cumsum::<1>().unwrap().to_vec().unwrap(), vec![1i64, 3, 6, 4, 9, 15]);
    /// assert_eq!(x.cumsum::<0>().unwrap().to_vec().unwrap(), vec![1i64, 2, 3, 5, 7, 9]);
    /// assert!(x.cumsum::<2>().is_err());
    /// ```
    pub fn cumsum<const DIM: usize>(&self) -> Result<Tensor<D, T::Out, S>> {
        if DIM >= self.dims().len().max(1) {
            return Err(Error::shape(
                "cumsum",
                format!("a dim below the rank of `input` ({})", self.dims().len()),
                format!("dim {DIM}"),
            ));
        }
        let storage = dispatch!(D, |be| be.wrap(be.cumsum::<T, T::Out>(
            be.buf(&self.storage),
            &self.layout,
            DIM
        )?));
        output(storage, self.dims())
    }
}

#[cfg(test)]
mod tests {
    use crate::{Cpu, Dyn, Tensor};
    use half::f16;

    #[test]
    fn sums_along_each_dim_in_float_and_integer_dtypes() {
        let dims = [3, 4, 5];
        let v: Vec<f64> = (0..60).map(|i| ((i * 37) % 11) as f64 - 5.0).collect();
        let x = Tensor::<Cpu, f64, (Dyn, Dyn, Dyn)>::from_vec_dims(v.clone(), &dims).unwrap();
        let xi: Tensor<Cpu, i32, (Dyn, Dyn, Dyn)> = x.cast().unwrap();
        let xh: Tensor<Cpu, f16, (Dyn, Dyn, Dyn)> = x.cast().unwrap();
        let reference = |dim: usize| -> Vec<f64> {
            let mut out = v.clone();
            let stride: usize = dims[dim + 1..].iter().product();
            for i in 0..60 {
                if (i / stride) % dims[dim] > 0 {
                    out[i] = out[i - stride] + v[i];
                }
            }
            out
        };
        let checks = [
            (x.cumsum::<0>().unwrap().to_vec().unwrap(), reference(0)),
            (x.cumsum::<1>().unwrap().to_vec().unwrap(), reference(1)),
            (x.cumsum::<2>().unwrap().to_vec().unwrap(), reference(2)),
        ];
        for (got, want) in checks {
            assert_eq!(got, want);
        }
        let as_f64 = |v: Vec<i64>| v.into_iter().map(|x| x as f64).collect::<Vec<_>>();
        assert_eq!(
            as_f64(xi.cumsum::<1>().unwrap().to_vec().unwrap()),
            reference(1)
        );
        let h: Vec<f64> = xh
            .cumsum::<2>()
            .unwrap()
            .to_vec()
            .unwrap()
            .iter()
            .map(|x| x.to_f64())
            .collect();
        assert_eq!(h, reference(2)); // small integers: exact in f16
                                     // NaN and infinities propagate along the lane.
        let y = Tensor::<Cpu, f32, (Dyn,)>::from_vec_dims(
            vec![1.0, f32::INFINITY, f32::NAN, 2.0],
            &[4],
        )
        .unwrap();
        let c = y.cumsum::<0>().unwrap().to_vec().unwrap();
        assert_eq!(c[..2], [1.0, f32::INFINITY]);
        assert!(c[2].is_nan() && c[3].is_nan());
        // Empty dims and a scalar.
        let e = Tensor::<Cpu, f32, (Dyn, Dyn)>::from_vec_dims(vec![], &[0, 3]).unwrap();
        assert_eq!(
            e.cumsum::<1>().unwrap().to_vec().unwrap(),
            Vec::<f32>::new()
        );
        let s = Tensor::<Cpu, u8, ()>::from_vec(vec![7]).unwrap();
        assert_eq!(s.cumsum::<0>().unwrap().to_vec().unwrap(), vec![7i64]);
    }
}
