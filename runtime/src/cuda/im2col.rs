//! The built-in 2-D convolution on the GPU, for problems cuDNN does not
//! run (cuDNN missing, turned off, or declining the problem): the kernels
//! crate's `im2col` / `col2im` (`tensorfn_kernels::builtin::conv2d`) move
//! the data between images and columns, cuBLAS(Lt) multiplies.
//!
//! Columns are `[n, C_in * kH * kW, OH * OW]` for a chunk of `n` images,
//! as many as fit in [`COLUMN_BYTES`] (at least one), so the scratch stays
//! bounded whatever the batch. With `G` groups, group `g`'s rows of the
//! columns are a contiguous block, so per image the products of all
//! groups are one strided batched product; with one group the images of a
//! chunk are the batch instead (the filter's batch stride 0).
//!
//! * forward: `y[n, g] = W[g] · cols[n, g]`, written in place into the
//!   contiguous output; a bias is copied into the output first and the
//!   products add to it (`beta = 1`), so it is added before the one
//!   rounding to the dtype;
//! * `dx`: `dcols[n, g] = W[g]ᵀ · dy[n, g]`, then `col2im` gathers each
//!   input element's taps (no atomics: the same bits every run);
//! * `dw`: `dw[g] += dy[n, g] · cols[n, g]ᵀ` image after image, in order.

use super::alloc::CudaStorage;
use super::backend::CudaBackend;
use super::blas::gemm_into;
use super::modules::{Builtin, ModuleKey, BLOCK};
use super::pool2d::blocks;
use crate::backend::Backend;
use crate::dtype::FloatDType;
use crate::error::Result;
use crate::layout::Layout;
use tensorfn_core::ops::conv::{out_size, ConvArgs};
use tensorfn_kernels::ptx::{ConvMeta, CONV_META_WORDS};

/// The most bytes of columns one call keeps at a time.
pub(crate) const COLUMN_BYTES: usize = 256 << 20;

#[cfg(test)]
thread_local! {
    /// [`COLUMN_BYTES`] on this thread: tests lower it to run many chunks.
    pub(crate) static COLUMN_LIMIT: std::cell::Cell<usize> = const { std::cell::Cell::new(COLUMN_BYTES) };
}

/// The column budget of a call (see [`COLUMN_BYTES`]).
fn column_bytes() -> usize {
    #[cfg(test)]
    return COLUMN_LIMIT.with(|c| c.get());
    #[cfg(not(test))]
    COLUMN_BYTES
}

/// The sizes of one convolution.
#[derive(Clone, Copy, Debug)]
struct Geometry {
    n: usize,
    c_in: usize,
    h: usize,
    w: usize,
    c_out: usize,
    kh: usize,
    kw: usize,
    oh: usize,
    ow: usize,
    groups: usize,
}

impl Geometry {
    /// `x` `[N, C_in, H, W]` and `w` `[C_out, C_in / groups, kH, kW]`,
    /// already checked by `rules::conv`.
    fn new(x: &[usize], w: &[usize], a: &ConvArgs) -> Geometry {
        let axis = |i: usize| {
            out_size(x[2 + i], w[2 + i], a.padding[i], a.stride[i], a.dilation[i]).unwrap_or(0)
        };
        Geometry {
            n: x[0],
            c_in: x[1],
            h: x[2],
            w: x[3],
            c_out: w[0],
            kh: w[2],
            kw: w[3],
            oh: axis(0),
            ow: axis(1),
            groups: a.groups.max(1),
        }
    }

    /// Output positions per image.
    fn positions(&self) -> usize {
        self.oh * self.ow
    }

    /// Column rows per group: a filter row's length.
    fn taps(&self) -> usize {
        self.c_in / self.groups * self.kh * self.kw
    }

    /// Column rows per image.
    fn rows(&self) -> usize {
        self.c_in * self.kh * self.kw
    }

    /// Output channels per group.
    fn kg(&self) -> usize {
        self.c_out / self.groups
    }

    /// Images per chunk of columns of `T`.
    fn chunk<T>(&self) -> usize {
        let per_image = (self.rows() * self.positions() * std::mem::size_of::<T>()).max(1);
        (column_bytes() / per_image).clamp(1, self.n.max(1))
    }

