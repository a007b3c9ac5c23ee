//! Normalisations over the last dim: `layer_norm` and `rms_norm`, each
//! one fused row kernel on the CPU and on CUDA.

use super::dispatch::dispatch;
use super::output::output;
use crate::device::Device;
use crate::dtype::FloatDType;
use crate::error::{Error, Result};
use crate::shape::{Dim, Shape};
use crate::tensor::Tensor;
use tensorfn_core::rules;
use tensorfn_kernels::NormOp;

/// A shape with a last dim (rank 1 or more): the dim `layer_norm` and
/// `rms_norm` normalise over, which their `weight` and `bias` have as
/// their only dim.
///
/// ```
/// use std::any::type_name;
/// use tensorfn_runtime::{shape, Const, LastDim};
/// fn last<S: LastDim>() -> &'static str { type_name::<S::Last>() }
/// assert!(last::<shape![4, 768]>().ends_with("Const<768>"));
/// ```
///
/// A scalar has none:
///
/// ```compile_fail,E0277
/// use tensorfn_runtime::{Tensor, Cpu, shape};
/// let x = Tensor::<Cpu, f32, shape![]>::zeros().unwrap();
/// let w = Tensor::<Cpu, f32, shape![1]>::ones().unwrap();
/// let _ = x.rms_norm(&w, None);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no last dim to normalise over",
    label = "a scalar (rank 0) tensor",
    note = "give it a dim first, e.g. `.reshape::<shape![1]>()`"
)]
pub trait LastDim: Shape {
    /// The last dim's type.
    type Last: Dim;
}

macro_rules! last_dim {
    ($($all:ident),* ; $last:ident) => {
        impl<$($all: Dim,)* $last: Dim> LastDim for ($($all,)* $last,) {
            type Last = $last;
        }
    };
}
last_dim!(; A);
last_dim!(A; B);
last_dim!(A, B; C);
last_dim!(A, B, C; E);
last_dim!(A, B, C, E; F);
last_dim!(A, B, C, E, F; G);

impl<D: Device, T: FloatDType, S: LastDim> Tensor<D, T, S> {
    /// `(x - mean) / sqrt(var + eps) * weight + bias` over the last dim,
    /// PyTorch's `F.layer_norm(x, (N,), weight, bias, eps)` (its default
    /// `eps` is `1e-5`): the mean and the biased variance of each row,
    /// accumulated in f32 for f16/bf16 (f64 for f64), one fused pass over
    /// the row. `weight` and `bias` have the input's last dim; a `Dyn` dim
    /// that differs is an `Err` naming the operand.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 2]>::from_vec(vec![1., 3., 10., 10.]).unwrap();
    /// let w = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![1., 2.]).unwrap();
    /// let b = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![0., 1.]).unwrap();
    /// let y = x.layer_norm(&w, &b, 1e-5).unwrap().to_vec().unwrap();
    /// let want = [-1., 3., 0., 1.]; // a constant row gives `bias`
    /// assert!(y.iter().zip(want).all(|(y, w)| (y - w).abs() < 1e-4), "{y:?}");
    /// ```
    pub fn layer_norm(
        &self,
        weight: &Tensor<D, T, (S::Last,)>,
        bias: &Tensor<D, T, (S::Last,)>,
        eps: f64,
    ) -> Result<Self> {
        self.norm(NormOp::LayerNorm, weight, Some(bias), eps)
    }

    /// `x / sqrt(mean(x^2) + eps) * weight` over the last dim, PyTorch's
    /// `F.rms_norm(x, (N,), weight, eps)`: `eps = None` takes the machine
    /// epsilon of the precision the mean is computed in, as PyTorch does
    /// ([`NormOp::default_eps`]); Llama passes `Some(1e-5)` or
    /// `Some(1e-6)`. Accumulated in f32 for f16/bf16 (f64 for f64), one
    /// fused pass over the row.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f64, shape![1, 2]>::from_vec(vec![3., 4.]).unwrap();
    /// let w = Tensor::<Cpu, f64, shape![2]>::from_vec(vec![1., 2.]).unwrap();
    /// let y = x.rms_norm(&w, Some(0.0)).unwrap().to_vec().unwrap();
    /// let r = 12.5f64.sqrt();
    /// assert!((y[0] - 3. / r).abs() < 1e-15 && (y[1] - 8. / r).abs() < 1e-15);
    /// ```
    pub fn rms_norm(&self, weight: &Tensor<D, T, (S::Last,)>, eps: Option<f64>) -> Result<Self> {
        let eps = eps.unwrap_or(NormOp::RmsNorm.default_eps(T::KIND));
        self.norm(NormOp::RmsNorm, weight, None, eps)
    }

