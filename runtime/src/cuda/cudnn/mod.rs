//! cuDNN, opened at run time: convolution forward, backward data and
//! backward filter, and the bias forward and backward, over raw device
//! pointers.
//!
//! cudarc opens `libcudnn.so*` on first use and binds cuDNN 9's headers
//! (9.2.1). cuDNN 9 splits into a front library and sub-libraries
//! (`libcudnn_cnn`, `libcudnn_ops`, `libcudnn_engines_*`) that the front
//! one opens itself from the loader's path. The calls used here are the
//! "legacy" convolution API that cuDNN 9 still ships in `libcudnn_cnn` and
//! `libcudnn_ops` (deprecated, not removed): tensor, filter and
//! convolution descriptors, `cudnnGetConvolution*Algorithm_v7`,
//! `cudnnGetConvolution*WorkspaceSize`, `cudnnConvolutionForward`,
//! `cudnnConvolutionBackwardData`, `cudnnConvolutionBackwardFilter`,
//! `cudnnConvolutionBackwardBias` and `cudnnAddTensor`; and to open it,
//! `cudnnGetVersion`, `cudnnOpsVersionCheck`, `cudnnCnnVersionCheck`,
//! `cudnnCreate`, `cudnnSetStream` and `cudnnDestroy`.
//!
//! Where cuDNN cannot be used (no library, a version other than 9, a
//! sub-library that does not load, a handle that cannot be created, or a
//! problem cuDNN does not support) every entry point returns
//! `Ok(Outcome::Fallback(reason))` and the caller runs its built-in
//! kernels; the first time the library is missing a one-line notice goes
//! to stderr. Nothing here panics: cudarc panics on a missing symbol and
//! [`guard`] turns that into a fallback too.
//!
//! Each context opens its own handle, bound to the context's stream, so
//! convolutions are ordered with every other kernel and copy of the
//! device. Descriptors and algorithms are made once per [`ConvProblem`]
//! (the plan cache, [`plan`]); with autotuning on (the matrix products'
//! switch) the first call in a direction times cuDNN's candidates and
//! keeps the fastest.

mod graph;
mod plan;
#[cfg(test)]
mod tests;

use super::context::{lock, Context};
use super::error::guard;
use crate::error::{Error, Result};
use cudarc::cudnn::result as dr;
use cudarc::cudnn::sys as dnn;
use plan::Plans;
use std::ffi::CString;
use std::sync::{Arc, Mutex, Once, OnceLock};
use tensorfn_core::DTypeKind;

/// How the filter is stored; its dims are `[c_out, c_in / groups, kh,
/// kw]` in both.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum FilterLayout {
    /// `[c_out, c_in / groups, kh, kw]` row-major, PyTorch's layout.
    Kcrs,
    /// `[c_out, kh, kw, c_in / groups]` row-major, the channels-last
    /// filter that goes with NHWC activations.
    Krsc,
}

/// One 2-d convolution (cross-correlation, as PyTorch's `conv2d`):
/// everything its descriptors and algorithm depend on, and the key of the
/// plan cache.
///
/// `x` is `[n, c_in, h, w]`, `y` is `[n, c_out, oh, ow]` with
/// `oh = (h + 2 pad[0] - dilation[0] (kh - 1) - 1) / stride[0] + 1` (and
/// the same for `ow`). Their strides are given in that dim order, in
/// elements, so NCHW (`[c h w, h w, w, 1]`), NHWC (`[h w c, 1, w c, c]`)
/// and any other strided view take the same path. The gradients `dx` and
/// `dy` of the backward passes have the strides of `x` and `y`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ConvProblem {
    pub(crate) n: usize,
    pub(crate) c_in: usize,
    pub(crate) h: usize,
    pub(crate) w: usize,
    pub(crate) c_out: usize,
    pub(crate) kh: usize,
    pub(crate) kw: usize,
    pub(crate) pad: [usize; 2],
    pub(crate) stride: [usize; 2],
    pub(crate) dilation: [usize; 2],
    pub(crate) groups: usize,
    pub(crate) x_strides: [usize; 4],
    pub(crate) y_strides: [usize; 4],
    pub(crate) w_layout: FilterLayout,
    /// F32, F64, F16 or BF16; the filter, the bias and the gradients have
    /// it too. F16 and BF16 accumulate in f32, F64 in f64.
    pub(crate) dtype: DTypeKind,
    /// Lets f32 use TF32 tensor cores (cuDNN's default math), as
    /// PyTorch's `torch.backends.cudnn.allow_tf32`, which is on by
    /// default; `false` asks for exact f32 FMA.
    pub(crate) tf32: bool,
}

