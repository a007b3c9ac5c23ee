//! `index_select`, `gather` and `embedding` on the GPU: one launch of the
//! gather kernel, which checks every index before it reads through it and
//! records an index out of range in a two-word flag buffer, read back
//! after the launch and returned as the bad index.

use super::alloc::CudaStorage;
use super::backend::CudaBackend;
use super::grid::grid;
use super::modules::{Builtin, GridRule, ModuleKey, BLOCK};
use crate::backend::{Backend, Gathered, Selected};
use crate::cpu::gather::check_extents;
use crate::dtype::{DType, IndexDType};
use crate::error::Result;
use crate::layout::{contiguous_strides, Layout};
use tensorfn_kernels::abi::StridedMeta;

impl CudaBackend {
    /// See `Backend::gather`.
    pub(crate) fn gather_gpu<T: DType, I: IndexDType>(
        &self,
        x: &CudaStorage<T>,
        lx: &Layout,
        sel: Selected,
        idx: &CudaStorage<I>,
        li: &Layout,
    ) -> Result<Gathered<CudaStorage<T>>> {
        let ctx = self.ctx();
        ctx.bind()?;
        check_extents(lx, sel, x.len(), li, idx.len())?;
        let n = lx.numel();
        let out = ctx.storage::<T>(n)?;
        if n == 0 {
            return Ok(Ok(out));
        }
        // flag[0]: an index was out of range; flag[1]: one such index.
        let flag = self.full::<i64>(2, 0)?;
        let unit = std::mem::size_of::<T>() as u32;
        let kernel = Builtin::Gather(unit, I::KIND);
        let f = ctx.function(ModuleKey::Builtin(kernel), "", || {
            kernel.source(ctx.target())
        })?;
        let meta = StridedMeta::new(
            lx.dims(),
            &contiguous_strides(lx.dims()),
            &[lx.strides(), li.strides()],
        );
        let mut values: [u64; 7] = [
            out.device_ptr(),
            x.ptr_at(lx.offset()),
            idx.ptr_at(li.offset()),
            flag.device_ptr(),
            n as u64,
            sel.stride as u64,
            sel.size as u64,
        ];
        let gx = grid(GridRule::Capped, n, ctx.sm_count, 1);
        ctx.launch_u64s_meta(
            f,
            &|| format!("{kernel:?} of {n} elements"),
            (gx, 1),
            BLOCK,
            0,
            &mut values,
            meta.words(),
        )?;
        let flag = self.download_host(&flag, &Layout::contiguous(&[2]))?;
        if flag[0] != 0 {
            return Ok(Err(flag[1]));
        }
        Ok(Ok(out))
    }
}
