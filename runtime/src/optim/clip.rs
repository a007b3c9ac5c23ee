//! Gradient clipping by the total norm, as `torch.nn.utils.clip_grad_norm_`.

use super::OptimFloat;
use super::{host, host_mut, invalid, with_float, Clip, CHUNK};
use crate::backend::Backend;
use crate::cpu::par;
use crate::cuda::optim::download_range;
use crate::cuda::CudaBackend;
use crate::cuda::CudaStorage;
use crate::dtype::DTypeKind;
use crate::dtype::NumDType;
use crate::error::Result;
use crate::layout::Layout;
use crate::ops::dispatch::Exec;
use crate::params::AnyTensor;
use crate::storage::Storage;
use crate::DeviceKind;
use crate::Params;
use tensorfn_kernels::optim::{OptimKernel, OPTIM_HYPER, OPTIM_RECORD_WORDS};
use tensorfn_kernels::{BinaryOp, ReduceOp, UnaryOp};

/// The options of [`clip_grad_norm_with`], with PyTorch's defaults.
///
/// ```
/// use tensorfn_runtime::optim::ClipOptions;
/// let o = ClipOptions::default();
/// assert_eq!((o.norm_type, o.error_if_nonfinite), (2.0, false));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClipOptions {
    /// The `p` of the p-norm (2.0); `f64::INFINITY` for the largest
    /// absolute value.
    pub norm_type: f64,
    /// An `Err` (and the gradients left as they are) when the total norm
    /// is NaN or infinite (false: they are scaled by NaN or 0, as PyTorch
    /// does).
    pub error_if_nonfinite: bool,
}

impl Default for ClipOptions {
    fn default() -> Self {
        ClipOptions {
            norm_type: 2.0,
            error_if_nonfinite: false,
        }
    }
}

/// Scales the gradients so that their total 2-norm (the norm of all their
/// elements together) is at most `max_norm`, as PyTorch's
/// `clip_grad_norm_`: returns the total norm, and multiplies every
/// gradient by `max_norm / (total + 1e-6)` when that is below 1. A NaN
/// total makes every gradient NaN and an infinite one scales by 0, as in
/// PyTorch; [`clip_grad_norm_with`] can refuse them instead. The norm is
/// accumulated in f64 over per-tensor parts (on a GPU each tensor's part
/// is reduced there in f32, f64 for f64, and only that value is read
/// back; the gradients are then scaled there by the coefficient rounded
/// to their dtype).
///
/// ```
/// use tensorfn_runtime::{Cpu, Tensor, shape};
/// use tensorfn_runtime::optim::clip_grad_norm;
/// let mut g = [Tensor::<Cpu, f32, shape![2]>::from_vec(vec![3.0, 0.0]).unwrap(),
///              Tensor::<Cpu, f32, shape![2]>::from_vec(vec![0.0, 4.0]).unwrap()];
/// let total = clip_grad_norm(&mut g, 1.0).unwrap();
/// assert_eq!(total, 5.0);
/// let v = g[0].to_vec().unwrap();
/// assert!((v[0] - 0.6).abs() < 1e-6, "{v:?}");
/// ```
pub fn clip_grad_norm<G: Params>(grads: &mut G, max_norm: f64) -> Result<f64> {
    clip_grad_norm_with(grads, max_norm, ClipOptions::default())
}

/// [`clip_grad_norm`] with another p-norm, or refusing a non-finite total.
///
/// ```
/// use tensorfn_runtime::{Cpu, Tensor, shape};
/// use tensorfn_runtime::optim::{clip_grad_norm_with, ClipOptions};
/// let mut g = [Tensor::<Cpu, f32, shape![2]>::from_vec(vec![-3.0, 1.0]).unwrap()];
/// let inf = ClipOptions { norm_type: f64::INFINITY, ..Default::default() };
/// assert_eq!(clip_grad_norm_with(&mut g, 10.0, inf).unwrap(), 3.0);
/// let mut nan = [Tensor::<Cpu, f32, shape![1]>::from_vec(vec![f32::NAN]).unwrap()];
/// let strict = ClipOptions { error_if_nonfinite: true, ..Default::default() };
/// assert!(clip_grad_norm_with(&mut nan, 1.0, strict).is_err());
/// ```
pub fn clip_grad_norm_with<G: Params>(
    grads: &mut G,
    max_norm: f64,
    options: ClipOptions,
) -> Result<f64> {
    const OP: &str = "clip_grad_norm";
    let p = options.norm_type;
    if p.is_nan() || p <= 0.0 {
        return Err(invalid(
            OP,
            format!("invalid `norm_type = {p}`: use a value > 0 or f64::INFINITY"),
        ));
    }
    let mut ts = grads.tensors_mut();
    let mut total = 0.0f64;
    for (name, t) in &ts {
        let n = with_float!(
            t.dtype(),
            norm_part(&**t, p),
            Err(crate::Error::float_only(
                &format!("{OP}: gradient `{name}`"),
                t.dtype()
            ))
        )?;
        total = match p.is_infinite() {
            true => nan_max(total, n),
            false => total + n,
        };
    }
    if !p.is_infinite() {
        total = total.powf(1.0 / p);
    }
    if options.error_if_nonfinite && !total.is_finite() {
        return Err(invalid(
            OP,
            format!("the total norm of order {p} of the gradients is {total}, so they cannot be clipped; leave `error_if_nonfinite` false to scale them anyway"),
        ));
    }
    let coef = max_norm / (total + 1e-6);
    // `clamp(max=1.0)`: NaN stays NaN.
    let coef = if coef.is_nan() { coef } else { coef.min(1.0) };
    if coef != 1.0 {
        for (_, t) in ts.iter_mut() {
            with_float!(t.dtype(), scale(&mut **t, coef), Ok(()))?;
        }
    }
    Ok(total)
}

