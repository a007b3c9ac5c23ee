//! Conversions between tensors and host containers: `Vec<T>`, slices and
//! [`ndarray`] arrays.
//!
//! The dtype never changes on the way: an `Array2<f64>` becomes a
//! `Tensor<_, f64, _>` and comes back as an `Array2<f64>`. Changing it is a
//! separate, visible step (`.cast::<f32>()`), so data cannot drift from f64
//! to f32 (or back) by accident.
//!
//! | from | to | how |
//! | --- | --- | --- |
//! | `ndarray` array or view, any layout | `Tensor<Cpu, T, S>` | `Tensor::try_from(a)` (dims checked against `S`) |
//! | `ndarray` array or view | `Tensor<D, T, S>` on any device | [`Tensor::from_ndarray`] |
//! | `Tensor<Cpu, T, S>` | `Array<T, _>` of the same rank | `Array::from(t)` |
//! | contiguous `&Tensor<Cpu, T, S>` | `ArrayView<T, _>`, no copy | `ArrayView::try_from(&t)` |
//! | `Tensor<D, T, S>` on any device | `Array<T, _>` | [`Tensor::to_ndarray`] |
//! | `Vec<T>`, `&[T]` | `Tensor<Cpu, T, S>` | `Tensor::try_from(v)` (one `_` dim is inferred) |
//! | `Tensor<Cpu, T, S>` | `Vec<T>` | `Vec::from(t)` (row-major) |
//!
//! ```
//! use ndarray::{array, Array2};
//! use tensorfn_runtime::{Tensor, Cpu, shape};
//!
//! let a = array![[1.0f64, 2.0, 3.0], [4.0, 5.0, 6.0]];
//! let t = Tensor::<Cpu, f64, shape![2, 3]>::try_from(a.view()).unwrap();
//! let back: Array2<f64> = t.into();
//! assert_eq!(back, a);
//! ```

use crate::cpu::copy::gather;
use crate::device::{Cpu, Device};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::ops::dispatch::dispatch;
use crate::shape::{type_name, Dim, Shape};
use crate::storage::Storage;
use crate::tensor::Tensor;
use ndarray::{Array, ArrayBase, ArrayView, Data, Dimension, Ix0, Ix1, Ix2, Ix3, Ix4, Ix5, Ix6};
use std::borrow::Cow;
use std::sync::Arc;

/// The `ndarray` dimension type of the same rank as a shape type:
/// `shape![_, 3]` pairs with `Ix2`, `shape![]` with `Ix0`. Every shape type
/// implements it; it lets conversions to `ndarray` return arrays whose rank
/// is known at compile time (`Array2<f32>` rather than `ArrayD<f32>`).
///
/// ```
/// use tensorfn_runtime::{shape, NdShape};
/// let _: <shape![_, 3] as NdShape>::NdDim = ndarray::Ix2(0, 0);
/// ```
pub trait NdShape: Shape {
    /// `Ix0` .. `Ix6`, by rank.
    type NdDim: Dimension;
}

macro_rules! nd_shape {
    ($ix:ty; $($d:ident),*) => {
        impl<$($d: Dim),*> NdShape for ($($d,)*) {
            type NdDim = $ix;
        }
    };
}
nd_shape!(Ix0;);
nd_shape!(Ix1; A);
nd_shape!(Ix2; A, B);
nd_shape!(Ix3; A, B, C);
nd_shape!(Ix4; A, B, C, D);
nd_shape!(Ix5; A, B, C, D, E);
nd_shape!(Ix6; A, B, C, D, E, F);

/// Checks host dims against `S`, naming the operation, the shape type, the
/// dims found and the first dim that differs.
pub(crate) fn check_host_dims<S: Shape>(op: &str, dims: &[usize]) -> Result<()> {
    if S::check(dims).is_ok() {
        return Ok(());
    }
    let expected = format!("dims {} (rank {})", type_name::<S>(), S::RANK);
    let found = if dims.len() != S::RANK {
        format!("{dims:?} (rank {})", dims.len())
    } else {
        let (i, (want, got)) = S::DIMS[..S::RANK]
            .iter()
            .zip(dims)
            .enumerate()
            .find(|(_, (want, got))| want.is_some_and(|w| w != **got))
            .map(|(i, (w, g))| (i, (w.unwrap_or(*g), *g)))
            .expect("S::check failed, so a Const dim differs");
        format!("{dims:?}: dim {i} is {got}, not {want}")
    };
    Err(Error::shape(op, expected, found))
}

