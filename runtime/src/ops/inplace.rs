//! In-place updates (`add_`, `copy_from`, `+=`, ...). Tensors share
//! storage cheaply, so a write first makes the storage its own when it
//! is shared (copy-on-write): no other tensor ever sees the change.

use super::dispatch::dispatch;
use crate::device::{Cpu, Device};
use crate::dtype::{FloatDType, NumDType};
use crate::error::Result;
use crate::shape::{Const, Shape};
use crate::tensor::Tensor;
use tensorfn_core::rules;
use tensorfn_kernels::BinaryOp;

/// Shape types whose dims are all `Const`: for them `+=`, `-=`, `*=` and
/// `/=` with a tensor cannot fail, so the operators exist.
///
/// ```
/// use tensorfn_runtime::{Tensor, Cpu, shape};
/// let mut x = Tensor::<Cpu, f32, shape![2]>::ones().unwrap();
/// let y = Tensor::<Cpu, f32, shape![2]>::ones().unwrap();
/// x += &y;
/// assert_eq!(x.to_vec().unwrap(), vec![2., 2.]);
/// ```
///
/// With a `Dyn` dim the operator does not exist (use `add_`, which returns
/// an `Err`):
///
/// ```compile_fail,E0277
/// use tensorfn_runtime::{Tensor, Cpu, shape};
/// let mut x = Tensor::<Cpu, f32, shape![_]>::ones_dims(&[2]).unwrap();
/// let y = Tensor::<Cpu, f32, shape![_]>::ones_dims(&[3]).unwrap();
/// x += &y;
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` has run-time (`Dyn`) dims, so an operator like `+=` could fail",
    label = "the dims of this shape are only known at run time",
    note = "use `.add_(&other)?` (or `sub_`, `mul_`, `div_`), which returns an `Err` when the dims differ"
)]
pub trait StaticShape: Shape {}

macro_rules! static_shape {
    ($($n:ident),*) => {
        impl<$(const $n: usize),*> StaticShape for ($(Const<$n>,)*) {}
    };
}
static_shape!();
static_shape!(A);
static_shape!(A, B);
static_shape!(A, B, C);
static_shape!(A, B, C, E);
static_shape!(A, B, C, E, F);
static_shape!(A, B, C, E, F, G);

impl<D: Device, T: NumDType, S: Shape> Tensor<D, T, S> {
    fn assign(&mut self, op: BinaryOp, other: &Self) -> Result<()> {
        let name = format!("{}_", op.name());
        rules::broadcast_to(&name, ("other", other.dims()), self.dims())?;
        let lb = other.layout.broadcast_to(self.dims());
        let (storage, ld) = self.make_unique()?;
        let ld = ld.clone();
        dispatch!(D, |be| be.binary_assign(
            op,
            be.buf_mut(storage),
            &ld,
            be.buf(&other.storage),
            &lb
        ))
    }

    fn assign_scalar(&mut self, op: BinaryOp, value: T) -> Result<()> {
        let (storage, ld) = self.make_unique()?;
        let ld = ld.clone();
        dispatch!(D, |be| be.binary_scalar_assign(
            op,
            be.buf_mut(storage),
            &ld,
            value
        ))
    }

    /// `self += other` in place (`other` may broadcast to `self`'s dims).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let mut x = Tensor::<Cpu, f32, shape![2]>::ones().unwrap();
    /// let keep = x.clone();
    /// x.add_(&Tensor::full(2.0).unwrap()).unwrap();
    /// assert_eq!(x.to_vec().unwrap(), vec![3., 3.]);
    /// assert_eq!(keep.to_vec().unwrap(), vec![1., 1.]); // copy-on-write
    /// ```
    pub fn add_(&mut self, other: &Self) -> Result<()> {
        self.assign(BinaryOp::Add, other)
    }

    /// `self -= other` in place.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let mut x = Tensor::<Cpu, i32, shape![2]>::ones().unwrap();
    /// x.sub_(&Tensor::full(3).unwrap()).unwrap();
    /// assert_eq!(x.to_vec().unwrap(), vec![-2, -2]);
    /// ```
    pub fn sub_(&mut self, other: &Self) -> Result<()> {
        self.assign(BinaryOp::Sub, other)
    }

    /// `self *= other` in place.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let mut x = Tensor::<Cpu, f32, shape![2]>::full(1.5).unwrap();
    /// x.mul_(&Tensor::full(2.0).unwrap()).unwrap();
    /// assert_eq!(x.to_vec().unwrap(), vec![3., 3.]);
    /// ```
    pub fn mul_(&mut self, other: &Self) -> Result<()> {
        self.assign(BinaryOp::Mul, other)
    }

    /// `self /= other` in place (`Err` for an integer divisor of 0, and
    /// `self` is then left unchanged).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let mut x = Tensor::<Cpu, i64, shape![2]>::full(7).unwrap();
    /// x.div_(&Tensor::full(2).unwrap()).unwrap();
    /// assert_eq!(x.to_vec().unwrap(), vec![3, 3]);
    /// assert!(x.div_(&Tensor::zeros().unwrap()).is_err());
    /// assert_eq!(x.to_vec().unwrap(), vec![3, 3]);
    /// ```
    pub fn div_(&mut self, other: &Self) -> Result<()> {
        self.assign(BinaryOp::Div, other)
    }

    /// `self += value` in place.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let mut x = Tensor::<Cpu, u8, shape![2]>::full(250).unwrap();
    /// x.add_scalar_(10).unwrap();
    /// assert_eq!(x.to_vec().unwrap(), vec![4, 4]); // wraps like PyTorch
    /// ```
    pub fn add_scalar_(&mut self, value: T) -> Result<()> {
        self.assign_scalar(BinaryOp::Add, value)
    }

    /// `self -= value` in place.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let mut x = Tensor::<Cpu, f32, shape![2]>::ones().unwrap();
    /// x.sub_scalar_(0.5).unwrap();
    /// assert_eq!(x.to_vec().unwrap(), vec![0.5, 0.5]);
    /// ```
    pub fn sub_scalar_(&mut self, value: T) -> Result<()> {
        self.assign_scalar(BinaryOp::Sub, value)
    }

    /// `self *= value` in place.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let mut x = Tensor::<Cpu, f32, shape![2]>::ones().unwrap();
    /// x.mul_scalar_(4.0).unwrap();
    /// assert_eq!(x.to_vec().unwrap(), vec![4., 4.]);
    /// ```
    pub fn mul_scalar_(&mut self, value: T) -> Result<()> {
        self.assign_scalar(BinaryOp::Mul, value)
    }

    /// `self /= value` in place (`Err` for an integer 0).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let mut x = Tensor::<Cpu, f32, shape![2]>::ones().unwrap();
    /// x.div_scalar_(4.0).unwrap();
    /// assert_eq!(x.to_vec().unwrap(), vec![0.25, 0.25]);
    /// ```
    pub fn div_scalar_(&mut self, value: T) -> Result<()> {
        self.assign_scalar(BinaryOp::Div, value)
    }
}

