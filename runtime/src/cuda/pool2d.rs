//! 2-D pooling (`max_pool2d`, `avg_pool2d`, `adaptive_avg_pool2d`), its
//! gradient and seeded `dropout` on the GPU: the kernels crate's built-in
//! kernels (`tensorfn_kernels::builtin::pool2d`, `dropout`), which follow
//! the catalogue's reference exactly, so both devices give the same bits.
//! Pooling reads its input through the view's strides (channels-last
//! activations need no copy).

use super::alloc::CudaStorage;
use super::backend::{check_extent, CudaBackend};
use super::modules::{Builtin, ModuleKey};
use crate::backend::Backend;
use crate::dtype::FloatDType;
use crate::error::{Error, Result};
use crate::layout::Layout;
use tensorfn_core::ops::dropout::{mix, scale, threshold};
use tensorfn_core::ops::pool::{Pool2d, PoolKind};
use tensorfn_kernels::builtin::BLOCK;
use tensorfn_kernels::ptx::POOL_META_WORDS;

/// Blocks of a grid-stride launch over `n` elements.
pub(super) fn blocks(n: usize) -> u32 {
    n.div_ceil(BLOCK as usize).clamp(1, 1 << 20) as u32
}

/// `l` (`[N, C, H, W]`, `[C, H, W]` or more leading dims) as a view of
/// four dims: its dims, strides and offset, and the copy it reads from
/// when the leading dims do not fold into two (`None`: `x` itself).
#[allow(clippy::type_complexity)]
fn as_nchw<T: FloatDType>(
    be: &CudaBackend,
    x: &CudaStorage<T>,
    l: &Layout,
) -> Result<([usize; 4], [usize; 4], usize, Option<CudaStorage<T>>)> {
    let (d, s) = (l.dims(), l.strides());
    match l.rank() {
        4 => Ok((
            [d[0], d[1], d[2], d[3]],
            [s[0], s[1], s[2], s[3]],
            l.offset(),
            None,
        )),
        3 => Ok((
            [1, d[0], d[1], d[2]],
            [0, s[0], s[1], s[2]],
            l.offset(),
            None,
        )),
        r if r > 4 => {
            let copy = be.contiguous(x, l)?;
            let (h, w) = (d[r - 2], d[r - 1]);
            let lead: usize = d[..r - 2].iter().product();
            Ok(([1, lead, h, w], [0, h * w, w, 1], 0, Some(copy)))
        }
        _ => Err(Error::shape(
            "pool2d",
            "an input of rank 3 or more",
            format!("{:?}", d),
        )),
    }
}

fn suffix(kind: PoolKind, backward: bool) -> &'static str {
    match (kind, backward) {
        (PoolKind::Max, false) => "_max",
        (PoolKind::Avg, false) => "_avg",
        (PoolKind::AdaptiveAvg, false) => "_adaptive",
        (PoolKind::Max, true) => "_max_backward",
        (PoolKind::Avg, true) => "_avg_backward",
        (PoolKind::AdaptiveAvg, true) => "_adaptive_backward",
    }
}

/// Whether a `[N, C, H, W]` view with strides `s` stores its channels
/// fastest (channels-last, as cuDNN's activations come): the kernels then
/// map neighbouring threads to neighbouring channels.
fn channels_last(dims: [usize; 4], s: [usize; 4]) -> bool {
    dims[1] > 1 && s[1] < s[2] && s[1] < s[3]
}

/// The channels per thread of the vectorised `max_pool2d` entry
/// (`tensorfn_kernels::ptx::max_vec_width`) where it applies: a max pool
/// of a dtype it has, writing channels-last (`cl`) from an input whose
/// channels are contiguous, with `c` channels and the other strides
/// multiples of the width and both pointers 16-byte aligned, so that
/// every access is one aligned 16-byte vector.
fn max_vec(
    kind: PoolKind,
    dtype: tensorfn_core::DTypeKind,
    cl: usize,
    c: usize,
    strides: [usize; 4],
    ptrs: &[u64],
) -> Option<usize> {
    let w = tensorfn_kernels::ptx::max_vec_width(dtype)?;
    let fits = kind == PoolKind::Max
        && cl == ORDER_NHWC_OUT
        && strides[1] == 1
        && c % w == 0
        && [strides[0], strides[2], strides[3]]
            .iter()
            .all(|s| s % w == 0)
        && ptrs.iter().all(|p| p % 16 == 0);
    fits.then_some(w)
}

/// The `channels_last` meta word that also writes the output
/// channels-last (1: channel-fastest threads, contiguous output).
const ORDER_NHWC_OUT: usize = 2;

