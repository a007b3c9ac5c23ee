//! `conv2d` (and `conv1d`, a height of 1) and its gradients on the CPU:
//! im2col, then the CPU's one `gemm` ([`matmul`](super::matmul::matmul))
//! batched over the groups. f16 and bf16 are widened to f32 first, so
//! every sum accumulates in f32 and is rounded once.

use super::copy::cast;
use super::matmul::{matmul, Operand};
use crate::dtype::{DType, Is};
use crate::error::Result;
use crate::layout::Layout;
use half::{bf16, f16};
use tensorfn_core::ops::conv::{out_size, ConvArgs};

/// The sizes of one convolution: input `[n, c, h, w]`, weight `[co, cg,
/// kh, kw]`, output `[n, co, oh, ow]`, `groups` groups.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry {
    pub(crate) x: [usize; 4],
    pub(crate) w: [usize; 4],
    pub(crate) out: [usize; 4],
    pub(crate) args: ConvArgs,
}

impl Geometry {
    /// The geometry of input dims `x` and weight dims `w` (4-D each, the
    /// rule already checked).
    pub(crate) fn new(x: &[usize], w: &[usize], args: ConvArgs) -> Self {
        let x = [x[0], x[1], x[2], x[3]];
        let w = [w[0], w[1], w[2], w[3]];
        let o = |i: usize| {
            out_size(
                x[2 + i],
                w[2 + i],
                args.padding[i],
                args.stride[i],
                args.dilation[i],
            )
            .unwrap_or(0)
        };
        Geometry {
            x,
            w,
            out: [x[0], w[0], o(0), o(1)],
            args,
        }
    }

    /// Rows of a group's column matrix: `cg * kh * kw`.
    fn k(&self) -> usize {
        self.w[1] * self.w[2] * self.w[3]
    }

    /// Output positions per image: `oh * ow`.
    fn p(&self) -> usize {
        self.out[2] * self.out[3]
    }

