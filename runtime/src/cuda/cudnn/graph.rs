//! Convolutions as cuDNN backend-API graphs: the engines PyTorch runs.
//!
//! cuDNN 9's legacy calls (`cudnnConvolutionForward` and its backward
//! twins, see [`super::plan`]) reach only a few of its kernels: on an H100
//! a bf16 3x3 convolution gets the implicit (precomputed) GEMM, about half
//! the speed of the engines cuDNN's graph API offers for the same problem.
//! This module builds each direction as a one-operation graph through the
//! backend descriptors (`cudnnBackendCreateDescriptor` and friends):
//! tensors, a convolution, the operation, the operation graph; then asks
//! the engine heuristics (`CUDNN_HEUR_MODE_A`, and the fallback list when
//! that one offers nothing), finalizes an execution plan for each engine
//! configuration that fits the workspace limit and whose numerics match
//! the problem's (no TF32 tensor cores for exact f32, no inputs converted
//! down, no reduced-precision sums), and keeps up to [`MAX_ENGINES`] of
//! them. A call runs a plan through a variant pack (the operands' device
//! pointers by unique id, and the workspace).
//!
//! The graph bakes in the scaling factors and the operands' alignment, so
//! a plan is kept per problem, direction, `beta` and alignment
//! ([`Key`]). A problem no engine takes is remembered as such and the
//! caller runs the legacy path.

use super::plan::{check, compute_type, data_type, Call, Chosen, Direction};
use super::ConvProblem;
use crate::cuda::context::Context;
use crate::cuda::tune::{fastest, Switch, LIBRARY_TIMING};
use crate::error::{Error, Result};
use cudarc::cudnn::sys as dnn;
use dnn::cudnnBackendAttributeName_t as A;
use dnn::cudnnBackendAttributeType_t as T;
use dnn::cudnnBackendDescriptorType_t as D;
use std::ffi::c_void;
use tensorfn_core::DTypeKind;

/// Most engine configurations kept (and timed) per graph: the heuristic's
/// first few hold the fast kernels; finalizing one costs a few ms.
pub(crate) const MAX_ENGINES: usize = 6;

/// Unique ids of the graph's three tensors in the variant pack.
const UID_X: i64 = b'x' as i64;
const UID_W: i64 = b'w' as i64;
const UID_Y: i64 = b'y' as i64;

/// A backend descriptor, destroyed on drop.
struct Desc(dnn::cudnnBackendDescriptor_t);

impl Drop for Desc {
    fn drop(&mut self) {
        // SAFETY: created once in `Desc::new`, destroyed once here.
        unsafe {
            let _ = dnn::cudnnBackendDestroyDescriptor(self.0);
        }
    }
}

// SAFETY: descriptors are plain host objects; the plans that hold them
// are used with the plans' lock held.
unsafe impl Send for Desc {}