/// The dims of `S` for `len` row-major elements: every `Const` dim as
/// written, and at most one `Dyn` dim inferred from `len` (like `-1` in
/// PyTorch's `view`).
fn dims_for_len<S: Shape>(op: &str, len: usize) -> Result<Vec<usize>> {
    let spec = &S::DIMS[..S::RANK];
    let known: usize = spec.iter().flatten().product();
    let free: Vec<usize> = (0..S::RANK).filter(|&i| spec[i].is_none()).collect();
    let fail = |what: String| Err(Error::shape(op, what, format!("{len} elements")));
    let inferred = match free.as_slice() {
        [] if known == len => None,
        [] => return fail(format!("{known} elements for {}", type_name::<S>())),
        [i] if known != 0 && len % known == 0 => Some((*i, len / known)),
        [_] => {
            return fail(format!(
                "a multiple of {known} elements to infer the `_` dim of {}",
                type_name::<S>()
            ))
        }
        _ => {
            return fail(format!(
                "at most one `_` dim in {}; build it with `from_vec_dims(data, &dims)`",
                type_name::<S>()
            ))
        }
    };
    Ok((0..S::RANK)
        .map(|i| match inferred {
            Some((at, n)) if at == i => n,
            _ => spec[i].unwrap_or(0),
        })
        .collect())
}

/// An `ndarray` dimension value from run-time dims of the same rank.
fn nd_dim<Dm: Dimension>(dims: &[usize]) -> Dm {
    let mut d = Dm::zeros(dims.len());
    d.slice_mut().copy_from_slice(dims);
    d
}

/// The elements of an array in row-major order, borrowed when the array is
/// already laid out that way.
fn row_major<'a, T: DType, A: Data<Elem = T>, Dm: Dimension>(
    a: &'a ArrayBase<A, Dm>,
) -> Cow<'a, [T]> {
    match a.as_slice() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(a.iter().copied().collect()),
    }
}

impl<D: Device, T: DType, S: Shape> Tensor<D, T, S> {
    /// Copies an `ndarray` array or view (any strides: transposed, sliced,
    /// broadcast) to device `D`. `Err` when its dims do not fit `S`, naming
    /// the dim that differs, or when the device is unavailable.
    ///
    /// A row-major array goes to the device straight from its own buffer;
    /// other layouts are gathered into row-major order first.
    ///
    /// ```
    /// use ndarray::{s, Array2};
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    ///
    /// let a = Array2::from_shape_fn((4, 3), |(i, j)| (10 * i + j) as f32);
    /// // A transposed, sliced view: [[0, 10], [1, 11], [2, 12]].
    /// let v = a.slice(s![..2, ..]).reversed_axes();
    /// let t = Tensor::<Cpu, f32, shape![3, 2]>::from_ndarray(&v).unwrap();
    /// assert_eq!(t.to_vec().unwrap(), vec![0., 10., 1., 11., 2., 12.]);
    ///
    /// let e = Tensor::<Cpu, f32, shape![3, 3]>::from_ndarray(&v).unwrap_err();
    /// assert!(e.to_string().contains("dim 1 is 2, not 3"));
    /// ```
    pub fn from_ndarray<A: Data<Elem = T>, Dm: Dimension>(a: &ArrayBase<A, Dm>) -> Result<Self> {
        check_host_dims::<S>("Tensor::from_ndarray", a.shape())?;
        let data = row_major(a);
        let storage = dispatch!(D, |be| be.wrap(be.upload(data)?));
        Ok(Tensor::from_parts(
            Arc::new(storage),
            Layout::contiguous(a.shape()),
        ))
    }

    /// Copies the tensor into an `ndarray` array of the same rank
    /// (`Array2` for a rank-2 shape), row-major; from a GPU this is a
    /// download.
    ///
    /// ```
    /// use ndarray::{array, Array2};
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    ///
    /// let t = Tensor::<Cpu, i32, shape![2, 2]>::from_vec(vec![1, 2, 3, 4]).unwrap();
    /// let a: Array2<i32> = t.to_ndarray().unwrap();
    /// assert_eq!(a, array![[1, 2], [3, 4]]);
    /// ```
    pub fn to_ndarray(&self) -> Result<Array<T, S::NdDim>>
    where
        S: NdShape,
    {
        let data = self.to_vec()?;
        Ok(
            Array::from_shape_vec(nd_dim::<S::NdDim>(self.shape()), data)
                .expect("row-major data has the tensor's element count"),
        )
    }
}

