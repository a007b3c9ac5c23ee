//! Functions of one element: `neg`, `relu`, `exp`, `gelu`, ...

use super::dispatch::dispatch;
use super::output::output;
use crate::device::Device;
use crate::dtype::{FloatDType, NumDType};
use crate::error::{Error, Result};
use crate::shape::Shape;
use crate::tensor::Tensor;
use tensorfn_kernels::UnaryOp;

macro_rules! unary_methods {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(&self) -> Result<Self> {
                self.unary(UnaryOp::$op)
            }
        )*
    };
}

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
        let storage = dispatch!(D, |be| be.wrap(be.unary(
            op,
            be.buf(&self.storage),
            &self.layout
        )?));
        output(storage, self.dims())
    }

    unary_methods! {
        /// `-x` (integers wrap: `-i32::MIN == i32::MIN`, `-1u8 == 255`).
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let x = Tensor::<Cpu, i32, shape![2]>::from_vec(vec![3, -4]).unwrap();
        /// assert_eq!(x.neg().unwrap().to_vec().unwrap(), vec![-3, 4]);
        /// ```
        neg => Neg;
        /// `|x|`.
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let x = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![3., -4.]).unwrap();
        /// assert_eq!(x.abs().unwrap().to_vec().unwrap(), vec![3., 4.]);
        /// ```
        abs => Abs;
        /// `max(x, 0)`.
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let x = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![3., -4.]).unwrap();
        /// assert_eq!(x.relu().unwrap().to_vec().unwrap(), vec![3., 0.]);
        /// ```
        relu => Relu;
        /// `x * x`.
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let x = Tensor::<Cpu, i64, shape![2]>::from_vec(vec![3, -4]).unwrap();
        /// assert_eq!(x.square().unwrap().to_vec().unwrap(), vec![9, 16]);
        /// ```
        square => Square;
    }
}

impl<D: Device, T: FloatDType, S: Shape> Tensor<D, T, S> {
    unary_methods! {
        /// `1 / (1 + e^-x)`.
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let x = Tensor::<Cpu, f32, shape![1]>::zeros().unwrap();
        /// assert_eq!(x.sigmoid().unwrap().to_vec().unwrap(), vec![0.5]);
        /// ```
        sigmoid => Sigmoid;
        /// Hyperbolic tangent.
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let x = Tensor::<Cpu, f64, shape![1]>::ones().unwrap();
        /// assert_eq!(x.tanh().unwrap().to_vec().unwrap(), vec![1f64.tanh()]);
        /// ```
        tanh => Tanh;
        /// `e^x`.
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let x = Tensor::<Cpu, f64, shape![1]>::ones().unwrap();
        /// assert_eq!(x.exp().unwrap().to_vec().unwrap(), vec![std::f64::consts::E]);
        /// ```
        exp => Exp;
        /// Natural logarithm (NaN below 0, -inf at 0).
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let x = Tensor::<Cpu, f32, shape![1]>::ones().unwrap();
        /// assert_eq!(x.log().unwrap().to_vec().unwrap(), vec![0.0]);
        /// ```
        log => Log;
        /// Sine.
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let x = Tensor::<Cpu, f32, shape![1]>::zeros().unwrap();
        /// assert_eq!(x.sin().unwrap().to_vec().unwrap(), vec![0.0]);
        /// ```
        sin => Sin;
        /// Cosine.
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let x = Tensor::<Cpu, f32, shape![1]>::zeros().unwrap();
        /// assert_eq!(x.cos().unwrap().to_vec().unwrap(), vec![1.0]);
        /// ```
        cos => Cos;
        /// Square root.
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let x = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![4., 9.]).unwrap();
        /// assert_eq!(x.sqrt().unwrap().to_vec().unwrap(), vec![2., 3.]);
        /// ```
        sqrt => Sqrt;
        /// `1 / sqrt(x)`.
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let x = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![4., 16.]).unwrap();
        /// assert_eq!(x.rsqrt().unwrap().to_vec().unwrap(), vec![0.5, 0.25]);
        /// ```
        rsqrt => Rsqrt;
        /// `1 / x`.
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let x = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![4., -0.5]).unwrap();
        /// assert_eq!(x.recip().unwrap().to_vec().unwrap(), vec![0.25, -2.]);
        /// ```
        recip => Recip;
        /// GELU with the tanh approximation (PyTorch's `approximate="tanh"`).
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let x = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![0., 10.]).unwrap();
        /// assert_eq!(x.gelu().unwrap().to_vec().unwrap(), vec![0., 10.]);
        /// ```
        gelu => Gelu;
        /// `x * sigmoid(x)`.
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let x = Tensor::<Cpu, f32, shape![1]>::zeros().unwrap();
        /// assert_eq!(x.silu().unwrap().to_vec().unwrap(), vec![0.]);
        /// ```
        silu => Silu;
    }
}
