//! Optimizers over [`Params`](crate::Params): [`Sgd`] and [`AdamW`] with PyTorch's
//! formulas and defaults, [`clip_grad_norm`], and learning-rate schedules
//! ([`CosineWithWarmup`], [`StepLr`]).
//!
//! Gradients are values of the parameters' own type (what autodiff
//! returns), so there is no `zero_grad`. A step pairs the tensors of the
//! parameters, the gradients and the optimizer's state by name, in
//! declaration order; dims that differ (possible with `Dyn` dims or `Vec`s
//! of different lengths) are an `Err` naming the parameter.
//!
//! ```
//! use tensorfn_runtime::{Cpu, Tensor, shape};
//! use tensorfn_runtime::optim::{AdamW, AdamWConfig, CosineWithWarmup, LrSchedule};
//! let mut p = [Tensor::<Cpu, f32, shape![2]>::from_vec(vec![1.0, -1.0]).unwrap()];
//! let grads = [Tensor::<Cpu, f32, shape![2]>::from_vec(vec![0.5, -0.5]).unwrap()];
//! let cfg = AdamWConfig { lr: 6e-4, weight_decay: 0.1, ..Default::default() };
//! let mut opt = AdamW::new(&p, cfg).unwrap();
//! let sched = CosineWithWarmup { warmup_steps: 2, total_steps: 10, min_lr: 6e-5 };
//! for step in 0..3 {
//!     opt.set_lr(sched.lr_at(6e-4, step));
//!     opt.step(&mut p, &grads).unwrap();
//! }
//! assert!(p[0].to_vec().unwrap()[0] < 1.0);
//! ```
//!
//! A step is one pass over every tensor of a dtype: on the CPU a parallel
//! loop over chunks of all of them, on a GPU one launch of a multi-tensor
//! kernel walking a device table of chunk records (the layout is in
//! DEVELOPERS.md, "Optimizers"). The optimizer's state lives on the
//! parameters' device.

mod adamw;
mod clip;
mod schedule;
mod sgd;
#[cfg(test)]
mod tests;

pub use adamw::{AdamW, AdamWConfig};
pub use clip::{clip_grad_norm, clip_grad_norm_with, ClipOptions, GradNorm};
pub use schedule::{CosineWithWarmup, LrSchedule, StepLr};
pub use sgd::{Sgd, SgdConfig};

use crate::backend::Backend;
use crate::cpu::par;
use crate::cuda::optim::{download_range, upload_like};
use crate::cuda::{CudaBackend, CudaStorage};
use crate::dtype::FloatDType;
use crate::dtype::{DType, DTypeKind};
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::params::safetensors as st;
use crate::params::{AnyTensor, ErasedMut, ErasedRef};
use crate::storage::Storage;
use crate::{bf16, f16, DeviceKind};
use std::path::Path;
use tensorfn_kernels::optim::{OptimKernel, OPTIM_CHUNK, OPTIM_HYPER, OPTIM_RECORD_WORDS};

/// Elements per work item of the parallel loop: large enough that the
/// per-item cost vanishes, small enough that a few large tensors still
/// spread over every core.
const CHUNK: usize = OPTIM_CHUNK;

/// An `Err` for argument `what` of `op`.
pub(crate) fn invalid(op: &str, message: impl Into<String>) -> Error {
    Error::InvalidArgument {
        op: op.to_string(),
        message: message.into(),
    }
}

/// A state buffer: f32 for f32, f16 and bf16 parameters, f64 for f64;
/// in host memory or on the parameter's GPU.
#[derive(Debug)]
pub(crate) enum Buf {
    F32(Vec<f32>),
    F64(Vec<f64>),
    Cuda32(CudaStorage<f32>),
    Cuda64(CudaStorage<f64>),
}

impl Buf {
    /// The device address of element `i` of a GPU buffer.
    fn device_ptr(&self, i: usize) -> u64 {
        match self {
            Buf::Cuda32(s) => s.ptr_at(i),
            Buf::Cuda64(s) => s.ptr_at(i),
            Buf::F32(_) | Buf::F64(_) => unreachable!("a GPU parameter's state is on its GPU"),
        }
    }
}