impl Desc {
    fn new(kind: D) -> Result<Desc, Call> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        check("cudnnBackendCreateDescriptor", unsafe {
            dnn::cudnnBackendCreateDescriptor(kind, &mut raw)
        })?;
        Ok(Desc(raw))
    }

    /// Sets `name` to `values`, whose element type cuDNN reads as `ty`.
    fn set<V>(&self, name: A, ty: T, values: &[V]) -> Result<(), Call> {
        // SAFETY: the descriptor is alive and not finalized; `values`
        // holds `len` elements of the type `ty` names (the callers pair
        // them), which cuDNN copies.
        check("cudnnBackendSetAttribute", unsafe {
            dnn::cudnnBackendSetAttribute(
                self.0,
                name,
                ty,
                values.len() as i64,
                values.as_ptr() as *const c_void,
            )
        })
    }

    fn set_i64(&self, name: A, values: &[i64]) -> Result<(), Call> {
        self.set(name, T::CUDNN_TYPE_INT64, values)
    }

    /// Sets `name` to other descriptors (operands, operations, configs).
    fn set_descs(&self, name: A, descs: &[&Desc]) -> Result<(), Call> {
        let raw: Vec<dnn::cudnnBackendDescriptor_t> = descs.iter().map(|d| d.0).collect();
        self.set(name, T::CUDNN_TYPE_BACKEND_DESCRIPTOR, &raw)
    }

    fn finalize(self) -> Result<Desc, Call> {
        // SAFETY: the descriptor is alive; its attributes are set.
        check("cudnnBackendFinalize", unsafe {
            dnn::cudnnBackendFinalize(self.0)
        })?;
        Ok(self)
    }

    /// Reads up to `out.len()` elements of `name` (type `ty`); how many
    /// there were.
    fn get<V>(&self, name: A, ty: T, out: &mut [V]) -> Result<usize, Call> {
        let mut got = 0i64;
        // SAFETY: the descriptor is finalized; `out` has room for
        // `out.len()` elements of the type `ty` names.
        check("cudnnBackendGetAttribute", unsafe {
            dnn::cudnnBackendGetAttribute(
                self.0,
                name,
                ty,
                out.len() as i64,
                &mut got,
                out.as_mut_ptr() as *mut c_void,
            )
        })?;
        Ok(got.max(0) as usize)
    }
}

/// The key of a graph: the problem's direction, `beta` (its bits), and
/// the operands' byte alignment, all baked into the graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub(crate) dir: Direction,
    pub(crate) beta: u64,
    pub(crate) align: u8,
}

/// The operands of `dir`, given in the order of its legacy routine
/// (forward `[x, w, y]`, backward data `[dy, w, dx]`, backward filter
/// `[x, dy, dw]`), in the graph's order `[x or dx, w or dw, y or dy]`.
pub(crate) fn operands(dir: Direction, [a, b, c]: [u64; 3]) -> [u64; 3] {
    match dir {
        Direction::Forward => [a, b, c],
        Direction::BackwardData => [c, b, a],
        Direction::BackwardFilter => [a, c, b],
    }
}

/// Which of [`operands`] `dir` writes.
pub(crate) fn output(dir: Direction) -> usize {
    match dir {
        Direction::Forward => 2,
        Direction::BackwardData => 0,
        Direction::BackwardFilter => 1,
    }
}

#[cfg(test)]
thread_local! {
    static LEGACY_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with convolutions on this thread taking only the legacy
/// algorithms, so a test can compare them with the graph's engines.
#[cfg(test)]
pub(crate) fn legacy_only<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            LEGACY_ONLY.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(LEGACY_ONLY.with(|c| c.replace(true)));
    f()
}

/// Whether convolutions try a backend graph before the legacy
/// algorithms: on unless `TENSORFN_CUDNN_GRAPH=0` (a way to compare the
/// two, or to step around an engine that misbehaves).
pub(crate) fn enabled() -> bool {
    #[cfg(test)]
    if LEGACY_ONLY.with(|c| c.get()) {
        return false;
    }
    GRAPHS.get()
}

static GRAPHS: Switch = Switch::new("TENSORFN_CUDNN_GRAPH");

/// The largest power of two up to 16 dividing every pointer (and at
/// least the element size, which any pointer of the dtype has): what the
/// tensors declare as `CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT`, as PyTorch does.
pub(crate) fn alignment(ptrs: [u64; 3], dtype: DTypeKind) -> u8 {
    let common = ptrs
        .iter()
        .fold(16u64, |a, &p| a.min(1 << p.trailing_zeros().min(4)));
    common.max(dtype.size_bytes() as u64) as u8
}

/// One finalized execution plan and what it needs.
///
/// The plan keeps its engine configuration alive, as cuDNN's frontend
/// does (fields drop in order: the plan first).
struct Engine {
    plan: Desc,
    _config: Desc,
    workspace: usize,
    /// `CUDNN_ATTR_ENGINE_GLOBAL_INDEX`, for reports.
    id: i64,
}

