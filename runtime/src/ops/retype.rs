//! What a dtype-generic function from `tensor_fn!` runs on: the macro
//! writes one body per dtype its bound admits (each with its own fused
//! kernels), and the function takes the body of its `T`, seeing its
//! tensors under their concrete dtype.

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::Shape;
use crate::tensor::Tensor;
use std::any::Any;

fn mismatch<T: DType, U: DType>() -> Error {
    Error::DType {
        op: "tensor_fn".into(),
        expected: format!("{}", U::KIND),
        found: format!(
            "{} (a generic function took the body of another dtype)",
            T::KIND
        ),
    }
}

/// `t` seen as a tensor of `U`, which must be its own dtype `T`.
///
/// ```
/// use tensorfn_runtime::{Tensor, Cpu, shape, __private::retype_ref};
/// let x = Tensor::<Cpu, f32, shape![2]>::ones().unwrap();
/// let y: &Tensor<Cpu, f32, shape![2]> = retype_ref(&x).unwrap();
/// assert_eq!(y.to_vec().unwrap(), vec![1.0, 1.0]);
/// assert!(retype_ref::<_, _, f64, _>(&x).is_err());
/// ```
pub fn retype_ref<D: Device, T: DType, U: DType, S: Shape>(
    t: &Tensor<D, T, S>,
) -> Result<&Tensor<D, U, S>> {
    (t as &dyn Any)
        .downcast_ref::<Tensor<D, U, S>>()
        .ok_or_else(mismatch::<T, U>)
}

/// `t` as a tensor of `U`, which must be its own dtype `T`.
///
/// ```
/// use tensorfn_runtime::{Tensor, Cpu, shape, __private::retype};
/// let x = Tensor::<Cpu, f32, shape![2]>::ones().unwrap();
/// let y: Tensor<Cpu, f32, shape![2]> = retype(x.clone()).unwrap();
/// assert_eq!(y.to_vec().unwrap(), vec![1.0, 1.0]);
/// assert!(retype::<_, _, f64, _>(x).is_err());
/// ```
pub fn retype<D: Device, T: DType, U: DType, S: Shape>(
    t: Tensor<D, T, S>,
) -> Result<Tensor<D, U, S>> {
    let mut slot = Some(t);
    (&mut slot as &mut dyn Any)
        .downcast_mut::<Option<Tensor<D, U, S>>>()
        .and_then(Option::take)
        .ok_or_else(mismatch::<T, U>)
}

/// The error of a generic function called with a dtype none of its bodies
/// is for (unreachable with the sealed dtypes; an `Err`, never a panic).
///
/// ```
/// let e = tensorfn_runtime::__private::no_body::<f32>("mlp");
/// assert!(e.to_string().contains("mlp"));
/// ```
pub fn no_body<T: DType>(name: &str) -> Error {
    Error::DType {
        op: name.into(),
        expected: "a dtype of the function's bound".into(),
        found: format!("{}", T::KIND),
    }
}

/// A parameter struct seen under the dtype of the body a generic
/// function runs (`&LayerNorm<D, T>` as `&LayerNorm<D, f32>` where `T` is
/// `f32`), to pass it on to another function; `B` must be `A` itself.
///
/// ```
/// use tensorfn_runtime::__private::retype_struct;
/// struct Lin<T> { w: Vec<T> }
/// let p = Lin::<f32> { w: vec![1.0, 1.0] };
/// let same: &Lin<f32> = retype_struct(&p).unwrap();
/// assert_eq!(same.w, vec![1.0, 1.0]);
/// assert!(retype_struct::<_, Lin<f64>>(&p).is_err());
/// ```
pub fn retype_struct<A: Any, B: Any>(a: &A) -> Result<&B> {
    (a as &dyn Any)
        .downcast_ref::<B>()
        .ok_or_else(|| Error::DType {
            op: "tensor_fn".into(),
            expected: std::any::type_name::<B>().into(),
            found: format!(
                "{} (a generic function took the body of another dtype)",
                std::any::type_name::<A>()
            ),
        })
}
