//! `batch_norm`, PyTorch's `torch.nn.functional.batch_norm(input,
//! running_mean, running_var, weight, bias, training, momentum, eps)`:
//! each channel (dim 1) of an input `[N, C]`, `[N, C, L]` or
//! `[N, C, H, W]` normalised over all its other dims.
//!
//! In training the batch statistics normalise (the mean and the biased
//! variance over `N * L` or `N * H * W` elements) and the running
//! statistics, when given, are updated the way PyTorch updates them:
//! `running = (1 - momentum) * running + momentum * batch`, the variance
//! unbiased (`m / (m - 1)`) for the running one. In inference the running
//! statistics normalise: an affine map per channel.
//!
//! Tensors are values (shared, copy on write), so the running statistics
//! are `&mut` arguments: the call replaces them with their updated values,
//! as PyTorch updates its buffers in place. [`BatchNormArgs`] holds the
//! keyword arguments.

use super::dispatch::dispatch;
use super::output::{output, output_in};
use crate::device::Device;
use crate::dtype::FloatDType;
use crate::error::{Error, Result};
use crate::shape::{Dim, Shape};
use crate::tensor::Tensor;
use tensorfn_core::rules;

const OP: &str = "batch_norm";

/// A shape with a channel dim, dim 1 (rank 2 or more): `[N, C]`,
/// `[N, C, L]`, `[N, C, H, W]`, ... The running statistics, `weight` and
/// `bias` of [`batch_norm`](Tensor::batch_norm) have it as their only
/// dim.
///
/// ```
/// use std::any::type_name;
/// use tensorfn_runtime::{shape, ChannelDim, Const};
/// fn channels<S: ChannelDim>() -> &'static str { type_name::<S::Channel>() }
/// assert!(channels::<shape![8, 64, 56, 56]>().ends_with("Const<64>"));
/// ```
///
/// A vector has none:
///
/// ```compile_fail,E0277
/// use tensorfn_runtime::{BatchNormArgs, Tensor, Cpu, shape};
/// let x = Tensor::<Cpu, f32, shape![4]>::zeros().unwrap();
/// let _ = x.batch_norm(None, None, None, None, BatchNormArgs::train());
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no channel dim (dim 1) for `batch_norm`",
    label = "an input of rank 0 or 1",
    note = "`batch_norm` takes [N, C], [N, C, L] or [N, C, H, W]: add the batch dim, e.g. `.unsqueeze::<0>()`"
)]
pub trait ChannelDim: Shape {
    /// The channel dim's type.
    type Channel: Dim;
}

macro_rules! channel_dim {
    ($($rest:ident),*) => {
        impl<N: Dim, C: Dim, $($rest: Dim,)*> ChannelDim for (N, C, $($rest,)*) {
            type Channel = C;
        }
    };
}
channel_dim!();
channel_dim!(A);
channel_dim!(A, B);
channel_dim!(A, B, E);
channel_dim!(A, B, E, F);

/// The keyword arguments of [`batch_norm`](Tensor::batch_norm), with
/// PyTorch's names and defaults (`training = false`, `momentum = 0.1`,
/// `eps = 1e-5`).
///
/// ```
/// use tensorfn_runtime::BatchNormArgs;
/// let a = BatchNormArgs::default();
/// assert_eq!((a.training, a.momentum, a.eps), (false, 0.1, 1e-5));
/// let a = BatchNormArgs { momentum: 0.01, ..BatchNormArgs::train() };
/// assert!(a.training);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchNormArgs {
    /// Normalise with the batch statistics and update the running ones
    /// (`true`), or normalise with the running statistics (`false`).
    pub training: bool,
    /// The weight of the batch statistic in a running statistic's update.
    pub momentum: f64,
    /// Added to the variance before its square root.
    pub eps: f64,
}

impl Default for BatchNormArgs {
    fn default() -> Self {
        BatchNormArgs {
            training: false,
            momentum: 0.1,
            eps: 1e-5,
        }
    }
}

impl BatchNormArgs {
    /// The defaults with `training = true`.
    ///
    /// ```
    /// use tensorfn_runtime::BatchNormArgs;
    /// assert!(BatchNormArgs::train().training);
    /// ```
    pub fn train() -> Self {
        BatchNormArgs {
            training: true,
            ..Self::default()
        }
    }

    /// The defaults (`training = false`).
    ///
    /// ```
    /// use tensorfn_runtime::BatchNormArgs;
    /// assert!(!BatchNormArgs::eval().training);
    /// ```
    pub fn eval() -> Self {
        Self::default()
    }

    fn check(&self) -> Result<()> {
        if self.eps.is_nan() || self.eps < 0.0 {
            return Err(Error::shape(
                OP,
                "`eps` zero or positive",
                format!("eps = {}", self.eps),
            ));
        }
        if !self.momentum.is_finite() {
            return Err(Error::shape(
                OP,
                "a finite `momentum`",
                format!("momentum = {}", self.momentum),
            ));
        }
        Ok(())
    }
}

/// A `[C]` operand of `batch_norm`.
type PerChannel<D, T, S> = Tensor<D, T, (<S as ChannelDim>::Channel,)>;

