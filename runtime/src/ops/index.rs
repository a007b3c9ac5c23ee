//! Selecting along one dim: `index` (run-time position), `at` (constant
//! position, checked when building), `narrow` (a range). All are views.

use super::check_result;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::{Dim, Shape};
use crate::tensor::Tensor;
use tensorfn_core::rules;

/// A shape with a dim `DIM`, and the shape left when it is removed
/// (indexing, reductions).
///
/// ```
/// use tensorfn_runtime::shape::type_name;
/// use tensorfn_runtime::{Const, Dyn, RemoveDim};
/// fn removed<S: RemoveDim<1>>() -> String { type_name::<S::Output>() }
/// assert_eq!(removed::<(Const<2>, Dyn, Const<4>)>(), "shape![2, 4]");
/// ```
///
/// A dim past the rank does not compile:
///
/// ```compile_fail,E0277
/// use tensorfn_runtime::{Tensor, Cpu, shape};
/// let x = Tensor::<Cpu, f32, shape![2, 3]>::zeros().unwrap();
/// let _ = x.index::<2>(0);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no dim {DIM}",
    label = "dim {DIM} is out of range for this tensor",
    note = "dims count from 0: a tensor of rank N has dims 0..N"
)]
pub trait RemoveDim<const DIM: usize>: Shape {
    /// The shape without dim `DIM`.
    type Output: Shape;
}

macro_rules! remove_dim {
    ($all:tt; $($dim:literal => ($($keep:ident),*)),*) => {
        $(remove_dim!(@one $all $dim ($($keep),*));)*
    };
    (@one ($($all:ident),*) $dim:literal ($($keep:ident),*)) => {
        impl<$($all: Dim),*> RemoveDim<$dim> for ($($all,)*) {
            type Output = ($($keep,)*);
        }
    };
}
remove_dim!((A); 0 => ());
remove_dim!((A, B); 0 => (B), 1 => (A));
remove_dim!((A, B, C); 0 => (B, C), 1 => (A, C), 2 => (A, B));
remove_dim!((A, B, C, E); 0 => (B, C, E), 1 => (A, C, E), 2 => (A, B, E), 3 => (A, B, C));
remove_dim!((A, B, C, E, F);
    0 => (B, C, E, F), 1 => (A, C, E, F), 2 => (A, B, E, F), 3 => (A, B, C, F), 4 => (A, B, C, E));
remove_dim!((A, B, C, E, F, G);
    0 => (B, C, E, F, G), 1 => (A, C, E, F, G), 2 => (A, B, E, F, G),
    3 => (A, B, C, F, G), 4 => (A, B, C, E, G), 5 => (A, B, C, E, F));

const fn index_in_range(size: Option<usize>, index: usize) -> bool {
    match size {
        Some(n) => index < n,
        None => true,
    }
}

fn index_error(e: rules::RuleError) -> Error {
    Error::Index(e.message)
}

impl<D: Device, T: DType, S: Shape> Tensor<D, T, S> {
    /// Position `i` of dim `DIM`, removing the dim (a view): `x[i]` for
    /// `DIM = 0`. An index past the end is an `Err`, never a read out of
    /// bounds.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, i32, shape![2, 3]>::arange(0, 1).unwrap();
    /// assert_eq!(x.index::<0>(1).unwrap().to_vec().unwrap(), vec![3, 4, 5]);
    /// assert_eq!(x.index::<1>(2).unwrap().to_vec().unwrap(), vec![2, 5]);
    /// assert!(x.index::<0>(2).is_err());
    /// ```
    pub fn index<const DIM: usize>(&self, i: usize) -> Result<Tensor<D, T, S::Output>>
    where
        S: RemoveDim<DIM>,
    {
        rules::index("index", ("self", self.dims()), DIM, i).map_err(index_error)?;
        Ok(Tensor::from_parts(
            self.storage.clone(),
            self.layout.select(DIM, i),
        ))
    }

    /// Constant position `I` of dim `DIM`: like [`index`](Self::index),
    /// but an `I` past a `Const` dim fails to build.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, i32, shape![2, 3]>::arange(0, 1).unwrap();
    /// assert_eq!(x.at::<1, 0>().unwrap().to_vec().unwrap(), vec![0, 3]);
    /// ```
    pub fn at<const DIM: usize, const I: usize>(&self) -> Result<Tensor<D, T, S::Output>>
    where
        S: RemoveDim<DIM>,
    {
        const {
            assert!(
                index_in_range(S::DIMS[DIM], I),
                "constant index past the end of a static dim"
            )
        };
        self.index::<DIM>(I)
    }

    /// Positions `start..start + len` of dim `DIM` (a view); the result
    /// type `SO` is checked at run time.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, i32, shape![2, 4]>::arange(0, 1).unwrap();
    /// let y = x.narrow::<1, shape![2, 2]>(1, 2).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![1, 2, 5, 6]);
    /// assert!(x.narrow::<1, shape![2, 2]>(3, 2).is_err());
    /// ```
    pub fn narrow<const DIM: usize, SO: Shape>(
        &self,
        start: usize,
        len: usize,
    ) -> Result<Tensor<D, T, SO>>
    where
        S: RemoveDim<DIM>,
    {
        let end = start.checked_add(len).ok_or_else(|| {
            Error::Index(format!(
                "narrow of dim {DIM}: start {start} + length {len} overflows"
            ))
        })?;
        let dims =
            rules::slice("narrow", ("self", self.dims()), DIM, start, end).map_err(index_error)?;
        check_result::<SO>("narrow", &dims)?;
        Ok(Tensor::from_parts(
            self.storage.clone(),
            self.layout.slice(DIM, start, end),
        ))
    }
}
