//! How functions written with `tensor_fn!` take their tensor parameters:
//! through [`TensorArg`], whose bounds compare the argument's device,
//! dtype, rank and each dim with the parameter's, so that a mismatch at a
//! call names the part that differs, with numbers, and the conversion
//! that fixes it (rustc's own message for a concrete parameter type shows
//! the two types, a rank as tuples and a GPU ordinal as a bare number).
//!
//! Each comparison is a trait implemented for [`Check`] where the two
//! sides are equal (`ParamDevice<D, D>`, `ParamSize<I, N, N>`, ...), with
//! `#[diagnostic::on_unimplemented]` saying what differs. As each has one
//! implementation for any given parameter side, rustc infers an argument
//! built in place (`f(&Tensor::ones()?)`), a dtype or device parameter of
//! a generic function and a const generic dim from it, as it did from a
//! concrete type. All of it is resolved at compile time: the parameter is
//! the caller's own reference, seen under the parameter's type.
//!
//! ```
//! use tensorfn_runtime::{Tensor, TensorArg, Cpu, Dyn, shape};
//! let x = Tensor::<Cpu, f32, shape![_]>::zeros_dims(&[3])?;
//! let r = &x;
//! let y: &Tensor<Cpu, f32, (Dyn,)> = TensorArg::tensor(&r)?;
//! assert!(std::ptr::eq(y, &x));
//! # Ok::<(), tensorfn_runtime::Error>(())
//! ```

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::{Const, Dyn, Shape};
use crate::tensor::Tensor;
use std::any::TypeId;

/// A tensor argument that fits a parameter `&Tensor<D, T, S>` of a
/// function written with `tensor_fn!`: the tensor itself, or a reference
/// to one, of exactly that device, dtype and shape type.
///
/// Generated functions take `x: &impl TensorArg<D, T, S>` where the
/// signature says `x: &Tensor<D, T, [..]>`, and see the argument as that
/// tensor through [`tensor`](Self::tensor). A call with a tensor that
/// differs is a compile error naming the part (device, dtype, rank, dim
/// and its sizes) and the conversion to write.
///
/// ```
/// use tensorfn_runtime::{Tensor, TensorArg, Cpu, Const, Dyn, Result, shape};
/// fn rows(x: &impl TensorArg<Cpu, f32, (Dyn, Const<3>)>) -> Result<usize> {
///     let x: &Tensor<Cpu, f32, (Dyn, Const<3>)> = x.tensor()?;
///     Ok(x.shape()[0])
/// }
/// let x = Tensor::<Cpu, f32, shape![_, 3]>::zeros_dims(&[4, 3])?;
/// assert_eq!(rows(&x)?, 4);
/// assert_eq!(rows(&&x)?, 4);
/// // An argument built in place gets the parameter's type.
/// assert_eq!(rows(&Tensor::zeros_dims(&[2, 3])?)?, 2);
/// # Ok::<(), tensorfn_runtime::Error>(())
/// ```
///
/// A tensor of another dtype does not compile, with the fix in the
/// message (`.cast::<f32>()`):
///
/// ```compile_fail,E0277
/// use tensorfn_runtime::{Tensor, TensorArg, Cpu, Const, Dyn, Result, shape};
/// fn rows(x: &impl TensorArg<Cpu, f32, (Dyn, Const<3>)>) -> Result<usize> {
///     Ok(x.tensor()?.shape()[0])
/// }
/// let x = Tensor::<Cpu, f64, shape![_, 3]>::zeros_dims(&[4, 3])?;
/// rows(&x)?;
/// # Ok::<(), tensorfn_runtime::Error>(())
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a tensor",
    label = "expected a `&Tensor<{D}, {T}, ..>`",
    note = "the parameter is a `&Tensor<{D}, {T}, {S}>`"
)]
pub trait TensorArg<D: Device, T: DType, S: Shape> {
    /// The argument as the parameter's tensor type (the same tensor, not
    /// a copy; `Err` is unreachable, as the bounds proved the types equal).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, TensorArg, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2]>::ones()?;
    /// let y: &Tensor<Cpu, f32, shape![2]> = TensorArg::tensor(&x)?;
    /// assert!(std::ptr::eq(y, &x));
    /// # Ok::<(), tensorfn_runtime::Error>(())
    /// ```
    fn tensor(&self) -> Result<&Tensor<D, T, S>>;
}

impl<D, T, S, D2, T2, S2> TensorArg<D, T, S> for Tensor<D2, T2, S2>
where
    D: Device,
    T: DType,
    S: Shape,
    D2: Device,
    T2: DType,
    S2: Shape,
    Check: ParamDevice<D, D2> + ParamDType<T, T2> + ParamShape<S, S2>,
{
    #[inline(always)]
    fn tensor(&self) -> Result<&Tensor<D, T, S>> {
        same_type(self)
    }
}

impl<D: Device, T: DType, S: Shape, X: TensorArg<D, T, S>> TensorArg<D, T, S> for &X {
    #[inline(always)]
    fn tensor(&self) -> Result<&Tensor<D, T, S>> {
        (**self).tensor()
    }
}

