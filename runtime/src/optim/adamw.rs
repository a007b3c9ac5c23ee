//! AdamW: Adam with decoupled weight decay, as `torch.optim.AdamW`.

use super::{
    cuda_step, for_each_chunk, invalid, pair, slots, values, with_float, zeros, Clip, GradNorm,
    OptimFloat, Slot, Work,
};
use crate::dtype::{DType, DTypeKind};
use crate::error::Result;
use crate::params::AnyTensor;
use crate::Params;
use std::marker::PhantomData;
use std::path::Path;
use tensorfn_kernels::optim::OptimKernel;

/// The settings of [`AdamW`], with PyTorch's defaults.
///
/// ```
/// use tensorfn_runtime::optim::AdamWConfig;
/// let c = AdamWConfig { lr: 6e-4, weight_decay: 0.1, ..Default::default() };
/// assert_eq!((c.betas, c.eps, c.amsgrad, c.maximize), ((0.9, 0.999), 1e-8, false, false));
/// assert!(c.master_weights);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWConfig {
    /// The learning rate (1e-3).
    pub lr: f64,
    /// The decay rates of the first and second moment estimates ((0.9, 0.999)).
    pub betas: (f64, f64),
    /// Added to the denominator for numerical stability (1e-8).
    pub eps: f64,
    /// The decoupled weight decay: each step multiplies the parameters by
    /// `1 - lr * weight_decay` (0.01, as PyTorch's `AdamW`).
    pub weight_decay: f64,
    /// Uses the maximum of the second moments seen so far (AMSGrad; false).
    pub amsgrad: bool,
    /// Maximizes the objective instead of minimizing it (false).
    pub maximize: bool,
    /// For f16 and bf16 parameters, keeps f32 master weights in the state:
    /// each step updates the f32 copy and writes it rounded to the
    /// parameter, so that updates smaller than a 16-bit step are not lost
    /// (true). Without it the 16-bit parameter is read, updated in f32 and
    /// rounded back each step. No effect on f32 and f64 parameters.
    pub master_weights: bool,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        AdamWConfig {
            lr: 1e-3,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 1e-2,
            amsgrad: false,
            maximize: false,
            master_weights: true,
        }
    }
}

impl AdamWConfig {
    /// `Err` for the values PyTorch refuses.
    fn check(&self) -> Result<()> {
        let op = "AdamW";
        if self.lr.is_nan() || self.lr < 0.0 {
            return Err(invalid(
                op,
                format!("invalid learning rate `lr = {}`: use a value >= 0", self.lr),
            ));
        }
        if self.eps.is_nan() || self.eps < 0.0 {
            return Err(invalid(
                op,
                format!("invalid `eps = {}`: use a value >= 0", self.eps),
            ));
        }
        for (i, b) in [self.betas.0, self.betas.1].into_iter().enumerate() {
            if !(0.0..1.0).contains(&b) {
                return Err(invalid(
                    op,
                    format!("invalid beta at index {i}: `betas.{i} = {b}`; use a value in [0, 1)"),
                ));
            }
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
        Ok(())
    }

    /// The state buffers of a parameter of dtype `kind`, in the order the
    /// kernel reads them.
    fn keys(&self, kind: DTypeKind) -> Vec<&'static str> {
        let mut keys = vec!["exp_avg", "exp_avg_sq"];
        if self.amsgrad {
            keys.push("max_exp_avg_sq");
        }
        if self.master_weights && matches!(kind, DTypeKind::F16 | DTypeKind::BF16) {
            keys.push("master");
        }
        keys
    }
}

