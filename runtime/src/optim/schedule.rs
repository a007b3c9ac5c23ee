//! Learning-rate schedules: the rate of each step as a function of the
//! step, set on the optimizer with `set_lr` before the step.

/// A learning-rate schedule: the rate of step `step` (from 0) for a base
/// rate `base_lr`.
///
/// ```
/// use tensorfn_runtime::optim::LrSchedule;
/// struct Halving;
/// impl LrSchedule for Halving {
///     fn lr_at(&self, base_lr: f64, step: u64) -> f64 { base_lr / 2f64.powf(step as f64) }
/// }
/// assert_eq!(Halving.lr_at(1.0, 3), 0.125);
/// ```
pub trait LrSchedule {
    /// The learning rate of step `step` (0 for the first).
    fn lr_at(&self, base_lr: f64, step: u64) -> f64;
}

/// Linear warmup, then cosine decay to `min_lr`, as nanoGPT and llm.c
/// schedule GPT-2 training: `base_lr * (step + 1) / warmup_steps` for the
/// first `warmup_steps` steps, then
/// `min_lr + (base_lr - min_lr) * (1 + cos(pi * r)) / 2` with
/// `r = (step - warmup_steps) / (total_steps - warmup_steps)`, and
/// `min_lr` from `total_steps` on.
///
/// ```
/// use tensorfn_runtime::optim::{CosineWithWarmup, LrSchedule};
/// let s = CosineWithWarmup { warmup_steps: 10, total_steps: 110, min_lr: 0.0 };
/// assert_eq!(s.lr_at(1.0, 0), 0.1);
/// assert_eq!(s.lr_at(1.0, 9), 1.0);
/// assert_eq!(s.lr_at(1.0, 10), 1.0);
/// assert!((s.lr_at(1.0, 60) - 0.5).abs() < 1e-12);
/// assert_eq!(s.lr_at(1.0, 110), 0.0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CosineWithWarmup {
    /// Steps of linear warmup.
    pub warmup_steps: u64,
    /// The step at which the decay reaches `min_lr`.
    pub total_steps: u64,
    /// The rate at the end of the decay and after it.
    pub min_lr: f64,
}

impl LrSchedule for CosineWithWarmup {
    fn lr_at(&self, base_lr: f64, step: u64) -> f64 {
        if step < self.warmup_steps {
            return base_lr * (step + 1) as f64 / self.warmup_steps as f64;
        }
        if step >= self.total_steps {
            return self.min_lr;
        }
        let r = (step - self.warmup_steps) as f64 / (self.total_steps - self.warmup_steps) as f64;
        let coeff = 0.5 * (1.0 + (std::f64::consts::PI * r).cos());
        self.min_lr + coeff * (base_lr - self.min_lr)
    }
}

/// Decays the rate by `gamma` every `step_size` steps, as
/// `torch.optim.lr_scheduler.StepLR`: `base_lr * gamma^(step / step_size)`
/// (integer division).
///
/// ```
/// use tensorfn_runtime::optim::{LrSchedule, StepLr};
/// let s = StepLr { step_size: 30, gamma: 0.1 };
/// assert_eq!(s.lr_at(0.05, 29), 0.05);
/// assert!((s.lr_at(0.05, 30) - 0.005).abs() < 1e-15);
/// assert!((s.lr_at(0.05, 60) - 0.0005).abs() < 1e-15);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepLr {
    /// Steps between decays (at least 1).
    pub step_size: u64,
    /// The factor of each decay.
    pub gamma: f64,
}

impl LrSchedule for StepLr {
    fn lr_at(&self, base_lr: f64, step: u64) -> f64 {
        base_lr * self.gamma.powf((step / self.step_size.max(1)) as f64)
    }
}
