//! The CPU's gather (`index_select`, `gather`, `embedding`): whole rows
//! at a time where the source's innermost dim is contiguous and the index
//! does not change along it (`embedding`, `index_select` off the last
//! dim), else one element at a time.

use crate::backend::{Gathered, Selected};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::Layout;

use super::par;

/// Below this many bytes of output the rows are copied on the calling
/// thread: waking other threads costs more than it saves.
const PARALLEL_BYTES: usize = 2 << 20;

/// Checks that `lx` with every index of `sel` stays inside `x_len`
/// elements (when `sel` is not empty) and `li` inside `idx_len`.
pub(crate) fn check_extents(
    lx: &Layout,
    sel: Selected,
    x_len: usize,
    li: &Layout,
    idx_len: usize,
) -> Result<()> {
    if lx.numel() == 0 {
        return Ok(());
    }
    // An empty dim is never read (every index is out of range).
    let reach = (sel.size.max(1) - 1)
        .checked_mul(sel.stride)
        .and_then(|r| r.checked_add(lx.storage_extent()));
    let x_past = sel.size > 0 && reach.is_none_or(|r| r > x_len);
    if x_past || li.storage_extent() > idx_len {
        return Err(Error::Index(format!(
            "gather: internal views {:?} (strides {:?}, {} along a dim of stride {}) and {:?} (strides {:?}) reach past buffers of {x_len} and {idx_len} elements",
            lx.dims(),
            lx.strides(),
            sel.size,
            sel.stride,
            li.dims(),
            li.strides()
        )));
    }
    Ok(())
}

/// See `Backend::gather`.
pub(crate) fn gather<T: DType, I: DType>(
    x: &[T],
    lx: &Layout,
    sel: Selected,
    idx: &[I],
    li: &Layout,
) -> Result<Gathered<Vec<T>>> {
    check_extents(lx, sel, x.len(), li, idx.len())?;
    let n = lx.numel();
    let mut out: Vec<T> = Vec::new();
    out.try_reserve_exact(n)
        .map_err(|_| Error::HostOutOfMemory {
            requested: n.saturating_mul(std::mem::size_of::<T>()),
        })?;
    if n == 0 {
        return Ok(Ok(out));
    }
    let valid = |k: i64| k >= 0 && (k as u64) < sel.size as u64;
    let rank = lx.rank();
    if rank > 0 && lx.strides()[rank - 1] == 1 && li.strides()[rank - 1] == 0 {
        let row = lx.dims()[rank - 1];
        let outer = |l: &Layout| {
            Layout::new(
                l.dims()[..rank - 1].to_vec(),
                l.strides()[..rank - 1].to_vec(),
                l.offset(),
            )
        };
        let (ox, oi) = (outer(lx), outer(li));
        // Every row's start, the indices checked before anything is copied.
        let mut starts = Vec::with_capacity(n / row);
        for (xo, io) in ox.offsets().zip(oi.offsets()) {
            let k = idx[io].to_i64();
            if !valid(k) {
                return Ok(Err(k));
            }
            starts.push(xo + k as usize * sel.stride);
        }
        let threads = rayon::current_num_threads();
        if n * std::mem::size_of::<T>() < PARALLEL_BYTES || threads < 2 || starts.len() < 2 {
            for s in starts {
                out.extend_from_slice(&x[s..s + row]);
            }
        } else {
            out.resize(n, T::zero());
            let rows_per = starts.len().div_ceil(threads * 4).max(1);
            par::chunks_mut(&mut out, rows_per * row, &|c, chunk| {
                for (j, dst) in chunk.chunks_mut(row).enumerate() {
                    let s = starts[c * rows_per + j];
                    dst.copy_from_slice(&x[s..s + row]);
                }
            });
        }
    } else {
        for (xo, io) in lx.offsets().zip(li.offsets()) {
            let k = idx[io].to_i64();
            if !valid(k) {
                return Ok(Err(k));
            }
            out.push(x[xo + k as usize * sel.stride]);
        }
    }
    Ok(Ok(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Row by row (above the parallel threshold) and element by element,
    /// against a plain loop.
    #[test]
    fn large_row_gathers_match_a_plain_loop() {
        let (v, e, ids) = (300usize, 1024usize, 1500usize);
        let x: Vec<f32> = (0..v * e).map(|i| i as f32).collect();
        let idx: Vec<i64> = (0..ids).map(|i| ((i * 7919) % v) as i64).collect();
        let dims = [ids, e];
        let lx = Layout::new(dims.to_vec(), vec![0, 1], 0);
        let li = Layout::new(dims.to_vec(), vec![1, 0], 0);
        let sel = Selected { stride: e, size: v };
        let got = gather(&x, &lx, sel, &idx, &li).unwrap().unwrap();
        assert!(got.len() * 4 >= PARALLEL_BYTES);
        let want: Vec<f32> = idx
            .iter()
            .flat_map(|&k| x[k as usize * e..(k as usize + 1) * e].iter().copied())
            .collect();
        assert_eq!(got, want);
        // One bad id anywhere is found before anything is copied.
        let mut bad = idx.clone();
        bad[ids - 1] = v as i64;
        assert_eq!(gather(&x, &lx, sel, &bad, &li).unwrap(), Err(v as i64));
        // Element by element: the index changes along the row.
        let li = Layout::new(vec![2, 3], vec![3, 1], 0);
        let lx = Layout::new(vec![2, 3], vec![0, 1], 0);
        let got = gather(&x, &lx, Selected { stride: e, size: v }, &idx[..6], &li)
            .unwrap()
            .unwrap();
        let want: Vec<f32> = (0..6).map(|i| x[idx[i] as usize * e + i % 3]).collect();
        assert_eq!(got, want);
    }
}
