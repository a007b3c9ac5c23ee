//! Matrix products through cuBLASLt, planned once per shape.
//!
//! A [`Plan`] holds the cuBLASLt descriptors of one kind of product (dtype,
//! compute type, transposes, sizes, leading dimensions, batch strides, how
//! the bias is added, epilogue, operand alignments) and the algorithm
//! chosen for it. Building a plan asks cuBLASLt's heuristic for up to
//! [`CANDIDATES`] algorithms. With autotuning on (the default, see
//! [`set_matmul_autotune`]) each candidate is timed on the call's own
//! operands and the fastest is kept: the heuristic's first choice is a
//! prediction, and for some shapes another of its candidates runs faster.
//! Later calls of the same kind reuse the plan, so the hot path creates no
//! descriptor and queries no heuristic.
//!
//! The plans of a context live as long as its cuBLAS handles.

use super::alloc::CudaStorage;
use super::context::Context;
use super::error::{cublas, lock};
use super::handles::{AddendForm, Blas, Descriptors, Epilogue, Plan, PlanKey, WORKSPACE_BYTES};
use super::tune::{fastest, Switch, LIBRARY_TIMING};
use crate::dtype::DType;
use crate::error::Result;
use cudarc::cublaslt::result as ltr;
use cudarc::cublaslt::sys as lt;
use std::ffi::c_void;
use std::sync::Arc;
use tensorfn_core::DTypeKind;

/// How many of cuBLASLt's heuristic candidates are timed for a new shape.
const CANDIDATES: usize = 8;

/// Plans kept per context; past this many shapes the cache starts over,
/// so a program with ever-new shapes does not grow it without bound.
const MAX_PLANS: usize = 4096;

static AUTOTUNE: Switch = Switch::new("TENSORFN_MATMUL_AUTOTUNE");

/// `TENSORFN_MATMUL_LOG=1`: one line on stderr per product queued, with
/// its shape, transposes, epilogue and algorithm, in launch order, to
/// match a kernel profile's product kernels with their shapes.
static LOG: Switch = Switch::off("TENSORFN_MATMUL_LOG");

/// `TENSORFN_MATMUL_SUM_EPILOGUE=0`: no bias-gradient epilogue
/// (`BGRADA`/`BGRADB`), so a weight gradient and its bias gradient run as
/// the product and a column sum (`colsum.rs`), to compare the two forms.
/// On by default: on an H100 cuBLASLt's reduction kernel
/// (`globalKernelBgradAB_v2`) took 9.7 µs for a `[8192, 768]` bf16
/// gradient against 12.1 µs for the two column-sum passes, and GPT-2's
/// step 19.98 ms against 20.12 (BENCHMARKS.md).
static SUM_EPILOGUE: Switch = Switch::new("TENSORFN_MATMUL_SUM_EPILOGUE");

/// Whether products of a bias-gradient epilogue go to cuBLASLt (see
/// `SUM_EPILOGUE`).
pub(crate) fn sum_epilogue() -> bool {
    SUM_EPILOGUE.get()
}

/// `TENSORFN_MATMUL_GELU_EPILOGUE=0`: no GELU epilogue with an aux matrix
/// (`GELU_AUX_BIAS`, `DGELU`, `DGELU_BGRAD`), so a GELU layer's forward
/// and backward run as the product and separate kernels, to compare the
/// two forms.
static GELU_EPILOGUE: Switch = Switch::new("TENSORFN_MATMUL_GELU_EPILOGUE");

/// Whether products of a GELU epilogue with an aux matrix go to cuBLASLt
/// (see `GELU_EPILOGUE`).
pub(crate) fn gelu_epilogue() -> bool {
    GELU_EPILOGUE.get()
}

