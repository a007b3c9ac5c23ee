//! `batch_norm` and its backward on the GPU: the kernels crate's
//! per-channel kernel (`tensorfn_kernels::builtin::batch_norm`: the
//! statistics by two passes, then the normalised output or the
//! gradients), reading `[N, C, *]` through its strides as `[N, C, S]`
//! (NCHW and channels-last views alike, no copy) and writing the result
//! (`dx`) in the input's memory format. Many channels take a
//! block each, one launch; fewer channels than multiprocessors split each
//! channel over several blocks, whose partial sums a first launch or two
//! write to a scratch and the main launch adds in a fixed order (the same
//! bits every run on a given GPU).

use super::alloc::CudaStorage;
use super::backend::{check_extent, CudaBackend};
use super::modules::{Builtin, ModuleKey};
use super::transfer::contiguous_ptr;
use crate::backend::Backend;
use crate::dtype::FloatDType;
use crate::error::{Error, Result};
use crate::layout::Layout;
use std::borrow::Cow;
use tensorfn_kernels::builtin::BLOCK;
use tensorfn_kernels::ptx::{BATCH_NORM_BACKWARD_META_WORDS, BATCH_NORM_META_WORDS};

type Operand<'a, T> = Option<(&'a CudaStorage<T>, &'a Layout)>;
#[allow(clippy::type_complexity)]
type Running<'a, T> = Option<(
    (&'a CudaStorage<T>, &'a Layout),
    (&'a CudaStorage<T>, &'a Layout),
)>;

/// `l` (`[N, C, *]`) viewed as `[N, C, S]`: the strides, the address of
/// its first element and the copy it reads from when the trailing dims do
/// not fold into one.
fn as_ncs<T: FloatDType>(
    be: &CudaBackend,
    x: &CudaStorage<T>,
    l: &Layout,
    [n, c, s]: [usize; 3],
) -> Result<([u64; 3], u64, Option<CudaStorage<T>>)> {
    if let Some(v) = l.reshape(&[n, c, s]) {
        let st = v.strides();
        return Ok((
            [st[0] as u64, st[1] as u64, st[2] as u64],
            x.ptr_at(v.offset()),
            None,
        ));
    }
    let copy = be.contiguous(x, l)?;
    let ptr = copy.device_ptr();
    Ok(([(c * s) as u64, s as u64, 1], ptr, Some(copy)))
}

/// The `[C]` operand's address (a dense copy when strided), after checking
/// its dims; 0 when absent.
fn channel_operand<T: FloatDType>(
    name: &str,
    operand: &str,
    v: Operand<'_, T>,
    c: usize,
    keep: &mut Vec<CudaStorage<T>>,
) -> Result<u64> {
    let Some((b, l)) = v else { return Ok(0) };
    if l.dims() != [c] {
        return Err(Error::shape(
            name,
            format!("`{operand}` of [{c}] (the input's channels)"),
            format!("{:?}", l.dims()),
        ));
    }
    check_extent(name, operand, b, l)?;
    let (ptr, copy) = contiguous_ptr(b, l)?;
    keep.extend(copy);
    Ok(ptr)
}

/// The `[N, C, S]` strides of a result of `l`'s dims laid out as `l`'s
/// [`Layout::result_like`] says (contiguous, or channels-last for a
/// channels-last input): where the kernels write `out` or `dx`.
fn result_strides(l: &Layout, [n, c, s]: [usize; 3]) -> [u64; 3] {
    let st = l
        .result_like(l.dims())
        .reshape(&[n, c, s])
        .map_or_else(|| vec![c * s, s, 1], |v| v.strides().to_vec());
    [st[0] as u64, st[1] as u64, st[2] as u64]
}

/// The kernels' flag word: bit `i` set when `bits[i]` (training, a
/// weight, a bias, running statistics).
fn flags(bits: &[bool]) -> u64 {
    bits.iter().enumerate().map(|(i, &b)| (b as u64) << i).sum()
}

/// `(N, C, S)` of `[N, C, *]`.
fn ncs(name: &str, l: &Layout) -> Result<[usize; 3]> {
    let d = l.dims();
    if d.len() < 2 {
        return Err(Error::shape(
            name,
            "an input of rank 2 or more",
            format!("{d:?}"),
        ));
    }
    Ok([d[0], d[1], d[2..].iter().product()])
}

