//! A caching allocator in the manner of PyTorch's: device memory freed by a
//! tensor goes to a per-device cache of size classes and is handed to the
//! next request of a fitting size, so a steady-state loop never calls
//! `cuMemAlloc`.
//!
//! Sizes are rounded up to 512 bytes below 1 MiB and to 2 MiB above, which
//! keeps the number of classes small. Every context has one stream, so a
//! block freed by queued work can be reused by later work on that stream
//! at once: the stream runs them in order.
//!
//! When the device is full the cache is emptied and the allocation retried
//! once; a second failure is `Error::OutOfMemory` with the driver's free and
//! total counts, and the device stays usable.

use super::context::{lock, Context};
use super::error::driver;
use crate::dtype::DType;
use crate::error::{Error, Result};
use cudarc::driver::{result, sys};
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;

const SMALL_LIMIT: usize = 1 << 20;
const SMALL_GRAIN: usize = 512;
const LARGE_GRAIN: usize = 2 << 20;

/// The size class a request of `bytes` is served from.
pub(crate) fn round_size(bytes: usize) -> usize {
    let grain = if bytes <= SMALL_LIMIT {
        SMALL_GRAIN
    } else {
        LARGE_GRAIN
    };
    bytes.div_ceil(grain).saturating_mul(grain)
}

/// Largest cached block that may serve a request of class `size`: small
/// classes must match exactly, large ones may waste up to an eighth.
fn largest_fit(size: usize) -> usize {
    if size <= SMALL_LIMIT {
        size
    } else {
        size + (size / 8).max(LARGE_GRAIN)
    }
}

/// A device allocation: its address and its (rounded) size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Block {
    pub(crate) ptr: sys::CUdeviceptr,
    pub(crate) size: usize,
}

/// Free blocks by size and the counters behind [`CudaMemoryStats`].
#[derive(Debug, Default)]
pub(crate) struct CachingAllocator {
    free: BTreeMap<usize, Vec<sys::CUdeviceptr>>,
    allocated: usize,
    cached: usize,
    peak: usize,
    device_allocs: u64,
    device_frees: u64,
}

impl CachingAllocator {
    fn take_cached(&mut self, size: usize) -> Option<Block> {
        let (&found, ptrs) = self.free.range_mut(size..=largest_fit(size)).next()?;
        let ptr = ptrs.pop().expect("empty size classes are removed");
        if ptrs.is_empty() {
            self.free.remove(&found);
        }
        self.cached -= found;
        Some(Block { ptr, size: found })
    }

    fn note_in_use(&mut self, block: Block) {
        self.allocated += block.size;
        self.peak = self.peak.max(self.allocated);
    }

    /// Frees every cached block; the caller has synchronised the stream.
    fn release_cached(&mut self) -> Result<()> {
        let mut first_error = None;
        for (size, ptrs) in std::mem::take(&mut self.free) {
            for ptr in ptrs {
                // SAFETY: cached blocks came from cuMemAlloc and no tensor
                // refers to them; the stream has drained.
                match unsafe { result::free_sync(ptr) } {
                    Ok(()) => self.device_frees += 1,
                    Err(e) => {
                        first_error.get_or_insert(driver("cuMemFree", e));
                    }
                }
                self.cached -= size;
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// Bytes held by the caching allocator on one CUDA device.
///
/// ```
/// use tensorfn_runtime::{cuda_memory_stats, Error};
/// match cuda_memory_stats(0) {
///     Ok(s) => assert!(s.peak_allocated_bytes >= s.allocated_bytes),
///     Err(e) => assert!(matches!(e, Error::CudaUnavailable { .. })),
/// }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CudaMemoryStats {
    /// Bytes in blocks that tensors hold now (rounded to size classes).
    pub allocated_bytes: usize,
    /// Bytes in free blocks kept for reuse.
    pub cached_bytes: usize,
    /// Highest `allocated_bytes` seen.
    pub peak_allocated_bytes: usize,
    /// Number of `cuMemAlloc` calls made so far (constant in a steady state).
    pub device_allocations: u64,
    /// Number of `cuMemFree` calls made so far (cache flushes).
    pub device_frees: u64,
}

impl Context {
    /// A block of at least `bytes`, from the cache when one fits.
    pub(crate) fn alloc(&self, bytes: usize) -> Result<Block> {
        if bytes == 0 {
            return Ok(Block { ptr: 0, size: 0 });
        }
        let size = round_size(bytes);
        if size > self.total_memory {
            // Can never fit: report it without flushing the cache.
            return Err(self.out_of_memory(bytes));
        }
        let mut a = lock(&self.alloc);
        if let Some(block) = a.take_cached(size) {
            a.note_in_use(block);
            return Ok(block);
        }
        let block = match self.device_alloc(size) {
            Ok(ptr) => Block { ptr, size },
            Err(None) => {
                // Out of memory: give the cache back to the driver and retry.
                self.sync("freeing cached GPU memory")?;
                a.release_cached()?;
                match self.device_alloc(size) {
                    Ok(ptr) => Block { ptr, size },
                    Err(None) => return Err(self.out_of_memory(bytes)),
                    Err(Some(e)) => return Err(e),
                }
            }
            Err(Some(e)) => return Err(e),
        };
        a.device_allocs += 1;
        a.note_in_use(block);
        Ok(block)
    }

    /// `cuMemAlloc`; `Err(None)` means out of memory.
    fn device_alloc(&self, size: usize) -> Result<sys::CUdeviceptr, Option<Error>> {
        // SAFETY: plain allocation in the current context.
        match unsafe { result::malloc_sync(size) } {
            Ok(ptr) => Ok(ptr),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => Err(None),
            Err(e) => Err(Some(driver("cuMemAlloc", e))),
        }
    }

    /// Returns a block to the cache.
    pub(crate) fn release(&self, block: Block) {
        if block.size == 0 {
            return;
        }
        let mut a = lock(&self.alloc);
        a.allocated -= block.size;
        a.cached += block.size;
        a.free.entry(block.size).or_default().push(block.ptr);
    }

    /// Frees every cached block (like `torch.cuda.empty_cache()`).
    pub(crate) fn empty_cache(&self) -> Result<()> {
        self.bind()?;
        self.sync("emptying the GPU memory cache")?;
        lock(&self.alloc).release_cached()
    }

    /// The allocator's counters.
    pub(crate) fn memory_stats(&self) -> CudaMemoryStats {
        let a = lock(&self.alloc);
        CudaMemoryStats {
            allocated_bytes: a.allocated,
            cached_bytes: a.cached,
            peak_allocated_bytes: a.peak,
            device_allocations: a.device_allocs,
            device_frees: a.device_frees,
        }
    }

    /// Uninitialised device storage for `len` elements of `T`.
    pub(crate) fn storage<T: DType>(self: &Arc<Self>, len: usize) -> Result<CudaStorage<T>> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| self.out_of_memory(usize::MAX))?;
        let block = self.alloc(bytes)?;
        Ok(CudaStorage {
            block,
            len,
            ctx: self.clone(),
            _marker: PhantomData,
        })
    }

    fn out_of_memory(&self, requested: usize) -> Error {
        let (free, total) = self.mem_info().unwrap_or((0, self.total_memory));
        Error::OutOfMemory {
            requested,
            free,
            total,
        }
    }
}

/// Elements of `T` on a CUDA device, in a block of the caching allocator
/// that goes back to the cache when the storage is dropped.
pub(crate) struct CudaStorage<T: DType> {
    block: Block,
    len: usize,
    ctx: Arc<Context>,
    _marker: PhantomData<T>,
}

impl<T: DType> CudaStorage<T> {
    /// Device address of element 0.
    pub(crate) fn device_ptr(&self) -> u64 {
        self.block.ptr
    }

