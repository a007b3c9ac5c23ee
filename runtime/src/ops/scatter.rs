//! Adding values at integer indices: `index_add` and `scatter_add`
//! (PyTorch's), out of place and in place (`index_add_`,
//! `scatter_add_`). Both are one backend scatter-add, the inverse of the
//! gather behind `index_select` and `gather` (and their gradients).
//! Repeated indices add up; an index out of range (negative ones
//! included) is an `Err` naming the operand, on every device, and
//! nothing is written through it.

use super::dispatch::dispatch;
use super::gather::{differ, out_of_range, Dims};
use super::index::RemoveDim;
use super::output::output;
use crate::backend::Selected;
use crate::device::Device;
use crate::dtype::{FloatDType, IndexDType};
use crate::error::{Error, Result};
use crate::layout::{contiguous_strides, Layout};
use crate::shape::Shape;
use crate::tensor::Tensor;
use tensorfn_core::rules;

/// What the types decide about `index_add` along `dim` of `x` by a 1-D
/// `index` of `source`: `source` has `x`'s dims but along `dim`, where it
/// has `index`'s length.
const fn index_add_fits(dim: usize, x: Dims, index: Dims, source: Dims) -> bool {
    if index.0 != 1 || source.0 != x.0 || dim >= x.0 {
        return false;
    }
    let mut k = 0;
    while k < x.0 {
        let want = if k == dim { index.1[0] } else { x.1[k] };
        if differ(want, source.1[k]) {
            return false;
        }
        k += 1;
    }
    true
}

/// What the types decide about `scatter_add` along `dim` of `x` by
/// `index` of `src`: one rank, `index`'s dims at most `src`'s, and off
/// `dim` at most `x`'s.
const fn scatter_add_fits(dim: usize, x: Dims, index: Dims, src: Dims) -> bool {
    if x.0 != index.0 || x.0 != src.0 || dim >= x.0 {
        return false;
    }
    let mut k = 0;
    while k < x.0 {
        if let (Some(i), Some(s)) = (index.1[k], src.1[k]) {
            if i > s {
                return false;
            }
        }
        if k != dim {
            if let (Some(i), Some(a)) = (index.1[k], x.1[k]) {
                if i > a {
                    return false;
                }
            }
        }
        k += 1;
    }
    true
}

impl<D: Device, T: FloatDType, S: Shape> Tensor<D, T, S> {
    /// A copy of `self` with `alpha * source` added along dim `DIM` at the
    /// positions the 1-D `index` (`i64` or `i32`) lists (PyTorch's
    /// `index_add`): for `DIM = 0`, `out[index[j]] += alpha * source[j]`.
    /// `source` has `self`'s dims but along `DIM`, where it has `index`'s
    /// length; repeated indices add up. Static dims that do not fit fail
    /// to build, `Dyn` ones are checked at run time; an index outside
    /// `0..size` (negative included) is an `Err`, on every device.
    ///
    /// f16 and bf16 accumulate in f32 and round once. On the GPU, repeated
    /// indices are summed with atomic adds, in an order that may change
    /// from run to run (as PyTorch's CUDA `index_add`): f32 and f64 sums
    /// may differ in the last bits between runs.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![3, 2]>::ones().unwrap();
    /// let idx = Tensor::<Cpu, i64, shape![3]>::from_vec(vec![2, 0, 2]).unwrap();
    /// let src = Tensor::<Cpu, f32, shape![3, 2]>::from_vec(vec![1., 2., 3., 4., 5., 6.]).unwrap();
    /// let y = x.index_add::<0>(&idx, &src, 1.0).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![4., 5., 1., 1., 7., 9.]);
    /// let bad = Tensor::<Cpu, i32, shape![3]>::from_vec(vec![0, 3, 1]).unwrap();
    /// let e = x.index_add::<0>(&bad, &src, 1.0).unwrap_err();
    /// assert!(e.to_string().contains("index 3 in `index` is out of range"));
    /// ```
    ///
    /// A `source` whose static dims do not fit does not compile:
    ///
    /// ```compile_fail
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![3, 2]>::ones().unwrap();
    /// let idx = Tensor::<Cpu, i64, shape![3]>::zeros().unwrap();
    /// let src = Tensor::<Cpu, f32, shape![2, 2]>::zeros().unwrap();
    /// let _ = x.index_add::<0>(&idx, &src, 1.0); // 3 indices, 2 rows
    /// ```
    pub fn index_add<const DIM: usize>(
        &self,
        index: &Tensor<D, impl IndexDType, impl Shape>,
        source: &Tensor<D, T, impl Shape>,
        alpha: f64,
    ) -> Result<Self>
    where
        S: RemoveDim<DIM>,
    {
        self.index_add_impl::<DIM, _, _, _>(index, source, alpha)
    }

