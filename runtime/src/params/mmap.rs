//! A read-only memory map of a file, so that loading weights does not
//! read the whole file into memory before copying each tensor out of it.

use crate::{Error, Result};
use std::fs::File;
use std::path::Path;

/// A file's bytes: mapped where the system can (Unix), read otherwise.
pub(super) struct Mapped {
    #[cfg(unix)]
    ptr: *mut libc::c_void,
    #[cfg(unix)]
    len: usize,
    #[cfg(not(unix))]
    bytes: Vec<u8>,
}

// The mapping is read-only and owned: sharing or sending it is sharing or
// sending a `&[u8]`.
unsafe impl Send for Mapped {}
unsafe impl Sync for Mapped {}

fn io(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Io(format!("{}: {e}", path.display()))
}

impl Mapped {
    /// Maps `path` (an empty file is an empty slice).
    pub(super) fn open(path: &Path) -> Result<Mapped> {
        let file = File::open(path).map_err(|e| io(path, e))?;
        #[cfg(unix)]
        {
            use std::os::unix::io::AsRawFd;
            let len = file.metadata().map_err(|e| io(path, e))?.len() as usize;
            if len == 0 {
                return Ok(Mapped {
                    ptr: std::ptr::null_mut(),
                    len: 0,
                });
            }
            // SAFETY: a private read-only mapping of a file we opened; the
            // pointer is checked and unmapped once, in `drop`.
            let ptr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE,
                    file.as_raw_fd(),
                    0,
                )
            };
            if ptr == libc::MAP_FAILED {
                return Err(io(path, std::io::Error::last_os_error()));
            }
            Ok(Mapped { ptr, len })
        }
        #[cfg(not(unix))]
        {
            use std::io::Read;
            let mut bytes = Vec::new();
            let mut file = file;
            file.read_to_end(&mut bytes).map_err(|e| io(path, e))?;
            Ok(Mapped { bytes })
        }
    }

    /// The file's bytes.
    pub(super) fn bytes(&self) -> &[u8] {
        #[cfg(unix)]
        {
            if self.len == 0 {
                return &[];
            }
            // SAFETY: `len` mapped readable bytes live until `drop`.
            unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
        }
        #[cfg(not(unix))]
        {
            &self.bytes
        }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        #[cfg(unix)]
        if self.len != 0 {
            // SAFETY: the mapping made in `open`, unmapped once.
            unsafe {
                libc::munmap(self.ptr, self.len);
            }
        }
    }
}
