//! `layer_norm` and `rms_norm` over the last dim: each row read once into
//! the accumulation precision (f32 for f16/bf16, f64 for f64), its
//! statistics taken by pairwise sums (the variance around the mean, a
//! second pass over the converted row, not `E[x^2] - E[x]^2`), then
//! scaled, shifted and rounded once; rows in parallel for large inputs.

use super::buffer::output_buffer;
use super::reduce::{pairwise_sum, rows};
use super::scalar::{CpuFloat, Real};
use super::simd::vectorized;
use super::strided::PAR_THRESHOLD;
use crate::layout::Layout;
use std::mem::MaybeUninit;
use tensorfn_kernels::NormOp;

/// Normalisation `op` of `x` over its last dim, with `weight` (and
/// `bias`) of that dim's length, as a contiguous buffer of `l`'s dims.
pub(crate) fn norm<U: CpuFloat>(
    op: NormOp,
    (x, l): (&[U], &Layout),
    (w, lw): (&[U], &Layout),
    bias: Option<(&[U], &Layout)>,
    eps: f64,
) -> Vec<U> {
    let r = rows(x, l, l.rank() - 1);
    let n = r.outer * r.len;
    let mut out = output_buffer(n);
    if n == 0 {
        return out;
    }
    let to_acc = |(v, lv): (&[U], &Layout)| -> Vec<U::Acc> {
        rows(v, lv, 0).data.iter().map(|v| v.to_acc()).collect()
    };
    let w = to_acc((w, lw));
    let b = bias.map(to_acc);
    let eps = <U::Acc as Real>::from_f64(eps);
    let len = r.len;
    let slots = &mut out.spare_capacity_mut()[..n];
    let work = |o: &mut [MaybeUninit<U>], i: &[U]| {
        let mut tmp = Vec::with_capacity(len);
        vectorized(
            #[inline(always)]
            || {
                for (o, i) in o.chunks_exact_mut(len).zip(i.chunks_exact(len)) {
                    norm_row(op, i, o, &w, b.as_deref(), eps, &mut tmp);
                }
            },
        )
    };
    let rows_per_task = (PAR_THRESHOLD / len).max(1);
    if n >= PAR_THRESHOLD && r.outer > 1 {
        super::par::zip_chunks_mut(
            slots,
            rows_per_task * len,
            &r.data,
            rows_per_task * len,
            &work,
        );
    } else {
        work(slots, &r.data);
    }
    // SAFETY: every row's outputs were written above.
    unsafe { out.set_len(n) };
    out
}

