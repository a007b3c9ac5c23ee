//! The caching allocator's books for one device: free blocks by size
//! class, reserved arenas carved into blocks, and the counters behind
//! `CudaMemoryStats`. The context keeps one; `alloc` serves tensors from it.

use super::error::driver;
use crate::error::Result;
use cudarc::driver::{result, sys};
use std::collections::BTreeMap;

pub(crate) const SMALL_LIMIT: usize = 1 << 20;
pub(crate) const SMALL_GRAIN: usize = 512;
pub(crate) const LARGE_GRAIN: usize = 2 << 20;

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
    pub(crate) fn new(base: sys::CUdeviceptr, size: usize) -> Arena {
        Arena {
            base,
            size,
            free: BTreeMap::from([(0, size)]),
        }
    }

    fn contains(&self, ptr: sys::CUdeviceptr) -> bool {
        ptr >= self.base && ptr < self.base + self.size as u64
    }

    pub(crate) fn largest_free(&self) -> usize {
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
            .filter(|&(_, &len)| len >= size)
            .min_by_key(|&(_, &len)| len)?;
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
    pub(crate) free: BTreeMap<usize, Vec<sys::CUdeviceptr>>,
    pub(crate) arenas: Vec<Arena>,
    pub(crate) allocated: usize,
    pub(crate) cached: usize,
    pub(crate) peak: usize,
    pub(crate) device_allocs: u64,
    pub(crate) device_frees: u64,
}

impl CachingAllocator {
    pub(crate) fn take_cached(&mut self, size: usize) -> Option<Block> {
        let (&found, ptrs) = self.free.range_mut(size..=largest_fit(size)).next()?;
        let ptr = ptrs.pop().expect("empty size classes are removed");
        if ptrs.is_empty() {
            self.free.remove(&found);
        }
        self.cached -= found;
        Some(Block { ptr, size: found })
    }

    /// A block of `bytes` from a reserved arena, if one has room.
    pub(crate) fn take_reserved(&mut self, bytes: usize) -> Option<Block> {
        let size = bytes.checked_next_multiple_of(SMALL_GRAIN)?;
        let block = self.arenas.iter_mut().find_map(|a| a.take(size))?;
        self.cached -= block.size;
        Some(block)
    }

    /// Returns a block to the arena it came from; false if it came from
    /// no arena.
    pub(crate) fn give_back_reserved(&mut self, block: Block) -> bool {
        match self.arenas.iter_mut().find(|a| a.contains(block.ptr)) {
            Some(arena) => {
                arena.give_back(block);
                true
            }
            None => false,
        }
    }

    pub(crate) fn note_in_use(&mut self, block: Block) {
        self.allocated += block.size;
        self.peak = self.peak.max(self.allocated);
    }

    /// Frees every cached block; the caller has synchronised the stream.
    pub(crate) fn release_cached(&mut self) -> Result<()> {
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
