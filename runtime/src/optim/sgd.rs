//! Stochastic gradient descent with momentum, as `torch.optim.SGD`.

use super::{
    cuda_step, for_each_chunk, invalid, pair, slots, with_float, zeros, Clip, GradNorm, OptimFloat,
    Slot, Work,
};
use crate::dtype::{DType, DTypeKind};
use crate::error::Result;
use crate::params::AnyTensor;
use crate::Params;
use std::marker::PhantomData;
use std::path::Path;
use tensorfn_kernels::optim::OptimKernel;

/// The settings of [`Sgd`], with PyTorch's defaults.
///
/// ```
/// use tensorfn_runtime::optim::SgdConfig;
/// let c = SgdConfig { lr: 0.1, momentum: 0.9, nesterov: true, ..Default::default() };
/// assert_eq!((c.dampening, c.weight_decay, c.maximize), (0.0, 0.0, false));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdConfig {
    /// The learning rate (1e-3).
    pub lr: f64,
    /// The momentum factor (0: plain gradient descent, no state).
    pub momentum: f64,
    /// Dampening of the momentum: the gradient enters the buffer scaled by
    /// `1 - dampening` (0).
    pub dampening: f64,
    /// L2 penalty: `weight_decay * p` is added to the gradient (0).
    pub weight_decay: f64,
    /// Nesterov momentum; needs `momentum > 0` and `dampening == 0` (false).
    pub nesterov: bool,
    /// Maximizes the objective instead of minimizing it (false).
    pub maximize: bool,
}

impl Default for SgdConfig {
    fn default() -> Self {
        SgdConfig {
            lr: 1e-3,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
            maximize: false,
        }
    }
}

impl SgdConfig {
    /// `Err` for the values PyTorch refuses.
    fn check(&self) -> Result<()> {
        let op = "SGD";
        if self.lr.is_nan() || self.lr < 0.0 {
            return Err(invalid(
                op,
                format!("invalid learning rate `lr = {}`: use a value >= 0", self.lr),
            ));
        }
        if self.momentum.is_nan() || self.momentum < 0.0 {
            return Err(invalid(
                op,
                format!("invalid `momentum = {}`: use a value >= 0", self.momentum),
            ));
        }
        if self.weight_decay.is_nan() || self.weight_decay < 0.0 {
            return Err(invalid(
                op,
                format!(
                    "invalid `weight_decay = {}`: use a value >= 0",
                    self.weight_decay
                ),
            ));
        }
        if self.nesterov && (self.momentum <= 0.0 || self.dampening != 0.0) {
            return Err(invalid(
                op,
                format!(
                    "Nesterov momentum requires a momentum and zero dampening, found `momentum = {}`, `dampening = {}`",
                    self.momentum, self.dampening
                ),
            ));
        }
        Ok(())
    }

    fn keys(&self) -> Vec<&'static str> {
        match self.momentum != 0.0 {
            true => vec!["momentum_buffer"],
            false => vec![],
        }
    }
}

/// SGD over parameters of type `P`, as `torch.optim.SGD`. Each step, for
/// every element: `g = grad + weight_decay * p` (`-grad` with
/// `maximize`); with momentum, `buf = g` at the first step and
/// `buf = momentum * buf + (1 - dampening) * g` after, then `g = buf`
/// (`g + momentum * buf` with `nesterov`); `p -= lr * g`. Computed in f64;
/// the momentum buffer is f32 (f64 for f64 parameters). NaN gradients
/// propagate into the parameters, as in PyTorch.
///
/// ```
/// use tensorfn_runtime::{Cpu, Tensor, shape};
/// use tensorfn_runtime::optim::{Sgd, SgdConfig};
/// let mut p = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![1.0, 2.0]).unwrap();
/// let g = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![1.0, -1.0]).unwrap();
/// let mut opt = Sgd::new(&p, SgdConfig { lr: 0.5, momentum: 0.9, ..Default::default() }).unwrap();
/// opt.step(&mut p, &g).unwrap(); // buf = g
/// opt.step(&mut p, &g).unwrap(); // buf = 0.9 * g + g
/// let v = p.to_vec().unwrap();
/// assert!((v[0] + 0.45).abs() < 1e-6 && (v[1] - 3.45).abs() < 1e-6, "{v:?}");
/// // Nesterov momentum without momentum is refused, as in PyTorch.
/// assert!(Sgd::new(&p, SgdConfig { nesterov: true, ..Default::default() }).is_err());
/// ```
#[derive(Debug)]
pub struct Sgd<P> {
    config: SgdConfig,
    step: u64,
    slots: Vec<Slot>,
    _params: PhantomData<fn(&P)>,
}

