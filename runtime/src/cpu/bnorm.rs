//! `batch_norm` over the channel dim (dim 1) of `[N, C, *]`: each
//! channel's `N * prod(*)` elements gathered once, their mean and biased
//! variance taken in f64 by pairwise sums (two passes, the variance
//! around the mean, so large offsets do not cancel), then every element
//! normalised in f64 and rounded once to its dtype. The gradients take
//! the same statistics and per-channel sums.

use super::copy::gather;
use super::reduce::pairwise_sum;
use super::strided::PAR_THRESHOLD;
use crate::dtype::DType;
use crate::layout::Layout;

/// `x` gathered channel-major: channel `c`'s elements are
/// `[c * m .. (c + 1) * m]` in `(n, spatial)` order. Returns the data,
/// `(N, C, spatial)`.
fn channel_major<T: DType>(x: &[T], l: &Layout) -> (Vec<T>, [usize; 3]) {
    let dims = l.dims();
    let (n, c) = (dims[0], dims[1]);
    let s: usize = dims[2..].iter().product();
    let mut perm: Vec<usize> = (0..dims.len()).collect();
    perm.swap(0, 1);
    (gather(x, &l.permute(&perm)), [n, c, s])
}

/// A `[C]` operand in f64.
fn per_channel<T: DType>(v: Option<(&[T], &Layout)>) -> Option<Vec<f64>> {
    v.map(|(v, l)| gather(v, l).into_iter().map(|v| v.to_f64()).collect())
}

/// Mean and biased variance of one channel's elements (NaN when empty).
fn stats<T: DType>(xs: &[T]) -> (f64, f64) {
    let m = xs.len() as f64;
    let mean = pairwise_sum(xs, |v: T| v.to_f64()) / m;
    let var = pairwise_sum(xs, |v: T| {
        let d = v.to_f64() - mean;
        d * d
    }) / m;
    (mean, var)
}

/// Writes channel-major values back in `[N, C, spatial]` order.
fn to_nc<T: Copy>(cm: &[T], [n, c, s]: [usize; 3]) -> Vec<T> {
    let mut out = cm.to_vec();
    let m = n * s;
    for ch in 0..c {
        for b in 0..n {
            let src = &cm[ch * m + b * s..ch * m + (b + 1) * s];
            out[(b * c + ch) * s..(b * c + ch + 1) * s].copy_from_slice(src);
        }
    }
    out
}

/// `f(channel, its m outputs)` for each of `c` channels of the
/// channel-major `out`, on the rayon pool for large inputs; the results
/// in channel order.
fn per_channel_mut<T: Send, R: Send>(
    out: &mut [T],
    c: usize,
    m: usize,
    f: impl Fn(usize, &mut [T]) -> R + Sync,
) -> Vec<R> {
    use rayon::prelude::*;
    if m == 0 {
        return (0..c).map(|ch| f(ch, &mut [])).collect();
    }
    if out.len() >= PAR_THRESHOLD && c > 1 {
        out.par_chunks_mut(m)
            .enumerate()
            .map(|(ch, o)| f(ch, o))
            .collect()
    } else {
        out.chunks_mut(m)
            .enumerate()
            .map(|(ch, o)| f(ch, o))
            .collect()
    }
}

