//! Matrix products: `matmul`, `addmm`, `bmm`, `dot`. Shapes pair up in the
//! types ([`MatMulShape`], [`BiasFor`]); run-time dims go through the
//! shared rules. Transposed and sliced operands reach the backend as
//! strided views, without a copy.

use super::dispatch::{dispatch, ProductAndSecond, ProductExtra};
use super::output::output;
use crate::device::Device;
use crate::dtype::FloatDType;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::shape::{Dim, Shape};
use crate::storage::Storage;
use crate::tensor::Tensor;
use tensorfn_core::rules;
use tensorfn_kernels::UnaryOp;

pub(crate) mod gelu;

/// Shapes that `matmul` pairs, and the shape of their product.
///
/// Pairs: `(K,)x(K,) -> ()`, `(K,)x(K,N) -> (N,)`, `(M,K)x(K,) -> (M,)`,
/// `(M,K)x(K,N) -> (M,N)`, and with leading batch dims `..B` (one to
/// four): `(..B,M,K)x(..B,K,N) -> (..B,M,N)` (the same batch dims on both
/// sides), `(..B,M,K)x(K,N)`, `(M,K)x(..B,K,N)`, `(..B,M,K)x(K,)` and
/// `(K,)x(..B,K,N)`. The shared `K` (and batch dims) is one type
/// parameter, so a mismatch between `Const` dims does not compile. Batch
/// dims that broadcast against each other (a `1` against a `B`, or fewer
/// batch dims on one side) go through
/// [`matmul_broadcast`](crate::Tensor::matmul_broadcast).
///
/// ```
/// use tensorfn_runtime::{Tensor, Cpu, shape};
/// let a = Tensor::<Cpu, f32, shape![2, 3]>::ones().unwrap();
/// let b = Tensor::<Cpu, f32, shape![3, 4]>::ones().unwrap();
/// let c: Tensor<Cpu, f32, shape![2, 4]> = a.matmul(&b).unwrap();
/// assert_eq!(c.to_vec().unwrap(), vec![3.0; 8]);
/// // attention scores: [batch, heads, T, d] x [batch, heads, d, T]
/// let q = Tensor::<Cpu, f32, shape![2, 4, 5, 8]>::ones().unwrap();
/// let k = Tensor::<Cpu, f32, shape![2, 4, 5, 8]>::ones().unwrap();
/// let s: Tensor<Cpu, f32, shape![2, 4, 5, 5]> = q.matmul(&k.transpose::<shape![2, 4, 8, 5]>(2, 3).unwrap()).unwrap();
/// assert_eq!(s.to_vec().unwrap(), vec![8.0; 2 * 4 * 5 * 5]);
/// ```
///
/// Inner dims that differ do not compile:
///
/// ```compile_fail,E0277
/// use tensorfn_runtime::{Tensor, Cpu, shape};
/// let a = Tensor::<Cpu, f32, shape![2, 3]>::ones().unwrap();
/// let b = Tensor::<Cpu, f32, shape![4, 5]>::ones().unwrap();
/// let _ = a.matmul(&b);
/// ```
#[diagnostic::on_unimplemented(
    message = "`matmul` cannot multiply a `{Self}` tensor by a `{Rhs}` tensor",
    label = "the inner dims do not match, or this pairing of ranks is not a matrix product",
    note = "the last dim of the left operand must be the same dim as the second-to-last (or only) dim of the right one: (K,)x(K,), (K,)x(K,N), (M,K)x(K,), (M,K)x(K,N), (..B,M,K)x(..B,K,N), (..B,M,K)x(K,N), (M,K)x(..B,K,N)",
    note = "transpose an operand with `.t()` or `.transpose(d0, d1)`; a `Dyn` dim pairs only with `Dyn` (convert with `.into_shape()`); batch dims that broadcast (1 against B) go through `matmul_broadcast::<Out>`"
)]
pub trait MatMulShape<Rhs: Shape>: Shape {
    /// The shape of the product.
    type Output: Shape;
}
impl<K: Dim> MatMulShape<(K,)> for (K,) {
    type Output = ();
}
impl<K: Dim, N: Dim> MatMulShape<(K, N)> for (K,) {
    type Output = (N,);
}
impl<M: Dim, K: Dim> MatMulShape<(K,)> for (M, K) {
    type Output = (M,);
}
impl<M: Dim, K: Dim, N: Dim> MatMulShape<(K, N)> for (M, K) {
    type Output = (M, N);
}

