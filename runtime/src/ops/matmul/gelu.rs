//! GELU (tanh form) around a linear layer's products in a training step:
//! the forward's `gelu(bias + x @ w)` with the pre-activation kept for the
//! backward, and the backward's `(g @ wᵀ) * gelu'(pre)`, with its column
//! sums (the bias gradient) where they are wanted. On the GPU each is one
//! cuBLASLt call (`GELU_AUX_BIAS`, `DGELU`, `DGELU_BGRAD`) where cuBLASLt
//! takes the product; elsewhere (the CPU, f64, rows not a multiple of 8
//! elements, layouts it declines) the parts run one after the other,
//! with the same results up to rounding.

use super::{fused_epilogue, plain_product, product, BiasFor, WithSums};
use crate::cpu::blocks::Lanes;
use crate::device::Device;
use crate::dtype::FloatDType;
use crate::error::Result;
use crate::ops::dispatch::ProductExtra;
use crate::ops::fused::fused2;
use crate::ops::output::output;
use crate::ops::select::{kernel, Which};
use crate::shape::{Dim, Shape};
use crate::tensor::Tensor;
use tensorfn_core::rules;
use tensorfn_kernels::{BinaryOp, DTypeKind, FusedKernel, UnaryOp};

/// `sqrt(2 / pi)` and the cubic coefficient of the tanh form, the
/// constants cuBLASLt's GELU epilogues and `Tensor::gelu` share.
const C: f64 = 0.797_884_560_802_865_4;
const K: f64 = 0.044715;

/// GELU's derivative (tanh form) at `x`, in f64: with `u = C (x + K x³)`
/// and `t = tanh(u)`, `0.5 (1 + t) + 0.5 x (1 - t²) C (1 + 3 K x²)`,
/// the same expression `#[grad]` differentiates `gelu` into.
pub(crate) fn gelu_derivative(x: f64) -> f64 {
    let t = (C * (x + K * x * x * x)).tanh();
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * (C + 3.0 * K * C * x * x)
}

/// The GPU kernel of `g * gelu'(x)` for dtype `t`, computed in f32 (f64
/// for f64) and rounded once.
fn backward_kernel(t: DTypeKind) -> Result<&'static FusedKernel> {
    kernel(Which::GeluBackward, t, |b| {
        let c = if t == DTypeKind::F64 {
            t
        } else {
            DTypeKind::F32
        };
        let (g, x) = (b.input(t), b.input(t));
        let (g, x) = (b.cast(g, c), b.cast(x, c));
        let lit = |b: &mut tensorfn_kernels::ir::ElementwiseBuilder, v: f64| b.constant(v, c);
        let (half, one) = (lit(b, 0.5), lit(b, 1.0));
        let (kk, cc, kc3) = (lit(b, K), lit(b, C), lit(b, 3.0 * K * C));
        let xx = b.binary(BinaryOp::Mul, x, x);
        let x3 = b.binary(BinaryOp::Mul, xx, x);
        let kx3 = b.binary(BinaryOp::Mul, x3, kk);
        let inner = b.binary(BinaryOp::Add, x, kx3);
        let u = b.binary(BinaryOp::Mul, inner, cc);
        let th = b.unary(UnaryOp::Tanh, u);
        let a = b.binary(BinaryOp::Add, one, th);
        let a = b.binary(BinaryOp::Mul, a, half);
        let tt = b.binary(BinaryOp::Mul, th, th);
        let sech2 = b.binary(BinaryOp::Sub, one, tt);
        let du = b.binary(BinaryOp::Mul, xx, kc3);
        let du = b.binary(BinaryOp::Add, du, cc);
        let hx = b.binary(BinaryOp::Mul, x, half);
        let r = b.binary(BinaryOp::Mul, hx, sech2);
        let r = b.binary(BinaryOp::Mul, r, du);
        let d = b.binary(BinaryOp::Add, a, r);
        let out = b.binary(BinaryOp::Mul, g, d);
        b.cast(out, t)
    })
}

