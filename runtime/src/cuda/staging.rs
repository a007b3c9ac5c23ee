//! The pinned host memory of a context through which `transfer` stages
//! copies: two halves for large copies and the events that say when the
//! device is done with each, and a ring for small uploads.
//!
//! A small upload takes the next bytes of the ring and records an event
//! after its copy; it waits only when the ring comes round to bytes whose
//! copy the device has not reached yet, a ring's worth of uploads ago. So
//! the handful of small uploads a training step makes (scalars, shapes,
//! per-step indices) never stall the host, where each one through the
//! halves waited for the device to reach the upload two before it.

use super::error::driver;
use crate::error::Result;
use cudarc::driver::{result, sys};
use std::collections::VecDeque;

/// Bytes in each pinned half.
pub(crate) const HALF_BYTES: usize = 8 << 20;

/// Bytes of the ring of small uploads.
pub(crate) const RING_BYTES: usize = 4 << 20;

/// Uploads of at most this many bytes go through the ring (at least 64 of
/// them fit before it comes round).
pub(crate) const SMALL_BYTES: usize = 64 << 10;

/// Where in the ring each upload starts: 16-byte aligned.
const RING_ALIGN: usize = 16;

/// Two pinned host buffers and the events that guard them, and the ring.
pub(crate) struct Staging {
    pub(crate) halves: [*mut u8; 2],
    pub(crate) events: [sys::CUevent; 2],
    /// Whether the event of a half has been recorded at least once.
    used: [bool; 2],
    /// The ring's pinned bytes.
    ring_base: *mut u8,
    ring: Ring<sys::CUevent>,
    /// Events of finished ring uploads, for reuse.
    spare: Vec<sys::CUevent>,
}

// SAFETY: the buffers and events are only touched under the context's
// staging mutex.
unsafe impl Send for Staging {}

/// Pinned host memory of `bytes` bytes, kept for the life of the context.
fn pinned(bytes: usize) -> Result<*mut u8> {
    // SAFETY: plain pinned allocation; freed never (cached for the life
    // of the context).
    Ok(unsafe { result::malloc_host(bytes, 0) }
        .map_err(|e| driver("cuMemHostAlloc (pinned staging buffer)", e))? as *mut u8)
}

fn event() -> Result<sys::CUevent> {
    result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
        .map_err(|e| driver("cuEventCreate", e))
}