/// The engines of one graph, the one to run first.
pub(crate) struct Engines {
    engines: Vec<Engine>,
    /// The graph's descriptors, dropped after the plans made from them.
    _graph: Vec<Desc>,
    /// The heuristic's order of the same engines' ids, for reports.
    heuristic: Vec<i64>,
    timed: bool,
    /// Why there is no engine, where the graph could not be built.
    reason: Option<String>,
}

impl Engines {
    /// A graph no engine runs, and why.
    pub(crate) fn declined(reason: String) -> Engines {
        Engines {
            engines: Vec::new(),
            _graph: Vec::new(),
            heuristic: Vec::new(),
            timed: false,
            reason: Some(reason),
        }
    }

    /// Whether no engine runs the graph (the caller takes the legacy path).
    pub(crate) fn is_empty(&self) -> bool {
        self.engines.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.engines.len()
    }

    /// Why no engine runs the graph, where that is so.
    pub(crate) fn reason(&self) -> Option<String> {
        match (&self.reason, self.engines.is_empty()) {
            (_, false) => None,
            (Some(r), true) => Some(r.clone()),
            (None, true) => Some("no engine configuration fits".into()),
        }
    }

    /// What was chosen, in the legacy path's report form.
    pub(crate) fn chosen(&self) -> Option<Chosen> {
        Some(Chosen {
            heuristic: self.heuristic.iter().map(|&i| i as i32).collect(),
            chosen: self.engines.first()?.id as i32,
            timed: self.timed,
            graph: true,
        })
    }
}

fn i64s<const N: usize>(v: [usize; N]) -> [i64; N] {
    v.map(|x| x as i64)
}

/// A finalized tensor descriptor.
fn tensor(
    p: &ConvProblem,
    uid: i64,
    dims: [usize; 4],
    strides: [usize; 4],
    align: u8,
) -> Result<Desc, Call> {
    let d = Desc::new(D::CUDNN_BACKEND_TENSOR_DESCRIPTOR)?;
    d.set(
        A::CUDNN_ATTR_TENSOR_DATA_TYPE,
        T::CUDNN_TYPE_DATA_TYPE,
        &[data_type(p.dtype)],
    )?;
    d.set_i64(A::CUDNN_ATTR_TENSOR_DIMENSIONS, &i64s(dims))?;
    d.set_i64(A::CUDNN_ATTR_TENSOR_STRIDES, &i64s(strides))?;
    d.set_i64(A::CUDNN_ATTR_TENSOR_UNIQUE_ID, &[uid])?;
    d.set_i64(A::CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, &[align as i64])?;
    d.finalize()
}

/// The finalized convolution descriptor of `p` (cross-correlation, as
/// PyTorch's `conv2d`; the groups follow from the tensors' channels).
fn convolution(p: &ConvProblem) -> Result<Desc, Call> {
    let d = Desc::new(D::CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR)?;
    d.set(
        A::CUDNN_ATTR_CONVOLUTION_COMP_TYPE,
        T::CUDNN_TYPE_DATA_TYPE,
        &[compute_type(p.dtype)],
    )?;
    d.set(
        A::CUDNN_ATTR_CONVOLUTION_CONV_MODE,
        T::CUDNN_TYPE_CONVOLUTION_MODE,
        &[dnn::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION],
    )?;
    d.set_i64(A::CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, &[2])?;
    d.set_i64(A::CUDNN_ATTR_CONVOLUTION_DILATIONS, &i64s(p.dilation))?;
    d.set_i64(A::CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, &i64s(p.stride))?;
    d.set_i64(A::CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, &i64s(p.pad))?;
    d.set_i64(A::CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, &i64s(p.pad))?;
    d.finalize()
}

/// Sets a scaling factor as the compute type reads it.
fn set_scale(op: &Desc, name: A, p: &ConvProblem, v: f64) -> Result<(), Call> {
    if p.dtype == DTypeKind::F64 {
        op.set(name, T::CUDNN_TYPE_DOUBLE, &[v])
    } else {
        op.set(name, T::CUDNN_TYPE_FLOAT, &[v as f32])
    }
}

