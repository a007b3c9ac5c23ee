//! Matrix products through cuBLAS and cuBLASLt.
//!
//! Tensors are row-major and cuBLAS is column-major, so `C = A B` is
//! computed as `Cᵀ = Bᵀ Aᵀ`: a row-major matrix is its transpose in
//! column-major order, with no copy. A transposed view (unit stride along
//! its rows) becomes a transpose flag; only views with no unit stride are
//! copied. Batches use the strided-batched routine, with batch stride 0
//! for an operand broadcast over the batch.
//!
//! f32 products are exact f32 (no TF32) unless [`set_allow_tf32`] turns
//! TF32 on; f16 and bf16 accumulate in f32. With cuBLASLt loaded, products
//! run through its plans (`lt`, autotuned per shape) without copying their
//! bias: a bias of one value per output column (a linear layer) is fused,
//! with an optional ReLU, into the product's epilogue, and a full bias
//! matrix is read as the product's C operand while the result goes to a
//! separate D. Only what neither form takes (a 0-D bias, a vector bias
//! with beta != 1, a batched bias), or every product when cuBLASLt is
//! missing, goes through cuBLAS, the bias first copied into the output.

use super::alloc::CudaStorage;
use super::backend::{check_extent, CudaBackend};
use super::context::Context;
use super::error::{cublas, driver, guard, lock, unavailable};
use super::handles::{Blas, Epilogue, Plans, WORKSPACE_BYTES};
use super::lt::{self as ltm, Addend, Operand, Product, Scale};
use crate::backend::Backend;
use crate::dtype::FloatDType;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::ops::dispatch::{ProductAndSecond, ProductExtra};
use cudarc::cublas::sys as cb;
use cudarc::cublaslt::sys as lt;
use cudarc::driver::{result, sys};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tensorfn_core::DTypeKind;
use tensorfn_kernels::{BinaryOp, UnaryOp};

static ALLOW_TF32: AtomicBool = AtomicBool::new(false);

/// Lets f32 matrix products on the GPU use TF32 tensor cores (10-bit
/// mantissa inputs, f32 accumulation): several times faster, about 1e-3
/// relative error. Off by default, so f32 products are exact f32, unlike
/// PyTorch's `torch.backends.cuda.matmul.allow_tf32`, which this mirrors.
///
/// ```
/// use tensorfn_runtime::{allow_tf32, set_allow_tf32};
/// assert!(!allow_tf32());
/// set_allow_tf32(true);
/// assert!(allow_tf32());
/// set_allow_tf32(false);
/// ```
pub fn set_allow_tf32(allow: bool) {
    ALLOW_TF32.store(allow, Ordering::Relaxed);
}

/// Whether f32 matrix products may use TF32 (see [`set_allow_tf32`]).
///
/// ```
/// // Off unless a program turns it on.
/// assert!(!tensorfn_runtime::allow_tf32());
/// ```
pub fn allow_tf32() -> bool {
    ALLOW_TF32.load(Ordering::Relaxed)
}

