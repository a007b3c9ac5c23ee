//! [`BatchNorm`]: PyTorch's `nn.BatchNorm1d`/`BatchNorm2d` as a parameter
//! struct, with its running statistics as buffers that a forward through
//! `&self` updates.

use super::{join, AnyTensor, Loader, Params};
use crate::device::{Cpu, Device};
use crate::dtype::FloatDType;
use crate::error::{Error, Result};
use crate::ops::{BatchNormArgs, ChannelDim};
use crate::shape::Dim;
use crate::tensor::Tensor;
use std::sync::{PoisonError, RwLock};

/// The running statistics of a [`BatchNorm`], PyTorch's buffers of that
/// name.
#[derive(Clone, Debug)]
pub struct RunningStats<D: Device, T: FloatDType, C: Dim> {
    /// The running mean per channel.
    pub running_mean: Tensor<D, T, (C,)>,
    /// The running (unbiased) variance per channel.
    pub running_var: Tensor<D, T, (C,)>,
    /// The number of training forwards that updated them.
    pub num_batches_tracked: i64,
}

/// PyTorch's `nn.BatchNorm1d` / `nn.BatchNorm2d` (`affine = True`,
/// `track_running_stats = True`): `weight` and `bias` of `[C]` are
/// parameters, and `running_mean`, `running_var` and
/// `num_batches_tracked` are buffers.
///
/// As a [`Params`] field it is saved and loaded under PyTorch's names
/// (`bn1.weight`, `bn1.bias`, `bn1.running_mean`, `bn1.running_var`,
/// `bn1.num_batches_tracked`, the last an `i64` scalar), so torchvision's
/// checkpoints load as they are; gradients and optimizers see only
/// `weight` and `bias` ([`Params::tensors`] lists no buffer), as PyTorch's
/// `parameters()`.
///
/// The buffers sit behind a lock, so a training [`forward`](Self::forward)
/// updates them through `&self`, the way a model's parameters arrive
/// (`&Params`): each training forward takes the lock for its whole
/// update, so concurrent forwards update one after the other and none is
/// lost. `momentum = None` is PyTorch's cumulative average
/// (`1 / num_batches_tracked` as the factor).
///
/// ```
/// use tensorfn_runtime::{params::BatchNorm, Cpu, Params, Tensor, shape};
/// let bn = BatchNorm::<Cpu, f32, tensorfn_runtime::Const<2>>::new().unwrap();
/// let x = Tensor::<Cpu, f32, shape![2, 2, 1, 1]>::from_vec(vec![1., 10., 3., 10.]).unwrap();
/// let y = bn.forward(&x, true).unwrap().to_vec().unwrap();
/// assert!((y[0] + 1.0).abs() < 1e-4 && (y[2] - 1.0).abs() < 1e-4 && y[1] == 0.0);
/// let s = bn.stats();
/// assert_eq!(s.num_batches_tracked, 1);
/// assert_eq!(s.running_mean.to_vec().unwrap(), [0.2, 1.0]); // 0.1 * the batch mean
/// let names: Vec<String> = bn.tensors().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["weight", "bias"]);
/// ```
#[derive(Debug)]
pub struct BatchNorm<D: Device, T: FloatDType, C: Dim> {
    /// The scale per channel (`gamma`), initially 1.
    pub weight: Tensor<D, T, (C,)>,
    /// The shift per channel (`beta`), initially 0.
    pub bias: Tensor<D, T, (C,)>,
    stats: RwLock<RunningStats<D, T, C>>,
    /// The weight of a batch statistic in a running statistic's update
    /// (PyTorch's default `Some(0.1)`); `None`: the cumulative average.
    pub momentum: Option<f64>,
    /// Added to the variance before its square root (default `1e-5`).
    pub eps: f64,
}

impl<D: Device, T: FloatDType, C: Dim> Clone for BatchNorm<D, T, C> {
    fn clone(&self) -> Self {
        BatchNorm {
            weight: self.weight.clone(),
            bias: self.bias.clone(),
            stats: RwLock::new(self.stats()),
            momentum: self.momentum,
            eps: self.eps,
        }
    }
}

