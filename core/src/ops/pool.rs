//! 2-D pooling over the last two dims of `[N, C, H, W]` (or `[C, H, W]`):
//! PyTorch's `max_pool2d`, `avg_pool2d` and `adaptive_avg_pool2d`, their
//! options ([`Pool2d`]), the output size rule and the `f64` reference of
//! one plane, forward and backward, that every back-end is tested against
//! (the CPU runs it).
//!
//! ```
//! use tensorfn_core::ops::pool::Pool2d;
//! let p = Pool2d::max(3).stride(2).padding(1);
//! assert_eq!(p.output_dims([112, 112]).unwrap(), [56, 56]);
//! assert_eq!(Pool2d::adaptive_avg([1, 1]).output_dims([7, 7]).unwrap(), [1, 1]);
//! ```

use std::fmt;

/// Which pooling.
///
/// ```
/// use tensorfn_core::ops::pool::PoolKind;
/// assert_eq!(PoolKind::Max.name(), "max_pool2d");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolKind {
    /// `max_pool2d`: the largest element of each window (NaN if any).
    Max,
    /// `avg_pool2d`: the mean of each window.
    Avg,
    /// `adaptive_avg_pool2d`: the mean of windows that tile the input into
    /// `output_size`.
    AdaptiveAvg,
}

impl PoolKind {
    /// The op's name.
    ///
    /// ```
    /// assert_eq!(tensorfn_core::ops::pool::PoolKind::AdaptiveAvg.name(), "adaptive_avg_pool2d");
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            PoolKind::Max => "max_pool2d",
            PoolKind::Avg => "avg_pool2d",
            PoolKind::AdaptiveAvg => "adaptive_avg_pool2d",
        }
    }
}

/// A pooling and its options, with PyTorch's names and defaults: `stride`
/// is `kernel_size`, `padding` 0, `dilation` 1, `ceil_mode` false,
/// `count_include_pad` true, no `divisor_override`. Pairs are `(H, W)`.
///
/// ```
/// use tensorfn_core::ops::pool::{Pool2d, PoolKind};
/// let p = Pool2d::avg([2, 3]).count_include_pad(false);
/// assert_eq!(p.kind, PoolKind::Avg);
/// assert_eq!(p.stride, [2, 3]);
/// assert_eq!(p.output_dims([4, 9]).unwrap(), [2, 3]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pool2d {
    /// Which pooling.
    pub kind: PoolKind,
    /// The window (`max_pool2d`, `avg_pool2d`).
    pub kernel_size: [usize; 2],
    /// The step between windows.
    pub stride: [usize; 2],
    /// Implicit padding on both sides (-inf for max, 0 for avg).
    pub padding: [usize; 2],
    /// The step between a window's taps (`max_pool2d`).
    pub dilation: [usize; 2],
    /// Output sizes rounded up rather than down; the last window must
    /// start inside the input or its left padding.
    pub ceil_mode: bool,
    /// `avg_pool2d` divides by the whole window, padding included.
    pub count_include_pad: bool,
    /// `avg_pool2d` divides by this instead of the window's size.
    pub divisor_override: Option<usize>,
    /// `adaptive_avg_pool2d`'s output size.
    pub output_size: [usize; 2],
}

/// A size given as one number for both dims or as `[H, W]`.
///
/// ```
/// use tensorfn_core::ops::pool::Pair;
/// assert_eq!(2.pair(), [2, 2]);
/// assert_eq!([2, 3].pair(), [2, 3]);
/// ```
pub trait Pair {
    /// The `[H, W]` pair.
    fn pair(self) -> [usize; 2];
}

impl Pair for usize {
    fn pair(self) -> [usize; 2] {
        [self, self]
    }
}

impl Pair for [usize; 2] {
    fn pair(self) -> [usize; 2] {
        self
    }
}

impl Pool2d {
    const fn new(kind: PoolKind, k: [usize; 2]) -> Pool2d {
        Pool2d {
            kind,
            kernel_size: k,
            stride: k,
            padding: [0, 0],
            dilation: [1, 1],
            ceil_mode: false,
            count_include_pad: true,
            divisor_override: None,
            output_size: [0, 0],
        }
    }

