//! `conv2d` and its gradients on the GPU: cuDNN where it runs the
//! problem, the built-in kernels otherwise (`im2col.rs`: cuDNN missing,
//! turned off with [`set_cudnn_enabled`], or a problem it does not
//! support, such as an empty one).
//!
//! The activations go to cuDNN with their own strides, so an NCHW tensor
//! and a channels-last view of NHWC memory take the same call; the filter
//! is read as PyTorch's `[C_out, C_in / groups, kH, kW]` or as its
//! channels-last permutation without a copy (any other strides are made
//! contiguous first). The forward writes its result channels-last when
//! the input is (cuDNN's engines run NHWC fastest), else contiguous, as
//! the `Backend` contract says; each gradient likewise takes the order of
//! its operand (`dx` NHWC for an NHWC input, `dw` KRSC for a KRSC filter).

use super::alloc::CudaStorage;
use super::backend::CudaBackend;
use super::cudnn::{self, ConvProblem, FilterLayout, Outcome};
use super::tune::Switch;
use crate::backend::{conv2d_dims, in_layout};
use crate::dtype::FloatDType;
use crate::error::Result;
use crate::layout::Layout;
use tensorfn_core::ops::conv::ConvArgs;

static CUDNN: Switch = Switch::new("TENSORFN_CUDNN");

/// Whether GPU convolutions try cuDNN first (`true`, the default) or
/// always run the built-in kernels (im2col and cuBLAS on the GPU), as on
/// a machine without cuDNN. The environment variable `TENSORFN_CUDNN=0`
/// turns cuDNN off until this is called.
///
/// ```
/// use tensorfn_runtime::{cudnn_enabled, set_cudnn_enabled};
/// set_cudnn_enabled(false);
/// assert!(!cudnn_enabled());
/// set_cudnn_enabled(true);
/// assert!(cudnn_enabled());
/// ```
pub fn set_cudnn_enabled(on: bool) {
    CUDNN.set(on);
}

/// Whether GPU convolutions try cuDNN first (see [`set_cudnn_enabled`]).
///
/// ```
/// // On unless the program or TENSORFN_CUDNN=0 turns it off.
/// let on = tensorfn_runtime::cudnn_enabled();
/// assert_eq!(on, std::env::var("TENSORFN_CUDNN").map_or(true, |v| v.trim() != "0"));
/// ```
pub fn cudnn_enabled() -> bool {
    CUDNN.get()
}

/// A filter as cuDNN reads it: the address of its first element, how it
/// is laid out, and the contiguous copy that address is in, if one was
/// made (kept alive while cuDNN reads it).
struct Filter<T: FloatDType> {
    _copy: Option<CudaStorage<T>>,
    ptr: u64,
    layout: FilterLayout,
}

impl CudaBackend {
    /// `w` in a layout cuDNN takes: as it is when row-major KCRS or KRSC,
    /// else a contiguous copy.
    fn filter<T: FloatDType>(&self, w: (&CudaStorage<T>, &Layout)) -> Result<Filter<T>> {
        let (buf, l) = w;
        let d = l.dims();
        let krsc = [d[2] * d[3] * d[1], 1, d[3] * d[1], d[1]];
        let layout = if l.is_contiguous() {
            Some(FilterLayout::Kcrs)
        } else if l.strides() == krsc {
            Some(FilterLayout::Krsc)
        } else {
            None
        };
        Ok(match layout {
            Some(layout) => Filter {
                _copy: None,
                ptr: buf.ptr_at(l.offset()),
                layout,
            },
            None => {
                let c = crate::backend::Backend::contiguous(self, buf, l)?;
                Filter {
                    ptr: c.device_ptr(),
                    _copy: Some(c),
                    layout: FilterLayout::Kcrs,
                }
            }
        })
    }

    /// The cuDNN problem of `x` (`[N, C_in, H, W]`, its strides), a filter
    /// of `w_dims` and an output with `y_strides`.
    fn problem<T: FloatDType>(
        x: &Layout,
        w_dims: &[usize],
        w_layout: FilterLayout,
        y_strides: [usize; 4],
        args: &ConvArgs,
    ) -> ConvProblem {
        let (xd, xs) = (x.dims(), x.strides());
        ConvProblem {
            n: xd[0],
            c_in: xd[1],
            h: xd[2],
            w: xd[3],
            c_out: w_dims[0],
            kh: w_dims[2],
            kw: w_dims[3],
            pad: args.padding,
            stride: args.stride,
            dilation: args.dilation,
            groups: args.groups,
            x_strides: [xs[0], xs[1], xs[2], xs[3]],
            y_strides,
            w_layout,
            dtype: T::KIND,
            // As f32 products: exact unless TF32 is allowed.
            tf32: super::blas::allow_tf32(),
        }
    }

