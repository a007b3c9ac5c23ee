//! Concatenation along one dim.

use super::check_result;
use super::dispatch::dispatch;
use super::output::output;
use crate::backend::{RowBlock, RowBlocks};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::Result;
use crate::layout::Layout;
use crate::shape::{Shape, MAX_RANK};
use crate::storage::Storage;
use crate::tensor::Tensor;
use tensorfn_core::rules;

/// What the types already decide about `cat` along `axis` of shapes `a`
/// and `b` into `out`: equal ranks, equal static dims off the axis, and
/// the static sum on it. Unknown (`Dyn`) dims are left to run time.
const fn cat_fits(
    axis: usize,
    a: (usize, [Option<usize>; MAX_RANK]),
    b: (usize, [Option<usize>; MAX_RANK]),
    out: (usize, [Option<usize>; MAX_RANK]),
) -> bool {
    if a.0 != b.0 || a.0 != out.0 || axis >= a.0 {
        return false;
    }
    let mut k = 0;
    while k < a.0 {
        let (x, y, o) = (a.1[k], b.1[k], out.1[k]);
        if k == axis {
            if let (Some(x), Some(y), Some(o)) = (x, y, o) {
                if x + y != o {
                    return false;
                }
            }
        } else {
            if let (Some(x), Some(y)) = (x, y) {
                if x != y {
                    return false;
                }
            }
            if let (Some(x), Some(o)) = (x, o) {
                if x != o {
                    return false;
                }
            }
            if let (Some(y), Some(o)) = (y, o) {
                if y != o {
                    return false;
                }
            }
        }
        k += 1;
    }
    true
}

/// Like [`cat_fits`] for many tensors of one shape type (their count is
/// only known at run time, so the axis is not summed).
const fn cat_slice_fits(
    axis: usize,
    a: (usize, [Option<usize>; MAX_RANK]),
    out: (usize, [Option<usize>; MAX_RANK]),
) -> bool {
    if a.0 != out.0 || axis >= a.0 {
        return false;
    }
    let mut k = 0;
    while k < a.0 {
        if k != axis {
            if let (Some(x), Some(o)) = (a.1[k], out.1[k]) {
                if x != o {
                    return false;
                }
            }
        }
        k += 1;
    }
    true
}

/// `cat` of contiguous inputs as row blocks (see [`RowBlocks`]), or `None`
/// when some input is a strided view. `parts` hold (storage, layout,
/// start along `axis`).
fn row_blocks<'a, B>(
    parts: &[(&'a B, &Layout, usize)],
    axis: usize,
    dims: &[usize],
) -> Option<RowBlocks<'a, B>> {
    if !parts.iter().all(|(_, l, _)| l.is_contiguous()) {
        return None;
    }
    let outer: usize = dims[..axis].iter().product();
    let after: usize = dims[axis + 1..].iter().product();
    Some(RowBlocks {
        outer,
        row: dims[axis] * after,
        parts: parts
            .iter()
            .map(|&(buf, l, _)| RowBlock {
                buf,
                start: l.offset(),
                inner: l.dims()[axis] * after,
            })
            .collect(),
    })
}

/// Copies each part into its slice of a new buffer of `dims`: one
/// row-block copy when every part is contiguous, else one strided copy
/// per part. The buffer is not filled first, as the parts cover it.
fn concat<D: Device, T: DType, SO: Shape>(
    parts: &[(&Storage<T>, &Layout, usize)],
    axis: usize,
    dims: &[usize],
) -> Result<Tensor<D, T, SO>> {
    let whole = Layout::contiguous(dims);
    let n = whole.numel();
    let storage = dispatch!(D, |be| {
        let bufs: Vec<_> = parts
            .iter()
            .map(|&(s, l, start)| (be.buf(s), l, start))
            .collect();
        let out = match row_blocks(&bufs, axis, dims) {
            Some(plan) => be.cat_rows(&plan)?,
            None => {
                let mut out = be.alloc(n)?;
                for &(buf, layout, start) in &bufs {
                    let dst = whole.slice(axis, start, start + layout.dims()[axis]);
                    be.copy_into(buf, layout, &mut out, &dst)?;
                }
                out
            }
        };
        be.wrap(out)
    });
    output(storage, dims)
}

fn cat_two<D: Device, T: DType, const AXIS: usize, S1: Shape, S2: Shape, SO: Shape>(
    a: &Tensor<D, T, S1>,
    b: &Tensor<D, T, S2>,
) -> Result<Tensor<D, T, SO>> {
    const {
        assert!(
            cat_fits(
                AXIS,
                (S1::RANK, S1::DIMS),
                (S2::RANK, S2::DIMS),
                (SO::RANK, SO::DIMS)
            ),
            "cat: the static shapes do not concatenate along this axis into the result shape"
        )
    };
    let dims = rules::cat("cat", &[("self", a.dims()), ("other", b.dims())], AXIS)?;
    check_result::<SO>("cat", &dims)?;
    concat::<D, T, SO>(
        &[
            (&*a.storage, &a.layout, 0),
            (&*b.storage, &b.layout, a.dims()[AXIS]),
        ],
        AXIS,
        &dims,
    )
}

