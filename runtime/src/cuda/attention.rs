//! Scaled dot-product attention on the GPU: the kernels crate's attention
//! entry (one warp per query row, an online softmax over the keys, f32
//! accumulation for the 16-bit dtypes), launched over batches of at most
//! 65535 (the grid's y limit). Head dims above
//! [`ATTENTION_MAX_HEAD`] go through the host. Without a mask, f16 and
//! bf16 at head dim 64 or 128 with 16-byte aligned rows on sm_80+ take
//! the FlashAttention-2-style tensor-core entry instead.

use super::alloc::CudaStorage;
use super::backend::CudaBackend;
use super::modules::{Builtin, ModuleKey};
use crate::backend::{AttnMask, AttnMaskArg, Backend};
use crate::cpu::CpuBackend;
use crate::dtype::{DType, FloatDType};
use crate::error::{Error, Result};
use crate::layout::Layout;
use std::borrow::Cow;
use std::ffi::c_void;
use tensorfn_core::DTypeKind;
use tensorfn_kernels::ptx::{attention_mma_rows, Target, ATTENTION_MAX_HEAD, ATTENTION_MMA_HEADS};

const OP: &str = "scaled_dot_product_attention";

/// Rows of queries a block handles (one warp each).
const ROWS_PER_BLOCK: usize = tensorfn_kernels::builtin::BLOCK as usize / 32;

/// The largest grid y.
const MAX_GRID_Y: usize = 65535;

fn check<T: DType>(what: &str, s: &CudaStorage<T>, l: &Layout) -> Result<()> {
    let extent = l.storage_extent();
    if extent > s.len() {
        return Err(Error::Index(format!(
            "{OP}: `{what}` with dims {:?}, strides {:?} and offset {} reaches past a device buffer of {} elements",
            l.dims(),
            l.strides(),
            l.offset(),
            s.len()
        )));
    }
    Ok(())
}

