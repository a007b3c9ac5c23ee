//! New output buffers. Elementwise ops and softmax write each element of
//! their output exactly once, so the buffer is left uninitialised: a
//! zeroing pass first would add a third of the memory traffic of `x * 2`.
//!
//! Large buffers would get fresh pages from the system on every call (the
//! C allocator maps anything above a few tens of MB afresh and unmaps it
//! when freed), and the kernel zeroes every fresh page before handing it
//! over: for `sin(x) * 2 + 5` over 64 MB that zeroing took as long as the
//! op. So large host buffers of dropped CPU tensors are kept in a small
//! pool ([`recycle`]) and handed to the next output of about their size,
//! like a caching allocator; [`cpu_empty_cache`] returns them. On Linux,
//! new large buffers are also advised onto transparent huge pages, 2 MB
//! each, as NumPy does for its arrays: a fresh 64 MB output faults 32
//! times instead of 16384.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Mutex;

/// Buffers at least this large are advised onto huge pages and pooled
/// when freed. Two huge pages, so that the advice covers most of the
/// buffer after rounding its ends inwards to 2 MB boundaries.
const LARGE_BYTES: usize = 4 << 20;

/// At most this many bytes wait in the pool; the oldest go first.
const POOL_BYTES: usize = 512 << 20;

/// At most this many buffers wait in the pool.
const POOL_BUFFERS: usize = 16;

/// An output takes a pooled buffer up to this fraction (1/8) larger than
/// it needs, so that a small output does not pin a much larger buffer.
const SLACK_SHIFT: u32 = 3;

/// A freed allocation: the address and layout it was allocated with.
struct Block {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: a block is an allocation no one else refers to; it may be
// reused or freed from any thread.
unsafe impl Send for Block {}

/// Freed large buffers, oldest first, and their total size.
struct Pool {
    blocks: Vec<Block>,
    bytes: usize,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    blocks: Vec::new(),
    bytes: 0,
});

fn pool() -> std::sync::MutexGuard<'static, Pool> {
    // Every critical section leaves the pool consistent.
    POOL.lock().unwrap_or_else(|p| p.into_inner())
}

/// An empty `Vec` with room for `n` elements, for a writer that fills all
/// of them through [`Vec::spare_capacity_mut`] before setting the length
/// (the caller's `unsafe` vouches for that). Large buffers come from the
/// pool of freed ones when one fits.
pub(crate) fn output_buffer<O>(n: usize) -> Vec<O> {
    let bytes = n.saturating_mul(std::mem::size_of::<O>());
    if bytes >= LARGE_BYTES {
        if let Some(v) = take_pooled(bytes) {
            return v;
        }
    }
    let out = Vec::with_capacity(n);
    advise_huge_pages(out.as_ptr() as usize, bytes);
    out
}

/// The smallest pooled buffer that holds `bytes` as `O`s, allocated with
/// `O`'s alignment and at most 1/8 larger, as an empty `Vec`.
fn take_pooled<O>(bytes: usize) -> Option<Vec<O>> {
    let (size, align) = (std::mem::size_of::<O>(), std::mem::align_of::<O>());
    let block = {
        let mut pool = pool();
        let fits = |b: &Block| {
            b.layout.align() == align
                && b.layout.size() >= bytes
                && b.layout.size() - bytes <= bytes >> SLACK_SHIFT
                && b.layout.size() % size == 0
        };
        let (i, _) = pool
            .blocks
            .iter()
            .enumerate()
            .filter(|(_, b)| fits(b))
            .min_by_key(|(_, b)| b.layout.size())?;
        let block = pool.blocks.remove(i);
        pool.bytes -= block.layout.size();
        block
    };
    // SAFETY: the block was allocated by the global allocator with
    // `block.layout`, which is the layout of a `Vec<O>` of this capacity
    // (same size, `O`'s alignment); length 0 reads nothing.
    Some(unsafe {
        Vec::from_raw_parts(
            block.ptr.as_ptr().cast::<O>(),
            0,
            block.layout.size() / size,
        )
    })
}

