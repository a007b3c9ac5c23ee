//! Scaled dot-product attention on the GPU: the kernels crate's attention
//! entry (one warp per query row, an online softmax over the keys, f32
//! accumulation for the 16-bit dtypes), launched over batches of at most
//! 65535 (the grid's y limit). Head dims above
//! [`ATTENTION_MAX_HEAD`] go through the host. Without a mask, f16 and
//! bf16 at head dim 64 or 128 with 16-byte aligned rows on sm_80+ take
//! the FlashAttention-2-style tensor-core entry instead, in its Hopper
//! form (`wgmma`) on devices of compute capability 9.0; the same cases of
//! the backward take the tensor-core backward, likewise in its Hopper
//! form there.

use super::alloc::CudaStorage;
use super::backend::CudaBackend;
use super::modules::{Builtin, ModuleKey, BLOCK};
use crate::backend::{AttnMask, AttnMaskArg, Backend};
use crate::cpu::CpuBackend;
use crate::dtype::{DType, FloatDType};
use crate::error::{Error, Result};
use crate::layout::Layout;
use std::borrow::Cow;
use tensorfn_core::DTypeKind;
use tensorfn_kernels::ptx::{
    attention_mma_backward_shared, attention_mma_rows, attention_mma_threads,
    attention_wgmma_backward2_shared, attention_wgmma_backward_shared,
    attention_wgmma_backward_ws_shared, attention_wgmma_rows, attention_wgmma_shared,
    attention_wgmma_threads, attention_ws_shared, Target, ATTENTION_MAX_HEAD, ATTENTION_MMA_HEADS,
    ATTENTION_WS_ROWS, ATTENTION_WS_THREADS, MMA_BWD_KEYS, MMA_BWD_THREADS, WGMMA_BWD2_KEYS,
    WGMMA_BWD2_THREADS, WGMMA_BWD_KEYS, WGMMA_BWD_THREADS, WGMMA_BWD_WS_KEYS, WGMMA_BWD_WS_THREADS,
};

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
        out_layout: &Layout,
    ) -> Result<CudaStorage<T>> {
        self.attention_launch(q, k, v, mask, causal, scale, out_layout, None)
    }

    /// [`Self::attention_gpu`], with the rows' log-sum-exps written to
    /// the device address `lse` (`[batch, L]`, f32, f64 for f64) when
    /// given, by the tensor-core entry where it fits (see `mma_fits`),
    /// else by the f32-accumulating one.
    #[allow(clippy::too_many_arguments)]
    fn attention_launch<T: FloatDType>(
        &self,
        q: (&CudaStorage<T>, &Layout),
        k: (&CudaStorage<T>, &Layout),
        v: (&CudaStorage<T>, &Layout),
        mask: AttnMaskArg<'_, CudaStorage<bool>, CudaStorage<T>>,
        causal: bool,
        scale: f64,
        out_layout: &Layout,
        lse: Option<u64>,
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
        let [batch, l, e] = shape3(q.1);
        let [_, s, _] = shape3(k.1);
        let [_, _, ev] = shape3(v.1);
        let n = batch * l * ev;
        if n == 0 {
            return ctx.storage::<T>(0);
        }
        if e > ATTENTION_MAX_HEAD || ev > ATTENTION_MAX_HEAD {
            return self.attention_host(q, k, v, mask, causal, scale, out_layout);
        }
        unit_last_strides([q.1, k.1, v.1])?;
        let (nh, group) =
            forward_batches(q.1, k.1, v.1, out_layout, mask.as_ref().map(|(_, l)| *l))?;
        let os = walk(out_layout, nh);
        if mask.is_none() && self.mma_fits::<T>([q, k, v], e, ev) {
            return self.attention_mma::<T>(q, k, v, (nh, group, os), causal, scale, lse);
        }
        let out = ctx.storage::<T>(n)?;
        let shared = Shared::new([q, k, v], &mask, out.device_ptr(), nh);
        let kernel = Builtin::Attention(T::KIND);
        let f = ctx.function(ModuleKey::Builtin(kernel), "", || {
            kernel.source(ctx.target())
        })?;
        let blocks = l.div_ceil(ROWS_PER_BLOCK) as u32;
        for b0 in (0..batch).step_by(MAX_GRID_Y) {
            let nb = (batch - b0).min(MAX_GRID_Y);
            let mut values: Vec<u64> = std::iter::once(out.device_ptr())
                .chain(shared.words([l, s, e, ev], (causal, scale), b0))
                .chain([os[0], os[1], os[2], lse.unwrap_or(0), group])
                .collect();
            ctx.launch_u64s(
                f,
                &|| format!("{kernel:?} of {nb} x [{l}, {e}] queries against {s} keys"),
                (blocks, nb as u32),
                BLOCK,
                0,
                &mut values,
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
            && operands.iter().all(|&x| mma_aligned(x))
    }

    /// The tensor-core entry (see `mma_fits`), writing the f32
    /// log-sum-exps to `lse` when given: on a device of compute
    /// capability 9.0 its Hopper form (`wgmma`, whose `sm_90a` PTX runs
    /// there only), elsewhere the `mma.sync` one; both take the same
    /// parameters.
    #[allow(clippy::too_many_arguments)]
    fn attention_mma<T: FloatDType>(
        &self,
        q: (&CudaStorage<T>, &Layout),
        k: (&CudaStorage<T>, &Layout),
        v: (&CudaStorage<T>, &Layout),
        (nh, group, os): (u64, u64, [u64; 4]),
        causal: bool,
        scale: f64,
        lse: Option<u64>,
    ) -> Result<CudaStorage<T>> {
        let ctx = self.ctx();
        let [batch, l, d] = shape3(q.1);
        let [_, s, _] = shape3(k.1);
        let out = ctx.storage::<T>(batch * l * d)?;
        let hopper = ctx.compute_capability == (9, 0) && !mma_sync_only();
        let (kernel, rows, threads, shared) = if hopper && warp_specialised() {
            (
                if ws_by_batch() {
                    Builtin::AttentionWgmmaWsByBatch(T::KIND, d)
                } else {
                    Builtin::AttentionWgmmaWs(T::KIND, d)
                },
                ATTENTION_WS_ROWS,
                ATTENTION_WS_THREADS,
                attention_ws_shared(d),
            )
        } else if hopper {
            (
                Builtin::AttentionWgmma(T::KIND, d),
                attention_wgmma_rows(d),
                attention_wgmma_threads(d),
                attention_wgmma_shared(d),
            )
        } else {
            (
                Builtin::AttentionMma(T::KIND, d),
                attention_mma_rows(d),
                attention_mma_threads(d),
                0,
            )
        };
        let f = ctx.function(ModuleKey::Builtin(kernel), "", || {
            kernel.source(ctx.target())
        })?;
        let (qs, ks, vs) = (walk(q.1, nh), walk(k.1, nh), walk(v.1, nh));
        let blocks = l.div_ceil(rows) as u32;
        for b0 in (0..batch).step_by(MAX_GRID_Y) {
            let nb = (batch - b0).min(MAX_GRID_Y);
            let mut values: [u64; 24] = [
                out.device_ptr(),
                q.0.ptr_at(q.1.offset()),
                k.0.ptr_at(k.1.offset()),
                v.0.ptr_at(v.1.offset()),
                l as u64,
                s as u64,
                qs[0],
                qs[2],
                ks[0],
                ks[2],
                vs[0],
                vs[2],
                u64::from(causal),
                scale.to_bits(),
                b0 as u64,
                nh,
                qs[1],
                ks[1],
                vs[1],
                os[0],
                os[1],
                os[2],
                group,
                lse.unwrap_or(0),
            ];
            ctx.launch_u64s(
                f,
                &|| format!("{kernel:?} of {nb} x [{l}, {d}] queries against {s} keys"),
                (blocks, nb as u32),
                threads as u32,
                shared as u32,
                &mut values,
            )?;
        }
        Ok(out)
    }

    /// See `Backend::attention_lse`: the f32-accumulating entry with its
    /// log-sum-exp output (head dims above [`ATTENTION_MAX_HEAD`], and
    /// outputs without elements, through the host).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attention_lse_gpu<T: FloatDType>(
        &self,
        q: (&CudaStorage<T>, &Layout),
        k: (&CudaStorage<T>, &Layout),
        v: (&CudaStorage<T>, &Layout),
        mask: AttnMaskArg<'_, CudaStorage<bool>, CudaStorage<T>>,
        causal: bool,
        scale: f64,
        out: &Layout,
    ) -> Result<(CudaStorage<T>, CudaStorage<f32>)> {
        self.ctx().bind()?;
        for (what, x) in [("query", q), ("key", k), ("value", v)] {
            check(what, x.0, x.1)?;
        }
        let [batch, l, e] = shape3(q.1);
        let [_, _, ev] = shape3(v.1);
        if e <= ATTENTION_MAX_HEAD && ev <= ATTENTION_MAX_HEAD && batch * l * ev > 0 {
            if T::KIND == DTypeKind::F64 {
                // The kernel writes f64 log-sum-exps for f64.
                let wide = self.ctx().storage::<f64>(batch * l)?;
                let o = self.attention_launch(
                    q,
                    k,
                    v,
                    mask,
                    causal,
                    scale,
                    out,
                    Some(wide.device_ptr()),
                )?;
                let lse = self.cast::<f64, f32>(&wide, &Layout::contiguous(&[batch * l]))?;
                return Ok((o, lse));
            }
            let lse = self.ctx().storage::<f32>(batch * l)?;
            let o =
                self.attention_launch(q, k, v, mask, causal, scale, out, Some(lse.device_ptr()))?;
            return Ok((o, lse));
        }
        let host = |(x, l): (&CudaStorage<T>, &Layout)| -> Result<(Vec<T>, Layout)> {
            Ok((self.download(x, l)?, Layout::contiguous(l.dims())))
        };
        let (hq, hk, hv) = (host(q)?, host(k)?, host(v)?);
        let (q, k, v) = ((&hq.0, &hq.1), (&hk.0, &hk.1), (&hv.0, &hv.1));
        let cpu = CpuBackend;
        let (o, lse) = match mask {
            None => cpu.attention_lse(q, k, v, None, causal, scale, out)?,
            Some((AttnMask::Bool(m), l)) => {
                let (hm, lm) = (self.download(m, l)?, Layout::contiguous(l.dims()));
                cpu.attention_lse(
                    q,
                    k,
                    v,
                    Some((AttnMask::Bool(&hm), &lm)),
                    causal,
                    scale,
                    out,
                )?
            }
            Some((AttnMask::Add(m), l)) => {
                let (hm, lm) = (self.download(m, l)?, Layout::contiguous(l.dims()));
                cpu.attention_lse(q, k, v, Some((AttnMask::Add(&hm), &lm)), causal, scale, out)?
            }
        };
        Ok((self.upload(Cow::Owned(o))?, self.upload(Cow::Owned(lse))?))
    }

    /// See `Backend::attention_backward`: without a mask, f16 and bf16 at
    /// head dim 64 or 128 with 16-byte aligned rows on sm_80+ take the
    /// FlashAttention-2-style tensor-core entries (see
    /// `attention_backward_mma`); the rest (every dtype, masks, sm_75) the
    /// kernels crate's two f32-accumulating backward entries (a warp per
    /// query row for `D` and `dQ`, then a warp per key row for `dK` and
    /// `dV`), launched over batches of at most 65535; without saved
    /// log-sum-exps or with head dims above [`ATTENTION_MAX_HEAD`], through
    /// the host.
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    pub(crate) fn attention_backward_gpu<T: FloatDType>(
        &self,
        q: (&CudaStorage<T>, &Layout),
        k: (&CudaStorage<T>, &Layout),
        v: (&CudaStorage<T>, &Layout),
        o: (&CudaStorage<T>, &Layout),
        g: (&CudaStorage<T>, &Layout),
        lse: Option<&CudaStorage<f32>>,
        mask: AttnMaskArg<'_, CudaStorage<bool>, CudaStorage<T>>,
        causal: bool,
        scale: f64,
    ) -> Result<(CudaStorage<T>, CudaStorage<T>, CudaStorage<T>)> {
        let ctx = self.ctx();
        ctx.bind()?;
        for (what, x) in [
            ("query", q),
            ("key", k),
            ("value", v),
            ("out", o),
            ("grad_out", g),
        ] {
            check(what, x.0, x.1)?;
        }
        match &mask {
            Some((AttnMask::Bool(m), l)) => check("attn_mask", m, l)?,
            Some((AttnMask::Add(m), l)) => check("attn_mask", m, l)?,
            None => {}
        }
        let [batch, l, e] = shape3(q.1);
        let [_, s, _] = shape3(k.1);
        let [_, _, ev] = shape3(v.1);
        if let Some(x) = lse {
            if x.len() < batch * l {
                return Err(Error::Index(format!(
                    "{OP}: a log-sum-exp buffer of {} elements for {batch} x {l} rows",
                    x.len()
                )));
            }
        }
        let fits = e <= ATTENTION_MAX_HEAD && ev <= ATTENTION_MAX_HEAD;
        // f64: the log-sum-exps recomputed in f64 by the forward entry
        // (the saved ones are f32, which would leave the gradients only
        // about 1e-7 accurate).
        let wide = T::KIND == DTypeKind::F64 && fits && batch * l * ev > 0;
        let (lse, _wide) = match lse {
            _ if wide => {
                let w = ctx.storage::<f64>(batch * l)?;
                let m = match &mask {
                    None => None,
                    Some((AttnMask::Bool(m), ml)) => Some((AttnMask::Bool(*m), *ml)),
                    Some((AttnMask::Add(m), ml)) => Some((AttnMask::Add(*m), *ml)),
                };
                let dense = Layout::contiguous(o.1.dims());
                let _ =
                    self.attention_launch(q, k, v, m, causal, scale, &dense, Some(w.device_ptr()))?;
                (w.device_ptr(), Some(w))
            }
            Some(x) if fits && T::KIND != DTypeKind::F64 => (x.device_ptr(), None),
            _ => return self.attention_backward_host(q, k, v, o, g, lse, mask, causal, scale),
        };
        unit_last_strides([q.1, k.1, v.1])?;
        if mask.is_none() && batch > 0 && l > 0 && s > 0 && self.mma_fits::<T>([q, k, v], e, ev) {
            return self.attention_backward_mma(q, k, v, o, g, lse, causal, scale);
        }
        let (dq, dk, dv) = (
            ctx.storage::<T>(batch * l * e)?,
            ctx.storage::<T>(batch * s * e)?,
            ctx.storage::<T>(batch * s * ev)?,
        );
        if batch == 0 || (l == 0 && s == 0) {
            return Ok((dq, dk, dv));
        }
        // The output and its gradient as contiguous `[batch, l, ev]`.
        let dense = |x: (&CudaStorage<T>, &Layout)| -> Result<Option<CudaStorage<T>>> {
            if x.1.is_contiguous() && x.1.offset() == 0 {
                Ok(None)
            } else {
                Ok(Some(self.contiguous(x.0, x.1)?))
            }
        };
        let (oc, gc) = (dense(o)?, dense(g)?);
        let (ob, gb) = (oc.as_ref().unwrap_or(o.0), gc.as_ref().unwrap_or(g.0));
        let acc_bytes = if T::KIND == DTypeKind::F64 { 8 } else { 4 };
        let delta = ctx.storage::<u8>((batch * l * acc_bytes).max(1))?;
        let nh = inner_batch(&[q.1, k.1, v.1, o.1], mask.as_ref().map(|(_, l)| *l))?;
        let shared = Shared::new([q, k, v], &mask, dq.device_ptr(), nh);
        // The query entry first: the key entry reads its `D`.
        for (keys, rows) in [(false, l), (true, s)] {
            if rows == 0 {
                continue;
            }
            let kernel = Builtin::AttentionBackward(T::KIND, keys);
            let f = ctx.function(ModuleKey::Builtin(kernel), "", || {
                kernel.source(ctx.target())
            })?;
            let blocks = rows.div_ceil(ROWS_PER_BLOCK) as u32;
            for b0 in (0..batch).step_by(MAX_GRID_Y) {
                let nb = (batch - b0).min(MAX_GRID_Y);
                let mut values: Vec<u64> = [
                    dq.device_ptr(),
                    dk.device_ptr(),
                    dv.device_ptr(),
                    delta.device_ptr(),
                    lse,
                    ob.device_ptr(),
                    gb.device_ptr(),
                ]
                .into_iter()
                .chain(shared.words([l, s, e, ev], (causal, scale), b0))
                .collect();
                ctx.launch_u64s(
                    f,
                    &|| format!("{kernel:?} of {nb} x [{l}, {e}] queries against {s} keys"),
                    (blocks, nb as u32),
                    BLOCK,
                    0,
                    &mut values,
                )?;
            }
        }
        Ok((dq, dk, dv))
    }

    /// The tensor-core backward (see `mma_fits`), FlashAttention-2's: the
    /// preprocessing entry writes `D_i = dO_i . O_i`, then a block per 128
    /// keys (in the Hopper form, `wgmma`, which compute capability 9.0
    /// takes: 64, and 128 over a warp-specialised block at head dim 128) writes
    /// their `dK` and `dV` and adds `dQ` into a zeroed f32 buffer with
    /// atomics, cast to the dtype at the end. (A deterministic
    /// `dQ` would take a second pass over the keys per query block, which
    /// recomputes `S` and `dP`: about 40% more products.)
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn attention_backward_mma<T: FloatDType>(
        &self,
        q: (&CudaStorage<T>, &Layout),
        k: (&CudaStorage<T>, &Layout),
        v: (&CudaStorage<T>, &Layout),
        o: (&CudaStorage<T>, &Layout),
        g: (&CudaStorage<T>, &Layout),
        lse: u64,
        causal: bool,
        scale: f64,
    ) -> Result<(CudaStorage<T>, CudaStorage<T>, CudaStorage<T>)> {
        let ctx = self.ctx();
        let [batch, l, d] = shape3(q.1);
        let [_, s, _] = shape3(k.1);
        // The output and its gradient are read in place through their
        // strides, like the query (the heads of a `[B, T, H, D]` output
        // or gradient as they are); only one whose rows the entries
        // cannot read 16 bytes at a time is copied first.
        let aligned = |x: (&CudaStorage<T>, &Layout)| -> Result<(Option<CudaStorage<T>>, Layout)> {
            if mma_aligned(x) {
                Ok((None, x.1.clone()))
            } else {
                Ok((
                    Some(self.contiguous(x.0, x.1)?),
                    Layout::contiguous(x.1.dims()),
                ))
            }
        };
        let ((oc, ol), (gc, gl)) = (aligned(o)?, aligned(g)?);
        let (o, g) = (
            (oc.as_ref().unwrap_or(o.0), &ol),
            (gc.as_ref().unwrap_or(g.0), &gl),
        );
        let nh = inner_batch(&[q.1, k.1, v.1, o.1, g.1], None)?;
        let (qs, ks, vs) = (walk(q.1, nh), walk(k.1, nh), walk(v.1, nh));
        let (os, gs) = (walk(o.1, nh), walk(g.1, nh));
        let (op, gp) = (o.0.ptr_at(o.1.offset()), g.0.ptr_at(g.1.offset()));
        // On compute capability 9.0 the Hopper form (`wgmma`), with the
        // same parameters and preprocessing entry: at head dim 128 its
        // warp-specialised blocks (a copying warpgroup, two computing
        // ones).
        let hopper = ctx.compute_capability == (9, 0) && !mma_sync_only();
        let pair = hopper && d == 128;
        let (kernel, keys, threads, shared) = if pair && warp_specialised_backward() {
            (
                Builtin::AttentionWgmmaBackwardWs(T::KIND, d),
                WGMMA_BWD_WS_KEYS,
                WGMMA_BWD_WS_THREADS,
                attention_wgmma_backward_ws_shared(d),
            )
        } else if let (true, Some(bulk)) = (pair, pair_backward()) {
            (
                Builtin::AttentionWgmmaBackward2(T::KIND, d, bulk),
                WGMMA_BWD2_KEYS,
                WGMMA_BWD2_THREADS,
                attention_wgmma_backward2_shared(d),
            )
        } else if hopper {
            (
                Builtin::AttentionWgmmaBackward(T::KIND, d),
                WGMMA_BWD_KEYS,
                WGMMA_BWD_THREADS,
                attention_wgmma_backward_shared(d),
            )
        } else {
            (
                Builtin::AttentionMmaBackward(T::KIND, d),
                MMA_BWD_KEYS,
                MMA_BWD_THREADS,
                attention_mma_backward_shared(d),
            )
        };
        let f = ctx.function(ModuleKey::Builtin(kernel), "", || {
            kernel.source(ctx.target())
        })?;
        let fd = ctx.function(ModuleKey::Builtin(kernel), "_delta", || {
            kernel.source(ctx.target())
        })?;
        let rows = batch * l;
        let delta = ctx.storage::<f32>(rows)?;
        let dqa = ctx.storage::<f32>(rows * d)?;
        self.memset32(dqa.device_ptr(), 0, rows * d)?;
        let (dk, dv) = (
            ctx.storage::<T>(batch * s * d)?,
            ctx.storage::<T>(batch * s * d)?,
        );
        // A warp per row; grids of at most 2^31 - 1 blocks.
        let warps = MMA_BWD_THREADS / 32;
        let step = i32::MAX as usize * warps;
        for r0 in (0..rows).step_by(step) {
            let n = (rows - r0).min(step);
            let mut values: [u64; 13] = [
                delta.device_ptr(),
                op,
                gp,
                n as u64,
                r0 as u64,
                l as u64,
                nh,
                os[0],
                os[2],
                os[1],
                gs[0],
                gs[2],
                gs[1],
            ];
            ctx.launch_u64s(
                fd,
                &|| format!("{kernel:?} (D) of {n} rows"),
                (n.div_ceil(warps) as u32, 1),
                MMA_BWD_THREADS as u32,
                0,
                &mut values,
            )?;
        }
        let blocks = s.div_ceil(keys) as u32;
        for b0 in (0..batch).step_by(MAX_GRID_Y) {
            let nb = (batch - b0).min(MAX_GRID_Y);
            let mut values: [u64; 27] = [
                dqa.device_ptr(),
                dk.device_ptr(),
                dv.device_ptr(),
                delta.device_ptr(),
                lse,
                gp,
                q.0.ptr_at(q.1.offset()),
                k.0.ptr_at(k.1.offset()),
                v.0.ptr_at(v.1.offset()),
                l as u64,
                s as u64,
                qs[0],
                qs[2],
                ks[0],
                ks[2],
                vs[0],
                vs[2],
                u64::from(causal),
                scale.to_bits(),
                b0 as u64,
                nh,
                qs[1],
                ks[1],
                vs[1],
                gs[0],
                gs[2],
                gs[1],
            ];
            ctx.launch_u64s(
                f,
                &|| format!("{kernel:?} of {nb} x [{l}, {d}] queries against {s} keys"),
                (blocks, nb as u32),
                threads as u32,
                shared as u32,
                &mut values,
            )?;
        }
        let dq = self.cast::<f32, T>(&dqa, &Layout::contiguous(&[rows * d]))?;
        Ok((dq, dk, dv))
    }

    /// [`Self::attention_backward_gpu`] through the host (the CPU's
    /// blocked backward).
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn attention_backward_host<T: FloatDType>(
        &self,
        q: (&CudaStorage<T>, &Layout),
        k: (&CudaStorage<T>, &Layout),
        v: (&CudaStorage<T>, &Layout),
        o: (&CudaStorage<T>, &Layout),
        g: (&CudaStorage<T>, &Layout),
        lse: Option<&CudaStorage<f32>>,
        mask: AttnMaskArg<'_, CudaStorage<bool>, CudaStorage<T>>,
        causal: bool,
        scale: f64,
    ) -> Result<(CudaStorage<T>, CudaStorage<T>, CudaStorage<T>)> {
        let host = |(x, l): (&CudaStorage<T>, &Layout)| -> Result<(Vec<T>, Layout)> {
            Ok((self.download(x, l)?, Layout::contiguous(l.dims())))
        };
        let (hq, hk, hv, ho, hg) = (host(q)?, host(k)?, host(v)?, host(o)?, host(g)?);
        let hl = match lse {
            Some(x) => Some(self.download(x, &Layout::contiguous(&[x.len()]))?),
            None => None,
        };
        let (q, k, v) = ((&hq.0, &hq.1), (&hk.0, &hk.1), (&hv.0, &hv.1));
        let (o, g) = ((&ho.0, &ho.1), (&hg.0, &hg.1));
        let cpu = CpuBackend;
        let (dq, dk, dv) = match mask {
            None => cpu.attention_backward(q, k, v, o, g, hl.as_ref(), None, causal, scale)?,
            Some((AttnMask::Bool(m), l)) => {
                let (hm, lm) = (self.download(m, l)?, Layout::contiguous(l.dims()));
                let m = Some((AttnMask::Bool(&hm), &lm));
                cpu.attention_backward(q, k, v, o, g, hl.as_ref(), m, causal, scale)?
            }
            Some((AttnMask::Add(m), l)) => {
                let (hm, lm) = (self.download(m, l)?, Layout::contiguous(l.dims()));
                let m = Some((AttnMask::Add(&hm), &lm));
                cpu.attention_backward(q, k, v, o, g, hl.as_ref(), m, causal, scale)?
            }
        };
        Ok((
            self.upload(Cow::Owned(dq))?,
            self.upload(Cow::Owned(dk))?,
            self.upload(Cow::Owned(dv))?,
        ))
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
        out: &Layout,
    ) -> Result<CudaStorage<T>> {
        let host = |(x, l): (&CudaStorage<T>, &Layout)| -> Result<(Vec<T>, Layout)> {
            Ok((self.download(x, l)?, Layout::contiguous(l.dims())))
        };
        let (hq, hk, hv) = (host(q)?, host(k)?, host(v)?);
        let (q, k, v) = ((&hq.0, &hq.1), (&hk.0, &hk.1), (&hv.0, &hv.1));
        let cpu = CpuBackend;
        let out = match mask {
            None => cpu.attention(q, k, v, None, causal, scale, out)?,
            Some((AttnMask::Bool(m), l)) => {
                let (hm, lm) = (self.download(m, l)?, Layout::contiguous(l.dims()));
                cpu.attention(
                    q,
                    k,
                    v,
                    Some((AttnMask::Bool(&hm), &lm)),
                    causal,
                    scale,
                    out,
                )?
            }
            Some((AttnMask::Add(m), l)) => {
                let (hm, lm) = (self.download(m, l)?, Layout::contiguous(l.dims()));
                cpu.attention(q, k, v, Some((AttnMask::Add(&hm), &lm)), causal, scale, out)?
            }
        };
        self.upload(Cow::Owned(out))
    }
}

