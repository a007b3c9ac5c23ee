//! Seeded `multinomial` on the GPU: one launch of the row kernel
//! (`tensorfn_kernels::builtin::multinomial`, one thread per row following
//! the CPU's procedure), then the one status word read back, as PyTorch's
//! CUDA `multinomial` checks its weights before answering.

use super::alloc::CudaStorage;
use super::backend::{check_extent, CudaBackend};
use super::modules::{Builtin, ModuleKey};
use crate::backend::{multinomial_fault, Backend, MultinomialFault};
use crate::dtype::FloatDType;
use crate::error::Result;
use crate::layout::Layout;
use tensorfn_core::ops::dropout::mix;

impl CudaBackend {
    /// See `Backend::multinomial`.
    pub(crate) fn multinomial_gpu<T: FloatDType>(
        &self,
        x: &CudaStorage<T>,
        l: &Layout,
        num_samples: usize,
        replacement: bool,
        seed: u64,
    ) -> Result<CudaStorage<i64>> {
        let ctx = self.ctx();
        ctx.bind()?;
        check_extent("multinomial", "probs", x, l)?;
        let cols = l.dims().last().copied().unwrap_or(1);
        let rows = l.numel().checked_div(cols).unwrap_or(0);
        let out = ctx.storage::<i64>(rows * num_samples)?;
        if rows * num_samples == 0 {
            return Ok(out);
        }
        let (input, _copy) = super::transfer::contiguous_ptr(x, l)?;
        let scratch = ctx.storage::<f64>(rows * cols)?;
        let status = ctx.storage::<i32>(1)?;
        self.memset32(status.device_ptr(), 0, 1)?;
        let kernel = Builtin::Multinomial(T::KIND);
        let f = ctx.function(ModuleKey::Builtin(kernel), "", || {
            kernel.source(ctx.target())
        })?;
        let mut words: [u64; 9] = [
            out.device_ptr(),
            input,
            scratch.device_ptr(),
            status.device_ptr(),
            rows as u64,
            cols as u64,
            num_samples as u64,
            replacement as u64,
            mix(seed),
        ];
        let block = tensorfn_kernels::abi::BLOCK;
        let grid = rows.div_ceil(block as usize).min(65_535) as u32;
        ctx.launch_u64s(
            f,
            &|| format!("{kernel:?} of {num_samples} over {rows}x{cols}"),
            (grid, 1),
            block,
            0,
            &mut words,
        )?;
        let code = self.download(&status, &Layout::contiguous(&[1]))?[0];
        match MultinomialFault::from_code(code as u32) {
            Some(fault) => Err(multinomial_fault(fault)),
            None => Ok(out),
        }
    }
}