/// Writes the `TENSORFN_MATMUL_LOG` line of a product: `how` is the
/// algorithm, or the library that ran it.
pub(crate) fn log_product(
    dtype: DTypeKind,
    (batch, m, k, n): (usize, usize, usize, usize),
    trans: (bool, bool),
    epilogue: Epilogue,
    how: &str,
) {
    if LOG.get() {
        let t = |x: bool| if x { 'T' } else { 'N' };
        eprintln!(
            "tensorfn matmul {dtype} batch {batch} m {m} k {k} n {n} a{} b{} {epilogue:?} {how}",
            t(trans.0),
            t(trans.1)
        );
    }
}

/// Whether a GPU matrix product of a new shape times cuBLASLt's candidate
/// algorithms and keeps the fastest (`true`, the default), or takes
/// cuBLASLt's first heuristic choice untimed (`false`). The environment
/// variable `TENSORFN_MATMUL_AUTOTUNE=0` turns it off until this is called.
///
/// Timing costs one synchronisation and a few extra runs of the product
/// the first time each shape (with its dtype, transposes, strides,
/// alignment and bias form) is multiplied on a device; every later call of
/// that shape reuses the choice. Different algorithms may sum the f32
/// accumulation in a different order, so with autotuning on, two
/// processes can pick different algorithms for a shape and differ in the
/// last bits; turn it off for a choice that depends on the shape alone.
/// A plan already made keeps its algorithm.
///
/// The same switch decides whether a convolution of a new shape run
/// through cuDNN times cuDNN's candidate algorithms (as PyTorch's
/// `torch.backends.cudnn.benchmark = True`) or takes its heuristic's
/// first choice.
///
/// ```
/// use tensorfn_runtime::{matmul_autotune, set_matmul_autotune};
/// set_matmul_autotune(false);
/// assert!(!matmul_autotune());
/// set_matmul_autotune(true);
/// assert!(matmul_autotune());
/// ```
pub fn set_matmul_autotune(on: bool) {
    AUTOTUNE.set(on);
}

/// Whether new GPU matrix-product shapes are autotuned (see
/// [`set_matmul_autotune`]).
///
/// ```
/// // On unless the program or TENSORFN_MATMUL_AUTOTUNE=0 turns it off.
/// let on = tensorfn_runtime::matmul_autotune();
/// assert_eq!(on, std::env::var("TENSORFN_MATMUL_AUTOTUNE").map_or(true, |v| v != "0"));
/// ```
pub fn matmul_autotune() -> bool {
    AUTOTUNE.get()
}

/// How cuBLASLt adds the bias to the product, with nothing copied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Addend {
    /// No bias: D = alpha * A B.
    Nothing,
    /// One value per output column (row-major), at this address: the
    /// BIAS epilogue, added after `alpha * a @ b`.
    Columns(u64),
    /// A full `m x n` row-major matrix at `ptr` with rows `ld` apart:
    /// cuBLASLt's C operand, scaled by beta, with the output as D.
    Matrix { ptr: u64, ld: usize },
}

impl Addend {
    fn form(self) -> AddendForm {
        match self {
            Addend::Nothing => AddendForm::Nothing,
            Addend::Columns(_) => AddendForm::Columns,
            Addend::Matrix { ld, .. } => AddendForm::Matrix { ld },
        }
    }
}

/// The cuBLASLt form of `beta * bias` for a single `m x n` product, and
/// the scale to run it with; `None` when the bias must be copied into
/// the output first (a 0-D or otherwise broadcast bias, a batch, a bias
/// vector with `beta != 1` or one not aligned for vector loads).
pub(crate) fn addend_of<T: DType>(
    ptr: u64,
    strides: (usize, usize),
    (m, n): (usize, usize),
    batch: usize,
    alpha: T,
    beta: T,
) -> Option<(Addend, Scale)> {
    if batch != 1 {
        return None;
    }
    let (sr, sc) = strides;
    let unit_cols = n == 1 || sc == 1;
    // A row vector repeated down the rows: the bias epilogue, which reads
    // it with vector loads, so keep it aligned.
    if m > 1 && sr == 0 && unit_cols {
        return (beta.to_f64() == 1.0 && alignment(ptr) >= 16)
            .then(|| (Addend::Columns(ptr), Scale::new(alpha, T::zero())));
    }
    // Row-major rows, `ld` apart: C. A single row is any row-major matrix.
    let ld = if m == 1 { n } else { sr };
    (unit_cols && ld >= n && ld <= i32::MAX as usize)
        .then(|| (Addend::Matrix { ptr, ld }, Scale::new(alpha, beta)))
}