    /// `max_pool2d` with `kernel_size` (and `stride = kernel_size`).
    ///
    /// ```
    /// use tensorfn_core::ops::pool::Pool2d;
    /// assert_eq!(Pool2d::max(2).stride, [2, 2]);
    /// ```
    pub fn max(kernel_size: impl Pair) -> Pool2d {
        Pool2d::new(PoolKind::Max, kernel_size.pair())
    }

    /// `avg_pool2d` with `kernel_size` (and `stride = kernel_size`).
    ///
    /// ```
    /// use tensorfn_core::ops::pool::Pool2d;
    /// assert!(Pool2d::avg(2).count_include_pad);
    /// ```
    pub fn avg(kernel_size: impl Pair) -> Pool2d {
        Pool2d::new(PoolKind::Avg, kernel_size.pair())
    }

    /// `adaptive_avg_pool2d` to `output_size` (`1`: one value per plane,
    /// ResNet's head).
    ///
    /// ```
    /// use tensorfn_core::ops::pool::Pool2d;
    /// assert_eq!(Pool2d::adaptive_avg(1).output_size, [1, 1]);
    /// ```
    pub fn adaptive_avg(output_size: impl Pair) -> Pool2d {
        let mut p = Pool2d::new(PoolKind::AdaptiveAvg, [1, 1]);
        p.output_size = output_size.pair();
        p
    }

    /// With `stride`.
    ///
    /// ```
    /// assert_eq!(tensorfn_core::ops::pool::Pool2d::max(3).stride(1).stride, [1, 1]);
    /// ```
    pub fn stride(mut self, stride: impl Pair) -> Pool2d {
        self.stride = stride.pair();
        self
    }

    /// With `padding`.
    ///
    /// ```
    /// assert_eq!(tensorfn_core::ops::pool::Pool2d::max(3).padding(1).padding, [1, 1]);
    /// ```
    pub fn padding(mut self, padding: impl Pair) -> Pool2d {
        self.padding = padding.pair();
        self
    }

    /// With `dilation` (`max_pool2d`).
    ///
    /// ```
    /// assert_eq!(tensorfn_core::ops::pool::Pool2d::max(3).dilation(2).dilation, [2, 2]);
    /// ```
    pub fn dilation(mut self, dilation: impl Pair) -> Pool2d {
        self.dilation = dilation.pair();
        self
    }

    /// With `ceil_mode`.
    ///
    /// ```
    /// use tensorfn_core::ops::pool::Pool2d;
    /// assert_eq!(Pool2d::max(2).ceil_mode(true).output_dims([5, 5]).unwrap(), [3, 3]);
    /// ```
    pub fn ceil_mode(mut self, ceil_mode: bool) -> Pool2d {
        self.ceil_mode = ceil_mode;
        self
    }

    /// With `count_include_pad` (`avg_pool2d`).
    ///
    /// ```
    /// assert!(!tensorfn_core::ops::pool::Pool2d::avg(3).count_include_pad(false).count_include_pad);
    /// ```
    pub fn count_include_pad(mut self, count_include_pad: bool) -> Pool2d {
        self.count_include_pad = count_include_pad;
        self
    }

    /// With `divisor_override` (`avg_pool2d`).
    ///
    /// ```
    /// assert_eq!(tensorfn_core::ops::pool::Pool2d::avg(3).divisor_override(4).divisor_override, Some(4));
    /// ```
    pub fn divisor_override(mut self, divisor: usize) -> Pool2d {
        self.divisor_override = Some(divisor);
        self
    }