impl<D: Device, T: crate::DType, S: Shape> Tensor<D, T, S> {
    /// Overwrites every element with `src`'s (which may broadcast to
    /// `self`'s dims), like PyTorch's `copy_`.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let mut x = Tensor::<Cpu, f32, shape![2, 2]>::zeros().unwrap();
    /// let src = Tensor::<Cpu, f32, shape![2, 2]>::from_vec(vec![1., 2., 3., 4.]).unwrap();
    /// x.copy_from(&src.t().unwrap()).unwrap();
    /// assert_eq!(x.to_vec().unwrap(), vec![1., 3., 2., 4.]);
    /// ```
    pub fn copy_from(&mut self, src: &Self) -> Result<()> {
        rules::broadcast_to("copy_from", ("src", src.dims()), self.dims())?;
        let ls = src.layout.broadcast_to(self.dims());
        let (storage, ld) = self.make_unique_for_overwrite()?;
        let ld = ld.clone();
        dispatch!(D, |be| be.copy_into(
            be.buf(&src.storage),
            &ls,
            be.buf_mut(storage),
            &ld
        ))
    }
}

/// Ops that cannot fail for CPU tensors of static shapes: an `Err` here
/// would be a bug in tensorfn, not in the caller.
fn infallible(r: Result<()>) {
    if let Err(e) = r {
        unreachable!("an infallible in-place operation failed: {e}");
    }
}

/// Right-hand sides of `+=`, `-=`, `*=` (and `/=` for floats) on a CPU
/// tensor of dtype `T` and shape `S`: a scalar `T`, or a tensor (by value
/// or reference) of the same static shape `S`.
///
/// ```
/// use tensorfn_runtime::{Tensor, Cpu, shape};
/// let mut x = Tensor::<Cpu, i32, shape![2]>::ones().unwrap();
/// x += 4;
/// x *= Tensor::<Cpu, i32, shape![2]>::from_vec(vec![1, 2]).unwrap();
/// assert_eq!(x.to_vec().unwrap(), vec![5, 10]);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the right-hand side of `+=`, `-=` or `*=` on a `{T}` tensor of shape `{S}`",
    label = "expected a `{T}` scalar or a tensor of shape `{S}` with only Const dims",
    note = "for shapes with `Dyn` dims use `.add_(&other)?` (or `sub_`, `mul_`, `div_`), which returns an `Err` when the dims differ"
)]
pub trait AssignRhs<T: NumDType, S: Shape> {
    /// Applies `op` to `dst` with this right-hand side.
    #[doc(hidden)]
    fn apply(self, op: BinaryOp, dst: &mut Tensor<Cpu, T, S>) -> Result<()>;
}

impl<T: NumDType, S: Shape> AssignRhs<T, S> for T {
    fn apply(self, op: BinaryOp, dst: &mut Tensor<Cpu, T, S>) -> Result<()> {
        dst.assign_scalar(op, self)
    }
}
impl<T: NumDType, S: StaticShape> AssignRhs<T, S> for &Tensor<Cpu, T, S> {
    fn apply(self, op: BinaryOp, dst: &mut Tensor<Cpu, T, S>) -> Result<()> {
        dst.assign(op, self)
    }
}
impl<T: NumDType, S: StaticShape> AssignRhs<T, S> for Tensor<Cpu, T, S> {
    fn apply(self, op: BinaryOp, dst: &mut Tensor<Cpu, T, S>) -> Result<()> {
        dst.assign(op, &self)
    }
}

macro_rules! assign_op {
    ($Trait:ident, $method:ident, $op:ident, $Bound:ident) => {
        impl<T: $Bound, S: Shape, R: AssignRhs<T, S>> std::ops::$Trait<R> for Tensor<Cpu, T, S> {
            fn $method(&mut self, rhs: R) {
                infallible(rhs.apply(BinaryOp::$op, self));
            }
        }
    };
}
assign_op!(AddAssign, add_assign, Add, NumDType);
assign_op!(SubAssign, sub_assign, Sub, NumDType);
assign_op!(MulAssign, mul_assign, Mul, NumDType);
// Integer division can meet a 0 divisor, so `/=` is only for floats.
assign_op!(DivAssign, div_assign, Div, FloatDType);