/// The largest power of two (up to 256) dividing a device address.
fn alignment(ptr: u64) -> u32 {
    1 << ptr.trailing_zeros().min(8)
}

fn data_type(t: DTypeKind) -> lt::cudaDataType {
    match t {
        DTypeKind::F32 => lt::cudaDataType::CUDA_R_32F,
        DTypeKind::F64 => lt::cudaDataType::CUDA_R_64F,
        DTypeKind::F16 => lt::cudaDataType::CUDA_R_16F,
        DTypeKind::BF16 => lt::cudaDataType::CUDA_R_16BF,
        other => unreachable!("matrix products are only called with floats, not {other}"),
    }
}

fn compute_type(t: DTypeKind, tf32: bool) -> (lt::cublasComputeType_t, lt::cudaDataType) {
    use lt::cublasComputeType_t as C;
    match t {
        DTypeKind::F64 => (C::CUBLAS_COMPUTE_64F, lt::cudaDataType::CUDA_R_64F),
        DTypeKind::F32 if tf32 => (
            C::CUBLAS_COMPUTE_32F_FAST_TF32,
            lt::cudaDataType::CUDA_R_32F,
        ),
        // f16 and bf16 accumulate in f32 too.
        _ => (C::CUBLAS_COMPUTE_32F, lt::cudaDataType::CUDA_R_32F),
    }
}

/// How cuBLAS reads one operand of `C = A B`: the device address of its
/// first matrix, whether to transpose, its leading dimension and the
/// distance between batch matrices.
pub(crate) struct Operand<T: DType> {
    pub(crate) ptr: u64,
    pub(crate) trans: bool,
    pub(crate) ld: usize,
    pub(crate) batch_stride: usize,
    /// The contiguous copy, when the view could not be read in place.
    pub(crate) _copy: Option<CudaStorage<T>>,
}

/// Alpha and beta in the scale type of the product (f64 for f64, f32
/// otherwise), as bytes that outlive the call.
pub(crate) enum Scale {
    F32(f32, f32),
    F64(f64, f64),
}

impl Scale {
    pub(crate) fn new<T: DType>(alpha: T, beta: T) -> Scale {
        if T::KIND == DTypeKind::F64 {
            Scale::F64(alpha.to_f64(), beta.to_f64())
        } else {
            Scale::F32(alpha.to_f64() as f32, beta.to_f64() as f32)
        }
    }

    pub(crate) fn ptrs(&self) -> (*const c_void, *const c_void) {
        match self {
            Scale::F32(a, b) => (a as *const f32 as _, b as *const f32 as _),
            Scale::F64(a, b) => (a as *const f64 as _, b as *const f64 as _),
        }
    }
}

/// One batched product for cuBLASLt: operands, sizes and where the result
/// and bias go.
pub(crate) struct Product<'a, T: DType> {
    pub(crate) a: &'a Operand<T>,
    pub(crate) b: &'a Operand<T>,
    /// `(batch, m, k, n)`.
    pub(crate) dims: (usize, usize, usize, usize),
    pub(crate) addend: Addend,
    pub(crate) out: u64,
    pub(crate) scale: Scale,
    pub(crate) epilogue: Epilogue,
    /// Where a `SumKOfA`/`SumKOfB`/`DGeluSumM` epilogue writes its sums
    /// (`0` for the other epilogues).
    pub(crate) sum_out: u64,
    /// The aux matrix of the GELU epilogues: a contiguous row-major
    /// `m x n` pre-activation, written by `GeluAux` and read by `DGelu`
    /// and `DGeluSumM` (`0` for the other epilogues).
    pub(crate) aux: u64,
    pub(crate) tf32: bool,
    /// Operand shapes, for error messages.
    pub(crate) shapes: &'a str,
}

