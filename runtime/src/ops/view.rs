//! Shape changes: views where the layout allows (no copy), a copy
//! otherwise.

use super::dispatch::dispatch;
use super::output::{output, output_in};
use super::{check_result, static_dims};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::shape::{Dim, Dyn, Shape};
use crate::tensor::Tensor;
use tensorfn_core::rules;

/// Shapes `.t()` accepts (rank 0, 1 or 2) and what it makes of them.
///
/// ```
/// use tensorfn_runtime::{Tensor, Cpu, shape, Transpose2};
/// let x = Tensor::<Cpu, f32, shape![2, 3]>::zeros().unwrap();
/// let y: Tensor<Cpu, f32, shape![3, 2]> = x.t().unwrap();
/// assert_eq!(y.shape(), &[3, 2]);
/// ```
///
/// A 3-D tensor has no `.t()`; it does not compile:
///
/// ```compile_fail,E0277
/// use tensorfn_runtime::{Tensor, Cpu, shape};
/// let x = Tensor::<Cpu, f32, shape![2, 3, 4]>::zeros().unwrap();
/// let _ = x.t();
/// ```
#[diagnostic::on_unimplemented(
    message = "`.t()` transposes tensors of at most 2 dims, not `{Self}`",
    label = "this tensor has more than 2 dims",
    note = "swap two dims with `.transpose::<ResultShape>(d0, d1)` or reorder them with `.permute::<ResultShape>(&[..])`"
)]
pub trait Transpose2: Shape {
    /// The shape with its two dims swapped.
    type Output: Shape;
}
impl Transpose2 for () {
    type Output = ();
}
impl<A: Dim> Transpose2 for (A,) {
    type Output = (A,);
}
impl<A: Dim, B: Dim> Transpose2 for (A, B) {
    type Output = (B, A);
}

const fn same_numel(a: Option<usize>, b: Option<usize>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    }
}

impl<D: Device, T: DType, S: Shape> Tensor<D, T, S> {
    fn with_layout<S2: Shape>(&self, layout: Layout) -> Tensor<D, T, S2> {
        Tensor::from_parts(self.storage.clone(), layout)
    }

    /// The same elements under the static shape `S2`: a view when the
    /// tensor is contiguous, a copy otherwise. A different element count
    /// between two static shapes fails to build; with `Dyn` dims it is an
    /// `Err`.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, i32, shape![2, 3]>::arange(0, 1).unwrap();
    /// let y = x.reshape::<shape![3, 2]>().unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![0, 1, 2, 3, 4, 5]);
    /// let d = Tensor::<Cpu, i32, shape![_]>::zeros_dims(&[5]).unwrap();
    /// assert!(d.reshape::<shape![2, 3]>().is_err());
    /// ```
    pub fn reshape<S2: Shape>(&self) -> Result<Tensor<D, T, S2>> {
        const {
            assert!(
                same_numel(S::STATIC_NUMEL, S2::STATIC_NUMEL),
                "reshape between static shapes with different element counts"
            )
        };
        self.reshape_dims(&static_dims::<S2>("reshape")?)
    }

    /// [`reshape`](Self::reshape) to run-time `dims`.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 3]>::zeros().unwrap();
    /// let y = x.reshape_dims::<shape![_, 2]>(&[3, 2]).unwrap();
    /// assert_eq!(y.shape(), &[3, 2]);
    /// assert!(x.reshape_dims::<shape![_, 2]>(&[4, 2]).is_err());
    /// ```
    pub fn reshape_dims<S2: Shape>(&self, dims: &[usize]) -> Result<Tensor<D, T, S2>> {
        rules::reshape("reshape", ("self", self.dims()), dims)?;
        check_result::<S2>("reshape", dims)?;
        if let Some(layout) = self.layout.reshape(dims) {
            return Ok(self.with_layout(layout));
        }
        let storage = dispatch!(D, |be| be
            .wrap(be.contiguous(be.buf(&self.storage), &self.layout)?));
        output(storage, dims)
    }