/// AdamW over parameters of type `P`, as `torch.optim.AdamW`: Adam's
/// moment estimates with bias correction, and weight decay applied to
/// the parameters directly (decoupled from the gradient).
///
/// Each step, for every element, with `t` the step count from 1:
/// `p *= 1 - lr * weight_decay`, `m = beta1 * m + (1 - beta1) * g`,
/// `v = beta2 * v + (1 - beta2) * g * g`, and
/// `p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)`.
/// The moments are f32 (f64 for f64 parameters); f16 and bf16 parameters
/// keep f32 master weights ([`AdamWConfig::master_weights`]). Gradients
/// have the parameters' type, so their dtype. NaN gradients propagate
/// into the parameters, as in PyTorch.
///
/// ```
/// use tensorfn_runtime::{Cpu, Tensor, shape};
/// use tensorfn_runtime::optim::{AdamW, AdamWConfig};
/// let mut p = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![1.0, 2.0]).unwrap();
/// let g = Tensor::<Cpu, f32, shape![2]>::from_vec(vec![0.1, -3.0]).unwrap();
/// let mut opt = AdamW::new(&p, AdamWConfig { lr: 0.1, weight_decay: 0.0, ..Default::default() }).unwrap();
/// opt.step(&mut p, &g).unwrap();
/// // The first step moves each element by about `lr` against its gradient's sign.
/// let v = p.to_vec().unwrap();
/// assert!((v[0] - 0.9).abs() < 1e-5 && (v[1] - 2.1).abs() < 1e-5, "{v:?}");
/// assert_eq!(opt.steps(), 1);
/// ```
#[derive(Debug)]
pub struct AdamW<P> {
    config: AdamWConfig,
    step: u64,
    slots: Vec<Slot>,
    /// Per slot: whether the weight decay applies to it.
    decayed: Vec<bool>,
    _params: PhantomData<fn(&P)>,
}

impl<P: Params> AdamW<P> {
    /// An optimizer for `params`, its state zero (and the master weights a
    /// copy of the parameters); an `Err` for settings PyTorch refuses
    /// (negative `lr`, `eps` or `weight_decay`, betas outside `[0, 1)`),
    /// or for parameters that are not floats.
    ///
    /// ```
    /// use tensorfn_runtime::{Cpu, Tensor, shape};
    /// use tensorfn_runtime::optim::{AdamW, AdamWConfig};
    /// let p = Tensor::<Cpu, f32, shape![2]>::zeros().unwrap();
    /// let e = AdamW::new(&p, AdamWConfig { betas: (0.9, 1.0), ..Default::default() }).unwrap_err();
    /// assert!(e.to_string().contains("betas.1"), "{e}");
    /// ```
    pub fn new(params: &P, config: AdamWConfig) -> Result<Self> {
        config.check()?;
        let slots = slots("AdamW", params, &|k| config.keys(k), &init)?;
        Ok(AdamW {
            config,
            step: 0,
            decayed: vec![true; slots.len()],
            slots,
            _params: PhantomData,
        })
    }

    /// Leaves the parameters for which `skip(name, dims)` is true out of
    /// the weight decay (their moments and update are unchanged), as a
    /// PyTorch parameter group with `weight_decay = 0.0`. GPT-2's training
    /// decays the matrices and embeddings but not the biases and norms:
    /// `skip` is then `|_, dims| dims.len() < 2`. Each call replaces the
    /// previous choice; the choice is not part of the saved state, so make
    /// it again after [`load_safetensors`](Self::load_safetensors). A step
    /// with both groups runs the update once per group.
    ///
    /// ```
    /// use tensorfn_runtime::{Cpu, Tensor, shape};
    /// use tensorfn_runtime::optim::{AdamW, AdamWConfig};
    /// // Two parameters, keys "0" and "1".
    /// let mut p = vec![Tensor::<Cpu, f32, shape![_]>::ones_dims(&[2]).unwrap(); 2];
    /// let g = vec![Tensor::<Cpu, f32, shape![_]>::zeros_dims(&[2]).unwrap(); 2];
    /// let cfg = AdamWConfig { lr: 0.1, weight_decay: 0.5, ..Default::default() };
    /// let mut opt = AdamW::new(&p, cfg).unwrap().without_weight_decay(|name, _| name == "1");
    /// opt.step(&mut p, &g).unwrap();
    /// // With zero gradients only the decay moves a parameter: the first
    /// // by `1 - lr * weight_decay`, the second not at all.
    /// assert_eq!(p[0].to_vec().unwrap(), vec![0.95; 2]);
    /// assert_eq!(p[1].to_vec().unwrap(), vec![1.0; 2]);
    /// ```
    pub fn without_weight_decay(mut self, skip: impl Fn(&str, &[usize]) -> bool) -> Self {
        self.decayed = self.slots.iter().map(|s| !skip(&s.name, &s.dims)).collect();
        self
    }

