//! Elementwise arithmetic between tensors (PyTorch broadcasting) and with
//! scalars, and the `+ - * /` operators.

use super::check_result;
use super::dispatch::dispatch;
use super::order::ChannelsLast;
use super::output::output_in;
use crate::device::Device;
use crate::dtype::{FloatDType, NumDType};
use crate::error::Result;
use crate::shape::Shape;
use crate::tensor::Tensor;
use tensorfn_core::rules;
use tensorfn_kernels::BinaryOp;

/// The dims of broadcasting tensors of `dims` together: PyTorch's rule
/// (aligned from the right, each pair equal or one of them 1), strict
/// where an operand gets leading dims and both sides then grow
/// ([`rules::broadcast`]).
///
/// ```
/// use tensorfn_runtime::broadcast_dims;
/// assert_eq!(broadcast_dims(&[&[4, 1, 3], &[1, 5, 1]]).unwrap(), vec![4, 5, 3]);
/// assert!(broadcast_dims(&[&[2, 3], &[4]]).is_err());
/// // `[5, 1]` with `[5]` would be `[5, 5]`: write `[1, 5]` if that is meant.
/// assert!(broadcast_dims(&[&[5, 1], &[5]]).is_err());
/// ```
pub fn broadcast_dims(dims: &[&[usize]]) -> Result<Vec<usize>> {
    let names: Vec<String> = (0..dims.len()).map(|i| format!("operand {i}")).collect();
    let operands: Vec<(&str, &[usize])> = names
        .iter()
        .map(String::as_str)
        .zip(dims.iter().copied())
        .collect();
    Ok(rules::broadcast("broadcast", &operands)?)
}

/// `op(a, b)` with `a` and `b` broadcast to each other.
pub(crate) fn broadcast_binary<D: Device, T: NumDType, SO: Shape>(
    op: BinaryOp,
    a: &Tensor<D, T, impl Shape>,
    b: &Tensor<D, T, impl Shape>,
) -> Result<Tensor<D, T, SO>> {
    let dims = rules::broadcast(op.name(), &[("self", a.dims()), ("other", b.dims())])?;
    check_result::<SO>(op.name(), &dims)?;
    let (mut la, mut lb) = (a.layout.broadcast_to(&dims), b.layout.broadcast_to(&dims));
    // A channels-last operand gives a channels-last result.
    let order = ChannelsLast::pick(&dims, &[&la, &lb]);
    if let Some(o) = order {
        (la, lb) = (o.apply(&la), o.apply(&lb));
    }
    let storage = dispatch!(D, |be| be.wrap(be.binary(
        op,
        be.buf(&a.storage),
        &la,
        be.buf(&b.storage),
        &lb
    )?));
    output_in(storage, ChannelsLast::result(order, &dims))
}

/// `op(x, s)`, or `op(s, x)` when `scalar_first`.
pub(crate) fn scalar_binary<D: Device, T: NumDType, S: Shape>(
    op: BinaryOp,
    x: &Tensor<D, T, S>,
    s: T,
    scalar_first: bool,
) -> Result<Tensor<D, T, S>> {
    let order = ChannelsLast::pick(x.dims(), &[&x.layout]);
    let l = order.map_or_else(|| x.layout.clone(), |o| o.apply(&x.layout));
    let storage = dispatch!(D, |be| be.wrap(be.binary_scalar(
        op,
        be.buf(&x.storage),
        &l,
        s,
        scalar_first
    )?));
    output_in(storage, ChannelsLast::result(order, x.dims()))
}

macro_rules! same_shape_ops {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(&self, other: &Self) -> Result<Self> {
                broadcast_binary(BinaryOp::$op, self, other)
            }
        )*
    };
}