    /// Checks the options (positive sizes, `padding` at most half the
    /// window) and returns the output's `[H, W]` for an input's `[H, W]`,
    /// or why not, naming the dim and how its size was computed.
    ///
    /// ```
    /// use tensorfn_core::ops::pool::Pool2d;
    /// let e = Pool2d::max(7).output_dims([5, 5]).unwrap_err();
    /// assert!(e.to_string().contains("(5 + 2 * 0 - 1 * (7 - 1) - 1) / 7 + 1 = 0"), "{e}");
    /// assert!(Pool2d::max(2).padding(2).output_dims([8, 8]).is_err());
    /// ```
    pub fn output_dims(&self, input: [usize; 2]) -> Result<[usize; 2], PoolError> {
        let name = self.kind.name();
        let err = |dim: usize, message: String| Err(PoolError { dim, message });
        if self.kind == PoolKind::AdaptiveAvg {
            if let Some(a) = self.output_size.iter().position(|&o| o == 0) {
                return err(
                    a,
                    format!(
                        "`{name}` got an `output_size` of 0 for {}: give each at least 1",
                        AXES[a]
                    ),
                );
            }
            return Ok(self.output_size);
        }
        let mut out = [0; 2];
        for a in 0..2 {
            let (k, s, p, d) = (
                self.kernel_size[a],
                self.stride[a],
                self.padding[a],
                self.dilation[a],
            );
            for (what, v) in [("kernel_size", k), ("stride", s), ("dilation", d)] {
                if v == 0 {
                    return err(
                        a,
                        format!(
                            "`{name}` got a `{what}` of 0 for {}: it must be at least 1",
                            AXES[a]
                        ),
                    );
                }
            }
            if self.divisor_override == Some(0) {
                return err(
                    a,
                    format!("`{name}` got a `divisor_override` of 0: it must be at least 1"),
                );
            }
            if p > k / 2 {
                return err(
                    a,
                    format!(
                        "`{name}` got `padding` {p} for {} with `kernel_size` {k}: padding is at most half the window ({})",
                        AXES[a],
                        k / 2
                    ),
                );
            }
            let span = d * (k - 1) + 1;
            let room = (self.padded(a, input[a]) as i64) - span as i64;
            let q = if self.ceil_mode {
                (room + s as i64 - 1).div_euclid(s as i64)
            } else {
                room.div_euclid(s as i64)
            };
            let mut o = q + 1;
            // The last window must start inside the input or its left padding.
            if self.ceil_mode && o > 0 && (o - 1) * s as i64 >= (input[a] + p) as i64 {
                o -= 1;
            }
            if o < 1 {
                let rounding = if self.ceil_mode {
                    "rounded up"
                } else {
                    "rounded down"
                };
                return err(
                    a,
                    format!(
                        "`{name}` gives an output {} of {o}, computed as ({} + 2 * {p} - {d} * ({k} - 1) - 1) / {s} + 1 = {o} ({rounding}): the window is larger than the padded input; use a smaller `kernel_size` or `dilation`, or more `padding`",
                        AXES[a], input[a]
                    ),
                );
            }
            out[a] = o as usize;
        }
        Ok(out)
    }

    fn padded(&self, a: usize, n: usize) -> usize {
        n + 2 * self.padding[a]
    }
}

const AXES: [&str; 2] = ["the height (dim -2)", "the width (dim -1)"];

/// Why a pooling's options do not fit its input: the spatial dim (0 for
/// the height, 1 for the width) and a message.
///
/// ```
/// use tensorfn_core::ops::pool::Pool2d;
/// assert_eq!(Pool2d::max([2, 9]).output_dims([4, 4]).unwrap_err().dim, 1);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolError {
    /// 0 for the height, 1 for the width.
    pub dim: usize,
    /// What was expected, what was found and the fix.
    pub message: String,
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The taps of output position `o` along axis `a` of an input of length
/// `n`: `(first, end, step)`, inside `0..n`, and the divisor's share
/// along it (`avg_pool2d`: the window's length with its padding, clipped
/// to the padded input, or its taps without padding).
fn taps(p: &Pool2d, a: usize, o: usize, n: usize) -> (usize, usize, usize, usize, usize) {
    match p.kind {
        PoolKind::AdaptiveAvg => {
            let out = p.output_size[a];
            let start = o * n / out;
            let end = ((o + 1) * n).div_ceil(out);
            (start, end, 1, end - start, end - start)
        }
        PoolKind::Max => {
            let (s, pad, d, k) = (p.stride[a], p.padding[a], p.dilation[a], p.kernel_size[a]);
            let mut start = (o * s) as i64 - pad as i64;
            let end = (start + ((k - 1) * d + 1) as i64).min(n as i64);
            while start < 0 {
                start += d as i64;
            }
            let end = end.max(start);
            (start as usize, end as usize, d, 0, 0)
        }
        PoolKind::Avg => {
            let (s, pad, k) = (p.stride[a], p.padding[a], p.kernel_size[a]);
            let start = (o * s) as i64 - pad as i64;
            let end = (start + k as i64).min((n + pad) as i64);
            let with_pad = (end - start) as usize;
            let (start, end) = (start.max(0), end.min(n as i64));
            let end = end.max(start);
            (
                start as usize,
                end as usize,
                1,
                with_pad,
                (end - start) as usize,
            )
        }
    }
}

