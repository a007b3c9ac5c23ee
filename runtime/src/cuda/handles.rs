//! The cuBLAS and cuBLASLt handles of one context, the workspace they
//! share, and the cuBLASLt plans made for it: what a context keeps for its
//! matrix products. `blas` creates the handles and `lt` makes the plans.

#[cfg(test)]
use super::error::lock;
use cudarc::cublas::sys as cb;
use cudarc::cublaslt::result as ltr;
use cudarc::cublaslt::sys as lt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tensorfn_core::DTypeKind;

/// Bytes of the workspace cuBLAS and cuBLASLt share in each context.
pub(crate) const WORKSPACE_BYTES: usize = 32 << 20;

/// What is applied to the product before it is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Epilogue {
    /// Nothing.
    None,
    /// `max(x, 0)`.
    Relu,
    /// GELU, tanh form (`gelu`; cuBLASLt's `GELU` epilogue), applied to
    /// the accumulator before it is rounded.
    Gelu,
    /// The product as it is, and the sum of `a` (`m x k`) over `k` written
    /// to the bias address (cuBLASLt's `BGRADB`: its B is our `a`).
    SumKOfA,
    /// The product as it is, and the sum of `b` (`k x n`) over `k` written
    /// to the bias address (cuBLASLt's `BGRADA`: its A is our `b`).
    SumKOfB,
    /// GELU as `Gelu`, and the value it was applied to (the product plus
    /// the bias: the pre-activation a backward reads) written to the aux
    /// address (cuBLASLt's `GELU_AUX`, `GELU_AUX_BIAS` with a bias).
    GeluAux,
    /// The product times GELU's derivative at the pre-activation read
    /// from the aux address (cuBLASLt's `DGELU`).
    DGelu,
    /// `DGelu`, and the column sums of its result (row-major) written to
    /// the bias address: a bias gradient (cuBLASLt's `DGELU_BGRAD`).
    DGeluSumM,
}

/// The form of a bias added by cuBLASLt (`lt::Addend`), without its
/// address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum AddendForm {
    Nothing,
    Columns,
    Matrix { ld: usize },
}

/// The cuBLAS handles of one context and their shared workspace.
pub(crate) struct Blas {
    pub(crate) handle: cb::cublasHandle_t,
    /// `None` when libcublasLt cannot be loaded: products then go through
    /// cuBLAS alone.
    pub(crate) lt: Option<lt::cublasLtHandle_t>,
    pub(crate) workspace: u64,
    /// Held while a product is queued. One product may queue several
    /// kernels that pass data through the shared workspace (split-K
    /// partial sums, then their reduction); queued from two threads at
    /// once, the kernels of two products could interleave on the stream
    /// and one product's reduction read the other's partial sums.
    pub(crate) queue: Mutex<()>,
    /// cuBLASLt plans by shape.
    pub(crate) plans: Plans,
}

// SAFETY: the handles are bound to one stream and used from any thread
// with the context current; products are queued one at a time (`queue`)
// and the device runs them in stream order, so the workspace is never
// used by two products at once.
unsafe impl Send for Blas {}
unsafe impl Sync for Blas {}

/// Everything a plan depends on; addresses only through their alignment.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PlanKey {
    pub(crate) dtype: DTypeKind,
    pub(crate) tf32: bool,
    /// Transposes of `a` and `b` (row-major view).
    pub(crate) trans: (bool, bool),
    /// `(batch, m, k, n)`.
    pub(crate) dims: (usize, usize, usize, usize),
    /// Leading dimensions of `a` and `b`.
    pub(crate) ld: (usize, usize),
    /// Batch strides of `a` and `b` (0: broadcast over the batch).
    pub(crate) batch_stride: (usize, usize),
    pub(crate) addend: AddendForm,
    pub(crate) epilogue: Epilogue,
    /// Alignments of `a`, `b`, C and D.
    pub(crate) align: [u32; 4],
    /// Alignment of the aux matrix of the GELU epilogues (cuBLASLt picks
    /// its algorithms by the aux address too); 0 for the others.
    pub(crate) aux_align: u32,
}

/// The plans of one context, by key; `None` where cuBLASLt offers no
/// algorithm (the caller then uses cuBLAS).
#[derive(Default)]
pub(crate) struct Plans(pub(crate) Mutex<HashMap<PlanKey, Option<Arc<Plan>>>>);

impl Plans {
    /// How many shapes have a plan (or are known to have none).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.0).len()
    }
}

/// The descriptors and algorithm of one kind of product.
pub(crate) struct Plan {
    pub(crate) desc: Descriptors,
    pub(crate) algo: lt::cublasLtMatmulAlgo_t,
}

// SAFETY: the descriptors are host objects only read by cuBLASLt calls;
// the one attribute written after creation (the bias address) is written
// while the context's queue lock is held, as is every use.
unsafe impl Send for Plan {}
unsafe impl Sync for Plan {}

/// cuBLASLt descriptors, destroyed on every exit path.
pub(crate) struct Descriptors {
    pub(crate) matmul: lt::cublasLtMatmulDesc_t,
    /// Stored A (our `b`), stored B (our `a`), C, D.
    pub(crate) layouts: Vec<lt::cublasLtMatrixLayout_t>,
    pub(crate) pref: lt::cublasLtMatmulPreference_t,
}

impl Drop for Descriptors {
    fn drop(&mut self) {
        // SAFETY: each descriptor was created once and is destroyed once.
        unsafe {
            for &l in &self.layouts {
                let _ = ltr::destroy_matrix_layout(l);
            }
            if !self.matmul.is_null() {
                let _ = ltr::destroy_matmul_desc(self.matmul);
            }
            if !self.pref.is_null() {
                let _ = ltr::destroy_matmul_pref(self.pref);
            }
        }
    }
}
