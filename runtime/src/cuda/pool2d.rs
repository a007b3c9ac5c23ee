//! 2-D pooling on the GPU (`max_pool2d`, `avg_pool2d`, `adaptive_avg_pool2d`).
//!
//! For now the planes go through host memory and the CPU's loop (the
//! catalogue's reference, so both devices give the same bits); a PTX
//! kernel of one thread per output element is to replace it.

use super::alloc::CudaStorage;
use super::backend::CudaBackend;
use crate::backend::Backend;
use crate::cpu::pool;
use crate::dtype::FloatDType;
use crate::error::Result;
use crate::layout::Layout;
use std::borrow::Cow;
use tensorfn_core::ops::pool::Pool2d;

impl CudaBackend {
    /// See `Backend::pool2d`.
    pub(crate) fn pool2d_gpu<T: FloatDType>(
        &self,
        x: &CudaStorage<T>,
        l: &Layout,
        p: &Pool2d,
        out: [usize; 2],
    ) -> Result<CudaStorage<T>> {
        let host = self.download(x, l)?;
        let y = pool::pool2d(&host, &Layout::contiguous(l.dims()), p, out);
        self.upload(Cow::Owned(y))
    }

    /// See `Backend::dropout`: the CPU's loop on a host copy for now (a
    /// kernel hashing each position is to replace it), so both devices
    /// draw the same mask.
    pub(crate) fn dropout_gpu<T: FloatDType>(
        &self,
        x: &CudaStorage<T>,
        l: &Layout,
        p: f64,
        seed: u64,
    ) -> Result<CudaStorage<T>> {
        let host = self.download(x, l)?;
        let y = crate::cpu::dropout::dropout(&host, &Layout::contiguous(l.dims()), p, seed);
        self.upload(Cow::Owned(y))
    }

    /// See `Backend::pool2d_backward`.
    pub(crate) fn pool2d_backward_gpu<T: FloatDType>(
        &self,
        (x, lx): (&CudaStorage<T>, &Layout),
        (g, lg): (&CudaStorage<T>, &Layout),
        p: &Pool2d,
    ) -> Result<CudaStorage<T>> {
        let hx = self.download(x, lx)?;
        let hg = self.download(g, lg)?;
        let dx = pool::pool2d_backward(
            (&hx, &Layout::contiguous(lx.dims())),
            (&hg, &Layout::contiguous(lg.dims())),
            p,
        );
        self.upload(Cow::Owned(dx))
    }
}
