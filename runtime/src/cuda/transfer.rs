//! Copies between host and device through pinned staging buffers, and
//! between devices.
//!
//! Each context keeps two pinned halves, allocated on the first transfer
//! and reused afterwards. Large copies go through them in chunks: while the
//! DMA engine moves one half, the CPU fills or drains the other. An event
//! per half says when the device is done with it, so an upload returns as
//! soon as its bytes are in pinned memory; a download waits for its last
//! chunk before handing the data over. Small uploads go through the ring
//! of `staging` instead, which waits only when it comes round.

use super::alloc::CudaStorage;
use super::backend::CudaBackend;
use super::context::Context;
use super::counters::{self, Count};
use super::error::{driver, lock};
use super::staging::{Staging, HALF_BYTES, SMALL_BYTES};
use crate::backend::{Backend, CopyTo};
use crate::cpu::copy::{gather, parallel_copy};
use crate::cpu::CpuBackend;
use crate::dtype::{DType, DTypeKind};
use crate::error::Result;
use crate::layout::Layout;
use cudarc::driver::{result, sys};
use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};

/// The raw bytes of a slice of dtype values (every dtype is plain data
/// without padding).
fn bytes_of<T: DType>(data: &[T]) -> &[u8] {
    // SAFETY: DType values are integers, floats or bool: no padding, any
    // byte view is valid to read.
    unsafe { std::slice::from_raw_parts(data.as_ptr() as *const u8, std::mem::size_of_val(data)) }
}

impl Context {
    fn with_staging<R>(&self, f: impl FnOnce(&mut Staging) -> Result<R>) -> Result<R> {
        let mut guard = lock(&self.staging);
        if guard.is_none() {
            *guard = Some(Staging::create()?);
        }
        f(guard.as_mut().expect("created above"))
    }

    /// Queues a copy of `src` to device address `dst`. Returns once every
    /// byte is in pinned memory; the device finishes in stream order.
    pub(crate) fn copy_htod(&self, src: &[u8], dst: u64) -> Result<()> {
        counters::copy(Count::HostToDevice, Count::HostToDeviceBytes, src.len());
        self.with_staging(|st| {
            if !src.is_empty() && src.len() <= SMALL_BYTES {
                return st.upload_small(src, dst, self.stream);
            }
            for (i, chunk) in src.chunks(HALF_BYTES).enumerate() {
                let h = i % 2;
                st.wait(h)?;
                // SAFETY: the half holds HALF_BYTES >= chunk.len() bytes and
                // the device is done with it (waited above).
                let pinned = unsafe { std::slice::from_raw_parts_mut(st.halves[h], chunk.len()) };
                parallel_copy(chunk, pinned);
                let at = dst + (i * HALF_BYTES) as u64;
                // SAFETY: `dst` has room for `src` (callers allocate it) and
                // the pinned half stays untouched until the event fires.
                unsafe { result::memcpy_htod_async(at, pinned, self.stream) }
                    .map_err(|e| driver("cuMemcpyHtoDAsync", e))?;
                st.record(h, self.stream)?;
            }
            Ok(())
        })
    }

    /// Copies `len` bytes from device address `src` into `dst`, waiting for
    /// all queued work first (it is queued before the copy).
    pub(crate) fn copy_dtoh(&self, src: u64, dst: &mut [u8]) -> Result<()> {
        counters::copy(Count::DeviceToHost, Count::DeviceToHostBytes, dst.len());
        let chunks: Vec<(usize, usize)> = (0..dst.len())
            .step_by(HALF_BYTES)
            .map(|start| (start, HALF_BYTES.min(dst.len() - start)))
            .collect();
        self.with_staging(|st| {
            let issue = |st: &mut Staging, i: usize| -> Result<()> {
                let (start, len) = chunks[i];
                let h = i % 2;
                st.wait(h)?;
                // SAFETY: the half has room for `len` bytes and nothing else
                // uses it until its event fires.
                let pinned = unsafe { std::slice::from_raw_parts_mut(st.halves[h], len) };
                unsafe { result::memcpy_dtoh_async(pinned, src + start as u64, self.stream) }
                    .map_err(|e| driver("cuMemcpyDtoHAsync", e))?;
                st.record(h, self.stream)
            };
            if !chunks.is_empty() {
                issue(st, 0)?;
            }
            for (i, &(start, len)) in chunks.iter().enumerate() {
                if i + 1 < chunks.len() {
                    issue(st, i + 1)?;
                }
                let h = i % 2;
                counters::add(Count::Sync, 1);
                // SAFETY: the event of this half was recorded after its copy.
                unsafe { result::event::synchronize(st.events[h]) }
                    .map_err(|e| driver("copying GPU memory to the host", e))?;
                // SAFETY: the copy into the half has completed.
                let pinned = unsafe { std::slice::from_raw_parts(st.halves[h], len) };
                parallel_copy(pinned, &mut dst[start..start + len]);
            }
            Ok(())
        })
    }
}