/// One row of a normalisation, written to `out`; `tmp` is scratch space
/// the caller keeps between rows.
#[inline(always)]
fn norm_row<U: CpuFloat>(
    op: NormOp,
    row: &[U],
    out: &mut [MaybeUninit<U>],
    w: &[U::Acc],
    b: Option<&[U::Acc]>,
    eps: U::Acc,
    tmp: &mut Vec<U::Acc>,
) {
    tmp.clear();
    tmp.extend(row.iter().map(|v| v.to_acc()));
    let n = <U::Acc as Real>::from_usize(row.len());
    match (op, b) {
        (NormOp::LayerNorm, Some(b)) => {
            let mean = pairwise_sum(tmp, |v: U::Acc| v) / n;
            let var = pairwise_sum(tmp, |v: U::Acc| (v - mean) * (v - mean)) / n;
            let inv = <U::Acc as Real>::ONE / (var + eps).sqrt();
            for (((o, &x), &w), &b) in out.iter_mut().zip(tmp.iter()).zip(w).zip(b) {
                o.write(U::from_acc((x - mean) * inv * w + b));
            }
        }
        _ => {
            let ms = pairwise_sum(tmp, |v: U::Acc| v * v) / n;
            let inv = <U::Acc as Real>::ONE / (ms + eps).sqrt();
            for ((o, &x), &w) in out.iter_mut().zip(tmp.iter()).zip(w) {
                o.write(U::from_acc(x * inv * w));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    /// Inputs in `[-2, 2)` shifted by `shift`, from a small LCG.
    fn random(n: usize, seed: u64, shift: f64) -> Vec<f64> {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 11) as f64 / (1u64 << 53) as f64) * 4.0 - 2.0 + shift
            })
            .collect()
    }

    /// Checks `op` in dtype `U` against the f64 reference on the values
    /// rounded to `U`, within `tol` relative to the output's scale.
    fn check<U: CpuFloat>(op: NormOp, rows_n: usize, len: usize, shift: f64, tol: f64) {
        let conv = |v: &[f64]| -> Vec<U> { v.iter().map(|&v| U::from_f64(v)).collect() };
        let back = |v: &[U]| -> Vec<f64> { v.iter().map(|v| v.to_f64()).collect() };
        let x = conv(&random(rows_n * len, 1 + len as u64, shift));
        let w = conv(&random(len, 2, 0.0));
        let b = conv(&random(len, 3, 0.0));
        let eps = 1e-5;
        let lx = Layout::contiguous(&[rows_n, len]);
        let lw = Layout::contiguous(&[len]);
        let bias = op.has_bias().then_some((&b[..], &lw));
        let y = back(&norm(op, (&x, &lx), (&w, &lw), bias, eps));
        let (xf, wf, bf) = (back(&x), back(&w), back(&b));
        for r in 0..rows_n {
            let want = op.eval_f64(&xf[r * len..(r + 1) * len], &wf, &bf, eps);
            for (i, (g, e)) in y[r * len..(r + 1) * len].iter().zip(&want).enumerate() {
                assert!(
                    (g - e).abs() <= tol * e.abs().max(1.0),
                    "{} {} len {len} shift {shift} row {r} col {i}: {g} vs {e}",
                    op.name(),
                    std::any::type_name::<U>()
                );
            }
        }
    }

    #[test]
    fn matches_the_reference_in_every_float_dtype() {
        for op in NormOp::ALL {
            for len in [1, 7, 64, 1000, 4096] {
                for shift in [0.0, 1000.0] {
                    let rows_n = if len > 1000 { 9 } else { 33 };
                    check::<f64>(op, rows_n, len, shift, 1e-10);
                    check::<f32>(op, rows_n, len, shift, 2e-3);
                    check::<f16>(op, rows_n, len, shift, 2e-2);
                    check::<bf16>(op, rows_n, len, shift, 8e-2);
                }
            }
        }
    }

    #[test]
    fn a_large_mean_does_not_cancel() {
        // Values 1e4 + small: E[x^2] - E[x]^2 in f32 would lose them all.
        let x: Vec<f32> = (0..256).map(|i| 1e4 + (i % 4) as f32 * 0.25).collect();
        let w = vec![1.0f32; 256];
        let b = vec![0.0f32; 256];
        let l = Layout::contiguous(&[256]);
        let y = norm(NormOp::LayerNorm, (&x, &l), (&w, &l), Some((&b, &l)), 0.0);
        let xf: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        let want = NormOp::LayerNorm.eval_f64(&xf, &[1.0; 256], &[0.0; 256], 0.0);
        for (g, e) in y.iter().zip(&want) {
            assert!((*g as f64 - e).abs() < 1e-3, "{g} vs {e}");
        }
    }

    #[test]
    fn strided_weights_and_empty_inputs() {
        // A weight read with a stride (every other element).
        let x = [1.0f64, 2.0, 3.0];
        let w = [1.0f64, 0.0, 2.0, 0.0, 3.0, 0.0];
        let lw = Layout::contiguous(&[3, 2]).select(1, 0);
        let y = norm(
            NormOp::RmsNorm,
            (&x, &Layout::contiguous(&[3])),
            (&w, &lw),
            None,
            0.0,
        );
        let want = NormOp::RmsNorm.eval_f64(&x, &[1.0, 2.0, 3.0], &[], 0.0);
        assert_eq!(y, want);
        let l = Layout::contiguous(&[0, 4]);
        let w = [1.0f32; 4];
        let y = norm(
            NormOp::RmsNorm,
            (&[], &l),
            (&w, &Layout::contiguous(&[4])),
            None,
            0.0,
        );
        assert!(y.is_empty());
    }
}
