//! `conv2d` and `conv1d` (PyTorch's `F.conv2d`/`F.conv1d`) and their
//! gradients. The CPU runs im2col and `gemm`; other devices run the
//! backend's `conv2d`/`conv2d_backward`. `conv1d` is `conv2d` over a
//! height of 1 (a view, no copy).

use super::dispatch::dispatch;
use super::output::{output, output_in};
use crate::device::Device;
use crate::dtype::FloatDType;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::shape::{Dim, Shape};
use crate::storage::Storage;
use crate::tensor::Tensor;
pub use tensorfn_core::ops::conv::ConvArgs;
use tensorfn_core::rules;
use tensorfn_kernels::ReduceOp;

/// The options of [`Tensor::conv1d`], PyTorch's `F.conv1d` keywords.
///
/// ```
/// use tensorfn_runtime::Conv1dArgs;
/// let a = Conv1dArgs { stride: 2, ..Default::default() };
/// assert_eq!((a.padding, a.dilation, a.groups), (0, 1, 1));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Conv1dArgs {
    /// The step between windows, at least 1.
    pub stride: usize,
    /// Zeros added on both ends.
    pub padding: usize,
    /// The step between kernel taps, at least 1.
    pub dilation: usize,
    /// Channel groups (`groups = C_in` is depthwise).
    pub groups: usize,
}

impl Default for Conv1dArgs {
    fn default() -> Self {
        Conv1dArgs {
            stride: 1,
            padding: 0,
            dilation: 1,
            groups: 1,
        }
    }
}

impl From<Conv1dArgs> for ConvArgs {
    fn from(a: Conv1dArgs) -> Self {
        ConvArgs::conv1d(a.stride, a.padding, a.dilation, a.groups)
    }
}

/// `l` seen with `spatial` spatial dims as 4-D: a `conv1d`'s `[N, C, L]`
/// gains a height of 1.
fn as_4d(l: &Layout, spatial: usize) -> Layout {
    if spatial == 2 {
        return l.clone();
    }
    let (mut dims, mut strides) = (l.dims().to_vec(), l.strides().to_vec());
    dims.insert(2, 1);
    strides.insert(2, 0);
    Layout::new(dims, strides, l.offset())
}

fn args_check(op: &str, args: &ConvArgs) -> Result<()> {
    args.check(op)
        .map_err(|m| Error::shape(op, "`stride`, `dilation` and `groups` of at least 1", m))
}

/// The forward of either op: the result's storage and layout (the
/// backend's order: channels-last for a channels-last input).
fn forward<D: Device, T: FloatDType, SX: Shape, SW: Shape, SB: Shape>(
    op: &str,
    x: &Tensor<D, T, SX>,
    weight: &Tensor<D, T, SW>,
    bias: Option<&Tensor<D, T, SB>>,
    args: &ConvArgs,
    spatial: usize,
) -> Result<(Storage<T>, Layout)> {
    args_check(op, args)?;
    let dims = rules::conv(
        op,
        ("input", x.dims()),
        ("weight", weight.dims()),
        bias.map(|b| ("bias", b.dims())),
        args,
        spatial,
    )?;
    let (lx, lw) = (as_4d(&x.layout, spatial), as_4d(&weight.layout, spatial));
    let storage = dispatch!(D, |be| be.wrap(be.conv2d(
        (be.buf(&x.storage), &lx),
        (be.buf(&weight.storage), &lw),
        bias.map(|b| (be.buf(&b.storage), &b.layout)),
        args,
    )?));
    let y = from_4d(
        lx.result_like(&crate::backend::conv2d_dims(&lx, &lw, args)),
        spatial,
    );
    debug_assert_eq!(y.dims(), dims.as_slice());
    Ok((storage, y))
}

/// A 4-D result layout of [`as_4d`]'s operands seen with `spatial`
/// spatial dims again: a `conv1d`'s loses the height of 1.
fn from_4d(y: Layout, spatial: usize) -> Layout {
    if spatial == 2 {
        return y;
    }
    let (mut d, mut st) = (y.dims().to_vec(), y.strides().to_vec());
    d.remove(2);
    st.remove(2);
    Layout::new(d, st, 0)
}