impl Staging {
    pub(crate) fn create() -> Result<Staging> {
        let mut halves = [std::ptr::null_mut(); 2];
        let mut events = [std::ptr::null_mut(); 2];
        for i in 0..2 {
            halves[i] = pinned(HALF_BYTES)?;
            events[i] = event()?;
        }
        Ok(Staging {
            halves,
            events,
            used: [false; 2],
            ring_base: pinned(RING_BYTES)?,
            ring: Ring::new(RING_BYTES),
            spare: Vec::new(),
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

    /// Copies `src` (1 to [`SMALL_BYTES`] bytes) into the ring and queues
    /// its copy to device address `dst` on `stream`; waits only for
    /// uploads a ring's worth ago that the device has not reached.
    pub(crate) fn upload_small(
        &mut self,
        src: &[u8],
        dst: u64,
        stream: sys::CUstream,
    ) -> Result<()> {
        debug_assert!(!src.is_empty() && src.len() <= SMALL_BYTES);
        let spare = &mut self.spare;
        let start = self.ring.reserve(src.len(), |e| {
            // SAFETY: the event was created in this context and recorded.
            unsafe { result::event::synchronize(e) }
                .map_err(|err| driver("cuEventSynchronize (staging ring)", err))?;
            spare.push(e);
            Ok(())
        })?;
        // SAFETY: `reserve` gave `src.len()` bytes inside the ring that
        // no queued copy reads any more.
        let pinned =
            unsafe { std::slice::from_raw_parts_mut(self.ring_base.add(start), src.len()) };
        pinned.copy_from_slice(src);
        // SAFETY: `dst` has room for `src` (callers allocate it); the
        // ring's bytes stay untouched until the event recorded below.
        unsafe { result::memcpy_htod_async(dst, pinned, stream) }
            .map_err(|e| driver("cuMemcpyHtoDAsync", e))?;
        let e = match self.spare.pop() {
            Some(e) => e,
            None => event()?,
        };
        // SAFETY: event and stream belong to the current context.
        unsafe { result::event::record(e, stream) }.map_err(|err| driver("cuEventRecord", err))?;
        self.ring.push(start, src.len(), e);
        Ok(())
    }
}

/// The bookkeeping of a ring of `cap` bytes: the byte ranges of copies
/// queued from it, oldest first, each with the event `E` recorded after
/// it. Ranges are taken in address order and come round at the end, so
/// the oldest pending ranges are the ones just ahead of `head`.
pub(crate) struct Ring<E> {
    cap: usize,
    head: usize,
    pending: VecDeque<(usize, usize, E)>,
}

impl<E> Ring<E> {
    pub(crate) fn new(cap: usize) -> Ring<E> {
        Ring {
            cap,
            head: 0,
            pending: VecDeque::new(),
        }
    }

    /// The start of `len` bytes (at most `cap`) that no pending copy
    /// reads, after `wait`ing for the events of the pending copies that
    /// overlap them (oldest first; each waited event is dropped from the
    /// ring and handed to `wait`).
    pub(crate) fn reserve(
        &mut self,
        len: usize,
        mut wait: impl FnMut(E) -> Result<()>,
    ) -> Result<usize> {
        let mut take = |pending: &mut VecDeque<(usize, usize, E)>| -> Result<()> {
            let (_, _, e) = pending.pop_front().expect("a pending range");
            wait(e)
        };
        if self.head + len > self.cap {
            // Coming round: the bytes skipped at the end are given up, and
            // every copy still pending there is older than any at the
            // start.
            while matches!(self.pending.front(), Some(&(s, _, _)) if s >= self.head) {
                take(&mut self.pending)?;
            }
            self.head = 0;
        }
        let (a, b) = (self.head, self.head + len);
        while matches!(self.pending.front(), Some(&(s, e, _)) if s < b && e > a) {
            take(&mut self.pending)?;
        }
        Ok(a)
    }

    /// Records the copy of `len` bytes from `start` (as `reserve` gave)
    /// with its event.
    pub(crate) fn push(&mut self, start: usize, len: usize, event: E) {
        let end = start + len;
        self.head = end.next_multiple_of(RING_ALIGN).min(self.cap);
        self.pending.push_back((start, end, event));
    }
}

#[cfg(test)]
mod tests {
    use super::Ring;

    /// A model of the ring: every byte remembers the upload that last
    /// took it; an upload may only take bytes whose previous upload was
    /// waited for. Random sizes, several times round.
    #[test]
    fn the_ring_waits_for_exactly_the_uploads_it_overwrites() {
        let cap = 1000;
        let mut ring = Ring::<usize>::new(cap);
        let mut owner: Vec<Option<usize>> = vec![None; cap];
        let mut waited = vec![false; 0];
        let mut ranges: Vec<(usize, usize)> = Vec::new();
        let mut head = 0;
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for id in 0..5000usize {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = 1 + (x % 300) as usize;
            waited.push(false);
            let mut now = Vec::new();
            let start = ring
                .reserve(len, |e| {
                    now.push(e);
                    Ok(())
                })
                .unwrap();
            for &e in &now {
                assert!(!waited[e], "upload {e} waited for twice");
                waited[e] = true;
            }
            assert!(start + len <= cap && start % 16 == 0);
            for (b, o) in owner.iter_mut().enumerate().skip(start).take(len) {
                if let Some(prev) = *o {
                    assert!(
                        waited[prev],
                        "upload {id} overwrites {prev} at {b} unwaited"
                    );
                }
                *o = Some(id);
            }
            // Waits are oldest first, and for uploads that overlap this
            // one or lie in the tail skipped when the ring came round.
            assert!(now.windows(2).all(|w| w[0] < w[1]), "{now:?}");
            let came_round = start == 0 && head + len > cap;
            for &e in &now {
                let (s, t) = ranges[e];
                assert!(
                    (s < start + len && t > start) || (came_round && s >= head),
                    "upload {id} at {start}..{} waited for {e} at {s}..{t}",
                    start + len
                );
            }
            ranges.push((start, start + len));
            ring.push(start, len, id);
            head = (start + len).next_multiple_of(16).min(cap);
        }
    }

    #[test]
    fn an_upload_of_the_whole_ring_waits_for_everything_before_it() {
        let mut ring = Ring::<u32>::new(64);
        for id in [1, 2] {
            let start = ring.reserve(10, |_| Ok(())).unwrap();
            ring.push(start, 10, id);
        }
        let mut seen = Vec::new();
        let start = ring
            .reserve(64, |e| {
                seen.push(e);
                Ok(())
            })
            .unwrap();
        assert_eq!((start, seen), (0, vec![1, 2]));
    }
}
