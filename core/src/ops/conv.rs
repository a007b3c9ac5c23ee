//! `conv2d(input, weight, bias, stride, padding, dilation, groups)` and
//! `conv1d`, PyTorch's `F.conv2d`/`F.conv1d`: the options both the macro
//! and the runtime read, and the `f64` direct convolution every back-end
//! is tested against. `conv1d` is `conv2d` over a height of 1 (its options
//! are the width's, the height's are 1, 0 and 1).

/// The options of a convolution, per spatial dim `[height, width]` (a
/// `conv1d` uses the width's and leaves the height's at 1, 0, 1).
///
/// ```
/// use tensorfn_core::ops::conv::ConvArgs;
/// let a = ConvArgs { stride: [2, 2], padding: [1, 1], ..Default::default() };
/// assert_eq!((a.dilation, a.groups), ([1, 1], 1));
/// assert_eq!(ConvArgs::conv1d(2, 1, 1, 1).stride, [1, 2]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvArgs {
    /// The step between windows (PyTorch's `stride`), at least 1.
    pub stride: [usize; 2],
    /// Zeros added on both sides (PyTorch's `padding`).
    pub padding: [usize; 2],
    /// The step between kernel taps (PyTorch's `dilation`), at least 1.
    pub dilation: [usize; 2],
    /// Channel groups (PyTorch's `groups`): `groups = C_in` is depthwise.
    pub groups: usize,
}

impl Default for ConvArgs {
    fn default() -> Self {
        ConvArgs {
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
        }
    }
}

impl ConvArgs {
    /// The options of a `conv1d` as those of a `conv2d` over a height of 1.
    ///
    /// ```
    /// use tensorfn_core::ops::conv::ConvArgs;
    /// let a = ConvArgs::conv1d(1, 2, 3, 4);
    /// assert_eq!((a.stride, a.padding, a.dilation, a.groups), ([1, 1], [0, 2], [1, 3], 4));
    /// ```
    pub const fn conv1d(stride: usize, padding: usize, dilation: usize, groups: usize) -> Self {
        ConvArgs {
            stride: [1, stride],
            padding: [0, padding],
            dilation: [1, dilation],
            groups,
        }
    }

    /// The first option out of range (a stride, dilation or group count
    /// of 0), as a sentence.
    ///
    /// ```
    /// use tensorfn_core::ops::conv::ConvArgs;
    /// assert!(ConvArgs::default().check("conv2d").is_ok());
    /// let bad = ConvArgs { stride: [0, 1], ..Default::default() };
    /// assert!(bad.check("conv2d").unwrap_err().contains("`stride` must be at least 1"));
    /// ```
    pub fn check(&self, op: &str) -> Result<(), String> {
        for (name, v) in [("stride", self.stride), ("dilation", self.dilation)] {
            if v.contains(&0) {
                return Err(format!("`{op}`: `{name}` must be at least 1, found {v:?}"));
            }
        }
        if self.groups == 0 {
            return Err(format!("`{op}`: `groups` must be at least 1, found 0"));
        }
        Ok(())
    }
}

/// One output size of a convolution along a spatial dim of `size` with a
/// kernel of `kernel` taps: `(size + 2p - d(k-1) - 1) / s + 1`, or the
/// numerator when it is negative (no window fits).
///
/// ```
/// use tensorfn_core::ops::conv::out_size;
/// assert_eq!(out_size(5, 3, 1, 2, 1), Ok(3));
/// assert_eq!(out_size(5, 7, 0, 1, 1), Err(-2));
/// ```
pub fn out_size(
    size: usize,
    kernel: usize,
    padding: usize,
    stride: usize,
    dilation: usize,
) -> Result<usize, i64> {
    let num = size as i64 + 2 * padding as i64 - dilation as i64 * (kernel as i64 - 1) - 1;
    if num < 0 || kernel == 0 {
        Err(num)
    } else {
        Ok(num as usize / stride.max(1) + 1)
    }
}

/// The direct convolution in `f64`, the reference of every back-end:
/// `x` is a contiguous `[N, C_in, H, W]`, `w` a contiguous `[C_out,
/// C_in / groups, kH, kW]`, `bias` `[C_out]`; returns the contiguous
/// `[N, C_out, OH, OW]` result and its dims. Shapes must fit (the rule
/// checks them first).
///
/// ```
/// use tensorfn_core::ops::conv::{conv2d_f64, ConvArgs};
/// let x = [1.0, 2.0, 3.0, 4.0];
/// let (y, dims) = conv2d_f64(&x, [1, 1, 2, 2], &[1.0], [1, 1, 1, 1], Some(&[0.5]), &ConvArgs::default());
/// assert_eq!((y, dims), (vec![1.5, 2.5, 3.5, 4.5], [1, 1, 2, 2]));
/// ```
pub fn conv2d_f64(
    x: &[f64],
    xd: [usize; 4],
    w: &[f64],
    wd: [usize; 4],
    bias: Option<&[f64]>,
    a: &ConvArgs,
) -> (Vec<f64>, [usize; 4]) {
    let [n, c, h, wi] = xd;
    let [co, cg, kh, kw] = wd;
    let oh = out_size(h, kh, a.padding[0], a.stride[0], a.dilation[0]).unwrap_or(0);
    let ow = out_size(wi, kw, a.padding[1], a.stride[1], a.dilation[1]).unwrap_or(0);
    let og = co / a.groups;
    let mut y = vec![0.0; n * co * oh * ow];
    for b in 0..n {
        for o in 0..co {
            let g = o / og;
            for i in 0..oh {
                for j in 0..ow {
                    let mut s = bias.map_or(0.0, |bs| bs[o]);
                    for ci in 0..cg {
                        let cin = g * cg + ci;
                        for u in 0..kh {
                            let hy =
                                (i * a.stride[0] + u * a.dilation[0]) as i64 - a.padding[0] as i64;
                            // A tap in the padding reads a zero (which
                            // an infinite weight turns into NaN).
                            let hin = hy >= 0 && hy < h as i64;
                            for v in 0..kw {
                                let wx = (j * a.stride[1] + v * a.dilation[1]) as i64
                                    - a.padding[1] as i64;
                                let xv = if hin && wx >= 0 && wx < wi as i64 {
                                    x[((b * c + cin) * h + hy as usize) * wi + wx as usize]
                                } else {
                                    0.0
                                };
                                s += xv * w[((o * cg + ci) * kh + u) * kw + v];
                            }
                        }
                    }
                    y[((b * co + o) * oh + i) * ow + j] = s;
                }
            }
        }
    }
    (y, [n, co, oh, ow])
}
