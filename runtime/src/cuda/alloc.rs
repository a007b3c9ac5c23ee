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

/// One `cuMemAlloc` made by [`cuda_reserve`](super::cuda_reserve) and carved
/// into blocks (best fit, 512-byte grain); freed blocks merge with their
/// free neighbours, so a loop that allocates and frees the same sizes every
/// step lands on the same addresses every step.
#[derive(Debug)]
pub(crate) struct Arena {
    base: sys::CUdeviceptr,
    size: usize,
    /// Free ranges: offset -> length, never adjacent (merged on free).
    free: BTreeMap<usize, usize>,
}

impl Arena {
    fn new(base: sys::CUdeviceptr, size: usize) -> Arena {
        Arena {
            base,
            size,
            free: BTreeMap::from([(0, size)]),
        }
    }

    fn contains(&self, ptr: sys::CUdeviceptr) -> bool {
        ptr >= self.base && ptr < self.base + self.size as u64
    }

    fn largest_free(&self) -> usize {
        self.free.values().copied().max().unwrap_or(0)
    }

    fn is_unused(&self) -> bool {
        self.free.get(&0) == Some(&self.size)
    }

    /// The smallest free range that holds `size` bytes, cut from its start.
    fn take(&mut self, size: usize) -> Option<Block> {
        let (&offset, &len) = self
            .free
            .iter()
            .filter(|(_, &len)| len >= size)
            .min_by_key(|(_, &len)| len)?;
        self.free.remove(&offset);
        if len > size {
            self.free.insert(offset + size, len - size);
        }
        Some(Block {
            ptr: self.base + offset as u64,
            size,
        })
    }

    /// Returns a block taken from this arena, merging it with free
    /// neighbours.
    fn give_back(&mut self, block: Block) {
        let mut offset = (block.ptr - self.base) as usize;
        let mut len = block.size;
        if let Some((&next, &next_len)) = self.free.range(offset + len..).next() {
            if next == offset + len {
                self.free.remove(&next);
                len += next_len;
            }
        }
        if let Some((&prev, &prev_len)) = self.free.range(..offset).next_back() {
            if prev + prev_len == offset {
                self.free.remove(&prev);
                offset = prev;
                len += prev_len;
            }
        }
        self.free.insert(offset, len);
    }
}

/// Free blocks by size, reserved arenas and the counters behind
/// [`CudaMemoryStats`].
#[derive(Debug, Default)]
pub(crate) struct CachingAllocator {
    free: BTreeMap<usize, Vec<sys::CUdeviceptr>>,
    arenas: Vec<Arena>,
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

    /// A block of `bytes` from a reserved arena, if one has room.
    fn take_reserved(&mut self, bytes: usize) -> Option<Block> {
        let size = bytes.checked_next_multiple_of(SMALL_GRAIN)?;
        let block = self.arenas.iter_mut().find_map(|a| a.take(size))?;
        self.cached -= block.size;
        Some(block)
    }

    /// Returns a block to the arena it came from; false if it came from
    /// no arena.
    fn give_back_reserved(&mut self, block: Block) -> bool {
        match self.arenas.iter_mut().find(|a| a.contains(block.ptr)) {
            Some(arena) => {
                arena.give_back(block);
                true
            }
            None => false,
        }
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
        // Arenas without a live block go too; used ones stay.
        let (unused, used): (Vec<Arena>, Vec<Arena>) = std::mem::take(&mut self.arenas)
            .into_iter()
            .partition(Arena::is_unused);
        self.arenas = used;
        for arena in unused {
            // SAFETY: no block of the arena is in use; the stream has drained.
            match unsafe { result::free_sync(arena.base) } {
                Ok(()) => self.device_frees += 1,
                Err(e) => {
                    first_error.get_or_insert(driver("cuMemFree", e));
                }
            }
            self.cached -= arena.size;
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
    fn an_arena_carves_best_fit_blocks_and_merges_them_back() {
        let mut a = Arena::new(1 << 20, 10 * 512);
        let b0 = a.take(2 * 512).unwrap();
        let b1 = a.take(3 * 512).unwrap();
        let b2 = a.take(5 * 512).unwrap();
        assert_eq!(
            (b0.ptr, b1.ptr, b2.ptr),
            (1 << 20, (1 << 20) + 1024, (1 << 20) + 2560)
        );
        assert!(a.take(512).is_none());
        a.give_back(b0);
        a.give_back(b2);
        // Best fit: a 2-grain request takes the 2-grain hole, not the 5.
        assert_eq!(a.take(2 * 512).unwrap().ptr, 1 << 20);
        a.give_back(Block {
            ptr: 1 << 20,
            size: 1024,
        });
        assert!(!a.is_unused());
        a.give_back(b1);
        // All three merged into one range again.
        assert!(a.is_unused());
        assert_eq!(a.largest_free(), 10 * 512);
        assert!(a.contains((1 << 20) + 10 * 512 - 1) && !a.contains((1 << 20) + 10 * 512));
    }

    #[test]
    fn reserved_blocks_are_counted_as_cached_until_taken() {
        let mut c = CachingAllocator::default();
        c.arenas.push(Arena::new(4096, 8 << 20));
        c.cached = 8 << 20;
        let b = c.take_reserved(1000).unwrap();
        assert_eq!(b.size, 1024);
        assert_eq!(c.cached, (8 << 20) - 1024);
        assert!(c.take_reserved((8 << 20) - 1024 + 1).is_none());
        c.cached += b.size;
        assert!(c.give_back_reserved(b));
        assert!(!c.give_back_reserved(Block { ptr: 1, size: 512 }));
        assert!(c.arenas[0].is_unused());
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