/// `max` that propagates NaN, as `torch.maximum`.
fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// The sum of `|x|^p` of `t`'s elements (their largest `|x|` for
/// `p = inf`).
fn norm_part<T: OptimFloat>(t: &dyn AnyTensor, p: f64) -> Result<f64> {
    let n = t.numel();
    let e = t.erased()?;
    let copy;
    let x = match e.storage.downcast_ref::<Storage<T>>() {
        Some(Storage::Cuda(d)) if n > 0 && (p == 1.0 || p == 2.0 || p == f64::INFINITY) => {
            // On the device, in f32 (f64 for f64), as PyTorch's per-tensor
            // norms: only the one value comes back.
            let be = CudaBackend::on(d.context().clone());
            let acc = be.cast::<T, T::Acc>(d, &Layout::new(vec![n], vec![1], e.offset))?;
            return device_part(&be, &acc, n, p);
        }
        Some(Storage::Cuda(d)) => {
            copy = download_range(d, e.offset, n)?;
            &copy[..]
        }
        _ => host::<T>(&e, n).expect("host storage"),
    };
    let mut parts = vec![0.0f64; n.div_ceil(CHUNK)];
    par::zip_chunks_mut(&mut parts, 1, x, CHUNK, &|o, xs| {
        o[0] = match p {
            f64::INFINITY => xs.iter().fold(0.0, |m, v| nan_max(m, v.to_f64().abs())),
            2.0 => xs.iter().map(|v| v.to_f64() * v.to_f64()).sum(),
            1.0 => xs.iter().map(|v| v.to_f64().abs()).sum(),
            _ => xs.iter().map(|v| v.to_f64().abs().powf(p)).sum(),
        };
    });
    Ok(match p {
        f64::INFINITY => parts.into_iter().fold(0.0, nan_max),
        _ => parts.into_iter().sum(),
    })
}

/// [`norm_part`] of the `n` elements of GPU buffer `x`, for `p` = 1, 2
/// or inf: `|x|` or `x^2` elementwise, summed (or the largest, which
/// propagates NaN) by the reduction kernel.
fn device_part<A: NumDType>(be: &CudaBackend, x: &CudaStorage<A>, n: usize, p: f64) -> Result<f64> {
    let l = Layout::contiguous(&[n]);
    let (op, red) = match p {
        2.0 => (UnaryOp::Square, ReduceOp::Sum),
        1.0 => (UnaryOp::Abs, ReduceOp::Sum),
        _ => (UnaryOp::Abs, ReduceOp::Max),
    };
    let y = be.unary(op, x, &l)?;
    let r = be.reduce(red, &y, &l, 0)?;
    Ok(download_range(&r, 0, 1)?[0].to_f64())
}

/// Multiplies `t`'s elements by `coef` in place.
fn scale<T: NumDType>(t: &mut dyn AnyTensor, coef: f64) -> Result<()> {
    let n = t.numel();
    if n == 0 {
        return Ok(());
    }
    let e = t.erased_mut()?;
    let off = e.offset;
    if let Some(Storage::Cuda(d)) = e.storage.downcast_mut::<Storage<T>>() {
        // The coefficient rounded to the gradients' dtype, as PyTorch's
        // `mul_` by a tensor of their dtype.
        let be = CudaBackend::on(d.context().clone());
        let l = Layout::new(vec![n], vec![1], off);
        return be.binary_scalar_assign(BinaryOp::Mul, d, &l, T::from_f64(coef));
    }
    let x = host_mut::<T>(t.erased_mut()?, n).expect("host storage");
    par::chunks_mut(x, CHUNK, &|_, xs| {
        for v in xs {
            *v = T::from_f64(v.to_f64() * coef);
        }
    });
    Ok(())
}

/// The total 2-norm of the gradients of a clipped optimizer step
/// ([`AdamW::step_clipped`](super::AdamW::step_clipped),
/// [`Sgd::step_clipped`](super::Sgd::step_clipped)). When the gradients
/// are on one GPU it is still there: [`value`](Self::value) reads it back
/// (one sync, waiting for the work queued so far), so a training loop
/// that reads it only every few steps never waits otherwise.
///
/// ```
/// use tensorfn_runtime::{Cpu, Tensor, shape};
/// use tensorfn_runtime::optim::{Sgd, SgdConfig};
/// let mut p = [Tensor::<Cpu, f32, shape![1]>::zeros().unwrap()];
/// let g = [Tensor::<Cpu, f32, shape![1]>::from_vec(vec![f32::NAN]).unwrap()];
/// let mut opt = Sgd::new(&p, SgdConfig::default()).unwrap();
/// assert!(opt.step_clipped(&mut p, &g, 1.0).unwrap().value().unwrap().is_nan());
/// ```
pub struct GradNorm(Norm);