/// The pairings with leading batch dims `$b`: the same batch on both
/// sides, or a matrix or vector on one side.
macro_rules! batched_matmul_shapes {
    ($($b:ident),+) => {
        impl<$($b: Dim,)+ M: Dim, K: Dim, N: Dim> MatMulShape<($($b,)+ K, N)> for ($($b,)+ M, K) {
            type Output = ($($b,)+ M, N);
        }
        impl<$($b: Dim,)+ M: Dim, K: Dim, N: Dim> MatMulShape<(K, N)> for ($($b,)+ M, K) {
            type Output = ($($b,)+ M, N);
        }
        impl<$($b: Dim,)+ M: Dim, K: Dim, N: Dim> MatMulShape<($($b,)+ K, N)> for (M, K) {
            type Output = ($($b,)+ M, N);
        }
        impl<$($b: Dim,)+ M: Dim, K: Dim> MatMulShape<(K,)> for ($($b,)+ M, K) {
            type Output = ($($b,)+ M,);
        }
        impl<$($b: Dim,)+ K: Dim, N: Dim> MatMulShape<($($b,)+ K, N)> for (K,) {
            type Output = ($($b,)+ N,);
        }
    };
}
batched_matmul_shapes!(B1);
batched_matmul_shapes!(B1, B2);
batched_matmul_shapes!(B1, B2, B3);
batched_matmul_shapes!(B1, B2, B3, B4);

/// Bias shapes `addmm` broadcasts to an `(M, N)` product: `()`, `(N,)`
/// and `(M, N)`.
///
/// ```
/// use tensorfn_runtime::{Tensor, Cpu, shape};
/// let bias = Tensor::<Cpu, f32, shape![4]>::ones().unwrap();
/// let x = Tensor::<Cpu, f32, shape![2, 3]>::ones().unwrap();
/// let w = Tensor::<Cpu, f32, shape![3, 4]>::ones().unwrap();
/// let y = Tensor::addmm(&bias, &x, &w).unwrap();
/// assert_eq!(y.to_vec().unwrap(), vec![4.0; 8]);
/// ```
///
/// A bias of the product's row count (`[M]`, not `[N]`) does not compile,
/// as PyTorch would refuse to broadcast it:
///
/// ```compile_fail,E0277
/// use tensorfn_runtime::{Tensor, Cpu, shape};
/// let bias = Tensor::<Cpu, f32, shape![2]>::ones().unwrap();
/// let x = Tensor::<Cpu, f32, shape![2, 3]>::ones().unwrap();
/// let w = Tensor::<Cpu, f32, shape![3, 4]>::ones().unwrap();
/// let _ = Tensor::addmm(&bias, &x, &w);
/// ```
#[diagnostic::on_unimplemented(
    message = "a `{Self}` bias does not broadcast to the `{Out}` product of `addmm`",
    label = "this bias does not fit the product",
    note = "for an (M, N) product the bias is (), (N,) or (M, N), with the same dim types as the product"
)]
pub trait BiasFor<Out: Shape>: Shape {}
impl<M: Dim, N: Dim> BiasFor<(M, N)> for () {}
impl<M: Dim, N: Dim> BiasFor<(M, N)> for (N,) {}
impl<M: Dim, N: Dim> BiasFor<(M, N)> for (M, N) {}

/// The last two dims of an operand as `(dims, strides)` of a matrix: a
/// vector on the left is one row, on the right one column.
fn matrix(l: &Layout, rhs: bool) -> ([usize; 2], [usize; 2]) {
    let (d, s, r) = (l.dims(), l.strides(), l.rank());
    match (r, rhs) {
        (1, false) => ([1, d[0]], [0, s[0]]),
        (1, true) => ([d[0], 1], [s[0], 0]),
        _ => ([d[r - 2], d[r - 1]], [s[r - 2], s[r - 1]]),
    }
}

/// The strides of `l`'s batch dims (all but the last two) against the
/// broadcast `batch`, right-aligned: 0 where `l` has no such dim or a 1.
pub(super) fn batch_strides(l: &Layout, batch: &[usize]) -> Vec<usize> {
    let r = l.rank().saturating_sub(2);
    let (d, s) = (&l.dims()[..r], &l.strides()[..r]);
    let pad = batch.len() - r;
    (0..batch.len())
        .map(|i| match i.checked_sub(pad) {
            Some(j) if d[j] == batch[i] => s[j],
            _ => 0,
        })
        .collect()
}

