//! `rope` of contiguous rows: each pair `(j, j + D/2)` of a row rotated
//! by its position's `cos` and `sin`, in the accumulation precision (f32
//! for f16/bf16), rounded once; rows in parallel for large inputs.

use super::buffer::output_buffer;
use super::copy::contiguous;
use super::scalar::CpuFloat;
use super::strided::PAR_THRESHOLD;
use crate::layout::Layout;
use std::borrow::Cow;
use std::mem::MaybeUninit;

fn dense<'a, U: CpuFloat>(x: &'a [U], l: &Layout) -> Cow<'a, [U]> {
    if l.is_contiguous() {
        Cow::Borrowed(&x[l.offset()..l.offset() + l.numel()])
    } else {
        Cow::Owned(contiguous(x, l))
    }
}

/// `rope` of `x` (`[.., T, D]`) with `cos` and `sin` (`[T, D]`), as a
/// contiguous buffer of `l`'s dims.
pub(crate) fn rope<U: CpuFloat>(
    (x, l): (&[U], &Layout),
    (c, lc): (&[U], &Layout),
    (s, ls): (&[U], &Layout),
) -> Vec<U> {
    let n = l.numel();
    let mut out = output_buffer(n);
    if n == 0 {
        return out;
    }
    let (x, c, s) = (dense(x, l), dense(c, lc), dense(s, ls));
    let dims = l.dims();
    let d = dims[dims.len() - 1];
    let t = dims[dims.len() - 2];
    let half = d / 2;
    let c: Vec<U::Acc> = c.iter().map(|v| v.to_acc()).collect();
    let s: Vec<U::Acc> = s.iter().map(|v| v.to_acc()).collect();
    let slots = &mut out.spare_capacity_mut()[..n];
    // Whole positions per task: a task's first row is at position 0.
    let rows_per_task = ((PAR_THRESHOLD / d).max(1)).div_ceil(t) * t;
    let work = |o: &mut [MaybeUninit<U>], i: &[U]| {
        for (r, (o, x)) in o.chunks_exact_mut(d).zip(i.chunks_exact(d)).enumerate() {
            let p = (r % t) * d;
            let (c, s) = (&c[p..p + d], &s[p..p + d]);
            for j in 0..half {
                let (x1, x2) = (x[j].to_acc(), x[j + half].to_acc());
                o[j].write(U::from_acc(x1 * c[j] - x2 * s[j]));
                o[j + half].write(U::from_acc(x2 * c[j + half] + x1 * s[j + half]));
            }
        }
    };
    if n >= PAR_THRESHOLD && n > rows_per_task * d {
        super::par::zip_chunks_mut(slots, rows_per_task * d, &x, rows_per_task * d, &work);
    } else {
        work(slots, &x);
    }
    // SAFETY: every pair of every row was written above.
    unsafe { out.set_len(n) };
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;
    use tensorfn_core::ops::rope::rope_f64;

    #[test]
    fn matches_the_reference_and_broadcasts_over_leading_dims() {
        let (b, t, d) = (3, 5, 8);
        let v = |n: usize, k: f64| -> Vec<f64> {
            (0..n).map(|i| ((i as f64) * k).sin() * 2.0).collect()
        };
        let (x, c, s) = (v(b * t * d, 0.7), v(t * d, 1.3), v(t * d, 2.1));
        let conv = |v: &[f64]| -> Vec<bf16> { v.iter().map(|&x| bf16::from_f64(x)).collect() };
        let (xb, cb, sb) = (conv(&x), conv(&c), conv(&s));
        let y = rope(
            (&xb, &Layout::contiguous(&[b, t, d])),
            (&cb, &Layout::contiguous(&[t, d])),
            (&sb, &Layout::contiguous(&[t, d])),
        );
        let back = |v: &[bf16]| -> Vec<f64> { v.iter().map(|x| x.to_f64()).collect() };
        let (xr, cr, sr) = (back(&xb), back(&cb), back(&sb));
        for r in 0..b * t {
            let p = (r % t) * d;
            let want = rope_f64(&xr[r * d..(r + 1) * d], &cr[p..p + d], &sr[p..p + d]);
            for (g, w) in y[r * d..(r + 1) * d].iter().zip(&want) {
                assert!(
                    (g.to_f64() - w).abs() <= 8e-3 * (1.0 + w.abs()),
                    "{g} vs {w}"
                );
            }
        }
    }

    #[test]
    fn large_inputs_split_on_whole_positions() {
        let (b, t, d) = (40, 33, 64);
        let x: Vec<f32> = (0..b * t * d).map(|i| (i % 7) as f32).collect();
        let c: Vec<f32> = (0..t * d).map(|i| (i % 5) as f32 * 0.25).collect();
        let s: Vec<f32> = (0..t * d).map(|i| (i % 3) as f32 * 0.5).collect();
        let y = rope(
            (&x, &Layout::contiguous(&[b, t, d])),
            (&c, &Layout::contiguous(&[t, d])),
            (&s, &Layout::contiguous(&[t, d])),
        );
        for r in 0..b * t {
            let p = (r % t) * d;
            let xs: Vec<f64> = x[r * d..(r + 1) * d].iter().map(|&v| v as f64).collect();
            let cs: Vec<f64> = c[p..p + d].iter().map(|&v| v as f64).collect();
            let ss: Vec<f64> = s[p..p + d].iter().map(|&v| v as f64).collect();
            let want = rope_f64(&xs, &cs, &ss);
            for (g, w) in y[r * d..(r + 1) * d].iter().zip(&want) {
                assert_eq!(*g as f64, *w, "row {r}");
            }
        }
    }
}