impl<D: Device, T: FloatDType, S: ChannelDim> Tensor<D, T, S> {
    /// PyTorch's `F.batch_norm(input, running_mean, running_var, weight,
    /// bias, training, momentum, eps)` over the channel dim (dim 1) of
    /// `[N, C, *]`: `(x - mean) / sqrt(var + eps) * weight + bias` per
    /// channel, the statistics taken over every other dim.
    ///
    /// - `training = true`: the batch's mean and biased variance normalise
    ///   (in f64 on the CPU: two passes, so large offsets do not cancel);
    ///   `running_mean` and `running_var`, when given, are replaced by
    ///   `(1 - momentum) * running + momentum * batch` (the batch variance
    ///   unbiased, `m / (m - 1)` for `m` elements per channel), as PyTorch
    ///   updates its buffers. A channel of one element (`N = 1` without
    ///   other dims) is an `Err`, as PyTorch's "Expected more than 1 value
    ///   per channel when training"; an empty batch gives an empty result
    ///   and leaves the running statistics as they are.
    /// - `training = false`: the running statistics normalise and are
    ///   left unchanged; they must be given (an `Err` otherwise).
    ///
    /// `weight` and `bias` are optional (1 and 0). Every `[C]` operand
    /// has the input's dim 1 in its type; a `Dyn` dim that differs is an
    /// `Err` naming the operand. The input may be a strided view, e.g.
    /// channels-last memory (`permute`d NHWC); a channels-last input
    /// gives a channels-last result (and `grad_input` in
    /// [`batch_norm_backward`](Self::batch_norm_backward)), any other a
    /// contiguous one, as PyTorch's `suggest_memory_format`.
    ///
    /// ```
    /// use tensorfn_runtime::{BatchNormArgs, Tensor, Cpu, shape};
    /// // N = 2, C = 2, L = 2: channel 0 holds 1, 3, 5, 7; channel 1 holds 0s.
    /// let x = Tensor::<Cpu, f64, shape![2, 2, 2]>::from_vec(vec![1., 3., 0., 0., 5., 7., 0., 0.]).unwrap();
    /// let mut mean = Tensor::<Cpu, f64, shape![2]>::zeros().unwrap();
    /// let mut var = Tensor::<Cpu, f64, shape![2]>::ones().unwrap();
    /// let y = x
    ///     .batch_norm(Some(&mut mean), Some(&mut var), None, None, BatchNormArgs { eps: 0.0, ..BatchNormArgs::train() })
    ///     .unwrap();
    /// let s = 5f64.sqrt(); // the biased standard deviation of 1, 3, 5, 7
    /// assert_eq!(y.to_vec().unwrap()[..2], [-3. / s, -1. / s]);
    /// // momentum 0.1: 0.9 * 0 + 0.1 * 4, and 0.9 * 1 + 0.1 * (20 / 3)
    /// assert!((mean.to_vec().unwrap()[0] - 0.4).abs() < 1e-15);
    /// assert!((var.to_vec().unwrap()[0] - (0.9 + 2. / 3.)).abs() < 1e-15);
    /// // Inference normalises with the running statistics.
    /// let y = x.batch_norm(Some(&mut mean), Some(&mut var), None, None, BatchNormArgs::eval()).unwrap();
    /// let want = (1. - 0.4) / (0.9f64 + 2. / 3. + 1e-5).sqrt();
    /// assert!((y.to_vec().unwrap()[0] - want).abs() < 1e-12);
    /// ```
    ///
    /// Inference without running statistics is an `Err`:
    ///
    /// ```
    /// use tensorfn_runtime::{BatchNormArgs, Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 3]>::ones().unwrap();
    /// let e = x.batch_norm(None, None, None, None, BatchNormArgs::eval()).unwrap_err();
    /// assert!(e.to_string().contains("running_mean"), "{e}");
    /// ```
    pub fn batch_norm(
        &self,
        running_mean: Option<&mut PerChannel<D, T, S>>,
        running_var: Option<&mut PerChannel<D, T, S>>,
        weight: Option<&PerChannel<D, T, S>>,
        bias: Option<&PerChannel<D, T, S>>,
        args: BatchNormArgs,
    ) -> Result<Self> {
        args.check()?;
        let dims = self.batch_norm_dims(
            running_mean.as_deref(),
            running_var.as_deref(),
            weight,
            bias,
            args.training,
        )?;
        let running = match (running_mean, running_var) {
            (Some(m), Some(v)) => Some((m, v)),
            _ => None,
        };
        let (out, updated) = dispatch!(D, |be| {
            let (out, updated) = be.batch_norm(
                (be.buf(&self.storage), &self.layout),
                weight.map(|w| (be.buf(&w.storage), &w.layout)),
                bias.map(|b| (be.buf(&b.storage), &b.layout)),
                running.as_ref().map(|(m, v)| {
                    (
                        (be.buf(&m.storage), &m.layout),
                        (be.buf(&v.storage), &v.layout),
                    )
                }),
                args.training,
                args.momentum,
                args.eps,
            )?;
            (be.wrap(out), updated.map(|(m, v)| (be.wrap(m), be.wrap(v))))
        });
        if let (Some((m, v)), Some((rm, rv))) = (updated, running) {
            let c = [dims[1]];
            *rm = output(m, &c)?;
            *rv = output(v, &c)?;
        }
        // The backend writes a channels-last input's result channels-last.
        output_in(out, self.layout.result_like(&dims))
    }

