//! The plan cache: descriptors and algorithms per [`ConvProblem`].
//!
//! A plan holds the tensor, filter and convolution descriptors of one
//! problem, built on its first call, and for each direction (forward,
//! backward data, backward filter) the algorithms cuDNN's heuristics
//! rank, chosen on the first call in that direction. Later calls with the
//! same problem make no descriptor and ask no heuristic.
//!
//! The candidates come from `cudnnGetConvolution*Algorithm_v7`, cuDNN's
//! heuristics, ranked by expected speed; those whose workspace fits
//! [`workspace_limit`] are kept. The heuristic's ranking is a prediction,
//! and for common shapes (a bf16 3x3 convolution, say) another of its
//! candidates runs faster. So, as PyTorch does with
//! `torch.backends.cudnn.benchmark = True`, the first call in a direction
//! times the candidates on the device with the project's own tuner
//! ([`fastest`], the policy cuBLASLt products follow: the heuristic's
//! choice stays unless another is clearly faster) and the plan keeps the
//! winner first. The same switch as the products' turns it off
//! ([`crate::set_matmul_autotune`], `TENSORFN_MATMUL_AUTOTUNE=0`); then
//! the heuristic's first choice runs. Timing is done here rather than
//! with `cudnnFind*`, which would time every algorithm (workspace-hungry
//! ones included), write the caller's outputs (the backward-filter search
//! overwrites `dw`, wrong for an accumulating call) and pick differently
//! from run to run where two algorithms are close; [`fastest`] times only
//! the ranked candidates that fit, into a scratch output where the call
//! accumulates (`beta != 0`), and keeps the default unless beaten by a
//! margin. The candidates after the chosen one are kept for when the
//! workspace cannot be allocated or the call says it does not support
//! the problem after all.

use super::graph::{self, Engines, Key};
use super::{status, unsupported, ConvProblem, FilterLayout, Outcome};
use crate::cuda::context::Context;
use crate::cuda::lt::matmul_autotune;
use crate::cuda::tune::{fastest, LIBRARY_TIMING};
use crate::error::{Error, Result};
use cudarc::cudnn::sys as dnn;
use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use tensorfn_core::DTypeKind;

/// Most workspace bytes an algorithm may ask for: an eighth of the
/// device, at most 2 GiB, at least 64 MiB. Faster algorithms (FFT,
/// Winograd) trade workspace for speed; past this the next one ranked
/// runs instead.
pub(crate) fn workspace_limit(total_memory: usize) -> usize {
    (total_memory / 8).clamp(64 << 20, 2 << 30)
}

#[cfg(test)]
thread_local! {
    static UNTIMED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with new plans on this thread taking the heuristic's first
/// choice untimed, so a test can compare it with the timed one without
/// touching the process-wide switch.
#[cfg(test)]
pub(crate) fn untimed<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            UNTIMED.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(UNTIMED.with(|c| c.replace(true)));
    f()
}

/// Whether a new plan times its candidates (the products' switch).
fn timing_on() -> bool {
    #[cfg(test)]
    if UNTIMED.with(|c| c.get()) {
        return false;
    }
    matmul_autotune()
}

/// A tensor descriptor, destroyed on drop.
struct TensorDesc(dnn::cudnnTensorDescriptor_t);

impl Drop for TensorDesc {
    fn drop(&mut self) {
        // SAFETY: created once in `TensorDesc::new`, destroyed once here.
        unsafe {
            let _ = dnn::cudnnDestroyTensorDescriptor(self.0);
        }
    }
}

impl TensorDesc {
    fn new(t: dnn::cudnnDataType_t, dims: [usize; 4], strides: [usize; 4]) -> Result<Self, Call> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        check("cudnnCreateTensorDescriptor", unsafe {
            dnn::cudnnCreateTensorDescriptor(&mut raw)
        })?;
        let d = TensorDesc(raw);
        let dims = dims.map(|v| v as i32);
        let strides = strides.map(|v| v as i32);
        // SAFETY: `d` was just created; the arrays hold 4 values.
        check("cudnnSetTensorNdDescriptor", unsafe {
            dnn::cudnnSetTensorNdDescriptor(d.0, t, 4, dims.as_ptr(), strides.as_ptr())
        })?;
        Ok(d)
    }
}

/// `strides` with those of size-1 dims replaced by what a packed tensor
/// in NCHW (or NHWC) order would have there. Such a stride addresses
/// nothing, but cuDNN reads the layout from the strides: an NHWC tensor
/// with one channel (channel stride 1, like its width) or a batch of one
/// with any batch stride could otherwise be read as another layout or
/// as overlapping. PyTorch does the same (`fixSizeOneDimStride`).
fn unit_strides(dims: [usize; 4], mut strides: [usize; 4], nhwc: bool) -> [usize; 4] {
    let order = if nhwc { [1, 3, 2, 0] } else { [3, 2, 1, 0] };
    let mut next = 1;
    for d in order {
        if dims[d] == 1 {
            strides[d] = next;
        } else {
            next = strides[d] * dims[d];
        }
    }
    strides
}

/// A filter descriptor, destroyed on drop.
struct FilterDesc(dnn::cudnnFilterDescriptor_t);