impl<T: DType> Product<'_, T> {
    /// C's address and leading dimension: the bias matrix, or the output
    /// itself when C is unused (beta = 0).
    fn c(&self) -> (u64, usize) {
        match self.addend {
            Addend::Matrix { ptr, ld } => (ptr, ld),
            Addend::Columns(_) | Addend::Nothing => (self.out, self.dims.3),
        }
    }

    fn key(&self) -> PlanKey {
        let (c_ptr, _) = self.c();
        PlanKey {
            dtype: T::KIND,
            tf32: self.tf32,
            trans: (self.a.trans, self.b.trans),
            dims: self.dims,
            ld: (self.a.ld, self.b.ld),
            batch_stride: (self.a.batch_stride, self.b.batch_stride),
            addend: self.addend.form(),
            epilogue: self.epilogue,
            align: [
                alignment(self.a.ptr),
                alignment(self.b.ptr),
                alignment(c_ptr),
                alignment(self.out),
            ],
            aux_align: if self.aux == 0 {
                0
            } else {
                alignment(self.aux)
            },
        }
    }

    fn err(&self, what: &str, e: ltr::CublasError) -> crate::error::Error {
        cublas(what, e.0, self.shapes.to_string())
    }
}

/// `epilogue(alpha * a @ b + addend)` through cuBLASLt, with the plan of
/// its shape (made and, with autotuning on, timed on first use). Returns
/// `false` (nothing queued) when cuBLASLt has no algorithm for it, so the
/// caller falls back to cuBLAS.
pub(crate) fn matmul<T: DType>(
    blas: &Blas,
    handle: lt::cublasLtHandle_t,
    ctx: &Context,
    p: &Product<'_, T>,
) -> Result<bool> {
    let _queue = lock(&blas.queue);
    let key = p.key();
    let cached = lock(&blas.plans.0).get(&key).cloned();
    let plan = match cached {
        Some(plan) => plan,
        None => {
            // Timing holds the queue: other products wait for it.
            let plan = make_plan(blas, handle, ctx, p)?.map(Arc::new);
            let mut plans = lock(&blas.plans.0);
            if plans.len() >= MAX_PLANS {
                plans.clear();
            }
            plans.insert(key, plan.clone());
            plan
        }
    };
    let Some(plan) = plan else {
        return Ok(false);
    };
    if LOG.get() {
        let addend = match p.addend {
            Addend::Columns(_) => " bias",
            Addend::Matrix { .. } => " C",
            Addend::Nothing => "",
        };
        let how = format!("cuBLASLt{addend} {}", describe_algo(&plan.algo));
        log_product(T::KIND, p.dims, (p.a.trans, p.b.trans), p.epilogue, &how);
    }
    run(blas, handle, ctx, p, &plan.desc, &plan.algo).map_err(|e| p.err("cublasLtMatmul", e))?;
    super::counters::add(super::Count::LibraryCall, 1);
    Ok(true)
}

/// Queues the product with `algo`; the caller holds the queue lock.
fn run<T: DType>(
    blas: &Blas,
    handle: lt::cublasLtHandle_t,
    ctx: &Context,
    p: &Product<'_, T>,
    d: &Descriptors,
    algo: &lt::cublasLtMatmulAlgo_t,
) -> std::result::Result<(), ltr::CublasError> {
    // The bias address is the bias vector read by the BIAS epilogues, or
    // the sums written by the bias-gradient ones.
    let bias = match (p.addend, p.epilogue) {
        (_, Epilogue::SumKOfA | Epilogue::SumKOfB | Epilogue::DGeluSumM) => Some(p.sum_out),
        (Addend::Columns(bias), _) => Some(bias),
        _ => None,
    };
    if let Some(bias) = bias {
        let bias_ptr = bias as *const c_void;
        // SAFETY: the attribute is a device pointer, passed by address.
        unsafe {
            ltr::set_matmul_desc_attribute(
                d.matmul,
                lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                &bias_ptr as *const *const c_void as _,
                std::mem::size_of::<*const c_void>(),
            )?;
        }
    }
    set_aux(d, p)?;
    let (alpha, beta) = p.scale.ptrs();
    let (c_ptr, _) = p.c();
    let l = &d.layouts;
    // SAFETY: operands, bias (vector or C) and output are live device
    // memory matching the layouts (the plan's key fixes their shapes,
    // strides and alignments); the workspace is the context's, used in
    // stream order.
    unsafe {
        ltr::matmul(
            handle,
            d.matmul,
            alpha,
            beta,
            p.b.ptr as *const c_void,
            l[0],
            p.a.ptr as *const c_void,
            l[1],
            c_ptr as *const c_void,
            l[2],
            p.out as *mut c_void,
            l[3],
            algo,
            blas.workspace as *mut c_void,
            WORKSPACE_BYTES,
            ctx.stream as lt::cudaStream_t,
        )
    }
}