    /// The gradients of [`layer_norm`](Self::layer_norm) for the output's
    /// gradient `grad_output`: `(dx, dweight, dbias)`, as PyTorch's
    /// autograd gives them for `F.layer_norm(x, (N,), weight, bias, eps)`
    /// (the bias does not enter them, so it is not an argument). Each row's
    /// mean and inverse deviation are recomputed from `x` inside the
    /// kernel, in f32 for f16/bf16 (f64 for f64), rather than saved by the
    /// forward: a row is read once either way and the statistics cost a
    /// few operations per element on data already in registers, while
    /// saving them would make the forward write two more tensors and every
    /// caller carry them. `dx` is one pass per row; `dweight` and `dbias`
    /// are column sums over the rows, added per group of rows and then
    /// group by group in order, so they are the same from run to run.
    /// `grad_output` has the input's dims; a `Dyn` dim that differs is an
    /// `Err` naming it.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f64, shape![2, 2]>::from_vec(vec![1., 3., 0., 4.]).unwrap();
    /// let w = Tensor::<Cpu, f64, shape![2]>::from_vec(vec![1., 2.]).unwrap();
    /// let dy = Tensor::<Cpu, f64, shape![2, 2]>::from_vec(vec![1., 0., 1., 1.]).unwrap();
    /// let (dx, dw, db) = x.layer_norm_backward(&w, &dy, 0.0).unwrap();
    /// // Rows of two normalise to -1, 1 whatever their values (eps = 0),
    /// // so their `dx` is 0.
    /// assert_eq!(db.to_vec().unwrap(), [2., 1.]);
    /// assert_eq!(dw.to_vec().unwrap(), [-2., 1.]);
    /// assert_eq!(dx.to_vec().unwrap()[2..], [0., 0.]);
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn layer_norm_backward(
        &self,
        weight: &Tensor<D, T, (S::Last,)>,
        grad_output: &Self,
        eps: f64,
    ) -> Result<(Self, Tensor<D, T, (S::Last,)>, Tensor<D, T, (S::Last,)>)> {
        let (dx, dw, db) = self.norm_backward(NormOp::LayerNorm, weight, grad_output, eps)?;
        let db =
            db.ok_or_else(|| Error::shape("layer_norm_backward", "a bias gradient", "none"))?;
        Ok((dx, dw, db))
    }