/// Copies a host buffer into new storage of `ctx`.
pub(crate) fn upload_to<T: DType>(ctx: &Arc<Context>, data: &[T]) -> Result<CudaStorage<T>> {
    let storage = ctx.storage::<T>(data.len())?;
    if !data.is_empty() {
        ctx.copy_htod(bytes_of(data), storage.device_ptr())?;
    }
    Ok(storage)
}

/// The elements `layout` selects, contiguous on the device: the storage
/// itself when it already is, else a copy made by the strided-copy kernel.
/// Returns the device address of the first element and the copy, if any.
pub(crate) fn contiguous_ptr<T: DType>(
    s: &CudaStorage<T>,
    layout: &Layout,
) -> Result<(u64, Option<CudaStorage<T>>)> {
    if layout.is_contiguous() {
        return Ok((s.ptr_at(layout.offset()), None));
    }
    let backend = CudaBackend::on(s.context().clone());
    let copy = backend.contiguous(s, layout)?;
    Ok((copy.device_ptr(), Some(copy)))
}

/// Copies the elements a layout selects back to the host, row-major.
pub(crate) fn download<T: DType>(s: &CudaStorage<T>, layout: &Layout) -> Result<Vec<T>> {
    let n = layout.numel();
    if n == 0 {
        return Ok(Vec::new());
    }
    let ctx = s.context();
    ctx.bind()?;
    let (ptr, _copy) = contiguous_ptr(s, layout)?;
    if T::KIND == DTypeKind::Bool {
        // Not every byte is a valid bool: read bytes, then compare.
        let mut bytes = vec![0u8; n];
        ctx.copy_dtoh(ptr, &mut bytes)?;
        return Ok(bools_from_bytes(&bytes));
    }
    // The staging buffer drains straight into the result: one host copy.
    let mut out = vec![T::zero(); n];
    ctx.copy_dtoh(ptr, bytes_of_mut(&mut out))?;
    Ok(out)
}

/// Copies page-locked host memory to new storage of `ctx` with one DMA
/// and no staging copy. Returns once the copy is done, so the caller may
/// write to or free `data` right away.
fn upload_pinned<T: DType>(ctx: &Arc<Context>, data: &[T]) -> Result<CudaStorage<T>> {
    let storage = ctx.storage::<T>(data.len())?;
    if !data.is_empty() {
        // SAFETY: the storage has room for `data`; `data` is page-locked
        // and borrowed until the stream has drained below.
        unsafe { result::memcpy_htod_async(storage.device_ptr(), data, ctx.stream) }
            .map_err(|e| driver("cuMemcpyHtoDAsync (from a pinned host tensor)", e))?;
        counters::copy(
            Count::HostToDevice,
            Count::HostToDeviceBytes,
            std::mem::size_of_val(data),
        );
        ctx.sync("copying a pinned host tensor to the GPU")?;
    }
    Ok(storage)
}