    /// The column kernels' `meta` words for `images` images of `x` with
    /// strides `xs` (`col2im` does not read them).
    fn meta(&self, total: usize, xs: [usize; 4], a: &ConvArgs) -> [u64; CONV_META_WORDS] {
        ConvMeta {
            total,
            c: self.c_in,
            h: self.h,
            w: self.w,
            kh: self.kh,
            kw: self.kw,
            oh: self.oh,
            ow: self.ow,
            x_strides: xs,
            stride: a.stride,
            padding: a.padding,
            dilation: a.dilation,
        }
        .words()
        .map(|w| w as u64)
    }
}

/// `l` in place when it is contiguous, else a contiguous copy.
fn dense<'a, T: FloatDType>(
    be: &CudaBackend,
    s: &'a CudaStorage<T>,
    l: &Layout,
    copy: &'a mut Option<CudaStorage<T>>,
) -> Result<(&'a CudaStorage<T>, usize)> {
    if l.is_contiguous() {
        return Ok((s, l.offset()));
    }
    Ok((copy.insert(be.contiguous(s, l)?), 0))
}

impl CudaBackend {
    /// Launches entry `im2col` or `col2im` of `T` over `total` elements.
    fn launch_cols<T: FloatDType>(
        &self,
        entry: &'static str,
        (out, input): (u64, u64),
        meta: &[u64; CONV_META_WORDS],
    ) -> Result<()> {
        let ctx = self.ctx();
        let kernel = Builtin::Conv2d(T::KIND);
        let f = ctx.function(ModuleKey::Builtin(kernel), entry, || {
            kernel.source(ctx.target())
        })?;
        let total = meta[0] as usize;
        ctx.launch_u64s_meta(
            f,
            &|| format!("{kernel:?}{entry} over {total}"),
            (blocks(total), 1),
            BLOCK,
            0,
            &mut [out, input],
            meta,
        )
    }

    /// The columns of images `first..first + images` of `x` into `cols`.
    fn im2col<T: FloatDType>(
        &self,
        (x, lx): (&CudaStorage<T>, &Layout),
        g: &Geometry,
        a: &ConvArgs,
        (first, images): (usize, usize),
        cols: &CudaStorage<T>,
    ) -> Result<()> {
        let s = lx.strides();
        let xs = [s[0], s[1], s[2], s[3]];
        let total = images * g.rows() * g.positions();
        let meta = g.meta(total, xs, a);
        let src = x.ptr_at(lx.offset() + first * xs[0]);
        self.launch_cols::<T>("_im2col", (cols.device_ptr(), src), &meta)
    }

    /// The built-in [`Backend::conv2d`]: see the module's comment.
    pub(crate) fn conv2d_builtin<T: FloatDType>(
        &self,
        x: (&CudaStorage<T>, &Layout),
        w: (&CudaStorage<T>, &Layout),
        bias: Option<(&CudaStorage<T>, &Layout)>,
        args: &ConvArgs,
    ) -> Result<CudaStorage<T>> {
        let g = Geometry::new(x.1.dims(), w.1.dims(), args);
        let y_dims = [g.n, g.c_out, g.oh, g.ow];
        let y_layout = Layout::contiguous(&y_dims);
        if y_layout.numel() == 0 || (g.taps() == 0 && bias.is_none()) {
            // Nothing to compute, or no input channels: zeros.
            return self.full(y_layout.numel(), T::zero());
        }
        // Every element is written: by the bias copy or by the products.
        let mut y = self.ctx().storage::<T>(y_layout.numel())?;
        let beta = match bias {
            Some((b, lb)) => {
                let spread =
                    Layout::new(y_dims.to_vec(), vec![0, lb.strides()[0], 0, 0], lb.offset());
                self.copy_into(b, &spread, &mut y, &y_layout)?;
                T::one()
            }
            None => T::zero(),
        };
        if g.taps() == 0 {
            // No input channels: the bias alone.
            return Ok(y);
        }
        let mut w_copy = None;
        let (wb, w_off) = dense(self, w.0, w.1, &mut w_copy)?;
        let (p, taps, kg, rows) = (g.positions(), g.taps(), g.kg(), g.rows());
        let chunk = g.chunk::<T>();
        let cols = self.ctx().storage::<T>(chunk * rows * p)?;
        let image = g.c_out * p;
        for first in (0..g.n).step_by(chunk) {
            let images = chunk.min(g.n - first);
            self.im2col(x, &g, args, (first, images), &cols)?;
            if g.groups == 1 {
                let lw = Layout::new(vec![images, kg, taps], vec![0, taps, 1], w_off);
                let lc = Layout::new(vec![images, taps, p], vec![rows * p, p, 1], 0);
                gemm_into(
                    self,
                    (wb, &lw),
                    (&cols, &lc),
                    y.ptr_at(first * image),
                    T::one(),
                    beta,
                )?;
                continue;
            }
            let lw = Layout::new(vec![g.groups, kg, taps], vec![kg * taps, taps, 1], w_off);
            for j in 0..images {
                let lc = Layout::new(vec![g.groups, taps, p], vec![taps * p, p, 1], j * rows * p);
                let out = y.ptr_at((first + j) * image);
                gemm_into(self, (wb, &lw), (&cols, &lc), out, T::one(), beta)?;
            }
        }
        Ok(y)
    }