/// The filter's strides as stored: KCRS, or KRSC (channels last).
fn filter_strides(p: &ConvProblem) -> [usize; 4] {
    let [_, c, r, s] = p.w_dims();
    match p.w_layout {
        super::FilterLayout::Kcrs => [c * r * s, r * s, s, 1],
        super::FilterLayout::Krsc => [r * s * c, 1, s * c, c],
    }
}

/// The finalized operation graph of `key.dir` on `p`: its one operation
/// over the tensors x, w and y (in the backward passes dx, dw and dy
/// take their places and uids), last, after the descriptors it was made
/// of, which are kept alive with it as cuDNN's frontend keeps them.
fn operation_graph(
    h: dnn::cudnnHandle_t,
    p: &ConvProblem,
    key: Key,
    x_strides: [usize; 4],
    y_strides: [usize; 4],
) -> Result<Vec<Desc>, Call> {
    let x = tensor(p, UID_X, [p.n, p.c_in, p.h, p.w], x_strides, key.align)?;
    let w = tensor(p, UID_W, p.w_dims(), filter_strides(p), key.align)?;
    let y = tensor(p, UID_Y, p.y_dims(), y_strides, key.align)?;
    let conv = convolution(p)?;
    let beta = f64::from_bits(key.beta);
    let (kind, names) = match key.dir {
        Direction::Forward => (
            D::CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
            [
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
            ],
        ),
        Direction::BackwardData => (
            D::CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
            [
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
            ],
        ),
        Direction::BackwardFilter => (
            D::CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
            [
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
            ],
        ),
    };
    let [nx, nw, ny, nconv, nalpha, nbeta] = names;
    let op = Desc::new(kind)?;
    op.set_descs(nx, &[&x])?;
    op.set_descs(nw, &[&w])?;
    op.set_descs(ny, &[&y])?;
    op.set_descs(nconv, &[&conv])?;
    set_scale(&op, nalpha, p, 1.0)?;
    set_scale(&op, nbeta, p, beta)?;
    let op = op.finalize()?;
    let graph = Desc::new(D::CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)?;
    graph.set(
        A::CUDNN_ATTR_OPERATIONGRAPH_HANDLE,
        T::CUDNN_TYPE_HANDLE,
        &[h],
    )?;
    graph.set_descs(A::CUDNN_ATTR_OPERATIONGRAPH_OPS, &[&op])?;
    Ok(vec![x, w, y, conv, op, graph.finalize()?])
}

/// The engine configurations the heuristics of `mode` rank for `graph`,
/// best first.
fn heuristics(graph: &Desc, mode: dnn::cudnnBackendHeurMode_t) -> Result<Vec<Desc>, Call> {
    let heur = Desc::new(D::CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR)?;
    heur.set_descs(A::CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, &[graph])?;
    heur.set(
        A::CUDNN_ATTR_ENGINEHEUR_MODE,
        T::CUDNN_TYPE_HEUR_MODE,
        &[mode],
    )?;
    let heur = heur.finalize()?;
    // How many: a null array of zero elements, as cuDNN's frontend asks.
    let mut count = 0i64;
    // SAFETY: the descriptor is finalized; cuDNN writes only the count.
    check("cudnnBackendGetAttribute", unsafe {
        dnn::cudnnBackendGetAttribute(
            heur.0,
            A::CUDNN_ATTR_ENGINEHEUR_RESULTS,
            T::CUDNN_TYPE_BACKEND_DESCRIPTOR,
            0,
            &mut count,
            std::ptr::null_mut(),
        )
    })?;
    let count = count.max(0) as usize;
    let configs = (0..count)
        .map(|_| Desc::new(D::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR))
        .collect::<Result<Vec<_>, _>>()?;
    let mut raw: Vec<_> = configs.iter().map(|c| c.0).collect();
    let got = heur.get(
        A::CUDNN_ATTR_ENGINEHEUR_RESULTS,
        T::CUDNN_TYPE_BACKEND_DESCRIPTOR,
        &mut raw,
    )?;
    let mut configs = configs;
    configs.truncate(got);
    Ok(configs)
}

