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
//! [`cuda_reserve`](super::cuda_reserve) adds arenas: one `cuMemAlloc`
//! each, carved into blocks for requests the size classes cannot serve, so
//! a loop whose peak was reserved beforehand never calls `cuMemAlloc`.
//!
//! When the device is full the cache is emptied and the allocation retried
//! once; a second failure is `Error::OutOfMemory` with the driver's free and
//! total counts, and the device stays usable.

use super::context::Context;
use super::error::{driver, lock};
use super::pool::{round_size, Arena, Block, LARGE_GRAIN};
use crate::dtype::DType;
use crate::error::{Error, Result};
use cudarc::driver::{result, sys};
use std::marker::PhantomData;
use std::sync::Arc;

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
        super::counters::add(super::Count::Allocation, 1);
        let mut a = lock(&self.alloc);
        if let Some(block) = a.take_cached(size).or_else(|| a.take_reserved(bytes)) {
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
        super::counters::add(super::Count::DeviceAllocation, 1);
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
        if !a.give_back_reserved(block) {
            a.free.entry(block.size).or_default().push(block.ptr);
        }
    }

    /// Makes sure `bytes` can be allocated without calling `cuMemAlloc`: a
    /// no-op when a reserved arena has a free range that large, else one
    /// new arena of `bytes` (rounded up to 2 MiB).
    pub(crate) fn reserve(&self, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let size = match bytes.checked_next_multiple_of(LARGE_GRAIN) {
            Some(size) if size <= self.total_memory => size,
            _ => return Err(self.out_of_memory(bytes)),
        };
        self.bind()?;
        let mut a = lock(&self.alloc);
        if a.arenas.iter().any(|arena| arena.largest_free() >= bytes) {
            return Ok(());
        }
        let ptr = match self.device_alloc(size) {
            Ok(ptr) => ptr,
            Err(None) => {
                // The cached blocks may be what fills the device.
                self.sync("freeing cached GPU memory")?;
                a.release_cached()?;
                match self.device_alloc(size) {
                    Ok(ptr) => ptr,
                    Err(None) => return Err(self.out_of_memory(bytes)),
                    Err(Some(e)) => return Err(e),
                }
            }
            Err(Some(e)) => return Err(e),
        };
        a.device_allocs += 1;
        a.cached += size;
        a.arenas.push(Arena::new(ptr, size));
        Ok(())
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