/// `a` as a `B`, which the bounds of [`TensorArg`] proved to be `A`
/// itself: the comparison of two constant `TypeId`s, folded away (no
/// `dyn Any`, no copy); `Err` where they differ, never a wrong cast.
#[inline(always)]
fn same_type<A: 'static, B: 'static>(a: &A) -> Result<&B> {
    if TypeId::of::<A>() == TypeId::of::<B>() {
        // SAFETY: `A` and `B` are the same type, so the reference is one
        // to a `B`, with the same lifetime.
        Ok(unsafe { &*(a as *const A).cast::<B>() })
    } else {
        Err(Error::DType {
            op: "tensor_fn".into(),
            expected: std::any::type_name::<B>().into(),
            found: std::any::type_name::<A>().into(),
        })
    }
}

/// What the comparisons of [`TensorArg`] are implemented for.
#[derive(Debug)]
pub struct Check;

/// The argument's device `F` is the parameter's `E`.
#[diagnostic::on_unimplemented(
    message = "this tensor is on `{F}` where the parameter takes `{E}`",
    label = "on `{F}`, expected `{E}`",
    note = "move it first: `.to_device::<{E}>()?`"
)]
pub trait ParamDevice<E, F> {}
impl<D> ParamDevice<D, D> for Check {}

/// The argument's dtype `F` is the parameter's `E`.
#[diagnostic::on_unimplemented(
    message = "this tensor holds `{F}` where the parameter takes `{E}`",
    label = "`{F}`, expected `{E}`",
    note = "convert it first: `.cast::<{E}>()?`"
)]
pub trait ParamDType<E, F> {}
impl<T> ParamDType<T, T> for Check {}

/// The argument's shape `F` is the parameter's `E`: the same rank, each
/// dim compared by [`ParamDim`].
#[diagnostic::on_unimplemented(
    message = "this tensor's shape `{F}` is not the parameter's `{E}`",
    note = "reshape it first: `.reshape::<shape![..]>()?`"
)]
pub trait ParamShape<E, F> {}

/// The argument's rank `F` is the parameter's `E` (`S`: both shapes).
#[diagnostic::on_unimplemented(
    message = "this tensor has rank {F} where the parameter has rank {E}",
    label = "rank {F}, expected rank {E}",
    note = "reshape it first: `.reshape::<shape![..]>()?` (`.reshape_dims::<shape![..]>(&dims)?` with run-time dims)"
)]
pub trait ParamRank<const E: usize, const F: usize, S> {}
impl<const R: usize, S> ParamRank<R, R, S> for Check {}

/// Dim `I` of the argument, `F`, is the parameter's `E`: both run-time
/// dims, or both static of one size ([`ParamSize`]).
#[diagnostic::on_unimplemented(
    message = "dim {I} of this tensor is `{F}` where the parameter's is `{E}`",
    label = "dim {I} is `{F}`, expected `{E}`",
    note = "convert it first: `.into_shape::<shape![..]>()?`"
)]
pub trait ParamDim<const I: usize, E, F> {}
impl<const I: usize> ParamDim<I, Dyn, Dyn> for Check {}
impl<const I: usize, const E: usize, const F: usize> ParamDim<I, Const<E>, Const<F>> for Check where
    Check: ParamSize<I, E, F>
{
}
impl<const I: usize, const F: usize> ParamDim<I, Dyn, Const<F>> for Check where
    Check: StaticForRuntime<I, F>
{
}
impl<const I: usize, const E: usize> ParamDim<I, Const<E>, Dyn> for Check where
    Check: RuntimeForStatic<I, E>
{
}

/// Static dim `I` of the argument has the parameter's size: `F` is `E`.
#[diagnostic::on_unimplemented(
    message = "dim {I} of this tensor is {F} where the parameter's is {E}",
    label = "dim {I} is {F}, expected {E}",
    note = "pass a tensor whose dim {I} is {E}, or reshape it first: `.reshape::<shape![..]>()?`"
)]
pub trait ParamSize<const I: usize, const E: usize, const F: usize> {}
impl<const I: usize, const N: usize> ParamSize<I, N, N> for Check {}

/// Never implemented: the argument's dim `I` is the static size `F` where
/// the parameter's is a run-time dim.
#[diagnostic::on_unimplemented(
    message = "dim {I} of this tensor is static ({F}) where the parameter's is a run-time dim",
    label = "dim {I} is `Const<{F}>`, expected `Dyn`",
    note = "make it a run-time dim first: `.into_shape::<shape![..]>()?` with `_` at dim {I}",
    note = "if the function's shape names a `const` item there with one letter (`M`), mark it `{{M}}` so that it is static: one letter alone is a run-time dim"
)]
pub trait StaticForRuntime<const I: usize, const F: usize> {}

/// Never implemented: the argument's dim `I` is a run-time dim where the
/// parameter's is the static size `E`.
#[diagnostic::on_unimplemented(
    message = "dim {I} of this tensor is a run-time dim where the parameter's is static ({E})",
    label = "dim {I} is `Dyn`, expected `Const<{E}>`",
    note = "check its size first: `.into_shape::<shape![..]>()?` with {E} at dim {I} (an `Err` if it is not {E})"
)]
pub trait RuntimeForStatic<const I: usize, const E: usize> {}

