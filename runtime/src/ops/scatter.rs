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
use crate::tensor::{checked_numel, Tensor};
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
        Self::index_add_onto::<DIM, _, _, _>(Base::Copy(self), index, source, alpha)
    }

    /// `Tensor::zeros_dims(dims)?.index_add::<DIM>(index, source, alpha)`,
    /// without writing or reading the zeros first: the output is written
    /// once (on the GPU, 16-bit values accumulate in a zero-filled f32
    /// buffer rounded into it). `tensor_fn!` writes the gradients of
    /// `embedding` and `index_select`, an `index_add` into zeros, as this.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let idx = Tensor::<Cpu, i64, shape![3]>::from_vec(vec![2, 0, 2]).unwrap();
    /// let src = Tensor::<Cpu, f32, shape![3, 2]>::from_vec(vec![1., 2., 3., 4., 5., 6.]).unwrap();
    /// let y = Tensor::<Cpu, f32, shape![4, 2]>::index_add_to_zeros::<0>(&[4, 2], &idx, &src, 1.0).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![3., 4., 0., 0., 6., 8., 0., 0.]);
    /// ```
    #[doc(hidden)]
    pub fn index_add_to_zeros<const DIM: usize>(
        dims: &[usize],
        index: &Tensor<D, impl IndexDType, impl Shape>,
        source: &Tensor<D, T, impl Shape>,
        alpha: f64,
    ) -> Result<Self>
    where
        S: RemoveDim<DIM>,
    {
        S::check(dims)?;
        Self::index_add_onto::<DIM, _, _, _>(Base::Zeros(dims), index, source, alpha)
    }

    fn index_add_onto<const DIM: usize, I: IndexDType, SI: Shape, SS: Shape>(
        base: Base<'_, D, T, S>,
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
            ("self", base.dims()),
            DIM,
            ("index", index.dims()),
            ("source", source.dims()),
        )?;
        let dims = source.dims().to_vec();
        let mut si = vec![0; dims.len()];
        si[DIM] = index.layout.strides()[0];
        let li = Layout::new(dims.clone(), si, index.layout.offset());
        Self::scatter_into(
            base,
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
        Self::scatter_add_onto::<DIM, _, _, _>(Base::Copy(self), index, src)
    }

    /// `Tensor::zeros_dims(dims)?.scatter_add::<DIM>(index, src)`, without
    /// writing or reading the zeros first (as
    /// [`index_add_to_zeros`](Self::index_add_to_zeros)): `tensor_fn!`
    /// writes the gradient of `gather` as this.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let idx = Tensor::<Cpu, i64, shape![2, 1]>::from_vec(vec![1, 1]).unwrap();
    /// let src = Tensor::<Cpu, f32, shape![2, 1]>::from_vec(vec![1., 2.]).unwrap();
    /// let y = Tensor::<Cpu, f32, shape![2, 3]>::scatter_add_to_zeros::<1>(&[2, 3], &idx, &src).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![0., 1., 0., 0., 2., 0.]);
    /// ```
    #[doc(hidden)]
    pub fn scatter_add_to_zeros<const DIM: usize>(
        dims: &[usize],
        index: &Tensor<D, impl IndexDType, impl Shape>,
        src: &Tensor<D, T, impl Shape>,
    ) -> Result<Self>
    where
        S: RemoveDim<DIM>,
    {
        S::check(dims)?;
        Self::scatter_add_onto::<DIM, _, _, _>(Base::Zeros(dims), index, src)
    }

    fn scatter_add_onto<const DIM: usize, I: IndexDType, SI: Shape, SS: Shape>(
        base: Base<'_, D, T, S>,
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
            ("self", base.dims()),
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
        Self::scatter_into(
            base,
            op,
            DIM,
            &dims,
            (src, ls),
            (index, index.layout.clone()),
            1.0,
        )
    }

    /// `base` (a copy of a tensor, or zeros), then `alpha * src` (`ls`
    /// over `dims`) added along `dim` at the indices `li` (over `dims`)
    /// reads.
    fn scatter_into<I: IndexDType>(
        base: Base<'_, D, T, S>,
        op: &str,
        dim: usize,
        dims: &[usize],
        (src, ls): (&Tensor<D, T, impl Shape>, Layout),
        (index, li): (&Tensor<D, I, impl Shape>, Layout),
        alpha: f64,
    ) -> Result<Self> {
        let xd = base.dims().to_vec();
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
            let (mut out, fresh) = match base {
                Base::Copy(x) => (be.contiguous(be.buf(&x.storage), &x.layout)?, false),
                Base::Zeros(_) => (be.alloc(checked_numel(op, &xd)?)?, true),
            };
            match be.scatter_add(
                &mut out,
                &lo,
                sel,
                (be.buf(&src.storage), &ls),
                (be.buf(&index.storage), &li),
                alpha,
                fresh,
            )? {
                Ok(()) => be.wrap(out),
                Err(k) => return Err(bad(k)),
            }
        });
        output(storage, &xd)
    }
}