impl<P: Params> Sgd<P> {
    /// An optimizer for `params`; an `Err` for settings PyTorch refuses
    /// (negative `lr`, `momentum` or `weight_decay`; `nesterov` without
    /// momentum or with dampening), or for parameters that are not
    /// floats.
    ///
    /// ```
    /// use tensorfn_runtime::{Cpu, Tensor, shape};
    /// use tensorfn_runtime::optim::{Sgd, SgdConfig};
    /// let p = Tensor::<Cpu, f32, shape![2]>::zeros().unwrap();
    /// let e = Sgd::new(&p, SgdConfig { lr: -1.0, ..Default::default() }).unwrap_err();
    /// assert!(e.to_string().contains("lr = -1"), "{e}");
    /// ```
    pub fn new(params: &P, config: SgdConfig) -> Result<Self> {
        config.check()?;
        let slots = slots("SGD", params, &|_| config.keys(), &|_, t| zeros(t))?;
        Ok(Sgd {
            config,
            step: 0,
            slots,
            _params: PhantomData,
        })
    }

    /// One step: updates `params` in place from `grads` (the same type,
    /// same dims). Dims that differ from those the optimizer was made for
    /// are an `Err` naming the parameter, and nothing is updated.
    ///
    /// ```
    /// use tensorfn_runtime::{Cpu, Tensor, shape};
    /// use tensorfn_runtime::optim::{Sgd, SgdConfig};
    /// let mut p = [Tensor::<Cpu, f64, shape![1]>::from_vec(vec![1.0]).unwrap()];
    /// let g = [Tensor::<Cpu, f64, shape![1]>::from_vec(vec![2.0]).unwrap()];
    /// let mut opt = Sgd::new(&p, SgdConfig { lr: 0.25, ..Default::default() }).unwrap();
    /// opt.step(&mut p, &g).unwrap();
    /// assert_eq!(p[0].to_vec().unwrap(), vec![0.5]);
    /// ```
    pub fn step(&mut self, params: &mut P, grads: &P) -> Result<()> {
        self.step_impl("SGD.step", params, grads, None).map(|_| ())
    }

    /// [`step`](Self::step) with the gradients clipped to a total 2-norm
    /// of at most `max_norm`, without changing `grads`, as
    /// [`AdamW::step_clipped`](super::AdamW::step_clipped): on one GPU the
    /// norm is summed and the clip coefficient computed there, and the
    /// returned [`GradNorm`] syncs only when read.
    ///
    /// ```
    /// use tensorfn_runtime::{Cpu, Tensor, shape};
    /// use tensorfn_runtime::optim::{Sgd, SgdConfig};
    /// let mut p = [Tensor::<Cpu, f64, shape![2]>::zeros().unwrap()];
    /// let g = [Tensor::<Cpu, f64, shape![2]>::from_vec(vec![3.0, 4.0]).unwrap()];
    /// let mut opt = Sgd::new(&p, SgdConfig { lr: 1.0, ..Default::default() }).unwrap();
    /// assert_eq!(opt.step_clipped(&mut p, &g, 1.0).unwrap().value().unwrap(), 5.0);
    /// let v = p[0].to_vec().unwrap();
    /// assert!((v[0] + 0.6).abs() < 1e-6 && (v[1] + 0.8).abs() < 1e-6, "{v:?}");
    /// ```
    pub fn step_clipped(&mut self, params: &mut P, grads: &P, max_norm: f64) -> Result<GradNorm> {
        self.step_impl("SGD.step_clipped", params, grads, Some(max_norm))
            .map(|n| n.expect("a clipped step measures the norm"))
    }