macro_rules! broadcast_ops {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {
        $(
            $(#[$doc])*
            pub fn $name<SO: Shape>(&self, other: &Tensor<D, T, impl Shape>) -> Result<Tensor<D, T, SO>> {
                broadcast_binary(BinaryOp::$op, self, other)
            }
        )*
    };
}

macro_rules! scalar_ops {
    ($($(#[$doc:meta])* $name:ident => $op:ident, $first:expr;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(&self, value: T) -> Result<Self> {
                scalar_binary(BinaryOp::$op, self, value, $first)
            }
        )*
    };
}

impl<D: Device, T: NumDType, S: Shape> Tensor<D, T, S> {
    same_shape_ops! {
        /// `self + other` elementwise (same shape type; run-time dims
        /// broadcast like PyTorch). Integers wrap on overflow.
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let a = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![1., 2.]).unwrap();
        /// let b = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![10., 20.]).unwrap();
        /// assert_eq!(a.add(&b).unwrap().to_vec().unwrap(), vec![11., 22.]);
        /// assert_eq!((&a + &b).unwrap().to_vec().unwrap(), vec![11., 22.]);
        /// ```
        add => Add;
        /// `self - other` elementwise.
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let a = Tensor::<Cpu, i32, shape![2]>::from_vec(vec![1, 2]).unwrap();
        /// let b = Tensor::<Cpu, i32, shape![2]>::from_vec(vec![10, 20]).unwrap();
        /// assert_eq!(a.sub(&b).unwrap().to_vec().unwrap(), vec![-9, -18]);
        /// ```
        sub => Sub;
        /// `self * other` elementwise.
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let a = Tensor::<Cpu, f64, shape![2]>::from_vec(vec![1.5, 2.]).unwrap();
        /// assert_eq!(a.mul(&a).unwrap().to_vec().unwrap(), vec![2.25, 4.]);
        /// ```
        mul => Mul;
        /// `self / other` elementwise. Integer division truncates toward
        /// zero; an integer divisor of 0 is an `Err` (PyTorch raises
        /// `ZeroDivisionError`), float division follows IEEE (inf, NaN).
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let a = Tensor::<Cpu, i64, shape![2]>::from_vec(vec![7, -7]).unwrap();
        /// let b = Tensor::<Cpu, i64, shape![2]>::from_vec(vec![2, 2]).unwrap();
        /// assert_eq!(a.div(&b).unwrap().to_vec().unwrap(), vec![3, -3]);
        /// let zero = Tensor::<Cpu, i64, shape![2]>::zeros().unwrap();
        /// assert!(a.div(&zero).unwrap_err().to_string().contains("division by zero"));
        /// ```
        div => Div;
        /// The larger of each pair (NaN if either is NaN, like `torch.maximum`).
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let a = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![1., 5.]).unwrap();
        /// let b = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![3., 2.]).unwrap();
        /// assert_eq!(a.maximum(&b).unwrap().to_vec().unwrap(), vec![3., 5.]);
        /// ```
        maximum => Max;
        /// The smaller of each pair (NaN if either is NaN, like `torch.minimum`).
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let a = Tensor::<Cpu, u8, shape![2]>::from_vec(vec![1, 5]).unwrap();
        /// let b = Tensor::<Cpu, u8, shape![2]>::from_vec(vec![3, 2]).unwrap();
        /// assert_eq!(a.minimum(&b).unwrap().to_vec().unwrap(), vec![1, 2]);
        /// ```
        minimum => Min;
    }

    broadcast_ops! {
        /// `self + other` with PyTorch broadcasting; the result type `SO`
        /// is annotated or inferred and checked at run time.
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let x = Tensor::<Cpu, f32, shape![2, 3]>::zeros().unwrap();
        /// let bias = Tensor::<Cpu, f32, shape![3]>::from_vec(vec![1., 2., 3.]).unwrap();
        /// let y: Tensor<Cpu, f32, shape![2, 3]> = x.add_broadcast(&bias).unwrap();
        /// assert_eq!(y.to_vec().unwrap(), vec![1., 2., 3., 1., 2., 3.]);
        /// let bad = Tensor::<Cpu, f32, shape![2]>::zeros().unwrap();
        /// assert!(x.add_broadcast::<shape![2, 3]>(&bad).is_err());
        /// ```
        add_broadcast => Add;
        /// `self - other` with PyTorch broadcasting, strict where an
        /// operand gets leading dims and both sides grow.
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let x = Tensor::<Cpu, f32, shape![2, 1]>::from_vec(vec![10., 20.]).unwrap();
        /// let y = Tensor::<Cpu, f32, shape![1, 3]>::from_vec(vec![1., 2., 3.]).unwrap();
        /// let z = x.sub_broadcast::<shape![2, 3]>(&y).unwrap();
        /// assert_eq!(z.to_vec().unwrap(), vec![9., 8., 7., 19., 18., 17.]);
        /// // `[2, 1]` with `[3]` would grow both: an `Err` naming the fix.
        /// let v = Tensor::<Cpu, f32, shape![3]>::from_vec(vec![1., 2., 3.]).unwrap();
        /// assert!(x.sub_broadcast::<shape![2, 3]>(&v).is_err());
        /// ```
        sub_broadcast => Sub;
        /// `self * other` with PyTorch broadcasting.
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let x = Tensor::<Cpu, i32, shape![2, 2]>::from_vec(vec![1, 2, 3, 4]).unwrap();
        /// let s = Tensor::<Cpu, i32, shape![]>::full(10).unwrap();
        /// let z = x.mul_broadcast::<shape![2, 2]>(&s).unwrap();
        /// assert_eq!(z.to_vec().unwrap(), vec![10, 20, 30, 40]);
        /// ```
        mul_broadcast => Mul;
        /// `self / other` with PyTorch broadcasting.
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let x = Tensor::<Cpu, f32, shape![2, 2]>::from_vec(vec![1., 2., 3., 4.]).unwrap();
        /// let d = Tensor::<Cpu, f32, shape![2, 1]>::from_vec(vec![1., 2.]).unwrap();
        /// let z = x.div_broadcast::<shape![2, 2]>(&d).unwrap();
        /// assert_eq!(z.to_vec().unwrap(), vec![1., 2., 1.5, 2.]);
        /// ```
        div_broadcast => Div;
    }

    scalar_ops! {
        /// `self + value`.
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let x = Tensor::<Cpu, f32, shape![2]>::ones().unwrap();
        /// assert_eq!(x.add_scalar(2.0).unwrap().to_vec().unwrap(), vec![3., 3.]);
        /// assert_eq!((&x + 2.0).unwrap().to_vec().unwrap(), vec![3., 3.]);
        /// ```
        add_scalar => Add, false;
        /// `self - value`.
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let x = Tensor::<Cpu, u8, shape![2]>::ones().unwrap();
        /// assert_eq!(x.sub_scalar(2).unwrap().to_vec().unwrap(), vec![255, 255]);
        /// ```
        sub_scalar => Sub, false;
        /// `self * value`.
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let x = Tensor::<Cpu, i64, shape![2]>::arange(1, 1).unwrap();
        /// assert_eq!(x.mul_scalar(3).unwrap().to_vec().unwrap(), vec![3, 6]);
        /// ```
        mul_scalar => Mul, false;
        /// `self / value` (`Err` for an integer 0).
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let x = Tensor::<Cpu, f32, shape![2]>::arange(1.0, 1.0).unwrap();
        /// assert_eq!(x.div_scalar(2.0).unwrap().to_vec().unwrap(), vec![0.5, 1.0]);
        /// let i = Tensor::<Cpu, i32, shape![2]>::ones().unwrap();
        /// assert!(i.div_scalar(0).is_err());
        /// ```
        div_scalar => Div, false;
        /// `value - self`.
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let x = Tensor::<Cpu, f32, shape![2]>::arange(1.0, 1.0).unwrap();
        /// assert_eq!(x.rsub_scalar(10.0).unwrap().to_vec().unwrap(), vec![9., 8.]);
        /// ```
        rsub_scalar => Sub, true;
        /// `value / self` (`Err` if an integer `self` holds a 0).
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let x = Tensor::<Cpu, f32, shape![2]>::arange(1.0, 1.0).unwrap();
        /// assert_eq!(x.rdiv_scalar(1.0).unwrap().to_vec().unwrap(), vec![1.0, 0.5]);
        /// ```
        rdiv_scalar => Div, true;
        /// `max(self, value)` elementwise (NaN propagates).
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let x = Tensor::<Cpu, i32, shape![3]>::arange(-1, 1).unwrap();
        /// assert_eq!(x.maximum_scalar(0).unwrap().to_vec().unwrap(), vec![0, 0, 1]);
        /// ```
        maximum_scalar => Max, false;
        /// `min(self, value)` elementwise (NaN propagates).
        ///
        /// ```
        /// use tensorfn_runtime::{Tensor, Cpu, shape};
        /// let x = Tensor::<Cpu, i32, shape![3]>::arange(-1, 1).unwrap();
        /// assert_eq!(x.minimum_scalar(0).unwrap().to_vec().unwrap(), vec![-1, 0, 0]);
        /// ```
        minimum_scalar => Min, false;
    }
}