    /// One step: updates `params` in place from `grads` (the same type,
    /// same dims). Dims that differ from those the optimizer was made for
    /// are an `Err` naming the parameter, and nothing is updated.
    ///
    /// ```
    /// use tensorfn_runtime::{Cpu, Tensor, shape};
    /// use tensorfn_runtime::optim::{AdamW, AdamWConfig};
    /// let mut p = vec![Tensor::<Cpu, f32, shape![_]>::zeros_dims(&[3]).unwrap()];
    /// let mut opt = AdamW::new(&p, AdamWConfig::default()).unwrap();
    /// let g = vec![Tensor::<Cpu, f32, shape![_]>::zeros_dims(&[4]).unwrap()];
    /// let e = opt.step(&mut p, &g).unwrap_err();
    /// assert!(e.to_string().contains("gradient `0`"), "{e}");
    /// ```
    pub fn step(&mut self, params: &mut P, grads: &P) -> Result<()> {
        self.step_impl("AdamW.step", params, grads, None)
            .map(|_| ())
    }

    /// [`step`](Self::step) with the gradients clipped to a total 2-norm
    /// of at most `max_norm`, as `clip_grad_norm_(grads, max_norm)`
    /// before `step()` in PyTorch (a NaN total makes the update NaN, an
    /// infinite one zeroes the gradients: `error_if_nonfinite=False`),
    /// without changing `grads`. When every gradient is on one GPU, the
    /// squared norms are summed there by one multi-tensor launch per dtype
    /// and the update kernels read the clip coefficient
    /// `min(1, max_norm / (norm + 1e-6))` from device memory: the step
    /// never waits for the GPU. The returned [`GradNorm`] reads the total
    /// norm back only when asked (one sync then). On the GPU the sum of
    /// squares is added atomically, so its last bits may differ between
    /// runs; elsewhere the norm is [`clip_grad_norm`](super::clip_grad_norm)'s,
    /// and the coefficient scales the gradients in f64 (f32 on a GPU)
    /// instead of being rounded into them first.
    ///
    /// ```
    /// use tensorfn_runtime::{Cpu, Tensor, shape};
    /// use tensorfn_runtime::optim::{AdamW, AdamWConfig};
    /// let mut p = [Tensor::<Cpu, f32, shape![2]>::zeros().unwrap()];
    /// let g = [Tensor::<Cpu, f32, shape![2]>::from_vec(vec![30.0, 40.0]).unwrap()];
    /// let mut opt = AdamW::new(&p, AdamWConfig::default()).unwrap();
    /// let norm = opt.step_clipped(&mut p, &g, 1.0).unwrap();
    /// assert_eq!(norm.value().unwrap(), 50.0);
    /// assert_eq!(g[0].to_vec().unwrap(), vec![30.0, 40.0]); // left as they are
    /// ```
    pub fn step_clipped(&mut self, params: &mut P, grads: &P, max_norm: f64) -> Result<GradNorm> {
        self.step_impl("AdamW.step_clipped", params, grads, Some(max_norm))
            .map(|n| n.expect("a clipped step measures the norm"))
    }

