//! The PTX modules loaded into a context, what they are keyed by (built-in
//! kernels and `tensor_fn!`-generated ones), and what is cached per kernel:
//! its entry points and the grid rule timed fastest for it (`grid`).
//! `launch` launches them.

use super::error::driver;
use crate::error::{Error, Result};
use cudarc::driver::{result, sys};
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use tensorfn_core::DTypeKind;
use tensorfn_kernels::ptx::Target;
use tensorfn_kernels::{builtin, ir, ptx, BinaryOp, NormOp, ReduceOp, RowOp, UnaryOp};

/// Threads per block of every built-in and fused kernel.
pub(crate) const BLOCK: u32 = builtin::BLOCK;

/// How a grid-stride launch sizes its grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GridRule {
    /// At least two steps a thread and at most 128 blocks a
    /// multiprocessor: at most 32 left 2^28-element kernels at 92-94% of
    /// copy bandwidth and 128 reach 96-98% (the hardware balances many
    /// short blocks better than a few long ones), but 128 at 2^24 leave
    /// threads without a step (76-89% there).
    Capped,
    /// This many steps a thread, however many blocks that takes.
    Steps(usize),
}

/// The built-in kernels of the kernels crate, as cache keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Builtin {
    Unary(UnaryOp, DTypeKind),
    Binary(BinaryOp, DTypeKind),
    /// `Cast(t, t)` is the strided copy.
    Cast(DTypeKind, DTypeKind),
    Reduce(ReduceOp, DTypeKind),
    Row(RowOp, DTypeKind),
    /// `layer_norm` / `rms_norm` over rows (entries by `tensorfn_kernels::norm`).
    Norm(NormOp, DTypeKind),
    /// The gradients of `layer_norm` / `rms_norm` (entries `_dx`, `_sum`).
    NormBackward(NormOp, DTypeKind),
    /// `rope` of contiguous rows.
    Rope(DTypeKind),
    /// `x + value * t1 * t2` over inputs `(x, t1, t2, value)`, rounded once.
    Addcmul(DTypeKind),
    /// Concatenation of contiguous row blocks in units of this many bytes.
    CatRows(u32),
    /// The gather of elements of this many bytes by indices of this dtype.
    Gather(u32, DTypeKind),
    /// The scatter-add of values of this dtype by indices of this dtype.
    ScatterAdd(DTypeKind, DTypeKind),
    /// Scaled dot-product attention over tensors of this dtype.
    Attention(DTypeKind),
    /// Its tensor-core form (sm_80+) for f16/bf16 and a head dim.
    AttentionMma(DTypeKind, usize),
    /// Its Hopper form (compute capability 9.0 only: `wgmma`, `sm_90a`).
    AttentionWgmma(DTypeKind, usize),
    /// Its warp-specialised Hopper form (compute capability 9.0 only).
    AttentionWgmmaWs(DTypeKind, usize),
    /// The same with its blocks in the plain order (for measurements).
    AttentionWgmmaWsByBatch(DTypeKind, usize),
    /// The tensor-core backward (sm_80+) for f16/bf16 and a head dim.
    AttentionMmaBackward(DTypeKind, usize),
    /// Its Hopper form (compute capability 9.0 only: `wgmma`, `sm_90a`).
    AttentionWgmmaBackward(DTypeKind, usize),
    /// Its two-warpgroup form (head dim 128), adding `dQ` with bulk
    /// reductions or not.
    AttentionWgmmaBackward2(DTypeKind, usize, bool),
    /// Its warp-specialised form (head dim 128): a copying warpgroup and
    /// two computing ones.
    AttentionWgmmaBackwardWs(DTypeKind, usize),
    /// Its backward over tensors of this dtype: per query row (`false`:
    /// `D` and `dQ`) or per key row (`true`: `dK` and `dV`).
    AttentionBackward(DTypeKind, bool),
    /// A multi-tensor optimizer update over parameters of this dtype.
    Optim(tensorfn_kernels::optim::OptimKernel, DTypeKind),
    /// `cross_entropy` and its backward over rows of logits of this dtype
    /// with targets of this index dtype.
    CrossEntropy(DTypeKind, DTypeKind),
    /// `topk` along contiguous rows of this dtype, the largest (`true`)
    /// or the smallest elements.
    TopK(DTypeKind, bool),
    /// `cumsum` along contiguous rows of this dtype.
    Cumsum(DTypeKind),
    /// Column sums of a contiguous matrix of this dtype.
    ColumnSum(DTypeKind),
    /// 2-D pooling and its gradients over this dtype.
    Pool2d(DTypeKind),
    /// Seeded `dropout` of this dtype.
    Dropout(DTypeKind),
    /// Seeded `multinomial` draws from rows of this dtype.
    Multinomial(DTypeKind),
    /// The built-in convolution's `im2col` and `col2im` over this dtype.
    Conv2d(DTypeKind),
    /// `batch_norm` and its backward over this dtype.
    BatchNorm(DTypeKind),
}

