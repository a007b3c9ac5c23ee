//! Process-wide counts of what the CUDA backend asks of the driver and the
//! libraries: kernel launches, library calls, allocations, copies and
//! waits. One relaxed atomic add per event (a few nanoseconds beside the
//! microseconds of a driver call), so they are always on; a loop reads
//! them before and after a step and subtracts (`CudaCounters::since`) to
//! see what one step costs the host.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Counts of CUDA work queued by this process, on every device, since it
/// started. Read with [`cuda_counters`](crate::cuda_counters); subtract
/// two readings with [`since`](Self::since).
///
/// ```
/// use tensorfn_runtime::cuda_counters;
/// let before = cuda_counters();
/// // ... GPU work ...
/// let step = cuda_counters().since(&before);
/// assert!(step.allocations >= step.device_allocations);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CudaCounters {
    /// Kernels launched by tensorfn's own modules (`cuLaunchKernel`).
    pub launches: u64,
    /// Calls into cuBLAS, cuBLASLt and cuDNN that queue work (each may
    /// launch one or more kernels of its own).
    pub library_calls: u64,
    /// Device blocks handed out by the caching allocator (cache hits,
    /// reserved ranges and new blocks).
    pub allocations: u64,
    /// Of those, the ones that called `cuMemAlloc`.
    pub device_allocations: u64,
    /// Host-to-device copies.
    pub host_to_device: u64,
    /// Bytes of those copies.
    pub host_to_device_bytes: u64,
    /// Device-to-host copies (each waits for the stream).
    pub device_to_host: u64,
    /// Bytes of those copies.
    pub device_to_host_bytes: u64,
    /// Device-to-device copies issued as driver copies (not kernels).
    pub device_to_device: u64,
    /// Bytes of those copies.
    pub device_to_device_bytes: u64,
    /// Times the host waited for the device (stream or event
    /// synchronisations, including those of the copies to the host).
    pub syncs: u64,
}

impl CudaCounters {
    /// The counts between `earlier` and `self`.
    ///
    /// ```
    /// use tensorfn_runtime::CudaCounters;
    /// let a = CudaCounters { launches: 3, ..Default::default() };
    /// let b = CudaCounters { launches: 10, syncs: 1, ..Default::default() };
    /// assert_eq!(b.since(&a).launches, 7);
    /// assert_eq!(b.since(&a).syncs, 1);
    /// ```
    pub fn since(&self, earlier: &CudaCounters) -> CudaCounters {
        let d = |a: u64, b: u64| a.wrapping_sub(b);
        CudaCounters {
            launches: d(self.launches, earlier.launches),
            library_calls: d(self.library_calls, earlier.library_calls),
            allocations: d(self.allocations, earlier.allocations),
            device_allocations: d(self.device_allocations, earlier.device_allocations),
            host_to_device: d(self.host_to_device, earlier.host_to_device),
            host_to_device_bytes: d(self.host_to_device_bytes, earlier.host_to_device_bytes),
            device_to_host: d(self.device_to_host, earlier.device_to_host),
            device_to_host_bytes: d(self.device_to_host_bytes, earlier.device_to_host_bytes),
            device_to_device: d(self.device_to_device, earlier.device_to_device),
            device_to_device_bytes: d(self.device_to_device_bytes, earlier.device_to_device_bytes),
            syncs: d(self.syncs, earlier.syncs),
        }
    }
}

/// One counter per field of [`CudaCounters`], in its order.
#[derive(Clone, Copy)]
pub(crate) enum Count {
    Launch,
    LibraryCall,
    Allocation,
    DeviceAllocation,
    HostToDevice,
    HostToDeviceBytes,
    DeviceToHost,
    DeviceToHostBytes,
    DeviceToDevice,
    DeviceToDeviceBytes,
    Sync,
}

const N: usize = Count::Sync as usize + 1;

static COUNTS: [AtomicU64; N] = [const { AtomicU64::new(0) }; N];

/// Adds `n` to counter `c`.
#[inline]
pub(crate) fn add(c: Count, n: u64) {
    COUNTS[c as usize].fetch_add(n, Relaxed);
}

/// Counts one copy of `bytes`: `copies` and its byte counter.
pub(crate) fn copy(copies: Count, bytes_counter: Count, bytes: usize) {
    add(copies, 1);
    add(bytes_counter, bytes as u64);
}

/// The counts so far.
pub(crate) fn read() -> CudaCounters {
    let g = |c: Count| COUNTS[c as usize].load(Relaxed);
    CudaCounters {
        launches: g(Count::Launch),
        library_calls: g(Count::LibraryCall),
        allocations: g(Count::Allocation),
        device_allocations: g(Count::DeviceAllocation),
        host_to_device: g(Count::HostToDevice),
        host_to_device_bytes: g(Count::HostToDeviceBytes),
        device_to_host: g(Count::DeviceToHost),
        device_to_host_bytes: g(Count::DeviceToHostBytes),
        device_to_device: g(Count::DeviceToDevice),
        device_to_device_bytes: g(Count::DeviceToDeviceBytes),
        syncs: g(Count::Sync),
    }
}