    /// [`index_add`](Self::index_add) in place.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let mut x = Tensor::<Cpu, f64, shape![2, 3]>::zeros().unwrap();
    /// let idx = Tensor::<Cpu, i32, shape![2]>::from_vec(vec![1, 1]).unwrap();
    /// let src = Tensor::<Cpu, f64, shape![2, 2]>::from_vec(vec![1., 2., 3., 4.]).unwrap();
    /// x.index_add_::<1>(&idx, &src, -1.0).unwrap();
    /// assert_eq!(x.to_vec().unwrap(), vec![0., -3., 0., 0., -7., 0.]);
    /// ```
    pub fn index_add_<const DIM: usize>(
        &mut self,
        index: &Tensor<D, impl IndexDType, impl Shape>,
        source: &Tensor<D, T, impl Shape>,
        alpha: f64,
    ) -> Result<()>
    where
        S: RemoveDim<DIM>,
    {
        *self = self.index_add::<DIM>(index, source, alpha)?;
        Ok(())
    }

    fn index_add_impl<const DIM: usize, I: IndexDType, SI: Shape, SS: Shape>(
        &self,
        index: &Tensor<D, I, SI>,
        source: &Tensor<D, T, SS>,
        alpha: f64,
    ) -> Result<Self> {
        const {
            assert!(
                index_add_fits(
                    DIM,
                    (S::RANK, S::DIMS),
                    (SI::RANK, SI::DIMS),
                    (SS::RANK, SS::DIMS)
                ),
                "index_add: the index must be 1-D, and the source must have the input's dims but along DIM, where it has the index's length"
            )
        };
        let op = "index_add";
        rules::index_add(
            op,
            ("self", self.dims()),
            DIM,
            ("index", index.dims()),
            ("source", source.dims()),
        )?;
        let dims = source.dims().to_vec();
        let mut si = vec![0; dims.len()];
        si[DIM] = index.layout.strides()[0];
        let li = Layout::new(dims.clone(), si, index.layout.offset());
        self.scatter_into(
            op,
            DIM,
            &dims,
            (source, source.layout.clone()),
            (index, li),
            alpha,
        )
    }

    /// A copy of `self` with each element of `src` added along dim `DIM`
    /// at the position `index` (`i64` or `i32`, `self`'s rank) names
    /// (PyTorch's `scatter_add`): for `DIM = 0`,
    /// `out[index[i][j]][j] += src[i][j]` for every position of `index`.
    /// `index`'s dims are at most `src`'s, and off `DIM` at most `self`'s;
    /// repeated indices add up. An index outside `0..size` (negative
    /// included) is an `Err`, on every device.
    ///
    /// f16 and bf16 accumulate in f32 and round once. On the GPU, repeated
    /// indices are summed with atomic adds, in an order that may change
    /// from run to run (as PyTorch's CUDA `scatter_add`).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 3]>::zeros().unwrap();
    /// let idx = Tensor::<Cpu, i64, shape![2, 2]>::from_vec(vec![2, 2, 0, 1]).unwrap();
    /// let src = Tensor::<Cpu, f32, shape![2, 2]>::from_vec(vec![1., 2., 3., 4.]).unwrap();
    /// let y = x.scatter_add::<1>(&idx, &src).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![0., 0., 3., 3., 4., 0.]);
    /// let bad = Tensor::<Cpu, i64, shape![1, 1]>::from_vec(vec![-1]).unwrap();
    /// assert!(x.scatter_add::<1>(&bad, &src).is_err());
    /// ```
    pub fn scatter_add<const DIM: usize>(
        &self,
        index: &Tensor<D, impl IndexDType, impl Shape>,
        src: &Tensor<D, T, impl Shape>,
    ) -> Result<Self>
    where
        S: RemoveDim<DIM>,
    {
        self.scatter_add_impl::<DIM, _, _, _>(index, src)
    }