/// The dtypes an optimizer updates, with the dtype of their state.
pub(crate) trait OptimFloat: FloatDType {
    /// The dtype of the state (moments, master weights).
    type Acc: AccFloat;
}
impl OptimFloat for f32 {
    type Acc = f32;
}
impl OptimFloat for f64 {
    type Acc = f64;
}
impl OptimFloat for f16 {
    type Acc = f32;
}
impl OptimFloat for bf16 {
    type Acc = f32;
}

/// The dtypes of state buffers.
pub(crate) trait AccFloat: FloatDType {
    fn slice(b: &mut Buf) -> &mut [Self];
    fn buf(v: Vec<Self>) -> Buf;
    fn device(s: CudaStorage<Self>) -> Buf;
}
impl AccFloat for f32 {
    fn slice(b: &mut Buf) -> &mut [f32] {
        match b {
            Buf::F32(v) => v,
            _ => unreachable!("host f32 state of a 32- or 16-bit parameter"),
        }
    }
    fn buf(v: Vec<f32>) -> Buf {
        Buf::F32(v)
    }
    fn device(s: CudaStorage<f32>) -> Buf {
        Buf::Cuda32(s)
    }
}
impl AccFloat for f64 {
    fn slice(b: &mut Buf) -> &mut [f64] {
        match b {
            Buf::F64(v) => v,
            _ => unreachable!("host f64 state of an f64 parameter"),
        }
    }
    fn buf(v: Vec<f64>) -> Buf {
        Buf::F64(v)
    }
    fn device(s: CudaStorage<f64>) -> Buf {
        Buf::Cuda64(s)
    }
}

/// Calls `$f::<T>` with the float dtype `T` of `$kind`; other dtypes are
/// `$other`.
macro_rules! with_float {
    ($kind:expr, $f:ident($($arg:expr),*), $other:expr) => {
        match $kind {
            $crate::dtype::DTypeKind::F32 => $f::<f32>($($arg),*),
            $crate::dtype::DTypeKind::F64 => $f::<f64>($($arg),*),
            $crate::dtype::DTypeKind::F16 => $f::<half::f16>($($arg),*),
            $crate::dtype::DTypeKind::BF16 => $f::<half::bf16>($($arg),*),
            _ => $other,
        }
    };
}
pub(crate) use with_float;

/// One parameter's state: its name, dims and dtype when the optimizer
/// was made, and its buffers by key (`exp_avg`, ...), each as many
/// elements as the parameter.
#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) name: String,
    pub(crate) device: DeviceKind,
    pub(crate) dims: Vec<usize>,
    pub(crate) dtype: DTypeKind,
    pub(crate) bufs: Vec<(&'static str, Buf)>,
}

impl Slot {
    pub(crate) fn numel(&self) -> usize {
        self.dims.iter().product()
    }
}

/// The slots of `params`, each with the buffers `keys` gives for its
/// dtype, made by `init` (zeros, or the parameter's values).
pub(crate) fn slots<P: crate::Params>(
    op: &str,
    params: &P,
    keys: &dyn Fn(DTypeKind) -> Vec<&'static str>,
    init: &dyn Fn(&str, &dyn AnyTensor) -> Result<Buf>,
) -> Result<Vec<Slot>> {
    params
        .tensors()
        .into_iter()
        .map(|(name, t)| {
            let dtype = t.dtype();
            if !matches!(
                dtype,
                DTypeKind::F32 | DTypeKind::F64 | DTypeKind::F16 | DTypeKind::BF16
            ) {
                return Err(Error::DType {
                    op: format!("{op}: parameter `{name}`"),
                    expected: "f32, f64, f16 or bf16".into(),
                    found: format!(
                        "{}; keep non-float tensors out of the parameters",
                        dtype.name()
                    ),
                });
            }
            let bufs = keys(dtype)
                .into_iter()
                .map(|k| Ok((k, init(k, t)?)))
                .collect::<Result<_>>()?;
            Ok(Slot {
                device: t.device(),
                dims: t.dims(),
                name,
                dtype,
                bufs,
            })
        })
        .collect()
}