    /// [`Backend::conv2d`](crate::backend::Backend::conv2d) on the GPU.
    pub(crate) fn conv2d_gpu<T: FloatDType>(
        &self,
        x: (&CudaStorage<T>, &Layout),
        w: (&CudaStorage<T>, &Layout),
        bias: Option<(&CudaStorage<T>, &Layout)>,
        args: &ConvArgs,
    ) -> Result<CudaStorage<T>> {
        self.ctx().bind()?;
        let y_layout = x.1.result_like(&conv2d_dims(x.1, w.1, args));
        // The built-in kernels write row-major, then reorder.
        let builtin = || in_layout(self, self.conv2d_builtin(x, w, bias, args)?, &y_layout);
        if !cudnn_enabled() {
            return builtin();
        }
        let f = self.filter(w)?;
        let mut p = Self::problem::<T>(x.1, w.1.dims(), f.layout, [0; 4], args);
        let ys = y_layout.strides();
        p.y_strides = [ys[0], ys[1], ys[2], ys[3]];
        let y = self.ctx().storage::<T>(y_layout.numel())?;
        let xp = x.0.ptr_at(x.1.offset());
        if cudnn::conv_forward(self.ctx(), &p, xp, f.ptr, y.device_ptr(), 0.0)? != Outcome::Done {
            return builtin();
        }
        if let Some((b, lb)) = bias {
            let copy = match lb.is_contiguous() {
                true => None,
                false => Some(crate::backend::Backend::contiguous(self, b, lb)?),
            };
            let bp = copy
                .as_ref()
                .map_or_else(|| b.ptr_at(lb.offset()), |c| c.device_ptr());
            if cudnn::conv_add_bias(self.ctx(), &p, bp, y.device_ptr())? != Outcome::Done {
                return builtin();
            }
        }
        Ok(y)
    }

    /// [`Backend::conv2d_backward`](crate::backend::Backend::conv2d_backward)
    /// on the GPU.
    pub(crate) fn conv2d_backward_gpu<T: FloatDType>(
        &self,
        x: (&CudaStorage<T>, &Layout),
        w: (&CudaStorage<T>, &Layout),
        grad: (&CudaStorage<T>, &Layout),
        args: &ConvArgs,
        input: bool,
    ) -> Result<CudaStorage<T>> {
        self.ctx().bind()?;
        // The gradient's order: that of its operand (`Backend` contract).
        let of = if input { x.1 } else { w.1 };
        let out_layout = of.result_like(of.dims());
        // The built-in kernels write row-major, then reorder.
        let builtin = || {
            let out = self.conv2d_backward_builtin(x, w, grad, args, input)?;
            in_layout(self, out, &out_layout)
        };
        if !cudnn_enabled() {
            return builtin();
        }
        let gs = grad.1.strides();
        let gp = grad.0.ptr_at(grad.1.offset());
        let xp = x.0.ptr_at(x.1.offset());
        let done = if input {
            // dx: written by cuDNN with the strides it is given for x, so
            // the problem's x is dx's layout (NCHW or NHWC).
            let f = self.filter(w)?;
            let dx_layout = &out_layout;
            let p = Self::problem::<T>(
                dx_layout,
                w.1.dims(),
                f.layout,
                [gs[0], gs[1], gs[2], gs[3]],
                args,
            );
            let dx = self.ctx().storage::<T>(dx_layout.numel())?;
            let outcome =
                cudnn::conv_backward_data(self.ctx(), &p, gp, f.ptr, dx.device_ptr(), 0.0)?;
            (outcome == Outcome::Done).then_some(dx)
        } else {
            // dw: KRSC for a channels-last filter, else contiguous KCRS.
            let dw_layout = match out_layout.is_contiguous() {
                true => FilterLayout::Kcrs,
                false => FilterLayout::Krsc,
            };
            let p = Self::problem::<T>(
                x.1,
                w.1.dims(),
                dw_layout,
                [gs[0], gs[1], gs[2], gs[3]],
                args,
            );
            let dw = self.ctx().storage::<T>(w.1.numel())?;
            let outcome =
                cudnn::conv_backward_filter(self.ctx(), &p, xp, gp, dw.device_ptr(), 0.0)?;
            (outcome == Outcome::Done).then_some(dw)
        };
        match done {
            Some(out) => Ok(out),
            // cuDNN did not run it; the built-in kernels run every problem.
            None => builtin(),
        }
    }
}
