//! How failures of the driver, cuBLAS and cuBLASLt become [`Error`]s.
//!
//! cudarc loads every library and symbol lazily and panics when one is
//! missing; [`guard`] turns such a panic into `CudaUnavailable` so a
//! machine with an old or partial CUDA installation gets an `Err`, never
//! an abort.

use crate::error::Error;
use cudarc::driver::result::DriverError;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard};

/// `Error::Driver` for a failed driver call made while doing `op`.
pub(crate) fn driver(op: &str, e: DriverError) -> Error {
    let name = e
        .error_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{:?}", e.0));
    let text = e
        .error_string()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    Error::Driver {
        op: op.to_string(),
        message: if text.is_empty() {
            name
        } else {
            format!("{name} ({text})")
        },
    }
}

/// `Error::Cublas` for a cuBLAS or cuBLASLt status.
pub(crate) fn cublas(op: &str, status: impl std::fmt::Debug, shapes: String) -> Error {
    Error::Cublas {
        op: op.to_string(),
        status: format!("{status:?}"),
        shapes,
    }
}

/// `Error::CudaUnavailable` with `reason`.
pub(crate) fn unavailable(reason: impl Into<String>) -> Error {
    Error::CudaUnavailable {
        reason: reason.into(),
    }
}

/// Runs `f`, turning a panic inside cudarc (a library or symbol that
/// cannot be loaded) into `CudaUnavailable`.
pub(crate) fn guard<R>(what: &str, f: impl FnOnce() -> Result<R, Error>) -> Result<R, Error> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("unknown panic");
            Err(unavailable(format!("{what}: {msg}")))
        }
    }
}

/// Locks a mutex, recovering the data if a thread panicked while holding
/// it: every critical section here leaves its state consistent.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_unavailable() {
        let e = guard::<()>("loading libcuda", || panic!("Missing symbol cuInit")).unwrap_err();
        match e {
            Error::CudaUnavailable { reason } => {
                assert!(reason.contains("loading libcuda"));
                assert!(reason.contains("Missing symbol cuInit"));
            }
            other => panic!("expected CudaUnavailable, got {other:?}"),
        }
    }

    #[test]
    fn cublas_status_names_the_routine_and_shapes() {
        let e = cublas(
            "gemm",
            "CUBLAS_STATUS_INVALID_VALUE",
            "[2, 3] x [3, 4]".into(),
        );
        let text = e.to_string();
        assert!(text.contains("gemm") && text.contains("INVALID_VALUE") && text.contains("[2, 3]"));
    }
}