/// The cuBLAS handles of `ctx`, with cuBLASLt when it loads.
fn create_blas(ctx: &Context) -> Result<Blas> {
    // cudarc panics when a library is missing: probe first.
    // SAFETY: only opens the library.
    if !unsafe { cb::is_culib_present() } {
        return Err(unavailable(
            "cuBLAS (libcublas.so) was not found; matrix products on the GPU need it: \
             install the CUDA toolkit's cuBLAS or add its folder to LD_LIBRARY_PATH",
        ));
    }
    guard("loading cuBLAS", || {
        // SAFETY: plain allocation in the current context, kept for the
        // life of the process.
        let workspace = match unsafe { result::malloc_sync(WORKSPACE_BYTES) } {
            Ok(p) => p,
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                let (free, total) = ctx.mem_info()?;
                return Err(Error::OutOfMemory {
                    requested: WORKSPACE_BYTES,
                    free,
                    total,
                });
            }
            Err(e) => return Err(driver("cuMemAlloc (cuBLAS workspace)", e)),
        };
        let handle = cudarc::cublas::result::create_handle()
            .map_err(|e| cublas("cublasCreate", e.0, String::new()))?;
        // SAFETY: the handle was just created; the stream and the
        // workspace live as long as the context.
        unsafe {
            cudarc::cublas::result::set_stream(handle, ctx.stream as cb::cudaStream_t)
                .map_err(|e| cublas("cublasSetStream", e.0, String::new()))?;
            cb::cublasSetWorkspace_v2(handle, workspace as *mut c_void, WORKSPACE_BYTES)
                .result()
                .map_err(|e| cublas("cublasSetWorkspace", e.0, String::new()))?;
            // Exact f32 unless the compute type asks for TF32.
            cb::cublasSetMathMode(handle, cb::cublasMath_t::CUBLAS_DEFAULT_MATH)
                .result()
                .map_err(|e| cublas("cublasSetMathMode", e.0, String::new()))?;
        }
        // SAFETY: only opens the library.
        let lt = if unsafe { lt::is_culib_present() } {
            guard("loading cuBLASLt", || {
                cudarc::cublaslt::result::create_handle()
                    .map_err(|e| cublas("cublasLtCreate", e.0, String::new()))
            })
            .ok()
        } else {
            None
        };
        Ok(Blas {
            handle,
            lt,
            workspace,
            queue: Mutex::new(()),
            plans: Plans::default(),
        })
    })
}

impl Context {
    /// The cuBLAS handles, created on the first product. A failure is not
    /// kept: a later call tries again.
    pub(crate) fn blas(&self) -> Result<Arc<Blas>> {
        let mut slot = lock(&self.blas);
        if let Some(b) = &*slot {
            return Ok(b.clone());
        }
        let b = Arc::new(create_blas(self)?);
        *slot = Some(b.clone());
        Ok(b)
    }
}

/// How a `rows x cols` matrix with strides `(sr, sc)` is read as the
/// column-major transpose cuBLAS needs: `(false, ld)` when rows are
/// contiguous (row-major), `(true, ld)` when columns are (a transposed
/// view); `None` when neither stride is 1.
pub(crate) fn matrix_view(rows: usize, cols: usize, sr: usize, sc: usize) -> Option<(bool, usize)> {
    if cols == 1 || sc == 1 {
        let ld = if rows == 1 { cols.max(1) } else { sr };
        if ld >= cols.max(1) {
            return Some((false, ld));
        }
    }
    if rows == 1 || sr == 1 {
        let ld = if cols == 1 { rows.max(1) } else { sc };
        if ld >= rows.max(1) {
            return Some((true, ld));
        }
    }
    None
}

fn operand<T: FloatDType>(be: &CudaBackend, s: &CudaStorage<T>, l: &Layout) -> Result<Operand<T>> {
    let (batch, rows, cols) = (l.dims()[0], l.dims()[1], l.dims()[2]);
    let (sb, sr, sc) = (l.strides()[0], l.strides()[1], l.strides()[2]);
    let batch_stride = if batch == 1 { 0 } else { sb };
    if let Some((trans, ld)) = matrix_view(rows, cols, sr, sc) {
        if ld <= i32::MAX as usize {
            return Ok(Operand {
                ptr: s.ptr_at(l.offset()),
                trans,
                ld,
                batch_stride,
                _copy: None,
            });
        }
    }
    // Neither stride is 1: copy, once if the batch is broadcast.
    let (copy, batch_stride) = if batch_stride == 0 {
        (be.contiguous(s, &l.select(0, 0))?, 0)
    } else {
        (be.contiguous(s, l)?, rows * cols)
    };
    Ok(Operand {
        ptr: copy.device_ptr(),
        trans: false,
        ld: cols.max(1),
        batch_stride,
        _copy: Some(copy),
    })
}

fn op(trans: bool) -> cb::cublasOperation_t {
    if trans {
        cb::cublasOperation_t::CUBLAS_OP_T
    } else {
        cb::cublasOperation_t::CUBLAS_OP_N
    }
}

