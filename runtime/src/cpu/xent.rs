//! `cross_entropy` and its backward over rows of logits: per row the
//! max, the sum of `exp(x - max)` and (with label smoothing) the sum of
//! the logits; rows in parallel for large inputs. No `[N, C]` temporary
//! in the forward.
//!
//! Each `exp` is taken in the accumulation precision (f32 for f16, bf16
//! and f32), but every sum (a row's exponentials, a row's logits, the
//! reduction over rows) is added in `f64`: an f32 running sum over a
//! 50304-wide row drifts by about 4e-5 relative, an f64 one stays at the
//! `exp`s' own rounding, for the price of a widening add per element.

use super::copy::contiguous;
use super::par;
use super::scalar::{CpuFloat, Real};
use super::strided::PAR_THRESHOLD;
use crate::backend::Gathered;
use crate::dtype::DType;
use crate::layout::Layout;
use std::borrow::Cow;
use tensorfn_core::ops::xent::{CrossEntropyArgs, Reduction};

fn dense<'a, U: DType>(x: &'a [U], l: &Layout) -> Cow<'a, [U]> {
    if l.is_contiguous() {
        Cow::Borrowed(&x[l.offset()..l.offset() + l.numel()])
    } else {
        Cow::Owned(contiguous(x, l))
    }
}

/// The targets as `i64`, and how many rows are not ignored; `Err(t)` for
/// a target outside `0..classes` that is not `ignore_index`.
fn targets<I: DType>(
    t: &[I],
    lt: &Layout,
    classes: usize,
    ignore: i64,
) -> Result<(Vec<i64>, usize), i64> {
    let ts: Vec<i64> = lt.offsets().map(|o| t[o].to_i64()).collect();
    let mut count = 0;
    for &k in &ts {
        if k == ignore {
            continue;
        }
        if k < 0 || k as usize >= classes {
            return Err(k);
        }
        count += 1;
    }
    Ok((ts, count))
}

/// `ln(sum(exp(x - max))) + max` of one row, in `f64` (NaN if the row
/// has a NaN; `+inf` if it has `+inf`, `-inf` if every logit is `-inf`).
/// The `exp`s are taken in `U::Acc`, their sum is `f64`.
fn row_lse<U: CpuFloat>(row: &[U]) -> f64 {
    let mut m = U::Acc::from_f64(f64::NEG_INFINITY);
    for &x in row {
        let x = x.to_acc();
        if x.is_nan() || m.is_nan() {
            m = x + m;
        } else if x > m {
            m = x;
        }
    }
    let mut s = 0f64;
    for &x in row {
        s += (x.to_acc() - m).exp().as_f64();
    }
    m.as_f64() + s.ln()
}

/// `sum(row)` in `f64`.
fn row_sum<U: CpuFloat>(row: &[U]) -> f64 {
    row.iter().map(|&x| x.to_acc().as_f64()).sum()
}

/// Rows per parallel task for rows of `classes` elements.
fn rows_per_task(classes: usize) -> usize {
    (PAR_THRESHOLD / classes.max(1)).max(1)
}

/// See `Backend::cross_entropy`: `x` is `[N, C]`, `t` is `[N]`.
pub(crate) fn cross_entropy<U: CpuFloat, I: DType>(
    (x, lx): (&[U], &Layout),
    (t, lt): (&[I], &Layout),
    args: CrossEntropyArgs,
) -> Gathered<Vec<U>> {
    let (n, c) = (lx.dims()[0], lx.dims()[1]);
    let (ts, count) = targets(t, lt, c, args.ignore_index)?;
    let x = dense(x, lx);
    let smoothing = args.label_smoothing;
    let cs = c as f64;
    let loss = |r: usize| -> f64 {
        if ts[r] == args.ignore_index {
            return 0.0;
        }
        let row = &x[r * c..(r + 1) * c];
        let lse = row_lse(row);
        let nll = lse - row[ts[r] as usize].to_acc().as_f64();
        if smoothing == 0.0 {
            return nll;
        }
        let smooth = cs * lse - row_sum(row);
        (1.0 - smoothing) * nll + smoothing / cs * smooth
    };
    let mut losses = vec![0f64; n];
    if n * c >= PAR_THRESHOLD && n > 1 {
        let per = rows_per_task(c);
        par::chunks_mut(&mut losses, per, &|i, part| {
            for (k, o) in part.iter_mut().enumerate() {
                *o = loss(i * per + k);
            }
        });
    } else {
        for (r, o) in losses.iter_mut().enumerate() {
            *o = loss(r);
        }
    }
    Ok(match args.reduction {
        Reduction::None => losses.into_iter().map(U::from_f64).collect(),
        Reduction::Sum | Reduction::Mean => {
            let sum: f64 = losses.into_iter().sum();
            let v = if args.reduction == Reduction::Mean {
                sum / count as f64
            } else {
                sum
            };
            vec![U::from_f64(v)]
        }
    })
}

/// See `Backend::cross_entropy_backward`: `x` is `[N, C]`, `t` is `[N]`,
/// `g` is `[N]` (`Reduction::None`) or a scalar.
pub(crate) fn cross_entropy_backward<U: CpuFloat, I: DType>(
    (x, lx): (&[U], &Layout),
    (t, lt): (&[I], &Layout),
    (g, lg): (&[U], &Layout),
    args: CrossEntropyArgs,
) -> Gathered<Vec<U>> {
    let (n, c) = (lx.dims()[0], lx.dims()[1]);
    let (ts, count) = targets(t, lt, c, args.ignore_index)?;
    let x = dense(x, lx);
    let gs: Vec<U::Acc> = lg.offsets().map(|o| g[o].to_acc()).collect();
    let smoothing = U::Acc::from_f64(args.label_smoothing);
    let keep = U::Acc::ONE - smoothing;
    let spread = smoothing / U::Acc::from_usize(c);
    let scale = match args.reduction {
        Reduction::Mean => U::Acc::ONE / U::Acc::from_usize(count),
        _ => U::Acc::ONE,
    };
    let mut out = vec![U::from_acc(U::Acc::ZERO); n * c];
    let row = |r: usize, o: &mut [U]| {
        let k = ts[r];
        if k == args.ignore_index {
            o.fill(U::from_acc(U::Acc::ZERO));
            return;
        }
        let g = if args.reduction == Reduction::None {
            gs[r]
        } else {
            gs[0]
        } * scale;
        let xr = &x[r * c..(r + 1) * c];
        let lse = row_lse(xr);
        for (j, (o, &v)) in o.iter_mut().zip(xr).enumerate() {
            // `x - lse` in f64, so a large `lse` loses no bits of it.
            let mut p = U::Acc::from_f64(v.to_acc().as_f64() - lse).exp() - spread;
            if j == k as usize {
                p = p - keep;
            }
            *o = U::from_acc(p * g);
        }
    };
    if n * c >= PAR_THRESHOLD && n > 1 && c > 0 {
        let per = rows_per_task(c);
        par::chunks_mut(&mut out, per * c, &|i, part| {
            for (k, o) in part.chunks_exact_mut(c).enumerate() {
                row(i * per + k, o);
            }
        });
    } else if c > 0 {
        for (r, o) in out.chunks_exact_mut(c).enumerate() {
            row(r, o);
        }
    }
    Ok(out)
}
