//! Matrix products: `matmul`, `addmm`, `bmm`, `dot`. Shapes pair up in the
//! types ([`MatMulShape`], [`BiasFor`]); run-time dims go through the
//! shared rules. Transposed and sliced operands reach the backend as
//! strided views, without a copy.

use super::dispatch::dispatch;
use super::output::output;
use crate::device::Device;
use crate::dtype::FloatDType;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::shape::{Dim, Shape};
use crate::storage::Storage;
use crate::tensor::Tensor;
use tensorfn_core::rules;

/// Shapes that `matmul` pairs, and the shape of their product.
///
/// Pairs: `(K,)x(K,) -> ()`, `(K,)x(K,N) -> (N,)`, `(M,K)x(K,) -> (M,)`,
/// `(M,K)x(K,N) -> (M,N)`, `(B,M,K)x(B,K,N) -> (B,M,N)`,
/// `(B,M,K)x(K,N) -> (B,M,N)`. The shared `K` (and `B`) is one type
/// parameter, so a mismatch between `Const` dims does not compile.
///
/// ```
/// use tensorfn_runtime::{Tensor, Cpu, shape};
/// let a = Tensor::<Cpu, f32, shape![2, 3]>::ones().unwrap();
/// let b = Tensor::<Cpu, f32, shape![3, 4]>::ones().unwrap();
/// let c: Tensor<Cpu, f32, shape![2, 4]> = a.matmul(&b).unwrap();
/// assert_eq!(c.to_vec().unwrap(), vec![3.0; 8]);
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
    note = "the last dim of the left operand must be the same dim as the second-to-last (or only) dim of the right one: (K,)x(K,), (K,)x(K,N), (M,K)x(K,), (M,K)x(K,N), (B,M,K)x(B,K,N), (B,M,K)x(K,N)",
    note = "transpose an operand with `.t()`; a `Dyn` dim pairs only with `Dyn` (convert with `.into_shape()`)"
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
impl<B: Dim, M: Dim, K: Dim, N: Dim> MatMulShape<(B, K, N)> for (B, M, K) {
    type Output = (B, M, N);
}
impl<B: Dim, M: Dim, K: Dim, N: Dim> MatMulShape<(K, N)> for (B, M, K) {
    type Output = (B, M, N);
}

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

/// `l` as a `[batch, rows, cols]` view: a vector on the left is one row,
/// on the right one column.
fn batched(l: &Layout, rhs: bool) -> Result<Layout> {
    let (d, s) = (l.dims(), l.strides());
    Ok(match (d.len(), rhs) {
        (1, false) => Layout::new(vec![1, 1, d[0]], vec![0, 0, s[0]], l.offset()),
        (1, true) => Layout::new(vec![1, d[0], 1], vec![0, s[0], 0], l.offset()),
        (2, _) => Layout::new(vec![1, d[0], d[1]], vec![0, s[0], s[1]], l.offset()),
        (3, _) => l.clone(),
        (n, _) => {
            return Err(Error::shape(
                "matmul",
                "operands of 1 to 3 dims",
                format!("an operand of {n} dims"),
            ))
        }
    })
}

/// Repeats a batch of one over `batch` (stride 0).
fn expand_batch(l: Layout, batch: usize) -> Layout {
    if l.dims()[0] == batch {
        return l;
    }
    let (mut d, mut s) = (l.dims().to_vec(), l.strides().to_vec());
    d[0] = batch;
    s[0] = 0;
    Layout::new(d, s, l.offset())
}

/// `alpha * a @ b + beta * bias`, followed by a ReLU when `relu`, as a
/// contiguous buffer of the dims the caller's rule computed (a bias comes
/// only with 2-D operands).
fn product<D: Device, T: FloatDType>(
    a: &Tensor<D, T, impl Shape>,
    b: &Tensor<D, T, impl Shape>,
    bias: Option<&Tensor<D, T, impl Shape>>,
    alpha: T,
    beta: T,
    relu: bool,
) -> Result<Storage<T>> {
    let (mut la, mut lb) = (batched(&a.layout, false)?, batched(&b.layout, true)?);
    let batch = la.dims()[0].max(lb.dims()[0]);
    let (m, n) = (la.dims()[1], lb.dims()[2]);
    // A batch against one shared matrix whose rows follow each other in
    // memory is a single taller product.
    if bias.is_none() && lb.dims()[0] == 1 && batch > 1 && la.strides()[0] == la.strides()[1] * m {
        la = Layout::new(
            vec![1, batch * m, la.dims()[2]],
            vec![0, la.strides()[1], la.strides()[2]],
            la.offset(),
        );
    } else {
        la = expand_batch(la, batch);
        lb = expand_batch(lb, batch);
    }
    let dense = [la.dims()[0], la.dims()[1], n];
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
        let bias = bias.zip(lc.as_ref()).map(|(c, l)| (be.buf(&c.storage), l));
        be.wrap(if relu {
            be.matmul_relu(a, &la, b, &lb, bias, alpha, beta)?
        } else {
            be.matmul(a, &la, b, &lb, bias, alpha, beta)?
        })
    }))
}

/// A bias argument for products that have none.
type NoBias<D, T> = Tensor<D, T, ()>;

impl<D: Device, T: FloatDType, S: Shape> Tensor<D, T, S> {
    /// The matrix product, like `torch.matmul` for ranks 1 to 3 (see
    /// [`MatMulShape`] for the pairs). Transposed views are multiplied in
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
        let dims = rules::matmul("matmul", ("self", self.dims()), ("other", other.dims()))?;
        let storage = product(
            self,
            other,
            None::<&NoBias<D, T>>,
            T::one(),
            T::zero(),
            false,
        )?;
        output(storage, &dims)
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
        let storage = product(
            self,
            other,
            None::<&NoBias<D, T>>,
            T::one(),
            T::zero(),
            false,
        )?;
        out.overwrite_with(storage)
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
        let storage = product(m1, m2, Some(bias), alpha, beta, false)?;
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
        let storage = product(m1, m2, Some(bias), T::one(), T::one(), false)?;
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
        let storage = product(
            self,
            other,
            None::<&NoBias<D, T>>,
            T::one(),
            T::zero(),
            false,
        )?;
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
        let storage = product(
            self,
            other,
            None::<&NoBias<D, T>>,
            T::one(),
            T::zero(),
            false,
        )?;
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
        let dims = rules::addmm(
            "addmm",
            ("bias", bias.dims()),
            ("mat1", m1.dims()),
            ("mat2", m2.dims()),
        )?;
        let storage = product(m1, m2, Some(bias), T::one(), T::one(), true)?;
        output(storage, &dims)
    }
}
