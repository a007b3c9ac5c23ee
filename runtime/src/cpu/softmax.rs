//! The row loops of softmax, log-softmax and logsumexp, numerically
//! stable (the row maximum is subtracted before `exp`) and computed in at
//! least f32;
//! [`rows`](super::rows) runs them over the rows of a tensor.

use super::reduce::pairwise_sum;
use super::scalar::{CpuFloat, Real};
use std::mem::MaybeUninit;
use tensorfn_kernels::RowOp;

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

/// Row op `op` of one row, written to `out` (one slot per element, or
/// one for the row when `op` removes its dim); `tmp` is scratch space the
/// caller keeps between rows. Every row op of the table is of the softmax
/// family so far: a max, then a sum of `exp(x - max)`.
#[inline(always)]
pub(crate) fn row_op<U: CpuFloat>(
    op: RowOp,
    row: &[U],
    out: &mut [MaybeUninit<U>],
    tmp: &mut Vec<U::Acc>,
) {
    match op {
        RowOp::Softmax => softmax_row(row, out, tmp, false),
        RowOp::LogSoftmax => softmax_row(row, out, tmp, true),
        RowOp::LogSumExp => {
            out[0].write(logsumexp_row(row, tmp));
        }
    }
}

/// `log(sum(exp(x)))` of a row, shifted by its max, or by 0 where the max
/// is infinite (as PyTorch: an all -inf row gives -inf, a +inf gives
/// +inf); an empty row gives -inf.
#[inline(always)]
fn logsumexp_row<U: CpuFloat>(row: &[U], tmp: &mut Vec<U::Acc>) -> U {
    if row.is_empty() {
        return U::from_acc(-<U::Acc as Real>::from_f64(f64::INFINITY));
    }
    let m = row_max(row);
    let inf = <U::Acc as Real>::from_f64(f64::INFINITY);
    let shift = if m.abs() == inf {
        <U::Acc as Real>::ZERO
    } else {
        m
    };
    tmp.clear();
    tmp.extend(row.iter().map(|&v| v.to_acc() - shift));
    U::from_acc(pairwise_sum(tmp, |d: U::Acc| d.exp()).ln() + shift)
}

#[cfg(test)]
mod tests {
    use super::super::rows::row_op;
    use super::CpuFloat;
    use crate::layout::Layout;
    use tensorfn_kernels::RowOp;

    fn softmax<U: CpuFloat>(x: &[U], l: &Layout, dim: usize, log: bool) -> Vec<U> {
        let op = if log {
            RowOp::LogSoftmax
        } else {
            RowOp::Softmax
        };
        row_op(op, x, l, dim)
    }

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
    fn logsumexp_removes_the_dim_and_keeps_its_edges() {
        let inf = f32::INFINITY;
        let x = [0.0f32, 0.0, -inf, -inf, inf, 1.0, f32::NAN, 1.0];
        let y = row_op(RowOp::LogSumExp, &x, &Layout::contiguous(&[4, 2]), 1);
        assert!((y[0] - std::f32::consts::LN_2).abs() < 1e-7, "{y:?}");
        assert_eq!(&y[1..3], &[-inf, inf]);
        assert!(y[3].is_nan());
        // Along the first dim, and along an empty one.
        let y = row_op(RowOp::LogSumExp, &x, &Layout::contiguous(&[4, 2]), 0);
        assert!(y[0].is_nan());
        let want = (1.0 + 2.0 * std::f32::consts::E).ln();
        assert!((y[1] - want).abs() < 1e-6, "{y:?}");
        let y = row_op(
            RowOp::LogSumExp,
            &[] as &[f32],
            &Layout::contiguous(&[3, 0]),
            1,
        );
        assert_eq!(y, vec![-inf; 3]);
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