impl<D: Device, T: FloatDType, S: Shape> Tensor<D, T, S> {
    /// GELU's backward (tanh form): `self * gelu'(pre)`, the gradient of
    /// `gelu(pre)` given the gradient `self` of its result, in one pass
    /// (computed in f32 for 16-bit floats). `pre` has `self`'s dims.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let g = Tensor::<Cpu, f64, shape![3]>::from_vec(vec![1., 1., 2.]).unwrap();
    /// let pre = Tensor::<Cpu, f64, shape![3]>::from_vec(vec![0., 10., -10.]).unwrap();
    /// let d = g.gelu_backward(&pre).unwrap().to_vec().unwrap();
    /// assert_eq!(d[0], 0.5); // gelu'(0) = 1/2
    /// assert!((d[1] - 1.0).abs() < 1e-12 && d[2].abs() < 1e-12);
    /// assert!(g.gelu_backward(&Tensor::<Cpu, f64, shape![3]>::zeros().unwrap()).is_ok());
    /// ```
    pub fn gelu_backward(&self, pre: &Self) -> Result<Self> {
        rules::same_shape("gelu_backward", ("self", self.dims()), ("pre", pre.dims()))?;
        let k = backward_kernel(T::KIND)?;
        fused2(self, pre, self.dims(), k, |_: &mut Lanes, g: T, x: T| {
            T::from_f64(g.to_f64() * gelu_derivative(x.to_f64()))
        })
    }
}

/// GELU's backward through a product, and its column sums where the
/// product's epilogue wrote them.
type MaybeSums<D, T, M, N> = (Tensor<D, T, (M, N)>, Option<Tensor<D, T, (N,)>>);

impl<D: Device, T: FloatDType, M: Dim, N: Dim> Tensor<D, T, (M, N)> {
    /// `(gelu(bias + m1 @ m2), bias + m1 @ m2)`: a linear layer's GELU
    /// (tanh form) and its pre-activation, which the backward reads. On
    /// the GPU with a bias of shape `(N,)` both are written by one
    /// cuBLASLt product (`GELU_AUX_BIAS`, GELU applied to the f32
    /// accumulator); elsewhere `addmm` then `gelu`. `tensor_fn!` plans a
    /// joint graph's `gelu(addmm(..))` whose backward reads the
    /// pre-activation into it.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let b = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![-10., 1.]).unwrap();
    /// let x = Tensor::<Cpu, f32, shape![1, 2]>::from_vec(vec![1., 2.]).unwrap();
    /// let w = Tensor::<Cpu, f32, shape![2, 2]>::from_vec(vec![1., 0., 0., 1.]).unwrap();
    /// let (y, pre) = Tensor::addmm_gelu_aux(&b, &x, &w).unwrap();
    /// assert_eq!(pre.to_vec().unwrap(), vec![-9., 3.]);
    /// assert_eq!(y.to_vec().unwrap(), pre.gelu().unwrap().to_vec().unwrap());
    /// ```
    #[doc(hidden)]
    pub fn addmm_gelu_aux<K: Dim>(
        bias: &Tensor<D, T, impl BiasFor<(M, N)>>,
        m1: &Tensor<D, T, (M, K)>,
        m2: &Tensor<D, T, (K, N)>,
    ) -> Result<(Self, Self)> {
        let dims = rules::addmm(
            "addmm",
            ("bias", bias.dims()),
            ("mat1", m1.dims()),
            ("mat2", m2.dims()),
        )?;
        let extra = ProductExtra::GeluAux {
            bias: (&*bias.storage, &bias.layout),
        };
        let fused = fused_epilogue(m1, m2, extra)?;
        if let Some((act, Some(pre))) = fused {
            return Ok((output(act, &dims)?, output(pre, &dims)?));
        }
        let pre: Self = output(
            product(m1, m2, Some(bias), T::one(), T::one(), None)?,
            &dims,
        )?;
        Ok((pre.gelu()?, pre))
    }