    /// The gradients of [`rms_norm`](Self::rms_norm) for the output's
    /// gradient `grad_output`: `(dx, dweight)`, as PyTorch's autograd
    /// gives them for `F.rms_norm(x, (N,), weight, eps)`, with the same
    /// `eps = None` rule as the forward ([`NormOp::default_eps`]). Each
    /// row's inverse root mean square is recomputed from `x` inside the
    /// kernel (see [`layer_norm_backward`](Self::layer_norm_backward) for
    /// why nothing is saved); `dweight` is a deterministic column sum.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f64, shape![1, 2]>::from_vec(vec![3., 4.]).unwrap();
    /// let w = Tensor::<Cpu, f64, shape![2]>::from_vec(vec![1., 1.]).unwrap();
    /// let dy = Tensor::<Cpu, f64, shape![1, 2]>::from_vec(vec![1., 1.]).unwrap();
    /// let (dx, dw) = x.rms_norm_backward(&w, &dy, Some(0.0)).unwrap();
    /// let r = 12.5f64.sqrt(); // the row's root mean square
    /// let dw = dw.to_vec().unwrap();
    /// assert!((dw[0] - 3. / r).abs() < 1e-15 && (dw[1] - 4. / r).abs() < 1e-15);
    /// // d/dx0 of (x0 + x1) / r: (1 - x0 * (x0 + x1) / (2 r^2)) / r
    /// let want = (1. - 3. * 7. / 25.) / r;
    /// assert!((dx.to_vec().unwrap()[0] - want).abs() < 1e-15);
    /// ```
    ///
    /// A `grad_output` whose `Dyn` dims differ from the input's is an
    /// `Err` naming it:
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![_, 2]>::from_vec_dims(vec![1.; 6], &[3, 2]).unwrap();
    /// let w = Tensor::<Cpu, f32, shape![2]>::ones().unwrap();
    /// let dy = Tensor::<Cpu, f32, shape![_, 2]>::from_vec_dims(vec![1.; 4], &[2, 2]).unwrap();
    /// let e = x.rms_norm_backward(&w, &dy, None).unwrap_err();
    /// assert!(e.to_string().contains("grad_output"), "{e}");
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn rms_norm_backward(
        &self,
        weight: &Tensor<D, T, (S::Last,)>,
        grad_output: &Self,
        eps: Option<f64>,
    ) -> Result<(Self, Tensor<D, T, (S::Last,)>)> {
        let eps = eps.unwrap_or(NormOp::RmsNorm.default_eps(T::KIND));
        let (dx, dw, _) = self.norm_backward(NormOp::RmsNorm, weight, grad_output, eps)?;
        Ok((dx, dw))
    }

    #[allow(clippy::type_complexity)]
    fn norm_backward(
        &self,
        op: NormOp,
        weight: &Tensor<D, T, (S::Last,)>,
        grad_output: &Self,
        eps: f64,
    ) -> Result<(
        Self,
        Tensor<D, T, (S::Last,)>,
        Option<Tensor<D, T, (S::Last,)>>,
    )> {
        let name = match op {
            NormOp::LayerNorm => "layer_norm_backward",
            NormOp::RmsNorm => "rms_norm_backward",
        };
        let dims = rules::norm(name, ("input", self.dims()), &[("weight", weight.dims())])?;
        if grad_output.dims() != self.dims() {
            return Err(Error::shape(
                name,
                format!("`grad_output` of the input's dims {:?}", self.dims()),
                format!("{:?}", grad_output.dims()),
            ));
        }
        if eps.is_nan() || eps < 0.0 {
            return Err(Error::shape(
                name,
                "`eps` zero or positive",
                format!("eps = {eps}"),
            ));
        }
        let last = [dims[dims.len() - 1]];
        let (dx, dw, db) = dispatch!(D, |be| {
            let (dx, dw, db) = be.norm_backward(
                op,
                (be.buf(&self.storage), &self.layout),
                (be.buf(&weight.storage), &weight.layout),
                (be.buf(&grad_output.storage), &grad_output.layout),
                eps,
            )?;
            (be.wrap(dx), be.wrap(dw), db.map(|db| be.wrap(db)))
        });
        Ok((
            output(dx, &dims)?,
            output(dw, &last)?,
            db.map(|db| output(db, &last)).transpose()?,
        ))
    }

    fn norm(
        &self,
        op: NormOp,
        weight: &Tensor<D, T, (S::Last,)>,
        bias: Option<&Tensor<D, T, (S::Last,)>>,
        eps: f64,
    ) -> Result<Self> {
        let mut params = vec![("weight", weight.dims())];
        params.extend(bias.map(|b| ("bias", b.dims())));
        let dims = rules::norm(op.name(), ("input", self.dims()), &params)?;
        if eps.is_nan() || eps < 0.0 {
            return Err(Error::shape(
                op.name(),
                "`eps` zero or positive",
                format!("eps = {eps}"),
            ));
        }
        let storage = dispatch!(D, |be| be.wrap(be.norm(
            op,
            (be.buf(&self.storage), &self.layout),
            (be.buf(&weight.storage), &weight.layout),
            bias.map(|b| (be.buf(&b.storage), &b.layout)),
            eps,
        )?));
        output(storage, &dims)
    }
}