/// `ParamShape` for one pair of ranks: each dim compared where they are
/// equal, else the ranks (a bound on both shapes' dims, so that it is not
/// trivially false).
macro_rules! param_shape {
    ([$($e:ident $f:ident $i:literal),*]) => {
        impl<$($e, $f),*> ParamShape<($($e,)*), ($($f,)*)> for Check
        where
            Check: $(ParamDim<$i, $e, $f> +)*
        {
        }
    };
    ($re:literal [$($e:ident),*] $rf:literal [$($f:ident),*]) => {
        impl<$($e,)* $($f,)*> ParamShape<($($e,)*), ($($f,)*)> for Check
        where
            Check: ParamRank<$re, $rf, (($($e,)*), ($($f,)*))>,
        {
        }
    };
}

param_shape!([]);
param_shape!(0 [] 1 [F0]);
param_shape!(0 [] 2 [F0, F1]);
param_shape!(0 [] 3 [F0, F1, F2]);
param_shape!(0 [] 4 [F0, F1, F2, F3]);
param_shape!(0 [] 5 [F0, F1, F2, F3, F4]);
param_shape!(0 [] 6 [F0, F1, F2, F3, F4, F5]);
param_shape!(1 [E0] 0 []);
param_shape!([E0 F0 0]);
param_shape!(1 [E0] 2 [F0, F1]);
param_shape!(1 [E0] 3 [F0, F1, F2]);
param_shape!(1 [E0] 4 [F0, F1, F2, F3]);
param_shape!(1 [E0] 5 [F0, F1, F2, F3, F4]);
param_shape!(1 [E0] 6 [F0, F1, F2, F3, F4, F5]);
param_shape!(2 [E0, E1] 0 []);
param_shape!(2 [E0, E1] 1 [F0]);
param_shape!([E0 F0 0, E1 F1 1]);
param_shape!(2 [E0, E1] 3 [F0, F1, F2]);
param_shape!(2 [E0, E1] 4 [F0, F1, F2, F3]);
param_shape!(2 [E0, E1] 5 [F0, F1, F2, F3, F4]);
param_shape!(2 [E0, E1] 6 [F0, F1, F2, F3, F4, F5]);
param_shape!(3 [E0, E1, E2] 0 []);
param_shape!(3 [E0, E1, E2] 1 [F0]);
param_shape!(3 [E0, E1, E2] 2 [F0, F1]);
param_shape!([E0 F0 0, E1 F1 1, E2 F2 2]);
param_shape!(3 [E0, E1, E2] 4 [F0, F1, F2, F3]);
param_shape!(3 [E0, E1, E2] 5 [F0, F1, F2, F3, F4]);
param_shape!(3 [E0, E1, E2] 6 [F0, F1, F2, F3, F4, F5]);
param_shape!(4 [E0, E1, E2, E3] 0 []);
param_shape!(4 [E0, E1, E2, E3] 1 [F0]);
param_shape!(4 [E0, E1, E2, E3] 2 [F0, F1]);
param_shape!(4 [E0, E1, E2, E3] 3 [F0, F1, F2]);
param_shape!([E0 F0 0, E1 F1 1, E2 F2 2, E3 F3 3]);
param_shape!(4 [E0, E1, E2, E3] 5 [F0, F1, F2, F3, F4]);
param_shape!(4 [E0, E1, E2, E3] 6 [F0, F1, F2, F3, F4, F5]);
param_shape!(5 [E0, E1, E2, E3, E4] 0 []);
param_shape!(5 [E0, E1, E2, E3, E4] 1 [F0]);
param_shape!(5 [E0, E1, E2, E3, E4] 2 [F0, F1]);
param_shape!(5 [E0, E1, E2, E3, E4] 3 [F0, F1, F2]);
param_shape!(5 [E0, E1, E2, E3, E4] 4 [F0, F1, F2, F3]);
param_shape!([E0 F0 0, E1 F1 1, E2 F2 2, E3 F3 3, E4 F4 4]);
param_shape!(5 [E0, E1, E2, E3, E4] 6 [F0, F1, F2, F3, F4, F5]);
param_shape!(6 [E0, E1, E2, E3, E4, E5] 0 []);
param_shape!(6 [E0, E1, E2, E3, E4, E5] 1 [F0]);
param_shape!(6 [E0, E1, E2, E3, E4, E5] 2 [F0, F1]);
param_shape!(6 [E0, E1, E2, E3, E4, E5] 3 [F0, F1, F2]);
param_shape!(6 [E0, E1, E2, E3, E4, E5] 4 [F0, F1, F2, F3]);
param_shape!(6 [E0, E1, E2, E3, E4, E5] 5 [F0, F1, F2, F3, F4]);
param_shape!([E0 F0 0, E1 F1 1, E2 F2 2, E3 F3 3, E4 F4 4, E5 F5 5]);
