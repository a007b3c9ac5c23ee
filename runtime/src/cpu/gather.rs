//! The CPU's gather (`index_select`, `gather`, `embedding`): whole rows
//! at a time where the source's innermost dim is contiguous and the index
//! does not change along it (`embedding`, `index_select` off the last
//! dim), else one element at a time.

use crate::backend::{Gathered, Selected};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::Layout;

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
        for (xo, io) in ox.offsets().zip(oi.offsets()) {
            let k = idx[io].to_i64();
            if !valid(k) {
                return Ok(Err(k));
            }
            let s = xo + k as usize * sel.stride;
            out.extend_from_slice(&x[s..s + row]);
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