/// One gradient of either op (`input`: the input's, else the weight's):
/// its storage and layout, that of its operand's
/// [`Layout::result_like`] (channels-last for a channels-last operand).
fn backward<D: Device, T: FloatDType, SX: Shape, SW: Shape, SG: Shape>(
    op: &str,
    x: &Tensor<D, T, SX>,
    weight: &Tensor<D, T, SW>,
    grad_output: &Tensor<D, T, SG>,
    args: &ConvArgs,
    spatial: usize,
    input: bool,
) -> Result<(Storage<T>, Layout)> {
    args_check(op, args)?;
    let dims = rules::conv(
        op,
        ("input", x.dims()),
        ("weight", weight.dims()),
        None,
        args,
        spatial,
    )?;
    if grad_output.dims() != dims.as_slice() {
        return Err(Error::shape(
            op,
            format!("`grad_output` of the output's dims {dims:?}"),
            format!("{:?}", grad_output.dims()),
        ));
    }
    let (lx, lw) = (as_4d(&x.layout, spatial), as_4d(&weight.layout, spatial));
    let lg = as_4d(&grad_output.layout, spatial);
    let storage = dispatch!(D, |be| be.wrap(be.conv2d_backward(
        (be.buf(&x.storage), &lx),
        (be.buf(&weight.storage), &lw),
        (be.buf(&grad_output.storage), &lg),
        args,
        input,
    )?));
    let of = if input { &lx } else { &lw };
    Ok((storage, from_4d(of.result_like(of.dims()), spatial)))
}

/// The bias's gradient: `grad_output` (`[N, C_out, spatial..]`) summed
/// over all but the channels.
fn bias_grad<D: Device, T: FloatDType, SG: Shape, CO: Dim>(
    g: &Tensor<D, T, SG>,
    spatial: usize,
) -> Result<Tensor<D, T, (CO,)>> {
    let mut dims = g.dims().to_vec();
    if dims.len() != 2 + spatial {
        return Err(Error::shape(
            "conv_backward",
            format!("`grad_output` of {} dims", 2 + spatial),
            format!("{dims:?}"),
        ));
    }
    let storage = dispatch!(D, |be| {
        let mut buf = be.reduce(ReduceOp::Sum, be.buf(&g.storage), &g.layout, 1 + spatial)?;
        dims.remove(1 + spatial);
        for d in (2..1 + spatial).rev().chain([0]) {
            buf = be.reduce(ReduceOp::Sum, &buf, &Layout::contiguous(&dims), d)?;
            dims.remove(d);
        }
        be.wrap(buf)
    });
    output(storage, &dims)
}

impl<D: Device, T: FloatDType, N: Dim, C: Dim, H: Dim, W: Dim> Tensor<D, T, (N, C, H, W)> {
    /// The 2-D convolution of `self` (`[N, C_in, H, W]`) with `weight`
    /// (`[C_out, C_in / groups, kH, kW]`) plus `bias` (`[C_out]`), as
    /// PyTorch's `F.conv2d(input, weight, bias, stride, padding,
    /// dilation, groups)` (a cross-correlation; `args` holds the options
    /// per `[height, width]`). The result `SO` is `[N, C_out, OH, OW]`
    /// with `OH = (H + 2p - d(kH-1) - 1) / s + 1` (likewise `OW`), checked
    /// at run time: a size below 1, a channel count that does not match
    /// `weight` or `groups`, or a bias of another length is an `Err`
    /// naming the operand and how the size was computed.
    ///
    /// Any strides. A channels-last input (NHWC memory, e.g. from
    /// [`contiguous_channels_last`](Tensor::contiguous_channels_last))
    /// gives a channels-last result, as PyTorch's `channels_last` memory
    /// format; any other input a contiguous one. Sums accumulate in f32
    /// for f16 and bf16 (f64 for f64). On the CPU: im2col, then one
    /// `gemm` per image batched over the groups.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape, ConvArgs};
    /// let x = Tensor::<Cpu, f32, shape![1, 1, 3, 3]>::from_vec((0..9).map(|v| v as f32).collect()).unwrap();
    /// let w = Tensor::<Cpu, f32, shape![1, 1, 2, 2]>::ones().unwrap();
    /// let b = Tensor::<Cpu, f32, shape![1]>::from_vec(vec![0.5]).unwrap();
    /// let y: Tensor<Cpu, f32, shape![1, 1, 2, 2]> = x.conv2d(&w, Some(&b), ConvArgs::default()).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![8.5, 12.5, 20.5, 24.5]);
    /// let a = ConvArgs { stride: [2, 2], padding: [1, 1], ..Default::default() };
    /// let y: Tensor<Cpu, f32, shape![1, 1, 2, 2]> = x.conv2d(&w, None, a).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![0., 3., 9., 24.]);
    /// let big = Tensor::<Cpu, f32, shape![1, 1, 4, 4]>::ones().unwrap();
    /// let e = x.conv2d::<shape![1, 1, 1, 1], _, _, _, _>(&big, None, Default::default()).unwrap_err();
    /// assert!(e.to_string().contains("output height of `input` is (3 + 2·0 - 1·(4-1) - 1)/1 + 1 = 0"));
    /// ```
    pub fn conv2d<SO: Shape, CO: Dim, CG: Dim, KH: Dim, KW: Dim>(
        &self,
        weight: &Tensor<D, T, (CO, CG, KH, KW)>,
        bias: Option<&Tensor<D, T, (CO,)>>,
        args: ConvArgs,
    ) -> Result<Tensor<D, T, SO>> {
        let (storage, layout) = forward("conv2d", self, weight, bias, &args, 2)?;
        output_in(storage, layout)
    }