/// The engine of `config`: its global index and numerical notes.
/// The notes are read as numbers: a note newer than the bindings is no
/// variant of their enum (and is no reason to reject an engine).
fn engine_of(config: &Desc) -> Result<(i64, Vec<u32>), Call> {
    let engine = Desc::new(D::CUDNN_BACKEND_ENGINE_DESCRIPTOR)?;
    let mut raw = [engine.0];
    config.get(
        A::CUDNN_ATTR_ENGINECFG_ENGINE,
        T::CUDNN_TYPE_BACKEND_DESCRIPTOR,
        &mut raw,
    )?;
    let mut id = [0i64];
    engine.get(
        A::CUDNN_ATTR_ENGINE_GLOBAL_INDEX,
        T::CUDNN_TYPE_INT64,
        &mut id,
    )?;
    // Exactly the count the library knows, as the frontend asks.
    let mut notes =
        [u32::MAX; dnn::cudnnBackendNumericalNote_t::CUDNN_NUMERICAL_NOTE_TYPE_COUNT as usize];
    let n = engine.get(
        A::CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
        T::CUDNN_TYPE_NUMERICAL_NOTE,
        &mut notes,
    )?;
    Ok((id[0], notes[..n.min(notes.len())].to_vec()))
}

/// Whether an engine with `notes` computes `p` as the legacy path does,
/// the filter PyTorch applies: exact f32 takes no tensor cores (which
/// would be TF32); no dtype takes inputs converted to a narrower type.
fn numerics_fit(p: &ConvProblem, notes: &[u32]) -> bool {
    use dnn::cudnnBackendNumericalNote_t as N;
    let exact_f32 = p.dtype == DTypeKind::F32 && !p.tf32;
    notes.iter().all(|&n| {
        if n == N::CUDNN_NUMERICAL_NOTE_TENSOR_CORE as u32 {
            !exact_f32
        } else {
            n != N::CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS as u32
        }
    })
}

/// A finalized execution plan of `config` and its workspace bytes.
fn execution_plan(h: dnn::cudnnHandle_t, config: &Desc) -> Result<(Desc, usize), Call> {
    let plan = Desc::new(D::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR)?;
    plan.set(
        A::CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
        T::CUDNN_TYPE_HANDLE,
        &[h],
    )?;
    plan.set_descs(A::CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, &[config])?;
    let plan = plan.finalize()?;
    let mut bytes = [0i64];
    plan.get(
        A::CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
        T::CUDNN_TYPE_INT64,
        &mut bytes,
    )?;
    Ok((plan, bytes[0].max(0) as usize))
}

