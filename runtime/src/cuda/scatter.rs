//! `index_add`, `scatter_add` and the gradients of `embedding`,
//! `index_select` and `gather` on the GPU: one launch of the scatter-add
//! kernel, atomic adds into an f32 accumulator (f64 for f64; f16 and
//! bf16 are widened into one first and rounded once after), with an
//! index out of range recorded in a two-word flag buffer as the gather
//! does.

use super::alloc::CudaStorage;
use super::backend::CudaBackend;
use super::grid::grid;
use super::modules::{Builtin, GridRule, ModuleKey, BLOCK};
use crate::backend::{Backend, Gathered, Selected};
use crate::cpu::gather::check_extents;
use crate::dtype::{FloatDType, IndexDType};
use crate::error::{Error, Result};
use crate::layout::Layout;
use tensorfn_kernels::abi::StridedMeta;

impl CudaBackend {
    /// See `Backend::scatter_add`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn scatter_add_gpu<T: FloatDType, I: IndexDType>(
        &self,
        out: &mut CudaStorage<T>,
        lo: &Layout,
        sel: Selected,
        (src, ls): (&CudaStorage<T>, &Layout),
        (idx, li): (&CudaStorage<I>, &Layout),
        alpha: f64,
        fresh: bool,
    ) -> Result<Gathered<()>> {
        let ctx = self.ctx();
        ctx.bind()?;
        check_extents(lo, sel, out.len(), li, idx.len())?;
        let n = lo.numel();
        if n == 0 {
            // Nothing added: a fresh output is all zeros.
            if fresh {
                self.fill(out, T::zero())?;
            }
            return Ok(Ok(()));
        }
        if ls.storage_extent() > src.len() {
            return Err(Error::Index(format!(
                "scatter_add: internal view {:?} (strides {:?}) reaches past a buffer of {} elements",
                ls.dims(),
                ls.strides(),
                src.len()
            )));
        }
        // 16-bit values accumulate in an f32 copy of the output; a fresh
        // output is zeros, so the accumulator is filled, not widened from it,
        // and the output itself is written once, by the final cast.
        let half = std::mem::size_of::<T>() == 2;
        let whole = Layout::contiguous(&[out.len()]);
        let wide: Option<CudaStorage<f32>> = match (half, fresh) {
            (true, true) => Some(self.full::<f32>(out.len(), 0.0)?),
            (true, false) => Some(self.cast::<T, f32>(out, &whole)?),
            (false, true) => {
                self.fill(out, T::zero())?;
                None
            }
            (false, false) => None,
        };
        let acc_ptr = match &wide {
            Some(w) => w.device_ptr(),
            None => out.device_ptr(),
        };
        // flag[0]: an index was out of range; flag[1]: one such index.
        let flag = self.full::<i64>(2, 0)?;
        let kernel = Builtin::ScatterAdd(T::KIND, I::KIND);
        let f = ctx.function(ModuleKey::Builtin(kernel), "", || {
            kernel.source(ctx.target())
        })?;
        let meta = StridedMeta::new(lo.dims(), lo.strides(), &[ls.strides(), li.strides()]);
        let acc_bytes = if half {
            4
        } else {
            std::mem::size_of::<T>() as u64
        };
        let mut values: [u64; 8] = [
            acc_ptr + lo.offset() as u64 * acc_bytes,
            src.ptr_at(ls.offset()),
            idx.ptr_at(li.offset()),
            flag.device_ptr(),
            n as u64,
            sel.stride as u64,
            sel.size as u64,
            alpha.to_bits(),
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
        if let Some(w) = wide {
            *out = self.cast::<f32, T>(&w, &whole)?;
        }
        Ok(Ok(()))
    }
}
