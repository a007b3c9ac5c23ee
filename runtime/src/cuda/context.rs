//! One CUDA context per ordinal, created on first use, each with a single
//! stream on which every copy, kernel and cuBLAS call of that device runs.
//!
//! A single stream makes memory reuse simple: work is executed in the order
//! it is queued, so a block freed by one operation can be handed to the
//! next without waiting for the device.

use super::cudnn::Cudnn;
pub(crate) use super::error::lock;
use super::error::{driver, guard, unavailable};
use super::handles::Blas;
use super::modules::ModuleCache;
use super::pool::CachingAllocator;
use super::staging::Staging;
use crate::error::{Error, Result};
use cudarc::driver::{result, sys};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The driver state of one device: its context, its stream and what is
/// cached for it (memory blocks, pinned staging buffers, PTX modules,
/// cuBLAS and cuDNN handles).
pub(crate) struct Context {
    pub(crate) ordinal: usize,
    /// The device's name, for messages.
    pub(crate) name: String,
    /// Device memory in bytes.
    pub(crate) total_memory: usize,
    /// Number of multiprocessors, for sizing grids.
    pub(crate) sm_count: usize,
    /// Compute capability `(major, minor)`, which picks the PTX target.
    pub(crate) compute_capability: (u32, u32),
    /// Most dynamic shared memory one block may opt into, in bytes (a
    /// cross-entropy backward keeps its row there when it fits).
    pub(crate) shared_per_block: usize,
    pub(crate) raw: sys::CUcontext,
    pub(crate) stream: sys::CUstream,
    pub(crate) alloc: Mutex<CachingAllocator>,
    pub(crate) staging: Mutex<Option<Staging>>,
    pub(crate) modules: Mutex<ModuleCache>,
    pub(crate) blas: Mutex<Option<Arc<Blas>>>,
    /// The cuDNN handle and its convolution plans, made on the first
    /// convolution (`None` until then, and where cuDNN cannot be used).
    pub(crate) cudnn: Mutex<Option<Arc<Cudnn>>>,
}

// SAFETY: the raw handles are plain driver handles, valid from any thread
// once the context is made current there (`bind`); all mutable state is
// behind mutexes.
unsafe impl Send for Context {}
unsafe impl Sync for Context {}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cuda:{} ({})", self.ordinal, self.name)
    }
}

/// Loads the driver library and initialises it once per process; returns
/// the number of devices or why CUDA cannot be used.
fn driver_devices() -> Result<usize> {
    static DRIVER: OnceLock<Result<usize>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            // cudarc panics when the library is missing: probe it first.
            // SAFETY: only tries to open the library, calls nothing in it.
            if !unsafe { sys::is_culib_present() } {
                return Err(unavailable(
                    "the NVIDIA driver library (libcuda.so) was not found on this machine",
                ));
            }
            guard("initialising the CUDA driver", || {
                result::init().map_err(|e| match driver("cuInit", e) {
                    Error::Driver { message, .. } => {
                        unavailable(format!("the CUDA driver failed to start: {message}"))
                    }
                    other => other,
                })?;
                let count =
                    result::device::get_count().map_err(|e| driver("cuDeviceGetCount", e))?;
                if count <= 0 {
                    return Err(unavailable("the CUDA driver reports no device"));
                }
                Ok(count as usize)
            })
        })
        .clone()
}

/// Number of CUDA devices, or why there are none usable.
///
/// ```
/// use tensorfn_runtime::{cuda_device_count, Error};
/// match cuda_device_count() {
///     Ok(n) => assert!(n > 0),
///     Err(e) => assert!(matches!(e, Error::CudaUnavailable { .. })),
/// }
/// ```
pub fn cuda_device_count() -> Result<usize> {
    driver_devices()
}

/// The context of cuda:`ordinal`, created on first use.
pub(crate) fn context(ordinal: usize) -> Result<Arc<Context>> {
    static CONTEXTS: OnceLock<Mutex<HashMap<usize, Arc<Context>>>> = OnceLock::new();
    let count = driver_devices()?;
    if ordinal >= count {
        return Err(unavailable(format!(
            "cuda:{ordinal} does not exist: this machine has {count} CUDA device(s), \
             cuda:0 to cuda:{}; pick an ordinal in that range",
            count - 1
        )));
    }
    let mut map = lock(CONTEXTS.get_or_init(Default::default));
    if let Some(ctx) = map.get(&ordinal) {
        ctx.bind()?;
        return Ok(ctx.clone());
    }
    // A failed creation is not cached: it may succeed once memory is freed.
    let ctx = Arc::new(Context::create(ordinal)?);
    map.insert(ordinal, ctx.clone());
    Ok(ctx)
}

