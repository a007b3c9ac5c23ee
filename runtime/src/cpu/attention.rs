//! Scaled dot-product attention on the CPU, in FlashAttention's order: a
//! block of queries meets the keys one block at a time, and an online
//! softmax (a running max and sum per query, the accumulated values
//! rescaled when the max grows) means no `L x S` matrix is ever held; only
//! one block of scores. Tasks are (batch, query block) pairs, in at least
//! f32.

use super::par;
use super::scalar::{CpuFloat, Real};
use crate::layout::Layout;

/// Queries per task.
const BQ: usize = 32;
/// Keys per block.
const BK: usize = 64;

/// The mask, on the host: `bool` (false = the key is left out) or added
/// to the scores.
pub(crate) enum Mask<'a, U> {
    /// True where the key takes part.
    Bool(&'a [bool]),
    /// Added to the scores.
    Add(&'a [U]),
}

/// A `[batch, rows, cols]` operand: its buffer and layout.
#[derive(Clone, Copy)]
pub(crate) struct View<'a, X> {
    pub(crate) data: &'a [X],
    pub(crate) layout: &'a Layout,
}

impl<X: Copy> View<'_, X> {
    /// `[batch, rows, cols]` of a `[batch, rows, cols]` or `[outer, inner,
    /// rows, cols]` view.
    fn shape(&self) -> [usize; 3] {
        let d = self.layout.dims();
        let r = d.len();
        [d[..r - 2].iter().product(), d[r - 2], d[r - 1]]
    }

    #[inline(always)]
    fn at(&self, b: usize, i: usize, j: usize) -> X {
        let (d, s) = (self.layout.dims(), self.layout.strides());
        let base = match s.len() {
            4 => (b / d[1]) * s[0] + (b % d[1]) * s[1],
            _ => b * s[0],
        };
        let r = s.len();
        self.data[self.layout.offset() + base + i * s[r - 2] + j * s[r - 1]]
    }

    /// Rows `r0..r0 + n` of batch `b` as a dense `[n, cols]` block.
    fn rows<A>(&self, b: usize, r0: usize, n: usize, f: impl Fn(X) -> A) -> Vec<A> {
        let [_, _, cols] = self.shape();
        let mut out = Vec::with_capacity(n * cols);
        for i in r0..r0 + n {
            out.extend((0..cols).map(|j| f(self.at(b, i, j))));
        }
        out
    }
}

/// `a . b` with eight partial sums, so that the loop vectorises.
#[inline(always)]
fn dot<A: Real>(a: &[A], b: &[A]) -> A {
    let mut part = [A::ZERO; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            part[l] = part[l] + x[l] * y[l];
        }
    }
    let mut s =
        ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
    for (x, y) in ar.iter().zip(br) {
        s = s + *x * *y;
    }
    s
}

/// See [`Backend::attention`](crate::backend::Backend::attention): `q`
/// `[batch, L, E]`, `k` `[batch, S, E]`, `v` `[batch, S, Ev]`, the mask
/// `[batch, L, S]`; returns the contiguous `[batch, L, Ev]` result.
pub(crate) fn attention<U: CpuFloat>(
    q: View<'_, U>,
    k: View<'_, U>,
    v: View<'_, U>,
    mask: Option<(Mask<'_, U>, &Layout)>,
    causal: bool,
    scale: f64,
) -> Vec<U> {
    let [batch, l, _] = q.shape();
    let [_, _, ev] = v.shape();
    let zero = U::from_acc(<U::Acc as Real>::ZERO);
    let mut out = vec![zero; batch * l * ev];
    if out.is_empty() {
        return out;
    }
    let scale = <U::Acc as Real>::from_f64(scale);
    par::chunks_mut(&mut out, l * ev, &|b, ob| {
        par::chunks_mut(ob, BQ * ev, &|qb, rows| {
            block(q, k, v, mask.as_ref(), causal, scale, b, qb * BQ, rows)
        })
    });
    out
}

/// The output rows `i0..` (as many as `out` holds) of batch `b`.
#[allow(clippy::too_many_arguments)]
fn block<U: CpuFloat>(
    q: View<'_, U>,
    k: View<'_, U>,
    v: View<'_, U>,
    mask: Option<&(Mask<'_, U>, &Layout)>,
    causal: bool,
    scale: U::Acc,
    b: usize,
    i0: usize,
    out: &mut [U],
) {
    let [_, _, e] = q.shape();
    let [_, s, _] = k.shape();
    let [_, _, ev] = v.shape();
    let n = out.len() / ev;
    let neg_inf = <U::Acc as Real>::from_f64(f64::NEG_INFINITY);
    let (zero, one) = (<U::Acc as Real>::ZERO, <U::Acc as Real>::ONE);
    let qa = q.rows(b, i0, n, U::to_acc);
    let mut m = vec![neg_inf; n];
    let mut sum = vec![zero; n];
    let mut acc = vec![zero; n * ev];
    let mut sc = vec![zero; n * BK];
    // Keys past the last query's own position are masked for every row
    // of the block under `causal`.
    let end = if causal { s.min(i0 + n) } else { s };
    for j0 in (0..end).step_by(BK) {
        let nb = BK.min(end - j0);
        let ka = k.rows(b, j0, nb, U::to_acc);
        let va = v.rows(b, j0, nb, U::to_acc);
        for r in 0..n {
            let i = i0 + r;
            let srow = &mut sc[r * BK..r * BK + nb];
            for (c, x) in srow.iter_mut().enumerate() {
                let j = j0 + c;
                *x = if causal && j > i {
                    neg_inf
                } else {
                    let d = dot(&qa[r * e..(r + 1) * e], &ka[c * e..(c + 1) * e]) * scale;
                    match mask {
                        None => d,
                        Some((Mask::Bool(mb), ml)) => {
                            if (View {
                                data: mb,
                                layout: ml,
                            })
                            .at(b, i, j)
                            {
                                d
                            } else {
                                neg_inf
                            }
                        }
                        Some((Mask::Add(ma), ml)) => {
                            d + (View {
                                data: ma,
                                layout: ml,
                            })
                            .at(b, i, j)
                            .to_acc()
                        }
                    }
                };
            }
            // The online softmax: the new max, the old terms rescaled to it.
            let mut mb = m[r];
            for &x in srow.iter() {
                if x > mb {
                    mb = x;
                }
            }
            let alpha = if mb == m[r] { one } else { (m[r] - mb).exp() };
            m[r] = mb;
            let arow = &mut acc[r * ev..(r + 1) * ev];
            if alpha != one {
                sum[r] = sum[r] * alpha;
                for a in arow.iter_mut() {
                    *a = *a * alpha;
                }
            }
            for (c, &x) in srow.iter().enumerate() {
                // A key scored `-inf` (masked) takes no part, whatever
                // its value holds.
                if x == neg_inf {
                    continue;
                }
                let p = (x - mb).exp();
                sum[r] = sum[r] + p;
                for (a, &y) in arow.iter_mut().zip(&va[c * ev..(c + 1) * ev]) {
                    *a = *a + p * y;
                }
            }
        }
    }
    for r in 0..n {
        let inv = if sum[r] == zero { zero } else { one / sum[r] };
        for (o, &a) in out[r * ev..(r + 1) * ev]
            .iter_mut()
            .zip(&acc[r * ev..(r + 1) * ev])
        {
            *o = U::from_acc(a * inv);
        }
    }
}
