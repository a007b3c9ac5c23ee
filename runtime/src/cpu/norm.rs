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

/// The gradients of normalisation `op` of `x` (over its last dim, with
/// `weight` of that dim's length) for the output gradient `g` of `x`'s
/// dims: `dx` as a contiguous buffer of those dims, `dweight` (and
/// `dbias` for `layer_norm`) of the last dim's length.
///
/// Each row's statistics are recomputed from `x` as the forward takes
/// them; `dx` is one pass per row, `dweight`/`dbias` column sums taken
/// per group of rows (a group's size depends on the row length only) and
/// then added group by group in order, so the result does not depend on
/// the number of threads.
pub(crate) fn norm_backward<U: CpuFloat>(
    op: NormOp,
    (x, l): (&[U], &Layout),
    (w, lw): (&[U], &Layout),
    (g, lg): (&[U], &Layout),
    eps: f64,
) -> (Vec<U>, Vec<U>, Option<Vec<U>>) {
    let r = rows(x, l, l.rank() - 1);
    let gr = rows(g, lg, lg.rank() - 1);
    let len = r.len;
    let n = r.outer * len;
    let w: Vec<U::Acc> = rows(w, lw, 0).data.iter().map(|v| v.to_acc()).collect();
    let eps = <U::Acc as Real>::from_f64(eps);
    let bias = op.has_bias();
    let zero = <U::Acc as Real>::ZERO;
    let mut dx = output_buffer(n);
    let mut dw = vec![zero; len];
    let mut db = vec![zero; if bias { len } else { 0 }];
    if n > 0 {
        struct Task<'a, U, A> {
            dx: &'a mut [MaybeUninit<U>],
            x: &'a [U],
            g: &'a [U],
            dw: Vec<A>,
            db: Vec<A>,
        }
        let chunk = (PAR_THRESHOLD / len).max(1) * len;
        let slots = &mut dx.spare_capacity_mut()[..n];
        let mut tasks: Vec<Task<'_, U, U::Acc>> = slots
            .chunks_mut(chunk)
            .zip(r.data.chunks(chunk))
            .zip(gr.data.chunks(chunk))
            .map(|((dx, x), g)| Task {
                dx,
                x,
                g,
                dw: Vec::new(),
                db: Vec::new(),
            })
            .collect();
        let work = |t: &mut Task<'_, U, U::Acc>| {
            t.dw = vec![zero; len];
            t.db = vec![zero; if bias { len } else { 0 }];
            let mut tmp = Vec::with_capacity(len);
            vectorized(
                #[inline(always)]
                || {
                    let rows = t.dx.chunks_exact_mut(len);
                    for ((dx, x), g) in rows.zip(t.x.chunks_exact(len)).zip(t.g.chunks_exact(len)) {
                        let db = bias.then_some(&mut t.db[..]);
                        norm_backward_row(op, x, g, dx, &w, eps, &mut t.dw, db, &mut tmp);
                    }
                },
            )
        };
        if n >= PAR_THRESHOLD && tasks.len() > 1 {
            super::par::for_each_mut(&mut tasks, &work);
        } else {
            tasks.iter_mut().for_each(work);
        }
        for t in &tasks {
            for (s, v) in dw.iter_mut().zip(&t.dw) {
                *s = *s + *v;
            }
            for (s, v) in db.iter_mut().zip(&t.db) {
                *s = *s + *v;
            }
        }
    }
    // SAFETY: every row's gradients were written above.
    unsafe { dx.set_len(n) };
    let round = |v: Vec<U::Acc>| v.into_iter().map(U::from_acc).collect::<Vec<U>>();
    (dx, round(dw), bias.then(|| round(db)))
}

