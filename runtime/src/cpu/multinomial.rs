//! Seeded `multinomial` on the CPU, the reference the GPU kernel
//! (`tensorfn_kernels::builtin::multinomial`) follows operation for
//! operation: per row, the weights in f64, their total summed in order,
//! draw `j` of row `r` the uniform `uniform(seed, r * n + j)` scaled by
//! the total, and the category the first whose running sum (in order)
//! passes it. Without replacement a drawn category's weight is zeroed and
//! the total summed again. Every step is an exact or correctly rounded
//! f64 operation in a fixed order, so both devices pick the same indices.

use super::copy::contiguous;
use crate::backend::MultinomialFault;
use crate::dtype::DType;
use crate::layout::Layout;
use tensorfn_core::ops::dropout::bits;

/// The uniform in `[0, 1)` of draw `index` under `seed`: `dropout`'s 32
/// bits of `(seed, index)` over 2^32 (exact in f64).
pub(crate) fn uniform(seed: u64, index: u64) -> f64 {
    bits(seed, index) as f64 * (1.0 / 4_294_967_296.0)
}

/// The category of one draw: the first whose running sum of `w` passes
/// `target`, or the last positive one should rounding leave none.
fn pick(w: &[f64], target: f64) -> usize {
    let mut acc = 0.0;
    let mut last = 0;
    for (c, &v) in w.iter().enumerate() {
        if v > 0.0 {
            acc += v;
            last = c;
            if acc > target {
                return c;
            }
        }
    }
    last
}

/// The sum of `w` in order.
fn total(w: &[f64]) -> f64 {
    w.iter().fold(0.0, |a, &v| a + v)
}

/// Row `r`'s `out.len()` draws from its weights `w` (changed in place
/// without replacement), or the row's fault.
fn draw_row(
    w: &mut [f64],
    r: usize,
    replacement: bool,
    seed: u64,
    out: &mut [i64],
) -> Result<(), MultinomialFault> {
    if w.iter().any(|v| !(v.is_finite() && *v >= 0.0)) {
        return Err(MultinomialFault::Weight);
    }
    let mut sum = total(w);
    if !sum.is_finite() {
        return Err(MultinomialFault::Weight);
    }
    if sum == 0.0 {
        return Err(MultinomialFault::ZeroSum);
    }
    if !replacement && w.iter().filter(|&&v| v > 0.0).count() < out.len() {
        return Err(MultinomialFault::TooFew);
    }
    let n = out.len() as u64;
    for (j, o) in out.iter_mut().enumerate() {
        if !replacement && j > 0 {
            sum = total(w);
        }
        let c = pick(w, uniform(seed, r as u64 * n + j as u64) * sum);
        *o = c as i64;
        if !replacement {
            w[c] = 0.0;
        }
    }
    Ok(())
}

/// See `Backend::multinomial`: the draws, or the worst fault of any row
/// (the GPU's report too).
pub(crate) fn multinomial<T: DType>(
    x: &[T],
    l: &Layout,
    num_samples: usize,
    replacement: bool,
    seed: u64,
) -> Result<Vec<i64>, MultinomialFault> {
    let cols = l.dims().last().copied().unwrap_or(1);
    let rows = l.numel().checked_div(cols).unwrap_or(0);
    let dense = contiguous(x, l);
    let mut out = vec![0i64; rows * num_samples];
    let mut worst = None;
    let mut w = vec![0.0; cols];
    for r in 0..rows {
        for (d, v) in w.iter_mut().zip(&dense[r * cols..(r + 1) * cols]) {
            *d = v.to_f64();
        }
        let o = &mut out[r * num_samples..(r + 1) * num_samples];
        if let Err(f) = draw_row(&mut w, r, replacement, seed, o) {
            worst = worst.max(Some(f));
        }
    }
    match worst {
        Some(f) => Err(f),
        None => Ok(out),
    }
}