impl<D: Device, T: FloatDType, C: Dim> BatchNorm<D, T, C> {
    /// PyTorch's initial state for a static channel count: weight 1,
    /// bias 0, running mean 0, running variance 1, no batch tracked,
    /// `momentum = Some(0.1)`, `eps = 1e-5`.
    ///
    /// ```
    /// use tensorfn_runtime::{params::BatchNorm, Cpu, Const};
    /// let bn = BatchNorm::<Cpu, f64, Const<3>>::new().unwrap();
    /// assert_eq!(bn.stats().running_var.to_vec().unwrap(), [1.0; 3]);
    /// ```
    pub fn new() -> Result<Self> {
        let c = C::STATIC.ok_or_else(|| {
            Error::shape(
                "BatchNorm::new",
                "a static channel count",
                "a `Dyn` one: use `BatchNorm::with_channels(c)`",
            )
        })?;
        Self::with_channels(c)
    }

    /// [`new`](Self::new) with the channel count given at run time.
    ///
    /// ```
    /// use tensorfn_runtime::{params::BatchNorm, Cpu, Dyn};
    /// let bn = BatchNorm::<Cpu, f32, Dyn>::with_channels(4).unwrap();
    /// assert_eq!(bn.weight.dims(), &[4]);
    /// ```
    pub fn with_channels(c: usize) -> Result<Self> {
        Ok(BatchNorm {
            weight: Tensor::ones_dims(&[c])?,
            bias: Tensor::zeros_dims(&[c])?,
            stats: RwLock::new(RunningStats {
                running_mean: Tensor::zeros_dims(&[c])?,
                running_var: Tensor::ones_dims(&[c])?,
                num_batches_tracked: 0,
            }),
            momentum: Some(0.1),
            eps: 1e-5,
        })
    }