/// The forward of `batch_norm`: the output (contiguous, `x`'s dims) and,
/// in training with running statistics, their updated values
/// (`(1 - momentum) * running + momentum * batch`, the variance's batch
/// value unbiased by `m / (m - 1)`). In inference the running statistics
/// normalise. An empty batch leaves the running statistics as they are.
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
pub(crate) fn batch_norm<T: DType>(
    (x, l): (&[T], &Layout),
    weight: Option<(&[T], &Layout)>,
    bias: Option<(&[T], &Layout)>,
    running: Option<((&[T], &Layout), (&[T], &Layout))>,
    training: bool,
    momentum: f64,
    eps: f64,
) -> (Vec<T>, Option<(Vec<T>, Vec<T>)>) {
    let (xc, [n, c, s]) = channel_major(x, l);
    let m = n * s;
    let w = per_channel(weight);
    let b = per_channel(bias);
    let rm = per_channel(running.map(|(m, _)| m));
    let rv = per_channel(running.map(|(_, v)| v));
    let mut out = vec![T::from_f64(0.0); xc.len()];
    // Each channel: its statistics (the batch's in training), then its
    // elements normalised; returns the batch mean and biased variance.
    let channel = |ch: usize, out: &mut [T]| -> (f64, f64) {
        let xs = &xc[ch * m..(ch + 1) * m];
        let batch = if training {
            stats(xs)
        } else {
            (f64::NAN, f64::NAN)
        };
        // The running statistics exist in inference (checked by the ops
        // layer).
        let (mean, var) = if training {
            batch
        } else {
            (
                rm.as_ref().map_or(0.0, |v| v[ch]),
                rv.as_ref().map_or(1.0, |v| v[ch]),
            )
        };
        let scale = w.as_ref().map_or(1.0, |w| w[ch]) / (var + eps).sqrt();
        let shift = b.as_ref().map_or(0.0, |b| b[ch]);
        for (o, &v) in out.iter_mut().zip(xs) {
            *o = T::from_f64((v.to_f64() - mean) * scale + shift);
        }
        batch
    };
    let batch = per_channel_mut(&mut out, c, m, channel);
    let mut new_mean = Vec::with_capacity(c);
    let mut new_var = Vec::with_capacity(c);
    if let (true, Some(rm), Some(rv)) = (training, &rm, &rv) {
        let unbias = m as f64 / (m as f64 - 1.0);
        for (ch, (mean, var)) in batch.into_iter().enumerate() {
            new_mean.push(T::from_f64((1.0 - momentum) * rm[ch] + momentum * mean));
            new_var.push(T::from_f64(
                (1.0 - momentum) * rv[ch] + momentum * var * unbias,
            ));
        }
    }
    let updated = (training && running.is_some() && m > 0).then_some((new_mean, new_var));
    (to_nc(&out, [n, c, s]), updated)
}

