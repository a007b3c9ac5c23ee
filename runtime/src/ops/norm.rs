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
