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

/// The batch of a key or value `kv` that query batch `b` of `q` reads:
/// `b` itself, or under grouped-query attention (`q` `[outer, inner, ..]`,
/// `kv` `[outer, inner / g, ..]`) batch `(b / inner, b % inner / g)`.
#[inline(always)]
fn kv_batch<X, Y>(q: &View<'_, X>, kv: &View<'_, Y>, b: usize) -> usize {
    let (qd, kd) = (q.layout.dims(), kv.layout.dims());
    if qd.len() == 4 && kd.len() == 4 && qd[1] != kd[1] && kd[1] > 0 {
        let (inner, kinner) = (qd[1], kd[1]);
        (b / inner) * kinner + (b % inner) / (inner / kinner)
    } else {
        b
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
/// `[batch, L, S]`; returns the contiguous `[batch, L, Ev]` result and,
/// when `want_lse`, the `[batch, L]` log-sum-exp of each row's scores
/// (`-inf` for a row without keys; empty otherwise).
pub(crate) fn attention<U: CpuFloat>(
    q: View<'_, U>,
    k: View<'_, U>,
    v: View<'_, U>,
    mask: Option<(Mask<'_, U>, &Layout)>,
    causal: bool,
    scale: f64,
    want_lse: bool,
) -> (Vec<U>, Vec<f32>) {
    let [batch, l, _] = q.shape();
    let [_, _, ev] = v.shape();
    let zero = U::from_acc(<U::Acc as Real>::ZERO);
    let mut out = vec![zero; batch * l * ev];
    let mut lse = vec![0f32; if want_lse { batch * l } else { 0 }];
    let scale = <U::Acc as Real>::from_f64(scale);
    // One task per (batch, block of queries): its output rows and, when
    // asked for, their log-sum-exps.
    let mut tasks = Vec::new();
    let (mut orest, mut lrest) = (&mut out[..], &mut lse[..]);
    for b in 0..batch {
        for i0 in (0..l).step_by(BQ) {
            let n = BQ.min(l - i0);
            let (o, r) = std::mem::take(&mut orest).split_at_mut(n * ev);
            orest = r;
            let (ls, r) = std::mem::take(&mut lrest).split_at_mut(if want_lse { n } else { 0 });
            lrest = r;
            tasks.push((b, i0, n, o, ls));
        }
    }
    par::for_each_mut(&mut tasks, &|(b, i0, n, o, ls)| {
        block(q, k, v, mask.as_ref(), causal, scale, *b, *i0, *n, o, ls)
    });
    (out, lse)
}

/// The `n` output rows `i0..` of batch `b`, and their log-sum-exps
/// when `lse` is not empty.
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
    n: usize,
    out: &mut [U],
    lse: &mut [f32],
) {
    let [_, _, e] = q.shape();
    let [_, s, _] = k.shape();
    let [_, _, ev] = v.shape();
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
    let (kb, vb) = (kv_batch(&q, &k, b), kv_batch(&q, &v, b));
    for j0 in (0..end).step_by(BK) {
        let nb = BK.min(end - j0);
        let ka = k.rows(kb, j0, nb, U::to_acc);
        let va = v.rows(vb, j0, nb, U::to_acc);
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
    if !lse.is_empty() {
        for r in 0..n {
            lse[r] = if sum[r] == zero {
                f32::NEG_INFINITY
            } else {
                (m[r] + sum[r].ln()).as_f64() as f32
            };
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

/// The score of query row `qa` (row `i` of batch `b`) against key row
/// `ka` (row `j`): `scale * q.k` plus the mask, `-inf` where the key is
/// left out.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn score<U: CpuFloat>(
    qa: &[U::Acc],
    ka: &[U::Acc],
    mask: Option<&(Mask<'_, U>, &Layout)>,
    causal: bool,
    scale: U::Acc,
    b: usize,
    i: usize,
    j: usize,
) -> U::Acc {
    let neg_inf = <U::Acc as Real>::from_f64(f64::NEG_INFINITY);
    if causal && j > i {
        return neg_inf;
    }
    let d = dot(qa, ka) * scale;
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
}

/// The gradients of [`attention`] with respect to `q`, `k` and `v`
/// (contiguous `[batch, L, E]`, `[batch, S, E]`, `[batch, S, Ev]`, one
/// batch per batch of the output even where an operand's batch stride is
/// 0), given its output `o` and the output's gradient `dout` (`[batch, L,
/// Ev]`) and, if saved, the forward's `[batch, L]` log-sum-exps (else
/// recomputed in at least f32). FlashAttention-2's order: `D_i = dO_i .
/// O_i`, then the weights `P = exp(S - lse)` recomputed block by block,
/// once per block of queries for `dQ = dS K` and once per block of keys
/// for `dV = P^T dO` and `dK = dS^T Q`, `dS = P * (dO V^T - D)`; each
/// gradient row is summed by one task, so the result does not depend on
/// the thread count. A key scored `-inf` takes no part: a row without
/// keys has zero gradients.
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
pub(crate) fn attention_backward<U: CpuFloat>(
    q: View<'_, U>,
    k: View<'_, U>,
    v: View<'_, U>,
    o: View<'_, U>,
    dout: View<'_, U>,
    lse: Option<&[f32]>,
    mask: Option<(Mask<'_, U>, &Layout)>,
    causal: bool,
    scale: f64,
) -> (Vec<U>, Vec<U>, Vec<U>) {
    let [batch, l, e] = q.shape();
    let [_, s, _] = k.shape();
    let [_, _, ev] = v.shape();
    let zero_u = U::from_acc(<U::Acc as Real>::ZERO);
    let (mut dq, mut dk, mut dv) = (
        vec![zero_u; batch * l * e],
        vec![zero_u; batch * s * e],
        vec![zero_u; batch * s * ev],
    );
    if batch == 0 || l == 0 || s == 0 {
        return (dq, dk, dv);
    }
    let scale = <U::Acc as Real>::from_f64(scale);
    let mask = mask.as_ref();
    let zero = <U::Acc as Real>::ZERO;
    let neg_inf = <U::Acc as Real>::from_f64(f64::NEG_INFINITY);
    // Per row: D_i and the log-sum-exp.
    let mut stats = vec![(zero, zero); batch * l];
    par::chunks_mut(&mut stats, l, &|b, st| {
        for (i, (d, m)) in st.iter_mut().enumerate() {
            let oa = o.rows(b, i, 1, U::to_acc);
            let ga = dout.rows(b, i, 1, U::to_acc);
            *d = dot(&oa, &ga);
            *m = match lse {
                Some(x) => <U::Acc as Real>::from_f64(f64::from(x[b * l + i])),
                None => {
                    let qa = q.rows(b, i, 1, U::to_acc);
                    let end = if causal { s.min(i + 1) } else { s };
                    let sc: Vec<U::Acc> = (0..end)
                        .map(|j| {
                            let ka = k.rows(b, j, 1, U::to_acc);
                            score(&qa, &ka, mask, causal, scale, b, i, j)
                        })
                        .collect();
                    let mut mx = neg_inf;
                    for &x in &sc {
                        if x > mx {
                            mx = x;
                        }
                    }
                    let mut sum = zero;
                    for &x in &sc {
                        if x != neg_inf {
                            sum = sum + (x - mx).exp();
                        }
                    }
                    if sum == zero {
                        neg_inf
                    } else {
                        mx + sum.ln()
                    }
                }
            };
        }
    });
    let stats = &stats;
    // dS of query row `i` (rows `qa`, `ga`) against key `j` (`ka`, `va`),
    // and the weight P: `None` where the key takes no part.
    let ds = |qa: &[U::Acc],
              ga: &[U::Acc],
              ka: &[U::Acc],
              va: &[U::Acc],
              b: usize,
              i: usize,
              j: usize|
     -> Option<(U::Acc, U::Acc)> {
        let x = score(qa, ka, mask, causal, scale, b, i, j);
        if x == neg_inf {
            return None;
        }
        let (d, m) = stats[b * l + i];
        let p = (x - m).exp();
        Some((p * (dot(ga, va) - d), p))
    };
    // dQ: one task per (batch, block of queries).
    if e > 0 {
        par::chunks_mut(&mut dq, l * e, &|b, dqb| {
            par::chunks_mut(dqb, BQ * e, &|qb, rows| {
                let i0 = qb * BQ;
                let n = rows.len() / e;
                let qa = q.rows(b, i0, n, U::to_acc);
                let ga = dout.rows(b, i0, n, U::to_acc);
                let end = if causal { s.min(i0 + n) } else { s };
                let mut acc = vec![zero; n * e];
                for j0 in (0..end).step_by(BK) {
                    let nb = BK.min(end - j0);
                    let ka = k.rows(b, j0, nb, U::to_acc);
                    let va = v.rows(b, j0, nb, U::to_acc);
                    for r in 0..n {
                        let a = &mut acc[r * e..(r + 1) * e];
                        for c in 0..nb {
                            let kc = &ka[c * e..(c + 1) * e];
                            let Some((g, _)) = ds(
                                &qa[r * e..(r + 1) * e],
                                &ga[r * ev..(r + 1) * ev],
                                kc,
                                &va[c * ev..(c + 1) * ev],
                                b,
                                i0 + r,
                                j0 + c,
                            ) else {
                                continue;
                            };
                            for (x, &y) in a.iter_mut().zip(kc) {
                                *x = *x + g * y;
                            }
                        }
                    }
                }
                for (x, &a) in rows.iter_mut().zip(&acc) {
                    *x = U::from_acc(a * scale);
                }
            })
        });
    }
    // dK and dV: one task per (batch, block of keys).
    let mut kv: Vec<(usize, usize, usize, &mut [U], &mut [U])> = Vec::new();
    let (mut krest, mut vrest) = (&mut dk[..], &mut dv[..]);
    for b in 0..batch {
        for j0 in (0..s).step_by(BK) {
            let nb = BK.min(s - j0);
            let (dkb, r) = std::mem::take(&mut krest).split_at_mut(nb * e);
            krest = r;
            let (dvb, r) = std::mem::take(&mut vrest).split_at_mut(nb * ev);
            vrest = r;
            kv.push((b, j0, nb, dkb, dvb));
        }
    }
    par::for_each_mut(&mut kv, &|(b, j0, nb, dkb, dvb)| {
        let (b, j0, nb) = (*b, *j0, *nb);
        let ka = k.rows(b, j0, nb, U::to_acc);
        let va = v.rows(b, j0, nb, U::to_acc);
        let (mut ak, mut av) = (vec![zero; nb * e], vec![zero; nb * ev]);
        // Under `causal`, queries before the block's first key see none
        // of its keys.
        let start = if causal { j0.min(l) } else { 0 };
        for i0 in (start..l).step_by(BQ) {
            let n = BQ.min(l - i0);
            let qa = q.rows(b, i0, n, U::to_acc);
            let ga = dout.rows(b, i0, n, U::to_acc);
            for r in 0..n {
                let (qr, gr) = (&qa[r * e..(r + 1) * e], &ga[r * ev..(r + 1) * ev]);
                for c in 0..nb {
                    let Some((g, p)) = ds(
                        qr,
                        gr,
                        &ka[c * e..(c + 1) * e],
                        &va[c * ev..(c + 1) * ev],
                        b,
                        i0 + r,
                        j0 + c,
                    ) else {
                        continue;
                    };
                    for (x, &y) in ak[c * e..(c + 1) * e].iter_mut().zip(qr) {
                        *x = *x + g * y;
                    }
                    for (x, &y) in av[c * ev..(c + 1) * ev].iter_mut().zip(gr) {
                        *x = *x + p * y;
                    }
                }
            }
        }
        for (x, &a) in dkb.iter_mut().zip(&ak) {
            *x = U::from_acc(a * scale);
        }
        for (x, &a) in dvb.iter_mut().zip(&av) {
            *x = U::from_acc(a);
        }
    });
    (dq, dk, dv)
}