    fn step_impl(
        &mut self,
        op: &str,
        params: &mut P,
        grads: &P,
        max_norm: Option<f64>,
    ) -> Result<Option<GradNorm>> {
        let mut pairs = pair(op, params.tensors_mut(), grads.tensors(), &self.slots)?;
        let (clip, norm) = match max_norm {
            None => (Clip::Coef(1.0), None),
            Some(m) => {
                let (c, n) = super::clip::plan(op, grads, m)?;
                (c, Some(n))
            }
        };
        let c = self.config;
        let h = Hyper {
            lr: c.lr,
            momentum: c.momentum,
            dampening: c.dampening,
            weight_decay: c.weight_decay,
            nesterov: c.nesterov,
            maximize: c.maximize,
            first: self.step == 0,
            gscale: clip.host(),
        };
        let kernel = OptimKernel::Sgd {
            momentum: c.momentum != 0.0,
        };
        let hyper = [
            c.lr,
            c.momentum,
            1.0 - c.dampening,
            c.weight_decay,
            0.0,
            0.0,
            0.0,
        ];
        let flags = c.maximize as u32
            | (c.nesterov as u32) << 1
            | (h.first as u32) << 2
            | ((c.weight_decay != 0.0) as u32) << 3;
        for kind in [
            DTypeKind::F32,
            DTypeKind::F64,
            DTypeKind::F16,
            DTypeKind::BF16,
        ] {
            with_float!(kind, run(&mut pairs, &mut self.slots, &h), Ok(()))?;
            with_float!(
                kind,
                cuda_step(&mut pairs, &mut self.slots, kernel, hyper, flags, clip),
                Ok(())
            )?;
        }
        self.step += 1;
        Ok(norm)
    }

    /// The learning rate of the next step.
    ///
    /// ```
    /// use tensorfn_runtime::{Cpu, Tensor, shape};
    /// use tensorfn_runtime::optim::{Sgd, SgdConfig};
    /// let p = Tensor::<Cpu, f32, shape![1]>::zeros().unwrap();
    /// assert_eq!(Sgd::new(&p, SgdConfig::default()).unwrap().lr(), 1e-3);
    /// ```
    pub fn lr(&self) -> f64 {
        self.config.lr
    }

    /// Sets the learning rate of the next steps.
    ///
    /// ```
    /// use tensorfn_runtime::{Cpu, Tensor, shape};
    /// use tensorfn_runtime::optim::{Sgd, SgdConfig};
    /// let p = Tensor::<Cpu, f32, shape![1]>::zeros().unwrap();
    /// let mut opt = Sgd::new(&p, SgdConfig::default()).unwrap();
    /// opt.set_lr(0.5);
    /// assert_eq!(opt.lr(), 0.5);
    /// ```
    pub fn set_lr(&mut self, lr: f64) {
        self.config.lr = lr;
    }

    /// The settings.
    ///
    /// ```
    /// use tensorfn_runtime::{Cpu, Tensor, shape};
    /// use tensorfn_runtime::optim::{Sgd, SgdConfig};
    /// let p = Tensor::<Cpu, f32, shape![1]>::zeros().unwrap();
    /// assert_eq!(Sgd::new(&p, SgdConfig::default()).unwrap().config().momentum, 0.0);
    /// ```
    pub fn config(&self) -> &SgdConfig {
        &self.config
    }

    /// The number of steps taken.
    ///
    /// ```
    /// use tensorfn_runtime::{Cpu, Tensor, shape};
    /// use tensorfn_runtime::optim::{Sgd, SgdConfig};
    /// let p = Tensor::<Cpu, f32, shape![1]>::zeros().unwrap();
    /// assert_eq!(Sgd::new(&p, SgdConfig::default()).unwrap().steps(), 0);
    /// ```
    pub fn steps(&self) -> u64 {
        self.step
    }