impl ConvProblem {
    /// `[oh, ow]`, or `None` where the dilated kernel is larger than the
    /// padded input.
    pub(crate) fn out_hw(&self) -> Option<[usize; 2]> {
        let out = |i: usize, k: usize, s: usize| {
            let span = self.dilation[i].checked_mul(k.checked_sub(1)?)? + 1;
            let padded = s + 2 * self.pad[i];
            (padded >= span && self.stride[i] > 0).then(|| (padded - span) / self.stride[i] + 1)
        };
        Some([out(0, self.kh, self.h)?, out(1, self.kw, self.w)?])
    }

    /// The filter's dims, `[c_out, c_in / groups, kh, kw]`.
    pub(crate) fn w_dims(&self) -> [usize; 4] {
        [self.c_out, self.c_in / self.groups.max(1), self.kh, self.kw]
    }

    /// The output's dims, `[n, c_out, oh, ow]` (zeros where there is no
    /// output).
    pub(crate) fn y_dims(&self) -> [usize; 4] {
        let [oh, ow] = self.out_hw().unwrap_or([0, 0]);
        [self.n, self.c_out, oh, ow]
    }

    /// The problem in words, for errors and fallback reasons.
    pub(crate) fn describe(&self) -> String {
        format!(
            "conv2d {:?} x [{}, {}, {}, {}] (strides {:?}) * w {:?} ({:?}) -> y {:?} (strides {:?}), \
             padding {:?}, stride {:?}, dilation {:?}, groups {}",
            self.dtype,
            self.n,
            self.c_in,
            self.h,
            self.w,
            self.x_strides,
            self.w_dims(),
            self.w_layout,
            self.y_dims(),
            self.y_strides,
            self.pad,
            self.stride,
            self.dilation,
            self.groups,
        )
    }

    /// Checks what the caller should have checked (an `Err`, not a
    /// fallback: the built-in kernels could not run it either), and
    /// returns a fallback reason for what cuDNN cannot take but the
    /// built-in kernels can (empty dims, sizes past `i32`).
    fn check(&self) -> Result<Option<String>> {
        let bad = |expected: &str| Error::shape("conv2d (cuDNN)", expected, self.describe());
        if !matches!(
            self.dtype,
            DTypeKind::F32 | DTypeKind::F64 | DTypeKind::F16 | DTypeKind::BF16
        ) {
            return Err(Error::float_only("conv2d (cuDNN)", self.dtype));
        }
        if self.groups == 0 || self.c_in % self.groups != 0 || self.c_out % self.groups != 0 {
            return Err(bad("groups > 0 dividing both c_in and c_out"));
        }
        if self.stride.contains(&0) || self.dilation.contains(&0) {
            return Err(bad("stride and dilation of at least 1"));
        }
        if self.out_hw().is_none() {
            return Err(bad(
                "a dilated kernel no larger than the padded input (output size at least 1)",
            ));
        }
        let dims = [
            self.n, self.c_in, self.h, self.w, self.c_out, self.kh, self.kw,
        ];
        if dims.contains(&0) || self.y_dims().contains(&0) {
            return Ok(Some(format!(
                "{} has an empty dim, which cuDNN does not take",
                self.describe()
            )));
        }
        let fits = |v: usize| i32::try_from(v).is_ok();
        let largest = |d: [usize; 4], s: [usize; 4]| {
            d.iter().zip(s).map(|(&d, s)| (d - 1) * s).sum::<usize>() + 1
        };
        let all = dims
            .iter()
            .chain(&self.pad)
            .chain(&self.stride)
            .chain(&self.dilation)
            .chain(&self.x_strides)
            .chain(&self.y_strides)
            .chain(&[
                largest([self.n, self.c_in, self.h, self.w], self.x_strides),
                largest(self.y_dims(), self.y_strides),
                self.w_dims().iter().product(),
            ])
            .all(|&v| fits(v));
        if !all {
            return Ok(Some(format!(
                "{} has a size or stride past cuDNN's 32-bit range",
                self.describe()
            )));
        }
        Ok(None)
    }
}