    /// The gradients of [`conv2d`](Self::conv2d) for the gradient
    /// `grad_output` of its result: `(grad_input, grad_weight,
    /// grad_bias)`, as PyTorch's autograd gives them (`grad_bias` is
    /// `grad_output` summed over `N`, `OH` and `OW`). `grad_input` is the
    /// columns' gradient `W^T g` put back by col2im (a sum per input
    /// element, no atomics), `grad_weight` `g` times the columns of the
    /// input, summed over the images. Each gradient takes its operand's
    /// memory format: channels-last for a channels-last input (or
    /// weight), else contiguous, as the forward's result.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f64, shape![1, 1, 2, 2]>::from_vec(vec![1., 2., 3., 4.]).unwrap();
    /// let w = Tensor::<Cpu, f64, shape![1, 1, 2, 2]>::from_vec(vec![1., 0., 0., -1.]).unwrap();
    /// let g = Tensor::<Cpu, f64, shape![1, 1, 1, 1]>::from_vec(vec![2.]).unwrap();
    /// let (gx, gw, gb) = x.conv2d_backward(&w, &g, Default::default()).unwrap();
    /// assert_eq!(gx.to_vec().unwrap(), vec![2., 0., 0., -2.]);
    /// assert_eq!(gw.to_vec().unwrap(), vec![2., 4., 6., 8.]);
    /// assert_eq!(gb.to_vec().unwrap(), vec![2.]);
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn conv2d_backward<SG: Shape, CO: Dim, CG: Dim, KH: Dim, KW: Dim>(
        &self,
        weight: &Tensor<D, T, (CO, CG, KH, KW)>,
        grad_output: &Tensor<D, T, SG>,
        args: ConvArgs,
    ) -> Result<(Self, Tensor<D, T, (CO, CG, KH, KW)>, Tensor<D, T, (CO,)>)> {
        let gx = self.conv2d_backward_input(weight, grad_output, args)?;
        let gw = self.conv2d_backward_weight(weight, grad_output, args)?;
        let gb = bias_grad(grad_output, 2)?;
        Ok((gx, gw, gb))
    }

    /// The `grad_input` of [`conv2d_backward`](Self::conv2d_backward)
    /// alone (what `#[grad]` calls for the input).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![1, 1, 2, 2]>::zeros().unwrap();
    /// let w = Tensor::<Cpu, f32, shape![1, 1, 1, 1]>::from_vec(vec![3.]).unwrap();
    /// let g = Tensor::<Cpu, f32, shape![1, 1, 2, 2]>::ones().unwrap();
    /// assert_eq!(x.conv2d_backward_input(&w, &g, Default::default()).unwrap().to_vec().unwrap(), vec![3.; 4]);
    /// ```
    pub fn conv2d_backward_input<SG: Shape, CO: Dim, CG: Dim, KH: Dim, KW: Dim>(
        &self,
        weight: &Tensor<D, T, (CO, CG, KH, KW)>,
        grad_output: &Tensor<D, T, SG>,
        args: ConvArgs,
    ) -> Result<Self> {
        let (s, l) = backward("conv2d_backward", self, weight, grad_output, &args, 2, true)?;
        output_in(s, l)
    }

    /// The `grad_weight` of [`conv2d_backward`](Self::conv2d_backward)
    /// alone (what `#[grad]` calls for the weight).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 1, 1, 1]>::from_vec(vec![1., 2.]).unwrap();
    /// let w = Tensor::<Cpu, f32, shape![1, 1, 1, 1]>::zeros().unwrap();
    /// let g = Tensor::<Cpu, f32, shape![2, 1, 1, 1]>::ones().unwrap();
    /// assert_eq!(x.conv2d_backward_weight(&w, &g, Default::default()).unwrap().to_vec().unwrap(), vec![3.]);
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn conv2d_backward_weight<SG: Shape, CO: Dim, CG: Dim, KH: Dim, KW: Dim>(
        &self,
        weight: &Tensor<D, T, (CO, CG, KH, KW)>,
        grad_output: &Tensor<D, T, SG>,
        args: ConvArgs,
    ) -> Result<Tensor<D, T, (CO, CG, KH, KW)>> {
        let (s, l) = backward(
            "conv2d_backward",
            self,
            weight,
            grad_output,
            &args,
            2,
            false,
        )?;
        output_in(s, l)
    }
}

