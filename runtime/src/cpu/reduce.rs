//! Reductions along one dim: sums (pairwise, so long sums stay accurate),
//! means, extrema and their positions.

use super::copy::contiguous;
use super::scalar::{max_nan, min_nan, CpuFloat, CpuNum, Real};
use super::strided::PAR_THRESHOLD;
use crate::error::{Error, Result};
use crate::layout::Layout;
use std::borrow::Cow;
use tensorfn_kernels::ReduceOp;

/// The input viewed as `outer` contiguous rows of the reduced dim.
pub(crate) struct Rows<'a, T: Clone> {
    pub(crate) data: Cow<'a, [T]>,
    pub(crate) outer: usize,
    pub(crate) len: usize,
    /// Dims in row order (the reduced dim moved last).
    pub(crate) dims: Vec<usize>,
    /// The permutation that moved the reduced dim last.
    pub(crate) perm: Vec<usize>,
}

/// Moves `dim` last and makes the rows contiguous (copying only if needed).
pub(crate) fn rows<'a, T: crate::DType>(x: &'a [T], l: &Layout, dim: usize) -> Rows<'a, T> {
    let rank = l.rank();
    let perm: Vec<usize> = (0..rank).filter(|&d| d != dim).chain([dim]).collect();
    let p = l.permute(&perm);
    let len = l.dims()[dim];
    let outer = p.dims()[..rank - 1].iter().product();
    let data = if p.numel() == 0 {
        Cow::Borrowed(&x[..0])
    } else if p.is_contiguous() {
        Cow::Borrowed(&x[p.offset()..p.offset() + p.numel()])
    } else {
        Cow::Owned(contiguous(x, &p))
    };
    Rows {
        data,
        outer,
        len,
        dims: p.dims().to_vec(),
        perm,
    }
}

/// `f(row)` for each row, in parallel for large inputs.
pub(crate) fn per_row<T: Sync + Clone, O: Send + Default + Clone>(
    r: &Rows<'_, T>,
    f: impl Fn(&[T]) -> O + Sync,
) -> Vec<O> {
    let mut out = vec![O::default(); r.outer];
    if r.len == 0 {
        out.iter_mut().for_each(|o| *o = f(&[]));
        return out;
    }
    let rows = r.data.chunks_exact(r.len);
    if r.outer * r.len >= PAR_THRESHOLD && r.outer > 1 {
        let min = (PAR_THRESHOLD / r.len).max(1);
        super::par::per_row_mut(&mut out, &r.data, r.len, min, &|o, row| *o = f(row));
    } else {
        for (o, row) in out.iter_mut().zip(rows) {
            *o = f(row);
        }
    }
    out
}

/// Sum in `A`, splitting long inputs in halves so the error grows with
/// the log of the length rather than the length.
pub(crate) fn pairwise_sum<U: Copy, A: Real>(xs: &[U], f: impl Fn(U) -> A + Copy) -> A {
    const BLOCK: usize = 256;
    if xs.len() <= BLOCK {
        let mut acc = [A::ZERO; 8];
        let chunks = xs.chunks_exact(8);
        let rest = chunks.remainder();
        for c in chunks {
            for i in 0..8 {
                acc[i] = acc[i] + f(c[i]);
            }
        }
        let mut s =
            ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        for &v in rest {
            s = s + f(v);
        }
        s
    } else {
        let mid = (xs.len() / 2).next_multiple_of(8);
        pairwise_sum(&xs[..mid], f) + pairwise_sum(&xs[mid..], f)
    }
}

fn empty_extremum(op: ReduceOp) -> Error {
    Error::shape(
        op.name(),
        "a non-empty dim to reduce (the extremum of nothing is undefined)",
        "a dim of size 0",
    )
}

/// `Sum`, `Mean`, `Max` or `Min` of each row, for a float dtype.
pub(crate) fn reduce_float<U: CpuFloat>(op: ReduceOp, r: &Rows<'_, U>) -> Result<Vec<U>> {
    Ok(match op {
        ReduceOp::Sum => per_row(r, |row| U::from_acc(pairwise_sum(row, U::to_acc))),
        ReduceOp::Mean => {
            let n = <U::Acc as Real>::from_usize(r.len);
            per_row(r, |row| U::from_acc(pairwise_sum(row, U::to_acc) / n))
        }
        ReduceOp::Max | ReduceOp::Min if r.len == 0 => return Err(empty_extremum(op)),
        ReduceOp::Max => per_row(r, |row| row.iter().copied().fold(row[0], max_nan)),
        ReduceOp::Min => per_row(r, |row| row.iter().copied().fold(row[0], min_nan)),
        ReduceOp::ArgMax | ReduceOp::ArgMin => unreachable!("arg reductions return positions"),
    })
}

/// `Sum` (wrapping), `Max` or `Min` of each row, for an integer dtype.
pub(crate) fn reduce_int<U: CpuNum + Ord>(op: ReduceOp, r: &Rows<'_, U>) -> Result<Vec<U>> {
    Ok(match op {
        ReduceOp::Sum => per_row(r, |row| row.iter().fold(U::zero(), |a, &b| a.add(b))),
        ReduceOp::Max | ReduceOp::Min if r.len == 0 => return Err(empty_extremum(op)),
        ReduceOp::Max => per_row(r, |row| *row.iter().max().expect("non-empty row")),
        ReduceOp::Min => per_row(r, |row| *row.iter().min().expect("non-empty row")),
        ReduceOp::Mean => return Err(Error::float_only("mean", U::KIND)),
        ReduceOp::ArgMax | ReduceOp::ArgMin => unreachable!("arg reductions return positions"),
    })
}

/// Position of the first maximum (or minimum) of each row; a NaN counts
/// as the extremum, like PyTorch.
pub(crate) fn arg_reduce<U: CpuNum>(op: ReduceOp, r: &Rows<'_, U>) -> Result<Vec<i64>> {
    if r.len == 0 {
        return Err(empty_extremum(op));
    }
    let max = match op {
        ReduceOp::ArgMax => true,
        ReduceOp::ArgMin => false,
        _ => unreachable!("only arg reductions return positions"),
    };
    #[allow(clippy::eq_op)]
    let is_nan = |v: U| v != v;
    Ok(per_row(r, |row| {
        let mut best = 0usize;
        for (i, &v) in row.iter().enumerate().skip(1) {
            let b = row[best];
            if is_nan(b) {
                break;
            }
            if is_nan(v) || (max && v > b) || (!max && v < b) {
                best = i;
            }
        }
        best as i64
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairwise_sum_is_accurate() {
        let n = 10_000_000usize;
        let xs = vec![0.1f32; n];
        let s = pairwise_sum(&xs, |v| v);
        let exact = 0.1f32 as f64 * n as f64;
        assert!(((s as f64) - exact).abs() / exact < 1e-6, "{s} vs {exact}");
    }

    #[test]
    fn rows_of_a_middle_dim() {
        let x: Vec<i32> = (0..24).collect();
        let l = Layout::contiguous(&[2, 3, 4]);
        let r = rows(&x, &l, 1);
        assert_eq!((r.outer, r.len), (8, 3));
        assert_eq!(&r.data[..6], &[0, 4, 8, 1, 5, 9]);
        assert_eq!(reduce_int(ReduceOp::Sum, &r).unwrap()[..2], [12, 15]);
    }
}
