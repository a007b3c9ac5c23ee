//! The optimizer kernels: which update, which state buffers, and the
//! launch contract of their multi-tensor entries (see
//! [`builtin::optim`](crate::builtin::optim)).

use tensorfn_core::DTypeKind;

pub use crate::ptx::{OPTIM_HYPER, OPTIM_RECORD_WORDS};

/// Elements of one chunk record: a tensor is split into chunks of at most
/// this many, so that a few large tensors still spread over every SM.
///
/// ```
/// assert_eq!(tensorfn_kernels::optim::OPTIM_CHUNK, 1 << 15);
/// ```
pub const OPTIM_CHUNK: usize = 1 << 15;

/// An optimizer update, with the variants that change its state buffers.
///
/// The entry's `f64` hyperparameters `h0..h6` and `u32` flags are, for
/// `AdamW` (step `t` from 1): `1 - lr * weight_decay`, `1 - beta1`,
/// `beta2`, `1 - beta2`, `sqrt(1 - beta2^t)`, `eps`, `lr / (1 - beta1^t)`;
/// flag bit 0 `maximize`. For `Sgd`: `lr`, `momentum`, `1 - dampening`,
/// `weight_decay`; bits 0 `maximize`, 1 `nesterov`, 2 the first step (the
/// momentum buffer starts as the gradient), 3 a nonzero weight decay.
///
/// Every entry also takes `p_norm_sq` (`u64`) and `p_clip` (`f64`): the
/// updates multiply each gradient by a clip coefficient, `p_clip` itself
/// when `p_norm_sq` is 0, else `min(1, p_clip / (sqrt(s) + 1e-6))` with
/// `s` the `f64` at device address `p_norm_sq` (NaN stays NaN, as
/// `clip_grad_norm_`), so clipping needs no host round trip.
/// [`OptimKernel::SquareSum`] adds the sum of the squares of the
/// gradients of its records to the `f64` at `p_norm_sq`.
///
/// ```
/// use tensorfn_kernels::optim::OptimKernel;
/// use tensorfn_kernels::DTypeKind;
/// let k = OptimKernel::AdamW { amsgrad: true, master: true };
/// assert_eq!(k.state_buffers(DTypeKind::BF16), 4);
/// assert_eq!(k.state_buffers(DTypeKind::F32), 3); // no master weights for f32
/// assert_eq!(k.name(DTypeKind::BF16), "tf_adamw_amsgrad_master_bf16");
/// assert_eq!(OptimKernel::Sgd { momentum: false }.state_buffers(DTypeKind::F32), 0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OptimKernel {
    /// `torch.optim.AdamW`: state `exp_avg`, `exp_avg_sq`, then
    /// `max_exp_avg_sq` with `amsgrad`, then f32 master weights with
    /// `master` (f16 and bf16 parameters only).
    AdamW {
        /// AMSGrad's running maximum of the second moment.
        amsgrad: bool,
        /// f32 master weights of 16-bit parameters.
        master: bool,
    },
    /// `torch.optim.SGD`: state `momentum_buffer` with `momentum`.
    Sgd {
        /// A momentum buffer.
        momentum: bool,
    },
    /// No update: the sum of `g * g` over the gradients of the records
    /// (per thread in f32, f64 for f64 gradients), added atomically in
    /// f64 to the value at `p_norm_sq`. The total of a global-norm
    /// clipping, summed on the device.
    SquareSum,
}

impl OptimKernel {
    /// Every variant.
    pub const ALL: [OptimKernel; 7] = [
        OptimKernel::AdamW {
            amsgrad: false,
            master: false,
        },
        OptimKernel::AdamW {
            amsgrad: true,
            master: false,
        },
        OptimKernel::AdamW {
            amsgrad: false,
            master: true,
        },
        OptimKernel::AdamW {
            amsgrad: true,
            master: true,
        },
        OptimKernel::Sgd { momentum: false },
        OptimKernel::Sgd { momentum: true },
        OptimKernel::SquareSum,
    ];

    /// The state buffers of a parameter of `dtype`, in record order.
    pub fn state_buffers(self, dtype: DTypeKind) -> usize {
        match self {
            OptimKernel::AdamW { amsgrad, master } => {
                let half = matches!(dtype, DTypeKind::F16 | DTypeKind::BF16);
                2 + amsgrad as usize + (master && half) as usize
            }
            OptimKernel::Sgd { momentum } => momentum as usize,
            OptimKernel::SquareSum => 0,
        }
    }

    /// The entry name for parameters of `dtype`.
    pub fn name(self, dtype: DTypeKind) -> String {
        match self {
            OptimKernel::AdamW { amsgrad, master } => format!(
                "tf_adamw{}{}_{dtype}",
                if amsgrad { "_amsgrad" } else { "" },
                if master { "_master" } else { "" }
            ),
            OptimKernel::Sgd { momentum } => {
                format!("tf_sgd{}_{dtype}", if momentum { "_momentum" } else { "" })
            }
            OptimKernel::SquareSum => format!("tf_grad_square_sum_{dtype}"),
        }
    }
}