/// Sets the aux address of a GELU epilogue on the descriptor, per call
/// like the bias address (and before the heuristic query, which picks
/// algorithms by its alignment).
fn set_aux<T: DType>(
    d: &Descriptors,
    p: &Product<'_, T>,
) -> std::result::Result<(), ltr::CublasError> {
    if p.aux == 0 {
        return Ok(());
    }
    let aux = p.aux as *const c_void;
    // SAFETY: the attribute is a device pointer, passed by address.
    unsafe {
        ltr::set_matmul_desc_attribute(
            d.matmul,
            lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
            &aux as *const *const c_void as _,
            std::mem::size_of::<*const c_void>(),
        )
    }
}

/// Creates the descriptors of `p`'s shape and picks its algorithm; `None`
/// when cuBLASLt has none.
fn make_plan<T: DType>(
    blas: &Blas,
    handle: lt::cublasLtHandle_t,
    ctx: &Context,
    p: &Product<'_, T>,
) -> Result<Option<Plan>> {
    let desc = descriptors(p)?;
    set_aux(&desc, p).map_err(|e| p.err("cublasLtMatmulDescSetAttribute", e))?;
    let candidates = candidates(handle, &desc);
    let algo = match candidates.len() {
        0 => return Ok(None),
        1 => candidates[0],
        _ if !matmul_autotune() => candidates[0],
        _ => {
            let launch =
                |algo: &lt::cublasLtMatmulAlgo_t| run(blas, handle, ctx, p, &desc, algo).is_ok();
            candidates[fastest(ctx, &candidates, &LIBRARY_TIMING, launch)?]
        }
    };
    Ok(Some(Plan { desc, algo }))
}