    /// A snapshot of the running statistics (tensors are shared values:
    /// no copy of their elements).
    ///
    /// ```
    /// use tensorfn_runtime::{params::BatchNorm, Cpu, Const};
    /// let bn = BatchNorm::<Cpu, f32, Const<2>>::new().unwrap();
    /// assert_eq!(bn.stats().num_batches_tracked, 0);
    /// ```
    pub fn stats(&self) -> RunningStats<D, T, C> {
        self.stats
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces the running statistics.
    ///
    /// ```
    /// use tensorfn_runtime::{params::BatchNorm, Cpu, Const, Tensor};
    /// let bn = BatchNorm::<Cpu, f32, Const<1>>::new().unwrap();
    /// let mut s = bn.stats();
    /// s.running_mean = Tensor::from_vec(vec![5.0]).unwrap();
    /// bn.set_stats(s);
    /// assert_eq!(bn.stats().running_mean.to_vec().unwrap(), [5.0]);
    /// ```
    pub fn set_stats(&self, stats: RunningStats<D, T, C>) {
        *self.stats.write().unwrap_or_else(PoisonError::into_inner) = stats;
    }

    /// The module's forward, as PyTorch's `bn(x)` in `train()` mode
    /// (`training = true`: the batch statistics normalise and the running
    /// ones are updated, `num_batches_tracked` counts the call) or in
    /// `eval()` mode (the running statistics normalise). See
    /// [`Tensor::batch_norm`].
    ///
    /// ```
    /// use tensorfn_runtime::{params::BatchNorm, Cpu, Const, Tensor, shape};
    /// let mut bn = BatchNorm::<Cpu, f64, Const<1>>::new().unwrap();
    /// bn.momentum = None; // the cumulative average
    /// for batch in [[1., 3.], [5., 7.]] {
    ///     let x = Tensor::<Cpu, f64, shape![2, 1]>::from_vec(batch.to_vec()).unwrap();
    ///     bn.forward(&x, true).unwrap();
    /// }
    /// // The average of the batch means 2 and 6, and of the unbiased variances 2 and 2.
    /// let s = bn.stats();
    /// assert_eq!((s.running_mean.to_vec().unwrap()[0], s.running_var.to_vec().unwrap()[0]), (4., 2.));
    /// ```
    pub fn forward<S: ChannelDim<Channel = C>>(
        &self,
        x: &Tensor<D, T, S>,
        training: bool,
    ) -> Result<Tensor<D, T, S>> {
        let mut stats = self.stats.write().unwrap_or_else(PoisonError::into_inner);
        let momentum = match self.momentum {
            Some(m) => m,
            None if training => 1.0 / (stats.num_batches_tracked + 1) as f64,
            None => 0.0,
        };
        let args = BatchNormArgs {
            training,
            momentum,
            eps: self.eps,
        };
        let RunningStats {
            running_mean,
            running_var,
            ..
        } = &mut *stats;
        let y = x.batch_norm(
            Some(running_mean),
            Some(running_var),
            Some(&self.weight),
            Some(&self.bias),
            args,
        )?;
        if training {
            stats.num_batches_tracked += 1;
        }
        Ok(y)
    }

    /// Updates the running statistics with the batch `x`'s (momentum, the
    /// unbiased variance, `num_batches_tracked` counted) as a training
    /// [`forward`](Self::forward) does, discarding its output: the step a
    /// training loop takes beside a `tensor_fn!` that calls
    /// `batch_norm(x, running_mean, running_var, weight, bias, training =
    /// true)`. A generated function is pure (its parameters arrive as
    /// `&Params`, its tensors are values), so it normalises with the batch
    /// statistics and differentiates through them, and the buffers are
    /// updated here, outside it, with the same input.
    ///
    /// ```
    /// use tensorfn_runtime::{params::BatchNorm, Cpu, Const, Tensor, shape};
    /// let bn = BatchNorm::<Cpu, f64, Const<1>>::new().unwrap();
    /// let x = Tensor::<Cpu, f64, shape![2, 1]>::from_vec(vec![1., 3.]).unwrap();
    /// // y = my_tensor_fn(&x, &s.running_mean, &s.running_var, &bn.weight, &bn.bias)?; then:
    /// bn.update_running_stats(&x).unwrap();
    /// let s = bn.stats();
    /// // 0.9 * 0 + 0.1 * 2, and 0.9 * 1 + 0.1 * 2 (the unbiased variance of [1, 3]).
    /// assert!((s.running_mean.to_vec().unwrap()[0] - 0.2).abs() < 1e-15);
    /// assert!((s.running_var.to_vec().unwrap()[0] - 1.1).abs() < 1e-15);
    /// assert_eq!(s.num_batches_tracked, 1);
    /// ```
    pub fn update_running_stats<S: ChannelDim<Channel = C>>(
        &self,
        x: &Tensor<D, T, S>,
    ) -> Result<()> {
        self.forward(x, true).map(drop)
    }

    /// The gradients of [`forward`](Self::forward) for the output's
    /// gradient: `(grad_input, grad_weight, grad_bias)`
    /// ([`Tensor::batch_norm_backward`] with this module's statistics).
    ///
    /// ```
    /// use tensorfn_runtime::{params::BatchNorm, Cpu, Const, Tensor, shape};
    /// let bn = BatchNorm::<Cpu, f32, Const<1>>::new().unwrap();
    /// let x = Tensor::<Cpu, f32, shape![2, 1]>::from_vec(vec![1., 3.]).unwrap();
    /// let g = Tensor::<Cpu, f32, shape![2, 1]>::from_vec(vec![1., 0.]).unwrap();
    /// let (_, dw, db) = bn.backward(&x, &g, true).unwrap();
    /// assert_eq!(db.to_vec().unwrap(), [1.]);
    /// assert!((dw.to_vec().unwrap()[0] + 1.).abs() < 1e-4); // g . xhat = -1
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn backward<S: ChannelDim<Channel = C>>(
        &self,
        x: &Tensor<D, T, S>,
        grad_output: &Tensor<D, T, S>,
        training: bool,
    ) -> Result<(Tensor<D, T, S>, Tensor<D, T, (C,)>, Tensor<D, T, (C,)>)> {
        let s = self.stats();
        let args = BatchNormArgs {
            training,
            eps: self.eps,
            ..BatchNormArgs::default()
        };
        x.batch_norm_backward(
            Some(&s.running_mean),
            Some(&s.running_var),
            Some(&self.weight),
            grad_output,
            args,
        )
    }
}

impl<D: Device, T: FloatDType, C: Dim> BatchNorm<D, T, C> {
    /// The module on device `D2`, its buffers included (a clone on the
    /// same device); what `#[derive(Params)]`'s `to_device` calls for a
    /// field of this type.
    ///
    /// ```
    /// use tensorfn_runtime::{params::BatchNorm, Cpu, Const};
    /// let bn = BatchNorm::<Cpu, f32, Const<2>>::new().unwrap();
    /// assert_eq!(bn.to_device::<Cpu>().unwrap().stats().running_var.to_vec().unwrap(), [1.0; 2]);
    /// ```
    pub fn to_device<D2: Device>(&self) -> Result<BatchNorm<D2, T, C>> {
        let s = self.stats();
        Ok(BatchNorm {
            weight: self.weight.to_device()?,
            bias: self.bias.to_device()?,
            stats: RwLock::new(RunningStats {
                running_mean: s.running_mean.to_device()?,
                running_var: s.running_var.to_device()?,
                num_batches_tracked: s.num_batches_tracked,
            }),
            momentum: self.momentum,
            eps: self.eps,
        })
    }