/// One window's taps along both axes and its `avg_pool2d` divisor.
struct Window {
    h: (usize, usize, usize),
    w: (usize, usize, usize),
    divisor: f64,
}

fn window(p: &Pool2d, [oh, ow]: [usize; 2], [h, w]: [usize; 2]) -> Window {
    let (h0, h1, hs, hp, hn) = taps(p, 0, oh, h);
    let (w0, w1, ws, wp, wn) = taps(p, 1, ow, w);
    let divisor = match (p.kind, p.divisor_override) {
        (PoolKind::Avg, Some(d)) => d as f64,
        (PoolKind::Avg, None) if p.count_include_pad => (hp * wp) as f64,
        _ => (hn * wn) as f64,
    };
    Window {
        h: (h0, h1, hs),
        w: (w0, w1, ws),
        divisor,
    }
}

/// The position (`row * W + col`) of the element `max_pool2d` takes from
/// a window, as PyTorch: the first largest, a NaN over any number (the
/// last NaN), and the window's first tap when every element is `-inf`.
fn arg_max(plane: &[f64], wdt: usize, win: &Window) -> Option<usize> {
    if win.h.0 >= win.h.1 || win.w.0 >= win.w.1 {
        return None;
    }
    let (mut best, mut top) = (win.h.0 * wdt + win.w.0, f64::NEG_INFINITY);
    for r in (win.h.0..win.h.1).step_by(win.h.2) {
        for c in (win.w.0..win.w.1).step_by(win.w.2) {
            let v = plane[r * wdt + c];
            if v > top || v.is_nan() {
                (best, top) = (r * wdt + c, v);
            }
        }
    }
    Some(best)
}

/// One plane (`[H, W]`, row-major) of pooling `p`, in `f64`: the
/// `[OH, OW]` output, row-major. A window with no taps (all padding) is
/// `-inf` for max, 0 for avg.
///
/// ```
/// use tensorfn_core::ops::pool::{pool2d_plane_f64, Pool2d};
/// let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0];
/// assert_eq!(pool2d_plane_f64(&Pool2d::max(2), &x, [3, 3], [1, 1]), vec![5.0]);
/// assert_eq!(pool2d_plane_f64(&Pool2d::avg(2).stride(1), &x, [3, 3], [2, 2]), vec![3.0, 4.0, 6.0, 7.0]);
/// assert_eq!(pool2d_plane_f64(&Pool2d::adaptive_avg(1), &x, [3, 3], [1, 1]), vec![5.0]);
/// ```
pub fn pool2d_plane_f64(p: &Pool2d, x: &[f64], hw: [usize; 2], out: [usize; 2]) -> Vec<f64> {
    let mut y = Vec::with_capacity(out[0] * out[1]);
    for oh in 0..out[0] {
        for ow in 0..out[1] {
            let win = window(p, [oh, ow], hw);
            y.push(match p.kind {
                PoolKind::Max => arg_max(x, hw[1], &win).map_or(f64::NEG_INFINITY, |i| x[i]),
                _ => {
                    if win.h.0 >= win.h.1 || win.w.0 >= win.w.1 {
                        0.0
                    } else {
                        let mut s = 0.0;
                        for r in win.h.0..win.h.1 {
                            for c in win.w.0..win.w.1 {
                                s += x[r * hw[1] + c];
                            }
                        }
                        s / win.divisor
                    }
                }
            });
        }
    }
    y
}

