//! Driver events on the context's streams: ordering between streams
//! (`overlap`) and timing on the device (the matmul autotuner).

use super::error::driver;
use crate::error::Result;
use cudarc::driver::{result, sys};

/// A driver event, destroyed on drop.
pub(crate) struct Event(sys::CUevent);

impl Event {
    /// An event for ordering only (cheaper to record and wait on).
    pub(crate) fn new() -> Result<Event> {
        Event::with_flags(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
    }

    /// An event that also records when it happened, for
    /// [`elapsed_ms`](Self::elapsed_ms).
    pub(crate) fn timing() -> Result<Event> {
        Event::with_flags(sys::CUevent_flags::CU_EVENT_DEFAULT)
    }

    fn with_flags(flags: sys::CUevent_flags) -> Result<Event> {
        result::event::create(flags)
            .map(Event)
            .map_err(|e| driver("cuEventCreate", e))
    }

    pub(crate) fn record(&self, stream: sys::CUstream) -> Result<()> {
        // SAFETY: event and stream belong to the current context.
        unsafe { result::event::record(self.0, stream) }.map_err(|e| driver("cuEventRecord", e))
    }

    /// Makes `stream` wait (on the device) for the last record.
    pub(crate) fn wait_on(&self, stream: sys::CUstream) -> Result<()> {
        // SAFETY: event and stream belong to the current context.
        unsafe {
            result::stream::wait_event(
                stream,
                self.0,
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        }
        .map_err(|e| driver("cuStreamWaitEvent", e))
    }

    /// Whether the last record has happened, without blocking; `Err` on a
    /// fault of the work before it.
    pub(crate) fn query(&self, op: &str) -> Result<bool> {
        // SAFETY: the event is alive.
        match unsafe { sys::cuEventQuery(self.0) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            other => Err(driver(op, cudarc::driver::DriverError(other))),
        }
    }

    /// Blocks the host until the last record has happened.
    pub(crate) fn synchronize(&self, op: &str) -> Result<()> {
        super::counters::add(super::Count::Sync, 1);
        // SAFETY: the event is alive.
        unsafe { result::event::synchronize(self.0) }.map_err(|e| driver(op, e))
    }

    /// Milliseconds on the device from the last record of `start` to the
    /// last record of `self`, after waiting for the latter; both must be
    /// [`timing`](Self::timing) events.
    pub(crate) fn elapsed_ms(&self, start: &Event) -> Result<f32> {
        self.synchronize("cuEventSynchronize")?;
        // SAFETY: both events are alive and `self` has completed.
        unsafe { result::event::elapsed(start.0, self.0) }
            .map_err(|e| driver("cuEventElapsedTime", e))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created by cuEventCreate, destroyed once; the driver
        // defers the release until recorded work completes.
        let _ = unsafe { result::event::destroy(self.0) };
    }
}