impl Builtin {
    /// Size in bytes of the widest element an elementwise built-in reads
    /// or writes (1 for the row kernels, which launch otherwise).
    pub(crate) fn widest_element(self) -> usize {
        match self {
            Builtin::Unary(_, d) | Builtin::Binary(_, d) | Builtin::Addcmul(d) => d.size_bytes(),
            Builtin::Cast(a, b) => a.size_bytes().max(b.size_bytes()),
            Builtin::Reduce(..)
            | Builtin::Row(..)
            | Builtin::Norm(..)
            | Builtin::NormBackward(..)
            | Builtin::Rope(_)
            | Builtin::CatRows(_)
            | Builtin::Gather(..)
            | Builtin::ScatterAdd(..)
            | Builtin::Attention(_)
            | Builtin::AttentionMma(..)
            | Builtin::AttentionWgmma(..)
            | Builtin::AttentionWgmmaWs(..)
            | Builtin::AttentionWgmmaWsByBatch(..)
            | Builtin::AttentionMmaBackward(..)
            | Builtin::AttentionWgmmaBackward(..)
            | Builtin::AttentionWgmmaBackward2(..)
            | Builtin::AttentionWgmmaBackwardWs(..)
            | Builtin::AttentionBackward(..)
            | Builtin::Optim(..)
            | Builtin::CrossEntropy(..)
            | Builtin::TopK(..)
            | Builtin::Cumsum(_)
            | Builtin::ColumnSum(_)
            | Builtin::Pool2d(_)
            | Builtin::Dropout(_)
            | Builtin::Multinomial(_)
            | Builtin::Conv2d(_)
            | Builtin::BatchNorm(_) => 1,
        }
    }
}

/// `x + value * t1 * t2` for inputs `(x, t1, t2, value)` of `t`: floats in
/// f64 with one rounding at the end (as the CPU backend and PyTorch's
/// float accumulation do), integers wrapping in `t`.
pub(crate) fn addcmul_kernel(t: DTypeKind) -> tensorfn_kernels::Result<ir::Kernel> {
    let mut k = ir::ElementwiseBuilder::new();
    let inputs = [k.input(t), k.input(t), k.input(t), k.input(t)];
    let [x, t1, t2, v] = if t.is_float() {
        inputs.map(|i| k.cast(i, DTypeKind::F64))
    } else {
        inputs
    };
    let vt1 = k.binary(BinaryOp::Mul, v, t1);
    let prod = k.binary(BinaryOp::Mul, vt1, t2);
    let sum = k.binary(BinaryOp::Add, x, prod);
    let out = if t.is_float() { k.cast(sum, t) } else { sum };
    k.output(out)
}

impl Builtin {
    /// The module's text for a device of `target` (row kernels and the
    /// concatenation kernel have one text for every target).
    pub(crate) fn source(self, target: Target) -> Result<KernelSource> {
        let k = match self {
            Builtin::Unary(op, t) => builtin::try_unary_for(op, t, target),
            Builtin::Binary(op, t) => builtin::try_binary_for(op, t, target),
            Builtin::Cast(from, to) => Ok(builtin::cast_for(from, to, target)),
            Builtin::Reduce(op, t) => builtin::try_reduce(op, t),
            Builtin::Row(op, t) => builtin::try_row(op, t),
            Builtin::Norm(op, t) => builtin::try_norm(op, t),
            Builtin::NormBackward(op, t) => builtin::try_norm_backward(op, t),
            Builtin::Rope(t) => builtin::try_rope(t),
            Builtin::CatRows(unit) => builtin::cat_rows(unit),
            Builtin::Gather(unit, index) => builtin::gather(unit, index),
            Builtin::ScatterAdd(t, index) => builtin::scatter_add(t, index),
            Builtin::Attention(t) => builtin::attention(t),
            Builtin::AttentionMma(t, d) => builtin::attention_mma(t, d),
            Builtin::AttentionWgmma(t, d) => builtin::attention_wgmma(t, d),
            Builtin::AttentionWgmmaWs(t, d) => builtin::attention_wgmma_ws(t, d),
            Builtin::AttentionWgmmaWsByBatch(t, d) => builtin::attention_wgmma_ws_by_batch(t, d),
            Builtin::AttentionMmaBackward(t, d) => builtin::attention_mma_backward(t, d),
            Builtin::AttentionWgmmaBackward(t, d) => builtin::attention_wgmma_backward(t, d),
            Builtin::AttentionWgmmaBackward2(t, d, bulk) => {
                builtin::attention_wgmma_backward2(t, d, bulk)
            }
            Builtin::AttentionWgmmaBackwardWs(t, d) => builtin::attention_wgmma_backward_ws(t, d),
            Builtin::AttentionBackward(t, keys) => builtin::attention_backward(t, keys),
            Builtin::Optim(k, t) => builtin::optim(k, t),
            Builtin::CrossEntropy(t, index) => builtin::cross_entropy(t, index),
            Builtin::TopK(t, largest) => builtin::topk(t, largest),
            Builtin::Cumsum(t) => builtin::cumsum(t),
            Builtin::ColumnSum(t) => builtin::column_sum(t),
            Builtin::Pool2d(t) => builtin::pool2d(t),
            Builtin::Dropout(t) => builtin::dropout(t),
            Builtin::Multinomial(t) => builtin::multinomial(t),
            Builtin::Conv2d(t) => builtin::conv2d(t),
            Builtin::BatchNorm(t) => builtin::batch_norm(t),
            Builtin::Addcmul(t) => {
                let name = format!("tf_addcmul_{t}");
                addcmul_kernel(t)
                    .and_then(|k| ptx::elementwise_for(&k, &name, target))
                    .map(|ptx| builtin::Kernel { name, ptx })
            }
        }
        .map_err(|e| Error::Driver {
            op: format!("generating the built-in kernel {self:?}"),
            message: e.to_string(),
        })?;
        Ok(KernelSource {
            name: k.name,
            ptx: k.ptx,
        })
    }
}