/// What a cuDNN entry point did.
#[must_use]
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The work is queued on the context's stream.
    Done,
    /// Nothing was queued; the caller runs its built-in kernels. Why:
    /// cuDNN is not installed or not usable, or does not support this
    /// problem.
    Fallback(String),
}

/// The cuDNN library this process opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Library {
    /// The name the loader found (the first of cudarc's candidates that
    /// opens, which is also the one cudarc opens).
    pub(crate) file: String,
    /// `cudnnGetVersion()`, e.g. `90100` for 9.1.0.
    pub(crate) version: usize,
}

/// `cudnnGetVersion()`'s number as `major.minor.patch` (cuDNN 9 counts
/// `major * 10000 + minor * 100 + patch`, cuDNN 8 `major * 1000 + ...`).
pub(crate) fn version_text(v: usize) -> String {
    if v >= 90000 {
        format!("{}.{}.{}", v / 10000, v % 10000 / 100, v % 100)
    } else {
        format!("{}.{}.{}", v / 1000, v % 1000 / 100, v % 100)
    }
}

/// Whether the dynamic loader can open `name` (the same search cudarc
/// makes); the library stays loaded for cudarc if so.
fn opens(name: &str) -> bool {
    let Ok(c) = CString::new(name) else {
        return false;
    };
    // SAFETY: dlopen with a valid C string; the handle is kept open (the
    // library is about to be used), so no destructor runs.
    !unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) }.is_null()
}

/// Opens cuDNN: the first of `candidates` the loader finds, then its
/// version (9.x, the headers cudarc binds) and its sub-libraries
/// (`cudnnOpsVersionCheck`, `cudnnCnnVersionCheck`, which fail when
/// `libcudnn_ops` or `libcudnn_cnn` is missing or from another release).
/// `Err` is the reason, for the notice.
///
/// cudarc opens the first of its own candidates, which the process passes
/// here, so what is checked is what runs.
pub(crate) fn load(candidates: &[String]) -> std::result::Result<Library, String> {
    let Some(file) = candidates.iter().find(|c| opens(c)) else {
        return Err(format!(
            "{} is not on the loader's path; install cuDNN 9 (e.g. the pip wheel \
             nvidia-cudnn-cu12) and add its lib folder to LD_LIBRARY_PATH",
            candidates.first().map_or("libcudnn.so", String::as_str)
        ));
    };
    let checked = guard("loading cuDNN", || {
        let version = dr::get_version();
        if !(90000..100000).contains(&version) {
            return Err(super::error::unavailable(format!(
                "{file} is cuDNN {}; tensorfn is built for cuDNN 9",
                version_text(version)
            )));
        }
        // The two sub-libraries convolutions use; `libcudnn_adv` (RNNs,
        // attention) may be left out of an installation.
        // SAFETY: plain queries of the loaded library.
        let checks = unsafe { [dnn::cudnnOpsVersionCheck(), dnn::cudnnCnnVersionCheck()] };
        if let Some(s) = checks
            .into_iter()
            .find(|s| *s != dnn::cudnnStatus_t::CUDNN_STATUS_SUCCESS)
        {
            return Err(super::error::unavailable(format!(
                "{file} (cuDNN {}) cannot open libcudnn_ops or libcudnn_cnn: {s:?}",
                version_text(version),
            )));
        }
        Ok(version)
    });
    match checked {
        Ok(version) => Ok(Library {
            file: file.clone(),
            version,
        }),
        Err(Error::CudaUnavailable { reason }) => Err(reason),
        Err(other) => Err(other.to_string()),
    }
}