enum Norm {
    Host(f64),
    /// The sum of the squares, on the device.
    Device(CudaStorage<f64>),
}

impl std::fmt::Debug for GradNorm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Norm::Host(v) => write!(f, "GradNorm({v})"),
            Norm::Device(_) => write!(f, "GradNorm(on the device)"),
        }
    }
}

impl GradNorm {
    /// The total 2-norm (NaN or infinite when a gradient is); on a GPU one
    /// sync.
    ///
    /// ```
    /// use tensorfn_runtime::{Cpu, Tensor, shape};
    /// use tensorfn_runtime::optim::{AdamW, AdamWConfig};
    /// let mut p = [Tensor::<Cpu, f32, shape![1]>::zeros().unwrap()];
    /// let g = [Tensor::<Cpu, f32, shape![1]>::from_vec(vec![-0.5]).unwrap()];
    /// let mut opt = AdamW::new(&p, AdamWConfig::default()).unwrap();
    /// assert_eq!(opt.step_clipped(&mut p, &g, 1.0).unwrap().value().unwrap(), 0.5);
    /// ```
    pub fn value(&self) -> Result<f64> {
        match &self.0 {
            Norm::Host(v) => Ok(*v),
            Norm::Device(s) => Ok(download_range(s, 0, 1)?[0].sqrt()),
        }
    }
}

/// The clip coefficient of `grads` for `max_norm`, and their total norm:
/// summed on the device when every nonempty gradient is on one GPU
/// (nothing waits), else [`clip_grad_norm`]'s total, read back.
pub(crate) fn plan<G: Params>(op: &str, grads: &G, max_norm: f64) -> Result<(Clip, GradNorm)> {
    let ts = grads.tensors();
    let mut devices = ts
        .iter()
        .filter(|(_, t)| t.numel() > 0)
        .map(|(_, t)| t.device());
    let first = devices.next();
    if let Some(DeviceKind::Cuda(ord)) = first {
        if devices.all(|d| d == DeviceKind::Cuda(ord)) {
            let be = CudaBackend::for_ordinal(ord)?;
            let sum: CudaStorage<f64> = be.full(1, 0.0)?;
            for kind in [
                DTypeKind::F32,
                DTypeKind::F64,
                DTypeKind::F16,
                DTypeKind::BF16,
            ] {
                with_float!(kind, square_sum(&be, &ts, &sum), Ok(()))?;
            }
            let clip = Clip::Device {
                norm_sq: sum.ptr_at(0),
                max_norm,
            };
            return Ok((clip, GradNorm(Norm::Device(sum))));
        }
    }
    let mut total = 0.0f64;
    for (name, t) in &ts {
        total += with_float!(
            t.dtype(),
            norm_part(&**t, 2.0),
            Err(crate::Error::float_only(
                &format!("{op}: gradient `{name}`"),
                t.dtype()
            ))
        )?;
    }
    let total = total.sqrt();
    let coef = max_norm / (total + 1e-6);
    // `clamp(max=1.0)`: NaN stays NaN.
    let coef = if coef.is_nan() { coef } else { coef.min(1.0) };
    Ok((Clip::Coef(coef), GradNorm(Norm::Host(total))))
}

/// Adds the squares of the GPU gradients of dtype `T` in `ts` to `sum`:
/// one launch of the multi-tensor sum over their chunks.
fn square_sum<T: OptimFloat>(
    be: &CudaBackend,
    ts: &[(String, &dyn AnyTensor)],
    sum: &CudaStorage<f64>,
) -> Result<()> {
    let mut records = Vec::new();
    // Kept alive until the launch is queued.
    let mut keep = Vec::new();
    for (_, t) in ts {
        let n = t.numel();
        if t.dtype() != T::KIND || n == 0 {
            continue;
        }
        let e = t.erased()?;
        let gp = match e.storage.downcast_ref::<Storage<T>>() {
            Some(Storage::Cuda(d)) => d.ptr_at(e.offset),
            _ => unreachable!("a GPU gradient of its dtype"),
        };
        let size = std::mem::size_of::<T>();
        for start in (0..n).step_by(CHUNK) {
            let mut r = [0i64; OPTIM_RECORD_WORDS];
            r[0] = (gp + (start * size) as u64) as i64;
            r[1] = r[0];
            r[6] = CHUNK.min(n - start) as i64;
            records.extend_from_slice(&r);
        }
        keep.push(e);
    }
    be.optim_step(
        OptimKernel::SquareSum,
        T::KIND,
        &records,
        [0.0; OPTIM_HYPER],
        0,
        (sum.ptr_at(0), 0.0),
    )
}