/// What a cached module is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ModuleKey {
    Builtin(Builtin),
    /// A kernel generated by `tensor_fn!`, by its unique name.
    Fused(&'static str),
}

/// A module's PTX text and the prefix of its entry names.
pub(crate) struct KernelSource {
    pub(crate) name: String,
    pub(crate) ptx: String,
}

struct LoadedModule {
    raw: sys::CUmodule,
    prefix: String,
    functions: HashMap<&'static str, sys::CUfunction>,
}

/// The modules loaded into one context.
#[derive(Default)]
pub(crate) struct ModuleCache {
    modules: HashMap<ModuleKey, LoadedModule>,
    /// The grid rule timed fastest per kernel and size class (`grid`).
    pub(crate) grids: HashMap<(ModuleKey, u32), GridRule>,
}

/// JIT-compiles PTX text, returning the driver's log on failure.
fn load_ptx(name: &str, ptx: &str) -> Result<sys::CUmodule> {
    let text = CString::new(ptx).map_err(|_| Error::Driver {
        op: format!("loading kernel {name}"),
        message: "the PTX text contains a NUL byte".into(),
    })?;
    let mut log = vec![0u8; 16 << 10];
    let mut options = [
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
    ];
    let mut values = [log.as_mut_ptr() as *mut c_void, log.len() as *mut c_void];
    let mut module = std::ptr::null_mut();
    // SAFETY: the text is NUL-terminated; the option arrays have matching
    // lengths and the log buffer outlives the call.
    let status = unsafe {
        sys::cuModuleLoadDataEx(
            &mut module,
            text.as_ptr() as *const c_void,
            options.len() as u32,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        )
    };
    status.result().map_err(|e| {
        let log = String::from_utf8_lossy(&log);
        let log = log.trim_end_matches('\0').trim();
        match driver(&format!("loading kernel {name} (PTX JIT)"), e) {
            Error::Driver { op, message } if !log.is_empty() => Error::Driver {
                op,
                message: format!("{message}: {log}"),
            },
            other => other,
        }
    })?;
    Ok(module)
}

impl ModuleCache {
    /// Entry `prefix + suffix` of the module `key`, loading the module the
    /// first time.
    pub(crate) fn function(
        &mut self,
        key: ModuleKey,
        suffix: &'static str,
        source: impl FnOnce() -> Result<KernelSource>,
    ) -> Result<sys::CUfunction> {
        let module = match self.modules.entry(key) {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(v) => {
                let src = source()?;
                let raw = load_ptx(&src.name, &src.ptx)?;
                v.insert(LoadedModule {
                    raw,
                    prefix: src.name,
                    functions: HashMap::new(),
                })
            }
        };
        if let Some(&f) = module.functions.get(suffix) {
            return Ok(f);
        }
        let entry = format!("{}{suffix}", module.prefix);
        let c_entry = CString::new(entry.clone()).expect("entry names have no NUL");
        // SAFETY: the module is loaded and never unloaded.
        let f = unsafe { result::module::get_function(module.raw, c_entry) }
            .map_err(|e| driver(&format!("finding kernel entry {entry}"), e))?;
        module.functions.insert(suffix, f);
        Ok(f)
    }
}