/// The cuDNN of this process, opened once.
pub(crate) fn library() -> &'static std::result::Result<Library, String> {
    static LIBRARY: OnceLock<std::result::Result<Library, String>> = OnceLock::new();
    LIBRARY.get_or_init(|| load(&cudarc::get_lib_name_candidates("cudnn")))
}

/// The line printed when cuDNN cannot be used.
pub(crate) fn notice_text(reason: &str) -> String {
    format!(
        "tensorfn: cuDNN not found ({reason}); convolutions run on the built-in GPU kernels (im2col and cuBLAS)"
    )
}

/// Prints [`notice_text`] the first time a process finds cuDNN unusable.
fn notice(reason: &str) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| eprintln!("{}", notice_text(reason)));
}

/// The cuDNN handle of one context and its plans.
pub(crate) struct Cudnn {
    handle: dnn::cudnnHandle_t,
    /// Held while a convolution is planned and queued: the handle and the
    /// plans' descriptors (whose math type is set per call) are used by
    /// one thread at a time.
    pub(crate) plans: Mutex<Plans>,
}

// SAFETY: the handle is bound to the context's stream and only used with
// the `plans` lock held, from any thread with the context current.
unsafe impl Send for Cudnn {}
unsafe impl Sync for Cudnn {}

impl Drop for Cudnn {
    fn drop(&mut self) {
        // SAFETY: created once in `create_cudnn`, destroyed once here.
        let _ = guard("destroying the cuDNN handle", || {
            let _ = unsafe { dr::destroy_handle(self.handle) };
            Ok(())
        });
    }
}

/// A handle on `ctx`'s stream, from `library` (the process's
/// [`library()`]; tests pass one that failed to load).
fn create_cudnn(
    ctx: &Context,
    library: &std::result::Result<Library, String>,
) -> std::result::Result<Cudnn, String> {
    library.as_ref().map_err(Clone::clone)?;
    let made = guard("creating a cuDNN handle", || {
        ctx.bind()?;
        let handle = dr::create_handle().map_err(|e| status("cudnnCreate", e.0, "the handle"))?;
        // SAFETY: the handle was just created; the stream lives as long as
        // the context.
        if let Err(e) = unsafe { dr::set_stream(handle, ctx.stream as dnn::cudaStream_t) } {
            // SAFETY: created above, not used after.
            let _ = unsafe { dr::destroy_handle(handle) };
            return Err(status("cudnnSetStream", e.0, "the handle"));
        }
        Ok(Cudnn {
            handle,
            plans: Mutex::new(Plans::default()),
        })
    });
    made.map_err(|e| match e {
        Error::CudaUnavailable { reason } => reason,
        other => other.to_string(),
    })
}

impl Context {
    /// The cuDNN handle of this context, created on the first
    /// convolution; `Err` is why cuDNN cannot be used (the caller falls
    /// back; the first such reason of the process is printed as the
    /// notice). A handle that could not be created is tried again next
    /// time (the library's absence is settled once per process).
    pub(crate) fn cudnn(&self) -> std::result::Result<Arc<Cudnn>, String> {
        let mut slot = lock(&self.cudnn);
        if let Some(d) = &*slot {
            return Ok(d.clone());
        }
        let d = Arc::new(create_cudnn(self, library()).inspect_err(|reason| notice(reason))?);
        *slot = Some(d.clone());
        Ok(d)
    }
}

/// `Error::Cudnn` for a failed call on `problem`.
fn status(op: &str, s: dnn::cudnnStatus_t, problem: &str) -> Error {
    Error::Cudnn {
        op: op.to_string(),
        status: format!("{s:?}"),
        problem: problem.to_string(),
    }
}

/// Whether a status means "cuDNN cannot do this here" (the caller falls
/// back) rather than a fault: the not-supported family, and sub-libraries
/// that do not load or initialise.
fn unsupported(s: dnn::cudnnStatus_t) -> bool {
    use dnn::cudnnStatus_t as S;
    matches!(s as u32, 3000..=3999)
        || matches!(
            s,
            S::CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED
                | S::CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH
                | S::CUDNN_STATUS_NOT_INITIALIZED
        )
}