/// The single stride that walks `dims` (with `strides`) as one flat dim,
/// if there is one; size-1 dims are skipped, all-size-1 dims give 0.
pub(super) fn merged_stride(dims: &[usize], strides: &[usize]) -> Option<usize> {
    let mut walked = dims.iter().zip(strides).rev().filter(|&(&d, _)| d != 1);
    let Some((&d0, &s0)) = walked.next() else {
        return Some(0);
    };
    let mut next = d0.checked_mul(s0)?;
    for (&d, &s) in walked {
        if s != next {
            return None;
        }
        next = d.checked_mul(s)?;
    }
    Some(s0)
}

/// How the operands of a product reach the backend: as `[batch, m, k]`
/// and `[batch, k, n]` views, each either over its own buffer or, where
/// its batch dims cannot be walked with one stride, over a contiguous copy
/// of the `copy` layout (PyTorch's `matmul` copies there too).
#[derive(Debug, PartialEq)]
struct Operands {
    a: (Layout, Option<Layout>),
    b: (Layout, Option<Layout>),
}

/// Plans a product of `a` (ranks 1 to 6) and `b` whose dims the shared
/// rule has already accepted: leading batch dims broadcast as in PyTorch
/// and flatten into the one batch dim the backend takes.
fn plan(a: &Layout, b: &Layout, bias: bool) -> Operands {
    let (ra, rb) = (a.rank().saturating_sub(2), b.rank().saturating_sub(2));
    let n = ra.max(rb);
    let batch: Vec<usize> = (0..n)
        .map(|i| {
            let pick = |l: &Layout, r: usize| (i + r).checked_sub(n).map_or(1, |j| l.dims()[j]);
            pick(a, ra).max(pick(b, rb))
        })
        .collect();
    let flat: usize = batch.iter().product();
    let (ma, sa) = matrix(a, false);
    let (mb, sb) = matrix(b, true);
    let (bsa, bsb) = (batch_strides(a, &batch), batch_strides(b, &batch));
    // A batch against one shared matrix whose rows follow each other in
    // memory is a single taller product.
    if !bias && bsb.iter().all(|&s| s == 0) && flat > 1 {
        let dims: Vec<usize> = batch.iter().copied().chain([ma[0]]).collect();
        let strides: Vec<usize> = bsa.iter().copied().chain([sa[0]]).collect();
        if let Some(rows) = merged_stride(&dims, &strides) {
            return Operands {
                a: (
                    Layout::new(
                        vec![1, flat * ma[0], ma[1]],
                        vec![0, rows, sa[1]],
                        a.offset(),
                    ),
                    None,
                ),
                b: (
                    Layout::new(vec![1, mb[0], mb[1]], vec![0, sb[0], sb[1]], b.offset()),
                    None,
                ),
            };
        }
    }
    let side =
        |l: &Layout, m: [usize; 2], s: [usize; 2], bs: &[usize]| match merged_stride(&batch, bs) {
            Some(st) => (
                Layout::new(vec![flat, m[0], m[1]], vec![st, s[0], s[1]], l.offset()),
                None,
            ),
            None => {
                let dims: Vec<usize> = batch.iter().copied().chain(m).collect();
                let strides: Vec<usize> = bs.iter().copied().chain(s).collect();
                (
                    Layout::contiguous(&[flat, m[0], m[1]]),
                    Some(Layout::new(dims, strides, l.offset())),
                )
            }
        };
    Operands {
        a: side(a, ma, sa, &bsa),
        b: side(b, mb, sb, &bsb),
    }
}