/// Zeros in the state dtype of `t`, on its device.
pub(crate) fn zeros(t: &dyn AnyTensor) -> Result<Buf> {
    let n = t.numel();
    Ok(match (t.device(), t.dtype()) {
        (DeviceKind::Cpu, DTypeKind::F64) => Buf::F64(vec![0.0; n]),
        (DeviceKind::Cpu, _) => Buf::F32(vec![0.0; n]),
        (DeviceKind::Cuda(o), DTypeKind::F64) => {
            Buf::Cuda64(CudaBackend::for_ordinal(o)?.full(n, 0.0)?)
        }
        (DeviceKind::Cuda(o), _) => Buf::Cuda32(CudaBackend::for_ordinal(o)?.full(n, 0.0)?),
    })
}

/// `t`'s values in its state dtype (f32 master weights), on its device.
pub(crate) fn values(t: &dyn AnyTensor) -> Result<Buf> {
    fn read<T: OptimFloat>(t: &dyn AnyTensor) -> Result<Buf> {
        let n = t.numel();
        let e = t.erased()?;
        let s = e
            .storage
            .downcast_ref::<Storage<T>>()
            .expect("the tensor's dtype");
        if let Storage::Cuda(s) = s {
            let be = CudaBackend::on(s.context().clone());
            let l = Layout::new(vec![n], vec![1], e.offset);
            return Ok(<T::Acc as AccFloat>::device(be.cast::<T, T::Acc>(s, &l)?));
        }
        let x = host::<T>(&e, n).expect("host storage");
        Ok(<T::Acc as AccFloat>::buf(
            x.iter().map(|v| T::Acc::from_f64(v.to_f64())).collect(),
        ))
    }
    with_float!(t.dtype(), read(t), unreachable!("float parameters"))
}

/// The host elements of a gradient.
fn host<T: DType>(e: &ErasedRef, n: usize) -> Option<&[T]> {
    match e.storage.downcast_ref::<Storage<T>>()? {
        Storage::Cuda(_) => None,
        s => Some(&s.as_cpu()[e.offset..e.offset + n]),
    }
}

/// The host elements of a parameter, for writing.
fn host_mut<'a, T: DType>(e: ErasedMut<'a>, n: usize) -> Option<&'a mut [T]> {
    let off = e.offset;
    match e.storage.downcast_mut::<Storage<T>>()? {
        Storage::Cuda(_) => None,
        s => Some(&mut s.host_vec_mut()[off..off + n]),
    }
}

/// The tensors of `params` and `grads` side by side with `slots`: an
/// `Err` naming the first parameter whose name, dims or dtype differ, or
/// that is not in host memory.
pub(crate) fn pair<'a>(
    op: &str,
    params: Vec<(String, &'a mut dyn AnyTensor)>,
    grads: Vec<(String, &'a dyn AnyTensor)>,
    slots: &[Slot],
) -> Result<Vec<(&'a mut dyn AnyTensor, &'a dyn AnyTensor)>> {
    // The first tensor one side lacks, by name: a `Vec` of another length.
    for (what, names) in [
        (
            "parameters",
            params.iter().map(|(n, _)| n).collect::<Vec<_>>(),
        ),
        ("gradients", grads.iter().map(|(n, _)| n).collect()),
    ] {
        if names.len() != slots.len() {
            let detail = match slots.get(names.len()) {
                Some(s) => format!("the {what} have no `{}`", s.name),
                None => format!(
                    "the {what} have `{}`, which the optimizer has not",
                    names[slots.len()]
                ),
            };
            return Err(invalid(
                op,
                format!(
                    "{detail} ({} tensors where the optimizer was made for {}); pass parameters and gradients of the same dims as when it was made",
                    names.len(),
                    slots.len()
                ),
            ));
        }
    }
    params
        .into_iter()
        .zip(grads)
        .zip(slots)
        .map(|(((pn, p), (gn, g)), s)| {
            for (what, name) in [("parameter", &pn), ("gradient", &gn)] {
                if *name != s.name {
                    return Err(invalid(
                        op,
                        format!(
                            "{what} `{name}` is where the optimizer has `{}`: the parameters differ from those it was made for",
                            s.name
                        ),
                    ));
                }
            }
            for (what, name, d) in [("parameter", &pn, p.device()), ("gradient", &gn, g.device())] {
                if d != s.device {
                    return Err(invalid(
                        op,
                        format!("{what} `{name}` is on {d}, the optimizer's state on {}: make the optimizer after moving the parameters", s.device),
                    ));
                }
            }
            if p.dims() != s.dims || p.dtype() != s.dtype {
                return Err(Error::shape(
                    format!("{op}: parameter `{pn}`"),
                    format!("{} {:?} as when the optimizer was made", s.dtype.name(), s.dims),
                    format!("{} {:?}", p.dtype().name(), p.dims()),
                ));
            }
            if g.dims() != s.dims {
                return Err(Error::shape(
                    format!("{op}: gradient `{gn}`"),
                    format!("the dims of its parameter, {:?}", s.dims),
                    format!("{:?}", g.dims()),
                ));
            }
            Ok((p, g))
        })
        .collect()
}

/// A chunk of one parameter: its elements, its gradient's, and those of
/// its state buffers.
pub(crate) struct Work<'a, T, A> {
    pub(crate) p: &'a mut [T],
    pub(crate) g: &'a [T],
    pub(crate) bufs: Vec<&'a mut [A]>,
}