/// The pooling kernels' `meta` words; `cl` picks the channel-fastest
/// thread order (1) and the channels-last output ([`ORDER_NHWC_OUT`]).
fn meta(
    total: usize,
    dims: [usize; 4],
    out: [usize; 2],
    xs: [usize; 4],
    p: &Pool2d,
    gs: [usize; 4],
    cl: usize,
) -> [u64; POOL_META_WORDS] {
    let mut m = [0u64; POOL_META_WORDS];
    let words = [
        total,
        dims[1],
        dims[2],
        dims[3],
        out[0],
        out[1],
        xs[0],
        xs[1],
        xs[2],
        xs[3],
        p.kernel_size[0],
        p.kernel_size[1],
        p.stride[0],
        p.stride[1],
        p.padding[0],
        p.padding[1],
        p.dilation[0],
        p.dilation[1],
        p.count_include_pad as usize,
        p.divisor_override.unwrap_or(0),
        gs[0],
        gs[1],
        gs[2],
        gs[3],
        cl,
    ];
    for (m, w) in m.iter_mut().zip(words) {
        *m = w as u64;
    }
    m
}

impl CudaBackend {
    /// Launches pooling entry `kind` (`backward`) of `T` over `total`
    /// threads with pointers `ptrs` and `meta`.
    fn launch_pool<T: FloatDType>(
        &self,
        kind: PoolKind,
        backward: bool,
        total: usize,
        ptrs: &[u64],
        meta: &mut [u64; POOL_META_WORDS],
    ) -> Result<()> {
        let ctx = self.ctx();
        let kernel = Builtin::Pool2d(T::KIND);
        let f = ctx.function(ModuleKey::Builtin(kernel), suffix(kind, backward), || {
            kernel.source(ctx.target())
        })?;
        let mut ptrs = ptrs.to_vec();
        ctx.launch_u64s_meta(
            f,
            &|| format!("{kernel:?} {kind:?} backward {backward} over {total}"),
            (blocks(total), 1),
            BLOCK,
            0,
            &mut ptrs,
            meta,
        )
    }

    /// See `Backend::pool2d`.
    pub(crate) fn pool2d_gpu<T: FloatDType>(
        &self,
        x: &CudaStorage<T>,
        l: &Layout,
        p: &Pool2d,
        out: [usize; 2],
    ) -> Result<CudaStorage<T>> {
        let ctx = self.ctx();
        ctx.bind()?;
        check_extent("pool2d", "input", x, l)?;
        let (dims, strides, offset, copy) = as_nchw(self, x, l)?;
        let total = dims[0] * dims[1] * out[0] * out[1];
        let y = ctx.storage::<T>(total)?;
        if total == 0 {
            return Ok(y);
        }
        let src = copy.as_ref().unwrap_or(x).ptr_at(offset);
        // A channels-last input's result is written channels-last
        // (`Backend::pool2d`): thread `i` writes element `i` of NHWC.
        let cl = match l.prefers_channels_last() {
            true => ORDER_NHWC_OUT,
            false => usize::from(channels_last(dims, strides)),
        };
        let mut m = meta(total, dims, out, strides, p, [0; 4], cl);
        let ptrs = [y.device_ptr(), src];
        if let Some(w) = max_vec(p.kind, T::KIND, cl, dims[1], strides, &ptrs) {
            // One thread per 16 bytes of channels (PyTorch's NHWC kernel).
            m[0] = (total / w) as u64;
            let ctx = self.ctx();
            let kernel = Builtin::Pool2d(T::KIND);
            let f = ctx.function(ModuleKey::Builtin(kernel), "_max_vec", || {
                kernel.source(ctx.target())
            })?;
            let mut ptrs = ptrs.to_vec();
            ctx.launch_u64s_meta(
                f,
                &|| format!("{kernel:?} max_vec over {total}"),
                (blocks(total / w), 1),
                BLOCK,
                0,
                &mut ptrs,
                &m,
            )?;
            return Ok(y);
        }
        self.launch_pool::<T>(p.kind, false, total, &ptrs, &mut m)?;
        Ok(y)
    }

