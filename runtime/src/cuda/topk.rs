//! `topk` along the last dim on the GPU: one launch of the row kernel
//! (`tensorfn_kernels::builtin::topk`, `k` block-wide arg-max passes per
//! row; an arg-min with NaN last for the smallest).

use super::alloc::CudaStorage;
use super::backend::CudaBackend;
use super::modules::{Builtin, ModuleKey, BLOCK};
use crate::dtype::NumDType;
use crate::error::{Error, Result};
use crate::layout::Layout;

/// Blocks of a row launch at most (one row per block, grid-stride).
const MAX_ROW_BLOCKS: usize = 65_535;

impl CudaBackend {
    /// See `Backend::topk`.
    pub(crate) fn topk_gpu<T: NumDType>(
        &self,
        x: &CudaStorage<T>,
        l: &Layout,
        k: usize,
        largest: bool,
    ) -> Result<(CudaStorage<T>, CudaStorage<i64>)> {
        let ctx = self.ctx();
        ctx.bind()?;
        let cols = l.dims().last().copied().unwrap_or(1);
        if k > cols {
            return Err(Error::shape(
                "topk",
                format!("k at most {cols}"),
                k.to_string(),
            ));
        }
        if l.numel() > 0 && l.storage_extent() > x.len() {
            return Err(Error::Index(format!(
                "topk: internal view {:?} (strides {:?}, offset {}) reaches past a buffer of {} elements",
                l.dims(),
                l.strides(),
                l.offset(),
                x.len()
            )));
        }
        let rows = l.numel().checked_div(cols).unwrap_or(0);
        let values = ctx.storage::<T>(rows * k)?;
        let idx = ctx.storage::<i64>(rows * k)?;
        if rows * k == 0 {
            return Ok((values, idx));
        }
        let rank = l.rank().max(1);
        let (input, _copy) = if l.rank() == 0 {
            (x.ptr_at(l.offset()), None)
        } else {
            self.rows_of(x, l, rank - 1)?
        };
        let kernel = Builtin::TopK(T::KIND, largest);
        let f = ctx.function(ModuleKey::Builtin(kernel), "", || {
            kernel.source(ctx.target())
        })?;
        let mut words: [u64; 6] = [
            values.device_ptr(),
            input,
            rows as u64,
            cols as u64,
            idx.device_ptr(),
            k as u64,
        ];
        let grid = rows.min(MAX_ROW_BLOCKS) as u32;
        ctx.launch_u64s(
            f,
            &|| format!("{kernel:?} k={k} over {rows}x{cols}"),
            (grid, 1),
            BLOCK,
            0,
            &mut words,
        )?;
        Ok((values, idx))
    }
}
