//! Functions of one element: `neg`, `relu`, `exp`, `gelu`, ...

use super::dispatch::dispatch;
use super::order::ChannelsLast;
use super::output::output_in;
use crate::device::Device;
use crate::dtype::{FloatDType, NumDType};
use crate::error::{Error, Result};
use crate::shape::Shape;
use crate::tensor::Tensor;
use tensorfn_kernels::UnaryOp;

impl<D: Device, T: NumDType, S: Shape> Tensor<D, T, S> {
    /// `op(x)` for every element; `Err` for an op that needs a float
    /// dtype (`op.needs_float()`) on an integer tensor.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// use tensorfn_kernels::UnaryOp;
    /// let x = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![-1., 4.]).unwrap();
    /// assert_eq!(x.unary(UnaryOp::Abs).unwrap().to_vec().unwrap(), vec![1., 4.]);
    /// let i = Tensor::<Cpu, i32, shape![2]>::ones().unwrap();
    /// assert!(i.unary(UnaryOp::Exp).is_err());
    /// ```
    pub fn unary(&self, op: UnaryOp) -> Result<Self> {
        if op.needs_float() && !T::KIND.is_float() {
            return Err(Error::float_only(op.name(), T::KIND));
        }
        // A channels-last input gives a channels-last result.
        let order = ChannelsLast::pick(self.dims(), &[&self.layout]);
        let l = order.map_or_else(|| self.layout.clone(), |o| o.apply(&self.layout));
        let storage = dispatch!(D, |be| be.wrap(be.unary(op, be.buf(&self.storage), &l)?));
        output_in(storage, ChannelsLast::result(order, self.dims()))
    }
}

/// One method per op of the catalogue's unary table: on every numeric
/// dtype for the ops integers have, on float dtypes for the others.
macro_rules! unary_methods {
    ($($(#[doc = $doc:literal])* $V:ident => $m:ident { ints: $ints:tt, $($field:tt)* })*) => {
        $(unary_method!($ints, $V, $m, $($doc)*);)*
    };
}

macro_rules! unary_method {
    (true, $V:ident, $m:ident, $($doc:literal)*) => {
        impl<D: Device, T: NumDType, S: Shape> Tensor<D, T, S> {
            unary_method!(@fn $V, $m, $($doc)*);
        }
    };
    (false, $V:ident, $m:ident, $($doc:literal)*) => {
        impl<D: Device, T: FloatDType, S: Shape> Tensor<D, T, S> {
            unary_method!(@fn $V, $m, $($doc)*);
        }
    };
    (@fn $V:ident, $m:ident, $($doc:literal)*) => {
        $(#[doc = $doc])*
        ///
        /// Elementwise, on the CPU and on CUDA; see
        #[doc = concat!("[`UnaryOp::", stringify!($V), "`] for its reference and accuracy.")]
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// use tensorfn_kernels::UnaryOp;
        #[doc = concat!("let op = UnaryOp::", stringify!($V), ";")]
        /// let (lo, hi) = op.test_domain();
        /// let xs: Vec<f64> = (0..5).map(|i| lo + (hi - lo) * (0.1 + 0.2 * i as f64)).collect();
        /// let x = Tensor::<Cpu, f64, shape![5]>::from_vec(xs.clone()).unwrap();
        #[doc = concat!("let y = x.", stringify!($m), "().unwrap().to_vec().unwrap();")]
        /// for (x, y) in xs.iter().zip(&y) {
        ///     let want = op.eval_f64(*x);
        ///     assert!((y - want).abs() <= 1e-14 * want.abs().max(1.0), "{x}: {y} vs {want}");
        /// }
        /// ```
        pub fn $m(&self) -> Result<Self> {
            self.unary(UnaryOp::$V)
        }
    };
}

tensorfn_core::for_each_unary_op!(unary_methods);