/// Builds `key`'s graph on `p` and finalizes up to [`MAX_ENGINES`] plans
/// whose numerics fit and whose workspace is within `limit`, in the
/// heuristic's order. `Err` is a call that failed on the way (the caller
/// decides whether it means "not supported"); an empty list means no
/// engine takes the graph.
pub(crate) fn build(
    h: dnn::cudnnHandle_t,
    p: &ConvProblem,
    key: Key,
    x_strides: [usize; 4],
    y_strides: [usize; 4],
    limit: usize,
) -> Result<Engines, Call> {
    let parts = operation_graph(h, p, key, x_strides, y_strides)?;
    let graph = parts.last().expect("the graph comes last");
    let mut engines = Vec::new();
    // Why configurations were passed over, for the declined graph's
    // reason (a mode with nothing, a configuration that does not
    // finalize here, or numerics or workspace that do not fit, are no
    // fault: the next one, or the legacy path, runs).
    let mut skipped = Vec::new();
    for mode in [
        dnn::cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_A,
        dnn::cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_FALLBACK,
    ] {
        let configs = match heuristics(graph, mode) {
            Ok(c) => c,
            Err(call) => {
                skipped.push(format!("{mode:?}: {} returned {:?}", call.0, call.1));
                continue;
            }
        };
        skipped.push(format!("{mode:?}: {} configurations", configs.len()));
        for config in configs {
            if engines.len() == MAX_ENGINES {
                break;
            }
            let (id, notes) = match engine_of(&config) {
                Ok(e) => e,
                Err(call) => {
                    skipped.push(format!("engine: {} returned {:?}", call.0, call.1));
                    continue;
                }
            };
            if !numerics_fit(p, &notes) {
                skipped.push(format!("engine {id}: notes {notes:?}"));
                continue;
            }
            match execution_plan(h, &config) {
                Ok((plan, workspace)) if workspace <= limit => engines.push(Engine {
                    plan,
                    _config: config,
                    workspace,
                    id,
                }),
                Ok((_, workspace)) => skipped.push(format!("engine {id}: {workspace} bytes")),
                Err(call) => skipped.push(format!("engine {id}: {} returned {:?}", call.0, call.1)),
            }
        }
        if !engines.is_empty() {
            break;
        }
    }
    let heuristic = engines.iter().map(|e| e.id).collect();
    Ok(Engines {
        engines,
        _graph: parts,
        heuristic,
        timed: false,
        reason: (!skipped.is_empty()).then(|| skipped.join("; ")),
    })
}

/// Queues `plan` on the handle's stream with the operands `[x, w, y]`
/// (by uid; in the backward passes dx, dw or dy in their places) and a
/// workspace at `ws`.
fn launch(h: dnn::cudnnHandle_t, plan: &Desc, [x, w, y]: [u64; 3], ws: u64) -> Result<(), Call> {
    let pack = Desc::new(D::CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)?;
    let ptrs = [x, w, y].map(|v| v as *mut c_void);
    pack.set(
        A::CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
        T::CUDNN_TYPE_VOID_PTR,
        &ptrs,
    )?;
    pack.set_i64(
        A::CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
        &[UID_X, UID_W, UID_Y],
    )?;
    pack.set(
        A::CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
        T::CUDNN_TYPE_VOID_PTR,
        &[ws as *mut c_void],
    )?;
    let pack = pack.finalize()?;
    // SAFETY: the plan is finalized for this handle; the pointers are the
    // operands the graph's tensors describe, the workspace holds the
    // plan's bytes; the call only queues work on the handle's stream.
    check("cudnnBackendExecute", unsafe {
        dnn::cudnnBackendExecute(h, plan.0, pack.0)
    })
}

