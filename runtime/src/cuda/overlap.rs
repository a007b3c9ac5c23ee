//! Double-buffered copies on their own streams, so that uploading the next
//! chunk and downloading the previous result overlap the compute of the
//! current chunk (used by `stream_map`).
//!
//! Three streams of one device take part: the context's stream, on which
//! every operation computes, an upload stream and a download stream (the
//! two DMA directions have engines of their own). Events order them:
//!
//! - a chunk's device buffer is allocated, and an event recorded on the
//!   compute stream, *before* the current chunk's work is queued; the
//!   upload waits for that event, so it may reuse a block only once its
//!   earlier users (the compute of two chunks ago) are done, without
//!   waiting for the chunk computing now;
//! - the compute stream waits for a chunk's upload before its work;
//! - the download stream waits for an event recorded after a chunk's work,
//!   and the result tensor is kept alive until the host has seen the
//!   download finish, so its block is never reused while being read.
//!
//! Each direction has two pinned host buffers (slots 0 and 1, by chunk
//! parity): the host fills one while the DMA engine reads the other.
//! Dropping an [`Overlap`] waits for both copy streams first, so no DMA
//! outlives the buffers it uses, whatever error ended the run.

use super::alloc::CudaStorage;
use super::context::{context, Context};
use super::error::driver;
use super::event::Event;
use super::pinned::PinnedVec;
use crate::dtype::DType;
use crate::error::Result;
use cudarc::driver::{result, sys};
use std::sync::Arc;

/// A non-blocking stream, destroyed on drop after draining.
pub(crate) struct Stream(pub(crate) sys::CUstream);

impl Stream {
    pub(crate) fn new() -> Result<Stream> {
        result::stream::create(result::stream::StreamKind::NonBlocking)
            .map(Stream)
            .map_err(|e| driver("cuStreamCreate (copy stream)", e))
    }

    pub(crate) fn synchronize(&self, op: &str) -> Result<()> {
        // SAFETY: the stream is alive.
        unsafe { result::stream::synchronize(self.0) }.map_err(|e| driver(op, e))
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: created by cuStreamCreate and destroyed once.
        unsafe {
            let _ = result::stream::synchronize(self.0);
            let _ = result::stream::destroy(self.0);
        }
    }
}

/// One direction's pinned buffer and the event after its last copy.
struct Slot<E: DType> {
    host: Option<PinnedVec<E>>,
    copied: Event,
    pending: bool,
}

impl<E: DType> Slot<E> {
    fn new() -> Result<Slot<E>> {
        Ok(Slot {
            host: None,
            copied: Event::new()?,
            pending: false,
        })
    }

    /// Waits until the DMA engine is done with the buffer.
    fn settle(&mut self, op: &str) -> Result<()> {
        if self.pending {
            self.copied.synchronize(op)?;
            self.pending = false;
        }
        Ok(())
    }

    /// The buffer with room for `len` elements (kept across chunks; grown
    /// to `capacity` when smaller). The caller has settled it.
    fn buffer(&mut self, ctx: &Arc<Context>, len: usize, capacity: usize) -> Result<&mut [E]> {
        if self.host.as_ref().is_none_or(|h| h.len() < len) {
            self.host = None;
            self.host = Some(PinnedVec::filled_in(ctx, capacity.max(len), E::zero())?);
        }
        let host = self.host.as_mut().expect("allocated above");
        Ok(&mut host.as_mut_slice()[..len])
    }
}

/// The copy streams, events and pinned buffers of one overlapped run on
/// one device, for inputs of dtype `T` and results of dtype `U`.
pub(crate) struct Overlap<T: DType, U: DType> {
    ctx: Arc<Context>,
    up: Stream,
    down: Stream,
    /// Recorded on the compute stream when a slot's device buffer is
    /// allocated.
    allocated: [Event; 2],
    /// Recorded on the compute stream after a chunk's work.
    computed: [Event; 2],
    inputs: [Slot<T>; 2],
    outputs: [Slot<U>; 2],
}

impl<T: DType, U: DType> Overlap<T, U> {
    /// Streams and events on cuda:`ord`; pinned buffers come with the
    /// first chunk.
    pub(crate) fn new(ord: usize) -> Result<Self> {
        let ctx = context(ord)?;
        Ok(Overlap {
            up: Stream::new()?,
            down: Stream::new()?,
            allocated: [Event::new()?, Event::new()?],
            computed: [Event::new()?, Event::new()?],
            inputs: [Slot::new()?, Slot::new()?],
            outputs: [Slot::new()?, Slot::new()?],
            ctx,
        })
    }