    fn step_impl(
        &mut self,
        op: &str,
        params: &mut P,
        grads: &P,
        max_norm: Option<f64>,
    ) -> Result<Option<GradNorm>> {
        let pairs = pair(op, params.tensors_mut(), grads.tensors(), &self.slots)?;
        let (clip, norm) = match max_norm {
            None => (Clip::Coef(1.0), None),
            Some(m) => {
                let (c, n) = super::clip::plan(op, grads, m)?;
                (c, Some(n))
            }
        };
        let t = self.step + 1;
        if self.decayed.iter().all(|&d| d) {
            let mut pairs = pairs;
            update(&self.config, t, true, &mut pairs, &mut self.slots, clip)?;
        } else {
            // One update per group: the slots are taken out, split by
            // group in order, and put back in their places whatever the
            // outcome.
            let slots = std::mem::take(&mut self.slots);
            let n = slots.len();
            let mut groups: [(Vec<usize>, Vec<_>, Vec<Slot>); 2] = Default::default();
            for (i, (pr, s)) in pairs.into_iter().zip(slots).enumerate() {
                let g = &mut groups[usize::from(!self.decayed[i])];
                g.0.push(i);
                g.1.push(pr);
                g.2.push(s);
            }
            let mut result = Ok(());
            for (decay, g) in [true, false].into_iter().zip(groups.iter_mut()) {
                if result.is_ok() && !g.1.is_empty() {
                    result = update(&self.config, t, decay, &mut g.1, &mut g.2, clip);
                }
            }
            let mut back: Vec<Option<Slot>> = (0..n).map(|_| None).collect();
            for (idx, _, ss) in groups {
                for (i, s) in idx.into_iter().zip(ss) {
                    back[i] = Some(s);
                }
            }
            self.slots = back.into_iter().flatten().collect();
            result?;
        }
        self.step = t;
        Ok(norm)
    }

    /// The learning rate of the next step.
    ///
    /// ```
    /// use tensorfn_runtime::{Cpu, Tensor, shape};
    /// use tensorfn_runtime::optim::{AdamW, AdamWConfig};
    /// let p = Tensor::<Cpu, f32, shape![1]>::zeros().unwrap();
    /// let mut opt = AdamW::new(&p, AdamWConfig::default()).unwrap();
    /// opt.set_lr(3e-4);
    /// assert_eq!(opt.lr(), 3e-4);
    /// ```
    pub fn lr(&self) -> f64 {
        self.config.lr
    }

    /// Sets the learning rate of the next steps (what a schedule does
    /// each step, as writing `param_group["lr"]` in PyTorch).
    ///
    /// ```
    /// use tensorfn_runtime::{Cpu, Tensor, shape};
    /// use tensorfn_runtime::optim::{AdamW, AdamWConfig, LrSchedule, StepLr};
    /// let p = Tensor::<Cpu, f32, shape![1]>::zeros().unwrap();
    /// let mut opt = AdamW::new(&p, AdamWConfig { lr: 0.1, ..Default::default() }).unwrap();
    /// opt.set_lr(StepLr { step_size: 10, gamma: 0.5 }.lr_at(0.1, 25));
    /// assert!((opt.lr() - 0.025).abs() < 1e-15);
    /// ```
    pub fn set_lr(&mut self, lr: f64) {
        self.config.lr = lr;
    }

    /// The settings.
    ///
    /// ```
    /// use tensorfn_runtime::{Cpu, Tensor, shape};
    /// use tensorfn_runtime::optim::{AdamW, AdamWConfig};
    /// let p = Tensor::<Cpu, f32, shape![1]>::zeros().unwrap();
    /// let opt = AdamW::new(&p, AdamWConfig::default()).unwrap();
    /// assert_eq!(opt.config().weight_decay, 0.01);
    /// ```
    pub fn config(&self) -> &AdamWConfig {
        &self.config
    }