impl<D: Device, T: FloatDType, N: Dim, C: Dim, L: Dim> Tensor<D, T, (N, C, L)> {
    /// The 1-D convolution of `self` (`[N, C_in, L]`) with `weight`
    /// (`[C_out, C_in / groups, kL]`) plus `bias` (`[C_out]`), as
    /// PyTorch's `F.conv1d`: [`conv2d`](Tensor::conv2d) over a height of
    /// 1, `OL = (L + 2p - d(kL-1) - 1) / s + 1`, the same errors.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape, Conv1dArgs};
    /// let x = Tensor::<Cpu, f32, shape![1, 1, 4]>::from_vec(vec![1., 2., 3., 4.]).unwrap();
    /// let w = Tensor::<Cpu, f32, shape![1, 1, 2]>::from_vec(vec![1., -1.]).unwrap();
    /// let y: Tensor<Cpu, f32, shape![1, 1, 3]> = x.conv1d(&w, None, Conv1dArgs { padding: 1, stride: 2, ..Default::default() }).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![-1., -1., 4.]);
    /// ```
    pub fn conv1d<SO: Shape, CO: Dim, CG: Dim, K: Dim>(
        &self,
        weight: &Tensor<D, T, (CO, CG, K)>,
        bias: Option<&Tensor<D, T, (CO,)>>,
        args: Conv1dArgs,
    ) -> Result<Tensor<D, T, SO>> {
        let (storage, layout) = forward("conv1d", self, weight, bias, &args.into(), 1)?;
        output_in(storage, layout)
    }

    /// The gradients of [`conv1d`](Self::conv1d): `(grad_input,
    /// grad_weight, grad_bias)`, as [`conv2d_backward`](Tensor::conv2d_backward).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f64, shape![1, 1, 2]>::from_vec(vec![1., 2.]).unwrap();
    /// let w = Tensor::<Cpu, f64, shape![1, 1, 1]>::from_vec(vec![3.]).unwrap();
    /// let g = Tensor::<Cpu, f64, shape![1, 1, 2]>::ones().unwrap();
    /// let (gx, gw, gb) = x.conv1d_backward(&w, &g, Default::default()).unwrap();
    /// assert_eq!((gx.to_vec().unwrap(), gw.to_vec().unwrap(), gb.to_vec().unwrap()), (vec![3., 3.], vec![3.], vec![2.]));
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn conv1d_backward<SG: Shape, CO: Dim, CG: Dim, K: Dim>(
        &self,
        weight: &Tensor<D, T, (CO, CG, K)>,
        grad_output: &Tensor<D, T, SG>,
        args: Conv1dArgs,
    ) -> Result<(Self, Tensor<D, T, (CO, CG, K)>, Tensor<D, T, (CO,)>)> {
        let gx = self.conv1d_backward_input(weight, grad_output, args)?;
        let gw = self.conv1d_backward_weight(weight, grad_output, args)?;
        let gb = bias_grad(grad_output, 1)?;
        Ok((gx, gw, gb))
    }

    /// The `grad_input` of [`conv1d_backward`](Self::conv1d_backward) alone.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![1, 1, 2]>::zeros().unwrap();
    /// let w = Tensor::<Cpu, f32, shape![1, 1, 1]>::from_vec(vec![2.]).unwrap();
    /// let g = Tensor::<Cpu, f32, shape![1, 1, 2]>::ones().unwrap();
    /// assert_eq!(x.conv1d_backward_input(&w, &g, Default::default()).unwrap().to_vec().unwrap(), vec![2., 2.]);
    /// ```
    pub fn conv1d_backward_input<SG: Shape, CO: Dim, CG: Dim, K: Dim>(
        &self,
        weight: &Tensor<D, T, (CO, CG, K)>,
        grad_output: &Tensor<D, T, SG>,
        args: Conv1dArgs,
    ) -> Result<Self> {
        let a = args.into();
        let (s, l) = backward("conv1d_backward", self, weight, grad_output, &a, 1, true)?;
        output_in(s, l)
    }

    /// The `grad_weight` of [`conv1d_backward`](Self::conv1d_backward) alone.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![1, 1, 2]>::from_vec(vec![1., 2.]).unwrap();
    /// let w = Tensor::<Cpu, f32, shape![1, 1, 1]>::zeros().unwrap();
    /// let g = Tensor::<Cpu, f32, shape![1, 1, 2]>::ones().unwrap();
    /// assert_eq!(x.conv1d_backward_weight(&w, &g, Default::default()).unwrap().to_vec().unwrap(), vec![3.]);
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn conv1d_backward_weight<SG: Shape, CO: Dim, CG: Dim, K: Dim>(
        &self,
        weight: &Tensor<D, T, (CO, CG, K)>,
        grad_output: &Tensor<D, T, SG>,
        args: Conv1dArgs,
    ) -> Result<Tensor<D, T, (CO, CG, K)>> {
        let a = args.into();
        let (s, l) = backward("conv1d_backward", self, weight, grad_output, &a, 1, false)?;
        output_in(s, l)
    }
}