fn descriptors<T: DType>(p: &Product<'_, T>) -> Result<Descriptors> {
    let (batch, m, k, n) = p.dims;
    let (compute, scale_type) = compute_type(T::KIND, p.tf32);
    let dt = data_type(T::KIND);
    let mut d = Descriptors {
        matmul: ltr::create_matmul_desc(compute, scale_type)
            .map_err(|e| p.err("cublasLtMatmulDescCreate", e))?,
        layouts: Vec::new(),
        pref: std::ptr::null_mut(),
    };
    // Cᵀ (n x m) = Bᵀ (n x k) · Aᵀ (k x m), all column-major: cuBLASLt's
    // A is our `b` and its B our `a`.
    let trans_a: i32 = p.b.trans.into();
    let trans_b: i32 = p.a.trans.into();
    use lt::cublasLtEpilogue_t as E;
    let epi = match (p.addend, p.epilogue) {
        (Addend::Columns(_), Epilogue::None) => E::CUBLASLT_EPILOGUE_BIAS,
        (Addend::Columns(_), Epilogue::Relu) => E::CUBLASLT_EPILOGUE_RELU_BIAS,
        (Addend::Columns(_), Epilogue::Gelu) => E::CUBLASLT_EPILOGUE_GELU_BIAS,
        (_, Epilogue::None) => E::CUBLASLT_EPILOGUE_DEFAULT,
        (_, Epilogue::Relu) => E::CUBLASLT_EPILOGUE_RELU,
        (_, Epilogue::Gelu) => E::CUBLASLT_EPILOGUE_GELU,
        (_, Epilogue::SumKOfA) => E::CUBLASLT_EPILOGUE_BGRADB,
        (_, Epilogue::SumKOfB) => E::CUBLASLT_EPILOGUE_BGRADA,
        (Addend::Columns(_), Epilogue::GeluAux) => E::CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
        (_, Epilogue::GeluAux) => E::CUBLASLT_EPILOGUE_GELU_AUX,
        (_, Epilogue::DGelu) => E::CUBLASLT_EPILOGUE_DGELU,
        (_, Epilogue::DGeluSumM) => E::CUBLASLT_EPILOGUE_DGELU_BGRAD,
    };
    let set = |attr, ptr: *const c_void, size| {
        // SAFETY: `ptr` points at `size` bytes of the attribute's type.
        unsafe { ltr::set_matmul_desc_attribute(d.matmul, attr, ptr, size) }
            .map_err(|e| p.err("cublasLtMatmulDescSetAttribute", e))
    };
    use lt::cublasLtMatmulDescAttributes_t as A;
    set(
        A::CUBLASLT_MATMUL_DESC_TRANSA,
        &trans_a as *const i32 as _,
        4,
    )?;
    set(
        A::CUBLASLT_MATMUL_DESC_TRANSB,
        &trans_b as *const i32 as _,
        4,
    )?;
    set(A::CUBLASLT_MATMUL_DESC_EPILOGUE, &epi as *const _ as _, 4)?;
    if p.aux != 0 {
        // The aux matrix is stored as D is (column-major n x m, our
        // row-major m x n), in D's dtype (cuBLASLt's default aux type for
        // the GELU epilogues); its leading dimension is in elements and
        // must be a multiple of 8 (the caller checks).
        let aux_ld = n as i64;
        set(
            A::CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
            &aux_ld as *const i64 as _,
            8,
        )?;
    }
    // A bias vector is read in the tensors' dtype: cuBLASLt's default bias
    // type is the type of D for every non-integer compute type, which is
    // the tensors' dtype here. CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE is left
    // unset so that older cuBLASLt releases, which lack it, still take the
    // epilogue. The bias address is set per call (`run`).

    // Stored (column-major) shapes: Bᵀ is n x k, Aᵀ is k x m, Cᵀ is n x m.
    let stored = |trans: bool, rows: usize, cols: usize| {
        if trans {
            (cols, rows)
        } else {
            (rows, cols)
        }
    };
    let (ar, ac) = stored(p.b.trans, n, k);
    let (br, bc) = stored(p.a.trans, k, m);
    let (_, c_ld) = p.c();
    let c_stride = if batch > 1 { m * n } else { 0 };
    for (rows, cols, ld, stride) in [
        (ar, ac, p.b.ld, p.b.batch_stride),
        (br, bc, p.a.ld, p.a.batch_stride),
        (n, m, c_ld, c_stride),
        (n, m, n, c_stride),
    ] {
        let l = ltr::create_matrix_layout(dt, rows as u64, cols as u64, ld as i64)
            .map_err(|e| p.err("cublasLtMatrixLayoutCreate", e))?;
        d.layouts.push(l);
        if batch > 1 {
            let count = batch as i32;
            let offset = stride as i64;
            use lt::cublasLtMatrixLayoutAttribute_t as L;
            // SAFETY: each attribute is passed by address with its size.
            unsafe {
                ltr::set_matrix_layout_attribute(
                    l,
                    L::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                    &count as *const i32 as _,
                    4,
                )
                .and_then(|()| {
                    ltr::set_matrix_layout_attribute(
                        l,
                        L::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                        &offset as *const i64 as _,
                        8,
                    )
                })
            }
            .map_err(|e| p.err("cublasLtMatrixLayoutSetAttribute", e))?;
        }
    }
    d.pref = ltr::create_matmul_pref().map_err(|e| p.err("cublasLtMatmulPreferenceCreate", e))?;
    let set_pref = |attr, ptr: *const c_void, size| {
        // SAFETY: `ptr` points at `size` bytes of the attribute's type.
        unsafe { ltr::set_matmul_pref_attribute(d.pref, attr, ptr, size) }
            .map_err(|e| p.err("cublasLtMatmulPreferenceSetAttribute", e))
    };
    use lt::cublasLtMatmulPreferenceAttributes_t as P;
    let ws = WORKSPACE_BYTES as u64;
    set_pref(
        P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
        &ws as *const u64 as _,
        8,
    )?;
    // cuBLASLt assumes 256-byte aligned matrices unless told otherwise; a
    // view that starts inside its buffer is less aligned.
    let align = p.key().align;
    for (attr, bytes) in [
        (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align[1]),
        (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align[0]),
        (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align[2]),
        (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align[3]),
    ] {
        set_pref(attr, &bytes as *const u32 as _, 4)?;
    }
    Ok(d)
}