    /// PyTorch's `torch.flatten(self, start_dim, end_dim)` (what
    /// `flatten(x, start_dim, end_dim)` of `tensor_fn!` runs; the plain
    /// [`flatten`](Self::flatten) merges every dim): dims
    /// `start_dim..=end_dim` (negative counts from the end) merged into
    /// one, a view when the layout allows and a copy otherwise; the result
    /// type `SO` is annotated or inferred. `nn.Flatten` is `start_dim = 1,
    /// end_dim = -1` (a batch of feature maps to a batch of rows). Dims out
    /// of range, `start_dim` after `end_dim` or a result type that does not
    /// fit are an `Err`.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![8, 16, 5, 5]>::zeros().unwrap();
    /// let rows: Tensor<Cpu, f32, shape![8, 400]> = x.flatten_range(1, -1).unwrap(); // nn.Flatten()
    /// assert_eq!(rows.shape(), &[8, 400]);
    /// let all: Tensor<Cpu, f32, shape![3200]> = x.flatten_range(0, -1).unwrap();
    /// assert_eq!(all.shape(), &[3200]);
    /// assert!(x.flatten_range::<shape![8, 256]>(1, -1).is_err());
    /// ```
    pub fn flatten_range<SO: Shape>(
        &self,
        start_dim: isize,
        end_dim: isize,
    ) -> Result<Tensor<D, T, SO>> {
        let r = self.dims().len();
        let start = rules::normalize_dim("flatten", "self", start_dim, r)?;
        let end = rules::normalize_dim("flatten", "self", end_dim, r)?;
        let dims = rules::flatten("flatten", ("self", self.dims()), start, end)?;
        check_result::<SO>("flatten", &dims)?;
        self.reshape_dims(&dims)
    }

    /// Like [`reshape`](Self::reshape) but never copies: `Err` for a
    /// non-contiguous tensor, like PyTorch's `view`.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 3]>::zeros().unwrap();
    /// assert_eq!(x.view::<shape![6]>().unwrap().shape(), &[6]);
    /// assert!(x.t().unwrap().view::<shape![6]>().is_err());
    /// ```
    pub fn view<S2: Shape>(&self) -> Result<Tensor<D, T, S2>> {
        const {
            assert!(
                same_numel(S::STATIC_NUMEL, S2::STATIC_NUMEL),
                "view between static shapes with different element counts"
            )
        };
        self.view_dims(&static_dims::<S2>("view")?)
    }

    /// [`view`](Self::view) to run-time `dims`.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![4, 3]>::zeros().unwrap();
    /// assert_eq!(x.view_dims::<shape![_]>(&[12]).unwrap().shape(), &[12]);
    /// assert!(x.view_dims::<shape![_]>(&[13]).is_err());
    /// ```
    pub fn view_dims<S2: Shape>(&self, dims: &[usize]) -> Result<Tensor<D, T, S2>> {
        rules::reshape("view", ("self", self.dims()), dims)?;
        check_result::<S2>("view", dims)?;
        match self.layout.reshape(dims) {
            Some(layout) => Ok(self.with_layout(layout)),
            None => Err(Error::shape(
                "view",
                "a tensor whose dims split or merge without moving elements",
                format!(
                    "a view of dims {:?} with strides {:?}; use `.reshape()` (which copies) or call `.contiguous()` first",
                    self.dims(),
                    self.layout.strides()
                ),
            )),
        }
    }

    /// The elements as one dim (a view when contiguous).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 3]>::zeros().unwrap();
    /// assert_eq!(x.flatten().unwrap().shape(), &[6]);
    /// ```
    pub fn flatten(&self) -> Result<Tensor<D, T, (Dyn,)>> {
        self.reshape_dims(&[self.numel()])
    }

    /// [`reshape`](Self::reshape) under the name `tensor_fn!` uses for a
    /// reshape whose target does not keep the order of the source's dims
    /// on purpose (there the plain `reshape` of such a target is an
    /// error). The typed API's sizes are numbers, whose factors cannot
    /// tell a moved dim from a regrouped one, so both names do the same.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, i32, shape![2, 3]>::arange(0, 1).unwrap();
    /// let y = x.reshape_unordered::<shape![3, 2]>().unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![0, 1, 2, 3, 4, 5]);
    /// ```
    pub fn reshape_unordered<S2: Shape>(&self) -> Result<Tensor<D, T, S2>> {
        self.reshape::<S2>()
    }

    /// [`view`](Self::view) under the name `tensor_fn!` uses for a view
    /// that mixes dims on purpose (see [`reshape_unordered`](Self::reshape_unordered)).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![4, 6]>::zeros().unwrap();
    /// assert_eq!(x.view_unordered::<shape![6, 4]>().unwrap().shape(), &[6, 4]);
    /// ```
    pub fn view_unordered<S2: Shape>(&self) -> Result<Tensor<D, T, S2>> {
        self.view::<S2>()
    }

    /// A dim of size 1 inserted at `dim` (`0..=rank`), as a view; the
    /// explicit form of a broadcast that adds a dim (`target.unsqueeze(1)`
    /// to subtract a `[N]` target from a `[N, 1]` prediction).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let t = Tensor::<Cpu, f32, shape![3]>::from_vec(vec![1., 2., 3.]).unwrap();
    /// let col = t.unsqueeze::<shape![3, 1]>(1).unwrap();
    /// assert_eq!(col.shape(), &[3, 1]);
    /// assert!(t.unsqueeze::<shape![1, 3]>(2).is_err());
    /// ```
    pub fn unsqueeze<S2: Shape>(&self, dim: usize) -> Result<Tensor<D, T, S2>> {
        let dims = rules::unsqueeze("unsqueeze", ("self", self.dims()), dim)?;
        self.reshape_dims(&dims)
    }