impl Drop for FilterDesc {
    fn drop(&mut self) {
        // SAFETY: created once in `FilterDesc::new`, destroyed once here.
        unsafe {
            let _ = dnn::cudnnDestroyFilterDescriptor(self.0);
        }
    }
}

impl FilterDesc {
    fn new(t: dnn::cudnnDataType_t, layout: FilterLayout, dims: [usize; 4]) -> Result<Self, Call> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        check("cudnnCreateFilterDescriptor", unsafe {
            dnn::cudnnCreateFilterDescriptor(&mut raw)
        })?;
        let d = FilterDesc(raw);
        let format = match layout {
            FilterLayout::Kcrs => dnn::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
            FilterLayout::Krsc => dnn::cudnnTensorFormat_t::CUDNN_TENSOR_NHWC,
        };
        // Dims in KCRS order whatever the format.
        let dims = dims.map(|v| v as i32);
        // SAFETY: `d` was just created; the array holds 4 values.
        check("cudnnSetFilterNdDescriptor", unsafe {
            dnn::cudnnSetFilterNdDescriptor(d.0, t, format, 4, dims.as_ptr())
        })?;
        Ok(d)
    }
}

/// A convolution descriptor, destroyed on drop.
struct ConvDesc(dnn::cudnnConvolutionDescriptor_t);

impl Drop for ConvDesc {
    fn drop(&mut self) {
        // SAFETY: created once in `ConvDesc::new`, destroyed once here.
        unsafe {
            let _ = dnn::cudnnDestroyConvolutionDescriptor(self.0);
        }
    }
}

impl ConvDesc {
    fn new(p: &ConvProblem) -> Result<Self, Call> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        check("cudnnCreateConvolutionDescriptor", unsafe {
            dnn::cudnnCreateConvolutionDescriptor(&mut raw)
        })?;
        let d = ConvDesc(raw);
        let pad = p.pad.map(|v| v as i32);
        let stride = p.stride.map(|v| v as i32);
        let dilation = p.dilation.map(|v| v as i32);
        // SAFETY: `d` was just created; the arrays hold 2 values.
        unsafe {
            check(
                "cudnnSetConvolutionNdDescriptor",
                dnn::cudnnSetConvolutionNdDescriptor(
                    d.0,
                    2,
                    pad.as_ptr(),
                    stride.as_ptr(),
                    dilation.as_ptr(),
                    dnn::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                    compute_type(p.dtype),
                ),
            )?;
            check(
                "cudnnSetConvolutionGroupCount",
                dnn::cudnnSetConvolutionGroupCount(d.0, p.groups as i32),
            )?;
        }
        d.set_math(base_math(p))?;
        Ok(d)
    }

    fn set_math(&self, math: dnn::cudnnMathType_t) -> Result<(), Call> {
        // SAFETY: the descriptor is alive; the plans' lock is held.
        check("cudnnSetConvolutionMathType", unsafe {
            dnn::cudnnSetConvolutionMathType(self.0, math)
        })
    }
}

/// A failed cuDNN call: the routine and its status.
pub(crate) struct Call(pub(super) &'static str, pub(super) dnn::cudnnStatus_t);

pub(super) fn check(op: &'static str, s: dnn::cudnnStatus_t) -> Result<(), Call> {
    if s == dnn::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(Call(op, s))
    }
}

impl Call {
    /// A fallback where cuDNN does not support the problem, else an error.
    fn outcome(self, p: &ConvProblem) -> Result<Outcome> {
        if unsupported(self.1) {
            Ok(Outcome::Fallback(format!(
                "cuDNN does not support {} ({} returned {:?})",
                p.describe(),
                self.0,
                self.1
            )))
        } else {
            Err(status(self.0, self.1, &p.describe()))
        }
    }
}

pub(super) fn data_type(t: DTypeKind) -> dnn::cudnnDataType_t {
    use dnn::cudnnDataType_t as D;
    match t {
        DTypeKind::F64 => D::CUDNN_DATA_DOUBLE,
        DTypeKind::F16 => D::CUDNN_DATA_HALF,
        DTypeKind::BF16 => D::CUDNN_DATA_BFLOAT16,
        _ => D::CUDNN_DATA_FLOAT,
    }
}

/// The accumulator: f64 for f64, f32 for the rest (cuDNN's "pseudo half"
/// configurations for f16 and bf16).
pub(super) fn compute_type(t: DTypeKind) -> dnn::cudnnDataType_t {
    match t {
        DTypeKind::F64 => dnn::cudnnDataType_t::CUDNN_DATA_DOUBLE,
        _ => dnn::cudnnDataType_t::CUDNN_DATA_FLOAT,
    }
}

/// The math type the heuristics are asked with: tensor cores for f16 and
/// bf16; cuDNN's default for f32, which lets TF32 tensor cores in, or FMA
/// when TF32 is off; the default for f64.
fn base_math(p: &ConvProblem) -> dnn::cudnnMathType_t {
    use dnn::cudnnMathType_t as M;
    match p.dtype {
        DTypeKind::F16 | DTypeKind::BF16 => M::CUDNN_TENSOR_OP_MATH,
        DTypeKind::F32 if !p.tf32 => M::CUDNN_FMA_MATH,
        _ => M::CUDNN_DEFAULT_MATH,
    }
}