    /// Writes the state to a safetensors file: `step` (an i64 scalar) and,
    /// with momentum, `momentum_buffer.{name}` for every parameter.
    ///
    /// ```
    /// use tensorfn_runtime::{Cpu, Tensor, shape};
    /// use tensorfn_runtime::optim::{Sgd, SgdConfig};
    /// let dir = std::env::temp_dir().join(format!("tf_sgd_doc_{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let path = dir.join("opt.safetensors");
    /// let cfg = SgdConfig { lr: 0.1, momentum: 0.9, ..Default::default() };
    /// let mut p = [Tensor::<Cpu, f32, shape![2]>::ones().unwrap()];
    /// let g = [Tensor::<Cpu, f32, shape![2]>::ones().unwrap()];
    /// let mut opt = Sgd::new(&p, cfg).unwrap();
    /// opt.step(&mut p, &g).unwrap();
    /// opt.save_safetensors(&path).unwrap();
    /// let back = Sgd::load_safetensors(&path, &p, cfg).unwrap();
    /// assert_eq!(back.steps(), 1);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    pub fn save_safetensors(&self, path: impl AsRef<Path>) -> Result<()> {
        super::save(path.as_ref(), self.step, &self.slots)
    }

    /// An optimizer for `params` with the state [`save_safetensors`](Self::save_safetensors)
    /// wrote: continuing from it gives the same numbers, bit for bit, as
    /// not stopping. A missing, mis-shaped or extra key is an `Err` naming it.
    ///
    /// ```
    /// use tensorfn_runtime::{Cpu, Tensor, shape};
    /// use tensorfn_runtime::optim::{Sgd, SgdConfig};
    /// let dir = std::env::temp_dir().join(format!("tf_sgd_load_doc_{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let path = dir.join("opt.safetensors");
    /// let p = [Tensor::<Cpu, f32, shape![2]>::ones().unwrap()];
    /// let cfg = SgdConfig { momentum: 0.9, ..Default::default() };
    /// Sgd::new(&p, cfg).unwrap().save_safetensors(&path).unwrap();
    /// // Parameters of other dims do not fit the saved state.
    /// let q = [Tensor::<Cpu, f32, shape![3]>::ones().unwrap()];
    /// let e = Sgd::load_safetensors(&path, &q, cfg).unwrap_err();
    /// assert!(e.to_string().contains("momentum_buffer.0"), "{e}");
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    pub fn load_safetensors(path: impl AsRef<Path>, params: &P, config: SgdConfig) -> Result<Self> {
        let mut opt = Self::new(params, config)?;
        opt.step = super::load(path.as_ref(), &mut opt.slots)?;
        Ok(opt)
    }
}

/// The per-step constants.
struct Hyper {
    lr: f64,
    momentum: f64,
    dampening: f64,
    weight_decay: f64,
    nesterov: bool,
    maximize: bool,
    /// The momentum buffer starts as the gradient.
    first: bool,
    /// The clip coefficient of the gradients.
    gscale: f64,
}

fn run<T: OptimFloat>(
    pairs: &mut [(&mut dyn AnyTensor, &dyn AnyTensor)],
    slots: &mut [Slot],
    h: &Hyper,
) -> Result<()> {
    for_each_chunk::<T>(pairs, slots, &|w| chunk(w, h))
}

fn chunk<T: OptimFloat>(w: &mut Work<'_, T, T::Acc>, h: &Hyper) {
    let Work { p, g, bufs } = w;
    let mut buf = bufs.first_mut();
    for i in 0..p.len() {
        let x = p[i].to_f64();
        let mut d = g[i].to_f64() * h.gscale;
        if h.maximize {
            d = -d;
        }
        if h.weight_decay != 0.0 {
            d += h.weight_decay * x;
        }
        if let Some(b) = &mut buf {
            let nb = match h.first {
                true => d,
                false => h.momentum * b[i].to_f64() + (1.0 - h.dampening) * d,
            };
            b[i] = T::Acc::from_f64(nb);
            let nb = b[i].to_f64();
            d = match h.nesterov {
                true => d + h.momentum * nb,
                false => nb,
            };
        }
        p[i] = T::from_f64(x - h.lr * d);
    }
}