    /// The module in dtype `T2`, its buffers included; what
    /// `#[derive(Params)]`'s `cast` calls for a field of this type.
    ///
    /// ```
    /// use tensorfn_runtime::{params::BatchNorm, Cpu, Const};
    /// let bn = BatchNorm::<Cpu, f32, Const<2>>::new().unwrap();
    /// assert_eq!(bn.cast::<f64>().unwrap().weight.to_vec().unwrap(), [1.0f64; 2]);
    /// ```
    pub fn cast<T2: FloatDType>(&self) -> Result<BatchNorm<D, T2, C>> {
        let s = self.stats();
        Ok(BatchNorm {
            weight: self.weight.cast()?,
            bias: self.bias.cast()?,
            stats: RwLock::new(RunningStats {
                running_mean: s.running_mean.cast()?,
                running_var: s.running_var.cast()?,
                num_batches_tracked: s.num_batches_tracked,
            }),
            momentum: self.momentum,
            eps: self.eps,
        })
    }
}

impl<D: Device, T: FloatDType, C: Dim> Params for BatchNorm<D, T, C> {
    fn visit_named(
        &self,
        prefix: &str,
        f: &mut dyn FnMut(&str, &dyn AnyTensor) -> Result<()>,
    ) -> Result<()> {
        let s = self.stats();
        let count = Tensor::<Cpu, i64, ()>::from_vec(vec![s.num_batches_tracked])?;
        f(&join(prefix, "weight"), &self.weight)?;
        f(&join(prefix, "bias"), &self.bias)?;
        f(&join(prefix, "running_mean"), &s.running_mean)?;
        f(&join(prefix, "running_var"), &s.running_var)?;
        f(&join(prefix, "num_batches_tracked"), &count)
    }

    fn load_named(prefix: &str, loader: &mut Loader<'_>) -> Result<Self> {
        let weight = Tensor::load_named(&join(prefix, "weight"), loader)?;
        let bias = Tensor::load_named(&join(prefix, "bias"), loader)?;
        let running_mean = Tensor::load_named(&join(prefix, "running_mean"), loader)?;
        let running_var = Tensor::load_named(&join(prefix, "running_var"), loader)?;
        let count =
            <Tensor<Cpu, i64, ()>>::load_named(&join(prefix, "num_batches_tracked"), loader)?;
        Ok(BatchNorm {
            weight,
            bias,
            stats: RwLock::new(RunningStats {
                running_mean,
                running_var,
                num_batches_tracked: count.item()?,
            }),
            momentum: Some(0.1),
            eps: 1e-5,
        })
    }

    fn zeros_like(&self) -> Result<Self> {
        let c = self.weight.dims()[0];
        let zero = || Tensor::zeros_dims(&[c]);
        Ok(BatchNorm {
            weight: zero()?,
            bias: zero()?,
            stats: RwLock::new(RunningStats {
                running_mean: zero()?,
                running_var: zero()?,
                num_batches_tracked: 0,
            }),
            momentum: self.momentum,
            eps: self.eps,
        })
    }

    fn collect_named<'a>(&'a self, prefix: &str, out: &mut Vec<(String, &'a dyn AnyTensor)>) {
        out.push((join(prefix, "weight"), &self.weight));
        out.push((join(prefix, "bias"), &self.bias));
    }