    /// The gradients of [`batch_norm`](Self::batch_norm) for the output's
    /// gradient `grad_output`: `(grad_input, grad_weight, grad_bias)`, as
    /// PyTorch's autograd gives them (`grad_weight` and `grad_bias` of
    /// `[C]` whether or not the forward had a weight or a bias; a missing
    /// weight is 1). In training (`training = true`) the batch statistics
    /// are recomputed from `self`, and `grad_input` is
    /// `weight * invstd * (g - mean(g) - xhat * mean(g * xhat))` per
    /// channel; in inference the running statistics (given) are constants
    /// and `grad_input = g * weight * invstd`. `momentum` plays no part.
    ///
    /// ```
    /// use tensorfn_runtime::{BatchNormArgs, Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f64, shape![4, 1]>::from_vec(vec![1., 3., 5., 7.]).unwrap();
    /// let w = Tensor::<Cpu, f64, shape![1]>::from_vec(vec![2.]).unwrap();
    /// let g = Tensor::<Cpu, f64, shape![4, 1]>::ones().unwrap();
    /// let args = BatchNormArgs { eps: 0.0, ..BatchNormArgs::train() };
    /// let (dx, dw, db) = x.batch_norm_backward(None, None, Some(&w), &g, args).unwrap();
    /// // A constant gradient does not move a normalised output.
    /// assert!(dx.to_vec().unwrap().iter().all(|v| v.abs() < 1e-15));
    /// assert_eq!(db.to_vec().unwrap(), [4.]);
    /// assert!(dw.to_vec().unwrap()[0].abs() < 1e-15);
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn batch_norm_backward(
        &self,
        running_mean: Option<&PerChannel<D, T, S>>,
        running_var: Option<&PerChannel<D, T, S>>,
        weight: Option<&PerChannel<D, T, S>>,
        grad_output: &Self,
        args: BatchNormArgs,
    ) -> Result<(Self, PerChannel<D, T, S>, PerChannel<D, T, S>)> {
        args.check()?;
        let dims = self.batch_norm_dims(running_mean, running_var, weight, None, args.training)?;
        if grad_output.dims() != self.dims() {
            return Err(Error::shape(
                "batch_norm_backward",
                format!("`grad_output` of the input's dims {:?}", self.dims()),
                format!("{:?}", grad_output.dims()),
            ));
        }
        let running = running_mean.zip(running_var);
        let (dx, dw, db) = dispatch!(D, |be| {
            let (dx, dw, db) = be.batch_norm_backward(
                (be.buf(&self.storage), &self.layout),
                weight.map(|w| (be.buf(&w.storage), &w.layout)),
                running.map(|(m, v)| {
                    (
                        (be.buf(&m.storage), &m.layout),
                        (be.buf(&v.storage), &v.layout),
                    )
                }),
                (be.buf(&grad_output.storage), &grad_output.layout),
                args.training,
                args.eps,
            )?;
            (be.wrap(dx), be.wrap(dw), be.wrap(db))
        });
        let c = [dims[1]];
        let dx = output_in(dx, self.layout.result_like(&dims))?;
        Ok((dx, output(dw, &c)?, output(db, &c)?))
    }

    /// The checks shared by the forward and the backward: the `[C]`
    /// operands' dims, the running statistics both or neither, present in
    /// inference, and more than one element per channel in training.
    fn batch_norm_dims(
        &self,
        running_mean: Option<&PerChannel<D, T, S>>,
        running_var: Option<&PerChannel<D, T, S>>,
        weight: Option<&PerChannel<D, T, S>>,
        bias: Option<&PerChannel<D, T, S>>,
        training: bool,
    ) -> Result<Vec<usize>> {
        let mut params = Vec::new();
        for (name, t) in [
            ("running_mean", running_mean),
            ("running_var", running_var),
            ("weight", weight),
            ("bias", bias),
        ] {
            if let Some(t) = t {
                params.push((name, t.dims()));
            }
        }
        let dims = rules::batch_norm(OP, ("input", self.dims()), &params)?;
        if running_mean.is_some() != running_var.is_some() {
            return Err(Error::shape(
                OP,
                "`running_mean` and `running_var` both given or both `None`",
                "only one of them",
            ));
        }
        if !training && running_mean.is_none() {
            return Err(Error::shape(
                OP,
                "`running_mean` and `running_var` in inference (`training = false`)",
                "`None`: pass the running statistics, or `training = true` to normalise with the batch's",
            ));
        }
        let per_channel = dims[0] * dims[2..].iter().product::<usize>();
        if training && per_channel == 1 {
            return Err(Error::shape(
                OP,
                "more than 1 value per channel when training",
                format!("input of dims {dims:?}"),
            ));
        }
        Ok(dims)
    }
}