    /// The built-in [`Backend::conv2d_backward`]: `dx` (`input`) or `dw`,
    /// see the module's comment.
    pub(crate) fn conv2d_backward_builtin<T: FloatDType>(
        &self,
        x: (&CudaStorage<T>, &Layout),
        w: (&CudaStorage<T>, &Layout),
        grad: (&CudaStorage<T>, &Layout),
        args: &ConvArgs,
        input: bool,
    ) -> Result<CudaStorage<T>> {
        let g = Geometry::new(x.1.dims(), w.1.dims(), args);
        let (p, taps, kg, rows) = (g.positions(), g.taps(), g.kg(), g.rows());
        let out_len = if input { x.1.numel() } else { w.1.numel() };
        // Nothing to sum: zeros (an empty output, or no output positions).
        if out_len == 0 || g.n * g.c_out * p == 0 {
            return self.full(out_len, T::zero());
        }
        // Every element is written: by `col2im`, or by the first product.
        let out = self.ctx().storage::<T>(out_len)?;
        // dy as [N, C_out, OH * OW]: in place when its positions merge.
        let gl = grad.1;
        let mut g_copy = None;
        let (gb, gl3) = match gl.reshape(&[g.n, g.c_out, p]) {
            Some(l) => (grad.0, l),
            None => {
                let c = g_copy.insert(self.contiguous(grad.0, gl)?);
                (&*c, Layout::contiguous(&[g.n, g.c_out, p]))
            }
        };
        let (gsn, gsc, gsp) = (gl3.strides()[0], gl3.strides()[1], gl3.strides()[2]);
        let mut w_copy = None;
        let (wb, w_off) = dense(self, w.0, w.1, &mut w_copy)?;
        let chunk = g.chunk::<T>();
        let cols = self.ctx().storage::<T>(chunk * rows * p)?;
        for first in (0..g.n).step_by(chunk) {
            let images = chunk.min(g.n - first);
            let dy_at = |j: usize| gl3.offset() + (first + j) * gsn;
            if input {
                // dcols = Wᵀ · dy, then each input element gathers its taps.
                if g.groups == 1 {
                    let lw = Layout::new(vec![images, taps, kg], vec![0, 1, taps], w_off);
                    let lg = Layout::new(vec![images, kg, p], vec![gsn, gsc, gsp], dy_at(0));
                    gemm_into(
                        self,
                        (wb, &lw),
                        (gb, &lg),
                        cols.device_ptr(),
                        T::one(),
                        T::zero(),
                    )?;
                } else {
                    let lw = Layout::new(vec![g.groups, taps, kg], vec![kg * taps, 1, taps], w_off);
                    for j in 0..images {
                        let lg =
                            Layout::new(vec![g.groups, kg, p], vec![kg * gsc, gsc, gsp], dy_at(j));
                        let at = cols.ptr_at(j * rows * p);
                        gemm_into(self, (wb, &lw), (gb, &lg), at, T::one(), T::zero())?;
                    }
                }
                let image = g.c_in * g.h * g.w;
                let meta = g.meta(images * image, [0; 4], args);
                let dst = out.ptr_at(first * image);
                self.launch_cols::<T>("_col2im", (dst, cols.device_ptr()), &meta)?;
            } else {
                // dw[g] += dy[n, g] · cols[n, g]ᵀ, image by image.
                self.im2col(x, &g, args, (first, images), &cols)?;
                for j in 0..images {
                    let lg = Layout::new(vec![g.groups, kg, p], vec![kg * gsc, gsc, gsp], dy_at(j));
                    let lc =
                        Layout::new(vec![g.groups, p, taps], vec![taps * p, 1, p], j * rows * p);
                    let beta = if first + j == 0 { T::zero() } else { T::one() };
                    gemm_into(
                        self,
                        (gb, &lg),
                        (&cols, &lc),
                        out.device_ptr(),
                        T::one(),
                        beta,
                    )?;
                }
            }
        }
        Ok(out)
    }
}