impl CudaBackend {
    /// See `Backend::attention`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attention_gpu<T: FloatDType>(
        &self,
        q: (&CudaStorage<T>, &Layout),
        k: (&CudaStorage<T>, &Layout),
        v: (&CudaStorage<T>, &Layout),
        mask: AttnMaskArg<'_, CudaStorage<bool>, CudaStorage<T>>,
        causal: bool,
        scale: f64,
    ) -> Result<CudaStorage<T>> {
        let ctx = self.ctx();
        ctx.bind()?;
        check("query", q.0, q.1)?;
        check("key", k.0, k.1)?;
        check("value", v.0, v.1)?;
        match &mask {
            Some((AttnMask::Bool(m), l)) => check("attn_mask", m, l)?,
            Some((AttnMask::Add(m), l)) => check("attn_mask", m, l)?,
            None => {}
        }
        let (qd, kd, vd) = (q.1.dims(), k.1.dims(), v.1.dims());
        let (batch, l, e) = (qd[0], qd[1], qd[2]);
        let (s, ev) = (kd[1], vd[2]);
        let n = batch * l * ev;
        if n == 0 {
            return ctx.storage::<T>(0);
        }
        if e > ATTENTION_MAX_HEAD || ev > ATTENTION_MAX_HEAD {
            return self.attention_host(q, k, v, mask, causal, scale);
        }
        for (what, lt) in [("query", q.1), ("key", k.1), ("value", v.1)] {
            if lt.dims()[2] > 1 && lt.strides()[2] != 1 {
                return Err(Error::Index(format!(
                    "{OP}: `{what}` reaches the backend with a last-dim stride of {}",
                    lt.strides()[2]
                )));
            }
        }
        if mask.is_none() && self.mma_fits::<T>([q, k, v], e, ev) {
            return self.attention_mma::<T>(q, k, v, causal, scale);
        }
        let out = ctx.storage::<T>(n)?;
        let size = std::mem::size_of::<T>() as u64;
        let (mode, mptr, mstrides, msize) = match &mask {
            None => (0u64, out.device_ptr(), [0, 0, 0], 1),
            Some((AttnMask::Bool(m), ml)) => (1, m.ptr_at(ml.offset()), strides3(ml), 1),
            Some((AttnMask::Add(m), ml)) => (2, m.ptr_at(ml.offset()), strides3(ml), size),
        };
        let kernel = Builtin::Attention(T::KIND);
        let f = ctx.function(ModuleKey::Builtin(kernel), "", || {
            kernel.source(ctx.target())
        })?;
        let (qs, ks, vs) = (strides3(q.1), strides3(k.1), strides3(v.1));
        let blocks = l.div_ceil(ROWS_PER_BLOCK) as u32;
        for b0 in (0..batch).step_by(MAX_GRID_Y) {
            let nb = (batch - b0).min(MAX_GRID_Y);
            let b0 = b0 as u64;
            let mut values: [u64; 21] = [
                out.device_ptr() + b0 * (l * ev) as u64 * size,
                q.0.ptr_at(q.1.offset()) + b0 * qs[0] * size,
                k.0.ptr_at(k.1.offset()) + b0 * ks[0] * size,
                v.0.ptr_at(v.1.offset()) + b0 * vs[0] * size,
                mptr + b0 * mstrides[0] * msize,
                l as u64,
                s as u64,
                e as u64,
                ev as u64,
                qs[0],
                qs[1],
                ks[0],
                ks[1],
                vs[0],
                vs[1],
                mstrides[0],
                mstrides[1],
                mstrides[2],
                mode,
                u64::from(causal),
                scale.to_bits(),
            ];
            let mut params: Vec<*mut c_void> = values
                .iter_mut()
                .map(|v| v as *mut u64 as *mut c_void)
                .collect();
            ctx.launch_grid(
                f,
                &|| format!("{kernel:?} of {nb} x [{l}, {e}] queries against {s} keys"),
                (blocks, nb as u32),
                &mut params,
            )?;
        }
        Ok(out)
    }

    /// Whether the tensor-core entry takes these operands: f16 or bf16 on
    /// an sm_80+ device, one head dim of 64 or 128, 16-byte aligned rows
    /// (its copies into shared memory move 16 bytes at a time).
    fn mma_fits<T: FloatDType>(
        &self,
        operands: [(&CudaStorage<T>, &Layout); 3],
        e: usize,
        ev: usize,
    ) -> bool {
        matches!(T::KIND, DTypeKind::F16 | DTypeKind::BF16)
            && e == ev
            && ATTENTION_MMA_HEADS.contains(&e)
            && self.ctx().target() == Target::Sm80
            && operands.iter().all(|(x, l)| {
                let s = l.strides();
                s[2] == 1 && s[0] % 8 == 0 && s[1] % 8 == 0 && x.ptr_at(l.offset()) % 16 == 0
            })
    }

    /// The tensor-core entry (see `mma_fits`).
    fn attention_mma<T: FloatDType>(
        &self,
        q: (&CudaStorage<T>, &Layout),
        k: (&CudaStorage<T>, &Layout),
        v: (&CudaStorage<T>, &Layout),
        causal: bool,
        scale: f64,
    ) -> Result<CudaStorage<T>> {
        let ctx = self.ctx();
        let (batch, l, d) = (q.1.dims()[0], q.1.dims()[1], q.1.dims()[2]);
        let s = k.1.dims()[1];
        let out = ctx.storage::<T>(batch * l * d)?;
        let size = std::mem::size_of::<T>() as u64;
        let kernel = Builtin::AttentionMma(T::KIND, d);
        let f = ctx.function(ModuleKey::Builtin(kernel), "", || {
            kernel.source(ctx.target())
        })?;
        let (qs, ks, vs) = (strides3(q.1), strides3(k.1), strides3(v.1));
        let rows = attention_mma_rows(d);
        let blocks = l.div_ceil(rows) as u32;
        for b0 in (0..batch).step_by(MAX_GRID_Y) {
            let nb = (batch - b0).min(MAX_GRID_Y);
            let b0 = b0 as u64;
            let mut values: [u64; 14] = [
                out.device_ptr() + b0 * (l * d) as u64 * size,
                q.0.ptr_at(q.1.offset()) + b0 * qs[0] * size,
                k.0.ptr_at(k.1.offset()) + b0 * ks[0] * size,
                v.0.ptr_at(v.1.offset()) + b0 * vs[0] * size,
                l as u64,
                s as u64,
                qs[0],
                qs[1],
                ks[0],
                ks[1],
                vs[0],
                vs[1],
                u64::from(causal),
                scale.to_bits(),
            ];
            let mut params: Vec<*mut c_void> = values
                .iter_mut()
                .map(|v| v as *mut u64 as *mut c_void)
                .collect();
            ctx.launch_grid_block(
                f,
                &|| format!("{kernel:?} of {nb} x [{l}, {d}] queries against {s} keys"),
                (blocks, nb as u32),
                2 * rows as u32,
                &mut params,
            )?;
        }
        Ok(out)
    }

    /// Attention through the host (head dims the kernel does not take).
    #[allow(clippy::too_many_arguments)]
    fn attention_host<T: FloatDType>(
        &self,
        q: (&CudaStorage<T>, &Layout),
        k: (&CudaStorage<T>, &Layout),
        v: (&CudaStorage<T>, &Layout),
        mask: AttnMaskArg<'_, CudaStorage<bool>, CudaStorage<T>>,
        causal: bool,
        scale: f64,
    ) -> Result<CudaStorage<T>> {
        let host = |(x, l): (&CudaStorage<T>, &Layout)| -> Result<(Vec<T>, Layout)> {
            Ok((self.download(x, l)?, Layout::contiguous(l.dims())))
        };
        let (hq, hk, hv) = (host(q)?, host(k)?, host(v)?);
        let (q, k, v) = ((&hq.0, &hq.1), (&hk.0, &hk.1), (&hv.0, &hv.1));
        let cpu = CpuBackend;
        let out = match mask {
            None => cpu.attention(q, k, v, None, causal, scale)?,
            Some((AttnMask::Bool(m), l)) => {
                let (hm, lm) = (self.download(m, l)?, Layout::contiguous(l.dims()));
                cpu.attention(q, k, v, Some((AttnMask::Bool(&hm), &lm)), causal, scale)?
            }
            Some((AttnMask::Add(m), l)) => {
                let (hm, lm) = (self.download(m, l)?, Layout::contiguous(l.dims()));
                cpu.attention(q, k, v, Some((AttnMask::Add(&hm), &lm)), causal, scale)?
            }
        };
        self.upload(Cow::Owned(out))
    }
}

/// The three strides of a `[batch, rows, cols]` layout, in elements.
fn strides3(l: &Layout) -> [u64; 3] {
    let s = l.strides();
    [s[0] as u64, s[1] as u64, s[2] as u64]
}
