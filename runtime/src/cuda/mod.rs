//! The CUDA backend: cudarc with the driver and cuBLAS loaded at run time,
//! so one build serves machines with and without a GPU.
//!
//! - `context`: one context and stream per ordinal, created lazily; a
//!   missing driver, device or ordinal is `Error::CudaUnavailable`.
//! - `pool`, `staging`, `modules`, `handles`: what a context keeps (the
//!   allocator's books, pinned staging buffers, loaded PTX modules, cuBLAS
//!   handles and cuBLASLt plans). They import no context, so the code
//!   that uses a context sits above them without an import circle.
//! - `alloc`: the caching allocator behind `CudaStorage`.
//! - `transfer`: host/device copies, direct from and into pinned host
//!   tensors, else through pinned staging buffers; the `CopyTo`
//!   implementations that touch a GPU.
//! - `pinned`: page-locked host buffers behind pinned CPU tensors.
//! - `launch`: PTX modules (built-in and `tensor_fn!`-generated) and launches.
//! - `blas`: cuBLAS matrix products, and the choice between cuBLAS and cuBLASLt.
//! - `lt`: cuBLASLt products, planned and autotuned once per shape.
//! - `cudnn`: convolutions through cuDNN, opened at run time, with one
//!   plan (descriptors, ranked algorithms) per problem; `Fallback` where
//!   cuDNN is missing or does not support the problem.
//! - `backend`: the `Backend` primitives.
//! - `error`: driver and cuBLAS statuses as `Error`s, and locks that
//!   survive a panic.
//! - `event`: driver events, for ordering streams and timing on the device.
//! - `tune`: timing candidate ways to run the same work (cuBLASLt
//!   algorithms, elementwise grids) and keeping the fastest.
//! - `grid`: grid sizes of grid-stride kernels, tuned per kernel.
//! - `fused`: launches of the elementwise kernels `tensor_fn!` generates.

mod alloc;
mod attention;
mod backend;
mod blas;
mod bnorm;
mod colsum;
mod concat;
mod context;
mod conv;
mod counters;
// Called by the convolution ops, which fall back to the built-in kernels
// on `Outcome::Fallback`.
#[allow(dead_code)]
pub(crate) mod cudnn;
mod cumsum;
mod error;
mod event;
mod fused;
mod gather;
mod grid;
mod handles;
mod im2col;
mod launch;
mod lt;
mod modules;
mod multinomial;
pub(crate) mod nccl;
pub(crate) mod optim;
mod overlap;
mod pinned;
mod pool;
mod pool2d;
mod scatter;
mod staging;
mod topk;
mod transfer;
mod tune;
mod xent;

#[cfg(test)]
pub(crate) mod tests;

use crate::error::Result;

pub use alloc::CudaMemoryStats;
pub(crate) use alloc::CudaStorage;
pub(crate) use backend::CudaBackend;
pub use blas::{allow_tf32, set_allow_tf32};
pub use context::cuda_device_count;
pub use conv::{cudnn_enabled, set_cudnn_enabled};
pub(crate) use counters::Count;
pub use counters::CudaCounters;
pub use grid::{elementwise_autotune, set_elementwise_autotune};
pub use lt::{matmul_autotune, set_matmul_autotune};
pub(crate) use overlap::Overlap;
pub(crate) use pinned::PinnedVec;
pub(crate) use transfer::contiguous_ptr;

/// Memory held by the caching allocator of cuda:`ordinal` (creating its
/// context if needed).
///
/// ```
/// use tensorfn_runtime::{cuda_memory_stats, Error};
/// if let Ok(stats) = cuda_memory_stats(0) {
///     println!("{} bytes in tensors, {} cached", stats.allocated_bytes, stats.cached_bytes);
/// }
/// ```
pub fn cuda_memory_stats(ordinal: usize) -> Result<CudaMemoryStats> {
    Ok(context::context(ordinal)?.memory_stats())
}

/// The bytes a request of `bytes` holds in the CUDA caching allocator: its
/// size class (512-byte steps up to 1 MiB, 2 MiB steps above), which is
/// what [`CudaMemoryStats`] counts. For predicting a peak from tensor
/// sizes; needs no GPU.
///
/// ```
/// use tensorfn_runtime::cuda_block_bytes;
/// assert_eq!(cuda_block_bytes(0), 0);
/// assert_eq!(cuda_block_bytes(4), 512);
/// assert_eq!(cuda_block_bytes((1 << 20) + 1), 2 << 20);
/// assert_eq!(cuda_block_bytes(12 << 20), 12 << 20);
/// ```
pub fn cuda_block_bytes(bytes: usize) -> usize {
    pool::round_size(bytes)
}