fn data_type(t: DTypeKind) -> cb::cudaDataType {
    match t {
        DTypeKind::F32 => cb::cudaDataType::CUDA_R_32F,
        DTypeKind::F64 => cb::cudaDataType::CUDA_R_64F,
        DTypeKind::F16 => cb::cudaDataType::CUDA_R_16F,
        DTypeKind::BF16 => cb::cudaDataType::CUDA_R_16BF,
        other => unreachable!("matrix products are only called with floats, not {other}"),
    }
}

fn compute_type(t: DTypeKind) -> cb::cublasComputeType_t {
    match t {
        DTypeKind::F64 => cb::cublasComputeType_t::CUBLAS_COMPUTE_64F,
        DTypeKind::F32 if allow_tf32() => cb::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
        // f16 and bf16 accumulate in f32 too.
        _ => cb::cublasComputeType_t::CUBLAS_COMPUTE_32F,
    }
}

fn to_i32(v: usize, what: &str, shapes: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| {
        Error::shape(
            "matmul on the GPU",
            format!("{what} below 2^31 (cuBLAS uses 32-bit sizes)"),
            format!("{what} = {v} for {shapes}"),
        )
    })
}

/// Operand shapes for error messages.
fn describe(la: &Layout, lb: &Layout, t: DTypeKind) -> String {
    format!(
        "{t} [batch, m, k] = {:?} (strides {:?}) x [batch, k, n] = {:?} (strides {:?})",
        la.dims(),
        la.strides(),
        lb.dims(),
        lb.strides()
    )
}

