//! Picking elements by integer indices: `index_select`, `gather` and
//! `embedding`. All three are one backend gather; an index out of range
//! (negative ones included) is an `Err` naming the op, the operand, the
//! index and the valid range, on every device, and is never read through.

use super::check_result;
use super::dispatch::dispatch;
use super::index::RemoveDim;
use super::output::output;
use crate::backend::Selected;
use crate::device::Device;
use crate::dtype::{DType, IndexDType};
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::shape::{Shape, MAX_RANK};
use crate::tensor::Tensor;
use tensorfn_core::rules;

pub(super) type Dims = (usize, [Option<usize>; MAX_RANK]);

/// Two static dims that differ (a `Dyn` one is checked at run time).
pub(super) const fn differ(a: Option<usize>, b: Option<usize>) -> bool {
    matches!((a, b), (Some(a), Some(b)) if a != b)
}

/// What the types decide about `index_select` along `dim` of `x` by a
/// 1-D `index` into `out`.
const fn index_select_fits(dim: usize, x: Dims, index: Dims, out: Dims) -> bool {
    if index.0 != 1 || x.0 != out.0 || dim >= x.0 {
        return false;
    }
    let mut k = 0;
    while k < x.0 {
        let want = if k == dim { index.1[0] } else { x.1[k] };
        if differ(want, out.1[k]) {
            return false;
        }
        k += 1;
    }
    true
}