    /// See `Backend::pool2d_backward`.
    pub(crate) fn pool2d_backward_gpu<T: FloatDType>(
        &self,
        (x, lx): (&CudaStorage<T>, &Layout),
        (g, lg): (&CudaStorage<T>, &Layout),
        p: &Pool2d,
    ) -> Result<CudaStorage<T>> {
        let ctx = self.ctx();
        ctx.bind()?;
        check_extent("pool2d_backward", "input", x, lx)?;
        check_extent("pool2d_backward", "grad_output", g, lg)?;
        let (dims, xs, xoff, xcopy) = as_nchw(self, x, lx)?;
        let (gdims, gs, goff, gcopy) = as_nchw(self, g, lg)?;
        if gdims[..2] != dims[..2] {
            return Err(Error::shape(
                "pool2d_backward",
                format!(
                    "a grad_output with the input's leading dims {:?}",
                    lx.dims()
                ),
                format!("{:?}", lg.dims()),
            ));
        }
        let total = dims.iter().product();
        let dx = ctx.storage::<T>(total)?;
        if total == 0 {
            return Ok(dx);
        }
        // An empty output leaves every window list empty: zeros.
        let out = [gdims[2], gdims[3]];
        let xp = xcopy.as_ref().unwrap_or(x).ptr_at(xoff);
        let gp = gcopy.as_ref().unwrap_or(g).ptr_at(goff);
        // A channels-last input's gradient is written channels-last
        // (`Backend::pool2d_backward`); else the threads follow the
        // operand they read most: max `x`, the averages `grad_output`.
        let cl = match lx.prefers_channels_last() {
            true => ORDER_NHWC_OUT,
            false => usize::from(
                channels_last(gdims, gs) || (p.kind == PoolKind::Max && channels_last(dims, xs)),
            ),
        };
        let mut m = meta(total, dims, out, xs, p, gs, cl);
        self.launch_pool::<T>(p.kind, true, total, &[dx.device_ptr(), xp, gp], &mut m)?;
        Ok(dx)
    }

    /// See `Backend::dropout`: the mask of `tensorfn_core::ops::dropout`
    /// drawn on the device, the same bits as the CPU's.
    pub(crate) fn dropout_gpu<T: FloatDType>(
        &self,
        x: &CudaStorage<T>,
        l: &Layout,
        p: f64,
        seed: u64,
    ) -> Result<CudaStorage<T>> {
        let ctx = self.ctx();
        ctx.bind()?;
        check_extent("dropout", "input", x, l)?;
        let n = l.numel();
        let y = ctx.storage::<T>(n)?;
        if n == 0 {
            return Ok(y);
        }
        let (src, _copy) = super::transfer::contiguous_ptr(x, l)?;
        let kernel = Builtin::Dropout(T::KIND);
        let f = ctx.function(ModuleKey::Builtin(kernel), "", || {
            kernel.source(ctx.target())
        })?;
        let mut words: [u64; 6] = [
            y.device_ptr(),
            src,
            n as u64,
            mix(seed),
            threshold(p),
            scale(p).to_bits(),
        ];
        ctx.launch_u64s(
            f,
            &|| format!("{kernel:?} over {n}"),
            (blocks(n), 1),
            BLOCK,
            0,
            &mut words,
        )?;
        Ok(y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensorfn_core::DTypeKind;

    #[test]
    fn the_vector_max_pool_takes_only_views_it_reads_in_aligned_vectors() {
        let nhwc = |c: usize| [4 * 4 * c, 1, 4 * c, c];
        let ok = [0x1000, 0x2000];
        let (max, bf16, cl) = (PoolKind::Max, DTypeKind::BF16, ORDER_NHWC_OUT);
        type Case = (
            PoolKind,
            DTypeKind,
            usize,
            usize,
            [usize; 4],
            [u64; 2],
            Option<usize>,
        );
        let cases: [Case; 9] = [
            (max, bf16, cl, 64, nhwc(64), ok, Some(8)),
            (max, DTypeKind::F32, cl, 12, nhwc(12), ok, Some(4)),
            // Channels not a multiple of the width, an f64 input, an average.
            (max, bf16, cl, 12, nhwc(12), ok, None),
            (max, DTypeKind::F64, cl, 64, nhwc(64), ok, None),
            (PoolKind::Avg, bf16, cl, 64, nhwc(64), ok, None),
            // NCHW output, spaced channels, a misaligned pointer or stride.
            (max, bf16, 1, 64, nhwc(64), ok, None),
            (max, bf16, cl, 64, [0, 2, 0, 128], ok, None),
            (max, bf16, cl, 64, nhwc(64), [0x1000, 0x2002], None),
            (max, bf16, cl, 64, [64, 1, 36, 64], ok, None),
        ];
        for (kind, dtype, order, c, strides, ptrs, want) in cases {
            let got = max_vec(kind, dtype, order, c, strides, &ptrs);
            assert_eq!(
                got, want,
                "{kind:?} {dtype} order {order} c {c} {strides:?}"
            );
        }
    }
}