impl<T: DType, S: Shape> Tensor<Cpu, T, S> {
    /// The row-major host buffer, taken over without a copy when this
    /// tensor is its only, contiguous owner.
    fn into_host_vec(self) -> Vec<T> {
        let Tensor {
            storage, layout, ..
        } = self;
        match Arc::try_unwrap(storage) {
            Ok(mut storage)
                if layout.is_contiguous()
                    && layout.offset() == 0
                    && matches!(&storage, Storage::Cpu(d) if d.len() == layout.numel()) =>
            {
                std::mem::take(storage.host_vec_mut())
            }
            Ok(storage) => gather(storage.as_cpu(), &layout),
            Err(shared) => gather(shared.as_cpu(), &layout),
        }
    }

    /// A view of a contiguous CPU tensor as an `ndarray` view, without a
    /// copy; `None` when the tensor is a strided view (call
    /// [`contiguous_ndarray`](Self::contiguous_ndarray) or `to_ndarray`).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let t = Tensor::<Cpu, f32, shape![2, 3]>::arange(0.0, 1.0).unwrap();
    /// let v = t.as_ndarray().unwrap();
    /// assert_eq!(v[[1, 2]], 5.0);
    /// ```
    pub fn as_ndarray(&self) -> Option<ArrayView<'_, T, S::NdDim>>
    where
        S: NdShape,
    {
        if !self.layout.is_contiguous() {
            return None;
        }
        let start = self.layout.offset();
        let data = &self.storage.as_cpu()[start..start + self.numel()];
        ArrayView::from_shape(nd_dim::<S::NdDim>(self.shape()), data).ok()
    }

    /// Like [`as_ndarray`](Self::as_ndarray) but always succeeds, copying
    /// only when the tensor is a strided view.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let t = Tensor::<Cpu, f32, shape![2, 3]>::arange(0.0, 1.0).unwrap();
    /// assert_eq!(t.contiguous_ndarray().sum(), 15.0);
    /// ```
    pub fn contiguous_ndarray(&self) -> ndarray::CowArray<'_, T, S::NdDim>
    where
        S: NdShape,
    {
        match self.as_ndarray() {
            Some(v) => v.into(),
            None => Array::from(self).into(),
        }
    }
}

/// Converts an owned array, taking over its buffer when it is row-major.
///
/// ```
/// use ndarray::Array3;
/// use tensorfn_runtime::{Tensor, Cpu, shape};
/// let a = Array3::<u8>::from_shape_fn((2, 3, 4), |(i, j, k)| (i * 12 + j * 4 + k) as u8);
/// let t = Tensor::<Cpu, u8, shape![2, _, 4]>::try_from(a).unwrap();
/// assert_eq!(t.shape(), &[2, 3, 4]);
/// assert_eq!(t.to_vec().unwrap()[23], 23);
/// ```
impl<T: DType, S: Shape, Dm: Dimension> TryFrom<Array<T, Dm>> for Tensor<Cpu, T, S> {
    type Error = Error;

    fn try_from(a: Array<T, Dm>) -> Result<Self> {
        check_host_dims::<S>("Tensor::try_from(Array)", a.shape())?;
        let dims = a.shape().to_vec();
        let data = if a.is_standard_layout() {
            let numel = a.len();
            match a.into_raw_vec_and_offset() {
                (v, Some(0) | None) if v.len() == numel => v,
                (v, offset) => {
                    let start = offset.unwrap_or(0);
                    v[start..start + numel].to_vec()
                }
            }
        } else {
            a.iter().copied().collect()
        };
        Tensor::from_host(data, &dims)
    }
}

/// Copies a view (any strides) into a CPU tensor.
///
/// ```
/// use ndarray::{s, Array2};
/// use tensorfn_runtime::{Tensor, Cpu, shape};
/// let a = Array2::from_shape_fn((3, 4), |(i, j)| (i * 4 + j) as f64);
/// let col = a.slice(s![.., 1]); // strided: 1, 5, 9
/// let t = Tensor::<Cpu, f64, shape![3]>::try_from(col).unwrap();
/// assert_eq!(t.to_vec().unwrap(), vec![1.0, 5.0, 9.0]);
/// ```
impl<'a, T: DType, S: Shape, Dm: Dimension> TryFrom<ArrayView<'a, T, Dm>> for Tensor<Cpu, T, S> {
    type Error = Error;

