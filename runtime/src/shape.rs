//! Shapes as types: tuples of [`Const<N>`] and [`Dyn`] dims.

use crate::error::{Error, Result};
use std::fmt;

/// The largest rank a shape type can have.
///
/// ```
/// use tensorfn_runtime::{shape, Shape, MAX_RANK};
/// assert_eq!(MAX_RANK, 6);
/// assert_eq!(<shape![1, 2, 3, 4, 5, 6]>::RANK, MAX_RANK);
/// ```
pub const MAX_RANK: usize = 6;

mod sealed {
    pub trait Sealed {}
}

/// One dim of a shape type: [`Const<N>`] (known at compile time) or
/// [`Dyn`] (known at run time).
///
/// ```
/// use tensorfn_runtime::{Dim, Const, Dyn};
/// assert_eq!(<Const<784> as Dim>::STATIC, Some(784));
/// assert_eq!(<Dyn as Dim>::STATIC, None);
/// ```
pub trait Dim: sealed::Sealed + Copy + Default + fmt::Debug + Send + Sync + 'static {
    /// The size, when the type fixes it.
    const STATIC: Option<usize>;
}

/// A dim whose size `N` is part of the type.
///
/// ```
/// use tensorfn_runtime::{Tensor, Cpu, Const};
/// let x = Tensor::<Cpu, f32, (Const<2>, Const<3>)>::zeros().unwrap();
/// assert_eq!(x.shape(), &[2, 3]);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Const<const N: usize>;

/// A dim whose size is known only at run time (a batch size read from a
/// file, say); operations check it and return `Err` on a mismatch.
///
/// ```
/// use tensorfn_runtime::{Tensor, Cpu, shape};
/// let x = Tensor::<Cpu, f32, shape![_, 3]>::zeros_dims(&[5, 3]).unwrap();
/// assert_eq!(x.shape(), &[5, 3]);
/// assert!(Tensor::<Cpu, f32, shape![_, 3]>::zeros_dims(&[5, 4]).is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Dyn;

impl<const N: usize> sealed::Sealed for Const<N> {}
impl sealed::Sealed for Dyn {}
impl<const N: usize> Dim for Const<N> {
    const STATIC: Option<usize> = Some(N);
}
impl Dim for Dyn {
    const STATIC: Option<usize> = None;
}

/// A shape type: a tuple of dims, rank 0 to [`MAX_RANK`]. Written with
/// [`shape!`](crate::shape!): `shape![B, 784]` is `(Const<B>, Const<784>)`,
/// `shape![_, 784]` is `(Dyn, Const<784>)`, `shape![]` is a scalar.
///
/// ```
/// use tensorfn_runtime::{Shape, shape};
/// type S = shape![_, 784];
/// assert_eq!(S::RANK, 2);
/// assert!(S::check(&[32, 784]).is_ok());
/// assert!(S::check(&[32, 785]).is_err());
/// assert_eq!(<shape![2, 3]>::STATIC_NUMEL, Some(6));
/// ```
pub trait Shape: sealed::Sealed + Copy + Default + fmt::Debug + Send + Sync + 'static {
    /// Number of dims.
    const RANK: usize;
    /// The static size of each dim (`None` for [`Dyn`] and past `RANK`).
    const DIMS: [Option<usize>; MAX_RANK];
    /// True when every dim is [`Const`].
    const IS_STATIC: bool = all_static(Self::RANK, &Self::DIMS);
    /// The element count, when every dim is [`Const`].
    const STATIC_NUMEL: Option<usize> = static_numel(Self::RANK, &Self::DIMS);

    /// The dims, when every dim is [`Const`].
    fn static_dims() -> Option<Vec<usize>> {
        Self::DIMS[..Self::RANK].iter().copied().collect()
    }

    /// Checks run-time dims against this type: rank and every `Const` dim.
    fn check(dims: &[usize]) -> Result<()> {
        if dims.len() != Self::RANK {
            return Err(Error::shape(
                "shape",
                format!("{} dims ({})", Self::RANK, type_name::<Self>()),
                format!("{} dims {:?}", dims.len(), dims),
            ));
        }
        for (i, (d, s)) in dims.iter().zip(Self::DIMS.iter()).enumerate() {
            if let Some(s) = s {
                if s != d {
                    return Err(Error::shape(
                        "shape",
                        format!("dim {i} = {s} ({})", type_name::<Self>()),
                        format!("dims {:?}", dims),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The shape type written as `shape![..]` would write it.
///
/// ```
/// use tensorfn_runtime::shape::type_name;
/// use tensorfn_runtime::{shape, Const, Dyn};
/// assert_eq!(type_name::<shape![_, 784]>(), "shape![_, 784]");
/// assert_eq!(type_name::<(Const<2>, Dyn, Const<3>)>(), "shape![2, _, 3]");
/// assert_eq!(type_name::<shape![]>(), "shape![]");
/// ```
pub fn type_name<S: Shape>() -> String {
    let dims: Vec<String> = S::DIMS[..S::RANK]
        .iter()
        .map(|d| d.map_or("_".to_string(), |n| n.to_string()))
        .collect();
    format!("shape![{}]", dims.join(", "))
}

const fn all_static(rank: usize, dims: &[Option<usize>; MAX_RANK]) -> bool {
    let mut i = 0;
    while i < rank {
        if dims[i].is_none() {
            return false;
        }
        i += 1;
    }
    true
}

const fn static_numel(rank: usize, dims: &[Option<usize>; MAX_RANK]) -> Option<usize> {
    let mut n = 1usize;
    let mut i = 0;
    while i < rank {
        match dims[i] {
            Some(d) => n = n.saturating_mul(d),
            None => return None,
        }
        i += 1;
    }
    Some(n)
}

macro_rules! tuple_shape {
    ($rank:literal; $($d:ident),*) => {
        impl<$($d: Dim),*> sealed::Sealed for ($($d,)*) {}
        #[allow(unused_comparisons)]
        impl<$($d: Dim),*> Shape for ($($d,)*) {
            const RANK: usize = $rank;
            const DIMS: [Option<usize>; MAX_RANK] = {
                let mut out = [None; MAX_RANK];
                let dims: [Option<usize>; $rank] = [$($d::STATIC),*];
                let mut i = 0;
                while i < $rank {
                    out[i] = dims[i];
                    i += 1;
                }
                out
            };
        }
    };
}
tuple_shape!(0;);
tuple_shape!(1; A);
tuple_shape!(2; A, B);
tuple_shape!(3; A, B, C);
tuple_shape!(4; A, B, C, D);
tuple_shape!(5; A, B, C, D, E);
tuple_shape!(6; A, B, C, D, E, F);

/// Writes a shape type: `shape![B, 784]` is `(Const<B>, Const<784>)`,
/// `_` is a run-time ([`Dyn`]) dim, `shape![]` is a scalar.
///
/// ```
/// use tensorfn_runtime::{shape, Const, Dyn};
/// let _: shape![2, 3] = (Const::<2>, Const::<3>);
/// let _: shape![_, 3] = (Dyn, Const::<3>);
/// let _: shape![] = ();
/// ```
#[macro_export]
macro_rules! shape {
    () => { () };
    ($($d:tt),+ $(,)?) => { ( $( $crate::__shape_dim!($d), )+ ) };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __shape_dim {
    (_) => { $crate::Dyn };
    ($d:tt) => { $crate::Const<$d> };
}