/// The bytes of scratch a normalisation's backward (`layer_norm`,
/// `rms_norm`) over `rows` rows of `cols` elements of `dtype` allocates on
/// a CUDA device for the duration of the call: each block's partial sums
/// of the weight's (and bias's) gradient, in f32 (f64 for f64). A peak
/// predicted from the tensors a program holds adds it at the norm
/// backward's step; needs no GPU.
///
/// ```
/// use tensorfn_runtime::{cuda_norm_backward_scratch_bytes, DTypeKind};
/// // GPT-2's 8192 rows of 768: 1024 blocks of 2 x 768 f32 sums.
/// assert_eq!(cuda_norm_backward_scratch_bytes(8192, 768, DTypeKind::BF16), 1024 * 2 * 768 * 4);
/// assert_eq!(cuda_norm_backward_scratch_bytes(3, 8, DTypeKind::F64), 3 * 2 * 8 * 8);
/// ```
pub fn cuda_norm_backward_scratch_bytes(
    rows: usize,
    cols: usize,
    dtype: crate::DTypeKind,
) -> usize {
    let wide = match dtype {
        crate::DTypeKind::F64 => 2,
        _ => 1,
    };
    context::Context::norm_backward_blocks(rows, cols) * 2 * cols * wide * 4
}

/// What the CUDA backend has queued and waited for since the process
/// started, on every device: kernel launches, library calls, allocations
/// (cache hits and `cuMemAlloc`s), copies between host and device with
/// their bytes, and host waits. Subtract two readings
/// ([`CudaCounters::since`]) to count one step of a loop; all zero when no
/// GPU was used.
///
/// ```
/// use tensorfn_runtime::cuda_counters;
/// let c = cuda_counters();
/// assert!(c.device_allocations <= c.allocations);
/// ```
pub fn cuda_counters() -> CudaCounters {
    counters::read()
}

/// Returns every cached, unused block of cuda:`ordinal` to the driver,
/// like `torch.cuda.empty_cache()`. Tensors alive keep their memory.
///
/// ```
/// use tensorfn_runtime::cuda_empty_cache;
/// if cuda_empty_cache(0).is_ok() {
///     assert_eq!(tensorfn_runtime::cuda_memory_stats(0).unwrap().cached_bytes, 0);
/// }
/// ```
pub fn cuda_empty_cache(ordinal: usize) -> Result<()> {
    context::context(ordinal)?.empty_cache()
}

/// Reserves `bytes` of device memory on cuda:`ordinal` for the caching
/// allocator, so that the tensors of a loop whose peak is at most that
/// never make the allocator call `cuMemAlloc` (which synchronises the
/// device). Call it once before the loop; calling it again while a free
/// range of `bytes` remains is a no-op. The reservation is carved with a
/// 512-byte grain, so leave a small margin above the sum of the tensors'
/// sizes. `Err(OutOfMemory)` when the device cannot hold it (nothing is
/// reserved then and the device stays usable); `Err(CudaUnavailable)`
/// without a GPU. [`cuda_empty_cache`] returns it once no tensor uses it.
///
/// With `tensor_fn!`, a function of static shapes knows its peak:
///
/// ```
/// use tensorfn_runtime::{cuda_memory_stats, cuda_reserve, Error};
///
/// // `mlp::PEAK_BYTES` of a `tensor_fn!` function `mlp`; here a stand-in.
/// mod mlp { pub const PEAK_BYTES: usize = 3 * 64 * 1024 * 4; }
///
/// match cuda_reserve(0, mlp::PEAK_BYTES + (1 << 20)) {
///     Ok(()) => {
///         let before = cuda_memory_stats(0).unwrap().device_allocations;
///         // ... the loop calling `mlp` allocates from the reservation ...
///         assert_eq!(cuda_memory_stats(0).unwrap().device_allocations, before);
///     }
///     Err(e) => assert!(matches!(e, Error::CudaUnavailable { .. } | Error::OutOfMemory { .. })),
/// }
/// // A reservation larger than any device is an error, not an abort.
/// assert!(cuda_reserve(0, usize::MAX / 2).is_err());
/// ```
pub fn cuda_reserve(ordinal: usize, bytes: usize) -> Result<()> {
    context::context(ordinal)?.reserve(bytes)
}

/// [`cuda_reserve`] on the GPU `D` is, nothing on the CPU: code generic
/// over its device reserves a function's peak the same way everywhere.
///
/// ```
/// use tensorfn_runtime::{reserve, Cpu, Cuda, Error};
/// assert!(reserve::<Cpu>(1 << 20).is_ok());
/// match reserve::<Cuda>(1 << 20) {
///     Ok(()) => {}
///     Err(e) => assert!(matches!(e, Error::CudaUnavailable { .. } | Error::OutOfMemory { .. })),
/// }
/// ```
pub fn reserve<D: crate::Device>(bytes: usize) -> Result<()> {
    match D::KIND {
        crate::DeviceKind::Cpu => Ok(()),
        crate::DeviceKind::Cuda(ordinal) => cuda_reserve(ordinal, bytes),
    }
}