/// `alpha * a @ b + beta * bias`, followed by the activation `act`, as a
/// contiguous buffer of the dims the caller's rule computed (a bias comes
/// only with 2-D operands).
fn product<D: Device, T: FloatDType>(
    a: &Tensor<D, T, impl Shape>,
    b: &Tensor<D, T, impl Shape>,
    bias: Option<&Tensor<D, T, impl Shape>>,
    alpha: T,
    beta: T,
    act: Option<UnaryOp>,
) -> Result<Storage<T>> {
    if a.layout.rank() == 0 || b.layout.rank() == 0 {
        return Err(Error::shape(
            "matmul",
            "operands of at least 1 dim",
            "a scalar operand",
        ));
    }
    // An empty product (a batch, row or column dim of 0: every dim but the
    // inner one) has nothing to compute, and the planner's views need not
    // fit its empty operands' buffers. An inner dim of 0 is not empty: its
    // products are 0 (plus the bias).
    let (da, db) = (a.dims(), b.dims());
    let a_empty = da[..da.len() - 1].contains(&0);
    let b_empty = db.len() > 1 && (0..db.len()).any(|i| i != db.len() - 2 && db[i] == 0);
    if a_empty || b_empty {
        return Ok(dispatch!(D, |be| be.wrap(be.alloc::<T>(0)?)));
    }
    let Operands {
        a: (la, copy_a),
        b: (lb, copy_b),
    } = plan(&a.layout, &b.layout, bias.is_some());
    let (m, n) = (la.dims()[1], lb.dims()[2]);
    let dense = [la.dims()[0], m, n];
    let lc = bias.map(|c| {
        let l2 = c.layout.broadcast_to(&[m, n]);
        Layout::new(
            dense.to_vec(),
            vec![0, l2.strides()[0], l2.strides()[1]],
            l2.offset(),
        )
    });
    Ok(dispatch!(D, |be| {
        let (a, b) = (be.buf(&a.storage), be.buf(&b.storage));
        let a_copy = copy_a.map(|l| be.contiguous(a, &l)).transpose()?;
        let b_copy = copy_b.map(|l| be.contiguous(b, &l)).transpose()?;
        let (a, b) = (a_copy.as_ref().unwrap_or(a), b_copy.as_ref().unwrap_or(b));
        let bias = bias.zip(lc.as_ref()).map(|(c, l)| (be.buf(&c.storage), l));
        be.wrap(match act {
            Some(act) => be.matmul_act(a, &la, b, &lb, bias, (alpha, beta), act)?,
            None => be.matmul(a, &la, b, &lb, bias, alpha, beta)?,
        })
    }))
}

/// A bias argument for products that have none.
type NoBias<D, T> = Tensor<D, T, ()>;

/// `a @ b`: no bias, no scaling, no epilogue.
fn plain_product<D: Device, T: FloatDType>(
    a: &Tensor<D, T, impl Shape>,
    b: &Tensor<D, T, impl Shape>,
) -> Result<Storage<T>> {
    product(a, b, None::<&NoBias<D, T>>, T::one(), T::zero(), None)
}

impl<D: Device, T: FloatDType, S: Shape> Tensor<D, T, S> {
    /// The matrix product, like `torch.matmul` (see [`MatMulShape`] for
    /// the pairs the types accept). Transposed views are multiplied in
    /// place, without a copy.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let a = Tensor::<Cpu, f32, shape![2, 2]>::from_vec(vec![1., 2., 3., 4.]).unwrap();
    /// let v = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![1., 1.]).unwrap();
    /// assert_eq!(a.matmul(&v).unwrap().to_vec().unwrap(), vec![3., 7.]);
    /// assert_eq!(a.t().unwrap().matmul(&v).unwrap().to_vec().unwrap(), vec![4., 6.]);
    /// ```
    pub fn matmul<S2: Shape>(&self, other: &Tensor<D, T, S2>) -> Result<Tensor<D, T, S::Output>>
    where
        S: MatMulShape<S2>,
    {
        // The types paired the shapes; the run-time rule is the same.
        self.matmul_broadcast(other)
    }

    /// [`matmul`](Self::matmul) written into `out` (which must have the
    /// product's dims); a shared `out` is replaced, not written through.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let a = Tensor::<Cpu, f32, shape![2, 3]>::ones().unwrap();
    /// let b = Tensor::<Cpu, f32, shape![3, 2]>::ones().unwrap();
    /// let mut out = Tensor::<Cpu, f32, shape![2, 2]>::zeros().unwrap();
    /// a.matmul_into(&b, &mut out).unwrap();
    /// assert_eq!(out.to_vec().unwrap(), vec![3.0; 4]);
    /// ```
    pub fn matmul_into<S2: Shape>(
        &self,
        other: &Tensor<D, T, S2>,
        out: &mut Tensor<D, T, S::Output>,
    ) -> Result<()>
    where
        S: MatMulShape<S2>,
    {
        let dims = rules::matmul("matmul", ("self", self.dims()), ("other", other.dims()))?;
        rules::same_shape("matmul_into", ("result", &dims[..]), ("out", out.dims()))?;
        let storage = plain_product(self, other)?;
        out.overwrite_with(storage)
    }
}