/// Copies the elements `layout` selects into `dst` (row-major, exactly
/// `layout.numel()` long). `pinned` says `dst` is page-locked: the DMA
/// engine then writes it directly; otherwise the bytes go through the
/// staging buffers. Returns once `dst` holds the data.
fn download_into<T: DType>(
    s: &CudaStorage<T>,
    layout: &Layout,
    dst: &mut [T],
    pinned: bool,
) -> Result<()> {
    debug_assert_eq!(dst.len(), layout.numel());
    if dst.is_empty() {
        return Ok(());
    }
    let ctx = s.context();
    ctx.bind()?;
    let (ptr, _copy) = contiguous_ptr(s, layout)?;
    if T::KIND == DTypeKind::Bool {
        let mut bytes = vec![0u8; dst.len()];
        ctx.copy_dtoh(ptr, &mut bytes)?;
        for (d, b) in dst.iter_mut().zip(bytes) {
            *d = T::from_i64(i64::from(b != 0));
        }
        return Ok(());
    }
    if pinned {
        let bytes = bytes_of_mut(dst);
        // SAFETY: `dst` is page-locked, has room for the bytes and stays
        // borrowed until the stream has drained below; `ptr` addresses as
        // many bytes of live device memory (`_copy` keeps a temporary).
        unsafe { result::memcpy_dtoh_async(bytes, ptr, ctx.stream) }
            .map_err(|e| driver("cuMemcpyDtoHAsync (into a pinned host tensor)", e))?;
        counters::copy(Count::DeviceToHost, Count::DeviceToHostBytes, bytes.len());
        return ctx.sync("copying GPU memory into a pinned host tensor");
    }
    ctx.copy_dtoh(ptr, bytes_of_mut(dst))
}

/// The bytes of a slice of a non-bool dtype, for writing.
fn bytes_of_mut<T: DType>(data: &mut [T]) -> &mut [u8] {
    assert_ne!(T::KIND, DTypeKind::Bool, "not every byte is a bool");
    // SAFETY: every bit pattern is a valid value of the non-bool dtypes,
    // which have no padding; the view covers exactly the slice.
    unsafe {
        std::slice::from_raw_parts_mut(data.as_mut_ptr() as *mut u8, std::mem::size_of_val(data))
    }
}

/// Booleans from their device bytes: any non-zero byte is `true`.
fn bools_from_bytes<T: DType>(bytes: &[u8]) -> Vec<T> {
    bytes
        .iter()
        .map(|&b| T::from_i64(i64::from(b != 0)))
        .collect()
}

/// Copies the elements a layout selects to the device of `dst` (the same
/// one or another), contiguous.
fn copy_to_context<T: DType>(
    s: &CudaStorage<T>,
    layout: &Layout,
    dst: &Arc<Context>,
) -> Result<CudaStorage<T>> {
    let src = s.context().clone();
    let dst = dst.clone();
    src.bind()?;
    let (ptr, _copy) = contiguous_ptr(s, layout)?;
    let bytes = layout.numel() * std::mem::size_of::<T>();
    if src.ordinal == dst.ordinal {
        let out = src.storage::<T>(layout.numel())?;
        if bytes > 0 {
            // SAFETY: both ranges are live allocations of `bytes` bytes.
            unsafe { result::memcpy_dtod_async(out.device_ptr(), ptr, bytes, src.stream) }
                .map_err(|e| driver("cuMemcpyDtoDAsync", e))?;
            counters::copy(Count::DeviceToDevice, Count::DeviceToDeviceBytes, bytes);
        }
        return Ok(out);
    }
    // The source's queued work must finish before another stream reads it.
    src.sync("copying between GPUs")?;
    dst.bind()?;
    let out = dst.storage::<T>(layout.numel())?;
    if bytes > 0 {
        enable_peer_access(&src, &dst);
        // SAFETY: both ranges are live allocations of `bytes` bytes; the
        // copy goes over NVLink or PCIe where peer access is on, and the
        // driver stages it through the host otherwise.
        unsafe {
            result::memcpy_peer_async(dst.raw, out.device_ptr(), src.raw, ptr, bytes, dst.stream)
        }
        .map_err(|e| driver("cuMemcpyPeerAsync", e))?;
        // The source block may be reused by its own stream once this
        // returns, so the copy must be complete.
        dst.sync("copying between GPUs")?;
    }
    Ok(out)
}