    /// `(a @ b) * gelu'(pre)`: the gradient of a linear layer's GELU
    /// input, from the gradient `a` of the next layer's input, its weight
    /// `b` (transposed) and the saved pre-activation. On the GPU one
    /// cuBLASLt product (`DGELU`) reading `pre` as its aux matrix, where
    /// cuBLASLt takes it; elsewhere the product then
    /// [`gelu_backward`](Tensor::gelu_backward).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let g = Tensor::<Cpu, f64, shape![1, 2]>::from_vec(vec![1., 2.]).unwrap();
    /// let w = Tensor::<Cpu, f64, shape![2, 2]>::from_vec(vec![1., 0., 0., 1.]).unwrap();
    /// let pre = Tensor::<Cpu, f64, shape![1, 2]>::from_vec(vec![0., 0.]).unwrap();
    /// let d = Tensor::matmul_dgelu(&g, &w, &pre).unwrap();
    /// assert_eq!(d.to_vec().unwrap(), vec![0.5, 1.0]);
    /// ```
    #[doc(hidden)]
    pub fn matmul_dgelu<K: Dim>(
        a: &Tensor<D, T, (M, K)>,
        b: &Tensor<D, T, (K, N)>,
        pre: &Self,
    ) -> Result<Self> {
        Ok(Self::dgelu_product(a, b, pre, false)?.0)
    }

    /// [`matmul_dgelu`](Self::matmul_dgelu) and the column sums of its
    /// result: the gradient of a linear layer's GELU input and its bias
    /// gradient. On the GPU one cuBLASLt product (`DGELU_BGRAD`) where
    /// cuBLASLt takes it; elsewhere the parts and a column sum.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let g = Tensor::<Cpu, f64, shape![2, 1]>::from_vec(vec![1., 2.]).unwrap();
    /// let w = Tensor::<Cpu, f64, shape![1, 1]>::from_vec(vec![1.]).unwrap();
    /// let pre = Tensor::<Cpu, f64, shape![2, 1]>::from_vec(vec![0., 0.]).unwrap();
    /// let (d, db) = Tensor::matmul_dgelu_sum(&g, &w, &pre).unwrap();
    /// assert_eq!(d.to_vec().unwrap(), vec![0.5, 1.0]);
    /// assert_eq!(db.to_vec().unwrap(), vec![1.5]);
    /// ```
    #[doc(hidden)]
    pub fn matmul_dgelu_sum<K: Dim>(
        a: &Tensor<D, T, (M, K)>,
        b: &Tensor<D, T, (K, N)>,
        pre: &Self,
    ) -> Result<WithSums<D, T, M, N, N>> {
        let (d, sums) = Self::dgelu_product(a, b, pre, true)?;
        let sums = match sums {
            Some(s) => s,
            None => d.sum::<0>()?,
        };
        Ok((d, sums))
    }

    /// `(a @ b) * gelu'(pre)`, and its column sums when `sums` and the
    /// GPU wrote them in the same call.
    fn dgelu_product<K: Dim>(
        a: &Tensor<D, T, (M, K)>,
        b: &Tensor<D, T, (K, N)>,
        pre: &Self,
        sums: bool,
    ) -> Result<MaybeSums<D, T, M, N>> {
        let dims = rules::matmul("matmul", ("mat1", a.dims()), ("mat2", b.dims()))?;
        rules::same_shape("matmul_dgelu", ("result", &dims[..]), ("pre", pre.dims()))?;
        let extra = ProductExtra::DGelu {
            pre: (&*pre.storage, &pre.layout),
            sums,
        };
        let fused = fused_epilogue(a, b, extra)?;
        if let Some((d, s)) = fused {
            let s = s.map(|s| output(s, &dims[1..])).transpose()?;
            return Ok((output(d, &dims)?, s));
        }
        let g: Self = output(plain_product(a, b)?, &dims)?;
        Ok((g.gelu_backward(pre)?, None))
    }
}

#[cfg(test)]
#[path = "gelu_tests.rs"]
pub(crate) mod tests;