    /// [`scatter_add`](Self::scatter_add) in place.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let mut x = Tensor::<Cpu, f32, shape![3]>::ones().unwrap();
    /// let idx = Tensor::<Cpu, i64, shape![4]>::from_vec(vec![0, 0, 2, 0]).unwrap();
    /// let src = Tensor::<Cpu, f32, shape![4]>::from_vec(vec![1., 2., 3., 4.]).unwrap();
    /// x.scatter_add_::<0>(&idx, &src).unwrap();
    /// assert_eq!(x.to_vec().unwrap(), vec![8., 1., 4.]);
    /// ```
    pub fn scatter_add_<const DIM: usize>(
        &mut self,
        index: &Tensor<D, impl IndexDType, impl Shape>,
        src: &Tensor<D, T, impl Shape>,
    ) -> Result<()>
    where
        S: RemoveDim<DIM>,
    {
        *self = self.scatter_add::<DIM>(index, src)?;
        Ok(())
    }

    fn scatter_add_impl<const DIM: usize, I: IndexDType, SI: Shape, SS: Shape>(
        &self,
        index: &Tensor<D, I, SI>,
        src: &Tensor<D, T, SS>,
    ) -> Result<Self> {
        const {
            assert!(
                scatter_add_fits(
                    DIM,
                    (S::RANK, S::DIMS),
                    (SI::RANK, SI::DIMS),
                    (SS::RANK, SS::DIMS)
                ),
                "scatter_add: the index and src must have the input's rank, the index's dims at most src's, and off DIM at most the input's"
            )
        };
        let op = "scatter_add";
        rules::scatter_add(
            op,
            ("self", self.dims()),
            DIM,
            ("index", index.dims()),
            ("src", src.dims()),
        )?;
        let dims = index.dims().to_vec();
        let ls = Layout::new(
            dims.clone(),
            src.layout.strides().to_vec(),
            src.layout.offset(),
        );
        self.scatter_into(
            op,
            DIM,
            &dims,
            (src, ls),
            (index, index.layout.clone()),
            1.0,
        )
    }

    /// `self` copied, then `alpha * src` (`ls` over `dims`) added along
    /// `dim` at the indices `li` (over `dims`) reads.
    fn scatter_into<I: IndexDType>(
        &self,
        op: &str,
        dim: usize,
        dims: &[usize],
        (src, ls): (&Tensor<D, T, impl Shape>, Layout),
        (index, li): (&Tensor<D, I, impl Shape>, Layout),
        alpha: f64,
    ) -> Result<Self> {
        let xd = self.dims().to_vec();
        let strides = contiguous_strides(&xd);
        let mut so = strides.clone();
        so[dim] = 0;
        let lo = Layout::new(dims.to_vec(), so, 0);
        let size = xd[dim];
        let sel = Selected {
            stride: strides[dim],
            size,
        };
        let bad = |k: i64| -> Error {
            out_of_range(op, "index", k, format!("dim {dim} of `self`"), size)
        };
        let storage = dispatch!(D, |be| {
            let mut out = be.contiguous(be.buf(&self.storage), &self.layout)?;
            match be.scatter_add(
                &mut out,
                &lo,
                sel,
                (be.buf(&src.storage), &ls),
                (be.buf(&index.storage), &li),
                alpha,
            )? {
                Ok(()) => be.wrap(out),
                Err(k) => return Err(bad(k)),
            }
        });
        output(storage, &xd)
    }
}