#[cfg(test)]
thread_local! {
    static TURNED_OFF: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with every cuDNN entry point falling back on this thread, so
/// a test can run the built-in kernels on a machine that has cuDNN (and
/// compare them with cuDNN's results).
#[cfg(test)]
pub(crate) fn without_cudnn<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            TURNED_OFF.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(TURNED_OFF.with(|c| c.replace(true)));
    f()
}

/// Runs one cuDNN entry point: checks the problem, gets the handle (or
/// why not), and turns a panic inside cudarc into a fallback.
fn run(
    ctx: &Context,
    p: &ConvProblem,
    f: impl FnOnce(&Cudnn) -> Result<Outcome>,
) -> Result<Outcome> {
    if let Some(reason) = p.check()? {
        return Ok(Outcome::Fallback(reason));
    }
    #[cfg(test)]
    if TURNED_OFF.with(|c| c.get()) {
        return Ok(Outcome::Fallback(
            "cuDNN is turned off on this thread".into(),
        ));
    }
    let dnn = match ctx.cudnn() {
        Ok(d) => d,
        Err(reason) => return Ok(Outcome::Fallback(reason)),
    };
    ctx.bind()?;
    match guard("calling cuDNN", || f(&dnn)) {
        Err(Error::CudaUnavailable { reason }) => Ok(Outcome::Fallback(reason)),
        other => other,
    }
}

/// `y = conv(x, w) + beta * y`.
pub(crate) fn conv_forward(
    ctx: &Context,
    p: &ConvProblem,
    x: u64,
    w: u64,
    y: u64,
    beta: f64,
) -> Result<Outcome> {
    run(ctx, p, |dnn| {
        let mut plans = lock(&dnn.plans);
        plans.forward(ctx, dnn.handle, p, x, w, y, beta)
    })
}

/// `y += bias` (`[c_out]`, broadcast over `n`, `oh`, `ow`), after
/// [`conv_forward`]. On `Fallback` nothing was written and the caller
/// adds the bias itself.
///
/// The bias is a second call (`cudnnAddTensor`), not cuDNN's fused
/// `cudnnConvolutionBiasActivationForward`: without an activation that
/// call only runs the implicit-precomputed-GEMM algorithm, so fusing would
/// give up the algorithm the heuristics pick. It is its own entry point so
/// that a dtype cuDNN adds no bias in falls back alone, after the
/// convolution has run.
pub(crate) fn conv_add_bias(ctx: &Context, p: &ConvProblem, bias: u64, y: u64) -> Result<Outcome> {
    run(ctx, p, |dnn| {
        let mut plans = lock(&dnn.plans);
        plans.add_bias(dnn.handle, p, bias, y)
    })
}

/// `dx = conv_transpose(dy, w) + beta * dx`: the gradient of
/// [`conv_forward`] with respect to `x`.
pub(crate) fn conv_backward_data(
    ctx: &Context,
    p: &ConvProblem,
    dy: u64,
    w: u64,
    dx: u64,
    beta: f64,
) -> Result<Outcome> {
    run(ctx, p, |dnn| {
        let mut plans = lock(&dnn.plans);
        plans.backward_data(ctx, dnn.handle, p, dy, w, dx, beta)
    })
}

/// `dw = grad_w(x, dy) + beta * dw`: the gradient of [`conv_forward`]
/// with respect to the filter (`beta = 1` accumulates).
pub(crate) fn conv_backward_filter(
    ctx: &Context,
    p: &ConvProblem,
    x: u64,
    dy: u64,
    dw: u64,
    beta: f64,
) -> Result<Outcome> {
    run(ctx, p, |dnn| {
        let mut plans = lock(&dnn.plans);
        plans.backward_filter(ctx, dnn.handle, p, x, dy, dw, beta)
    })
}

/// `db = sum of dy over n, oh, ow + beta * db` (`db` is `[c_out]`): the
/// gradient of the bias of [`conv_forward`].
pub(crate) fn conv_backward_bias(
    ctx: &Context,
    p: &ConvProblem,
    dy: u64,
    db: u64,
    beta: f64,
) -> Result<Outcome> {
    run(ctx, p, |dnn| {
        let mut plans = lock(&dnn.plans);
        plans.backward_bias(dnn.handle, p, dy, db, beta)
    })
}