/// The gradient of [`pool2d_plane_f64`] with respect to its plane `x`,
/// for `g`, the gradient of its output: max sends each output's gradient
/// to the element it took (recomputed from `x`), avg spreads it over the
/// window's taps divided by the divisor, as PyTorch.
///
/// ```
/// use tensorfn_core::ops::pool::{pool2d_plane_backward_f64, Pool2d};
/// let x = [1.0, 4.0, 3.0, 2.0];
/// assert_eq!(pool2d_plane_backward_f64(&Pool2d::max(2), &x, [2, 2], &[1.0], [1, 1]), vec![0.0, 1.0, 0.0, 0.0]);
/// assert_eq!(pool2d_plane_backward_f64(&Pool2d::avg(2), &x, [2, 2], &[1.0], [1, 1]), vec![0.25; 4]);
/// ```
pub fn pool2d_plane_backward_f64(
    p: &Pool2d,
    x: &[f64],
    hw: [usize; 2],
    g: &[f64],
    out: [usize; 2],
) -> Vec<f64> {
    let mut dx = vec![0.0; hw[0] * hw[1]];
    for oh in 0..out[0] {
        for ow in 0..out[1] {
            let gv = g[oh * out[1] + ow];
            let win = window(p, [oh, ow], hw);
            match p.kind {
                PoolKind::Max => {
                    if let Some(i) = arg_max(x, hw[1], &win) {
                        dx[i] += gv;
                    }
                }
                _ => {
                    let share = gv / win.divisor;
                    for r in win.h.0..win.h.1 {
                        for c in win.w.0..win.w.1 {
                            dx[r * hw[1] + c] += share;
                        }
                    }
                }
            }
        }
    }
    dx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_sizes_follow_pytorch() {
        // torch.nn.functional.max_pool2d(torch.zeros(1, 1, n, n), ...).shape
        let cases: &[(Pool2d, usize, usize)] = &[
            (Pool2d::max(3).stride(2).padding(1), 112, 56),
            (Pool2d::max(2).ceil_mode(true), 5, 3),
            (Pool2d::max(3).stride(2).ceil_mode(true), 6, 3),
            (Pool2d::max(2).stride(2).padding(1).ceil_mode(true), 4, 3),
            (Pool2d::max(3).dilation(2), 7, 1),
            (Pool2d::avg(3).stride(2).padding(1).ceil_mode(true), 6, 4),
            (Pool2d::avg(2).stride(3).ceil_mode(true), 4, 2),
        ];
        for (p, n, want) in cases {
            assert_eq!(
                p.output_dims([*n, *n]).unwrap(),
                [*want, *want],
                "{p:?} {n}"
            );
        }
    }

    #[test]
    fn max_takes_nan_and_the_first_of_ties() {
        let x = [1.0, 1.0, 0.0, 1.0];
        let g = pool2d_plane_backward_f64(&Pool2d::max(2), &x, [2, 2], &[1.0], [1, 1]);
        assert_eq!(g, vec![1.0, 0.0, 0.0, 0.0]);
        let x = [1.0, f64::NAN, 5.0, 0.0];
        assert!(pool2d_plane_f64(&Pool2d::max(2), &x, [2, 2], [1, 1])[0].is_nan());
        let x = [f64::NEG_INFINITY; 4];
        let g = pool2d_plane_backward_f64(&Pool2d::max(2), &x, [2, 2], &[1.0], [1, 1]);
        assert_eq!(g, vec![1.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn adaptive_windows_overlap_as_pytorch() {
        // Input 5 to output 3: windows [0, 2), [1, 4), [3, 5).
        let x: Vec<f64> = (0..5).map(f64::from).collect();
        let p = Pool2d::adaptive_avg([1, 3]);
        assert_eq!(
            pool2d_plane_f64(&p, &x, [1, 5], [1, 3]),
            vec![0.5, 2.0, 3.5]
        );
    }
}