impl<D: Device, T: DType, S: Shape> Tensor<D, T, S> {
    /// `self` and `other` joined along dim `AXIS` (PyTorch's `cat`); the
    /// result type `SO` is annotated or inferred. Static shapes that do
    /// not fit fail to build; `Dyn` dims are checked at run time.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let a = Tensor::<Cpu, i32, shape![2, 1]>::from_vec(vec![1, 2]).unwrap();
    /// let b = Tensor::<Cpu, i32, shape![2, 2]>::from_vec(vec![3, 4, 5, 6]).unwrap();
    /// let c: Tensor<Cpu, i32, shape![2, 3]> = a.cat::<1, _>(&b).unwrap();
    /// assert_eq!(c.to_vec().unwrap(), vec![1, 3, 4, 2, 5, 6]);
    /// ```
    pub fn cat<const AXIS: usize, SO: Shape>(
        &self,
        other: &Tensor<D, T, impl Shape>,
    ) -> Result<Tensor<D, T, SO>> {
        cat_two::<D, T, AXIS, S, _, SO>(self, other)
    }

    /// Many tensors of one shape type joined along dim `AXIS`.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let a = Tensor::<Cpu, f32, shape![1, 2]>::ones().unwrap();
    /// let b = Tensor::<Cpu, f32, shape![1, 2]>::zeros().unwrap();
    /// let c = Tensor::cat_slice::<0, shape![3, 2]>(&[&a, &b, &a]).unwrap();
    /// assert_eq!(c.to_vec().unwrap(), vec![1., 1., 0., 0., 1., 1.]);
    /// assert!(Tensor::cat_slice::<0, shape![4, 2]>(&[&a, &b]).is_err());
    /// ```
    pub fn cat_slice<const AXIS: usize, SO: Shape>(tensors: &[&Self]) -> Result<Tensor<D, T, SO>> {
        const {
            assert!(
                cat_slice_fits(AXIS, (S::RANK, S::DIMS), (SO::RANK, SO::DIMS)),
                "cat_slice: the static shapes do not concatenate along this axis into the result shape"
            )
        };
        let names: Vec<String> = (0..tensors.len())
            .map(|i| format!("tensors[{i}]"))
            .collect();
        let operands: Vec<(&str, &[usize])> = names
            .iter()
            .zip(tensors)
            .map(|(n, t)| (n.as_str(), t.dims()))
            .collect();
        let dims = rules::cat("cat", &operands, AXIS)?;
        check_result::<SO>("cat", &dims)?;
        let mut start = 0;
        let parts: Vec<(&Storage<T>, &Layout, usize)> = tensors
            .iter()
            .map(|t| {
                let p = (&*t.storage, &t.layout, start);
                start += t.dims()[AXIS];
                p
            })
            .collect();
        concat::<D, T, SO>(&parts, AXIS, &dims)
    }

    /// Tensors of one shape joined along a new dim `dim` (`0..=rank`),
    /// PyTorch's `torch.stack`.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let a = Tensor::<Cpu, i32, shape![2]>::from_vec(vec![1, 2]).unwrap();
    /// let b = Tensor::<Cpu, i32, shape![2]>::from_vec(vec![3, 4]).unwrap();
    /// let rows = Tensor::stack::<shape![2, 2]>(&[&a, &b], 0).unwrap();
    /// assert_eq!(rows.to_vec().unwrap(), vec![1, 2, 3, 4]);
    /// let cols = Tensor::stack::<shape![2, 2]>(&[&a, &b], 1).unwrap();
    /// assert_eq!(cols.to_vec().unwrap(), vec![1, 3, 2, 4]);
    /// assert!(Tensor::stack::<shape![2, 2]>(&[&a, &b], 2).is_err());
    /// ```
    pub fn stack<SO: Shape>(tensors: &[&Self], dim: usize) -> Result<Tensor<D, T, SO>> {
        let names: Vec<String> = (0..tensors.len())
            .map(|i| format!("tensors[{i}]"))
            .collect();
        let operands: Vec<(&str, &[usize])> = names
            .iter()
            .zip(tensors)
            .map(|(n, t)| (n.as_str(), t.dims()))
            .collect();
        let dims = rules::stack("stack", &operands, dim)?;
        check_result::<SO>("stack", &dims)?;
        let mut one = dims.clone();
        one[dim] = 1;
        let layouts: Vec<Layout> = tensors
            .iter()
            .map(|t| {
                t.layout
                    .reshape(&one)
                    .expect("a size-1 dim inserted is a view")
            })
            .collect();
        let parts: Vec<(&Storage<T>, &Layout, usize)> = tensors
            .iter()
            .zip(&layouts)
            .enumerate()
            .map(|(i, (t, l))| (&*t.storage, l, i))
            .collect();
        concat::<D, T, SO>(&parts, dim, &dims)
    }
}
