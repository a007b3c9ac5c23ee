//! 2-D pooling (`max_pool2d`, `avg_pool2d`, `adaptive_avg_pool2d`) over
//! the last two dims of `[N, C, H, W]` or `[C, H, W]`, and its gradient,
//! one kernel each on the CPU and on CUDA.

use super::check_result;
use super::dispatch::dispatch;
use super::output::output_in;
use crate::device::Device;
use crate::dtype::FloatDType;
use crate::error::{Error, Result};
use crate::shape::{Shape, MAX_RANK};
use crate::tensor::Tensor;
use tensorfn_core::ops::pool::{Pair, Pool2d};
use tensorfn_core::rules;

/// Whether the static dims of a pooling's input `x` and result `out` can
/// agree: equal ranks (3 or 4) and equal leading dims. The pooled sizes
/// depend on the options, values known at run time.
const fn pool_fits(
    x: (usize, [Option<usize>; MAX_RANK]),
    out: (usize, [Option<usize>; MAX_RANK]),
) -> bool {
    if x.0 != out.0 || x.0 < 3 || x.0 > 4 {
        return false;
    }
    let mut k = 0;
    while k + 2 < x.0 {
        if let (Some(a), Some(b)) = (x.1[k], out.1[k]) {
            if a != b {
                return false;
            }
        }
        k += 1;
    }
    true
}

impl<D: Device, T: FloatDType, S: Shape> Tensor<D, T, S> {
    /// Pooling `pool` over the last two dims of `self` (`[N, C, H, W]` or
    /// `[C, H, W]`), PyTorch's `max_pool2d`, `avg_pool2d` or
    /// `adaptive_avg_pool2d` with every option ([`Pool2d`]); the result
    /// type `SO` is annotated or inferred. A result rank or leading dim
    /// that cannot fit fails to build; options that do not fit the input
    /// (an output size below 1, `padding` over half the window) and a
    /// result type that does not fit the output size are an `Err`. A
    /// channels-last input gives a channels-last result (else contiguous).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, Pool2d, shape};
    /// let x = Tensor::<Cpu, f32, shape![1, 1, 4, 4]>::from_vec((0..16).map(|i| i as f32).collect()).unwrap();
    /// let y: Tensor<Cpu, f32, shape![1, 1, 2, 2]> = x.pool2d(Pool2d::max(3).stride(2).padding(1)).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![5., 7., 13., 15.]);
    /// let a: Tensor<Cpu, f32, shape![1, 1, 2, 2]> = x.pool2d(Pool2d::avg(2)).unwrap();
    /// assert_eq!(a.to_vec().unwrap(), vec![2.5, 4.5, 10.5, 12.5]);
    /// assert!(x.pool2d::<shape![1, 1, 3, 3]>(Pool2d::max(2)).is_err());
    /// ```
    pub fn pool2d<SO: Shape>(&self, pool: Pool2d) -> Result<Tensor<D, T, SO>> {
        const {
            assert!(
                pool_fits((S::RANK, S::DIMS), (SO::RANK, SO::DIMS)),
                "pool2d: the input and the result must both be [N, C, H, W] or both [C, H, W], with equal leading dims"
            )
        };
        let name = pool.kind.name();
        let dims = rules::pool2d(name, ("input", self.dims()), &pool)?;
        check_result::<SO>(name, &dims)?;
        let r = dims.len();
        let hw = [dims[r - 2], dims[r - 1]];
        let storage = dispatch!(D, |be| be.wrap(be.pool2d::<T>(
            be.buf(&self.storage),
            &self.layout,
            &pool,
            hw
        )?));
        // The backend writes a channels-last input's result channels-last.
        output_in(storage, self.layout.result_like(&dims))
    }