/// cuBLASLt's candidate algorithms for the descriptors, best guess first;
/// empty when it has none (or the query fails: cuBLAS then runs it).
fn candidates(handle: lt::cublasLtHandle_t, d: &Descriptors) -> Vec<lt::cublasLtMatmulAlgo_t> {
    let mut results = Vec::<lt::cublasLtMatmulHeuristicResult_t>::with_capacity(CANDIDATES);
    let mut count = 0i32;
    let l = &d.layouts;
    // SAFETY: all descriptors are live; cuBLASLt writes at most
    // CANDIDATES results and reports how many.
    let status = unsafe {
        lt::cublasLtMatmulAlgoGetHeuristic(
            handle,
            d.matmul,
            l[0],
            l[1],
            l[2],
            l[3],
            d.pref,
            CANDIDATES as i32,
            results.as_mut_ptr(),
            &mut count,
        )
    };
    if status != lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        return Vec::new();
    }
    // SAFETY: the first `count` results were written.
    unsafe { results.set_len((count.max(0) as usize).min(CANDIDATES)) };
    results
        .iter()
        .filter(|r| r.state == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS)
        .map(|r| r.algo)
        .collect()
}

/// An algorithm's configuration, for messages: id, tile, split-K count
/// and reduction scheme.
pub(crate) fn describe_algo(algo: &lt::cublasLtMatmulAlgo_t) -> String {
    use lt::cublasLtMatmulAlgoConfigAttributes_t as C;
    let get = |attr| {
        let (mut v, mut written) = (0u32, 0usize);
        // SAFETY: reads one 32-bit attribute of a live algorithm.
        let status = unsafe {
            lt::cublasLtMatmulAlgoConfigGetAttribute(
                algo,
                attr,
                &mut v as *mut u32 as _,
                4,
                &mut written,
            )
        };
        if status == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            v.to_string()
        } else {
            "?".into()
        }
    };
    format!(
        "algo {} tile {} split-k {} reduction {}",
        get(C::CUBLASLT_ALGO_CONFIG_ID),
        get(C::CUBLASLT_ALGO_CONFIG_TILE_ID),
        get(C::CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
        get(C::CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME)
    )
}

/// Runs `p` with each of cuBLASLt's candidates in turn, waiting for each
/// and calling `after` with its description; returns how many ran.
#[cfg(test)]
pub(crate) fn each_candidate<T: DType>(
    blas: &Blas,
    handle: lt::cublasLtHandle_t,
    ctx: &Context,
    p: &Product<'_, T>,
    mut after: impl FnMut(&str),
) -> Result<usize> {
    let _queue = lock(&blas.queue);
    let desc = descriptors(p)?;
    set_aux(&desc, p).map_err(|e| p.err("cublasLtMatmulDescSetAttribute", e))?;
    let candidates = candidates(handle, &desc);
    for algo in &candidates {
        run(blas, handle, ctx, p, &desc, algo).map_err(|e| p.err("cublasLtMatmul", e))?;
        ctx.sync("cublasLtMatmul")?;
        after(&describe_algo(algo));
    }
    Ok(candidates.len())
}