/// The update of one chunk of a parameter of dtype `T`.
pub(crate) type ChunkFn<'f, T> = dyn Fn(&mut Work<'_, T, <T as OptimFloat>::Acc>) + Sync + 'f;

/// Runs `f` over chunks of every parameter of dtype `T` in `pairs`, in
/// parallel: one loop for all the tensors of a dtype.
pub(crate) fn for_each_chunk<T: OptimFloat>(
    pairs: &mut [(&mut dyn AnyTensor, &dyn AnyTensor)],
    slots: &mut [Slot],
    f: &ChunkFn<'_, T>,
) -> Result<()> {
    let mut grads = Vec::new();
    let mut params = Vec::new();
    for ((p, g), s) in pairs.iter_mut().zip(slots.iter_mut()) {
        if s.dtype == T::KIND && s.device == DeviceKind::Cpu && s.numel() > 0 {
            grads.push(g.erased()?);
            params.push((p.erased_mut()?, s));
        }
    }
    let mut items = Vec::new();
    for ((p, s), g) in params.into_iter().zip(&grads) {
        let n = s.numel();
        let p = host_mut::<T>(p, n).expect("checked on the host");
        let g = host::<T>(g, n).expect("checked on the host");
        let mut bufs: Vec<_> = s
            .bufs
            .iter_mut()
            .map(|(_, b)| T::Acc::slice(b).chunks_mut(CHUNK))
            .collect();
        for (p, g) in p.chunks_mut(CHUNK).zip(g.chunks(CHUNK)) {
            let bufs = bufs
                .iter_mut()
                .map(|b| b.next().expect("as long"))
                .collect();
            items.push(Work { p, g, bufs });
        }
    }
    par::for_each_mut(&mut items, &|w| f(w));
    Ok(())
}

/// Writes `step` and every slot's buffers (`{key}.{name}`) to `path`.
pub(crate) fn save(path: &Path, step: u64, slots: &[Slot]) -> Result<()> {
    let mut tensors = vec![(
        "step".to_string(),
        DTypeKind::I64,
        vec![],
        st::le_bytes(&[step as i64]),
    )];
    for s in slots {
        for (key, b) in &s.bufs {
            let n = s.numel();
            let (kind, bytes) = match b {
                Buf::F32(v) => (DTypeKind::F32, st::le_bytes(v)),
                Buf::F64(v) => (DTypeKind::F64, st::le_bytes(v)),
                Buf::Cuda32(d) => (DTypeKind::F32, st::le_bytes(&download_range(d, 0, n)?)),
                Buf::Cuda64(d) => (DTypeKind::F64, st::le_bytes(&download_range(d, 0, n)?)),
            };
            tensors.push((format!("{key}.{}", s.name), kind, s.dims.clone(), bytes));
        }
    }
    st::save(path, tensors)
}