impl Context {
    fn create(ordinal: usize) -> Result<Context> {
        guard("creating a CUDA context", || {
            let dev = result::device::get(ordinal as i32).map_err(|e| driver("cuDeviceGet", e))?;
            let name = result::device::get_name(dev).unwrap_or_else(|_| "unknown device".into());
            // SAFETY: `dev` comes from cuDeviceGet; the primary context is
            // retained for the life of the process.
            let raw = unsafe { result::primary_ctx::retain(dev) }
                .map_err(|e| driver("cuDevicePrimaryCtxRetain", e))?;
            // SAFETY: `raw` was just retained.
            unsafe { result::ctx::set_current(raw) }.map_err(|e| driver("cuCtxSetCurrent", e))?;
            let stream = result::stream::create(result::stream::StreamKind::NonBlocking)
                .map_err(|e| driver("cuStreamCreate", e))?;
            let (_, total_memory) =
                result::mem_get_info().map_err(|e| driver("cuMemGetInfo", e))?;
            // SAFETY: `dev` comes from cuDeviceGet.
            let sm_count = unsafe {
                result::device::get_attribute(
                    dev,
                    sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                )
            }
            .map_err(|e| driver("cuDeviceGetAttribute", e))?
            .max(1) as usize;
            let attribute = |a| {
                // SAFETY: `dev` comes from cuDeviceGet.
                unsafe { result::device::get_attribute(dev, a) }
                    .map_err(|e| driver("cuDeviceGetAttribute", e))
                    .map(|v| v.max(0) as u32)
            };
            use sys::CUdevice_attribute::{
                CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR as MAJOR,
                CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR as MINOR,
            };
            let compute_capability = (attribute(MAJOR)?, attribute(MINOR)?);
            let shared_per_block = attribute(
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            )? as usize;
            Ok(Context {
                ordinal,
                name,
                total_memory,
                sm_count,
                compute_capability,
                shared_per_block,
                raw,
                stream,
                alloc: Mutex::new(CachingAllocator::default()),
                staging: Mutex::new(None),
                modules: Mutex::new(ModuleCache::default()),
                blas: Mutex::new(None),
                cudnn: Mutex::new(None),
            })
        })
    }

    /// The PTX target of this device: its kernels are generated for it.
    pub(crate) fn target(&self) -> tensorfn_kernels::ptx::Target {
        let (major, minor) = self.compute_capability;
        tensorfn_kernels::ptx::Target::for_compute_capability(major, minor)
    }

    /// Makes this context current on the calling thread (cheap; needed
    /// before any driver call because threads start with none).
    pub(crate) fn bind(&self) -> Result<()> {
        // SAFETY: the context is retained for the life of the process.
        unsafe { result::ctx::set_current(self.raw) }.map_err(|e| driver("cuCtxSetCurrent", e))
    }

    /// Waits for all work queued on the stream; a kernel fault that
    /// happened earlier surfaces here, named after `op`.
    pub(crate) fn sync(&self, op: &str) -> Result<()> {
        super::counters::add(super::Count::Sync, 1);
        // SAFETY: the stream lives as long as the context.
        unsafe { result::stream::synchronize(self.stream) }
            .map_err(|e| driver(&format!("{op} (waiting for queued GPU work)"), e))
    }

    /// `(free, total)` device memory in bytes.
    pub(crate) fn mem_info(&self) -> Result<(usize, usize)> {
        result::mem_get_info().map_err(|e| driver("cuMemGetInfo", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_ordinal_is_unavailable_not_a_panic() {
        match context(1_000) {
            Err(Error::CudaUnavailable { reason }) => assert!(!reason.is_empty()),
            Err(other) => panic!("expected CudaUnavailable, got {other:?}"),
            Ok(_) => panic!("no machine has 1001 GPUs"),
        }
    }
}