    /// Removes dim `dim`, which must have size 1 (an `Err` otherwise:
    /// the result's rank is part of its type), as a view.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let p = Tensor::<Cpu, f32, shape![3, 1]>::zeros().unwrap();
    /// assert_eq!(p.squeeze::<shape![3]>(1).unwrap().shape(), &[3]);
    /// assert!(p.squeeze::<shape![1]>(0).is_err());
    /// ```
    pub fn squeeze<S2: Shape>(&self, dim: usize) -> Result<Tensor<D, T, S2>> {
        let dims = rules::squeeze("squeeze", ("self", self.dims()), dim)?;
        self.reshape_dims(&dims)
    }

    /// The matrix transpose (a view); 0-D and 1-D tensors are returned as
    /// they are, like PyTorch.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, i32, shape![2, 3]>::arange(0, 1).unwrap();
    /// let t = x.t().unwrap();
    /// assert_eq!(t.shape(), &[3, 2]);
    /// assert_eq!(t.to_vec().unwrap(), vec![0, 3, 1, 4, 2, 5]);
    /// ```
    pub fn t(&self) -> Result<Tensor<D, T, S::Output>>
    where
        S: Transpose2,
    {
        let dims = rules::t("t", ("self", self.dims()))?;
        let layout = if self.rank() == 2 {
            self.layout.transpose(0, 1)
        } else {
            self.layout.clone()
        };
        debug_assert_eq!(layout.dims(), &dims[..]);
        Ok(self.with_layout(layout))
    }

    /// Swaps dims `d0` and `d1` (a view); the result type `SO` is checked.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 3, 4]>::zeros().unwrap();
    /// let y = x.transpose::<shape![4, 3, 2]>(0, 2).unwrap();
    /// assert_eq!(y.shape(), &[4, 3, 2]);
    /// assert!(x.transpose::<shape![2, 3, 4]>(0, 3).is_err());
    /// ```
    pub fn transpose<SO: Shape>(&self, d0: usize, d1: usize) -> Result<Tensor<D, T, SO>> {
        let dims = rules::transpose("transpose", ("self", self.dims()), d0, d1)?;
        check_result::<SO>("transpose", &dims)?;
        Ok(self.with_layout(self.layout.transpose(d0, d1)))
    }

    /// Reorders the dims (a view): dim `i` of the result is dim `perm[i]`.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 3, 4]>::zeros().unwrap();
    /// let y = x.permute::<shape![4, 2, 3]>(&[2, 0, 1]).unwrap();
    /// assert_eq!(y.shape(), &[4, 2, 3]);
    /// assert!(x.permute::<shape![4, 2, 3]>(&[2, 0, 0]).is_err());
    /// ```
    pub fn permute<SO: Shape>(&self, perm: &[usize]) -> Result<Tensor<D, T, SO>> {
        let dims = rules::permute("permute", ("self", self.dims()), perm)?;
        check_result::<SO>("permute", &dims)?;
        Ok(self.with_layout(self.layout.permute(perm)))
    }

    /// A row-major copy, or the tensor itself when it already is one.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 3]>::zeros().unwrap();
    /// let t = x.t().unwrap();
    /// assert!(!t.is_contiguous());
    /// assert!(t.contiguous().unwrap().is_contiguous());
    /// ```
    pub fn contiguous(&self) -> Result<Self> {
        if self.layout.is_contiguous() {
            return Ok(self.clone());
        }
        let storage = dispatch!(D, |be| be
            .wrap(be.contiguous(be.buf(&self.storage), &self.layout)?));
        output(storage, self.dims())
    }

    /// A copy of an `[N, C, H, W]` tensor stored channels-last (NHWC
    /// memory, PyTorch's `x.contiguous(memory_format=torch.channels_last)`),
    /// or the tensor itself when it already is. The shape stays
    /// `[N, C, H, W]`: only the strides differ. Convolutions, pools and
    /// elementwise ops keep channels-last inputs channels-last, which is
    /// the order cuDNN's convolution engines run fastest on the GPU;
    /// [`contiguous`](Self::contiguous) goes back to row-major. A tensor
    /// of another rank is an `Err`.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![1, 2, 1, 3]>::from_vec(vec![0., 1., 2., 3., 4., 5.]).unwrap();
    /// let y = x.contiguous_channels_last().unwrap();
    /// assert_eq!(y.layout().strides(), &[6, 1, 6, 2]);
    /// assert!(y.layout().is_channels_last());
    /// assert_eq!(y.to_vec().unwrap(), x.to_vec().unwrap()); // the same values
    /// // Elementwise results keep the memory order.
    /// assert!(y.mul_scalar(2.0).unwrap().layout().is_channels_last());
    /// assert!(y.contiguous().unwrap().is_contiguous());
    /// let m = Tensor::<Cpu, f32, shape![2, 3]>::zeros().unwrap();
    /// assert!(m.contiguous_channels_last().is_err());
    /// ```
    pub fn contiguous_channels_last(&self) -> Result<Self> {
        let Ok(dims) = <[usize; 4]>::try_from(self.dims()) else {
            return Err(Error::shape(
                "contiguous_channels_last",
                "`self` of 4 dims, [N, C, H, W]",
                format!("{} dims {:?}", self.dims().len(), self.dims()),
            ));
        };
        if self.layout.is_channels_last() {
            return Ok(self.clone());
        }
        let y = Layout::channels_last(dims);
        let storage = dispatch!(D, |be| {
            let mut out = be.alloc::<T>(y.numel())?;
            be.copy_into(be.buf(&self.storage), &self.layout, &mut out, &y)?;
            be.wrap(out)
        });
        output_in(storage, y)
    }