    fn try_from(a: ArrayView<'a, T, Dm>) -> Result<Self> {
        Tensor::from_ndarray(&a)
    }
}

/// Copies a borrowed array of any storage (owned, view, shared).
///
/// ```
/// use ndarray::array;
/// use tensorfn_runtime::{Tensor, Cpu, shape};
/// let a = array![[1i64, 2], [3, 4]];
/// let t = Tensor::<Cpu, i64, shape![_, 2]>::try_from(&a).unwrap();
/// assert_eq!(t.to_vec().unwrap(), vec![1, 2, 3, 4]);
/// assert!(Tensor::<Cpu, i64, shape![2, 3]>::try_from(&a).is_err());
/// ```
impl<'a, T: DType, S: Shape, A: Data<Elem = T>, Dm: Dimension> TryFrom<&'a ArrayBase<A, Dm>>
    for Tensor<Cpu, T, S>
{
    type Error = Error;

    fn try_from(a: &'a ArrayBase<A, Dm>) -> Result<Self> {
        Tensor::from_ndarray(a)
    }
}

/// Moves a CPU tensor into an array of the same rank, without a copy when
/// the tensor is contiguous and not shared.
///
/// ```
/// use ndarray::Array2;
/// use tensorfn_runtime::{Tensor, Cpu, shape};
/// let t = Tensor::<Cpu, f32, shape![2, 3]>::arange(0.0, 1.0).unwrap();
/// let a = Array2::from(t);
/// assert_eq!(a[[1, 0]], 3.0);
/// ```
impl<T: DType, S: NdShape> From<Tensor<Cpu, T, S>> for Array<T, S::NdDim> {
    fn from(t: Tensor<Cpu, T, S>) -> Self {
        let dim = nd_dim::<S::NdDim>(t.shape());
        Array::from_shape_vec(dim, t.into_host_vec())
            .expect("row-major data has the tensor's element count")
    }
}

/// Copies a CPU tensor (any view) into an array of the same rank.
///
/// ```
/// use ndarray::{array, Array2};
/// use tensorfn_runtime::{Tensor, Cpu, shape};
/// let t = Tensor::<Cpu, f32, shape![2, 2]>::from_vec(vec![1., 2., 3., 4.]).unwrap();
/// assert_eq!(Array2::from(&t), array![[1., 2.], [3., 4.]]);
/// ```
impl<T: DType, S: NdShape> From<&Tensor<Cpu, T, S>> for Array<T, S::NdDim> {
    fn from(t: &Tensor<Cpu, T, S>) -> Self {
        let dim = nd_dim::<S::NdDim>(t.shape());
        Array::from_shape_vec(dim, gather(t.storage.as_cpu(), t.layout()))
            .expect("row-major data has the tensor's element count")
    }
}

/// Borrows a contiguous CPU tensor as an `ndarray` view, without a copy;
/// `Err` for a strided view (transposed, narrowed, broadcast), which
/// `Array::from(&tensor)` copies instead.
///
/// ```
/// use ndarray::ArrayView2;
/// use tensorfn_runtime::{Tensor, Cpu, shape};
/// let t = Tensor::<Cpu, f32, shape![2, 3]>::arange(0.0, 1.0).unwrap();
/// let v = ArrayView2::try_from(&t).unwrap();
/// assert_eq!(v[[1, 1]], 4.0);
/// let tt = t.t().unwrap();
/// assert!(ArrayView2::try_from(&tt).is_err());
/// ```
impl<'a, T: DType, S: NdShape> TryFrom<&'a Tensor<Cpu, T, S>> for ArrayView<'a, T, S::NdDim> {
    type Error = Error;

    fn try_from(t: &'a Tensor<Cpu, T, S>) -> Result<Self> {
        t.as_ndarray().ok_or_else(|| {
            Error::shape(
                "ArrayView::try_from(&Tensor)",
                "a contiguous tensor",
                format!(
                    "a strided view (dims {:?}, strides {:?}); copy it with `Array::from(&tensor)` or `.contiguous()`",
                    t.shape(),
                    t.layout().strides()
                ),
            )
        })
    }
}