    fn collect_named_mut<'a>(
        &'a mut self,
        prefix: &str,
        out: &mut Vec<(String, &'a mut dyn AnyTensor)>,
    ) {
        out.push((join(prefix, "weight"), &mut self.weight));
        out.push((join(prefix, "bias"), &mut self.bias));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shape::{Const, Dyn};

    type Bn = BatchNorm<Cpu, f64, Const<3>>;

    #[test]
    fn running_statistics_follow_pytorchs_updates_over_several_steps() {
        for momentum in [Some(0.1), Some(0.5), None] {
            let mut bn = Bn::new().unwrap();
            bn.momentum = momentum;
            let (mut em, mut ev) = (vec![0.0; 3], vec![1.0; 3]);
            for step in 1..=4u64 {
                // [N = 2, C = 3, L = 2], channel c of step s: c * s + 0, 1, 2, 4 scaled by s.
                let vals: Vec<f64> = (0..12)
                    .map(|i| {
                        let (n, c, l) = (i / 6, (i / 2) % 3, i % 2);
                        (c as f64 + 1.0) * step as f64
                            + [0.0, 1.0, 2.0, 4.0][n * 2 + l] * step as f64
                    })
                    .collect();
                let x = Tensor::<Cpu, f64, (Dyn, Const<3>, Dyn)>::from_vec_dims(
                    vals.clone(),
                    &[2, 3, 2],
                )
                .unwrap();
                bn.forward(&x, true).unwrap();
                let f = momentum.unwrap_or(1.0 / step as f64);
                for c in 0..3 {
                    let xs: Vec<f64> = (0..12)
                        .filter(|i| (i / 2) % 3 == c)
                        .map(|i| vals[i])
                        .collect();
                    let mean = xs.iter().sum::<f64>() / 4.0;
                    let var = xs.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 3.0;
                    em[c] = (1.0 - f) * em[c] + f * mean;
                    ev[c] = (1.0 - f) * ev[c] + f * var;
                }
                let s = bn.stats();
                assert_eq!(s.num_batches_tracked, step as i64);
                for (g, e) in s.running_mean.to_vec().unwrap().iter().zip(&em) {
                    assert!(
                        (g - e).abs() < 1e-12,
                        "{momentum:?} step {step}: {g} vs {e}"
                    );
                }
                for (g, e) in s.running_var.to_vec().unwrap().iter().zip(&ev) {
                    assert!(
                        (g - e).abs() < 1e-12,
                        "{momentum:?} step {step}: {g} vs {e}"
                    );
                }
            }
            // Inference leaves them and the count alone.
            let before = bn.stats();
            let x = Tensor::<Cpu, f64, (Dyn, Const<3>)>::ones_dims(&[5, 3]).unwrap();
            bn.forward(&x, false).unwrap();
            let after = bn.stats();
            assert_eq!(after.num_batches_tracked, before.num_batches_tracked);
            assert_eq!(
                after.running_var.to_vec().unwrap(),
                before.running_var.to_vec().unwrap()
            );
        }
    }

    #[test]
    fn saved_and_loaded_under_torchvisions_names_and_invisible_to_optimizers() {
        let bn = Bn::new().unwrap();
        let x =
            Tensor::<Cpu, f64, (Const<4>, Const<3>)>::from_vec((0..12).map(f64::from).collect())
                .unwrap();
        bn.forward(&x, true).unwrap();
        let layers = vec![bn.clone(), bn];
        let mut names = Vec::new();
        layers
            .visit(&mut |n, t| {
                names.push(format!("{n} {} {:?}", t.dtype().name(), t.dims()));
                Ok(())
            })
            .unwrap();
        assert_eq!(
            &names[..5],
            [
                "0.weight f64 [3]",
                "0.bias f64 [3]",
                "0.running_mean f64 [3]",
                "0.running_var f64 [3]",
                "0.num_batches_tracked i64 []"
            ]
        );
        let trained: Vec<String> = layers.tensors().into_iter().map(|(n, _)| n).collect();
        assert_eq!(trained, ["0.weight", "0.bias", "1.weight", "1.bias"]);
        let dir = std::env::temp_dir().join(format!("tf_bn_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bn.safetensors");
        layers.save_safetensors(&path).unwrap();
        let back = Vec::<Bn>::load_safetensors(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(back.len(), 2);
        let (s, t) = (back[1].stats(), layers[1].stats());
        assert_eq!(s.num_batches_tracked, 1);
        assert_eq!(
            s.running_mean.to_vec().unwrap(),
            t.running_mean.to_vec().unwrap()
        );
        assert_eq!(
            s.running_var.to_vec().unwrap(),
            t.running_var.to_vec().unwrap()
        );
        let z = back.zeros_like().unwrap();
        assert_eq!(z[0].weight.to_vec().unwrap(), [0.0; 3]);
    }

    #[test]
    fn mismatched_inputs_are_errors_naming_the_operand() {
        let bn = BatchNorm::<Cpu, f32, Dyn>::with_channels(3).unwrap();
        let x = Tensor::<Cpu, f32, (Dyn, Dyn)>::ones_dims(&[2, 4]).unwrap();
        let e = bn.forward(&x, true).unwrap_err().to_string();
        assert!(e.contains("running_mean") && e.contains("[4]"), "{e}");
        let one = Tensor::<Cpu, f32, (Dyn, Dyn)>::ones_dims(&[1, 3]).unwrap();
        let e = bn.forward(&one, true).unwrap_err().to_string();
        assert!(e.contains("more than 1 value per channel"), "{e}");
        assert!(bn.forward(&one, false).is_ok());
        assert!(BatchNorm::<Cpu, f32, Dyn>::new().is_err());
    }
}