impl CudaBackend {
    /// Batched `epilogue(alpha * a @ b + beta * bias)`, the products of
    /// `Backend::matmul` and `Backend::matmul_relu`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gemm<T: FloatDType>(
        &self,
        a: &CudaStorage<T>,
        la: &Layout,
        b: &CudaStorage<T>,
        lb: &Layout,
        bias: Option<(&CudaStorage<T>, &Layout)>,
        alpha: T,
        beta: T,
        epilogue: Epilogue,
    ) -> Result<CudaStorage<T>> {
        matmul(self, a, la, b, lb, bias, alpha, beta, epilogue)
    }

    /// `a @ b` for one `[1, m, k] x [1, k, n]` product with the epilogue
    /// `extra` names, in one cuBLASLt call: the product and the sum over
    /// `k` of `b` or `a` (`BGRADA`/`BGRADB`, the bias gradient of a weight
    /// gradient `xᵀ g` or `gᵀ x`), `gelu(a @ b + bias)` and its
    /// pre-activation (`GELU_AUX_BIAS`), or `(a @ b) * gelu'(pre)` and
    /// optionally its column sums (`DGELU`, `DGELU_BGRAD`). `None`
    /// (nothing queued) for a batch, an empty dim, f64, a product
    /// cuBLASLt has no such algorithm for (its epilogues take some
    /// dtypes, transposes and alignments only), a GELU epilogue whose
    /// rows are not a multiple of 8 elements (cuBLASLt's rule for the
    /// aux matrix), or with `TENSORFN_MATMUL_SUM_EPILOGUE=0` (the sums)
    /// or `TENSORFN_MATMUL_GELU_EPILOGUE=0` (GELU): the caller then runs
    /// the parts.
    pub(crate) fn gemm_epilogue<T: FloatDType>(
        &self,
        (a, la): (&CudaStorage<T>, &Layout),
        (b, lb): (&CudaStorage<T>, &Layout),
        extra: ProductExtra<'_, CudaStorage<T>>,
    ) -> Result<Option<ProductAndSecond<CudaStorage<T>>>> {
        let one_matrix = la.rank() == 3
            && lb.rank() == 3
            && la.dims()[0] == 1
            && lb.dims()[0] == 1
            && la.dims()[2] == lb.dims()[1];
        if !one_matrix {
            return Ok(None);
        }
        let (m, k, n) = (la.dims()[1], la.dims()[2], lb.dims()[2]);
        let declined = match extra {
            ProductExtra::SumK { .. } => !ltm::sum_epilogue(),
            ProductExtra::GeluAux { .. } | ProductExtra::DGelu { .. } => {
                n % 8 != 0 || !ltm::gelu_epilogue()
            }
        };
        if m * k * n == 0 || T::KIND == DTypeKind::F64 || declined {
            return Ok(None);
        }
        let ctx = self.ctx();
        ctx.bind()?;
        check_extent("matmul", "mat1", a, la)?;
        check_extent("matmul", "mat2", b, lb)?;
        let blas = ctx.blas()?;
        let Some(handle) = blas.lt else {
            return Ok(None);
        };
        let shapes = describe(la, lb, T::KIND);
        let (a_op, b_op) = (operand(self, a, la)?, operand(self, b, lb)?);
        let out = ctx.storage::<T>(m * n)?;
        // The second result: sums written by the epilogue, or the
        // pre-activation written as its aux matrix.
        let (epilogue, addend, second, aux) = match extra {
            ProductExtra::SumK { of_b } => {
                let sums = ctx.storage::<T>(if of_b { n } else { m })?;
                let e = if of_b {
                    Epilogue::SumKOfB
                } else {
                    Epilogue::SumKOfA
                };
                (e, Addend::Nothing, Some(sums), 0)
            }
            ProductExtra::GeluAux { bias: (bs, bl) } => {
                // One bias value per column, contiguous and aligned for
                // the epilogue's vector loads.
                let ptr = bs.ptr_at(bl.offset());
                if bl.dims() != [n] || (n > 1 && bl.strides()[0] != 1) || ptr % 16 != 0 {
                    return Ok(None);
                }
                check_extent("addmm", "bias", bs, bl)?;
                let pre = ctx.storage::<T>(m * n)?;
                let aux = pre.device_ptr();
                (Epilogue::GeluAux, Addend::Columns(ptr), Some(pre), aux)
            }
            ProductExtra::DGelu {
                pre: (ps, pl),
                sums,
            } => {
                if pl.dims() != [m, n] || !pl.is_contiguous() {
                    return Ok(None);
                }
                check_extent("matmul", "pre-activation", ps, pl)?;
                let aux = ps.ptr_at(pl.offset());
                if sums {
                    let s = ctx.storage::<T>(n)?;
                    (Epilogue::DGeluSumM, Addend::Nothing, Some(s), aux)
                } else {
                    (Epilogue::DGelu, Addend::Nothing, None, aux)
                }
            }
        };
        let product = Product {
            a: &a_op,
            b: &b_op,
            dims: (1, m, k, n),
            addend,
            out: out.device_ptr(),
            scale: Scale::new(T::one(), T::zero()),
            epilogue,
            sum_out: match epilogue {
                Epilogue::SumKOfA | Epilogue::SumKOfB | Epilogue::DGeluSumM => {
                    second.as_ref().map_or(0, |s| s.device_ptr())
                }
                _ => 0,
            },
            aux,
            tf32: allow_tf32(),
            shapes: &shapes,
        };
        let queued = guard("calling cuBLASLt", || {
            ltm::matmul(&blas, handle, ctx, &product)
        })?;
        Ok(queued.then_some((out, second)))
    }
}

