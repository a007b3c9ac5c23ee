//! Softmax and log-softmax along one dim, numerically stable (the row
//! maximum is subtracted before `exp`) and computed in at least f32.

use super::buffer::output_buffer;
use super::copy::contiguous;
use super::reduce::{pairwise_sum, rows};
use super::scalar::{CpuFloat, Real};
use super::simd::vectorized;
use super::strided::PAR_THRESHOLD;
use crate::layout::Layout;
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// The largest element of a non-empty row, NaN if any is NaN (PyTorch
/// makes the whole row NaN then). Eight running maxima and a NaN flag, all
/// selects, so the loop vectorises.
#[inline(always)]
fn row_max<U: CpuFloat>(row: &[U]) -> U::Acc {
    let mut acc = [row[0].to_acc(); 8];
    let mut nan = false;
    let chunks = row.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..8 {
            let a = c[i].to_acc();
            nan |= a.is_nan();
            acc[i] = if a > acc[i] { a } else { acc[i] };
        }
    }
    let mut m = acc[0];
    for a in acc[1..]
        .iter()
        .copied()
        .chain(rest.iter().map(|v| v.to_acc()))
    {
        nan |= a.is_nan();
        m = if a > m { a } else { m };
    }
    if nan {
        <U::Acc as Real>::from_f64(f64::NAN)
    } else {
        m
    }
}

#[inline(always)]
fn softmax_row<U: CpuFloat>(
    row: &[U],
    out: &mut [MaybeUninit<U>],
    tmp: &mut Vec<U::Acc>,
    log: bool,
) {
    let m = row_max(row);
    tmp.clear();
    if log {
        tmp.extend(row.iter().map(|&v| v.to_acc() - m));
        let ls = pairwise_sum(tmp, |d: U::Acc| d.exp()).ln();
        for (o, &d) in out.iter_mut().zip(tmp.iter()) {
            o.write(U::from_acc(d - ls));
        }
    } else {
        tmp.extend(row.iter().map(|&v| (v.to_acc() - m).exp()));
        let inv = <U::Acc as Real>::ONE / pairwise_sum(tmp, |e: U::Acc| e);
        for (o, &e) in out.iter_mut().zip(tmp.iter()) {
            o.write(U::from_acc(e * inv));
        }
    }
}

/// Softmax (or log-softmax) of `x` along `dim`, as a contiguous buffer of
/// `l`'s dims.
pub(crate) fn softmax<U: CpuFloat>(x: &[U], l: &Layout, dim: usize, log: bool) -> Vec<U> {
    let r = rows(x, l, dim);
    let n = r.outer * r.len;
    let mut out = output_buffer(n);
    let slots = &mut out.spare_capacity_mut()[..n];
    if let Some(rows_per_task) = PAR_THRESHOLD.checked_div(r.len) {
        let rows_per_task = rows_per_task.max(1);
        let chunk = rows_per_task * r.len;
        let work = |(o, i): (&mut [MaybeUninit<U>], &[U])| {
            let mut tmp = Vec::with_capacity(r.len);
            vectorized(
                #[inline(always)]
                || {
                    for (o, i) in o.chunks_exact_mut(r.len).zip(i.chunks_exact(r.len)) {
                        softmax_row(i, o, &mut tmp, log);
                    }
                },
            )
        };
        if n >= PAR_THRESHOLD {
            slots
                .par_chunks_mut(chunk)
                .zip(r.data.par_chunks(chunk))
                .for_each(work);
        } else {
            work((slots, &r.data));
        }
    }
    // SAFETY: every row was written above; with rows of length 0 there is
    // nothing to write (`n` is 0).
    unsafe { out.set_len(n) };
    if r.perm.iter().enumerate().all(|(i, &p)| i == p) {
        return out;
    }
    // Rows were laid out with `dim` last; put it back in place.
    let mut inverse = vec![0; r.perm.len()];
    for (i, &p) in r.perm.iter().enumerate() {
        inverse[p] = i;
    }
    contiguous(&out, &Layout::contiguous(&r.dims).permute(&inverse))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_for_large_inputs() {
        let x = [1000.0f32, 1001.0, 1002.0];
        let y = softmax(&x, &Layout::contiguous(&[3]), 0, false);
        let e: Vec<f64> = [0.0f64, 1.0, 2.0].iter().map(|v| v.exp()).collect();
        let s: f64 = e.iter().sum();
        for (a, b) in y.iter().zip(&e) {
            assert!((*a as f64 - b / s).abs() < 1e-6);
        }
    }

    #[test]
    fn a_nan_anywhere_makes_the_row_nan() {
        for at in [0usize, 5, 9, 16] {
            let mut x: Vec<f32> = (0..17).map(|i| (i as f32 * 0.37).sin()).collect();
            x[at] = f32::NAN;
            let y = softmax(&x, &Layout::contiguous(&[17]), 0, false);
            assert!(y.iter().all(|v| v.is_nan()), "NaN at {at}: {y:?}");
        }
        // The maximum found wherever it is, here in the remainder.
        let x: Vec<f32> = (0..19).map(|i| i as f32 * 0.1).collect();
        let y = softmax(&x, &Layout::contiguous(&[19]), 0, true);
        let ls = x.iter().map(|&v| (v as f64 - 1.8).exp()).sum::<f64>().ln();
        for (a, &v) in y.iter().zip(&x) {
            assert!((*a as f64 - (v as f64 - 1.8 - ls)).abs() < 1e-6);
        }
    }

    #[test]
    fn along_the_first_dim() {
        let x = [0.0f64, 1.0, 2.0, 3.0];
        let y = softmax(&x, &Layout::contiguous(&[2, 2]), 0, true);
        let l = -(1.0f64 + (2.0f64).exp()).ln();
        for (a, b) in y.iter().zip([l, l, 2.0 + l, 2.0 + l]) {
            assert!((a - b).abs() < 1e-12, "{y:?}");
        }
    }
}