/// One row of a normalisation's backward: `dx` written, the row's
/// `g * xhat` (and `g`) added to `dw` (and `db`); `tmp` is scratch space
/// the caller keeps between rows.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn norm_backward_row<U: CpuFloat>(
    op: NormOp,
    x: &[U],
    g: &[U],
    dx: &mut [MaybeUninit<U>],
    w: &[U::Acc],
    eps: U::Acc,
    dw: &mut [U::Acc],
    db: Option<&mut [U::Acc]>,
    tmp: &mut Vec<(U::Acc, U::Acc)>,
) {
    let zero = <U::Acc as Real>::ZERO;
    // (x, g * w), then (xhat, g * w).
    tmp.clear();
    tmp.extend(
        x.iter()
            .zip(g)
            .zip(w)
            .map(|((x, g), &w)| (x.to_acc(), g.to_acc() * w)),
    );
    let n = <U::Acc as Real>::from_usize(x.len());
    let layer = op == NormOp::LayerNorm;
    let (mean, stat) = if layer {
        let mean = pairwise_sum(tmp, |(v, _): (U::Acc, U::Acc)| v) / n;
        let var = pairwise_sum(tmp, |(v, _): (U::Acc, U::Acc)| (v - mean) * (v - mean)) / n;
        (mean, var)
    } else {
        (
            zero,
            pairwise_sum(tmp, |(v, _): (U::Acc, U::Acc)| v * v) / n,
        )
    };
    let inv = <U::Acc as Real>::ONE / (stat + eps).sqrt();
    for p in tmp.iter_mut() {
        p.0 = (p.0 - mean) * inv;
    }
    let mean_gx = pairwise_sum(tmp, |(h, gw): (U::Acc, U::Acc)| gw * h) / n;
    let mean_g = if layer {
        pairwise_sum(tmp, |(_, gw): (U::Acc, U::Acc)| gw) / n
    } else {
        zero
    };
    for (o, &(h, gw)) in dx.iter_mut().zip(tmp.iter()) {
        o.write(U::from_acc((gw - mean_g - h * mean_gx) * inv));
    }
    for ((s, &(h, _)), g) in dw.iter_mut().zip(tmp.iter()).zip(g) {
        *s = *s + g.to_acc() * h;
    }
    if let Some(db) = db {
        for (s, g) in db.iter_mut().zip(g) {
            *s = *s + g.to_acc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    /// Inputs in `[-2, 2)` shifted by `shift`, a fresh stream per seed.
    fn random(n: usize, seed: u64, shift: f64) -> Vec<f64> {
        crate::random::SplitMix64::new(seed).uniforms(n, shift - 2.0, shift + 2.0)
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

    /// `(dx, dweight, dbias)` of `op` in `U` on the values of `x`, `w`,
    /// `g` (rows of `len`), as f64.
    fn backward<U: CpuFloat>(
        op: NormOp,
        (x, w, g): (&[f64], &[f64], &[f64]),
        len: usize,
        eps: f64,
    ) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let conv = |v: &[f64]| -> Vec<U> { v.iter().map(|&v| U::from_f64(v)).collect() };
        let back = |v: &[U]| -> Vec<f64> { v.iter().map(|v| v.to_f64()).collect() };
        let (x, w, g) = (conv(x), conv(w), conv(g));
        let lx = Layout::contiguous(&[x.len() / len.max(1), len]);
        let lw = Layout::contiguous(&[len]);
        let (dx, dw, db) = norm_backward(op, (&x, &lx), (&w, &lw), (&g, &lx), eps);
        assert_eq!(db.is_some(), op.has_bias());
        (
            back(&dx),
            back(&dw),
            db.map(|d| back(&d)).unwrap_or_default(),
        )
    }

    /// `sum(g * op(x))` in f64, the loss whose gradients the backward gives.
    fn loss(op: NormOp, x: &[f64], w: &[f64], b: &[f64], g: &[f64], eps: f64) -> f64 {
        let len = w.len();
        x.chunks(len)
            .zip(g.chunks(len))
            .map(|(x, g)| {
                let y = op.eval_f64(x, w, b, eps);
                y.iter().zip(g).map(|(y, g)| y * g).sum::<f64>()
            })
            .sum()
    }

    /// The gradients of [`loss`] by f64 central finite differences.
    fn finite_differences(
        op: NormOp,
        x: &[f64],
        w: &[f64],
        b: &[f64],
        g: &[f64],
        eps: f64,
    ) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let h = 1e-5;
        let len = w.len();
        let mut dx = vec![0.0; x.len()];
        for (i, d) in dx.iter_mut().enumerate() {
            // Only the element's own row moves.
            let r = i / len * len..(i / len + 1) * len;
            let mut row = x[r.clone()].to_vec();
            let at = |v: f64, row: &mut Vec<f64>| {
                row[i % len] = v;
                loss(op, row, w, b, &g[r.clone()], eps)
            };
            *d = (at(x[i] + h, &mut row) - at(x[i] - h, &mut row)) / (2.0 * h);
        }
        let param = |p: &[f64], f: &dyn Fn(&[f64]) -> f64| -> Vec<f64> {
            (0..p.len())
                .map(|j| {
                    let mut q = p.to_vec();
                    q[j] = p[j] + h;
                    let up = f(&q);
                    q[j] = p[j] - h;
                    (up - f(&q)) / (2.0 * h)
                })
                .collect()
        };
        let dw = param(w, &|w| loss(op, x, w, b, g, eps));
        let db = if op.has_bias() {
            param(b, &|b| loss(op, x, w, b, g, eps))
        } else {
            Vec::new()
        };
        (dx, dw, db)
    }

    fn close(what: &str, got: &[f64], want: &[f64], tol: f64) {
        assert_eq!(got.len(), want.len(), "{what}");
        let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
        for (i, (g, e)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - e).abs() <= tol * scale,
                "{what} [{i}]: {g} vs {e} (scale {scale})"
            );
        }
    }

    #[test]
    fn backward_matches_finite_differences_in_f64() {
        let mut seed = 10;
        for op in NormOp::ALL {
            for (rows_n, len) in [(1, 1), (3, 2), (2, 3), (5, 7), (4, 33), (2, 130)] {
                for eps in [1e-5, 0.1] {
                    seed += 3;
                    let x = random(rows_n * len, seed, 0.5);
                    let w = random(len, seed + 1, 0.0);
                    let b = random(len, seed + 2, 0.0);
                    let g = random(rows_n * len, seed + 3, 0.0);
                    let what = format!("{} {rows_n}x{len} eps {eps}", op.name());
                    let (dx, dw, db) = backward::<f64>(op, (&x, &w, &g), len, eps);
                    let (ex, ew, eb) = finite_differences(op, &x, &w, &b, &g, eps);
                    close(&format!("{what} dx"), &dx, &ex, 1e-6);
                    close(&format!("{what} dweight"), &dw, &ew, 1e-6);
                    close(&format!("{what} dbias"), &db, &eb, 1e-6);
                }
            }
        }
    }

    #[test]
    fn backward_matches_the_f64_reference_in_every_float_dtype() {
        fn check<U: CpuFloat>(op: NormOp, rows_n: usize, len: usize, shift: f64, tol: f64) {
            let round = |v: Vec<f64>| -> Vec<f64> {
                v.into_iter().map(|v| U::from_f64(v).to_f64()).collect()
            };
            let seed = (rows_n * 31 + len) as u64;
            let x = round(random(rows_n * len, seed, shift));
            let w = round(random(len, seed + 1, 0.0));
            let g = round(random(rows_n * len, seed + 2, 0.0));
            let (dx, dw, db) = backward::<U>(op, (&x, &w, &g), len, 1e-5);
            let (ex, ew, eb) = backward::<f64>(op, (&x, &w, &g), len, 1e-5);
            let what = format!(
                "{} {} {rows_n}x{len} shift {shift}",
                op.name(),
                std::any::type_name::<U>()
            );
            close(&format!("{what} dx"), &dx, &ex, tol);
            // The column sums add `rows_n` rounded terms.
            let sum_tol = tol * (rows_n as f64).sqrt();
            close(&format!("{what} dweight"), &dw, &ew, sum_tol);
            close(&format!("{what} dbias"), &db, &eb, sum_tol);
        }
        for op in NormOp::ALL {
            for (rows_n, len) in [(1, 1), (9, 5), (33, 64), (17, 1000), (3, 8192)] {
                for shift in [0.0, 100.0] {
                    check::<f32>(op, rows_n, len, shift, 1e-4);
                    check::<f16>(op, rows_n, len, shift, 3e-2);
                    check::<bf16>(op, rows_n, len, shift, 1e-1);
                }
            }
        }
    }

    #[test]
    fn backward_of_many_rows_is_deterministic() {
        // Enough rows for the parallel path; the column sums do not
        // depend on how the rows were split among threads.
        let (rows_n, len) = (700, 300);
        let x = random(rows_n * len, 5, 0.0);
        let w = random(len, 6, 0.0);
        let g = random(rows_n * len, 7, 0.0);
        for op in NormOp::ALL {
            let a = backward::<f32>(op, (&x, &w, &g), len, 1e-5);
            let b = backward::<f32>(op, (&x, &w, &g), len, 1e-5);
            assert!(a == b, "{}", op.name());
            let e = backward::<f64>(op, (&x, &w, &g), len, 1e-5);
            close("dx", &a.0, &e.0, 1e-4);
            close("dweight", &a.1, &e.1, 1e-3);
            close("dbias", &a.2, &e.2, 1e-3);
        }
    }

    #[test]
    fn backward_edge_cases() {
        // No rows: no dx, zero weight and bias gradients.
        for op in NormOp::ALL {
            let (dx, dw, db) = backward::<f32>(op, (&[], &[1.0; 4], &[]), 4, 1e-5);
            assert!(dx.is_empty() && dw == [0.0; 4], "{}", op.name());
            assert_eq!(db, if op.has_bias() { vec![0.0; 4] } else { vec![] });
            // Rows of no element.
            let (dx, dw, db) = backward::<f32>(op, (&[], &[], &[]), 0, 1e-5);
            assert!(dx.is_empty() && dw.is_empty() && db.is_empty());
        }
        // Rows of one element: layer_norm's output is its bias, so dx and
        // dweight are 0; rms_norm's is `w * x / sqrt(x^2 + eps)`.
        let (dx, dw, db) = backward::<f64>(
            NormOp::LayerNorm,
            (&[3.0, -2.0], &[2.0], &[1.0, 5.0]),
            1,
            1e-5,
        );
        assert_eq!((dx, dw, db), (vec![0.0, 0.0], vec![0.0], vec![6.0]));
        let (x, w, g) = ([3.0, -2.0], [2.0], [1.0, 5.0]);
        let (dx, dw, _) = backward::<f64>(NormOp::RmsNorm, (&x, &w, &g), 1, 1e-5);
        let (ex, ew, _) = finite_differences(NormOp::RmsNorm, &x, &w, &[], &g, 1e-5);
        close("rms_norm len 1 dx", &dx, &ex, 1e-6);
        close("rms_norm len 1 dweight", &dw, &ew, 1e-6);
        // A constant row: layer_norm's deviations are 0, so `dx` is
        // `(g * w - mean(g * w)) / sqrt(eps)` and `dweight` 0.
        let (dx, dw, db) = backward::<f32>(
            NormOp::LayerNorm,
            (&[7.0; 4], &[1.0, 2.0, 3.0, 4.0], &[1.0; 4]),
            4,
            0.25,
        );
        assert_eq!(dx, [-3.0, -1.0, 1.0, 3.0]);
        assert_eq!((dw, db), (vec![0.0; 4], vec![1.0; 4]));
        // Large values in f32: the statistics do not cancel.
        let x: Vec<f64> = (0..256).map(|i| 1e4 + (i % 4) as f64 * 0.25).collect();
        let g = random(256, 9, 0.0);
        for op in NormOp::ALL {
            let got = backward::<f32>(op, (&x, &[1.0; 256], &g), 256, 1e-5);
            let want = backward::<f64>(op, (&x, &[1.0; 256], &g), 256, 1e-5);
            close("large dx", &got.0, &want.0, 1e-3);
            close("large dweight", &got.1, &want.1, 1e-3);
        }
        // A NaN or an infinity in a row makes that row's dx NaN and leaves
        // the other rows alone.
        for op in NormOp::ALL {
            for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
                let x = [1.0, bad, 2.0, 1.0, 2.0, 4.0];
                let (dx, dw, _) = backward::<f32>(op, (&x, &[1.0; 3], &[1.0; 6]), 3, 1e-5);
                assert!(
                    dx[..3].iter().all(|v| v.is_nan()),
                    "{} {bad}: {dx:?}",
                    op.name()
                );
                assert!(
                    dx[3..].iter().all(|v| v.is_finite()),
                    "{} {bad}: {dx:?}",
                    op.name()
                );
                assert!(dw.iter().any(|v| v.is_nan()), "{} {bad}: {dw:?}", op.name());
            }
        }
        // Signed zeros in the input with eps > 0: finite gradients.
        for op in NormOp::ALL {
            let (dx, _, _) = backward::<f64>(op, (&[0.0, -0.0], &[1.0; 2], &[1.0, 2.0]), 2, 1e-5);
            assert!(dx.iter().all(|v| v.is_finite()), "{} {dx:?}", op.name());
        }
    }
}