/// Reads the step count and the buffers of `slots` (made for the
/// parameters, with the keys of the configuration) from `path`: a
/// missing, mis-shaped or extra key is an `Err` naming it.
pub(crate) fn load(path: &Path, slots: &mut [Slot]) -> Result<u64> {
    let file = st::File::open(path)?;
    let mut loader = file.loader()?;
    let step = loader.take_dims::<i64>("step", &[])?[0];
    for s in slots.iter_mut() {
        for (key, b) in s.bufs.iter_mut() {
            let name = format!("{key}.{}", s.name);
            *b = match b {
                Buf::F32(_) => Buf::F32(loader.take_dims(&name, &s.dims)?),
                Buf::F64(_) => Buf::F64(loader.take_dims(&name, &s.dims)?),
                Buf::Cuda32(d) => {
                    Buf::Cuda32(upload_like(d, &loader.take_dims::<f32>(&name, &s.dims)?)?)
                }
                Buf::Cuda64(d) => {
                    Buf::Cuda64(upload_like(d, &loader.take_dims::<f64>(&name, &s.dims)?)?)
                }
            };
        }
    }
    loader.finish()?;
    u64::try_from(step)
        .map_err(|_| Error::Load(format!("{}: a step count of {step}", path.display())))
}

/// How a step scales the gradients: by a coefficient (1.0: not at all),
/// or by the clip coefficient `min(1, max_norm / (sqrt(s) + 1e-6))` of
/// the squared total norm `s` the GPU summed at device address `norm_sq`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Clip {
    Coef(f64),
    Device { norm_sq: u64, max_norm: f64 },
}

impl Clip {
    /// The coefficient of the gradients in host memory.
    pub(crate) fn host(self) -> f64 {
        match self {
            Clip::Coef(c) => c,
            Clip::Device { .. } => 1.0,
        }
    }

    /// The kernels' `(p_norm_sq, p_clip)`.
    fn device(self) -> (u64, f64) {
        match self {
            Clip::Coef(c) => (0, c),
            Clip::Device { norm_sq, max_norm } => (norm_sq, max_norm),
        }
    }
}

/// Runs `kernel` on every GPU parameter of dtype `T` in `pairs`: one
/// table of chunk records and one launch per GPU; the gradients scaled
/// as `clip` says.
pub(crate) fn cuda_step<T: OptimFloat>(
    pairs: &mut [(&mut dyn AnyTensor, &dyn AnyTensor)],
    slots: &mut [Slot],
    kernel: OptimKernel,
    hyper: [f64; OPTIM_HYPER],
    flags: u32,
    clip: Clip,
) -> Result<()> {
    // Per ordinal: the records, and the gradients kept alive until queued.
    let mut groups: Vec<(usize, Vec<i64>, Vec<ErasedRef>)> = Vec::new();
    for ((p, g), s) in pairs.iter_mut().zip(slots.iter_mut()) {
        let DeviceKind::Cuda(ord) = s.device else {
            continue;
        };
        let n = s.numel();
        if s.dtype != T::KIND || n == 0 {
            continue;
        }
        let ge = g.erased()?;
        let gp = match ge.storage.downcast_ref::<Storage<T>>() {
            Some(Storage::Cuda(d)) => d.ptr_at(ge.offset),
            _ => unreachable!("a GPU gradient of the parameter's dtype"),
        };
        let pe = p.erased_mut()?;
        let pp = match pe.storage.downcast_mut::<Storage<T>>() {
            Some(Storage::Cuda(d)) => d.ptr_at(pe.offset),
            _ => unreachable!("a GPU parameter of its dtype"),
        };
        let at = match groups.iter().position(|g| g.0 == ord) {
            Some(i) => i,
            None => {
                groups.push((ord, Vec::new(), Vec::new()));
                groups.len() - 1
            }
        };
        let psize = std::mem::size_of::<T>();
        let records = &mut groups[at].1;
        for start in (0..n).step_by(CHUNK) {
            let mut r = [0i64; OPTIM_RECORD_WORDS];
            r[0] = (pp + (start * psize) as u64) as i64;
            r[1] = (gp + (start * psize) as u64) as i64;
            for (k, (_, b)) in s.bufs.iter().enumerate() {
                r[2 + k] = b.device_ptr(start) as i64;
            }
            r[6] = CHUNK.min(n - start) as i64;
            records.extend_from_slice(&r);
        }
        groups[at].2.push(ge);
    }
    for (ord, records, _grads) in groups {
        CudaBackend::for_ordinal(ord)?.optim_step(
            kernel,
            T::KIND,
            &records,
            hyper,
            flags,
            clip.device(),
        )?;
    }
    Ok(())
}