/// The parts each channel's `m` elements are split into: 1 when the
/// channels fill the GPU's `sm_count` multiprocessors, else enough for
/// about four blocks per multiprocessor, each with at least a block's
/// worth of elements.
fn parts(c: usize, m: usize, sm_count: usize) -> usize {
    if c >= sm_count {
        return 1;
    }
    (4 * sm_count)
        .div_ceil(c.max(1))
        .min(m.div_ceil(BLOCK as usize))
        .clamp(1, 65_535)
}

/// The partial sums' scratch for `parts` parts of `c` channels (`None`
/// with one part) and its address (0 without).
fn scratch(be: &CudaBackend, c: usize, parts: usize) -> Result<(Option<CudaStorage<f64>>, u64)> {
    if parts <= 1 {
        return Ok((None, 0));
    }
    // Four sums per (channel, part), f64-sized so f32 sums fit too.
    let ws = be.ctx().storage::<f64>(4 * c * parts)?;
    let p = ws.device_ptr();
    Ok((Some(ws), p))
}

impl CudaBackend {
    fn launch_batch_norm<T: FloatDType>(
        &self,
        suffix: &'static str,
        (c, parts): (usize, usize),
        ptrs: &mut [u64],
        meta: &[u64],
    ) -> Result<()> {
        let ctx = self.ctx();
        let kernel = Builtin::BatchNorm(T::KIND);
        let f = ctx.function(ModuleKey::Builtin(kernel), suffix, || {
            kernel.source(ctx.target())
        })?;
        ctx.launch_u64s_meta(
            f,
            &|| format!("{kernel:?}{suffix} over {c} channels in {parts} parts"),
            (c.min(65_535) as u32, parts as u32),
            BLOCK,
            0,
            ptrs,
            meta,
        )
    }