/// A tensor from row-major elements. Every `Const` dim is taken as
/// written; one `_` dim, if any, is inferred from the length.
///
/// ```
/// use tensorfn_runtime::{Tensor, Cpu, shape};
/// let t = Tensor::<Cpu, f32, shape![_, 3]>::try_from(vec![0.5; 12]).unwrap();
/// assert_eq!(t.shape(), &[4, 3]);
/// let e = Tensor::<Cpu, f32, shape![2, 3]>::try_from(vec![0.5; 5]).unwrap_err();
/// assert!(e.to_string().contains("6 elements"));
/// ```
impl<T: DType, S: Shape> TryFrom<Vec<T>> for Tensor<Cpu, T, S> {
    type Error = Error;

    fn try_from(data: Vec<T>) -> Result<Self> {
        let dims = dims_for_len::<S>("Tensor::try_from(Vec)", data.len())?;
        Tensor::from_host(data, &dims)
    }
}

/// A tensor from a copy of row-major elements; dims as for `Vec`.
///
/// ```
/// use tensorfn_runtime::{Tensor, Cpu, shape};
/// let data = [1u8, 2, 3, 4, 5, 6];
/// let t = Tensor::<Cpu, u8, shape![3, _]>::try_from(&data[..]).unwrap();
/// assert_eq!(t.shape(), &[3, 2]);
/// ```
impl<T: DType, S: Shape> TryFrom<&[T]> for Tensor<Cpu, T, S> {
    type Error = Error;

    fn try_from(data: &[T]) -> Result<Self> {
        let dims = dims_for_len::<S>("Tensor::try_from(&[T])", data.len())?;
        Tensor::from_host(data.to_vec(), &dims)
    }
}

/// The elements in row-major order, without a copy when the tensor is
/// contiguous and not shared.
///
/// ```
/// use tensorfn_runtime::{Tensor, Cpu, shape};
/// let t = Tensor::<Cpu, i32, shape![3]>::arange(1, 1).unwrap();
/// assert_eq!(Vec::from(t), vec![1, 2, 3]);
/// ```
impl<T: DType, S: Shape> From<Tensor<Cpu, T, S>> for Vec<T> {
    fn from(t: Tensor<Cpu, T, S>) -> Self {
        t.into_host_vec()
    }
}

/// A row-major copy of the elements.
///
/// ```
/// use tensorfn_runtime::{Tensor, Cpu, shape};
/// let t = Tensor::<Cpu, i32, shape![2]>::arange(4, -1).unwrap();
/// assert_eq!(Vec::from(&t), vec![4, 3]);
/// ```
impl<T: DType, S: Shape> From<&Tensor<Cpu, T, S>> for Vec<T> {
    fn from(t: &Tensor<Cpu, T, S>) -> Self {
        gather(t.storage.as_cpu(), t.layout())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shape;

    #[test]
    fn dims_for_len_infers_one_dyn_dim() {
        assert_eq!(dims_for_len::<shape![_, 3]>("t", 12).unwrap(), vec![4, 3]);
        assert_eq!(dims_for_len::<shape![2, 3]>("t", 6).unwrap(), vec![2, 3]);
        assert_eq!(
            dims_for_len::<shape![]>("t", 1).unwrap(),
            Vec::<usize>::new()
        );
        assert_eq!(dims_for_len::<shape![_]>("t", 0).unwrap(), vec![0]);
        assert!(dims_for_len::<shape![_, 3]>("t", 10).is_err());
        assert!(dims_for_len::<shape![_, 0]>("t", 0).is_err());
        assert!(dims_for_len::<shape![_, _]>("t", 4).is_err());
    }

    #[test]
    fn owned_conversions_move_the_buffer() {
        let a = ndarray::Array2::from_shape_fn((3, 4), |(i, j)| (i * 4 + j) as f32);
        let ptr = a.as_ptr();
        let t = Tensor::<Cpu, f32, shape![3, 4]>::try_from(a).unwrap();
        assert_eq!(t.storage.as_cpu().as_ptr(), ptr);
        let back: ndarray::Array2<f32> = t.into();
        assert_eq!(back.as_ptr(), ptr);
        let t = Tensor::<Cpu, f32, shape![3, 4]>::try_from(back).unwrap();
        let v = Vec::from(t);
        assert_eq!(v.as_ptr(), ptr);
    }

    #[test]
    fn check_host_dims_names_rank_and_dim() {
        let e = check_host_dims::<shape![2, 3]>("op", &[2]).unwrap_err();
        assert!(e.to_string().contains("rank 1"), "{e}");
        let e = check_host_dims::<shape![2, 3]>("op", &[2, 4]).unwrap_err();
        assert!(e.to_string().contains("dim 1 is 4, not 3"), "{e}");
    }
}