    /// Device storage for the chunk of `slot` (`len` elements). Call it
    /// before queuing the work of the chunk computing now, so that the
    /// upload does not wait for that work.
    pub(crate) fn allocate(&mut self, slot: usize, len: usize) -> Result<CudaStorage<T>> {
        self.ctx.bind()?;
        let storage = self.ctx.storage::<T>(len)?;
        self.allocated[slot].record(self.ctx.stream)?;
        Ok(storage)
    }

    /// Fills the pinned input buffer of `slot` with `fill` (on the host;
    /// overlapping the device's work) and queues its copy into `dst` on
    /// the upload stream. `capacity` is the element count of the largest
    /// chunk, so the buffer is allocated once.
    pub(crate) fn upload(
        &mut self,
        slot: usize,
        dst: &CudaStorage<T>,
        capacity: usize,
        fill: impl FnOnce(&mut [T]),
    ) -> Result<()> {
        let len = dst.len();
        let input = &mut self.inputs[slot];
        input.settle("waiting for an earlier chunk's upload")?;
        let host = input.buffer(&self.ctx, len, capacity)?;
        fill(host);
        if len == 0 {
            return Ok(());
        }
        self.ctx.bind()?;
        self.allocated[slot].wait_on(self.up.0)?;
        // SAFETY: `dst` holds `len` elements; the pinned buffer stays
        // untouched until `copied` fires (settled before the next fill and
        // before the buffer is dropped).
        unsafe { result::memcpy_htod_async(dst.device_ptr(), &*host, self.up.0) }
            .map_err(|e| driver("cuMemcpyHtoDAsync (chunk upload)", e))?;
        input.copied.record(self.up.0)?;
        input.pending = true;
        Ok(())
    }

    /// Makes the compute stream wait for the upload of `slot`: call it
    /// before queuing work on that chunk.
    pub(crate) fn await_upload(&self, slot: usize) -> Result<()> {
        if self.inputs[slot].pending {
            self.inputs[slot].copied.wait_on(self.ctx.stream)?;
        }
        Ok(())
    }

    /// Queues, after all work queued so far on the compute stream, the
    /// copy of `len` elements at device address `src` into the pinned
    /// output buffer of `slot`. The caller keeps the memory at `src` alive
    /// until [`downloaded`](Self::downloaded) returns for this slot.
    pub(crate) fn download(
        &mut self,
        slot: usize,
        src: u64,
        len: usize,
        capacity: usize,
    ) -> Result<()> {
        self.ctx.bind()?;
        self.computed[slot].record(self.ctx.stream)?;
        let output = &mut self.outputs[slot];
        output.settle("waiting for an earlier chunk's download")?;
        let host = output.buffer(&self.ctx, len, capacity)?;
        if len == 0 {
            return Ok(());
        }
        self.computed[slot].wait_on(self.down.0)?;
        // SAFETY: `src` addresses `len` live elements (kept alive by the
        // caller until this slot is settled); the pinned buffer is not
        // read until `copied` fires.
        unsafe { result::memcpy_dtoh_async(host, src, self.down.0) }
            .map_err(|e| driver("cuMemcpyDtoHAsync (chunk download)", e))?;
        output.copied.record(self.down.0)?;
        output.pending = true;
        Ok(())
    }

    /// Waits for the download of `slot` and returns its `len` elements.
    /// A kernel fault of the chunk's work surfaces here.
    pub(crate) fn downloaded(&mut self, slot: usize, len: usize) -> Result<&[U]> {
        let output = &mut self.outputs[slot];
        output.settle("copying a chunk's result to the host")?;
        Ok(match &output.host {
            Some(h) => &h.as_slice()[..len],
            None => &[],
        })
    }

    /// Waits for both copy streams.
    pub(crate) fn drain(&self) -> Result<()> {
        self.up.synchronize("finishing chunk uploads")?;
        self.down.synchronize("finishing chunk downloads")
    }
}

impl<T: DType, U: DType> Drop for Overlap<T, U> {
    fn drop(&mut self) {
        // Before the pinned buffers go (the fields drop after this), no
        // copy may still use them.
        if self.ctx.bind().is_ok() {
            let _ = self.drain();
        }
    }
}
