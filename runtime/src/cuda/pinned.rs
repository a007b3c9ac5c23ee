//! Page-locked host buffers behind pinned CPU tensors.
//!
//! A pinned buffer is an ordinary `Vec` whose pages are locked with
//! `cuMemHostRegister`, so every CPU operation reads it as a slice and the
//! DMA engines copy from and into it directly. The registered range is
//! aligned to [`PIN_ALIGN`] inside the `Vec`, so it never shares a page with
//! another allocation (the driver pins whole pages); the elements start at
//! [`PinnedVec::offset`], which the tensor's layout carries.

use super::context::{context, Context};
use super::error::driver;
use crate::cpu::copy::parallel_copy;
use crate::dtype::DType;
use crate::error::{Error, Result};
use cudarc::driver::sys;
use std::ffi::c_void;
use std::sync::Arc;

/// Alignment of the registered range: a multiple of the host page size on
/// every supported platform (4 KiB on x86-64, up to 64 KiB on ARM servers).
pub(crate) const PIN_ALIGN: usize = 64 << 10;

/// `len` elements of `T` in page-locked host memory.
pub(crate) struct PinnedVec<T: DType> {
    /// The buffer; the elements are `data[offset..offset + len]`.
    data: Vec<T>,
    offset: usize,
    len: usize,
    /// Start of the registered range and the context that registered it
    /// (`None` for an empty buffer, which needs no pages).
    registered: Option<(*mut c_void, Arc<Context>)>,
}

// SAFETY: the raw pointer is only the registration handle of memory the
// `Vec` owns; the data itself is plain `T`.
unsafe impl<T: DType> Send for PinnedVec<T> {}
unsafe impl<T: DType> Sync for PinnedVec<T> {}

/// The slack elements before an aligned start and the total length of a
/// buffer of `len` elements of `size` bytes whose pinned range
/// `[start, start + pinned_bytes)` must lie inside it: `(capacity, pinned
/// bytes)`. `None` when the sizes overflow.
fn padded_capacity(len: usize, size: usize) -> Option<(usize, usize)> {
    let bytes = len.checked_mul(size)?;
    let pinned = bytes.checked_next_multiple_of(PIN_ALIGN)?;
    let capacity = pinned.checked_add(PIN_ALIGN)? / size;
    Some((capacity, pinned))
}

impl<T: DType> PinnedVec<T> {
    /// A pinned buffer of `len` elements, each `fill`. `Err` without a GPU
    /// (`CudaUnavailable`), when the host cannot allocate it
    /// (`HostOutOfMemory`) or the driver cannot lock it.
    pub(crate) fn filled(len: usize, fill: T) -> Result<PinnedVec<T>> {
        PinnedVec::filled_in(&context(0)?, len, fill)
    }

    /// [`filled`](Self::filled), registered through `ctx` (the buffer is
    /// pinned for every context all the same).
    pub(crate) fn filled_in(ctx: &Arc<Context>, len: usize, fill: T) -> Result<PinnedVec<T>> {
        let size = std::mem::size_of::<T>();
        if len == 0 {
            return Ok(PinnedVec {
                data: Vec::new(),
                offset: 0,
                len: 0,
                registered: None,
            });
        }
        let requested = len.saturating_mul(size);
        let (capacity, pinned_bytes) =
            padded_capacity(len, size).ok_or(Error::HostOutOfMemory { requested })?;
        let mut data = Vec::new();
        data.try_reserve_exact(capacity)
            .map_err(|_| Error::HostOutOfMemory { requested })?;
        data.resize(capacity, fill);
        let base = data.as_ptr() as usize;
        let start = base.next_multiple_of(PIN_ALIGN);
        // Every dtype's size divides PIN_ALIGN and the Vec is aligned to
        // it, so the slack is a whole number of elements.
        let offset = (start - base) / size;
        debug_assert_eq!((start - base) % size, 0);
        debug_assert!(start + pinned_bytes <= base + capacity * size);
        let ptr = start as *mut c_void;
        ctx.bind()?;
        // SAFETY: `[ptr, ptr + pinned_bytes)` lies inside `data`, which is
        // neither moved nor resized while registered (the Vec's heap buffer
        // stays put when the PinnedVec moves); it is unregistered in Drop
        // before the Vec is freed.
        unsafe {
            sys::cuMemHostRegister_v2(ptr, pinned_bytes, sys::CU_MEMHOSTREGISTER_PORTABLE).result()
        }
        .map_err(|e| match e.0 {
            sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => Error::HostOutOfMemory {
                requested: pinned_bytes,
            },
            _ => driver("cuMemHostRegister (page-locking a host tensor)", e),
        })?;
        Ok(PinnedVec {
            data,
            offset,
            len,
            registered: Some((ptr, ctx.clone())),
        })
    }

    /// A pinned copy of `values`.
    pub(crate) fn from_slice(values: &[T]) -> Result<PinnedVec<T>> {
        let mut p = PinnedVec::filled(values.len(), T::zero())?;
        parallel_copy(values, p.as_mut_slice());
        Ok(p)
    }

    /// The whole buffer, slack included: tensors address it through their
    /// layout, whose offset is at least [`offset`](Self::offset).
    pub(crate) fn buffer(&self) -> &Vec<T> {
        &self.data
    }

    /// The whole buffer for writing. Its length must not change (the
    /// registered range would no longer be the buffer's), which the CPU
    /// backend never does: it writes through slices.
    pub(crate) fn buffer_mut(&mut self) -> &mut Vec<T> {
        &mut self.data
    }

    /// Index of the first element in [`buffer`](Self::buffer).
    pub(crate) fn offset(&self) -> usize {
        self.offset
    }

    /// Number of elements.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The elements.
    pub(crate) fn as_slice(&self) -> &[T] {
        &self.data[self.offset..self.offset + self.len]
    }

    /// The elements, for writing.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        &mut self.data[self.offset..self.offset + self.len]
    }
}

impl<T: DType> Drop for PinnedVec<T> {
    fn drop(&mut self) {
        if let Some((ptr, ctx)) = self.registered.take() {
            // Every copy from or into the buffer was waited for before the
            // call that queued it returned, so no DMA is in flight. A
            // failure leaves the pages locked until the process exits,
            // which is harmless; the Vec is freed either way.
            if ctx.bind().is_ok() {
                // SAFETY: `ptr` was registered by `filled` and not since.
                let _ = unsafe { sys::cuMemHostUnregister(ptr) };
            }
        }
    }
}

impl<T: DType> std::fmt::Debug for PinnedVec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedVec")
            .field("dtype", &T::KIND)
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pinned_range_fits_inside_the_buffer_at_any_start() {
        for size in [1, 2, 4, 8] {
            for len in [1, 7, PIN_ALIGN / size, PIN_ALIGN / size + 1, 1_000_003] {
                let (cap, pinned) = padded_capacity(len, size).unwrap();
                assert!(pinned >= len * size && pinned % PIN_ALIGN == 0);
                // The worst start is one element past an aligned address.
                let worst_slack = PIN_ALIGN - size;
                assert!(worst_slack + pinned <= cap * size, "size {size} len {len}");
            }
        }
        assert!(padded_capacity(usize::MAX / 2, 4).is_none());
    }

    #[test]
    fn without_a_gpu_pinning_is_unavailable() {
        if context(0).is_ok() {
            return;
        }
        match PinnedVec::<f32>::filled(10, 1.0) {
            Err(Error::CudaUnavailable { .. }) => {}
            other => panic!("expected CudaUnavailable, got {other:?}"),
        }
    }
}
