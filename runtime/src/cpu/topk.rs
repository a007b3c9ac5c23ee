//! `topk` along the last dim on the CPU: per row, the positions sorted by
//! `topk`'s order (for the largest: NaN first, then larger values; for
//! the smallest: smaller values, then NaN; ties by lower index), the
//! first `k` kept; rows in parallel for large inputs.

use super::copy::contiguous;
use super::par;
use super::strided::PAR_THRESHOLD;
use crate::dtype::DType;
use crate::error::Result;
use crate::layout::Layout;
use std::cmp::Ordering;

/// `topk`'s order: `a` before `b`. NaN counts as larger than every
/// number (as PyTorch), so it comes first for the largest and last for
/// the smallest; equal values come in order of position.
fn order<T: DType>(a: (T, usize), b: (T, usize), largest: bool) -> Ordering {
    let nan = |v: T| v.partial_cmp(&v).is_none();
    let by_value = match (nan(a.0), nan(b.0)) {
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (true, true) => Ordering::Equal,
        _ => a.0.partial_cmp(&b.0).unwrap_or(Ordering::Equal),
    };
    let by_value = if largest {
        by_value.reverse()
    } else {
        by_value
    };
    by_value.then(a.1.cmp(&b.1))
}

/// See `Backend::topk`.
pub(crate) fn topk<T: DType>(
    x: &[T],
    l: &Layout,
    k: usize,
    largest: bool,
) -> Result<(Vec<T>, Vec<i64>)> {
    let cols = l.dims().last().copied().unwrap_or(1);
    let rows = l.numel().checked_div(cols).unwrap_or(0);
    let dense = contiguous(x, l);
    let mut idx = vec![0i64; rows * k];
    let pick = |r: usize, out: &mut [i64]| {
        let row = &dense[r * cols..(r + 1) * cols];
        let mut pos: Vec<usize> = (0..cols).collect();
        let cmp = |&a: &usize, &b: &usize| order((row[a], a), (row[b], b), largest);
        if k < cols && k > 0 {
            pos.select_nth_unstable_by(k - 1, cmp);
            pos.truncate(k);
        }
        pos.sort_unstable_by(cmp);
        for (o, p) in out.iter_mut().zip(pos) {
            *o = p as i64;
        }
    };
    if k > 0 {
        if rows * cols >= PAR_THRESHOLD && rows > 1 {
            let per = (PAR_THRESHOLD / cols.max(1)).max(1);
            par::chunks_mut(&mut idx, per * k, &|i, part| {
                for (j, out) in part.chunks_exact_mut(k).enumerate() {
                    pick(i * per + j, out);
                }
            });
        } else {
            for (r, out) in idx.chunks_exact_mut(k).enumerate() {
                pick(r, out);
            }
        }
    }
    let values = idx
        .iter()
        .enumerate()
        .map(|(i, &p)| dense[(i / k) * cols + p as usize])
        .collect();
    Ok((values, idx))
}
