//! The CPU's scatter-add (`index_add`, `scatter_add`, and the gradients
//! of `embedding`, `index_select` and `gather`): every index checked
//! first, then the additions in the order of the positions, into an f32
//! accumulator for f16, bf16 and f32 (rounded once at the end) and an f64
//! one for f64, as the GPU accumulates.

use super::gather::check_extents;
use super::strided::check_extent;
use crate::backend::{Gathered, Selected};
use crate::dtype::DType;
use crate::error::Result;
use crate::layout::Layout;

/// See `Backend::scatter_add`.
pub(crate) fn scatter_add<T: DType, I: DType>(
    out: &mut [T],
    lo: &Layout,
    sel: Selected,
    (src, ls): (&[T], &Layout),
    (idx, li): (&[I], &Layout),
    alpha: f64,
) -> Result<Gathered<()>> {
    check_extents(lo, sel, out.len(), li, idx.len())?;
    if lo.numel() == 0 {
        return Ok(Ok(()));
    }
    check_extent("scatter_add", ls, src.len())?;
    // Every target, checked before anything is written.
    let mut targets = Vec::with_capacity(lo.numel());
    for (o, i) in lo.offsets().zip(li.offsets()) {
        let k = idx[i].to_i64();
        if k < 0 || k as u64 >= sel.size as u64 {
            return Ok(Err(k));
        }
        targets.push(o + k as usize * sel.stride);
    }
    if std::mem::size_of::<T>() == 8 {
        let mut acc: Vec<f64> = out.iter().map(|v| v.to_f64()).collect();
        for (t, s) in targets.iter().zip(ls.offsets()) {
            acc[*t] += alpha * src[s].to_f64();
        }
        for (o, a) in out.iter_mut().zip(acc) {
            *o = T::from_f64(a);
        }
    } else {
        let alpha = alpha as f32;
        let mut acc: Vec<f32> = out.iter().map(|v| v.to_f64() as f32).collect();
        for (t, s) in targets.iter().zip(ls.offsets()) {
            acc[*t] += alpha * src[s].to_f64() as f32;
        }
        for (o, a) in out.iter_mut().zip(acc) {
            *o = T::from_f64(a as f64);
        }
    }
    Ok(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Repeated indices add up; an index out of range leaves the output
    /// as it was.
    #[test]
    fn repeats_add_up_and_a_bad_index_writes_nothing() {
        // index_add along dim 0 of a [3, 2] table by [2, 0, 2].
        let mut out = vec![1.0f32; 6];
        let lo = Layout::new(vec![3, 2], vec![0, 1], 0);
        let sel = Selected { stride: 2, size: 3 };
        let src: Vec<f32> = (0..6).map(|v| v as f32).collect();
        let ls = Layout::contiguous(&[3, 2]);
        let li = Layout::new(vec![3, 2], vec![1, 0], 0);
        let idx = vec![2i64, 0, 2];
        scatter_add(&mut out, &lo, sel, (&src, &ls), (&idx, &li), 2.0)
            .unwrap()
            .unwrap();
        assert_eq!(out, vec![5., 7., 1., 1., 9., 13.]);
        let bad = vec![2i64, 3, 0];
        let before = out.clone();
        let r = scatter_add(&mut out, &lo, sel, (&src, &ls), (&bad, &li), 1.0).unwrap();
        assert_eq!(r, Err(3));
        assert_eq!(out, before);
    }
}