    /// Device address of element `index` (a view's offset).
    pub(crate) fn ptr_at(&self, index: usize) -> u64 {
        self.block.ptr + (index * std::mem::size_of::<T>()) as u64
    }

    /// Number of elements.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The device this storage lives on.
    pub(crate) fn context(&self) -> &Arc<Context> {
        &self.ctx
    }
}

impl CudaStorage<bool> {
    /// The same bytes as `u8` (booleans are stored as bytes 0 and 1), for
    /// arithmetic such as reductions.
    pub(crate) fn into_bytes(self) -> CudaStorage<u8> {
        let this = std::mem::ManuallyDrop::new(self);
        CudaStorage {
            block: this.block,
            len: this.len,
            // SAFETY: `this` is never dropped, so the context reference is
            // moved out exactly once.
            ctx: unsafe { std::ptr::read(&this.ctx) },
            _marker: PhantomData,
        }
    }
}

impl<T: DType> Drop for CudaStorage<T> {
    fn drop(&mut self) {
        self.ctx.release(self.block);
    }
}

impl<T: DType> std::fmt::Debug for CudaStorage<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaStorage")
            .field("device", &format_args!("cuda:{}", self.ctx.ordinal))
            .field("dtype", &T::KIND)
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_to_their_class() {
        assert_eq!(round_size(1), 512);
        assert_eq!(round_size(512), 512);
        assert_eq!(round_size(513), 1024);
        assert_eq!(round_size(SMALL_LIMIT), SMALL_LIMIT);
        assert_eq!(round_size(SMALL_LIMIT + 1), 2 << 20);
        assert_eq!(round_size((2 << 20) + 1), 4 << 20);
        assert_eq!(round_size(usize::MAX), usize::MAX);
    }

    #[test]
    fn cached_blocks_serve_fitting_requests_only() {
        let mut a = CachingAllocator::default();
        for (size, ptr) in [(512, 1), (1024, 2), (4 << 20, 3), (64 << 20, 4)] {
            a.free.entry(size).or_default().push(ptr);
            a.cached += size;
        }
        // Small classes match exactly.
        assert_eq!(a.take_cached(1024), Some(Block { ptr: 2, size: 1024 }));
        assert_eq!(a.take_cached(1024), None);
        // A large request takes a block up to an eighth (or 2 MiB) bigger.
        assert_eq!(
            a.take_cached(2 << 20),
            Some(Block {
                ptr: 3,
                size: 4 << 20
            })
        );
        assert_eq!(a.take_cached(32 << 20), None);
        assert_eq!(
            a.take_cached(60 << 20),
            Some(Block {
                ptr: 4,
                size: 64 << 20
            })
        );
        assert_eq!(a.cached, 512);
    }
}