    /// `max_pool2d(self, kernel_size)` (stride `kernel_size`, no padding):
    /// the largest element of each window of the last two dims, NaN when
    /// the window holds one, as PyTorch. See [`pool2d`](Self::pool2d) for
    /// the other options.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![1, 2, 4]>::from_vec(vec![1., 5., 2., 0., 3., 4., 8., 7.]).unwrap();
    /// let y: Tensor<Cpu, f32, shape![1, 1, 2]> = x.max_pool2d(2).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![5., 8.]);
    /// ```
    pub fn max_pool2d<SO: Shape>(&self, kernel_size: impl Pair) -> Result<Tensor<D, T, SO>> {
        self.pool2d(Pool2d::max(kernel_size))
    }

    /// `avg_pool2d(self, kernel_size)` (stride `kernel_size`, no padding):
    /// the mean of each window of the last two dims. See
    /// [`pool2d`](Self::pool2d) for the other options.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f64, shape![1, 2, 4]>::from_vec(vec![1., 5., 2., 0., 3., 4., 8., 7.]).unwrap();
    /// let y: Tensor<Cpu, f64, shape![1, 1, 2]> = x.avg_pool2d(2).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![3.25, 4.25]);
    /// ```
    pub fn avg_pool2d<SO: Shape>(&self, kernel_size: impl Pair) -> Result<Tensor<D, T, SO>> {
        self.pool2d(Pool2d::avg(kernel_size))
    }

    /// `adaptive_avg_pool2d(self, output_size)`: the last two dims cut
    /// into `output_size` windows (`floor(i * H / out)` to
    /// `ceil((i + 1) * H / out)`, as PyTorch) and each averaged;
    /// `output_size = 1` is a ResNet's head.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 1, 2, 2]>::from_vec(vec![1., 2., 3., 4., 5., 6., 7., 8.]).unwrap();
    /// let y: Tensor<Cpu, f32, shape![2, 1, 1, 1]> = x.adaptive_avg_pool2d(1).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![2.5, 6.5]);
    /// ```
    pub fn adaptive_avg_pool2d<SO: Shape>(
        &self,
        output_size: impl Pair,
    ) -> Result<Tensor<D, T, SO>> {
        self.pool2d(Pool2d::adaptive_avg(output_size))
    }

    /// The gradient of [`pool2d`](Self::pool2d) with respect to `self`, for
    /// `grad`, the gradient of its result: `max_pool2d` sends each of
    /// `grad` to its window's largest element (the first on ties, as
    /// PyTorch; recomputed from `self`, nothing saved by the forward), the
    /// averages spread it over the window's elements divided as the
    /// forward divides. A `grad` whose dims are not the result's is an
    /// `Err`. A channels-last `self` gives a channels-last gradient (else
    /// contiguous).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, Pool2d, shape};
    /// let x = Tensor::<Cpu, f32, shape![1, 2, 2]>::from_vec(vec![1., 4., 3., 2.]).unwrap();
    /// let g = Tensor::<Cpu, f32, shape![1, 1, 1]>::from_vec(vec![2.]).unwrap();
    /// let dx = x.pool2d_backward(&g, Pool2d::max(2)).unwrap();
    /// assert_eq!(dx.to_vec().unwrap(), vec![0., 2., 0., 0.]);
    /// let dx = x.pool2d_backward(&g, Pool2d::avg(2)).unwrap();
    /// assert_eq!(dx.to_vec().unwrap(), vec![0.5; 4]);
    /// ```
    pub fn pool2d_backward(
        &self,
        grad: &Tensor<D, T, impl Shape>,
        pool: Pool2d,
    ) -> Result<Tensor<D, T, S>> {
        let name = pool.kind.name();
        let dims = rules::pool2d(name, ("input", self.dims()), &pool)?;
        if grad.dims() != dims.as_slice() {
            return Err(Error::shape(
                name,
                format!("`grad` of the result's dims {}", rules::fmt_dims(&dims)),
                format!("`grad` of dims {}", rules::fmt_dims(grad.dims())),
            ));
        }
        let storage = dispatch!(D, |be| be.wrap(be.pool2d_backward::<T>(
            (be.buf(&self.storage), &self.layout),
            (be.buf(&grad.storage), &grad.layout),
            &pool
        )?));
        // The backend writes a channels-last input's gradient channels-last.
        output_in(storage, self.layout.result_like(self.dims()))
    }
}