/// What the types decide about `gather` along `dim` of `x` by `index`
/// into `out`: one rank, `out` is `index`'s shape, and off `dim` the
/// index's dims are at most `x`'s.
const fn gather_fits(dim: usize, x: Dims, index: Dims, out: Dims) -> bool {
    if x.0 != index.0 || x.0 != out.0 || dim >= x.0 {
        return false;
    }
    let mut k = 0;
    while k < x.0 {
        if differ(index.1[k], out.1[k]) {
            return false;
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

/// What the types decide about `embedding` of ids `input` in the table
/// `weight` into `out`: `weight` is `[V, E]` and `out` is `input`'s dims
/// then `E`.
const fn embedding_fits(input: Dims, weight: Dims, out: Dims) -> bool {
    if weight.0 != 2 || out.0 != input.0 + 1 {
        return false;
    }
    let mut k = 0;
    while k < input.0 {
        if differ(input.1[k], out.1[k]) {
            return false;
        }
        k += 1;
    }
    !differ(weight.1[1], out.1[input.0])
}

/// The `Err` of an index `k` out of `0..size`.
pub(super) fn out_of_range(op: &str, operand: &str, k: i64, target: String, size: usize) -> Error {
    let valid = if size == 0 {
        "it is empty, so no index is valid".to_string()
    } else {
        format!("valid indices are 0..={}", size - 1)
    };
    let negative = if k < 0 {
        " (negative indices do not count from the end here, as in PyTorch)"
    } else {
        ""
    };
    Error::Index(format!(
        "{op}: index {k} in `{operand}` is out of range for {target} of size {size}: {valid}{negative}"
    ))
}

/// The gather of `x` (`lx` over the output's dims) by `index` (`li`, the
/// same dims) along the dim `sel` describes; an index out of range is
/// `bad(k)`.
fn gather_into<D: Device, T: DType, I: IndexDType, SO: Shape>(
    x: &Tensor<D, T, impl Shape>,
    lx: Layout,
    sel: Selected,
    index: &Tensor<D, I, impl Shape>,
    li: Layout,
    bad: impl FnOnce(i64) -> Error,
) -> Result<Tensor<D, T, SO>> {
    let dims = lx.dims().to_vec();
    let storage = dispatch!(D, |be| {
        match be.gather(be.buf(&x.storage), &lx, sel, be.buf(&index.storage), &li)? {
            Ok(out) => be.wrap(out),
            Err(k) => return Err(bad(k)),
        }
    });
    output(storage, &dims)
}

/// `strides` with dim `dim` set to 0: the view of a source whose dim
/// `dim` is picked by an index.
fn without(strides: &[usize], dim: usize) -> Vec<usize> {
    let mut s = strides.to_vec();
    s[dim] = 0;
    s
}

impl<D: Device, T: DType, S: Shape> Tensor<D, T, S> {
    /// The positions along dim `DIM` that the 1-D `index` (`i64` or `i32`)
    /// lists, in its order (PyTorch's `index_select`): dim `DIM` of the
    /// result has `index`'s length. The result type `SO` is annotated or
    /// inferred; static dims that do not fit fail to build, `Dyn` ones are
    /// checked at run time. An index outside `0..size` (negative included)
    /// is an `Err`, on every device.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 3]>::from_vec(vec![1., 2., 3., 4., 5., 6.]).unwrap();
    /// let cols = Tensor::<Cpu, i64, shape![4]>::from_vec(vec![2, 0, 2, 1]).unwrap();
    /// let y: Tensor<Cpu, f32, shape![2, 4]> = x.index_select::<1, _>(&cols).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![3., 1., 3., 2., 6., 4., 6., 5.]);
    /// let bad = Tensor::<Cpu, i32, shape![1]>::from_vec(vec![3]).unwrap();
    /// let e = x.index_select::<1, shape![2, 1]>(&bad).unwrap_err();
    /// assert!(e.to_string().contains("index 3 in `index` is out of range"));
    /// ```
    ///
    /// Float indices do not compile, nor does a static index that is not
    /// 1-D or a result type whose static dims do not fit:
    ///
    /// ```compile_fail,E0277
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 3]>::zeros().unwrap();
    /// let i = Tensor::<Cpu, f32, shape![2]>::zeros().unwrap();
    /// let _ = x.index_select::<0, shape![2, 3]>(&i);
    /// ```
    ///
    /// ```compile_fail
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 3]>::zeros().unwrap();
    /// let i = Tensor::<Cpu, i64, shape![4]>::zeros().unwrap();
    /// let _ = x.index_select::<0, shape![2, 3]>(&i); // dim 0 has 4 entries
    /// ```
    pub fn index_select<const DIM: usize, SO: Shape>(
        &self,
        index: &Tensor<D, impl IndexDType, impl Shape>,
    ) -> Result<Tensor<D, T, SO>>
    where
        S: RemoveDim<DIM>,
    {
        self.index_select_impl::<DIM, SO, _, _>(index)
    }

    fn index_select_impl<const DIM: usize, SO: Shape, I: IndexDType, SI: Shape>(
        &self,
        index: &Tensor<D, I, SI>,
    ) -> Result<Tensor<D, T, SO>> {
        const {
            assert!(
                index_select_fits(
                    DIM,
                    (S::RANK, S::DIMS),
                    (SI::RANK, SI::DIMS),
                    (SO::RANK, SO::DIMS)
                ),
                "index_select: the index is not 1-D, or the static shapes do not give the result shape"
            )
        };
        let op = "index_select";
        let dims = rules::index_select(op, ("self", self.dims()), DIM, ("index", index.dims()))?;
        check_result::<SO>(op, &dims)?;
        let lx = Layout::new(
            dims.clone(),
            without(self.layout.strides(), DIM),
            self.layout.offset(),
        );
        let mut si = vec![0; dims.len()];
        si[DIM] = index.layout.strides()[0];
        let li = Layout::new(dims, si, index.layout.offset());
        let size = self.dims()[DIM];
        let sel = Selected {
            stride: self.layout.strides()[DIM],
            size,
        };
        gather_into(self, lx, sel, index, li, |k| {
            out_of_range(op, "index", k, format!("dim {DIM} of `self`"), size)
        })
    }

    /// Along dim `DIM`, the element each entry of `index` (`i64` or `i32`,
    /// of `self`'s rank) names (PyTorch's `gather`): `out[i][j] =
    /// self[index[i][j]][j]` for `DIM = 0`. The result has `index`'s shape
    /// (`SO`, annotated or inferred); off `DIM`, `index`'s dims are at most
    /// `self`'s. An index outside `0..size` (negative included) is an
    /// `Err`, on every device.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 3]>::from_vec(vec![1., 2., 3., 4., 5., 6.]).unwrap();
    /// let picks = Tensor::<Cpu, i64, shape![2, 2]>::from_vec(vec![2, 0, 1, 1]).unwrap();
    /// let y: Tensor<Cpu, f32, shape![2, 2]> = x.gather::<1, _>(&picks).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![3., 1., 5., 5.]);
    /// let bad = Tensor::<Cpu, i64, shape![1, 1]>::from_vec(vec![-1]).unwrap();
    /// assert!(x.gather::<1, shape![1, 1]>(&bad).is_err());
    /// ```
    pub fn gather<const DIM: usize, SO: Shape>(
        &self,
        index: &Tensor<D, impl IndexDType, impl Shape>,
    ) -> Result<Tensor<D, T, SO>>
    where
        S: RemoveDim<DIM>,
    {
        self.gather_impl::<DIM, SO, _, _>(index)
    }

    fn gather_impl<const DIM: usize, SO: Shape, I: IndexDType, SI: Shape>(
        &self,
        index: &Tensor<D, I, SI>,
    ) -> Result<Tensor<D, T, SO>> {
        const {
            assert!(
                gather_fits(
                    DIM,
                    (S::RANK, S::DIMS),
                    (SI::RANK, SI::DIMS),
                    (SO::RANK, SO::DIMS)
                ),
                "gather: the index must have the input's rank, dims no larger off DIM, and the result has the index's shape"
            )
        };
        let op = "gather";
        let dims = rules::gather(op, ("self", self.dims()), DIM, ("index", index.dims()))?;
        check_result::<SO>(op, &dims)?;
        let lx = Layout::new(
            dims.clone(),
            without(self.layout.strides(), DIM),
            self.layout.offset(),
        );
        let li = index.layout.clone();
        let size = self.dims()[DIM];
        let sel = Selected {
            stride: self.layout.strides()[DIM],
            size,
        };
        gather_into(self, lx, sel, index, li, |k| {
            out_of_range(op, "index", k, format!("dim {DIM} of `self`"), size)
        })
    }

    /// Row `id` of the table `weight` (`[V, E]`) for every id of `input`
    /// (`i64` or `i32`, any shape `[..]`), as PyTorch's `F.embedding`: the
    /// result (`Self`, annotated or inferred) is `[.., E]`. An id outside
    /// `0..V` (negative included) is an `Err`, on every device.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let wte = Tensor::<Cpu, f32, shape![3, 2]>::from_vec(vec![0., 1., 10., 11., 20., 21.]).unwrap();
    /// let ids = Tensor::<Cpu, i64, shape![2, 2]>::from_vec(vec![2, 0, 1, 2]).unwrap();
    /// let x: Tensor<Cpu, f32, shape![2, 2, 2]> = Tensor::embedding(&ids, &wte).unwrap();
    /// assert_eq!(x.to_vec().unwrap(), vec![20., 21., 0., 1., 10., 11., 20., 21.]);
    /// let bad = Tensor::<Cpu, i32, shape![1]>::from_vec(vec![3]).unwrap();
    /// let e = Tensor::<Cpu, f32, shape![1, 2]>::embedding(&bad, &wte).unwrap_err();
    /// assert!(e.to_string().contains("valid indices are 0..=2"));
    /// ```
    pub fn embedding<I: IndexDType, SI: Shape, SW: Shape>(
        input: &Tensor<D, I, SI>,
        weight: &Tensor<D, T, SW>,
    ) -> Result<Self> {
        const {
            assert!(
                embedding_fits(
                    (SI::RANK, SI::DIMS),
                    (SW::RANK, SW::DIMS),
                    (S::RANK, S::DIMS)
                ),
                "embedding: the weight must be [V, E] and the result the input's dims then E"
            )
        };
        let op = "embedding";
        let dims = rules::embedding(op, ("input", input.dims()), ("weight", weight.dims()))?;
        check_result::<S>(op, &dims)?;
        let r = input.dims().len();
        let (ws, wd) = (weight.layout.strides(), weight.dims());
        let mut sx = vec![0; r + 1];
        sx[r] = ws[1];
        let lx = Layout::new(dims.clone(), sx, weight.layout.offset());
        let mut si = input.layout.strides().to_vec();
        si.push(0);
        let li = Layout::new(dims, si, input.layout.offset());
        let sel = Selected {
            stride: ws[0],
            size: wd[0],
        };
        gather_into(weight, lx, sel, input, li, |k| {
            out_of_range(op, "input", k, "the rows of `weight`".to_string(), wd[0])
        })
    }
}
