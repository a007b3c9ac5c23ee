//! `cat` of contiguous inputs on the GPU: one launch of the row-block
//! kernel per [`CAT_PARTS`] inputs, moving the widest unit (up to 16
//! bytes) that every size, offset and address allows.

use super::alloc::CudaStorage;
use super::backend::CudaBackend;
use super::grid::grid;
use super::modules::{Builtin, GridRule, ModuleKey, BLOCK};
use crate::backend::RowBlocks;
use crate::dtype::DType;
use crate::error::Result;
use tensorfn_kernels::builtin::{CAT_PARTS, CAT_UNITS};

/// The widest unit of [`CAT_UNITS`] dividing every value.
pub(crate) fn widest_unit(values: impl IntoIterator<Item = u64> + Clone) -> u32 {
    CAT_UNITS
        .iter()
        .rev()
        .copied()
        .find(|&u| values.clone().into_iter().all(|v| v % u as u64 == 0))
        .unwrap_or(1)
}

impl CudaBackend {
    /// See `Backend::cat_rows`.
    pub(crate) fn cat_rows_gpu<T: DType>(
        &self,
        plan: &RowBlocks<'_, CudaStorage<T>>,
    ) -> Result<CudaStorage<T>> {
        let ctx = self.ctx();
        ctx.bind()?;
        let size = std::mem::size_of::<T>() as u64;
        let n = plan.checked_len(|b| b.len())?;
        let out = ctx.storage::<T>(n)?;
        if n == 0 {
            return Ok(out);
        }
        // (source address, elements per row, offset in the row) of every
        // input that supplies something.
        let mut parts = Vec::with_capacity(plan.parts.len());
        let mut offset = 0u64;
        for p in &plan.parts {
            if p.inner > 0 {
                parts.push((p.buf.ptr_at(p.start), p.inner as u64, offset));
            }
            offset += p.inner as u64;
        }
        let unit = widest_unit(
            [out.device_ptr(), plan.row as u64 * size]
                .into_iter()
                .chain(parts.iter().flat_map(|&(s, i, o)| [s, i * size, o * size])),
        );
        let per_unit = |elems: u64| elems * size / unit as u64;
        let kernel = Builtin::CatRows(unit);
        let f = ctx.function(ModuleKey::Builtin(kernel), "", || {
            kernel.source(ctx.target())
        })?;
        for group in parts.chunks(CAT_PARTS) {
            let mut values = vec![0u64; 3 + 3 * CAT_PARTS];
            values[0] = out.device_ptr();
            values[1] = plan.outer as u64;
            values[2] = per_unit(plan.row as u64);
            for (k, &(src, inner, off)) in group.iter().enumerate() {
                values[3 + 3 * k] = src;
                values[4 + 3 * k] = per_unit(inner);
                values[5 + 3 * k] = per_unit(off);
            }
            let most = group
                .iter()
                .map(|&(_, inner, _)| per_unit(inner) * plan.outer as u64)
                .max()
                .unwrap_or(0);
            let gx = grid(GridRule::Capped, most as usize, ctx.sm_count, group.len());
            ctx.launch_u64s(
                f,
                &|| {
                    format!(
                        "{kernel:?} of {} inputs into {} rows of {} elements",
                        group.len(),
                        plan.outer,
                        plan.row
                    )
                },
                (gx, group.len() as u32),
                BLOCK,
                0,
                &mut values,
            )?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unit_is_the_widest_common_divisor() {
        assert_eq!(widest_unit([256u64, 4096, 32]), 16);
        assert_eq!(widest_unit([256u64, 4096, 24]), 8);
        assert_eq!(widest_unit([256u64, 6]), 2);
        assert_eq!(widest_unit([257u64, 4096]), 1);
        assert_eq!(widest_unit(std::iter::empty::<u64>()), 16);
    }
}