impl<D: Device, T: FloatDType, S: Shape> Tensor<D, T, S> {
    /// [`matmul`](Self::matmul) for any pairing the shared rule accepts,
    /// batch dims broadcast as in `torch.matmul` (a `1` or a missing batch
    /// dim against a `B`); the result type `SO` is checked at run time.
    /// `tensor_fn!` uses it where the operands' batch dims differ.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// // one set of per-head matrices shared by a batch of 2
    /// let x = Tensor::<Cpu, f32, shape![2, 3, 4, 5]>::ones().unwrap();
    /// let w = Tensor::<Cpu, f32, shape![3, 5, 6]>::ones().unwrap();
    /// let y = x.matmul_broadcast::<shape![2, 3, 4, 6]>(&w).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![5.0; 2 * 3 * 4 * 6]);
    /// // batch dims of 2 and 3 do not broadcast
    /// let z = Tensor::<Cpu, f32, shape![2, 5, 6]>::ones().unwrap();
    /// let w3 = Tensor::<Cpu, f32, shape![3, 1, 5, 6]>::ones().unwrap();
    /// assert!(z.matmul_broadcast::<shape![3, 3, 5, 6]>(&w3).is_err());
    /// ```
    pub fn matmul_broadcast<SO: Shape>(
        &self,
        other: &Tensor<D, T, impl Shape>,
    ) -> Result<Tensor<D, T, SO>> {
        let dims = rules::matmul("matmul", ("self", self.dims()), ("other", other.dims()))?;
        let storage = plain_product(self, other)?;
        output(storage, &dims)
    }
}

impl<D: Device, T: FloatDType, M: Dim, N: Dim> Tensor<D, T, (M, N)> {
    /// `bias + m1 @ m2` (PyTorch's `addmm`): `m1` is (M, K), `m2` is
    /// (K, N), the bias (), (N,) or (M, N) is broadcast to the product.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let b = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![10., 20.]).unwrap();
    /// let x = Tensor::<Cpu, f32, shape![1, 2]>::from_vec(vec![1., 2.]).unwrap();
    /// let w = Tensor::<Cpu, f32, shape![2, 2]>::from_vec(vec![1., 0., 0., 1.]).unwrap();
    /// assert_eq!(Tensor::addmm(&b, &x, &w).unwrap().to_vec().unwrap(), vec![11., 22.]);
    /// ```
    pub fn addmm<K: Dim>(
        bias: &Tensor<D, T, impl BiasFor<(M, N)>>,
        m1: &Tensor<D, T, (M, K)>,
        m2: &Tensor<D, T, (K, N)>,
    ) -> Result<Self> {
        Self::addmm_scaled(bias, m1, m2, T::one(), T::one())
    }

    /// `beta * bias + alpha * (m1 @ m2)` (PyTorch's `addmm(bias, m1, m2,
    /// beta=, alpha=)`); with `beta == 0` the bias is ignored, NaN included.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let b = Tensor::<Cpu, f32, shape![]>::full(1.0).unwrap();
    /// let x = Tensor::<Cpu, f32, shape![1, 1]>::full(3.0).unwrap();
    /// let w = Tensor::<Cpu, f32, shape![1, 1]>::full(2.0).unwrap();
    /// let y = Tensor::addmm_scaled(&b, &x, &w, 0.5, 10.0).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![60.5]);
    /// ```
    pub fn addmm_scaled<K: Dim>(
        bias: &Tensor<D, T, impl BiasFor<(M, N)>>,
        m1: &Tensor<D, T, (M, K)>,
        m2: &Tensor<D, T, (K, N)>,
        beta: T,
        alpha: T,
    ) -> Result<Self> {
        let dims = rules::addmm(
            "addmm",
            ("bias", bias.dims()),
            ("mat1", m1.dims()),
            ("mat2", m2.dims()),
        )?;
        let storage = product(m1, m2, Some(bias), alpha, beta, None)?;
        output(storage, &dims)
    }

    /// [`addmm`](Self::addmm) written into `out`.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let b = Tensor::<Cpu, f32, shape![2]>::ones().unwrap();
    /// let x = Tensor::<Cpu, f32, shape![2, 3]>::ones().unwrap();
    /// let w = Tensor::<Cpu, f32, shape![3, 2]>::ones().unwrap();
    /// let mut out = Tensor::<Cpu, f32, shape![2, 2]>::zeros().unwrap();
    /// Tensor::addmm_into(&b, &x, &w, &mut out).unwrap();
    /// assert_eq!(out.to_vec().unwrap(), vec![4.0; 4]);
    /// ```
    pub fn addmm_into<K: Dim>(
        bias: &Tensor<D, T, impl BiasFor<(M, N)>>,
        m1: &Tensor<D, T, (M, K)>,
        m2: &Tensor<D, T, (K, N)>,
        out: &mut Self,
    ) -> Result<()> {
        let dims = rules::addmm(
            "addmm",
            ("bias", bias.dims()),
            ("mat1", m1.dims()),
            ("mat2", m2.dims()),
        )?;
        rules::same_shape("addmm_into", ("result", &dims[..]), ("out", out.dims()))?;
        let storage = product(m1, m2, Some(bias), T::one(), T::one(), None)?;
        out.overwrite_with(storage)
    }
}