/// The direction of a call, which picks the heuristic and the routine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Direction {
    Forward,
    BackwardData,
    BackwardFilter,
}

/// An algorithm of one direction.
#[derive(Clone, Copy, Debug)]
enum Algo {
    Forward(dnn::cudnnConvolutionFwdAlgo_t),
    BackwardData(dnn::cudnnConvolutionBwdDataAlgo_t),
    BackwardFilter(dnn::cudnnConvolutionBwdFilterAlgo_t),
}

impl Algo {
    fn direction(self) -> Direction {
        match self {
            Algo::Forward(_) => Direction::Forward,
            Algo::BackwardData(_) => Direction::BackwardData,
            Algo::BackwardFilter(_) => Direction::BackwardFilter,
        }
    }

    /// cuDNN's number for the algorithm (`CUDNN_CONVOLUTION_*_ALGO_*`).
    fn id(self) -> i32 {
        match self {
            Algo::Forward(a) => a as i32,
            Algo::BackwardData(a) => a as i32,
            Algo::BackwardFilter(a) => a as i32,
        }
    }
}

/// The algorithms of one direction of a plan.
#[derive(Clone, Debug)]
struct Ranked {
    /// The candidates that fit, the one to run first: the timed winner
    /// when timing ran, else the heuristic's order.
    choices: Vec<Choice>,
    /// The heuristic's order of the same candidates, for reports.
    heuristic: Vec<Algo>,
    /// Whether the candidates were timed.
    timed: bool,
}

/// What a plan chose in one direction, for tests and timing reports.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) struct Chosen {
    /// The candidates' algorithm ids in the heuristic's order.
    pub(crate) heuristic: Vec<i32>,
    /// The id of the algorithm that runs first.
    pub(crate) chosen: i32,
    /// Whether the candidates were timed.
    pub(crate) timed: bool,
    /// Whether they are engines of a backend graph ([`graph`]) rather
    /// than legacy algorithms.
    pub(crate) graph: bool,
}

/// One ranked algorithm: what to set and how much workspace it takes.
#[derive(Clone, Copy, Debug)]
struct Choice {
    algo: Algo,
    math: dnn::cudnnMathType_t,
    workspace: usize,
}

/// The descriptors of one problem and the algorithms chosen for it.
struct Plan {
    x: TensorDesc,
    y: TensorDesc,
    bias: TensorDesc,
    w: FilterDesc,
    conv: ConvDesc,
    /// Ranked algorithms per direction (`None`: not asked yet; no
    /// choices: none fits, the caller falls back).
    forward: Option<Ranked>,
    backward_data: Option<Ranked>,
    backward_filter: Option<Ranked>,
    /// The backend graphs built so far, by direction, `beta` and
    /// alignment; an empty one means no engine takes it and the legacy
    /// algorithms run.
    graphs: HashMap<Key, Engines>,
    /// The graphs whose fastest engine lost to the fastest legacy
    /// algorithm when both were timed on the first call: the legacy
    /// algorithms run them.
    legacy_faster: HashSet<Key>,
}

impl Plan {
    fn new(p: &ConvProblem) -> Result<Plan, Call> {
        let t = data_type(p.dtype);
        let nhwc = p.w_layout == FilterLayout::Krsc;
        let desc = |dims, strides| TensorDesc::new(t, dims, unit_strides(dims, strides, nhwc));
        Ok(Plan {
            x: desc([p.n, p.c_in, p.h, p.w], p.x_strides)?,
            y: desc(p.y_dims(), p.y_strides)?,
            bias: desc([1, p.c_out, 1, 1], [p.c_out, 1, 1, 1])?,
            w: FilterDesc::new(t, p.w_layout, p.w_dims())?,
            conv: ConvDesc::new(p)?,
            forward: None,
            backward_data: None,
            backward_filter: None,
            graphs: HashMap::new(),
            legacy_faster: HashSet::new(),
        })
    }