/// What a scatter-add adds onto: a copy of a tensor (`index_add`,
/// `scatter_add`) or zeros of some dims, which are never materialised
/// before the scatter (`index_add_to_zeros`, `scatter_add_to_zeros`).
enum Base<'a, D: Device, T: FloatDType, S: Shape> {
    Copy(&'a Tensor<D, T, S>),
    Zeros(&'a [usize]),
}

impl<D: Device, T: FloatDType, S: Shape> Base<'_, D, T, S> {
    fn dims(&self) -> &[usize] {
        match self {
            Base::Copy(x) => x.dims(),
            Base::Zeros(dims) => dims,
        }
    }
}

/// Checks shared by the CPU and GPU tests of the scatters into zeros.
#[cfg(test)]
pub(crate) mod checks {
    use crate::device::Device;
    use crate::dtype::FloatDType;
    use crate::random::SplitMix64;
    use crate::shape::Dyn;
    use crate::tensor::Tensor;

    type M = (Dyn, Dyn);

    /// `index_add_to_zeros` (rows of a `[rows, cols]` table, as an
    /// embedding's gradient) and `scatter_add_to_zeros` (along dim 1)
    /// against f64 sums, with repeated and untouched rows, a NaN and an
    /// infinity in the values, no index at all, and an index out of range.
    /// A buffer of NaN freed just before lets the device reuse it, so a
    /// zero read from an unwritten output would show.
    pub(crate) fn scatters_into_zeros_match_f64<D: Device, T: FloatDType>(
        rng: &mut SplitMix64,
        tol: f64,
    ) {
        let (rows, cols) = (37, 5);
        for n in [0usize, 1, 50, 300] {
            let ids: Vec<i64> = (0..n)
                .map(|_| (rng.uniform() * (rows - 4) as f64) as i64)
                .collect();
            let mut src: Vec<T> = (0..n * cols)
                .map(|_| T::from_f64(rng.uniform() * 2.0 - 1.0))
                .collect();
            if n >= 50 {
                src[7] = T::from_f64(f64::NAN);
                src[12] = T::from_f64(f64::INFINITY);
            }
            let alpha = -0.5;
            let mut want = vec![0f64; rows * cols];
            for (i, &r) in ids.iter().enumerate() {
                for c in 0..cols {
                    want[r as usize * cols + c] += alpha * src[i * cols + c].to_f64();
                }
            }
            drop(Tensor::<D, T, M>::full_dims(T::from_f64(f64::NAN), &[rows, cols]).unwrap());
            let it = Tensor::<D, i64, (Dyn,)>::from_vec_dims(ids.clone(), &[n]).unwrap();
            let st = Tensor::<D, T, M>::from_vec_dims(src.clone(), &[n, cols]).unwrap();
            let got = Tensor::<D, T, M>::index_add_to_zeros::<0>(&[rows, cols], &it, &st, alpha)
                .unwrap()
                .to_vec()
                .unwrap();
            let zeros = Tensor::<D, T, M>::zeros_dims(&[rows, cols]).unwrap();
            let old = zeros
                .index_add::<0>(&it, &st, alpha)
                .unwrap()
                .to_vec()
                .unwrap();
            for (p, (g, w)) in got.iter().zip(&want).enumerate() {
                let (g, w) = (g.to_f64(), *w);
                let close =
                    (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol * (1.0 + w.abs());
                assert!(
                    close,
                    "{:?} n {n}: element {p} is {g}, f64 gives {w}",
                    T::KIND
                );
                // Rows no id names are +0, as a copy of zeros gives.
                if !ids.contains(&((p / cols) as i64)) {
                    assert_eq!(
                        (g.to_bits(), old[p].to_f64().to_bits()),
                        (0, 0),
                        "row {}",
                        p / cols
                    );
                }
            }
            // Along dim 1: each row's values go to the columns `index` names.
            let k = 3;
            let idx: Vec<i64> = (0..rows * k)
                .map(|_| (rng.uniform() * cols as f64) as i64)
                .collect();
            let vals: Vec<T> = (0..rows * k)
                .map(|_| T::from_f64(rng.uniform() * 4.0 - 2.0))
                .collect();
            let mut want = vec![0f64; rows * cols];
            for r in 0..rows {
                for j in 0..k {
                    want[r * cols + idx[r * k + j] as usize] += vals[r * k + j].to_f64();
                }
            }
            let it = Tensor::<D, i64, M>::from_vec_dims(idx, &[rows, k]).unwrap();
            let vt = Tensor::<D, T, M>::from_vec_dims(vals, &[rows, k]).unwrap();
            let got = Tensor::<D, T, M>::scatter_add_to_zeros::<1>(&[rows, cols], &it, &vt)
                .unwrap()
                .to_vec()
                .unwrap();
            for (p, (g, w)) in got.iter().zip(&want).enumerate() {
                let g = g.to_f64();
                assert!(
                    (g - w).abs() <= tol * (1.0 + w.abs()),
                    "{:?} scatter: element {p} is {g}, f64 gives {w}",
                    T::KIND
                );
            }
        }
        // An index out of range is an `Err`, and so are dims the shape or
        // the values do not fit.
        let it = Tensor::<D, i64, (Dyn,)>::from_vec_dims(vec![0, rows as i64], &[2]).unwrap();
        let st = Tensor::<D, T, M>::zeros_dims(&[2, cols]).unwrap();
        assert!(Tensor::<D, T, M>::index_add_to_zeros::<0>(&[rows, cols], &it, &st, 1.0).is_err());
        assert!(
            Tensor::<D, T, M>::index_add_to_zeros::<0>(&[rows, cols + 1], &it, &st, 1.0).is_err()
        );
        assert!(Tensor::<D, T, M>::index_add_to_zeros::<0>(&[rows], &it, &st, 1.0).is_err());
    }
}

#[cfg(test)]
mod tests {
    use super::checks::scatters_into_zeros_match_f64;
    use crate::device::Cpu;
    use crate::random::SplitMix64;
    use half::{bf16, f16};

    #[test]
    fn scatters_into_zeros_match_f64_on_the_cpu() {
        let mut rng = SplitMix64::new(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(3),
        );
        scatters_into_zeros_match_f64::<Cpu, f64>(&mut rng, 1e-12);
        scatters_into_zeros_match_f64::<Cpu, f32>(&mut rng, 1e-5);
        scatters_into_zeros_match_f64::<Cpu, f16>(&mut rng, 2e-3);
        scatters_into_zeros_match_f64::<Cpu, bf16>(&mut rng, 1.6e-2);
    }
}