impl<D: Device, T: FloatDType, B: Dim, M: Dim, K: Dim> Tensor<D, T, (B, M, K)> {
    /// A batch of matrix products (PyTorch's `bmm`): (B, M, K) x (B, K, N).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let a = Tensor::<Cpu, f32, shape![2, 1, 2]>::from_vec(vec![1., 2., 3., 4.]).unwrap();
    /// let b = Tensor::<Cpu, f32, shape![2, 2, 1]>::from_vec(vec![1., 1., 2., 2.]).unwrap();
    /// assert_eq!(a.bmm(&b).unwrap().to_vec().unwrap(), vec![3., 14.]);
    /// ```
    pub fn bmm<N: Dim>(&self, other: &Tensor<D, T, (B, K, N)>) -> Result<Tensor<D, T, (B, M, N)>> {
        let dims = rules::bmm("bmm", ("self", self.dims()), ("other", other.dims()))?;
        let storage = plain_product(self, other)?;
        output(storage, &dims)
    }
}

impl<D: Device, T: FloatDType, K: Dim> Tensor<D, T, (K,)> {
    /// The dot product of two vectors of equal length, as a 0-D tensor.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let a = Tensor::<Cpu, f64, shape![3]>::from_vec(vec![1., 2., 3.]).unwrap();
    /// assert_eq!(a.dot(&a).unwrap().item().unwrap(), 14.);
    /// let d = Tensor::<Cpu, f64, shape![_]>::zeros_dims(&[3]).unwrap();
    /// assert!(d.dot(&Tensor::zeros_dims(&[4]).unwrap()).is_err());
    /// ```
    pub fn dot(&self, other: &Self) -> Result<Tensor<D, T, ()>> {
        let dims = rules::dot("dot", ("self", self.dims()), ("other", other.dims()))?;
        let storage = plain_product(self, other)?;
        output(storage, &dims)
    }
}

impl<D: Device, T: FloatDType, M: Dim, N: Dim> Tensor<D, T, (M, N)> {
    /// `relu(bias + m1 @ m2)`, the same as `Tensor::addmm(..)?.relu()`, as
    /// one entry point so that `tensor_fn!` can send a linear layer with
    /// its activation to the backend at once: on the GPU a bias of shape
    /// `(N,)` is fused with the ReLU into the cuBLASLt product's epilogue
    /// instead of three passes. Used by code `tensor_fn!` generates.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let b = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![-10., 1.]).unwrap();
    /// let x = Tensor::<Cpu, f32, shape![1, 2]>::from_vec(vec![1., 2.]).unwrap();
    /// let w = Tensor::<Cpu, f32, shape![2, 2]>::from_vec(vec![1., 0., 0., 1.]).unwrap();
    /// let y = Tensor::addmm_relu(&b, &x, &w).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![0., 3.]);
    /// ```
    #[doc(hidden)]
    pub fn addmm_relu<K: Dim>(
        bias: &Tensor<D, T, impl BiasFor<(M, N)>>,
        m1: &Tensor<D, T, (M, K)>,
        m2: &Tensor<D, T, (K, N)>,
    ) -> Result<Self> {
        Self::addmm_act(bias, m1, m2, UnaryOp::Relu)
    }