/// Batched `epilogue(alpha * a @ b + beta * bias)`; see
/// `Backend::matmul` for the layouts.
#[allow(clippy::too_many_arguments)]
fn matmul<T: FloatDType>(
    be: &CudaBackend,
    a: &CudaStorage<T>,
    la: &Layout,
    b: &CudaStorage<T>,
    lb: &Layout,
    bias: Option<(&CudaStorage<T>, &Layout)>,
    alpha: T,
    beta: T,
    epilogue: Epilogue,
) -> Result<CudaStorage<T>> {
    let shapes = describe(la, lb, T::KIND);
    if la.rank() != 3
        || lb.rank() != 3
        || la.dims()[0] != lb.dims()[0]
        || la.dims()[2] != lb.dims()[1]
    {
        return Err(Error::shape(
            "matmul on the GPU",
            "a [batch, m, k] and b [batch, k, n]",
            shapes,
        ));
    }
    let (batch, m, k, n) = (la.dims()[0], la.dims()[1], la.dims()[2], lb.dims()[2]);
    let out_layout = Layout::contiguous(&[batch, m, n]);
    let ctx = be.ctx();
    if batch * m * n == 0 {
        return ctx.storage::<T>(0);
    }
    let bias = bias.filter(|_| beta.to_f64() != 0.0);
    if k == 0 {
        return empty_product(be, bias, &out_layout, beta, epilogue);
    }
    let blas = ctx.blas()?;
    let a_op = operand(be, a, la)?;
    let b_op = operand(be, b, lb)?;
    let mut out = ctx.storage::<T>(batch * m * n)?;

    if let Some(handle) = blas.lt.filter(|_| batch <= i32::MAX as usize) {
        let addend = match bias {
            None => Some((Addend::Nothing, Scale::new(alpha, T::zero()))),
            Some((bs, bl)) => ltm::addend_of(
                bs.ptr_at(bl.offset()),
                (bl.strides()[1], bl.strides()[2]),
                (m, n),
                batch,
                alpha,
                beta,
            ),
        };
        if let Some((addend, scale)) = addend {
            let product = Product {
                a: &a_op,
                b: &b_op,
                dims: (batch, m, k, n),
                addend,
                out: out.device_ptr(),
                scale,
                epilogue,
                sum_out: 0,
                aux: 0,
                tf32: allow_tf32(),
                shapes: &shapes,
            };
            let queued = guard("calling cuBLASLt", || {
                ltm::matmul(&blas, handle, ctx, &product)
            })?;
            if queued {
                return Ok(out);
            }
        }
    }

    let beta = match bias {
        Some((bs, bl)) => {
            be.copy_into(bs, bl, &mut out, &out_layout)?;
            beta
        }
        None => T::zero(),
    };
    let trans = (a_op.trans, b_op.trans);
    ltm::log_product(T::KIND, (batch, m, k, n), trans, epilogue, "cuBLAS");
    strided_batched(
        &blas,
        &a_op,
        &b_op,
        (batch, m, k, n),
        Scale::new(alpha, beta),
        out.device_ptr(),
        &shapes,
    )?;
    match epilogue {
        // The epilogues with a second result are only asked of
        // `gemm_epilogue`, which has no fallback through here.
        Epilogue::None
        | Epilogue::SumKOfA
        | Epilogue::SumKOfB
        | Epilogue::GeluAux
        | Epilogue::DGelu
        | Epilogue::DGeluSumM => Ok(out),
        Epilogue::Relu => be.unary(UnaryOp::Relu, &out, &out_layout),
        Epilogue::Gelu => be.unary(UnaryOp::Gelu, &out, &out_layout),
    }
}