impl<D: Device, T: FloatDType, S: Shape> Tensor<D, T, S> {
    /// `self ^ other` elementwise (floats).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![2., 3.]).unwrap();
    /// let e = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![3., 2.]).unwrap();
    /// assert_eq!(x.pow(&e).unwrap().to_vec().unwrap(), vec![8., 9.]);
    /// ```
    pub fn pow(&self, other: &Self) -> Result<Self> {
        broadcast_binary(BinaryOp::Pow, self, other)
    }

    /// `self ^ value` elementwise (floats).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f64, shape![2]>::from_vec(vec![4., 9.]).unwrap();
    /// assert_eq!(x.pow_scalar(0.5).unwrap().to_vec().unwrap(), vec![2., 3.]);
    /// ```
    pub fn pow_scalar(&self, value: T) -> Result<Self> {
        scalar_binary(BinaryOp::Pow, self, value, false)
    }

    /// `x` where `x > 0`, else `negative_slope * x` (PyTorch's
    /// `leaky_relu`, whose default slope is 0.01). NaN stays NaN.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![3]>::from_vec(vec![-2., 0., 3.]).unwrap();
    /// assert_eq!(x.leaky_relu(0.5).unwrap().to_vec().unwrap(), vec![-1., 0., 3.]);
    /// ```
    pub fn leaky_relu(&self, negative_slope: T) -> Result<Self> {
        scalar_binary(BinaryOp::LeakyRelu, self, negative_slope, false)
    }

