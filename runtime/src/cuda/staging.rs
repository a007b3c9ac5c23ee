//! The two pinned host buffers of a context through which `transfer`
//! stages copies, and the events that say when the device is done with
//! each.

use super::error::driver;
use crate::error::Result;
use cudarc::driver::{result, sys};

/// Bytes in each pinned half.
pub(crate) const HALF_BYTES: usize = 8 << 20;

/// Two pinned host buffers and the events that guard them.
pub(crate) struct Staging {
    pub(crate) halves: [*mut u8; 2],
    pub(crate) events: [sys::CUevent; 2],
    /// Whether the event of a half has been recorded at least once.
    used: [bool; 2],
}

// SAFETY: the buffers and events are only touched under the context's
// staging mutex.
unsafe impl Send for Staging {}

impl Staging {
    pub(crate) fn create() -> Result<Staging> {
        let mut halves = [std::ptr::null_mut(); 2];
        let mut events = [std::ptr::null_mut(); 2];
        for i in 0..2 {
            // SAFETY: plain pinned allocation; freed never (cached for the
            // life of the context).
            halves[i] = unsafe { result::malloc_host(HALF_BYTES, 0) }
                .map_err(|e| driver("cuMemHostAlloc (pinned staging buffer)", e))?
                as *mut u8;
            events[i] = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
                .map_err(|e| driver("cuEventCreate", e))?;
        }
        Ok(Staging {
            halves,
            events,
            used: [false; 2],
        })
    }

    /// Waits until the device no longer reads or writes half `h`.
    pub(crate) fn wait(&mut self, h: usize) -> Result<()> {
        if self.used[h] {
            // SAFETY: the event was created in this context.
            unsafe { result::event::synchronize(self.events[h]) }
                .map_err(|e| driver("cuEventSynchronize (staging buffer)", e))?;
        }
        Ok(())
    }

    pub(crate) fn record(&mut self, h: usize, stream: sys::CUstream) -> Result<()> {
        // SAFETY: event and stream belong to the current context.
        unsafe { result::event::record(self.events[h], stream) }
            .map_err(|e| driver("cuEventRecord", e))?;
        self.used[h] = true;
        Ok(())
    }
}