    /// `act(bias + m1 @ m2)` for an activation `act` (`Relu` or `Gelu`,
    /// tanh form), as one call: on the GPU a bias of shape `(N,)` and the
    /// activation run in the cuBLASLt product's epilogue, which applies it
    /// to the accumulator before rounding (other activations take a second
    /// kernel). `tensor_fn!` plans `gelu(addmm(..))` of 16-bit floats and
    /// `relu(addmm(..))` into it.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape, __private::UnaryOp};
    /// let b = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![-10., 1.]).unwrap();
    /// let x = Tensor::<Cpu, f32, shape![1, 2]>::from_vec(vec![1., 2.]).unwrap();
    /// let w = Tensor::<Cpu, f32, shape![2, 2]>::from_vec(vec![1., 0., 0., 1.]).unwrap();
    /// let y = Tensor::addmm_act(&b, &x, &w, UnaryOp::Gelu).unwrap();
    /// let want = Tensor::addmm(&b, &x, &w).unwrap().gelu().unwrap();
    /// assert_eq!(y.to_vec().unwrap(), want.to_vec().unwrap());
    /// ```
    #[doc(hidden)]
    pub fn addmm_act<K: Dim>(
        bias: &Tensor<D, T, impl BiasFor<(M, N)>>,
        m1: &Tensor<D, T, (M, K)>,
        m2: &Tensor<D, T, (K, N)>,
        act: UnaryOp,
    ) -> Result<Self> {
        let dims = rules::addmm(
            "addmm",
            ("bias", bias.dims()),
            ("mat1", m1.dims()),
            ("mat2", m2.dims()),
        )?;
        let storage = product(m1, m2, Some(bias), T::one(), T::one(), Some(act))?;
        output(storage, &dims)
    }

    /// `(a @ b, b.sum::<0>())`: a weight gradient `xᵀ g` and its bias
    /// gradient, the column sums of `g`, from one read of `g`. On the GPU
    /// the sums run in the cuBLASLt product's epilogue (`BGRADA`) where
    /// cuBLASLt has an algorithm for the dtype and transposes; elsewhere
    /// (the CPU, f64, a product it declines) the two run one after the
    /// other. `tensor_fn!` plans a backward's `matmul` and column sum of
    /// the same gradient into it.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![3, 2]>::from_vec(vec![1., 2., 3., 4., 5., 6.]).unwrap();
    /// let g = Tensor::<Cpu, f32, shape![3, 1]>::from_vec(vec![1., 0., -1.]).unwrap();
    /// let (dw, db) = Tensor::matmul_sum_b(&x.t().unwrap(), &g).unwrap();
    /// assert_eq!(dw.to_vec().unwrap(), vec![-4., -4.]);
    /// assert_eq!(db.to_vec().unwrap(), vec![0.]);
    /// ```
    #[doc(hidden)]
    pub fn matmul_sum_b<K: Dim>(
        a: &Tensor<D, T, (M, K)>,
        b: &Tensor<D, T, (K, N)>,
    ) -> Result<WithSums<D, T, M, N, N>> {
        let dims = rules::matmul("matmul", ("mat1", a.dims()), ("mat2", b.dims()))?;
        match fused_sum_k(a, b, true)? {
            Some((prod, sums)) => Ok((output(prod, &dims)?, output(sums, &dims[1..])?)),
            None => Ok((output(plain_product(a, b)?, &dims)?, b.sum::<0>()?)),
        }
    }

    /// `(a @ b, a.sum::<1>())`: a weight gradient `gᵀ x` (`a` the
    /// transposed gradient) and its bias gradient, the row sums of `a`;
    /// on the GPU in one cuBLASLt call (`BGRADB`), as
    /// [`matmul_sum_b`](Self::matmul_sum_b).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let g = Tensor::<Cpu, f32, shape![3, 1]>::from_vec(vec![1., 0., -1.]).unwrap();
    /// let x = Tensor::<Cpu, f32, shape![3, 2]>::from_vec(vec![1., 2., 3., 4., 5., 6.]).unwrap();
    /// let (dw, db) = Tensor::matmul_sum_a(&g.t().unwrap(), &x).unwrap();
    /// assert_eq!(dw.to_vec().unwrap(), vec![-4., -4.]);
    /// assert_eq!(db.to_vec().unwrap(), vec![0.]);
    /// ```
    #[doc(hidden)]
    pub fn matmul_sum_a<K: Dim>(
        a: &Tensor<D, T, (M, K)>,
        b: &Tensor<D, T, (K, N)>,
    ) -> Result<WithSums<D, T, M, N, M>> {
        let dims = rules::matmul("matmul", ("mat1", a.dims()), ("mat2", b.dims()))?;
        match fused_sum_k(a, b, false)? {
            Some((prod, sums)) => Ok((output(prod, &dims)?, output(sums, &dims[..1])?)),
            None => Ok((output(plain_product(a, b)?, &dims)?, a.sum::<1>()?)),
        }
    }
}

/// An `M x N` product and the `V` sums over its `k` of one operand.
type WithSums<D, T, M, N, V> = (Tensor<D, T, (M, N)>, Tensor<D, T, (V,)>);