    /// The number of steps taken.
    ///
    /// ```
    /// use tensorfn_runtime::{Cpu, Tensor, shape};
    /// use tensorfn_runtime::optim::{AdamW, AdamWConfig};
    /// let p = Tensor::<Cpu, f32, shape![1]>::zeros().unwrap();
    /// assert_eq!(AdamW::new(&p, AdamWConfig::default()).unwrap().steps(), 0);
    /// ```
    pub fn steps(&self) -> u64 {
        self.step
    }

    /// Writes the state to a safetensors file: `step` (an i64 scalar) and,
    /// for every parameter, `exp_avg.{name}`, `exp_avg_sq.{name}`,
    /// `max_exp_avg_sq.{name}` (with `amsgrad`) and `master.{name}` (f32
    /// master weights of 16-bit parameters). The learning rate and other
    /// settings are not stored: pass them to
    /// [`load_safetensors`](Self::load_safetensors).
    ///
    /// ```
    /// use tensorfn_runtime::{Cpu, Tensor, shape};
    /// use tensorfn_runtime::optim::{AdamW, AdamWConfig};
    /// let dir = std::env::temp_dir().join(format!("tf_adamw_doc_{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let path = dir.join("opt.safetensors");
    /// let mut p = [Tensor::<Cpu, f32, shape![2]>::ones().unwrap()];
    /// let g = [Tensor::<Cpu, f32, shape![2]>::ones().unwrap()];
    /// let mut opt = AdamW::new(&p, AdamWConfig::default()).unwrap();
    /// opt.step(&mut p, &g).unwrap();
    /// opt.save_safetensors(&path).unwrap(); // keys "step", "exp_avg.0", "exp_avg_sq.0"
    /// let mut back = AdamW::load_safetensors(&path, &p, AdamWConfig::default()).unwrap();
    /// assert_eq!(back.steps(), 1);
    /// let mut q = p.clone();
    /// opt.step(&mut p, &g).unwrap();
    /// back.step(&mut q, &g).unwrap();
    /// assert_eq!(p[0].to_vec().unwrap(), q[0].to_vec().unwrap());
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    pub fn save_safetensors(&self, path: impl AsRef<Path>) -> Result<()> {
        super::save(path.as_ref(), self.step, &self.slots)
    }

    /// An optimizer for `params` with the state [`save_safetensors`](Self::save_safetensors)
    /// wrote: continuing from it gives the same numbers, bit for bit, as
    /// not stopping. A missing, mis-shaped or extra key is an `Err` naming
    /// it (state saved with `amsgrad` read without it, for instance).
    ///
    /// ```
    /// use tensorfn_runtime::{Cpu, Tensor, shape};
    /// use tensorfn_runtime::optim::{AdamW, AdamWConfig};
    /// let dir = std::env::temp_dir().join(format!("tf_adamw_load_doc_{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let path = dir.join("opt.safetensors");
    /// let p = [Tensor::<Cpu, f32, shape![2]>::ones().unwrap()];
    /// AdamW::new(&p, AdamWConfig::default()).unwrap().save_safetensors(&path).unwrap();
    /// let amsgrad = AdamWConfig { amsgrad: true, ..Default::default() };
    /// let e = AdamW::load_safetensors(&path, &p, amsgrad).unwrap_err();
    /// assert!(e.to_string().contains("max_exp_avg_sq.0"), "{e}");
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    pub fn load_safetensors(
        path: impl AsRef<Path>,
        params: &P,
        config: AdamWConfig,
    ) -> Result<Self> {
        let mut opt = Self::new(params, config)?;
        opt.step = super::load(path.as_ref(), &mut opt.slots)?;
        Ok(opt)
    }
}

