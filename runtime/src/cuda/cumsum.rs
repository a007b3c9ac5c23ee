//! `cumsum` on the GPU: the rows along the summed dim made contiguous,
//! one launch of the row scan kernel (`tensorfn_kernels::builtin::cumsum`,
//! one thread per row), and the dim put back in place.

use super::alloc::CudaStorage;
use super::backend::CudaBackend;
use super::modules::{Builtin, ModuleKey};
use crate::backend::{cumsum_fits, Backend};
use crate::dtype::NumDType;
use crate::error::{Error, Result};
use crate::layout::Layout;

impl CudaBackend {
    /// See `Backend::cumsum`.
    pub(crate) fn cumsum_gpu<T: NumDType, U: NumDType>(
        &self,
        x: &CudaStorage<T>,
        l: &Layout,
        dim: usize,
    ) -> Result<CudaStorage<U>> {
        let ctx = self.ctx();
        ctx.bind()?;
        cumsum_fits::<T, U>(l, dim)?;
        if l.numel() > 0 && l.storage_extent() > x.len() {
            return Err(Error::Index(format!(
                "cumsum: internal view {:?} (strides {:?}, offset {}) reaches past a buffer of {} elements",
                l.dims(),
                l.strides(),
                l.offset(),
                x.len()
            )));
        }
        let n = l.numel();
        let out = ctx.storage::<U>(n)?;
        if n == 0 {
            return Ok(out);
        }
        // A scalar is one row of one element.
        let (l, dim) = if l.rank() == 0 {
            (Layout::new(vec![1], vec![1], l.offset()), 0)
        } else {
            (l.clone(), dim)
        };
        let cols = l.dims()[dim];
        let rows = n / cols;
        let (input, _copy) = self.rows_of(x, &l, dim)?;
        let kernel = Builtin::Cumsum(T::KIND);
        let f = ctx.function(ModuleKey::Builtin(kernel), "", || {
            kernel.source(ctx.target())
        })?;
        let mut words: [u64; 4] = [out.device_ptr(), input, rows as u64, cols as u64];
        let block = tensorfn_kernels::abi::BLOCK;
        let grid = rows.div_ceil(block as usize).min(65_535) as u32;
        ctx.launch_u64s(
            f,
            &|| format!("{kernel:?} over {rows}x{cols}"),
            (grid, 1),
            block,
            0,
            &mut words,
        )?;
        let rank = l.rank();
        if dim == rank - 1 {
            return Ok(out);
        }
        // The rows came out with `dim` last: put it back in place.
        let perm: Vec<usize> = (0..rank).filter(|&d| d != dim).chain([dim]).collect();
        let moved: Vec<usize> = perm.iter().map(|&p| l.dims()[p]).collect();
        let mut inverse = vec![0; rank];
        for (i, &p) in perm.iter().enumerate() {
            inverse[p] = i;
        }
        self.contiguous(&out, &Layout::contiguous(&moved).permute(&inverse))
    }
}
