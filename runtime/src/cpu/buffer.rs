//! New output buffers. Elementwise ops and softmax write each element of
//! their output exactly once, so the buffer is left uninitialised: a
//! zeroing pass first would add a third of the memory traffic of `x * 2`.
//!
//! Large buffers get fresh pages from the system on every call (the C
//! allocator maps anything above a few tens of MB afresh), and touching
//! them page by page cost more than the op itself: 16384 faults for a
//! 64 MB output. On Linux such buffers are advised onto transparent huge
//! pages, 2 MB each, as NumPy does for its arrays.

/// Buffers at least this large are advised onto huge pages: two of them,
/// so that the advice covers most of the buffer after rounding its ends
/// inwards to 2 MB boundaries.
const HUGE_PAGE_ADVICE_BYTES: usize = 4 << 20;

/// An empty `Vec` with room for `n` elements, for a writer that fills all
/// of them through [`Vec::spare_capacity_mut`] before setting the length
/// (the caller's `unsafe` vouches for that).
pub(crate) fn output_buffer<O>(n: usize) -> Vec<O> {
    let out = Vec::with_capacity(n);
    advise_huge_pages(out.as_ptr() as usize, n * std::mem::size_of::<O>());
    out
}

/// Asks the kernel to back the whole 2 MB pages inside `[addr, addr +
/// bytes)` with huge pages. Only advice: the kernel may ignore it (huge
/// pages off, none free), and the memory behaves the same either way.
#[cfg(target_os = "linux")]
fn advise_huge_pages(addr: usize, bytes: usize) {
    const HUGE: usize = 2 << 20;
    if bytes < HUGE_PAGE_ADVICE_BYTES {
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
        for n in [0usize, 1, 1000, (HUGE_PAGE_ADVICE_BYTES / 4) * 3 + 7] {
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
}
