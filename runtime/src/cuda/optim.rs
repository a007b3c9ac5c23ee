//! The multi-tensor optimizer launch: one table of chunk records uploaded
//! and one launch per dtype group, whatever the number of tensors (see
//! `tensorfn_kernels::builtin::optim` for the record layout).

use super::alloc::CudaStorage;
use super::backend::CudaBackend;
use super::modules::{Builtin, ModuleKey, BLOCK};
use super::transfer::{download, upload_to};
use crate::dtype::DType;
use crate::error::Result;
use crate::layout::Layout;
use tensorfn_core::DTypeKind;
use tensorfn_kernels::optim::{OptimKernel, OPTIM_HYPER, OPTIM_RECORD_WORDS};

/// Blocks per multiprocessor of an optimizer launch: enough resident
/// blocks to hide memory latency; the blocks stride over the records.
const BLOCKS_PER_SM: usize = 8;

impl CudaBackend {
    /// Runs `kernel` over parameters of `dtype` described by `records`
    /// ([`OPTIM_RECORD_WORDS`] words each, addresses on this device), with
    /// hyperparameters `hyper` and `flags`, and the clip operands
    /// `(p_norm_sq, p_clip)` (`(0, 1.0)`: no clipping; see
    /// [`OptimKernel`]). Queued on the stream.
    pub(crate) fn optim_step(
        &self,
        kernel: OptimKernel,
        dtype: DTypeKind,
        records: &[i64],
        hyper: [f64; OPTIM_HYPER],
        flags: u32,
        (norm_sq, clip): (u64, f64),
    ) -> Result<()> {
        let count = records.len() / OPTIM_RECORD_WORDS;
        if count == 0 {
            return Ok(());
        }
        let ctx = self.ctx();
        ctx.bind()?;
        let key = Builtin::Optim(kernel, dtype);
        let f = ctx.function(ModuleKey::Builtin(key), "", || key.source(ctx.target()))?;
        // Freed after the launch: the allocator hands it out again only
        // to work queued later on the same stream.
        let table = upload_to(ctx, records)?;
        // Every parameter travels as 64 bits: `flags` is the entry's one
        // `.u32`, read from the low half of its word.
        let mut values = vec![table.device_ptr(), count as u64];
        values.extend(hyper.map(f64::to_bits));
        values.extend([u64::from(flags), norm_sq, clip.to_bits()]);
        let blocks = count.min(ctx.sm_count * BLOCKS_PER_SM).max(1) as u32;
        ctx.launch_u64s(
            f,
            &|| format!("{kernel:?} over {count} chunks of {dtype} parameters"),
            (blocks, 1),
            BLOCK,
            0,
            &mut values,
        )
    }
}

/// The `n` elements of `s` from `offset`, on the host.
pub(crate) fn download_range<T: DType>(
    s: &CudaStorage<T>,
    offset: usize,
    n: usize,
) -> Result<Vec<T>> {
    download(s, &Layout::new(vec![n], vec![1], offset))
}

/// `data` in new storage of `s`'s device.
pub(crate) fn upload_like<T: DType, U: DType>(
    s: &CudaStorage<U>,
    data: &[T],
) -> Result<CudaStorage<T>> {
    upload_to(s.context(), data)
}