/// The gradients of `batch_norm` for `grad_output` of `x`'s dims:
/// `(dx, dweight, dbias)`, `dx` contiguous of `x`'s dims, `dweight` and
/// `dbias` of `[C]` (computed whether or not the call has a weight or a
/// bias; a missing weight is 1). In training the batch statistics are
/// recomputed from `x` and `dx` is PyTorch's
/// `w * invstd / m * (m * g - sum(g) - xhat * sum(g * xhat))`; in
/// inference the running statistics are constants and
/// `dx = g * w * invstd`.
#[allow(clippy::type_complexity)]
pub(crate) fn batch_norm_backward<T: DType>(
    (x, l): (&[T], &Layout),
    weight: Option<(&[T], &Layout)>,
    running: Option<((&[T], &Layout), (&[T], &Layout))>,
    (g, lg): (&[T], &Layout),
    training: bool,
    eps: f64,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let (xc, [n, c, s]) = channel_major(x, l);
    let (gc, _) = channel_major(g, lg);
    let m = n * s;
    let w = per_channel(weight);
    let rm = per_channel(running.map(|(m, _)| m));
    let rv = per_channel(running.map(|(_, v)| v));
    let mut dx = vec![T::from_f64(0.0); xc.len()];
    // Each channel: its `dx`, and its `(dweight, dbias)`.
    let channel = |ch: usize, out: &mut [T]| -> (f64, f64) {
        let xs = &xc[ch * m..(ch + 1) * m];
        let gs = &gc[ch * m..(ch + 1) * m];
        let (mean, var) = if training {
            stats(xs)
        } else {
            (
                rm.as_ref().map_or(0.0, |v| v[ch]),
                rv.as_ref().map_or(1.0, |v| v[ch]),
            )
        };
        let invstd = 1.0 / (var + eps).sqrt();
        let k = w.as_ref().map_or(1.0, |w| w[ch]) * invstd;
        let sum_g = pairwise_sum(gs, |g: T| g.to_f64());
        let pairs: Vec<(T, T)> = xs.iter().copied().zip(gs.iter().copied()).collect();
        let sum_gxhat =
            pairwise_sum(&pairs, |(x, g): (T, T)| g.to_f64() * (x.to_f64() - mean)) * invstd;
        if training {
            let (mg, mgx) = (sum_g / m as f64, sum_gxhat / m as f64);
            for ((o, &xv), &gv) in out.iter_mut().zip(xs).zip(gs) {
                let xhat = (xv.to_f64() - mean) * invstd;
                *o = T::from_f64(k * (gv.to_f64() - mg - xhat * mgx));
            }
        } else {
            for (o, &gv) in out.iter_mut().zip(gs) {
                *o = T::from_f64(gv.to_f64() * k);
            }
        }
        (sum_gxhat, sum_g)
    };
    let sums = if m == 0 {
        vec![(0.0, 0.0); c]
    } else {
        per_channel_mut(&mut dx, c, m, channel)
    };
    let dw = sums.iter().map(|&(w, _)| T::from_f64(w)).collect();
    let db = sums.iter().map(|&(_, b)| T::from_f64(b)).collect();
    (to_nc(&dx, [n, c, s]), dw, db)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SplitMix64;
    use half::{bf16, f16};

    /// The f64 reference on `[N, C, S]` in logical order: output, batch
    /// mean and biased variance per channel, by plain loops.
    struct Ref {
        y: Vec<f64>,
        mean: Vec<f64>,
        var: Vec<f64>,
    }

    #[allow(clippy::too_many_arguments)]
    fn reference(
        x: &[f64],
        [n, c, s]: [usize; 3],
        w: &[f64],
        b: &[f64],
        rm: &[f64],
        rv: &[f64],
        training: bool,
        eps: f64,
    ) -> Ref {
        let at = |i: usize, ch: usize, j: usize| x[(i * c + ch) * s + j];
        let mut y = vec![0.0; x.len()];
        let (mut means, mut vars) = (vec![], vec![]);
        for ch in 0..c {
            let m = (n * s) as f64;
            let mut sum = 0.0;
            for i in 0..n {
                for j in 0..s {
                    sum += at(i, ch, j);
                }
            }
            let mean = sum / m;
            let mut sq = 0.0;
            for i in 0..n {
                for j in 0..s {
                    sq += (at(i, ch, j) - mean).powi(2);
                }
            }
            let var = sq / m;
            means.push(mean);
            vars.push(var);
            let (mu, v) = if training {
                (mean, var)
            } else {
                (rm[ch], rv[ch])
            };
            for i in 0..n {
                for j in 0..s {
                    y[(i * c + ch) * s + j] =
                        (at(i, ch, j) - mu) / (v + eps).sqrt() * w[ch] + b[ch];
                }
            }
        }
        Ref {
            y,
            mean: means,
            var: vars,
        }
    }

    fn draw(rng: &mut SplitMix64, n: usize, scale: f64, shift: f64) -> Vec<f64> {
        (0..n).map(|_| rng.normal() * scale + shift).collect()
    }

    fn round<U: DType>(v: &[f64]) -> Vec<U> {
        v.iter().map(|&v| U::from_f64(v)).collect()
    }

    fn back<U: DType>(v: &[U]) -> Vec<f64> {
        v.iter().map(|v| v.to_f64()).collect()
    }

    /// The forward in dtype `U` for dims `[N, C, S]`, NCHW and
    /// channels-last memory, both modes, against the reference on the
    /// rounded inputs; the running statistics' update against the formula.
    fn check_forward<U: DType>(dims: [usize; 3], shift: f64, tol: f64, seed: u64) {
        let [n, c, s] = dims;
        let mut rng = SplitMix64::new(seed);
        let x: Vec<U> = round(&draw(&mut rng, n * c * s, 1.5, shift));
        let w: Vec<U> = round(&draw(&mut rng, c, 1.0, 0.0));
        let b: Vec<U> = round(&draw(&mut rng, c, 1.0, 0.0));
        let rm: Vec<U> = round(&draw(&mut rng, c, 1.0, shift));
        let rv: Vec<U> = round(&draw(&mut rng, c, 0.3, 1.5));
        let (xf, wf, bf, rmf, rvf) = (back(&x), back(&w), back(&b), back(&rm), back(&rv));
        let lc = Layout::contiguous(&[c]);
        let (momentum, eps) = (0.1, 1e-5);
        // Channels-last: the same logical values stored as [N, S, C].
        let mut xl = x.clone();
        for i in 0..n {
            for ch in 0..c {
                for j in 0..s {
                    xl[(i * s + j) * c + ch] = x[(i * c + ch) * s + j];
                }
            }
        }
        let nhwc = Layout::contiguous(&[n, s, c]).permute(&[0, 2, 1]);
        for (data, l) in [(&x, Layout::contiguous(&[n, c, s])), (&xl, nhwc)] {
            for training in [true, false] {
                let want = reference(&xf, dims, &wf, &bf, &rmf, &rvf, training, eps);
                let (y, updated) = batch_norm(
                    (data, &l),
                    Some((&w, &lc)),
                    Some((&b, &lc)),
                    Some(((&rm, &lc), (&rv, &lc))),
                    training,
                    momentum,
                    eps,
                );
                let ty = std::any::type_name::<U>();
                for (i, (g, e)) in back(&y).iter().zip(&want.y).enumerate() {
                    let ok = (g - e).abs() <= tol * e.abs().max(1.0) || (g.is_nan() && e.is_nan());
                    assert!(
                        ok,
                        "{ty} {dims:?} shift {shift} training {training} at {i}: {g} vs {e}"
                    );
                }
                assert_eq!(updated.is_some(), training && n * s > 0);
                if let Some((m, v)) = updated {
                    let k = (n * s) as f64 / ((n * s) as f64 - 1.0);
                    for ch in 0..c {
                        let em = 0.9 * rmf[ch] + 0.1 * want.mean[ch];
                        let ev = 0.9 * rvf[ch] + 0.1 * want.var[ch] * k;
                        let (gm, gv) = (m[ch].to_f64(), v[ch].to_f64());
                        assert!(
                            (gm - em).abs() <= tol * em.abs().max(1.0),
                            "{ty} mean {gm} vs {em}"
                        );
                        assert!(
                            (gv - ev).abs() <= tol * ev.abs().max(1.0),
                            "{ty} var {gv} vs {ev}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn forward_matches_the_reference_in_every_dtype() {
        let shapes = [
            [4, 3, 1],
            [1, 2, 9],
            [3, 5, 7],
            [2, 4, 33],
            [0, 3, 4],
            [5, 2, 0],
        ];
        for (k, dims) in shapes.into_iter().enumerate() {
            let seed = 7 + k as u64;
            check_forward::<f64>(dims, 0.0, 1e-12, seed);
            check_forward::<f32>(dims, 0.0, 2e-6, seed);
            check_forward::<f16>(dims, 0.0, 2e-3, seed);
            check_forward::<bf16>(dims, 0.0, 1.6e-2, seed);
        }
    }

    #[test]
    fn large_offsets_do_not_cancel() {
        // Around 1e4 an f32 holds the values to ~1e-3; E[x^2] - E[x]^2
        // in f32 would lose the variance of 2.25 entirely.
        check_forward::<f32>([8, 3, 16], 1e4, 1e-5, 3);
        check_forward::<f64>([8, 3, 16], 1e8, 1e-7, 4);
    }

    #[test]
    fn constant_channels_give_the_bias_and_non_finite_values_their_channel_nan() {
        let l = Layout::contiguous(&[2, 2, 2]);
        let lc = Layout::contiguous(&[2]);
        let b = [0.5f32, -1.0];
        let x = [3.0f32, 3.0, 1.0, f32::NAN, 3.0, 3.0, 2.0, 0.0];
        let (y, upd) = batch_norm(
            (&x[..], &l),
            None,
            Some((&b[..], &lc)),
            None,
            true,
            0.1,
            1e-5,
        );
        assert_eq!(&y[..2], &[0.5, 0.5]);
        assert!(y[2..4].iter().chain(&y[6..]).all(|v| v.is_nan()), "{y:?}");
        assert!(upd.is_none());
        let x = [1.0f32, f32::INFINITY, 0.0, 1.0, 1.0, 1.0, 0.0, -0.0];
        let rm = [0.0f32, 0.0];
        let rv = [1.0f32, 1.0];
        let (_, upd) = batch_norm(
            (&x[..], &l),
            None,
            None,
            Some(((&rm[..], &lc), (&rv[..], &lc))),
            true,
            0.1,
            1e-5,
        );
        let (m, v) = upd.unwrap();
        assert!(m[0].is_infinite() && v[0].is_nan(), "{m:?} {v:?}");
        assert!(
            (m[1] - 0.025).abs() < 1e-8 && (v[1] - 0.925).abs() < 1e-7,
            "{m:?} {v:?}"
        );
        // Inference is per element: an infinity stays there.
        let (y, _) = batch_norm(
            (&x[..], &l),
            None,
            None,
            Some(((&rm[..], &lc), (&rv[..], &lc))),
            false,
            0.1,
            0.0,
        );
        assert_eq!(y, x);
    }

    /// The training loss `sum(y * r)` for fixed random `r`, in f64.
    #[allow(clippy::too_many_arguments)]
    fn loss(
        x: &[f64],
        dims: [usize; 3],
        w: &[f64],
        b: &[f64],
        rm: &[f64],
        rv: &[f64],
        r: &[f64],
        training: bool,
    ) -> f64 {
        let y = reference(x, dims, w, b, rm, rv, training, 1e-5).y;
        y.iter().zip(r).map(|(y, r)| y * r).sum()
    }

    #[test]
    fn backward_matches_central_differences() {
        for (k, dims) in [[3, 2, 4], [1, 3, 5], [6, 1, 1], [2, 2, 3]]
            .into_iter()
            .enumerate()
        {
            let [n, c, s] = dims;
            let mut rng = SplitMix64::new(100 + k as u64);
            let x = draw(&mut rng, n * c * s, 1.0, 0.5);
            let w = draw(&mut rng, c, 1.0, 0.0);
            let b = draw(&mut rng, c, 1.0, 0.0);
            let rm = draw(&mut rng, c, 0.5, 0.0);
            let rv = draw(&mut rng, c, 0.2, 1.0);
            let r = draw(&mut rng, n * c * s, 1.0, 0.0);
            let l = Layout::contiguous(&[n, c, s]);
            let lc = Layout::contiguous(&[c]);
            for training in [true, false] {
                let (dx, dw, db) = batch_norm_backward(
                    (&x[..], &l),
                    Some((&w[..], &lc)),
                    Some(((&rm[..], &lc), (&rv[..], &lc))),
                    (&r[..], &l),
                    training,
                    1e-5,
                );
                let h = 1e-6;
                let fd = |v: &[f64], i: usize, f: &dyn Fn(&[f64]) -> f64| {
                    let (mut p, mut m) = (v.to_vec(), v.to_vec());
                    p[i] += h;
                    m[i] -= h;
                    (f(&p) - f(&m)) / (2.0 * h)
                };
                let close = |g: f64, e: f64, what: &str| {
                    assert!(
                        (g - e).abs() <= 1e-6 * e.abs().max(1.0),
                        "{dims:?} {training} {what}: {g} vs {e}"
                    );
                };
                for (i, &g) in dx.iter().enumerate() {
                    let e = fd(&x, i, &|x| loss(x, dims, &w, &b, &rm, &rv, &r, training));
                    close(g, e, &format!("dx[{i}]"));
                }
                for ch in 0..c {
                    let e = fd(&w, ch, &|w| loss(&x, dims, w, &b, &rm, &rv, &r, training));
                    close(dw[ch], e, "dweight");
                    let e = fd(&b, ch, &|b| loss(&x, dims, &w, b, &rm, &rv, &r, training));
                    close(db[ch], e, "dbias");
                }
            }
        }
    }

    #[test]
    fn backward_of_an_empty_batch_is_zero() {
        let l = Layout::contiguous(&[0, 2, 3]);
        let (dx, dw, db) = batch_norm_backward::<f32>((&[], &l), None, None, (&[], &l), true, 1e-5);
        assert!(dx.is_empty());
        assert_eq!((dw, db), (vec![0.0; 2], vec![0.0; 2]));
    }
}