/// Set by the timing tests to time the `mma.sync` forward on a device of
/// compute capability 9.0 beside its Hopper form.
#[cfg(test)]
pub(crate) static MMA_SYNC_ONLY: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Whether the forward keeps to the `mma.sync` form on every device (only
/// the timing tests ask for it).
fn mma_sync_only() -> bool {
    #[cfg(test)]
    {
        MMA_SYNC_ONLY.load(std::sync::atomic::Ordering::Relaxed)
    }
    #[cfg(not(test))]
    {
        false
    }
}

/// Set by the timing and accuracy tests to choose the Hopper backward's
/// form at head dim 128: 0 the runtime's choice (see `pair_backward`), 1
/// one warpgroup a block, 2 two warpgroups adding `dQ` with
/// `red.global.add`, 3 two warpgroups adding it with bulk reductions, 4
/// the warp-specialised form (`warp_specialised_backward`, also the
/// runtime's choice).
#[cfg(test)]
pub(crate) static BWD_FORM: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Whether the Hopper backward at head dim 128 takes two warpgroups a
/// block (`Some`), and whether they add `dQ` with bulk reductions, when
/// it does not take the warp-specialised form: `red.global.add` (2.67 ms
/// against 2.73 ms with bulk reductions and 3.13 ms with one warpgroup a
/// block, BENCHMARKS.md).
fn pair_backward() -> Option<bool> {
    #[cfg(test)]
    {
        match BWD_FORM.load(std::sync::atomic::Ordering::Relaxed) {
            1 => return None,
            2 => return Some(false),
            3 => return Some(true),
            _ => {}
        }
    }
    Some(false)
}

/// Whether the Hopper backward at head dim 128 takes the warp-specialised
/// entry (`builtin::attention_wgmma_backward_ws`): the runtime does (1.93
/// ms against 2.69 ms for the two-warpgroup one, BENCHMARKS.md); the
/// tests take the other forms through `BWD_FORM` 1 to 3.
fn warp_specialised_backward() -> bool {
    #[cfg(test)]
    {
        if matches!(BWD_FORM.load(std::sync::atomic::Ordering::Relaxed), 1..=3) {
            return false;
        }
    }
    true
}

/// Set by the timing and accuracy tests to choose the Hopper forward's
/// form: 0 the runtime's choice (see `warp_specialised`), 1 the
/// three-warpgroup entry, 2 the warp-specialised one, 3 the
/// warp-specialised one with its blocks one batch after another
/// (`builtin::attention_wgmma_ws_by_batch`).
#[cfg(test)]
pub(crate) static WS_FORM: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Whether the Hopper forward takes the warp-specialised entry
/// (`builtin::attention_wgmma_ws`): at both head dims it is faster than
/// the three-warpgroup one (BENCHMARKS.md), which only the tests ask for.
fn warp_specialised() -> bool {
    #[cfg(test)]
    {
        match WS_FORM.load(std::sync::atomic::Ordering::Relaxed) {
            1 => return false,
            2 | 3 => return true,
            _ => {}
        }
    }
    true
}

/// Whether the warp-specialised forward takes its blocks one batch after
/// another rather than in L2 sections of heads: only when a test asks.
fn ws_by_batch() -> bool {
    #[cfg(test)]
    {
        WS_FORM.load(std::sync::atomic::Ordering::Relaxed) == 3
    }
    #[cfg(not(test))]
    {
        false
    }
}

/// Whether the tensor-core entries can read an operand in place: its
/// columns contiguous, its other strides and its start 16-byte aligned
/// (their copies into shared memory move 16 bytes at a time).
fn mma_aligned<T: DType>((x, l): (&CudaStorage<T>, &Layout)) -> bool {
    let (last, outer) = l.strides().split_last().expect("a rank of 3 or 4");
    *last == 1 && outer.iter().all(|s| s % 8 == 0) && x.ptr_at(l.offset()) % 16 == 0
}

/// `[batch, rows, cols]` of a `[batch, rows, cols]` or `[outer, inner,
/// rows, cols]` operand.
fn shape3(l: &Layout) -> [usize; 3] {
    let d = l.dims();
    let r = d.len();
    [d[..r - 2].iter().product(), d[r - 2], d[r - 1]]
}

/// The inner batch count the kernels split batches by: that of the
/// operands of two batch dims (the same in all, as the caller splits
/// them), 1 when none has two.
fn inner_batch(ops: &[&Layout], mask: Option<&Layout>) -> Result<u64> {
    let mut nh = None;
    for l in ops.iter().copied().chain(mask) {
        if l.rank() == 4 {
            match nh {
                Some(n) if n != l.dims()[1] => {
                    return Err(Error::Index(format!(
                        "{OP}: operands split their batch into inner dims of {n} and {}",
                        l.dims()[1]
                    )))
                }
                _ => nh = Some(l.dims()[1]),
            }
        }
    }
    Ok(nh.unwrap_or(1).max(1) as u64)
}

/// The inner batch count of the forward entries and the query heads each
/// key and value head serves: 1 unless the key and value split their
/// batch into fewer inner batches than the query (grouped-query
/// attention), which must divide the query's.
fn forward_batches(
    q: &Layout,
    k: &Layout,
    v: &Layout,
    out: &Layout,
    mask: Option<&Layout>,
) -> Result<(u64, u64)> {
    if !(q.rank() == 4 && k.rank() == 4 && k.dims()[1] != q.dims()[1]) {
        return Ok((inner_batch(&[q, k, v, out], mask)?, 1));
    }
    let nh = inner_batch(&[q, out], mask)?;
    let kh = k.dims()[1] as u64;
    if kh == 0 || v.rank() != 4 || v.dims()[1] as u64 != kh || nh % kh != 0 {
        return Err(Error::Index(format!(
            "{OP}: `key` and `value` split their batch into inner dims of {} and {} beside the query's {nh}: grouped-query attention needs one count that divides it",
            k.dims()[1],
            v.dims()[v.rank().saturating_sub(3)]
        )));
    }
    Ok((nh, nh / kh))
}

/// The strides the kernels walk an operand by, in elements: the outer
/// batch, inner batch, row and column strides, for batches split into
/// `nh` inner ones (a single batch dim of stride `s` is `nh * s` and `s`).
/// `Err` naming the first of query, key and value (`ops`) whose last dim
/// is not contiguous: the entries read a row's elements one after another.
fn unit_last_strides(ops: [&Layout; 3]) -> Result<()> {
    for (what, lt) in ["query", "key", "value"].into_iter().zip(ops) {
        let r = lt.rank();
        if lt.dims()[r - 1] > 1 && lt.strides()[r - 1] != 1 {
            return Err(Error::Index(format!(
                "{OP}: `{what}` reaches the backend with a last-dim stride of {}",
                lt.strides()[r - 1]
            )));
        }
    }
    Ok(())
}

/// What the forward and backward entries' parameters share (from `p_q`
/// to `p_ms1` in `PARAMS` and `BWD_PARAMS`): the operands' addresses and
/// walks, and the mask's mode (0 none, 1 bool, 2 additive).
struct Shared {
    ptrs: [u64; 4],
    walks: [[u64; 4]; 4],
    mode: u64,
    nh: u64,
}

impl Shared {
    /// `q`, `k`, `v` and `mask` over `nh` inner batches; `fallback` stands
    /// in for the address of an absent mask (never read).
    fn new<T: FloatDType>(
        [q, k, v]: [(&CudaStorage<T>, &Layout); 3],
        mask: &AttnMaskArg<'_, CudaStorage<bool>, CudaStorage<T>>,
        fallback: u64,
        nh: u64,
    ) -> Shared {
        let (mode, mptr, ms) = match mask {
            None => (0u64, fallback, [0; 4]),
            Some((AttnMask::Bool(m), ml)) => (1, m.ptr_at(ml.offset()), walk(ml, nh)),
            Some((AttnMask::Add(m), ml)) => (2, m.ptr_at(ml.offset()), walk(ml, nh)),
        };
        Shared {
            ptrs: [
                q.0.ptr_at(q.1.offset()),
                k.0.ptr_at(k.1.offset()),
                v.0.ptr_at(v.1.offset()),
                mptr,
            ],
            walks: [walk(q.1, nh), walk(k.1, nh), walk(v.1, nh), ms],
            mode,
            nh,
        }
    }

    /// The shared words in the entries' order, for sizes `[l, s, e, ev]`
    /// and the launch of batches from `b0`.
    fn words(&self, sizes: [usize; 4], (causal, scale): (bool, f64), b0: usize) -> [u64; 26] {
        let [qs, ks, vs, ms] = self.walks;
        let [l, s, e, ev] = sizes.map(|x| x as u64);
        let [qp, kp, vp, mp] = self.ptrs;
        [
            qp,
            kp,
            vp,
            mp,
            l,
            s,
            e,
            ev,
            qs[0],
            qs[2],
            ks[0],
            ks[2],
            vs[0],
            vs[2],
            ms[0],
            ms[2],
            ms[3],
            self.mode,
            u64::from(causal),
            scale.to_bits(),
            b0 as u64,
            self.nh,
            qs[1],
            ks[1],
            vs[1],
            ms[1],
        ]
    }
}

fn walk(l: &Layout, nh: u64) -> [u64; 4] {
    let s: Vec<u64> = l.strides().iter().map(|&x| x as u64).collect();
    match s[..] {
        [b, r, c] => [nh * b, b, r, c],
        [o, i, r, c] => [o, i, r, c],
        _ => unreachable!("attention operands have 3 or 4 dims"),
    }
}