    /// For each column row `(ci, u, v)` and output position, the input
    /// element it reads in image `img`, or `None` in the padding; calls
    /// `f(column index, input index)`.
    fn taps(&self, img: usize, mut f: impl FnMut(usize, usize)) {
        let [_, c, h, w] = self.x;
        let [_, _, kh, kw] = self.w;
        let [_, _, oh, ow] = self.out;
        let a = &self.args;
        let p = self.p();
        for ci in 0..c {
            for u in 0..kh {
                for v in 0..kw {
                    let row = ((ci * kh + u) * kw + v) * p;
                    for i in 0..oh {
                        let y = (i * a.stride[0] + u * a.dilation[0]).wrapping_sub(a.padding[0]);
                        if y >= h {
                            continue;
                        }
                        let base = ((img * c + ci) * h + y) * w;
                        for j in 0..ow {
                            let x =
                                (j * a.stride[1] + v * a.dilation[1]).wrapping_sub(a.padding[1]);
                            if x < w {
                                f(row + i * ow + j, base + x);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Image `img`'s columns: `[groups, k, p]` (the channels of group `g`
    /// are rows `g * k ..`), zero in the padding.
    fn im2col<T: DType>(&self, x: &[T], img: usize) -> Vec<T> {
        let mut cols = vec![T::zero(); self.x[1] * self.w[2] * self.w[3] * self.p()];
        self.taps(img, |col, src| cols[col] = x[src]);
        cols
    }
}

/// The float types the products run in.
trait Acc: DType + std::ops::AddAssign {}
impl Acc for f32 {}
impl Acc for f64 {}

/// Runs `f` on contiguous copies of `xs` in the type products run in
/// (`T` for f32/f64, f32 for f16/bf16) and returns its result as `T`.
fn widened<T: DType>(
    xs: &[(&[T], &Layout)],
    f32_fn: impl FnOnce(&[Vec<f32>]) -> Result<Vec<f32>>,
    f64_fn: impl FnOnce(&[Vec<f64>]) -> Result<Vec<f64>>,
) -> Result<Vec<T>> {
    if <T as Is<f64>>::IS {
        let v: Vec<Vec<f64>> = xs.iter().map(|(d, l)| cast::<T, f64>(d, l)).collect();
        let out = f64_fn(&v)?;
        Ok(super::typed::vec::<f64, T>(out))
    } else if <T as Is<f32>>::IS || <T as Is<f16>>::IS || <T as Is<bf16>>::IS {
        let v: Vec<Vec<f32>> = xs.iter().map(|(d, l)| cast::<T, f32>(d, l)).collect();
        let out = f32_fn(&v)?;
        Ok(cast::<f32, T>(&out, &Layout::contiguous(&[out.len()])))
    } else {
        unreachable!("conv2d of `{}` (floats only)", T::KIND.name())
    }
}

/// `conv2d` of `x` (`[N, C_in, H, W]`, any strides) with `w` and the
/// optional `bias`: a contiguous `[N, C_out, OH, OW]` buffer.
pub(crate) fn conv2d<T: DType>(
    (x, lx): (&[T], &Layout),
    (w, lw): (&[T], &Layout),
    bias: Option<(&[T], &Layout)>,
    args: &ConvArgs,
) -> Result<Vec<T>> {
    let geo = Geometry::new(lx.dims(), lw.dims(), *args);
    let mut xs = vec![(x, lx), (w, lw)];
    xs.extend(bias);
    widened(
        &xs,
        |v| forward::<f32>(&geo, &v[0], &v[1], v.get(2)),
        |v| forward::<f64>(&geo, &v[0], &v[1], v.get(2)),
    )
}

fn forward<T: Acc>(geo: &Geometry, x: &[T], w: &[T], bias: Option<&Vec<T>>) -> Result<Vec<T>> {
    let [n, co, _, _] = geo.out;
    let g = geo.args.groups;
    let (og, k, p) = (co / g, geo.k(), geo.p());
    let per = co * p;
    let mut out = vec![T::zero(); n * per];
    let lw = Layout::contiguous(&[g, og, k]);
    let lc = Layout::contiguous(&[g, k, p]);
    // The bias broadcast along the positions: `[g, og, p]`, strides `[og, 1, 0]`.
    let lb = Layout::new(vec![g, og, p], vec![og, 1, 0], 0);
    for (img, dst) in out.chunks_mut(per.max(1)).enumerate().take(n) {
        let cols = geo.im2col(x, img);
        let y = matmul(
            Operand {
                data: w,
                layout: &lw,
            },
            Operand {
                data: &cols,
                layout: &lc,
            },
            bias.map(|b| Operand {
                data: b,
                layout: &lb,
            }),
            T::one(),
            T::one(),
        )?;
        dst.copy_from_slice(&y);
    }
    Ok(out)
}

/// The gradient of [`conv2d`] with respect to its input (`input: true`,
/// a contiguous buffer of `x`'s dims) or its weight (of `w`'s dims),
/// given `grad` of the output's dims.
pub(crate) fn conv2d_backward<T: DType>(
    (x, lx): (&[T], &Layout),
    (w, lw): (&[T], &Layout),
    (g, lg): (&[T], &Layout),
    args: &ConvArgs,
    input: bool,
) -> Result<Vec<T>> {
    let geo = Geometry::new(lx.dims(), lw.dims(), *args);
    if input {
        widened(
            &[(w, lw), (g, lg)],
            |v| grad_input::<f32>(&geo, &v[0], &v[1]),
            |v| grad_input::<f64>(&geo, &v[0], &v[1]),
        )
    } else {
        widened(
            &[(x, lx), (g, lg)],
            |v| grad_weight::<f32>(&geo, &v[0], &v[1]),
            |v| grad_weight::<f64>(&geo, &v[0], &v[1]),
        )
    }
}

/// Per image, `W^T @ g` (the columns' gradient), then col2im: each column
/// entry added into the input element it was read from.
fn grad_input<T: Acc>(geo: &Geometry, w: &[T], g: &[T]) -> Result<Vec<T>> {
    let [n, c, h, wi] = geo.x;
    let groups = geo.args.groups;
    let (og, k, p) = (geo.out[1] / groups, geo.k(), geo.p());
    let mut gx = vec![T::zero(); n * c * h * wi];
    // `w` as `[g, k, og]`: each group's `[og, k]` block transposed.
    let lwt = Layout::new(vec![groups, k, og], vec![og * k, 1, k], 0);
    let lg = Layout::contiguous(&[groups, og, p]);
    let per = geo.out[1] * p;
    for img in 0..n {
        let gi = &g[img * per..(img + 1) * per];
        let cols = matmul(
            Operand {
                data: w,
                layout: &lwt,
            },
            Operand {
                data: gi,
                layout: &lg,
            },
            None,
            T::one(),
            T::zero(),
        )?;
        geo.taps(img, |col, dst| gx[dst] += cols[col]);
    }
    Ok(gx)
}

/// The sum over images of `g @ columns^T`, one `[og, k]` block per group.
fn grad_weight<T: Acc>(geo: &Geometry, x: &[T], g: &[T]) -> Result<Vec<T>> {
    let n = geo.x[0];
    let groups = geo.args.groups;
    let (og, k, p) = (geo.out[1] / groups, geo.k(), geo.p());
    let lg = Layout::contiguous(&[groups, og, p]);
    let lct = Layout::new(vec![groups, p, k], vec![k * p, 1, p], 0);
    let lacc = Layout::contiguous(&[groups, og, k]);
    let per = geo.out[1] * p;
    let mut acc = vec![T::zero(); groups * og * k];
    for img in 0..n {
        let cols = geo.im2col(x, img);
        acc = matmul(
            Operand {
                data: &g[img * per..(img + 1) * per],
                layout: &lg,
            },
            Operand {
                data: &cols,
                layout: &lct,
            },
            Some(Operand {
                data: &acc,
                layout: &lacc,
            }),
            T::one(),
            T::one(),
        )?;
    }
    Ok(acc)
}