impl Engines {
    /// Times the engines on the call's operands (into a scratch output of
    /// `out_bytes` where `beta` is not 0, as the legacy path does) and
    /// moves the fastest first.
    pub(crate) fn time(
        &mut self,
        ctx: &Context,
        h: dnn::cudnnHandle_t,
        [x, w, y]: [u64; 3],
        out: usize,
        out_bytes: usize,
        beta: f64,
    ) -> Result<()> {
        self.timed = true;
        let bytes = self.engines.iter().map(|e| e.workspace).max().unwrap_or(0);
        let ws = match ctx.alloc(bytes) {
            Ok(block) => block,
            Err(Error::OutOfMemory { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        let scratch = if beta == 0.0 {
            None
        } else {
            match ctx.alloc(out_bytes) {
                Ok(block) => Some(block),
                Err(e) => {
                    ctx.release(ws);
                    return match e {
                        Error::OutOfMemory { .. } => Ok(()),
                        e => Err(e),
                    };
                }
            }
        };
        let mut ptrs = [x, w, y];
        if let Some(s) = &scratch {
            ptrs[out] = s.ptr;
        }
        let winner = fastest(ctx, &self.engines, &LIBRARY_TIMING, |e| {
            launch(h, &e.plan, ptrs, ws.ptr).is_ok()
        });
        // Stream order: the timed runs finish before the blocks are reused.
        ctx.release(ws);
        if let Some(s) = scratch {
            ctx.release(s);
        }
        let winner = winner?;
        let first = self.engines.remove(winner);
        self.engines.insert(0, first);
        Ok(())
    }

    /// The workspace the first engine takes (0 when there is none).
    pub(crate) fn first_workspace(&self) -> usize {
        self.engines.first().map_or(0, |e| e.workspace)
    }

    /// Queues the first engine with the operands `ptrs` and a workspace
    /// at `ws` of at least [`Engines::first_workspace`] bytes; `false`
    /// when there is none or it declines (for timing it against the
    /// legacy algorithms).
    pub(crate) fn launch_first(&self, h: dnn::cudnnHandle_t, ptrs: [u64; 3], ws: u64) -> bool {
        self.engines
            .first()
            .is_some_and(|e| launch(h, &e.plan, ptrs, ws).is_ok())
    }

    /// Runs the first engine that can, each with a workspace from the
    /// context's pool; `Ok(false)` when none could (every one out of
    /// memory or declining), and the caller takes the legacy path.
    pub(crate) fn run(
        &self,
        ctx: &Context,
        h: dnn::cudnnHandle_t,
        ptrs: [u64; 3],
    ) -> Result<bool, Result<Call>> {
        for e in &self.engines {
            let block = match ctx.alloc(e.workspace) {
                Ok(block) => block,
                Err(Error::OutOfMemory { .. }) => continue,
                Err(err) => return Err(Err(err)),
            };
            let queued = launch(h, &e.plan, ptrs, block.ptr);
            // The stream runs the queued call before any later use of the
            // block, so it can go back to the pool at once.
            ctx.release(block);
            match queued {
                Ok(()) => return Ok(true),
                Err(call) if super::unsupported(call.1) => continue,
                Err(call) => return Err(Ok(call)),
            }
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alignment_is_the_pointers_common_power_of_two() {
        assert_eq!(alignment([0x1000, 0x2000, 0x3000], DTypeKind::BF16), 16);
        assert_eq!(alignment([0x1000, 0x2008, 0x3000], DTypeKind::BF16), 8);
        assert_eq!(alignment([0x1002, 0x2000, 0x3000], DTypeKind::BF16), 2);
        // Never below the element size.
        assert_eq!(alignment([0x1002, 0x2000, 0x3000], DTypeKind::F32), 4);
        assert_eq!(alignment([0, 0, 0], DTypeKind::F64), 16);
    }

    #[test]
    fn numerics_follow_the_problem() {
        use dnn::cudnnBackendNumericalNote_t as N;
        let mut p = ConvProblem {
            n: 1,
            c_in: 1,
            h: 3,
            w: 3,
            c_out: 1,
            kh: 1,
            kw: 1,
            pad: [0, 0],
            stride: [1, 1],
            dilation: [1, 1],
            groups: 1,
            x_strides: [9, 9, 3, 1],
            y_strides: [9, 9, 3, 1],
            w_layout: super::super::FilterLayout::Kcrs,
            dtype: DTypeKind::F32,
            tf32: false,
        };
        let tc = [N::CUDNN_NUMERICAL_NOTE_TENSOR_CORE as u32];
        assert!(!numerics_fit(&p, &tc), "exact f32 takes no TF32");
        assert!(numerics_fit(&p, &[N::CUDNN_NUMERICAL_NOTE_WINOGRAD as u32]));
        assert!(numerics_fit(&p, &[]));
        assert!(numerics_fit(&p, &[99]), "an unknown note rejects nothing");
        p.tf32 = true;
        assert!(numerics_fit(&p, &tc));
        p.dtype = DTypeKind::BF16;
        assert!(numerics_fit(&p, &tc));
        assert!(numerics_fit(
            &p,
            &[N::CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION as u32]
        ));
        assert!(!numerics_fit(
            &p,
            &[tc[0], N::CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS as u32]
        ));
    }
}