    /// The partial-sums launches of channels split into `parts` parts
    /// (nothing with one part): each of `stages` in order, with the
    /// pointers `[x, grad_output, running_mean, scratch]` (0 where unused)
    /// and the backward's `meta` words.
    fn partial_sums<T: FloatDType>(
        &self,
        stages: &[&'static str],
        (c, parts): (usize, usize),
        ptrs: [u64; 4],
        meta: &[u64; BATCH_NORM_BACKWARD_META_WORDS],
    ) -> Result<()> {
        if parts <= 1 {
            return Ok(());
        }
        for &suffix in stages {
            let mut pp = ptrs;
            self.launch_batch_norm::<T>(suffix, (c, parts), &mut pp, meta)?;
        }
        Ok(())
    }

    /// See `Backend::batch_norm`.
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    pub(crate) fn batch_norm_gpu<T: FloatDType>(
        &self,
        (x, l): (&CudaStorage<T>, &Layout),
        weight: Operand<'_, T>,
        bias: Operand<'_, T>,
        running: Running<'_, T>,
        training: bool,
        momentum: f64,
        eps: f64,
    ) -> Result<(CudaStorage<T>, Option<(CudaStorage<T>, CudaStorage<T>)>)> {
        let ctx = self.ctx();
        ctx.bind()?;
        let name = "batch_norm";
        let [n, c, s] = ncs(name, l)?;
        check_extent(name, "input", x, l)?;
        let mut keep = Vec::new();
        let w = channel_operand(name, "weight", weight, c, &mut keep)?;
        let b = channel_operand(name, "bias", bias, c, &mut keep)?;
        let rm = channel_operand(name, "running_mean", running.map(|r| r.0), c, &mut keep)?;
        let rv = channel_operand(name, "running_var", running.map(|r| r.1), c, &mut keep)?;
        let m = n * s;
        let out = ctx.storage::<T>(n * c * s)?;
        let update = training && running.is_some() && m > 0;
        let updated = if update {
            Some((ctx.storage::<T>(c)?, ctx.storage::<T>(c)?))
        } else {
            None
        };
        if m == 0 || c == 0 {
            return Ok((out, updated));
        }
        let (xs, xp, _copy) = as_ncs(self, x, l, [n, c, s])?;
        let flags = flags(&[training, w != 0, b != 0, running.is_some()]);
        let (nm, nv) = updated
            .as_ref()
            .map_or((0, 0), |(a, b)| (a.device_ptr(), b.device_ptr()));
        let parts = parts(c, m, ctx.sm_count);
        let (_ws, wsp) = scratch(self, c, parts)?;
        if training {
            let pm: [u64; BATCH_NORM_BACKWARD_META_WORDS] = [
                n as u64, c as u64, s as u64, xs[0], xs[1], xs[2], flags, 0, 0, 0, 0, 0, 0, 0,
            ];
            let stages = ["_stats_sum", "_stats_dev"];
            self.partial_sums::<T>(&stages, (c, parts), [xp, 0, rm, wsp], &pm)?;
        }
        let os = result_strides(l, [n, c, s]);
        let mut ptrs = [out.device_ptr(), xp, w, b, rm, rv, nm, nv, wsp];
        let meta: [u64; BATCH_NORM_META_WORDS] = [
            n as u64,
            c as u64,
            s as u64,
            xs[0],
            xs[1],
            xs[2],
            flags,
            momentum.to_bits(),
            eps.to_bits(),
            os[0],
            os[1],
            os[2],
        ];
        self.launch_batch_norm::<T>("", (c, parts), &mut ptrs, &meta)?;
        Ok((out, updated))
    }

    /// See `Backend::batch_norm_backward`.
    #[allow(clippy::type_complexity)]
    pub(crate) fn batch_norm_backward_gpu<T: FloatDType>(
        &self,
        (x, l): (&CudaStorage<T>, &Layout),
        weight: Operand<'_, T>,
        running: Running<'_, T>,
        (g, lg): (&CudaStorage<T>, &Layout),
        training: bool,
        eps: f64,
    ) -> Result<(CudaStorage<T>, CudaStorage<T>, CudaStorage<T>)> {
        let ctx = self.ctx();
        ctx.bind()?;
        let name = "batch_norm_backward";
        let [n, c, s] = ncs(name, l)?;
        if lg.dims() != l.dims() {
            return Err(Error::shape(
                name,
                "an input of rank 2 or more and a grad_output of its dims",
                format!("{:?}, {:?}", l.dims(), lg.dims()),
            ));
        }
        check_extent(name, "input", x, l)?;
        check_extent(name, "grad_output", g, lg)?;
        let mut keep = Vec::new();
        let w = channel_operand(name, "weight", weight, c, &mut keep)?;
        let rm = channel_operand(name, "running_mean", running.map(|r| r.0), c, &mut keep)?;
        let rv = channel_operand(name, "running_var", running.map(|r| r.1), c, &mut keep)?;
        let m = n * s;
        if m == 0 || c == 0 {
            let zeros = vec![T::from_f64(0.0); c];
            return Ok((
                ctx.storage::<T>(n * c * s)?,
                self.upload(Cow::Borrowed(&zeros[..]))?,
                self.upload(Cow::Owned(zeros))?,
            ));
        }
        let dx = ctx.storage::<T>(n * c * s)?;
        let (dw, db) = (ctx.storage::<T>(c)?, ctx.storage::<T>(c)?);
        let (xs, xp, _xcopy) = as_ncs(self, x, l, [n, c, s])?;
        let (gs, gp, _gcopy) = as_ncs(self, g, lg, [n, c, s])?;
        let flags = flags(&[training, w != 0, false, running.is_some()]);
        let ds = result_strides(l, [n, c, s]);
        let parts = parts(c, m, ctx.sm_count);
        let (_ws, wsp) = scratch(self, c, parts)?;
        let mut ptrs = [
            dx.device_ptr(),
            dw.device_ptr(),
            db.device_ptr(),
            xp,
            gp,
            w,
            rm,
            rv,
            wsp,
        ];
        let meta: [u64; BATCH_NORM_BACKWARD_META_WORDS] = [
            n as u64,
            c as u64,
            s as u64,
            xs[0],
            xs[1],
            xs[2],
            flags,
            eps.to_bits(),
            gs[0],
            gs[1],
            gs[2],
            ds[0],
            ds[1],
            ds[2],
        ];
        let stages: &[&'static str] = if training {
            &["_stats_sum", "_backward_sums"]
        } else {
            &["_backward_sums"]
        };
        self.partial_sums::<T>(stages, (c, parts), [xp, gp, rm, wsp], &meta)?;
        self.launch_batch_norm::<T>("_backward", (c, parts), &mut ptrs, &meta)?;
        Ok((dx, dw, db))
    }
}