    /// Each element along `dim` repeated `repeats` times in place
    /// (`[a, b]` → `[a, a, b, b]`), PyTorch's `repeat_interleave` with an
    /// integer `repeats`: what grouped-query attention does to its key and
    /// value heads. A copy.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, i32, shape![2, 2]>::from_vec(vec![1, 2, 3, 4]).unwrap();
    /// let y = x.repeat_interleave::<shape![4, 2]>(2, 0).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![1, 2, 1, 2, 3, 4, 3, 4]);
    /// let z = x.repeat_interleave::<shape![2, 6]>(3, 1).unwrap();
    /// assert_eq!(z.to_vec().unwrap(), vec![1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]);
    /// assert!(x.repeat_interleave::<shape![4, 2]>(2, 2).is_err());
    /// ```
    pub fn repeat_interleave<SO: Shape>(
        &self,
        repeats: usize,
        dim: usize,
    ) -> Result<Tensor<D, T, SO>> {
        let dims =
            rules::repeat_interleave("repeat_interleave", ("self", self.dims()), &repeats, dim)?;
        check_result::<SO>("repeat_interleave", &dims)?;
        // [.., n, ..] as [.., n, 1, ..], broadcast to [.., n, repeats, ..]
        // (a view), then copied in that order as [.., n * repeats, ..].
        let mut wide = self.dims().to_vec();
        wide.insert(dim + 1, 1);
        let src = match self.layout.reshape(&wide) {
            Some(_) => self.clone(),
            None => self.contiguous()?,
        };
        let one = src
            .layout
            .reshape(&wide)
            .expect("a row-major layout takes any dims of its size");
        wide[dim + 1] = repeats;
        let spread = one.broadcast_to(&wide);
        let storage = dispatch!(D, |be| be
            .wrap(be.contiguous(be.buf(&src.storage), &spread)?));
        output(storage, &dims)
    }

    /// [`broadcast_to_dims`](Self::broadcast_to_dims) by PyTorch's name:
    /// a view with dims of size 1 (and new leading dims) repeated.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 1]>::from_vec(vec![1., 2.]).unwrap();
    /// let y = x.expand::<shape![2, 3]>(&[2, 3]).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![1., 1., 1., 2., 2., 2.]);
    /// ```
    pub fn expand<SO: Shape>(&self, dims: &[usize]) -> Result<Tensor<D, T, SO>> {
        self.broadcast_to_dims(dims)
    }

    /// A view broadcast to the static shape `SO` (PyTorch's `expand`): no
    /// copy, size-1 and missing leading dims repeat.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![3]>::from_vec(vec![1., 2., 3.]).unwrap();
    /// let y = x.broadcast_to::<shape![2, 3]>().unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![1., 2., 3., 1., 2., 3.]);
    /// assert!(x.broadcast_to::<shape![3, 2]>().is_err());
    /// ```
    pub fn broadcast_to<SO: Shape>(&self) -> Result<Tensor<D, T, SO>> {
        self.broadcast_to_dims(&static_dims::<SO>("broadcast_to")?)
    }

    /// [`broadcast_to`](Self::broadcast_to) to run-time `dims`; `Err` when
    /// the tensor does not broadcast to them or they do not fit `SO`.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![1]>::ones().unwrap();
    /// let y = x.broadcast_to_dims::<shape![_, 2]>(&[3, 2]).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![1.0; 6]);
    /// ```
    pub fn broadcast_to_dims<SO: Shape>(&self, dims: &[usize]) -> Result<Tensor<D, T, SO>> {
        rules::broadcast_to("broadcast_to", ("self", self.dims()), dims)?;
        check_result::<SO>("broadcast_to", dims)?;
        Ok(self.with_layout(self.layout.broadcast_to(dims)))
    }
}