/// The product of two matrices and the sum over `k` of `b` (`of_b`) or of
/// `a`, in one pass where the backend has one; `None` otherwise.
fn fused_sum_k<D: Device, T: FloatDType>(
    a: &Tensor<D, T, impl Shape>,
    b: &Tensor<D, T, impl Shape>,
    of_b: bool,
) -> Result<Option<(Storage<T>, Storage<T>)>> {
    let fused = fused_epilogue(a, b, ProductExtra::SumK { of_b })?;
    Ok(fused.and_then(|(p, s)| Some((p, s?))))
}

/// The product of two matrices with what `extra` names computed in the
/// same pass ([`Exec::matmul_epilogue`](super::dispatch::Exec)), where
/// the backend has one; `None` otherwise. Operands the product would
/// copy first are left to the separate path.
fn fused_epilogue<D: Device, T: FloatDType>(
    a: &Tensor<D, T, impl Shape>,
    b: &Tensor<D, T, impl Shape>,
    extra: ProductExtra<'_, Storage<T>>,
) -> Result<Option<ProductAndSecond<Storage<T>>>> {
    let Operands {
        a: (la, copy_a),
        b: (lb, copy_b),
    } = plan(&a.layout, &b.layout, false);
    if copy_a.is_some() || copy_b.is_some() {
        return Ok(None);
    }
    dispatch!(D, |be| {
        let extra = extra.map(|s| be.buf(s));
        let fused =
            be.matmul_epilogue((be.buf(&a.storage), &la), (be.buf(&b.storage), &lb), extra)?;
        Ok(fused.map(|(p, s)| (be.wrap(p), s.map(|s| be.wrap(s)))))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strided(dims: &[usize], perm: &[usize]) -> Layout {
        Layout::contiguous(dims).permute(perm)
    }

    #[test]
    fn batch_dims_flatten_without_a_copy_when_one_stride_walks_them() {
        let a = Layout::contiguous(&[2, 3, 4, 5]);
        let b = Layout::contiguous(&[2, 3, 5, 6]);
        let p = plan(&a, &b, false);
        assert_eq!(p.a, (Layout::new(vec![6, 4, 5], vec![20, 5, 1], 0), None));
        assert_eq!(p.b, (Layout::new(vec![6, 5, 6], vec![30, 6, 1], 0), None));
        // One matrix for the whole batch: a single taller product.
        let w = Layout::contiguous(&[5, 6]);
        let p = plan(&a, &w, false);
        assert_eq!(p.a.0, Layout::new(vec![1, 24, 5], vec![0, 5, 1], 0));
        // ...but not with a bias, which is per (m, n) product.
        assert_eq!(plan(&a, &w, true).a.0.dims(), &[6, 4, 5]);
        // A missing or size-1 batch dim repeats with stride 0.
        let heads = Layout::contiguous(&[1, 5, 6]);
        let p = plan(&Layout::contiguous(&[3, 4, 5]), &heads, false);
        assert_eq!(p.b, (Layout::new(vec![1, 5, 6], vec![0, 6, 1], 0), None));
    }

    #[test]
    fn batch_dims_no_stride_walks_are_copied() {
        // Swapped batch dims: [3, 2, 4, 5] over a [2, 3, 4, 5] buffer.
        let a = strided(&[2, 3, 4, 5], &[1, 0, 2, 3]);
        let b = Layout::contiguous(&[2, 5, 6]);
        let p = plan(&a, &b, false);
        assert_eq!(p.a.0, Layout::contiguous(&[6, 4, 5]));
        assert_eq!(p.a.1.as_ref().map(Layout::dims), Some(&[3, 2, 4, 5][..]));
        // b repeats over the outer batch dim but not the inner one.
        assert_eq!(p.b.0, Layout::contiguous(&[6, 5, 6]));
        assert_eq!(
            p.b.1.as_ref().map(Layout::strides),
            Some(&[0, 30, 6, 1][..])
        );
    }

    #[test]
    fn merged_strides_skip_size_one_dims() {
        assert_eq!(merged_stride(&[2, 1, 3], &[3, 99, 1]), Some(1));
        assert_eq!(merged_stride(&[2, 3], &[1, 2]), None);
        assert_eq!(merged_stride(&[1, 1], &[7, 9]), Some(0));
        assert_eq!(merged_stride(&[4, 3], &[0, 0]), Some(0));
    }
}