    /// Asks the heuristics for `dir`'s algorithms, best first, and the
    /// workspace of each; keeps those that fit `limit`.
    fn rank(
        &self,
        h: dnn::cudnnHandle_t,
        p: &ConvProblem,
        dir: Direction,
        limit: usize,
    ) -> Result<Vec<Choice>, Call> {
        let (x, y, w, c) = (self.x.0, self.y.0, self.w.0, self.conv.0);
        let mut max = 0i32;
        let mut got = 0i32;
        // (algorithm, status, math type) of each result.
        let mut ranked: Vec<(Algo, dnn::cudnnStatus_t, dnn::cudnnMathType_t)> = Vec::new();
        self.conv.set_math(base_math(p))?;
        // SAFETY: the descriptors are alive; each result array holds
        // `max` entries, zero-initialised (every field's enum has a
        // variant 0), and cuDNN writes at most `max`.
        unsafe {
            match dir {
                Direction::Forward => {
                    check(
                        "cudnnGetConvolutionForwardAlgorithmMaxCount",
                        dnn::cudnnGetConvolutionForwardAlgorithmMaxCount(h, &mut max),
                    )?;
                    let mut perf = vec![
                        std::mem::zeroed::<dnn::cudnnConvolutionFwdAlgoPerf_t>();
                        max.max(1) as usize
                    ];
                    check(
                        "cudnnGetConvolutionForwardAlgorithm_v7",
                        dnn::cudnnGetConvolutionForwardAlgorithm_v7(
                            h,
                            x,
                            w,
                            c,
                            y,
                            max,
                            &mut got,
                            perf.as_mut_ptr(),
                        ),
                    )?;
                    ranked.extend(
                        perf.iter()
                            .take(got.max(0) as usize)
                            .map(|r| (Algo::Forward(r.algo), r.status, r.mathType)),
                    );
                }
                Direction::BackwardData => {
                    check(
                        "cudnnGetConvolutionBackwardDataAlgorithmMaxCount",
                        dnn::cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &mut max),
                    )?;
                    let mut perf = vec![
                        std::mem::zeroed::<dnn::cudnnConvolutionBwdDataAlgoPerf_t>();
                        max.max(1) as usize
                    ];
                    check(
                        "cudnnGetConvolutionBackwardDataAlgorithm_v7",
                        dnn::cudnnGetConvolutionBackwardDataAlgorithm_v7(
                            h,
                            w,
                            y,
                            c,
                            x,
                            max,
                            &mut got,
                            perf.as_mut_ptr(),
                        ),
                    )?;
                    ranked.extend(
                        perf.iter()
                            .take(got.max(0) as usize)
                            .map(|r| (Algo::BackwardData(r.algo), r.status, r.mathType)),
                    );
                }
                Direction::BackwardFilter => {
                    check(
                        "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount",
                        dnn::cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &mut max),
                    )?;
                    let mut perf = vec![
                        std::mem::zeroed::<dnn::cudnnConvolutionBwdFilterAlgoPerf_t>(
                        );
                        max.max(1) as usize
                    ];
                    check(
                        "cudnnGetConvolutionBackwardFilterAlgorithm_v7",
                        dnn::cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                            h,
                            x,
                            y,
                            c,
                            w,
                            max,
                            &mut got,
                            perf.as_mut_ptr(),
                        ),
                    )?;
                    ranked.extend(
                        perf.iter()
                            .take(got.max(0) as usize)
                            .map(|r| (Algo::BackwardFilter(r.algo), r.status, r.mathType)),
                    );
                }
            }
        }
        let mut choices = Vec::new();
        for (algo, st, math) in ranked {
            if st != dnn::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
                continue;
            }
            // TF32 off means FMA whatever the algorithm was ranked with,
            // as PyTorch does.
            let math = if p.dtype == DTypeKind::F32 && !p.tf32 {
                dnn::cudnnMathType_t::CUDNN_FMA_MATH
            } else {
                math
            };
            self.conv.set_math(math)?;
            let mut bytes = 0usize;
            // SAFETY: as above; `bytes` is a local.
            let s = unsafe {
                match algo {
                    Algo::Forward(a) => {
                        dnn::cudnnGetConvolutionForwardWorkspaceSize(h, x, w, c, y, a, &mut bytes)
                    }
                    Algo::BackwardData(a) => dnn::cudnnGetConvolutionBackwardDataWorkspaceSize(
                        h, w, y, c, x, a, &mut bytes,
                    ),
                    Algo::BackwardFilter(a) => dnn::cudnnGetConvolutionBackwardFilterWorkspaceSize(
                        h, x, y, c, w, a, &mut bytes,
                    ),
                }
            };
            if s == dnn::cudnnStatus_t::CUDNN_STATUS_SUCCESS && bytes <= limit {
                choices.push(Choice {
                    algo,
                    math,
                    workspace: bytes,
                });
            }
        }
        Ok(choices)
    }

    fn slot(&self, dir: Direction) -> Option<&Ranked> {
        match dir {
            Direction::Forward => self.forward.as_ref(),
            Direction::BackwardData => self.backward_data.as_ref(),
            Direction::BackwardFilter => self.backward_filter.as_ref(),
        }
    }

    /// Queues `choice` on the handle's stream with the operands `[a, b,
    /// out]` in the order of its routine and a workspace at `ws` of at
    /// least `choice.workspace` bytes.
    fn launch(
        &self,
        h: dnn::cudnnHandle_t,
        choice: &Choice,
        [a, b, out]: [u64; 3],
        alpha: &Scale,
        beta: &Scale,
        ws: u64,
    ) -> Result<(), Call> {
        let (x, y, w, c) = (self.x.0, self.y.0, self.w.0, self.conv.0);
        let (a, b, out) = (a as *const c_void, b as *const c_void, out as *mut c_void);
        let (ws, bytes) = (ws as *mut c_void, choice.workspace);
        self.conv.set_math(choice.math)?;
        // SAFETY: the descriptors are alive and describe the operands the
        // caller passed; the workspace holds `bytes`; the scaling factors
        // outlive the call, which only queues work on the handle's stream.
        unsafe {
            match choice.algo {
                Algo::Forward(algo) => check(
                    "cudnnConvolutionForward",
                    dnn::cudnnConvolutionForward(
                        h,
                        alpha.ptr(),
                        x,
                        a,
                        w,
                        b,
                        c,
                        algo,
                        ws,
                        bytes,
                        beta.ptr(),
                        y,
                        out,
                    ),
                ),
                Algo::BackwardData(algo) => check(
                    "cudnnConvolutionBackwardData",
                    dnn::cudnnConvolutionBackwardData(
                        h,
                        alpha.ptr(),
                        w,
                        b,
                        y,
                        a,
                        c,
                        algo,
                        ws,
                        bytes,
                        beta.ptr(),
                        x,
                        out,
                    ),
                ),
                Algo::BackwardFilter(algo) => check(
                    "cudnnConvolutionBackwardFilter",
                    dnn::cudnnConvolutionBackwardFilter(
                        h,
                        alpha.ptr(),
                        x,
                        a,
                        y,
                        b,
                        c,
                        algo,
                        ws,
                        bytes,
                        beta.ptr(),
                        w,
                        out,
                    ),
                ),
            }
        }
    }

    /// The index of the fastest of `choices` (all of one direction),
    /// timed with [`fastest`] on the context's stream; `None` (keep the
    /// heuristic's order) when the workspace or scratch output cannot be
    /// allocated.
    ///
    /// The inputs are the call's own. The output is the call's own where
    /// `beta` is 0 (the call overwrites it anyway), and a scratch buffer of
    /// the same extent otherwise: an accumulating call (`dw += ...` with
    /// beta 1) must add once, and timing runs each candidate many times.
    fn time(
        &self,
        ctx: &Context,
        h: dnn::cudnnHandle_t,
        p: &ConvProblem,
        choices: &[Choice],
        [a, b, out]: [u64; 3],
        beta: f64,
    ) -> Result<Option<usize>> {
        let bytes = choices.iter().map(|c| c.workspace).max().unwrap_or(0);
        let ws = match ctx.alloc(bytes) {
            Ok(block) => block,
            Err(Error::OutOfMemory { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let scratch = if beta == 0.0 {
            None
        } else {
            match ctx.alloc(out_bytes(p, choices[0].algo.direction())) {
                Ok(block) => Some(block),
                Err(Error::OutOfMemory { .. }) => {
                    ctx.release(ws);
                    return Ok(None);
                }
                Err(e) => {
                    ctx.release(ws);
                    return Err(e);
                }
            }
        };
        let out = scratch.as_ref().map_or(out, |s| s.ptr);
        let alpha = Scale::new(p.dtype, 1.0);
        let beta = Scale::new(p.dtype, beta);
        let launch = |c: &Choice| {
            self.launch(h, c, [a, b, out], &alpha, &beta, ws.ptr)
                .is_ok()
        };
        let winner = fastest(ctx, choices, &LIBRARY_TIMING, launch);
        // Stream order: the timed runs finish before the blocks are reused.
        ctx.release(ws);
        if let Some(s) = scratch {
            ctx.release(s);
        }
        winner.map(Some)
    }
}

/// Whether a graph's engines are settled enough to race the legacy
/// algorithms: timed among themselves, or a single one.
fn timed_or_single(timed: bool, engines: &Engines) -> bool {
    timed || engines.len() == 1
}

/// Bytes the output of `dir` spans, as its descriptor addresses it.
fn out_bytes(p: &ConvProblem, dir: Direction) -> usize {
    let nhwc = p.w_layout == FilterLayout::Krsc;
    let (dims, strides) = match dir {
        Direction::Forward => (p.y_dims(), p.y_strides),
        Direction::BackwardData => ([p.n, p.c_in, p.h, p.w], p.x_strides),
        Direction::BackwardFilter => {
            let n = p.w_dims().iter().product::<usize>();
            return n * p.dtype.size_bytes();
        }
    };
    let strides = unit_strides(dims, strides, nhwc);
    let span = dims
        .iter()
        .zip(strides)
        .map(|(d, s)| d.saturating_sub(1) * s)
        .sum::<usize>()
        + 1;
    span * p.dtype.size_bytes()
}

/// The scaling factors of a call: `f64` for f64 data, `f32` otherwise,
/// as cuDNN reads them.
enum Scale {
    F32(f32),
    F64(f64),
}

impl Scale {
    fn new(t: DTypeKind, v: f64) -> Scale {
        if t == DTypeKind::F64 {
            Scale::F64(v)
        } else {
            Scale::F32(v as f32)
        }
    }

    fn ptr(&self) -> *const c_void {
        match self {
            Scale::F32(v) => v as *const f32 as *const c_void,
            Scale::F64(v) => v as *const f64 as *const c_void,
        }
    }
}

/// The plans of one context, by problem.
#[derive(Default)]
pub(crate) struct Plans {
    map: HashMap<ConvProblem, Plan>,
    /// Plans built so far (descriptor sets made).
    pub(crate) built: usize,
    /// Heuristic queries made so far (one per problem and direction).
    pub(crate) ranked: usize,
    /// Candidate timings made so far (at most one per problem and
    /// direction; none with timing off or a single candidate).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) timed: usize,
}

impl Plans {
    /// How many problems have a plan.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// The plan of `p`, built on first use; `Err` is the outcome to
    /// return (a fallback or an error).
    fn plan(&mut self, p: &ConvProblem) -> Result<&mut Plan, Result<Outcome>> {
        if !self.map.contains_key(p) {
            let plan = Plan::new(p).map_err(|call| call.outcome(p))?;
            self.built += 1;
            self.map.insert(*p, plan);
        }
        Ok(self.map.get_mut(p).expect("inserted above"))
    }

    /// The ranked algorithms of `p` in `dir`, asked of the heuristics
    /// and (with timing on) timed on the first call only, on that call's
    /// operands `ptrs` (see [`Plans::execute`]).
    #[allow(clippy::too_many_arguments)]
    fn choices(
        &mut self,
        ctx: &Context,
        h: dnn::cudnnHandle_t,
        p: &ConvProblem,
        dir: Direction,
        limit: usize,
        ptrs: [u64; 3],
        beta: f64,
    ) -> Result<Vec<Choice>, Result<Outcome>> {
        let plan = self.plan(p)?;
        if let Some(r) = plan.slot(dir) {
            return Ok(r.choices.clone());
        }
        let mut choices = plan
            .rank(h, p, dir, limit)
            .map_err(|call| call.outcome(p))?;
        let heuristic = choices.iter().map(|c| c.algo).collect();
        let timed = choices.len() > 1 && timing_on();
        if timed {
            // Timing holds the plans' lock: other convolutions on this
            // context wait for it, once per problem and direction.
            if let Some(i) = plan.time(ctx, h, p, &choices, ptrs, beta).map_err(Err)? {
                let winner = choices.remove(i);
                choices.insert(0, winner);
            }
            self.timed += 1;
        }
        let ranked = Ranked {
            choices: choices.clone(),
            heuristic,
            timed,
        };
        let plan = self.map.get_mut(p).expect("planned above");
        match dir {
            Direction::Forward => plan.forward = Some(ranked),
            Direction::BackwardData => plan.backward_data = Some(ranked),
            Direction::BackwardFilter => plan.backward_filter = Some(ranked),
        }
        self.ranked += 1;
        Ok(choices)
    }

    /// What `p`'s plan chose in `dir`, if it has run in that direction.
    #[cfg_attr(not(test), allow(dead_code))]
    /// The engines of a graph that ran come first (any `beta` and
    /// alignment, the most aligned first).
    pub(crate) fn chosen(&self, p: &ConvProblem, dir: Direction) -> Option<Chosen> {
        let plan = self.map.get(p)?;
        let mut graphs: Vec<_> = plan
            .graphs
            .iter()
            .filter(|(k, e)| k.dir == dir && !e.is_empty() && !plan.legacy_faster.contains(k))
            .collect();
        graphs.sort_by_key(|(k, _)| std::cmp::Reverse(k.align));
        if let Some((_, e)) = graphs.first() {
            return e.chosen();
        }
        let r = plan.slot(dir)?;
        Some(Chosen {
            heuristic: r.heuristic.iter().map(|a| a.id()).collect(),
            chosen: r.choices.first()?.algo.id(),
            timed: r.timed,
            graph: false,
        })
    }

    /// Why `p`'s graphs in `dir` have no engine, where one has none.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn graph_declined(&self, p: &ConvProblem, dir: Direction) -> Option<String> {
        let plan = self.map.get(p)?;
        plan.graphs
            .iter()
            .filter(|(k, e)| k.dir == dir && e.is_empty())
            .find_map(|(_, e)| e.reason())
    }

    /// Runs `dir` on `p` as a backend graph ([`graph`]): builds the graph
    /// of this `beta` and alignment on first use (ranking, finalizing and,
    /// with timing on, timing its engines), then queues its first engine.
    /// `Ok(false)`: no engine takes it, the legacy algorithms run.
    #[allow(clippy::too_many_arguments)]
    fn run_graph(
        &mut self,
        ctx: &Context,
        h: dnn::cudnnHandle_t,
        p: &ConvProblem,
        dir: Direction,
        ptrs: [u64; 3],
        beta: f64,
        limit: usize,
    ) -> Result<bool> {
        if !graph::enabled() {
            return Ok(false);
        }
        let key = Key {
            dir,
            beta: beta.to_bits(),
            align: graph::alignment(ptrs, p.dtype),
        };
        let Ok(plan) = self.plan(p) else {
            return Ok(false);
        };
        if !plan.graphs.contains_key(&key) {
            let nhwc = p.w_layout == FilterLayout::Krsc;
            let xs = unit_strides([p.n, p.c_in, p.h, p.w], p.x_strides, nhwc);
            let ys = unit_strides(p.y_dims(), p.y_strides, nhwc);
            // Any failure to build the graph leaves the legacy path, which
            // reports what it cannot do itself.
            let mut engines = graph::build(h, p, key, xs, ys, limit).unwrap_or_else(|call| {
                Engines::declined(format!("{} returned {:?}", call.0, call.1))
            });
            let timed = engines.len() > 1 && timing_on();
            if timed {
                let ops = graph::operands(dir, ptrs);
                let out = graph::output(dir);
                engines.time(ctx, h, ops, out, out_bytes(p, dir), beta)?;
            }
            let plan = self.map.get_mut(p).expect("planned above");
            plan.graphs.insert(key, engines);
            self.ranked += 1;
            self.timed += usize::from(timed);
            if timed_or_single(timed, &self.map[p].graphs[&key])
                && self.legacy_beats_graph(ctx, h, p, dir, key, ptrs, beta, limit)?
            {
                let plan = self.map.get_mut(p).expect("planned above");
                plan.legacy_faster.insert(key);
            }
        }
        if self.map[p].legacy_faster.contains(&key) {
            return Ok(false);
        }
        let engines = &self.map[p].graphs[&key];
        match engines.run(ctx, h, graph::operands(dir, ptrs)) {
            Ok(done) => Ok(done),
            Err(Ok(call)) => Err(status(call.0, call.1, &p.describe())),
            Err(Err(e)) => Err(e),
        }
    }

    /// Whether the fastest legacy algorithm of `p` in `dir` (ranked and
    /// timed by [`Plans::choices`]) beats the graph's fastest engine for
    /// `key`, timed against each other on the call's operands (into a
    /// scratch output where `beta` is not 0). The graph's engines leave
    /// out TF32 for exact f32, where a legacy algorithm can be the faster;
    /// comparing both keeps a problem from running slower than the legacy
    /// path alone. `false` with timing off, without a legacy candidate or
    /// without the memory to time them.
    #[allow(clippy::too_many_arguments)]
    fn legacy_beats_graph(
        &mut self,
        ctx: &Context,
        h: dnn::cudnnHandle_t,
        p: &ConvProblem,
        dir: Direction,
        key: Key,
        ptrs: [u64; 3],
        beta: f64,
        limit: usize,
    ) -> Result<bool> {
        if !timing_on() {
            return Ok(false);
        }
        // Counted as part of the graph's one timing.
        let timed = self.timed;
        let choices = self.choices(ctx, h, p, dir, limit, ptrs, beta);
        self.timed = timed;
        let Ok(choices) = choices else {
            return Ok(false);
        };
        let Some(legacy) = choices.first() else {
            return Ok(false);
        };
        let plan = &self.map[p];
        let engines = &plan.graphs[&key];
        let bytes = engines.first_workspace().max(legacy.workspace);
        let ws = match ctx.alloc(bytes) {
            Ok(block) => block,
            Err(Error::OutOfMemory { .. }) => return Ok(false),
            Err(e) => return Err(e),
        };
        let scratch = if beta == 0.0 {
            None
        } else {
            match ctx.alloc(out_bytes(p, dir)) {
                Ok(block) => Some(block),
                Err(e) => {
                    ctx.release(ws);
                    return match e {
                        Error::OutOfMemory { .. } => Ok(false),
                        e => Err(e),
                    };
                }
            }
        };
        // The legacy routine writes its third operand; the graph's
        // operands are the same pointers in its own order.
        let mut own = ptrs;
        if let Some(s) = &scratch {
            own[2] = s.ptr;
        }
        let (alpha, beta) = (Scale::new(p.dtype, 1.0), Scale::new(p.dtype, beta));
        let winner = fastest(ctx, &[false, true], &LIBRARY_TIMING, |&is_legacy| {
            if is_legacy {
                plan.launch(h, legacy, own, &alpha, &beta, ws.ptr).is_ok()
            } else {
                engines.launch_first(h, graph::operands(dir, own), ws.ptr)
            }
        });
        // Stream order: the timed runs finish before the blocks are reused.
        ctx.release(ws);
        if let Some(s) = scratch {
            ctx.release(s);
        }
        Ok(winner? == 1)
    }

    /// Drops `p`'s plan, so the next call plans (and times) it afresh.
    #[cfg(test)]
    pub(crate) fn forget(&mut self, p: &ConvProblem) {
        self.map.remove(p);
    }

    /// Plans and queues one direction: ranks (and times) its algorithms
    /// once, then tries them in that order, each with a workspace from
    /// the context's pool. `ptrs` are the three operands in the order of
    /// `dir`'s routine: forward `[x, w, y]`, backward data `[dy, w, dx]`,
    /// backward filter `[x, dy, dw]`.
    fn execute(
        &mut self,
        ctx: &Context,
        h: dnn::cudnnHandle_t,
        p: &ConvProblem,
        dir: Direction,
        ptrs: [u64; 3],
        beta: f64,
    ) -> Result<Outcome> {
        let limit = workspace_limit(ctx.total_memory);
        if self.run_graph(ctx, h, p, dir, ptrs, beta, limit)? {
            return Ok(Outcome::Done);
        }
        let choices = match self.choices(ctx, h, p, dir, limit, ptrs, beta) {
            Ok(c) => c,
            Err(outcome) => return outcome,
        };
        if choices.is_empty() {
            return Ok(Outcome::Fallback(format!(
                "cuDNN has no algorithm for {} within {} MiB of workspace",
                p.describe(),
                limit >> 20
            )));
        }
        let plan = self.map.get(p).expect("planned above");
        let alpha = Scale::new(p.dtype, 1.0);
        let beta = Scale::new(p.dtype, beta);
        for (i, choice) in choices.iter().enumerate() {
            let last = i + 1 == choices.len();
            let block = match ctx.alloc(choice.workspace) {
                Ok(block) => block,
                Err(Error::OutOfMemory { .. }) if !last => continue,
                Err(e) => return Err(e),
            };
            let queued = plan.launch(h, choice, ptrs, &alpha, &beta, block.ptr);
            crate::cuda::counters::add(crate::cuda::Count::LibraryCall, 1);
            // The stream runs the queued call before any later use of the
            // block, so it can go back to the pool at once.
            ctx.release(block);
            match queued {
                Ok(()) => return Ok(Outcome::Done),
                Err(call) if unsupported(call.1) && !last => continue,
                Err(call) => return call.outcome(p),
            }
        }
        unreachable!("the last choice returns")
    }

    /// See [`super::conv_forward`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn forward(
        &mut self,
        ctx: &Context,
        h: dnn::cudnnHandle_t,
        p: &ConvProblem,
        x: u64,
        w: u64,
        y: u64,
        beta: f64,
    ) -> Result<Outcome> {
        self.execute(ctx, h, p, Direction::Forward, [x, w, y], beta)
    }

    /// See [`super::conv_add_bias`].
    pub(crate) fn add_bias(
        &mut self,
        h: dnn::cudnnHandle_t,
        p: &ConvProblem,
        bias: u64,
        y: u64,
    ) -> Result<Outcome> {
        let plan = match self.plan(p) {
            Ok(plan) => plan,
            Err(outcome) => return outcome,
        };
        let one = Scale::new(p.dtype, 1.0);
        // SAFETY: the descriptors are alive; `bias` holds `c_out` values
        // and `y` the output; the call only queues work.
        let s = unsafe {
            dnn::cudnnAddTensor(
                h,
                one.ptr(),
                plan.bias.0,
                bias as *const c_void,
                one.ptr(),
                plan.y.0,
                y as *mut c_void,
            )
        };
        match check("cudnnAddTensor", s) {
            Ok(()) => Ok(Outcome::Done),
            Err(call) => call.outcome(p),
        }
    }

    /// See [`super::conv_backward_data`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn backward_data(
        &mut self,
        ctx: &Context,
        h: dnn::cudnnHandle_t,
        p: &ConvProblem,
        dy: u64,
        w: u64,
        dx: u64,
        beta: f64,
    ) -> Result<Outcome> {
        self.execute(ctx, h, p, Direction::BackwardData, [dy, w, dx], beta)
    }

    /// See [`super::conv_backward_filter`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn backward_filter(
        &mut self,
        ctx: &Context,
        h: dnn::cudnnHandle_t,
        p: &ConvProblem,
        x: u64,
        dy: u64,
        dw: u64,
        beta: f64,
    ) -> Result<Outcome> {
        self.execute(ctx, h, p, Direction::BackwardFilter, [x, dy, dw], beta)
    }

    /// See [`super::conv_backward_bias`].
    pub(crate) fn backward_bias(
        &mut self,
        h: dnn::cudnnHandle_t,
        p: &ConvProblem,
        dy: u64,
        db: u64,
        beta: f64,
    ) -> Result<Outcome> {
        let plan = match self.plan(p) {
            Ok(plan) => plan,
            Err(outcome) => return outcome,
        };
        let alpha = Scale::new(p.dtype, 1.0);
        let beta = Scale::new(p.dtype, beta);
        // SAFETY: the descriptors are alive; `dy` is the output's
        // gradient and `db` holds `c_out` values; the call only queues.
        let s = unsafe {
            dnn::cudnnConvolutionBackwardBias(
                h,
                alpha.ptr(),
                plan.y.0,
                dy as *const c_void,
                beta.ptr(),
                plan.bias.0,
                db as *mut c_void,
            )
        };
        match check("cudnnConvolutionBackwardBias", s) {
            Ok(()) => Ok(Outcome::Done),
            Err(call) => call.outcome(p),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::unit_strides;

    #[test]
    fn size_one_dims_get_packed_strides() {
        // NHWC with one channel: the channel stride is the innermost.
        assert_eq!(
            unit_strides([2, 1, 4, 5], [20, 1, 5, 1], true),
            [20, 1, 5, 1]
        );
        assert_eq!(
            unit_strides([2, 1, 4, 5], [20, 20, 5, 1], true),
            [20, 1, 5, 1]
        );
        // A batch of one keeps no odd batch stride.
        assert_eq!(
            unit_strides([1, 3, 4, 5], [999, 20, 5, 1], false),
            [60, 20, 5, 1]
        );
        // NHWC 1x1 spatial: h and w strides follow the channels.
        assert_eq!(unit_strides([2, 8, 1, 1], [8, 1, 8, 8], true), [8, 1, 8, 8]);
        assert_eq!(unit_strides([2, 8, 1, 1], [8, 1, 0, 0], true), [8, 1, 8, 8]);
        // Padded rows are kept.
        assert_eq!(
            unit_strides([2, 3, 6, 7], [200, 60, 10, 1], false),
            [200, 60, 10, 1]
        );
        // The bias, [1, c, 1, 1].
        assert_eq!(unit_strides([1, 6, 1, 1], [6, 1, 1, 1], true), [6, 1, 6, 6]);
        assert_eq!(
            unit_strides([1, 6, 1, 1], [6, 1, 1, 1], false),
            [6, 1, 1, 1]
        );
    }
}