/// Takes the allocation of a dropped tensor's buffer: a large one waits in
/// the pool for the next output of its size, anything else is freed now.
pub(crate) fn recycle<T: Copy>(v: Vec<T>) {
    let Ok(layout) = Layout::array::<T>(v.capacity()) else {
        return;
    };
    if layout.size() < LARGE_BYTES || layout.size() > POOL_BYTES {
        return;
    }
    // `T: Copy`: the elements need no drop, only the allocation is kept.
    let mut v = std::mem::ManuallyDrop::new(v);
    let Some(ptr) = NonNull::new(v.as_mut_ptr().cast::<u8>()) else {
        return;
    };
    let evicted = {
        let mut pool = pool();
        pool.blocks.push(Block { ptr, layout });
        pool.bytes += layout.size();
        let mut evicted = Vec::new();
        while pool.bytes > POOL_BYTES || pool.blocks.len() > POOL_BUFFERS {
            let old = pool.blocks.remove(0);
            pool.bytes -= old.layout.size();
            evicted.push(old);
        }
        evicted
    };
    evicted.into_iter().for_each(free);
}

fn free(b: Block) {
    // SAFETY: the block came from the global allocator with this layout
    // and is owned by nothing else.
    unsafe { std::alloc::dealloc(b.ptr.as_ptr(), b.layout) }
}

/// Returns the host buffers that dropped CPU tensors left for reuse to the
/// system; tensors alive keep their memory. The CPU counterpart of
/// `cuda_empty_cache`: large (4 MB and more) buffers of dropped tensors are
/// kept, 512 MB at most, so that the next output of the same size does not
/// wait for the operating system to clear fresh pages.
///
/// ```
/// use tensorfn_runtime::{cpu_empty_cache, shape, Cpu, Tensor};
/// let x = Tensor::<Cpu, f32, shape![_]>::zeros_dims(&[1 << 21]).unwrap();
/// let y = x.abs().unwrap();
/// drop(y); // its 8 MB buffer waits for the next output of its size
/// cpu_empty_cache(); // and is freed here
/// assert_eq!(x.to_vec().unwrap().len(), 1 << 21);
/// ```
pub fn cpu_empty_cache() {
    let blocks = {
        let mut pool = pool();
        pool.bytes = 0;
        std::mem::take(&mut pool.blocks)
    };
    blocks.into_iter().for_each(free);
}

/// Bytes waiting in the pool, for tests.
#[cfg(test)]
fn pooled_bytes() -> usize {
    pool().bytes
}

/// Asks the kernel to back the whole 2 MB pages inside `[addr, addr +
/// bytes)` with huge pages. Only advice: the kernel may ignore it (huge
/// pages off, none free), and the memory behaves the same either way.
#[cfg(target_os = "linux")]
fn advise_huge_pages(addr: usize, bytes: usize) {
    const HUGE: usize = 2 << 20;
    if bytes < LARGE_BYTES {
        return;
    }
    let start = addr.next_multiple_of(HUGE);
    let end = (addr + bytes) / HUGE * HUGE;
    if end > start {
        // SAFETY: the range lies inside an allocation this process owns;
        // MADV_HUGEPAGE changes how its pages are backed, never their
        // contents. A failure (e.g. a kernel without huge pages) only
        // leaves the advice unapplied.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_addr: usize, _bytes: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_and_small_buffers_hold_what_is_written() {
        for n in [0usize, 1, 1000, (LARGE_BYTES / 4) * 3 + 7] {
            let mut out = output_buffer::<f32>(n);
            assert!(out.capacity() >= n);
            for (i, o) in out.spare_capacity_mut()[..n].iter_mut().enumerate() {
                o.write(i as f32);
            }
            // SAFETY: all `n` elements were written above.
            unsafe { out.set_len(n) };
            assert!(out.iter().enumerate().all(|(i, &v)| v == i as f32));
        }
    }

    #[test]
    fn large_buffers_are_reused_small_ones_freed() {
        // Other tests allocate in parallel: the sizes here are odd enough
        // that no other buffer takes this test's blocks.
        let n = LARGE_BYTES / 8 * 3 + 1;
        let mut first = output_buffer::<f64>(n);
        first.extend((0..n).map(|i| i as f64));
        let addr = first.as_ptr() as usize;
        recycle(first);
        // The same bytes as f32s: another alignment, so not that block.
        let other = output_buffer::<f32>(n * 2);
        assert_ne!(other.as_ptr() as usize, addr);
        // A slightly smaller f64 output takes it, empty.
        let again = output_buffer::<f64>(n - 5);
        assert_eq!(again.as_ptr() as usize, addr);
        assert!(again.is_empty() && again.capacity() == n);
        // One that the block would hold with more than 1/8 to spare not.
        recycle(again);
        let small = output_buffer::<f64>(n / 2);
        assert_ne!(small.as_ptr() as usize, addr);
        recycle(other);
        recycle(small);
        cpu_empty_cache();
        // Small buffers are freed at once, never pooled.
        let before = pooled_bytes();
        recycle(vec![1.0f32; 1000]);
        assert!(pooled_bytes() <= before);
    }
}
