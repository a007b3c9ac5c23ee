//! The CUDA backend: cudarc with the driver and cuBLAS loaded at run time,
//! so one build serves machines with and without a GPU.
//!
//! - `context`: one context and stream per ordinal, created lazily; a
//!   missing driver, device or ordinal is `Error::CudaUnavailable`.
//! - `alloc`: the caching allocator behind `CudaStorage`.
//! - `transfer`: host/device copies through pinned staging buffers.
//! - `launch`: PTX modules (built-in and `tensor_fn!`-generated) and launches.
//! - `blas`: cuBLAS / cuBLASLt matrix products.
//! - `backend`: the `Backend` primitives.
//! - `error`: driver and cuBLAS statuses as `Error`s.
//! - `addmm_relu`: the fused linear-layer entry point for `tensor_fn!`.

mod addmm_relu;
mod alloc;
mod backend;
mod blas;
mod concat;
mod context;
mod error;
mod launch;
mod transfer;

#[cfg(test)]
mod tests;

use crate::error::Result;

pub use alloc::CudaMemoryStats;
pub(crate) use alloc::CudaStorage;
pub(crate) use backend::CudaBackend;
pub use blas::{allow_tf32, set_allow_tf32};
pub use context::cuda_device_count;
pub(crate) use launch::launch_fused;
pub(crate) use transfer::{copy_to_ordinal, download, upload};

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

/// `(free, total)` bytes of cuda:`ordinal` as the driver reports them
/// (blocks cached by the allocator count as used).
pub(crate) fn mem_info(ordinal: usize) -> Result<(usize, usize)> {
    context::context(ordinal)?.mem_info()
}