/// One step of AdamW, the `t`-th, over `pairs` and their `slots`, with
/// the weight decay or without it.
fn update(
    c: &AdamWConfig,
    t: u64,
    decay: bool,
    pairs: &mut [(&mut dyn AnyTensor, &dyn AnyTensor)],
    slots: &mut [Slot],
    clip: Clip,
) -> Result<()> {
    let weight_decay = if decay { c.weight_decay } else { 0.0 };
    let h = Hyper {
        b1: c.betas.0,
        b2: c.betas.1,
        eps: c.eps,
        decay: 1.0 - c.lr * weight_decay,
        step_size: c.lr / (1.0 - c.betas.0.powf(t as f64)),
        bc2_sqrt: (1.0 - c.betas.1.powf(t as f64)).sqrt(),
        maximize: c.maximize,
        amsgrad: c.amsgrad,
        gscale: clip.host(),
    };
    let kernel = OptimKernel::AdamW {
        amsgrad: c.amsgrad,
        master: c.master_weights,
    };
    let hyper = [
        h.decay,
        1.0 - h.b1,
        h.b2,
        1.0 - h.b2,
        h.bc2_sqrt,
        h.eps,
        h.step_size,
    ];
    let flags = c.maximize as u32;
    for kind in [
        DTypeKind::F32,
        DTypeKind::F64,
        DTypeKind::F16,
        DTypeKind::BF16,
    ] {
        with_float!(kind, run(pairs, slots, &h), Ok(()))?;
        with_float!(
            kind,
            cuda_step(pairs, slots, kernel, hyper, flags, clip),
            Ok(())
        )?;
    }
    Ok(())
}

/// Initial state: zero moments, master weights copied from the parameter.
fn init(key: &str, t: &dyn AnyTensor) -> Result<super::Buf> {
    match key {
        "master" => values(t),
        _ => zeros(t),
    }
}

/// The per-step constants.
struct Hyper {
    b1: f64,
    b2: f64,
    eps: f64,
    decay: f64,
    step_size: f64,
    bc2_sqrt: f64,
    maximize: bool,
    amsgrad: bool,
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

/// The update of one chunk, computed in f64 and stored in the state's
/// dtype (f32, or f64 for f64 parameters).
fn chunk<T: OptimFloat>(w: &mut Work<'_, T, T::Acc>, h: &Hyper) {
    let Work { p, g, bufs } = w;
    let (m, rest) = bufs.split_first_mut().expect("exp_avg");
    let (v, rest) = rest.split_first_mut().expect("exp_avg_sq");
    let (mut vmax, rest) = match h.amsgrad {
        true => {
            let (a, r) = rest.split_first_mut().expect("max_exp_avg_sq");
            (Some(a), r)
        }
        false => (None, rest),
    };
    let mut master = rest.first_mut();
    for i in 0..p.len() {
        let grad = g[i].to_f64() * h.gscale;
        let grad = if h.maximize { -grad } else { grad };
        let x = match &master {
            Some(w) => w[i].to_f64(),
            None => p[i].to_f64(),
        };
        let x = x * h.decay;
        // `exp_avg.lerp_(grad, 1 - beta1)`, `exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2)`.
        let mi = m[i].to_f64();
        let mi = T::Acc::from_f64(mi + (1.0 - h.b1) * (grad - mi));
        let vi = T::Acc::from_f64(v[i].to_f64() * h.b2 + (1.0 - h.b2) * grad * grad);
        m[i] = mi;
        v[i] = vi;
        let second = match &mut vmax {
            Some(vm) => {
                // `torch.maximum`, which propagates NaN.
                let (a, b) = (vm[i].to_f64(), vi.to_f64());
                let mx = if a.is_nan() || b.is_nan() {
                    f64::NAN
                } else {
                    a.max(b)
                };
                vm[i] = T::Acc::from_f64(mx);
                vm[i].to_f64()
            }
            None => vi.to_f64(),
        };
        let denom = second.sqrt() / h.bc2_sqrt + h.eps;
        let x = x - h.step_size * mi.to_f64() / denom;
        match &mut master {
            Some(w) => {
                w[i] = T::Acc::from_f64(x);
                p[i] = T::from_f64(w[i].to_f64());
            }
            None => p[i] = T::from_f64(x),
        }
    }
}
