//! Row ops along one dim (`softmax`, ...): the rows of the dim, made
//! contiguous, each handed to the op's row loop (in
//! [`softmax`](super::softmax)), in parallel for large inputs.

use super::buffer::output_buffer;
use super::copy::contiguous;
use super::reduce::rows;
use super::scalar::CpuFloat;
use super::simd::vectorized;
use super::softmax;
use super::strided::PAR_THRESHOLD;
use crate::layout::Layout;
use std::mem::MaybeUninit;
use tensorfn_kernels::{RowOp, RowShape};

/// Row op `op` of `x` along `dim`, as a contiguous buffer of `l`'s dims
/// (an op that keeps its dim) or of `l`'s dims without `dim` (one that
/// removes it).
pub(crate) fn row_op<U: CpuFloat>(op: RowOp, x: &[U], l: &Layout, dim: usize) -> Vec<U> {
    let r = rows(x, l, dim);
    let keeps = op.shape() == RowShape::Keep;
    // Outputs per row.
    let per_row = if keeps { r.len } else { 1 };
    let n = r.outer * per_row;
    let mut out = output_buffer(n);
    let slots = &mut out.spare_capacity_mut()[..n];
    let work = |(o, i): (&mut [MaybeUninit<U>], &[U])| {
        let mut tmp = Vec::with_capacity(r.len);
        vectorized(
            #[inline(always)]
            || {
                for (o, i) in o.chunks_exact_mut(per_row).zip(i.chunks_exact(r.len)) {
                    softmax::row_op(op, i, o, &mut tmp);
                }
            },
        )
    };
    match PAR_THRESHOLD.checked_div(r.len) {
        // Empty rows: only an op that removes its dim has outputs, one
        // per row (its row loop takes an empty row; the others are never
        // handed one).
        None => {
            let mut tmp = Vec::new();
            for o in slots.chunks_exact_mut(per_row.max(1)) {
                softmax::row_op(op, &[], o, &mut tmp);
            }
        }
        Some(rows_per_task) => {
            let rows_per_task = rows_per_task.max(1);
            if r.outer * r.len >= PAR_THRESHOLD {
                super::par::zip_chunks_mut(
                    slots,
                    rows_per_task * per_row,
                    &r.data,
                    rows_per_task * r.len,
                    &|o, i| work((o, i)),
                );
            } else {
                work((slots, &r.data));
            }
        }
    }
    // SAFETY: every row's outputs were written above; with rows of
    // length 0 an op that keeps its dim has nothing to write (`n` is 0).
    unsafe { out.set_len(n) };
    if !keeps || r.perm.iter().enumerate().all(|(i, &p)| i == p) {
        // Rows in the order of the other dims: what an op that removes
        // its dim returns, and the input's order when `dim` was last.
        return out;
    }
    // Rows were laid out with `dim` last; put it back in place.
    let mut inverse = vec![0; r.perm.len()];
    for (i, &p) in r.perm.iter().enumerate() {
        inverse[p] = i;
    }
    contiguous(&out, &Layout::contiguous(&r.dims).permute(&inverse))
}