    /// `x` where `x > 0`, else `alpha * (e^x - 1)` (PyTorch's `elu`, whose
    /// default `alpha` is 1).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f64, shape![2]>::from_vec(vec![-1., 2.]).unwrap();
    /// let y = x.elu(1.0).unwrap().to_vec().unwrap();
    /// assert_eq!(y, vec![(-1f64).exp_m1(), 2.]);
    /// ```
    pub fn elu(&self, alpha: T) -> Result<Self> {
        scalar_binary(BinaryOp::Elu, self, alpha, false)
    }
}

macro_rules! operator {
    ($Trait:ident, $method:ident, $tensor_fn:ident, $scalar_fn:ident) => {
        impl<D: Device, T: NumDType, S: Shape> std::ops::$Trait<&Tensor<D, T, S>>
            for &Tensor<D, T, S>
        {
            type Output = Result<Tensor<D, T, S>>;
            fn $method(self, rhs: &Tensor<D, T, S>) -> Self::Output {
                Tensor::$tensor_fn(self, rhs)
            }
        }
        impl<D: Device, T: NumDType, S: Shape> std::ops::$Trait<Tensor<D, T, S>>
            for Tensor<D, T, S>
        {
            type Output = Result<Tensor<D, T, S>>;
            fn $method(self, rhs: Tensor<D, T, S>) -> Self::Output {
                Tensor::$tensor_fn(&self, &rhs)
            }
        }
        impl<D: Device, T: NumDType, S: Shape> std::ops::$Trait<&Tensor<D, T, S>>
            for Tensor<D, T, S>
        {
            type Output = Result<Tensor<D, T, S>>;
            fn $method(self, rhs: &Tensor<D, T, S>) -> Self::Output {
                Tensor::$tensor_fn(&self, rhs)
            }
        }
        impl<D: Device, T: NumDType, S: Shape> std::ops::$Trait<Tensor<D, T, S>>
            for &Tensor<D, T, S>
        {
            type Output = Result<Tensor<D, T, S>>;
            fn $method(self, rhs: Tensor<D, T, S>) -> Self::Output {
                Tensor::$tensor_fn(self, &rhs)
            }
        }
        impl<D: Device, T: NumDType, S: Shape> std::ops::$Trait<T> for &Tensor<D, T, S> {
            type Output = Result<Tensor<D, T, S>>;
            fn $method(self, rhs: T) -> Self::Output {
                Tensor::$scalar_fn(self, rhs)
            }
        }
        impl<D: Device, T: NumDType, S: Shape> std::ops::$Trait<T> for Tensor<D, T, S> {
            type Output = Result<Tensor<D, T, S>>;
            fn $method(self, rhs: T) -> Self::Output {
                Tensor::$scalar_fn(&self, rhs)
            }
        }
    };
}
operator!(Add, add, add, add_scalar);
operator!(Sub, sub, sub, sub_scalar);
operator!(Mul, mul, mul, mul_scalar);
operator!(Div, div, div, div_scalar);