/// `out = alpha * a @ b + beta * out` through cuBLAS's strided batched
/// product (no algorithm choice to time, so `out` may be read): `out` is
/// `batch` contiguous row-major `m x n` matrices at that device address.
fn strided_batched<T: FloatDType>(
    blas: &Blas,
    a_op: &Operand<T>,
    b_op: &Operand<T>,
    (batch, m, k, n): (usize, usize, usize, usize),
    scale: Scale,
    out_ptr: u64,
    shapes: &str,
) -> Result<()> {
    let (alpha_ptr, beta_ptr) = scale.ptrs();
    let dt = data_type(T::KIND);
    let (n32, m32, k32) = (
        to_i32(n, "n", shapes)?,
        to_i32(m, "m", shapes)?,
        to_i32(k, "k", shapes)?,
    );
    let lda = to_i32(b_op.ld, "the leading dimension of b", shapes)?;
    let ldb = to_i32(a_op.ld, "the leading dimension of a", shapes)?;
    let batch32 = to_i32(batch, "batch", shapes)?;
    let _queue = lock(&blas.queue);
    guard("calling cuBLAS", || {
        // Cᵀ (n x m) = Bᵀ (n x k) · Aᵀ (k x m), all column-major.
        // SAFETY: the operands describe live device memory of the dims
        // above (checked layouts), the output holds batch * m * n
        // elements, and the scale values outlive the call.
        unsafe {
            cb::cublasGemmStridedBatchedEx(
                blas.handle,
                op(b_op.trans),
                op(a_op.trans),
                n32,
                m32,
                k32,
                alpha_ptr,
                b_op.ptr as *const c_void,
                dt,
                lda,
                b_op.batch_stride as i64,
                a_op.ptr as *const c_void,
                dt,
                ldb,
                a_op.batch_stride as i64,
                beta_ptr,
                out_ptr as *mut c_void,
                dt,
                n32,
                (m * n) as i64,
                batch32,
                compute_type(T::KIND),
                cb::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .result()
        .map_err(|e| cublas("cublasGemmStridedBatchedEx", e.0, shapes.to_string()))
    })?;
    super::counters::add(super::Count::LibraryCall, 1);
    Ok(())
}

/// Batched `alpha * a @ b + beta * out` written into `batch * m * n`
/// contiguous elements at device address `out` (which the caller keeps
/// alive), `la` and `lb` as for `Backend::matmul` with `k > 0`. A product
/// that only writes (`beta = 0`) runs through cuBLASLt with its tuned plan;
/// one that adds to `out` runs through cuBLAS, whose call reads `out` once.
pub(crate) fn gemm_into<T: FloatDType>(
    be: &CudaBackend,
    (a, la): (&CudaStorage<T>, &Layout),
    (b, lb): (&CudaStorage<T>, &Layout),
    out: u64,
    alpha: T,
    beta: T,
) -> Result<()> {
    let shapes = describe(la, lb, T::KIND);
    if la.rank() != 3
        || lb.rank() != 3
        || la.dims()[0] != lb.dims()[0]
        || la.dims()[2] != lb.dims()[1]
        || la.dims()[2] == 0
    {
        return Err(Error::shape(
            "matmul on the GPU",
            "a [batch, m, k] and b [batch, k, n] with k > 0",
            shapes,
        ));
    }
    let (batch, m, k, n) = (la.dims()[0], la.dims()[1], la.dims()[2], lb.dims()[2]);
    if batch * m * n == 0 {
        return Ok(());
    }
    let ctx = be.ctx();
    let blas = ctx.blas()?;
    let a_op = operand(be, a, la)?;
    let b_op = operand(be, b, lb)?;
    let writes_only = beta.to_f64() == 0.0;
    if let Some(handle) = blas
        .lt
        .filter(|_| writes_only && batch <= i32::MAX as usize)
    {
        let product = Product {
            a: &a_op,
            b: &b_op,
            dims: (batch, m, k, n),
            addend: Addend::Nothing,
            out,
            scale: Scale::new(alpha, T::zero()),
            epilogue: Epilogue::None,
            sum_out: 0,
            aux: 0,
            tf32: allow_tf32(),
            shapes: &shapes,
        };
        if guard("calling cuBLASLt", || {
            ltm::matmul(&blas, handle, ctx, &product)
        })? {
            return Ok(());
        }
    }
    strided_batched(
        &blas,
        &a_op,
        &b_op,
        (batch, m, k, n),
        Scale::new(alpha, beta),
        out,
        &shapes,
    )
}

/// A product over an empty `k`: `beta * bias` (or zeros), then the epilogue.
fn empty_product<T: FloatDType>(
    be: &CudaBackend,
    bias: Option<(&CudaStorage<T>, &Layout)>,
    out_layout: &Layout,
    beta: T,
    epilogue: Epilogue,
) -> Result<CudaStorage<T>> {
    let mut out = be.full(out_layout.numel(), T::zero())?;
    if let Some((bs, bl)) = bias {
        be.copy_into(bs, bl, &mut out, out_layout)?;
        if beta.to_f64() != 1.0 {
            out = be.binary_scalar(BinaryOp::Mul, &out, out_layout, beta, false)?;
        }
    }
    match epilogue {
        // The epilogues with a second result are only asked of
        // `gemm_epilogue`, which has no fallback through here.
        Epilogue::None
        | Epilogue::SumKOfA
        | Epilogue::SumKOfB
        | Epilogue::GeluAux
        | Epilogue::DGelu
        | Epilogue::DGeluSumM => Ok(out),
        Epilogue::Relu => be.unary(UnaryOp::Relu, &out, out_layout),
        Epilogue::Gelu => be.unary(UnaryOp::Gelu, &out, out_layout),
    }
}

/// Runs the plain product `a @ b` with each of cuBLASLt's candidate
/// algorithms, calling `check` with each one's description and output;
/// returns how many there were (0 without cuBLASLt).
#[cfg(test)]
pub(crate) fn each_lt_candidate_for_test<T: FloatDType>(
    be: &CudaBackend,
    (a, la): (&CudaStorage<T>, &Layout),
    (b, lb): (&CudaStorage<T>, &Layout),
    mut check: impl FnMut(&str, &CudaStorage<T>),
) -> Result<usize> {
    let ctx = be.ctx();
    ctx.bind()?;
    let blas = ctx.blas()?;
    let Some(handle) = blas.lt else {
        return Ok(0);
    };
    let (batch, m, k, n) = (la.dims()[0], la.dims()[1], la.dims()[2], lb.dims()[2]);
    let (a_op, b_op) = (operand(be, a, la)?, operand(be, b, lb)?);
    let out = ctx.storage::<T>(batch * m * n)?;
    let shapes = describe(la, lb, T::KIND);
    let product = Product {
        a: &a_op,
        b: &b_op,
        dims: (batch, m, k, n),
        addend: Addend::Nothing,
        out: out.device_ptr(),
        scale: Scale::new(T::one(), T::zero()),
        epilogue: Epilogue::None,
        sum_out: 0,
        aux: 0,
        tf32: false,
        shapes: &shapes,
    };
    ltm::each_candidate(&blas, handle, ctx, &product, |what| check(what, &out))
}

/// A product cuBLAS must reject (`lda` below the row count), to test how
/// its statuses are reported.
#[cfg(test)]
pub(crate) fn invalid_gemm_for_test(be: &CudaBackend) -> Result<()> {
    let ctx = be.ctx();
    ctx.bind()?;
    let blas = ctx.blas()?;
    let buf = be.full(16, 1.0f32)?;
    let p = buf.device_ptr() as *const c_void;
    let (alpha, beta) = (1.0f32, 0.0f32);
    // SAFETY: cuBLAS validates the arguments before touching memory.
    unsafe {
        cb::cublasGemmStridedBatchedEx(
            blas.handle,
            op(false),
            op(false),
            4,
            4,
            4,
            &alpha as *const f32 as _,
            p,
            cb::cudaDataType::CUDA_R_32F,
            0,
            0,
            p,
            cb::cudaDataType::CUDA_R_32F,
            4,
            0,
            &beta as *const f32 as _,
            p as *mut c_void,
            cb::cudaDataType::CUDA_R_32F,
            4,
            0,
            1,
            compute_type(DTypeKind::F32),
            cb::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .result()
    .map_err(|e| cublas("cublasGemmStridedBatchedEx", e.0, "m=n=k=4, lda=0".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_become_transpose_flags() {
        // Row-major [2, 3]: read as its column-major transpose, ld 3.
        assert_eq!(matrix_view(2, 3, 3, 1), Some((false, 3)));
        // A transposed view of a row-major [3, 2]: strides (1, 2).
        assert_eq!(matrix_view(2, 3, 1, 2), Some((true, 2)));
        // A row slice of a wider matrix keeps its leading dimension.
        assert_eq!(matrix_view(2, 3, 10, 1), Some((false, 10)));
        // Size-1 dims may carry any stride.
        assert_eq!(matrix_view(1, 3, 0, 1), Some((false, 3)));
        assert_eq!(matrix_view(3, 1, 1, 0), Some((false, 1)));
        // No unit stride: must be copied.
        assert_eq!(matrix_view(2, 3, 6, 2), None);
        // A broadcast row: stride 0 across rows is no valid ld.
        assert_eq!(matrix_view(4, 1, 0, 1), None);
    }
}