/// Turns on peer access between the two devices, both ways, where
/// `cuDeviceCanAccessPeer` says they have it (once per pair), so that
/// `cuMemcpyPeerAsync` copies directly between them instead of through the
/// host. Leaves `dst` bound. Where it cannot be turned on, copies still
/// work, staged by the driver.
fn enable_peer_access(src: &Context, dst: &Context) {
    static DONE: OnceLock<Mutex<HashSet<(usize, usize)>>> = OnceLock::new();
    let mut done = lock(DONE.get_or_init(Default::default));
    for (from, to) in [(dst, src), (src, dst)] {
        if !done.insert((from.ordinal, to.ordinal)) {
            continue;
        }
        let mut can = 0;
        // SAFETY: plain queries of two valid ordinals, then enabling
        // access from the current context `from` to `to`'s; "already
        // enabled" is success.
        unsafe {
            let (Ok(a), Ok(b)) = (
                result::device::get(from.ordinal as i32),
                result::device::get(to.ordinal as i32),
            ) else {
                continue;
            };
            if sys::cuDeviceCanAccessPeer(&mut can, a, b) != sys::CUresult::CUDA_SUCCESS || can == 0
            {
                continue;
            }
            if from.bind().is_ok() {
                let _ = sys::cuCtxEnablePeerAccess(to.raw, 0);
            }
        }
    }
    let _ = dst.bind();
}

impl CudaBackend {
    /// Copies row-major host values to new storage on this device.
    pub(crate) fn upload_host<T: DType>(&self, data: &[T]) -> Result<CudaStorage<T>> {
        upload_to(self.ctx(), data)
    }

    /// The elements `layout` selects in `s`, row-major, on the host.
    pub(crate) fn download_host<T: DType>(
        &self,
        s: &CudaStorage<T>,
        layout: &Layout,
    ) -> Result<Vec<T>> {
        download(s, layout)
    }

    /// The elements `layout` selects in `s`, row-major, written into `dst`
    /// (see [`download_into`]).
    pub(crate) fn download_host_into<T: DType>(
        &self,
        s: &CudaStorage<T>,
        layout: &Layout,
        dst: &mut [T],
        pinned: bool,
    ) -> Result<()> {
        download_into(s, layout, dst, pinned)
    }
}

/// Host to GPU: straight from a row-major host buffer, with one DMA from a
/// page-locked one, else from a row-major copy of the view.
impl CopyTo<CudaBackend> for CpuBackend {
    fn copy_to<T: DType>(
        &self,
        data: &Vec<T>,
        layout: &Layout,
        pinned: bool,
        dst: &CudaBackend,
    ) -> Result<CudaStorage<T>> {
        if pinned && layout.is_contiguous() {
            // One DMA straight from the page-locked buffer.
            let start = layout.offset();
            let n = layout.numel();
            return upload_pinned(dst.ctx(), &data[start..start + n]);
        }
        let host = if !pinned
            && layout.is_contiguous()
            && layout.offset() == 0
            && data.len() == layout.numel()
        {
            Cow::Borrowed(&data[..])
        } else {
            Cow::Owned(gather(data, layout))
        };
        dst.upload_host(&host)
    }
}

/// GPU to host: a download.
impl CopyTo<CpuBackend> for CudaBackend {
    fn copy_to<T: DType>(
        &self,
        x: &CudaStorage<T>,
        l: &Layout,
        _pinned: bool,
        _dst: &CpuBackend,
    ) -> Result<Vec<T>> {
        download(x, l)
    }
}

/// GPU to GPU: a copy on the device, or between two devices.
impl CopyTo<CudaBackend> for CudaBackend {
    fn copy_to<T: DType>(
        &self,
        x: &CudaStorage<T>,
        l: &Layout,
        _pinned: bool,
        dst: &CudaBackend,
    ) -> Result<CudaStorage<T>> {
        copy_to_context(x, l, dst.ctx())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    #[test]
    fn bytes_round_trip_every_dtype() {
        fn round_trip<T: DType>(values: &[T]) -> Vec<T> {
            let mut out = vec![T::zero(); values.len()];
            bytes_of_mut(&mut out).copy_from_slice(bytes_of(values));
            out
        }
        let f = [1.5f32, -2.25, 3.0e-8];
        assert_eq!(round_trip(&f), f.to_vec());
        let h = [f16::from_f32(0.5), f16::from_f32(-7.0)];
        assert_eq!(round_trip(&h), h.to_vec());
        let i = [i64::MIN, 42, -1];
        assert_eq!(round_trip(&i), i.to_vec());
        assert_eq!(
            bools_from_bytes::<bool>(&[0, 1, 7]),
            vec![false, true, true]
        );
    }
}
